//! End-to-end tests: the real picolet binary against a real containerd that each test starts on
//! a scratch directory, with images built offline. Ground truth comes from `ctr`, independent of
//! picolet. These tests fail (never skip) when containerd, runc or busybox are missing: run
//! `scripts/install-deps.sh` first (scripts/test.sh does).

mod support;

use support::{IMAGE, NODE, Pod, agent, containerd, full, pods, prom};

use std::collections::BTreeSet;
use std::time::{Duration, Instant};

use agent::{Agent, test_dir};
use containerd::ScratchContainerd;

const T: Duration = Duration::from_secs(60);

#[test]
fn manifest_create_edit_break_delete() {
    let d = test_dir("life");
    let c = ScratchContainerd::start(&d.join("c"));
    let a = Agent::start(&d.join("a"), &c.endpoint());

    a.write_manifest(
        "web.yaml",
        &Pod::new("web")
            .restart_policy("Always")
            .sh("echo v1; exec sleep 3600")
            .yaml(),
    );
    a.wait_for("web running", T, |a| {
        a.phase("web") == "Running" && c.running_containers(&full("web")).len() == 1
    });
    let v1 = c.running_containers(&full("web"));
    let uid1 = a.pod("web").unwrap()["metadata"]["uid"]
        .as_str()
        .unwrap()
        .to_owned();
    assert_eq!(c.pod_containers(&full("web"), "sandbox").len(), 1);

    // Editing the command replaces the container (and, the UID being content-derived, the pod).
    a.write_manifest(
        "web.yaml",
        &Pod::new("web")
            .restart_policy("Always")
            .sh("echo v2; exec sleep 3600")
            .yaml(),
    );
    a.wait_for("the edited container to replace the old one", T, |a| {
        let now = c.running_containers(&full("web"));
        now.len() == 1 && now.is_disjoint(&v1) && a.phase("web") == "Running"
    });
    a.wait_for("the old container and sandbox to be removed", T, |_| {
        c.pod_containers(&full("web"), "container").is_disjoint(&v1)
            && c.pod_containers(&full("web"), "sandbox").len() == 1
    });
    let v2 = c.running_containers(&full("web"));
    let uid2 = a.pod("web").unwrap()["metadata"]["uid"]
        .as_str()
        .unwrap()
        .to_owned();
    assert_ne!(uid1, uid2);

    // An invalid manifest written over the good one: the pod keeps running, the error is reported.
    a.write_manifest("web.yaml", "apiVersion: v1\nkind: Pod\nmetadata:\n  name: web\nspec:\n  containers:\n  - name: main\n    image: picolet.local/busybox:1\n    ports:\n    - containerPort: 70000\n");
    a.wait_for("the manifest error to be reported", T, |a| {
        a.manifests_report()
            .as_array()
            .into_iter()
            .flatten()
            .any(|m| {
                m["error"].as_str().is_some_and(|e| {
                    e.contains("web.yaml") && e.contains("containerPort") && e.contains("70000")
                })
            })
    });
    std::thread::sleep(Duration::from_secs(3));
    assert_eq!(
        c.running_containers(&full("web")),
        v2,
        "the last valid pod keeps running untouched"
    );
    assert_eq!(a.pod("web").unwrap()["metadata"]["uid"], uid2.as_str());
    assert!(a.log_text().contains("keeping the last valid version"));

    // Deleting the manifest removes the pod, its containers and its sandbox.
    a.remove_manifest("web.yaml");
    a.wait_for("the pod to be gone from the runtime", T, |a| {
        c.pod_containers(&full("web"), "container").is_empty()
            && c.pod_containers(&full("web"), "sandbox").is_empty()
            && a.pod("web").is_none()
    });
}

