//! The resources the node has allocated to each pod's containers, and in-place resizes
//! (upstream's `pkg/kubelet/allocation`).
//!
//! A pod's containers are allocated their spec's resources when it first syncs. A later
//! change of an API pod's `resources` (the `resize` subresource) is a resize: [`decide`]
//! weighs it against what the other pods hold of the node's allocatable, and either the
//! allocation moves to the new spec or the resize waits (`PodResizePending`, reason
//! `Deferred`, with the predicate's message) and is weighed again at every sync. The runtime
//! manager runs every pod with its allocated resources, never its spec's, so a resize that does
//! not fit is never half applied. What each running container was last given (its actuated
//! resources) is kept beside it: while the two differ the resize is in progress
//! (`PodResizeInProgress`).
//!
//! Both are checkpointed in `<root-dir>/checkpoints/allocated_pods_state` for every pod a
//! resize was asked of (any other runs with its spec, which a restart allocates again), so a
//! restarted picolet neither resizes again nor loses a resize it has allocated but not yet
//! applied, and a node that only starts pods writes nothing.

use std::cell::RefCell;
use std::collections::{BTreeMap, HashMap};
use std::path::PathBuf;
use std::rc::Rc;

use serde::{Deserialize, Serialize};

use crate::api::{Container, Pod, ResourceRequirements};

/// Upstream's reason for a resize the node could fit later.
pub const DEFERRED: &str = "Deferred";
/// Upstream's reason for a resize the node will never apply.
pub const INFEASIBLE: &str = "Infeasible";

/// The resources a resize applies in place.
const RESIZABLE: [&str; 2] = ["cpu", "memory"];

/// The checkpoint's largest size: a few hundred bytes per pod.
const CHECKPOINT_MAX_BYTES: usize = 4 << 20;

/// One pod's allocation, per container name.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(default, rename_all = "camelCase")]
pub struct PodAllocation {
    /// The resources allocated to each container.
    pub allocated: BTreeMap<String, ResourceRequirements>,
    /// The resources each running container was created or last updated with.
    pub actuated: BTreeMap<String, ResourceRequirements>,
    /// A resize has been asked of this pod: only such pods are checkpointed (any other runs
    /// with its spec, which is what a restart allocates it again), so a node starting pods
    /// writes nothing.
    #[serde(skip_serializing_if = "std::ops::Not::not")]
    pub resized: bool,
}

#[derive(Debug, Default, Serialize, Deserialize)]
#[serde(default)]
struct Checkpoint {
    version: u32,
    pods: BTreeMap<String, PodAllocation>,
}

/// A resize that waits: the condition's reason and message.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Pending {
    pub reason: &'static str,
    pub message: String,
}

/// What [`decide`] makes of a pod's spec against its allocation.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Decision {
    /// The spec asks for what is allocated.
    Unchanged,
    /// The resize fits: allocate the spec.
    Allocate,
    /// The resize waits.
    Pending(Pending),
}

/// The resources of `c` a resize acts on (CPU and memory), as reported in a container status.
pub fn resizable_part(r: &ResourceRequirements) -> ResourceRequirements {
    let keep = |m: &BTreeMap<String, crate::api::Quantity>| {
        m.iter()
            .filter(|(k, _)| RESIZABLE.contains(&k.as_str()))
            .map(|(k, v)| (k.clone(), v.clone()))
            .collect()
    };
    ResourceRequirements {
        limits: keep(&r.limits),
        requests: keep(&r.requests),
    }
}

/// Whether two requirements differ in what a resize changes (quantities compared by value, so
/// `1000m` and `1` are the same).
pub fn differ(a: &ResourceRequirements, b: &ResourceRequirements) -> bool {
    let same = |x: &BTreeMap<String, crate::api::Quantity>,
                y: &BTreeMap<String, crate::api::Quantity>| {
        RESIZABLE.iter().all(|k| match (x.get(*k), y.get(*k)) {
            (None, None) => true,
            (Some(p), Some(q)) => p.milli_value() == q.milli_value(),
            _ => false,
        })
    };
    !(same(&a.limits, &b.limits) && same(&a.requests, &b.requests))
}

