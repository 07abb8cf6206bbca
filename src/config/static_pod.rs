//! Static pod identity and defaults.
//!
//! A static pod's name becomes `<name>-<node name, lowercased>`, its namespace defaults to
//! `default`, `spec.nodeName` is set and a NoExecute toleration added, as upstream does.
//!
//! Its UID is picolet's own stable hash (upstream hashes Go-internal bytes, which nobody can
//! reproduce): 32 lowercase hex digits of FNV-1a 128 over
//! `"picolet/static-pod/v1" NUL <source path> NUL <node name> NUL <canonical JSON of the manifest>`,
//! where the canonical JSON is the manifest document as parsed (YAML or JSON), with object keys
//! sorted and no whitespace. Formatting, key order and comments therefore do not change a UID; any
//! change of content does (the pod is replaced, as upstream replaces it). This definition is fixed:
//! a later picolet computes the same UIDs, so an upgrade never restarts static pods. The same
//! value is written to the `kubernetes.io/config.hash` annotation.

use crate::api::{Pod, Toleration};
use crate::hash;

use super::{ANNOTATION_CONFIG_HASH, ANNOTATION_CONFIG_SEEN, ANNOTATION_CONFIG_SOURCE, Source};

const UID_DOMAIN: &[u8] = b"picolet/static-pod/v1";

/// The static pod UID for a manifest document found at `source_path`.
pub fn uid(doc: &serde_json::Value, source_path: &str, node_name: &str) -> String {
    let canon = hash::canonical_json(doc);
    let h = hash::fnv1a128(&[
        UID_DOMAIN,
        b"\0",
        source_path.as_bytes(),
        b"\0",
        node_name.as_bytes(),
        b"\0",
        canon.as_bytes(),
    ]);
    format!("{h:032x}")
}

/// The pod's full name on this node.
pub fn static_name(name: &str, node_name: &str) -> String {
    format!("{name}-{}", node_name.to_lowercase())
}

/// Applies the defaults the API server would apply to a pod it stores, for the fields picolet
/// acts on or reports.
pub fn apply_api_defaults(pod: &mut Pod) {
    let s = &mut pod.spec;
    s.restart_policy
        .get_or_insert(crate::api::RestartPolicy::Always);
    s.termination_grace_period_seconds.get_or_insert(30);
    s.dns_policy
        .get_or_insert_with(|| "ClusterFirst".to_owned());
    for c in s.init_containers.iter_mut().chain(s.containers.iter_mut()) {
        c.image_pull_policy = Some(crate::kuberuntime::image::effective_policy(c));
        c.termination_message_path
            .get_or_insert_with(|| "/dev/termination-log".to_owned());
        c.termination_message_policy
            .get_or_insert_with(|| "File".to_owned());
        for p in &mut c.ports {
            p.protocol.get_or_insert_with(|| "TCP".to_owned());
        }
        // Requests default to limits.
        let limits = c.resources.limits.clone();
        for (k, v) in limits {
            c.resources.requests.entry(k).or_insert(v);
        }
    }
}

