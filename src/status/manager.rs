//! The status manager: the latest API status of every pod, regenerated after each sync from the
//! runtime's view. The local API serves it, and the apiserver side publishes it: each change
//! signals [`StatusManager::changes`] (one slot, so changes made together give one signal), as
//! upstream's status manager signals its `podStatusChannel`, and the publisher sends what
//! changed at once instead of waiting for its period.

use std::cell::RefCell;
use std::collections::HashMap;

use crate::api::{Pod, PodStatus};
use crate::kubecontainer::PodRuntimeStatus;
use crate::rt;
use crate::stats::prom::{Histogram, POD_START_BUCKETS};

use super::generate;

/// The runtime name in container IDs (`containerd://<id>`).
const DEFAULT_RUNTIME_NAME: &str = "containerd";

#[derive(Debug)]
pub struct StatusManager {
    host_ip: String,
    runtime_name: RefCell<String>,
    statuses: RefCell<HashMap<String, PodStatus>>,
    /// Evicted pods' messages: their status is Failed, Evicted from now on.
    /// Pods the node stopped for good: reason and message of their Failed status.
    evictions: RefCell<HashMap<String, (String, String)>>,
    probes: RefCell<crate::prober::Results>,
    /// The pods' allocations (the runtime manager's): resources and resize conditions.
    allocation: RefCell<Option<crate::allocation::Manager>>,
    /// When each pod not yet running was first given a status.
    first_seen: RefCell<HashMap<String, std::time::Instant>>,
    /// Seconds from a pod's first status to its first Running (`kubelet_pod_start_duration_seconds`).
    pub pod_start: RefCell<Histogram>,
    /// Signalled when a status changed (one slot: signals coalesce until taken).
    changed: (async_channel::Sender<()>, async_channel::Receiver<()>),
}

impl StatusManager {
    pub fn new(host_ip: &str) -> Self {
        StatusManager {
            host_ip: host_ip.to_owned(),
            runtime_name: RefCell::new(DEFAULT_RUNTIME_NAME.to_owned()),
            statuses: RefCell::default(),
            evictions: RefCell::default(),
            probes: RefCell::default(),
            allocation: RefCell::default(),
            first_seen: RefCell::default(),
            pod_start: RefCell::new(Histogram::new(POD_START_BUCKETS)),
            changed: async_channel::bounded(1),
        }
    }

    /// Receives a signal after statuses changed: one for every change made since the last one
    /// was taken, however many.
    pub fn changes(&self) -> async_channel::Receiver<()> {
        self.changed.1.clone()
    }

    /// Signals a change to whoever publishes the statuses.
    pub fn notify(&self) {
        // Full: a signal is already waiting, which says the same.
        let _ = self.changed.0.try_send(());
    }

    /// Stores a pod's status, signalling when it differs from the one held.
    fn store(&self, uid: &str, new: PodStatus) {
        let differs = self.statuses.borrow().get(uid) != Some(&new);
        self.statuses.borrow_mut().insert(uid.to_owned(), new);
        if differs {
            self.notify();
        }
    }

    /// The probe results that decide `started` and `ready` (the prober's).
    pub fn set_probe_results(&self, r: crate::prober::Results) {
        *self.probes.borrow_mut() = r;
    }

    /// The allocations the status reports (the runtime manager's).
    pub fn set_allocation(&self, a: crate::allocation::Manager) {
        *self.allocation.borrow_mut() = Some(a);
    }

    /// Sets the runtime name reported by the runtime's Version call.
    pub fn set_runtime_name(&self, name: &str) {
        if !name.is_empty() {
            *self.runtime_name.borrow_mut() = name.to_owned();
        }
    }

