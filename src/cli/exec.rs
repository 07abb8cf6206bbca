//! `picolet exec POD [-c CONTAINER] [-i] [-t] -- COMMAND [ARG...]`: a command in a running
//! container on the device, with no cluster, as `kubectl exec` through a kubelet. picolet's own
//! CRI client finds the container and asks the runtime for an exec session (CRI `Exec`), then
//! speaks the runtime streaming server's WebSocket channel protocol to it (`v5.channel.k8s.io`
//! where the runtime has it, else `v4.channel.k8s.io`): one binary message per chunk, its first
//! byte the stream (0 stdin, 1 stdout, 2 stderr, 3 the final status, 4 terminal size).
//!
//! It goes to the runtime's socket, not to the local API: that API answers anyone on loopback
//! without credentials (host-network pods share it), so running commands stays with whoever may
//! open the runtime's socket, as with `crictl exec`.

use std::io::{self, Read, Write};
use std::net::TcpStream;
use std::path::Path;
use std::sync::{Arc, Mutex};

use crate::cli::options::{self, OptionsError};
use crate::cri::{self, v1};

/// What `picolet exec` was asked for.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ExecArgs {
    pub namespace: String,
    pub pod: String,
    pub container: Option<String>,
    pub stdin: bool,
    pub tty: bool,
    pub command: Vec<String>,
    pub endpoint: String,
}

pub const USAGE: &str = "\
usage: picolet exec POD [-c CONTAINER] [flags] -- COMMAND [ARG...]

Runs a command in a running container of a pod on this device (as kubectl exec does), through
the container runtime's socket: no cluster and no network needed. The exit code is the
command's. A static pod's name carries the node's name, as in `picolet logs`.

flags:
  -c, --container NAME        the container (needed when the pod runs more than one)
  -n, --namespace NS          the pod's namespace (default \"default\")
  -i, --stdin                 pass this terminal's input to the command
  -t, --tty                   give the command a terminal (with -i: an interactive shell)
      --container-runtime-endpoint EP  the runtime's socket (default unix:///run/containerd/containerd.sock)
      --config FILE           take the endpoint from this KubeletConfiguration
";

use crate::cli::options::bad;

/// Reads `picolet exec`'s arguments (those after `exec`).
pub fn parse(args: &[String]) -> Result<ExecArgs, OptionsError> {
    let mut a = ExecArgs {
        namespace: "default".into(),
        pod: String::new(),
        container: None,
        stdin: false,
        tty: false,
        command: Vec::new(),
        endpoint: cri::DEFAULT_ENDPOINT.to_owned(),
    };
    let (mut endpoint, mut config) = (None, None);
    let mut positional = Vec::new();
    let mut i = 0;
    while i < args.len() {
        let arg = &args[i];
        i += 1;
        if arg == "--" {
            a.command = args[i..].to_vec();
            break;
        }
        if !arg.starts_with('-') || arg == "-" {
            positional.push(arg.clone());
            continue;
        }
        // Short switches may be joined: -it, -ti.
        if !arg.starts_with("--") && arg.len() > 2 && arg[1..].chars().all(|c| "it".contains(c)) {
            a.stdin |= arg.contains('i');
            a.tty |= arg.contains('t');
            continue;
        }
        let (name, inline) = match arg.split_once('=') {
            Some((n, v)) => (n, Some(v.to_owned())),
            None => (arg.as_str(), None),
        };
        match name {
            "-i" | "--stdin" | "-t" | "--tty" => {
                let on = options::switch(name, inline.as_deref())?;
                if name.ends_with('i') || name == "--stdin" {
                    a.stdin = on;
                } else {
                    a.tty = on;
                }
            }
            "-c"
            | "--container"
            | "-n"
            | "--namespace"
            | "--container-runtime-endpoint"
            | "--config" => {
                let v = options::flag_value(args, &mut i, name, inline)?;
                match name {
                    "-c" | "--container" => a.container = Some(v),
                    "-n" | "--namespace" => a.namespace = v,
                    "--container-runtime-endpoint" => endpoint = Some(v),
                    _ => config = Some(v),
                }
            }
            _ => return Err(OptionsError::UnknownFlag(name.to_owned())),
        }
    }
    let mut pos = positional.into_iter();
    a.pod = pos.next().ok_or_else(|| {
        OptionsError::Invalid("exec needs a pod: picolet exec POD -- COMMAND".into())
    })?;
    if let Some(extra) = pos.next() {
        return Err(OptionsError::Invalid(format!(
            "exec: unexpected {extra:?} before `--`: the command goes after it (picolet exec POD -- COMMAND)"
        )));
    }
    if a.command.is_empty() {
        return Err(OptionsError::Invalid(
            "exec needs a command after `--`: picolet exec POD -- COMMAND [ARG...]".into(),
        ));
    }
    if let Some(c) = config {
        let mut o = options::Options::default();
        crate::cli::parse::load_config(Path::new(&c), &mut o)?;
        a.endpoint = o.container_runtime_endpoint;
    }
    if let Some(e) = endpoint {
        a.endpoint = e;
    }
    cri::parse_endpoint(&a.endpoint)
        .map_err(|e| bad("--container-runtime-endpoint", &a.endpoint, e))?;
    Ok(a)
}

