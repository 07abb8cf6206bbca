//! The runtime manager: inspects pods in the runtime and carries out the actions that bring them
//! to their spec, through the runtime seam.

use std::cell::RefCell;
use std::collections::HashMap;
use std::fs;
use std::path::PathBuf;
use std::rc::Rc;
use std::time::Duration;

use crate::api::Pod;
use crate::cri::{CriError, ImageService, RuntimeService, v1};
use crate::kubecontainer::{PodRuntimeStatus, SandboxState};
use crate::rt;
use crate::volume;

use super::backoff::Backoff;
use super::convert::{self, ListedPod, Listing};
use super::error::{SandboxError, SyncError};
use super::{actions, config, join_all};
use crate::kubecontainer::container_hash;
use crate::retry::Failures;
use crate::runtime_state::Network;

pub use super::config::NodeContext;

/// Why a container is not running, as shown in its `state.waiting`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Waiting {
    pub reason: String,
    pub message: String,
}

/// What starting a container (`container.rs`) needs from its pod's sync.
pub(super) struct StartContext<'a> {
    pub pod: &'a Pod,
    pub st: &'a PodRuntimeStatus,
    pub sandbox_id: &'a str,
    pub sandbox_cfg: &'a v1::PodSandboxConfig,
    pub pod_ip: &'a str,
    pub volumes: &'a HashMap<String, PathBuf>,
    /// The pod's image volumes: the image the runtime mounts, or why it is not there.
    pub image_volumes: &'a HashMap<String, Result<v1::ImageSpec, super::error::ImageFailure>>,
}

/// The result of one pod sync.
#[derive(Debug, Default)]
pub struct SyncOutcome {
    /// Sync again after this long (a backoff ends, or an error should be retried).
    pub retry_after: Option<Duration>,
    /// What failed on the way.
    pub errors: Vec<SyncError>,
    /// Whether the sync asked the runtime to change anything.
    pub acted: bool,
}

impl SyncOutcome {
    pub(super) fn retry(&mut self, d: Duration) {
        self.retry_after = Some(self.retry_after.map_or(d, |r| r.min(d)));
    }
    pub(super) fn fail(&mut self, e: SyncError) {
        self.errors.push(e);
    }
}

/// How soon a sync that failed is retried: 2 s, doubling to 1 min while it keeps failing, so a
/// pod that cannot start (a missing hostPath, a broken CNI) neither spins nor floods the log.
pub(super) const ERROR_RETRY: Duration = Duration::from_secs(2);
const ERROR_RETRY_MAX: Duration = Duration::from_secs(60);
/// How long the runtime's status may take to answer.
const STATUS_DEADLINE: Duration = Duration::from_secs(10);

/// What the runtime says about itself.
#[derive(Debug, Clone, Default)]
pub struct RuntimeVersion {
    pub name: String,
    pub version: String,
    pub api_version: String,
}

pub struct RuntimeManager {
    pub(super) runtime: Rc<dyn RuntimeService>,
    pub(super) images: Rc<dyn ImageService>,
    pub(super) node: NodeContext,
    pub(super) restart_backoff: RefCell<Backoff>,
    pub(super) pull_backoff: RefCell<Backoff>,
    /// Pods whose syncs fail: their retries back off, their errors are logged by state change.
    sync_failures: RefCell<Failures>,
    /// Dead containers and old sandboxes that could not be removed (container GC).
    pub(super) removal_failures: RefCell<Failures>,
    /// The runtime's network, as its status last said ([`RuntimeManager::update_runtime_status`]).
    network: RefCell<Network>,
    /// Pods whose last sync failed for want of the network (held back while it was not ready,
    /// or their sandbox failed): retried at once when the network turns ready.
    network_failed: RefCell<std::collections::HashSet<String>>,
    waiting: RefCell<HashMap<(String, String), Waiting>>,
    /// Liveness and startup results decide kills; the prober writes them.
    pub(super) probes: crate::prober::results::Results,
    /// The spec each pod was last synced with: its preStop hooks and sidecar order when it is
    /// terminated.
    pub(super) specs: RefCell<HashMap<String, std::rc::Rc<Pod>>>,
    /// ConfigMaps, Secrets and tokens the pods' volumes and environments are made of.
    pub(super) objects: crate::objects::Store,
    /// The cluster's Services for the containers' service variables; none on a node without
    /// an apiserver (no variables, as a kubelet without a client).
    pub(super) services: Option<crate::services::Shared>,
    /// Image credential provider plugins, with their cache.
    pub(super) credential_providers: Option<std::sync::Arc<crate::credential_provider::Providers>>,
    /// The kubepods tree (`--cgroups-per-qos`); none: sandboxes get `cgroup_parent`.
    pub(super) cgroups: Option<crate::cm::PodCgroups>,
    /// The runtime's cgroup parent when there is no kubepods tree (`--cgroup-root`, or empty).
    cgroup_parent: String,
    /// What pods may use of the node (the downward API's default limits; resizes).
    allocatable: Option<crate::cm::Allocatable>,
    /// The resources allocated to each pod's containers, and what they run with.
    pub(super) allocation: crate::allocation::Manager,
    /// The image ids of each pod's image volumes, as last pulled for it, until the pod is gone
    /// from the runtime: image GC counts them in use.
    volume_images: RefCell<HashMap<String, Vec<String>>>,
    /// Which credentials pulled which image, and the verification policy (KEP-2535).
    pub(super) pull_records: super::pullmanager::PullRecords,
}

