//! Node-pressure eviction: `threshold` (the signals, thresholds and their settings), `signals`
//! (reading them from the host, behind [`SignalSource`]), `manager` (the pure decisions of one
//! round) and here the task that runs a round every 10 s: read the signals off the executor
//! thread, hand them with the pods' usage to the manager, report the pressure conditions, run
//! the node-level reclaim it asks for and read again, and evict the pod it picks.
//!
//! What it needs from the rest of picolet comes through [`Seams`]: the pods and their usage,
//! the reclaimers (container GC now; image GC plugs in as another [`Reclaim`]), the command
//! that evicts a pod and where the conditions go.

pub mod manager;
pub mod signals;
pub mod threshold;

use std::cell::RefCell;
use std::collections::HashMap;
use std::future::Future;
use std::pin::Pin;
use std::rc::Rc;
use std::sync::Arc;

pub use manager::{
    Action, Candidate, Cause, ContainerStorage, ContainerUsage, Eviction, Limit, Manager, PERIOD,
    Pressure, StorageUse, VolumeStorage,
};
pub use signals::{HostSignals, Observation, Observations, SignalSource};
pub use threshold::{Config, Settings, Signal};

use crate::api::Pod;
use crate::rt;

/// A pod that may be evicted, with its running containers (name, runtime ID).
pub type RunningPod = (Rc<Pod>, Vec<(String, String)>);

/// A boxed future on the executor thread.
pub type Local<'a, T> = Pin<Box<dyn Future<Output = T> + 'a>>;

/// Something that frees node-level disk before pods are evicted.
pub trait Reclaim {
    fn name(&self) -> &'static str;
    fn reclaim(&self) -> Local<'_, ()>;
}

/// What the eviction task uses of the rest of picolet.
pub struct Seams {
    pub signals: Arc<dyn SignalSource>,
    /// The pods that may be evicted, with their usage.
    pub candidates: Box<dyn Fn() -> Local<'static, Vec<Candidate>>>,
    /// Tried in order when a disk signal is met, before any pod is evicted.
    pub reclaimers: Vec<Box<dyn Reclaim>>,
    /// Evicts one pod (the loop's command); false when the pod could not be evicted.
    pub evict: Box<dyn Fn(&Eviction) -> bool>,
    /// Where the pressure conditions go (the Node status).
    pub pressure: Box<dyn Fn(Pressure)>,
    /// Whether an evicted pod's resources are reclaimed (its containers removed, so their
    /// writable layers and logs with them): upstream's `podResourcesAreReclaimed`.
    pub cleaned_up: Box<dyn Fn(&str) -> bool>,
}

/// After an eviction, how long the next round waits at most for the evicted pods to be cleaned
/// up, and how often it looks (upstream's `podCleanupTimeout` and `podCleanupPollFreq`): a round
/// that read the disk before the evicted pod's layer was removed would evict another pod.
pub const POD_CLEANUP_TIMEOUT: std::time::Duration = std::time::Duration::from_secs(30);
pub const POD_CLEANUP_POLL: std::time::Duration = std::time::Duration::from_secs(1);

/// Waits until every evicted pod is cleaned up, or [`POD_CLEANUP_TIMEOUT`] (upstream's
/// `waitForPodsCleanup`). Returns whether they all were.
pub async fn wait_for_cleanup(seams: &Seams, evicted: &[Eviction]) -> bool {
    if evicted.is_empty() {
        return true;
    }
    let names = || {
        evicted
            .iter()
            .map(|e| format!("{}/{}", e.namespace, e.name))
            .collect::<Vec<_>>()
            .join(", ")
    };
    let deadline = rt::now() + POD_CLEANUP_TIMEOUT;
    loop {
        if evicted.iter().all(|e| (seams.cleaned_up)(&e.uid)) {
            log::info!("eviction: pods successfully cleaned up: {}", names());
            return true;
        }
        if rt::now() >= deadline {
            log::info!(
                "eviction: timed out waiting for pods to be cleaned up: {}",
                names()
            );
            return false;
        }
        rt::sleep(POD_CLEANUP_POLL).await;
    }
}

