//! The pod sources the options ask for, checked against what this build has.

use super::cluster;
use crate::cli::options::Options;

pub(super) struct Sources {
    /// `--pod-manifest-path`.
    pub manifests: Option<std::path::PathBuf>,
    /// The cluster joined through `--kubeconfig`.
    pub cluster: Option<cluster::Join>,
}

pub(super) fn open(o: &Options) -> Result<Sources, String> {
    let manifests = o.pod_manifest_path.clone();
    if manifests.is_some() && !cfg!(feature = "file-source") {
        return Err("--pod-manifest-path: this picolet was built without the file source".into());
    }
    let cluster = cluster::connect(o)?;
    if manifests.is_none() && cluster.is_none() {
        return Err(
            "no pod source configured: set --pod-manifest-path (or staticPodPath in \
                    --config) and/or --kubeconfig"
                .into(),
        );
    }
    Ok(Sources { manifests, cluster })
}
