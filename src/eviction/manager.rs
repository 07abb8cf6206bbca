//! The eviction manager's decisions as plain data, like upstream's `synchronize`: which
//! thresholds are met (soft ones for their grace period, each held until its minimum reclaim
//! is back), which pressure conditions the node reports (held for the transition period after
//! the signal clears), whether node-level reclaim comes first, and which pod to evict (ranked
//! as upstream, at most one per period, critical pods never). It reads no file and no clock:
//! the caller passes the observations and `now`.

use std::collections::{BTreeMap, BTreeSet};
use std::time::{Duration, Instant};

use super::signals::Observations;
use super::threshold::{Amount, Condition, Config, Resource, Signal, Threshold};

/// How often the manager looks (upstream's monitoring interval), and so the least time
/// between two evictions.
pub const PERIOD: Duration = Duration::from_secs(10);

/// The least time between two evictions: a period, less a second for a round that runs a
/// little early (timers and reads jitter), so each round may evict one pod.
pub const MIN_GAP: Duration = Duration::from_secs(9);

/// upstream's `immediateEvictionGracePeriodSeconds`: what a hard threshold gives a pod.
pub const IMMEDIATE_GRACE: i64 = 1;

/// `scheduling.SystemCriticalPriority`: pods at or above it are never evicted.
pub const SYSTEM_CRITICAL_PRIORITY: i32 = 2_000_000_000;

/// The priority classes that make a pod critical without an apiserver to resolve them (a
/// static pod's `priorityClassName` has no `priority`).
pub const CRITICAL_CLASSES: [&str; 2] = ["system-node-critical", "system-cluster-critical"];

/// One container of a candidate: its memory working set and request.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ContainerUsage {
    pub name: String,
    pub memory_working_set: i64,
    pub memory_request: i64,
}

/// A pod the manager may evict, with what it uses.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Candidate {
    pub uid: String,
    pub namespace: String,
    pub name: String,
    /// `spec.priority` (0 when unset).
    pub priority: i32,
    /// Static or mirror pod, a priority at or above system-critical, or a critical class.
    pub critical: bool,
    /// From the manifest directory: ranked after every API pod.
    pub static_pod: bool,
    /// The pod's terminationGracePeriodSeconds.
    pub grace_period: i64,
    /// Memory request summed over the app containers.
    pub memory_request: i64,
    /// `None` when the pod's accounting could not be read.
    pub containers: Option<Vec<ContainerUsage>>,
    pub processes: Option<u64>,
    /// `requests.ephemeral-storage` summed as the memory request is.
    pub disk_request: i64,
    /// Its ephemeral storage and limits; `None` when not measured yet.
    pub storage: Option<StorageUse>,
}

/// A limit as the spec writes it (for the message) and its value.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Limit {
    pub value: i64,
    pub text: String,
}

/// One container's writable layer and logs, with its request and limit.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ContainerStorage {
    pub name: String,
    pub used: i64,
    pub request: i64,
    pub limit: Option<Limit>,
}

/// One emptyDir volume on disk and its `sizeLimit`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct VolumeStorage {
    pub name: String,
    pub used: i64,
    pub size_limit: Option<Limit>,
}

/// A pod's ephemeral storage (writable layers, logs, emptyDir volumes on disk) and what
/// bounds it.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct StorageUse {
    pub bytes: i64,
    pub inodes: i64,
    pub containers: Vec<ContainerStorage>,
    pub volumes: Vec<VolumeStorage>,
    /// The containers' `limits.ephemeral-storage` together (upstream's pod limits); `None`
    /// when no container sets one.
    pub pod_limit: Option<i64>,
}

impl Candidate {
    fn memory_usage(&self) -> Option<i64> {
        self.containers
            .as_ref()
            .map(|cs| cs.iter().map(|c| c.memory_working_set).sum())
    }
}

/// The node's pressure conditions.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Pressure {
    pub memory: bool,
    pub disk: bool,
    pub pid: bool,
}

impl Pressure {
    fn set(&mut self, c: Condition) {
        match c {
            Condition::MemoryPressure => self.memory = true,
            Condition::DiskPressure => self.disk = true,
            Condition::PidPressure => self.pid = true,
        }
    }
}

/// Why a pod is evicted: a threshold met, or a limit of its own exceeded (upstream's
/// `ephemeralcontainerfs.limit`, `ephemeralpodfs.limit`, `emptydirfs.limit`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Cause {
    Threshold(Signal),
    ContainerStorageLimit,
    PodStorageLimit,
    EmptyDirLimit,
}

impl Cause {
    pub fn name(self) -> &'static str {
        match self {
            Cause::Threshold(s) => s.name(),
            Cause::ContainerStorageLimit => "ephemeralcontainerfs.limit",
            Cause::PodStorageLimit => "ephemeralpodfs.limit",
            Cause::EmptyDirLimit => "emptydirfs.limit",
        }
    }
}

/// One pod to evict.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Eviction {
    pub uid: String,
    pub namespace: String,
    pub name: String,
    /// Seconds the pod's containers get to stop.
    pub grace: i64,
    /// The status message: "The node was low on resource: memory. ...".
    pub message: String,
    pub cause: Cause,
}

/// What the caller must do after an observation.
#[derive(Debug, Clone, PartialEq)]
pub enum Action {
    Nothing,
    /// Free node-level resources (dead containers, unused images), read the signals again and
    /// hand them to [`Manager::after_reclaim`].
    Reclaim(Signal),
    Evict(Eviction),
}