async fn read(signals: &Arc<dyn SignalSource>) -> Observations {
    let s = signals.clone();
    rt::unblock(move || s.read()).await
}

/// Carries out one eviction through the seams; false when the pod could not be evicted.
fn carry_out(seams: &Seams, e: &Eviction) -> bool {
    let why = match e.cause {
        Cause::Threshold(s) => format!("{} threshold met", s.name()),
        c => format!("{} exceeded", c.name()),
    };
    log::warn!(
        "eviction: {why}: evicting pod {}/{} ({}) with grace period {}s: {}",
        e.namespace,
        e.name,
        e.uid,
        e.grace,
        e.message.trim_end()
    );
    let done = (seams.evict)(e);
    if !done {
        log::warn!(
            "eviction: pod {}/{} could not be evicted",
            e.namespace,
            e.name
        );
    }
    done
}

/// One round of the manager (upstream's `synchronize`): the pressure conditions, then the
/// pods over a storage limit of their own (all of them, whatever the node's disk), and only
/// when there are none, a threshold's reclaim or eviction. Returns the pods evicted.
pub async fn round(m: &mut Manager, seams: &Seams) -> Vec<Eviction> {
    // The round's time is when it starts: reads that take a varying time do not move it.
    let now = rt::now();
    let obs = read(&seams.signals).await;
    let pods = (seams.candidates)().await;
    let (pressure, mut action) = m.observe(&obs, &pods, now);
    (seams.pressure)(pressure);
    let local = manager::local_storage(&pods);
    if !local.is_empty() {
        return local.into_iter().filter(|e| carry_out(seams, e)).collect();
    }
    if let Action::Reclaim(signal) = action {
        log::info!(
            "eviction: {} threshold met; reclaiming node-level resources first",
            signal.name()
        );
        for r in &seams.reclaimers {
            log::debug!("eviction: reclaiming with {}", r.name());
            r.reclaim().await;
        }
        let obs = read(&seams.signals).await;
        let pods = (seams.candidates)().await;
        action = m.after_reclaim(&obs, &pods, signal, now);
    }
    match action {
        Action::Evict(e) if carry_out(seams, &e) => vec![e],
        _ => Vec::new(),
    }
}

/// Runs a round every [`PERIOD`] for as long as the task lives.
pub async fn run(cfg: Config, seams: Seams) {
    let mut m = Manager::new(cfg, !seams.reclaimers.is_empty());
    let mut tick = rt::interval(PERIOD);
    loop {
        tick.tick().await;
        let evicted = round(&mut m, &seams).await;
        wait_for_cleanup(&seams, &evicted).await;
    }
}

/// The manager's view of a pod: its priority, criticality and memory requests, and its
/// usage: per running container (name, accounting), `None` when unknown.
pub fn candidate(
    pod: &Pod,
    usage: Option<Vec<(String, crate::stats::cgroup::Stats)>>,
) -> Candidate {
    let request = |c: &crate::api::Container| {
        c.resources
            .requests
            .get("memory")
            .map_or(0, crate::api::Quantity::value)
    };
    let static_pod = pod
        .metadata
        .annotations
        .get(crate::config::ANNOTATION_CONFIG_SOURCE)
        .is_some_and(|s| s != crate::config::Source::Api.as_str());
    let containers = usage.map(|u| {
        u.into_iter()
            .map(|(name, st)| ContainerUsage {
                memory_request: pod
                    .spec
                    .containers
                    .iter()
                    .chain(&pod.spec.init_containers)
                    .find(|c| c.name == name)
                    .map_or(0, request),
                memory_working_set: st
                    .memory_working_set_bytes
                    .and_then(|v| i64::try_from(v).ok())
                    .unwrap_or(0),
                name,
            })
            .collect::<Vec<_>>()
    });
    Candidate {
        uid: pod.metadata.uid.clone(),
        namespace: pod.metadata.namespace.clone(),
        name: pod.metadata.name.clone(),
        priority: pod.spec.priority.unwrap_or(0),
        critical: manager::is_critical(pod.spec.priority, pod.spec.priority_class_name.as_deref()),
        static_pod,
        grace_period: pod.spec.termination_grace_period_seconds.unwrap_or(30),
        // App containers and sidecars run side by side; plain init containers are done.
        memory_request: pod
            .spec
            .containers
            .iter()
            .chain(pod.spec.init_containers.iter().filter(|c| c.is_sidecar()))
            .map(request)
            .sum(),
        processes: None,
        containers,
        disk_request: pod
            .spec
            .containers
            .iter()
            .chain(pod.spec.init_containers.iter().filter(|c| c.is_sidecar()))
            .map(|c| quantity(&c.resources.requests, STORAGE).map_or(0, |l| l.value))
            .sum(),
        storage: None,
    }
}