#[test]
fn restart_policies_and_crash_backoff() {
    let d = test_dir("restart");
    let c = ScratchContainerd::start(&d.join("c"));
    let a = Agent::start(&d.join("a"), &c.endpoint());
    a.write_manifest(
        "crash.yaml",
        &Pod::new("crash")
            .restart_policy("Always")
            .sh("exit 1")
            .yaml(),
    );
    a.write_manifest(
        "never.yaml",
        &Pod::new("never")
            .restart_policy("Never")
            .sh("exit 3")
            .yaml(),
    );
    a.write_manifest(
        "done.yaml",
        &Pod::new("done")
            .restart_policy("OnFailure")
            .sh("exit 0")
            .yaml(),
    );
    a.write_manifest(
        "retry.yaml",
        &Pod::new("retry")
            .restart_policy("OnFailure")
            .sh("exit 2")
            .yaml(),
    );

    // Record when each restart count is first seen.
    let t0 = Instant::now();
    let mut first_seen: Vec<Option<Duration>> = vec![None; 4];
    let mut saw_backoff = false;
    while first_seen[3].is_none() {
        assert!(
            t0.elapsed() < Duration::from_secs(90),
            "no third restart in 90 s\n{}",
            a.log_text()
        );
        let n = a.restarts("crash");
        if let Ok(i) = usize::try_from(n)
            && i < 4
            && first_seen[i].is_none()
        {
            first_seen[i] = Some(t0.elapsed());
        }
        if let Some(p) = a.pod("crash") {
            saw_backoff |= p["status"]["containerStatuses"][0]["state"]["waiting"]["reason"]
                == "CrashLoopBackOff";
            if n >= 1 {
                assert_eq!(
                    p["status"]["phase"], "Running",
                    "an Always pod stays Running while it crash-loops"
                );
            }
        }
        std::thread::sleep(Duration::from_millis(100));
    }
    // The gaps by picolet's own clock: when it started each instance. The restart count is in
    // the status as soon as the instance is made, a moment before picolet logs its start.
    let started = |n: u32| format!("started container main of pod crash-e2e-node (restart {n})");
    a.wait_for("the third restart logged", T, |a| {
        a.log_time(&started(3)).is_some()
    });
    let gap = |n: u32| {
        a.log_gap(&started(n - 1), &started(n))
            .unwrap_or_else(|| panic!("no start of restart {n}\n{}", a.log_text()))
    };
    let (g1, g2) = (gap(2), gap(3));
    eprintln!("restart gaps: 1->2 {g1:.3} s, 2->3 {g2:.3} s");
    assert!(g1 >= 8.0, "second restart waited {g1:.3} s, want ~10 s");
    assert!(
        g2 >= 16.0 && g2 > g1,
        "third restart waited {g2:.3} s, want ~20 s"
    );
    assert!(saw_backoff, "CrashLoopBackOff was never reported");
    // Container GC keeps one dead instance per container, and its log; the rest are removed.
    let crash_uid = a.pod("crash").unwrap()["metadata"]["uid"]
        .as_str()
        .unwrap()
        .to_owned();
    let logs = a
        .dir
        .join(format!("logs/default_{}_{crash_uid}/main", full("crash")));
    a.wait_for("dead containers and their logs collected", T, |_| {
        let n_logs = std::fs::read_dir(&logs)
            .map(|d| d.count())
            .unwrap_or(usize::MAX);
        c.pod_containers(&full("crash"), "container").len() <= 2 && n_logs <= 2
    });

    assert_eq!(a.phase("never"), "Failed");
    assert_eq!(a.restarts("never"), 0);
    assert_eq!(
        c.pod_containers(&full("never"), "container").len(),
        1,
        "restartPolicy Never: no second container"
    );
    assert_eq!(
        a.pod("never").unwrap()["status"]["containerStatuses"][0]["state"]["terminated"]["exitCode"],
        3
    );
    assert_eq!(a.phase("done"), "Succeeded");
    assert_eq!(
        c.pod_containers(&full("done"), "container").len(),
        1,
        "OnFailure with exit 0: not restarted"
    );
    assert!(a.restarts("retry") >= 2, "OnFailure with exit 2 restarts");
    assert_eq!(a.phase("retry"), "Running");
    // Completed pods have their sandbox stopped.
    a.wait_for("the sandboxes of finished pods to stop", T, |_| {
        let running: BTreeSet<String> = c.running_task_ids().into_iter().collect();
        c.pod_containers(&full("never"), "sandbox")
            .is_disjoint(&running)
            && c.pod_containers(&full("done"), "sandbox")
                .is_disjoint(&running)
    });
}

