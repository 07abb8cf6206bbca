#!/usr/bin/env bash
# The cost of probes: the release picolet with 10 static pods of 10 containers each (busybox
# httpd), first without probes, then with one probe per container, 100 in all at a 10 s period
# (40 httpGet readiness, 30 tcpSocket liveness, 30 exec liveness). Prints picolet's RSS and CPU
# over BENCH_SECONDS (default 120) for each phase; asserts nothing. Run as root; it starts its
# own containerd under /tmp/pbench-probes (scripts/scratch-containerd.sh) and stops everything
# it started, by PID, when it ends.
set -euo pipefail
REPO=$(cd "$(dirname -- "${BASH_SOURCE[0]}")/.." && pwd)
DIR=${BENCH_DIR:-/tmp/pbench-probes}
SECONDS_WINDOW=${BENCH_SECONDS:-120}
PODS=10
PER_POD=10
PORT=${BENCH_PORT:-10391}
WORK=$DIR/pl
SCRATCH=$REPO/scripts/scratch-containerd.sh
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
kubelet_config staticPodPath="$WORK/manifests" containerRuntimeEndpoint="unix://$SOCK" \
    podLogsDir="$WORK/logs" healthzPort="$PORT" >"$WORK/config.yaml"
# No kubepods tree: nothing may be left in the machine's cgroup hierarchy.
"$BIN" --config "$WORK/config.yaml" --root-dir "$WORK/root" --hostname-override bench \
    --cgroups-per-qos=false --enforce-node-allocatable=none >"$WORK/picolet.log" 2>&1 &
PICOLET=$!
say "  picolet pid $PICOLET"

# write_pods WITH_PROBES: one manifest per pod, written to a dot file and renamed.
write_pods() {
    local probes=$1 p i port probe
    for ((p = 0; p < PODS; p++)); do
        {
            printf 'apiVersion: v1\nkind: Pod\nmetadata:\n  name: probe-%d\nspec:\n  terminationGracePeriodSeconds: 1\n  containers:\n' "$p"
            for ((i = 0; i < PER_POD; i++)); do
                port=$((8000 + i))
                printf '  - name: c%d\n    image: picolet.local/busybox:1\n    command: [sh, -c, "mkdir -p /w && echo ok >/w/index.html && exec httpd -f -p %d -h /w"]\n' "$i" "$port"
                if [[ $probes == yes ]]; then
                    if ((i < 4)); then
                        probe="readinessProbe:\n      httpGet: {path: /, port: $port}\n      periodSeconds: 10"
                    elif ((i < 7)); then
                        probe="livenessProbe:\n      tcpSocket: {port: $port}\n      periodSeconds: 10"
                    else
                        probe="livenessProbe:\n      exec: {command: [\"true\"]}\n      periodSeconds: 10"
                    fi
                    printf "    $probe\n"
                fi
            done
        } >"$WORK/manifests/.probe-$p.yaml.tmp"
        mv -f "$WORK/manifests/.probe-$p.yaml.tmp" "$WORK/manifests/probe-$p.yaml"
    done
}

export PHASE_FILE=$DIR/phase
rm -f "$PHASE_FILE"
python3 "$(cd "$(dirname -- "${BASH_SOURCE[0]}")" && pwd)/bench/probes.py" "$PORT" "$PICOLET" "$SECONDS_WINDOW" "$PODS" "$PER_POD" &
SAMPLER=$!
say "== phase 1: $PODS pods x $PER_POD containers, no probes (window ${SECONDS_WINDOW} s)"
write_pods no
while [[ ! -e $PHASE_FILE ]]; do
    kill -0 "$SAMPLER" 2>/dev/null || { wait "$SAMPLER"; exit 1; }
    sleep 1
done
say "== phase 2: the same pods with 100 probes at a 10 s period (window ${SECONDS_WINDOW} s)"
write_pods yes
rm -f "$PHASE_FILE"
wait "$SAMPLER"
say "== load average: $(cut -d' ' -f1-3 /proc/loadavg) (other work on the machine skews the figures)"
