//! An in-process fake of containerd's CRI gRPC API, for integration tests of picolet's CRI client
//! and of the code above it. No containerd, no root, no network.
//!
//! Include it from an integration test with
//!
//! ```ignore
//! #[path = "support/fake_cri.rs"]
//! mod fake_cri;
//! ```
//!
//! It is a hand-rolled gRPC server (no tonic server codegen): hyper 1's HTTP/2 server on a
//! `smol::Async<UnixListener>`, spawned on picolet's own executor (`picolet::rt`), so it must be
//! started and used on the thread that runs `picolet::rt::block_on` (every test thread has its
//! own executor). Requests are routed by path (`/runtime.v1.RuntimeService/<Method>`,
//! `/runtime.v1.ImageService/<Method>`), the length-prefixed message is decoded with prost, and
//! the answer is a length-prefixed message followed by the trailer `grpc-status: 0`, or a
//! Trailers-Only response (`grpc-status` + percent-encoded `grpc-message` in the headers) for an
//! error, as grpc-go does.
//!
//! The state (sandboxes, containers, images) is in memory and behaves like containerd 1.7's CRI
//! plugin, including the parts that surprise people:
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
//!   RemovePodSandbox stops first and removes the pod's containers; RemoveContainer kills a
//!   running container first;
//! * PullImage always goes to the "registry": it succeeds only for references marked with
//!   [`FakeCri::set_pullable`], otherwise NOT_FOUND "failed to pull and unpack image", even when
//!   the image is already present; image references are normalised (`busybox` is
//!   `docker.io/library/busybox:latest`);
//! * ImageStatus of a missing image is not an error: the response has no image.
//!
//! Timestamps are unix nanoseconds. Container exit reasons are "Completed" (code 0) or "Error".
#![allow(dead_code)]

use std::cell::{Cell, RefCell};
use std::collections::hash_map::DefaultHasher;
use std::collections::{HashMap, HashSet, VecDeque};
use std::convert::Infallible;
use std::fmt::Write as _;
use std::hash::{Hash, Hasher};
use std::net::Shutdown;
use std::os::unix::net::{UnixListener, UnixStream};
use std::path::{Path, PathBuf};
use std::pin::Pin;
use std::rc::Rc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::task::{Context, Poll};
use std::time::Duration;

use bytes::{BufMut, Bytes, BytesMut};
use http::{HeaderMap, HeaderValue, Request, Response, StatusCode};
use http_body_util::BodyExt;
use hyper::body::{Frame, Incoming};
use picolet::cri::v1;
use picolet::rt;
use prost::Message;
use smol::Async;

pub use v1::{ContainerState, PodSandboxState};

/// gRPC status codes, as tonic numbers them.
pub mod code {
    pub const OK: u32 = 0;
    pub const CANCELLED: u32 = 1;
    pub const UNKNOWN: u32 = 2;
    pub const INVALID_ARGUMENT: u32 = 3;
    pub const DEADLINE_EXCEEDED: u32 = 4;
    pub const NOT_FOUND: u32 = 5;
    pub const ALREADY_EXISTS: u32 = 6;
    pub const RESOURCE_EXHAUSTED: u32 = 8;
    pub const FAILED_PRECONDITION: u32 = 9;
    pub const UNIMPLEMENTED: u32 = 12;
    pub const INTERNAL: u32 = 13;
    pub const UNAVAILABLE: u32 = 14;
}

/// The IP prefix pods get, as containerd's default CNI config (`10.88.0.0/16`).
pub const POD_CIDR_PREFIX: &str = "10.88.";

/// What the fake reports as the runtime.
pub const RUNTIME_NAME: &str = "containerd";
pub const RUNTIME_VERSION: &str = "v1.7.0-fake";

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
// The handle
// -------------------------------------------------------------------------------------------

/// A running fake CRI runtime. Single-threaded: create and use it on the thread that runs
/// `picolet::rt::block_on`. Dropping it stops it ([`FakeCri::stop`]).
pub struct FakeCri {
    shared: Rc<Shared>,
}

impl std::fmt::Debug for FakeCri {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("FakeCri")
            .field("socket", &self.shared.path)
            .finish()
    }
}

struct Shared {
    path: PathBuf,
    state: RefCell<State>,
    server: RefCell<Option<Server>>,
    /// Bumped by every stop: requests from an older generation are abandoned.
    generation: Cell<u64>,
    connections: Cell<usize>,
}

