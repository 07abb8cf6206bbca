//! The picolet binary under a stand-in for systemd: a datagram socket listening where
//! `$NOTIFY_SOCKET` points, a `$WATCHDOG_USEC`, and a `$JOURNAL_STREAM` naming the file its
//! stderr goes to. The runtime is the fake CRI server, which can be absent at first.
//! (That the pings stop when the loop or the PLEG stalls is shown in the library's tests, under
//! a fake clock: the PLEG's threshold is 3 minutes of real time here.)

mod support;

use support::{IMAGE, fake_cri};

use std::os::unix::fs::MetadataExt;
use std::os::unix::net::UnixDatagram;
use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use fake_cri::{FakeCri, TempDir};
use picolet::rt;

/// picolet started as systemd would start it; killed by PID on drop if still running.
struct Picolet {
    child: Option<Child>,
    log: std::path::PathBuf,
}

impl Drop for Picolet {
    fn drop(&mut self) {
        if let Some(mut c) = self.child.take() {
            let _ = c.kill();
            let _ = c.wait();
        }
    }
}

impl Picolet {
    fn start(dir: &Path, endpoint: &str, env: &[(&str, String)], journal: Option<bool>) -> Picolet {
        let manifests = dir.join("manifests");
        std::fs::create_dir_all(&manifests).unwrap();
        let cfg = dir.join("config.yaml");
        std::fs::write(
            &cfg,
            format!(
                "apiVersion: kubelet.config.k8s.io/v1beta1\nkind: KubeletConfiguration\n\
                 staticPodPath: {}\ncontainerRuntimeEndpoint: {endpoint}\npodLogsDir: {}\n\
                 healthzPort: 0\n",
                manifests.display(),
                dir.join("logs").display(),
            ),
        )
        .unwrap();
        let log = dir.join("picolet.log");
        let f = std::fs::File::create(&log).unwrap();
        let m = f.metadata().unwrap();
        let mut cmd = Command::new(env!("CARGO_BIN_EXE_picolet"));
        cmd.args(["--cgroups-per-qos=false", "--enforce-node-allocatable=none"])
            .arg("--config")
            .arg(&cfg)
            .arg("--root-dir")
            .arg(dir.join("kubelet"))
            .arg("--hostname-override")
            .arg("notify-node")
            .env_remove("NOTIFY_SOCKET")
            .env_remove("WATCHDOG_USEC")
            .env_remove("WATCHDOG_PID")
            .env_remove("JOURNAL_STREAM")
            .envs(env.iter().map(|(k, v)| (k, v)))
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(f);
        match journal {
            Some(true) => cmd.env("JOURNAL_STREAM", format!("{}:{}", m.dev(), m.ino())),
            Some(false) => cmd.env("JOURNAL_STREAM", format!("{}:{}", m.dev(), m.ino() + 1)),
            None => &mut cmd,
        };
        Picolet {
            child: Some(cmd.spawn().expect("start picolet")),
            log,
        }
    }

    fn pid(&self) -> u32 {
        self.child.as_ref().map_or(0, Child::id)
    }

    fn log_text(&self) -> String {
        std::fs::read_to_string(&self.log).unwrap_or_default()
    }

    /// SIGTERM, as `systemctl stop` sends; returns the exit status.
    async fn terminate(&mut self) -> std::process::ExitStatus {
        let mut c = self.child.take().expect("running");
        let pid = nix::unistd::Pid::from_raw(i32::try_from(c.id()).unwrap());
        nix::sys::signal::kill(pid, nix::sys::signal::Signal::SIGTERM).unwrap();
        let t0 = Instant::now();
        loop {
            if let Some(st) = c.try_wait().unwrap() {
                return st;
            }
            assert!(
                t0.elapsed() < Duration::from_secs(10),
                "picolet ignored SIGTERM"
            );
            rt::sleep(Duration::from_millis(50)).await;
        }
    }
}

