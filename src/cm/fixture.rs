//! Tests only: cgroup trees under a temporary directory laid out as the kernel lays them out
//! (the mountinfo and `/proc/cgroups` detection reads, v2's `cgroup.controllers` and
//! `cgroup.subtree_control`, v1's one hierarchy per controller), and mkdir, rmdir and writes
//! that behave on those plain files as the kernel does on cgroupfs: a new cgroup gets the
//! control files of the controllers its parent enabled for it, rmdir refuses a cgroup with
//! children or processes, and a write to a file the kernel would not offer fails.

use std::io;
use std::path::{Path, PathBuf};

use super::fs::{CgroupError, Hierarchy};

/// A fixture host, removed on drop.
pub struct Host {
    pub root: PathBuf,
    pub hierarchy: Hierarchy,
}

impl Drop for Host {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.root);
    }
}

fn temp_root(name: &str) -> PathBuf {
    use std::sync::atomic::{AtomicUsize, Ordering};
    static N: AtomicUsize = AtomicUsize::new(0);
    let dir = std::env::temp_dir().join(format!(
        "picolet-cm-{name}-{}-{}",
        std::process::id(),
        N.fetch_add(1, Ordering::Relaxed)
    ));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(dir.join("proc/self")).unwrap();
    dir
}

fn put(path: &Path, content: &str) {
    std::fs::create_dir_all(path.parent().unwrap()).unwrap();
    std::fs::write(path, content).unwrap();
}

/// A cgroup v2 host (Debian 12, Raspberry Pi OS bookworm) whose kernel offers `controllers`.
pub fn v2(controllers: &str) -> Host {
    let root = temp_root("v2");
    put(
        &root.join("proc/self/mountinfo"),
        "26 28 0:23 / /sys/fs/cgroup rw,nosuid,nodev,noexec,relatime shared:9 - cgroup2 cgroup2 rw,nsdelegate\n",
    );
    let cg = root.join("sys/fs/cgroup");
    put(&cg.join("cgroup.controllers"), &format!("{controllers}\n"));
    put(&cg.join("cgroup.subtree_control"), "\n");
    put(&cg.join("cgroup.procs"), "1\n");
    put(&cg.join("cpu.stat"), "usage_usec 0\n");
    let mut hierarchy = Hierarchy::detect(&root).unwrap();
    hierarchy.emulated = true;
    Host { root, hierarchy }
}

/// A hybrid host as these test machines are: v1 controllers and an empty v2 at `unified`.
pub fn hybrid() -> Host {
    let root = temp_root("hybrid");
    put(
        &root.join("proc/self/mountinfo"),
        "31 23 0:28 / /sys/fs/cgroup rw,relatime - tmpfs tmpfs rw,mode=755\n\
         32 31 0:29 / /sys/fs/cgroup/cpu,cpuacct rw,relatime - cgroup cgroup rw,cpu,cpuacct\n\
         35 31 0:32 / /sys/fs/cgroup/memory rw,relatime - cgroup cgroup rw,memory\n\
         39 31 0:36 / /sys/fs/cgroup/pids rw,relatime - cgroup cgroup rw,pids\n\
         40 31 0:37 / /sys/fs/cgroup/systemd rw,relatime - cgroup cgroup rw,name=systemd\n\
         41 31 0:38 / /sys/fs/cgroup/unified rw,relatime - cgroup2 cgroup2 rw\n",
    );
    put(
        &root.join("proc/cgroups"),
        "#subsys_name\thierarchy\tnum_cgroups\tenabled\ncpu\t1\t9\t1\ncpuacct\t1\t9\t1\nmemory\t4\t9\t1\npids\t8\t9\t1\n",
    );
    let cg = root.join("sys/fs/cgroup");
    for (dir, files) in [
        (
            "cpu,cpuacct",
            &[
                ("cpu.shares", "1024"),
                ("cpu.cfs_period_us", "100000"),
                ("cpu.cfs_quota_us", "-1"),
            ][..],
        ),
        (
            "memory",
            &[("memory.limit_in_bytes", "9223372036854771712")][..],
        ),
        ("pids", &[][..]),
        ("systemd", &[][..]),
    ] {
        put(&cg.join(dir).join("cgroup.procs"), "1\n");
        for (f, v) in files {
            put(&cg.join(dir).join(f), &format!("{v}\n"));
        }
    }
    put(&cg.join("unified/cgroup.controllers"), "\n");
    put(&cg.join("unified/cgroup.subtree_control"), "\n");
    put(&cg.join("unified/cgroup.procs"), "1\n");
    let mut hierarchy = Hierarchy::detect(&root).unwrap();
    hierarchy.emulated = true;
    Host { root, hierarchy }
}

