//! Builds a pod's API status from its spec, what the runtime reports and the previous status,
//! as the kubelet's `generateAPIPodStatus` does (pkg/kubelet/kubelet_pods.go), with the
//! conditions of pkg/kubelet/status/generate.go and the status manager's transition times.
//!
//! Pure: no I/O and no clock (`now` is passed in), so the same inputs give the same status.
//! Probe results decide `started` (startup probe) and `ready` (readiness probe) of running
//! containers, as the prober manager's UpdatePodStatus does; a container without such a probe
//! is started, and ready, while it runs. Sidecars (init containers with `restartPolicy:
//! Always`) count towards ContainersReady and, once started, towards Initialized.

use std::cmp::Reverse;

use crate::api::time::rfc3339;
use crate::api::{
    Container, ContainerState, ContainerStateRunning, ContainerStateTerminated,
    ContainerStateWaiting, ContainerStatus, HostIp, Pod, PodCondition, PodIp, PodStatus,
};
use crate::kubecontainer::{self as kc, PodRuntimeStatus, SandboxState};
use crate::kuberuntime::actions;
use crate::prober::Results;

pub const PENDING: &str = "Pending";
pub const RUNNING: &str = "Running";
pub const SUCCEEDED: &str = "Succeeded";
pub const FAILED: &str = "Failed";

pub const POD_READY_TO_START_CONTAINERS: &str = "PodReadyToStartContainers";
pub const INITIALIZED: &str = "Initialized";
pub const READY: &str = "Ready";
pub const CONTAINERS_READY: &str = "ContainersReady";
pub const POD_SCHEDULED: &str = "PodScheduled";
/// The condition types this module owns; any other condition in the pod's status is kept.
const KUBELET_CONDITIONS: [&str; 7] = [
    POD_READY_TO_START_CONTAINERS,
    INITIALIZED,
    READY,
    CONTAINERS_READY,
    POD_SCHEDULED,
    POD_RESIZE_PENDING,
    POD_RESIZE_IN_PROGRESS,
];
/// A resize the node has not allocated yet (reason `Deferred` or `Infeasible`).
pub const POD_RESIZE_PENDING: &str = "PodResizePending";
/// A resize allocated and not yet applied to every running container.
pub const POD_RESIZE_IN_PROGRESS: &str = "PodResizeInProgress";

const CONTAINER_CREATING: &str = "ContainerCreating";
const POD_INITIALIZING: &str = "PodInitializing";
const STATUS_UNKNOWN: &str = "ContainerStatusUnknown";
// The kubelet's messages, word for word.
const INIT_INFERRED: &str = "Unable to get init container status from container runtime and pod \
    has been initialized, treat it as exited normally";
const VANISHED: &str = "The container could not be located when the pod was deleted.  The \
    container used to be Running";
const LOST: &str = "The container could not be located when the pod was terminated";

/// Generates the pod's status.
///
/// `waiting(name)` is the (reason, message) the last sync recorded for a container it could not
/// start (CrashLoopBackOff, ErrImagePull, ...); `probes` the startup and readiness results per
/// container instance. `old` is the last status picolet generated; when
/// `None`, the status in `pod` (as read from the API server) takes its place. Container IDs are
/// written `<runtime_name>://<id>`. `now` is in unix nanoseconds.
#[allow(
    clippy::too_many_arguments,
    reason = "the inputs of upstream's generateAPIPodStatus, each one plain data"
)]
pub fn generate(
    pod: &Pod,
    rt: &PodRuntimeStatus,
    waiting: &dyn Fn(&str) -> Option<(String, String)>,
    probes: &Results,
    old: Option<&PodStatus>,
    host_ip: &str,
    runtime_name: &str,
    now: i64,
) -> PodStatus {
    let prev = old.unwrap_or(&pod.status);
    let conv = Converter {
        pod,
        rt,
        waiting,
        probes,
        runtime_name,
    };
    let init = conv.statuses(
        &pod.spec.init_containers,
        &prev.init_container_statuses,
        true,
    );
    let app = conv.statuses(&pod.spec.containers, &prev.container_statuses, false);
    let ephemeral = conv.statuses(
        &pod.spec.ephemeral_containers,
        &prev.ephemeral_container_statuses,
        false,
    );

    // A terminal phase is final: the API server's wins, then a computed one, then the previous.
    let computed = get_phase(pod, &init, &app);
    let phase = match (terminal(&pod.status.phase), terminal(&prev.phase)) {
        (Some(api), _) => api,
        _ if is_terminal(computed) => computed,
        (None, Some(ours)) => ours,
        (None, None) => computed,
    };
    // The reason and message (e.g. of an eviction) belong to the phase they came with.
    let (reason, message) = if prev.phase.as_deref() == Some(phase) {
        (
            prev.reason.clone().or_else(|| pod.status.reason.clone()),
            prev.message.clone().or_else(|| pod.status.message.clone()),
        )
    } else {
        (None, None)
    };

    let host = (!host_ip.is_empty()).then(|| host_ip.to_owned());
    let mut pod_ips = pod_ips(rt, prev);
    if pod.spec.host_network && pod_ips.is_empty() {
        pod_ips.extend(host.iter().map(|ip| PodIp { ip: ip.clone() }));
    }
    let qos = pod.status.qos_class.clone();
    let conditions = conditions(pod, rt, &init, &app, phase, prev, now);
    // App containers by name, init containers in spec order, as the kubelet sorts them.
    let mut app = app;
    app.sort_by(|a, b| a.name.cmp(&b.name));
    PodStatus {
        phase: Some(phase.to_owned()),
        conditions,
        message,
        reason,
        host_i_ps: host.iter().map(|ip| HostIp { ip: ip.clone() }).collect(),
        host_ip: host,
        pod_ip: pod_ips.first().map(|p| p.ip.clone()),
        pod_i_ps: pod_ips,
        start_time: Some(prev.start_time.clone().unwrap_or_else(|| rfc3339(now))),
        init_container_statuses: init,
        container_statuses: app,
        ephemeral_container_statuses: ephemeral,
        qos_class: qos.or_else(|| Some(crate::qos::qos_class(pod).as_str().to_owned())),
        observed_generation: pod.metadata.generation,
    }
}

fn is_terminal(phase: &str) -> bool {
    phase == SUCCEEDED || phase == FAILED
}

fn terminal(phase: &Option<String>) -> Option<&str> {
    phase.as_deref().filter(|p| is_terminal(p))
}

fn exit_code(state: &ContainerState) -> Option<i32> {
    state.terminated.as_ref().map(|t| t.exit_code)
}

/// The kubelet's getPhase (with per-container restart policies and rules), computed from the
/// API container statuses, not from the runtime. A sidecar keeps the pod pending only until it
/// runs, or until the app containers have started.
///
/// A container that exited and waits to be restarted (CrashLoopBackOff) has a waiting state and
/// a terminated lastState: upstream counts it as *stopped*, not waiting, so a crash-looping pod
/// with restartPolicy Always stays Running. Only a container that never ran (waiting without a
/// lastState) makes the pod Pending. A failed init container that will not be restarted fails
/// the pod; once every app container has stopped, the pod runs on while one of them will be
/// restarted.
fn get_phase(pod: &Pod, init: &[ContainerStatus], app: &[ContainerStatus]) -> &'static str {
    let (mut pending_init, mut failed_init) = (0, 0);
    let app_started = app_started(app);
    let restarts = |spec: &Container, code: i32| actions::container_should_restart(pod, spec, code);
    for (s, spec) in init.iter().zip(&pod.spec.init_containers) {
        if spec.is_sidecar() {
            if s.state.running.is_none() && !app_started {
                pending_init += 1;
            }
            continue;
        }
        if s.state.running.is_some() {
            pending_init += 1;
        } else if let Some(code) = exit_code(&s.state) {
            if code != 0 && !restarts(spec, code) {
                failed_init += 1;
            }
        } else if s.state.waiting.is_some() {
            match exit_code(&s.last_state) {
                Some(0) => {}
                Some(code) if !restarts(spec, code) => failed_init += 1,
                Some(_) => {}
                None => pending_init += 1,
            }
        } else {
            pending_init += 1;
        }
    }

    let (mut running, mut waiting, mut unknown) = (0, 0, 0);
    let (mut stopped, mut stopped_for_good, mut succeeded) = (0, 0, 0);
    for (s, spec) in app.iter().zip(&pod.spec.containers) {
        if s.state.running.is_some() {
            running += 1;
        } else if let Some(code) = exit_code(&s.state) {
            stopped += 1;
            if !restarts(spec, code) {
                stopped_for_good += 1;
            }
            if code == 0 {
                succeeded += 1;
            }
        } else if s.state.waiting.is_some() {
            if let Some(code) = exit_code(&s.last_state) {
                stopped += 1;
                if !restarts(spec, code) {
                    stopped_for_good += 1;
                }
            } else {
                waiting += 1;
            }
        } else {
            unknown += 1;
        }
    }

    if failed_init > 0 {
        return FAILED;
    }
    if pending_init > 0 || waiting > 0 {
        PENDING
    } else if running > 0 && unknown == 0 {
        RUNNING
    } else if running == 0 && stopped > 0 && unknown == 0 {
        if stopped != stopped_for_good {
            // At least one is on its way to be restarted.
            RUNNING
        } else if stopped == succeeded {
            SUCCEEDED
        } else {
            FAILED
        }
    } else {
        PENDING
    }
}

