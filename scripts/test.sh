#!/usr/bin/env bash
# The whole test suite: formatting, lints, unit and integration tests, the end-to-end
# tests against a real containerd that the tests start themselves, and the cluster tests
# against a real control plane (etcd, kube-apiserver, kube-scheduler,
# kube-controller-manager) built from the Kubernetes Go modules pinned in tests/k8s and
# cached by version (scripts/k8s-build.sh; about 30 minutes on 2 cores the first time,
# under a second once cached). Run as root.
set -euo pipefail
cd "$(dirname -- "${BASH_SOURCE[0]}")/.."

scripts/install-deps.sh --cross --k8s --fuzz

echo "== cargo fmt --check"
cargo fmt --all -- --check
echo "== python (the benchmarks' programs, the Prometheus text check): pyflakes"
pyflakes3 scripts/bench/*.py tests/support/*.py
echo "== cargo clippy"
cargo clippy --all-targets --locked -- -D warnings
echo "== each feature combination builds without warnings"
for features in "--no-default-features" "--no-default-features --features file-source" \
    "--no-default-features --features local-api" "--no-default-features --features apiserver" \
    "--no-default-features --features node-api" \
    "--no-default-features --features konnectivity" \
    "--no-default-features --features file-source,local-api" \
    "--no-default-features --features file-source,local-api,https-probes"; do
    echo "-- $features"
    # Library and binary only: the tests enable the default features again.
    # shellcheck disable=SC2086
    cargo clippy --locked --lib --bins $features -- -D warnings
done
echo "== systemd unit (scripts/verify-unit.sh)"
scripts/verify-unit.sh
echo "== Yocto layer: crate list in sync with Cargo.lock, recipe against the repository"
scripts/yocto-crates.py --check
echo "== control plane binaries (scripts/k8s-build.sh)"
# The Go build cache is kept between the builds that share packages (the conformance tooling
# is the same Kubernetes release); the last (--tools) removes it when it has built something.
PICOLET_K8S_KEEP_GOCACHE=1 scripts/k8s-build.sh >/dev/null
echo "== the conformance tooling (scripts/k8s-build.sh --e2e: e2e.test, ginkgo, ...)"
PICOLET_K8S_KEEP_GOCACHE=1 scripts/k8s-build.sh --e2e >/dev/null
echo "== the other upstream programs the tests run (scripts/k8s-build.sh --tools: metrics-server, the registry, konnectivity-server)"
scripts/k8s-build.sh --tools >/dev/null
echo "== cargo test (unit, integration, end-to-end)"
cargo test --locked -- --test-threads=2
echo "== the core end-to-end file against containerd 2.x (scripts/test-containerd2.sh e2e; builds it once, cached)"
scripts/test-containerd2.sh e2e
echo "== upstream's node conformance specs: the CI subset (tests/conformance-ci.txt) against picolet"
# (the debug picolet cargo test just built)
SPECS=tests/conformance-ci.txt PICOLET_BIN=target/debug/picolet CONFORMANCE_DIR=/tmp/pconf-ci \
    scripts/conformance.sh
# The test binaries of the ARM builds run under qemu-user (cargo's runner in .cargo/config.toml);
# the picolet they start runs under PICOLET_TEST_RUNNER (no binfmt_misc needed).
arm_tests() { # arm_tests TARGET RUNNER...
    local target=$1
    shift
    echo "== $target under qemu: unit tests, and the binary against the fake runtime and apiserver"
    PICOLET_TEST_RUNNER="$*" cargo test --locked --target "$target" --lib \
        --test agent_fake_cri --test cri_client --test cluster_fake_api -- --test-threads=2
}
arm_tests armv7-unknown-linux-gnueabihf qemu-arm-static -L /usr/arm-linux-gnueabihf
arm_tests aarch64-unknown-linux-gnu qemu-aarch64-static -L /usr/aarch64-linux-gnu
for target in armv7-unknown-linux-gnueabihf aarch64-unknown-linux-gnu aarch64-unknown-linux-musl; do
    echo "== each feature combination for $target"
    for features in "--no-default-features" "--no-default-features --features file-source,local-api" \
        "--no-default-features --features apiserver" ""; do
        # shellcheck disable=SC2086
        cargo clippy --locked --quiet --target "$target" --lib --bins $features -- -D warnings
    done
done
echo "== release builds: aarch64 (glibc) and aarch64 (musl, static)"
# One cargo for both: each target's last step (LTO into one codegen unit) runs on one core,
# so the two run side by side.
cargo build --locked --release --target aarch64-unknown-linux-gnu --target aarch64-unknown-linux-musl
echo "== fuzzing: each decoder for 15 s (scripts/fuzz.sh)"
scripts/fuzz.sh 15
