//! The runtime manager: inspects pods in the runtime and carries out the actions that bring
//! them to their spec, over the CRI client.

pub mod actions;
pub mod backoff;
pub mod config;
pub mod env;
pub mod images;
pub mod labels;

use std::cell::RefCell;
use std::collections::HashMap;
use std::fs;
use std::path::PathBuf;
use std::time::Duration;

use crate::api::{Container, Pod};
use crate::cri::{Cri, CriError, v1};
use crate::hash;
use crate::kubecontainer::{
    ContainerState, ContainerStatus, PodRuntimeStatus, SandboxState, SandboxStatus,
};
use crate::rt;
use crate::volume;

use backoff::Backoff;
pub use config::NodeContext;

/// Why a container is not running, as shown in its `state.waiting`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Waiting {
    pub reason: String,
    pub message: String,
}

/// The result of one pod sync.
#[derive(Debug, Default)]
pub struct SyncOutcome {
    /// Sync again after this long (a backoff ends, or an error should be retried).
    pub retry_after: Option<Duration>,
    /// Errors met on the way, for the log.
    pub errors: Vec<String>,
    /// Whether the sync asked the runtime to change anything.
    pub acted: bool,
}

impl SyncOutcome {
    fn retry(&mut self, d: Duration) {
        self.retry_after = Some(self.retry_after.map_or(d, |r| r.min(d)));
    }
    fn fail(&mut self, msg: String) {
        self.errors.push(msg);
    }
}

/// How soon a sync that failed is retried: 2 s, doubling to 1 min while it keeps failing, so a
/// pod that cannot start (a missing hostPath, a broken CNI) neither spins nor floods the log.
const ERROR_RETRY: Duration = Duration::from_secs(2);
const ERROR_RETRY_MAX: Duration = Duration::from_secs(60);
/// Longest termination message read back from a container.
const MAX_TERMINATION_MESSAGE: u64 = 4096;

/// Hash of a container's spec, recorded on the container so a changed spec is noticed.
///
/// Fields at their default (false, empty, absent) are left out before hashing, so a later
/// picolet that knows more fields hashes an unchanged container the same and does not restart it.
pub fn container_hash(c: &Container) -> u64 {
    fn prune(v: serde_json::Value) -> Option<serde_json::Value> {
        use serde_json::Value;
        match v {
            Value::Null | Value::Bool(false) => None,
            Value::String(s) if s.is_empty() => None,
            Value::Array(a) => {
                let a: Vec<Value> = a
                    .into_iter()
                    .map(|x| prune(x).unwrap_or(Value::Null))
                    .collect();
                (!a.is_empty()).then_some(Value::Array(a))
            }
            Value::Object(o) => {
                let o: serde_json::Map<String, Value> = o
                    .into_iter()
                    .filter_map(|(k, v)| prune(v).map(|v| (k, v)))
                    .collect();
                (!o.is_empty()).then_some(Value::Object(o))
            }
            v => Some(v),
        }
    }
    let v = serde_json::to_value(c)
        .ok()
        .and_then(prune)
        .unwrap_or_default();
    hash::fnv1a64(&[hash::canonical_json(&v).as_bytes()])
}

fn backoff_key(uid: &str, container: &str) -> String {
    format!("{uid}/{container}")
}

fn sandbox_from(s: &v1::PodSandbox) -> SandboxStatus {
    SandboxStatus {
        id: s.id.as_str().into(),
        attempt: s.metadata.as_ref().map_or(0, |m| m.attempt),
        state: if s.state == v1::PodSandboxState::SandboxReady as i32 {
            SandboxState::Ready
        } else {
            SandboxState::NotReady
        },
        created_at: s.created_at,
        ip: None,
        host_network: false,
    }
}

/// The runtime-neutral state of a CRI container state value.
pub fn container_state(s: i32) -> ContainerState {
    match v1::ContainerState::try_from(s) {
        Ok(v1::ContainerState::ContainerCreated) => ContainerState::Created,
        Ok(v1::ContainerState::ContainerRunning) => ContainerState::Running,
        Ok(v1::ContainerState::ContainerExited) => ContainerState::Exited,
        _ => ContainerState::Unknown,
    }
}

/// Reads the termination message a container left in its mounted file.
fn termination_message(s: &v1::ContainerStatus) -> Option<String> {
    use std::io::Read;
    let path = s.annotations.get(labels::TERMINATION_MESSAGE_PATH)?;
    let mount = s.mounts.iter().find(|m| &m.container_path == path)?;
    let mut buf = String::new();
    fs::File::open(&mount.host_path)
        .ok()?
        .take(MAX_TERMINATION_MESSAGE)
        .read_to_string(&mut buf)
        .ok()?;
    (!buf.is_empty()).then_some(buf)
}

