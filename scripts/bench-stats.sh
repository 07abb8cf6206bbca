#!/usr/bin/env bash
# The cost of serving the accounting: the release picolet with 10 static pods of busybox
# containers, first 1 container each (10 containers), then 10 each (100). At each size:
# picolet's RSS and CPU over BENCH_SECONDS (default 90) with nothing scraped, then the CPU and
# wall of one scrape of /metrics/cadvisor, /stats/summary, /metrics/resource and /metrics
# (median of BENCH_RUNS, default 20; the first scrape, which locates each container's cgroup,
# apart), then RSS and CPU again while every endpoint is scraped every 15 s. Prints figures;
# asserts nothing. Run as root; it starts its own containerd under /tmp/pbench-stats
# (scripts/scratch-containerd.sh) and stops what it started, by PID, when it ends.
set -euo pipefail
REPO=$(cd "$(dirname -- "${BASH_SOURCE[0]}")/.." && pwd)
DIR=${BENCH_DIR:-/tmp/pbench-stats}
SECONDS_WINDOW=${BENCH_SECONDS:-90}
RUNS=${BENCH_RUNS:-20}
PODS=10
PORT=${BENCH_PORT:-10392}
WORK=$DIR/pl
SCRATCH=$REPO/scripts/scratch-containerd.sh
HELPER=$REPO/scripts/bench/stats.py
. "$REPO/scripts/lib/common.sh"
. "$REPO/scripts/lib/kubelet-config.sh"

say "== building the release picolet"
(cd "$REPO" && nice -n 19 cargo build --release --locked -q)
BIN=$REPO/target/release/picolet

say "== starting a scratch containerd in $DIR/c"
mkdir -p "$DIR"
SOCK=$(bash "$SCRATCH" start "$DIR/c" | tail -n 1)
PICOLET=
cleanup() {
    stop_pid "$PICOLET"
    bash "$SCRATCH" stop "$DIR/c" >/dev/null 2>&1 || true
}
trap cleanup EXIT

rm -rf "$WORK"
mkdir -p "$WORK/manifests"
# Neither image GC nor eviction: whether the machine's disk (shared with other builds) is 85 %
# full must not remove the pods being measured.
kubelet_config staticPodPath="$WORK/manifests" containerRuntimeEndpoint="unix://$SOCK" \
    podLogsDir="$WORK/logs" healthzPort="$PORT" imageGCHighThresholdPercent=100 \
    imageGCLowThresholdPercent=99 'evictionHard:
  memory.available: "0"' >"$WORK/config.yaml"
# No kubepods tree: the benchmark creates no cgroups in the machine's own hierarchy, so each
# pod's figures are the sum of its containers' (with the tree: one more cgroup read per pod).
"$BIN" --config "$WORK/config.yaml" --root-dir "$WORK/root" --hostname-override bench \
    --cgroups-per-qos=false --enforce-node-allocatable=none >"$WORK/picolet.log" 2>&1 &
PICOLET=$!
say "  picolet pid $PICOLET"

# write_pods PER_POD: one manifest per pod, written to a dot file and renamed.
write_pods() {
    local per=$1 p i
    for ((p = 0; p < PODS; p++)); do
        {
            printf 'apiVersion: v1\nkind: Pod\nmetadata:\n  name: stats-%d\nspec:\n  terminationGracePeriodSeconds: 1\n  containers:\n' "$p"
            for ((i = 0; i < per; i++)); do
                printf '  - name: c%d\n    image: picolet.local/busybox:1\n    command: [sleep, "86400"]\n' "$i"
            done
        } >"$WORK/manifests/.stats-$p.yaml.tmp"
        mv -f "$WORK/manifests/.stats-$p.yaml.tmp" "$WORK/manifests/stats-$p.yaml"
    done
}

for per in 1 10; do
    n=$((PODS * per))
    say "== $PODS pods x $per containers ($n containers)"
    write_pods "$per"
    python3 "$HELPER" wait "$PORT" "$PICOLET" "$n"
    sleep 20 # the old pods' removal and the start-up work settle
    python3 "$HELPER" window "$PORT" "$PICOLET" "$SECONDS_WINDOW" idle "$n containers, not scraped"
    python3 "$HELPER" cost "$PORT" "$PICOLET" "$n" "$RUNS"
    python3 "$HELPER" window "$PORT" "$PICOLET" "$SECONDS_WINDOW" scrape "$n containers, scraped"
done
say "== load average: $(cut -d' ' -f1-3 /proc/loadavg) (other work on the machine skews the figures)"
