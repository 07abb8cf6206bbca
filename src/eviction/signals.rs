//! Reading the signals: memory.available from the root cgroup and `/proc/meminfo` (capacity
//! minus working set, as upstream computes it from the node summary), the filesystems of
//! `--root-dir` (nodefs) and of the runtime's images (imagefs) by statvfs, pid.available from
//! `kernel/pid_max` and the processes running, and the node's memory PSI. Behind
//! [`SignalSource`] so the manager's tests feed fake readings.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use crate::cm::detect::Cgroups;

use super::threshold::Signal;

/// One reading: what is available of a capacity.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Observation {
    pub available: i64,
    pub capacity: i64,
}

/// The signals read at one instant. A signal the host cannot give is absent (never zero).
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Observations {
    pub values: BTreeMap<Signal, Observation>,
    /// The node's memory PSI `some avg10`, percent, where the kernel has PSI.
    pub memory_psi_some_avg10: Option<f64>,
}

impl Observations {
    pub fn get(&self, s: Signal) -> Option<Observation> {
        self.values.get(&s).copied()
    }
}

/// Where the manager reads its signals. Blocking (file reads): the loop calls it off the
/// executor thread.
pub trait SignalSource: Send + Sync {
    fn read(&self) -> Observations;
}

/// The host's signals.
#[derive(Debug, Clone)]
pub struct HostSignals {
    pub cgroups: Option<Cgroups>,
    /// `/` on a host; fixture trees in tests.
    pub root: PathBuf,
    /// `--root-dir`: its filesystem is nodefs.
    pub root_dir: PathBuf,
    /// The runtime's image filesystem (ImageFsInfo's mountpoint); nodefs when `None`.
    pub image_fs: Option<PathBuf>,
}

fn to_i64(v: u64) -> i64 {
    i64::try_from(v).unwrap_or(i64::MAX)
}

/// (bytes available, bytes capacity, inodes free, inodes capacity) of a path's filesystem.
fn fs(path: &Path) -> Option<(Observation, Observation)> {
    let s = nix::sys::statvfs::statvfs(path).ok()?;
    #[allow(
        clippy::useless_conversion,
        reason = "statvfs counts are u32 on 32-bit targets (armv7)"
    )]
    let (bavail, blocks, frsize, ffree, files) = (
        u64::from(s.blocks_available()),
        u64::from(s.blocks()),
        u64::from(s.fragment_size()),
        u64::from(s.files_free()),
        u64::from(s.files()),
    );
    Some((
        Observation {
            available: to_i64(bavail.saturating_mul(frsize)),
            capacity: to_i64(blocks.saturating_mul(frsize)),
        },
        Observation {
            available: to_i64(ffree),
            capacity: to_i64(files),
        },
    ))
}

/// `some avg10=1.50 avg60=...`: the avg10 of the `some` line.
pub fn psi_some_avg10(s: &str) -> Option<f64> {
    let line = s.lines().find(|l| l.starts_with("some "))?;
    line.split(' ')
        .find_map(|f| f.strip_prefix("avg10="))?
        .parse()
        .ok()
}

/// Processes running on the host: the numeric entries of `/proc`. Upstream counts the same
/// from the kernel's process list (`rlimit.Stats`' running processes).
fn process_count(proc: &Path) -> Option<u64> {
    let n = std::fs::read_dir(proc)
        .ok()?
        .filter_map(Result::ok)
        .filter(|e| {
            e.file_name()
                .to_str()
                .is_some_and(|n| n.bytes().all(|b| b.is_ascii_digit()))
        })
        .count();
    u64::try_from(n).ok()
}

