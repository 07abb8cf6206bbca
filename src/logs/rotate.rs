//! Rotation of the CRI log files of running containers, as the kubelet's container log
//! manager does it: every 10 s, a running container's log that reached `containerLogMaxSize`
//! is renamed to `<log>.<YYYYMMDD-hhmmss>` (UTC) and the runtime is asked to reopen it
//! (ReopenContainerLog); older rotated files are gzipped (`.gz`), the newest rotated one is
//! left as it is (a reader may still be on it), and the oldest are removed so that the live log
//! and its rotated files number at most `containerLogMaxFiles`. Leftovers of a rotation cut short
//! (`.tmp` files, a file whose `.gz` already exists) are removed first.
//!
//! [`plan`] decides from the names alone (pure); [`rotate_files`] carries a plan out on the
//! disk and runs off the executor thread.

use std::fs;
use std::io;
use std::path::{Path, PathBuf};
use std::time::Duration;

/// How often the logs of running containers are checked (upstream's monitoring period).
pub const CHECK_PERIOD: Duration = Duration::from_secs(10);
/// Suffix of compressed rotated logs.
pub const GZ: &str = ".gz";
/// Suffix of a file being compressed.
pub const TMP: &str = ".tmp";

/// `containerLogMaxSize` and `containerLogMaxFiles`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Policy {
    /// Bytes; `None` turns rotation off (a negative size, as upstream).
    pub max_size: Option<u64>,
    /// At least 2: the live log and one rotated file.
    pub max_files: usize,
}

impl Default for Policy {
    fn default() -> Self {
        Policy {
            max_size: Some(10 * 1024 * 1024),
            max_files: 5,
        }
    }
}

/// What one rotation does, in order: remove, compress, then rename the live log.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct Plan {
    pub remove: Vec<String>,
    pub compress: Vec<String>,
    /// The name the live log is renamed to.
    pub rotate_to: String,
}

/// `20060102-150405` in UTC, upstream's suffix of rotated files.
pub fn suffix(unix_nanos: i64) -> String {
    let t = crate::api::time::rfc3339(unix_nanos); // 2024-05-01T12:34:56Z
    let b = t.as_bytes();
    let pick = |r: std::ops::Range<usize>| String::from_utf8_lossy(&b[r]).into_owned();
    format!(
        "{}{}{}-{}{}{}",
        pick(0..4),
        pick(5..7),
        pick(8..10),
        pick(11..13),
        pick(14..16),
        pick(17..19)
    )
}

/// The rotated files of `log` among `names` (the names in its directory), and whether each is
/// still in use: `.tmp` files are not, nor a file whose compressed copy exists.
fn rotated<'a>(log: &str, names: &'a [String]) -> (Vec<&'a str>, Vec<&'a str>) {
    let prefix = format!("{log}.");
    let mine: Vec<&str> = names
        .iter()
        .map(String::as_str)
        .filter(|n| n.starts_with(&prefix))
        .collect();
    let (mut inuse, mut unused) = (Vec::new(), Vec::new());
    for &n in &mine {
        let dead = n.ends_with(TMP)
            || (!n.ends_with(GZ) && mine.iter().any(|o| o.strip_suffix(GZ) == Some(n)));
        if dead { &mut unused } else { &mut inuse }.push(n);
    }
    inuse.sort_unstable();
    unused.sort_unstable();
    (inuse, unused)
}

/// The files of a container's log a reader goes through, oldest first: the rotated files in
/// use (`.gz` or not), then the live log itself.
pub fn all_logs(log: &str, names: &[String]) -> Vec<String> {
    let (inuse, _) = rotated(log, names);
    let mut v: Vec<String> = inuse.into_iter().map(str::to_owned).collect();
    v.push(log.to_owned());
    v
}

