//! The features the node declares in `status.declaredFeatures` (node declared features, GA in
//! v1.37), and the admission check of a pod that needs one the node does not declare.
//!
//! The names are those of the v1.37 registry (`k8s.io/component-helpers/nodedeclaredfeatures`).
//! The scheduler keeps a pod needing an undeclared feature off the node, and the apiserver
//! refuses such an update of a pod bound to it; a pod that reaches the node anyway is rejected
//! as the kubelet rejects it (`PodFeatureUnsupported`). picolet declares only what it does
//! the kubelet's way; each entry says why it does or does not.

use crate::api::Pod;

/// One feature of the registry and picolet's answer.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Feature {
    pub name: &'static str,
    pub declared: bool,
    pub why: &'static str,
}

/// Every feature of the v1.37 registry, in its order.
pub const REGISTRY: &[Feature] = &[
    Feature {
        name: "RestartAllContainersOnContainerExits",
        declared: false,
        why: "restartPolicyRules act on their own container only (`Restart`)",
    },
    Feature {
        name: "InPlacePodLevelResourcesVerticalScaling",
        declared: false,
        why: "pod-level resources are not implemented",
    },
    Feature {
        name: "ExtendWebSocketsToKubelet",
        declared: false,
        why: "the node API proxies streams to the runtime's streaming server, which does not \
              translate WebSocket port-forward tunnels; the apiserver translates for the node",
    },
    Feature {
        name: "InPlacePodVerticalScalingInitContainers",
        declared: false,
        why: "app containers and sidecars are resized in place; other init containers are not",
    },
    Feature {
        name: "InPlacePodVerticalScalingMemoryBackedVolumes",
        declared: false,
        why: "a memory-backed emptyDir keeps the size it was mounted with",
    },
    Feature {
        name: "UserNamespacesHostNetworkSupport",
        declared: false,
        why: "user namespaces are not implemented",
    },
    Feature {
        name: "DRANodeAllocatableResources",
        declared: false,
        why: "dynamic resource allocation is not implemented",
    },
    Feature {
        name: "VolumeBindMountOptions",
        declared: false,
        why: "volume mounts' bindMountOptions are not implemented",
    },
    Feature {
        name: "DRAOptionalNodeOperations",
        declared: false,
        why: "dynamic resource allocation is not implemented",
    },
];

/// What the Node's `status.declaredFeatures` lists.
pub fn declared() -> Vec<&'static str> {
    REGISTRY
        .iter()
        .filter(|f| f.declared)
        .map(|f| f.name)
        .collect()
}

/// The features a pod needs of the node it runs on, as the registry infers them for
/// scheduling (from the fields picolet's pod model holds).
pub fn required(pod: &Pod) -> Vec<&'static str> {
    let mut out = Vec::new();
    let all_containers = pod.spec.containers.iter().chain(&pod.spec.init_containers);
    if all_containers
        .flat_map(|c| &c.restart_policy_rules)
        .any(|r| r.action == "RestartAllContainers")
    {
        out.push("RestartAllContainersOnContainerExits");
    }
    if pod.spec.host_network && pod.spec.host_users == Some(false) {
        out.push("UserNamespacesHostNetworkSupport");
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_registry_is_v1_37s_and_picolet_declares_none_of_it_yet() {
        let names: Vec<_> = REGISTRY.iter().map(|f| f.name).collect();
        assert_eq!(names.len(), 9);
        let unique: std::collections::BTreeSet<_> = names.iter().collect();
        assert_eq!(unique.len(), names.len());
        assert!(names.contains(&"ExtendWebSocketsToKubelet"));
        assert!(REGISTRY.iter().all(|f| !f.why.is_empty()));
        assert_eq!(declared(), Vec::<&str>::new());
    }
}
