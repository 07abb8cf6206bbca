//! End-to-end tests of probes, lifecycle hooks, termination messages and sidecars: the real
//! picolet binary against a real containerd each test starts, modelled on the kubelet's node
//! conformance cases (`test/e2e/common/node`: container_probe, lifecycle_hook,
//! runtime (termination message), and the sidecar containers cases). They fail, never skip,
//! when containerd, runc or busybox are missing (`scripts/install-deps.sh` installs them).

mod support;

use support::pods::{container, manifest};
use support::{agent, containerd, host_dir};

use std::io::{Read, Write};
use std::net::TcpListener;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use agent::{Agent, test_dir};
use containerd::ScratchContainerd;
use serde_json::json;

const T: Duration = Duration::from_secs(90);

fn container_id(a: &Agent, pod: &str) -> String {
    a.status(pod)["containerStatuses"][0]["containerID"]
        .as_str()
        .unwrap_or_default()
        .to_owned()
}

#[test]
fn probes_restart_unhealthy_containers_and_drive_readiness() {
    let d = test_dir("probes");
    let c = ScratchContainerd::start(&d.join("c"));
    let a = Agent::start(&d.join("a"), &c.endpoint());
    let www = host_dir(&d.join("a"), "www");
    let shared = host_dir(&d.join("a"), "shared");
    std::fs::write(www.join("index.html"), "ok\n").unwrap();
    // 5 s for each exec (the default is 1): with a threshold of 1, one slow `runc exec` on a
    // loaded machine would restart the healthy container.
    let liveness = json!({"exec": {"command": ["cat", "/tmp/health"]},
        "initialDelaySeconds": 5, "periodSeconds": 2, "failureThreshold": 1, "timeoutSeconds": 5});
    let mut failing = container(
        "main",
        "echo ok > /tmp/health; sleep 10; rm -f /tmp/health; sleep 600",
    );
    failing["livenessProbe"] = liveness.clone();
    let mut passing = container("main", "echo ok > /tmp/health; sleep 600");
    passing["livenessProbe"] = liveness;
    let grace = json!(1);
    a.write_manifest(
        "live-fail.json",
        &manifest(
            "live-fail",
            json!({"terminationGracePeriodSeconds": grace, "containers": [failing]}),
        ),
    );
    a.write_manifest(
        "live-ok.json",
        &manifest(
            "live-ok",
            json!({"terminationGracePeriodSeconds": grace, "containers": [passing]}),
        ),
    );
    let mut web = container("main", "exec httpd -f -p 8080 -h /www");
    web["volumeMounts"] = json!([{"name": "www", "mountPath": "/www"}]);
    web["readinessProbe"] = json!({"httpGet": {"path": "/index.html", "port": 8080}, "periodSeconds": 1, "failureThreshold": 1});
    a.write_manifest(
        "ready-http.json",
        &manifest(
            "ready-http",
            json!({"terminationGracePeriodSeconds": grace, "containers": [web],
            "volumes": [{"name": "www", "hostPath": {"path": www.display().to_string()}}]}),
        ),
    );
    let mut delayed = container("main", "exec sleep 600");
    delayed["readinessProbe"] =
        json!({"exec": {"command": ["true"]}, "initialDelaySeconds": 15, "periodSeconds": 1});
    a.write_manifest(
        "ready-delay.json",
        &manifest(
            "ready-delay",
            json!({"terminationGracePeriodSeconds": grace, "containers": [delayed]}),
        ),
    );
    let mut startup = container("main", "exec sleep 600");
    startup["startupProbe"] = json!({"exec": {"command": ["cat", "/tmp/never"]}, "periodSeconds": 1, "failureThreshold": 4});
    startup["livenessProbe"] = json!({"exec": {"command": ["sh", "-c", "echo ran >> /shared/liveness"]}, "periodSeconds": 1});
    startup["volumeMounts"] = json!([{"name": "shared", "mountPath": "/shared"}]);
    a.write_manifest(
        "startup.json",
        &manifest(
            "startup",
            json!({"terminationGracePeriodSeconds": grace, "containers": [startup],
            "volumes": [{"name": "shared", "hostPath": {"path": shared.display().to_string()}}]}),
        ),
    );
    let tcp = |port: u16| {
        let mut x = container("main", "mkdir -p /w; exec httpd -f -p 9000 -h /w");
        x["livenessProbe"] =
            json!({"tcpSocket": {"port": port}, "periodSeconds": 1, "failureThreshold": 2});
        x
    };
    a.write_manifest(
        "tcp-ok.json",
        &manifest(
            "tcp-ok",
            json!({"terminationGracePeriodSeconds": grace, "containers": [tcp(9000)]}),
        ),
    );
    a.write_manifest(
        "tcp-dead.json",
        &manifest(
            "tcp-dead",
            json!({"terminationGracePeriodSeconds": grace, "containers": [tcp(9001)]}),
        ),
    );

    // The readiness probe with a 15 s initial delay: not ready before it, ready after.
    a.wait_for("ready-delay running", T, |a| {
        a.status("ready-delay")["containerStatuses"][0]["state"]["running"].is_object()
    });
    a.wait_for("ready-delay ready", T, |a| {
        a.condition("ready-delay", "Ready") == "True"
    });
    // By the times in its status (whole seconds), not when this test happened to look.
    let st = a.status("ready-delay");
    let time = |v: &serde_json::Value| {
        picolet::logs::format::parse_time(v.as_str().unwrap_or_default().as_bytes())
            .unwrap_or_else(|| panic!("not a time: {v} in {st}"))
    };
    let started = time(&st["containerStatuses"][0]["state"]["running"]["startedAt"]);
    let ready = st["conditions"]
        .as_array()
        .into_iter()
        .flatten()
        .find(|c| c["type"] == "Ready")
        .map(|c| time(&c["lastTransitionTime"]))
        .unwrap();
    let waited = (ready - started) / 1_000_000_000;
    assert!(
        waited >= 14,
        "ready {waited} s after it started, want ~15 s: {st}"
    );

    // httpGet readiness against busybox httpd flips Ready both ways, never restarting it.
    a.wait_for("ready-http ready", T, |a| {
        a.condition("ready-http", "Ready") == "True"
    });
    let first = container_id(&a, "ready-http");
    std::fs::remove_file(www.join("index.html")).unwrap();
    a.wait_for("ready-http unready", T, |a| {
        a.condition("ready-http", "Ready") == "False"
            && a.status("ready-http")["containerStatuses"][0]["ready"] == false
    });
    std::fs::write(www.join("index.html"), "ok\n").unwrap();
    a.wait_for("ready-http ready again", T, |a| {
        a.condition("ready-http", "Ready") == "True"
    });
    assert_eq!(container_id(&a, "ready-http"), first, "never restarted");
    assert_eq!(a.restarts("ready-http"), 0);

    // The liveness probe that starts failing: restarts, the count growing monotonically.
    let mut seen = vec![];
    let t0 = Instant::now();
    while a.restarts("live-fail") < 2 {
        assert!(
            t0.elapsed() < T,
            "live-fail restarts {seen:?}\n{}",
            a.log_text()
        );
        // -1: no answer this time (a busy local API), not a count.
        seen.extend(Some(a.restarts("live-fail")).filter(|n| *n >= 0));
        std::thread::sleep(Duration::from_millis(500));
    }
    seen.extend(Some(a.restarts("live-fail")).filter(|n| *n >= 0));
    assert!(seen.windows(2).all(|w| w[0] <= w[1]), "{seen:?}");
    let last = &a.status("live-fail")["containerStatuses"][0]["lastState"]["terminated"];
    assert_eq!(last["exitCode"], 137, "{last}");
    assert!(
        a.log_text()
            .contains("Container main failed liveness probe, will be restarted")
    );
    assert!(a.log_text().contains("Liveness probe failed"));

    // The passing liveness probe: never restarted in all this time.
    assert_eq!(a.restarts("live-ok"), 0);
    assert_eq!(a.status("live-ok")["containerStatuses"][0]["ready"], true);

    // A failing startup probe holds liveness off, then restarts the container.
    a.wait_for("startup restarted", T, |a| a.restarts("startup") >= 1);
    assert_eq!(
        a.status("startup")["containerStatuses"][0]["started"],
        false
    );
    assert!(
        !shared.join("liveness").exists(),
        "liveness ran before startup passed"
    );
    assert!(
        a.log_text()
            .contains("Container main failed startup probe, will be restarted")
    );

    // tcpSocket liveness: the open port keeps its container, the closed one restarts.
    a.wait_for("tcp-dead restarted", T, |a| a.restarts("tcp-dead") >= 1);
    assert_eq!(a.restarts("tcp-ok"), 0);
    assert_eq!(a.condition("tcp-ok", "Ready"), "True");
}

