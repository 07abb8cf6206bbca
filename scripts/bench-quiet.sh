#!/usr/bin/env bash
# What picolet writes to its log while something keeps failing. Three situations, each with
# a fresh picolet (default verbosity, as a device runs it) against a private containerd
# (scripts/scratch-containerd.sh):
#   nocni     one static pod on a containerd with no CNI configuration: its sandbox cannot
#             be created;
#   cgroup    one leftover pod cgroup that cannot be removed: a process is kept in it (the
#             cgroup is made under this script's own --cgroup-root, /picolet-bench-quiet-PID,
#             in every v1 hierarchy picolet uses, and removed at the end; nothing else of the
#             machine's cgroups is touched);
#   registry  one static pod whose image is on 127.0.0.1:<a closed port>.
# For each: after a warm-up of BENCH_WARMUP s (default 20; the first report falls in it), the
# lines and bytes picolet logs over BENCH_SECONDS (default 60), extrapolated to an hour (and
# said so), with the most frequent messages (numbers and ids folded). Then the recovery: the
# CNI configuration of the nocni situation is put back and the time until its pod runs is
# printed (the runtime's status is read every 5 s: expect a few seconds). Asserts nothing. Run
# as root. SCRATCH_CONTAINERD_BIN (as scripts/test.sh sets it) runs containerd 2.x; unset, the
# machine's containerd (Debian's 1.6).
#
#   scripts/bench-quiet.sh            builds the debug picolet (test.sh's settings) and runs
#   PICOLET_BIN=path scripts/bench-quiet.sh   runs that binary instead
set -euo pipefail
REPO=$(cd "$(dirname -- "${BASH_SOURCE[0]}")/.." && pwd)
DIR=${BENCH_DIR:-/tmp/pbench-quiet}
WINDOW=${BENCH_SECONDS:-60}
WARMUP=${BENCH_WARMUP:-20}
RECOVERY_LIMIT=${BENCH_RECOVERY_LIMIT:-600}
SITUATIONS=${BENCH_SITUATIONS:-nocni cgroup registry}
SCRATCH=$REPO/scripts/scratch-containerd.sh
PROG=bench-quiet
. "$REPO/scripts/lib/common.sh"
. "$REPO/scripts/lib/kubelet-config.sh"

[[ $(id -u) == 0 ]] || die "must run as root (containerd, runc and cgroups need it)"

if [[ -n ${PICOLET_BIN:-} ]]; then
    BIN=$PICOLET_BIN
else
    say "== building the debug picolet"
    (cd "$REPO" && CARGO_INCREMENTAL=0 CARGO_PROFILE_DEV_DEBUG=line-tables-only \
        nice -n 10 cargo build --locked -q --bin picolet)
    BIN=$REPO/target/debug/picolet
fi
[[ -x $BIN ]] || die "no picolet binary at $BIN"

CG_ROOT=/picolet-bench-quiet-$$
PICOLET=
HOLDER=
mkdir -p "$DIR"

