use std::cell::{Cell, RefCell};
use std::collections::HashMap;
use std::future::Future;
use std::net::{IpAddr, SocketAddr, TcpStream};
use std::pin::Pin;
use std::rc::Rc;
use std::sync::Arc;
use std::task::{Context, Poll};
use std::time::Duration;

use bytes::Bytes;
use futures_lite::{AsyncReadExt, AsyncWriteExt, StreamExt};
use futures_rustls::rustls;
use hyper::client::conn::http2::{self, SendRequest};
use rustls::pki_types::ServerName;

use super::Tunnel;
use crate::apiclient::backoff::{Jitter, backoff_delay};
use crate::rt;

/// The agent protocol's messages and client, generated from `proto/konnectivity.proto`.
#[allow(clippy::all, missing_docs)]
pub mod proto {
    include!(concat!(env!("OUT_DIR"), "/_.rs"));
}

use proto::{Packet, PacketType, packet::Payload};

/// How long dialing a local destination may take (upstream's agent: 5 s).
const DIAL_TIMEOUT: Duration = Duration::from_secs(5);
/// How long connecting to the server (TCP, TLS, HTTP/2, the stream's headers) may take.
const CONNECT_TIMEOUT: Duration = Duration::from_secs(15);
/// Chunks queued towards one local connection before the stream stops being read.
const CONN_QUEUE: usize = 16;
/// Packets queued towards the server.
const SEND_QUEUE: usize = 64;
/// The largest read from a local connection, sent as one DATA packet.
const READ_CHUNK: usize = 16 * 1024;

/// Where requests go: the node's own addresses at the node API's port are dialed at `local`.
#[derive(Debug, Clone)]
pub struct Routes {
    /// The names and addresses the apiserver knows the node by.
    pub node_addresses: Vec<String>,
    pub node_api_port: u16,
    /// Where the node API listens on this host.
    pub local: SocketAddr,
    pub allowed: Vec<String>,
}

impl Routes {
    /// The address to dial for `address` (`host:port`), or why it is refused.
    pub fn resolve(&self, address: &str) -> Result<String, String> {
        let (host, port) = split_host_port(address)
            .ok_or_else(|| format!("address {address:?} is not host:port"))?;
        if port == self.node_api_port
            && (self.node_addresses.iter().any(|a| a == host) || is_loopback(host))
        {
            return Ok(self.local.to_string());
        }
        if self
            .allowed
            .iter()
            .any(|a| a == "*" || a == address || a == &format!("{host}:{port}"))
        {
            return Ok(address.to_owned());
        }
        Err(format!(
            "dial to {address} not allowed by the agent (only the node API at port {} and \
             --proxy-allowed-destinations)",
            self.node_api_port
        ))
    }
}

fn is_loopback(host: &str) -> bool {
    host == "localhost" || host.parse::<IpAddr>().is_ok_and(|ip| ip.is_loopback())
}

/// `host:port` or `[v6]:port`.
fn split_host_port(a: &str) -> Option<(&str, u16)> {
    let (host, port) = a.rsplit_once(':')?;
    let host = host
        .strip_prefix('[')
        .and_then(|h| h.strip_suffix(']'))
        .unwrap_or(host);
    if host.is_empty() {
        return None;
    }
    Some((host, port.parse().ok()?))
}

/// Checks the settings and reads the TLS material, so a bad flag fails at start.
pub fn tls_config(s: &Tunnel) -> Result<Arc<rustls::ClientConfig>, String> {
    let read = |p: &std::path::Path| {
        crate::limits::read_file(p, &crate::limits::Limits::CONFIG)
            .map_err(|e| format!("{}: {e}", p.display()))
    };
    let Some(ca) = &s.ca_cert else {
        return Err(
            "--proxy-server-host needs --ca-cert: the CA the server's certificate is \
                    verified against"
                .into(),
        );
    };
    let mut roots = rustls::RootCertStore::empty();
    for c in
        crate::tls::pem_certs(&read(ca)?).map_err(|e| format!("--ca-cert {}: {e}", ca.display()))?
    {
        roots
            .add(c)
            .map_err(|e| format!("--ca-cert {}: {e}", ca.display()))?;
    }
    let client_auth = match (&s.agent_cert, &s.agent_key) {
        (Some(cert), Some(key)) => {
            let certs = crate::tls::pem_certs(&read(cert)?)
                .map_err(|e| format!("--agent-cert {}: {e}", cert.display()))?;
            let k = crate::tls::pem_key(&read(key)?)
                .map_err(|e| format!("--agent-key {}: {e}", key.display()))?;
            Some((certs, k))
        }
        (None, None) => {
            if s.token_path.is_none() {
                return Err("--proxy-server-host needs a credential: --agent-cert and \
                            --agent-key, or --service-account-token-path"
                    .into());
            }
            None
        }
        _ => return Err("--agent-cert and --agent-key go together: set both or neither".into()),
    };
    // gRPC servers insist on HTTP/2 being negotiated.
    crate::tls::client_config(crate::tls::ServerCheck::Roots(roots), client_auth, &[b"h2"]).map_err(
        |e| match e {
            crate::tls::ConfigError::Versions(e) => format!("TLS settings: {e}"),
            crate::tls::ConfigError::ClientAuth(e) => {
                format!("--agent-cert with --agent-key: {e}")
            }
        },
    )
}

