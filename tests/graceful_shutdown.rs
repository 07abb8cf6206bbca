//! Graceful node shutdown against a real dbus-daemon (a private bus of the test's own) with a
//! fake systemd-logind on it (`support/fake_logind.py`), and picolet against the in-process
//! fake runtime: the delay lock taken at start, pods stopped group by group on
//! `PrepareForShutdown(true)` with upstream's final status, the lock released (the fake sees its
//! pipe closed), pods refused while the node shuts down and admitted again after
//! `PrepareForShutdown(false)`, the lock taken again when logind restarts; without a bus, one
//! warning and the pods run on.

mod support;

use support::{IMAGE, agent, fake_apiserver, fake_cri, private_bus, run, until};

use std::rc::Rc;
use std::sync::Arc;
use std::time::{Duration, Instant};

use agent::Agent;
use fake_apiserver::FakeApi;
use fake_cri::{ContainerState, FakeCri, TempDir};
use picolet::rt;
use private_bus::{FakeLogind, PrivateBus};

fn pod_yaml(name: &str, grace: u32, class: Option<&str>) -> String {
    let class = class.map_or(String::new(), |c| format!("  priorityClassName: {c}\n"));
    format!(
        "apiVersion: v1\nkind: Pod\nmetadata:\n  name: {name}\nspec:\n{class}  \
         terminationGracePeriodSeconds: {grace}\n  containers:\n  - name: {name}-main\n    \
         image: {IMAGE}\n    command: [sleep, \"3600\"]\n"
    )
}

fn running(fake: &FakeCri, container: &str) -> bool {
    fake.containers()
        .iter()
        .any(|c| c.metadata().name == container && c.state == ContainerState::ContainerRunning)
}

async fn start_on_bus(
    dir: &std::path::Path,
    endpoint: &str,
    extra: &[String],
    config: &str,
    bus: &str,
) -> Arc<Agent> {
    let (dir, endpoint, config) = (dir.to_owned(), endpoint.to_owned(), config.to_owned());
    let extra = extra.to_vec();
    let env = vec![("DBUS_SYSTEM_BUS_ADDRESS".to_owned(), bus.to_owned())];
    Arc::new(
        rt::unblock(move || Agent::start_configured_env(&dir, &endpoint, &extra, &config, &env))
            .await,
    )
}

/// A pod's status field from picolet's /pods, read off the executor's thread.
async fn status(a: &Arc<Agent>, pod: &str, field: &'static str) -> serde_json::Value {
    let (a, pod) = (a.clone(), pod.to_owned());
    rt::unblock(move || {
        a.pod(&pod)
            .map(|p| p["status"][field].clone())
            .unwrap_or_default()
    })
    .await
}

