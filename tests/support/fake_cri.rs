//! A fake containerd on a unix socket: the in-process fake runtime of picolet's library
//! (`picolet::cri::fake::FakeRuntime`, where its behaviour is documented) served over gRPC, for
//! integration tests of picolet's CRI client and of the picolet binary. No containerd, no root.
//!
//! The server is hand-rolled (no tonic server codegen): hyper 1's HTTP/2 server on a
//! `smol::Async<UnixListener>`, spawned on picolet's own executor (`picolet::rt`), so it must be
//! started and used on the thread that runs `picolet::rt::block_on` (every test thread has its
//! own executor). Requests are routed by path (`/runtime.v1.RuntimeService/<Method>`,
//! `/runtime.v1.ImageService/<Method>`); the answer is a length-prefixed message followed by the
//! trailer `grpc-status: 0`, or a Trailers-Only response (`grpc-status` + percent-encoded
//! `grpc-message` in the headers) for an error, as grpc-go does. What only a wire shows is kept
//! here: the `grpc-timeout` each call carried, calls the client abandoned, and a runtime that
//! stops (its socket goes away, connections drop) and comes back with its state.

use std::cell::{Cell, RefCell};
use std::collections::HashMap;
use std::convert::Infallible;
use std::fmt::Write as _;
use std::net::Shutdown;
use std::ops::Deref;
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
use picolet::cri::fake::{FakeRuntime, method_name};
use picolet::rt;
use smol::Async;
use tonic::Code;

// Each test crate uses its own subset.
#[allow(unused_imports)]
pub use picolet::cri::fake::{ContainerState, ExecReply, FakeContainer, PodSandboxState};

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

// -------------------------------------------------------------------------------------------
// The handle
// -------------------------------------------------------------------------------------------

/// A running fake CRI runtime. Single-threaded: create and use it on the thread that runs
/// `picolet::rt::block_on`. Dropping it stops it ([`FakeCri::stop`]). It dereferences to the
/// fake runtime, whose methods set up and inspect the state (`add_image`, `containers`, ...).
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

impl Deref for FakeCri {
    type Target = FakeRuntime;
    fn deref(&self) -> &FakeRuntime {
        &self.shared.runtime
    }
}

struct Shared {
    path: PathBuf,
    runtime: FakeRuntime,
    server: RefCell<Option<Server>>,
    /// Bumped by every stop: requests from an older generation are abandoned.
    generation: Cell<u64>,
    connections: Cell<usize>,
    cancelled: RefCell<HashMap<String, usize>>,
    timeouts: RefCell<HashMap<String, Duration>>,
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
            runtime: FakeRuntime::new(),
            server: RefCell::new(None),
            generation: Cell::new(0),
            connections: Cell::new(0),
            cancelled: RefCell::default(),
            timeouts: RefCell::default(),
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

    /// Makes the next call of `method` fail with this gRPC status code and message, without
    /// touching the state. Queued: calling it twice fails the next two calls.
    pub fn fail_next(&self, method: &str, code: u32, message: &str) {
        let code = Code::from(i32::try_from(code).unwrap_or(2));
        self.shared.runtime.fail_next(method, code, message);
    }

    /// How many calls of `method` were abandoned before the fake answered (the client reset the
    /// stream, e.g. on its deadline, or the fake was stopped).
    pub fn cancelled(&self, method: &str) -> usize {
        self.shared
            .cancelled
            .borrow()
            .get(&method_name(method))
            .copied()
            .unwrap_or(0)
    }

    /// The `grpc-timeout` the last call of `method` carried.
    pub fn last_timeout(&self, method: &str) -> Option<Duration> {
        self.shared
            .timeouts
            .borrow()
            .get(&method_name(method))
            .copied()
    }

    /// The running containers of the pod named `pod` (its `io.kubernetes.pod.name` label; a
    /// static pod's is `<name>-<node>`).
    pub fn running_containers_of(&self, pod: &str) -> Vec<FakeContainer> {
        self.containers()
            .into_iter()
            .filter(|c| {
                c.config
                    .labels
                    .get("io.kubernetes.pod.name")
                    .map(String::as_str)
                    == Some(pod)
                    && c.state == ContainerState::ContainerRunning
            })
            .collect()
    }

    /// A running container of the pod named `pod`.
    pub fn running_container_of(&self, pod: &str) -> Option<FakeContainer> {
        self.running_containers_of(pod).into_iter().next()
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
    code: Code,
    message: String,
}

fn err(code: Code, message: impl Into<String>) -> RpcError {
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
        .header("grpc-status", (e.code as i32).to_string())
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
            Code::Internal,
            "grpc: request body is not a length-prefixed message",
        ));
    }
    if body[0] != 0 {
        return Err(err(
            Code::Unimplemented,
            "grpc: compressed messages are not supported",
        ));
    }
    let len = u32::from_be_bytes([body[1], body[2], body[3], body[4]]) as usize;
    if body.len() != 5 + len {
        return Err(err(
            Code::Internal,
            format!(
                "grpc: message length {len} does not match the {} bytes sent",
                body.len() - 5
            ),
        ));
    }
    Ok(&body[5..])
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
            *self
                .shared
                .cancelled
                .borrow_mut()
                .entry(self.method.clone())
                .or_default() += 1;
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
    {
        let mut t = shared.timeouts.borrow_mut();
        match timeout {
            Some(d) => t.insert(method.clone(), d),
            None => t.remove(&method),
        };
    }
    let mut guard = CancelGuard {
        shared: shared.clone(),
        method: method.clone(),
        done: false,
    };
    let body = match req.into_body().collect().await {
        Ok(c) => c.to_bytes(),
        Err(e) => {
            guard.done = true;
            return grpc_err(&err(Code::Internal, format!("reading request: {e}")));
        }
    };
    let result = match decode_frame(&body) {
        Ok(payload) => {
            let alive = || shared.generation.get() == generation;
            shared
                .runtime
                .serve_encoded(&service, &method, payload, alive)
                .await
                .map_err(|s| err(s.code(), s.message()))
        }
        Err(e) => Err(e),
    };
    guard.done = true;
    match result {
        Ok(bytes) => grpc_ok(&bytes),
        Err(e) => grpc_err(&e),
    }
}

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
        unmount_under(&self.0);
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

/// Unmounts whatever a picolet mounted under `dir` (the tmpfs of secret and projected volumes
/// stays when a test kills picolet, as it does for a node's pods), deepest first.
pub fn unmount_under(dir: &Path) {
    for m in picolet::volume::mounts_under(dir) {
        let _ = nix::mount::umount2(&m, nix::mount::MntFlags::MNT_DETACH);
    }
}