/// The agent, run until the process ends.
pub struct Agent {
    pub settings: Tunnel,
    pub routes: Routes,
    pub tls: Arc<rustls::ClientConfig>,
    pub agent_id: String,
    pub agent_identifiers: String,
    /// Counters for tests and logs.
    pub stats: Rc<Stats>,
}

/// What the agent has done, for tests and the log.
#[derive(Debug, Default)]
pub struct Stats {
    /// Streams established.
    pub connects: Cell<u64>,
    /// Connections dialed for the server.
    pub dials: Cell<u64>,
    /// Whether a stream is up now.
    pub up: Cell<bool>,
}

impl Agent {
    /// Holds a stream to the server, reconnecting after each loss with full-jitter backoff.
    pub async fn run(self: Rc<Self>) {
        let mut jitter = Jitter::new(&self.agent_id);
        let mut failures = 0u32;
        let target = format!("{}:{}", self.settings.host, self.settings.port);
        loop {
            let (t0, connects) = (rt::now(), self.stats.connects.get());
            match self.session().await {
                Ok(()) => log::info!("konnectivity: stream to {target} ended"),
                Err(e) => log::warn!("konnectivity: {target}: {e}"),
            }
            self.stats.up.set(false);
            // A stream that was established, or lived a while, was a success: start the backoff
            // afresh (a server that restarted is back within the first window, under 1 s).
            if self.stats.connects.get() != connects
                || rt::now().saturating_duration_since(t0) > Duration::from_secs(30)
            {
                failures = 0;
            }
            let wait = backoff_delay(failures, &mut jitter);
            failures = failures.saturating_add(1);
            log::debug!("konnectivity: dialing {target} again in {wait:?}");
            rt::sleep(wait).await;
        }
    }

    /// One stream: connect, serve it until it ends, close what it carried.
    async fn session(&self) -> Result<(), String> {
        let (sender, mut incoming, tx) = rt::timeout(CONNECT_TIMEOUT, self.connect())
            .await
            .map_err(|_| format!("connecting timed out after {CONNECT_TIMEOUT:?}"))??;
        self.stats.connects.set(self.stats.connects.get() + 1);
        self.stats.up.set(true);
        let conns: Conns = Rc::new(RefCell::new(HashMap::new()));
        let next_id = Cell::new(0i64);
        let result = loop {
            let pkt = match incoming.next().await {
                None => break Ok(()),
                Some(Err(s)) => break Err(format!("stream: {}", s.message())),
                Some(Ok(p)) => p,
            };
            self.handle(pkt, &tx, &conns, &next_id).await;
        };
        // The relayed connections end with the stream.
        for (_, c) in conns.borrow_mut().drain() {
            c.stream.get_ref().shutdown(std::net::Shutdown::Both).ok();
        }
        drop(sender);
        result
    }

    async fn connect(
        &self,
    ) -> Result<
        (
            SendRequest<tonic::body::Body>,
            tonic::Streaming<Packet>,
            async_channel::Sender<Packet>,
        ),
        String,
    > {
        let s = &self.settings;
        let tcp = smol::Async::<TcpStream>::connect(resolve(&s.host, s.port).await?)
            .await
            .map_err(|e| format!("connecting: {e}"))?;
        tcp.get_ref().set_nodelay(true).ok();
        let name = ServerName::try_from(s.host.clone())
            .map_err(|e| format!("server name {:?}: {e}", s.host))?;
        let tls = futures_rustls::TlsConnector::from(self.tls.clone())
            .connect(name, tcp)
            .await
            .map_err(|e| format!("TLS: {e}"))?;
        let (sender, conn) = http2::Builder::new(rt::HyperExecutor)
            .timer(rt::HyperTimer)
            .keep_alive_interval(s.keepalive)
            .keep_alive_timeout(s.keepalive.min(Duration::from_secs(20)))
            .keep_alive_while_idle(true)
            .handshake(rt::HyperIo(tls))
            .await
            .map_err(|e| format!("HTTP/2: {e}"))?;
        rt::spawn(async move {
            if let Err(e) = conn.await {
                log::debug!("konnectivity: connection closed: {e}");
            }
        })
        .detach();
        let (tx, rx) = async_channel::bounded::<Packet>(SEND_QUEUE);
        let mut req = tonic::Request::new(rx);
        let md = req.metadata_mut();
        let value = |v: &str, what: &str| {
            tonic::metadata::MetadataValue::try_from(v).map_err(|_| format!("{what} {v:?}"))
        };
        md.insert("agentid", value(&self.agent_id, "agent id")?);
        md.insert(
            "agentidentifiers",
            value(&self.agent_identifiers, "agent identifiers")?,
        );
        if let Some(p) = &s.token_path {
            let t = crate::limits::read_file(p, &crate::limits::Limits::CONFIG)
                .map_err(|e| format!("--service-account-token-path {}: {e}", p.display()))?;
            let t = String::from_utf8_lossy(&t);
            md.insert(
                "authorization",
                value(&format!("Bearer {}", t.trim()), "token")?,
            );
        }
        // HTTP/2 needs a scheme and an authority on each request.
        let origin = format!("https://{}:{}", s.host, s.port)
            .parse::<http::Uri>()
            .map_err(|e| format!("--proxy-server-host {:?}: {e}", s.host))?;
        let mut client = proto::agent_service_client::AgentServiceClient::with_origin(
            H2(sender.clone()),
            origin,
        );
        let resp = client
            .connect(req)
            .await
            .map_err(|s| format!("{:?}: {}", s.code(), s.message()))?;
        let md = resp.metadata();
        let server_id = md
            .get("serverid")
            .and_then(|v| v.to_str().ok())
            .unwrap_or("")
            .to_owned();
        let count = md
            .get("servercount")
            .and_then(|v| v.to_str().ok())
            .unwrap_or("1")
            .to_owned();
        log::info!(
            "konnectivity: connected to {}:{} (server {server_id:?}, {count} server(s)) as {:?}",
            s.host,
            s.port,
            self.agent_id
        );
        if count != "1" {
            log::info!(
                "konnectivity: the server reports {count} servers; picolet keeps one stream, to \
                 whichever server the address reaches"
            );
        }
        Ok((sender, resp.into_inner(), tx))
    }

