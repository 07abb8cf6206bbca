//! Runs the real picolet binary for end-to-end tests, against a scratch containerd, and reads
//! its local API. Every process it starts is stopped by PID when the handle drops.

use std::fs;
use std::io::{Read, Write};
use std::net::{TcpListener, TcpStream};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use super::NODE;

pub struct Agent {
    pub dir: PathBuf,
    pub manifests: PathBuf,
    pub port: u16,
    pub log: PathBuf,
    endpoint: String,
    extra: Vec<String>,
    /// More KubeletConfiguration fields, appended to the file picolet reads.
    config: String,
    /// Environment variables picolet is started with (a test's failpoint).
    pub env: Vec<(String, String)>,
    /// A program picolet is started under (`setpriv` with capabilities dropped), empty for none.
    pub wrapper: Vec<String>,
    child: Option<Child>,
}

/// The picolet binary of this build as a command. A test built for another architecture runs
/// under qemu-user (cargo's runner), which cannot start another program of that architecture by
/// itself without binfmt_misc: `PICOLET_TEST_RUNNER` (e.g. `qemu-arm-static -L
/// /usr/arm-linux-gnueabihf`) is then put in front of it.
pub fn picolet_command() -> Command {
    let bin = env!("CARGO_BIN_EXE_picolet");
    match std::env::var("PICOLET_TEST_RUNNER") {
        Ok(runner) if !runner.trim().is_empty() => {
            let mut words = runner.split_whitespace();
            let mut c = Command::new(words.next().unwrap());
            c.args(words).arg(bin);
            c
        }
        _ => Command::new(bin),
    }
}

/// `picolet check ARGS...`: whether it succeeded, and its stdout.
pub fn picolet_check(args: &[&str]) -> (bool, String) {
    let out = picolet_command().arg("check").args(args).output().unwrap();
    (
        out.status.success(),
        String::from_utf8_lossy(&out.stdout).into_owned(),
    )
}

pub fn free_port() -> u16 {
    TcpListener::bind("127.0.0.1:0")
        .and_then(|l| l.local_addr())
        .map(|a| a.port())
        .expect("free port")
}

impl Agent {
    /// Starts picolet with its manifest directory, root dir and pod logs under `dir`.
    pub fn start(dir: &Path, endpoint: &str) -> Agent {
        Agent::start_with(dir, endpoint, &[])
    }

    /// Starts picolet with more flags (`--kubeconfig`, ...).
    pub fn start_with(dir: &Path, endpoint: &str, extra: &[String]) -> Agent {
        Agent::start_configured(dir, endpoint, extra, "")
    }

    /// Starts picolet with more flags and more KubeletConfiguration fields (YAML lines).
    pub fn start_configured(dir: &Path, endpoint: &str, extra: &[String], config: &str) -> Agent {
        let mut a = Agent::new(dir, endpoint, extra, config, &[]);
        a.spawn();
        a
    }

    /// Starts picolet with more flags, configuration fields and environment variables, and
    /// waits for its local API.
    pub fn start_configured_env(
        dir: &Path,
        endpoint: &str,
        extra: &[String],
        config: &str,
        env: &[(String, String)],
    ) -> Agent {
        let manifests = dir.join("manifests");
        fs::create_dir_all(&manifests).unwrap();
        let mut a = Agent {
            dir: dir.to_owned(),
            manifests,
            port: free_port(),
            log: dir.join("picolet.log"),
            endpoint: endpoint.to_owned(),
            extra: extra.to_vec(),
            config: config.to_owned(),
            env: env.to_vec(),
            wrapper: Vec::new(),
            child: None,
        };
        a.spawn();
        a
    }

    /// Starts picolet under `wrapper` (a program and its arguments, picolet's command line
    /// after them), with more flags, and waits for its local API.
    pub fn start_wrapped(dir: &Path, endpoint: &str, extra: &[String], wrapper: &[&str]) -> Agent {
        let mut a = Agent::new(dir, endpoint, extra, "", &[]);
        a.wrapper = wrapper.iter().map(|s| (*s).to_owned()).collect();
        a.spawn();
        a
    }

    /// Starts picolet with more flags and environment variables, and returns at once: the
    /// process may end by itself (a failpoint) before its local API answers.
    pub fn start_env(
        dir: &Path,
        endpoint: &str,
        extra: &[String],
        env: &[(String, String)],
    ) -> Agent {
        let mut a = Agent::new(dir, endpoint, extra, "", env);
        a.launch();
        a
    }

