//! The loop's decisions, first as the pure step alone, then end to end inside the process: the
//! real loop, pod workers, PLEG and runtime manager against the in-process fake runtime, with a
//! fake clock. Scenarios that take tens of seconds against the binary run here in milliseconds.

use std::cell::RefCell;
use std::path::PathBuf;
use std::rc::Rc;
use std::time::Duration;

use super::*;
use crate::api::Pod;
use crate::config::{Mux, Snapshot, Source};
use crate::cri::fake::{ContainerState, FakeRuntime, PodSandboxState};
use crate::kuberuntime::NodeContext;
use crate::pleg::{Cache, Pleg};
use crate::pod_workers::{self, Done, PodWorkers, Work};
use crate::rt::{self, FakeClock};
use crate::status::manager::StatusManager;

const IMAGE: &str = "picolet.local/busybox:1";

fn pod(uid: &str, name: &str, command: &str) -> Pod {
    let v = serde_json::json!({
        "apiVersion": "v1", "kind": "Pod",
        "metadata": {"name": name, "namespace": "default", "uid": uid},
        "spec": {
            "terminationGracePeriodSeconds": 5,
            "containers": [{"name": "main", "image": IMAGE, "command": ["sh", "-c", command]}]
        }
    });
    let mut p: Pod = serde_json::from_value(v).unwrap();
    crate::config::static_pod::apply_api_defaults(&mut p);
    p
}

fn snapshot(pods: Vec<Pod>) -> Snapshot {
    Snapshot {
        source: Source::File,
        pods,
    }
}

/// The apiserver's pods for this node, as its source hands them over.
fn api(pods: Vec<Pod>) -> Input {
    Input::Snapshot(Snapshot {
        source: Source::Api,
        pods,
    })
}

/// The pod as the apiserver shows it once deleted with a grace period.
fn deleted_with_grace(p: &Pod, grace: i64) -> Pod {
    let mut p = p.clone();
    p.metadata.deletion_timestamp = Some("2026-01-01T00:00:00Z".into());
    p.metadata.deletion_grace_period_seconds = Some(grace);
    p
}

// -------------------------------------------------------------------------------------------
// The step alone
// -------------------------------------------------------------------------------------------

fn new_state() -> LoopState {
    state_of(&[Source::File], None, None)
}

/// A loop over `sources` that syncs every 60 s, with the node (for admission) and the
/// allocation manager given.
fn state_of(
    sources: &[Source],
    node: Option<crate::admission::NodeInfo>,
    allocation: Option<crate::allocation::Manager>,
) -> LoopState {
    LoopState::new(
        Mux::new(sources),
        LoopConfig {
            sync_frequency: Duration::from_secs(60),
            node,
            allocation,
        },
    )
}

fn syncs(cmds: &[Command]) -> Vec<String> {
    cmds.iter()
        .filter_map(|c| match c {
            Command::Dispatch(Work::Sync(p)) => Some(p.metadata.uid.clone()),
            _ => None,
        })
        .collect()
}

fn terminations(cmds: &[Command]) -> Vec<String> {
    cmds.iter()
        .filter_map(|c| match c {
            Command::Dispatch(Work::Terminate { uid, .. }) => Some(uid.clone()),
            _ => None,
        })
        .collect()
}

/// Steps with the report bookkeeping the loop does for dispatched work.
fn step(st: &mut LoopState, i: Input, now: std::time::Instant, view: View<'_>) -> Vec<Command> {
    let cmds = st.step(i, now, view);
    for c in &cmds {
        if let Command::Dispatch(w) = c {
            st.dispatched(w.uid(), true);
        }
    }
    cmds
}

/// A runtime cache holding one pod (with nothing of it listed), as after a restart.
fn runtime_holds(uid: &str, name: &str) -> Cache {
    let mut cache = Cache::default();
    cache.put(
        crate::kubecontainer::PodRuntimeStatus {
            uid: uid.into(),
            name: name.into(),
            namespace: "default".into(),
            ..Default::default()
        },
        0,
        None,
    );
    cache
}

/// A runtime cache holding pod `u1` (web) with two old sandboxes that are not ready, listed.
fn runtime_holds_dead_sandboxes() -> Cache {
    use crate::kubecontainer::{PodRuntimeStatus, SandboxState, SandboxStatus};
    let sb = |id: &str| SandboxStatus {
        id: id.into(),
        attempt: 0,
        state: SandboxState::NotReady,
        created_at: 0,
        ip: None,
        host_network: false,
    };
    let mut cache = Cache::default();
    cache.put(
        PodRuntimeStatus {
            uid: "u1".into(),
            name: "web".into(),
            namespace: "default".into(),
            sandboxes: vec![sb("s2"), sb("s1")],
            ..Default::default()
        },
        0,
        Some(1),
    );
    cache
}

/// The loop after pod `u1` (web) was given to it at `t0`, with no sync in flight.
fn state_with_web(view: View, t0: std::time::Instant) -> LoopState {
    let mut st = new_state();
    step(
        &mut st,
        Input::Snapshot(snapshot(vec![pod("u1", "web", "sleep 1")])),
        t0,
        view,
    );
    // Whatever the sync it started: the pod has no work in flight for these tests.
    st.in_flight.clear();
    st
}

/// How many collections of pod `u1` the commands hold.
fn collects_u1(cmds: &[Command]) -> usize {
    cmds.iter()
        .filter(|c| matches!(c, Command::CollectGarbage(s) if &*s.uid == "u1"))
        .count()
}

#[test]
fn nothing_syncs_before_the_first_listing() {
    let cache = Cache::default();
    let mut st = new_state();
    let t0 = std::time::Instant::now();
    let unlisted = View {
        listed: false,
        cache: &cache,
    };
    let cmds = step(
        &mut st,
        Input::Snapshot(snapshot(vec![pod("a", "web", "x")])),
        t0,
        unlisted,
    );
    assert!(syncs(&cmds).is_empty());
    assert!(matches!(cmds[0], Command::ReportPending(_)));
    assert!(syncs(&step(&mut st, Input::Tick, t0, unlisted)).is_empty());
    let listed = View {
        listed: true,
        cache: &cache,
    };
    assert_eq!(syncs(&step(&mut st, Input::Tick, t0, listed)), vec!["a"]);
}

fn with_host_port(mut p: Pod, port: i32) -> Pod {
    p.spec.containers[0].ports.push(crate::api::ContainerPort {
        container_port: port,
        host_port: Some(port),
        ..Default::default()
    });
    p
}

fn rejections(cmds: &[Command]) -> Vec<(String, String)> {
    cmds.iter()
        .filter_map(|c| match c {
            Command::Reject(p, r) => Some((p.metadata.uid.clone(), r.reason.clone())),
            _ => None,
        })
        .collect()
}

#[test]
fn admission_rejects_a_new_pod_once_and_never_runs_it() {
    let cache = Cache::default();
    let view = View {
        listed: true,
        cache: &cache,
    };
    let mut node = crate::admission::NodeInfo {
        name: "edge".into(),
        milli_cpu: 1000,
        memory: 1 << 30,
        pods: 110,
        ..Default::default()
    };
    node.labels = crate::admission::NodeInfo::node_labels("edge", &[]);
    let mut st = state_of(&[Source::File], Some(node), None);
    let t0 = std::time::Instant::now();
    let a = with_host_port(pod("a", "web", "x"), 8080);
    let mut b = with_host_port(pod("b", "web2", "x"), 8080);
    let mut c = pod("c", "ssd", "x");
    c.spec.node_selector.insert("disktype".into(), "ssd".into());
    // Oldest first: a takes the port, b finds it taken.
    b.metadata.creation_timestamp = Some("2030-01-02T00:00:00Z".into());
    let cmds = step(
        &mut st,
        Input::Snapshot(snapshot(vec![b.clone(), a.clone(), c.clone()])),
        t0,
        view,
    );
    assert_eq!(syncs(&cmds), vec!["a"]);
    assert_eq!(
        rejections(&cmds),
        vec![
            ("c".to_owned(), "NodeAffinity".to_owned()),
            ("b".to_owned(), "NodePorts".to_owned())
        ]
    );
    // Never synced, by tick or update; still desired.
    for _ in 0..2 {
        let cmds = step(&mut st, Input::Tick, t0 + Duration::from_secs(120), view);
        assert!(!syncs(&cmds).contains(&"b".to_owned()), "{cmds:?}");
    }
    b.metadata.labels.insert("v".into(), "2".into());
    let cmds = step(
        &mut st,
        Input::Snapshot(snapshot(vec![a.clone(), b.clone(), c.clone()])),
        t0,
        view,
    );
    assert!(
        syncs(&cmds).is_empty() && rejections(&cmds).is_empty(),
        "{cmds:?}"
    );
    assert!(st.pods.contains("b") && st.rejected.contains("b"));
    // Once a is gone, a new pod may take the port; b stays rejected (admission is once).
    let d = with_host_port(pod("d", "web3", "x"), 8080);
    let cmds = step(&mut st, Input::Snapshot(snapshot(vec![b, c, d])), t0, view);
    assert_eq!(terminations(&cmds), vec!["a"]);
    assert_eq!(syncs(&cmds), vec!["d"]);
    assert!(rejections(&cmds).is_empty());

    // A pod that ran before a restart and no longer fits is stopped, its status kept.
    let cache = runtime_holds("f", "ran");
    let ran = View {
        listed: true,
        cache: &cache,
    };
    let mut f = pod("f", "ran", "x");
    f.spec.node_selector.insert("disktype".into(), "hdd".into());
    let cmds = step(&mut st, Input::Snapshot(snapshot(vec![f])), t0, ran);
    assert_eq!(
        rejections(&cmds),
        vec![("f".to_owned(), "NodeAffinity".to_owned())]
    );
    assert!(cmds.iter().any(|c| matches!(
        c,
        Command::Dispatch(Work::Terminate { uid, evicted: true, .. }) if uid == "f"
    )));
    // An API pod rejected before a restart comes back Failed: it stays rejected, never runs.
    let mut e = pod("e", "web4", "x");
    e.status.phase = Some("Failed".into());
    e.status.reason = Some("NodePorts".into());
    e.status.message = Some("Pod was rejected: Predicate NodePorts failed: ...".into());
    let mut st = new_state();
    let cmds = step(&mut st, Input::Snapshot(snapshot(vec![e])), t0, view);
    assert!(syncs(&cmds).is_empty(), "{cmds:?}");
    assert!(matches!(cmds[0], Command::ReportPending(_)));
    assert!(st.rejected.contains("e"));
}

/// A node of one CPU and 1 GiB, labelled as picolet labels itself.
fn one_cpu_node() -> crate::admission::NodeInfo {
    let mut node = crate::admission::NodeInfo {
        name: "edge".into(),
        milli_cpu: 1000,
        memory: 1 << 30,
        pods: 110,
        ..Default::default()
    };
    node.labels = crate::admission::NodeInfo::node_labels("edge", &[]);
    node
}

/// The pod with its first container requesting `q` of CPU.
fn cpu(mut p: Pod, q: &str) -> Pod {
    p.spec.containers[0]
        .resources
        .requests
        .insert("cpu".into(), q.parse().unwrap());
    p
}

#[test]
fn after_a_restart_admission_weighs_pods_with_their_allocated_resources_not_a_pending_resize() {
    let cache = Cache::default();
    let view = View {
        listed: true,
        cache: &cache,
    };
    let node = one_cpu_node();
    // a runs with 300m allocated; its spec asks 600m, a resize deferred because b holds 600m.
    let a_allocated = cpu(pod("a", "resized", "x"), "300m");
    let alloc = crate::allocation::Manager::in_memory();
    alloc.allocate(&a_allocated, &[], None);
    let a = cpu(pod("a", "resized", "x"), "600m");
    let mut b = cpu(pod("b", "other", "x"), "600m");
    b.metadata.creation_timestamp = Some("2030-01-02T00:00:00Z".into());
    let mut st = state_of(&[Source::File], Some(node), Some(alloc.clone()));
    assert_eq!(alloc.active_others("a"), None, "nothing said before a step");
    let cmds = step(
        &mut st,
        Input::Snapshot(snapshot(vec![a.clone(), b])),
        std::time::Instant::now(),
        view,
    );
    let a_again = a;
    assert!(rejections(&cmds).is_empty(), "{cmds:?}");
    let mut s = syncs(&cmds);
    s.sort();
    assert_eq!(s, vec!["a", "b"]);
    // a's resize is weighed against b before b has been synced (the runtime manager has
    // not seen it yet), and a counts with what is allocated to it, not its spec.
    let uids = |v: Option<Vec<Pod>>| -> Vec<String> {
        v.unwrap_or_default()
            .into_iter()
            .map(|p| p.metadata.uid)
            .collect()
    };
    assert_eq!(uids(alloc.active_others("a")), vec!["b"]);
    let others_of_b = alloc.active_others("b").unwrap();
    assert_eq!(
        others_of_b[0].spec.containers[0].resources.requests["cpu"],
        "300m".parse().unwrap()
    );
    // A pod its source removed no longer counts, though it is still being stopped.
    step(
        &mut st,
        Input::Snapshot(snapshot(vec![a_again])),
        std::time::Instant::now(),
        view,
    );
    assert_eq!(uids(alloc.active_others("a")), Vec::<String>::new());
}