/// The running container `a` names, and the runtime's streaming URL for the command in it.
async fn session(a: &ExecArgs) -> Result<String, String> {
    let rt = cri::Cri::new(&a.endpoint, None, cri::Deadlines::default())
        .map_err(|e| format!("{}: {e}", a.endpoint))?;
    let ready = v1::ListPodSandboxRequest {
        filter: Some(v1::PodSandboxFilter {
            state: Some(v1::PodSandboxStateValue {
                state: v1::PodSandboxState::SandboxReady as i32,
            }),
            ..Default::default()
        }),
    };
    let sandboxes = rt
        .list_pod_sandbox(ready)
        .await
        .map_err(|e| format!("listing pods at {}: {e}", a.endpoint))?
        .items;
    let sandbox = sandboxes
        .iter()
        .filter(|s| {
            s.metadata
                .as_ref()
                .is_some_and(|m| m.name == a.pod && m.namespace == a.namespace)
        })
        .max_by_key(|s| s.created_at)
        .ok_or_else(|| {
            format!(
                "pod {}/{} is not running here (no ready sandbox of that name at {})",
                a.namespace, a.pod, a.endpoint
            )
        })?;
    let running = v1::ListContainersRequest {
        filter: Some(v1::ContainerFilter {
            pod_sandbox_id: sandbox.id.clone(),
            state: Some(v1::ContainerStateValue {
                state: v1::ContainerState::ContainerRunning as i32,
            }),
            ..Default::default()
        }),
    };
    let mut containers = rt
        .list_containers(running)
        .await
        .map_err(|e| format!("listing containers at {}: {e}", a.endpoint))?
        .containers;
    containers.sort_by_key(|c| std::cmp::Reverse(c.created_at));
    let name = |c: &v1::Container| {
        c.metadata
            .as_ref()
            .map_or("", |m| m.name.as_str())
            .to_owned()
    };
    let mut names: Vec<String> = containers.iter().map(name).collect();
    names.sort();
    names.dedup();
    let chosen = match &a.container {
        Some(want) => containers
            .iter()
            .find(|c| name(c) == *want)
            .ok_or_else(|| {
                format!(
                    "container {want:?} is not running in pod {}/{} (running: {})",
                    a.namespace,
                    a.pod,
                    names.join(", ")
                )
            })?,
        None if names.len() == 1 => &containers[0],
        None if names.is_empty() => {
            return Err(format!(
                "pod {}/{} has no running container",
                a.namespace, a.pod
            ));
        }
        None => {
            return Err(format!(
                "pod {}/{} runs {} containers ({}): choose one with -c",
                a.namespace,
                a.pod,
                names.len(),
                names.join(", ")
            ));
        }
    };
    let req = v1::ExecRequest {
        container_id: chosen.id.clone(),
        cmd: a.command.clone(),
        tty: a.tty,
        stdin: a.stdin,
        stdout: true,
        // With a terminal the runtime merges stderr into it.
        stderr: !a.tty,
    };
    Ok(rt
        .exec(req)
        .await
        .map_err(|e| format!("exec in container {}: {e}", name(chosen)))?
        .url)
}

