//! End-to-end test of container logs: the real picolet binary against a real containerd the
//! test starts. A container writing more than a small `containerLogMaxSize` (set in the
//! KubeletConfiguration the test writes) has its log rotated (rotated files exist, bounded by
//! `containerLogMaxFiles`, older ones gzipped), and its log reads back through
//! `/containerLogs` and `picolet logs` with each option. `picolet exec` runs commands in a
//! container through the runtime: output, exit codes, stdin, and a shell under a terminal.
//! Fails, never skips, when containerd, runc or busybox are missing (`scripts/install-deps.sh`
//! installs them).

mod support;

use support::{IMAGE, agent, containerd};

use std::io::{BufRead, BufReader, Read, Write};
use std::net::TcpStream;
use std::path::{Path, PathBuf};
use std::process::Stdio;
use std::time::{Duration, Instant};

use agent::{Agent, picolet_command, test_dir};
use containerd::ScratchContainerd;
use serde_json::json;

const T: Duration = Duration::from_secs(60);

/// GET on the local API: the status code and the body.
fn get_with_code(a: &Agent, path: &str) -> (u16, String) {
    let mut s = TcpStream::connect(("127.0.0.1", a.port)).unwrap();
    s.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
    write!(s, "GET {path} HTTP/1.0\r\nHost: localhost\r\n\r\n").unwrap();
    let mut out = Vec::new();
    s.read_to_end(&mut out).unwrap();
    let out = String::from_utf8_lossy(&out).into_owned();
    let (head, body) = out.split_once("\r\n\r\n").unwrap_or((&out, ""));
    let code = head
        .split_whitespace()
        .nth(1)
        .and_then(|c| c.parse().ok())
        .unwrap_or(0);
    (code, body.to_owned())
}

