//! `/exec`, `/attach` and `/portForward`: the runtime's streaming server does the protocol
//! work (SPDY or WebSocket, the channel protocols, tty resizes, exit codes); picolet asks it
//! for a one-time URL and proxies the client's upgrade request there, then copies bytes both
//! ways. Each direction is one task with one fixed buffer: a stream costs no thread, and a
//! client that stops reading stops the copy (the runtime's writes then wait), so memory does
//! not grow with what the container writes.

use std::rc::Rc;
use std::time::Duration;

use bytes::Bytes;
use futures_lite::{AsyncReadExt, AsyncWriteExt};
use http_body_util::{BodyExt, Full};
use hyper::{Request, Response, StatusCode};
use smol::Async;

use super::routes::Endpoint;
use super::{Error, Host, Streamed, Streams, Target, reply};
use crate::rt;

/// Bounds on what the runtime's streaming server may send before the upgrade.
const MAX_HEAD: usize = 16 * 1024;
const MAX_ERROR_BODY: usize = 64 * 1024;
const CONNECT_TIMEOUT: Duration = Duration::from_secs(10);
const HEAD_TIMEOUT: Duration = Duration::from_secs(30);

/// The query's values of one name, in order (`command=ls&command=-l`).
fn query_values<'a>(query: &'a str, name: &str) -> Vec<std::borrow::Cow<'a, str>> {
    query
        .split('&')
        .filter_map(|kv| {
            let (k, v) = kv.split_once('=').unwrap_or((kv, ""));
            (k == name).then(|| percent_decode(v))
        })
        .collect()
}

/// A stream flag as the apiserver sends it: `1` for on.
fn flag(query: &str, name: &str) -> bool {
    query_values(query, name).first().is_some_and(|v| v == "1")
}

fn percent_decode(s: &str) -> std::borrow::Cow<'_, str> {
    if !s.contains(['%', '+']) {
        return s.into();
    }
    let b = s.as_bytes();
    let mut out = Vec::with_capacity(b.len());
    let mut i = 0;
    while i < b.len() {
        match b[i] {
            b'+' => out.push(b' '),
            b'%' if i + 2 < b.len() => {
                let hex = |c: u8| char::from(c).to_digit(16);
                match (hex(b[i + 1]), hex(b[i + 2])) {
                    (Some(h), Some(l)) => {
                        out.push(u8::try_from(h * 16 + l).unwrap_or(b'?'));
                        i += 2;
                    }
                    _ => out.push(b'%'),
                }
            }
            c => out.push(c),
        }
        i += 1;
    }
    String::from_utf8_lossy(&out).into_owned().into()
}

/// Which streams the query asks for, in the apiserver's parameter names (`input`, `output`,
/// `error`, `tty`).
fn streams(query: &str) -> Streams {
    Streams {
        stdin: flag(query, "input"),
        stdout: flag(query, "output"),
        stderr: flag(query, "error"),
        tty: flag(query, "tty"),
    }
}

/// `{ns}/{pod}/{container}` or `{ns}/{pod}/{uid}/{container}`.
fn target(rest: &str) -> Option<Target<'_>> {
    let parts: Vec<&str> = rest.split('/').collect();
    let t = match parts.as_slice() {
        [ns, pod, c] => Target {
            namespace: ns,
            pod,
            uid: None,
            container: c,
        },
        [ns, pod, uid, c] => Target {
            namespace: ns,
            pod,
            uid: Some(uid),
            container: c,
        },
        _ => return None,
    };
    (!t.namespace.is_empty() && !t.pod.is_empty() && !t.container.is_empty()).then_some(t)
}

