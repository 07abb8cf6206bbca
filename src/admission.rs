//! Pod admission: the kubelet's general predicates, decided once when a pod is first seen.
//!
//! Pure: the node as [`NodeInfo`] (its name, labels, taints, allocatable cpu, memory and pod
//! count, and the sysctls pods may set), the pods already admitted, and the pod in; a
//! [`Rejection`] with upstream's reason and message out. The checks and their order are
//! upstream's: the sysctls against the allowlist first (`pkg/kubelet/sysctl`), then
//! `pkg/kubelet/lifecycle/predicate.go` with the scheduler's NodeResourcesFit, NodeAffinity,
//! NodeName and NodePorts plugins: the `kubernetes.io/os` label and `spec.os`, then resources
//! (pods, cpu, memory, ephemeral storage), the node
//! selector with the required node affinity, the node name, the host ports, and for pods that
//! are not static the NoExecute taints; then the features the pod needs against those the node
//! declares (`declared_features`); the first failure is the one reported.

use std::borrow::Cow;
use std::collections::BTreeMap;
use std::sync::{Arc, Mutex};

use crate::api::{NodeSelectorRequirement, NodeSelectorTerm, Pod, Taint};
use crate::cm::resources::pod_request;

/// What admission knows of the node.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct NodeInfo {
    pub name: String,
    /// The well-known labels and `--node-labels`: the labels until the apiserver's Node is
    /// read ([`NodeInfo::seen`]).
    pub labels: BTreeMap<String, String>,
    /// `--register-with-taints` (only NoExecute ones matter here, as upstream), until the
    /// apiserver's Node is read whole.
    pub taints: Vec<Taint>,
    /// Allocatable CPU in millicores.
    pub milli_cpu: i64,
    /// Allocatable memory in bytes.
    pub memory: i64,
    /// Allocatable ephemeral storage in bytes (`--root-dir`'s filesystem).
    pub ephemeral_storage: i64,
    /// How many pods the node runs at most.
    pub pods: i64,
    /// The sysctls (and `prefix*` patterns) pods may set: [`sysctl_allowlist`].
    pub sysctls: Vec<String>,
    /// Why the runtime cannot mount image volumes, when it cannot (found at start from its
    /// version).
    pub no_image_volumes: Option<String>,
    /// The Node as the apiserver last showed it, shared with the tasks that read it.
    pub seen: SeenNode,
}

/// The labels and taints of the node's Node object as last read from the apiserver: what
/// admission weighs pods against once known, as upstream's kubelet admits against the Node of
/// its node lister. A label or taint set with `kubectl` counts from the next read: every status
/// report's answer carries the labels, and the pod source reads the Node whole before it hands
/// over a pod the scheduler placed here that does not fit the labels and taints known
/// ([`NodeInfo::fits_placement`]). Clones share one view.
#[derive(Debug, Clone, Default)]
pub struct SeenNode(Arc<Mutex<Seen>>);

#[derive(Debug, Clone, Default, PartialEq, Eq)]
struct Seen {
    labels: Option<BTreeMap<String, String>>,
    taints: Option<Vec<Taint>>,
}

impl SeenNode {
    fn get(&self) -> Seen {
        self.0.lock().map(|s| s.clone()).unwrap_or_default()
    }

    /// The Node's labels, from an answer that carried them (a status report's metadata).
    pub fn set_labels(&self, labels: BTreeMap<String, String>) {
        if let Ok(mut s) = self.0.lock() {
            s.labels = Some(labels);
        }
    }

    /// The Node read whole: its labels and taints.
    pub fn set(&self, labels: BTreeMap<String, String>, taints: Vec<Taint>) {
        if let Ok(mut s) = self.0.lock() {
            *s = Seen {
                labels: Some(labels),
                taints: Some(taints),
            };
        }
    }

    /// Takes a Node's labels (and taints, when `spec` is there) from the JSON of an answer;
    /// false when it holds no Node metadata (the labels known stay).
    pub fn read(&self, node: &serde_json::Value) -> bool {
        let meta = &node["metadata"];
        if !meta["name"].is_string() {
            return false;
        }
        let labels: BTreeMap<String, String> = meta["labels"]
            .as_object()
            .map(|m| {
                m.iter()
                    .filter_map(|(k, v)| Some((k.clone(), v.as_str()?.to_owned())))
                    .collect()
            })
            .unwrap_or_default();
        match node.get("spec") {
            Some(spec) => {
                let text = |v: &serde_json::Value| v.as_str().unwrap_or_default().to_owned();
                let taints = spec["taints"]
                    .as_array()
                    .map(|ts| {
                        ts.iter()
                            .map(|t| Taint {
                                key: text(&t["key"]),
                                value: text(&t["value"]),
                                effect: text(&t["effect"]),
                            })
                            .collect()
                    })
                    .unwrap_or_default();
                self.set(labels, taints);
            }
            None => self.set_labels(labels),
        }
        true
    }
}

/// Two views are equal when they hold the same labels and taints.
impl PartialEq for SeenNode {
    fn eq(&self, other: &Self) -> bool {
        Arc::ptr_eq(&self.0, &other.0) || self.get() == other.get()
    }
}

impl Eq for SeenNode {}

