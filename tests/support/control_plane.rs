//! A private Kubernetes control plane for cluster tests: the real etcd and
//! kube-apiserver (and optionally kube-scheduler and kube-controller-manager) of
//! the release pinned in `tests/k8s/go.mod`, on loopback, driven by
//! `scripts/control-plane.sh`. std only.
//!
//! `start` builds the binaries first if the cache lacks them
//! (`scripts/k8s-build.sh`: tens of minutes without a cache, well under a
//! second with one); a missing prerequisite (Go, openssl, iproute2, a failed
//! build or start) makes it panic with the missing piece named: such a test
//! fails, it never skips. `Drop` stops every process of the instance, by PID.
//!
//! The apiserver authorizes with Node,RBAC and admits with NodeRestriction on
//! top of the default plugins; each node named at `start` gets client
//! certificates for user `system:node:<name>` in group `system:nodes`, as a real
//! node has.
use std::collections::BTreeMap;
use std::fs;
use std::io::Write;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use super::describe;

/// The script that drives it, under `scripts/`.
const SCRIPT: &str = "control-plane.sh";

/// What `start` brings up.
#[derive(Debug, Clone, Default)]
pub struct Options {
    /// Nodes to make credentials and kubeconfigs for.
    pub nodes: Vec<String>,
    /// Also start kube-scheduler and kube-controller-manager (`start` then
    /// returns once the controller manager has created the default
    /// ServiceAccount and the kube-root-ca.crt ConfigMap).
    pub controllers: bool,
    /// A bootstrap token `ID.SECRET` nodes join with (`bootstrap.kubeconfig`), with kubeadm's
    /// bindings for TLS bootstrap and the apiserver's bootstrap token authentication.
    pub bootstrap_token: Option<String>,
    /// The controller manager's `--cluster-signing-duration` (e.g. "3m").
    pub signing_duration: Option<String>,
    /// More kube-apiserver flags (`--egress-selector-config-file=...`), appended to the
    /// script's `APISERVER_EXTRA_FLAGS`; none may contain whitespace.
    pub apiserver_flags: Vec<String>,
}

/// Which of a node's kubeconfigs.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum NodeKey {
    /// EC P-256 key in SEC1 form (`EC PRIVATE KEY`), certificates embedded.
    EcSec1,
    /// RSA key in PKCS#1 form (`RSA PRIVATE KEY`), certificates embedded.
    RsaPkcs1,
    /// The EC key in PKCS#8 form (`PRIVATE KEY`), certificates and key as file paths.
    EcPkcs8Files,
}

/// The result of one kubectl run.
#[derive(Debug, Clone)]
pub struct Kubectl {
    pub args: Vec<String>,
    pub success: bool,
    pub stdout: String,
    pub stderr: String,
}

impl Kubectl {
    /// stdout; panics with the whole run if kubectl failed.
    pub fn ok(self) -> String {
        if !self.success {
            panic!(
                "kubectl {} failed\n{}",
                self.args.join(" "),
                self.describe()
            );
        }
        self.stdout
    }

    /// True if the apiserver refused the request with 403 Forbidden (kubectl
    /// renders a Status of reason Forbidden as `Error from server (Forbidden)`).
    pub fn forbidden(&self) -> bool {
        !self.success && self.stderr.contains("Error from server (Forbidden)")
    }

    pub fn describe(&self) -> String {
        format!(
            "success: {}\n--- stdout ---\n{}\n--- stderr ---\n{}",
            self.success, self.stdout, self.stderr
        )
    }
}

pub struct ControlPlane {
    pub dir: PathBuf,
    /// `https://127.0.0.1:PORT`
    pub apiserver: String,
    /// The directory holding etcd, kube-apiserver, ..., kubectl.
    pub bin: PathBuf,
    pub kubectl: PathBuf,
    pub nodes: Vec<String>,
}

fn stop_dir(dir: &Path) -> Result<(), String> {
    let out = Command::new("bash")
        .arg(super::script(SCRIPT))
        .arg("stop")
        .arg(dir)
        .output()
        .map_err(|e| format!("cannot run bash {}: {e}", super::script(SCRIPT).display()))?;
    if out.status.success() {
        Ok(())
    } else {
        Err(format!(
            "control-plane.sh stop {} failed\n{}",
            dir.display(),
            describe(&out)
        ))
    }
}

