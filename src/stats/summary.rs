//! The kubelet's Summary API (`stats/v1alpha1`, served at `/stats/summary`) as serde structs
//! with upstream's JSON names, and its assembly from one [`Snapshot`] (pure): usage in
//! nanocores from the previous snapshot's cumulative CPU ([`Rates`]).

use std::collections::{HashMap, HashSet};

use serde::Serialize;

use super::cgroup::{Psi, PsiLine, Stats, usage_nano_cores};
use super::disk::Usage;
use super::{FsSample, Snapshot};
use crate::api::time::rfc3339;

#[derive(Debug, Clone, Serialize, PartialEq)]
pub struct Summary {
    pub node: NodeStats,
    pub pods: Vec<PodStats>,
}

#[derive(Debug, Clone, Serialize, PartialEq)]
#[serde(rename_all = "camelCase")]
pub struct NodeStats {
    pub node_name: String,
    pub start_time: String,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub cpu: Option<CpuStats>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub memory: Option<MemoryStats>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub io: Option<IoStats>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub fs: Option<FsStats>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub runtime: Option<RuntimeStats>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub rlimit: Option<RlimitStats>,
}

#[derive(Debug, Clone, Serialize, PartialEq)]
#[serde(rename_all = "camelCase")]
pub struct RuntimeStats {
    #[serde(skip_serializing_if = "Option::is_none")]
    pub image_fs: Option<FsStats>,
}

#[derive(Debug, Clone, Serialize, PartialEq)]
pub struct RlimitStats {
    pub time: String,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub maxpid: Option<u64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub curproc: Option<u64>,
}

#[derive(Debug, Clone, Serialize, PartialEq)]
#[serde(rename_all = "camelCase")]
pub struct PodStats {
    pub pod_ref: PodReference,
    pub start_time: String,
    pub containers: Vec<ContainerStats>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub cpu: Option<CpuStats>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub memory: Option<MemoryStats>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub io: Option<IoStats>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub network: Option<NetworkStats>,
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub volume: Vec<VolumeStats>,
    #[serde(rename = "ephemeral-storage", skip_serializing_if = "Option::is_none")]
    pub ephemeral_storage: Option<FsStats>,
    #[serde(rename = "process_stats", skip_serializing_if = "Option::is_none")]
    pub process_stats: Option<ProcessStats>,
}

#[derive(Debug, Clone, Serialize, PartialEq)]
pub struct PodReference {
    pub name: String,
    pub namespace: String,
    pub uid: String,
}

#[derive(Debug, Clone, Serialize, PartialEq)]
pub struct ProcessStats {
    #[serde(rename = "process_count", skip_serializing_if = "Option::is_none")]
    pub process_count: Option<u64>,
}

#[derive(Debug, Clone, Serialize, PartialEq)]
#[serde(rename_all = "camelCase")]
pub struct ContainerStats {
    pub name: String,
    pub start_time: String,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub cpu: Option<CpuStats>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub memory: Option<MemoryStats>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub io: Option<IoStats>,
    /// The writable layer, on the image filesystem.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub rootfs: Option<FsStats>,
    /// The container's log files, on the node's filesystem.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub logs: Option<FsStats>,
}

/// One interface's counters.
#[derive(Debug, Clone, Serialize, PartialEq)]
#[serde(rename_all = "camelCase")]
pub struct InterfaceStats {
    pub name: String,
    pub rx_bytes: Option<u64>,
    pub rx_errors: Option<u64>,
    pub tx_bytes: Option<u64>,
    pub tx_errors: Option<u64>,
}

/// The pod's network: the default interface (`eth0`, else the first) inline, and every
/// interface.
#[derive(Debug, Clone, Serialize, PartialEq)]
pub struct NetworkStats {
    pub time: String,
    #[serde(flatten)]
    pub default: InterfaceStats,
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub interfaces: Vec<InterfaceStats>,
}

/// The default interface upstream reports inline.
const DEFAULT_INTERFACE: &str = "eth0";

fn network(time: &str, ifaces: &[super::Iface]) -> Option<NetworkStats> {
    let one = |i: &super::Iface| InterfaceStats {
        name: i.name.clone(),
        rx_bytes: Some(i.rx_bytes),
        rx_errors: Some(i.rx_errors),
        tx_bytes: Some(i.tx_bytes),
        tx_errors: Some(i.tx_errors),
    };
    let default = ifaces
        .iter()
        .find(|i| i.name == DEFAULT_INTERFACE)
        .or(ifaces.first())?;
    Some(NetworkStats {
        time: time.to_owned(),
        default: one(default),
        interfaces: ifaces.iter().map(one).collect(),
    })
}

/// One volume's usage: the filesystem's figures inline, and its name.
#[derive(Debug, Clone, Serialize, PartialEq)]
pub struct VolumeStats {
    #[serde(flatten)]
    pub fs: FsStats,
    pub name: String,
}

