//! Pod volumes on the node: emptyDir directories (tmpfs for `medium: Memory`) under
//! `<root-dir>/pods/<uid>/volumes/`, hostPath type checks, and the configMap, secret, projected
//! and downwardAPI volumes written by `atomic_writer` (secrets, tokens and pod metadata on
//! tmpfs), as the kubelet lays them out.

use std::collections::HashMap;
use std::fs;
use std::io;
use std::os::unix::fs::{DirBuilderExt, FileTypeExt, PermissionsExt};
use std::path::{Path, PathBuf};

use crate::api::Pod;
use crate::atomic_writer;
use crate::objects::{ApiVolume, Store};
use crate::projection::{self, NodeAllocatable};

#[derive(Debug, thiserror::Error)]
pub enum VolumeError {
    #[error("volume {volume:?}: {path}: {source}")]
    Io {
        volume: String,
        path: PathBuf,
        #[source]
        source: io::Error,
    },
    #[error("volume {volume:?}: hostPath {path} is not a {want}")]
    HostPathType {
        volume: String,
        path: PathBuf,
        want: String,
    },
    #[error("volume {volume:?}: mounting tmpfs at {path}: {errno}")]
    Mount {
        volume: String,
        path: PathBuf,
        errno: nix::errno::Errno,
    },
    #[error(
        "volume {volume:?}: {kind} volumes are not supported (only hostPath, emptyDir, image, configMap, secret, projected and downwardAPI)"
    )]
    Unsupported { volume: String, kind: String },
    /// Its content is not available (an object or token not read yet, a key missing).
    #[error("volume {volume:?}: {message}")]
    Content { volume: String, message: String },
}

pub fn pod_dir(root: &Path, uid: &str) -> PathBuf {
    crate::root_dir::RootDir(root).pod(uid)
}

pub fn empty_dir_path(root: &Path, uid: &str, name: &str) -> PathBuf {
    pod_dir(root, uid)
        .join("volumes/kubernetes.io~empty-dir")
        .join(name)
}

fn io_err(volume: &str, path: &Path) -> impl FnOnce(io::Error) -> VolumeError {
    let (volume, path) = (volume.to_owned(), path.to_owned());
    move |source| VolumeError::Io {
        volume,
        path,
        source,
    }
}

fn mkdir_all(volume: &str, path: &Path, mode: u32) -> Result<(), VolumeError> {
    fs::DirBuilder::new()
        .recursive(true)
        .mode(mode)
        .create(path)
        .map_err(io_err(volume, path))
}

fn is_mountpoint(path: &Path) -> bool {
    mounts_under(path).iter().any(|m| m == path)
}

/// Mount points at or below `dir`, deepest first, from /proc/self/mountinfo.
pub fn mounts_under(dir: &Path) -> Vec<PathBuf> {
    let Ok(info) = fs::read_to_string("/proc/self/mountinfo") else {
        return Vec::new();
    };
    let mut v: Vec<PathBuf> = info
        .lines()
        .filter_map(|l| l.split(' ').nth(4))
        .map(|p| PathBuf::from(p.replace("\\040", " ")))
        .filter(|p| p.starts_with(dir))
        .collect();
    v.sort_by_key(|p| std::cmp::Reverse(p.components().count()));
    v
}

fn check_host_path(volume: &str, path: &Path, kind: &str) -> Result<(), VolumeError> {
    let wrong = |want: &str| VolumeError::HostPathType {
        volume: volume.to_owned(),
        path: path.to_owned(),
        want: want.to_owned(),
    };
    match kind {
        "" => Ok(()),
        "DirectoryOrCreate" => {
            if path.is_dir() {
                return Ok(());
            }
            mkdir_all(volume, path, 0o755)
        }
        "FileOrCreate" => {
            if path.exists() {
                return if path.is_file() {
                    Ok(())
                } else {
                    Err(wrong("file"))
                };
            }
            fs::OpenOptions::new()
                .create(true)
                .append(true)
                .open(path)
                .map(drop)
                .map_err(io_err(volume, path))?;
            fs::set_permissions(path, fs::Permissions::from_mode(0o644))
                .map_err(io_err(volume, path))
        }
        _ => {
            let md = fs::metadata(path).map_err(io_err(volume, path))?;
            let ft = md.file_type();
            let (ok, want) = match kind {
                "Directory" => (ft.is_dir(), "directory"),
                "File" => (ft.is_file(), "file"),
                "Socket" => (ft.is_socket(), "socket"),
                "CharDevice" => (ft.is_char_device(), "character device"),
                "BlockDevice" => (ft.is_block_device(), "block device"),
                _ => (false, "known hostPath type"),
            };
            if ok { Ok(()) } else { Err(wrong(want)) }
        }
    }
}

