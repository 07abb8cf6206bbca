//! The preload pass: every image archive in the directory, read and checked, imported into
//! containerd under the names it carries, each name pinned. A damaged archive is refused with
//! its file and reason; the others are imported; nothing running is touched. What became of
//! each archive is kept in the record (`record`), so a restart reads again only the archives
//! that changed or whose images went away.

use std::collections::{HashMap, HashSet};
use std::path::{Path, PathBuf};
use std::rc::Rc;
use std::sync::Arc;
use std::time::Duration;

use super::archive::{self, Archive, Platform, Source};
use super::containerd::{self, Client};
use super::pull_list::{self, Wanted};
use super::record::{Entry, Named, Record, Version};
use crate::events::{ObjectRef, Type};
use crate::retry::{Failures, Report};
use crate::rt;

/// The node events' reasons, in the kubelet's style: an archive imported, and one refused (or
/// a line of a pull list that names no image); an image of a pull list pulled (or found
/// present) and pinned, and a pull that failed (upstream's image pull reasons).
pub const REASON_PRELOADED: &str = "Preloaded";
pub const REASON_FAILED_PRELOAD: &str = "FailedPreload";
pub const REASON_PULLED: &str = "Pulled";
pub const REASON_FAILED: &str = "Failed";
/// A failed pull of a listed image is tried again after 10 s, doubling to 5 min (the
/// kubelet's image pull backoff).
const PULL_BACKOFF: (Duration, Duration) = (Duration::from_secs(10), Duration::from_secs(300));
/// Events kept while the node's event recorder is not running yet (the first pass runs before
/// the node joins); past this the later ones are dropped (their log lines are there).
const PENDING_MAX: usize = 64;

/// Pulls the images of the pull lists: the CRI image service and the node's credentials.
#[derive(Clone)]
pub struct Puller {
    pub images: Rc<dyn crate::cri::ImageService>,
    pub root_dir: PathBuf,
    pub providers: Option<Arc<crate::credential_provider::Providers>>,
}

/// How long the pass waits for containerd to answer at all (it may start with picolet).
const RUNTIME_WAIT: Duration = Duration::from_secs(30);
/// How long a lease holds an import's blobs if picolet dies before it names them.
const LEASE_EXPIRY: Duration = Duration::from_secs(3600);

/// What became of one archive.
#[derive(Debug)]
pub struct Outcome {
    pub file: PathBuf,
    /// The images imported and pinned, or why the archive was not.
    pub result: Result<Imported, Failure>,
}

#[derive(Debug, Default, PartialEq, Eq)]
pub struct Imported {
    /// The names, each with its manifest's digest.
    pub images: Vec<Named>,
    /// Blobs written, and blobs containerd held already.
    pub written: usize,
    pub present: usize,
    /// Not read: the record says this version was imported, and its images are all there.
    pub reused: bool,
}

impl Imported {
    pub fn names(&self) -> Vec<&str> {
        self.images.iter().map(|i| i.name.as_str()).collect()
    }
}

/// An archive not imported: the message names the file and the reason.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Failure {
    pub message: String,
    /// The archive's own fault (damaged, truncated, nothing for the node): recorded, and not
    /// read again until it is replaced. Otherwise the runtime's: tried again.
    pub refused: bool,
}

impl std::fmt::Display for Failure {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.message)
    }
}

/// The archives of `dir`, in name order: `.tar`, `.tar.gz`, `.tgz`, `.tar.zst`, `.tzst`
/// (refused by the reader in a build without the `zstd` feature); hidden files and others are
/// left alone.
pub fn archives(dir: &Path) -> Result<Vec<PathBuf>, String> {
    let rd = match std::fs::read_dir(dir) {
        Ok(rd) => rd,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(Vec::new()),
        Err(e) => return Err(format!("image preload directory {}: {e}", dir.display())),
    };
    let mut out = Vec::new();
    for e in rd.flatten() {
        let name = e.file_name();
        let name = name.to_string_lossy();
        let is_archive = [".tar", ".tar.gz", ".tgz", ".tar.zst", ".tzst"]
            .iter()
            .any(|s| name.ends_with(s));
        if name.starts_with('.') || !is_archive {
            continue;
        }
        if e.file_type().is_ok_and(|t| t.is_file() || t.is_symlink()) {
            out.push(e.path());
        }
    }
    out.sort();
    Ok(out)
}

