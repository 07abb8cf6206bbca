//! Fleet figures of the apiserver client, measured (printed), never asserted:
//!
//! 1. One picolet with 10 API pods (each with the service-account volume admission adds) at
//!    steady state against the fake apiserver: requests per minute by kind, and bytes on the
//!    wire per day, extrapolated from the window.
//! 2. 1000 API pod sources (the real `config::api::run_blocking`, one thread each, as 1000 nodes
//!    would run it) watching the fake; the apiserver goes away for 10 s and comes back: how the
//!    reconnects spread over the seconds after it returns.
//!
//! `cargo bench --bench fleet` (about 3 min); `FLEET_SECONDS` sets the steady window (default
//! 120), `FLEET_CLIENTS` the number of sources (default 1000).

#[path = "../tests/support/agent.rs"]
mod agent;
#[path = "../tests/support/fake_apiserver.rs"]
mod fake_apiserver;
#[path = "../tests/support/fake_cri.rs"]
mod fake_cri;

use std::collections::BTreeMap;
use std::time::{Duration, Instant};

use fake_apiserver::FakeApi;
use fake_cri::{FakeCri, TempDir};
use picolet::rt;
use serde_json::json;

const IMAGE: &str = "picolet.local/busybox:1";

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

fn steady(seconds: u64) {
    let tmp = TempDir::new("fleet");
    let api = FakeApi::start();
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
            "spec": {"nodeName": "e2e-node", "terminationGracePeriodSeconds": 1,
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
    rt::block_on(Box::pin(async {
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
    steady(env_u64("FLEET_SECONDS", 120));
    storm(usize::try_from(env_u64("FLEET_CLIENTS", 1000)).unwrap_or(1000));
}
