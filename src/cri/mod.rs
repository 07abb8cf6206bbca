//! The CRI client: picolet's own subset of `runtime.v1`, generated at build time, called over
//! [`channel::UnixChannel`] with a deadline on every call.

pub mod channel;
#[cfg(any(test, feature = "testing"))]
pub mod fake;
pub mod service;

use std::future::Future;
use std::path::PathBuf;
use std::time::Duration;

use channel::UnixChannel;
pub use service::{Call, ImageService, RuntimeService};

/// Messages and clients generated from `proto/runtime.proto`.
#[allow(clippy::all, clippy::pedantic, missing_docs, reason = "generated code")]
pub mod v1 {
    tonic::include_proto!("runtime.v1");
}

use v1::image_service_client::ImageServiceClient;
use v1::runtime_service_client::RuntimeServiceClient;

/// Default endpoint, as the kubelet's `--container-runtime-endpoint`.
pub const DEFAULT_ENDPOINT: &str = "unix:///run/containerd/containerd.sock";
/// The CRI client version the kubelet sends in VersionRequest.
pub const KUBE_RUNTIME_API_VERSION: &str = "0.1.0";

#[derive(Debug, thiserror::Error)]
pub enum CriError {
    #[error(
        "invalid runtime endpoint {0:?}: only unix:// sockets (or absolute paths) are supported"
    )]
    Endpoint(String),
    #[error("{method}: deadline of {deadline:?} exceeded")]
    Timeout {
        method: &'static str,
        deadline: Duration,
    },
    #[error("{method}: {status}")]
    Status {
        method: &'static str,
        #[source]
        status: tonic::Status,
    },
}

impl CriError {
    /// True when the runtime says the object does not exist (already removed).
    pub fn is_not_found(&self) -> bool {
        matches!(self, CriError::Status { status, .. } if status.code() == tonic::Code::NotFound)
    }

    /// True when the call, or what it ran (an exec), ran out of time.
    pub fn is_deadline_exceeded(&self) -> bool {
        match self {
            CriError::Timeout { .. } => true,
            CriError::Status { status, .. } => status.code() == tonic::Code::DeadlineExceeded,
            CriError::Endpoint(_) => false,
        }
    }

    /// True for errors that mean the runtime is not reachable or did not answer in time.
    pub fn is_unavailable(&self) -> bool {
        match self {
            CriError::Timeout { .. } => true,
            CriError::Status { status, .. } => {
                matches!(
                    status.code(),
                    tonic::Code::Unavailable | tonic::Code::DeadlineExceeded
                )
            }
            CriError::Endpoint(_) => false,
        }
    }
}

/// Parses `unix:///path` or `/path` into a socket path.
pub fn parse_endpoint(endpoint: &str) -> Result<PathBuf, CriError> {
    let path = endpoint.strip_prefix("unix://").unwrap_or(endpoint);
    if path.starts_with('/') {
        Ok(PathBuf::from(path))
    } else {
        Err(CriError::Endpoint(endpoint.to_owned()))
    }
}

/// Deadlines for runtime calls.
#[derive(Debug, Clone, Copy)]
pub struct Deadlines {
    /// Every call but image pulls (the kubelet's `--runtime-request-timeout`, 2 min).
    pub request: Duration,
    /// Image pulls, which the kubelet bounds only by progress; picolet bounds them outright.
    pub pull: Duration,
    /// Dialing the socket.
    pub connect: Duration,
}

impl Default for Deadlines {
    fn default() -> Self {
        Deadlines {
            request: Duration::from_secs(120),
            pull: Duration::from_secs(600),
            connect: Duration::from_secs(5),
        }
    }
}

/// The runtime and image services, cheap to clone (all clones share one connection per socket).
#[derive(Clone, Debug)]
pub struct Cri {
    runtime: RuntimeServiceClient<UnixChannel>,
    images: ImageServiceClient<UnixChannel>,
    deadlines: Deadlines,
}

fn origin() -> http::Uri {
    // HTTP/2 needs a scheme and authority; the runtime ignores the authority.
    http::Uri::from_static("http://localhost")
}

fn request<T>(msg: T, deadline: Duration) -> tonic::Request<T> {
    let mut r = tonic::Request::new(msg);
    // Tell the runtime too, so it can abandon work nobody waits for any more.
    r.set_timeout(deadline);
    r
}