/// Whether an app container has ever run: initialization finished before.
fn app_started(app: &[ContainerStatus]) -> bool {
    app.iter().any(|s| {
        s.state.running.is_some()
            || s.state.terminated.is_some()
            || s.last_state.terminated.is_some()
    })
}

struct Converter<'a> {
    pod: &'a Pod,
    rt: &'a PodRuntimeStatus,
    waiting: &'a dyn Fn(&str) -> Option<(String, String)>,
    probes: &'a Results,
    runtime_name: &'a str,
}

impl Converter<'_> {
    /// One status per spec container, in spec order (convertToAPIContainerStatuses).
    fn statuses(
        &self,
        specs: &[Container],
        old: &[ContainerStatus],
        init: bool,
    ) -> Vec<ContainerStatus> {
        specs
            .iter()
            .map(|c| self.status(c, old.iter().find(|o| o.name == c.name), init))
            .collect()
    }

    fn status(&self, c: &Container, old: Option<&ContainerStatus>, init: bool) -> ContainerStatus {
        let mut instances: Vec<_> = self
            .rt
            .containers
            .iter()
            .filter(|x| *x.name == *c.name)
            .collect();
        instances.sort_by_key(|x| Reverse(x.created_at));
        let newest = instances.first().copied();

        let mut s = match newest {
            Some(n) => {
                let mut s = self.convert(n, old);
                if let Some(previous) = instances.get(1) {
                    s.last_state = self.convert(previous, old).state;
                }
                s
            }
            None => self.default_status(c, old),
        };
        s.image.clone_from(&c.image);

        // An ephemeral container runs once: an instance that exited stays the last word.
        let ephemeral = self
            .pod
            .spec
            .ephemeral_containers
            .iter()
            .any(|e| e.name == c.name);
        let init_succeeded =
            newest.is_some_and(|n| n.state == kc::ContainerState::Exited && n.exit_code == 0);
        if init && newest.is_none() && s.state.waiting.is_some() && self.any_app_container_created()
        {
            // The init container was removed from the runtime after the app containers were
            // created, so it must have succeeded.
            s.state = terminated(ContainerStateTerminated {
                reason: Some("Completed".into()),
                message: Some(INIT_INFERRED.into()),
                ..Default::default()
            });
        } else if !(init && init_succeeded || ephemeral && newest.is_some())
            && self.should_restart(c, newest)
        {
            // A container the next sync will (re)start shows why it is not running yet; the
            // instance that exited moves to lastState.
            if let Some((reason, message)) = (self.waiting)(&c.name) {
                if s.state.terminated.is_some() {
                    s.last_state = std::mem::take(&mut s.state);
                }
                s.state = waiting_state(reason, Some(message));
            }
        }

        let running = s.state.running.is_some();
        let id = newest.map(|n| &*n.id).filter(|_| running);
        let started = id.is_some_and(|id| self.probes.started(c, id));
        s.started = Some(started);
        // Ephemeral containers have no probes and never count for readiness.
        s.ready = if ephemeral {
            false
        } else if init && !c.is_sidecar() {
            exit_code(&s.state) == Some(0)
        } else {
            started && id.is_some_and(|id| self.probes.ready(c, id))
        };
        s
    }

    /// The status of a container the runtime does not know (yet, or any more).
    fn default_status(&self, c: &Container, old: Option<&ContainerStatus>) -> ContainerStatus {
        if let Some(o) = old.filter(|o| o.state.terminated.is_some()) {
            return o.clone();
        }
        let reason = if self.pod.spec.init_containers.is_empty() {
            CONTAINER_CREATING
        } else {
            POD_INITIALIZING
        };
        let mut s = ContainerStatus {
            name: c.name.clone(),
            state: waiting_state(reason.into(), None),
            ..Default::default()
        };
        if let Some(o) = old {
            s.restart_count = o.restart_count;
            s.last_state = o.last_state.clone();
            // It was running and vanished: record that it stopped, so that the pod does not go
            // back to Pending as if it had never run.
            if o.state.running.is_some() && s.last_state.terminated.is_none() {
                s.last_state = terminated(ContainerStateTerminated {
                    exit_code: 137,
                    reason: Some(STATUS_UNKNOWN.into()),
                    message: Some(VANISHED.into()),
                    ..Default::default()
                });
                if self.pod.metadata.deletion_timestamp.is_none() {
                    s.restart_count = s.restart_count.saturating_add(1);
                }
            }
        }
        s
    }

    /// One runtime instance as an API status.
    fn convert(&self, x: &kc::ContainerStatus, old: Option<&ContainerStatus>) -> ContainerStatus {
        let id = format!("{}://{}", self.runtime_name, x.id);
        let mut s = ContainerStatus {
            name: x.name.to_string(),
            restart_count: i32::try_from(x.restart_count).unwrap_or(i32::MAX),
            image_id: x.image_ref.to_string(),
            container_id: Some(id.clone()),
            ..Default::default()
        };
        let was_running = old.filter(|o| o.state.running.is_some());
        s.state = match (x.state, was_running) {
            (kc::ContainerState::Running, _) => ContainerState {
                running: Some(ContainerStateRunning {
                    started_at: time(x.started_at),
                }),
                ..Default::default()
            },
            (kc::ContainerState::Exited, _) => {
                let reason = match (&*x.reason, x.exit_code) {
                    ("", 0) => "Completed",
                    ("", _) => "Error",
                    (r, _) => r,
                };
                terminated(ContainerStateTerminated {
                    exit_code: x.exit_code,
                    reason: Some(reason.into()),
                    message: (!x.message.is_empty()).then(|| x.message.to_string()),
                    started_at: time(x.started_at),
                    finished_at: time(x.finished_at),
                    container_id: Some(id),
                    ..Default::default()
                })
            }
            (kc::ContainerState::Unknown, Some(o)) => {
                // It was running and the runtime lost track of it: it ran and stopped, which is
                // not the same as never having run (a Never pod must not run it again).
                s.restart_count = o.restart_count.saturating_add(1);
                terminated(ContainerStateTerminated {
                    exit_code: 137,
                    reason: Some(STATUS_UNKNOWN.into()),
                    message: Some(LOST.into()),
                    ..Default::default()
                })
            }
            // Created but not started, or unknown: waiting to run.
            (kc::ContainerState::Created | kc::ContainerState::Unknown, _) => ContainerState {
                waiting: Some(ContainerStateWaiting::default()),
                ..Default::default()
            },
        };
        s
    }

    /// The kubelet's ShouldContainerBeRestarted for the newest instance of a container.
    fn should_restart(&self, c: &Container, newest: Option<&kc::ContainerStatus>) -> bool {
        if self.pod.metadata.deletion_timestamp.is_some() {
            return false;
        }
        actions::should_restart(self.pod, c, newest)
    }

    fn any_app_container_created(&self) -> bool {
        self.pod.spec.containers.iter().any(|c| {
            self.rt
                .latest(&c.name)
                .is_some_and(|s| s.state != kc::ContainerState::Unknown)
        })
    }
}

fn time(unix_nanos: i64) -> Option<String> {
    (unix_nanos > 0).then(|| rfc3339(unix_nanos))
}

fn terminated(t: ContainerStateTerminated) -> ContainerState {
    ContainerState {
        terminated: Some(t),
        ..Default::default()
    }
}

fn waiting_state(reason: String, message: Option<String>) -> ContainerState {
    ContainerState {
        waiting: Some(ContainerStateWaiting {
            reason: Some(reason),
            message,
        }),
        ..Default::default()
    }
}

/// The newest sandbox's IP while it is ready. Once no sandbox is ready (the pod stopped), the
/// previous IPs stay, as the kubelet's PLEG keeps them: a finished pod still shows its IP.
fn pod_ips(rt: &PodRuntimeStatus, prev: &PodStatus) -> Vec<PodIp> {
    let ready = |s: &&kc::SandboxStatus| s.state == SandboxState::Ready;
    match rt
        .sandboxes
        .first()
        .filter(ready)
        .and_then(|s| s.ip.as_deref())
    {
        Some(ip) => vec![PodIp { ip: ip.to_owned() }],
        None if !rt.sandboxes.iter().any(|s| ready(&s)) => prev.pod_i_ps.clone(),
        None => vec![],
    }
}

/// Whether the pod has a sandbox that containers can start in: the one the sync would keep.
fn sandbox_ready(pod: &Pod, rt: &PodRuntimeStatus) -> bool {
    actions::sandbox_usable(pod, rt)
}

fn condition(type_: &str, ok: bool, reason: Option<&str>, message: Option<String>) -> PodCondition {
    PodCondition {
        type_: type_.into(),
        status: if ok { "True" } else { "False" }.into(),
        reason: reason.map(Into::into),
        message,
        ..Default::default()
    }
}

/// The names of the containers that are not ready, in spec order.
fn unready(statuses: &[ContainerStatus]) -> Vec<&str> {
    statuses
        .iter()
        .filter(|s| !s.ready)
        .map(|s| s.name.as_str())
        .collect()
}

/// True when no container is named, else False with `reason` and the names as Go prints a
/// `[]string`: "containers with unready status: [a b]".
fn all_ready(type_: &str, names: &[&str], reason: &str, what: &str) -> PodCondition {
    if names.is_empty() {
        return condition(type_, true, None, None);
    }
    let message = format!("containers with {what} status: [{}]", names.join(" "));
    condition(type_, false, Some(reason), Some(message))
}

