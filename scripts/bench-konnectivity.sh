#!/usr/bin/env bash
# Figures of the Konnectivity tunnel, from the end-to-end test's setup (the real kube-apiserver
# with its `cluster` egress through the real konnectivity-server, picolet's agent reaching the
# server through a byte-counting relay): `kubectl exec -- echo` latency through the tunnel, 50
# concurrent execs, the redial after a server restart and after a cut link, then with
# KONNECTIVITY_FIGURES_SECONDS set, picolet's RSS with the tunnel up and idle, the link's bytes
# over that idle window (extrapolated to a day), picolet's RSS with no agent, and the exec latency
# through the tunnel against direct (the apiserver restarted without its egress selector,
# picolet reporting an InternalIP it serves on), both in the same run. The picolet is
# the test's debug build. Prints figures; asserts nothing beyond what the test asserts. Run as
# root (the test's containerd). BENCH_SECONDS: the idle window (default 300).
set -euo pipefail
REPO=$(cd "$(dirname -- "${BASH_SOURCE[0]}")/.." && pwd)
WINDOW=${BENCH_SECONDS:-300}
cd "$REPO"
echo "== $(date -u +%FT%TZ), $(nproc) CPUs, load $(cut -d' ' -f1-3 /proc/loadavg)"
KONNECTIVITY_FIGURES_SECONDS=$WINDOW CARGO_INCREMENTAL=0 nice -n 19 \
    cargo test --features e2e --test konnectivity_e2e -- --nocapture 2>&1 |
    grep -E '^(figure:|kubectl exec|[0-9]+ concurrent|link cut|without the server|whole test)'