    /// The handle of a picolet not started yet, with its manifest directory created.
    fn new(
        dir: &Path,
        endpoint: &str,
        extra: &[String],
        config: &str,
        env: &[(String, String)],
    ) -> Agent {
        let manifests = dir.join("manifests");
        fs::create_dir_all(&manifests).unwrap();
        Agent {
            dir: dir.to_owned(),
            manifests,
            port: free_port(),
            log: dir.join("picolet.log"),
            endpoint: endpoint.to_owned(),
            extra: extra.to_vec(),
            config: config.to_owned(),
            env: env.to_vec(),
            wrapper: Vec::new(),
            child: None,
        }
    }

    /// Waits for the process to end by itself; its exit status (`None` after `limit`).
    pub fn wait_exit(&mut self, limit: Duration) -> Option<std::process::ExitStatus> {
        let limit = super::deadline(limit);
        let t0 = Instant::now();
        while t0.elapsed() < limit {
            if let Some(st) = self.child.as_mut()?.try_wait().ok().flatten() {
                self.child = None;
                return Some(st);
            }
            std::thread::sleep(Duration::from_millis(50));
        }
        None
    }

    /// Image GC is off (a high threshold of 100) unless a test turns it on with flags: whether
    /// the shared test machine's disk is 85 % full must not decide what a test sees.
    fn spawn(&mut self) {
        self.launch();
        self.wait_for("the local API to answer", Duration::from_secs(20), |a| {
            a.get("/healthz").is_some()
        });
    }

    fn launch(&mut self) {
        let cfg = self.dir.join("config.yaml");
        // No eviction thresholds: the test machine's disk, shared with parallel builds, must not
        // evict the pods of unrelated tests. The eviction test sets its own with
        // `--eviction-hard`, which replaces this. No node API unless a test asks with `--port`:
        // parallel tests would all want 10250.
        fs::write(
            &cfg,
            format!(
                "apiVersion: kubelet.config.k8s.io/v1beta1\nkind: KubeletConfiguration\n\
                 staticPodPath: {}\ncontainerRuntimeEndpoint: {}\npodLogsDir: {}\nhealthzPort: {}\nport: 0\n\
                 imageGCHighThresholdPercent: 100\nimageGCLowThresholdPercent: 99\n\
                 evictionHard:\n  memory.available: \"0\"\n{}",
                self.manifests.display(),
                self.endpoint,
                self.dir.join("logs").display(),
                self.port,
                self.config
            ),
        )
        .unwrap();
        let log = fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(&self.log)
            .unwrap();
        // Pods go where the runtime puts them unless a test asks for the kubepods tree (under a
        // --cgroup-root of its own): tests run in parallel and must not share, or create,
        // cgroups in the machine's own hierarchy.
        let own_tree = self
            .extra
            .iter()
            .any(|a| a.starts_with("--cgroup-root") || a.starts_with("--cgroups-per-qos"));
        let no_tree: &[&str] = if own_tree {
            &[]
        } else {
            &["--cgroups-per-qos=false", "--enforce-node-allocatable=none"]
        };
        let mut cmd = picolet_command();
        if let Some((program, args)) = self.wrapper.split_first() {
            let inner = cmd;
            cmd = Command::new(program);
            cmd.args(args)
                .arg(inner.get_program())
                .args(inner.get_args());
        }
        let child = cmd
            .args(no_tree)
            .arg("--config")
            .arg(&cfg)
            .arg("--root-dir")
            .arg(self.dir.join("kubelet"))
            .arg("--hostname-override")
            .arg(NODE)
            .arg("-v=4")
            .args(&self.extra)
            .envs(self.env.iter().map(|(k, v)| (k, v)))
            .stdin(Stdio::null())
            .stdout(log.try_clone().unwrap())
            .stderr(log)
            .spawn()
            .expect("start picolet");
        self.child = Some(child);
    }

    pub fn pid(&self) -> u32 {
        self.child.as_ref().map_or(0, Child::id)
    }

