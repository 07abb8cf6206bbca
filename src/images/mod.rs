//! Images put on the node without a registry: image archives read and checked (`archive`).

pub mod archive;
pub mod sha256;
