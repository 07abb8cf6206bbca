//! Resource accounting read straight from cgroupfs: the readers for v2 and v1 (`cgroup`).
//! Where a process's cgroup is found from `/proc/<pid>/cgroup`, its files are read directly,
//! with no runtime call on the path.

pub mod cgroup;
