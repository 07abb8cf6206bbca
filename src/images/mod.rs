//! Images put on the node without a registry: image archives read and checked (`archive`),
//! imported through containerd's own API (`containerd`; the CRI has no import call).

pub mod archive;
pub mod containerd;
pub mod sha256;
