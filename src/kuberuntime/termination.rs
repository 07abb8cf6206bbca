//! A container's last words: its termination message file, or with `terminationMessagePolicy:
//! FallbackToLogsOnError` the end of its log when it failed and wrote no message, as the kubelet
//! reads them (`getTerminationMessage`, `readLastStringFromContainerLogs`).

use std::fs;
use std::io::{Read, Seek, SeekFrom};
use std::path::{Path, PathBuf};

/// Most bytes of a termination message file kept: the last 4 KiB.
pub const MAX_MESSAGE: u64 = 4 * 1024;
/// From the log: the last 80 lines, and of those the last 2 KiB.
pub const MAX_LOG_LINES: usize = 80;
pub const MAX_LOG_MESSAGE: usize = 2 * 1024;
/// How much of the end of a log is read to find its last lines.
const LOG_WINDOW: u64 = 64 * 1024;

/// Where an exited container's message comes from.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Source {
    /// The host file behind its termination message path, if mounted.
    pub file: Option<PathBuf>,
    /// Its CRI log, when the policy falls back to the log for this exit.
    pub fallback_log: Option<PathBuf>,
}

/// The message, if there is one: the file's last 4 KiB; when that is missing or empty and
/// the fallback applies, the log's tail.
pub fn read(src: &Source) -> Option<String> {
    if let Some(f) = &src.file {
        match tail_bytes(f, MAX_MESSAGE) {
            Ok(b) if !b.is_empty() => return Some(String::from_utf8_lossy(&b).into_owned()),
            Ok(_) => {}
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
            Err(e) => {
                return Some(format!(
                    "Error on reading termination log {}: {e}",
                    f.display()
                ));
            }
        }
    }
    let log = src.fallback_log.as_ref()?;
    match log_tail(log) {
        Ok(s) if s.is_empty() => None,
        Ok(s) => Some(s),
        Err(e) => Some(format!(
            "Error on reading termination message from logs: {e}"
        )),
    }
}

fn tail_bytes(path: &Path, max: u64) -> std::io::Result<Vec<u8>> {
    let mut f = fs::File::open(path)?;
    let len = f.metadata()?.len();
    f.seek(SeekFrom::Start(len.saturating_sub(max)))?;
    let mut buf = Vec::new();
    f.take(max).read_to_end(&mut buf)?;
    Ok(buf)
}

/// The last 80 lines of a CRI log, decoded by [`crate::logs::format`] (timestamps and stream
/// tags dropped, partial lines joined), cut to their last 2 KiB.
fn log_tail(path: &Path) -> std::io::Result<String> {
    let raw = tail_bytes(path, LOG_WINDOW)?;
    let text = String::from_utf8_lossy(&raw);
    let lines: Vec<&str> = text.lines().collect();
    // A window that starts mid-file starts mid-line: drop that piece.
    let whole = if u64::try_from(raw.len()).unwrap_or(0) >= LOG_WINDOW {
        &lines[1.min(lines.len())..]
    } else {
        &lines[..]
    };
    let mut out = String::new();
    let mut joiner = crate::logs::format::Joiner::default();
    for l in &whole[whole.len().saturating_sub(MAX_LOG_LINES)..] {
        let Ok(r) = crate::logs::format::parse_record(l.as_bytes()) else {
            continue;
        };
        if let Some(line) = joiner.push(&r) {
            out.push_str(&String::from_utf8_lossy(&line.content));
            out.push('\n');
        }
    }
    for line in joiner.finish() {
        out.push_str(&String::from_utf8_lossy(&line.content));
    }
    if out.len() > MAX_LOG_MESSAGE {
        let mut cut = out.len() - MAX_LOG_MESSAGE;
        while !out.is_char_boundary(cut) {
            cut += 1;
        }
        out.drain(..cut);
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn dir(name: &str) -> PathBuf {
        let d = std::env::temp_dir().join(format!("picolet-tm-{name}-{}", std::process::id()));
        let _ = fs::remove_dir_all(&d);
        fs::create_dir_all(&d).unwrap();
        d
    }

    #[test]
    fn the_file_wins_and_keeps_its_last_4_kib() {
        let d = dir("file");
        let f = d.join("msg");
        let long = format!("{}END", "x".repeat(5000));
        fs::write(&f, &long).unwrap();
        let m = read(&Source {
            file: Some(f),
            fallback_log: Some(d.join("nolog")),
        })
        .unwrap();
        assert_eq!(m.len(), 4096);
        assert!(m.ends_with("END"));
        let _ = fs::remove_dir_all(&d);
    }

    #[test]
    fn an_empty_file_falls_back_to_the_last_80_lines_of_the_log() {
        let d = dir("log");
        let f = d.join("msg");
        fs::write(&f, "").unwrap();
        let log = d.join("0.log");
        let mut s = String::new();
        for i in 0..100 {
            s.push_str(&format!("2024-05-01T12:00:00.{i:09}Z stdout F line {i}\n"));
        }
        s.push_str("2024-05-01T12:00:01.000000000Z stderr P par\n");
        s.push_str("2024-05-01T12:00:01.000000001Z stderr F tial\n");
        fs::write(&log, s).unwrap();
        let m = read(&Source {
            file: Some(f.clone()),
            fallback_log: Some(log),
        })
        .unwrap();
        let lines: Vec<&str> = m.lines().collect();
        // 80 file lines: "line 22" .. "line 99", then the joined partial line.
        assert_eq!(lines.first(), Some(&"line 22"));
        assert_eq!(lines.last(), Some(&"partial"));
        assert_eq!(lines.len(), 79);
        // Without the fallback, an empty file is no message.
        assert_eq!(
            read(&Source {
                file: Some(f),
                fallback_log: None
            }),
            None
        );
        let _ = fs::remove_dir_all(&d);
    }

    #[test]
    fn the_log_message_is_cut_to_its_last_2_kib() {
        let d = dir("cut");
        let log = d.join("0.log");
        let mut s = String::new();
        for i in 0..50 {
            s.push_str(&format!(
                "2024-05-01T12:00:00Z stdout F {i:02}{}\n",
                "y".repeat(98)
            ));
        }
        fs::write(&log, s).unwrap();
        let m = read(&Source {
            file: None,
            fallback_log: Some(log),
        })
        .unwrap();
        assert_eq!(m.len(), MAX_LOG_MESSAGE);
        assert!(m.ends_with(&format!("49{}\n", "y".repeat(98))));
        let _ = fs::remove_dir_all(&d);
    }
}
