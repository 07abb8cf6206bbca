//! The provider, the Summary and the exposition over fixture trees laid out as the kernel lays
//! them out; every Prometheus text goes through the Prometheus project's own parser
//! (`tests/support/prom_check.py`).

use std::cell::Cell;
use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::rc::Rc;
use std::time::Duration;

use super::*;

#[path = "../../tests/support/prom.rs"]
mod prom_support;
use prom_support::{check as prom_check, family, sample};

fn write(root: &Path, files: &[(&str, &str)]) {
    for (p, c) in files {
        let p = root.join(p);
        std::fs::create_dir_all(p.parent().unwrap()).unwrap();
        std::fs::write(p, c).unwrap();
    }
}

const POD_A: &str =
    "/kubepods.slice/kubepods-burstable.slice/kubepods-burstable-pod1111_aaaa.slice";

/// A cgroup v2 host: the root, pod A with its own cgroup and two containers, pod B whose one
/// located container sits outside any pod cgroup (as containerd places it without a parent).
fn v2_host(name: &str) -> PathBuf {
    let root = std::env::temp_dir().join(format!("picolet-stats-{name}-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&root);
    let cg = |p: &str, f: &str| format!("sys/fs/cgroup{p}/{f}");
    let (a, c1, c2, c3) = (
        POD_A.to_owned(),
        format!("{POD_A}/cri-containerd-c1.scope"),
        format!("{POD_A}/cri-containerd-c2.scope"),
        "/k8s.io/c3".to_owned(),
    );
    let files = vec![
        (
            "proc/self/mountinfo".to_owned(),
            "30 23 0:26 / /sys/fs/cgroup rw,nosuid shared:4 - cgroup2 cgroup2 rw,nsdelegate\n"
                .to_owned(),
        ),
        (cg("", "cgroup.controllers"), "cpuset cpu io memory pids\n".into()),
        (cg("", "cpu.stat"), "usage_usec 50000000\nuser_usec 1\n".into()),
        (cg("", "memory.stat"), "anon 1\ninactive_file 102400000\n".into()),
        (
            "proc/meminfo".into(),
            "MemTotal:        1000000 kB\nMemFree:          200000 kB\nMemAvailable:     600000 kB\n"
                .into(),
        ),
        ("proc/stat".into(), "cpu  1 0 1 100 0 0 0 0\nbtime 1700000000\n".into()),
        ("proc/sys/kernel/pid_max".into(), "4194304\n".into()),
        (cg(&a, "cpu.stat"), "usage_usec 3000000\n".into()),
        (cg(&a, "memory.current"), "20971520\n".into()),
        (cg(&a, "memory.stat"), "anon 8388608\ninactive_file 4194304\n".into()),
        (cg(&a, "memory.max"), "67108864\n".into()),
        (cg(&a, "pids.current"), "4\n".into()),
        (
            cg(&a, "memory.pressure"),
            "some avg10=0.00 avg60=0.00 avg300=0.00 total=2500000\nfull avg10=0.00 avg60=0.00 avg300=0.00 total=1000000\n"
                .into(),
        ),
        (cg(&c1, "cpu.stat"), "usage_usec 2000000\n".into()),
        (cg(&c1, "memory.current"), "12582912\n".into()),
        (cg(&c1, "memory.stat"), "anon 6291456\ninactive_file 2097152\npgfault 10\npgmajfault 1\n".into()),
        (cg(&c1, "memory.max"), "max\n".into()),
        (cg(&c1, "memory.events"), "oom 0\noom_kill 0\n".into()),
        (cg(&c1, "io.stat"), "8:0 rbytes=4096 wbytes=8192 rios=1 wios=2\n".into()),
        (cg(&c1, "pids.current"), "3\n".into()),
        (
            cg(&c1, "io.pressure"),
            "some avg10=1.25 avg60=0.50 avg300=0.10 total=777\n".into(),
        ),
        (cg(&c2, "cpu.stat"), "usage_usec 500000\n".into()),
        (cg(&c2, "memory.current"), "6291456\n".into()),
        (cg(&c2, "memory.stat"), "anon 1048576\ninactive_file 0\n".into()),
        (cg(&c2, "pids.current"), "1\n".into()),
        (cg(&c3, "cpu.stat"), "usage_usec 700000\n".into()),
        (cg(&c3, "memory.current"), "1048576\n".into()),
        (cg(&c3, "memory.stat"), "anon 524288\ninactive_file 0\n".into()),
        (cg(&c3, "pids.current"), "2\n".into()),
        ("proc/101/cgroup".into(), format!("0::{c1}\n")),
        ("proc/102/cgroup".into(), format!("0::{c2}\n")),
        ("proc/103/cgroup".into(), format!("0::{c3}\n")),
    ];
    let files: Vec<(&str, &str)> = files
        .iter()
        .map(|(a, b)| (a.as_str(), b.as_str()))
        .collect();
    write(&root, &files);
    root
}

#[derive(Default)]
struct FakeFacts {
    pids: HashMap<String, u32>,
    asked: Cell<usize>,
    image: Option<ImageFs>,
    layers: HashMap<String, disk::Usage>,
}

impl RuntimeFacts for FakeFacts {
    fn container_pid(&self, id: &str) -> Ask<'_, u32> {
        self.asked.set(self.asked.get() + 1);
        let pid = self.pids.get(id).copied();
        Box::pin(async move { pid })
    }
    fn image_fs(&self) -> Ask<'_, ImageFs> {
        let i = self.image.clone();
        Box::pin(async move { i })
    }
    fn writable_layers(&self) -> Ask<'_, HashMap<String, disk::Usage>> {
        let l = (!self.layers.is_empty()).then(|| self.layers.clone());
        Box::pin(async move { l })
    }
}