/// `picolet logs ...` against this agent: exit success, stdout, stderr.
fn cli(a: &Agent, args: &[&str]) -> (bool, String, String) {
    let out = picolet_command()
        .arg("logs")
        .args(args)
        .arg(format!("--healthz-port={}", a.port))
        .output()
        .unwrap();
    (
        out.status.success(),
        String::from_utf8_lossy(&out.stdout).into_owned(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

/// The numbers of `line N` lines, in order.
fn numbers(text: &str) -> Vec<u64> {
    text.lines()
        .filter_map(|l| l.rsplit("line ").next()?.parse().ok())
        .collect()
}

fn consecutive(v: &[u64]) -> bool {
    v.windows(2).all(|w| w[1] == w[0] + 1)
}

/// The directory holding a container's log files.
fn log_dir(a: &Agent, pod: &str, container: &str) -> Option<PathBuf> {
    let prefix = format!("default_{pod}-e2e-node_");
    std::fs::read_dir(a.dir.join("logs"))
        .ok()?
        .filter_map(Result::ok)
        .find(|e| e.file_name().to_string_lossy().starts_with(&prefix))
        .map(|e| e.path().join(container))
}

fn files(dir: &Path) -> Vec<String> {
    let mut v: Vec<String> = std::fs::read_dir(dir)
        .map(|r| {
            r.filter_map(Result::ok)
                .map(|e| e.file_name().to_string_lossy().into_owned())
                .collect()
        })
        .unwrap_or_default();
    v.sort();
    v
}

#[test]
fn container_logs_rotate_and_read_back_through_the_api_and_the_cli() {
    let d = test_dir("logs");
    let c = ScratchContainerd::start(&d.join("c"));
    let a = Agent::start_configured(
        &d.join("a"),
        &c.endpoint(),
        &[],
        "containerLogMaxSize: 1Ki\ncontainerLogMaxFiles: 3\n",
    );
    let counter = d.join("a").join("counter");
    std::fs::create_dir_all(&counter).unwrap();
    // About 20 lines (0.9 KiB) a second: past 1 KiB at every 10 s check.
    let chatty = json!({"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "chatty"},
        "spec": {"terminationGracePeriodSeconds": 1, "containers": [{"name": "main", "image": IMAGE,
        "command": ["sh", "-c", "i=0; while true; do i=$((i+1)); echo \"line $i\"; sleep 0.05; done"]}]}});
    // Exits after writing one line; started again after the back-off (10 s).
    let restarter = json!({"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "restarter"},
        "spec": {"terminationGracePeriodSeconds": 1, "containers": [{"name": "main", "image": IMAGE,
        "command": ["sh", "-c", "n=$(cat /d/n 2>/dev/null || echo 0); n=$((n+1)); echo $n > /d/n; echo \"run $n\"; sleep 2; exit 1"],
        "volumeMounts": [{"name": "d", "mountPath": "/d"}]}],
        "volumes": [{"name": "d", "hostPath": {"path": counter.display().to_string()}}]}});
    a.write_manifest("chatty.json", &chatty.to_string());
    let base = "/containerLogs/default/chatty-e2e-node/main";
    a.wait_for("chatty's first lines", T, |a| {
        !numbers(&get_with_code(a, base).1).is_empty()
    });

    // Rotation: watch the files for 35 s (3 checks at least).
    let dir = log_dir(&a, "chatty", "main").expect("chatty's log directory");
    let t0 = Instant::now();
    let (mut most, mut saw_gz, mut saw_plain_rotated) = (0, false, false);
    while t0.elapsed() < Duration::from_secs(35) {
        let f: Vec<String> = files(&dir)
            .into_iter()
            .filter(|n| !n.ends_with(".tmp"))
            .collect();
        most = most.max(f.len());
        saw_gz |= f
            .iter()
            .any(|n| n.starts_with("0.log.") && n.ends_with(".gz"));
        saw_plain_rotated |= f
            .iter()
            .any(|n| n.starts_with("0.log.") && !n.ends_with(".gz"));
        std::thread::sleep(Duration::from_millis(200));
    }
    // A listing taken between a rotation's rename and the runtime reopening the log has no
    // live file for a moment.
    let t = Instant::now();
    while !dir.join("0.log").exists() && t.elapsed() < Duration::from_secs(5) {
        std::thread::sleep(Duration::from_millis(50));
    }
    let now = files(&dir);
    assert!(
        saw_plain_rotated,
        "no rotated file seen: {now:?}\n{}",
        a.log_text()
    );
    assert!(
        saw_gz,
        "no gzipped rotated file seen: {now:?}\n{}",
        a.log_text()
    );
    assert!(
        most <= 3,
        "more than containerLogMaxFiles (3) files: {most}, now {now:?}"
    );
    assert!(now.contains(&"0.log".to_owned()), "{now:?}");
    for n in now.iter().filter(|n| n.ends_with(".gz")) {
        let text = String::from_utf8(picolet::logs::read::gunzip(&dir.join(n)).unwrap()).unwrap();
        assert!(
            text.lines()
                .all(|l| picolet::logs::format::parse_record(l.as_bytes()).is_ok()),
            "{n} is not a gzipped CRI log"
        );
    }
    // The suffix is upstream's: 0.log.YYYYMMDD-hhmmss.
    let rotated = now.iter().find(|n| n.starts_with("0.log.")).unwrap();
    let stamp = rotated.trim_start_matches("0.log.").trim_end_matches(".gz");
    assert!(
        stamp.len() == 15 && stamp.as_bytes()[8] == b'-',
        "{rotated}"
    );

    // Started now, so its first restart (after 10 s) and its second (20 s later) bracket the
    // checks of `previous` below.
    a.write_manifest("restarter.json", &restarter.to_string());

    // The whole log reads across the gzipped file, the rotated one and the live one, in order.
    let (code, all) = get_with_code(&a, base);
    assert_eq!(code, 200);
    let all_n = numbers(&all);
    let live_lines = std::fs::read_to_string(dir.join("0.log"))
        .unwrap()
        .lines()
        .count();
    assert!(consecutive(&all_n), "gaps or repeats: {all_n:?}");
    assert!(
        all_n.len() > live_lines,
        "only {} lines, the live log alone has {live_lines}",
        all_n.len()
    );

    // tailLines, timestamps, limitBytes, sinceSeconds.
    let tail = numbers(&get_with_code(&a, &format!("{base}?tailLines=5")).1);
    assert_eq!(tail.len(), 5);
    assert!(
        consecutive(&tail) && tail[0] > all_n[all_n.len() - 1] - 5,
        "{tail:?}"
    );
    let (_, ts) = get_with_code(&a, &format!("{base}?tailLines=3&timestamps=true"));
    for l in ts.lines() {
        let (stamp, rest) = l.split_once(' ').unwrap();
        assert_eq!(stamp.len(), 30, "{l}");
        assert!(
            picolet::logs::format::parse_time(stamp.as_bytes()).is_some(),
            "{l}"
        );
        assert!(rest.starts_with("line "), "{l}");
    }
    assert_eq!(ts.lines().count(), 3);
    let (_, lim) = get_with_code(&a, &format!("{base}?limitBytes=20"));
    assert_eq!(lim.len(), 20, "{lim:?}");
    assert!(lim.starts_with("line "));
    let since = numbers(&get_with_code(&a, &format!("{base}?sinceSeconds=2")).1);
    assert!(
        !since.is_empty() && since.len() < 80 && since.len() < all_n.len(),
        "{} lines in the last 2 s",
        since.len()
    );

    // Errors as the kubelet's.
    let (code, body) = get_with_code(&a, "/containerLogs/default/nope/main");
    assert_eq!((code, body.trim()), (404, "pod \"nope\" does not exist"));
    let (code, body) = get_with_code(&a, "/containerLogs/default/chatty-e2e-node/db");
    assert_eq!(
        (code, body.trim()),
        (404, "container \"db\" not found in pod \"chatty-e2e-node\"")
    );
    assert_eq!(get_with_code(&a, &format!("{base}?tailLines=abc")).0, 400);
    assert_eq!(get_with_code(&a, &format!("{base}?tailLines=-1")).0, 422);
    let (code, body) = get_with_code(&a, &format!("{base}?previous=true"));
    assert_eq!(code, 400);
    assert!(
        body.contains("previous terminated container \"main\""),
        "{body}"
    );

    // follow: a line written after the request arrives on the open stream.
    let mut s = TcpStream::connect(("127.0.0.1", a.port)).unwrap();
    s.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
    write!(
        s,
        "GET {base}?follow=true&tailLines=1 HTTP/1.0\r\nHost: localhost\r\n\r\n"
    )
    .unwrap();
    let mut r = BufReader::new(s);
    let mut line = String::new();
    while r.read_line(&mut line).unwrap() > 0 && line != "\r\n" {
        line.clear();
    }
    let mut seen = Vec::new();
    while seen.len() < 30 {
        line.clear();
        assert!(
            r.read_line(&mut line).unwrap() > 0,
            "the follow stream ended"
        );
        seen.extend(numbers(&line));
    }
    assert!(consecutive(&seen), "{seen:?}");
    assert!(seen[29] > all_n[all_n.len() - 1], "{seen:?}");
    drop(r);

    // previous, after a restart.
    a.wait_for("restarter to restart", Duration::from_secs(60), |a| {
        a.pod("restarter").is_some_and(|p| {
            p["status"]["containerStatuses"][0]["restartCount"].as_i64() >= Some(1)
        })
    });
    let rbase = "/containerLogs/default/restarter-e2e-node/main";
    let (code, prev) = get_with_code(&a, &format!("{rbase}?previous=true"));
    assert_eq!((code, prev.as_str()), (200, "run 1\n"));
    a.wait_for("the second run's line", T, |a| {
        get_with_code(a, rbase).1 == "run 2\n"
    });

    // The same through `picolet logs`.
    let (ok, out, err) = cli(&a, &["chatty-e2e-node", "main", "--tail", "4"]);
    assert!(ok, "{err}");
    let n = numbers(&out);
    assert!(n.len() == 4 && consecutive(&n), "{out}");
    // No container named: the pod's only one.
    let (ok, out, err) = cli(&a, &["chatty-e2e-node", "--tail=2", "--timestamps"]);
    assert!(ok, "{err}");
    assert_eq!(out.lines().count(), 2);
    assert!(
        out.lines()
            .all(|l| l.len() > 31 && l[30..].starts_with(" line ")),
        "{out}"
    );
    let (ok, out, err) = cli(&a, &["chatty-e2e-node", "main", "--limit-bytes", "12"]);
    assert!(ok, "{err}");
    assert_eq!(out.len(), 12, "{out:?}");
    let (ok, out, err) = cli(&a, &["chatty-e2e-node", "main", "--since=2s"]);
    assert!(ok, "{err}");
    let n = numbers(&out);
    assert!(!n.is_empty() && n.len() < 80 && consecutive(&n), "{out}");
    let (ok, out, err) = cli(&a, &["restarter-e2e-node", "main", "-p"]);
    assert!(ok, "{err}");
    assert_eq!(out, get_with_code(&a, &format!("{rbase}?previous=true")).1);
    assert!(out.starts_with("run "), "{out}");
    let (ok, _, err) = cli(&a, &["nope", "main"]);
    assert!(!ok);
    assert!(err.contains("pod \"nope\" does not exist"), "{err}");
    let (ok, _, err) = cli(&a, &["restarter-e2e-node", "-n", "kube-system"]);
    assert!(!ok);
    assert!(err.contains("not found"), "{err}");
    // -f: lines keep coming until the reader stops it.
    let mut child = picolet_command()
        .args(["logs", "chatty-e2e-node", "main", "-f", "--tail=1"])
        .arg(format!("--healthz-port={}", a.port))
        .stdout(Stdio::piped())
        .spawn()
        .unwrap();
    let mut out = BufReader::new(child.stdout.take().unwrap());
    let mut seen = Vec::new();
    let t0 = Instant::now();
    while seen.len() < 20 && t0.elapsed() < Duration::from_secs(20) {
        let mut l = String::new();
        if out.read_line(&mut l).unwrap() == 0 {
            break;
        }
        seen.extend(numbers(&l));
    }
    let _ = child.kill();
    let _ = child.wait();
    assert!(seen.len() >= 20 && consecutive(&seen), "{seen:?}");
    // A picolet that is not running is said plainly.
    drop(a);
    let out = picolet_command()
        .args(["logs", "chatty-e2e-node", "main", "--healthz-port=1"])
        .output()
        .unwrap();
    assert!(!out.status.success());
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("is picolet running"), "{err}");
}

/// `picolet exec ...` against this containerd, with `stdin` piped in: exit code, stdout, stderr.
fn exec(
    c: &ScratchContainerd,
    args: &[&str],
    stdin: Option<&str>,
) -> (Option<i32>, String, String) {
    let mut child = picolet_command()
        .arg("exec")
        .arg(format!("--container-runtime-endpoint={}", c.endpoint()))
        .args(args)
        .stdin(if stdin.is_some() {
            Stdio::piped()
        } else {
            Stdio::null()
        })
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    if let Some(input) = stdin {
        let mut pipe = child.stdin.take().unwrap();
        pipe.write_all(input.as_bytes()).unwrap();
    }
    let out = child.wait_with_output().unwrap();
    (
        out.status.code(),
        String::from_utf8_lossy(&out.stdout).into_owned(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

#[test]
fn picolet_exec_runs_commands_in_containers_through_the_runtime() {
    let d = test_dir("exec");
    let c = ScratchContainerd::start(&d.join("c"));
    let a = Agent::start(&d.join("a"), &c.endpoint());
    let pod = json!({"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "two"},
        "spec": {"terminationGracePeriodSeconds": 1, "containers": [
            {"name": "a", "image": IMAGE, "command": ["sleep", "3600"]},
            {"name": "b", "image": IMAGE, "command": ["sh", "-c", "echo b-was-here > /tmp/mark; exec sleep 3600"]}]}});
    a.write_manifest("two.json", &pod.to_string());
    a.wait_for("both containers running", T, |a| {
        a.pod("two").is_some_and(|p| {
            p["status"]["containerStatuses"]
                .as_array()
                .is_some_and(|cs| {
                    cs.len() == 2 && cs.iter().all(|c| c["state"]["running"].is_object())
                })
        })
    });
    let pod = "two-e2e-node";

    // Output on both streams and the exit code; the container chosen by name.
    let (code, out, err) = exec(
        &c,
        &[
            pod,
            "-c",
            "b",
            "--",
            "sh",
            "-c",
            "cat /tmp/mark; echo oops >&2; exit 3",
        ],
        None,
    );
    assert_eq!((code, out.as_str()), (Some(3), "b-was-here\n"), "{err}");
    assert!(err.contains("oops"), "{err}");
    let (code, out, _) = exec(&c, &[pod, "-c", "a", "--", "true"], None);
    assert_eq!((code, out.as_str()), (Some(0), ""));
    // Two containers and no -c: refused, naming both.
    let (code, _, err) = exec(&c, &[pod, "--", "true"], None);
    assert_eq!(code, Some(1));
    assert!(
        err.contains("runs 2 containers (a, b): choose one with -c"),
        "{err}"
    );
    // A pod or container that is not there, and a command that does not exist.
    let (code, _, err) = exec(&c, &["nope", "--", "true"], None);
    assert_eq!(code, Some(1));
    assert!(
        err.contains("pod default/nope is not running here"),
        "{err}"
    );
    let (_, _, err) = exec(&c, &[pod, "-c", "zz", "--", "true"], None);
    assert!(err.contains("container \"zz\" is not running"), "{err}");
    let (code, _, err) = exec(&c, &[pod, "-c", "a", "--", "/no/such/binary"], None);
    assert_ne!(code, Some(0), "{err}");

    // Piped input without a terminal (a line: the runtime here speaks v4.channel.k8s.io, which
    // cannot pass the end of input on).
    let (code, out, err) = exec(
        &c,
        &[
            pod,
            "-c",
            "a",
            "-i",
            "--",
            "sh",
            "-c",
            "read x; echo got-$x",
        ],
        Some("hello\n"),
    );
    assert_eq!((code, out.as_str()), (Some(0), "got-hello\n"), "{err}");

    // Input through a shell under a terminal (util-linux's script gives picolet one): the
    // shell sees a terminal, reads the lines typed, and its exit code comes back.
    let mut script = std::process::Command::new("script")
        .args(["-qec"])
        .arg(format!(
            "{} exec --container-runtime-endpoint={} {pod} -c a -it -- sh",
            env!("CARGO_BIN_EXE_picolet"),
            c.endpoint()
        ))
        .arg("/dev/null")
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("run script (util-linux)");
    let mut typed = script.stdin.take().unwrap();
    let writer = std::thread::spawn(move || {
        std::thread::sleep(Duration::from_secs(2));
        let _ = typed.write_all(b"tty; echo inside-$((2+3))\n");
        std::thread::sleep(Duration::from_secs(1));
        let _ = typed.write_all(b"exit 5\n");
        std::thread::sleep(Duration::from_secs(1));
    });
    let out = script.wait_with_output().unwrap();
    writer.join().unwrap();
    let shown = String::from_utf8_lossy(&out.stdout);
    assert!(shown.contains("/dev/pts/"), "{shown:?}");
    assert!(shown.contains("inside-5"), "{shown:?}");
    assert_eq!(out.status.code(), Some(5), "{shown:?}");
    drop(a);
}
