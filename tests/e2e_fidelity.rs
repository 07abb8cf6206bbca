//! End-to-end tests of the pod fields picolet applies as the kubelet does, the real picolet
//! binary against a real containerd each test starts: runAsNonRoot against the image's user,
//! seccomp profiles, a refused appArmorProfile, hostAliases and the managed /etc/hosts,
//! dnsConfig in resolv.conf, subPathExpr, the 2 s grace period floor, the downward API and
//! fsGroup on an emptyDir in a static pod, and admission (node selector, memory, host ports).
//! They fail, never skip, when containerd, runc or busybox are missing
//! (`scripts/install-deps.sh` installs them).

mod support;

use support::pods::{container, manifest};
use support::{agent, containerd, host_dir};

use std::path::Path;
use std::time::Duration;

use agent::{Agent, test_dir};
use containerd::ScratchContainerd;
use serde_json::{Value, json};

const T: Duration = Duration::from_secs(60);

fn out_volume(dir: &Path) -> Value {
    json!([{"name": "out", "hostPath": {"path": dir.display().to_string()}}])
}

fn read_or_empty(p: &Path) -> String {
    std::fs::read_to_string(p).unwrap_or_default()
}

#[test]
fn run_as_non_root_seccomp_and_refused_apparmor() {
    let d = test_dir("fidelity-sec");
    let c = ScratchContainerd::start(&d.join("c"));
    let a = Agent::start(&d.join("a"), &c.endpoint());
    let out = host_dir(&d.join("a"), "out");

    // The test image names no user: it runs as root, which runAsNonRoot refuses.
    a.write_manifest(
        "nonroot.json",
        &manifest(
            "nonroot",
            json!({"securityContext": {"runAsNonRoot": true},
                   "containers": [container("main", "exec sleep 600")]}),
        ),
    );
    let mut as_user = container("main", "id -u > /out/uid; exec sleep 600");
    as_user["securityContext"] = json!({"runAsUser": 1000});
    as_user["volumeMounts"] = json!([{"name": "out", "mountPath": "/out"}]);
    a.write_manifest(
        "nonroot-user.json",
        &manifest(
            "nonroot-user",
            json!({"securityContext": {"runAsNonRoot": true}, "containers": [as_user],
                   "volumes": out_volume(&out)}),
        ),
    );
    std::fs::set_permissions(&out, std::os::unix::fs::PermissionsExt::from_mode(0o777)).unwrap();
    // seccomp: RuntimeDefault filters (mode 2), nothing set runs unconfined (mode 0), as the
    // kubelet without seccompDefault.
    for (name, sc) in [
        (
            "seccomp-default",
            json!({"seccompProfile": {"type": "RuntimeDefault"}}),
        ),
        ("seccomp-none", json!({})),
    ] {
        let mut ctr = container(
            "main",
            &format!("cat /proc/self/status > /out/{name}; exec sleep 600"),
        );
        ctr["volumeMounts"] = json!([{"name": "out", "mountPath": "/out"}]);
        a.write_manifest(
            &format!("{name}.json"),
            &manifest(
                name,
                json!({"securityContext": sc, "containers": [ctr], "volumes": out_volume(&out)}),
            ),
        );
    }
    // What picolet cannot apply is refused with the field named, never run without it.
    a.write_manifest(
        "apparmor.json",
        &manifest(
            "apparmor",
            json!({"securityContext": {"appArmorProfile": {"type": "Localhost", "localhostProfile": "k8s-x"}},
                   "containers": [container("main", "exec sleep 600")]}),
        ),
    );

    a.wait_for("runAsNonRoot refused", T, |a| {
        a.status("nonroot")["containerStatuses"][0]["state"]["waiting"]["reason"]
            == "CreateContainerConfigError"
    });
    let msg = a.status("nonroot")["containerStatuses"][0]["state"]["waiting"]["message"]
        .as_str()
        .unwrap_or_default()
        .to_owned();
    assert!(msg.contains("image will run as root"), "{msg}");
    a.wait_for("the non-root container ran", T, |_| {
        read_or_empty(&out.join("uid")).trim() == "1000"
    });
    // The container writes its uid as soon as it starts; its status says so once picolet has
    // seen it start.
    a.wait_for("nonroot-user running", T, |a| {
        a.status("nonroot-user")["containerStatuses"][0]["state"]["running"].is_object()
    });
    a.wait_for("both seccomp pods wrote their status", T, |_| {
        read_or_empty(&out.join("seccomp-default")).contains("Seccomp:")
            && read_or_empty(&out.join("seccomp-none")).contains("Seccomp:")
    });
    let mode = |f: &str| {
        read_or_empty(&out.join(f))
            .lines()
            .find(|l| l.starts_with("Seccomp:"))
            .map(|l| l["Seccomp:".len()..].trim().to_owned())
            .unwrap_or_default()
    };
    assert_eq!(mode("seccomp-default"), "2", "RuntimeDefault is a filter");
    assert_eq!(mode("seccomp-none"), "0", "no profile runs unconfined");
    // the nonroot container was never created; the refused manifest made no pod
    assert!(a.pod("apparmor").is_none());
    let report = a.manifests_report().to_string();
    assert!(
        report.contains("spec.securityContext.appArmorProfile"),
        "{report}"
    );
    assert!(
        c.containers_with_labels(&[
            ("io.kubernetes.pod.name", "nonroot-e2e-node"),
            ("io.kubernetes.container.name", "main"),
        ])
        .is_empty(),
        "a refused container is never created"
    );
}

