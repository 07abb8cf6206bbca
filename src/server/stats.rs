//! The accounting endpoints: `/stats/summary` (the Summary API), `/metrics`,
//! `/metrics/cadvisor`, `/metrics/resource` and `/metrics/probes` (Prometheus text), read when
//! asked.

use std::rc::Rc;

use hyper::{Response, StatusCode};

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

/// Answers the accounting endpoints; `None` for any other path.
pub async fn stats_route(k: &dyn Host, s: &StatsContext, path: &str) -> Option<Response<Body>> {
    let text = |t: String| reply(StatusCode::OK, prom::CONTENT_TYPE, t);
    let node = k.node_name();
    Some(match path {
        "/stats/summary" | "/stats/summary/" => {
            json(&s.provider.summary(&node, k.stats_pods()).await)
        }
        "/metrics" => text(kubelet_metrics(k, s)),
        "/metrics/cadvisor" => {
            let snap = s.provider.snapshot(k.stats_pods()).await;
            text(expose::cadvisor(&snap, &s.machine))
        }
        "/metrics/probes" => text(expose::probes(&k.probe_counts())),
        "/metrics/resource" => {
            let (snap, sum) = s.provider.snapshot_and_summary(&node, k.stats_pods()).await;
            text(expose::resource(&sum, snap.at))
        }
        _ => return None,
    })
}
