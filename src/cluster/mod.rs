//! Cluster membership (feature `apiserver`): the Node registered and its status reported, the
//! node Lease renewed, and the status of the pods the apiserver gave this node published.
//!
//! Each runs as a task on the executor; every call goes to the blocking pool (`rt::unblock`),
//! so an apiserver that hangs or is gone never stalls the loop, and pods keep running through
//! any outage. What could not be sent is sent again once the apiserver answers: node status is
//! recomputed every 10 s and posted when it changed or every 5 min; a pod status is patched as
//! soon as it changed, and compared with what the apiserver holds every second until they match.

pub mod node;
pub mod objects;
pub mod podcertificate;
pub mod services;

use std::collections::HashMap;
use std::rc::Rc;
use std::time::Duration;

use serde_json::{Value, json};

use crate::api::time::{rfc3339, rfc3339_micro};
use crate::api::{Pod, PodStatus};
use crate::apiclient::backoff::{Jitter, backoff_delay};
use crate::apiclient::{ACCEPT_METADATA, ApiError, CALL_TIMEOUT, Client};
use crate::config::api::{MirrorPod, Mirrors};
use crate::config::{ANNOTATION_CONFIG_HASH, ANNOTATION_CONFIG_MIRROR};
use crate::rt;

use node::{Health, NodeFacts};

/// What the cluster's tasks ask of the agent: a narrow view, which the sync loop implements
/// (as the server's `Host`), so that the cluster's code does not hold the loop.
pub trait Kubelet {
    /// Why the node is not healthy, when it is not (the Ready condition).
    fn healthz(&self) -> Result<(), crate::pleg::Unhealthy>;
    /// MemoryPressure, DiskPressure and PIDPressure from the eviction manager.
    fn pressure(&self) -> crate::eviction::Pressure;
    /// The status picolet computed for a pod.
    fn pod_status(&self, uid: &str) -> Option<PodStatus>;
    /// The status of each pod that came from the apiserver: picolet's, and the apiserver's.
    fn api_pod_statuses(&self) -> Vec<PodStatusView>;
    /// The pods from the apiserver.
    fn api_pods(&self) -> Vec<Rc<Pod>>;
    /// Told when the pods from the apiserver change.
    fn api_pods_changed(&self) -> async_channel::Receiver<()>;
    /// Told when pod statuses changed (several changes, one signal), and when a deleted pod's
    /// final status is ready to be posted.
    fn pod_statuses_changed(&self) -> async_channel::Receiver<()>;
    /// The static pods.
    fn static_pods(&self) -> Vec<Rc<Pod>>;
    /// Syncs these pods now (their objects have arrived).
    fn sync_now(&self, uids: &std::collections::BTreeSet<String>);
    /// The deleted API pods whose final status is to be posted, as the apiserver last showed
    /// them.
    fn take_finalizable(&self) -> Vec<Rc<Pod>>;
    /// Posts a final status again later.
    fn retry_finalize(&self, pod: Rc<Pod>);
    /// Drops a pod's status once the apiserver has the final one.
    fn forget_status(&self, uid: &str);
    /// Why the node is not ready besides its health, if it is not (it is shutting down).
    fn not_ready_reason(&self) -> Option<&'static str>;
    /// Told each time the node's readiness changed outside the health checks.
    fn node_changed(&self) -> async_channel::Receiver<()>;
    /// Whether the last pod status patch failed for want of an apiserver.
    fn set_status_unreachable(&self, unreachable: bool);
}

/// Node status: computed this often, posted when it changed or [`STATUS_REPORT`] passed (the
/// defaults of `nodeStatusUpdateFrequency` and `nodeStatusReportFrequency`).
pub const STATUS_UPDATE: Duration = Duration::from_secs(10);
pub const STATUS_REPORT: Duration = Duration::from_secs(300);
/// How long the node lease holds (the default of `nodeLeaseDurationSeconds`); it is renewed
/// every quarter of that, as the kubelet renews it.
pub const LEASE_DURATION_SECS: u32 = 40;

/// How often the node tells the apiserver it is alive: the settings that trade how soon the
/// control plane notices a node gone for the bytes a node sends.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Heartbeats {
    /// `nodeLeaseDurationSeconds`.
    pub lease_duration_secs: u32,
    /// `nodeStatusUpdateFrequency`: the node status computed (and posted if it changed).
    pub status_update: Duration,
    /// `nodeStatusReportFrequency`: the node status posted at least this often.
    pub status_report: Duration,
}

impl Default for Heartbeats {
    fn default() -> Heartbeats {
        Heartbeats {
            lease_duration_secs: LEASE_DURATION_SECS,
            status_update: STATUS_UPDATE,
            status_report: STATUS_REPORT,
        }
    }
}

