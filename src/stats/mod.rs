//! Resource accounting read straight from cgroupfs: the readers for v2 and v1 (`cgroup`).
//! Where a process's cgroup is found from `/proc/<pid>/cgroup`, its files are read directly,
//! with no runtime call on the path.

pub mod cgroup;

use std::collections::HashMap;
use std::path::Path;

use crate::cm::detect::Cgroups;
use crate::cri::{Cri, CriError, v1};
use cgroup::Location;

/// A running container's init pid from containerd's verbose ContainerStatus: `info["info"]`
/// is JSON carrying `"pid"` (0 once the task has exited).
pub fn pid_from_info(info: &HashMap<String, String>) -> Option<u32> {
    let v: serde_json::Value = serde_json::from_str(info.get("info")?).ok()?;
    let pid = u32::try_from(v.get("pid")?.as_u64()?).ok()?;
    (pid > 0).then_some(pid)
}

/// Where a running container's accounting lives: its init pid from the runtime (one verbose
/// ContainerStatus, worth caching per container), then its `/proc/<pid>/cgroup`. `None` for a
/// container not running.
pub async fn locate_container(
    cri: &Cri,
    cg: &Cgroups,
    root: &Path,
    container_id: &str,
) -> Result<Option<Location>, CriError> {
    let st = cri
        .container_status(v1::ContainerStatusRequest {
            container_id: container_id.to_owned(),
            verbose: true,
        })
        .await?;
    let Some(pid) = pid_from_info(&st.info) else {
        return Ok(None);
    };
    let Ok(proc) = std::fs::read_to_string(root.join(format!("proc/{pid}/cgroup"))) else {
        return Ok(None);
    };
    Ok(cgroup::locate(cg, root, &proc))
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