/// A tiny HTTP server on the host recording the paths it is asked for.
fn recorder() -> (u16, Arc<Mutex<Vec<String>>>) {
    let l = TcpListener::bind("127.0.0.1:0").unwrap();
    let port = l.local_addr().unwrap().port();
    let seen = Arc::new(Mutex::new(Vec::new()));
    let s = seen.clone();
    std::thread::spawn(move || {
        for conn in l.incoming() {
            let Ok(mut conn) = conn else { continue };
            let mut buf = [0u8; 2048];
            let n = conn.read(&mut buf).unwrap_or(0);
            let head = String::from_utf8_lossy(&buf[..n]).into_owned();
            if let Some(path) = head.split_whitespace().nth(1) {
                s.lock().unwrap().push(path.to_owned());
            }
            let _ = conn
                .write_all(b"HTTP/1.1 200 OK\r\nContent-Length: 0\r\nConnection: close\r\n\r\n");
        }
    });
    (port, seen)
}

#[test]
fn hooks_run_and_termination_messages_show() {
    let d = test_dir("hooks");
    let c = ScratchContainerd::start(&d.join("c"));
    let a = Agent::start(&d.join("a"), &c.endpoint());
    let shared = host_dir(&d.join("a"), "shared");
    let (port, paths) = recorder();
    let vol = json!([{"name": "shared", "hostPath": {"path": shared.display().to_string()}}]);
    let mount = json!([{"name": "shared", "mountPath": "/shared"}]);

    let mut exec_hooks = container("main", "echo main >> /shared/exec; exec sleep 600");
    exec_hooks["volumeMounts"] = mount.clone();
    exec_hooks["lifecycle"] = json!({
        "postStart": {"exec": {"command": ["sh", "-c", "echo poststart >> /shared/exec"]}},
        "preStop": {"exec": {"command": ["sh", "-c", "echo prestop >> /shared/exec"]}}
    });
    a.write_manifest(
        "exec-hooks.json",
        &manifest(
            "exec-hooks",
            json!({"terminationGracePeriodSeconds": 5, "containers": [exec_hooks], "volumes": vol}),
        ),
    );
    let mut http_hooks = container("main", "exec sleep 600");
    http_hooks["lifecycle"] = json!({
        "postStart": {"httpGet": {"host": "127.0.0.1", "port": port, "path": "/poststart"}},
        "preStop": {"httpGet": {"host": "127.0.0.1", "port": port, "path": "/prestop"}}
    });
    a.write_manifest(
        "http-hooks.json",
        &manifest(
            "http-hooks",
            json!({"terminationGracePeriodSeconds": 5, "containers": [http_hooks]}),
        ),
    );
    // Termination messages: from the file (as a non-root user: the file is 0666), and from
    // the log with FallbackToLogsOnError.
    let mut file_msg = container(
        "main",
        "printf 'goodbye from the file' > /dev/termination-log; exit 3",
    );
    file_msg["securityContext"] = json!({"runAsUser": 1000});
    a.write_manifest(
        "msg-file.json",
        &manifest(
            "msg-file",
            json!({"restartPolicy": "Never", "containers": [file_msg]}),
        ),
    );
    let mut log_msg = container("main", "echo first line; echo last words; exit 2");
    log_msg["terminationMessagePolicy"] = json!("FallbackToLogsOnError");
    a.write_manifest(
        "msg-log.json",
        &manifest(
            "msg-log",
            json!({"restartPolicy": "Never", "containers": [log_msg]}),
        ),
    );
    let mut failing_post = container("main", "exec sleep 600");
    failing_post["lifecycle"] = json!({"postStart": {"exec": {"command": ["sh", "-c", "exit 7"]}}});
    a.write_manifest(
        "post-fail.json",
        &manifest(
            "post-fail",
            json!({"terminationGracePeriodSeconds": 1, "containers": [failing_post]}),
        ),
    );

    let terminated =
        |a: &Agent, pod: &str| a.status(pod)["containerStatuses"][0]["state"]["terminated"].clone();
    a.wait_for("the file's message", T, |a| {
        terminated(a, "msg-file")["message"].is_string()
    });
    assert_eq!(
        terminated(&a, "msg-file")["message"],
        "goodbye from the file"
    );
    assert_eq!(terminated(&a, "msg-file")["exitCode"], 3);
    a.wait_for("the log's message", T, |a| {
        terminated(a, "msg-log")["message"].is_string()
    });
    assert_eq!(
        terminated(&a, "msg-log")["message"],
        "first line\nlast words\n"
    );

    a.wait_for("postStart hooks", T, |_| {
        std::fs::read_to_string(shared.join("exec"))
            .unwrap_or_default()
            .contains("poststart")
            && paths.lock().unwrap().contains(&"/poststart".to_owned())
    });
    a.wait_for("a failed postStart kills the container", T, |a| {
        let s = &a.status("post-fail")["containerStatuses"][0];
        s["restartCount"].as_i64().unwrap_or(0) >= 1
            || s["state"]["waiting"]["reason"] == "PostStartHookError"
    });
    assert!(a.log_text().contains("FailedPostStartHook"));

    // preStop hooks run when the pods are removed, before their containers stop.
    a.remove_manifest("exec-hooks.json");
    a.remove_manifest("http-hooks.json");
    a.wait_for("preStop hooks", T, |_| {
        std::fs::read_to_string(shared.join("exec"))
            .unwrap_or_default()
            .contains("prestop")
            && paths.lock().unwrap().contains(&"/prestop".to_owned())
    });
    let lines = std::fs::read_to_string(shared.join("exec")).unwrap();
    assert_eq!(lines.lines().last(), Some("prestop"), "{lines}");
    assert_eq!(*paths.lock().unwrap(), ["/poststart", "/prestop"]);
}

