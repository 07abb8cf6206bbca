//! Puts a volume's files on disk so that a container never sees a half-updated set, with the
//! kubelet's AtomicWriter layout (so tools that know it, and applications that watch `..data`,
//! work unchanged):
//!
//! ```text
//! <dir>/..2026_11_24_21_40_02.123456789/   the files of one version, written completely first
//! <dir>/..data -> ..2026_11_24_21_40_02.123456789   swapped by rename(2): the atomic step
//! <dir>/key -> ..data/key                  what the user sees, through ..data
//! ```
//!
//! Nothing is rewritten when the payload equals what is there (every pod sync calls this).

use std::collections::BTreeSet;
use std::fs;
use std::io::{self, Write};
use std::os::unix::fs::{DirBuilderExt, MetadataExt, OpenOptionsExt, PermissionsExt, symlink};
use std::path::{Component, Path};

use crate::projection::Payload;

const DATA: &str = "..data";
const DATA_TMP: &str = "..data_tmp";

/// Refuses a path that could leave the volume or collide with the writer's own names.
pub fn check_path(p: &str) -> Result<(), String> {
    let path = Path::new(p);
    if p.is_empty() {
        return Err("empty path".into());
    }
    if path.is_absolute() {
        return Err(format!("{p:?}: must be a relative path"));
    }
    if p.len() > 4096 {
        return Err(format!("{p:?}: longer than 4096 bytes"));
    }
    for c in path.components() {
        match c {
            Component::Normal(s) if s.len() > 255 => {
                return Err(format!("{p:?}: an element is longer than 255 bytes"));
            }
            Component::Normal(_) => {}
            _ => return Err(format!("{p:?}: must not contain '..' or '.' elements")),
        }
    }
    if p.starts_with("..") {
        return Err(format!("{p:?}: must not start with '..'"));
    }
    Ok(())
}

fn top_level(p: &str) -> &str {
    p.split('/').next().unwrap_or(p)
}

/// True when the version directory holds exactly the payload (content and modes).
fn matches(version: &Path, payload: &Payload) -> bool {
    let mut seen = 0usize;
    for (p, f) in payload {
        let path = version.join(p);
        let Ok(md) = fs::symlink_metadata(&path) else {
            return false;
        };
        if !md.is_file() || md.permissions().mode() & 0o7777 != f.mode {
            return false;
        }
        if f.uid.is_some_and(|u| u != md.uid()) || f.gid.is_some_and(|g| g != md.gid()) {
            return false;
        }
        match fs::read(&path) {
            Ok(d) if d == f.data => seen += 1,
            _ => return false,
        }
    }
    // No extra files left from an earlier payload.
    count_files(version) == seen
}

fn count_files(dir: &Path) -> usize {
    let Ok(rd) = fs::read_dir(dir) else { return 0 };
    rd.filter_map(Result::ok)
        .map(|e| match e.file_type() {
            Ok(t) if t.is_dir() => count_files(&e.path()),
            Ok(_) => 1,
            Err(_) => 0,
        })
        .sum()
}

fn version_name(unix_nanos: i64) -> String {
    let t = crate::api::time::rfc3339(unix_nanos);
    // "2026-11-24T21:40:02Z" → "..2026_11_24_21_40_02.<nanos>", upstream's format.
    let stamp: String = t
        .trim_end_matches('Z')
        .chars()
        .map(|c| if c.is_ascii_digit() { c } else { '_' })
        .collect();
    format!("..{stamp}.{:09}", unix_nanos.rem_euclid(1_000_000_000))
}

