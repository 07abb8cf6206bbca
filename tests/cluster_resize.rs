//! In-place pod resize against a real control plane and a real containerd: the picolet binary
//! joins as node `e2e-node` with a kubepods tree under a `--cgroup-root` of the test's own, a
//! pod is resized through the `resize` subresource (`kubectl patch --subresource resize`), and
//! the limits are read back from the cgroup files, inside the container (as upstream's
//! `pod_resize.go` reads them) and of the pod cgroup on the host, and from the pod's status.
//! A resize the node cannot fit yet is deferred with upstream's condition and message, survives
//! a restart of picolet without being applied, and is applied once room is made. It fails,
//! never skips, when a prerequisite is missing.

mod support;

use support::{IMAGE, NODE, agent, cluster_wait, containerd, control_plane};

use std::path::PathBuf;
use std::time::Duration;

use agent::test_dir;
use containerd::ScratchContainerd;
use control_plane::ControlPlane;

const T: Duration = Duration::from_secs(90);

fn get(cp: &ControlPlane, args: &[&str]) -> String {
    let mut a = args.to_vec();
    a.push("--ignore-not-found");
    cp.admin_run(&a, None).stdout.trim().to_owned()
}

fn pod_json(cp: &ControlPlane, name: &str) -> serde_json::Value {
    let out = cp.admin(&["get", "pod", name, "-o", "json"]);
    serde_json::from_str(&out).unwrap()
}

/// The cgroup tree under the test's root in every hierarchy; removed on drop (deepest first).
struct Tree {
    root: String,
    mounts: Vec<(PathBuf, String)>,
}

impl Tree {
    fn new() -> Tree {
        let root = format!("/picolet-resize-{}", std::process::id());
        // (mount point, its super options: the v1 controllers, or "" for the unified one)
        let mounts = std::fs::read_to_string("/proc/self/mountinfo")
            .unwrap()
            .lines()
            .filter_map(|l| {
                let (pre, post) = l.split_once(" - ")?;
                let mut p = post.split(' ');
                let fstype = p.next()?;
                let opts = p.nth(1).unwrap_or("").to_owned();
                let point = pre.split(' ').nth(4)?;
                match fstype {
                    "cgroup" => Some((PathBuf::from(point), opts)),
                    "cgroup2" => Some((PathBuf::from(point), String::new())),
                    _ => None,
                }
            })
            .collect();
        Tree { root, mounts }
    }

    /// A control file of the cgroup `rel` under the root: the v1 hierarchy holding
    /// `controller` when there is one, else the unified one's `v2` file.
    fn read(&self, rel: &str, controller: &str, v1: &str, v2: &str) -> String {
        let v1_mount = self
            .mounts
            .iter()
            .find(|(_, o)| o.split(',').any(|x| x == controller));
        let (mount, file) = match v1_mount {
            Some((m, _)) => (m, v1),
            None => (
                &self
                    .mounts
                    .iter()
                    .find(|(_, o)| o.is_empty())
                    .expect("a cgroup mount")
                    .0,
                v2,
            ),
        };
        let p = mount
            .join(self.root.trim_start_matches('/'))
            .join(rel)
            .join(file);
        std::fs::read_to_string(&p)
            .unwrap_or_else(|e| panic!("{}: {e}", p.display()))
            .trim()
            .to_owned()
    }

    fn remove(&self) {
        fn rmdir_tree(d: &std::path::Path) {
            if let Ok(entries) = std::fs::read_dir(d) {
                for e in entries.flatten() {
                    if e.file_type().is_ok_and(|t| t.is_dir()) {
                        rmdir_tree(&e.path());
                    }
                }
                let _ = std::fs::remove_dir(d);
            }
        }
        for (m, _) in &self.mounts {
            rmdir_tree(&m.join(self.root.trim_start_matches('/')));
        }
    }
}

impl Drop for Tree {
    fn drop(&mut self) {
        self.remove();
    }
}

/// The running container named `name` of pod `pod`.
fn container(c: &ScratchContainerd, pod: &str, name: &str) -> Option<String> {
    let running = c.running_task_ids();
    c.containers_with_labels(&[
        ("io.kubernetes.pod.name", pod),
        ("io.kubernetes.container.name", name),
    ])
    .into_iter()
    .find(|id| running.contains(id))
}

/// A cgroup file as the container sees it: v2's `v2` file, or v1's under its controller.
fn cgroup_in(c: &ScratchContainerd, id: &str, v1: &str, v2: &str) -> String {
    static N: std::sync::atomic::AtomicU32 = std::sync::atomic::AtomicU32::new(0);
    let exec = format!("cg{}", N.fetch_add(1, std::sync::atomic::Ordering::Relaxed));
    let script = format!("cat /sys/fs/cgroup/{v2} 2>/dev/null || cat /sys/fs/cgroup/{v1}");
    c.ctr(&["tasks", "exec", "--exec-id", &exec, id, "sh", "-c", &script])
        .trim()
        .to_owned()
}

