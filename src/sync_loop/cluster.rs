//! The cluster's tasks' view of the loop (`cluster::Kubelet`).

use std::collections::BTreeSet;
use std::rc::Rc;

use super::Kubelet;
use crate::api::{Pod, PodStatus};
use crate::cluster::PodStatusView;

impl crate::cluster::Kubelet for Kubelet {
    fn healthz(&self) -> Result<(), crate::pleg::Unhealthy> {
        Kubelet::healthz(self)
    }

    fn pressure(&self) -> crate::eviction::Pressure {
        Kubelet::pressure(self)
    }

    fn pod_status(&self, uid: &str) -> Option<PodStatus> {
        Kubelet::pod_status(self, uid)
    }

    fn api_pod_statuses(&self) -> Vec<PodStatusView> {
        Kubelet::api_pod_statuses(self)
    }

    fn api_pods(&self) -> Vec<Rc<Pod>> {
        Kubelet::api_pods(self)
    }

    fn api_pods_changed(&self) -> async_channel::Receiver<()> {
        Kubelet::api_pods_changed(self)
    }

    fn pod_statuses_changed(&self) -> async_channel::Receiver<()> {
        Kubelet::pod_statuses_changed(self)
    }

    fn static_pods(&self) -> Vec<Rc<Pod>> {
        Kubelet::static_pods(self)
    }

    fn sync_now(&self, uids: &BTreeSet<String>) {
        Kubelet::sync_now(self, uids);
    }

    fn take_finalizable(&self) -> Vec<Rc<Pod>> {
        Kubelet::take_finalizable(self)
    }

    fn retry_finalize(&self, pod: Rc<Pod>) {
        Kubelet::retry_finalize(self, pod);
    }

    fn forget_status(&self, uid: &str) {
        Kubelet::forget_status(self, uid);
    }

    fn not_ready_reason(&self) -> Option<&'static str> {
        Kubelet::not_ready_reason(self)
    }

    fn node_changed(&self) -> async_channel::Receiver<()> {
        Kubelet::node_changed(self)
    }

    fn set_status_unreachable(&self, unreachable: bool) {
        Kubelet::set_status_unreachable(self, unreachable);
    }
}