#[test]
fn a_pod_being_deleted_or_evicted_holds_its_room_until_it_has_stopped() {
    // Upstream's active pods: a pod whose termination was asked for counts until it has
    // stopped, so a new pod is not admitted into room a pod still stopping holds.
    let cache = Cache::default();
    let view = View {
        listed: true,
        cache: &cache,
    };
    let node = one_cpu_node();
    let mut st = state_of(&[Source::Api], Some(node), None);
    let t0 = std::time::Instant::now();
    let done = |uid: &str| Input::Done(Done::Terminated { uid: uid.into() });
    let a = cpu(pod("a", "old", "x"), "700m");
    assert_eq!(
        syncs(&step(&mut st, api(vec![a.clone()]), t0, view)),
        vec!["a"]
    );

    // a is deleted with a grace period: while it stops, b does not fit beside it.
    let a_deleting = deleted_with_grace(&a, 30);
    let cmds = step(&mut st, api(vec![a_deleting.clone()]), t0, view);
    assert_eq!(terminations(&cmds), vec!["a"]);
    let b = cpu(pod("b", "new", "x"), "700m");
    let cmds = step(&mut st, api(vec![a_deleting.clone(), b]), t0, view);
    assert_eq!(
        rejections(&cmds),
        vec![("b".to_owned(), "OutOfcpu".to_owned())]
    );
    // Once a has stopped, c (asking the same) is admitted.
    step(&mut st, done("a"), t0, view);
    let c = cpu(pod("c", "newer", "x"), "700m");
    let cmds = step(&mut st, api(vec![a_deleting, c.clone()]), t0, view);
    assert!(rejections(&cmds).is_empty(), "{cmds:?}");
    assert_eq!(syncs(&cmds), vec!["c"]);

    // c is evicted: it holds its room until its termination has ended, then not.
    let cmds = step(
        &mut st,
        Input::Evict {
            uid: "c".into(),
            grace: 0,
        },
        t0,
        view,
    );
    assert_eq!(terminations(&cmds), vec!["c"]);
    let d = cpu(pod("d", "after-eviction", "x"), "700m");
    let cmds = step(&mut st, api(vec![c.clone(), d]), t0, view);
    assert_eq!(
        rejections(&cmds),
        vec![("d".to_owned(), "OutOfcpu".to_owned())]
    );
    step(&mut st, done("c"), t0, view);
    let e = cpu(pod("e", "after-stop", "x"), "700m");
    let cmds = step(&mut st, api(vec![c, e]), t0, view);
    assert!(rejections(&cmds).is_empty(), "{cmds:?}");
    assert_eq!(syncs(&cmds), vec!["e"]);
}

#[test]
fn a_pod_that_ended_before_a_restart_is_not_run_again() {
    // An API pod stopped by a node shutdown comes back after the reboot Failed (from the
    // apiserver or the checkpoint): it never runs again, as upstream.
    let cache = Cache::default();
    let view = View {
        listed: true,
        cache: &cache,
    };
    let t0 = std::time::Instant::now();
    let mut p = pod("s", "sigterm", "x");
    p.status.phase = Some("Failed".into());
    p.status.reason = Some("Terminated".into());
    p.status.message = Some("Pod was terminated in response to imminent node shutdown.".into());
    let mut st = new_state();
    let cmds = step(
        &mut st,
        Input::Snapshot(snapshot(vec![p.clone()])),
        t0,
        view,
    );
    assert!(syncs(&cmds).is_empty(), "{cmds:?}");
    assert!(
        terminations(&cmds).is_empty(),
        "nothing of it runs: {cmds:?}"
    );
    assert!(matches!(cmds[0], Command::ReportPending(_)));
    assert!(st.evicted.contains("s"));
    assert!(!st.rejected.contains("s"));
    for s in 1..4 {
        let later = t0 + Duration::from_secs(s * 10);
        assert!(syncs(&step(&mut st, Input::Tick, later, view)).is_empty());
    }
    // Succeeded alike; and what the runtime still runs of such a pod is stopped, its status kept.
    let cache = runtime_holds("s", "sigterm");
    let running = View {
        listed: true,
        cache: &cache,
    };
    p.status.phase = Some("Succeeded".into());
    let mut st = new_state();
    let cmds = step(&mut st, Input::Snapshot(snapshot(vec![p])), t0, running);
    assert!(syncs(&cmds).is_empty(), "{cmds:?}");
    assert!(cmds.iter().any(|c| matches!(
        c,
        Command::Dispatch(Work::Terminate { uid, evicted: true, .. }) if uid == "s"
    )));
}

#[test]
fn an_edited_pod_waits_until_its_old_version_is_gone() {
    let cache = Cache::default();
    let view = View {
        listed: true,
        cache: &cache,
    };
    let mut st = new_state();
    let t0 = std::time::Instant::now();
    let cmds = step(
        &mut st,
        Input::Snapshot(snapshot(vec![pod("a", "web", "v1")])),
        t0,
        view,
    );
    assert_eq!(syncs(&cmds), vec!["a"]);
    step(
        &mut st,
        Input::Done(Done::Synced {
            uid: "a".into(),
            retry_after: None,
        }),
        t0,
        view,
    );
    // Edited: a new UID under the same name.
    let cmds = step(
        &mut st,
        Input::Snapshot(snapshot(vec![pod("b", "web", "v2")])),
        t0,
        view,
    );
    assert_eq!(terminations(&cmds), vec!["a"]);
    assert!(syncs(&cmds).is_empty(), "b must wait for a");
    let reason = st.start_blocked(st.pods.get("b").unwrap(), view);
    assert!(reason.unwrap().contains("previous pod a"));
    for s in 1..5 {
        let later = t0 + Duration::from_secs(s);
        assert!(syncs(&step(&mut st, Input::Tick, later, view)).is_empty());
    }
    // A failed termination is retried 2 s later; b still waits.
    let t5 = t0 + Duration::from_secs(5);
    step(
        &mut st,
        Input::Done(Done::TerminateFailed { uid: "a".into() }),
        t5,
        view,
    );
    assert!(
        terminations(&step(
            &mut st,
            Input::Tick,
            t5 + Duration::from_secs(1),
            view
        ))
        .is_empty()
    );
    let cmds = step(&mut st, Input::Tick, t5 + Duration::from_secs(2), view);
    assert_eq!(terminations(&cmds), vec!["a"]);
    assert!(syncs(&cmds).is_empty());
    let t8 = t0 + Duration::from_secs(8);
    let cmds = step(
        &mut st,
        Input::Done(Done::Terminated { uid: "a".into() }),
        t8,
        view,
    );
    assert!(
        cmds.iter()
            .any(|c| matches!(c, Command::EndWorker(u) if u == "a")),
        "a's worker ends once a is gone"
    );
    assert_eq!(syncs(&step(&mut st, Input::Tick, t8, view)), vec!["b"]);
}

#[test]
fn a_termination_that_keeps_failing_is_retried_less_and_less_often() {
    let cache = Cache::default();
    let view = View {
        listed: true,
        cache: &cache,
    };
    let mut st = new_state();
    let t0 = std::time::Instant::now();
    step(
        &mut st,
        Input::Snapshot(snapshot(vec![pod("a", "web", "v1")])),
        t0,
        view,
    );
    step(
        &mut st,
        Input::Done(Done::Synced {
            uid: "a".into(),
            retry_after: None,
        }),
        t0,
        view,
    );
    let cmds = step(&mut st, Input::Snapshot(snapshot(vec![])), t0, view);
    assert_eq!(terminations(&cmds), vec!["a"]);
    // Each failure doubles the wait before the next try: 2, 4, 8, ... s, up to 5 min.
    let mut now = t0;
    let mut waits = Vec::new();
    for _ in 0..10 {
        step(
            &mut st,
            Input::Done(Done::TerminateFailed { uid: "a".into() }),
            now,
            view,
        );
        let failed_at = now;
        loop {
            now += Duration::from_secs(1);
            if !terminations(&step(&mut st, Input::Tick, now, view)).is_empty() {
                break;
            }
        }
        waits.push((now - failed_at).as_secs());
    }
    assert_eq!(waits, [2, 4, 8, 16, 32, 64, 128, 256, 300, 300]);
    // Success forgets the count.
    step(
        &mut st,
        Input::Done(Done::Terminated { uid: "a".into() }),
        now,
        view,
    );
    assert!(st.terminating.is_empty());
}

#[test]
fn synced_pods_come_due_again_by_their_retry_or_the_sync_frequency() {
    let cache = Cache::default();
    let view = View {
        listed: true,
        cache: &cache,
    };
    let mut st = new_state();
    let t0 = std::time::Instant::now();
    step(
        &mut st,
        Input::Snapshot(snapshot(vec![pod("a", "a", "x"), pod("b", "b", "x")])),
        t0,
        view,
    );
    let done = |uid: &str, r: Option<u64>| {
        Input::Done(Done::Synced {
            uid: uid.into(),
            retry_after: r.map(Duration::from_secs),
        })
    };
    step(&mut st, done("a", Some(10)), t0, view);
    step(&mut st, done("b", Some(3600)), t0, view);
    let at = |s| t0 + Duration::from_secs(s);
    assert!(syncs(&step(&mut st, Input::Tick, at(9), view)).is_empty());
    assert_eq!(syncs(&step(&mut st, Input::Tick, at(10), view)), vec!["a"]);
    // A retry beyond the sync frequency is capped by it.
    assert!(syncs(&step(&mut st, Input::Tick, at(59), view)).is_empty());
    assert_eq!(syncs(&step(&mut st, Input::Tick, at(60), view)), vec!["b"]);
}

#[test]
fn housekeeping_waits_for_the_sources_and_the_runtime_then_removes_orphans() {
    let mut cache = Cache::default();
    cache.put(
        crate::kubecontainer::PodRuntimeStatus {
            uid: "orphan".into(),
            name: "old".into(),
            namespace: "default".into(),
            ..Default::default()
        },
        0,
        Some(7),
    );
    let mut st = new_state();
    let t0 = std::time::Instant::now();
    let listed = View {
        listed: true,
        cache: &cache,
    };
    let hk = || Input::Housekeeping {
        pod_dirs: vec!["orphan".into(), "stray".into()],
    };
    // No source seen yet: nothing is an orphan.
    assert!(step(&mut st, hk(), t0, listed).is_empty());
    step(&mut st, Input::Snapshot(snapshot(vec![])), t0, listed);
    let unlisted = View {
        listed: false,
        cache: &cache,
    };
    assert!(step(&mut st, hk(), t0, unlisted).is_empty());
    let cmds = step(&mut st, hk(), t0, listed);
    assert!(cmds.iter().any(|c| matches!(
        c,
        // the kubelet's 1 s override for orphans, whatever the containers were created with (7)
        Command::Dispatch(Work::Terminate { uid, grace: 1, .. }) if uid == "orphan"
    )));
    // The directory of a pod the runtime still holds stays; a stray one goes, once.
    let dirs: Vec<&str> = cmds
        .iter()
        .filter_map(|c| match c {
            Command::RemovePodDir(d) => Some(d.as_str()),
            _ => None,
        })
        .collect();
    assert_eq!(dirs, vec!["stray"]);
    let again = step(&mut st, hk(), t0, listed);
    assert!(!again.iter().any(|c| matches!(c, Command::RemovePodDir(_))));
    assert!(terminations(&again).is_empty(), "already terminating");
    step(&mut st, Input::Collected("stray".into()), t0, listed);
    let third = step(&mut st, hk(), t0, listed);
    assert!(
        third
            .iter()
            .any(|c| matches!(c, Command::RemovePodDir(d) if d == "stray"))
    );
}

#[test]
fn a_readiness_gate_set_in_the_apiserver_syncs_the_pod_and_other_status_changes_do_not() {
    use crate::api::{PodCondition, PodReadinessGate};
    let cache = Cache::default();
    let view = View {
        listed: true,
        cache: &cache,
    };
    let mut st = new_state();
    let t0 = std::time::Instant::now();
    let cond = |t: &str, s: &str| PodCondition {
        type_: t.into(),
        status: s.into(),
        ..Default::default()
    };
    let mut p = pod("a", "web", "x");
    p.spec.readiness_gates = vec![PodReadinessGate {
        condition_type: "example.com/lb".into(),
    }];
    let snap = |p: &Pod| Input::Snapshot(snapshot(vec![p.clone()]));
    assert_eq!(syncs(&step(&mut st, snap(&p), t0, view)), vec!["a"]);
    // The status the node sent comes back: nothing to do.
    p.status.conditions = vec![cond("ContainersReady", "True"), cond("Ready", "False")];
    p.status.conditions[1].message = Some(
        "corresponding condition of pod readiness gate \"example.com/lb\" does not exist.".into(),
    );
    assert!(syncs(&step(&mut st, snap(&p), t0, view)).is_empty());
    // Someone sets the gate: the pod syncs, so its Ready condition follows.
    p.status.conditions.push(cond("example.com/lb", "True"));
    assert_eq!(syncs(&step(&mut st, snap(&p), t0, view)), vec!["a"]);
}

#[test]
fn a_pod_deleted_through_the_api_stops_with_its_deletion_grace_then_is_finalized() {
    let cache = Cache::default();
    let view = View {
        listed: true,
        cache: &cache,
    };
    let mut st = state_of(&[Source::Api], None, None);
    let t0 = std::time::Instant::now();
    let p = pod("a", "web", "x");
    assert_eq!(
        syncs(&step(&mut st, api(vec![p.clone()]), t0, view)),
        vec!["a"]
    );
    let deleting = deleted_with_grace(&p, 2);
    let cmds = step(&mut st, api(vec![deleting.clone()]), t0, view);
    assert!(cmds.iter().any(|c| matches!(
        c,
        Command::Dispatch(Work::Terminate { uid, grace: 2, .. }) if uid == "a"
    )));
    assert!(!st.pods.contains("a"), "no longer desired");
    assert!(st.finalizable.is_empty(), "not before it stopped");
    let cmds = step(
        &mut st,
        Input::Done(Done::Terminated { uid: "a".into() }),
        t0,
        view,
    );
    assert!(syncs(&cmds).is_empty(), "never run again");
    assert_eq!(
        st.finalizable
            .get("a")
            .map(|p| p.metadata.deletion_timestamp.is_some()),
        Some(true),
        "the copy with its deletion"
    );
    // Gone from the apiserver afterwards: nothing left to finalize.
    step(&mut st, api(vec![]), t0, view);
    assert!(st.finalizable.is_empty());
}

