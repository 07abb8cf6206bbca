//! `picolet logs POD [CONTAINER]`: an operator's `kubectl logs` on the device, through the
//! local API (`/containerLogs`), so it works with no cluster and no network. A plain HTTP/1.0
//! request over a TCP socket: the answer streams until picolet closes it.

use std::io::{self, BufRead, BufReader, Read, Write};
use std::net::{IpAddr, SocketAddr, TcpStream};
use std::path::Path;
use std::time::Duration;

use crate::cli::options::{self, OptionsError};

/// What `picolet logs` was asked for.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LogsArgs {
    pub namespace: String,
    pub pod: String,
    pub container: Option<String>,
    pub tail: Option<i64>,
    pub since: Option<Duration>,
    pub since_time: Option<String>,
    pub timestamps: bool,
    pub previous: bool,
    pub limit_bytes: Option<i64>,
    pub follow: bool,
    /// picolet's local API.
    pub addr: SocketAddr,
}

pub const USAGE: &str = "\
usage: picolet logs POD [CONTAINER] [flags]

Prints a container's log through picolet's local API (as kubectl logs does).

flags:
  -n, --namespace NS          the pod's namespace (default \"default\")
      --tail N                only the last N lines (default -1: all)
      --since DUR             only lines newer than this (5s, 2m, 3h)
      --since-time TIME       only lines at or after this RFC 3339 time
      --timestamps            prefix each line with its time
  -p, --previous              the previous instance of the container (before its restart)
      --limit-bytes N         at most N bytes
  -f, --follow                keep streaming new lines until the container stops
      --healthz-port PORT     picolet's local API port (default 10248)
      --healthz-bind-address IP  its address (default 127.0.0.1)
      --config FILE           take both from this KubeletConfiguration
";

use crate::cli::options::bad;

/// Parses the arguments after `logs`.
pub fn parse(args: &[String]) -> Result<LogsArgs, OptionsError> {
    let mut positional = Vec::new();
    let mut a = LogsArgs {
        namespace: "default".into(),
        pod: String::new(),
        container: None,
        tail: None,
        since: None,
        since_time: None,
        timestamps: false,
        previous: false,
        limit_bytes: None,
        follow: false,
        addr: SocketAddr::new(IpAddr::from([127, 0, 0, 1]), 10248),
    };
    let (mut port, mut bind, mut config) = (None, None, None);
    let mut i = 0;
    while i < args.len() {
        let arg = &args[i];
        i += 1;
        if !arg.starts_with('-') || arg == "-" {
            positional.push(arg.clone());
            continue;
        }
        let (name, inline) = match arg.split_once('=') {
            Some((n, v)) => (n, Some(v.to_owned())),
            None => (arg.as_str(), None),
        };
        // Switches: a bare flag is true; `--flag=false` is allowed.
        match name {
            "--timestamps" => a.timestamps = options::switch(name, inline.as_deref())?,
            "-p" | "--previous" => a.previous = options::switch(name, inline.as_deref())?,
            "-f" | "--follow" => a.follow = options::switch(name, inline.as_deref())?,
            "-h" | "--help" => return Err(OptionsError::Unexpected("--help".into())),
            "-n"
            | "--namespace"
            | "--tail"
            | "--since"
            | "--since-time"
            | "--limit-bytes"
            | "--healthz-port"
            | "--healthz-bind-address"
            | "--config" => {
                let v = options::flag_value(args, &mut i, name, inline)?;
                match name {
                    "-n" | "--namespace" => a.namespace = v,
                    "--tail" => {
                        let n: i64 = v.parse().map_err(|_| bad(name, &v, "not an integer"))?;
                        a.tail = (n >= 0).then_some(n);
                    }
                    "--since" => {
                        let d = crate::api::parse_duration(&v).map_err(|r| bad(name, &v, r))?;
                        if d.is_zero() {
                            return Err(bad(name, &v, "must be positive"));
                        }
                        a.since = Some(d);
                    }
                    "--since-time" => {
                        if crate::logs::format::parse_time(v.as_bytes()).is_none() {
                            return Err(bad(name, &v, "not an RFC 3339 time"));
                        }
                        a.since_time = Some(v);
                    }
                    "--limit-bytes" => {
                        let n: i64 = v.parse().map_err(|_| bad(name, &v, "not an integer"))?;
                        if n < 1 {
                            return Err(bad(name, &v, "must be greater than 0"));
                        }
                        a.limit_bytes = Some(n);
                    }
                    "--healthz-port" => {
                        port = Some(v.parse::<u16>().map_err(|_| bad(name, &v, "not a port"))?)
                    }
                    "--healthz-bind-address" => {
                        bind = Some(
                            v.parse::<IpAddr>()
                                .map_err(|_| bad(name, &v, "not an IP address"))?,
                        )
                    }
                    _ => config = Some(v),
                }
            }
            _ => return Err(OptionsError::UnknownFlag(name.to_owned())),
        }
    }
    if a.since.is_some() && a.since_time.is_some() {
        return Err(bad(
            "--since",
            "",
            "only one of --since and --since-time may be given",
        ));
    }
    let mut pos = positional.into_iter();
    a.pod = pos
        .next()
        .ok_or_else(|| OptionsError::MissingValue("logs POD".into()))?;
    a.container = pos.next();
    if let Some(extra) = pos.next() {
        return Err(OptionsError::Unexpected(extra));
    }
    if let Some(c) = config {
        let mut o = options::Options::default();
        crate::cli::parse::load_config(Path::new(&c), &mut o)?;
        a.addr = SocketAddr::new(o.healthz_bind_address, o.healthz_port);
    }
    if let Some(p) = port {
        a.addr.set_port(p);
    }
    if let Some(b) = bind {
        a.addr.set_ip(b);
    }
    // An API bound to every address answers on loopback.
    if a.addr.ip().is_unspecified() {
        a.addr.set_ip(if a.addr.is_ipv4() {
            IpAddr::from([127, 0, 0, 1])
        } else {
            IpAddr::from(std::net::Ipv6Addr::LOCALHOST)
        });
    }
    if a.addr.port() == 0 {
        return Err(bad("--healthz-port", "0", "the local API is disabled"));
    }
    Ok(a)
}

