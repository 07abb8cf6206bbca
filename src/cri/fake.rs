//! An in-process fake of containerd's CRI runtime and image services, behind the runtime seam
//! ([`super::RuntimeService`], [`super::ImageService`]). Unit tests of the runtime manager, the
//! PLEG, the pod workers and the loop drive it directly; the wire-level fake server of the
//! integration tests (`tests/support/fake_cri.rs`) serves this same state over gRPC, so both
//! kinds of test see one behaviour.
//!
//! It behaves like containerd's CRI plugin, including the parts that surprise people:
//!
//! * ids are 64 hex characters, and every id argument (and the id filters) also accepts a unique
//!   prefix, as containerd's truncindex does;
//! * sandbox and container names are reserved until removal: a second RunPodSandbox with the
//!   same name/namespace/uid/attempt (or CreateContainer with the same container name and
//!   attempt in the same pod) fails with UNKNOWN "failed to reserve ... name";
//! * CreateContainer needs the sandbox READY (NOT_FOUND otherwise: containerd finds no sandbox
//!   task) and the image present locally (NOT_FOUND "failed to resolve image");
//! * Stop and Remove are idempotent: StopContainer on a container that is not running succeeds,
//!   RemoveContainer / RemovePodSandbox / RemoveImage of an unknown id succeed; StopPodSandbox,
//!   the status calls, StartContainer, ExecSync and ContainerStats of an unknown id are
//!   NOT_FOUND;
//! * StopPodSandbox kills the running containers of the pod (EXITED, 137, reason "Error"),
//!   leaves CREATED ones CREATED, and drops the pod IP (status then reports ip "");
//!   RemovePodSandbox stops first and removes the pod's containers;
//! * PullImage always goes to the "registry": it succeeds only for references marked with
//!   [`FakeRuntime::set_pullable`], otherwise NOT_FOUND "failed to pull and unpack image", even
//!   when the image is already present; image references are normalised (`busybox` is
//!   `docker.io/library/busybox:latest`); an image made private with
//!   [`FakeRuntime::require_auth`] also needs the pull's auth to carry its credential, and
//!   [`FakeRuntime::pull_auths`] tells what each pull carried;
//! * ImageStatus of a missing image is not an error: the response has no image.
//!
//! Timestamps are unix nanoseconds from [`crate::rt`]'s clock, so a fake clock drives them too.
//! Container exit reasons are "Completed" (code 0) or "Error".

use std::cell::RefCell;
use std::collections::hash_map::DefaultHasher;
use std::collections::{HashMap, HashSet, VecDeque};
use std::fmt::Write as _;
use std::hash::{Hash, Hasher};
use std::path::Path;
use std::rc::Rc;
use std::time::Duration;

use prost::Message;
use tonic::{Code, Status};

use super::service::{Call, ImageService, RuntimeService};
use super::{CriError, v1};
use crate::rt;

pub use v1::{ContainerState, PodSandboxState};

/// The IP prefix pods get, as containerd's default CNI config (`10.88.0.0/16`).
pub const POD_CIDR_PREFIX: &str = "10.88.";

/// What the fake reports as the runtime.
pub const RUNTIME_NAME: &str = "containerd";
pub const RUNTIME_VERSION: &str = "v1.7.0-fake";
/// The sandbox image of containerd's default configuration.
pub const DEFAULT_SANDBOX_IMAGE: &str = "registry.k8s.io/pause:3.8";

fn err(code: Code, message: impl Into<String>) -> Status {
    Status::new(code, message.into())
}

/// The in-process fake runtime; clones share one state. Single-threaded, like everything that
/// runs on picolet's executor.
#[derive(Clone)]
pub struct FakeRuntime {
    state: Rc<RefCell<State>>,
}

impl std::fmt::Debug for FakeRuntime {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let st = self.state.borrow();
        f.debug_struct("FakeRuntime")
            .field("sandboxes", &st.sandboxes.len())
            .field("containers", &st.containers.len())
            .finish()
    }
}

impl Default for FakeRuntime {
    fn default() -> Self {
        Self::new()
    }
}

/// `"pull_image"` or `"/runtime.v1.ImageService/PullImage"` to `"PullImage"`.
pub fn method_name(m: &str) -> String {
    let m = m.rsplit('/').next().unwrap_or(m);
    if m.contains('_') || m.starts_with(|c: char| c.is_ascii_lowercase()) {
        m.split('_')
            .map(|w| {
                let mut cs = w.chars();
                match cs.next() {
                    Some(c) => c.to_ascii_uppercase().to_string() + cs.as_str(),
                    None => String::new(),
                }
            })
            .collect()
    } else {
        m.to_owned()
    }
}

fn status_err(method: &str, status: Status) -> CriError {
    CriError::Status {
        method: static_name(method),
        status,
    }
}

/// The method names [`CriError`] carries are `'static`; the fake's calls come from this list.
fn static_name(method: &str) -> &'static str {
    const NAMES: &[&str] = &[
        "Version",
        "Status",
        "RunPodSandbox",
        "StopPodSandbox",
        "RemovePodSandbox",
        "PodSandboxStatus",
        "ListPodSandbox",
        "CreateContainer",
        "StartContainer",
        "StopContainer",
        "RemoveContainer",
        "ListContainers",
        "ContainerStatus",
        "ContainerStats",
        "ListContainerStats",
        "ExecSync",
        "ReopenContainerLog",
        "UpdateContainerResources",
        "ListImages",
        "ImageStatus",
        "PullImage",
        "RemoveImage",
        "ImageFsInfo",
    ];
    NAMES
        .iter()
        .find(|n| **n == method)
        .copied()
        .unwrap_or("unknown")
}

impl FakeRuntime {
    pub fn new() -> FakeRuntime {
        FakeRuntime {
            state: Rc::new(RefCell::new(State::new())),
        }
    }

    /// Adds a local image (the reference is normalised); returns its id. Idempotent.
    pub fn add_image(&self, name: &str) -> String {
        self.state.borrow_mut().add_image(&normalize_ref(name))
    }

    /// Sets the sandbox image the runtime's configuration names (verbose Status).
    pub fn set_sandbox_image(&self, name: &str) {
        self.state.borrow_mut().sandbox_image = name.to_owned();
    }

    /// Marks a local image pinned, as containerd 1.7 does with its sandbox image.
    pub fn pin_image(&self, name: &str) {
        let mut st = self.state.borrow_mut();
        let i = st.image_index(name).expect("pin_image: no such image");
        st.images[i].pinned = true;
    }

    /// Sets the size an image reports; returns nothing, panics for an unknown image.
    pub fn set_image_size(&self, name: &str, size: u64) {
        let mut st = self.state.borrow_mut();
        let i = st.image_index(name).expect("set_image_size: no such image");
        st.images[i].size = size;
    }

    /// The version the runtime says it is (containerd's, as `v2.1.0`).
    pub fn set_runtime_version(&self, version: &str) {
        self.state.borrow_mut().runtime_version = version.to_owned();
    }

    /// Lets PullImage of `name` succeed (adding the image).
    pub fn set_pullable(&self, name: &str) {
        self.state.borrow_mut().pullable.insert(normalize_ref(name));
    }

    /// Makes `name` a private image: PullImage succeeds only with this username and password
    /// (UNKNOWN "401 Unauthorized" otherwise, as containerd reports a registry's refusal).
    pub fn require_auth(&self, name: &str, username: &str, password: &str) {
        self.state.borrow_mut().private.insert(
            normalize_ref(name),
            (username.to_owned(), password.to_owned()),
        );
    }

    /// Every PullImage so far: the reference (normalised) and the username it carried, if any.
    pub fn pull_auths(&self) -> Vec<(String, Option<String>)> {
        self.state.borrow().pull_auths.clone()
    }