/// The safe sysctls, each with the kernel release from which it is namespaced (upstream's
/// `pkg/kubelet/sysctl/safe_sysctls.go`).
const SAFE_SYSCTLS: &[(&str, (u32, u32))] = &[
    ("kernel.shm_rmid_forced", (0, 0)),
    ("net.ipv4.ip_local_port_range", (0, 0)),
    ("net.ipv4.tcp_syncookies", (0, 0)),
    ("net.ipv4.ping_group_range", (0, 0)),
    ("net.ipv4.ip_unprivileged_port_start", (0, 0)),
    ("net.ipv4.ip_local_reserved_ports", (3, 16)),
    ("net.ipv4.tcp_keepalive_time", (4, 5)),
    ("net.ipv4.tcp_fin_timeout", (4, 6)),
    ("net.ipv4.tcp_keepalive_intvl", (4, 5)),
    ("net.ipv4.tcp_keepalive_probes", (4, 5)),
    ("net.ipv4.tcp_rmem", (4, 15)),
    ("net.ipv4.tcp_wmem", (4, 15)),
    ("net.ipv4.tcp_slow_start_after_idle", (4, 15)),
    ("net.ipv4.tcp_notsent_lowat", (4, 6)),
];

/// The kernel namespace a sysctl (or a pattern's prefix, dotted) belongs to; `None` for one
/// that is not namespaced, which no pod may set.
fn sysctl_namespace(name: &str) -> Option<&'static str> {
    match name {
        "kernel.domainname" => return Some("UTS"),
        "kernel.sem"
        | "kernel.shmall"
        | "kernel.shmmax"
        | "kernel.shmmni"
        | "kernel.shm_rmid_forced"
        | "kernel.shm"
        | "kernel.msgmax"
        | "kernel.msgmnb"
        | "kernel.msgmni"
        | "kernel.msg" => return Some("IPC"),
        _ => {}
    }
    [("net.", "Net"), ("fs.mqueue.", "IPC"), ("user.", "User")]
        .into_iter()
        .find(|(p, _)| name.starts_with(p))
        .map(|(_, ns)| ns)
}

/// A sysctl name with '/' separators in the dotted form ('.' and '/' swap when the first
/// separator is a '/', as the kernel reads them).
pub fn normalize_sysctl(name: &str) -> String {
    match name.find(['.', '/']) {
        Some(i) if name.as_bytes()[i] == b'/' => name
            .chars()
            .map(|c| match c {
                '.' => '/',
                '/' => '.',
                c => c,
            })
            .collect(),
        _ => name.to_owned(),
    }
}

/// Whether `s` is a sysctl pattern upstream accepts: segments of `[a-z0-9]([-_a-z0-9]*[a-z0-9])?`
/// joined by '.' or '/', the last of which may end in '*'; at most 253 characters.
fn is_sysctl_pattern(s: &str) -> bool {
    let alnum = |c: u8| c.is_ascii_lowercase() || c.is_ascii_digit();
    let inner = |c: u8| alnum(c) || c == b'-' || c == b'_';
    let parts: Vec<&[u8]> = s.split(['.', '/']).map(str::as_bytes).collect();
    let Some((last, init)) = parts.split_last() else {
        return false;
    };
    let segment = |b: &[u8]| match (b.first(), b.last()) {
        (Some(&f), Some(&l)) => alnum(f) && alnum(l) && b.iter().all(|&c| inner(c)),
        _ => false,
    };
    let last_ok = match last.split_last() {
        Some((&end, rest)) => {
            (alnum(end) || end == b'*')
                && rest.first().is_none_or(|&f| alnum(f))
                && rest.iter().all(|&c| inner(c))
        }
        None => false,
    };
    s.len() <= 253 && last_ok && init.iter().all(|b| segment(b))
}

/// The sysctls pods may set on a node running kernel `release` (`/proc/sys/kernel/osrelease`):
/// the safe ones namespaced in that kernel and `allowedUnsafeSysctls`, each checked as upstream
/// does (a valid pattern, a namespaced sysctl); an error names the bad entry.
pub fn sysctl_allowlist(release: &str, unsafe_allowed: &[String]) -> Result<Vec<String>, String> {
    let mut nums = release
        .split(|c: char| !c.is_ascii_digit())
        .map(|n| n.parse::<u32>().ok());
    let kernel = match (nums.next().flatten(), nums.next().flatten()) {
        (Some(a), Some(b)) => (a, b),
        _ => (0, 0),
    };
    let mut out: Vec<String> = SAFE_SYSCTLS
        .iter()
        .filter(|(_, since)| kernel >= *since)
        .map(|(n, _)| (*n).to_owned())
        .collect();
    for p in unsafe_allowed {
        if !is_sysctl_pattern(p) {
            return Err(format!(
                "sysctl {p:?} must have at most 253 characters and match regex ([a-z0-9]([-_a-z0-9]*[a-z0-9])?[\\./])*([a-z0-9][-_a-z0-9]*)?[a-z0-9*]"
            ));
        }
        let n = normalize_sysctl(p);
        let prefix = n.split('*').next().unwrap_or_default();
        if sysctl_namespace(prefix).is_none() {
            return Err(format!(
                "the sysctls {prefix:?} are not known to be namespaced"
            ));
        }
        out.push(n);
    }
    Ok(out)
}

/// The first of the pod's sysctls the node does not allow (not in the allowlist, or of a
/// namespace the pod shares with the host), upstream's message.
fn forbidden_sysctl(pod: &Pod, allowed: &[String]) -> Option<String> {
    let sc = pod.spec.security_context.as_ref()?;
    let host_users = pod.spec.host_users.unwrap_or(true);
    sc.sysctls.iter().find_map(|s| {
        let name = normalize_sysctl(&s.name);
        let hit = allowed.iter().find(|a| match a.strip_suffix('*') {
            Some(prefix) => name.starts_with(prefix),
            None => **a == name,
        });
        let Some(a) = hit else {
            return Some(format!("{name:?} not allowlisted"));
        };
        let ns = sysctl_namespace(a.trim_end_matches('*'));
        let shared = match ns {
            Some("IPC") => pod.spec.host_ipc,
            Some("Net") => pod.spec.host_network,
            Some("User") => host_users,
            _ => false,
        };
        shared.then(|| {
            format!(
                "{name:?} not allowed with host {} enabled",
                ns.unwrap_or_default()
            )
        })
    })
}

