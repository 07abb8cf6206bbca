//! The connection to the apiserver: one long-lived HTTP/2 connection (ALPN `h2`) carrying every
//! request and watch of a [`Client`](super::Client) and its clones as streams, as the kubelet's
//! client does; HTTP/1.1 connections, one request each at a time, when the server does not offer
//! `h2` (or for an `http://` test server).
//!
//! The connection lives on a thread of its own running a local executor (hyper's client is
//! async); blocking callers hand it requests through a channel and read the answer from one.
//! Every deadline (the whole call, the answer's head, each read of a watch) is kept here, on
//! the connection's side, so a caller blocked on its channel always comes back.
//!
//! A dead HTTP/2 connection is found by PING, as the kubelet's client does
//! (`HTTP2_READ_IDLE_TIMEOUT_SECONDS` 30, `HTTP2_PING_TIMEOUT_SECONDS` 15 in apimachinery's
//! `pkg/util/net`): after [`READ_IDLE`] with nothing read a PING goes out, and no answer within
//! [`PING_TIMEOUT`] closes the connection; its calls and watches fail at once, and the next
//! request dials a new one. Both are read from the environment as client-go reads them
//! ([`ping_settings`]). Dialling is on demand, one dial at a time; a failed dial fails the
//! requests waiting for it, and their callers retry with their own backoff.

use std::cell::RefCell;
use std::net::{SocketAddr, TcpStream};
use std::rc::Rc;
use std::sync::Arc;
use std::time::{Duration, Instant};

use bytes::Bytes;
use futures_rustls::rustls;
use http_body_util::{BodyExt, Full};
use hyper::client::conn::{http1, http2};

use crate::rt;

use super::{CONNECT_TIMEOUT, Deadlines, IDLE_AGE, IO_BUFFER};

/// Nothing read on the HTTP/2 connection for this long sends a PING (client-go's
/// `HTTP2_READ_IDLE_TIMEOUT_SECONDS` default).
pub const READ_IDLE: Duration = Duration::from_secs(30);
/// A PING unanswered for this long closes the connection (client-go's
/// `HTTP2_PING_TIMEOUT_SECONDS` default).
pub const PING_TIMEOUT: Duration = Duration::from_secs(15);
/// The PING's read idle time and answer deadline from client-go's environment variables
/// `HTTP2_READ_IDLE_TIMEOUT_SECONDS` and `HTTP2_PING_TIMEOUT_SECONDS` (each a whole number of
/// seconds; unset or empty: [`READ_IDLE`], [`PING_TIMEOUT`]); a read idle time of 0 sends no
/// PING at all, as client-go's. A value that does not parse keeps the default and is told in
/// the second part, as client-go warns.
pub fn ping_settings(
    read_idle: Option<&str>,
    ping_timeout: Option<&str>,
) -> ((Duration, Duration), Vec<String>) {
    let mut warnings = Vec::new();
    let mut read = |name: &str, v: Option<&str>, default: Duration| match v {
        None | Some("") => default,
        Some(v) => match v.trim().parse::<u64>() {
            Ok(s) => Duration::from_secs(s),
            Err(e) => {
                warnings.push(format!(
                    "{name}={v:?}: {e}; the default {}s is used",
                    default.as_secs()
                ));
                default
            }
        },
    };
    let idle = read("HTTP2_READ_IDLE_TIMEOUT_SECONDS", read_idle, READ_IDLE);
    let timeout = read("HTTP2_PING_TIMEOUT_SECONDS", ping_timeout, PING_TIMEOUT);
    ((idle, timeout), warnings)
}

/// Flow-control windows: how much of an answer the server may send before it is read. A
/// window update costs 13 bytes; the windows bound what a slow reader leaves buffered.
const STREAM_WINDOW: u32 = 256 << 10;
const CONNECTION_WINDOW: u32 = 1 << 20;
/// Pieces of an answer queued for the caller before the connection stops reading it.
pub const QUEUE: usize = 4;
/// Idle HTTP/1.1 connections kept for the next call.
const MAX_IDLE_H1: usize = 2;

/// What the caller hears back: the answer's head (status code and `Content-Type`), then its
/// body in pieces.
pub enum Event {
    Head(u16, Option<String>),
    Data(Bytes),
    End,
    Error(String),
}

/// One request handed to the connection.
pub struct Job {
    pub req: http::Request<Full<Bytes>>,
    pub deadlines: Deadlines,
    pub reply: async_channel::Sender<Event>,
}