    /// Simulates the process of a running container exiting by itself with `code`. No-op for a
    /// container that is not running; panics for an unknown id.
    pub fn exit_container(&self, id: &str, code: i32) {
        let mut st = self.state.borrow_mut();
        let i = st
            .container_index(id)
            .unwrap_or_else(|e| panic!("exit_container({id}): {e:?}"));
        let c = &mut st.containers[i];
        if c.state == ContainerState::ContainerRunning {
            exit(c, code);
        }
    }

    /// The exit code a later StopContainer gives this container (default 137: SIGKILL).
    pub fn set_stop_exit_code(&self, id: &str, code: i32) {
        self.state
            .borrow_mut()
            .stop_exit_codes
            .insert(id.to_owned(), code);
    }

    /// Makes every later call of `method` sleep `d` before it does anything (zero: no delay).
    /// `method` is the gRPC name (`"PullImage"`) or picolet's (`"pull_image"`).
    pub fn set_delay(&self, method: &str, d: Duration) {
        let m = method_name(method);
        let mut st = self.state.borrow_mut();
        if d.is_zero() {
            st.delays.remove(&m);
        } else {
            st.delays.insert(m, d);
        }
    }

    /// Makes every ContainerStatus call for this container hang (until the caller gives up).
    pub fn hang_container_status(&self, id: &str) {
        self.state.borrow_mut().hung.insert(id.to_owned());
    }

    /// Makes the next call of `method` fail with this status code and message, without
    /// touching the state. Queued: calling it twice fails the next two calls.
    pub fn fail_next(&self, method: &str, code: Code, message: &str) {
        self.state
            .borrow_mut()
            .failures
            .entry(method_name(method))
            .or_default()
            .push_back((code, message.to_owned()));
    }

    /// The `version` field of every VersionRequest that came over gRPC.
    pub fn version_requests(&self) -> Vec<String> {
        self.state.borrow().version_requests.clone()
    }

    /// Every StopContainer that reached a container: its name and the timeout (seconds).
    pub fn stops(&self) -> Vec<(String, i64)> {
        self.state.borrow().stops.clone()
    }

    /// How many calls of `method` arrived.
    pub fn calls(&self, method: &str) -> usize {
        self.state
            .borrow()
            .calls
            .get(&method_name(method))
            .copied()
            .unwrap_or(0)
    }

    pub fn set_network_ready(&self, ready: bool) {
        self.state.borrow_mut().network_ready = ready;
    }

    /// Decides what execs do; commands the handler returns `None` for fall back to the
    /// built-ins: `echo ARGS`, `true`, `false`, `sh -c 'exit N'`, `sleep N`; anything else
    /// fails as a missing executable does (UNKNOWN).
    pub fn set_exec_handler(&self, f: impl Fn(&str, &[String]) -> Option<ExecReply> + 'static) {
        self.state.borrow_mut().exec = Some(Rc::new(f));
    }

    /// Serves the streaming calls (Exec, Attach, PortForward) with URLs under `base`, as
    /// containerd's streaming server hands them out; without it they are `Unimplemented`.
    pub fn set_streaming_url(&self, base: &str) {
        self.state.borrow_mut().streaming = Some(base.trim_end_matches('/').to_owned());
    }

    pub fn sandboxes(&self) -> Vec<FakeSandbox> {
        self.state.borrow().sandboxes.clone()
    }

    pub fn containers(&self) -> Vec<FakeContainer> {
        self.state.borrow().containers.clone()
    }

    /// The containers of the pod with this UID (its `io.kubernetes.pod.uid` label).
    pub fn containers_of_pod(&self, uid: &str) -> Vec<FakeContainer> {
        self.state
            .borrow()
            .containers
            .iter()
            .filter(|c| {
                c.config
                    .labels
                    .get("io.kubernetes.pod.uid")
                    .map(String::as_str)
                    == Some(uid)
            })
            .cloned()
            .collect()
    }

    pub fn images(&self) -> Vec<FakeImage> {
        self.state.borrow().images.clone()
    }

    pub fn sandbox(&self, id: &str) -> Option<FakeSandbox> {
        self.sandboxes().into_iter().find(|s| s.id == id)
    }

    pub fn container(&self, id: &str) -> Option<FakeContainer> {
        self.containers().into_iter().find(|c| c.id == id)
    }

    /// What every call goes through before it touches the state: it is counted, waits the
    /// delay set for its method, hangs when asked to, and takes an injected failure if one is
    /// queued. `hang_key` is the container id of a ContainerStatus call.
    async fn enter(&self, method: &str, hang_key: Option<&str>) -> Result<(), Status> {
        let delay = {
            let mut st = self.state.borrow_mut();
            *st.calls.entry(method.to_owned()).or_default() += 1;
            st.delays.get(method).copied()
        };
        if let Some(d) = delay {
            rt::sleep(d).await;
        }
        if let Some(id) = hang_key
            && self.state.borrow().hung.contains(id)
        {
            // A container whose inspection never answers (a process stuck on a dead mount).
            std::future::pending::<()>().await;
        }
        let injected = self
            .state
            .borrow_mut()
            .failures
            .get_mut(method)
            .and_then(VecDeque::pop_front);
        match injected {
            Some((code, msg)) => Err(err(code, msg)),
            None => Ok(()),
        }
    }

