//! The sync loop: one task selecting over pod updates from the sources, PLEG events, worker
//! reports, the 1 s sync tick and the 2 s housekeeping tick. It owns the pod manager (the
//! desired pods by UID) and decides which pod worker gets which work; all runtime calls happen
//! in the workers, so the loop itself never waits on the runtime.

use std::cell::RefCell;
use std::collections::{HashMap, HashSet};
use std::rc::Rc;
use std::time::{Duration, Instant};

use futures_lite::StreamExt;

use crate::api::{ListMeta, Pod, PodList};
use crate::config::{Mux, Op, PodUpdate, Snapshot};
use crate::kubecontainer::PodRuntimeStatus;
use crate::kuberuntime::RuntimeManager;
use crate::pleg::{self, Cache, Pleg};
use crate::pod_workers::{Done, PodWorkers, Work};
use crate::rt;
use crate::status::manager::StatusManager;
use crate::volume;

pub const SYNC_TICK: Duration = Duration::from_secs(1);
pub const HOUSEKEEPING_PERIOD: Duration = Duration::from_secs(2);
/// Retry delay of a termination that failed (runtime down, say).
const TERMINATE_RETRY: Duration = Duration::from_secs(2);

/// Settings of the loop.
#[derive(Debug, Clone)]
pub struct LoopConfig {
    /// Full resync period of every pod (the kubelet's `syncFrequency`, 1 min).
    pub sync_frequency: Duration,
}

/// The node agent's state as the loop and the local API see it.
pub struct Kubelet {
    pub rm: Rc<RuntimeManager>,
    pub cache: Rc<RefCell<Cache>>,
    pub status: Rc<StatusManager>,
    pub pleg: Rc<Pleg>,
    workers: PodWorkers,
    mux: RefCell<Mux>,
    /// The pod manager: desired pods by UID.
    pods: RefCell<HashMap<String, Rc<Pod>>>,
    /// When each pod is next due for a sync.
    due: RefCell<HashMap<String, Instant>>,
    /// Pods being terminated.
    terminating: RefCell<HashMap<String, Term>>,
    /// Terminations to retry, and when.
    retry_terminate: RefCell<HashMap<String, Instant>>,
    /// Outstanding work items per pod.
    in_flight: RefCell<HashMap<String, usize>>,
    /// Pods whose container GC is running.
    collecting: Rc<RefCell<HashSet<String>>>,
    cfg: LoopConfig,
    last_loop: RefCell<Instant>,
}

/// A pod being terminated: what its worker needs, and its name so a pod of the same name can
/// wait for it.
#[derive(Debug, Clone)]
struct Term {
    grace: i64,
    namespace: String,
    name: String,
}

impl Term {
    fn work(&self, uid: &str) -> Work {
        Work::Terminate {
            uid: uid.to_owned(),
            grace: self.grace,
            namespace: self.namespace.clone(),
            name: self.name.clone(),
        }
    }
}

/// One thing the loop woke up for.
enum Wake {
    Source(Option<Snapshot>),
    Pleg(Option<pleg::Event>),
    Done(Option<Done>),
    Sync,
    Housekeeping,
}

impl Kubelet {
    pub fn new(
        rm: Rc<RuntimeManager>,
        cache: Rc<RefCell<Cache>>,
        status: Rc<StatusManager>,
        pleg: Rc<Pleg>,
        workers: PodWorkers,
        mux: Mux,
        cfg: LoopConfig,
    ) -> Self {
        Kubelet {
            rm,
            cache,
            status,
            pleg,
            workers,
            mux: RefCell::new(mux),
            pods: RefCell::default(),
            due: RefCell::default(),
            terminating: RefCell::default(),
            retry_terminate: RefCell::default(),
            in_flight: RefCell::default(),
            collecting: Rc::default(),
            cfg,
            last_loop: RefCell::new(Instant::now()),
        }
    }

