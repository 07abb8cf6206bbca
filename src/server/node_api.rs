//! The node API on `--port` (10250): the kubelet's HTTPS server for the apiserver and for
//! metrics scrapers. Every request is authenticated and authorized (`auth`), then answered as
//! the local API answers it (`/healthz`, `/pods`, the accounting, `/containerLogs`), plus
//! `/configz` and the streaming endpoints (`streaming`). TLS is rustls on ring, the stack the
//! apiserver client already links.

use std::net::TcpListener;
use std::rc::Rc;
use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;
use futures_rustls::rustls;
use http_body_util::BodyExt;
use hyper::{Request, Response};

use super::auth::{Auth, User, attributes};
use super::routes::Listener;
use super::{Context, Error, Streamed};
use crate::rt;

/// A TLS handshake must finish within this.
const HANDSHAKE_TIMEOUT: Duration = Duration::from_secs(10);

/// What the node API serves from.
pub struct NodeApi {
    pub ctx: Rc<Context>,
    pub auth: Auth,
    /// `/configz`'s body.
    pub configz: Bytes,
}

/// The serving certificate of now, swapped whole when a new one is issued
/// (`serverTLSBootstrap`): handshakes after the swap present the new one, connections already
/// open keep theirs.
#[derive(Debug)]
pub struct Serving(std::sync::RwLock<Arc<rustls::sign::CertifiedKey>>);

impl Serving {
    /// The certificate chain and key of PEM texts; `what` names them in errors.
    pub fn key_of(
        cert_pem: &[u8],
        key_pem: &[u8],
        what: &str,
    ) -> Result<Arc<rustls::sign::CertifiedKey>, String> {
        let chain = crate::tls::pem_certs(cert_pem).map_err(|e| format!("{what}: {e}"))?;
        let key_der = crate::tls::pem_key(key_pem)
            .map_err(|e| format!("{what}: no usable PEM private key: {e}"))?;
        let provider = rustls::crypto::ring::default_provider();
        let key = provider
            .key_provider
            .load_private_key(key_der)
            .map_err(|e| format!("{what}: {e}"))?;
        let ck = rustls::sign::CertifiedKey::new(chain, key);
        ck.keys_match().map_err(|e| format!("{what}: {e}"))?;
        Ok(Arc::new(ck))
    }

    pub fn new(key: Arc<rustls::sign::CertifiedKey>) -> Arc<Serving> {
        Arc::new(Serving(std::sync::RwLock::new(key)))
    }

    /// Presents `key` from the next handshake on.
    pub fn set(&self, key: Arc<rustls::sign::CertifiedKey>) {
        *self
            .0
            .write()
            .unwrap_or_else(std::sync::PoisonError::into_inner) = key;
    }
}

impl rustls::server::ResolvesServerCert for Serving {
    fn resolve(
        &self,
        _hello: rustls::server::ClientHello<'_>,
    ) -> Option<Arc<rustls::sign::CertifiedKey>> {
        Some(
            self.0
                .read()
                .unwrap_or_else(std::sync::PoisonError::into_inner)
                .clone(),
        )
    }
}

/// Reads a serving certificate chain and key from PEM files.
pub fn serving_from_files(
    cert: &std::path::Path,
    key: &std::path::Path,
) -> Result<Arc<Serving>, String> {
    let read = |p: &std::path::Path| {
        crate::limits::read_file(p, &crate::limits::Limits::CONFIG)
            .map_err(|e| format!("{}: {e}", p.display()))
    };
    let k = Serving::key_of(
        &read(cert)?,
        &read(key)?,
        &format!("{} with {}", cert.display(), key.display()),
    )?;
    Ok(Serving::new(k))
}

