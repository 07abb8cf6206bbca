//! Fleet figures of the apiserver client, measured (printed), never asserted:
//!
//! 1. One picolet with 10 API pods (each with the service-account volume admission adds) at
//!    steady state against the fake apiserver: requests per minute by kind, and bytes on the
//!    wire per day, extrapolated from the window.
//! 2. 1000 API pod sources (the real `config::api::run_blocking`, one thread each, as 1000 nodes
//!    would run it) watching the fake; the apiserver goes away for 10 s and comes back: how the
//!    reconnects spread over the seconds after it returns.
//!
//! 3. One picolet with 10 API pods and 5 static pods while its apiserver refuses every
//!    connection, then while it reads requests and never answers, then while its link is cut
//!    with every connection left dead: RSS, threads and descriptors over each outage, and how
//!    soon after each the Lease is renewed and a pod created on return runs.
//!
//! `cargo bench --bench fleet` (about 20 min); `FLEET_SECONDS` sets the steady window (default
//! 120), `FLEET_OFFLINE_SECONDS` each outage (default 300), `FLEET_CLIENTS` the number of sources
//! (default 1000), `FLEET_PHASES` which of `steady,offline,storm` run (default all),
//! `FLEET_OFFLINE_MODES` which outages of `refused,stalled,cut` the offline phase has (default
//! all three; `cut` leaves every connection open at the time dead for good).

#[path = "../tests/support/mod.rs"]
mod support;

use support::{IMAGE, NODE, agent, fake_apiserver, fake_cri};

use std::collections::BTreeMap;
use std::time::{Duration, Instant};

use fake_apiserver::FakeApi;
use fake_cri::{FakeCri, TempDir};
use picolet::rt;
use serde_json::json;

fn env_u64(name: &str, default: u64) -> u64 {
    std::env::var(name)
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(default)
}

fn kind(method: &str, path: &str) -> String {
    let p = path.split('?').next().unwrap_or(path);
    let what = if path.contains("watch=true") {
        "pods watch"
    } else if p.contains("/leases") {
        "lease"
    } else if p.ends_with("/status") && p.contains("/nodes/") {
        "node status"
    } else if p.contains("/nodes") {
        "node"
    } else if p.ends_with("/status") {
        "pod status"
    } else if p.contains("/configmaps/") || p.contains("/secrets/") {
        "object"
    } else if p.ends_with("/token") {
        "token"
    } else if p.contains("/pods") {
        "pods"
    } else {
        "other"
    };
    format!("{method} {what}")
}

/// Ten API pods bound to the node, as admission leaves them.
fn ten_api_pods(api: &FakeApi) {
    // Pods as admission leaves them: each with the service account's projected volume (a
    // token, the namespace's kube-root-ca.crt, the namespace).
    api.put_object(
        "configmaps",
        "default",
        "kube-root-ca.crt",
        json!({"ca.crt": "CA PEM"}),
    );
    for i in 0..10 {
        api.create_pod(json!({
            "apiVersion": "v1", "kind": "Pod",
            "metadata": {"name": format!("p{i}"), "namespace": "default"},
            "spec": {"nodeName": NODE, "terminationGracePeriodSeconds": 1,
                     "serviceAccountName": "default",
                     "containers": [{"name": "c", "image": IMAGE, "command": ["sleep", "3600"],
                                     "volumeMounts": [{"name": "kube-api-access", "mountPath": "/var/run/secrets/kubernetes.io/serviceaccount", "readOnly": true}]}],
                     "volumes": [{"name": "kube-api-access", "projected": {"defaultMode": 420, "sources": [
                         {"serviceAccountToken": {"expirationSeconds": 3607, "path": "token"}},
                         {"configMap": {"name": "kube-root-ca.crt", "items": [{"key": "ca.crt", "path": "ca.crt"}]}},
                         {"downwardAPI": {"items": [{"path": "namespace", "fieldRef": {"apiVersion": "v1", "fieldPath": "metadata.namespace"}}]}}
                     ]}}]}
        }));
    }
}

