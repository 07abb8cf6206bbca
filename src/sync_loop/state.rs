//! The loop's state as plain data, advanced by one pure function: `LoopState::step(input, now,
//! view) -> commands`. It decides which pod gets synced or terminated and when, and holds the
//! start gate; it calls nothing. The loop (`super`) feeds it inputs and carries out the
//! commands, so every decision here is unit-tested without a runtime or a timer.

use std::collections::{HashMap, HashSet};
use std::rc::Rc;
use std::time::{Duration, Instant};

use crate::api::Pod;
use crate::config::{Mux, Op, Snapshot};
use crate::kubecontainer::PodRuntimeStatus;
use crate::pleg::{self, Cache};
use crate::pod_manager::PodManager;
use crate::pod_workers::{Done, Term, Work};

use super::housekeeping;

/// Retry delay of a termination that failed (runtime down, say), doubled after each failure in
/// a row up to [`TERMINATE_RETRY_MAX`].
pub const TERMINATE_RETRY: Duration = Duration::from_secs(2);
pub const TERMINATE_RETRY_MAX: Duration = Duration::from_secs(300);

/// What the loop woke up for.
#[derive(Debug)]
pub enum Input {
    /// A source's full view of its pods.
    Snapshot(Snapshot),
    Pleg(pleg::Event),
    /// A worker finished a piece of work.
    Done(Done),
    /// The 1 s sync tick: pods whose time has come.
    Tick,
    /// The housekeeping tick, with the pod directories found under the root directory.
    Housekeeping {
        pod_dirs: Vec<String>,
    },
    /// Garbage collection of a pod, or the removal of a leftover directory, has ended.
    Collected(String),
    /// A probe result changed.
    Probe(crate::prober::Update),
    /// The eviction manager evicts the pod: stop it within `grace` seconds and never run it
    /// again (its status, already Failed, stays).
    Evict {
        uid: String,
        grace: i64,
    },
    /// What these pods' volumes or environments are made of (a ConfigMap, a Secret, a token)
    /// arrived or changed: sync them now rather than at their due time.
    #[cfg_attr(
        not(feature = "apiserver"),
        allow(
            dead_code,
            reason = "the objects task, which sends it, comes with the apiserver"
        )
    )]
    Resync(Vec<String>),
    /// The runtime's network turned ready: these pods, whose syncs failed for want of it, are
    /// synced now, and their old sandboxes (which could not be removed without the network)
    /// collected at the next housekeeping round rather than at their next GC visit.
    NetworkReady(Vec<String>),
}

/// What the step reads of the world besides its own state.
#[derive(Debug, Clone, Copy)]
pub struct View<'a> {
    /// The runtime has been listed once.
    pub listed: bool,
    pub cache: &'a Cache,
}

/// What the loop must do.
#[derive(Debug)]
pub enum Command {
    /// Hand work to the pod's worker; the loop reports back whether it will produce a report
    /// ([`LoopState::dispatched`]).
    Dispatch(Work),
    /// A pod was just added: report it Pending until its first sync says more.
    ReportPending(Rc<Pod>),
    /// The pod is gone and its worker idle: end the worker.
    EndWorker(String),
    /// Remove the dead containers and old sandboxes of a pod.
    CollectGarbage(PodRuntimeStatus),
    /// Remove the directory of a pod that no longer exists.
    RemovePodDir(String),
    /// Forget restart and pull backoffs that have expired.
    ExpireBackoffs,
    /// Start the probe workers of a pod that has none yet.
    StartProbes(Rc<Pod>),
    /// Stop the probe workers of a pod that is going away.
    StopProbes(String),
    /// Admission refused a new pod: its status becomes Failed with the reason, and an event
    /// says why. It never runs.
    Reject(Rc<Pod>, crate::admission::Rejection),
    /// A pod from the apiserver was added or updated: the objects and tokens it uses may be
    /// new to the node, so whoever fetches them should look now, not at its next round.
    ApiPodsChanged,
}

/// The keys whose time has come, in a stable order.
fn come_due(times: &HashMap<String, Instant>, now: Instant) -> Vec<String> {
    let mut due: Vec<String> = times
        .iter()
        .filter(|(_, t)| **t <= now)
        .map(|(u, _)| u.clone())
        .collect();
    due.sort();
    due
}