/// A threshold met, with the observation that met it (for the message).
#[derive(Debug, Clone, PartialEq)]
struct Met {
    threshold: Threshold,
    available: i64,
    capacity: i64,
}

#[derive(Debug)]
pub struct Manager {
    cfg: Config,
    /// Thresholds met at the last observation (index into the configured thresholds, with
    /// the PSI threshold as `usize::MAX`).
    met: BTreeSet<usize>,
    first_observed: BTreeMap<usize, Instant>,
    conditions_last_observed: BTreeMap<Condition, Instant>,
    last_eviction: Option<Instant>,
    /// Whether reclaim is wired in (container GC; image GC when it exists).
    can_reclaim: bool,
}

const PSI: usize = usize::MAX;

impl Manager {
    pub fn new(cfg: Config, can_reclaim: bool) -> Self {
        Manager {
            cfg,
            met: BTreeSet::new(),
            first_observed: BTreeMap::new(),
            conditions_last_observed: BTreeMap::new(),
            last_eviction: None,
            can_reclaim,
        }
    }

    pub fn config(&self) -> &Config {
        &self.cfg
    }

    fn threshold(&self, i: usize) -> Threshold {
        if i == PSI {
            Threshold {
                signal: Signal::MemoryPsi,
                value: Amount::Percent(self.cfg.memory_psi_threshold.unwrap_or(100.0)),
                // Acts at once but stops pods as a soft threshold does: it fires early.
                hard: false,
                grace: Duration::ZERO,
                min_reclaim: None,
            }
        } else {
            self.cfg.thresholds[i].clone()
        }
    }

    /// The thresholds the observations meet; `held` are kept met until their minimum
    /// reclaim is available again.
    fn thresholds_met(&self, obs: &Observations, held: &BTreeSet<usize>) -> Vec<(usize, Met)> {
        let mut out = Vec::new();
        for (i, t) in self.cfg.thresholds.iter().enumerate() {
            let Some(o) = obs.get(t.signal) else { continue };
            let mut quantity = t.value.of(o.capacity);
            if held.contains(&i)
                && let Some(r) = t.min_reclaim
            {
                quantity = quantity.saturating_add(r.of(o.capacity));
            }
            if o.available < quantity {
                out.push((
                    i,
                    Met {
                        threshold: t.clone(),
                        available: o.available,
                        capacity: o.capacity,
                    },
                ));
            }
        }
        if let (Some(limit), Some(psi)) = (self.cfg.memory_psi_threshold, obs.memory_psi_some_avg10)
            && psi >= limit
        {
            let mem = obs.get(Signal::MemoryAvailable);
            out.push((
                PSI,
                Met {
                    threshold: self.threshold(PSI),
                    available: mem.map_or(0, |m| m.available),
                    capacity: mem.map_or(0, |m| m.capacity),
                },
            ));
        }
        out
    }

    /// One round: the conditions to report, and what to do.
    pub fn observe(
        &mut self,
        obs: &Observations,
        pods: &[Candidate],
        now: Instant,
    ) -> (Pressure, Action) {
        let held = self.met.clone();
        let met = self.thresholds_met(obs, &held);
        let ids: BTreeSet<usize> = met.iter().map(|(i, _)| *i).collect();
        self.first_observed.retain(|i, _| ids.contains(i));
        for i in &ids {
            self.first_observed.entry(*i).or_insert(now);
        }
        self.met = ids;
        for (_, m) in &met {
            self.conditions_last_observed
                .insert(m.threshold.signal.condition(), now);
        }
        let transition = self.cfg.pressure_transition_period;
        self.conditions_last_observed
            .retain(|_, at| now.saturating_duration_since(*at) < transition || *at == now);
        let mut pressure = Pressure::default();
        for c in self.conditions_last_observed.keys() {
            pressure.set(*c);
        }
        // Only thresholds past their grace period act.
        let mut acting: Vec<Met> = met
            .into_iter()
            .filter(|(i, m)| {
                self.first_observed
                    .get(i)
                    .is_some_and(|at| now.saturating_duration_since(*at) >= m.threshold.grace)
            })
            .map(|(_, m)| m)
            .collect();
        if acting.is_empty() {
            return (pressure, Action::Nothing);
        }
        if self
            .last_eviction
            .is_some_and(|at| now.saturating_duration_since(at) < MIN_GAP)
        {
            return (pressure, Action::Nothing);
        }
        // Memory first, as upstream ranks the thresholds; then disk, then pids.
        acting.sort_by_key(|m| (rank_of(m.threshold.signal), !m.threshold.hard));
        let first = acting.swap_remove(0);
        if self.can_reclaim && first.threshold.signal.reclaimable() {
            return (pressure, Action::Reclaim(first.threshold.signal));
        }
        (pressure, self.evict(&first, pods, now))
    }

