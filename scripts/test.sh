#!/usr/bin/env bash
# The whole test suite: formatting, lints, unit and integration tests, the end-to-end
# tests against a real containerd that the tests start themselves, and the cluster tests
# against a real control plane (etcd, kube-apiserver, kube-scheduler,
# kube-controller-manager) built from the Kubernetes Go modules pinned in tests/k8s and
# cached by version (scripts/k8s-build.sh; about 30 minutes on 2 cores the first time,
# under a second once cached). Run as root. Plain `cargo test` runs only the in-process
# suite; the test files that need real parts are behind the cargo feature `e2e` (Cargo.toml),
# which every cargo command here that builds them passes, so that the library and the test
# binaries are built once, with one feature set.
set -euo pipefail
cd "$(dirname -- "${BASH_SOURCE[0]}")/.."

scripts/install-deps.sh --cross --k8s --fuzz --guest

start=$SECONDS
# Each step says the free space of the disk /tmp and target/ are on: the end-to-end tests
# store images, and a full disk shows first as a failed import or write.
step() {
    printf '== [%dm%02ds, %s free] %s\n' $(((SECONDS - start) / 60)) $(((SECONDS - start) % 60)) \
        "$(df -h --output=avail /tmp 2>/dev/null | tail -n 1 | tr -d ' ')" "$*"
}
# A fresh clone gains nothing from incremental compilation, and full debug info only makes
# every test binary slower to link; line tables keep the backtraces. Both can be overridden.
export CARGO_INCREMENTAL=${CARGO_INCREMENTAL:-0}
export CARGO_PROFILE_DEV_DEBUG=${CARGO_PROFILE_DEV_DEBUG:-line-tables-only}

# The ARM builds (their test binaries, lints and release builds) and the fuzz targets only
# compile, so they run beside the rest at the lowest CPU and I/O priority: they take what the
# end-to-end tests leave idle while those wait on containers and the control plane. They have
# a target directory of their own, so neither cargo waits on the other's lock; their output
# goes to a log, printed when they fail.
export CROSS_TARGET_DIR=$PWD/target/cross
# What the ARM builds test under qemu (words, so that the background shell gets it too).
export ARM_TEST_TARGETS="--lib --test agent_fake_cri --test cri_client --test cluster_fake_api"
background_builds() {
    set -euo pipefail
    export CARGO_TARGET_DIR=$CROSS_TARGET_DIR
    local target features
    for target in armv7-unknown-linux-gnueabihf aarch64-unknown-linux-gnu; do
        echo "-- $target: test binaries"
        # shellcheck disable=SC2086
        cargo test --locked --no-run --target "$target" $ARM_TEST_TARGETS
    done
    for target in armv7-unknown-linux-gnueabihf aarch64-unknown-linux-gnu aarch64-unknown-linux-musl; do
        for features in "--no-default-features" "--no-default-features --features file-source,local-api" \
            "--no-default-features --features apiserver" \
            "--no-default-features --features graceful-shutdown" ""; do
            echo "-- $target: clippy $features"
            # shellcheck disable=SC2086
            cargo clippy --locked --quiet --target "$target" --lib --bins $features -- -D warnings
        done
    done
    # One cargo for both: each target's last step (LTO into one codegen unit) runs on one
    # core, so the two run side by side.
    echo "-- release builds: aarch64 (glibc), aarch64 (musl, static) and x86_64 (for the RSS figure)"
    cargo build --locked --release --target aarch64-unknown-linux-gnu --target aarch64-unknown-linux-musl \
        --target x86_64-unknown-linux-gnu
    echo "-- the fuzz targets (fuzz/target)"
    (unset CARGO_TARGET_DIR && cd fuzz && RUSTC_BOOTSTRAP=1 cargo fuzz build --sanitizer none -O)
}
export -f background_builds
background_log=$(mktemp /tmp/picolet-test-background.XXXXXX)
# A session of its own, so that an early exit stops every process it started.
setsid nice -n 19 ionice -c 3 bash -c background_builds >"$background_log" 2>&1 &
background_pid=$!
trap 'kill -- -"$background_pid" 2>/dev/null || true' EXIT
step "started the ARM builds and the fuzz build in the background (pid $background_pid, log $background_log)"