#[test]
fn a_shutdown_stops_pods_in_order_releases_the_lock_and_a_cancel_admits_again() {
    run(async {
        let tmp = TempDir::new("gns");
        let bus = PrivateBus::start(&tmp.path().join("bus"));
        // logind already waits 60 s: no drop-in is written (and none on this machine).
        let mut logind = FakeLogind::start(&bus.address, 60_000_000, None);
        let fake = FakeCri::start(tmp.path());
        fake.add_image(IMAGE);
        let a = start_on_bus(
            &tmp.path().join("a"),
            &fake.endpoint(),
            &[],
            "shutdownGracePeriod: 20s\nshutdownGracePeriodCriticalPods: 8s\n",
            &bus.address,
        )
        .await;
        a.write_manifest("web.yaml", &pod_yaml("web", 30, None));
        a.write_manifest("quick.yaml", &pod_yaml("quick", 3, None));
        a.write_manifest(
            "dns.yaml",
            &pod_yaml("dns", 30, Some("system-node-critical")),
        );
        until(
            &a,
            "the three pods running",
            Duration::from_secs(30),
            async || {
                ["web-main", "quick-main", "dns-main"]
                    .iter()
                    .all(|c| running(&fake, c))
            },
        )
        .await;
        until(
            &a,
            "picolet's delay lock",
            Duration::from_secs(20),
            async || logind.count("inhibit shutdown picolet delay") == 1,
        )
        .await;
        assert!(a.log_text().contains("holding logind's delay lock"));
        assert_eq!(logind.count("released"), 0, "the lock is held");

        // Each stop takes a second, so the groups' order shows in the runtime's calls.
        fake.set_delay("StopContainer", Duration::from_secs(1));
        logind.send("shutdown true");
        until(
            &a,
            "the lock released",
            Duration::from_secs(40),
            async || logind.count("released 1") == 1,
        )
        .await;
        let stops = fake.stops();
        let at = |name: &str| {
            stops
                .iter()
                .position(|(n, _)| n == name)
                .unwrap_or_else(|| panic!("{name} never stopped: {stops:?}"))
        };
        // Regular pods first, each with min(its grace, the 12 s share); the critical pod last
        // with the 8 s of the critical share.
        assert!(
            at("web-main") < at("dns-main") && at("quick-main") < at("dns-main"),
            "{stops:?}"
        );
        let timeout = |name: &str| stops[at(name)].1;
        assert_eq!(
            (
                timeout("web-main"),
                timeout("quick-main"),
                timeout("dns-main")
            ),
            (12, 3, 8),
            "{stops:?}"
        );
        for pod in ["web", "quick", "dns"] {
            assert_eq!(status(&a, pod, "phase").await, "Failed", "{pod}");
            assert_eq!(status(&a, pod, "reason").await, "Terminated", "{pod}");
            assert_eq!(
                status(&a, pod, "message").await,
                "Pod was terminated in response to imminent node shutdown.",
                "{pod}"
            );
            let conds = status(&a, pod, "conditions").await;
            let dt = conds
                .as_array()
                .and_then(|cs| cs.iter().find(|c| c["type"] == "DisruptionTarget"))
                .cloned()
                .unwrap_or_default();
            assert_eq!(
                (&dt["status"], &dt["reason"]),
                (&"True".into(), &"TerminationByKubelet".into()),
                "{pod}: {conds}"
            );
        }
        let state: serde_json::Value = serde_json::from_slice(
            &std::fs::read(tmp.path().join("a/kubelet/graceful_node_shutdown_state")).unwrap(),
        )
        .unwrap();
        assert_ne!(state["startTime"], "0001-01-01T00:00:00Z", "{state}");
        assert_ne!(state["endTime"], "0001-01-01T00:00:00Z", "{state}");
        assert!(!running(&fake, "web-main") && !running(&fake, "dns-main"));

        // While the node shuts down, a new pod is refused with upstream's reason.
        fake.set_delay("StopContainer", Duration::ZERO);
        a.write_manifest("late.yaml", &pod_yaml("late", 1, None));
        let (a2, t0) = (a.clone(), Instant::now());
        loop {
            if status(&a2, "late", "reason").await == "NodeShutdown" {
                break;
            }
            assert!(
                t0.elapsed() < Duration::from_secs(20),
                "late not refused\n{}",
                a.log_text()
            );
            rt::sleep(Duration::from_millis(100)).await;
        }
        assert_eq!(status(&a, "late", "phase").await, "Failed");
        assert_eq!(
            status(&a, "late", "message").await,
            "Pod was rejected: Pod was rejected as the node is shutting down."
        );

        // Cancelled: the lock is taken again and new pods run.
        logind.send("shutdown false");
        until(
            &a,
            "the lock taken again",
            Duration::from_secs(20),
            async || logind.count("inhibit shutdown picolet delay") == 2,
        )
        .await;
        a.write_manifest("after.yaml", &pod_yaml("after", 1, None));
        until(
            &a,
            "a pod admitted after the cancel",
            Duration::from_secs(30),
            async || running(&fake, "after-main"),
        )
        .await;
        assert!(
            !running(&fake, "late-main"),
            "the refused pod stays refused"
        );

        // logind restarts: the new one is given a lock too.
        logind.stop();
        let logind2 = FakeLogind::start(&bus.address, 60_000_000, None);
        until(
            &a,
            "the lock taken from the restarted logind",
            Duration::from_secs(20),
            async || logind2.count("inhibit shutdown picolet delay") == 1,
        )
        .await;
        assert!(
            a.log_text()
                .contains("logind restarted; taking the lock again")
        );
        drop(a);
    });
}

#[test]
fn without_a_bus_picolet_warns_once_and_runs_its_pods() {
    run(async {
        let tmp = TempDir::new("gns-nobus");
        let fake = FakeCri::start(tmp.path());
        fake.add_image(IMAGE);
        let nothing = format!("unix:path={}", tmp.path().join("no-bus.sock").display());
        let a = start_on_bus(
            &tmp.path().join("a"),
            &fake.endpoint(),
            &[],
            "shutdownGracePeriod: 10s\n",
            &nothing,
        )
        .await;
        a.write_manifest("web.yaml", &pod_yaml("web", 1, None));
        until(&a, "the pod running", Duration::from_secs(30), async || {
            running(&fake, "web-main")
        })
        .await;
        // Attempts at 0, 1, 3 and 7 s: one warning, the rest counted.
        until(
            &a,
            "a fourth attempt",
            Duration::from_secs(20),
            async || a.log_text().contains("attempt 4 failed"),
        )
        .await;
        let log = a.log_text();
        assert_eq!(
            log.matches("graceful node shutdown unavailable").count(),
            1,
            "{log}"
        );
        assert!(log.contains("no system bus"), "{log}");
        assert!(running(&fake, "web-main"));
    });
}