/// GeneratePodReadyCondition: ContainersReady, and then every readiness gate's condition (set
/// by others in the pod's status) True.
fn ready_condition(pod: &Pod, containers_ready: &PodCondition) -> PodCondition {
    let copy = PodCondition {
        type_: READY.into(),
        ..containers_ready.clone()
    };
    if containers_ready.status != "True" {
        return copy;
    }
    let unready: Vec<String> = pod
        .spec
        .readiness_gates
        .iter()
        .filter_map(|g| {
            let t = &g.condition_type;
            match pod.status.conditions.iter().find(|c| c.type_ == *t) {
                None => Some(format!(
                    "corresponding condition of pod readiness gate \"{t}\" does not exist."
                )),
                Some(c) if c.status != "True" => Some(format!(
                    "the status of pod readiness gate \"{t}\" is not \"True\", but {}",
                    c.status
                )),
                Some(_) => None,
            }
        })
        .collect();
    if unready.is_empty() {
        return copy;
    }
    condition(
        READY,
        false,
        Some("ReadinessGatesNotReady"),
        Some(unready.join(", ")),
    )
}

/// Upstream's NeedToReconcilePodReadiness: the pod has readiness gates and the Ready condition
/// in its status is not what its conditions (ContainersReady and the gates', set by others)
/// make it. A status update from the apiserver that changes a gate then needs a sync.
pub fn readiness_needs_reconcile(pod: &Pod) -> bool {
    if pod.spec.readiness_gates.is_empty() {
        return false;
    }
    let find = |t: &str| pod.status.conditions.iter().find(|c| c.type_ == t);
    let Some(current) = find(READY) else {
        return false;
    };
    let containers_ready = find(CONTAINERS_READY)
        .cloned()
        .unwrap_or_else(|| condition(CONTAINERS_READY, false, None, None));
    let want = ready_condition(pod, &containers_ready);
    current.status != want.status || current.message != want.message
}

/// The status to send to the apiserver: the kubelet's conditions from `current`, every other
/// condition as the apiserver holds it (others set them; a status generated before their last
/// change must not undo it), as upstream's status manager merges them.
/// `DisruptionTarget` is shared, as upstream: the node's (an eviction's) replaces the
/// apiserver's.
#[cfg(any(test, feature = "apiserver"))]
pub fn merge_foreign_conditions(current: &mut PodStatus, in_api: &PodStatus) {
    let owned = |c: &&PodCondition| KUBELET_CONDITIONS.contains(&c.type_.as_str());
    let ours: Vec<PodCondition> = current
        .conditions
        .iter()
        .filter(|c| written_by_the_node(&c.type_))
        .cloned()
        .collect();
    let mut merged: Vec<PodCondition> = in_api
        .conditions
        .iter()
        .filter(|c| !owned(c) && !ours.iter().any(|o| o.type_ == c.type_))
        .cloned()
        .collect();
    merged.extend(ours);
    current.conditions = merged;
}

/// The condition a node sets on a pod it stops for good by eviction; others may set it too.
const DISRUPTION_TARGET: &str = "DisruptionTarget";

/// Whether a condition of this type is one the node writes (its own, and `DisruptionTarget`,
/// which it shares); the others it only copies from the apiserver's copy.
#[cfg(any(test, feature = "apiserver"))]
pub fn written_by_the_node(type_: &str) -> bool {
    KUBELET_CONDITIONS.contains(&type_) || type_ == DISRUPTION_TARGET
}

/// What the status says of a pod's resources: the allocation, a resize that waits, and the
/// runtime's refusal of the last in-place resize.
#[derive(Debug, Clone, Default)]
pub struct Resources {
    pub allocation: Option<crate::allocation::PodAllocation>,
    pub pending: Option<crate::allocation::Pending>,
    pub error: Option<String>,
}

/// Adds the resources to a generated status, as upstream reports them: each container's
/// `allocatedResources` (its allocated requests) and, while it runs, `resources` (the CPU and
/// memory requests and limits it runs with); the `PodResizePending` condition for a resize
/// that waits and `PodResizeInProgress` for one allocated but not yet applied to every
/// running container (reason `Error` with the runtime's message when it refused), each with
/// the pod's generation, which the kubelet's other conditions carry too.
pub fn set_resources(s: &mut PodStatus, pod: &Pod, r: &Resources, prev: &PodStatus, now: i64) {
    let mut in_progress = false;
    let specs = pod.spec.containers.iter().chain(&pod.spec.init_containers);
    for c in specs {
        let allocated = r
            .allocation
            .as_ref()
            .and_then(|a| a.allocated.get(&c.name))
            .unwrap_or(&c.resources);
        let statuses = s
            .container_statuses
            .iter_mut()
            .chain(s.init_container_statuses.iter_mut());
        let Some(cs) = statuses.into_iter().find(|cs| cs.name == c.name) else {
            continue;
        };
        cs.allocated_resources = allocated.requests.clone();
        if cs.state.running.is_none() {
            cs.resources = None;
            continue;
        }
        let actuated = r
            .allocation
            .as_ref()
            .and_then(|a| a.actuated.get(&c.name))
            .unwrap_or(allocated);
        in_progress |= crate::allocation::differ(actuated, allocated);
        // Reported as allocated once applied: the runtime rounds (1m and 2m are the same
        // shares, 5m and 10m the same quota) and the spec's own quantities are the answer.
        let applied = if crate::allocation::differ(actuated, allocated) {
            actuated
        } else {
            allocated
        };
        cs.resources = Some(crate::allocation::resizable_part(applied));
    }
    let at = rfc3339(now);
    let generation = pod.metadata.generation;
    let since = |type_: &str, status: &str| {
        prev.conditions
            .iter()
            .find(|o| o.type_ == type_ && o.status == status)
            .and_then(|o| o.last_transition_time.clone())
            .or_else(|| Some(at.clone()))
    };
    s.conditions
        .retain(|c| c.type_ != POD_RESIZE_PENDING && c.type_ != POD_RESIZE_IN_PROGRESS);
    if let Some(p) = &r.pending {
        s.conditions.push(PodCondition {
            type_: POD_RESIZE_PENDING.into(),
            status: "True".into(),
            last_transition_time: since(POD_RESIZE_PENDING, "True"),
            reason: Some(p.reason.into()),
            message: Some(p.message.clone()),
            ..Default::default()
        });
    }
    if in_progress || r.error.is_some() {
        s.conditions.push(PodCondition {
            type_: POD_RESIZE_IN_PROGRESS.into(),
            status: "True".into(),
            last_transition_time: since(POD_RESIZE_IN_PROGRESS, "True"),
            reason: r.error.as_ref().map(|_| "Error".into()),
            message: r.error.clone(),
            ..Default::default()
        });
    }
    for c in &mut s.conditions {
        if KUBELET_CONDITIONS.contains(&c.type_.as_str()) {
            c.observed_generation = generation;
        }
    }
}

/// Conditions not owned by the kubelet first, then the kubelet's in upstream order. A condition
/// keeps its lastTransitionTime while its status does not change.
fn conditions(
    pod: &Pod,
    rt: &PodRuntimeStatus,
    init: &[ContainerStatus],
    app: &[ContainerStatus],
    phase: &str,
    prev: &PodStatus,
    now: i64,
) -> Vec<PodCondition> {
    let containers_ready = containers_ready(&pod.spec.init_containers, init, app, phase);
    let ready = ready_condition(pod, &containers_ready);
    let owned = [
        condition(
            POD_READY_TO_START_CONTAINERS,
            sandbox_ready(pod, rt),
            None,
            None,
        ),
        initialized(&pod.spec.init_containers, init, app, phase),
        ready,
        containers_ready,
        condition(POD_SCHEDULED, true, None, None),
    ];
    let foreign = pod
        .status
        .conditions
        .iter()
        .filter(|c| !KUBELET_CONDITIONS.contains(&c.type_.as_str()));
    foreign
        .cloned()
        .chain(owned.into_iter().map(|mut c| {
            c.last_transition_time = prev
                .conditions
                .iter()
                .find(|o| o.type_ == c.type_ && o.status == c.status)
                .and_then(|o| o.last_transition_time.clone())
                .or_else(|| Some(rfc3339(now)));
            c
        }))
        .collect()
}

/// GeneratePodInitializedCondition: init containers have completed, sidecars have started.
fn initialized(
    init_specs: &[Container],
    init: &[ContainerStatus],
    app: &[ContainerStatus],
    phase: &str,
) -> PodCondition {
    if phase == SUCCEEDED {
        return condition(INITIALIZED, true, Some("PodCompleted"), None);
    }
    // An app container that ran means initialization finished before.
    if app
        .iter()
        .any(|s| s.state.running.is_some() || s.state.terminated.is_some())
    {
        return condition(INITIALIZED, true, None, None);
    }
    let incomplete: Vec<&str> = init
        .iter()
        .zip(init_specs)
        .filter(|(s, spec)| {
            if spec.is_sidecar() {
                s.started != Some(true)
            } else {
                !s.ready
            }
        })
        .map(|(s, _)| s.name.as_str())
        .collect();
    all_ready(
        INITIALIZED,
        &incomplete,
        "ContainersNotInitialized",
        "incomplete",
    )
}

