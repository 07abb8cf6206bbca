//! The limits pre-pass itself, on both syntaxes: it runs before every parser, so it must be
//! linear, never panic, and never accept what its own limits refuse.
#![no_main]

use libfuzzer_sys::fuzz_target;
use picolet::limits::{self, Limits, Syntax};

fuzz_target!(|data: &[u8]| {
    for syntax in [Syntax::Yaml, Syntax::Json] {
        if let Ok(shape) = limits::check(data, syntax, &Limits::MANIFEST) {
            let l = Limits::MANIFEST;
            assert!(shape.depth <= l.max_depth);
            assert!(shape.documents <= l.max_documents);
            assert!(shape.nodes <= l.max_nodes);
        }
    }
});
