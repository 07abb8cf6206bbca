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

pub use manager::{Action, Candidate, ContainerUsage, Eviction, Manager, PERIOD, Pressure};
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
}

async fn read(signals: &Arc<dyn SignalSource>) -> Observations {
    let s = signals.clone();
    rt::unblock(move || s.read()).await
}

/// One round of the manager (upstream's `synchronize`).
pub async fn round(m: &mut Manager, seams: &Seams) -> Option<Eviction> {
    // The round's time is when it starts: reads that take a varying time do not move it.
    let now = rt::now();
    let obs = read(&seams.signals).await;
    let pods = (seams.candidates)().await;
    let (pressure, mut action) = m.observe(&obs, &pods, now);
    (seams.pressure)(pressure);
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
        Action::Evict(e) => {
            log::warn!(
                "eviction: {} threshold met: evicting pod {}/{} ({}) with grace period {}s: {}",
                e.signal.name(),
                e.namespace,
                e.name,
                e.uid,
                e.grace,
                e.message.trim_end()
            );
            if (seams.evict)(&e) {
                Some(e)
            } else {
                log::warn!(
                    "eviction: pod {}/{} could not be evicted",
                    e.namespace,
                    e.name
                );
                None
            }
        }
        _ => None,
    }
}

/// Runs a round every [`PERIOD`] for as long as the task lives.
pub async fn run(cfg: Config, seams: Seams) {
    let mut m = Manager::new(cfg, !seams.reclaimers.is_empty());
    let mut tick = rt::interval(PERIOD);
    loop {
        tick.tick().await;
        round(&mut m, &seams).await;
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
    }
}

/// Reads running containers' accounting straight from cgroupfs: the init pid of each
/// container (one runtime call, then cached by container ID), its cgroup, its files.
pub struct Usage {
    pub runtime: Rc<dyn crate::cri::RuntimeService>,
    pub cgroups: Option<crate::cm::detect::Cgroups>,
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
            pids: RefCell::default(),
        }
    }

    /// Candidates for these pods and their running containers (name, ID).
    pub async fn candidates(&self, pods: Vec<RunningPod>) -> Vec<Candidate> {
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
            };
            let mut m = Manager::new(
                Settings {
                    hard: Some(threshold::Given {
                        origin: "--eviction-hard".into(),
                        value: threshold::parse_map("nodefs.available<10%", '<').unwrap(),
                    }),
                    ..Settings::default()
                }
                .build()
                .unwrap(),
                true,
            );
            assert_eq!(round(&mut m, &seams).await, None);
            assert_eq!(reclaims.get(), 1);
            assert!(pressure.get().disk);
            clock.advance(Duration::from_secs(10));
            let e = round(&mut m, &seams).await.unwrap();
            assert_eq!(e.name, "a");
            assert_eq!(reclaims.get(), 2);
            assert_eq!(*evicted.borrow(), ["a"]);
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