#[test]
fn sidecars_start_before_and_stop_after_the_app_sharing_its_processes() {
    let d = test_dir("sidecar");
    let c = ScratchContainerd::start(&d.join("c"));
    let a = Agent::start(&d.join("a"), &c.endpoint());
    let shared = host_dir(&d.join("a"), "shared");
    let vol = json!([{"name": "shared", "hostPath": {"path": shared.display().to_string()}}]);
    let mount = json!([{"name": "shared", "mountPath": "/shared"}]);
    let mut side = container("side", "echo side up >> /shared/log; exec sleep 7777");
    side["restartPolicy"] = json!("Always");
    side["volumeMounts"] = mount.clone();
    side["lifecycle"] =
        json!({"preStop": {"exec": {"command": ["sh", "-c", "echo side stop >> /shared/log"]}}});
    side["startupProbe"] =
        json!({"exec": {"command": ["true"]}, "periodSeconds": 1, "timeoutSeconds": 5});
    let mut app = container(
        "app",
        "echo app up >> /shared/log; sleep 2; ps > /shared/ps; trap 'exit 0' TERM; sleep 3600 & wait",
    );
    app["volumeMounts"] = mount;
    app["lifecycle"] =
        json!({"preStop": {"exec": {"command": ["sh", "-c", "echo app stop >> /shared/log"]}}});
    a.write_manifest(
        "side.json",
        &manifest(
            "side",
            // Room for both preStop hooks and the app's exit on a slow (emulated) machine: the
            // sidecar's hook runs only if some of the grace period is left after the app
            // stopped, as upstream's. The app exits at SIGTERM, so a fast machine waits no longer.
            json!({"terminationGracePeriodSeconds": 30, "shareProcessNamespace": true,
            "initContainers": [side], "containers": [app], "volumes": vol}),
        ),
    );
    a.wait_for("the app running", T, |a| {
        a.status("side")["phase"] == "Running"
            && a.status("side")["containerStatuses"][0]["state"]["running"].is_object()
    });
    let s = a.status("side");
    assert_eq!(s["initContainerStatuses"][0]["started"], true, "{s}");
    assert!(
        s["initContainerStatuses"][0]["state"]["running"].is_object(),
        "{s}"
    );
    assert_eq!(a.condition("side", "Initialized"), "True");
    a.wait_for("the app saw the sidecar's process", T, |_| {
        std::fs::read_to_string(shared.join("ps"))
            .unwrap_or_default()
            .contains("sleep 7777")
    });
    a.remove_manifest("side.json");
    a.wait_for("the sidecar's preStop hook", T, |_| {
        std::fs::read_to_string(shared.join("log"))
            .unwrap_or_default()
            .contains("side stop")
    });
    let log = std::fs::read_to_string(shared.join("log")).unwrap();
    let lines: Vec<&str> = log.lines().collect();
    assert_eq!(
        lines,
        ["side up", "app up", "app stop", "side stop"],
        "{log}"
    );
}
