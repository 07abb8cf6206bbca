//! End-to-end tests of the kubepods cgroup tree: the real picolet binary against a real
//! containerd, with a `--cgroup-root` of the test's own (`/picolet-e2e-<pid>-<n>`) so parallel
//! tests and the machine's own cgroups are never touched; the test removes that tree at the end.
//! On a hybrid machine (the test host) the limits are read from the v1 hierarchies and the
//! accounting from the unified one's `cpu.stat`; on a v2-only machine (the booted guest,
//! `scripts/guest.sh e2e`) everything is read from the unified hierarchy: `memory.max`,
//! `cpu.max`, `cpu.weight` (the shares converted as runc converts them), `memory.events`.
//! They fail, never skip, when containerd, runc or busybox are missing
//! (`scripts/install-deps.sh` installs them).

mod support;

use support::{agent, containerd, pods, prom};

use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use agent::{Agent, test_dir};
use containerd::ScratchContainerd;
use serde_json::{Value, json};

const T: Duration = Duration::from_secs(90);

/// The cgroup tree under the test's root in every hierarchy; removed (deepest first) on drop,
/// after the containerd that holds processes in it has been stopped.
struct Tree {
    root: String,
    mounts: Vec<PathBuf>,
}

impl Tree {
    fn new(name: &str) -> Tree {
        let root = format!("/picolet-e2e-{}-{name}", std::process::id());
        let mounts = std::fs::read_to_string("/proc/self/mountinfo")
            .unwrap()
            .lines()
            .filter_map(|l| {
                let (pre, post) = l.split_once(" - ")?;
                let fstype = post.split(' ').next()?;
                let point = pre.split(' ').nth(4)?;
                (fstype == "cgroup" || fstype == "cgroup2").then(|| PathBuf::from(point))
            })
            .collect();
        let t = Tree { root, mounts };
        t.remove();
        t
    }

    /// The directory of `rel` under the root in the hierarchy mounted at `mount`.
    fn dir(&self, mount: &Path, rel: &str) -> PathBuf {
        mount
            .join(self.root.trim_start_matches('/'))
            .join(rel.trim_start_matches('/'))
    }

    fn remove(&self) {
        fn rmdir_tree(d: &Path) {
            if let Ok(entries) = std::fs::read_dir(d) {
                for e in entries.flatten() {
                    if e.file_type().is_ok_and(|t| t.is_dir()) {
                        rmdir_tree(&e.path());
                    }
                }
                let _ = std::fs::remove_dir(d);
            }
        }
        for m in &self.mounts {
            rmdir_tree(&m.join(self.root.trim_start_matches('/')));
        }
    }
}

impl Drop for Tree {
    fn drop(&mut self) {
        self.remove();
    }
}

/// The mount of a v1 controller on this machine.
fn v1_mount(controller: &str) -> PathBuf {
    let cg = picolet::cm::detect::detect(Path::new("/")).unwrap();
    cg.controllers
        .iter()
        .find(|(c, _)| c == controller)
        .map(|(_, p)| p.clone())
        .unwrap_or_else(|| panic!("no {controller} controller mounted: {cg:?}"))
}

/// Whether this machine has cgroup v2 alone (no v1 controller mounted); read once.
fn v2_only() -> bool {
    static V2: std::sync::OnceLock<bool> = std::sync::OnceLock::new();
    *V2.get_or_init(|| {
        picolet::cm::detect::detect(Path::new("/")).unwrap().mode
            == picolet::cm::detect::Mode::Unified
    })
}

/// Where a controller's files are: its v1 hierarchy, or the unified one on a v2-only machine.
fn mount_of(controller: &str) -> PathBuf {
    if v2_only() {
        unified_mount()
    } else {
        v1_mount(controller)
    }
}

/// The memory limit of the cgroup at `dir`, in bytes (`max`: none).
fn memory_limit(dir: &Path) -> String {
    read(&dir.join(if v2_only() {
        "memory.max"
    } else {
        "memory.limit_in_bytes"
    }))
}

/// Asserts the CPU weight of the cgroup at `dir`: `shares` on v1, the weight runc converts
/// them to on v2.
fn assert_cpu_shares(dir: &Path, shares: u64) {
    if v2_only() {
        let want = picolet::cm::resources::shares_to_weight(shares);
        assert_eq!(
            read(&dir.join("cpu.weight")),
            want.to_string(),
            "{}",
            dir.display()
        );
    } else {
        assert_eq!(
            read(&dir.join("cpu.shares")),
            shares.to_string(),
            "{}",
            dir.display()
        );
    }
}