const STORAGE: &str = "ephemeral-storage";

fn quantity(
    m: &std::collections::BTreeMap<String, crate::api::Quantity>,
    name: &str,
) -> Option<Limit> {
    m.get(name).map(|q| Limit {
        value: q.value(),
        text: q.to_string(),
    })
}

/// What to measure of a pod: its running containers' log directories and its emptyDir
/// volumes on disk (`medium: Memory` is tmpfs, bounded by its size).
pub fn pod_trees(
    root_dir: &std::path::Path,
    logs_dir: &std::path::Path,
    pod: &Pod,
    running: &[(String, String)],
) -> crate::stats::ephemeral::PodTrees {
    let m = &pod.metadata;
    let logs = crate::kuberuntime::config::pod_log_dir(logs_dir, pod);
    crate::stats::ephemeral::PodTrees {
        uid: m.uid.clone(),
        containers: running
            .iter()
            .map(|(name, id)| (name.clone(), id.clone(), logs.join(name)))
            .collect(),
        volumes: pod
            .spec
            .volumes
            .iter()
            .filter(|v| {
                v.empty_dir
                    .as_ref()
                    .is_some_and(|e| e.medium.as_deref() != Some("Memory"))
            })
            .map(|v| {
                (
                    v.name.clone(),
                    crate::volume::empty_dir_path(root_dir, &m.uid, &v.name),
                )
            })
            .collect(),
    }
}

/// A pod's ephemeral storage against its spec's requests and limits. The pod's limit is its
/// containers' limits together as upstream's `PodLimits` counts them: the app containers and
/// sidecars summed, or the largest init container's when that is more; none when no
/// container sets one.
pub fn storage_use(pod: &Pod, disk: &crate::stats::ephemeral::PodDisk) -> StorageUse {
    let spec = &pod.spec;
    let find = |name: &str| spec.containers.iter().find(|c| c.name == name);
    let total = disk.total();
    let as_i64 = |v: u64| i64::try_from(v).unwrap_or(i64::MAX);
    let running: Vec<_> = spec
        .containers
        .iter()
        .chain(spec.init_containers.iter().filter(|c| c.is_sidecar()))
        .filter_map(|c| quantity(&c.resources.limits, STORAGE))
        .collect();
    let init = spec
        .init_containers
        .iter()
        .filter(|c| !c.is_sidecar())
        .filter_map(|c| quantity(&c.resources.limits, STORAGE))
        .map(|l| l.value)
        .max();
    let sum = (!running.is_empty()).then(|| running.iter().map(|l| l.value).sum::<i64>());
    let pod_limit = match (sum, init) {
        (Some(s), Some(i)) => Some(s.max(i)),
        (s, i) => s.or(i),
    };
    StorageUse {
        bytes: as_i64(total.bytes),
        inodes: as_i64(total.inodes),
        containers: disk
            .containers
            .iter()
            .map(|c| {
                let spec = find(&c.name);
                ContainerStorage {
                    name: c.name.clone(),
                    used: as_i64(c.used().bytes),
                    request: spec
                        .and_then(|s| quantity(&s.resources.requests, STORAGE))
                        .map_or(0, |l| l.value),
                    limit: spec
                        .and_then(|s| quantity(&s.resources.limits, STORAGE))
                        .filter(|l| l.value != 0),
                }
            })
            .collect(),
        volumes: disk
            .volumes
            .iter()
            .map(|v| VolumeStorage {
                name: v.name.clone(),
                used: as_i64(v.usage.bytes),
                size_limit: spec
                    .volumes
                    .iter()
                    .find(|s| s.name == v.name)
                    .and_then(|s| s.empty_dir.as_ref()?.size_limit.as_ref())
                    .map(|q| Limit {
                        value: q.value(),
                        text: q.to_string(),
                    }),
            })
            .collect(),
        pod_limit,
    }
}