fn ctr(id: &str, name: &str) -> ContainerRef {
    ContainerRef {
        id: id.into(),
        name: name.into(),
        image: format!("example.com/{name}:1"),
        started_at: 1_700_000_100_000_000_000,
    }
}

fn pods() -> Vec<PodRef> {
    vec![
        PodRef {
            uid: "1111-aaaa".into(),
            name: "a".into(),
            namespace: "default".into(),
            start: 1_700_000_050_000_000_000,
            containers: vec![ctr("c1", "main"), ctr("c2", "side")],
        },
        PodRef {
            uid: "2222-bbbb".into(),
            name: "b".into(),
            namespace: "kube-system".into(),
            start: 1_700_000_060_000_000_000,
            // c4's pid is unknown (not running any more): no stats, not located.
            containers: vec![ctr("c3", "only"), ctr("c4", "gone")],
        },
    ]
}

fn provider(root: &Path) -> (Provider, Rc<FakeFacts>) {
    let facts = Rc::new(FakeFacts {
        pids: [("c1", 101), ("c2", 102), ("c3", 103)]
            .iter()
            .map(|(k, v)| ((*k).to_owned(), *v))
            .collect(),
        asked: Cell::new(0),
        image: Some(ImageFs {
            mountpoint: "/".into(),
            used_bytes: Some(12345),
            inodes_used: Some(6),
        }),
        layers: HashMap::new(),
    });
    (Provider::new(root, root, facts.clone()), facts)
}

#[test]
fn snapshot_reads_pod_cgroups_or_sums_containers() {
    let root = v2_host("snap");
    let (p, facts) = provider(&root);
    let snap = rt::block_on(p.snapshot(pods()));
    let a = &snap.pods[0];
    assert_eq!(a.cgroup.as_deref(), Some(POD_A));
    // The pod's own cgroup, not the sum of its containers (2.5 s).
    assert_eq!(a.stats.cpu_usage_nanos, Some(3_000_000_000));
    assert_eq!(a.stats.memory_limit_bytes, Some(64 << 20));
    assert_eq!(
        a.containers[0].cgroup.as_deref(),
        Some(format!("{POD_A}/cri-containerd-c1.scope").as_str())
    );
    assert_eq!(
        a.containers[0].stats.memory_working_set_bytes,
        Some(10 << 20)
    );
    let b = &snap.pods[1];
    assert_eq!(b.cgroup, None, "no pod cgroup: summed");
    assert_eq!(b.stats.cpu_usage_nanos, Some(700_000_000));
    assert_eq!(b.stats.pids, Some(2));
    assert_eq!(b.containers[1].cgroup, None);
    assert_eq!(b.containers[1].stats, cgroup::Stats::default());
    assert_eq!(snap.node.stats.cgroup.cpu_usage_nanos, Some(50_000_000_000));
    assert_eq!(snap.node.boot_time, 1_700_000_000_000_000_000);
    assert_eq!(snap.node.max_pid, Some(4_194_304));
    let img = snap.node.image_fs.unwrap();
    assert_eq!(img.used_bytes, 12345, "the runtime's figure");
    assert!(img.capacity_bytes > 0);
    // One runtime call per container to locate it; the located ones are not asked again,
    // the unknown one is (it may have started since).
    assert_eq!(facts.asked.get(), 4);
    rt::block_on(p.snapshot(pods()));
    assert_eq!(facts.asked.get(), 5);
    std::fs::remove_dir_all(root).unwrap();
}