/// The server's TLS settings: the serving certificate of now, TLS 1.2 and 1.3 (or 1.3 only),
/// and client certificates verified against `client_ca` when given (optional: a request may
/// authenticate with a token instead).
pub fn tls_config(
    serving: Arc<Serving>,
    client_ca: Option<&std::path::Path>,
    tls13_only: bool,
) -> Result<Arc<rustls::ServerConfig>, String> {
    let read = |p: &std::path::Path| {
        crate::limits::read_file(p, &crate::limits::Limits::CONFIG)
            .map_err(|e| format!("{}: {e}", p.display()))
    };
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    let versions: &[&rustls::SupportedProtocolVersion] = if tls13_only {
        &[&rustls::version::TLS13]
    } else {
        &[&rustls::version::TLS12, &rustls::version::TLS13]
    };
    let b = rustls::ServerConfig::builder_with_provider(provider.clone())
        .with_protocol_versions(versions)
        .map_err(|e| format!("TLS settings: {e}"))?;
    let b = match client_ca {
        Some(ca) => {
            let pem = read(ca)?;
            let certs =
                crate::tls::pem_certs(&pem).map_err(|e| format!("{}: {e}", ca.display()))?;
            let mut roots = rustls::RootCertStore::empty();
            for c in certs {
                roots.add(c).map_err(|e| format!("{}: {e}", ca.display()))?;
            }
            let v = rustls::server::WebPkiClientVerifier::builder_with_provider(
                Arc::new(roots),
                provider,
            )
            .allow_unauthenticated()
            .build()
            .map_err(|e| format!("{}: {e}", ca.display()))?;
            b.with_client_cert_verifier(v)
        }
        None => b.with_no_client_auth(),
    };
    let mut cfg = b.with_cert_resolver(serving);
    // HTTP/1.1 only: exec, attach and port-forward upgrade the connection.
    cfg.alpn_protocols = vec![b"http/1.1".to_vec()];
    Ok(Arc::new(cfg))
}

/// Binds the node API; an error names the address.
pub fn bind(addr: std::net::SocketAddr) -> Result<smol::Async<TcpListener>, String> {
    smol::Async::<TcpListener>::bind(addr)
        .map_err(|e| format!("binding the node API on {addr}: {e}"))
}

/// Serves the node API forever.
pub async fn serve(
    listener: smol::Async<TcpListener>,
    tls: Arc<rustls::ServerConfig>,
    api: Rc<NodeApi>,
) {
    let acceptor = futures_rustls::TlsAcceptor::from(tls);
    loop {
        let (stream, peer) = match listener.accept().await {
            Ok(s) => s,
            Err(e) => {
                log::warn!("node API: accept: {e}");
                rt::sleep(Duration::from_millis(100)).await;
                continue;
            }
        };
        // Streams carry small frames both ways (exec's, port-forward's): no Nagle delay.
        stream.get_ref().set_nodelay(true).ok();
        let (api, acceptor) = (api.clone(), acceptor.clone());
        rt::spawn(async move {
            let tls = match rt::timeout(HANDSHAKE_TIMEOUT, acceptor.accept(stream)).await {
                Ok(Ok(s)) => s,
                Ok(Err(e)) => {
                    log::debug!("node API: TLS handshake with {peer}: {e}");
                    return;
                }
                Err(_) => {
                    log::debug!("node API: TLS handshake with {peer} timed out");
                    return;
                }
            };
            let cert_user: Option<User> = tls
                .get_ref()
                .1
                .peer_certificates()
                .and_then(|c| c.first())
                .and_then(|c| User::from_certificate(c));
            let cert_user = Rc::new(cert_user);
            let svc = hyper::service::service_fn(move |req: Request<hyper::body::Incoming>| {
                let (api, cert_user) = (api.clone(), cert_user.clone());
                async move {
                    Ok::<_, std::convert::Infallible>(
                        handle(&api, cert_user.as_ref().as_ref(), req).await,
                    )
                }
            });
            let conn = hyper::server::conn::http1::Builder::new()
                .timer(rt::HyperTimer)
                .header_read_timeout(Duration::from_secs(30))
                .serve_connection(rt::HyperIo(tls), svc)
                .with_upgrades();
            if let Err(e) = conn.await {
                log::debug!("node API connection from {peer}: {e}");
            }
        })
        .detach();
    }
}

/// Authenticates, authorizes and answers one request.
pub async fn handle<B>(
    api: &NodeApi,
    cert_user: Option<&User>,
    req: Request<B>,
) -> Response<Streamed> {
    if let Err(e) = admit(api, cert_user, &req).await {
        log::debug!("node API: {} {}: {e}", req.method(), req.uri().path());
        return e.response().map(BodyExt::boxed_unsync);
    }
    super::dispatch(&api.ctx, Listener::NodeApi, Some(&api.configz), req).await
}

/// Who sends `req`, and whether they may: 401, 403 or 500 in the kubelet's words when not.
async fn admit<B>(api: &NodeApi, cert_user: Option<&User>, req: &Request<B>) -> Result<(), Error> {
    let authorization = req
        .headers()
        .get(hyper::header::AUTHORIZATION)
        .and_then(|v| v.to_str().ok());
    let user = api.auth.authenticate(cert_user, authorization).await?;
    api.auth
        .authorize(&user, &attributes(req.method(), req.uri().path()))
        .await
}
