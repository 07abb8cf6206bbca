//! The Konnectivity tunnel end to end: the real kube-apiserver, given an
//! `EgressSelectorConfiguration` whose `cluster` egress goes over HTTP CONNECT to the real
//! `konnectivity-server`'s unix socket, reaches picolet's node API through picolet's own agent.
//! picolet reports an InternalIP this machine cannot route to (192.0.2.10, TEST-NET-1), so the
//! apiserver's direct dial would fail: `kubectl logs`, `exec` and `port-forward` only work
//! through the tunnel, and so do the apiserver's node proxy paths metrics-server reads
//! (`/metrics/resource`, `/stats/summary`). 50 `kubectl exec` run at once over the one agent
//! stream. As a control, with the server stopped the same `kubectl exec` fails; started again,
//! exec works again within the agent's backoff. The agent reaches the server through a relay the
//! test controls: with the link cut (every connection closed, new ones refused) exec fails, the
//! agent notices and keeps dialing; with the link back it reconnects within its backoff.
//! Last, metrics-server's own scrape: the server's frontend moved to TCP with mutual TLS, the
//! apiserver's egress with it, metrics-server given it as `HTTPS_PROXY` and its address allowed
//! to the agent (the aggregator reaches it through the same egress): `kubectl top node` and
//! `kubectl top pod` show the unroutable node's figures.
//!
//! The agent port is on TLS with a certificate of the cluster CA, and the server asks agents
//! for a client certificate of that CA (the node's own). Needs Go (the server's and the control
//! plane's build), openssl and a containerd: without one the test fails, naming it.

mod support;

use support::{IMAGE, NODE, agent, cluster_wait, containerd, control_plane, relay};

use std::net::{SocketAddr, TcpStream};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use agent::{Agent, free_port, test_dir};
use containerd::ScratchContainerd;
use control_plane::{ControlPlane, NodeKey, Options};
use relay::Relay;

/// TEST-NET-1: never routed.
const NODE_IP: &str = "192.0.2.10";
/// `kubectl exec` at once, each its own tunnel over the one agent stream.
const CONCURRENT_EXECS: usize = 50;

const POD: &str = "\
apiVersion: v1
kind: Pod
metadata:
  name: web
  namespace: default
spec:
  nodeName: NODE
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
    command: [sh, -c, 'mkdir -p /www && echo served-through-konnectivity > /www/index.html && exec httpd -f -p 8080 -h /www']
";

/// Runs of `kubectl exec -- echo` a latency figure is the median of.
const EXEC_RUNS: usize = 11;

/// The median of [`EXEC_RUNS`] `kubectl exec -- echo` (kubectl's start included), each
/// checked; prints the spread.
fn exec_latency(cp: &ControlPlane, path: &str) -> Duration {
    let mut took: Vec<Duration> = (0..EXEC_RUNS)
        .map(|i| {
            let t0 = Instant::now();
            let r = exec_echo(cp, &format!("{path}-{i}"));
            let took = t0.elapsed();
            assert_eq!(r.stdout, format!("{path}-{i}\n"), "{}", r.describe());
            took
        })
        .collect();
    took.sort();
    eprintln!(
        "figure: kubectl exec -- echo {path}: median {:?}, min {:?}, max {:?} ({EXEC_RUNS} runs)",
        took[EXEC_RUNS / 2],
        took[0],
        took[EXEC_RUNS - 1]
    );
    took[EXEC_RUNS / 2]
}

