//! The control plane the cluster tests run against is the real one, with the real rules:
//! etcd, kube-apiserver, kube-scheduler and kube-controller-manager of the release pinned in
//! `tests/k8s/go.mod` (built by `scripts/k8s-build.sh`, started by
//! `scripts/control-plane.sh`), and kubectl of the same release. A node's credentials reach
//! exactly what the Node authorizer and NodeRestriction admission allow a real node; a
//! Deployment gets its pods from the real controllers and scheduler. Fails (never skips) when a
//! prerequisite is missing.

mod support;

use support::{IMAGE, control_plane};

use std::time::Duration;

use control_plane::{ControlPlane, NodeKey, Options};
use picolet::api::time::now_rfc3339;
use serde_json::{Value, json};

const NODE: &str = "cp-node";
const OTHER: &str = "cp-other";
const NS: &str = "cp-test";

fn scratch_dir(name: &str) -> std::path::PathBuf {
    // Under this worktree's target/: never shared with another checkout.
    std::path::Path::new(env!("CARGO_TARGET_TMPDIR")).join(name)
}

/// The Kubernetes release tests/k8s/go.mod pins.
fn pinned_kubernetes() -> String {
    let path = concat!(env!("CARGO_MANIFEST_DIR"), "/tests/k8s/go.mod");
    let gomod = std::fs::read_to_string(path).unwrap_or_else(|e| panic!("{path}: {e}"));
    gomod
        .lines()
        .map(str::split_whitespace)
        .find_map(|mut f| match (f.next(), f.next()) {
            (Some("k8s.io/kubernetes"), Some(v)) => Some(v.to_string()),
            _ => None,
        })
        .unwrap_or_else(|| panic!("{path} does not require k8s.io/kubernetes"))
}

fn parse(s: &str) -> Value {
    serde_json::from_str(s).unwrap_or_else(|e| panic!("kubectl printed no JSON ({e}):\n{s}"))
}

/// metav1.MicroTime, as a Lease's renewTime takes it.
fn micro_now() -> String {
    now_rfc3339().replace('Z', ".000000Z")
}

fn expect_forbidden(run: control_plane::Kubectl, what: &str, message: &str) {
    assert!(
        run.forbidden(),
        "{what}: expected 403 Forbidden\n{}",
        run.describe()
    );
    assert!(
        run.stderr.contains(message),
        "{what}: refused, but not with \"{message}\"\n{}",
        run.describe()
    );
}