#[test]
fn init_containers_run_in_order() {
    let d = test_dir("init");
    let c = ScratchContainerd::start(&d.join("c"));
    let a = Agent::start(&d.join("a"), &c.endpoint());
    a.write_manifest(
        "init.yaml",
        "apiVersion: v1\nkind: Pod\nmetadata:\n  name: init\nspec:\n  terminationGracePeriodSeconds: 1\n  \
         initContainers:\n  - name: first\n    image: picolet.local/busybox:1\n    \
         command: [sh, -c, 'sleep 1; echo one >> /work/order']\n    volumeMounts: [{name: work, mountPath: /work}]\n  \
         - name: second\n    image: picolet.local/busybox:1\n    command: [sh, -c, 'echo two >> /work/order']\n    \
         volumeMounts: [{name: work, mountPath: /work}]\n  containers:\n  - name: main\n    image: picolet.local/busybox:1\n    \
         command: [sh, -c, 'cat /work/order; exec sleep 3600']\n    volumeMounts: [{name: work, mountPath: /work}]\n  \
         volumes:\n  - name: work\n    emptyDir: {}\n",
    );
    a.wait_for("the pod to run after its init containers", T, |a| {
        a.phase("init") == "Running"
    });
    let p = a.pod("init").unwrap();
    let inits = p["status"]["initContainerStatuses"].as_array().unwrap();
    assert_eq!(inits.len(), 2);
    for i in inits {
        assert_eq!(i["state"]["terminated"]["reason"], "Completed", "{i}");
    }
    let uid = p["metadata"]["uid"].as_str().unwrap();
    let log = a
        .dir
        .join(format!("logs/default_{}_{uid}/main/0.log", full("init")));
    a.wait_for("main's log", T, |_| {
        std::fs::read_to_string(&log).is_ok_and(|l| l.contains("two"))
    });
    let text = std::fs::read_to_string(&log).unwrap();
    let lines: Vec<&str> = text
        .lines()
        .map(|l| l.rsplit(' ').next().unwrap_or(""))
        .collect();
    assert_eq!(
        lines,
        vec!["one", "two"],
        "init containers ran in order, once each"
    );

    // The sandbox dies (as after a reboot): a new one is made and the init containers run again,
    // in order, before the app container starts anew.
    let sandbox = c
        .pod_containers(&full("init"), "sandbox")
        .into_iter()
        .next()
        .unwrap();
    c.ctr(&["tasks", "kill", "-s", "SIGKILL", &sandbox]);
    let log1 = a
        .dir
        .join(format!("logs/default_{}_{uid}/main/1.log", full("init")));
    a.wait_for(
        "main restarted after the init containers ran again",
        T,
        |_| std::fs::read_to_string(&log1).is_ok_and(|l| l.lines().count() >= 4),
    );
    let text = std::fs::read_to_string(&log1).unwrap();
    let lines: Vec<&str> = text
        .lines()
        .map(|l| l.rsplit(' ').next().unwrap_or(""))
        .collect();
    assert_eq!(lines, vec!["one", "two", "one", "two"]);
    a.wait_for("the pod running again", T, |a| a.phase("init") == "Running");
}

#[test]
fn an_edited_host_network_pod_waits_for_its_old_version() {
    let d = test_dir("hostnet");
    let c = ScratchContainerd::start(&d.join("c"));
    let a = Agent::start(&d.join("a"), &c.endpoint());
    // Both versions serve the same host port: overlapping, the new one could not bind it.
    let srv = |v: &str| {
        format!(
            "apiVersion: v1\nkind: Pod\nmetadata:\n  name: srv\nspec:\n  hostNetwork: true\n  \
             terminationGracePeriodSeconds: 2\n  containers:\n  - name: main\n    image: {IMAGE}\n    \
             command: [httpd, -f, -p, \"127.0.0.1:18931\", -h, /{v}]\n"
        )
    };
    a.write_manifest("srv.yaml", &srv("bin"));
    a.wait_for("v1 serving", T, |a| a.phase("srv") == "Running");
    let v1 = c.running_containers(&full("srv"));
    a.write_manifest("srv.yaml", &srv("etc"));
    a.wait_for("v2 running in place of v1", T, |a| {
        let now = c.running_containers(&full("srv"));
        now.len() == 1 && now.is_disjoint(&v1) && a.phase("srv") == "Running"
    });
    std::thread::sleep(Duration::from_secs(3));
    assert_eq!(
        a.restarts("srv"),
        0,
        "v2 never had to retry: v1 had released the port first"
    );
    assert_eq!(c.running_containers(&full("srv")).len(), 1);
    assert!(
        a.log_text().contains("waiting for the previous pod") || a.log_text().contains("same name")
    );
}

