//! Node-pressure eviction end to end: the real picolet binary, a real containerd, and the real
//! memory signal of this machine. `--eviction-hard=memory.available<` the machine's total memory
//! less 128 MiB is met as long as the machine uses more than 128 MiB (always, with containerd
//! running) and leaves 128 MiB allocatable, room for the pods' requests at their admission, so
//! the manager evicts every period, one pod at a time, in upstream's
//! order: the BestEffort pod, then the Burstable one, then the Guaranteed one. Ground truth for
//! "stopped" comes from `ctr`. Fails (never skips) without containerd, runc and busybox.

mod support;

use support::{Pod, agent, containerd, full};

use std::time::{Duration, Instant};

use agent::{Agent, test_dir};
use containerd::ScratchContainerd;

/// The static pod's phase, reason and message.
fn phase_reason_message(a: &Agent, pod: &str) -> (String, String, String) {
    let p = a.pod(pod).unwrap_or_default();
    let s = |k: &str| p["status"][k].as_str().unwrap_or_default().to_owned();
    (s("phase"), s("reason"), s("message"))
}

fn evicted(a: &Agent, pod: &str) -> bool {
    let (phase, reason, _) = phase_reason_message(a, pod);
    phase == "Failed" && reason == "Evicted"
}

fn mem_total_kib() -> u64 {
    let m = std::fs::read_to_string("/proc/meminfo").unwrap();
    m.lines()
        .find_map(|l| l.strip_prefix("MemTotal:"))
        .and_then(|v| v.split_whitespace().next())
        .and_then(|v| v.parse().ok())
        .expect("MemTotal in /proc/meminfo")
}

const T: Duration = Duration::from_secs(60);
// Names sort the other way round from the eviction order, so an order by name cannot pass.
const GUARANTEED: &str = "a-guaranteed";
const BURSTABLE: &str = "b-burstable";
const BEST_EFFORT: &str = "c-besteffort";

