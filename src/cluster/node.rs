//! The Node object: what picolet registers and the status it reports. Building it is pure (facts
//! in, JSON out); gathering the facts reads /proc and the root directory once per status round.

use serde_json::{Value, json};

use crate::options::Taint;

/// The kubelet version picolet reports: the Kubernetes API level it implements and is tested
/// against, with its own name and version as the pre-release part (so a version check reads the
/// API level, and `kubectl get nodes` shows what runs).
pub const KUBELET_VERSION: &str = concat!("v1.37.2-picolet.", env!("CARGO_PKG_VERSION"));

/// What the node reports about itself.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct NodeFacts {
    pub name: String,
    pub ip: String,
    pub cpus: usize,
    pub memory_bytes: i64,
    pub ephemeral_storage_bytes: u64,
    pub max_pods: u32,
    pub machine_id: String,
    pub boot_id: String,
    pub kernel: String,
    pub os_image: String,
    pub architecture: String,
    /// `containerd://1.6.20`.
    pub runtime_version: String,
    pub labels: Vec<(String, String)>,
    pub taints: Vec<Taint>,
    /// `kubeReserved` plus `systemReserved`: capacity minus this is allocatable.
    pub reserved: crate::cm::Reserved,
    /// The node API's port (`daemonEndpoints.kubeletEndpoint.Port`); 0 when it is off.
    pub kubelet_port: u16,
}

/// The health the Ready condition reports.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Health {
    pub ready: bool,
    /// Why not, when not ready.
    pub message: String,
    /// MemoryPressure, DiskPressure and PIDPressure from the eviction manager.
    pub pressure: crate::eviction::Pressure,
}

pub use crate::node::goarch;

fn first_line(path: &str) -> String {
    std::fs::read_to_string(path)
        .ok()
        .and_then(|t| t.lines().next().map(|l| l.trim().to_owned()))
        .unwrap_or_default()
}

/// `PRETTY_NAME` of os-release text.
pub fn os_image(os_release: &str) -> String {
    os_release
        .lines()
        .find_map(|l| l.strip_prefix("PRETTY_NAME="))
        .map(|v| v.trim_matches('"').to_owned())
        .unwrap_or_else(|| "Linux".into())
}

/// Reads the facts that do not change while picolet runs (plus disk size).
pub fn gather(
    name: &str,
    ip: &str,
    memory_bytes: i64,
    root: &std::path::Path,
    runtime_version: &str,
    labels: &[(String, String)],
    taints: &[Taint],
) -> NodeFacts {
    #[allow(
        clippy::useless_conversion,
        reason = "statvfs counts are u32 on 32-bit targets (armv7)"
    )]
    let disk = nix::sys::statvfs::statvfs(root)
        .map(|s| u64::from(s.blocks()).saturating_mul(u64::from(s.fragment_size())))
        .unwrap_or(0);
    NodeFacts {
        name: name.to_owned(),
        ip: ip.to_owned(),
        cpus: std::thread::available_parallelism().map_or(1, |n| n.get()),
        memory_bytes,
        ephemeral_storage_bytes: disk,
        max_pods: 110,
        machine_id: first_line("/etc/machine-id"),
        boot_id: first_line("/proc/sys/kernel/random/boot_id"),
        kernel: first_line("/proc/sys/kernel/osrelease"),
        os_image: os_image(&std::fs::read_to_string("/etc/os-release").unwrap_or_default()),
        architecture: goarch().to_owned(),
        runtime_version: runtime_version.to_owned(),
        labels: labels.to_vec(),
        taints: taints.to_vec(),
        reserved: crate::cm::Reserved::default(),
        kubelet_port: 0,
    }
}

/// The Node as first registered.
pub fn node_object(f: &NodeFacts) -> Value {
    // The labels admission matches pods against, with this node's architecture.
    let mut labels = serde_json::Map::new();
    for (k, v) in crate::admission::NodeInfo::node_labels(&f.name, &f.labels) {
        let v = if k.ends_with("kubernetes.io/arch") && !f.labels.iter().any(|(l, _)| *l == k) {
            f.architecture.clone()
        } else {
            v
        };
        labels.insert(k, json!(v));
    }
    let mut spec = json!({});
    if !f.taints.is_empty() {
        spec["taints"] = json!(f.taints);
    }
    json!({
        "apiVersion": "v1",
        "kind": "Node",
        "metadata": {"name": f.name, "labels": labels},
        "spec": spec,
    })
}

fn condition(
    kind: &str,
    ok: bool,
    reason: &str,
    message: &str,
    old: Option<&Value>,
    now: &str,
) -> Value {
    let status = if kind == "Ready" {
        if ok { "True" } else { "False" }
    } else if ok {
        "False"
    } else {
        "True"
    };
    // The transition time moves only when the status does.
    let since = old
        .filter(|o| o["status"] == status)
        .and_then(|o| o["lastTransitionTime"].as_str())
        .unwrap_or(now);
    json!({
        "type": kind,
        "status": status,
        "reason": reason,
        "message": message,
        "lastHeartbeatTime": now,
        "lastTransitionTime": since,
    })
}

