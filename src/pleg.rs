//! PLEG: the pod lifecycle event generator.
//!
//! Every second it lists the runtime (two calls), diffs the listing against the previous one and
//! emits an event per container or sandbox that changed. Only pods with changes are inspected
//! further, each in its own task under its own deadline. A relist waits for those inspections
//! at most `RELIST_WAIT`; one still running then finishes (or times out) on its own while later
//! relists go on, so a pod whose inspection hangs can never stall the relist (upstream inspects
//! serially and stalls past its 3-minute health threshold). Pods whose inspection failed are
//! retried on the next relist.

use std::cell::{Cell, RefCell};
use std::collections::{HashMap, HashSet};
use std::rc::Rc;
use std::time::{Duration, Instant};

use crate::kubecontainer::{ContainerState, PodRuntimeStatus, SandboxState};
use crate::kuberuntime::{self, ListedPod, RuntimeManager};
use crate::rt;
use crate::stats::prom::{DEF_BUCKETS, Histogram};

/// The kubelet's relist period.
pub const RELIST_PERIOD: Duration = Duration::from_secs(1);
/// Without a successful relist for this long, the PLEG (and so the node) is unhealthy.
pub const RELIST_THRESHOLD: Duration = Duration::from_secs(180);
/// Deadline of one pod's inspection.
pub const INSPECT_DEADLINE: Duration = Duration::from_secs(10);
/// How long a relist waits for the inspections it started before it moves on.
pub const RELIST_WAIT: Duration = Duration::from_secs(1);

/// Why the agent is not healthy: the checks `/healthz`, the Ready condition and the systemd
/// watchdog share (upstream's kubelet registers the same two: the PLEG's and the sync loop's).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Unhealthy {
    /// The PLEG's last successful relist is this old.
    Pleg { age: Duration },
    /// The sync loop last turned this long ago.
    SyncLoop { idle: Duration },
}

impl std::fmt::Display for Unhealthy {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Unhealthy::Pleg { age } => write!(
                f,
                "pleg was last seen active {age:?} ago; threshold is {RELIST_THRESHOLD:?}"
            ),
            Unhealthy::SyncLoop { idle } => write!(f, "sync loop last ran {idle:?} ago"),
        }
    }
}

impl std::error::Error for Unhealthy {}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum EventType {
    ContainerStarted,
    ContainerDied,
    ContainerRemoved,
    ContainerChanged,
    SandboxChanged,
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Event {
    pub uid: String,
    pub kind: EventType,
    pub id: String,
}

/// What one relist saw of a pod: object id → state, for sandboxes and containers.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Seen {
    pub sandboxes: HashMap<String, SandboxState>,
    pub containers: HashMap<String, ContainerState>,
}

/// Events between two listings of one pod (pure, so it is tested densely).
pub fn diff(uid: &str, old: Option<&Seen>, new: Option<&Seen>) -> Vec<Event> {
    let empty = Seen::default();
    let (old, new) = (old.unwrap_or(&empty), new.unwrap_or(&empty));
    let mut ev = Vec::new();
    let mut push = |kind, id: &str| {
        ev.push(Event {
            uid: uid.to_owned(),
            kind,
            id: id.to_owned(),
        })
    };
    let mut ids: Vec<&String> = old.containers.keys().chain(new.containers.keys()).collect();
    ids.sort();
    ids.dedup();
    for id in ids {
        let (o, n) = (old.containers.get(id), new.containers.get(id));
        if o == n {
            continue;
        }
        use ContainerState::*;
        match n {
            Some(Running) => push(EventType::ContainerStarted, id),
            Some(Exited) => push(EventType::ContainerDied, id),
            Some(Unknown) | Some(Created) => push(EventType::ContainerChanged, id),
            None => {
                if o == Some(&Running) {
                    push(EventType::ContainerDied, id);
                }
                push(EventType::ContainerRemoved, id);
            }
        }
    }
    let mut sids: Vec<&String> = old.sandboxes.keys().chain(new.sandboxes.keys()).collect();
    sids.sort();
    sids.dedup();
    for id in sids {
        if old.sandboxes.get(id) != new.sandboxes.get(id) {
            push(EventType::SandboxChanged, id);
        }
    }
    ev
}

/// A cached pod: its runtime status and when it was observed.
#[derive(Debug, Clone)]
pub struct Cached {
    pub status: PodRuntimeStatus,
    /// When it was observed ([`rt::mono_nanos`]).
    pub at: i64,
    /// Grace period the pod's containers were created with (for orphans without a spec).
    pub grace: i64,
}