/// Which resources of a container differ between `old` and `new` (`cpu`, `memory`).
pub fn changed(old: &ResourceRequirements, new: &ResourceRequirements) -> Vec<&'static str> {
    RESIZABLE
        .into_iter()
        .filter(|k| {
            let q = |m: &BTreeMap<String, crate::api::Quantity>| {
                m.get(*k).map(crate::api::Quantity::milli_value)
            };
            q(&old.limits) != q(&new.limits) || q(&old.requests) != q(&new.requests)
        })
        .collect()
}

/// `pod` with its containers' resources replaced by the allocated ones.
pub fn with_allocation(pod: &Pod, a: &PodAllocation) -> Pod {
    let mut p = pod.clone();
    for c in p
        .spec
        .containers
        .iter_mut()
        .chain(p.spec.init_containers.iter_mut())
    {
        if let Some(r) = a.allocated.get(&c.name) {
            c.resources = r.clone();
        }
    }
    p
}

/// The allocation of a pod seen for the first time: its spec.
pub fn from_spec(pod: &Pod) -> PodAllocation {
    PodAllocation {
        allocated: pod
            .spec
            .containers
            .iter()
            .chain(&pod.spec.init_containers)
            .map(|c| (c.name.clone(), c.resources.clone()))
            .collect(),
        actuated: BTreeMap::new(),
        resized: false,
    }
}

/// Whether the pod's spec asks for other resources than allocated to it.
fn resize_asked(pod: &Pod, current: &PodAllocation) -> bool {
    pod.spec
        .containers
        .iter()
        .chain(&pod.spec.init_containers)
        .any(|c| {
            current
                .allocated
                .get(&c.name)
                .is_some_and(|a| differ(a, &c.resources))
        })
}

/// Decides a pod's resize (pure): `pod` is the spec, `current` its allocation, `others` the
/// other pods the node runs with their allocated resources, `allocatable` the node's.
/// The predicate is upstream's resource fit with the resize operation: the pod with its new
/// requests against what the others use; a failure waits as `Deferred` with the predicate's
/// message (the apiserver refuses a resize beyond the node's allocatable outright).
pub fn decide(
    pod: &Pod,
    current: &PodAllocation,
    others: &[&Pod],
    allocatable: &crate::cm::Allocatable,
) -> Decision {
    if !resize_asked(pod, current) {
        return Decision::Unchanged;
    }
    if let Some(c) = pod
        .spec
        .init_containers
        .iter()
        .filter(|c| c.restart_policy.as_deref() != Some("Always"))
        .find(|c| {
            current
                .allocated
                .get(&c.name)
                .is_some_and(|a| differ(a, &c.resources))
        })
    {
        return Decision::Pending(Pending {
            reason: INFEASIBLE,
            message: format!(
                "Resize of init container {} is not supported on this node",
                c.name
            ),
        });
    }
    for (res, capacity) in [
        ("cpu", allocatable.milli_cpu),
        ("memory", allocatable.memory),
    ] {
        let want = crate::cm::resources::pod_request(pod, res);
        let used = others
            .iter()
            .map(|p| crate::cm::resources::pod_request(p, res))
            .fold(0, i64::saturating_add);
        if want > 0 && want > capacity.saturating_sub(used) {
            return Decision::Pending(Pending {
                reason: DEFERRED,
                message: format!(
                    "Node didn't have enough resource: {res}, requested: {want}, used: {used}, capacity: {capacity}"
                ),
            });
        }
    }
    Decision::Allocate
}

/// Upstream's resize event message: `<prefix>: ` and the pod's container resources as JSON
/// (init containers, containers, the generation, the error if any).
pub fn event_message(prefix: &str, pod: &Pod, error: Option<&str>) -> String {
    #[derive(Serialize)]
    struct Alloc<'a> {
        name: &'a str,
        resources: &'a ResourceRequirements,
    }
    #[derive(Serialize)]
    #[serde(rename_all = "camelCase")]
    struct Summary<'a> {
        #[serde(skip_serializing_if = "Vec::is_empty")]
        init_containers: Vec<Alloc<'a>>,
        #[serde(skip_serializing_if = "Vec::is_empty")]
        containers: Vec<Alloc<'a>>,
        generation: i64,
        #[serde(skip_serializing_if = "Option::is_none")]
        error: Option<&'a str>,
    }
    fn list(cs: &[Container]) -> Vec<Alloc<'_>> {
        cs.iter()
            .map(|c| Alloc {
                name: &c.name,
                resources: &c.resources,
            })
            .collect()
    }
    let summary = Summary {
        init_containers: list(&pod.spec.init_containers),
        containers: list(&pod.spec.containers),
        generation: pod.metadata.generation.unwrap_or(0),
        error,
    };
    match serde_json::to_string(&summary) {
        Ok(j) => format!("{prefix}: {j}"),
        Err(_) => prefix.to_owned(),
    }
}

