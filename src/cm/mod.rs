//! Container manager: the host's cgroups. `detect` (the mode and the controllers), `name`
//! (cgroup names for the cgroupfs and systemd drivers), `fs` (the mounted hierarchies under a
//! root path, and cgroupfs's mkdir, write and rmdir), `resources` (a pod's limits and the
//! files that carry them on v2 and v1), `pods` (the kubepods tree: QoS and pod cgroups),
//! `config` (the flags, node allocatable), `runtime` (the runtime's cgroup driver against
//! picolet's).

pub mod config;
pub mod detect;
#[cfg(test)]
pub(crate) mod fixture;
pub mod fs;
pub mod name;
pub mod pods;
pub mod resources;
pub mod runtime;

pub use config::{Allocatable, CgroupConfig, Reserved};
pub use fs::{CgroupError, Hierarchy};
pub use name::{CgroupName, Driver};
pub use pods::PodCgroups;