    fn dispatch(&self, work: Work) {
        let uid = match &work {
            Work::Sync(p) => p.metadata.uid.clone(),
            Work::Terminate { uid, .. } => uid.clone(),
        };
        if self.workers.dispatch(work) {
            *self.in_flight.borrow_mut().entry(uid).or_default() += 1;
        }
    }

    /// Why a pod must not be synced yet, if it must not: until the runtime has been listed once,
    /// and while another pod of the same namespace and name (an edited static pod's old version)
    /// is still being terminated or still runs unowned, so the two never run at once (the new
    /// one would find its host ports and files taken).
    fn start_blocked(&self, pod: &Pod) -> Option<String> {
        if !self.pleg.has_listed() {
            return Some("waiting for the first runtime listing".into());
        }
        if self.collecting.borrow().contains(&pod.metadata.uid) {
            return Some("waiting for the cleanup of its directory or dead containers".into());
        }
        let (uid, ns, name) = (
            &pod.metadata.uid,
            &pod.metadata.namespace,
            &pod.metadata.name,
        );
        let same = |u: &String, n: &str, nm: &str| u != uid && n == ns && nm == name;
        if let Some((u, _)) = self
            .terminating
            .borrow()
            .iter()
            .find(|(u, t)| same(u, &t.namespace, &t.name))
        {
            return Some(format!(
                "waiting for the previous pod {u} of the same name to stop"
            ));
        }
        let pods = self.pods.borrow();
        let cache = self.cache.borrow();
        let orphan = cache.uids().into_iter().find(|u| {
            !pods.contains_key(u)
                && cache
                    .get(u)
                    .is_some_and(|c| same(u, &c.status.namespace, &c.status.name))
        });
        orphan.map(|u| format!("waiting for the unowned pod {u} of the same name to be removed"))
    }

    /// Dispatches a sync, or defers it to the next tick while the pod may not start.
    fn sync(&self, pod: Rc<Pod>) {
        if let Some(why) = self.start_blocked(&pod) {
            log::debug!("pod {} not synced yet: {why}", pod.metadata.name);
            self.due
                .borrow_mut()
                .insert(pod.metadata.uid.clone(), Instant::now());
            return;
        }
        self.dispatch(Work::Sync(pod));
    }

    fn handle_update(&self, u: PodUpdate) {
        for pod in u.pods {
            let uid = pod.metadata.uid.clone();
            match u.op {
                Op::Add | Op::Update => {
                    log::info!(
                        "{} pod {}/{} ({uid}) from {}",
                        if u.op == Op::Add {
                            "adding"
                        } else {
                            "updating"
                        },
                        pod.metadata.namespace,
                        pod.metadata.name,
                        u.source.as_str()
                    );
                    if u.op == Op::Add && self.status.get(&uid).is_none() {
                        // Reported as Pending until its first sync reports more.
                        let empty = PodRuntimeStatus {
                            uid: uid.as_str().into(),
                            ..Default::default()
                        };
                        self.status.update(&pod, &empty, &self.rm);
                    }
                    let pod = Rc::new(pod);
                    self.pods.borrow_mut().insert(uid.clone(), pod.clone());
                    if !self.terminating.borrow().contains_key(&uid) {
                        self.sync(pod);
                    }
                }
                Op::Reconcile => {
                    self.pods.borrow_mut().insert(uid, Rc::new(pod));
                }
                Op::Remove => {
                    log::info!(
                        "removing pod {}/{} ({uid})",
                        pod.metadata.namespace,
                        pod.metadata.name
                    );
                    self.pods.borrow_mut().remove(&uid);
                    self.due.borrow_mut().remove(&uid);
                    let m = &pod.metadata;
                    let term = Term {
                        grace: crate::kuberuntime::config::grace_period(&pod),
                        namespace: m.namespace.clone(),
                        name: m.name.clone(),
                    };
                    self.terminate(uid, term);
                }
            }
        }
    }

    fn terminate(&self, uid: String, term: Term) {
        self.dispatch(term.work(&uid));
        self.terminating.borrow_mut().insert(uid, term);
    }