#[test]
fn summary_has_upstreams_shape_and_rates() {
    let root = v2_host("summary");
    let (p, _) = provider(&root);
    let clock = rt::FakeClock::install();
    let first = rt::block_on(p.summary("edge-1", pods()));
    let v = serde_json::to_value(&first).unwrap();
    let node = &v["node"];
    assert_eq!(node["nodeName"], "edge-1");
    assert_eq!(node["startTime"], "2023-11-14T22:13:20Z");
    assert_eq!(node["cpu"]["usageCoreNanoSeconds"], 50_000_000_000u64);
    assert!(
        node["cpu"].get("usageNanoCores").is_none(),
        "no rate yet: {node}"
    );
    let total = 1_024_000_000u64;
    let ws = 819_200_000u64 - 102_400_000;
    assert_eq!(node["memory"]["workingSetBytes"], ws);
    assert_eq!(node["memory"]["availableBytes"], total - ws);
    assert!(node["fs"]["capacityBytes"].as_u64().unwrap() > 0, "{node}");
    assert!(node["fs"]["inodesFree"].as_u64().is_some(), "{node}");
    assert_eq!(node["runtime"]["imageFs"]["usedBytes"], 12345);
    assert_eq!(node["rlimit"]["maxpid"], 4_194_304);
    assert!(node["rlimit"]["time"].is_string());
    let a = &v["pods"][0];
    assert_eq!(
        a["podRef"],
        serde_json::json!({"name": "a", "namespace": "default", "uid": "1111-aaaa"})
    );
    assert_eq!(a["startTime"], "2023-11-14T22:14:10Z");
    assert_eq!(a["memory"]["availableBytes"], (64u64 << 20) - (16 << 20));
    assert_eq!(a["process_stats"]["process_count"], 4);
    let main = &a["containers"][0];
    assert_eq!(main["name"], "main");
    assert_eq!(main["startTime"], "2023-11-14T22:15:00Z");
    assert_eq!(main["memory"]["workingSetBytes"], 10u64 << 20);
    assert_eq!(main["memory"]["rssBytes"], 6u64 << 20);
    assert_eq!(main["memory"]["pageFaults"], 10);
    assert_eq!(main["memory"]["majorPageFaults"], 1);
    assert!(main["memory"].get("availableBytes").is_none(), "no limit");
    // PSI as upstream's Summary carries it: both lines, the kernel's total in microseconds;
    // a file the kernel does not write leaves the field out.
    assert_eq!(
        a["memory"]["psi"],
        serde_json::json!({
            "some": {"total": 2_500_000, "avg10": 0.0, "avg60": 0.0, "avg300": 0.0},
            "full": {"total": 1_000_000, "avg10": 0.0, "avg60": 0.0, "avg300": 0.0},
        })
    );
    assert!(
        a["cpu"].get("psi").is_none() && a.get("io").is_none(),
        "{a}"
    );
    assert_eq!(main["io"]["psi"]["some"]["avg10"], 1.25);
    assert_eq!(main["io"]["psi"]["some"]["total"], 777);
    assert_eq!(main["io"]["psi"]["full"]["total"], 0, "no full line: zeros");
    assert!(main["io"]["time"].is_string(), "{main}");
    assert!(
        node.get("io").is_none(),
        "no PSI anywhere for the node: {node}"
    );
    let gone = &v["pods"][1]["containers"][1];
    assert_eq!(gone["name"], "gone");
    assert!(
        gone.get("cpu").is_none() && gone.get("memory").is_none(),
        "{gone}"
    );

    // 2 s later the busy container used 1.5 s more: 0.75 cores.
    let c1 = format!("sys/fs/cgroup{POD_A}/cri-containerd-c1.scope/cpu.stat");
    write(&root, &[(c1.as_str(), "usage_usec 3500000\n")]);
    clock.advance(Duration::from_secs(2));
    let second = rt::block_on(p.summary("edge-1", pods()));
    let main = &second.pods[0].containers[0];
    assert_eq!(
        main.cpu.as_ref().unwrap().usage_nano_cores,
        Some(750_000_000)
    );
    assert_eq!(
        second.pods[0].containers[1]
            .cpu
            .as_ref()
            .unwrap()
            .usage_nano_cores,
        Some(0)
    );
    assert_eq!(second.node.cpu.as_ref().unwrap().usage_nano_cores, Some(0));
    std::fs::remove_dir_all(root).unwrap();
}