    /// The picolet process: the child itself, or, under a `PICOLET_TEST_RUNNER` that stays its
    /// parent (heaptrack's wrapper, say), the first descendant named `picolet` (the child when
    /// there is none yet).
    pub fn picolet_pid(&self) -> u32 {
        let comm = |p: u32| fs::read_to_string(format!("/proc/{p}/comm")).unwrap_or_default();
        let mut todo = vec![self.pid()];
        while let Some(p) = todo.pop() {
            if comm(p).trim_end() == "picolet" {
                return p;
            }
            for task in fs::read_dir(format!("/proc/{p}/task"))
                .into_iter()
                .flatten()
                .flatten()
            {
                let children = fs::read_to_string(task.path().join("children")).unwrap_or_default();
                todo.extend(
                    children
                        .split_whitespace()
                        .filter_map(|c| c.parse::<u32>().ok()),
                );
            }
        }
        self.pid()
    }

    /// SIGKILL, as a crash would (picolet itself first, when a runner wraps it).
    pub fn kill9(&mut self) {
        let inner = self.picolet_pid();
        if let Some(mut c) = self.child.take() {
            if inner != c.id() {
                let _ = nix::sys::signal::kill(
                    nix::unistd::Pid::from_raw(inner.cast_signed()),
                    nix::sys::signal::Signal::SIGKILL,
                );
            }
            let _ = c.kill();
            let _ = c.wait();
        }
    }

    /// SIGTERM, and waits for the exit status.
    pub fn terminate(&mut self) -> std::process::ExitStatus {
        let mut c = self.child.take().expect("picolet is running");
        let pid = nix::unistd::Pid::from_raw(i32::try_from(c.id()).unwrap());
        nix::sys::signal::kill(pid, nix::sys::signal::Signal::SIGTERM).unwrap();
        c.wait().unwrap()
    }

    /// Starts picolet again with the same settings.
    pub fn restart(&mut self) {
        self.kill9();
        self.spawn();
    }

    /// Starts picolet again with these flags instead of the ones it had.
    pub fn restart_with(&mut self, extra: &[String]) {
        self.extra = extra.to_vec();
        self.restart();
    }

    pub fn write_manifest(&self, name: &str, content: &str) {
        // Write then rename, as editors and config tools do, so no half-written file is seen.
        let tmp = self.manifests.join(format!(".{name}.tmp"));
        fs::write(&tmp, content).unwrap();
        fs::rename(&tmp, self.manifests.join(name)).unwrap();
    }

    pub fn remove_manifest(&self, name: &str) {
        fs::remove_file(self.manifests.join(name)).unwrap();
    }

    /// GET on the local API; None when it does not answer 200.
    pub fn get(&self, path: &str) -> Option<String> {
        let mut s = TcpStream::connect(("127.0.0.1", self.port)).ok()?;
        s.set_read_timeout(Some(Duration::from_secs(5))).ok()?;
        write!(s, "GET {path} HTTP/1.0\r\nHost: localhost\r\n\r\n").ok()?;
        let mut out = String::new();
        s.read_to_string(&mut out).ok()?;
        let (head, body) = out.split_once("\r\n\r\n")?;
        head.starts_with("HTTP/1.0 200").then(|| body.to_owned())
    }

    pub fn pods(&self) -> serde_json::Value {
        self.get("/pods")
            .and_then(|b| serde_json::from_str(&b).ok())
            .unwrap_or_default()
    }

    /// The static pod `name` (`<name>-<node>`) from `/pods`.
    pub fn pod(&self, name: &str) -> Option<serde_json::Value> {
        let full = super::full(name);
        self.pods()["items"]
            .as_array()?
            .iter()
            .find(|p| p["metadata"]["name"] == full.as_str())
            .cloned()
    }

    /// The static pod's `status` (null when `/pods` does not list it).
    pub fn status(&self, name: &str) -> serde_json::Value {
        self.pod(name)
            .map(|p| p["status"].clone())
            .unwrap_or_default()
    }

    /// The static pod's phase ("" when `/pods` does not list it).
    pub fn phase(&self, name: &str) -> String {
        self.status(name)["phase"]
            .as_str()
            .unwrap_or_default()
            .to_owned()
    }

    /// Its first container's restart count (-1 when there is none).
    pub fn restarts(&self, name: &str) -> i64 {
        self.status(name)["containerStatuses"][0]["restartCount"]
            .as_i64()
            .unwrap_or(-1)
    }