fn event(pod: &Pod, warning: bool, reason: &str, message: &str) {
    let t = if warning {
        crate::events::Type::Warning
    } else {
        crate::events::Type::Normal
    };
    crate::events::record(&crate::events::ObjectRef::pod(pod), t, reason, message);
}

#[derive(Debug, Default)]
struct Inner {
    path: Option<PathBuf>,
    pods: BTreeMap<String, PodAllocation>,
    pending: HashMap<String, Pending>,
    /// The last in-place resize the runtime refused, per pod.
    errors: HashMap<String, String>,
    /// The pods the node runs or may run, as the sync loop last said (`None` before it has):
    /// a resize is weighed against all of them, synced since the start or not yet.
    active: Option<Vec<Rc<Pod>>>,
    /// The last checkpoint write failed: said once, tried again at the next change.
    save_failed: bool,
}

/// The allocations of every pod, shared by the runtime manager (which decides and applies
/// resizes) and the status manager (which reports them).
#[derive(Debug, Clone, Default)]
pub struct Manager(Rc<RefCell<Inner>>);

impl Manager {
    /// Allocations kept in memory only (tests, and a node without a root directory).
    pub fn in_memory() -> Self {
        Manager::default()
    }

    /// The allocations saved at `path`; a checkpoint that cannot be read is reported with
    /// its file and set aside (`.bad`), and every running pod is allocated its spec again.
    pub fn load(path: PathBuf) -> Self {
        let pods = match crate::atomic_file::read_json::<Checkpoint>(&path, CHECKPOINT_MAX_BYTES) {
            Ok(c) => c.map(|c| c.pods).unwrap_or_default(),
            Err(e) => {
                log::error!("the allocation checkpoint is unusable, starting afresh: {e}");
                let _ = std::fs::rename(&path, path.with_extension("bad"));
                BTreeMap::new()
            }
        };
        Manager(Rc::new(RefCell::new(Inner {
            path: Some(path),
            pods,
            ..Default::default()
        })))
    }

    /// The pod's allocation, if it has one.
    pub fn get(&self, uid: &str) -> Option<PodAllocation> {
        self.0.borrow().pods.get(uid).cloned()
    }

    /// Whether the pod's spec asks for a resize (other resources than allocated to it).
    pub fn resize_asked(&self, pod: &Pod) -> bool {
        self.0
            .borrow()
            .pods
            .get(&pod.metadata.uid)
            .is_some_and(|a| resize_asked(pod, a))
    }

    /// Sets the pods the node runs or may run (the sync loop's admitted pods).
    pub fn set_active(&self, pods: Vec<Rc<Pod>>) {
        self.0.borrow_mut().active = Some(pods);
    }

    /// The active pods other than `uid`, each with its allocated resources; `None` until
    /// [`Self::set_active`] has been called.
    pub fn active_others(&self, uid: &str) -> Option<Vec<Pod>> {
        let inner = self.0.borrow();
        let active = inner.active.as_ref()?;
        Some(
            active
                .iter()
                .filter(|p| p.metadata.uid != uid)
                .map(|p| match inner.pods.get(&p.metadata.uid) {
                    Some(a) => with_allocation(p, a),
                    None => (**p).clone(),
                })
                .collect(),
        )
    }

    /// The resize of this pod that waits, if any.
    pub fn pending(&self, uid: &str) -> Option<Pending> {
        self.0.borrow().pending.get(uid).cloned()
    }

