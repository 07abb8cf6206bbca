//! The node API end to end: picolet joins a real control plane whose apiserver reaches nodes as
//! kubeadm sets it up (its kubelet client certificate, the cluster CA for the node's serving
//! certificate, InternalIP first), runs pods on a real containerd, and kubectl's logs, exec,
//! attach and port-forward go through the apiserver to picolet's :10250-style API and from
//! there to containerd's streaming server. Authentication and authorization are checked with
//! curl against the node API directly: no credentials, a token the apiserver rejects, a
//! ServiceAccount without and with RBAC on `nodes/proxy`, the apiserver's own certificate. These
//! tests fail, never skip, when a prerequisite is missing.

mod support;

use support::{IMAGE, NODE, agent, cluster_wait, containerd, control_plane};

use std::io::{Read, Write};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use agent::{Agent, free_port, test_dir};
use containerd::ScratchContainerd;
use control_plane::{ControlPlane, NodeKey, Options};

/// curl against the node API, verifying its serving certificate with the cluster CA; returns
/// the status code and the body.
fn curl(cp: &ControlPlane, port: u16, path: &str, extra: &[&str]) -> (u16, String) {
    let out = Command::new("curl")
        .args([
            "-s",
            "-o",
            "-",
            "-w",
            "\n%{http_code}",
            "--max-time",
            "20",
            "--cacert",
        ])
        .arg(cp.ca_cert())
        .args(extra)
        .arg(format!("https://127.0.0.1:{port}{path}"))
        .output()
        .expect("run curl (scripts/install-deps.sh installs it)");
    let text = String::from_utf8_lossy(&out.stdout).into_owned();
    let (body, code) = text.rsplit_once('\n').unwrap_or(("", "0"));
    (code.trim().parse().unwrap_or(0), body.to_owned())
}

const POD: &str = "\
apiVersion: v1
kind: Pod
metadata:
  name: web
  namespace: default
spec:
  nodeName: e2e-node
  terminationGracePeriodSeconds: 1
  tolerations:
  - operator: Exists
  containers:
  - name: talker
    image: BUSYBOX
    imagePullPolicy: IfNotPresent
    command: [sh, -c, 'i=0; while true; do echo line $i; i=$((i+1)); sleep 0.2; done']
  - name: server
    image: BUSYBOX
    imagePullPolicy: IfNotPresent
    command: [sh, -c, 'mkdir -p /www && echo served-through-the-tunnel > /www/index.html && exec httpd -f -p 8080 -h /www']
";

/// How the joined node gets its serving certificate.
enum Serving {
    /// One the cluster CA signed, as kubeadm gives a node.
    ClusterCa,
    /// Asked of the cluster by CSR (`serverTLSBootstrap`), self-signed until issued.
    ByCsr,
}

/// A control plane with controllers, a scratch containerd and picolet joined to it as [`NODE`],
/// serving the node API on a free loopback port and trusting client certificates of the
/// cluster CA.
fn start_node(
    dir: &std::path::Path,
    serving: Serving,
) -> (ControlPlane, ScratchContainerd, Agent, u16) {
    let cp = ControlPlane::start(
        &dir.join("cp"),
        &Options {
            nodes: vec![NODE.into()],
            controllers: true,
            ..Default::default()
        },
    );
    let c = ScratchContainerd::start(&dir.join("containerd"));
    let port = free_port();
    let kc = cp.node_kubeconfig(NODE, NodeKey::EcSec1);
    let mut args = vec![
        "--kubeconfig".into(),
        kc.display().to_string(),
        "--node-ip=127.0.0.1".into(),
        "--address=127.0.0.1".into(),
        format!("--port={port}"),
        format!("--client-ca-file={}", cp.ca_cert().display()),
    ];
    let config = match serving {
        Serving::ClusterCa => {
            args.push(format!(
                "--tls-cert-file={}",
                cp.pki(&format!("node-{NODE}-serving.crt")).display()
            ));
            args.push(format!(
                "--tls-private-key-file={}",
                cp.pki(&format!("node-{NODE}-serving.key")).display()
            ));
            ""
        }
        Serving::ByCsr => "serverTLSBootstrap: true\n",
    };
    let a = Agent::start_configured(&dir.join("a"), &c.endpoint(), &args, config);
    (cp, c, a, port)
}