#[test]
fn real_control_plane_applies_the_node_rules_and_schedules_a_deployment() {
    let cp = ControlPlane::start(
        &scratch_dir("control-plane"),
        &Options {
            nodes: vec![NODE.to_string()],
            controllers: true,
            ..Default::default()
        },
    );

    // The apiserver is ready and is the pinned release.
    let readyz = cp.admin(&["get", "--raw", "/readyz?verbose"]);
    assert!(
        readyz.contains("[+]etcd ok") && readyz.contains("readyz check passed"),
        "{readyz}"
    );
    let version = parse(&cp.admin(&["version", "-o", "json"]));
    assert_eq!(
        version["serverVersion"]["gitVersion"],
        pinned_kubernetes(),
        "{version}"
    );

    // Every kubeconfig variant authenticates as the node: EC (SEC1) and RSA (PKCS#1) keys
    // embedded, and the EC key as a PKCS#8 file.
    for key in [NodeKey::EcSec1, NodeKey::RsaPkcs1, NodeKey::EcPkcs8Files] {
        let who = cp
            .kubectl_with(
                &cp.node_kubeconfig(NODE, key),
                &["auth", "whoami", "-o", "json"],
                None,
            )
            .ok();
        let who = parse(&who);
        let user = &who["status"]["userInfo"];
        assert_eq!(
            user["username"],
            format!("system:node:{NODE}"),
            "{key:?}: {who}"
        );
        let groups: Vec<&str> = user["groups"]
            .as_array()
            .unwrap_or_else(|| panic!("{key:?}: no groups in {who}"))
            .iter()
            .filter_map(Value::as_str)
            .collect();
        assert!(groups.contains(&"system:nodes"), "{key:?}: {who}");
    }

    // The node registers itself. NodeRestriction refuses labels a node may not set on itself,
    // then accepts the node with the kubelet's own labels.
    let node = |labels: Value| {
        json!({"apiVersion": "v1", "kind": "Node",
               "metadata": {"name": NODE, "labels": labels}})
        .to_string()
    };
    expect_forbidden(
        cp.as_node_stdin(
            NODE,
            &["create", "-f", "-"],
            &node(json!({"node-restriction.kubernetes.io/pool": "a"})),
        ),
        "a node creating itself with a node-restriction.kubernetes.io/ label",
        "is not allowed to set the following labels: node-restriction.kubernetes.io/pool",
    );
    cp.as_node_stdin(
        NODE,
        &["create", "-f", "-"],
        &node(
            json!({"kubernetes.io/hostname": NODE, "kubernetes.io/os": "linux",
                     "kubernetes.io/arch": "amd64"}),
        ),
    )
    .ok();
    let node_uid = cp
        .as_node(
            NODE,
            &["get", "node", NODE, "-o", "jsonpath={.metadata.uid}"],
        )
        .ok();
    assert!(!node_uid.is_empty());

    // Its Lease in kube-node-lease, created and renewed with its own credentials.
    let lease = |name: &str| {
        json!({"apiVersion": "coordination.k8s.io/v1", "kind": "Lease",
               "metadata": {"name": name, "namespace": "kube-node-lease",
                            "ownerReferences": [{"apiVersion": "v1", "kind": "Node",
                                                 "name": NODE, "uid": node_uid}]},
               "spec": {"holderIdentity": name, "leaseDurationSeconds": 40,
                        "renewTime": micro_now()}})
        .to_string()
    };
    cp.as_node_stdin(NODE, &["create", "-f", "-"], &lease(NODE))
        .ok();
    let renew = || {
        let patch = json!({"spec": {"renewTime": micro_now()}}).to_string();
        cp.as_node(
            NODE,
            &[
                "-n",
                "kube-node-lease",
                "patch",
                "lease",
                NODE,
                "--type=merge",
                "-p",
                &patch,
            ],
        )
        .ok();
    };
    renew();
    expect_forbidden(
        cp.as_node_stdin(NODE, &["create", "-f", "-"], &lease(OTHER)),
        "a node creating another node's lease",
        "can only access node lease with the same name as the requesting node",
    );

    // Another node, a namespace, and a pod with a secret on each node (as the administrator).
    cp.admin_stdin(
        &["create", "-f", "-"],
        &json!({"apiVersion": "v1", "kind": "Node", "metadata": {"name": OTHER}}).to_string(),
    );
    cp.admin(&["create", "namespace", NS]);
    cp.wait_for(
        "the service account controller to create default in the test namespace",
        Duration::from_secs(60),
        || {
            cp.kubectl_with(
                &cp.admin_kubeconfig(),
                &["-n", NS, "get", "serviceaccount", "default"],
                None,
            )
            .success
            .then_some(())
        },
    );
    for (pod, node, secret) in [
        ("own-pod", NODE, "own-secret"),
        ("other-pod", OTHER, "other-secret"),
    ] {
        cp.admin(&[
            "-n",
            NS,
            "create",
            "secret",
            "generic",
            secret,
            "--from-literal=key=value",
        ]);
        let spec = json!({"apiVersion": "v1", "kind": "Pod",
            "metadata": {"name": pod, "namespace": NS},
            "spec": {"nodeName": node, "containers": [{"name": "main", "image": IMAGE,
                "env": [{"name": "S", "valueFrom": {"secretKeyRef": {"name": secret, "key": "key"}}}]}]}});
        cp.admin_stdin(&["create", "-f", "-"], &spec.to_string());
    }

    // The Node authorizer: the pods bound to this node and what they reference, nothing else.
    // The authorizer's graph learns of new pods through an informer: allow it a moment.
    cp.wait_for(
        "the node to be allowed its own pod",
        Duration::from_secs(30),
        || {
            cp.as_node(NODE, &["-n", NS, "get", "pod", "own-pod"])
                .success
                .then_some(())
        },
    );
    expect_forbidden(
        cp.as_node(NODE, &["-n", NS, "get", "pod", "other-pod"]),
        "a node reading a pod bound to another node",
        &format!("User \"system:node:{NODE}\" cannot get resource \"pods\""),
    );
    let own = cp
        .as_node(
            NODE,
            &[
                "get",
                "pods",
                "-A",
                &format!("--field-selector=spec.nodeName={NODE}"),
                "-o",
                "name",
            ],
        )
        .ok();
    assert_eq!(own.trim(), "pod/own-pod");
    expect_forbidden(
        cp.as_node(NODE, &["get", "pods", "-A"]),
        "a node listing every pod",
        "can only list/watch pods with spec.nodeName field selector",
    );
    expect_forbidden(
        cp.as_node(
            NODE,
            &[
                "get",
                "pods",
                "-A",
                &format!("--field-selector=spec.nodeName={OTHER}"),
            ],
        ),
        "a node listing another node's pods",
        &format!("User \"system:node:{NODE}\" cannot list resource \"pods\""),
    );
    // The authorizer's graph learns of new pods through an informer: allow it a moment.
    cp.wait_for(
        "the node to be allowed the secret its pod references",
        Duration::from_secs(30),
        || {
            cp.as_node(NODE, &["-n", NS, "get", "secret", "own-secret"])
                .success
                .then_some(())
        },
    );
    expect_forbidden(
        cp.as_node(NODE, &["-n", NS, "get", "secret", "other-secret"]),
        "a node reading another node's pod's secret",
        &format!("User \"system:node:{NODE}\" cannot get resource \"secrets\""),
    );
    expect_forbidden(
        cp.as_node(NODE, &["-n", NS, "get", "secrets"]),
        "a node listing secrets",
        &format!("User \"system:node:{NODE}\" cannot list resource \"secrets\""),
    );
    // Node status goes to the status subresource with a PUT of the whole Node (`kubectl
    // patch --subresource=status` would GET nodes/status first, which no node may).
    let status = || {
        let now = now_rfc3339();
        let cond = |t: &str, s: &str, reason: &str| {
            json!({"type": t, "status": s, "reason": reason, "message": "posted by the test",
                   "lastHeartbeatTime": now, "lastTransitionTime": now})
        };
        let resources = json!({"cpu": "2", "memory": "4Gi", "pods": "110",
                               "ephemeral-storage": "10Gi"});
        json!({
            "capacity": resources, "allocatable": resources,
            "conditions": [cond("Ready", "True", "KubeletReady"),
                           cond("MemoryPressure", "False", "KubeletHasSufficientMemory"),
                           cond("DiskPressure", "False", "KubeletHasNoDiskPressure"),
                           cond("PIDPressure", "False", "KubeletHasSufficientPID")],
            "addresses": [{"type": "InternalIP", "address": "127.0.0.1"},
                          {"type": "Hostname", "address": NODE}]})
    };
    let put_status = |name: &str, mut node: Value| {
        node["status"] = status();
        cp.as_node_stdin(
            NODE,
            &[
                "replace",
                "--raw",
                &format!("/api/v1/nodes/{name}/status"),
                "-f",
                "-",
            ],
            &node.to_string(),
        )
    };
    expect_forbidden(
        put_status(
            OTHER,
            json!({"apiVersion": "v1", "kind": "Node", "metadata": {"name": OTHER}}),
        ),
        "a node posting another node's status (NodeRestriction)",
        &format!("node \"{NODE}\" is not allowed to modify node \"{OTHER}\""),
    );

    // The node posts itself Ready (picolet will; here kubectl does it with the node's
    // credentials); the node lifecycle controller then lifts the not-ready taint.
    renew();
    let own_node = parse(&cp.as_node(NODE, &["get", "node", NODE, "-o", "json"]).ok());
    let put = put_status(NODE, own_node);
    assert!(
        put.success,
        "a node posting its own status\n{}",
        put.describe()
    );
    let row = cp.admin(&["get", "node", NODE, "--no-headers"]);
    assert_eq!(
        row.split_whitespace().nth(1),
        Some("Ready"),
        "kubectl get node: {row}"
    );
    cp.wait_for(
        "the node lifecycle controller to remove the not-ready taint",
        Duration::from_secs(60),
        || {
            let taints = cp.admin(&["get", "node", NODE, "-o", "jsonpath={.spec.taints}"]);
            (!taints.contains("node.kubernetes.io/not-ready")).then_some(())
        },
    );

    // A Deployment of 3: the controllers create its pods, the scheduler binds them all to the
    // one Ready node (the other node is not Ready and keeps its taint).
    let deployment = json!({"apiVersion": "apps/v1", "kind": "Deployment",
        "metadata": {"name": "web", "namespace": NS},
        "spec": {"replicas": 3, "selector": {"matchLabels": {"app": "web"}},
            "template": {"metadata": {"labels": {"app": "web"}},
                "spec": {"containers": [{"name": "main", "image": IMAGE,
                                         "command": ["sleep", "3600"]}]}}}});
    cp.admin_stdin(&["create", "-f", "-"], &deployment.to_string());
    let pods = cp.wait_for(
        "3 pods of the Deployment bound to the node",
        Duration::from_secs(120),
        || {
            renew();
            let list = parse(&cp.admin(&["-n", NS, "get", "pods", "-l", "app=web", "-o", "json"]));
            let items = list["items"].as_array().cloned().unwrap_or_default();
            let bound = items
                .iter()
                .filter(|p| p["spec"]["nodeName"] == NODE)
                .filter(|p| {
                    p["status"]["conditions"].as_array().is_some_and(|c| {
                        c.iter()
                            .any(|c| c["type"] == "PodScheduled" && c["status"] == "True")
                    })
                })
                .count();
            (items.len() == 3 && bound == 3).then_some(items)
        },
    );
    for p in &pods {
        assert_eq!(
            p["metadata"]["ownerReferences"][0]["kind"], "ReplicaSet",
            "{p}"
        );
    }
    // The Deployment's status follows its ReplicaSet's, a moment after the pods are bound.
    cp.wait_for(
        "the Deployment to count 3 replicas",
        Duration::from_secs(60),
        || {
            (cp.admin(&[
                "-n",
                NS,
                "get",
                "deployment",
                "web",
                "-o",
                "jsonpath={.status.replicas}",
            ]) == "3")
                .then_some(())
        },
    );

    // The TokenRequest API, called as the kubelet calls it (a POST to the service account's
    // token subresource): the node gets a token for the service account of a pod bound to it,
    // bound to that pod; the apiserver's TokenReview accepts it. A token for another node's pod
    // is refused.
    let token_request = |pod: &str, uid: &str| {
        let body = json!({"apiVersion": "authentication.k8s.io/v1", "kind": "TokenRequest",
            "spec": {"expirationSeconds": 600,
                     "boundObjectRef": {"apiVersion": "v1", "kind": "Pod", "name": pod, "uid": uid}}});
        cp.as_node_stdin(
            NODE,
            &[
                "create",
                "--raw",
                &format!("/api/v1/namespaces/{NS}/serviceaccounts/default/token"),
                "-f",
                "-",
            ],
            &body.to_string(),
        )
    };
    let pod = &pods[0];
    let pod_name = pod["metadata"]["name"].as_str().unwrap();
    let pod_uid = pod["metadata"]["uid"].as_str().unwrap();
    let issued = parse(&token_request(pod_name, pod_uid).ok());
    assert!(
        issued["status"]["expirationTimestamp"].is_string(),
        "{issued}"
    );
    let token = issued["status"]["token"].as_str().unwrap_or_default();
    assert_eq!(token.split('.').count(), 3, "not a JWT: {issued}");
    let review = json!({"apiVersion": "authentication.k8s.io/v1", "kind": "TokenReview",
                        "spec": {"token": token}});
    let review = parse(&cp.admin_stdin(&["create", "-f", "-", "-o", "json"], &review.to_string()));
    let status = &review["status"];
    assert_eq!(status["authenticated"], true, "{review}");
    assert_eq!(
        status["user"]["username"],
        format!("system:serviceaccount:{NS}:default"),
        "{review}"
    );
    assert_eq!(
        status["user"]["extra"]["authentication.kubernetes.io/pod-name"][0], pod_name,
        "{review}"
    );
    assert_eq!(
        status["user"]["extra"]["authentication.kubernetes.io/pod-uid"][0], pod_uid,
        "{review}"
    );
    let other_uid = cp.admin(&[
        "-n",
        NS,
        "get",
        "pod",
        "other-pod",
        "-o",
        "jsonpath={.metadata.uid}",
    ]);
    expect_forbidden(
        token_request("other-pod", &other_uid),
        "a node asking for a token bound to another node's pod",
        "node requested token bound to a pod scheduled on a different node",
    );

    cp.stop();
}

