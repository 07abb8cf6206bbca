//! cgroup mode and controllers, as the kernel lays them out.
//!
//! Unified (v2 only): `/sys/fs/cgroup` is a `cgroup2` mount and its `cgroup.controllers` lists
//! the controllers. Hybrid: `/sys/fs/cgroup` is a tmpfs holding one `cgroup` (v1) mount per
//! controller plus a `cgroup2` mount at `unified` that carries no controller; the controllers
//! are the v1 ones. Legacy (v1): the same without `unified`. On v1 a controller is usable when
//! `/proc/cgroups` says it is enabled *and* a hierarchy has it mounted.

use std::collections::BTreeSet;
use std::path::{Path, PathBuf};

/// The controllers picolet needs for pod limits and accounting.
pub const REQUIRED: &[&str] = &["cpu", "memory", "pids"];

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Mode {
    /// cgroup v2 only.
    Unified,
    /// v1 controllers, with a controller-less v2 mount (systemd's "hybrid").
    Hybrid,
    /// v1 only.
    Legacy,
}

impl Mode {
    pub fn as_str(self) -> &'static str {
        match self {
            Mode::Unified => "v2 (unified)",
            Mode::Hybrid => "hybrid (v1 controllers, v2 at unified)",
            Mode::Legacy => "v1 (legacy)",
        }
    }
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Cgroups {
    pub mode: Mode,
    /// Where the v2 hierarchy is mounted (unified: the root; hybrid: `unified`).
    pub unified: Option<PathBuf>,
    /// Usable controllers, each with the mount that carries it (v2: the unified root).
    pub controllers: Vec<(String, PathBuf)>,
}

impl Cgroups {
    pub fn has(&self, controller: &str) -> bool {
        self.controllers.iter().any(|(c, _)| c == controller)
    }

    /// The required controllers this host lacks.
    pub fn missing(&self) -> Vec<&'static str> {
        REQUIRED.iter().copied().filter(|c| !self.has(c)).collect()
    }
}

#[derive(Debug, thiserror::Error)]
pub enum DetectError {
    #[error("reading {path}: {source}")]
    Read {
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },
    #[error("{path}: no cgroup or cgroup2 filesystem is mounted")]
    NoCgroups { path: PathBuf },
}

fn read(path: &Path) -> Result<String, DetectError> {
    std::fs::read_to_string(path).map_err(|source| DetectError::Read {
        path: path.to_owned(),
        source,
    })
}

/// One cgroup mount from mountinfo: mount point, filesystem type, super options.
#[derive(Debug, PartialEq)]
struct Mount {
    point: PathBuf,
    fstype: String,
    super_opts: String,
}

/// Mountinfo escapes space, tab, newline and backslash in paths as octal `\NNN`.
fn unescape(s: &str) -> String {
    let b = s.as_bytes();
    let mut out = Vec::with_capacity(b.len());
    let mut i = 0;
    while i < b.len() {
        let octal = (b[i] == b'\\' && i + 3 < b.len())
            .then(|| std::str::from_utf8(&b[i + 1..i + 4]).ok())
            .flatten()
            .and_then(|d| u8::from_str_radix(d, 8).ok());
        if let Some(v) = octal {
            out.push(v);
            i += 4;
            continue;
        }
        out.push(b[i]);
        i += 1;
    }
    String::from_utf8_lossy(&out).into_owned()
}

fn cgroup_mounts(mountinfo: &str) -> Vec<Mount> {
    mountinfo
        .lines()
        .filter_map(|line| {
            // id parent major:minor root point options [optional...] - fstype source super
            let (pre, post) = line.split_once(" - ")?;
            let point = pre.split(' ').nth(4)?;
            let mut post = post.split(' ');
            let fstype = post.next()?;
            let _source = post.next()?;
            let super_opts = post.next().unwrap_or("");
            (fstype == "cgroup" || fstype == "cgroup2").then(|| Mount {
                point: PathBuf::from(unescape(point)),
                fstype: fstype.to_owned(),
                super_opts: super_opts.to_owned(),
            })
        })
        .collect()
}

/// Controllers `/proc/cgroups` lists as enabled (last column 1).
fn enabled_v1(proc_cgroups: &str) -> BTreeSet<String> {
    proc_cgroups
        .lines()
        .filter(|l| !l.starts_with('#'))
        .filter_map(|l| {
            let f: Vec<&str> = l.split_whitespace().collect();
            (f.len() == 4 && f[3] == "1").then(|| f[0].to_owned())
        })
        .collect()
}

