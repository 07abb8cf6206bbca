//! Go's `time.Duration` text, as the kubelet's flags, config file and API objects write it.

use std::time::Duration;

/// Formats a duration as Go's `time.Duration.String` does: "10s", "1m20s", "5m0s", "1h0m0s",
/// "1.5s", "500ms", "0s" (sub-second durations in ms, µs or ns).
pub fn format_duration(d: Duration) -> String {
    let ns = d.as_nanos();
    if ns == 0 {
        return "0s".into();
    }
    // Whole and fractional part of `v / unit`, the fraction without trailing zeros.
    fn frac(v: u128, unit: u128) -> String {
        let (whole, rest) = (v / unit, v % unit);
        if rest == 0 {
            return whole.to_string();
        }
        let width = unit.ilog10() as usize;
        let f = format!("{rest:0width$}");
        format!("{whole}.{}", f.trim_end_matches('0'))
    }
    if ns < 1_000 {
        return format!("{ns}ns");
    }
    if ns < 1_000_000 {
        return format!("{}µs", frac(ns, 1_000));
    }
    if ns < 1_000_000_000 {
        return format!("{}ms", frac(ns, 1_000_000));
    }
    let secs = ns / 1_000_000_000;
    let sub = ns % 1_000_000_000;
    let s = frac((secs % 60) * 1_000_000_000 + sub, 1_000_000_000);
    let (m, h) = ((secs / 60) % 60, secs / 3600);
    if h > 0 {
        format!("{h}h{m}m{s}s")
    } else if m > 0 {
        format!("{m}m{s}s")
    } else {
        format!("{s}s")
    }
}

/// Parses a Go duration ("20s", "1m30s", "500ms", "2h", "1.5s").
pub fn parse_duration(s: &str) -> Result<Duration, String> {
    if s == "0" {
        return Ok(Duration::ZERO);
    }
    if s.is_empty() {
        return Err("empty duration".into());
    }
    let mut total = 0f64;
    let mut rest = s;
    while !rest.is_empty() {
        let num_len = rest
            .find(|c: char| !(c.is_ascii_digit() || c == '.'))
            .unwrap_or(rest.len());
        if num_len == 0 {
            return Err(format!("expected a number at {rest:?}"));
        }
        let n: f64 = rest[..num_len]
            .parse()
            .map_err(|_| format!("bad number {:?}", &rest[..num_len]))?;
        rest = &rest[num_len..];
        let unit_len = rest
            .find(|c: char| c.is_ascii_digit() || c == '.')
            .unwrap_or(rest.len());
        let scale = match &rest[..unit_len] {
            "ns" => 1e-9,
            "us" | "µs" => 1e-6,
            "ms" => 1e-3,
            "s" => 1.0,
            "m" => 60.0,
            "h" => 3600.0,
            "" => return Err("missing unit (use ns, us, ms, s, m or h)".into()),
            u => return Err(format!("unknown unit {u:?}")),
        };
        total += n * scale;
        rest = &rest[unit_len..];
    }
    Duration::try_from_secs_f64(total).map_err(|e| e.to_string())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn durations_print_as_go_prints_them() {
        let f = |ms: u64| format_duration(Duration::from_millis(ms));
        assert_eq!(f(0), "0s");
        assert_eq!(f(10_000), "10s");
        assert_eq!(f(80_000), "1m20s");
        assert_eq!(f(300_000), "5m0s");
        assert_eq!(f(3_600_000), "1h0m0s");
        assert_eq!(f(3_723_500), "1h2m3.5s");
        assert_eq!(f(1_500), "1.5s");
        assert_eq!(f(500), "500ms");
        assert_eq!(format_duration(Duration::from_micros(1_500)), "1.5ms");
        assert_eq!(format_duration(Duration::from_nanos(12)), "12ns");
        for s in ["10s", "1m20s", "5m0s", "1h2m3.5s", "500ms"] {
            assert_eq!(format_duration(parse_duration(s).unwrap()), s);
        }
    }

    #[test]
    fn durations() {
        assert_eq!(parse_duration("20s").unwrap(), Duration::from_secs(20));
        assert_eq!(parse_duration("1m30s").unwrap(), Duration::from_secs(90));
        assert_eq!(parse_duration("500ms").unwrap(), Duration::from_millis(500));
        assert_eq!(parse_duration("1.5s").unwrap(), Duration::from_millis(1500));
        assert_eq!(parse_duration("2h").unwrap(), Duration::from_secs(7200));
        assert_eq!(parse_duration("0").unwrap(), Duration::ZERO);
        for bad in ["", "20", "s", "1x", "1m-2s", "--1s"] {
            assert!(parse_duration(bad).is_err(), "{bad}");
        }
    }
}
