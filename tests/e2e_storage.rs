//! Local ephemeral storage end to end: the real picolet binary and a real containerd, no node
//! pressure at all. A pod whose container writes past its `limits.ephemeral-storage` (its
//! writable layer, as containerd measures it), one whose emptyDir fills past its `sizeLimit`
//! (as picolet walks it) and one over its containers' limits together are evicted with
//! upstream's reason and messages; a pod within its limits keeps running, and its Summary API
//! figures match `du` of the same directories. Fails (never skips) without containerd, runc and
//! busybox.

mod support;

use support::pods::{container, manifest};
use support::{agent, containerd, full};

use std::path::Path;
use std::time::Duration;

use agent::{Agent, test_dir};
use containerd::ScratchContainerd;
use serde_json::json;

const T: Duration = Duration::from_secs(90);

fn phase_reason_message(a: &Agent, pod: &str) -> (String, String, String) {
    let st = a.status(pod);
    let s = |k: &str| st[k].as_str().unwrap_or_default().to_owned();
    (s("phase"), s("reason"), s("message"))
}

fn evicted(a: &Agent, pod: &str) -> bool {
    let (phase, reason, _) = phase_reason_message(a, pod);
    phase == "Failed" && reason == "Evicted"
}

/// `du -s -B1` of a directory: bytes allocated.
fn du(p: &Path) -> u64 {
    let out = std::process::Command::new("du")
        .args(["-x", "-s", "-B1"])
        .arg(p)
        .output()
        .expect("du");
    assert!(out.status.success(), "du {}", p.display());
    String::from_utf8_lossy(&out.stdout)
        .split_whitespace()
        .next()
        .and_then(|v| v.parse().ok())
        .expect("du's figure")
}

const MIB: u64 = 1 << 20;

