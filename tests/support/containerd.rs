//! A private containerd (1.6, CRI plugin on) for end-to-end tests, driven by
//! `scripts/scratch-containerd.sh`. std only.
//!
//! Every instance lives under its own directory; `Drop` stops it (containerd, its
//! shims and pods, its mounts). Missing prerequisites (containerd, runc, the CNI
//! plugins, busybox-static, root) make `start` panic: such a test fails, it never
//! skips silently.
//!
//! The images `picolet.local/pause:1` (the CRI sandbox image; it sleeps forever)
//! and `picolet.local/busybox:1` ([`super::IMAGE`]: busybox with sh, sleep, echo, cat, wget, nc, tar,
//! httpd, ...; default command `sh`) are imported into namespace `k8s.io`.
//! Pods get addresses in 10.244.77.0/24 on the bridge `picolet0`.
use std::collections::BTreeSet;
use std::fs;
use std::path::{Path, PathBuf};
use std::process::{Command, Output};

use super::describe;

/// Builds the image archive `tar` offline with scripts/build-image.sh: named `name`, with the
/// script's `options` (`--add DIR`, `--user USER`, ...) and `cmd` as the image's command
/// (empty: `sh`). Panics with the script's stderr if it fails.
pub fn build_image(tar: &Path, name: &str, options: &[&str], cmd: &[&str]) {
    let out = Command::new("bash")
        .arg(super::script("build-image.sh"))
        .args(options)
        .arg(tar)
        .arg(name)
        .args(cmd)
        .output()
        .expect("run build-image.sh");
    assert!(
        out.status.success(),
        "build-image.sh {name}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
}

/// The script that drives it, under `scripts/`.
const SCRIPT: &str = "scratch-containerd.sh";

/// The sandbox image the CRI plugin is configured with.
pub const PAUSE_IMAGE: &str = "picolet.local/pause:1";
/// The containerd namespace of the CRI plugin.
pub const CRI_NAMESPACE: &str = "k8s.io";

/// One task as `ctr tasks ls` shows it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Task {
    pub id: String,
    pub pid: u32,
    /// RUNNING, STOPPED, CREATED, PAUSED, ...
    pub status: String,
}

pub struct ScratchContainerd {
    pub dir: PathBuf,
    pub socket: PathBuf,
}

fn run_script(action: &str, dir: &Path) -> Output {
    run_script_env(action, dir, &[])
}

fn run_script_env(action: &str, dir: &Path, env: &[(&str, &Path)]) -> Output {
    let script = super::script(SCRIPT);
    Command::new("bash")
        .arg(&script)
        .arg(action)
        .arg(dir)
        .envs(env.iter().map(|(k, v)| (*k, *v)))
        .output()
        .unwrap_or_else(|e| panic!("cannot run bash {}: {e}", script.display()))
}

fn log_tail(dir: &Path, lines: usize) -> String {
    super::file_tail(&dir.join("containerd.log"), lines)
}

/// Quotes a containerd filter value or label key ("..." with \ and " escaped).
fn filter_quote(s: &str) -> String {
    let mut q = String::with_capacity(s.len() + 2);
    q.push('"');
    for c in s.chars() {
        if c == '"' || c == '\\' {
            q.push('\\');
        }
        q.push(c);
    }
    q.push('"');
    q
}

impl ScratchContainerd {
    /// Starts a fresh private containerd under `dir` (created if missing) and
    /// waits until its CRI service answers. Leftovers of an earlier run in the
    /// same `dir` (say, a test process that was killed) are stopped first and its
    /// metadata and snapshots (`dir/root`) are deleted, so the instance starts
    /// with no containers and just the two images (the built image archives
    /// cached in `dir/images` are kept). Panics with the script's output and the
    /// containerd log tail on any failure.
    ///
    /// Keep `dir` short: unix socket paths are limited to 107 bytes.
    pub fn start(dir: &Path) -> ScratchContainerd {
        Self::start_env(dir, &[])
    }

    /// [`Self::start`], with the CRI plugin's registry `config_path` set to `hosts` (a
    /// directory of `<host:port>/hosts.toml`, containerd's registry host configuration).
    pub fn start_with_registry_hosts(dir: &Path, hosts: &Path) -> ScratchContainerd {
        Self::start_env(dir, &[("SCRATCH_CONTAINERD_REGISTRY_HOSTS", hosts)])
    }

