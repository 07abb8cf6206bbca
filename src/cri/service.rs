//! The runtime seam: the CRI's runtime and image services as traits, in the CRI's own messages.
//!
//! The gRPC client ([`super::Cri`]) implements them over the wire; [`super::fake::FakeRuntime`]
//! implements them in process, so the runtime manager, the PLEG, the pod workers and the loop
//! can be tested without a socket. Only `kuberuntime` holds these traits; it turns what they
//! return into `kubecontainer` types, so nothing past it sees a CRI message.
//!
//! The futures are boxed and not `Send`: everything runs on the one local executor, and a box
//! per runtime call is nothing beside the call itself. Boxing keeps the traits object-safe, so
//! the manager holds `Rc<dyn RuntimeService>` instead of growing a type parameter that every
//! module above it would carry.

use std::future::Future;
use std::pin::Pin;
use std::time::Duration;

use super::{CriError, v1};

/// A runtime call in flight.
pub type Call<'a, T> = Pin<Box<dyn Future<Output = Result<T, CriError>> + 'a>>;

/// The CRI `RuntimeService` calls picolet makes.
pub trait RuntimeService {
    fn version(&self) -> Call<'_, v1::VersionResponse>;
    /// The runtime's conditions; `verbose` adds its configuration (`info["config"]`, JSON).
    fn status(&self, verbose: bool) -> Call<'_, v1::StatusResponse>;
    fn run_pod_sandbox(&self, req: v1::RunPodSandboxRequest)
    -> Call<'_, v1::RunPodSandboxResponse>;
    fn stop_pod_sandbox(&self, id: &str) -> Call<'_, ()>;
    fn remove_pod_sandbox(&self, id: &str) -> Call<'_, ()>;
    fn pod_sandbox_status(&self, id: &str) -> Call<'_, v1::PodSandboxStatusResponse>;
    fn list_pod_sandbox(
        &self,
        filter: Option<v1::PodSandboxFilter>,
    ) -> Call<'_, Vec<v1::PodSandbox>>;
    fn create_container(
        &self,
        req: v1::CreateContainerRequest,
    ) -> Call<'_, v1::CreateContainerResponse>;
    fn start_container(&self, id: &str) -> Call<'_, ()>;
    /// Stops a container, giving it `grace_secs` to exit before it is killed.
    fn stop_container(&self, id: &str, grace_secs: i64) -> Call<'_, ()>;
    fn remove_container(&self, id: &str) -> Call<'_, ()>;
    fn list_containers(&self, filter: Option<v1::ContainerFilter>) -> Call<'_, Vec<v1::Container>>;
    /// A container's status; `verbose` adds the runtime's `info` (containerd: the init pid).
    fn container_status(&self, id: &str, verbose: bool) -> Call<'_, v1::ContainerStatusResponse>;
    /// Every container's stats (the writable layer's usage among them), in one call.
    fn list_container_stats(&self) -> Call<'_, Vec<v1::ContainerStats>>;
    /// Runs a command in a container and waits for it, up to `timeout`.
    fn exec_sync(
        &self,
        id: &str,
        cmd: Vec<String>,
        timeout: Duration,
    ) -> Call<'_, v1::ExecSyncResponse>;
    /// Makes the runtime reopen the container's log file (after it was renamed for rotation).
    fn reopen_container_log(&self, id: &str) -> Call<'_, ()>;
    /// New cgroup limits for a running container (an in-place resize).
    fn update_container_resources(
        &self,
        id: &str,
        linux: v1::LinuxContainerResources,
    ) -> Call<'_, ()>;
    /// The runtime's own configuration (its cgroup driver); containerd before 2.0 answers
    /// `Unimplemented`.
    fn runtime_config(&self) -> Call<'_, v1::RuntimeConfigResponse>;
    /// A one-time URL on the runtime's streaming server running a command in a container.
    fn exec(&self, req: v1::ExecRequest) -> Call<'_, v1::ExecResponse>;
    /// A one-time URL on the runtime's streaming server attached to a container's process.
    fn attach(&self, req: v1::AttachRequest) -> Call<'_, v1::AttachResponse>;
    /// A one-time URL on the runtime's streaming server forwarding ports of a sandbox.
    fn port_forward(&self, req: v1::PortForwardRequest) -> Call<'_, v1::PortForwardResponse>;
}

/// The CRI `ImageService` calls picolet makes.
pub trait ImageService {
    fn image_status(&self, image: &str) -> Call<'_, Option<v1::Image>>;
    /// Pulls an image, with the registry credential `auth` or anonymously; returns the image
    /// reference the runtime resolved it to.
    fn pull_image(&self, image: &str, auth: Option<v1::AuthConfig>) -> Call<'_, String>;
    /// Every image stored locally.
    fn list_images(&self) -> Call<'_, Vec<v1::Image>>;
    /// Removes an image (by id or reference); an image that is not there is no error.
    fn remove_image(&self, image: &str) -> Call<'_, ()>;
    /// Where the runtime keeps its images, and how much they use.
    fn image_fs_info(&self) -> Call<'_, v1::ImageFsInfoResponse>;
}

pub(crate) fn image_spec(image: &str) -> Option<v1::ImageSpec> {
    Some(v1::ImageSpec {
        image: image.to_owned(),
        ..Default::default()
    })
}
