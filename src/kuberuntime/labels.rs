//! The CRI labels and annotations picolet puts on sandboxes and containers. Names and formats
//! are the kubelet's, so `crictl` shows picolet's pods as it shows a kubelet's, and so a
//! restarted picolet can read back what it created (hash, restart count) and adopt it.

use std::collections::HashMap;

pub const POD_NAME: &str = "io.kubernetes.pod.name";
pub const POD_NAMESPACE: &str = "io.kubernetes.pod.namespace";
pub const POD_UID: &str = "io.kubernetes.pod.uid";
pub const CONTAINER_NAME: &str = "io.kubernetes.container.name";
pub const CONTAINER_HASH: &str = "io.kubernetes.container.hash";
pub const CONTAINER_RESTART_COUNT: &str = "io.kubernetes.container.restartCount";
pub const TERMINATION_MESSAGE_PATH: &str = "io.kubernetes.container.terminationMessagePath";
pub const TERMINATION_MESSAGE_POLICY: &str = "io.kubernetes.container.terminationMessagePolicy";
pub const TERMINATION_GRACE_PERIOD: &str = "io.kubernetes.pod.terminationGracePeriod";
pub const CONTAINER_PORTS: &str = "io.kubernetes.container.ports";
/// The container's preStop hook as JSON, so it runs even when the pod spec is gone.
pub const PRE_STOP_HANDLER: &str = "io.kubernetes.container.preStopHandler";

/// Marks the sandboxes and containers picolet creates. picolet lists, adopts and cleans up only
/// objects carrying it, so a kubelet sharing the same containerd keeps its pods.
pub const MANAGED: &str = "io.picolet.managed";

/// The node whose picolet created the object. Several nodes may share one containerd (a test
/// rig, a board running two node names): each lists and cleans up only its own objects. Objects
/// without it (made by picolet before it was added) count as this node's.
pub const NODE: &str = "io.picolet.node";

/// Whether a listed object is this node's picolet's: marked, and of this node or of none.
pub fn owned_by(labels: &Map, node: &str) -> bool {
    labels.get(MANAGED).is_some_and(|v| v == "true") && labels.get(NODE).is_none_or(|n| n == node)
}

pub type Map = HashMap<String, String>;

/// Labels on a pod sandbox: the pod's own labels plus its identity.
pub fn sandbox_labels(
    pod_labels: &std::collections::BTreeMap<String, String>,
    name: &str,
    ns: &str,
    uid: &str,
    node: &str,
) -> Map {
    let mut m: Map = pod_labels
        .iter()
        .map(|(k, v)| (k.clone(), v.clone()))
        .collect();
    m.insert(POD_NAME.into(), name.into());
    m.insert(POD_NAMESPACE.into(), ns.into());
    m.insert(POD_UID.into(), uid.into());
    m.insert(MANAGED.into(), "true".into());
    m.insert(NODE.into(), node.into());
    m
}

pub fn container_labels(container: &str, name: &str, ns: &str, uid: &str, node: &str) -> Map {
    let mut m = Map::new();
    m.insert(POD_NAME.into(), name.into());
    m.insert(POD_NAMESPACE.into(), ns.into());
    m.insert(POD_UID.into(), uid.into());
    m.insert(CONTAINER_NAME.into(), container.into());
    m.insert(MANAGED.into(), "true".into());
    m.insert(NODE.into(), node.into());
    m
}

/// The hash is written as lowercase hex, as the kubelet writes it.
pub fn format_hash(h: u64) -> String {
    format!("{h:x}")
}

pub fn parse_hash(annotations: &Map) -> u64 {
    annotations
        .get(CONTAINER_HASH)
        .and_then(|s| u64::from_str_radix(s, 16).ok())
        .unwrap_or(0)
}

pub fn parse_restart_count(annotations: &Map) -> u32 {
    annotations
        .get(CONTAINER_RESTART_COUNT)
        .and_then(|s| s.parse().ok())
        .unwrap_or(0)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn hash_round_trips() {
        let mut m = Map::new();
        m.insert(CONTAINER_HASH.into(), format_hash(0xdead_beef_0012));
        assert_eq!(parse_hash(&m), 0xdead_beef_0012);
        m.insert(CONTAINER_HASH.into(), "zz".into());
        assert_eq!(parse_hash(&m), 0);
    }

    #[test]
    fn restart_count_defaults_to_zero() {
        let mut m = Map::new();
        assert_eq!(parse_restart_count(&m), 0);
        m.insert(CONTAINER_RESTART_COUNT.into(), "7".into());
        assert_eq!(parse_restart_count(&m), 7);
    }

    #[test]
    fn identity_labels_override_pod_labels() {
        let mut pl = std::collections::BTreeMap::new();
        pl.insert(POD_UID.to_string(), "forged".to_string());
        pl.insert("app".to_string(), "web".to_string());
        let m = sandbox_labels(&pl, "n", "ns", "u", "node");
        assert_eq!(m[POD_UID], "u");
        assert_eq!(m["app"], "web");
    }

    #[test]
    fn objects_of_another_node_are_not_owned() {
        let mine = container_labels("c", "p", "ns", "u", "node-a");
        assert!(owned_by(&mine, "node-a"));
        assert!(!owned_by(&mine, "node-b"), "another node's picolet made it");
        let mut old = mine.clone();
        old.remove(NODE);
        assert!(owned_by(&old, "node-b"), "made before the label: anyone's");
        old.remove(MANAGED);
        assert!(!owned_by(&old, "node-a"), "not picolet's");
        let s = sandbox_labels(
            &[(NODE.to_owned(), "forged".to_owned())]
                .into_iter()
                .collect(),
            "p",
            "ns",
            "u",
            "node-a",
        );
        assert_eq!(s[NODE], "node-a", "a pod label cannot claim another node");
    }
}
