//! The KubeletConfiguration file (`--config`).
#![no_main]

use std::path::Path;

use libfuzzer_sys::fuzz_target;
use picolet::cli::parse::parse_config;
use picolet::options::Options;

fuzz_target!(|data: &[u8]| {
    let mut o = Options::default();
    let _ = parse_config(data, Path::new("/etc/picolet/config.yaml"), &mut o);
});