#[test]
fn new_api_pods_wake_the_objects_fetcher_once_and_arrived_objects_sync_at_once() {
    let cache = Cache::default();
    let view = View {
        listed: true,
        cache: &cache,
    };
    let mut st = state_of(&[Source::Api, Source::File], None, None);
    let t0 = std::time::Instant::now();
    let wakes = |cmds: &[Command]| {
        cmds.iter()
            .filter(|c| matches!(c, Command::ApiPodsChanged))
            .count()
    };
    let (a, b) = (pod("a", "a", "x"), pod("b", "b", "x"));
    // Two new API pods: one wake-up for both, and both synced.
    let cmds = step(&mut st, api(vec![a.clone(), b.clone()]), t0, view);
    assert_eq!(wakes(&cmds), 1);
    assert_eq!(syncs(&cmds), vec!["a", "b"]);
    // An update wakes it too (what the pod uses may have changed); nothing new does not.
    let mut a2 = a.clone();
    a2.metadata.labels.insert("v".into(), "2".into());
    assert_eq!(
        wakes(&step(&mut st, api(vec![a2.clone(), b.clone()]), t0, view)),
        1
    );
    assert_eq!(
        wakes(&step(&mut st, api(vec![a2.clone(), b.clone()]), t0, view)),
        0
    );
    // Static pods use no objects from the apiserver.
    let cmds = step(
        &mut st,
        Input::Snapshot(snapshot(vec![pod("s", "s", "x")])),
        t0,
        view,
    );
    assert_eq!(syncs(&cmds), vec!["s"]);
    assert_eq!(wakes(&cmds), 0);

    // The first syncs failed (no token yet) and came due again in 2 s.
    for uid in ["a", "b"] {
        for _ in 0..2 {
            step(
                &mut st,
                Input::Done(Done::Synced {
                    uid: uid.into(),
                    retry_after: Some(Duration::from_secs(2)),
                }),
                t0,
                view,
            );
        }
    }
    // Their objects arrived: synced now, not at their due time; a pod gone or stopping is not.
    let cmds = step(
        &mut st,
        Input::Resync(vec!["a".into(), "gone".into()]),
        t0,
        view,
    );
    assert_eq!(syncs(&cmds), vec!["a"]);
    assert!(
        !st.due.contains_key("a"),
        "no second sync at its old due time"
    );
    assert!(st.due.contains_key("b"), "b keeps its due time");
    step(&mut st, api(vec![a2.clone()]), t0, view);
    assert!(st.terminating.contains_key("b"));
    assert!(syncs(&step(&mut st, Input::Resync(vec!["b".into()]), t0, view)).is_empty());
}

// -------------------------------------------------------------------------------------------
// The loop, workers, PLEG and runtime manager in process
// -------------------------------------------------------------------------------------------

struct Harness {
    clock: FakeClock,
    fake: FakeRuntime,
    kubelet: Rc<Kubelet>,
    src: async_channel::Sender<Snapshot>,
    dir: PathBuf,
    _tasks: Vec<rt::Task<()>>,
}