impl RuntimeManager {
    pub fn new(
        runtime: Rc<dyn RuntimeService>,
        images: Rc<dyn ImageService>,
        node: NodeContext,
    ) -> Self {
        RuntimeManager {
            pull_records: super::pullmanager::PullRecords::new(
                &node.root_dir,
                super::pullmanager::Policy::default(),
            ),
            runtime,
            images,
            node,
            restart_backoff: RefCell::new(Backoff::container_restarts()),
            pull_backoff: RefCell::new(Backoff::container_restarts()),
            sync_failures: RefCell::new(Failures::new(ERROR_RETRY, ERROR_RETRY_MAX)),
            // Retried at each visit of container GC (once a minute, as upstream), never less
            // often: the removal of a pod's old sandboxes is what lets a pod whose network came
            // back create its next one (their names are still reserved until then).
            removal_failures: RefCell::new(Failures::new(
                Duration::from_secs(2),
                Duration::from_secs(60),
            )),
            network: RefCell::new(Network::Unknown),
            network_failed: RefCell::new(std::collections::HashSet::new()),
            waiting: RefCell::new(HashMap::new()),
            probes: crate::prober::results::Results::default(),
            specs: RefCell::new(HashMap::new()),
            objects: crate::objects::Store::default(),
            services: None,
            credential_providers: None,
            cgroups: None,
            cgroup_parent: String::new(),
            allocatable: None,
            allocation: crate::allocation::Manager::in_memory(),
            volume_images: RefCell::new(HashMap::new()),
        }
    }

    /// The images the pods' image volumes mount (image GC keeps them as in use).
    pub fn volume_images(&self) -> Vec<String> {
        self.volume_images
            .borrow()
            .values()
            .flatten()
            .cloned()
            .collect()
    }

    /// Pulls the pod's image volumes (the kubelet's getImageVolumes): each volume's image by
    /// its pull policy with the pod's credentials, or the failure the containers mounting it
    /// then wait on.
    async fn pull_image_volumes(
        &self,
        pod: &Pod,
    ) -> HashMap<String, Result<v1::ImageSpec, super::error::ImageFailure>> {
        let mut out = HashMap::new();
        let mut ids = Vec::new();
        for v in &pod.spec.volumes {
            let Some(src) = &v.image else { continue };
            let r = self
                .ensure_volume_image(pod, &v.name, src, rt::now_nanos())
                .await
                .map(|id| {
                    ids.push(id.clone());
                    // As upstream: the pod's annotations go with it (a runtime may read them).
                    v1::ImageSpec {
                        image: id,
                        user_specified_image: src.reference.clone(),
                        annotations: pod
                            .metadata
                            .annotations
                            .iter()
                            .map(|(k, v)| (k.clone(), v.clone()))
                            .collect(),
                    }
                });
            out.insert(v.name.clone(), r);
        }
        if !ids.is_empty() {
            self.volume_images
                .borrow_mut()
                .insert(pod.metadata.uid.clone(), ids);
        }
        out
    }

    /// Keeps the pods' allocations in `m` (checkpointed, shared with the status manager).
    pub fn with_allocation(mut self, m: crate::allocation::Manager) -> Self {
        self.allocation = m;
        self
    }

    pub fn allocation(&self) -> &crate::allocation::Manager {
        &self.allocation
    }

    /// Places pods in the kubepods tree (set up already), or, without one, under `parent`.
    /// Containers get `memory.oom.group` when the tree says the node supports it.
    pub fn with_cgroups(mut self, cgroups: Option<crate::cm::PodCgroups>, parent: String) -> Self {
        self.node.memory_oom_group = cgroups
            .as_ref()
            .is_some_and(crate::cm::PodCgroups::oom_group);
        self.cgroups = cgroups;
        self.cgroup_parent = parent;
        self
    }

    /// Node allocatable, for the downward API's resource defaults.
    pub fn with_allocatable(mut self, a: crate::cm::Allocatable) -> Self {
        self.allocatable = Some(a);
        self
    }

    /// Node allocatable, when known (resizes are weighed against it).
    pub(super) fn allocatable_ref(&self) -> Option<&crate::cm::Allocatable> {
        self.allocatable.as_ref()
    }

    pub fn pod_cgroups(&self) -> Option<&crate::cm::PodCgroups> {
        self.cgroups.as_ref()
    }

    /// Creates the pod's cgroup with its limits (before its sandbox); returns the runtime's
    /// cgroup parent for it.
    fn ensure_pod_cgroup(&self, pod: &Pod) -> Result<String, SandboxError> {
        let Some(pc) = &self.cgroups else {
            return Ok(self.cgroup_parent.clone());
        };
        let specs = self.specs.borrow();
        pc.ensure_pod(pod, specs.values().map(|p| &**p))
            .map_err(SandboxError::Cgroup)
    }

    /// `imagePullCredentialsVerificationPolicy` and its allowlist.
    pub fn with_pull_verification(mut self, policy: super::pullmanager::Policy) -> Self {
        self.pull_records.policy = policy;
        self
    }

    /// Image credential provider plugins asked for the credentials of the images they serve.
    pub fn with_credential_providers(
        mut self,
        p: Option<std::sync::Arc<crate::credential_provider::Providers>>,
    ) -> Self {
        self.credential_providers = p;
        self
    }

    /// Shares the store the cluster side fills (the volumes and environments read it).
    pub fn with_objects(mut self, objects: crate::objects::Store) -> Self {
        self.objects = objects;
        self
    }