/// How often the directory is listed again besides inotify's events (and the watch set up
/// again when it could not be: a directory made after start).
const RESCAN: Duration = Duration::from_secs(60);
/// Events come in bursts (a copy, then a rename): wait this long after the first.
const DEBOUNCE: Duration = Duration::from_millis(200);

/// What tells a file's version apart: device, inode, size, modification time.
type Stamp = (u64, u64, u64, i64, i64);

fn stamp(m: &std::fs::Metadata) -> Stamp {
    use std::os::unix::fs::MetadataExt;
    (m.dev(), m.ino(), m.size(), m.mtime(), m.mtime_nsec())
}

/// The preload directory and the archive versions already handled (imported or refused): an
/// archive is read again only when it is added or replaced, or (after a restart) when the
/// images the record says it gave are no longer in the runtime.
pub struct Preloader {
    dir: PathBuf,
    client: Client,
    seen: std::collections::HashMap<PathBuf, Stamp>,
    /// Where the record is kept (`None`: not kept, every start reads every archive).
    record_path: Option<PathBuf>,
    record: Record,
    /// The node, whose events tell what became of each archive and listed image.
    node: Option<String>,
    /// Whether events go out as they happen (the `watch` task runs, the recorder installed if
    /// the node joins); before that they wait in `pending`.
    live: bool,
    pending: Vec<(Type, &'static str, String)>,
    puller: Option<Puller>,
    /// The pull lists read, by version, and the references they hold, in list order.
    lists_seen: HashMap<PathBuf, Stamp>,
    wanted: Vec<Wanted>,
    /// The normalized references pulled (or found present) and pinned.
    done: HashSet<String>,
    failures: Failures,
    /// When each failing reference was last tried (unix nanoseconds).
    attempted: HashMap<String, i64>,
}

impl Preloader {
    pub fn new(dir: PathBuf, client: Client, record_path: Option<PathBuf>) -> Preloader {
        let record = record_path.as_deref().map(Record::load).unwrap_or_default();
        Preloader {
            dir,
            client,
            seen: Default::default(),
            record_path,
            record,
            node: None,
            live: false,
            pending: Vec::new(),
            puller: None,
            lists_seen: HashMap::new(),
            wanted: Vec::new(),
            done: HashSet::new(),
            failures: Failures::new(PULL_BACKOFF.0, PULL_BACKOFF.1),
            attempted: HashMap::new(),
        }
    }

    /// Events about `node` (the node's name) for each archive and listed image.
    pub fn with_node(mut self, node: &str) -> Preloader {
        self.node = Some(node.to_owned());
        self
    }

    /// Pulls the images of the directory's `*.txt` lists with `puller`.
    pub fn with_puller(mut self, puller: Puller) -> Preloader {
        self.puller = Some(puller);
        self
    }

    /// A node event (besides the log line the caller wrote): sent at once when live, else kept
    /// for the `watch` task to send.
    fn event(&mut self, t: Type, reason: &'static str, message: String) {
        let Some(node) = &self.node else {
            return;
        };
        if self.live {
            crate::events::emit(&ObjectRef::node(node), t, reason, &message);
        } else if self.pending.len() < PENDING_MAX {
            self.pending.push((t, reason, message));
        }
    }

    /// Whether every image of `entry` is still in the runtime, pointing at the manifest the
    /// archive gave, and pinned. Any doubt (the runtime not answering) says no: the archive is
    /// then read again, which writes nothing containerd has.
    async fn still_present(&self, entry: &Entry) -> bool {
        if entry.images.is_empty() {
            return false;
        }
        for i in &entry.images {
            match self.client.image(&i.name).await {
                Ok(Some(img))
                    if img.target.as_ref().is_some_and(|t| t.digest == i.digest)
                        && img
                            .labels
                            .get(containerd::PINNED_LABEL)
                            .is_some_and(|v| v == containerd::PINNED_VALUE) => {}
                _ => return false,
            }
        }
        true
    }

