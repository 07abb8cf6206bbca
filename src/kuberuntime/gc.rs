//! Container garbage collection: dead containers beyond the newest per name, and the old
//! sandboxes that hold nothing kept (the kubelet's GC with MaxPerPodContainer 1).

use std::collections::HashSet;

use crate::kubecontainer::{
    ContainerState, ContainerStatus, PodRuntimeStatus, SandboxState, SandboxStatus,
};

use super::manager::RuntimeManager;
use crate::rt;

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
    let mut kept_dead: HashSet<&str> = HashSet::new();
    let mut kept_sandboxes: HashSet<&str> = HashSet::new();
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

impl RuntimeManager {
    /// Carries out a [`gc_plan`]. The pod's dead containers, and its old sandboxes, are each
    /// one object to the failure tracker: when some cannot be removed (a sandbox that cannot
    /// be stopped while the network plugin is missing), the pod's next try waits for its
    /// backoff, and the log says it once, not once per sandbox a failing pod leaves behind.
    pub async fn gc_pod(&self, st: &PodRuntimeStatus) {
        let plan = gc_plan(st);
        let uid = &*st.uid;
        let due = |key: &str| self.removal_failures.borrow().due(key, rt::now_nanos());
        let key = format!("containers/{uid}");
        if !plan.containers.is_empty() && due(&key) {
            let mut failed = None;
            for c in &plan.containers {
                match self.runtime.remove_container(&c.id).await {
                    Err(e) if !e.is_not_found() => {
                        failed.get_or_insert_with(|| format!("container {}: {e}", c.id));
                    }
                    // The runtime leaves the log file; a crash loop would fill the disk.
                    _ => self.remove_log(st, c),
                }
            }
            self.gc_outcome(
                &key,
                &format!("removing dead containers of pod {uid}"),
                failed,
            );
        }
        let key = format!("sandboxes/{uid}");
        if !plan.sandboxes.is_empty() && due(&key) {
            let mut failed = None;
            for s in &plan.sandboxes {
                if let Err(e) = self.runtime.remove_pod_sandbox(&s.id).await
                    && !e.is_not_found()
                {
                    failed.get_or_insert_with(|| format!("sandbox {}: {e}", s.id));
                }
            }
            self.gc_outcome(
                &key,
                &format!("removing old sandboxes of pod {uid}"),
                failed,
            );
        }
    }

    fn gc_outcome(&self, key: &str, what: &str, failed: Option<String>) {
        let mut f = self.removal_failures.borrow_mut();
        match failed {
            Some(cause) => {
                f.failed(key, what, &cause, rt::now_nanos());
            }
            None => {
                f.succeeded(key, what);
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

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
}