    /// One call in process: hooks, then `op` on the state.
    fn call<'a, T: 'a>(
        &'a self,
        method: &'static str,
        hang_key: Option<String>,
        op: impl FnOnce(&mut State) -> Result<T, Status> + 'a,
    ) -> Call<'a, T> {
        Box::pin(async move {
            self.enter(method, hang_key.as_deref())
                .await
                .map_err(|s| status_err(method, s))?;
            op(&mut self.state.borrow_mut()).map_err(|s| status_err(method, s))
        })
    }

    /// Serves one encoded request, as a gRPC server would: decodes the message, runs the call
    /// with its hooks, encodes the answer. `alive` is asked before the state is touched: a
    /// runtime that was stopped meanwhile does nothing more (UNAVAILABLE).
    pub async fn serve_encoded(
        &self,
        service: &str,
        method: &str,
        payload: &[u8],
        alive: impl Fn() -> bool,
    ) -> Result<Vec<u8>, Status> {
        fn decode<M: Message + Default>(p: &[u8]) -> Result<M, Status> {
            M::decode(p).map_err(|e| {
                err(
                    Code::Internal,
                    format!("grpc: error unmarshalling request: {e}"),
                )
            })
        }
        fn enc<M: Message>(r: Result<M, Status>) -> Result<Vec<u8>, Status> {
            r.map(|m| m.encode_to_vec())
        }
        let hang_key = if method == "ContainerStatus" {
            decode::<v1::ContainerStatusRequest>(payload)
                .ok()
                .map(|r| r.container_id)
        } else {
            None
        };
        self.enter(method, hang_key.as_deref()).await?;
        if !alive() {
            return Err(err(Code::Unavailable, "runtime stopped"));
        }
        if (service, method) == ("runtime.v1.RuntimeService", "ExecSync") {
            let req: v1::ExecSyncRequest = decode(payload)?;
            let reply = self.state.borrow().exec_sync(&req)?;
            let limit = u64::try_from(req.timeout)
                .ok()
                .filter(|t| *t > 0)
                .map(Duration::from_secs);
            return enc(run_exec(reply, limit).await);
        }
        let mut st = self.state.borrow_mut();
        match (service, method) {
            ("runtime.v1.RuntimeService", m) => match m {
                "Version" => {
                    let req: v1::VersionRequest = decode(payload)?;
                    st.version_requests.push(req.version);
                    enc(Ok(version(&st.runtime_version)))
                }
                "Status" => enc(Ok(st.status(decode(payload)?))),
                "RunPodSandbox" => enc(st.run_pod_sandbox(decode(payload)?)),
                "StopPodSandbox" => enc(st.stop_pod_sandbox(decode(payload)?)),
                "RemovePodSandbox" => enc(st.remove_pod_sandbox(decode(payload)?)),
                "PodSandboxStatus" => enc(st.pod_sandbox_status(decode(payload)?)),
                "ListPodSandbox" => enc(Ok(st.list_pod_sandbox(decode(payload)?))),
                "CreateContainer" => enc(st.create_container(decode(payload)?)),
                "StartContainer" => enc(st.start_container(decode(payload)?)),
                "StopContainer" => enc(st.stop_container(decode(payload)?)),
                "RemoveContainer" => enc(st.remove_container(decode(payload)?)),
                "ListContainers" => enc(Ok(st.list_containers(decode(payload)?))),
                "ContainerStatus" => enc(st.container_status(decode(payload)?)),
                "ContainerStats" => enc(st.container_stats(decode(payload)?)),
                "ListContainerStats" => {
                    let _: v1::ListContainerStatsRequest = decode(payload)?;
                    enc(Ok(st.list_container_stats()))
                }
                "ReopenContainerLog" => enc(st.reopen_container_log(decode(payload)?)),
                "UpdateContainerResources" => enc(st.update_container_resources(decode(payload)?)),
                "Exec" => {
                    let req: v1::ExecRequest = decode(payload)?;
                    let url = st.stream_url("exec", &req.container_id)?;
                    enc(Ok(v1::ExecResponse { url }))
                }
                "Attach" => {
                    let req: v1::AttachRequest = decode(payload)?;
                    let url = st.stream_url("attach", &req.container_id)?;
                    enc(Ok(v1::AttachResponse { url }))
                }
                "PortForward" => {
                    let url = st.port_forward_url(&decode(payload)?)?;
                    enc(Ok(v1::PortForwardResponse { url }))
                }
                _ => Err(err(
                    Code::Unimplemented,
                    format!("unknown method {m} for service {service}"),
                )),
            },
            ("runtime.v1.ImageService", m) => match m {
                "ListImages" => enc(Ok(st.list_images(decode(payload)?))),
                "ImageStatus" => enc(Ok(st.image_status(decode(payload)?))),
                "PullImage" => enc(st.pull_image(decode(payload)?)),
                "RemoveImage" => enc(Ok(st.remove_image(decode(payload)?))),
                "ImageFsInfo" => enc(Ok(st.image_fs_info())),
                _ => Err(err(
                    Code::Unimplemented,
                    format!("unknown method {m} for service {service}"),
                )),
            },
            _ => Err(err(
                Code::Unimplemented,
                format!("unknown service {service}"),
            )),
        }
    }
}

/// Waits out an exec's delay; one longer than the request's timeout fails with
/// DEADLINE_EXCEEDED, as containerd's does.
async fn run_exec(
    reply: ExecReply,
    limit: Option<Duration>,
) -> Result<v1::ExecSyncResponse, Status> {
    if let Some(limit) = limit.filter(|l| reply.delay > *l) {
        rt::sleep(limit).await;
        return Err(err(
            Code::DeadlineExceeded,
            format!("timeout {limit:?} exceeded: context deadline exceeded"),
        ));
    }
    if !reply.delay.is_zero() {
        rt::sleep(reply.delay).await;
    }
    Ok(v1::ExecSyncResponse {
        stdout: reply.stdout,
        stderr: reply.stderr,
        exit_code: reply.exit_code,
    })
}

impl RuntimeService for FakeRuntime {
    fn version(&self) -> Call<'_, v1::VersionResponse> {
        self.call("Version", None, |st| Ok(version(&st.runtime_version)))
    }
    fn status(&self, verbose: bool) -> Call<'_, v1::StatusResponse> {
        self.call("Status", None, move |st| {
            Ok(st.status(v1::StatusRequest { verbose }))
        })
    }
    fn run_pod_sandbox(
        &self,
        req: v1::RunPodSandboxRequest,
    ) -> Call<'_, v1::RunPodSandboxResponse> {
        self.call("RunPodSandbox", None, move |st| st.run_pod_sandbox(req))
    }
    fn stop_pod_sandbox(&self, id: &str) -> Call<'_, ()> {
        let req = v1::StopPodSandboxRequest {
            pod_sandbox_id: id.to_owned(),
        };
        self.call("StopPodSandbox", None, move |st| {
            st.stop_pod_sandbox(req).map(drop)
        })
    }
    fn remove_pod_sandbox(&self, id: &str) -> Call<'_, ()> {
        let req = v1::RemovePodSandboxRequest {
            pod_sandbox_id: id.to_owned(),
        };
        self.call("RemovePodSandbox", None, move |st| {
            st.remove_pod_sandbox(req).map(drop)
        })
    }
    fn pod_sandbox_status(&self, id: &str) -> Call<'_, v1::PodSandboxStatusResponse> {
        let req = v1::PodSandboxStatusRequest {
            pod_sandbox_id: id.to_owned(),
            verbose: false,
        };
        self.call("PodSandboxStatus", None, move |st| {
            st.pod_sandbox_status(req)
        })
    }
    fn list_pod_sandbox(
        &self,
        filter: Option<v1::PodSandboxFilter>,
    ) -> Call<'_, Vec<v1::PodSandbox>> {
        let req = v1::ListPodSandboxRequest { filter };
        self.call("ListPodSandbox", None, move |st| {
            Ok(st.list_pod_sandbox(req).items)
        })
    }
    fn create_container(
        &self,
        req: v1::CreateContainerRequest,
    ) -> Call<'_, v1::CreateContainerResponse> {
        self.call("CreateContainer", None, move |st| st.create_container(req))
    }
    fn start_container(&self, id: &str) -> Call<'_, ()> {
        let req = v1::StartContainerRequest {
            container_id: id.to_owned(),
        };
        self.call("StartContainer", None, move |st| {
            st.start_container(req).map(drop)
        })
    }
    fn stop_container(&self, id: &str, grace_secs: i64) -> Call<'_, ()> {
        let req = v1::StopContainerRequest {
            container_id: id.to_owned(),
            timeout: grace_secs,
        };
        self.call("StopContainer", None, move |st| {
            st.stop_container(req).map(drop)
        })
    }
    fn remove_container(&self, id: &str) -> Call<'_, ()> {
        let req = v1::RemoveContainerRequest {
            container_id: id.to_owned(),
        };
        self.call("RemoveContainer", None, move |st| {
            st.remove_container(req).map(drop)
        })
    }
    fn list_containers(&self, filter: Option<v1::ContainerFilter>) -> Call<'_, Vec<v1::Container>> {
        let req = v1::ListContainersRequest { filter };
        self.call("ListContainers", None, move |st| {
            Ok(st.list_containers(req).containers)
        })
    }
    fn list_container_stats(&self) -> Call<'_, Vec<v1::ContainerStats>> {
        self.call("ListContainerStats", None, |st| {
            Ok(st.list_container_stats().stats)
        })
    }
    fn container_status(&self, id: &str, verbose: bool) -> Call<'_, v1::ContainerStatusResponse> {
        let req = v1::ContainerStatusRequest {
            container_id: id.to_owned(),
            verbose,
        };
        self.call("ContainerStatus", Some(id.to_owned()), move |st| {
            st.container_status(req)
        })
    }
    fn exec_sync(
        &self,
        id: &str,
        cmd: Vec<String>,
        timeout: Duration,
    ) -> Call<'_, v1::ExecSyncResponse> {
        let req = v1::ExecSyncRequest {
            container_id: id.to_owned(),
            cmd,
            timeout: i64::try_from(timeout.as_secs()).unwrap_or(i64::MAX),
        };
        Box::pin(async move {
            let m = "ExecSync";
            self.enter(m, None).await.map_err(|s| status_err(m, s))?;
            let reply = self
                .state
                .borrow()
                .exec_sync(&req)
                .map_err(|s| status_err(m, s))?;
            let limit = (!timeout.is_zero()).then_some(timeout);
            run_exec(reply, limit).await.map_err(|s| status_err(m, s))
        })
    }
    fn reopen_container_log(&self, id: &str) -> Call<'_, ()> {
        let req = v1::ReopenContainerLogRequest {
            container_id: id.to_owned(),
        };
        self.call("ReopenContainerLog", None, move |st| {
            st.reopen_container_log(req).map(drop)
        })
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
        self.call("UpdateContainerResources", None, move |st| {
            st.update_container_resources(req).map(drop)
        })
    }
    fn runtime_config(&self) -> Call<'_, v1::RuntimeConfigResponse> {
        // As containerd 1.6: the driver is only in the verbose status.
        self.call("RuntimeConfig", None, |_| {
            Err(err(Code::Unimplemented, "unknown method RuntimeConfig"))
        })
    }
    fn exec(&self, req: v1::ExecRequest) -> Call<'_, v1::ExecResponse> {
        self.call("Exec", None, move |st| {
            let url = st.stream_url("exec", &req.container_id)?;
            Ok(v1::ExecResponse { url })
        })
    }
    fn attach(&self, req: v1::AttachRequest) -> Call<'_, v1::AttachResponse> {
        self.call("Attach", None, move |st| {
            let url = st.stream_url("attach", &req.container_id)?;
            Ok(v1::AttachResponse { url })
        })
    }
    fn port_forward(&self, req: v1::PortForwardRequest) -> Call<'_, v1::PortForwardResponse> {
        self.call("PortForward", None, move |st| {
            let url = st.port_forward_url(&req)?;
            Ok(v1::PortForwardResponse { url })
        })
    }
}

