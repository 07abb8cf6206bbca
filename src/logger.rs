//! A small stderr logger in the kubelet's (klog) line format, readable in journald:
//! `I1121 10:11:29.123456   1234 sync_loop] adding pod ...`. When stderr is the journal
//! (`$JOURNAL_STREAM` names stderr's device and inode), each line starts with its syslog
//! priority, `<3>` to `<7>`, which journald strips and records (`SyslogLevelPrefix=`, on by
//! default), so `journalctl -p warning` shows picolet's warnings and errors.

use std::io::Write;

struct Logger {
    level: log::LevelFilter,
    journal: bool,
}

/// The syslog priority journald records for a level (sd-daemon(3)'s `SD_ERR` ... `SD_DEBUG`).
pub fn syslog_priority(level: log::Level) -> u8 {
    match level {
        log::Level::Error => 3,
        log::Level::Warn => 4,
        log::Level::Info => 6,
        log::Level::Debug | log::Level::Trace => 7,
    }
}

/// Whether `$JOURNAL_STREAM` (`<device>:<inode>`, set by systemd for a service whose output goes
/// to the journal) names the file stderr is. Compared, not merely present: a child started
/// from a shell in the service inherits the variable with another stderr.
/// `stderr_id` is stderr's `<st_dev>:<st_ino>` in decimal, as systemd writes it.
pub fn is_journal_stream(var: Option<&str>, stderr_id: &str) -> bool {
    var.is_some_and(|v| v.trim() == stderr_id)
}

fn stderr_is_journal() -> bool {
    let var = std::env::var("JOURNAL_STREAM").ok();
    if var.is_none() {
        return false;
    }
    match nix::sys::stat::fstat(std::io::stderr()) {
        // Formatted rather than cast: the widths of dev_t and ino_t differ between targets.
        Ok(st) => is_journal_stream(var.as_deref(), &format!("{}:{}", st.st_dev, st.st_ino)),
        Err(_) => false,
    }
}

/// Maps the kubelet's `-v` verbosity to a log level: 0-3 info, 4-5 debug, 6+ trace.
pub fn level_for(verbosity: u8) -> log::LevelFilter {
    match verbosity {
        0..=3 => log::LevelFilter::Info,
        4..=5 => log::LevelFilter::Debug,
        _ => log::LevelFilter::Trace,
    }
}

/// Formats one line (pure, for tests). Line breaks inside the message (a hook's or a probe's
/// output, a runtime's error) are escaped, so one entry is always one line of the log.
pub fn format_line(level: log::Level, nanos: i64, pid: u32, target: &str, msg: &str) -> String {
    let msg = msg.trim_end_matches(['\n', '\r']);
    let msg: std::borrow::Cow<'_, str> = if msg.contains(['\n', '\r']) {
        msg.replace('\n', "\\n").replace('\r', "\\r").into()
    } else {
        msg.into()
    };
    let letter = match level {
        log::Level::Error => 'E',
        log::Level::Warn => 'W',
        log::Level::Info => 'I',
        log::Level::Debug | log::Level::Trace => 'D',
    };
    let t = crate::api::time::rfc3339(nanos); // 2026-11-21T10:11:29Z
    let micros = nanos.rem_euclid(1_000_000_000) / 1000;
    let module = target.rsplit("::").next().unwrap_or(target);
    format!(
        "{letter}{}{} {}.{micros:06} {pid:>7} {module}] {msg}\n",
        &t[5..7],
        &t[8..10],
        &t[11..19]
    )
}

impl log::Log for Logger {
    fn enabled(&self, m: &log::Metadata<'_>) -> bool {
        m.level() <= self.level
            && (m.target().starts_with("picolet") || m.level() <= log::Level::Warn)
    }

    fn log(&self, r: &log::Record<'_>) {
        if !self.enabled(r.metadata()) {
            return;
        }
        let mut line = if self.journal {
            format!("<{}>", syslog_priority(r.level()))
        } else {
            String::new()
        };
        line += &format_line(
            r.level(),
            crate::rt::now_nanos(),
            std::process::id(),
            r.target(),
            &r.args().to_string(),
        );
        // One write per line keeps lines whole when several threads log.
        let _ = std::io::stderr().lock().write_all(line.as_bytes());
    }

    fn flush(&self) {}
}

/// Installs the logger; later calls are ignored.
pub fn init(verbosity: u8) {
    let level = level_for(verbosity);
    let journal = stderr_is_journal();
    if log::set_boxed_logger(Box::new(Logger { level, journal })).is_ok() {
        log::set_max_level(level);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn klog_format() {
        // 2024-03-05T07:08:09.000123456Z
        let nanos = 1_709_622_489_000_123_456;
        let l = format_line(log::Level::Warn, nanos, 42, "picolet::sync_loop", "hello");
        assert_eq!(l, "W0305 07:08:09.000123      42 sync_loop] hello\n");
    }

    #[test]
    fn a_message_with_line_breaks_stays_one_line() {
        let nanos = 1_709_622_489_000_123_456;
        let msg = "FailedPostStartHook: ... message: \"line one\nline two\r\n\"\n";
        let l = format_line(
            log::Level::Warn,
            nanos,
            42,
            "picolet::kuberuntime::container",
            msg,
        );
        assert_eq!(
            l,
            "W0305 07:08:09.000123      42 container] FailedPostStartHook: ... message: \"line one\\nline two\\r\\n\"\n"
        );
        assert_eq!(l.lines().count(), 1);
    }

    #[test]
    fn journal_stream_must_name_stderr() {
        assert!(is_journal_stream(Some("8:1234"), "8:1234"));
        assert!(!is_journal_stream(Some("8:1234"), "8:1235"));
        assert!(!is_journal_stream(Some("9:1234"), "8:1234"));
        assert!(!is_journal_stream(Some("garbage"), "8:1234"));
        assert!(!is_journal_stream(None, "8:1234"));
        assert_eq!(syslog_priority(log::Level::Error), 3);
        assert_eq!(syslog_priority(log::Level::Warn), 4);
        assert_eq!(syslog_priority(log::Level::Info), 6);
        assert_eq!(syslog_priority(log::Level::Trace), 7);
    }

    #[test]
    fn levels() {
        assert_eq!(level_for(0), log::LevelFilter::Info);
        assert_eq!(level_for(4), log::LevelFilter::Debug);
        assert_eq!(level_for(9), log::LevelFilter::Trace);
    }
}