impl Drop for Harness {
    fn drop(&mut self) {
        // The pods' tmpfs volumes (a projected token, say) are real mounts when the tests run
        // as root: unmounted first, or each run would leave them behind.
        for m in crate::volume::mounts_under(&self.dir) {
            let _ = nix::mount::umount2(&m, nix::mount::MntFlags::MNT_DETACH);
        }
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}

fn harness(tag: &str) -> Harness {
    harness_with(tag, Source::File, crate::objects::Store::default())
}

/// The harness with the pods of one source, their volumes and environments made from `objects`.
fn harness_with(tag: &str, source: Source, objects: crate::objects::Store) -> Harness {
    harness_full(tag, source, objects, None)
}

/// The harness, with the node's allocatable when resizes are weighed against it.
fn harness_full(
    tag: &str,
    source: Source,
    objects: crate::objects::Store,
    allocatable: Option<crate::cm::Allocatable>,
) -> Harness {
    let clock = FakeClock::install();
    let dir = std::env::temp_dir().join(format!("picolet-loop-{tag}-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    let fake = FakeRuntime::new();
    fake.add_image(IMAGE);
    let node = NodeContext {
        node_name: "node".into(),
        node_ip: "192.0.2.1".into(),
        pod_logs_dir: dir.join("logs"),
        root_dir: dir.join("root"),
        ..Default::default()
    };
    let rt_svc = Rc::new(fake.clone());
    let mut rm =
        crate::kuberuntime::RuntimeManager::new(rt_svc.clone(), rt_svc, node).with_objects(objects);
    if let Some(a) = allocatable {
        rm = rm.with_allocatable(a);
    }
    let rm = Rc::new(rm);
    let cache = Rc::new(RefCell::new(Cache::default()));
    let status = Rc::new(StatusManager::new("192.0.2.1"));
    let (src_tx, src_rx) = async_channel::unbounded();
    let (ev_tx, ev_rx) = async_channel::unbounded();
    let (done_tx, done_rx) = async_channel::unbounded();
    let pleg = Rc::new(Pleg::new(rm.clone(), cache.clone(), ev_tx));
    let workers = PodWorkers::new(Rc::new(pod_workers::Shared {
        rm: rm.clone(),
        cache: cache.clone(),
        status: status.clone(),
        done: done_tx,
    }));
    status.set_probe_results(rm.probe_results());
    status.set_allocation(rm.allocation().clone());
    let prober = crate::prober::ProbeManager::new(rm.clone(), cache.clone(), "192.0.2.1");
    let kubelet = Rc::new(Kubelet::new(
        rm,
        cache,
        status,
        pleg.clone(),
        workers,
        prober,
        Mux::new(&[source]),
        LoopConfig {
            sync_frequency: Duration::from_secs(60),
            node: None,
            allocation: None,
        },
    ));
    let tasks = vec![
        rt::spawn(pleg.run(crate::pleg::RELIST_PERIOD)),
        rt::spawn(kubelet.clone().run(src_rx, ev_rx, done_rx)),
    ];
    Harness {
        clock,
        fake,
        kubelet,
        src: src_tx,
        dir,
        _tasks: tasks,
    }
}

impl Harness {
    async fn set_pods(&self, pods: Vec<Pod>) {
        self.src.send(snapshot(pods)).await.unwrap();
        rt::settle().await;
    }

    /// The apiserver source's pods are now `pods`.
    #[cfg(feature = "apiserver")]
    async fn set_api_pods(&self, pods: Vec<Pod>) {
        self.src
            .send(Snapshot {
                source: Source::Api,
                pods,
            })
            .await
            .unwrap();
        rt::settle().await;
    }

    /// Moves the clock a second at a time, letting everything run after each step.
    async fn run_for(&self, secs: u64) {
        for _ in 0..secs {
            self.clock.advance(Duration::from_secs(1));
            rt::settle().await;
        }
    }

    /// Runs second by second until `cond` holds; panics after `limit` seconds of fake time.
    async fn until(&self, what: &str, limit: u64, cond: impl Fn(&Self) -> bool) -> u64 {
        for s in 0..=limit {
            if cond(self) {
                return s;
            }
            self.run_for(1).await;
        }
        panic!(
            "{what}: not reached after {limit} s of fake time; runtime: {:?}",
            self.fake.containers()
        );
    }

    fn running(&self, uid: &str) -> usize {
        self.fake
            .containers_of_pod(uid)
            .iter()
            .filter(|c| c.state == ContainerState::ContainerRunning)
            .count()
    }

    fn sandboxes(&self, uid: &str) -> usize {
        self.fake
            .sandboxes()
            .iter()
            .filter(|s| s.metadata().uid == uid)
            .count()
    }

    fn phase(&self, uid: &str) -> String {
        self.kubelet
            .status
            .get(uid)
            .and_then(|s| s.phase)
            .map(|p| p.to_string())
            .unwrap_or_default()
    }
}

#[test]
fn a_pod_runs_and_a_crashed_container_restarts_after_its_backoff() {
    rt::block_on(async {
        let h = harness("restart");
        h.set_pods(vec![pod("a", "web", "sleep 3600")]).await;
        // The PLEG lists the runtime as it starts, so the pod starts without waiting a tick.
        let t = h.until("a running", 5, |h| h.running("a") == 1).await;
        assert_eq!(t, 0, "started {t} s late");
        let newest = |h: &Harness| {
            let mut cs = h.fake.containers();
            cs.sort_by_key(|c| c.created_at);
            cs.pop().unwrap()
        };
        // The first crash restarts at once, as upstream; the next one waits the 10 s backoff.
        h.fake.exit_container(&newest(&h).id, 1);
        let t = h.until("first restart", 5, |h| h.running("a") == 1).await;
        assert!(t <= 2, "first restart {t} s after the crash");
        h.fake.exit_container(&newest(&h).id, 1);
        h.run_for(5).await;
        assert_eq!(h.running("a"), 0, "backing off");
        assert!(
            h.kubelet.pod_list().items[0].status.container_statuses[0]
                .state
                .waiting
                .as_ref()
                .is_some_and(|w| w.reason.as_deref() == Some("CrashLoopBackOff"))
        );
        let t = h.until("second restart", 10, |h| h.running("a") == 1).await;
        assert!(
            (3..=7).contains(&t),
            "second restart {t} s after the 5 s already passed"
        );
        assert_eq!(h.phase("a"), "Running");
    });
}

#[test]
fn an_edited_pod_never_runs_beside_its_old_version() {
    rt::block_on(async {
        let h = harness("edit");
        h.set_pods(vec![pod("a", "web", "sleep 3600")]).await;
        h.until("a running", 5, |h| h.running("a") == 1).await;
        // Stopping a takes 4 s of fake time.
        h.fake.set_delay("StopContainer", Duration::from_secs(4));
        h.set_pods(vec![pod("b", "web", "sleep 7200")]).await;
        for _ in 0..20 {
            assert!(
                h.running("a") == 0 || h.running("b") == 0,
                "both versions ran at once"
            );
            h.run_for(1).await;
            if h.running("b") == 1 {
                break;
            }
        }
        assert_eq!(h.running("b"), 1, "b started after a was gone");
        assert_eq!(h.sandboxes("a"), 0, "a removed from the runtime");
    });
}

#[test]
fn removing_a_pod_cancels_its_sync_stuck_in_a_pull() {
    rt::block_on(async {
        let h = harness("cancel");
        let mut p = pod("a", "web", "sleep 3600");
        p.spec.containers[0].image = "registry.example/slow:1".into();
        h.fake.set_pullable("registry.example/slow:1");
        h.fake.set_delay("PullImage", Duration::from_secs(3600));
        h.set_pods(vec![p]).await;
        h.until("pull started", 5, |h| h.fake.calls("PullImage") == 1)
            .await;
        h.set_pods(vec![]).await;
        h.until("a gone", 10, |h| h.sandboxes("a") == 0).await;
        assert_eq!(h.fake.containers().len(), 0, "no container was created");
        assert!(h.kubelet.pod_list().items.is_empty());
    });
}

#[test]
fn the_status_of_a_pod_no_source_defines_is_forgotten_once_it_stopped() {
    rt::block_on(async {
        let h = harness("orphan-status");
        let b = pod("b", "db", "sleep 3600");
        h.set_pods(vec![pod("a", "web", "sleep 3600"), b.clone()])
            .await;
        h.until("both running", 5, |h| {
            h.running("a") == 1 && h.running("b") == 1
        })
        .await;
        // Its manifest went: once stopped, its status goes with it (nothing is kept of a pod
        // no source defines), while the other pod's stays.
        h.set_pods(vec![b]).await;
        h.until("a's status forgotten", 10, |h| {
            h.kubelet.status.get("a").is_none()
        })
        .await;
        assert_eq!(h.running("a"), 0);
        assert_eq!(h.phase("b"), "Running");
    });
}

#[test]
fn a_pod_restored_while_it_is_stopping_runs_again_once_stopped() {
    rt::block_on(async {
        let h = harness("restore");
        let p = pod("a", "web", "sleep 3600");
        h.set_pods(vec![p.clone()]).await;
        h.until("a running", 5, |h| h.running("a") == 1).await;
        h.fake.set_delay("StopContainer", Duration::from_secs(3));
        h.set_pods(vec![]).await;
        h.run_for(1).await;
        h.set_pods(vec![p]).await;
        let first = h.fake.containers()[0].id.clone();
        h.until("a replaced", 10, |h| {
            h.running("a") == 1 && h.fake.container(&first).is_none()
        })
        .await;
        let ready = h
            .fake
            .sandboxes()
            .iter()
            .filter(|s| s.state == PodSandboxState::SandboxReady)
            .count();
        assert_eq!(ready, 1, "one live sandbox");
        assert_eq!(h.kubelet.pod_list().items.len(), 1);
    });
}

#[test]
fn a_hung_inspection_does_not_delay_another_pods_restart() {
    rt::block_on(async {
        let h = harness("hung");
        h.set_pods(vec![
            pod("a", "stuck", "sleep 3600"),
            pod("b", "crash", "sleep 3600"),
        ])
        .await;
        h.until("both running", 5, |h| {
            h.running("a") == 1 && h.running("b") == 1
        })
        .await;
        let id_of = |uid: &str| h.fake.containers_of_pod(uid).into_iter().next().unwrap().id;
        let (a, b) = (id_of("a"), id_of("b"));
        h.fake.hang_container_status(&a);
        // a's container changes, so every relist wants to inspect it, and it never answers.
        h.fake.exit_container(&a, 0);
        h.fake.exit_container(&b, 1);
        // b's first restart comes after its 10 s backoff, hung inspections or not.
        let t = h.until("b restarted", 20, |h| h.running("b") == 1).await;
        assert!(t <= 13, "b restarted {t} s after it died");
        assert!(h.kubelet.healthz().is_ok(), "{:?}", h.kubelet.healthz());
    });
}

// -------------------------------------------------------------------------------------------
// Probes, hooks and sidecars through the loop
// -------------------------------------------------------------------------------------------

fn pod_json(uid: &str, spec: serde_json::Value) -> Pod {
    let v = serde_json::json!({
        "apiVersion": "v1", "kind": "Pod",
        "metadata": {"name": "p", "namespace": "default", "uid": uid},
        "spec": spec,
    });
    let mut p: Pod = serde_json::from_value(v).unwrap();
    crate::config::static_pod::apply_api_defaults(&mut p);
    p
}

impl Harness {
    fn status_of(&self, uid: &str) -> crate::api::PodStatus {
        self.kubelet.status.get(uid).unwrap_or_default()
    }

    fn condition(&self, uid: &str, t: &str) -> String {
        self.status_of(uid)
            .conditions
            .iter()
            .find(|c| c.type_ == t)
            .map(|c| c.status.clone())
            .unwrap_or_default()
    }

    /// Container instances by name, oldest first.
    fn instances(&self, name: &str) -> Vec<crate::cri::fake::FakeContainer> {
        let mut cs: Vec<_> = self
            .fake
            .containers()
            .into_iter()
            .filter(|c| c.metadata().name == name)
            .collect();
        cs.sort_by_key(|c| c.created_at);
        cs
    }

    fn running_named(&self, name: &str) -> bool {
        self.instances(name)
            .iter()
            .any(|c| c.state == ContainerState::ContainerRunning)
    }
}

/// Names the container an exec runs in.
fn exec_target(fake: &FakeRuntime, id: &str) -> String {
    fake.container(id)
        .map(|c| c.metadata().name)
        .unwrap_or_default()
}

#[test]
fn liveness_failures_restart_the_container_and_readiness_drives_the_conditions() {
    rt::block_on(async {
        let h = harness("probes");
        let healthy = Rc::new(std::cell::Cell::new(true));
        let ready = Rc::new(std::cell::Cell::new(true));
        let (hl, rd) = (healthy.clone(), ready.clone());
        h.fake
            .set_exec_handler(move |_, cmd| match cmd[0].as_str() {
                "live" => Some(crate::cri::fake::ExecReply::exit(i32::from(!hl.get()))),
                "ready" => Some(crate::cri::fake::ExecReply::exit(i32::from(!rd.get()))),
                _ => None,
            });
        let p = pod_json(
            "a",
            serde_json::json!({"containers": [{
                "name": "main", "image": IMAGE, "command": ["sleep", "3600"],
                "livenessProbe": {"exec": {"command": ["live"]}, "periodSeconds": 1, "failureThreshold": 2},
                "readinessProbe": {"exec": {"command": ["ready"]}, "periodSeconds": 1}
            }]}),
        );
        h.set_pods(vec![p]).await;
        h.until("ready", 5, |h| h.condition("a", "Ready") == "True")
            .await;
        let cs = &h.status_of("a").container_statuses[0];
        assert!(cs.ready && cs.started == Some(true));
        assert_eq!(h.condition("a", "ContainersReady"), "True");

        // Readiness flips both ways; the container is never restarted for it.
        let first = h.instances("main")[0].id.clone();
        ready.set(false);
        h.until("unready", 5, |h| h.condition("a", "Ready") == "False")
            .await;
        assert!(!h.status_of("a").container_statuses[0].ready);
        assert_eq!(h.phase("a"), "Running");
        ready.set(true);
        h.until("ready again", 5, |h| h.condition("a", "Ready") == "True")
            .await;
        assert_eq!(h.instances("main").len(), 1, "never restarted");

        // Liveness fails twice in a row: killed and started again at once.
        healthy.set(false);
        h.until("restarted", 6, |h| h.instances("main").len() == 2)
            .await;
        let old = h.fake.container(&first).unwrap();
        assert_eq!(old.state, ContainerState::ContainerExited);
        assert_eq!(old.exit_code, 137);
        assert_eq!(old.config.metadata.as_ref().unwrap().attempt, 0);
        h.until("restart count 1", 3, |h| {
            h.status_of("a").container_statuses[0].restart_count == 1
        })
        .await;
        // It keeps failing: restarts go on, the count only grows, and now with a backoff
        // (the dead instance GC keeps counts from the newest that exited).
        let mut counts = vec![];
        for _ in 0..40 {
            h.run_for(1).await;
            counts.push(h.status_of("a").container_statuses[0].restart_count);
        }
        assert!(counts.windows(2).all(|w| w[0] <= w[1]), "{counts:?}");
        assert!(*counts.last().unwrap() >= 3, "{counts:?}");
        let reasons = h.status_of("a").container_statuses[0].clone();
        assert_eq!(
            reasons.last_state.terminated.as_ref().map(|t| t.exit_code),
            Some(137)
        );
    });
}

#[test]
fn a_startup_probe_that_keeps_failing_restarts_the_container_and_liveness_never_ran() {
    rt::block_on(async {
        let h = harness("startup");
        let live = Rc::new(std::cell::Cell::new(0));
        let l = live.clone();
        h.fake
            .set_exec_handler(move |_, cmd| match cmd[0].as_str() {
                "up" => Some(crate::cri::fake::ExecReply::exit(1)),
                "live" => {
                    l.set(l.get() + 1);
                    Some(crate::cri::fake::ExecReply::exit(0))
                }
                _ => None,
            });
        let p = pod_json(
            "a",
            serde_json::json!({"containers": [{
                "name": "main", "image": IMAGE, "command": ["sleep", "3600"],
                "startupProbe": {"exec": {"command": ["up"]}, "periodSeconds": 2, "failureThreshold": 3},
                "livenessProbe": {"exec": {"command": ["live"]}, "periodSeconds": 1}
            }]}),
        );
        h.set_pods(vec![p]).await;
        h.until("running", 3, |h| h.running("a") == 1).await;
        let cs = &h.status_of("a").container_statuses[0];
        assert_eq!(cs.started, Some(false));
        assert!(!cs.ready, "not ready before it has started");
        let t = h
            .until("restarted", 12, |h| h.instances("main").len() == 2)
            .await;
        assert!(
            (4..=8).contains(&t),
            "restarted {t} s in: 3 failures 2 s apart"
        );
        assert_eq!(live.get(), 0, "liveness held off");
    });
}

#[test]
fn sidecars_start_in_order_before_the_app_and_stop_after_it() {
    rt::block_on(async {
        let h = harness("sidecars");
        let up = Rc::new(std::cell::Cell::new(false));
        let u = up.clone();
        h.fake.set_exec_handler(move |_, cmd| {
            (cmd[0] == "up").then(|| crate::cri::fake::ExecReply::exit(i32::from(!u.get())))
        });
        let side = |name: &str, probe: bool| {
            let mut c = serde_json::json!({
                "name": name, "image": IMAGE, "restartPolicy": "Always", "command": ["sleep", "3600"]
            });
            if probe {
                c["startupProbe"] = serde_json::json!({"exec": {"command": ["up"]}, "periodSeconds": 1, "failureThreshold": 100});
            }
            c
        };
        let p = pod_json(
            "a",
            serde_json::json!({
                "restartPolicy": "Never",
                "terminationGracePeriodSeconds": 30,
                "initContainers": [side("s1", true), side("s2", false),
                    {"name": "init", "image": IMAGE, "command": ["true"]}],
                "containers": [{"name": "app", "image": IMAGE, "command": ["sleep", "3600"]}]
            }),
        );
        h.set_pods(vec![p]).await;
        h.until("s1 running", 3, |h| h.running_named("s1")).await;
        h.run_for(5).await;
        assert!(
            h.instances("s2").is_empty(),
            "s2 waits for s1's startup probe"
        );
        assert_eq!(h.phase("a"), "Pending");
        up.set(true);
        h.until("s2 running", 4, |h| h.running_named("s2")).await;
        let init = h
            .until("init created", 3, |h| !h.instances("init").is_empty())
            .await;
        h.fake.exit_container(&h.instances("init")[0].id, 0);
        h.until("app running", 4, |h| h.running_named("app")).await;
        let created = |n: &str| h.instances(n)[0].created_at;
        assert!(created("s1") < created("s2") && created("s2") < created("init"));
        assert!(created("init") < created("app"), "{init}");
        assert_eq!(h.phase("a"), "Running");
        assert_eq!(h.condition("a", "Initialized"), "True");
        assert_eq!(
            h.status_of("a").init_container_statuses[0].started,
            Some(true)
        );

        // A sidecar that exits is restarted beside the app, despite restartPolicy Never.
        h.fake.exit_container(&h.instances("s2")[0].id, 1);
        h.until("s2 restarted", 4, |h| {
            h.instances("s2").len() == 2 && h.running_named("s2")
        })
        .await;
        assert_eq!(h.instances("app").len(), 1);

        // Removal: the app stops first, then the sidecars, last started first.
        h.fake.set_delay("StopContainer", Duration::from_secs(1));
        h.set_pods(vec![]).await;
        let mut stopped: Vec<(String, u64)> = vec![];
        for s in 0..15 {
            for n in ["app", "s1", "s2"] {
                let done = h
                    .instances(n)
                    .iter()
                    .all(|c| c.state != ContainerState::ContainerRunning);
                if done && !stopped.iter().any(|(x, _)| x == n) {
                    stopped.push((n.to_owned(), s));
                }
            }
            h.run_for(1).await;
        }
        let order: Vec<&str> = stopped.iter().map(|(n, _)| n.as_str()).collect();
        assert_eq!(order, ["app", "s2", "s1"], "{stopped:?}");
        assert!(
            stopped[0].1 < stopped[1].1 && stopped[1].1 < stopped[2].1,
            "{stopped:?}"
        );
        h.until("pod gone", 10, |h| h.fake.containers().is_empty())
            .await;
    });
}

#[test]
fn containers_always_get_the_minimum_grace_period_to_act_on_sigterm() {
    rt::block_on(async {
        let h = harness("grace-floor");
        // A pod left in the runtime by an earlier picolet, whose manifest went away meanwhile:
        // created with a grace period of 40 s.
        let long = pod_json(
            "long",
            serde_json::json!({
                "terminationGracePeriodSeconds": 40,
                "containers": [{"name": "l", "image": IMAGE, "command": ["sleep", "3600"]}]
            }),
        );
        let earlier = crate::kuberuntime::RuntimeManager::new(
            Rc::new(h.fake.clone()),
            Rc::new(h.fake.clone()),
            h.kubelet.rm.node().clone(),
        );
        let st = earlier.pod_status("long").await.unwrap();
        earlier.sync_pod(&long, &st).await;
        assert_eq!(h.running("long"), 1);
        let zero = pod_json(
            "zero",
            serde_json::json!({
                "terminationGracePeriodSeconds": 0,
                "containers": [{"name": "z", "image": IMAGE, "command": ["sleep", "3600"]}]
            }),
        );
        h.set_pods(vec![zero]).await;
        // The orphan is stopped with the kubelet's 1 s override, raised to the 2 s minimum.
        h.until("orphan stopped", 6, |h| h.running("long") == 0)
            .await;
        assert_eq!(h.fake.stops(), [("l".to_owned(), 2)]);
        h.until("running", 10, |h| h.running("zero") == 1).await;
        // Grace 0: the stop still asks for the minimum (SIGTERM, then SIGKILL 2 s later).
        h.set_pods(vec![]).await;
        h.until("zero stopped", 4, |h| h.running("zero") == 0).await;
        assert_eq!(
            h.fake.stops()[1],
            ("z".to_owned(), 2),
            "{:?}",
            h.fake.stops()
        );
    });
}

#[test]
fn the_pull_backoff_of_one_pod_does_not_hold_back_another() {
    rt::block_on(async {
        let h = harness("pullkey");
        let spec = serde_json::json!({
            "containers": [{"name": "c", "image": "example.com/missing:1"}]
        });
        let mut a = pod_json("a", spec.clone());
        a.metadata.name = "a".into();
        h.set_pods(vec![a.clone()]).await;
        h.run_for(2).await;
        let reason = |h: &Harness, uid: &str| {
            h.status_of(uid).container_statuses[0]
                .state
                .waiting
                .as_ref()
                .and_then(|w| w.reason.clone())
                .unwrap_or_default()
        };
        assert_eq!(reason(&h, "a"), "ImagePullBackOff");
        let pulls = h.fake.calls("PullImage");
        let mut b = pod_json("b", spec);
        b.metadata.name = "b".into();
        h.set_pods(vec![a, b]).await;
        h.run_for(1).await;
        // b pulls at once (and then backs off on its own), a stays backed off
        assert_eq!(h.fake.calls("PullImage"), pulls + 1);
        assert_eq!(reason(&h, "a"), "ImagePullBackOff");
    });
}

#[test]
fn run_as_non_root_refuses_a_root_image_and_host_network_env_has_the_node_ip() {
    rt::block_on(async {
        let h = harness("nonroot");
        let recorder = Rc::new(crate::events::Recorder::new("n"));
        crate::events::install(recorder.clone());
        let p = pod_json(
            "nr",
            serde_json::json!({
                "hostNetwork": true,
                "securityContext": {"runAsNonRoot": true},
                "containers": [
                    {"name": "root", "image": IMAGE, "command": ["sleep", "3600"]},
                    {"name": "user", "image": IMAGE, "command": ["sleep", "3600"],
                     "securityContext": {"runAsUser": 1000},
                     "env": [{"name": "IP", "valueFrom": {"fieldRef": {"fieldPath": "status.podIP"}}}]}
                ]
            }),
        );
        h.set_pods(vec![p]).await;
        h.until("user running", 3, |h| h.running("nr") == 1).await;
        h.run_for(2).await;
        let st = h.status_of("nr");
        let root = st
            .container_statuses
            .iter()
            .find(|c| c.name == "root")
            .unwrap();
        let w = root.state.waiting.as_ref().expect("root waits");
        assert_eq!(w.reason.as_deref(), Some("CreateContainerConfigError"));
        let m = w.message.as_deref().unwrap_or_default();
        assert!(m.contains("image will run as root"), "{m}");
        // and says so in a Failed event, the one a client waits for
        let failed: Vec<_> = recorder
            .queued()
            .into_iter()
            .filter(|(r, _)| r == "Failed")
            .collect();
        assert_eq!(failed.len(), 1, "{failed:?}");
        assert_eq!(
            failed[0].1,
            "Error: container has runAsNonRoot and image will run as root (pod: \"p_default(nr)\", container: root)"
        );
        // the fake's images name no user: root, as the kubelet reads it
        assert_eq!(h.instances("root").len(), 0);
        let user = &h.instances("user")[0];
        let ip = user.config.envs.iter().find(|e| e.key == "IP").unwrap();
        assert_eq!(
            ip.value, "192.0.2.1",
            "a host-network pod's IP is the node's"
        );
    });
}

#[test]
fn hooks_run_after_start_and_before_stop_and_a_failed_post_start_kills() {
    rt::block_on(async {
        let h = harness("hooks");
        // Every hook exec is recorded with the container's state at the time.
        let log: Rc<RefCell<Vec<(String, String, u64)>>> = Rc::default();
        let (l, fake, clock) = (log.clone(), h.fake.clone(), h.clock.clone());
        let post_ok = Rc::new(std::cell::Cell::new(true));
        let ok = post_ok.clone();
        h.fake.set_exec_handler(move |id, cmd| {
            let hook = cmd.first()?.clone();
            if !hook.starts_with("hook-") {
                return None;
            }
            l.borrow_mut().push((
                exec_target(&fake, id),
                hook.clone(),
                clock.elapsed().as_secs(),
            ));
            Some(match hook.as_str() {
                "hook-post" => crate::cri::fake::ExecReply::exit(i32::from(!ok.get())),
                // A preStop hook that would run far past the grace period.
                _ => crate::cri::fake::ExecReply {
                    delay: Duration::from_secs(600),
                    ..Default::default()
                },
            })
        });
        let p = pod_json(
            "a",
            serde_json::json!({
                "terminationGracePeriodSeconds": 4,
                "containers": [{"name": "main", "image": IMAGE, "command": ["sleep", "3600"],
                    "lifecycle": {"postStart": {"exec": {"command": ["hook-post"]}},
                                  "preStop": {"exec": {"command": ["hook-pre"]}}}}]
            }),
        );
        h.set_pods(vec![p.clone()]).await;
        h.until("running", 3, |h| h.running("a") == 1).await;
        assert_eq!(log.borrow().len(), 1);
        assert_eq!(log.borrow()[0].1, "hook-post");
        assert!(
            h.status_of("a").container_statuses[0]
                .state
                .running
                .is_some()
        );

        // preStop runs first; the stop comes when the grace period is used up.
        let start = h.clock.elapsed().as_secs();
        h.set_pods(vec![]).await;
        h.run_for(3).await;
        assert_eq!(log.borrow()[1].1, "hook-pre");
        assert_eq!(
            h.running("a"),
            1,
            "still running while its preStop hook runs"
        );
        h.until("stopped", 4, |h| h.running("a") == 0).await;
        let took = h.clock.elapsed().as_secs() - start;
        assert!(
            (4..=6).contains(&took),
            "stopped {took} s after removal, grace 4 s"
        );
        h.until("gone", 5, |h| h.fake.containers().is_empty()).await;

        // A failing postStart hook kills the container, which waits with PostStartHookError.
        post_ok.set(false);
        log.borrow_mut().clear();
        h.set_pods(vec![pod_json("b", serde_json::to_value(&p.spec).unwrap())])
            .await;
        h.until("killed", 6, |h| {
            h.instances("main")
                .first()
                .is_some_and(|c| c.state == ContainerState::ContainerExited)
        })
        .await;
        let order: Vec<String> = log.borrow().iter().map(|x| x.1.clone()).collect();
        assert_eq!(
            order[..2],
            ["hook-post", "hook-pre"],
            "the kill ran the preStop hook too"
        );
        h.until("waiting reason", 3, |h| {
            h.status_of("b")
                .container_statuses
                .first()
                .and_then(|c| c.state.waiting.clone())
                .and_then(|w| w.reason)
                == Some("PostStartHookError".into())
        })
        .await;
        let msg = h.status_of("b").container_statuses[0]
            .state
            .waiting
            .clone()
            .unwrap()
            .message
            .unwrap();
        assert!(msg.starts_with("Exec lifecycle hook ([hook-post]) for Container \"main\" in Pod \"p_default(b)\" failed"), "{msg}");
    });
}

// -------------------------------------------------------------------------------------------
// systemd notifications from the running loop
// -------------------------------------------------------------------------------------------

/// The datagrams a socket standing for systemd's received so far.
fn drain(l: &std::os::unix::net::UnixDatagram) -> Vec<String> {
    let mut out = Vec::new();
    let mut buf = [0u8; 512];
    while let Ok(n) = l.recv(&mut buf) {
        out.push(String::from_utf8_lossy(&buf[..n]).into_owned());
    }
    out
}

fn count(msgs: &[String], line: &str) -> usize {
    msgs.iter()
        .flat_map(|m| m.lines())
        .filter(|l| *l == line)
        .count()
}

#[test]
fn systemd_hears_ready_once_listed_and_the_watchdog_stops_while_the_pleg_stalls() {
    rt::block_on(async {
        let h = harness("notify");
        std::fs::create_dir_all(&h.dir).unwrap();
        let path = h.dir.join("notify");
        let l = std::os::unix::net::UnixDatagram::bind(&path).unwrap();
        l.set_nonblocking(true).unwrap();
        let n = crate::notify::Notifier::new(path.as_os_str(), Some(Duration::from_secs(5)));
        let _notify = rt::spawn(crate::notify::run(Rc::new(n.unwrap()), h.kubelet.clone()));

        h.set_pods(vec![pod("a", "web", "sleep 3600")]).await;
        h.until("a running", 5, |h| h.running("a") == 1).await;
        // A datagram socket queues only a few messages: read them as systemd would, promptly.
        let run = async |secs: u64| {
            let mut got = Vec::new();
            for _ in 0..secs {
                h.run_for(1).await;
                got.extend(drain(&l));
            }
            got
        };
        let first = run(1).await;
        assert_eq!(count(&first, "READY=1"), 1, "{first:?}");
        assert!(
            first.iter().any(|m| m.contains("STATUS=running 1 pods")),
            "{first:?}"
        );

        // Healthy: a ping every 5 s.
        let healthy = run(60).await;
        assert!(
            (11..=13).contains(&count(&healthy, "WATCHDOG=1")),
            "{healthy:?}"
        );
        assert_eq!(count(&healthy, "READY=1"), 0, "READY is sent once");

        // Every listing of the runtime now takes 250 s: the PLEG stalls. Past its 3-minute
        // threshold the pings stop, and systemd would restart picolet.
        h.fake.set_delay("ListPodSandbox", Duration::from_secs(250));
        let stalling = run(185).await;
        assert!(
            stalling
                .iter()
                .any(|m| m.contains("STATUS=unhealthy: pleg was last seen active")),
            "{stalling:?}"
        );
        let after_unhealthy = stalling
            .iter()
            .skip_while(|m| !m.contains("STATUS=unhealthy"))
            .filter(|m| m.contains("WATCHDOG=1"))
            .count();
        assert_eq!(after_unhealthy, 0, "{stalling:?}");
        let stalled = run(40).await;
        assert_eq!(count(&stalled, "WATCHDOG=1"), 0, "{stalled:?}");

        // The listing comes back: the pings resume.
        h.fake.set_delay("ListPodSandbox", Duration::ZERO);
        let back = run(60).await;
        assert!(count(&back, "WATCHDOG=1") >= 5, "{back:?}");
        assert!(
            back.iter().any(|m| m.contains("STATUS=running 1 pods")),
            "{back:?}"
        );
    });
}

/// The accounting endpoints over the loop's own state: the pod it runs in `/stats/summary`,
/// and `/metrics` counting it, its containers, the relists and its start.
#[cfg(feature = "local-api")]
#[test]
fn the_accounting_endpoints_report_what_the_loop_runs() {
    struct NoFacts;
    impl crate::stats::RuntimeFacts for NoFacts {
        fn container_pid(&self, _: &str) -> crate::stats::Ask<'_, u32> {
            Box::pin(async { None })
        }
        fn image_fs(&self) -> crate::stats::Ask<'_, crate::stats::ImageFs> {
            Box::pin(async { None })
        }
    }
    rt::block_on(async {
        let h = harness("stats");
        // A root without cgroups: the pods and containers are listed, with no figures.
        let ctx = crate::server::StatsContext {
            provider: crate::stats::Provider::new(&h.dir, &h.dir, Rc::new(NoFacts)),
            ops: Rc::default(),
            machine: crate::stats::expose::Machine::default(),
        };
        h.set_pods(vec![pod("a", "web", "sleep 3600")]).await;
        h.until("a running", 5, |h| h.running("a") == 1).await;
        h.run_for(3).await;
        let (k, ctx) = (&*h.kubelet, &ctx);
        let body = |path| async move {
            let r = crate::server::stats_route(k, ctx, path).await.unwrap();
            assert_eq!(r.status(), hyper::StatusCode::OK);
            let b = http_body_util::BodyExt::collect(r.into_body()).await;
            String::from_utf8(b.unwrap().to_bytes().to_vec()).unwrap()
        };
        let s: serde_json::Value = serde_json::from_str(&body("/stats/summary").await).unwrap();
        assert_eq!(s["node"]["nodeName"], "node");
        assert_eq!(s["pods"][0]["podRef"]["uid"], "a");
        assert_eq!(s["pods"][0]["podRef"]["name"], "web");
        assert_eq!(s["pods"][0]["containers"][0]["name"], "main");
        let m = body("/metrics").await;
        for line in [
            "kubelet_running_pods 1\n",
            "kubelet_running_containers{container_state=\"running\"} 1\n",
            "kubelet_node_name{node=\"node\"} 1\n",
            "kubelet_pod_start_duration_seconds_count 1\n",
        ] {
            assert!(m.contains(line), "{line:?} not in\n{m}");
        }
        let relists = m
            .lines()
            .find_map(|l| l.strip_prefix("kubelet_pleg_relist_duration_seconds_count "))
            .and_then(|v| v.parse::<u64>().ok())
            .unwrap();
        assert!(relists >= 3, "{relists}");
        assert!(crate::server::stats_route(k, ctx, "/pods").await.is_none());
    });
}

#[test]
fn image_gc_sees_the_images_of_every_desired_pod_once_the_sources_were_seen() {
    rt::block_on(async {
        let h = harness("needed-images");
        rt::settle().await;
        assert_eq!(
            h.kubelet.needed_images(),
            None,
            "no source seen yet: nothing may be collected"
        );
        let mut waiting = pod("b", "waiting", "sleep 3600");
        waiting.spec.init_containers = waiting.spec.containers.clone();
        waiting.spec.init_containers[0].name = "init".into();
        waiting.spec.containers[0].image = "example.org/app:2".into();
        h.set_pods(vec![pod("a", "web", "sleep 3600"), waiting])
            .await;
        h.run_for(1).await;
        assert_eq!(
            h.kubelet.needed_images(),
            Some(vec!["example.org/app:2".to_owned(), IMAGE.to_owned()]),
            "init and app containers' images, each once, whether their containers exist or not"
        );
        h.set_pods(vec![]).await;
        assert_eq!(h.kubelet.needed_images(), Some(vec![]));
    });
}

#[test]
fn an_evicted_pod_stops_keeps_its_failed_status_and_never_runs_again() {
    rt::block_on(async {
        let h = harness("evict");
        h.set_pods(vec![
            pod("a", "victim", "sleep 3600"),
            pod("b", "bystander", "sleep 3600"),
        ])
        .await;
        h.until("both running", 5, |h| {
            h.running("a") == 1 && h.running("b") == 1
        })
        .await;
        let listed: Vec<String> = h
            .kubelet
            .eviction_pods()
            .iter()
            .map(|(p, cs)| format!("{}:{}", p.metadata.name, cs.len()))
            .collect();
        assert_eq!(listed.len(), 2);
        assert!(listed.contains(&"victim:1".to_owned()), "{listed:?}");
        let msg =
            "The node was low on resource: memory. Threshold quantity: 100Mi, available: 1Mi. ";
        assert!(h.kubelet.evict("a", 1, msg));
        assert!(!h.kubelet.evict("a", 1, msg), "once");
        assert!(!h.kubelet.evict("nope", 1, msg));
        // The phase turns Failed, and the DisruptionTarget condition appears, only once its
        // container no longer runs, as upstream's status manager holds them back.
        let st = h.kubelet.status.get("a").unwrap();
        assert_eq!(st.phase.as_deref(), Some("Running"), "still running");
        assert!(
            !st.conditions.iter().any(|c| c.type_ == "DisruptionTarget"),
            "{st:?}"
        );
        h.until("victim stopped and removed", 10, |h| {
            h.running("a") == 0 && h.sandboxes("a") == 0
        })
        .await;
        let st = h.kubelet.status.get("a").unwrap();
        assert_eq!(
            (
                st.phase.as_deref(),
                st.reason.as_deref(),
                st.message.as_deref()
            ),
            (Some("Failed"), Some("Evicted"), Some(msg)),
            "once stopped"
        );
        // It stays stopped through syncs, relists, housekeeping and the source's updates.
        h.set_pods(vec![
            pod("a", "victim", "sleep 3600"),
            pod("b", "bystander", "sleep 3600"),
        ])
        .await;
        h.run_for(70).await;
        assert_eq!((h.running("a"), h.sandboxes("a")), (0, 0));
        assert_eq!(h.running("b"), 1, "the other pod is untouched");
        let st = h.kubelet.status.get("a").unwrap();
        assert_eq!(st.phase.as_deref(), Some("Failed"));
        assert_eq!(st.reason.as_deref(), Some("Evicted"));
        let c = &st.container_statuses[0];
        assert_eq!(c.state.terminated.as_ref().map(|t| t.exit_code), Some(137));
        assert!(
            st.conditions
                .iter()
                .any(|c| c.type_ == "DisruptionTarget" && c.status == "True")
        );
        let names: Vec<String> = h
            .kubelet
            .eviction_pods()
            .iter()
            .map(|(p, _)| p.metadata.name.clone())
            .collect();
        assert_eq!(names, ["bystander"], "an evicted pod is no candidate");
        // Removing its manifest forgets it; a new pod of the same name runs.
        h.set_pods(vec![pod("b", "bystander", "sleep 3600")]).await;
        h.run_for(3).await;
        assert!(h.kubelet.status.get("a").is_none());
        h.set_pods(vec![
            pod("a2", "victim", "sleep 3600"),
            pod("b", "bystander", "sleep 3600"),
        ])
        .await;
        h.until("the new victim runs", 10, |h| h.running("a2") == 1)
            .await;
    });
}

#[test]
fn env_resource_field_refs_get_the_containers_resources() {
    rt::block_on(async {
        let h = harness("envres");
        let p = pod_json(
            "er",
            serde_json::json!({
                "containers": [
                    {"name": "c", "image": IMAGE, "command": ["sleep", "3600"],
                     "resources": {"limits": {"memory": "64Mi"}, "requests": {"cpu": "250m"}},
                     "env": [
                        // As the apiserver sends an unset divisor: "0", read as 1.
                        {"name": "MEM", "valueFrom": {"resourceFieldRef": {"resource": "limits.memory", "divisor": "0"}}},
                        {"name": "MEM_MI", "valueFrom": {"resourceFieldRef": {"containerName": "c", "resource": "limits.memory", "divisor": "1Mi"}}},
                        {"name": "CPU_REQ", "valueFrom": {"resourceFieldRef": {"resource": "requests.cpu", "divisor": "1m"}}},
                        {"name": "SIDE_MEM", "valueFrom": {"resourceFieldRef": {"containerName": "side", "resource": "requests.memory"}}}
                     ]},
                    {"name": "side", "image": IMAGE, "command": ["sleep", "3600"],
                     "resources": {"requests": {"memory": "1Gi"}}}
                ]
            }),
        );
        h.set_pods(vec![p]).await;
        h.until("c running", 3, |h| h.running("er") == 2).await;
        let c = &h.instances("c")[0];
        let get = |k: &str| {
            c.config
                .envs
                .iter()
                .find(|e| e.key == k)
                .map(|e| e.value.clone())
        };
        assert_eq!(get("MEM").as_deref(), Some("67108864"));
        assert_eq!(get("MEM_MI").as_deref(), Some("64"));
        assert_eq!(get("CPU_REQ").as_deref(), Some("250"));
        assert_eq!(get("SIDE_MEM").as_deref(), Some("1073741824"));
    });
}

#[test]
fn a_sandbox_that_cannot_be_created_shows_its_error_in_every_containers_status() {
    rt::block_on(async {
        let h = harness("sandboxerr");
        let msg = "failed to create containerd task: seccomp profile /var/lib/kubelet/seccomp/none.json: no such file";
        h.fake.fail_next("RunPodSandbox", tonic::Code::Unknown, msg);
        let p = pod_json(
            "sb",
            serde_json::json!({
                "initContainers": [{"name": "init", "image": IMAGE, "command": ["true"]}],
                "containers": [{"name": "c", "image": IMAGE, "command": ["sleep", "3600"]}]
            }),
        );
        h.set_pods(vec![p]).await;
        h.run_for(1).await;
        let st = h.status_of("sb");
        let all: Vec<_> = st
            .init_container_statuses
            .iter()
            .chain(&st.container_statuses)
            .collect();
        assert_eq!(all.len(), 2);
        for c in &all {
            let w = c.state.waiting.as_ref().expect("waiting");
            assert_eq!(
                w.reason.as_deref(),
                Some("CreatePodSandboxError"),
                "{}",
                c.name
            );
            let m = w.message.as_deref().unwrap_or_default();
            assert!(m.contains(msg), "{}: {m}", c.name);
        }
        // Once the sandbox is made, the error goes: the app container waits for the init one,
        // not on an old sandbox error.
        h.until("the init container running", 20, |h| h.running("sb") == 1)
            .await;
        h.run_for(1).await;
        let st = h.status_of("sb");
        let init = &st.init_container_statuses[0].state;
        assert!(init.running.is_some(), "{init:?}");
        let w = st.container_statuses[0].state.waiting.as_ref().unwrap();
        assert_eq!(w.reason.as_deref(), Some("PodInitializing"), "{w:?}");
    });
}

#[test]
fn another_nodes_pods_on_a_shared_runtime_are_not_orphans() {
    rt::block_on(async {
        let h = harness("shared-runtime");
        // The picolet of another node, on the same containerd, runs its own pod.
        let theirs = pod_json(
            "theirs",
            serde_json::json!({
                "containers": [{"name": "t", "image": IMAGE, "command": ["sleep", "3600"]}]
            }),
        );
        let mut other_node = h.kubelet.rm.node().clone();
        other_node.node_name = "other-node".into();
        let other = crate::kuberuntime::RuntimeManager::new(
            Rc::new(h.fake.clone()),
            Rc::new(h.fake.clone()),
            other_node,
        );
        let st = other.pod_status("theirs").await.unwrap();
        other.sync_pod(&theirs, &st).await;
        assert_eq!(h.running("theirs"), 1);
        let mine = pod_json(
            "mine",
            serde_json::json!({
                "containers": [{"name": "m", "image": IMAGE, "command": ["sleep", "3600"]}]
            }),
        );
        h.set_pods(vec![mine]).await;
        h.until("mine running", 10, |h| h.running("mine") == 1)
            .await;
        // Housekeeping has run several times: the other node's pod is left alone.
        h.run_for(10).await;
        assert_eq!(
            h.running("theirs"),
            1,
            "another node's pod is not an orphan"
        );
        assert!(h.fake.stops().is_empty(), "{:?}", h.fake.stops());
        assert_eq!(h.fake.calls("RemovePodSandbox"), 0);
    });
}

#[test]
fn containers_waiting_for_volumes_show_the_kubelets_default_reasons() {
    rt::block_on(async {
        let h = harness("volwait");
        let missing = h.dir.join("not-yet");
        let p = pod_json(
            "vw",
            serde_json::json!({
                "initContainers": [{"name": "init", "image": IMAGE, "command": ["true"]}],
                "containers": [{"name": "c", "image": IMAGE, "command": ["sleep", "3600"]}],
                "volumes": [{"name": "v", "hostPath": {"path": missing, "type": "Directory"}}]
            }),
        );
        h.set_pods(vec![p]).await;
        h.run_for(2).await;
        assert_eq!(h.running("vw"), 0);
        // As upstream, a volume not ready yet is no container's waiting reason: the app
        // container waits for the init containers, which wait for the pod to initialize.
        let st = h.status_of("vw");
        for c in st
            .init_container_statuses
            .iter()
            .chain(&st.container_statuses)
        {
            let w = c.state.waiting.as_ref().expect("waiting");
            assert_eq!(
                w.reason.as_deref(),
                Some("PodInitializing"),
                "{}: {w:?}",
                c.name
            );
            assert_eq!(w.message, None, "{}", c.name);
        }
        std::fs::create_dir_all(&missing).unwrap();
        h.until("the init container started", 70, |h| {
            !h.instances("init").is_empty()
        })
        .await;
    });
}

#[test]
fn a_pod_past_its_active_deadline_fails_with_deadline_exceeded_even_when_set_later() {
    rt::block_on(async {
        let h = harness("deadline");
        h.set_pods(vec![
            pod("a", "bounded", "sleep 3600"),
            pod("b", "free", "sleep 3600"),
        ])
        .await;
        h.until("both running", 5, |h| {
            h.running("a") == 1 && h.running("b") == 1
        })
        .await;
        h.run_for(10).await;
        assert_eq!(h.running("a"), 1, "no deadline, no end");
        // The deadline set on the running pod counts from its start: already past.
        let mut bounded = pod("a", "bounded", "sleep 3600");
        bounded.spec.active_deadline_seconds = Some(5);
        h.set_pods(vec![bounded, pod("b", "free", "sleep 3600")])
            .await;
        h.until("the bounded pod stopped", 10, |h| h.running("a") == 0)
            .await;
        h.run_for(3).await;
        let st = h.kubelet.status.get("a").unwrap();
        assert_eq!(
            (
                st.phase.as_deref(),
                st.reason.as_deref(),
                st.message.as_deref()
            ),
            (
                Some("Failed"),
                Some("DeadlineExceeded"),
                Some("Pod was active on the node longer than the specified deadline")
            )
        );
        assert!(
            !st.conditions.iter().any(|c| c.type_ == "DisruptionTarget"),
            "not an eviction: {:?}",
            st.conditions
        );
        let c = &st.container_statuses[0];
        assert!(c.state.terminated.is_some(), "{c:?}");
        h.run_for(30).await;
        assert_eq!(h.running("a"), 0, "never runs again");
        assert_eq!(h.running("b"), 1, "the other pod is untouched");
    });
}

// -------------------------------------------------------------------------------------------
// API pods and the objects they use
// -------------------------------------------------------------------------------------------

/// The requests a loopback apiserver received: each one's request line and JSON body (`null`
/// when it has none).
#[cfg(feature = "apiserver")]
type Requests = std::sync::Arc<std::sync::Mutex<Vec<(String, serde_json::Value)>>>;

/// A loopback apiserver (plain HTTP/1.1, keep-alive) on threads of its own: each request is
/// logged, then answered with the status code and JSON body `answer` gives for its line, its
/// body and every request so far (the current one last). Hands back the URL and the log.
#[cfg(feature = "apiserver")]
fn serve_loopback(
    answer: impl Fn(
        &str,
        &serde_json::Value,
        &[(String, serde_json::Value)],
    ) -> (u16, serde_json::Value)
    + Send
    + Sync
    + 'static,
) -> (String, Requests) {
    use std::io::{BufRead, BufReader, Read, Write};
    let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let url = format!("http://{}", listener.local_addr().unwrap());
    let seen = Requests::default();
    let log = seen.clone();
    let answer = std::sync::Arc::new(answer);
    std::thread::spawn(move || {
        for stream in listener.incoming() {
            let Ok(stream) = stream else { return };
            let (log, answer) = (log.clone(), answer.clone());
            std::thread::spawn(move || {
                let mut r = BufReader::new(stream.try_clone().unwrap());
                loop {
                    let mut first = String::new();
                    if r.read_line(&mut first).unwrap_or(0) == 0 {
                        return;
                    }
                    let mut len = 0usize;
                    loop {
                        let mut line = String::new();
                        if r.read_line(&mut line).unwrap_or(0) == 0 {
                            return;
                        }
                        if let Some(v) = line.to_ascii_lowercase().strip_prefix("content-length:") {
                            len = v.trim().parse().unwrap();
                        }
                        if line == "\r\n" {
                            break;
                        }
                    }
                    let mut body = vec![0; len];
                    r.read_exact(&mut body).unwrap();
                    let line = first.trim_end().to_owned();
                    let body = serde_json::from_slice(&body).unwrap_or(serde_json::Value::Null);
                    let (code, answer) = {
                        let mut l = log.lock().unwrap();
                        l.push((line.clone(), body.clone()));
                        answer(&line, &body, &l)
                    };
                    let reason = match code {
                        200 => "OK",
                        404 => "Not Found",
                        500 => "Internal Server Error",
                        _ => "",
                    };
                    let answer = serde_json::to_vec(&answer).unwrap();
                    let mut w = &stream;
                    let _ = write!(
                        w,
                        "HTTP/1.1 {code} {reason}\r\nContent-Type: application/json\r\n\
                         Content-Length: {}\r\n\r\n",
                        answer.len()
                    );
                    let _ = w.write_all(&answer);
                }
            });
        }
    });
    (url, seen)
}

/// The apiserver's `Status` answer of a failure: its code and reason.
#[cfg(feature = "apiserver")]
fn failure(code: u16, reason: &str) -> (u16, serde_json::Value) {
    let v = serde_json::json!({
        "kind": "Status", "apiVersion": "v1", "status": "Failure",
        "reason": reason, "code": code,
    });
    (code, v)
}

/// A client of a loopback apiserver: no TLS, no credentials.
#[cfg(feature = "apiserver")]
fn plain_client(url: String) -> crate::apiclient::Client {
    crate::apiclient::Client::new(&crate::apiclient::kubeconfig::Connection {
        server: url,
        ca: None,
        insecure_skip_tls_verify: false,
        tls_server_name: None,
        credentials: crate::apiclient::kubeconfig::Credentials::None,
        namespace: String::new(),
    })
    .unwrap()
}

/// A loopback apiserver for the objects task alone: a TokenRequest of `default/default` gets a
/// new token each time, the ConfigMap `default/kube-root-ca.crt` its CA, anything else 404.
#[cfg(feature = "apiserver")]
fn serve_objects() -> (String, Requests) {
    serve_loopback(|line, asked, seen| {
        if line.starts_with("POST /api/v1/namespaces/default/serviceaccounts/default/token ") {
            let v = serde_json::json!({
                "spec": asked["spec"],
                "status": {"token": format!("token-{}", seen.len())},
            });
            (200, v)
        } else if line.starts_with("GET /api/v1/namespaces/default/configmaps/kube-root-ca.crt ") {
            (200, serde_json::json!({"data": {"ca.crt": "CA PEM"}}))
        } else {
            failure(404, "NotFound")
        }
    })
}

/// An API pod as admission leaves it: the service account's projected volume.
#[cfg(feature = "apiserver")]
fn api_pod_with_token(uid: &str, name: &str) -> Pod {
    let mut p = pod_json(
        uid,
        serde_json::json!({
            "serviceAccountName": "default",
            "containers": [{
                "name": "main", "image": IMAGE, "command": ["sleep", "3600"],
                "volumeMounts": [{"name": "kube-api-access-x",
                    "mountPath": "/var/run/secrets/kubernetes.io/serviceaccount", "readOnly": true}]
            }],
            "volumes": [{"name": "kube-api-access-x", "projected": {"defaultMode": 420, "sources": [
                {"serviceAccountToken": {"expirationSeconds": 3607, "path": "token"}},
                {"configMap": {"name": "kube-root-ca.crt", "items": [{"key": "ca.crt", "path": "ca.crt"}]}}
            ]}}]
        }),
    );
    p.metadata.name = name.into();
    from_the_api(p)
}

/// `p` as the apiserver source hands it over: annotated with its source.
#[cfg(feature = "apiserver")]
fn from_the_api(mut p: Pod) -> Pod {
    p.metadata.annotations.insert(
        crate::config::ANNOTATION_CONFIG_SOURCE.into(),
        Source::Api.as_str().into(),
    );
    p
}

#[cfg(feature = "apiserver")]
#[test]
fn api_pods_start_as_soon_as_their_tokens_arrive_without_waiting_a_round_or_a_tick() {
    rt::block_on(async {
        let (url, seen) = serve_objects();
        let store = crate::objects::Store::default();
        let h = harness_with("token", Source::Api, store.clone());
        let _objects = rt::spawn(crate::cluster::objects::run_objects(
            plain_client(url),
            h.kubelet.clone(),
            store,
            None,
            // Read with a GET of its own, which this apiserver serves (the watches are the
            // fake apiserver's, tests/cluster_fake_api.rs).
            crate::objects::ChangeDetection::Cache,
            Duration::from_secs(60),
            "node".into(),
        ));
        // Its first round finds no pod; the next one is a second away.
        rt::settle().await;
        assert!(seen.lock().unwrap().is_empty());

        let pods: Vec<Pod> = (1..=3)
            .map(|i| api_pod_with_token(&format!("u{i}"), &format!("p{i}")))
            .collect();
        h.set_api_pods(pods).await;
        // Every pod runs with no fake time gone by: the tokens were requested as the pods came,
        // and the pods synced as the tokens came, neither at a tick.
        let t = h
            .until("the pods running", 5, |h| {
                (1..=3).all(|i| h.running(&format!("u{i}")) == 1)
            })
            .await;
        assert_eq!(t, 0, "started {t} s late");
        assert_eq!(h.clock.elapsed(), Duration::ZERO);
        let mut tokens = Vec::new();
        for c in h.fake.containers() {
            let m = c
                .config
                .mounts
                .iter()
                .find(|m| m.container_path == "/var/run/secrets/kubernetes.io/serviceaccount")
                .expect("the token's mount");
            let dir = std::path::Path::new(&m.host_path);
            assert_eq!(
                std::fs::read_to_string(dir.join("ca.crt")).unwrap(),
                "CA PEM"
            );
            tokens.push(std::fs::read_to_string(dir.join("token")).unwrap());
        }
        tokens.sort();
        tokens.dedup();
        assert_eq!(
            tokens.len(),
            3,
            "a token of its own for each pod: {tokens:?}"
        );
        // One request per token and one for the ConfigMap, however many wake-ups there were.
        let seen = seen.lock().unwrap().clone();
        let posts = seen.iter().filter(|(l, _)| l.starts_with("POST ")).count();
        let gets = seen.iter().filter(|(l, _)| l.starts_with("GET ")).count();
        assert_eq!((posts, gets), (3, 1), "{seen:?}");
    });
}

/// A loopback apiserver for pod certificates: the node and the default service account read
/// for their UIDs, each PodCertificateRequest created (`req-N`) and at once issued in the
/// node's list and watch, the first to be refreshed an hour after it was made (by the real
/// clock), each next one an hour later. A watch gets the newest request as an event, then ends
/// after 100 ms.
#[cfg(feature = "apiserver")]
fn serve_pod_certificates() -> (String, Requests) {
    let created = std::sync::Mutex::new(Vec::<i64>::new());
    serve_loopback(move |line, _, _| {
        let now = crate::api::time::unix_nanos_now() / 1_000_000_000;
        let t = |s: i64| crate::api::time::rfc3339(s * 1_000_000_000);
        let pcr = |n: usize, created: i64| {
            serde_json::json!({
                "metadata": {"namespace": "default", "name": format!("req-{n}"), "resourceVersion": n.to_string()},
                "spec": {"nodeName": "node"},
                "status": {
                    "conditions": [{"type": "Issued", "status": "True", "reason": "R", "message": "Issued"}],
                    "certificateChain": format!("-----BEGIN CERTIFICATE-----\nAAE{n}\n-----END CERTIFICATE-----\n"),
                    "notBefore": t(created),
                    "beginRefreshAt": t(created + 3600),
                    "notAfter": t(created + 7200),
                },
            })
        };
        let mut created = created.lock().unwrap();
        if line.starts_with("POST /apis/certificates.k8s.io/") {
            created.push(now);
        }
        // Each request made so far, issued: the n-th valid from n - 1 hours after the first was
        // made (the node's clock runs fake time ahead of the real one), refreshed an hour later.
        let first = created.first().copied().unwrap_or(now);
        let made: Vec<serde_json::Value> = (1..=created.len())
            .zip(0i64..)
            .map(|(n, hours)| pcr(n, first + hours * 3600))
            .collect();
        if line.starts_with("GET /api/v1/nodes/node ") {
            (200, serde_json::json!({"metadata": {"name": "node", "uid": "node-uid"}}))
        } else if line.starts_with("GET /api/v1/namespaces/default/serviceaccounts/default ") {
            (200, serde_json::json!({"metadata": {"name": "default", "uid": "sa-uid"}}))
        } else if line.starts_with("POST /apis/certificates.k8s.io/v1/namespaces/default/podcertificaterequests ") {
            let n = made.len();
            (200, serde_json::json!({"metadata": {"namespace": "default", "name": format!("req-{n}"), "creationTimestamp": t(now)}}))
        } else if line.starts_with("GET /apis/certificates.k8s.io/v1/podcertificaterequests?fieldSelector=spec.nodeName%3Dnode") {
            if line.contains("watch=true") {
                std::thread::sleep(Duration::from_millis(100));
                let events: Vec<serde_json::Value> = made
                    .into_iter()
                    .map(|o| serde_json::json!({"type": "ADDED", "object": o}))
                    .collect();
                // The loopback answers one JSON value: the newest request's event (the older
                // ones came in the list or an earlier watch).
                match events.last() {
                    Some(e) => (200, e.clone()),
                    None => (200, serde_json::json!({"type": "BOOKMARK", "object": {"metadata": {"resourceVersion": "0"}}})),
                }
            } else {
                (200, serde_json::json!({"metadata": {"resourceVersion": "1"}, "items": made}))
            }
        } else {
            failure(404, "NotFound")
        }
    })
}

/// An API pod projecting a pod certificate into `/tls`.
#[cfg(feature = "apiserver")]
fn api_pod_with_certificate(uid: &str) -> Pod {
    let mut p = pod_json(
        uid,
        serde_json::json!({
            "serviceAccountName": "default",
            "containers": [{
                "name": "main", "image": IMAGE, "command": ["sleep", "3600"],
                "volumeMounts": [{"name": "tls", "mountPath": "/tls", "readOnly": true}]
            }],
            "volumes": [{"name": "tls", "projected": {"sources": [
                {"podCertificate": {"signerName": "x.io/s", "keyType": "ECDSAP256", "credentialBundlePath": "b.pem"}}
            ]}}]
        }),
    );
    p.metadata.name = "certified".into();
    from_the_api(p)
}

#[cfg(feature = "apiserver")]
#[test]
fn a_pod_certificate_is_refreshed_at_begin_refresh_at_on_the_crates_clock() {
    rt::block_on(async {
        let (url, seen) = serve_pod_certificates();
        let store = crate::objects::Store::default();
        let h = harness_with("podcert", Source::Api, store.clone());
        let _objects = rt::spawn(crate::cluster::objects::run_objects(
            plain_client(url),
            h.kubelet.clone(),
            store,
            None,
            crate::objects::ChangeDetection::Cache,
            Duration::from_secs(60),
            "node".into(),
        ));
        let posts = || {
            seen.lock()
                .unwrap()
                .iter()
                .filter(|(l, _)| l.starts_with("POST /apis/certificates.k8s.io/"))
                .count()
        };
        // The watch runs on a thread of its own, on real time: waits here let real time pass
        // with the fake clock still.
        let wait = async |what: &str, cond: &dyn Fn() -> bool| {
            let t0 = std::time::Instant::now();
            while !cond() {
                assert!(
                    t0.elapsed() < Duration::from_secs(20),
                    "{what}: not reached"
                );
                async_io::Timer::after(Duration::from_millis(20)).await;
                rt::settle().await;
            }
        };
        h.set_api_pods(vec![api_pod_with_certificate("uc")]).await;
        wait("the pod running", &|| h.running("uc") == 1).await;
        assert_eq!(posts(), 1);
        let bundle = |h: &Harness| {
            let c = h.fake.containers_of_pod("uc").into_iter().next().unwrap();
            let m = c
                .config
                .mounts
                .iter()
                .find(|m| m.container_path == "/tls")
                .unwrap();
            std::fs::read_to_string(std::path::Path::new(&m.host_path).join("b.pem")).unwrap()
        };
        assert!(
            bundle(&h).ends_with("AAE1\n-----END CERTIFICATE-----\n"),
            "{}",
            bundle(&h)
        );
        // Nothing before beginRefreshAt (an hour after the request) on the crate's clock.
        h.clock.advance(Duration::from_secs(3590));
        h.run_for(1).await;
        rt::settle().await;
        assert_eq!(posts(), 1, "no refresh before beginRefreshAt");
        // By beginRefreshAt and its jitter (5 min at most): a new key and request.
        h.clock.advance(Duration::from_secs(320));
        h.run_for(1).await;
        wait("the refresh request", &|| posts() == 2).await;
        wait("the new chain in the file", &|| bundle(&h).contains("AAE2")).await;
        assert_eq!(h.running("uc"), 1, "the container kept running");
        // Fresh again: no further request, however many rounds run.
        for _ in 0..25 {
            async_io::Timer::after(Duration::from_millis(20)).await;
            h.run_for(1).await;
        }
        assert_eq!(posts(), 2);
    });
}

/// A loopback apiserver for the pod status publisher alone: a PATCH of a pod's status is
/// answered 200 with empty metadata, the first `refuse` of them 500; anything else 404.
#[cfg(feature = "apiserver")]
fn serve_statuses(refuse: usize) -> (String, Requests) {
    serve_loopback(move |line, _, seen| {
        let patches = seen.iter().filter(|(l, _)| l.starts_with("PATCH ")).count();
        let status = line.starts_with("PATCH ") && line.contains("/status ");
        if !status {
            failure(404, "NotFound")
        } else if patches > refuse {
            (200, serde_json::json!({"metadata": {}}))
        } else {
            failure(500, "InternalError")
        }
    })
}

/// The phase of the last status patch each pod got, by pod name.
#[cfg(feature = "apiserver")]
fn patched_phases(
    seen: &std::sync::Mutex<Vec<(String, serde_json::Value)>>,
) -> std::collections::BTreeMap<String, String> {
    let mut out = std::collections::BTreeMap::new();
    for (line, body) in seen.lock().unwrap().iter() {
        let Some(rest) = line.strip_prefix("PATCH /api/v1/namespaces/default/pods/") else {
            continue;
        };
        let name = rest.split('/').next().unwrap_or_default().to_owned();
        let phase = body["status"]["phase"].as_str().unwrap_or_default();
        out.insert(name, phase.to_owned());
    }
    out
}

#[cfg(feature = "apiserver")]
fn api_pod_named(uid: &str, name: &str) -> Pod {
    from_the_api(pod(uid, name, "sleep 3600"))
}

/// A harness of API pods whose statuses the publisher sends to `serve_statuses(refuse)`; the
/// publisher's task and what that apiserver received.
#[cfg(feature = "apiserver")]
fn publishing(tag: &str, refuse: usize) -> (Harness, Requests, rt::Task<()>) {
    let (url, seen) = serve_statuses(refuse);
    let h = harness_with(tag, Source::Api, crate::objects::Store::default());
    let publisher = rt::spawn(crate::cluster::run_pod_status(
        plain_client(url),
        h.kubelet.clone(),
    ));
    (h, seen, publisher)
}

#[cfg(feature = "apiserver")]
#[test]
fn api_pod_statuses_are_patched_as_they_change_not_at_the_next_period() {
    rt::block_on(async {
        let (h, seen, _publisher) = publishing("publish", 0);
        rt::settle().await;
        assert!(seen.lock().unwrap().is_empty(), "no pod, no patch");

        let pods: Vec<Pod> = (1..=4)
            .map(|i| api_pod_named(&format!("u{i}"), &format!("p{i}")))
            .collect();
        h.set_api_pods(pods).await;
        rt::settle().await;
        // Every pod runs, and the apiserver has its Running status, with no time gone by: the
        // statuses went out as they changed, not at the publisher's period.
        assert!((1..=4).all(|i| h.running(&format!("u{i}")) == 1));
        let phases = patched_phases(&seen);
        let want: std::collections::BTreeMap<String, String> = (1..=4)
            .map(|i| (format!("p{i}"), "Running".to_owned()))
            .collect();
        assert_eq!(phases, want, "{:?}", seen.lock().unwrap());
        assert_eq!(h.clock.elapsed(), Duration::ZERO);
        // Each patch carries the pod's UID as its precondition.
        for (line, body) in seen.lock().unwrap().iter() {
            let name = line.split('/').nth(6).unwrap_or_default();
            assert_eq!(
                body["metadata"]["uid"],
                format!("u{}", name.trim_start_matches('p')),
                "{line}"
            );
        }

        // Nothing changes: nothing is sent, period after period.
        let before = seen.lock().unwrap().len();
        h.run_for(5).await;
        assert_eq!(seen.lock().unwrap().len(), before, "no patch at rest");

        // A container exits and is restarted: the change goes out at once, alone. It is in the
        // apiserver in the same fake second the status changed in.
        let id = h
            .fake
            .containers_of_pod("u2")
            .into_iter()
            .find(|c| c.state == ContainerState::ContainerRunning)
            .unwrap()
            .id;
        h.fake.exit_container(&id, 1);
        h.until("the restart in the status", 5, |h| {
            h.status_of("u2").container_statuses[0].restart_count == 1
        })
        .await;
        let after: Vec<(String, serde_json::Value)> = seen.lock().unwrap()[before..].to_vec();
        assert!(
            !after.is_empty()
                && after
                    .iter()
                    .all(|(l, _)| l.starts_with("PATCH /api/v1/namespaces/default/pods/p2/status ")),
            "{after:?}"
        );
        let last = &after.last().unwrap().1;
        assert_eq!(
            last["status"]["containerStatuses"][0]["restartCount"], 1,
            "{last}"
        );
    });
}

#[cfg(feature = "apiserver")]
#[test]
fn a_refused_status_patch_is_tried_again_after_its_backoff_with_no_change_to_signal_it() {
    rt::block_on(async {
        let (h, seen, _publisher) = publishing("republish", 1);
        h.set_api_pods(vec![api_pod_named("u1", "p1")]).await;
        rt::settle().await;
        assert_eq!(h.running("u1"), 1);
        let patches = |seen: &std::sync::Mutex<Vec<(String, serde_json::Value)>>| {
            seen.lock()
                .unwrap()
                .iter()
                .filter(|(l, _)| l.starts_with("PATCH "))
                .count()
        };
        assert!(patches(&seen) >= 1);
        // The refusal is retried at the first period past its backoff (2 s), with no new change
        // to signal it; not in a loop meanwhile.
        let t = h
            .until("the status in the apiserver", 30, |_| {
                patched_phases(&seen).get("p1").map(String::as_str) == Some("Running")
                    && patches(&seen) >= 2
            })
            .await;
        assert!((2..=3).contains(&t), "retried {t} s after");
        let n = patches(&seen);
        h.run_for(3).await;
        assert_eq!(patches(&seen), n, "once accepted, not sent again");
    });
}

#[test]
fn a_shutting_down_node_refuses_new_pods_and_admits_again_when_cancelled() {
    let cache = Cache::default();
    let view = View {
        listed: true,
        cache: &cache,
    };
    // No node limits at all: only the shutdown refuses.
    let mut st = new_state();
    let t0 = std::time::Instant::now();
    let a = pod("a", "web", "x");
    assert_eq!(
        syncs(&step(
            &mut st,
            Input::Snapshot(snapshot(vec![a.clone()])),
            t0,
            view
        )),
        vec!["a"]
    );
    st.shutting_down = true;
    let b = pod("b", "web2", "x");
    let cmds = step(
        &mut st,
        Input::Snapshot(snapshot(vec![a.clone(), b.clone()])),
        t0,
        view,
    );
    let reasons: Vec<(String, String)> = cmds
        .iter()
        .filter_map(|c| match c {
            Command::Reject(p, r) => Some((p.metadata.uid.clone(), r.message.clone())),
            _ => None,
        })
        .collect();
    assert_eq!(
        reasons,
        vec![(
            "b".to_owned(),
            "Pod was rejected as the node is shutting down.".to_owned()
        )]
    );
    assert_eq!(
        rejections(&cmds),
        vec![("b".to_owned(), "NodeShutdown".to_owned())]
    );
    assert!(syncs(&cmds).is_empty(), "{cmds:?}");
    // The shutdown is cancelled: a new pod is admitted; the refused one stays refused.
    st.shutting_down = false;
    let c = pod("c", "web3", "x");
    let cmds = step(&mut st, Input::Snapshot(snapshot(vec![a, b, c])), t0, view);
    assert_eq!(syncs(&cmds), vec!["c"]);
    assert!(rejections(&cmds).is_empty());
    assert!(st.rejected.contains("b"));
}

#[test]
fn dead_sandboxes_are_collected_once_a_minute_not_every_housekeeping_round() {
    let cache = runtime_holds_dead_sandboxes();
    let view = View {
        listed: true,
        cache: &cache,
    };
    let t0 = std::time::Instant::now();
    let mut st = state_with_web(view, t0);
    let hk = || Input::Housekeeping { pod_dirs: vec![] };
    let collects = collects_u1;
    // The first collection is not held back.
    assert_eq!(collects(&step(&mut st, hk(), t0, view)), 1);
    step(&mut st, Input::Collected("u1".into()), t0, view);
    // The old sandbox could not be removed: the 2 s rounds of the next minute leave it.
    let mut t = t0;
    for _ in 0..29 {
        t += HOUSEKEEPING_PERIOD;
        assert_eq!(
            collects(&step(&mut st, hk(), t, view)),
            0,
            "at {:?}",
            t - t0
        );
    }
    t = t0 + housekeeping::CONTAINER_GC_PERIOD;
    assert_eq!(collects(&step(&mut st, hk(), t, view)), 1);
}

#[test]
fn the_network_turning_ready_syncs_its_pods_now_and_collects_them_at_the_next_round() {
    let cache = runtime_holds_dead_sandboxes();
    let view = View {
        listed: true,
        cache: &cache,
    };
    let t0 = std::time::Instant::now();
    let mut st = state_with_web(view, t0);
    let hk = || Input::Housekeeping { pod_dirs: vec![] };
    let collects = collects_u1;
    assert_eq!(collects(&step(&mut st, hk(), t0, view)), 1);
    step(&mut st, Input::Collected("u1".into()), t0, view);
    // Its sync failed and backs off: due a minute from now.
    let t = t0 + Duration::from_secs(4);
    st.due.insert("u1".into(), t + Duration::from_secs(60));
    assert!(syncs(&step(&mut st, Input::Tick, t, view)).is_empty());
    assert_eq!(collects(&step(&mut st, hk(), t, view)), 0, "GC waits");
    // The network is back: synced at once, collected at the next round.
    let cmds = step(&mut st, Input::NetworkReady(vec!["u1".into()]), t, view);
    assert_eq!(syncs(&cmds), vec!["u1"]);
    st.in_flight.clear();
    let t = t + HOUSEKEEPING_PERIOD;
    assert_eq!(collects(&step(&mut st, hk(), t, view)), 1);
    // A pod that is not desired is not synced.
    let cmds = step(&mut st, Input::NetworkReady(vec!["gone".into()]), t, view);
    assert!(syncs(&cmds).is_empty());
}

/// A pod on a runtime whose network is not ready gets no sandbox, and backs off; the network's
/// return (the runtime's status is read every second while it is not ready) runs it within
/// that period, not at the end of its backoff.
#[test]
fn a_pod_waiting_for_the_network_runs_within_one_status_period_of_its_return() {
    rt::block_on(async {
        let h = harness("netready");
        h.fake.set_network_ready(false);
        h.set_pods(vec![pod("n1", "web", "sleep 3600")]).await;
        // Backing off (2 s doubling to a minute) until its next sync is at least 30 s away.
        let uid = "n1".to_owned();
        let away =
            |h: &Harness| {
                h.kubelet.state.borrow().due.get(&uid).is_some_and(|&t| {
                    t.saturating_duration_since(rt::now()) >= Duration::from_secs(30)
                })
            };
        h.until("the sync backed off", 400, away).await;
        assert_eq!(
            h.fake.calls("RunPodSandbox"),
            0,
            "no sandbox without a network"
        );
        assert_eq!(h.running("n1"), 0);
        h.fake.set_network_ready(true);
        let took = h
            .until("the pod running", 60, |h| h.running("n1") == 1)
            .await;
        // Read every second while not ready: the next read sees it.
        assert!(
            took <= crate::runtime_state::NOT_READY_PERIOD.as_secs() + 2,
            "ran {took} s after the network came back"
        );
        assert_eq!(h.fake.calls("RunPodSandbox"), 1);
    });
}

// -------------------------------------------------------------------------------------------
// In-place resize
// -------------------------------------------------------------------------------------------

fn resizable_pod(generation: i64, c1: (&str, &str), c2_memory: &str) -> Pod {
    let mut p = pod_json(
        "rs",
        serde_json::json!({"containers": [
            {"name": "c1", "image": IMAGE, "command": ["sleep", "3600"],
             "resources": {"requests": {"cpu": c1.0, "memory": c1.1},
                           "limits": {"cpu": c1.0, "memory": c1.1}},
             "resizePolicy": [{"resourceName": "cpu", "restartPolicy": "NotRequired"}]},
            {"name": "c2", "image": IMAGE, "command": ["sleep", "3600"],
             "resources": {"requests": {"cpu": "100m", "memory": c2_memory},
                           "limits": {"cpu": "100m", "memory": c2_memory}},
             "resizePolicy": [{"resourceName": "memory", "restartPolicy": "RestartContainer"}]},
        ]}),
    );
    p.metadata.generation = Some(generation);
    p
}

impl Harness {
    /// The newest instance of a container: its CPU quota and memory limit as created or updated.
    fn limits(&self, name: &str) -> (i64, i64) {
        let c = self.instances(name).pop().expect("an instance");
        let r = c.config.linux.and_then(|l| l.resources).unwrap_or_default();
        (r.cpu_quota, r.memory_limit_in_bytes)
    }