pub enum Msg {
    Job(Box<Job>),
    /// Close every connection, in use or idle: their calls and watches fail at once.
    Close,
    /// Dial later connections with these TLS settings (new credentials), and close the old.
    Tls(Option<Arc<rustls::ClientConfig>>),
}

/// Where and how to dial.
pub struct Target {
    pub host: String,
    pub port: u16,
    /// `None` for an `http://` server.
    pub tls: Option<Arc<rustls::ClientConfig>>,
    /// The name the server's certificate is checked against.
    pub server_name: String,
    /// [`READ_IDLE`] and [`PING_TIMEOUT`] ([`ping_settings`]; shorter in tests); a zero read
    /// idle time sends no PING.
    pub ping: (Duration, Duration),
}

/// The connection thread's handle: dropping every clone of it ends the thread.
pub fn start(target: Target) -> std::io::Result<async_channel::Sender<Msg>> {
    let (tx, rx) = async_channel::unbounded();
    std::thread::Builder::new()
        .name("apiserver".into())
        .spawn(move || rt::block_on(serve(target, rx)))?;
    Ok(tx)
}

enum Sender {
    H2(http2::SendRequest<Full<Bytes>>),
    H1(http1::SendRequest<Full<Bytes>>),
}

/// The connections of now; [`Msg::Close`] replaces it with an empty one, dropping (and so
/// ending) every connection and every request on them.
#[derive(Default)]
struct Generation {
    h2: Option<http2::SendRequest<Full<Bytes>>>,
    /// The server answered ALPN without `h2` (or is `http://`): HTTP/1.1 from now on.
    h1_only: bool,
    idle_h1: Vec<(http1::SendRequest<Full<Bytes>>, Instant)>,
    /// The connections' driver tasks and the requests' tasks: dropped, they end.
    tasks: Vec<rt::Task<()>>,
}

struct Link {
    target: RefCell<Target>,
    now: RefCell<Generation>,
    /// Held while dialling, so concurrent requests share one new HTTP/2 connection.
    dialling: smol::lock::Mutex<()>,
}

async fn serve(target: Target, rx: async_channel::Receiver<Msg>) {
    let link = Rc::new(Link {
        target: RefCell::new(target),
        now: RefCell::default(),
        dialling: smol::lock::Mutex::new(()),
    });
    while let Ok(msg) = rx.recv().await {
        match msg {
            Msg::Job(job) => {
                let task = rt::spawn(run(link.clone(), job));
                let mut now = link.now.borrow_mut();
                now.tasks.retain(|t| !t.is_finished());
                now.tasks.push(task);
            }
            Msg::Close => link.close(),
            Msg::Tls(tls) => {
                link.target.borrow_mut().tls = tls;
                link.close();
            }
        }
    }
    link.close();
}

/// One request, within its whole deadline; an error goes to the caller as the last event.
async fn run(link: Rc<Link>, job: Box<Job>) {
    let Job {
        req,
        deadlines,
        reply,
    } = *job;
    let message = match rt::timeout(deadlines.whole, exchange(&link, req, deadlines, &reply)).await
    {
        Ok(Ok(())) => return,
        Ok(Err(e)) => e,
        Err(_) => format!("timeout: the call took over {:?}", deadlines.whole),
    };
    // The caller reads every event it was sent; one that stopped reading is gone.
    let _ = reply.send(Event::Error(message)).await;
}

