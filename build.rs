// Compiles the CRI subset, the konnectivity agent protocol, the containerd subset and the
// apimachinery messages of the Kubernetes protobuf encoding in pure Rust (protox), so neither
// the build machine, cross builds nor Yocto need protoc. Client code only: picolet never serves
// CRI, and is the agent, not the server, of the konnectivity tunnel.
fn main() {
    println!("cargo:rerun-if-changed=proto/runtime.proto");
    println!("cargo:rerun-if-changed=proto/konnectivity.proto");
    println!("cargo:rerun-if-changed=proto/containerd");
    println!("cargo:rerun-if-changed=proto/k8s");
    // A lower bound for the wall clock (preflight flags a board that booted in 1970);
    // SOURCE_DATE_EPOCH keeps reproducible builds reproducible.
    println!("cargo:rerun-if-env-changed=SOURCE_DATE_EPOCH");
    let epoch = std::env::var("SOURCE_DATE_EPOCH").ok().unwrap_or_else(|| {
        std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map_or(0, |d| d.as_secs())
            .to_string()
    });
    println!("cargo:rustc-env=PICOLET_BUILD_EPOCH={epoch}");
    let fds =
        protox::compile(["proto/runtime.proto"], ["proto"]).expect("compile proto/runtime.proto");
    tonic_prost_build::configure()
        .build_server(false)
        .build_transport(false)
        .compile_fds(fds)
        .expect("generate CRI client");
    // The apiserver network proxy's agent protocol (feature konnectivity); the file has no
    // package, as upstream's, so it is generated as `_.rs`.
    let fds = protox::compile(["proto/konnectivity.proto"], ["proto"])
        .expect("compile proto/konnectivity.proto");
    tonic_prost_build::configure()
        .build_server(false)
        .build_transport(false)
        .compile_fds(fds)
        .expect("generate the konnectivity agent client");
    // containerd's own content, images and leases services (subsets): importing preloaded
    // image archives, which the CRI has no call for.
    let fds = protox::compile(
        [
            "proto/containerd/content.proto",
            "proto/containerd/images.proto",
            "proto/containerd/leases.proto",
        ],
        ["proto"],
    )
    .expect("compile proto/containerd");
    tonic_prost_build::configure()
        .build_server(false)
        .build_transport(false)
        .compile_fds(fds)
        .expect("generate the containerd client");
    // The apimachinery envelope, metadata and Status of the Kubernetes protobuf encoding, and
    // the Event picolet writes in it (feature apiserver): messages only.
    let fds = protox::compile(["proto/k8s/meta.proto", "proto/k8s/core.proto"], ["proto"])
        .expect("compile proto/k8s");
    tonic_prost_build::configure()
        .build_server(false)
        .build_client(false)
        .build_transport(false)
        .compile_fds(fds)
        .expect("generate the apimachinery messages");
}