/// Turns a decoded, validated manifest into the static pod picolet runs.
pub fn apply_identity(pod: &mut Pod, uid: String, node_name: &str, source: Source, seen: &str) {
    let m = &mut pod.metadata;
    m.name = static_name(&m.name, node_name);
    if m.namespace.is_empty() {
        m.namespace = "default".to_owned();
    }
    m.annotations
        .insert(ANNOTATION_CONFIG_HASH.to_owned(), uid.clone());
    m.annotations.insert(
        ANNOTATION_CONFIG_SOURCE.to_owned(),
        source.as_str().to_owned(),
    );
    m.annotations
        .insert(ANNOTATION_CONFIG_SEEN.to_owned(), seen.to_owned());
    m.uid = uid;
    pod.spec.node_name = Some(node_name.to_owned());
    let tol = Toleration {
        operator: Some("Exists".to_owned()),
        effect: Some("NoExecute".to_owned()),
        ..Default::default()
    };
    // Added or updated as the kubelet's AddOrUpdateTolerationInPod: one that matches by key,
    // operator, value and effect (whatever its tolerationSeconds) is replaced, not duplicated.
    let same = |t: &Toleration| {
        t.key == tol.key
            && t.operator == tol.operator
            && t.value == tol.value
            && t.effect == tol.effect
    };
    match pod.spec.tolerations.iter_mut().find(|t| same(t)) {
        Some(t) => *t = tol,
        None => pod.spec.tolerations.push(tol),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn doc(s: &str) -> serde_json::Value {
        yaml_serde::from_str(s).unwrap()
    }

    #[test]
    fn uid_is_stable_across_formatting_and_changes_with_content() {
        let a = doc("apiVersion: v1\nkind: Pod\nmetadata: {name: web}\n# comment\n");
        let b = doc("kind: Pod\nmetadata:\n  name: web\napiVersion: v1\n");
        let c = doc("apiVersion: v1\nkind: Pod\nmetadata: {name: web2}\n");
        assert_eq!(
            uid(&a, "/etc/k/web.yaml", "n1"),
            uid(&b, "/etc/k/web.yaml", "n1")
        );
        assert_ne!(
            uid(&a, "/etc/k/web.yaml", "n1"),
            uid(&c, "/etc/k/web.yaml", "n1")
        );
        assert_ne!(
            uid(&a, "/etc/k/web.yaml", "n1"),
            uid(&a, "/etc/k/other.yaml", "n1")
        );
        assert_ne!(
            uid(&a, "/etc/k/web.yaml", "n1"),
            uid(&a, "/etc/k/web.yaml", "n2")
        );
        assert_eq!(uid(&a, "/etc/k/web.yaml", "n1").len(), 32);
    }

    #[test]
    fn uid_is_stable_when_a_long_number_is_written_again() {
        // Found by fuzzing (fuzz/fuzz_targets/static_pod_uid.rs): a number beyond f64's
        // precision, parsed, written in its shortest form and parsed again, must give the same
        // document, or reformatting such a file would replace its pod.
        let json = |s: &str| serde_json::from_str::<serde_json::Value>(s).unwrap();
        let a = json(r#"{"x":-5555555455555555555555555555555555555555555555555555555}"#);
        let b = json(&serde_json::to_string_pretty(&a).unwrap());
        assert_eq!(uid(&a, "/m/p.json", "n"), uid(&b, "/m/p.json", "n"));
        let c = json(r#"{"x":1.7976931348623157e308,"y":2.2250738585072014e-308,"z":0.1}"#);
        let d = json(&serde_json::to_string(&c).unwrap());
        // and YAML reads the same number as JSON does
        assert_eq!(
            a,
            doc("x: -5555555455555555555555555555555555555555555555555555555")
        );
        assert_eq!(uid(&c, "/m/p.json", "n"), uid(&d, "/m/p.json", "n"));
    }

    #[test]
    fn uid_is_pinned() {
        // Changing this value restarts every static pod on upgrade: it must never change.
        let a = doc("apiVersion: v1\nkind: Pod\nmetadata: {name: web}\n");
        assert_eq!(
            uid(&a, "/etc/kubernetes/manifests/web.yaml", "edge-1"),
            PINNED_UID
        );
    }
    const PINNED_UID: &str = "089f991a145ab974aeb4c8e6b43432c2";

    #[test]
    fn identity() {
        let mut p = Pod::default();
        p.metadata.name = "web".into();
        apply_identity(
            &mut p,
            "u".into(),
            "Edge-Node",
            Source::File,
            "2024-01-01T00:00:00Z",
        );
        assert_eq!(p.metadata.name, "web-edge-node");
        assert_eq!(p.metadata.namespace, "default");
        assert_eq!(p.metadata.uid, "u");
        assert_eq!(p.spec.node_name.as_deref(), Some("Edge-Node"));
        assert_eq!(p.metadata.annotations[ANNOTATION_CONFIG_SOURCE], "file");
        assert_eq!(p.metadata.annotations[ANNOTATION_CONFIG_HASH], "u");
        assert_eq!(p.spec.tolerations.len(), 1);
        apply_identity(&mut p, "u".into(), "x", Source::File, "t");
        assert_eq!(p.spec.tolerations.len(), 1, "toleration is added once");
    }

    #[test]
    fn defaults() {
        let mut p: Pod = yaml_serde::from_str(
            "spec:\n  containers:\n  - name: a\n    image: nginx\n    ports: [{containerPort: 80}]\n    resources: {limits: {cpu: 500m}}\n",
        )
        .unwrap();
        apply_api_defaults(&mut p);
        let c = &p.spec.containers[0];
        assert_eq!(c.image_pull_policy, Some(crate::api::PullPolicy::Always));
        assert_eq!(c.ports[0].protocol.as_deref(), Some("TCP"));
        assert_eq!(c.resources.requests["cpu"].milli_value(), 500);
        assert_eq!(
            p.spec.restart_policy,
            Some(crate::api::RestartPolicy::Always)
        );
        assert_eq!(p.spec.termination_grace_period_seconds, Some(30));
    }
}
