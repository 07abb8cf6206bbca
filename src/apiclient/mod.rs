//! The apiserver client (feature `apiserver`): blocking HTTP/1.1 over rustls (ring), always
//! called off the executor thread (`rt::unblock`, or a thread of its own for a watch), so a slow
//! or vanished apiserver never stalls the loop.
//!
//! Identity is what the kubeconfig gives: a client certificate (`system:node:<name>` in group
//! `system:nodes` for a node) or a bearer token. Responses are read with a size cap; an error
//! carries the apiserver's `Status` (code, reason, message), so callers tell 404, 409, 410 and 403
//! apart.

pub mod backoff;
pub mod kubeconfig;
pub mod watch;

use std::io::Read;
use std::sync::{Arc, Mutex, PoisonError};
use std::time::Duration;

use kubeconfig::{Connection, Credentials};

/// Largest response body read into memory (a list of one node's pods is far smaller).
pub const MAX_BODY: u64 = 32 << 20;

/// Deadlines of ordinary calls; watches set their own, heartbeats pass theirs
/// ([`Client::json_within`]).
pub const CALL_TIMEOUT: Duration = Duration::from_secs(30);
const CONNECT_TIMEOUT: Duration = Duration::from_secs(10);
/// A watch that carries nothing for this long is taken for dead and ended. The apiserver sends a
/// bookmark about once a minute on a watch that asked for them while anything in the cluster
/// changes (its watch cache's bookmark frequency; v1.37.2 sent them 60 s apart here, and its
/// own identity Lease alone changes every 10 s), so this much silence means the connection died
/// on the way (an apiserver gone behind a load balancer, a NAT mapping lost), not a quiet node.
pub const WATCH_SILENCE: Duration = Duration::from_secs(150);

/// How long a request may take: in all, for the answer's head, and for each read.
#[derive(Clone, Copy)]
struct Deadlines {
    whole: Duration,
    head: Option<Duration>,
    per_read: Option<Duration>,
}

/// The `Accept` of every call that reads the object it gets back.
const ACCEPT_JSON: &str = "application/json";
/// The `Accept` of a write whose caller needs only the written object's metadata (its new
/// resourceVersion): the apiserver answers a `PartialObjectMetadata`, the object's metadata
/// alone, instead of the whole object; a server that does not serve that form answers the
/// object in JSON. A Node's or a Pod's status write is answered with a few hundred bytes
/// instead of the whole object (several KiB).
pub const ACCEPT_METADATA: &str =
    "application/json;as=PartialObjectMetadata;g=meta.k8s.io;v=v1, application/json";

/// Each connection's input and output buffer (ureq's default is 128 KiB each, and a TLS
/// connection has a pair at each layer). Bodies stream through them in pieces of this size; a
/// response's head must fit, and is refused by name past half of it (the apiserver's is under
/// 1 KiB). A call in flight, an open watch and an idle pooled connection each hold their
/// buffers, so this is the largest share of what a joined node holds for its apiserver, and of
/// what calls stuck behind a silent one hold.
const IO_BUFFER: usize = 16 << 10;

#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ApiError {
    /// The apiserver answered with an error status.
    #[error("{method} {path}: {code} {reason}: {message}")]
    Status {
        method: &'static str,
        path: String,
        code: u16,
        reason: String,
        message: String,
    },
    /// No answer: connection refused, reset, TLS failure, timeout.
    #[error("{method} {path}: {message}")]
    Transport {
        method: &'static str,
        path: String,
        message: String,
    },
    /// An answer that is not what the API returns.
    #[error("{what}: {message}")]
    Decode { what: String, message: String },
}

impl ApiError {
    pub fn code(&self) -> Option<u16> {
        match self {
            ApiError::Status { code, .. } => Some(*code),
            _ => None,
        }
    }
    pub fn is_not_found(&self) -> bool {
        self.code() == Some(404)
    }
    pub fn is_conflict(&self) -> bool {
        self.code() == Some(409)
    }
    /// The resourceVersion asked for is too old: list again.
    pub fn is_gone(&self) -> bool {
        self.code() == Some(410)
    }
    pub fn is_forbidden(&self) -> bool {
        matches!(self.code(), Some(401 | 403))
    }
    pub fn is_transport(&self) -> bool {
        matches!(self, ApiError::Transport { .. })
    }
    /// The apiserver is overloaded or failing (429, 5xx): the request itself was fine.
    pub fn is_server_error(&self) -> bool {
        matches!(self.code(), Some(429 | 500..=599))
    }
    pub(crate) fn decode(what: impl Into<String>, e: impl std::fmt::Display) -> ApiError {
        ApiError::Decode {
            what: what.into(),
            message: e.to_string(),
        }
    }
}

