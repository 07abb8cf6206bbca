//! Container manager: what the host's cgroups offer. Today: detection of the cgroup mode and
//! the controllers picolet needs, read from `/proc/self/mountinfo`, `cgroup.controllers` and
//! `/proc/cgroups` under a root that tests point at fixture trees.

pub mod detect;
