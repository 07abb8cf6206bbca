//! Cluster membership: the client identity (bootstrap, rotation), what the node last had from
//! the cluster, the API pods' source and Services (threads of their own), and the tasks that
//! keep the Node, its Lease, the pods' statuses, the objects they use and the mirror pods.

use std::rc::Rc;

use super::{Parts, Restored};
use crate::cli::options::Options;
use crate::config::{self, Snapshot};
use crate::node::Facts;
use crate::{apiclient, certificate, cluster, events, objects, rt, services};

/// The cluster `--kubeconfig` joins: its client, and how the client identity stood at start
/// with the certificate it had.
pub(super) struct Join {
    pub client: apiclient::Client,
    start: certificate::Start,
    identity: Option<certificate::Identity>,
}

/// The client of `--kubeconfig` (or of `--bootstrap-kubeconfig` until the node has an
/// identity); none without `--kubeconfig`.
pub(super) fn connect(o: &Options) -> Result<Option<Join>, String> {
    let Some(path) = &o.kubeconfig else {
        return Ok(None);
    };
    let store = certificate::Store::new(&o.root().pki(), certificate::CLIENT_PREFIX);
    let now = rt::now_nanos().div_euclid(1_000_000_000);
    let (conn, start) = certificate::start(
        path,
        o.bootstrap_kubeconfig.as_deref(),
        &store,
        o.rotation(),
        now,
    )
    .map_err(|e| e.to_string())?;
    let identity = certificate::Identity::of(&conn.credentials);
    let flag = if matches!(start, certificate::Start::Ready) {
        "--kubeconfig"
    } else {
        "--bootstrap-kubeconfig"
    };
    let client =
        apiclient::Client::new(&conn).map_err(|e| format!("{flag} {}: {e}", path.display()))?;
    client.set_content_type(o.kube_api_content_type);
    client.set_watch_bookmarks(o.apiserver_watch_bookmarks);
    Ok(Some(Join {
        client,
        start,
        identity,
    }))
}

/// The objects and Services of the checkpoints, when joined.
pub(super) fn restore(o: &Options, join: Option<&Join>) -> Restored {
    let objects = objects::Store::default();
    if join.is_none() {
        return Restored {
            objects,
            services: None,
        };
    }
    let checkpoint = o.root().objects_checkpoint();
    match cluster::objects::load_checkpoint(&checkpoint, &objects) {
        Ok(0) => {}
        Ok(n) => log::info!("{n} ConfigMaps, Secrets and tokens from the checkpoint"),
        Err(e) => log::warn!("ignoring the objects checkpoint: {e}"),
    }
    let shared = services::Shared::default();
    let checkpoint = o.root().services_checkpoint();
    match cluster::services::load_checkpoint(&checkpoint, &shared) {
        Ok(None) => {}
        Ok(Some(n)) => log::info!("{n} Services from the checkpoint"),
        Err(e) => log::warn!("ignoring the services checkpoint: {e}"),
    }
    Restored {
        objects,
        services: Some(shared),
    }
}

/// The certificate manager, and the cluster's tasks: at once, or on the first bootstrap once
/// the node has an identity.
pub(super) fn start(
    o: &Options,
    join: Option<&Join>,
    parts: &Parts,
    node: &Facts,
    restored: Restored,
    tx: async_channel::Sender<Snapshot>,
) -> Result<Vec<rt::Task<()>>, String> {
    let Some(join) = join else {
        return Ok(Vec::new());
    };
    let (mut tasks, ready) = start_certificates(o, join, &node.name);
    let client = join.client.clone();
    let facts = cluster::node::NodeFacts {
        node: node.clone(),
        allocatable: node.allocatable(&o.cgroups, &o.eviction),
        max_pods: o.max_pods,
        runtime_version: parts.runtime_version.clone(),
        labels: o.node_labels.clone(),
        taints: o.register_with_taints.clone(),
        kubelet_port: if cfg!(feature = "node-api") {
            o.node_api_port().unwrap_or(0)
        } else {
            0
        },
    };
    match ready {
        None => tasks.extend(start_cluster(o, client, parts, facts, restored, tx)?),
        Some(ready) => {
            let (o, parts) = (o.clone(), parts.clone());
            tasks.push(rt::spawn(async move {
                let _ = ready.recv().await;
                match start_cluster(&o, client, &parts, facts, restored, tx) {
                    Ok(tasks) => {
                        futures_lite::future::pending::<()>().await;
                        drop(tasks);
                    }
                    Err(e) => log::error!("joining the cluster: {e}"),
                }
            }));
        }
    }
    Ok(tasks)
}

