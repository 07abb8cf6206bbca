//! Quiet under failure, against a real containerd: a node where a pod cannot start (the runtime
//! has no CNI configuration: its network is not ready, so the pod gets no sandbox) and a leftover
//! pod cgroup cannot be removed (a process is kept in it) logs each failure once; over the
//! window that follows, while picolet keeps retrying all of it with backoff, it writes at most a
//! handful of lines at the default verbosity (the count is of lines, not of time). When the CNI
//! configuration appears, the runtime's status says its network is ready and the pod starts
//! within a few seconds, not at the end of its backoff. A second node, whose pod's image is on
//! a registry that refuses connections, is held to the same bound, its pod showing
//! ErrImagePull and ImagePullBackOff as upstream's does.
//!
//! The window ([`WINDOW`], 2 minutes) spans the backoff's first six periods (2 s doubling to
//! 64 s) at their real values: no test-only setting shortens them. Before this behaviour the
//! same node logged about 90 lines a minute.
//!
//! The cgroup is made under this test's own `--cgroup-root` (`/picolet-e2e-quiet-<pid>`) and
//! removed at the end; no other cgroup of the machine is touched.

mod support;

use std::path::{Path, PathBuf};
use std::process::{Child, Command};
use std::time::{Duration, Instant};

use support::{Pod, agent, containerd};

use agent::{Agent, test_dir};
use containerd::ScratchContainerd;

/// How long the log is watched once every failure has been reported.
const WINDOW: Duration = Duration::from_secs(120);
/// The most lines (info and above) the window may hold.
const MAX_LINES: usize = 5;
/// The longest a pod waiting for the network may take to run once the network is ready: the
/// runtime's status is read every second while its network is not ready, and its return has
/// the pod synced at once (its backoff, up to a minute by then, is not waited out). The rest is
/// containerd noticing the configuration, the sandbox, the container and a loaded machine.
const RECOVERY_MAX: Duration = Duration::from_secs(30);

/// A pod cgroup under the test's root in the hierarchies picolet uses, with a process kept in
/// it; on drop the process is killed and the tree removed (deepest first).
struct StuckCgroup {
    root: String,
    dirs: Vec<PathBuf>,
    holder: Child,
}

impl StuckCgroup {
    fn new(uid: &str) -> StuckCgroup {
        let root = format!("/picolet-e2e-quiet-{}", std::process::id());
        let cg = picolet::cm::detect::detect(Path::new("/")).expect("detect cgroups");
        let mounts: Vec<PathBuf> = if cg.controllers.is_empty() {
            cg.unified.iter().cloned().collect()
        } else {
            cg.controllers
                .iter()
                .filter(|(c, _)| matches!(c.as_str(), "cpu" | "memory" | "pids"))
                .map(|(_, p)| p.clone())
                .collect()
        };
        assert!(!mounts.is_empty(), "no cgroup hierarchy found: {cg:?}");
        let rel = format!("kubepods/besteffort/pod{uid}");
        let dirs: Vec<PathBuf> = mounts
            .iter()
            .map(|m| m.join(root.trim_start_matches('/')).join(&rel))
            .collect();
        let holder = Command::new("sleep")
            .arg("100000")
            .spawn()
            .expect("start sleep");
        let mut stuck = StuckCgroup { root, dirs, holder };
        for d in &stuck.dirs {
            std::fs::create_dir_all(d).unwrap_or_else(|e| panic!("mkdir {}: {e}", d.display()));
        }
        for d in &stuck.dirs {
            std::fs::write(d.join("cgroup.procs"), stuck.holder.id().to_string())
                .unwrap_or_else(|e| panic!("moving the holder into {}: {e}", d.display()));
        }
        // Whatever happens next, Drop cleans up.
        stuck.dirs.dedup();
        stuck
    }

    fn exists(&self) -> bool {
        self.dirs.iter().any(|d| d.exists())
    }
}

