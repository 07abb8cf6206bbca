use std::cell::RefCell;
use std::collections::HashMap;
use std::rc::Rc;
use std::time::Duration;

use super::*;
use crate::rt::{self, FakeClock};

fn secs(n: u64) -> Duration {
    Duration::from_secs(n)
}

fn cfg(total: u64, critical: u64) -> Config {
    Config {
        grace_period: secs(total),
        critical_pods: secs(critical),
        by_priority: Vec::new(),
    }
}

fn bp(priority: i32, s: i64) -> ByPriority {
    ByPriority {
        priority,
        shutdown_grace_period_seconds: s,
    }
}

fn pod(name: &str, priority: i32, grace: Option<i64>) -> PodInfo {
    PodInfo {
        uid: format!("uid-{name}"),
        namespace: "default".into(),
        name: name.into(),
        priority,
        grace,
    }
}

#[test]
fn both_periods_zero_is_off() {
    let c = cfg(0, 0);
    assert_eq!(c.validate(), Ok(()));
    assert!(!c.enabled());
    assert!(c.groups().is_empty());
    assert_eq!(c.period_requested(), Duration::ZERO);
    assert_eq!(c.describe(), "off (shutdownGracePeriod is 0)");
}

#[test]
fn critical_above_total_is_refused_naming_both_fields() {
    let e = cfg(10, 20).validate().unwrap_err();
    assert_eq!(
        e,
        "shutdownGracePeriodCriticalPods 20s must be <= shutdownGracePeriod 10s"
    );
    // Only critical set: the same check (total 0).
    let e = cfg(0, 5).validate().unwrap_err();
    assert!(e.contains("shutdownGracePeriodCriticalPods 5s must be <= shutdownGracePeriod 0s"));
}

#[test]
fn sub_second_periods_are_refused() {
    let c = Config {
        grace_period: Duration::from_millis(500),
        critical_pods: Duration::ZERO,
        by_priority: Vec::new(),
    };
    assert_eq!(
        c.validate().unwrap_err(),
        "shutdownGracePeriod 500ms must be either zero or otherwise >= 1 sec"
    );
    let c = Config {
        grace_period: secs(10),
        critical_pods: Duration::from_millis(300),
        by_priority: Vec::new(),
    };
    assert_eq!(
        c.validate().unwrap_err(),
        "shutdownGracePeriodCriticalPods 300ms must be either zero or otherwise >= 1 sec"
    );
}

#[test]
fn by_priority_excludes_the_two_periods() {
    let c = Config {
        grace_period: secs(30),
        critical_pods: Duration::ZERO,
        by_priority: vec![bp(0, 10)],
    };
    assert_eq!(
        c.validate().unwrap_err(),
        "Cannot specify both shutdownGracePeriodByPodPriority and shutdownGracePeriod at the \
         same time"
    );
    let c = Config {
        by_priority: vec![bp(0, 10), bp(5, -1)],
        ..Config::default()
    };
    assert_eq!(
        c.validate().unwrap_err(),
        "shutdownGracePeriodByPodPriority[1].shutdownGracePeriodSeconds -1 must be >= 0"
    );
}

#[test]
fn two_periods_become_two_groups() {
    assert_eq!(
        migrate_config(secs(30), secs(10)),
        vec![bp(0, 20), bp(SYSTEM_CRITICAL_PRIORITY, 10)]
    );
    assert_eq!(
        migrate_config(secs(10), secs(10)),
        vec![bp(0, 0), bp(SYSTEM_CRITICAL_PRIORITY, 10)]
    );
    assert_eq!(
        migrate_config(secs(10), Duration::ZERO),
        vec![bp(0, 10), bp(SYSTEM_CRITICAL_PRIORITY, 0)]
    );
    assert!(migrate_config(Duration::ZERO, Duration::ZERO).is_empty());
    assert!(migrate_config(secs(5), secs(6)).is_empty());
    let c = cfg(30, 10);
    assert_eq!(c.period_requested(), secs(30));
    assert_eq!(
        c.describe(),
        "30s in all: regular pods 20s, then critical pods 10s"
    );
}

