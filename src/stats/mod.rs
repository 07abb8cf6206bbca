//! Resource accounting read straight from cgroupfs, and its serving.
//!
//! - `cgroup`: the readers for v2 and v1, node totals.
//! - `mod` (here): the [`Provider`] that takes one [`Snapshot`] of the node, its pods and their
//!   running containers (each container's cgroup located once from its init pid, then read
//!   directly: no runtime call per scrape).
//! - `summary`: the kubelet's Summary API from a snapshot; `expose`: the Prometheus texts
//!   (`/metrics`, `/metrics/cadvisor`, `/metrics/resource`) through `prom`, the text encoder.
//!
//! The eviction side reads the same [`Provider::summary`]: per pod and container usage and
//! the node's totals.

pub mod cgroup;
pub mod disk;
pub mod ephemeral;
pub mod expose;
pub mod prom;
pub mod summary;

use std::cell::RefCell;
use std::collections::HashMap;
use std::future::Future;
use std::path::{Path, PathBuf};
use std::pin::Pin;
use std::rc::Rc;

use crate::cm::detect::Cgroups;
use crate::kubecontainer::{ContainerState, SandboxState};
use crate::rt;
use cgroup::{Location, Stats};

/// Where the accounting of a container whose init process is `pid` lives (the pid from
/// `kuberuntime::container_init_pid`, worth caching per container): its `/proc/<pid>/cgroup`
/// resolved against the hierarchies. `None` once the process is gone.
pub fn locate_pid(cg: &Cgroups, root: &Path, pid: u32) -> Option<Location> {
    let proc = std::fs::read_to_string(root.join(format!("proc/{pid}/cgroup"))).ok()?;
    cgroup::locate(cg, root, &proc)
}

/// A running container as the PLEG cache knows it.
#[derive(Debug, Clone, PartialEq)]
pub struct ContainerRef {
    pub id: String,
    pub name: String,
    pub image: String,
    /// Unix nanoseconds.
    pub started_at: i64,
}

/// A pod with a ready sandbox and its running containers.
#[derive(Debug, Clone, PartialEq)]
pub struct PodRef {
    pub uid: String,
    pub name: String,
    pub namespace: String,
    /// When its sandbox was created, unix nanoseconds.
    pub start: i64,
    pub containers: Vec<ContainerRef>,
}

/// The pods to account for, from the PLEG's status cache: those with a ready sandbox, with
/// their running containers, sorted by namespace and name.
pub fn pods_from_cache(cache: &crate::pleg::Cache) -> Vec<PodRef> {
    let mut out: Vec<PodRef> = cache
        .uids()
        .iter()
        .filter_map(|uid| {
            let st = &cache.get(uid)?.status;
            let sb = st
                .sandboxes
                .iter()
                .find(|s| s.state == SandboxState::Ready)?;
            Some(PodRef {
                uid: uid.clone(),
                name: st.name.to_string(),
                namespace: st.namespace.to_string(),
                start: sb.created_at,
                containers: st
                    .containers
                    .iter()
                    .filter(|c| c.state == ContainerState::Running && *c.sandbox_id == *sb.id)
                    .map(|c| ContainerRef {
                        id: c.id.to_string(),
                        name: c.name.to_string(),
                        image: c.image.to_string(),
                        started_at: c.started_at,
                    })
                    .collect(),
            })
        })
        .collect();
    out.sort_by(|a, b| (&a.namespace, &a.name).cmp(&(&b.namespace, &b.name)));
    out
}

/// A filesystem's size from statvfs.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct FsSample {
    pub capacity_bytes: u64,
    pub available_bytes: u64,
    pub used_bytes: u64,
    pub inodes: u64,
    pub inodes_free: u64,
}

/// statvfs of the filesystem holding `path`.
pub fn statvfs(path: &Path) -> Option<FsSample> {
    let v = nix::sys::statvfs::statvfs(path).ok()?;
    #[allow(
        clippy::useless_conversion,
        reason = "the fields are u32 or u64 by target"
    )]
    let (frsize, blocks, bfree, bavail, files, ffree) = (
        u64::from(v.fragment_size()),
        u64::from(v.blocks()),
        u64::from(v.blocks_free()),
        u64::from(v.blocks_available()),
        u64::from(v.files()),
        u64::from(v.files_free()),
    );
    Some(FsSample {
        capacity_bytes: blocks.saturating_mul(frsize),
        available_bytes: bavail.saturating_mul(frsize),
        used_bytes: blocks.saturating_sub(bfree).saturating_mul(frsize),
        inodes: files,
        inodes_free: ffree,
    })
}