#[test]
fn picolet_restarts_adopt_running_pods() {
    let d = test_dir("adopt");
    let c = ScratchContainerd::start(&d.join("c"));
    let mut a = Agent::start(&d.join("a"), &c.endpoint());
    for n in ["one", "two"] {
        a.write_manifest(
            &format!("{n}.yaml"),
            &Pod::new(n)
                .restart_policy("Always")
                .sh("exec sleep 3600")
                .yaml(),
        );
    }
    a.wait_for("both pods running", T, |a| {
        a.phase("one") == "Running" && a.phase("two") == "Running"
    });
    let before: BTreeSet<String> = c.container_ids().into_iter().collect();
    let tasks_before: BTreeSet<String> = c.running_task_ids().into_iter().collect();

    // SIGKILL and start again: nothing is restarted or recreated.
    a.restart();
    a.wait_for("the pods to be reported again", T, |a| {
        a.phase("one") == "Running" && a.phase("two") == "Running"
    });
    std::thread::sleep(Duration::from_secs(5)); // several relists and syncs
    assert_eq!(
        c.container_ids().into_iter().collect::<BTreeSet<_>>(),
        before,
        "no container or sandbox created"
    );
    assert_eq!(
        c.running_task_ids().into_iter().collect::<BTreeSet<_>>(),
        tasks_before
    );
    assert_eq!(a.restarts("one"), 0);
    assert_eq!(a.restarts("two"), 0);

    // SIGTERM exits cleanly and leaves the pods running.
    let st = a.terminate();
    assert!(st.success(), "picolet exited with {st}");
    std::thread::sleep(Duration::from_secs(2));
    assert_eq!(
        c.running_task_ids().into_iter().collect::<BTreeSet<_>>(),
        tasks_before
    );

    // A manifest broken while picolet was down: the last valid version keeps running.
    a.write_manifest(
        "one.yaml",
        "apiVersion: v1\nkind: Pod\nmetadata:\n  name: one\nspec:\n  containers: []\n",
    );
    // A manifest removed while picolet was down: its pod is cleaned up once picolet is back.
    a.remove_manifest("two.yaml");
    a.restart();
    a.wait_for("the orphaned pod to be removed", T, |_| {
        c.pod_containers(&full("two"), "container").is_empty()
            && c.pod_containers(&full("two"), "sandbox").is_empty()
    });
    let one_running = c.running_containers(&full("one"));
    assert_eq!(one_running.len(), 1);
    assert!(
        tasks_before.is_superset(&one_running),
        "pod one kept its container through the restart"
    );
    assert!(a.manifests_report().to_string().contains("one.yaml"));
}

#[test]
fn containerd_restart_keeps_pods() {
    let d = test_dir("crirestart");
    let c = ScratchContainerd::start(&d.join("c"));
    let a = Agent::start(&d.join("a"), &c.endpoint());
    a.write_manifest(
        "keep.yaml",
        &Pod::new("keep")
            .restart_policy("Always")
            .sh("exec sleep 3600")
            .yaml(),
    );
    a.wait_for("the pod running", T, |a| a.phase("keep") == "Running");
    let sandboxes = c.pod_containers(&full("keep"), "sandbox");
    let running = c.running_containers(&full("keep"));

    c.restart();
    std::thread::sleep(Duration::from_secs(5)); // relists and syncs against the new containerd
    assert_eq!(
        c.pod_containers(&full("keep"), "sandbox"),
        sandboxes,
        "no duplicate sandbox"
    );
    assert_eq!(
        c.running_containers(&full("keep")),
        running,
        "the container kept running"
    );
    assert_eq!(a.restarts("keep"), 0);

    // picolet reconnected by itself: a new pod starts.
    a.write_manifest(
        "after.yaml",
        &Pod::new("after")
            .restart_policy("Always")
            .sh("exec sleep 3600")
            .yaml(),
    );
    a.wait_for("a pod added after the runtime restart to run", T, |a| {
        a.phase("after") == "Running"
    });
    assert!(a.get("/healthz").is_some());
}

