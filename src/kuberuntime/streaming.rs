//! The streaming calls behind `kubectl exec`, `attach` and `port-forward`: the runtime hands
//! out a one-time URL on its own streaming server, which the node API proxies the client to.

use super::RuntimeManager;
use crate::cri::{CriError, v1};

/// Which of a process's streams a client wants.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Streams {
    pub stdin: bool,
    pub stdout: bool,
    pub stderr: bool,
    pub tty: bool,
}

impl RuntimeManager {
    /// A URL running `cmd` in the container.
    pub async fn exec_url(
        &self,
        container_id: &str,
        cmd: Vec<String>,
        s: Streams,
    ) -> Result<String, CriError> {
        let req = v1::ExecRequest {
            container_id: container_id.to_owned(),
            cmd,
            tty: s.tty,
            stdin: s.stdin,
            stdout: s.stdout,
            // With a tty the runtime merges stderr into stdout; asking for both is refused.
            stderr: s.stderr && !s.tty,
        };
        Ok(self.runtime.exec(req).await?.url)
    }

    /// A URL attached to the container's process.
    pub async fn attach_url(&self, container_id: &str, s: Streams) -> Result<String, CriError> {
        let req = v1::AttachRequest {
            container_id: container_id.to_owned(),
            stdin: s.stdin,
            tty: s.tty,
            stdout: s.stdout,
            stderr: s.stderr && !s.tty,
        };
        Ok(self.runtime.attach(req).await?.url)
    }

    /// A URL forwarding ports of the sandbox (the ports are named by the client later, per
    /// stream, when `ports` is empty).
    pub async fn port_forward_url(
        &self,
        sandbox_id: &str,
        ports: Vec<i32>,
    ) -> Result<String, CriError> {
        let req = v1::PortForwardRequest {
            pod_sandbox_id: sandbox_id.to_owned(),
            port: ports,
        };
        Ok(self.runtime.port_forward(req).await?.url)
    }
}