/// Settings of the loop.
#[derive(Debug, Clone)]
pub struct LoopConfig {
    /// Full resync period of every pod (the kubelet's `syncFrequency`, 1 min).
    pub sync_frequency: Duration,
    /// The node as admission sees it; `None` admits every pod.
    pub node: Option<crate::admission::NodeInfo>,
    /// The pods' allocations: admission weighs a pod, and those it runs beside, with their
    /// allocated resources (a resize not yet allocated counts as before it), as upstream.
    pub allocation: Option<crate::allocation::Manager>,
}

#[derive(Debug)]
pub struct LoopState {
    pub(super) mux: Mux,
    /// The desired pods.
    pub pods: PodManager,
    /// When each pod is next due for a sync.
    pub(super) due: HashMap<String, Instant>,
    /// Pods being terminated.
    pub(super) terminating: HashMap<String, Term>,
    /// Terminations to retry, and when.
    pub(super) retry_terminate: HashMap<String, Instant>,
    /// Failures in a row of each termination (its retry backs off).
    terminate_failures: HashMap<String, u32>,
    /// Reports to come per pod (work handed to its worker and not yet reported).
    pub(super) in_flight: HashMap<String, usize>,
    /// Pods (or leftover directories) whose garbage collection runs.
    pub(super) collecting: HashSet<String>,
    /// When each pod's dead containers and sandboxes were last collected: once a minute, as
    /// the kubelet's container GC.
    pub(super) collected_at: HashMap<String, Instant>,
    /// API pods being deleted, by UID. Until stopped they hold what they ran with (admission
    /// weighs them); once stopped, they are finalized: deleted from the apiserver for good.
    deleting: HashMap<String, Rc<Pod>>,
    /// API pods stopped after their deletion, to be deleted from the apiserver: the last copy
    /// the apiserver showed of each (its final status is patched as a diff from it).
    pub finalizable: HashMap<String, Rc<Pod>>,
    /// Evicted pods: still desired by their source, never synced again.
    pub evicted: HashSet<String>,
    /// Pods admission refused: still desired by their source, never run.
    pub rejected: HashSet<String>,
    /// Pods whose status is Succeeded or Failed, as the loop last heard before a snapshot:
    /// they hold no resources for admission.
    pub finished: HashSet<String>,
    /// The node is shutting down: every new pod is refused (upstream's shutdown manager's
    /// admission handler).
    pub shutting_down: bool,
    cfg: LoopConfig,
}

impl LoopState {
    pub fn new(mux: Mux, cfg: LoopConfig) -> Self {
        LoopState {
            mux,
            pods: PodManager::default(),
            due: HashMap::new(),
            terminating: HashMap::new(),
            retry_terminate: HashMap::new(),
            terminate_failures: HashMap::new(),
            in_flight: HashMap::new(),
            collecting: HashSet::new(),
            collected_at: HashMap::new(),
            deleting: HashMap::new(),
            finalizable: HashMap::new(),
            evicted: HashSet::new(),
            rejected: HashSet::new(),
            finished: HashSet::new(),
            shutting_down: false,
            cfg,
        }
    }

