//! The sync loop: one task selecting over source snapshots, PLEG events, worker reports, the
//! 1 s sync tick, the 2 s housekeeping tick and the runtime's network turning ready (its status
//! is read every 5 s, every second while the network is not ready). Every decision is made by the pure
//! [`state::LoopState::step`]; this module only turns wake-ups into its inputs and carries out
//! the commands it returns. All runtime calls happen in the pod workers or in spawned tasks, so
//! the loop itself never waits on the runtime or the disk.

#[cfg(feature = "apiserver")]
mod cluster;
#[cfg(feature = "local-api")]
mod host;
mod housekeeping;
mod state;

#[cfg(test)]
mod tests;

use std::cell::RefCell;
use std::rc::Rc;
use std::time::{Duration, Instant};

use crate::config::{Mux, Snapshot};
use crate::kubecontainer::PodRuntimeStatus;
use crate::kuberuntime::RuntimeManager;
use crate::pleg::{self, Cache, Pleg};
use crate::pod_workers::{Done, PodWorkers};
use crate::prober::ProbeManager;
use crate::rt;
use crate::status::manager::StatusManager;
use crate::volume;

pub use state::{Command, Input, LoopConfig, LoopState, View};

pub const SYNC_TICK: Duration = Duration::from_secs(1);
pub const HOUSEKEEPING_PERIOD: Duration = Duration::from_secs(2);
/// How often the loop says, at debug level, how late its tick ran.
pub const LATENESS_WINDOW: Duration = Duration::from_secs(60);

/// The sync loop's tick against its schedule. A tick runs late when the executor was busy
/// with something else when it was due (work that belongs on the blocking pool, say a long
/// directory walk, shows here); each [`LATENESS_WINDOW`] the loop logs how many ticks ran and
/// the worst lateness among them.
#[derive(Debug)]
pub struct TickLateness {
    since: Instant,
    ticks: u32,
    worst: Duration,
}

impl TickLateness {
    pub fn new(now: Instant) -> Self {
        TickLateness {
            since: now,
            ticks: 0,
            worst: Duration::ZERO,
        }
    }

    /// Counts a tick `late` past its due time; once a window has passed, its ticks and the
    /// worst lateness, and a new window begins.
    pub fn record(&mut self, late: Duration, now: Instant) -> Option<(u32, Duration)> {
        self.ticks += 1;
        self.worst = self.worst.max(late);
        if now.saturating_duration_since(self.since) < LATENESS_WINDOW {
            return None;
        }
        let out = (self.ticks, self.worst);
        *self = TickLateness::new(now);
        Some(out)
    }
}

/// The node agent's state as the loop and the local API see it.
pub struct Kubelet {
    rm: Rc<RuntimeManager>,
    cache: Rc<RefCell<Cache>>,
    status: Rc<StatusManager>,
    pleg: Rc<Pleg>,
    workers: PodWorkers,
    prober: ProbeManager,
    state: RefCell<LoopState>,
    last_loop: RefCell<Instant>,
    /// Inputs the loop gives itself (finished GC) and others give it (evictions, objects that
    /// arrived for pods).
    internal: (async_channel::Sender<Input>, async_channel::Receiver<Input>),
    /// The node's pressure conditions, as the eviction manager last reported them.
    pressure: std::cell::Cell<crate::eviction::Pressure>,
    /// Signalled when API pods were added or updated (one slot: signals coalesce), so the task
    /// that fetches their objects and tokens looks at once.
    api_pods_changed: (async_channel::Sender<()>, async_channel::Receiver<()>),
    /// Signalled when the node's readiness changed outside the health checks (the node began
    /// or stopped shutting down), so the Node status is posted at once (one slot).
    node_changed: (async_channel::Sender<()>, async_channel::Receiver<()>),
    /// The last pod status patch failed for want of an apiserver (not a refusal of the pod).
    status_unreachable: std::cell::Cell<bool>,
    /// Leftover pod directories and cgroups that could not be removed (a process still in the
    /// cgroup, a busy mount): retried with backoff, logged by state change.
    leftovers: Rc<RefCell<crate::retry::Failures>>,
}

