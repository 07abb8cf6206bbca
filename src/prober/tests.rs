//! Probe workers on a fake clock against the fake runtime: when probes run, how results count
//! against the thresholds, and what reaches the loop. No test sleeps: time moves by hand.

use std::cell::{Cell, RefCell};
use std::rc::Rc;
use std::time::Duration;

use super::*;
use crate::cri::fake::{ExecReply, FakeRuntime};
use crate::kubecontainer::PodRuntimeStatus;
use crate::kuberuntime::NodeContext;
use crate::rt::FakeClock;

const IMAGE: &str = "picolet.local/busybox:1";

struct Env {
    clock: FakeClock,
    fake: FakeRuntime,
    rm: Rc<RuntimeManager>,
    cache: Rc<RefCell<Cache>>,
    pm: ProbeManager,
    dir: std::path::PathBuf,
}

impl Drop for Env {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}

fn env(tag: &str) -> Env {
    let clock = FakeClock::install();
    let dir = std::env::temp_dir().join(format!("picolet-prober-{tag}-{}", std::process::id()));
    let fake = FakeRuntime::new();
    fake.add_image(IMAGE);
    let svc = Rc::new(fake.clone());
    let node = NodeContext {
        node_ip: "192.0.2.1".into(),
        root_dir: dir.join("root"),
        pod_logs_dir: dir.join("logs"),
        ..Default::default()
    };
    let rm = Rc::new(RuntimeManager::new(svc.clone(), svc, node));
    let cache = Rc::new(RefCell::new(Cache::default()));
    let pm = ProbeManager::new(rm.clone(), cache.clone(), "192.0.2.1");
    Env {
        clock,
        fake,
        rm,
        cache,
        pm,
        dir,
    }
}

fn pod(probes: serde_json::Value) -> Rc<Pod> {
    let mut c = serde_json::json!({"name": "main", "image": IMAGE, "command": ["sleep", "3600"]});
    for (k, v) in probes.as_object().unwrap() {
        c[k] = v.clone();
    }
    let v = serde_json::json!({
        "metadata": {"name": "p", "namespace": "default", "uid": "u1"},
        "spec": {"containers": [c]}
    });
    Rc::new(serde_json::from_value(v).unwrap())
}

impl Env {
    /// Creates (or restarts) the pod's container and shows it in the cache, as a sync would.
    async fn sync(&self, p: &Pod) {
        let st = self.rm.pod_status("u1").await.unwrap();
        let out = self.rm.sync_pod(p, &st).await;
        assert!(out.errors.is_empty(), "{:?}", out.errors);
        self.refresh().await;
    }

    async fn refresh(&self) {
        let st = self.rm.pod_status("u1").await.unwrap();
        self.cache.borrow_mut().put(st, rt::mono_nanos(), None);
    }

    fn status(&self) -> PodRuntimeStatus {
        self.cache.borrow().get("u1").unwrap().status.clone()
    }

    fn id(&self) -> String {
        self.status().latest("main").unwrap().id.to_string()
    }

    async fn advance(&self, secs: u64) {
        for _ in 0..secs {
            self.clock.advance(Duration::from_secs(1));
            rt::settle().await;
        }
    }

    fn result(&self, kind: Kind) -> Option<ProbeResult> {
        self.rm.probe_results().get(&self.id(), kind)
    }

    fn drain(&self) -> Vec<(Kind, ProbeResult)> {
        let rx = self.pm.updates();
        std::iter::from_fn(|| rx.try_recv().ok())
            .map(|u| (u.kind, u.result))
            .collect()
    }
}

