//! The runtime services wrapped to count each call, its errors and its duration by operation
//! type, as the kubelet's instrumented services do (`kubelet_runtime_operations_total`,
//! `_errors_total`, `_duration_seconds`; the operation names are upstream's). One map update
//! per call: nothing beside the call itself.

use std::cell::RefCell;
use std::collections::BTreeMap;
use std::rc::Rc;
use std::time::Duration;

use crate::cri::service::{Call, ImageService, RuntimeService};
use crate::cri::{CriError, v1};
use crate::rt;
use crate::stats::expose::OpStats;
use crate::stats::prom::{Histogram, RUNTIME_BUCKETS};

/// The counters, shared by the wrapper and `/metrics`.
#[derive(Debug, Default)]
pub struct Ops {
    by_op: RefCell<BTreeMap<&'static str, OpStats>>,
}

impl Ops {
    fn record(&self, op: &'static str, took: Duration, failed: bool) {
        let mut m = self.by_op.borrow_mut();
        let s = m.entry(op).or_insert_with(|| OpStats {
            total: 0,
            errors: 0,
            duration: Histogram::new(RUNTIME_BUCKETS),
        });
        s.total += 1;
        s.errors += u64::from(failed);
        s.duration.observe(took.as_secs_f64());
    }

    /// Each operation type seen so far, by name.
    pub fn snapshot(&self) -> Vec<(&'static str, OpStats)> {
        self.by_op
            .borrow()
            .iter()
            .map(|(k, v)| (*k, v.clone()))
            .collect()
    }
}

/// A runtime (and image) service whose calls are counted in [`Ops`].
pub struct Instrumented<R: ?Sized, I: ?Sized> {
    runtime: Rc<R>,
    images: Rc<I>,
    ops: Rc<Ops>,
}

impl<R: ?Sized, I: ?Sized> Instrumented<R, I> {
    pub fn new(runtime: Rc<R>, images: Rc<I>, ops: Rc<Ops>) -> Self {
        Instrumented {
            runtime,
            images,
            ops,
        }
    }
}

