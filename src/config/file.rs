//! The manifest directory: static pods from `.yaml`, `.yml` and `.json` files.
//!
//! Watched with inotify and re-listed in full every `fileCheckFrequency`. A file whose content
//! turns invalid or unreadable keeps its last valid pod running (upstream drops it) and its
//! error is reported, until the file is fixed or removed. A missing directory is an empty
//! listing; the watch is retried with backoff (1 s doubling to 20 s) until it appears.

use std::cell::RefCell;
use std::collections::{BTreeMap, BTreeSet};
use std::fs;
use std::os::fd::AsFd;
use std::os::unix::fs::MetadataExt;
use std::path::{Path, PathBuf};
use std::rc::Rc;
use std::time::Duration;

use inotify::{Inotify, WatchMask};

use crate::api::Pod;
use crate::api::decode::{self, Format};
use crate::api::validation;
use crate::limits::{self, Limits};
use crate::rt;

use super::{Snapshot, Source, last_valid, static_pod};

/// Files larger than this are refused, as upstream refuses them.
pub const MAX_MANIFEST_BYTES: u64 = Limits::MANIFEST.max_bytes;

/// Errors and unknown fields reported per file at most: a hostile file must not flood the log
/// or the local API.
const MAX_REPORTED: usize = 20;

/// What changed on disk, cheaply: a file is re-read only when this differs.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct Stamp {
    ino: u64,
    size: u64,
    mtime_ns: i64,
    ctime_ns: i64,
}

fn stamp(md: &fs::Metadata) -> Stamp {
    Stamp {
        ino: md.ino(),
        size: md.size(),
        mtime_ns: md
            .mtime()
            .saturating_mul(1_000_000_000)
            .saturating_add(md.mtime_nsec()),
        ctime_ns: md
            .ctime()
            .saturating_mul(1_000_000_000)
            .saturating_add(md.ctime_nsec()),
    }
}

/// One manifest file and what picolet made of it.
#[derive(Debug, Clone)]
pub struct Manifest {
    pub path: PathBuf,
    /// The pod from the newest valid content of the file.
    pub pod: Option<Pod>,
    /// Why the file's current content is not used, if it is not.
    pub error: Option<String>,
    /// Why its pod is not used: another file defines a pod of the same name (recomputed on
    /// every scan, so it clears when the other file goes).
    pub dup: Option<String>,
    stamp: Option<Stamp>,
    /// UID of the pod whose content is saved as the last valid version.
    saved_uid: Option<String>,
}

impl Manifest {
    fn new(path: &Path) -> Manifest {
        Manifest {
            path: path.to_owned(),
            pod: None,
            error: None,
            dup: None,
            stamp: None,
            saved_uid: None,
        }
    }

    /// What keeps this file's newest content from running, if anything.
    pub fn problem(&self) -> Option<&str> {
        self.error.as_deref().or(self.dup.as_deref())
    }

    /// The log line for [`Manifest::problem`]: it says a last valid version is kept only when
    /// this file's pod runs (a file whose pod another file's shadows keeps nothing running).
    fn problem_line(&self) -> Option<String> {
        let err = self.problem()?;
        Some(match (&self.pod, &self.error, &self.dup) {
            (Some(p), Some(_), None) => format!(
                "{err} (keeping the last valid version of pod {})",
                p.metadata.name
            ),
            _ => err.to_owned(),
        })
    }
}

/// The file source's view, shared with the local API.
pub type Report = Rc<RefCell<Vec<Manifest>>>;

/// Whether a directory entry is a manifest: any name but a hidden one, as the kubelet reads
/// every file whose name does not start with a dot (`kube-apiserver.manifest` included).
pub fn is_manifest_name(name: &str) -> bool {
    !name.is_empty() && !name.starts_with('.')
}

fn extension(name: &str) -> &str {
    name.rsplit_once('.').map_or("", |(_, e)| e)
}

fn format_of(path: &Path) -> Format {
    if path.extension().is_some_and(|e| e == "json") {
        Format::Json
    } else {
        Format::Yaml
    }
}

/// Reads and checks one manifest; on success the pod carries its static identity. Each error
/// line names the file, the field and the value.
pub fn load(path: &Path, node_name: &str, seen: &str) -> Result<Pod, Vec<String>> {
    parse(&read_limited(path)?, format_of(path), path, node_name, seen)
}

