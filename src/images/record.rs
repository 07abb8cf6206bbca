//! The record of the archives already handled (`<root-dir>/checkpoints/preloaded-images.json`):
//! per file, the version read (size and modification time) and what became of it, the images it
//! gave (name and manifest digest) or why it was refused. At start an archive whose version
//! matches its record is not read and hashed again: when it was imported and every image it gave
//! is still in the runtime under the same manifest, it is skipped; when it was refused, it stays
//! refused until it is replaced. Written whole (`atomic_file`), so a power cut leaves the old
//! record or the new one; a record that cannot be read is dropped with a warning and every
//! archive is read again (containerd keeps the blobs it has, so nothing is written twice).

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use serde::{Deserialize, Serialize};

/// What tells an archive's versions apart across restarts: its size and modification time.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Version {
    pub size: u64,
    /// Unix nanoseconds.
    pub mtime: i64,
}

impl Version {
    pub fn of(meta: &std::fs::Metadata) -> Version {
        use std::os::unix::fs::MetadataExt;
        Version {
            size: meta.size(),
            mtime: meta
                .mtime()
                .saturating_mul(1_000_000_000)
                .saturating_add(meta.mtime_nsec()),
        }
    }
}

/// An image an archive gave: its name and the digest of its manifest (the record's target).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Named {
    pub name: String,
    pub digest: String,
}

/// One archive's entry.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Entry {
    #[serde(flatten)]
    pub version: Version,
    /// The images imported from it; empty when it was refused.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub images: Vec<Named>,
    /// Why it was refused (the archive's own fault: damaged, truncated, no image for the node).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub refused: Option<String>,
}

/// The record, by archive path.
#[derive(Debug, Default, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Record {
    #[serde(default)]
    pub archives: BTreeMap<PathBuf, Entry>,
}

impl Record {
    /// The record at `path`: empty when there is none, or (with a warning naming the file and
    /// the reason) when it cannot be read.
    pub fn load(path: &Path) -> Record {
        match Record::read(path) {
            Ok(r) => r,
            Err(e) => {
                log::warn!("{e}; every image archive is read again");
                Record::default()
            }
        }
    }

    /// The record at `path`, empty when there is none.
    pub fn read(path: &Path) -> Result<Record, String> {
        let bytes = match std::fs::read(path) {
            Ok(b) => b,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(Record::default()),
            Err(e) => return Err(format!("image preload record {}: {e}", path.display())),
        };
        serde_json::from_slice(&bytes)
            .map_err(|e| format!("image preload record {}: {e}", path.display()))
    }

    /// Writes the record to `path` whole (a temporary file renamed over it, both fsynced).
    pub fn save(&self, path: &Path) -> Result<(), String> {
        let bytes = serde_json::to_vec_pretty(self).map_err(|e| e.to_string())?;
        if let Some(dir) = path.parent() {
            crate::atomic_file::create_dir_all(dir)
                .map_err(|e| format!("image preload record {}: {e}", dir.display()))?;
        }
        crate::atomic_file::write(path, &bytes)
            .map_err(|e| format!("image preload record {}: {e}", path.display()))
    }

    /// The entry of `file` when it was made for this version of it.
    pub fn matching(&self, file: &Path, version: Version) -> Option<&Entry> {
        self.archives.get(file).filter(|e| e.version == version)
    }