fn container_from(s: &v1::ContainerStatus, sandbox_id: &str) -> ContainerStatus {
    let state = container_state(s.state);
    let mut message = s.message.clone();
    if state == ContainerState::Exited
        && let Some(m) = termination_message(s)
    {
        message = m;
    }
    ContainerStatus {
        id: s.id.as_str().into(),
        name: s.metadata.as_ref().map_or("", |m| m.name.as_str()).into(),
        state,
        created_at: s.created_at,
        started_at: s.started_at,
        finished_at: s.finished_at,
        exit_code: s.exit_code,
        image: s.image.as_ref().map_or("", |i| i.image.as_str()).into(),
        image_ref: s.image_ref.as_str().into(),
        reason: s.reason.as_str().into(),
        message: message.into(),
        hash: labels::parse_hash(&s.annotations),
        restart_count: labels::parse_restart_count(&s.annotations),
        sandbox_id: sandbox_id.into(),
    }
}

/// A container as listed, before inspection (enough for the PLEG to diff).
fn listed_container(c: &v1::Container) -> ContainerStatus {
    ContainerStatus {
        id: c.id.as_str().into(),
        name: c.metadata.as_ref().map_or("", |m| m.name.as_str()).into(),
        state: container_state(c.state),
        created_at: c.created_at,
        started_at: 0,
        finished_at: 0,
        exit_code: 0,
        image: c.image.as_ref().map_or("", |i| i.image.as_str()).into(),
        image_ref: c.image_ref.as_str().into(),
        reason: "".into(),
        message: "".into(),
        hash: labels::parse_hash(&c.annotations),
        restart_count: labels::parse_restart_count(&c.annotations),
        sandbox_id: c.pod_sandbox_id.as_str().into(),
    }
}

/// One listing of the whole runtime, grouped by pod UID.
#[derive(Debug, Default)]
pub struct Listing {
    pub pods: HashMap<String, ListedPod>,
}

#[derive(Debug, Default)]
pub struct ListedPod {
    pub name: String,
    pub namespace: String,
    pub sandboxes: Vec<v1::PodSandbox>,
    pub containers: Vec<v1::Container>,
}

impl Listing {
    /// Groups sandboxes and containers by the pod UID label. With `marked_only`, objects
    /// without picolet's mark (another node agent's) are left out; objects without a pod UID
    /// label (not a pod's) always are.
    pub fn group(
        sandboxes: Vec<v1::PodSandbox>,
        containers: Vec<v1::Container>,
        marked_only: bool,
    ) -> Listing {
        let mut l = Listing::default();
        let ours = |l: &HashMap<String, String>| {
            !marked_only || l.get(labels::MANAGED).is_some_and(|v| v == "true")
        };
        for s in sandboxes.into_iter().filter(|s| ours(&s.labels)) {
            let Some(uid) = s.labels.get(labels::POD_UID).cloned() else {
                continue;
            };
            let p = l.pods.entry(uid).or_default();
            if let Some(m) = &s.metadata {
                p.name.clone_from(&m.name);
                p.namespace.clone_from(&m.namespace);
            }
            p.sandboxes.push(s);
        }
        for c in containers.into_iter().filter(|c| ours(&c.labels)) {
            let Some(uid) = c.labels.get(labels::POD_UID).cloned() else {
                continue;
            };
            let p = l.pods.entry(uid).or_default();
            if p.name.is_empty() {
                p.name = c.labels.get(labels::POD_NAME).cloned().unwrap_or_default();
                p.namespace = c
                    .labels
                    .get(labels::POD_NAMESPACE)
                    .cloned()
                    .unwrap_or_default();
            }
            p.containers.push(c);
        }
        l
    }
}

fn label_filter(uid: &str) -> HashMap<String, String> {
    let mut m = HashMap::new();
    m.insert(labels::POD_UID.to_owned(), uid.to_owned());
    m
}

pub struct RuntimeManager {
    cri: Cri,
    node: NodeContext,
    restart_backoff: RefCell<Backoff>,
    pull_backoff: RefCell<Backoff>,
    sync_backoff: RefCell<Backoff>,
    waiting: RefCell<HashMap<(String, String), Waiting>>,
}

impl RuntimeManager {
    pub fn new(cri: Cri, node: NodeContext) -> Self {
        RuntimeManager {
            cri,
            node,
            restart_backoff: RefCell::new(Backoff::container_restarts()),
            pull_backoff: RefCell::new(Backoff::container_restarts()),
            sync_backoff: RefCell::new(Backoff::new(ERROR_RETRY, ERROR_RETRY_MAX)),
            waiting: RefCell::new(HashMap::new()),
        }
    }

    pub fn node(&self) -> &NodeContext {
        &self.node
    }