impl NodeInfo {
    /// The node with the labels and taints last read from the apiserver, where they were.
    pub fn as_seen(&self) -> Cow<'_, NodeInfo> {
        let seen = self.seen.get();
        if seen == Seen::default() {
            return Cow::Borrowed(self);
        }
        let mut n = self.clone();
        if let Some(l) = seen.labels {
            n.labels = l;
        }
        if let Some(t) = seen.taints {
            n.taints = t;
        }
        Cow::Owned(n)
    }

    /// Whether a pod the scheduler placed here fits the node's labels and NoExecute taints as
    /// known: when it does not, the node's view is older than the scheduler's.
    pub fn fits_placement(&self, pod: &Pod) -> bool {
        let node = self.as_seen();
        matches_node_affinity(pod, &node) && tolerates_no_execute(pod, &node.taints)
    }

    /// The node's labels: `kubernetes.io/hostname`, `kubernetes.io/os`, `kubernetes.io/arch`
    /// (and their `beta.` forms), then `--node-labels`, which may override them.
    pub fn node_labels(name: &str, extra: &[(String, String)]) -> BTreeMap<String, String> {
        let arch = crate::node::goarch();
        let mut l = BTreeMap::new();
        l.insert("kubernetes.io/hostname".to_owned(), name.to_owned());
        l.insert("kubernetes.io/os".to_owned(), "linux".to_owned());
        l.insert("kubernetes.io/arch".to_owned(), arch.to_owned());
        l.insert("beta.kubernetes.io/os".to_owned(), "linux".to_owned());
        l.insert("beta.kubernetes.io/arch".to_owned(), arch.to_owned());
        for (k, v) in extra {
            l.insert(k.clone(), v.clone());
        }
        l
    }
}

/// Why a pod was not admitted: the status's reason and the message after "Pod was rejected: ".
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Rejection {
    pub reason: String,
    pub message: String,
}

fn predicate(name: &str, desc: &str) -> Rejection {
    Rejection {
        reason: name.to_owned(),
        message: format!("Predicate {name} failed: {desc}"),
    }
}

fn insufficient(resource: &str, requested: i64, used: i64, capacity: i64) -> Rejection {
    Rejection {
        reason: format!("OutOf{resource}"),
        message: format!(
            "Node didn't have enough resource: {resource}, requested: {requested}, used: {used}, capacity: {capacity}"
        ),
    }
}

/// Decides whether `pod` may run beside the pods already admitted (`admitted`, active ones:
/// not finished, not stopping, not rejected).
pub fn admit(pod: &Pod, node: &NodeInfo, admitted: &[&Pod]) -> Result<(), Rejection> {
    let node = &*node.as_seen();
    if let Some(e) = forbidden_sysctl(pod, &node.sysctls) {
        return Err(Rejection {
            reason: "SysctlForbidden".into(),
            message: format!("forbidden sysctl: {e}"),
        });
    }
    if pod
        .metadata
        .labels
        .get("kubernetes.io/os")
        .is_some_and(|os| os != "linux")
    {
        return Err(Rejection {
            reason: "PodOSSelectorNodeLabelDoesNotMatch".into(),
            message: "Failed to admit pod as the `kubernetes.io/os` label doesn't match node label"
                .into(),
        });
    }
    if pod.spec.os.as_ref().is_some_and(|os| os.name != "linux") {
        return Err(Rejection {
            reason: "PodOSNotSupported".into(),
            message: "Failed to admit pod as the OS field doesn't match node OS".into(),
        });
    }
    fits_resources(pod, node, admitted)?;
    if !matches_node_affinity(pod, node) {
        return Err(predicate(
            "NodeAffinity",
            "node(s) didn't match Pod's node affinity/selector",
        ));
    }
    if pod
        .spec
        .node_name
        .as_deref()
        .is_some_and(|n| !n.is_empty() && n != node.name)
    {
        return Err(predicate(
            "NodeName",
            "node(s) didn't match the requested node name",
        ));
    }
    if !ports_free(pod, admitted) {
        return Err(predicate(
            "NodePorts",
            "node(s) didn't have free ports for the requested pod ports",
        ));
    }
    if !is_static(pod) && !tolerates_no_execute(pod, &node.taints) {
        return Err(predicate(
            "TaintToleration",
            "node(s) had taints that the pod didn't tolerate",
        ));
    }
    if let Some(why) = &node.no_image_volumes
        && let Some((name, src)) = pod
            .spec
            .volumes
            .iter()
            .find_map(|v| v.image.as_ref().map(|i| (&v.name, i)))
    {
        // Not upstream's (its kubelet lets the runtime fail the container): refused here so
        // the pod says why once instead of failing at every start.
        return Err(Rejection {
            reason: IMAGE_VOLUME_UNSUPPORTED.into(),
            message: format!(
                "image volume {name:?} (image {:?}) cannot be mounted: {why}",
                src.reference
            ),
        });
    }
    // Last, as upstream adds its handler after the predicates.
    features_declared(pod, &crate::declared_features::declared())
}

/// The reason of a pod refused for an image volume the runtime cannot mount.
pub const IMAGE_VOLUME_UNSUPPORTED: &str = "ImageVolumeUnsupported";

/// Upstream's declared-features admission handler: a pod needing a feature not in `declared`
/// (what the node declares, `declared_features`) is rejected with reason `PodFeatureUnsupported`.
fn features_declared(pod: &Pod, declared: &[&str]) -> Result<(), Rejection> {
    let missing: Vec<&str> = crate::declared_features::required(pod)
        .into_iter()
        .filter(|f| !declared.contains(f))
        .collect();
    if missing.is_empty() {
        return Ok(());
    }
    Err(Rejection {
        reason: "PodFeatureUnsupported".into(),
        message: format!(
            "Pod requires node features that are not available: {}",
            missing.join(", ")
        ),
    })
}

