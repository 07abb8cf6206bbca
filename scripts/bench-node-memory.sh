#!/usr/bin/env bash
# The whole node's memory, not picolet's alone: picolet, containerd and one shim per pod, by
# proportional set size (PSS, /proc/PID/smaps_rollup: each page shared by N processes counts
# 1/N to each, so the shims' shared pages are counted once in all), with 0, 10 and 50 static
# pods, on containerd 2.x with its stock plugin set and with the device profile the project
# ships (systemd/containerd/: the plugins a node never uses turned off, and Go's GC settings
# for containerd and its shims). Figures only; nothing is asserted. Run as root.
#
#   scripts/bench-node-memory.sh
#
# Environment:
#   NODE_MEMORY_PODS       static pod counts, in rising order (default "0 10 50")
#   NODE_MEMORY_PROFILES   containerd configurations (default "stock device"): stock and
#                          device as scripts/scratch-containerd.sh's SCRATCH_CONTAINERD_PROFILE
#                          gives them, on containerd 2.x; 1.6 for the machine's containerd 1.6
#                          (Debian's) with the test instance's configuration
#   NODE_MEMORY_SETTLE     seconds between the last pod Running and the reading (default 20)
#   PICOLET_BIN            the picolet measured (default target/release/picolet, built when
#                          missing)
#   SCRATCH_CONTAINERD_BIN containerd 2.x (default: scripts/k8s-build.sh --containerd's)
#   NODE_MEMORY_DIR        scratch directory (default /tmp/pnmem)
#
# Each profile gets a containerd of its own; picolet runs once per profile and the manifests
# grow from one count to the next (the pods of the smaller count stay). Every process it
# starts is stopped by PID when it ends, Ctrl-C included.
set -euo pipefail
REPO=$(cd "$(dirname -- "${BASH_SOURCE[0]}")/.." && pwd)
DIR=${NODE_MEMORY_DIR:-/tmp/pnmem}
SETTLE=${NODE_MEMORY_SETTLE:-20}
read -r -a COUNTS <<<"${NODE_MEMORY_PODS:-0 10 50}"
read -r -a PROFILES <<<"${NODE_MEMORY_PROFILES:-stock device}"
NODE=memory-node
IMAGE=picolet.local/busybox:1
SCRATCH=$REPO/scripts/scratch-containerd.sh
HELPER=$REPO/scripts/bench/helper.py
WORK=$DIR/pl
PROG=bench-node-memory

. "$REPO/scripts/lib/common.sh"
. "$REPO/scripts/lib/kubelet-config.sh"
helper() { python3 "$HELPER" "$@"; }

[[ $(id -u) == 0 ]] || die "run as root (containerd, runc and CNI need it)"
[[ $SETTLE =~ ^[0-9]+$ ]] || die "NODE_MEMORY_SETTLE must be a number of seconds, not '$SETTLE'"
for n in "${COUNTS[@]}"; do [[ $n =~ ^[0-9]+$ ]] || die "NODE_MEMORY_PODS: '$n' is not a count"; done
if [[ -z ${SCRATCH_CONTAINERD_BIN:-} ]]; then
    SCRATCH_CONTAINERD_BIN=$("$REPO/scripts/k8s-build.sh" --containerd 2>/dev/null | tail -n 1) ||
        die "containerd 2.x is not built: scripts/k8s-build.sh --containerd"
fi
export SCRATCH_CONTAINERD_BIN
BIN=${PICOLET_BIN:-$REPO/target/release/picolet}
if [[ -z ${PICOLET_BIN:-} && ! -x $BIN ]]; then (cd "$REPO" && cargo build --release --locked -q); fi
[[ -x $BIN ]] || die "PICOLET_BIN=$BIN is not an executable"

PICOLET_PID=
CONTAINERD_STARTED=0
CGROUP_ROOT=/picolet-node-memory
cleanup() {
    stop_pid "$PICOLET_PID"
    PICOLET_PID=
    [[ $CONTAINERD_STARTED == 1 ]] && bash "$SCRATCH" stop "$DIR" >/dev/null 2>&1
    CONTAINERD_STARTED=0
    remove_cgroup_tree "$CGROUP_ROOT"
}
cleanup_on_exit cleanup