/// The parts of a `Status` object an error needs.
#[derive(Debug, Default, serde::Deserialize)]
struct StatusBody {
    #[serde(default)]
    reason: String,
    #[serde(default)]
    message: String,
}

/// A connection to one apiserver; cheap to clone (the clones share one connection pool and one
/// identity).
#[derive(Clone)]
pub struct Client {
    pool: Arc<Pool>,
    server: String,
}

/// What every clone uses: the connection it was made from, and the agent and credentials of
/// now, swapped for new ones by [`Client::close_connections`] and [`Client::set_credentials`].
struct Pool {
    conn: Connection,
    now: Mutex<Identity>,
}

struct Identity {
    config: ureq::config::Config,
    agent: ureq::Agent,
    credentials: Credentials,
}

fn agent(config: &ureq::config::Config) -> ureq::Agent {
    ureq::Agent::with_parts(
        config.clone(),
        ureq::unversioned::transport::DefaultConnector::new(),
        InlineResolver,
    )
}

impl std::fmt::Debug for Client {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Client")
            .field("server", &self.server)
            .finish()
    }
}

/// Why a connection's TLS material cannot be used; `what` names the kubeconfig field
/// (`certificate-authority`, `client-certificate`).
#[derive(Debug)]
pub enum TlsError {
    /// A PEM block does not parse.
    Pem {
        what: &'static str,
        source: ureq::Error,
    },
    /// No certificate among the PEM blocks.
    NoCertificate { what: &'static str },
    /// No private key among the client key's PEM blocks.
    NoPrivateKey,
}

impl std::fmt::Display for TlsError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            TlsError::Pem { what, source } => write!(f, "{what}: {source}"),
            TlsError::NoCertificate { what } => write!(f, "{what}: no PEM certificate found"),
            TlsError::NoPrivateKey => {
                f.write_str("client-key: no PEM private key (EC, RSA or PKCS#8) found")
            }
        }
    }
}

impl std::error::Error for TlsError {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        match self {
            TlsError::Pem { source, .. } => Some(source),
            TlsError::NoCertificate { .. } | TlsError::NoPrivateKey => None,
        }
    }
}

fn tls(conn: &Connection) -> Result<ureq::tls::TlsConfig, TlsError> {
    use ureq::tls::{ClientCert, PemItem, RootCerts, TlsConfig, TlsProvider, parse_pem};
    let certs_of = |pem: &[u8], what: &'static str| -> Result<Vec<_>, TlsError> {
        let certs: Vec<_> = parse_pem(pem)
            .filter_map(|i| match i {
                Ok(PemItem::Certificate(c)) => Some(Ok(c)),
                Ok(_) => None,
                Err(source) => Some(Err(TlsError::Pem { what, source })),
            })
            .collect::<Result<_, _>>()?;
        if certs.is_empty() {
            return Err(TlsError::NoCertificate { what });
        }
        Ok(certs)
    };
    let mut b = TlsConfig::builder().provider(TlsProvider::Rustls);
    if let Some(ca) = &conn.ca {
        b = b.root_certs(RootCerts::new_with_certs(&certs_of(
            &ca.0,
            "certificate-authority",
        )?));
    }
    if conn.insecure_skip_tls_verify {
        log::warn!(
            "insecure-skip-tls-verify is set: the apiserver at {} is not verified",
            conn.server
        );
        b = b.disable_verification(true);
    }
    if let Some(name) = &conn.tls_server_name {
        log::warn!("tls-server-name {name:?} is not supported; the server URL's host is checked");
    }
    if let Credentials::ClientCert { cert, key } = &conn.credentials {
        let chain = certs_of(&cert.0, "client-certificate")?;
        let key = parse_pem(&key.0)
            .find_map(|i| match i {
                Ok(PemItem::PrivateKey(k)) => Some(k),
                _ => None,
            })
            .ok_or(TlsError::NoPrivateKey)?;
        b = b.client_cert(Some(ClientCert::new_with_certs(&chain, key)));
    }
    Ok(b.build())
}