    /// Drops the entries of files not in `present`; true when any was dropped.
    pub fn retain_files(&mut self, present: &[PathBuf]) -> bool {
        let before = self.archives.len();
        self.archives.retain(|f, _| present.contains(f));
        self.archives.len() != before
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn tmp(name: &str) -> PathBuf {
        let d = std::env::temp_dir().join(format!("picolet-record-{name}-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&d);
        d
    }

    fn imported(size: u64, mtime: i64) -> Entry {
        Entry {
            version: Version { size, mtime },
            images: vec![Named {
                name: "docker.io/library/app:1".into(),
                digest: format!("sha256:{}", "a".repeat(64)),
            }],
            refused: None,
        }
    }

    #[test]
    fn saved_whole_and_read_back() {
        let dir = tmp("save");
        let path = dir.join("checkpoints").join("preloaded-images.json");
        assert_eq!(Record::read(&path).unwrap(), Record::default());
        let mut r = Record::default();
        r.archives.insert("/i/app.tar".into(), imported(10, 5));
        r.archives.insert(
            "/i/bad.tar".into(),
            Entry {
                version: Version { size: 3, mtime: 7 },
                images: Vec::new(),
                refused: Some("truncated".into()),
            },
        );
        r.save(&path).unwrap();
        assert_eq!(Record::read(&path).unwrap(), r);
        // Nothing but the record is left in its directory (no temporary file).
        let names: Vec<_> = std::fs::read_dir(path.parent().unwrap())
            .unwrap()
            .map(|e| e.unwrap().file_name())
            .collect();
        assert_eq!(names, ["preloaded-images.json"]);
        let text = std::fs::read_to_string(&path).unwrap();
        assert!(text.contains("\"mtime\": 5"), "{text}");
        assert!(text.contains("\"refused\": \"truncated\""), "{text}");
        std::fs::remove_dir_all(&dir).unwrap();
    }

    #[test]
    fn a_damaged_record_is_dropped_naming_the_file() {
        let dir = tmp("damaged");
        std::fs::create_dir_all(&dir).unwrap();
        let path = dir.join("preloaded-images.json");
        std::fs::write(&path, b"{\"archives\": {\"/i/a.tar\": {\"size\": ").unwrap();
        let e = Record::read(&path).unwrap_err();
        assert!(
            e.starts_with(&format!("image preload record {}: ", path.display())),
            "{e}"
        );
        assert_eq!(Record::load(&path), Record::default());
        std::fs::remove_dir_all(&dir).unwrap();
    }

    #[test]
    fn an_entry_matches_only_the_version_it_was_made_for() {
        let mut r = Record::default();
        r.archives.insert("/i/app.tar".into(), imported(10, 5));
        let f = Path::new("/i/app.tar");
        assert!(r.matching(f, Version { size: 10, mtime: 5 }).is_some());
        assert!(r.matching(f, Version { size: 11, mtime: 5 }).is_none());
        assert!(r.matching(f, Version { size: 10, mtime: 6 }).is_none());
        assert!(
            r.matching(Path::new("/i/other.tar"), Version { size: 10, mtime: 5 })
                .is_none()
        );
    }

    #[test]
    fn entries_of_removed_files_are_dropped() {
        let mut r = Record::default();
        r.archives.insert("/i/a.tar".into(), imported(1, 1));
        r.archives.insert("/i/b.tar".into(), imported(2, 2));
        assert!(!r.retain_files(&["/i/a.tar".into(), "/i/b.tar".into()]));
        assert!(r.retain_files(&["/i/b.tar".into()]));
        assert_eq!(
            r.archives.keys().collect::<Vec<_>>(),
            [Path::new("/i/b.tar")]
        );
    }

    #[test]
    fn the_version_of_a_file() {
        let dir = tmp("version");
        std::fs::create_dir_all(&dir).unwrap();
        let f = dir.join("a.tar");
        std::fs::write(&f, b"12345").unwrap();
        let v = Version::of(&std::fs::metadata(&f).unwrap());
        assert_eq!(v.size, 5);
        let t = std::time::SystemTime::UNIX_EPOCH + std::time::Duration::new(1_700_000_000, 42);
        std::fs::File::options()
            .write(true)
            .open(&f)
            .unwrap()
            .set_modified(t)
            .unwrap();
        let v = Version::of(&std::fs::metadata(&f).unwrap());
        assert_eq!(v.mtime, 1_700_000_000_000_000_042);
        std::fs::remove_dir_all(&dir).unwrap();
    }
}