impl ImageService for FakeRuntime {
    fn image_status(&self, image: &str) -> Call<'_, Option<v1::Image>> {
        let req = v1::ImageStatusRequest {
            image: super::service::image_spec(image),
            verbose: false,
        };
        self.call("ImageStatus", None, move |st| {
            Ok(st.image_status(req).image)
        })
    }
    fn pull_image(&self, image: &str, auth: Option<v1::AuthConfig>) -> Call<'_, String> {
        let req = v1::PullImageRequest {
            image: super::service::image_spec(image),
            auth,
            sandbox_config: None,
        };
        self.call("PullImage", None, move |st| {
            st.pull_image(req).map(|r| r.image_ref)
        })
    }
    fn list_images(&self) -> Call<'_, Vec<v1::Image>> {
        self.call("ListImages", None, move |st| {
            Ok(st.list_images(v1::ListImagesRequest::default()).images)
        })
    }
    fn remove_image(&self, image: &str) -> Call<'_, ()> {
        let req = v1::RemoveImageRequest {
            image: super::service::image_spec(image),
        };
        self.call("RemoveImage", None, move |st| {
            st.remove_image(req);
            Ok(())
        })
    }
    fn image_fs_info(&self) -> Call<'_, v1::ImageFsInfoResponse> {
        self.call("ImageFsInfo", None, |st| Ok(st.image_fs_info()))
    }
}

// -------------------------------------------------------------------------------------------
// Snapshots
// -------------------------------------------------------------------------------------------

/// One pod sandbox, as the fake holds it.
#[derive(Clone, Debug)]
pub struct FakeSandbox {
    pub id: String,
    pub config: v1::PodSandboxConfig,
    pub runtime_handler: String,
    pub state: PodSandboxState,
    pub created_at: i64,
    /// `""` for host-network pods and once the sandbox is stopped.
    pub ip: String,
    pub host_network: bool,
    /// The reserved name, `<name>_<namespace>_<uid>_<attempt>`.
    pub name: String,
}

impl FakeSandbox {
    pub fn metadata(&self) -> v1::PodSandboxMetadata {
        self.config.metadata.clone().unwrap_or_default()
    }
}

/// One container, as the fake holds it.
#[derive(Clone, Debug)]
pub struct FakeContainer {
    pub id: String,
    pub sandbox_id: String,
    pub config: v1::ContainerConfig,
    /// The id (`sha256:...`) of the image the container was created from.
    pub image_id: String,
    pub state: ContainerState,
    pub created_at: i64,
    pub started_at: i64,
    pub finished_at: i64,
    pub exit_code: i32,
    pub reason: String,
    pub message: String,
    /// `<sandbox log_directory>/<config log_path>`, or `""`.
    pub log_path: String,
    /// The reserved name, `<name>_<pod name>_<pod namespace>_<pod uid>_<attempt>`.
    pub name: String,
}

impl FakeContainer {
    pub fn metadata(&self) -> v1::ContainerMetadata {
        self.config.metadata.clone().unwrap_or_default()
    }
}

/// One local image.
#[derive(Clone, Debug)]
pub struct FakeImage {
    /// `sha256:<64 hex>`.
    pub id: String,
    /// Normalised references, such as `docker.io/library/busybox:latest`.
    pub repo_tags: Vec<String>,
    pub repo_digests: Vec<String>,
    pub size: u64,
    /// Pinned images are never garbage-collected (containerd 1.7 pins its sandbox image).
    pub pinned: bool,
}

/// What an exec (ExecSync) does: wait `delay`, then exit with `exit_code` and this output.
/// An exec whose delay exceeds the request's timeout fails with DEADLINE_EXCEEDED, as
/// containerd's does.
#[derive(Clone, Debug, Default)]
pub struct ExecReply {
    pub exit_code: i32,
    pub stdout: Vec<u8>,
    pub stderr: Vec<u8>,
    pub delay: Duration,
}

impl ExecReply {
    pub fn exit(code: i32) -> ExecReply {
        ExecReply {
            exit_code: code,
            ..ExecReply::default()
        }
    }
    pub fn stdout(code: i32, out: impl Into<Vec<u8>>) -> ExecReply {
        ExecReply {
            exit_code: code,
            stdout: out.into(),
            ..ExecReply::default()
        }
    }
}

/// Decides an exec: `(container id, argv)`; `None` falls back to the built-in commands.
pub type ExecHandler = Rc<dyn Fn(&str, &[String]) -> Option<ExecReply>>;

// -------------------------------------------------------------------------------------------
// The runtime
// -------------------------------------------------------------------------------------------

struct State {
    /// What Version answers as the runtime's version ([`RUNTIME_VERSION`] unless set).
    runtime_version: String,
    sandboxes: Vec<FakeSandbox>,
    containers: Vec<FakeContainer>,
    images: Vec<FakeImage>,
    pullable: HashSet<String>,
    /// Private images: reference → (username, password) the pull must carry.
    private: HashMap<String, (String, String)>,
    pull_auths: Vec<(String, Option<String>)>,
    /// Reserved names to the id holding them.
    names: HashMap<String, String>,
    next_id: u64,
    next_ip: u32,
    network_ready: bool,
    /// The sandbox image the runtime's configuration names.
    sandbox_image: String,
    stop_exit_codes: HashMap<String, i32>,
    exec: Option<ExecHandler>,
    /// The base URL the streaming calls answer under.
    streaming: Option<String>,
    // Test hooks.
    delays: HashMap<String, Duration>,
    hung: std::collections::HashSet<String>,
    failures: HashMap<String, VecDeque<(Code, String)>>,
    calls: HashMap<String, usize>,
    /// Each StopContainer: the container's name and the timeout asked for.
    stops: Vec<(String, i64)>,
    /// The client version of each VersionRequest served over gRPC.
    version_requests: Vec<String>,
}

