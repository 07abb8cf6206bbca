//! Prometheus text checked by the Prometheus project's own parser (prometheus_client, through
//! `prom_check.py` beside this file): the parsed families as JSON, and a sample's value.
//! Missing Python or prometheus_client fails the test, naming the fix.

use std::io::Write;
use std::path::Path;

/// The families the parser read from `text`; panics with the parser's reason if it refuses.
pub fn check(text: &str) -> serde_json::Value {
    let script = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/support/prom_check.py");
    let mut child = std::process::Command::new("python3")
        .arg(&script)
        .stdin(std::process::Stdio::piped())
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .expect("python3 is needed to check the Prometheus text: run scripts/install-deps.sh");
    child
        .stdin
        .take()
        .unwrap()
        .write_all(text.as_bytes())
        .unwrap();
    let out = child.wait_with_output().unwrap();
    assert!(
        out.status.success(),
        "{}\n--- text ---\n{text}",
        String::from_utf8_lossy(&out.stderr)
    );
    serde_json::from_slice(&out.stdout).unwrap()
}

/// The value of the first sample `name` whose labels include `labels`.
pub fn sample(fams: &serde_json::Value, name: &str, labels: &[(&str, &str)]) -> Option<f64> {
    samples(fams, name, labels).into_iter().next()
}

/// The values of every sample `name` whose labels include `labels`.
pub fn samples(fams: &serde_json::Value, name: &str, labels: &[(&str, &str)]) -> Vec<f64> {
    let Some(fams) = fams.as_array() else {
        return Vec::new();
    };
    fams.iter()
        .filter_map(|f| f["samples"].as_array())
        .flatten()
        .filter(|s| s["name"] == name && labels.iter().all(|(k, v)| s["labels"][*k] == *v))
        .filter_map(|s| s["value"].as_f64())
        .collect()
}

/// The family `name` (counters without their `_total`, as the parser names them).
pub fn family<'a>(fams: &'a serde_json::Value, name: &str) -> Option<&'a serde_json::Value> {
    fams.as_array()?.iter().find(|f| f["name"] == name)
}
