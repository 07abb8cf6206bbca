//! The apiserver client (feature `apiserver`): one long-lived HTTP/2 connection over rustls
//! (ring) for every request and watch, HTTP/1.1 where the server does not offer HTTP/2
//! ([`link`]). Its interface is blocking, always called off the executor thread (`rt::unblock`,
//! or a thread of its own for a watch), so a slow or vanished apiserver never stalls the loop.
//! Bodies are JSON, except the answers to writes, which come in the Kubernetes protobuf
//! encoding when [`ContentType::Protobuf`] is set (the kubelet's `contentType`, its default)
//! and the apiserver serves it ([`protobuf`]).
//!
//! Identity is what the kubeconfig gives: a client certificate (`system:node:<name>` in group
//! `system:nodes` for a node) or a bearer token. Responses are read with a size cap; an error
//! carries the apiserver's `Status` (code, reason, message), so callers tell 404, 409, 410 and 403
//! apart.

pub mod backoff;
pub mod kubeconfig;
mod link;
pub mod pod_proto;
pub mod protobuf;
pub mod watch;

use std::io::Read;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, PoisonError};
use std::time::Duration;

use bytes::Bytes;
use futures_rustls::rustls;
use http_body_util::Full;
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
#[derive(Clone, Copy, Debug)]
pub struct Deadlines {
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
/// [`ACCEPT_METADATA`] with the protobuf encoding first: the metadata of a Lease renewal's
/// answer is about half its JSON. A server that does not serve it answers in JSON.
const ACCEPT_METADATA_PROTOBUF: &str = "application/vnd.kubernetes.protobuf;as=PartialObjectMetadata;g=meta.k8s.io;v=v1, application/json;as=PartialObjectMetadata;g=meta.k8s.io;v=v1, application/json";

/// The `Accept` of a list or watch of pods under [`ContentType::Protobuf`]: the protobuf
/// encoding first (read by [`pod_proto`]), JSON where a server does not serve it.
const ACCEPT_PODS_PROTOBUF: &str = "application/vnd.kubernetes.protobuf, application/json";

pub use crate::content_type::ContentType;

/// The largest read buffer of an HTTP/1.1 connection: a response's head must fit in it; over
/// HTTP/2 a head is refused past half of it (the apiserver's is under 1 KiB).
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

/// A connection to one apiserver; cheap to clone (the clones share one connection and one
/// identity).
#[derive(Clone)]
pub struct Client {
    pool: Arc<Pool>,
    server: String,
}

/// What every clone uses: the connection it was made from, the credentials of now (swapped by
/// [`Client::set_credentials`]), and the connection thread's queue.
struct Pool {
    conn: Connection,
    credentials: Mutex<Credentials>,
    link: async_channel::Sender<link::Msg>,
    /// [`ContentType::Protobuf`] when set.
    protobuf: AtomicBool,
    /// Whether watches ask for bookmarks ([`Client::set_watch_bookmarks`]).
    bookmarks: AtomicBool,
}

impl std::fmt::Debug for Client {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Client")
            .field("server", &self.server)
            .finish()
    }
}

/// Why a connection's TLS material cannot be used; `what` names the kubeconfig field
/// (`certificate-authority`, `client-certificate`, `client-key`).
#[derive(Debug)]
pub enum TlsError {
    /// A PEM block does not parse, or its certificate is refused.
    Pem { what: &'static str, message: String },
    /// No certificate among the PEM blocks.
    NoCertificate { what: &'static str },
    /// No private key among the client key's PEM blocks.
    NoPrivateKey,
    /// The client key does not go with the certificate, or is of a kind not supported.
    ClientKey(String),
    /// The server URL has no host, or a scheme other than https or http.
    Server(String),
    /// The connection's thread could not be started.
    Thread(std::io::Error),
}

impl std::fmt::Display for TlsError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            TlsError::Pem { what, message } => write!(f, "{what}: {message}"),
            TlsError::NoCertificate { what } => write!(f, "{what}: no PEM certificate found"),
            TlsError::NoPrivateKey => {
                f.write_str("client-key: no PEM private key (EC, RSA or PKCS#8) found")
            }
            TlsError::ClientKey(m) => write!(f, "client-key: {m}"),
            TlsError::Server(m) => write!(f, "server: {m}"),
            TlsError::Thread(e) => write!(f, "starting the apiserver connection's thread: {e}"),
        }
    }
}

impl std::error::Error for TlsError {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        match self {
            TlsError::Thread(e) => Some(e),
            _ => None,
        }
    }
}