    /// Why a container of a pod is waiting, if a sync recorded a reason.
    pub fn waiting(&self, uid: &str, container: &str) -> Option<Waiting> {
        self.waiting
            .borrow()
            .get(&(uid.to_owned(), container.to_owned()))
            .cloned()
    }

    fn set_waiting(&self, uid: &str, container: &str, reason: &str, message: String) {
        self.waiting.borrow_mut().insert(
            (uid.to_owned(), container.to_owned()),
            Waiting {
                reason: reason.to_owned(),
                message,
            },
        );
    }

    fn clear_waiting(&self, uid: &str, container: &str) {
        self.waiting
            .borrow_mut()
            .remove(&(uid.to_owned(), container.to_owned()));
    }

    /// Lists every sandbox and container in the runtime (two calls), grouped by pod UID.
    pub async fn list(&self) -> Result<Listing, CriError> {
        let sbs = self
            .cri
            .list_pod_sandbox(v1::ListPodSandboxRequest::default())
            .await?
            .items;
        let cs = self
            .cri
            .list_containers(v1::ListContainersRequest::default())
            .await?
            .containers;
        Ok(Listing::group(sbs, cs, true))
    }

    /// A quick view of a listed pod without any per-object calls.
    pub fn shallow_status(uid: &str, p: &ListedPod) -> PodRuntimeStatus {
        let mut st = PodRuntimeStatus {
            uid: uid.into(),
            name: p.name.as_str().into(),
            namespace: p.namespace.as_str().into(),
            sandboxes: p.sandboxes.iter().map(sandbox_from).collect(),
            containers: p.containers.iter().map(listed_container).collect(),
        };
        st.sandboxes
            .sort_by_key(|s| std::cmp::Reverse(s.created_at));
        st.containers
            .sort_by_key(|c| std::cmp::Reverse(c.created_at));
        st
    }

    /// Full status of one listed pod: the newest sandbox's network and every container's
    /// status, fetched concurrently.
    pub async fn inspect(&self, uid: &str, p: &ListedPod) -> Result<PodRuntimeStatus, CriError> {
        let mut st = Self::shallow_status(uid, p);
        if let Some(newest) = st.sandboxes.first_mut() {
            let req = v1::PodSandboxStatusRequest {
                pod_sandbox_id: newest.id.to_string(),
                verbose: false,
            };
            match self.cri.pod_sandbox_status(req).await {
                Ok(r) => {
                    if let Some(s) = r.status {
                        let ip = s
                            .network
                            .as_ref()
                            .map(|n| n.ip.as_str())
                            .filter(|ip| !ip.is_empty());
                        newest.ip = ip.map(Into::into);
                        newest.host_network = s
                            .linux
                            .as_ref()
                            .and_then(|l| l.namespaces.as_ref())
                            .and_then(|n| n.options.as_ref())
                            .is_some_and(|o| o.network == v1::NamespaceMode::Node as i32);
                    }
                }
                Err(e) if e.is_not_found() => {}
                Err(e) => return Err(e),
            }
        }
        let futs = st.containers.iter().map(|c| {
            let req = v1::ContainerStatusRequest {
                container_id: c.id.to_string(),
                verbose: false,
            };
            self.cri.container_status(req)
        });
        let results = join_all(futs).await;
        let mut out = Vec::with_capacity(results.len());
        for (listed, r) in st.containers.iter().zip(results) {
            match r {
                Ok(resp) => match resp.status {
                    Some(s) => out.push(container_from(&s, &listed.sandbox_id)),
                    None => out.push(listed.clone()),
                },
                Err(e) if e.is_not_found() => {}
                Err(e) => return Err(e),
            }
        }
        st.containers = out;
        Ok(st)
    }

    /// Full status of one pod, listing only its own objects.
    pub async fn pod_status(&self, uid: &str) -> Result<PodRuntimeStatus, CriError> {
        let filter = label_filter(uid);
        let sandboxes = self
            .cri
            .list_pod_sandbox(v1::ListPodSandboxRequest {
                filter: Some(v1::PodSandboxFilter {
                    label_selector: filter.clone(),
                    ..Default::default()
                }),
            })
            .await?
            .items;
        let containers = self
            .cri
            .list_containers(v1::ListContainersRequest {
                filter: Some(v1::ContainerFilter {
                    label_selector: filter,
                    ..Default::default()
                }),
            })
            .await?
            .containers;
        // Everything carrying the UID of a pod picolet runs is that pod's, marked or not (an
        // earlier picolet may have created it without the mark): it is adopted, or cleaned up.
        let p = Listing::group(sandboxes, containers, false)
            .pods
            .remove(uid)
            .unwrap_or_default();
        self.inspect(uid, &p).await
    }

