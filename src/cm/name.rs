//! cgroup names as the kubelet forms them, independent of the driver: a list of components
//! (`["kubepods", "burstable", "pod<uid>"]`), written as a cgroupfs path
//! (`/kubepods/burstable/pod<uid>`) or as systemd slices
//! (`/kubepods.slice/kubepods-burstable.slice/kubepods-burstable-pod<uid>.slice`, with each `-`
//! inside a component written `_`, since systemd reads `-` as the slice separator).

use std::fmt;

#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum Driver {
    #[default]
    Cgroupfs,
    Systemd,
}

impl Driver {
    pub fn parse(s: &str) -> Result<Driver, String> {
        match s {
            "cgroupfs" => Ok(Driver::Cgroupfs),
            "systemd" => Ok(Driver::Systemd),
            _ => Err("expected cgroupfs or systemd".into()),
        }
    }

    pub fn as_str(self) -> &'static str {
        match self {
            Driver::Cgroupfs => "cgroupfs",
            Driver::Systemd => "systemd",
        }
    }
}

impl fmt::Display for Driver {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// A driver-neutral cgroup name; the empty name is the root.
#[derive(Debug, Clone, PartialEq, Eq, Default, PartialOrd, Ord)]
pub struct CgroupName(pub Vec<String>);

const SLICE: &str = ".slice";

impl CgroupName {
    /// `--cgroup-root` as given (a cgroupfs path, as upstream reads it for both drivers; a
    /// component ending in `.slice` under systemd names the slice itself: `/edge.slice` is
    /// `["edge"]`, `/a.slice/a-b.slice` is `["a", "b"]`).
    pub fn parse_root(path: &str, driver: Driver) -> CgroupName {
        let mut out: Vec<String> = Vec::new();
        for part in path.split('/').filter(|p| !p.is_empty()) {
            match (driver, part.strip_suffix(SLICE)) {
                (Driver::Systemd, Some(slice)) => {
                    // `a-b.slice` under `a.slice`: its own component is the last after '-'.
                    let own = slice.rsplit('-').next().unwrap_or(slice);
                    if own != "-" && !own.is_empty() {
                        out.push(own.to_owned());
                    }
                }
                _ => out.push(part.to_owned()),
            }
        }
        CgroupName(out)
    }

    pub fn child(&self, component: &str) -> CgroupName {
        let mut v = self.0.clone();
        v.push(component.to_owned());
        CgroupName(v)
    }

    pub fn is_root(&self) -> bool {
        self.0.is_empty()
    }

    pub fn last(&self) -> Option<&str> {
        self.0.last().map(String::as_str)
    }

    /// The path relative to a hierarchy's mount point, as the driver names it (`/` for the
    /// root). This is also what the runtime gets as `cgroup_parent`.
    pub fn path(&self, driver: Driver) -> String {
        if self.is_root() {
            return "/".into();
        }
        match driver {
            Driver::Cgroupfs => format!("/{}", self.0.join("/")),
            Driver::Systemd => {
                // Each level is a slice named after all components down to it.
                let escaped: Vec<String> = self.0.iter().map(|c| c.replace('-', "_")).collect();
                let mut path = String::new();
                for i in 1..=escaped.len() {
                    path.push('/');
                    path.push_str(&escaped[..i].join("-"));
                    path.push_str(SLICE);
                }
                path
            }
        }
    }

    /// The component a directory's name stands for under `driver` (the inverse of the last
    /// step of [`path`](Self::path)): `pod1234` (cgroupfs) or, for
    /// `kubepods-besteffort-pod12_34.slice`, `pod12-34`.
    pub fn component_of(dir_name: &str, driver: Driver) -> Option<String> {
        match driver {
            Driver::Cgroupfs => Some(dir_name.to_owned()),
            Driver::Systemd => {
                let slice = dir_name.strip_suffix(SLICE)?;
                Some(slice.rsplit('-').next()?.replace('_', "-"))
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn n(parts: &[&str]) -> CgroupName {
        CgroupName(parts.iter().map(|s| (*s).to_owned()).collect())
    }

    #[test]
    fn cgroupfs_paths() {
        assert_eq!(n(&[]).path(Driver::Cgroupfs), "/");
        assert_eq!(n(&["kubepods"]).path(Driver::Cgroupfs), "/kubepods");
        assert_eq!(
            n(&["kubepods", "burstable", "pod1-2"]).path(Driver::Cgroupfs),
            "/kubepods/burstable/pod1-2"
        );
    }

    #[test]
    fn systemd_paths_expand_slices_and_escape_dashes() {
        assert_eq!(n(&[]).path(Driver::Systemd), "/");
        assert_eq!(n(&["kubepods"]).path(Driver::Systemd), "/kubepods.slice");
        let uid = "0f2d6a1e-9b7c-4c55-8e3f-3a8d1c2b4e5f";
        assert_eq!(
            n(&["kubepods", "burstable", &format!("pod{uid}")]).path(Driver::Systemd),
            "/kubepods.slice/kubepods-burstable.slice/\
             kubepods-burstable-pod0f2d6a1e_9b7c_4c55_8e3f_3a8d1c2b4e5f.slice"
        );
        // A Guaranteed pod sits directly under kubepods.
        assert_eq!(
            n(&["kubepods", "podab-cd"]).path(Driver::Systemd),
            "/kubepods.slice/kubepods-podab_cd.slice"
        );
    }

    #[test]
    fn roots() {
        assert_eq!(CgroupName::parse_root("/", Driver::Cgroupfs), n(&[]));
        assert_eq!(
            CgroupName::parse_root("/picolet-e2e-1/", Driver::Cgroupfs),
            n(&["picolet-e2e-1"])
        );
        assert_eq!(
            CgroupName::parse_root("/edge.slice", Driver::Systemd),
            n(&["edge"])
        );
        assert_eq!(
            CgroupName::parse_root("/a.slice/a-b.slice", Driver::Systemd),
            n(&["a", "b"])
        );
        let kp = CgroupName::parse_root("/edge.slice", Driver::Systemd).child("kubepods");
        assert_eq!(kp.path(Driver::Systemd), "/edge.slice/edge-kubepods.slice");
    }

    #[test]
    fn components_from_directory_names() {
        assert_eq!(
            CgroupName::component_of("kubepods-besteffort-pod12_34.slice", Driver::Systemd),
            Some("pod12-34".into())
        );
        assert_eq!(
            CgroupName::component_of("kubepods-besteffort.slice", Driver::Systemd),
            Some("besteffort".into())
        );
        assert_eq!(
            CgroupName::component_of("cri-containerd-abc.scope", Driver::Systemd),
            None
        );
        assert_eq!(
            CgroupName::component_of("pod12-34", Driver::Cgroupfs),
            Some("pod12-34".into())
        );
        assert_eq!(Driver::parse("systemd"), Ok(Driver::Systemd));
        assert!(Driver::parse("cgroupsfs").is_err());
    }
}