/// The TLS settings of a connection: the kubeconfig's CA (or no verification at all, with
/// `insecure-skip-tls-verify`), its client certificate, and ALPN offering HTTP/2 first.
fn tls(conn: &Connection) -> Result<Arc<rustls::ClientConfig>, TlsError> {
    use crate::tls::{PemError, ServerCheck};
    use rustls::pki_types::pem;
    let certs_of = |pem: &[u8], what: &'static str| {
        crate::tls::pem_certs(pem).map_err(|e| match e {
            PemError::NoCertificate => TlsError::NoCertificate { what },
            PemError::Pem(e) => TlsError::Pem {
                what,
                message: e.to_string(),
            },
        })
    };
    let server = if conn.insecure_skip_tls_verify {
        log::warn!(
            "insecure-skip-tls-verify is set: the apiserver at {} is not verified",
            conn.server
        );
        ServerCheck::AnyCert
    } else {
        let mut roots = rustls::RootCertStore::empty();
        match &conn.ca {
            Some(ca) => {
                for c in certs_of(&ca.0, "certificate-authority")? {
                    roots.add(c).map_err(|e| TlsError::Pem {
                        what: "certificate-authority",
                        message: e.to_string(),
                    })?;
                }
            }
            None => log::warn!(
                "no certificate-authority for the apiserver at {}: its certificate cannot be \
                 verified, so connections to it fail",
                conn.server
            ),
        }
        ServerCheck::Roots(roots)
    };
    let client_auth = match &conn.credentials {
        Credentials::ClientCert { cert, key } => {
            let chain = certs_of(&cert.0, "client-certificate")?;
            let key = crate::tls::pem_key(&key.0).map_err(|e| match e {
                pem::Error::NoItemsFound => TlsError::NoPrivateKey,
                e => TlsError::Pem {
                    what: "client-key",
                    message: e.to_string(),
                },
            })?;
            Some((chain, key))
        }
        _ => None,
    };
    crate::tls::client_config(server, client_auth, &[b"h2", b"http/1.1"])
        .map_err(|e| TlsError::ClientKey(e.to_string()))
}

/// How long an idle HTTP/1.1 connection is kept for the next call. Every call at rest (the
/// Lease renewal, the node status) goes over a kept connection; a new one costs a TCP and TLS
/// handshake with the client certificate, several KiB, more than the call. Five minutes holds
/// one between renewals for leases of up to 20 min (`nodeLeaseDurationSeconds`: renewed every
/// quarter of it). The HTTP/2 connection is kept for as long as it answers its PINGs.
const IDLE_AGE: Duration = Duration::from_secs(300);

/// The PING settings of the environment ([`link::ping_settings`]), a bad value told once.
fn env_ping() -> (Duration, Duration) {
    let var = |name| std::env::var(name).ok();
    let (idle, timeout) = (
        var("HTTP2_READ_IDLE_TIMEOUT_SECONDS"),
        var("HTTP2_PING_TIMEOUT_SECONDS"),
    );
    let (ping, warnings) = link::ping_settings(idle.as_deref(), timeout.as_deref());
    static TOLD: std::sync::Once = std::sync::Once::new();
    TOLD.call_once(|| {
        for w in &warnings {
            log::warn!("apiserver: {w}");
        }
    });
    ping
}

/// Where a connection to `conn` dials.
fn target(conn: &Connection, tls: Arc<rustls::ClientConfig>) -> Result<link::Target, TlsError> {
    let uri: http::Uri = conn
        .server
        .parse()
        .map_err(|e| TlsError::Server(format!("{:?}: {e}", conn.server)))?;
    let https = match uri.scheme_str() {
        Some("https") => true,
        Some("http") => false,
        _ => {
            return Err(TlsError::Server(format!(
                "{:?}: the scheme is not https or http",
                conn.server
            )));
        }
    };
    let host = uri
        .host()
        .ok_or_else(|| TlsError::Server(format!("{:?}: no host", conn.server)))?
        .trim_start_matches('[')
        .trim_end_matches(']')
        .to_owned();
    Ok(link::Target {
        port: uri.port_u16().unwrap_or(if https { 443 } else { 80 }),
        server_name: conn.tls_server_name.clone().unwrap_or_else(|| host.clone()),
        host,
        tls: https.then_some(tls),
        ping: env_ping(),
    })
}

impl Client {
    pub fn new(conn: &Connection) -> Result<Client, TlsError> {
        Client::with_target(conn, target(conn, tls(conn)?)?)
    }

    fn with_target(conn: &Connection, target: link::Target) -> Result<Client, TlsError> {
        Ok(Client {
            pool: Arc::new(Pool {
                credentials: Mutex::new(conn.credentials.clone()),
                conn: conn.clone(),
                link: link::start(target).map_err(TlsError::Thread)?,
                protobuf: AtomicBool::new(false),
                bookmarks: AtomicBool::new(true),
            }),
            server: conn.server.clone(),
        })
    }

    /// The encoding of the answers to writes, for every clone (JSON until set).
    pub fn set_content_type(&self, ct: ContentType) {
        self.pool
            .protobuf
            .store(ct == ContentType::Protobuf, Ordering::Relaxed);
    }

    /// Whether [`ContentType::Protobuf`] is set.
    pub fn protobuf(&self) -> bool {
        self.pool.protobuf.load(Ordering::Relaxed)
    }

