//! Desired spec vs observed runtime state → the actions that converge them.
//!
//! A pure function, recomputed from scratch on every sync (level-triggered): nothing here
//! remembers what it decided last time, so a restarted picolet computes the same actions from the
//! same state and adopts running pods untouched.

use crate::api::{Container, Pod, RestartPolicy};
use crate::kubecontainer::{ContainerState, ContainerStatus, PodRuntimeStatus, SandboxState};
use crate::prober::results::{Kind, ProbeResult, Results};

/// Why a running container is being killed.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Kill {
    pub id: Box<str>,
    pub name: Box<str>,
    pub reason: String,
    /// A grace period that replaces the pod's (a failed probe's
    /// `terminationGracePeriodSeconds`).
    pub grace: Option<i64>,
}

/// What the actions need to know of the probes of a running container instance.
pub trait Health {
    /// The probe (liveness or startup) whose failure means the instance must be restarted.
    fn failed(&self, c: &Container, id: &str) -> Option<Kind>;
    /// Whether the instance has started: its startup probe passed, or it has none.
    fn started(&self, c: &Container, id: &str) -> bool;
}

/// No probe results: every container is alive and started.
#[derive(Debug, Clone, Copy, Default)]
pub struct NoProbes;

impl Health for NoProbes {
    fn failed(&self, _: &Container, _: &str) -> Option<Kind> {
        None
    }
    fn started(&self, _: &Container, _: &str) -> bool {
        true
    }
}

impl Health for Results {
    fn failed(&self, _: &Container, id: &str) -> Option<Kind> {
        [Kind::Liveness, Kind::Startup]
            .into_iter()
            .find(|k| self.get(id, *k) == Some(ProbeResult::Failure))
    }
    fn started(&self, c: &Container, id: &str) -> bool {
        Results::started(self, c, id)
    }
}

#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct PodActions {
    /// Stop every container and the sandbox before anything else.
    pub kill_pod: bool,
    /// Create a new sandbox (with `attempt`) and start containers in it.
    pub create_sandbox: bool,
    /// The sandbox to start containers in, when it is kept.
    pub sandbox_id: Option<Box<str>>,
    pub attempt: u32,
    /// Index into `spec.initContainers` of the next init container to start.
    pub next_init_container: Option<usize>,
    /// Indexes into `spec.containers`.
    pub containers_to_start: Vec<usize>,
    /// Indexes into `spec.initContainers` of sidecars to (re)start once the pod is initialized.
    pub sidecars_to_start: Vec<usize>,
    /// Indexes into `spec.ephemeralContainers` of those never started yet (an ephemeral
    /// container runs once: one that exited is not started again).
    pub ephemeral_to_start: Vec<usize>,
    pub containers_to_kill: Vec<Kill>,
}

pub fn restart_policy(pod: &Pod) -> RestartPolicy {
    pod.spec.restart_policy.unwrap_or(RestartPolicy::Always)
}

fn succeeded(s: Option<&ContainerStatus>) -> bool {
    s.is_some_and(|s| s.state == ContainerState::Exited && s.exit_code == 0)
}

/// Whether a container that exited with `code` is started again (upstream's
/// ContainerShouldRestart): the first of its `restartPolicyRules` whose exit codes match
/// decides when its action is `Restart`, then its own `restartPolicy`, then the pod's.
pub fn container_should_restart(pod: &Pod, c: &Container, code: i32) -> bool {
    if let Some(own) = c.restart_policy.as_deref() {
        if c.restart_policy_rules
            .iter()
            .find(|r| r.matches(code))
            .is_some_and(|r| r.action == "Restart")
        {
            return true;
        }
        match own {
            "Always" => return true,
            "OnFailure" => return code != 0,
            "Never" => return false,
            _ => {}
        }
    }
    match restart_policy(pod) {
        RestartPolicy::Always => true,
        RestartPolicy::OnFailure => code != 0,
        RestartPolicy::Never => false,
    }
}

/// Whether a container killed while running (a failed probe) is started again: its own
/// `restartPolicy` when set, else the pod's, other than `Never` (no exit code to match rules
/// against, as upstream).
fn restarts_after_kill(pod: &Pod, c: &Container) -> bool {
    match c.restart_policy.as_deref() {
        Some(own) => own != "Never",
        None => restart_policy(pod) != RestartPolicy::Never,
    }
}