# The mount points of the v1 hierarchies picolet puts pod cgroups in.
cgroup_mounts() {
    awk '{ split($0, a, " - "); split(a[2], f, " "); if (f[1] == "cgroup") { split(a[1], p, " "); print p[5] } }' \
        /proc/self/mountinfo | while read -r m; do
        case ${m##*/} in cpu | cpu,cpuacct | cpuacct,cpu | memory | pids) printf '%s\n' "$m" ;; esac
    done
}

# Every cgroup mount point (picolet makes its kubepods tree in each hierarchy).
all_cgroup_mounts() {
    awk '{ split($0, a, " - "); split(a[2], f, " "); if (f[1] == "cgroup" || f[1] == "cgroup2") { split(a[1], p, " "); print p[5] } }' \
        /proc/self/mountinfo
}

remove_cg_tree() {
    local m
    for m in $(all_cgroup_mounts); do
        [[ -d $m$CG_ROOT ]] || continue
        find "$m$CG_ROOT" -depth -type d -exec rmdir {} + 2>/dev/null || true
    done
}

cleanup() {
    stop_pid "$PICOLET"
    stop_pid "$HOLDER"
    bash "$SCRATCH" stop "$DIR/c" >/dev/null 2>&1 || true
    remove_cg_tree
}
trap cleanup EXIT

SOCK=
start_containerd() {
    bash "$SCRATCH" stop "$DIR/c" >/dev/null 2>&1 || true
    rm -rf "$DIR/c/root"
    SOCK=$(bash "$SCRATCH" start "$DIR/c" 2>/dev/null | tail -n 1)
    [[ -S $SOCK ]] || die "scratch containerd did not start"
}

PORT=
# start_picolet WORK EXTRA_FLAGS...
start_picolet() {
    local work=$1
    shift
    rm -rf "$work"
    mkdir -p "$work/manifests"
    PORT=$(python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])')
    kubelet_config staticPodPath="$work/manifests" containerRuntimeEndpoint="unix://$SOCK" \
        podLogsDir="$work/logs" healthzPort="$PORT" port=0 \
        imageGCHighThresholdPercent=100 imageGCLowThresholdPercent=99 \
        "evictionHard:
  memory.available: \"0\"" >"$work/config.yaml"
    "$BIN" --config "$work/config.yaml" --root-dir "$work/root" --hostname-override bench \
        "$@" >"$work/picolet.log" 2>&1 &
    PICOLET=$!
}

# pod_manifest NAME IMAGE
pod_manifest() {
    printf 'apiVersion: v1\nkind: Pod\nmetadata:\n  name: %s\nspec:\n  terminationGracePeriodSeconds: 1\n  containers:\n  - name: main\n    image: %s\n    command: [sleep, "100000"]\n' "$1" "$2"
}

put_manifest() { # put_manifest WORK NAME IMAGE
    pod_manifest "$2" "$3" >"$1/manifests/.$2.tmp"
    mv -f "$1/manifests/.$2.tmp" "$1/manifests/$2.yaml"
}

pod_phase() { # pod_phase NAME: the phase the local API reports, or nothing
    curl -s --max-time 5 "http://127.0.0.1:$PORT/pods" 2>/dev/null |
        python3 -c 'import json,sys
try:
    d = json.load(sys.stdin)
except Exception:
    sys.exit(0)
for p in d.get("items", []):
    if p["metadata"]["name"].startswith(sys.argv[1] + "-"):
        cs = p.get("status", {}).get("containerStatuses") or []
        run = any("running" in (c.get("state") or {}) for c in cs)
        print("Running" if run else p.get("status", {}).get("phase", ""))' "$1" || true
}

# measure NAME WORK: sleeps the warm-up, then counts what the log gains over the window.
measure() {
    local name=$1 log=$2/picolet.log start end lines bytes
    sleep "$WARMUP"
    kill -0 "$PICOLET" 2>/dev/null || die_with_log "$log" 30 "picolet ended during the warm-up"
    start=$(stat -c %s "$log")
    sleep "$WINDOW"
    end=$(stat -c %s "$log")
    tail -c "+$((start + 1))" "$log" | head -c "$((end - start))" >"$2/window.log"
    lines=$(wc -l <"$2/window.log")
    bytes=$((end - start))
    printf '%-9s window %3d s after %2d s: %6d lines %8d bytes; per hour (x%s, extrapolated): %8d lines %10d bytes; first %d s in all: %d lines\n' \
        "$name" "$WINDOW" "$WARMUP" "$lines" "$bytes" "$(awk -v w="$WINDOW" 'BEGIN { printf "%.0f", 3600 / w }')" \
        "$((lines * 3600 / WINDOW))" "$((bytes * 3600 / WINDOW))" "$((WARMUP + WINDOW))" "$(wc -l <"$log")"
    # The messages, without the klog prefix, numbers and ids folded.
    sed -E 's/^[IWEF][0-9]{4} [0-9:.]+ +[0-9]+ [^]]*\] //; s/[0-9a-f]{12,}/<id>/g; s/[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}/<uid>/g; s/[0-9]+/N/g' \
        "$2/window.log" | cut -c1-110 | sort | uniq -c | sort -rn | head -n 5 | sed 's/^/            /'
}

