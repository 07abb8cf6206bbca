//! picolet's Konnectivity agent against the real `konnectivity-server` (built from its pinned Go
//! module by `scripts/k8s-build.sh --tools`): the server's HTTP CONNECT frontend on a unix
//! socket (what the apiserver's egress selector dials) asks for the node's address, which this
//! machine cannot route to (192.0.2.10, TEST-NET-1); the agent dials the node API's stand-in on
//! loopback instead and the bytes come back through the tunnel. Then the server is killed and
//! started again: the agent reconnects within its backoff and the next tunnel works.
//!
//! Needs Go (the server's build); without it the test fails, naming it. The apiserver and
//! kubectl through the tunnel are not part of this test.

mod support;

use support::{agent, control_plane};

use std::io::{Read, Write};
use std::net::{TcpListener, TcpStream};
use std::os::unix::net::UnixStream;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::rc::Rc;
use std::time::{Duration, Instant};

use picolet::konnectivity;
use picolet::options::Tunnel;

struct Server {
    child: Child,
}

impl Drop for Server {
    fn drop(&mut self) {
        self.child.kill().ok();
        self.child.wait().ok();
    }
}

fn start_server(bin: &Path, dir: &Path, agent_port: u16, admin: u16, health: u16) -> Server {
    let uds = dir.join("konnectivity.sock");
    std::fs::remove_file(&uds).ok();
    let log = std::fs::File::create(dir.join("server.log")).unwrap();
    let child = Command::new(bin)
        .args([
            "--mode=http-connect",
            "--server-port=0",
            &format!("--uds-name={}", uds.display()),
            &format!("--agent-port={agent_port}"),
            &format!("--admin-port={admin}"),
            &format!("--health-port={health}"),
            "--agent-bind-address=127.0.0.1",
            "--admin-bind-address=127.0.0.1",
            "--health-bind-address=127.0.0.1",
            &format!("--cluster-cert={}", dir.join("server.crt").display()),
            &format!("--cluster-key={}", dir.join("server.key").display()),
        ])
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(log)
        .spawn()
        .unwrap_or_else(|e| panic!("starting {}: {e}", bin.display()));
    let deadline = Instant::now() + Duration::from_secs(20);
    while !uds.exists() || TcpStream::connect(("127.0.0.1", agent_port)).is_err() {
        assert!(
            Instant::now() < deadline,
            "konnectivity-server did not listen within 20s; its log:\n{}",
            std::fs::read_to_string(dir.join("server.log")).unwrap_or_default()
        );
        std::thread::sleep(Duration::from_millis(100));
    }
    Server { child }
}

/// The apiserver's side: HTTP CONNECT on the server's unix socket to `target`, then `msg`,
/// returning what comes back (the echo).
fn through_tunnel(uds: &Path, target: &str, msg: &[u8]) -> Result<Vec<u8>, String> {
    let mut s = UnixStream::connect(uds).map_err(|e| format!("{}: {e}", uds.display()))?;
    s.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
    write!(s, "CONNECT {target} HTTP/1.1\r\nHost: {target}\r\n\r\n")
        .map_err(|e| format!("sending CONNECT: {e}"))?;
    let mut head = Vec::new();
    let mut b = [0u8; 1];
    while !head.ends_with(b"\r\n\r\n") {
        match s.read(&mut b) {
            Ok(1) => head.push(b[0]),
            _ => {
                return Err(format!(
                    "no answer to CONNECT: {:?}",
                    String::from_utf8_lossy(&head)
                ));
            }
        }
    }
    let head = String::from_utf8_lossy(&head).to_string();
    if !head.starts_with("HTTP/1.1 200") {
        return Err(format!("CONNECT refused: {head}"));
    }
    s.write_all(msg).map_err(|e| format!("writing: {e}"))?;
    let mut got = vec![0u8; msg.len()];
    s.read_exact(&mut got)
        .map_err(|e| format!("reading the echo: {e}"))?;
    // A failed dial shows as a second response after the 200.
    if got != msg && got.starts_with(b"HTTP/") {
        let mut rest = Vec::new();
        s.read_to_end(&mut rest).ok();
        got.extend(rest);
        return Err(format!("dial failed: {}", String::from_utf8_lossy(&got)));
    }
    Ok(got)
}