impl Drop for StuckCgroup {
    fn drop(&mut self) {
        let _ = self.holder.kill();
        let _ = self.holder.wait();
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
        // picolet makes its kubepods tree in every hierarchy: the root goes from each mount.
        let mounts = std::fs::read_to_string("/proc/self/mountinfo").unwrap_or_default();
        for l in mounts.lines() {
            let Some((pre, post)) = l.split_once(" - ") else {
                continue;
            };
            let fstype = post.split(' ').next().unwrap_or_default();
            if let Some(point) = pre.split(' ').nth(4)
                && (fstype == "cgroup" || fstype == "cgroup2")
            {
                rmdir_tree(&Path::new(point).join(self.root.trim_start_matches('/')));
            }
        }
    }
}

/// The lines at the default verbosity (info, warnings, errors): what a device's journal gets.
fn default_lines(text: &str) -> Vec<&str> {
    text.lines()
        .filter(|l| matches!(l.as_bytes().first(), Some(b'I' | b'W' | b'E' | b'F')))
        .collect()
}

#[test]
fn a_stuck_pod_and_a_stuck_cgroup_cost_a_bounded_number_of_lines() {
    let d = test_dir("quiet");
    let c = ScratchContainerd::start(&d.join("c"));
    // No CNI configuration: the runtime cannot set up a pod's network.
    let conf = c.dir.join("cni/conf");
    let saved = d.join("cni-saved");
    let _ = std::fs::remove_dir_all(&saved);
    std::fs::create_dir_all(&saved).unwrap();
    let mut names = Vec::new();
    for e in std::fs::read_dir(&conf).unwrap().flatten() {
        std::fs::rename(e.path(), saved.join(e.file_name())).unwrap();
        names.push(e.file_name());
    }
    assert!(
        !names.is_empty(),
        "the scratch containerd has a CNI conflist"
    );

    let uid = format!("00000000-e2e0-4bad-8bad-{:012}", std::process::id());
    let stuck = StuckCgroup::new(&uid);
    let mut a = Agent::start_with(
        &d.join("a"),
        &c.endpoint(),
        &[format!("--cgroup-root={}", stuck.root)],
    );
    a.write_manifest("stuck", &Pod::new("stuck").yaml());

    // The first report of each failure: a warning with its cause. (A runtime that keeps the
    // sandboxes whose network failed, as containerd 1.6 does, adds a third: their removal by
    // container GC, which fails the same way; containerd 2.x removes them itself. Where it
    // comes after these two, it is one more line in the window below.)
    let leftover = format!("removing leftover directory of pod {uid}: ");
    let warned = |a: &Agent, what: &str| {
        a.log_text()
            .lines()
            .any(|l| l.starts_with('W') && l.contains(what))
    };
    a.wait_for(
        "the first reports of the stuck pod and the stuck cgroup",
        Duration::from_secs(90),
        |a| warned(a, &leftover) && warned(a, "sync of pod stuck"),
    );

    let start = a.log_text().len();
    let t0 = Instant::now();
    std::thread::sleep(WINDOW);
    let text = a.log_text();
    let window = &text[start..];
    let lines = default_lines(window);
    eprintln!(
        "{} lines at the default verbosity over {:?} ({} bytes of log at -v=4)",
        lines.len(),
        t0.elapsed(),
        window.len()
    );
    assert!(
        lines.len() <= MAX_LINES,
        "{} lines in {WINDOW:?}, at most {MAX_LINES} allowed:\n{}",
        lines.len(),
        lines.join("\n")
    );
    // Quiet, not idle: picolet kept retrying the pod (its debug lines say so: no sandbox while
    // the network is not ready; the attempt itself if the runtime's status had not said so
    // yet) and nothing was removed.
    assert!(
        window.contains("pod stuck-") && window.contains("no new sandbox while the network")
            || window.contains("creating sandbox for pod stuck"),
        "no sync attempt in the window:\n{window}"
    );
    assert!(stuck.exists(), "the held cgroup cannot have been removed");

    // The CNI configuration appears: the pod starts within one retry period.
    for n in &names {
        let tmp = conf.join(".tmp");
        std::fs::copy(saved.join(n), &tmp).unwrap();
        std::fs::rename(&tmp, conf.join(n)).unwrap();
    }
    let t1 = Instant::now();
    let before = a.log_text().len();
    a.wait_for(
        "the pod to run once its network can be set up",
        RECOVERY_MAX,
        |a| a.phase("stuck") == "Running",
    );
    eprintln!(
        "the pod ran {:?} after the CNI configuration appeared",
        t1.elapsed()
    );
    a.wait_for("the recovery line", Duration::from_secs(10), |a| {
        a.log_text().lines().any(|l| {
            l.starts_with('I') && l.contains("sync of pod stuck") && l.contains("succeeded after")
        })
    });
    // The network's return is one line, the pod's recovery another.
    let ready = a.log_text()[before..]
        .lines()
        .any(|l| l.starts_with('I') && l.contains("container runtime network is ready"));
    assert!(ready, "no line saying the network is ready");
    a.kill9();
    drop(c);
    drop(stuck);
}