    /// Shares the Services the cluster side keeps (the containers' service variables).
    pub fn with_services(mut self, services: Option<crate::services::Shared>) -> Self {
        self.services = services;
        self
    }

    /// The service variables of a pod's containers, as the kubelet's `getServiceEnvVarMap`: an
    /// API pod waits (the error) until the Services were read once; a static pod takes what is
    /// known.
    pub(super) fn service_env(
        &self,
        pod: &Pod,
    ) -> Result<std::collections::BTreeMap<String, String>, String> {
        let Some(services) = &self.services else {
            return Ok(Default::default());
        };
        let s = services.lock();
        let is_api = pod
            .metadata
            .annotations
            .get(crate::config::ANNOTATION_CONFIG_SOURCE)
            .is_some_and(|src| src == crate::config::Source::Api.as_str());
        if is_api && !s.synced {
            return Err(crate::services::NOT_SYNCED.to_owned());
        }
        let links = pod.spec.enable_service_links.unwrap_or(true);
        Ok(s.env(super::config::namespace(pod), links))
    }

    /// What the downward API gives for a resource without a limit.
    pub(super) fn allocatable(&self) -> crate::projection::NodeAllocatable {
        if let Some(a) = self.allocatable {
            return crate::projection::NodeAllocatable {
                milli_cpu: a.milli_cpu,
                memory: a.memory,
            };
        }
        let cpus = std::thread::available_parallelism().map_or(1, std::num::NonZero::get);
        crate::projection::NodeAllocatable {
            milli_cpu: i64::try_from(cpus).unwrap_or(1).saturating_mul(1000),
            memory: self.node.memory_bytes,
        }
    }

    /// The probe results the runtime manager acts on (shared with the prober manager).
    pub fn probe_results(&self) -> crate::prober::results::Results {
        self.probes.clone()
    }

    pub fn node(&self) -> &NodeContext {
        &self.node
    }

    pub async fn version(&self) -> Result<RuntimeVersion, CriError> {
        let v = self.runtime.version().await?;
        Ok(RuntimeVersion {
            name: v.runtime_name,
            version: v.runtime_version,
            api_version: v.runtime_api_version,
        })
    }

    /// Asks the runtime to reopen a container's log file, after it was renamed for rotation.
    pub async fn reopen_container_log(&self, id: &str) -> Result<(), CriError> {
        self.runtime.reopen_container_log(id).await
    }

    /// Why a container of a pod is waiting, if a sync recorded a reason.
    pub fn waiting(&self, uid: &str, container: &str) -> Option<Waiting> {
        self.waiting
            .borrow()
            .get(&(uid.to_owned(), container.to_owned()))
            .cloned()
    }

    pub(super) fn set_waiting(&self, uid: &str, container: &str, reason: &str, message: String) {
        self.waiting.borrow_mut().insert(
            (uid.to_owned(), container.to_owned()),
            Waiting {
                reason: reason.to_owned(),
                message,
            },
        );
    }

    /// Records a failure as the waiting reason of the container it is about.
    pub(super) fn wait_on(&self, uid: &str, e: &SyncError) {
        if let Some(c) = e.container() {
            self.set_waiting(uid, c, e.reason(), e.to_string());
        }
    }

    /// Records a failure of the whole pod (its volumes, its sandbox) as the waiting reason of
    /// every container, so the status says why none runs.
    fn wait_all_on(&self, pod: &Pod, e: &SyncError) {
        let uid = &pod.metadata.uid;
        for c in pod.spec.init_containers.iter().chain(&pod.spec.containers) {
            self.set_waiting(uid, &c.name, e.reason(), e.to_string());
        }
    }

    /// Forgets the pod's waiting reasons of one kind once what failed has worked.
    fn clear_waiting_reason(&self, uid: &str, reason: &str) {
        self.waiting
            .borrow_mut()
            .retain(|(u, _), w| u != uid || w.reason != reason);
    }

    pub(super) fn clear_waiting(&self, uid: &str, container: &str) {
        self.waiting
            .borrow_mut()
            .remove(&(uid.to_owned(), container.to_owned()));
    }

    /// Lists every sandbox and container in the runtime (two calls), grouped by pod UID.
    pub async fn list(&self) -> Result<Listing, CriError> {
        let sbs = self.runtime.list_pod_sandbox(None).await?;
        let cs = self.runtime.list_containers(None).await?;
        Ok(Listing::group(sbs, cs, Some(&self.node.node_name)))
    }

    /// A quick view of a listed pod without any per-object calls.
    pub fn shallow_status(uid: &str, p: &ListedPod) -> PodRuntimeStatus {
        PodRuntimeStatus {
            uid: uid.into(),
            name: p.name.as_str().into(),
            namespace: p.namespace.as_str().into(),
            sandboxes: p.sandboxes.clone(),
            containers: p.containers.clone(),
        }
    }