    fn handle_done(&self, d: Done) {
        let uid = match &d {
            Done::Synced { uid, .. } | Done::Terminated { uid } | Done::TerminateFailed { uid } => {
                uid.clone()
            }
        };
        {
            let mut f = self.in_flight.borrow_mut();
            if let Some(n) = f.get_mut(&uid) {
                *n = n.saturating_sub(1);
                if *n == 0 {
                    f.remove(&uid);
                }
            }
        }
        match d {
            Done::Synced { retry_after, .. } => {
                if self.pods.borrow().contains_key(&uid) {
                    let after = retry_after
                        .unwrap_or(self.cfg.sync_frequency)
                        .min(self.cfg.sync_frequency);
                    let now = Instant::now();
                    let at = now
                        .checked_add(after)
                        .unwrap_or(now + Duration::from_secs(86_400));
                    self.due.borrow_mut().insert(uid.clone(), at);
                }
            }
            Done::Terminated { .. } => {
                self.terminating.borrow_mut().remove(&uid);
                self.retry_terminate.borrow_mut().remove(&uid);
                // The same pod may have come back meanwhile (a manifest restored); pods of the
                // same name waiting for this one start at the next tick.
                let back = self.pods.borrow().get(&uid).cloned();
                if let Some(p) = back {
                    self.sync(p);
                }
            }
            Done::TerminateFailed { .. } => {
                self.retry_terminate
                    .borrow_mut()
                    .insert(uid.clone(), Instant::now() + TERMINATE_RETRY);
            }
        }
        // A worker with nothing queued for a pod that is gone ends here.
        let idle = !self.in_flight.borrow().contains_key(&uid);
        let gone =
            !self.pods.borrow().contains_key(&uid) && !self.terminating.borrow().contains_key(&uid);
        if idle && gone {
            self.workers.remove(&uid);
        }
    }

    fn handle_pleg(&self, e: pleg::Event) {
        if e.kind == pleg::EventType::ContainerRemoved {
            return;
        }
        let pod = self.pods.borrow().get(&e.uid).cloned();
        if let Some(p) = pod
            && !self.terminating.borrow().contains_key(&e.uid)
        {
            self.sync(p);
        }
    }

    fn sync_due(&self) {
        let now = Instant::now();
        let due: Vec<String> = self
            .due
            .borrow()
            .iter()
            .filter(|(_, t)| **t <= now)
            .map(|(u, _)| u.clone())
            .collect();
        for uid in due {
            self.due.borrow_mut().remove(&uid);
            let pod = self.pods.borrow().get(&uid).cloned();
            if let Some(p) = pod
                && !self.terminating.borrow().contains_key(&uid)
            {
                self.sync(p);
            }
        }
        let retry: Vec<String> = self
            .retry_terminate
            .borrow()
            .iter()
            .filter(|(_, t)| **t <= now)
            .map(|(u, _)| u.clone())
            .collect();
        for uid in retry {
            self.retry_terminate.borrow_mut().remove(&uid);
            let work = self.terminating.borrow().get(&uid).map(|t| t.work(&uid));
            if let Some(w) = work {
                self.dispatch(w);
            }
        }
    }