/// rootfs and logs per container, volume[] and ephemeral-storage per pod, in upstream's
/// shapes: used figures from the measurement, capacity and availability from the
/// filesystem the figure lives on (the image filesystem for the writable layer).
#[test]
fn summary_reports_ephemeral_storage_in_upstreams_shape() {
    let root = v2_host("ephemeral");
    let dir = root.join("var");
    let (logs_main, logs_side, scratch) = (
        dir.join("logs/main"),
        dir.join("logs/side"),
        dir.join("volumes/scratch"),
    );
    for d in [&logs_main, &logs_side, &scratch] {
        std::fs::create_dir_all(d).unwrap();
    }
    std::fs::write(logs_main.join("0.log"), vec![b'x'; 20_000]).unwrap();
    std::fs::write(scratch.join("blob"), vec![0u8; 300_000]).unwrap();
    let layers: HashMap<String, disk::Usage> = [(
        "c1".to_owned(),
        disk::Usage {
            bytes: 1 << 20,
            inodes: 9,
        },
    )]
    .into();
    let facts = Rc::new(FakeFacts {
        pids: [("c1", 101), ("c2", 102), ("c3", 103)]
            .iter()
            .map(|(k, v)| ((*k).to_owned(), *v))
            .collect(),
        image: Some(ImageFs {
            mountpoint: "/".into(),
            used_bytes: Some(12345),
            inodes_used: Some(6),
        }),
        layers,
        ..FakeFacts::default()
    });
    let storage = ephemeral::Storage::new(disk::DEFAULT_BUDGET);
    let p = Provider::new(&root, &root, facts.clone()).with_storage(storage.clone());
    let trees = vec![ephemeral::PodTrees {
        uid: "1111-aaaa".into(),
        containers: vec![
            ("main".into(), "c1".into(), logs_main.clone()),
            ("side".into(), "c2".into(), logs_side.clone()),
        ],
        volumes: vec![("scratch".into(), scratch.clone())],
    }];
    let s = rt::block_on(async {
        storage.refresh(&trees, &*facts).await;
        p.summary("edge-1", pods()).await
    });
    let v = serde_json::to_value(&s).unwrap();
    let a = &v["pods"][0];
    let walk = |d: &Path| {
        let mut m = disk::Meter::default();
        m.pass(&[d.to_owned()], 1000, std::time::Instant::now());
        m.get(d).unwrap().usage
    };
    let (lm, ls, sc) = (walk(&logs_main), walk(&logs_side), walk(&scratch));
    assert!(lm.bytes >= 20_000 && sc.bytes >= 300_000);
    let main = &a["containers"][0];
    assert_eq!(main["rootfs"]["usedBytes"], 1u64 << 20);
    assert_eq!(main["rootfs"]["inodesUsed"], 9);
    assert!(main["rootfs"]["capacityBytes"].as_u64().unwrap() > 0);
    assert_eq!(main["logs"]["usedBytes"], lm.bytes);
    assert_eq!(main["logs"]["inodesUsed"], 2);
    for k in [
        "time",
        "availableBytes",
        "capacityBytes",
        "inodesFree",
        "inodes",
    ] {
        assert!(main["logs"].get(k).is_some(), "{k} in {}", main["logs"]);
    }
    let side = &a["containers"][1];
    assert!(
        side.get("rootfs").is_none(),
        "the runtime did not say: {side}"
    );
    assert_eq!(side["logs"]["usedBytes"], ls.bytes);
    assert_eq!(a["volume"].as_array().unwrap().len(), 1);
    assert_eq!(a["volume"][0]["name"], "scratch");
    assert_eq!(a["volume"][0]["usedBytes"], sc.bytes);
    assert_eq!(a["volume"][0]["inodesUsed"], 2);
    assert!(a["volume"][0]["capacityBytes"].as_u64().unwrap() > 0);
    let es = &a["ephemeral-storage"];
    assert_eq!(
        es["usedBytes"],
        (1u64 << 20) + lm.bytes + ls.bytes + sc.bytes
    );
    assert_eq!(es["inodesUsed"], 9 + 2 + 1 + 2);
    assert_eq!(es["capacityBytes"], v["node"]["fs"]["capacityBytes"]);
    // A pod not measured has none of these.
    let b = &v["pods"][1];
    for k in ["volume", "ephemeral-storage"] {
        assert!(b.get(k).is_none(), "{k} in {b}");
    }
    assert!(b["containers"][0].get("logs").is_none());
    std::fs::remove_dir_all(root).unwrap();
}

