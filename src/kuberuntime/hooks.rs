//! Lifecycle hooks and the order of a container's end: postStart after a container starts
//! (a failure kills it: FailedPostStartHook), preStop before it is stopped, bounded by the grace
//! period, whose rest the runtime then gets; a pod stops its app containers first and its
//! sidecars after them, last started first.

use std::time::Duration;

use crate::api::{Container, ContainerPort, LifecycleHandler, Pod};
use crate::cri::CriError;
use crate::kubecontainer::{ContainerStatus, PodRuntimeStatus};
use crate::probe::{self, http};
use crate::rt;

use super::manager::RuntimeManager;
use super::{join_all, labels};

/// `name_namespace(uid)`, as the kubelet names a pod in hook messages.
pub(super) fn pod_ref(name: &str, namespace: &str, uid: &str) -> String {
    format!("{name}_{namespace}({uid})")
}

/// The container spec a kill needs (its preStop hook and ports), from the pod when known.
pub(super) struct Target<'a> {
    pub container: std::borrow::Cow<'a, Container>,
    pub hook: Option<LifecycleHandler>,
    pub pod_ref: String,
}

impl RuntimeManager {
    /// Runs one hook against a running container instance. The error is the kubelet's message.
    pub(super) async fn run_hook(
        &self,
        h: &LifecycleHandler,
        c: &Container,
        pod_ref: &str,
        id: &str,
        pod_ip: &str,
    ) -> Result<(), String> {
        if let Some(e) = &h.exec {
            let failed = |error: String, output: &[u8]| {
                format!(
                    "Exec lifecycle hook ([{}]) for Container {:?} in Pod {pod_ref:?} failed - error: {error}, message: {:?}",
                    e.command.join(" "),
                    c.name,
                    String::from_utf8_lossy(output)
                )
            };
            return match self.exec_sync(id, &e.command, Duration::ZERO).await {
                Ok(o) if o.exit_code == 0 => Ok(()),
                Ok(o) => Err(failed(
                    format!(
                        "command '{}' exited with {}: {}",
                        e.command.join(" "),
                        o.exit_code,
                        String::from_utf8_lossy(&o.output)
                    ),
                    &o.output,
                )),
                Err(err) => Err(failed(err.to_string(), b"")),
            };
        }
        if let Some(g) = &h.http_get {
            let path = g.path.clone().unwrap_or_default();
            let failed = |error: String| {
                format!(
                    "HTTP lifecycle hook ({path}) for Container {:?} in Pod {pod_ref:?} failed - error: {error}",
                    c.name
                )
            };
            let target = probe::http_target(g, c, pod_ip).map_err(failed)?;
            let ua = format!("kube-lifecycle/{}", http::KUBE_VERSION);
            // Only a failed exchange fails the hook; the status code is not looked at.
            return http::get(&target, &ua)
                .await
                .map(drop)
                .map_err(|e| failed(e.to_string()));
        }
        if let Some(s) = &h.sleep {
            rt::sleep(Duration::from_secs(u64::try_from(s.seconds).unwrap_or(0))).await;
            return Ok(());
        }
        Err(format!("invalid handler for container {:?}", c.name))
    }