#[derive(Debug)]
enum Lookup {
    Empty,
    NotFound,
    Ambiguous,
}

/// Finds `id` exactly, or as a unique prefix (containerd's truncindex).
fn lookup<T>(items: &[T], id: &str, get: impl Fn(&T) -> &str) -> Result<usize, Lookup> {
    if id.is_empty() {
        return Err(Lookup::Empty);
    }
    if let Some(i) = items.iter().position(|t| get(t) == id) {
        return Ok(i);
    }
    let mut hits = items
        .iter()
        .enumerate()
        .filter(|(_, t)| get(t).starts_with(id));
    match (hits.next(), hits.next()) {
        (Some((i, _)), None) => Ok(i),
        (None, _) => Err(Lookup::NotFound),
        (Some(_), Some(_)) => Err(Lookup::Ambiguous),
    }
}

fn lookup_err(what: &str, id: &str, e: Lookup) -> Status {
    match e {
        Lookup::Empty => err(Code::InvalidArgument, format!("{what} ID cannot be empty")),
        Lookup::NotFound => err(
            Code::NotFound,
            format!("an error occurred when try to find {what} {id:?}: not found"),
        ),
        Lookup::Ambiguous => err(
            Code::Unknown,
            format!(
                "an error occurred when try to find {what} {id:?}: multiple IDs found with provided prefix"
            ),
        ),
    }
}

fn labels_match(labels: &HashMap<String, String>, selector: &HashMap<String, String>) -> bool {
    selector.iter().all(|(k, v)| labels.get(k) == Some(v))
}

fn exit(c: &mut FakeContainer, code: i32) {
    c.state = ContainerState::ContainerExited;
    c.finished_at = rt::now_nanos();
    c.exit_code = code;
    c.reason = if code == 0 { "Completed" } else { "Error" }.to_owned();
}

fn version(runtime_version: &str) -> v1::VersionResponse {
    v1::VersionResponse {
        version: "0.1.0".into(),
        runtime_name: RUNTIME_NAME.into(),
        runtime_version: runtime_version.into(),
        runtime_api_version: "v1".into(),
    }
}

fn hex_id(parts: impl Hash) -> String {
    let mut s = String::with_capacity(64);
    for i in 0..4u8 {
        let mut h = DefaultHasher::new();
        (&parts, i).hash(&mut h);
        let _ = write!(s, "{:016x}", h.finish());
    }
    s
}

/// containerd's reference normalisation: `busybox` -> `docker.io/library/busybox:latest`.
pub fn normalize_ref(r: &str) -> String {
    if r.starts_with("sha256:") {
        return r.to_owned();
    }
    let (name, digest) = match r.split_once('@') {
        Some((n, d)) => (n, Some(d)),
        None => (r, None),
    };
    let (repo, tag) = match name.rfind(':') {
        Some(i) if !name[i..].contains('/') => (&name[..i], Some(&name[i + 1..])),
        _ => (name, None),
    };
    let first = repo.split('/').next().unwrap_or("");
    let has_domain =
        repo.contains('/') && (first.contains('.') || first.contains(':') || first == "localhost");
    let mut out = if has_domain {
        repo.to_owned()
    } else {
        format!("docker.io/{repo}")
    };
    if let Some(rest) = out.strip_prefix("docker.io/")
        && !rest.contains('/')
    {
        out = format!("docker.io/library/{rest}");
    }
    match (tag, digest) {
        (Some(t), _) => {
            out.push(':');
            out.push_str(t);
        }
        (None, None) => out.push_str(":latest"),
        (None, Some(_)) => {}
    }
    if let Some(d) = digest {
        out.push('@');
        out.push_str(d);
    }
    out
}

impl State {
    fn new() -> State {
        State {
            runtime_version: RUNTIME_VERSION.into(),
            sandboxes: Vec::new(),
            containers: Vec::new(),
            images: Vec::new(),
            pullable: HashSet::new(),
            private: HashMap::new(),
            pull_auths: Vec::new(),
            names: HashMap::new(),
            next_id: 0,
            next_ip: 2,
            network_ready: true,
            sandbox_image: DEFAULT_SANDBOX_IMAGE.to_owned(),
            stop_exit_codes: HashMap::new(),
            exec: None,
            streaming: None,
            delays: HashMap::new(),
            hung: std::collections::HashSet::new(),
            failures: HashMap::new(),
            calls: HashMap::new(),
            stops: Vec::new(),
            version_requests: Vec::new(),
        }
    }

    fn new_id(&mut self, kind: &str) -> String {
        self.next_id += 1;
        hex_id((kind, self.next_id, std::process::id()))
    }

    fn reserve(&mut self, what: &str, name: &str, id: &str) -> Result<(), Status> {
        if let Some(holder) = self.names.get(name) {
            return Err(err(
                Code::Unknown,
                format!(
                    "failed to reserve {what} name {name:?}: name {name:?} is reserved for {holder:?}"
                ),
            ));
        }
        self.names.insert(name.to_owned(), id.to_owned());
        Ok(())
    }

    fn sandbox_index(&self, id: &str) -> Result<usize, Status> {
        lookup(&self.sandboxes, id, |s| &s.id).map_err(|e| lookup_err("sandbox", id, e))
    }

    fn container_index(&self, id: &str) -> Result<usize, Status> {
        lookup(&self.containers, id, |c| &c.id).map_err(|e| lookup_err("container", id, e))
    }

    fn image_index(&self, r: &str) -> Option<usize> {
        if r.is_empty() {
            return None;
        }
        let id = if r.starts_with("sha256:") {
            r.to_owned()
        } else {
            format!("sha256:{r}")
        };
        if let Some(i) = self.images.iter().position(|im| im.id == id) {
            return Some(i);
        }
        let norm = normalize_ref(r);
        self.images
            .iter()
            .position(|im| im.repo_tags.contains(&norm) || im.repo_digests.contains(&norm))
    }

    fn add_image(&mut self, reference: &str) -> String {
        if let Some(i) = self.image_index(reference) {
            return self.images[i].id.clone();
        }
        let id = format!("sha256:{}", hex_id(("image", reference)));
        let repo = match reference.rfind(':') {
            Some(i) if !reference[i..].contains('/') => &reference[..i],
            _ => reference.split('@').next().unwrap_or(reference),
        };
        let digest = format!("{repo}@sha256:{}", hex_id(("digest", reference)));
        let mut h = DefaultHasher::new();
        reference.hash(&mut h);
        self.images.push(FakeImage {
            id: id.clone(),
            repo_tags: vec![reference.to_owned()],
            repo_digests: vec![digest],
            size: 1_000_000 + h.finish() % 9_000_000,
            pinned: false,
        });
        id
    }

    // --- runtime service -----------------------------------------------------------------

    fn status(&self, r: v1::StatusRequest) -> v1::StatusResponse {
        let net = if self.network_ready {
            v1::RuntimeCondition {
                r#type: "NetworkReady".into(),
                status: true,
                ..Default::default()
            }
        } else {
            v1::RuntimeCondition {
                r#type: "NetworkReady".into(),
                status: false,
                reason: "NetworkPluginNotReady".into(),
                message: "Network plugin returns error: cni plugin not initialized".into(),
            }
        };
        let mut info = HashMap::new();
        if r.verbose {
            // The part of containerd's CRI plugin configuration picolet reads.
            let config = serde_json::json!({ "sandboxImage": self.sandbox_image });
            info.insert("config".to_owned(), config.to_string());
        }
        v1::StatusResponse {
            status: Some(v1::RuntimeStatus {
                conditions: vec![
                    v1::RuntimeCondition {
                        r#type: "RuntimeReady".into(),
                        status: true,
                        ..Default::default()
                    },
                    net,
                ],
            }),
            info,
        }
    }