#[derive(Debug, Clone, Default, PartialEq)]
pub struct NodeSample {
    pub stats: cgroup::Node,
    /// Boot time, unix nanoseconds (the node's `startTime`).
    pub boot_time: i64,
    pub fs: Option<FsSample>,
    pub image_fs: Option<FsSample>,
    pub max_pid: Option<u64>,
    pub processes: Option<u64>,
}

#[derive(Debug, Clone, PartialEq)]
pub struct ContainerSample {
    pub id: String,
    pub name: String,
    pub image: String,
    pub started_at: i64,
    /// The cgroup's path in its hierarchy (cAdvisor's `id`), when located.
    pub cgroup: Option<String>,
    pub stats: Stats,
}

#[derive(Debug, Clone, PartialEq)]
pub struct PodSample {
    pub uid: String,
    pub name: String,
    pub namespace: String,
    pub start: i64,
    /// The pod's own cgroup, when its containers sit in one (`pod<uid>` under kubepods);
    /// otherwise its stats are the sum of its containers'.
    pub cgroup: Option<String>,
    pub stats: Stats,
    pub containers: Vec<ContainerSample>,
    /// Its network interfaces, from its first located container's network namespace.
    pub network: Option<Vec<Iface>>,
    /// Its ephemeral storage, when measured.
    pub disk: Option<ephemeral::PodDisk>,
}

/// One reading of everything, taken at one instant.
#[derive(Debug, Clone, PartialEq)]
pub struct Snapshot {
    /// Unix nanoseconds.
    pub at: i64,
    /// Monotonic nanoseconds, for rates.
    pub mono: i64,
    pub node: NodeSample,
    pub pods: Vec<PodSample>,
}

/// The image filesystem as the runtime reports it (CRI ImageFsInfo): where it is mounted and
/// what the images use of it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ImageFs {
    pub mountpoint: PathBuf,
    pub used_bytes: Option<u64>,
    pub inodes_used: Option<u64>,
}

/// A call in flight to the runtime.
pub type Ask<'a, T> = Pin<Box<dyn Future<Output = Option<T>> + 'a>>;

/// What accounting needs from the runtime, in its own terms (the runtime manager implements
/// it over the CRI; tests fake it).
pub trait RuntimeFacts {
    /// A running container's init pid.
    fn container_pid(&self, container_id: &str) -> Ask<'_, u32>;
    /// The image filesystem.
    fn image_fs(&self) -> Ask<'_, ImageFs>;
    /// Each container's writable layer (by container ID), as the runtime measures it; `None`
    /// when the runtime does not say.
    fn writable_layers(&self) -> Ask<'_, HashMap<String, disk::Usage>> {
        Box::pin(async { None })
    }
}

/// Where a container's accounting lives, found once.
#[derive(Debug, Clone)]
struct Located {
    loc: Location,
    id: String,
    /// The init pid it was located by (its network namespace is the pod's).
    pid: u32,
}

/// One network interface's counters (`/proc/<pid>/net/dev`).
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct Iface {
    pub name: String,
    pub rx_bytes: u64,
    pub rx_errors: u64,
    pub tx_bytes: u64,
    pub tx_errors: u64,
}

/// The interfaces of a `/proc/<pid>/net/dev`, the loopback left out.
pub fn parse_net_dev(text: &str) -> Vec<Iface> {
    text.lines()
        .skip(2)
        .filter_map(|l| {
            let (name, rest) = l.split_once(':')?;
            let name = name.trim();
            let f: Vec<u64> = rest
                .split_whitespace()
                .map(|v| v.parse().ok())
                .collect::<Option<_>>()?;
            (name != "lo" && f.len() >= 11).then(|| Iface {
                name: name.to_owned(),
                rx_bytes: f[0],
                rx_errors: f[2],
                tx_bytes: f[8],
                tx_errors: f[10],
            })
        })
        .collect()
}

/// The pod's interfaces, read in the network namespace of its container whose init pid is
/// `pid`; `None` when that is the host's (a `hostNetwork` pod: the node's counters are not the
/// pod's) or cannot be read.
fn pod_network(root: &Path, pid: u32) -> Option<Vec<Iface>> {
    let ns = |p: &str| std::fs::read_link(root.join(p)).ok();
    let own = ns(&format!("proc/{pid}/ns/net"))?;
    if ns("proc/1/ns/net").is_some_and(|host| host == own) {
        return None;
    }
    let text = std::fs::read_to_string(root.join(format!("proc/{pid}/net/dev"))).ok()?;
    Some(parse_net_dev(&text))
}

pub struct Provider {
    root: PathBuf,
    cg: Option<Cgroups>,
    nodefs: PathBuf,
    runtime: Rc<dyn RuntimeFacts>,
    located: RefCell<HashMap<String, Located>>,
    rates: RefCell<summary::Rates>,
    /// The pods' ephemeral storage, as the eviction rounds last measured it.
    storage: Option<Rc<ephemeral::Storage>>,
    /// Origin of the snapshots' monotonic nanoseconds.
    epoch: std::time::Instant,
}