fn escape(s: &str) -> String {
    let mut out = String::new();
    for b in s.bytes() {
        if b.is_ascii_alphanumeric() || matches!(b, b'-' | b'.' | b'_' | b'~') {
            out.push(char::from(b));
        } else {
            out.push_str(&format!("%{b:02X}"));
        }
    }
    out
}

/// The request path for a container.
pub fn request_path(a: &LogsArgs, container: &str) -> String {
    let mut q = Vec::new();
    if let Some(t) = a.tail {
        q.push(format!("tailLines={t}"));
    }
    if let Some(d) = a.since {
        // kubectl rounds up to whole seconds.
        let s = d.as_secs() + u64::from(d.subsec_nanos() > 0);
        q.push(format!("sinceSeconds={s}"));
    }
    if let Some(t) = &a.since_time {
        q.push(format!("sinceTime={}", escape(t)));
    }
    if a.timestamps {
        q.push("timestamps=true".into());
    }
    if a.previous {
        q.push("previous=true".into());
    }
    if let Some(n) = a.limit_bytes {
        q.push(format!("limitBytes={n}"));
    }
    if a.follow {
        q.push("follow=true".into());
    }
    let mut p = format!(
        "/containerLogs/{}/{}/{}",
        escape(&a.namespace),
        escape(&a.pod),
        escape(container)
    );
    if !q.is_empty() {
        p.push('?');
        p.push_str(&q.join("&"));
    }
    p
}

/// Sends a GET; returns the status code and the reader positioned at the body.
fn get(addr: SocketAddr, path: &str) -> Result<(u16, BufReader<TcpStream>), String> {
    let s = TcpStream::connect_timeout(&addr, Duration::from_secs(5)).map_err(|e| {
        format!(
            "cannot reach picolet's local API at {addr}: {e}; is picolet running? (give \
             --healthz-port/--healthz-bind-address or --config as picolet runs with)"
        )
    })?;
    let mut w = &s;
    write!(
        w,
        "GET {path} HTTP/1.0\r\nHost: {addr}\r\nUser-Agent: picolet-logs\r\n\r\n"
    )
    .map_err(|e| format!("sending the request to {addr}: {e}"))?;
    let mut r = BufReader::new(s);
    let mut status = String::new();
    r.read_line(&mut status)
        .map_err(|e| format!("reading the answer of {addr}: {e}"))?;
    let code = status
        .split_whitespace()
        .nth(1)
        .and_then(|c| c.parse().ok())
        .ok_or_else(|| format!("{addr} did not answer HTTP: {:?}", status.trim_end()))?;
    loop {
        let mut h = String::new();
        let n = r
            .read_line(&mut h)
            .map_err(|e| format!("reading the answer of {addr}: {e}"))?;
        if n == 0 || h == "\r\n" || h == "\n" {
            break;
        }
    }
    Ok((code, r))
}

fn body(r: &mut impl Read) -> String {
    let mut s = String::new();
    let _ = r.take(64 * 1024).read_to_string(&mut s);
    s.trim_end().to_owned()
}

/// The container to read when none is named: the only one, or the pod's
/// `kubectl.kubernetes.io/default-container`.
fn default_container(a: &LogsArgs) -> Result<String, String> {
    let (code, mut r) = get(a.addr, "/pods")?;
    if code != 200 {
        return Err(format!("/pods: {code}: {}", body(&mut r)));
    }
    let mut raw = Vec::new();
    r.read_to_end(&mut raw)
        .map_err(|e| format!("reading /pods: {e}"))?;
    // An untyped walk of the PodList: decoding it into the Pod structs would link a second
    // copy of their whole deserializer (JSON beside YAML) into the binary.
    let list: serde_json::Value =
        serde_json::from_slice(&raw).map_err(|e| format!("decoding /pods: {e}"))?;
    let pod = list["items"]
        .as_array()
        .into_iter()
        .flatten()
        .find(|p| {
            p["metadata"]["namespace"] == a.namespace.as_str()
                && p["metadata"]["name"] == a.pod.as_str()
        })
        .ok_or_else(|| format!("pods {:?} not found in namespace {:?}", a.pod, a.namespace))?;
    if let Some(c) =
        pod["metadata"]["annotations"]["kubectl.kubernetes.io/default-container"].as_str()
    {
        return Ok(c.to_owned());
    }
    let names: Vec<&str> = pod["spec"]["containers"]
        .as_array()
        .into_iter()
        .flatten()
        .filter_map(|c| c["name"].as_str())
        .collect();
    match names.as_slice() {
        [one] => Ok((*one).to_owned()),
        cs => Err(format!(
            "a container name must be specified for pod {}, choose one of: [{}]",
            a.pod,
            cs.join(" ")
        )),
    }
}

