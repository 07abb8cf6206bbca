//! The edge of the runtime seam: CRI messages become `kubecontainer` types here, and nowhere
//! else. Everything past the runtime manager (PLEG, status, pod workers, the loop) sees only
//! what this module returns.

use std::collections::HashMap;
use std::path::PathBuf;

use super::termination;

use crate::cri::v1;
use crate::kubecontainer::{ContainerState, ContainerStatus, SandboxState, SandboxStatus};

use super::labels;

/// The runtime-neutral state of a CRI container state value.
pub(crate) fn container_state(s: i32) -> ContainerState {
    match v1::ContainerState::try_from(s) {
        Ok(v1::ContainerState::ContainerCreated) => ContainerState::Created,
        Ok(v1::ContainerState::ContainerRunning) => ContainerState::Running,
        Ok(v1::ContainerState::ContainerExited) => ContainerState::Exited,
        _ => ContainerState::Unknown,
    }
}

fn sandbox_state(s: i32) -> SandboxState {
    if s == v1::PodSandboxState::SandboxReady as i32 {
        SandboxState::Ready
    } else {
        SandboxState::NotReady
    }
}

pub(crate) fn sandbox_from(s: &v1::PodSandbox) -> SandboxStatus {
    SandboxStatus {
        id: s.id.as_str().into(),
        attempt: s.metadata.as_ref().map_or(0, |m| m.attempt),
        state: sandbox_state(s.state),
        created_at: s.created_at,
        ip: None,
        host_network: false,
    }
}

/// Fills a sandbox's network view from its status: the pod IP, and whether it shares the
/// node's network namespace.
pub(crate) fn apply_sandbox_status(sb: &mut SandboxStatus, s: &v1::PodSandboxStatus) {
    let ip = s
        .network
        .as_ref()
        .map(|n| n.ip.as_str())
        .filter(|ip| !ip.is_empty());
    sb.ip = ip.map(Into::into);
    sb.host_network = s
        .linux
        .as_ref()
        .and_then(|l| l.namespaces.as_ref())
        .and_then(|n| n.options.as_ref())
        .is_some_and(|o| o.network == v1::NamespaceMode::Node as i32);
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

/// An inspected container, and where its termination message comes from when it has exited
/// (read off the executor thread by the caller): the host file behind its message path and,
/// with `FallbackToLogsOnError` after a failure (not one to even start it), its log.
pub(crate) fn container_from(
    s: &v1::ContainerStatus,
    sandbox_id: &str,
) -> (ContainerStatus, Option<termination::Source>) {
    let state = container_state(s.state);
    let message = (state == ContainerState::Exited).then(|| {
        let file = s
            .annotations
            .get(labels::TERMINATION_MESSAGE_PATH)
            .and_then(|path| s.mounts.iter().find(|m| &m.container_path == path))
            .map(|m| PathBuf::from(&m.host_path));
        let fallback = s
            .annotations
            .get(labels::TERMINATION_MESSAGE_POLICY)
            .is_some_and(|p| p == "FallbackToLogsOnError")
            && s.exit_code != 0
            && s.reason != "ContainerCannotRun"
            && !s.log_path.is_empty();
        termination::Source {
            file,
            fallback_log: fallback.then(|| PathBuf::from(&s.log_path)),
        }
    });
    let c = ContainerStatus {
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
        message: s.message.as_str().into(),
        hash: labels::parse_hash(&s.annotations),
        restart_count: labels::parse_restart_count(&s.annotations),
        sandbox_id: sandbox_id.into(),
    };
    (c, message)
}

/// One listing of the whole runtime, grouped by pod UID.
#[derive(Debug, Default)]
pub struct Listing {
    pub pods: HashMap<String, ListedPod>,
}

/// What a listing shows of one pod, in runtime-neutral terms.
#[derive(Debug, Default, Clone)]
pub struct ListedPod {
    pub name: String,
    pub namespace: String,
    pub sandboxes: Vec<SandboxStatus>,
    pub containers: Vec<ContainerStatus>,
    /// The grace period the pod's containers were created with, if they carry one (what an
    /// orphan without a spec is stopped with).
    pub grace: Option<i64>,
}

impl Listing {
    /// Groups sandboxes and containers by the pod UID label. With `owner` (this node's name),
    /// objects that are not this node's picolet's (another node agent's, or another node's
    /// picolet's on a shared runtime) are left out; objects without a pod UID label (not a
    /// pod's) always are.
    pub(crate) fn group(
        sandboxes: Vec<v1::PodSandbox>,
        containers: Vec<v1::Container>,
        owner: Option<&str>,
    ) -> Listing {
        let mut l = Listing::default();
        let ours = |l: &HashMap<String, String>| owner.is_none_or(|node| labels::owned_by(l, node));
        for s in sandboxes.iter().filter(|s| ours(&s.labels)) {
            let Some(uid) = s.labels.get(labels::POD_UID) else {
                continue;
            };
            let p = l.pods.entry(uid.clone()).or_default();
            if let Some(m) = &s.metadata {
                p.name.clone_from(&m.name);
                p.namespace.clone_from(&m.namespace);
            }
            p.sandboxes.push(sandbox_from(s));
        }
        for c in containers.iter().filter(|c| ours(&c.labels)) {
            let Some(uid) = c.labels.get(labels::POD_UID) else {
                continue;
            };
            let p = l.pods.entry(uid.clone()).or_default();
            if p.name.is_empty() {
                p.name = c.labels.get(labels::POD_NAME).cloned().unwrap_or_default();
                p.namespace = c
                    .labels
                    .get(labels::POD_NAMESPACE)
                    .cloned()
                    .unwrap_or_default();
            }
            if p.grace.is_none() {
                p.grace = c
                    .annotations
                    .get(labels::TERMINATION_GRACE_PERIOD)
                    .and_then(|g| g.parse().ok());
            }
            p.containers.push(listed_container(c));
        }
        for p in l.pods.values_mut() {
            p.sandboxes.sort_by_key(|s| std::cmp::Reverse(s.created_at));
            p.containers
                .sort_by_key(|c| std::cmp::Reverse(c.created_at));
        }
        l
    }
}

/// A label selector for every object of one pod.
pub(crate) fn pod_selector(uid: &str) -> HashMap<String, String> {
    HashMap::from([(labels::POD_UID.to_owned(), uid.to_owned())])
}

/// A running container's init pid, from the runtime's verbose ContainerStatus (containerd puts
/// JSON carrying `"pid"` in `info["info"]`; 0 once the task has exited). `None` for a container
/// that is not running.
pub async fn container_init_pid(
    runtime: &dyn crate::cri::RuntimeService,
    container_id: &str,
) -> Result<Option<u32>, crate::cri::CriError> {
    let st = runtime.container_status(container_id, true).await?;
    Ok(pid_from_info(&st.info))
}

/// The runtime's facts accounting needs, over the CRI: init pids (verbose ContainerStatus) and
/// the image filesystem (ImageFsInfo), through the counted services so `/metrics` sees them. A
/// failed call is logged at debug level and unknown.
impl<R, I> crate::stats::RuntimeFacts for super::instrumented::Instrumented<R, I>
where
    R: crate::cri::RuntimeService + ?Sized,
    I: crate::cri::ImageService + ?Sized,
{
    fn container_pid(&self, container_id: &str) -> crate::stats::Ask<'_, u32> {
        let id = container_id.to_owned();
        Box::pin(async move {
            container_init_pid(self, &id)
                .await
                .inspect_err(|e| log::debug!("stats: status of container {id}: {e}"))
                .ok()
                .flatten()
        })
    }

    fn image_fs(&self) -> crate::stats::Ask<'_, crate::stats::ImageFs> {
        Box::pin(async move {
            let r = crate::cri::ImageService::image_fs_info(self)
                .await
                .inspect_err(|e| log::debug!("stats: ImageFsInfo: {e}"))
                .ok()?;
            image_fs_from(&r)
        })
    }

    fn writable_layers(&self) -> crate::stats::Ask<'_, HashMap<String, crate::stats::disk::Usage>> {
        Box::pin(async move {
            let all = crate::cri::RuntimeService::list_container_stats(self)
                .await
                .inspect_err(|e| log::debug!("stats: ListContainerStats: {e}"))
                .ok()?;
            Some(writable_layers_from(&all))
        })
    }
}

