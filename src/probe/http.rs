//! The one HTTP GET that probes and lifecycle hooks make: HTTP/1.1 over a TCP connection of
//! its own, on the executor, as the kubelet's prober does it (`pkg/probe/http`): a
//! `User-Agent` of `kube-probe/<version>` (or `kube-lifecycle/...` for hooks), `Accept: */*`
//! unless the pod sets its own, the pod's headers (a `Host` header sets the request's host),
//! at most 10 KiB of the body read, redirects to the same host followed (an eleventh is an
//! error, "stopped after 10 redirects"), redirects elsewhere not followed.
//!
//! HTTPS is `tls::connect` when picolet is built with the `https-probes` feature: the
//! server's certificate is not verified, as the kubelet does not verify it either.

use std::net::SocketAddr;

use bytes::Bytes;
use http_body_util::{BodyExt, Empty};

use crate::rt;

/// Longest body read from a response (the kubelet's `maxRespBodyLength`).
pub const MAX_BODY: usize = 10 * 1024;
/// Most redirects followed.
const MAX_REDIRECTS: usize = 10;
/// The Kubernetes version picolet's User-Agent names (`kube-probe/1.33`).
pub const KUBE_VERSION: &str = "1.33";

/// Where a GET goes.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Target {
    pub https: bool,
    /// An IP address (or a name, resolved on the blocking pool).
    pub host: String,
    pub port: u16,
    /// Path and query, starting with `/`.
    pub path: String,
    pub headers: Vec<(String, String)>,
}

impl Target {
    pub fn url(&self) -> String {
        let scheme = if self.https { "https" } else { "http" };
        format!(
            "{scheme}://{}{}",
            host_port(&self.host, self.port),
            self.path
        )
    }
}

/// `host:port`, with brackets around an IPv6 address.
pub fn host_port(host: &str, port: u16) -> String {
    if host.contains(':') {
        format!("[{host}]:{port}")
    } else {
        format!("{host}:{port}")
    }
}

/// What the server answered.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Response {
    pub status: u16,
    /// At most [`MAX_BODY`] bytes.
    pub body: Vec<u8>,
    /// The response was a redirect that was not followed (to another host).
    pub unfollowed_redirect: bool,
}

/// Why a GET (or the connection a tcpSocket probe makes) failed. Each reads as Go's client
/// says it, which is what the kubelet's events and the container's status show.
#[derive(Debug)]
pub enum GetError {
    /// The host name does not resolve (`None`: it resolves to no address).
    Lookup {
        name: String,
        source: Option<std::io::Error>,
    },
    /// The TCP connection was not made.
    Connect {
        addr: SocketAddr,
        source: std::io::Error,
    },
    /// The TLS handshake failed (its message).
    #[cfg(feature = "https-probes")]
    Tls(String),
    /// `scheme: HTTPS` in a picolet built without the `https-probes` feature.
    #[cfg(not(feature = "https-probes"))]
    NoHttps,
    /// The HTTP exchange failed.
    Http(hyper::Error),
    /// The request could not be built from the pod's headers.
    Request(http::Error),
    /// The GET of `url` failed.
    Get { url: String, source: Box<GetError> },
    /// More than [`MAX_REDIRECTS`] redirects, the last to `url`.
    Redirects { url: String },
}

impl std::fmt::Display for GetError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            GetError::Lookup {
                name,
                source: Some(e),
            } => write!(f, "dial tcp: lookup {name}: {e}"),
            GetError::Lookup { name, source: None } => {
                write!(f, "dial tcp: lookup {name}: no such host")
            }
            GetError::Connect { addr, source } => {
                write!(f, "dial tcp {addr}: connect: {}", io_text(source))
            }
            #[cfg(feature = "https-probes")]
            GetError::Tls(m) => f.write_str(m),
            #[cfg(not(feature = "https-probes"))]
            GetError::NoHttps => {
                f.write_str("HTTPS needs a picolet built with the https-probes feature")
            }
            GetError::Http(e) => write!(f, "{e}"),
            GetError::Request(e) => write!(f, "{e}"),
            GetError::Get { url, source } => write!(f, "Get {url:?}: {source}"),
            GetError::Redirects { url } => {
                write!(f, "Get {url:?}: stopped after {MAX_REDIRECTS} redirects")
            }
        }
    }
}