#[test]
fn by_priority_groups_are_sorted_and_summed() {
    let c = Config {
        by_priority: vec![bp(100_000, 20), bp(SYSTEM_CRITICAL_PRIORITY, 30), bp(1, 10)],
        ..Config::default()
    };
    assert_eq!(c.validate(), Ok(()));
    assert_eq!(
        c.groups(),
        vec![bp(1, 10), bp(100_000, 20), bp(SYSTEM_CRITICAL_PRIORITY, 30)]
    );
    assert_eq!(c.period_requested(), secs(60));
    assert_eq!(
        c.describe(),
        "1m0s in all: priority >= 1 10s, then priority >= 100000 20s, then critical pods 30s"
    );
}

#[test]
fn pods_go_to_the_highest_group_not_above_them() {
    let groups = [bp(1, 10), bp(100_000, 20), bp(SYSTEM_CRITICAL_PRIORITY, 30)];
    let pods = vec![
        pod("below-lowest", 0, None),
        pod("lowest", 1, None),
        pod("between", 99_999, None),
        pod("boundary", 100_000, None),
        pod("cluster-critical", SYSTEM_CRITICAL_PRIORITY, None),
        pod("node-critical", NODE_CRITICAL_PRIORITY, None),
        pod("negative", -5, None),
    ];
    let g = group_by_priority(&groups, pods);
    let names = |i: usize| -> Vec<&str> { g[i].pods.iter().map(|p| p.name.as_str()).collect() };
    assert_eq!(names(0), ["below-lowest", "lowest", "between", "negative"]);
    assert_eq!(names(1), ["boundary"]);
    assert_eq!(names(2), ["cluster-critical", "node-critical"]);
    assert_eq!((g[0].seconds, g[1].seconds, g[2].seconds), (10, 20, 30));
    assert!(group_by_priority(&[], vec![pod("a", 0, None)]).is_empty());
}

#[test]
fn a_pods_priority_from_its_spec_or_its_critical_class() {
    let mut p = Pod::default();
    assert_eq!(pod_priority(&p), 0);
    p.spec.priority_class_name = Some("system-node-critical".into());
    assert_eq!(pod_priority(&p), 2_000_001_000);
    p.spec.priority_class_name = Some("system-cluster-critical".into());
    assert_eq!(pod_priority(&p), 2_000_000_000);
    p.spec.priority_class_name = Some("high".into());
    assert_eq!(pod_priority(&p), 0);
    // The apiserver's resolution wins.
    p.spec.priority = Some(1000);
    assert_eq!(pod_priority(&p), 1000);
    p.spec.termination_grace_period_seconds = Some(7);
    p.metadata.uid = "u".into();
    let i = PodInfo::of(&p);
    assert_eq!((i.priority, i.grace, i.uid.as_str()), (1000, Some(7), "u"));
}

#[test]
fn a_pod_gets_its_own_grace_period_when_shorter_than_the_share() {
    assert_eq!(pod_grace(20, Some(5)), 5);
    assert_eq!(pod_grace(20, Some(20)), 20);
    assert_eq!(pod_grace(20, Some(60)), 20);
    assert_eq!(pod_grace(20, None), 20);
    assert_eq!(pod_grace(0, Some(30)), 0);
    assert_eq!(pod_grace(10, Some(-3)), 0);
}

#[test]
fn times_are_written_as_go_writes_them() {
    assert_eq!(rfc3339_nano(0), "1970-01-01T00:00:00Z");
    assert_eq!(rfc3339_nano(1_500_000_000), "1970-01-01T00:00:01.5Z");
    assert_eq!(
        rfc3339_nano(1_700_000_000_123_456_789),
        "2023-11-14T22:13:20.123456789Z"
    );
}

fn tmp(name: &str) -> PathBuf {
    let d = std::env::temp_dir().join(format!(
        "picolet-nodeshutdown-{name}-{}",
        std::process::id()
    ));
    let _ = std::fs::remove_dir_all(&d);
    std::fs::create_dir_all(&d).unwrap();
    d
}