/// The first container's waiting reason and message (empty when it does not wait).
fn waiting(a: &Agent, name: &str) -> (String, String) {
    let w = &a.status(name)["containerStatuses"][0]["state"]["waiting"];
    let s = |k: &str| w[k].as_str().unwrap_or_default().to_owned();
    (s("reason"), s("message"))
}

#[test]
fn an_unreachable_registry_costs_a_bounded_number_of_lines() {
    let d = test_dir("quiet-registry");
    let c = ScratchContainerd::start(&d.join("c"));
    // A loopback port nothing listens on: every pull is refused at once.
    let port = agent::free_port();
    let image = format!("127.0.0.1:{port}/quiet/none:1");
    let mut a = Agent::start(&d.join("a"), &c.endpoint());
    a.write_manifest("pull", &Pod::new("pull").image(&image).yaml());
    // The window starts once the failure is both logged and in the pod's status: the worker
    // logs it during the sync and updates the status after looking at the runtime once more,
    // which on a slow machine comes a while later (the status said ContainerCreating till then).
    a.wait_for(
        "the first report of the failed pull, in the log and the status",
        Duration::from_secs(90),
        |a| {
            a.log_text()
                .lines()
                .any(|l| l.starts_with('W') && l.contains("sync of pod pull"))
                && matches!(
                    waiting(a, "pull").0.as_str(),
                    "ErrImagePull" | "ImagePullBackOff"
                )
        },
    );
    let pulls = |c: &ScratchContainerd| {
        let log = std::fs::read_to_string(c.dir.join("containerd.log")).unwrap_or_default();
        // containerd logs each CRI PullImage request (and each failure, "... failed").
        log.lines()
            .filter(|l| {
                l.contains("PullImage") && l.contains("quiet/none") && !l.contains("failed")
            })
            .count()
    };
    let (start, pulls0) = (a.log_text().len(), pulls(&c));
    let t0 = Instant::now();
    // The pod's status, looked at every 2 s over the window: why its container waits.
    let mut reasons = std::collections::BTreeSet::new();
    let mut pull_message = String::new();
    while t0.elapsed() < WINDOW {
        let (reason, message) = waiting(&a, "pull");
        if reason == "ErrImagePull" {
            pull_message = message;
        }
        reasons.insert(reason);
        std::thread::sleep(Duration::from_secs(2));
    }
    let text = a.log_text();
    let window = &text[start..];
    let lines = default_lines(window);
    let retried = pulls(&c) - pulls0;
    eprintln!(
        "{} lines at the default verbosity over {:?} ({} bytes of log at -v=4), {retried} pulls \
         refused meanwhile, waiting reasons seen: {reasons:?}",
        lines.len(),
        t0.elapsed(),
        window.len()
    );
    assert!(
        lines.len() <= MAX_LINES,
        "{} lines in {WINDOW:?}, at most {MAX_LINES} allowed:\n{}",
        lines.len(),
        lines.join("\n")
    );
    // Quiet, not idle: the runtime was asked again (the pull backoff: 10 s doubling).
    assert!(retried >= 2, "{retried} pulls in the window");
    // As upstream: ErrImagePull with the pull's error, ImagePullBackOff while backing off;
    // nothing else.
    assert!(
        reasons.contains("ImagePullBackOff") && reasons.contains("ErrImagePull"),
        "{reasons:?}"
    );
    assert!(
        reasons
            .iter()
            .all(|r| r == "ErrImagePull" || r == "ImagePullBackOff"),
        "{reasons:?}"
    );
    assert!(
        pull_message.contains(&format!("127.0.0.1:{port}")),
        "{pull_message}"
    );
    assert_eq!(a.phase("pull"), "Pending");
    a.kill9();
    drop(c);
}