/// GenerateContainersReadyCondition, sidecars first (the Ready condition copies it: there are
/// no readiness gates).
fn containers_ready(
    init_specs: &[Container],
    init: &[ContainerStatus],
    app: &[ContainerStatus],
    phase: &str,
) -> PodCondition {
    match phase {
        SUCCEEDED => condition(CONTAINERS_READY, false, Some("PodCompleted"), None),
        FAILED => condition(CONTAINERS_READY, false, Some("PodFailed"), None),
        _ => {
            let sidecars: Vec<ContainerStatus> = init
                .iter()
                .zip(init_specs)
                .filter(|(_, spec)| spec.is_sidecar())
                .map(|(s, _)| s.clone())
                .collect();
            let mut names = unready(&sidecars);
            names.extend(unready(app));
            all_ready(CONTAINERS_READY, &names, "ContainersNotReady", "unready")
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::api::{Quantity, RestartPolicy};
    use crate::kubecontainer::{ContainerState as Rs, SandboxStatus};

    const SEC: i64 = 1_000_000_000;
    /// 2024-05-01T12:00:00Z
    const T0: i64 = 1_714_564_800 * SEC;
    const NOW: i64 = T0 + 600 * SEC;
    const HOST: &str = "192.168.1.10";

    fn pod(policy: Option<RestartPolicy>, inits: &[&str], apps: &[&str]) -> Pod {
        let c = |n: &&str| Container {
            name: (*n).into(),
            image: format!("img/{n}:1"),
            ..Default::default()
        };
        let mut p = Pod::default();
        p.metadata.name = "web".into();
        p.metadata.uid = "uid-1".into();
        p.spec.restart_policy = policy;
        p.spec.init_containers = inits.iter().map(c).collect();
        p.spec.containers = apps.iter().map(c).collect();
        p
    }

    fn sandbox(ready: bool, ip: Option<&str>) -> SandboxStatus {
        SandboxStatus {
            id: "sb1".into(),
            attempt: 0,
            state: if ready {
                SandboxState::Ready
            } else {
                SandboxState::NotReady
            },
            created_at: T0,
            ip: ip.map(Into::into),
            host_network: false,
        }
    }

    /// An instance created `at` seconds after T0, started a second later and, when exited,
    /// finished 10 seconds after that.
    fn ctr(name: &str, state: Rs, at: i64, exit_code: i32, restarts: u32) -> kc::ContainerStatus {
        let created = T0 + at * SEC;
        kc::ContainerStatus {
            id: format!("{name}-{at}").into(),
            name: name.into(),
            state,
            created_at: created,
            started_at: if state == Rs::Created {
                0
            } else {
                created + SEC
            },
            finished_at: if state == Rs::Exited {
                created + 11 * SEC
            } else {
                0
            },
            exit_code,
            image: format!("img/{name}:1").into(),
            image_ref: format!("sha256:{name}").into(),
            reason: "".into(),
            message: "".into(),
            hash: 1,
            restart_count: restarts,
            sandbox_id: "s".into(),
        }
    }

    fn runtime(
        sandboxes: Vec<SandboxStatus>,
        containers: Vec<kc::ContainerStatus>,
    ) -> PodRuntimeStatus {
        PodRuntimeStatus {
            uid: "uid-1".into(),
            sandboxes,
            containers,
            ..Default::default()
        }
    }

    fn run(
        pod: &Pod,
        rt: &PodRuntimeStatus,
        waiting: &[(&str, &str, &str)],
        old: Option<&PodStatus>,
    ) -> PodStatus {
        let lookup = |name: &str| {
            waiting
                .iter()
                .find(|w| w.0 == name)
                .map(|w| (w.1.to_owned(), w.2.to_owned()))
        };
        generate(
            pod,
            rt,
            &lookup,
            &Results::default(),
            old,
            HOST,
            "containerd",
            NOW,
        )
    }

    fn cond<'a>(s: &'a PodStatus, type_: &str) -> &'a PodCondition {
        s.conditions.iter().find(|c| c.type_ == type_).unwrap()
    }

    fn waiting_reason(s: &ContainerStatus) -> Option<&str> {
        s.state.waiting.as_ref()?.reason.as_deref()
    }

    fn cs<'a>(s: &'a PodStatus, name: &str) -> &'a ContainerStatus {
        s.init_container_statuses
            .iter()
            .chain(&s.container_statuses)
            .find(|c| c.name == name)
            .unwrap()
    }

    #[test]
    fn fresh_pod_before_any_container() {
        let p = pod(None, &[], &["app"]);
        let s = run(&p, &runtime(vec![], vec![]), &[], None);
        assert_eq!(s.phase.as_deref(), Some(PENDING));
        let types: Vec<&str> = s.conditions.iter().map(|c| c.type_.as_str()).collect();
        assert_eq!(
            types,
            [
                POD_READY_TO_START_CONTAINERS,
                INITIALIZED,
                READY,
                CONTAINERS_READY,
                POD_SCHEDULED
            ]
        );
        let statuses: Vec<&str> = s.conditions.iter().map(|c| c.status.as_str()).collect();
        assert_eq!(statuses, ["False", "True", "False", "False", "True"]);
        let ready = cond(&s, READY);
        assert_eq!(ready.reason.as_deref(), Some("ContainersNotReady"));
        assert_eq!(
            ready.message.as_deref(),
            Some("containers with unready status: [app]")
        );
        assert!(
            s.conditions
                .iter()
                .all(|c| c.last_transition_time.as_deref() == Some("2024-05-01T12:10:00Z"))
        );

        let c = &s.container_statuses[0];
        assert_eq!(waiting_reason(c), Some(CONTAINER_CREATING));
        assert_eq!(c.image, "img/app:1");
        assert_eq!(
            (c.ready, c.started, c.restart_count),
            (false, Some(false), 0)
        );
        assert_eq!(c.container_id, None);
        assert!(s.init_container_statuses.is_empty());

        assert_eq!(s.pod_ip, None);
        assert!(s.pod_i_ps.is_empty());
        assert_eq!(s.host_ip.as_deref(), Some(HOST));
        assert_eq!(s.host_i_ps, [HostIp { ip: HOST.into() }]);
        assert_eq!(s.start_time.as_deref(), Some("2024-05-01T12:10:00Z"));
        assert_eq!(s.qos_class.as_deref(), Some("BestEffort"));
    }

    #[test]
    fn image_pull_error_before_first_start() {
        let p = pod(None, &[], &["app"]);
        let rt = runtime(vec![sandbox(true, Some("10.1.0.5"))], vec![]);
        let s = run(
            &p,
            &rt,
            &[("app", "ErrImagePull", "pull access denied")],
            None,
        );
        assert_eq!(s.phase.as_deref(), Some(PENDING));
        let w = s.container_statuses[0].state.waiting.as_ref().unwrap();
        assert_eq!(w.reason.as_deref(), Some("ErrImagePull"));
        assert_eq!(w.message.as_deref(), Some("pull access denied"));
        assert_eq!(cond(&s, POD_READY_TO_START_CONTAINERS).status, "True");
    }

    #[test]
    fn running_pod() {
        let mut p = pod(None, &[], &["app", "sidecar"]);
        for c in &mut p.spec.containers {
            c.resources
                .limits
                .insert("cpu".into(), Quantity::parse("500m").unwrap());
            c.resources
                .limits
                .insert("memory".into(), Quantity::parse("64Mi").unwrap());
        }
        let rt = runtime(
            vec![sandbox(true, Some("10.1.0.5"))],
            vec![
                ctr("app", Rs::Running, 2, 0, 0),
                ctr("sidecar", Rs::Running, 3, 0, 0),
            ],
        );
        let s = run(&p, &rt, &[("app", "CrashLoopBackOff", "stale")], None);
        assert_eq!(s.phase.as_deref(), Some(RUNNING));
        assert!(
            s.conditions
                .iter()
                .all(|c| c.status == "True" && c.reason.is_none()),
            "{:?}",
            s.conditions
        );
        assert_eq!(s.pod_ip.as_deref(), Some("10.1.0.5"));
        assert_eq!(
            s.pod_i_ps,
            [PodIp {
                ip: "10.1.0.5".into()
            }]
        );
        assert_eq!(s.qos_class.as_deref(), Some("Guaranteed"));

        let c = cs(&s, "app");
        // a stale waiting reason does not hide a running container
        let running = c.state.running.as_ref().unwrap();
        assert_eq!(running.started_at.as_deref(), Some("2024-05-01T12:00:03Z"));
        assert_eq!(c.state.waiting, None);
        assert_eq!(c.container_id.as_deref(), Some("containerd://app-2"));
        assert_eq!(c.image_id, "sha256:app");
        assert_eq!((c.ready, c.started), (true, Some(true)));
        assert_eq!(c.last_state, ContainerState::default());

        let v = serde_json::to_value(&s).unwrap();
        assert_eq!(
            v["containerStatuses"][1]["containerID"],
            "containerd://sidecar-3"
        );
        assert_eq!(v["conditions"][0]["type"], "PodReadyToStartContainers");
        assert!(v["conditions"][0].get("lastProbeTime").is_none());
    }

    #[test]
    fn crash_looping_pod_with_always() {
        let p = pod(None, &[], &["app"]);
        let rt = runtime(
            vec![sandbox(true, Some("10.1.0.5"))],
            vec![
                ctr("app", Rs::Exited, 40, 1, 3),
                ctr("app", Rs::Exited, 20, 1, 2),
            ],
        );
        // just exited, back-off not recorded yet: terminated, previous instance in lastState
        let s = run(&p, &rt, &[], None);
        assert_eq!(s.phase.as_deref(), Some(RUNNING));
        let c = &s.container_statuses[0];
        let t = c.state.terminated.as_ref().unwrap();
        assert_eq!((t.exit_code, t.reason.as_deref()), (1, Some("Error")));
        assert_eq!(t.container_id.as_deref(), Some("containerd://app-40"));
        assert_eq!(t.finished_at.as_deref(), Some("2024-05-01T12:00:51Z"));
        let last = c.last_state.terminated.as_ref().unwrap();
        assert_eq!(last.container_id.as_deref(), Some("containerd://app-20"));
        assert_eq!(c.restart_count, 3);

        // in back-off: waiting CrashLoopBackOff, the newest exit moves to lastState
        let msg = "back-off 20s restarting failed container=app pod=web_default(uid-1)";
        let s = run(&p, &rt, &[("app", "CrashLoopBackOff", msg)], None);
        assert_eq!(s.phase.as_deref(), Some(RUNNING));
        let c = &s.container_statuses[0];
        let w = c.state.waiting.as_ref().unwrap();
        assert_eq!(
            (w.reason.as_deref(), w.message.as_deref()),
            (Some("CrashLoopBackOff"), Some(msg))
        );
        assert_eq!(c.state.terminated, None);
        let last = c.last_state.terminated.as_ref().unwrap();
        assert_eq!(last.container_id.as_deref(), Some("containerd://app-40"));
        assert_eq!(last.exit_code, 1);
        assert_eq!(c.restart_count, 3);
        assert_eq!(c.container_id.as_deref(), Some("containerd://app-40"));
        assert!(!c.ready);
        let cr = cond(&s, CONTAINERS_READY);
        assert_eq!(
            (cr.status.as_str(), cr.reason.as_deref()),
            ("False", Some("ContainersNotReady"))
        );
    }

    #[test]
    fn never_pod_that_completed_succeeds() {
        let p = pod(Some(RestartPolicy::Never), &[], &["job"]);
        let rt = runtime(
            vec![sandbox(true, Some("10.1.0.7"))],
            vec![ctr("job", Rs::Exited, 1, 0, 0)],
        );
        let s = run(&p, &rt, &[], None);
        assert_eq!(s.phase.as_deref(), Some(SUCCEEDED));
        let t = s.container_statuses[0].state.terminated.as_ref().unwrap();
        assert_eq!((t.exit_code, t.reason.as_deref()), (0, Some("Completed")));
        assert_eq!(t.started_at.as_deref(), Some("2024-05-01T12:00:02Z"));
        for ty in [READY, CONTAINERS_READY] {
            let c = cond(&s, ty);
            assert_eq!(
                (c.status.as_str(), c.reason.as_deref()),
                ("False", Some("PodCompleted")),
                "{ty}"
            );
        }
        let init = cond(&s, INITIALIZED);
        assert_eq!(
            (init.status.as_str(), init.reason.as_deref()),
            ("True", Some("PodCompleted"))
        );
    }

    #[test]
    fn never_pod_that_failed_fails() {
        let p = pod(Some(RestartPolicy::Never), &[], &["job"]);
        let mut oom = ctr("job", Rs::Exited, 1, 137, 0);
        oom.reason = "OOMKilled".into();
        oom.message = "out of memory".into();
        let rt = runtime(vec![sandbox(true, Some("10.1.0.7"))], vec![oom]);
        // a recorded waiting reason is ignored: Never does not restart
        let s = run(&p, &rt, &[("job", "CrashLoopBackOff", "x")], None);
        assert_eq!(s.phase.as_deref(), Some(FAILED));
        let t = s.container_statuses[0].state.terminated.as_ref().unwrap();
        assert_eq!((t.exit_code, t.reason.as_deref()), (137, Some("OOMKilled")));
        assert_eq!(t.message.as_deref(), Some("out of memory"));
        assert_eq!(
            cond(&s, CONTAINERS_READY).reason.as_deref(),
            Some("PodFailed")
        );
        assert_eq!(cond(&s, READY).reason.as_deref(), Some("PodFailed"));

        let rt = runtime(vec![], vec![ctr("job", Rs::Exited, 1, 1, 0)]);
        assert_eq!(run(&p, &rt, &[], None).phase.as_deref(), Some(FAILED));
    }

    #[test]
    fn a_container_restarted_by_its_own_policy_keeps_a_never_pod_running() {
        let mut p = pod(Some(RestartPolicy::Never), &[], &["job"]);
        p.spec.containers[0].restart_policy = Some("Never".into());
        p.spec.containers[0].restart_policy_rules = vec![crate::api::ContainerRestartRule {
            action: "Restart".into(),
            exit_codes: Some(crate::api::ContainerRestartRuleOnExitCodes {
                operator: "In".into(),
                values: vec![42],
            }),
        }];
        let sb = || vec![sandbox(true, Some("10.1.0.7"))];
        // Exited with 42, which a rule restarts: waiting to run again, the pod still running.
        let rt = runtime(sb(), vec![ctr("job", Rs::Exited, 1, 42, 0)]);
        let s = run(
            &p,
            &rt,
            &[("job", "CrashLoopBackOff", "back-off 10s")],
            None,
        );
        assert_eq!(s.phase.as_deref(), Some(RUNNING));
        let c = &s.container_statuses[0];
        assert_eq!(
            c.state.waiting.as_ref().and_then(|w| w.reason.as_deref()),
            Some("CrashLoopBackOff")
        );
        assert_eq!(
            c.last_state.terminated.as_ref().map(|t| t.exit_code),
            Some(42)
        );
        // Exited with 1, which no rule matches: the pod fails.
        let rt = runtime(sb(), vec![ctr("job", Rs::Exited, 1, 1, 0)]);
        assert_eq!(run(&p, &rt, &[], None).phase.as_deref(), Some(FAILED));
        // The pod's Always, the container's Never: done after one run.
        let mut p = pod(Some(RestartPolicy::Always), &[], &["job"]);
        p.spec.containers[0].restart_policy = Some("Never".into());
        let rt = runtime(sb(), vec![ctr("job", Rs::Exited, 1, 0, 0)]);
        assert_eq!(run(&p, &rt, &[], None).phase.as_deref(), Some(SUCCEEDED));
    }

    #[test]
    fn on_failure_restarts_only_failures() {
        let p = pod(Some(RestartPolicy::OnFailure), &[], &["a", "b"]);
        let sb = || vec![sandbox(true, Some("10.1.0.8"))];
        let back_off = [
            ("a", "CrashLoopBackOff", "x"),
            ("b", "CrashLoopBackOff", "back-off 10s"),
        ];

        // a finished, b failed and waits to be restarted: still running
        let rt = runtime(
            sb(),
            vec![ctr("a", Rs::Exited, 1, 0, 0), ctr("b", Rs::Exited, 1, 2, 1)],
        );
        let s = run(&p, &rt, &back_off, None);
        assert_eq!(s.phase.as_deref(), Some(RUNNING));
        assert_eq!(
            cs(&s, "a")
                .state
                .terminated
                .as_ref()
                .unwrap()
                .reason
                .as_deref(),
            Some("Completed")
        );
        let b = cs(&s, "b");
        assert_eq!(waiting_reason(b), Some("CrashLoopBackOff"));
        assert_eq!(exit_code(&b.last_state), Some(2));

        // b failed again and nothing is recorded: still running, not failed
        assert_eq!(run(&p, &rt, &[], None).phase.as_deref(), Some(RUNNING));

        // a finished, b runs again
        let rt = runtime(
            sb(),
            vec![
                ctr("a", Rs::Exited, 1, 0, 0),
                ctr("b", Rs::Running, 30, 0, 1),
            ],
        );
        let s = run(&p, &rt, &[], None);
        assert_eq!(s.phase.as_deref(), Some(RUNNING));
        assert_eq!(
            cond(&s, READY).message.as_deref(),
            Some("containers with unready status: [a]")
        );

        // both finished successfully
        let rt = runtime(
            sb(),
            vec![
                ctr("a", Rs::Exited, 1, 0, 0),
                ctr("b", Rs::Exited, 30, 0, 1),
            ],
        );
        assert_eq!(
            run(&p, &rt, &back_off, None).phase.as_deref(),
            Some(SUCCEEDED)
        );
    }

    #[test]
    fn init_container_running() {
        let p = pod(None, &["setup", "migrate"], &["app"]);
        let rt = runtime(
            vec![sandbox(true, Some("10.1.0.9"))],
            vec![ctr("setup", Rs::Running, 1, 0, 0)],
        );
        let s = run(&p, &rt, &[], None);
        assert_eq!(s.phase.as_deref(), Some(PENDING));
        let setup = cs(&s, "setup");
        assert!(setup.state.running.is_some());
        assert_eq!((setup.ready, setup.started), (false, Some(true)));
        assert_eq!(waiting_reason(cs(&s, "migrate")), Some(POD_INITIALIZING));
        assert_eq!(waiting_reason(cs(&s, "app")), Some(POD_INITIALIZING));
        let names: Vec<&str> = s
            .init_container_statuses
            .iter()
            .map(|c| c.name.as_str())
            .collect();
        assert_eq!(names, ["setup", "migrate"]);
        let init = cond(&s, INITIALIZED);
        assert_eq!(
            (init.status.as_str(), init.reason.as_deref()),
            ("False", Some("ContainersNotInitialized"))
        );
        assert_eq!(
            init.message.as_deref(),
            Some("containers with incomplete status: [setup migrate]")
        );

        // setup done, migrate running
        let rt = runtime(
            vec![sandbox(true, Some("10.1.0.9"))],
            vec![
                ctr("setup", Rs::Exited, 1, 0, 0),
                ctr("migrate", Rs::Running, 20, 0, 0),
            ],
        );
        let s = run(&p, &rt, &[], None);
        assert_eq!(s.phase.as_deref(), Some(PENDING));
        let setup = cs(&s, "setup");
        assert_eq!((setup.ready, setup.started), (true, Some(false)));
        assert_eq!(
            cond(&s, INITIALIZED).message.as_deref(),
            Some("containers with incomplete status: [migrate]")
        );
    }

    #[test]
    fn init_done_and_app_running() {
        let p = pod(None, &["setup"], &["app"]);
        let rt = runtime(
            vec![sandbox(true, Some("10.1.0.9"))],
            vec![
                ctr("setup", Rs::Exited, 1, 0, 0),
                ctr("app", Rs::Running, 20, 0, 0),
            ],
        );
        // a stale waiting reason does not turn a succeeded init container (Always) into waiting
        let s = run(&p, &rt, &[("setup", "CrashLoopBackOff", "x")], None);
        assert_eq!(s.phase.as_deref(), Some(RUNNING));
        assert_eq!(exit_code(&cs(&s, "setup").state), Some(0));
        assert!(s.conditions.iter().all(|c| c.status == "True"));

        // the init container was garbage-collected: inferred completed, still initialized
        let rt = runtime(
            vec![sandbox(true, Some("10.1.0.9"))],
            vec![ctr("app", Rs::Running, 20, 0, 0)],
        );
        let s2 = run(&p, &rt, &[], None);
        assert_eq!(s2.phase.as_deref(), Some(RUNNING));
        let t = cs(&s2, "setup").state.terminated.as_ref().unwrap();
        assert_eq!((t.exit_code, t.reason.as_deref()), (0, Some("Completed")));
        assert_eq!(cond(&s2, INITIALIZED).status, "True");

        // with the previous status at hand, its terminated state is kept as it was
        let s3 = run(&p, &rt, &[], Some(&s));
        let setup = cs(&s3, "setup");
        assert_eq!(setup.container_id.as_deref(), Some("containerd://setup-1"));
        assert_eq!(
            setup
                .state
                .terminated
                .as_ref()
                .unwrap()
                .container_id
                .as_deref(),
            Some("containerd://setup-1")
        );
        assert!(setup.ready);
    }

    #[test]
    fn failed_init_container() {
        let rt = runtime(
            vec![sandbox(true, Some("10.1.0.9"))],
            vec![ctr("setup", Rs::Exited, 1, 2, 0)],
        );
        let back_off = [("setup", "CrashLoopBackOff", "back-off 10s")];

        let never = pod(Some(RestartPolicy::Never), &["setup"], &["app"]);
        let s = run(&never, &rt, &back_off, None);
        assert_eq!(s.phase.as_deref(), Some(FAILED));
        assert_eq!(exit_code(&cs(&s, "setup").state), Some(2));
        assert_eq!(waiting_reason(cs(&s, "app")), Some(POD_INITIALIZING));
        assert_eq!(cond(&s, INITIALIZED).status, "False");
        assert_eq!(
            cond(&s, CONTAINERS_READY).reason.as_deref(),
            Some("PodFailed")
        );

        // Always retries the init container: pending, crash-looping
        let always = pod(None, &["setup"], &["app"]);
        let s = run(&always, &rt, &back_off, None);
        assert_eq!(s.phase.as_deref(), Some(PENDING));
        let setup = cs(&s, "setup");
        assert_eq!(waiting_reason(setup), Some("CrashLoopBackOff"));
        assert_eq!(exit_code(&setup.last_state), Some(2));
        assert_eq!(
            cond(&s, INITIALIZED).message.as_deref(),
            Some("containers with incomplete status: [setup]")
        );
    }

    #[test]
    fn terminal_phase_stays_terminal() {
        let p = pod(Some(RestartPolicy::Never), &[], &["job"]);
        let rt = runtime(
            vec![sandbox(false, None)],
            vec![ctr("job", Rs::Exited, 1, 0, 0)],
        );
        let mut done = run(&p, &rt, &[], None);
        assert_eq!(done.phase.as_deref(), Some(SUCCEEDED));
        done.reason = Some("Completed".into());

        // the runtime forgot everything: the old terminated statuses and the phase stay
        let s = run(&p, &runtime(vec![], vec![]), &[], Some(&done));
        assert_eq!(s.phase.as_deref(), Some(SUCCEEDED));
        assert_eq!(s.reason.as_deref(), Some("Completed"));
        assert_eq!(exit_code(&s.container_statuses[0].state), Some(0));

        // a container the runtime shows running again cannot bring it back to Running
        let rt = runtime(
            vec![sandbox(true, Some("10.1.0.7"))],
            vec![ctr("job", Rs::Running, 50, 0, 0)],
        );
        assert_eq!(
            run(&p, &rt, &[], Some(&done)).phase.as_deref(),
            Some(SUCCEEDED)
        );

        // the API server's terminal phase wins over a different computed one
        let mut api = p.clone();
        api.status.phase = Some(FAILED.into());
        let rt = runtime(vec![], vec![ctr("job", Rs::Exited, 1, 0, 0)]);
        assert_eq!(run(&api, &rt, &[], None).phase.as_deref(), Some(FAILED));
        // a phase change drops the reason of the previous phase
        assert_eq!(run(&api, &rt, &[], Some(&done)).reason, None);
    }

    #[test]
    fn host_network_pod_uses_host_ip() {
        let mut p = pod(None, &[], &["agent"]);
        p.spec.host_network = true;
        let mut sb = sandbox(true, None);
        sb.host_network = true;
        let rt = runtime(vec![sb], vec![ctr("agent", Rs::Running, 1, 0, 0)]);
        let s = run(&p, &rt, &[], None);
        assert_eq!(s.pod_ip.as_deref(), Some(HOST));
        assert_eq!(s.pod_i_ps, [PodIp { ip: HOST.into() }]);
        assert_eq!(cond(&s, POD_READY_TO_START_CONTAINERS).status, "True");

        // a pod-network pod whose sandbox has no IP needs a new sandbox
        let p = pod(None, &[], &["agent"]);
        let rt = runtime(vec![sandbox(true, None)], vec![]);
        let s = run(&p, &rt, &[], None);
        assert_eq!(s.pod_ip, None);
        assert_eq!(cond(&s, POD_READY_TO_START_CONTAINERS).status, "False");
    }

    #[test]
    fn pod_ip_survives_sandbox_stop() {
        let p = pod(Some(RestartPolicy::Never), &[], &["job"]);
        let rt = runtime(
            vec![sandbox(true, Some("10.1.0.7"))],
            vec![ctr("job", Rs::Running, 1, 0, 0)],
        );
        let first = run(&p, &rt, &[], None);
        let rt = runtime(
            vec![sandbox(false, Some("10.1.0.7"))],
            vec![ctr("job", Rs::Exited, 1, 0, 0)],
        );
        let mut stale = first.clone();
        stale.pod_i_ps = vec![PodIp {
            ip: "10.1.0.6".into(),
        }];
        let s = run(&p, &rt, &[], Some(&stale));
        assert_eq!(s.pod_ip.as_deref(), Some("10.1.0.6"));
        assert_eq!(cond(&s, POD_READY_TO_START_CONTAINERS).status, "False");
        // a new ready sandbox without an address yet: no stale IP
        let rt = runtime(
            vec![sandbox(true, None), sandbox(false, Some("10.1.0.7"))],
            vec![ctr("job", Rs::Exited, 1, 0, 0)],
        );
        assert_eq!(run(&p, &rt, &[], Some(&stale)).pod_ip, None);
    }

    #[test]
    fn transition_times_move_only_on_change() {
        let p = pod(None, &[], &["app"]);
        let sb = || vec![sandbox(true, Some("10.1.0.5"))];
        let mut old = run(&p, &runtime(sb(), vec![]), &[], None);
        for c in &mut old.conditions {
            c.last_transition_time = Some("2024-05-01T11:00:00Z".into());
        }
        old.start_time = Some("2024-05-01T11:00:00Z".into());

        // nothing changed: all times kept
        let same = run(&p, &runtime(sb(), vec![]), &[], Some(&old));
        assert!(
            same.conditions
                .iter()
                .all(|c| c.last_transition_time.as_deref() == Some("2024-05-01T11:00:00Z"))
        );
        assert_eq!(same.start_time.as_deref(), Some("2024-05-01T11:00:00Z"));

        // the container started: Ready and ContainersReady moved to now, the others stayed
        let s = run(
            &p,
            &runtime(sb(), vec![ctr("app", Rs::Running, 5, 0, 0)]),
            &[],
            Some(&old),
        );
        for c in &s.conditions {
            let moved = c.type_ == READY || c.type_ == CONTAINERS_READY;
            let want = if moved {
                "2024-05-01T12:10:00Z"
            } else {
                "2024-05-01T11:00:00Z"
            };
            assert_eq!(c.last_transition_time.as_deref(), Some(want), "{}", c.type_);
        }
        assert_eq!(s.start_time.as_deref(), Some("2024-05-01T11:00:00Z"));
    }

    #[test]
    fn foreign_conditions_and_qos_class_are_kept() {
        let mut p = pod(None, &[], &["app"]);
        p.status.conditions = vec![
            condition(
                "DisruptionTarget",
                true,
                Some("EvictionByEvictionAPI"),
                None,
            ),
            condition(READY, true, None, None),
        ];
        p.status.qos_class = Some("Burstable".into());
        let s = run(&p, &runtime(vec![], vec![]), &[], None);
        assert_eq!(s.conditions.len(), 6);
        assert_eq!(s.conditions[0].type_, "DisruptionTarget");
        assert_eq!(s.conditions[0].last_transition_time, None);
        assert_eq!(cond(&s, READY).status, "False");
        assert_eq!(s.qos_class.as_deref(), Some("Burstable"));
    }

    #[test]
    fn vanished_containers_count_as_stopped() {
        let p = pod(None, &[], &["app"]);
        let sb = || vec![sandbox(true, Some("10.1.0.5"))];
        let old = run(
            &p,
            &runtime(sb(), vec![ctr("app", Rs::Running, 1, 0, 4)]),
            &[],
            None,
        );

        // the runtime reports it in an unknown state
        let s = run(
            &p,
            &runtime(sb(), vec![ctr("app", Rs::Unknown, 1, 0, 4)]),
            &[],
            Some(&old),
        );
        let c = &s.container_statuses[0];
        let t = c.state.terminated.as_ref().unwrap();
        assert_eq!(
            (t.exit_code, t.reason.as_deref()),
            (137, Some(STATUS_UNKNOWN))
        );
        assert_eq!(c.restart_count, 5);
        assert_eq!(s.phase.as_deref(), Some(RUNNING));

        // the runtime lost it altogether
        let s = run(&p, &runtime(sb(), vec![]), &[], Some(&old));
        let c = &s.container_statuses[0];
        assert_eq!(waiting_reason(c), Some(CONTAINER_CREATING));
        assert_eq!(
            c.last_state.terminated.as_ref().unwrap().reason.as_deref(),
            Some(STATUS_UNKNOWN)
        );
        assert_eq!(c.restart_count, 5);
        assert_eq!(s.phase.as_deref(), Some(RUNNING));

        // a created, never started instance waits
        let s = run(
            &p,
            &runtime(sb(), vec![ctr("app", Rs::Created, 1, 0, 0)]),
            &[],
            None,
        );
        assert_eq!(
            s.container_statuses[0].state.waiting,
            Some(ContainerStateWaiting::default())
        );
        assert_eq!(s.phase.as_deref(), Some(PENDING));
    }

    #[test]
    fn app_statuses_are_sorted_by_name_and_init_statuses_keep_spec_order() {
        let p = pod(None, &["zinit", "ainit"], &["web", "app"]);
        let rt = runtime(
            vec![sandbox(true, Some("10.1.0.5"))],
            vec![
                ctr("zinit", Rs::Exited, 0, 0, 0),
                ctr("ainit", Rs::Exited, 12, 0, 0),
                ctr("web", Rs::Running, 30, 0, 0),
                ctr("app", Rs::Running, 31, 0, 0),
            ],
        );
        let s = run(&p, &rt, &[], None);
        let names = |v: &[ContainerStatus]| v.iter().map(|c| c.name.clone()).collect::<Vec<_>>();
        assert_eq!(names(&s.container_statuses), ["app", "web"]);
        assert_eq!(names(&s.init_container_statuses), ["zinit", "ainit"]);
        assert_eq!(s.phase.as_deref(), Some(RUNNING));
    }

    #[test]
    fn readiness_gates_hold_ready_until_their_conditions_are_true() {
        let mut p = pod(None, &[], &["app"]);
        p.spec.readiness_gates = vec![crate::api::PodReadinessGate {
            condition_type: "example.com/lb".into(),
        }];
        let rt = runtime(
            vec![sandbox(true, Some("10.1.0.5"))],
            vec![ctr("app", Rs::Running, 2, 0, 0)],
        );
        let s = run(&p, &rt, &[], None);
        assert_eq!(cond(&s, CONTAINERS_READY).status, "True");
        let r = cond(&s, READY);
        assert_eq!(r.status, "False");
        assert_eq!(r.reason.as_deref(), Some("ReadinessGatesNotReady"));
        assert_eq!(
            r.message.as_deref(),
            Some(
                "corresponding condition of pod readiness gate \"example.com/lb\" does not exist."
            )
        );
        p.status.conditions = vec![PodCondition {
            type_: "example.com/lb".into(),
            status: "False".into(),
            ..Default::default()
        }];
        let s = run(&p, &rt, &[], None);
        assert_eq!(
            cond(&s, READY).message.as_deref(),
            Some("the status of pod readiness gate \"example.com/lb\" is not \"True\", but False")
        );
        p.status.conditions[0].status = "True".into();
        let s = run(&p, &rt, &[], None);
        assert_eq!(cond(&s, READY).status, "True");
        // the gate's own condition is kept, the kubelet does not own it
        assert_eq!(cond(&s, "example.com/lb").status, "True");
    }

    #[test]
    fn a_gate_changed_in_the_api_needs_a_sync_and_a_stale_status_does_not_undo_it() {
        let gate = |status: &str| PodCondition {
            type_: "example.com/lb".into(),
            status: status.into(),
            ..Default::default()
        };
        let mut p = pod(None, &[], &["app"]);
        p.spec.readiness_gates = vec![crate::api::PodReadinessGate {
            condition_type: "example.com/lb".into(),
        }];
        let rt = runtime(
            vec![sandbox(true, Some("10.1.0.5"))],
            vec![ctr("app", Rs::Running, 2, 0, 0)],
        );
        // The status as picolet sent it: the gate missing, Ready False.
        let sent = run(&p, &rt, &[], None);
        p.status = sent.clone();
        assert!(!readiness_needs_reconcile(&p));
        // Someone sets the gate's condition True: Ready must follow.
        p.status.conditions.insert(0, gate("True"));
        assert!(readiness_needs_reconcile(&p));
        // A status generated before the change keeps the apiserver's gate when it is sent.
        let mut stale = sent.clone();
        merge_foreign_conditions(&mut stale, &p.status);
        assert_eq!(cond(&stale, "example.com/lb").status, "True");
        assert_eq!(cond(&stale, READY).status, "False");
        // The node's DisruptionTarget (an eviction) is sent even though the apiserver lacks it.
        let mut evicted = failed_by_kubelet(&sent, EVICTED, "low on memory", NOW, true);
        merge_foreign_conditions(&mut evicted, &p.status);
        assert_eq!(cond(&evicted, DISRUPTION_TARGET).status, "True");
        assert_eq!(cond(&evicted, "example.com/lb").status, "True");
        // Regenerated from the updated pod, Ready is True and nothing more is needed.
        p.status = run(&p, &rt, &[], Some(&sent));
        assert_eq!(cond(&p.status, READY).status, "True");
        assert!(!readiness_needs_reconcile(&p));
        // Without gates, status changes never need a sync for readiness.
        p.spec.readiness_gates.clear();
        p.status.conditions[0] = gate("False");
        assert!(!readiness_needs_reconcile(&p));
    }

    #[test]
    fn init_containers_rerunning_in_a_new_sandbox_make_the_pod_pending_as_upstream() {
        // The kubelet's getPhase counts a running regular init container as pending whatever
        // ran before (only sidecars are excused once an app container runs).
        let p = pod(None, &["init"], &["app"]);
        let rt = runtime(
            vec![sandbox(true, Some("10.1.0.6"))],
            vec![
                ctr("init", Rs::Exited, 0, 0, 0),
                ctr("app", Rs::Exited, 12, 137, 0),
                ctr("init", Rs::Running, 40, 0, 1),
            ],
        );
        let s = run(&p, &rt, &[], None);
        assert_eq!(s.phase.as_deref(), Some(PENDING));
    }
}