#[test]
fn memory_pressure_evicts_best_effort_then_burstable_then_guaranteed_one_per_period() {
    let d = test_dir("evict");
    let c = ScratchContainerd::start(&d.join("c"));
    let manifests = d.join("a").join("manifests");
    std::fs::create_dir_all(&manifests).unwrap();
    for (name, res) in [
        (
            GUARANTEED,
            "    resources:\n      requests: {cpu: 100m, memory: 64Mi}\n      limits: {cpu: 100m, memory: 64Mi}\n",
        ),
        (BURSTABLE, "    resources:\n      requests: {memory: 8Mi}\n"),
        (BEST_EFFORT, ""),
    ] {
        std::fs::write(
            manifests.join(format!("{name}.yaml")),
            Pod::new(name).grace(30).container_yaml(res).yaml(),
        )
        .unwrap();
    }
    // The three start with no threshold, however slow the machine; then picolet restarts with
    // one that is always met, adopts them, and its first round comes a period later.
    let mut a = Agent::start(&d.join("a"), &c.endpoint());
    a.wait_for("the three pods running", T, |_| {
        [GUARANTEED, BURSTABLE, BEST_EFFORT]
            .iter()
            .all(|p| c.running_containers(&full(p)).len() == 1)
    });
    // Allocatable memory is what the threshold leaves: 128 MiB, enough for the 72 MiB the pods
    // request when picolet admits them again at its restart.
    let threshold = format!(
        "--eviction-hard=memory.available<{}Ki",
        mem_total_kib() - 128 * 1024
    );
    a.restart_with(&[threshold]);

    a.wait_for("the BestEffort pod evicted", T, |a| evicted(a, BEST_EFFORT));
    let t1 = Instant::now();
    assert!(
        !evicted(&a, BURSTABLE) && !evicted(&a, GUARANTEED),
        "the BestEffort pod goes first, alone: {:?} {:?}",
        phase_reason_message(&a, BURSTABLE),
        phase_reason_message(&a, GUARANTEED)
    );
    let (_, _, message) = phase_reason_message(&a, BEST_EFFORT);
    assert!(
        message.starts_with("The node was low on resource: memory. Threshold quantity: ")
            && message.contains(", available: ")
            && message.contains("Container main was using "),
        "{message}"
    );
    let p = a.pod(BEST_EFFORT).unwrap();
    assert!(
        p["status"]["conditions"]
            .as_array()
            .unwrap()
            .iter()
            .any(|c| c["type"] == "DisruptionTarget" && c["reason"] == "TerminationByKubelet"),
        "{p}"
    );
    // A hard threshold stops the pod at once (1 s), not after its 30 s grace period.
    a.wait_for(
        "the BestEffort pod's containers gone per ctr",
        Duration::from_secs(15),
        |_| {
            c.pod_containers(&full(BEST_EFFORT), "container").is_empty()
                && c.pod_containers(&full(BEST_EFFORT), "sandbox").is_empty()
        },
    );
    assert!(t1.elapsed() < Duration::from_secs(15));
    // Its status says how it ended once picolet has seen it end.
    let exit_code = |a: &Agent| {
        a.pod(BEST_EFFORT).unwrap()["status"]["containerStatuses"][0]["state"]["terminated"]
            ["exitCode"]
            .clone()
    };
    a.wait_for(
        "the BestEffort pod's exit code",
        Duration::from_secs(15),
        |a| !exit_code(a).is_null(),
    );
    assert_eq!(exit_code(&a), 137, "{}", a.pod(BEST_EFFORT).unwrap());

    a.wait_for("the Burstable pod evicted", T, |a| evicted(a, BURSTABLE));
    assert!(
        !evicted(&a, GUARANTEED),
        "{:?}",
        phase_reason_message(&a, GUARANTEED)
    );
    assert_eq!(c.running_containers(&full(GUARANTEED)).len(), 1);

    a.wait_for("the Guaranteed pod evicted last", T, |a| {
        evicted(a, GUARANTEED)
    });
    // One pod per 10 s round, by picolet's own clock: the times of its eviction lines.
    let line = |p: &str| {
        format!(
            "eviction: memory.available threshold met: evicting pod default/{}",
            full(p)
        )
    };
    for (i, w) in [BEST_EFFORT, BURSTABLE, GUARANTEED].windows(2).enumerate() {
        let gap = a
            .log_gap(&line(w[0]), &line(w[1]))
            .unwrap_or_else(|| panic!("no eviction lines for {w:?}\n{}", a.log_text()));
        assert!(
            (8.0..=15.0).contains(&gap),
            "one pod per 10 s period: eviction {} came {gap:.3} s after the one before",
            i + 2
        );
    }
    a.wait_for(
        "every container gone per ctr",
        Duration::from_secs(15),
        |_| {
            [GUARANTEED, BURSTABLE, BEST_EFFORT]
                .iter()
                .all(|p| c.pod_containers(&full(p), "container").is_empty())
        },
    );

    // Evicted pods stay stopped: nothing comes back over the next periods.
    std::thread::sleep(Duration::from_secs(12));
    for p in [GUARANTEED, BURSTABLE, BEST_EFFORT] {
        assert!(
            c.pod_containers(&full(p), "container").is_empty(),
            "{p} came back"
        );
        assert!(evicted(&a, p), "{p}: {:?}", phase_reason_message(&a, p));
    }
    let log = a.log_text();
    let order: Vec<usize> = [BEST_EFFORT, BURSTABLE, GUARANTEED]
        .iter()
        .map(|p| {
            log.find(&format!(
                "eviction: memory.available threshold met: evicting pod default/{}",
                full(p)
            ))
            .unwrap_or_else(|| panic!("no eviction line for {p}\n{log}"))
        })
        .collect();
    assert!(order.windows(2).all(|w| w[0] < w[1]), "{order:?}");
}