impl std::error::Error for GetError {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        match self {
            GetError::Lookup { source, .. } => source.as_ref().map(|e| e as _),
            GetError::Connect { source, .. } => Some(source),
            GetError::Http(e) => Some(e),
            GetError::Request(e) => Some(e),
            GetError::Get { source, .. } => Some(source.as_ref()),
            #[cfg(feature = "https-probes")]
            GetError::Tls(_) => None,
            #[cfg(not(feature = "https-probes"))]
            GetError::NoHttps => None,
            GetError::Redirects { .. } => None,
        }
    }
}

/// Resolves a host to one address (IP literals without a lookup).
pub async fn resolve(host: &str, port: u16) -> Result<SocketAddr, GetError> {
    let h = host.trim_start_matches('[').trim_end_matches(']');
    if let Ok(ip) = h.parse::<std::net::IpAddr>() {
        return Ok(SocketAddr::new(ip, port));
    }
    let name = h.to_owned();
    rt::unblock(move || {
        use std::net::ToSocketAddrs;
        let found = (name.as_str(), port).to_socket_addrs();
        match found {
            Ok(mut addrs) => addrs.next().ok_or(GetError::Lookup { name, source: None }),
            Err(e) => Err(GetError::Lookup {
                name,
                source: Some(e),
            }),
        }
    })
    .await
}

/// Opens a TCP connection, with the error text Go's dialer gives.
pub async fn dial(host: &str, port: u16) -> Result<smol::Async<std::net::TcpStream>, GetError> {
    let addr = resolve(host, port).await?;
    smol::Async::<std::net::TcpStream>::connect(addr)
        .await
        .map_err(|source| GetError::Connect { addr, source })
}

/// An io error as Go prints it ("connection refused", not "Connection refused (os error 111)").
pub fn io_text(e: &std::io::Error) -> String {
    match e.kind() {
        std::io::ErrorKind::ConnectionRefused => "connection refused".into(),
        std::io::ErrorKind::ConnectionReset => "connection reset by peer".into(),
        _ => {
            let s = e.to_string();
            let s = s.split(" (os error").next().unwrap_or(&s).to_owned();
            let mut c = s.chars();
            match c.next() {
                Some(f) => f.to_lowercase().collect::<String>() + c.as_str(),
                None => s,
            }
        }
    }
}

/// GETs the target, following redirects to the same host. The caller bounds the time.
pub async fn get(t: &Target, user_agent: &str) -> Result<Response, GetError> {
    let mut path = t.path.clone();
    for _ in 0..=MAX_REDIRECTS {
        let url = Target {
            path: path.clone(),
            ..t.clone()
        }
        .url();
        let (status, location, body) =
            get_once(t, &path, user_agent)
                .await
                .map_err(|e| GetError::Get {
                    url,
                    source: Box::new(e),
                })?;
        let Some(loc) = location.filter(|_| (300..400).contains(&status)) else {
            return Ok(Response {
                status,
                body,
                unfollowed_redirect: false,
            });
        };
        match same_host_path(t, &loc) {
            Some(p) => path = p,
            None => {
                return Ok(Response {
                    status,
                    body,
                    unfollowed_redirect: true,
                });
            }
        }
    }
    let url = Target { path, ..t.clone() }.url();
    Err(GetError::Redirects { url })
}

/// The path a `Location` leads to when it stays on the target's host.
fn same_host_path(t: &Target, loc: &str) -> Option<String> {
    if loc.starts_with('/') && !loc.starts_with("//") {
        return Some(loc.to_owned());
    }
    let scheme = if t.https { "https://" } else { "http://" };
    let rest = loc.strip_prefix(scheme)?;
    let (authority, path) = match rest.find('/') {
        Some(i) => (&rest[..i], &rest[i..]),
        None => (rest, "/"),
    };
    let default_port = if t.https { 443 } else { 80 };
    let ours =
        authority == host_port(&t.host, t.port) || (t.port == default_port && authority == t.host);
    ours.then(|| path.to_owned())
}

