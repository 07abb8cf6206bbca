//! One probe worker: the kubelet's `doProbe` as plain data ([`WorkerState`]: what to do on a
//! tick, how a result counts against the thresholds) and the task that runs it every period.

use std::rc::Rc;
use std::time::Duration;

use crate::api::{Container, Pod};
use crate::kubecontainer::ContainerState;
use crate::rt;

use super::{Ctx, Kind, Outcome, ProbeResult, Timing};

/// Attempts of a handler that errors (not fails) before the tick gives up.
const MAX_RETRIES: usize = 3;

/// The newest instance of the probed container, as the status cache shows it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ContainerView {
    pub id: Box<str>,
    pub state: ContainerState,
    /// Unix nanoseconds; 0 while unknown.
    pub started_at: i64,
    pub exit_code: i32,
    /// The pod's IP (the node's for host-network pods); "" while unknown.
    pub pod_ip: String,
}

/// What a tick does after [`WorkerState::plan`].
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Action {
    /// Nothing to probe this tick.
    Wait,
    /// Run the handler against this container instance.
    Probe,
    /// The container will never run again: the worker ends.
    Stop,
}

/// Results to record before the action.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Plan {
    /// The result of a container instance this worker no longer follows, to forget.
    pub forget: Option<Box<str>>,
    /// A result to record for the current instance.
    pub set: Option<ProbeResult>,
}

/// A worker's memory between ticks.
#[derive(Debug, Clone)]
pub struct WorkerState {
    pub kind: Kind,
    pub timing: Timing,
    /// The container instance being probed.
    pub container_id: Option<Box<str>>,
    last: ProbeResult,
    run: u32,
    /// A liveness failure or a decided startup probe: nothing more until a new instance.
    on_hold: bool,
}

impl WorkerState {
    pub fn new(kind: Kind, timing: Timing) -> Self {
        WorkerState {
            kind,
            timing,
            container_id: None,
            last: ProbeResult::Unknown,
            run: 0,
            on_hold: false,
        }
    }

    /// Decides a tick from the container's newest instance, whether it has started (its
    /// startup probe passed), whether it would be restarted after exiting, and the wall time.
    pub fn plan(
        &mut self,
        view: Option<&ContainerView>,
        started: bool,
        restarts: impl Fn(i32) -> bool,
        now_nanos: i64,
    ) -> (Plan, Action) {
        let mut plan = Plan::default();
        let Some(v) = view else {
            return (plan, Action::Wait);
        };
        if self.container_id.as_deref() != Some(&*v.id) {
            plan.forget = self.container_id.replace(v.id.clone());
            plan.set = Some(self.kind.initial());
            // A new instance: probing resumes, the count starts over.
            self.on_hold = false;
            self.last = ProbeResult::Unknown;
            self.run = 0;
        }
        if self.on_hold {
            return (plan, Action::Wait);
        }
        match v.state {
            ContainerState::Running => {}
            // An instance that has exited fails, as upstream's (it is not ready, and never runs
            // again: a restart is a new instance).
            ContainerState::Exited => {
                plan.set = Some(ProbeResult::Failure);
                let will_run = restarts(v.exit_code);
                return (plan, if will_run { Action::Wait } else { Action::Stop });
            }
            // One created and not started yet (a relist between CreateContainer and
            // StartContainer), or of unknown state, may still run under this ID: a result
            // recorded now would outlive the start, and a liveness or startup Failure would have
            // the next sync kill the running instance before any probe ran.
            ContainerState::Created | ContainerState::Unknown => return (plan, Action::Wait),
        }
        let delay = i64::try_from(self.timing.initial_delay.as_nanos()).unwrap_or(i64::MAX);
        if v.started_at <= 0 || now_nanos.saturating_sub(v.started_at) < delay {
            return (plan, Action::Wait);
        }
        // Startup probes run until the container has started, the others only after.
        if started == (self.kind == Kind::Startup) {
            return (plan, Action::Wait);
        }
        (plan, Action::Probe)
    }

