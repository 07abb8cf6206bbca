//! The encoding asked of the apiserver (`contentType`), a setting read in every build and used
//! by the apiserver client (feature `apiserver`).

/// The encoding asked of the apiserver: the kubelet's `contentType` (`--kube-api-content-type`).
/// picolet writes JSON (the apiserver takes patches in JSON only) and reads whole objects in
/// JSON; with `Protobuf` the answers to its writes, read for their metadata alone, come in
/// protobuf.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum ContentType {
    Json,
    #[default]
    Protobuf,
}

impl ContentType {
    pub fn parse(s: &str) -> Result<ContentType, String> {
        match s {
            "application/json" => Ok(ContentType::Json),
            "application/vnd.kubernetes.protobuf" => Ok(ContentType::Protobuf),
            other => Err(format!(
                "{other:?}: not one of application/vnd.kubernetes.protobuf, application/json"
            )),
        }
    }

    pub fn as_str(self) -> &'static str {
        match self {
            ContentType::Json => "application/json",
            ContentType::Protobuf => "application/vnd.kubernetes.protobuf",
        }
    }
}
