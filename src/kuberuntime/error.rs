//! Why a pod sync failed, with the kubelet's reason for each kind of failure: the reason a
//! container's `state.waiting` shows, and what the log and (later) events say.

use std::time::Duration;

use crate::cri::CriError;

/// One failure of a pod sync.
#[derive(Debug, thiserror::Error)]
pub enum SyncError {
    /// The image could not be pulled (or checked).
    #[error("{message}")]
    ImagePull { container: String, message: String },
    /// A pull failed recently and its backoff has not run out. `volume`: the image volume
    /// whose image it is, named first.
    #[error("{}back-off pulling image {image:?}", of_volume(.volume))]
    ImagePullBackOff {
        container: String,
        image: String,
        volume: Option<String>,
    },
    /// The image is missing and the pull policy is Never.
    #[error(
        "{}container image {image:?} is not present with pull policy of Never",
        of_volume(.volume)
    )]
    ImageNeverPull {
        container: String,
        image: String,
        volume: Option<String>,
    },
    /// The container's configuration cannot be built (a bad subPath, its log or termination
    /// message file cannot be made).
    #[error("container {container}: {message}")]
    CreateContainerConfig { container: String, message: String },
    /// The runtime refused to create the container.
    #[error("creating container {container}: {source}")]
    CreateContainer {
        container: String,
        #[source]
        source: CriError,
    },
    /// The runtime created the container but could not start it.
    #[error("starting container {container}: {source}")]
    RunContainer {
        container: String,
        #[source]
        source: CriError,
    },
    /// The pod's volumes could not be prepared: no container starts, and none records it as
    /// its waiting reason.
    #[error("preparing volumes: {0}")]
    Volumes(String),
    /// The sandbox could not be created (or its status read, or the pod's cgroup made).
    #[error("creating pod sandbox: {0}")]
    CreatePodSandbox(#[source] SandboxError),
    /// A running container or the sandbox could not be stopped.
    #[error("killing pod: {0}")]
    KillPod(#[source] CriError),
    #[error("killing container {container}: {source}")]
    KillContainer {
        container: String,
        #[source]
        source: CriError,
    },
    /// An in-place resize the runtime refused (`UpdateContainerResources`).
    #[error("resizing container {container}: {source}")]
    ResizeContainer {
        container: String,
        #[source]
        source: CriError,
    },
    /// The container started but its postStart hook failed; it was killed.
    #[error("{message}")]
    PostStartHook { container: String, message: String },
    /// Init containers of an old sandbox could not be removed before a new one starts.
    #[error("removing old init containers: {0}")]
    PurgeInitContainers(#[source] CriError),
    /// The pod needs a new sandbox outside the host's network and the runtime says its network
    /// is not ready: none is made (upstream's SyncPod refuses the same way). No container
    /// records it as its waiting reason (the status shows ContainerCreating).
    #[error("network is not ready: {0}")]
    NetworkNotReady(String),
}

/// `image volume "NAME": ` before a message about an image volume's image.
pub(super) fn of_volume(volume: &Option<String>) -> String {
    volume
        .as_deref()
        .map(|v| format!("image volume {v:?}: "))
        .unwrap_or_default()
}

/// Why a pod's sandbox could not be made.
#[derive(Debug)]
pub enum SandboxError {
    /// The pod's cgroup could not be made or given its limits.
    Cgroup(crate::cm::fs::CgroupError),
    /// The pod's log directory could not be made.
    LogDir {
        path: std::path::PathBuf,
        source: std::io::Error,
    },
    /// The runtime refused to run the sandbox.
    Run(CriError),
    /// The new sandbox's status (its IP) could not be read.
    Status { id: String, source: CriError },
}

impl std::fmt::Display for SandboxError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            SandboxError::Cgroup(e) => write!(f, "pod cgroup: {e}"),
            SandboxError::LogDir { path, source } => {
                write!(f, "creating {}: {source}", path.display())
            }
            SandboxError::Run(e) => write!(f, "{e}"),
            SandboxError::Status { id, source } => {
                write!(f, "reading status of new sandbox {id}: {source}")
            }
        }
    }
}

impl std::error::Error for SandboxError {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        match self {
            SandboxError::Cgroup(e) => Some(e),
            SandboxError::LogDir { source, .. } => Some(source),
            SandboxError::Run(e) | SandboxError::Status { source: e, .. } => Some(e),
        }
    }
}

/// The reason of [`SyncError::CreatePodSandbox`], cleared once a sandbox runs.
pub const CREATE_POD_SANDBOX_ERROR: &str = "CreatePodSandboxError";

impl SyncError {
    /// Whether this is a wait for something being read rather than a failure: a volume whose
    /// content (a service account token, a ConfigMap) the node has not read from the apiserver
    /// yet. Every API pod with a token meets it on its first sync.
    pub fn is_waiting(&self) -> bool {
        matches!(self, SyncError::Volumes(m) if m.ends_with(" yet"))
    }

