//! TLS for HTTPS probes and hooks (feature `https-probes`): rustls with ring, and no
//! verification of the server's certificate, as the kubelet's prober does not verify it
//! (`InsecureSkipVerify`). The handshake signatures are still checked (`crate::tls`), so the
//! connection is encrypted to whoever holds the key the server presented.

use std::sync::{Arc, OnceLock};

use futures_rustls::rustls::ClientConfig;
use futures_rustls::rustls::pki_types::ServerName;

fn config() -> Result<Arc<ClientConfig>, String> {
    static CONFIG: OnceLock<Arc<ClientConfig>> = OnceLock::new();
    if let Some(c) = CONFIG.get() {
        return Ok(c.clone());
    }
    let c = crate::tls::client_config(crate::tls::ServerCheck::AnyCert, None, &[])
        .map_err(|e| e.to_string())?;
    Ok(CONFIG.get_or_init(|| c).clone())
}

/// Runs the TLS handshake over an open connection.
pub async fn connect(
    tcp: smol::Async<std::net::TcpStream>,
    host: &str,
) -> Result<futures_rustls::client::TlsStream<smol::Async<std::net::TcpStream>>, String> {
    let name = ServerName::try_from(host.to_owned()).map_err(|e| e.to_string())?;
    futures_rustls::TlsConnector::from(config()?)
        .connect(name, tcp)
        .await
        .map_err(|e| e.to_string())
}