    /// What killing this instance needs: the spec's container when the pod is known, else
    /// what the instance's annotations kept (its preStop hook and ports), as the kubelet
    /// restores them for a pod it no longer has.
    async fn kill_target<'a>(
        &self,
        pod: Option<&'a Pod>,
        st: &PodRuntimeStatus,
        c: &ContainerStatus,
    ) -> Target<'a> {
        let spec = pod.and_then(|p| {
            p.spec
                .containers
                .iter()
                .chain(&p.spec.init_containers)
                .find(|x| *x.name == *c.name)
        });
        let pod_ref = pod_ref(&st.name, &st.namespace, &st.uid);
        if let Some(spec) = spec {
            return Target {
                hook: spec.lifecycle.as_ref().and_then(|l| l.pre_stop.clone()),
                container: std::borrow::Cow::Borrowed(spec),
                pod_ref,
            };
        }
        let mut restored = Container {
            name: c.name.to_string(),
            ..Default::default()
        };
        let mut hook = None;
        if let Ok(r) = self.runtime.container_status(&c.id, false).await
            && let Some(s) = r.status
        {
            hook = s
                .annotations
                .get(labels::PRE_STOP_HANDLER)
                .and_then(|j| serde_json::from_str(j).ok());
            restored.ports = s
                .annotations
                .get(labels::CONTAINER_PORTS)
                .and_then(|j| serde_json::from_str::<Vec<ContainerPort>>(j).ok())
                .unwrap_or_default();
        }
        Target {
            container: std::borrow::Cow::Owned(restored),
            hook,
            pod_ref,
        }
    }

    /// Kills one running instance: its preStop hook first, for at most the grace period, then
    /// StopContainer with what is left of it, but at least `MINIMUM_GRACE_PERIOD`.
    pub(super) async fn kill_container(
        &self,
        pod: Option<&Pod>,
        st: &PodRuntimeStatus,
        c: &ContainerStatus,
        grace: i64,
    ) -> Result<(), CriError> {
        let t = self.kill_target(pod, st, c).await;
        let mut grace = grace.max(0);
        if t.hook.is_some() && grace == 0 {
            // As upstream: a hook runs only within the grace period (a sidecar's comes after
            // the app containers stopped, with what they left of it).
            log::debug!(
                "preStop hook of container {} not run: no grace period left",
                c.name
            );
        }
        if let Some(h) = t.hook.as_ref().filter(|_| grace > 0) {
            let ip = self.pod_ip(pod, st);
            let t0 = rt::now();
            let limit = Duration::from_secs(u64::try_from(grace).unwrap_or(0));
            match rt::timeout(
                limit,
                self.run_hook(h, &t.container, &t.pod_ref, &c.id, &ip),
            )
            .await
            {
                Ok(Ok(())) => log::debug!("preStop hook of container {} completed", c.name),
                Ok(Err(m)) => match pod {
                    Some(p) => crate::events::record(
                        &crate::events::ObjectRef::container(p, &c.name),
                        crate::events::Type::Warning,
                        "FailedPreStopHook",
                        &m,
                    ),
                    None => log::warn!("FailedPreStopHook: container {}: {m}", c.name),
                },
                Err(_) => log::info!(
                    "preStop hook of container {} did not complete in {grace} seconds",
                    c.name
                ),
            }
            let spent = i64::try_from(rt::now().saturating_duration_since(t0).as_secs())
                .unwrap_or(i64::MAX);
            grace = grace.saturating_sub(spent).max(0);
        }
        // Never less than the minimum: a container always gets SIGTERM and a moment to act.
        self.stop_container(&c.id, grace.max(super::config::MINIMUM_GRACE_PERIOD))
            .await
    }

    /// The address hooks reach a pod at: its IP, or the node's for host-network pods.
    pub(super) fn pod_ip(&self, pod: Option<&Pod>, st: &PodRuntimeStatus) -> String {
        let host = pod.map_or_else(
            || st.sandboxes.first().is_some_and(|s| s.host_network),
            |p| p.spec.host_network,
        );
        match st.ip() {
            Some(ip) if !host => ip.to_owned(),
            _ => self.node.node_ip.clone(),
        }
    }

    /// Stops every running container of the pod: app containers (and any the spec does not
    /// name) at once, then the sidecars one by one, last started first, each with what is
    /// left of the grace period.
    pub(super) async fn kill_running(
        &self,
        st: &PodRuntimeStatus,
        grace: i64,
    ) -> Result<(), CriError> {
        let pod = self.specs.borrow().get(&*st.uid).cloned();
        let sidecar_index = |name: &str| {
            pod.as_ref().and_then(|p| {
                p.spec
                    .init_containers
                    .iter()
                    .position(|c| c.name == name && c.is_sidecar())
            })
        };
        let (mut sidecars, others): (Vec<_>, Vec<_>) =
            st.running().partition(|c| sidecar_index(&c.name).is_some());
        let t0 = rt::now();
        let kills = others
            .into_iter()
            .map(|c| self.kill_container(pod.as_deref(), st, c, grace));
        for r in join_all(kills).await {
            r?;
        }
        sidecars.sort_by_key(|c| std::cmp::Reverse(sidecar_index(&c.name)));
        for c in sidecars {
            let spent = i64::try_from(rt::now().saturating_duration_since(t0).as_secs())
                .unwrap_or(i64::MAX);
            self.kill_container(pod.as_deref(), st, c, grace.saturating_sub(spent))
                .await?;
        }
        Ok(())
    }
}