/// The compact status cache shared by the PLEG, pod workers and the status manager.
#[derive(Debug, Default)]
pub struct Cache {
    pods: HashMap<String, Cached>,
}

impl Cache {
    /// Stores an observation unless a newer one is already there.
    pub fn put(&mut self, status: PodRuntimeStatus, at: i64, grace: Option<i64>) {
        let uid = status.uid.to_string();
        match self.pods.get_mut(&uid) {
            Some(c) if c.at > at => {}
            Some(c) => {
                c.status = status;
                c.at = at;
                if let Some(g) = grace {
                    c.grace = g;
                }
            }
            None => {
                self.pods.insert(
                    uid,
                    Cached {
                        status,
                        at,
                        grace: grace.unwrap_or(30),
                    },
                );
            }
        }
    }

    pub fn get(&self, uid: &str) -> Option<&Cached> {
        self.pods.get(uid)
    }

    pub fn remove(&mut self, uid: &str) {
        self.pods.remove(uid);
    }

    pub fn uids(&self) -> Vec<String> {
        self.pods.keys().cloned().collect()
    }

    pub fn len(&self) -> usize {
        self.pods.len()
    }

    pub fn is_empty(&self) -> bool {
        self.pods.is_empty()
    }

    /// Approximate bytes held (entries, strings and vectors), to measure its footprint.
    pub fn approx_bytes(&self) -> usize {
        use std::mem::size_of;
        let mut n = self.pods.capacity() * (size_of::<String>() + size_of::<Cached>() + 8);
        for (k, c) in &self.pods {
            let s = &c.status;
            n += k.capacity() + s.uid.len() + s.name.len() + s.namespace.len();
            n += s.sandboxes.capacity() * size_of::<crate::kubecontainer::SandboxStatus>();
            n += s
                .sandboxes
                .iter()
                .map(|x| x.id.len() + x.ip.as_ref().map_or(0, |i| i.len()))
                .sum::<usize>();
            n += s.containers.capacity() * size_of::<crate::kubecontainer::ContainerStatus>();
            n += s
                .containers
                .iter()
                .map(|x| {
                    x.id.len()
                        + x.name.len()
                        + x.image.len()
                        + x.image_ref.len()
                        + x.reason.len()
                        + x.message.len()
                })
                .sum::<usize>();
        }
        n
    }

    /// Number of containers held, for per-container figures.
    pub fn containers(&self) -> usize {
        self.pods.values().map(|c| c.status.containers.len()).sum()
    }
}

pub struct Pleg {
    rm: Rc<RuntimeManager>,
    cache: Rc<RefCell<Cache>>,
    events: async_channel::Sender<Event>,
    last_ok: Cell<Option<Instant>>,
    started: Instant,
    prev: RefCell<HashMap<String, Seen>>,
    /// Pods to inspect on the next relist (their last inspection failed).
    retry: Rc<RefCell<HashSet<String>>>,
    /// Pods with an inspection still running.
    inflight: Rc<RefCell<HashSet<String>>>,
    /// Pods in the latest listing: a late inspection of a pod gone since is not cached.
    listed: Rc<RefCell<HashSet<String>>>,
    /// What `/metrics` reports of the relists.
    pub metrics: RefCell<RelistMetrics>,
}

/// The kubelet's PLEG metrics: each relist's duration, the interval between relist starts,
/// and the wall time of the last successful relist.
#[derive(Debug, Clone)]
pub struct RelistMetrics {
    pub duration: Histogram,
    pub interval: Histogram,
    /// Monotonic start of the previous relist.
    last_start: Option<Instant>,
    /// Unix nanoseconds of the last successful relist.
    pub last_seen: Option<i64>,
}

impl Default for RelistMetrics {
    fn default() -> Self {
        RelistMetrics {
            duration: Histogram::new(DEF_BUCKETS),
            interval: Histogram::new(DEF_BUCKETS),
            last_start: None,
            last_seen: None,
        }
    }
}

fn seen_of(p: &ListedPod) -> Seen {
    Seen {
        sandboxes: p
            .sandboxes
            .iter()
            .map(|s| (s.id.to_string(), s.state))
            .collect(),
        containers: p
            .containers
            .iter()
            .map(|c| (c.id.to_string(), c.state))
            .collect(),
    }
}