/// `pki/NAME.crt` and `.key` under `dir`, an EC P-256 key signed by the cluster CA.
fn sign(cp: &ControlPlane, dir: &Path, name: &str, subject: &str, ext: &str) -> (PathBuf, PathBuf) {
    let key = dir.join(format!("{name}.key"));
    let csr = dir.join(format!("{name}.csr"));
    let crt = dir.join(format!("{name}.crt"));
    let extfile = dir.join(format!("{name}.ext"));
    std::fs::write(
        &extfile,
        format!("basicConstraints = critical, CA:FALSE\n{ext}\n"),
    )
    .unwrap();
    let run = |args: &[&str]| {
        let out = Command::new("openssl")
            .args(args)
            .output()
            .unwrap_or_else(|e| panic!("cannot run openssl (scripts/install-deps.sh): {e}"));
        assert!(
            out.status.success(),
            "openssl {args:?}: {}",
            String::from_utf8_lossy(&out.stderr)
        );
    };
    let p = |p: &Path| p.display().to_string();
    run(&[
        "ecparam",
        "-name",
        "prime256v1",
        "-genkey",
        "-noout",
        "-out",
        &p(&key),
    ]);
    run(&[
        "req",
        "-new",
        "-key",
        &p(&key),
        "-subj",
        subject,
        "-out",
        &p(&csr),
    ]);
    run(&[
        "x509",
        "-req",
        "-in",
        &p(&csr),
        "-CA",
        &p(&cp.ca_cert()),
        "-CAkey",
        &p(&cp.pki("ca.key")),
        "-CAcreateserial",
        "-days",
        "2",
        "-sha256",
        "-extfile",
        &p(&extfile),
        "-out",
        &p(&crt),
    ]);
    (crt, key)
}

/// Where konnectivity-server takes HTTP CONNECT requests: a unix socket, or a TCP port on
/// loopback with mutual TLS (clients of the cluster CA).
enum Frontend<'a> {
    Uds(&'a Path),
    Tcp(u16),
}

/// konnectivity-server, HTTP CONNECT on its frontend for the apiserver, the agent port on TLS.
/// `Drop` stops it, by its PID.
struct ProxyServer {
    child: Child,
    log: PathBuf,
}

impl ProxyServer {
    fn start(bin: &Path, dir: &Path, uds: &Path, ports: [u16; 3], ca: &Path) -> ProxyServer {
        Self::start_with(bin, dir, &Frontend::Uds(uds), ports, ca)
    }

    fn start_with(
        bin: &Path,
        dir: &Path,
        frontend: &Frontend,
        ports: [u16; 3],
        ca: &Path,
    ) -> ProxyServer {
        let frontend_flags = match frontend {
            Frontend::Uds(uds) => {
                let _ = std::fs::remove_file(uds);
                vec![
                    "--server-port=0".to_owned(),
                    format!("--uds-name={}", uds.display()),
                ]
            }
            Frontend::Tcp(port) => vec![
                format!("--server-port={port}"),
                "--server-bind-address=127.0.0.1".into(),
                format!("--server-ca-cert={}", ca.display()),
                format!("--server-cert={}", dir.join("proxy-server.crt").display()),
                format!("--server-key={}", dir.join("proxy-server.key").display()),
            ],
        };
        let log = dir.join("konnectivity-server.log");
        let file = std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(&log)
            .unwrap();
        let child = Command::new(bin)
            .arg("--mode=http-connect")
            .args(&frontend_flags)
            .args([
                &format!("--agent-port={}", ports[0]),
                &format!("--admin-port={}", ports[1]),
                &format!("--health-port={}", ports[2]),
                "--agent-bind-address=127.0.0.1",
                "--admin-bind-address=127.0.0.1",
                "--health-bind-address=127.0.0.1",
                &format!("--cluster-cert={}", dir.join("proxy-server.crt").display()),
                &format!("--cluster-key={}", dir.join("proxy-server.key").display()),
                &format!("--cluster-ca-cert={}", ca.display()),
            ])
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(file)
            .spawn()
            .unwrap_or_else(|e| panic!("starting {}: {e}", bin.display()));
        let s = ProxyServer { child, log };
        let t0 = Instant::now();
        let frontend_up = || match frontend {
            Frontend::Uds(uds) => uds.exists(),
            Frontend::Tcp(port) => TcpStream::connect(("127.0.0.1", *port)).is_ok(),
        };
        while !frontend_up() || TcpStream::connect(("127.0.0.1", ports[0])).is_err() {
            assert!(
                t0.elapsed() < Duration::from_secs(20),
                "konnectivity-server did not listen within 20 s\n{}",
                s.log_text()
            );
            std::thread::sleep(Duration::from_millis(100));
        }
        s
    }