    /// Brings the runtime to the pod's spec, one step: level-triggered, so every sync
    /// recomputes what to do from the observed state.
    pub async fn sync_pod(&self, pod: &Pod, st: &PodRuntimeStatus) -> SyncOutcome {
        let mut out = self.sync_pod_once(pod, st).await;
        let key = pod.metadata.uid.as_str();
        let mut b = self.sync_backoff.borrow_mut();
        if out.errors.is_empty() {
            b.forget(key);
        } else {
            b.next(key, rt::now_nanos());
            out.retry(b.delay(key).unwrap_or(ERROR_RETRY));
        }
        out
    }

    async fn sync_pod_once(&self, pod: &Pod, st: &PodRuntimeStatus) -> SyncOutcome {
        let mut out = SyncOutcome::default();
        let uid = pod.metadata.uid.as_str();
        let hashes: Vec<u64> = pod.spec.containers.iter().map(container_hash).collect();
        let a = actions::compute(pod, st, &hashes);
        let grace = config::grace_period(pod);

        if a.kill_pod {
            let live = st.running().next().is_some()
                || st.sandboxes.iter().any(|s| s.state == SandboxState::Ready);
            out.acted |= live;
            if live {
                let why = if a.create_sandbox {
                    "to recreate its sandbox"
                } else {
                    "it has finished"
                };
                log::info!("stopping pod {} ({uid}): {why}", pod.metadata.name);
            }
            if let Err(e) = self.kill_pod(st, grace).await {
                out.fail(format!("killing pod: {e}"));
                return out;
            }
            if a.create_sandbox {
                // Init containers run again in the new sandbox; their old instances would make
                // the next sync believe they already did (upstream purges them too).
                out.acted = true;
                if let Err(e) = self.purge_init_containers(pod, st).await {
                    out.fail(format!("removing old init containers: {e}"));
                    return out;
                }
            }
        }
        out.acted |= !a.containers_to_kill.is_empty();
        let kills = a.containers_to_kill.iter().map(|k| {
            log::info!(
                "killing container {} of pod {}: {}",
                k.name,
                pod.metadata.name,
                k.reason
            );
            self.stop_container(&k.id, grace)
        });
        for r in join_all(kills).await {
            if let Err(e) = r {
                out.fail(format!("killing container: {e}"));
            }
        }
        if !out.errors.is_empty() {
            // Never start a replacement while the old instance may still run.
            return out;
        }
        // Nothing to start: no sandbox to use, or the pod has finished (its sandbox is stopped).
        if !a.create_sandbox && (a.sandbox_id.is_none() || a.kill_pod) {
            return out;
        }

        let volumes = match volume::prepare(&self.node.root_dir, pod) {
            Ok(v) => v,
            Err(e) => {
                for c in pod.spec.init_containers.iter().chain(&pod.spec.containers) {
                    self.set_waiting(uid, &c.name, "ContainerCreating", e.to_string());
                }
                out.fail(format!("preparing volumes: {e}"));
                return out;
            }
        };
        let sandbox_cfg = config::sandbox_config(pod, &self.node, a.attempt);
        let (sandbox_id, pod_ip) = if a.create_sandbox {
            out.acted = true;
            match self.run_sandbox(pod, &sandbox_cfg).await {
                Ok(x) => x,
                Err(e) => {
                    out.fail(format!("creating pod sandbox: {e}"));
                    return out;
                }
            }
        } else {
            let id = a.sandbox_id.clone().unwrap_or_default().to_string();
            (id, st.ip().unwrap_or_default().to_owned())
        };

        let ctx = StartContext {
            pod,
            st,
            sandbox_id: &sandbox_id,
            sandbox_cfg: &sandbox_cfg,
            pod_ip: &pod_ip,
            volumes: &volumes,
        };
        if let Some(i) = a.next_init_container {
            let c = &pod.spec.init_containers[i];
            self.start_container(&ctx, c, container_hash(c), &mut out)
                .await;
            return out;
        }
        for &i in &a.containers_to_start {
            let c = &pod.spec.containers[i];
            self.start_container(&ctx, c, hashes[i], &mut out).await;
        }
        out
    }

    async fn run_sandbox(
        &self,
        pod: &Pod,
        cfg: &v1::PodSandboxConfig,
    ) -> Result<(String, String), String> {
        let logs = config::pod_log_dir(&self.node.pod_logs_dir, pod);
        fs::create_dir_all(&logs).map_err(|e| format!("creating {}: {e}", logs.display()))?;
        log::info!(
            "creating sandbox for pod {} ({})",
            pod.metadata.name,
            pod.metadata.uid
        );
        let req = v1::RunPodSandboxRequest {
            config: Some(cfg.clone()),
            runtime_handler: String::new(),
        };
        let id = self
            .cri
            .run_pod_sandbox(req)
            .await
            .map_err(|e| e.to_string())?
            .pod_sandbox_id;
        let ip = match self
            .cri
            .pod_sandbox_status(v1::PodSandboxStatusRequest {
                pod_sandbox_id: id.clone(),
                verbose: false,
            })
            .await
        {
            Ok(r) => r
                .status
                .and_then(|s| s.network)
                .map(|n| n.ip)
                .unwrap_or_default(),
            Err(e) => return Err(format!("reading status of new sandbox {id}: {e}")),
        };
        Ok((id, ip))
    }

