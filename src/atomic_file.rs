//! Files that survive a crash or a power cut at any instant: written to a temporary file beside
//! the target, fsynced, renamed over the target, and the directory fsynced, so a reader finds
//! the old content or the new one, never a torn mix. Directories created on the way are fsynced
//! into their parents too, or a power cut could lose the directory with the file in it.
//!
//! The temporary file is `.<name>.tmp` in the same directory (a rename is atomic only within
//! one filesystem). Readers open targets by their exact name, so a temporary file left by a
//! crash is never read; the next write of the same target truncates it.
#![cfg_attr(
    not(any(feature = "file-source", feature = "apiserver")),
    allow(
        dead_code,
        reason = "without a file writer, only the root directory is created"
    )
)]

use std::fs;
use std::io::{self, Write};
use std::path::{Path, PathBuf};

/// The steps of a write, in the order they happen (for the hook tests observe them by).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Step {
    /// A missing directory was created.
    DirCreated,
    /// The directory holding a newly created one was fsynced.
    ParentSynced,
    /// The temporary file holds the new bytes (in the page cache).
    Written,
    /// The temporary file's data is on disk.
    FileSynced,
    /// The temporary file has the target's name (in the page cache).
    Renamed,
    /// The rename is on disk.
    DirSynced,
}

/// Replaces `dst` with `bytes` atomically and durably.
pub fn write(dst: &Path, bytes: &[u8]) -> io::Result<()> {
    write_observed(dst, bytes, &mut |_, _| Ok(()))
}

/// [`write`] with the file's permissions set to `mode` (0600 for what holds secrets) before
/// any byte is written.
#[cfg(feature = "apiserver")]
pub fn write_mode(dst: &Path, bytes: &[u8], mode: u32) -> io::Result<()> {
    write_inner(dst, bytes, Some(mode), &mut |_, _| Ok(()))
}

/// Creates a directory and its missing ancestors durably (each fsynced into its parent).
pub fn create_dir_all(dir: &Path) -> io::Result<()> {
    ensure_dir(dir, &mut |_, _| Ok(()))
}

/// The temporary file `write` uses for `dst`.
pub fn temp_path(dst: &Path) -> PathBuf {
    let dir = dst.parent().unwrap_or(Path::new("."));
    let mut name = std::ffi::OsString::from(".");
    name.push(dst.file_name().unwrap_or_default());
    name.push(".tmp");
    dir.join(name)
}

/// The temporary file, created afresh (a leftover is removed) with `mode` from the start, so
/// no byte is ever readable under looser permissions.
fn create_temp(tmp: &Path, mode: Option<u32>) -> io::Result<fs::File> {
    use std::os::unix::fs::{OpenOptionsExt, PermissionsExt};
    let Some(m) = mode else {
        return fs::File::create(tmp);
    };
    let _ = fs::remove_file(tmp);
    let f = fs::OpenOptions::new()
        .write(true)
        .create_new(true)
        .mode(m)
        .open(tmp)?;
    // The umask may have taken bits away from `mode`; set it exactly.
    f.set_permissions(fs::Permissions::from_mode(m))?;
    Ok(f)
}

fn ctx(what: &str, p: &Path, e: io::Error) -> io::Error {
    io::Error::new(e.kind(), format!("{what} {}: {e}", p.display()))
}

fn sync_dir(dir: &Path) -> io::Result<()> {
    fs::File::open(dir)
        .and_then(|d| d.sync_all())
        .map_err(|e| ctx("fsync of directory", dir, e))
}

/// Creates `dir` and its missing ancestors, each fsynced into its parent.
fn ensure_dir(dir: &Path, hook: &mut dyn FnMut(Step, &Path) -> io::Result<()>) -> io::Result<()> {
    if dir.as_os_str().is_empty() || dir.is_dir() {
        return Ok(());
    }
    let parent = dir.parent().unwrap_or(Path::new("/"));
    ensure_dir(parent, hook)?;
    match fs::create_dir(dir) {
        Ok(()) => {}
        Err(e) if e.kind() == io::ErrorKind::AlreadyExists => return Ok(()),
        Err(e) => return Err(ctx("creating", dir, e)),
    }
    hook(Step::DirCreated, dir)?;
    sync_dir(if parent.as_os_str().is_empty() {
        Path::new(".")
    } else {
        parent
    })?;
    hook(Step::ParentSynced, parent)
}

/// [`write`], calling `hook` after each step; an error from the hook stops the write there, as
/// a failing system call would.
pub fn write_observed(
    dst: &Path,
    bytes: &[u8],
    hook: &mut dyn FnMut(Step, &Path) -> io::Result<()>,
) -> io::Result<()> {
    write_inner(dst, bytes, None, hook)
}

fn write_inner(
    dst: &Path,
    bytes: &[u8],
    mode: Option<u32>,
    hook: &mut dyn FnMut(Step, &Path) -> io::Result<()>,
) -> io::Result<()> {
    let dir = match dst.parent() {
        Some(d) if !d.as_os_str().is_empty() => d,
        _ => Path::new("."),
    };
    ensure_dir(dir, hook)?;
    let tmp = temp_path(dst);
    let res = (|| {
        let mut f = create_temp(&tmp, mode).map_err(|e| ctx("creating", &tmp, e))?;
        f.write_all(bytes).map_err(|e| ctx("writing", &tmp, e))?;
        hook(Step::Written, &tmp)?;
        f.sync_all().map_err(|e| ctx("fsync of", &tmp, e))?;
        hook(Step::FileSynced, &tmp)?;
        fs::rename(&tmp, dst).map_err(|e| ctx("renaming to", dst, e))?;
        hook(Step::Renamed, dst)
    })();
    if let Err(e) = res {
        let _ = fs::remove_file(&tmp);
        return Err(e);
    }
    sync_dir(dir)?;
    hook(Step::DirSynced, dir)
}