/// A node with no pods, for the library's manager.
struct NoPods;
impl picolet::nodeshutdown::Node for NoPods {
    fn set_shutting_down(&self, _: bool) {}
    fn active_pods(&self) -> Vec<picolet::nodeshutdown::PodInfo> {
        Vec::new()
    }
    fn kill(&self, _: &str, _: i64) -> bool {
        false
    }
    fn stopped(&self, _: &str) -> bool {
        true
    }
    fn statuses_posted(&self) -> bool {
        true
    }
}

/// The library's manager against the fake: a logind that waits less than the grace period
/// gets the drop-in and a reload (KillUnit SIGHUP through systemd), then the lock is taken.
/// Runs the shutdown manager alone (no pods) until the fake logind saw it take the lock.
fn run_until_locked(settings: picolet::nodeshutdown::manager::Settings, logind: &FakeLogind) {
    run(async {
        let _task = rt::spawn(picolet::nodeshutdown::manager::run(
            settings,
            Rc::new(NoPods),
            "n".into(),
        ));
        let t0 = Instant::now();
        while logind.count("inhibit shutdown picolet delay") == 0 {
            assert!(
                t0.elapsed() < Duration::from_secs(20),
                "no lock taken: {:?}",
                logind.lines()
            );
            rt::sleep(Duration::from_millis(100)).await;
        }
    });
}

#[test]
fn a_short_inhibit_delay_is_raised_with_a_drop_in_and_a_reload() {
    let tmp = TempDir::new("gns-dropin");
    let bus = PrivateBus::start(&tmp.path().join("bus"));
    let conf_dir = tmp.path().join("logind.conf.d");
    let drop_in = conf_dir.join("99-picolet.conf");
    let logind = FakeLogind::start(&bus.address, 5_000_000, Some(&drop_in));
    let settings = picolet::nodeshutdown::manager::Settings {
        config: picolet::nodeshutdown::Config {
            grace_period: Duration::from_secs(30),
            critical_pods: Duration::from_secs(10),
            by_priority: Vec::new(),
        },
        root_dir: tmp.path().to_owned(),
        bus: picolet::nodeshutdown::dbus::parse_address(&bus.address).unwrap(),
        logind_conf_dir: conf_dir.clone(),
    };
    run_until_locked(settings, &logind);
    let text = std::fs::read_to_string(&drop_in).unwrap();
    assert!(text.contains("[Login]\nInhibitDelayMaxSec=30\n"), "{text}");
    let lines = logind.lines();
    let pos = |p: &str| lines.iter().position(|l| l.starts_with(p));
    assert!(
        pos("killunit systemd-logind.service all 1") < pos("inhibit shutdown"),
        "{lines:?}"
    );
    assert!(
        lines
            .iter()
            .filter(|l| *l == "get InhibitDelayMaxUSec")
            .count()
            >= 2
    );
}

/// A drop-in that cannot be written (a read-only /etc): the lock is still taken, and logind's
/// shorter delay is what the pods get.
#[test]
fn a_drop_in_that_cannot_be_written_still_takes_the_lock() {
    let tmp = TempDir::new("gns-readonly");
    let bus = PrivateBus::start(&tmp.path().join("bus"));
    // A file where the directory would go: creating it fails as on a read-only /etc.
    std::fs::write(tmp.path().join("etc"), "").unwrap();
    let conf_dir = tmp.path().join("etc/logind.conf.d");
    let logind = FakeLogind::start(&bus.address, 5_000_000, None);
    let settings = picolet::nodeshutdown::manager::Settings {
        config: picolet::nodeshutdown::Config {
            grace_period: Duration::from_secs(30),
            ..Default::default()
        },
        root_dir: tmp.path().to_owned(),
        bus: picolet::nodeshutdown::dbus::parse_address(&bus.address).unwrap(),
        logind_conf_dir: conf_dir,
    };
    run_until_locked(settings, &logind);
    assert_eq!(logind.count("killunit"), 0, "{:?}", logind.lines());
}

/// A node joined to a fake apiserver, on a private bus with a fake logind, running one API pod
/// `web` (grace period 30 s) once it is bound; `config` is its KubeletConfiguration.
struct Joined {
    tmp: TempDir,
    bus: PrivateBus,
    logind: FakeLogind,
    fake: FakeCri,
    api: FakeApi,
    a: Arc<Agent>,
}