type Reply = (u16, Option<String>, Vec<u8>);

async fn get_once(t: &Target, path: &str, user_agent: &str) -> Result<Reply, GetError> {
    let stream = dial(&t.host, t.port).await?;
    if t.https {
        #[cfg(feature = "https-probes")]
        {
            let tls = super::tls::connect(stream, &t.host)
                .await
                .map_err(GetError::Tls)?;
            return exchange(rt::HyperIo(tls), t, path, user_agent).await;
        }
        #[cfg(not(feature = "https-probes"))]
        {
            drop(stream);
            return Err(GetError::NoHttps);
        }
    }
    exchange(rt::HyperIo(stream), t, path, user_agent).await
}

async fn exchange<I>(io: I, t: &Target, path: &str, user_agent: &str) -> Result<Reply, GetError>
where
    I: hyper::rt::Read + hyper::rt::Write + Unpin + 'static,
{
    let (mut sender, conn) = hyper::client::conn::http1::handshake::<_, Empty<Bytes>>(io)
        .await
        .map_err(GetError::Http)?;
    // Dropped (and so cancelled) when this function returns.
    let _conn = rt::spawn(async move {
        let _ = conn.await;
    });
    let mut req = http::Request::get(path);
    let mut host = host_port(&t.host, t.port);
    let mut has_ua = false;
    let mut has_accept = false;
    for (k, v) in &t.headers {
        if k.eq_ignore_ascii_case("host") {
            host.clone_from(v);
            continue;
        }
        has_ua |= k.eq_ignore_ascii_case("user-agent");
        has_accept |= k.eq_ignore_ascii_case("accept");
        req = req.header(k.as_str(), v.as_str());
    }
    if !has_ua {
        req = req.header(http::header::USER_AGENT, user_agent);
    }
    if !has_accept {
        req = req.header(http::header::ACCEPT, "*/*");
    }
    let req = req
        .header(http::header::HOST, host)
        .header(http::header::CONNECTION, "close")
        .body(Empty::<Bytes>::new())
        .map_err(GetError::Request)?;
    let resp = sender.send_request(req).await.map_err(GetError::Http)?;
    let status = resp.status().as_u16();
    let location = resp
        .headers()
        .get(http::header::LOCATION)
        .and_then(|v| v.to_str().ok())
        .map(str::to_owned);
    let mut body = resp.into_body();
    let mut out = Vec::new();
    while out.len() < MAX_BODY {
        match body.frame().await {
            Some(Ok(f)) => {
                if let Ok(data) = f.into_data() {
                    let take = data.len().min(MAX_BODY - out.len());
                    out.extend_from_slice(&data[..take]);
                }
            }
            Some(Err(e)) => return Err(GetError::Http(e)),
            None => break,
        }
    }
    Ok((status, location, out))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn target(path: &str) -> Target {
        Target {
            https: false,
            host: "10.0.0.5".into(),
            port: 8080,
            path: path.into(),
            headers: vec![],
        }
    }

    #[test]
    fn redirects_stay_on_the_same_host() {
        let t = target("/");
        assert_eq!(same_host_path(&t, "/b?x=1"), Some("/b?x=1".into()));
        assert_eq!(
            same_host_path(&t, "http://10.0.0.5:8080/c"),
            Some("/c".into())
        );
        assert_eq!(same_host_path(&t, "http://example.com/c"), None);
        assert_eq!(same_host_path(&t, "//example.com/c"), None);
        assert_eq!(same_host_path(&t, "https://10.0.0.5:8080/c"), None);
        assert_eq!(
            Target {
                host: "::1".into(),
                ..target("/x")
            }
            .url(),
            "http://[::1]:8080/x"
        );
    }

    #[test]
    fn io_errors_read_as_go_prints_them() {
        let e = std::io::Error::from(std::io::ErrorKind::ConnectionRefused);
        assert_eq!(io_text(&e), "connection refused");
    }
}