    /// After the reclaim the last round asked for: evict only if a threshold of the same
    /// resource is still met (grace periods ignored, minimum reclaim enforced, as upstream).
    pub fn after_reclaim(
        &mut self,
        obs: &Observations,
        pods: &[Candidate],
        signal: Signal,
        now: Instant,
    ) -> Action {
        let all: BTreeSet<usize> = (0..self.cfg.thresholds.len()).collect();
        let still = self
            .thresholds_met(obs, &all)
            .into_iter()
            .map(|(_, m)| m)
            .filter(|m| m.threshold.signal.resource() == signal.resource())
            .min_by_key(|m| !m.threshold.hard);
        match still {
            Some(m) => self.evict(&m, pods, now),
            None => {
                log::info!(
                    "eviction: reclaiming node-level resources relieved {}",
                    signal.name()
                );
                Action::Nothing
            }
        }
    }

    fn evict(&mut self, met: &Met, pods: &[Candidate], now: Instant) -> Action {
        let t = &met.threshold;
        let order = rank(t.signal.resource(), pods);
        let Some(victim) = order.into_iter().find(|p| !p.critical) else {
            log::warn!(
                "eviction: {} threshold met and no pod left that may be evicted",
                t.signal.name()
            );
            return Action::Nothing;
        };
        let grace = if t.hard {
            IMMEDIATE_GRACE
        } else {
            self.cfg
                .max_pod_grace_period
                .min(victim.grace_period)
                .max(0)
        };
        self.last_eviction = Some(now);
        Action::Evict(Eviction {
            uid: victim.uid.clone(),
            namespace: victim.namespace.clone(),
            name: victim.name.clone(),
            grace,
            message: message(met, victim),
            cause: Cause::Threshold(t.signal),
        })
    }
}

fn rank_of(s: Signal) -> u8 {
    match s.resource() {
        Resource::Memory => 0,
        Resource::EphemeralStorage | Resource::Inodes => 1,
        Resource::Pids => 2,
    }
}

/// Upstream's message: "The node was low on resource: memory. Threshold quantity: 100Mi,
/// available: 51200Ki. Container app was using 60Mi, request is 0, has larger consumption of
/// memory. " (each sentence with its trailing space).
fn message(met: &Met, pod: &Candidate) -> String {
    let t = &met.threshold;
    let r = t.signal.resource();
    let mut m = format!("The node was low on resource: {}. ", r.name());
    let (quantity, available) = match (t.signal, t.value) {
        (Signal::MemoryPsi, Amount::Percent(p)) => (
            format!("memory PSI some avg10 {p}%"),
            format_quantity(r, met.available),
        ),
        (_, Amount::Percent(p)) if p.fract() == 0.0 => {
            (format!("{p}%"), format_quantity(r, met.available))
        }
        (_, v) => (
            format_quantity(r, v.of(met.capacity)),
            format_quantity(r, met.available),
        ),
    };
    m.push_str(&format!(
        "Threshold quantity: {quantity}, available: {available}. "
    ));
    if r == Resource::EphemeralStorage
        && let Some(st) = &pod.storage
    {
        for c in &st.containers {
            if c.used > c.request {
                m.push_str(&format!(
                    "Container {} was using {}, request is {}, has larger consumption of ephemeral-storage. ",
                    c.name,
                    format_quantity(r, c.used),
                    format_quantity(r, c.request)
                ));
            }
        }
    }
    if r == Resource::Memory
        && let Some(cs) = &pod.containers
    {
        for c in cs {
            if c.memory_working_set > c.memory_request {
                m.push_str(&format!(
                    "Container {} was using {}, request is {}, has larger consumption of memory. ",
                    c.name,
                    format_quantity(r, c.memory_working_set),
                    format_quantity(r, c.memory_request)
                ));
            }
        }
    }
    m
}

/// Bytes as apimachinery prints a binary quantity (the largest exact binary suffix, `Ki` when
/// only kibibytes are exact); counts as plain numbers.
pub fn format_quantity(r: Resource, v: i64) -> String {
    if !matches!(r, Resource::Memory | Resource::EphemeralStorage) || v == 0 {
        return v.to_string();
    }
    for (suffix, shift) in [("Ti", 40), ("Gi", 30), ("Mi", 20), ("Ki", 10)] {
        if v % (1i64 << shift) == 0 {
            return format!("{}{suffix}", v >> shift);
        }
    }
    v.to_string()
}

/// Pods in eviction order for a starved resource, as upstream: memory by (usage above
/// request first, lower priority first, more usage above request first); disk the same with
/// the pod's ephemeral storage and its `requests.ephemeral-storage` (inodes against a request
/// of none); pids by (priority, more processes). A pod whose accounting could not be read
/// ranks first within its group, as upstream. Static pods come after every API pod.
pub fn rank(resource: Resource, pods: &[Candidate]) -> Vec<&Candidate> {
    use std::cmp::Ordering;
    let mut v: Vec<&Candidate> = pods.iter().collect();
    let usage = |p: &Candidate| match resource {
        Resource::EphemeralStorage => p.storage.as_ref().map(|s| (s.bytes, p.disk_request)),
        Resource::Inodes => p.storage.as_ref().map(|s| (s.inodes, 0)),
        _ => p.memory_usage().map(|u| (u, p.memory_request)),
    };
    let exceeds = |p: &Candidate| match usage(p) {
        None => 0u8,
        Some((u, r)) if u > r => 0,
        Some(_) => 1,
    };
    let above = |p: &Candidate| usage(p).map(|(u, r)| u - r);
    let by_usage = |a: Option<i64>, b: Option<i64>| match (a, b) {
        (None, None) => Ordering::Equal,
        (None, Some(_)) => Ordering::Less,
        (Some(_), None) => Ordering::Greater,
        (Some(x), Some(y)) => y.cmp(&x),
    };
    v.sort_by(|a, b| {
        let first = a.static_pod.cmp(&b.static_pod);
        let then = match resource {
            Resource::Memory | Resource::EphemeralStorage | Resource::Inodes => exceeds(a)
                .cmp(&exceeds(b))
                .then(a.priority.cmp(&b.priority))
                .then_with(|| by_usage(above(a), above(b))),
            Resource::Pids => a.priority.cmp(&b.priority).then_with(|| {
                by_usage(
                    a.processes.and_then(|n| i64::try_from(n).ok()),
                    b.processes.and_then(|n| i64::try_from(n).ok()),
                )
            }),
        };
        first
            .then(then)
            .then_with(|| (&a.namespace, &a.name).cmp(&(&b.namespace, &b.name)))
    });
    v
}