/// `picolet check` against this runtime, with the root dir and manifests of `d/a`.
fn check_node(endpoint: &str, d: &std::path::Path) -> (bool, String) {
    let (root, manifests) = (d.join("a/root"), d.join("a"));
    agent::picolet_check(&[
        "--container-runtime-endpoint",
        endpoint,
        "--root-dir",
        root.to_str().unwrap(),
        "--pod-manifest-path",
        manifests.to_str().unwrap(),
    ])
}

#[test]
fn check_reports_the_runtime_version_and_cgroups() {
    let d = test_dir("check");
    let c = ScratchContainerd::start(&d.join("c"));
    let (success, out) = check_node(&c.endpoint(), &d);
    assert!(
        out.lines()
            .any(|l| l.starts_with("ok   runtime: containerd")
                && (l.ends_with("CRI v1; a release picolet is tested with")
                    // 1.6: what it cannot do is said beside it.
                    || l.ends_with(
                        "CRI v1; a release picolet is tested with; pods with image volumes are \
                         refused: the container runtime containerd 1.6.20~ds1 cannot mount \
                         images (image volumes need containerd 2.1 or later)"
                    ))),
        "{out}"
    );
    assert!(
        out.lines()
            .any(|l| l.starts_with("ok   cgroups:") && l.contains("memory")),
        "{out}"
    );
    assert!(out.contains("ok   overlayfs"), "{out}");
    assert!(success, "{out}");
    c.stop();
    let (success, out) = check_node(&c.endpoint(), &d);
    assert!(out.contains("FAIL runtime:"), "{out}");
    assert!(!success, "{out}");
}

/// The accounting of a running container, read from the cgroup of its init process, found
/// as picolet finds it: the pid from the runtime's verbose ContainerStatus, then
/// `/proc/<pid>/cgroup`.
fn container_stats(c: &ScratchContainerd, pod: &str) -> Option<picolet::stats::cgroup::Stats> {
    let cg = picolet::cm::detect::detect(std::path::Path::new("/")).unwrap();
    let running = c.running_task_ids();
    let id = c
        .pod_containers(&full(pod), "container")
        .into_iter()
        .find(|id| running.contains(id))?;
    let cri =
        picolet::cri::Cri::new(&c.endpoint(), None, picolet::cri::Deadlines::default()).unwrap();
    let pid =
        picolet::rt::block_on(picolet::kuberuntime::container_init_pid(&cri, &id)).unwrap()?;
    let loc = picolet::stats::locate_pid(&cg, std::path::Path::new("/"), pid)?;
    Some(picolet::stats::cgroup::read_stats(&loc))
}

