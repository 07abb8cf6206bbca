//! The layout under `--root-dir`, as upstream's `kubelet_getters.go` gives its own: every path
//! picolet keeps there is spelled here, once.

use std::path::{Path, PathBuf};

/// `--root-dir` (`/var/lib/kubelet` by default).
#[derive(Debug, Clone, Copy)]
pub struct RootDir<'a>(pub &'a Path);

impl RootDir<'_> {
    pub fn path(&self) -> &Path {
        self.0
    }

    /// `pki/`: the client and serving certificates asked of the cluster, and the node API's
    /// self-signed certificate.
    pub fn pki(&self) -> PathBuf {
        self.0.join("pki")
    }

    /// `static-pods/`: the last valid copy of each static pod's manifest.
    pub fn static_pods(&self) -> PathBuf {
        self.0.join("static-pods")
    }

    /// `checkpoints/`: what the node last had from the cluster.
    fn checkpoint(&self, name: &str) -> PathBuf {
        self.0.join("checkpoints").join(name)
    }

    /// `checkpoints/pods.json`: the API pods.
    pub fn pods_checkpoint(&self) -> PathBuf {
        self.checkpoint("pods.json")
    }

    /// `checkpoints/services.json`: the Services for the containers' service variables.
    pub fn services_checkpoint(&self) -> PathBuf {
        self.checkpoint("services.json")
    }

    /// `checkpoints/objects.json`: the ConfigMaps, Secrets and tokens the API pods use.
    pub fn objects_checkpoint(&self) -> PathBuf {
        self.checkpoint("objects.json")
    }

    /// `checkpoints/allocated_pods_state` (upstream's name): the resources allocated to each
    /// pod's containers and what they run with.
    pub fn allocation_checkpoint(&self) -> PathBuf {
        self.checkpoint("allocated_pods_state")
    }

    /// `pods/` (upstream's `getPodsDir`): one directory per pod, named by its UID.
    pub fn pods(&self) -> PathBuf {
        self.0.join("pods")
    }

    /// `pods/<uid>/` (upstream's `getPodDir`): the pod's volumes and `etc-hosts`.
    pub fn pod(&self, uid: &str) -> PathBuf {
        self.pods().join(uid)
    }

    /// `seccomp/`: the `Localhost` seccomp profiles.
    pub fn seccomp(&self) -> PathBuf {
        self.0.join("seccomp")
    }

    /// `images/`: image archives imported and pinned at start (`--image-preload-dir`'s
    /// default).
    pub fn images(&self) -> PathBuf {
        self.0.join("images")
    }

    /// `checkpoints/preloaded-images.json`: the image archives already imported or refused,
    /// by version, so a restart does not read them again.
    pub fn preloaded_images_record(&self) -> PathBuf {
        self.checkpoint("preloaded-images.json")
    }

    /// `image_manager/`: which credentials pulled which image (`pulling/`, `pulled/`), as
    /// upstream's pull manager keeps them.
    pub fn image_manager(&self) -> PathBuf {
        self.0.join("image_manager")
    }

    /// `config.json`: the node's registry credentials, in Docker's format.
    pub fn registry_credentials(&self) -> PathBuf {
        self.0.join("config.json")
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_layout() {
        let r = RootDir(Path::new("/var/lib/kubelet"));
        let cases = [
            (r.pki(), "/var/lib/kubelet/pki"),
            (r.images(), "/var/lib/kubelet/images"),
            (
                r.preloaded_images_record(),
                "/var/lib/kubelet/checkpoints/preloaded-images.json",
            ),
            (r.static_pods(), "/var/lib/kubelet/static-pods"),
            (
                r.pods_checkpoint(),
                "/var/lib/kubelet/checkpoints/pods.json",
            ),
            (
                r.services_checkpoint(),
                "/var/lib/kubelet/checkpoints/services.json",
            ),
            (
                r.objects_checkpoint(),
                "/var/lib/kubelet/checkpoints/objects.json",
            ),
            (
                r.allocation_checkpoint(),
                "/var/lib/kubelet/checkpoints/allocated_pods_state",
            ),
            (r.pod("u-1"), "/var/lib/kubelet/pods/u-1"),
            (r.seccomp(), "/var/lib/kubelet/seccomp"),
            (r.registry_credentials(), "/var/lib/kubelet/config.json"),
        ];
        for (got, want) in cases {
            assert_eq!(got, Path::new(want));
        }
    }
}