#[test]
fn the_state_file_round_trips_and_bad_content_names_the_field() {
    let d = tmp("state");
    assert!(matches!(load_state(&d), Ok(None)));
    let s = State {
        start_time: "2024-05-01T12:00:00.5Z".into(),
        end_time: ZERO_TIME.into(),
    };
    store_state(&d, &s).unwrap();
    let text = std::fs::read_to_string(d.join("graceful_node_shutdown_state")).unwrap();
    assert_eq!(
        text,
        r#"{"startTime":"2024-05-01T12:00:00.5Z","endTime":"0001-01-01T00:00:00Z"}"#
    );
    assert_eq!(load_state(&d).unwrap(), Some(s.clone()));
    assert!(describe_state(&s).contains("did not finish"));
    std::fs::write(
        d.join(STATE_FILE),
        r#"{"startTime":"yesterday","endTime":"0001-01-01T00:00:00Z"}"#,
    )
    .unwrap();
    let e = load_state(&d).unwrap_err();
    assert!(matches!(e, FileError::Time { .. }), "{e:?}");
    assert!(
        e.to_string()
            .contains("graceful_node_shutdown_state: startTime: \"yesterday\""),
        "{e}"
    );
    std::fs::write(d.join(STATE_FILE), "{").unwrap();
    assert!(load_state(&d).unwrap_err().to_string().contains(STATE_FILE));
    let _ = std::fs::remove_dir_all(&d);
}

/// A node whose pods stop a set time after they are killed (or never), recording what the
/// sequence did and when (seconds on the fake clock).
#[derive(Default)]
struct FakeNode {
    t0: RefCell<Option<std::time::Instant>>,
    pods: RefCell<Vec<PodInfo>>,
    /// Seconds a pod takes to stop once killed; absent: never.
    takes: HashMap<String, u64>,
    /// uid → (killed at, grace).
    killed: RefCell<HashMap<String, (u64, i64)>>,
    shutting: RefCell<Vec<(u64, bool)>>,
    posted_at: Option<u64>,
}

impl FakeNode {
    fn at(&self) -> u64 {
        let t0 = *self.t0.borrow_mut().get_or_insert_with(rt::now);
        rt::now().saturating_duration_since(t0).as_secs()
    }
}

impl Node for FakeNode {
    fn set_shutting_down(&self, on: bool) {
        let at = self.at();
        self.shutting.borrow_mut().push((at, on));
    }
    fn active_pods(&self) -> Vec<PodInfo> {
        self.pods.borrow().clone()
    }
    fn kill(&self, uid: &str, grace: i64) -> bool {
        let at = self.at();
        self.killed
            .borrow_mut()
            .insert(uid.to_owned(), (at, grace))
            .is_none()
    }
    fn stopped(&self, uid: &str) -> bool {
        let now = self.at();
        let name = uid.trim_start_matches("uid-");
        match (self.killed.borrow().get(uid), self.takes.get(name)) {
            (Some((at, _)), Some(t)) => now >= at + t,
            _ => false,
        }
    }
    fn statuses_posted(&self) -> bool {
        self.posted_at.is_some_and(|t| self.at() >= t)
    }
}

/// Runs the sequence under a fake clock moved a second at a time; returns the outcome and the
/// seconds it took.
fn run_sequence(c: &Config, node: Rc<FakeNode>, root: &Path) -> (Outcome, u64) {
    let clock = FakeClock::install();
    node.at();
    rt::block_on(async {
        let (c, n, r) = (c.clone(), node.clone(), root.to_owned());
        let task = rt::spawn(async move { process_shutdown(&c, &r, &*n).await });
        for _ in 0..600 {
            rt::settle().await;
            if task.is_finished() {
                break;
            }
            clock.advance(secs(1));
        }
        let out = task.await;
        (out, node.at())
    })
}