    /// Advances the state by one input.
    pub fn step(&mut self, input: Input, now: Instant, view: View<'_>) -> Vec<Command> {
        let mut out = Vec::new();
        match input {
            Input::Snapshot(snap) => {
                for mut u in self.mux.merge(snap) {
                    if u.op == Op::Add {
                        // Admitted oldest first, as upstream.
                        u.pods.sort_by(|a, b| {
                            let key = |p: &Pod| {
                                (
                                    p.metadata.creation_timestamp.clone(),
                                    p.metadata.name.clone(),
                                )
                            };
                            key(a).cmp(&key(b))
                        });
                    }
                    for pod in u.pods {
                        self.update(u.op, u.source.as_str(), pod, now, view, &mut out);
                    }
                }
                // One wake-up says it for every API pod of the snapshot.
                let mut said = false;
                out.retain(|c| {
                    !matches!(c, Command::ApiPodsChanged) || !std::mem::replace(&mut said, true)
                });
            }
            Input::Pleg(e) => {
                if e.kind != pleg::EventType::ContainerRemoved
                    && !self.terminating.contains_key(&e.uid)
                    && let Some(p) = self.pods.get(&e.uid).cloned()
                {
                    self.sync(p, now, view, &mut out);
                }
            }
            Input::Done(d) => self.done(d, now, view, &mut out),
            Input::Tick => self.tick(now, view, &mut out),
            Input::Housekeeping { pod_dirs } => {
                if self.mux.all_sources_seen() && view.listed {
                    let known = housekeeping::Known {
                        pods: &self.pods,
                        terminating: &self.terminating,
                        in_flight: &self.in_flight,
                        collecting: &self.collecting,
                        collected_at: &self.collected_at,
                    };
                    let plan = housekeeping::plan(known, view.cache, &pod_dirs, now);
                    for (uid, t) in plan.orphans {
                        self.terminate(uid, t, &mut out);
                    }
                    for (uid, status) in plan.collect {
                        self.collected_at.insert(uid.clone(), now);
                        self.collecting.insert(uid);
                        out.push(Command::CollectGarbage(status));
                    }
                    self.collected_at
                        .retain(|uid, _| view.cache.get(uid).is_some());
                    for dir in plan.dirs {
                        self.collecting.insert(dir.clone());
                        out.push(Command::RemovePodDir(dir));
                    }
                    out.push(Command::ExpireBackoffs);
                }
            }
            Input::Collected(uid) => {
                self.collecting.remove(&uid);
            }
            Input::Evict { uid, grace } => {
                if let Some(p) = self.pods.get(&uid).cloned()
                    && !self.terminating.contains_key(&uid)
                    && self.evicted.insert(uid.clone())
                {
                    log::info!(
                        "evicting pod {}/{} ({uid}) with grace period {grace}s",
                        p.metadata.namespace,
                        p.metadata.name
                    );
                    self.due.remove(&uid);
                    out.push(Command::StopProbes(uid.clone()));
                    let term = Term {
                        grace,
                        namespace: p.metadata.namespace.clone(),
                        name: p.metadata.name.clone(),
                        evicted: true,
                        deleted: false,
                    };
                    self.terminate(uid, term, &mut out);
                }
            }
            Input::NetworkReady(uids) => {
                for uid in &uids {
                    self.collected_at.remove(uid);
                }
                self.resync(uids, now, view, &mut out);
            }
            Input::Resync(uids) => self.resync(uids, now, view, &mut out),
            Input::Probe(u) => {
                use crate::prober::{Kind, ProbeResult};
                // A liveness or startup failure restarts the container; a readiness or startup
                // change updates the status. Either way the pod's sync does it.
                let acts = match u.kind {
                    Kind::Liveness => u.result == ProbeResult::Failure,
                    Kind::Readiness | Kind::Startup => true,
                };
                if acts
                    && !self.terminating.contains_key(&u.uid)
                    && let Some(p) = self.pods.get(&u.uid).cloned()
                {
                    log::debug!(
                        "pod {}: {} probe of {} is now {:?}",
                        p.metadata.name,
                        u.kind.name(),
                        u.container,
                        u.result
                    );
                    self.sync(p, now, view, &mut out);
                }
            }
        }
        self.publish_active();
        out
    }

    /// Whether a desired pod holds the node's room: admitted, and not evicted or finished
    /// unless it is still being stopped (upstream's `filterOutInactivePods`: a pod counts until
    /// its termination has ended).
    fn active(&self, uid: &str) -> bool {
        !self.rejected.contains(uid)
            && (self.terminating.contains_key(uid)
                || (!self.evicted.contains(uid) && !self.finished.contains(uid)))
    }

    /// The pods that hold the node's room (upstream's active pods): the active desired ones,
    /// and those deleted through the API that are still being stopped (the kubelet keeps such a
    /// pod in its pod manager until it has stopped). A pod its source removed (a static pod's
    /// manifest edited or deleted) no longer counts, as upstream, so its replacement is
    /// admitted while it stops.
    fn active_pods(&self) -> impl Iterator<Item = &Rc<Pod>> {
        let desired = self.pods.pods().filter(|p| self.active(&p.metadata.uid));
        let deleting = self
            .deleting
            .iter()
            .filter(|(uid, _)| self.terminating.contains_key(*uid) && !self.pods.contains(uid))
            .map(|(_, p)| p);
        desired.chain(deleting)
    }

    /// Tells the allocation manager which pods are active, so a resize is weighed against
    /// every pod admitted, not only those synced since picolet started.
    fn publish_active(&self) {
        if let Some(a) = &self.cfg.allocation {
            a.set_active(self.active_pods().cloned().collect());
        }
    }