/// A missing piece is named, and nothing is left running.
#[test]
fn control_plane_script_names_what_is_missing() {
    let dir = scratch_dir("control-plane-missing");
    let empty_bin = scratch_dir("control-plane-empty-bin");
    std::fs::create_dir_all(&empty_bin).unwrap();
    let script = concat!(env!("CARGO_MANIFEST_DIR"), "/scripts/control-plane.sh");
    let run = |env_bin: &std::path::Path, node: &str| {
        let out = std::process::Command::new("bash")
            .arg(script)
            .arg("start")
            .arg(&dir)
            .arg("--node")
            .arg(node)
            .env("PICOLET_K8S_BIN", env_bin)
            .output()
            .unwrap();
        (
            out.status.success(),
            String::from_utf8_lossy(&out.stderr).into_owned(),
        )
    };
    let (ok, err) = run(&empty_bin, "edge-1");
    assert!(!ok, "started without binaries: {err}");
    assert!(
        err.contains(&format!("{}/etcd is missing", empty_bin.display())),
        "{err}"
    );
    let (ok, err) = run(&empty_bin, "Not_A_Node");
    assert!(!ok, "accepted an invalid node name: {err}");
    assert!(
        err.contains("--node Not_A_Node: not a valid node name"),
        "{err}"
    );
    assert!(
        !dir.join("run").exists() || std::fs::read_dir(dir.join("run")).unwrap().next().is_none(),
        "a failed start left PID files in {}",
        dir.display()
    );
}