    /// Orphan cleanup, container GC and leftover pod directories; only once every source has
    /// been seen and the runtime listed, so nothing is killed for a source that is merely slow.
    fn housekeeping(&self) {
        if !self.mux.borrow().all_sources_seen() || !self.pleg.has_listed() {
            return;
        }
        let known: HashSet<String> = self.pods.borrow().keys().cloned().collect();
        let cached = self.cache.borrow().uids();
        for uid in &cached {
            if known.contains(uid) || self.terminating.borrow().contains_key(uid) {
                continue;
            }
            let term = self.cache.borrow().get(uid).map(|c| Term {
                grace: c.grace,
                namespace: c.status.namespace.to_string(),
                name: c.status.name.to_string(),
            });
            if let Some(t) = term {
                log::info!(
                    "removing orphaned pod {}/{} ({uid}): no source defines it",
                    t.namespace,
                    t.name
                );
                self.terminate(uid.clone(), t);
            }
        }
        for uid in &cached {
            if !known.contains(uid)
                || self.in_flight.borrow().contains_key(uid)
                || self.collecting.borrow().contains(uid)
            {
                continue;
            }
            let st = self.cache.borrow().get(uid).map(|c| c.status.clone());
            if let Some(st) = st.filter(|st| !crate::kuberuntime::gc_plan(st).is_empty()) {
                let (rm, collecting, uid) = (self.rm.clone(), self.collecting.clone(), uid.clone());
                collecting.borrow_mut().insert(uid.clone());
                rt::spawn(async move {
                    rm.gc_pod(&st).await;
                    collecting.borrow_mut().remove(&uid);
                })
                .detach();
            }
        }
        let root = self.rm.node().root_dir.clone();
        for dir in volume::pod_dirs(&root) {
            let busy = known.contains(&dir)
                || self.terminating.borrow().contains_key(&dir)
                || self.cache.borrow().get(&dir).is_some();
            if !busy && self.collecting.borrow_mut().insert(dir.clone()) {
                log::info!("removing leftover directory of pod {dir}");
                let (root, collecting) = (root.clone(), self.collecting.clone());
                rt::spawn(async move {
                    let d = dir.clone();
                    if let Err(e) = rt::unblock(move || volume::cleanup(&root, &d)).await {
                        log::warn!("removing leftover directory of pod {dir}: {e}");
                    }
                    collecting.borrow_mut().remove(&dir);
                })
                .detach();
            }
        }
        self.rm.gc_backoffs(rt::now_nanos());
    }

    /// Runs the loop until the sources' channel closes.
    pub async fn run(
        self: Rc<Self>,
        sources: async_channel::Receiver<Snapshot>,
        events: async_channel::Receiver<pleg::Event>,
        done: async_channel::Receiver<Done>,
    ) {
        let mut sync_tick = async_io::Timer::interval(SYNC_TICK);
        let mut hk_tick = async_io::Timer::interval(HOUSEKEEPING_PERIOD);
        loop {
            *self.last_loop.borrow_mut() = Instant::now();
            let wake = futures_lite::future::or(
                async { Wake::Source(sources.recv().await.ok()) },
                futures_lite::future::or(
                    async { Wake::Done(done.recv().await.ok()) },
                    futures_lite::future::or(
                        async { Wake::Pleg(events.recv().await.ok()) },
                        futures_lite::future::or(
                            async {
                                sync_tick.next().await;
                                Wake::Sync
                            },
                            async {
                                hk_tick.next().await;
                                Wake::Housekeeping
                            },
                        ),
                    ),
                ),
            )
            .await;
            match wake {
                Wake::Source(Some(snap)) => {
                    let updates = self.mux.borrow_mut().merge(snap);
                    for u in updates {
                        self.handle_update(u);
                    }
                }
                Wake::Source(None) => return,
                Wake::Done(Some(d)) => self.handle_done(d),
                Wake::Pleg(Some(e)) => self.handle_pleg(e),
                Wake::Done(None) | Wake::Pleg(None) => return,
                Wake::Sync => self.sync_due(),
                Wake::Housekeeping => self.housekeeping(),
            }
        }
    }

    /// The desired pods with their latest status, as the kubelet's `/pods` serves them.
    pub fn pod_list(&self) -> PodList {
        let mut items: Vec<Pod> = self
            .pods
            .borrow()
            .values()
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

    /// Health as `/healthz` reports it: the PLEG relists and the loop turns.
    pub fn healthz(&self) -> Result<(), String> {
        self.pleg.healthy()?;
        let idle = self.last_loop.borrow().elapsed();
        if idle > pleg::RELIST_THRESHOLD {
            return Err(format!("sync loop last ran {idle:?} ago"));
        }
        Ok(())
    }
}