/// The reason of a pod the eviction manager stopped.
pub const EVICTED: &str = "Evicted";
/// The reason and message of a pod stopped past its `activeDeadlineSeconds`, as upstream's.
pub const DEADLINE_EXCEEDED: &str = "DeadlineExceeded";
pub const DEADLINE_MESSAGE: &str = "Pod was active on the node longer than the specified deadline";

/// The status of a pod the node stops for good, from its last status: evicted or stopped for
/// the node's shutdown (with a `DisruptionTarget` condition, reason `TerminationByKubelet`, as
/// upstream), or past its active deadline; Ready/ContainersReady false at once.
///
/// Phase Failed with `reason` and `message`, and the `DisruptionTarget` condition, only once no
/// container can still be running, as upstream's status manager holds them back
/// (`mergePodStatus`): while one still runs, the phase, reason and message stay as they were.
/// Once its containers are stopped
/// (`killed`), each container that was running shows terminated with exit code 137 (SIGKILL's,
/// as the runtime reports it) and one that never ran shows upstream's
/// `ContainerStatusUnknown`.
pub fn failed_by_kubelet(
    prev: &PodStatus,
    reason: &str,
    message: &str,
    now: i64,
    killed: bool,
) -> PodStatus {
    let mut s = prev.clone();
    let could_run = !killed
        && prev
            .init_container_statuses
            .iter()
            .chain(&prev.container_statuses)
            .chain(&prev.ephemeral_container_statuses)
            .any(|c| c.state.running.is_some());
    if !could_run {
        s.phase = Some(FAILED.into());
        s.reason = Some(reason.to_owned());
        s.message = Some(message.to_owned());
    }
    let at = rfc3339(now);
    let set = |conds: &mut Vec<PodCondition>, type_: &str, status: &str, reason: &str, msg| {
        set_condition(conds, type_, status, reason, msg, &at);
    };
    if !could_run && (reason == EVICTED || reason == crate::nodeshutdown::REASON) {
        set(
            &mut s.conditions,
            DISRUPTION_TARGET,
            "True",
            "TerminationByKubelet",
            Some(message.to_owned()),
        );
    }
    set(&mut s.conditions, READY, "False", "PodFailed", None);
    set(
        &mut s.conditions,
        CONTAINERS_READY,
        "False",
        "PodFailed",
        None,
    );
    if killed {
        terminate_unfinished(&mut s, |c, started| {
            let ran = started.is_some();
            ContainerStateTerminated {
                exit_code: 137,
                signal: None,
                reason: Some(
                    if ran {
                        "Error"
                    } else {
                        "ContainerStatusUnknown"
                    }
                    .into(),
                ),
                message: (!ran).then(|| {
                    "The container could not be located when the pod was terminated".into()
                }),
                started_at: started,
                finished_at: Some(at.clone()),
                container_id: c.container_id.clone(),
            }
        });
    }
    s
}