    async fn start_container(
        &self,
        ctx: &StartContext<'_>,
        c: &Container,
        hash: u64,
        out: &mut SyncOutcome,
    ) {
        let pod = ctx.pod;
        let uid = pod.metadata.uid.as_str();
        let prev = ctx.st.latest(&c.name);
        let now = rt::now_nanos();
        let key = backoff_key(uid, &c.name);
        if let Some(p) = prev.filter(|p| p.state == ContainerState::Exited) {
            let mut b = self.restart_backoff.borrow_mut();
            if let Some(rem) = b.remaining(&key, p.finished_at, now) {
                let delay = b.delay(&key).unwrap_or_default();
                drop(b);
                self.set_waiting(
                    uid,
                    &c.name,
                    "CrashLoopBackOff",
                    format!(
                        "back-off {}s restarting failed container={} pod={}_{}({uid})",
                        delay.as_secs(),
                        c.name,
                        pod.metadata.name,
                        config::namespace(pod)
                    ),
                );
                out.retry(rem);
                return;
            }
            b.next(&key, now);
        }

        let image_ref = match self.ensure_image(c, now).await {
            Ok(r) => r,
            Err((reason, msg, retry)) => {
                self.set_waiting(uid, &c.name, reason, msg.clone());
                out.errors.push(msg);
                out.retry(retry);
                return;
            }
        };
        let mut subpaths = HashMap::new();
        for vm in &c.volume_mounts {
            let sub = vm.sub_path.as_deref().filter(|s| !s.is_empty());
            let (Some(sub), Some(base)) = (sub, ctx.volumes.get(&vm.name)) else {
                continue;
            };
            match volume::resolve_subpath(base, sub) {
                Ok(p) => {
                    subpaths.insert(vm.mount_path.clone(), p);
                }
                Err(e) => {
                    let msg = format!("volume mount {:?}: {e}", vm.name);
                    self.set_waiting(uid, &c.name, "CreateContainerConfigError", msg.clone());
                    out.fail(msg);
                    return;
                }
            }
        }
        let restart_count = prev.map_or(0, |p| p.restart_count.saturating_add(1));
        let tlog = match self.termination_log(uid, &c.name, restart_count) {
            Ok(p) => p,
            Err(e) => {
                self.set_waiting(uid, &c.name, "CreateContainerConfigError", e.clone());
                out.fail(e);
                return;
            }
        };
        let logs = config::pod_log_dir(&self.node.pod_logs_dir, pod).join(&c.name);
        if let Err(e) = fs::create_dir_all(&logs) {
            out.fail(format!("creating {}: {e}", logs.display()));
            return;
        }
        let cfg = config::container_config(
            pod,
            &self.node,
            &config::ContainerInputs {
                container: c,
                image_ref: &image_ref,
                restart_count,
                hash,
                pod_ip: ctx.pod_ip,
                volumes: ctx.volumes,
                subpaths: &subpaths,
                termination_log: Some(&tlog),
            },
        );
        out.acted = true;
        let req = v1::CreateContainerRequest {
            pod_sandbox_id: ctx.sandbox_id.to_owned(),
            config: Some(cfg),
            sandbox_config: Some(ctx.sandbox_cfg.clone()),
        };
        let id = match self.cri.create_container(req).await {
            Ok(r) => r.container_id,
            Err(e) => {
                self.set_waiting(uid, &c.name, "CreateContainerError", e.to_string());
                out.fail(format!("creating container {}: {e}", c.name));
                return;
            }
        };
        match self
            .cri
            .start_container(v1::StartContainerRequest {
                container_id: id.clone(),
            })
            .await
        {
            Ok(_) => {
                log::info!(
                    "started container {} of pod {} (restart {restart_count})",
                    c.name,
                    pod.metadata.name
                );
                self.clear_waiting(uid, &c.name);
            }
            Err(e) => {
                self.set_waiting(uid, &c.name, "RunContainerError", e.to_string());
                out.fail(format!("starting container {}: {e}", c.name));
            }
        }
    }

    fn termination_log(&self, uid: &str, container: &str, restart: u32) -> Result<PathBuf, String> {
        let dir = volume::pod_dir(&self.node.root_dir, uid)
            .join("containers")
            .join(container);
        fs::create_dir_all(&dir).map_err(|e| format!("creating {}: {e}", dir.display()))?;
        // Two files per container, alternating: the running instance's and the one dead instance
        // container GC keeps (whose message the status still shows). Truncated on reuse.
        let path = dir.join(format!("termination-log-{}", restart % 2));
        fs::File::create(&path).map_err(|e| format!("creating {}: {e}", path.display()))?;
        Ok(path)
    }