/// Runs the command; returns its exit code.
pub fn run(a: &ExecArgs) -> Result<i32, String> {
    let url = crate::rt::block_on(session(a))?;
    let (mut conn, protocol, early) = ws::connect(&url)?;
    let v5 = protocol == ws::V5;
    let writer = Arc::new(Mutex::new(conn.try_clone().map_err(|e| e.to_string())?));
    let raw = if a.tty && a.stdin {
        terminal::Raw::enter()
    } else {
        None
    };
    if let Some((w, h)) = terminal::size().filter(|_| a.tty) {
        let msg = format!("{{\"Width\":{w},\"Height\":{h}}}");
        ws::send(&writer, 4, msg.as_bytes()).map_err(|e| e.to_string())?;
    }
    if a.stdin {
        let writer = writer.clone();
        let tty = a.tty;
        std::thread::spawn(move || pump_stdin(&writer, v5, tty));
    }
    let mut reader = ws::Reader::new(early);
    let mut status = Vec::new();
    let (mut out, mut err) = (io::stdout(), io::stderr());
    loop {
        let msg = match reader.next(&mut conn, &writer) {
            Ok(Some(m)) => m,
            Ok(None) => break,
            Err(e) => {
                drop(raw);
                return Err(format!("the runtime's stream: {e}"));
            }
        };
        let Some((&channel, data)) = msg.split_first() else {
            continue;
        };
        let _ = match channel {
            1 => out.write_all(data).and_then(|()| out.flush()),
            2 => err.write_all(data).and_then(|()| err.flush()),
            3 => {
                status.extend_from_slice(data);
                Ok(())
            }
            _ => Ok(()),
        };
    }
    drop(raw);
    exit_code(&status)
}

/// Passes stdin on until it ends; then closes the stream where the protocol can say so.
fn pump_stdin(writer: &Mutex<TcpStream>, v5: bool, tty: bool) {
    let mut buf = vec![0u8; 16 * 1024];
    let mut input = io::stdin().lock();
    loop {
        match input.read(&mut buf) {
            Ok(0) | Err(_) => break,
            Ok(n) => {
                if ws::send(writer, 0, &buf[..n]).is_err() {
                    return;
                }
            }
        }
    }
    if v5 {
        // v5's close signal: stream 255 naming the stream that ends.
        let _ = ws::send(writer, 255, &[0]);
    } else if !tty {
        eprintln!(
            "picolet exec: end of input not passed on: the runtime speaks {} only, which cannot \
             close a stream (the command keeps reading; stop it with Ctrl-C)",
            ws::V4
        );
    }
}

/// The exit code in the runtime's final status (a `metav1.Status`): 0 for `Success`, the
/// `ExitCode` cause for a command that failed, an error for anything else.
fn exit_code(status: &[u8]) -> Result<i32, String> {
    if status.is_empty() {
        return Err("the runtime closed the stream without a status".into());
    }
    let v: serde_json::Value = serde_json::from_slice(status).map_err(|e| {
        format!(
            "the runtime's status is not JSON ({e}): {}",
            String::from_utf8_lossy(status)
        )
    })?;
    if v["status"] == "Success" {
        return Ok(0);
    }
    let code = v["details"]["causes"].as_array().and_then(|causes| {
        causes
            .iter()
            .find(|c| c["reason"] == "ExitCode")
            .and_then(|c| c["message"].as_str()?.parse::<i32>().ok())
    });
    code.ok_or_else(|| {
        v["message"]
            .as_str()
            .map_or_else(|| v.to_string(), str::to_owned)
    })
}

/// The WebSocket client side (RFC 6455) the streaming server needs: the upgrade, masked
/// binary messages out, messages in (with ping answered and fragments joined).
mod ws {
    use std::io::{self, Read, Write};
    use std::net::TcpStream;
    use std::sync::Mutex;

    pub const V5: &str = "v5.channel.k8s.io";
    pub const V4: &str = "v4.channel.k8s.io";
    const MAX_MESSAGE: usize = 16 << 20;

    fn base64(data: &[u8]) -> String {
        const A: &[u8; 64] = b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
        let mut s = String::new();
        for chunk in data.chunks(3) {
            let b = [
                chunk[0],
                *chunk.get(1).unwrap_or(&0),
                *chunk.get(2).unwrap_or(&0),
            ];
            let n = (u32::from(b[0]) << 16) | (u32::from(b[1]) << 8) | u32::from(b[2]);
            for i in 0..4 {
                if i <= chunk.len() {
                    s.push(char::from(A[((n >> (18 - 6 * i)) & 63) as usize]));
                } else {
                    s.push('=');
                }
            }
        }
        s
    }

