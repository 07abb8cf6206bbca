//! kubeconfig files (`--kubeconfig`), as kubectl and kubeadm write them.
#![no_main]

use std::path::Path;

use libfuzzer_sys::fuzz_target;
use picolet::apiclient::kubeconfig;

fuzz_target!(|data: &[u8]| {
    let _ = kubeconfig::parse(data, Path::new("/etc/kubernetes/kubelet.conf"));
});
