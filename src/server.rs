//! The local HTTP API on 127.0.0.1 (the kubelet's healthz port, 10248), served by hyper on the
//! same executor: `/healthz`, `/pods` (a PodList with live statuses, as the kubelet serves it)
//! and `/manifests` (each manifest file, the pod it defines and the error that keeps its newest
//! content from being used, if any).

use std::net::{SocketAddr, TcpListener};
use std::rc::Rc;

use bytes::Bytes;
use http_body_util::Full;
use hyper::{Request, Response, StatusCode};

#[cfg(feature = "file-source")]
use crate::config::file::Report;
use crate::rt;
use crate::sync_loop::Kubelet;

type Body = Full<Bytes>;

fn reply(code: StatusCode, content_type: &str, body: impl Into<Bytes>) -> Response<Body> {
    Response::builder()
        .status(code)
        .header("content-type", content_type)
        .body(Full::new(body.into()))
        .unwrap_or_default()
}

fn json(v: &impl serde::Serialize) -> Response<Body> {
    match serde_json::to_vec(v) {
        Ok(b) => reply(StatusCode::OK, "application/json", b),
        Err(e) => reply(
            StatusCode::INTERNAL_SERVER_ERROR,
            "text/plain",
            e.to_string(),
        ),
    }
}

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

/// Answers one request (pure over the agent's state, so it is tested without sockets).
pub fn route(
    k: &Kubelet,
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

/// Binds the local API; an error names the address.
pub fn bind(addr: SocketAddr) -> std::io::Result<smol::Async<TcpListener>> {
    smol::Async::<TcpListener>::bind(addr)
        .map_err(|e| std::io::Error::new(e.kind(), format!("binding the local API on {addr}: {e}")))
}

/// Serves the local API forever.
pub async fn serve(
    listener: smol::Async<TcpListener>,
    k: Rc<Kubelet>,
    #[cfg(feature = "file-source")] report: Report,
) {
    loop {
        let (stream, _) = match listener.accept().await {
            Ok(s) => s,
            Err(e) => {
                log::warn!("local API: accept: {e}");
                rt::sleep(std::time::Duration::from_millis(100)).await;
                continue;
            }
        };
        let k = k.clone();
        #[cfg(feature = "file-source")]
        let report = report.clone();
        rt::spawn(async move {
            let svc = hyper::service::service_fn(move |req: Request<hyper::body::Incoming>| {
                let resp = route(
                    &k,
                    #[cfg(feature = "file-source")]
                    &report,
                    &req,
                );
                async move { Ok::<_, std::convert::Infallible>(resp) }
            });
            let conn = hyper::server::conn::http1::Builder::new()
                .timer(rt::HyperTimer)
                .serve_connection(rt::HyperIo(stream), svc);
            if let Err(e) = conn.await {
                log::debug!("local API connection: {e}");
            }
        })
        .detach();
    }
}