/// Asserts the CFS quota of the cgroup at `dir` over a 100 ms period (`None`: no limit).
fn assert_cpu_quota(dir: &Path, quota_us: Option<u64>) {
    if v2_only() {
        let q = quota_us.map_or("max".to_owned(), |q| q.to_string());
        assert_eq!(
            read(&dir.join("cpu.max")),
            format!("{q} 100000"),
            "{}",
            dir.display()
        );
    } else {
        let q = quota_us.map_or("-1".to_owned(), |q| q.to_string());
        assert_eq!(read(&dir.join("cpu.cfs_quota_us")), q, "{}", dir.display());
        assert_eq!(
            read(&dir.join("cpu.cfs_period_us")),
            "100000",
            "{}",
            dir.display()
        );
    }
}

fn unified_mount() -> PathBuf {
    picolet::cm::detect::detect(Path::new("/"))
        .unwrap()
        .unified
        .expect("a cgroup2 mount (these machines have one at /sys/fs/cgroup/unified)")
}

fn read(p: &Path) -> String {
    std::fs::read_to_string(p)
        .unwrap_or_else(|e| panic!("reading {}: {e}", p.display()))
        .trim()
        .to_owned()
}

/// A pod that runs `script` once in a container `main` with these resources.
fn limited(name: &str, resources: Value, script: &str) -> String {
    let mut main = pods::container("main", script);
    main["resources"] = resources;
    pods::manifest(
        name,
        json!({"restartPolicy": "Never", "containers": [main]}),
    )
}

fn uid(a: &Agent, pod: &str) -> String {
    a.pod(pod).unwrap()["metadata"]["uid"]
        .as_str()
        .unwrap()
        .to_owned()
}

/// The pid of the pod's first container, from the runtime's task list.
fn container_pid(a: &Agent, c: &ScratchContainerd, pod: &str) -> u32 {
    let id = a.status(pod)["containerStatuses"][0]["containerID"]
        .as_str()
        .unwrap_or_default()
        .trim_start_matches("containerd://")
        .to_owned();
    c.tasks()
        .into_iter()
        .find(|t| t.id == id)
        .unwrap_or_else(|| panic!("no task for container {id:?} of {pod}"))
        .pid
}

/// `/proc/<pid>/cgroup` as (hierarchy's controllers, path) pairs.
fn proc_cgroup(pid: u32) -> Vec<(String, String)> {
    read(Path::new(&format!("/proc/{pid}/cgroup")))
        .lines()
        .filter_map(|l| {
            let mut f = l.splitn(3, ':');
            let _id = f.next()?;
            Some((f.next()?.to_owned(), f.next()?.to_owned()))
        })
        .collect()
}