/// The writable layers the runtime reports, by container ID; a container without the figure
/// is left out (and so unknown).
pub fn writable_layers_from(
    all: &[v1::ContainerStats],
) -> HashMap<String, crate::stats::disk::Usage> {
    all.iter()
        .filter_map(|s| {
            let id = &s.attributes.as_ref()?.id;
            let w = s.writable_layer.as_ref()?;
            Some((
                id.clone(),
                crate::stats::disk::Usage {
                    bytes: w.used_bytes.as_ref()?.value,
                    inodes: w.inodes_used.as_ref().map_or(0, |v| v.value),
                },
            ))
        })
        .collect()
}

fn image_fs_from(r: &v1::ImageFsInfoResponse) -> Option<crate::stats::ImageFs> {
    let u = r.image_filesystems.first()?;
    let mountpoint = u.fs_id.as_ref()?.mountpoint.clone();
    (!mountpoint.is_empty()).then(|| crate::stats::ImageFs {
        mountpoint: PathBuf::from(mountpoint),
        used_bytes: u.used_bytes.as_ref().map(|v| v.value),
        inodes_used: u.inodes_used.as_ref().map(|v| v.value),
    })
}

fn pid_from_info(info: &HashMap<String, String>) -> Option<u32> {
    let v: serde_json::Value = serde_json::from_str(info.get("info")?).ok()?;
    let pid = u32::try_from(v.get("pid")?.as_u64()?).ok()?;
    (pid > 0).then_some(pid)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn pid_from_containerd_info() {
        let mut info = HashMap::new();
        info.insert(
            "info".to_owned(),
            r#"{"sandboxID":"abc","pid":4242,"removing":false,"snapshotKey":"k"}"#.to_owned(),
        );
        assert_eq!(pid_from_info(&info), Some(4242));
        info.insert("info".to_owned(), r#"{"pid":0}"#.to_owned());
        assert_eq!(pid_from_info(&info), None);
        assert_eq!(pid_from_info(&HashMap::new()), None);
    }
}