    fn container_status(&self, name: &str) -> crate::api::ContainerStatus {
        self.status_of("rs")
            .container_statuses
            .into_iter()
            .find(|c| c.name == name)
            .unwrap_or_default()
    }
}

#[test]
fn a_resize_is_applied_in_place_or_by_a_restart_as_each_resize_policy_says() {
    rt::block_on(async {
        let node = crate::cm::Allocatable {
            milli_cpu: 1000,
            memory: 1 << 30,
            ephemeral_storage: 1 << 40,
        };
        let h = harness_full("resize", Source::Api, Default::default(), Some(node));
        h.set_pods(vec![resizable_pod(1, ("200m", "64Mi"), "64Mi")])
            .await;
        h.until("both running", 5, |h| h.running("rs") == 2).await;
        assert_eq!(h.limits("c1"), (20_000, 64 << 20));
        let s = h.container_status("c1");
        assert_eq!(
            s.allocated_resources["cpu"],
            crate::api::Quantity::parse("200m").unwrap()
        );
        assert_eq!(
            s.resources.unwrap().limits["memory"],
            crate::api::Quantity::parse("64Mi").unwrap()
        );
        assert_eq!(h.status_of("rs").observed_generation, Some(1));

        // c1's CPU grows in place; c2's memory asks for a restart.
        h.set_pods(vec![resizable_pod(2, ("400m", "64Mi"), "128Mi")])
            .await;
        h.until("resized", 5, |h| {
            h.limits("c1") == (40_000, 64 << 20) && h.limits("c2").1 == 128 << 20
        })
        .await;
        h.until("c2 running again", 5, |h| h.running("rs") == 2)
            .await;
        assert_eq!(h.instances("c1").len(), 1, "c1 was not restarted");
        assert_eq!(h.instances("c2").len(), 2, "c2 was restarted");
        h.run_for(1).await;
        let st = h.status_of("rs");
        assert_eq!(st.observed_generation, Some(2));
        assert!(
            !st.conditions
                .iter()
                .any(|c| c.type_.starts_with("PodResize")),
            "{:?}",
            st.conditions
        );
        assert_eq!(
            h.container_status("c1").resources.unwrap().requests["cpu"],
            crate::api::Quantity::parse("400m").unwrap()
        );
        assert_eq!(
            h.container_status("c2").restart_count,
            1,
            "{:?}",
            h.container_status("c2")
        );

        // More CPU than the node has free: deferred, nothing applied.
        h.set_pods(vec![resizable_pod(3, ("950m", "64Mi"), "128Mi")])
            .await;
        h.run_for(2).await;
        assert_eq!(h.limits("c1"), (40_000, 64 << 20), "not applied in part");
        let st = h.status_of("rs");
        let pending = st
            .conditions
            .iter()
            .find(|c| c.type_ == "PodResizePending")
            .expect("pending");
        assert_eq!(pending.reason.as_deref(), Some("Deferred"));
        assert_eq!(
            pending.message.as_deref(),
            Some("Node didn't have enough resource: cpu, requested: 1050, used: 0, capacity: 1000")
        );
        assert_eq!(pending.observed_generation, Some(3));
        assert_eq!(
            h.container_status("c1").allocated_resources["cpu"],
            crate::api::Quantity::parse("400m").unwrap(),
            "still the allocated request"
        );
        // Back within what the node has: the pending resize is replaced and applied.
        h.set_pods(vec![resizable_pod(4, ("300m", "64Mi"), "128Mi")])
            .await;
        h.until("shrunk", 5, |h| h.limits("c1") == (30_000, 64 << 20))
            .await;
        h.run_for(1).await;
        assert!(
            !h.status_of("rs")
                .conditions
                .iter()
                .any(|c| c.type_ == "PodResizePending")
        );
    });
}

#[test]
fn tick_lateness_is_told_once_a_window_with_the_worst_tick() {
    use super::{LATENESS_WINDOW, TickLateness};
    let t0 = std::time::Instant::now();
    let ms = Duration::from_millis;
    let mut l = TickLateness::new(t0);
    assert_eq!(l.record(ms(1), t0 + Duration::from_secs(1)), None);
    assert_eq!(l.record(ms(40), t0 + Duration::from_secs(2)), None);
    assert_eq!(l.record(ms(3), t0 + LATENESS_WINDOW), Some((3, ms(40))));
    // A new window: the earlier worst is forgotten.
    assert_eq!(l.record(ms(2), t0 + LATENESS_WINDOW * 2 - ms(1)), None);
    assert_eq!(l.record(ms(0), t0 + LATENESS_WINDOW * 2), Some((2, ms(2))));
}