/// What a streaming request asks for, read from its path and query: the host is asked for
/// the runtime's URL only once this parsed.
#[derive(Debug, PartialEq, Eq)]
enum Ask<'a> {
    Exec(Target<'a>, Vec<String>, Streams),
    Attach(Target<'a>, Streams),
    PortForward {
        namespace: &'a str,
        pod: &'a str,
        uid: Option<&'a str>,
        ports: Vec<i32>,
    },
    Run(Target<'a>, Vec<String>),
}

/// Reads `path` (`/exec/...` and so on) and `query` as `endpoint` takes them; `upgrade` tells
/// whether the client asked to upgrade the connection, as exec, attach and port-forward need.
fn parse<'a>(
    endpoint: Endpoint,
    path: &'a str,
    query: &str,
    upgrade: bool,
) -> Result<Ask<'a>, Error> {
    let bad = |m: &str| Err(Error::BadRequest(m.to_owned()));
    let rest = path
        .trim_start_matches('/')
        .split_once('/')
        .map_or("", |(_, r)| r);
    match endpoint {
        Endpoint::Exec | Endpoint::Attach => {
            let Some(t) = target(rest) else {
                return bad("expected /{exec|attach}/{namespace}/{pod}[/{uid}]/{container}");
            };
            let s = streams(query);
            if !(s.stdin || s.stdout || s.stderr) {
                return bad("you must specify at least 1 of stdin, stdout, stderr");
            }
            if !upgrade {
                return bad("Upgrade request required");
            }
            if endpoint == Endpoint::Attach {
                return Ok(Ask::Attach(t, s));
            }
            let cmd: Vec<String> = query_values(query, "command")
                .into_iter()
                .map(std::borrow::Cow::into_owned)
                .collect();
            if cmd.is_empty() {
                return bad("you must specify a command");
            }
            Ok(Ask::Exec(t, cmd, s))
        }
        Endpoint::PortForward => {
            let parts: Vec<&str> = rest.split('/').collect();
            let (namespace, pod, uid) = match parts.as_slice() {
                [ns, pod] => (*ns, *pod, None),
                [ns, pod, uid] => (*ns, *pod, Some(*uid)),
                _ => return bad("expected /portForward/{namespace}/{pod}[/{uid}]"),
            };
            if !upgrade {
                return bad("Upgrade request required");
            }
            let ports: Result<Vec<i32>, _> = query_values(query, "port")
                .iter()
                .flat_map(|v| v.split(',').map(str::to_owned).collect::<Vec<_>>())
                .map(|p| p.trim().parse::<u16>().map(i32::from))
                .collect();
            let Ok(ports) = ports else {
                return bad("invalid port in the query");
            };
            Ok(Ask::PortForward {
                namespace,
                pod,
                uid,
                ports,
            })
        }
        Endpoint::Run => {
            let Some(t) = target(rest) else {
                return bad("expected /run/{namespace}/{pod}[/{uid}]/{container}?cmd=...");
            };
            let cmd: Vec<String> = query_values(query, "cmd")
                .iter()
                .flat_map(|c| c.split_whitespace().map(str::to_owned).collect::<Vec<_>>())
                .collect();
            if cmd.is_empty() {
                return bad("you must specify a command (cmd)");
            }
            Ok(Ask::Run(t, cmd))
        }
        _ => Err(Error::no_route()),
    }
}

/// Answers `/exec/...`, `/attach/...` and `/portForward/...` by proxying the upgrade to the
/// URL the host names, and `/run/...` with what the command wrote.
pub async fn answer<B>(
    host: &dyn Host,
    endpoint: Endpoint,
    req: Request<B>,
) -> Result<Response<Streamed>, Error> {
    let path = req.uri().path().to_owned();
    let query = req.uri().query().unwrap_or("").to_owned();
    let url = match parse(endpoint, &path, &query, is_upgrade(&req))? {
        Ask::Exec(t, cmd, s) => host.exec_url(t, cmd, s).await?,
        Ask::Attach(t, s) => host.attach_url(t, s).await?,
        Ask::PortForward {
            namespace,
            pod,
            uid,
            ports,
        } => host.port_forward_url(namespace, pod, uid, ports).await?,
        Ask::Run(t, cmd) => {
            let out = host.run(t, cmd).await?;
            return Ok(
                reply(StatusCode::OK, "text/plain; charset=utf-8", out).map(BodyExt::boxed_unsync)
            );
        }
    };
    proxy(req, &url).await
}

fn is_upgrade<B>(req: &Request<B>) -> bool {
    req.headers()
        .get_all(hyper::header::CONNECTION)
        .iter()
        .filter_map(|v| v.to_str().ok())
        .flat_map(|v| v.split(','))
        .any(|t| t.trim().eq_ignore_ascii_case("upgrade"))
        && req.headers().contains_key(hyper::header::UPGRADE)
}

/// `http://host:port/path?query` of the runtime's streaming server, split.
fn split_url(url: &str) -> Result<(String, String), Error> {
    let rest = url.strip_prefix("http://").ok_or_else(|| {
        Error::internal(format!("streaming URL {url:?}: only http:// is supported"))
    })?;
    let (authority, path) = match rest.find('/') {
        Some(i) => (&rest[..i], &rest[i..]),
        None => (rest, "/"),
    };
    if authority.is_empty() {
        return Err(Error::internal(format!(
            "streaming URL {url:?} names no host"
        )));
    }
    Ok((authority.to_owned(), path.to_owned()))
}