    /// Records whether dispatched work will produce a report (it may only have replaced work
    /// still waiting in the worker's mailbox).
    pub fn dispatched(&mut self, uid: &str, adds_report: bool) {
        if adds_report {
            *self.in_flight.entry(uid.to_owned()).or_default() += 1;
        }
    }

    fn update(
        &mut self,
        op: Op,
        source: &str,
        pod: Pod,
        now: Instant,
        view: View<'_>,
        out: &mut Vec<Command>,
    ) {
        let uid = pod.metadata.uid.clone();
        match op {
            Op::Add | Op::Update if pod.metadata.deletion_timestamp.is_some() => {
                // Deleted through the API: stopped with its deletion's grace period, never run
                // again, then deleted for good.
                log::info!(
                    "pod {}/{} ({uid}) is being deleted",
                    pod.metadata.namespace,
                    pod.metadata.name
                );
                self.pods.remove(&uid);
                self.due.remove(&uid);
                self.evicted.remove(&uid);
                self.rejected.remove(&uid);
                out.push(Command::StopProbes(uid.clone()));
                let term = Term {
                    grace: crate::kuberuntime::config::grace_period(&pod),
                    namespace: pod.metadata.namespace.clone(),
                    name: pod.metadata.name.clone(),
                    evicted: false,
                    deleted: true,
                };
                self.deleting.insert(uid.clone(), Rc::new(pod));
                self.terminate(uid, term, out);
            }
            Op::Add | Op::Update if self.evicted.contains(&uid) || self.rejected.contains(&uid) => {
                // An evicted pod stays stopped, a rejected one never starts; their source's
                // updates are only recorded.
                self.pods.upsert(Rc::new(pod));
            }
            Op::Add
                if pod.status.phase.as_deref() == Some("Failed")
                    && pod
                        .status
                        .message
                        .as_deref()
                        .is_some_and(|m| m.starts_with("Pod was rejected: ")) =>
            {
                // Rejected before (an API pod, across a restart): it stays rejected, with the
                // status it has.
                let pod = Rc::new(pod);
                self.rejected.insert(uid);
                self.pods.upsert(pod.clone());
                out.push(Command::ReportPending(pod));
            }
            Op::Add if matches!(pod.status.phase.as_deref(), Some("Succeeded" | "Failed")) => {
                // It ended before (an API pod the apiserver, or the checkpoint, holds as
                // Succeeded or Failed: stopped by a node shutdown before a reboot, say): never
                // started again, as upstream; what the runtime still runs of it is stopped,
                // its status kept.
                let pod = Rc::new(pod);
                self.evicted.insert(uid.clone());
                self.pods.upsert(pod.clone());
                out.push(Command::ReportPending(pod.clone()));
                if view.cache.get(&uid).is_some() {
                    self.stop_keeping_status(uid, &pod, out);
                }
            }
            Op::Add if let Some(r) = self.admit(&pod) => {
                log::warn!(
                    "pod {}/{} ({uid}) from {source} rejected: {}: {}",
                    pod.metadata.namespace,
                    pod.metadata.name,
                    r.reason,
                    r.message
                );
                let pod = Rc::new(pod);
                self.rejected.insert(uid.clone());
                self.pods.upsert(pod.clone());
                out.push(Command::Reject(pod.clone(), r));
                if view.cache.get(&uid).is_some() {
                    // It ran before picolet restarted: stopped, its Failed status kept.
                    self.stop_keeping_status(uid, &pod, out);
                }
            }
            Op::Add | Op::Update => {
                log::info!(
                    "{} pod {}/{} ({uid}) from {source}",
                    if op == Op::Add { "adding" } else { "updating" },
                    pod.metadata.namespace,
                    pod.metadata.name,
                );
                let pod = Rc::new(pod);
                if op == Op::Add {
                    out.push(Command::ReportPending(pod.clone()));
                }
                if source == crate::config::Source::Api.as_str() {
                    out.push(Command::ApiPodsChanged);
                }
                out.push(Command::StartProbes(pod.clone()));
                self.pods.upsert(pod.clone());
                if !self.terminating.contains_key(&uid) {
                    self.sync(pod, now, view, out);
                }
            }
            Op::Reconcile => {
                let pod = Rc::new(pod);
                self.pods.upsert(pod.clone());
                // A readiness gate's condition changed: the Ready condition follows at once.
                if crate::status::generate::readiness_needs_reconcile(&pod)
                    && !self.terminating.contains_key(&uid)
                {
                    self.sync(pod, now, view, out);
                }
            }
            Op::Remove => {
                log::info!(
                    "removing pod {}/{} ({uid})",
                    pod.metadata.namespace,
                    pod.metadata.name
                );
                self.pods.remove(&uid);
                self.due.remove(&uid);
                self.evicted.remove(&uid);
                self.rejected.remove(&uid);
                self.finished.remove(&uid);
                if self.finalizable.contains_key(&uid) || self.deleting.contains_key(&uid) {
                    // Gone from the apiserver after picolet stopped it: nothing left to do but
                    // make sure nothing runs.
                    self.deleting.remove(&uid);
                    self.finalizable.remove(&uid);
                }
                out.push(Command::StopProbes(uid.clone()));
                let term = Term {
                    grace: crate::kuberuntime::config::grace_period(&pod),
                    namespace: pod.metadata.namespace.clone(),
                    name: pod.metadata.name.clone(),
                    evicted: false,
                    deleted: false,
                };
                self.terminate(uid, term, out);
            }
        }
    }

