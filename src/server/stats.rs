//! The accounting endpoints: `/stats/summary` (the Summary API), `/metrics`,
//! `/metrics/cadvisor`, `/metrics/resource` and `/metrics/probes` (Prometheus text), read when
//! asked.

use std::rc::Rc;

use hyper::{Response, StatusCode};

use super::routes::Endpoint;
use super::{Body, Host, json, reply};
use crate::kuberuntime::instrumented::Ops;
use crate::stats::{self, expose, prom};

/// What the accounting endpoints read beside the host's state.
pub struct StatsContext {
    pub provider: stats::Provider,
    pub ops: Rc<Ops>,
    pub machine: expose::Machine,
}

/// The agent's own figures for `/metrics`.
fn kubelet_metrics(k: &dyn Host, s: &StatsContext) -> String {
    let m = k.metrics();
    let ops = s.ops.snapshot();
    #[allow(clippy::cast_precision_loss, reason = "seconds as f64")]
    let last_seen = m.relist.last_seen.map(|n| n as f64 / 1e9);
    let node = k.node_name();
    expose::kubelet(&expose::KubeletView {
        node_name: &node,
        running_pods: m.running_pods,
        containers: [
            ("created", m.containers[0]),
            ("running", m.containers[1]),
            ("exited", m.containers[2]),
            ("unknown", m.containers[3]),
        ],
        relist_duration: &m.relist.duration,
        relist_interval: &m.relist.interval,
        pleg_last_seen: last_seen,
        pod_start: &m.pod_start,
        ops: &ops,
        process: expose::read_process(),
    })
}

/// Answers one accounting endpoint (any other endpoint answers 404).
pub async fn answer(k: &dyn Host, s: &StatsContext, endpoint: Endpoint) -> Response<Body> {
    let text = |t: String| reply(StatusCode::OK, prom::CONTENT_TYPE, t);
    let node = k.node_name();
    match endpoint {
        Endpoint::StatsSummary => json(&s.provider.summary(&node, k.stats_pods()).await),
        Endpoint::Metrics => text(kubelet_metrics(k, s)),
        Endpoint::MetricsCadvisor => {
            let snap = s.provider.snapshot(k.stats_pods()).await;
            text(expose::cadvisor(&snap, &s.machine))
        }
        Endpoint::MetricsProbes => text(expose::probes(&k.probe_counts())),
        Endpoint::MetricsResource => {
            let (snap, sum) = s.provider.snapshot_and_summary(&node, k.stats_pods()).await;
            text(expose::resource(&sum, snap.at))
        }
        _ => super::Error::no_route().response(),
    }
}

/// Answers the accounting endpoints by path (as both listeners route them); `None` for any
/// other path. For tests that read the accounting of a running loop.
#[cfg(test)]
pub async fn stats_route(k: &dyn Host, s: &StatsContext, path: &str) -> Option<Response<Body>> {
    let r = super::routes::route_of(super::routes::Listener::Local, path)?;
    let accounting = matches!(
        r.endpoint,
        Endpoint::StatsSummary
            | Endpoint::Metrics
            | Endpoint::MetricsCadvisor
            | Endpoint::MetricsProbes
            | Endpoint::MetricsResource
    );
    if !accounting {
        return None;
    }
    Some(answer(k, s, r.endpoint).await)
}