/// [`start_node`] with the cluster CA's serving certificate, as kubeadm sets a node up;
/// returns once the Node is Ready.
fn join(dir: &std::path::Path) -> (ControlPlane, ScratchContainerd, Agent, u16) {
    let (cp, c, a, port) = start_node(dir, Serving::ClusterCa);
    cluster_wait("the node Ready", Duration::from_secs(60), &a, &cp, || {
        cp.admin_run(
            &[
                "get",
                "node",
                NODE,
                "-o",
                "jsonpath={.status.conditions[?(@.type==\"Ready\")].status}",
            ],
            None,
        )
        .stdout
        .trim()
            == "True"
    });
    (cp, c, a, port)
}

#[test]
fn kubectl_reaches_pods_through_the_node_api() {
    let dir = test_dir("node-api");
    let (cp, _c, a, port) = join(&dir);
    let jsonpath = |args: &[&str]| cp.admin_run(args, None).stdout.trim().to_owned();
    // Where the apiserver finds the node API, and the version it is tested against.
    assert_eq!(
        jsonpath(&[
            "get",
            "node",
            NODE,
            "-o",
            "jsonpath={.status.daemonEndpoints.kubeletEndpoint.Port}"
        ]),
        port.to_string()
    );
    let version = jsonpath(&[
        "get",
        "node",
        NODE,
        "-o",
        "jsonpath={.status.nodeInfo.kubeletVersion}",
    ]);
    assert!(version.starts_with("v1.37.2-picolet."), "{version}");

    cp.admin_run(&["apply", "-f", "-"], Some(&POD.replace("BUSYBOX", IMAGE)))
        .ok();
    cluster_wait("pod web Running", Duration::from_secs(90), &a, &cp, || {
        jsonpath(&["get", "pod", "web", "-o", "jsonpath={.status.phase}"]) == "Running"
    });

    // kubectl logs, through the apiserver: the tail is exactly what was asked.
    cluster_wait(
        "a few lines logged",
        Duration::from_secs(20),
        &a,
        &cp,
        || {
            cp.admin_run(&["logs", "web", "-c", "talker"], None)
                .stdout
                .lines()
                .count()
                >= 5
        },
    );
    let tail = cp
        .admin_run(&["logs", "web", "-c", "talker", "--tail=2"], None)
        .ok();
    let lines: Vec<&str> = tail.lines().collect();
    assert_eq!(lines.len(), 2, "{tail:?}");
    assert!(lines.iter().all(|l| l.starts_with("line ")), "{tail:?}");
    // Follow: new lines arrive while the stream is open.
    let mut follow = Command::new(&cp.kubectl)
        .arg("--kubeconfig")
        .arg(cp.admin_kubeconfig())
        .args(["logs", "-f", "web", "-c", "talker", "--tail=1"])
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    let mut out = follow.stdout.take().unwrap();
    let reader = std::thread::spawn(move || {
        let mut buf = vec![0u8; 4096];
        let mut got = Vec::new();
        let t0 = Instant::now();
        while t0.elapsed() < Duration::from_secs(15)
            && got.iter().filter(|b| **b == b'\n').count() < 6
        {
            match out.read(&mut buf) {
                Ok(0) | Err(_) => break,
                Ok(n) => got.extend_from_slice(&buf[..n]),
            }
        }
        String::from_utf8_lossy(&got).into_owned()
    });
    let followed = reader.join().unwrap();
    let _ = follow.kill();
    let _ = follow.wait();
    assert!(followed.lines().count() >= 6, "followed only {followed:?}");

    // kubectl exec: output of both streams, the exit code, stdin piped in.
    let r = cp.admin_run(
        &[
            "exec",
            "web",
            "-c",
            "talker",
            "--",
            "sh",
            "-c",
            "echo out; echo err >&2; exit 3",
        ],
        None,
    );
    assert!(!r.success, "{}", r.describe());
    assert_eq!(r.stdout, "out\n", "{}", r.describe());
    assert!(r.stderr.contains("err"), "{}", r.describe());
    assert!(r.stderr.contains("exit code 3"), "{}", r.describe());
    let r = cp.admin_run(
        &["exec", "-i", "web", "-c", "talker", "--", "cat"],
        Some("piped through stdin\n"),
    );
    assert_eq!(r.stdout, "piped through stdin\n", "{}", r.describe());
    // A container that does not exist: the node API's 404 text reaches kubectl.
    let r = cp.admin_run(&["exec", "web", "-c", "nope", "--", "true"], None);
    assert!(!r.success);

    // kubectl attach: the running process's output.
    let mut attach = Command::new(&cp.kubectl)
        .arg("--kubeconfig")
        .arg(cp.admin_kubeconfig())
        .args(["attach", "web", "-c", "talker"])
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    let mut out = attach.stdout.take().unwrap();
    let mut buf = vec![0u8; 256];
    let n = out.read(&mut buf).unwrap_or(0);
    // The client goes away mid-stream; picolet and the pod carry on.
    let _ = attach.kill();
    let _ = attach.wait();
    assert!(
        String::from_utf8_lossy(&buf[..n]).contains("line "),
        "{:?}",
        &buf[..n]
    );

    // kubectl port-forward, and a real HTTP request through it.
    let page = cp.port_forward_get(
        "web",
        free_port(),
        8080,
        "served-through-the-tunnel",
        Duration::from_secs(30),
    );
    assert!(
        page.contains("served-through-the-tunnel"),
        "{page:?}\n{}",
        a.log_text()
    );

    // A port-forward to a port nothing listens on: that connection ends, nothing else does.
    let local = free_port();
    let mut pf = Command::new(&cp.kubectl)
        .arg("--kubeconfig")
        .arg(cp.admin_kubeconfig())
        .args(["port-forward", "pod/web", &format!("{local}:9999")])
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let mut answer = None;
    let t0 = Instant::now();
    while t0.elapsed() < Duration::from_secs(30) && answer.is_none() {
        std::thread::sleep(Duration::from_millis(300));
        if let Ok(mut s) = std::net::TcpStream::connect(("127.0.0.1", local)) {
            let _ = s.set_read_timeout(Some(Duration::from_secs(10)));
            let _ = s.write_all(b"GET / HTTP/1.0\r\nHost: x\r\n\r\n");
            let mut got = Vec::new();
            let _ = s.read_to_end(&mut got);
            answer = Some(got);
        }
    }
    let _ = pf.kill();
    let _ = pf.wait();
    assert_eq!(
        answer.as_deref(),
        Some(&b""[..]),
        "no answer from a closed port"
    );
    let r = cp.admin_run(
        &["exec", "web", "-c", "talker", "--", "echo", "still"],
        None,
    );
    assert_eq!(r.stdout, "still\n", "{}", r.describe());

    // kubectl exec -it under a pseudo-terminal (util-linux's script gives kubectl one): the
    // container gets a terminal and its exit code comes back.
    let script = Command::new("script")
        .args(["-qec"])
        .arg(format!(
            "{} --kubeconfig {} exec -it web -c talker -- sh -c 'tty; exit 4'",
            cp.kubectl.display(),
            cp.admin_kubeconfig().display()
        ))
        .arg("/dev/null")
        .stdin(Stdio::null())
        .output()
        .expect("run script (util-linux)");
    let shown = String::from_utf8_lossy(&script.stdout);
    assert!(shown.contains("/dev/pts/"), "{shown:?}");
    assert_eq!(script.status.code(), Some(4), "{shown:?}");

    // kubectl cp (exec and tar) both ways.
    let here = dir.join("copied");
    std::fs::write(dir.join("up.txt"), "copied up\n").unwrap();
    cp.admin_run(
        &[
            "cp",
            "-c",
            "server",
            &dir.join("up.txt").display().to_string(),
            "web:/www/up.txt",
        ],
        None,
    )
    .ok();
    cp.admin_run(
        &[
            "cp",
            "-c",
            "server",
            "web:/www/up.txt",
            &here.display().to_string(),
        ],
        None,
    )
    .ok();
    assert_eq!(std::fs::read_to_string(&here).unwrap(), "copied up\n");

    // The node API's own checks, directly: no credentials is 401.
    let (code, body) = curl(&cp, port, "/pods", &[]);
    assert_eq!((code, body.trim()), (401, "Unauthorized"));
    // A token the apiserver does not know: 401.
    let (code, _) = curl(
        &cp,
        port,
        "/pods",
        &["-H", "Authorization: Bearer not-a-token"],
    );
    assert_eq!(code, 401);
    // A ServiceAccount without RBAC on the node: 403 with the kubelet's text.
    cp.admin_run(&["create", "serviceaccount", "watcher"], None)
        .ok();
    let token = cp.admin_run(&["create", "token", "watcher"], None).ok();
    let bearer = format!("Authorization: Bearer {}", token.trim());
    let (code, body) = curl(&cp, port, "/pods", &["-H", &bearer]);
    assert_eq!(code, 403, "{body}");
    assert!(
        body.contains("Forbidden (user=system:serviceaccount:default:watcher, verb=get, resource=nodes, subresource(s)=[pods proxy])"),
        "{body}"
    );
    // Given nodes/proxy, the same token reads the pods (after the 30 s the denial is cached).
    cp.admin_run(
        &[
            "create",
            "clusterrole",
            "node-proxy",
            "--verb=get",
            "--resource=nodes/proxy",
        ],
        None,
    )
    .ok();
    cp.admin_run(
        &[
            "create",
            "clusterrolebinding",
            "watcher-node-proxy",
            "--clusterrole=node-proxy",
            "--serviceaccount=default:watcher",
        ],
        None,
    )
    .ok();
    cluster_wait(
        "the token allowed /pods",
        Duration::from_secs(60),
        &a,
        &cp,
        || {
            let (code, body) = curl(&cp, port, "/pods", &["-H", &bearer]);
            code == 200 && body.contains("\"web\"")
        },
    );
    // The apiserver's kubelet client certificate (system:masters): allowed, every endpoint.
    let cert = cp.pki("apiserver-kubelet-client.crt");
    let key = cp.pki("apiserver-kubelet-client.key");
    let as_apiserver = [
        "--cert",
        cert.to_str().unwrap(),
        "--key",
        key.to_str().unwrap(),
    ];
    for path in [
        "/healthz",
        "/pods",
        "/stats/summary",
        "/metrics",
        "/metrics/cadvisor",
        "/metrics/resource",
        "/configz",
    ] {
        let (code, body) = curl(&cp, port, path, &as_apiserver);
        assert_eq!(code, 200, "{path}: {body}");
    }
    let (_, configz) = curl(&cp, port, "/configz", &as_apiserver);
    let v: serde_json::Value = serde_json::from_str(&configz).unwrap();
    assert_eq!(v["kubeletconfig"]["port"], port);
    assert_eq!(v["kubeletconfig"]["authorization"]["mode"], "Webhook");
    // The log endpoint's 404 for a pod that is not there, and /run's output.
    let (code, body) = curl(&cp, port, "/containerLogs/default/nope/main", &as_apiserver);
    assert_eq!(code, 404, "{body}");
    let (code, body) = curl(
        &cp,
        port,
        "/run/default/web/talker?cmd=echo+ran",
        &[&as_apiserver[..], &["-X", "POST"]].concat(),
    );
    assert_eq!((code, body.as_str()), (200, "ran\n"));
    // An exec that is not an upgrade is refused before the runtime is asked.
    let (code, body) = curl(
        &cp,
        port,
        "/exec/default/web/talker?command=true&output=1",
        &as_apiserver,
    );
    assert_eq!(code, 400, "{body}");
    // A malformed upgrade (no WebSocket key or version, no SPDY): refused, and the API serves on.
    let (code, body) = curl(
        &cp,
        port,
        "/exec/default/web/talker?command=true&output=1",
        &[
            &as_apiserver[..],
            &["-H", "Connection: Upgrade", "-H", "Upgrade: websocket"],
        ]
        .concat(),
    );
    assert!((400..500).contains(&code), "{code} {body}");
    // Bytes that are not TLS at all: that connection is dropped, the next is served.
    if let Ok(mut s) = std::net::TcpStream::connect(("127.0.0.1", port)) {
        let _ = s.set_read_timeout(Some(Duration::from_secs(10)));
        let _ = s.write_all(b"GET / HTTP/1.1\r\n\r\n\x00\xff garbage");
        let mut sink = Vec::new();
        let _ = s.read_to_end(&mut sink);
    }
    let (code, _) = curl(&cp, port, "/healthz", &as_apiserver);
    assert_eq!(code, 200);
    // (The apiserver's own node proxy, /api/v1/nodes/NODE/proxy/..., refuses a node whose
    // address is loopback, as here: "address not allowed".)

    // Events, through the apiserver: the pod's containers, a crash loop counted in one object,
    // the node's own.
    let reasons = |name: &str| {
        jsonpath(&[
            "get",
            "events",
            "--field-selector",
            &format!("involvedObject.name={name}"),
            "-o",
            "jsonpath={range .items[*]}{.reason}={.count}{\"\\n\"}{end}",
        ])
    };
    let web_events = reasons("web");
    for r in ["Pulled=", "Created=", "Started="] {
        assert!(web_events.contains(r), "{r} not in {web_events}");
    }
    let node_events = reasons(NODE);
    for r in ["Starting=", "NodeReady=", "NodeHasSufficientMemory="] {
        assert!(node_events.contains(r), "{r} not in {node_events}");
    }
    cp.admin_run(&["apply", "-f", "-"],
        Some(&format!(
            "apiVersion: v1\nkind: Pod\nmetadata:\n  name: crasher\n  namespace: default\nspec:\n  \
             nodeName: {NODE}\n  tolerations:\n  - operator: Exists\n  containers:\n  - name: main\n    \
             image: {IMAGE}\n    imagePullPolicy: IfNotPresent\n    command: [sh, -c, 'exit 1']\n"
        )),)
    .ok();
    cluster_wait(
        "a crash loop counted in one BackOff event",
        Duration::from_secs(90),
        &a,
        &cp,
        || {
            let e = reasons("crasher");
            let backoffs: Vec<u64> = e
                .lines()
                .filter_map(|l| l.strip_prefix("BackOff="))
                .filter_map(|c| c.parse().ok())
                .collect();
            backoffs.len() == 1 && backoffs[0] >= 2
        },
    );
    let described = cp.admin_run(&["describe", "pod", "crasher"], None).ok();
    assert!(
        described.contains("Back-off restarting failed container main"),
        "{described}"
    );
    cp.admin_run(&["delete", "pod", "crasher", "--wait=false"], None)
        .ok();

    // Nothing restarted along the way.
    let restarts = jsonpath(&[
        "get",
        "pod",
        "web",
        "-o",
        "jsonpath={.status.containerStatuses[*].restartCount}",
    ]);
    assert_eq!(restarts, "0 0");
}