/// Decodes, validates and gives identity to a manifest's bytes.
pub fn parse(
    bytes: &[u8],
    format: Format,
    path: &Path,
    node_name: &str,
    seen: &str,
) -> Result<Pod, Vec<String>> {
    let shown = path.display();
    let one = |e: String| vec![e];
    let decoded = decode::decode_pod(bytes, format).map_err(|e| one(format!("{shown}: {e}")))?;
    // Standard fields picolet does not model are refused or, as upstream on a node, ignored;
    // only a field that is no Pod field is reported as unknown.
    let (refused, unknown) = crate::api::fields::check(&decoded.unknown_fields, &decoded.document);
    for field in unknown.iter().take(MAX_REPORTED) {
        log::warn!("{shown}: unknown field {field:?} ignored");
    }
    if unknown.len() > MAX_REPORTED {
        log::warn!(
            "{shown}: {} more unknown fields ignored",
            unknown.len() - MAX_REPORTED
        );
    }
    let mut errs = refused;
    errs.extend(validation::validate_pod(&decoded.pod));
    if !errs.is_empty() {
        let mut lines: Vec<String> = errs
            .iter()
            .take(MAX_REPORTED)
            .map(|e| format!("{shown}: {e}"))
            .collect();
        if errs.len() > MAX_REPORTED {
            lines.push(format!(
                "{shown}: {} more errors",
                errs.len() - MAX_REPORTED
            ));
        }
        return Err(lines);
    }
    let mut pod = decoded.pod;
    // A UID written in the manifest is kept, as the kubelet keeps it; else the content's hash.
    let uid = if pod.metadata.uid.is_empty() {
        static_pod::uid(&decoded.document, &path.display().to_string(), node_name)
    } else {
        pod.metadata.uid.clone()
    };
    // A status written in the manifest (a phase, conditions) is not the pod's: picolet
    // computes it.
    pod.status = Default::default();
    static_pod::apply_api_defaults(&mut pod);
    static_pod::apply_identity(&mut pod, uid, node_name, Source::File, seen);
    if pod.metadata.name.len() > 253 {
        return Err(one(format!(
            "{shown}: metadata.name: name with the node suffix is longer than 253 characters: {:?}",
            pod.metadata.name
        )));
    }
    Ok(pod)
}

/// One scan of the directory.
struct Scanned {
    manifests: BTreeMap<PathBuf, Manifest>,
    /// False when the directory could not be read (the previous view was kept).
    listed: bool,
    /// True when a file changed while it was read: scan again soon.
    unsettled: bool,
    /// Files read and parsed in this scan (unchanged files are not).
    read: usize,
}

/// Reads, parses and checks one changed file. The content is read between two looks at the
/// file's metadata; if they differ the file is being written, and nothing is concluded yet.
fn refresh(
    path: &Path,
    st: Stamp,
    prev: Option<Manifest>,
    node_name: &str,
    store: Option<&Path>,
) -> (Manifest, bool) {
    let shown = path.display();
    let prev_pod = prev.as_ref().and_then(|p| p.pod.clone());
    let saved_uid = prev.as_ref().and_then(|p| p.saved_uid.clone());
    let read = read_limited(path);
    if fs::metadata(path).map(|md| stamp(&md)).ok() != Some(st) {
        let m = Manifest {
            stamp: None,
            ..fallback(prev, path, node_name, store)
        };
        return (m, true);
    }
    let seen = crate::api::time::now_rfc3339();
    let parsed = read.and_then(|bytes| {
        let pod = parse(&bytes, format_of(path), path, node_name, &seen)?;
        Ok((pod, bytes))
    });
    let m = match parsed {
        Ok((mut pod, bytes)) => {
            // Same content as before: keep when it was first seen.
            if let Some(old_seen) = prev_pod
                .as_ref()
                .filter(|p| p.metadata.uid == pod.metadata.uid)
                .and_then(|p| p.metadata.annotations.get(super::ANNOTATION_CONFIG_SEEN))
            {
                pod.metadata
                    .annotations
                    .insert(super::ANNOTATION_CONFIG_SEEN.to_owned(), old_seen.clone());
            }
            let mut saved_uid = saved_uid;
            if let Some(store) = store
                && saved_uid.as_deref() != Some(pod.metadata.uid.as_str())
            {
                match last_valid::save(store, path, &String::from_utf8_lossy(&bytes)) {
                    Ok(()) => saved_uid = Some(pod.metadata.uid.clone()),
                    Err(e) => log::warn!(
                        "{shown}: saving the last valid version under {}: {e}",
                        store.display()
                    ),
                }
            }
            Manifest {
                path: path.to_owned(),
                pod: Some(pod),
                error: None,
                dup: None,
                stamp: Some(st),
                saved_uid,
            }
        }
        Err(errors) => Manifest {
            error: Some(errors.join("; ")),
            stamp: Some(st),
            ..fallback(prev, path, node_name, store)
        },
    };
    (m, false)
}

/// What a file whose current content cannot be used still stands for: its previous pod, or,
/// when there is none in memory (picolet just started), the saved last valid version.
fn fallback(
    prev: Option<Manifest>,
    path: &Path,
    node_name: &str,
    store: Option<&Path>,
) -> Manifest {
    let prev = prev.unwrap_or_else(|| Manifest::new(path));
    if prev.pod.is_some() {
        return prev;
    }
    let Some(content) = store.and_then(|s| last_valid::load(s, path)) else {
        return prev;
    };
    let seen = crate::api::time::now_rfc3339();
    match parse(content.as_bytes(), format_of(path), path, node_name, &seen) {
        Ok(pod) => {
            log::warn!(
                "{}: using its last valid version (pod {})",
                path.display(),
                pod.metadata.name
            );
            Manifest {
                saved_uid: Some(pod.metadata.uid.clone()),
                pod: Some(pod),
                ..prev
            }
        }
        Err(_) => prev,
    }
}

