//! picolet: a small Kubernetes node agent for edge devices.
//!
//! `ARCHITECTURE.md` at the repository root maps the modules; `run` wires them.

pub mod admission;
mod agent;
pub mod allocation;
pub mod api;
#[cfg(feature = "apiserver")]
pub mod apiclient;
pub(crate) mod atomic_file;
pub(crate) mod atomic_writer;
#[cfg(feature = "apiserver")]
pub mod certificate;
pub mod cli;
#[cfg(feature = "apiserver")]
pub(crate) mod cluster;
pub mod cm;
pub mod config;
pub mod content_type;
pub mod credential_provider;
pub mod credentials;
pub mod cri;
pub mod declared_features;
pub mod events;
pub mod eviction;
pub(crate) mod hash;
pub mod images;
pub mod konnectivity;
pub(crate) mod kubecontainer;
pub mod kuberuntime;
pub mod limits;
pub mod logger;
pub mod logs;
pub mod malloc;
pub mod node;
pub mod nodeshutdown;
pub mod notify;
pub mod objects;
#[cfg(feature = "apiserver")]
pub mod pki;
pub mod pleg;
pub(crate) mod pod_manager;
pub(crate) mod pod_workers;
#[cfg(feature = "apiserver")]
pub mod podcertificate;
pub(crate) mod probe;
pub(crate) mod prober;
pub(crate) mod projection;
pub(crate) mod qos;
pub(crate) mod retry;
pub mod root_dir;
pub mod rt;
pub(crate) mod runtime_state;
#[cfg(feature = "local-api")]
pub(crate) mod server;
/// Without the local API, the server's settings alone: the flags parse the same.
#[cfg(not(feature = "local-api"))]
pub(crate) mod server {
    pub mod settings;
}
pub mod services;
pub mod sha256;
pub mod stats;
pub(crate) mod status;
pub(crate) mod sync_loop;
#[cfg(test)]
pub(crate) mod testdir;
#[cfg(any(feature = "apiserver", feature = "https-probes"))]
pub(crate) mod tls;
pub mod volume;

pub use agent::run;
/// The options' old path, which the fuzz targets and tests use.
pub use cli::options;