impl Heartbeats {
    /// How often the Lease is renewed: a quarter of its duration (the kubelet's
    /// `nodeLeaseRenewIntervalFraction`), 10 s by default.
    pub fn lease_renew(&self) -> Duration {
        Duration::from_secs(u64::from(self.lease_duration_secs)) / 4
    }
}
/// How often pod statuses are compared with the apiserver's when nothing signalled a change:
/// the retry of a patch that failed. A change is published at once.
pub const POD_STATUS_PERIOD: Duration = Duration::from_secs(1);
/// The most pod status patches in flight at once: the connections the client keeps idle
/// between calls, so a burst of changes goes out on open connections instead of opening more.
pub const STATUS_PARALLEL: usize = 2;
/// Deadline of a heartbeat call (the Lease, the node status), as the kubelet's: the shorter of
/// the status update period and the lease duration, so a renewal that hangs leaves time to try
/// again before the Lease runs out.
pub const HEARTBEAT_TIMEOUT: Duration = STATUS_UPDATE;
/// Lease renewals that got no answer at all (refused, reset, timed out) this many times in a row
/// close every connection to the apiserver, as the kubelet's `onRepeatedHeartbeatFailure` does:
/// a watch or a call blocked on a connection that died silently then fails at once and is tried
/// again on a new one, instead of waiting out its deadline after the link is back.
pub const CLOSE_CONNECTIONS_AFTER: u32 = 2;

const MERGE_PATCH: &str = "application/merge-patch+json";
/// The kubelet's patch type for a pod status: lists the API marks as merged by a key
/// (`conditions` by `type`) keep the entries the patch does not name, where a merge patch
/// replaces the list whole.
const STRATEGIC_MERGE_PATCH: &str = "application/strategic-merge-patch+json";

async fn call(
    client: &Client,
    method: &'static str,
    path: String,
    body: Option<Value>,
) -> Result<Value, ApiError> {
    call_within(client, method, path, body, None).await
}

/// A heartbeat call: [`call`] with [`HEARTBEAT_TIMEOUT`].
async fn heartbeat(
    client: &Client,
    method: &'static str,
    path: String,
    body: Option<Value>,
) -> Result<Value, ApiError> {
    call_within(client, method, path, body, Some(HEARTBEAT_TIMEOUT)).await
}

async fn call_within(
    client: &Client,
    method: &'static str,
    path: String,
    body: Option<Value>,
    deadline: Option<Duration>,
) -> Result<Value, ApiError> {
    let patch = (method == "PATCH").then_some(MERGE_PATCH);
    call_as(client, method, patch, path, body, deadline).await
}

/// A strategic merge patch, as the kubelet patches a pod's status.
async fn patch_strategic(client: &Client, path: String, body: Value) -> Result<Value, ApiError> {
    call_as(
        client,
        "PATCH",
        Some(STRATEGIC_MERGE_PATCH),
        path,
        Some(body),
        None,
    )
    .await
}

async fn call_as(
    client: &Client,
    method: &'static str,
    patch: Option<&'static str>,
    path: String,
    body: Option<Value>,
    deadline: Option<Duration>,
) -> Result<Value, ApiError> {
    let c = client.clone();
    rt::unblock(move || {
        let body = body.map(|b| {
            let ct = patch.unwrap_or("application/json");
            (ct, serde_json::to_vec(&b).unwrap_or_default())
        });
        let body = body.as_ref().map(|(ct, b)| (*ct, b.clone()));
        // Of a status patch or a Lease renewal only the metadata (the new resourceVersion) is
        // used: the rest of the object is not asked for.
        let accept = if matches!(method, "PATCH" | "PUT") {
            ACCEPT_METADATA
        } else {
            "application/json"
        };
        c.json_accepting::<Value>(
            method,
            &path,
            body,
            deadline.unwrap_or(CALL_TIMEOUT),
            accept,
        )
    })
    .await
}

/// Registers the Node (retrying with backoff until it succeeds), then reports its status.
pub async fn run_node(
    client: Client,
    facts: NodeFacts,
    kubelet: Rc<dyn Kubelet>,
    beats: Heartbeats,
    seen: crate::admission::SeenNode,
) {
    let mut jitter = Jitter::new(&facts.node.name);
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
            Ok(v) => {
                seen.read(&v);
                log::info!(
                    "registered node {} with the apiserver at {}",
                    facts.node.name,
                    client.server()
                );
                break;
            }
            Err(e) if e.is_conflict() => {
                log::info!("node {} is already registered", facts.node.name);
                break;
            }
            Err(e) => {
                failures = failures.saturating_add(1);
                let wait = backoff_delay(failures, &mut jitter);
                log_failure("registering the node", &e, &facts.node.name, failures);
                rt::sleep(wait).await;
            }
        }
    }
    let me = crate::events::ObjectRef::node(&facts.node.name);
    crate::events::record(
        &me,
        crate::events::Type::Normal,
        "Starting",
        "Starting kubelet.",
    );
    // The conditions last announced with an event: memory, disk and PID pressure, Ready.
    let mut announced: Option<[bool; 4]> = None;
    let path = format!("/api/v1/nodes/{}/status", facts.node.name);
    let mut posted: Option<Value> = None;
    let mut posted_at = rt::now();
    let mut tick = rt::interval(beats.status_update);
    let changed = kubelet.node_changed();
    loop {
        let health = match (kubelet.healthz(), kubelet.not_ready_reason()) {
            (Ok(()), None) => Health {
                ready: true,
                message: String::new(),
                pressure: kubelet.pressure(),
            },
            (Err(m), None) => Health {
                ready: false,
                message: m.to_string(),
                pressure: kubelet.pressure(),
            },
            // Upstream's aggregate of errors: one alone, several in brackets.
            (Ok(()), Some(r)) => Health {
                ready: false,
                message: r.to_owned(),
                pressure: kubelet.pressure(),
            },
            (Err(m), Some(r)) => Health {
                ready: false,
                message: format!("[{m}, {r}]"),
                pressure: kubelet.pressure(),
            },
        };
        let state = [
            health.pressure.memory,
            health.pressure.disk,
            health.pressure.pid,
            health.ready,
        ];
        for (i, reason) in node_events(announced, state).into_iter().enumerate() {
            if let Some(reason) = reason {
                let t = if i < 3 && state[i] || i == 3 && !state[3] {
                    crate::events::Type::Warning
                } else {
                    crate::events::Type::Normal
                };
                crate::events::record(
                    &me,
                    t,
                    reason,
                    &format!("Node {} status is now: {reason}", facts.node.name),
                );
            }
        }
        announced = Some(state);
        let now = rfc3339(rt::now_nanos());
        let status = node::node_status(&facts, &health, posted.as_ref(), &now);
        let due = posted.as_ref().is_none_or(|p| {
            node::differs(p, &status) || rt::now() - posted_at >= beats.status_report
        });
        if due {
            // What changed since the last report, as a merge patch (the first: all of it);
            // at rest, the conditions with their new heartbeat times.
            let patch = match &posted {
                Some(p) => node::merge_patch(p, &status).unwrap_or_else(|| json!({})),
                None => status.clone(),
            };
            match heartbeat(
                &client,
                "PATCH",
                path.clone(),
                Some(json!({ "status": patch })),
            )
            .await
            {
                Ok(v) => {
                    // The answer's metadata holds the Node's labels: admission's view of them
                    // is as fresh as the last report.
                    seen.read(&v);
                    posted = Some(status);
                    posted_at = rt::now();
                }
                Err(e) => log::warn!("posting the node status: {e}"),
            }
        }
        // The period, or at once when the node's readiness changed (a shutdown).
        futures_lite::future::or(tick.tick(), async {
            let _ = changed.recv().await;
        })
        .await;
    }
}