#[test]
fn hosts_dns_sub_path_expr_and_the_grace_floor() {
    let d = test_dir("fidelity-files");
    let c = ScratchContainerd::start(&d.join("c"));
    let a = Agent::start(&d.join("a"), &c.endpoint());
    let data = host_dir(&d.join("a"), "data");

    let mut main = container(
        "main",
        "cat /etc/hosts > /data/hosts; cat /etc/resolv.conf > /data/resolv; exec sleep 600",
    );
    main["env"] =
        json!([{"name": "POD_NAME", "valueFrom": {"fieldRef": {"fieldPath": "metadata.name"}}}]);
    main["volumeMounts"] =
        json!([{"name": "data", "mountPath": "/data", "subPathExpr": "logs/$(POD_NAME)"}]);
    a.write_manifest(
        "files.json",
        &manifest(
            "files",
            json!({
                "hostAliases": [{"ip": "10.1.2.3", "hostnames": ["foo.local", "bar"]}],
                "dnsPolicy": "None",
                "dnsConfig": {"nameservers": ["10.9.9.9", "10.9.9.10"], "searches": ["svc.example"],
                              "options": [{"name": "ndots", "value": "2"}]},
                "containers": [main],
                "volumes": [{"name": "data", "hostPath": {"path": data.display().to_string()}}]
            }),
        ),
    );
    // grace 0: the container still gets SIGTERM and 2 s to act on it. The shell waits on a
    // background child, so its trap runs the moment SIGTERM comes (a foreground child would
    // hold the trap until it exits, and a loaded machine can stretch that past the 2 s).
    let term = container(
        "main",
        "trap 'echo term > /data/term; exit 0' TERM; echo up > /data/up; sleep 3600 & wait",
    );
    let mut term = term;
    term["volumeMounts"] = json!([{"name": "data", "mountPath": "/data"}]);
    a.write_manifest(
        "grace0.json",
        &manifest(
            "grace0",
            json!({"terminationGracePeriodSeconds": 0, "containers": [term],
                   "volumes": [{"name": "data", "hostPath": {"path": data.display().to_string()}}]}),
        ),
    );

    // subPathExpr: the container's variables expanded, the subdirectory made in the volume
    let sub = data.join("logs").join("files-e2e-node");
    a.wait_for("the files pod wrote its files", T, |_| {
        !read_or_empty(&sub.join("hosts")).is_empty()
            && !read_or_empty(&sub.join("resolv")).is_empty()
    });
    let hosts = read_or_empty(&sub.join("hosts"));
    a.wait_for("the pod's IP in its status", T, |a| {
        a.status("files")["podIP"].as_str().is_some()
    });
    let ip = a.status("files")["podIP"]
        .as_str()
        .unwrap_or_default()
        .to_owned();
    assert!(
        hosts.starts_with("# Kubernetes-managed hosts file.\n127.0.0.1\tlocalhost\n"),
        "{hosts}"
    );
    assert!(
        hosts.contains(&format!("{ip}\tfiles-e2e-node\n")),
        "{hosts}"
    );
    assert!(
        hosts.ends_with("\n# Entries added by HostAliases.\n10.1.2.3\tfoo.local\tbar\n"),
        "{hosts}"
    );
    let resolv = read_or_empty(&sub.join("resolv"));
    let lines: Vec<&str> = resolv.lines().collect();
    assert!(lines.contains(&"nameserver 10.9.9.9"), "{resolv}");
    assert!(lines.contains(&"nameserver 10.9.9.10"), "{resolv}");
    assert!(lines.contains(&"search svc.example"), "{resolv}");
    assert!(lines.contains(&"options ndots:2"), "{resolv}");
    assert_eq!(
        lines.iter().filter(|l| l.starts_with("nameserver")).count(),
        2,
        "dnsPolicy None: only the pod's own\n{resolv}"
    );

    a.wait_for("grace0 runs", T, |_| {
        read_or_empty(&data.join("up")).trim() == "up"
    });
    a.remove_manifest("grace0.json");
    a.wait_for("grace0 stopped", T, |a| a.pod("grace0").is_none());
    assert_eq!(
        read_or_empty(&data.join("term")).trim(),
        "term",
        "SIGTERM reached the container before SIGKILL"
    );
}