async fn exchange(
    link: &Rc<Link>,
    mut req: http::Request<Full<Bytes>>,
    d: Deadlines,
    reply: &async_channel::Sender<Event>,
) -> Result<(), String> {
    let head = d.head.unwrap_or(d.whole);
    let (resp, h1) = rt::timeout(head, async {
        match link.sender().await? {
            Sender::H2(mut s) => {
                s.ready().await.map_err(|e| format!("connection: {e}"))?;
                let r = s.send_request(req).await;
                Ok::<_, String>((r, None))
            }
            Sender::H1(mut s) => {
                // HTTP/1.1 takes the path alone and the server in a Host header.
                let uri = req.uri().clone();
                if let Some(a) = uri.authority() {
                    let host = http::HeaderValue::from_str(a.as_str())
                        .map_err(|e| format!("server {a}: {e}"))?;
                    req.headers_mut().insert(http::header::HOST, host);
                }
                if let Some(pq) = uri.path_and_query() {
                    *req.uri_mut() = pq.as_str().parse().map_err(|e| format!("path {pq}: {e}"))?;
                }
                let r = s.send_request(req).await;
                Ok((r, Some(s)))
            }
        }
    })
    .await
    .map_err(|_| format!("timeout: no response header within {head:?}"))??;
    let resp = resp.map_err(|e| format!("no response header: {e}"))?;
    let gone = |_| "the caller stopped reading".to_owned();
    let content_type = resp
        .headers()
        .get(http::header::CONTENT_TYPE)
        .and_then(|v| v.to_str().ok())
        .map(str::to_owned);
    reply
        .send(Event::Head(resp.status().as_u16(), content_type))
        .await
        .map_err(gone)?;
    let mut body = resp.into_body();
    loop {
        let frame = match d.per_read {
            Some(t) => rt::timeout(t, body.frame())
                .await
                .map_err(|_| format!("timeout: nothing read for {t:?}"))?,
            None => body.frame().await,
        };
        match frame {
            None => break,
            Some(Err(e)) => return Err(format!("reading the response: {e}")),
            Some(Ok(f)) => {
                if let Ok(data) = f.into_data()
                    && !data.is_empty()
                {
                    reply.send(Event::Data(data)).await.map_err(gone)?;
                }
            }
        }
    }
    reply.send(Event::End).await.map_err(gone)?;
    // An HTTP/1.1 connection read to the end of its answer serves the next call.
    if let Some(mut s) = h1
        && rt::timeout(Duration::from_secs(1), s.ready())
            .await
            .is_ok_and(|r| r.is_ok())
    {
        let mut now = link.now.borrow_mut();
        if now.idle_h1.len() < MAX_IDLE_H1 {
            now.idle_h1.push((s, rt::now()));
        }
    }
    Ok(())
}

impl Link {
    /// Ends every connection and every request of now.
    fn close(&self) {
        let old = std::mem::take(&mut *self.now.borrow_mut());
        drop(old);
    }

    fn ready_h2(&self) -> Option<http2::SendRequest<Full<Bytes>>> {
        let now = self.now.borrow();
        now.h2.as_ref().filter(|s| !s.is_closed()).cloned()
    }

    fn idle_h1(&self) -> Option<http1::SendRequest<Full<Bytes>>> {
        let mut now = self.now.borrow_mut();
        while let Some((s, since)) = now.idle_h1.pop() {
            if !s.is_closed()
                && s.is_ready()
                && rt::now().saturating_duration_since(since) < IDLE_AGE
            {
                return Some(s);
            }
        }
        None
    }

    fn h1_only(&self) -> bool {
        self.now.borrow().h1_only
    }

    /// A connection to send on: the HTTP/2 one, an idle HTTP/1.1 one, or a new one.
    async fn sender(self: &Rc<Self>) -> Result<Sender, String> {
        if let Some(s) = self.ready_h2() {
            return Ok(Sender::H2(s));
        }
        if self.h1_only() {
            if let Some(s) = self.idle_h1() {
                return Ok(Sender::H1(s));
            }
            return self.dial().await;
        }
        let _dialling = self.dialling.lock().await;
        if let Some(s) = self.ready_h2() {
            return Ok(Sender::H2(s));
        }
        if self.h1_only()
            && let Some(s) = self.idle_h1()
        {
            return Ok(Sender::H1(s));
        }
        self.dial().await
    }

    async fn dial(self: &Rc<Self>) -> Result<Sender, String> {
        rt::timeout(CONNECT_TIMEOUT, self.dial_within())
            .await
            .map_err(|_| format!("connecting: timeout after {CONNECT_TIMEOUT:?}"))?
    }

    async fn dial_within(self: &Rc<Self>) -> Result<Sender, String> {
        let (host, port, tls, name, ping) = {
            let t = self.target.borrow();
            (
                t.host.clone(),
                t.port,
                t.tls.clone(),
                t.server_name.clone(),
                t.ping,
            )
        };
        let mut failed = String::from("no address");
        let mut tcp = None;
        for addr in resolve(&host, port).await? {
            match smol::Async::<TcpStream>::connect(addr).await {
                Ok(s) => {
                    tcp = Some(s);
                    break;
                }
                Err(e) => failed = format!("connecting to {addr}: {e}"),
            }
        }
        let tcp = tcp.ok_or(failed)?;
        tcp.get_ref().set_nodelay(true).ok();
        let Some(tls) = tls else {
            self.now.borrow_mut().h1_only = true;
            return self.h1(tcp).await;
        };
        let sn = rustls::pki_types::ServerName::try_from(name.clone())
            .map_err(|e| format!("server name {name:?}: {e}"))?;
        let tls = futures_rustls::TlsConnector::from(tls)
            .connect(sn, tcp)
            .await
            .map_err(|e| format!("TLS handshake: {e}"))?;
        if tls.get_ref().1.alpn_protocol() != Some(b"h2") {
            log::info!("apiserver: the server does not offer HTTP/2; using HTTP/1.1");
            self.now.borrow_mut().h1_only = true;
            return self.h1(tls).await;
        }
        let (sender, conn) = http2::Builder::new(rt::HyperExecutor)
            .timer(rt::HyperTimer)
            .keep_alive_interval((!ping.0.is_zero()).then_some(ping.0))
            .keep_alive_timeout(ping.1)
            .keep_alive_while_idle(true)
            .initial_stream_window_size(STREAM_WINDOW)
            .initial_connection_window_size(CONNECTION_WINDOW)
            .max_header_list_size(u32::try_from(IO_BUFFER / 2).unwrap_or(u32::MAX))
            .handshake(rt::HyperIo(tls))
            .await
            .map_err(|e| format!("HTTP/2 handshake: {e}"))?;
        let driver = rt::spawn(async move {
            match conn.await {
                Ok(()) => log::debug!("apiserver: connection closed"),
                Err(e) => log::info!("apiserver: connection lost: {e}"),
            }
        });
        let mut now = self.now.borrow_mut();
        now.tasks.push(driver);
        now.h2 = Some(sender.clone());
        Ok(Sender::H2(sender))
    }