#[test]
fn regular_pods_stop_first_then_critical_pods_each_within_their_share() {
    let d = tmp("order");
    let node = Rc::new(FakeNode {
        pods: RefCell::new(vec![
            pod("web", 0, Some(30)),
            pod("quick", 0, Some(2)),
            pod("dns", NODE_CRITICAL_PRIORITY, Some(30)),
        ]),
        takes: [("web".into(), 4), ("quick".into(), 1), ("dns".into(), 3)].into(),
        posted_at: Some(0),
        ..FakeNode::default()
    });
    let (out, took) = run_sequence(&cfg(30, 10), node.clone(), &d);
    let k = node.killed.borrow();
    // Regular pods at once, each with min(its own grace, the 20 s share).
    assert_eq!(k["uid-web"], (0, 20));
    assert_eq!(k["uid-quick"], (0, 2));
    // The critical pod once both regular pods stopped (web took 4 s), with its 10 s share.
    assert_eq!(k["uid-dns"], (4, 10));
    assert_eq!(took, 7);
    assert_eq!(
        out.groups,
        vec![
            (0, vec!["web".to_owned(), "quick".to_owned()], true),
            (SYSTEM_CRITICAL_PRIORITY, vec!["dns".to_owned()], true)
        ]
    );
    assert!(out.statuses_posted);
    assert_eq!(*node.shutting.borrow(), [(0, true)]);
    let st = load_state(&d).unwrap().unwrap();
    assert_ne!(st.start_time, ZERO_TIME);
    assert_ne!(st.end_time, ZERO_TIME);
    let (s, e) = (
        crate::logs::format::parse_time(st.start_time.as_bytes()).unwrap(),
        crate::logs::format::parse_time(st.end_time.as_bytes()).unwrap(),
    );
    assert_eq!(e - s, 7_000_000_000);
    let _ = std::fs::remove_dir_all(&d);
}

#[test]
fn a_group_that_does_not_stop_in_time_gives_way_at_the_end_of_its_share() {
    let d = tmp("late");
    let node = Rc::new(FakeNode {
        pods: RefCell::new(vec![
            pod("stuck", 0, None),
            pod("dns", NODE_CRITICAL_PRIORITY, None),
        ]),
        takes: [("dns".into(), 1)].into(),
        posted_at: Some(0),
        ..FakeNode::default()
    });
    let (out, took) = run_sequence(&cfg(30, 10), node.clone(), &d);
    assert_eq!(node.killed.borrow()["uid-stuck"], (0, 20));
    assert_eq!(node.killed.borrow()["uid-dns"], (20, 10));
    assert_eq!(took, 21);
    assert!(!out.groups[0].2, "the stuck group did not stop in time");
    assert!(out.groups[1].2);
    let _ = std::fs::remove_dir_all(&d);
}

#[test]
fn empty_groups_take_no_time_and_statuses_are_waited_for_within_the_period() {
    let d = tmp("statuses");
    // Only critical pods: the regular group's 20 s are not spent.
    let node = Rc::new(FakeNode {
        pods: RefCell::new(vec![pod("dns", SYSTEM_CRITICAL_PRIORITY, Some(5))]),
        takes: [("dns".into(), 2)].into(),
        posted_at: Some(5),
        ..FakeNode::default()
    });
    let (out, took) = run_sequence(&cfg(30, 10), node.clone(), &d);
    assert_eq!(node.killed.borrow()["uid-dns"], (0, 5));
    assert_eq!(out.groups.len(), 1);
    assert!(out.statuses_posted);
    assert_eq!(took, 5, "waited for the statuses until they were posted");

    // Statuses never posted: the wait ends with the whole period.
    let node = Rc::new(FakeNode {
        pods: RefCell::new(vec![pod("web", 0, None)]),
        takes: [("web".into(), 1)].into(),
        posted_at: None,
        ..FakeNode::default()
    });
    let (out, took) = run_sequence(&cfg(30, 10), node, &d);
    assert!(!out.statuses_posted);
    assert_eq!(took, 30);
    let _ = std::fs::remove_dir_all(&d);
}