    /// The kubelet's reason for this failure.
    pub fn reason(&self) -> &'static str {
        match self {
            SyncError::ImagePull { .. } => "ErrImagePull",
            SyncError::ImagePullBackOff { .. } => "ImagePullBackOff",
            SyncError::ImageNeverPull { .. } => "ErrImageNeverPull",
            SyncError::CreateContainerConfig { .. } => "CreateContainerConfigError",
            SyncError::CreateContainer { .. } => "CreateContainerError",
            SyncError::RunContainer { .. } => "RunContainerError",
            // Upstream shows a pod whose volumes are not ready as still creating.
            SyncError::Volumes(_) => "ContainerCreating",
            SyncError::CreatePodSandbox(_) => CREATE_POD_SANDBOX_ERROR,
            SyncError::KillPod(_) => "KillPodSandboxError",
            SyncError::KillContainer { .. } => "KillContainerError",
            // Upstream's reason in the PodResizeInProgress condition.
            SyncError::ResizeContainer { .. } => "Error",
            SyncError::PurgeInitContainers(_) => "KillContainerError",
            SyncError::PostStartHook { .. } => "PostStartHookError",
            SyncError::NetworkNotReady(_) => "NetworkNotReady",
        }
    }

    /// The container this failure keeps waiting, if it is about one container.
    pub fn container(&self) -> Option<&str> {
        match self {
            SyncError::ImagePull { container, .. }
            | SyncError::ImagePullBackOff { container, .. }
            | SyncError::ImageNeverPull { container, .. }
            | SyncError::CreateContainerConfig { container, .. }
            | SyncError::CreateContainer { container, .. }
            | SyncError::RunContainer { container, .. }
            | SyncError::PostStartHook { container, .. } => Some(container),
            _ => None,
        }
    }
}

/// An image failure and when to try again.
#[derive(Debug)]
pub(crate) struct ImageFailure {
    pub error: SyncError,
    pub retry_after: Duration,
}

impl ImageFailure {
    /// The same failure of an image volume's pull, as the waiting reason of a container that
    /// mounts the volume (every container mounting it waits on the one pull).
    pub fn for_container(&self, container: &str) -> SyncError {
        let container = container.to_owned();
        match &self.error {
            SyncError::ImagePullBackOff { image, volume, .. } => SyncError::ImagePullBackOff {
                container,
                image: image.clone(),
                volume: volume.clone(),
            },
            SyncError::ImageNeverPull { image, volume, .. } => SyncError::ImageNeverPull {
                container,
                image: image.clone(),
                volume: volume.clone(),
            },
            other => SyncError::ImagePull {
                container,
                message: other.to_string(),
            },
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reasons_are_the_kubelets() {
        let c = || "app".to_owned();
        let cases = [
            (
                SyncError::ImagePull {
                    container: c(),
                    message: "x".into(),
                },
                "ErrImagePull",
            ),
            (
                SyncError::ImagePullBackOff {
                    container: c(),
                    image: "i".into(),
                    volume: None,
                },
                "ImagePullBackOff",
            ),
            (
                SyncError::ImageNeverPull {
                    container: c(),
                    image: "i".into(),
                    volume: None,
                },
                "ErrImageNeverPull",
            ),
            (
                SyncError::CreateContainerConfig {
                    container: c(),
                    message: "m".into(),
                },
                "CreateContainerConfigError",
            ),
            (
                SyncError::CreatePodSandbox(SandboxError::Run(CriError::Endpoint("x".into()))),
                "CreatePodSandboxError",
            ),
            (SyncError::Volumes("x".into()), "ContainerCreating"),
            (SyncError::NetworkNotReady("x".into()), "NetworkNotReady"),
        ];
        for (e, want) in cases {
            assert_eq!(e.reason(), want, "{e}");
        }
        let e = SyncError::ImageNeverPull {
            container: c(),
            image: "busybox".into(),
            volume: None,
        };
        assert_eq!(e.container(), Some("app"));
        assert_eq!(
            e.to_string(),
            "container image \"busybox\" is not present with pull policy of Never"
        );
        // An image volume's failure, named, as the waiting reason of each container mounting it.
        let f = ImageFailure {
            error: SyncError::ImagePullBackOff {
                container: String::new(),
                image: "registry.local/model:1".into(),
                volume: Some("model".into()),
            },
            retry_after: Duration::from_secs(10),
        };
        let e = f.for_container("app");
        assert_eq!(
            (e.reason(), e.container()),
            ("ImagePullBackOff", Some("app"))
        );
        assert_eq!(
            e.to_string(),
            "image volume \"model\": back-off pulling image \"registry.local/model:1\""
        );
        let f = ImageFailure {
            error: SyncError::ImagePull {
                container: String::new(),
                message: "image volume \"model\": failed to pull image \"x\": denied".into(),
            },
            retry_after: Duration::from_secs(10),
        };
        let e = f.for_container("side");
        assert_eq!((e.reason(), e.container()), ("ErrImagePull", Some("side")));
        assert_eq!(
            e.to_string(),
            "image volume \"model\": failed to pull image \"x\": denied"
        );
        assert_eq!(SyncError::Volumes("x".into()).container(), None);
        let token = "volume \"kube-api-access\": no token for service account ns/default yet";
        assert!(SyncError::Volumes(token.into()).is_waiting());
        assert!(!SyncError::Volumes("volume \"v\": hostPath /x: not found".into()).is_waiting());
        assert_eq!(SyncError::NetworkNotReady("x".into()).container(), None);
    }
}
