//! A static pod manifest's bytes through what the file source does with them: the limits
//! pre-pass, decoding (YAML or JSON), validation, identity. Errors are fine; a panic, a hang or
//! an unbounded allocation is a finding.
#![no_main]

use std::path::Path;

use libfuzzer_sys::fuzz_target;
use picolet::api::decode::Format;
use picolet::config::file;

fuzz_target!(|data: &[u8]| {
    // The first byte picks the format, so one corpus exercises both decoders.
    let Some((&pick, bytes)) = data.split_first() else {
        return;
    };
    let (format, path) = if pick & 1 == 0 {
        (Format::Yaml, Path::new("/etc/kubernetes/manifests/fuzz.yaml"))
    } else {
        (Format::Json, Path::new("/etc/kubernetes/manifests/fuzz.json"))
    };
    if let Ok(pod) = file::parse(bytes, format, path, "node-a", "2026-01-01T00:00:00Z") {
        // An accepted pod carries the identity the file source promises.
        assert!(pod.metadata.name.ends_with("-node-a"), "{}", pod.metadata.name);
        assert_eq!(pod.metadata.uid.len(), 32, "{}", pod.metadata.uid);
    }
});
