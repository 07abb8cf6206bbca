//! Sandboxes: creating a pod's sandbox, stopping a pod, removing everything it left.

use std::fs;

use crate::api::Pod;
use crate::cri::{CriError, v1};
use crate::kubecontainer::{PodRuntimeStatus, SandboxState};

use super::config;
use super::manager::RuntimeManager;

/// Treats "already gone" as done: stop and remove are idempotent for picolet.
fn ignore_not_found(r: Result<(), CriError>) -> Result<(), CriError> {
    match r {
        Err(e) if e.is_not_found() => Ok(()),
        r => r,
    }
}

impl RuntimeManager {
    /// Creates the pod's sandbox; returns its id and IP.
    pub(super) async fn run_sandbox(
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
            .runtime
            .run_pod_sandbox(req)
            .await
            .map_err(|e| e.to_string())?
            .pod_sandbox_id;
        let ip = match self.runtime.pod_sandbox_status(&id).await {
            Ok(r) => r
                .status
                .and_then(|s| s.network)
                .map(|n| n.ip)
                .unwrap_or_default(),
            Err(e) => return Err(format!("reading status of new sandbox {id}: {e}")),
        };
        Ok((id, ip))
    }

    pub(super) async fn stop_container(&self, id: &str, grace: i64) -> Result<(), CriError> {
        ignore_not_found(self.runtime.stop_container(id, grace).await)
    }

    /// Stops every running container (app containers at once, then sidecars in reverse
    /// order; each after its preStop hook, within the grace period) and then every ready
    /// sandbox of the pod.
    pub async fn kill_pod(&self, st: &PodRuntimeStatus, grace: i64) -> Result<(), CriError> {
        self.kill_running(st, grace).await?;
        for s in st
            .sandboxes
            .iter()
            .filter(|s| s.state == SandboxState::Ready)
        {
            ignore_not_found(self.runtime.stop_pod_sandbox(&s.id).await)?;
        }
        Ok(())
    }

    /// Kills the pod and removes every trace of it: containers, sandboxes, logs, volumes and
    /// the remembered backoffs.
    pub async fn remove_pod(&self, st: &PodRuntimeStatus, grace: i64) -> Result<(), CriError> {
        self.kill_pod(st, grace).await?;
        for c in &st.containers {
            ignore_not_found(self.runtime.remove_container(&c.id).await)?;
        }
        for s in &st.sandboxes {
            ignore_not_found(self.runtime.remove_pod_sandbox(&s.id).await)?;
        }
        self.forget(&st.uid, &st.name, &st.namespace).await;
        Ok(())
    }
}
