//! Cluster membership (feature `apiserver`): the Node registered and its status reported, the
//! node Lease renewed, and the status of the pods the apiserver gave this node published.
//!
//! Each runs as a task on the executor; every call goes to the blocking pool (`rt::unblock`),
//! so an apiserver that hangs or is gone never stalls the loop, and pods keep running through
//! any outage. What could not be sent is sent again once the apiserver answers: node status is
//! recomputed every 10 s and posted when it changed or every 5 min; pod statuses are compared
//! with what the apiserver holds and patched until they match.

pub mod node;

use std::collections::HashMap;
use std::rc::Rc;
use std::time::Duration;

use serde_json::{Value, json};

use crate::api::PodStatus;
use crate::api::time::{rfc3339, rfc3339_micro};
use crate::apiclient::{ApiError, Client};
use crate::config::api::{Jitter, backoff_delay};
use crate::rt;
use crate::sync_loop::Kubelet;

use node::{Health, NodeFacts};

/// Node status: computed this often, posted when it changed or [`STATUS_REPORT`] passed.
pub const STATUS_UPDATE: Duration = Duration::from_secs(10);
pub const STATUS_REPORT: Duration = Duration::from_secs(300);
/// The node lease: how long it holds, and how often it is renewed.
pub const LEASE_DURATION_SECS: u32 = 40;
pub const LEASE_RENEW: Duration = Duration::from_secs(10);
/// How often pod statuses are compared with the apiserver's.
pub const POD_STATUS_PERIOD: Duration = Duration::from_secs(1);

const MERGE_PATCH: &str = "application/merge-patch+json";

async fn call(
    client: &Client,
    method: &'static str,
    path: String,
    body: Option<Value>,
) -> Result<Value, ApiError> {
    let c = client.clone();
    rt::unblock(move || {
        let body = body.map(|b| {
            let ct = if method == "PATCH" {
                MERGE_PATCH
            } else {
                "application/json"
            };
            (ct, serde_json::to_vec(&b).unwrap_or_default())
        });
        c.json::<Value>(method, &path, body.as_ref().map(|(ct, b)| (*ct, b.clone())))
    })
    .await
}

/// Registers the Node (retrying with backoff until it succeeds), then reports its status.
pub async fn run_node(client: Client, facts: NodeFacts, kubelet: Rc<Kubelet>) {
    let mut jitter = Jitter::new(&facts.name);
    let mut failures = 0u32;
    loop {
        match call(
            &client,
            "POST",
            "/api/v1/nodes".into(),
            Some(node::node_object(&facts)),
        )
        .await
        {
            Ok(_) => {
                log::info!(
                    "registered node {} with the apiserver at {}",
                    facts.name,
                    client.server()
                );
                break;
            }
            Err(e) if e.is_conflict() => {
                log::info!("node {} is already registered", facts.name);
                break;
            }
            Err(e) => {
                failures = failures.saturating_add(1);
                let wait = backoff_delay(failures, &mut jitter);
                log_failure("registering the node", &e, &facts.name, failures);
                rt::sleep(wait).await;
            }
        }
    }
    let path = format!("/api/v1/nodes/{}/status", facts.name);
    let mut posted: Option<Value> = None;
    let mut posted_at = rt::now();
    let mut tick = rt::interval(STATUS_UPDATE);
    loop {
        let health = match kubelet.healthz() {
            Ok(()) => Health {
                ready: true,
                message: String::new(),
            },
            Err(m) => Health {
                ready: false,
                message: m,
            },
        };
        let now = rfc3339(rt::now_nanos());
        let status = node::node_status(&facts, &health, posted.as_ref(), &now);
        let due = posted
            .as_ref()
            .is_none_or(|p| node::differs(p, &status) || rt::now() - posted_at >= STATUS_REPORT);
        if due {
            match call(
                &client,
                "PATCH",
                path.clone(),
                Some(json!({ "status": status })),
            )
            .await
            {
                Ok(_) => {
                    posted = Some(status);
                    posted_at = rt::now();
                }
                Err(e) => log::warn!("posting the node status: {e}"),
            }
        }
        tick.tick().await;
    }
}

fn log_failure(what: &str, e: &ApiError, node: &str, failures: u32) {
    if e.is_forbidden() {
        log::error!(
            "{what}: {e}: the apiserver refuses this identity; a node needs a client certificate \
             for user system:node:{node} in group system:nodes (or a token for it)"
        );
    } else if failures == 1 || failures.is_power_of_two() {
        log::warn!("{what}: {e} (retrying)");
    }
}