#[test]
fn a_failing_exec_liveness_probe_fails_after_the_threshold_and_then_holds() {
    let e = env("liveness");
    rt::block_on(async {
        // Past the first period after start: no start-up jitter.
        e.clock.advance(Duration::from_secs(60));
        let healthy = Rc::new(Cell::new(true));
        let h = healthy.clone();
        e.fake.set_exec_handler(move |_, cmd| {
            (cmd == ["cat", "/tmp/health"]).then(|| ExecReply::exit(if h.get() { 0 } else { 1 }))
        });
        let p = pod(serde_json::json!({"livenessProbe": {
            "exec": {"command": ["cat", "/tmp/health"]},
            "initialDelaySeconds": 5, "periodSeconds": 10, "failureThreshold": 3
        }}));
        e.sync(&p).await;
        e.pm.add_pod(&p);
        rt::settle().await;
        assert_eq!(
            e.drain(),
            [(Kind::Liveness, ProbeResult::Success)],
            "initial result"
        );
        assert_eq!(e.fake.calls("ExecSync"), 0, "within the initial delay");
        e.advance(10).await;
        assert_eq!(e.fake.calls("ExecSync"), 1, "first probe one period in");
        healthy.set(false);
        e.advance(19).await;
        assert_eq!(e.fake.calls("ExecSync"), 2);
        assert_eq!(
            e.result(Kind::Liveness),
            Some(ProbeResult::Success),
            "1 failure of 3"
        );
        e.advance(11).await;
        assert_eq!(e.fake.calls("ExecSync"), 4);
        assert_eq!(
            e.result(Kind::Liveness),
            Some(ProbeResult::Failure),
            "3rd failure"
        );
        assert_eq!(e.drain(), [(Kind::Liveness, ProbeResult::Failure)]);
        // On hold until a new instance: no more execs into a container about to be killed.
        e.advance(30).await;
        assert_eq!(e.fake.calls("ExecSync"), 4);
        // The sync kills and restarts it; the worker follows the new instance.
        let old = e.id();
        healthy.set(true);
        e.sync(&p).await;
        assert_ne!(e.id(), old);
        assert_eq!(
            e.rm.probe_results().get(&old, Kind::Liveness),
            Some(ProbeResult::Failure)
        );
        e.advance(10).await;
        assert_eq!(
            e.rm.probe_results().get(&old, Kind::Liveness),
            None,
            "forgotten"
        );
        assert_eq!(e.result(Kind::Liveness), Some(ProbeResult::Success));
    });
}

#[test]
fn an_instance_seen_created_before_it_runs_is_not_killed_by_its_probes() {
    let e = env("created");
    rt::block_on(async {
        e.clock.advance(Duration::from_secs(60));
        e.fake
            .set_exec_handler(|_, cmd| (cmd == ["true"]).then(|| ExecReply::exit(0)));
        let p = pod(serde_json::json!({"livenessProbe": {
            "exec": {"command": ["true"]},
            "initialDelaySeconds": 5, "periodSeconds": 10, "failureThreshold": 3
        }}));
        e.sync(&p).await;
        // The relist caught the instance between CreateContainer and StartContainer.
        let mut st = e.rm.pod_status("u1").await.unwrap();
        for c in &mut st.containers {
            c.state = crate::kubecontainer::ContainerState::Created;
            c.started_at = 0;
        }
        e.cache.borrow_mut().put(st, rt::mono_nanos(), None);
        e.pm.add_pod(&p);
        rt::settle().await;
        // It runs at the next relist, well within the initial delay.
        e.advance(1).await;
        e.refresh().await;
        e.advance(1).await;
        assert_eq!(
            e.result(Kind::Liveness),
            Some(ProbeResult::Success),
            "no probe has run: the instance is alive"
        );
        assert!(
            !e.drain().contains(&(Kind::Liveness, ProbeResult::Failure)),
            "no failure reached the loop"
        );
        // The loop's sync of the running pod keeps the instance.
        let id = e.id();
        e.sync(&p).await;
        assert_eq!(e.id(), id, "not killed");
        assert_eq!(e.fake.calls("StopContainer"), 0);
        e.advance(10).await;
        assert_eq!(
            e.fake.calls("ExecSync"),
            1,
            "probed once the delay was over"
        );
        assert_eq!(e.result(Kind::Liveness), Some(ProbeResult::Success));
    });
}

