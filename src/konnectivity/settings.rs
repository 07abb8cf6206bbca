//! The Konnectivity agent's settings, read by the options whatever the build has.

use std::path::PathBuf;
use std::time::Duration;

/// The Konnectivity agent's settings, in the upstream agent's flag names.
#[derive(Debug, Clone, PartialEq)]
pub struct Tunnel {
    /// Empty: no agent.
    pub host: String,
    pub port: u16,
    /// CA bundle the server's certificate is verified against (`--ca-cert`).
    pub ca_cert: Option<PathBuf>,
    /// Client certificate and key (`--agent-cert`, `--agent-key`).
    pub agent_cert: Option<PathBuf>,
    pub agent_key: Option<PathBuf>,
    /// A token sent as `Authorization: Bearer`, read at each connection.
    pub token_path: Option<PathBuf>,
    /// `None`: the node's name.
    pub agent_id: Option<String>,
    /// `None`: `host=<node name>&ipv4=<node IP>` (or `ipv6=`).
    pub agent_identifiers: Option<String>,
    /// HTTP/2 ping period on the stream; an unanswered ping ends it.
    pub keepalive: Duration,
    /// Destinations dialed besides the node API (`host:port`, or `*` for any).
    pub allowed: Vec<String>,
}

impl Default for Tunnel {
    fn default() -> Self {
        Tunnel {
            host: String::new(),
            port: 8091,
            ca_cert: None,
            agent_cert: None,
            agent_key: None,
            token_path: None,
            agent_id: None,
            agent_identifiers: None,
            keepalive: Duration::from_secs(60),
            allowed: Vec::new(),
        }
    }
}
