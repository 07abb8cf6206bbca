//! What the integration tests share. Every test file includes it with
//!
//! ```ignore
//! mod support;
//! ```
//!
//! and takes the parts it needs: the picolet binary as a process ([`agent`]), the fake runtime
//! and apiserver of the in-process tests ([`fake_cri`], [`fake_apiserver`]), the real ones of
//! the end-to-end tests ([`containerd`], [`control_plane`]), the pods they run ([`pods`]) and
//! the waits and small helpers below.
//!
//! The test files that start real parts (a containerd, the control plane, other upstream
//! programs) are built only with the cargo feature `e2e` (their `[[test]]` entries in
//! Cargo.toml): plain `cargo test` is the in-process suite, `cargo test --features e2e`
//! (scripts/test.sh) everything. A new such file gets an entry there too.

#![allow(dead_code, reason = "each test binary uses a different part")]

pub mod agent;
pub mod cluster;
pub mod containerd;
pub mod control_plane;
pub mod fake_apiserver;
pub mod fake_cri;
pub mod pods;
pub mod private_bus;
pub mod prom;
pub mod relay;

use std::fs;
use std::future::Future;
use std::path::{Path, PathBuf};
use std::process::Output;
use std::sync::Arc;
use std::time::{Duration, Instant};

#[allow(unused_imports, reason = "each test binary uses a different part")]
pub use pods::{IMAGE, Pod};

use agent::Agent;
use control_plane::ControlPlane;
use fake_apiserver::FakeApi;
use fake_cri::{FakeCri, TempDir};

/// The node name picolet is started with (`--hostname-override` in [`agent`]).
pub const NODE: &str = "e2e-node";

/// A static pod's full name: `<name>-<node>`.
pub fn full(name: &str) -> String {
    format!("{name}-{NODE}")
}

/// Runs `fut` on picolet's executor on this thread (where the fake runtime is served), on the
/// heap: picolet's call futures are large (a CreateContainer call is about 31 KB) and a test
/// holds many, which in a debug build overflows the 2 MiB stack of a test thread when the future
/// lives on the stack.
pub fn run<T>(fut: impl Future<Output = T>) -> T {
    picolet::rt::block_on(Box::pin(fut))
}

/// A fresh directory named after `tag`, the fake runtime serving in it with [`IMAGE`], and a
/// fake apiserver. The runtime is served on this thread's executor: call it inside [`run`].
pub fn fakes(tag: &str) -> (TempDir, FakeCri, FakeApi) {
    let tmp = TempDir::new(tag);
    let fake = FakeCri::start(tmp.path());
    fake.add_image(IMAGE);
    (tmp, fake, FakeApi::start())
}

/// Starts picolet in `dir` with these flags off the executor's thread, so that a fake runtime
/// served on this thread keeps answering meanwhile.
pub async fn start_agent(dir: &Path, endpoint: &str, flags: &[String]) -> Arc<Agent> {
    let (dir, endpoint, flags) = (dir.to_owned(), endpoint.to_owned(), flags.to_vec());
    Arc::new(picolet::rt::unblock(move || Agent::start_with(&dir, &endpoint, &flags)).await)
}

/// Polls `cond` every 100 ms, keeping the executor (and so the fake runtime) running, until it
/// holds; panics after `limit` with `what` and picolet's log (its last [`LOG_LINES`] lines).
pub async fn until(a: &Agent, what: &str, limit: Duration, mut cond: impl AsyncFnMut() -> bool) {
    let limit = deadline(limit);
    let t0 = Instant::now();
    while t0.elapsed() < limit {
        if cond().await {
            return;
        }
        picolet::rt::sleep(Duration::from_millis(100)).await;
    }
    panic!(
        "timed out after {limit:?} waiting for {what}\n--- picolet log (at most its last {LOG_LINES} lines) ---\n{}",
        tail(&a.log_text(), LOG_LINES)
    );
}

/// A wait's limit on this machine: `limit` times `PICOLET_TEST_DEADLINE_SCALE` (a whole number,
/// default 1), for a machine slower than those the limits were set on: scripts/guest.sh e2e
/// runs the end-to-end files in an emulated guest with 4. Only how long a wait may last
/// changes, never what it waits for.
pub fn deadline(limit: Duration) -> Duration {
    static SCALE: std::sync::OnceLock<u32> = std::sync::OnceLock::new();
    limit
        * *SCALE.get_or_init(|| match std::env::var("PICOLET_TEST_DEADLINE_SCALE") {
            Err(_) => 1,
            Ok(v) => v.parse().ok().filter(|&n| n >= 1).unwrap_or_else(|| {
                panic!("PICOLET_TEST_DEADLINE_SCALE must be a whole number of 1 or more, not {v:?}")
            }),
        })
}

/// How much of picolet's log a failed wait shows: all of a test's usual log, the end of one
/// that a hostile input made long.
pub const LOG_LINES: usize = 400;

/// [`ControlPlane::wait_until`] with picolet's log in the panic message.
pub fn cluster_wait(
    what: &str,
    limit: Duration,
    a: &Agent,
    cp: &ControlPlane,
    f: impl FnMut() -> bool,
) {
    cp.wait_until(what, limit, &|| a.log_text(), f);
}

/// A fresh directory `root/name` (what an earlier run left there removed).
pub fn host_dir(root: &Path, name: &str) -> PathBuf {
    let d = root.join(name);
    let _ = fs::remove_dir_all(&d);
    fs::create_dir_all(&d).unwrap();
    d
}

/// The last `n` lines of `text`.
pub fn tail(text: &str, n: usize) -> String {
    let lines: Vec<&str> = text.lines().collect();
    lines[lines.len().saturating_sub(n)..].join("\n")
}

/// The last `n` lines of the file at `path`, or why there are none.
pub fn file_tail(path: &Path, n: usize) -> String {
    match fs::read_to_string(path) {
        Ok(log) => tail(&log, n),
        Err(e) => format!("(no log at {}: {e})", path.display()),
    }
}

/// A finished command's exit status, stdout and stderr, for a panic message.
pub fn describe(out: &Output) -> String {
    format!(
        "exit status: {}\n--- stdout ---\n{}\n--- stderr ---\n{}",
        out.status,
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    )
}

/// The path of `scripts/<name>` in this checkout.
pub fn script(name: &str) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("scripts")
        .join(name)
}