fn mount_tmpfs(volume: &str, path: &Path, data: &str) -> Result<(), VolumeError> {
    nix::mount::mount(
        Some("tmpfs"),
        path,
        Some("tmpfs"),
        nix::mount::MsFlags::MS_NOSUID | nix::mount::MsFlags::MS_NODEV,
        Some(data),
    )
    .map_err(|errno| VolumeError::Mount {
        volume: volume.to_owned(),
        path: path.to_owned(),
        errno,
    })
}

/// Writes a configMap, secret, projected or downwardAPI volume from what the node holds; the
/// files change only when their content did, and then all at once.
fn prepare_api_volume(
    root: &Path,
    pod: &Pod,
    v: &crate::api::Volume,
    av: &ApiVolume,
    objects: &Store,
    node: NodeAllocatable,
) -> Result<PathBuf, VolumeError> {
    let content = |message: String| VolumeError::Content {
        volume: v.name.clone(),
        message,
    };
    let payload = projection::payload(pod, &v.name, av, &objects.lock(), node).map_err(content)?;
    let path = pod_dir(root, &pod.metadata.uid)
        .join("volumes")
        .join(av.plugin_dir())
        .join(&v.name);
    if !path.is_dir() {
        mkdir_all(&v.name, &path, 0o755)?;
    }
    if av.on_tmpfs() && !is_mountpoint(&path) {
        mount_tmpfs(&v.name, &path, "mode=0755")?;
    }
    atomic_writer::write(&path, &payload, crate::rt::now_nanos())
        .map_err(io_err(&v.name, &path))?;
    Ok(path)
}

fn fs_group(pod: &Pod) -> Option<u32> {
    let g = pod.spec.security_context.as_ref()?.fs_group?;
    u32::try_from(g).ok()
}

/// Gives a volume to the pod's fsGroup as upstream's SetVolumeOwnership does: every file and
/// directory in the group, readable and writable by it, directories setgid (so what containers
/// create there is the group's too). Symbolic links are given the group but keep their mode.
/// The walk is skipped when the root is already right, whatever `fsGroupChangePolicy` says:
/// `OnRootMismatch` asks exactly that, and `Always` (upstream: at each mount, which for an
/// emptyDir is once per pod) comes to the same, since picolet prepares volumes at every sync and
/// a root it set right is one whose tree it walked then (a mode a container changes below it
/// later stays as the container left it, as upstream until the next mount).
fn set_ownership(root: &Path, gid: u32) -> io::Result<()> {
    use std::os::unix::fs::MetadataExt;
    const DIR_BITS: u32 = 0o2000 | 0o660 | 0o110;
    let md = fs::symlink_metadata(root)?;
    if md.gid() == gid && md.mode() & DIR_BITS == DIR_BITS {
        return Ok(());
    }
    let mut stack = vec![root.to_path_buf()];
    while let Some(p) = stack.pop() {
        let md = fs::symlink_metadata(&p)?;
        std::os::unix::fs::lchown(&p, None, Some(gid))?;
        if md.file_type().is_symlink() {
            continue;
        }
        let mut mode = md.mode() & 0o7777 | 0o660;
        if md.is_dir() {
            mode |= 0o2000 | 0o110;
            for e in fs::read_dir(&p)? {
                stack.push(e?.path());
            }
        }
        if mode != md.mode() & 0o7777 {
            fs::set_permissions(&p, fs::Permissions::from_mode(mode))?;
        }
    }
    Ok(())
}