    /// Imports every archive of the directory not handled yet in its present version; logs
    /// each result and returns them. A directory that does not exist is no error.
    pub async fn pass(&mut self) -> Vec<Outcome> {
        let d = self.dir.clone();
        let files = match rt::unblock(move || {
            archives(&d).map(|files| {
                files
                    .into_iter()
                    .filter_map(|f| {
                        let meta = std::fs::metadata(&f).ok()?;
                        let st = stamp(&meta);
                        Some((f, st, Version::of(&meta)))
                    })
                    .collect::<Vec<_>>()
            })
        })
        .await
        {
            Ok(f) => {
                self.failures
                    .succeeded(&self.dir_key(), "reading the image preload directory");
                f
            }
            Err(e) => {
                // Read again at each rescan; logged (and an event) when it starts failing or
                // the cause changes, then counted.
                let key = self.dir_key();
                let report = self.failures.failed(
                    &key,
                    "reading the image preload directory",
                    &format!("{e}; no image preloaded until it can be read"),
                    rt::now_nanos(),
                );
                if matches!(report, Report::First | Report::Changed | Report::Summary) {
                    self.event(Type::Warning, REASON_FAILED_PRELOAD, e);
                }
                return Vec::new();
            }
        };
        let platform = Platform::node();
        let mut outcomes = Vec::new();
        let listed: Vec<PathBuf> = files.iter().map(|(f, _, _)| f.clone()).collect();
        let mut changed = self.record.retain_files(&listed);
        for (file, st, version) in files {
            if self.seen.get(&file) == Some(&st) {
                continue;
            }
            let t0 = rt::now();
            let result = match self.record.matching(&file, version).cloned() {
                Some(Entry {
                    refused: Some(reason),
                    ..
                }) => Err(Failure {
                    message: format!(
                        "{reason} (refused before; not read again until the file is replaced)"
                    ),
                    refused: true,
                }),
                Some(e) if self.still_present(&e).await => Ok(Imported {
                    images: e.images,
                    reused: true,
                    ..Imported::default()
                }),
                _ => {
                    let r = import_file(&file, &self.dir, &platform, &self.client).await;
                    let entry = match &r {
                        Ok(i) => Some(Entry {
                            version,
                            images: i.images.clone(),
                            refused: None,
                        }),
                        Err(f) if f.refused => Some(Entry {
                            version,
                            images: Vec::new(),
                            refused: Some(f.message.clone()),
                        }),
                        Err(_) => None,
                    };
                    if let Some(entry) = entry {
                        self.record.archives.insert(file.clone(), entry);
                        changed = true;
                    }
                    r
                }
            };
            let event = match &result {
                Ok(i) if i.reused => {
                    log::info!(
                        "preloaded {}: {} (pinned; imported before, not read again; {:.1?})",
                        file.display(),
                        i.names().join(", "),
                        rt::now().saturating_duration_since(t0)
                    );
                    None
                }
                Ok(i) => {
                    log::info!(
                        "preloaded {}: {} (pinned; {} blobs written, {} present; {:.1?})",
                        file.display(),
                        i.names().join(", "),
                        i.written,
                        i.present,
                        rt::now().saturating_duration_since(t0)
                    );
                    Some((
                        Type::Normal,
                        REASON_PRELOADED,
                        format!(
                            "Imported image {} from {}; pinned",
                            i.names().join(", "),
                            file.display()
                        ),
                    ))
                }
                Err(e) => {
                    log::error!("{e}");
                    (!e.message.contains(NOT_YET))
                        .then(|| (Type::Warning, REASON_FAILED_PRELOAD, e.message.clone()))
                }
            };
            if let Some((t, reason, message)) = event {
                self.event(t, reason, message);
            }
            // A runtime that did not answer: tried again at the next pass.
            if !result.as_ref().is_err_and(|e| e.message.contains(NOT_YET)) {
                self.seen.insert(file.clone(), st);
            }
            outcomes.push(Outcome { file, result });
        }
        if changed && let Some(path) = &self.record_path {
            let (record, path) = (self.record.clone(), path.clone());
            if let Err(e) = rt::unblock(move || record.save(&path)).await {
                log::error!("{e}; the archives are read again at the next start");
            }
        }
        outcomes
    }

