//! The kubelet as the HTTP server sees it: `server::Host` over the loop's pods, the status
//! manager, the PLEG cache and the runtime manager, which stay private to the loop.

use super::Kubelet;
use crate::kubecontainer::{ContainerState, SandboxState};
#[cfg(feature = "node-api")]
use crate::server::{Answer, Streams, Target};
use crate::server::{Error, Host, HostMetrics};

#[cfg(feature = "node-api")]
impl Kubelet {
    /// The pod a request names: not found, "pod does not exist" as the kubelet says, also when
    /// a UID is given and differs.
    fn named_pod(
        &self,
        namespace: &str,
        pod: &str,
        uid: Option<&str>,
    ) -> Result<std::rc::Rc<crate::api::Pod>, Error> {
        self.pod_by_name(namespace, pod)
            .filter(|p| uid.is_none_or(|u| u == p.metadata.uid))
            .ok_or_else(|| Error::NotFound("pod does not exist".to_owned()))
    }

    /// The running instance of a container: not found, "container not found" when there is
    /// none.
    fn running_container(&self, t: Target) -> Result<String, Error> {
        let p = self.named_pod(t.namespace, t.pod, t.uid)?;
        let not_found = || Error::NotFound(format!("container not found ({:?})", t.container));
        let cache = self.cache.borrow();
        let cached = cache.get(&p.metadata.uid).ok_or_else(not_found)?;
        cached
            .status
            .containers
            .iter()
            .filter(|c| *c.name == *t.container && c.state == ContainerState::Running)
            .max_by_key(|c| c.created_at)
            .map(|c| c.id.to_string())
            .ok_or_else(not_found)
    }

    /// The ready sandbox of a pod: not found when it has none running.
    fn running_sandbox(
        &self,
        namespace: &str,
        pod: &str,
        uid: Option<&str>,
    ) -> Result<String, Error> {
        let p = self.named_pod(namespace, pod, uid)?;
        let cache = self.cache.borrow();
        cache
            .get(&p.metadata.uid)
            .and_then(|c| {
                c.status
                    .sandboxes
                    .iter()
                    .find(|s| s.state == SandboxState::Ready)
                    .map(|s| s.id.to_string())
            })
            .ok_or_else(|| Error::NotFound(format!("pod {pod:?} is not running")))
    }
}

/// Where a container's log is not, as the node API answers it: 404 for a pod or container
/// that is not there, 400 when it has no log (yet).
fn log_error((code, message): (u16, String)) -> Error {
    if code == 404 {
        Error::NotFound(message)
    } else {
        Error::BadRequest(message)
    }
}

impl Host for Kubelet {
    fn node_name(&self) -> String {
        self.rm.node().node_name.clone()
    }

    fn healthz(&self) -> Result<(), Error> {
        Kubelet::healthz(self).map_err(|e| Error::internal(e.to_string()))
    }

    fn pod_list(&self) -> crate::api::PodList {
        Kubelet::pod_list(self)
    }

    fn stats_pods(&self) -> Vec<crate::stats::PodRef> {
        crate::stats::pods_from_cache(&self.cache.borrow())
    }

    fn probe_counts(&self) -> Vec<crate::prober::ProbeCounts> {
        self.prober.counts()
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
    ) -> Result<crate::logs::Located, Error> {
        let pod_obj = self.pod_by_name(namespace, pod);
        crate::logs::locate(
            pod_obj.as_deref(),
            &self.cache.borrow(),
            &self.rm,
            pod,
            container,
            previous,
        )
        .map_err(log_error)
    }

    fn stream_log(
        &self,
        at: crate::logs::Located,
        reader: crate::logs::read::Reader,
        tx: async_channel::Sender<bytes::Bytes>,
    ) -> std::pin::Pin<Box<dyn Future<Output = ()>>> {
        Box::pin(crate::logs::stream(self.cache.clone(), at, reader, tx))
    }

    #[cfg(feature = "node-api")]
    fn exec_url(&self, t: Target, cmd: Vec<String>, s: Streams) -> Answer<String> {
        let found = self.running_container(t);
        let rm = self.rm.clone();
        Box::pin(async move { rm.exec_url(&found?, cmd, s).await.map_err(Error::from) })
    }

    #[cfg(feature = "node-api")]
    fn attach_url(&self, t: Target, s: Streams) -> Answer<String> {
        let found = self.running_container(t);
        let rm = self.rm.clone();
        Box::pin(async move { rm.attach_url(&found?, s).await.map_err(Error::from) })
    }

    #[cfg(feature = "node-api")]
    fn port_forward_url(
        &self,
        namespace: &str,
        pod: &str,
        uid: Option<&str>,
        ports: Vec<i32>,
    ) -> Answer<String> {
        let found = self.running_sandbox(namespace, pod, uid);
        let rm = self.rm.clone();
        Box::pin(async move {
            rm.port_forward_url(&found?, ports)
                .await
                .map_err(Error::from)
        })
    }

    #[cfg(feature = "node-api")]
    fn run(&self, t: Target, cmd: Vec<String>) -> Answer<Vec<u8>> {
        let found = self.running_container(t);
        let rm = self.rm.clone();
        Box::pin(async move {
            let out = rm
                .exec_sync(&found?, &cmd, std::time::Duration::ZERO)
                .await
                .map_err(Error::from_source)?;
            Ok(out.output)
        })
    }
}