fn is_static(pod: &Pod) -> bool {
    pod.metadata
        .annotations
        .get(crate::config::ANNOTATION_CONFIG_SOURCE)
        .is_some_and(|s| s != "api")
}

fn fits_resources(pod: &Pod, node: &NodeInfo, admitted: &[&Pod]) -> Result<(), Rejection> {
    let used_pods = i64::try_from(admitted.len()).unwrap_or(i64::MAX);
    if used_pods.saturating_add(1) > node.pods {
        return Err(insufficient("pods", 1, used_pods, node.pods));
    }
    let resources = [
        ("cpu", node.milli_cpu),
        ("memory", node.memory),
        ("ephemeral-storage", node.ephemeral_storage),
    ];
    for (res, capacity) in resources {
        let want = pod_request(pod, res);
        if want <= 0 {
            continue;
        }
        let used: i64 = admitted
            .iter()
            .map(|p| pod_request(p, res))
            .fold(0, i64::saturating_add);
        if want > capacity.saturating_sub(used) {
            return Err(insufficient(res, want, used, capacity));
        }
    }
    Ok(())
}

/// `nodeSelector` (every pair) and the required node affinity (any term).
pub fn matches_node_affinity(pod: &Pod, node: &NodeInfo) -> bool {
    let selector_ok = pod
        .spec
        .node_selector
        .iter()
        .all(|(k, v)| node.labels.get(k) == Some(v));
    if !selector_ok {
        return false;
    }
    let Some(required) = pod
        .spec
        .affinity
        .as_ref()
        .and_then(|a| a.node_affinity.as_ref())
        .and_then(|n| {
            n.required_during_scheduling_ignored_during_execution
                .as_ref()
        })
    else {
        return true;
    };
    required
        .node_selector_terms
        .iter()
        .any(|t| term_matches(t, node))
}

/// A term with no requirement matches nothing; an invalid requirement makes its term fail.
fn term_matches(t: &NodeSelectorTerm, node: &NodeInfo) -> bool {
    if t.match_expressions.is_empty() && t.match_fields.is_empty() {
        return false;
    }
    t.match_expressions
        .iter()
        .all(|r| requirement_matches(r, node.labels.get(&r.key).map(String::as_str)))
        && t.match_fields.iter().all(|r| {
            r.key == "metadata.name"
                && matches!(r.operator.as_str(), "In" | "NotIn")
                && r.values.len() == 1
                && requirement_matches(r, Some(&node.name))
        })
}

/// One requirement against the value of its key on the node (`None`: the node lacks it).
pub fn requirement_matches(r: &NodeSelectorRequirement, value: Option<&str>) -> bool {
    match r.operator.as_str() {
        "In" => !r.values.is_empty() && value.is_some_and(|v| r.values.iter().any(|x| x == v)),
        "NotIn" => !r.values.is_empty() && value.is_none_or(|v| r.values.iter().all(|x| x != v)),
        "Exists" => r.values.is_empty() && value.is_some(),
        "DoesNotExist" => r.values.is_empty() && value.is_none(),
        "Gt" | "Lt" => {
            let [bound] = r.values.as_slice() else {
                return false;
            };
            let (Ok(bound), Some(Ok(v))) = (bound.parse::<i64>(), value.map(str::parse::<i64>))
            else {
                return false;
            };
            if r.operator == "Gt" {
                v > bound
            } else {
                v < bound
            }
        }
        _ => false,
    }
}

/// (protocol, host IP, host port) of each host port a pod asks for; an empty IP is 0.0.0.0, an
/// empty protocol TCP.
fn host_ports(pod: &Pod) -> Vec<(String, String, i32)> {
    pod.spec
        .init_containers
        .iter()
        .chain(&pod.spec.containers)
        .flat_map(|c| &c.ports)
        .filter_map(|p| {
            let port = p.host_port.filter(|p| *p > 0)?;
            let ip = p
                .host_ip
                .as_deref()
                .filter(|i| !i.is_empty())
                .unwrap_or("0.0.0.0");
            let proto = p
                .protocol
                .as_deref()
                .filter(|p| !p.is_empty())
                .unwrap_or("TCP");
            Some((proto.to_owned(), ip.to_owned(), port))
        })
        .collect()
}

/// Two uses of one port and protocol conflict when either IP is the wildcard or both are the
/// same.
fn conflict(a: &(String, String, i32), b: &(String, String, i32)) -> bool {
    a.0 == b.0 && a.2 == b.2 && (a.1 == b.1 || a.1 == "0.0.0.0" || b.1 == "0.0.0.0")
}

fn ports_free(pod: &Pod, admitted: &[&Pod]) -> bool {
    let wanted = host_ports(pod);
    if wanted.is_empty() {
        return true;
    }
    let taken: Vec<_> = admitted.iter().flat_map(|p| host_ports(p)).collect();
    !wanted.iter().any(|w| taken.iter().any(|t| conflict(w, t)))
}