#[test]
fn a_timed_out_exec_is_a_failure_and_an_exec_error_is_thrown_away() {
    let e = env("timeout");
    rt::block_on(async {
        e.clock.advance(Duration::from_secs(60));
        let p = pod(serde_json::json!({"readinessProbe": {
            "exec": {"command": ["sleep", "5"]}, "timeoutSeconds": 2,
            "periodSeconds": 10, "failureThreshold": 1, "successThreshold": 1
        }}));
        e.sync(&p).await;
        let id = e.id();
        let ctx = &e.pm.ctx;
        let spec = p.spec.containers[0].readiness_probe.clone().unwrap();
        let run = rt::spawn({
            let ctx = ctx.clone();
            let c = p.spec.containers[0].clone();
            let id = id.clone();
            async move { ctx.run(&spec, &c, &id, "10.88.0.2").await }
        });
        rt::settle().await;
        e.clock.advance(Duration::from_secs(2));
        assert_eq!(
            run.await,
            Outcome::Failure("command \"sleep 5\" timed out".into())
        );
        let missing = crate::api::Probe {
            exec: Some(crate::api::ExecAction {
                command: vec!["no-such-binary".into()],
            }),
            ..Default::default()
        };
        assert!(matches!(
            ctx.run(&missing, &p.spec.containers[0], &id, "10.88.0.2").await,
            Outcome::Error(m) if m.contains("executable file not found")
        ));
    });
}

#[test]
fn a_startup_probe_holds_the_others_off_until_it_passes() {
    let e = env("startup");
    rt::block_on(async {
        e.clock.advance(Duration::from_secs(60));
        let up = Rc::new(Cell::new(false));
        let u = up.clone();
        let live = Rc::new(Cell::new(0));
        let l = live.clone();
        e.fake
            .set_exec_handler(move |_, cmd| match cmd[0].as_str() {
                "startup" => Some(ExecReply::exit(if u.get() { 0 } else { 1 })),
                "live" => {
                    l.set(l.get() + 1);
                    Some(ExecReply::exit(0))
                }
                _ => None,
            });
        let p = pod(serde_json::json!({
            "startupProbe": {"exec": {"command": ["startup"]}, "periodSeconds": 1, "failureThreshold": 30},
            "livenessProbe": {"exec": {"command": ["live"]}, "periodSeconds": 1}
        }));
        e.sync(&p).await;
        e.pm.add_pod(&p);
        e.advance(10).await;
        assert_eq!(live.get(), 0, "liveness waits for the startup probe");
        assert_eq!(e.result(Kind::Startup), Some(ProbeResult::Unknown));
        let c = &p.spec.containers[0];
        assert!(!e.rm.probe_results().started(c, &e.id()));
        up.set(true);
        e.advance(1).await;
        assert_eq!(e.result(Kind::Startup), Some(ProbeResult::Success));
        assert!(e.rm.probe_results().started(c, &e.id()));
        e.advance(3).await;
        assert!(
            live.get() >= 2,
            "liveness runs once started ({})",
            live.get()
        );
        let startups = e.fake.calls("ExecSync") - live.get();
        e.advance(5).await;
        assert_eq!(
            e.fake.calls("ExecSync") - live.get(),
            startups,
            "the startup probe stops once it passed"
        );
    });
}

#[test]
fn readiness_is_probed_as_soon_as_the_startup_probe_passes() {
    let e = env("startup-ready");
    rt::block_on(async {
        e.clock.advance(Duration::from_secs(60));
        let up = Rc::new(Cell::new(false));
        let u = up.clone();
        e.fake
            .set_exec_handler(move |_, cmd| match cmd[0].as_str() {
                "startup" => Some(ExecReply::exit(if u.get() { 0 } else { 1 })),
                "ready" => Some(ExecReply::exit(0)),
                _ => None,
            });
        // As the conformance spec has it: readiness every 30 s, startup every 5 s.
        let p = pod(serde_json::json!({
            "startupProbe": {"exec": {"command": ["startup"]}, "periodSeconds": 5, "failureThreshold": 120},
            "readinessProbe": {"exec": {"command": ["ready"]}, "periodSeconds": 30}
        }));
        e.sync(&p).await;
        e.pm.add_pod(&p);
        rt::settle().await;
        // Readiness has had its first tick (and waited); the startup probe passes at 35 s.
        e.advance(32).await;
        up.set(true);
        e.advance(3).await;
        assert_eq!(e.result(Kind::Startup), Some(ProbeResult::Success));
        assert_eq!(
            e.result(Kind::Readiness),
            Some(ProbeResult::Success),
            "readiness probed at once, not at its next tick (60 s)"
        );
    });
}

