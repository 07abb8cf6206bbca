//! One cgroup's accounting, from the v2 files (`cpu.stat`, `memory.current`, `memory.stat`,
//! `memory.events`, `io.stat`, `pids.current`, `*.pressure`) or their v1 equivalents
//! (`cpuacct.usage`, `memory.usage_in_bytes`, `memory.stat`, `memory.oom_control`,
//! `blkio.throttle.io_service_bytes_recursive`, `pids.current`). A file the kernel lacks (no
//! PSI, an old kernel without `oom_kill`) leaves its field `None`, never zero.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use crate::cm::detect::{Cgroups, Mode};

#[derive(Debug, Clone, Default, PartialEq)]
pub struct Stats {
    /// Cumulative CPU time, nanoseconds.
    pub cpu_usage_nanos: Option<u64>,
    pub memory_usage_bytes: Option<u64>,
    /// Usage minus inactive file pages, as cAdvisor's working set (never below zero).
    pub memory_working_set_bytes: Option<u64>,
    /// Anonymous memory (v2 `anon`, v1 `total_rss`).
    pub memory_rss_bytes: Option<u64>,
    pub oom_kills: Option<u64>,
    pub io_read_bytes: Option<u64>,
    pub io_write_bytes: Option<u64>,
    pub pids: Option<u64>,
    /// Cumulative minor and major page faults (`pgfault`, `pgmajfault`).
    pub page_faults: Option<u64>,
    pub major_page_faults: Option<u64>,
    /// The memory limit; `None` when unlimited (v2 `max`, v1's huge default).
    pub memory_limit_bytes: Option<u64>,
    /// Pressure stall information of `cpu.pressure`, `memory.pressure`, `io.pressure`: v2
    /// only, and only on a kernel with PSI.
    pub cpu_psi: Option<Psi>,
    pub memory_psi: Option<Psi>,
    pub io_psi: Option<Psi>,
}

/// One `*.pressure` file: what share of time some tasks (`some`) or all of them (`full`)
/// waited for the resource.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Psi {
    pub some: PsiLine,
    /// `None` where the kernel writes no `full` line (`cpu.pressure` before Linux 5.13).
    pub full: Option<PsiLine>,
}

/// `avg10=0.00 avg60=0.00 avg300=0.00 total=0`: percentages over 10 s, 60 s and 300 s, and the
/// cumulative stall in microseconds.
#[derive(Debug, Clone, Copy, Default, PartialEq)]
pub struct PsiLine {
    pub avg10: f64,
    pub avg60: f64,
    pub avg300: f64,
    pub total_usec: u64,
}

/// A process's cgroup per controller (v1), or its one v2 path (key ""), from
/// `/proc/<pid>/cgroup`: `hierarchy-id:controllers:path` lines.
pub fn parse_proc_cgroup(s: &str) -> BTreeMap<String, String> {
    let mut out = BTreeMap::new();
    for line in s.lines() {
        let mut f = line.splitn(3, ':');
        let (Some(_id), Some(ctrls), Some(path)) = (f.next(), f.next(), f.next()) else {
            continue;
        };
        if ctrls.is_empty() {
            out.insert(String::new(), path.to_owned());
        }
        for c in ctrls.split(',').filter(|c| !c.is_empty()) {
            out.insert(c.to_owned(), path.to_owned());
        }
    }
    out
}

/// The directories to read one cgroup's accounting from.
#[derive(Debug, Clone, PartialEq)]
pub enum Location {
    V2(PathBuf),
    /// Controller → its directory.
    V1(BTreeMap<String, PathBuf>),
}

/// Where a process's cgroup lives, from its `/proc/<pid>/cgroup`. `root` prefixes the mount
/// points (`/` on a host, a fixture tree in tests).
pub fn locate(cg: &Cgroups, root: &Path, proc_cgroup: &str) -> Option<Location> {
    let paths = parse_proc_cgroup(proc_cgroup);
    let join = |mount: &Path, rel: &str| {
        root.join(mount.strip_prefix("/").unwrap_or(mount))
            .join(rel.trim_start_matches('/'))
    };
    match cg.mode {
        Mode::Unified => {
            let rel = paths.get("")?;
            Some(Location::V2(join(cg.unified.as_deref()?, rel)))
        }
        Mode::Hybrid | Mode::Legacy => {
            let dirs: BTreeMap<String, PathBuf> = cg
                .controllers
                .iter()
                .filter_map(|(c, mount)| Some((c.clone(), join(mount, paths.get(c)?))))
                .collect();
            (!dirs.is_empty()).then_some(Location::V1(dirs))
        }
    }
}

