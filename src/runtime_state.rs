//! What the runtime says of its own readiness, as upstream's `runtimeState` (pkg/kubelet/
//! runtime.go) fed by the kubelet's `updateRuntimeUp` every [`RUNTIME_STATUS_PERIOD`]: here,
//! the runtime's NetworkReady condition (CRI `Status`). While the network is not ready it is
//! read every [`NOT_READY_PERIOD`], so pods waiting for it start soon after it is back.
//!
//! While the network is not ready (a node whose CNI configuration is missing), a pod that needs
//! a new sandbox outside the host's network is not given one: the sandbox could not get a
//! network, and on some runtimes (containerd 1.6) every failed one would stay behind until the
//! network comes back. The sync fails with `NetworkNotReady` instead, as upstream's SyncPod.
//! When the condition turns true, the pods that were held back, or whose sandbox failed, are
//! retried at once rather than at the end of their backoff (see `RuntimeManager::
//! update_runtime_status`).

use std::time::Duration;

use crate::cri::v1;

/// How often the runtime's status is read (upstream's `updateRuntimeUp` period).
pub const RUNTIME_STATUS_PERIOD: Duration = Duration::from_secs(5);

/// How often it is read while the network is not ready: pods are waiting for its return, and a
/// status call a second costs the runtime little and the log nothing.
pub const NOT_READY_PERIOD: Duration = Duration::from_secs(1);

/// The CRI condition type of the runtime's network.
pub const NETWORK_READY: &str = "NetworkReady";

/// What picolet knows of the runtime's network.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub enum Network {
    /// Not asked yet, or the runtime did not answer: nothing is held back.
    #[default]
    Unknown,
    Ready,
    /// Not ready, with upstream's message ("container runtime network not ready: ...").
    NotReady(String),
}

impl Network {
    /// The network as a runtime status shows it. A status without the condition says nothing
    /// (`Unknown`): a runtime that does not report it is not taken for one without a network.
    pub fn from_status(resp: &v1::StatusResponse) -> Network {
        let Some(c) = resp
            .status
            .as_ref()
            .and_then(|s| s.conditions.iter().find(|c| c.r#type == NETWORK_READY))
        else {
            return Network::Unknown;
        };
        if c.status {
            Network::Ready
        } else {
            Network::NotReady(format!(
                "container runtime network not ready: {NETWORK_READY}=false reason:{} message:{}",
                c.reason, c.message
            ))
        }
    }

    /// Why a pod needing the network cannot get a sandbox now, if it cannot.
    pub fn error(&self) -> Option<&str> {
        match self {
            Network::NotReady(e) => Some(e),
            _ => None,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn status(conditions: Vec<v1::RuntimeCondition>) -> v1::StatusResponse {
        v1::StatusResponse {
            status: Some(v1::RuntimeStatus { conditions }),
            info: Default::default(),
        }
    }

    fn cond(t: &str, ok: bool, reason: &str, message: &str) -> v1::RuntimeCondition {
        v1::RuntimeCondition {
            r#type: t.into(),
            status: ok,
            reason: reason.into(),
            message: message.into(),
        }
    }

    #[test]
    fn the_network_condition_decides() {
        let ready = status(vec![
            cond("RuntimeReady", true, "", ""),
            cond("NetworkReady", true, "", ""),
        ]);
        assert_eq!(Network::from_status(&ready), Network::Ready);
        assert_eq!(Network::from_status(&ready).error(), None);
        let not = status(vec![
            cond("RuntimeReady", true, "", ""),
            cond(
                "NetworkReady",
                false,
                "NetworkPluginNotReady",
                "Network plugin returns error: cni plugin not initialized",
            ),
        ]);
        let n = Network::from_status(&not);
        assert_eq!(
            n.error(),
            Some(
                "container runtime network not ready: NetworkReady=false \
                 reason:NetworkPluginNotReady message:Network plugin returns error: cni plugin \
                 not initialized"
            )
        );
    }

    #[test]
    fn a_status_without_the_condition_holds_nothing_back() {
        let only_runtime = status(vec![cond("RuntimeReady", true, "", "")]);
        assert_eq!(Network::from_status(&only_runtime), Network::Unknown);
        let empty = v1::StatusResponse::default();
        assert_eq!(Network::from_status(&empty), Network::Unknown);
        assert_eq!(Network::Unknown.error(), None);
    }
}