#[test]
fn a_failing_startup_probe_fails_after_its_threshold() {
    let e = env("startup-fail");
    rt::block_on(async {
        e.clock.advance(Duration::from_secs(60));
        let p = pod(serde_json::json!({
            "startupProbe": {"exec": {"command": ["false"]}, "periodSeconds": 2, "failureThreshold": 5}
        }));
        e.sync(&p).await;
        e.pm.add_pod(&p);
        rt::settle().await;
        e.advance(7).await;
        assert_eq!(
            e.result(Kind::Startup),
            Some(ProbeResult::Unknown),
            "4 failures at 0, 2, 4, 6"
        );
        e.advance(1).await;
        assert_eq!(
            e.result(Kind::Startup),
            Some(ProbeResult::Failure),
            "5th at 8 s"
        );
    });
}

/// A one-shot HTTP/1 server on loopback answering every request with `status`, recording
/// the request heads.
fn http_server(status: Rc<Cell<u16>>, seen: Rc<RefCell<Vec<String>>>) -> (u16, rt::Task<()>) {
    let l = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let port = l.local_addr().unwrap().port();
    let l = smol::Async::new(l).unwrap();
    let task = rt::spawn(async move {
        use futures_lite::{AsyncReadExt, AsyncWriteExt};
        loop {
            let Ok((mut s, _)) = l.accept().await else {
                return;
            };
            let mut buf = vec![0u8; 4096];
            let n = s.read(&mut buf).await.unwrap_or(0);
            seen.borrow_mut()
                .push(String::from_utf8_lossy(&buf[..n]).into_owned());
            let code = status.get();
            let (extra, body) = match code {
                302 => ("Location: /elsewhere\r\n", ""),
                // Off the host, with the body agnhost's redirect handler writes.
                301 => (
                    "Location: http://0.0.0.0/\r\n",
                    "<a href=\"http://0.0.0.0/\">Found</a>.",
                ),
                _ => ("", "hello"),
            };
            let resp = format!(
                "HTTP/1.1 {code} X\r\n{extra}Content-Length: {}\r\nConnection: close\r\n\r\n{body}",
                body.len()
            );
            let _ = s.write_all(resp.as_bytes()).await;
        }
    });
    (port, task)
}

#[test]
fn http_probes_send_the_kubelets_request_and_judge_the_status() {
    let e = env("http");
    rt::block_on(async {
        let status = Rc::new(Cell::new(200));
        let seen = Rc::new(RefCell::new(Vec::new()));
        let (port, _srv) = http_server(status.clone(), seen.clone());
        let c: crate::api::Container = serde_json::from_value(serde_json::json!({
            "name": "main", "image": IMAGE, "ports": [{"name": "web", "containerPort": port}]
        }))
        .unwrap();
        let probe: crate::api::Probe = serde_json::from_value(serde_json::json!({
            "httpGet": {"path": "healthz", "port": "web",
                        "httpHeaders": [{"name": "X-Custom", "value": "yes"}, {"name": "Host", "value": "example.test"}]}
        }))
        .unwrap();
        let ctx = &e.pm.ctx;
        assert_eq!(
            ctx.run(&probe, &c, "id", "127.0.0.1").await,
            Outcome::Success("hello".into())
        );
        let head = seen.borrow()[0].clone();
        assert!(head.starts_with("GET /healthz HTTP/1.1\r\n"), "{head}");
        for h in [
            "x-custom: yes",
            "host: example.test",
            "user-agent: kube-probe/1.33",
            "accept: */*",
        ] {
            assert!(head.to_lowercase().contains(h), "{h} missing in {head}");
        }
        status.set(503);
        assert_eq!(
            ctx.run(&probe, &c, "id", "127.0.0.1").await,
            Outcome::Failure("HTTP probe failed with statuscode: 503".into())
        );
        // A redirect to a path of the same host is followed (here: to a 302 again, ten times),
        // and the eleventh fails the probe.
        status.set(302);
        assert_eq!(
            ctx.run(&probe, &c, "id", "127.0.0.1").await,
            Outcome::Failure(format!(
                "Get \"http://127.0.0.1:{port}/elsewhere\": stopped after 10 redirects"
            ))
        );
        assert_eq!(seen.borrow().len(), 2 + 11);
        // A redirect to another host is not followed: a success with a warning carrying the body.
        status.set(301);
        assert_eq!(
            ctx.run(&probe, &c, "id", "127.0.0.1").await,
            Outcome::Warning(
                "Probe terminated redirects, Response body: <a href=\"http://0.0.0.0/\">Found</a>."
                    .into()
            )
        );
        assert_eq!(seen.borrow().len(), 2 + 12);
        // Nothing listens: a failure naming the address.
        drop(_srv);
        let (_held, free) = crate::probe::refusing_port();
        let closed: crate::api::Probe =
            serde_json::from_value(serde_json::json!({"httpGet": {"port": free}})).unwrap();
        match ctx.run(&closed, &c, "id", "127.0.0.1").await {
            Outcome::Failure(m) => assert_eq!(
                m,
                format!(
                    "Get \"http://127.0.0.1:{free}/\": dial tcp 127.0.0.1:{free}: connect: connection refused"
                )
            ),
            o => panic!("{o:?}"),
        }
    });
}

