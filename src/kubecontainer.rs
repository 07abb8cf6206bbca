//! What the runtime says about a pod, in runtime-neutral terms: the input of action
//! computation, of the status generator and of the PLEG cache.
//!
//! Kept compact on purpose (the PLEG cache holds one of these per pod): strings are boxed,
//! times are unix nanoseconds.

/// A sandbox's state as the runtime reports it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum SandboxState {
    Ready,
    NotReady,
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SandboxStatus {
    pub id: Box<str>,
    pub attempt: u32,
    pub state: SandboxState,
    pub created_at: i64,
    /// The pod IP; `None` for host-network pods and sandboxes without networking.
    pub ip: Option<Box<str>>,
    /// True when the sandbox shares the node's network namespace.
    pub host_network: bool,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ContainerState {
    Created,
    Running,
    Exited,
    Unknown,
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ContainerStatus {
    pub id: Box<str>,
    /// The sandbox the container belongs to.
    pub sandbox_id: Box<str>,
    pub name: Box<str>,
    pub state: ContainerState,
    pub created_at: i64,
    pub started_at: i64,
    pub finished_at: i64,
    pub exit_code: i32,
    /// The image as the pod spec named it.
    pub image: Box<str>,
    /// The image ID the runtime resolved it to.
    pub image_ref: Box<str>,
    pub reason: Box<str>,
    pub message: Box<str>,
    /// Container spec hash picolet recorded when it created the container.
    pub hash: u64,
    pub restart_count: u32,
}

/// Everything the runtime holds for one pod UID.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct PodRuntimeStatus {
    pub uid: Box<str>,
    pub name: Box<str>,
    pub namespace: Box<str>,
    /// Newest first.
    pub sandboxes: Vec<SandboxStatus>,
    /// Newest first within each name.
    pub containers: Vec<ContainerStatus>,
}

impl PodRuntimeStatus {
    /// The newest status of the container with this name.
    pub fn latest(&self, name: &str) -> Option<&ContainerStatus> {
        self.containers
            .iter()
            .filter(|c| &*c.name == name)
            .max_by_key(|c| c.created_at)
    }

    pub fn running(&self) -> impl Iterator<Item = &ContainerStatus> {
        self.containers
            .iter()
            .filter(|c| c.state == ContainerState::Running)
    }

    pub fn ip(&self) -> Option<&str> {
        self.sandboxes.first().and_then(|s| s.ip.as_deref())
    }
}

/// Hash of what identifies a running container's spec (upstream's `HashContainer`, beside the
/// runtime-neutral types), recorded on the container
/// (`io.kubernetes.container.hash`) so a change is noticed: its name and image, the fields the
/// kubelet hashes (the only ones of a running pod the API lets change). A picolet that
/// understands more fields therefore hashes an unchanged container the same.
pub fn container_hash(c: &crate::api::Container) -> u64 {
    let v = serde_json::json!({"image": c.image, "name": c.name});
    crate::hash::fnv1a64(&[crate::hash::canonical_json(&v).as_bytes()])
}

/// Whether a running container's recorded hash matches `c`: the current hash, or the one
/// picolet 0.1 recorded ([`legacy_container_hash`]), so an upgrade restarts no container.
pub fn hash_matches(c: &crate::api::Container, recorded: u64, current: u64) -> bool {
    recorded == current || recorded == legacy_container_hash(c)
}

/// The hash picolet 0.1 recorded: the whole spec, fields at their default (false, empty,
/// absent) left out. Still accepted for containers started before the upgrade; they get the
/// new hash when they next start.
pub fn legacy_container_hash(c: &crate::api::Container) -> u64 {
    fn prune(v: serde_json::Value) -> Option<serde_json::Value> {
        use serde_json::Value;
        match v {
            Value::Null | Value::Bool(false) => None,
            Value::String(s) if s.is_empty() => None,
            Value::Array(a) => {
                let a: Vec<Value> = a
                    .into_iter()
                    .map(|x| prune(x).unwrap_or(Value::Null))
                    .collect();
                (!a.is_empty()).then_some(Value::Array(a))
            }
            Value::Object(o) => {
                let o: serde_json::Map<String, Value> = o
                    .into_iter()
                    .filter_map(|(k, v)| prune(v).map(|v| (k, v)))
                    .collect();
                (!o.is_empty()).then_some(Value::Object(o))
            }
            v => Some(v),
        }
    }
    let v = serde_json::to_value(c)
        .ok()
        .and_then(prune)
        .unwrap_or_default();
    crate::hash::fnv1a64(&[crate::hash::canonical_json(&v).as_bytes()])
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::api::Container;

    #[test]
    fn container_hash_covers_the_name_and_the_image_only() {
        let a = Container {
            name: "c".into(),
            image: "busybox:1".into(),
            ..Default::default()
        };
        let mut b = a.clone();
        b.command = vec!["sleep".into(), "1".into()];
        b.env.push(crate::api::EnvVar {
            name: "X".into(),
            value: Some("1".into()),
            ..Default::default()
        });
        assert_eq!(container_hash(&a), container_hash(&b));
        b.image = "busybox:2".into();
        assert_ne!(container_hash(&a), container_hash(&b));
        let mut c = a.clone();
        c.name = "d".into();
        assert_ne!(container_hash(&a), container_hash(&c));
        // fixed value: the formula must never change silently (containers would restart)
        assert_eq!(
            container_hash(&a),
            crate::hash::fnv1a64(&[br#"{"image":"busybox:1","name":"c"}"#])
        );
    }

    #[test]
    fn a_container_started_under_the_old_hash_matches() {
        let a = Container {
            name: "c".into(),
            image: "busybox:1".into(),
            command: vec!["sleep".into(), "9".into()],
            ..Default::default()
        };
        let now = container_hash(&a);
        assert!(hash_matches(&a, now, now));
        assert!(hash_matches(&a, legacy_container_hash(&a), now));
        let mut b = a.clone();
        b.image = "busybox:2".into();
        assert!(!hash_matches(
            &b,
            legacy_container_hash(&a),
            container_hash(&b)
        ));
        assert!(!hash_matches(&b, now, container_hash(&b)));
    }

    #[test]
    fn legacy_container_hash_ignores_default_fields_but_sees_changes() {
        let a = Container {
            name: "c".into(),
            image: "busybox:1".into(),
            ..Default::default()
        };
        let mut b = a.clone();
        b.tty = false;
        b.stdin = false;
        assert_eq!(legacy_container_hash(&a), legacy_container_hash(&b));
        b.image = "busybox:2".into();
        assert_ne!(legacy_container_hash(&a), legacy_container_hash(&b));
        let mut c = a.clone();
        c.command = vec!["sleep".into(), "1".into()];
        assert_ne!(legacy_container_hash(&a), legacy_container_hash(&c));
    }
}
