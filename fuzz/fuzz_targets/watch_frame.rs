//! One frame of the apiserver's watch stream of the node's pods in the protobuf encoding,
//! applied to a set holding one pod: whatever the server sends, the set stays consistent and
//! nothing panics.
#![no_main]

use libfuzzer_sys::fuzz_target;
use picolet::config::api::PodSet;

const SEED: &[u8] = br#"{"type":"ADDED","object":{"kind":"Pod","metadata":{"name":"a","namespace":"default","uid":"u1","resourceVersion":"5"},"spec":{"nodeName":"node-a","containers":[{"name":"c","image":"busybox"}]}}}"#;

fuzz_target!(|data: &[u8]| {
    let mut set = PodSet::default();
    set.apply(SEED).unwrap();
    let _ = set.apply_frame(data);
    // A snapshot of whatever the set holds now is always possible.
    let snap = set.snapshot();
    assert!(snap.pods.len() <= 2);
});