    fn start_env(dir: &Path, env: &[(&str, &Path)]) -> ScratchContainerd {
        let dir = if dir.is_absolute() {
            dir.to_path_buf()
        } else {
            std::env::current_dir().expect("current dir").join(dir)
        };
        let out = run_script("stop", &dir);
        if !out.status.success() {
            panic!(
                "scratch-containerd.sh stop {} (clearing leftovers before start) failed\n{}",
                dir.display(),
                describe(&out)
            );
        }
        // `stop` leaves nothing mounted under dir (it fails otherwise).
        let root = dir.join("root");
        if root.exists() {
            fs::remove_dir_all(&root)
                .unwrap_or_else(|e| panic!("cannot remove {}: {e}", root.display()));
        }
        let out = run_script_env("start", &dir, env);
        if !out.status.success() {
            // The script already stops what a failed start launched; make sure.
            let _ = run_script("stop", &dir);
            panic!(
                "scratch-containerd.sh start {} failed (containerd, runc, containernetworking-plugins, \
                 busybox-static and root are required)\n{}\n--- containerd.log (tail) ---\n{}",
                dir.display(),
                describe(&out),
                log_tail(&dir, 40)
            );
        }
        let stdout = String::from_utf8_lossy(&out.stdout);
        let socket = stdout
            .lines()
            .rev()
            .map(str::trim)
            .find(|l| !l.is_empty())
            .map(PathBuf::from)
            .unwrap_or_else(|| {
                panic!(
                    "scratch-containerd.sh start printed no socket path\n{}",
                    describe(&out)
                )
            });
        // The script works on the canonical path; so do we.
        let dir = socket
            .parent()
            .map(Path::to_path_buf)
            .unwrap_or_else(|| panic!("socket path {} has no parent", socket.display()));
        ScratchContainerd { dir, socket }
    }

    /// Kills containerd only (shims and pods keep running) and starts it again
    /// with the same config; returns once its CRI service answers.
    pub fn restart(&self) {
        let out = run_script("restart", &self.dir);
        if !out.status.success() {
            panic!(
                "scratch-containerd.sh restart {} failed\n{}\n--- containerd.log (tail) ---\n{}",
                self.dir.display(),
                describe(&out),
                self.log_tail(40)
            );
        }
    }

    /// Stops containerd, every shim and pod of this instance and unmounts
    /// everything under `dir`. Idempotent; `Drop` calls it too.
    pub fn stop(&self) {
        let out = run_script("stop", &self.dir);
        if !out.status.success() {
            panic!(
                "scratch-containerd.sh stop {} failed\n{}",
                self.dir.display(),
                describe(&out)
            );
        }
    }

    /// The CRI endpoint, as picolet's config takes it: `unix:///.../containerd.sock`.
    pub fn endpoint(&self) -> String {
        format!("unix://{}", self.socket.display())
    }

    /// The last `lines` lines of containerd's log.
    pub fn log_tail(&self, lines: usize) -> String {
        log_tail(&self.dir, lines)
    }

    /// The runtime's version as the CRI `Version` call gives it, without a leading `v`:
    /// `1.6.20`, `2.1.4`.
    pub fn runtime_version(&self) -> String {
        use picolet::cri::v1;
        let cri =
            picolet::cri::Cri::new(&self.endpoint(), None, picolet::cri::Deadlines::default())
                .unwrap();
        let v = picolet::rt::block_on(cri.version(v1::VersionRequest::default())).expect("Version");
        v.runtime_version.trim_start_matches('v').to_owned()
    }

    /// Runs `ctr -a SOCKET -n k8s.io ARGS...` (the ctr of `SCRATCH_CONTAINERD_BIN` when that
    /// names another containerd, as scripts/scratch-containerd.sh runs); returns its stdout,
    /// or its stderr (with the exit status) as the error.
    pub fn try_ctr(&self, args: &[&str]) -> Result<String, String> {
        let ctr = match std::env::var_os("SCRATCH_CONTAINERD_BIN") {
            Some(bin) if !bin.is_empty() => Path::new(&bin).join("ctr"),
            _ => PathBuf::from("ctr"),
        };
        let out = Command::new(ctr)
            .arg("--connect-timeout")
            .arg("5s")
            .arg("-a")
            .arg(&self.socket)
            .arg("-n")
            .arg(CRI_NAMESPACE)
            .args(args)
            .output()
            .map_err(|e| format!("cannot run ctr (apt-get install containerd): {e}"))?;
        if out.status.success() {
            Ok(String::from_utf8_lossy(&out.stdout).into_owned())
        } else {
            Err(format!(
                "ctr {} failed: {}\n{}",
                args.join(" "),
                out.status,
                String::from_utf8_lossy(&out.stderr)
            ))
        }
    }