#[test]
fn pods_land_in_the_kubepods_tree_with_their_limits() {
    let tree = Tree::new("tree");
    let d = test_dir("cgtree");
    let c = ScratchContainerd::start(&d.join("c"));
    let root_flag = format!("--cgroup-root={}", tree.root);

    // Preflight names the tree and what the driver needs, and reads containerd's driver.
    let (_, out) =
        agent::picolet_check(&["--container-runtime-endpoint", &c.endpoint(), &root_flag]);
    let kp = format!(
        "ok   kubepods: cgroupfs driver, pods under {}/kubepods",
        tree.root
    );
    assert!(out.lines().any(|l| l.starts_with(&kp)), "{out}");
    // containerd 2.x says which driver it uses (RuntimeConfig); 1.6 only shows its config.
    let reported = out
        .lines()
        .any(|l| l == "ok   cgroup driver: cgroupfs; the runtime: cgroupfs (RuntimeConfig)");
    assert!(
        reported
            || out.lines().any(|l| l
                == "ok   cgroup driver: cgroupfs; the runtime: cgroupfs (from its configuration)"),
        "{out}"
    );
    let (_, out) = agent::picolet_check(&[
        "--container-runtime-endpoint",
        &c.endpoint(),
        "--cgroup-driver=systemd",
    ]);
    // A driver the runtime reports wins with a warning (as upstream); one read from its
    // configuration is only a guess, and a mismatch stops picolet.
    let want = if reported {
        "WARN cgroup driver: cgroupfs: the runtime uses the cgroupfs cgroup driver: using it, not --cgroup-driver=systemd"
    } else {
        "FAIL cgroup driver: --cgroup-driver=systemd, but the runtime is configured for cgroupfs"
    };
    assert!(out.lines().any(|l| l.starts_with(want)), "{out}");

    // A pod cgroup left by a pod picolet no longer has (a crash, a reboot of picolet alone).
    let (cpu, mem, pids) = (mount_of("cpu"), mount_of("memory"), mount_of("pids"));
    let stale = "kubepods/besteffort/pod00000000-dead-4bad-8bad-000000000000";
    for m in [&cpu, &mem, &pids] {
        std::fs::create_dir_all(tree.dir(m, stale)).unwrap();
    }

    let a = Agent::start_with(
        &d.join("a"),
        &c.endpoint(),
        &[
            root_flag.clone(),
            "--kube-reserved=cpu=100m,memory=100Mi".into(),
            "--system-reserved=memory=28Mi".into(),
            "--pod-max-pids=64".into(),
        ],
    );
    let unified = unified_mount();
    // Housekeeping removes it; nothing else under the tree.
    a.wait_for("the leftover pod cgroup to be removed", T, |_| {
        [&cpu, &mem, &pids]
            .iter()
            .all(|m| !tree.dir(m, stale).exists())
    });
    assert!(tree.dir(&mem, "kubepods/besteffort").exists());

    // kubepods holds node allocatable: capacity minus both reservations.
    let meminfo = read(Path::new("/proc/meminfo"));
    let total_kb: i64 = meminfo
        .lines()
        .find_map(|l| l.strip_prefix("MemTotal:"))
        .and_then(|v| v.trim().trim_end_matches("kB").trim().parse().ok())
        .unwrap();
    let allocatable = total_kb * 1024 - (128 << 20);
    assert_eq!(
        memory_limit(&tree.dir(&mem, "kubepods")),
        // The kernel rounds the limit down to whole pages.
        (allocatable / 4096 * 4096).to_string()
    );
    let cpus = u64::try_from(std::thread::available_parallelism().unwrap().get()).unwrap();
    assert_cpu_shares(
        &tree.dir(&cpu, "kubepods"),
        (cpus * 1000 - 100) * 1024 / 1000,
    );
    assert_cpu_shares(&tree.dir(&cpu, "kubepods/besteffort"), 2);

    a.write_manifest(
        "g.yaml",
        &limited(
            "guaranteed",
            json!({"limits": {"cpu": "200m", "memory": "64Mi"}}),
            "while true; do :; done",
        ),
    );
    a.write_manifest(
        "b.yaml",
        &limited(
            "burstable",
            json!({"requests": {"cpu": "100m"}, "limits": {"memory": "32Mi"}}),
            "exec sleep 3600",
        ),
    );
    a.write_manifest(
        "be.yaml",
        &limited("besteffort", json!({}), "exec sleep 3600"),
    );
    for p in ["guaranteed", "burstable", "besteffort"] {
        a.wait_for(&format!("{p} to run"), T, |a| a.phase(p) == "Running");
    }

    let cases = [
        ("guaranteed", "kubepods"),
        ("burstable", "kubepods/burstable"),
        ("besteffort", "kubepods/besteffort"),
    ];
    for (name, parent) in cases {
        let pod_dir = format!("{parent}/pod{}", uid(&a, name));
        let pid = container_pid(&a, &c, name);
        let cg = proc_cgroup(pid);
        let want = format!("{}/{pod_dir}/", tree.root);
        // Every hierarchy, v1 and the unified one, places the container under its pod.
        let hierarchies: &[&str] = if v2_only() {
            &[""]
        } else {
            &["cpu,cpuacct", "memory", "pids", ""]
        };
        for &controllers in hierarchies {
            let (_, path) = cg
                .iter()
                .find(|(c, _)| {
                    c == controllers || (controllers == "cpu,cpuacct" && c.contains("cpu"))
                })
                .unwrap_or_else(|| panic!("{name}: no {controllers:?} line in {cg:?}"));
            assert!(path.starts_with(&want), "{name}: {path} not under {want}");
        }
        assert_eq!(read(&tree.dir(&pids, &pod_dir).join("pids.max")), "64");
        // The unified hierarchy accounts the pod's CPU for real.
        let stat = read(&tree.dir(&unified, &pod_dir).join("cpu.stat"));
        assert!(stat.starts_with("usage_usec "), "{stat}");
    }
    let g = format!("kubepods/pod{}", uid(&a, "guaranteed"));
    assert_cpu_shares(&tree.dir(&cpu, &g), 204);
    assert_cpu_quota(&tree.dir(&cpu, &g), Some(20_000));
    assert_eq!(memory_limit(&tree.dir(&mem, &g)), (64 << 20).to_string());
    let b = format!("kubepods/burstable/pod{}", uid(&a, "burstable"));
    assert_cpu_shares(&tree.dir(&cpu, &b), 102);
    assert_cpu_quota(&tree.dir(&cpu, &b), None);
    assert_eq!(memory_limit(&tree.dir(&mem, &b)), (32 << 20).to_string());
    // The burstable level weighs its pods' requests.
    assert_cpu_shares(&tree.dir(&cpu, "kubepods/burstable"), 102);
    let be = format!("kubepods/besteffort/pod{}", uid(&a, "besteffort"));
    assert_cpu_shares(&tree.dir(&cpu, &be), 2);

    // The busy loop of the guaranteed pod is held to its 200m quota, and accounted.
    let usage = |p: &str| -> u64 {
        read(&tree.dir(&unified, p).join("cpu.stat"))
            .lines()
            .find_map(|l| l.strip_prefix("usage_usec "))
            .and_then(|v| v.parse().ok())
            .unwrap()
    };
    // Timed by the clock, not the sleep: a loaded machine stretches the window.
    let (u0, t0) = (usage(&g), Instant::now());
    std::thread::sleep(Duration::from_secs(2));
    let (used, window) = (
        usage(&g) - u0,
        u64::try_from(t0.elapsed().as_micros()).unwrap(),
    );
    assert!(
        used >= window / 20 && used <= window / 5 + 100_000,
        "200m for {window} µs is about {} µs, got {used}",
        window / 5
    );

    // Removing the pod removes its cgroup from every hierarchy.
    a.remove_manifest("g.yaml");
    a.wait_for("the guaranteed pod's cgroup to go", T, |_| {
        tree.mounts.iter().all(|m| !tree.dir(m, &g).exists())
    });
    assert!(tree.dir(&mem, &b).exists(), "the other pods keep theirs");

    drop(a);
    c.stop();
}

