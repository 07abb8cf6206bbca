//! Files that survive a crash or a power cut at any instant: written to a temporary file beside
//! the target, fsynced, renamed over the target, and the directory fsynced, so a reader finds
//! the old content or the new one, never a torn mix.

use std::fs;
use std::io::{self, Write};
use std::path::Path;

/// Replaces `dst` with `bytes` atomically and durably.
pub fn write(dst: &Path, bytes: &[u8]) -> io::Result<()> {
    write_with(dst, bytes, None)
}

/// [`write`] with the file's permissions set to `mode` (0600 for what holds secrets) before
/// any byte is written.
#[cfg(feature = "apiserver")]
pub fn write_mode(dst: &Path, bytes: &[u8], mode: u32) -> io::Result<()> {
    write_with(dst, bytes, Some(mode))
}

fn write_with(dst: &Path, bytes: &[u8], mode: Option<u32>) -> io::Result<()> {
    use std::os::unix::fs::{OpenOptionsExt, PermissionsExt};
    let dir = dst.parent().unwrap_or(Path::new("."));
    fs::create_dir_all(dir)?;
    let mut name = dst.file_name().unwrap_or_default().to_os_string();
    name.push(".tmp");
    let tmp = dir.join(name);
    {
        let _ = fs::remove_file(&tmp);
        let mut o = fs::OpenOptions::new();
        o.write(true).create_new(true);
        if let Some(m) = mode {
            o.mode(m);
        }
        let mut f = o.open(&tmp)?;
        if let Some(m) = mode {
            f.set_permissions(fs::Permissions::from_mode(m))?;
        }
        f.write_all(bytes)?;
        f.sync_all()?;
    }
    fs::rename(&tmp, dst)?;
    fs::File::open(dir)?.sync_all()
}

#[cfg(test)]
mod tests {
    #[test]
    fn replaces_and_leaves_no_temporary_file() {
        let d = std::env::temp_dir().join(format!("picolet-atomic-{}", std::process::id()));
        let f = d.join("sub").join("x.json");
        super::write(&f, b"one").unwrap();
        super::write(&f, b"two").unwrap();
        assert_eq!(std::fs::read(&f).unwrap(), b"two");
        assert_eq!(std::fs::read_dir(d.join("sub")).unwrap().count(), 1);
        std::fs::remove_dir_all(&d).unwrap();
    }
}