/// Detects the host's cgroups. `root` is `/` on a host, a fixture tree in tests: it holds
/// `proc/self/mountinfo`, `proc/cgroups` and the mount points the mountinfo names (read
/// relative to `root`).
pub fn detect(root: &Path) -> Result<Cgroups, DetectError> {
    let mountinfo_path = root.join("proc/self/mountinfo");
    let mounts = cgroup_mounts(&read(&mountinfo_path)?);
    let under = |p: &Path| root.join(p.strip_prefix("/").unwrap_or(p));
    let v2 = mounts.iter().find(|m| m.fstype == "cgroup2");
    let v1: Vec<&Mount> = mounts.iter().filter(|m| m.fstype == "cgroup").collect();
    if v1.is_empty() {
        let Some(v2) = v2 else {
            return Err(DetectError::NoCgroups {
                path: mountinfo_path,
            });
        };
        // The root's cgroup.controllers lists what the kernel offers; what children may use
        // is cgroup.subtree_control, which picolet (or systemd) enables per level.
        let path = under(&v2.point).join("cgroup.controllers");
        let controllers = read(&path)?
            .split_whitespace()
            .map(|c| (c.to_owned(), v2.point.clone()))
            .collect();
        return Ok(Cgroups {
            mode: Mode::Unified,
            unified: Some(v2.point.clone()),
            controllers,
        });
    }
    let enabled = enabled_v1(&read(&root.join("proc/cgroups"))?);
    let mut controllers = Vec::new();
    for m in &v1 {
        for opt in m.super_opts.split(',') {
            if enabled.contains(opt) && !controllers.iter().any(|(c, _)| c == opt) {
                controllers.push((opt.to_owned(), m.point.clone()));
            }
        }
    }
    controllers.sort();
    Ok(Cgroups {
        mode: if v2.is_some() {
            Mode::Hybrid
        } else {
            Mode::Legacy
        },
        unified: v2.map(|m| m.point.clone()),
        controllers,
    })
}

/// Every cgroup and cgroup2 mount point in `root`'s `proc/self/mountinfo`, named hierarchies
/// (`name=systemd`) included.
pub fn mount_points(root: &Path) -> Result<Vec<PathBuf>, DetectError> {
    let path = root.join("proc/self/mountinfo");
    Ok(cgroup_mounts(&read(&path)?)
        .into_iter()
        .map(|m| m.point)
        .collect())
}