/// The pods over a local storage limit of their own, evicted whatever the node's disk
/// (upstream's `localStorageEviction`, checked before any threshold): per pod, an emptyDir
/// volume over its `sizeLimit` first, then the pod's ephemeral storage over its containers'
/// limits together, then a container's writable layer and logs over its own limit. Every
/// such pod goes in the same round, with the hard thresholds' grace period; critical pods
/// never.
pub fn local_storage(pods: &[Candidate]) -> Vec<Eviction> {
    let r = Resource::EphemeralStorage;
    fn over(used: i64, l: &Option<Limit>) -> Option<&Limit> {
        l.as_ref().filter(|l| l.value > 0 && used > l.value)
    }
    let mut out = Vec::new();
    for p in pods.iter().filter(|p| !p.critical) {
        let Some(st) = &p.storage else { continue };
        let found = st
            .volumes
            .iter()
            .find_map(|v| {
                over(v.used, &v.size_limit).map(|l| {
                    (
                        Cause::EmptyDirLimit,
                        format!(
                            "Usage of EmptyDir volume {:?} exceeds the limit {:?}. ",
                            v.name, l.text
                        ),
                    )
                })
            })
            .or_else(|| {
                st.pod_limit.filter(|l| st.bytes > *l).map(|l| {
                    (
                        Cause::PodStorageLimit,
                        format!(
                            "Pod ephemeral local storage usage exceeds the total limit of containers {}. ",
                            format_quantity(r, l)
                        ),
                    )
                })
            })
            .or_else(|| {
                st.containers.iter().find_map(|c| {
                    over(c.used, &c.limit).map(|l| {
                        (
                            Cause::ContainerStorageLimit,
                            format!(
                                "Container {} exceeded its local ephemeral storage limit {:?}. ",
                                c.name, l.text
                            ),
                        )
                    })
                })
            });
        if let Some((cause, message)) = found {
            out.push(Eviction {
                uid: p.uid.clone(),
                namespace: p.namespace.clone(),
                name: p.name.clone(),
                grace: IMMEDIATE_GRACE,
                message,
                cause,
            });
        }
    }
    out
}

/// Whether a pod is never evicted: a priority at or above system-critical, or one of the
/// system-critical priority classes (a static pod's priorityClassName has no resolved
/// priority).
pub fn is_critical(priority: Option<i32>, class: Option<&str>) -> bool {
    priority.is_some_and(|p| p >= SYSTEM_CRITICAL_PRIORITY)
        || class.is_some_and(|c| CRITICAL_CLASSES.contains(&c))
}

#[cfg(test)]
mod tests {
    use super::super::signals::Observation;
    use super::super::threshold::{Given, Settings, parse_map};
    use super::*;

    const MI: i64 = 1 << 20;
    const GI: i64 = 1 << 30;

    fn cfg(hard: &str, soft: &str, grace: &str, reclaim: &str) -> Config {
        let g = |origin: &str, s: &str, sep| {
            (!s.is_empty()).then(|| Given {
                origin: origin.into(),
                value: parse_map(s, sep).unwrap(),
            })
        };
        Settings {
            hard: Some(Given {
                origin: "--eviction-hard".into(),
                value: parse_map(hard, '<').unwrap(),
            }),
            soft: g("--eviction-soft", soft, '<'),
            soft_grace_period: g("--eviction-soft-grace-period", grace, '='),
            minimum_reclaim: g("--eviction-minimum-reclaim", reclaim, '='),
            ..Settings::default()
        }
        .build()
        .unwrap()
    }

    fn mem(available: i64) -> Observations {
        obs(&[(Signal::MemoryAvailable, available, 4 * GI)])
    }

    fn obs(v: &[(Signal, i64, i64)]) -> Observations {
        Observations {
            values: v
                .iter()
                .map(|(s, a, c)| {
                    (
                        *s,
                        Observation {
                            available: *a,
                            capacity: *c,
                        },
                    )
                })
                .collect(),
            memory_psi_some_avg10: None,
        }
    }

    fn pod(name: &str, request: i64, usage: i64) -> Candidate {
        Candidate {
            uid: format!("uid-{name}"),
            namespace: "default".into(),
            name: name.into(),
            priority: 0,
            critical: false,
            static_pod: false,
            grace_period: 30,
            memory_request: request,
            containers: Some(vec![ContainerUsage {
                name: "app".into(),
                memory_working_set: usage,
                memory_request: request,
            }]),
            processes: Some(1),
            disk_request: 0,
            storage: None,
        }
    }