/// The directory's manifests after one scan. Unchanged files are not re-read.
fn scan(
    dir: &Path,
    node_name: &str,
    store: Option<&Path>,
    mut old: BTreeMap<PathBuf, Manifest>,
) -> Scanned {
    let mut out = BTreeMap::new();
    let mut unsettled = false;
    let mut read = 0;
    // `staticPodPath` may name one file rather than a directory, as for the kubelet.
    let single = fs::metadata(dir).is_ok_and(|m| m.is_file());
    let entries: Vec<std::io::Result<PathBuf>> = if single {
        vec![Ok(dir.to_owned())]
    } else {
        match fs::read_dir(dir) {
            Ok(rd) => rd.map(|e| e.map(|e| e.path())).collect(),
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
                if let Some(store) = store {
                    last_valid::prune(store, out.keys());
                }
                return Scanned {
                    manifests: out,
                    listed: true,
                    unsettled,
                    read: 0,
                };
            }
            Err(e) => {
                log::error!("reading manifest directory {}: {e}", dir.display());
                // Keep what we had: an unreadable directory is not an empty one.
                return Scanned {
                    manifests: old,
                    listed: false,
                    unsettled,
                    read: 0,
                };
            }
        }
    };
    for ent in entries {
        let path = match ent {
            Ok(p) => p,
            Err(e) => {
                // A listing cut short is not a complete one: keep what we had.
                log::error!("reading manifest directory {}: {e}", dir.display());
                return Scanned {
                    manifests: old.into_iter().chain(out).collect(),
                    listed: false,
                    unsettled,
                    read,
                };
            }
        };
        let Some(name) = path.file_name().and_then(|n| n.to_str()) else {
            continue;
        };
        if !single && !is_manifest_name(name) {
            continue;
        }
        // Follow symlinks (kubeadm-style setups link manifests in). Anything but a regular file
        // under a manifest's name (a directory, a FIFO, a device) is reported, never opened.
        let md = match fs::metadata(&path) {
            Ok(md) if md.is_file() => md,
            // Subdirectories are not read; only one named like a manifest is worth a report.
            Ok(md) if md.is_dir() && Format::from_extension(extension(name)).is_none() => {
                continue;
            }
            Ok(md) => {
                let st = stamp(&md);
                let prev = old.remove(&path);
                if let Some(p) = prev.as_ref().filter(|p| p.stamp == Some(st)) {
                    out.insert(path, p.clone());
                    continue;
                }
                let m = Manifest {
                    error: Some(format!("{}: {}", path.display(), not_regular(&md))),
                    stamp: Some(st),
                    ..fallback(prev, &path, node_name, store)
                };
                out.insert(path, m);
                continue;
            }
            Err(e) => {
                // New to us (picolet just started): look again soon, it may be about to appear.
                let prev = old.remove(&path);
                unsettled |= prev.is_none();
                let prev = fallback(prev, &path, node_name, store);
                let m = Manifest {
                    error: Some(format!("{}: {e}", path.display())),
                    stamp: None,
                    ..prev
                };
                out.insert(path, m);
                continue;
            }
        };
        let st = stamp(&md);
        let prev = old.remove(&path);
        if let Some(p) = prev.as_ref().filter(|p| p.stamp == Some(st)) {
            out.insert(path, p.clone());
            continue;
        }
        let (m, moving) = refresh(&path, st, prev, node_name, store);
        read += 1;
        unsettled |= moving;
        out.insert(path, m);
    }
    if let Some(store) = store {
        last_valid::prune(store, out.keys());
    }
    Scanned {
        manifests: out,
        listed: true,
        unsettled,
        read,
    }
}

fn not_regular(md: &fs::Metadata) -> &'static str {
    use std::os::unix::fs::FileTypeExt;
    let ft = md.file_type();
    if ft.is_dir() {
        "is a directory, not a manifest file (subdirectories are not read)"
    } else if ft.is_fifo() {
        "not a regular file: it is a named pipe (FIFO)"
    } else if ft.is_char_device() {
        "not a regular file: it is a character device"
    } else if ft.is_block_device() {
        "not a regular file: it is a block device"
    } else if ft.is_socket() {
        "not a regular file: it is a socket"
    } else {
        "not a regular file"
    }
}

fn read_limited(path: &Path) -> Result<Vec<u8>, Vec<String>> {
    limits::read_file(path, &Limits::MANIFEST).map_err(|e| vec![format!("{}: {e}", path.display())])
}

/// The pods of a scan, with the paths they come from. Two files naming the same pod: the one
/// whose pod runs already (in `running`) wins, else the first path; the other reports an error.
fn pick(
    manifests: &mut BTreeMap<PathBuf, Manifest>,
    running: &BTreeSet<PathBuf>,
) -> (Vec<Pod>, BTreeSet<PathBuf>) {
    let mut by_name: BTreeMap<(String, String), PathBuf> = BTreeMap::new();
    let mut pods = Vec::new();
    let (first, rest): (Vec<_>, Vec<_>) = manifests
        .values_mut()
        .partition(|m| running.contains(&m.path));
    for m in first.into_iter().chain(rest) {
        m.dup = None;
        let Some(p) = &m.pod else { continue };
        let key = (p.metadata.namespace.clone(), p.metadata.name.clone());
        if let Some(first) = by_name.get(&key) {
            m.dup = Some(format!(
                "{}: metadata.name: pod {}/{} is already defined by {}",
                m.path.display(),
                key.0,
                key.1,
                first.display()
            ));
            continue;
        }
        by_name.insert(key, m.path.clone());
        pods.push(p.clone());
    }
    (pods, by_name.into_values().collect())
}