    /// Imports archives as they are added or replaced (closed after writing, or moved in),
    /// and at every [`RESCAN`]; runs until dropped.
    pub async fn watch(mut self) {
        // The node's recorder is installed by now if it joins: the first pass's events go out.
        self.live = true;
        if let Some(node) = &self.node {
            let me = ObjectRef::node(node);
            for (t, reason, message) in std::mem::take(&mut self.pending) {
                crate::events::emit(&me, t, reason, &message);
            }
        }
        // The pulls run here, beside the pods, not before the first pod sync: a device with
        // no registry starts its pods from what it has.
        self.pull_pass().await;
        let mut w = None;
        loop {
            if w.is_none() {
                w = watch(&self.dir).ok();
            }
            let wait = self.next_retry().map_or(RESCAN, |d| d.min(RESCAN));
            match &mut w {
                Some((inotify, ready)) => {
                    if rt::timeout(wait, ready.readable()).await.is_ok() {
                        rt::sleep(DEBOUNCE).await;
                    }
                    if !drain(inotify) {
                        w = None; // the directory went away: watched again when it is back
                    }
                }
                None => rt::sleep(wait).await,
            }
            self.pass().await;
            self.pull_pass().await;
        }
    }

    /// The failure tracker's key for the directory itself.
    fn dir_key(&self) -> String {
        format!("directory {}", self.dir.display())
    }

    /// When the next failed pull is due again.
    fn next_retry(&self) -> Option<Duration> {
        let now = rt::now_nanos();
        self.attempted
            .iter()
            .filter_map(|(k, at)| {
                let delay = self.failures.delay(k)?;
                let due = at.saturating_add(i64::try_from(delay.as_nanos()).unwrap_or(i64::MAX));
                Some(Duration::from_nanos(
                    u64::try_from(due.saturating_sub(now)).unwrap_or(0),
                ))
            })
            .min()
    }