    fn victim(a: &Action) -> &str {
        match a {
            Action::Evict(e) => &e.name,
            other => panic!("expected an eviction, got {other:?}"),
        }
    }

    #[test]
    fn hard_memory_threshold_evicts_at_once_with_upstreams_grace() {
        let t0 = Instant::now();
        let mut m = Manager::new(cfg("memory.available<100Mi", "", "", ""), true);
        let pods = [pod("best-effort", 0, 50 * MI)];
        let (p, a) = m.observe(&mem(200 * MI), &pods, t0);
        assert_eq!((p, a), (Pressure::default(), Action::Nothing));
        let (p, a) = m.observe(&mem(99 * MI), &pods, t0 + PERIOD);
        assert!(p.memory && !p.disk && !p.pid);
        let Action::Evict(e) = a else { panic!("{a:?}") };
        assert_eq!(e.grace, IMMEDIATE_GRACE);
        assert_eq!(e.uid, "uid-best-effort");
        assert_eq!(
            e.message,
            "The node was low on resource: memory. Threshold quantity: 100Mi, available: 99Mi. \
             Container app was using 50Mi, request is 0, has larger consumption of memory. "
        );
    }

    #[test]
    fn memory_ranking_as_upstream() {
        let mut low = pod("low-priority-within-request", 100 * MI, 90 * MI);
        low.priority = -10;
        let over_small = pod("burstable-over-by-10", 100 * MI, 110 * MI);
        let over_big = pod("burstable-over-by-50", 100 * MI, 150 * MI);
        let best_effort = pod("best-effort", 0, 20 * MI);
        let guaranteed = pod("guaranteed-within", 200 * MI, 150 * MI);
        let mut unread = pod("no-stats", 100 * MI, 0);
        unread.containers = None;
        let mut high = pod("high-priority-over", 0, 500 * MI);
        high.priority = 1000;
        let pods = [
            guaranteed,
            low,
            over_small,
            best_effort,
            over_big,
            unread,
            high,
        ];
        let order: Vec<&str> = rank(Resource::Memory, &pods)
            .iter()
            .map(|p| p.name.as_str())
            .collect();
        assert_eq!(
            order,
            [
                // Usage over request (or unknown) first; then priority; then usage above request.
                "no-stats",
                "burstable-over-by-50",
                "best-effort",
                "burstable-over-by-10",
                "high-priority-over",
                // Within their requests: priority, then usage above request.
                "low-priority-within-request",
                "guaranteed-within",
            ]
        );
    }

    #[test]
    fn best_effort_before_burstable_before_guaranteed_when_all_use_memory() {
        let pods = [
            pod("guaranteed", 64 * MI, 10 * MI),
            pod("burstable", 8 * MI, 10 * MI),
            pod("best-effort", 0, 10 * MI),
        ];
        let order: Vec<&str> = rank(Resource::Memory, &pods)
            .iter()
            .map(|p| p.name.as_str())
            .collect();
        assert_eq!(order, ["best-effort", "burstable", "guaranteed"]);
    }

    #[test]
    fn one_pod_per_period() {
        let t0 = Instant::now();
        let mut m = Manager::new(cfg("memory.available<1Gi", "", "", ""), true);
        let pods = vec![pod("a", 0, 10 * MI), pod("b", 0, 5 * MI)];
        let (_, a) = m.observe(&mem(GI / 2), &pods, t0);
        assert_eq!(victim(&a), "a");
        // The signal still says pressure: nothing more within the period.
        for s in 1..9 {
            let (p, a) = m.observe(&mem(GI / 2), &pods[1..], t0 + Duration::from_secs(s));
            assert!(p.memory);
            assert_eq!(a, Action::Nothing, "at {s}s");
        }
        let (_, a) = m.observe(&mem(GI / 2), &pods[1..], t0 + PERIOD);
        assert_eq!(victim(&a), "b");
    }

    #[test]
    fn soft_threshold_waits_for_its_grace_period_and_caps_the_pods_grace() {
        let t0 = Instant::now();
        let mut c = cfg(
            "memory.available<100Mi",
            "memory.available<1Gi",
            "memory.available=1m",
            "",
        );
        c.max_pod_grace_period = 20;
        let mut m = Manager::new(c, true);
        let pods = [pod("a", 0, 10 * MI)];
        let (p, a) = m.observe(&mem(GI / 2), &pods, t0);
        assert!(
            p.memory,
            "pressure is reported before the grace period passes"
        );
        assert_eq!(a, Action::Nothing);
        let (_, a) = m.observe(&mem(GI / 2), &pods, t0 + Duration::from_secs(59));
        assert_eq!(a, Action::Nothing);
        // Clearing resets the grace period.
        let (_, a) = m.observe(&mem(2 * GI), &pods, t0 + Duration::from_secs(60));
        assert_eq!(a, Action::Nothing);
        let t1 = t0 + Duration::from_secs(70);
        let (_, a) = m.observe(&mem(GI / 2), &pods, t1);
        assert_eq!(a, Action::Nothing);
        let (_, a) = m.observe(&mem(GI / 2), &pods, t1 + Duration::from_secs(60));
        let Action::Evict(e) = a else { panic!("{a:?}") };
        assert_eq!(e.grace, 20, "min(evictionMaxPodGracePeriod, the pod's 30)");
        let mut short = pod("short", 0, 10 * MI);
        short.grace_period = 5;
        let t2 = t1 + Duration::from_secs(60) + PERIOD;
        let (_, a) = m.observe(&mem(GI / 2), &[short], t2);
        let Action::Evict(e) = a else { panic!("{a:?}") };
        assert_eq!(e.grace, 5);
    }