/// The node's condition events for a change from `before` (none: the first report) to `now`
/// (memory, disk and PID pressure, Ready), in the kubelet's reasons.
fn node_events(before: Option<[bool; 4]>, now: [bool; 4]) -> [Option<&'static str>; 4] {
    const REASONS: [(&str, &str); 4] = [
        ("NodeHasInsufficientMemory", "NodeHasSufficientMemory"),
        ("NodeHasDiskPressure", "NodeHasNoDiskPressure"),
        ("NodeHasInsufficientPID", "NodeHasSufficientPID"),
        ("NodeReady", "NodeNotReady"),
    ];
    std::array::from_fn(|i| {
        (before.map(|b| b[i]) != Some(now[i]))
            .then(|| if now[i] { REASONS[i].0 } else { REASONS[i].1 })
    })
}

/// Logs a failing call: the first failure, then only at doubling counts, so an apiserver that
/// keeps refusing is said clearly without flooding the log.
fn log_failure(what: &str, e: &ApiError, node: &str, failures: u32) {
    if !(failures == 1 || (failures >= 8 && failures.is_power_of_two())) {
        log::debug!("{what}: {e} (failure {failures})");
    } else if e.is_forbidden() {
        log::error!(
            "{what}: {e}: the apiserver refuses this identity; a node needs a client certificate \
             for user system:node:{node} in group system:nodes (or a token for it)"
        );
    } else {
        log::warn!("{what}: {e} (retrying)");
    }
}

/// Keeps the node's Lease in `kube-node-lease` renewed: the heartbeat the node controller
/// watches. Created when missing; a conflict reads it again.
pub async fn run_lease(client: Client, node_name: String, beats: Heartbeats) {
    let duration = beats.lease_duration_secs;
    let path =
        format!("/apis/coordination.k8s.io/v1/namespaces/kube-node-lease/leases/{node_name}");
    let mut jitter = Jitter::new(&node_name);
    let mut lease: Option<Value> = None;
    let mut failures = 0u32;
    // Renewals in a row that got no answer at all.
    let mut unanswered = 0u32;
    // A conflict was just met: the next is not read again at once but waits its turn.
    let mut conflicted = false;
    loop {
        let now = rfc3339_micro(rt::now_nanos());
        // The Lease to renew after a failed PUT, when it is still worth renewing.
        let mut held = None;
        let result = match lease.take() {
            // Read (or made, when missing), then renewed at once.
            None => match heartbeat(&client, "GET", path.clone(), None).await {
                Ok(l) => {
                    renew_lease(&client, &path, &node_name, duration, &now, l, &mut held).await
                }
                Err(e) if e.is_not_found() => {
                    let mut body = json!({
                        "apiVersion": "coordination.k8s.io/v1",
                        "kind": "Lease",
                        "metadata": {"name": node_name, "namespace": "kube-node-lease"},
                        "spec": {
                            "holderIdentity": node_name,
                            "leaseDurationSeconds": duration,
                            "renewTime": now,
                        },
                    });
                    set_node_owner(&client, &node_name, &mut body).await;
                    heartbeat(
                        &client,
                        "POST",
                        "/apis/coordination.k8s.io/v1/namespaces/kube-node-lease/leases".into(),
                        Some(body),
                    )
                    .await
                }
                Err(e) => Err(e),
            },
            Some(l) => renew_lease(&client, &path, &node_name, duration, &now, l, &mut held).await,
        };
        if let Err(e) = &result
            && e.is_conflict()
            && !conflicted
        {
            // Someone else wrote it, or a renewal whose answer was lost did land: read it
            // again at once rather than after a back-off.
            conflicted = true;
            log::debug!("node lease: {e}; reading it again");
            continue;
        }
        conflicted = false;
        match result {
            Ok(l) => {
                if unanswered >= CLOSE_CONNECTIONS_AFTER {
                    log::info!("the apiserver answers again: node lease renewed");
                }
                failures = 0;
                unanswered = 0;
                lease = Some(l);
                // Renew every quarter of the duration (10 s by default), up to a tenth of
                // that early or late so a fleet does not beat in step.
                let renew = beats.lease_renew();
                let spread = jitter.below(renew / 5);
                rt::sleep(renew - renew / 10 + spread).await;
            }
            Err(e) => {
                failures = failures.saturating_add(1);
                if !e.is_conflict() {
                    log_failure("renewing the node lease", &e, &node_name, failures);
                }
                unanswered = if e.is_transport() {
                    unanswered.saturating_add(1)
                } else {
                    0
                };
                if unanswered >= CLOSE_CONNECTIONS_AFTER {
                    if unanswered == CLOSE_CONNECTIONS_AFTER {
                        log::warn!(
                            "node lease: {unanswered} renewals in a row got no answer; closing \
                             every connection to the apiserver, so no call or watch waits on \
                             a dead one (again after each further failure, quietly)"
                        );
                    }
                    let c = client.clone();
                    rt::unblock(move || c.close_connections()).await;
                }
                lease = held;
                rt::sleep(backoff_delay(failures.min(3), &mut jitter)).await;
            }
        }
    }
}

