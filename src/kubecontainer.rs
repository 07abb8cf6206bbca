//! What the runtime says about a pod, in runtime-neutral terms: the input of action
//! computation, of the status generator and of the PLEG cache.
//!
//! Kept compact on purpose (the PLEG cache holds one of these per pod): strings are boxed,
//! times are unix nanoseconds.

/// A sandbox's state as the runtime reports it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum SandboxState {
    Ready,
    NotReady,
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SandboxStatus {
    pub id: Box<str>,
    pub attempt: u32,
    pub state: SandboxState,
    pub created_at: i64,
    /// The pod IP; `None` for host-network pods and sandboxes without networking.
    pub ip: Option<Box<str>>,
    /// True when the sandbox shares the node's network namespace.
    pub host_network: bool,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ContainerState {
    Created,
    Running,
    Exited,
    Unknown,
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ContainerStatus {
    pub id: Box<str>,
    /// The sandbox the container belongs to.
    pub sandbox_id: Box<str>,
    pub name: Box<str>,
    pub state: ContainerState,
    pub created_at: i64,
    pub started_at: i64,
    pub finished_at: i64,
    pub exit_code: i32,
    /// The image as the pod spec named it.
    pub image: Box<str>,
    /// The image ID the runtime resolved it to.
    pub image_ref: Box<str>,
    pub reason: Box<str>,
    pub message: Box<str>,
    /// Container spec hash picolet recorded when it created the container.
    pub hash: u64,
    pub restart_count: u32,
}

/// Everything the runtime holds for one pod UID.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct PodRuntimeStatus {
    pub uid: Box<str>,
    pub name: Box<str>,
    pub namespace: Box<str>,
    /// Newest first.
    pub sandboxes: Vec<SandboxStatus>,
    /// Newest first within each name.
    pub containers: Vec<ContainerStatus>,
}

impl PodRuntimeStatus {
    /// The newest status of the container with this name.
    pub fn latest(&self, name: &str) -> Option<&ContainerStatus> {
        self.containers
            .iter()
            .filter(|c| &*c.name == name)
            .max_by_key(|c| c.created_at)
    }

    pub fn running(&self) -> impl Iterator<Item = &ContainerStatus> {
        self.containers
            .iter()
            .filter(|c| c.state == ContainerState::Running)
    }

    pub fn ip(&self) -> Option<&str> {
        self.sandboxes.first().and_then(|s| s.ip.as_deref())
    }
}