    #[test]
    fn pressure_is_held_for_the_transition_period() {
        let t0 = Instant::now();
        let mut c = cfg("memory.available<100Mi,pid.available<100", "", "", "");
        c.pressure_transition_period = Duration::from_secs(300);
        let mut m = Manager::new(c, true);
        let (p, _) = m.observe(&mem(50 * MI), &[], t0);
        assert!(p.memory);
        for s in [10, 100, 299] {
            let (p, a) = m.observe(&mem(GI), &[], t0 + Duration::from_secs(s));
            assert!(p.memory, "held at {s}s");
            assert_eq!(
                a,
                Action::Nothing,
                "nothing evicted once the signal cleared"
            );
        }
        let (p, _) = m.observe(&mem(GI), &[], t0 + Duration::from_secs(300));
        assert!(!p.memory, "released after 5m");
        let (p, _) = m.observe(
            &obs(&[(Signal::PidAvailable, 10, 32768)]),
            &[],
            t0 + Duration::from_secs(301),
        );
        assert_eq!(
            p,
            Pressure {
                memory: false,
                disk: false,
                pid: true
            }
        );
    }

    #[test]
    fn minimum_reclaim_holds_a_met_threshold() {
        let t0 = Instant::now();
        let mut m = Manager::new(
            cfg("memory.available<100Mi", "", "", "memory.available=200Mi"),
            true,
        );
        let pods = [pod("a", 0, 10 * MI), pod("b", 0, 5 * MI)];
        let (_, a) = m.observe(&mem(90 * MI), &pods, t0);
        assert_eq!(victim(&a), "a");
        // 250Mi is above the threshold but below threshold + minimum reclaim (300Mi).
        let (p, a) = m.observe(&mem(250 * MI), &pods[1..], t0 + PERIOD);
        assert!(p.memory);
        assert_eq!(victim(&a), "b");
        let (_, a) = m.observe(&mem(350 * MI), &[], t0 + 2 * PERIOD);
        assert_eq!(a, Action::Nothing);
        // Once released, 250Mi meets nothing.
        let (_, a) = m.observe(&mem(250 * MI), &[pod("c", 0, 1)], t0 + 3 * PERIOD);
        assert_eq!(a, Action::Nothing);
    }

    #[test]
    fn disk_reclaims_first_and_rechecks() {
        let t0 = Instant::now();
        let mut m = Manager::new(cfg("nodefs.available<10%", "", "", ""), true);
        let pods = [pod("a", 0, 1)];
        let low = obs(&[(Signal::NodeFsAvailable, 5 * GI, 100 * GI)]);
        let (p, a) = m.observe(&low, &pods, t0);
        assert!(p.disk && !p.memory);
        assert_eq!(a, Action::Reclaim(Signal::NodeFsAvailable));
        // Reclaim freed enough: nobody is evicted.
        let freed = obs(&[(Signal::NodeFsAvailable, 20 * GI, 100 * GI)]);
        assert_eq!(
            m.after_reclaim(&freed, &pods, Signal::NodeFsAvailable, t0),
            Action::Nothing
        );
        // Reclaim did not free enough: one pod goes.
        let (_, a) = m.observe(&low, &pods, t0 + PERIOD);
        assert_eq!(a, Action::Reclaim(Signal::NodeFsAvailable));
        let a = m.after_reclaim(&low, &pods, Signal::NodeFsAvailable, t0 + PERIOD);
        let Action::Evict(e) = a else { panic!("{a:?}") };
        assert_eq!(
            e.message,
            "The node was low on resource: ephemeral-storage. Threshold quantity: 10%, available: 5Gi. "
        );
        // Without a reclaim hook, the manager evicts directly.
        let mut m = Manager::new(cfg("nodefs.available<10%", "", "", ""), false);
        let (_, a) = m.observe(&low, &pods, t0);
        assert_eq!(victim(&a), "a");
        // Memory has nothing to reclaim at node level: straight to eviction.
        let mut m = Manager::new(cfg("memory.available<1Gi", "", "", ""), true);
        assert_eq!(victim(&m.observe(&mem(1), &pods, t0).1), "a");
    }

    #[test]
    fn memory_acts_before_disk() {
        let t0 = Instant::now();
        let mut m = Manager::new(
            cfg("memory.available<1Gi,nodefs.available<10%", "", "", ""),
            true,
        );
        let both = obs(&[
            (Signal::NodeFsAvailable, GI, 100 * GI),
            (Signal::MemoryAvailable, 1, 4 * GI),
        ]);
        let (p, a) = m.observe(&both, &[pod("a", 0, 1)], t0);
        assert!(p.memory && p.disk);
        let Action::Evict(e) = a else { panic!("{a:?}") };
        assert_eq!(e.cause, Cause::Threshold(Signal::MemoryAvailable));
    }

