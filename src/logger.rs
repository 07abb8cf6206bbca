//! A small stderr logger in the kubelet's (klog) line format, readable in journald:
//! `I1121 10:11:29.123456   1234 sync_loop] adding pod ...`.

use std::io::Write;

struct Logger {
    level: log::LevelFilter,
}

/// Maps the kubelet's `-v` verbosity to a log level: 0-3 info, 4-5 debug, 6+ trace.
pub fn level_for(verbosity: u8) -> log::LevelFilter {
    match verbosity {
        0..=3 => log::LevelFilter::Info,
        4..=5 => log::LevelFilter::Debug,
        _ => log::LevelFilter::Trace,
    }
}

/// Formats one line (pure, for tests).
pub fn format_line(level: log::Level, nanos: i64, pid: u32, target: &str, msg: &str) -> String {
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
        let line = format_line(
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
    if log::set_boxed_logger(Box::new(Logger { level })).is_ok() {
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
    fn levels() {
        assert_eq!(level_for(0), log::LevelFilter::Info);
        assert_eq!(level_for(4), log::LevelFilter::Debug);
        assert_eq!(level_for(9), log::LevelFilter::Trace);
    }
}
