//! End-to-end cluster tests: the picolet binary joins a real control plane (etcd, kube-apiserver
//! with the Node authorizer and NodeRestriction, kube-scheduler, kube-controller-manager, built
//! from the pinned Kubernetes release) as node `e2e-node` with a client certificate for
//! `system:node:e2e-node`, and runs pods on a real containerd. Ground truth comes from kubectl
//! (as admin) and ctr. These tests fail, never skip, when a prerequisite is missing.

mod support;

use support::{IMAGE, NODE, agent, cluster_wait, containerd, control_plane};

use std::time::{Duration, Instant};

use agent::{Agent, test_dir};
use containerd::ScratchContainerd;
use control_plane::{ControlPlane, NodeKey, Options};

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
         terminationGracePeriodSeconds: 2\n  tolerations:\n  \
         - operator: Exists\n  containers:\n  - name: main\n    image: {IMAGE}\n    \
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
            ..Default::default()
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
    cluster_wait("the node Ready", Duration::from_secs(60), &a, &cp, || {
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
    cluster_wait("the lease", Duration::from_secs(30), &a, &cp, || {
        !renew().is_empty()
    });
    let first = renew();
    cluster_wait(
        "the lease renewed",
        Duration::from_secs(30),
        &a,
        &cp,
        || renew() != first,
    );

    // A pod bound through the API runs in containerd and its status lands.
    cp.admin_stdin(&["apply", "-f", "-"], &pod_manifest("api-web", Some(NODE)));
    cluster_wait("api-web Running", Duration::from_secs(60), &a, &cp, || {
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
         terminationGracePeriodSeconds: 2\n      containers:\n      - name: main\n        \
         image: {IMAGE}\n        imagePullPolicy: IfNotPresent\n        command: [sleep, \"3600\"]\n"
    );
    cp.admin_stdin(&["apply", "-f", "-"], &deploy);
    cluster_wait(
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
             image: {IMAGE}\n    imagePullPolicy: IfNotPresent\n    command: [sleep, \"3600\"]\n"
        ),
    );
    let mirror = format!("st-{NODE}");
    let mirror_uid = || {
        jsonpath(
            &cp,
            &["get", "pod", &mirror, "-o", "jsonpath={.metadata.uid}"],
        )
    };
    cluster_wait("the mirror pod", Duration::from_secs(60), &a, &cp, || {
        !mirror_uid().is_empty()
    });
    cluster_wait(
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
    cluster_wait(
        "the mirror pod recreated",
        Duration::from_secs(60),
        &a,
        &cp,
        || {
            let u = mirror_uid();
            !u.is_empty() && u != old
        },
    );
    // The static pod's file edited: the mirror pod is replaced by one of the new version.
    let recreated = mirror_uid();
    let mirror_hash = || {
        jsonpath(
            &cp,
            &[
                "get",
                "pod",
                &mirror,
                "-o",
                "jsonpath={.metadata.annotations.kubernetes\\.io/config\\.mirror}",
            ],
        )
    };
    let old_hash = mirror_hash();
    assert!(!old_hash.is_empty());
    a.write_manifest(
        "st.yaml",
        &format!(
            "apiVersion: v1\nkind: Pod\nmetadata:\n  name: st\nspec:\n  containers:\n  - name: c\n    \
             image: {IMAGE}\n    imagePullPolicy: IfNotPresent\n    command: [sleep, \"3601\"]\n"
        ),
    );
    cluster_wait(
        "the mirror pod replaced after the edit",
        Duration::from_secs(60),
        &a,
        &cp,
        || {
            let u = mirror_uid();
            let h = mirror_hash();
            !u.is_empty() && u != recreated && !h.is_empty() && h != old_hash
        },
    );

    // Deleted through the API: stopped, then gone for good.
    cp.admin(&["delete", "pod", "api-web", "--wait=false"]);
    cluster_wait("api-web deleted", Duration::from_secs(60), &a, &cp, || {
        jsonpath(&cp, &["get", "pod", "api-web", "-o", "name"]).is_empty()
    });
    cluster_wait(
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
    cluster_wait(
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

/// The running container of a pod, by its CRI labels and containerd's task list.
fn running_container(c: &ScratchContainerd, pod: &str) -> Option<String> {
    let running = c.running_task_ids();
    c.containers_with_labels(&[
        ("io.kubernetes.pod.name", pod),
        ("io.cri-containerd.kind", "container"),
    ])
    .into_iter()
    .find(|id| running.contains(id))
}

/// What a file holds as the container sees it (`ctr tasks exec ... cat`).
fn cat_in(c: &ScratchContainerd, id: &str, path: &str) -> Result<String, String> {
    static N: std::sync::atomic::AtomicU32 = std::sync::atomic::AtomicU32::new(0);
    let exec = format!(
        "cat{}",
        N.fetch_add(1, std::sync::atomic::Ordering::Relaxed)
    );
    c.try_ctr(&["tasks", "exec", "--exec-id", &exec, id, "cat", path])
}

const SA: &str = "/var/run/secrets/kubernetes.io/serviceaccount";

#[test]
fn api_volumes_tokens_and_offline_operation_on_a_real_cluster() {
    let dir = test_dir("cluster-vol");
    let (cp, c, mut a) = control_plane::joined_node(&dir, &[]);
    cp.admin(&[
        "create",
        "configmap",
        "app",
        "--from-literal=greeting=hello",
    ]);
    cp.admin(&[
        "create",
        "secret",
        "generic",
        "creds",
        "--from-literal=password=s3cret",
    ]);
    // automountServiceAccountToken left at its default: admission adds the kube-api-access
    // projected volume (token, kube-root-ca.crt, namespace).
    let vols = format!(
        "apiVersion: v1\nkind: Pod\nmetadata: {{name: vols, namespace: default}}\nspec:\n  \
         nodeName: {NODE}\n  terminationGracePeriodSeconds: 2\n  tolerations: [{{operator: Exists}}]\n  \
         containers:\n  - name: main\n    image: {IMAGE}\n    imagePullPolicy: IfNotPresent\n    \
         command: [sleep, \"3600\"]\n    \
         env: [{{name: PW, valueFrom: {{secretKeyRef: {{name: creds, key: password}}}}}}]\n    \
         envFrom: [{{prefix: CM_, configMapRef: {{name: app}}}}]\n    \
         volumeMounts: [{{name: cfg, mountPath: /etc/cfg}}, {{name: creds, mountPath: /etc/creds}}]\n  \
         volumes:\n  - {{name: cfg, configMap: {{name: app}}}}\n  - {{name: creds, secret: {{secretName: creds}}}}\n"
    );
    cp.admin_stdin(&["apply", "-f", "-"], &vols);
    cp.admin_stdin(&["apply", "-f", "-"], &pod_manifest("doomed", Some(NODE)));
    // A non-root pod reads an owner-only Secret and its token through its fsGroup.
    let nonroot = format!(
        "apiVersion: v1\nkind: Pod\nmetadata: {{name: nonroot, namespace: default}}\nspec:\n  \
         nodeName: {NODE}\n  terminationGracePeriodSeconds: 2\n  tolerations: [{{operator: Exists}}]\n  \
         securityContext: {{runAsUser: 1000, fsGroup: 2000}}\n  \
         containers:\n  - name: main\n    image: {IMAGE}\n    imagePullPolicy: IfNotPresent\n    \
         command: [sleep, \"3600\"]\n    volumeMounts: [{{name: creds, mountPath: /etc/creds}}]\n  \
         volumes:\n  - {{name: creds, secret: {{secretName: creds, defaultMode: 256}}}}\n"
    );
    cp.admin_stdin(&["apply", "-f", "-"], &nonroot);
    let phase = |p: &str| jsonpath(&cp, &["get", "pod", p, "-o", "jsonpath={.status.phase}"]);
    cluster_wait("the pods Running", Duration::from_secs(90), &a, &cp, || {
        ["vols", "doomed", "nonroot"]
            .iter()
            .all(|p| phase(p) == "Running")
    });
    let nr = running_container(&c, "nonroot").expect("nonroot runs");
    let status = cat_in(&c, &nr, "/proc/self/status").unwrap();
    assert!(
        status.lines().any(|l| l.starts_with("Uid:\t1000\t")),
        "exec runs as the pod's user: {status}"
    );
    assert_eq!(cat_in(&c, &nr, "/etc/creds/password").unwrap(), "s3cret");
    assert!(
        cat_in(&c, &nr, &format!("{SA}/token"))
            .unwrap()
            .starts_with("eyJ")
    );
    let vols_ctr = running_container(&c, "vols").expect("vols runs");
    let doomed_first = running_container(&c, "doomed").expect("doomed runs");

    // The container sees the values: files, environment, its token, the cluster's CA.
    assert_eq!(cat_in(&c, &vols_ctr, "/etc/cfg/greeting").unwrap(), "hello");
    assert_eq!(
        cat_in(&c, &vols_ctr, "/etc/creds/password").unwrap(),
        "s3cret"
    );
    let environ = cat_in(&c, &vols_ctr, "/proc/1/environ").unwrap();
    assert!(environ.split('\0').any(|e| e == "PW=s3cret"), "{environ:?}");
    assert!(
        environ.split('\0').any(|e| e == "CM_greeting=hello"),
        "{environ:?}"
    );
    assert_eq!(
        cat_in(&c, &vols_ctr, &format!("{SA}/namespace")).unwrap(),
        "default"
    );
    assert_eq!(
        cat_in(&c, &vols_ctr, &format!("{SA}/ca.crt")).unwrap(),
        std::fs::read_to_string(cp.ca_cert()).unwrap()
    );
    let token = cat_in(&c, &vols_ctr, &format!("{SA}/token")).unwrap();
    assert!(token.starts_with("eyJ"), "a JWT: {token:.20}");
    assert!(
        cat_in(&c, &vols_ctr, "/etc/cfg/..data/greeting").is_ok(),
        "the AtomicWriter layout"
    );
    // A write into the volume is refused (mounted read-only).
    assert!(
        c.try_ctr(&[
            "tasks",
            "exec",
            "--exec-id",
            "w1",
            &vols_ctr,
            "touch",
            "/etc/cfg/x"
        ])
        .is_err()
    );

    // The token works against the real apiserver, as the pod's service account, bound to it.
    let empty_kc = dir.join("empty.kubeconfig");
    std::fs::write(&empty_kc, "apiVersion: v1\nkind: Config\n").unwrap();
    let ca = cp.ca_cert().display().to_string();
    let who = cp.kubectl_with(
        &empty_kc,
        &[
            "--server",
            &cp.apiserver,
            "--certificate-authority",
            &ca,
            "--token",
            &token,
            "auth",
            "whoami",
            "-o",
            "jsonpath={.status.userInfo.username}",
        ],
        None,
    );
    assert_eq!(
        who.stdout.trim(),
        "system:serviceaccount:default:default",
        "{}",
        who.describe()
    );
    let review = cp.admin_stdin(
        &["create", "-f", "-", "-o", "json"],
        &format!(
            "{{\"apiVersion\":\"authentication.k8s.io/v1\",\"kind\":\"TokenReview\",\"spec\":{{\"token\":\"{token}\"}}}}"
        ),
    );
    let review: serde_json::Value = serde_json::from_str(&review).unwrap();
    assert_eq!(review["status"]["authenticated"], true, "{review}");
    assert_eq!(
        review["status"]["user"]["extra"]["authentication.kubernetes.io/pod-name"][0], "vols",
        "bound to the pod: {review}"
    );
    assert!(!a.log_text().contains(&token), "the token is never logged");
    assert!(!a.log_text().contains("s3cret"), "secrets are never logged");

    // A ConfigMap update reaches the file, atomically swapped.
    cp.admin(&[
        "patch",
        "configmap",
        "app",
        "-p",
        "{\"data\":{\"greeting\":\"bonjour\"}}",
    ]);
    cluster_wait(
        "the ConfigMap update in the container",
        Duration::from_secs(200),
        &a,
        &cp,
        || cat_in(&c, &vols_ctr, "/etc/cfg/greeting").as_deref() == Ok("bonjour"),
    );

    // Edited through the API (image), the pod's container is replaced with the new image.
    c.ctr(&["images", "tag", IMAGE, "picolet.local/busybox:2"]);
    cp.admin(&[
        "patch",
        "pod",
        "doomed",
        "-p",
        "{\"spec\":{\"containers\":[{\"name\":\"main\",\"image\":\"picolet.local/busybox:2\"}]}}",
    ]);
    cluster_wait(
        "doomed on the new image",
        Duration::from_secs(60),
        &a,
        &cp,
        || {
            jsonpath(
            &cp,
            &[
                "get",
                "pod",
                "doomed",
                "-o",
                "jsonpath={.status.containerStatuses[0].image}/{.status.containerStatuses[0].state.running.startedAt}",
            ],
        )
        .starts_with("picolet.local/busybox:2/2")
            && running_container(&c, "doomed").is_some_and(|id| id != doomed_first)
        },
    );
    let doomed_ctr = running_container(&c, "doomed").unwrap();

    // Offline: picolet dies, a pod is deleted meanwhile, the apiserver goes away for a minute,
    // and picolet starts again without it.
    a.kill9();
    cp.admin(&["delete", "pod", "doomed", "--wait=false"]);
    let args = cp.stop_apiserver();
    let down = Instant::now();
    a.restart();
    cluster_wait(
        "the checkpoints loaded",
        Duration::from_secs(30),
        &a,
        &cp,
        || {
            let log = a.log_text();
            log.contains("running 3 pods from the checkpoint")
                && log.contains("from the checkpoint")
                && log.contains("Secrets and tokens from the checkpoint")
        },
    );
    std::thread::sleep(Duration::from_secs(3));
    assert_eq!(
        running_container(&c, "vols"),
        Some(vols_ctr.clone()),
        "adopted"
    );
    assert_eq!(
        running_container(&c, "doomed"),
        Some(doomed_ctr.clone()),
        "adopted"
    );
    // A container that exits is started again offline, with the token and content it had.
    c.ctr(&["tasks", "kill", "-s", "SIGKILL", &vols_ctr]);
    cluster_wait(
        "vols restarted offline",
        Duration::from_secs(60),
        &a,
        &cp,
        || running_container(&c, "vols").is_some_and(|id| id != vols_ctr),
    );
    let again = running_container(&c, "vols").unwrap();
    assert_eq!(cat_in(&c, &again, &format!("{SA}/token")).unwrap(), token);
    assert_eq!(cat_in(&c, &again, "/etc/cfg/greeting").unwrap(), "bonjour");
    assert_eq!(cat_in(&c, &again, "/etc/creds/password").unwrap(), "s3cret");
    let environ = cat_in(&c, &again, "/proc/1/environ").unwrap();
    assert!(environ.split('\0').any(|e| e == "PW=s3cret"));
    // A minute without the apiserver: everything keeps running.
    while down.elapsed() < Duration::from_secs(60) {
        std::thread::sleep(Duration::from_secs(5));
        assert_eq!(running_container(&c, "vols"), Some(again.clone()));
        assert_eq!(running_container(&c, "doomed"), Some(doomed_ctr.clone()));
    }
    cp.start_apiserver(&args);

    // Back: the pod deleted meanwhile goes, and the restart lands in the status.
    cluster_wait(
        "doomed removed and finalized",
        Duration::from_secs(120),
        &a,
        &cp,
        || {
            jsonpath(&cp, &["get", "pod", "doomed", "-o", "name"]).is_empty()
                && running_container(&c, "doomed").is_none()
        },
    );
    cluster_wait(
        "vols' restart in its status",
        Duration::from_secs(60),
        &a,
        &cp,
        || {
            jsonpath(
                &cp,
                &[
                    "get",
                    "pod",
                    "vols",
                    "-o",
                    "jsonpath={.status.containerStatuses[0].restartCount}",
                ],
            ) == "1"
        },
    );
    assert_eq!(running_container(&c, "vols"), Some(again));
}

/// `kubectl get csr` as lines: name, signer, requesting user, condition types, whether a
/// certificate was issued.
fn csrs(cp: &ControlPlane) -> Vec<String> {
    jsonpath(
        cp,
        &[
            "get",
            "csr",
            "-o",
            "jsonpath={range .items[*]}{.metadata.name} {.spec.signerName} {.spec.username} \
             {.status.conditions[*].type} {.status.certificate}{\"\\n\"}{end}",
        ],
    )
    .lines()
    .map(|l| {
        // The certificate itself is long: say only whether it is there.
        let mut w: Vec<&str> = l.split_whitespace().collect();
        if w.len() > 4 && w[w.len() - 1].len() > 100 {
            w.pop();
            w.push("issued");
        }
        w.join(" ")
    })
    .collect()
}

#[test]
fn picolet_joins_with_a_bootstrap_token_and_rotates_its_client_certificate() {
    const TOKEN: &str = "abcdef.0123456789abcdef";
    let dir = test_dir("cluster-bootstrap");
    // 3 minute certificates, backdated 5 minutes by the signer: 8 minutes of lifetime, renewed
    // 0.6 to 2.2 minutes after each is issued.
    let cp = ControlPlane::start(
        &dir.join("cp"),
        &Options {
            controllers: true,
            bootstrap_token: Some(TOKEN.into()),
            signing_duration: Some("3m".into()),
            ..Default::default()
        },
    );
    let c = ScratchContainerd::start(&dir.join("containerd"));
    let adir = dir.join("a");
    let t0 = Instant::now();
    let a = Agent::start_with(
        &adir,
        &c.endpoint(),
        &[
            "--kubeconfig".into(),
            adir.join("kubelet.conf").display().to_string(),
            "--bootstrap-kubeconfig".into(),
            cp.bootstrap_kubeconfig().display().to_string(),
        ],
    );
    let ready = || {
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
    };
    cluster_wait("the node Ready", Duration::from_secs(90), &a, &cp, ready);
    eprintln!(
        "from a bootstrap token alone to Node Ready: {:.1} s",
        t0.elapsed().as_secs_f64()
    );
    let first = csrs(&cp);
    assert_eq!(first.len(), 1, "{first:?}");
    let bootstrap_user = format!("system:bootstrap:{}", &TOKEN[..6]);
    assert!(
        first[0].contains(&format!(
            "kubernetes.io/kube-apiserver-client-kubelet {bootstrap_user} Approved issued"
        )),
        "{first:?}"
    );

    cp.admin_stdin(&["apply", "-f", "-"], &pod_manifest("web", Some(NODE)));
    let container = || {
        jsonpath(
            &cp,
            &[
                "get",
                "pod",
                "web",
                "-o",
                "jsonpath={.status.containerStatuses[0].containerID} \
                 {.status.containerStatuses[0].restartCount} {.status.phase}",
            ],
        )
    };
    cluster_wait("the pod Running", Duration::from_secs(90), &a, &cp, || {
        container().ends_with(" 0 Running")
    });
    let before = container();

    // Two renewals, each sent with the node's own certificate and approved by the controller
    // manager (selfnodeclient), with no restart of picolet or the pod.
    cluster_wait("two renewals", Duration::from_secs(420), &a, &cp, || {
        csrs(&cp)
            .iter()
            .filter(|l| l.contains(&format!("system:node:{NODE} Approved issued")))
            .count()
            >= 2
    });
    eprintln!("CertificateSigningRequests:\n{}", csrs(&cp).join("\n"));
    cluster_wait(
        "the second renewal installed",
        Duration::from_secs(30),
        &a,
        &cp,
        || a.log_text().matches("installed (valid until").count() >= 3,
    );
    let lease = || {
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
    let renewed = lease();
    cluster_wait(
        "the lease renewed after the rotations",
        Duration::from_secs(30),
        &a,
        &cp,
        || lease() != renewed,
    );
    assert!(ready(), "still Ready");
    assert_eq!(container(), before, "the same container, no restart");
    assert_eq!(
        a.log_text().matches("starting: node").count(),
        1,
        "picolet did not restart"
    );
    let links = std::fs::read_dir(adir.join("kubelet").join("pki"))
        .unwrap()
        .flatten()
        .filter(|e| {
            e.file_name()
                .to_string_lossy()
                .starts_with("kubelet-client-20")
        })
        .count();
    assert!(links >= 3, "one file per certificate: {links}");

    // Offline through the expiry: the apiserver stopped until the certificate has expired,
    // then back. picolet bootstraps again with the token (still valid); the pod ran on.
    let store =
        picolet::certificate::Store::new(&adir.join("kubelet").join("pki"), "kubelet-client");
    let args = cp.stop_apiserver();
    let not_after = store.current().unwrap().unwrap().not_after;
    let now = || picolet::api::time::unix_nanos_now() / 1_000_000_000;
    eprintln!(
        "apiserver stopped; the certificate expires in {} s",
        not_after - now()
    );
    while now() <= not_after + 2 {
        std::thread::sleep(Duration::from_secs(1));
    }
    let t_back = Instant::now();
    cp.start_apiserver(&args);
    let bootstrap_again = format!("{bootstrap_user} Approved issued");
    cluster_wait(
        "a bootstrap after the expiry",
        Duration::from_secs(180),
        &a,
        &cp,
        || {
            csrs(&cp)
                .iter()
                .filter(|l| l.contains(&bootstrap_again))
                .count()
                >= 2
        },
    );
    cluster_wait(
        "the node Ready again",
        Duration::from_secs(90),
        &a,
        &cp,
        ready,
    );
    eprintln!(
        "apiserver back to Ready with a new certificate: {:.1} s",
        t_back.elapsed().as_secs_f64()
    );
    assert_eq!(container(), before, "the same container, no restart");
    assert_eq!(
        a.log_text().matches("starting: node").count(),
        1,
        "picolet did not restart"
    );
    assert!(store.current().unwrap().unwrap().not_after > not_after);
}

/// A self-signed CA certificate (P-256) made by openssl, as PEM.
fn ca_pem(dir: &std::path::Path, cn: &str) -> String {
    let (key, cert) = (dir.join(format!("{cn}.key")), dir.join(format!("{cn}.crt")));
    let out = std::process::Command::new("openssl")
        .args([
            "req",
            "-x509",
            "-newkey",
            "ec",
            "-pkeyopt",
            "ec_paramgen_curve:P-256",
        ])
        .args(["-nodes", "-days", "2", "-subj", &format!("/CN={cn}")])
        .args(["-addext", "basicConstraints=critical,CA:TRUE", "-keyout"])
        .arg(&key)
        .arg("-out")
        .arg(&cert)
        .output()
        .expect("openssl runs");
    assert!(out.status.success(), "openssl: {out:?}");
    std::fs::read_to_string(cert).unwrap()
}

/// The PEM blocks of a file, sorted (the node shuffles them).
fn pem_set(text: &str) -> Vec<String> {
    let mut v: Vec<String> = text
        .split_inclusive("-----END CERTIFICATE-----\n")
        .map(str::to_owned)
        .collect();
    v.sort();
    v
}

#[test]
fn cluster_trust_bundles_are_projected_from_a_real_apiserver() {
    let dir = test_dir("cluster-ctb");
    let (cp, c, a) = control_plane::joined_node(&dir, &[]);
    let (ca1, ca2, ca3) = (
        ca_pem(&dir, "ca1"),
        ca_pem(&dir, "ca2"),
        ca_pem(&dir, "ca3"),
    );
    let ctb = |name: &str, signer: &str, alive: &str, pem: &str| {
        serde_json::json!({
            "apiVersion": "certificates.k8s.io/v1", "kind": "ClusterTrustBundle",
            "metadata": {"name": name, "labels": {"alive": alive}},
            "spec": {"signerName": signer, "trustBundle": pem},
        })
        .to_string()
    };
    cp.admin_stdin(&["apply", "-f", "-"], &ctb("one", "", "true", &ca1));
    cp.admin_stdin(
        &["apply", "-f", "-"],
        &ctb(
            "example.com:s:a",
            "example.com/s",
            "true",
            &format!("{ca2}{ca1}"),
        ),
    );
    cp.admin_stdin(
        &["apply", "-f", "-"],
        &ctb("example.com:s:b", "example.com/s", "false", &ca3),
    );
    let pod = |name: &str, sources: serde_json::Value| {
        serde_json::json!({
            "apiVersion": "v1", "kind": "Pod",
            "metadata": {"name": name, "namespace": "default"},
            "spec": {
                "nodeName": NODE, "terminationGracePeriodSeconds": 2,
                "tolerations": [{"operator": "Exists"}],
                "containers": [{"name": "main", "image": IMAGE, "imagePullPolicy": "IfNotPresent",
                                "command": ["sleep", "3600"],
                                "volumeMounts": [{"name": "ctb", "mountPath": "/ctb"}]}],
                "volumes": [{"name": "ctb", "projected": {"sources": sources}}],
            },
        })
        .to_string()
    };
    cp.admin_stdin(
        &["apply", "-f", "-"],
        &pod(
            "ctb",
            serde_json::json!([
                {"clusterTrustBundle": {"name": "one", "path": "a.pem"}},
                {"clusterTrustBundle": {"name": "nope", "path": "none.pem", "optional": true}},
                {"clusterTrustBundle": {"signerName": "example.com/s",
                    "labelSelector": {"matchLabels": {"alive": "true"}}, "path": "b.crt"}}
            ]),
        ),
    );
    cp.admin_stdin(
        &["apply", "-f", "-"],
        &pod(
            "ctb-waits",
            serde_json::json!([
                {"clusterTrustBundle": {"name": "does-not-exist", "path": "t.pem", "optional": false}}
            ]),
        ),
    );
    let phase = |p: &str| jsonpath(&cp, &["get", "pod", p, "-o", "jsonpath={.status.phase}"]);
    cluster_wait("the pod Running", Duration::from_secs(90), &a, &cp, || {
        phase("ctb") == "Running"
    });
    let id = running_container(&c, "ctb").expect("ctb runs");
    // Read through the node's own identity: the Node authorizer lets it list and watch them.
    assert_eq!(
        pem_set(&cat_in(&c, &id, "/ctb/a.pem").unwrap()),
        vec![ca1.clone()]
    );
    assert_eq!(cat_in(&c, &id, "/ctb/none.pem").unwrap(), "");
    let mut want = vec![ca1.clone(), ca2.clone()];
    want.sort();
    assert_eq!(pem_set(&cat_in(&c, &id, "/ctb/b.crt").unwrap()), want);
    // A required bundle that does not exist: the pod stays Pending, not ready, and a
    // FailedMount event says why in upstream's words.
    let ready = |p: &str| {
        jsonpath(
            &cp,
            &[
                "get",
                "pod",
                p,
                "-o",
                "jsonpath={.status.conditions[?(@.type==\"Ready\")].reason}",
            ],
        )
    };
    cluster_wait(
        "the waiting pod's event",
        Duration::from_secs(60),
        &a,
        &cp,
        || {
            jsonpath(
                &cp,
                &[
                    "get",
                    "events",
                    "--field-selector",
                    "involvedObject.name=ctb-waits,reason=FailedMount",
                    "-o",
                    "jsonpath={.items[*].message}",
                ],
            )
            .contains(
                "while getting ClusterTrustBundle: clustertrustbundles.certificates.k8s.io \
             \"does-not-exist\" not found",
            )
        },
    );
    assert_eq!(phase("ctb-waits"), "Pending");
    assert_eq!(ready("ctb-waits"), "ContainersNotReady");
    // A relabelled bundle joins the file; the missing one created, the waiting pod starts.
    cp.admin(&[
        "label",
        "--overwrite",
        "clustertrustbundle",
        "example.com:s:b",
        "alive=true",
    ]);
    let mut want = vec![ca1.clone(), ca2.clone(), ca3.clone()];
    want.sort();
    cluster_wait(
        "the relabelled bundle in the file",
        Duration::from_secs(30),
        &a,
        &cp,
        || cat_in(&c, &id, "/ctb/b.crt").map(|t| pem_set(&t)).ok() == Some(want.clone()),
    );
    cp.admin_stdin(&["apply", "-f", "-"], &ctb("does-not-exist", "", "x", &ca3));
    cluster_wait(
        "the waiting pod Running",
        Duration::from_secs(60),
        &a,
        &cp,
        || phase("ctb-waits") == "Running",
    );
    let w = running_container(&c, "ctb-waits").expect("ctb-waits runs");
    assert_eq!(pem_set(&cat_in(&c, &w, "/ctb/t.pem").unwrap()), vec![ca3]);
    assert!(
        !a.log_text()
            .contains("refuses this node's clustertrustbundles"),
        "the node may read them"
    );
}

/// Issues a PodCertificateRequest as a signer would (the test's CA for the public key of its
/// stub request, an hour from now, to be refreshed after 30 minutes), through the admin's
/// status update. Returns the chain.
fn issue_pcr(cp: &ControlPlane, ca: &picolet::pki::TestCa, pcr: &serde_json::Value) -> String {
    use base64::Engine as _;
    let csr = base64::engine::general_purpose::STANDARD
        .decode(pcr["spec"]["stubPKCS10Request"].as_str().unwrap())
        .unwrap();
    let now = picolet::api::time::unix_nanos_now() / 1_000_000_000;
    let chain = ca.issue(&csr, now, now + 3600, true).unwrap();
    let t = |s: i64| picolet::api::time::rfc3339(s * 1_000_000_000);
    let status = serde_json::json!({"status": {
        "conditions": [{"type": "Issued", "status": "True", "reason": "Signed",
                        "message": "by the test", "lastTransitionTime": t(now)}],
        "certificateChain": chain,
        "notBefore": t(now),
        "beginRefreshAt": t(now + 1800),
        "notAfter": t(now + 3600),
    }});
    cp.admin(&[
        "patch",
        "podcertificaterequests",
        pcr["metadata"]["name"].as_str().unwrap(),
        "--subresource=status",
        "--type=merge",
        "-p",
        &status.to_string(),
    ]);
    chain
}

#[test]
fn pod_certificates_are_requested_and_projected_through_a_real_apiserver() {
    let dir = test_dir("cluster-podcert");
    let (cp, c, a) = control_plane::joined_node(&dir, &[]);
    let pod = |name: &str, key_type: &str| {
        serde_json::json!({
            "apiVersion": "v1", "kind": "Pod",
            "metadata": {"name": name, "namespace": "default"},
            "spec": {
                "nodeName": NODE, "terminationGracePeriodSeconds": 2,
                "tolerations": [{"operator": "Exists"}],
                "containers": [{"name": "main", "image": IMAGE, "imagePullPolicy": "IfNotPresent",
                                "command": ["sleep", "3600"],
                                "volumeMounts": [{"name": "tls", "mountPath": "/tls"}]}],
                "volumes": [{"name": "tls", "projected": {"sources": [{"podCertificate": {
                    "signerName": "example.com/pods", "keyType": key_type,
                    "credentialBundlePath": "bundle.pem", "keyPath": "key.pem",
                    "certificateChainPath": "chain.pem",
                    "userAnnotations": {"example.com/path": "/web"}}}]}}],
            },
        })
        .to_string()
    };
    let kinds = [
        ("pc-p256", "ECDSAP256"),
        ("pc-p384", "ECDSAP384"),
        ("pc-ed25519", "ED25519"),
    ];
    for (name, kt) in kinds {
        cp.admin_stdin(&["apply", "-f", "-"], &pod(name, kt));
    }
    // The node's requests pass the apiserver's validation (the stub request's signature, with
    // each key type) and NodeRestriction (pod, service account and node by UID).
    let pcrs = || -> Vec<serde_json::Value> {
        let v: serde_json::Value =
            serde_json::from_str(&cp.admin(&["get", "podcertificaterequests", "-o", "json"]))
                .unwrap();
        v["items"].as_array().cloned().unwrap_or_default()
    };
    let of = |name: &str| pcrs().into_iter().find(|r| r["spec"]["podName"] == name);
    cluster_wait(
        "a request for each pod",
        Duration::from_secs(90),
        &a,
        &cp,
        || kinds.iter().all(|(n, _)| of(n).is_some()),
    );
    let r = of("pc-p256").unwrap();
    assert_eq!(r["spec"]["nodeName"], NODE);
    assert_eq!(
        r["spec"]["maxExpirationSeconds"], 86400,
        "the apiserver's default"
    );
    assert_eq!(
        r["spec"]["unverifiedUserAnnotations"],
        serde_json::json!({"example.com/path": "/web"})
    );
    let phase = |p: &str| jsonpath(&cp, &["get", "pod", p, "-o", "jsonpath={.status.phase}"]);
    // Not issued: the pods wait.
    std::thread::sleep(Duration::from_secs(3));
    for (n, _) in kinds {
        assert_eq!(phase(n), "Pending", "{n}");
    }
    // Issued (the apiserver checks the leaf was issued to the requested key): they run, with
    // the key and chain in their files.
    let ca = picolet::pki::TestCa::new("example.com pods").unwrap();
    let mut chains = Vec::new();
    for (n, _) in kinds {
        chains.push(issue_pcr(&cp, &ca, &of(n).unwrap()));
    }
    cluster_wait("the pods Running", Duration::from_secs(90), &a, &cp, || {
        kinds.iter().all(|(n, _)| phase(n) == "Running")
    });
    for ((n, _), chain) in kinds.iter().zip(&chains) {
        let id = running_container(&c, n).expect("runs");
        let key = cat_in(&c, &id, "/tls/key.pem").unwrap();
        assert!(
            key.starts_with("-----BEGIN PRIVATE KEY-----\n"),
            "{n}: {key}"
        );
        assert_eq!(&cat_in(&c, &id, "/tls/chain.pem").unwrap(), chain, "{n}");
        assert_eq!(
            cat_in(&c, &id, "/tls/bundle.pem").unwrap(),
            format!("{key}{chain}"),
            "{n}"
        );
    }
    // One request each: none made again while fresh.
    assert_eq!(pcrs().len(), kinds.len());
}