    #[test]
    fn critical_pods_are_never_evicted_and_static_pods_go_last() {
        let t0 = Instant::now();
        let mut crit = pod("critical", 0, 900 * MI);
        crit.critical = true;
        let mut stat = pod("static", 0, 800 * MI);
        stat.static_pod = true;
        let api = pod("api", 64 * MI, 10 * MI);
        let mut m = Manager::new(cfg("memory.available<1Gi", "", "", ""), true);
        let pods = vec![crit.clone(), stat.clone(), api];
        assert_eq!(victim(&m.observe(&mem(1), &pods, t0).1), "api");
        assert_eq!(
            victim(&m.observe(&mem(1), &pods[..2], t0 + PERIOD).1),
            "static"
        );
        assert_eq!(
            m.observe(&mem(1), &pods[..1], t0 + 2 * PERIOD).1,
            Action::Nothing
        );
        assert!(is_critical(Some(2_000_001_000), None));
        assert!(is_critical(None, Some("system-node-critical")));
        assert!(is_critical(None, Some("system-cluster-critical")));
        assert!(!is_critical(Some(1_000_000), Some("high")));
        assert!(!is_critical(None, None));
    }

    #[test]
    fn pid_ranking_by_priority_then_processes() {
        let mut a = pod("few", 0, 0);
        a.processes = Some(3);
        let mut b = pod("many", 0, 0);
        b.processes = Some(300);
        let mut c = pod("many-but-important", 0, 0);
        c.processes = Some(3000);
        c.priority = 10;
        let pods = [a, b, c];
        let order: Vec<&str> = rank(Resource::Pids, &pods)
            .iter()
            .map(|p| p.name.as_str())
            .collect();
        assert_eq!(order, ["many", "few", "many-but-important"]);
    }

    #[test]
    fn memory_psi_acts_before_the_hard_threshold() {
        let t0 = Instant::now();
        let mut c = cfg("memory.available<100Mi", "", "", "");
        c.memory_psi_threshold = Some(10.0);
        c.max_pod_grace_period = 15;
        let mut m = Manager::new(c, true);
        let pods = [
            pod("burstable", 8 * MI, 300 * MI),
            pod("guaranteed", 64 * MI, 60 * MI),
        ];
        let mut calm = mem(GI);
        calm.memory_psi_some_avg10 = Some(4.0);
        assert_eq!(
            m.observe(&calm, &pods, t0),
            (Pressure::default(), Action::Nothing)
        );
        // Plenty of memory by the threshold, but tasks stall on memory: act now.
        let mut stalled = mem(GI);
        stalled.memory_psi_some_avg10 = Some(25.0);
        let (p, a) = m.observe(&stalled, &pods, t0 + PERIOD);
        assert!(p.memory);
        let Action::Evict(e) = a else { panic!("{a:?}") };
        assert_eq!(e.name, "burstable");
        assert_eq!(e.cause, Cause::Threshold(Signal::MemoryPsi));
        assert_eq!(
            e.grace, 15,
            "a soft eviction: min(evictionMaxPodGracePeriod, 30)"
        );
        assert!(
            e.message.starts_with(
                "The node was low on resource: memory. Threshold quantity: memory PSI some avg10 10%, available: 1Gi. "
            ),
            "{}",
            e.message
        );
        // Off, PSI is ignored.
        let mut m = Manager::new(cfg("memory.available<100Mi", "", "", ""), true);
        assert_eq!(
            m.observe(&stalled, &pods, t0),
            (Pressure::default(), Action::Nothing)
        );
        // No PSI file (a kernel without CONFIG_PSI, or cgroup v1): nothing happens either.
        let mut c = cfg("memory.available<100Mi", "", "", "");
        c.memory_psi_threshold = Some(10.0);
        let mut m = Manager::new(c, true);
        assert_eq!(m.observe(&mem(GI), &pods, t0).1, Action::Nothing);
    }

    #[test]
    fn a_missing_signal_meets_nothing() {
        let mut m = Manager::new(Config::default(), true);
        let (p, a) = m.observe(&Observations::default(), &[pod("a", 0, 1)], Instant::now());
        assert_eq!((p, a), (Pressure::default(), Action::Nothing));
    }

    fn limit(text: &str) -> Option<Limit> {
        Some(Limit {
            value: crate::api::Quantity::parse(text).unwrap().value(),
            text: text.into(),
        })
    }

    /// A pod with one container `app` using `used` bytes (its limit `l`), and an emptyDir
    /// `scratch` using `vol` bytes (its sizeLimit `size`).
    fn disk_pod(name: &str, used: i64, l: &str, vol: i64, size: &str) -> Candidate {
        let mut p = pod(name, 0, 0);
        let c = ContainerStorage {
            name: "app".into(),
            used,
            request: 0,
            limit: (!l.is_empty()).then(|| limit(l)).flatten(),
        };
        p.storage = Some(StorageUse {
            bytes: used + vol,
            inodes: 10,
            pod_limit: c.limit.as_ref().map(|l| l.value),
            containers: vec![c],
            volumes: vec![VolumeStorage {
                name: "scratch".into(),
                used: vol,
                size_limit: (!size.is_empty()).then(|| limit(size)).flatten(),
            }],
        });
        p
    }