/// Makes every volume of the pod ready and returns volume name → host path.
pub fn prepare(
    root: &Path,
    pod: &Pod,
    objects: &Store,
    node: NodeAllocatable,
) -> Result<HashMap<String, PathBuf>, VolumeError> {
    let uid = &pod.metadata.uid;
    let mut out = HashMap::new();
    for v in &pod.spec.volumes {
        if let Some(av) = crate::objects::api_volume(v) {
            let av = av.map_err(|message| VolumeError::Content {
                volume: v.name.clone(),
                message,
            })?;
            let path = prepare_api_volume(root, pod, v, &av, objects, node)?;
            out.insert(v.name.clone(), path);
        } else if let Some(hp) = &v.host_path {
            let path = PathBuf::from(&hp.path);
            check_host_path(&v.name, &path, hp.type_.as_deref().unwrap_or(""))?;
            out.insert(v.name.clone(), path);
        } else if let Some(ed) = &v.empty_dir {
            let path = empty_dir_path(root, uid, &v.name);
            // Every sync prepares volumes: only a missing directory costs more than one stat.
            if !path.is_dir() {
                mkdir_all(&v.name, &path, 0o750)?;
                // World-writable, as upstream makes it, so non-root containers can use it.
                fs::set_permissions(&path, fs::Permissions::from_mode(0o777))
                    .map_err(io_err(&v.name, &path))?;
            }
            if ed.medium.as_deref() == Some("Memory") && !is_mountpoint(&path) {
                let size = ed.size_limit.as_ref().map(|q| q.value()).filter(|&s| s > 0);
                // tmpfs's own root mode, 1777 (world-writable and sticky), as upstream mounts
                // it with no mode: a subPath made in it takes that mode too.
                let data = size.map(|s| format!("size={s}")).unwrap_or_default();
                mount_tmpfs(&v.name, &path, &data)?;
            }
            if let Some(gid) = fs_group(pod) {
                set_ownership(&path, gid).map_err(io_err(&v.name, &path))?;
            }
            out.insert(v.name.clone(), path);
        } else if v.image.is_some() {
            // The runtime mounts an image volume itself: nothing on the node's disk.
        } else {
            // Never run a container without a volume it asked for. (Static pods are refused at
            // validation already; pods from the apiserver get here.)
            return Err(VolumeError::Unsupported {
                volume: v.name.clone(),
                kind: v
                    .other
                    .keys()
                    .next()
                    .cloned()
                    .unwrap_or_else(|| "source-less".into()),
            });
        }
    }
    Ok(out)
}

/// The host path of a volume mount's `subPath`, created as a directory when missing (as
/// upstream does). Refused when it resolves outside the volume: a container could otherwise plant
/// a symlink in its volume and have a host path of its choosing mounted at its next start.
///
/// The part that exists is checked before anything is created, and the whole path again after,
/// and the caller mounts the resolved path. A container swapping in a symlink between this check
/// and the runtime's bind mount is not prevented (upstream closes that window with bind mounts
/// through file descriptors).
pub fn resolve_subpath(volume: &Path, sub: &str) -> Result<PathBuf, String> {
    let base = fs::canonicalize(volume).map_err(|e| format!("{}: {e}", volume.display()))?;
    let inside = |p: &Path| -> Result<PathBuf, String> {
        let real = fs::canonicalize(p).map_err(|e| format!("{}: {e}", p.display()))?;
        if real.starts_with(&base) {
            Ok(real)
        } else {
            Err(format!(
                "subPath {sub:?} resolves to {}, outside its volume {}",
                real.display(),
                base.display()
            ))
        }
    };
    let path = volume.join(sub);
    let existing = path.ancestors().find(|a| a.exists()).unwrap_or(volume);
    inside(existing)?;
    if !path.exists() {
        // Each directory made takes the volume's mode, its setgid and sticky bits too (an
        // fsGroup volume's group then carries down), whatever the umask: as the kubelet's.
        let mode = fs::metadata(volume)
            .map_err(|e| format!("{}: {e}", volume.display()))?
            .permissions()
            .mode()
            & 0o7777;
        let missing: Vec<&Path> = path.ancestors().take_while(|a| !a.exists()).collect();
        for dir in missing.into_iter().rev() {
            fs::DirBuilder::new()
                .mode(mode)
                .create(dir)
                .and_then(|()| fs::set_permissions(dir, fs::Permissions::from_mode(mode)))
                .map_err(|e| format!("creating subPath {}: {e}", dir.display()))?;
        }
    }
    inside(&path)
}

