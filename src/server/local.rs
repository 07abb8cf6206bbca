//! `/healthz`, `/pods` (a PodList with live statuses, as the kubelet serves it) and
//! `/manifests` (each manifest file, the pod it defines and the error that keeps its newest
//! content from being used, if any), answered from the host's state.

use hyper::{Request, Response, StatusCode};

use super::{Body, Host, json, reply};
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

/// Answers one request (pure over the host's state, so it is tested without sockets).
pub fn route(
    k: &dyn Host,
    #[cfg(feature = "file-source")] report: &Report,
    req: &Request<impl Sized>,
) -> Response<Body> {
    if req.method() != hyper::Method::GET {
        return reply(
            StatusCode::METHOD_NOT_ALLOWED,
            "text/plain",
            "only GET is served\n",
        );
    }
    match req.uri().path() {
        "/healthz" => match k.healthz() {
            Ok(()) => reply(StatusCode::OK, "text/plain", "ok"),
            Err(e) => reply(
                StatusCode::INTERNAL_SERVER_ERROR,
                "text/plain",
                format!("{e}\n"),
            ),
        },
        "/pods" | "/pods/" => json(&k.pod_list()),
        #[cfg(feature = "file-source")]
        "/manifests" => {
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
        _ => reply(StatusCode::NOT_FOUND, "text/plain", "404 page not found\n"),
    }
}
