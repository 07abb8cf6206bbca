//! The Node object: what picolet registers and the status it reports. Building it is pure (facts
//! in, JSON out); the facts are `node::Facts`, gathered once at start.

use serde_json::{Value, json};

use crate::api::Taint;

/// The kubelet version picolet reports: the Kubernetes API level it implements and is tested
/// against, with its own name and version as the pre-release part (so a version check reads the
/// API level, and `kubectl get nodes` shows what runs).
pub const KUBELET_VERSION: &str = concat!("v1.37.2-picolet.", env!("CARGO_PKG_VERSION"));

/// What the node reports about itself.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct NodeFacts {
    /// What the node is, gathered once at start.
    pub node: crate::node::Facts,
    /// Node allocatable (`node::Facts::allocatable`), as admission weighs pods against it.
    pub allocatable: crate::cm::Allocatable,
    pub max_pods: u32,
    /// `containerd://1.6.20`.
    pub runtime_version: String,
    pub labels: Vec<(String, String)>,
    pub taints: Vec<Taint>,
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

/// The Node as first registered.
pub fn node_object(f: &NodeFacts) -> Value {
    // The labels admission matches pods against, with this node's architecture.
    let mut labels = serde_json::Map::new();
    for (k, v) in crate::admission::NodeInfo::node_labels(&f.node.name, &f.labels) {
        let v = if k.ends_with("kubernetes.io/arch") && !f.labels.iter().any(|(l, _)| *l == k) {
            f.node.architecture.clone()
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
        "metadata": {"name": f.node.name, "labels": labels},
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
    let node = &f.node;
    let capacity = json!({
        "cpu": node.cpus.to_string(),
        "memory": bytes_quantity(node.memory_bytes),
        "pods": f.max_pods.to_string(),
        "ephemeral-storage": bytes_quantity(node.disk_bytes.unwrap_or(0)),
    });
    let alloc = f.allocatable;
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
            {"type": "InternalIP", "address": node.ip},
            {"type": "Hostname", "address": node.name},
        ],
        "daemonEndpoints": {"kubeletEndpoint": {"Port": f.kubelet_port}},
        // Always sent, empty too: the merge patch then clears what another agent declared
        // under this node's name.
        "declaredFeatures": crate::declared_features::declared(),
        "nodeInfo": {
            "machineID": node.machine_id,
            "systemUUID": node.machine_id,
            "bootID": node.boot_id,
            "kernelVersion": node.kernel,
            "osImage": node.os_image,
            "containerRuntimeVersion": f.runtime_version,
            "kubeletVersion": KUBELET_VERSION,
            "kubeProxyVersion": "",
            "operatingSystem": "linux",
            "architecture": node.architecture,
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

/// The JSON merge patch (RFC 7386) that turns `old` into `new`: objects compared member by
/// member, a member gone from `new` set to null, anything else (arrays included: a merge patch
/// replaces an array whole) sent whole when it differs. `None` when they are equal.
pub fn merge_patch(old: &Value, new: &Value) -> Option<Value> {
    match (old, new) {
        (Value::Object(o), Value::Object(n)) => {
            let mut patch = serde_json::Map::new();
            for (k, v) in n {
                match o.get(k) {
                    Some(was) => {
                        if let Some(p) = merge_patch(was, v) {
                            patch.insert(k.clone(), p);
                        }
                    }
                    None => {
                        patch.insert(k.clone(), v.clone());
                    }
                }
            }
            for k in o.keys().filter(|k| !n.contains_key(*k)) {
                patch.insert(k.clone(), Value::Null);
            }
            (!patch.is_empty()).then_some(Value::Object(patch))
        }
        // Anything else (a scalar, an array, a change of type) is sent whole when it differs.
        _ if old == new => None,
        _ => Some(new.clone()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn facts() -> NodeFacts {
        let node = crate::node::Facts {
            name: "edge-1".into(),
            ip: "192.0.2.7".into(),
            cpus: 4,
            memory_bytes: 1 << 30,
            disk_bytes: Some(32 << 30),
            dns: None,
            machine_id: "m".into(),
            boot_id: "b".into(),
            kernel: "6.1.0".into(),
            os_image: "Debian GNU/Linux 12 (bookworm)".into(),
            architecture: "arm64".into(),
        };
        NodeFacts {
            allocatable: node.capacity(),
            node,
            max_pods: 110,
            runtime_version: "containerd://1.6.20".into(),
            labels: vec![("node.kubernetes.io/instance-type".into(), "rpi4".into())],
            taints: vec![Taint {
                key: "edge".into(),
                value: "".into(),
                effect: "NoSchedule".into(),
            }],
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
        let cgroups = crate::cm::CgroupConfig {
            system_reserved: crate::cm::Reserved::parse_flag(
                "cpu=250m,memory=100Mi,ephemeral-storage=1Gi",
            )
            .unwrap(),
            ..Default::default()
        };
        let no_thresholds = crate::eviction::Config {
            thresholds: Vec::new(),
            ..Default::default()
        };
        f.allocatable = f.node.allocatable(&cgroups, &no_thresholds);
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
    fn a_merge_patch_holds_what_changed_alone_and_applies_back() {
        let old = json!({"a": 1, "b": {"c": [1, 2], "d": "x", "e": true}, "gone": {"z": 1}});
        let new = json!({"a": 1, "b": {"c": [1, 3], "d": "x", "f": null}, "added": "y"});
        let p = merge_patch(&old, &new).unwrap();
        assert_eq!(
            p,
            json!({"b": {"c": [1, 3], "e": null, "f": null}, "gone": null, "added": "y"})
        );
        assert_eq!(merge_patch(&new, &new), None);
        assert_eq!(
            merge_patch(&json!(1), &json!({"x": 1})),
            Some(json!({"x": 1}))
        );
        // Applied as RFC 7386 says (the apiserver's merge patch), it gives `new` back (a null
        // member and a missing one are the same object there).
        fn apply(target: &mut Value, patch: &Value) {
            match (target.as_object_mut(), patch.as_object()) {
                (Some(t), Some(p)) => {
                    for (k, v) in p {
                        if v.is_null() {
                            t.remove(k);
                        } else {
                            apply(t.entry(k.clone()).or_insert(Value::Null), v);
                        }
                    }
                }
                _ => *target = patch.clone(),
            }
        }
        let mut applied = old.clone();
        apply(&mut applied, &p);
        assert_eq!(
            applied,
            json!({"a": 1, "b": {"c": [1, 3], "d": "x"}, "added": "y"})
        );
    }

    #[test]
    fn a_report_at_rest_patches_the_conditions_alone() {
        let f = facts();
        let up = Health {
            ready: true,
            message: String::new(),
            pressure: Default::default(),
        };
        let s1 = node_status(&f, &up, None, "2026-01-01T00:00:00Z");
        let s2 = node_status(&f, &up, Some(&s1), "2026-01-01T00:05:00Z");
        let p = merge_patch(&s1, &s2).unwrap();
        // Only the heartbeat times moved; a merge patch replaces an array whole, so the
        // conditions go whole, and nothing else does.
        assert_eq!(
            p.as_object().unwrap().keys().collect::<Vec<_>>(),
            ["conditions"]
        );
        assert_eq!(p["conditions"], s2["conditions"]);
        let whole = serde_json::to_vec(&s2).unwrap().len();
        let patch = serde_json::to_vec(&p).unwrap().len();
        assert!(patch * 3 < whole * 2, "{patch} bytes of {whole}");
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
        assert_eq!(
            s1["declaredFeatures"],
            json!([]),
            "nothing of v1.37's registry yet"
        );
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
}