/// What systemd would have received: every datagram, with its arrival time. A thread of its
/// own receives and stamps them, so a busy executor in this test cannot make pings look late.
struct Listener {
    rx: std::sync::mpsc::Receiver<(Instant, String)>,
    got: Vec<(Instant, String)>,
}

impl Listener {
    fn bind(addr: &std::os::unix::net::SocketAddr) -> Listener {
        let sock = UnixDatagram::bind_addr(addr).unwrap();
        sock.set_read_timeout(Some(Duration::from_millis(100)))
            .unwrap();
        let (tx, rx) = std::sync::mpsc::channel();
        std::thread::spawn(move || {
            let mut buf = [0u8; 1024];
            loop {
                match sock.recv(&mut buf) {
                    Ok(n) => {
                        let m = String::from_utf8_lossy(&buf[..n]).into_owned();
                        if tx.send((Instant::now(), m)).is_err() {
                            return;
                        }
                    }
                    // Each timeout checks whether the listener is still there.
                    Err(e)
                        if matches!(
                            e.kind(),
                            std::io::ErrorKind::WouldBlock
                                | std::io::ErrorKind::TimedOut
                                | std::io::ErrorKind::Interrupted
                        ) =>
                    {
                        if tx.send((Instant::now(), String::new())).is_err() {
                            return;
                        }
                    }
                    Err(e) => panic!("receiving on the notify socket: {e}"),
                }
            }
        });
        Listener {
            rx,
            got: Vec::new(),
        }
    }

    fn poll(&mut self) {
        self.got
            .extend(self.rx.try_iter().filter(|(_, m)| !m.is_empty()));
    }

    fn lines(&self, line: &str) -> Vec<Instant> {
        self.got
            .iter()
            .flat_map(|(t, m)| m.lines().map(move |l| (*t, l)))
            .filter(|(_, l)| *l == line)
            .map(|(t, _)| t)
            .collect()
    }

    /// Reads for `d`, keeping the executor (and so the fake runtime) running.
    async fn listen_for(&mut self, d: Duration) {
        let t0 = Instant::now();
        while t0.elapsed() < d {
            self.poll();
            rt::sleep(Duration::from_millis(20)).await;
        }
        self.poll();
    }

    async fn until(
        &mut self,
        p: &Picolet,
        what: &str,
        limit: Duration,
        cond: impl Fn(&Self) -> bool,
    ) {
        let t0 = Instant::now();
        while t0.elapsed() < limit {
            self.poll();
            if cond(self) {
                return;
            }
            rt::sleep(Duration::from_millis(20)).await;
        }
        panic!(
            "timed out after {limit:?} waiting for {what}; received {:?}\n--- picolet log ---\n{}",
            self.got.iter().map(|(_, m)| m).collect::<Vec<_>>(),
            p.log_text()
        );
    }

    fn has(&self, text: &str) -> bool {
        self.got.iter().any(|(_, m)| m.contains(text))
    }
}