    fn run_pod_sandbox(
        &mut self,
        r: v1::RunPodSandboxRequest,
    ) -> Result<v1::RunPodSandboxResponse, Status> {
        let config = r
            .config
            .ok_or_else(|| err(Code::InvalidArgument, "sandbox config must not be nil"))?;
        let md = config.metadata.clone().ok_or_else(|| {
            err(
                Code::InvalidArgument,
                "sandbox config must include metadata",
            )
        })?;
        if !(r.runtime_handler.is_empty() || r.runtime_handler == "runc") {
            return Err(err(
                Code::Unknown,
                format!(
                    "failed to get sandbox runtime: no runtime for {:?} is configured",
                    r.runtime_handler
                ),
            ));
        }
        let name = format!("{}_{}_{}_{}", md.name, md.namespace, md.uid, md.attempt);
        let id = self.new_id("sandbox");
        self.reserve("sandbox", &name, &id)?;
        let host_network = config
            .linux
            .as_ref()
            .and_then(|l| l.security_context.as_ref())
            .and_then(|s| s.namespace_options.as_ref())
            .is_some_and(|n| n.network == v1::NamespaceMode::Node as i32);
        let ip = if host_network {
            String::new()
        } else {
            let n = self.next_ip;
            self.next_ip += 1;
            format!("{POD_CIDR_PREFIX}{}.{}", n / 256, n % 256)
        };
        self.sandboxes.push(FakeSandbox {
            id: id.clone(),
            config,
            runtime_handler: r.runtime_handler,
            state: PodSandboxState::SandboxReady,
            created_at: rt::now_nanos(),
            ip,
            host_network,
            name,
        });
        Ok(v1::RunPodSandboxResponse { pod_sandbox_id: id })
    }

    /// Kills the pod's running containers, marks it NOTREADY and drops its IP.
    fn stop_sandbox_at(&mut self, i: usize) {
        let id = self.sandboxes[i].id.clone();
        for c in self.containers.iter_mut().filter(|c| c.sandbox_id == id) {
            if matches!(
                c.state,
                ContainerState::ContainerRunning | ContainerState::ContainerUnknown
            ) {
                exit(c, 137);
            }
        }
        let sb = &mut self.sandboxes[i];
        sb.state = PodSandboxState::SandboxNotready;
        sb.ip.clear();
    }

    fn stop_pod_sandbox(
        &mut self,
        r: v1::StopPodSandboxRequest,
    ) -> Result<v1::StopPodSandboxResponse, Status> {
        let i = self.sandbox_index(&r.pod_sandbox_id)?;
        self.stop_sandbox_at(i);
        Ok(v1::StopPodSandboxResponse {})
    }

    fn remove_pod_sandbox(
        &mut self,
        r: v1::RemovePodSandboxRequest,
    ) -> Result<v1::RemovePodSandboxResponse, Status> {
        let i = match lookup(&self.sandboxes, &r.pod_sandbox_id, |s| &s.id) {
            Ok(i) => i,
            Err(Lookup::NotFound) => return Ok(v1::RemovePodSandboxResponse {}),
            Err(e) => return Err(lookup_err("sandbox", &r.pod_sandbox_id, e)),
        };
        self.stop_sandbox_at(i);
        let sb = self.sandboxes.remove(i);
        let names = &mut self.names;
        self.containers.retain(|c| {
            let keep = c.sandbox_id != sb.id;
            if !keep {
                names.remove(&c.name);
            }
            keep
        });
        self.names.remove(&sb.name);
        Ok(v1::RemovePodSandboxResponse {})
    }

    fn pod_sandbox_status(
        &self,
        r: v1::PodSandboxStatusRequest,
    ) -> Result<v1::PodSandboxStatusResponse, Status> {
        let sb = &self.sandboxes[self.sandbox_index(&r.pod_sandbox_id)?];
        let ns = sb
            .config
            .linux
            .as_ref()
            .and_then(|l| l.security_context.as_ref())
            .and_then(|s| s.namespace_options.clone())
            .unwrap_or_default();
        Ok(v1::PodSandboxStatusResponse {
            status: Some(v1::PodSandboxStatus {
                id: sb.id.clone(),
                metadata: sb.config.metadata.clone(),
                state: sb.state as i32,
                created_at: sb.created_at,
                network: Some(v1::PodSandboxNetworkStatus {
                    ip: sb.ip.clone(),
                    additional_ips: vec![],
                }),
                linux: Some(v1::LinuxPodSandboxStatus {
                    namespaces: Some(v1::Namespace { options: Some(ns) }),
                }),
                labels: sb.config.labels.clone(),
                annotations: sb.config.annotations.clone(),
                runtime_handler: sb.runtime_handler.clone(),
            }),
            info: HashMap::new(),
        })
    }

    fn list_pod_sandbox(&self, r: v1::ListPodSandboxRequest) -> v1::ListPodSandboxResponse {
        let f = r.filter.unwrap_or_default();
        let items = self
            .sandboxes
            .iter()
            .filter(|s| f.id.is_empty() || s.id.starts_with(&f.id))
            .filter(|s| f.state.as_ref().is_none_or(|st| st.state == s.state as i32))
            .filter(|s| labels_match(&s.config.labels, &f.label_selector))
            .map(|s| v1::PodSandbox {
                id: s.id.clone(),
                metadata: s.config.metadata.clone(),
                state: s.state as i32,
                created_at: s.created_at,
                labels: s.config.labels.clone(),
                annotations: s.config.annotations.clone(),
                runtime_handler: s.runtime_handler.clone(),
            })
            .collect();
        v1::ListPodSandboxResponse { items }
    }

    fn create_container(
        &mut self,
        r: v1::CreateContainerRequest,
    ) -> Result<v1::CreateContainerResponse, Status> {
        let config = r
            .config
            .ok_or_else(|| err(Code::InvalidArgument, "container config must not be nil"))?;
        let md = config.metadata.clone().ok_or_else(|| {
            err(
                Code::InvalidArgument,
                "container config must include metadata",
            )
        })?;
        let si = lookup(&self.sandboxes, &r.pod_sandbox_id, |s| &s.id).map_err(|e| match e {
            Lookup::NotFound => err(
                Code::NotFound,
                format!(
                    "failed to find sandbox id {:?}: not found",
                    r.pod_sandbox_id
                ),
            ),
            e => lookup_err("sandbox", &r.pod_sandbox_id, e),
        })?;
        let sb = &self.sandboxes[si];
        if sb.state != PodSandboxState::SandboxReady {
            return Err(err(
                Code::NotFound,
                format!(
                    "failed to get sandbox container task: no running task found: task {} not found",
                    sb.id
                ),
            ));
        }
        let image = config
            .image
            .as_ref()
            .map(|i| i.image.clone())
            .unwrap_or_default();
        let Some(ii) = self.image_index(&image) else {
            return Err(err(
                Code::NotFound,
                format!("failed to resolve image {image:?}: not found"),
            ));
        };
        let image_id = self.images[ii].id.clone();
        let sbmd = sb.metadata();
        let sandbox_id = sb.id.clone();
        let log_path = if sb.config.log_directory.is_empty() || config.log_path.is_empty() {
            String::new()
        } else {
            Path::new(&sb.config.log_directory)
                .join(&config.log_path)
                .display()
                .to_string()
        };
        let name = format!(
            "{}_{}_{}_{}_{}",
            md.name, sbmd.name, sbmd.namespace, sbmd.uid, md.attempt
        );
        let id = self.new_id("container");
        self.reserve("container", &name, &id)?;
        // Nanoseconds apart at least, as a runtime's clock tells two creations apart even
        // when a fake clock stands still (a container killed and replaced in one sync).
        let created_at = self
            .containers
            .iter()
            .map(|c| c.created_at.saturating_add(1))
            .fold(rt::now_nanos(), i64::max);
        self.containers.push(FakeContainer {
            id: id.clone(),
            sandbox_id,
            config,
            image_id,
            state: ContainerState::ContainerCreated,
            created_at,
            started_at: 0,
            finished_at: 0,
            exit_code: 0,
            reason: String::new(),
            message: String::new(),
            log_path,
            name,
        });
        Ok(v1::CreateContainerResponse { container_id: id })
    }