#[test]
fn cgroup_accounting_of_a_busy_container() {
    let d = test_dir("stats");
    let c = ScratchContainerd::start(&d.join("c"));
    let a = Agent::start(&d.join("a"), &c.endpoint());
    // 32 MiB into a memory-backed emptyDir (a tmpfs, charged to the writer), then a busy loop.
    a.write_manifest("busy.yaml", &pods::busy());
    let mut first = None;
    a.wait_for(
        "the busy container's stats",
        Duration::from_secs(60),
        |_| {
            first = container_stats(&c, "busy")
                .filter(|s| s.memory_working_set_bytes.unwrap_or(0) >= 32 << 20);
            first.is_some()
        },
    );
    let first = first.unwrap();
    std::thread::sleep(Duration::from_secs(2));
    let second = container_stats(&c, "busy").unwrap();
    let cpu = second.cpu_usage_nanos.unwrap() - first.cpu_usage_nanos.unwrap();
    // A busy loop on a 2-core machine shared with other work: well over a tenth of a core.
    assert!(
        cpu > 200_000_000,
        "cpu over 2 s: {cpu} ns ({first:?} → {second:?})"
    );
    eprintln!("busy container: {cpu} ns of CPU in 2 s; {second:?}");
    assert!(second.memory_usage_bytes.unwrap() >= 32 << 20, "{second:?}");
    assert!(second.pids.unwrap() >= 1, "{second:?}");
    assert_eq!(second.oom_kills, Some(0), "{second:?}");

    // The same figures from the runtime's ContainerStats, and what each way costs.
    let id = c
        .pod_containers(&full("busy"), "container")
        .into_iter()
        .find(|id| c.running_task_ids().contains(id))
        .unwrap();
    let cri =
        picolet::cri::Cri::new(&c.endpoint(), None, picolet::cri::Deadlines::default()).unwrap();
    const N: u32 = 200;
    let t = Instant::now();
    let mut via_cri = None;
    for _ in 0..N {
        via_cri = picolet::rt::block_on(cri.container_stats(
            picolet::cri::v1::ContainerStatsRequest {
                container_id: id.clone(),
            },
        ))
        .unwrap()
        .stats;
    }
    let cri_cost = t.elapsed() / N;
    let cg = picolet::cm::detect::detect(std::path::Path::new("/")).unwrap();
    let root = std::path::Path::new("/");
    let t = Instant::now();
    let mut loc = None;
    for _ in 0..N {
        loc = picolet::rt::block_on(picolet::kuberuntime::container_init_pid(&cri, &id))
            .unwrap()
            .and_then(|pid| picolet::stats::locate_pid(&cg, root, pid));
    }
    let locate_cost = t.elapsed() / N;
    let loc = loc.unwrap();
    let mut direct = None;
    let t = Instant::now();
    for _ in 0..N {
        direct = Some(picolet::stats::cgroup::read_stats(&loc));
    }
    let files_cost = t.elapsed() / N;
    eprintln!(
        "one container's stats: CRI ContainerStats {cri_cost:?}; locating its cgroup (verbose \
         ContainerStatus, /proc/<pid>/cgroup) {locate_cost:?}; reading its cgroup files \
         {files_cost:?}"
    );
    let via_cri = via_cri.unwrap();
    let direct = direct.unwrap();
    let cri_ws = via_cri.memory.unwrap().working_set_bytes.unwrap().value;
    let ws = direct.memory_working_set_bytes.unwrap();
    // Both read the same cgroup moments apart; a busy loop's memory does not move.
    assert!(cri_ws.abs_diff(ws) < 4 << 20, "CRI {cri_ws} vs direct {ws}");
    let cri_cpu = via_cri.cpu.unwrap().usage_core_nano_seconds.unwrap().value;
    assert!(
        cri_cpu > 0 && direct.cpu_usage_nanos.unwrap() >= cri_cpu,
        "{cri_cpu} vs {direct:?}"
    );

    served_accounting_of_the_busy_container(&a);
    a.remove_manifest("busy.yaml");
}