fn timed<'a, T: 'a>(ops: &'a Ops, op: &'static str, call: Call<'a, T>) -> Call<'a, T> {
    Box::pin(async move {
        let t0 = rt::now();
        let r: Result<T, CriError> = call.await;
        ops.record(op, rt::now() - t0, r.is_err());
        r
    })
}

impl<R: RuntimeService + ?Sized, I: ?Sized> RuntimeService for Instrumented<R, I> {
    fn version(&self) -> Call<'_, v1::VersionResponse> {
        timed(&self.ops, "version", self.runtime.version())
    }
    fn status(&self, verbose: bool) -> Call<'_, v1::StatusResponse> {
        timed(&self.ops, "status", self.runtime.status(verbose))
    }
    fn run_pod_sandbox(
        &self,
        req: v1::RunPodSandboxRequest,
    ) -> Call<'_, v1::RunPodSandboxResponse> {
        timed(
            &self.ops,
            "run_podsandbox",
            self.runtime.run_pod_sandbox(req),
        )
    }
    fn stop_pod_sandbox(&self, id: &str) -> Call<'_, ()> {
        timed(
            &self.ops,
            "stop_podsandbox",
            self.runtime.stop_pod_sandbox(id),
        )
    }
    fn remove_pod_sandbox(&self, id: &str) -> Call<'_, ()> {
        timed(
            &self.ops,
            "remove_podsandbox",
            self.runtime.remove_pod_sandbox(id),
        )
    }
    fn pod_sandbox_status(&self, id: &str) -> Call<'_, v1::PodSandboxStatusResponse> {
        timed(
            &self.ops,
            "podsandbox_status",
            self.runtime.pod_sandbox_status(id),
        )
    }
    fn list_pod_sandbox(
        &self,
        filter: Option<v1::PodSandboxFilter>,
    ) -> Call<'_, Vec<v1::PodSandbox>> {
        timed(
            &self.ops,
            "list_podsandbox",
            self.runtime.list_pod_sandbox(filter),
        )
    }
    fn create_container(
        &self,
        req: v1::CreateContainerRequest,
    ) -> Call<'_, v1::CreateContainerResponse> {
        timed(
            &self.ops,
            "create_container",
            self.runtime.create_container(req),
        )
    }
    fn start_container(&self, id: &str) -> Call<'_, ()> {
        timed(
            &self.ops,
            "start_container",
            self.runtime.start_container(id),
        )
    }
    fn stop_container(&self, id: &str, grace_secs: i64) -> Call<'_, ()> {
        timed(
            &self.ops,
            "stop_container",
            self.runtime.stop_container(id, grace_secs),
        )
    }
    fn remove_container(&self, id: &str) -> Call<'_, ()> {
        timed(
            &self.ops,
            "remove_container",
            self.runtime.remove_container(id),
        )
    }
    fn list_containers(&self, filter: Option<v1::ContainerFilter>) -> Call<'_, Vec<v1::Container>> {
        timed(
            &self.ops,
            "list_containers",
            self.runtime.list_containers(filter),
        )
    }
    fn list_container_stats(&self) -> Call<'_, Vec<v1::ContainerStats>> {
        timed(
            &self.ops,
            "list_container_stats",
            self.runtime.list_container_stats(),
        )
    }
    fn container_status(&self, id: &str, verbose: bool) -> Call<'_, v1::ContainerStatusResponse> {
        timed(
            &self.ops,
            "container_status",
            self.runtime.container_status(id, verbose),
        )
    }
    fn exec_sync(
        &self,
        id: &str,
        cmd: Vec<String>,
        timeout: Duration,
    ) -> Call<'_, v1::ExecSyncResponse> {
        timed(
            &self.ops,
            "exec_sync",
            self.runtime.exec_sync(id, cmd, timeout),
        )
    }
    fn reopen_container_log(&self, id: &str) -> Call<'_, ()> {
        timed(
            &self.ops,
            "reopen_container_log",
            self.runtime.reopen_container_log(id),
        )
    }
    fn update_container_resources(
        &self,
        id: &str,
        linux: v1::LinuxContainerResources,
    ) -> Call<'_, ()> {
        timed(
            &self.ops,
            "update_container_resources",
            self.runtime.update_container_resources(id, linux),
        )
    }
    fn runtime_config(&self) -> Call<'_, v1::RuntimeConfigResponse> {
        timed(&self.ops, "runtime_config", self.runtime.runtime_config())
    }
    fn exec(&self, req: v1::ExecRequest) -> Call<'_, v1::ExecResponse> {
        timed(&self.ops, "exec", self.runtime.exec(req))
    }
    fn attach(&self, req: v1::AttachRequest) -> Call<'_, v1::AttachResponse> {
        timed(&self.ops, "attach", self.runtime.attach(req))
    }
    fn port_forward(&self, req: v1::PortForwardRequest) -> Call<'_, v1::PortForwardResponse> {
        timed(&self.ops, "port_forward", self.runtime.port_forward(req))
    }
}

impl<R: ?Sized, I: ImageService + ?Sized> ImageService for Instrumented<R, I> {
    fn image_status(&self, image: &str) -> Call<'_, Option<v1::Image>> {
        timed(&self.ops, "image_status", self.images.image_status(image))
    }
    fn pull_image(&self, image: &str, auth: Option<v1::AuthConfig>) -> Call<'_, String> {
        timed(&self.ops, "pull_image", self.images.pull_image(image, auth))
    }
    fn list_images(&self) -> Call<'_, Vec<v1::Image>> {
        timed(&self.ops, "list_images", self.images.list_images())
    }
    fn remove_image(&self, image: &str) -> Call<'_, ()> {
        timed(&self.ops, "remove_image", self.images.remove_image(image))
    }
    fn image_fs_info(&self) -> Call<'_, v1::ImageFsInfoResponse> {
        timed(&self.ops, "image_fs_info", self.images.image_fs_info())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::cri::fake::FakeRuntime;

    #[test]
    fn counts_calls_errors_and_durations_by_upstream_names() {
        let fake = Rc::new(FakeRuntime::default());
        let ops = Rc::new(Ops::default());
        let inst = Instrumented::new(fake.clone(), fake, ops.clone());
        rt::block_on(async {
            inst.version().await.unwrap();
            inst.list_pod_sandbox(None).await.unwrap();
            inst.list_pod_sandbox(None).await.unwrap();
            assert!(inst.container_status("nope", false).await.is_err());
        });
        let snap = ops.snapshot();
        let get = |op: &str| snap.iter().find(|(o, _)| *o == op).map(|(_, s)| s.clone());
        let l = get("list_podsandbox").unwrap();
        assert_eq!((l.total, l.errors, l.duration.count()), (2, 0, 2));
        let c = get("container_status").unwrap();
        assert_eq!((c.total, c.errors), (1, 1));
        assert_eq!(get("version").unwrap().total, 1);
        assert!(get("run_podsandbox").is_none());
    }
}
