//! Many probed pods started at once on a real containerd (the picolet binary against a
//! containerd the test starts): the relists catch containers between CreateContainer and
//! StartContainer, and no probe may count that against them. A file of its own, so the burst
//! of pods does not load the other probe tests, which run in parallel within a file. It fails,
//! never skips, when containerd, runc or busybox are missing (`scripts/install-deps.sh`
//! installs them).

mod support;

use support::pods::{container, manifest};
use support::{agent, containerd, prom};

use std::time::Duration;

use agent::{Agent, test_dir};
use containerd::ScratchContainerd;
use serde_json::json;

const T: Duration = Duration::from_secs(90);

/// Many probed pods started at once: the relists catch some containers between CreateContainer
/// and StartContainer, and no probe may count that against them. Each container stays healthy
/// throughout, so any restart is a wrong kill.
#[test]
fn many_probed_pods_started_at_once_are_never_restarted() {
    const PODS: usize = 16;
    let d = test_dir("probe-storm");
    let c = ScratchContainerd::start(&d.join("c"));
    let a = Agent::start(&d.join("a"), &c.endpoint());
    // Past the first probe period after picolet's start, whose start-up jitter would spread
    // the first probes out.
    std::thread::sleep(Duration::from_secs(2));
    let tcp = json!({"tcpSocket": {"port": 8080}, "periodSeconds": 1, "timeoutSeconds": 5});
    for i in 0..PODS {
        let mut m = container("main", "mkdir -p /w; exec httpd -f -p 8080 -h /w");
        let mut live = tcp.clone();
        live["initialDelaySeconds"] = json!(5);
        live["failureThreshold"] = json!(3);
        m["livenessProbe"] = live;
        m["readinessProbe"] = tcp.clone();
        if i % 2 == 0 {
            let mut startup = tcp.clone();
            startup["failureThreshold"] = json!(60);
            m["startupProbe"] = startup;
        }
        a.write_manifest(
            &format!("storm{i}.json"),
            &manifest(
                &format!("storm{i}"),
                json!({"terminationGracePeriodSeconds": 1, "containers": [m]}),
            ),
        );
    }
    let names: Vec<String> = (0..PODS).map(|i| format!("storm{i}")).collect();
    a.wait_for("every pod ready", T, |a| {
        names.iter().all(|n| a.condition(n, "Ready") == "True")
    });
    // Past the liveness probes' initial delay and a few periods.
    std::thread::sleep(Duration::from_secs(8));
    let counts: Vec<(String, i64)> = names.iter().map(|n| (n.clone(), a.restarts(n))).collect();
    let restarted: Vec<&(String, i64)> = counts.iter().filter(|(_, r)| *r != 0).collect();
    let log = a.log_text();
    assert!(
        restarted.is_empty(),
        "restarted: {restarted:?}\n{}",
        log.lines()
            .filter(|l| l.contains("probe"))
            .collect::<Vec<_>>()
            .join("\n")
    );
    assert!(!log.contains("failed liveness probe"), "{log}");
    assert!(!log.contains("failed startup probe"), "{log}");

    // /metrics/probes counts them as upstream's prober does: every worker's successes, with the
    // successful probes' durations, and no liveness failure (none was probed before its delay).
    let fams = prom::check(&a.get("/metrics/probes").expect("GET /metrics/probes"));
    for (i, n) in names.iter().enumerate() {
        let pod = format!("{n}-e2e-node");
        let mut kinds = vec!["Liveness", "Readiness"];
        if i % 2 == 0 {
            kinds.push("Startup");
        }
        for kind in kinds {
            let at = [("pod", pod.as_str()), ("probe_type", kind)];
            let ok = prom::sample(
                &fams,
                "prober_probe_total",
                &[at[0], at[1], ("result", "successful")],
            );
            assert!(ok.is_some_and(|v| v >= 1.0), "{pod} {kind}: {ok:?}\n{fams}");
            let timed = prom::sample(&fams, "prober_probe_duration_seconds_count", &at);
            assert_eq!(timed, ok, "{pod} {kind}: one duration per success");
        }
        let failed = prom::sample(
            &fams,
            "prober_probe_total",
            &[
                ("pod", &pod),
                ("probe_type", "Liveness"),
                ("result", "failed"),
            ],
        );
        assert_eq!(failed, None, "{pod}: a liveness failure was counted");
    }
}
