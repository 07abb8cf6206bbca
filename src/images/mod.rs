//! Images put on the node without a registry: archives in the preload directory
//! (`--image-preload-dir`), read and checked (`archive`), imported into containerd's image
//! store through containerd's own API (`containerd`; the CRI has no import call), and pinned so
//! image GC never removes them. Upstream's kubelet has no such step; see docs/images.md.

pub mod archive;
pub mod containerd;
pub mod preload;
pub mod pull_list;
pub mod record;
