//! Graceful node shutdown, as upstream's `pkg/kubelet/nodeshutdown`: while the machine runs,
//! picolet holds a systemd-logind *delay* inhibitor lock; when logind announces
//! `PrepareForShutdown(true)`, the node stops admitting pods, reports NotReady, stops its pods
//! group by group (lowest priority first, each group within its share of the grace period),
//! writes the state file and releases the lock so the shutdown goes on.
//!
//! This module is the part that needs no bus: the settings and their checks, the priority
//! groups and their shares, the final status's strings, the state file, and the shutdown
//! sequence itself behind the [`Node`] seam, timed by the one clock (`rt`). The D-Bus client
//! (`dbus`, `systemd`) and the task that ties them together (`manager`) come with the
//! `graceful-shutdown` feature.

#[cfg(feature = "graceful-shutdown")]
pub mod dbus;
#[cfg(feature = "graceful-shutdown")]
pub mod manager;
#[cfg(feature = "graceful-shutdown")]
pub mod systemd;

use std::path::{Path, PathBuf};
use std::time::Duration;

use crate::api::Pod;
use crate::api::duration::format_duration;
use crate::rt;

/// The reason and message of a pod stopped for the shutdown (its status is Failed).
pub const REASON: &str = "Terminated";
pub const MESSAGE: &str = "Pod was terminated in response to imminent node shutdown.";
/// What admission answers while the node shuts down.
pub const NOT_ADMITTED_REASON: &str = "NodeShutdown";
pub const NOT_ADMITTED_MESSAGE: &str = "Pod was rejected as the node is shutting down.";
/// The Ready condition's message while the node shuts down (reason `KubeletNotReady`).
pub const NOT_READY_MESSAGE: &str = "node is shutting down";
/// The state file under `--root-dir`.
pub const STATE_FILE: &str = "graceful_node_shutdown_state";

/// `scheduling.DefaultPriorityWhenNoDefaultClassExists` and `scheduling.SystemCriticalPriority`.
pub const DEFAULT_PRIORITY: i32 = 0;
pub const SYSTEM_CRITICAL_PRIORITY: i32 = 2_000_000_000;
/// The priorities of the two built-in critical classes, for pods (static ones) whose
/// `priorityClassName` no apiserver resolved into a `priority`.
pub const NODE_CRITICAL_PRIORITY: i32 = SYSTEM_CRITICAL_PRIORITY + 1000;

/// One entry of `shutdownGracePeriodByPodPriority`: pods of at least this priority (up to the
/// next entry's) get this many seconds.
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct ByPriority {
    pub priority: i32,
    pub shutdown_grace_period_seconds: i64,
}

/// The three KubeletConfiguration fields.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Config {
    /// `shutdownGracePeriod`: the whole time the shutdown is delayed by.
    pub grace_period: Duration,
    /// `shutdownGracePeriodCriticalPods`: the part of it kept for critical pods.
    pub critical_pods: Duration,
    /// `shutdownGracePeriodByPodPriority`: the finer form, exclusive with the two above.
    pub by_priority: Vec<ByPriority>,
}

impl Config {
    /// Upstream's checks (`validation.ValidateKubeletConfiguration`), each message naming its
    /// field; plus a negative `shutdownGracePeriodSeconds`, which upstream lets through.
    pub fn validate(&self) -> Result<(), String> {
        let mut errs = Vec::new();
        let (total, critical) = (self.grace_period, self.critical_pods);
        if critical > total {
            errs.push(format!(
                "shutdownGracePeriodCriticalPods {} must be <= shutdownGracePeriod {}",
                format_duration(critical),
                format_duration(total)
            ));
        }
        if total > Duration::ZERO && total < Duration::from_secs(1) {
            errs.push(format!(
                "shutdownGracePeriod {} must be either zero or otherwise >= 1 sec",
                format_duration(total)
            ));
        }
        if critical > Duration::ZERO && critical < Duration::from_secs(1) {
            errs.push(format!(
                "shutdownGracePeriodCriticalPods {} must be either zero or otherwise >= 1 sec",
                format_duration(critical)
            ));
        }
        if !self.by_priority.is_empty() && (total > Duration::ZERO || critical > Duration::ZERO) {
            errs.push(
                "Cannot specify both shutdownGracePeriodByPodPriority and shutdownGracePeriod \
                 at the same time"
                    .into(),
            );
        }
        for (i, p) in self.by_priority.iter().enumerate() {
            if p.shutdown_grace_period_seconds < 0 {
                errs.push(format!(
                    "shutdownGracePeriodByPodPriority[{i}].shutdownGracePeriodSeconds {} must \
                     be >= 0",
                    p.shutdown_grace_period_seconds
                ));
            }
        }
        if errs.is_empty() {
            Ok(())
        } else {
            Err(errs.join("; "))
        }
    }

