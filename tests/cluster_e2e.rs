//! End-to-end cluster tests: the picolet binary joins a real control plane (etcd, kube-apiserver
//! with the Node authorizer and NodeRestriction, kube-scheduler, kube-controller-manager, built
//! from the pinned Kubernetes release) as node `e2e-node` with a client certificate for
//! `system:node:e2e-node`, and runs pods on a real containerd. Ground truth comes from kubectl
//! (as admin) and ctr. These tests fail, never skip, when a prerequisite is missing.

#[path = "support/agent.rs"]
mod agent;
#[path = "support/containerd.rs"]
mod containerd;
#[path = "support/control_plane.rs"]
mod control_plane;

use std::time::{Duration, Instant};

use agent::{Agent, test_dir};
use containerd::{BUSYBOX_IMAGE, ScratchContainerd};
use control_plane::{ControlPlane, NodeKey, Options};

const NODE: &str = "e2e-node";

fn wait(what: &str, limit: Duration, a: &Agent, cp: &ControlPlane, mut f: impl FnMut() -> bool) {
    let t0 = Instant::now();
    while t0.elapsed() < limit {
        if f() {
            return;
        }
        std::thread::sleep(Duration::from_millis(250));
    }
    panic!(
        "timed out after {limit:?} waiting for {what}\n--- picolet log ---\n{}\n--- control plane ---\n{}",
        a.log_text(),
        cp.logs_tail(40)
    );
}

fn jsonpath(cp: &ControlPlane, args: &[&str]) -> String {
    let mut a: Vec<&str> = args.to_vec();
    a.push("--ignore-not-found");
    cp.kubectl_with(&cp.admin_kubeconfig(), &a, None)
        .stdout
        .trim()
        .to_owned()
}

fn pod_manifest(name: &str, node: Option<&str>) -> String {
    let bind = node.map_or(String::new(), |n| format!("  nodeName: {n}\n"));
    format!(
        "apiVersion: v1\nkind: Pod\nmetadata:\n  name: {name}\n  namespace: default\nspec:\n{bind}  \
         automountServiceAccountToken: false\n  terminationGracePeriodSeconds: 2\n  tolerations:\n  \
         - operator: Exists\n  containers:\n  - name: main\n    image: {BUSYBOX_IMAGE}\n    \
         imagePullPolicy: IfNotPresent\n    command: [sleep, \"3600\"]\n"
    )
}