    async fn handle(
        &self,
        pkt: Packet,
        tx: &async_channel::Sender<Packet>,
        conns: &Conns,
        next_id: &Cell<i64>,
    ) {
        match (PacketType::try_from(pkt.r#type), pkt.payload) {
            (Ok(PacketType::DialReq), Some(Payload::DialRequest(req))) => {
                next_id.set(next_id.get() + 1);
                let id = next_id.get();
                self.stats.dials.set(self.stats.dials.get() + 1);
                rt::spawn(dial(
                    req,
                    id,
                    self.routes.clone(),
                    tx.clone(),
                    conns.clone(),
                ))
                .detach();
            }
            (Ok(PacketType::Data), Some(Payload::Data(d))) => {
                let sink = conns.borrow().get(&d.connect_id).map(|c| c.tx.clone());
                match sink {
                    // Waits when the connection's queue is full: flow control.
                    Some(s) => {
                        if s.send(Bytes::from(d.data)).await.is_err() {
                            log::debug!(
                                "konnectivity: DATA for closing connection {}",
                                d.connect_id
                            );
                        }
                    }
                    None => {
                        send(tx, close_rsp(d.connect_id, "unrecognized connectID")).await;
                    }
                }
            }
            (Ok(PacketType::CloseReq), Some(Payload::CloseRequest(c))) => {
                if !close(conns, c.connect_id, tx).await {
                    send(tx, close_rsp(c.connect_id, "Unknown connectID")).await;
                }
            }
            (t, _) => log::debug!("konnectivity: ignoring packet {t:?}"),
        }
    }
}

type Conns = Rc<RefCell<HashMap<i64, Conn>>>;

/// One relayed local connection.
struct Conn {
    stream: Rc<smol::Async<TcpStream>>,
    tx: async_channel::Sender<Bytes>,
}

async fn send(tx: &async_channel::Sender<Packet>, p: Packet) {
    // An error means the stream is gone; the session's end closes everything.
    tx.send(p).await.ok();
}

fn close_rsp(id: i64, error: &str) -> Packet {
    Packet {
        r#type: PacketType::CloseRsp.into(),
        payload: Some(Payload::CloseResponse(proto::CloseResponse {
            error: error.to_owned(),
            connect_id: id,
        })),
    }
}

/// Closes connection `id` and tells the server; false when there was no such connection.
async fn close(conns: &Conns, id: i64, tx: &async_channel::Sender<Packet>) -> bool {
    let Some(c) = conns.borrow_mut().remove(&id) else {
        return false;
    };
    c.stream.get_ref().shutdown(std::net::Shutdown::Both).ok();
    send(tx, close_rsp(id, "")).await;
    true
}

async fn resolve(host: &str, port: u16) -> Result<SocketAddr, String> {
    if let Ok(ip) = host.parse::<IpAddr>() {
        return Ok(SocketAddr::new(ip, port));
    }
    let h = format!("{host}:{port}");
    let shown = h.clone();
    rt::unblock(move || std::net::ToSocketAddrs::to_socket_addrs(&h).map(|mut a| a.next()))
        .await
        .map_err(|e| format!("resolving {shown}: {e}"))?
        .ok_or_else(|| format!("resolving {shown}: no address"))
}

/// Dials the destination of a DIAL_REQ, answers DIAL_RSP, and relays until either side closes.
async fn dial(
    req: proto::DialRequest,
    id: i64,
    routes: Routes,
    tx: async_channel::Sender<Packet>,
    conns: Conns,
) {
    let answer = |connect_id: i64, error: String| Packet {
        r#type: PacketType::DialRsp.into(),
        payload: Some(Payload::DialResponse(proto::DialResponse {
            error,
            connect_id,
            random: req.random,
        })),
    };
    let opened = async {
        if !req.protocol.is_empty() && req.protocol != "tcp" {
            return Err(format!("protocol {:?} not supported", req.protocol));
        }
        let to = routes.resolve(&req.address)?;
        let (host, port) = split_host_port(&to).ok_or_else(|| format!("bad address {to}"))?;
        let addr = resolve(host, port).await?;
        rt::timeout(DIAL_TIMEOUT, smol::Async::<TcpStream>::connect(addr))
            .await
            .map_err(|_| format!("dial tcp {to}: i/o timeout"))?
            .map_err(|e| format!("dial tcp {to}: {e}"))
    }
    .await;
    // Every DATA packet is written as it comes: small TLS records of a handshake must not
    // wait for the previous one's ACK (Nagle).
    if let Ok(s) = &opened {
        s.get_ref().set_nodelay(true).ok();
    }
    let stream = match opened {
        Ok(s) => Rc::new(s),
        Err(e) => {
            log::debug!("konnectivity: dial {} refused: {e}", req.address);
            send(&tx, answer(0, e)).await;
            return;
        }
    };
    let (qtx, qrx) = async_channel::bounded::<Bytes>(CONN_QUEUE);
    conns.borrow_mut().insert(
        id,
        Conn {
            stream: stream.clone(),
            tx: qtx,
        },
    );
    log::debug!("konnectivity: connection {id} to {} open", req.address);
    send(&tx, answer(id, String::new())).await;
    // Server to local: write what arrives, in order.
    let w = stream.clone();
    rt::spawn(async move {
        while let Ok(b) = qrx.recv().await {
            if (&*w).write_all(&b).await.is_err() {
                break;
            }
        }
        w.get_ref().shutdown(std::net::Shutdown::Write).ok();
    })
    .detach();
    // Local to server: each read is one DATA packet; end of stream closes the connection.
    let mut buf = vec![0u8; READ_CHUNK];
    loop {
        match (&*stream).read(&mut buf).await {
            Ok(0) | Err(_) => break,
            Ok(n) => {
                let p = Packet {
                    r#type: PacketType::Data.into(),
                    payload: Some(Payload::Data(proto::Data {
                        connect_id: id,
                        error: String::new(),
                        data: buf[..n].to_vec(),
                    })),
                };
                if tx.send(p).await.is_err() {
                    break;
                }
            }
        }
    }
    close(&conns, id, &tx).await;
}

/// The gRPC client's transport: requests on one HTTP/2 connection.
#[derive(Clone)]
struct H2(SendRequest<tonic::body::Body>);

type BoxError = Box<dyn std::error::Error + Send + Sync>;

impl tower_service::Service<http::Request<tonic::body::Body>> for H2 {
    type Response = http::Response<hyper::body::Incoming>;
    type Error = BoxError;
    type Future = Pin<Box<dyn Future<Output = Result<Self::Response, BoxError>>>>;