/// Sum of the containers' figures, for a pod without a cgroup of its own: a field is known
/// when any container's is.
pub fn sum_stats<'a>(all: impl Iterator<Item = &'a Stats>) -> Stats {
    fn add(a: &mut Option<u64>, b: Option<u64>) {
        if let Some(b) = b {
            *a = Some(a.unwrap_or(0).saturating_add(b));
        }
    }
    let mut s = Stats::default();
    for c in all {
        add(&mut s.cpu_usage_nanos, c.cpu_usage_nanos);
        add(&mut s.memory_usage_bytes, c.memory_usage_bytes);
        add(&mut s.memory_working_set_bytes, c.memory_working_set_bytes);
        add(&mut s.memory_rss_bytes, c.memory_rss_bytes);
        add(&mut s.oom_kills, c.oom_kills);
        add(&mut s.io_read_bytes, c.io_read_bytes);
        add(&mut s.io_write_bytes, c.io_write_bytes);
        add(&mut s.pids, c.pids);
        add(&mut s.page_faults, c.page_faults);
        add(&mut s.major_page_faults, c.major_page_faults);
    }
    s
}

/// The pod's own cgroup: the one directory all its containers sit in, when its name carries
/// the pod's UID (`pod<uid>` with cgroupfs, `...-pod<uid with _>.slice` with systemd).
pub fn pod_cgroup(uid: &str, containers: &[&Location]) -> Option<Location> {
    let first = containers.first()?.parent()?;
    let name = first.name()?;
    let (dashes, underscores) = (uid.to_owned(), uid.replace('-', "_"));
    if uid.is_empty() || !(name.contains(&dashes) || name.contains(&underscores)) {
        return None;
    }
    containers
        .iter()
        .all(|l| l.parent().as_ref() == Some(&first))
        .then_some(first)
}

fn parent_id(id: &str) -> Option<String> {
    let (p, _) = id.trim_end_matches('/').rsplit_once('/')?;
    Some(if p.is_empty() { "/".into() } else { p.into() })
}

/// Boot time from `/proc/stat`'s `btime`, unix nanoseconds.
fn boot_time(proc_stat: &str) -> Option<i64> {
    let s: i64 = proc_stat
        .lines()
        .find_map(|l| l.strip_prefix("btime "))?
        .trim()
        .parse()
        .ok()?;
    s.checked_mul(1_000_000_000)
}

impl Provider {
    /// `root` prefixes `/proc` and `/sys` (`/` on a host); `nodefs` is the kubelet's root
    /// directory.
    pub fn new(root: &Path, nodefs: &Path, runtime: Rc<dyn RuntimeFacts>) -> Self {
        let cg = match crate::cm::detect::detect(root) {
            Ok(c) => Some(c),
            Err(e) => {
                log::warn!("stats: no cgroup accounting for containers: {e}");
                None
            }
        };
        Provider {
            root: root.to_owned(),
            cg,
            nodefs: nodefs.to_owned(),
            runtime,
            located: RefCell::default(),
            rates: RefCell::default(),
            storage: None,
            epoch: rt::now(),
        }
    }

    /// Reports the pods' ephemeral storage from `storage` (rootfs, logs, volumes,
    /// ephemeral-storage in the Summary API).
    pub fn with_storage(mut self, storage: Rc<ephemeral::Storage>) -> Self {
        self.storage = Some(storage);
        self
    }

    /// The cgroups found at start.
    pub fn cgroups(&self) -> Option<&Cgroups> {
        self.cg.as_ref()
    }

    /// Finds the cgroups of containers not located yet (one runtime call each, once), and
    /// forgets those no longer running.
    async fn locate(&self, pods: &[PodRef]) {
        let Some(cg) = &self.cg else { return };
        let live: std::collections::HashSet<&str> = pods
            .iter()
            .flat_map(|p| p.containers.iter().map(|c| c.id.as_str()))
            .collect();
        self.located
            .borrow_mut()
            .retain(|id, _| live.contains(id.as_str()));
        for id in live {
            if self.located.borrow().contains_key(id) {
                continue;
            }
            let Some(pid) = self.runtime.container_pid(id).await else {
                continue;
            };
            let proc = std::fs::read_to_string(self.root.join(format!("proc/{pid}/cgroup")));
            let Ok(proc) = proc else { continue };
            if let (Some(loc), Some(cid)) = (
                cgroup::locate(cg, &self.root, &proc),
                cgroup::cgroup_id(cg, &proc),
            ) {
                self.located
                    .borrow_mut()
                    .insert(id.to_owned(), Located { loc, id: cid, pid });
            }
        }
    }