for s in $SITUATIONS; do
    case $s in
        nocni)
            start_containerd
            mkdir -p "$DIR/cni-saved"
            rm -f "$DIR/cni-saved"/*
            mv "$DIR/c/cni/conf"/* "$DIR/cni-saved/"
            W=$DIR/nocni
            start_picolet "$W" --cgroups-per-qos=false --enforce-node-allocatable=none
            put_manifest "$W" stuck picolet.local/busybox:1
            measure nocni "$W"
            # Recovery: the CNI configuration appears; how long until the pod runs.
            t0=$(date +%s.%N)
            cp "$DIR/cni-saved"/* "$DIR/c/cni/conf/.tmp"
            mv "$DIR/c/cni/conf/.tmp" "$DIR/c/cni/conf/$(ls "$DIR/cni-saved")"
            ran=
            while (($(awk -v a="$t0" -v b="$(date +%s.%N)" 'BEGIN { print (b - a < '"$RECOVERY_LIMIT"') }'))); do
                if [[ $(pod_phase stuck) == Running ]]; then
                    ran=$(awk -v a="$t0" -v b="$(date +%s.%N)" 'BEGIN { printf "%.1f", b - a }')
                    break
                fi
                sleep 0.5
            done
            if [[ -n $ran ]]; then
                printf 'recovery  the CNI configuration put back: the pod ran after %s s\n' "$ran"
            else
                printf 'recovery  the CNI configuration put back: the pod did not run within %s s\n' "$RECOVERY_LIMIT"
            fi
            grep -E 'sandbox' "$W/picolet.log" | tail -n 3 | cut -c1-160 | sed 's/^/            /'
            stop_pid "$PICOLET"
            PICOLET=
            ;;
        cgroup)
            start_containerd
            uid=00000000-51c4-4bad-8bad-$(printf '%012d' $$)
            mounts=$(cgroup_mounts)
            [[ -n $mounts ]] || die "no v1 cpu/memory/pids hierarchy mounted"
            for m in $mounts; do
                mkdir -p "$m$CG_ROOT/kubepods/besteffort/pod$uid"
            done
            sleep 100000 &
            HOLDER=$!
            for m in $mounts; do
                echo "$HOLDER" >"$m$CG_ROOT/kubepods/besteffort/pod$uid/cgroup.procs"
            done
            W=$DIR/cgroup
            start_picolet "$W" --cgroup-root="$CG_ROOT"
            measure cgroup "$W"
            stop_pid "$PICOLET"
            PICOLET=
            stop_pid "$HOLDER"
            HOLDER=
            remove_cg_tree
            ;;
        registry)
            start_containerd
            closed=$(python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])')
            W=$DIR/registry
            start_picolet "$W" --cgroups-per-qos=false --enforce-node-allocatable=none
            put_manifest "$W" pull "127.0.0.1:$closed/quiet/none:1"
            measure registry "$W"
            stop_pid "$PICOLET"
            PICOLET=
            ;;
        *) die "unknown situation $s (nocni, cgroup, registry)" ;;
    esac
done
if [[ -n ${SCRATCH_CONTAINERD_BIN:-} ]]; then
    CONTAINERD_VERSION=$("$SCRATCH_CONTAINERD_BIN/containerd" --version 2>/dev/null | awk '{ print $3 }')
else
    CONTAINERD_VERSION=$(containerd --version 2>/dev/null | awk '{ print $3 }')
fi
printf 'picolet %s, containerd %s, %s\n' "$(git -C "$REPO" rev-parse --short HEAD 2>/dev/null || echo '?')" \
    "${CONTAINERD_VERSION:-?}" "$(date -u '+%Y-%m-%d %H:%M UTC')"