/// The pod's network from its container's namespace, `eth0` inline as upstream; a pod in the
/// host's namespace (hostNetwork) reports none.
#[test]
fn summary_reports_the_pods_network_from_its_namespace() {
    let root = v2_host("network");
    let dev = "Inter-|   Receive                                                |  Transmit\n \
 face |bytes    packets errs drop fifo frame compressed multicast|bytes    packets errs drop fifo colls carrier compressed\n    \
 lo:    1000      10    0    0    0     0          0         0     1000      10    0    0    0     0       0          0\n  \
eth0:  123456     100    2    0    0     0          0         0    654321     90    3    0    0     0       0          0\n  \
net1:      10       1    0    0    0     0          0         0        20      2    0    0    0     0       0          0\n";
    write(
        &root,
        &[("proc/101/net/dev", dev), ("proc/103/net/dev", dev)],
    );
    for (pid, ns) in [
        (1, "net:[4026531840]"),
        (101, "net:[4026532999]"),
        (103, "net:[4026531840]"),
    ] {
        let d = root.join(format!("proc/{pid}/ns"));
        std::fs::create_dir_all(&d).unwrap();
        std::os::unix::fs::symlink(ns, d.join("net")).unwrap();
    }
    let (p, _) = provider(&root);
    let v = serde_json::to_value(rt::block_on(p.summary("edge-1", pods()))).unwrap();
    let net = &v["pods"][0]["network"];
    assert!(net["time"].is_string(), "{net}");
    assert_eq!(net["name"], "eth0");
    assert_eq!(net["rxBytes"], 123_456);
    assert_eq!(net["rxErrors"], 2);
    assert_eq!(net["txBytes"], 654_321);
    assert_eq!(net["txErrors"], 3);
    let names: Vec<&str> = net["interfaces"]
        .as_array()
        .unwrap()
        .iter()
        .map(|i| i["name"].as_str().unwrap())
        .collect();
    assert_eq!(names, ["eth0", "net1"], "the loopback left out");
    assert!(
        v["pods"][1].get("network").is_none(),
        "the host's namespace is not the pod's: {}",
        v["pods"][1]
    );
    std::fs::remove_dir_all(root).unwrap();
}

#[test]
fn rates_hold_within_a_second_and_forget_gone_objects() {
    let mut r = summary::Rates::default();
    assert_eq!(r.rate("x", 0, 0), None);
    assert_eq!(r.rate("x", 500_000_000, 1_000_000_000), Some(500_000_000));
    // 100 ms later: too close for a rate of its own, the previous one stands.
    assert_eq!(r.rate("x", 600_000_000, 1_100_000_000), Some(500_000_000));
    assert_eq!(
        r.rate("x", 2_500_000_000, 3_000_000_000),
        Some(1_000_000_000)
    );
    r.retain(&std::collections::HashSet::new());
    assert_eq!(r.rate("x", 9, 4_000_000_000), None);
    // A counter that went back (a new cgroup under the same key) has no rate.
    assert_eq!(r.rate("x", 1, 6_000_000_000), None);
}