    /// Counts one result; returns the result to record once a threshold is reached.
    pub fn record(&mut self, r: ProbeResult) -> Option<ProbeResult> {
        if self.last == r {
            self.run = self.run.saturating_add(1);
        } else {
            self.last = r;
            self.run = 1;
        }
        let below = match r {
            ProbeResult::Failure => self.run < self.timing.failure_threshold,
            ProbeResult::Success => self.run < self.timing.success_threshold,
            ProbeResult::Unknown => false,
        };
        if below {
            return None;
        }
        if (self.kind == Kind::Liveness && r == ProbeResult::Failure) || self.kind == Kind::Startup
        {
            // The container will be restarted (or has started): stop probing this instance.
            self.on_hold = true;
            self.run = 0;
        }
        Some(r)
    }
}

/// Whether a container that exited with `code` would be started again.
fn restarts(pod: &Pod, c: &Container, code: i32) -> bool {
    crate::kuberuntime::actions::container_should_restart(pod, c, code)
}

fn find<'a>(pod: &'a Pod, name: &str) -> Option<&'a Container> {
    pod.spec
        .containers
        .iter()
        .chain(&pod.spec.init_containers)
        .find(|c| c.name == name)
}

/// The newest instance of the container, from the status cache.
fn view(ctx: &Ctx, pod: &Pod, name: &str) -> Option<ContainerView> {
    let cache = ctx.cache.borrow();
    let st = &cache.get(&pod.metadata.uid)?.status;
    let c = st.latest(name)?;
    let pod_ip = if pod.spec.host_network {
        ctx.node_ip.clone()
    } else {
        st.ip().unwrap_or_default().to_owned()
    };
    Some(ContainerView {
        id: c.id.clone(),
        state: c.state,
        started_at: c.started_at,
        exit_code: c.exit_code,
        pod_ip,
    })
}

/// Keeps a worker's totals in the context while it runs; they go with it.
struct Counted<'a> {
    ctx: &'a Ctx,
    key: super::Key,
}

impl Counted<'_> {
    fn new<'a>(ctx: &'a Ctx, pod: &Pod, name: &str, kind: Kind) -> Counted<'a> {
        let key = (pod.metadata.uid.clone(), name.to_owned(), kind);
        ctx.counts.borrow_mut().insert(
            key.clone(),
            super::ProbeCounts {
                kind,
                container: name.to_owned(),
                pod: pod.metadata.name.clone(),
                namespace: if pod.metadata.namespace.is_empty() {
                    "default".into()
                } else {
                    pod.metadata.namespace.clone()
                },
                pod_uid: pod.metadata.uid.clone(),
                results: [0; 3],
                duration: crate::stats::prom::Histogram::new(crate::stats::prom::DEF_BUCKETS),
            },
        );
        Counted { ctx, key }
    }

    fn count(&self, r: ProbeResult, took: Duration) {
        if let Some(c) = self.ctx.counts.borrow_mut().get_mut(&self.key) {
            match r {
                ProbeResult::Success => {
                    c.results[0] += 1;
                    c.duration.observe(took.as_secs_f64());
                }
                ProbeResult::Failure => c.results[1] += 1,
                ProbeResult::Unknown => c.results[2] += 1,
            }
        }
    }
}

impl Drop for Counted<'_> {
    fn drop(&mut self) {
        self.ctx.counts.borrow_mut().remove(&self.key);
        if self.key.2 == Kind::Readiness {
            let key = (self.key.0.clone(), self.key.1.clone());
            self.ctx.wake_readiness.borrow_mut().remove(&key);
        }
    }
}

/// Until the next tick, or until the worker is woken (a readiness worker whose container's
/// startup probe just succeeded).
async fn next_tick(tick: &mut rt::Interval, wake: Option<&async_channel::Receiver<()>>) {
    match wake {
        Some(rx) => {
            futures_lite::future::or(tick.tick(), async {
                let _ = rx.recv().await;
            })
            .await
        }
        None => tick.tick().await,
    }
}

