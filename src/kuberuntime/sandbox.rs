//! Sandboxes: creating a pod's sandbox, stopping a pod, removing everything it left.

use std::fs;

use crate::api::Pod;
use crate::cri::{CriError, v1};
use crate::kubecontainer::{PodRuntimeStatus, SandboxState};

use super::config;
use super::error::SandboxError;
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
    ) -> Result<(String, String), SandboxError> {
        let logs = config::pod_log_dir(&self.node.pod_logs_dir, pod);
        fs::create_dir_all(&logs).map_err(|source| SandboxError::LogDir {
            path: logs.clone(),
            source,
        })?;
        // Once per run of failures: a sync that keeps failing retries this quietly.
        let level = if self.sync_failing(&pod.metadata.uid) {
            log::Level::Debug
        } else {
            log::Level::Info
        };
        log::log!(
            level,
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
            .map_err(SandboxError::Run)?
            .pod_sandbox_id;
        let ip = match self.runtime.pod_sandbox_status(&id).await {
            Ok(r) => r
                .status
                .and_then(|s| s.network)
                .map(|n| n.ip)
                .unwrap_or_default(),
            Err(source) => return Err(SandboxError::Status { id, source }),
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

#[cfg(test)]
mod tests {
    use std::rc::Rc;

    use super::*;
    use crate::cm::{CgroupConfig, PodCgroups, fixture};
    use crate::cri::fake::FakeRuntime;
    use crate::kuberuntime::NodeContext;
    use crate::rt;

    #[test]
    fn the_pod_cgroup_is_made_before_the_sandbox_and_removed_after_the_pod() {
        let host = fixture::v2("cpu memory pids");
        let cfg = CgroupConfig {
            pod_pids_limit: 32,
            ..Default::default()
        };
        let mut pc = PodCgroups::with_hierarchy(&cfg, host.hierarchy.clone());
        pc.setup(None, None).unwrap();
        let fake = FakeRuntime::new();
        fake.add_image("img:1");
        let svc = Rc::new(fake.clone());
        let node = NodeContext {
            root_dir: host.root.join("kubelet"),
            pod_logs_dir: host.root.join("logs"),
            ..Default::default()
        };
        let rm = RuntimeManager::new(svc.clone(), svc, node).with_cgroups(Some(pc), String::new());
        let pod: Pod = serde_json::from_value(serde_json::json!({
            "metadata": {"name": "p", "namespace": "default", "uid": "u-1"},
            "spec": {"containers": [{"name": "c", "image": "img:1",
                "resources": {"requests": {"cpu": "100m"}, "limits": {"memory": "16Mi"}}}]}
        }))
        .unwrap();
        let dir = host.root.join("sys/fs/cgroup/kubepods/burstable/podu-1");
        rt::block_on(async {
            let out = rm.sync_pod(&pod, &PodRuntimeStatus::default()).await;
            assert!(out.errors.is_empty(), "{:?}", out.errors);
            let sb = &fake.sandboxes()[0];
            assert_eq!(
                sb.config.linux.as_ref().unwrap().cgroup_parent,
                "/kubepods/burstable/podu-1"
            );
            assert_eq!(
                std::fs::read_to_string(dir.join("memory.max"))
                    .unwrap()
                    .trim(),
                (16 << 20).to_string()
            );
            assert_eq!(
                std::fs::read_to_string(dir.join("pids.max"))
                    .unwrap()
                    .trim(),
                "32"
            );
            // cgroup v2 with memory.oom.group: containers ask for it.
            let st = rm.pod_status("u-1").await.unwrap();
            let c = fake.container(&st.containers[0].id).unwrap();
            let r = c.config.linux.unwrap().resources.unwrap();
            assert_eq!(r.unified["memory.oom.group"], "1");
            rm.remove_pod(&st, 0).await.unwrap();
        });
        assert!(!dir.exists(), "removed with the pod");
    }
}