/// Pods read in the protobuf encoding (a list and a watch, as picolet's pod source reads them
/// under `contentType: application/vnd.kubernetes.protobuf`) decode to the JSON the real
/// apiserver sends for the same pods: the same object, field for field, for pods that use what
/// the API's own examples do (every kind of volume source picolet reads, probes with numeric
/// and named ports, quantities, pointers set to zero, sidecars, affinity, a status with
/// every state).
#[test]
fn pods_read_in_protobuf_are_the_json_the_apiserver_sends() {
    let cp = ControlPlane::start(
        &scratch_dir("control-plane-protobuf"),
        &Options {
            nodes: vec![NODE.to_string()],
            controllers: true,
            ..Default::default()
        },
    );
    let container = |name: &str| {
        json!({"name": name, "image": IMAGE, "command": ["sh", "-c", "sleep 3600"],
               "imagePullPolicy": "IfNotPresent"})
    };
    let mut main = container("main");
    main["ports"] = json!([{"name": "http", "containerPort": 8080, "hostPort": 18080,
                            "protocol": "TCP"}]);
    main["env"] = json!([
        {"name": "A", "value": ""},
        {"name": "NODE", "valueFrom": {"fieldRef": {"fieldPath": "spec.nodeName"}}},
        {"name": "MEM", "valueFrom": {"resourceFieldRef": {"containerName": "main",
            "resource": "limits.memory", "divisor": "1Mi"}}},
        {"name": "CM", "valueFrom": {"configMapKeyRef": {"name": "c", "key": "k",
            "optional": false}}}]);
    main["envFrom"] = json!([{"prefix": "S_", "secretRef": {"name": "s", "optional": true}}]);
    main["resources"] = json!({"requests": {"cpu": "250m", "memory": "64Mi"},
                               "limits": {"cpu": "1", "memory": "128Mi"}});
    main["resizePolicy"] = json!([{"resourceName": "memory",
                                   "restartPolicy": "RestartContainer"}]);
    main["livenessProbe"] = json!({"httpGet": {"path": "/healthz", "port": 8080,
        "httpHeaders": [{"name": "X", "value": "y"}]}, "initialDelaySeconds": 0,
        "periodSeconds": 5, "terminationGracePeriodSeconds": 1});
    main["readinessProbe"] = json!({"tcpSocket": {"port": "http"}, "failureThreshold": 1});
    main["startupProbe"] = json!({"grpc": {"port": 9090, "service": ""}});
    main["lifecycle"] = json!({"preStop": {"exec": {"command": ["sleep", "1"]}},
                               "postStart": {"exec": {"command": ["true"]}}});
    main["securityContext"] = json!({"runAsUser": 0, "runAsNonRoot": false,
        "readOnlyRootFilesystem": false, "allowPrivilegeEscalation": false,
        "capabilities": {"add": ["NET_ADMIN"], "drop": ["ALL"]},
        "seccompProfile": {"type": "RuntimeDefault"}});
    main["volumeMounts"] = json!([
        {"name": "scratch", "mountPath": "/scratch", "readOnly": false},
        {"name": "config", "mountPath": "/config", "subPath": "a", "readOnly": true},
        {"name": "logs", "mountPath": "/logs", "subPathExpr": "$(NODE)",
         "mountPropagation": "HostToContainer"}]);
    main["stdin"] = json!(false);
    main["tty"] = json!(true);
    main["terminationMessagePolicy"] = json!("FallbackToLogsOnError");
    let mut sidecar = container("sidecar");
    sidecar["restartPolicy"] = json!("Always");
    let volumes = json!([
        {"name": "scratch", "emptyDir": {"medium": "Memory", "sizeLimit": "64Mi"}},
        {"name": "empty", "emptyDir": {}},
        {"name": "config", "configMap": {"name": "c", "defaultMode": 0o440,
            "items": [{"key": "k", "path": "a", "mode": 0}]}},
        {"name": "secret", "secret": {"secretName": "s", "optional": false}},
        {"name": "logs", "hostPath": {"path": "/var/log/every", "type": "DirectoryOrCreate"}},
        {"name": "claim", "persistentVolumeClaim": {"claimName": "data"}},
        {"name": "image", "image": {"reference": IMAGE, "pullPolicy": "IfNotPresent"}},
        {"name": "projected", "projected": {"defaultMode": 420, "sources": [
            {"serviceAccountToken": {"path": "token", "expirationSeconds": 3600,
                                     "audience": "api"}},
            {"downwardAPI": {"items": [{"path": "labels",
                "fieldRef": {"apiVersion": "v1", "fieldPath": "metadata.labels"}}]}},
            {"configMap": {"name": "kube-root-ca.crt",
                           "items": [{"key": "ca.crt", "path": "ca.crt"}]}}]}},
        {"name": "generic", "ephemeral": {"volumeClaimTemplate": {
            "metadata": {"labels": {"type": "scratch"}},
            "spec": {"accessModes": ["ReadWriteOnce"],
                     "resources": {"requests": {"storage": "1Gi"}}}}}}
    ]);
    let every = json!({
        "apiVersion": "v1", "kind": "Pod",
        "metadata": {"name": "every", "namespace": "default",
                     "labels": {"app": "every", "empty": ""},
                     "annotations": {"note": "a\nb"}},
        "spec": {
            "nodeName": NODE,
            "terminationGracePeriodSeconds": 0,
            "activeDeadlineSeconds": 600,
            "hostNetwork": false,
            "enableServiceLinks": false,
            "automountServiceAccountToken": false,
            "initContainers": [sidecar, container("init")],
            "containers": [main, container("second")],
            "securityContext": {"fsGroup": 2000, "supplementalGroups": [0, 3000],
                                "sysctls": [{"name": "net.ipv4.ip_unprivileged_port_start",
                                             "value": "0"}],
                                "fsGroupChangePolicy": "OnRootMismatch"},
            "dnsPolicy": "None",
            "dnsConfig": {"nameservers": ["10.0.0.10"], "searches": ["a.local"],
                          "options": [{"name": "ndots", "value": "2"}, {"name": "edns0"}]},
            "hostAliases": [{"ip": "10.1.2.3", "hostnames": ["foo.local", "bar"]}],
            "tolerations": [{"key": "k", "operator": "Exists", "effect": "NoExecute",
                             "tolerationSeconds": 0}],
            "affinity": {"nodeAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": {
                "nodeSelectorTerms": [{"matchExpressions": [{"key": "kubernetes.io/os",
                    "operator": "In", "values": ["linux"]}]}]}}},
            "topologySpreadConstraints": [{"maxSkew": 1, "topologyKey": "zone",
                "whenUnsatisfiable": "ScheduleAnyway",
                "labelSelector": {"matchLabels": {"app": "every"}}}],
            "readinessGates": [{"conditionType": "example.com/ready"}],
            "os": {"name": "linux"},
            "volumes": volumes
        }
    });
    let plain = json!({"apiVersion": "v1", "kind": "Pod",
        "metadata": {"name": "plain", "namespace": "default"},
        "spec": {"nodeName": NODE, "containers": [container("main")]}});
    for pod in [&every, &plain] {
        cp.admin_stdin(&["create", "-f", "-"], &pod.to_string());
    }
    // A status with every state, as a node writes one.
    let at = now_rfc3339();
    let state = |s: Value| {
        json!({"name": "main", "image": IMAGE, "imageID": "", "ready": false,
               "restartCount": 0, "started": false, "state": s,
               "lastState": {"terminated": {"exitCode": 0, "reason": "Completed",
                                            "startedAt": at, "finishedAt": at}}})
    };
    let status = json!({"status": {
        "phase": "Running", "hostIP": "10.0.0.1", "hostIPs": [{"ip": "10.0.0.1"}],
        "podIP": "10.88.0.5", "podIPs": [{"ip": "10.88.0.5"}], "startTime": at,
        "qosClass": "Burstable", "observedGeneration": 1,
        "conditions": [{"type": "Ready", "status": "False", "lastProbeTime": null,
                        "lastTransitionTime": at, "reason": "ContainersNotReady"}],
        "containerStatuses": [
            state(json!({"running": {"startedAt": at}})),
            {"name": "second", "image": IMAGE, "imageID": "sha256:00", "ready": true,
             "restartCount": 3, "started": true, "containerID": "containerd://ab",
             "state": {"waiting": {"reason": "CrashLoopBackOff", "message": "back-off"}},
             "allocatedResources": {"cpu": "250m"},
             "resources": {"requests": {"cpu": "250m"}}}],
        "initContainerStatuses": [state(json!({"terminated": {"exitCode": 1,
            "signal": 0, "reason": "Error", "startedAt": at, "finishedAt": at,
            "containerID": "containerd://cd"}}))]
    }});
    cp.admin_stdin(
        &[
            "patch",
            "pod",
            "every",
            "-n",
            "default",
            "--subresource=status",
            "--type=merge",
            "--patch-file=/dev/stdin",
        ],
        &status.to_string(),
    );

    let conn = picolet::apiclient::kubeconfig::load(&cp.admin_kubeconfig())
        .unwrap_or_else(|e| panic!("the admin kubeconfig: {e}"));
    let json_client = picolet::apiclient::Client::new(&conn).unwrap();
    let proto_client = picolet::apiclient::Client::new(&conn).unwrap();
    proto_client.set_content_type(picolet::apiclient::ContentType::Protobuf);
    let path = format!("/api/v1/pods?fieldSelector=spec.nodeName%3D{NODE}");
    let from_json: Value = json_client.json("GET", &path, None).unwrap();
    let (framed, from_proto) = proto_client.pod_list_read(&path).unwrap();
    assert!(framed, "the apiserver answered the list in JSON");
    assert_eq!(
        from_json["items"].as_array().map(Vec::len),
        Some(2),
        "{from_json}"
    );
    same("the list", &from_json, &from_proto);

    // A watch from resourceVersion 0 starts with an ADDED event of each pod.
    let watch = format!("{path}&watch=true&resourceVersion=0&timeoutSeconds=5");
    let mut lines = std::io::BufRead::lines(std::io::BufReader::new(
        json_client.stream(&watch, Duration::from_secs(20)).unwrap(),
    ));
    let (framed, mut body) = proto_client
        .pod_stream(&watch, Duration::from_secs(20))
        .unwrap();
    assert!(framed, "the apiserver answered the watch in JSON");
    let mut by_name = std::collections::BTreeMap::new();
    for _ in 0..2 {
        let line = lines.next().expect("a JSON watch event").unwrap();
        let ev: Value = serde_json::from_str(&line).unwrap();
        let mut len = [0u8; 4];
        std::io::Read::read_exact(&mut body, &mut len).unwrap();
        let mut frame = vec![0u8; u32::from_be_bytes(len) as usize];
        std::io::Read::read_exact(&mut body, &mut frame).unwrap();
        let (kind, object) = picolet::apiclient::pod_proto::watch_event(&frame)
            .unwrap_or_else(|e| panic!("a protobuf watch event: {e}"));
        assert_eq!(kind, "ADDED");
        assert_eq!(ev["type"], "ADDED");
        let name = |v: &Value| {
            v["metadata"]["name"]
                .as_str()
                .unwrap_or_default()
                .to_owned()
        };
        by_name
            .entry(name(&ev["object"]))
            .or_insert_with(Vec::new)
            .push(ev["object"].clone());
        by_name
            .entry(name(&object))
            .or_insert_with(Vec::new)
            .push(object);
    }
    for (name, objects) in &by_name {
        assert_eq!(objects.len(), 2, "{name}: one event of each encoding");
        same(
            &format!("the watch event of {name}"),
            &objects[0],
            &objects[1],
        );
    }
    // What picolet makes of each: the same pod.
    for (j, p) in from_json["items"]
        .as_array()
        .unwrap()
        .iter()
        .zip(from_proto["items"].as_array().unwrap())
    {
        let decode = |v: &Value| {
            let mut unknown = Vec::new();
            let pod = picolet::api::pod_from_value(v.clone(), &mut |f| unknown.push(f.to_string()))
                .unwrap_or_else(|e| panic!("{e}"));
            (pod, unknown)
        };
        assert_eq!(decode(j), decode(p));
    }
    cp.stop();
}