#[test]
fn a_pod_over_its_memory_limit_is_oom_killed() {
    let tree = Tree::new("oom");
    let d = test_dir("cgoom");
    let c = ScratchContainerd::start(&d.join("c"));
    let a = Agent::start_with(
        &d.join("a"),
        &c.endpoint(),
        &[format!("--cgroup-root={}", tree.root)],
    );
    // The string doubles until the pod's 24Mi are gone.
    a.write_manifest(
        "hog.yaml",
        &limited(
            "hog",
            json!({"limits": {"memory": "24Mi", "cpu": "500m"}}),
            "a=xxxxxxxxxxxxxxxx; while true; do a=\"$a$a\"; done",
        ),
    );
    a.wait_for("the hog to be OOM-killed", T, |a| {
        a.status("hog")["containerStatuses"][0]["state"]["terminated"]["reason"] == "OOMKilled"
    });
    let st = a.status("hog");
    let term = &st["containerStatuses"][0]["state"]["terminated"];
    assert_eq!(term["exitCode"], 137, "{st}");
    assert_eq!(a.phase("hog"), "Failed", "{st}");
    let pod = format!("kubepods/pod{}", uid(&a, "hog"));
    let mem = mount_of("memory");
    let dir = tree.dir(&mem, &pod);
    assert_eq!(memory_limit(&dir), (24 << 20).to_string());
    // The pod's cgroup hit its limit: v1 counts it in memory.failcnt, v2 in memory.events
    // (`max`), with the kill as `oom_kill`.
    if v2_only() {
        let events = read(&dir.join("memory.events"));
        let count = |key: &str| -> u64 {
            events
                .lines()
                .find_map(|l| l.strip_prefix(key)?.trim().parse().ok())
                .unwrap_or(0)
        };
        assert!(count("max ") > 0 && count("oom_kill ") > 0, "{events}");
    } else {
        let failcnt: u64 = read(&dir.join("memory.failcnt")).parse().unwrap();
        assert!(failcnt > 0, "the pod's cgroup hit its limit");
    }
    drop(a);
    c.stop();
}