    /// As containerd: NOT_FOUND for an unknown id, UNKNOWN "container is not running" for a
    /// container that is not running.
    fn reopen_container_log(
        &mut self,
        r: v1::ReopenContainerLogRequest,
    ) -> Result<v1::ReopenContainerLogResponse, Status> {
        let i = self.container_index(&r.container_id)?;
        if self.containers[i].state != ContainerState::ContainerRunning {
            return Err(err(Code::Unknown, "container is not running"));
        }
        Ok(v1::ReopenContainerLogResponse {})
    }

    /// As containerd: NOT_FOUND for an unknown id; the new limits replace the container's
    /// (a container that exited keeps them for its record, as its spec does).
    fn update_container_resources(
        &mut self,
        r: v1::UpdateContainerResourcesRequest,
    ) -> Result<v1::UpdateContainerResourcesResponse, Status> {
        let i = self.container_index(&r.container_id)?;
        let linux = self.containers[i]
            .config
            .linux
            .get_or_insert_with(Default::default);
        linux.resources = r.linux;
        Ok(v1::UpdateContainerResourcesResponse {})
    }

    fn start_container(
        &mut self,
        r: v1::StartContainerRequest,
    ) -> Result<v1::StartContainerResponse, Status> {
        let i = self.container_index(&r.container_id)?;
        let c = &self.containers[i];
        if c.state != ContainerState::ContainerCreated {
            return Err(err(
                Code::Unknown,
                format!(
                    "failed to start container {:?}: container is in {} state",
                    c.id,
                    c.state.as_str_name()
                ),
            ));
        }
        let ready = self
            .sandboxes
            .iter()
            .any(|s| s.id == c.sandbox_id && s.state == PodSandboxState::SandboxReady);
        if !ready {
            return Err(err(
                Code::Unknown,
                format!("sandbox container {:?} is not running", c.sandbox_id),
            ));
        }
        let c = &mut self.containers[i];
        c.state = ContainerState::ContainerRunning;
        c.started_at = rt::now_nanos();
        Ok(v1::StartContainerResponse {})
    }

    fn stop_container(
        &mut self,
        r: v1::StopContainerRequest,
    ) -> Result<v1::StopContainerResponse, Status> {
        let i = self.container_index(&r.container_id)?;
        let name = self.containers[i].metadata().name;
        self.stops.push((name, r.timeout));
        let code = self
            .stop_exit_codes
            .get(&self.containers[i].id)
            .copied()
            .unwrap_or(137);
        let c = &mut self.containers[i];
        if matches!(
            c.state,
            ContainerState::ContainerRunning | ContainerState::ContainerUnknown
        ) {
            exit(c, code);
        }
        Ok(v1::StopContainerResponse {})
    }

    fn remove_container(
        &mut self,
        r: v1::RemoveContainerRequest,
    ) -> Result<v1::RemoveContainerResponse, Status> {
        let i = match lookup(&self.containers, &r.container_id, |c| &c.id) {
            Ok(i) => i,
            Err(Lookup::NotFound) => return Ok(v1::RemoveContainerResponse {}),
            Err(e) => return Err(lookup_err("container", &r.container_id, e)),
        };
        let c = self.containers.remove(i);
        self.names.remove(&c.name);
        Ok(v1::RemoveContainerResponse {})
    }

    fn list_containers(&self, r: v1::ListContainersRequest) -> v1::ListContainersResponse {
        let f = r.filter.unwrap_or_default();
        let containers = self
            .containers
            .iter()
            .filter(|c| f.id.is_empty() || c.id.starts_with(&f.id))
            .filter(|c| f.pod_sandbox_id.is_empty() || c.sandbox_id.starts_with(&f.pod_sandbox_id))
            .filter(|c| f.state.as_ref().is_none_or(|st| st.state == c.state as i32))
            .filter(|c| labels_match(&c.config.labels, &f.label_selector))
            .map(|c| v1::Container {
                id: c.id.clone(),
                pod_sandbox_id: c.sandbox_id.clone(),
                metadata: c.config.metadata.clone(),
                image: c.config.image.clone(),
                image_ref: c.image_id.clone(),
                state: c.state as i32,
                created_at: c.created_at,
                labels: c.config.labels.clone(),
                annotations: c.config.annotations.clone(),
            })
            .collect();
        v1::ListContainersResponse { containers }
    }

    fn container_status(
        &self,
        r: v1::ContainerStatusRequest,
    ) -> Result<v1::ContainerStatusResponse, Status> {
        let c = &self.containers[self.container_index(&r.container_id)?];
        // As containerd: the image by its first tag, the ref by its first digest.
        let mut image = c.config.image.clone().unwrap_or_default();
        let mut image_ref = c.image_id.clone();
        if let Some(im) = self.images.iter().find(|im| im.id == c.image_id) {
            if let Some(t) = im.repo_tags.first() {
                image.image = t.clone();
            }
            if let Some(d) = im.repo_digests.first() {
                image_ref = d.clone();
            }
        }
        Ok(v1::ContainerStatusResponse {
            status: Some(v1::ContainerStatus {
                id: c.id.clone(),
                metadata: c.config.metadata.clone(),
                state: c.state as i32,
                created_at: c.created_at,
                started_at: c.started_at,
                finished_at: c.finished_at,
                exit_code: c.exit_code,
                image: Some(image),
                image_ref,
                reason: c.reason.clone(),
                message: c.message.clone(),
                labels: c.config.labels.clone(),
                annotations: c.config.annotations.clone(),
                mounts: c.config.mounts.clone(),
                log_path: c.log_path.clone(),
            }),
            info: HashMap::new(),
        })
    }

    /// Every container's stats, as `ContainerStats` gives them one by one.
    fn list_container_stats(&self) -> v1::ListContainerStatsResponse {
        let stats = self
            .containers
            .iter()
            .filter_map(|c| {
                self.container_stats(v1::ContainerStatsRequest {
                    container_id: c.id.clone(),
                })
                .ok()?
                .stats
            })
            .collect();
        v1::ListContainerStatsResponse { stats }
    }