/// `kubectl top`'s figures for one row: (CPU in millicores, memory in MiB), from
/// `NAME CPU(cores) [CPU%] MEMORY(bytes) [MEMORY%]`.
fn top_row(out: &str, name: &str) -> Option<(u64, u64)> {
    let row = out
        .lines()
        .find(|l| l.split_whitespace().next() == Some(name))?;
    let cols: Vec<&str> = row.split_whitespace().collect();
    let cpu = cols.get(1)?.strip_suffix('m')?.parse().ok()?;
    let mem = cols
        .iter()
        .skip(2)
        .find_map(|c| c.strip_suffix("Mi"))?
        .parse()
        .ok()?;
    Some((cpu, mem))
}

#[test]
fn kubectl_top_shows_the_node_and_its_pods_through_metrics_server() {
    let dir = test_dir("node-api-top");
    let (cp, _c, a, _port) = join(&dir);
    // A container that uses some CPU and holds some memory (a 16 MiB file in its tmpfs).
    cp.admin_run(&["apply", "-f", "-"],
        Some(&format!(
            "apiVersion: v1\nkind: Pod\nmetadata:\n  name: busy\n  namespace: default\nspec:\n  \
             nodeName: {NODE}\n  terminationGracePeriodSeconds: 1\n  tolerations:\n  - operator: Exists\n  \
             containers:\n  - name: spin\n    image: {IMAGE}\n    imagePullPolicy: IfNotPresent\n    \
             command: [sh, -c, 'dd if=/dev/zero of=/dev/shm/fill bs=1M count=16; \
             while true; do i=0; while [ $i -lt 3000 ]; do i=$((i+1)); done; sleep 0.1; done']\n"
        )),)
    .ok();
    cluster_wait("pod busy Running", Duration::from_secs(90), &a, &cp, || {
        cp.admin_run(
            &["get", "pod", "busy", "-o", "jsonpath={.status.phase}"],
            None,
        )
        .stdout
        .trim()
            == "Running"
    });
    let ms = cp.start_metrics_server(&cp.ca_cert(), 10);
    // metrics-server needs two scrapes for a rate; `kubectl top` fails until then.
    let t0 = Instant::now();
    let node = loop {
        let top = cp.admin_run(&["top", "node", NODE], None);
        if let Some(row) = top_row(&top.stdout, NODE) {
            break row;
        }
        assert!(
            t0.elapsed() < Duration::from_secs(90),
            "kubectl top node: no figures after 90 s\n{}\n--- metrics-server ---\n{}\n--- picolet ---\n{}",
            top.describe(),
            ms.log_tail(30),
            a.log_text()
        );
        std::thread::sleep(Duration::from_secs(2));
    };
    assert!(node.0 > 0 && node.1 > 0, "node figures {node:?}");
    let t0 = Instant::now();
    let pod = loop {
        let top = cp.admin_run(&["top", "pod", "busy", "--containers"], None);
        // --containers: POD NAME CPU MEMORY
        let row = top
            .stdout
            .lines()
            .find(|l| l.starts_with("busy"))
            .and_then(|l| top_row(l.split_once(char::is_whitespace)?.1.trim_start(), "spin"));
        if let Some(row) = row {
            break row;
        }
        assert!(
            t0.elapsed() < Duration::from_secs(60),
            "kubectl top pod: no figures after 60 s\n{}\n--- metrics-server ---\n{}",
            top.describe(),
            ms.log_tail(30)
        );
        std::thread::sleep(Duration::from_secs(2));
    };
    assert!(pod.0 > 0, "the spinning container shows no CPU: {pod:?}");
    assert!(
        pod.1 >= 16,
        "the container holds 16 MiB in its tmpfs: {pod:?}"
    );
    eprintln!(
        "kubectl top: node {} m CPU, {} MiB; container spin {} m CPU, {} MiB",
        node.0, node.1, pod.0, pod.1
    );
    drop(ms);
}