async fn joined(tag: &str, config: &str) -> Joined {
    let tmp = TempDir::new(tag);
    let bus = PrivateBus::start(&tmp.path().join("bus"));
    let logind = FakeLogind::start(&bus.address, 60_000_000, None);
    let fake = FakeCri::start(tmp.path());
    fake.add_image(IMAGE);
    let api = FakeApi::start();
    let dir = tmp.path().join("a");
    std::fs::create_dir_all(&dir).unwrap();
    let kc = api.kubeconfig(&dir);
    let a = start_on_bus(
        &dir,
        &fake.endpoint(),
        &["--kubeconfig".to_owned(), kc.display().to_string()],
        config,
        &bus.address,
    )
    .await;
    api.create_pod(serde_json::json!({
        "apiVersion": "v1", "kind": "Pod",
        "metadata": {"name": "web", "namespace": "default"},
        "spec": {
            "nodeName": "e2e-node",
            "terminationGracePeriodSeconds": 30,
            "containers": [{"name": "web-main", "image": IMAGE, "command": ["sleep", "3600"]}]
        }
    }));
    Joined {
        tmp,
        bus,
        logind,
        fake,
        api,
        a,
    }
}

/// Joined to an apiserver: the pods' final statuses are in the API and the node NotReady
/// before the lock is released.
#[test]
fn joined_to_a_cluster_final_statuses_and_not_ready_are_posted_before_the_lock_goes() {
    run(async {
        let Joined {
            tmp: _tmp,
            bus: _bus,
            mut logind,
            fake,
            api,
            a,
        } = joined(
            "gns-api",
            "shutdownGracePeriod: 20s\nshutdownGracePeriodCriticalPods: 5s\n",
        )
        .await;
        let ready = |api: &FakeApi| {
            api.get("nodes/e2e-node")
                .and_then(|n| {
                    n["status"]["conditions"]
                        .as_array()
                        .and_then(|cs| cs.iter().find(|c| c["type"] == "Ready").cloned())
                })
                .unwrap_or_default()
        };
        until(
            &a,
            "the API pod running and reported",
            Duration::from_secs(30),
            async || {
                running(&fake, "web-main")
                    && api
                        .get("pods/default/web")
                        .is_some_and(|p| p["status"]["phase"] == "Running")
                    && ready(&api)["status"] == "True"
            },
        )
        .await;
        until(
            &a,
            "picolet's delay lock",
            Duration::from_secs(20),
            async || logind.count("inhibit shutdown picolet delay") == 1,
        )
        .await;
        let t0 = Instant::now();
        logind.send("shutdown true");
        until(
            &a,
            "the lock released",
            Duration::from_secs(30),
            async || logind.count("released 1") == 1,
        )
        .await;
        // Released once the status was in the API, well before the 20 s were up.
        assert!(t0.elapsed() < Duration::from_secs(10), "{:?}", t0.elapsed());
        let p = api.get("pods/default/web").unwrap();
        assert_eq!(p["status"]["phase"], "Failed", "{p}");
        assert_eq!(p["status"]["reason"], "Terminated", "{p}");
        assert_eq!(
            p["status"]["message"],
            "Pod was terminated in response to imminent node shutdown."
        );
        let r = ready(&api);
        assert_eq!(
            (&r["status"], &r["reason"], &r["message"]),
            (
                &"False".into(),
                &"KubeletNotReady".into(),
                &"node is shutting down".into()
            ),
            "{r}"
        );
        assert!(!a.log_text().contains("not every final pod status"));

        // Cancelled: Ready again.
        logind.send("shutdown false");
        until(
            &a,
            "the node Ready again",
            Duration::from_secs(20),
            async || ready(&api)["status"] == "True",
        )
        .await;
    });
}

/// Joined to an apiserver that has gone away: the lock is released once the pods stopped,
/// without waiting out the grace period for statuses that cannot be posted.
#[test]
fn an_offline_node_does_not_wait_for_statuses_it_cannot_post() {
    run(async {
        let Joined {
            tmp: _tmp,
            bus: _bus,
            mut logind,
            fake,
            api,
            a,
        } = joined(
            "gns-offline",
            "shutdownGracePeriod: 30s\nshutdownGracePeriodCriticalPods: 5s\n",
        )
        .await;
        until(
            &a,
            "the API pod running and reported",
            Duration::from_secs(30),
            async || {
                running(&fake, "web-main")
                    && api
                        .get("pods/default/web")
                        .is_some_and(|p| p["status"]["phase"] == "Running")
            },
        )
        .await;
        until(
            &a,
            "picolet's delay lock",
            Duration::from_secs(20),
            async || logind.count("inhibit shutdown picolet delay") == 1,
        )
        .await;
        api.set_down(true);
        let t0 = Instant::now();
        logind.send("shutdown true");
        until(
            &a,
            "the lock released",
            Duration::from_secs(40),
            async || logind.count("released 1") == 1,
        )
        .await;
        assert!(!running(&fake, "web-main"));
        // The pod stopped in about a second; the 30 s were not waited out.
        assert!(t0.elapsed() < Duration::from_secs(15), "{:?}", t0.elapsed());
        assert_eq!(
            api.get("pods/default/web").unwrap()["status"]["phase"],
            "Running",
            "the apiserver never heard"
        );
        assert!(!a.log_text().contains("not every final pod status"));
    });
}