    fn random(buf: &mut [u8]) {
        if std::fs::File::open("/dev/urandom")
            .and_then(|mut f| f.read_exact(buf))
            .is_err()
        {
            // No /dev/urandom: the clock's nanoseconds, which only need to differ per session.
            let t = std::time::SystemTime::now()
                .duration_since(std::time::UNIX_EPOCH)
                .map_or(0, |d| d.as_nanos())
                .to_le_bytes();
            for (b, t) in buf.iter_mut().zip(t.iter().cycle()) {
                *b = *t;
            }
        }
    }

    /// Opens the session at `url` (`http://host:port/path`); returns the connection, the
    /// protocol the server chose, and any bytes that came after its answer.
    pub fn connect(url: &str) -> Result<(TcpStream, String, Vec<u8>), String> {
        let rest = url.strip_prefix("http://").ok_or_else(|| {
            format!("the runtime's streaming URL {url:?} is not http:// (TLS streaming servers are not spoken)")
        })?;
        let (host, path) = rest.split_at(rest.find('/').unwrap_or(rest.len()));
        let path = if path.is_empty() { "/" } else { path };
        let mut conn =
            TcpStream::connect(host).map_err(|e| format!("connecting to {host}: {e}"))?;
        // Keystrokes go out one by one, not held for the previous one's ACK.
        conn.set_nodelay(true).ok();
        let mut key = [0u8; 16];
        random(&mut key);
        let key = base64(&key);
        let head = format!(
            "GET {path} HTTP/1.1\r\nHost: {host}\r\nUpgrade: websocket\r\nConnection: Upgrade\r\n\
             Sec-WebSocket-Key: {key}\r\nSec-WebSocket-Version: 13\r\n\
             Sec-WebSocket-Protocol: {V5}, {V4}\r\n\r\n"
        );
        conn.write_all(head.as_bytes())
            .map_err(|e| format!("{host}: {e}"))?;
        let mut buf = Vec::new();
        let mut chunk = [0u8; 4096];
        let end = loop {
            if let Some(i) = buf.windows(4).position(|w| w == b"\r\n\r\n") {
                break i + 4;
            }
            if buf.len() > 64 * 1024 {
                return Err(format!("{host}: an answer head over 64 KiB"));
            }
            let n = conn.read(&mut chunk).map_err(|e| format!("{host}: {e}"))?;
            if n == 0 {
                return Err(format!("{host} closed the connection before answering"));
            }
            buf.extend_from_slice(&chunk[..n]);
        };
        let head = String::from_utf8_lossy(&buf[..end]).into_owned();
        let status = head.lines().next().unwrap_or("");
        if !status.starts_with("HTTP/1.1 101") {
            let body = String::from_utf8_lossy(&buf[end..]);
            return Err(format!(
                "the runtime refused the session: {status} {}",
                body.trim()
            ));
        }
        let protocol = head
            .lines()
            .find_map(|l| {
                let (k, v) = l.split_once(':')?;
                k.trim()
                    .eq_ignore_ascii_case("sec-websocket-protocol")
                    .then(|| v.trim().to_owned())
            })
            .unwrap_or_default();
        if protocol != V5 && protocol != V4 {
            return Err(format!(
                "the runtime's streaming server chose protocol {protocol:?}, not {V5} or {V4}"
            ));
        }
        Ok((conn, protocol, buf[end..].to_vec()))
    }