    /// The groups, lowest priority first: `shutdownGracePeriodByPodPriority` as given, or the
    /// two periods turned into two groups (upstream's `migrateConfig`). Empty: the feature is
    /// off.
    pub fn groups(&self) -> Vec<ByPriority> {
        let mut g = if self.by_priority.is_empty() {
            migrate_config(self.grace_period, self.critical_pods)
        } else {
            self.by_priority.clone()
        };
        g.sort_by_key(|p| p.priority);
        g
    }

    pub fn enabled(&self) -> bool {
        !self.groups().is_empty()
    }

    /// The whole delay the groups ask of logind (their shares summed).
    pub fn period_requested(&self) -> Duration {
        let secs: i64 = self
            .groups()
            .iter()
            .map(|g| g.shutdown_grace_period_seconds.max(0))
            .fold(0i64, i64::saturating_add);
        Duration::from_secs(u64::try_from(secs).unwrap_or(0))
    }

    /// One line for the log and `picolet check`: each group's priority and share.
    pub fn describe(&self) -> String {
        let g = self.groups();
        if g.is_empty() {
            return "off (shutdownGracePeriod is 0)".into();
        }
        let parts: Vec<String> = g
            .iter()
            .map(|p| {
                let who = if p.priority >= SYSTEM_CRITICAL_PRIORITY {
                    "critical pods".to_owned()
                } else if p.priority == DEFAULT_PRIORITY && self.by_priority.is_empty() {
                    "regular pods".to_owned()
                } else {
                    format!("priority >= {}", p.priority)
                };
                format!("{who} {}s", p.shutdown_grace_period_seconds)
            })
            .collect();
        format!(
            "{} in all: {}",
            format_duration(self.period_requested()),
            parts.join(", then ")
        )
    }
}

/// The two periods as two groups: regular pods (priority 0 and up) get the total less the
/// critical part, critical pods (2000000000 and up) the critical part. Nothing when the total
/// is zero or smaller than the critical part.
pub fn migrate_config(total: Duration, critical: Duration) -> Vec<ByPriority> {
    if total.is_zero() || critical > total {
        return Vec::new();
    }
    let secs = |d: Duration| i64::try_from(d.as_secs()).unwrap_or(i64::MAX);
    vec![
        ByPriority {
            priority: DEFAULT_PRIORITY,
            shutdown_grace_period_seconds: secs(total - critical),
        },
        ByPriority {
            priority: SYSTEM_CRITICAL_PRIORITY,
            shutdown_grace_period_seconds: secs(critical),
        },
    ]
}

/// What the shutdown needs of a running pod.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PodInfo {
    pub uid: String,
    pub namespace: String,
    pub name: String,
    pub priority: i32,
    /// `terminationGracePeriodSeconds`, when the spec gives it.
    pub grace: Option<i64>,
}

impl PodInfo {
    pub fn of(pod: &Pod) -> PodInfo {
        PodInfo {
            uid: pod.metadata.uid.clone(),
            namespace: pod.metadata.namespace.clone(),
            name: pod.metadata.name.clone(),
            priority: pod_priority(pod),
            grace: pod.spec.termination_grace_period_seconds,
        }
    }
}

/// A pod's priority: `spec.priority` as the apiserver resolved it; for a pod no apiserver saw
/// (a static pod), the priority of its built-in critical class, else 0.
pub fn pod_priority(pod: &Pod) -> i32 {
    if let Some(p) = pod.spec.priority {
        return p;
    }
    match pod.spec.priority_class_name.as_deref() {
        Some("system-node-critical") => NODE_CRITICAL_PRIORITY,
        Some("system-cluster-critical") => SYSTEM_CRITICAL_PRIORITY,
        _ => DEFAULT_PRIORITY,
    }
}

/// One group of the shutdown: its share and its pods.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Group {
    pub priority: i32,
    pub seconds: i64,
    pub pods: Vec<PodInfo>,
}