    async fn h1<T>(&self, io: T) -> Result<Sender, String>
    where
        T: futures_lite::AsyncRead + futures_lite::AsyncWrite + Unpin + 'static,
    {
        let (sender, conn) = http1::Builder::new()
            .max_buf_size(IO_BUFFER)
            .handshake(rt::HyperIo(io))
            .await
            .map_err(|e| format!("HTTP/1.1: {e}"))?;
        let driver = rt::spawn(async move {
            if let Err(e) = conn.await {
                log::debug!("apiserver: connection closed: {e}");
            }
        });
        self.now.borrow_mut().tasks.push(driver);
        Ok(Sender::H1(sender))
    }
}

/// The server's addresses: an IP address needs no lookup; a name is looked up with the system
/// resolver on the blocking pool.
async fn resolve(host: &str, port: u16) -> Result<Vec<SocketAddr>, String> {
    if let Ok(ip) = host.parse::<std::net::IpAddr>() {
        return Ok(vec![SocketAddr::new(ip, port)]);
    }
    let h = host.to_owned();
    let found = rt::unblock(move || {
        std::net::ToSocketAddrs::to_socket_addrs(&(h.as_str(), port)).map(Iterator::collect)
    })
    .await
    .map_err(|e| format!("looking up {host}: {e}"))?;
    let found: Vec<SocketAddr> = found;
    if found.is_empty() {
        return Err(format!("looking up {host}: no address"));
    }
    Ok(found)
}

/// The body of an answer, read on the caller's thread as the connection delivers it.
pub struct Body {
    rx: async_channel::Receiver<Event>,
    piece: Bytes,
    ended: bool,
}

impl Body {
    pub fn new(rx: async_channel::Receiver<Event>) -> Body {
        Body {
            rx,
            piece: Bytes::new(),
            ended: false,
        }
    }
}

impl std::io::Read for Body {
    fn read(&mut self, buf: &mut [u8]) -> std::io::Result<usize> {
        while self.piece.is_empty() {
            if self.ended || buf.is_empty() {
                return Ok(0);
            }
            match self.rx.recv_blocking() {
                Ok(Event::Data(b)) => self.piece = b,
                Ok(Event::End) => self.ended = true,
                Ok(Event::Error(e)) => return Err(std::io::Error::other(e)),
                Ok(Event::Head(..)) => return Err(std::io::Error::other("a second response head")),
                Err(_) => {
                    return Err(std::io::Error::new(
                        std::io::ErrorKind::ConnectionAborted,
                        "the connection to the apiserver was closed",
                    ));
                }
            }
        }
        let n = buf.len().min(self.piece.len());
        buf[..n].copy_from_slice(&self.piece.split_to(n));
        Ok(n)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn addresses_resolve_without_a_lookup_and_names_with_the_system_resolver() {
        rt::block_on(async {
            assert_eq!(
                resolve("10.0.0.7", 6443).await.unwrap(),
                ["10.0.0.7:6443".parse::<SocketAddr>().unwrap()]
            );
            assert_eq!(
                resolve("fd00::7", 443).await.unwrap(),
                ["[fd00::7]:443".parse::<SocketAddr>().unwrap()]
            );
            // /etc/hosts has localhost everywhere.
            let local = resolve("localhost", 6443).await.unwrap();
            assert!(local.iter().all(|a| a.port() == 6443), "{local:?}");
            assert!(!local.is_empty());
        });
    }
}