/// Keeps the node's Lease in `kube-node-lease` renewed: the heartbeat the node controller
/// watches. Created when missing; a conflict reads it again.
pub async fn run_lease(client: Client, node_name: String) {
    let path =
        format!("/apis/coordination.k8s.io/v1/namespaces/kube-node-lease/leases/{node_name}");
    let mut jitter = Jitter::new(&node_name);
    let mut lease: Option<Value> = None;
    let mut failures = 0u32;
    loop {
        let now = rfc3339_micro(rt::now_nanos());
        let result = match lease.take() {
            None => match call(&client, "GET", path.clone(), None).await {
                Ok(l) => Ok(l),
                Err(e) if e.is_not_found() => {
                    let body = json!({
                        "apiVersion": "coordination.k8s.io/v1",
                        "kind": "Lease",
                        "metadata": {"name": node_name, "namespace": "kube-node-lease"},
                        "spec": {
                            "holderIdentity": node_name,
                            "leaseDurationSeconds": LEASE_DURATION_SECS,
                            "renewTime": now,
                        },
                    });
                    call(
                        &client,
                        "POST",
                        "/apis/coordination.k8s.io/v1/namespaces/kube-node-lease/leases".into(),
                        Some(body),
                    )
                    .await
                }
                Err(e) => Err(e),
            },
            Some(mut l) => {
                l["spec"]["renewTime"] = json!(now);
                l["spec"]["holderIdentity"] = json!(node_name);
                l["spec"]["leaseDurationSeconds"] = json!(LEASE_DURATION_SECS);
                call(&client, "PUT", path.clone(), Some(l)).await
            }
        };
        match result {
            Ok(l) => {
                failures = 0;
                lease = Some(l);
                // Renew every 10 s, a little early or late so a fleet does not beat in step.
                let spread = jitter.below(Duration::from_secs(2));
                rt::sleep(LEASE_RENEW - Duration::from_secs(1) + spread).await;
            }
            Err(e) => {
                failures = failures.saturating_add(1);
                if !e.is_conflict() {
                    log_failure("renewing the node lease", &e, &node_name, failures);
                }
                rt::sleep(backoff_delay(failures.min(3), &mut jitter)).await;
            }
        }
    }
}

/// Publishes the status of the pods the apiserver gave this node: whenever the status picolet
/// generates differs from the one the apiserver holds, it is patched (with the pod's UID as a
/// precondition); a failed patch is tried again next round, so nothing is lost to an outage.
pub async fn run_pod_status(client: Client, kubelet: Rc<Kubelet>) {
    let mut sent: HashMap<String, PodStatus> = HashMap::new();
    let mut tick = rt::interval(POD_STATUS_PERIOD);
    loop {
        tick.tick().await;
        for (uid, ns, name) in kubelet.take_finalizable() {
            // Nothing of it runs any more: delete it for good, only if it is still this pod.
            let body = json!({
                "kind": "DeleteOptions", "apiVersion": "v1",
                "gracePeriodSeconds": 0,
                "preconditions": {"uid": uid},
            });
            let path = format!("/api/v1/namespaces/{ns}/pods/{name}");
            match call(&client, "DELETE", path, Some(body)).await {
                Ok(_) => log::info!("pod {ns}/{name} ({uid}) stopped and deleted"),
                Err(e) if e.is_not_found() || e.is_conflict() => {}
                Err(e) => {
                    log::warn!("deleting pod {ns}/{name}: {e}");
                    kubelet.retry_finalize(uid, ns, name);
                }
            }
        }
        let pending = kubelet.api_pod_statuses();
        sent.retain(|uid, _| pending.iter().any(|p| &p.uid == uid));
        for p in pending {
            if p.current == p.in_api || sent.get(&p.uid) == Some(&p.current) {
                continue;
            }
            let path = format!("/api/v1/namespaces/{}/pods/{}/status", p.namespace, p.name);
            let body = json!({"metadata": {"uid": p.uid}, "status": p.current});
            match call(&client, "PATCH", path, Some(body)).await {
                Ok(_) => {
                    sent.insert(p.uid, p.current);
                }
                Err(e) if e.is_not_found() => {}
                Err(e) => {
                    sent.remove(&p.uid);
                    log::debug!("patching the status of pod {}/{}: {e}", p.namespace, p.name);
                }
            }
        }
    }
}

/// One API pod's status as picolet sees it and as the apiserver holds it.
#[derive(Debug)]
pub struct PodStatusView {
    pub uid: String,
    pub namespace: String,
    pub name: String,
    pub current: PodStatus,
    pub in_api: PodStatus,
}
