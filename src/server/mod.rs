//! The kubelet's HTTP APIs, served by hyper on the one executor.
//!
//! The server reads the agent only through [`Host`], which `sync_loop::Kubelet` implements: the
//! pods, their statuses, health, the figures `/metrics` reports, and where a container's log
//! is. It never holds the runtime manager, the PLEG cache or the status manager itself.
//!
//! - `routes`: the one route table both listeners serve from (path, methods, the Node
//!   subresources a request is authorized on, listeners, endpoint); `error`: what a request
//!   fails with, answered as HTTP in one place.
//! - `local`: `/healthz`, `/pods`, `/manifests`, answered from the host's state (pure).
//! - `stats`: `/stats/summary`, `/metrics`, `/metrics/cadvisor`, `/metrics/resource`.
//! - `logs`: `/containerLogs/{namespace}/{pod}/{container}`, streamed.
//! - `node_api` (feature `node-api`): the kubelet's HTTPS API on `--port`, each request
//!   authenticated and authorized by `auth`, with `/configz` and the streaming endpoints of
//!   `streaming` (exec, attach, port-forward proxied to the runtime's streaming server, `/run`).

#[cfg(feature = "node-api")]
pub mod auth;
mod error;
mod local;
mod logs;
#[cfg(feature = "node-api")]
pub mod node_api;
pub mod routes;
pub mod settings;
mod stats;
#[cfg(feature = "node-api")]
mod streaming;
#[cfg(test)]
mod tests;

use std::net::{SocketAddr, TcpListener};
use std::rc::Rc;

use bytes::Bytes;
use http_body_util::{BodyExt, Full, combinators::UnsyncBoxBody};
use hyper::{Request, Response, StatusCode};

#[cfg(feature = "file-source")]
use crate::config::file::Report;
use crate::rt;

pub use error::Error;
use routes::{Endpoint, Listener};
pub use stats::StatsContext;
#[cfg(test)]
pub use stats::stats_route;

/// What the server asks of the agent (upstream's `HostInterface`): a narrow, read-mostly view.
pub trait Host {
    /// The node's name.
    fn node_name(&self) -> String;
    /// `Ok` while the PLEG relists and the loop turns.
    fn healthz(&self) -> Result<(), Error>;
    /// The desired pods with their latest status.
    fn pod_list(&self) -> crate::api::PodList;
    /// The pods the runtime runs, for accounting.
    fn stats_pods(&self) -> Vec<crate::stats::PodRef>;
    /// The agent's own figures for `/metrics`.
    fn metrics(&self) -> HostMetrics;
    /// Each probe worker's totals, for `/metrics/probes`.
    fn probe_counts(&self) -> Vec<crate::prober::ProbeCounts>;
    /// Where a container's log is (not found, or a bad request when it has no log yet, with
    /// the kubelet's text).
    fn locate_log(
        &self,
        namespace: &str,
        pod: &str,
        container: &str,
        previous: bool,
    ) -> Result<crate::logs::Located, Error>;
    /// Sends a log to `tx` from `reader`, following it while the container runs.
    fn stream_log(
        &self,
        at: crate::logs::Located,
        reader: crate::logs::read::Reader,
        tx: async_channel::Sender<Bytes>,
    ) -> std::pin::Pin<Box<dyn Future<Output = ()>>>;
    /// The runtime's streaming URL running `cmd` in a running container.
    #[cfg(feature = "node-api")]
    fn exec_url(&self, t: Target, cmd: Vec<String>, s: Streams) -> Answer<String>;
    /// The runtime's streaming URL attached to a running container.
    #[cfg(feature = "node-api")]
    fn attach_url(&self, t: Target, s: Streams) -> Answer<String>;
    /// The runtime's streaming URL forwarding ports of a running pod.
    #[cfg(feature = "node-api")]
    fn port_forward_url(
        &self,
        namespace: &str,
        pod: &str,
        uid: Option<&str>,
        ports: Vec<i32>,
    ) -> Answer<String>;
    /// Runs `cmd` in a running container and returns what it wrote (`/run`).
    #[cfg(feature = "node-api")]
    fn run(&self, t: Target, cmd: Vec<String>) -> Answer<Vec<u8>>;
}

#[cfg(feature = "node-api")]
pub use crate::kuberuntime::streaming::Streams;

#[cfg(feature = "node-api")]
/// A container as a streaming request names it (`/exec/{namespace}/{pod}[/{uid}]/{container}`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Target<'a> {
    pub namespace: &'a str,
    pub pod: &'a str,
    pub uid: Option<&'a str>,
    pub container: &'a str,
}