    fn poll_ready(&mut self, _cx: &mut Context<'_>) -> Poll<Result<(), BoxError>> {
        Poll::Ready(Ok(()))
    }

    fn call(&mut self, req: http::Request<tonic::body::Body>) -> Self::Future {
        let mut s = self.0.clone();
        Box::pin(async move {
            s.ready().await?;
            Ok(s.send_request(req).await?)
        })
    }
}

/// The default agent identifiers: the node's name and address, as the server routes by.
pub fn default_identifiers(node_name: &str, node_ip: Option<IpAddr>) -> String {
    let mut s = format!("host={node_name}");
    match node_ip {
        Some(IpAddr::V4(ip)) => s.push_str(&format!("&ipv4={ip}")),
        Some(IpAddr::V6(ip)) => s.push_str(&format!("&ipv6={ip}")),
        None => {}
    }
    s
}

impl std::fmt::Debug for Agent {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Agent")
            .field(
                "server",
                &format_args!("{}:{}", self.settings.host, self.settings.port),
            )
            .field("agent_id", &self.agent_id)
            .finish()
    }
}

#[cfg(test)]
mod tests {
    //! The agent against an in-process server speaking the protocol at the gRPC wire: HTTP/2
    //! over TLS, length-prefixed `Packet`s both ways, the server's `serverid`/`servercount`
    //! headers; the "node API" it dials is a local echo server.
    use super::*;
    use std::convert::Infallible;
    use std::net::TcpListener;
    use std::path::PathBuf;

    use http_body_util::{BodyExt, StreamBody};
    use hyper::body::Frame;
    use prost::Message;

    /// One agent stream as the server sees it.
    struct Stream {
        headers: http::HeaderMap,
        from_agent: async_channel::Receiver<Packet>,
        to_agent: async_channel::Sender<Packet>,
    }

    impl Stream {
        async fn recv(&self) -> Packet {
            rt::timeout(Duration::from_secs(10), self.from_agent.recv())
                .await
                .expect("a packet from the agent within 10s")
                .expect("the agent's stream is open")
        }
        async fn send(&self, p: Packet) {
            self.to_agent.send(p).await.unwrap();
        }
    }

    struct Server {
        addr: SocketAddr,
        streams: async_channel::Receiver<Stream>,
        /// The accept loop and every connection: dropping them is the server going away.
        _tasks: Rc<RefCell<Vec<rt::Task<()>>>>,
    }

    impl Server {
        async fn next_stream(&self, within: Duration) -> Stream {
            rt::timeout(within, self.streams.recv())
                .await
                .expect("the agent connects in time")
                .unwrap()
        }
    }

