//! The kubelet as the HTTP server sees it: `server::Host` over the loop's pods, the status
//! manager, the PLEG cache and the runtime manager, which stay private to the loop.

use super::Kubelet;
use crate::kubecontainer::{ContainerState, SandboxState};
use crate::server::{Host, HostMetrics};

impl Host for Kubelet {
    fn node_name(&self) -> String {
        self.rm.node().node_name.clone()
    }

    fn healthz(&self) -> Result<(), String> {
        Kubelet::healthz(self)
    }

    fn pod_list(&self) -> crate::api::PodList {
        Kubelet::pod_list(self)
    }

    fn stats_pods(&self) -> Vec<crate::stats::PodRef> {
        crate::stats::pods_from_cache(&self.cache.borrow())
    }

    fn metrics(&self) -> HostMetrics {
        let (mut running_pods, mut containers) = (0, [0usize; 4]);
        let cache = self.cache.borrow();
        for uid in cache.uids() {
            let Some(c) = cache.get(&uid) else { continue };
            running_pods += usize::from(
                c.status
                    .sandboxes
                    .iter()
                    .any(|s| s.state == SandboxState::Ready),
            );
            for ctr in &c.status.containers {
                containers[match ctr.state {
                    ContainerState::Created => 0,
                    ContainerState::Running => 1,
                    ContainerState::Exited => 2,
                    ContainerState::Unknown => 3,
                }] += 1;
            }
        }
        HostMetrics {
            running_pods,
            containers,
            relist: self.pleg.metrics.borrow().clone(),
            pod_start: self.status.pod_start.borrow().clone(),
        }
    }

    fn locate_log(
        &self,
        namespace: &str,
        pod: &str,
        container: &str,
        previous: bool,
    ) -> Result<crate::logs::Located, (u16, String)> {
        let pod_obj = self.pod_by_name(namespace, pod);
        crate::logs::locate(
            pod_obj.as_deref(),
            &self.cache.borrow(),
            &self.rm,
            pod,
            container,
            previous,
        )
    }

    fn stream_log(
        &self,
        at: crate::logs::Located,
        reader: crate::logs::read::Reader,
        tx: async_channel::Sender<bytes::Bytes>,
    ) -> std::pin::Pin<Box<dyn Future<Output = ()>>> {
        Box::pin(crate::logs::stream(self.cache.clone(), at, reader, tx))
    }
}