impl Pleg {
    pub fn new(
        rm: Rc<RuntimeManager>,
        cache: Rc<RefCell<Cache>>,
        events: async_channel::Sender<Event>,
    ) -> Self {
        Pleg {
            rm,
            cache,
            events,
            last_ok: Cell::new(None),
            started: rt::now(),
            prev: RefCell::default(),
            retry: Rc::default(),
            inflight: Rc::default(),
            listed: Rc::default(),
            metrics: RefCell::default(),
        }
    }

    /// Healthy while the last successful relist (or the start) is under the threshold old.
    pub fn healthy(&self) -> Result<(), Unhealthy> {
        let since = self.last_ok.get().unwrap_or(self.started);
        let age = rt::now().saturating_duration_since(since);
        if age > RELIST_THRESHOLD {
            Err(Unhealthy::Pleg { age })
        } else {
            Ok(())
        }
    }

    /// True once one relist has succeeded.
    pub fn has_listed(&self) -> bool {
        self.last_ok.get().is_some()
    }

    /// One relist: list, diff, inspect changed pods, update the cache, emit events.
    pub async fn relist(&self) -> Result<usize, crate::cri::CriError> {
        let t0 = rt::now();
        {
            let mut m = self.metrics.borrow_mut();
            if let Some(prev) = m.last_start.replace(t0) {
                m.interval.observe((t0 - prev).as_secs_f64());
            }
        }
        let r = self.relist_inner().await;
        let mut m = self.metrics.borrow_mut();
        m.duration.observe((rt::now() - t0).as_secs_f64());
        if r.is_ok() {
            m.last_seen = Some(rt::now_nanos());
        }
        r
    }

    async fn relist_inner(&self) -> Result<usize, crate::cri::CriError> {
        let started = rt::mono_nanos();
        let listing = self.rm.list().await?;
        *self.listed.borrow_mut() = listing.pods.keys().cloned().collect();
        let now_seen: HashMap<String, Seen> = listing
            .pods
            .iter()
            .map(|(uid, p)| (uid.clone(), seen_of(p)))
            .collect();

        let mut events = Vec::new();
        let mut changed: HashSet<String> = std::mem::take(&mut *self.retry.borrow_mut());
        {
            let prev = self.prev.borrow();
            let cache = self.cache.borrow();
            let mut uids: Vec<&String> = prev.keys().chain(now_seen.keys()).collect();
            uids.sort();
            uids.dedup();
            for uid in uids {
                let ev = diff(uid, prev.get(uid), now_seen.get(uid));
                if !ev.is_empty() || (now_seen.contains_key(uid) && cache.get(uid).is_none()) {
                    changed.insert(uid.clone());
                }
                events.extend(ev);
            }
        }

        // A pod seen for the first time is cached at once from the listing alone (its full
        // inspection, when done, supersedes it), so the start gate, orphan cleanup and
        // directory cleanup know about it even while its inspection is slow or failing.
        {
            let mut cache = self.cache.borrow_mut();
            for (uid, p) in &listing.pods {
                if cache.get(uid).is_none() {
                    cache.put(RuntimeManager::shallow_status(uid, p), started - 1, p.grace);
                }
            }
        }
        // Inspect changed pods, each in its own task under its own deadline.
        let mut listing = listing;
        let mut tasks = Vec::new();
        for uid in changed {
            let Some(p) = listing.pods.remove(&uid) else {
                self.cache.borrow_mut().remove(&uid);
                continue;
            };
            if !self.inflight.borrow_mut().insert(uid.clone()) {
                // Still inspecting it from an earlier relist: look again afterwards.
                self.retry.borrow_mut().insert(uid);
                continue;
            }
            let (rm, cache) = (self.rm.clone(), self.cache.clone());
            let (retry, inflight, listed) = (
                self.retry.clone(),
                self.inflight.clone(),
                self.listed.clone(),
            );
            tasks.push(rt::spawn(async move {
                let grace = p.grace;
                let r = rt::timeout(INSPECT_DEADLINE, rm.inspect(&uid, &p)).await;
                match r
                    .map_err(|e| e.to_string())
                    .and_then(|r| r.map_err(|e| e.to_string()))
                {
                    Ok(st) if listed.borrow().contains(&uid) => {
                        cache.borrow_mut().put(st, started, grace)
                    }
                    Ok(_) => {}
                    Err(e) => {
                        log::warn!("pleg: inspecting pod {uid}: {e}");
                        retry.borrow_mut().insert(uid.clone());
                    }
                }
                inflight.borrow_mut().remove(&uid);
            }));
        }
        let inspected = tasks.len();
        if rt::timeout(RELIST_WAIT, kuberuntime::join_all(tasks.iter_mut()))
            .await
            .is_err()
        {
            for t in tasks {
                t.detach();
            }
        }
        *self.prev.borrow_mut() = now_seen;
        self.last_ok.set(Some(rt::now()));
        for e in events {
            log::debug!("pleg: {:?} {} in pod {}", e.kind, e.id, e.uid);
            if self.events.send(e).await.is_err() {
                break;
            }
        }
        Ok(inspected)
    }