/// The worker's task: a tick at once, then one every period, until the container is gone for
/// good or the task is dropped.
pub(crate) async fn run(ctx: Rc<Ctx>, pod: Rc<Pod>, name: String, kind: Kind, jitter: Duration) {
    let Some(c) = find(&pod, &name) else { return };
    let Some(spec) = kind.spec(c) else { return };
    let uid = pod.metadata.uid.as_str();
    let counted = Counted::new(&ctx, &pod, &name, kind);
    let mut w = WorkerState::new(kind, Timing::of(spec));
    let wake = (kind == Kind::Readiness).then(|| {
        let (tx, rx) = async_channel::bounded(1);
        ctx.wake_readiness
            .borrow_mut()
            .insert((uid.to_owned(), name.clone()), tx);
        rx
    });
    if !jitter.is_zero() {
        rt::sleep(jitter).await;
    }
    let mut tick = rt::interval(w.timing.period);
    loop {
        let v = view(&ctx, &pod, &name);
        let started = v
            .as_ref()
            .is_some_and(|v| v.state == ContainerState::Running && ctx.results.started(c, &v.id));
        let (plan, action) = w.plan(
            v.as_ref(),
            started,
            |code| restarts(&pod, c, code),
            rt::now_nanos(),
        );
        if let Some(old) = plan.forget {
            ctx.results.remove(&old, kind);
        }
        let (Some(v), Some(id)) = (v, w.container_id.clone()) else {
            next_tick(&mut tick, wake.as_ref()).await;
            continue;
        };
        if let Some(r) = plan.set {
            ctx.set(uid, &name, &id, kind, r);
        }
        match action {
            Action::Stop => {
                log::debug!(
                    "{} probe of {name} in pod {}: the container will not run again",
                    kind.name(),
                    pod.metadata.name
                );
                return;
            }
            Action::Wait => {}
            Action::Probe => {
                let mut outcome = Outcome::Error(String::new());
                let t0 = rt::now();
                for _ in 0..MAX_RETRIES {
                    // Boxed: a probe's state machine (an HTTP or gRPC client) is some 11 KiB, and
                    // inline it would size the task for the container's whole life.
                    outcome = Box::pin(ctx.run(spec, c, &id, &v.pod_ip)).await;
                    if !matches!(outcome, Outcome::Error(_)) {
                        break;
                    }
                }
                let mut kind_name = kind.name().to_owned();
                if let Some(f) = kind_name.get_mut(..1) {
                    f.make_ascii_uppercase();
                }
                let result = match outcome {
                    Outcome::Success(_) => Some(ProbeResult::Success),
                    Outcome::Warning(out) => {
                        crate::events::record(
                            &crate::events::ObjectRef::container(&pod, &name),
                            crate::events::Type::Warning,
                            "ProbeWarning",
                            &format!("{kind_name} probe warning: {}", out.trim_end()),
                        );
                        Some(ProbeResult::Success)
                    }
                    Outcome::Failure(out) => {
                        crate::events::record(
                            &crate::events::ObjectRef::container(&pod, &name),
                            crate::events::Type::Warning,
                            "Unhealthy",
                            &format!("{kind_name} probe failed: {}", out.trim_end()),
                        );
                        Some(ProbeResult::Failure)
                    }
                    Outcome::Error(e) => {
                        log::info!(
                            "{} probe of container {name} of pod {} errored: {e}",
                            kind.name(),
                            pod.metadata.name
                        );
                        None
                    }
                };
                if let Some(r) = result {
                    counted.count(r, rt::now().saturating_duration_since(t0));
                }
                if let Some(r) = result.and_then(|r| w.record(r)) {
                    ctx.set(uid, &name, &id, kind, r);
                }
            }
        }
        next_tick(&mut tick, wake.as_ref()).await;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn timing(delay: u64, success: u32, failure: u32) -> Timing {
        Timing {
            initial_delay: Duration::from_secs(delay),
            period: Duration::from_secs(10),
            timeout: Duration::from_secs(1),
            success_threshold: success,
            failure_threshold: failure,
        }
    }

    const S: i64 = 1_000_000_000;

    fn running(id: &str, started_at: i64) -> ContainerView {
        ContainerView {
            id: id.into(),
            state: ContainerState::Running,
            started_at,
            exit_code: 0,
            pod_ip: "10.0.0.2".into(),
        }
    }

    #[test]
    fn a_new_instance_starts_from_the_initial_result_and_waits_out_the_delay() {
        let mut w = WorkerState::new(Kind::Readiness, timing(15, 1, 3));
        let v = running("a", 100 * S);
        let (plan, act) = w.plan(Some(&v), true, |_| true, 105 * S);
        assert_eq!(plan.set, Some(ProbeResult::Failure), "not ready at first");
        assert_eq!(act, Action::Wait, "5 s into a 15 s initial delay");
        let (plan, act) = w.plan(Some(&v), true, |_| true, 114 * S);
        assert_eq!((plan, act), (Plan::default(), Action::Wait));
        assert_eq!(w.plan(Some(&v), true, |_| true, 115 * S).1, Action::Probe);
    }

    #[test]
    fn thresholds_count_consecutive_results() {
        let mut w = WorkerState::new(Kind::Readiness, timing(0, 2, 3));
        use ProbeResult::{Failure, Success};
        assert_eq!(w.record(Success), None, "1 of 2 successes");
        assert_eq!(w.record(Failure), None, "the run starts over");
        assert_eq!(w.record(Success), None);
        assert_eq!(w.record(Success), Some(Success));
        assert_eq!(w.record(Success), Some(Success), "stays decided");
        assert_eq!(w.record(Failure), None);
        assert_eq!(w.record(Failure), None);
        assert_eq!(w.record(Failure), Some(Failure), "3rd failure in a row");
    }

    #[test]
    fn liveness_failure_holds_until_a_new_instance() {
        let mut w = WorkerState::new(Kind::Liveness, timing(0, 1, 1));
        let a = running("a", S);
        assert_eq!(
            w.plan(Some(&a), true, |_| true, 2 * S).0.set,
            Some(ProbeResult::Success)
        );
        assert_eq!(w.record(ProbeResult::Failure), Some(ProbeResult::Failure));
        assert_eq!(
            w.plan(Some(&a), true, |_| true, 3 * S).1,
            Action::Wait,
            "on hold"
        );
        let b = running("b", 4 * S);
        let (plan, act) = w.plan(Some(&b), true, |_| true, 5 * S);
        assert_eq!(plan.forget.as_deref(), Some("a"));
        assert_eq!(plan.set, Some(ProbeResult::Success));
        assert_eq!(act, Action::Probe);
    }

    #[test]
    fn startup_gates_the_others_and_stops_once_decided() {
        let v = running("a", S);
        let mut live = WorkerState::new(Kind::Liveness, timing(0, 1, 3));
        assert_eq!(live.plan(Some(&v), false, |_| true, 9 * S).1, Action::Wait);
        assert_eq!(live.plan(Some(&v), true, |_| true, 9 * S).1, Action::Probe);
        let mut startup = WorkerState::new(Kind::Startup, timing(0, 1, 3));
        let (plan, act) = startup.plan(Some(&v), false, |_| true, 9 * S);
        assert_eq!((plan.set, act), (Some(ProbeResult::Unknown), Action::Probe));
        assert_eq!(
            startup.record(ProbeResult::Success),
            Some(ProbeResult::Success)
        );
        assert_eq!(
            startup.plan(Some(&v), true, |_| true, 9 * S).1,
            Action::Wait
        );
    }

    #[test]
    fn exited_containers_fail_and_end_the_worker_when_never_restarted() {
        let mut w = WorkerState::new(Kind::Readiness, timing(0, 1, 3));
        let mut v = running("a", S);
        v.state = ContainerState::Exited;
        v.exit_code = 0;
        let (plan, act) = w.plan(Some(&v), false, |code| code != 0, 2 * S);
        assert_eq!(plan.set, Some(ProbeResult::Failure));
        assert_eq!(
            act,
            Action::Stop,
            "OnFailure after exit 0: never runs again"
        );
        v.exit_code = 1;
        assert_eq!(
            w.plan(Some(&v), false, |code| code != 0, 2 * S).1,
            Action::Wait
        );
        assert_eq!(w.plan(None, false, |_| true, 2 * S).1, Action::Wait);
    }

    #[test]
    fn a_container_not_running_yet_gets_no_failure_whatever_the_probe() {
        for kind in [Kind::Liveness, Kind::Startup, Kind::Readiness] {
            let mut w = WorkerState::new(kind, timing(5, 1, 1));
            let mut v = running("a", 0);
            v.state = ContainerState::Created;
            let (plan, act) = w.plan(Some(&v), false, |_| true, 2 * S);
            assert_eq!(
                plan.set,
                Some(kind.initial()),
                "{kind:?}: the initial result"
            );
            assert_eq!(act, Action::Wait, "{kind:?}");
            assert_eq!(
                w.plan(Some(&v), false, |_| true, 3 * S),
                (Plan::default(), Action::Wait),
                "{kind:?}: nothing recorded while it is created"
            );
            v.state = ContainerState::Unknown;
            assert_eq!(
                w.plan(Some(&v), false, |_| true, 3 * S),
                (Plan::default(), Action::Wait),
                "{kind:?}: nor while its state is unknown"
            );
        }
    }
}
