//! The Node subset picolet writes: its taints (the rest of the Node is built as JSON by
//! `cluster::node`).

/// A node taint (`spec.taints[]`), as `--register-with-taints` gives it and admission weighs
/// pods' tolerations against it.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize)]
pub struct Taint {
    pub key: String,
    #[serde(skip_serializing_if = "String::is_empty")]
    pub value: String,
    pub effect: String,
}
