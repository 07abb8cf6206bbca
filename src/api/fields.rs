//! The standard Pod fields the decoder does not model, and what becomes of each: ignored (as
//! the kubelet ignores it on a node: the scheduler's, the apiserver's or the controllers'
//! business) or refused (picolet does not apply it and the pod would run differently). A field
//! in neither the structs of [`super::pod`] nor this table is not a Pod field at all, and only
//! that is reported as unknown. `docs/pod-fields.md` lists every field of the schema; a test
//! keeps the two and the schema in step.

/// What picolet does with a field.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Treatment {
    /// Accepted and left alone, as upstream leaves it on a node.
    Ignored,
    /// Refused with this reason.
    Refused(&'static str),
    /// Accepted with one of these values (what picolet does anyway), else refused with the
    /// reason.
    Only(&'static [&'static str], &'static str),
}

use Treatment::{Ignored, Only, Refused};

/// Field paths (arrays as `[]`) with their treatment; a path covers the fields below it.
/// Containers' rows cover init and ephemeral containers too.
const NOT_MODELLED: &[(&str, Treatment)] = &[
    // The apiserver's bookkeeping.
    ("metadata.finalizers", Ignored),
    ("metadata.generateName", Ignored),
    ("metadata.managedFields", Ignored),
    ("metadata.selfLink", Ignored),
    // The scheduler's and admission's business, done before a pod reaches a node.
    ("spec.automountServiceAccountToken", Ignored),
    ("spec.preemptionPolicy", Ignored),
    ("spec.schedulerName", Ignored),
    ("spec.schedulingGates", Ignored),
    ("spec.schedulingGroup", Ignored),
    ("spec.topologySpreadConstraints", Ignored),
    ("spec.evictionResponders", Ignored),
    ("spec.serviceAccount", Ignored),
    // No SELinux, not Windows.
    ("spec.securityContext.seLinuxChangePolicy", Ignored),
    ("spec.securityContext.windowsOptions", Ignored),
    ("spec.containers[].securityContext.windowsOptions", Ignored),
    (
        "spec.containers[].stdinOnce",
        Only(&["false"], "picolet keeps stdin open across attaches"),
    ),
    (
        "spec.containers[].env[].valueFrom.fileKeyRef",
        Refused("environment variables from a file in a volume are not supported by picolet"),
    ),
    (
        "spec.containers[].lifecycle.stopSignal",
        Refused("picolet stops containers with the image's stop signal"),
    ),
    (
        "spec.containers[].lifecycle.postStart.httpGet.protocol",
        Only(&["HTTP/1.1"], "picolet's httpGet hooks speak HTTP/1.1 only"),
    ),
    (
        "spec.containers[].lifecycle.preStop.httpGet.protocol",
        Only(&["HTTP/1.1"], "picolet's httpGet hooks speak HTTP/1.1 only"),
    ),
    (
        "spec.containers[].livenessProbe.httpGet.protocol",
        Only(
            &["HTTP/1.1"],
            "picolet's httpGet probes speak HTTP/1.1 only",
        ),
    ),
    (
        "spec.containers[].readinessProbe.httpGet.protocol",
        Only(
            &["HTTP/1.1"],
            "picolet's httpGet probes speak HTTP/1.1 only",
        ),
    ),
    (
        "spec.containers[].startupProbe.httpGet.protocol",
        Only(
            &["HTTP/1.1"],
            "picolet's httpGet probes speak HTTP/1.1 only",
        ),
    ),
    (
        "spec.containers[].livenessProbe.grpc.mode",
        Only(&["Plaintext"], "picolet's grpc probes are plaintext only"),
    ),
    (
        "spec.containers[].readinessProbe.grpc.mode",
        Only(&["Plaintext"], "picolet's grpc probes are plaintext only"),
    ),
    (
        "spec.containers[].startupProbe.grpc.mode",
        Only(&["Plaintext"], "picolet's grpc probes are plaintext only"),
    ),
    (
        "spec.containers[].resources.claims",
        Refused("dynamic resource allocation is not supported by picolet"),
    ),
    (
        "spec.containers[].securityContext.procMount",
        Only(
            &["Default"],
            "picolet passes no proc mount type to the runtime",
        ),
    ),
    (
        "spec.containers[].volumeDevices",
        Refused("block volumes are not supported by picolet"),
    ),
    (
        "spec.containers[].volumeMounts[].bindMountOptions",
        Refused("bind mount options are not supported by picolet"),
    ),
    (
        "spec.containers[].volumeMounts[].recursiveReadOnly",
        Only(
            &["Disabled"],
            "picolet does not make read-only mounts recursive",
        ),
    ),
    (
        "spec.hostnameOverride",
        Refused("picolet names a pod's host from hostname and subdomain only"),
    ),
    (
        "spec.resourceClaims",
        Refused("dynamic resource allocation is not supported by picolet"),
    ),
    (
        "spec.volumes[].emptyDir.mode",
        Refused("picolet makes every emptyDir mode 0777"),
    ),
    // Written by picolet, not read from a manifest.
    ("status", Ignored),
];