    /// Regenerates a pod's status from what the runtime reports and, for containers that are
    /// not running, why they wait (reason, message), if a sync recorded it.
    pub fn update(
        &self,
        pod: &Pod,
        rt_status: &PodRuntimeStatus,
        waiting: impl Fn(&str) -> Option<(String, String)>,
    ) {
        let uid = pod.metadata.uid.as_str();
        let running = |s: Option<&PodStatus>| s.and_then(|s| s.phase.as_deref()) == Some("Running");
        let now = rt::now();
        let (new, was_running) = {
            let old = self.statuses.borrow();
            if old.get(uid).is_none() {
                self.first_seen.borrow_mut().insert(uid.to_owned(), now);
            }
            let new = generate::generate(
                pod,
                rt_status,
                &waiting,
                &self.probes.borrow(),
                old.get(uid),
                &self.host_ip,
                &self.runtime_name.borrow(),
                rt::now_nanos(),
            );
            (new, running(old.get(uid)))
        };
        let mut new = new;
        if let Some(a) = self.allocation.borrow().as_ref() {
            let r = generate::Resources {
                allocation: a.get(uid),
                pending: a.pending(uid),
                error: a.error(uid),
            };
            let prev = self.statuses.borrow().get(uid).cloned().unwrap_or_default();
            generate::set_resources(&mut new, pod, &r, &prev, rt::now_nanos());
        }
        let new = match self.evictions.borrow().get(uid) {
            Some((r, m)) => generate::failed_by_kubelet(&new, r, m, rt::now_nanos(), false),
            None => new,
        };
        if !was_running
            && running(Some(&new))
            && let Some(t0) = self.first_seen.borrow_mut().remove(uid)
        {
            let secs = now.saturating_duration_since(t0).as_secs_f64();
            self.pod_start.borrow_mut().observe(secs);
        }
        self.store(uid, new);
    }

    /// Marks a pod admission refused: Failed, with the reason and `Pod was rejected: <message>`,
    /// as upstream. It never runs, so nothing regenerates this status.
    pub fn reject(&self, pod: &Pod, reason: &str, message: &str) {
        let status = PodStatus {
            phase: Some("Failed".into()),
            reason: Some(reason.to_owned()),
            message: Some(format!("Pod was rejected: {message}")),
            qos_class: Some(crate::qos::qos_class(pod).as_str().to_owned()),
            ..Default::default()
        };
        self.first_seen.borrow_mut().remove(&pod.metadata.uid);
        self.store(&pod.metadata.uid, status);
    }

    /// Marks a pod evicted: Failed, reason Evicted, with the eviction manager's message.
    pub fn evict(&self, pod: &Pod, message: &str) {
        self.fail(pod, generate::EVICTED, message);
    }

    /// Marks a pod the node stops for good (evicted, past its active deadline): Failed, with
    /// the reason and message.
    pub fn fail(&self, pod: &Pod, reason: &str, message: &str) {
        let uid = pod.metadata.uid.as_str();
        self.evictions
            .borrow_mut()
            .insert(uid.to_owned(), (reason.to_owned(), message.to_owned()));
        let prev = self.get(uid).unwrap_or_else(|| pod.status.clone());
        let new = generate::failed_by_kubelet(&prev, reason, message, rt::now_nanos(), false);
        self.store(uid, new);
    }

    pub fn is_evicted(&self, uid: &str) -> bool {
        self.evictions.borrow().contains_key(uid)
    }

    /// An evicted pod's containers were stopped: they show terminated.
    pub fn eviction_done(&self, uid: &str, now: i64) {
        let Some((r, m)) = self.evictions.borrow().get(uid).cloned() else {
            return;
        };
        let Some(prev) = self.get(uid) else {
            return;
        };
        let new = generate::failed_by_kubelet(&prev, &r, &m, now, true);
        self.store(uid, new);
    }

    /// A deleted pod's containers were stopped: each still shown running or waiting shows
    /// terminated, with the exit code and times the runtime gives the stopped instance (`rt`,
    /// looked at before removal), or, when it has none, killed (137) at `now`; the pod is then
    /// terminal (Succeeded when every app container exited 0, else Failed) and not ready.
    pub fn stopped(&self, uid: &str, rt: &PodRuntimeStatus, now: i64) {
        let Some(mut status) = self.get(uid) else {
            return;
        };
        let s = &mut status;
        generate::terminate_unfinished(s, |c, started| {
            let id = c
                .container_id
                .as_deref()
                .and_then(|i| i.split_once("://"))
                .map(|(_, i)| i);
            let exited = rt.containers.iter().find(|x| {
                x.state == crate::kubecontainer::ContainerState::Exited
                    && (Some(&*x.id) == id || (id.is_none() && *x.name == *c.name))
            });
            match exited {
                Some(x) => crate::api::ContainerStateTerminated {
                    exit_code: x.exit_code,
                    reason: Some(
                        if x.exit_code == 0 {
                            "Completed"
                        } else {
                            "Error"
                        }
                        .into(),
                    ),
                    started_at: (x.started_at > 0)
                        .then(|| crate::api::time::rfc3339(x.started_at))
                        .or(started),
                    finished_at: Some(crate::api::time::rfc3339(if x.finished_at > 0 {
                        x.finished_at
                    } else {
                        now
                    })),
                    container_id: c.container_id.clone(),
                    ..Default::default()
                },
                None => crate::api::ContainerStateTerminated {
                    exit_code: 137,
                    reason: Some("Error".into()),
                    started_at: started,
                    finished_at: Some(crate::api::time::rfc3339(now)),
                    container_id: c.container_id.clone(),
                    ..Default::default()
                },
            }
        });
        generate::terminal_after_deletion(s, now);
        self.store(uid, status);
    }