/// Prints the log to `out`.
pub fn run(a: &LogsArgs, out: &mut dyn Write) -> Result<(), String> {
    let container = match &a.container {
        Some(c) => c.clone(),
        None => default_container(a)?,
    };
    let (code, mut r) = get(a.addr, &request_path(a, &container))?;
    if code != 200 {
        return Err(body(&mut r));
    }
    let mut buf = vec![0u8; 16 * 1024];
    loop {
        let n = match r.read(&mut buf) {
            Ok(0) => return Ok(()),
            Ok(n) => n,
            Err(e) if e.kind() == io::ErrorKind::Interrupted => continue,
            Err(e) => return Err(format!("reading the log from {}: {e}", a.addr)),
        };
        match out.write_all(&buf[..n]).and_then(|()| out.flush()) {
            Ok(()) => {}
            // `picolet logs ... | head`: the reader went away.
            Err(e) if e.kind() == io::ErrorKind::BrokenPipe => return Ok(()),
            Err(e) => return Err(format!("writing the log: {e}")),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn args(s: &[&str]) -> Vec<String> {
        s.iter().map(|x| (*x).to_owned()).collect()
    }

    #[test]
    fn flags_as_kubectl_takes_them() {
        let a = parse(&args(&[
            "web-node",
            "app",
            "-n",
            "kube-system",
            "--tail=5",
            "--since",
            "90s",
            "--timestamps",
            "-p",
            "--limit-bytes",
            "100",
            "-f",
            "--healthz-port=10300",
        ]))
        .unwrap();
        assert_eq!(a.namespace, "kube-system");
        assert_eq!(
            (a.pod.as_str(), a.container.as_deref()),
            ("web-node", Some("app"))
        );
        assert_eq!(a.tail, Some(5));
        assert_eq!(a.since, Some(Duration::from_secs(90)));
        assert!(a.timestamps && a.previous && a.follow);
        assert_eq!(a.limit_bytes, Some(100));
        assert_eq!(a.addr, "127.0.0.1:10300".parse().unwrap());
        assert_eq!(
            request_path(&a, "app"),
            "/containerLogs/kube-system/web-node/app?tailLines=5&sinceSeconds=90&timestamps=true&previous=true&limitBytes=100&follow=true"
        );
        let a = parse(&args(&[
            "p",
            "--tail=-1",
            "--timestamps=false",
            "--since=1500ms",
        ]))
        .unwrap();
        assert_eq!(
            (a.tail, a.timestamps, a.container.clone()),
            (None, false, None)
        );
        assert_eq!(
            request_path(&a, "c"),
            "/containerLogs/default/p/c?sinceSeconds=2"
        );
        let a = parse(&args(&["p", "--healthz-bind-address", "0.0.0.0"])).unwrap();
        assert_eq!(a.addr, "127.0.0.1:10248".parse().unwrap());
    }

    #[test]
    fn bad_flags_are_named() {
        let e = |s: &[&str]| parse(&args(s)).unwrap_err().to_string();
        assert_eq!(e(&[]), "flag logs POD needs a value");
        assert!(e(&["p", "--tail", "x"]).contains("--tail"));
        assert!(e(&["p", "--limit-bytes=0"]).contains("--limit-bytes"));
        assert!(e(&["p", "--since=soon"]).contains("soon"));
        assert!(e(&["p", "--since-time=yesterday"]).contains("yesterday"));
        assert!(e(&["p", "--nope"]).contains("--nope"));
        assert!(e(&["p", "c", "extra"]).contains("extra"));
        assert!(e(&["p", "--follow=maybe"]).contains("maybe"));
        assert!(e(&["p", "--since=1s", "--since-time=2024-05-01T00:00:00Z"]).contains("only one"));
        assert!(e(&["p", "--healthz-port=0"]).contains("disabled"));
        assert!(e(&["p", "-n"]).contains("-n"));
    }

    #[test]
    fn a_picolet_that_is_not_running_is_said_plainly() {
        // A port nothing listens on: bind one, learn it, close it.
        let l = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        let port = l.local_addr().unwrap().port();
        drop(l);
        let a = parse(&args(&["p", "c", &format!("--healthz-port={port}")])).unwrap();
        let e = run(&a, &mut Vec::new()).unwrap_err();
        assert!(
            e.contains("cannot reach picolet's local API") && e.contains("is picolet running"),
            "{e}"
        );
    }
}