impl ControlPlane {
    /// Starts a fresh control plane under `dir` (created if missing; whatever an
    /// earlier run left there is stopped and removed first) and returns once the
    /// apiserver's /readyz says ok. Panics with the script's output on any
    /// failure. The script's progress (and a first build's) goes to stderr.
    pub fn start(dir: &Path, options: &Options) -> ControlPlane {
        let dir = if dir.is_absolute() {
            dir.to_path_buf()
        } else {
            std::env::current_dir().expect("current dir").join(dir)
        };
        if let Err(e) = stop_dir(&dir) {
            panic!("clearing leftovers before start: {e}");
        }
        if dir.exists() {
            fs::remove_dir_all(&dir)
                .unwrap_or_else(|e| panic!("cannot remove {}: {e}", dir.display()));
        }
        let mut cmd = Command::new("bash");
        cmd.arg(super::script(SCRIPT)).arg("start").arg(&dir);
        for n in &options.nodes {
            cmd.arg("--node").arg(n);
        }
        if options.controllers {
            cmd.arg("--controllers");
        }
        if let Some(t) = &options.bootstrap_token {
            cmd.arg("--bootstrap-token").arg(t);
        }
        if let Some(d) = &options.signing_duration {
            cmd.arg("--signing-duration").arg(d);
        }
        if !options.apiserver_flags.is_empty() {
            for f in &options.apiserver_flags {
                assert!(
                    !f.contains(char::is_whitespace),
                    "apiserver flag {f:?}: the script splits APISERVER_EXTRA_FLAGS on whitespace"
                );
            }
            let mut flags = std::env::var("APISERVER_EXTRA_FLAGS").unwrap_or_default();
            for f in &options.apiserver_flags {
                flags.push(' ');
                flags.push_str(f);
            }
            cmd.env("APISERVER_EXTRA_FLAGS", flags.trim());
        }
        // stderr straight through: a first build takes long and says so.
        let out = cmd
            .stdin(Stdio::null())
            .stderr(Stdio::inherit())
            .output()
            .unwrap_or_else(|e| panic!("cannot run bash {}: {e}", super::script(SCRIPT).display()));
        if !out.status.success() {
            let _ = stop_dir(&dir);
            panic!(
                "control-plane.sh start {} failed (it needs Go >= the go line of tests/k8s/go.mod, \
                 openssl, iproute2 and util-linux: scripts/install-deps.sh; its error is on \
                 stderr above)\n{}",
                dir.display(),
                describe(&out)
            );
        }
        let stdout = String::from_utf8_lossy(&out.stdout);
        let dir = stdout
            .lines()
            .rev()
            .map(str::trim)
            .find(|l| !l.is_empty())
            .map(PathBuf::from)
            .unwrap_or_else(|| panic!("control-plane.sh start printed no directory"));
        let env_file = dir.join("cluster.env");
        let env: BTreeMap<String, String> = fs::read_to_string(&env_file)
            .unwrap_or_else(|e| panic!("cannot read {}: {e}", env_file.display()))
            .lines()
            .filter_map(|l| l.split_once('='))
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect();
        let get = |k: &str| {
            env.get(k)
                .cloned()
                .unwrap_or_else(|| panic!("{} has no {k}", env_file.display()))
        };
        ControlPlane {
            apiserver: get("APISERVER"),
            bin: PathBuf::from(get("BIN")),
            kubectl: PathBuf::from(get("KUBECTL")),
            nodes: options.nodes.clone(),
            dir,
        }
    }

    /// Stops every process of this instance. Idempotent; `Drop` calls it too.
    pub fn stop(&self) {
        if let Err(e) = stop_dir(&self.dir) {
            panic!("{e}");
        }
    }