    /// Whether watches ask for bookmarks, for every clone (true until set). Without them a
    /// watch's answer may stay silent for its whole length, so [`Client::stream`] keeps no
    /// silence deadline: a dead HTTP/2 connection is found by PING, a dead HTTP/1.1 one when
    /// the watch's length is over. A watch of a quiet set then resumes from the resourceVersion
    /// of its last event, which the apiserver may have forgotten (410: listed again).
    pub fn set_watch_bookmarks(&self, on: bool) {
        self.pool.bookmarks.store(on, Ordering::Relaxed);
    }

    /// Whether watches ask for bookmarks.
    pub fn watch_bookmarks(&self) -> bool {
        self.pool.bookmarks.load(Ordering::Relaxed)
    }

    /// The deadlines of a watch of length `idle` (see [`Client::stream`]).
    fn watch_deadlines(&self, idle: Duration) -> Deadlines {
        Deadlines {
            whole: idle,
            head: Some(CALL_TIMEOUT),
            per_read: self.watch_bookmarks().then_some(WATCH_SILENCE),
        }
    }

    /// What `accept` becomes under the encoding set: the metadata answer in protobuf first.
    fn negotiate<'a>(&self, accept: &'a str) -> &'a str {
        if accept == ACCEPT_METADATA && self.protobuf() {
            ACCEPT_METADATA_PROTOBUF
        } else {
            accept
        }
    }

    /// The connection the client was made from, with the credentials of now.
    pub fn connection(&self) -> Connection {
        Connection {
            credentials: self.credentials(),
            ..self.pool.conn.clone()
        }
    }

    /// Authenticates every later request, from every clone, with `credentials` (a renewed
    /// client certificate): the TLS settings are built anew and the connection made with the
    /// old ones is closed, so every call and watch on it fails at once and a watch resumes on a
    /// new connection.
    pub fn set_credentials(&self, credentials: Credentials) -> Result<(), TlsError> {
        let conn = Connection {
            credentials: credentials.clone(),
            ..self.pool.conn.clone()
        };
        let tls = target(&conn, tls(&conn)?)?.tls;
        *self.lock() = credentials;
        let _ = self.pool.link.send_blocking(link::Msg::Tls(tls));
        Ok(())
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, Credentials> {
        self.pool
            .credentials
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
    }

    fn credentials(&self) -> Credentials {
        self.lock().clone()
    }

    pub fn server(&self) -> &str {
        &self.server
    }

    /// Closes the connection to the apiserver, as the kubelet does when its heartbeat fails
    /// again and again: a call or a watch blocked on a connection whose far end is gone (a NAT
    /// mapping lost, a link that came back while its connections did not) fails at once instead
    /// of waiting out its deadline or the PING's. Later calls, from every clone, dial anew.
    pub fn close_connections(&self) {
        let _ = self.pool.link.send_blocking(link::Msg::Close);
    }

    fn send(
        &self,
        method: &'static str,
        path: &str,
        body: Option<(&str, Vec<u8>)>,
        deadlines: Deadlines,
        accept: &str,
    ) -> Result<(u16, Option<String>, link::Body), ApiError> {
        let transport = |message: String| ApiError::Transport {
            method,
            path: path.to_owned(),
            message,
        };
        let credentials = self.credentials();
        let mut req = http::Request::builder()
            .method(method)
            .uri(format!("{}{path}", self.server))
            .header(http::header::ACCEPT, self.negotiate(accept))
            .header(
                http::header::USER_AGENT,
                concat!("picolet/", env!("CARGO_PKG_VERSION")),
            );
        if let Some(token) =
            kubeconfig::bearer(&credentials).map_err(|e| transport(e.to_string()))?
        {
            req = req.header(http::header::AUTHORIZATION, format!("Bearer {token}"));
        }
        let (ct, bytes) = body.unwrap_or(("application/json", Vec::new()));
        if method != "GET" {
            req = req.header(http::header::CONTENT_TYPE, ct);
        }
        let req = req
            .body(Full::new(Bytes::from(bytes)))
            .map_err(|e| transport(e.to_string()))?;
        let (reply, events) = async_channel::bounded(link::QUEUE);
        self.pool
            .link
            .send_blocking(link::Msg::Job(Box::new(link::Job {
                req,
                deadlines,
                reply,
            })))
            .map_err(|_| transport("the apiserver connection's thread has ended".into()))?;
        let (code, content_type) = match events.recv_blocking() {
            Ok(link::Event::Head(code, ct)) => (code, ct),
            Ok(link::Event::Error(e)) => return Err(transport(e)),
            Ok(_) | Err(_) => return Err(transport("the connection was closed".into())),
        };
        let body = link::Body::new(events);
        if (200..300).contains(&code) {
            return Ok((code, content_type, body));
        }
        let mut text = Vec::new();
        let _ = body.take(1 << 20).read_to_end(&mut text);
        let st = if protobuf::is_protobuf(content_type.as_deref()) {
            protobuf::status(&text)
                .map(|(reason, message)| StatusBody { reason, message })
                .unwrap_or_default()
        } else {
            serde_json::from_slice(&text).unwrap_or_default()
        };
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
            .map(|(_, bytes)| bytes)
    }

    /// A write whose answer is not needed (an Event, a status): [`Client::call`] asking for
    /// the object's metadata alone in the answer ([`ACCEPT_METADATA`]), which is read and
    /// dropped.
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
    /// in the form `accept` names; returns the answer's `Content-Type` with its body.
    fn call_within(
        &self,
        method: &'static str,
        path: &str,
        body: Option<(&str, Vec<u8>)>,
        deadline: Duration,
        accept: &str,
    ) -> Result<(Option<String>, Vec<u8>), ApiError> {
        let deadlines = Deadlines {
            whole: deadline,
            head: None,
            per_read: None,
        };
        let (_, content_type, body) = self.send(method, path, body, deadlines, accept)?;
        let mut bytes = Vec::new();
        let read = body.take(MAX_BODY + 1).read_to_end(&mut bytes);
        let message = match read {
            Err(e) => e.to_string(),
            Ok(_) if bytes.len() as u64 > MAX_BODY => format!("larger than {MAX_BODY} bytes"),
            Ok(_) => return Ok((content_type, bytes)),
        };
        Err(ApiError::Transport {
            method,
            path: path.to_owned(),
            message: format!("reading the response: {message}"),
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
    /// ([`ACCEPT_METADATA`]: the written object's metadata alone, where the apiserver serves it;
    /// in protobuf under [`ContentType::Protobuf`], read into the JSON it stands for).
    pub fn json_accepting<T: serde::de::DeserializeOwned>(
        &self,
        method: &'static str,
        path: &str,
        body: Option<(&str, Vec<u8>)>,
        deadline: Duration,
        accept: &str,
    ) -> Result<T, ApiError> {
        let (content_type, bytes) = self.call_within(method, path, body, deadline, accept)?;
        if protobuf::is_protobuf(content_type.as_deref()) {
            let what = || format!("{method} {path}");
            let v = protobuf::metadata_json(&bytes).map_err(|e| ApiError::decode(what(), e))?;
            return serde_json::from_value(v).map_err(|e| ApiError::decode(what(), e));
        }
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
    /// head must come within [`CALL_TIMEOUT`] (the apiserver sends it at once), and, when
    /// watches ask for bookmarks, the body may not fall silent for [`WATCH_SILENCE`]: a watch on
    /// a connection that died on the way fails then, not at the end of `idle`.
    pub fn stream(&self, path: &str, idle: Duration) -> Result<impl Read + use<>, ApiError> {
        self.stream_within(path, self.watch_deadlines(idle))
    }

    fn stream_within(
        &self,
        path: &str,
        deadlines: Deadlines,
    ) -> Result<impl Read + use<>, ApiError> {
        let (_, _, body) = self.send("GET", path, None, deadlines, ACCEPT_JSON)?;
        Ok(body)
    }

    /// A list of pods (a PodList) as its JSON: read in protobuf under
    /// [`ContentType::Protobuf`] where the server serves it, in JSON otherwise.
    pub fn pod_list(&self, path: &str) -> Result<serde_json::Value, ApiError> {
        self.pod_list_read(path).map(|(_, list)| list)
    }

    /// [`Client::pod_list`], and whether the answer came in protobuf.
    pub fn pod_list_read(&self, path: &str) -> Result<(bool, serde_json::Value), ApiError> {
        if !self.protobuf() {
            return self.json("GET", path, None).map(|list| (false, list));
        }
        let (content_type, bytes) =
            self.call_within("GET", path, None, CALL_TIMEOUT, ACCEPT_PODS_PROTOBUF)?;
        let what = || format!("GET {path}");
        if protobuf::is_protobuf(content_type.as_deref()) {
            return pod_proto::object(&bytes)
                .map(|list| (true, list))
                .map_err(|e| ApiError::decode(what(), e));
        }
        crate::limits::check(
            &bytes,
            crate::limits::Syntax::Json,
            &crate::limits::Limits::API,
        )
        .map_err(|e| ApiError::decode(what(), e))?;
        serde_json::from_slice(&bytes)
            .map(|list| (false, list))
            .map_err(|e| ApiError::decode(what(), e))
    }

    /// A watch of pods ([`Client::stream`]): in protobuf under [`ContentType::Protobuf`]
    /// where the server serves it (true with the body: length-prefixed frames, each a
    /// `WatchEvent`), in JSON otherwise (false: one event a line).
    pub fn pod_stream(
        &self,
        path: &str,
        idle: Duration,
    ) -> Result<(bool, impl Read + use<>), ApiError> {
        let accept = if self.protobuf() {
            ACCEPT_PODS_PROTOBUF
        } else {
            ACCEPT_JSON
        };
        let (_, content_type, body) =
            self.send("GET", path, None, self.watch_deadlines(idle), accept)?;
        Ok((protobuf::is_protobuf(content_type.as_deref()), body))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

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
    fn the_ping_follows_client_go_s_environment_variables() {
        let d = |s| Duration::from_secs(s);
        assert_eq!(link::ping_settings(None, None), ((d(30), d(15)), vec![]));
        assert_eq!(
            link::ping_settings(Some(""), Some("")),
            ((d(30), d(15)), vec![])
        );
        assert_eq!(
            link::ping_settings(Some("300"), Some("20")),
            ((d(300), d(20)), vec![])
        );
        // 0 turns the PING off (kept as zero, which the connection reads as none).
        assert_eq!(link::ping_settings(Some("0"), None).0, (d(0), d(15)));
        let (ping, warnings) = link::ping_settings(Some("5m"), Some("-1"));
        assert_eq!(ping, (d(30), d(15)), "a bad value keeps the default");
        assert_eq!(warnings.len(), 2);
        assert!(
            warnings[0].contains("HTTP2_READ_IDLE_TIMEOUT_SECONDS=\"5m\""),
            "{warnings:?}"
        );
        assert!(
            warnings[1].contains("HTTP2_PING_TIMEOUT_SECONDS=\"-1\""),
            "{warnings:?}"
        );
    }

    #[test]
    fn a_watch_without_bookmarks_keeps_no_silence_deadline() {
        let c = client("http://127.0.0.1:1".into());
        let idle = Duration::from_secs(630);
        let on = c.watch_deadlines(idle);
        assert_eq!(on.per_read, Some(WATCH_SILENCE));
        assert_eq!((on.whole, on.head), (idle, Some(CALL_TIMEOUT)));
        // Set on one clone, seen by every other.
        c.clone().set_watch_bookmarks(false);
        assert!(!c.watch_bookmarks());
        let off = c.watch_deadlines(idle);
        assert_eq!(
            off.per_read, None,
            "a quiet watch may stay silent its whole length"
        );
        assert_eq!((off.whole, off.head), (idle, Some(CALL_TIMEOUT)));
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

    fn reply(content_type: &str, status: &str, body: &[u8]) -> Vec<u8> {
        let mut r = format!(
            "HTTP/1.1 {status}\r\nContent-Type: {content_type}\r\nContent-Length: {}\r\n\r\n",
            body.len()
        )
        .into_bytes();
        r.extend_from_slice(body);
        r
    }

    #[test]
    fn a_write_asks_for_its_metadata_in_protobuf_and_reads_the_answer() {
        let body = protobuf::encode_metadata("n1", "kube-node-lease", "817");
        let (url, server) = serve_once(reply(
            "application/vnd.kubernetes.protobuf;as=PartialObjectMetadata;g=meta.k8s.io;v=v1",
            "200 OK",
            &body,
        ));
        let c = client(url);
        c.set_content_type(ContentType::Protobuf);
        let v: serde_json::Value = c
            .json_accepting(
                "PATCH",
                "/lease",
                Some(("application/merge-patch+json", b"{}".to_vec())),
                CALL_TIMEOUT,
                ACCEPT_METADATA,
            )
            .unwrap();
        assert_eq!(v["metadata"]["resourceVersion"], "817");
        let (head, _) = server.join().unwrap();
        let head = String::from_utf8(head).unwrap().to_ascii_lowercase();
        assert!(
            head.contains(
                "\r\naccept: application/vnd.kubernetes.protobuf;as=partialobjectmetadata;"
            ),
            "{head}"
        );
    }

    #[test]
    fn under_json_the_metadata_is_asked_for_in_json_and_a_json_answer_is_read_either_way() {
        for ct in [ContentType::Json, ContentType::Protobuf] {
            let (url, server) = serve_once(reply(
                "application/json",
                "200 OK",
                br#"{"kind":"PartialObjectMetadata","metadata":{"resourceVersion":"5"}}"#,
            ));
            let c = client(url);
            c.set_content_type(ct);
            let v: serde_json::Value = c
                .json_accepting("PUT", "/x", None, CALL_TIMEOUT, ACCEPT_METADATA)
                .unwrap();
            assert_eq!(v["metadata"]["resourceVersion"], "5");
            let (head, _) = server.join().unwrap();
            let head = String::from_utf8(head).unwrap();
            assert_eq!(
                head.contains("vnd.kubernetes.protobuf"),
                ct == ContentType::Protobuf,
                "{head}"
            );
        }
    }

    /// The error of a metadata write under protobuf whose answer is `status` with `body`.
    fn protobuf_put_error(status: &str, body: &[u8]) -> ApiError {
        let (url, server) = serve_once(reply("application/vnd.kubernetes.protobuf", status, body));
        let c = client(url);
        c.set_content_type(ContentType::Protobuf);
        let e = c
            .json_accepting::<serde_json::Value>("PUT", "/x", None, CALL_TIMEOUT, ACCEPT_METADATA)
            .unwrap_err();
        server.join().unwrap();
        e
    }

    #[test]
    fn a_protobuf_error_status_gives_its_reason_and_message() {
        let body = protobuf::encode_status(409, "Conflict", "the object has been modified");
        let e = protobuf_put_error("409 Conflict", &body);
        assert!(e.is_conflict());
        assert_eq!(
            e.to_string(),
            "PUT /x: 409 Conflict: the object has been modified"
        );
    }

    #[test]
    fn a_broken_protobuf_answer_is_a_decode_error_naming_the_call() {
        let e = protobuf_put_error("200 OK", b"k8s\0\x0a\xff");
        assert!(e.to_string().starts_with("PUT /x: the envelope:"), "{e}");
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
                            // The head and the first event in one write: what a
                            // per-read deadline then measures is the silence after
                            // them, not this thread's turn on a busy machine.
                            let event = "{\"type\":\"BOOKMARK\"}\n";
                            let _ = w.write_all(
                                format!(
                                    "HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n{:x}\r\n{event}\r\n",
                                    event.len()
                                )
                                .as_bytes(),
                            );
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
            per_read: Some(Duration::from_secs(1)),
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

    /// An HTTPS server on loopback, on a thread of its own, offering HTTP/2 in ALPN (or, with
    /// `h2` false, HTTP/1.1 alone). `/watch` answers one bookmark and then holds the stream
    /// open; `/silent` never answers; `/big` answers 1 MiB; anything else answers
    /// `{"version":..,"method":..,"path":..,"body":<bytes read>}`. Counts the connections it
    /// accepted.
    struct TlsServer {
        addr: std::net::SocketAddr,
        ca: Vec<u8>,
        accepts: Arc<std::sync::atomic::AtomicUsize>,
    }

    fn big() -> Vec<u8> {
        (0..1 << 20).map(|i: u32| (i % 241) as u8).collect()
    }

    fn tls_server(h2: bool) -> TlsServer {
        use futures_lite::StreamExt;
        use http_body_util::BodyExt;
        use hyper::body::Frame;
        use std::sync::atomic::{AtomicUsize, Ordering};
        type Chunks = std::pin::Pin<
            Box<dyn futures_lite::Stream<Item = Result<Frame<Bytes>, std::convert::Infallible>>>,
        >;

        let (mut cfg, ca) = crate::tls::test_server("apiserver");
        let ca = ca.into_bytes();
        cfg.alpn_protocols = if h2 {
            vec![b"h2".to_vec(), b"http/1.1".to_vec()]
        } else {
            vec![b"http/1.1".to_vec()]
        };
        let acceptor = futures_rustls::TlsAcceptor::from(Arc::new(cfg));
        let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        let addr = listener.local_addr().unwrap();
        let accepts = Arc::new(AtomicUsize::new(0));
        let counted = accepts.clone();
        std::thread::spawn(move || {
            crate::rt::block_on(async move {
                let listener = smol::Async::new(listener).unwrap();
                loop {
                    let Ok((tcp, _)) = listener.accept().await else {
                        continue;
                    };
                    counted.fetch_add(1, Ordering::SeqCst);
                    let acceptor = acceptor.clone();
                    crate::rt::spawn(async move {
                        let Ok(tls) = acceptor.accept(tcp).await else {
                            return;
                        };
                        let svc = hyper::service::service_fn(
                            |req: http::Request<hyper::body::Incoming>| async move {
                                let version = format!("{:?}", req.version());
                                let (method, path) =
                                    (req.method().to_string(), req.uri().path().to_owned());
                                let body = req.into_body().collect().await.unwrap().to_bytes();
                                let one = |b: Vec<u8>| Ok(Frame::data(Bytes::from(b)));
                                let chunks: Chunks = match path.as_str() {
                                    "/watch" => Box::pin(
                                        futures_lite::stream::once(one(
                                            b"{\"type\":\"BOOKMARK\"}\n".to_vec(),
                                        ))
                                        .chain(futures_lite::stream::pending()),
                                    ),
                                    "/silent" => std::future::pending().await,
                                    "/big" => Box::pin(futures_lite::stream::once(one(big()))),
                                    _ => Box::pin(futures_lite::stream::once(one(
                                        serde_json::to_vec(&serde_json::json!({
                                            "version": version, "method": method,
                                            "path": path, "body": body.len(),
                                        }))
                                        .unwrap(),
                                    ))),
                                };
                                Ok::<_, std::convert::Infallible>(http::Response::new(
                                    http_body_util::StreamBody::new(chunks),
                                ))
                            },
                        );
                        let io = crate::rt::HyperIo(tls);
                        if h2 {
                            let _ =
                                hyper::server::conn::http2::Builder::new(crate::rt::HyperExecutor)
                                    .timer(crate::rt::HyperTimer)
                                    .serve_connection(io, svc)
                                    .await;
                        } else {
                            let _ = hyper::server::conn::http1::Builder::new()
                                .serve_connection(io, svc)
                                .await;
                        }
                    })
                    .detach();
                }
            })
        });
        TlsServer { addr, ca, accepts }
    }

    impl TlsServer {
        fn connection(&self, addr: std::net::SocketAddr) -> Connection {
            Connection {
                server: format!("https://{addr}"),
                ca: Some(kubeconfig::Pem(self.ca.clone())),
                insecure_skip_tls_verify: false,
                tls_server_name: None,
                credentials: Credentials::None,
                namespace: String::new(),
            }
        }
        fn client(&self) -> Client {
            Client::new(&self.connection(self.addr)).unwrap()
        }
        fn accepts(&self) -> usize {
            self.accepts.load(std::sync::atomic::Ordering::SeqCst)
        }
    }

    /// What the server said it read: (HTTP version, method, path, body length).
    fn echo(c: &Client, method: &'static str, path: &str, body: Option<Vec<u8>>) -> String {
        let v: serde_json::Value = c
            .json(method, path, body.map(|b| ("application/json", b)))
            .unwrap();
        format!(
            "{} {} {} {}",
            v["version"], v["method"], v["path"], v["body"]
        )
        .replace('"', "")
    }

    /// Starts a watch on a thread of its own; sends its first line, then how it ended.
    fn watch(c: &Client) -> std::sync::mpsc::Receiver<String> {
        let (tx, rx) = std::sync::mpsc::channel();
        let c = c.clone();
        std::thread::spawn(move || {
            let mut body =
                std::io::BufReader::new(c.stream("/watch", Duration::from_secs(600)).unwrap());
            let mut line = String::new();
            std::io::BufRead::read_line(&mut body, &mut line).unwrap();
            let _ = tx.send(line);
            let mut rest = Vec::new();
            let r = body.read_to_end(&mut rest);
            let _ = tx.send(format!("{r:?}"));
        });
        rx
    }

    #[test]
    fn every_call_and_watch_go_over_one_http2_connection() {
        let server = tls_server(true);
        let c = server.client();
        let events = watch(&c);
        assert_eq!(
            events.recv_timeout(Duration::from_secs(10)).unwrap(),
            "{\"type\":\"BOOKMARK\"}\n"
        );
        // Calls from several threads while the watch is open.
        let calls: Vec<_> = (0..4)
            .map(|i| {
                let c = c.clone();
                std::thread::spawn(move || echo(&c, "GET", &format!("/call/{i}"), None))
            })
            .collect();
        for (i, t) in calls.into_iter().enumerate() {
            assert_eq!(t.join().unwrap(), format!("HTTP/2.0 GET /call/{i} 0"));
        }
        let up = vec![b' '; 300 << 10];
        assert_eq!(
            echo(&c, "PUT", "/lease", Some(up)),
            "HTTP/2.0 PUT /lease 307200"
        );
        // An answer far larger than the flow-control windows, byte for byte.
        let got = c.call("GET", "/big", None).unwrap();
        assert!(got == big(), "the answer changed on the way");
        assert_eq!(server.accepts(), 1, "one connection for all");
        assert!(
            events.try_recv().is_err(),
            "the watch is still open after the calls"
        );
    }

    #[test]
    fn a_server_without_http2_is_spoken_to_in_http1_over_kept_connections() {
        let server = tls_server(false);
        let c = server.client();
        assert_eq!(echo(&c, "GET", "/a", None), "HTTP/1.1 GET /a 0");
        assert_eq!(
            echo(&c, "POST", "/b", Some(b"{}".to_vec())),
            "HTTP/1.1 POST /b 2"
        );
        assert_eq!(server.accepts(), 1, "the second call reuses the connection");
        // A watch holds a connection of its own; calls meanwhile go over another.
        let events = watch(&c);
        events.recv_timeout(Duration::from_secs(10)).unwrap();
        assert_eq!(echo(&c, "GET", "/c", None), "HTTP/1.1 GET /c 0");
        assert_eq!(server.accepts(), 2);
    }

    #[test]
    fn closing_the_http2_connection_ends_its_watch_and_calls_at_once_and_calls_go_on() {
        let server = tls_server(true);
        let c = server.client();
        let events = watch(&c);
        events.recv_timeout(Duration::from_secs(10)).unwrap();
        let (tx, call) = std::sync::mpsc::channel();
        let k = c.clone();
        std::thread::spawn(move || {
            let _ = tx.send(format!("{:?}", k.call("GET", "/silent", None)));
        });
        std::thread::sleep(Duration::from_millis(300));
        assert!(call.try_recv().is_err(), "the call waits for its answer");
        c.close_connections();
        let ended = call
            .recv_timeout(Duration::from_secs(5))
            .expect("ended by the close");
        assert!(ended.starts_with("Err(Transport"), "{ended}");
        let ended = events
            .recv_timeout(Duration::from_secs(5))
            .expect("ended by the close");
        assert!(
            ended.starts_with("Err("),
            "the watch ends in an error: {ended}"
        );
        assert_eq!(echo(&c, "GET", "/after", None), "HTTP/2.0 GET /after 0");
        assert_eq!(server.accepts(), 2, "a new connection after the close");
    }

    #[test]
    fn new_credentials_move_every_call_and_watch_to_a_new_connection() {
        let server = tls_server(true);
        let c = server.client();
        let events = watch(&c);
        events.recv_timeout(Duration::from_secs(10)).unwrap();
        c.set_credentials(Credentials::Token("renewed".into()))
            .unwrap();
        let ended = events
            .recv_timeout(Duration::from_secs(5))
            .expect("ended by the swap");
        assert!(ended.starts_with("Err("), "{ended}");
        assert_eq!(echo(&c, "GET", "/after", None), "HTTP/2.0 GET /after 0");
        assert_eq!(server.accepts(), 2);
        assert!(matches!(c.connection().credentials, Credentials::Token(t) if t == "renewed"));
    }

    /// A TCP relay to `to` whose connections opened before [`Relay::freeze`] stop carrying
    /// anything, both ways, while staying open: a connection that died on the way.
    struct Relay {
        addr: std::net::SocketAddr,
        frozen_below: Arc<std::sync::atomic::AtomicUsize>,
        accepted: Arc<std::sync::atomic::AtomicUsize>,
    }

    impl Relay {
        fn start(to: std::net::SocketAddr) -> Relay {
            use std::sync::atomic::{AtomicUsize, Ordering};
            let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
            let addr = listener.local_addr().unwrap();
            let (frozen_below, accepted) =
                (Arc::new(AtomicUsize::new(0)), Arc::new(AtomicUsize::new(0)));
            let (f, n) = (frozen_below.clone(), accepted.clone());
            std::thread::spawn(move || {
                for down in listener.incoming() {
                    let Ok(down) = down else { return };
                    let id = n.fetch_add(1, Ordering::SeqCst);
                    let up = std::net::TcpStream::connect(to).unwrap();
                    for (mut from, mut to) in [
                        (down.try_clone().unwrap(), up.try_clone().unwrap()),
                        (up, down),
                    ] {
                        let f = f.clone();
                        std::thread::spawn(move || {
                            let mut buf = [0u8; 16 << 10];
                            while let Ok(k) = from.read(&mut buf) {
                                if k == 0 {
                                    break;
                                }
                                if id >= f.load(Ordering::SeqCst) {
                                    let _ = std::io::Write::write_all(&mut to, &buf[..k]);
                                }
                            }
                        });
                    }
                }
            });
            Relay {
                addr,
                frozen_below,
                accepted,
            }
        }

        fn freeze(&self) {
            let n = self.accepted.load(std::sync::atomic::Ordering::SeqCst);
            self.frozen_below
                .store(n, std::sync::atomic::Ordering::SeqCst);
        }
    }

    #[test]
    fn a_connection_that_stops_answering_is_found_dead_by_ping_and_dialled_again() {
        let server = tls_server(true);
        let relay = Relay::start(server.addr);
        let conn = server.connection(relay.addr);
        let mut target = target(&conn, tls(&conn).unwrap()).unwrap();
        target.ping = (Duration::from_millis(300), Duration::from_millis(300));
        let c = Client::with_target(&conn, target).unwrap();
        let events = watch(&c);
        events.recv_timeout(Duration::from_secs(10)).unwrap();
        // PINGs answered: the idle connection stays.
        std::thread::sleep(Duration::from_millis(1500));
        assert!(
            events.try_recv().is_err(),
            "a connection that answers its PINGs stays"
        );
        relay.freeze();
        let started = std::time::Instant::now();
        let ended = events
            .recv_timeout(Duration::from_secs(10))
            .expect("found dead");
        assert!(ended.starts_with("Err("), "{ended}");
        assert!(
            started.elapsed() < Duration::from_secs(5),
            "found by the PING, not the watch's silence deadline ({:?})",
            started.elapsed()
        );
        assert_eq!(echo(&c, "GET", "/after", None), "HTTP/2.0 GET /after 0");
        assert_eq!(server.accepts(), 2, "dialled again");
    }

    #[test]
    fn a_read_idle_time_of_zero_sends_no_ping() {
        // HTTP2_READ_IDLE_TIMEOUT_SECONDS=0: the same frozen connection is not found dead, the
        // watch waits on it (its silence deadline, 150 s, is far off).
        let server = tls_server(true);
        let relay = Relay::start(server.addr);
        let conn = server.connection(relay.addr);
        let mut target = target(&conn, tls(&conn).unwrap()).unwrap();
        target.ping = (Duration::ZERO, Duration::from_millis(300));
        let c = Client::with_target(&conn, target).unwrap();
        let events = watch(&c);
        events.recv_timeout(Duration::from_secs(10)).unwrap();
        relay.freeze();
        std::thread::sleep(Duration::from_millis(2500));
        assert!(
            events.try_recv().is_err(),
            "no PING, so nothing finds the frozen connection dead this soon"
        );
        assert_eq!(server.accepts(), 1);
    }
}
