//! Resource quantities ("100m", "1.5Gi", "1e3"): parsing never panics, and an accepted quantity
//! keeps its text and parses again to the same value.
#![no_main]

use libfuzzer_sys::fuzz_target;
use picolet::api::quantity::Quantity;

fuzz_target!(|data: &[u8]| {
    let Ok(s) = std::str::from_utf8(data) else {
        return;
    };
    if let Ok(q) = Quantity::parse(s) {
        let again = Quantity::parse(q.as_str()).expect("an accepted quantity parses again");
        assert_eq!(q.nanos(), again.nanos());
        let _ = (q.value(), q.milli_value(), q.is_zero(), q.is_negative());
    }
});