impl SignalSource for HostSignals {
    fn read(&self) -> Observations {
        let mut values = BTreeMap::new();
        if let Some(cg) = &self.cgroups {
            let node = crate::stats::cgroup::read_node(cg, &self.root);
            if let (Some(total), Some(ws)) = (
                node.memory_total_bytes,
                node.cgroup.memory_working_set_bytes,
            ) {
                let (total, ws) = (to_i64(total), to_i64(ws));
                values.insert(
                    Signal::MemoryAvailable,
                    Observation {
                        available: total.saturating_sub(ws).max(0),
                        capacity: total,
                    },
                );
            }
        }
        let node_fs = fs(&self.root_dir);
        if let Some((bytes, inodes)) = node_fs {
            values.insert(Signal::NodeFsAvailable, bytes);
            values.insert(Signal::NodeFsInodesFree, inodes);
        }
        let image_fs = match &self.image_fs {
            Some(p) => fs(p).or(node_fs),
            None => node_fs,
        };
        if let Some((bytes, inodes)) = image_fs {
            values.insert(Signal::ImageFsAvailable, bytes);
            values.insert(Signal::ImageFsInodesFree, inodes);
        }
        let proc = self.root.join("proc");
        let pid_max = std::fs::read_to_string(proc.join("sys/kernel/pid_max"))
            .ok()
            .and_then(|s| s.trim().parse::<u64>().ok());
        if let (Some(max), Some(n)) = (pid_max, process_count(&proc)) {
            values.insert(
                Signal::PidAvailable,
                Observation {
                    available: to_i64(max.saturating_sub(n)),
                    capacity: to_i64(max),
                },
            );
        }
        // System-wide PSI first; the root cgroup's file where /proc/pressure is absent.
        let psi = std::fs::read_to_string(proc.join("pressure/memory"))
            .ok()
            .or_else(|| {
                let cg = self.cgroups.as_ref()?;
                let m = cg.unified.as_deref()?;
                std::fs::read_to_string(
                    self.root
                        .join(m.strip_prefix("/").unwrap_or(m))
                        .join("memory.pressure"),
                )
                .ok()
            })
            .and_then(|s| psi_some_avg10(&s));
        Observations {
            values,
            memory_psi_some_avg10: psi,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::cm::detect::Mode;

    #[test]
    fn fixture_host() {
        let d = std::env::temp_dir().join(format!("picolet-evict-sig-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&d);
        for p in [
            "sys/fs/cgroup",
            "proc/sys/kernel",
            "proc/pressure",
            "proc/1",
            "proc/42",
        ] {
            std::fs::create_dir_all(d.join(p)).unwrap();
        }
        std::fs::write(d.join("proc/self-not-a-pid"), "").unwrap();
        std::fs::write(
            d.join("proc/meminfo"),
            "MemTotal: 1000000 kB\nMemFree: 200000 kB\nMemAvailable: 600000 kB\n",
        )
        .unwrap();
        std::fs::write(
            d.join("sys/fs/cgroup/memory.stat"),
            "inactive_file 102400000\n",
        )
        .unwrap();
        std::fs::write(d.join("proc/sys/kernel/pid_max"), "32768\n").unwrap();
        std::fs::write(
            d.join("proc/pressure/memory"),
            "some avg10=12.50 avg60=3.00 avg300=1.00 total=99\nfull avg10=1.00 avg60=0.00 avg300=0.00 total=9\n",
        )
        .unwrap();
        let h = HostSignals {
            cgroups: Some(Cgroups {
                mode: Mode::Unified,
                unified: Some(PathBuf::from("/sys/fs/cgroup")),
                controllers: vec![],
            }),
            root: d.clone(),
            root_dir: d.clone(),
            image_fs: Some(d.join("does-not-exist")),
        };
        let o = h.read();
        // Working set: (total - free) - inactive file = 819200000 - 102400000.
        assert_eq!(
            o.get(Signal::MemoryAvailable),
            Some(Observation {
                available: 1_024_000_000 - 716_800_000,
                capacity: 1_024_000_000
            })
        );
        assert_eq!(
            o.get(Signal::PidAvailable),
            Some(Observation {
                available: 32768 - 2,
                capacity: 32768
            })
        );
        assert_eq!(o.memory_psi_some_avg10, Some(12.5));
        let nodefs = o.get(Signal::NodeFsAvailable).unwrap();
        assert!(nodefs.available > 0 && nodefs.available <= nodefs.capacity);
        // An image filesystem that cannot be read is nodefs.
        assert_eq!(
            o.get(Signal::ImageFsAvailable).unwrap().capacity,
            nodefs.capacity
        );
        assert!(o.get(Signal::NodeFsInodesFree).is_some());
        std::fs::remove_dir_all(d).unwrap();
    }

    #[test]
    fn this_host_gives_every_signal() {
        let h = HostSignals {
            cgroups: crate::cm::detect::detect(Path::new("/")).ok(),
            root: PathBuf::from("/"),
            root_dir: std::env::temp_dir(),
            image_fs: None,
        };
        let o = h.read();
        for s in Signal::ALL {
            let v = o
                .get(s)
                .unwrap_or_else(|| panic!("{} missing: {o:?}", s.name()));
            assert!(
                v.available >= 0 && v.available <= v.capacity,
                "{}: {v:?}",
                s.name()
            );
        }
        let m = o.get(Signal::MemoryAvailable).unwrap();
        assert!(m.available > 0, "{m:?}");
        if Path::new("/proc/pressure/memory").exists() {
            let psi = o
                .memory_psi_some_avg10
                .expect("the kernel has PSI: some avg10 is read");
            assert!((0.0..=100.0).contains(&psi), "{psi}");
        }
    }
}