/// Makes the Node the owner of its Lease, as the kubelet does, so the Lease goes with the Node:
/// a Lease without owner gets one when the Node can be read (one GET, only then); a Node not
/// registered yet leaves it for a later renewal.
async fn set_node_owner(client: &Client, node_name: &str, lease: &mut Value) {
    if lease["metadata"]["ownerReferences"]
        .as_array()
        .is_some_and(|o| !o.is_empty())
    {
        return;
    }
    let node = heartbeat(client, "GET", format!("/api/v1/nodes/{node_name}"), None).await;
    match node {
        Ok(n) => {
            if let Some(owner) = node_owner(&n) {
                lease["metadata"]["ownerReferences"] = json!([owner]);
            }
        }
        Err(e) => log::debug!("node lease: reading the node for its owner reference: {e}"),
    }
}

/// The owner reference to a Node, as the kubelet sets it on its Lease.
fn node_owner(node: &Value) -> Option<Value> {
    let name = node["metadata"]["name"].as_str()?;
    let uid = node["metadata"]["uid"].as_str()?;
    Some(json!({"apiVersion": "v1", "kind": "Node", "name": name, "uid": uid}))
}

/// One renewal of the Lease `l` with the renew time `now`. A Lease that is already this node's
/// (holder, duration and owner as they should be) is renewed with a merge patch of the renew
/// time alone, its resourceVersion as the precondition: the same optimistic concurrency as
/// the kubelet's update (a Lease someone else wrote is a conflict, and read again), in a
/// fraction of the bytes; any other is written whole (PUT). Either way the answer asked for is
/// the Lease's metadata alone, whose new resourceVersion the next renewal needs.
///
/// A Lease that carries field managers' records (`managedFields`: every Lease another writer
/// made, and one made before this was done) has them cleared by the write, as the API allows
/// (a list of one empty entry): once cleared, the apiserver keeps none for later updates, so
/// each renewal's answer is some 250 bytes smaller. Nothing reads them on a node's Lease; a
/// server-side apply to it would record its own again, and the next renewal clears them.
///
/// When it gets no answer, or the apiserver is failing, `held` keeps the Lease: it is still
/// the newest known, and the first renewal after the outage is one request, not a GET and a
/// write. A conflict or any other refusal leaves `held` empty, so the Lease is read again.
async fn renew_lease(
    client: &Client,
    path: &str,
    node_name: &str,
    duration: u32,
    now: &str,
    mut l: Value,
    held: &mut Option<Value>,
) -> Result<Value, ApiError> {
    // Whether the Lease in the apiserver is already this node's, owner included (one added
    // here must be written whole).
    let ours = l["spec"]["holderIdentity"] == node_name
        && l["spec"]["leaseDurationSeconds"] == duration
        && l["metadata"]["ownerReferences"]
            .as_array()
            .is_some_and(|o| !o.is_empty());
    set_node_owner(client, node_name, &mut l).await;
    // Records of field managers (not the one empty entry of a clearing echoed back).
    let tracked = l["metadata"]["managedFields"].as_array().is_some_and(|m| {
        m.iter()
            .any(|e| e.as_object().is_some_and(|o| !o.is_empty()))
    });
    if let Some(m) = l["metadata"].as_object_mut() {
        if tracked {
            m.insert("managedFields".into(), json!([{}]));
        } else {
            m.remove("managedFields");
        }
    }
    let rv = l["metadata"]["resourceVersion"]
        .as_str()
        .filter(|rv| !rv.is_empty())
        .map(str::to_owned);
    l["spec"]["renewTime"] = json!(now);
    l["spec"]["holderIdentity"] = json!(node_name);
    l["spec"]["leaseDurationSeconds"] = json!(duration);
    let r = match rv {
        Some(rv) if ours => {
            let mut patch = json!({
                "metadata": {"resourceVersion": rv},
                "spec": {"renewTime": now},
            });
            if tracked {
                patch["metadata"]["managedFields"] = json!([{}]);
            }
            heartbeat(client, "PATCH", path.to_owned(), Some(patch)).await
        }
        _ => heartbeat(client, "PUT", path.to_owned(), Some(l.clone())).await,
    };
    match r {
        Ok(answer) => {
            // The metadata answered (the whole Lease from a server that does not serve the
            // metadata alone) with the spec written: what the next renewal weighs (owner,
            // field managers' records, cleared by it if any came back) is the answer's.
            let meta = answer["metadata"].clone();
            if meta["resourceVersion"].is_string() {
                l["metadata"] = meta;
            }
            Ok(l)
        }
        Err(e) => {
            if e.is_transport() || e.is_server_error() {
                *held = Some(l);
            }
            Err(e)
        }
    }
}