fn read(path: &Path) -> Option<String> {
    std::fs::read_to_string(path).ok()
}

fn read_u64(path: &Path) -> Option<u64> {
    read(path)?.trim().parse().ok()
}

/// `key value` lines (memory.stat, cpu.stat, memory.events, memory.oom_control).
fn keyed(s: &str, key: &str) -> Option<u64> {
    s.lines().find_map(|l| {
        let (k, v) = l.split_once(' ')?;
        (k == key).then(|| v.trim().parse().ok())?
    })
}

/// A `*.pressure` file: `some avg10=0.00 avg60=0.00 avg300=0.00 total=0` and, on most
/// resources, a `full` line of the same shape. `None` without a well-formed `some` line.
pub fn parse_psi(s: &str) -> Option<Psi> {
    let line = |which: &str| -> Option<PsiLine> {
        let rest = s
            .lines()
            .find_map(|l| l.strip_prefix(which)?.strip_prefix(' '))?;
        let mut out = PsiLine::default();
        let (mut a10, mut a60, mut a300, mut total) = (false, false, false, false);
        for f in rest.split_whitespace() {
            let (k, v) = f.split_once('=')?;
            match k {
                "avg10" => (out.avg10, a10) = (v.parse().ok()?, true),
                "avg60" => (out.avg60, a60) = (v.parse().ok()?, true),
                "avg300" => (out.avg300, a300) = (v.parse().ok()?, true),
                "total" => (out.total_usec, total) = (v.parse().ok()?, true),
                _ => {}
            }
        }
        (a10 && a60 && a300 && total).then_some(out)
    };
    Some(Psi {
        some: line("some")?,
        full: line("full"),
    })
}

/// v1 reports "no limit" as the largest page-aligned value (2^63 rounded down to a page).
const V1_UNLIMITED: u64 = 1 << 62;

fn working_set(usage: Option<u64>, inactive_file: Option<u64>) -> Option<u64> {
    usage.map(|u| u.saturating_sub(inactive_file.unwrap_or(0)))
}

/// Reads the accounting of one cgroup.
pub fn read_stats(loc: &Location) -> Stats {
    match loc {
        Location::V2(dir) => read_v2(dir),
        Location::V1(dirs) => read_v1(dirs),
    }
}

fn read_v2(dir: &Path) -> Stats {
    let mem_stat = read(&dir.join("memory.stat")).unwrap_or_default();
    let usage = read_u64(&dir.join("memory.current"));
    let (mut rd, mut wr) = (None, None);
    if let Some(io) = read(&dir.join("io.stat")) {
        // `8:0 rbytes=1 wbytes=2 rios=3 ...`, one line per device.
        let (mut r, mut w) = (0u64, 0u64);
        for f in io.split_whitespace() {
            if let Some(v) = f
                .strip_prefix("rbytes=")
                .and_then(|v| v.parse::<u64>().ok())
            {
                r = r.saturating_add(v);
            } else if let Some(v) = f
                .strip_prefix("wbytes=")
                .and_then(|v| v.parse::<u64>().ok())
            {
                w = w.saturating_add(v);
            }
        }
        (rd, wr) = (Some(r), Some(w));
    }
    let (cpu_p, mem_p, io_p) = (
        read(&dir.join("cpu.pressure")),
        read(&dir.join("memory.pressure")),
        read(&dir.join("io.pressure")),
    );
    Stats {
        page_faults: keyed(&mem_stat, "pgfault"),
        major_page_faults: keyed(&mem_stat, "pgmajfault"),
        memory_limit_bytes: read(&dir.join("memory.max")).and_then(|s| s.trim().parse().ok()),
        cpu_psi: cpu_p.as_deref().and_then(parse_psi),
        memory_psi: mem_p.as_deref().and_then(parse_psi),
        io_psi: io_p.as_deref().and_then(parse_psi),
        cpu_usage_nanos: read(&dir.join("cpu.stat"))
            .and_then(|s| keyed(&s, "usage_usec"))
            .map(|u| u.saturating_mul(1000)),
        memory_usage_bytes: usage,
        memory_working_set_bytes: working_set(usage, keyed(&mem_stat, "inactive_file")),
        memory_rss_bytes: keyed(&mem_stat, "anon"),
        oom_kills: read(&dir.join("memory.events")).and_then(|s| keyed(&s, "oom_kill")),
        io_read_bytes: rd,
        io_write_bytes: wr,
        pids: read_u64(&dir.join("pids.current")),
    }
}