/// Writes `payload` into `dir` (created 0755 when missing). Returns whether anything changed.
pub fn write(dir: &Path, payload: &Payload, now_nanos: i64) -> io::Result<bool> {
    for p in payload.keys() {
        check_path(p).map_err(|m| io::Error::new(io::ErrorKind::InvalidInput, m))?;
    }
    fs::DirBuilder::new()
        .recursive(true)
        .mode(0o755)
        .create(dir)?;
    let data = dir.join(DATA);
    let old = fs::read_link(&data).ok();
    let wanted: BTreeSet<&str> = payload.keys().map(|p| top_level(p)).collect();
    if let Some(old) = &old
        && matches(&dir.join(old), payload)
    {
        // The same content: only make sure every user-visible link is there.
        let mut changed = false;
        for t in &wanted {
            if fs::symlink_metadata(dir.join(t)).is_err() {
                symlink(Path::new(DATA).join(t), dir.join(t))?;
                changed = true;
            }
        }
        return Ok(changed);
    }

    // 1. The new version, complete and synced, beside the old one.
    let mut name = version_name(now_nanos);
    let mut n = 0u32;
    while dir.join(&name).exists() {
        n += 1;
        name = format!("{}-{n}", version_name(now_nanos));
    }
    let version = dir.join(&name);
    fs::DirBuilder::new().mode(0o755).create(&version)?;
    fs::set_permissions(&version, fs::Permissions::from_mode(0o755))?;
    for (p, f) in payload {
        let path = version.join(p);
        if let Some(parent) = path.parent() {
            fs::DirBuilder::new()
                .recursive(true)
                .mode(0o755)
                .create(parent)?;
        }
        let mut file = fs::OpenOptions::new()
            .write(true)
            .create_new(true)
            .mode(f.mode)
            .open(&path)?;
        file.write_all(&f.data)?;
        if f.uid.is_some() || f.gid.is_some() {
            std::os::unix::fs::fchown(&file, f.uid, f.gid)?;
        }
        // The umask may have taken bits away (and chown clears set-id bits).
        file.set_permissions(fs::Permissions::from_mode(f.mode))?;
        file.sync_all()?;
    }
    fs::File::open(&version)?.sync_all()?;

    // 2. Swap ..data to it in one rename.
    let tmp = dir.join(DATA_TMP);
    let _ = fs::remove_file(&tmp);
    symlink(&name, &tmp)?;
    fs::rename(&tmp, &data)?;

    // 3. User-visible links for new names; links whose name left the payload go.
    for t in &wanted {
        let link = dir.join(t);
        if fs::symlink_metadata(&link).is_err() {
            symlink(Path::new(DATA).join(t), &link)?;
        }
    }
    for e in fs::read_dir(dir)?.filter_map(Result::ok) {
        let fname = e.file_name();
        let Some(fname) = fname.to_str() else {
            continue;
        };
        if fname.starts_with("..") || wanted.contains(fname) {
            continue;
        }
        if e.file_type().is_ok_and(|t| t.is_symlink()) {
            fs::remove_file(e.path())?;
        }
    }
    fs::File::open(dir)?.sync_all()?;

    // 4. The old version, and any left by a crash between steps.
    for e in fs::read_dir(dir)?.filter_map(Result::ok) {
        let fname = e.file_name();
        let Some(fname) = fname.to_str() else {
            continue;
        };
        if fname.starts_with("..") && fname != DATA && fname != name && fname != DATA_TMP {
            let _ = fs::remove_dir_all(e.path());
        }
    }
    Ok(true)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::projection::File;

    fn tmp(name: &str) -> std::path::PathBuf {
        let d = std::env::temp_dir().join(format!("picolet-aw-{name}-{}", std::process::id()));
        let _ = fs::remove_dir_all(&d);
        d
    }

    fn payload(pairs: &[(&str, &str, u32)]) -> Payload {
        pairs
            .iter()
            .map(|(p, d, m)| {
                (
                    (*p).to_owned(),
                    File {
                        data: d.as_bytes().to_vec(),
                        mode: *m,
                        ..File::default()
                    },
                )
            })
            .collect()
    }

    #[test]
    fn layout_update_and_removed_keys() {
        let d = tmp("layout");
        let one = payload(&[("a", "1", 0o644), ("sub/b", "2", 0o600)]);
        assert!(write(&d, &one, 1_700_000_000_123_456_789).unwrap());
        let v1 = fs::read_link(d.join("..data")).unwrap();
        assert_eq!(v1.to_str().unwrap(), "..2023_11_14_22_13_20.123456789");
        assert_eq!(
            fs::read_link(d.join("a")).unwrap(),
            Path::new("..data/a"),
            "user-visible names go through ..data"
        );
        assert_eq!(
            fs::read_link(d.join("sub")).unwrap(),
            Path::new("..data/sub")
        );
        assert_eq!(fs::read_to_string(d.join("sub/b")).unwrap(), "2");
        assert_eq!(
            fs::metadata(d.join("sub/b")).unwrap().permissions().mode() & 0o777,
            0o600
        );
        // The same payload again: nothing is written.
        assert!(!write(&d, &one, 1_700_000_001_000_000_000).unwrap());
        assert_eq!(fs::read_link(d.join("..data")).unwrap(), v1);

        // An update: a new version, the old one removed, a key gone with its link.
        let two = payload(&[("a", "one", 0o644), ("c", "3", 0o644)]);
        assert!(write(&d, &two, 1_700_000_002_000_000_000).unwrap());
        let v2 = fs::read_link(d.join("..data")).unwrap();
        assert_ne!(v1, v2);
        assert!(!d.join(&v1).exists());
        assert_eq!(fs::read_to_string(d.join("a")).unwrap(), "one");
        assert_eq!(fs::read_to_string(d.join("c")).unwrap(), "3");
        assert!(fs::symlink_metadata(d.join("sub")).is_err());
        let mut names: Vec<String> = fs::read_dir(&d)
            .unwrap()
            .map(|e| e.unwrap().file_name().into_string().unwrap())
            .collect();
        names.sort();
        assert_eq!(
            names,
            vec!["..2023_11_14_22_13_22.000000000", "..data", "a", "c"]
        );
        // A mode change alone is an update too.
        let three = payload(&[("a", "one", 0o400), ("c", "3", 0o644)]);
        assert!(write(&d, &three, 1_700_000_003_000_000_000).unwrap());
        fs::remove_dir_all(&d).unwrap();
    }

    #[test]
    fn owners_are_set_and_a_change_of_owner_is_an_update() {
        // Needs root, as the whole suite does (docs/testing.md): chown is the point of the test.
        let d = tmp("owner");
        let mut p = payload(&[("token", "t", 0o640)]);
        p.get_mut("token").unwrap().uid = Some(1000);
        p.get_mut("token").unwrap().gid = Some(2000);
        assert!(write(&d, &p, 1_000_000_000).unwrap());
        let md = fs::metadata(d.join("token")).unwrap();
        assert_eq!(
            (md.uid(), md.gid(), md.permissions().mode() & 0o7777),
            (1000, 2000, 0o640)
        );
        assert!(!write(&d, &p, 2_000_000_000).unwrap());
        p.get_mut("token").unwrap().gid = Some(3000);
        assert!(write(&d, &p, 3_000_000_000).unwrap());
        assert_eq!(fs::metadata(d.join("token")).unwrap().gid(), 3000);
        fs::remove_dir_all(&d).unwrap();
    }

    #[test]
    fn a_crash_before_the_swap_leaves_the_old_version_visible() {
        let d = tmp("crash");
        write(&d, &payload(&[("a", "old", 0o644)]), 1_000_000_000).unwrap();
        // A version written but never swapped in (a crash before the rename).
        fs::create_dir(d.join("..1970_01_01_00_00_05.000000000")).unwrap();
        fs::write(d.join("..1970_01_01_00_00_05.000000000/a"), "torn").unwrap();
        assert_eq!(fs::read_to_string(d.join("a")).unwrap(), "old");
        // The next write cleans it up.
        write(&d, &payload(&[("a", "new", 0o644)]), 9_000_000_000).unwrap();
        assert_eq!(fs::read_to_string(d.join("a")).unwrap(), "new");
        assert!(!d.join("..1970_01_01_00_00_05.000000000").exists());
        fs::remove_dir_all(&d).unwrap();
    }

    #[test]
    fn paths_that_leave_the_volume_are_refused() {
        for bad in [
            "/etc/passwd",
            "../x",
            "a/../../x",
            "..data",
            "..x",
            "./a",
            "",
        ] {
            assert!(check_path(bad).is_err(), "{bad:?}");
        }
        assert!(check_path("a/b.txt").is_ok());
        let d = tmp("bad");
        let e = write(&d, &payload(&[("../escape", "x", 0o644)]), 0).unwrap_err();
        assert!(e.to_string().contains("'..'"), "{e}");
        assert!(!d.join("../escape").exists());
        let _ = fs::remove_dir_all(&d);
    }
}