    /// Makes sure the container's image is present, by its pull policy. On failure returns
    /// (reason, message, retry after).
    async fn ensure_image(
        &self,
        c: &Container,
        now: i64,
    ) -> Result<String, (&'static str, String, Duration)> {
        use images::Decision;
        let image = c.image.as_str();
        let present = match self.image_id(image).await {
            Ok(id) => id,
            Err(e) => {
                return Err((
                    "ErrImagePull",
                    format!("checking image {image:?}: {e}"),
                    ERROR_RETRY,
                ));
            }
        };
        match images::decide(c, present.is_some()) {
            Decision::Use => return Ok(present.unwrap_or_default()),
            Decision::NeverPull => {
                return Err((
                    "ErrImageNeverPull",
                    format!("container image {image:?} is not present with pull policy of Never"),
                    Duration::from_secs(10),
                ));
            }
            Decision::Pull => {}
        }
        if let Some(rem) = self.pull_backoff.borrow().remaining_since_last(image, now) {
            return Err((
                "ImagePullBackOff",
                format!("back-off pulling image {image:?}"),
                rem,
            ));
        }
        log::info!("pulling image {image}");
        let req = v1::PullImageRequest {
            image: Some(v1::ImageSpec {
                image: image.to_owned(),
                annotations: HashMap::new(),
            }),
            auth: None,
            sandbox_config: None,
        };
        match self.cri.pull_image(req).await {
            Ok(r) => {
                self.pull_backoff.borrow_mut().forget(image);
                Ok(match self.image_id(image).await {
                    Ok(Some(id)) => id,
                    _ => r.image_ref,
                })
            }
            Err(e) => {
                let mut b = self.pull_backoff.borrow_mut();
                b.next(image, now);
                let wait = b.delay(image).unwrap_or(Duration::from_secs(10));
                Err((
                    "ErrImagePull",
                    format!("failed to pull image {image:?}: {e}"),
                    wait,
                ))
            }
        }
    }

    async fn image_id(&self, image: &str) -> Result<Option<String>, CriError> {
        let req = v1::ImageStatusRequest {
            image: Some(v1::ImageSpec {
                image: image.to_owned(),
                annotations: HashMap::new(),
            }),
            verbose: false,
        };
        Ok(self
            .cri
            .image_status(req)
            .await?
            .image
            .map(|i| i.id)
            .filter(|id| !id.is_empty()))
    }

    async fn stop_container(&self, id: &str, grace: i64) -> Result<(), CriError> {
        match self.cri.stop_container(id, grace).await {
            Err(e) if e.is_not_found() => Ok(()),
            r => r,
        }
    }

    /// Stops every running container (concurrently, each with the grace period) and then every
    /// ready sandbox of the pod.
    pub async fn kill_pod(&self, st: &PodRuntimeStatus, grace: i64) -> Result<(), CriError> {
        let stops = st.running().map(|c| self.stop_container(&c.id, grace));
        for r in join_all(stops).await {
            r?;
        }
        for s in st
            .sandboxes
            .iter()
            .filter(|s| s.state == SandboxState::Ready)
        {
            let req = v1::StopPodSandboxRequest {
                pod_sandbox_id: s.id.to_string(),
            };
            match self.cri.stop_pod_sandbox(req).await {
                Err(e) if !e.is_not_found() => return Err(e),
                _ => {}
            }
        }
        Ok(())
    }

    /// Kills the pod and removes every trace of it: containers, sandboxes, logs, volumes and
    /// the remembered backoffs.
    pub async fn remove_pod(&self, st: &PodRuntimeStatus, grace: i64) -> Result<(), CriError> {
        self.kill_pod(st, grace).await?;
        for c in &st.containers {
            match self
                .cri
                .remove_container(v1::RemoveContainerRequest {
                    container_id: c.id.to_string(),
                })
                .await
            {
                Err(e) if !e.is_not_found() => return Err(e),
                _ => {}
            }
        }
        for s in &st.sandboxes {
            match self
                .cri
                .remove_pod_sandbox(v1::RemovePodSandboxRequest {
                    pod_sandbox_id: s.id.to_string(),
                })
                .await
            {
                Err(e) if !e.is_not_found() => return Err(e),
                _ => {}
            }
        }
        self.forget(&st.uid, &st.name, &st.namespace).await;
        Ok(())
    }