#[test]
fn by_priority_groups_run_lowest_first() {
    let d = tmp("bypriority");
    let c = Config {
        by_priority: vec![bp(SYSTEM_CRITICAL_PRIORITY, 5), bp(0, 5), bp(1000, 5)],
        ..Config::default()
    };
    let node = Rc::new(FakeNode {
        pods: RefCell::new(vec![
            pod("critical", NODE_CRITICAL_PRIORITY, None),
            pod("high", 5000, None),
            pod("low", 0, None),
        ]),
        takes: [
            ("critical".into(), 1),
            ("high".into(), 1),
            ("low".into(), 1),
        ]
        .into(),
        posted_at: Some(0),
        ..FakeNode::default()
    });
    let (out, _) = run_sequence(&c, node.clone(), &d);
    let k = node.killed.borrow();
    assert_eq!(
        (k["uid-low"].0, k["uid-high"].0, k["uid-critical"].0),
        (0, 1, 2)
    );
    let order: Vec<i32> = out.groups.iter().map(|g| g.0).collect();
    assert_eq!(order, [0, 1000, SYSTEM_CRITICAL_PRIORITY]);
    let _ = std::fs::remove_dir_all(&d);
}

#[test]
fn the_config_file_fields_are_parsed_and_checked() {
    use crate::cli::options::Options;
    use crate::cli::parse::parse_config;
    let path = Path::new("/etc/picolet/config.yaml");
    let doc = |body: &str| {
        format!("apiVersion: kubelet.config.k8s.io/v1beta1\nkind: KubeletConfiguration\n{body}")
    };
    let mut o = Options::default();
    parse_config(
        doc("shutdownGracePeriod: 30s\nshutdownGracePeriodCriticalPods: 10s\n").as_bytes(),
        path,
        &mut o,
    )
    .unwrap();
    assert_eq!(o.shutdown, cfg(30, 10));

    let mut o = Options::default();
    parse_config(
        doc(
            "shutdownGracePeriodByPodPriority:\n- priority: 2000000000\n  \
             shutdownGracePeriodSeconds: 10\n- priority: 0\n  shutdownGracePeriodSeconds: 20\n",
        )
        .as_bytes(),
        path,
        &mut o,
    )
    .unwrap();
    assert_eq!(
        o.shutdown.groups(),
        vec![bp(0, 20), bp(SYSTEM_CRITICAL_PRIORITY, 10)]
    );

    let mut o = Options::default();
    let e = parse_config(
        doc("shutdownGracePeriod: 10s\nshutdownGracePeriodCriticalPods: 20s\n").as_bytes(),
        path,
        &mut o,
    )
    .unwrap_err()
    .to_string();
    assert!(e.contains("/etc/picolet/config.yaml"), "{e}");
    assert!(
        e.contains("shutdownGracePeriodCriticalPods 20s must be <= shutdownGracePeriod 10s"),
        "{e}"
    );
    let e = parse_config(doc("shutdownGracePeriod: soon\n").as_bytes(), path, &mut o)
        .unwrap_err()
        .to_string();
    assert!(
        e.contains("shutdownGracePeriod: invalid duration \"soon\""),
        "{e}"
    );
    let e = parse_config(
        doc("shutdownGracePeriodByPodPriority:\n- shutdownGracePeriodSeconds: 1\n").as_bytes(),
        path,
        &mut o,
    )
    .unwrap_err()
    .to_string();
    assert!(e.contains("shutdownGracePeriodByPodPriority[0]"), "{e}");
    assert!(e.contains("priority"), "{e}");
}

#[test]
fn the_final_status_is_upstreams() {
    let prev = crate::api::PodStatus {
        phase: Some("Running".into()),
        ..Default::default()
    };
    let s = crate::status::generate::failed_by_kubelet(&prev, REASON, MESSAGE, 0, true);
    assert_eq!(s.phase.as_deref(), Some("Failed"));
    assert_eq!(s.reason.as_deref(), Some("Terminated"));
    assert_eq!(
        s.message.as_deref(),
        Some("Pod was terminated in response to imminent node shutdown.")
    );
    let d = s
        .conditions
        .iter()
        .find(|c| c.type_ == "DisruptionTarget")
        .expect("a DisruptionTarget condition");
    assert_eq!(d.status, "True");
    assert_eq!(d.reason.as_deref(), Some("TerminationByKubelet"));
    assert_eq!(d.message.as_deref(), Some(MESSAGE));
}
