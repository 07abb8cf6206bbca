//! The CRI log format of container logs (`<time> <stream> <P|F> <content>` per line): decoding
//! never panics, an accepted timestamp formats and parses back to the same instant, and joining
//! partial lines loses or invents no byte. The first line also goes through the `/containerLogs`
//! query decoder.
#![no_main]

use libfuzzer_sys::fuzz_target;
use picolet::logs::format::{Joiner, format_time, parse_record, parse_time};

fuzz_target!(|data: &[u8]| {
    if let Some(first) = data.split(|&b| b == b'\n').next() {
        let _ = picolet::logs::read::parse_query(&String::from_utf8_lossy(first), 0);
        let _ = parse_time(first);
    }
    let mut joiner = Joiner::new(4096);
    let (mut fed, mut out) = (0usize, 0usize);
    for line in data.split(|&b| b == b'\n') {
        let Ok(r) = parse_record(line) else { continue };
        assert_eq!(parse_time(format_time(r.time).as_bytes()), Some(r.time));
        fed += r.content.len();
        if let Some(l) = joiner.push(&r) {
            assert_eq!(l.stream, r.stream);
            out += l.content.len();
        }
    }
    out += joiner.finish().iter().map(|l| l.content.len()).sum::<usize>();
    assert_eq!(fed, out, "joining kept every byte");
});
