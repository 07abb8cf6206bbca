//! The local HTTP API on 127.0.0.1 (the kubelet's healthz port, 10248), served by hyper on the
//! same executor: `/healthz`, `/pods` (a PodList with live statuses, as the kubelet serves it)
//! and `/manifests` (each manifest file, the pod it defines and the error that keeps its newest
//! content from being used, if any), `/containerLogs/{namespace}/{pod}/{container}` (a
//! container's log, streamed; see [`crate::logs`]); and the accounting: `/stats/summary` (the
//! Summary API), `/metrics`, `/metrics/cadvisor` and `/metrics/resource` (Prometheus text).

use std::net::{SocketAddr, TcpListener};
use std::rc::Rc;

use bytes::Bytes;
use http_body_util::{BodyExt, Full, StreamBody, combinators::UnsyncBoxBody};
use hyper::{Request, Response, StatusCode};

#[cfg(feature = "file-source")]
use crate::config::file::Report;
use crate::kubecontainer::ContainerState;
use crate::kuberuntime::instrumented::Ops;
use crate::rt;
use crate::stats::{self, expose, prom};
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

/// What the accounting endpoints read beside the agent's state.
pub struct StatsContext {
    pub provider: stats::Provider,
    pub ops: Rc<Ops>,
    pub machine: expose::Machine,
}

/// The agent's own figures for `/metrics`.
fn kubelet_metrics(k: &Kubelet, s: &StatsContext) -> String {
    let (mut running_pods, mut states) = (0, [0usize; 4]);
    {
        let cache = k.cache.borrow();
        for uid in cache.uids() {
            let Some(c) = cache.get(&uid) else { continue };
            running_pods += usize::from(
                c.status
                    .sandboxes
                    .iter()
                    .any(|s| s.state == crate::kubecontainer::SandboxState::Ready),
            );
            for ctr in &c.status.containers {
                states[match ctr.state {
                    ContainerState::Created => 0,
                    ContainerState::Running => 1,
                    ContainerState::Exited => 2,
                    ContainerState::Unknown => 3,
                }] += 1;
            }
        }
    }
    let pleg = k.pleg.metrics.borrow();
    let ops = s.ops.snapshot();
    #[allow(clippy::cast_precision_loss, reason = "seconds as f64")]
    let last_seen = pleg.last_seen.map(|n| n as f64 / 1e9);
    expose::kubelet(&expose::KubeletView {
        node_name: &k.rm.node().node_name,
        running_pods,
        containers: [
            ("created", states[0]),
            ("running", states[1]),
            ("exited", states[2]),
            ("unknown", states[3]),
        ],
        relist_duration: &pleg.duration,
        relist_interval: &pleg.interval,
        pleg_last_seen: last_seen,
        pod_start: &k.status.pod_start.borrow(),
        ops: &ops,
        process: expose::read_process(),
    })
}

/// Answers the accounting endpoints; `None` for any other path.
pub async fn stats_route(k: &Kubelet, s: &StatsContext, path: &str) -> Option<Response<Body>> {
    let text = |t: String| reply(StatusCode::OK, prom::CONTENT_TYPE, t);
    let pods = || stats::pods_from_cache(&k.cache.borrow());
    let node = &k.rm.node().node_name;
    Some(match path {
        "/stats/summary" | "/stats/summary/" => json(&s.provider.summary(node, pods()).await),
        "/metrics" => text(kubelet_metrics(k, s)),
        "/metrics/cadvisor" => {
            let snap = s.provider.snapshot(pods()).await;
            text(expose::cadvisor(&snap, &s.machine))
        }
        "/metrics/resource" => {
            let (snap, sum) = s.provider.snapshot_and_summary(node, pods()).await;
            text(expose::resource(&sum, snap.at))
        }
        _ => return None,
    })
}

/// Binds the local API; an error names the address.
pub fn bind(addr: SocketAddr) -> std::io::Result<smol::Async<TcpListener>> {
    smol::Async::<TcpListener>::bind(addr)
        .map_err(|e| std::io::Error::new(e.kind(), format!("binding the local API on {addr}: {e}")))
}

/// What the server answers with: a whole body, or a stream (container logs).
type Streamed = UnsyncBoxBody<Bytes, std::convert::Infallible>;

/// Answers `/containerLogs/{namespace}/{pod}/{container}?...`.
async fn container_logs(k: &Kubelet, path: &str, query: &str) -> Response<Streamed> {
    let text = |code: u16, msg: String| {
        let code = StatusCode::from_u16(code).unwrap_or(StatusCode::BAD_REQUEST);
        reply(code, "text/plain", format!("{msg}\n")).map(BodyExt::boxed_unsync)
    };
    let parts: Vec<&str> = path.split('/').collect();
    let [namespace, pod, container] = parts.as_slice() else {
        return text(
            400,
            "expected /containerLogs/{namespace}/{pod}/{container}".into(),
        );
    };
    if namespace.is_empty() || pod.is_empty() || container.is_empty() {
        return text(400, "missing namespace, pod or container name".into());
    }
    let opts = match crate::logs::read::parse_query(query, rt::now_nanos()) {
        Ok(o) => o,
        Err(e) => return text(e.code, e.message),
    };
    let located = {
        let pod_obj = k.pod_by_name(namespace, pod);
        crate::logs::locate(
            pod_obj.as_deref(),
            &k.cache.borrow(),
            &k.rm,
            pod,
            container,
            opts.previous,
        )
    };
    let at = match located {
        Ok(a) => a,
        Err((code, msg)) => return text(code, msg),
    };
    let (p, o) = (at.path.clone(), opts.clone());
    let reader = match rt::unblock(move || crate::logs::read::Reader::new(&p, &o)).await {
        Ok(r) => r,
        Err(e) => return text(400, e.to_string()),
    };
    let (tx, rx) = async_channel::bounded::<Bytes>(4);
    rt::spawn(crate::logs::stream(k.cache.clone(), at, reader, tx)).detach();
    let frames = futures_lite::StreamExt::map(rx, |b| {
        Ok::<_, std::convert::Infallible>(hyper::body::Frame::data(b))
    });
    Response::builder()
        .status(StatusCode::OK)
        .header("content-type", "text/plain")
        .body(StreamBody::new(frames).boxed_unsync())
        .unwrap_or_default()
}

/// Serves the local API forever.
pub async fn serve(
    listener: smol::Async<TcpListener>,
    k: Rc<Kubelet>,
    stats: Rc<StatsContext>,
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
        let (k, stats) = (k.clone(), stats.clone());
        #[cfg(feature = "file-source")]
        let report = report.clone();
        rt::spawn(async move {
            let svc = hyper::service::service_fn(move |req: Request<hyper::body::Incoming>| {
                let (k, stats) = (k.clone(), stats.clone());
                #[cfg(feature = "file-source")]
                let report = report.clone();
                async move {
                    if req.method() == hyper::Method::GET
                        && let Some(r) = stats_route(&k, &stats, req.uri().path()).await
                    {
                        return Ok::<_, std::convert::Infallible>(r.map(BodyExt::boxed_unsync));
                    }
                    let logs = req.uri().path().strip_prefix("/containerLogs/");
                    let resp = match logs {
                        Some(p) if req.method() == hyper::Method::GET => {
                            container_logs(&k, p, req.uri().query().unwrap_or("")).await
                        }
                        _ => route(
                            &k,
                            #[cfg(feature = "file-source")]
                            &report,
                            &req,
                        )
                        .map(BodyExt::boxed_unsync),
                    };
                    Ok(resp)
                }
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
