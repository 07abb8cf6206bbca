//! `/healthz`, `/pods` (a PodList with live statuses, as the kubelet serves it) and
//! `/manifests` (each manifest file, the pod it defines and the error that keeps its newest
//! content from being used, if any), answered from the host's state.

use hyper::{Response, StatusCode};

#[cfg(feature = "file-source")]
use super::json;
use super::{Body, Error, Host, reply};
#[cfg(feature = "file-source")]
use crate::config::file::Report;

#[cfg(feature = "file-source")]
#[derive(serde::Serialize)]
#[serde(rename_all = "camelCase")]
struct ManifestView {
    path: String,
    #[serde(skip_serializing_if = "Option::is_none")]
    pod: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    uid: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    error: Option<String>,
}

/// `/healthz`: `ok` while the PLEG relists and the loop turns, else the host's reason (500).
pub fn healthz(k: &dyn Host) -> Result<Response<Body>, Error> {
    k.healthz()?;
    Ok(reply(StatusCode::OK, "text/plain", "ok"))
}

/// `/manifests`: each manifest file, its pod and the error that keeps its newest content from
/// being used.
#[cfg(feature = "file-source")]
pub fn manifests(report: &Report) -> Response<Body> {
    let v: Vec<ManifestView> = report
        .borrow()
        .iter()
        .map(|m| ManifestView {
            path: m.path.display().to_string(),
            pod: m
                .pod
                .as_ref()
                .map(|p| format!("{}/{}", p.metadata.namespace, p.metadata.name)),
            uid: m.pod.as_ref().map(|p| p.metadata.uid.clone()),
            error: m.problem().map(str::to_owned),
        })
        .collect();
    json(&v)
}