#[cfg(test)]
fn pods_of(manifests: &mut BTreeMap<PathBuf, Manifest>) -> Vec<Pod> {
    pick(manifests, &BTreeSet::new()).0
}

/// Settings of the file source.
#[derive(Debug, Clone)]
pub struct FileSourceConfig {
    pub dir: PathBuf,
    pub node_name: String,
    /// Full re-list period (the kubelet's `fileCheckFrequency`, 20 s).
    pub check_frequency: Duration,
    /// Where the last valid version of each manifest is kept (none: in memory only).
    pub store: Option<PathBuf>,
}

const WATCH_RETRY_MIN: Duration = Duration::from_secs(1);
const WATCH_RETRY_MAX: Duration = Duration::from_secs(20);
/// Events arriving this close together are handled in one scan.
const DEBOUNCE: Duration = Duration::from_millis(10);
/// Rescan delay after a file changed while it was read, or the directory could not be read.
const UNSETTLED_RESCAN: Duration = Duration::from_millis(200);
/// Unsettled scans the first snapshot waits for (10 × 200 ms).
const FIRST_SNAPSHOT_PATIENCE: u32 = 10;

struct Watch {
    inotify: Inotify,
    ready: smol::Async<std::os::fd::OwnedFd>,
}

fn watch(dir: &Path) -> std::io::Result<Watch> {
    let inotify = Inotify::init()?;
    let changes = WatchMask::MODIFY
        | WatchMask::CLOSE_WRITE
        | WatchMask::ATTRIB
        | WatchMask::DELETE_SELF
        | WatchMask::MOVE_SELF;
    // A single manifest file is watched itself; replaced by a rename, its watch ends and is
    // set up again on the new file.
    let mask = if fs::metadata(dir).is_ok_and(|m| m.is_file()) {
        changes
    } else {
        changes
            | WatchMask::CREATE
            | WatchMask::DELETE
            | WatchMask::MOVED_TO
            | WatchMask::MOVED_FROM
            | WatchMask::ONLYDIR
    };
    inotify.watches().add(dir, mask)?;
    // Readiness is awaited on a duplicate of the descriptor, so events are read through the
    // inotify handle itself without unsafe access to the async wrapper's inner value.
    let ready = smol::Async::new(inotify.as_fd().try_clone_to_owned()?)?;
    Ok(Watch { inotify, ready })
}

/// Drains pending events; returns false when the watch is gone (directory removed or moved).
fn drain(w: &mut Watch) -> bool {
    let mut buf = [0u8; 4096];
    loop {
        match w.inotify.read_events(&mut buf) {
            Ok(events) => {
                let mut n = 0;
                for e in events {
                    n += 1;
                    if e.mask.intersects(
                        inotify::EventMask::IGNORED
                            | inotify::EventMask::DELETE_SELF
                            | inotify::EventMask::MOVE_SELF,
                    ) {
                        return false;
                    }
                }
                if n == 0 {
                    return true;
                }
            }
            Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => return true,
            Err(e) => {
                log::warn!("reading inotify events: {e}");
                return false;
            }
        }
    }
}