    fn frame(p: &Packet) -> Bytes {
        let body = p.encode_to_vec();
        let mut v = Vec::with_capacity(5 + body.len());
        v.push(0);
        v.extend(u32::try_from(body.len()).unwrap().to_be_bytes());
        v.extend(body);
        Bytes::from(v)
    }

    struct Pki {
        dir: PathBuf,
        server: Arc<rustls::ServerConfig>,
    }

    fn pki(name: &str) -> Pki {
        let dir = std::env::temp_dir().join(format!(
            "picolet-konnectivity-{}-{name}",
            std::process::id()
        ));
        std::fs::create_dir_all(&dir).unwrap();
        let (mut cfg, ca) = crate::tls::test_server("proxy");
        std::fs::write(dir.join("ca.crt"), ca).unwrap();
        std::fs::write(dir.join("token"), "secret-token\n").unwrap();
        cfg.alpn_protocols = vec![b"h2".to_vec()];
        Pki {
            dir,
            server: Arc::new(cfg),
        }
    }

    fn serve(listener: smol::Async<TcpListener>, tls: Arc<rustls::ServerConfig>) -> Server {
        let addr = listener.get_ref().local_addr().unwrap();
        let (stx, srx) = async_channel::unbounded::<Stream>();
        let tasks: Rc<RefCell<Vec<rt::Task<()>>>> = Rc::default();
        let t = Rc::downgrade(&tasks);
        let accept = rt::spawn(async move {
            let acceptor = futures_rustls::TlsAcceptor::from(tls);
            loop {
                let Ok((tcp, _)) = listener.accept().await else {
                    continue;
                };
                let (acceptor, stx) = (acceptor.clone(), stx.clone());
                let Some(t) = t.upgrade() else { return };
                t.borrow_mut().push(rt::spawn(async move {
                    let Ok(tls) = acceptor.accept(tcp).await else {
                        return;
                    };
                    let svc = hyper::service::service_fn(
                        move |req: http::Request<hyper::body::Incoming>| {
                            let stx = stx.clone();
                            async move {
                                assert_eq!(req.uri().path(), "/AgentService/Connect");
                                let headers = req.headers().clone();
                                let (to_tx, to_rx) = async_channel::unbounded::<Packet>();
                                let (from_tx, from_rx) = async_channel::unbounded::<Packet>();
                                let mut body = req.into_body();
                                rt::spawn(async move {
                                    let mut buf = Vec::new();
                                    while let Some(Ok(f)) = body.frame().await {
                                        let Ok(d) = f.into_data() else { continue };
                                        buf.extend_from_slice(&d);
                                        while buf.len() >= 5 {
                                            let n =
                                                u32::from_be_bytes(buf[1..5].try_into().unwrap())
                                                    as usize;
                                            if buf.len() < 5 + n {
                                                break;
                                            }
                                            let p = Packet::decode(&buf[5..5 + n]).unwrap();
                                            buf.drain(..5 + n);
                                            if from_tx.send(p).await.is_err() {
                                                return;
                                            }
                                        }
                                    }
                                })
                                .detach();
                                stx.send(Stream {
                                    headers,
                                    from_agent: from_rx,
                                    to_agent: to_tx,
                                })
                                .await
                                .ok();
                                let body = StreamBody::new(
                                    to_rx.map(|p| Ok::<_, Infallible>(Frame::data(frame(&p)))),
                                );
                                Ok::<_, Infallible>(
                                    http::Response::builder()
                                        .header("content-type", "application/grpc")
                                        .header("serverid", "fake-server")
                                        .header("servercount", "1")
                                        .body(body)
                                        .unwrap(),
                                )
                            }
                        },
                    );
                    hyper::server::conn::http2::Builder::new(rt::HyperExecutor)
                        .timer(rt::HyperTimer)
                        .serve_connection(rt::HyperIo(tls), svc)
                        .await
                        .ok();
                }));
            }
        });
        tasks.borrow_mut().push(accept);
        Server {
            addr,
            streams: srx,
            _tasks: tasks,
        }
    }

    fn bind(addr: &str) -> smol::Async<TcpListener> {
        smol::Async::<TcpListener>::bind(addr.parse::<SocketAddr>().unwrap()).unwrap()
    }

    /// A listener on a port `probe::held_port(true)` holds.
    fn listen_beside_hold(addr: SocketAddr) -> smol::Async<TcpListener> {
        use nix::sys::socket::{Backlog, listen};
        let fd = crate::probe::loopback_socket(addr.port(), true);
        listen(&fd, Backlog::new(128).unwrap()).unwrap();
        smol::Async::new(TcpListener::from(fd)).unwrap()
    }

    /// A stand-in for the node API: echoes what it reads; counts connections that ended.
    fn echo() -> (SocketAddr, Rc<Cell<u32>>, rt::Task<()>) {
        let l = bind("127.0.0.1:0");
        let addr = l.get_ref().local_addr().unwrap();
        let ended = Rc::new(Cell::new(0));
        let e = ended.clone();
        let task = rt::spawn(async move {
            loop {
                let (s, _) = l.accept().await.unwrap();
                let e = e.clone();
                rt::spawn(async move {
                    let mut buf = vec![0u8; 8192];
                    loop {
                        match (&s).read(&mut buf).await {
                            Ok(0) | Err(_) => break,
                            Ok(n) => {
                                if (&s).write_all(&buf[..n]).await.is_err() {
                                    break;
                                }
                            }
                        }
                    }
                    e.set(e.get() + 1);
                })
                .detach();
            }
        });
        (addr, ended, task)
    }