/// A fake runtime with the test image and picolet joined to `api` as a node, started off the
/// executor thread.
async fn joined_node(tmp: &TempDir, api: &FakeApi) -> (FakeCri, agent::Agent) {
    let fake = FakeCri::start(tmp.path());
    fake.add_image(IMAGE);
    let dir = tmp.path().join("a");
    std::fs::create_dir_all(&dir).unwrap();
    let kc = api.kubeconfig(&dir);
    let endpoint = fake.endpoint();
    let a = rt::unblock(move || {
        agent::Agent::start_with(
            &dir,
            &endpoint,
            &["--kubeconfig".into(), kc.display().to_string()],
        )
    })
    .await;
    (fake, a)
}

fn steady(seconds: u64) {
    let tmp = TempDir::new("fleet");
    let api = FakeApi::start();
    ten_api_pods(&api);
    rt::block_on(Box::pin(async {
        let (fake, a) = joined_node(&tmp, &api).await;
        // Let it settle: registration, pods started, statuses sent.
        rt::sleep(Duration::from_secs(20)).await;
        let running = fake
            .containers()
            .iter()
            .filter(|c| c.state == fake_cri::ContainerState::ContainerRunning)
            .count();
        let n0 = api.requests().len();
        let (in0, out0) = api.traffic();
        let t0 = Instant::now();
        rt::sleep(Duration::from_secs(seconds)).await;
        let window = t0.elapsed().as_secs_f64();
        let reqs = api.requests();
        let (in1, out1) = api.traffic();
        let mut by_kind: BTreeMap<String, usize> = BTreeMap::new();
        for (m, p) in &reqs[n0..] {
            *by_kind.entry(kind(m, p)).or_default() += 1;
        }
        let total = reqs.len() - n0;
        let per_min = |n: usize| n as f64 * 60.0 / window;
        println!("== one node, 10 API pods ({running} containers running), steady {window:.0} s");
        println!("requests per minute: {:.2}", per_min(total));
        for (k, n) in &by_kind {
            println!("  {k:<20} {:.2}/min", per_min(*n));
        }
        let bytes = (in1 - in0 + out1 - out0) as f64;
        println!(
            "bytes on the wire (HTTP, without TLS): {:.0} per minute, {:.1} MB per day",
            bytes * 60.0 / window,
            bytes * 86_400.0 / window / 1e6
        );
        drop(a);
    }));
}

/// Resident set, threads and open descriptors of a process, from /proc.
fn proc_figures(pid: u32) -> (u64, u64, usize) {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).unwrap_or_default();
    let field = |name: &str| {
        status
            .lines()
            .find_map(|l| l.strip_prefix(name))
            .and_then(|v| v.split_whitespace().next())
            .and_then(|v| v.parse().ok())
            .unwrap_or(0)
    };
    let fds = std::fs::read_dir(format!("/proc/{pid}/fd")).map_or(0, |d| d.count());
    (field("VmRSS:"), field("Threads:"), fds)
}

/// Where a process's resident memory lies, from /proc/<pid>/smaps: mapped files (the binary and
/// its libraries), the main heap, and other anonymous memory (malloc arenas, thread stacks).
fn memory_parts(pid: u32) -> (u64, u64, u64) {
    let smaps = std::fs::read_to_string(format!("/proc/{pid}/smaps")).unwrap_or_default();
    let (mut file, mut heap, mut anon) = (0, 0, 0);
    let mut part = 0u8;
    for line in smaps.lines() {
        let words: Vec<&str> = line.split_whitespace().collect();
        if let Some(rss) = line.strip_prefix("Rss:") {
            let kib: u64 = rss
                .split_whitespace()
                .next()
                .and_then(|v| v.parse().ok())
                .unwrap_or(0);
            match part {
                0 => file += kib,
                1 => heap += kib,
                _ => anon += kib,
            }
        } else if words.len() >= 5 && words[0].contains('-') && !words[0].ends_with(':') {
            // "start-end perms offset dev inode [name]": a file has an inode.
            part = if words[4] != "0" {
                0
            } else if words.get(5) == Some(&"[heap]") {
                1
            } else {
                2
            };
        }
    }
    (file, heap, anon)
}

fn memory_line(pid: u32) -> String {
    let (file, heap, anon) = memory_parts(pid);
    format!("files {file} KiB, heap {heap} KiB, other anonymous {anon} KiB")
}