/// A pod in the kubepods tree is accounted from its own cgroup: `/stats/summary` gives the
/// pod's figures (its busy loop and the 32 MiB it wrote into a memory emptyDir), and
/// `/metrics/cadvisor` a series for the pod cgroup itself (`container=""`, `id` its path).
#[test]
fn a_pod_in_the_tree_is_accounted_from_its_own_cgroup() {
    let tree = Tree::new("stats");
    let d = test_dir("cgstats");
    let c = ScratchContainerd::start(&d.join("c"));
    let a = Agent::start_with(
        &d.join("a"),
        &c.endpoint(),
        &[format!("--cgroup-root={}", tree.root)],
    );
    a.write_manifest("busy.yaml", &pods::busy());
    a.wait_for("the busy pod to run", T, |a| {
        a.pod("busy")
            .is_some_and(|p| p["status"]["phase"] == "Running")
    });
    let uid = a.pod("busy").unwrap()["metadata"]["uid"]
        .as_str()
        .unwrap()
        .to_owned();
    let id = format!("{}/kubepods/besteffort/pod{uid}", tree.root);
    const MIB32: f64 = 33_554_432.0;
    let summary =
        |a: &Agent| -> Value { serde_json::from_str(&a.get("/stats/summary").unwrap()).unwrap() };
    let mut pod = Value::Null;
    a.wait_for("the pod's working set past 32 MiB", T, |a| {
        let s = summary(a);
        pod = s["pods"]
            .as_array()
            .and_then(|ps| {
                ps.iter()
                    .find(|p| p["podRef"]["uid"] == uid.as_str())
                    .cloned()
            })
            .unwrap_or_default();
        pod["memory"]["workingSetBytes"].as_f64().unwrap_or(0.0) >= MIB32
    });
    std::thread::sleep(Duration::from_secs(2));
    let s = summary(&a);
    let pod = s["pods"]
        .as_array()
        .unwrap()
        .iter()
        .find(|p| p["podRef"]["uid"] == uid.as_str())
        .unwrap();
    let nano = pod["cpu"]["usageNanoCores"].as_u64().unwrap_or(0);
    assert!(nano > 100_000_000, "pod usageNanoCores {nano}: {pod}");
    // The pod cgroup holds the pause process too: at least what its container uses.
    let ctr_cpu = pod["containers"][0]["cpu"]["usageCoreNanoSeconds"]
        .as_u64()
        .unwrap();
    let pod_cpu = pod["cpu"]["usageCoreNanoSeconds"].as_u64().unwrap();
    assert!(
        pod_cpu >= ctr_cpu,
        "pod {pod_cpu} < its container {ctr_cpu}"
    );

    let fams = prom::check(&a.get("/metrics/cadvisor").unwrap());
    let row = [
        ("container", ""),
        ("id", id.as_str()),
        ("pod", "busy-e2e-node"),
    ];
    let ws = prom::sample(&fams, "container_memory_working_set_bytes", &row);
    assert!(ws.unwrap_or(0.0) >= MIB32, "pod cgroup {id}: {ws:?}");
    let ctr = [("container", "main"), ("pod", "busy-e2e-node")];
    let ctr_id = fams
        .as_array()
        .unwrap()
        .iter()
        .flat_map(|f| f["samples"].as_array().unwrap())
        .find(|s| {
            s["name"] == "container_memory_working_set_bytes" && s["labels"]["container"] == "main"
        })
        .map(|s| s["labels"]["id"].as_str().unwrap().to_owned())
        .unwrap();
    assert!(
        ctr_id.starts_with(&format!("{id}/")),
        "{ctr_id} not under {id}"
    );
    assert!(prom::sample(&fams, "container_cpu_usage_seconds_total", &ctr).unwrap() > 0.0);
    a.remove_manifest("busy.yaml");
    a.wait_for("the pod cgroup to be removed", T, |_| {
        !tree
            .dir(
                &v1_mount("memory"),
                &format!("kubepods/besteffort/pod{uid}"),
            )
            .exists()
    });
}