#[test]
fn a_redirect_to_another_host_passes_with_a_probe_warning_event() {
    let e = env("redirect");
    let recorder = Rc::new(crate::events::Recorder::new("n"));
    crate::events::install(recorder.clone());
    rt::block_on(async {
        e.clock.advance(Duration::from_secs(60));
        let (port, _srv) = http_server(Rc::new(Cell::new(301)), Rc::default());
        let p = pod(serde_json::json!({"livenessProbe": {
            "httpGet": {"host": "127.0.0.1", "port": port, "path": "/redirect"},
            "periodSeconds": 1, "failureThreshold": 1
        }}));
        e.sync(&p).await;
        e.pm.add_pod(&p);
        for _ in 0..20 {
            rt::settle().await;
            if recorder.queued().iter().any(|(r, _)| r == "ProbeWarning") {
                break;
            }
        }
        assert_eq!(e.result(Kind::Liveness), Some(ProbeResult::Success));
        let warnings: Vec<_> = recorder
            .queued()
            .into_iter()
            .filter(|(r, _)| r == "ProbeWarning")
            .collect();
        assert_eq!(
            warnings,
            [(
                "ProbeWarning".to_owned(),
                "Liveness probe warning: Probe terminated redirects, Response body: <a href=\"http://0.0.0.0/\">Found</a>."
                    .to_owned()
            )]
        );
    });
}

#[test]
fn tcp_and_grpc_probes() {
    let e = env("tcp");
    rt::block_on(async {
        let c = crate::api::Container::default();
        let l = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        let open = l.local_addr().unwrap().port();
        let tcp = |port: u16| -> crate::api::Probe {
            serde_json::from_value(serde_json::json!({"tcpSocket": {"port": port}})).unwrap()
        };
        let ctx = &e.pm.ctx;
        assert_eq!(
            ctx.run(&tcp(open), &c, "id", "127.0.0.1").await,
            Outcome::Success(String::new())
        );
        drop(l);
        assert!(
            matches!(ctx.run(&tcp(open), &c, "id", "127.0.0.1").await, Outcome::Failure(m) if m.ends_with("connection refused"))
        );
        let (port, _srv) = grpc::tests::serve(1);
        let g: crate::api::Probe =
            serde_json::from_value(serde_json::json!({"grpc": {"port": port}})).unwrap();
        assert_eq!(
            ctx.run(&g, &c, "id", "127.0.0.1").await,
            Outcome::Success(String::new())
        );
    });
}

#[test]
fn removing_a_pod_stops_its_workers_and_forgets_their_results() {
    let e = env("remove");
    rt::block_on(async {
        e.clock.advance(Duration::from_secs(60));
        let p = pod(serde_json::json!({
            "readinessProbe": {"exec": {"command": ["true"]}, "periodSeconds": 1},
            "livenessProbe": {"exec": {"command": ["true"]}, "periodSeconds": 1}
        }));
        e.sync(&p).await;
        e.pm.add_pod(&p);
        e.pm.add_pod(&p);
        assert_eq!(e.pm.workers(), 2, "adding twice starts nothing more");
        e.advance(3).await;
        assert_eq!(e.result(Kind::Readiness), Some(ProbeResult::Success));
        e.pm.remove_pod("u1");
        assert_eq!(e.pm.workers(), 0);
        assert_eq!(e.rm.probe_results().len(), 0);
        let calls = e.fake.calls("ExecSync");
        e.advance(5).await;
        assert_eq!(e.fake.calls("ExecSync"), calls, "no probe after removal");
    });
}

