//! The cgroup hierarchies picolet writes, under a root path (`/` on a host, a fixture tree in
//! tests), and the few filesystem operations cgroupfs offers: make a directory, write a control
//! file that exists, remove an empty directory.

use std::io::{self, Write};
use std::path::{Path, PathBuf};

use super::detect::{self, Cgroups, DetectError, Mode};
use super::resources::{self, ResourceConfig};

/// The controllers picolet enables and writes.
pub const CONTROLLERS: &[&str] = &["cpu", "memory", "pids"];

#[derive(Debug, thiserror::Error)]
pub enum CgroupError {
    #[error(transparent)]
    Detect(#[from] DetectError),
    #[error("creating {path}: {source}")]
    Create {
        path: PathBuf,
        #[source]
        source: io::Error,
    },
    #[error("writing {value:?} to {path}: {source}")]
    Write {
        path: PathBuf,
        value: String,
        #[source]
        source: io::Error,
    },
    #[error("removing {path}: {source}")]
    Remove {
        path: PathBuf,
        #[source]
        source: io::Error,
    },
    #[error("reading {path}: {source}")]
    Read {
        path: PathBuf,
        #[source]
        source: io::Error,
    },
}

/// The mounted hierarchies, with absolute paths (the root prefix applied).
#[derive(Debug, Clone)]
pub struct Hierarchy {
    pub mode: Mode,
    /// v2 only: the unified mount, which carries the controllers.
    v2: Option<PathBuf>,
    /// v1: each controller picolet writes, with its hierarchy's mount.
    v1: Vec<(String, PathBuf)>,
    /// Every cgroup mount (v1 controllers, named hierarchies, the unified one): the runtime
    /// creates a container's cgroup in each, so removal looks in each.
    all: Vec<PathBuf>,
    /// Tests: the tree is plain files, and mkdir/rmdir/write act as the kernel would on it.
    #[cfg(test)]
    pub(super) emulated: bool,
}

impl Hierarchy {
    /// The host's hierarchies, read as `detect` reads them, under `root`.
    pub fn detect(root: &Path) -> Result<Hierarchy, CgroupError> {
        let cg = detect::detect(root)?;
        let mounts = detect::mount_points(root)?;
        Ok(Hierarchy::from_parts(root, &cg, &mounts))
    }

    pub fn from_parts(root: &Path, cg: &Cgroups, mounts: &[PathBuf]) -> Hierarchy {
        let under = |p: &Path| root.join(p.strip_prefix("/").unwrap_or(p));
        let v2 = (cg.mode == Mode::Unified)
            .then(|| cg.unified.as_deref().map(under))
            .flatten();
        let v1 = if cg.mode == Mode::Unified {
            Vec::new()
        } else {
            cg.controllers
                .iter()
                .filter(|(c, _)| CONTROLLERS.contains(&c.as_str()))
                .map(|(c, p)| (c.clone(), under(p)))
                .collect()
        };
        Hierarchy {
            mode: cg.mode,
            v2,
            v1,
            all: mounts.iter().map(|p| under(p)).collect(),
            #[cfg(test)]
            emulated: false,
        }
    }

    /// Whether the controller is there to be written (missing ones are left alone: preflight
    /// names them).
    pub fn has(&self, controller: &str) -> bool {
        self.v2.is_some() && self.v2_controllers().iter().any(|c| c == controller)
            || self.v1.iter().any(|(c, _)| c == controller)
    }

    fn v2_controllers(&self) -> Vec<String> {
        self.v2
            .as_ref()
            .and_then(|m| std::fs::read_to_string(m.join("cgroup.controllers")).ok())
            .map(|s| s.split_whitespace().map(str::to_owned).collect())
            .unwrap_or_default()
    }

    /// The directories of the cgroup at `rel` (a driver path such as `/kubepods/burstable`) in
    /// the hierarchies picolet writes.
    pub fn dirs(&self, rel: &str) -> Vec<PathBuf> {
        let rel = rel.trim_start_matches('/');
        match &self.v2 {
            Some(m) => vec![m.join(rel)],
            None => self.v1.iter().map(|(_, m)| m.join(rel)).collect(),
        }
    }

    /// Creates the cgroup at `rel` (and its parents) in every hierarchy picolet writes; on v2
    /// enables cpu, memory and pids for the children of each level on the way.
    pub fn create(&self, rel: &str) -> Result<(), CgroupError> {
        if let Some(m) = &self.v2 {
            let wanted: Vec<String> = self
                .v2_controllers()
                .into_iter()
                .filter(|c| CONTROLLERS.contains(&c.as_str()))
                .collect();
            let mut dir = m.clone();
            for part in rel.split('/').filter(|p| !p.is_empty()) {
                self.enable_subtree(&dir, &wanted)?;
                dir.push(part);
                self.mkdir(&dir)?;
            }
            // The runtime's container cgroups under this one need the controllers too.
            self.enable_subtree(&dir, &wanted)?;
            return Ok(());
        }
        for d in self.dirs(rel) {
            self.mkdir_all(&d)?;
        }
        Ok(())
    }