#[test]
fn pod_cgroup_needs_the_uid_and_one_parent() {
    let v1 = |p: &str| {
        cgroup::Location::V1(
            ["cpuacct", "memory"]
                .iter()
                .map(|c| {
                    (
                        (*c).to_owned(),
                        PathBuf::from(format!("/sys/fs/cgroup/{c}{p}")),
                    )
                })
                .collect(),
        )
    };
    let (x, y) = (
        v1("/kubepods/besteffort/pod1111-aaaa/c1"),
        v1("/kubepods/besteffort/pod1111-aaaa/c2"),
    );
    assert_eq!(
        pod_cgroup("1111-aaaa", &[&x, &y]),
        Some(v1("/kubepods/besteffort/pod1111-aaaa"))
    );
    assert_eq!(pod_cgroup("2222-bbbb", &[&x, &y]), None, "another pod's");
    let elsewhere = v1("/k8s.io/c3");
    assert_eq!(pod_cgroup("1111-aaaa", &[&x, &elsewhere]), None);
    assert_eq!(pod_cgroup("1111-aaaa", &[]), None);
    assert_eq!(
        parent_id("/kubepods/pod1/c1").as_deref(),
        Some("/kubepods/pod1")
    );
    assert_eq!(parent_id("/c1").as_deref(), Some("/"));
}

#[test]
fn cadvisor_text_parses_with_cadvisors_names_and_labels() {
    let root = v2_host("cadvisor");
    let (p, _) = provider(&root);
    let snap = rt::block_on(p.snapshot(pods()));
    let m = expose::Machine {
        cores: Some(4),
        boot_id: "b\"oot".into(),
        machine_id: "m".into(),
        system_uuid: String::new(),
    };
    let fams = prom_check(&expose::cadvisor(&snap, &m));
    let c1 = [
        ("container", "main"),
        ("pod", "a"),
        ("namespace", "default"),
        ("name", "c1"),
        ("image", "example.com/main:1"),
    ];
    assert_eq!(
        sample(
            &fams,
            "container_cpu_usage_seconds_total",
            &[c1[0], c1[1], ("cpu", "total")]
        ),
        Some(2.0)
    );
    assert_eq!(
        sample(&fams, "container_memory_working_set_bytes", &c1),
        Some(f64::from(10u32 << 20))
    );
    assert_eq!(
        sample(&fams, "container_memory_rss", &c1),
        Some(f64::from(6u32 << 20))
    );
    assert_eq!(
        sample(&fams, "container_fs_writes_bytes_total", &c1),
        Some(8192.0)
    );
    assert_eq!(sample(&fams, "container_oom_events_total", &c1), Some(0.0));
    assert_eq!(sample(&fams, "container_processes", &c1), Some(3.0));
    assert_eq!(
        sample(&fams, "container_start_time_seconds", &c1),
        Some(1_700_000_100.0)
    );
    // The pod's own cgroup: container "", its id; its PSI totals in seconds.
    let pod = [("container", ""), ("pod", "a"), ("id", POD_A)];
    assert_eq!(
        sample(&fams, "container_cpu_usage_seconds_total", &pod),
        Some(3.0)
    );
    assert_eq!(
        sample(
            &fams,
            "container_pressure_memory_waiting_seconds_total",
            &pod
        ),
        Some(2.5)
    );
    assert_eq!(
        sample(
            &fams,
            "container_pressure_memory_stalled_seconds_total",
            &pod
        ),
        Some(1.0)
    );
    // The root cgroup.
    assert_eq!(
        sample(&fams, "container_cpu_usage_seconds_total", &[("id", "/")]),
        Some(50.0)
    );
    assert_eq!(
        sample(&fams, "machine_cpu_cores", &[("boot_id", "b\"oot")]),
        Some(4.0)
    );
    assert_eq!(
        sample(&fams, "machine_memory_bytes", &[]),
        Some(1_024_000_000.0)
    );
    // No cpu.pressure anywhere: no family (as cAdvisor on a kernel without PSI).
    assert!(family(&fams, "container_pressure_cpu_waiting_seconds").is_none());
    let cpu = family(&fams, "container_cpu_usage_seconds").unwrap();
    assert_eq!(cpu["type"], "counter");
    let ts = cpu["samples"][0]["timestamp"].as_f64().unwrap();
    #[allow(clippy::cast_precision_loss)]
    let at = snap.at as f64 / 1e9;
    assert!((ts - at).abs() < 0.002, "timestamp {ts} vs {at}");
    std::fs::remove_dir_all(root).unwrap();
}