    /// Drops local state of a pod that is gone from the runtime.
    /// Large emptyDirs on slow flash take a while to delete: that happens off the executor
    /// thread, so PLEG, syncs and the local API never wait for it.
    pub async fn forget(&self, uid: &str, name: &str, namespace: &str) {
        let uid_prefix = format!("{uid}/");
        self.restart_backoff.borrow_mut().forget_prefix(&uid_prefix);
        self.sync_backoff.borrow_mut().forget(uid);
        self.waiting.borrow_mut().retain(|(u, _), _| u != uid);
        let logs = (!name.is_empty())
            .then(|| config::log_dir_of(&self.node.pod_logs_dir, namespace, name, uid));
        let (root, uid) = (self.node.root_dir.clone(), uid.to_owned());
        rt::unblock(move || {
            if let Some(logs) = logs
                && let Err(e) = fs::remove_dir_all(&logs)
                && e.kind() != std::io::ErrorKind::NotFound
            {
                log::warn!("removing {}: {e}", logs.display());
            }
            if let Err(e) = volume::cleanup(&root, &uid) {
                log::warn!("removing volumes of pod {uid}: {e}");
            }
        })
        .await;
    }

    /// Carries out a [`gc_plan`].
    pub async fn gc_pod(&self, st: &PodRuntimeStatus) {
        let plan = gc_plan(st);
        for c in plan.containers {
            let req = v1::RemoveContainerRequest {
                container_id: c.id.to_string(),
            };
            match self.cri.remove_container(req).await {
                Err(e) if !e.is_not_found() => log::warn!("removing dead container {}: {e}", c.id),
                // The runtime leaves the log file; a crash loop would fill the disk with them.
                _ => self.remove_log(st, c),
            }
        }
        for s in plan.sandboxes {
            let req = v1::RemovePodSandboxRequest {
                pod_sandbox_id: s.id.to_string(),
            };
            if let Err(e) = self.cri.remove_pod_sandbox(req).await
                && !e.is_not_found()
            {
                log::warn!("removing old sandbox {}: {e}", s.id);
            }
        }
    }

    async fn purge_init_containers(
        &self,
        pod: &Pod,
        st: &PodRuntimeStatus,
    ) -> Result<(), CriError> {
        let inits = &pod.spec.init_containers;
        for c in st
            .containers
            .iter()
            .filter(|c| inits.iter().any(|i| *i.name == *c.name))
        {
            let req = v1::RemoveContainerRequest {
                container_id: c.id.to_string(),
            };
            match self.cri.remove_container(req).await {
                Err(e) if !e.is_not_found() => return Err(e),
                _ => self.remove_log(st, c),
            }
        }
        Ok(())
    }

    fn remove_log(&self, st: &PodRuntimeStatus, c: &ContainerStatus) {
        let dir = config::log_dir_of(&self.node.pod_logs_dir, &st.namespace, &st.name, &st.uid);
        let log = dir.join(&*c.name).join(format!("{}.log", c.restart_count));
        if let Err(e) = fs::remove_file(&log)
            && e.kind() != std::io::ErrorKind::NotFound
        {
            log::warn!("removing {}: {e}", log.display());
        }
    }

    pub fn gc_backoffs(&self, now: i64) {
        self.restart_backoff.borrow_mut().gc(now);
        self.pull_backoff.borrow_mut().gc(now);
        self.sync_backoff.borrow_mut().gc(now);
    }
}

/// What container GC removes from a pod (the kubelet's GC with MaxPerPodContainer 1).
#[derive(Debug, Default, PartialEq)]
pub struct GcPlan<'a> {
    /// Instances that are not running, beyond the newest one per container name.
    pub containers: Vec<&'a ContainerStatus>,
    /// Sandboxes that are not ready, not the newest, and hold no container that stays: removing
    /// a sandbox removes its containers, so one still holding a kept instance stays too.
    pub sandboxes: Vec<&'a SandboxStatus>,
}

impl GcPlan<'_> {
    pub fn is_empty(&self) -> bool {
        self.containers.is_empty() && self.sandboxes.is_empty()
    }
}

/// Plans container GC for a pod whose containers are listed newest first.
pub fn gc_plan(st: &PodRuntimeStatus) -> GcPlan<'_> {
    let mut plan = GcPlan::default();
    let mut kept_dead: std::collections::HashSet<&str> = std::collections::HashSet::new();
    let mut kept_sandboxes: std::collections::HashSet<&str> = std::collections::HashSet::new();
    for c in &st.containers {
        if c.state == ContainerState::Running || kept_dead.insert(&c.name) {
            kept_sandboxes.insert(&c.sandbox_id);
        } else {
            plan.containers.push(c);
        }
    }
    plan.sandboxes = st
        .sandboxes
        .iter()
        .skip(1)
        .filter(|s| s.state == SandboxState::NotReady && !kept_sandboxes.contains(&*s.id))
        .collect();
    plan
}

struct StartContext<'a> {
    pod: &'a Pod,
    st: &'a PodRuntimeStatus,
    sandbox_id: &'a str,
    sandbox_cfg: &'a v1::PodSandboxConfig,
    pod_ip: &'a str,
    volumes: &'a HashMap<String, PathBuf>,
}