#[test]
fn picolet_joins_a_real_cluster_and_runs_its_pods() {
    let dir = test_dir("cluster");
    let cp = ControlPlane::start(
        &dir.join("cp"),
        &Options {
            nodes: vec![NODE.into()],
            controllers: true,
        },
    );
    let c = ScratchContainerd::start(&dir.join("containerd"));
    let kc = cp.node_kubeconfig(NODE, NodeKey::EcSec1);
    let a = Agent::start_with(
        &dir.join("a"),
        &c.endpoint(),
        &[
            "--kubeconfig".into(),
            kc.display().to_string(),
            "--node-labels=node.kubernetes.io/instance-type=rpi4".into(),
        ],
    );

    // The node registers and turns Ready; its status passed validation and NodeRestriction.
    wait("the node Ready", Duration::from_secs(60), &a, &cp, || {
        jsonpath(
            &cp,
            &[
                "get",
                "node",
                NODE,
                "-o",
                "jsonpath={.status.conditions[?(@.type==\"Ready\")].status}",
            ],
        ) == "True"
    });
    assert_eq!(
        jsonpath(
            &cp,
            &[
                "get",
                "node",
                NODE,
                "-o",
                "jsonpath={.metadata.labels.kubernetes\\.io/hostname}"
            ]
        ),
        NODE
    );
    assert_eq!(
        jsonpath(
            &cp,
            &[
                "get",
                "node",
                NODE,
                "-o",
                "jsonpath={.metadata.labels.node\\.kubernetes\\.io/instance-type}"
            ]
        ),
        "rpi4"
    );
    // The lease renews.
    let renew = || {
        jsonpath(
            &cp,
            &[
                "-n",
                "kube-node-lease",
                "get",
                "lease",
                NODE,
                "-o",
                "jsonpath={.spec.renewTime}",
            ],
        )
    };
    wait("the lease", Duration::from_secs(30), &a, &cp, || {
        !renew().is_empty()
    });
    let first = renew();
    wait(
        "the lease renewed",
        Duration::from_secs(30),
        &a,
        &cp,
        || renew() != first,
    );

    // A pod bound through the API runs in containerd and its status lands.
    cp.admin_stdin(&["apply", "-f", "-"], &pod_manifest("api-web", Some(NODE)));
    wait("api-web Running", Duration::from_secs(60), &a, &cp, || {
        jsonpath(
            &cp,
            &["get", "pod", "api-web", "-o", "jsonpath={.status.phase}"],
        ) == "Running"
    });
    assert_eq!(
        c.containers_with_labels(&[
            ("io.kubernetes.pod.name", "api-web"),
            ("io.cri-containerd.kind", "container")
        ])
        .len(),
        1
    );
    assert_eq!(
        jsonpath(
            &cp,
            &[
                "get",
                "pod",
                "api-web",
                "-o",
                "jsonpath={.status.containerStatuses[0].ready}"
            ]
        ),
        "true"
    );

    // A Deployment of 3, scheduled by the real scheduler onto this node.
    let deploy = format!(
        "apiVersion: apps/v1\nkind: Deployment\nmetadata:\n  name: web\n  namespace: default\nspec:\n  replicas: 3\n  \
         selector:\n    matchLabels: {{app: web}}\n  template:\n    metadata:\n      labels: {{app: web}}\n    spec:\n      \
         automountServiceAccountToken: false\n      terminationGracePeriodSeconds: 2\n      containers:\n      - name: main\n        \
         image: {BUSYBOX_IMAGE}\n        imagePullPolicy: IfNotPresent\n        command: [sleep, \"3600\"]\n"
    );
    cp.admin_stdin(&["apply", "-f", "-"], &deploy);
    wait(
        "3 replicas available",
        Duration::from_secs(120),
        &a,
        &cp,
        || {
            jsonpath(
                &cp,
                &[
                    "get",
                    "deployment",
                    "web",
                    "-o",
                    "jsonpath={.status.availableReplicas}",
                ],
            ) == "3"
        },
    );

    // A static pod gets its mirror pod; deleted with kubectl, it comes back.
    a.write_manifest(
        "st.yaml",
        &format!(
            "apiVersion: v1\nkind: Pod\nmetadata:\n  name: st\nspec:\n  containers:\n  - name: c\n    \
             image: {BUSYBOX_IMAGE}\n    imagePullPolicy: IfNotPresent\n    command: [sleep, \"3600\"]\n"
        ),
    );
    let mirror = format!("st-{NODE}");
    let mirror_uid = || {
        jsonpath(
            &cp,
            &["get", "pod", &mirror, "-o", "jsonpath={.metadata.uid}"],
        )
    };
    wait("the mirror pod", Duration::from_secs(60), &a, &cp, || {
        !mirror_uid().is_empty()
    });
    wait(
        "the mirror pod Running",
        Duration::from_secs(60),
        &a,
        &cp,
        || {
            jsonpath(
                &cp,
                &["get", "pod", &mirror, "-o", "jsonpath={.status.phase}"],
            ) == "Running"
        },
    );
    let old = mirror_uid();
    cp.admin(&["delete", "pod", &mirror, "--wait=false"]);
    wait(
        "the mirror pod recreated",
        Duration::from_secs(60),
        &a,
        &cp,
        || {
            let u = mirror_uid();
            !u.is_empty() && u != old
        },
    );

    // Deleted through the API: stopped, then gone for good.
    cp.admin(&["delete", "pod", "api-web", "--wait=false"]);
    wait("api-web deleted", Duration::from_secs(60), &a, &cp, || {
        jsonpath(&cp, &["get", "pod", "api-web", "-o", "name"]).is_empty()
    });
    wait(
        "api-web's containers removed",
        Duration::from_secs(30),
        &a,
        &cp,
        || {
            c.containers_with_labels(&[("io.kubernetes.pod.name", "api-web")])
                .is_empty()
        },
    );

    // picolet's client with each key form kubeadm and the kubelet write: EC (SEC1) and RSA
    // (PKCS#1) inline, EC as PKCS#8 in files; the real apiserver accepts each identity, and the
    // Node authorizer still refuses what a node may not do.
    for key in [NodeKey::EcSec1, NodeKey::RsaPkcs1, NodeKey::EcPkcs8Files] {
        let conn = picolet::apiclient::kubeconfig::load(&cp.node_kubeconfig(NODE, key))
            .unwrap_or_else(|e| panic!("{key:?}: {e}"));
        let client =
            picolet::apiclient::Client::new(&conn).unwrap_or_else(|e| panic!("{key:?}: {e}"));
        let node: serde_json::Value = client
            .json("GET", &format!("/api/v1/nodes/{NODE}"), None)
            .unwrap_or_else(|e| panic!("{key:?}: {e}"));
        assert_eq!(node["metadata"]["name"], NODE, "{key:?}");
        let refused = client
            .json::<serde_json::Value>("GET", "/api/v1/namespaces/kube-system/secrets", None)
            .unwrap_err();
        assert!(
            refused.is_forbidden(),
            "{key:?}: a node may not list secrets: {refused}"
        );
    }

    // With e2e-node's credentials, a picolet calling itself another node is refused by the
    // real Node authorizer and NodeRestriction, and says why instead of looping loudly.
    let _ = std::fs::remove_dir_all(dir.join("intruder"));
    let intruder = Agent::start_with(
        &dir.join("intruder"),
        &c.endpoint(),
        &[
            "--kubeconfig".into(),
            kc.display().to_string(),
            "--hostname-override".into(),
            "other-node".into(),
        ],
    );
    wait(
        "the refusal reported",
        Duration::from_secs(30),
        &intruder,
        &cp,
        || {
            intruder
                .log_text()
                .contains("the apiserver refuses this identity")
        },
    );
    std::thread::sleep(Duration::from_secs(5));
    assert!(jsonpath(&cp, &["get", "node", "other-node", "-o", "name"]).is_empty());
    // Once by the node registration and once by the lease, not once per retry.
    let told = intruder
        .log_text()
        .matches("the apiserver refuses this identity")
        .count();
    assert!(
        told <= 2,
        "said once per task: {told} refusals logged in ~5 s"
    );
}
