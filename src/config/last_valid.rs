//! The last valid content of each manifest, kept under `<root-dir>/static-pods/`, so a pod
//! whose file turned invalid keeps running across picolet restarts and reboots too, not only
//! while picolet stays up.
//!
//! One file per manifest path, named by a hash of the path, holding the path and the content.
//! Written atomically (temporary file, fsync, rename, fsync of the directory): a crash leaves
//! the old copy or the new one, never a torn file. A temporary file left by a crash is never
//! loaded (entries are opened by name) and is removed by the next prune.

use std::fs;
use std::io;
use std::path::{Path, PathBuf};

use crate::hash;

#[derive(serde::Serialize, serde::Deserialize)]
struct Saved {
    path: String,
    content: String,
}

fn entry(store: &Path, manifest: &Path) -> PathBuf {
    let h = hash::fnv1a64(&[manifest.as_os_str().as_encoded_bytes()]);
    store.join(format!("{h:016x}.json"))
}

/// Saves the content of a manifest that was just found valid.
pub fn save(store: &Path, manifest: &Path, content: &str) -> io::Result<()> {
    // The store directory is created by the atomic write, fsynced into its parent.
    let saved = Saved {
        path: manifest.display().to_string(),
        content: content.to_owned(),
    };
    let bytes = serde_json::to_vec(&saved).map_err(io::Error::other)?;
    crate::atomic_file::write(&entry(store, manifest), &bytes)
}

/// The saved content of a manifest, if any (and if it is the one for this exact path).
pub fn load(store: &Path, manifest: &Path) -> Option<String> {
    // A saved manifest was within the manifest limit; JSON escaping at most doubles it.
    let bound = crate::limits::Limits {
        max_bytes: 2 * crate::limits::Limits::MANIFEST.max_bytes + 64 * 1024,
        ..crate::limits::Limits::MANIFEST
    };
    let bytes = crate::limits::read_file(&entry(store, manifest), &bound).ok()?;
    let saved: Saved = serde_json::from_slice(&bytes).ok()?;
    (saved.path == manifest.display().to_string()).then_some(saved.content)
}

/// Removes the saved copies of manifests that are gone.
pub fn prune<'a>(store: &Path, keep: impl Iterator<Item = &'a PathBuf>) {
    let keep: std::collections::HashSet<PathBuf> = keep.map(|m| entry(store, m)).collect();
    let Ok(rd) = fs::read_dir(store) else { return };
    for e in rd.flatten() {
        let p = e.path();
        if !keep.contains(&p)
            && let Err(err) = fs::remove_file(&p)
        {
            log::warn!("removing {}: {err}", p.display());
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn save_load_prune() {
        let d = std::env::temp_dir().join(format!("picolet-lv-{}", std::process::id()));
        let _ = fs::remove_dir_all(&d);
        let (a, b) = (PathBuf::from("/m/a.yaml"), PathBuf::from("/m/b.yaml"));
        save(&d, &a, "A1").unwrap();
        save(&d, &a, "A2").unwrap();
        save(&d, &b, "B").unwrap();
        assert_eq!(load(&d, &a).as_deref(), Some("A2"));
        assert_eq!(load(&d, Path::new("/m/c.yaml")), None);
        assert_eq!(
            fs::read_dir(&d).unwrap().count(),
            2,
            "no temporary file left behind"
        );
        prune(&d, [a.clone()].iter());
        assert_eq!(load(&d, &b), None);
        assert_eq!(load(&d, &a).as_deref(), Some("A2"));
        fs::remove_dir_all(&d).unwrap();
    }
}