    fn agent(server: SocketAddr, pki: &Pki, local: SocketAddr) -> Rc<Agent> {
        let settings = Tunnel {
            host: "127.0.0.1".into(),
            port: server.port(),
            ca_cert: Some(pki.dir.join("ca.crt")),
            token_path: Some(pki.dir.join("token")),
            ..Tunnel::default()
        };
        Rc::new(Agent {
            tls: tls_config(&settings).unwrap(),
            routes: Routes {
                node_addresses: vec!["edge-1".into(), "192.0.2.10".into()],
                node_api_port: 10250,
                local,
                allowed: vec![],
            },
            agent_id: "edge-1".into(),
            agent_identifiers: default_identifiers("edge-1", "192.0.2.10".parse().ok()),
            settings,
            stats: Rc::default(),
        })
    }

    fn dial_req(address: &str, random: i64) -> Packet {
        Packet {
            r#type: PacketType::DialReq.into(),
            payload: Some(Payload::DialRequest(proto::DialRequest {
                protocol: "tcp".into(),
                address: address.into(),
                random,
            })),
        }
    }

    fn data(id: i64, d: &[u8]) -> Packet {
        Packet {
            r#type: PacketType::Data.into(),
            payload: Some(Payload::Data(proto::Data {
                connect_id: id,
                error: String::new(),
                data: d.to_vec(),
            })),
        }
    }

    fn close_req(id: i64) -> Packet {
        Packet {
            r#type: PacketType::CloseReq.into(),
            payload: Some(Payload::CloseRequest(proto::CloseRequest {
                connect_id: id,
            })),
        }
    }