/// The client certificate's manager (bootstrap, rotation, expiry), when the identity is a
/// certificate or a bootstrap kubeconfig is set; and, on the first bootstrap, the channel told
/// when the node has an identity.
fn start_certificates(
    o: &Options,
    join: &Join,
    node_name: &str,
) -> (Vec<rt::Task<()>>, Option<async_channel::Receiver<()>>) {
    let Some(kubeconfig) = &o.kubeconfig else {
        return (Vec::new(), None);
    };
    if join.identity.is_none() && o.bootstrap_kubeconfig.is_none() {
        return (Vec::new(), None);
    }
    let (tx, rx) = async_channel::bounded(1);
    log::info!(
        "client certificate: {}; rotation {}",
        match join.start {
            certificate::Start::Ready => "valid",
            certificate::Start::Bootstrap => "none yet, bootstrapping",
            certificate::Start::Expired => "expired",
        },
        if o.rotation() { "on" } else { "off" }
    );
    let m = certificate::ClientManager {
        client: join.client.clone(),
        kubeconfig: kubeconfig.clone(),
        bootstrap: o.bootstrap_kubeconfig.clone(),
        store: certificate::Store::new(&o.root().pki(), certificate::CLIENT_PREFIX),
        node: node_name.to_owned(),
        rotation: o.rotation(),
        ready: Some(tx),
    };
    let task = rt::spawn(m.run(join.identity.clone()));
    let wait = matches!(join.start, certificate::Start::Bootstrap).then_some(rx);
    (vec![task], wait)
}

/// The API pods' source and the Services (threads of their own), and the tasks that keep the
/// Node, its Lease, the pods' statuses, the objects they use and the mirror pods.
fn start_cluster(
    o: &Options,
    client: apiclient::Client,
    parts: &Parts,
    facts: cluster::node::NodeFacts,
    restored: Restored,
    tx: async_channel::Sender<Snapshot>,
) -> Result<Vec<rt::Task<()>>, String> {
    let node_name = facts.node.name.clone();
    let cfg = config::api::ApiSourceConfig {
        node_name: node_name.clone(),
        poll_interval: o.apiserver_poll_interval,
        checkpoint: Some(o.root().pods_checkpoint()),
        node: Some(parts.admission_node.clone()),
    };
    let mirrors = config::api::Mirrors::default();
    let (c, m) = (client.clone(), mirrors.clone());
    std::thread::Builder::new()
        .name("api-source".into())
        .spawn(move || config::api::run_blocking(c, cfg, tx, m))
        .map_err(|e| format!("starting the api source thread: {e}"))?;
    if let Some(shared) = restored.services {
        let (c, name, poll) = (client.clone(), node_name.clone(), o.apiserver_poll_interval);
        let checkpoint = Some(o.root().services_checkpoint());
        std::thread::Builder::new()
            .name("api-services".into())
            .spawn(move || cluster::services::run_blocking(c, shared, &name, poll, checkpoint))
            .map_err(|e| format!("starting the api services thread: {e}"))?;
    }
    let kubelet = &parts.kubelet;
    let beats = cluster::Heartbeats {
        lease_duration_secs: o.node_lease_duration_seconds,
        status_update: o.node_status_update_frequency,
        status_report: o.node_status_report_frequency,
    };
    let recorder = Rc::new(events::Recorder::new(&node_name));
    events::install(recorder.clone());
    Ok(vec![
        rt::spawn(events::run(recorder, client.clone())),
        rt::spawn(cluster::run_node(
            client.clone(),
            facts,
            kubelet.clone(),
            beats,
            parts.admission_node.seen.clone(),
        )),
        rt::spawn(cluster::run_lease(client.clone(), node_name.clone(), beats)),
        rt::spawn(cluster::run_pod_status(client.clone(), kubelet.clone())),
        rt::spawn(cluster::objects::run_objects(
            client.clone(),
            kubelet.clone(),
            restored.objects,
            Some(o.root().objects_checkpoint()),
            o.config_map_and_secret_change_detection_strategy,
            o.sync_frequency,
            node_name.clone(),
        )),
        rt::spawn(cluster::run_mirrors(
            client,
            kubelet.clone(),
            mirrors,
            node_name,
        )),
    ])
}