/// The control files a new cgroup gets, by where it is made.
fn files_for(dir: &Path) -> Vec<(&'static str, &'static str)> {
    let parent = dir.parent().unwrap_or(dir);
    let mut files = vec![("cgroup.procs", "")];
    // v2: the parent's subtree_control says which controllers the child has.
    if let Ok(enabled) = std::fs::read_to_string(parent.join("cgroup.subtree_control")) {
        let enabled: &'static str = Box::leak(format!("{}\n", enabled.trim()).into_boxed_str());
        files.push(("cgroup.controllers", enabled));
        files.push(("cgroup.subtree_control", ""));
        files.push(("cpu.stat", "usage_usec 0\n"));
        for c in enabled.split_whitespace() {
            match c {
                "cpu" => files.extend([("cpu.weight", "100\n"), ("cpu.max", "max 100000\n")]),
                "memory" => files.extend([
                    ("memory.max", "max\n"),
                    ("memory.oom.group", "0\n"),
                    ("memory.current", "0\n"),
                ]),
                "pids" => files.push(("pids.max", "max\n")),
                _ => {}
            }
        }
        return files;
    }
    // v1: the hierarchy's controller, from the files its root has.
    if parent.join("cpu.shares").exists() {
        files.extend([
            ("cpu.shares", "1024\n"),
            ("cpu.cfs_period_us", "100000\n"),
            ("cpu.cfs_quota_us", "-1\n"),
        ]);
    } else if parent.join("memory.limit_in_bytes").exists() {
        files.push(("memory.limit_in_bytes", "9223372036854771712\n"));
    } else if parent.ends_with("pids") || parent.join("pids.max").exists() {
        files.push(("pids.max", "max\n"));
    }
    files
}

pub fn mkdir(_h: &Hierarchy, dir: &Path) -> Result<(), CgroupError> {
    match std::fs::create_dir(dir) {
        Ok(()) => {}
        Err(e) if e.kind() == io::ErrorKind::AlreadyExists => return Ok(()),
        Err(source) => {
            return Err(CgroupError::Create {
                path: dir.to_owned(),
                source,
            });
        }
    }
    for (f, v) in files_for(dir) {
        std::fs::write(dir.join(f), v).unwrap();
    }
    Ok(())
}

pub fn write(path: &Path, value: &str) -> Result<(), CgroupError> {
    if !path.is_file() {
        return Err(CgroupError::Write {
            path: path.to_owned(),
            value: value.to_owned(),
            source: io::Error::from(io::ErrorKind::NotFound),
        });
    }
    let mut stored = value.to_owned();
    if path.ends_with("cgroup.subtree_control") {
        // The kernel accepts only what cgroup.controllers offers, and lists what is on.
        let offered = std::fs::read_to_string(path.with_file_name("cgroup.controllers")).unwrap();
        let mut on: Vec<String> = std::fs::read_to_string(path)
            .unwrap()
            .split_whitespace()
            .map(str::to_owned)
            .collect();
        for w in value.split_whitespace() {
            let c = &w[1..];
            if !offered.split_whitespace().any(|o| o == c) {
                return Err(CgroupError::Write {
                    path: path.to_owned(),
                    value: value.to_owned(),
                    source: io::Error::from(io::ErrorKind::InvalidInput),
                });
            }
            if w.starts_with('+') && !on.iter().any(|o| o == c) {
                on.push(c.to_owned());
            }
        }
        stored = on.join(" ");
    }
    std::fs::write(path, format!("{stored}\n")).unwrap();
    Ok(())
}

pub fn rmdir(dir: &Path) -> io::Result<()> {
    if !dir.exists() {
        return Err(io::Error::from(io::ErrorKind::NotFound));
    }
    let busy = std::fs::read_dir(dir)?
        .filter_map(Result::ok)
        .any(|e| e.file_type().is_ok_and(|t| t.is_dir()))
        || !std::fs::read_to_string(dir.join("cgroup.procs"))
            .unwrap_or_default()
            .trim()
            .is_empty();
    if busy {
        return Err(io::Error::from_raw_os_error(nix::libc::EBUSY));
    }
    std::fs::remove_dir_all(dir)
}