    /// Stops kube-apiserver alone (SIGTERM, by the PID the script recorded), the rest of the
    /// control plane running on; returns its command line for [`Self::start_apiserver`].
    pub fn stop_apiserver(&self) -> Vec<String> {
        let pid_file = self.dir.join("run/kube-apiserver.pid");
        let pid = fs::read_to_string(&pid_file)
            .unwrap_or_else(|e| panic!("{}: {e}", pid_file.display()))
            .trim()
            .to_owned();
        let cmdline = fs::read(format!("/proc/{pid}/cmdline"))
            .unwrap_or_else(|e| panic!("kube-apiserver (pid {pid}) is not running: {e}"));
        let args: Vec<String> = cmdline
            .split(|b| *b == 0)
            .filter(|a| !a.is_empty())
            .map(|a| String::from_utf8_lossy(a).into_owned())
            .collect();
        let dir = self.dir.display().to_string();
        assert!(
            args.iter().any(|a| a.contains(&dir)),
            "pid {pid} is not this instance's kube-apiserver"
        );
        // As the script stops it: SIGTERM, and SIGKILL after 10 s (open watches hold a graceful
        // shutdown longer).
        let alive = || {
            fs::read_to_string(format!("/proc/{pid}/stat")).is_ok_and(|s| {
                !s.rsplit(')')
                    .next()
                    .unwrap_or("")
                    .trim_start()
                    .starts_with('Z')
            })
        };
        for signal in ["-TERM", "-KILL"] {
            // bash's own kill, as the script uses: nothing beyond bash needed.
            let _ = Command::new("bash")
                .args(["-c", "kill \"$1\" \"$2\"", "bash", signal, &pid])
                .status();
            let t0 = Instant::now();
            while alive() && t0.elapsed() < Duration::from_secs(10) {
                std::thread::sleep(Duration::from_millis(100));
            }
            if !alive() {
                return args;
            }
        }
        panic!("kube-apiserver {pid} survived SIGKILL");
    }