/// Every NoExecute taint of the node is tolerated.
fn tolerates_no_execute(pod: &Pod, taints: &[Taint]) -> bool {
    taints.iter().filter(|t| t.effect == "NoExecute").all(|t| {
        pod.spec.tolerations.iter().any(|tol| {
            let effect_ok = tol
                .effect
                .as_deref()
                .is_none_or(|e| e.is_empty() || e == t.effect);
            let key = tol.key.as_deref().unwrap_or("");
            match tol.operator.as_deref().unwrap_or("Equal") {
                "Exists" => effect_ok && (key.is_empty() || key == t.key),
                "Equal" | "" => {
                    effect_ok && key == t.key && tol.value.as_deref().unwrap_or("") == t.value
                }
                _ => false,
            }
        })
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::api::{
        Affinity, Container, ContainerPort, NodeAffinity, NodeSelector, Quantity,
        ResourceRequirements,
    };

    fn node() -> NodeInfo {
        let mut labels = NodeInfo::node_labels("edge-1", &[("disktype".into(), "ssd".into())]);
        labels.insert("cores".into(), "4".into());
        NodeInfo {
            name: "edge-1".into(),
            labels,
            taints: Vec::new(),
            milli_cpu: 2000,
            memory: 1 << 30,
            ephemeral_storage: 10 << 30,
            pods: 110,
            sysctls: sysctl_allowlist("6.1.0", &[]).unwrap(),
            no_image_volumes: None,
            seen: SeenNode::default(),
        }
    }

    #[test]
    fn an_image_volume_the_runtime_cannot_mount_is_refused_by_name() {
        let mut p = Pod::default();
        p.spec.containers = vec![container("c", "", "")];
        p.spec.volumes = vec![crate::api::Volume {
            name: "model".into(),
            image: Some(crate::api::ImageVolumeSource {
                reference: "reg.local/model:1".into(),
                pull_policy: None,
            }),
            ..Default::default()
        }];
        let mut n = node();
        assert_eq!(admit(&p, &n, &[]), Ok(()));
        n.no_image_volumes =
            Some("the container runtime containerd 1.6.20 cannot mount images".into());
        let r = admit(&p, &n, &[]).unwrap_err();
        assert_eq!(r.reason, IMAGE_VOLUME_UNSUPPORTED);
        assert_eq!(
            r.message,
            "image volume \"model\" (image \"reg.local/model:1\") cannot be mounted: \
             the container runtime containerd 1.6.20 cannot mount images"
        );
        // A pod without one is not concerned.
        p.spec.volumes.clear();
        assert_eq!(admit(&p, &n, &[]), Ok(()));
    }

    fn container(name: &str, cpu: &str, mem: &str) -> Container {
        let mut r = ResourceRequirements::default();
        if !cpu.is_empty() {
            r.requests
                .insert("cpu".into(), Quantity::parse(cpu).unwrap());
        }
        if !mem.is_empty() {
            r.requests
                .insert("memory".into(), Quantity::parse(mem).unwrap());
        }
        Container {
            name: name.into(),
            image: "busybox".into(),
            resources: r,
            ..Default::default()
        }
    }

    fn pod(name: &str, cpu: &str, mem: &str) -> Pod {
        let mut p = Pod::default();
        p.metadata.name = name.into();
        p.metadata.uid = name.into();
        p.spec.containers.push(container("c", cpu, mem));
        p
    }

    fn req(key: &str, op: &str, values: &[&str]) -> NodeSelectorRequirement {
        NodeSelectorRequirement {
            key: key.into(),
            operator: op.into(),
            values: values.iter().map(|v| (*v).to_owned()).collect(),
        }
    }

    fn with_terms(terms: Vec<NodeSelectorTerm>) -> Pod {
        let mut p = pod("a", "", "");
        p.spec.affinity = Some(Affinity {
            node_affinity: Some(NodeAffinity {
                required_during_scheduling_ignored_during_execution: Some(NodeSelector {
                    node_selector_terms: terms,
                }),
                ..Default::default()
            }),
            ..Default::default()
        });
        p
    }

    fn exprs(rs: Vec<NodeSelectorRequirement>) -> NodeSelectorTerm {
        NodeSelectorTerm {
            match_expressions: rs,
            match_fields: Vec::new(),
        }
    }

    #[test]
    fn operators_match_as_upstream() {
        let cases: &[(&str, &[&str], Option<&str>, bool)] = &[
            ("In", &["ssd", "nvme"], Some("ssd"), true),
            ("In", &["nvme"], Some("ssd"), false),
            ("In", &["ssd"], None, false),
            ("In", &[], Some("ssd"), false),
            ("NotIn", &["hdd"], Some("ssd"), true),
            ("NotIn", &["ssd"], Some("ssd"), false),
            ("NotIn", &["ssd"], None, true),
            ("Exists", &[], Some(""), true),
            ("Exists", &[], None, false),
            ("Exists", &["x"], Some("x"), false),
            ("DoesNotExist", &[], None, true),
            ("DoesNotExist", &[], Some("x"), false),
            ("Gt", &["3"], Some("4"), true),
            ("Gt", &["4"], Some("4"), false),
            ("Gt", &["3"], Some("four"), false),
            ("Gt", &["3"], None, false),
            ("Gt", &["3", "5"], Some("4"), false),
            ("Lt", &["5"], Some("4"), true),
            ("Lt", &["4"], Some("4"), false),
            ("Lt", &["x"], Some("4"), false),
            ("Equals", &["4"], Some("4"), false),
        ];
        for (op, values, v, want) in cases {
            assert_eq!(
                requirement_matches(&req("k", op, values), *v),
                *want,
                "{op} {values:?} against {v:?}"
            );
        }
    }

    #[test]
    fn node_selector_needs_every_pair() {
        let n = node();
        let mut p = pod("a", "", "");
        p.spec.node_selector.insert("disktype".into(), "ssd".into());
        assert_eq!(admit(&p, &n, &[]), Ok(()));
        p.spec
            .node_selector
            .insert("kubernetes.io/arch".into(), "sparc".into());
        let r = admit(&p, &n, &[]).unwrap_err();
        assert_eq!(r.reason, "NodeAffinity");
        assert_eq!(
            r.message,
            "Predicate NodeAffinity failed: node(s) didn't match Pod's node affinity/selector"
        );
        p.spec.node_selector.clear();
        p.spec
            .node_selector
            .insert("kubernetes.io/hostname".into(), "edge-1".into());
        assert_eq!(admit(&p, &n, &[]), Ok(()));
    }

    #[test]
    fn terms_are_ored_and_expressions_anded() {
        let n = node();
        let ok = exprs(vec![
            req("disktype", "In", &["ssd"]),
            req("cores", "Gt", &["2"]),
        ]);
        let bad = exprs(vec![
            req("disktype", "In", &["ssd"]),
            req("cores", "Gt", &["8"]),
        ]);
        assert!(matches_node_affinity(&with_terms(vec![ok.clone()]), &n));
        assert!(!matches_node_affinity(&with_terms(vec![bad.clone()]), &n));
        assert!(matches_node_affinity(
            &with_terms(vec![bad.clone(), ok]),
            &n
        ));
        // No terms, or an empty term, match nothing.
        assert!(!matches_node_affinity(&with_terms(vec![]), &n));
        assert!(!matches_node_affinity(&with_terms(vec![exprs(vec![])]), &n));
        // The selector and the affinity must both match.
        let mut p = with_terms(vec![exprs(vec![req("disktype", "Exists", &[])])]);
        assert!(matches_node_affinity(&p, &n));
        p.spec.node_selector.insert("zone".into(), "a".into());
        assert!(!matches_node_affinity(&p, &n));
    }

    #[test]
    fn match_fields_name_the_node() {
        let n = node();
        let field = |op: &str, v: &[&str]| NodeSelectorTerm {
            match_expressions: Vec::new(),
            match_fields: vec![req("metadata.name", op, v)],
        };
        assert!(matches_node_affinity(
            &with_terms(vec![field("In", &["edge-1"])]),
            &n
        ));
        assert!(!matches_node_affinity(
            &with_terms(vec![field("In", &["edge-2"])]),
            &n
        ));
        assert!(matches_node_affinity(
            &with_terms(vec![field("NotIn", &["edge-2"])]),
            &n
        ));
        // Only metadata.name, only In and NotIn, exactly one value.
        assert!(!matches_node_affinity(
            &with_terms(vec![field("Exists", &[])]),
            &n
        ));
        assert!(!matches_node_affinity(
            &with_terms(vec![field("In", &["edge-1", "edge-2"])]),
            &n
        ));
    }

    #[test]
    fn node_name_must_be_this_node() {
        let n = node();
        let mut p = pod("a", "", "");
        p.spec.node_name = Some("edge-1".into());
        assert_eq!(admit(&p, &n, &[]), Ok(()));
        p.spec.node_name = Some("edge-2".into());
        let r = admit(&p, &n, &[]).unwrap_err();
        assert_eq!(r.reason, "NodeName");
        assert_eq!(
            r.message,
            "Predicate NodeName failed: node(s) didn't match the requested node name"
        );
    }

    fn port(host: i32, ip: &str, proto: &str) -> ContainerPort {
        ContainerPort {
            container_port: 80,
            host_port: Some(host),
            host_ip: (!ip.is_empty()).then(|| ip.to_owned()),
            protocol: (!proto.is_empty()).then(|| proto.to_owned()),
            ..Default::default()
        }
    }

    fn with_port(name: &str, p: ContainerPort) -> Pod {
        let mut x = pod(name, "", "");
        x.spec.containers[0].ports.push(p);
        x
    }

    #[test]
    fn host_ports_conflict_by_protocol_ip_and_port() {
        let n = node();
        let first = with_port("a", port(8080, "", ""));
        let cases = [
            (port(8080, "", ""), false),
            (port(8080, "", "TCP"), false),
            (port(8080, "127.0.0.1", ""), false),
            (port(8080, "", "UDP"), true),
            (port(8081, "", ""), true),
        ];
        for (p, ok) in cases {
            let second = with_port("b", p.clone());
            let r = admit(&second, &n, &[&first]);
            assert_eq!(r.is_ok(), ok, "{p:?}");
            if let Err(r) = r {
                assert_eq!(r.reason, "NodePorts");
                assert_eq!(
                    r.message,
                    "Predicate NodePorts failed: node(s) didn't have free ports for the requested pod ports"
                );
            }
        }
        // Two specific addresses share a port; the wildcard conflicts with either.
        let local = with_port("a", port(9000, "127.0.0.1", ""));
        assert!(admit(&with_port("b", port(9000, "10.0.0.1", "")), &n, &[&local]).is_ok());
        assert!(admit(&with_port("b", port(9000, "127.0.0.1", "")), &n, &[&local]).is_err());
        assert!(admit(&with_port("b", port(9000, "0.0.0.0", "")), &n, &[&local]).is_err());
        // A port without hostPort is no host port at all.
        let mut none = pod("c", "", "");
        none.spec.containers[0].ports.push(ContainerPort {
            container_port: 8080,
            ..Default::default()
        });
        assert!(admit(&none, &n, &[&first]).is_ok());
    }

    #[test]
    fn resources_count_the_admitted_pods() {
        let n = node();
        let a = pod("a", "1500m", "512Mi");
        assert_eq!(admit(&a, &n, &[]), Ok(()));
        let b = pod("b", "600m", "");
        let r = admit(&b, &n, &[&a]).unwrap_err();
        assert_eq!(r.reason, "OutOfcpu");
        assert_eq!(
            r.message,
            "Node didn't have enough resource: cpu, requested: 600, used: 1500, capacity: 2000"
        );
        let c = pod("c", "", "600Mi");
        let r = admit(&c, &n, &[&a]).unwrap_err();
        assert_eq!(r.reason, "OutOfmemory");
        assert_eq!(
            r.message,
            format!(
                "Node didn't have enough resource: memory, requested: {}, used: {}, capacity: {}",
                600 << 20,
                512 << 20,
                1 << 30
            )
        );
        // Exactly what is left fits; a pod asking nothing always fits.
        assert_eq!(admit(&pod("d", "500m", "512Mi"), &n, &[&a]), Ok(()));
        let big = pod("e", "4", "4Gi");
        assert_eq!(admit(&pod("f", "", ""), &n, &[&big]), Ok(()));
        let mut disk = pod("h", "", "");
        disk.spec.containers[0]
            .resources
            .requests
            .insert("ephemeral-storage".into(), Quantity::parse("11Gi").unwrap());
        let r = admit(&disk, &n, &[]).unwrap_err();
        assert_eq!(r.reason, "OutOfephemeral-storage");
        assert_eq!(
            r.message,
            format!(
                "Node didn't have enough resource: ephemeral-storage, requested: {}, used: 0, capacity: {}",
                11u64 << 30,
                10u64 << 30
            )
        );
        // A limit alone is the request.
        let mut g = pod("g", "", "");
        g.spec.containers[0]
            .resources
            .limits
            .insert("memory".into(), Quantity::parse("2Gi").unwrap());
        assert_eq!(admit(&g, &n, &[]).unwrap_err().reason, "OutOfmemory");
    }

    #[test]
    fn too_many_pods() {
        let mut n = node();
        n.pods = 2;
        let (a, b) = (pod("a", "", ""), pod("b", "", ""));
        assert_eq!(admit(&pod("c", "", ""), &n, &[&a]), Ok(()));
        let r = admit(&pod("c", "", ""), &n, &[&a, &b]).unwrap_err();
        assert_eq!(r.reason, "OutOfpods");
        assert_eq!(
            r.message,
            "Node didn't have enough resource: pods, requested: 1, used: 2, capacity: 2"
        );
    }

    #[test]
    fn init_containers_take_the_max_and_sidecars_add() {
        let mut p = pod("a", "100m", "");
        p.spec.containers.push(container("d", "200m", ""));
        assert_eq!(pod_request(&p, "cpu"), 300);
        // A regular init container counts when it is larger than the app containers.
        p.spec.init_containers.push(container("init", "1", ""));
        assert_eq!(pod_request(&p, "cpu"), 1000);
        p.spec.init_containers[0].resources.requests.clear();
        assert_eq!(pod_request(&p, "cpu"), 300);
        // A sidecar runs beside everything after it: added to the apps and to later inits.
        let mut side = container("side", "50m", "");
        side.restart_policy = Some("Always".into());
        p.spec.init_containers.insert(0, side);
        p.spec.init_containers.push(container("late", "400m", ""));
        assert_eq!(pod_request(&p, "cpu"), 450);
        p.spec.init_containers.pop();
        assert_eq!(pod_request(&p, "cpu"), 350);
        // The overhead comes on top.
        p.spec
            .overhead
            .insert("cpu".into(), Quantity::parse("250m").unwrap());
        assert_eq!(pod_request(&p, "cpu"), 600);
    }

    #[test]
    fn os_label_and_field() {
        let n = node();
        let mut p = pod("a", "", "");
        p.metadata
            .labels
            .insert("kubernetes.io/os".into(), "windows".into());
        assert_eq!(
            admit(&p, &n, &[]).unwrap_err().reason,
            "PodOSSelectorNodeLabelDoesNotMatch"
        );
        p.metadata.labels.clear();
        p.spec.os = Some(crate::api::PodOs {
            name: "windows".into(),
        });
        assert_eq!(admit(&p, &n, &[]).unwrap_err().reason, "PodOSNotSupported");
        p.spec.os = Some(crate::api::PodOs {
            name: "linux".into(),
        });
        assert_eq!(admit(&p, &n, &[]), Ok(()));
    }

    #[test]
    fn sysctls_must_be_safe_or_allowed_and_not_shared_with_the_host() {
        let with = |names: &[&str]| {
            let mut p = pod("a", "", "");
            p.spec.security_context = Some(crate::api::PodSecurityContext {
                sysctls: names
                    .iter()
                    .map(|n| crate::api::Sysctl {
                        name: (*n).into(),
                        value: "1".into(),
                    })
                    .collect(),
                ..Default::default()
            });
            p
        };
        let mut n = node();
        assert_eq!(admit(&with(&["kernel.shm_rmid_forced"]), &n, &[]), Ok(()));
        assert_eq!(
            admit(&with(&["net/ipv4/tcp_syncookies"]), &n, &[]),
            Ok(()),
            "slashes read as dots"
        );
        // An unsafe one, not allowed on this node: the conformance spec's.
        assert_eq!(
            admit(&with(&["kernel.msgmax"]), &n, &[]),
            Err(Rejection {
                reason: "SysctlForbidden".into(),
                message: "forbidden sysctl: \"kernel.msgmax\" not allowlisted".into(),
            })
        );
        n.sysctls =
            sysctl_allowlist("6.1.0", &["kernel.msg*".into(), "net.core.*".into()]).unwrap();
        assert_eq!(admit(&with(&["kernel.msgmax"]), &n, &[]), Ok(()));
        let mut p = with(&["net.core.somaxconn"]);
        assert_eq!(admit(&p, &n, &[]), Ok(()));
        p.spec.host_network = true;
        assert_eq!(
            admit(&p, &n, &[]).unwrap_err().message,
            "forbidden sysctl: \"net.core.somaxconn\" not allowed with host Net enabled"
        );
        // The tcp_* ones are safe only where the kernel namespaces them.
        let old = sysctl_allowlist("4.4.302", &[]).unwrap();
        assert!(!old.iter().any(|s| s == "net.ipv4.tcp_keepalive_time"));
        assert!(old.iter().any(|s| s == "net.ipv4.ip_local_reserved_ports"));
        // Bad entries in allowedUnsafeSysctls are named.
        assert_eq!(
            sysctl_allowlist("6.1", &["vm.swappiness".into()]).unwrap_err(),
            "the sysctls \"vm.swappiness\" are not known to be namespaced"
        );
        assert!(
            sysctl_allowlist("6.1", &["Net.core.*".into()])
                .unwrap_err()
                .starts_with("sysctl \"Net.core.*\" must have at most 253 characters")
        );
        assert!(sysctl_allowlist("6.1", &["net.*.x".into()]).is_err());
    }

    #[test]
    fn the_nodes_labels_and_taints_as_the_apiserver_shows_them_decide_once_read() {
        let n = node();
        let mut p = pod("a", "", "");
        p.metadata
            .annotations
            .insert(crate::config::ANNOTATION_CONFIG_SOURCE.into(), "api".into());
        p.spec.node_selector.insert("zone".into(), "north".into());
        // Labels known at start only: the label added to the Node since is not there.
        assert!(!n.fits_placement(&p));
        assert_eq!(admit(&p, &n, &[]).unwrap_err().reason, "NodeAffinity");

        // A status report's answer: metadata alone, labels taken, taints kept.
        let seen = n.seen.clone();
        assert!(seen.read(&serde_json::json!({
            "kind": "PartialObjectMetadata",
            "metadata": {"name": "edge-1", "labels": {"zone": "north", "kubernetes.io/os": "linux"}}
        })));
        assert!(n.fits_placement(&p));
        assert_eq!(admit(&p, &n, &[]), Ok(()));
        // The labels are the Node's own now: one it no longer has does not count.
        p.spec.node_selector.insert("disktype".into(), "ssd".into());
        assert_eq!(admit(&p, &n, &[]).unwrap_err().reason, "NodeAffinity");
        p.spec.node_selector.remove("disktype");

        // The Node read whole: a NoExecute taint added with kubectl counts too.
        assert!(seen.read(&serde_json::json!({
            "metadata": {"name": "edge-1", "labels": {"zone": "north"}},
            "spec": {"taints": [{"key": "maintenance", "effect": "NoExecute"}]}
        })));
        assert!(!n.fits_placement(&p));
        assert_eq!(admit(&p, &n, &[]).unwrap_err().reason, "TaintToleration");
        // Static pods are not held to taints, as upstream.
        let mut s = p.clone();
        s.metadata.annotations.insert(
            crate::config::ANNOTATION_CONFIG_SOURCE.into(),
            "file".into(),
        );
        assert_eq!(admit(&s, &n, &[]), Ok(()));

        // An answer without a Node's metadata (a Status, say) changes nothing.
        assert!(!seen.read(&serde_json::json!({"kind": "Status", "code": 500})));
        assert!(!n.fits_placement(&p));
        // Clones share one view; the configured labels stay as they were.
        assert_eq!(n.clone(), n);
        assert_eq!(n.labels["disktype"], "ssd");
    }

    #[test]
    fn no_execute_taints_for_api_pods_only() {
        let mut n = node();
        n.taints.push(crate::api::Taint {
            key: "dedicated".into(),
            value: "gpu".into(),
            effect: "NoExecute".into(),
        });
        n.taints.push(crate::api::Taint {
            key: "other".into(),
            value: String::new(),
            effect: "NoSchedule".into(),
        });
        let mut p = pod("a", "", "");
        p.metadata
            .annotations
            .insert(crate::config::ANNOTATION_CONFIG_SOURCE.into(), "api".into());
        let r = admit(&p, &n, &[]).unwrap_err();
        assert_eq!(r.reason, "TaintToleration");
        p.spec.tolerations.push(crate::api::Toleration {
            key: Some("dedicated".into()),
            operator: Some("Equal".into()),
            value: Some("gpu".into()),
            effect: Some("NoExecute".into()),
            toleration_seconds: None,
        });
        assert_eq!(admit(&p, &n, &[]), Ok(()));
        p.spec.tolerations[0] = crate::api::Toleration {
            operator: Some("Exists".into()),
            ..Default::default()
        };
        assert_eq!(admit(&p, &n, &[]), Ok(()));
        // A static pod is not checked against taints, as upstream.
        let mut s = pod("s", "", "");
        s.metadata.annotations.insert(
            crate::config::ANNOTATION_CONFIG_SOURCE.into(),
            "file".into(),
        );
        assert_eq!(admit(&s, &n, &[]), Ok(()));
    }

    #[test]
    fn the_first_failure_is_reported_in_upstreams_order() {
        let n = node();
        let mut p = pod("a", "8", "");
        p.spec.node_selector.insert("disktype".into(), "hdd".into());
        assert_eq!(admit(&p, &n, &[]).unwrap_err().reason, "OutOfcpu");
    }

    #[test]
    fn a_pod_needing_an_undeclared_feature_is_rejected_as_upstream_rejects_it() {
        let mut p = Pod::default();
        p.spec.containers.push(Container {
            name: "c".into(),
            ..Default::default()
        });
        assert_eq!(
            features_declared(&p, &crate::declared_features::declared()),
            Ok(())
        );
        p.spec.containers[0]
            .restart_policy_rules
            .push(crate::api::ContainerRestartRule {
                action: "RestartAllContainers".into(),
                ..Default::default()
            });
        p.spec.host_network = true;
        p.spec.host_users = Some(false);
        let r = features_declared(&p, &crate::declared_features::declared()).unwrap_err();
        assert_eq!(r.reason, "PodFeatureUnsupported");
        assert_eq!(
            r.message,
            "Pod requires node features that are not available: \
             RestartAllContainersOnContainerExits, UserNamespacesHostNetworkSupport"
        );
        // A node declaring them admits the pod.
        assert_eq!(
            features_declared(
                &p,
                &[
                    "RestartAllContainersOnContainerExits",
                    "UserNamespacesHostNetworkSupport"
                ]
            ),
            Ok(())
        );
    }
}