/// A static pod with the downward API (a volume with a zero divisor, as the apiserver writes
/// an unset one, and env `resourceFieldRef`) and an emptyDir under an fsGroup, as the
/// documentation's `security-context.yaml` has it: run as user 1000, the emptyDir
/// `drwxrwsrwx 0:2000` and a file made there in group 2000.
#[test]
fn downward_api_and_fs_group_in_a_static_pod() {
    let d = test_dir("fidelity-downward");
    let c = ScratchContainerd::start(&d.join("c"));
    let a = Agent::start(&d.join("a"), &c.endpoint());
    let out = host_dir(&d.join("a"), "out");
    std::fs::set_permissions(&out, std::os::unix::fs::PermissionsExt::from_mode(0o777)).unwrap();
    let mut main = container(
        "main",
        "cat /etc/podinfo/mem /etc/podinfo/name > /out/files; echo \"$MEM_MI $CPU_M\" > /out/env; \
         touch /data/demo/made; ls -ldn /data/demo > /out/dir; \
         ls -ln /data/demo/made > /out/made; exec sleep 600",
    );
    main["resources"] = json!({"limits": {"memory": "64Mi", "cpu": "500m"}});
    main["env"] = json!([
        {"name": "MEM_MI", "valueFrom": {"resourceFieldRef": {"resource": "limits.memory", "divisor": "1Mi"}}},
        {"name": "CPU_M", "valueFrom": {"resourceFieldRef": {"resource": "limits.cpu", "divisor": "1m"}}}
    ]);
    main["securityContext"] = json!({"runAsUser": 1000, "runAsGroup": 3000});
    main["volumeMounts"] = json!([
        {"name": "out", "mountPath": "/out"},
        {"name": "podinfo", "mountPath": "/etc/podinfo"},
        {"name": "demo", "mountPath": "/data/demo"}
    ]);
    let mut volumes = out_volume(&out);
    let list = volumes.as_array_mut().unwrap();
    list.push(json!({"name": "podinfo", "downwardAPI": {"items": [
        {"path": "mem", "resourceFieldRef": {"containerName": "main", "resource": "limits.memory", "divisor": "0"}},
        {"path": "name", "fieldRef": {"fieldPath": "metadata.name"}}
    ]}}));
    list.push(json!({"name": "demo", "emptyDir": {}}));
    a.write_manifest(
        "downward.json",
        &manifest(
            "downward",
            json!({"securityContext": {"fsGroup": 2000}, "containers": [main], "volumes": volumes}),
        ),
    );
    a.wait_for("the pod wrote what it saw", T, |_| {
        !read_or_empty(&out.join("made")).is_empty()
    });
    assert_eq!(
        read_or_empty(&out.join("files")),
        "67108864downward-e2e-node"
    );
    assert_eq!(read_or_empty(&out.join("env")).trim(), "64 500");
    // `ls -ln`: mode, links, uid, gid, ...
    let fields = |f: &str| -> Vec<String> {
        read_or_empty(&out.join(f))
            .split_whitespace()
            .map(str::to_owned)
            .collect()
    };
    let dir = fields("dir");
    assert_eq!(
        (dir[0].as_str(), dir[2].as_str(), dir[3].as_str()),
        ("drwxrwsrwx", "0", "2000"),
        "{dir:?}"
    );
    let made = fields("made");
    assert_eq!(
        (made[2].as_str(), made[3].as_str()),
        ("1000", "2000"),
        "{made:?}"
    );
    assert_eq!(
        a.status("downward")["containerStatuses"][0]["restartCount"],
        0
    );
}

