//! The preload pass: every image archive in the directory, read and checked, imported into
//! containerd under the names it carries, each name pinned. A damaged archive is refused with
//! its file and reason; the others are imported; nothing running is touched.

use std::path::{Path, PathBuf};
use std::time::Duration;

use super::archive::{self, Archive, Platform, Source};
use super::containerd::{self, Client};
use crate::rt;

/// How long the pass waits for containerd to answer at all (it may start with picolet).
const RUNTIME_WAIT: Duration = Duration::from_secs(30);
/// How long a lease holds an import's blobs if picolet dies before it names them.
const LEASE_EXPIRY: Duration = Duration::from_secs(3600);

/// What became of one archive.
#[derive(Debug)]
pub struct Outcome {
    pub file: PathBuf,
    /// The names imported and pinned, or why the archive was refused.
    pub result: Result<Imported, String>,
}

#[derive(Debug, Default, PartialEq, Eq)]
pub struct Imported {
    pub names: Vec<String>,
    /// Blobs written, and blobs containerd held already.
    pub written: usize,
    pub present: usize,
}

/// The archives of `dir`, in name order: `.tar`, `.tar.gz`, `.tgz`, `.tar.zst`, `.tzst`
/// (refused by the reader until zstd is supported); hidden files and others are left alone.
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

fn stamp(p: &Path) -> Option<Stamp> {
    use std::os::unix::fs::MetadataExt;
    let m = std::fs::metadata(p).ok()?;
    Some((m.dev(), m.ino(), m.size(), m.mtime(), m.mtime_nsec()))
}

/// The preload directory and the archive versions already handled (imported or refused): an
/// archive is read again only when it is added or replaced.
pub struct Preloader {
    dir: PathBuf,
    client: Client,
    seen: std::collections::HashMap<PathBuf, Stamp>,
}

impl Preloader {
    pub fn new(dir: PathBuf, client: Client) -> Preloader {
        Preloader {
            dir,
            client,
            seen: Default::default(),
        }
    }

    /// Imports every archive of the directory not handled yet in its present version; logs
    /// each result and returns them. A directory that does not exist is no error.
    pub async fn pass(&mut self) -> Vec<Outcome> {
        let d = self.dir.clone();
        let files = match rt::unblock(move || {
            archives(&d).map(|files| {
                files
                    .into_iter()
                    .filter_map(|f| stamp(&f).map(|s| (f, s)))
                    .collect::<Vec<_>>()
            })
        })
        .await
        {
            Ok(f) => f,
            Err(e) => {
                log::error!("{e}; no image preloaded");
                return Vec::new();
            }
        };
        let platform = Platform::node();
        let mut outcomes = Vec::new();
        for (file, st) in files {
            if self.seen.get(&file) == Some(&st) {
                continue;
            }
            let result = import_file(&file, &self.dir, &platform, &self.client).await;
            match &result {
                Ok(i) => log::info!(
                    "preloaded {}: {} (pinned; {} blobs written, {} present)",
                    file.display(),
                    i.names.join(", "),
                    i.written,
                    i.present
                ),
                Err(e) => log::error!("{e}"),
            }
            // A runtime that did not answer: tried again at the next pass.
            if !result.as_ref().is_err_and(|e| e.contains(NOT_YET)) {
                self.seen.insert(file.clone(), st);
            }
            outcomes.push(Outcome { file, result });
        }
        outcomes
    }

    /// Imports archives as they are added or replaced (closed after writing, or moved in),
    /// and at every [`RESCAN`]; runs until dropped.
    pub async fn watch(mut self) {
        let mut w = None;
        loop {
            if w.is_none() {
                w = watch(&self.dir).ok();
            }
            match &mut w {
                Some((inotify, ready)) => {
                    let _ = rt::timeout(RESCAN, ready.readable()).await;
                    rt::sleep(DEBOUNCE).await;
                    if !drain(inotify) {
                        w = None; // the directory went away: watched again when it is back
                    }
                }
                None => rt::sleep(RESCAN).await,
            }
            self.pass().await;
        }
    }
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
) -> Result<Imported, String> {
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
    .map_err(|e| e.to_string())?;
    let unnamed: Vec<&str> = archive
        .images
        .iter()
        .filter(|i| i.names.is_empty())
        .map(|i| i.target.digest.as_str())
        .collect();
    if !unnamed.is_empty() {
        return Err(format!(
            "image archive {}: image {} has no name (an index entry needs the \
             io.containerd.image.name or a full org.opencontainers.image.ref.name annotation; \
             a docker save archive, RepoTags)",
            file.display(),
            unnamed.join(", ")
        ));
    }
    let lease = format!("picolet-preload-{}-{}", std::process::id(), rt::now_nanos());
    create_lease(client, &lease).await.map_err(|e| {
        if e.is_unavailable() {
            format!("image archive {}{NOT_YET}{e}", file.display())
        } else {
            format!("image archive {}: not imported: {e}", file.display())
        }
    })?;
    let result = import(&archive, client, &lease).await;
    if let Err(e) = client.delete_lease(&lease).await {
        log::warn!("deleting containerd lease {lease}: {e} (it expires by itself)");
    }
    result.map_err(|e| format!("image archive {}: not imported: {e}", file.display()))
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
            done.names.push(name.clone());
        }
    }
    Ok(done)
}

#[cfg(test)]
mod tests {
    use super::*;

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