    /// Writes the limits to the cgroup at `rel`.
    pub fn apply(&self, rel: &str, r: &ResourceConfig) -> Result<(), CgroupError> {
        if let Some(m) = &self.v2 {
            let dir = m.join(rel.trim_start_matches('/'));
            for (file, value) in resources::v2_files(r) {
                let controller = file.split('.').next().unwrap_or(file);
                if self.has(controller) {
                    self.write(&dir.join(file), &value)?;
                }
            }
            return Ok(());
        }
        for (controller, (file, value)) in resources::v1_files(r) {
            if let Some((_, m)) = self.v1.iter().find(|(c, _)| c == controller) {
                self.write(&m.join(rel.trim_start_matches('/')).join(file), &value)?;
            }
        }
        Ok(())
    }

    /// Removes the cgroup at `rel` from every hierarchy, its empty descendants first (the
    /// runtime leaves the directories it made on the way in hierarchies it does not clean).
    /// A cgroup still holding processes stays (`EBUSY`), and that is the error returned.
    pub fn remove(&self, rel: &str) -> Result<(), CgroupError> {
        let rel = rel.trim_start_matches('/');
        if rel.is_empty() {
            return Ok(());
        }
        let mut first_err = None;
        for m in &self.all {
            if let Err(e) = self.rmdir_tree(&m.join(rel))
                && first_err.is_none()
            {
                first_err = Some(e);
            }
        }
        first_err.map_or(Ok(()), Err)
    }

    /// The names of the child cgroups of `rel` (in the first hierarchy picolet writes).
    pub fn children(&self, rel: &str) -> Result<Vec<String>, CgroupError> {
        let Some(dir) = self.dirs(rel).into_iter().next() else {
            return Ok(Vec::new());
        };
        let entries = match std::fs::read_dir(&dir) {
            Ok(e) => e,
            Err(e) if e.kind() == io::ErrorKind::NotFound => return Ok(Vec::new()),
            Err(source) => return Err(CgroupError::Read { path: dir, source }),
        };
        Ok(entries
            .filter_map(Result::ok)
            .filter(|e| e.file_type().is_ok_and(|t| t.is_dir()))
            .filter_map(|e| e.file_name().into_string().ok())
            .collect())
    }

    /// Whether the kernel offers `file` in the cgroup at `rel` (v2 only: `memory.oom.group`
    /// exists from Linux 4.19 in every non-root cgroup with the memory controller).
    pub fn v2_file_exists(&self, rel: &str, file: &str) -> bool {
        self.v2
            .as_ref()
            .is_some_and(|m| m.join(rel.trim_start_matches('/')).join(file).exists())
    }
}

impl Hierarchy {
    fn mkdir(&self, dir: &Path) -> Result<(), CgroupError> {
        #[cfg(test)]
        if self.emulated {
            return super::fixture::mkdir(self, dir);
        }
        match std::fs::create_dir(dir) {
            Err(e) if e.kind() != io::ErrorKind::AlreadyExists => Err(CgroupError::Create {
                path: dir.to_owned(),
                source: e,
            }),
            _ => Ok(()),
        }
    }

    fn mkdir_all(&self, dir: &Path) -> Result<(), CgroupError> {
        if let Some(parent) = dir.parent()
            && !parent.exists()
        {
            self.mkdir_all(parent)?;
        }
        self.mkdir(dir)
    }

    /// Writes a control file that must exist (cgroupfs refuses to create files).
    pub fn write(&self, path: &Path, value: &str) -> Result<(), CgroupError> {
        #[cfg(test)]
        if self.emulated {
            return super::fixture::write(path, value);
        }
        let err = |source| CgroupError::Write {
            path: path.to_owned(),
            value: value.to_owned(),
            source,
        };
        let mut f = std::fs::OpenOptions::new()
            .write(true)
            .truncate(true)
            .open(path)
            .map_err(err)?;
        f.write_all(value.as_bytes()).map_err(err)
    }

    /// `+cpu +memory +pids` in `dir/cgroup.subtree_control`, for those not enabled yet.
    fn enable_subtree(&self, dir: &Path, wanted: &[String]) -> Result<(), CgroupError> {
        let path = dir.join("cgroup.subtree_control");
        let on = std::fs::read_to_string(&path).map_err(|source| CgroupError::Read {
            path: path.clone(),
            source,
        })?;
        let missing: Vec<String> = wanted
            .iter()
            .filter(|c| !on.split_whitespace().any(|o| o == c.as_str()))
            .map(|c| format!("+{c}"))
            .collect();
        if missing.is_empty() {
            return Ok(());
        }
        self.write(&path, &missing.join(" "))
    }

    /// rmdir of `dir` after its subdirectories, deepest first. Missing is done.
    fn rmdir_tree(&self, dir: &Path) -> Result<(), CgroupError> {
        let entries = match std::fs::read_dir(dir) {
            Ok(e) => e,
            Err(e) if e.kind() == io::ErrorKind::NotFound => return Ok(()),
            Err(source) => {
                return Err(CgroupError::Read {
                    path: dir.to_owned(),
                    source,
                });
            }
        };
        for e in entries.filter_map(Result::ok) {
            if e.file_type().is_ok_and(|t| t.is_dir()) {
                self.rmdir_tree(&e.path())?;
            }
        }
        #[cfg(test)]
        let removed = if self.emulated {
            super::fixture::rmdir(dir)
        } else {
            std::fs::remove_dir(dir)
        };
        #[cfg(not(test))]
        let removed = std::fs::remove_dir(dir);
        match removed {
            Err(e) if e.kind() != io::ErrorKind::NotFound => Err(CgroupError::Remove {
                path: dir.to_owned(),
                source: e,
            }),
            _ => Ok(()),
        }
    }
}