/// Publishes the status of the pods the apiserver gave this node: whenever the status picolet
/// generates differs from the one the apiserver holds, it is patched (with the pod's UID as a
/// precondition).
///
/// A round starts as soon as a status changed (the status manager's signal, as upstream's
/// `podStatusChannel`), not at a period: the changes made together (pods whose workers finished
/// in the same turn of the executor) go out together, [`STATUS_PARALLEL`] patches at a time,
/// each batch with the statuses as they are when it is sent, so a status that changed while a
/// batch was out is not held back behind statuses taken before it. A round
/// also runs every [`POD_STATUS_PERIOD`] without a signal, so a failed patch is tried again and
/// nothing is lost to an outage.
pub async fn run_pod_status(client: Client, kubelet: Rc<dyn Kubelet>) {
    let mut sent: HashMap<String, PodStatus> = HashMap::new();
    // What the apiserver may hold of each pod's status besides the watched copy: the last
    // status it accepted, and those sent since that got no answer (they may have been
    // applied). A patch leaves a field out only when the new status has it as all of these
    // and the watched copy have it, so a watch lagging behind these writes never makes a
    // change look like none.
    let mut written: HashMap<String, Vec<PodStatus>> = HashMap::new();
    // Writes the apiserver refuses, per pod: retried with backoff, logged by state change. A
    // write that got no answer is not counted: the apiserver is away (the lease says so), and
    // it is tried again each period, so statuses follow at once when it is back.
    let mut refused = crate::retry::Failures::cleanups();
    let mut tick = rt::interval(POD_STATUS_PERIOD);
    let changed = kubelet.pod_statuses_changed();
    loop {
        futures_lite::future::or(tick.tick(), async {
            if changed.recv().await.is_err() {
                std::future::pending::<()>().await;
            }
        })
        .await;
        // The tasks already woken run first (other pods' workers ending their syncs in this
        // turn): their changes join this round instead of starting another.
        futures_lite::future::yield_now().await;
        let now = rt::now_nanos();
        refused.gc(now);
        for pod in kubelet.take_finalizable() {
            let (uid, ns, name) = (
                &pod.metadata.uid,
                &pod.metadata.namespace,
                &pod.metadata.name,
            );
            let key = format!("final/{uid}");
            if !refused.due(&key, now) {
                kubelet.retry_finalize(pod);
                continue;
            }
            let what = format!("finalizing pod {ns}/{name}");
            // Nothing of it runs any more: its final status (containers terminated) first, as
            // the kubelet posts it, then delete it for good, only if it is still this pod. The
            // final status is patched as every status is: what changed since the apiserver's
            // copy (the last one the watch showed; picolet wrote nothing of this pod since its
            // deletion was seen), with the conditions others set on it (an eviction's
            // DisruptionTarget, which a Job's pod failure policy reads) kept as they are; none
            // when the apiserver has it already (a pod that had finished before its deletion).
            let status = kubelet.pod_status(uid).map(|mut st| {
                crate::status::generate::merge_foreign_conditions(&mut st, &pod.status);
                st
            });
            if let Some(st) = status.filter(|st| !same_but_times(st, &pod.status)) {
                let path = format!("/api/v1/namespaces/{ns}/pods/{name}/status");
                let mut bases = vec![&pod.status];
                bases.extend(written.get(uid).into_iter().flatten());
                let body = crate::status::patch::status_patch(uid, &bases, &st);
                match patch_strategic(&client, path, body).await {
                    Ok(_) => {}
                    Err(e) if e.is_not_found() || e.is_conflict() => {}
                    Err(e) => {
                        let cause = format!("posting its final status: {e}");
                        if e.is_transport() {
                            log::debug!("{what}: {cause}");
                        } else {
                            refused.failed(&key, &what, &cause, now);
                        }
                        kubelet.retry_finalize(pod.clone());
                        continue;
                    }
                }
            }
            let body = json!({
                "kind": "DeleteOptions", "apiVersion": "v1",
                "gracePeriodSeconds": 0,
                "preconditions": {"uid": uid},
            });
            let path = format!("/api/v1/namespaces/{ns}/pods/{name}");
            match call(&client, "DELETE", path, Some(body)).await {
                Ok(_) => {
                    refused.forget(&key);
                    log::info!("pod {ns}/{name} ({uid}) stopped and deleted");
                    kubelet.forget_status(uid);
                }
                Err(e) if e.is_not_found() || e.is_conflict() => {
                    refused.forget(&key);
                    kubelet.forget_status(uid);
                }
                Err(e) => {
                    let cause = format!("deleting it: {e}");
                    if e.is_transport() {
                        log::debug!("{what}: {cause}");
                    } else {
                        refused.failed(&key, &what, &cause, now);
                    }
                    kubelet.retry_finalize(pod.clone());
                }
            }
        }
        // Each batch takes the statuses as they are when it is sent, so a pod that changed
        // while the previous batch was out goes with its newest status, and a status that
        // changed again after it was sent goes again; one that failed waits for the next
        // round (the period), so an apiserver that is away is not asked in a loop.
        let mut tried: HashMap<String, PodStatus> = HashMap::new();
        loop {
            let mut pending = kubelet.api_pod_statuses();
            sent.retain(|uid, _| pending.iter().any(|p| &p.uid == uid));
            written.retain(|uid, _| pending.iter().any(|p| &p.uid == uid));
            // A new phase (Running, Succeeded, Failed) first, ahead of changes within one.
            pending.sort_by_key(|p| p.current.phase == p.in_api.phase);
            let batch: Vec<PodStatusView> = pending
                .into_iter()
                .filter(|p| {
                    !same_but_times(&p.current, &p.in_api)
                        && sent.get(&p.uid) != Some(&p.current)
                        && tried.get(&p.uid) != Some(&p.current)
                        && refused.due(&format!("status/{}", p.uid), now)
                })
                .take(STATUS_PARALLEL)
                .collect();
            if batch.is_empty() {
                break;
            }
            let answers = crate::kuberuntime::join_all(batch.iter().map(|p| {
                let path = format!("/api/v1/namespaces/{}/pods/{}/status", p.namespace, p.name);
                // What changed since the apiserver's copy, as the kubelet patches it.
                let mut bases = vec![&p.in_api];
                bases.extend(written.get(&p.uid).into_iter().flatten());
                let body = crate::status::patch::status_patch(&p.uid, &bases, &p.current);
                patch_strategic(&client, path, body)
            }))
            .await;
            for (p, answer) in batch.iter().zip(answers) {
                tried.insert(p.uid.clone(), p.current.clone());
                let key = format!("status/{}", p.uid);
                let what = format!("patching the status of pod {}/{}", p.namespace, p.name);
                match answer {
                    Ok(_) => {
                        kubelet.set_status_unreachable(false);
                        refused.succeeded(&key, &what);
                        sent.insert(p.uid.clone(), p.current.clone());
                        written.insert(p.uid.clone(), vec![p.current.clone()]);
                    }
                    // Gone from the apiserver: the source will tell the loop; no point in
                    // retrying.
                    Err(e) if e.is_not_found() => {
                        kubelet.set_status_unreachable(false);
                        refused.forget(&key);
                        sent.insert(p.uid.clone(), p.current.clone());
                        written.remove(&p.uid);
                    }
                    Err(e) => {
                        // An answer (a refusal) says the apiserver is there; none says it is
                        // not.
                        kubelet.set_status_unreachable(e.is_transport());
                        sent.remove(&p.uid);
                        if e.is_transport() {
                            // It may have been applied: a base until one is accepted (at
                            // most four, the oldest, the last accepted if any, kept first).
                            let w = written.entry(p.uid.clone()).or_default();
                            if !w.contains(&p.current) {
                                if w.len() >= 4 {
                                    w.remove(1);
                                }
                                w.push(p.current.clone());
                            }
                            log::debug!("{what}: {e}");
                        } else {
                            refused.failed(&key, &what, &e.to_string(), now);
                        }
                    }
                }
            }
        }
    }
}