    /// Relists forever, every `period`.
    pub async fn run(self: Rc<Self>, period: Duration) {
        let mut failing = false;
        loop {
            let t0 = rt::now();
            match self.relist().await {
                Ok(_) => {
                    if failing {
                        log::info!("pleg: relist works again");
                    }
                    failing = false;
                }
                Err(e) => {
                    if !failing {
                        log::warn!("pleg: relist failed: {e}");
                    }
                    failing = true;
                }
            }
            rt::sleep(period.saturating_sub(rt::now() - t0)).await;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn seen(cs: &[(&str, ContainerState)], sbs: &[(&str, SandboxState)]) -> Seen {
        Seen {
            containers: cs.iter().map(|(k, v)| ((*k).to_owned(), *v)).collect(),
            sandboxes: sbs.iter().map(|(k, v)| ((*k).to_owned(), *v)).collect(),
        }
    }

    fn kinds(ev: &[Event]) -> Vec<(EventType, &str)> {
        ev.iter().map(|e| (e.kind, e.id.as_str())).collect()
    }

    use ContainerState::*;
    use EventType::*;

    #[test]
    fn no_change_no_events() {
        let s = seen(&[("c1", Running)], &[("s1", SandboxState::Ready)]);
        assert!(diff("u", Some(&s), Some(&s)).is_empty());
    }

    #[test]
    fn start_die_remove() {
        let a = seen(&[], &[("s", SandboxState::Ready)]);
        let b = seen(&[("c", Running)], &[("s", SandboxState::Ready)]);
        let c = seen(&[("c", Exited)], &[("s", SandboxState::Ready)]);
        let d = seen(&[], &[("s", SandboxState::Ready)]);
        assert_eq!(
            kinds(&diff("u", Some(&a), Some(&b))),
            vec![(ContainerStarted, "c")]
        );
        assert_eq!(
            kinds(&diff("u", Some(&b), Some(&c))),
            vec![(ContainerDied, "c")]
        );
        assert_eq!(
            kinds(&diff("u", Some(&c), Some(&d))),
            vec![(ContainerRemoved, "c")]
        );
        // running and removed between two relists: died, then removed
        assert_eq!(
            kinds(&diff("u", Some(&b), Some(&d))),
            vec![(ContainerDied, "c"), (ContainerRemoved, "c")]
        );
    }

    #[test]
    fn new_pod_and_gone_pod() {
        let b = seen(&[("c", Created)], &[("s", SandboxState::Ready)]);
        assert_eq!(
            kinds(&diff("u", None, Some(&b))),
            vec![(ContainerChanged, "c"), (SandboxChanged, "s")]
        );
        assert_eq!(
            kinds(&diff("u", Some(&b), None)),
            vec![(ContainerRemoved, "c"), (SandboxChanged, "s")]
        );
    }

    #[test]
    fn sandbox_state_change() {
        let a = seen(&[], &[("s", SandboxState::Ready)]);
        let b = seen(&[], &[("s", SandboxState::NotReady)]);
        assert_eq!(
            kinds(&diff("u", Some(&a), Some(&b))),
            vec![(SandboxChanged, "s")]
        );
    }

    #[test]
    fn cache_keeps_newest() {
        let mut c = Cache::default();
        let st = |name: &str| PodRuntimeStatus {
            uid: "u".into(),
            name: name.into(),
            ..Default::default()
        };
        c.put(st("new"), 10, Some(5));
        c.put(st("old"), 5, None);
        assert_eq!(&*c.get("u").unwrap().status.name, "new");
        assert_eq!(c.get("u").unwrap().grace, 5);
        c.put(st("newer"), 11, None);
        assert_eq!(&*c.get("u").unwrap().status.name, "newer");
        assert!(c.approx_bytes() > 0);
        c.remove("u");
        assert!(c.is_empty());
    }
}