/// The kubelet's admission, on static pods: a node selector the node's labels do not match, a
/// memory request past allocatable and a host port another pod holds each make the pod Failed
/// with upstream's reason, and it never gets a sandbox; with `--node-labels` giving the label,
/// the selected pod runs.
#[test]
fn admission_rejects_what_does_not_fit_the_node() {
    let d = test_dir("fidelity-admit");
    let c = ScratchContainerd::start(&d.join("c"));
    let mut a = Agent::start(&d.join("a"), &c.endpoint());
    let sandboxes = |pod: &str| {
        c.containers_with_labels(&[
            ("io.kubernetes.pod.name", &format!("{pod}-e2e-node")),
            ("io.cri-containerd.kind", "sandbox"),
        ])
    };
    let rejected = |a: &Agent, pod: &str, reason: &str| {
        let s = a.status(pod);
        s["phase"] == "Failed"
            && s["reason"] == reason
            && s["message"]
                .as_str()
                .is_some_and(|m| m.starts_with("Pod was rejected: "))
    };
    a.write_manifest(
        "ssd.json",
        &manifest(
            "ssd",
            json!({"nodeSelector": {"disktype": "ssd"},
                   "containers": [container("main", "exec sleep 600")]}),
        ),
    );
    let mut hog = container("main", "exec sleep 600");
    hog["resources"] = json!({"requests": {"memory": "64Ti"}});
    a.write_manifest("hog.json", &manifest("hog", json!({"containers": [hog]})));
    let port = agent::free_port();
    let with_port = || {
        let mut c = container("main", "exec sleep 600");
        c["ports"] = json!([{"containerPort": port, "hostPort": port}]);
        json!({"hostNetwork": true, "containers": [c]})
    };
    a.write_manifest("port1.json", &manifest("port1", with_port()));
    a.wait_for("the first host port pod to run", T, |a| {
        a.status("port1")["phase"] == "Running"
    });
    a.write_manifest("port2.json", &manifest("port2", with_port()));
    a.wait_for("the three pods to be rejected", T, |a| {
        rejected(a, "ssd", "NodeAffinity")
            && rejected(a, "hog", "OutOfmemory")
            && rejected(a, "port2", "NodePorts")
    });
    assert_eq!(
        a.status("ssd")["message"],
        "Pod was rejected: Predicate NodeAffinity failed: node(s) didn't match Pod's node affinity/selector"
    );
    assert!(
        a.status("hog")["message"]
            .as_str()
            .unwrap()
            .starts_with("Pod was rejected: Node didn't have enough resource: memory, requested: 70368744177664, used: 0, capacity: "),
        "{}",
        a.status("hog")
    );
    assert_eq!(
        a.status("port2")["message"],
        "Pod was rejected: Predicate NodePorts failed: node(s) didn't have free ports for the requested pod ports"
    );
    // Never started, and never tried again.
    std::thread::sleep(Duration::from_secs(3));
    for pod in ["ssd", "hog", "port2"] {
        assert!(sandboxes(pod).is_empty(), "{pod} got a sandbox");
        assert!(rejected(&a, pod, a.status(pod)["reason"].as_str().unwrap()));
    }
    assert_eq!(a.status("port1")["phase"], "Running");
    let log = a.log_text();
    assert!(
        log.contains("NodeAffinity: Predicate NodeAffinity failed"),
        "{log}"
    );

    // With the label, the selected pod is admitted and runs.
    a.remove_manifest("hog.json");
    a.remove_manifest("port2.json");
    a.restart_with(&["--node-labels=disktype=ssd".to_owned()]);
    a.wait_for("the ssd pod to run", T, |a| {
        a.status("ssd")["phase"] == "Running"
    });
    assert_eq!(sandboxes("ssd").len(), 1);
}