    fn container_stats(
        &self,
        r: v1::ContainerStatsRequest,
    ) -> Result<v1::ContainerStatsResponse, Status> {
        let c = &self.containers[self.container_index(&r.container_id)?];
        let now = rt::now_nanos();
        let running_ns = match c.state {
            ContainerState::ContainerRunning => now - c.started_at,
            ContainerState::ContainerExited => c.finished_at - c.started_at,
            _ => 0,
        };
        // One percent of a core while running, 4 MiB of memory, 32 KiB written.
        let cpu = u64::try_from(running_ns.max(0) / 100).unwrap_or(0);
        let running = c.state == ContainerState::ContainerRunning;
        let mem = if running { 4 << 20 } else { 0 };
        let u = |value| Some(v1::UInt64Value { value });
        Ok(v1::ContainerStatsResponse {
            stats: Some(v1::ContainerStats {
                attributes: Some(v1::ContainerAttributes {
                    id: c.id.clone(),
                    metadata: c.config.metadata.clone(),
                    labels: c.config.labels.clone(),
                    annotations: c.config.annotations.clone(),
                }),
                cpu: Some(v1::CpuUsage {
                    timestamp: now,
                    usage_core_nano_seconds: u(cpu),
                    usage_nano_cores: u(if running { 10_000_000 } else { 0 }),
                }),
                memory: Some(v1::MemoryUsage {
                    timestamp: now,
                    working_set_bytes: u(mem),
                    available_bytes: u(0),
                    usage_bytes: u(mem),
                    rss_bytes: u(mem / 2),
                    page_faults: u(0),
                    major_page_faults: u(0),
                }),
                writable_layer: Some(v1::FilesystemUsage {
                    timestamp: now,
                    fs_id: Some(v1::FilesystemIdentifier {
                        mountpoint: SNAPSHOTTER_ROOT.into(),
                    }),
                    used_bytes: u(32 << 10),
                    inodes_used: u(8),
                }),
            }),
        })
    }

    /// Decides an exec (the waiting happens in the caller, outside the state borrow).
    /// A streaming URL for a running container (`kind` is exec or attach).
    fn stream_url(&self, kind: &str, container_id: &str) -> Result<String, Status> {
        let c = &self.containers[self.container_index(container_id)?];
        if c.state != ContainerState::ContainerRunning {
            return Err(err(
                Code::FailedPrecondition,
                format!("container {} is in {} state", c.id, c.state.as_str_name()),
            ));
        }
        let base = self.streaming_base()?;
        Ok(format!("{base}/{kind}/{}", c.id))
    }

    fn streaming_base(&self) -> Result<&str, Status> {
        self.streaming
            .as_deref()
            .ok_or_else(|| err(Code::Unimplemented, "no streaming server"))
    }

    fn port_forward_url(&self, r: &v1::PortForwardRequest) -> Result<String, Status> {
        let sb = &self.sandboxes[self.sandbox_index(&r.pod_sandbox_id)?];
        if sb.state != v1::PodSandboxState::SandboxReady {
            return Err(err(
                Code::FailedPrecondition,
                format!("sandbox {} is not running", sb.id),
            ));
        }
        let base = self.streaming_base()?;
        Ok(format!("{base}/portforward/{}", sb.id))
    }

    fn exec_sync(&self, r: &v1::ExecSyncRequest) -> Result<ExecReply, Status> {
        let c = &self.containers[self.container_index(&r.container_id)?];
        if c.state != ContainerState::ContainerRunning {
            return Err(err(
                Code::Unknown,
                format!(
                    "failed to exec in container: container is in {} state",
                    c.state.as_str_name()
                ),
            ));
        }
        if let Some(reply) = self.exec.as_ref().and_then(|h| h(&c.id, &r.cmd)) {
            return Ok(reply);
        }
        let argv: Vec<&str> = r.cmd.iter().map(String::as_str).collect();
        let reply = match argv.as_slice() {
            ["echo", rest @ ..] => ExecReply::stdout(0, format!("{}\n", rest.join(" "))),
            ["true"] => ExecReply::exit(0),
            ["false"] => ExecReply::exit(1),
            ["sh" | "/bin/sh", "-c", script] if script.starts_with("exit ") => {
                ExecReply::exit(script[5..].trim().parse().unwrap_or(2))
            }
            ["sleep", secs] => ExecReply {
                delay: Duration::from_secs_f64(secs.parse().unwrap_or(0.0)),
                ..ExecReply::default()
            },
            _ => {
                let bin = argv.first().copied().unwrap_or("");
                return Err(err(
                    Code::Unknown,
                    format!(
                        "failed to exec in container: failed to start exec: OCI runtime exec failed: exec failed: unable to start container process: exec: {bin:?}: executable file not found in $PATH: unknown"
                    ),
                ));
            }
        };
        Ok(reply)
    }

    // --- image service -------------------------------------------------------------------

    fn cri_image(im: &FakeImage) -> v1::Image {
        v1::Image {
            id: im.id.clone(),
            repo_tags: im.repo_tags.clone(),
            repo_digests: im.repo_digests.clone(),
            size: im.size,
            uid: None,
            username: String::new(),
            spec: None,
            pinned: im.pinned,
        }
    }

    fn list_images(&self, r: v1::ListImagesRequest) -> v1::ListImagesResponse {
        let wanted = r
            .filter
            .and_then(|f| f.image)
            .map(|i| i.image)
            .filter(|i| !i.is_empty());
        let only = wanted.map(|w| self.image_index(&w));
        let images = self
            .images
            .iter()
            .enumerate()
            .filter(|(i, _)| only.is_none_or(|o| o == Some(*i)))
            .map(|(_, im)| Self::cri_image(im))
            .collect();
        v1::ListImagesResponse { images }
    }

    fn image_status(&self, r: v1::ImageStatusRequest) -> v1::ImageStatusResponse {
        let name = r.image.map(|i| i.image).unwrap_or_default();
        v1::ImageStatusResponse {
            image: self
                .image_index(&name)
                .map(|i| Self::cri_image(&self.images[i])),
            info: HashMap::new(),
        }
    }

    fn pull_image(&mut self, r: v1::PullImageRequest) -> Result<v1::PullImageResponse, Status> {
        let name = r.image.map(|i| i.image).unwrap_or_default();
        let reference = normalize_ref(&name);
        self.pull_auths.push((
            reference.clone(),
            r.auth.as_ref().map(|a| a.username.clone()),
        ));
        if let Some((user, pass)) = self.private.get(&reference) {
            let ok = r
                .auth
                .as_ref()
                .is_some_and(|a| &a.username == user && &a.password == pass);
            if !ok {
                return Err(err(
                    Code::Unknown,
                    format!(
                        "failed to pull and unpack image {reference:?}: failed to resolve reference {reference:?}: pulling from host failed with status code [manifests]: 401 Unauthorized"
                    ),
                ));
            }
        }
        if !self.pullable.contains(&reference) {
            return Err(err(
                Code::NotFound,
                format!(
                    "failed to pull and unpack image {reference:?}: failed to resolve reference {reference:?}: {reference}: not found"
                ),
            ));
        }
        Ok(v1::PullImageResponse {
            image_ref: self.add_image(&reference),
        })
    }

    fn remove_image(&mut self, r: v1::RemoveImageRequest) -> v1::RemoveImageResponse {
        let name = r.image.map(|i| i.image).unwrap_or_default();
        if let Some(i) = self.image_index(&name) {
            self.images.remove(i);
        }
        v1::RemoveImageResponse {}
    }

    fn image_fs_info(&self) -> v1::ImageFsInfoResponse {
        let used: u64 = self.images.iter().map(|i| i.size).sum();
        let n = u64::try_from(self.images.len()).unwrap_or(0);
        v1::ImageFsInfoResponse {
            image_filesystems: vec![v1::FilesystemUsage {
                timestamp: rt::now_nanos(),
                fs_id: Some(v1::FilesystemIdentifier {
                    mountpoint: SNAPSHOTTER_ROOT.into(),
                }),
                used_bytes: Some(v1::UInt64Value { value: used }),
                inodes_used: Some(v1::UInt64Value { value: n * 100 }),
            }],
            container_filesystems: vec![],
        }
    }
}

const SNAPSHOTTER_ROOT: &str = "/var/lib/containerd/io.containerd.snapshotter.v1.overlayfs";