    fn dial_rsp(p: Packet) -> proto::DialResponse {
        assert_eq!(p.r#type, i32::from(PacketType::DialRsp), "{p:?}");
        match p.payload {
            Some(Payload::DialResponse(r)) => r,
            other => panic!("not a dial response: {other:?}"),
        }
    }

    fn close_rsp_of(p: Packet) -> proto::CloseResponse {
        assert_eq!(p.r#type, i32::from(PacketType::CloseRsp), "{p:?}");
        match p.payload {
            Some(Payload::CloseResponse(r)) => r,
            other => panic!("not a close response: {other:?}"),
        }
    }

    /// Reads DATA packets of connection `id` until `want` bytes came.
    async fn read_data(s: &Stream, id: i64, want: usize) -> Vec<u8> {
        let mut got = Vec::new();
        while got.len() < want {
            match s.recv().await.payload {
                Some(Payload::Data(d)) => {
                    assert_eq!(d.connect_id, id);
                    got.extend(d.data);
                }
                other => panic!("expected DATA, got {other:?}"),
            }
        }
        got
    }

    #[test]
    fn routes_send_the_node_api_home_and_refuse_the_rest() {
        let r = Routes {
            node_addresses: vec!["edge-1".into(), "192.0.2.10".into()],
            node_api_port: 10250,
            local: "127.0.0.1:10250".parse().unwrap(),
            allowed: vec!["10.0.0.5:9100".into()],
        };
        assert_eq!(r.resolve("192.0.2.10:10250").unwrap(), "127.0.0.1:10250");
        assert_eq!(r.resolve("edge-1:10250").unwrap(), "127.0.0.1:10250");
        assert_eq!(r.resolve("localhost:10250").unwrap(), "127.0.0.1:10250");
        assert_eq!(r.resolve("10.0.0.5:9100").unwrap(), "10.0.0.5:9100");
        let e = r.resolve("192.0.2.10:22").unwrap_err();
        assert!(
            e.contains("not allowed") && e.contains("192.0.2.10:22"),
            "{e}"
        );
        assert!(r.resolve("10.0.0.6:9100").is_err());
        assert!(r.resolve("no-port").unwrap_err().contains("not host:port"));
        let any = Routes {
            allowed: vec!["*".into()],
            ..r
        };
        assert_eq!(any.resolve("[fd00::1]:80").unwrap(), "[fd00::1]:80");
    }

    #[test]
    fn settings_without_a_ca_or_a_credential_are_refused_by_name() {
        let p = pki("settings");
        let e = tls_config(&Tunnel {
            host: "proxy".into(),
            ..Tunnel::default()
        })
        .unwrap_err();
        assert!(e.contains("--ca-cert"), "{e}");
        let e = tls_config(&Tunnel {
            host: "proxy".into(),
            ca_cert: Some(p.dir.join("ca.crt")),
            ..Tunnel::default()
        })
        .unwrap_err();
        assert!(e.contains("--service-account-token-path"), "{e}");
        let e = tls_config(&Tunnel {
            host: "proxy".into(),
            ca_cert: Some(p.dir.join("token")),
            token_path: Some(p.dir.join("token")),
            ..Tunnel::default()
        })
        .unwrap_err();
        assert!(e.contains("--ca-cert") && e.contains("token"), "{e}");
        let e = tls_config(&Tunnel {
            host: "proxy".into(),
            ca_cert: Some(p.dir.join("ca.crt")),
            agent_cert: Some(p.dir.join("ca.crt")),
            ..Tunnel::default()
        })
        .unwrap_err();
        assert!(e.contains("go together"), "{e}");
        std::fs::remove_dir_all(&p.dir).ok();
    }

    #[test]
    fn dials_relays_and_closes_over_the_stream() {
        let p = pki("relay");
        rt::block_on(async {
            let server = serve(bind("127.0.0.1:0"), p.server.clone());
            let (local, ended, _echo) = echo();
            let a = agent(server.addr, &p, local);
            let _run = rt::spawn(a.clone().run());
            let s = server.next_stream(Duration::from_secs(5)).await;
            assert_eq!(s.headers["agentid"], "edge-1");
            assert_eq!(s.headers["agentidentifiers"], "host=edge-1&ipv4=192.0.2.10");
            assert_eq!(s.headers["authorization"], "Bearer secret-token");
            assert_eq!(s.headers["content-type"], "application/grpc");

            s.send(dial_req("192.0.2.10:10250", 77)).await;
            let r = dial_rsp(s.recv().await);
            assert_eq!((r.random, r.error.as_str()), (77, ""));
            assert!(r.connect_id > 0);
            let id = r.connect_id;
            s.send(data(id, b"GET /healthz HTTP/1.1\r\n\r\n")).await;
            assert_eq!(
                read_data(&s, id, 25).await,
                b"GET /healthz HTTP/1.1\r\n\r\n"
            );
            s.send(close_req(id)).await;
            let c = close_rsp_of(s.recv().await);
            assert_eq!((c.connect_id, c.error.as_str()), (id, ""));
            // The local connection is closed too.
            rt::timeout(Duration::from_secs(5), async {
                while ended.get() == 0 {
                    rt::sleep(Duration::from_millis(10)).await;
                }
            })
            .await
            .expect("the local connection closes");

            // Refused destinations, unknown connections.
            s.send(dial_req("192.0.2.10:22", 78)).await;
            let r = dial_rsp(s.recv().await);
            assert_eq!((r.random, r.connect_id), (78, 0));
            assert!(r.error.contains("not allowed"), "{}", r.error);
            s.send(data(999, b"x")).await;
            let c = close_rsp_of(s.recv().await);
            assert_eq!(
                (c.connect_id, c.error.as_str()),
                (999, "unrecognized connectID")
            );
            s.send(close_req(998)).await;
            let c = close_rsp_of(s.recv().await);
            assert_eq!((c.connect_id, c.error.as_str()), (998, "Unknown connectID"));
            assert_eq!(a.stats.connects.get(), 1);
        });
        std::fs::remove_dir_all(&p.dir).ok();
    }

    #[test]
    fn a_dial_that_fails_answers_with_the_error() {
        let p = pki("dialfail");
        rt::block_on(async {
            let server = serve(bind("127.0.0.1:0"), p.server.clone());
            // Nothing listens here, and no other test can while it is held.
            let (_held, port) = crate::probe::refusing_port();
            let local = SocketAddr::from(([127, 0, 0, 1], port));
            let a = agent(server.addr, &p, local);
            let _run = rt::spawn(a.clone().run());
            let s = server.next_stream(Duration::from_secs(5)).await;
            s.send(dial_req("edge-1:10250", 5)).await;
            let r = dial_rsp(s.recv().await);
            assert_eq!((r.random, r.connect_id), (5, 0));
            assert!(r.error.contains("dial tcp"), "{}", r.error);
        });
        std::fs::remove_dir_all(&p.dir).ok();
    }

    #[test]
    fn many_connections_share_one_stream() {
        const N: i64 = 50;
        const SIZE: usize = 100 * 1024;
        let p = pki("many");
        rt::block_on(async {
            let server = serve(bind("127.0.0.1:0"), p.server.clone());
            let (local, ended, _echo) = echo();
            let a = agent(server.addr, &p, local);
            let _run = rt::spawn(a.clone().run());
            let s = server.next_stream(Duration::from_secs(5)).await;
            for i in 0..N {
                s.send(dial_req("192.0.2.10:10250", 1000 + i)).await;
            }
            let mut ids = HashMap::new();
            while ids.len() < usize::try_from(N).unwrap() {
                let r = dial_rsp(s.recv().await);
                assert_eq!(r.error, "");
                ids.insert(r.connect_id, r.random - 1000);
            }
            // Each connection gets its own payload, sent in chunks, interleaved with the others.
            let payload = |n: i64| -> Vec<u8> {
                (0..SIZE)
                    .map(|i| u8::try_from((i64::try_from(i).unwrap() * 7 + n) % 251).unwrap())
                    .collect()
            };
            // Made once: under qemu, making 100 KiB again for every chunk outlasts the timeouts.
            let payloads: HashMap<i64, Vec<u8>> = ids.values().map(|&n| (n, payload(n))).collect();
            let sender = {
                let to = s.to_agent.clone();
                let ids = ids.clone();
                let payloads = payloads.clone();
                rt::spawn(async move {
                    for chunk in 0..SIZE / 4096 {
                        for (&id, n) in &ids {
                            let d = &payloads[n];
                            to.send(data(id, &d[chunk * 4096..(chunk + 1) * 4096]))
                                .await
                                .unwrap();
                        }
                    }
                })
            };
            let mut got: HashMap<i64, Vec<u8>> = HashMap::new();
            let want = SIZE / 4096 * 4096;
            let mut done = 0;
            while done < ids.len() {
                match s.recv().await.payload {
                    Some(Payload::Data(d)) => {
                        let v = got.entry(d.connect_id).or_default();
                        v.extend(d.data);
                        if v.len() == want {
                            done += 1;
                        }
                    }
                    other => panic!("expected DATA, got {other:?}"),
                }
            }
            sender.await;
            for (id, n) in &ids {
                assert_eq!(got[id], payloads[n][..want], "connection {id}");
            }
            for id in ids.keys() {
                s.send(close_req(*id)).await;
            }
            let mut closed = 0;
            while closed < ids.len() {
                let c = close_rsp_of(s.recv().await);
                assert!(ids.contains_key(&c.connect_id));
                closed += 1;
            }
            rt::timeout(Duration::from_secs(5), async {
                while ended.get() < u32::try_from(N).unwrap() {
                    rt::sleep(Duration::from_millis(10)).await;
                }
            })
            .await
            .expect("every local connection closes");
            assert_eq!(a.stats.connects.get(), 1);
            assert_eq!(a.stats.dials.get(), u64::try_from(N).unwrap());
        });
        std::fs::remove_dir_all(&p.dir).ok();
    }

    #[test]
    fn a_local_close_is_reported_with_close_rsp() {
        let p = pki("localclose");
        rt::block_on(async {
            let server = serve(bind("127.0.0.1:0"), p.server.clone());
            // A "node API" that answers once and hangs up.
            let l = bind("127.0.0.1:0");
            let local = l.get_ref().local_addr().unwrap();
            let _srv = rt::spawn(async move {
                let (s, _) = l.accept().await.unwrap();
                (&s).write_all(b"bye").await.unwrap();
                s.get_ref().shutdown(std::net::Shutdown::Both).ok();
                // Hold the listener so the next accept does not race.
                std::future::pending::<()>().await;
            });
            let a = agent(server.addr, &p, local);
            let _run = rt::spawn(a.clone().run());
            let s = server.next_stream(Duration::from_secs(5)).await;
            s.send(dial_req("192.0.2.10:10250", 9)).await;
            let id = dial_rsp(s.recv().await).connect_id;
            assert_eq!(read_data(&s, id, 3).await, b"bye");
            let c = close_rsp_of(s.recv().await);
            assert_eq!((c.connect_id, c.error.as_str()), (id, ""));
        });
        std::fs::remove_dir_all(&p.dir).ok();
    }

    #[test]
    fn survives_the_server_going_away_and_reconnects() {
        let p = pki("restart");
        rt::block_on(async {
            // No server at first: the agent keeps trying, harmlessly. The port stays held
            // while the server is away, so no other test's listener takes it meanwhile.
            let (_held, port) = crate::probe::held_port(true);
            let addr = SocketAddr::from(([127, 0, 0, 1], port));
            let (local, ended, _echo) = echo();
            let a = agent(addr, &p, local);
            let _run = rt::spawn(a.clone().run());
            rt::sleep(Duration::from_millis(1500)).await;
            assert_eq!(a.stats.connects.get(), 0);
            assert!(!a.stats.up.get());

            // The server comes: the agent connects within its backoff (a wait below 8s after
            // at most four failures in 1.5s), then connecting may take up to CONNECT_TIMEOUT on
            // a loaded machine.
            let within = Duration::from_secs(8) + CONNECT_TIMEOUT + Duration::from_secs(5);
            let server = serve(listen_beside_hold(addr), p.server.clone());
            let s = server.next_stream(within).await;
            s.send(dial_req("192.0.2.10:10250", 1)).await;
            let id = dial_rsp(s.recv().await).connect_id;
            s.send(data(id, b"before")).await;
            assert_eq!(read_data(&s, id, 6).await, b"before");

            // The server restarts mid-stream: the relayed connection is closed...
            drop(s);
            drop(server);
            rt::timeout(Duration::from_secs(10), async {
                while ended.get() == 0 {
                    rt::sleep(Duration::from_millis(10)).await;
                }
            })
            .await
            .expect("the relayed connection closes with the stream");
            // ...and the agent comes back to the new server (a lived stream resets the
            // backoff to its first window, under 1s; a try before the new server listens
            // waits below 2s, then below 4s).
            let server = serve(listen_beside_hold(addr), p.server.clone());
            let s = server.next_stream(within).await;
            s.send(dial_req("192.0.2.10:10250", 2)).await;
            let r = dial_rsp(s.recv().await);
            assert_eq!(r.error, "");
            s.send(data(r.connect_id, b"after")).await;
            assert_eq!(read_data(&s, r.connect_id, 5).await, b"after");
            assert_eq!(a.stats.connects.get(), 2);
            assert!(a.stats.up.get());
        });
        std::fs::remove_dir_all(&p.dir).ok();
    }
}