#[test]
fn pods_over_their_storage_limits_are_evicted_and_the_summary_reports_usage() {
    let d = test_dir("storage");
    let c = ScratchContainerd::start(&d.join("c"));
    let a = Agent::start(&d.join("a"), &c.endpoint());
    let fill = |path: &str, mib: u32| {
        format!("dd if=/dev/zero of={path} bs=1048576 count={mib} && sync && sleep 3600")
    };
    let limits = |l: &str| json!({"limits": {"ephemeral-storage": l}});
    let scratch = json!([{"name": "scratch", "emptyDir": {"sizeLimit": "8Mi"}}]);
    let mount = json!([{"name": "scratch", "mountPath": "/scratch"}]);
    let with = |mut c: serde_json::Value, k: &str, v: serde_json::Value| {
        c[k] = v;
        c
    };
    // 20 MiB in its writable layer past its own 10Mi; the other container's 100Mi keeps the
    // pod's limit (110Mi together) above it, so the container's own limit is what is met.
    a.write_manifest(
        "a-layer.json",
        &manifest(
            "a-layer",
            json!({"terminationGracePeriodSeconds": 30, "containers": [
                with(container("main", &fill("/fill", 20)), "resources", limits("10Mi")),
                with(container("idle", "sleep 3600"), "resources", limits("100Mi")),
            ]}),
        ),
    );
    // 16 MiB in an emptyDir of 8Mi.
    a.write_manifest(
        "b-emptydir.json",
        &manifest(
            "b-emptydir",
            json!({"terminationGracePeriodSeconds": 30, "volumes": scratch,
                "containers": [with(container("main", &fill("/scratch/fill", 16)), "volumeMounts", mount.clone())]}),
        ),
    );
    // 12 MiB in an emptyDir with no size limit, the only container's limit 10Mi: the pod's
    // ephemeral storage (its volume counts) is over its containers' limits together.
    a.write_manifest(
        "c-pod.json",
        &manifest(
            "c-pod",
            json!({"terminationGracePeriodSeconds": 30, "volumes": [{"name": "scratch", "emptyDir": {}}],
                "containers": [with(with(container("main", &fill("/scratch/fill", 12)), "volumeMounts", mount.clone()), "resources", limits("10Mi"))]}),
        ),
    );
    // Within its limits: 2 MiB in its layer, 3 MiB in its emptyDir, a few log lines.
    a.write_manifest(
        "d-quiet.json",
        &manifest(
            "d-quiet",
            json!({"terminationGracePeriodSeconds": 1, "volumes": scratch,
                "containers": [with(with(container("main",
                    "dd if=/dev/zero of=/fill bs=1048576 count=2 && dd if=/dev/zero of=/scratch/fill bs=1048576 count=3 && sync && for i in 1 2 3 4 5; do echo line $i; done && sleep 3600"),
                    "volumeMounts", mount), "resources", limits("64Mi"))]}),
        ),
    );

    a.wait_for("the three pods over their limits evicted", T, |a| {
        ["a-layer", "b-emptydir", "c-pod"]
            .iter()
            .all(|p| evicted(a, p))
    });
    let message = |p: &str| phase_reason_message(&a, p).2;
    assert_eq!(
        message("a-layer"),
        "Container main exceeded its local ephemeral storage limit \"10Mi\". "
    );
    assert_eq!(
        message("b-emptydir"),
        "Usage of EmptyDir volume \"scratch\" exceeds the limit \"8Mi\". "
    );
    assert_eq!(
        message("c-pod"),
        "Pod ephemeral local storage usage exceeds the total limit of containers 10Mi. "
    );
    // A limit eviction stops the pod at once (1 s), not after its 30 s grace period.
    a.wait_for(
        "the evicted pods' containers gone per ctr",
        Duration::from_secs(20),
        |_| {
            ["a-layer", "b-emptydir", "c-pod"]
                .iter()
                .all(|p| c.running_containers(&full(p)).is_empty())
        },
    );
    assert!(
        !a.log_text().contains("DiskPressure"),
        "no node pressure was involved"
    );
    assert_eq!(a.phase("d-quiet"), "Running", "{}", a.status("d-quiet"));
    assert_eq!(c.running_containers(&full("d-quiet")).len(), 1);

    // The Summary API of the pod within its limits, against du of the same directories.
    let uid = a.pod("d-quiet").unwrap()["metadata"]["uid"]
        .as_str()
        .unwrap()
        .to_owned();
    let volume_dir = d
        .join("a/kubelet/pods")
        .join(&uid)
        .join("volumes/kubernetes.io~empty-dir/scratch");
    let summary_pod = |a: &Agent| -> serde_json::Value {
        let s: serde_json::Value =
            serde_json::from_str(&a.get("/stats/summary").unwrap_or_default()).unwrap_or_default();
        s["pods"]
            .as_array()
            .into_iter()
            .flatten()
            .find(|p| p["podRef"]["uid"] == uid.as_str())
            .cloned()
            .unwrap_or_default()
    };
    a.wait_for(
        "the quiet pod's rootfs, logs, volume and ephemeral storage in the Summary",
        T,
        |a| {
            let p = summary_pod(a);
            p["containers"][0]["rootfs"]["usedBytes"]
                .as_u64()
                .is_some_and(|u| u >= 2 * MIB)
                && p["containers"][0]["logs"]["usedBytes"].as_u64().is_some()
                && p["volume"][0]["usedBytes"]
                    .as_u64()
                    .is_some_and(|u| u >= 3 * MIB)
        },
    );
    let p = summary_pod(&a);
    let ctr = &p["containers"][0];
    let logs_dir = d
        .join("a")
        .join(format!("logs/default_{}_{uid}/main", full("d-quiet")));
    let (volume, logs) = (du(&volume_dir), du(&logs_dir));
    let within = |got: &serde_json::Value, want: u64, what: &str| {
        let got = got.as_u64().unwrap_or_else(|| panic!("{what}: {p}"));
        // du and the walk count the same blocks; a log line written between the two differs
        // by a block or so.
        assert!(
            got.abs_diff(want) <= 64 << 10,
            "{what}: the Summary says {got}, du {want}"
        );
        got
    };
    let v = within(&p["volume"][0]["usedBytes"], volume, "volume");
    let l = within(&ctr["logs"]["usedBytes"], logs, "logs");
    assert_eq!(p["volume"][0]["name"], "scratch");
    let rootfs = ctr["rootfs"]["usedBytes"].as_u64().unwrap();
    assert!(
        (2 * MIB..4 * MIB).contains(&rootfs),
        "2 MiB written to the layer: {rootfs}"
    );
    let es = p["ephemeral-storage"]["usedBytes"].as_u64().unwrap();
    assert!(
        es.abs_diff(rootfs + l + v) <= 64 << 10,
        "ephemeral-storage {es} = rootfs {rootfs} + logs {l} + volume {v}"
    );
    for k in ["capacityBytes", "availableBytes", "inodesUsed"] {
        assert!(p["ephemeral-storage"].get(k).is_some(), "{k}: {p}");
    }
    // Its network, from the sandbox's namespace: the default interface's counters inline.
    assert!(p["network"]["name"].is_string(), "{p}");
    assert!(p["network"]["rxBytes"].is_u64(), "{p}");
    drop(a);
    drop(c);
}
