//! Resource accounting read straight from cgroupfs: the readers for v2 and v1 (`cgroup`).
//! Where a process's cgroup is found from `/proc/<pid>/cgroup`, its files are read directly,
//! with no runtime call on the path.

pub mod cgroup;

use std::path::Path;

use crate::cm::detect::Cgroups;
use cgroup::Location;

/// Where the accounting of a container whose init process is `pid` lives (the pid from
/// `kuberuntime::container_init_pid`, worth caching per container): its `/proc/<pid>/cgroup`
/// resolved against the hierarchies. `None` once the process is gone.
pub fn locate_pid(cg: &Cgroups, root: &Path, pid: u32) -> Option<Location> {
    let proc = std::fs::read_to_string(root.join(format!("proc/{pid}/cgroup"))).ok()?;
    cgroup::locate(cg, root, &proc)
}