/// `a` and `b` are the same JSON; otherwise the paths where they differ.
fn same(what: &str, a: &Value, b: &Value) {
    fn diff(path: String, a: &Value, b: &Value, out: &mut Vec<String>) {
        match (a, b) {
            (Value::Object(x), Value::Object(y)) => {
                for k in x.keys().chain(y.keys().filter(|k| !x.contains_key(*k))) {
                    let (va, vb) = (
                        x.get(k).unwrap_or(&Value::Null),
                        y.get(k).unwrap_or(&Value::Null),
                    );
                    if !x.contains_key(k) || !y.contains_key(k) {
                        out.push(format!(
                            "{path}.{k}: {va} | {vb}{}",
                            if x.contains_key(k) {
                                " (only in the first)"
                            } else {
                                " (only in the second)"
                            }
                        ));
                    } else {
                        diff(format!("{path}.{k}"), va, vb, out);
                    }
                }
            }
            (Value::Array(x), Value::Array(y)) if x.len() == y.len() => {
                for (i, (va, vb)) in x.iter().zip(y).enumerate() {
                    diff(format!("{path}[{i}]"), va, vb, out);
                }
            }
            _ if a == b => {}
            _ => out.push(format!("{path}: {a} | {b}")),
        }
    }
    let mut out = Vec::new();
    diff(String::new(), a, b, &mut out);
    assert!(
        out.is_empty(),
        "{what}: JSON | protobuf differ at\n{}",
        out.join("\n")
    );
}