/// picolet with 10 API pods and 5 static pods loses its apiserver: first every connection is
/// refused (the server is down), then every request is read and never answered (a black-holed
/// link), `seconds` each; then the apiserver answers again. RSS, threads and descriptors are
/// sampled every 5 s: they must stay flat, whatever the length of the outage.
fn offline(seconds: u64) {
    let tmp = TempDir::new("fleet-offline");
    let api = FakeApi::start();
    ten_api_pods(&api);
    rt::block_on(Box::pin(async {
        let (fake, a) = joined_node(&tmp, &api).await;
        let a = rt::unblock(move || {
            for i in 0..5 {
                a.write_manifest(
                    &format!("s{i}.yaml"),
                    &format!("apiVersion: v1\nkind: Pod\nmetadata:\n  name: s{i}\nspec:\n  containers:\n  - name: c\n    image: {IMAGE}\n    command: [sleep, '3600']\n"),
                );
            }
            a
        })
        .await;
        rt::sleep(Duration::from_secs(30)).await;
        let pid = a.picolet_pid();
        let running = || {
            fake.containers()
                .iter()
                .filter(|c| c.state == fake_cri::ContainerState::ContainerRunning)
                .count()
        };
        let (rss0, th0, fd0) = proc_figures(pid);
        println!(
            "== offline: one node, 10 API pods and 5 static pods ({} containers running)",
            running()
        );
        println!(
            "  connected, settled:        RSS {rss0} KiB ({}), {th0} threads, {fd0} fds",
            memory_line(pid)
        );
        let modes =
            std::env::var("FLEET_OFFLINE_MODES").unwrap_or_else(|_| "refused,stalled,cut".into());
        for (mode, name) in [
            ("refused (apiserver down)", "refused"),
            ("stalled (no answer at all)", "stalled"),
            ("cut (no answer, every connection left dead)", "cut"),
        ] {
            if !modes.split(',').any(|m| m.trim() == name) {
                continue;
            }
            let set = |on: bool| match name {
                "refused" => api.set_down(on),
                "stalled" => api.set_stalled(on),
                _ => api.cut_link(on),
            };
            set(true);
            let n0 = api.requests().len();
            let t0 = Instant::now();
            let mut samples = Vec::new();
            // A line every tenth of the outage (at least every 10 min): the trend, not only the ends.
            let every = (seconds / 10).clamp(5, 600);
            let mut said = 0;
            while t0.elapsed() < Duration::from_secs(seconds) {
                rt::sleep(Duration::from_secs(5)).await;
                samples.push(proc_figures(pid));
                let at = t0.elapsed().as_secs();
                if at / every > said {
                    said = at / every;
                    let (rss, th, _) = proc_figures(pid);
                    println!(
                        "    {at:>5} s: RSS {rss} KiB ({}), {th} threads",
                        memory_line(pid)
                    );
                }
            }
            let n = api.requests().len() - n0;
            set(false);
            // Back: a pod is created at once; how long until the Lease is renewed and the pod
            // runs (the watch resumed).
            let late = format!("late-{name}");
            api.create_pod(json!({
                "apiVersion": "v1", "kind": "Pod",
                "metadata": {"name": late, "namespace": "default"},
                "spec": {"nodeName": NODE, "terminationGracePeriodSeconds": 1,
                         "containers": [{"name": "c", "image": IMAGE, "command": ["sleep", "3600"]}]}
            }));
            let n1 = api.requests().len();
            let t1 = Instant::now();
            let (mut lease, mut runs) = (None, None);
            while t1.elapsed() < Duration::from_secs(900) && (lease.is_none() || runs.is_none()) {
                rt::sleep(Duration::from_millis(100)).await;
                if lease.is_none()
                    && api.requests()[n1..]
                        .iter()
                        .any(|(m, p)| m == "PUT" && p.contains("/leases/"))
                {
                    lease = Some(t1.elapsed().as_secs_f64());
                }
                if runs.is_none()
                    && fake.containers().iter().any(|c| {
                        c.state == fake_cri::ContainerState::ContainerRunning
                            && c.config.labels.get("io.kubernetes.pod.name") == Some(&late)
                    })
                {
                    runs = Some(t1.elapsed().as_secs_f64());
                }
            }
            let rss: Vec<u64> = samples.iter().map(|s| s.0).collect();
            let half = rss.len() / 2;
            let mean = |v: &[u64]| v.iter().sum::<u64>() as f64 / v.len().max(1) as f64;
            let secs =
                |v: Option<f64>| v.map_or("not within 900 s".into(), |s| format!("{s:.1} s"));
            println!(
                "  {mode}, {:.0} s: RSS first {} KiB, last {} KiB, max {} KiB; mean of the first half {:.0} KiB, of the second {:.0} KiB; threads max {}, fds max {}; {:.1} requests a minute tried; {} containers running at the end",
                t0.elapsed().as_secs_f64(),
                rss.first().copied().unwrap_or(0),
                rss.last().copied().unwrap_or(0),
                rss.iter().max().copied().unwrap_or(0),
                mean(&rss[..half]),
                mean(&rss[half..]),
                samples.iter().map(|s| s.1).max().unwrap_or(0),
                samples.iter().map(|s| s.2).max().unwrap_or(0),
                n as f64 * 60.0 / t0.elapsed().as_secs_f64(),
                running(),
            );
            println!(
                "  back from {name}: Lease renewed after {}, a pod created on return running after {}",
                secs(lease),
                secs(runs)
            );
        }
        let (rss1, th1, fd1) = proc_figures(pid);
        println!(
            "  after the outages:         RSS {rss1} KiB ({}), {th1} threads, {fd1} fds",
            memory_line(pid)
        );
        drop(a);
    }));
}