    /// Starts kube-apiserver again with the command line `stop_apiserver` returned, detached
    /// as the script launches it (so `stop` finds it by its PID file), and waits until ready.
    pub fn start_apiserver(&self, args: &[String]) {
        let log = self.dir.join("logs/kube-apiserver.log");
        let out = Command::new("bash")
            .arg("-c")
            .arg(r#"setsid "$@" </dev/null >>"$LOG" 2>&1 & echo $!"#)
            .arg("bash")
            .args(args)
            .env("LOG", &log)
            .output()
            .expect("bash");
        let pid = String::from_utf8_lossy(&out.stdout).trim().to_owned();
        assert!(!pid.is_empty(), "no PID for the restarted kube-apiserver");
        fs::write(self.dir.join("run/kube-apiserver.pid"), format!("{pid}\n")).unwrap();
        self.wait_for(
            "kube-apiserver ready again",
            Duration::from_secs(120),
            || {
                let r =
                    self.kubectl_with(&self.admin_kubeconfig(), &["get", "--raw", "/readyz"], None);
                (r.success && r.stdout.trim() == "ok").then_some(())
            },
        );
    }

    /// The cluster administrator's kubeconfig (group system:masters).
    /// The bootstrap kubeconfig (`Options::bootstrap_token`).
    pub fn bootstrap_kubeconfig(&self) -> PathBuf {
        self.dir.join("bootstrap.kubeconfig")
    }

    pub fn admin_kubeconfig(&self) -> PathBuf {
        self.dir.join("admin.kubeconfig")
    }

    /// A node's kubeconfig (user `system:node:<node>`, group `system:nodes`).
    pub fn node_kubeconfig(&self, node: &str, key: NodeKey) -> PathBuf {
        assert!(
            self.nodes.iter().any(|n| n == node),
            "no credentials for node {node}: start with it in Options::nodes"
        );
        let suffix = match key {
            NodeKey::EcSec1 => "",
            NodeKey::RsaPkcs1 => "-rsa",
            NodeKey::EcPkcs8Files => "-pkcs8",
        };
        self.dir.join(format!("node-{node}{suffix}.kubeconfig"))
    }

    /// A file of the cluster's PKI (`ca.crt`, `node-NAME-serving.key`, ...).
    pub fn pki(&self, name: &str) -> PathBuf {
        self.dir.join("pki").join(name)
    }

    /// The CA certificate that signed the apiserver's serving certificate and
    /// every client certificate.
    pub fn ca_cert(&self) -> PathBuf {
        self.dir.join("pki/ca.crt")
    }

    /// Runs the pinned kubectl with `kubeconfig`, `args` and, if given, `stdin`.
    pub fn kubectl_with(&self, kubeconfig: &Path, args: &[&str], stdin: Option<&str>) -> Kubectl {
        let mut cmd = Command::new(&self.kubectl);
        cmd.arg("--kubeconfig")
            .arg(kubeconfig)
            .arg("--request-timeout=30s")
            .args(args)
            .stdin(if stdin.is_some() {
                Stdio::piped()
            } else {
                Stdio::null()
            })
            .stdout(Stdio::piped())
            .stderr(Stdio::piped());
        let mut child = cmd
            .spawn()
            .unwrap_or_else(|e| panic!("cannot run {}: {e}", self.kubectl.display()));
        if let Some(input) = stdin {
            let mut pipe = child.stdin.take().expect("kubectl stdin");
            pipe.write_all(input.as_bytes())
                .unwrap_or_else(|e| panic!("writing kubectl's stdin: {e}"));
        }
        let out = child
            .wait_with_output()
            .unwrap_or_else(|e| panic!("waiting for kubectl: {e}"));
        Kubectl {
            args: args.iter().map(|s| s.to_string()).collect(),
            success: out.status.success(),
            stdout: String::from_utf8_lossy(&out.stdout).into_owned(),
            stderr: String::from_utf8_lossy(&out.stderr).into_owned(),
        }
    }

    /// kubectl as the cluster administrator, with `stdin` if given; returns the run, failed or
    /// not.
    pub fn admin_run(&self, args: &[&str], stdin: Option<&str>) -> Kubectl {
        self.kubectl_with(&self.admin_kubeconfig(), args, stdin)
    }

    /// kubectl as the cluster administrator; panics if it fails.
    pub fn admin(&self, args: &[&str]) -> String {
        self.kubectl_with(&self.admin_kubeconfig(), args, None).ok()
    }

    /// `kubectl apply -f -` (or any command reading stdin) as the administrator.
    pub fn admin_stdin(&self, args: &[&str], stdin: &str) -> String {
        self.kubectl_with(&self.admin_kubeconfig(), args, Some(stdin))
            .ok()
    }

    /// kubectl with a node's EC kubeconfig; returns the run, failed or not.
    pub fn as_node(&self, node: &str, args: &[&str]) -> Kubectl {
        self.kubectl_with(&self.node_kubeconfig(node, NodeKey::EcSec1), args, None)
    }

    pub fn as_node_stdin(&self, node: &str, args: &[&str], stdin: &str) -> Kubectl {
        self.kubectl_with(
            &self.node_kubeconfig(node, NodeKey::EcSec1),
            args,
            Some(stdin),
        )
    }

    /// Polls `f` every 250 ms until it returns Some, for at most `limit`;
    /// panics with `what` and the component logs' tails if it never does.
    pub fn wait_for<T>(&self, what: &str, limit: Duration, mut f: impl FnMut() -> Option<T>) -> T {
        let deadline = Instant::now() + limit;
        loop {
            if let Some(v) = f() {
                return v;
            }
            if Instant::now() > deadline {
                panic!(
                    "timed out after {limit:?} waiting for {what}\n{}",
                    self.logs_tail(20)
                );
            }
            std::thread::sleep(Duration::from_millis(250));
        }
    }

    /// The last `lines` lines of one component's log (`etcd`, `kube-apiserver`,
    /// `kube-scheduler`, `kube-controller-manager`).
    pub fn log_tail(&self, component: &str, lines: usize) -> String {
        super::file_tail(
            &self.dir.join("logs").join(format!("{component}.log")),
            lines,
        )
    }

    /// Polls `f` every 250 ms until it holds; past `limit`, panics naming `what`, with the
    /// node's log (`node_log`) and the control plane's log tails.
    #[allow(dead_code, reason = "not every test file waits on a joined node")]
    pub fn wait_until(
        &self,
        what: &str,
        limit: Duration,
        node_log: &dyn Fn() -> String,
        mut f: impl FnMut() -> bool,
    ) {
        let t0 = Instant::now();
        while t0.elapsed() < limit {
            if f() {
                return;
            }
            std::thread::sleep(Duration::from_millis(250));
        }
        panic!(
            "timed out after {limit:?} waiting for {what}\n--- picolet log ---\n{}\n--- control plane ---\n{}",
            node_log(),
            self.logs_tail(40)
        );
    }

    /// Runs `kubectl port-forward pod/POD LOCAL:REMOTE` and GETs `/index.html` through it
    /// until the answer holds `marker` or `limit` passes; stops the port-forward and returns
    /// the last answer.
    #[allow(dead_code, reason = "not every test file forwards a port")]
    pub fn port_forward_get(
        &self,
        pod: &str,
        local: u16,
        remote: u16,
        marker: &str,
        limit: Duration,
    ) -> String {
        use std::io::Read;
        let mut pf = Command::new(&self.kubectl)
            .arg("--kubeconfig")
            .arg(self.admin_kubeconfig())
            .args([
                "port-forward",
                &format!("pod/{pod}"),
                &format!("{local}:{remote}"),
            ])
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .unwrap();
        let mut page = String::new();
        let t0 = Instant::now();
        while t0.elapsed() < limit && !page.contains(marker) {
            std::thread::sleep(Duration::from_millis(250));
            if let Ok(mut s) = std::net::TcpStream::connect(("127.0.0.1", local)) {
                let _ = s.set_read_timeout(Some(Duration::from_secs(10)));
                let _ = s.write_all(b"GET /index.html HTTP/1.0\r\nHost: x\r\n\r\n");
                page.clear();
                let _ = s.read_to_string(&mut page);
            }
        }
        let _ = pf.kill();
        let _ = pf.wait();
        page
    }

    /// Every component's log tail, for failure messages.
    pub fn logs_tail(&self, lines: usize) -> String {
        [
            "kube-apiserver",
            "kube-scheduler",
            "kube-controller-manager",
            "etcd",
        ]
        .iter()
        .map(|c| {
            format!(
                "--- {c} (last {lines} lines) ---\n{}",
                self.log_tail(c, lines)
            )
        })
        .collect::<Vec<_>>()
        .join("\n")
    }
}

/// One of the programs `scripts/k8s-build.sh --tools` builds (`metrics-server`, `registry`),
/// built first if the cache lacks it; panics with the build's output if it fails.
pub fn tool(name: &str) -> PathBuf {
    let build = Path::new(env!("CARGO_MANIFEST_DIR")).join("scripts/k8s-build.sh");
    let out = Command::new("bash")
        .arg(&build)
        .arg("--tools")
        .stdin(Stdio::null())
        .stderr(Stdio::inherit())
        .output()
        .unwrap_or_else(|e| panic!("cannot run bash {}: {e}", build.display()));
    assert!(
        out.status.success(),
        "scripts/k8s-build.sh --tools failed (it needs Go: scripts/install-deps.sh)\n{}",
        describe(&out)
    );
    String::from_utf8_lossy(&out.stdout)
        .lines()
        .rev()
        .map(str::trim)
        .find(|l| !l.is_empty())
        .map(|d| PathBuf::from(d).join(name))
        .expect("k8s-build.sh --tools printed no directory")
}

/// metrics-server (`scripts/k8s-build.sh --tools`), run as a process beside the control plane
/// and registered through the apiserver's aggregation layer as `v1beta1.metrics.k8s.io`, so
/// that `kubectl top` works as in a cluster. It scrapes each node's `/metrics/resource` on the
/// port the Node's status names, at the node's InternalIP, verifying the node's serving
/// certificate with the CA given to [`ControlPlane::start_metrics_server`], and presents the
/// administrator's client certificate. `Drop` stops it, by PID.
pub struct MetricsServer {
    child: Child,
    pub log: PathBuf,
}

impl MetricsServer {
    pub fn log_tail(&self, lines: usize) -> String {
        super::file_tail(&self.log, lines)
    }
}

impl Drop for MetricsServer {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

impl ControlPlane {
    /// Builds metrics-server if the cache lacks it, starts it on a free loopback port and
    /// registers it: a Service of type ExternalName (`localhost`, which the aggregator dials
    /// as `https://localhost:<port>`, since no Service network exists here) and the APIService,
    /// with `insecureSkipTLSVerify` (metrics-server's self-signed certificate names neither).
    /// Returns once the APIService is Available. Panics, naming what failed, otherwise.
    pub fn start_metrics_server(&self, kubelet_ca: &Path, interval_s: u32) -> MetricsServer {
        let port = std::net::TcpListener::bind("127.0.0.1:0")
            .and_then(|l| l.local_addr())
            .map(|a| a.port())
            .expect("free port");
        self.start_metrics_server_on(kubelet_ca, interval_s, port, &[])
    }