struct Server {
    accept: rt::Task<()>,
    conns: Rc<RefCell<Vec<Conn>>>,
}

struct Conn {
    task: rt::Task<()>,
    /// A duplicate of the connection's socket, to shut it down synchronously on stop.
    sock: UnixStream,
}

impl FakeCri {
    /// Binds `dir/fake.sock` (replacing a stale file) and serves on it. The socket is
    /// listening when this returns; connections are served once the executor runs.
    pub fn start(dir: &Path) -> FakeCri {
        let shared = Rc::new(Shared {
            path: dir.join("fake.sock"),
            state: RefCell::new(State::new()),
            server: RefCell::new(None),
            generation: Cell::new(0),
            connections: Cell::new(0),
        });
        listen(&shared);
        FakeCri { shared }
    }

    /// `unix:///.../fake.sock`.
    pub fn endpoint(&self) -> String {
        format!("unix://{}", self.shared.path.display())
    }

    pub fn socket_path(&self) -> &Path {
        &self.shared.path
    }

    /// Stops serving, as a runtime that crashed: the listener goes away (the socket file is
    /// removed, so dialing fails at once) and every open connection is shut down, so clients
    /// see EOF / broken pipe. Requests in flight are abandoned without an answer. The state is
    /// kept. Idempotent.
    pub fn stop(&self) {
        let Some(server) = self.shared.server.borrow_mut().take() else {
            return;
        };
        self.shared.generation.set(self.shared.generation.get() + 1);
        let _ = std::fs::remove_file(&self.shared.path);
        for conn in server.conns.borrow_mut().drain(..) {
            let _ = conn.sock.shutdown(Shutdown::Both);
            drop(conn.task);
        }
        drop(server.accept);
    }

    /// Serves again on the same socket path, with the state as it was. No-op when running.
    pub fn start_again(&self) {
        if self.shared.server.borrow().is_none() {
            listen(&self.shared);
        }
    }

    /// A runtime restart: [`stop`](Self::stop), then [`start_again`](Self::start_again), keeping
    /// the state. Note that a client notices its connection died only when its executor next
    /// runs its connection task.
    pub fn restart(&self) {
        self.stop();
        self.start_again();
    }

    pub fn is_running(&self) -> bool {
        self.shared.server.borrow().is_some()
    }

    /// How many connections the fake has accepted, in all.
    pub fn connections(&self) -> usize {
        self.shared.connections.get()
    }

    /// Adds a local image (the reference is normalised); returns its id. Idempotent.
    pub fn add_image(&self, name: &str) -> String {
        self.shared
            .state
            .borrow_mut()
            .add_image(&normalize_ref(name))
    }

    /// Lets PullImage of `name` succeed (adding the image).
    pub fn set_pullable(&self, name: &str) {
        self.shared
            .state
            .borrow_mut()
            .pullable
            .insert(normalize_ref(name));
    }

    /// Simulates the process of a running container exiting by itself with `code`. No-op for a
    /// container that is not running; panics for an unknown id.
    pub fn exit_container(&self, id: &str, code: i32) {
        let mut st = self.shared.state.borrow_mut();
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
        self.shared
            .state
            .borrow_mut()
            .stop_exit_codes
            .insert(id.to_owned(), code);
    }

    /// Makes every later call of `method` sleep `d` before it does anything (zero: no delay).
    /// `method` is the gRPC name (`"PullImage"`) or picolet's (`"pull_image"`).
    pub fn set_delay(&self, method: &str, d: Duration) {
        let m = method_name(method);
        let mut st = self.shared.state.borrow_mut();
        if d.is_zero() {
            st.delays.remove(&m);
        } else {
            st.delays.insert(m, d);
        }
    }

    /// Makes every ContainerStatus call for this container hang (until the client gives up).
    pub fn hang_container_status(&self, id: &str) {
        self.shared.state.borrow_mut().hung.insert(id.to_owned());
    }

    /// Makes the next call of `method` fail with this gRPC status code and message, without
    /// touching the state. Queued: calling it twice fails the next two calls.
    pub fn fail_next(&self, method: &str, code: u32, message: &str) {
        let mut st = self.shared.state.borrow_mut();
        st.failures
            .entry(method_name(method))
            .or_default()
            .push_back((code, message.to_owned()));
    }

