//! The node's end of the apiserver network proxy (Konnectivity): an agent that dials out to a
//! `konnectivity-server`, so that the apiserver reaches a node behind NAT (logs, exec,
//! port-forward, metrics scrapes) through a tunnel the node opened.
//!
//! One task on the executor holds one gRPC stream (`AgentService/Connect`, HTTP/2 over TLS)
//! to the server. For each `DIAL_REQ` the server sends, the agent opens the TCP connection
//! asked for (the node's own address at the node API's port goes to the node API on loopback;
//! anything else only when the allow-list names it), answers `DIAL_RSP` with a connection id,
//! and relays `DATA` both ways until either side closes (`CLOSE_REQ` from the server, `CLOSE_RSP`
//! from the agent). Many connections share the one stream.
//!
//! Flow control: data towards a local connection waits in a small queue per connection; when
//! that queue is full the agent stops reading the stream, so HTTP/2's window holds the server
//! back (as upstream's agent blocks on its channel). Data from a local connection waits for
//! room in the stream's send queue, so a slow link holds the local socket back.
//!
//! When the stream ends (server restart, link cut, keepalive ping unanswered) every relayed
//! connection is closed and the agent dials again after the apiserver client's full-jitter
//! backoff (`apiclient::backoff`), forever: a node with no server does no harm.
//!
//! `settings` (the `Tunnel` settings the options fill, in every build) and `agent` (feature
//! `konnectivity`: the agent itself).

#[cfg(feature = "konnectivity")]
mod agent;
mod settings;

#[cfg(feature = "konnectivity")]
pub use agent::*;
pub use settings::Tunnel;