    /// Reads everything once: the node, and each pod and running container in `pods`. The
    /// cgroup files are read on the blocking pool.
    pub async fn snapshot(&self, pods: Vec<PodRef>) -> Snapshot {
        self.locate(&pods).await;
        let located = self.located.borrow().clone();
        let (root, cg) = (self.root.clone(), self.cg.clone());
        let nodefs = self.nodefs.clone();
        let imagefs = self.runtime.image_fs().await;
        // The clock is read here, on the executor's thread, whose clock tests may fake.
        let since = rt::now().saturating_duration_since(self.epoch);
        let (at, mono) = (
            rt::now_nanos(),
            i64::try_from(since.as_nanos()).unwrap_or(i64::MAX),
        );
        let mut snap = rt::unblock(move || {
            read_snapshot(&root, cg.as_ref(), &nodefs, imagefs, pods, &located)
        })
        .await;
        (snap.at, snap.mono) = (at, mono);
        if let Some(s) = &self.storage {
            for p in &mut snap.pods {
                p.disk = s.pod(&p.uid);
            }
        }
        snap
    }

    /// The Summary API's answer for the node named `node_name`.
    pub async fn summary(&self, node_name: &str, pods: Vec<PodRef>) -> summary::Summary {
        let snap = self.snapshot(pods).await;
        summary::assemble(&snap, node_name, &mut self.rates.borrow_mut())
    }

    /// A snapshot and its Summary, from one reading (`/metrics/resource` uses both).
    pub async fn snapshot_and_summary(
        &self,
        node_name: &str,
        pods: Vec<PodRef>,
    ) -> (Snapshot, summary::Summary) {
        let snap = self.snapshot(pods).await;
        let s = summary::assemble(&snap, node_name, &mut self.rates.borrow_mut());
        (snap, s)
    }
}

fn read_snapshot(
    root: &Path,
    cg: Option<&Cgroups>,
    nodefs: &Path,
    imagefs: Option<ImageFs>,
    pods: Vec<PodRef>,
    located: &HashMap<String, Located>,
) -> Snapshot {
    let read = |p: &str| std::fs::read_to_string(root.join(p)).ok();
    let node = NodeSample {
        stats: cg.map(|cg| cgroup::read_node(cg, root)).unwrap_or_default(),
        boot_time: read("proc/stat")
            .and_then(|s| boot_time(&s))
            .unwrap_or_default(),
        fs: statvfs(nodefs),
        // The filesystem's size from statvfs; what the images use, from the runtime.
        image_fs: imagefs.and_then(|i| {
            let mut f =
                statvfs(&root.join(i.mountpoint.strip_prefix("/").unwrap_or(&i.mountpoint)))?;
            f.used_bytes = i.used_bytes.unwrap_or(f.used_bytes);
            Some(f)
        }),
        max_pid: read("proc/sys/kernel/pid_max").and_then(|s| s.trim().parse().ok()),
        processes: nix::sys::sysinfo::sysinfo()
            .ok()
            .map(|i| u64::from(i.process_count())),
    };
    let pods = pods
        .into_iter()
        .map(|p| {
            let containers: Vec<ContainerSample> = p
                .containers
                .into_iter()
                .map(|c| {
                    let l = located.get(&c.id);
                    ContainerSample {
                        stats: l.map(|l| cgroup::read_stats(&l.loc)).unwrap_or_default(),
                        cgroup: l.map(|l| l.id.clone()),
                        id: c.id,
                        name: c.name,
                        image: c.image,
                        started_at: c.started_at,
                    }
                })
                .collect();
            let locs: Vec<&Location> = containers
                .iter()
                .filter_map(|c| located.get(&c.id).map(|l| &l.loc))
                .collect();
            let own = (locs.len() == containers.len())
                .then(|| pod_cgroup(&p.uid, &locs))
                .flatten();
            let (cgroup, stats) = match own {
                Some(loc) => (
                    containers
                        .first()
                        .and_then(|c| c.cgroup.as_deref())
                        .and_then(parent_id),
                    cgroup::read_stats(&loc),
                ),
                None => (None, sum_stats(containers.iter().map(|c| &c.stats))),
            };
            let network = containers
                .iter()
                .find_map(|c| located.get(&c.id))
                .and_then(|l| pod_network(root, l.pid));
            PodSample {
                uid: p.uid,
                name: p.name,
                namespace: p.namespace,
                start: p.start,
                cgroup,
                stats,
                network,
                containers,
                disk: None,
            }
        })
        .collect();
    Snapshot {
        at: 0,
        mono: 0,
        node,
        pods,
    }
}

#[cfg(test)]
mod tests;