/// Plans the rotation of `log` (a file name) given the names in its directory.
pub fn plan(log: &str, names: &[String], now_nanos: i64, policy: &Policy) -> Plan {
    let (inuse, unused) = rotated(log, names);
    // The live log becomes one more rotated file and the runtime opens a new one: besides
    // those two, at most max_files - 2 rotated files stay. Oldest go first (names sort by time).
    let keep = policy.max_files.saturating_sub(2);
    let excess = inuse.len().saturating_sub(keep);
    let mut remove: Vec<String> = unused.into_iter().map(str::to_owned).collect();
    remove.extend(inuse[..excess].iter().map(|s| (*s).to_owned()));
    let compress = inuse[excess..]
        .iter()
        .filter(|n| !n.ends_with(GZ))
        .map(|s| (*s).to_owned())
        .collect();
    Plan {
        remove,
        compress,
        rotate_to: format!("{log}.{}", suffix(now_nanos)),
    }
}

/// The names in a directory (non-UTF-8 names are skipped: picolet never writes them).
pub fn list_dir(dir: &Path) -> io::Result<Vec<String>> {
    let mut v = Vec::new();
    for e in fs::read_dir(dir)? {
        if let Ok(n) = e?.file_name().into_string() {
            v.push(n);
        }
    }
    Ok(v)
}

/// Size of the live log; `None` when it does not exist.
pub fn size(log: &Path) -> io::Result<Option<u64>> {
    match fs::metadata(log) {
        Ok(m) => Ok(Some(m.len())),
        Err(e) if e.kind() == io::ErrorKind::NotFound => Ok(None),
        Err(e) => Err(e),
    }
}

fn ctx(what: &str, p: &Path, e: io::Error) -> io::Error {
    io::Error::new(e.kind(), format!("{what} {}: {e}", p.display()))
}

/// Compresses `path` to `path.gz` through `path.tmp`, then removes `path`.
pub fn compress(path: &Path) -> io::Result<()> {
    let tmp = PathBuf::from(format!("{}{TMP}", path.display()));
    let gz = PathBuf::from(format!("{}{GZ}", path.display()));
    let run = || -> io::Result<()> {
        let mut src = fs::File::open(path).map_err(|e| ctx("opening", path, e))?;
        // The compressed copy keeps the log's permissions (logs may hold secrets).
        let mode = src
            .metadata()
            .map_err(|e| ctx("reading", path, e))?
            .permissions();
        let out = fs::File::create(&tmp).map_err(|e| ctx("creating", &tmp, e))?;
        out.set_permissions(mode)
            .map_err(|e| ctx("setting the mode of", &tmp, e))?;
        let mut enc = flate2::write::GzEncoder::new(out, flate2::Compression::default());
        io::copy(&mut src, &mut enc).map_err(|e| ctx("compressing", path, e))?;
        enc.finish().map_err(|e| ctx("writing", &tmp, e))?;
        fs::rename(&tmp, &gz).map_err(|e| ctx("renaming", &tmp, e))?;
        fs::remove_file(path).map_err(|e| ctx("removing", path, e))
    };
    let r = run();
    if r.is_err() {
        let _ = fs::remove_file(&tmp);
    }
    r
}