/// How often mirror pods are compared with the static pods.
pub const MIRROR_PERIOD: Duration = Duration::from_secs(2);

/// The mirror pod body for a static pod: a copy bound to the node, marked with the static pod's
/// hash and owned by the Node (NodeRestriction requires that owner).
pub fn mirror_object(pod: &Pod, node_name: &str, node_uid: &str) -> Value {
    let mut p = pod.clone();
    p.status = PodStatus::default();
    p.metadata.uid.clear();
    p.metadata.resource_version = None;
    let hash = p
        .metadata
        .annotations
        .get(ANNOTATION_CONFIG_HASH)
        .cloned()
        .unwrap_or_default();
    p.metadata
        .annotations
        .insert(ANNOTATION_CONFIG_MIRROR.into(), hash);
    p.metadata.owner_references = vec![crate::api::OwnerReference {
        api_version: "v1".into(),
        kind: "Node".into(),
        name: node_name.into(),
        uid: node_uid.into(),
        controller: Some(true),
        ..Default::default()
    }];
    let mut v = serde_json::to_value(&p).unwrap_or_default();
    v["apiVersion"] = json!("v1");
    v["kind"] = json!("Pod");
    v
}

/// What the mirror manager must do to make the mirror pods match the static pods (pure).
#[derive(Debug, PartialEq)]
pub enum MirrorAction {
    Create(Rc<Pod>),
    /// Delete a mirror pod (its static pod changed or is gone), with its UID as precondition.
    Delete {
        namespace: String,
        name: String,
        uid: String,
    },
}