/// Condition `type_` replaced by one with this status and reason; its transition time kept when
/// the status is the same, else `at`.
fn set_condition(
    conds: &mut Vec<PodCondition>,
    type_: &str,
    status: &str,
    reason: &str,
    message: Option<String>,
    at: &str,
) {
    let keep = conds
        .iter()
        .find(|c| c.type_ == type_ && c.status == status)
        .and_then(|c| c.last_transition_time.clone());
    conds.retain(|c| c.type_ != type_);
    conds.push(PodCondition {
        type_: type_.into(),
        status: status.into(),
        last_probe_time: None,
        last_transition_time: keep.or_else(|| Some(at.to_owned())),
        reason: Some(reason.into()),
        message,
        observed_generation: None,
    });
}

/// A pod deleted through the API whose containers have all stopped is terminal, as the kubelet
/// makes it (getPhase with the pod terminal): Succeeded when every app container exited 0,
/// else Failed, and no longer ready. A phase already terminal stays.
pub fn terminal_after_deletion(s: &mut PodStatus, now: i64) {
    if terminal(&s.phase).is_some() {
        return;
    }
    let all_succeeded = !s.container_statuses.is_empty()
        && s.container_statuses.iter().all(|c| {
            c.state
                .terminated
                .as_ref()
                .is_some_and(|t| t.exit_code == 0)
        });
    let (phase, reason) = if all_succeeded {
        (SUCCEEDED, "PodCompleted")
    } else {
        (FAILED, "PodFailed")
    };
    s.phase = Some(phase.into());
    let at = rfc3339(now);
    set_condition(&mut s.conditions, READY, "False", reason, None, &at);
    set_condition(
        &mut s.conditions,
        CONTAINERS_READY,
        "False",
        reason,
        None,
        &at,
    );
}