/// Removes everything picolet keeps on disk for a pod, unmounting tmpfs volumes first.
pub fn cleanup(root: &Path, uid: &str) -> io::Result<()> {
    let dir = pod_dir(root, uid);
    if !dir.exists() {
        return Ok(());
    }
    for m in mounts_under(&dir) {
        nix::mount::umount2(&m, nix::mount::MntFlags::MNT_DETACH).map_err(io::Error::from)?;
    }
    fs::remove_dir_all(&dir)
}

/// Pod directories present under the root dir (for orphan cleanup).
pub fn pod_dirs(root: &Path) -> Vec<String> {
    let Ok(rd) = fs::read_dir(crate::root_dir::RootDir(root).pods()) else {
        return Vec::new();
    };
    rd.filter_map(|e| e.ok()?.file_name().into_string().ok())
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_unsupported_volume_is_refused_by_name() {
        let mut pod = Pod::default();
        pod.metadata.uid = "u".into();
        let v: crate::api::Volume =
            serde_json::from_str(r#"{"name":"data","persistentVolumeClaim":{"claimName":"c"}}"#)
                .unwrap();
        pod.spec.volumes.push(v);
        let e = prepare(Path::new("/nonexistent-root"), &pod, &Store::default(), NA).unwrap_err();
        assert_eq!(
            e.to_string(),
            "volume \"data\": persistentVolumeClaim volumes are not supported (only hostPath, emptyDir, image, configMap, secret, projected and downwardAPI)"
        );
    }
    use crate::api::{EmptyDirVolumeSource, HostPathVolumeSource, Volume};

    const NA: NodeAllocatable = NodeAllocatable {
        milli_cpu: 1000,
        memory: 1 << 30,
    };

    fn tmp(name: &str) -> PathBuf {
        let d = std::env::temp_dir().join(format!("picolet-vol-{name}-{}", std::process::id()));
        let _ = fs::remove_dir_all(&d);
        fs::create_dir_all(&d).unwrap();
        d
    }

    fn pod_with(vols: Vec<Volume>) -> Pod {
        let mut p = Pod::default();
        p.metadata.uid = "u1".into();
        p.spec.volumes = vols;
        p
    }

    #[test]
    fn empty_dir_is_created_world_writable_and_cleaned() {
        let root = tmp("ed");
        let p = pod_with(vec![Volume {
            name: "scratch".into(),
            empty_dir: Some(EmptyDirVolumeSource::default()),
            ..Default::default()
        }]);
        let m = prepare(&root, &p, &Store::default(), NA).unwrap();
        let path = &m["scratch"];
        assert_eq!(
            path,
            &root.join("pods/u1/volumes/kubernetes.io~empty-dir/scratch")
        );
        assert_eq!(
            fs::metadata(path).unwrap().permissions().mode() & 0o777,
            0o777
        );
        assert_eq!(pod_dirs(&root), vec!["u1".to_owned()]);
        cleanup(&root, "u1").unwrap();
        assert!(!pod_dir(&root, "u1").exists());
        fs::remove_dir_all(&root).unwrap();
    }

    #[test]
    fn empty_dir_belongs_to_the_fs_group_with_setgid() {
        use std::os::unix::fs::MetadataExt;
        // Root (as the suite runs) may give any group; anyone else only one of their own.
        let me = fs::metadata("/proc/self").unwrap();
        let gid: u32 = if me.uid() == 0 { 2000 } else { me.gid() };
        let root = tmp("fsgroup");
        let mut p = pod_with(vec![Volume {
            name: "data".into(),
            empty_dir: Some(EmptyDirVolumeSource::default()),
            ..Default::default()
        }]);
        p.spec.security_context = Some(crate::api::PodSecurityContext {
            fs_group: Some(i64::from(gid)),
            ..Default::default()
        });
        let path = prepare(&root, &p, &Store::default(), NA).unwrap()["data"].clone();
        let md = fs::metadata(&path).unwrap();
        assert_eq!(md.gid(), gid);
        assert_eq!(md.mode() & 0o7777, 0o2777, "drwxrwsrwx");
        // A volume left from before (a picolet without fsGroup): its root and what is in it are
        // brought to the group, files group-writable, directories setgid.
        let sub = path.join("sub");
        fs::create_dir(&sub).unwrap();
        fs::set_permissions(&sub, fs::Permissions::from_mode(0o700)).unwrap();
        fs::write(sub.join("f"), "x").unwrap();
        fs::set_permissions(sub.join("f"), fs::Permissions::from_mode(0o600)).unwrap();
        std::os::unix::fs::symlink("/etc/hostname", path.join("link")).unwrap();
        fs::set_permissions(&path, fs::Permissions::from_mode(0o777)).unwrap();
        prepare(&root, &p, &Store::default(), NA).unwrap();
        let (d, f) = (
            fs::metadata(&sub).unwrap(),
            fs::metadata(sub.join("f")).unwrap(),
        );
        assert_eq!((d.gid(), d.mode() & 0o7777), (gid, 0o2770));
        assert_eq!((f.gid(), f.mode() & 0o7777), (gid, 0o660));
        assert_eq!(fs::metadata(&path).unwrap().mode() & 0o7777, 0o2777);
        // OnRootMismatch: a root that is right means nothing below is looked at.
        p.spec
            .security_context
            .as_mut()
            .unwrap()
            .fs_group_change_policy = Some("OnRootMismatch".into());
        fs::set_permissions(sub.join("f"), fs::Permissions::from_mode(0o600)).unwrap();
        prepare(&root, &p, &Store::default(), NA).unwrap();
        let f = fs::metadata(sub.join("f")).unwrap();
        assert_eq!(f.mode() & 0o7777, 0o600, "root matched: not walked");
        cleanup(&root, "u1").unwrap();
        fs::remove_dir_all(&root).unwrap();
    }

    #[test]
    fn memory_empty_dir_is_a_sized_tmpfs_unmounted_on_cleanup() {
        // Needs root, as the whole suite does (docs/testing.md): mounting tmpfs is the point.
        let root = tmp("mem");
        let p = pod_with(vec![Volume {
            name: "cache".into(),
            empty_dir: Some(EmptyDirVolumeSource {
                medium: Some("Memory".into()),
                size_limit: Some(crate::api::Quantity::parse("1Mi").unwrap()),
            }),
            ..Default::default()
        }]);
        let m = prepare(&root, &p, &Store::default(), NA).unwrap();
        let path = m["cache"].clone();
        assert!(is_mountpoint(&path), "tmpfs mounted at {}", path.display());
        let mode = fs::metadata(&path).unwrap().permissions().mode() & 0o7777;
        assert_eq!(mode, 0o1777, "tmpfs's root mode, sticky: {mode:o}");
        let fs = nix::sys::statfs::statfs(&path).unwrap();
        assert_eq!(fs.filesystem_type(), nix::sys::statfs::TMPFS_MAGIC);
        assert_eq!(
            fs.blocks() * u64::try_from(fs.block_size()).unwrap(),
            1 << 20
        );
        // Preparing again (every sync does) does not stack a second mount.
        prepare(&root, &p, &Store::default(), NA).unwrap();
        assert_eq!(mounts_under(&path).len(), 1);
        cleanup(&root, "u1").unwrap();
        assert!(mounts_under(&root).is_empty());
        assert!(!pod_dir(&root, "u1").exists());
        fs::remove_dir_all(&root).unwrap();
    }

    #[test]
    #[cfg(feature = "apiserver")]
    fn api_volumes_are_written_atomically_secrets_on_tmpfs() {
        use crate::objects::{Kind, Object};
        let root = tmp("api");
        let mut p = pod_with(vec![]);
        p.metadata.namespace = "ns".into();
        for v in [
            r#"{"name":"cfg","configMap":{"name":"cm"}}"#,
            r#"{"name":"sec","secret":{"secretName":"s","defaultMode":256}}"#,
        ] {
            p.spec.volumes.push(serde_json::from_str(v).unwrap());
        }
        let store = Store::default();
        // Nothing read yet: the pod waits, and the error names the volume and the object.
        let e = prepare(&root, &p, &store, NA).unwrap_err();
        assert_eq!(
            e.to_string(),
            "volume \"cfg\": configmap ns/cm not read from the apiserver yet"
        );
        let put = |kind, name: &str, k: &str, v: &str| {
            let d: crate::objects::Data = [(k.to_owned(), v.as_bytes().to_vec())]
                .into_iter()
                .collect();
            store
                .lock()
                .objects
                .insert((kind, format!("ns/{name}")), Object::Present(d.into()));
        };
        put(Kind::ConfigMap, "cm", "k", "v1");
        put(Kind::Secret, "s", "pw", "p1");
        let m = prepare(&root, &p, &store, NA).unwrap();
        let (cfg, sec) = (m["cfg"].clone(), m["sec"].clone());
        assert!(cfg.ends_with("pods/u1/volumes/kubernetes.io~configmap/cfg"));
        assert_eq!(fs::read_to_string(cfg.join("k")).unwrap(), "v1");
        assert!(!is_mountpoint(&cfg), "a configMap is on disk");
        assert!(is_mountpoint(&sec), "a secret is on tmpfs");
        assert_eq!(
            fs::metadata(sec.join("pw")).unwrap().permissions().mode() & 0o777,
            0o400
        );
        let before = fs::read_link(cfg.join("..data")).unwrap();
        put(Kind::ConfigMap, "cm", "k", "v2");
        prepare(&root, &p, &store, NA).unwrap();
        assert_eq!(fs::read_to_string(cfg.join("k")).unwrap(), "v2");
        assert_ne!(fs::read_link(cfg.join("..data")).unwrap(), before);
        cleanup(&root, "u1").unwrap();
        assert!(mounts_under(&root).is_empty());
        fs::remove_dir_all(&root).unwrap();
    }

    #[test]
    fn subpaths_stay_inside_their_volume() {
        let root = tmp("sub");
        let vol = root.join("vol");
        fs::create_dir_all(&vol).unwrap();
        // An fsGroup emptyDir on tmpfs: world-writable, setgid and sticky. What a missing
        // subPath creates has that mode, whatever the umask.
        fs::set_permissions(&vol, fs::Permissions::from_mode(0o3777)).unwrap();
        let made = resolve_subpath(&vol, "logs/app").unwrap();
        assert!(made.is_dir() && made.ends_with("vol/logs/app"));
        for d in [vol.join("logs"), made.clone()] {
            let mode = fs::metadata(&d).unwrap().permissions().mode() & 0o7777;
            assert_eq!(mode, 0o3777, "{}: {mode:o}", d.display());
        }
        std::os::unix::fs::symlink("/", vol.join("escape")).unwrap();
        let e = resolve_subpath(&vol, "escape").unwrap_err();
        assert!(e.contains("outside its volume"), "{e}");
        // Nothing is created outside the volume before the refusal.
        std::os::unix::fs::symlink(&root, vol.join("up")).unwrap();
        let e = resolve_subpath(&vol, "up/planted/x").unwrap_err();
        assert!(e.contains("outside its volume"), "{e}");
        assert!(!root.join("planted").exists());
        std::os::unix::fs::symlink("logs", vol.join("inside")).unwrap();
        assert!(resolve_subpath(&vol, "inside/app").is_ok());
        fs::remove_dir_all(&root).unwrap();
    }

    #[test]
    fn host_path_types() {
        let root = tmp("hp");
        let hp = |path: &Path, t: &str| {
            pod_with(vec![Volume {
                name: "h".into(),
                host_path: Some(HostPathVolumeSource {
                    path: path.display().to_string(),
                    type_: Some(t.into()),
                }),
                ..Default::default()
            }])
        };
        let d = root.join("made/here");
        prepare(&root, &hp(&d, "DirectoryOrCreate"), &Store::default(), NA).unwrap();
        assert!(d.is_dir());
        let f = root.join("file");
        prepare(&root, &hp(&f, "FileOrCreate"), &Store::default(), NA).unwrap();
        assert!(f.is_file());
        assert!(matches!(
            prepare(&root, &hp(&f, "Directory"), &Store::default(), NA),
            Err(VolumeError::HostPathType { .. })
        ));
        assert!(matches!(
            prepare(&root, &hp(&d, "File"), &Store::default(), NA),
            Err(VolumeError::HostPathType { .. })
        ));
        assert!(matches!(
            prepare(
                &root,
                &hp(&root.join("nope"), "Directory"),
                &Store::default(),
                NA
            ),
            Err(VolumeError::Io { .. })
        ));
        assert!(prepare(&root, &hp(&root.join("nope"), ""), &Store::default(), NA).is_ok());
        fs::remove_dir_all(&root).unwrap();
    }
}