/// Carries out the file part of a plan for `log`: removes, compresses, renames the live log.
/// Returns the rotated path (to rename back if the runtime cannot reopen the log).
pub fn rotate_files(log: &Path, plan: &Plan) -> io::Result<PathBuf> {
    let dir = log.parent().unwrap_or(Path::new("."));
    for n in &plan.remove {
        let p = dir.join(n);
        match fs::remove_file(&p) {
            Err(e) if e.kind() != io::ErrorKind::NotFound => return Err(ctx("removing", &p, e)),
            _ => {}
        }
    }
    for n in &plan.compress {
        compress(&dir.join(n))?;
    }
    let to = dir.join(&plan.rotate_to);
    fs::rename(log, &to).map_err(|e| ctx("renaming", log, e))?;
    Ok(to)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn names(v: &[&str]) -> Vec<String> {
        v.iter().map(|s| (*s).to_owned()).collect()
    }

    // 2024-05-01T12:34:56Z
    const NOW: i64 = 1_714_566_896_000_000_000;

    #[test]
    fn suffix_is_upstreams_format() {
        assert_eq!(suffix(NOW), "20240501-123456");
        assert_eq!(suffix(0), "19700101-000000");
    }

    #[test]
    fn the_first_rotation_only_renames() {
        let p = plan(
            "0.log",
            &names(&["0.log", "1.log"]),
            NOW,
            &Policy::default(),
        );
        assert_eq!(
            p,
            Plan {
                remove: vec![],
                compress: vec![],
                rotate_to: "0.log.20240501-123456".into()
            }
        );
    }

    #[test]
    fn older_rotated_files_are_compressed_and_the_oldest_removed() {
        let dir = names(&[
            "0.log",
            "0.log.20240501-120000.gz",
            "0.log.20240501-121000.gz",
            "0.log.20240501-122000.gz",
            "0.log.20240501-123000",
            "1.log",
            "10.log.20240501-110000",
        ]);
        let p = plan("0.log", &dir, NOW, &Policy::default());
        // max_files 5: the live log, the one rotated now, and 3 older ones.
        assert_eq!(p.remove, names(&["0.log.20240501-120000.gz"]));
        assert_eq!(p.compress, names(&["0.log.20240501-123000"]));
        let p = plan(
            "0.log",
            &dir,
            NOW,
            &Policy {
                max_size: Some(1),
                max_files: 2,
            },
        );
        assert_eq!(p.remove.len(), 4, "{p:?}");
        assert!(p.compress.is_empty());
    }

    #[test]
    fn leftovers_of_a_cut_rotation_are_removed() {
        let dir = names(&[
            "0.log",
            "0.log.20240501-120000",
            "0.log.20240501-120000.gz",
            "0.log.20240501-121000.tmp",
            "0.log.20240501-122000",
        ]);
        let p = plan("0.log", &dir, NOW, &Policy::default());
        assert_eq!(
            p.remove,
            names(&["0.log.20240501-120000", "0.log.20240501-121000.tmp"])
        );
        assert_eq!(p.compress, names(&["0.log.20240501-122000"]));
        assert_eq!(
            all_logs("0.log", &dir),
            names(&["0.log.20240501-120000.gz", "0.log.20240501-122000", "0.log"])
        );
    }

    #[test]
    fn files_are_rotated_and_compressed_on_disk() {
        let d = std::env::temp_dir().join(format!("picolet-rot-{}", std::process::id()));
        let _ = fs::remove_dir_all(&d);
        fs::create_dir_all(&d).unwrap();
        let log = d.join("0.log");
        fs::write(&log, "2024-05-01T12:00:00Z stdout F new\n").unwrap();
        fs::write(
            d.join("0.log.20240501-120000"),
            "2024-05-01T11:00:00Z stdout F old\n".repeat(100),
        )
        .unwrap();
        fs::write(d.join("0.log.20240501-110000.tmp"), "x").unwrap();
        use std::os::unix::fs::PermissionsExt;
        fs::set_permissions(
            d.join("0.log.20240501-120000"),
            fs::Permissions::from_mode(0o640),
        )
        .unwrap();
        let p = plan("0.log", &list_dir(&d).unwrap(), NOW, &Policy::default());
        let to = rotate_files(&log, &p).unwrap();
        let mut left = list_dir(&d).unwrap();
        left.sort();
        assert_eq!(
            left,
            names(&["0.log.20240501-120000.gz", "0.log.20240501-123456"])
        );
        assert_eq!(to, d.join("0.log.20240501-123456"));
        let gz = fs::read(d.join("0.log.20240501-120000.gz")).unwrap();
        assert_eq!(&gz[..2], &[0x1f, 0x8b], "gzip magic");
        let mode = fs::metadata(d.join("0.log.20240501-120000.gz"))
            .unwrap()
            .permissions()
            .mode();
        assert_eq!(mode & 0o777, 0o640, "the log's mode is kept");
        let mut out = String::new();
        io::Read::read_to_string(&mut flate2::read::GzDecoder::new(&gz[..]), &mut out).unwrap();
        assert_eq!(out, "2024-05-01T11:00:00Z stdout F old\n".repeat(100));
        let _ = fs::remove_dir_all(&d);
    }
}