/// One response head: status code, headers, and the bytes read after it.
struct Head {
    code: u16,
    headers: Headers,
    rest: Vec<u8>,
}

type Headers = Vec<(String, String)>;

/// A response head's length, status code and headers, once `buf` holds all of it.
fn parse_head(buf: &[u8]) -> Option<(usize, u16, Headers)> {
    let end = buf.windows(4).position(|w| w == b"\r\n\r\n")?;
    let text = std::str::from_utf8(&buf[..end]).ok()?;
    let mut lines = text.split("\r\n");
    let status = lines.next()?;
    let code: u16 = status.split(' ').nth(1)?.parse().ok()?;
    let headers = lines
        .filter_map(|l| l.split_once(':'))
        .map(|(k, v)| (k.trim().to_owned(), v.trim().to_owned()))
        .collect();
    Some((end + 4, code, headers))
}

async fn read_head(conn: &Async<std::net::TcpStream>) -> Result<Head, Error> {
    let mut buf = Vec::new();
    let mut chunk = [0u8; 4096];
    loop {
        let n = (&*conn)
            .read(&mut chunk)
            .await
            .map_err(|e| Error::BadGateway(format!("reading the runtime's answer: {e}")))?;
        if n == 0 {
            return Err(Error::BadGateway(
                "the runtime's streaming server closed the connection".into(),
            ));
        }
        buf.extend_from_slice(&chunk[..n]);
        if let Some((len, code, headers)) = parse_head(&buf) {
            return Ok(Head {
                code,
                headers,
                rest: buf[len..].to_vec(),
            });
        }
        if buf.len() > MAX_HEAD {
            return Err(Error::BadGateway(format!(
                "the runtime's answer head is over {MAX_HEAD} bytes"
            )));
        }
    }
}

/// Sends the client's request to `url` on the runtime's streaming server and, once the server
/// switches protocols, copies both ways until both ends are done.
async fn proxy<B>(mut req: Request<B>, url: &str) -> Result<Response<Streamed>, Error> {
    let (authority, path) = split_url(url)?;
    let connect = async {
        let addrs: Vec<std::net::SocketAddr> = {
            let a = authority.clone();
            rt::unblock(move || std::net::ToSocketAddrs::to_socket_addrs(&a).map(Iterator::collect))
                .await
                .map_err(|e| Error::BadGateway(format!("resolving {authority}: {e}")))?
        };
        let addr = addrs
            .first()
            .copied()
            .ok_or_else(|| Error::BadGateway(format!("resolving {authority}: no address")))?;
        let c = Async::<std::net::TcpStream>::connect(addr)
            .await
            .map_err(|e| {
                Error::BadGateway(format!(
                    "connecting to the runtime's streaming server {addr}: {e}"
                ))
            })?;
        c.get_ref().set_nodelay(true).ok();
        Ok::<_, Error>(c)
    };
    let conn = rt::timeout(CONNECT_TIMEOUT, connect)
        .await
        .map_err(|_| Error::GatewayTimeout(format!("connecting to {authority}: timed out")))??;
    let conn = Rc::new(conn);
    let mut head = format!("{} {path} HTTP/1.1\r\nHost: {authority}\r\n", req.method());
    for (k, v) in req.headers() {
        // The client's credentials were for picolet; the runtime gets none of them.
        if k == hyper::header::HOST || k == hyper::header::AUTHORIZATION {
            continue;
        }
        if let Ok(v) = v.to_str() {
            head.push_str(&format!("{k}: {v}\r\n"));
        }
    }
    head.push_str("\r\n");
    (&*conn).write_all(head.as_bytes()).await.map_err(|e| {
        Error::BadGateway(format!("writing to the runtime's streaming server: {e}"))
    })?;
    let answer = rt::timeout(HEAD_TIMEOUT, read_head(&conn))
        .await
        .map_err(|_| {
            Error::GatewayTimeout("the runtime's streaming server did not answer".into())
        })??;
    let bad_answer = |_| Error::BadGateway("bad answer from the runtime's streaming server".into());
    let mut resp = Response::builder().status(answer.code);
    for (k, v) in &answer.headers {
        resp = resp.header(k.as_str(), v.as_str());
    }
    if answer.code != 101 {
        // An error before the upgrade: pass it on, bounded.
        let mut body = answer.rest;
        let mut chunk = [0u8; 4096];
        while body.len() < MAX_ERROR_BODY {
            match rt::timeout(Duration::from_secs(5), (&*conn).read(&mut chunk)).await {
                Ok(Ok(n)) if n > 0 => body.extend_from_slice(&chunk[..n]),
                _ => break,
            }
        }
        body.truncate(MAX_ERROR_BODY);
        return resp
            .body(Full::new(Bytes::from(body)).boxed_unsync())
            .map_err(bad_answer);
    }
    let on_upgrade = hyper::upgrade::on(&mut req);
    let early = answer.rest;
    rt::spawn(async move {
        let upgraded = match on_upgrade.await {
            Ok(u) => u,
            Err(e) => {
                log::debug!("streaming: the client's upgrade failed: {e}");
                return;
            }
        };
        pipe(rt::FromHyper(upgraded), conn, early).await;
    })
    .detach();
    resp.body(Full::new(Bytes::new()).boxed_unsync())
        .map_err(bad_answer)
}