step "cargo fmt --check"
cargo fmt --all -- --check
step "python (the benchmarks' programs, the Prometheus text check): pyflakes"
pyflakes3 scripts/bench/*.py tests/support/*.py
step "cargo clippy (every target, the real-runtime tests too)"
cargo clippy --all-targets --locked --features e2e -- -D warnings
step "each feature combination builds without warnings"
for features in "--no-default-features" "--no-default-features --features file-source" \
    "--no-default-features --features local-api" "--no-default-features --features apiserver" \
    "--no-default-features --features node-api" \
    "--no-default-features --features konnectivity" \
    "--no-default-features --features graceful-shutdown" \
    "--no-default-features --features file-source,graceful-shutdown" \
    "--no-default-features --features file-source,local-api" \
    "--no-default-features --features file-source,local-api,https-probes"; do
    echo "-- $features"
    # Library and binary only: the tests enable the default features again.
    # shellcheck disable=SC2086
    cargo clippy --locked --lib --bins $features -- -D warnings
done
step "systemd unit (scripts/verify-unit.sh)"
scripts/verify-unit.sh
step "Yocto layer: crate list in sync with Cargo.lock, recipe against the repository"
scripts/yocto-crates.py --check
step "control plane binaries (scripts/k8s-build.sh)"
# The Go build cache is kept between the builds that share packages (the conformance tooling
# is the same Kubernetes release); the last (--tools) removes it when it has built something.
PICOLET_K8S_KEEP_GOCACHE=1 scripts/k8s-build.sh >/dev/null
step "the conformance tooling (scripts/k8s-build.sh --e2e: e2e.test, ginkgo, ...)"
PICOLET_K8S_KEEP_GOCACHE=1 scripts/k8s-build.sh --e2e >/dev/null
step "the cluster's node components (scripts/k8s-build.sh --cluster: kube-proxy, CoreDNS)"
PICOLET_K8S_KEEP_GOCACHE=1 scripts/k8s-build.sh --cluster >/dev/null
step "the other upstream programs the tests run (scripts/k8s-build.sh --tools: metrics-server, the registry, konnectivity-server)"
scripts/k8s-build.sh --tools >/dev/null
step "containerd 2.x, the runtime of the end-to-end tests (scripts/k8s-build.sh --containerd; cached)"
# Every scratch containerd the tests and scripts/conformance.sh start is this one (the guests
# run the same build; scripts/scratch-containerd.sh follows SCRATCH_CONTAINERD_BIN); the machine's containerd 1.6
# runs the legacy subset after the main run.
SCRATCH_CONTAINERD_BIN=$(scripts/k8s-build.sh --containerd | tail -n 1)
export SCRATCH_CONTAINERD_BIN
"$SCRATCH_CONTAINERD_BIN/containerd" --version
step "cargo test --features e2e (unit, integration, end-to-end on containerd 2.x)"
cargo test --locked --features e2e -- --test-threads=2
step "legacy: the core end-to-end file against the machine's containerd 1.6 (end of life upstream since 2025)"
env -u SCRATCH_CONTAINERD_BIN cargo test --locked --features e2e --test e2e -- --test-threads=2
step "device profile: the core end-to-end file on containerd 2.x with systemd/containerd/ (the plugins a node never uses off, GOGC=50)"
SCRATCH_CONTAINERD_PROFILE=device cargo test --locked --features e2e --test e2e -- --test-threads=2
step "booted guest: picolet as its systemd unit on Debian bookworm (amd64, cgroup v2, containerd 2.x) under qemu: boot, the cgroup v2 files, upgrade in place, reboot, 2 power cuts (scripts/guest.sh; the image is cached)"
# (the debug picolet cargo test just built; containerd 2.x from the step above)
scripts/guest.sh scenarios --arch amd64 --cuts 2
step "booted guest joined to the control plane: graceful node shutdown (logind's delay lock, a logind restart, a cancelled shutdown, a reboot with the pods stopped in order and their final statuses in the apiserver) and the offline boot (scripts/guest.sh shutdown)"
scripts/guest.sh shutdown --arch amd64
step "upstream's node conformance specs: the CI subset (tests/conformance-ci.txt) against picolet on containerd 2.x"
# (the debug picolet cargo test just built)
SPECS=tests/conformance-ci.txt PICOLET_BIN=target/debug/picolet CONFORMANCE_DIR=/tmp/pconf-ci \
    scripts/conformance.sh
step "upstream's image volume [Conformance] spec against picolet on containerd 2.x, its image from a loopback registry as registry.k8s.io's mirror (scripts/image-volume-conformance.sh)"
PICOLET_BIN=target/debug/picolet CONFORMANCE_DIR=/tmp/pconf-iv scripts/image-volume-conformance.sh
step "waiting for the background builds (log $background_log)"
if ! wait "$background_pid"; then
    echo "the background builds failed; their log ends:" >&2
    tail -n 60 "$background_log" >&2
    exit 1
fi
trap - EXIT
grep '^-- ' "$background_log" | sed 's/^/   /'
rm -f "$background_log"
# Figures: the aarch64 default build's size beside its 3 MiB budget (docs/figures.md,
# "Footprint"; scripts/size-report.sh measures every target and build).
for target in aarch64-unknown-linux-gnu aarch64-unknown-linux-musl; do
    bytes=$(stat -c %s "$CROSS_TARGET_DIR/$target/release/picolet")
    printf '   %s release build: %d bytes, %d under the 3 MiB budget (negative: over)\n' \
        "$target" "$bytes" $((3 * 1048576 - bytes))
done
step "footprint guard: the aarch64 default release build against the size recorded in tests/size-record.txt"
scripts/size-guard.sh "$CROSS_TARGET_DIR/aarch64-unknown-linux-gnu/release/picolet"
step "footprint figure: the x86_64 release build's RSS with 10 static pods on containerd 2.x (scripts/footprint.sh; printed, not asserted)"
FOOTPRINT_BIN=$CROSS_TARGET_DIR/x86_64-unknown-linux-gnu/release/picolet FOOTPRINT_SKIP_SIZES=1 \
    FOOTPRINT_SKIP_CLUSTER=1 FOOTPRINT_PODS=10 FOOTPRINT_SECONDS=10 scripts/footprint.sh
# The test binaries of the ARM builds run under qemu-user (cargo's runner in .cargo/config.toml);
# the picolet they start runs under PICOLET_TEST_RUNNER (no binfmt_misc needed).
arm_tests() { # arm_tests TARGET RUNNER...
    local target=$1
    shift
    step "$target under qemu: unit tests, and the binary against the fake runtime and apiserver"
    # shellcheck disable=SC2086
    CARGO_TARGET_DIR=$CROSS_TARGET_DIR PICOLET_TEST_RUNNER="$*" cargo test --locked --target "$target" \
        $ARM_TEST_TARGETS -- --test-threads=2
}
arm_tests armv7-unknown-linux-gnueabihf qemu-arm-static -L /usr/arm-linux-gnueabihf
arm_tests aarch64-unknown-linux-gnu qemu-aarch64-static -L /usr/aarch64-linux-gnu
step "booted guest, arm64 (the platform devices run; only when its root file system is cached, as building it takes minutes: 4.6 on 2026-12-07, 13 on a busier day): the same scenarios with the aarch64 release build"
scripts/guest.sh scenarios --arch arm64 --cuts 2 --if-cached \
    --picolet "$CROSS_TARGET_DIR/aarch64-unknown-linux-gnu/release/picolet"
step "fuzzing: each decoder for 15 s (scripts/fuzz.sh)"
scripts/fuzz.sh 15
step "done"