/// (CPU quota per 100 ms period, memory limit in bytes) of a container, read inside it.
fn limits_in(c: &ScratchContainerd, id: &str) -> (String, String) {
    let cpu = cgroup_in(c, id, "cpu/cpu.cfs_quota_us", "cpu.max");
    let mem = cgroup_in(c, id, "memory/memory.limit_in_bytes", "memory.max");
    (cpu.split(' ').next().unwrap_or("").to_owned(), mem)
}

fn resources(cpu: &str, mem: &str) -> String {
    format!(
        r#"{{"requests":{{"cpu":"{cpu}","memory":"{mem}"}},"limits":{{"cpu":"{cpu}","memory":"{mem}"}}}}"#
    )
}

fn resize(cp: &ControlPlane, pod: &str, c1: (&str, &str), c2: (&str, &str)) -> String {
    let patch = format!(
        r#"{{"spec":{{"containers":[{{"name":"c1","resources":{}}},{{"name":"c2","resources":{}}}]}}}}"#,
        resources(c1.0, c1.1),
        resources(c2.0, c2.1)
    );
    cp.admin(&[
        "patch",
        "pod",
        pod,
        "--subresource",
        "resize",
        "--type",
        "strategic",
        "-p",
        &patch,
    ])
}

/// Whether the pod's status has caught up with its generation and shows no resize condition.
fn resize_done(p: &serde_json::Value) -> bool {
    p["status"]["observedGeneration"] == p["metadata"]["generation"]
        && !p["status"]["conditions"]
            .as_array()
            .into_iter()
            .flatten()
            .any(|c| {
                c["type"]
                    .as_str()
                    .is_some_and(|t| t.starts_with("PodResize"))
            })
}

fn status_of<'a>(p: &'a serde_json::Value, name: &str) -> &'a serde_json::Value {
    p["status"]["containerStatuses"]
        .as_array()
        .and_then(|cs| cs.iter().find(|c| c["name"] == name))
        .unwrap_or(&serde_json::Value::Null)
}