#[test]
fn resource_text_parses_with_the_kubelets_names() {
    let root = v2_host("resource");
    let (p, _) = provider(&root);
    let (snap, sum) = rt::block_on(p.snapshot_and_summary("n", pods()));
    let fams = prom_check(&expose::resource(&sum, snap.at));
    assert_eq!(
        sample(&fams, "node_cpu_usage_seconds_total", &[]),
        Some(50.0)
    );
    assert_eq!(
        sample(&fams, "node_memory_working_set_bytes", &[]),
        Some(716_800_000.0)
    );
    let main = [
        ("container", "main"),
        ("pod", "a"),
        ("namespace", "default"),
    ];
    assert_eq!(
        sample(&fams, "container_cpu_usage_seconds_total", &main),
        Some(2.0)
    );
    assert_eq!(
        sample(&fams, "container_memory_working_set_bytes", &main),
        Some(f64::from(10u32 << 20))
    );
    assert_eq!(
        sample(&fams, "container_start_time_seconds", &main),
        Some(1_700_000_100.0)
    );
    let a = [("pod", "a"), ("namespace", "default")];
    assert_eq!(sample(&fams, "pod_cpu_usage_seconds_total", &a), Some(3.0));
    assert_eq!(
        sample(&fams, "pod_memory_working_set_bytes", &a),
        Some(f64::from(16u32 << 20))
    );
    assert_eq!(sample(&fams, "resource_scrape_error", &[]), Some(0.0));
    assert_eq!(sample(&fams, "scrape_error", &[]), Some(0.0));
    let node = family(&fams, "node_cpu_usage_seconds").unwrap();
    assert!(node["samples"][0]["timestamp"].as_f64().is_some(), "{node}");
    assert!(node["help"].as_str().unwrap().starts_with("[STABLE] "));
    let start = family(&fams, "container_start_time_seconds").unwrap();
    assert!(
        start["samples"][0]["timestamp"].is_null(),
        "as upstream: {start}"
    );
    std::fs::remove_dir_all(root).unwrap();
}

#[test]
fn kubelet_text_parses_with_histograms_and_counters() {
    let mut relist = prom::Histogram::new(prom::DEF_BUCKETS);
    relist.observe(0.002);
    relist.observe(0.03);
    let interval = prom::Histogram::new(prom::DEF_BUCKETS);
    let mut start = prom::Histogram::new(prom::POD_START_BUCKETS);
    start.observe(1.5);
    let mut d = prom::Histogram::new(prom::RUNTIME_BUCKETS);
    d.observe(0.001);
    let ops = vec![
        (
            "list_podsandbox",
            expose::OpStats {
                total: 7,
                errors: 0,
                duration: d.clone(),
            },
        ),
        (
            "run_podsandbox",
            expose::OpStats {
                total: 2,
                errors: 1,
                duration: d,
            },
        ),
    ];
    let text = expose::kubelet(&expose::KubeletView {
        node_name: "edge-1",
        running_pods: 2,
        containers: [
            ("created", 0),
            ("running", 3),
            ("exited", 1),
            ("unknown", 0),
        ],
        relist_duration: &relist,
        relist_interval: &interval,
        pleg_last_seen: Some(1_700_000_000.5),
        pod_start: &start,
        ops: &ops,
        process: expose::read_process(),
    });
    let fams = prom_check(&text);
    assert_eq!(
        sample(&fams, "kubelet_node_name", &[("node", "edge-1")]),
        Some(1.0)
    );
    assert_eq!(sample(&fams, "kubelet_running_pods", &[]), Some(2.0));
    assert_eq!(
        sample(
            &fams,
            "kubelet_running_containers",
            &[("container_state", "running")]
        ),
        Some(3.0)
    );
    assert_eq!(
        sample(
            &fams,
            "kubelet_pleg_relist_duration_seconds_bucket",
            &[("le", "0.005")]
        ),
        Some(1.0)
    );
    assert_eq!(
        sample(&fams, "kubelet_pleg_relist_duration_seconds_count", &[]),
        Some(2.0)
    );
    assert_eq!(
        sample(&fams, "kubelet_pleg_relist_interval_seconds_count", &[]),
        Some(0.0)
    );
    assert_eq!(
        sample(
            &fams,
            "kubelet_pod_start_duration_seconds_bucket",
            &[("le", "2")]
        ),
        Some(1.0)
    );
    let op = |o| [("operation_type", o)];
    assert_eq!(
        sample(
            &fams,
            "kubelet_runtime_operations_total",
            &op("list_podsandbox")
        ),
        Some(7.0)
    );
    assert_eq!(
        sample(
            &fams,
            "kubelet_runtime_operations_errors_total",
            &op("run_podsandbox")
        ),
        Some(1.0)
    );
    assert_eq!(
        sample(
            &fams,
            "kubelet_runtime_operations_errors_total",
            &op("list_podsandbox")
        ),
        None,
        "only types that failed, as a counter vector"
    );
    assert_eq!(
        family(&fams, "kubelet_pleg_relist_duration_seconds").unwrap()["type"],
        "histogram"
    );
    assert!(sample(&fams, "process_resident_memory_bytes", &[]).unwrap() > 0.0);
    assert!(sample(&fams, "process_start_time_seconds", &[]).unwrap() > 1.6e9);
    assert!(sample(&fams, "process_cpu_seconds_total", &[]).is_some());
}