    /// Full status of one listed pod: the newest sandbox's network and every container's
    /// status, fetched concurrently; termination messages are read off the executor thread.
    pub async fn inspect(&self, uid: &str, p: &ListedPod) -> Result<PodRuntimeStatus, CriError> {
        let mut st = Self::shallow_status(uid, p);
        if let Some(newest) = st.sandboxes.first_mut() {
            match self.runtime.pod_sandbox_status(&newest.id).await {
                Ok(r) => {
                    if let Some(s) = r.status {
                        convert::apply_sandbox_status(newest, &s);
                    }
                }
                Err(e) if e.is_not_found() => {}
                Err(e) => return Err(e),
            }
        }
        let futs = st
            .containers
            .iter()
            .map(|c| self.runtime.container_status(&c.id, false));
        let results = join_all(futs).await;
        let mut out = Vec::with_capacity(results.len());
        let mut messages = Vec::new();
        for (listed, r) in st.containers.iter().zip(results) {
            match r {
                Ok(resp) => match resp.status {
                    Some(s) => {
                        let (c, file) = convert::container_from(&s, &listed.sandbox_id);
                        if let Some(f) = file {
                            messages.push((out.len(), f));
                        }
                        out.push(c);
                    }
                    None => out.push(listed.clone()),
                },
                Err(e) if e.is_not_found() => {}
                Err(e) => return Err(e),
            }
        }
        if !messages.is_empty() {
            let read = rt::unblock(move || {
                messages
                    .into_iter()
                    .filter_map(|(i, f)| super::termination::read(&f).map(|m| (i, m)))
                    .collect::<Vec<_>>()
            })
            .await;
            for (i, m) in read {
                // What the container wrote follows what the runtime said, as upstream joins them.
                out[i].message = if out[i].message.is_empty() {
                    m.into()
                } else {
                    format!("{}: {m}", out[i].message).into()
                };
            }
        }
        st.containers = out;
        Ok(st)
    }

    /// Full status of one pod, listing only its own objects.
    pub async fn pod_status(&self, uid: &str) -> Result<PodRuntimeStatus, CriError> {
        let sandboxes = self
            .runtime
            .list_pod_sandbox(Some(v1::PodSandboxFilter {
                label_selector: convert::pod_selector(uid),
                ..Default::default()
            }))
            .await?;
        let containers = self
            .runtime
            .list_containers(Some(v1::ContainerFilter {
                label_selector: convert::pod_selector(uid),
                ..Default::default()
            }))
            .await?;
        // Everything carrying the UID of a pod picolet runs is that pod's, marked or not (an
        // earlier picolet may have created it without the mark): it is adopted, or cleaned up.
        let p = Listing::group(sandboxes, containers, None)
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
        let what = format!("sync of pod {} ({key})", pod.metadata.name);
        let network = out.errors.iter().any(|e| {
            matches!(
                e,
                SyncError::NetworkNotReady(_) | SyncError::CreatePodSandbox(_)
            )
        });
        if network {
            self.network_failed.borrow_mut().insert(key.to_owned());
        } else {
            self.network_failed.borrow_mut().remove(key);
        }
        let mut f = self.sync_failures.borrow_mut();
        if out.errors.is_empty() {
            f.succeeded(key, &what);
        } else {
            let cause = out
                .errors
                .iter()
                .map(|e| format!("{}: {e}", e.reason()))
                .collect::<Vec<_>>()
                .join("; ");
            if out.errors.iter().all(SyncError::is_waiting) {
                f.waiting(key, &what, &cause, rt::now_nanos());
            } else {
                f.failed(key, &what, &cause, rt::now_nanos());
            }
            out.retry(f.delay(key).unwrap_or(ERROR_RETRY));
        }
        out
    }