impl Kubelet {
    #[allow(
        clippy::too_many_arguments,
        reason = "the parts `run` wires, each once"
    )]
    pub fn new(
        rm: Rc<RuntimeManager>,
        cache: Rc<RefCell<Cache>>,
        status: Rc<StatusManager>,
        pleg: Rc<Pleg>,
        workers: PodWorkers,
        prober: ProbeManager,
        mux: Mux,
        cfg: LoopConfig,
    ) -> Self {
        Kubelet {
            rm,
            cache,
            status,
            pleg,
            workers,
            prober,
            state: RefCell::new(LoopState::new(mux, cfg)),
            last_loop: RefCell::new(rt::now()),
            internal: async_channel::unbounded(),
            pressure: std::cell::Cell::default(),
            api_pods_changed: async_channel::bounded(1),
            node_changed: async_channel::bounded(1),
            status_unreachable: std::cell::Cell::new(false),
            leftovers: Rc::new(RefCell::new(crate::retry::Failures::cleanups())),
        }
    }

    /// The node shuts down (or no longer does): new pods are refused, the node is NotReady.
    pub fn set_shutting_down(&self, on: bool) {
        self.state.borrow_mut().shutting_down = on;
        // Full: a signal is already waiting, which says the same.
        let _ = self.node_changed.0.try_send(());
    }

    /// Why the node is not ready besides its health, if it is not: it is shutting down.
    pub fn not_ready_reason(&self) -> Option<&'static str> {
        self.state
            .borrow()
            .shutting_down
            .then_some(crate::nodeshutdown::NOT_READY_MESSAGE)
    }

    /// Receives a signal each time the node's readiness changed outside the health checks.
    #[cfg_attr(
        not(feature = "apiserver"),
        allow(dead_code, reason = "read by the node status task")
    )]
    pub fn node_changed(&self) -> async_channel::Receiver<()> {
        self.node_changed.1.clone()
    }

    /// Whether the last pod status patch failed for want of an apiserver: a shutdown then
    /// does not wait for statuses that cannot be posted.
    #[cfg(feature = "apiserver")]
    pub fn set_status_unreachable(&self, unreachable: bool) {
        self.status_unreachable.set(unreachable);
    }

    #[cfg_attr(
        not(feature = "apiserver"),
        allow(dead_code, reason = "set by the pod status task")
    )]
    pub fn status_unreachable(&self) -> bool {
        self.status_unreachable.get()
    }

    /// The node's name.
    pub fn node_name(&self) -> String {
        self.rm.node().node_name.clone()
    }

    /// The pods a shutdown stops: those that still run or may.
    pub fn shutdown_pods(&self) -> Vec<crate::nodeshutdown::PodInfo> {
        self.eviction_pods()
            .iter()
            .map(|(p, _)| crate::nodeshutdown::PodInfo::of(p))
            .collect()
    }

    /// Stops a pod for the node's shutdown: Failed, reason Terminated, upstream's message and
    /// a DisruptionTarget condition; stopped within `grace` seconds, never run again.
    pub fn shutdown_kill(&self, uid: &str, grace: i64) -> bool {
        use crate::nodeshutdown::{MESSAGE, REASON};
        self.stop_failed(uid, grace, REASON, MESSAGE)
    }

    /// Nothing of the pod runs any more and nothing is stopping it: its termination ended,
    /// or it is gone.
    pub fn pod_stopped(&self, uid: &str) -> bool {
        let st = self.state.borrow();
        !st.terminating.contains_key(uid) && (st.evicted.contains(uid) || !st.pods.contains(uid))
    }

    /// The node's MemoryPressure, DiskPressure and PIDPressure.
    pub fn pressure(&self) -> crate::eviction::Pressure {
        self.pressure.get()
    }

    pub fn set_pressure(&self, p: crate::eviction::Pressure) {
        self.pressure.set(p);
    }

    /// The pods the eviction manager may evict (desired, not stopping, not finished), each
    /// with its running containers (name, runtime ID).
    pub fn eviction_pods(&self) -> Vec<crate::eviction::RunningPod> {
        use crate::kubecontainer::ContainerState;
        let st = self.state.borrow();
        let cache = self.cache.borrow();
        st.pods
            .pods()
            .filter(|p| {
                let uid = &p.metadata.uid;
                !st.evicted.contains(uid)
                    && !st.terminating.contains_key(uid)
                    && !self
                        .status
                        .get(uid)
                        .is_some_and(|s| matches!(s.phase.as_deref(), Some("Succeeded" | "Failed")))
            })
            .map(|p| {
                let running = cache
                    .get(&p.metadata.uid)
                    .map(|c| {
                        c.status
                            .containers
                            .iter()
                            .filter(|c| c.state == ContainerState::Running)
                            .map(|c| (c.name.to_string(), c.id.to_string()))
                            .collect()
                    })
                    .unwrap_or_default();
                (p.clone(), running)
            })
            .collect()
    }

    /// Evicts a pod: its status becomes Failed (Evicted, with the message) at once, and the
    /// loop stops it within the grace period and never runs it again. False when the pod is
    /// not one that may be evicted (gone, stopping, already evicted).
    pub fn evict(&self, uid: &str, grace: i64, message: &str) -> bool {
        self.stop_failed(uid, grace, crate::status::generate::EVICTED, message)
    }

    /// Stops, as [`Kubelet::evict`] does, each pod past its `activeDeadlineSeconds` (counted
    /// from its status's startTime, as upstream), Failed with reason DeadlineExceeded. The
    /// deadline is read at each check, so an update of a running pod's deadline counts.
    fn enforce_active_deadlines(&self) {
        use crate::status::generate::{DEADLINE_EXCEEDED, DEADLINE_MESSAGE};
        let now = rt::now_nanos();
        let past: Vec<(String, i64)> = {
            let st = self.state.borrow();
            st.pods
                .pods()
                .filter_map(|p| {
                    let deadline = p.spec.active_deadline_seconds?;
                    let uid = &p.metadata.uid;
                    let status = self.status.get(uid)?;
                    if matches!(status.phase.as_deref(), Some("Succeeded" | "Failed")) {
                        return None;
                    }
                    let start = crate::logs::format::parse_time(status.start_time?.as_bytes())?;
                    let past = now.saturating_sub(start) >= deadline.saturating_mul(1_000_000_000);
                    past.then(|| (uid.clone(), crate::kuberuntime::config::grace_period(p)))
                })
                .collect()
        };
        for (uid, grace) in past {
            if self.stop_failed(&uid, grace, DEADLINE_EXCEEDED, DEADLINE_MESSAGE) {
                log::info!("pod {uid}: {DEADLINE_MESSAGE}; stopping it");
            }
        }
    }

    /// Fails a pod for good with `reason` and `message`, and has the loop stop it.
    fn stop_failed(&self, uid: &str, grace: i64, reason: &str, message: &str) -> bool {
        let pod = {
            let st = self.state.borrow();
            if st.evicted.contains(uid)
                || st.terminating.contains_key(uid)
                || self.status.is_evicted(uid)
            {
                return false;
            }
            match st.pods.get(uid) {
                Some(p) => p.clone(),
                None => return false,
            }
        };
        self.status.fail(&pod, reason, message);
        // Upstream's eviction manager warns; the active deadline's event is Normal.
        let kind = if reason == crate::status::generate::EVICTED {
            crate::events::Type::Warning
        } else {
            crate::events::Type::Normal
        };
        crate::events::record(&crate::events::ObjectRef::pod(&pod), kind, reason, message);
        self.internal
            .0
            .try_send(Input::Evict {
                uid: uid.to_owned(),
                grace,
            })
            .is_ok()
    }

    /// Feeds one input to the state and carries out what it decides.
    fn feed(&self, input: Input, internal: &async_channel::Sender<Input>) {
        if matches!(input, Input::Snapshot(_)) {
            // Admission weighs new pods against those still running or able to.
            let mut st = self.state.borrow_mut();
            let finished = st
                .pods
                .pods()
                .map(|p| &p.metadata.uid)
                .filter(|u| self.status.is_finished(u))
                .cloned()
                .collect();
            st.finished = finished;
        }
        let finalizable = self.state.borrow().finalizable.len();
        let commands = {
            let cache = self.cache.borrow();
            let view = View {
                listed: self.pleg.has_listed(),
                cache: &cache,
            };
            self.state.borrow_mut().step(input, rt::now(), view)
        };
        if self.state.borrow().finalizable.len() > finalizable {
            // A deleted pod stopped: its final status is to be posted now, not at a period.
            self.status.notify();
        }
        for c in commands {
            self.execute(c, internal);
        }
    }

    fn execute(&self, c: Command, internal: &async_channel::Sender<Input>) {
        match c {
            Command::Dispatch(work) => {
                let uid = work.uid().to_owned();
                let adds = self.workers.dispatch(work);
                self.state.borrow_mut().dispatched(&uid, adds);
            }
            Command::ReportPending(pod) => {
                if pod.status.phase.is_some() {
                    // A pod from the apiserver already has a status: it is where the status
                    // continues from (after a restart, nothing is re-posted that did not change).
                    self.status.seed(&pod.metadata.uid, &pod.status);
                } else if self.status.get(&pod.metadata.uid).is_none() {
                    let empty = PodRuntimeStatus {
                        uid: pod.metadata.uid.as_str().into(),
                        ..Default::default()
                    };
                    self.status.update(&pod, &empty, |_| None);
                }
            }
            Command::EndWorker(uid) => self.workers.remove(&uid),
            Command::CollectGarbage(st) => {
                let (rm, tx) = (self.rm.clone(), internal.clone());
                rt::spawn(async move {
                    rm.gc_pod(&st).await;
                    let _ = tx.send(Input::Collected(st.uid.to_string())).await;
                })
                .detach();
            }
            Command::RemovePodDir(uid) => {
                if !self.leftovers.borrow().due(&uid, rt::now_nanos()) {
                    // Backing off: this round skips it (a line is logged by state change only).
                    let _ = internal.try_send(Input::Collected(uid));
                    return;
                }
                if self.leftovers.borrow().attempts(&uid) == 0 {
                    log::info!("removing leftover directory of pod {uid}");
                }
                let (root, tx) = (self.rm.node().root_dir.clone(), internal.clone());
                let cgroups = self.rm.pod_cgroups().cloned();
                let leftovers = self.leftovers.clone();
                rt::spawn(async move {
                    let u = uid.clone();
                    let r = rt::unblock(move || {
                        // A pod cgroup still holding a process stays until a later round.
                        let cg = match cgroups.map(|pc| pc.remove_pod(&u)) {
                            Some(Err(e)) => Err(format!("its cgroup: {e}")),
                            _ => Ok(()),
                        };
                        let dir = volume::cleanup(&root, &u).map_err(|e| e.to_string());
                        match (cg, dir) {
                            (Ok(()), Ok(())) => Ok(()),
                            (Err(a), Err(b)) => Err(format!("{a}; {b}")),
                            (Err(e), _) | (_, Err(e)) => Err(e),
                        }
                    });
                    let what = format!("removing leftover directory of pod {uid}");
                    match r.await {
                        Err(e) => {
                            leftovers
                                .borrow_mut()
                                .failed(&uid, &what, &e, rt::now_nanos());
                        }
                        Ok(()) => {
                            leftovers.borrow_mut().succeeded(&uid, &what);
                        }
                    }
                    let _ = tx.send(Input::Collected(uid)).await;
                })
                .detach();
            }
            Command::ExpireBackoffs => {
                let now = rt::now_nanos();
                self.rm.gc_backoffs(now);
                self.leftovers.borrow_mut().gc(now);
            }
            Command::StartProbes(pod) => self.prober.add_pod(&pod),
            Command::StopProbes(uid) => self.prober.remove_pod(&uid),
            Command::ApiPodsChanged => {
                // Full: a signal is already waiting, which says the same.
                let _ = self.api_pods_changed.0.try_send(());
            }
            Command::Reject(pod, r) => {
                self.status.reject(&pod, &r.reason, &r.message);
                crate::events::record(
                    &crate::events::ObjectRef::pod(&pod),
                    crate::events::Type::Warning,
                    &r.reason,
                    &r.message,
                );
            }
        }
    }

    /// Runs the loop until the sources' channel closes.
    pub async fn run(
        self: Rc<Self>,
        sources: async_channel::Receiver<Snapshot>,
        events: async_channel::Receiver<pleg::Event>,
        done: async_channel::Receiver<Done>,
    ) {
        let (internal, internal_rx) = self.internal.clone();
        // The pod-directory scan reads the disk: it runs on the blocking pool, and its result
        // arrives as the housekeeping input.
        let _housekeeping = {
            let (root, tx) = (self.rm.node().root_dir.clone(), internal.clone());
            let cgroups = self.rm.pod_cgroups().cloned();
            rt::spawn(async move {
                let mut tick = rt::interval(HOUSEKEEPING_PERIOD);
                loop {
                    tick.tick().await;
                    let (r, cg) = (root.clone(), cgroups.clone());
                    // Pod directories and pod cgroups alike: what no pod owns is removed.
                    let pod_dirs = rt::unblock(move || {
                        let mut uids = volume::pod_dirs(&r);
                        let found = cg.map(|c| c.list().unwrap_or_default()).unwrap_or_default();
                        for f in found {
                            if !uids.contains(&f.uid) {
                                uids.push(f.uid);
                            }
                        }
                        uids
                    })
                    .await;
                    if tx.send(Input::Housekeeping { pod_dirs }).await.is_err() {
                        return;
                    }
                }
            })
        };
        // The runtime's status, for its network: read at once, then every period, and every
        // second while the network is not ready. Its return has the pods that waited for it
        // synced now.
        let _runtime_status = {
            let (rm, tx) = (self.rm.clone(), internal.clone());
            rt::spawn(async move {
                use crate::runtime_state::{NOT_READY_PERIOD, RUNTIME_STATUS_PERIOD};
                loop {
                    let uids = rm.update_runtime_status().await;
                    if !uids.is_empty() && tx.send(Input::NetworkReady(uids)).await.is_err() {
                        return;
                    }
                    rt::sleep(if rm.network_ready() {
                        RUNTIME_STATUS_PERIOD
                    } else {
                        NOT_READY_PERIOD
                    })
                    .await;
                }
            })
        };
        let mut sync_tick = rt::interval(SYNC_TICK);
        let late = std::cell::Cell::new(Duration::ZERO);
        let mut lateness = TickLateness::new(rt::now());
        let probes = self.prober.updates();
        loop {
            *self.last_loop.borrow_mut() = rt::now();
            use futures_lite::future::or;
            let input = or(
                async { sources.recv().await.ok().map(Input::Snapshot) },
                or(
                    async {
                        match probes.recv().await {
                            Ok(u) => Some(Input::Probe(u)),
                            // The manager lives as long as the loop: never closed.
                            Err(_) => std::future::pending().await,
                        }
                    },
                    or(
                        async { done.recv().await.ok().map(Input::Done) },
                        or(
                            async { events.recv().await.ok().map(Input::Pleg) },
                            or(async { internal_rx.recv().await.ok() }, async {
                                late.set(sync_tick.tick_late().await);
                                Some(Input::Tick)
                            }),
                        ),
                    ),
                ),
            )
            .await;
            if matches!(input, Some(Input::Tick)) {
                if let Some((ticks, worst)) = lateness.record(late.get(), rt::now()) {
                    log::debug!(
                        "sync loop: {ticks} ticks in the last {} s, the worst {:.1} ms late",
                        LATENESS_WINDOW.as_secs(),
                        worst.as_secs_f64() * 1000.0
                    );
                }
                self.enforce_active_deadlines();
            }
            match input {
                Some(i) => self.feed(i, &internal),
                None => return,
            }
        }
    }

    /// The desired pods with their latest status, as the kubelet's `/pods` serves them.
    #[cfg(any(test, feature = "local-api"))]
    pub fn pod_list(&self) -> crate::api::PodList {
        use crate::api::{ListMeta, Pod, PodList};
        let mut items: Vec<Pod> = self
            .state
            .borrow()
            .pods
            .pods()
            .map(|p| {
                let mut p = (**p).clone();
                if let Some(s) = self.status.get(&p.metadata.uid) {
                    p.status = s;
                }
                p
            })
            .collect();
        items.sort_by(|a, b| {
            (&a.metadata.namespace, &a.metadata.name)
                .cmp(&(&b.metadata.namespace, &b.metadata.name))
        });
        PodList {
            api_version: "v1".into(),
            kind: "PodList".into(),
            metadata: ListMeta::default(),
            items,
        }
    }

    /// The desired pod of this namespace and name.
    #[cfg(any(test, feature = "local-api"))]
    pub fn pod_by_name(&self, namespace: &str, name: &str) -> Option<Rc<crate::api::Pod>> {
        self.state
            .borrow()
            .pods
            .pods()
            .find(|p| p.metadata.namespace == namespace && p.metadata.name == name)
            .cloned()
    }

    /// The desired pods that came from one source, by name.
    #[cfg(feature = "apiserver")]
    fn pods_from(&self, source: crate::config::Source) -> Vec<Rc<crate::api::Pod>> {
        let mut v: Vec<_> = self
            .state
            .borrow()
            .pods
            .pods()
            .filter(|p| {
                p.metadata
                    .annotations
                    .get(crate::config::ANNOTATION_CONFIG_SOURCE)
                    .is_some_and(|s| s == source.as_str())
            })
            .cloned()
            .collect();
        v.sort_by(|a, b| a.metadata.name.cmp(&b.metadata.name));
        v
    }

    /// The status of each pod that came from the apiserver: picolet's, and the apiserver's.
    #[cfg(feature = "apiserver")]
    pub fn api_pod_statuses(&self) -> Vec<crate::cluster::PodStatusView> {
        self.pods_from(crate::config::Source::Api)
            .into_iter()
            .filter_map(|p| {
                Some(crate::cluster::PodStatusView {
                    uid: p.metadata.uid.clone(),
                    namespace: p.metadata.namespace.clone(),
                    name: p.metadata.name.clone(),
                    current: {
                        let mut s = self.status.get(&p.metadata.uid)?;
                        crate::status::generate::merge_foreign_conditions(&mut s, &p.status);
                        s
                    },
                    in_api: p.status.clone(),
                })
            })
            .collect()
    }

    /// The pods from the apiserver, for the objects their volumes and environments use.
    #[cfg(feature = "apiserver")]
    pub fn api_pods(&self) -> Vec<Rc<crate::api::Pod>> {
        self.pods_from(crate::config::Source::Api)
    }

    /// Has the loop sync these pods now (what their volumes or environments are made of
    /// arrived or changed), not at their due time.
    #[cfg(feature = "apiserver")]
    pub fn sync_now(&self, uids: &std::collections::BTreeSet<String>) {
        // Unbounded: never full; closed only once the loop is gone.
        let _ = self
            .internal
            .0
            .try_send(Input::Resync(uids.iter().cloned().collect()));
    }

    /// Receives a signal after pod statuses changed (several changes give one signal).
    #[cfg(feature = "apiserver")]
    pub fn pod_statuses_changed(&self) -> async_channel::Receiver<()> {
        self.status.changes()
    }

    /// Receives a signal each time API pods were added or updated since the last one was taken
    /// (several changes give one signal).
    #[cfg(feature = "apiserver")]
    pub fn api_pods_changed(&self) -> async_channel::Receiver<()> {
        self.api_pods_changed.1.clone()
    }

    /// The static pods (from the manifest directory), for their mirror pods.
    #[cfg(feature = "apiserver")]
    pub fn static_pods(&self) -> Vec<Rc<crate::api::Pod>> {
        self.pods_from(crate::config::Source::File)
    }

    /// API pods stopped after their deletion, as the apiserver last showed them, handed out
    /// once each.
    #[cfg(feature = "apiserver")]
    pub fn take_finalizable(&self) -> Vec<Rc<crate::api::Pod>> {
        self.state
            .borrow_mut()
            .finalizable
            .drain()
            .map(|(_, p)| p)
            .collect()
    }

    /// Forgets the final status of a pod deleted for good.
    #[cfg(feature = "apiserver")]
    pub fn forget_status(&self, uid: &str) {
        self.status.remove(uid);
    }

    /// Hands a pod back whose final deletion failed, to be tried again.
    #[cfg(feature = "apiserver")]
    pub fn retry_finalize(&self, pod: Rc<crate::api::Pod>) {
        self.state
            .borrow_mut()
            .finalizable
            .insert(pod.metadata.uid.clone(), pod);
    }

    /// The images the desired pods name (static pods, and API pods, checkpointed ones too),
    /// which image GC keeps; `None` until every source has been seen and the runtime listed, so
    /// no image is collected while a pod that needs it is not known yet.
    pub fn needed_images(&self) -> Option<Vec<String>> {
        let st = self.state.borrow();
        if !st.mux.all_sources_seen() || !self.pleg.has_listed() {
            return None;
        }
        let mut v: Vec<String> = st
            .pods
            .pods()
            .flat_map(|p| crate::kuberuntime::image_gc_manager::pod_images(p))
            .map(str::to_owned)
            .collect();
        v.sort();
        v.dedup();
        Some(v)
    }

    /// The latest status picolet computed for a pod.
    #[cfg(feature = "apiserver")]
    pub fn pod_status(&self, uid: &str) -> Option<crate::api::PodStatus> {
        self.status.get(uid)
    }

    /// Whether the PLEG has listed the runtime once.
    pub fn has_listed(&self) -> bool {
        self.pleg.has_listed()
    }

    /// How many pods the node should run.
    pub fn pod_count(&self) -> usize {
        self.state.borrow().pods.count()
    }

    /// Health as `/healthz` reports it and the systemd watchdog requires it: the PLEG relists
    /// and the loop turns.
    pub fn healthz(&self) -> Result<(), pleg::Unhealthy> {
        self.pleg.healthy()?;
        let idle = rt::now().saturating_duration_since(*self.last_loop.borrow());
        if idle > pleg::RELIST_THRESHOLD {
            return Err(pleg::Unhealthy::SyncLoop { idle });
        }
        Ok(())
    }
}