/// The same container as picolet serves it: `/stats/summary` (its rate over two scrapes),
/// `/metrics/cadvisor`, `/metrics/resource` and `/metrics`, each text read by the
/// Prometheus project's parser.
fn served_accounting_of_the_busy_container(a: &Agent) {
    const MIB32: f64 = 33_554_432.0;
    let busy = full("busy");
    let get = |path: &str| {
        let t = Instant::now();
        let body = a.get(path).unwrap_or_else(|| panic!("GET {path}"));
        eprintln!("GET {path}: {} bytes in {:?}", body.len(), t.elapsed());
        body
    };
    let summary = || serde_json::from_str::<serde_json::Value>(&get("/stats/summary")).unwrap();
    let cadvisor = || prom::check(&get("/metrics/cadvisor"));
    let ctr = [("pod", busy.as_str()), ("container", "main")];
    let cpu_of = |f: &serde_json::Value| {
        prom::sample(f, "container_cpu_usage_seconds_total", &ctr)
            .expect("the busy container's CPU")
    };
    let _ = summary(); // the base of the rate
    let cpu0 = cpu_of(&cadvisor());
    std::thread::sleep(Duration::from_secs(2));
    let s = summary();
    let fams = cadvisor();
    let cpu1 = cpu_of(&fams);

    let pod = s["pods"]
        .as_array()
        .unwrap()
        .iter()
        .find(|p| p["podRef"]["name"] == busy.as_str())
        .unwrap_or_else(|| panic!("no {busy} in {s}"));
    assert_eq!(pod["podRef"]["namespace"], "default");
    let main = &pod["containers"][0];
    assert_eq!(main["name"], "main");
    // A busy loop on 2 shared cores: well over a tenth of a core.
    let nano = main["cpu"]["usageNanoCores"].as_u64().unwrap_or(0);
    assert!(nano > 100_000_000, "usageNanoCores {nano}: {main}");
    let ws = main["memory"]["workingSetBytes"].as_f64().unwrap_or(0.0);
    assert!(ws >= MIB32, "container working set {ws}: {main}");
    let pod_ws = pod["memory"]["workingSetBytes"].as_f64().unwrap_or(0.0);
    assert!(pod_ws >= MIB32, "pod working set {pod_ws}: {pod}");
    assert!(
        pod["cpu"]["usageNanoCores"].as_u64().unwrap_or(0) > 100_000_000,
        "{pod}"
    );
    let node = &s["node"];
    assert_eq!(node["nodeName"], NODE);
    assert!(
        node["cpu"]["usageCoreNanoSeconds"].as_u64().unwrap_or(0) > 0,
        "{node}"
    );
    assert!(
        node["memory"]["workingSetBytes"].as_f64().unwrap_or(0.0) >= MIB32,
        "{node}"
    );
    assert!(
        node["fs"]["capacityBytes"].as_u64().unwrap_or(0) > 0,
        "{node}"
    );
    assert!(
        node["runtime"]["imageFs"]["capacityBytes"]
            .as_u64()
            .unwrap_or(0)
            > 0,
        "{node}"
    );
    eprintln!("summary of the busy container: {main}");

    assert!(cpu1 - cpu0 > 0.2, "cadvisor CPU over 2 s: {cpu0} → {cpu1}");
    let ws = prom::sample(&fams, "container_memory_working_set_bytes", &ctr).unwrap_or(0.0);
    assert!(ws >= MIB32, "cadvisor working set {ws}");
    assert!(prom::sample(&fams, "container_processes", &ctr).unwrap_or(0.0) >= 1.0);
    assert_eq!(
        prom::sample(&fams, "container_oom_events_total", &ctr),
        Some(0.0)
    );
    assert!(prom::sample(&fams, "machine_memory_bytes", &[]).unwrap_or(0.0) > 0.0);

    let res = prom::check(&get("/metrics/resource"));
    let rc = [
        ("pod", busy.as_str()),
        ("container", "main"),
        ("namespace", "default"),
    ];
    assert!(prom::sample(&res, "container_cpu_usage_seconds_total", &rc).unwrap_or(0.0) > 0.0);
    let ws = prom::sample(&res, "container_memory_working_set_bytes", &rc).unwrap_or(0.0);
    assert!(ws >= MIB32, "resource working set {ws}");
    let rp = [("pod", busy.as_str()), ("namespace", "default")];
    assert!(prom::sample(&res, "pod_memory_working_set_bytes", &rp).unwrap_or(0.0) >= MIB32);
    assert!(prom::sample(&res, "node_cpu_usage_seconds_total", &[]).unwrap_or(0.0) > 0.0);
    assert_eq!(prom::sample(&res, "resource_scrape_error", &[]), Some(0.0));

    let k = prom::check(&get("/metrics"));
    assert!(prom::sample(&k, "kubelet_running_pods", &[]).unwrap_or(0.0) >= 1.0);
    let running = [("container_state", "running")];
    assert!(prom::sample(&k, "kubelet_running_containers", &running).unwrap_or(0.0) >= 1.0);
    assert_eq!(
        prom::sample(&k, "kubelet_node_name", &[("node", NODE)]),
        Some(1.0)
    );
    let relists = prom::sample(&k, "kubelet_pleg_relist_duration_seconds_count", &[]);
    assert!(relists.unwrap_or(0.0) >= 3.0, "{relists:?}");
    let lists = [("operation_type", "list_podsandbox")];
    assert!(prom::sample(&k, "kubelet_runtime_operations_total", &lists).unwrap_or(0.0) >= 3.0);
    let runs = [("operation_type", "run_podsandbox")];
    assert!(prom::sample(&k, "kubelet_runtime_operations_total", &runs).unwrap_or(0.0) >= 1.0);
    let started = prom::sample(&k, "kubelet_pod_start_duration_seconds_count", &[]);
    assert!(started.unwrap_or(0.0) >= 1.0, "{started:?}");
    assert!(prom::sample(&k, "process_resident_memory_bytes", &[]).unwrap_or(0.0) > 0.0);
}