/// Copies both ways: the client's bytes to the runtime until the client is done (then the
/// runtime's side is half-closed), the runtime's to the client until the runtime is done (then
/// the client's side is closed). Once the runtime is done the client has a few seconds to
/// finish.
async fn pipe<C>(client: C, runtime: Rc<Async<std::net::TcpStream>>, early: Vec<u8>)
where
    C: futures_lite::AsyncRead + futures_lite::AsyncWrite + Unpin + 'static,
{
    let (mut client_r, mut client_w) = futures_lite::io::split(client);
    let rt_up = runtime.clone();
    let up = rt::spawn(async move {
        let r = futures_lite::io::copy(&mut client_r, &mut &*rt_up).await;
        let _ = rt_up.get_ref().shutdown(std::net::Shutdown::Write);
        if let Err(e) = r {
            log::debug!("streaming: client to runtime: {e}");
        }
    });
    let down = async move {
        if !early.is_empty() && client_w.write_all(&early).await.is_err() {
            return;
        }
        if let Err(e) = futures_lite::io::copy(&mut &*runtime, &mut client_w).await {
            log::debug!("streaming: runtime to client: {e}");
        }
        let _ = client_w.close().await;
    };
    down.await;
    let _ = rt::timeout(Duration::from_secs(5), up).await;
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn queries_name_streams_commands_and_targets() {
        let q = "command=sh&command=-c&command=echo%20hi%3B+ls&input=1&output=1&error=true&tty=0";
        let cmd: Vec<String> = query_values(q, "command")
            .into_iter()
            .map(|c| c.into_owned())
            .collect();
        assert_eq!(cmd, ["sh", "-c", "echo hi; ls"]);
        assert_eq!(
            streams(q),
            Streams {
                stdin: true,
                stdout: true,
                stderr: false,
                tty: false
            }
        );
        let t = target("default/web/main").unwrap();
        assert_eq!(
            (t.namespace, t.pod, t.uid, t.container),
            ("default", "web", None, "main")
        );
        let t = target("default/web/1234/main").unwrap();
        assert_eq!(t.uid, Some("1234"));
        assert!(target("default/web").is_none());
        assert!(target("default//main").is_none());
        assert_eq!(percent_decode("a%2"), "a%2");
        assert_eq!(percent_decode("%zz"), "%zz");
    }

    #[test]
    fn urls_and_heads_of_the_streaming_server() {
        assert_eq!(
            split_url("http://127.0.0.1:4321/exec/abcd").unwrap(),
            ("127.0.0.1:4321".to_owned(), "/exec/abcd".to_owned())
        );
        assert!(split_url("https://127.0.0.1:4321/exec/abcd").is_err());
        let buf = b"HTTP/1.1 101 Switching Protocols\r\nUpgrade: SPDY/3.1\r\nX-Stream-Protocol-Version: v4.channel.k8s.io\r\n\r\nSPDY";
        let (len, code, h) = parse_head(buf).unwrap();
        assert_eq!(code, 101);
        assert_eq!(
            h[1],
            (
                "X-Stream-Protocol-Version".into(),
                "v4.channel.k8s.io".into()
            )
        );
        // What follows the head is the upgraded protocol's, passed on as it is.
        assert_eq!(&buf[len..], b"SPDY");
        assert!(parse_head(b"HTTP/1.1 101 Switching").is_none());
    }
}