    /// Allocates `pod` (its spec on first sight; a resize if it fits, see [`decide`]) and
    /// returns it with its allocated resources, which is what the node runs.
    pub fn allocate(
        &self,
        pod: &Pod,
        others: &[&Pod],
        allocatable: Option<&crate::cm::Allocatable>,
    ) -> Pod {
        let uid = pod.metadata.uid.as_str();
        let current = self.get(uid);
        let Some(current) = current else {
            self.0
                .borrow_mut()
                .pods
                .insert(uid.to_owned(), from_spec(pod));
            return pod.clone();
        };
        let unlimited = crate::cm::Allocatable {
            milli_cpu: i64::MAX,
            memory: i64::MAX,
            ephemeral_storage: i64::MAX,
        };
        let decision = decide(pod, &current, others, allocatable.unwrap_or(&unlimited));
        match decision {
            Decision::Unchanged => {
                self.0.borrow_mut().pending.remove(uid);
                with_allocation(pod, &current)
            }
            Decision::Allocate => {
                event(
                    pod,
                    false,
                    "ResizeStarted",
                    &event_message("Pod resize started", pod, None),
                );
                let mut next = from_spec(pod);
                next.actuated = current.actuated;
                next.resized = true;
                {
                    let mut inner = self.0.borrow_mut();
                    inner.pending.remove(uid);
                    inner.pods.insert(uid.to_owned(), next);
                }
                self.save();
                pod.clone()
            }
            Decision::Pending(p) => {
                if !current.resized {
                    if let Some(e) = self.0.borrow_mut().pods.get_mut(uid) {
                        e.resized = true;
                    }
                    self.save();
                }
                let mut inner = self.0.borrow_mut();
                if inner.pending.get(uid) != Some(&p) {
                    let reason = if p.reason == INFEASIBLE {
                        "ResizeInfeasible"
                    } else {
                        "ResizeDeferred"
                    };
                    let prefix = format!("Pod resize {}", p.reason);
                    event(
                        pod,
                        true,
                        reason,
                        &event_message(&prefix, pod, Some(&p.message)),
                    );
                    inner.pending.insert(uid.to_owned(), p);
                }
                with_allocation(pod, &current)
            }
        }
    }

    /// Records what a container now runs with (created, or updated in place).
    pub fn set_actuated(&self, uid: &str, container: &str, r: &ResourceRequirements) {
        let r = resizable_part(r);
        {
            let mut inner = self.0.borrow_mut();
            let entry = inner.pods.entry(uid.to_owned()).or_default();
            if entry.actuated.get(container) == Some(&r) {
                return;
            }
            entry.actuated.insert(container.to_owned(), r);
            if !entry.resized {
                return;
            }
        }
        self.save();
    }

    /// What a container was last given, if picolet recorded it.
    pub fn actuated(&self, uid: &str, container: &str) -> Option<ResourceRequirements> {
        self.0
            .borrow()
            .pods
            .get(uid)
            .and_then(|p| p.actuated.get(container).cloned())
    }

    /// Records (or clears) why the runtime refused the pod's last in-place resize.
    pub fn set_error(&self, uid: &str, e: Option<String>) {
        let mut inner = self.0.borrow_mut();
        match e {
            Some(e) => inner.errors.insert(uid.to_owned(), e),
            None => inner.errors.remove(uid),
        };
    }

    /// Why the runtime refused the pod's last in-place resize, while it is refused.
    pub fn error(&self, uid: &str) -> Option<String> {
        self.0.borrow().errors.get(uid).cloned()
    }

    /// Forgets a pod that is gone.
    pub fn remove(&self, uid: &str) {
        let had = {
            let mut inner = self.0.borrow_mut();
            inner.pending.remove(uid);
            inner.errors.remove(uid);
            inner.pods.remove(uid).is_some_and(|p| p.resized)
        };
        if had {
            self.save();
        }
    }

    fn save(&self) {
        let mut inner = self.0.borrow_mut();
        let Some(path) = inner.path.clone() else {
            return;
        };
        let body = Checkpoint {
            version: 1,
            pods: inner
                .pods
                .iter()
                .filter(|(_, p)| p.resized)
                .map(|(u, p)| (u.clone(), p.clone()))
                .collect(),
        };
        let bytes = match serde_json::to_vec(&body) {
            Ok(b) => b,
            Err(e) => {
                log::error!("{}: {e}", path.display());
                return;
            }
        };
        let r = path
            .parent()
            .map_or(Ok(()), crate::atomic_file::create_dir_all)
            .and_then(|()| crate::atomic_file::write(&path, &bytes));
        match r {
            Ok(()) => {
                if std::mem::take(&mut inner.save_failed) {
                    log::info!("{}: written again", path.display());
                }
            }
            Err(e) if !inner.save_failed => {
                inner.save_failed = true;
                log::error!("writing {}: {e}", path.display());
            }
            Err(_) => {}
        }
    }
}

#[cfg(test)]
mod tests;
