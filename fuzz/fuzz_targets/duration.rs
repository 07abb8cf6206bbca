//! Go durations as flags and the KubeletConfiguration write them ("1m30s", "500ms").
#![no_main]

use libfuzzer_sys::fuzz_target;
use picolet::api::parse_duration;

fuzz_target!(|data: &[u8]| {
    if let Ok(s) = std::str::from_utf8(data) {
        let _ = parse_duration(s);
    }
});