/// Whether a container that is not running should be (re)started.
pub fn should_restart(pod: &Pod, c: &Container, s: Option<&ContainerStatus>) -> bool {
    let Some(s) = s else { return true };
    match s.state {
        ContainerState::Running => false,
        // Created but never started, or lost track of: start afresh.
        ContainerState::Created | ContainerState::Unknown => true,
        ContainerState::Exited => container_should_restart(pod, c, s.exit_code),
    }
}

/// Decides whether the pod needs a new sandbox: returns (create, attempt, kept sandbox).
fn sandbox_changed(pod: &Pod, st: &PodRuntimeStatus) -> (bool, u32, Option<Box<str>>) {
    let Some(newest) = st.sandboxes.first() else {
        return (true, 0, None);
    };
    // Past every attempt the runtime still holds, not only the newest one's: a sandbox whose
    // set-up failed and could not be cleaned up stays listed (containerd 1.6 keeps it, with
    // no creation time, so it sorts last) and keeps its name, attempt included, reserved until
    // it is removed. Upstream counts from the newest; its next sandbox then waits for container
    // GC to remove the old one.
    let next = st
        .sandboxes
        .iter()
        .map(|s| s.attempt)
        .max()
        .unwrap_or(newest.attempt)
        .saturating_add(1);
    let ready = st
        .sandboxes
        .iter()
        .filter(|s| s.state == SandboxState::Ready)
        .count();
    if ready > 1 || newest.state != SandboxState::Ready {
        return (true, next, Some(newest.id.clone()));
    }
    if newest.host_network != pod.spec.host_network {
        return (true, next, Some(newest.id.clone()));
    }
    if !pod.spec.host_network && newest.ip.is_none() {
        return (true, next, Some(newest.id.clone()));
    }
    (false, newest.attempt, Some(newest.id.clone()))
}

/// Whether the pod's newest sandbox is one containers can run in (the sync keeps it).
pub fn sandbox_usable(pod: &Pod, st: &PodRuntimeStatus) -> bool {
    !sandbox_changed(pod, st).0
}

/// Where the init containers stand.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Init {
    /// All have succeeded (sidecars: started), or app containers have already run.
    Done,
    /// One is running (a sidecar: has not started yet): wait for it.
    Wait,
    /// (Re)start this one; `failed` when its last run failed.
    Start { index: usize, failed: bool },
    /// Kill this running sidecar, whose startup or liveness probe failed, and start it again.
    Restart { index: usize, kind: Kind },
}

fn next_init(pod: &Pod, st: &PodRuntimeStatus, health: &dyn Health) -> Init {
    let inits = &pod.spec.init_containers;
    // A running app container proves the init containers ran (upstream's rule); an exited one
    // may be left from a sandbox that died, whose successor must run them again.
    let app_running = pod.spec.containers.iter().any(|c| {
        st.latest(&c.name)
            .is_some_and(|s| s.state == ContainerState::Running)
    });
    if inits.is_empty() || app_running {
        return Init::Done;
    }
    for (i, c) in inits.iter().enumerate() {
        let s = st.latest(&c.name);
        if c.is_sidecar() {
            // A sidecar counts once it runs and has started; the next one waits for that. One
            // that failed its startup or liveness probe is restarted first.
            match s {
                Some(s) if s.state == ContainerState::Running => {
                    if let Some(kind) = health.failed(c, &s.id) {
                        return Init::Restart { index: i, kind };
                    }
                    if health.started(c, &s.id) {
                        continue;
                    }
                    return Init::Wait;
                }
                _ => {
                    return Init::Start {
                        index: i,
                        failed: false,
                    };
                }
            }
        }
        match s {
            None => {
                return Init::Start {
                    index: i,
                    failed: false,
                };
            }
            Some(s) => match s.state {
                ContainerState::Running => return Init::Wait,
                ContainerState::Exited if s.exit_code == 0 => continue,
                ContainerState::Exited => {
                    return Init::Start {
                        index: i,
                        failed: true,
                    };
                }
                ContainerState::Created | ContainerState::Unknown => {
                    return Init::Start {
                        index: i,
                        failed: false,
                    };
                }
            },
        }
    }
    Init::Done
}