say "the node's memory by PSS: picolet, containerd 2.x and its shims (figures only)"
say "  machine: $(nproc) CPUs, $(awk '/MemTotal/ {printf "%.1f GiB", $2/1048576}' /proc/meminfo) RAM, kernel $(uname -r), load $(cut -d' ' -f1-3 /proc/loadavg)"
say "  picolet: $BIN ($(stat -c %s "$BIN") bytes); $("$SCRATCH_CONTAINERD_BIN/containerd" --version 2>/dev/null | awk '{print $1, $3}')"
say "  device profile: $(grep -c '^  "io\.containerd' "$REPO/systemd/containerd/picolet-device.toml") plugins off; $(sed -n 's/^Environment=//p' "$REPO/systemd/containerd/picolet-device.conf" | tr '\n' ' ')"
declare -A RESULT
for profile in "${PROFILES[@]}"; do
    section "containerd profile: $profile"
    bash "$SCRATCH" stop "$DIR" >/dev/null 2>&1 || true
    rm -rf --one-file-system -- "$DIR/root" "$WORK"
    mkdir -p "$WORK/manifests" "$WORK/logs"
    CONTAINERD_STARTED=1
    case $profile in
        stock | device) start_env=(SCRATCH_CONTAINERD_PROFILE="$profile") ;;
        1.6) start_env=(-u SCRATCH_CONTAINERD_BIN -u SCRATCH_CONTAINERD_PROFILE) ;;
        *) die "NODE_MEMORY_PROFILES: '$profile' is not stock, device or 1.6" ;;
    esac
    SOCK=$(env "${start_env[@]}" bash "$SCRATCH" start "$DIR" 2>"$DIR.start.log" | tail -n 1) ||
        { cat "$DIR.start.log" >&2; die "the scratch containerd did not start with profile $profile"; }
    CONTAINERD_PID=$(<"$DIR/containerd.pid")
    say "  $(env "${start_env[@]}" bash -c 'PATH=${SCRATCH_CONTAINERD_BIN:-/nonexistent}:$PATH; containerd --version; ctr -a "$1" plugins ls 2>/dev/null | awk "NR > 1 && \$NF == \"ok\"" | wc -l' _ "$SOCK" | awk 'NR == 1 { v = $3 } NR == 2 { print "containerd " v ", " $1 " plugins loaded" }')"
    PORT=$(helper freeport)
    kubelet_config staticPodPath="$WORK/manifests" containerRuntimeEndpoint="unix://$SOCK" \
        podLogsDir="$WORK/logs" healthzPort="$PORT" cgroupRoot="$CGROUP_ROOT" >"$WORK/config.yaml"
    "$BIN" --config "$WORK/config.yaml" --root-dir "$WORK/kubelet" --hostname-override "$NODE" \
        </dev/null >>"$WORK/picolet.log" 2>&1 &
    PICOLET_PID=$!
    have=0
    for n in "${COUNTS[@]}"; do
        for ((i = have; i < n; i++)); do write_sleep_pod "$WORK/manifests" "static-$i" "$IMAGE"; done
        have=$((n > have ? n : have))
        t0=$(now)
        helper wait-running "$PORT" "$PICOLET_PID" "$n" static- 600 "$t0" >/dev/null ||
            { tail -n 30 "$WORK/picolet.log" >&2; die "the $n static pods did not all run (profile $profile)"; }
        sleep "$SETTLE"
        out=$(helper pss "$PICOLET_PID" "$CONTAINERD_PID" "$DIR" "$n static pods, profile $profile, read $SETTLE s after all ran")
        grep -v '^RESULT' <<<"$out"
        RESULT[$profile.$n]=$(sed -n 's/^RESULT node_pss //p' <<<"$out")
    done
    cleanup
done

section "summary: PSS in MiB (picolet + containerd + shims = node)"
printf '  %-8s' pods
for profile in "${PROFILES[@]}"; do printf ' %34s' "$profile"; done
printf '\n'
for n in "${COUNTS[@]}"; do
    printf '  %-8s' "$n"
    for profile in "${PROFILES[@]}"; do
        r=${RESULT[$profile.$n]}
        printf ' %34s' "$(awk -v r="$r" 'BEGIN { split(r, kv, " "); for (i in kv) { split(kv[i], p, "="); v[p[1]] = p[2] }
            printf "%.1f + %.1f + %.1f = %.1f", v["picolet_kib"]/1024, v["containerd_kib"]/1024, v["shims_kib"]/1024, v["node_kib"]/1024 }')"
    done
    printf '\n'
done
