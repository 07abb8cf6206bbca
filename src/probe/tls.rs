//! TLS for HTTPS probes and hooks (feature `https-probes`): rustls with ring, and no
//! verification of the server's certificate, as the kubelet's prober does not verify it
//! (`InsecureSkipVerify`). The handshake signatures are still checked, so the connection is
//! encrypted to whoever holds the key the server presented.

use std::sync::{Arc, OnceLock};

use futures_rustls::rustls::client::danger::{
    HandshakeSignatureValid, ServerCertVerified, ServerCertVerifier,
};
use futures_rustls::rustls::crypto::{CryptoProvider, ring};
use futures_rustls::rustls::pki_types::{CertificateDer, ServerName, UnixTime};
use futures_rustls::rustls::{ClientConfig, DigitallySignedStruct, Error, SignatureScheme};

#[derive(Debug)]
struct AnyCert(Arc<CryptoProvider>);

impl ServerCertVerifier for AnyCert {
    fn verify_server_cert(
        &self,
        _: &CertificateDer<'_>,
        _: &[CertificateDer<'_>],
        _: &ServerName<'_>,
        _: &[u8],
        _: UnixTime,
    ) -> Result<ServerCertVerified, Error> {
        Ok(ServerCertVerified::assertion())
    }
    fn verify_tls12_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &DigitallySignedStruct,
    ) -> Result<HandshakeSignatureValid, Error> {
        futures_rustls::rustls::crypto::verify_tls12_signature(
            message,
            cert,
            dss,
            &self.0.signature_verification_algorithms,
        )
    }
    fn verify_tls13_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &DigitallySignedStruct,
    ) -> Result<HandshakeSignatureValid, Error> {
        futures_rustls::rustls::crypto::verify_tls13_signature(
            message,
            cert,
            dss,
            &self.0.signature_verification_algorithms,
        )
    }
    fn supported_verify_schemes(&self) -> Vec<SignatureScheme> {
        self.0.signature_verification_algorithms.supported_schemes()
    }
}

fn config() -> Result<Arc<ClientConfig>, String> {
    static CONFIG: OnceLock<Arc<ClientConfig>> = OnceLock::new();
    if let Some(c) = CONFIG.get() {
        return Ok(c.clone());
    }
    let provider = Arc::new(ring::default_provider());
    let c = ClientConfig::builder_with_provider(provider.clone())
        .with_safe_default_protocol_versions()
        .map_err(|e| e.to_string())?
        .dangerous()
        .with_custom_certificate_verifier(Arc::new(AnyCert(provider)))
        .with_no_client_auth();
    Ok(CONFIG.get_or_init(|| Arc::new(c)).clone())
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