    /// Reads the pull lists that changed, and pulls (or finds present) and pins each listed
    /// image not done yet whose retry is due.
    pub async fn pull_pass(&mut self) {
        let Some(puller) = self.puller.clone() else {
            return;
        };
        let (d, seen) = (self.dir.clone(), self.lists_seen.clone());
        let (present, changed) = rt::unblock(move || {
            let mut present = Vec::new();
            let mut changed = Vec::new();
            for f in pull_list::lists(&d) {
                let Ok(meta) = std::fs::metadata(&f) else {
                    continue;
                };
                let st = stamp(&meta);
                present.push(f.clone());
                if seen.get(&f) != Some(&st) {
                    let text = std::fs::read_to_string(&f);
                    changed.push((f, st, text));
                }
            }
            (present, changed)
        })
        .await;
        self.lists_seen.retain(|f, _| present.contains(f));
        self.wanted.retain(|w| present.contains(&w.file));
        for (file, st, text) in changed {
            self.wanted.retain(|w| w.file != file);
            match text {
                Ok(text) => {
                    let (wanted, errors) = pull_list::parse(&file, &text);
                    for e in errors {
                        log::error!("{e}");
                        self.event(Type::Warning, REASON_FAILED_PRELOAD, e);
                    }
                    // A changed list's images are looked at again, failing ones at once.
                    for w in &wanted {
                        self.done.remove(&w.normalized);
                        self.failures.forget(&w.normalized);
                        self.attempted.remove(&w.normalized);
                    }
                    log::info!(
                        "image pull list {}: {} images",
                        file.display(),
                        wanted.len()
                    );
                    self.wanted.extend(wanted);
                }
                Err(e) => log::error!("image pull list {}: {e}", file.display()),
            }
            self.lists_seen.insert(file, st);
        }
        // Images no list names any more are not tried again (nor waited for).
        let keys: HashSet<&str> = self.wanted.iter().map(|w| w.normalized.as_str()).collect();
        let gone: Vec<String> = self
            .attempted
            .keys()
            .filter(|k| !keys.contains(k.as_str()))
            .cloned()
            .collect();
        for k in gone {
            self.attempted.remove(&k);
            self.failures.forget(&k);
        }
        let now = rt::now_nanos();
        let mut tried = HashSet::new();
        for w in self.wanted.clone() {
            let key = w.normalized.as_str();
            if self.done.contains(key)
                || !tried.insert(key.to_owned())
                || !self.failures.due(key, now)
            {
                continue;
            }
            let what = format!(
                "image pull list {} line {}: pulling {:?}",
                w.file.display(),
                w.line,
                w.reference
            );
            match pull_and_pin(&puller, &self.client, &w).await {
                Ok(message) => {
                    self.failures.succeeded(key, &what);
                    self.attempted.remove(key);
                    self.done.insert(key.to_owned());
                    log::info!(
                        "image pull list {} line {}: {message}; pinned",
                        w.file.display(),
                        w.line
                    );
                    self.event(Type::Normal, REASON_PULLED, format!("{message}; pinned"));
                }
                Err(cause) => {
                    let report = self.failures.failed(key, &what, &cause, now);
                    self.attempted.insert(key.to_owned(), now);
                    if matches!(report, Report::First | Report::Changed | Report::Summary) {
                        self.event(
                            Type::Warning,
                            REASON_FAILED,
                            format!("Failed to pull image {:?}: {cause}", w.reference),
                        );
                    }
                }
            }
        }
    }
}

/// Pulls `w` unless the runtime has it, with the node's credentials, then pins it; the message
/// of a success, in the kubelet's words, or the cause of the failure.
async fn pull_and_pin(p: &Puller, client: &Client, w: &Wanted) -> Result<String, String> {
    let status = p
        .images
        .image_status(&w.reference)
        .await
        .map_err(|e| format!("checking the image: {e}"))?;
    let message = if status.is_some_and(|i| !i.id.is_empty()) {
        format!("Image {:?} already present on machine", w.reference)
    } else {
        let creds = crate::kuberuntime::image::node_credentials(
            p.root_dir.clone(),
            p.providers.clone(),
            &w.reference,
        )
        .await;
        let t0 = rt::now();
        crate::kuberuntime::image::pull_with(&*p.images, &w.reference, creds)
            .await
            .map_err(|e| e.to_string())?;
        format!(
            "Successfully pulled image {:?} in {}",
            w.reference,
            crate::api::format_duration(rt::now().saturating_duration_since(t0))
        )
    };
    client
        .label_image(
            &w.normalized,
            &[(containerd::PINNED_LABEL, containerd::PINNED_VALUE)],
        )
        .await
        .map_err(|e| format!("pulled, but pinning {}: {e}", w.normalized))?;
    Ok(message)
}

/// Reads the pending events; false when the watch ended (the directory removed or moved).
fn drain(inotify: &mut inotify::Inotify) -> bool {
    let mut buf = [0u8; 4096];
    loop {
        match inotify.read_events(&mut buf) {
            Ok(events) => {
                let mut n = 0;
                for e in events {
                    n += 1;
                    if e.mask.contains(inotify::EventMask::IGNORED) {
                        return false;
                    }
                }
                if n == 0 {
                    return true;
                }
            }
            Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => return true,
            Err(_) => return false,
        }
    }
}

/// The marker of an archive that was fine but found the runtime not answering.
const NOT_YET: &str = ": not imported yet, the runtime does not answer: ";

/// An inotify watch of `dir` for archives closed after writing or moved in, and readiness of
/// its descriptor.
fn watch(dir: &Path) -> std::io::Result<(inotify::Inotify, smol::Async<std::os::fd::OwnedFd>)> {
    use std::os::fd::AsFd;
    let inotify = inotify::Inotify::init()?;
    inotify.watches().add(
        dir,
        inotify::WatchMask::CLOSE_WRITE
            | inotify::WatchMask::MOVED_TO
            | inotify::WatchMask::ONLYDIR,
    )?;
    let ready = smol::Async::new(inotify.as_fd().try_clone_to_owned()?)?;
    Ok((inotify, ready))
}

async fn import_file(
    file: &Path,
    scratch: &Path,
    platform: &Platform,
    client: &Client,
) -> Result<Imported, Failure> {
    let refused = |message: String| Failure {
        message,
        refused: true,
    };
    let failed = |message: String| Failure {
        message,
        refused: false,
    };
    let (f, s, p) = (file.to_path_buf(), scratch.to_path_buf(), platform.clone());
    let archive = rt::unblock(move || {
        // A read-only directory (a read-only root filesystem) decompresses in the temp dir.
        archive::read(&f, &s, &p).or_else(|e| {
            if e.reason.starts_with("cannot make a temporary file") {
                archive::read(&f, &std::env::temp_dir(), &p)
            } else {
                Err(e)
            }
        })
    })
    .await
    .map_err(|e| {
        // The file could not be read, or there was no room to decompress it: not the
        // archive's fault, so not recorded (a chmod does not change the version).
        if e.reason.starts_with("cannot ") || e.reason.contains(": cannot read") {
            failed(e.to_string())
        } else {
            refused(e.to_string())
        }
    })?;
    let unnamed: Vec<&str> = archive
        .images
        .iter()
        .filter(|i| i.names.is_empty())
        .map(|i| i.target.digest.as_str())
        .collect();
    if !unnamed.is_empty() {
        return Err(refused(format!(
            "image archive {}: image {} has no name (an index entry needs the \
             io.containerd.image.name or a full org.opencontainers.image.ref.name annotation; \
             a docker save archive, RepoTags)",
            file.display(),
            unnamed.join(", ")
        )));
    }
    let lease = format!("picolet-preload-{}-{}", std::process::id(), rt::now_nanos());
    create_lease(client, &lease).await.map_err(|e| {
        failed(if e.is_unavailable() {
            format!("image archive {}{NOT_YET}{e}", file.display())
        } else {
            format!("image archive {}: not imported: {e}", file.display())
        })
    })?;
    let result = import(&archive, client, &lease).await;
    if let Err(e) = client.delete_lease(&lease).await {
        log::warn!("deleting containerd lease {lease}: {e} (it expires by itself)");
    }
    result.map_err(|e| {
        failed(format!(
            "image archive {}: not imported: {e}",
            file.display()
        ))
    })
}

/// Creates the import's lease, waiting up to [`RUNTIME_WAIT`] for containerd to answer.
async fn create_lease(client: &Client, lease: &str) -> Result<(), containerd::Error> {
    let start = rt::now();
    loop {
        match client.create_lease(lease, LEASE_EXPIRY).await {
            Ok(()) => return Ok(()),
            Err(e) if e.is_unavailable() && rt::now().duration_since(start) < RUNTIME_WAIT => {
                rt::sleep(Duration::from_secs(1)).await;
            }
            Err(e) => return Err(e),
        }
    }
}

async fn import(
    archive: &Archive,
    client: &Client,
    lease: &str,
) -> Result<Imported, containerd::Error> {
    let mut done = Imported::default();
    for image in &archive.images {
        for blob in &image.blobs {
            // A blob containerd has is not sent again: a write that names it is refused at once
            // (AlreadyExists) and containerd adds the blob to the lease, so nothing collects it
            // before the image names it. Its labels are those of its first import.
            let data: Box<dyn std::io::Read + Send> = match &blob.source {
                Source::Entry { offset } => {
                    Box::new(archive.entry_reader(*offset, blob.desc.size).map_err(|e| {
                        containerd::Error::Write {
                            digest: blob.desc.digest.clone(),
                            reason: format!("reading the archive: {e}"),
                        }
                    })?)
                }
                Source::Bytes(b) => Box::new(std::io::Cursor::new(b.clone())),
            };
            let up = containerd::Upload {
                digest: &blob.desc.digest,
                size: blob.desc.size,
                labels: &blob.labels,
                data,
            };
            if client.write_blob(up, lease).await? {
                done.written += 1;
            } else {
                done.present += 1;
            }
        }
        let target = containerd::images::Descriptor {
            media_type: image.target.media_type.clone(),
            digest: image.target.digest.clone(),
            size: i64::try_from(image.target.size).unwrap_or(i64::MAX),
            annotations: Default::default(),
        };
        for name in &image.names {
            client
                .put_image(
                    name,
                    target.clone(),
                    &[
                        (containerd::MANAGED_LABEL, containerd::MANAGED_VALUE),
                        (containerd::PINNED_LABEL, containerd::PINNED_VALUE),
                    ],
                    lease,
                )
                .await?;
            done.images.push(Named {
                name: name.clone(),
                digest: image.target.digest.clone(),
            });
        }
    }
    Ok(done)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A pull list's image pulled through the CRI with the node's credentials; the pin (no
    /// containerd here) fails, so it backs off from 10 s, is not tried before it is due, is
    /// only pinned (not pulled) the next time, and is dropped when its list no longer names it.
    #[test]
    fn listed_images_pull_with_the_node_credentials_and_back_off() {
        let clock = rt::FakeClock::install();
        let dir = std::env::temp_dir().join(format!("picolet-pull-pass-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        let (images, root) = (dir.join("images"), dir.join("root"));
        std::fs::create_dir_all(&images).unwrap();
        std::fs::create_dir_all(&root).unwrap();
        std::fs::write(
            root.join("config.json"),
            br#"{"auths":{"reg.local:5000":{"username":"node","password":"pw"}}}"#,
        )
        .unwrap();
        let image = "reg.local:5000/app:1";
        std::fs::write(images.join("fleet.txt"), format!("# fleet\n{image}\n")).unwrap();
        let fake = Rc::new(crate::cri::fake::FakeRuntime::new());
        fake.set_pullable(image);
        fake.require_auth(image, "node", "pw");
        let client = Client::new(&dir.join("no-containerd.sock"), Duration::from_secs(1));
        let mut p = Preloader::new(images.clone(), client, None).with_puller(Puller {
            images: fake.clone(),
            root_dir: root.clone(),
            providers: None,
        });
        rt::block_on(p.pull_pass());
        assert_eq!(fake.calls("PullImage"), 1);
        assert!(
            fake.images()
                .iter()
                .any(|i| i.repo_tags.iter().any(|t| t == image)),
            "pulled with the node's credentials"
        );
        assert!(p.failures.failing(image), "the pin failed: no containerd");
        assert_eq!(p.next_retry(), Some(Duration::from_secs(10)));
        // Not due yet: not tried.
        clock.advance(Duration::from_secs(9));
        rt::block_on(p.pull_pass());
        assert_eq!(p.failures.attempts(image), 1);
        // Due: the image is there now, so it is not pulled again, only pinned (failing again).
        clock.advance(Duration::from_secs(1));
        rt::block_on(p.pull_pass());
        assert_eq!(p.failures.attempts(image), 2);
        assert_eq!(fake.calls("PullImage"), 1);
        assert_eq!(p.next_retry(), Some(Duration::from_secs(20)));
        // The list replaced by one naming another image: the first is no longer waited for.
        std::fs::write(images.join("fleet.txt"), "reg.local:5000/other:2\n").unwrap();
        rt::block_on(p.pull_pass());
        assert!(!p.failures.failing(image));
        assert!(!p.attempted.contains_key(image));
        assert!(p.failures.failing("reg.local:5000/other:2"));
        assert_eq!(fake.calls("PullImage"), 2);
        // The list removed: nothing is waited for.
        std::fs::remove_file(images.join("fleet.txt")).unwrap();
        rt::block_on(p.pull_pass());
        assert_eq!(p.next_retry(), None);
        std::fs::remove_dir_all(&dir).unwrap();
    }

    #[test]
    fn archives_in_name_order_hidden_and_others_left_alone() {
        let dir = std::env::temp_dir().join(format!("picolet-preload-list-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(dir.join("sub.tar")).unwrap();
        for f in [
            "b.tar.gz",
            "a.tar",
            ".hidden.tar",
            "notes.txt",
            "c.tgz",
            "d.tar.zst",
        ] {
            std::fs::write(dir.join(f), b"").unwrap();
        }
        let names: Vec<String> = archives(&dir)
            .unwrap()
            .iter()
            .map(|p| p.file_name().unwrap().to_string_lossy().into_owned())
            .collect();
        assert_eq!(names, ["a.tar", "b.tar.gz", "c.tgz", "d.tar.zst"]);
        assert!(archives(&dir.join("missing")).unwrap().is_empty());
        std::fs::remove_dir_all(&dir).unwrap();
    }
}
