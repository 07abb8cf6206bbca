//! In-place resizes of running containers (upstream's `doPodResizeAction`): the allocation
//! decided by [`crate::allocation`], applied with the CRI's `UpdateContainerResources` and the
//! pod cgroup, or by a restart where the container's `resizePolicy` asks for one.

use super::actions::{Kill, PodActions};
use super::manager::{RuntimeManager, SyncOutcome};
use super::{SyncError, config};
use crate::allocation;
use crate::api::{Container, Pod};
use crate::kubecontainer::{ContainerState, PodRuntimeStatus};

/// The containers to resize in place in this sync: (container as allocated, its runtime id,
/// what it runs with now).
#[derive(Debug, Default)]
pub(super) struct Plan {
    in_place: Vec<(Container, Box<str>, crate::api::ResourceRequirements)>,
}

impl RuntimeManager {
    /// Allocates the pod (see [`allocation::Manager::allocate`]) against the other pods this
    /// node runs, and returns it as it is to run.
    pub(super) fn allocate(&self, desired: &Pod) -> Pod {
        let uid = desired.metadata.uid.as_str();
        if !self.allocation.resize_asked(desired) {
            return self
                .allocation
                .allocate(desired, &[], self.allocatable_ref());
        }
        // Weighed against the pods the sync loop counts as active (admitted, not stopping),
        // with their allocated resources, as admission weighs them; without a sync loop,
        // against those synced.
        let active = self.allocation.active_others(uid);
        let specs = self.specs.borrow();
        let others: Vec<&Pod> = match &active {
            Some(a) => a.iter().collect(),
            None => specs
                .iter()
                .filter(|(u, _)| u.as_str() != uid)
                .map(|(_, p)| &**p)
                .collect(),
        };
        self.allocation
            .allocate(desired, &others, self.allocatable_ref())
    }

    /// Which running containers run with other resources than allocated: those whose
    /// `resizePolicy` restarts them on a changed resource are killed and started again in
    /// this sync (added to `a`), the others are resized in place ([`Self::resize_in_place`]).
    pub(super) fn plan_resize(&self, pod: &Pod, st: &PodRuntimeStatus, a: &mut PodActions) -> Plan {
        let uid = pod.metadata.uid.as_str();
        let mut plan = Plan::default();
        let sidecars = pod
            .spec
            .init_containers
            .iter()
            .enumerate()
            .filter(|(_, c)| c.restart_policy.as_deref() == Some("Always"));
        let apps = pod.spec.containers.iter().enumerate();
        let candidates = apps
            .map(|(i, c)| (false, i, c))
            .chain(sidecars.map(|(i, c)| (true, i, c)));
        for (sidecar, i, c) in candidates {
            let Some(s) = st
                .latest(&c.name)
                .filter(|s| s.state == ContainerState::Running)
            else {
                continue;
            };
            if a.containers_to_kill.iter().any(|k| k.id == s.id) {
                continue;
            }
            let Some(now) = self.allocation.actuated(uid, &c.name) else {
                // Started before picolet recorded what containers run with: it runs with
                // what was allocated then, which is now.
                self.allocation.set_actuated(uid, &c.name, &c.resources);
                continue;
            };
            if !allocation::differ(&now, &c.resources) {
                continue;
            }
            let changed = allocation::changed(&now, &c.resources);
            if changed.iter().any(|r| c.resize_restarts(r)) {
                a.containers_to_kill.push(Kill {
                    id: s.id.clone(),
                    name: c.name.as_str().into(),
                    reason: "Container resize requires restart".into(),
                    grace: None,
                });
                if sidecar {
                    a.sidecars_to_start.push(i);
                } else {
                    a.containers_to_start.push(i);
                }
                a.sandbox_id.get_or_insert_with(|| s.sandbox_id.clone());
            } else {
                plan.in_place.push((c.clone(), s.id.clone(), now));
            }
        }
        plan
    }

    /// Applies the planned in-place resizes: the pod cgroup widened to hold both the old and
    /// the new limits, then each container updated by the runtime (the caller then sets the
    /// pod cgroup to the new limits). A container the runtime refuses keeps its old limits and
    /// is tried again at the next sync; the resize stays in progress with the error.
    pub(super) async fn resize_in_place(&self, pod: &Pod, plan: &Plan, out: &mut SyncOutcome) {
        if plan.in_place.is_empty() {
            return;
        }
        let uid = pod.metadata.uid.as_str();
        out.acted = true;
        if let Some(pc) = &self.cgroups {
            let mut old = pod.clone();
            for (c, _, now) in &plan.in_place {
                if let Some(x) = old
                    .spec
                    .containers
                    .iter_mut()
                    .chain(old.spec.init_containers.iter_mut())
                    .find(|x| x.name == c.name)
                {
                    x.resources = now.clone();
                }
            }
            if let Err(e) = pc.widen_pod(&old, pod) {
                log::warn!(
                    "pod {} ({uid}): resizing its cgroup: {e}",
                    pod.metadata.name
                );
            }
        }
        let mut errors = Vec::new();
        for (c, id, _) in &plan.in_place {
            let linux = config::resources(pod, c, &self.node);
            match self.runtime.update_container_resources(id, linux).await {
                Ok(()) => {
                    log::info!(
                        "resized container {} of pod {} in place",
                        c.name,
                        pod.metadata.name
                    );
                    self.allocation.set_actuated(uid, &c.name, &c.resources);
                }
                Err(source) => {
                    let e = SyncError::ResizeContainer {
                        container: c.name.clone(),
                        source,
                    };
                    errors.push(e.to_string());
                    out.fail(e);
                }
            }
        }
        let error = (!errors.is_empty()).then(|| errors.join("; "));
        if let Some(e) = &error
            && self.allocation.error(uid).as_ref() != Some(e)
        {
            crate::events::record(
                &crate::events::ObjectRef::pod(pod),
                crate::events::Type::Warning,
                "ResizeError",
                &allocation::event_message("Pod resize error", pod, Some(e)),
            );
        }
        self.allocation.set_error(uid, error);
    }
}