#[test]
fn the_serving_certificate_comes_from_the_cluster_by_csr() {
    let dir = test_dir("node-api-csr");
    let (cp, _c, a, port) = start_node(&dir, Serving::ByCsr);
    let serving_csr =
        || {
            cp.admin_run(&[
                "get",
                "csr",
                "-o",
                "jsonpath={range .items[?(@.spec.signerName==\"kubernetes.io/kubelet-serving\")]}\
                 {.metadata.name} {.spec.username}{\"\\n\"}{end}",
            ],
            None,)
        .stdout
        .trim()
        .to_owned()
        };
    cluster_wait("the serving CSR", Duration::from_secs(60), &a, &cp, || {
        !serving_csr().is_empty()
    });
    let line = serving_csr();
    let (name, user) = line.split_once(' ').unwrap();
    assert_eq!(user, format!("system:node:{NODE}"));
    // Self-signed until approved: a client that trusts the cluster CA refuses the handshake.
    let (code, _) = curl(&cp, port, "/healthz", &[]);
    assert_eq!(code, 0, "no TLS with the self-signed certificate");
    // Upstream's controller manager leaves serving CSRs to an operator.
    cp.admin_run(&["certificate", "approve", name], None).ok();
    cluster_wait(
        "the issued certificate served",
        Duration::from_secs(60),
        &a,
        &cp,
        || curl(&cp, port, "/healthz", &[]).0 == 401,
    );
    // With the certificate the apiserver presents to node APIs (system:masters), verifying
    // the node API against the cluster CA as the apiserver does.
    let (cert, key) = (
        cp.pki("apiserver-kubelet-client.crt"),
        cp.pki("apiserver-kubelet-client.key"),
    );
    let (code, body) = curl(
        &cp,
        port,
        "/configz",
        &[
            "--cert",
            cert.to_str().unwrap(),
            "--key",
            key.to_str().unwrap(),
        ],
    );
    assert_eq!(code, 200, "{body}");
    let v: serde_json::Value = serde_json::from_str(&body).unwrap();
    assert_eq!(v["kubeletconfig"]["serverTLSBootstrap"], true);
    assert!(
        a.dir
            .join("kubelet/pki/kubelet-server-current.pem")
            .exists()
    );
}