fn read_v1(dirs: &BTreeMap<String, PathBuf>) -> Stats {
    let file = |c: &str, name: &str| dirs.get(c).map(|d| d.join(name));
    let mem_stat = file("memory", "memory.stat")
        .and_then(|p| read(&p))
        .unwrap_or_default();
    let usage = file("memory", "memory.usage_in_bytes").and_then(|p| read_u64(&p));
    let (mut rd, mut wr) = (None, None);
    if let Some(s) =
        file("blkio", "blkio.throttle.io_service_bytes_recursive").and_then(|p| read(&p))
    {
        // `8:0 Read 4096` per device and operation, then `Total N`.
        let (mut r, mut w) = (0u64, 0u64);
        for l in s.lines() {
            let f: Vec<&str> = l.split_whitespace().collect();
            if let [_, op, v] = f[..] {
                let v: u64 = v.parse().unwrap_or(0);
                match op {
                    "Read" => r = r.saturating_add(v),
                    "Write" => w = w.saturating_add(v),
                    _ => {}
                }
            }
        }
        (rd, wr) = (Some(r), Some(w));
    }
    Stats {
        cpu_usage_nanos: file("cpuacct", "cpuacct.usage").and_then(|p| read_u64(&p)),
        memory_usage_bytes: usage,
        // Hierarchical `total_` counters: a pod cgroup's own counters miss its children.
        memory_working_set_bytes: working_set(usage, keyed(&mem_stat, "total_inactive_file")),
        memory_rss_bytes: keyed(&mem_stat, "total_rss"),
        oom_kills: file("memory", "memory.oom_control")
            .and_then(|p| read(&p))
            .and_then(|s| keyed(&s, "oom_kill")),
        io_read_bytes: rd,
        io_write_bytes: wr,
        pids: file("pids", "pids.current").and_then(|p| read_u64(&p)),
        page_faults: keyed(&mem_stat, "total_pgfault"),
        major_page_faults: keyed(&mem_stat, "total_pgmajfault"),
        memory_limit_bytes: file("memory", "memory.limit_in_bytes")
            .and_then(|p| read_u64(&p))
            .filter(|&l| l < V1_UNLIMITED),
        cpu_psi: None,
        memory_psi: None,
        io_psi: None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn fixture(name: &str, files: &[(&str, &str)]) -> PathBuf {
        let d = std::env::temp_dir().join(format!("picolet-stats-{name}-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&d);
        for (path, content) in files {
            let p = d.join(path);
            std::fs::create_dir_all(p.parent().unwrap()).unwrap();
            std::fs::write(p, content).unwrap();
        }
        d
    }

    const POD: &str = "kubepods.slice/kubepods-burstable.slice/cri-containerd-abc.scope";

    #[test]
    fn v2_files_as_the_kernel_writes_them() {
        let dir = format!("sys/fs/cgroup/{POD}");
        let f = |n: &str| format!("{dir}/{n}");
        let root = fixture(
            "v2",
            &[
                (
                    &f("cpu.stat"),
                    "usage_usec 2500000\nuser_usec 2000000\nsystem_usec 500000\nnr_periods 0\nnr_throttled 0\nthrottled_usec 0\n",
                ),
                (&f("memory.current"), "10485760\n"),
                (
                    &f("memory.stat"),
                    "anon 4194304\nfile 6291456\nkernel 0\nactive_file 2097152\ninactive_file 4194304\npgfault 1200\npgmajfault 7\n",
                ),
                (
                    &f("memory.events"),
                    "low 0\nhigh 0\nmax 3\noom 1\noom_kill 1\noom_group_kill 0\n",
                ),
                (
                    &f("io.stat"),
                    "8:0 rbytes=4096 wbytes=8192 rios=1 wios=2 dbytes=0 dios=0\n179:0 rbytes=1 wbytes=2 rios=1 wios=1 dbytes=0 dios=0\n",
                ),
                (&f("pids.current"), "3\n"),
                (&f("memory.max"), "max\n"),
                (
                    &f("memory.pressure"),
                    "some avg10=1.50 avg60=0.20 avg300=0.00 total=12345\nfull avg10=0.00 avg60=0.00 avg300=0.00 total=0\n",
                ),
            ],
        );
        let cg = Cgroups {
            mode: Mode::Unified,
            unified: Some(PathBuf::from("/sys/fs/cgroup")),
            controllers: vec![],
        };
        let loc = locate(&cg, &root, &format!("0::/{POD}\n")).unwrap();
        assert_eq!(loc, Location::V2(root.join(&dir)));
        let s = read_stats(&loc);
        assert_eq!(s.cpu_usage_nanos, Some(2_500_000_000));
        assert_eq!(s.memory_usage_bytes, Some(10_485_760));
        assert_eq!(s.memory_working_set_bytes, Some(10_485_760 - 4_194_304));
        assert_eq!(s.memory_rss_bytes, Some(4_194_304));
        assert_eq!(s.oom_kills, Some(1));
        assert_eq!(
            (s.io_read_bytes, s.io_write_bytes),
            (Some(4097), Some(8194))
        );
        assert_eq!(s.pids, Some(3));
        let mem = s.memory_psi.as_ref().expect("memory.pressure is read");
        assert_eq!(
            mem.some,
            PsiLine {
                avg10: 1.5,
                avg60: 0.2,
                avg300: 0.0,
                total_usec: 12345
            }
        );
        assert_eq!(mem.full.map(|f| f.total_usec), Some(0));
        assert_eq!((s.page_faults, s.major_page_faults), (Some(1200), Some(7)));
        assert_eq!(s.memory_limit_bytes, None, "max is no limit");
        // No cpu.pressure or io.pressure in the fixture (a kernel without PSI): unknown, not
        // zero.
        assert_eq!((s.cpu_psi, s.io_psi), (None, None));
        std::fs::remove_dir_all(root).unwrap();
    }

    #[test]
    fn v1_files_as_the_kernel_writes_them() {
        let p = "kubepods/burstable/podx/abc";
        let root = fixture(
            "v1",
            &[
                (
                    &format!("sys/fs/cgroup/cpuacct/{p}/cpuacct.usage"),
                    "123456789\n",
                ),
                (
                    &format!("sys/fs/cgroup/memory/{p}/memory.usage_in_bytes"),
                    "8192000\n",
                ),
                (
                    &format!("sys/fs/cgroup/memory/{p}/memory.stat"),
                    "cache 4096000\nrss 100\ninactive_file 1\ntotal_cache 4096000\ntotal_rss 3000000\ntotal_inactive_file 2000000\ntotal_pgfault 99\ntotal_pgmajfault 3\n",
                ),
                (
                    &format!("sys/fs/cgroup/memory/{p}/memory.oom_control"),
                    "oom_kill_disable 0\nunder_oom 0\noom_kill 2\n",
                ),
                (
                    &format!("sys/fs/cgroup/blkio/{p}/blkio.throttle.io_service_bytes_recursive"),
                    "8:0 Read 4096\n8:0 Write 512\n8:0 Sync 0\n8:0 Async 4608\n8:0 Total 4608\nTotal 4608\n",
                ),
                (&format!("sys/fs/cgroup/pids/{p}/pids.current"), "5\n"),
                (
                    &format!("sys/fs/cgroup/memory/{p}/memory.limit_in_bytes"),
                    "67108864\n",
                ),
            ],
        );
        let cg = Cgroups {
            mode: Mode::Hybrid,
            unified: Some(PathBuf::from("/sys/fs/cgroup/unified")),
            controllers: ["blkio", "cpu", "cpuacct", "memory", "pids"]
                .iter()
                .map(|c| (c.to_string(), PathBuf::from(format!("/sys/fs/cgroup/{c}"))))
                .collect(),
        };
        let proc = format!(
            "12:pids:/{p}\n9:memory:/{p}\n7:blkio:/{p}\n4:cpu,cpuacct:/{p}\n1:name=systemd:/x\n0::/x\n"
        );
        let loc = locate(&cg, &root, &proc).unwrap();
        let s = read_stats(&loc);
        assert_eq!(s.cpu_usage_nanos, Some(123_456_789));
        assert_eq!(s.memory_usage_bytes, Some(8_192_000));
        assert_eq!(s.memory_working_set_bytes, Some(6_192_000));
        assert_eq!(s.memory_rss_bytes, Some(3_000_000));
        assert_eq!(s.oom_kills, Some(2));
        assert_eq!((s.io_read_bytes, s.io_write_bytes), (Some(4096), Some(512)));
        assert_eq!(s.pids, Some(5));
        assert_eq!(s.memory_psi, None, "v1 has no PSI files");
        assert_eq!((s.page_faults, s.major_page_faults), (Some(99), Some(3)));
        assert_eq!(s.memory_limit_bytes, Some(64 << 20));
        std::fs::remove_dir_all(root).unwrap();
    }

    #[test]
    fn working_set_never_below_zero() {
        assert_eq!(working_set(Some(10), Some(20)), Some(0));
        assert_eq!(working_set(None, Some(20)), None);
    }

    #[test]
    fn this_process_is_accounted_on_this_host() {
        // Read-only: this test process's own cgroup.
        let cg = crate::cm::detect::detect(Path::new("/")).unwrap();
        let proc = std::fs::read_to_string("/proc/self/cgroup").unwrap();
        let s = read_stats(&locate(&cg, Path::new("/"), &proc).unwrap());
        assert!(s.cpu_usage_nanos.unwrap() > 0, "{s:?}");
        assert!(s.memory_usage_bytes.unwrap() > 0, "{s:?}");
    }
}

/// CPU rate in nanocores (the Summary API's `usageNanoCores`) between two samples of
/// cumulative usage taken at monotonic nanoseconds `at`. `None` when the counter went back (a
/// restarted container, a new cgroup) or no time passed.
pub fn usage_nano_cores(prev: (u64, u64), cur: (u64, u64)) -> Option<u64> {
    let ((used0, at0), (used1, at1)) = (prev, cur);
    let used = used1.checked_sub(used0)?;
    let elapsed = at1.checked_sub(at0).filter(|&e| e > 0)?;
    let rate = u128::from(used) * 1_000_000_000 / u128::from(elapsed);
    u64::try_from(rate).ok()
}

/// Node totals: the root cgroup's accounting (CPU and memory of everything on the host),
/// with `/proc` where the root cgroup has no file (v2's root has no `memory.current`).
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Node {
    pub cgroup: Stats,
    pub memory_total_bytes: Option<u64>,
}

/// `/proc/meminfo` in bytes.
fn meminfo(s: &str, key: &str) -> Option<u64> {
    s.lines().find_map(|l| {
        let rest = l.strip_prefix(key)?.strip_prefix(':')?;
        let kib: u64 = rest.split_whitespace().next()?.parse().ok()?;
        Some(kib.saturating_mul(1024))
    })
}

/// CPU time of all CPUs from the `cpu` line of `/proc/stat` (USER_HZ ticks, 100 per second
/// on every Linux architecture picolet runs on), without idle and iowait.
fn proc_stat_cpu_nanos(s: &str) -> Option<u64> {
    let line = s.lines().find(|l| l.starts_with("cpu "))?;
    let f: Vec<u64> = line
        .split_whitespace()
        .skip(1)
        .filter_map(|v| v.parse().ok())
        .collect();
    // user nice system idle iowait irq softirq steal (guest is already in user).
    let busy = [0, 1, 2, 5, 6, 7]
        .iter()
        .filter_map(|&i| f.get(i))
        .fold(0u64, |a, &v| a.saturating_add(v));
    Some(busy.saturating_mul(10_000_000))
}

/// Reads the node totals under `root` (`/` on a host).
pub fn read_node(cg: &Cgroups, root: &Path) -> Node {
    let all_root: String = match cg.mode {
        Mode::Unified => "0::/\n".to_owned(),
        _ => cg
            .controllers
            .iter()
            .map(|(c, _)| format!("1:{c}:/\n"))
            .collect(),
    };
    let mut cgroup = locate(cg, root, &all_root)
        .map(|l| read_stats(&l))
        .unwrap_or_default();
    let mem = read(&root.join("proc/meminfo")).unwrap_or_default();
    let total = meminfo(&mem, "MemTotal");
    // The root cgroup's pressure files where it has them; the system-wide /proc/pressure (the
    // same figures) on a kernel whose root cgroup has none, or on a v1 host.
    for (field, name) in [
        (&mut cgroup.cpu_psi, "cpu"),
        (&mut cgroup.memory_psi, "memory"),
        (&mut cgroup.io_psi, "io"),
    ] {
        if field.is_none() {
            *field = read(&root.join("proc/pressure").join(name)).and_then(|s| parse_psi(&s));
        }
    }
    if cgroup.cpu_usage_nanos.is_none() {
        cgroup.cpu_usage_nanos =
            read(&root.join("proc/stat")).and_then(|s| proc_stat_cpu_nanos(&s));
    }
    if cgroup.memory_usage_bytes.is_none() {
        // v2's root has memory.stat but no memory.current: usage is total minus free, as
        // upstream's node summary on v2; working set subtracts the root's inactive file.
        let free = meminfo(&mem, "MemFree");
        let usage = total.zip(free).map(|(t, f)| t.saturating_sub(f));
        let root_stat = cg
            .unified
            .as_deref()
            .filter(|_| cg.mode == Mode::Unified)
            .map(|m| {
                root.join(m.strip_prefix("/").unwrap_or(m))
                    .join("memory.stat")
            });
        let inactive = root_stat
            .and_then(|p| read(&p))
            .and_then(|s| keyed(&s, "inactive_file"))
            .or_else(|| meminfo(&mem, "Inactive(file)"));
        cgroup.memory_usage_bytes = usage;
        cgroup.memory_working_set_bytes = working_set(usage, inactive);
    }
    Node {
        cgroup,
        memory_total_bytes: total,
    }
}

#[cfg(test)]
mod node_tests {
    use super::*;

    const MEMINFO: &str = "MemTotal:        1000000 kB\nMemFree:          200000 kB\nMemAvailable:     600000 kB\nBuffers:           10000 kB\nInactive(file):   300000 kB\n";

    #[test]
    fn v2_node_from_root_cpu_stat_and_meminfo() {
        let d = std::env::temp_dir().join(format!("picolet-stats-node-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&d);
        std::fs::create_dir_all(d.join("sys/fs/cgroup")).unwrap();
        std::fs::create_dir_all(d.join("proc")).unwrap();
        std::fs::write(
            d.join("sys/fs/cgroup/cpu.stat"),
            "usage_usec 1000\nuser_usec 600\nsystem_usec 400\n",
        )
        .unwrap();
        std::fs::write(
            d.join("sys/fs/cgroup/memory.stat"),
            "anon 1\ninactive_file 102400000\n",
        )
        .unwrap();
        std::fs::write(d.join("proc/meminfo"), MEMINFO).unwrap();
        // The root cgroup has a memory.pressure; cpu's comes from /proc/pressure; io has none.
        std::fs::write(
            d.join("sys/fs/cgroup/memory.pressure"),
            "some avg10=0.00 avg60=0.00 avg300=0.00 total=11\nfull avg10=0.00 avg60=0.00 avg300=0.00 total=5\n",
        )
        .unwrap();
        std::fs::create_dir_all(d.join("proc/pressure")).unwrap();
        std::fs::write(
            d.join("proc/pressure/cpu"),
            "some avg10=3.00 avg60=2.00 avg300=1.00 total=42\n",
        )
        .unwrap();
        std::fs::write(
            d.join("proc/pressure/memory"),
            "some avg10=0.00 avg60=0.00 avg300=0.00 total=999\n",
        )
        .unwrap();
        let cg = Cgroups {
            mode: Mode::Unified,
            unified: Some(PathBuf::from("/sys/fs/cgroup")),
            controllers: vec![],
        };
        let n = read_node(&cg, &d);
        assert_eq!(n.cgroup.cpu_usage_nanos, Some(1_000_000));
        assert_eq!(n.memory_total_bytes, Some(1_024_000_000));
        assert_eq!(n.cgroup.memory_usage_bytes, Some(819_200_000));
        assert_eq!(
            n.cgroup.memory_working_set_bytes,
            Some(819_200_000 - 102_400_000)
        );
        let total = |p: &Option<Psi>| p.as_ref().map(|p| p.some.total_usec);
        assert_eq!(
            total(&n.cgroup.memory_psi),
            Some(11),
            "the root cgroup's own file first"
        );
        assert_eq!(total(&n.cgroup.cpu_psi), Some(42), "then /proc/pressure");
        assert_eq!(n.cgroup.io_psi, None, "neither: unknown");
        std::fs::remove_dir_all(d).unwrap();
    }

    #[test]
    fn nanocores_between_samples() {
        // 1.5 s of CPU over 2 s: 0.75 cores.
        let r = usage_nano_cores(
            (1_000_000_000, 10_000_000_000),
            (2_500_000_000, 12_000_000_000),
        );
        assert_eq!(r, Some(750_000_000));
        assert_eq!(usage_nano_cores((5, 0), (4, 1_000)), None);
        assert_eq!(usage_nano_cores((5, 7), (6, 7)), None);
    }

    #[test]
    fn proc_stat_busy_time() {
        let s = "cpu  100 5 50 1000 20 3 2 1 0 0\ncpu0 50 2 25 500 10 1 1 0 0 0\n";
        assert_eq!(
            proc_stat_cpu_nanos(s),
            Some((100 + 5 + 50 + 3 + 2 + 1) * 10_000_000)
        );
    }

    #[test]
    fn this_node_is_accounted() {
        let cg = crate::cm::detect::detect(Path::new("/")).unwrap();
        let n = read_node(&cg, Path::new("/"));
        assert!(n.cgroup.cpu_usage_nanos.unwrap() > 0, "{n:?}");
        let (total, ws) = (
            n.memory_total_bytes.unwrap(),
            n.cgroup.memory_working_set_bytes.unwrap(),
        );
        assert!(ws > 0 && ws <= total, "{n:?}");
    }

    #[test]
    fn pressure_files_as_the_kernel_writes_them() {
        let cpu_old = parse_psi(
            "some avg10=2.04 avg60=0.75 avg300=0.40 total=157656722
",
        )
        .expect("a some line alone is a pressure file");
        assert_eq!(cpu_old.some.avg10, 2.04);
        assert_eq!(cpu_old.some.total_usec, 157_656_722);
        assert_eq!(cpu_old.full, None, "no full line: not reported as zero");
        let io = parse_psi(
            "some avg10=0.00 avg60=0.10 avg300=0.05 total=9\nfull avg10=0.00 avg60=0.08 avg300=0.04 total=7\n",
        )
        .unwrap();
        assert_eq!((io.some.avg60, io.full.unwrap().avg300), (0.10, 0.04));
        assert_eq!(io.full.unwrap().total_usec, 7);
        for bad in [
            "",
            "full avg10=0.00 avg60=0.00 avg300=0.00 total=0\n",
            "some avg10=x avg60=0.00 avg300=0.00 total=0\n",
            "some avg10=0.00 avg60=0.00 total=0\n",
            "something avg10=0.00 avg60=0.00 avg300=0.00 total=0\n",
        ] {
            assert_eq!(parse_psi(bad), None, "{bad:?}");
        }
    }
}

/// The cgroup's path inside its hierarchy (cAdvisor's `id` label: `/kubepods/.../<id>`), from
/// `/proc/<pid>/cgroup`: the v2 path, or on v1 the memory controller's (the cpu one's without
/// memory).
pub fn cgroup_id(cg: &Cgroups, proc_cgroup: &str) -> Option<String> {
    let paths = parse_proc_cgroup(proc_cgroup);
    match cg.mode {
        Mode::Unified => paths.get("").cloned(),
        Mode::Hybrid | Mode::Legacy => paths
            .get("memory")
            .or_else(|| paths.get("cpuacct"))
            .or_else(|| paths.get("cpu"))
            .cloned(),
    }
}

impl Location {
    /// The enclosing cgroup (the pod's, for a container placed under its pod).
    pub fn parent(&self) -> Option<Location> {
        match self {
            Location::V2(d) => Some(Location::V2(d.parent()?.to_path_buf())),
            Location::V1(dirs) => dirs
                .iter()
                .map(|(c, d)| Some((c.clone(), d.parent()?.to_path_buf())))
                .collect::<Option<BTreeMap<_, _>>>()
                .map(Location::V1),
        }
    }

    /// The last component of the directory (of the memory controller's, on v1).
    pub fn name(&self) -> Option<&str> {
        let d = match self {
            Location::V2(d) => d,
            Location::V1(dirs) => dirs.get("memory").or_else(|| dirs.values().next())?,
        };
        d.file_name()?.to_str()
    }
}
