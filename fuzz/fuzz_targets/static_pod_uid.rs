//! The static pod identity hash: defined on the document as parsed, so it must not depend on
//! how the JSON was written (key order, spacing) and must never panic.
#![no_main]

use libfuzzer_sys::fuzz_target;
use picolet::config::static_pod;

fuzz_target!(|data: &[u8]| {
    let Ok(doc) = serde_json::from_slice::<serde_json::Value>(data) else {
        return;
    };
    let uid = static_pod::uid(&doc, "/etc/kubernetes/manifests/p.json", "node-a");
    assert_eq!(uid.len(), 32);
    let rewritten = serde_json::to_vec_pretty(&doc).unwrap();
    let doc2: serde_json::Value = serde_json::from_slice(&rewritten).unwrap();
    assert_eq!(uid, static_pod::uid(&doc2, "/etc/kubernetes/manifests/p.json", "node-a"));
    assert_ne!(uid, static_pod::uid(&doc, "/etc/kubernetes/manifests/p.json", "node-b"));
});