/// Where the pods' ephemeral storage is measured and kept.
pub struct Disk {
    pub storage: Rc<crate::stats::ephemeral::Storage>,
    pub runtime: Rc<dyn crate::stats::RuntimeFacts>,
    pub root_dir: std::path::PathBuf,
    pub logs_dir: std::path::PathBuf,
}

/// Reads running containers' accounting straight from cgroupfs: the init pid of each
/// container (one runtime call, then cached by container ID), its cgroup, its files.
pub struct Usage {
    pub runtime: Rc<dyn crate::cri::RuntimeService>,
    pub cgroups: Option<crate::cm::detect::Cgroups>,
    /// Where disk usage is measured; `None` leaves it unknown.
    pub disk: Option<Disk>,
    pids: RefCell<HashMap<String, u32>>,
}

impl Usage {
    pub fn new(
        runtime: Rc<dyn crate::cri::RuntimeService>,
        cgroups: Option<crate::cm::detect::Cgroups>,
    ) -> Self {
        Usage {
            runtime,
            cgroups,
            disk: None,
            pids: RefCell::default(),
        }
    }

    /// Candidates for these pods and their running containers (name, ID), with their
    /// ephemeral storage after a measurement pass.
    pub async fn candidates(&self, pods: Vec<RunningPod>) -> Vec<Candidate> {
        let mut out = self.memory_candidates(&pods).await;
        if let Some(d) = &self.disk {
            let trees: Vec<_> = pods
                .iter()
                .map(|(p, cs)| pod_trees(&d.root_dir, &d.logs_dir, p, cs))
                .collect();
            d.storage.refresh(&trees, &*d.runtime).await;
            for (c, (p, _)) in out.iter_mut().zip(&pods) {
                c.storage = d.storage.pod(&p.metadata.uid).map(|u| storage_use(p, &u));
            }
        }
        out
    }

    async fn memory_candidates(&self, pods: &[RunningPod]) -> Vec<Candidate> {
        let Some(cg) = self.cgroups.clone() else {
            return pods.iter().map(|(p, _)| candidate(p, None)).collect();
        };
        let live: std::collections::HashSet<&str> = pods
            .iter()
            .flat_map(|(_, cs)| cs.iter().map(|(_, id)| id.as_str()))
            .collect();
        self.pids
            .borrow_mut()
            .retain(|id, _| live.contains(id.as_str()));
        let mut wanted: Vec<(usize, String, u32)> = Vec::new();
        for (i, (_, cs)) in pods.iter().enumerate() {
            for (name, id) in cs {
                let cached = self.pids.borrow().get(id).copied();
                let pid = match cached {
                    Some(p) => Some(p),
                    None => {
                        match crate::kuberuntime::container_init_pid(&*self.runtime, id).await {
                            Ok(Some(p)) => {
                                self.pids.borrow_mut().insert(id.clone(), p);
                                Some(p)
                            }
                            _ => None,
                        }
                    }
                };
                if let Some(pid) = pid {
                    wanted.push((i, name.clone(), pid));
                }
            }
        }
        let read = rt::unblock(move || {
            let root = std::path::Path::new("/");
            wanted
                .into_iter()
                .map(|(i, name, pid)| {
                    let st = crate::stats::locate_pid(&cg, root, pid)
                        .map(|l| crate::stats::cgroup::read_stats(&l));
                    (i, name, st)
                })
                .collect::<Vec<_>>()
        })
        .await;
        let mut per_pod: Vec<Option<Vec<(String, crate::stats::cgroup::Stats)>>> =
            pods.iter().map(|_| Some(Vec::new())).collect();
        let mut pids: Vec<u64> = pods.iter().map(|_| 0).collect();
        for (i, name, st) in read {
            match st {
                Some(st) => {
                    pids[i] += st.pids.unwrap_or(0);
                    if let Some(v) = per_pod[i].as_mut() {
                        v.push((name, st));
                    }
                }
                None => per_pod[i] = None,
            }
        }
        pods.iter()
            .zip(per_pod)
            .zip(pids)
            .map(|(((p, cs), usage), n)| {
                // A pod whose running containers could not be located is unknown, not idle.
                let known = usage.filter(|u| u.len() == cs.len());
                let mut c = candidate(p, known);
                c.processes = (c.containers.is_some() && !cs.is_empty()).then_some(n);
                c
            })
            .collect()
    }
}