/// Reads back a JSON file written by [`write`] (a checkpoint): `Ok(None)` when there is none, an
/// error naming the file when it is unreadable, larger than `max_bytes`, beyond the apiserver
/// limits, or not the expected JSON.
pub fn read_json<T: serde::de::DeserializeOwned>(
    path: &Path,
    max_bytes: usize,
) -> Result<Option<T>, String> {
    let at = |e: &dyn std::fmt::Display| format!("{}: {e}", path.display());
    let bytes = match fs::read(path) {
        Ok(b) => b,
        Err(e) if e.kind() == io::ErrorKind::NotFound => return Ok(None),
        Err(e) => return Err(at(&e)),
    };
    if bytes.len() > max_bytes {
        return Err(at(&format!("larger than {max_bytes} bytes")));
    }
    crate::limits::check(
        &bytes,
        crate::limits::Syntax::Json,
        &crate::limits::Limits::API,
    )
    .map_err(|e| at(&e))?;
    serde_json::from_slice(&bytes).map(Some).map_err(|e| at(&e))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn scratch(tag: &str) -> PathBuf {
        let d = std::env::temp_dir().join(format!("picolet-atomic-{tag}-{}", std::process::id()));
        let _ = fs::remove_dir_all(&d);
        d
    }

    #[test]
    fn replaces_and_leaves_no_temporary_file() {
        let d = scratch("replace");
        let f = d.join("sub").join("x.json");
        write(&f, b"one").unwrap();
        write(&f, b"two").unwrap();
        assert_eq!(fs::read(&f).unwrap(), b"two");
        assert_eq!(fs::read_dir(d.join("sub")).unwrap().count(), 1);
        fs::remove_dir_all(&d).unwrap();
    }

    /// The order that makes a power cut harmless, under the usual model of a journaling
    /// filesystem: file data reaches the disk only when fsynced, a directory entry (a rename, a
    /// new directory) only when its directory is fsynced. Renaming before the data is synced
    /// could leave the target's name on an empty or partial file; returning before the
    /// directory is synced could lose a write the caller believes done.
    #[test]
    fn data_is_synced_before_the_rename_and_the_rename_before_returning() {
        let d = scratch("order");
        let f = d.join("a").join("b").join("x.json");
        let mut trace = Vec::new();
        write_observed(&f, b"{}", &mut |s, p| {
            trace.push((s, p.to_owned()));
            Ok(())
        })
        .unwrap();
        let steps: Vec<Step> = trace.iter().map(|(s, _)| *s).collect();
        use Step::*;
        // d, d/a and d/b were all missing: each created, then fsynced into its parent.
        assert_eq!(
            steps,
            [
                DirCreated,
                ParentSynced,
                DirCreated,
                ParentSynced,
                DirCreated,
                ParentSynced,
                Written,
                FileSynced,
                Renamed,
                DirSynced
            ]
        );
        assert_eq!(trace[0].1, d);
        assert_eq!(trace[1].1, std::env::temp_dir());
        assert_eq!(trace[5].1, d.join("a"));
        assert_eq!(trace[6].1, temp_path(&f));
        assert_eq!(trace[8].1, f);
        assert_eq!(trace[9].1, d.join("a").join("b"));

        // Existing directories: only the file's steps.
        trace.clear();
        write_observed(&f, b"{\"v\":2}", &mut |s, p| {
            trace.push((s, p.to_owned()));
            Ok(())
        })
        .unwrap();
        let steps: Vec<Step> = trace.iter().map(|(s, _)| *s).collect();
        assert_eq!(steps, [Written, FileSynced, Renamed, DirSynced]);
        assert_eq!(fs::read(&f).unwrap(), b"{\"v\":2}");
        fs::remove_dir_all(&d).unwrap();
    }

    /// A write that fails at any step before the rename leaves the old content in place and
    /// no temporary file; the error names the file.
    #[test]
    fn a_failed_write_keeps_the_old_content() {
        let d = scratch("fail");
        let f = d.join("x.json");
        write(&f, b"old").unwrap();
        for at in [Step::Written, Step::FileSynced] {
            let e = write_observed(&f, b"new", &mut |s, _| {
                if s == at {
                    Err(io::Error::other(format!("injected at {s:?}")))
                } else {
                    Ok(())
                }
            })
            .unwrap_err();
            assert!(e.to_string().contains("injected"), "{e}");
            assert_eq!(fs::read(&f).unwrap(), b"old", "after a failure at {at:?}");
            assert!(!temp_path(&f).exists(), "temporary file left after {at:?}");
        }
        // A real failure: the target is a directory, so the rename fails, naming it.
        let e = write(&d, b"x").unwrap_err();
        assert!(e.to_string().contains(&d.display().to_string()), "{e}");
        fs::remove_dir_all(&d).unwrap();
    }

    /// What a crash leaves (a temporary file beside the target) is never read as the target,
    /// and the next write replaces it.
    #[test]
    fn a_leftover_temporary_file_is_ignored_and_replaced() {
        let d = scratch("leftover");
        let f = d.join("x.json");
        write(&f, b"good").unwrap();
        fs::write(temp_path(&f), b"torn {").unwrap();
        assert_eq!(fs::read(&f).unwrap(), b"good");
        write(&f, b"newer").unwrap();
        assert_eq!(fs::read(&f).unwrap(), b"newer");
        assert!(!temp_path(&f).exists());
        fs::remove_dir_all(&d).unwrap();
    }
}