/// Resolves the apiserver's address on the calling thread. ureq's own resolver starts a thread
/// for every request that has a deadline, to time the lookup out: one thread started and ended
/// per apiserver call. Calls already run on the blocking pool, so a lookup may block there: an
/// IP address needs none, a name is looked up with the system resolver, whose own timeouts
/// (resolv.conf) bound it.
#[derive(Debug)]
struct InlineResolver;

impl ureq::unversioned::resolver::Resolver for InlineResolver {
    fn resolve(
        &self,
        uri: &ureq::http::Uri,
        config: &ureq::config::Config,
        _timeout: ureq::unversioned::transport::NextTimeout,
    ) -> Result<ureq::unversioned::resolver::ResolvedSocketAddrs, ureq::Error> {
        use std::net::{SocketAddr, ToSocketAddrs};
        let (Some(scheme), Some(authority)) = (uri.scheme(), uri.authority()) else {
            return Err(ureq::Error::BadUri(uri.to_string()));
        };
        let host_port =
            ureq::unversioned::resolver::DefaultResolver::host_and_port(scheme, authority)
                .ok_or_else(|| ureq::Error::BadUri(uri.to_string()))?;
        let found: Vec<SocketAddr> = match host_port.parse::<SocketAddr>() {
            Ok(a) => vec![a],
            Err(_) => host_port.to_socket_addrs()?.collect(),
        };
        let mut out = self.empty();
        for a in config.ip_family().keep_wanted(found.into_iter()) {
            if out.try_push(a).is_err() {
                break;
            }
        }
        if out.is_empty() {
            return Err(ureq::Error::HostNotFound);
        }
        Ok(out)
    }
}

/// How long an idle connection is kept for the next call (ureq's default is 15 s). Every call
/// at rest (the Lease renewal, the node status) goes over one kept-alive connection; a new one
/// costs a TCP and TLS handshake with the client certificate, several KiB, more than the call.
/// Five minutes holds a connection between renewals for leases of up to 20 min
/// (`nodeLeaseDurationSeconds`: renewed every quarter of it). A connection the apiserver or
/// the network closed meanwhile is found closed before use and replaced; one that died
/// silently fails its call, and repeated failures close every connection
/// ([`Client::close_connections`]).
const IDLE_AGE: Duration = Duration::from_secs(300);

fn agent_config(conn: &Connection) -> Result<ureq::config::Config, TlsError> {
    Ok(ureq::Agent::config_builder()
        .tls_config(tls(conn)?)
        .http_status_as_error(false)
        .timeout_connect(Some(CONNECT_TIMEOUT))
        .user_agent(concat!("picolet/", env!("CARGO_PKG_VERSION")))
        .max_idle_connections_per_host(2)
        .max_idle_age(IDLE_AGE)
        .input_buffer_size(IO_BUFFER)
        .output_buffer_size(IO_BUFFER)
        .max_response_header_size(IO_BUFFER / 2)
        .build())
}

impl Client {
    pub fn new(conn: &Connection) -> Result<Client, TlsError> {
        let config = agent_config(conn)?;
        Ok(Client {
            pool: Arc::new(Pool {
                now: Mutex::new(Identity {
                    agent: agent(&config),
                    config,
                    credentials: conn.credentials.clone(),
                }),
                conn: conn.clone(),
            }),
            server: conn.server.clone(),
        })
    }

    /// The connection the client was made from, with the credentials of now.
    pub fn connection(&self) -> Connection {
        Connection {
            credentials: self.lock().credentials.clone(),
            ..self.pool.conn.clone()
        }
    }