    /// Runs `ctr -a SOCKET -n k8s.io ARGS...` and returns its stdout; panics
    /// with its stderr if it fails.
    pub fn ctr(&self, args: &[&str]) -> String {
        self.try_ctr(args).unwrap_or_else(|e| panic!("{e}"))
    }

    /// Every task in namespace k8s.io (`ctr tasks ls`): one per pod sandbox and
    /// one per container that has been started and not deleted.
    pub fn tasks(&self) -> Vec<Task> {
        let out = self.ctr(&["tasks", "ls"]);
        out.lines()
            .skip(1) // TASK PID STATUS
            .filter_map(|l| {
                let mut f = l.split_whitespace();
                let id = f.next()?.to_string();
                let pid = f.next()?.parse().ok()?;
                let status = f.next()?.to_string();
                Some(Task { id, pid, status })
            })
            .collect()
    }

    /// The number of tasks whose status is RUNNING (sandboxes included).
    pub fn running_task_count(&self) -> usize {
        self.tasks()
            .iter()
            .filter(|t| t.status == "RUNNING")
            .count()
    }

    /// Ids of the RUNNING tasks.
    pub fn running_task_ids(&self) -> Vec<String> {
        self.tasks()
            .into_iter()
            .filter(|t| t.status == "RUNNING")
            .map(|t| t.id)
            .collect()
    }

    /// Ids of every containerd container in namespace k8s.io (pod sandboxes are
    /// containers too, labelled io.cri-containerd.kind=sandbox).
    pub fn container_ids(&self) -> Vec<String> {
        self.ids(&["containers", "ls", "-q"])
    }

    /// Ids of the containerd containers carrying the label `key` = `value`
    /// (`ctr containers ls -q 'labels."KEY"=="VALUE"'`).
    ///
    /// The CRI plugin copies a PodSandboxConfig's labels onto the sandbox's
    /// container and a ContainerConfig's labels onto the container, and adds
    /// `io.cri-containerd.kind` = `sandbox` | `container`; it does not copy the
    /// pod's labels onto its containers (the kubelet puts
    /// `io.kubernetes.pod.name` etc. in every ContainerConfig itself).
    pub fn containers_with_label(&self, key: &str, value: &str) -> Vec<String> {
        let filter = format!("labels.{}=={}", filter_quote(key), filter_quote(value));
        self.ids(&["containers", "ls", "-q", &filter])
    }

    /// Ids of the containers carrying every one of the given labels.
    pub fn containers_with_labels(&self, labels: &[(&str, &str)]) -> Vec<String> {
        // A comma joins conditions with AND; separate arguments would be OR.
        let filter = labels
            .iter()
            .map(|(k, v)| format!("labels.{}=={}", filter_quote(k), filter_quote(v)))
            .collect::<Vec<_>>()
            .join(",");
        self.ids(&["containers", "ls", "-q", &filter])
    }

    /// Ids of the containers of the pod named `pod` (its `io.kubernetes.pod.name` label, which
    /// picolet sets; a static pod's is `<name>-<node>`) of this `kind` (`container` or
    /// `sandbox`), in any state.
    pub fn pod_containers(&self, pod: &str, kind: &str) -> BTreeSet<String> {
        self.containers_with_labels(&[
            ("io.kubernetes.pod.name", pod),
            ("io.cri-containerd.kind", kind),
        ])
        .into_iter()
        .collect()
    }

    /// Ids of the pod's containers whose task is running.
    pub fn running_containers(&self, pod: &str) -> BTreeSet<String> {
        let running: BTreeSet<String> = self.running_task_ids().into_iter().collect();
        self.pod_containers(pod, "container")
            .intersection(&running)
            .cloned()
            .collect()
    }

    /// Ids of the pod sandboxes' containers (running or not).
    pub fn sandbox_ids(&self) -> Vec<String> {
        self.containers_with_label("io.cri-containerd.kind", "sandbox")
    }

    fn ids(&self, args: &[&str]) -> Vec<String> {
        self.ctr(args)
            .lines()
            .map(str::trim)
            .filter(|l| !l.is_empty())
            .map(str::to_string)
            .collect()
    }
}

impl Drop for ScratchContainerd {
    fn drop(&mut self) {
        let out = run_script("stop", &self.dir);
        if !out.status.success() {
            let msg = format!(
                "scratch-containerd.sh stop {} failed\n{}",
                self.dir.display(),
                describe(&out)
            );
            if std::thread::panicking() {
                eprintln!("{msg}");
            } else {
                panic!("{msg}");
            }
        }
    }
}