/// Container GC as a reclaimer: dead containers beyond the newest per name, and old
/// sandboxes, of every pod the runtime holds (upstream's DeleteAllUnusedContainers).
pub struct ContainerGc {
    pub rm: Rc<crate::kuberuntime::RuntimeManager>,
    pub cache: Rc<RefCell<crate::pleg::Cache>>,
}

impl Reclaim for ContainerGc {
    fn name(&self) -> &'static str {
        "container GC"
    }

    fn reclaim(&self) -> Local<'_, ()> {
        Box::pin(async move {
            let pods: Vec<_> = {
                let cache = self.cache.borrow();
                cache
                    .uids()
                    .iter()
                    .filter_map(|u| cache.get(u).map(|c| c.status.clone()))
                    .filter(|st| !crate::kuberuntime::gc_plan(st).is_empty())
                    .collect()
            };
            for st in pods {
                self.rm.gc_pod(&st).await;
            }
        })
    }
}

/// Image GC as a reclaimer: every unused image the image GC manager may remove goes (the
/// kubelet's DeleteUnusedImages), keeping the images the node's pods name.
pub struct ImageGc {
    pub gc: Rc<crate::kuberuntime::image_gc_manager::ImageGcManager>,
    /// The images the desired pods name; `None` until every pod source was seen (nothing is
    /// removed then).
    pub needed: Box<dyn Fn() -> Option<Vec<String>>>,
}