    /// The status of its condition `type` ("" when it has none).
    pub fn condition(&self, name: &str, r#type: &str) -> String {
        self.status(name)["conditions"]
            .as_array()
            .into_iter()
            .flatten()
            .find(|c| c["type"] == r#type)
            .and_then(|c| c["status"].as_str())
            .unwrap_or_default()
            .to_owned()
    }

    pub fn manifests_report(&self) -> serde_json::Value {
        self.get("/manifests")
            .and_then(|b| serde_json::from_str(&b).ok())
            .unwrap_or_default()
    }

    pub fn log_text(&self) -> String {
        fs::read_to_string(&self.log).unwrap_or_default()
    }

    /// When picolet logged the first line containing `what`: seconds since midnight, from the
    /// klog header's `hh:mm:ss.uuuuuu`. Gaps between two such times are picolet's own, not
    /// when a polling test happened to see something.
    pub fn log_time(&self, what: &str) -> Option<f64> {
        let log = self.log_text();
        let line = log.lines().find(|l| l.contains(what))?;
        let clock = line.split_whitespace().nth(1)?;
        let mut parts = clock.split(':');
        let (h, m, s) = (parts.next()?, parts.next()?, parts.next()?);
        Some(
            h.parse::<f64>().ok()? * 3600.0
                + m.parse::<f64>().ok()? * 60.0
                + s.parse::<f64>().ok()?,
        )
    }

    /// Seconds from one logged line to a later one (across midnight too).
    pub fn log_gap(&self, from: &str, to: &str) -> Option<f64> {
        Some((self.log_time(to)? - self.log_time(from)?).rem_euclid(86_400.0))
    }

    /// Polls `cond` until it holds, or panics with `what` and picolet's log.
    pub fn wait_for(&self, what: &str, limit: Duration, mut cond: impl FnMut(&Agent) -> bool) {
        let limit = super::deadline(limit);
        let t0 = Instant::now();
        while t0.elapsed() < limit {
            if cond(self) {
                return;
            }
            if self.child.as_ref().is_some_and(is_dead) {
                panic!(
                    "picolet exited while waiting for {what}\n{}",
                    self.log_text()
                );
            }
            std::thread::sleep(Duration::from_millis(200));
        }
        panic!(
            "timed out after {limit:?} waiting for {what}\n--- picolet log ---\n{}",
            self.log_text()
        );
    }
}

/// Whether the child has exited (a zombie not yet waited for); `Child::try_wait` needs `&mut`.
fn is_dead(c: &Child) -> bool {
    let stat = fs::read_to_string(format!("/proc/{}/stat", c.id())).unwrap_or_default();
    stat.rsplit(") ")
        .next()
        .and_then(|s| s.chars().next())
        .is_none_or(|st| st == 'Z')
}

impl Drop for Agent {
    fn drop(&mut self) {
        self.kill9();
        // What its pods mounted (secret, projected and emptyDir-in-memory tmpfs) goes with it,
        // so a test leaves no mount behind; lazily, as the test's containerd may still run
        // their containers.
        for m in picolet::volume::mounts_under(&self.dir) {
            let _ = nix::mount::umount2(&m, nix::mount::MntFlags::MNT_DETACH);
        }
    }
}

/// A short directory for one test (unix socket paths are limited to 107 bytes): the scratch
/// containerd goes in `<dir>/c` (its start script clears what an earlier run left), picolet in a
/// fresh `<dir>/a`.
pub fn test_dir(name: &str) -> PathBuf {
    // Short (a containerd socket's path must fit in 108 bytes), and apart for each checkout:
    // two checkouts' test runs at once never share a directory.
    let checkout = env!("CARGO_MANIFEST_DIR")
        .bytes()
        .fold(0x811c_9dc5_u32, |h, b| {
            (h ^ u32::from(b)).wrapping_mul(0x0100_0193)
        });
    let d = PathBuf::from(format!("/tmp/pe2e-{:04x}-{name}", checkout & 0xffff));
    // What an earlier run's pods mounted (secret volumes' tmpfs) goes first.
    for m in picolet::volume::mounts_under(&d.join("a")) {
        let _ = nix::mount::umount2(&m, nix::mount::MntFlags::MNT_DETACH);
    }
    let _ = fs::remove_dir_all(d.join("a"));
    fs::create_dir_all(d.join("a")).unwrap();
    d
}