#[derive(Debug, Clone, Serialize, PartialEq)]
#[serde(rename_all = "camelCase")]
pub struct CpuStats {
    pub time: String,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub usage_nano_cores: Option<u64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub usage_core_nano_seconds: Option<u64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub psi: Option<PsiStats>,
}

#[derive(Debug, Clone, Serialize, PartialEq)]
#[serde(rename_all = "camelCase")]
pub struct MemoryStats {
    pub time: String,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub available_bytes: Option<u64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub usage_bytes: Option<u64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub working_set_bytes: Option<u64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub rss_bytes: Option<u64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub page_faults: Option<u64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub major_page_faults: Option<u64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub psi: Option<PsiStats>,
}

/// IO figures; the Summary carries only their pressure.
#[derive(Debug, Clone, Serialize, PartialEq)]
pub struct IoStats {
    pub time: String,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub psi: Option<PsiStats>,
}

/// Pressure stall information of one resource. Upstream always writes both lines; a kernel
/// without the `full` line (`cpu.pressure` before Linux 5.13) reads as zeros there, as it
/// does upstream.
#[derive(Debug, Clone, Serialize, PartialEq)]
pub struct PsiStats {
    pub full: PsiData,
    pub some: PsiData,
}

/// `total` is the kernel's cumulative stall in microseconds, passed on as read (as upstream
/// does); the averages are percentages.
#[derive(Debug, Clone, Serialize, PartialEq)]
pub struct PsiData {
    pub total: u64,
    pub avg10: f64,
    pub avg60: f64,
    pub avg300: f64,
}

fn psi(p: &Option<Psi>) -> Option<PsiStats> {
    let data = |l: PsiLine| PsiData {
        total: l.total_usec,
        avg10: l.avg10,
        avg60: l.avg60,
        avg300: l.avg300,
    };
    p.as_ref().map(|p| PsiStats {
        full: data(p.full.unwrap_or_default()),
        some: data(p.some),
    })
}

fn io(time: &str, s: &Stats) -> Option<IoStats> {
    s.io_psi.as_ref().map(|_| IoStats {
        time: time.to_owned(),
        psi: psi(&s.io_psi),
    })
}

#[derive(Debug, Clone, Serialize, PartialEq)]
#[serde(rename_all = "camelCase")]
pub struct FsStats {
    pub time: String,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub available_bytes: Option<u64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub capacity_bytes: Option<u64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub used_bytes: Option<u64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub inodes_free: Option<u64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub inodes: Option<u64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub inodes_used: Option<u64>,
}

/// Below this window two samples are too close for a rate; the previous rate stands.
const MIN_RATE_WINDOW_NANOS: i64 = 1_000_000_000;

/// The previous cumulative CPU of each node, pod and container, for `usageNanoCores` as the
/// rate since then (upstream's CRI stats provider keeps the same cache). The first snapshot
/// of an object has no rate.
#[derive(Debug, Default)]
pub struct Rates {
    prev: HashMap<String, Prev>,
}

#[derive(Debug, Clone, Copy)]
struct Prev {
    usage: u64,
    /// Monotonic nanoseconds of the sample.
    at: i64,
    rate: Option<u64>,
}

impl Rates {
    /// The rate of `key` from its previous sample to this one (`at` monotonic nanoseconds).
    pub fn rate(&mut self, key: &str, usage: u64, at: i64) -> Option<u64> {
        match self.prev.get_mut(key) {
            Some(p) if at.saturating_sub(p.at) >= MIN_RATE_WINDOW_NANOS => {
                let r = u64::try_from(p.at)
                    .ok()
                    .zip(u64::try_from(at).ok())
                    .and_then(|(a0, a1)| usage_nano_cores((p.usage, a0), (usage, a1)));
                *p = Prev { usage, at, rate: r };
                r
            }
            Some(p) => p.rate,
            None => {
                self.prev.insert(
                    key.to_owned(),
                    Prev {
                        usage,
                        at,
                        rate: None,
                    },
                );
                None
            }
        }
    }

    /// Forgets the objects not in `keys` (gone pods and containers).
    pub fn retain(&mut self, keys: &HashSet<String>) {
        self.prev.retain(|k, _| keys.contains(k));
    }
}

fn cpu(time: &str, s: &Stats, rate: Option<u64>) -> Option<CpuStats> {
    s.cpu_usage_nanos.map(|u| CpuStats {
        time: time.to_owned(),
        usage_nano_cores: rate,
        usage_core_nano_seconds: Some(u),
        psi: psi(&s.cpu_psi),
    })
}