/// Every init and app container not yet terminated shows terminated as `terminated` says (given
/// the container's status and when its running state began), no longer ready or started.
pub fn terminate_unfinished(
    s: &mut PodStatus,
    mut terminated: impl FnMut(&ContainerStatus, Option<String>) -> ContainerStateTerminated,
) {
    for c in s
        .init_container_statuses
        .iter_mut()
        .chain(s.container_statuses.iter_mut())
    {
        c.ready = false;
        if c.state.terminated.is_some() {
            continue;
        }
        let started = c.state.running.take().and_then(|r| r.started_at);
        c.state.waiting = None;
        c.started = Some(false);
        c.state.terminated = Some(terminated(c, started));
    }
}

#[cfg(test)]
mod evicted_tests {
    use super::*;

    /// A running pod, ready since 2026-01-01.
    fn running_and_ready() -> PodStatus {
        PodStatus {
            phase: Some(RUNNING.into()),
            conditions: vec![PodCondition {
                type_: READY.into(),
                status: "True".into(),
                last_transition_time: Some("2026-01-01T00:00:00Z".into()),
                ..Default::default()
            }],
            ..Default::default()
        }
    }

    #[test]
    fn deleted_pod_is_terminal() {
        let exited = |code| ContainerStatus {
            state: ContainerState {
                terminated: Some(ContainerStateTerminated {
                    exit_code: code,
                    ..Default::default()
                }),
                ..Default::default()
            },
            ..Default::default()
        };
        let running = running_and_ready();
        let mut s = running.clone();
        s.container_statuses = vec![exited(0), exited(0)];
        terminal_after_deletion(&mut s, 5_000_000_000);
        assert_eq!(s.phase.as_deref(), Some(SUCCEEDED));
        let ready = s.conditions.iter().find(|c| c.type_ == READY).unwrap();
        assert_eq!(
            (ready.status.as_str(), ready.reason.as_deref()),
            ("False", Some("PodCompleted"))
        );
        assert_eq!(
            ready.last_transition_time.as_deref(),
            Some("1970-01-01T00:00:05Z")
        );
        let mut s = running.clone();
        s.container_statuses = vec![exited(0), exited(143)];
        terminal_after_deletion(&mut s, 5_000_000_000);
        assert_eq!(s.phase.as_deref(), Some(FAILED));
        // A terminal phase stays as it was.
        let mut s = running;
        s.phase = Some(SUCCEEDED.into());
        s.container_statuses = vec![exited(1)];
        terminal_after_deletion(&mut s, 5_000_000_000);
        assert_eq!(s.phase.as_deref(), Some(SUCCEEDED));
    }