#[test]
fn ready_once_the_runtime_is_listed_watchdog_while_healthy_stopping_on_sigterm() {
    rt::block_on(Box::pin(async {
        let tmp = TempDir::new("notify");
        let fake = FakeCri::start(tmp.path());
        fake.add_image(IMAGE);
        fake.stop(); // the runtime is not up yet, as at boot before containerd
        let path = tmp.path().join("notify.sock");
        let mut l = Listener::bind(&std::os::unix::net::SocketAddr::from_pathname(&path).unwrap());
        let env = [
            ("NOTIFY_SOCKET", path.display().to_string()),
            ("WATCHDOG_USEC", "400000".to_owned()), // a ping every 200 ms
        ];
        let mut p = Picolet::start(&tmp.path().join("a"), &fake.endpoint(), &env, Some(true));

        // Healthy but not ready: the watchdog is fed, READY waits for the runtime.
        l.until(&p, "a status while waiting", Duration::from_secs(20), |l| {
            l.has("STATUS=waiting for the container runtime")
        })
        .await;
        l.listen_for(Duration::from_secs(2)).await;
        assert!(
            l.lines("READY=1").is_empty(),
            "READY before the runtime answered"
        );
        assert!(l.lines("WATCHDOG=1").len() >= 5, "{:?}", l.got);

        fake.start_again();
        l.until(&p, "READY=1", Duration::from_secs(20), |l| {
            !l.lines("READY=1").is_empty()
        })
        .await;
        std::fs::write(
            tmp.path().join("a/manifests/web.yaml"),
            format!(
                "apiVersion: v1\nkind: Pod\nmetadata:\n  name: web\nspec:\n  containers:\n  \
                 - name: main\n    image: {IMAGE}\n    command: [sleep, \"3600\"]\n"
            ),
        )
        .unwrap();
        l.until(&p, "the pod in the status", Duration::from_secs(20), |l| {
            l.has("STATUS=running 1 pods")
        })
        .await;

        // The pings keep coming, every 200 ms, none more than a watchdog timeout apart.
        let t0 = Instant::now();
        l.listen_for(Duration::from_secs(3)).await;
        let pings: Vec<Instant> = l
            .lines("WATCHDOG=1")
            .into_iter()
            .filter(|t| *t >= t0)
            .collect();
        assert!(pings.len() >= 8, "{} pings in 3 s", pings.len());
        let widest = pings.windows(2).map(|w| w[1] - w[0]).max().unwrap();
        assert!(
            widest < Duration::from_millis(400),
            "a gap of {widest:?} between pings"
        );
        assert_eq!(l.lines("READY=1").len(), 1);

        let st = p.terminate().await;
        assert!(st.success(), "exit status {st}");
        l.poll();
        assert!(!l.lines("STOPPING=1").is_empty(), "{:?}", l.got);

        // stderr was the journal: every line carries its syslog priority.
        let log = p.log_text();
        assert!(log.lines().count() > 3, "{log}");
        for line in log.lines() {
            let ok = ["<3>E", "<4>W", "<6>I", "<7>D"]
                .iter()
                .any(|p| line.starts_with(p));
            assert!(ok, "a line without its priority: {line:?}");
        }
        assert!(
            log.contains("<4>W"),
            "the runtime-not-reachable warning: {log}"
        );
    }));
}

/// An abstract socket works; pings meant for another process (`$WATCHDOG_PID` not ours) are
/// not sent; a `$JOURNAL_STREAM` naming another file leaves the lines plain.
#[test]
fn abstract_socket_foreign_watchdog_pid_and_plain_lines() {
    rt::block_on(Box::pin(async {
        let tmp = TempDir::new("notify-abs");
        let fake = FakeCri::start(tmp.path());
        let name = format!("picolet-test-notify-{}", std::process::id());
        use std::os::linux::net::SocketAddrExt;
        let addr = std::os::unix::net::SocketAddr::from_abstract_name(name.as_bytes()).unwrap();
        let mut l = Listener::bind(&addr);
        let env = [
            ("NOTIFY_SOCKET", format!("@{name}")),
            ("WATCHDOG_USEC", "400000".to_owned()),
            ("WATCHDOG_PID", "1".to_owned()),
        ];
        let mut p = Picolet::start(&tmp.path().join("b"), &fake.endpoint(), &env, Some(false));
        assert_ne!(p.pid(), 1);
        l.until(&p, "READY=1", Duration::from_secs(20), |l| {
            !l.lines("READY=1").is_empty()
        })
        .await;
        l.listen_for(Duration::from_secs(1)).await;
        assert!(l.lines("WATCHDOG=1").is_empty(), "{:?}", l.got);
        assert!(p.terminate().await.success());
        l.poll();
        assert!(!l.lines("STOPPING=1").is_empty(), "{:?}", l.got);
        let log = p.log_text();
        assert!(
            log.lines().next().is_some_and(|l| l.starts_with('I')),
            "{log}"
        );
        assert!(!log.contains("<6>"), "{log}");
    }));
}
