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
    /// Pods being terminated, with their grace period.
    terminating: RefCell<HashMap<String, i64>>,
    /// Terminations to retry, and when.
    retry_terminate: RefCell<HashMap<String, Instant>>,
    /// Outstanding work items per pod.
    in_flight: RefCell<HashMap<String, usize>>,
    cfg: LoopConfig,
    last_loop: RefCell<Instant>,
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
                        self.dispatch(Work::Sync(pod));
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
                    self.terminate(uid, PodWorkers::grace_for(&pod));
                }
            }
        }
    }

    fn terminate(&self, uid: String, grace: i64) {
        self.terminating.borrow_mut().insert(uid.clone(), grace);
        self.dispatch(Work::Terminate { uid, grace });
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
                    self.due.borrow_mut().insert(uid, Instant::now() + after);
                }
            }
            Done::Terminated { .. } => {
                self.terminating.borrow_mut().remove(&uid);
                if !self.in_flight.borrow().contains_key(&uid) {
                    self.workers.remove(&uid);
                }
                // The same pod may have come back meanwhile (a manifest restored).
                let back = self.pods.borrow().get(&uid).cloned();
                if let Some(p) = back {
                    self.dispatch(Work::Sync(p));
                }
            }
            Done::TerminateFailed { .. } => {
                self.retry_terminate
                    .borrow_mut()
                    .insert(uid, Instant::now() + TERMINATE_RETRY);
            }
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
            self.dispatch(Work::Sync(p));
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
            if let Some(p) = pod {
                self.dispatch(Work::Sync(p));
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
            let grace = self.terminating.borrow().get(&uid).copied();
            if let Some(g) = grace {
                self.dispatch(Work::Terminate { uid, grace: g });
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
            let grace = self.cache.borrow().get(uid).map_or(30, |c| c.grace);
            log::info!("removing orphaned pod {uid} (no source defines it)");
            self.terminate(uid.clone(), grace);
        }
        for uid in &cached {
            if !known.contains(uid) || self.in_flight.borrow().contains_key(uid) {
                continue;
            }
            let st = self.cache.borrow().get(uid).map(|c| c.status.clone());
            if let Some(st) = st.filter(needs_gc) {
                let rm = self.rm.clone();
                rt::spawn(async move { rm.gc_pod(&st).await }).detach();
            }
        }
        let root = self.rm.node().root_dir.clone();
        for dir in volume::pod_dirs(&root) {
            let busy = known.contains(&dir)
                || self.terminating.borrow().contains_key(&dir)
                || self.cache.borrow().get(&dir).is_some();
            if !busy {
                log::info!("removing leftover directory of pod {dir}");
                if let Err(e) = volume::cleanup(&root, &dir) {
                    log::warn!("removing leftover directory of pod {dir}: {e}");
                }
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

/// Whether a pod has dead containers or sandboxes worth collecting.
fn needs_gc(st: &crate::kubecontainer::PodRuntimeStatus) -> bool {
    use crate::kubecontainer::{ContainerState, SandboxState};
    let mut names = HashSet::new();
    let dup_dead = st
        .containers
        .iter()
        .filter(|c| c.state == ContainerState::Exited || c.state == ContainerState::Unknown)
        .any(|c| !names.insert(&c.name));
    dup_dead
        || st
            .sandboxes
            .iter()
            .skip(1)
            .any(|s| s.state == SandboxState::NotReady)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::kubecontainer::{
        ContainerState, ContainerStatus, PodRuntimeStatus, SandboxState, SandboxStatus,
    };

    fn c(name: &str, state: ContainerState) -> ContainerStatus {
        ContainerStatus {
            id: "x".into(),
            name: name.into(),
            state,
            created_at: 0,
            started_at: 0,
            finished_at: 0,
            exit_code: 0,
            image: "".into(),
            image_ref: "".into(),
            reason: "".into(),
            message: "".into(),
            hash: 0,
            restart_count: 0,
        }
    }

    fn sb(state: SandboxState) -> SandboxStatus {
        SandboxStatus {
            id: "s".into(),
            attempt: 0,
            state,
            created_at: 0,
            ip: None,
            host_network: false,
        }
    }

    #[test]
    fn gc_needed_only_for_extra_dead_objects() {
        let mut st = PodRuntimeStatus {
            sandboxes: vec![sb(SandboxState::Ready)],
            ..Default::default()
        };
        st.containers = vec![
            c("a", ContainerState::Running),
            c("a", ContainerState::Exited),
        ];
        assert!(!needs_gc(&st));
        st.containers.push(c("a", ContainerState::Exited));
        assert!(needs_gc(&st));
        st.containers = vec![c("a", ContainerState::Exited)];
        st.sandboxes.push(sb(SandboxState::NotReady));
        assert!(needs_gc(&st));
    }
}