    #[test]
    fn evicted_pod_status() {
        let prev = PodStatus {
            container_statuses: vec![
                ContainerStatus {
                    name: "app".into(),
                    ready: true,
                    container_id: Some("containerd://abc".into()),
                    state: ContainerState {
                        running: Some(ContainerStateRunning {
                            started_at: Some("2026-01-01T00:00:01Z".into()),
                        }),
                        ..Default::default()
                    },
                    ..Default::default()
                },
                ContainerStatus {
                    name: "never".into(),
                    state: ContainerState {
                        waiting: Some(ContainerStateWaiting {
                            reason: Some("ImagePullBackOff".into()),
                            message: None,
                        }),
                        ..Default::default()
                    },
                    ..Default::default()
                },
            ],
            ..running_and_ready()
        };
        let msg = "The node was low on resource: memory. ";
        let now = 1_767_225_600_000_000_000; // 2026-01-01T00:00:00Z
        let s = failed_by_kubelet(&prev, EVICTED, msg, now, false);
        // A container still runs: no terminal phase yet, as upstream's status manager.
        assert_eq!(
            (
                s.phase.as_deref(),
                s.reason.as_deref(),
                s.message.as_deref()
            ),
            (
                prev.phase.as_deref(),
                prev.reason.as_deref(),
                prev.message.as_deref()
            )
        );
        assert_eq!(prev.phase.as_deref(), Some("Running"));
        let cond = |s: &PodStatus, t: &str| s.conditions.iter().find(|c| c.type_ == t).cloned();
        assert_eq!(
            cond(&s, "DisruptionTarget"),
            None,
            "held back with the phase"
        );
        assert_eq!(cond(&s, READY).unwrap().status, "False");
        assert!(
            s.container_statuses[0].state.running.is_some(),
            "not killed yet"
        );
        let k = failed_by_kubelet(&s, EVICTED, msg, now + 5_000_000_000, true);
        assert_eq!(k.phase.as_deref(), Some(FAILED));
        assert_eq!(k.reason.as_deref(), Some("Evicted"));
        assert_eq!(k.message.as_deref(), Some(msg));
        let app = &k.container_statuses[0];
        let t = app.state.terminated.as_ref().unwrap();
        assert_eq!((t.exit_code, t.reason.as_deref()), (137, Some("Error")));
        assert_eq!(t.started_at.as_deref(), Some("2026-01-01T00:00:01Z"));
        assert_eq!(t.finished_at.as_deref(), Some("2026-01-01T00:00:05Z"));
        assert_eq!(t.container_id.as_deref(), Some("containerd://abc"));
        assert!(app.state.running.is_none() && !app.ready);
        let n = k.container_statuses[1].state.terminated.as_ref().unwrap();
        assert_eq!(n.reason.as_deref(), Some("ContainerStatusUnknown"));
        assert!(k.container_statuses[1].state.waiting.is_none());
        let d = cond(&k, "DisruptionTarget").unwrap();
        assert_eq!(
            (d.status.as_str(), d.reason.as_deref(), d.message.as_deref()),
            ("True", Some("TerminationByKubelet"), Some(msg))
        );
        assert_eq!(
            d.last_transition_time.as_deref(),
            Some("2026-01-01T00:00:05Z"),
            "the time it was sent, once the containers stopped"
        );
    }

    #[test]
    fn a_pod_with_nothing_running_fails_at_once() {
        let prev = PodStatus {
            container_statuses: vec![ContainerStatus {
                name: "never".into(),
                state: ContainerState {
                    waiting: Some(ContainerStateWaiting {
                        reason: Some("ImagePullBackOff".into()),
                        message: None,
                    }),
                    ..Default::default()
                },
                ..Default::default()
            }],
            phase: Some(PENDING.into()),
            ..Default::default()
        };
        let reason = crate::nodeshutdown::REASON;
        let s = failed_by_kubelet(&prev, reason, "gone", 0, false);
        assert_eq!(
            (
                s.phase.as_deref(),
                s.reason.as_deref(),
                s.message.as_deref()
            ),
            (Some(FAILED), Some(reason), Some("gone"))
        );
        assert!(s.conditions.iter().any(|c| c.type_ == DISRUPTION_TARGET));
    }
}
