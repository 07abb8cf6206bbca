// Compiles the CRI subset in pure Rust (protox), so neither the build machine, cross builds nor
// Yocto need protoc. Client code only: picolet never serves CRI.
fn main() {
    println!("cargo:rerun-if-changed=proto/runtime.proto");
    let fds =
        protox::compile(["proto/runtime.proto"], ["proto"]).expect("compile proto/runtime.proto");
    tonic_prost_build::configure()
        .build_server(false)
        .build_transport(false)
        .compile_fds(fds)
        .expect("generate CRI client");
}