    async fn sync_pod_once(&self, desired: &Pod, st: &PodRuntimeStatus) -> SyncOutcome {
        let mut out = SyncOutcome::default();
        let uid = desired.metadata.uid.as_str();
        // The pod runs with its allocated resources: a resize that does not fit (yet) is
        // never applied in part.
        let allocated = self.allocate(desired);
        let pod = &allocated;
        let hashes: Vec<u64> = pod.spec.containers.iter().map(container_hash).collect();
        self.remember_spec(pod);
        let mut a = actions::compute_with(pod, st, &hashes, &self.probes);
        let grace = config::grace_period(pod);
        let resize = if a.kill_pod || a.create_sandbox {
            Default::default()
        } else {
            self.plan_resize(pod, st, &mut a)
        };

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
                out.fail(SyncError::KillPod(e));
                return out;
            }
            if a.create_sandbox {
                // Init containers run again in the new sandbox; their old instances would make
                // the next sync believe they already did (upstream purges them too).
                out.acted = true;
                if let Err(e) = self.purge_init_containers(pod, st).await {
                    out.fail(SyncError::PurgeInitContainers(e));
                    return out;
                }
            }
        }
        out.acted |= !a.containers_to_kill.is_empty();
        let kills = a.containers_to_kill.iter().map(|k| async move {
            crate::events::record(
                &crate::events::ObjectRef::container(pod, &k.name),
                crate::events::Type::Normal,
                "Killing",
                &format!("Stopping container {}: {}", k.name, k.reason),
            );
            let Some(c) = st.containers.iter().find(|c| c.id == k.id) else {
                return Ok(());
            };
            self.kill_container(Some(pod), st, c, k.grace.unwrap_or(grace))
                .await
                .map_err(|source| SyncError::KillContainer {
                    container: k.name.to_string(),
                    source,
                })
        });
        for r in join_all(kills).await {
            if let Err(e) = r {
                out.fail(e);
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

        if a.create_sandbox
            && !pod.spec.host_network
            && let Some(e) = self.network.borrow().error().map(str::to_owned)
        {
            // Counted with the pod's other sync failures; its event aggregates.
            log::debug!(
                "pod {} ({uid}): no new sandbox while the network is not ready",
                pod.metadata.name
            );
            let e = SyncError::NetworkNotReady(e);
            crate::events::record(
                &crate::events::ObjectRef::pod(pod),
                crate::events::Type::Warning,
                "NetworkNotReady",
                &e.to_string(),
            );
            out.fail(e);
            return out;
        }
        let volumes = {
            let (root, p) = (self.node.root_dir.clone(), pod.clone());
            let (objects, alloc) = (self.objects.clone(), self.allocatable());
            match rt::unblock(move || volume::prepare(&root, &p, &objects, alloc)).await {
                Ok(v) => v,
                // As upstream, volumes not ready are no container's waiting reason (the status
                // shows ContainerCreating, or PodInitializing behind init containers): the sync
                // fails and is retried, the log says why, and a FailedMount event too unless
                // the content is only being read (a token or object not read yet: logged at
                // debug level, unless it lasts).
                Err(e) => {
                    let message = e.to_string();
                    let e = SyncError::Volumes(message.clone());
                    if !e.is_waiting() {
                        crate::events::record(
                            &crate::events::ObjectRef::pod(pod),
                            crate::events::Type::Warning,
                            "FailedMount",
                            &message,
                        );
                    }
                    out.fail(e);
                    return out;
                }
            }
        };
        let mut sandbox_cfg = config::sandbox_config(pod, &self.node, a.attempt);
        // In-place resizes: the pod cgroup widened first, the containers updated, then the
        // pod cgroup set to its new limits below (so neither order of change is refused).
        self.resize_in_place(pod, &resize, &mut out).await;
        match self.ensure_pod_cgroup(pod) {
            Ok(parent) => {
                if let Some(l) = sandbox_cfg.linux.as_mut() {
                    l.cgroup_parent = parent;
                }
            }
            // A sandbox that exists keeps its cgroup; a limit the kernel refuses to lower under
            // the pod's usage must not stop its containers from being started.
            Err(e) if !a.create_sandbox => log::warn!("pod {} ({uid}): {e}", pod.metadata.name),
            Err(e) => {
                let e = SyncError::CreatePodSandbox(e);
                self.wait_all_on(pod, &e);
                out.fail(e);
                return out;
            }
        }
        let (sandbox_id, pod_ip) = if a.create_sandbox {
            out.acted = true;
            match self.run_sandbox(pod, &sandbox_cfg).await {
                Ok(x) => {
                    self.clear_waiting_reason(uid, super::error::CREATE_POD_SANDBOX_ERROR);
                    x
                }
                Err(e) => {
                    let e = SyncError::CreatePodSandbox(e);
                    self.wait_all_on(pod, &e);
                    out.fail(e);
                    return out;
                }
            }
        } else {
            let id = a.sandbox_id.clone().unwrap_or_default().to_string();
            (id, st.ip().unwrap_or_default().to_owned())
        };
        // A host-network pod's IP is the node's (its env `status.podIP`, its hosts file), as
        // the status reports it.
        let pod_ip = if pod.spec.host_network {
            self.node.node_ip.clone()
        } else {
            pod_ip
        };

        let starts = !a.ephemeral_to_start.is_empty()
            || a.next_init_container.is_some()
            || !a.sidecars_to_start.is_empty()
            || !a.containers_to_start.is_empty();
        let image_volumes = if starts {
            self.pull_image_volumes(pod).await
        } else {
            HashMap::new()
        };
        let ctx = StartContext {
            pod,
            st,
            sandbox_id: &sandbox_id,
            sandbox_cfg: &sandbox_cfg,
            pod_ip: &pod_ip,
            volumes: &volumes,
            image_volumes: &image_volumes,
        };
        // Ephemeral containers first, so that a failing init container does not keep them
        // from running.
        for &i in &a.ephemeral_to_start {
            let c = &pod.spec.ephemeral_containers[i];
            self.start_container(&ctx, c, container_hash(c), &mut out)
                .await;
        }
        if let Some(i) = a.next_init_container {
            let c = &pod.spec.init_containers[i];
            self.start_container(&ctx, c, container_hash(c), &mut out)
                .await;
            return out;
        }
        // Sidecars before the app containers, in their order.
        for &i in &a.sidecars_to_start {
            let c = &pod.spec.init_containers[i];
            self.start_container(&ctx, c, container_hash(c), &mut out)
                .await;
        }
        for &i in &a.containers_to_start {
            let c = &pod.spec.containers[i];
            self.start_container(&ctx, c, hashes[i], &mut out).await;
        }
        out
    }

    /// Drops local state of a pod that is gone from the runtime.
    /// Large emptyDirs on slow flash take a while to delete: that happens off the executor
    /// thread, so PLEG, syncs and the local API never wait for it.
    pub async fn forget(&self, uid: &str, name: &str, namespace: &str) {
        let uid_prefix = format!("{uid}/");
        self.restart_backoff.borrow_mut().forget_prefix(&uid_prefix);
        self.sync_failures.borrow_mut().forget(uid);
        self.network_failed.borrow_mut().remove(uid);
        self.waiting.borrow_mut().retain(|(u, _), _| u != uid);
        self.specs.borrow_mut().remove(uid);
        self.volume_images.borrow_mut().remove(uid);
        self.allocation.remove(uid);
        if let Some(pc) = &self.cgroups
            && let Err(e) = pc.update_qos(self.specs.borrow().values().map(|p| &**p))
        {
            log::warn!("re-weighing the burstable cgroup: {e}");
        }
        let logs = (!name.is_empty())
            .then(|| config::log_dir_of(&self.node.pod_logs_dir, namespace, name, uid));
        let (root, uid) = (self.node.root_dir.clone(), uid.to_owned());
        let cgroups = self.cgroups.clone();
        rt::unblock(move || {
            if let Some(pc) = cgroups {
                match pc.remove_pod(&uid) {
                    Ok(0) => {}
                    Ok(_) => log::info!("removed the cgroup of pod {uid}"),
                    // Housekeeping retries what still holds a process.
                    Err(e) => log::warn!("removing the cgroup of pod {uid}: {e}"),
                }
            }
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

    /// Keeps the spec a pod is synced with, for its termination (preStop hooks, sidecars).
    fn remember_spec(&self, pod: &Pod) {
        let uid = pod.metadata.uid.as_str();
        if self.specs.borrow().get(uid).is_none_or(|p| **p != *pod) {
            self.specs
                .borrow_mut()
                .insert(uid.to_owned(), std::rc::Rc::new(pod.clone()));
        }
    }

    /// Whether the pod's syncs are failing (its retries then log by state change only).
    pub(super) fn sync_failing(&self, uid: &str) -> bool {
        self.sync_failures.borrow().failing(uid)
    }

    /// Reads the runtime's status (upstream's `updateRuntimeUp`, every
    /// [`crate::runtime_state::RUNTIME_STATUS_PERIOD`], every
    /// [`crate::runtime_state::NOT_READY_PERIOD`] while the network is not ready) and keeps
    /// what it says of the network.
    /// The network going away is one warning, its return one info line. On its return, the pods
    /// whose syncs failed for want of it are due at once, and so is the removal of their old
    /// sandboxes (which could not be stopped without it): their UIDs are returned, for the loop
    /// to sync them now and collect their garbage at its next round.
    pub async fn update_runtime_status(&self) -> Vec<String> {
        let now = match rt::timeout(STATUS_DEADLINE, self.runtime.status(false)).await {
            Ok(Ok(r)) => Network::from_status(&r),
            // The runtime not answering is the PLEG's health to report; the network is as
            // last seen.
            Ok(Err(e)) => {
                log::debug!("runtime status: {e}");
                return Vec::new();
            }
            Err(e) => {
                log::debug!("runtime status: {e}");
                return Vec::new();
            }
        };
        let was = self.network.replace(now.clone());
        match (&was, &now) {
            (Network::NotReady(_), Network::NotReady(_)) | (_, Network::Unknown) => Vec::new(),
            (_, Network::NotReady(e)) => {
                log::warn!("{e}; pods that need it get no new sandbox until it is ready");
                Vec::new()
            }
            (Network::NotReady(_), Network::Ready) => {
                let mut uids: Vec<String> = self.network_failed.borrow().iter().cloned().collect();
                uids.sort();
                log::info!(
                    "container runtime network is ready; retrying {} pod(s) now",
                    uids.len()
                );
                let (mut sync, mut removal) = (
                    self.sync_failures.borrow_mut(),
                    self.removal_failures.borrow_mut(),
                );
                for uid in &uids {
                    sync.retry_now(uid);
                    removal.retry_now(&format!("sandboxes/{uid}"));
                }
                uids
            }
            (Network::Unknown | Network::Ready, Network::Ready) => Vec::new(),
        }
    }

    /// Whether the runtime's network is ready as far as picolet knows (not asked yet counts as
    /// ready).
    pub fn network_ready(&self) -> bool {
        self.network.borrow().error().is_none()
    }

    pub fn gc_backoffs(&self, now: i64) {
        self.restart_backoff.borrow_mut().gc(now);
        self.pull_backoff.borrow_mut().gc(now);
        self.sync_failures.borrow_mut().gc(now);
        self.removal_failures.borrow_mut().gc(now);
    }
}

/// Where a container's termination message file lives on the node.
pub(super) fn termination_log_dir(root: &std::path::Path, uid: &str, container: &str) -> PathBuf {
    volume::pod_dir(root, uid)
        .join("containers")
        .join(container)
}

#[cfg(test)]
mod tests {
    use crate::api::Container;

    use super::*;
    use crate::cri::fake::FakeRuntime;
    use crate::prober::results::Results;

    fn target_pod() -> Pod {
        serde_json::from_value(serde_json::json!({
            "metadata": {"name": "p", "namespace": "default", "uid": "u-eph"},
            "spec": {"containers": [{"name": "app", "image": "img:1"}]}
        }))
        .unwrap()
    }

    fn with_debugger(mut pod: Pod, target: Option<&str>) -> Pod {
        pod.spec.ephemeral_containers.push(Container {
            name: "debugger".into(),
            image: "img:1".into(),
            stdin: true,
            tty: true,
            target_container_name: target.map(Into::into),
            ..Default::default()
        });
        pod
    }

    fn scratch(tag: &str) -> PathBuf {
        let d = std::env::temp_dir().join(format!("picolet-eph-{tag}-{}", std::process::id()));
        let _ = fs::remove_dir_all(&d);
        fs::create_dir_all(&d).unwrap();
        d
    }

    fn manager(fake: &FakeRuntime, root: &std::path::Path) -> RuntimeManager {
        let svc = Rc::new(fake.clone());
        let node = NodeContext {
            root_dir: root.join("kubelet"),
            pod_logs_dir: root.join("logs"),
            ..Default::default()
        };
        RuntimeManager::new(svc.clone(), svc, node)
    }

    fn created(fake: &FakeRuntime, name: &str) -> Vec<crate::cri::fake::FakeContainer> {
        fake.containers()
            .into_iter()
            .filter(|c| c.config.metadata.as_ref().is_some_and(|m| m.name == name))
            .collect()
    }

    #[test]
    fn an_ephemeral_container_joins_its_targets_pid_namespace_and_runs_once() {
        let tmp = scratch("runs-once");
        let fake = FakeRuntime::new();
        fake.add_image("img:1");
        let rm = manager(&fake, &tmp);
        rt::block_on(async {
            let pod = target_pod();
            let out = rm.sync_pod(&pod, &PodRuntimeStatus::default()).await;
            assert!(out.errors.is_empty(), "{:?}", out.errors);
            let app = created(&fake, "app").remove(0).id;

            // The spec changes on the running pod: the next sync starts the debugger only.
            let pod = with_debugger(pod, Some("app"));
            let st = rm.pod_status("u-eph").await.unwrap();
            let out = rm.sync_pod(&pod, &st).await;
            assert!(out.errors.is_empty(), "{:?}", out.errors);
            assert_eq!(created(&fake, "app").len(), 1, "the app is kept");
            let dbg = created(&fake, "debugger");
            assert_eq!(dbg.len(), 1);
            let cfg = &dbg[0].config;
            assert!(cfg.stdin && cfg.tty);
            let ns = cfg
                .linux
                .as_ref()
                .and_then(|l| l.security_context.as_ref())
                .and_then(|s| s.namespace_options.as_ref())
                .unwrap();
            assert_eq!(ns.pid, v1::NamespaceMode::Target as i32);
            assert_eq!(ns.target_id, app);
            assert_eq!(ns.network, v1::NamespaceMode::Pod as i32);

            // Reported among the ephemeral statuses, not the app's.
            let st = rm.pod_status("u-eph").await.unwrap();
            let s = crate::status::generate(
                &pod,
                &st,
                &|_| None,
                &Results::default(),
                None,
                "10.0.0.1",
                "containerd",
                rt::now_nanos(),
            );
            assert_eq!(s.container_statuses.len(), 1);
            let e = &s.ephemeral_container_statuses[0];
            assert_eq!(e.name, "debugger");
            assert!(e.state.running.is_some(), "{e:?}");
            assert_eq!(
                e.container_id.as_deref(),
                Some(format!("containerd://{}", dbg[0].id).as_str())
            );
            assert_eq!(e.image, "img:1");
            assert!(!e.image_id.is_empty());
            assert_eq!(e.restart_count, 0);

            // It exits, with an error even, under restartPolicy Always: never started again.
            fake.exit_container(&dbg[0].id, 1);
            for _ in 0..2 {
                let st = rm.pod_status("u-eph").await.unwrap();
                let out = rm.sync_pod(&pod, &st).await;
                assert!(out.errors.is_empty(), "{:?}", out.errors);
            }
            assert_eq!(created(&fake, "debugger").len(), 1, "not restarted");
            let st = rm.pod_status("u-eph").await.unwrap();
            let s = crate::status::generate(
                &pod,
                &st,
                &|_| None,
                &Results::default(),
                None,
                "10.0.0.1",
                "containerd",
                rt::now_nanos(),
            );
            let e = &s.ephemeral_container_statuses[0];
            let t = e.state.terminated.as_ref().expect("terminated");
            assert_eq!((t.exit_code, t.reason.as_deref()), (1, Some("Error")));
            assert_eq!(e.restart_count, 0);
            assert_eq!(s.phase.as_deref(), Some("Running"), "the pod runs on");
        });
        let _ = fs::remove_dir_all(&tmp);
    }

    /// While the runtime's network is not ready, a pod needing a new sandbox gets none (the
    /// sync fails with NetworkNotReady; a host-network pod is not held back); when it turns
    /// ready, the pods that failed for want of it are named once, due at once.
    #[test]
    fn no_sandbox_while_the_network_is_not_ready_and_its_return_retries_at_once() {
        let tmp = scratch("netready");
        let _clock = rt::FakeClock::install();
        let fake = FakeRuntime::new();
        fake.add_image("img:1");
        let rm = manager(&fake, &tmp);
        rt::block_on(async {
            // Ready from the start: nothing to retry.
            assert!(rm.update_runtime_status().await.is_empty());
            fake.set_network_ready(false);
            assert!(rm.update_runtime_status().await.is_empty());
            let pod = target_pod();
            let out = rm.sync_pod(&pod, &PodRuntimeStatus::default()).await;
            assert_eq!(out.errors.len(), 1, "{:?}", out.errors);
            assert_eq!(out.errors[0].reason(), "NetworkNotReady");
            assert!(
                out.errors[0]
                    .to_string()
                    .contains("cni plugin not initialized"),
                "{}",
                out.errors[0]
            );
            assert_eq!(out.retry_after, Some(ERROR_RETRY));
            let out = rm.sync_pod(&pod, &PodRuntimeStatus::default()).await;
            assert_eq!(out.retry_after, Some(ERROR_RETRY * 2), "backing off");
            assert_eq!(fake.calls("RunPodSandbox"), 0);
            assert!(rm.waiting("u-eph", "app").is_none(), "ContainerCreating");
            let mut host = target_pod();
            host.metadata.uid = "u-host".into();
            host.spec.host_network = true;
            let out = rm.sync_pod(&host, &PodRuntimeStatus::default()).await;
            assert!(out.errors.is_empty(), "{:?}", out.errors);
            assert_eq!(fake.calls("RunPodSandbox"), 1);
            // Still not ready: nothing named.
            assert!(rm.update_runtime_status().await.is_empty());
            fake.set_network_ready(true);
            assert_eq!(rm.update_runtime_status().await, vec!["u-eph".to_owned()]);
            assert!(rm.update_runtime_status().await.is_empty(), "once");
            assert!(
                rm.sync_failures.borrow().due("u-eph", rt::now_nanos()),
                "its backoff is over"
            );
            let out = rm.sync_pod(&pod, &PodRuntimeStatus::default()).await;
            assert!(out.errors.is_empty(), "{:?}", out.errors);
            assert_eq!(fake.calls("RunPodSandbox"), 2);
            assert!(!rm.sync_failing("u-eph"));
        });
        let _ = fs::remove_dir_all(&tmp);
    }

    #[test]
    fn an_ephemeral_container_without_target_keeps_its_own_pid_namespace() {
        let tmp = scratch("no-target");
        let fake = FakeRuntime::new();
        fake.add_image("img:1");
        let rm = manager(&fake, &tmp);
        rt::block_on(async {
            let pod = target_pod();
            rm.sync_pod(&pod, &PodRuntimeStatus::default()).await;
            let pod = with_debugger(pod, None);
            let st = rm.pod_status("u-eph").await.unwrap();
            let out = rm.sync_pod(&pod, &st).await;
            assert!(out.errors.is_empty(), "{:?}", out.errors);
            let dbg = created(&fake, "debugger");
            let ns = dbg[0]
                .config
                .linux
                .as_ref()
                .and_then(|l| l.security_context.as_ref())
                .and_then(|s| s.namespace_options.as_ref())
                .unwrap();
            assert_eq!(ns.pid, v1::NamespaceMode::Container as i32);
            assert!(ns.target_id.is_empty());
        });
        let _ = fs::remove_dir_all(&tmp);
    }

    #[test]
    fn an_ephemeral_container_whose_target_is_not_running_waits_with_a_config_error() {
        let tmp = scratch("no-such-target");
        let fake = FakeRuntime::new();
        fake.add_image("img:1");
        let rm = manager(&fake, &tmp);
        rt::block_on(async {
            let pod = target_pod();
            rm.sync_pod(&pod, &PodRuntimeStatus::default()).await;
            let pod = with_debugger(pod, Some("nope"));
            let st = rm.pod_status("u-eph").await.unwrap();
            let out = rm.sync_pod(&pod, &st).await;
            assert_eq!(out.errors.len(), 1, "{:?}", out.errors);
            assert_eq!(out.errors[0].reason(), "CreateContainerConfigError");
            assert!(created(&fake, "debugger").is_empty());
            let w = rm.waiting("u-eph", "debugger").unwrap();
            assert_eq!(w.reason, "CreateContainerConfigError");
            assert!(w.message.contains("nope"), "{}", w.message);
        });
        let _ = fs::remove_dir_all(&tmp);
    }

    /// Upstream's makeEnvironmentVariables: an API pod's container waits while the Services
    /// were never read; a static pod's starts with what is known; once read, the variables are
    /// in the container's environment.
    #[test]
    fn an_api_pods_container_waits_until_the_services_were_read() {
        let tmp = scratch("svc-wait");
        let fake = FakeRuntime::new();
        fake.add_image("img:1");
        let services = crate::services::Shared::default();
        let rm = manager(&fake, &tmp).with_services(Some(services.clone()));
        let source = |mut pod: Pod, src: &str, uid: &str| {
            pod.metadata.uid = uid.into();
            pod.metadata
                .annotations
                .insert(crate::config::ANNOTATION_CONFIG_SOURCE.into(), src.into());
            pod
        };
        let env_of = |uid: &str| -> HashMap<String, String> {
            fake.containers_of_pod(uid)
                .into_iter()
                .next()
                .unwrap()
                .config
                .envs
                .into_iter()
                .map(|kv| (kv.key, kv.value))
                .collect()
        };
        rt::block_on(async {
            let api = source(target_pod(), "api", "u-api");
            let out = rm.sync_pod(&api, &PodRuntimeStatus::default()).await;
            assert_eq!(out.errors.len(), 1, "{:?}", out.errors);
            let w = rm.waiting("u-api", "app").unwrap();
            assert_eq!(w.reason, "CreateContainerConfigError");
            assert!(
                w.message.ends_with(crate::services::NOT_SYNCED),
                "{}",
                w.message
            );
            assert!(created(&fake, "app").is_empty());

            let file = source(target_pod(), "file", "u-file");
            let out = rm.sync_pod(&file, &PodRuntimeStatus::default()).await;
            assert!(out.errors.is_empty(), "{:?}", out.errors);
            assert!(!env_of("u-file").contains_key("KUBERNETES_SERVICE_HOST"));

            {
                let mut s = services.lock();
                s.by_name.insert(
                    ("default".into(), "kubernetes".into()),
                    crate::services::Service {
                        cluster_ip: "10.96.0.1".into(),
                        ports: vec![crate::services::Port {
                            name: "https".into(),
                            port: 443,
                            protocol: "TCP".into(),
                        }]
                        .into(),
                    },
                );
                s.synced = true;
            }
            let st = rm.pod_status("u-api").await.unwrap();
            let out = rm.sync_pod(&api, &st).await;
            assert!(out.errors.is_empty(), "{:?}", out.errors);
            let env = env_of("u-api");
            assert_eq!(env["KUBERNETES_SERVICE_HOST"], "10.96.0.1");
            assert_eq!(env["KUBERNETES_PORT"], "tcp://10.96.0.1:443");
        });
        let _ = fs::remove_dir_all(&tmp);
    }
}