/// The kill of a running instance whose liveness or startup probe failed; whether it is
/// started again follows the restart policy (`restart`).
fn probe_kill(c: &Container, s: &ContainerStatus, kind: Kind, restart: bool) -> Kill {
    let probe = kind.spec(c);
    Kill {
        id: s.id.clone(),
        name: s.name.clone(),
        reason: format!(
            "Container {} failed {} probe{}",
            c.name,
            kind.name().to_lowercase(),
            if restart { ", will be restarted" } else { "" }
        ),
        grace: probe.and_then(|p| p.termination_grace_period_seconds),
    }
}

/// [`compute_with`] without probes.
#[cfg(test)]
pub fn compute(pod: &Pod, st: &PodRuntimeStatus, hashes: &[u64]) -> PodActions {
    compute_with(pod, st, hashes, &NoProbes)
}

/// Computes what to do to bring the runtime to the pod's spec. `hashes[i]` is the spec hash of
/// `spec.containers[i]`; `health` tells which running instances failed a liveness or startup
/// probe, and which have started.
pub fn compute_with(
    pod: &Pod,
    st: &PodRuntimeStatus,
    hashes: &[u64],
    health: &dyn Health,
) -> PodActions {
    let policy = restart_policy(pod);
    let (create, attempt, sandbox_id) = sandbox_changed(pod, st);
    let mut a = PodActions {
        create_sandbox: create,
        attempt,
        sandbox_id: if create { None } else { sandbox_id },
        ..PodActions::default()
    };

    if create {
        // A sandbox that died under a pod that must not restart ends the pod; so does one
        // stopped because every app container exited for good (their own policies said so:
        // the pod's phase is terminal, and the kubelet syncs it no more).
        let done = pod.spec.containers.iter().all(|c| {
            st.latest(&c.name).is_some_and(|s| {
                s.state == ContainerState::Exited && !container_should_restart(pod, c, s.exit_code)
            })
        });
        if (policy == RestartPolicy::Never || done) && attempt > 0 && !st.containers.is_empty() {
            a.create_sandbox = false;
            a.kill_pod = st.sandboxes.iter().any(|s| s.state == SandboxState::Ready)
                || st.running().next().is_some();
            return a;
        }
        a.kill_pod = !st.sandboxes.is_empty() || !st.containers.is_empty();
        // Those that ran once with success are not run again under OnFailure (the
        // container's own policy, when set, instead of the pod's).
        a.containers_to_start = (0..pod.spec.containers.len())
            .filter(|&i| {
                let c = &pod.spec.containers[i];
                let run_once = match c.restart_policy.as_deref() {
                    Some(own) => own == "OnFailure",
                    None => policy == RestartPolicy::OnFailure,
                };
                !(run_once && succeeded(st.latest(&c.name)))
            })
            .collect();
        if a.containers_to_start.is_empty() {
            a.create_sandbox = false;
            return a;
        }
        if !pod.spec.init_containers.is_empty() {
            // App containers wait for the init containers, in a later sync.
            a.next_init_container = Some(0);
            a.containers_to_start.clear();
        }
        return a;
    }

    // Containers no longer in the spec are killed in every case.
    let names = || {
        pod.spec
            .init_containers
            .iter()
            .chain(&pod.spec.containers)
            .chain(&pod.spec.ephemeral_containers)
            .map(|c| &*c.name)
    };
    for c in st.running() {
        if !names().any(|n| n == &*c.name) {
            a.containers_to_kill.push(Kill {
                id: c.id.clone(),
                name: c.name.clone(),
                reason: "container is not in the pod spec".into(),
                grace: None,
            });
        }
    }

    // Ephemeral containers start even while the pod initializes, each once only.
    a.ephemeral_to_start = (0..pod.spec.ephemeral_containers.len())
        .filter(|&i| st.latest(&pod.spec.ephemeral_containers[i].name).is_none())
        .collect();

    match next_init(pod, st, health) {
        Init::Wait => return a, // an init container is running: wait for it
        Init::Start { index, failed } => {
            let c = &pod.spec.init_containers[index];
            let code = st.latest(&c.name).map_or(0, |s| s.exit_code);
            if failed && !container_should_restart(pod, c, code) {
                a.kill_pod = true;
            } else {
                a.next_init_container = Some(index);
            }
            return a;
        }
        Init::Restart { index, kind } => {
            let c = &pod.spec.init_containers[index];
            if let Some(s) = st.latest(&c.name) {
                a.containers_to_kill.push(probe_kill(c, s, kind, true));
            }
            a.next_init_container = Some(index);
            return a;
        }
        Init::Done => {}
    }

    // Sidecars keep running beside the app containers, whatever the pod's restart policy.
    for (i, c) in pod.spec.init_containers.iter().enumerate() {
        if !c.is_sidecar() {
            continue;
        }
        match st.latest(&c.name) {
            Some(s) if s.state == ContainerState::Running => {
                if let Some(kind) = health.failed(c, &s.id) {
                    a.containers_to_kill.push(probe_kill(c, s, kind, true));
                    a.sidecars_to_start.push(i);
                }
            }
            Some(s) if s.state == ContainerState::Unknown => {
                a.containers_to_kill.push(Kill {
                    id: s.id.clone(),
                    name: s.name.clone(),
                    reason: "container is in unknown state, will be restarted".into(),
                    grace: None,
                });
                a.sidecars_to_start.push(i);
            }
            _ => a.sidecars_to_start.push(i),
        }
    }

    let mut keep = 0usize;
    for (i, c) in pod.spec.containers.iter().enumerate() {
        let s = st.latest(&c.name);
        if let Some(u) = s.filter(|s| s.state == ContainerState::Unknown) {
            // It may still run: stop it before a new instance starts.
            a.containers_to_kill.push(Kill {
                id: u.id.clone(),
                name: u.name.clone(),
                reason: "container is in unknown state, will be restarted".into(),
                grace: None,
            });
        }
        match s {
            Some(s) if s.state == ContainerState::Running => {
                let want = hashes.get(i).copied().unwrap_or(0);
                if !crate::kubecontainer::hash_matches(c, s.hash, want) {
                    a.containers_to_kill.push(Kill {
                        id: s.id.clone(),
                        name: s.name.clone(),
                        reason: format!(
                            "container {} definition changed, will be restarted",
                            c.name
                        ),
                        grace: None,
                    });
                    a.containers_to_start.push(i);
                } else if let Some(kind) = health.failed(c, &s.id) {
                    // Restarted whatever the exit code, unless the policy is Never.
                    let restart = restarts_after_kill(pod, c);
                    a.containers_to_kill.push(probe_kill(c, s, kind, restart));
                    if restart {
                        a.containers_to_start.push(i);
                    }
                } else {
                    keep += 1;
                }
            }
            _ => {
                if should_restart(pod, c, s) {
                    a.containers_to_start.push(i);
                }
            }
        }
    }
    if keep == 0 && a.containers_to_start.is_empty() {
        // Nothing runs and nothing will: stop the sandbox too (and the sidecars with it).
        a.kill_pod = true;
        a.containers_to_kill.clear();
        a.sidecars_to_start.clear();
        a.ephemeral_to_start.clear();
    }
    a
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::api::Container;
    use crate::kubecontainer::SandboxStatus;

    fn pod(policy: RestartPolicy, inits: &[&str], apps: &[&str]) -> Pod {
        let mk = |n: &&str| Container {
            name: (*n).into(),
            image: "img".into(),
            ..Default::default()
        };
        let mut p = Pod::default();
        p.metadata.name = "p".into();
        p.spec.restart_policy = Some(policy);
        p.spec.init_containers = inits.iter().map(mk).collect();
        p.spec.containers = apps.iter().map(mk).collect();
        p
    }

    fn sandbox(id: &str, attempt: u32, state: SandboxState) -> SandboxStatus {
        SandboxStatus {
            id: id.into(),
            attempt,
            state,
            created_at: i64::from(attempt),
            ip: Some("10.0.0.2".into()),
            host_network: false,
        }
    }

    fn ctr(name: &str, state: ContainerState, exit: i32, created: i64) -> ContainerStatus {
        ContainerStatus {
            id: format!("{name}-{created}").into(),
            name: name.into(),
            state,
            created_at: created,
            started_at: created,
            finished_at: 0,
            exit_code: exit,
            image: "img".into(),
            image_ref: "sha256:1".into(),
            reason: "".into(),
            message: "".into(),
            hash: 1,
            restart_count: 0,
            sandbox_id: "s".into(),
        }
    }

    fn status(sbs: Vec<SandboxStatus>, cs: Vec<ContainerStatus>) -> PodRuntimeStatus {
        PodRuntimeStatus {
            sandboxes: sbs,
            containers: cs,
            ..Default::default()
        }
    }

    use ContainerState::{Created, Exited, Running};
    use RestartPolicy::{Always, Never, OnFailure};

    /// Health where the named instances failed a probe of `kind` and none has started.
    struct Failed(Kind, &'static [&'static str]);

    impl Health for Failed {
        fn failed(&self, _: &Container, id: &str) -> Option<Kind> {
            self.1.contains(&id).then_some(self.0)
        }
        fn started(&self, _: &Container, _: &str) -> bool {
            false
        }
    }

    #[test]
    fn a_sidecar_failing_its_startup_probe_during_init_is_restarted() {
        let mut p = pod(Never, &["side"], &["a"]);
        p.spec.init_containers[0].restart_policy = Some("Always".into());
        p.spec.init_containers[0].startup_probe = Some(crate::api::Probe {
            termination_grace_period_seconds: Some(5),
            ..Default::default()
        });
        let st = status(
            vec![sandbox("s", 0, SandboxState::Ready)],
            vec![ctr("side", Running, 0, 1)],
        );
        // Not started yet, no failure: wait for it.
        let a = compute_with(&p, &st, &[1], &Failed(Kind::Startup, &[]));
        assert_eq!(
            a,
            PodActions {
                sandbox_id: Some("s".into()),
                ..Default::default()
            }
        );
        // Its startup probe failed: killed with the probe's grace period and started again,
        // whatever the pod's restart policy.
        let a = compute_with(&p, &st, &[1], &Failed(Kind::Startup, &["side-1"]));
        assert_eq!(a.next_init_container, Some(0));
        assert!(!a.kill_pod);
        assert_eq!(
            a.containers_to_kill,
            vec![Kill {
                id: "side-1".into(),
                name: "side".into(),
                reason: "Container side failed startup probe, will be restarted".into(),
                grace: Some(5),
            }]
        );
    }

    #[test]
    fn fresh_pod_creates_sandbox_and_starts_everything() {
        let a = compute(
            &pod(Always, &[], &["a", "b"]),
            &status(vec![], vec![]),
            &[1, 1],
        );
        assert!(a.create_sandbox && !a.kill_pod);
        assert_eq!(a.attempt, 0);
        assert_eq!(a.containers_to_start, vec![0, 1]);
        assert_eq!(a.next_init_container, None);
    }

    #[test]
    fn fresh_pod_with_inits_starts_first_init() {
        let a = compute(
            &pod(Always, &["i1", "i2"], &["a"]),
            &status(vec![], vec![]),
            &[1],
        );
        assert!(a.create_sandbox);
        assert_eq!(a.next_init_container, Some(0));
        assert!(a.containers_to_start.is_empty());
    }

    #[test]
    fn steady_state_does_nothing() {
        let st = status(
            vec![sandbox("s", 0, SandboxState::Ready)],
            vec![ctr("a", Running, 0, 5)],
        );
        let a = compute(&pod(Always, &[], &["a"]), &st, &[1]);
        assert_eq!(
            a,
            PodActions {
                sandbox_id: Some("s".into()),
                ..Default::default()
            }
        );
    }

    #[test]
    fn dead_sandbox_is_recreated_with_next_attempt() {
        let st = status(
            vec![sandbox("s", 2, SandboxState::NotReady)],
            vec![ctr("a", Exited, 137, 5)],
        );
        let a = compute(&pod(Always, &[], &["a"]), &st, &[1]);
        assert!(a.create_sandbox && a.kill_pod);
        assert_eq!(a.attempt, 3);
        assert_eq!(a.containers_to_start, vec![0]);
    }

    #[test]
    fn the_next_attempt_is_past_every_listed_one() {
        // The newest by creation time is attempt 0; a failed sandbox without a creation time
        // (listed last) holds attempt 1: the next is 2, whose name no sandbox holds.
        let mut leftover = sandbox("s1", 1, SandboxState::NotReady);
        leftover.created_at = 0;
        let mut newest = sandbox("s0", 0, SandboxState::NotReady);
        newest.created_at = 5;
        let st = status(vec![newest, leftover], vec![]);
        let a = compute(&pod(Always, &[], &["a"]), &st, &[1]);
        assert!(a.create_sandbox);
        assert_eq!(a.attempt, 2);
    }

    #[test]
    fn two_ready_sandboxes_are_reconciled() {
        let st = status(
            vec![
                sandbox("s2", 1, SandboxState::Ready),
                sandbox("s1", 0, SandboxState::Ready),
            ],
            vec![],
        );
        let a = compute(&pod(Always, &[], &["a"]), &st, &[1]);
        assert!(a.create_sandbox && a.kill_pod);
        assert_eq!(a.attempt, 2);
    }

    #[test]
    fn sandbox_without_ip_is_recreated_unless_host_network() {
        let mut sb = sandbox("s", 0, SandboxState::Ready);
        sb.ip = None;
        let st = status(vec![sb.clone()], vec![ctr("a", Running, 0, 5)]);
        assert!(compute(&pod(Always, &[], &["a"]), &st, &[1]).create_sandbox);
        let mut p = pod(Always, &[], &["a"]);
        p.spec.host_network = true;
        sb.host_network = true;
        let st = status(vec![sb], vec![ctr("a", Running, 0, 5)]);
        assert!(!compute(&p, &st, &[1]).create_sandbox);
    }

    #[test]
    fn host_network_toggle_recreates_sandbox() {
        let mut p = pod(Always, &[], &["a"]);
        p.spec.host_network = true;
        let st = status(
            vec![sandbox("s", 0, SandboxState::Ready)],
            vec![ctr("a", Running, 0, 5)],
        );
        let a = compute(&p, &st, &[1]);
        assert!(a.create_sandbox && a.kill_pod);
    }

    #[test]
    fn never_pod_whose_sandbox_died_is_not_recreated() {
        let st = status(
            vec![sandbox("s", 0, SandboxState::NotReady)],
            vec![ctr("a", Exited, 0, 5)],
        );
        let a = compute(&pod(Never, &[], &["a"]), &st, &[1]);
        assert!(!a.create_sandbox);
        assert!(!a.kill_pod);
        assert!(a.containers_to_start.is_empty());
    }

    #[test]
    fn on_failure_pod_all_succeeded_gets_no_new_sandbox() {
        let st = status(
            vec![sandbox("s", 0, SandboxState::NotReady)],
            vec![ctr("a", Exited, 0, 5)],
        );
        let a = compute(&pod(OnFailure, &[], &["a"]), &st, &[1]);
        assert!(!a.create_sandbox);
    }

    #[test]
    fn on_failure_new_sandbox_starts_only_failed() {
        let st = status(
            vec![sandbox("s", 0, SandboxState::NotReady)],
            vec![ctr("a", Exited, 0, 5), ctr("b", Exited, 1, 5)],
        );
        let a = compute(&pod(OnFailure, &[], &["a", "b"]), &st, &[1, 1]);
        assert!(a.create_sandbox);
        assert_eq!(a.containers_to_start, vec![1]);
    }

    #[test]
    fn exited_containers_follow_restart_policy() {
        let sb = || vec![sandbox("s", 0, SandboxState::Ready)];
        let cs = || {
            vec![
                ctr("ok", Exited, 0, 5),
                ctr("bad", Exited, 2, 5),
                ctr("run", Running, 0, 5),
            ]
        };
        let apps = ["ok", "bad", "run"];
        let h = [1, 1, 1];
        assert_eq!(
            compute(&pod(Always, &[], &apps), &status(sb(), cs()), &h).containers_to_start,
            vec![0, 1]
        );
        assert_eq!(
            compute(&pod(OnFailure, &[], &apps), &status(sb(), cs()), &h).containers_to_start,
            vec![1]
        );
        assert!(
            compute(&pod(Never, &[], &apps), &status(sb(), cs()), &h)
                .containers_to_start
                .is_empty()
        );
    }

    #[test]
    fn a_containers_own_policy_and_rules_override_the_pods() {
        use crate::api::{ContainerRestartRule, ContainerRestartRuleOnExitCodes};
        let sb = || vec![sandbox("s", 0, SandboxState::Ready)];
        let rule = |op: &str, codes: &[i32]| ContainerRestartRule {
            action: "Restart".into(),
            exit_codes: Some(ContainerRestartRuleOnExitCodes {
                operator: op.into(),
                values: codes.to_vec(),
            }),
        };
        // Pod Never, container Always: restarted after a success too.
        let mut p = pod(Never, &[], &["a"]);
        p.spec.containers[0].restart_policy = Some("Always".into());
        let st = status(sb(), vec![ctr("a", Exited, 0, 5)]);
        let a = compute(&p, &st, &[1]);
        assert_eq!(a.containers_to_start, vec![0]);
        assert!(!a.kill_pod);
        // Pod Always, container Never: left exited, and the pod is done; its stopped sandbox
        // is not made again.
        let mut p = pod(Always, &[], &["a"]);
        p.spec.containers[0].restart_policy = Some("Never".into());
        let a = compute(&p, &status(sb(), vec![ctr("a", Exited, 1, 5)]), &[1]);
        assert!(a.containers_to_start.is_empty() && a.kill_pod);
        let stopped = vec![sandbox("s", 0, SandboxState::NotReady)];
        let a = compute(&p, &status(stopped, vec![ctr("a", Exited, 1, 5)]), &[1]);
        assert!(!a.create_sandbox && !a.kill_pod, "{a:?}");
        // Container Never with a rule on 42: restarted on 42 only; the first matching rule
        // decides.
        p.spec.containers[0].restart_policy_rules = vec![rule("In", &[42])];
        let a = compute(&p, &status(sb(), vec![ctr("a", Exited, 42, 5)]), &[1]);
        assert_eq!(a.containers_to_start, vec![0]);
        let a = compute(&p, &status(sb(), vec![ctr("a", Exited, 1, 5)]), &[1]);
        assert!(a.containers_to_start.is_empty());
        p.spec.containers[0].restart_policy_rules = vec![rule("NotIn", &[0, 1])];
        assert!(container_should_restart(&p, &p.spec.containers[0], 3));
        assert!(!container_should_restart(&p, &p.spec.containers[0], 1));
        // A container OnFailure in a pod Always: not run again after a success.
        let mut p = pod(Always, &[], &["a"]);
        p.spec.containers[0].restart_policy = Some("OnFailure".into());
        assert!(!container_should_restart(&p, &p.spec.containers[0], 0));
        assert!(container_should_restart(&p, &p.spec.containers[0], 2));
        // A failed init container under a pod Never is retried when its own policy says so.
        let mut p = pod(Never, &["i"], &["a"]);
        p.spec.init_containers[0].restart_policy = Some("OnFailure".into());
        let a = compute(&p, &status(sb(), vec![ctr("i", Exited, 1, 5)]), &[1]);
        assert_eq!(a.next_init_container, Some(0));
        assert!(!a.kill_pod);
        p.spec.init_containers[0].restart_policy = Some("Never".into());
        let a = compute(&p, &status(sb(), vec![ctr("i", Exited, 1, 5)]), &[1]);
        assert!(a.kill_pod);
    }

    #[test]
    fn all_done_never_pod_stops_sandbox() {
        let st = status(
            vec![sandbox("s", 0, SandboxState::Ready)],
            vec![ctr("a", Exited, 1, 5)],
        );
        let a = compute(&pod(Never, &[], &["a"]), &st, &[1]);
        assert!(a.kill_pod && !a.create_sandbox);
    }

    #[test]
    fn newest_status_per_name_wins() {
        let st = status(
            vec![sandbox("s", 0, SandboxState::Ready)],
            vec![ctr("a", Exited, 1, 5), ctr("a", Running, 0, 9)],
        );
        let a = compute(&pod(Always, &[], &["a"]), &st, &[1]);
        assert!(a.containers_to_start.is_empty() && !a.kill_pod);
    }

    #[test]
    fn changed_hash_replaces_container() {
        let st = status(
            vec![sandbox("s", 0, SandboxState::Ready)],
            vec![ctr("a", Running, 0, 5)],
        );
        let a = compute(&pod(Always, &[], &["a"]), &st, &[2]);
        assert_eq!(a.containers_to_start, vec![0]);
        assert_eq!(a.containers_to_kill.len(), 1);
        assert_eq!(&*a.containers_to_kill[0].id, "a-5");
        assert!(!a.kill_pod);
    }

    #[test]
    fn container_removed_from_spec_is_killed() {
        let st = status(
            vec![sandbox("s", 0, SandboxState::Ready)],
            vec![ctr("a", Running, 0, 5), ctr("gone", Running, 0, 5)],
        );
        let a = compute(&pod(Always, &[], &["a"]), &st, &[1]);
        assert_eq!(a.containers_to_kill.len(), 1);
        assert_eq!(&*a.containers_to_kill[0].name, "gone");
    }

    #[test]
    fn init_containers_run_in_order() {
        let p = pod(Always, &["i1", "i2"], &["a"]);
        let sb = || vec![sandbox("s", 0, SandboxState::Ready)];
        let a = compute(&p, &status(sb(), vec![ctr("i1", Running, 0, 5)]), &[1]);
        assert_eq!(a.next_init_container, None);
        assert!(a.containers_to_start.is_empty() && !a.kill_pod);
        let a = compute(&p, &status(sb(), vec![ctr("i1", Exited, 0, 5)]), &[1]);
        assert_eq!(a.next_init_container, Some(1));
        let a = compute(
            &p,
            &status(sb(), vec![ctr("i1", Exited, 0, 5), ctr("i2", Exited, 0, 6)]),
            &[1],
        );
        assert_eq!(a.next_init_container, None);
        assert_eq!(a.containers_to_start, vec![0]);
    }

    #[test]
    fn failed_init_is_retried_unless_never() {
        let sb = || vec![sandbox("s", 0, SandboxState::Ready)];
        let cs = || vec![ctr("i1", Exited, 3, 5)];
        let a = compute(&pod(Always, &["i1"], &["a"]), &status(sb(), cs()), &[1]);
        assert_eq!(a.next_init_container, Some(0));
        let a = compute(&pod(OnFailure, &["i1"], &["a"]), &status(sb(), cs()), &[1]);
        assert_eq!(a.next_init_container, Some(0));
        let a = compute(&pod(Never, &["i1"], &["a"]), &status(sb(), cs()), &[1]);
        assert_eq!(a.next_init_container, None);
        assert!(a.kill_pod);
    }

    #[test]
    fn created_but_not_started_container_is_started() {
        let st = status(
            vec![sandbox("s", 0, SandboxState::Ready)],
            vec![ctr("a", Created, 0, 5)],
        );
        assert_eq!(
            compute(&pod(Never, &[], &["a"]), &st, &[1]).containers_to_start,
            vec![0]
        );
    }

    #[test]
    fn inits_run_again_when_only_dead_app_containers_remain() {
        // After a reboot: the new sandbox exists, the app container of the old one has exited.
        let st = status(
            vec![sandbox("s2", 1, SandboxState::Ready)],
            vec![ctr("a", Exited, 137, 3)],
        );
        let a = compute(&pod(Always, &["i1"], &["a"]), &st, &[1]);
        assert_eq!(a.next_init_container, Some(0));
        assert!(a.containers_to_start.is_empty());
    }

    #[test]
    fn unknown_container_is_killed_then_restarted() {
        let st = status(
            vec![sandbox("s", 0, SandboxState::Ready)],
            vec![ctr("a", ContainerState::Unknown, 0, 5)],
        );
        let a = compute(&pod(Always, &[], &["a"]), &st, &[1]);
        assert_eq!(a.containers_to_start, vec![0]);
        assert_eq!(a.containers_to_kill.len(), 1);
        assert_eq!(&*a.containers_to_kill[0].id, "a-5");
    }

    #[test]
    fn inits_are_not_rerun_once_app_containers_exist() {
        let st = status(
            vec![sandbox("s", 0, SandboxState::Ready)],
            vec![ctr("a", Running, 0, 9)],
        );
        let a = compute(&pod(Always, &["i1"], &["a"]), &st, &[1]);
        assert_eq!(a.next_init_container, None);
        assert!(a.containers_to_start.is_empty());
    }
}