    #[test]
    fn local_storage_limits_evict_with_upstreams_messages_and_no_pressure() {
        let within = disk_pod("within", 5 * MI, "10Mi", 5 * MI, "8Mi");
        let no_limits = disk_pod("no-limits", 900 * MI, "", 900 * MI, "");
        let volume = disk_pod("volume-over", 1, "100Mi", 9 * MI, "8Mi");
        // The container alone is within its 10Mi; with the volume the pod is over its 10Mi.
        let pod_total = disk_pod("pod-over", 6 * MI, "10Mi", 6 * MI, "");
        let mut container = disk_pod("container-over", 11 * MI, "10Mi", 0, "");
        // Two containers: the pod's limit is their sum, the first is over its own.
        if let Some(st) = container.storage.as_mut() {
            st.containers.push(ContainerStorage {
                name: "quiet".into(),
                used: 0,
                request: 0,
                limit: limit("100Mi"),
            });
            st.pod_limit = Some(110 * MI);
        }
        let mut critical = disk_pod("critical", 0, "", 9 * MI, "8Mi");
        critical.critical = true;
        let mut unmeasured = pod("unmeasured", 0, 0);
        unmeasured.storage = None;
        let pods = [
            within, no_limits, volume, pod_total, container, critical, unmeasured,
        ];
        let got: Vec<(String, Cause, String, i64)> = local_storage(&pods)
            .into_iter()
            .map(|e| (e.name, e.cause, e.message, e.grace))
            .collect();
        assert_eq!(
            got,
            [
                (
                    "volume-over".into(),
                    Cause::EmptyDirLimit,
                    "Usage of EmptyDir volume \"scratch\" exceeds the limit \"8Mi\". ".into(),
                    IMMEDIATE_GRACE
                ),
                (
                    "pod-over".into(),
                    Cause::PodStorageLimit,
                    "Pod ephemeral local storage usage exceeds the total limit of containers 10Mi. "
                        .into(),
                    IMMEDIATE_GRACE
                ),
                (
                    "container-over".into(),
                    Cause::ContainerStorageLimit,
                    "Container app exceeded its local ephemeral storage limit \"10Mi\". ".into(),
                    IMMEDIATE_GRACE
                ),
            ]
        );
        // An emptyDir over its limit is named before the pod's total, as upstream checks it first.
        let both = disk_pod("both", 20 * MI, "10Mi", 9 * MI, "8Mi");
        assert_eq!(local_storage(&[both])[0].cause, Cause::EmptyDirLimit);
        // Exactly at the limit is within it.
        let at = disk_pod("at", 10 * MI, "10Mi", 0, "");
        assert_eq!(local_storage(&[at]), []);
    }

    #[test]
    fn disk_ranking_by_usage_above_requests_then_priority() {
        let mut within = disk_pod("within-request", 50 * MI, "", 0, "");
        within.disk_request = 100 * MI;
        within.priority = -100;
        let over_small = disk_pod("over-by-10", 10 * MI, "", 0, "");
        let over_big = disk_pod("over-by-500", 500 * MI, "", 0, "");
        let mut important = disk_pod("important-over-by-900", 900 * MI, "", 0, "");
        important.priority = 1000;
        let mut unmeasured = pod("unmeasured", 0, 0);
        unmeasured.storage = None;
        let pods = [within, over_small, important, over_big, unmeasured];
        let order: Vec<&str> = rank(Resource::EphemeralStorage, &pods)
            .iter()
            .map(|p| p.name.as_str())
            .collect();
        assert_eq!(
            order,
            [
                "unmeasured",
                "over-by-500",
                "over-by-10",
                "important-over-by-900",
                "within-request"
            ]
        );
        // Inodes: against no request, the most inodes first within a priority.
        let mut few = disk_pod("few-inodes", 0, "", 0, "");
        let mut many = disk_pod("many-inodes", 0, "", 0, "");
        few.storage.as_mut().unwrap().inodes = 10;
        many.storage.as_mut().unwrap().inodes = 10_000;
        let pods = [few, many];
        let order: Vec<&str> = rank(Resource::Inodes, &pods)
            .iter()
            .map(|p| p.name.as_str())
            .collect();
        assert_eq!(order, ["many-inodes", "few-inodes"]);
    }

    #[test]
    fn disk_pressure_evicts_the_pod_most_over_its_request_and_names_its_containers() {
        let t0 = Instant::now();
        let mut m = Manager::new(cfg("nodefs.available<10%", "", "", ""), false);
        let mut small = disk_pod("a-small", 10 * MI, "", 0, "");
        small.disk_request = 20 * MI;
        let big = disk_pod("b-big", 300 * MI, "", 0, "");
        let low = obs(&[(Signal::NodeFsAvailable, 5 * GI, 100 * GI)]);
        let (p, a) = m.observe(&low, &[small, big], t0);
        assert!(p.disk);
        let Action::Evict(e) = a else { panic!("{a:?}") };
        assert_eq!(e.name, "b-big");
        assert_eq!(
            e.message,
            "The node was low on resource: ephemeral-storage. Threshold quantity: 10%, available: 5Gi. \
             Container app was using 300Mi, request is 0, has larger consumption of ephemeral-storage. "
        );
    }

    #[test]
    fn quantities_print_as_apimachinery() {
        assert_eq!(format_quantity(Resource::Memory, 100 * MI), "100Mi");
        assert_eq!(format_quantity(Resource::Memory, 3 * GI), "3Gi");
        assert_eq!(format_quantity(Resource::Memory, 1536), "1536");
        assert_eq!(format_quantity(Resource::Memory, 2048), "2Ki");
        assert_eq!(format_quantity(Resource::Memory, 0), "0");
        assert_eq!(format_quantity(Resource::Pids, 4096), "4096");
    }
}