/// The pods sorted into the groups (upstream's `groupByPriority`): each pod goes to the group
/// of the highest priority not above its own; pods below the lowest go to the lowest, pods
/// above the highest to the highest. Groups keep the order of `groups` (lowest first).
pub fn group_by_priority(groups: &[ByPriority], pods: Vec<PodInfo>) -> Vec<Group> {
    let mut out: Vec<Group> = groups
        .iter()
        .map(|g| Group {
            priority: g.priority,
            seconds: g.shutdown_grace_period_seconds,
            pods: Vec::new(),
        })
        .collect();
    if out.is_empty() {
        return out;
    }
    for pod in pods {
        let i = out
            .iter()
            .rposition(|g| g.priority <= pod.priority)
            .unwrap_or(0);
        out[i].pods.push(pod);
    }
    out
}

/// The grace period a pod of a group is stopped with: the group's share, or the pod's own
/// `terminationGracePeriodSeconds` when that is shorter.
pub fn pod_grace(group_seconds: i64, pod: Option<i64>) -> i64 {
    match pod {
        Some(p) if p <= group_seconds => p.max(0),
        _ => group_seconds.max(0),
    }
}

/// The state file's content, upstream's JSON: `{"startTime": ..., "endTime": ...}`, RFC 3339
/// with nanoseconds, Go's zero time for "not yet".
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct State {
    #[serde(rename = "startTime")]
    pub start_time: String,
    #[serde(rename = "endTime")]
    pub end_time: String,
}

/// Go's zero `time.Time` as JSON writes it.
pub const ZERO_TIME: &str = "0001-01-01T00:00:00Z";

/// Go's RFC3339Nano in UTC: fraction without trailing zeros, none when zero.
pub fn rfc3339_nano(unix_nanos: i64) -> String {
    let base = crate::api::time::rfc3339(unix_nanos);
    let frac = unix_nanos.rem_euclid(1_000_000_000);
    if frac == 0 {
        return base;
    }
    let f = format!("{frac:09}");
    format!("{}.{}Z", &base[..base.len() - 1], f.trim_end_matches('0'))
}

pub fn state_path(root_dir: &Path) -> PathBuf {
    root_dir.join(STATE_FILE)
}

/// Why a file of the shutdown manager (its state file, logind's drop-in) was not read or
/// written; each names the file.
#[derive(Debug)]
pub enum FileError {
    Io {
        path: PathBuf,
        source: std::io::Error,
    },
    Json {
        path: PathBuf,
        source: serde_json::Error,
    },
    /// A time field of the state file that is not an RFC 3339 time.
    Time {
        path: PathBuf,
        field: &'static str,
        value: String,
    },
}

impl FileError {
    /// A failed read or write of `path`.
    pub fn io(path: &Path) -> impl FnOnce(std::io::Error) -> FileError + '_ {
        move |source| FileError::Io {
            path: path.to_owned(),
            source,
        }
    }

    fn json(path: &Path) -> impl FnOnce(serde_json::Error) -> FileError + '_ {
        move |source| FileError::Json {
            path: path.to_owned(),
            source,
        }
    }
}

impl std::fmt::Display for FileError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            FileError::Io { path, source } => write!(f, "{}: {source}", path.display()),
            FileError::Json { path, source } => write!(f, "{}: {source}", path.display()),
            FileError::Time { path, field, value } => write!(
                f,
                "{}: {field}: {value:?} is not an RFC 3339 time",
                path.display()
            ),
        }
    }
}

impl std::error::Error for FileError {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        match self {
            FileError::Io { source, .. } => Some(source),
            FileError::Json { source, .. } => Some(source),
            FileError::Time { .. } => None,
        }
    }
}

/// Writes the state file atomically (a power cut leaves the old one or the new one).
pub fn store_state(root_dir: &Path, s: &State) -> Result<(), FileError> {
    let path = state_path(root_dir);
    let bytes = serde_json::to_vec(s).map_err(FileError::json(&path))?;
    crate::atomic_file::write(&path, &bytes).map_err(FileError::io(&path))
}

/// Reads the state file: `None` when there is none; an error names the file and the field.
pub fn load_state(root_dir: &Path) -> Result<Option<State>, FileError> {
    let path = state_path(root_dir);
    let bytes = match std::fs::read(&path) {
        Ok(b) => b,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(None),
        Err(e) => return Err(FileError::io(&path)(e)),
    };
    let s: State = serde_json::from_slice(&bytes).map_err(FileError::json(&path))?;
    for (field, v) in [("startTime", &s.start_time), ("endTime", &s.end_time)] {
        if v != ZERO_TIME && crate::logs::format::parse_time(v.as_bytes()).is_none() {
            return Err(FileError::Time {
                path,
                field,
                value: v.clone(),
            });
        }
    }
    Ok(Some(s))
}