#[test]
fn a_pod_is_resized_in_place_through_the_resize_subresource() {
    let dir = test_dir("cluster-resize");
    let tree = Tree::new();
    let (cp, c, mut a) = control_plane::joined_node(
        &dir,
        &[
            format!("--cgroup-root={}", tree.root),
            // A deferred resize is weighed again at the pod's next sync.
            "--sync-frequency=10s".into(),
        ],
    );
    cluster_wait("the node Ready", T, &a, &cp, || {
        get(
            &cp,
            &[
                "get",
                "node",
                NODE,
                "-o",
                "jsonpath={.status.conditions[?(@.type==\"Ready\")].status}",
            ],
        ) == "True"
    });
    assert_eq!(
        get(
            &cp,
            &[
                "get",
                "node",
                NODE,
                "-o",
                "jsonpath={.status.declaredFeatures}"
            ]
        ),
        "",
        "nothing declared"
    );

    let manifest = format!(
        r#"{{"apiVersion":"v1","kind":"Pod","metadata":{{"name":"rs","namespace":"default"}},
"spec":{{"nodeName":"{NODE}","terminationGracePeriodSeconds":1,"containers":[
 {{"name":"c1","image":"{IMAGE}","imagePullPolicy":"IfNotPresent","command":["sleep","3600"],
   "resources":{},
   "resizePolicy":[{{"resourceName":"cpu","restartPolicy":"NotRequired"}},
                   {{"resourceName":"memory","restartPolicy":"NotRequired"}}]}},
 {{"name":"c2","image":"{IMAGE}","imagePullPolicy":"IfNotPresent","command":["sleep","3600"],
   "resources":{},
   "resizePolicy":[{{"resourceName":"memory","restartPolicy":"RestartContainer"}}]}}]}}}}"#,
        resources("100m", "64Mi"),
        resources("100m", "64Mi")
    );
    cp.admin_stdin(&["apply", "-f", "-"], &manifest);
    cluster_wait("rs Running", T, &a, &cp, || {
        get(&cp, &["get", "pod", "rs", "-o", "jsonpath={.status.phase}"]) == "Running"
    });
    let uid = get(&cp, &["get", "pod", "rs", "-o", "jsonpath={.metadata.uid}"]);
    let c1 = container(&c, "rs", "c1").expect("c1 running");
    assert_eq!(limits_in(&c, &c1), ("10000".into(), "67108864".into()));
    let p = pod_json(&cp, "rs");
    assert_eq!(status_of(&p, "c1")["allocatedResources"]["cpu"], "100m");
    assert_eq!(status_of(&p, "c1")["resources"]["limits"]["memory"], "64Mi");
    assert_eq!(p["status"]["observedGeneration"], 1);
    // The pod cgroup (Guaranteed: directly under kubepods) holds both containers' limits.
    let pod_cg = format!("kubepods/pod{uid}");
    let quota = || tree.read(&pod_cg, "cpu", "cpu.cfs_quota_us", "cpu.max");
    let memory = || tree.read(&pod_cg, "memory", "memory.limit_in_bytes", "memory.max");
    assert!(quota().starts_with("20000"), "{}", quota());
    assert_eq!(memory(), (128u64 << 20).to_string());

    // c1 grows in place; c2's memory policy restarts it.
    resize(&cp, "rs", ("200m", "96Mi"), ("100m", "96Mi"));
    cluster_wait("the resize applied", T, &a, &cp, || {
        resize_done(&pod_json(&cp, "rs"))
    });
    let p = pod_json(&cp, "rs");
    assert_eq!(p["metadata"]["generation"], 2);
    assert_eq!(
        container(&c, "rs", "c1").as_deref(),
        Some(c1.as_str()),
        "c1 kept"
    );
    assert_eq!(
        limits_in(&c, &c1),
        ("20000".into(), (96u64 << 20).to_string())
    );
    let c2 = container(&c, "rs", "c2").expect("c2 running");
    assert_eq!(limits_in(&c, &c2).1, (96u64 << 20).to_string());
    assert_eq!(status_of(&p, "c1")["restartCount"], 0);
    assert_eq!(status_of(&p, "c2")["restartCount"], 1);
    assert_eq!(status_of(&p, "c1")["resources"]["requests"]["cpu"], "200m");
    assert_eq!(status_of(&p, "c2")["allocatedResources"]["memory"], "96Mi");
    assert!(quota().starts_with("30000"), "{}", quota());
    assert_eq!(memory(), (192u64 << 20).to_string());

    // Another pod takes what is left of the node's CPU: a further resize of c1 waits.
    let alloc = get(
        &cp,
        &[
            "get",
            "node",
            NODE,
            "-o",
            "jsonpath={.status.allocatable.cpu}",
        ],
    );
    let alloc_milli: i64 = match alloc.strip_suffix('m') {
        Some(m) => m.parse().unwrap(),
        None => alloc.parse::<i64>().unwrap() * 1000,
    };
    let hog = alloc_milli - 300;
    cp.admin_stdin(
        &["apply", "-f", "-"],
        &format!(
            r#"{{"apiVersion":"v1","kind":"Pod","metadata":{{"name":"hog","namespace":"default"}},
"spec":{{"nodeName":"{NODE}","terminationGracePeriodSeconds":1,"containers":[
 {{"name":"main","image":"{IMAGE}","imagePullPolicy":"IfNotPresent","command":["sleep","3600"],
   "resources":{{"requests":{{"cpu":"{hog}m"}}}}}}]}}}}"#
        ),
    );
    cluster_wait("hog Running", T, &a, &cp, || {
        get(
            &cp,
            &["get", "pod", "hog", "-o", "jsonpath={.status.phase}"],
        ) == "Running"
    });
    resize(&cp, "rs", ("300m", "96Mi"), ("100m", "96Mi"));
    let pending = || {
        get(
            &cp,
            &[
                "get",
                "pod",
                "rs",
                "-o",
                "jsonpath={.status.conditions[?(@.type==\"PodResizePending\")].reason}|{.status.conditions[?(@.type==\"PodResizePending\")].message}",
            ],
        )
    };
    let want = format!(
        "Deferred|Node didn't have enough resource: cpu, requested: 400, used: {hog}, capacity: {alloc_milli}"
    );
    cluster_wait("the resize deferred", T, &a, &cp, || pending() == want);
    assert_eq!(limits_in(&c, &c1).0, "20000", "nothing applied in part");
    let p = pod_json(&cp, "rs");
    assert_eq!(status_of(&p, "c1")["allocatedResources"]["cpu"], "200m");

    // A restart of picolet neither applies it nor forgets what was applied.
    a.restart();
    std::thread::sleep(Duration::from_secs(5));
    cluster_wait("still deferred after a restart", T, &a, &cp, || {
        pending() == want
    });
    assert_eq!(container(&c, "rs", "c1").as_deref(), Some(c1.as_str()));
    assert_eq!(limits_in(&c, &c1).0, "20000");
    assert_eq!(status_of(&pod_json(&cp, "rs"), "c2")["restartCount"], 1);

    // Room made: the deferred resize goes through at the pod's next sync.
    cp.admin(&["delete", "pod", "hog", "--wait=true"]);
    cluster_wait("the deferred resize applied", T, &a, &cp, || {
        resize_done(&pod_json(&cp, "rs"))
    });
    assert_eq!(limits_in(&c, &c1).0, "30000");
    assert!(quota().starts_with("40000"), "{}", quota());

    cp.admin(&["delete", "pod", "rs", "--wait=true"]);
    drop(a);
    c.stop();
}
