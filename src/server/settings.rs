//! The node API's settings, as the command line and the `KubeletConfiguration` give them
//! (`port`, `address`, `tls*`, `authentication`, `authorization`). Built in every build, so the
//! flags parse the same with or without the server.

use std::net::IpAddr;
use std::path::PathBuf;
use std::time::Duration;

/// The node API's settings (`port`, `address`, `tls*`, `authentication`, `authorization`).
#[derive(Debug, Clone, PartialEq)]
pub struct Serving {
    /// `None`: the default, 10250 when joined to a cluster and off standalone; `Some(0)`: off.
    pub port: Option<u16>,
    pub address: IpAddr,
    pub tls_cert_file: Option<PathBuf>,
    pub tls_private_key_file: Option<PathBuf>,
    /// TLS 1.3 only when set; TLS 1.2 and 1.3 otherwise.
    pub tls13_only: bool,
    /// Ask the cluster for the serving certificate by CSR (`serverTLSBootstrap`); self-signed
    /// until it is issued.
    pub server_tls_bootstrap: bool,
    pub client_ca_file: Option<PathBuf>,
    pub anonymous: bool,
    /// `None`: on when joined to a cluster.
    pub webhook_authn: Option<bool>,
    pub webhook_cache_ttl: Duration,
    /// `None`: Webhook when joined to a cluster, else AlwaysAllow.
    pub authorization: Option<AuthorizationMode>,
    pub authorized_ttl: Duration,
    pub unauthorized_ttl: Duration,
}

/// `--authorization-mode`, `authorization.mode`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum AuthorizationMode {
    Webhook,
    AlwaysAllow,
}

impl AuthorizationMode {
    pub fn parse(s: &str) -> Result<Self, String> {
        match s {
            "Webhook" => Ok(AuthorizationMode::Webhook),
            "AlwaysAllow" => Ok(AuthorizationMode::AlwaysAllow),
            _ => Err("must be Webhook or AlwaysAllow".into()),
        }
    }

    /// The mode in force: the one set, else Webhook when joined to a cluster.
    pub fn or_default(set: Option<Self>, joined: bool) -> Self {
        match set {
            Some(m) => m,
            None if joined => AuthorizationMode::Webhook,
            None => AuthorizationMode::AlwaysAllow,
        }
    }

    /// Its name in flags and in the `KubeletConfiguration`.
    pub fn name(self) -> &'static str {
        match self {
            AuthorizationMode::Webhook => "Webhook",
            AuthorizationMode::AlwaysAllow => "AlwaysAllow",
        }
    }
}

/// `--tls-min-version`, `tlsMinVersion`: whether TLS 1.3 only.
pub fn parse_tls_version(s: &str) -> Result<bool, String> {
    match s {
        "" | "VersionTLS12" => Ok(false),
        "VersionTLS13" => Ok(true),
        "VersionTLS10" | "VersionTLS11" => Err("picolet serves TLS 1.2 and 1.3 only".into()),
        _ => Err("must be VersionTLS12 or VersionTLS13".into()),
    }
}

impl Default for Serving {
    fn default() -> Self {
        Serving {
            port: None,
            address: IpAddr::from([0, 0, 0, 0]),
            tls_cert_file: None,
            tls_private_key_file: None,
            tls13_only: false,
            server_tls_bootstrap: false,
            client_ca_file: None,
            anonymous: false,
            webhook_authn: None,
            webhook_cache_ttl: Duration::from_secs(120),
            authorization: None,
            authorized_ttl: Duration::from_secs(300),
            unauthorized_ttl: Duration::from_secs(30),
        }
    }
}