/// Runs the file source forever, sending a snapshot after the first listing and after every
/// change.
pub async fn run(cfg: FileSourceConfig, tx: async_channel::Sender<Snapshot>, report: Report) {
    let mut manifests: BTreeMap<PathBuf, Manifest> = BTreeMap::new();
    let mut last_sent: Option<Vec<(String, String)>> = None;
    let mut w: Option<Watch> = None;
    let mut retry = WATCH_RETRY_MIN;
    let mut next_watch_try = rt::now();
    let mut last_errors: BTreeMap<PathBuf, String> = BTreeMap::new();
    let mut running: BTreeSet<PathBuf> = BTreeSet::new();
    let mut unsettled_scans = 0u32;
    loop {
        if w.is_none() && rt::now() >= next_watch_try {
            match watch(&cfg.dir) {
                Ok(x) => {
                    log::debug!("watching {}", cfg.dir.display());
                    w = Some(x);
                    retry = WATCH_RETRY_MIN;
                }
                Err(e) => {
                    if e.kind() != std::io::ErrorKind::NotFound || retry == WATCH_RETRY_MIN {
                        log::warn!(
                            "cannot watch manifest directory {}: {e}; retrying in {retry:?}",
                            cfg.dir.display()
                        );
                    }
                    next_watch_try = rt::now() + retry;
                    retry = (retry * 2).min(WATCH_RETRY_MAX);
                }
            }
        }

        let (dir, node, store) = (cfg.dir.clone(), cfg.node_name.clone(), cfg.store.clone());
        let old = std::mem::take(&mut manifests);
        let scanned = rt::unblock(move || scan(&dir, &node, store.as_deref(), old)).await;
        if scanned.read > 0 {
            log::debug!(
                "manifest directory {}: {} changed files read",
                cfg.dir.display(),
                scanned.read
            );
        }
        manifests = scanned.manifests;
        let (pods, now_running) = pick(&mut manifests, &running);
        running = now_running;

        let errors: BTreeMap<PathBuf, String> = manifests
            .values()
            .filter_map(|m| Some((m.path.clone(), m.problem()?.to_owned())))
            .collect();
        for (path, err) in &errors {
            if last_errors.get(path) != Some(err)
                && let Some(line) = manifests.get(path).and_then(Manifest::problem_line)
            {
                log::error!("{line}");
            }
        }
        last_errors = errors;
        *report.borrow_mut() = manifests.values().cloned().collect();

        let key: Vec<(String, String)> = pods
            .iter()
            .map(|p| {
                (
                    p.metadata.uid.clone(),
                    p.metadata
                        .annotations
                        .get(super::ANNOTATION_CONFIG_SEEN)
                        .cloned()
                        .unwrap_or_default(),
                )
            })
            .collect();
        // Until the directory could be listed once, say nothing: an empty first snapshot would
        // mark the source seen and get every running static pod removed as an orphan.
        // The first snapshot also waits (a little) for files still being written or not yet
        // readable, so their pods are in it; a file that stays broken does not hold up the rest.
        unsettled_scans = if scanned.unsettled {
            unsettled_scans + 1
        } else {
            0
        };
        let first_ok =
            scanned.listed && (!scanned.unsettled || unsettled_scans > FIRST_SNAPSHOT_PATIENCE);
        if (first_ok || last_sent.is_some()) && last_sent.as_ref() != Some(&key) {
            if tx
                .send(Snapshot {
                    source: Source::File,
                    pods,
                })
                .await
                .is_err()
            {
                return;
            }
            last_sent = Some(key);
        }

        // Wait for an event, the periodic re-list, or the next watch attempt.
        let mut wait = cfg.check_frequency;
        if scanned.unsettled || !scanned.listed {
            // A file was being written, or the directory could not be read: look again soon.
            wait = wait.min(UNSETTLED_RESCAN);
        }
        if w.is_none() {
            wait = wait.min(next_watch_try.saturating_duration_since(rt::now()));
        }
        match w.as_mut() {
            Some(watch) => {
                let ev = rt::timeout(wait, watch.ready.readable()).await;
                if let Ok(r) = ev {
                    if let Err(e) = r {
                        log::warn!("waiting on inotify: {e}");
                    }
                    rt::sleep(DEBOUNCE).await;
                    if !drain(watch) {
                        log::info!("manifest directory {} went away", cfg.dir.display());
                        w = None;
                        next_watch_try = rt::now();
                    }
                }
            }
            None => rt::sleep(wait).await,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn scan_m(d: &Path, old: BTreeMap<PathBuf, Manifest>) -> BTreeMap<PathBuf, Manifest> {
        scan(d, "node", None, old).manifests
    }

    fn tmpdir(name: &str) -> PathBuf {
        let d = std::env::temp_dir().join(format!("picolet-file-{name}-{}", std::process::id()));
        let _ = fs::remove_dir_all(&d);
        fs::create_dir_all(&d).unwrap();
        d
    }

    const GOOD: &str = "apiVersion: v1\nkind: Pod\nmetadata:\n  name: web\nspec:\n  containers:\n  - name: c\n    image: busybox:1\n";
    const GOOD2: &str = "apiVersion: v1\nkind: Pod\nmetadata:\n  name: web\nspec:\n  containers:\n  - name: c\n    image: busybox:2\n";

    #[test]
    fn names() {
        // every name that is not hidden, as the kubelet reads them
        for n in [
            "a.yaml",
            "b.yml",
            "c.json",
            "kube-apiserver.manifest",
            "etcd",
            "a.yaml~",
        ] {
            assert!(is_manifest_name(n), "{n}");
        }
        assert!(!is_manifest_name(".a.yaml") && !is_manifest_name(".a.yaml.swp"));
        assert!(!is_manifest_name(""));
    }

    #[test]
    fn any_visible_file_is_a_manifest_and_the_path_may_be_one_file() {
        let d = tmpdir("anyname");
        fs::write(d.join("kube-apiserver.manifest"), GOOD).unwrap();
        let json = r#"{"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "j"},
            "spec": {"containers": [{"name": "c", "image": "busybox:1"}]}}"#;
        fs::write(d.join("j"), json).unwrap();
        let got = scan_m(&d, BTreeMap::new());
        let mut names: Vec<_> = got
            .values()
            .filter_map(|m| Some(m.pod.as_ref()?.metadata.name.clone()))
            .collect();
        names.sort();
        assert_eq!(names, ["j-node", "web-node"], "{got:?}");
        // staticPodPath naming one file
        let one = scan_m(&d.join("kube-apiserver.manifest"), BTreeMap::new());
        assert_eq!(one.len(), 1);
        let m = one.values().next().unwrap();
        assert_eq!(m.error, None);
        assert_eq!(m.pod.as_ref().unwrap().metadata.name, "web-node");
        fs::remove_dir_all(&d).unwrap();
    }

    #[test]
    fn a_manifest_keeps_its_uid_and_loses_its_status() {
        let src = "apiVersion: v1\nkind: Pod\nmetadata:\n  name: web\n  uid: 1b4e28ba-2fa1-11d2-883f-0016d3cca427\nspec:\n  containers:\n  - name: c\n    image: busybox:1\n  tolerations:\n  - {operator: Exists, effect: NoExecute, tolerationSeconds: 300}\nstatus:\n  phase: Succeeded\n  conditions: [{type: Ready, status: 'True'}]\n";
        let p = parse(
            src.as_bytes(),
            Format::Yaml,
            Path::new("/m/web.yaml"),
            "node1",
            "t",
        )
        .unwrap();
        assert_eq!(p.metadata.uid, "1b4e28ba-2fa1-11d2-883f-0016d3cca427");
        assert_eq!(
            p.metadata.annotations[super::super::ANNOTATION_CONFIG_HASH],
            "1b4e28ba-2fa1-11d2-883f-0016d3cca427"
        );
        assert_eq!(p.status, crate::api::PodStatus::default());
        // the NoExecute toleration replaced (tolerationSeconds gone), not added twice
        assert_eq!(p.spec.tolerations.len(), 1);
        assert_eq!(p.spec.tolerations[0].toleration_seconds, None);
    }

    #[test]
    fn invalid_rewrite_keeps_last_valid_pod() {
        let d = tmpdir("keep");
        let f = d.join("web.yaml");
        fs::write(&f, GOOD).unwrap();
        let mut m = scan_m(&d, BTreeMap::new());
        let uid = m[&f].pod.as_ref().unwrap().metadata.uid.clone();
        assert_eq!(pods_of(&mut m).len(), 1);
        fs::write(
            &f,
            "apiVersion: v1\nkind: Pod\nmetadata: {name: web}\nspec: {containers: [{name: c}]}\n",
        )
        .unwrap();
        let mut m = scan_m(&d, m);
        let e = m[&f].error.clone().unwrap();
        assert!(e.contains("web.yaml") && e.contains("image"), "{e}");
        let pods = pods_of(&mut m);
        assert_eq!(pods.len(), 1);
        assert_eq!(
            pods[0].metadata.uid, uid,
            "the last valid version keeps running"
        );
        fs::write(&f, GOOD2).unwrap();
        let mut m = scan_m(&d, m);
        assert!(m[&f].error.is_none());
        assert_ne!(pods_of(&mut m)[0].metadata.uid, uid);
        fs::remove_file(&f).unwrap();
        let mut m = scan_m(&d, m);
        assert!(pods_of(&mut m).is_empty());
        fs::remove_dir_all(&d).unwrap();
    }

    #[test]
    fn unchanged_files_keep_identity_and_seen_time() {
        let d = tmpdir("same");
        let f = d.join("web.yaml");
        fs::write(&f, GOOD).unwrap();
        let m1 = scan_m(&d, BTreeMap::new());
        let p1 = m1[&f].pod.clone().unwrap();
        // Rewrite with identical content: re-read, same UID, same seen time.
        std::thread::sleep(Duration::from_millis(20));
        fs::write(&f, GOOD).unwrap();
        let m2 = scan_m(&d, m1);
        let p2 = m2[&f].pod.clone().unwrap();
        assert_eq!(p1.metadata.uid, p2.metadata.uid);
        assert_eq!(p1.metadata.annotations, p2.metadata.annotations);
        fs::remove_dir_all(&d).unwrap();
    }

    #[test]
    fn missing_dir_is_empty_and_ignored_files_skipped() {
        let d = tmpdir("skip");
        assert!(scan_m(&d.join("absent"), BTreeMap::new()).is_empty());
        fs::write(d.join(".hidden.yaml"), GOOD).unwrap();
        fs::write(d.join(".web.yaml.swp"), GOOD).unwrap();
        fs::create_dir(d.join("sub")).unwrap();
        assert!(scan_m(&d, BTreeMap::new()).is_empty());
        fs::remove_dir_all(&d).unwrap();
    }

    #[test]
    fn what_is_not_a_manifest_file_is_reported_not_opened() {
        let d = tmpdir("odd");
        fs::create_dir(d.join("dir.yaml")).unwrap();
        nix::unistd::mkfifo(&d.join("fifo.yaml"), nix::sys::stat::Mode::S_IRWXU).unwrap();
        std::os::unix::fs::symlink("/dev/zero", d.join("zero.yaml")).unwrap();
        let s = scan(&d, "node", None, BTreeMap::new());
        assert_eq!(s.read, 0, "nothing was opened");
        let err = |name: &str| s.manifests[&d.join(name)].error.clone().unwrap();
        assert_eq!(
            err("dir.yaml"),
            format!(
                "{}: is a directory, not a manifest file (subdirectories are not read)",
                d.join("dir.yaml").display()
            )
        );
        assert!(
            err("fifo.yaml").ends_with("fifo.yaml: not a regular file: it is a named pipe (FIFO)")
        );
        assert!(
            err("zero.yaml").ends_with("zero.yaml: not a regular file: it is a character device")
        );
        assert!(s.manifests.values().all(|m| m.pod.is_none()));
        // A valid manifest replaced by a directory keeps its pod, as invalid content does.
        let f = d.join("web.yaml");
        fs::write(&f, GOOD).unwrap();
        let m = scan_m(&d, s.manifests);
        fs::remove_file(&f).unwrap();
        fs::create_dir(&f).unwrap();
        let m = scan_m(&d, m);
        assert!(m[&f].pod.is_some() && m[&f].error.is_some());
        fs::remove_dir_all(&d).unwrap();
    }

    #[test]
    fn a_file_refused_for_its_cost_is_not_read_again_until_it_changes() {
        let d = tmpdir("cost");
        let f = d.join("deep.yaml");
        let deep = format!("{GOOD}x: {}{}\n", "[".repeat(100_000), "]".repeat(100_000));
        fs::write(&f, &deep).unwrap();
        fs::write(d.join("web.yaml"), GOOD2.replace("web", "other")).unwrap();
        let s = scan(&d, "node", None, BTreeMap::new());
        assert_eq!(s.read, 2);
        let e = s.manifests[&f].error.clone().unwrap();
        assert_eq!(
            e,
            format!(
                "{}: refused: nested deeper than the limit of 64 levels at line 9 column 67",
                f.display()
            )
        );
        let s = scan(&d, "node", None, s.manifests);
        assert_eq!(s.read, 0, "the re-list reads no unchanged file");
        assert_eq!(s.manifests[&f].error.as_deref(), Some(e.as_str()));
        // Changed (same size, new content): read again.
        std::thread::sleep(Duration::from_millis(10));
        fs::write(&f, deep.replace("x: [", "y: [")).unwrap();
        let s = scan(&d, "node", None, s.manifests);
        assert_eq!(s.read, 1);
        fs::remove_dir_all(&d).unwrap();
    }

    #[test]
    fn errors_and_unknown_fields_are_capped() {
        let mut y = String::from(
            "apiVersion: v1\nkind: Pod\nmetadata: {name: many}\nspec:\n  containers:\n",
        );
        for i in 0..100 {
            y.push_str(&format!("  - name: c{i}\n    bogus{i}: 1\n"));
        }
        let errs = parse(
            y.as_bytes(),
            Format::Yaml,
            Path::new("/m/many.yaml"),
            "n",
            "",
        )
        .unwrap_err();
        assert_eq!(errs.len(), MAX_REPORTED + 1);
        assert_eq!(errs[MAX_REPORTED], "/m/many.yaml: 80 more errors");
    }

    #[test]
    fn oversized_file_is_refused() {
        let d = tmpdir("big");
        let f = d.join("big.yaml");
        let mut s = String::from(GOOD);
        s.push('#');
        s.push_str(&"x".repeat(usize::try_from(MAX_MANIFEST_BYTES).unwrap()));
        fs::write(&f, s).unwrap();
        let m = scan_m(&d, BTreeMap::new());
        assert!(m[&f].error.as_ref().unwrap().contains("larger than"));
        assert!(m[&f].pod.is_none());
        fs::remove_dir_all(&d).unwrap();
    }

    #[test]
    fn last_valid_version_survives_a_restart() {
        let d = tmpdir("persist");
        let store = d.join("store");
        let manifests = d.join("m");
        fs::create_dir_all(&manifests).unwrap();
        let f = manifests.join("web.yaml");
        fs::write(&f, GOOD).unwrap();
        let first = scan(&manifests, "node", Some(&store), BTreeMap::new()).manifests;
        let uid = first[&f].pod.as_ref().unwrap().metadata.uid.clone();
        // The file turns invalid while picolet is down; a fresh picolet still runs the old pod.
        fs::write(
            &f,
            "apiVersion: v1\nkind: Pod\nmetadata: {name: web}\nspec: {containers: []}\n",
        )
        .unwrap();
        let mut restarted = scan(&manifests, "node", Some(&store), BTreeMap::new()).manifests;
        assert!(restarted[&f].error.is_some());
        let pods = pods_of(&mut restarted);
        assert_eq!(pods.len(), 1);
        assert_eq!(pods[0].metadata.uid, uid);
        // The file goes: so does its saved copy.
        fs::remove_file(&f).unwrap();
        scan(&manifests, "node", Some(&store), restarted);
        assert_eq!(fs::read_dir(&store).unwrap().count(), 0);
        fs::remove_dir_all(&d).unwrap();
    }

    #[test]
    fn dangling_symlink_at_startup_uses_the_saved_version() {
        // A manifest linked from a filesystem not mounted yet at boot.
        let d = tmpdir("dangling");
        let (store, manifests) = (d.join("store"), d.join("m"));
        fs::create_dir_all(&manifests).unwrap();
        let f = manifests.join("web.yaml");
        fs::write(&f, GOOD).unwrap();
        let uid = scan(&manifests, "node", Some(&store), BTreeMap::new()).manifests[&f]
            .pod
            .as_ref()
            .unwrap()
            .metadata
            .uid
            .clone();
        fs::remove_file(&f).unwrap();
        std::os::unix::fs::symlink(d.join("not-mounted/web.yaml"), &f).unwrap();
        let s = scan(&manifests, "node", Some(&store), BTreeMap::new());
        assert!(s.unsettled, "looked at again soon");
        assert_eq!(s.manifests[&f].pod.as_ref().unwrap().metadata.uid, uid);
        assert!(s.manifests[&f].error.is_some());
        fs::remove_dir_all(&d).unwrap();
    }

    #[test]
    fn unreadable_directory_keeps_the_previous_view() {
        let d = tmpdir("unreadable");
        let f = d.join("web.yaml");
        fs::write(&f, GOOD).unwrap();
        let m = scan_m(&d, BTreeMap::new());
        // A path through a file: read_dir fails with ENOTDIR, not NotFound.
        let s = scan(&f.join("manifests"), "node", None, m);
        assert!(!s.listed);
        assert_eq!(s.manifests.len(), 1);
        fs::remove_dir_all(&d).unwrap();
    }

    #[test]
    fn duplicate_names_first_path_wins() {
        let d = tmpdir("dup");
        fs::write(d.join("a.yaml"), GOOD).unwrap();
        fs::write(d.join("b.yaml"), GOOD2).unwrap();
        let mut m = scan_m(&d, BTreeMap::new());
        let pods = pods_of(&mut m);
        assert_eq!(pods.len(), 1);
        assert_eq!(pods[0].spec.containers[0].image, "busybox:1");
        assert!(
            m[&d.join("b.yaml")]
                .problem()
                .unwrap()
                .contains("already defined")
        );
        // The first file goes: the second one's pod runs and its error clears.
        fs::remove_file(d.join("a.yaml")).unwrap();
        let mut m = scan_m(&d, m);
        let pods = pods_of(&mut m);
        assert_eq!(pods[0].spec.containers[0].image, "busybox:2");
        assert_eq!(m[&d.join("b.yaml")].problem(), None);
        // A new file naming the running pod does not displace it, even sorting first.
        fs::write(d.join("0.yaml"), GOOD).unwrap();
        let mut m = scan_m(&d, m);
        let running = BTreeSet::from([d.join("b.yaml")]);
        let (pods, winners) = pick(&mut m, &running);
        assert_eq!(pods[0].spec.containers[0].image, "busybox:2");
        assert_eq!(winners, running);
        assert!(m[&d.join("0.yaml")].problem().unwrap().contains("b.yaml"));
        // Its log line claims no kept version: its pod never ran.
        let line = m[&d.join("0.yaml")].problem_line().unwrap();
        assert!(
            line.ends_with(&format!(
                "already defined by {}",
                d.join("b.yaml").display()
            )),
            "{line}"
        );
        // The running file turned invalid: its last valid version is kept, and said so.
        fs::write(
            d.join("b.yaml"),
            "apiVersion: v1\nkind: Pod\nmetadata: {name: [x]}\n",
        )
        .unwrap();
        let mut m = scan_m(&d, m);
        let _ = pick(&mut m, &running);
        let line = m[&d.join("b.yaml")].problem_line().unwrap();
        assert!(
            line.contains("(keeping the last valid version of pod "),
            "{line}"
        );
        fs::remove_dir_all(&d).unwrap();
    }

    #[test]
    fn watcher_sends_snapshots_on_change() {
        let d = tmpdir("watch");
        let (tx, rx) = async_channel::unbounded();
        let report: Report = Rc::default();
        let cfg = FileSourceConfig {
            store: None,
            dir: d.clone(),
            node_name: "n".into(),
            check_frequency: Duration::from_secs(600),
        };
        rt::block_on(async {
            let task = rt::spawn(run(cfg, tx, report.clone()));
            let first = rt::timeout(Duration::from_secs(5), rx.recv())
                .await
                .unwrap()
                .unwrap();
            assert!(
                first.pods.is_empty(),
                "the first listing is sent even when empty"
            );
            fs::write(d.join("web.yaml"), GOOD).unwrap();
            // Well under the 600 s re-list: only inotify can deliver this in time.
            let s = rt::timeout(Duration::from_secs(5), rx.recv())
                .await
                .unwrap()
                .unwrap();
            assert_eq!(s.pods.len(), 1);
            assert_eq!(s.pods[0].metadata.name, "web-n");
            fs::remove_file(d.join("web.yaml")).unwrap();
            let s = rt::timeout(Duration::from_secs(5), rx.recv())
                .await
                .unwrap()
                .unwrap();
            assert!(s.pods.is_empty());
            assert!(report.borrow().is_empty());
            drop(task);
        });
        fs::remove_dir_all(&d).unwrap();
    }

    #[test]
    fn a_single_manifest_file_is_watched() {
        let d = tmpdir("watch-one");
        let f = d.join("kube-apiserver.manifest");
        fs::write(&f, GOOD).unwrap();
        let (tx, rx) = async_channel::unbounded();
        let cfg = FileSourceConfig {
            store: None,
            dir: f.clone(),
            node_name: "n".into(),
            check_frequency: Duration::from_secs(600),
        };
        rt::block_on(async {
            let task = rt::spawn(run(cfg, tx, Rc::default()));
            let next = || async {
                rt::timeout(Duration::from_secs(5), rx.recv())
                    .await
                    .unwrap()
                    .unwrap()
            };
            let first = next().await;
            assert_eq!(first.pods.len(), 1);
            let uid = first.pods[0].metadata.uid.clone();
            // Rewritten in place, then replaced by a rename as editors do: both seen at once,
            // well under the 600 s re-list.
            fs::write(&f, GOOD2).unwrap();
            let s = next().await;
            assert_ne!(s.pods[0].metadata.uid, uid);
            let tmp = d.join(".kube-apiserver.manifest.tmp");
            fs::write(&tmp, GOOD).unwrap();
            fs::rename(&tmp, &f).unwrap();
            let s = next().await;
            assert_eq!(s.pods[0].metadata.uid, uid);
            fs::write(&f, GOOD2).unwrap();
            let s = next().await;
            assert_ne!(s.pods[0].metadata.uid, uid, "the new file is watched too");
            drop(task);
        });
        fs::remove_dir_all(&d).unwrap();
    }
}
