//! Running a command in a container (CRI ExecSync) for probes and lifecycle hooks, with the
//! result in runtime-neutral terms.

use std::time::Duration;

use super::manager::RuntimeManager;

/// What a command run in a container produced.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ExecOutput {
    pub exit_code: i32,
    /// stdout then stderr, as the kubelet's prober combines them.
    pub output: Vec<u8>,
}

/// Why a command could not be run to its end.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ExecError {
    /// It ran past its timeout.
    #[error("command timed out")]
    Timeout,
    /// The runtime could not run it (no such container, no such executable, runtime down).
    #[error("{0}")]
    Runtime(String),
}

impl RuntimeManager {
    /// Runs `cmd` in the container and waits for it, at most `timeout` (zero: no timeout of
    /// its own, only the runtime request deadline).
    pub async fn exec_sync(
        &self,
        container_id: &str,
        cmd: &[String],
        timeout: Duration,
    ) -> Result<ExecOutput, ExecError> {
        match self
            .runtime
            .exec_sync(container_id, cmd.to_vec(), timeout)
            .await
        {
            Ok(r) => {
                let mut output = r.stdout;
                output.extend_from_slice(&r.stderr);
                Ok(ExecOutput {
                    exit_code: r.exit_code,
                    output,
                })
            }
            Err(e) if !timeout.is_zero() && e.is_deadline_exceeded() => Err(ExecError::Timeout),
            Err(e) => Err(ExecError::Runtime(e.to_string())),
        }
    }
}