    fn log_text(&self) -> String {
        std::fs::read_to_string(&self.log).unwrap_or_default()
    }
}

impl Drop for ProxyServer {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

fn exec_echo(cp: &ControlPlane, word: &str) -> control_plane::Kubectl {
    cp.admin_run(&["exec", "web", "-c", "talker", "--", "echo", word], None)
}

#[test]
fn kubectl_reaches_an_unroutable_node_through_the_konnectivity_tunnel() {
    let t_test = Instant::now();
    let dir = test_dir("konn-e2e");
    let pdir = dir.join("proxy");
    let _ = std::fs::remove_dir_all(&pdir);
    std::fs::create_dir_all(&pdir).unwrap();
    let uds = pdir.join("konnectivity.sock");
    let egress = pdir.join("egress.yaml");
    std::fs::write(
        &egress,
        format!(
            "apiVersion: apiserver.k8s.io/v1beta1\nkind: EgressSelectorConfiguration\n\
             egressSelections:\n- name: cluster\n  connection:\n    proxyProtocol: HTTPConnect\n    \
             transport:\n      uds:\n        udsName: {}\n",
            uds.display()
        ),
    )
    .unwrap();
    let bin = control_plane::tool("konnectivity-server");
    let cp = ControlPlane::start(
        &dir.join("cp"),
        &Options {
            nodes: vec![NODE.into()],
            controllers: true,
            apiserver_flags: vec![format!(
                "--egress-selector-config-file={}",
                egress.display()
            )],
            ..Default::default()
        },
    );
    // The node API's certificate names the address the apiserver dials; the server's, the
    // address the agent dials.
    let (serving_crt, serving_key) = sign(
        &cp,
        &pdir,
        "node-serving",
        &format!("/O=system:nodes/CN=system:node:{NODE}"),
        &format!(
            "keyUsage = critical, digitalSignature, keyEncipherment\n\
             extendedKeyUsage = serverAuth\nsubjectAltName = DNS:{NODE}, IP:{NODE_IP}, IP:127.0.0.1"
        ),
    );
    sign(
        &cp,
        &pdir,
        "proxy-server",
        "/CN=konnectivity-server",
        "keyUsage = critical, digitalSignature, keyEncipherment\n\
         extendedKeyUsage = serverAuth\nsubjectAltName = IP:127.0.0.1, DNS:localhost",
    );
    let ports = [free_port(), free_port(), free_port()];
    let mut server = Some(ProxyServer::start(&bin, &pdir, &uds, ports, &cp.ca_cert()));

    // The agent's link to the server runs through a relay the test can cut.
    let link = Relay::start(format!("127.0.0.1:{}", ports[0]).parse().unwrap());

    let c = ScratchContainerd::start(&dir.join("containerd"));
    let port = free_port();
    let args = vec![
        "--kubeconfig".into(),
        cp.node_kubeconfig(NODE, NodeKey::EcSec1)
            .display()
            .to_string(),
        format!("--node-ip={NODE_IP}"),
        "--address=127.0.0.1".into(),
        format!("--port={port}"),
        format!("--client-ca-file={}", cp.ca_cert().display()),
        format!("--tls-cert-file={}", serving_crt.display()),
        format!("--tls-private-key-file={}", serving_key.display()),
        "--proxy-server-host=127.0.0.1".into(),
        format!("--proxy-server-port={}", link.port),
        format!("--ca-cert={}", cp.ca_cert().display()),
        // The node's own client certificate, of the CA the server checks agents against.
        format!(
            "--agent-cert={}",
            cp.pki(&format!("node-{NODE}.crt")).display()
        ),
        format!(
            "--agent-key={}",
            cp.pki(&format!("node-{NODE}.key")).display()
        ),
    ];
    let mut a = Agent::start_configured(&dir.join("a"), &c.endpoint(), &args, "");
    let jsonpath = |args: &[&str]| cp.admin_run(args, None).stdout.trim().to_owned();
    cluster_wait("the node Ready", Duration::from_secs(60), &a, &cp, || {
        jsonpath(&[
            "get",
            "node",
            NODE,
            "-o",
            "jsonpath={.status.conditions[?(@.type==\"Ready\")].status}",
        ]) == "True"
    });
    assert_eq!(
        jsonpath(&[
            "get",
            "node",
            NODE,
            "-o",
            "jsonpath={.status.addresses[?(@.type==\"InternalIP\")].address}"
        ]),
        NODE_IP
    );
    // This machine cannot reach the node API at the address the Node reports.
    let direct: SocketAddr = format!("{NODE_IP}:{port}").parse().unwrap();
    assert!(
        TcpStream::connect_timeout(&direct, Duration::from_secs(2)).is_err(),
        "{direct} answered directly: the test would not show the tunnel"
    );

    cp.admin_stdin(
        &["apply", "-f", "-"],
        &POD.replace("BUSYBOX", IMAGE).replace("NODE", NODE),
    );
    cluster_wait("pod web Running", Duration::from_secs(90), &a, &cp, || {
        jsonpath(&["get", "pod", "web", "-o", "jsonpath={.status.phase}"]) == "Running"
    });

    // kubectl logs through the tunnel.
    cluster_wait(
        "kubectl logs through the tunnel",
        Duration::from_secs(30),
        &a,
        &cp,
        || {
            cp.admin_run(&["logs", "web", "-c", "talker", "--tail=3"], None)
                .stdout
                .lines()
                .filter(|l| l.starts_with("line "))
                .count()
                == 3
        },
    );
    // kubectl exec through the tunnel: the output, and its latency.
    let mut took = Vec::new();
    for i in 0..5 {
        let t0 = Instant::now();
        let r = exec_echo(&cp, &format!("through-{i}"));
        took.push(t0.elapsed());
        assert_eq!(r.stdout, format!("through-{i}\n"), "{}", r.describe());
    }
    took.sort();
    eprintln!(
        "kubectl exec -- echo through the tunnel: median {:?}, min {:?}, max {:?} (5 runs, kubectl's start included)",
        took[2], took[0], took[4]
    );

    // kubectl port-forward through the tunnel, and an HTTP request through it.
    let page = cp.port_forward_get(
        "web",
        free_port(),
        8080,
        "served-through-konnectivity",
        Duration::from_secs(20),
    );
    assert!(
        page.contains("served-through-konnectivity"),
        "port-forward: {page:?}\n{}",
        a.log_text()
    );

    // The node proxy paths metrics-server scrapes, through the apiserver and so the tunnel.
    let raw = |path: &str| {
        cp.admin_run(
            &["get", "--raw", &format!("/api/v1/nodes/{NODE}/proxy{path}")],
            None,
        )
    };
    let r = raw("/metrics/resource");
    assert!(
        r.success
            && r.stdout.contains("node_cpu_usage_seconds_total")
            && r.stdout.contains("container_memory_working_set_bytes{")
            && r.stdout.contains("pod=\"web\""),
        "/metrics/resource through the tunnel:\n{}",
        r.describe()
    );
    let r = raw("/stats/summary");
    let summary: serde_json::Value = serde_json::from_str(&r.stdout)
        .unwrap_or_else(|e| panic!("/stats/summary through the tunnel: {e}\n{}", r.describe()));
    assert_eq!(summary["node"]["nodeName"], NODE, "{}", r.stdout);
    assert!(
        summary["pods"]
            .as_array()
            .is_some_and(|p| p.iter().any(|p| p["podRef"]["name"] == "web")),
        "/stats/summary without pod web: {}",
        r.stdout
    );

    let t0 = Instant::now();
    let children: Vec<Child> = (0..CONCURRENT_EXECS)
        .map(|_| {
            Command::new(&cp.kubectl)
                .arg("--kubeconfig")
                .arg(cp.admin_kubeconfig())
                .args([
                    "--request-timeout=30s",
                    "exec",
                    "web",
                    "-c",
                    "talker",
                    "--",
                    "true",
                ])
                .stdin(Stdio::null())
                .stdout(Stdio::null())
                .stderr(Stdio::piped())
                .spawn()
                .unwrap()
        })
        .collect();
    let failed: Vec<String> = children
        .into_iter()
        .map(|c| c.wait_with_output().unwrap())
        .filter(|o| !o.status.success())
        .map(|o| String::from_utf8_lossy(&o.stderr).into_owned())
        .collect();
    assert!(
        failed.is_empty(),
        "{} of {CONCURRENT_EXECS} failed: {failed:?}",
        failed.len()
    );
    eprintln!(
        "{CONCURRENT_EXECS} concurrent kubectl exec -- true: all done in {:?}",
        t0.elapsed()
    );

    // The control: no server, no way to the node.
    drop(server.take());
    let r = exec_echo(&cp, "no-tunnel");
    assert!(
        !r.success && !r.stdout.contains("no-tunnel"),
        "exec worked without the tunnel:\n{}",
        r.describe()
    );
    eprintln!(
        "without the server, kubectl exec fails: {}",
        r.stderr.lines().last().unwrap_or("")
    );
    let logs = cp.admin_run(&["logs", "web", "-c", "talker", "--tail=1"], None);
    assert!(
        !logs.success,
        "logs worked without the tunnel:\n{}",
        logs.describe()
    );

    // The server again: the agent redials within its backoff and exec works.
    let restarted = Instant::now();
    server = Some(ProxyServer::start(&bin, &pdir, &uds, ports, &cp.ca_cert()));
    let limit = Duration::from_secs(30);
    loop {
        let r = exec_echo(&cp, "again");
        if r.success && r.stdout == "again\n" {
            break;
        }
        assert!(
            restarted.elapsed() < limit,
            "no exec within {limit:?} of the server's restart:\n{}\n--- server ---\n{}\n--- picolet ---\n{}",
            r.describe(),
            server.as_ref().unwrap().log_text(),
            a.log_text()
        );
        std::thread::sleep(Duration::from_millis(200));
    }
    eprintln!(
        "kubectl exec through the tunnel again {:?} after the server restarted",
        restarted.elapsed()
    );

    // The link cut: the stream ends, the server has no agent, exec fails; the agent keeps
    // dialing and each attempt is closed.
    let notices = |log: &str| {
        log.lines()
            .filter(|l| {
                l.contains(&format!(
                    "konnectivity: stream to 127.0.0.1:{} ended",
                    link.port
                )) || l.contains(&format!("konnectivity: 127.0.0.1:{}: stream", link.port))
            })
            .count()
    };
    let connected = |log: &str| log.matches("konnectivity: connected to").count();
    let (noticed, connects, relayed) = (
        notices(&a.log_text()),
        connected(&a.log_text()),
        link.accepted(),
    );
    link.cut();
    let cut = Instant::now();
    let r = exec_echo(&cp, "cut");
    assert!(
        !r.success && !r.stdout.contains("cut"),
        "exec worked with the link cut:\n{}",
        r.describe()
    );
    eprintln!(
        "link cut: kubectl exec fails in {:?}: {}",
        cut.elapsed(),
        r.stderr.lines().last().unwrap_or("")
    );
    cluster_wait(
        "the agent noticing the cut",
        Duration::from_secs(10),
        &a,
        &cp,
        || notices(&a.log_text()) > noticed,
    );
    cluster_wait(
        "the agent dialing during the cut",
        Duration::from_secs(10),
        &a,
        &cp,
        || link.refused() >= 2,
    );
    // The link back: a new stream within the backoff (after two or more failed dials, the next
    // wait is under 4 s or 8 s; the bound leaves room for a loaded machine).
    link.restore();
    let back = Instant::now();
    let limit = Duration::from_secs(25);
    loop {
        let r = exec_echo(&cp, "back");
        if r.success && r.stdout == "back\n" {
            break;
        }
        assert!(
            back.elapsed() < limit,
            "no exec within {limit:?} of the link's return ({} dials refused during the cut):\n{}\n--- picolet ---\n{}",
            link.refused(),
            r.describe(),
            a.log_text()
        );
        std::thread::sleep(Duration::from_millis(200));
    }
    assert!(connected(&a.log_text()) > connects && link.accepted() > relayed);
    eprintln!(
        "link cut for {:?} ({} dials refused meanwhile); kubectl exec through the tunnel again {:?} after the link returned",
        back - cut,
        link.refused(),
        back.elapsed()
    );
    eprintln!(
        "whole test: {:?}; {} bytes through the agent's link, {} connections",
        t_test.elapsed(),
        link.bytes(),
        link.accepted()
    );

    // metrics-server's own scrape through the tunnel. It dials each node itself, so it takes
    // konnectivity-server's HTTP CONNECT frontend as its proxy (HTTPS_PROXY, which client-go
    // honours); that frontend is then TCP with mutual TLS, and the apiserver's egress with it.
    // The aggregator takes the same `cluster` egress to reach metrics-server, so `kubectl top`
    // crosses the tunnel both ways: metrics-server's address is one the agent may dial.
    let front = free_port();
    let ms_port = free_port();
    let (egress_crt, egress_key) = sign(
        &cp,
        &pdir,
        "egress-client",
        "/CN=kube-apiserver-egress",
        "keyUsage = critical, digitalSignature, keyEncipherment\nextendedKeyUsage = clientAuth",
    );
    let egress_tcp = pdir.join("egress-tcp.yaml");
    std::fs::write(
        &egress_tcp,
        format!(
            "apiVersion: apiserver.k8s.io/v1beta1\nkind: EgressSelectorConfiguration\n\
             egressSelections:\n- name: cluster\n  connection:\n    proxyProtocol: HTTPConnect\n    \
             transport:\n      tcp:\n        url: https://127.0.0.1:{front}\n        tlsConfig:\n          \
             caBundle: {}\n          clientKey: {}\n          clientCert: {}\n",
            cp.ca_cert().display(),
            egress_key.display(),
            egress_crt.display()
        ),
    )
    .unwrap();
    drop(server.take());
    server = Some(ProxyServer::start_with(
        &bin,
        &pdir,
        &Frontend::Tcp(front),
        ports,
        &cp.ca_cert(),
    ));
    let apiserver: Vec<String> = cp
        .stop_apiserver()
        .into_iter()
        .map(|f| {
            if f.starts_with("--egress-selector-config-file") {
                format!("--egress-selector-config-file={}", egress_tcp.display())
            } else {
                f
            }
        })
        .collect();
    cp.start_apiserver(&apiserver);
    let mut with_ms = args.clone();
    with_ms.push(format!(
        "--proxy-allowed-destinations=localhost:{ms_port},127.0.0.1:{ms_port}"
    ));
    a.restart_with(&with_ms);
    cluster_wait(
        "exec through the tunnel's TCP frontend",
        Duration::from_secs(60),
        &a,
        &cp,
        || exec_echo(&cp, "tcp-frontend").stdout == "tcp-frontend\n",
    );
    let ms = cp.start_metrics_server_on(
        &cp.ca_cert(),
        10,
        ms_port,
        &[("HTTPS_PROXY", format!("https://127.0.0.1:{front}"))],
    );
    let t0 = Instant::now();
    let top = loop {
        // Two scrapes make a rate; `kubectl top` fails until then.
        let node = cp.admin_run(&["top", "node", NODE], None);
        let pod = cp.admin_run(&["top", "pod", "web", "--containers"], None);
        if node.success
            && node.stdout.lines().any(|l| l.starts_with(NODE))
            && pod.success
            && pod.stdout.contains("talker")
        {
            break format!("{}{}", node.stdout, pod.stdout);
        }
        assert!(
            t0.elapsed() < Duration::from_secs(120),
            "kubectl top through the tunnel: nothing after 120 s\n{}\n{}\n--- metrics-server ---\n{}\n--- server ---\n{}",
            node.describe(),
            pod.describe(),
            ms.log_tail(20),
            server.as_ref().unwrap().log_text()
        );
        std::thread::sleep(Duration::from_secs(2));
    };
    eprintln!(
        "kubectl top through the tunnel after {:?}:\n{top}",
        t0.elapsed()
    );
    drop(ms);

    // Figures only (scripts/bench-konnectivity.sh): picolet's RSS and the link's traffic with
    // the tunnel up and idle, then picolet's RSS without the agent. Asserts nothing.
    if let Some(window) = std::env::var("KONNECTIVITY_FIGURES_SECONDS")
        .ok()
        .and_then(|v| v.parse::<u64>().ok())
    {
        let rss = |a: &Agent| {
            std::fs::read_to_string(format!("/proc/{}/status", a.picolet_pid()))
                .unwrap_or_default()
                .lines()
                .find(|l| l.starts_with("VmRSS:"))
                .unwrap_or("VmRSS: ?")
                .to_owned()
        };
        let settle = Duration::from_secs(20);
        a.restart();
        std::thread::sleep(settle);
        let b0 = link.bytes();
        std::thread::sleep(Duration::from_secs(window));
        let idle = link.bytes() - b0;
        eprintln!(
            "figure: tunnel up and idle: picolet {} ({:?} after its start)",
            rss(&a),
            settle + Duration::from_secs(window)
        );
        eprintln!(
            "figure: the agent's link idle: {idle} bytes in {window} s (TLS and TCP payload, both ways) = {} bytes a day",
            idle * 86_400 / window.max(1)
        );
        let tunnel = exec_latency(&cp, "tunnel");
        let without: Vec<String> = args
            .iter()
            .filter(|f| {
                !["--proxy-server", "--ca-cert", "--agent-"]
                    .iter()
                    .any(|p| f.starts_with(p))
            })
            .cloned()
            .collect();
        a.restart_with(&without);
        std::thread::sleep(settle + Duration::from_secs(window));
        eprintln!(
            "figure: no tunnel: picolet {} ({:?} after its start)",
            rss(&a),
            settle + Duration::from_secs(window)
        );

        // The same exec without the tunnel, in the same run: the apiserver restarted without
        // its egress selector, picolet reporting an InternalIP it serves on (127.0.0.1, which
        // the serving certificate names too), so the apiserver dials the node API itself.
        let mut direct = without;
        for f in &mut direct {
            if f.starts_with("--node-ip=") {
                *f = "--node-ip=127.0.0.1".into();
            }
        }
        a.restart_with(&direct);
        let apiserver: Vec<String> = cp
            .stop_apiserver()
            .into_iter()
            .filter(|f| !f.starts_with("--egress-selector-config-file"))
            .collect();
        cp.start_apiserver(&apiserver);
        cluster_wait(
            "the node's InternalIP 127.0.0.1",
            Duration::from_secs(60),
            &a,
            &cp,
            || {
                jsonpath(&[
                    "get",
                    "node",
                    NODE,
                    "-o",
                    "jsonpath={.status.addresses[?(@.type==\"InternalIP\")].address}",
                ]) == "127.0.0.1"
            },
        );
        cluster_wait("exec direct", Duration::from_secs(30), &a, &cp, || {
            exec_echo(&cp, "direct").stdout == "direct\n"
        });
        let direct = exec_latency(&cp, "direct");
        eprintln!(
            "figure: kubectl exec -- echo, median of {EXEC_RUNS}: through the tunnel {:.1} ms, direct {:.1} ms ({:+.1} ms)",
            tunnel.as_secs_f64() * 1e3,
            direct.as_secs_f64() * 1e3,
            (tunnel.as_secs_f64() - direct.as_secs_f64()) * 1e3
        );
    }
    drop(server);
}