fn echo_server() -> std::net::SocketAddr {
    let l = TcpListener::bind("127.0.0.1:0").unwrap();
    let addr = l.local_addr().unwrap();
    std::thread::spawn(move || {
        for s in l.incoming() {
            let Ok(mut s) = s else { continue };
            std::thread::spawn(move || {
                let mut buf = [0u8; 4096];
                while let Ok(n) = s.read(&mut buf) {
                    if n == 0 || s.write_all(&buf[..n]).is_err() {
                        break;
                    }
                }
            });
        }
    });
    addr
}

fn retry_through(uds: &Path, target: &str, msg: &[u8], within: Duration) -> Duration {
    let t0 = Instant::now();
    loop {
        match through_tunnel(uds, target, msg) {
            Ok(got) => {
                assert_eq!(got, msg);
                return t0.elapsed();
            }
            Err(e) => {
                assert!(t0.elapsed() < within, "no tunnel within {within:?}: {e}");
                std::thread::sleep(Duration::from_millis(100));
            }
        }
    }
}

#[test]
fn the_real_server_reaches_the_node_api_through_the_agent_and_survives_a_restart() {
    let bin = control_plane::tool("konnectivity-server");
    let dir: PathBuf = agent::test_dir("konnectivity");
    std::fs::create_dir_all(&dir).unwrap();
    let now = i64::try_from(
        std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .unwrap()
            .as_secs(),
    )
    .unwrap();
    let s = picolet::pki::self_signed(
        "konnectivity",
        &["localhost".into()],
        &["127.0.0.1".parse().unwrap()],
        now,
    )
    .unwrap();
    std::fs::write(dir.join("server.crt"), &s.cert_pem).unwrap();
    std::fs::write(dir.join("server.key"), &s.key_pem).unwrap();
    // The CA: the chain's second certificate.
    let ca_at = s
        .cert_pem
        .match_indices("-----BEGIN CERTIFICATE-----")
        .nth(1)
        .unwrap()
        .0;
    std::fs::write(dir.join("ca.crt"), &s.cert_pem[ca_at..]).unwrap();
    // The server here authenticates agents by nothing but TLS; the token is sent and ignored.
    std::fs::write(dir.join("token"), "unused").unwrap();

    let ports = [agent::free_port(), agent::free_port(), agent::free_port()];
    let node_api = echo_server();
    let uds = dir.join("konnectivity.sock");
    let server = start_server(&bin, &dir, ports[0], ports[1], ports[2]);

    let settings = Tunnel {
        host: "127.0.0.1".into(),
        port: ports[0],
        ca_cert: Some(dir.join("ca.crt")),
        token_path: Some(dir.join("token")),
        ..Tunnel::default()
    };
    let tls = konnectivity::tls_config(&settings).unwrap();
    std::thread::spawn(move || {
        let a = Rc::new(konnectivity::Agent {
            routes: konnectivity::Routes {
                node_addresses: vec!["edge-1".into(), "192.0.2.10".into()],
                node_api_port: 10250,
                local: node_api,
                allowed: vec![],
            },
            tls,
            agent_id: "edge-1".into(),
            agent_identifiers: konnectivity::default_identifiers(
                "edge-1",
                "192.0.2.10".parse().ok(),
            ),
            settings,
            stats: Rc::default(),
        });
        picolet::rt::block_on(a.run());
    });

    let took = retry_through(
        &uds,
        "192.0.2.10:10250",
        b"hello node",
        Duration::from_secs(15),
    );
    eprintln!("first tunnel after {took:?}");
    // 20 tunnels at once over the one agent stream.
    let threads: Vec<_> = (0..20)
        .map(|i| {
            let uds = uds.clone();
            std::thread::spawn(move || {
                let msg = format!("stream {i} {}", "x".repeat(20_000));
                let got = through_tunnel(&uds, "192.0.2.10:10250", msg.as_bytes()).unwrap();
                assert_eq!(got, msg.as_bytes());
            })
        })
        .collect();
    for t in threads {
        t.join().unwrap();
    }
    // A destination outside the allow-list is refused by the agent.
    // (the server's answer to a failed dial varies: a refusal, or a closed tunnel; never
    // the echo)
    let r = through_tunnel(&uds, "192.0.2.10:22", b"xxxxxxxx");
    assert!(r.is_err(), "{r:?}");
    eprintln!("refused: {r:?}");

    // The server restarts: the agent comes back within its backoff.
    drop(server);
    let _server = start_server(&bin, &dir, ports[0], ports[1], ports[2]);
    let took = retry_through(&uds, "192.0.2.10:10250", b"again", Duration::from_secs(15));
    eprintln!("tunnel again {took:?} after the server restarted");
}
