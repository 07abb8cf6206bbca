//! The Prometheus text exposition format, version 0.0.4: `# HELP` and `# TYPE` lines, then
//! the family's samples, label values and help text escaped as the format asks. Small and pure:
//! the endpoints build their text with it, and a histogram type for the few durations picolet
//! observes.

use std::fmt::Write;

/// The content type of the format.
pub const CONTENT_TYPE: &str = "text/plain; version=0.0.4; charset=utf-8";

/// Prometheus client_golang's default buckets (`prometheus.DefBuckets`), seconds.
pub const DEF_BUCKETS: &[f64] = &[
    0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0,
];

/// The kubelet's runtime operation buckets: `ExponentialBuckets(.005, 2.5, 14)`.
pub const RUNTIME_BUCKETS: &[f64] = &[
    0.005,
    0.0125,
    0.03125,
    0.078125,
    0.1953125,
    0.48828125,
    1.220703125,
    3.0517578125,
    7.62939453125,
    19.073486328125,
    47.6837158203125,
    119.20928955078125,
    298.0232238769531,
    745.0580596923828,
];

/// The kubelet's pod start buckets (`podStartupDurationBuckets`), seconds.
pub const POD_START_BUCKETS: &[f64] = &[
    0.5, 1.0, 2.0, 3.0, 4.0, 5.0, 6.0, 8.0, 10.0, 20.0, 30.0, 45.0, 60.0, 120.0, 180.0, 240.0,
    300.0, 360.0, 480.0, 600.0, 900.0, 1200.0, 1800.0, 2700.0, 3600.0,
];

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Kind {
    Counter,
    Gauge,
    Histogram,
}

impl Kind {
    fn as_str(self) -> &'static str {
        match self {
            Kind::Counter => "counter",
            Kind::Gauge => "gauge",
            Kind::Histogram => "histogram",
        }
    }
}

/// Observations in fixed buckets (upper bounds, ascending), as a Prometheus histogram.
#[derive(Debug, Clone, PartialEq)]
pub struct Histogram {
    bounds: &'static [f64],
    /// Per bucket, not cumulative; one more than `bounds` for +Inf.
    counts: Vec<u64>,
    sum: f64,
}

impl Histogram {
    pub fn new(bounds: &'static [f64]) -> Self {
        Histogram {
            bounds,
            counts: vec![0; bounds.len() + 1],
            sum: 0.0,
        }
    }

    pub fn observe(&mut self, v: f64) {
        let i = self.bounds.partition_point(|&b| b < v);
        self.counts[i] += 1;
        self.sum += v;
    }

    pub fn count(&self) -> u64 {
        self.counts.iter().sum()
    }

    pub fn sum(&self) -> f64 {
        self.sum
    }
}

/// A float as the format writes it: integers without a fraction, `+Inf`, `-Inf`, `NaN`.
pub fn format_value(v: f64) -> String {
    if v.is_nan() {
        "NaN".into()
    } else if v.is_infinite() {
        if v > 0.0 { "+Inf" } else { "-Inf" }.into()
    } else {
        // Rust's shortest round-trip form: "1", "0.005", "1e21" for large ones; every
        // Prometheus parser reads each.
        format!("{v}")
    }
}

fn escape_label(v: &str, out: &mut String) {
    for c in v.chars() {
        match c {
            '\\' => out.push_str("\\\\"),
            '"' => out.push_str("\\\""),
            '\n' => out.push_str("\\n"),
            c => out.push(c),
        }
    }
}

fn escape_help(v: &str, out: &mut String) {
    for c in v.chars() {
        match c {
            '\\' => out.push_str("\\\\"),
            '\n' => out.push_str("\\n"),
            c => out.push(c),
        }
    }
}

/// Builds one exposition. Each family is opened by [`Encoder::family`] and its samples follow
/// it, so a family's samples are always together under its one HELP and TYPE.
#[derive(Debug, Default)]
pub struct Encoder {
    out: String,
    families: Vec<String>,
}

impl Encoder {
    pub fn new() -> Self {
        Self::default()
    }

    /// Starts a family. Opening the same name twice is a bug in the caller (the format
    /// forbids it); debug builds catch it.
    pub fn family(&mut self, name: &str, help: &str, kind: Kind) {
        debug_assert!(
            !self.families.iter().any(|f| f == name),
            "metric family {name} opened twice"
        );
        self.families.push(name.to_owned());
        self.out.push_str("# HELP ");
        self.out.push_str(name);
        self.out.push(' ');
        escape_help(help, &mut self.out);
        self.out.push_str("\n# TYPE ");
        self.out.push_str(name);
        self.out.push(' ');
        self.out.push_str(kind.as_str());
        self.out.push('\n');
    }