fn storm(clients: usize) {
    use picolet::apiclient::{Client, kubeconfig};
    use picolet::config::api::{ApiSourceConfig, Mirrors, run_blocking};
    let api = FakeApi::start();
    let dir = std::env::temp_dir().join(format!("picolet-storm-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let conn = kubeconfig::load(&api.kubeconfig(&dir)).unwrap();
    let mut rxs = Vec::new();
    for i in 0..clients {
        let client = Client::new(&conn).unwrap();
        let cfg = ApiSourceConfig {
            node_name: format!("node-{i}"),
            poll_interval: None,
            checkpoint: None,
            node: None,
        };
        let (tx, rx) = async_channel::unbounded();
        std::thread::Builder::new()
            .stack_size(256 << 10)
            .spawn(move || run_blocking(client, cfg, tx, Mirrors::default()))
            .unwrap();
        rxs.push(rx);
    }
    // All listed and watching.
    let t0 = Instant::now();
    while api.count("GET", "/api/v1/pods?") < 2 * clients && t0.elapsed() < Duration::from_secs(60)
    {
        std::thread::sleep(Duration::from_millis(200));
    }
    let before = api.requests().len();
    api.set_down(true);
    std::thread::sleep(Duration::from_secs(10));
    let back = Instant::now();
    let during = api.requests().len() - before;
    api.set_down(false);
    std::thread::sleep(Duration::from_secs(40));
    let reqs = api.requests();
    let times = api.request_times();
    let mut per_sec: BTreeMap<u64, usize> = BTreeMap::new();
    let (mut lists, mut watches) = (0, 0);
    for ((m, p), t) in reqs.iter().zip(&times).skip(before) {
        if *t < back || m != "GET" {
            continue;
        }
        *per_sec.entry((*t - back).as_secs()).or_default() += 1;
        if p.contains("watch=true") {
            watches += 1;
        } else {
            lists += 1;
        }
    }
    println!("== {clients} pod sources, apiserver away 10 s then back");
    println!("requests while away (refused at once): {during}");
    println!("after it returned, in 40 s: {watches} watches, {lists} lists");
    let peak = per_sec.values().copied().max().unwrap_or(0);
    println!("busiest second: {peak} requests; per second after the return:");
    let line: Vec<String> = (0..40)
        .map(|s| per_sec.get(&s).copied().unwrap_or(0).to_string())
        .collect();
    println!("  {}", line.join(" "));
    drop(rxs);
    let _ = std::fs::remove_dir_all(&dir);
}

fn main() {
    // `cargo bench` passes --bench; any other argument filters nothing here.
    // FLEET_PHASES picks phases by name (default: all).
    let phases = std::env::var("FLEET_PHASES").unwrap_or_else(|_| "steady,offline,storm".into());
    let on = |p: &str| phases.split(',').any(|x| x.trim() == p);
    if on("steady") {
        steady(env_u64("FLEET_SECONDS", 120));
    }
    if on("offline") {
        offline(env_u64("FLEET_OFFLINE_SECONDS", 300));
    }
    if on("storm") {
        storm(usize::try_from(env_u64("FLEET_CLIENTS", 1000)).unwrap_or(1000));
    }
}