impl Reclaim for ImageGc {
    fn name(&self) -> &'static str {
        "image GC"
    }

    fn reclaim(&self) -> Local<'_, ()> {
        Box::pin(async move {
            let Some(needed) = (self.needed)() else {
                return;
            };
            match self.gc.delete_unused_images(&needed).await {
                Ok(0) => {}
                Ok(freed) => log::info!("eviction: image GC freed {freed} bytes"),
                Err(e) => log::warn!("eviction: image GC failed: {e}"),
            }
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::cell::Cell;
    use std::time::Duration;

    struct Fixed(std::sync::Mutex<Vec<Observations>>);

    impl SignalSource for Fixed {
        fn read(&self) -> Observations {
            let mut v = self.0.lock().unwrap();
            if v.len() > 1 {
                v.remove(0)
            } else {
                v[0].clone()
            }
        }
    }

    struct Counting(Rc<Cell<u32>>);

    impl Reclaim for Counting {
        fn name(&self) -> &'static str {
            "counting"
        }
        fn reclaim(&self) -> Local<'_, ()> {
            self.0.set(self.0.get() + 1);
            Box::pin(async {})
        }
    }

    fn disk(available: i64) -> Observations {
        let mut o = Observations::default();
        o.values.insert(
            Signal::NodeFsAvailable,
            Observation {
                available,
                capacity: 100,
            },
        );
        o
    }

    /// A manager with the one hard threshold `nodefs.available<10%`, able to reclaim or not.
    fn nodefs_manager(can_reclaim: bool) -> Manager {
        Manager::new(
            Settings {
                hard: Some(threshold::Given {
                    origin: "--eviction-hard".into(),
                    value: threshold::parse_map("nodefs.available<10%", '<').unwrap(),
                }),
                ..Settings::default()
            }
            .build()
            .unwrap(),
            can_reclaim,
        )
    }

    fn pods() -> Vec<Candidate> {
        vec![candidate(
            &crate::api::decode_pod(
                br#"{"apiVersion":"v1","kind":"Pod","metadata":{"name":"a","namespace":"default","uid":"u-a"},"spec":{"containers":[{"name":"c","image":"busybox"}]}}"#,
                crate::api::Format::Json,
            )
            .unwrap()
            .pod,
            None,
        )]
    }

    /// The task's rounds under the fake clock: pressure reported, reclaim before a re-read,
    /// and the pod evicted only when the re-read still shows pressure.
    #[test]
    fn rounds_reclaim_then_evict() {
        let clock = rt::FakeClock::install();
        rt::block_on(async {
            let reclaims = Rc::new(Cell::new(0));
            let evicted: Rc<RefCell<Vec<String>>> = Rc::default();
            let pressure = Rc::new(Cell::new(Pressure::default()));
            let (e2, p2) = (evicted.clone(), pressure.clone());
            let seams = Seams {
                // Low, freed by reclaim; then low, and still low after reclaim.
                signals: Arc::new(Fixed(std::sync::Mutex::new(vec![
                    disk(5),
                    disk(50),
                    disk(5),
                    disk(5),
                ]))),
                candidates: Box::new(|| Box::pin(async { pods() })),
                reclaimers: vec![Box::new(Counting(reclaims.clone()))],
                evict: Box::new(move |e| {
                    e2.borrow_mut().push(e.name.clone());
                    true
                }),
                pressure: Box::new(move |p| p2.set(p)),
                cleaned_up: Box::new(|_| true),
            };
            let mut m = nodefs_manager(true);
            assert_eq!(round(&mut m, &seams).await, []);
            assert_eq!(reclaims.get(), 1);
            assert!(pressure.get().disk);
            clock.advance(Duration::from_secs(10));
            let e = round(&mut m, &seams).await.remove(0);
            assert_eq!(e.name, "a");
            assert_eq!(reclaims.get(), 2);
            assert_eq!(*evicted.borrow(), ["a"]);
        });
    }

    /// After an eviction the task waits, looking every second, until the pod is cleaned up,
    /// and no longer than 30 s.
    #[test]
    fn an_eviction_waits_for_the_pod_to_be_cleaned_up() {
        let clock = rt::FakeClock::install();
        rt::block_on(async {
            let gone = Rc::new(Cell::new(false));
            let looks = Rc::new(Cell::new(0u32));
            let (g2, l2) = (gone.clone(), looks.clone());
            let seams = Rc::new(Seams {
                signals: Arc::new(Fixed(std::sync::Mutex::new(vec![disk(5)]))),
                candidates: Box::new(|| Box::pin(async { pods() })),
                reclaimers: Vec::new(),
                evict: Box::new(|_| true),
                pressure: Box::new(|_| {}),
                cleaned_up: Box::new(move |uid| {
                    assert_eq!(uid, "u-a");
                    l2.set(l2.get() + 1);
                    g2.get()
                }),
            });
            let mut m = nodefs_manager(false);
            let evicted = round(&mut m, &seams).await;
            assert_eq!(evicted.len(), 1);
            assert!(wait_for_cleanup(&seams, &[]).await, "nothing to wait for");

            let (s2, e2) = (seams.clone(), evicted.clone());
            let t0 = rt::now();
            let waiting = rt::spawn(async move { wait_for_cleanup(&s2, &e2).await });
            for _ in 0..3 {
                rt::settle().await;
                clock.advance(POD_CLEANUP_POLL);
            }
            gone.set(true);
            rt::settle().await;
            assert!(waiting.await);
            assert_eq!(rt::now() - t0, 3 * POD_CLEANUP_POLL);
            assert_eq!(looks.get(), 4);

            gone.set(false);
            let (s2, e2) = (seams.clone(), evicted.clone());
            let t0 = rt::now();
            let waiting = rt::spawn(async move { wait_for_cleanup(&s2, &e2).await });
            for _ in 0..40 {
                rt::settle().await;
                clock.advance(POD_CLEANUP_POLL);
            }
            assert!(!waiting.await, "gives up");
            assert!(rt::now() - t0 >= POD_CLEANUP_TIMEOUT);
        });
    }

    const LIMITED: &[u8] = br#"{"apiVersion":"v1","kind":"Pod","metadata":{"name":"w","namespace":"default","uid":"u-w"},"spec":{"volumes":[{"name":"scratch","emptyDir":{"sizeLimit":"8Mi"}},{"name":"ram","emptyDir":{"medium":"Memory"}}],"initContainers":[{"name":"init","image":"x","resources":{"limits":{"ephemeral-storage":"50Mi"}}},{"name":"side","image":"x","restartPolicy":"Always","resources":{"limits":{"ephemeral-storage":"4Mi"}}}],"containers":[{"name":"a","image":"x","resources":{"requests":{"ephemeral-storage":"1Mi"},"limits":{"ephemeral-storage":"10Mi"}}},{"name":"b","image":"x","resources":{"limits":{"ephemeral-storage":"30Mi"}}},{"name":"c","image":"x"}]}}"#;

    fn limited() -> Pod {
        crate::api::decode_pod(LIMITED, crate::api::Format::Json)
            .unwrap()
            .pod
    }

    #[test]
    fn trees_and_storage_use_from_a_pod() {
        use crate::stats::disk::Usage;
        use crate::stats::ephemeral::{ContainerDisk, PodDisk, VolumeDisk};
        let pod = limited();
        let t = pod_trees(
            std::path::Path::new("/root"),
            std::path::Path::new("/logs"),
            &pod,
            &[("a".into(), "id-a".into())],
        );
        assert_eq!(
            t.containers,
            [(
                "a".to_owned(),
                "id-a".to_owned(),
                std::path::PathBuf::from("/logs/default_w_u-w/a")
            )]
        );
        assert_eq!(
            t.volumes,
            [(
                "scratch".to_owned(),
                crate::volume::empty_dir_path(std::path::Path::new("/root"), "u-w", "scratch")
            )],
            "the tmpfs emptyDir is not on disk"
        );
        let mi = |n: u64| Usage {
            bytes: n << 20,
            inodes: n,
        };
        let disk = PodDisk {
            containers: vec![
                ContainerDisk {
                    name: "a".into(),
                    rootfs: Some(mi(3)),
                    logs: Some(mi(1)),
                },
                ContainerDisk {
                    name: "c".into(),
                    rootfs: None,
                    logs: Some(mi(2)),
                },
            ],
            volumes: vec![VolumeDisk {
                name: "scratch".into(),
                usage: mi(7),
            }],
            at: None,
        };
        let u = storage_use(&pod, &disk);
        assert_eq!((u.bytes, u.inodes), (13 << 20, 13));
        // 44Mi for the app containers and the sidecar together; the init container asks more.
        assert_eq!(u.pod_limit, Some(50 << 20));
        assert_eq!(u.containers[0].used, 4 << 20);
        assert_eq!(u.containers[0].request, 1 << 20);
        assert_eq!(u.containers[0].limit.as_ref().unwrap().text, "10Mi");
        assert_eq!(u.containers[1].limit, None);
        assert_eq!(u.volumes[0].size_limit.as_ref().unwrap().value, 8 << 20);
        let c = candidate(&pod, None);
        assert_eq!(c.disk_request, 1 << 20);
    }

    /// A round under the fake clock, with no threshold met: the pods over a limit of their
    /// own are evicted, all in the same round, and the node reports no pressure.
    #[test]
    fn a_round_evicts_pods_over_their_storage_limits_without_pressure() {
        let clock = rt::FakeClock::install();
        rt::block_on(async {
            let evicted: Rc<RefCell<Vec<(String, String)>>> = Rc::default();
            let pressure = Rc::new(Cell::new(Pressure::default()));
            let (e2, p2) = (evicted.clone(), pressure.clone());
            let usage = Rc::new(Cell::new(5u64));
            let u2 = usage.clone();
            let seams = Seams {
                signals: Arc::new(Fixed(std::sync::Mutex::new(vec![disk(90)]))),
                candidates: Box::new(move || {
                    let mib = u2.get();
                    Box::pin(async move {
                        let pod = limited();
                        let mut other = pods().remove(0);
                        let d = crate::stats::ephemeral::PodDisk {
                            containers: vec![crate::stats::ephemeral::ContainerDisk {
                                name: "a".into(),
                                rootfs: Some(crate::stats::disk::Usage {
                                    bytes: mib << 20,
                                    inodes: 1,
                                }),
                                logs: None,
                            }],
                            volumes: vec![],
                            at: None,
                        };
                        other.storage = Some(StorageUse::default());
                        let mut c = candidate(&pod, None);
                        c.storage = Some(storage_use(&pod, &d));
                        vec![other, c]
                    })
                }),
                reclaimers: vec![],
                evict: Box::new(move |e| {
                    e2.borrow_mut().push((e.name.clone(), e.message.clone()));
                    true
                }),
                pressure: Box::new(move |p| p2.set(p)),
                cleaned_up: Box::new(|_| true),
            };
            let mut m = nodefs_manager(false);
            assert_eq!(round(&mut m, &seams).await, []);
            usage.set(11);
            clock.advance(Duration::from_secs(10));
            let e = round(&mut m, &seams).await;
            assert_eq!(e.len(), 1);
            assert_eq!(e[0].cause, Cause::ContainerStorageLimit);
            assert_eq!(e[0].grace, manager::IMMEDIATE_GRACE);
            assert_eq!(
                *evicted.borrow(),
                [(
                    "w".to_owned(),
                    "Container a exceeded its local ephemeral storage limit \"10Mi\". ".to_owned()
                )]
            );
            assert_eq!(pressure.get(), Pressure::default(), "no node pressure");
        });
    }

    #[test]
    fn candidate_from_a_pod() {
        let pod = crate::api::decode_pod(
            br#"{"apiVersion":"v1","kind":"Pod","metadata":{"name":"p","namespace":"kube-system","uid":"u","annotations":{"kubernetes.io/config.source":"file"}},"spec":{"priorityClassName":"system-node-critical","terminationGracePeriodSeconds":5,"initContainers":[{"name":"init","image":"x","resources":{"requests":{"memory":"100Mi"}}},{"name":"side","image":"x","restartPolicy":"Always","resources":{"requests":{"memory":"2Mi"}}}],"containers":[{"name":"a","image":"x","resources":{"requests":{"memory":"64Mi"}}},{"name":"b","image":"x","resources":{"requests":{"memory":"1Mi"}}}]}}"#,
            crate::api::Format::Json,
        )
        .unwrap()
        .pod;
        let st = crate::stats::cgroup::Stats {
            memory_working_set_bytes: Some(100 << 20),
            ..Default::default()
        };
        let c = candidate(&pod, Some(vec![("a".into(), st)]));
        assert!(c.critical && c.static_pod);
        assert_eq!(c.grace_period, 5);
        // App containers and the sidecar; the finished init container's request does not count.
        assert_eq!(c.memory_request, 67 << 20);
        assert_eq!(
            c.containers.unwrap(),
            vec![ContainerUsage {
                name: "a".into(),
                memory_working_set: 100 << 20,
                memory_request: 64 << 20
            }]
        );
    }
}
