//! The TLS client settings every client of picolet shares (rustls on ring): the apiserver client
//! (feature `apiserver`), the Konnectivity agent (feature `konnectivity`) and HTTPS probes and
//! hooks (feature `https-probes`). One place for the verifier that accepts any server
//! certificate while still checking the handshake's signatures, for reading certificates out of
//! PEM text, and for building a `ClientConfig`; each caller words its own errors.

use std::sync::Arc;

use futures_rustls::rustls;
use rustls::client::danger::{HandshakeSignatureValid, ServerCertVerified, ServerCertVerifier};
use rustls::crypto::CryptoProvider;
#[cfg(feature = "apiserver")]
use rustls::pki_types::pem::{self, PemObject};
use rustls::pki_types::{CertificateDer, PrivateKeyDer, ServerName, UnixTime};
use rustls::{ClientConfig, DigitallySignedStruct, SignatureScheme};

/// How the server's certificate is checked.
pub(crate) enum ServerCheck {
    /// Verified against these roots, for the name dialed.
    #[cfg(feature = "apiserver")]
    Roots(rustls::RootCertStore),
    /// Not verified at all (the kubelet's HTTPS probes, `insecure-skip-tls-verify`); the
    /// handshake's signatures are still checked, so the connection is encrypted to whoever
    /// holds the key the server presented.
    AnyCert,
}

/// Why a `ClientConfig` could not be built.
#[derive(Debug)]
pub(crate) enum ConfigError {
    /// The provider offers none of the default protocol versions.
    Versions(rustls::Error),
    /// The client key does not go with the certificate, or is of a kind not supported.
    ClientAuth(rustls::Error),
}

impl std::fmt::Display for ConfigError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            ConfigError::Versions(e) | ConfigError::ClientAuth(e) => e.fmt(f),
        }
    }
}

/// A client's TLS settings: ring's algorithms, the default protocol versions (TLS 1.2 and
/// 1.3), `server` checking the server's certificate, `client_auth` (a chain and its key) as
/// the client's certificate if given, and `alpn` offered in that order.
pub(crate) fn client_config(
    server: ServerCheck,
    client_auth: Option<(Vec<CertificateDer<'static>>, PrivateKeyDer<'static>)>,
    alpn: &[&[u8]],
) -> Result<Arc<ClientConfig>, ConfigError> {
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    let b = ClientConfig::builder_with_provider(provider.clone())
        .with_safe_default_protocol_versions()
        .map_err(ConfigError::Versions)?;
    let b = match server {
        #[cfg(feature = "apiserver")]
        ServerCheck::Roots(roots) => b.with_root_certificates(roots),
        ServerCheck::AnyCert => b
            .dangerous()
            .with_custom_certificate_verifier(Arc::new(AnyCert(provider))),
    };
    let mut cfg = match client_auth {
        Some((chain, key)) => b
            .with_client_auth_cert(chain, key)
            .map_err(ConfigError::ClientAuth)?,
        None => b.with_no_client_auth(),
    };
    cfg.alpn_protocols = alpn.iter().map(|p| p.to_vec()).collect();
    Ok(Arc::new(cfg))
}

/// Why no certificates could be read from a PEM text.
#[cfg(feature = "apiserver")]
#[derive(Debug)]
pub(crate) enum PemError {
    /// A block that does not parse.
    Pem(pem::Error),
    /// No certificate block at all.
    NoCertificate,
}

#[cfg(feature = "apiserver")]
impl std::fmt::Display for PemError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            PemError::Pem(e) => e.fmt(f),
            PemError::NoCertificate => f.write_str("no PEM certificate found"),
        }
    }
}

/// The certificates of a PEM text (blocks of other kinds passed over); at least one.
#[cfg(feature = "apiserver")]
pub(crate) fn pem_certs(pem: &[u8]) -> Result<Vec<CertificateDer<'static>>, PemError> {
    let certs: Vec<_> = CertificateDer::pem_slice_iter(pem)
        .collect::<Result<_, _>>()
        .map_err(PemError::Pem)?;
    if certs.is_empty() {
        return Err(PemError::NoCertificate);
    }
    Ok(certs)
}

/// The first private key (EC, RSA or PKCS#8) of a PEM text.
#[cfg(feature = "apiserver")]
pub(crate) fn pem_key(pem: &[u8]) -> Result<PrivateKeyDer<'static>, pem::Error> {
    PrivateKeyDer::from_pem_slice(pem)
}

/// Accepts any server certificate; the handshake's signatures are still checked with the
/// provider's algorithms.
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
    ) -> Result<ServerCertVerified, rustls::Error> {
        Ok(ServerCertVerified::assertion())
    }
    fn verify_tls12_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &DigitallySignedStruct,
    ) -> Result<HandshakeSignatureValid, rustls::Error> {
        rustls::crypto::verify_tls12_signature(
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
    ) -> Result<HandshakeSignatureValid, rustls::Error> {
        rustls::crypto::verify_tls13_signature(
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

/// For tests: a server's TLS settings with a fresh self-signed chain for `localhost` and
/// 127.0.0.1 (`cn` its common name), no client authentication and no ALPN; and the PEM of the
/// CA that signed it.
#[cfg(all(test, feature = "apiserver"))]
pub(crate) fn test_server(cn: &str) -> (rustls::ServerConfig, String) {
    let now = crate::rt::now_nanos().div_euclid(1_000_000_000);
    let s = crate::pki::self_signed(
        cn,
        &["localhost".into()],
        &["127.0.0.1".parse().unwrap()],
        now,
    )
    .unwrap();
    let certs = pem_certs(s.cert_pem.as_bytes()).unwrap();
    let ca = crate::pki::pem("CERTIFICATE", &certs[1]);
    let key = pem_key(s.key_pem.as_bytes()).unwrap();
    let cfg = rustls::ServerConfig::builder_with_provider(Arc::new(
        rustls::crypto::ring::default_provider(),
    ))
    .with_safe_default_protocol_versions()
    .unwrap()
    .with_no_client_auth()
    .with_single_cert(certs, key)
    .unwrap();
    (cfg, ca)
}