pub fn plan_mirrors(static_pods: &[Rc<Pod>], mirrors: &[MirrorPod]) -> Vec<MirrorAction> {
    let mut out = Vec::new();
    for m in mirrors {
        let wanted = static_pods
            .iter()
            .find(|p| p.metadata.namespace == m.namespace && p.metadata.name == m.name);
        let current = wanted
            .is_some_and(|p| p.metadata.annotations.get(ANNOTATION_CONFIG_HASH) == Some(&m.hash));
        // A mirror pod someone deleted waits, Terminating, for its node: delete it for good
        // (grace 0); a new one is created once it is gone.
        if !current || m.deleting {
            out.push(MirrorAction::Delete {
                namespace: m.namespace.clone(),
                name: m.name.clone(),
                uid: m.uid.clone(),
            });
        }
    }
    for p in static_pods {
        let exists = mirrors
            .iter()
            .any(|m| m.namespace == p.metadata.namespace && m.name == p.metadata.name);
        if !exists {
            out.push(MirrorAction::Create(p.clone()));
        }
    }
    out
}

/// Keeps a mirror pod in the apiserver for each static pod: created when missing (also after
/// someone deletes it), replaced when the static pod changes, deleted when the static pod is
/// gone; the static pod's status is published on it.
pub async fn run_mirrors(
    client: Client,
    kubelet: Rc<dyn Kubelet>,
    mirrors: Mirrors,
    node_name: String,
) {
    let mut node_uid = String::new();
    let mut refused: HashMap<(String, String), u32> = HashMap::new();
    let mut sent: HashMap<String, PodStatus> = HashMap::new();
    let mut tick = rt::interval(MIRROR_PERIOD);
    loop {
        tick.tick().await;
        // Not before the API source has listed: an unknown set is not an empty one.
        let Some(seen) = mirrors.lock().ok().and_then(|m| m.clone()) else {
            continue;
        };
        if node_uid.is_empty() {
            match call(&client, "GET", format!("/api/v1/nodes/{node_name}"), None).await {
                Ok(n) => node_uid = n["metadata"]["uid"].as_str().unwrap_or("").to_owned(),
                Err(_) => continue,
            }
        }
        let statics = kubelet.static_pods();
        for action in plan_mirrors(&statics, &seen) {
            match action {
                MirrorAction::Create(p) => {
                    let key = (p.metadata.namespace.clone(), p.metadata.name.clone());
                    let n = refused.entry(key.clone()).or_default();
                    // A refused mirror pod is tried again on a doubling number of rounds.
                    if *n > 0 && !n.is_power_of_two() {
                        *n += 1;
                        continue;
                    }
                    let path = format!("/api/v1/namespaces/{}/pods", key.0);
                    let body = mirror_object(&p, &node_name, &node_uid);
                    match call(&client, "POST", path, Some(body)).await {
                        Ok(_) => {
                            refused.remove(&key);
                            log::info!("created mirror pod {}/{}", key.0, key.1);
                        }
                        Err(e) if e.is_conflict() => {}
                        Err(e) => {
                            if *refused.entry(key.clone()).or_default() == 0 {
                                log::warn!("creating mirror pod {}/{}: {e}", key.0, key.1);
                            }
                            *refused.entry(key).or_default() += 1;
                        }
                    }
                }
                MirrorAction::Delete {
                    namespace,
                    name,
                    uid,
                } => {
                    let body = json!({
                        "kind": "DeleteOptions", "apiVersion": "v1",
                        "gracePeriodSeconds": 0,
                        "preconditions": {"uid": uid},
                    });
                    let path = format!("/api/v1/namespaces/{namespace}/pods/{name}");
                    match call(&client, "DELETE", path, Some(body)).await {
                        Ok(_) => log::info!("deleted outdated mirror pod {namespace}/{name}"),
                        Err(e) if e.is_not_found() || e.is_conflict() => {}
                        Err(e) => log::warn!("deleting mirror pod {namespace}/{name}: {e}"),
                    }
                }
            }
        }
        // The static pods' statuses, published on their mirror pods.
        sent.retain(|uid, _| seen.iter().any(|m| &m.uid == uid));
        for m in seen.iter().filter(|m| !m.deleting) {
            let Some(p) = statics.iter().find(|p| {
                p.metadata.namespace == m.namespace
                    && p.metadata.name == m.name
                    && p.metadata.annotations.get(ANNOTATION_CONFIG_HASH) == Some(&m.hash)
            }) else {
                continue;
            };
            let Some(mut status) = kubelet.pod_status(&p.metadata.uid) else {
                continue;
            };
            // The conditions others set on the mirror pod are kept, as on any pod.
            crate::status::generate::merge_foreign_conditions(&mut status, &m.status);
            if same_but_times(&status, &m.status) || sent.get(&m.uid) == Some(&status) {
                continue;
            }
            let path = format!("/api/v1/namespaces/{}/pods/{}/status", m.namespace, m.name);
            // What changed since the mirror's copy and the last status it accepted, as a
            // pod's status is patched.
            let mut bases = vec![&m.status];
            bases.extend(sent.get(&m.uid));
            let body = crate::status::patch::status_patch(&m.uid, &bases, &status);
            match patch_strategic(&client, path, body).await {
                Ok(_) => {
                    sent.insert(m.uid.clone(), status);
                }
                Err(e) => log::debug!("mirror pod {}/{} status: {e}", m.namespace, m.name),
            }
        }
    }
}

