#!/usr/bin/env bash
# The end-to-end tests against containerd 2.x instead of the machine's 1.6: builds
# containerd 2.x from the Go module in tests/containerd2 (scripts/k8s-build.sh
# --containerd, cached by version like the control plane) and runs the given test
# files (default: every one that starts a scratch containerd) with
# SCRATCH_CONTAINERD_BIN pointing at it, so that scripts/scratch-containerd.sh
# runs that containerd, its runc shim and ctr. Run as root.
#
#   scripts/test-containerd2.sh                 every end-to-end test file
#   scripts/test-containerd2.sh e2e e2e_logs    those files only (tests/NAME.rs)
#   CONFORMANCE=1 scripts/test-containerd2.sh   then the conformance CI subset
#                                               (tests/conformance-ci.txt) too
#
# Prints a line per test file and its result; exits non-zero if any failed.
set -euo pipefail
cd "$(dirname -- "${BASH_SOURCE[0]}")/.."

PROG=test-containerd2
# shellcheck source=scripts/lib/common.sh
. scripts/lib/common.sh
[[ $(id -u) == 0 ]] || die "run as root (containerd, runc and CNI need it)"

ALL=(e2e e2e_cgroups e2e_eviction e2e_fidelity e2e_gc e2e_image_volume e2e_lifecycle e2e_logs e2e_preload e2e_storage
    e2e_probe_storm e2e_quiet node_api_e2e registry_e2e cluster_e2e)
if [[ $# -gt 0 ]]; then
    TESTS=("$@")
else
    TESTS=("${ALL[@]}")
fi
for t in "${TESTS[@]}"; do
    [[ -f tests/$t.rs ]] || die "no test file tests/$t.rs"
done

BIN=$(scripts/k8s-build.sh --containerd | tail -n 1) || die "building containerd 2.x failed"
export SCRATCH_CONTAINERD_BIN=$BIN
log "$("$BIN/containerd" --version)"

failed=()
for t in "${TESTS[@]}"; do
    log "cargo test --features e2e --test $t (containerd 2.x)"
    if cargo test --locked --features e2e --test "$t" -- --test-threads=2; then
        printf 'containerd 2.x: %s ok\n' "$t"
    else
        printf 'containerd 2.x: %s FAILED\n' "$t"
        failed+=("$t")
    fi
done
if [[ ${CONFORMANCE:-0} == 1 ]]; then
    cargo build --locked
    if SPECS=tests/conformance-ci.txt PICOLET_BIN=target/debug/picolet \
        CONFORMANCE_DIR=/tmp/pconf-ctrd2 scripts/conformance.sh; then
        printf 'containerd 2.x: conformance CI subset ok\n'
    else
        printf 'containerd 2.x: conformance CI subset FAILED\n'
        failed+=(conformance)
    fi
fi
[[ ${#failed[@]} -eq 0 ]] || die "failed against containerd 2.x: ${failed[*]}"