/// `spec.containers[3].ports[0].name` as `spec.containers[].ports[].name`.
pub fn generic(path: &str) -> String {
    let mut out = String::with_capacity(path.len());
    let mut in_index = false;
    for ch in path.chars() {
        match ch {
            '[' => {
                in_index = true;
                out.push('[');
            }
            ']' => {
                in_index = false;
                out.push(']');
            }
            _ if in_index => {}
            _ => out.push(ch),
        }
    }
    out
}

/// The treatment of a field the decoder reported as not modelled (a path as the decoder writes
/// it), by the longest entry covering it; `None` for a field that is no Pod field.
pub fn treatment(path: &str) -> Option<Treatment> {
    let g = generic(path);
    // Init and ephemeral containers are containers.
    let g = g
        .replacen("spec.initContainers[]", "spec.containers[]", 1)
        .replacen("spec.ephemeralContainers[]", "spec.containers[]", 1);
    NOT_MODELLED
        .iter()
        .filter(|(p, _)| {
            g == *p || (g.starts_with(p) && matches!(g.as_bytes().get(p.len()), Some(b'.' | b'[')))
        })
        .max_by_key(|(p, _)| p.len())
        .map(|(_, t)| *t)
}

/// The value at a decoder's path (`spec.containers[0].stdinOnce`) in the document.
fn value_at<'a>(doc: &'a serde_json::Value, path: &str) -> Option<&'a serde_json::Value> {
    let mut v = doc;
    for part in path.split('.') {
        let (key, rest) = part.split_once('[').unwrap_or((part, ""));
        v = v.get(key)?;
        for idx in rest.split('[') {
            if let Some(i) = idx.strip_suffix(']') {
                v = v.get(i.parse::<usize>().ok()?)?;
            }
        }
    }
    Some(v)
}