/// Bytes in Ki, as the capacity is written.
fn bytes_quantity(b: i64) -> String {
    format!("{}Ki", b.max(0) / 1024)
}

/// The Node's status. `old` is the status last posted (for transition times).
pub fn node_status(f: &NodeFacts, health: &Health, old: Option<&Value>, now: &str) -> Value {
    let old_cond = |t: &str| {
        old.and_then(|o| o["conditions"].as_array())
            .and_then(|cs| cs.iter().find(|c| c["type"] == t))
    };
    let ready_msg = if health.ready {
        "kubelet is posting ready status".to_owned()
    } else {
        health.message.clone()
    };
    let p = health.pressure;
    let capacity = json!({
        "cpu": f.cpus.to_string(),
        "memory": format!("{}Ki", f.memory_bytes.max(0) / 1024),
        "pods": f.max_pods.to_string(),
        "ephemeral-storage": format!("{}Ki", f.ephemeral_storage_bytes / 1024),
    });
    let cpus = i64::try_from(f.cpus).unwrap_or(i64::MAX);
    let alloc = crate::cm::CgroupConfig {
        system_reserved: f.reserved.clone(),
        ..Default::default()
    }
    .allocatable(crate::cm::Allocatable {
        milli_cpu: cpus.saturating_mul(1000),
        memory: f.memory_bytes.max(0),
        ephemeral_storage: i64::try_from(f.ephemeral_storage_bytes).unwrap_or(i64::MAX),
    });
    let allocatable = json!({
        "cpu": if alloc.milli_cpu % 1000 == 0 {
            (alloc.milli_cpu / 1000).to_string()
        } else {
            format!("{}m", alloc.milli_cpu)
        },
        "memory": bytes_quantity(alloc.memory),
        "pods": f.max_pods.to_string(),
        "ephemeral-storage": bytes_quantity(alloc.ephemeral_storage),
    });
    json!({
        "capacity": capacity,
        "allocatable": allocatable,
        "conditions": [
            if p.memory {
                condition("MemoryPressure", false, "KubeletHasInsufficientMemory", "kubelet has insufficient memory available", old_cond("MemoryPressure"), now)
            } else {
                condition("MemoryPressure", true, "KubeletHasSufficientMemory", "kubelet has sufficient memory available", old_cond("MemoryPressure"), now)
            },
            if p.disk {
                condition("DiskPressure", false, "KubeletHasDiskPressure", "kubelet has disk pressure", old_cond("DiskPressure"), now)
            } else {
                condition("DiskPressure", true, "KubeletHasNoDiskPressure", "kubelet has no disk pressure", old_cond("DiskPressure"), now)
            },
            if p.pid {
                condition("PIDPressure", false, "KubeletHasInsufficientPID", "kubelet has insufficient PID available", old_cond("PIDPressure"), now)
            } else {
                condition("PIDPressure", true, "KubeletHasSufficientPID", "kubelet has sufficient PID available", old_cond("PIDPressure"), now)
            },
            condition("Ready", health.ready, if health.ready { "KubeletReady" } else { "KubeletNotReady" }, &ready_msg, old_cond("Ready"), now),
        ],
        "addresses": [
            {"type": "InternalIP", "address": f.ip},
            {"type": "Hostname", "address": f.name},
        ],
        "daemonEndpoints": {"kubeletEndpoint": {"Port": f.kubelet_port}},
        "nodeInfo": {
            "machineID": f.machine_id,
            "systemUUID": f.machine_id,
            "bootID": f.boot_id,
            "kernelVersion": f.kernel,
            "osImage": f.os_image,
            "containerRuntimeVersion": f.runtime_version,
            "kubeletVersion": KUBELET_VERSION,
            "kubeProxyVersion": "",
            "operatingSystem": "linux",
            "architecture": f.architecture,
        },
    })
}