/// The exact fix for a missing controller, for the operator.
pub fn fix(controller: &str, mode: Mode) -> String {
    match (controller, mode) {
        ("memory", _) => "add `cgroup_enable=memory cgroup_memory=1` to the kernel command line \
             (Raspberry Pi: the one line of /boot/firmware/cmdline.txt, or /boot/cmdline.txt on \
             older images) and reboot"
            .to_owned(),
        (c, Mode::Unified) => format!(
            "enable the {c} controller in the kernel (CONFIG_CGROUP_{}) or add \
             `cgroup_enable={c}` to the kernel command line and reboot",
            c.to_uppercase()
        ),
        (c, _) => format!(
            "mount the {c} controller (mount -t cgroup -o {c} cgroup /sys/fs/cgroup/{c}) or \
             enable it on the kernel command line (`cgroup_enable={c}`) and reboot"
        ),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A fixture root laid out as the kernel lays out the files detection reads.
    fn root(mountinfo: &str, proc_cgroups: Option<&str>, controllers: Option<&str>) -> PathBuf {
        use std::sync::atomic::{AtomicUsize, Ordering};
        static N: AtomicUsize = AtomicUsize::new(0);
        let dir = std::env::temp_dir().join(format!(
            "picolet-cgroup-detect-{}-{}",
            std::process::id(),
            N.fetch_add(1, Ordering::Relaxed)
        ));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(dir.join("proc/self")).unwrap();
        std::fs::write(dir.join("proc/self/mountinfo"), mountinfo).unwrap();
        if let Some(c) = proc_cgroups {
            std::fs::write(dir.join("proc/cgroups"), c).unwrap();
        }
        if let Some(c) = controllers {
            std::fs::create_dir_all(dir.join("sys/fs/cgroup")).unwrap();
            std::fs::write(dir.join("sys/fs/cgroup/cgroup.controllers"), c).unwrap();
        }
        dir
    }

    // As on a Debian 12 / Raspberry Pi OS bookworm host.
    const UNIFIED: &str = "\
22 28 0:21 / /proc rw,nosuid,nodev,noexec,relatime shared:12 - proc proc rw
26 28 0:23 / /sys/fs/cgroup rw,nosuid,nodev,noexec,relatime shared:9 - cgroup2 cgroup2 rw,nsdelegate,memory_recursiveprot
28 1 179:2 / / rw,noatime shared:1 - ext4 /dev/mmcblk0p2 rw
";

    // As on these test machines (systemd hybrid).
    const HYBRID: &str = "\
31 23 0:28 / /sys/fs/cgroup rw,relatime - tmpfs tmpfs rw,mode=755
32 31 0:29 / /sys/fs/cgroup/cpu rw,relatime - cgroup cgroup rw,cpu
33 31 0:30 / /sys/fs/cgroup/cpuacct rw,relatime - cgroup cgroup rw,cpuacct
34 31 0:31 / /sys/fs/cgroup/cpuset rw,relatime - cgroup cgroup rw,cpuset
35 31 0:32 / /sys/fs/cgroup/memory rw,relatime - cgroup cgroup rw,memory
39 31 0:36 / /sys/fs/cgroup/pids rw,relatime - cgroup cgroup rw,pids
40 31 0:37 / /sys/fs/cgroup/systemd rw,relatime - cgroup cgroup rw,name=systemd
41 31 0:38 / /sys/fs/cgroup/unified rw,relatime - cgroup2 cgroup2 rw
";

    const PROC_CGROUPS: &str = "\
#subsys_name\thierarchy\tnum_cgroups\tenabled
cpuset\t3\t98\t1
cpu\t1\t98\t1
cpuacct\t2\t98\t1
memory\t4\t149\t1
pids\t8\t98\t1
";

    #[test]
    fn unified_reads_cgroup_controllers() {
        let r = root(
            UNIFIED,
            None,
            Some("cpuset cpu io memory hugetlb pids rdma misc\n"),
        );
        let c = detect(&r).unwrap();
        assert_eq!(c.mode, Mode::Unified);
        assert_eq!(c.unified.as_deref(), Some(Path::new("/sys/fs/cgroup")));
        assert!(c.has("memory") && c.has("io") && c.has("pids"));
        assert!(c.missing().is_empty());
        std::fs::remove_dir_all(r).unwrap();
    }

    #[test]
    fn unified_without_memory_names_the_cmdline_fix() {
        // Raspberry Pi kernels before 6.1 leave memory off unless asked for.
        let r = root(UNIFIED, None, Some("cpuset cpu io pids\n"));
        let c = detect(&r).unwrap();
        assert_eq!(c.missing(), vec!["memory"]);
        assert!(fix("memory", c.mode).contains("cgroup_enable=memory cgroup_memory=1"));
        std::fs::remove_dir_all(r).unwrap();
    }

    #[test]
    fn hybrid_uses_v1_controllers() {
        let r = root(HYBRID, Some(PROC_CGROUPS), None);
        let c = detect(&r).unwrap();
        assert_eq!(c.mode, Mode::Hybrid);
        assert_eq!(
            c.unified.as_deref(),
            Some(Path::new("/sys/fs/cgroup/unified"))
        );
        let names: Vec<&str> = c.controllers.iter().map(|(n, _)| n.as_str()).collect();
        assert_eq!(names, ["cpu", "cpuacct", "cpuset", "memory", "pids"]);
        assert!(
            c.controllers
                .contains(&("memory".into(), PathBuf::from("/sys/fs/cgroup/memory")))
        );
        // name=systemd is a named hierarchy, not a controller.
        assert!(!c.has("systemd") && !c.has("name=systemd"));
        std::fs::remove_dir_all(r).unwrap();
    }

    #[test]
    fn v1_controller_disabled_in_proc_cgroups_is_missing() {
        let legacy: String =
            HYBRID
                .lines()
                .filter(|l| !l.contains("cgroup2"))
                .fold(String::new(), |mut s, l| {
                    s.push_str(l);
                    s.push('\n');
                    s
                });
        let r = root(
            &legacy,
            Some(&PROC_CGROUPS.replace("memory\t4\t149\t1", "memory\t0\t1\t0")),
            None,
        );
        let c = detect(&r).unwrap();
        assert_eq!(c.mode, Mode::Legacy);
        assert_eq!(c.unified, None);
        assert_eq!(c.missing(), vec!["memory"]);
        std::fs::remove_dir_all(r).unwrap();
    }

    #[test]
    fn no_cgroup_mount_is_an_error_naming_mountinfo() {
        let r = root("28 1 179:2 / / rw - ext4 /dev/sda1 rw\n", None, None);
        let e = detect(&r).unwrap_err().to_string();
        assert!(
            e.contains("proc/self/mountinfo") && e.contains("no cgroup"),
            "{e}"
        );
        std::fs::remove_dir_all(r).unwrap();
    }

    #[test]
    fn mount_points_are_unescaped() {
        let m = cgroup_mounts("1 2 0:1 / /a\\040b rw - cgroup2 cgroup2 rw\n");
        assert_eq!(m[0].point, PathBuf::from("/a b"));
    }

    #[test]
    fn this_host_is_detected() {
        // Whatever this machine runs, detection must succeed and name a v2 or v1 controller set.
        let c = detect(Path::new("/")).unwrap();
        assert!(!c.controllers.is_empty(), "{c:?}");
    }
}