#[test]
fn provider_runs_without_cgroups() {
    // No mountinfo at all: node figures from what there is, no container located.
    let root = std::env::temp_dir().join(format!("picolet-stats-none-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&root);
    write(&root, &[("proc/stat", "cpu  1 0 1 100 0 0 0 0\nbtime 5\n")]);
    let facts = Rc::new(FakeFacts::default());
    let p = Provider::new(&root, &root, facts.clone());
    assert!(p.cgroups().is_none());
    let s = rt::block_on(p.summary("n", pods()));
    assert_eq!(s.pods.len(), 2);
    assert!(s.pods[0].containers[0].cpu.is_none());
    assert_eq!(facts.asked.get(), 0, "nothing to locate without cgroups");
    assert!(s.node.runtime.is_none());
    std::fs::remove_dir_all(root).unwrap();
}

#[test]
fn pods_from_the_pleg_cache() {
    use crate::kubecontainer::{ContainerStatus, PodRuntimeStatus, SandboxStatus};
    let mut cache = crate::pleg::Cache::default();
    let ctr = |id: &str, state| ContainerStatus {
        id: id.into(),
        sandbox_id: "s2".into(),
        name: id.into(),
        state,
        created_at: 1,
        started_at: 2,
        finished_at: 0,
        exit_code: 0,
        image: "img".into(),
        image_ref: "ref".into(),
        reason: "".into(),
        message: "".into(),
        hash: 0,
        restart_count: 0,
    };
    let sb = |id: &str, state| SandboxStatus {
        id: id.into(),
        attempt: 0,
        state,
        created_at: 7,
        ip: None,
        host_network: false,
    };
    cache.put(
        PodRuntimeStatus {
            uid: "u1".into(),
            name: "p".into(),
            namespace: "ns".into(),
            sandboxes: vec![
                sb("s2", SandboxState::Ready),
                sb("s1", SandboxState::NotReady),
            ],
            containers: vec![
                ctr("run", ContainerState::Running),
                ctr("dead", ContainerState::Exited),
            ],
        },
        1,
        None,
    );
    cache.put(
        PodRuntimeStatus {
            uid: "u2".into(),
            name: "stopped".into(),
            namespace: "ns".into(),
            sandboxes: vec![sb("s3", SandboxState::NotReady)],
            containers: vec![],
        },
        1,
        None,
    );
    let pods = pods_from_cache(&cache);
    assert_eq!(pods.len(), 1, "{pods:?}");
    assert_eq!(pods[0].start, 7);
    let ids: Vec<&str> = pods[0].containers.iter().map(|c| c.id.as_str()).collect();
    assert_eq!(ids, ["run"]);
}