async fn call<T>(
    method: &'static str,
    deadline: Duration,
    fut: impl Future<Output = Result<tonic::Response<T>, tonic::Status>>,
) -> Result<T, CriError> {
    match crate::rt::timeout(deadline, fut).await {
        Ok(Ok(r)) => Ok(r.into_inner()),
        Ok(Err(status)) => Err(CriError::Status { method, status }),
        Err(_) => Err(CriError::Timeout { method, deadline }),
    }
}

macro_rules! rpc {
    ($(#[$m:meta])* $svc:ident . $name:ident ( $req:ty ) -> $resp:ty, $deadline:ident) => {
        $(#[$m])*
        pub async fn $name(&self, req: $req) -> Result<$resp, CriError> {
            let d = self.deadlines.$deadline;
            let mut c = self.$svc.clone();
            call(stringify!($name), d, c.$name(request(req, d))).await
        }
    };
}

impl Cri {
    /// A client for the runtime at `runtime_endpoint`, and images at `image_endpoint` (the same
    /// socket when `None`).
    pub fn new(
        runtime_endpoint: &str,
        image_endpoint: Option<&str>,
        deadlines: Deadlines,
    ) -> Result<Cri, CriError> {
        let rpath = parse_endpoint(runtime_endpoint)?;
        let rchan = UnixChannel::new(&rpath, deadlines.connect);
        let ichan = match image_endpoint {
            Some(ep) if parse_endpoint(ep)? != rpath => {
                UnixChannel::new(&parse_endpoint(ep)?, deadlines.connect)
            }
            _ => rchan.clone(),
        };
        Ok(Cri {
            runtime: RuntimeServiceClient::with_origin(rchan, origin()),
            images: ImageServiceClient::with_origin(ichan, origin()),
            deadlines,
        })
    }

    rpc!(runtime.version(v1::VersionRequest) -> v1::VersionResponse, request);
    rpc!(runtime.status(v1::StatusRequest) -> v1::StatusResponse, request);
    rpc!(runtime.runtime_config(v1::RuntimeConfigRequest) -> v1::RuntimeConfigResponse, request);
    rpc!(runtime.run_pod_sandbox(v1::RunPodSandboxRequest) -> v1::RunPodSandboxResponse, request);
    rpc!(runtime.stop_pod_sandbox(v1::StopPodSandboxRequest) -> v1::StopPodSandboxResponse, request);
    rpc!(runtime.remove_pod_sandbox(v1::RemovePodSandboxRequest) -> v1::RemovePodSandboxResponse, request);
    rpc!(runtime.pod_sandbox_status(v1::PodSandboxStatusRequest) -> v1::PodSandboxStatusResponse, request);
    rpc!(runtime.list_pod_sandbox(v1::ListPodSandboxRequest) -> v1::ListPodSandboxResponse, request);
    rpc!(runtime.create_container(v1::CreateContainerRequest) -> v1::CreateContainerResponse, request);
    rpc!(runtime.start_container(v1::StartContainerRequest) -> v1::StartContainerResponse, request);
    rpc!(runtime.remove_container(v1::RemoveContainerRequest) -> v1::RemoveContainerResponse, request);
    rpc!(runtime.list_containers(v1::ListContainersRequest) -> v1::ListContainersResponse, request);
    rpc!(runtime.container_status(v1::ContainerStatusRequest) -> v1::ContainerStatusResponse, request);
    rpc!(runtime.reopen_container_log(v1::ReopenContainerLogRequest) -> v1::ReopenContainerLogResponse, request);
    rpc!(runtime.update_container_resources(v1::UpdateContainerResourcesRequest) -> v1::UpdateContainerResourcesResponse, request);
    rpc!(runtime.container_stats(v1::ContainerStatsRequest) -> v1::ContainerStatsResponse, request);
    rpc!(runtime.list_container_stats(v1::ListContainerStatsRequest) -> v1::ListContainerStatsResponse, request);
    rpc!(runtime.exec(v1::ExecRequest) -> v1::ExecResponse, request);
    rpc!(runtime.attach(v1::AttachRequest) -> v1::AttachResponse, request);
    rpc!(runtime.port_forward(v1::PortForwardRequest) -> v1::PortForwardResponse, request);
    rpc!(images.list_images(v1::ListImagesRequest) -> v1::ListImagesResponse, request);
    rpc!(images.image_status(v1::ImageStatusRequest) -> v1::ImageStatusResponse, request);
    rpc!(images.pull_image(v1::PullImageRequest) -> v1::PullImageResponse, pull);
    rpc!(images.remove_image(v1::RemoveImageRequest) -> v1::RemoveImageResponse, request);
    rpc!(images.image_fs_info(v1::ImageFsInfoRequest) -> v1::ImageFsInfoResponse, request);

    /// Stops a container, giving it `timeout_secs` to exit before the runtime kills it; the
    /// deadline covers that grace period on top of the usual request deadline.
    pub async fn stop_container(
        &self,
        container_id: &str,
        timeout_secs: i64,
    ) -> Result<(), CriError> {
        let grace = Duration::from_secs(u64::try_from(timeout_secs).unwrap_or(0));
        let d = self.deadlines.request + grace;
        let mut c = self.runtime.clone();
        let req = v1::StopContainerRequest {
            container_id: container_id.to_owned(),
            timeout: timeout_secs,
        };
        call("stop_container", d, c.stop_container(request(req, d)))
            .await
            .map(drop)
    }

    /// Runs a command in a container and waits for it, up to `timeout`.
    pub async fn exec_sync(
        &self,
        container_id: &str,
        cmd: Vec<String>,
        timeout: Duration,
    ) -> Result<v1::ExecSyncResponse, CriError> {
        let d = self.deadlines.request + timeout;
        let mut c = self.runtime.clone();
        let req = v1::ExecSyncRequest {
            container_id: container_id.to_owned(),
            cmd,
            timeout: i64::try_from(timeout.as_secs()).unwrap_or(i64::MAX),
        };
        call("exec_sync", d, c.exec_sync(request(req, d))).await
    }
}

impl RuntimeService for Cri {
    fn status(&self, verbose: bool) -> Call<'_, v1::StatusResponse> {
        Box::pin(async move { Cri::status(self, v1::StatusRequest { verbose }).await })
    }
    fn version(&self) -> Call<'_, v1::VersionResponse> {
        // The version of the CRI client the kubelet announces.
        Box::pin(Cri::version(
            self,
            v1::VersionRequest {
                version: KUBE_RUNTIME_API_VERSION.to_owned(),
            },
        ))
    }
    fn run_pod_sandbox(
        &self,
        req: v1::RunPodSandboxRequest,
    ) -> Call<'_, v1::RunPodSandboxResponse> {
        Box::pin(Cri::run_pod_sandbox(self, req))
    }
    fn stop_pod_sandbox(&self, id: &str) -> Call<'_, ()> {
        let req = v1::StopPodSandboxRequest {
            pod_sandbox_id: id.to_owned(),
        };
        Box::pin(async move { Cri::stop_pod_sandbox(self, req).await.map(drop) })
    }
    fn remove_pod_sandbox(&self, id: &str) -> Call<'_, ()> {
        let req = v1::RemovePodSandboxRequest {
            pod_sandbox_id: id.to_owned(),
        };
        Box::pin(async move { Cri::remove_pod_sandbox(self, req).await.map(drop) })
    }
    fn pod_sandbox_status(&self, id: &str) -> Call<'_, v1::PodSandboxStatusResponse> {
        let req = v1::PodSandboxStatusRequest {
            pod_sandbox_id: id.to_owned(),
            verbose: false,
        };
        Box::pin(Cri::pod_sandbox_status(self, req))
    }
    fn list_pod_sandbox(
        &self,
        filter: Option<v1::PodSandboxFilter>,
    ) -> Call<'_, Vec<v1::PodSandbox>> {
        let req = v1::ListPodSandboxRequest { filter };
        Box::pin(async move { Ok(Cri::list_pod_sandbox(self, req).await?.items) })
    }
    fn create_container(
        &self,
        req: v1::CreateContainerRequest,
    ) -> Call<'_, v1::CreateContainerResponse> {
        Box::pin(Cri::create_container(self, req))
    }
    fn start_container(&self, id: &str) -> Call<'_, ()> {
        let req = v1::StartContainerRequest {
            container_id: id.to_owned(),
        };
        Box::pin(async move { Cri::start_container(self, req).await.map(drop) })
    }
    fn stop_container(&self, id: &str, grace_secs: i64) -> Call<'_, ()> {
        let id = id.to_owned();
        Box::pin(async move { Cri::stop_container(self, &id, grace_secs).await })
    }
    fn remove_container(&self, id: &str) -> Call<'_, ()> {
        let req = v1::RemoveContainerRequest {
            container_id: id.to_owned(),
        };
        Box::pin(async move { Cri::remove_container(self, req).await.map(drop) })
    }
    fn list_containers(&self, filter: Option<v1::ContainerFilter>) -> Call<'_, Vec<v1::Container>> {
        let req = v1::ListContainersRequest { filter };
        Box::pin(async move { Ok(Cri::list_containers(self, req).await?.containers) })
    }
    fn container_status(&self, id: &str, verbose: bool) -> Call<'_, v1::ContainerStatusResponse> {
        let req = v1::ContainerStatusRequest {
            container_id: id.to_owned(),
            verbose,
        };
        Box::pin(Cri::container_status(self, req))
    }
    fn list_container_stats(&self) -> Call<'_, Vec<v1::ContainerStats>> {
        let req = v1::ListContainerStatsRequest { filter: None };
        Box::pin(async move { Ok(Cri::list_container_stats(self, req).await?.stats) })
    }
    fn exec_sync(
        &self,
        id: &str,
        cmd: Vec<String>,
        timeout: Duration,
    ) -> Call<'_, v1::ExecSyncResponse> {
        let id = id.to_owned();
        Box::pin(async move { Cri::exec_sync(self, &id, cmd, timeout).await })
    }
    fn reopen_container_log(&self, id: &str) -> Call<'_, ()> {
        let req = v1::ReopenContainerLogRequest {
            container_id: id.to_owned(),
        };
        Box::pin(async move { Cri::reopen_container_log(self, req).await.map(drop) })
    }
    fn update_container_resources(
        &self,
        id: &str,
        linux: v1::LinuxContainerResources,
    ) -> Call<'_, ()> {
        let req = v1::UpdateContainerResourcesRequest {
            container_id: id.to_owned(),
            linux: Some(linux),
            ..Default::default()
        };
        Box::pin(async move { Cri::update_container_resources(self, req).await.map(drop) })
    }
    fn runtime_config(&self) -> Call<'_, v1::RuntimeConfigResponse> {
        Box::pin(Cri::runtime_config(self, v1::RuntimeConfigRequest {}))
    }
    fn exec(&self, req: v1::ExecRequest) -> Call<'_, v1::ExecResponse> {
        Box::pin(Cri::exec(self, req))
    }
    fn attach(&self, req: v1::AttachRequest) -> Call<'_, v1::AttachResponse> {
        Box::pin(Cri::attach(self, req))
    }
    fn port_forward(&self, req: v1::PortForwardRequest) -> Call<'_, v1::PortForwardResponse> {
        Box::pin(Cri::port_forward(self, req))
    }
}