    /// How many calls of `method` arrived (counted when the request headers arrive).
    pub fn calls(&self, method: &str) -> usize {
        self.shared
            .state
            .borrow()
            .calls
            .get(&method_name(method))
            .copied()
            .unwrap_or(0)
    }

    /// How many calls of `method` were abandoned before the fake answered (the client reset the
    /// stream, e.g. on its deadline, or the fake was stopped).
    pub fn cancelled(&self, method: &str) -> usize {
        self.shared
            .state
            .borrow()
            .cancelled
            .get(&method_name(method))
            .copied()
            .unwrap_or(0)
    }

    /// The `grpc-timeout` the last call of `method` carried.
    pub fn last_timeout(&self, method: &str) -> Option<Duration> {
        self.shared
            .state
            .borrow()
            .timeouts
            .get(&method_name(method))
            .copied()
    }

    pub fn set_network_ready(&self, ready: bool) {
        self.shared.state.borrow_mut().network_ready = ready;
    }

    /// Decides what execs do; commands the handler returns `None` for fall back to the
    /// built-ins: `echo ARGS`, `true`, `false`, `sh -c 'exit N'`, `sleep N`; anything else
    /// fails as a missing executable does (UNKNOWN).
    pub fn set_exec_handler(&self, f: impl Fn(&str, &[String]) -> Option<ExecReply> + 'static) {
        self.shared.state.borrow_mut().exec = Some(Rc::new(f));
    }

    pub fn sandboxes(&self) -> Vec<FakeSandbox> {
        self.shared.state.borrow().sandboxes.clone()
    }

    pub fn containers(&self) -> Vec<FakeContainer> {
        self.shared.state.borrow().containers.clone()
    }

    pub fn images(&self) -> Vec<FakeImage> {
        self.shared.state.borrow().images.clone()
    }

    pub fn sandbox(&self, id: &str) -> Option<FakeSandbox> {
        self.sandboxes().into_iter().find(|s| s.id == id)
    }

    pub fn container(&self, id: &str) -> Option<FakeContainer> {
        self.containers().into_iter().find(|c| c.id == id)
    }
}

impl Drop for FakeCri {
    fn drop(&mut self) {
        self.stop();
    }
}

fn listen(shared: &Rc<Shared>) {
    let path = &shared.path;
    let _ = std::fs::remove_file(path);
    let listener = Async::<UnixListener>::bind(path)
        .unwrap_or_else(|e| panic!("fake CRI: binding {}: {e}", path.display()));
    let conns = Rc::new(RefCell::new(Vec::new()));
    let accept = rt::spawn(accept_loop(
        shared.clone(),
        listener,
        conns.clone(),
        shared.generation.get(),
    ));
    *shared.server.borrow_mut() = Some(Server { accept, conns });
}

async fn accept_loop(
    shared: Rc<Shared>,
    listener: Async<UnixListener>,
    conns: Rc<RefCell<Vec<Conn>>>,
    generation: u64,
) {
    loop {
        let stream = match listener.accept().await {
            Ok((s, _)) => s,
            Err(e) => {
                eprintln!("fake CRI: accept: {e}");
                rt::sleep(Duration::from_millis(10)).await;
                continue;
            }
        };
        let sock = match stream.get_ref().try_clone() {
            Ok(s) => s,
            Err(e) => {
                eprintln!("fake CRI: dup: {e}");
                continue;
            }
        };
        shared.connections.set(shared.connections.get() + 1);
        let svc_shared = shared.clone();
        let task = rt::spawn(async move {
            let svc = hyper::service::service_fn(move |req| {
                let shared = svc_shared.clone();
                async move { Ok::<_, Infallible>(handle(shared, generation, req).await) }
            });
            // Errors here are the client going away; nothing to do.
            let _ = hyper::server::conn::http2::Builder::new(rt::HyperExecutor)
                .timer(rt::HyperTimer)
                .serve_connection(rt::HyperIo(stream), svc)
                .await;
        });
        let mut conns = conns.borrow_mut();
        conns.retain(|c| !c.task.is_finished());
        conns.push(Conn { task, sock });
    }
}

// -------------------------------------------------------------------------------------------
// gRPC framing
// -------------------------------------------------------------------------------------------

/// A unary gRPC response body: at most one data frame, then trailers.
pub struct GrpcBody {
    data: Option<Bytes>,
    trailers: Option<HeaderMap>,
}

impl http_body::Body for GrpcBody {
    type Data = Bytes;
    type Error = Infallible;