    /// [`Self::start_metrics_server`] on this port, with these variables in its environment
    /// (`HTTPS_PROXY`, say: client-go's transports honour it, loopback excepted).
    pub fn start_metrics_server_on(
        &self,
        kubelet_ca: &Path,
        interval_s: u32,
        port: u16,
        env: &[(&str, String)],
    ) -> MetricsServer {
        let bin = tool("metrics-server");
        let dir = self.dir.join("metrics-server");
        fs::create_dir_all(&dir).expect("metrics-server dir");
        let log = self.dir.join("logs/metrics-server.log");
        let log_file = fs::File::create(&log).expect("metrics-server log");
        let admin = self.admin_kubeconfig();
        let child = Command::new(&bin)
            .arg(format!("--kubeconfig={}", admin.display()))
            .arg(format!("--authentication-kubeconfig={}", admin.display()))
            .arg(format!("--authorization-kubeconfig={}", admin.display()))
            .arg("--bind-address=127.0.0.1")
            .arg(format!("--secure-port={port}"))
            .arg(format!("--cert-dir={}", dir.display()))
            .arg("--kubelet-use-node-status-port")
            .arg("--kubelet-preferred-address-types=InternalIP")
            .arg(format!(
                "--kubelet-certificate-authority={}",
                kubelet_ca.display()
            ))
            .arg(format!("--metric-resolution={interval_s}s"))
            // (it must stay below the resolution)
            .arg("--kubelet-request-timeout=5s")
            .envs(env.iter().map(|(k, v)| (k, v)))
            .stdin(Stdio::null())
            .stdout(log_file.try_clone().expect("log fd"))
            .stderr(log_file)
            .spawn()
            .unwrap_or_else(|e| panic!("cannot run {}: {e}", bin.display()));
        let mut ms = MetricsServer { child, log };
        self.admin_stdin(
            &["apply", "-f", "-"],
            &format!(
                "apiVersion: v1\nkind: Service\nmetadata:\n  name: metrics-server\n  \
                 namespace: kube-system\nspec:\n  type: ExternalName\n  externalName: localhost\n\
                 ---\napiVersion: apiregistration.k8s.io/v1\nkind: APIService\nmetadata:\n  \
                 name: v1beta1.metrics.k8s.io\nspec:\n  group: metrics.k8s.io\n  version: v1beta1\n  \
                 groupPriorityMinimum: 100\n  versionPriority: 100\n  insecureSkipTLSVerify: true\n  \
                 service:\n    namespace: kube-system\n    name: metrics-server\n    port: {port}\n"
            ),
        );
        let deadline = Instant::now() + Duration::from_secs(90);
        loop {
            let available = self
                .kubectl_with(
                    &admin,
                    &[
                        "get",
                        "apiservice",
                        "v1beta1.metrics.k8s.io",
                        "-o",
                        "jsonpath={.status.conditions[?(@.type==\"Available\")].status}",
                    ],
                    None,
                )
                .stdout;
            if available.trim() == "True" {
                return ms;
            }
            if let Ok(Some(status)) = ms.child.try_wait() {
                panic!(
                    "metrics-server exited ({status})\n--- metrics-server ---\n{}",
                    ms.log_tail(30)
                );
            }
            if Instant::now() > deadline {
                panic!(
                    "metrics-server's APIService not Available after 90 s\n--- metrics-server ---\n{}\n{}",
                    ms.log_tail(30),
                    self.logs_tail(10)
                );
            }
            std::thread::sleep(Duration::from_millis(500));
        }
    }
}

impl Drop for ControlPlane {
    fn drop(&mut self) {
        let stopped = stop_dir(&self.dir);
        if stopped.is_ok() {
            // etcd's data (60 MB or so, nothing a failure is read from) goes with it; the logs
            // stay until the next run in the directory.
            let _ = std::fs::remove_dir_all(self.dir.join("etcd"));
        }
        if let Err(e) = stopped {
            if std::thread::panicking() {
                eprintln!("{e}");
            } else {
                panic!("{e}");
            }
        }
    }
}

/// A control plane with controllers and one node, `NODE`, joined by picolet on a scratch
/// containerd of its own with a client certificate (`--kubeconfig`, then `flags`), all under
/// `dir`: the setup of the tests of a joined node. Bind the three in this order (`let (cp, c,
/// a) = ...`): they are dropped in reverse, the agent first.
pub fn joined_node(
    dir: &Path,
    flags: &[String],
) -> (
    ControlPlane,
    super::containerd::ScratchContainerd,
    super::agent::Agent,
) {
    let cp = ControlPlane::start(
        &dir.join("cp"),
        &Options {
            nodes: vec![super::NODE.into()],
            controllers: true,
            ..Default::default()
        },
    );
    let c = super::containerd::ScratchContainerd::start(&dir.join("containerd"));
    let kc = cp.node_kubeconfig(super::NODE, NodeKey::EcSec1);
    let mut args = vec!["--kubeconfig".to_owned(), kc.display().to_string()];
    args.extend(flags.iter().cloned());
    let a = super::agent::Agent::start_with(&dir.join("a"), &c.endpoint(), &args);
    (cp, c, a)
}