/// Runs futures concurrently on this task and collects their outputs in order.
pub async fn join_all<F: std::future::Future>(futs: impl IntoIterator<Item = F>) -> Vec<F::Output> {
    let tasks: Vec<_> = futs.into_iter().map(Box::pin).collect();
    let mut outs: Vec<Option<F::Output>> = tasks.iter().map(|_| None).collect();
    let mut tasks: Vec<Option<_>> = tasks.into_iter().map(Some).collect();
    std::future::poll_fn(|cx| {
        let mut pending = false;
        for (slot, out) in tasks.iter_mut().zip(outs.iter_mut()) {
            if let Some(f) = slot {
                match f.as_mut().poll(cx) {
                    std::task::Poll::Ready(v) => {
                        *out = Some(v);
                        *slot = None;
                    }
                    std::task::Poll::Pending => pending = true,
                }
            }
        }
        if pending {
            std::task::Poll::Pending
        } else {
            std::task::Poll::Ready(())
        }
    })
    .await;
    outs.into_iter()
        .map(|o| o.expect("every future completed"))
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn container_hash_ignores_default_fields_but_sees_changes() {
        let a = Container {
            name: "c".into(),
            image: "busybox:1".into(),
            ..Default::default()
        };
        let mut b = a.clone();
        b.tty = false;
        b.stdin = false;
        assert_eq!(container_hash(&a), container_hash(&b));
        b.image = "busybox:2".into();
        assert_ne!(container_hash(&a), container_hash(&b));
        let mut c = a.clone();
        c.command = vec!["sleep".into(), "1".into()];
        assert_ne!(container_hash(&a), container_hash(&c));
    }

    fn ctr(id: &str, name: &str, sandbox: &str, state: ContainerState) -> ContainerStatus {
        ContainerStatus {
            id: id.into(),
            sandbox_id: sandbox.into(),
            name: name.into(),
            state,
            created_at: 0,
            started_at: 0,
            finished_at: 0,
            exit_code: 0,
            image: "".into(),
            image_ref: "".into(),
            reason: "".into(),
            message: "".into(),
            hash: 0,
            restart_count: 0,
        }
    }

    fn sb(id: &str, state: SandboxState) -> SandboxStatus {
        SandboxStatus {
            id: id.into(),
            attempt: 0,
            state,
            created_at: 0,
            ip: None,
            host_network: false,
        }
    }

    fn ids<T>(v: &[&T], f: impl Fn(&T) -> &str) -> Vec<String> {
        v.iter().map(|x| f(x).to_owned()).collect()
    }

    #[test]
    fn gc_keeps_newest_dead_instance_and_the_sandboxes_holding_kept_ones() {
        use ContainerState::{Created, Exited, Running};
        let st = PodRuntimeStatus {
            sandboxes: vec![
                sb("s3", SandboxState::Ready),
                sb("s2", SandboxState::NotReady),
                sb("s1", SandboxState::NotReady),
            ],
            containers: vec![
                ctr("a4", "a", "s3", Running),
                ctr("a3", "a", "s3", Exited),
                ctr("a2", "a", "s2", Exited),
                ctr("b2", "b", "s2", Exited),
                ctr("b1", "b", "s1", Created),
                ctr("a1", "a", "s1", Exited),
            ],
            ..Default::default()
        };
        let plan = gc_plan(&st);
        assert_eq!(ids(&plan.containers, |c| &c.id), vec!["a2", "b1", "a1"]);
        // s2 still holds b2, the newest dead instance of b: removing it would lose b's history.
        assert_eq!(ids(&plan.sandboxes, |s| &s.id), vec!["s1"]);
    }

    #[test]
    fn gc_has_nothing_to_do_for_a_tidy_pod() {
        use ContainerState::{Exited, Running};
        let st = PodRuntimeStatus {
            sandboxes: vec![
                sb("s2", SandboxState::Ready),
                sb("s1", SandboxState::NotReady),
            ],
            containers: vec![ctr("a2", "a", "s2", Running), ctr("a1", "a", "s1", Exited)],
            ..Default::default()
        };
        assert!(gc_plan(&st).is_empty());
        let never = PodRuntimeStatus {
            sandboxes: vec![sb("s1", SandboxState::NotReady)],
            ..Default::default()
        };
        assert!(
            gc_plan(&never).is_empty(),
            "the newest sandbox always stays"
        );
    }

    #[test]
    fn join_all_keeps_order() {
        let v = rt::block_on(join_all((0..5u64).map(|i| async move {
            rt::sleep(Duration::from_millis(10 * (5 - i))).await;
            i
        })));
        assert_eq!(v, vec![0, 1, 2, 3, 4]);
    }
}