/// Whether two statuses say the same apart from when conditions last changed and when the pod
/// started: a restarted picolet regenerates those, and must not re-post every pod for them.
pub fn same_but_times(a: &PodStatus, b: &PodStatus) -> bool {
    fn strip(s: &PodStatus) -> PodStatus {
        let mut s = s.clone();
        s.start_time = None;
        for c in &mut s.conditions {
            c.last_transition_time = None;
            c.last_probe_time = None;
        }
        s.conditions.sort_by(|x, y| x.type_.cmp(&y.type_));
        s
    }
    strip(a) == strip(b)
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn node_condition_events_on_first_report_and_on_change() {
        let first = node_events(None, [false, false, false, true]);
        assert_eq!(
            first,
            [
                Some("NodeHasSufficientMemory"),
                Some("NodeHasNoDiskPressure"),
                Some("NodeHasSufficientPID"),
                Some("NodeReady")
            ]
        );
        let same = node_events(
            Some([false, false, false, true]),
            [false, false, false, true],
        );
        assert_eq!(same, [None; 4]);
        let worse = node_events(
            Some([false, false, false, true]),
            [true, false, false, false],
        );
        assert_eq!(
            worse,
            [
                Some("NodeHasInsufficientMemory"),
                None,
                None,
                Some("NodeNotReady")
            ]
        );
    }

    fn static_pod(name: &str, hash: &str) -> Rc<Pod> {
        let mut p = Pod::default();
        p.metadata.name = name.into();
        p.metadata.namespace = "kube-system".into();
        p.metadata.uid = hash.into();
        p.metadata
            .annotations
            .insert(ANNOTATION_CONFIG_HASH.into(), hash.into());
        Rc::new(p)
    }

    fn mirror(name: &str, hash: &str, uid: &str) -> MirrorPod {
        MirrorPod {
            namespace: "kube-system".into(),
            name: name.into(),
            uid: uid.into(),
            hash: hash.into(),
            status: PodStatus::default(),
            deleting: false,
        }
    }

    #[test]
    fn mirrors_are_created_replaced_and_removed() {
        let statics = vec![static_pod("etcd-n", "h1"), static_pod("api-n", "h2")];
        // None yet: both created.
        let plan = plan_mirrors(&statics, &[]);
        assert_eq!(plan.len(), 2);
        assert!(plan.iter().all(|a| matches!(a, MirrorAction::Create(_))));
        // Current: nothing to do.
        let current = vec![mirror("etcd-n", "h1", "m1"), mirror("api-n", "h2", "m2")];
        assert!(plan_mirrors(&statics, &current).is_empty());
        // api-n's manifest changed (new hash): its mirror goes, a new one comes once it is gone;
        // a mirror without a static pod goes too.
        let edited = vec![static_pod("etcd-n", "h1"), static_pod("api-n", "h3")];
        let mut seen = current.clone();
        seen.push(mirror("old-n", "h0", "m0"));
        let plan = plan_mirrors(&edited, &seen);
        let deletes: Vec<&str> = plan
            .iter()
            .filter_map(|a| match a {
                MirrorAction::Delete { uid, .. } => Some(uid.as_str()),
                _ => None,
            })
            .collect();
        assert_eq!(deletes, vec!["m2", "m0"]);
        assert!(!plan.iter().any(|a| matches!(a, MirrorAction::Create(_))));
        // A mirror someone deleted (Terminating) is deleted for good; no second one meanwhile.
        let mut going = mirror("etcd-n", "h1", "m1");
        going.deleting = true;
        let plan = plan_mirrors(&statics, &[going, mirror("api-n", "h2", "m2")]);
        assert_eq!(
            plan,
            vec![MirrorAction::Delete {
                namespace: "kube-system".into(),
                name: "etcd-n".into(),
                uid: "m1".into()
            }]
        );
    }

    #[test]
    fn statuses_differing_only_in_times_are_the_same() {
        let cond = |t: &str, at: &str| crate::api::PodCondition {
            type_: t.into(),
            status: "True".into(),
            last_transition_time: Some(at.into()),
            ..Default::default()
        };
        let a = PodStatus {
            phase: Some("Running".into()),
            start_time: Some("2026-01-01T00:00:00Z".into()),
            conditions: vec![
                cond("Ready", "2026-01-01T00:00:01Z"),
                cond("Initialized", "x"),
            ],
            ..Default::default()
        };
        let mut b = a.clone();
        b.start_time = Some("2026-01-02T00:00:00Z".into());
        b.conditions = vec![
            cond("Initialized", "y"),
            cond("Ready", "2026-01-02T00:00:01Z"),
        ];
        assert!(same_but_times(&a, &b));
        b.phase = Some("Failed".into());
        assert!(!same_but_times(&a, &b));
    }

    #[test]
    fn mirror_object_is_owned_by_the_node_and_marked() {
        let p = static_pod("etcd-n", "h1");
        let v = mirror_object(&p, "n", "node-uid");
        assert_eq!(v["metadata"]["annotations"][ANNOTATION_CONFIG_MIRROR], "h1");
        assert_eq!(v["metadata"]["ownerReferences"][0]["kind"], "Node");
        assert_eq!(v["metadata"]["ownerReferences"][0]["uid"], "node-uid");
        assert_eq!(v["metadata"]["ownerReferences"][0]["controller"], true);
        assert!(
            v["metadata"].get("uid").is_none(),
            "the apiserver gives it its own UID"
        );
        assert_eq!(v["kind"], "Pod");
    }
}