/// Whether two statuses differ in more than heartbeat times (what decides an early post).
pub fn differs(a: &Value, b: &Value) -> bool {
    fn strip(v: &Value) -> Value {
        let mut v = v.clone();
        if let Some(cs) = v["conditions"].as_array_mut() {
            for c in cs {
                if let Some(o) = c.as_object_mut() {
                    o.remove("lastHeartbeatTime");
                }
            }
        }
        v
    }
    strip(a) != strip(b)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn facts() -> NodeFacts {
        NodeFacts {
            name: "edge-1".into(),
            ip: "192.0.2.7".into(),
            cpus: 4,
            memory_bytes: 1 << 30,
            ephemeral_storage_bytes: 32 << 30,
            max_pods: 110,
            machine_id: "m".into(),
            boot_id: "b".into(),
            kernel: "6.1.0".into(),
            os_image: "Debian GNU/Linux 12 (bookworm)".into(),
            architecture: "arm64".into(),
            runtime_version: "containerd://1.6.20".into(),
            labels: vec![("node.kubernetes.io/instance-type".into(), "rpi4".into())],
            taints: vec![Taint {
                key: "edge".into(),
                value: "".into(),
                effect: "NoSchedule".into(),
            }],
            reserved: crate::cm::Reserved::default(),
            kubelet_port: 10250,
        }
    }

    #[test]
    fn allocatable_is_capacity_minus_the_reservations() {
        let up = Health {
            ready: true,
            message: String::new(),
            pressure: crate::eviction::Pressure::default(),
        };
        let s = node_status(&facts(), &up, None, "2026-01-01T00:00:00Z");
        assert_eq!(s["allocatable"], s["capacity"], "nothing reserved");
        let mut f = facts();
        f.reserved =
            crate::cm::Reserved::parse_flag("cpu=250m,memory=100Mi,ephemeral-storage=1Gi").unwrap();
        let s = node_status(&f, &up, None, "2026-01-01T00:00:00Z");
        assert_eq!(s["allocatable"]["cpu"], "3750m");
        assert_eq!(s["allocatable"]["memory"], "946176Ki");
        assert_eq!(s["allocatable"]["ephemeral-storage"], "32505856Ki");
        assert_eq!(s["allocatable"]["pods"], "110");
        assert_eq!(s["capacity"]["cpu"], "4");
    }

    #[test]
    fn node_object_has_the_well_known_labels_and_taints() {
        let n = node_object(&facts());
        let l = &n["metadata"]["labels"];
        assert_eq!(l["kubernetes.io/hostname"], "edge-1");
        assert_eq!(l["kubernetes.io/arch"], "arm64");
        assert_eq!(l["kubernetes.io/os"], "linux");
        assert_eq!(l["node.kubernetes.io/instance-type"], "rpi4");
        assert_eq!(
            n["spec"]["taints"],
            json!([{"key": "edge", "effect": "NoSchedule"}])
        );
    }

    #[test]
    fn status_conditions_move_their_transition_time_only_on_change() {
        let f = facts();
        let up = Health {
            ready: true,
            message: String::new(),
            pressure: Default::default(),
        };
        let s1 = node_status(&f, &up, None, "2026-01-01T00:00:00Z");
        assert_eq!(s1["capacity"]["memory"], "1048576Ki");
        assert_eq!(s1["capacity"]["cpu"], "4");
        assert_eq!(s1["nodeInfo"]["kubeletVersion"], KUBELET_VERSION);
        assert!(KUBELET_VERSION.starts_with("v1.37.2-picolet."));
        // Where the apiserver reaches the node API, by address type.
        assert_eq!(s1["daemonEndpoints"]["kubeletEndpoint"]["Port"], 10250);
        assert_eq!(
            s1["addresses"][0],
            json!({"type": "InternalIP", "address": "192.0.2.7"})
        );
        assert_eq!(
            s1["addresses"][1],
            json!({"type": "Hostname", "address": "edge-1"})
        );
        let ready = |s: &Value| s["conditions"][3].clone();
        assert_eq!(ready(&s1)["status"], "True");
        let s2 = node_status(&f, &up, Some(&s1), "2026-01-01T00:00:10Z");
        assert_eq!(ready(&s2)["lastTransitionTime"], "2026-01-01T00:00:00Z");
        assert_eq!(ready(&s2)["lastHeartbeatTime"], "2026-01-01T00:00:10Z");
        assert!(!differs(&s1, &s2), "only heartbeats moved");
        let down = Health {
            ready: false,
            message: "PLEG is not healthy".into(),
            pressure: Default::default(),
        };
        let s3 = node_status(&f, &down, Some(&s2), "2026-01-01T00:00:20Z");
        assert_eq!(ready(&s3)["status"], "False");
        assert_eq!(ready(&s3)["reason"], "KubeletNotReady");
        assert_eq!(ready(&s3)["lastTransitionTime"], "2026-01-01T00:00:20Z");
        assert!(differs(&s2, &s3));
        assert_eq!(s3["conditions"][0]["status"], "False", "no memory pressure");
        let pressed = Health {
            pressure: crate::eviction::Pressure {
                memory: true,
                disk: false,
                pid: true,
            },
            ..down
        };
        let s4 = node_status(&f, &pressed, Some(&s3), "2026-01-01T00:00:30Z");
        let c = |i: usize| s4["conditions"][i].clone();
        assert_eq!(
            (
                c(0)["type"].as_str(),
                c(0)["status"].as_str(),
                c(0)["reason"].as_str()
            ),
            (
                Some("MemoryPressure"),
                Some("True"),
                Some("KubeletHasInsufficientMemory")
            )
        );
        assert_eq!(c(0)["lastTransitionTime"], "2026-01-01T00:00:30Z");
        assert_eq!(c(1)["status"], "False", "no disk pressure");
        assert_eq!(c(1)["lastTransitionTime"], "2026-01-01T00:00:00Z");
        assert_eq!(
            (c(2)["status"].as_str(), c(2)["reason"].as_str()),
            (Some("True"), Some("KubeletHasInsufficientPID"))
        );
        assert!(differs(&s3, &s4));
    }

    #[test]
    fn os_release() {
        assert_eq!(
            os_image("NAME=x\nPRETTY_NAME=\"Raspbian GNU/Linux 12\"\n"),
            "Raspbian GNU/Linux 12"
        );
        assert_eq!(os_image(""), "Linux");
    }
}