    /// Admission of a new pod: why it may not run, if it may not. A pod whose status is
    /// already Succeeded or Failed is not admitted again, as upstream; the pods it is weighed
    /// against are the active ones (`active_pods`).
    fn admit(&self, pod: &Pod) -> Option<crate::admission::Rejection> {
        if matches!(pod.status.phase.as_deref(), Some("Succeeded" | "Failed")) {
            return None;
        }
        if self.shutting_down {
            return Some(crate::admission::Rejection {
                reason: crate::nodeshutdown::NOT_ADMITTED_REASON.into(),
                message: crate::nodeshutdown::NOT_ADMITTED_MESSAGE.into(),
            });
        }
        let node = self.cfg.node.as_ref()?;
        let admitted: Vec<std::borrow::Cow<'_, Pod>> = self
            .active_pods()
            .filter(|p| p.metadata.uid != pod.metadata.uid)
            .map(|p| self.allocated(p))
            .collect();
        let admitted: Vec<&Pod> = admitted.iter().map(std::borrow::Cow::as_ref).collect();
        crate::admission::admit(&self.allocated(pod), node, &admitted).err()
    }

    /// The pod with the resources allocated to it, when a resize changed its spec since.
    fn allocated<'a>(&self, pod: &'a Pod) -> std::borrow::Cow<'a, Pod> {
        match self
            .cfg
            .allocation
            .as_ref()
            .and_then(|m| m.get(&pod.metadata.uid))
        {
            Some(a) => std::borrow::Cow::Owned(crate::allocation::with_allocation(pod, &a)),
            None => std::borrow::Cow::Borrowed(pod),
        }
    }

    /// Stops what the runtime runs of a pod that must not run (rejected, or ended before),
    /// within its grace period, keeping the status it has (as an evicted pod's).
    fn stop_keeping_status(&mut self, uid: String, pod: &Pod, out: &mut Vec<Command>) {
        let term = Term {
            grace: crate::kuberuntime::config::grace_period(pod),
            namespace: pod.metadata.namespace.clone(),
            name: pod.metadata.name.clone(),
            evicted: true,
            deleted: false,
        };
        self.terminate(uid, term, out);
    }

    pub(super) fn terminate(&mut self, uid: String, term: Term, out: &mut Vec<Command>) {
        out.push(Command::Dispatch(term.work(&uid)));
        self.terminating.insert(uid, term);
    }

    /// Why a pod must not be synced yet, if it must not: until the runtime has been listed once,
    /// and while another pod of the same namespace and name (an edited static pod's old version)
    /// is still being terminated or still runs unowned, so the two never run at once (the new
    /// one would find its host ports and files taken).
    pub fn start_blocked(&self, pod: &Pod, view: View<'_>) -> Option<String> {
        if !view.listed {
            return Some("waiting for the first runtime listing".into());
        }
        if self.collecting.contains(&pod.metadata.uid) {
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
            .iter()
            .find(|(u, t)| same(u, &t.namespace, &t.name))
        {
            return Some(format!(
                "waiting for the previous pod {u} of the same name to stop"
            ));
        }
        let cache = view.cache;
        let orphan = cache.uids().into_iter().find(|u| {
            !self.pods.contains(u)
                && cache
                    .get(u)
                    .is_some_and(|c| same(u, &c.status.namespace, &c.status.name))
        });
        orphan.map(|u| format!("waiting for the unowned pod {u} of the same name to be removed"))
    }

    /// Syncs these pods now, not at their due time.
    fn resync(&mut self, uids: Vec<String>, now: Instant, view: View<'_>, out: &mut Vec<Command>) {
        for uid in uids {
            if !self.terminating.contains_key(&uid)
                && let Some(p) = self.pods.get(&uid).cloned()
            {
                self.due.remove(&uid);
                self.sync(p, now, view, out);
            }
        }
    }

    /// Dispatches a sync, or defers it to the next tick while the pod may not start.
    fn sync(&mut self, pod: Rc<Pod>, now: Instant, view: View<'_>, out: &mut Vec<Command>) {
        if self.evicted.contains(&pod.metadata.uid) || self.rejected.contains(&pod.metadata.uid) {
            return;
        }
        if let Some(why) = self.start_blocked(&pod, view) {
            log::debug!("pod {} not synced yet: {why}", pod.metadata.name);
            self.due.insert(pod.metadata.uid.clone(), now);
            return;
        }
        out.push(Command::Dispatch(Work::Sync(pod)));
    }

    fn done(&mut self, d: Done, now: Instant, view: View<'_>, out: &mut Vec<Command>) {
        let uid = match &d {
            Done::Synced { uid, .. } | Done::Terminated { uid } | Done::TerminateFailed { uid } => {
                uid.clone()
            }
        };
        if let Some(n) = self.in_flight.get_mut(&uid) {
            *n = n.saturating_sub(1);
            if *n == 0 {
                self.in_flight.remove(&uid);
            }
        }
        match d {
            Done::Synced { retry_after, .. } => {
                if self.pods.contains(&uid) {
                    let after = retry_after
                        .unwrap_or(self.cfg.sync_frequency)
                        .min(self.cfg.sync_frequency);
                    let at = now
                        .checked_add(after)
                        .unwrap_or(now + Duration::from_secs(86_400));
                    self.due.insert(uid.clone(), at);
                }
            }
            Done::Terminated { .. } => {
                self.terminating.remove(&uid);
                self.retry_terminate.remove(&uid);
                self.terminate_failures.remove(&uid);
                if let Some(p) = self.deleting.remove(&uid) {
                    self.finalizable.insert(uid.clone(), p);
                }
                // The same pod may have come back meanwhile (a manifest restored); pods of the
                // same name waiting for this one start at the next tick.
                if let Some(p) = self.pods.get(&uid).cloned() {
                    self.sync(p, now, view, out);
                }
            }
            Done::TerminateFailed { .. } => {
                let n = self.terminate_failures.entry(uid.clone()).or_default();
                *n = n.saturating_add(1);
                let wait = TERMINATE_RETRY
                    .saturating_mul(1 << (*n - 1).min(16))
                    .min(TERMINATE_RETRY_MAX);
                if *n > 1 {
                    log::info!(
                        "terminating pod {uid} failed {n} times in a row; next try in {}s",
                        wait.as_secs()
                    );
                }
                self.retry_terminate.insert(uid.clone(), now + wait);
            }
        }
        // A worker with nothing queued for a pod that is gone ends here.
        let idle = !self.in_flight.contains_key(&uid);
        let gone = !self.pods.contains(&uid) && !self.terminating.contains_key(&uid);
        if idle && gone {
            out.push(Command::EndWorker(uid));
        }
    }

    fn tick(&mut self, now: Instant, view: View<'_>, out: &mut Vec<Command>) {
        for uid in come_due(&self.due, now) {
            self.due.remove(&uid);
            if !self.terminating.contains_key(&uid)
                && let Some(p) = self.pods.get(&uid).cloned()
            {
                self.sync(p, now, view, out);
            }
        }
        for uid in come_due(&self.retry_terminate, now) {
            self.retry_terminate.remove(&uid);
            if let Some(t) = self.terminating.get(&uid) {
                out.push(Command::Dispatch(t.work(&uid)));
            }
        }
    }
}