    /// One sample; `ts_ms` is the optional timestamp in milliseconds since the epoch.
    pub fn sample(&mut self, name: &str, labels: &[(&str, &str)], value: f64, ts_ms: Option<i64>) {
        self.out.push_str(name);
        if !labels.is_empty() {
            self.out.push('{');
            for (i, (k, v)) in labels.iter().enumerate() {
                if i > 0 {
                    self.out.push(',');
                }
                self.out.push_str(k);
                self.out.push_str("=\"");
                escape_label(v, &mut self.out);
                self.out.push('"');
            }
            self.out.push('}');
        }
        self.out.push(' ');
        self.out.push_str(&format_value(value));
        if let Some(ts) = ts_ms {
            let _ = write!(self.out, " {ts}");
        }
        self.out.push('\n');
    }

    /// A histogram's `_bucket` (cumulative, with `le`), `_sum` and `_count` samples.
    pub fn histogram(&mut self, name: &str, labels: &[(&str, &str)], h: &Histogram) {
        let bucket = format!("{name}_bucket");
        let mut cumulative = 0u64;
        for (i, c) in h.counts.iter().enumerate() {
            cumulative += c;
            let le = h
                .bounds
                .get(i)
                .map_or_else(|| "+Inf".to_owned(), |b| format_value(*b));
            let mut with_le: Vec<(&str, &str)> = labels.to_vec();
            with_le.push(("le", &le));
            // Precision: counts stay exact as f64 far beyond anything picolet counts.
            #[allow(clippy::cast_precision_loss, reason = "counts below 2^53")]
            self.sample(&bucket, &with_le, cumulative as f64, None);
        }
        self.sample(&format!("{name}_sum"), labels, h.sum, None);
        #[allow(clippy::cast_precision_loss, reason = "counts below 2^53")]
        self.sample(&format!("{name}_count"), labels, cumulative as f64, None);
    }

    pub fn finish(self) -> String {
        self.out
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn families_samples_and_timestamps() {
        let mut e = Encoder::new();
        e.family(
            "kubelet_running_pods",
            "[ALPHA] Number of pods",
            Kind::Gauge,
        );
        e.sample("kubelet_running_pods", &[], 3.0, None);
        e.family("node_cpu_usage_seconds_total", "cpu", Kind::Counter);
        e.sample(
            "node_cpu_usage_seconds_total",
            &[],
            12.5,
            Some(1_700_000_000_123),
        );
        assert_eq!(
            e.finish(),
            "# HELP kubelet_running_pods [ALPHA] Number of pods\n\
             # TYPE kubelet_running_pods gauge\n\
             kubelet_running_pods 3\n\
             # HELP node_cpu_usage_seconds_total cpu\n\
             # TYPE node_cpu_usage_seconds_total counter\n\
             node_cpu_usage_seconds_total 12.5 1700000000123\n"
        );
    }

    #[test]
    fn label_values_and_help_are_escaped() {
        let mut e = Encoder::new();
        e.family("m", "a \\ back\nslash \"quoted\"", Kind::Gauge);
        e.sample("m", &[("pod", "a\"b\\c\nd"), ("ns", "x")], 1.0, None);
        assert_eq!(
            e.finish(),
            "# HELP m a \\\\ back\\nslash \"quoted\"\n# TYPE m gauge\n\
             m{pod=\"a\\\"b\\\\c\\nd\",ns=\"x\"} 1\n"
        );
    }

    #[test]
    fn values() {
        assert_eq!(format_value(0.0), "0");
        assert_eq!(format_value(1.0), "1");
        assert_eq!(format_value(0.005), "0.005");
        assert_eq!(format_value(-2.5), "-2.5");
        assert_eq!(format_value(f64::INFINITY), "+Inf");
        assert_eq!(format_value(f64::NEG_INFINITY), "-Inf");
        assert_eq!(format_value(f64::NAN), "NaN");
        assert_eq!(format_value(1e21).parse::<f64>().unwrap(), 1e21);
        assert_eq!(format_value(33_554_432.0), "33554432");
    }

    #[test]
    fn histogram_is_cumulative_with_inf() {
        let mut h = Histogram::new(&[0.25, 1.0]);
        for v in [0.125, 0.25, 0.5, 3.0] {
            h.observe(v);
        }
        assert_eq!(h.count(), 4);
        let mut e = Encoder::new();
        e.family("d", "h", Kind::Histogram);
        e.histogram("d", &[("op", "x")], &h);
        assert_eq!(
            e.finish(),
            "# HELP d h\n# TYPE d histogram\n\
             d_bucket{op=\"x\",le=\"0.25\"} 2\n\
             d_bucket{op=\"x\",le=\"1\"} 3\n\
             d_bucket{op=\"x\",le=\"+Inf\"} 4\n\
             d_sum{op=\"x\"} 3.875\n\
             d_count{op=\"x\"} 4\n"
        );
    }

    #[test]
    fn runtime_buckets_are_upstreams_exponential_ones() {
        let mut b = 0.005f64;
        for (i, &v) in RUNTIME_BUCKETS.iter().enumerate() {
            assert!((v - b).abs() <= b * 1e-12, "bucket {i}: {v} vs {b}");
            b *= 2.5;
        }
        assert_eq!(RUNTIME_BUCKETS.len(), 14);
    }
}