    #[allow(
        clippy::cast_possible_truncation,
        reason = "each length is cast in the arm whose range fits the type"
    )]
    fn frame(opcode: u8, payload: &[u8]) -> Vec<u8> {
        let mut f = Vec::with_capacity(payload.len() + 14);
        f.push(0x80 | opcode);
        match payload.len() {
            n if n < 126 => f.push(0x80 | n as u8),
            n if n <= 0xffff => {
                f.push(0x80 | 126);
                f.extend_from_slice(&(n as u16).to_be_bytes());
            }
            n => {
                f.push(0x80 | 127);
                f.extend_from_slice(&(n as u64).to_be_bytes());
            }
        }
        let mut mask = [0u8; 4];
        random(&mut mask);
        f.extend_from_slice(&mask);
        f.extend(payload.iter().enumerate().map(|(i, b)| b ^ mask[i % 4]));
        f
    }

    /// Sends one binary message on `channel`.
    pub fn send(w: &Mutex<TcpStream>, channel: u8, data: &[u8]) -> io::Result<()> {
        let mut payload = Vec::with_capacity(data.len() + 1);
        payload.push(channel);
        payload.extend_from_slice(data);
        let f = frame(0x2, &payload);
        w.lock()
            .map_err(|_| io::Error::other("writer poisoned"))?
            .write_all(&f)
    }

    /// Reads messages from a connection, starting with bytes already read.
    pub struct Reader {
        buf: Vec<u8>,
    }

    impl Reader {
        pub fn new(early: Vec<u8>) -> Self {
            Reader { buf: early }
        }

        fn fill(&mut self, conn: &mut TcpStream, want: usize) -> io::Result<bool> {
            let mut chunk = [0u8; 16 * 1024];
            while self.buf.len() < want {
                let n = conn.read(&mut chunk)?;
                if n == 0 {
                    return Ok(false);
                }
                self.buf.extend_from_slice(&chunk[..n]);
            }
            Ok(true)
        }

        /// The next whole message (its payload), or `None` once the server closed.
        pub fn next(
            &mut self,
            conn: &mut TcpStream,
            w: &Mutex<TcpStream>,
        ) -> io::Result<Option<Vec<u8>>> {
            let mut message = Vec::new();
            loop {
                if !self.fill(conn, 2)? {
                    return Ok(None);
                }
                let (fin, opcode) = (self.buf[0] & 0x80 != 0, self.buf[0] & 0x0f);
                let masked = self.buf[1] & 0x80 != 0;
                let (len, mut at) = match self.buf[1] & 0x7f {
                    126 => {
                        if !self.fill(conn, 4)? {
                            return Ok(None);
                        }
                        (
                            usize::from(u16::from_be_bytes([self.buf[2], self.buf[3]])),
                            4,
                        )
                    }
                    127 => {
                        if !self.fill(conn, 10)? {
                            return Ok(None);
                        }
                        let mut b = [0u8; 8];
                        b.copy_from_slice(&self.buf[2..10]);
                        (
                            usize::try_from(u64::from_be_bytes(b)).unwrap_or(usize::MAX),
                            10,
                        )
                    }
                    n => (usize::from(n), 2),
                };
                if len > MAX_MESSAGE || message.len() + len > MAX_MESSAGE {
                    return Err(io::Error::other("a message over 16 MiB"));
                }
                let mask_at = at;
                if masked {
                    at += 4;
                }
                if !self.fill(conn, at + len)? {
                    return Ok(None);
                }
                let mut payload = self.buf[at..at + len].to_vec();
                if masked {
                    let m = [
                        self.buf[mask_at],
                        self.buf[mask_at + 1],
                        self.buf[mask_at + 2],
                        self.buf[mask_at + 3],
                    ];
                    for (i, b) in payload.iter_mut().enumerate() {
                        *b ^= m[i % 4];
                    }
                }
                self.buf.drain(..at + len);
                match opcode {
                    0x8 => {
                        let _ = w.lock().map(|mut c| {
                            c.write_all(&frame(0x8, &payload[..payload.len().min(2)]))
                        });
                        return Ok(None);
                    }
                    0x9 => {
                        let _ = w.lock().map(|mut c| c.write_all(&frame(0xA, &payload)));
                    }
                    0xA => {}
                    _ => {
                        message.extend_from_slice(&payload);
                        if fin {
                            return Ok(Some(message));
                        }
                    }
                }
            }
        }
    }

    #[cfg(test)]
    mod tests {
        use super::*;

        #[test]
        fn base64_as_rfc_4648() {
            assert_eq!(base64(b""), "");
            assert_eq!(base64(b"f"), "Zg==");
            assert_eq!(base64(b"fo"), "Zm8=");
            assert_eq!(base64(b"foo"), "Zm9v");
            assert_eq!(base64(b"foobar"), "Zm9vYmFy");
        }

        #[test]
        fn frames_are_masked_with_the_length_in_its_form() {
            for (n, head) in [(5usize, 2usize), (200, 4), (70_000, 10)] {
                let f = frame(0x2, &vec![7u8; n]);
                assert_eq!(f[0], 0x82);
                assert_eq!(f[1] & 0x80, 0x80, "client frames are masked");
                assert_eq!(f.len(), head + 4 + n);
                let mask = &f[head..head + 4];
                assert!(
                    f[head + 4..]
                        .iter()
                        .enumerate()
                        .all(|(i, b)| b ^ mask[i % 4] == 7)
                );
            }
        }
    }
}