    fn poll_frame(
        mut self: Pin<&mut Self>,
        _cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Bytes>, Infallible>>> {
        if let Some(d) = self.data.take() {
            return Poll::Ready(Some(Ok(Frame::data(d))));
        }
        if let Some(t) = self.trailers.take() {
            return Poll::Ready(Some(Ok(Frame::trailers(t))));
        }
        Poll::Ready(None)
    }

    fn is_end_stream(&self) -> bool {
        self.data.is_none() && self.trailers.is_none()
    }
}

/// A gRPC error status.
#[derive(Debug, Clone)]
struct RpcError {
    code: u32,
    message: String,
}

fn err(code: u32, message: impl Into<String>) -> RpcError {
    RpcError {
        code,
        message: message.into(),
    }
}

fn grpc_ok(msg: &[u8]) -> Response<GrpcBody> {
    let mut frame = BytesMut::with_capacity(5 + msg.len());
    frame.put_u8(0);
    frame.put_u32(u32::try_from(msg.len()).expect("message under 4 GiB"));
    frame.extend_from_slice(msg);
    let mut trailers = HeaderMap::new();
    trailers.insert("grpc-status", HeaderValue::from_static("0"));
    Response::builder()
        .status(StatusCode::OK)
        .header("content-type", "application/grpc")
        .body(GrpcBody {
            data: Some(frame.freeze()),
            trailers: Some(trailers),
        })
        .unwrap()
}

/// A Trailers-Only response: the status travels in the headers, the body is empty.
fn grpc_err(e: &RpcError) -> Response<GrpcBody> {
    Response::builder()
        .status(StatusCode::OK)
        .header("content-type", "application/grpc")
        .header("grpc-status", e.code.to_string())
        .header("grpc-message", percent_encode(&e.message))
        .body(GrpcBody {
            data: None,
            trailers: None,
        })
        .unwrap()
}

/// gRPC's percent-encoding of `grpc-message`.
fn percent_encode(s: &str) -> String {
    let mut out = String::with_capacity(s.len());
    for b in s.bytes() {
        if (0x20..=0x7e).contains(&b) && b != b'%' {
            out.push(char::from(b));
        } else {
            let _ = write!(out, "%{b:02X}");
        }
    }
    out
}

fn parse_grpc_timeout(v: &str) -> Option<Duration> {
    if v.is_empty() {
        return None;
    }
    let (num, unit) = v.split_at(v.len() - 1);
    let n: u64 = num.parse().ok()?;
    Some(match unit {
        "H" => Duration::from_secs(n.checked_mul(3600)?),
        "M" => Duration::from_secs(n.checked_mul(60)?),
        "S" => Duration::from_secs(n),
        "m" => Duration::from_millis(n),
        "u" => Duration::from_micros(n),
        "n" => Duration::from_nanos(n),
        _ => return None,
    })
}

fn decode_frame(body: &[u8]) -> Result<&[u8], RpcError> {
    if body.len() < 5 {
        return Err(err(
            code::INTERNAL,
            "grpc: request body is not a length-prefixed message",
        ));
    }
    if body[0] != 0 {
        return Err(err(
            code::UNIMPLEMENTED,
            "grpc: compressed messages are not supported",
        ));
    }
    let len = u32::from_be_bytes([body[1], body[2], body[3], body[4]]) as usize;
    if body.len() != 5 + len {
        return Err(err(
            code::INTERNAL,
            format!(
                "grpc: message length {len} does not match the {} bytes sent",
                body.len() - 5
            ),
        ));
    }
    Ok(&body[5..])
}

/// `"pull_image"` or `"/runtime.v1.ImageService/PullImage"` to `"PullImage"`.
fn method_name(m: &str) -> String {
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

/// Counts a call as cancelled when its handler future is dropped before it answered.
struct CancelGuard {
    shared: Rc<Shared>,
    method: String,
    done: bool,
}

impl Drop for CancelGuard {
    fn drop(&mut self) {
        if !self.done {
            let mut st = self.shared.state.borrow_mut();
            *st.cancelled.entry(self.method.clone()).or_default() += 1;
        }
    }
}

async fn handle(shared: Rc<Shared>, generation: u64, req: Request<Incoming>) -> Response<GrpcBody> {
    let ct = req
        .headers()
        .get("content-type")
        .and_then(|v| v.to_str().ok())
        .unwrap_or("");
    if !ct.starts_with("application/grpc") {
        return Response::builder()
            .status(StatusCode::UNSUPPORTED_MEDIA_TYPE)
            .body(GrpcBody {
                data: None,
                trailers: None,
            })
            .unwrap();
    }
    let path = req.uri().path().to_owned();
    let (service, method) = path
        .trim_start_matches('/')
        .split_once('/')
        .unwrap_or(("", ""));
    let (service, method) = (service.to_owned(), method.to_owned());
    let timeout = req
        .headers()
        .get("grpc-timeout")
        .and_then(|v| v.to_str().ok())
        .and_then(parse_grpc_timeout);
    let delay = {
        let mut st = shared.state.borrow_mut();
        *st.calls.entry(method.clone()).or_default() += 1;
        match timeout {
            Some(t) => st.timeouts.insert(method.clone(), t),
            None => st.timeouts.remove(&method),
        };
        st.delays.get(&method).copied()
    };
    let mut guard = CancelGuard {
        shared: shared.clone(),
        method: method.clone(),
        done: false,
    };

    let body = match req.into_body().collect().await {
        Ok(c) => c.to_bytes(),
        Err(e) => {
            guard.done = true;
            return grpc_err(&err(code::INTERNAL, format!("reading request: {e}")));
        }
    };
    if let Some(d) = delay {
        rt::sleep(d).await;
    }
    if method == "ContainerStatus"
        && let Ok(frame) = decode_frame(&body)
        && let Ok(r) = <v1::ContainerStatusRequest as prost::Message>::decode(frame)
        && shared.state.borrow().hung.contains(&r.container_id)
    {
        // A container whose inspection never answers (a process stuck on a dead mount).
        rt::sleep(Duration::from_secs(3600)).await;
    }
    if shared.generation.get() != generation {
        // The fake was stopped meanwhile: a dead runtime does nothing more.
        return grpc_err(&err(code::UNAVAILABLE, "runtime stopped"));
    }
    let injected = shared
        .state
        .borrow_mut()
        .failures
        .get_mut(&method)
        .and_then(VecDeque::pop_front);
    let result = match injected {
        Some((c, m)) => Err(err(c, m)),
        None => match decode_frame(&body) {
            Ok(payload) => dispatch(&shared, &service, &method, payload).await,
            Err(e) => Err(e),
        },
    };
    guard.done = true;
    match result {
        Ok(bytes) => grpc_ok(&bytes),
        Err(e) => grpc_err(&e),
    }
}

fn unary<Req: Message + Default, Resp: Message>(
    payload: &[u8],
    f: impl FnOnce(Req) -> Result<Resp, RpcError>,
) -> Result<Vec<u8>, RpcError> {
    let req = Req::decode(payload).map_err(|e| {
        err(
            code::INTERNAL,
            format!("grpc: error unmarshalling request: {e}"),
        )
    })?;
    Ok(f(req)?.encode_to_vec())
}

async fn dispatch(
    shared: &Shared,
    service: &str,
    method: &str,
    p: &[u8],
) -> Result<Vec<u8>, RpcError> {
    let st = &shared.state;
    match (service, method) {
        ("runtime.v1.RuntimeService", m) => match m {
            "Version" => unary(p, |_: v1::VersionRequest| Ok(version())),
            "Status" => unary(p, |r| Ok(st.borrow().status(r))),
            "RunPodSandbox" => unary(p, |r| st.borrow_mut().run_pod_sandbox(r)),
            "StopPodSandbox" => unary(p, |r| st.borrow_mut().stop_pod_sandbox(r)),
            "RemovePodSandbox" => unary(p, |r| st.borrow_mut().remove_pod_sandbox(r)),
            "PodSandboxStatus" => unary(p, |r| st.borrow().pod_sandbox_status(r)),
            "ListPodSandbox" => unary(p, |r| Ok(st.borrow().list_pod_sandbox(r))),
            "CreateContainer" => unary(p, |r| st.borrow_mut().create_container(r)),
            "StartContainer" => unary(p, |r| st.borrow_mut().start_container(r)),
            "StopContainer" => unary(p, |r| st.borrow_mut().stop_container(r)),
            "RemoveContainer" => unary(p, |r| st.borrow_mut().remove_container(r)),
            "ListContainers" => unary(p, |r| Ok(st.borrow().list_containers(r))),
            "ContainerStatus" => unary(p, |r| st.borrow().container_status(r)),
            "ContainerStats" => unary(p, |r| st.borrow().container_stats(r)),
            "ExecSync" => {
                let req = v1::ExecSyncRequest::decode(p).map_err(|e| {
                    err(
                        code::INTERNAL,
                        format!("grpc: error unmarshalling request: {e}"),
                    )
                })?;
                let reply = st.borrow().exec_sync(&req)?;
                let limit = u64::try_from(req.timeout)
                    .ok()
                    .filter(|t| *t > 0)
                    .map(Duration::from_secs);
                if let Some(limit) = limit.filter(|l| reply.delay > *l) {
                    rt::sleep(limit).await;
                    return Err(err(
                        code::DEADLINE_EXCEEDED,
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
                }
                .encode_to_vec())
            }
            _ => Err(err(
                code::UNIMPLEMENTED,
                format!("unknown method {m} for service {service}"),
            )),
        },
        ("runtime.v1.ImageService", m) => match m {
            "ListImages" => unary(p, |r| Ok(st.borrow().list_images(r))),
            "ImageStatus" => unary(p, |r| Ok(st.borrow().image_status(r))),
            "PullImage" => unary(p, |r| st.borrow_mut().pull_image(r)),
            "RemoveImage" => unary(p, |r| Ok(st.borrow_mut().remove_image(r))),
            "ImageFsInfo" => unary(p, |_: v1::ImageFsInfoRequest| {
                Ok(st.borrow().image_fs_info())
            }),
            _ => Err(err(
                code::UNIMPLEMENTED,
                format!("unknown method {m} for service {service}"),
            )),
        },
        _ => Err(err(
            code::UNIMPLEMENTED,
            format!("unknown service {service}"),
        )),
    }
}

// -------------------------------------------------------------------------------------------
// The runtime
// -------------------------------------------------------------------------------------------

struct State {
    sandboxes: Vec<FakeSandbox>,
    containers: Vec<FakeContainer>,
    images: Vec<FakeImage>,
    pullable: HashSet<String>,
    /// Reserved names to the id holding them.
    names: HashMap<String, String>,
    next_id: u64,
    next_ip: u32,
    network_ready: bool,
    stop_exit_codes: HashMap<String, i32>,
    exec: Option<ExecHandler>,
    // Test hooks.
    delays: HashMap<String, Duration>,
    hung: std::collections::HashSet<String>,
    failures: HashMap<String, VecDeque<(u32, String)>>,
    calls: HashMap<String, usize>,
    cancelled: HashMap<String, usize>,
    timeouts: HashMap<String, Duration>,
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

fn lookup_err(what: &str, id: &str, e: Lookup) -> RpcError {
    match e {
        Lookup::Empty => err(code::INVALID_ARGUMENT, format!("{what} ID cannot be empty")),
        Lookup::NotFound => err(
            code::NOT_FOUND,
            format!("an error occurred when try to find {what} {id:?}: not found"),
        ),
        Lookup::Ambiguous => err(
            code::UNKNOWN,
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

fn version() -> v1::VersionResponse {
    v1::VersionResponse {
        version: "0.1.0".into(),
        runtime_name: RUNTIME_NAME.into(),
        runtime_version: RUNTIME_VERSION.into(),
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
            sandboxes: Vec::new(),
            containers: Vec::new(),
            images: Vec::new(),
            pullable: HashSet::new(),
            names: HashMap::new(),
            next_id: 0,
            next_ip: 2,
            network_ready: true,
            stop_exit_codes: HashMap::new(),
            exec: None,
            delays: HashMap::new(),
            hung: std::collections::HashSet::new(),
            failures: HashMap::new(),
            calls: HashMap::new(),
            cancelled: HashMap::new(),
            timeouts: HashMap::new(),
        }
    }

    fn new_id(&mut self, kind: &str) -> String {
        self.next_id += 1;
        hex_id((kind, self.next_id, std::process::id()))
    }

    fn reserve(&mut self, what: &str, name: &str, id: &str) -> Result<(), RpcError> {
        if let Some(holder) = self.names.get(name) {
            return Err(err(
                code::UNKNOWN,
                format!(
                    "failed to reserve {what} name {name:?}: name {name:?} is reserved for {holder:?}"
                ),
            ));
        }
        self.names.insert(name.to_owned(), id.to_owned());
        Ok(())
    }

    fn sandbox_index(&self, id: &str) -> Result<usize, RpcError> {
        lookup(&self.sandboxes, id, |s| &s.id).map_err(|e| lookup_err("sandbox", id, e))
    }

    fn container_index(&self, id: &str) -> Result<usize, RpcError> {
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
            info.insert("config".to_owned(), "{}".to_owned());
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
    ) -> Result<v1::RunPodSandboxResponse, RpcError> {
        let config = r
            .config
            .ok_or_else(|| err(code::INVALID_ARGUMENT, "sandbox config must not be nil"))?;
        let md = config.metadata.clone().ok_or_else(|| {
            err(
                code::INVALID_ARGUMENT,
                "sandbox config must include metadata",
            )
        })?;
        if !(r.runtime_handler.is_empty() || r.runtime_handler == "runc") {
            return Err(err(
                code::UNKNOWN,
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
    ) -> Result<v1::StopPodSandboxResponse, RpcError> {
        let i = self.sandbox_index(&r.pod_sandbox_id)?;
        self.stop_sandbox_at(i);
        Ok(v1::StopPodSandboxResponse {})
    }

    fn remove_pod_sandbox(
        &mut self,
        r: v1::RemovePodSandboxRequest,
    ) -> Result<v1::RemovePodSandboxResponse, RpcError> {
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
    ) -> Result<v1::PodSandboxStatusResponse, RpcError> {
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
    ) -> Result<v1::CreateContainerResponse, RpcError> {
        let config = r
            .config
            .ok_or_else(|| err(code::INVALID_ARGUMENT, "container config must not be nil"))?;
        let md = config.metadata.clone().ok_or_else(|| {
            err(
                code::INVALID_ARGUMENT,
                "container config must include metadata",
            )
        })?;
        let si = lookup(&self.sandboxes, &r.pod_sandbox_id, |s| &s.id).map_err(|e| match e {
            Lookup::NotFound => err(
                code::NOT_FOUND,
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
                code::NOT_FOUND,
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
                code::NOT_FOUND,
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
        self.containers.push(FakeContainer {
            id: id.clone(),
            sandbox_id,
            config,
            image_id,
            state: ContainerState::ContainerCreated,
            created_at: rt::now_nanos(),
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

    fn start_container(
        &mut self,
        r: v1::StartContainerRequest,
    ) -> Result<v1::StartContainerResponse, RpcError> {
        let i = self.container_index(&r.container_id)?;
        let c = &self.containers[i];
        if c.state != ContainerState::ContainerCreated {
            return Err(err(
                code::UNKNOWN,
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
                code::UNKNOWN,
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
    ) -> Result<v1::StopContainerResponse, RpcError> {
        let i = self.container_index(&r.container_id)?;
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
    ) -> Result<v1::RemoveContainerResponse, RpcError> {
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
    ) -> Result<v1::ContainerStatusResponse, RpcError> {
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

    fn container_stats(
        &self,
        r: v1::ContainerStatsRequest,
    ) -> Result<v1::ContainerStatsResponse, RpcError> {
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
    fn exec_sync(&self, r: &v1::ExecSyncRequest) -> Result<ExecReply, RpcError> {
        let c = &self.containers[self.container_index(&r.container_id)?];
        if c.state != ContainerState::ContainerRunning {
            return Err(err(
                code::UNKNOWN,
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
                    code::UNKNOWN,
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
            pinned: false,
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

    fn pull_image(&mut self, r: v1::PullImageRequest) -> Result<v1::PullImageResponse, RpcError> {
        let name = r.image.map(|i| i.image).unwrap_or_default();
        let reference = normalize_ref(&name);
        if !self.pullable.contains(&reference) {
            return Err(err(
                code::NOT_FOUND,
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

// -------------------------------------------------------------------------------------------
// A scratch directory
// -------------------------------------------------------------------------------------------

/// A fresh directory under the system temp dir, removed on drop. Keep the name short: a unix
/// socket path must fit in 108 bytes.
#[derive(Debug)]
pub struct TempDir(PathBuf);

impl TempDir {
    pub fn new(tag: &str) -> TempDir {
        static N: AtomicUsize = AtomicUsize::new(0);
        let n = N.fetch_add(1, Ordering::Relaxed);
        let dir = std::env::temp_dir().join(format!("picolet-{tag}-{}-{n}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).unwrap_or_else(|e| panic!("creating {}: {e}", dir.display()));
        TempDir(dir)
    }

    pub fn path(&self) -> &Path {
        &self.0
    }
}

impl Drop for TempDir {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}