/// Memory as upstream reports it; `availableBytes` is limit minus working set, when there is a
/// limit (the node's limit is its memory).
fn memory(time: &str, s: &Stats, limit: Option<u64>) -> Option<MemoryStats> {
    let ws = s.memory_working_set_bytes;
    (s.memory_usage_bytes.is_some() || ws.is_some()).then(|| MemoryStats {
        time: time.to_owned(),
        available_bytes: limit.zip(ws).map(|(l, w)| l.saturating_sub(w)),
        usage_bytes: s.memory_usage_bytes,
        working_set_bytes: ws,
        rss_bytes: s.memory_rss_bytes,
        page_faults: s.page_faults,
        major_page_faults: s.major_page_faults,
        psi: psi(&s.memory_psi),
    })
}

fn fs(time: &str, f: &FsSample) -> FsStats {
    FsStats {
        time: time.to_owned(),
        available_bytes: Some(f.available_bytes),
        capacity_bytes: Some(f.capacity_bytes),
        used_bytes: Some(f.used_bytes),
        inodes_free: Some(f.inodes_free),
        inodes: Some(f.inodes),
        inodes_used: Some(f.inodes.saturating_sub(f.inodes_free)),
    }
}

/// A measured usage on a filesystem: what is used from the measurement, the rest from the
/// filesystem's statvfs (upstream fills capacity, available and inodes the same way).
fn used_on(time: &str, on: Option<&FsSample>, u: Usage) -> FsStats {
    FsStats {
        time: time.to_owned(),
        available_bytes: on.map(|f| f.available_bytes),
        capacity_bytes: on.map(|f| f.capacity_bytes),
        used_bytes: Some(u.bytes),
        inodes_free: on.map(|f| f.inodes_free),
        inodes: on.map(|f| f.inodes),
        inodes_used: Some(u.inodes),
    }
}

/// Builds the Summary of one snapshot, advancing `rates`.
pub fn assemble(snap: &Snapshot, node_name: &str, rates: &mut Rates) -> Summary {
    let time = rfc3339(snap.at);
    let mut keys = HashSet::new();
    let mut rate = |key: String, s: &Stats| {
        let r = s
            .cpu_usage_nanos
            .and_then(|u| rates.rate(&key, u, snap.mono));
        keys.insert(key);
        r
    };
    let n = &snap.node;
    let node = NodeStats {
        node_name: node_name.to_owned(),
        start_time: rfc3339(n.boot_time),
        cpu: cpu(&time, &n.stats.cgroup, rate("node".into(), &n.stats.cgroup)),
        memory: memory(&time, &n.stats.cgroup, n.stats.memory_total_bytes),
        io: io(&time, &n.stats.cgroup),
        fs: n.fs.as_ref().map(|f| fs(&time, f)),
        runtime: n.image_fs.as_ref().map(|f| RuntimeStats {
            image_fs: Some(fs(&time, f)),
        }),
        rlimit: Some(RlimitStats {
            time: time.clone(),
            maxpid: n.max_pid,
            curproc: n.processes,
        }),
    };
    let (nodefs, imagefs) = (n.fs.as_ref(), n.image_fs.as_ref().or(n.fs.as_ref()));
    let pods = snap
        .pods
        .iter()
        .map(|p| {
            let disk = p.disk.as_ref();
            let of = |name: &str| disk.and_then(|d| d.containers.iter().find(|c| c.name == name));
            PodStats {
                pod_ref: PodReference {
                    name: p.name.clone(),
                    namespace: p.namespace.clone(),
                    uid: p.uid.clone(),
                },
                start_time: rfc3339(p.start),
                containers: p
                    .containers
                    .iter()
                    .map(|c| ContainerStats {
                        name: c.name.clone(),
                        start_time: rfc3339(c.started_at),
                        cpu: cpu(&time, &c.stats, rate(format!("ctr/{}", c.id), &c.stats)),
                        memory: memory(&time, &c.stats, c.stats.memory_limit_bytes),
                        io: io(&time, &c.stats),
                        rootfs: of(&c.name)
                            .and_then(|d| d.rootfs)
                            .map(|u| used_on(&time, imagefs, u)),
                        logs: of(&c.name)
                            .and_then(|d| d.logs)
                            .map(|u| used_on(&time, nodefs, u)),
                    })
                    .collect(),
                cpu: cpu(&time, &p.stats, rate(format!("pod/{}", p.uid), &p.stats)),
                memory: memory(&time, &p.stats, p.stats.memory_limit_bytes),
                io: io(&time, &p.stats),
                network: p.network.as_deref().and_then(|n| network(&time, n)),
                volume: disk
                    .map(|d| {
                        d.volumes
                            .iter()
                            .map(|v| VolumeStats {
                                fs: used_on(&time, nodefs, v.usage),
                                name: v.name.clone(),
                            })
                            .collect()
                    })
                    .unwrap_or_default(),
                ephemeral_storage: disk.map(|d| used_on(&time, nodefs, d.total())),
                process_stats: p.stats.pids.map(|n| ProcessStats {
                    process_count: Some(n),
                }),
            }
        })
        .collect();
    rates.retain(&keys);
    Summary { node, pods }
}