    /// Authenticates every later request, from every clone, with `credentials` (a renewed
    /// client certificate): the TLS settings are built anew and every connection made with the
    /// old ones is closed, idle or in use, so a watch resumes on a new connection at once.
    pub fn set_credentials(&self, credentials: Credentials) -> Result<(), TlsError> {
        let conn = Connection {
            credentials: credentials.clone(),
            ..self.pool.conn.clone()
        };
        let config = agent_config(&conn)?;
        let fresh = Identity {
            agent: agent(&config),
            config,
            credentials,
        };
        let old = std::mem::replace(&mut *self.lock(), fresh);
        old.agent.shutdown();
        Ok(())
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, Identity> {
        self.pool.now.lock().unwrap_or_else(PoisonError::into_inner)
    }

    pub fn server(&self) -> &str {
        &self.server
    }

    fn agent(&self) -> (ureq::Agent, Credentials) {
        let now = self.lock();
        (now.agent.clone(), now.credentials.clone())
    }

    /// Closes every connection to the apiserver, idle or in use, as the kubelet does when its
    /// heartbeat fails again and again: a call or a watch blocked on a connection whose far end
    /// is gone (a NAT mapping lost, a link that came back while its connections did not) fails
    /// at once instead of waiting out its deadline, up to 10 minutes for a watch. Later calls,
    /// from every clone, open new connections.
    pub fn close_connections(&self) {
        let old = {
            let mut now = self.lock();
            let fresh = agent(&now.config);
            std::mem::replace(&mut now.agent, fresh)
        };
        old.shutdown();
    }

    fn send(
        &self,
        method: &'static str,
        path: &str,
        body: Option<(&str, Vec<u8>)>,
        deadlines: Deadlines,
        accept: &str,
    ) -> Result<ureq::http::Response<ureq::Body>, ApiError> {
        let transport = |message: String| ApiError::Transport {
            method,
            path: path.to_owned(),
            message,
        };
        let (agent, credentials) = self.agent();
        let mut req = ureq::http::Request::builder()
            .method(method)
            .uri(format!("{}{path}", self.server))
            .header("Accept", accept);
        if let Some(token) =
            kubeconfig::bearer(&credentials).map_err(|e| transport(e.to_string()))?
        {
            req = req.header("Authorization", format!("Bearer {token}"));
        }
        let (ct, bytes) = body.unwrap_or(("application/json", Vec::new()));
        if method != "GET" {
            req = req.header("Content-Type", ct);
        }
        let req = req.body(bytes).map_err(|e| transport(e.to_string()))?;
        let req = agent
            .configure_request(req)
            .timeout_global(Some(deadlines.whole))
            .timeout_recv_response(deadlines.head)
            .timeout_per_read(deadlines.per_read)
            .build();
        let resp = agent.run(req).map_err(|e| transport(e.to_string()))?;
        let code = resp.status().as_u16();
        if (200..300).contains(&code) {
            return Ok(resp);
        }
        let text = resp
            .into_body()
            .with_config()
            .limit(1 << 20)
            .read_to_vec()
            .unwrap_or_default();
        let st: StatusBody = serde_json::from_slice(&text).unwrap_or_default();
        Err(ApiError::Status {
            method,
            path: path.to_owned(),
            code,
            reason: st.reason,
            message: if st.message.is_empty() {
                String::from_utf8_lossy(&text).chars().take(300).collect()
            } else {
                st.message
            },
        })
    }

    /// One call; returns the body (at most [`MAX_BODY`] bytes).
    pub fn call(
        &self,
        method: &'static str,
        path: &str,
        body: Option<(&str, Vec<u8>)>,
    ) -> Result<Vec<u8>, ApiError> {
        self.call_within(method, path, body, CALL_TIMEOUT, ACCEPT_JSON)
    }

    /// A write whose answer is not needed (an Event, a status): [`Client::call`] asking for
    /// the object's metadata alone in the answer ([`ACCEPT_METADATA`]), which is read and
    /// dropped (the connection goes back to the pool only once its answer is read whole).
    pub fn write(
        &self,
        method: &'static str,
        path: &str,
        body: Option<(&str, Vec<u8>)>,
    ) -> Result<(), ApiError> {
        self.call_within(method, path, body, CALL_TIMEOUT, ACCEPT_METADATA)
            .map(drop)
    }

    /// [`Client::call`] with a deadline of its own for the whole call, asking for the answer
    /// in the form `accept` names.
    fn call_within(
        &self,
        method: &'static str,
        path: &str,
        body: Option<(&str, Vec<u8>)>,
        deadline: Duration,
        accept: &str,
    ) -> Result<Vec<u8>, ApiError> {
        let deadlines = Deadlines {
            whole: deadline,
            head: None,
            per_read: None,
        };
        let resp = self.send(method, path, body, deadlines, accept)?;
        resp.into_body()
            .with_config()
            .limit(MAX_BODY)
            .read_to_vec()
            .map_err(|e| ApiError::Transport {
                method,
                path: path.to_owned(),
                message: format!("reading the response: {e}"),
            })
    }

    /// `call` with a JSON body, decoding a JSON answer.
    pub fn json<T: serde::de::DeserializeOwned>(
        &self,
        method: &'static str,
        path: &str,
        body: Option<(&str, Vec<u8>)>,
    ) -> Result<T, ApiError> {
        self.json_within(method, path, body, CALL_TIMEOUT)
    }

    /// [`Client::json`] with a deadline of its own for the whole call.
    pub fn json_within<T: serde::de::DeserializeOwned>(
        &self,
        method: &'static str,
        path: &str,
        body: Option<(&str, Vec<u8>)>,
        deadline: Duration,
    ) -> Result<T, ApiError> {
        self.json_accepting(method, path, body, deadline, ACCEPT_JSON)
    }

    /// [`Client::json_within`] asking for the answer in the form `accept` names
    /// ([`ACCEPT_METADATA`]: the written object's metadata alone, where the apiserver serves it).
    pub fn json_accepting<T: serde::de::DeserializeOwned>(
        &self,
        method: &'static str,
        path: &str,
        body: Option<(&str, Vec<u8>)>,
        deadline: Duration,
        accept: &str,
    ) -> Result<T, ApiError> {
        let bytes = self.call_within(method, path, body, deadline, accept)?;
        // The linear pre-pass bounds what the parse below may cost, whatever the server sends.
        crate::limits::check(
            &bytes,
            crate::limits::Syntax::Json,
            &crate::limits::Limits::API,
        )
        .map_err(|e| ApiError::decode(format!("{method} {path}"), e))?;
        serde_json::from_slice(&bytes).map_err(|e| ApiError::decode(format!("{method} {path}"), e))
    }

    /// A long request whose body is read as it arrives (a watch). `idle` bounds the whole
    /// request: the server is asked to end the watch before it (`timeoutSeconds`). The response's
    /// head must come within [`CALL_TIMEOUT`] (the apiserver sends it at once), and the body
    /// may not fall silent for [`WATCH_SILENCE`]: a watch on a connection that died on the way
    /// fails then, not at the end of `idle`.
    pub fn stream(&self, path: &str, idle: Duration) -> Result<impl Read + use<>, ApiError> {
        self.stream_within(
            path,
            Deadlines {
                whole: idle,
                head: Some(CALL_TIMEOUT),
                per_read: Some(WATCH_SILENCE),
            },
        )
    }

    fn stream_within(
        &self,
        path: &str,
        deadlines: Deadlines,
    ) -> Result<impl Read + use<>, ApiError> {
        let resp = self.send("GET", path, None, deadlines, ACCEPT_JSON)?;
        Ok(resp.into_body().into_reader())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use ureq::unversioned::resolver::Resolver;
    use ureq::unversioned::transport::NextTimeout;

    fn resolve(url: &str, family: ureq::config::IpFamily) -> Result<Vec<String>, ureq::Error> {
        let uri: ureq::http::Uri = url.parse().unwrap();
        let config = ureq::Agent::config_builder().ip_family(family).build();
        Ok(InlineResolver
            .resolve(&uri, &config, NextTimeout::default())?
            .iter()
            .map(|a| a.to_string())
            .collect())
    }

    /// The head and the body of the request a test server read.
    type Seen = std::thread::JoinHandle<(Vec<u8>, Vec<u8>)>;

    /// A one-connection HTTP/1.1 server on loopback: reads one request (head and a
    /// `Content-Length` body), answers `reply`, closes, and hands back the request it read.
    fn serve_once(reply: Vec<u8>) -> (String, Seen) {
        use std::io::{BufRead, BufReader, Write};
        let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        let addr = listener.local_addr().unwrap();
        let server = std::thread::spawn(move || {
            let (stream, _) = listener.accept().unwrap();
            let mut r = BufReader::new(stream.try_clone().unwrap());
            let mut head = Vec::new();
            let mut len = 0usize;
            loop {
                let mut line = String::new();
                r.read_line(&mut line).unwrap();
                if let Some(v) = line.to_ascii_lowercase().strip_prefix("content-length:") {
                    len = v.trim().parse().unwrap();
                }
                head.extend_from_slice(line.as_bytes());
                if line == "\r\n" {
                    break;
                }
            }
            let mut body = vec![0; len];
            r.read_exact(&mut body).unwrap();
            (&stream).write_all(&reply).unwrap();
            (head, body)
        });
        (format!("http://{addr}"), server)
    }

    fn client(server: String) -> Client {
        Client::new(&Connection {
            server,
            ca: None,
            insecure_skip_tls_verify: false,
            tls_server_name: None,
            credentials: Credentials::None,
            namespace: String::new(),
        })
        .unwrap()
    }

    #[test]
    fn bodies_far_larger_than_the_buffers_go_both_ways_whole() {
        // 300 KiB up and 1 MiB down, through 16 KiB buffers, byte for byte.
        let up: Vec<u8> = (0..300 << 10).map(|i: u32| (i % 251) as u8).collect();
        let down: Vec<u8> = (0..1 << 20).map(|i: u32| (i % 241) as u8).collect();
        let mut reply = format!(
            "HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nContent-Length: {}\r\n\r\n",
            down.len()
        )
        .into_bytes();
        reply.extend_from_slice(&down);
        let (url, server) = serve_once(reply);
        let got = client(url)
            .call("PUT", "/big", Some(("application/json", up.clone())))
            .unwrap();
        let (head, body) = server.join().unwrap();
        assert!(head.starts_with(b"PUT /big HTTP/1.1\r\n"));
        assert_eq!(body.len(), up.len());
        assert!(body == up, "request body changed on the way");
        assert_eq!(got.len(), down.len());
        assert!(got == down, "response body changed on the way");
    }

    /// A server that reads each request and, per connection in order of arrival, starts a watch
    /// and then goes silent (`Watch`), never answers (`Silent`), or answers 200 `{}` (`Answer`);
    /// it sends the request lines it read, as they arrive.
    #[derive(Clone, Copy)]
    enum Conn {
        Watch,
        Silent,
        Answer,
    }

    fn serve_each(script: Vec<Conn>) -> (String, std::sync::mpsc::Receiver<String>) {
        use std::io::{BufRead, BufReader, Write};
        let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        let addr = listener.local_addr().unwrap();
        let (seen, rx) = std::sync::mpsc::channel();
        std::thread::spawn(move || {
            for how in script {
                let Ok((stream, _)) = listener.accept() else {
                    return;
                };
                let seen = seen.clone();
                std::thread::spawn(move || {
                    let mut r = BufReader::new(stream.try_clone().unwrap());
                    let mut first = String::new();
                    r.read_line(&mut first).unwrap();
                    loop {
                        let mut line = String::new();
                        if r.read_line(&mut line).unwrap_or(0) == 0 || line == "\r\n" {
                            break;
                        }
                    }
                    let _ = seen.send(first.trim_end().to_owned());
                    let mut w = &stream;
                    match how {
                        Conn::Watch => {
                            let event = b"{\"type\":\"BOOKMARK\"}\n";
                            let _ = write!(
                                w,
                                "HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n{:x}\r\n",
                                event.len()
                            );
                            let _ = w.write_all(event);
                            let _ = w.write_all(b"\r\n");
                        }
                        Conn::Silent => {}
                        Conn::Answer => {
                            let _ = w.write_all(b"HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\n{}");
                        }
                    }
                    // Hold the connection open, saying nothing more, until the client closes it.
                    let mut rest = Vec::new();
                    let _ = std::io::Read::read_to_end(&mut r, &mut rest);
                });
            }
        });
        (format!("http://{addr}"), rx)
    }

    #[test]
    fn closing_the_connections_ends_a_silent_watch_and_call_at_once_and_calls_go_on() {
        use std::sync::mpsc::channel;
        let (url, seen) = serve_each(vec![Conn::Watch, Conn::Silent, Conn::Answer]);
        let c = client(url);
        let (done_tx, done) = channel();
        let (w, tx) = (c.clone(), done_tx.clone());
        std::thread::spawn(move || {
            let mut body = w.stream("/watch", Duration::from_secs(600)).unwrap();
            let mut buf = Vec::new();
            let r = body.read_to_end(&mut buf);
            let _ = tx.send(format!("watch: {} bytes then {r:?}", buf.len()));
        });
        assert_eq!(
            seen.recv_timeout(Duration::from_secs(10)).unwrap(),
            "GET /watch HTTP/1.1"
        );
        let (k, tx) = (c.clone(), done_tx);
        std::thread::spawn(move || {
            let r = k.call("PUT", "/lease", None);
            let _ = tx.send(format!("call: {r:?}"));
        });
        assert_eq!(
            seen.recv_timeout(Duration::from_secs(10)).unwrap(),
            "PUT /lease HTTP/1.1"
        );
        // Both wait on their connections (600 s and 30 s deadlines), until:
        std::thread::sleep(Duration::from_millis(300));
        assert!(done.try_recv().is_err(), "nothing ended before the close");
        c.close_connections();
        let mut ended: Vec<String> = (0..2)
            .map(|_| {
                done.recv_timeout(Duration::from_secs(5))
                    .expect("ended by the close")
            })
            .collect();
        ended.sort();
        assert!(ended[0].starts_with("call: Err(Transport"), "{ended:?}");
        assert!(ended[1].starts_with("watch: "), "{ended:?}");
        assert!(
            ended[1].contains("Err("),
            "the watch ends in an error, not a clean end: {ended:?}"
        );
        // The client, and its clones, go on with new connections.
        assert_eq!(c.call("GET", "/after", None).unwrap(), b"{}");
        assert_eq!(
            seen.recv_timeout(Duration::from_secs(5)).unwrap(),
            "GET /after HTTP/1.1"
        );
    }

    #[test]
    fn a_watch_whose_answer_never_comes_fails_after_the_head_deadline() {
        let (url, seen) = serve_each(vec![Conn::Silent]);
        let deadlines = Deadlines {
            whole: Duration::from_secs(600),
            head: Some(Duration::from_millis(300)),
            per_read: None,
        };
        let started = std::time::Instant::now();
        let e = client(url)
            .stream_within("/watch", deadlines)
            .err()
            .expect("no answer is an error");
        seen.recv().unwrap();
        assert!(e.is_transport(), "{e:?}");
        assert!(
            started.elapsed() < Duration::from_secs(60),
            "ended by the head's deadline, not the watch's ({:?})",
            started.elapsed()
        );
    }

    #[test]
    fn a_watch_that_falls_silent_fails_after_the_silence_deadline() {
        let (url, seen) = serve_each(vec![Conn::Watch]);
        let deadlines = Deadlines {
            whole: Duration::from_secs(600),
            head: Some(Duration::from_secs(30)),
            per_read: Some(Duration::from_millis(300)),
        };
        let started = std::time::Instant::now();
        let mut body = client(url).stream_within("/watch", deadlines).unwrap();
        seen.recv().unwrap();
        let mut buf = Vec::new();
        let r = body.read_to_end(&mut buf);
        assert!(r.is_err(), "silence is an error, not a clean end: {r:?}");
        assert_eq!(
            buf, b"{\"type\":\"BOOKMARK\"}\n",
            "what came before the silence is kept"
        );
        assert!(
            started.elapsed() < Duration::from_secs(60),
            "ended by the silence deadline, not the watch's ({:?})",
            started.elapsed()
        );
    }

    #[test]
    fn a_response_head_larger_than_the_buffer_is_an_error_naming_the_call() {
        let filler = "x".repeat(IO_BUFFER);
        let (url, server) = serve_once(
            format!("HTTP/1.1 200 OK\r\nX-Filler: {filler}\r\nContent-Length: 0\r\n\r\n")
                .into_bytes(),
        );
        let e = client(url).call("GET", "/api", None).unwrap_err();
        server.join().unwrap();
        assert!(e.is_transport(), "{e:?}");
        let text = e.to_string();
        assert!(text.starts_with("GET /api: "), "{text}");
        assert!(text.contains("header"), "{text}");
    }

    #[test]
    fn addresses_resolve_without_a_lookup_and_names_on_this_thread() {
        use ureq::config::IpFamily::*;
        assert_eq!(
            resolve("https://10.0.0.7:6443/api", Any).unwrap(),
            ["10.0.0.7:6443"]
        );
        assert_eq!(
            resolve("https://[fd00::7]/api", Any).unwrap(),
            ["[fd00::7]:443"]
        );
        assert_eq!(
            resolve("http://127.0.0.1/x", Any).unwrap(),
            ["127.0.0.1:80"]
        );
        // The agent's address family applies to literals too.
        assert!(matches!(
            resolve("https://[fd00::7]:6443/", Ipv4Only),
            Err(ureq::Error::HostNotFound)
        ));
        // A name goes to the system resolver (/etc/hosts has localhost everywhere).
        let local = resolve("https://localhost:6443/", Any).unwrap();
        assert!(local.iter().all(|a| a.ends_with(":6443")), "{local:?}");
        assert!(!local.is_empty());
    }
}