/// Sorts the fields the decoder did not model: refusals as field errors, fields that are no
/// Pod field as the second list. Fields ignored as upstream ignores them are in neither.
pub fn check(
    unknown: &[String],
    document: &serde_json::Value,
) -> (Vec<super::FieldError>, Vec<String>) {
    let (mut refused, mut not_pod) = (Vec::new(), Vec::new());
    for path in unknown {
        let why = match treatment(path) {
            None => {
                not_pod.push(path.clone());
                continue;
            }
            Some(Ignored) => continue,
            Some(Refused(why)) => why,
            Some(Only(allowed, why)) => {
                let fine = match value_at(document, path) {
                    None | Some(serde_json::Value::Null) => true,
                    Some(serde_json::Value::String(s)) => allowed.contains(&s.as_str()),
                    Some(v) => allowed.contains(&v.to_string().as_str()),
                };
                if fine {
                    continue;
                }
                why
            }
        };
        let value = value_at(document, path)
            .map(|v| match v {
                serde_json::Value::String(s) => s.clone(),
                v => v.to_string(),
            })
            .unwrap_or_default();
        refused.push(super::FieldError {
            path: path.clone(),
            value: if value.len() > 64 {
                String::new()
            } else {
                value
            },
            message: format!("not supported: {why}"),
        });
    }
    (refused, not_pod)
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::{Map, Value};

    const SCHEMA: &str = include_str!("../../tests/data/pod-fields-v1.37.txt");

    /// A pod document with `path` set to null, every level above it created.
    fn document(path: &str) -> Value {
        fn put(v: &mut Value, parts: &[&str]) {
            let Some((first, rest)) = parts.split_first() else {
                return;
            };
            let (key, array) = match first.strip_suffix("[]") {
                Some(k) => (k, true),
                None => (*first, false),
            };
            let obj = v.as_object_mut().unwrap();
            if rest.is_empty() {
                obj.insert(key.to_owned(), Value::Null);
                return;
            }
            let mut child = Value::Object(Map::new());
            put(&mut child, rest);
            obj.insert(
                key.to_owned(),
                if array {
                    Value::Array(vec![child])
                } else {
                    child
                },
            );
        }
        let mut v = serde_json::json!({"apiVersion": "v1", "kind": "Pod"});
        let parts: Vec<&str> = path.split('.').collect();
        if !matches!(path, "apiVersion" | "kind") {
            put(&mut v, &parts);
        }
        v
    }

    /// Whether the decoder models the field (or the opaque value above it): set to null, it
    /// is not reported as unknown.
    fn modelled(path: &str) -> bool {
        let doc = document(path).to_string();
        match crate::api::decode_pod(doc.as_bytes(), crate::api::Format::Json) {
            Ok(d) => {
                let p = path.trim_end_matches("[]");
                !d.unknown_fields.iter().any(|u| {
                    let u = generic(u);
                    p == u || p.starts_with(&format!("{u}.")) || p.starts_with(&format!("{u}["))
                })
            }
            // A type error: the decoder knows the field and wants a value.
            Err(_) => true,
        }
    }

    const DOC: &str = include_str!("../../docs/pod-fields.md");

    /// A schema path as the doc writes it: init containers under containers.
    fn doc_path(p: &str) -> String {
        p.replacen("spec.initContainers[]", "spec.containers[]", 1)
    }

    /// The doc's rows: path and status.
    fn rows() -> std::collections::BTreeMap<String, String> {
        let mut out = std::collections::BTreeMap::new();
        for line in DOC.lines().filter(|l| l.starts_with("| `")) {
            let cells: Vec<&str> = line.split('|').map(str::trim).collect();
            let path = cells[1].trim_matches('`').to_owned();
            assert!(
                out.insert(path.clone(), cells[2].to_owned()).is_none(),
                "{path} has two rows"
            );
        }
        out
    }

    #[test]
    fn every_schema_field_has_a_row_with_a_status() {
        let rows = rows();
        let schema: std::collections::BTreeSet<String> = SCHEMA.lines().map(doc_path).collect();
        assert!(schema.len() > 400, "{}", schema.len());
        for p in &schema {
            let st = rows
                .get(p)
                .unwrap_or_else(|| panic!("{p}: no row in docs/pod-fields.md"));
            assert!(
                matches!(st.as_str(), "honoured" | "refused" | "ignored"),
                "{p}: status {st:?}"
            );
        }
        for p in rows.keys() {
            assert!(schema.contains(p), "{p}: a row for a path the schema lacks");
        }
    }

    #[test]
    fn fields_the_decoder_does_not_model_are_treated_as_the_doc_says() {
        let rows = rows();
        let mut unmodelled = 0;
        for p in SCHEMA.lines().filter(|p| !modelled(p)) {
            unmodelled += 1;
            let t = treatment(p.trim_end_matches("[]"))
                .unwrap_or_else(|| panic!("{p}: a Pod field the decoder would call unknown"));
            let want = match t {
                Ignored => "ignored",
                Refused(_) | Only(..) => "refused",
            };
            assert_eq!(rows[&doc_path(p)], want, "{p}");
        }
        assert!(unmodelled > 10, "{unmodelled}");
        for (p, t) in NOT_MODELLED {
            let row = rows
                .iter()
                .find(|(r, _)| r.trim_end_matches("[]") == *p)
                .unwrap_or_else(|| panic!("{p}: not in the doc"));
            let want = if *t == Ignored { "ignored" } else { "refused" };
            assert_eq!(row.1, want, "{p}");
        }
    }

    #[test]
    fn standard_fields_are_never_unknown() {
        let doc = serde_json::json!({
            "apiVersion": "v1", "kind": "Pod",
            "metadata": {"name": "a", "finalizers": ["x"], "generation": 3},
            "spec": {
                "schedulerName": "default-scheduler",
                "topologySpreadConstraints": [{"maxSkew": 1}],
                "enableServiceLinks": true,
                "containers": [{"name": "c", "image": "i", "stdinOnce": false,
                    "securityContext": {"procMount": "Default"},
                    "livenessProbe": {"grpc": {"port": 1, "mode": "Plaintext"}},
                    "mystery": 1}],
                "initContainers": [{"name": "i", "image": "i",
                    "securityContext": {"procMount": "Unmasked"}}],
                "hostnameOverride": "other"
            }
        });
        let d =
            crate::api::decode_pod(doc.to_string().as_bytes(), crate::api::Format::Json).unwrap();
        let (refused, unknown) = check(&d.unknown_fields, &d.document);
        assert_eq!(unknown, vec!["spec.containers[0].mystery".to_owned()]);
        let got: Vec<String> = refused.iter().map(ToString::to_string).collect();
        assert_eq!(
            got,
            vec![
                "spec.hostnameOverride: not supported: picolet names a pod's host from hostname and subdomain only: \"other\"".to_owned(),
                "spec.initContainers[0].securityContext.procMount: not supported: picolet passes no proc mount type to the runtime: \"Unmasked\"".to_owned(),
            ]
        );
    }
}