impl ImageService for Cri {
    fn image_status(&self, image: &str) -> Call<'_, Option<v1::Image>> {
        let req = v1::ImageStatusRequest {
            image: service::image_spec(image),
            verbose: false,
        };
        Box::pin(async move { Ok(Cri::image_status(self, req).await?.image) })
    }
    fn pull_image(&self, image: &str, auth: Option<v1::AuthConfig>) -> Call<'_, String> {
        let req = v1::PullImageRequest {
            image: service::image_spec(image),
            auth,
            sandbox_config: None,
        };
        Box::pin(async move { Ok(Cri::pull_image(self, req).await?.image_ref) })
    }
    fn list_images(&self) -> Call<'_, Vec<v1::Image>> {
        let req = v1::ListImagesRequest { filter: None };
        Box::pin(async move { Ok(Cri::list_images(self, req).await?.images) })
    }
    fn remove_image(&self, image: &str) -> Call<'_, ()> {
        let req = v1::RemoveImageRequest {
            image: service::image_spec(image),
        };
        Box::pin(async move { Cri::remove_image(self, req).await.map(drop) })
    }
    fn image_fs_info(&self) -> Call<'_, v1::ImageFsInfoResponse> {
        Box::pin(async move { Cri::image_fs_info(self, v1::ImageFsInfoRequest {}).await })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn endpoints() {
        assert_eq!(
            parse_endpoint("unix:///run/containerd/containerd.sock").unwrap(),
            PathBuf::from("/run/containerd/containerd.sock")
        );
        assert_eq!(
            parse_endpoint("/tmp/x.sock").unwrap(),
            PathBuf::from("/tmp/x.sock")
        );
        assert!(parse_endpoint("tcp://127.0.0.1:1234").is_err());
        assert!(parse_endpoint("unix://relative.sock").is_err());
    }
}