#[cfg(feature = "node-api")]
/// An answer the host computes asynchronously, or why there is none.
pub type Answer<T> = std::pin::Pin<Box<dyn Future<Output = Result<T, Error>>>>;

/// The figures `/metrics` reports of the agent itself.
#[derive(Debug, Clone)]
pub struct HostMetrics {
    pub running_pods: usize,
    /// Containers per state: created, running, exited, unknown.
    pub containers: [usize; 4],
    pub relist: crate::pleg::RelistMetrics,
    pub pod_start: crate::stats::prom::Histogram,
}

/// What a listener serves from.
pub struct Context {
    pub host: Rc<dyn Host>,
    pub stats: Rc<StatsContext>,
    #[cfg(feature = "file-source")]
    pub report: Report,
}

type Body = Full<Bytes>;
/// What the server answers with: a whole body, or a stream (container logs).
type Streamed = UnsyncBoxBody<Bytes, std::convert::Infallible>;

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
        Err(e) => Error::from_source(e).response(),
    }
}

/// Answers one request on `on` from the route table; every failure is answered by
/// [`Error::response`]. `configz` is the node API's `/configz` body.
async fn dispatch<B>(
    ctx: &Context,
    on: Listener,
    configz: Option<&Bytes>,
    req: Request<B>,
) -> Response<Streamed> {
    match answer(ctx, on, configz, req).await {
        Ok(r) => r,
        Err(e) => e.response().map(BodyExt::boxed_unsync),
    }
}

async fn answer<B>(
    ctx: &Context,
    on: Listener,
    configz: Option<&Bytes>,
    req: Request<B>,
) -> Result<Response<Streamed>, Error> {
    let route = routes::find(on, req.method(), req.uri().path())?;
    let host = &*ctx.host;
    let whole = |r: Response<Body>| r.map(BodyExt::boxed_unsync);
    Ok(match route.endpoint {
        Endpoint::Healthz => whole(local::healthz(host)?),
        Endpoint::Pods => whole(json(&host.pod_list())),
        #[cfg(feature = "file-source")]
        Endpoint::Manifests => whole(local::manifests(&ctx.report)),
        Endpoint::StatsSummary
        | Endpoint::Metrics
        | Endpoint::MetricsCadvisor
        | Endpoint::MetricsProbes
        | Endpoint::MetricsResource => whole(stats::answer(host, &ctx.stats, route.endpoint).await),
        Endpoint::ContainerLogs => {
            let path = req.uri().path();
            let target = path.strip_prefix("/containerLogs/").unwrap_or(path);
            logs::container_logs(host, target, req.uri().query().unwrap_or("")).await?
        }
        Endpoint::Configz => {
            let body = configz.cloned().ok_or_else(Error::no_route)?;
            whole(reply(StatusCode::OK, "application/json", body))
        }
        #[cfg(feature = "node-api")]
        Endpoint::Exec | Endpoint::Attach | Endpoint::PortForward | Endpoint::Run => {
            streaming::answer(host, route.endpoint, req).await?
        }
        #[cfg(not(feature = "node-api"))]
        Endpoint::Exec | Endpoint::Attach | Endpoint::PortForward | Endpoint::Run => {
            return Err(Error::no_route());
        }
    })
}

/// Routes one request of the local API.
async fn handle<B>(ctx: &Context, req: Request<B>) -> Response<Streamed> {
    dispatch(ctx, Listener::Local, None, req).await
}

/// Binds a listener; an error names the address.
pub fn bind(addr: SocketAddr) -> std::io::Result<smol::Async<TcpListener>> {
    smol::Async::<TcpListener>::bind(addr)
        .map_err(|e| std::io::Error::new(e.kind(), format!("binding the local API on {addr}: {e}")))
}

/// Serves the local API forever.
pub async fn serve(listener: smol::Async<TcpListener>, ctx: Rc<Context>) {
    loop {
        let (stream, _) = match listener.accept().await {
            Ok(s) => s,
            Err(e) => {
                log::warn!("local API: accept: {e}");
                rt::sleep(std::time::Duration::from_millis(100)).await;
                continue;
            }
        };
        let ctx = ctx.clone();
        rt::spawn(async move {
            let svc = hyper::service::service_fn(move |req: Request<hyper::body::Incoming>| {
                let ctx = ctx.clone();
                async move { Ok::<_, std::convert::Infallible>(handle(&ctx, req).await) }
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