/// What the state file says of the last shutdown, for the start line.
pub fn describe_state(s: &State) -> String {
    if s.end_time == ZERO_TIME {
        format!(
            "the last graceful shutdown started at {} and did not finish",
            s.start_time
        )
    } else {
        format!(
            "the last graceful shutdown started at {} and ended at {}: pods running then were \
             stopped by it",
            s.start_time, s.end_time
        )
    }
}

/// What the shutdown sequence does to the node: the seam between this module and the loop.
pub trait Node {
    /// Shutting down (admission refuses new pods, the node is NotReady) or not any more.
    fn set_shutting_down(&self, on: bool);
    /// The pods that still run or may (admitted, not stopping, not finished).
    fn active_pods(&self) -> Vec<PodInfo>;
    /// Stops a pod for good within `grace` seconds, its status Failed with [`REASON`],
    /// [`MESSAGE`] and a `DisruptionTarget` condition. False when it was already stopping.
    fn kill(&self, uid: &str, grace: i64) -> bool;
    /// The pod's termination has ended (nothing of it runs).
    fn stopped(&self, uid: &str) -> bool;
    /// Every final status has reached the apiserver (true when there is none to send).
    fn statuses_posted(&self) -> bool;
}

/// How often the sequence looks whether a group's pods have stopped.
pub const POLL: Duration = Duration::from_millis(100);

/// What the sequence did, for the log and the tests.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct Outcome {
    /// Per group (in order, empty groups left out): its priority, its pods' names and whether
    /// they all stopped within the share.
    pub groups: Vec<(i32, Vec<String>, bool)>,
    /// The final statuses reached the apiserver before the lock was released.
    pub statuses_posted: bool,
}

/// Stops the pods group by group: every pod of a group at once with its grace period, then
/// waits until they have all stopped or the group's share has passed, then the next group.
pub async fn kill_pods(groups: &[ByPriority], node: &dyn Node) -> Vec<(i32, Vec<String>, bool)> {
    let mut done = Vec::new();
    for g in group_by_priority(groups, node.active_pods()) {
        if g.pods.is_empty() {
            continue;
        }
        let deadline = rt::now() + Duration::from_secs(u64::try_from(g.seconds).unwrap_or(0));
        for p in &g.pods {
            let grace = pod_grace(g.seconds, p.grace);
            log::info!(
                "shutdown: stopping pod {}/{} (priority {}) with grace period {grace}s",
                p.namespace,
                p.name,
                p.priority
            );
            node.kill(&p.uid, grace);
        }
        let all_stopped = loop {
            if g.pods.iter().all(|p| node.stopped(&p.uid)) {
                break true;
            }
            if rt::now() >= deadline {
                break false;
            }
            let next = (rt::now() + POLL).min(deadline);
            rt::sleep_until(next).await;
        };
        if !all_stopped {
            log::warn!(
                "shutdown: pods of priority {} and up still stopping after their {}s",
                g.priority,
                g.seconds
            );
        }
        done.push((
            g.priority,
            g.pods.iter().map(|p| p.name.clone()).collect(),
            all_stopped,
        ));
    }
    done
}

/// The whole sequence on `PrepareForShutdown(true)`, up to the point where the lock may be
/// released: NotReady and no admission, the state file's start, the groups, the final statuses
/// (waited for within what is left of the whole period), the state file's end.
pub async fn process_shutdown(cfg: &Config, root_dir: &Path, node: &dyn Node) -> Outcome {
    let start = rt::now();
    let whole = cfg.period_requested();
    node.set_shutting_down(true);
    let started = rfc3339_nano(rt::now_nanos());
    let state = State {
        start_time: started.clone(),
        end_time: ZERO_TIME.into(),
    };
    if let Err(e) = store_state(root_dir, &state) {
        log::warn!("shutdown: writing the state file: {e}");
    }
    let groups = kill_pods(&cfg.groups(), node).await;
    let deadline = start + whole;
    let statuses_posted = loop {
        if node.statuses_posted() {
            break true;
        }
        if rt::now() >= deadline {
            break false;
        }
        rt::sleep_until((rt::now() + POLL).min(deadline)).await;
    };
    if !statuses_posted {
        log::warn!("shutdown: not every final pod status reached the apiserver in time");
    }
    let end = State {
        start_time: started,
        end_time: rfc3339_nano(rt::now_nanos()),
    };
    if let Err(e) = store_state(root_dir, &end) {
        log::warn!("shutdown: writing the state file: {e}");
    }
    Outcome {
        groups,
        statuses_posted,
    }
}

#[cfg(test)]
mod tests;