    /// Takes a status from elsewhere (the apiserver's) as the pod's, unless it has one.
    pub fn seed(&self, uid: &str, status: &PodStatus) {
        self.statuses
            .borrow_mut()
            .entry(uid.to_owned())
            .or_insert_with(|| status.clone());
    }

    /// The pod's status is Succeeded or Failed.
    pub fn is_finished(&self, uid: &str) -> bool {
        self.statuses
            .borrow()
            .get(uid)
            .is_some_and(|s| matches!(s.phase.as_deref(), Some("Succeeded" | "Failed")))
    }

    pub fn get(&self, uid: &str) -> Option<PodStatus> {
        self.statuses.borrow().get(uid).cloned()
    }

    pub fn remove(&self, uid: &str) {
        self.evictions.borrow_mut().remove(uid);
        self.statuses.borrow_mut().remove(uid);
        self.first_seen.borrow_mut().remove(uid);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::api::Container;
    use crate::kubecontainer::{ContainerState, ContainerStatus, SandboxState, SandboxStatus};

    #[test]
    fn pod_start_duration_from_first_status_to_running_once() {
        let clock = rt::FakeClock::install();
        let mut pod = Pod::default();
        pod.metadata.uid = "u1".into();
        pod.metadata.name = "web".into();
        pod.spec.containers = vec![Container {
            name: "app".into(),
            image: "img".into(),
            ..Default::default()
        }];
        let m = StatusManager::new("10.0.0.1");
        let pending = PodRuntimeStatus {
            uid: "u1".into(),
            ..Default::default()
        };
        m.update(&pod, &pending, |_| None);
        let mut running = pending.clone();
        running.sandboxes = vec![SandboxStatus {
            id: "sb".into(),
            attempt: 0,
            state: SandboxState::Ready,
            created_at: 1,
            ip: None,
            host_network: false,
        }];
        running.containers = vec![ContainerStatus {
            id: "c".into(),
            sandbox_id: "sb".into(),
            name: "app".into(),
            state: ContainerState::Running,
            created_at: 1,
            started_at: 2,
            finished_at: 0,
            exit_code: 0,
            image: "img".into(),
            image_ref: "ref".into(),
            reason: "".into(),
            message: "".into(),
            hash: 0,
            restart_count: 0,
        }];
        clock.advance(std::time::Duration::from_secs(3));
        m.update(&pod, &running, |_| None);
        assert_eq!(m.get("u1").unwrap().phase.as_deref(), Some("Running"));
        clock.advance(std::time::Duration::from_secs(3));
        m.update(&pod, &running, |_| None);
        let h = m.pod_start.borrow();
        assert_eq!(h.count(), 1, "observed once");
        assert!((h.sum() - 3.0).abs() < 1e-9, "{}", h.sum());
    }

    #[test]
    fn changes_signal_once_together_and_an_unchanged_status_does_not_signal() {
        let _clock = rt::FakeClock::install();
        let m = StatusManager::new("10.0.0.1");
        let changes = m.changes();
        let pods: Vec<Pod> = ["u1", "u2", "u3"]
            .iter()
            .map(|u| {
                let mut p = Pod::default();
                p.metadata.uid = (*u).into();
                p.metadata.name = format!("web-{u}");
                p.spec.containers = vec![Container {
                    name: "app".into(),
                    image: "img".into(),
                    ..Default::default()
                }];
                p
            })
            .collect();
        let empty = |uid: &str| PodRuntimeStatus {
            uid: uid.into(),
            ..Default::default()
        };
        assert!(changes.try_recv().is_err(), "nothing yet");
        // Three pods given their first status together: one signal for the three.
        for p in &pods {
            m.update(p, &empty(&p.metadata.uid), |_| None);
        }
        assert!(changes.try_recv().is_ok());
        assert!(changes.try_recv().is_err(), "coalesced");
        // The same status again: no signal.
        for p in &pods {
            m.update(p, &empty(&p.metadata.uid), |_| None);
        }
        assert!(changes.try_recv().is_err(), "unchanged, unsignalled");
        // A waiting reason appears: a change.
        m.update(&pods[1], &empty("u2"), |_| {
            Some(("ErrImagePull".into(), "no such image".into()))
        });
        assert!(changes.try_recv().is_ok());
        assert_eq!(
            m.get("u2").unwrap().container_statuses[0]
                .state
                .waiting
                .as_ref()
                .and_then(|w| w.reason.as_deref()),
            Some("ErrImagePull")
        );
        // Failed by the node, rejected: changes too; failing it twice the same way is not.
        m.fail(&pods[0], "Evicted", "low on memory");
        assert!(changes.try_recv().is_ok());
        m.fail(&pods[0], "Evicted", "low on memory");
        assert!(changes.try_recv().is_err());
        m.reject(&pods[2], "OutOfcpu", "no room");
        assert!(changes.try_recv().is_ok());
    }

    #[test]
    fn a_deleted_pods_stopped_containers_show_terminated_with_the_runtimes_exit() {
        let _clock = rt::FakeClock::install();
        let mut pod = Pod::default();
        pod.metadata.uid = "u1".into();
        pod.metadata.name = "web".into();
        pod.spec.containers = ["app", "gone"]
            .iter()
            .map(|n| Container {
                name: (*n).into(),
                image: "img".into(),
                ..Default::default()
            })
            .collect();
        let m = StatusManager::new("10.0.0.1");
        let c = |id: &str, name: &str, state, finished_at, exit_code| ContainerStatus {
            id: id.into(),
            sandbox_id: "sb".into(),
            name: name.into(),
            state,
            created_at: 1,
            started_at: 2_000_000_000,
            finished_at,
            exit_code,
            image: "img".into(),
            image_ref: "ref".into(),
            reason: "".into(),
            message: "".into(),
            hash: 0,
            restart_count: 0,
        };
        let mut running = PodRuntimeStatus {
            uid: "u1".into(),
            ..Default::default()
        };
        running.containers = vec![
            c("c1", "app", ContainerState::Running, 0, 0),
            c("c2", "gone", ContainerState::Running, 0, 0),
        ];
        m.update(&pod, &running, |_| None);
        let before = m.get("u1").unwrap();
        assert!(
            before
                .container_statuses
                .iter()
                .all(|c| c.state.running.is_some())
        );
        // Stopped: "app" exited 0 at t=9 s; "gone" is no longer in the runtime.
        let stopped = PodRuntimeStatus {
            uid: "u1".into(),
            containers: vec![c("c1", "app", ContainerState::Exited, 9_000_000_000, 0)],
            ..Default::default()
        };
        m.stopped("u1", &stopped, 12_000_000_000);
        let s = m.get("u1").unwrap();
        let by = |n: &str| s.container_statuses.iter().find(|c| c.name == n).unwrap();
        let app = by("app").state.terminated.clone().expect("app terminated");
        assert_eq!(app.exit_code, 0);
        assert_eq!(app.reason.as_deref(), Some("Completed"));
        assert_eq!(app.finished_at.as_deref(), Some("1970-01-01T00:00:09Z"));
        assert_eq!(app.started_at.as_deref(), Some("1970-01-01T00:00:02Z"));
        assert!(by("app").state.running.is_none() && !by("app").ready);
        let gone = by("gone")
            .state
            .terminated
            .clone()
            .expect("gone terminated");
        assert_eq!(gone.exit_code, 137);
        assert_eq!(gone.reason.as_deref(), Some("Error"));
        assert_eq!(gone.finished_at.as_deref(), Some("1970-01-01T00:00:12Z"));
        // One container killed: the deleted pod is Failed, and not ready.
        assert_eq!(s.phase.as_deref(), Some("Failed"));
        let cond = |t: &str| s.conditions.iter().find(|c| c.type_ == t).unwrap();
        for t in ["Ready", "ContainersReady"] {
            assert_eq!(cond(t).status, "False", "{t}");
            assert_eq!(cond(t).reason.as_deref(), Some("PodFailed"), "{t}");
        }
        // Once more changes nothing already terminated.
        m.stopped("u1", &PodRuntimeStatus::default(), 20_000_000_000);
        assert_eq!(m.get("u1").unwrap(), s);
    }
}