/// The local terminal: raw mode while a shell runs, and its size.
mod terminal {
    use nix::sys::termios::{self, SetArg, Termios};

    /// Restores the terminal's settings when dropped.
    pub struct Raw(Termios);

    impl Raw {
        pub fn enter() -> Option<Raw> {
            let stdin = std::io::stdin();
            let saved = termios::tcgetattr(&stdin).ok()?;
            let mut raw = saved.clone();
            termios::cfmakeraw(&mut raw);
            termios::tcsetattr(&stdin, SetArg::TCSANOW, &raw).ok()?;
            Some(Raw(saved))
        }
    }

    impl Drop for Raw {
        fn drop(&mut self) {
            let _ = termios::tcsetattr(std::io::stdin(), SetArg::TCSANOW, &self.0);
        }
    }

    /// Columns and rows of the terminal on stdin or stdout, if either is one.
    #[allow(
        unsafe_code,
        reason = "TIOCGWINSZ has no safe wrapper in the crates linked"
    )]
    pub fn size() -> Option<(u16, u16)> {
        for fd in [0, 1] {
            let mut ws = nix::libc::winsize {
                ws_row: 0,
                ws_col: 0,
                ws_xpixel: 0,
                ws_ypixel: 0,
            };
            // SAFETY: TIOCGWINSZ writes one winsize into the struct it is given.
            let r = unsafe { nix::libc::ioctl(fd, nix::libc::TIOCGWINSZ, &raw mut ws) };
            if r == 0 && ws.ws_col > 0 {
                return Some((ws.ws_col, ws.ws_row));
            }
        }
        None
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn args(v: &[&str]) -> Vec<String> {
        v.iter().map(|s| (*s).to_owned()).collect()
    }

    #[test]
    fn arguments_as_kubectl_exec_takes_them() {
        let a = parse(&args(&[
            "web-node", "-it", "-c", "app", "--", "sh", "-c", "id",
        ]))
        .unwrap();
        assert_eq!(
            (a.pod.as_str(), a.container.as_deref(), a.stdin, a.tty),
            ("web-node", Some("app"), true, true)
        );
        assert_eq!(a.command, ["sh", "-c", "id"]);
        assert_eq!(a.endpoint, cri::DEFAULT_ENDPOINT);
        let a = parse(&args(&[
            "-n",
            "kube-system",
            "x",
            "--container-runtime-endpoint=unix:///run/k3s.sock",
            "--",
            "-c",
        ]))
        .unwrap();
        assert_eq!(a.namespace, "kube-system");
        assert_eq!(a.command, ["-c"], "everything after -- is the command");
        assert_eq!(a.endpoint, "unix:///run/k3s.sock");
        assert!(!a.stdin && !a.tty);
    }

    #[test]
    fn a_missing_command_or_pod_is_named() {
        let e = parse(&args(&["web"])).unwrap_err().to_string();
        assert!(e.contains("needs a command after `--`"), "{e}");
        let e = parse(&args(&["--", "true"])).unwrap_err().to_string();
        assert!(e.contains("exec needs a pod"), "{e}");
        let e = parse(&args(&["web", "true"])).unwrap_err().to_string();
        assert!(e.contains("before `--`"), "{e}");
        let e = parse(&args(&["web", "--bogus", "--", "true"]))
            .unwrap_err()
            .to_string();
        assert!(e.contains("--bogus"), "{e}");
        let e = parse(&args(&[
            "web",
            "--container-runtime-endpoint",
            "tcp://x",
            "--",
            "true",
        ]))
        .unwrap_err()
        .to_string();
        assert!(e.contains("tcp://x"), "{e}");
    }

    #[test]
    fn the_exit_code_comes_from_the_final_status() {
        assert_eq!(exit_code(br#"{"metadata":{},"status":"Success"}"#), Ok(0));
        let failed = br#"{"metadata":{},"status":"Failure","message":"command terminated with non-zero exit code: error executing command [sh -c exit 3], exit code 3","reason":"NonZeroExitCode","details":{"causes":[{"reason":"ExitCode","message":"3"}]}}"#;
        assert_eq!(exit_code(failed), Ok(3));
        let e = exit_code(br#"{"status":"Failure","message":"executable not found"}"#);
        assert_eq!(e, Err("executable not found".into()));
        assert!(exit_code(b"").is_err());
        assert!(exit_code(b"not json").unwrap_err().contains("not JSON"));
    }
}