/// A real TLS server: `openssl s_server -www` with a throw-away self-signed certificate (from
/// the `openssl` package, which scripts/install-deps.sh installs). Stopped by PID on drop.
#[cfg(feature = "https-probes")]
struct OpensslServer(std::process::Child, std::path::PathBuf);

#[cfg(feature = "https-probes")]
impl Drop for OpensslServer {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
        let _ = std::fs::remove_dir_all(&self.1);
    }
}

#[cfg(feature = "https-probes")]
#[test]
fn https_probes_talk_tls_without_verifying_the_certificate() {
    use std::process::{Command, Stdio};
    let dir = std::env::temp_dir().join(format!("picolet-tls-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let made = Command::new("openssl")
        .args([
            "req",
            "-x509",
            "-newkey",
            "rsa:2048",
            "-nodes",
            "-days",
            "1",
            "-subj",
            "/CN=nobody",
        ])
        .arg("-keyout")
        .arg(dir.join("key.pem"))
        .arg("-out")
        .arg(dir.join("cert.pem"))
        .stderr(Stdio::null())
        .status()
        .expect("openssl is required (scripts/install-deps.sh installs it)");
    assert!(made.success());
    let port = std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port();
    let child = Command::new("openssl")
        .args(["s_server", "-www", "-quiet", "-accept"])
        .arg(port.to_string())
        .arg("-cert")
        .arg(dir.join("cert.pem"))
        .arg("-key")
        .arg(dir.join("key.pem"))
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .expect("openssl s_server");
    let _server = OpensslServer(child, dir);
    let e = env("https");
    rt::block_on(async {
        let probe: crate::api::Probe = serde_json::from_value(serde_json::json!({
            "httpGet": {"scheme": "HTTPS", "port": port, "path": "/"}
        }))
        .unwrap();
        let c = crate::api::Container::default();
        // Wait (in real time: the server is another process) until it listens.
        let mut outcome = Outcome::Error(String::new());
        for _ in 0..100 {
            outcome = e.pm.ctx.run(&probe, &c, "id", "127.0.0.1").await;
            if matches!(outcome, Outcome::Success(_)) {
                break;
            }
            async_io::Timer::after(Duration::from_millis(50)).await;
        }
        match outcome {
            // s_server -www answers with a page describing the TLS session.
            Outcome::Success(body) => assert!(body.contains("Cipher"), "{body}"),
            o => panic!("{o:?}"),
        }
        // Plain HTTP against the TLS port fails.
        let plain: crate::api::Probe = serde_json::from_value(serde_json::json!({
            "httpGet": {"port": port}
        }))
        .unwrap();
        assert!(matches!(
            e.pm.ctx.run(&plain, &c, "id", "127.0.0.1").await,
            Outcome::Failure(_)
        ));
    });
}

#[test]
fn a_worker_task_is_small_whatever_a_probe_needs() {
    // A worker lives as long as its container; a probe's state lives only while it runs.
    let e = env("size");
    let p = pod(serde_json::json!({"livenessProbe": {"httpGet": {"port": 80}}}));
    let task = worker::run(
        e.pm.ctx.clone(),
        p.clone(),
        "main".into(),
        Kind::Liveness,
        Duration::ZERO,
    );
    let spec = p.spec.containers[0].liveness_probe.as_ref().unwrap();
    let one_probe = e.pm.ctx.run(spec, &p.spec.containers[0], "id", "10.0.0.1");
    let (task, one_probe) = (size_of_val(&task), size_of_val(&one_probe));
    assert!(task <= 1024, "a probe worker task is {task} bytes");
    assert!(
        one_probe > task,
        "a probe ({one_probe} bytes) is what boxing keeps out of the task ({task} bytes)"
    );
}
