#!/usr/bin/env bash
# scripts/bench.sh: picolet's benchmarks on this machine. Prints figures; asserts nothing about
# them (it fails only when a step cannot run at all). Run as root.
#
#   1. size of the stripped release binary: x86_64, and aarch64 / armv7 when their Rust target
#      is installed and the cross gcc exists
#   2. raw CRI call times and PLEG relist cost: `cargo bench --bench cri` on a scratch containerd
#   3. the release picolet running 10 static pods: its RSS and CPU over BENCH_SECONDS, beside
#      containerd's and the shims'; then containerd alone while picolet is paused (SIGSTOP)
#   4. manifest write -> container running latency, 5 times, next to the raw CRI time of step 2
#
# Environment:
#   BENCH_SECONDS           sampling window of step 3 (default 60)
#   BENCH_BASELINE_SECONDS  window with picolet paused (default: BENCH_SECONDS; 0 skips it).
#                           Keep it over 30 s: the shims wake every 30 s by themselves.
#   BENCH_DIR               scratch directory (default /tmp/pbench; keep it short: unix sockets)
#   BENCH_SKIP_CROSS=1      skip the aarch64/armv7 builds
#
# Every process it starts is stopped by PID on exit, Ctrl-C included; the scratch containerd is
# stopped with scripts/scratch-containerd.sh, which removes its pods, shims and mounts.
set -euo pipefail
cd "$(dirname -- "${BASH_SOURCE[0]}")/.."
REPO=$(pwd -P)

DIR=${BENCH_DIR:-/tmp/pbench}
SECONDS_WINDOW=${BENCH_SECONDS:-60}
BASELINE_SECONDS=${BENCH_BASELINE_SECONDS:-$SECONDS_WINDOW}
WORK=$DIR/pl # picolet's config, manifests, root dir, logs
NODE=bench-node
STATIC_PODS=10
LATENCY_RUNS=5
IMAGE=picolet.local/busybox:1
SCRATCH=$REPO/scripts/scratch-containerd.sh

PROG=bench
. scripts/lib/common.sh
. scripts/lib/kubelet-config.sh
loadavg() { say "  load average now: $(cut -d' ' -f1-3 /proc/loadavg) (1, 5, 15 min; other work on the machine skews the figures)"; }

[[ $(id -u) == 0 ]] || die "run as root (containerd, runc and CNI need it)"
[[ $SECONDS_WINDOW =~ ^[0-9]+$ && $SECONDS_WINDOW -gt 0 ]] || die "BENCH_SECONDS must be a positive integer"
[[ $BASELINE_SECONDS =~ ^[0-9]+$ ]] || die "BENCH_BASELINE_SECONDS must be an integer"
for b in cargo python3 ctr containerd getconf; do
    command -v "$b" >/dev/null || die "$b not found"
done
CLK_TCK=$(getconf CLK_TCK)

# ---------------------------------------------------------------- process bookkeeping

PICOLET_PID=
CHILD_PID= # the helper or cargo command currently waited for
CONTAINERD_STARTED=0

# PIDs of the descendants of $1, deepest first.
descendants() {
    local p kids=()
    mapfile -t kids < <(ps -o pid= --ppid "$1" 2>/dev/null | tr -d ' ')
    for p in "${kids[@]}"; do
        [[ -n $p ]] || continue
        descendants "$p"
        printf '%s\n' "$p"
    done
}

# Stops PID and its descendants: SIGTERM to all, SIGKILL to what is left after 10 s.
stop_tree() {
    local pid=$1 p i left
    [[ -n $pid ]] && kill -0 "$pid" 2>/dev/null || return 0
    local all=()
    mapfile -t all < <(descendants "$pid")
    all+=("$pid")
    for p in "${all[@]}"; do kill -CONT "$p" 2>/dev/null || true; done
    for p in "${all[@]}"; do kill -TERM "$p" 2>/dev/null || true; done
    for ((i = 0; i < 100; i++)); do
        left=0
        for p in "${all[@]}"; do
            if [[ -e /proc/$p ]] && [[ $(cut -d' ' -f3 "/proc/$p/stat" 2>/dev/null) != Z ]]; then left=1; fi
        done
        [[ $left == 1 ]] || break
        sleep 0.1
    done
    for p in "${all[@]}"; do kill -KILL "$p" 2>/dev/null || true; done
    wait "$pid" 2>/dev/null || true
}

# The script's own stdout/stderr, for the trap: it may run while a redirected command is waited
# for (run_child ... >FILE), and its messages belong on the terminal, not in FILE.
exec 3>&1 4>&2
cleanup() {
    exec 1>&3 2>&4
    if [[ -n $CHILD_PID ]]; then
        stop_tree "$CHILD_PID"
    fi
    if [[ -n $PICOLET_PID ]] && kill -0 "$PICOLET_PID" 2>/dev/null; then
        say "bench: stopping picolet (pid $PICOLET_PID)"
        stop_tree "$PICOLET_PID"
    fi
    if [[ $CONTAINERD_STARTED == 1 ]]; then
        say "bench: stopping the scratch containerd in $DIR"
        bash "$SCRATCH" stop "$DIR" 2>&1 | sed 's/^/  /'
    fi
}
cleanup_on_exit cleanup

# Runs a command in the background and waits for it, so that a signal to this script is handled
# at once (the trap then stops the command by PID).
run_child() {
    local rc=0
    "$@" 3>&- 4>&- &
    CHILD_PID=$!
    wait "$CHILD_PID" || rc=$?
    CHILD_PID=
    return "$rc"
}

# ---------------------------------------------------------------- python helpers

HELPER=$PWD/scripts/bench/helper.py

helper() { python3 "$HELPER" "$@"; }

write_manifest() { write_sleep_pod "$WORK/manifests" "$1" "$IMAGE"; }

# ---------------------------------------------------------------- prepare the scratch dir

# Never take over (or stop) a containerd that runs for DIR already.
if [[ -f $DIR/containerd.pid ]]; then
    p=$(<"$DIR/containerd.pid")
    if [[ $p =~ ^[0-9]+$ ]] && [[ $(cat "/proc/$p/comm" 2>/dev/null) == containerd ]]; then
        die "a containerd for $DIR is already running (pid $p); stop it first: scripts/scratch-containerd.sh stop $DIR"
    fi
fi
if [[ -d $DIR ]]; then
    # What a crashed earlier run left: processes, mounts, and pods in containerd's metadata
    # (which a new containerd would recover and the relists would count). The image cache stays.
    bash "$SCRATCH" stop "$DIR" >/dev/null 2>&1 || die "cleaning what an earlier run left in $DIR failed: run scripts/scratch-containerd.sh stop $DIR"
    rm -rf --one-file-system -- "$DIR/root" "$WORK"
fi
mkdir -p "$WORK/manifests" "$WORK/logs" "$WORK/build"

say "picolet benchmarks (figures only; nothing is asserted)"
say "  machine: $(nproc) CPUs, $(awk '/MemTotal/ {printf "%.1f GiB", $2/1048576}' /proc/meminfo) RAM, kernel $(uname -r), $(rustc --version)"
say "  scratch dir: $DIR"

# ---------------------------------------------------------------- 1. binary sizes

section "1. Release binary size (profile.release: opt-level=z, lto, codegen-units=1, panic=abort, strip)"

size_line() { # size_line TRIPLE PATH
    local bytes desc=
    bytes=$(stat -c %s "$2")
    if command -v file >/dev/null; then
        desc=$(file -b "$2" | awk -F', ' '{print $2 ", " $4 ", " $NF}')
    fi
    printf '  %-32s %9d bytes = %7.1f KiB = %5.2f MiB   (%s)\n' "$1" "$bytes" \
        "$(awk -v b="$bytes" 'BEGIN {print b/1024}')" "$(awk -v b="$bytes" 'BEGIN {print b/1048576}')" "$desc"
}

t0=$(now)
if ! run_child cargo build --release --locked >"$WORK/build/x86_64.log" 2>&1; then
    tail -n 20 "$WORK/build/x86_64.log" >&2
    die "cargo build --release failed (log above)"
fi
say "  (x86_64 build: $(since "$t0") s)"
size_line "x86_64-unknown-linux-gnu" "$REPO/target/release/picolet"

installed=$(rustup target list --installed 2>/dev/null || true)
for spec in aarch64-unknown-linux-gnu:aarch64-linux-gnu-gcc armv7-unknown-linux-gnueabihf:arm-linux-gnueabihf-gcc; do
    triple=${spec%%:*} gcc=${spec#*:}
    if [[ ${BENCH_SKIP_CROSS:-0} == 1 ]]; then
        say "  $triple: skipped (BENCH_SKIP_CROSS=1)"
        continue
    fi
    if ! grep -qx "$triple" <<<"$installed"; then
        say "  $triple: skipped (rust target not installed: rustup target add $triple)"
        continue
    fi
    if ! command -v "$gcc" >/dev/null; then
        say "  $triple: skipped ($gcc not found)"
        continue
    fi
    upper=$(tr 'a-z-' 'A-Z_' <<<"$triple")
    t0=$(now)
    if run_child env "CARGO_TARGET_${upper}_LINKER=$gcc" "CC_${triple//-/_}=$gcc" \
        cargo build --release --locked --target "$triple" >"$WORK/build/$triple.log" 2>&1; then
        size_line "$triple" "$REPO/target/$triple/release/picolet"
        say "  (build: $(since "$t0") s)"
    else
        why=$(grep -m 3 -E '^(error|warning: .*failed)' "$WORK/build/$triple.log" | tr '\n' ' ')
        say "  $triple: build failed: ${why:-$(tail -n 1 "$WORK/build/$triple.log")} (log: $WORK/build/$triple.log)"
    fi
done

# ---------------------------------------------------------------- 2. cargo bench

section "2. Raw CRI call times and PLEG relist cost (cargo bench --bench cri)"
loadavg
CONTAINERD_STARTED=1
SOCK=$(bash "$SCRATCH" start "$DIR" 2>"$WORK/scratch-start.log" 3>&- 4>&- | tail -n 1) ||
    { cat "$WORK/scratch-start.log" >&2; die "starting the scratch containerd failed"; }
CONTAINERD_PID=$(<"$DIR/containerd.pid")
say "  scratch containerd: pid $CONTAINERD_PID, socket $SOCK"
say "  command: cargo bench --bench cri -- unix://$SOCK"
run_child cargo bench --locked --bench cri -- "unix://$SOCK" >"$WORK/bench-cri.txt" 2>"$WORK/bench-cri.err" ||
    { cat "$WORK/bench-cri.txt" "$WORK/bench-cri.err" >&2; die "cargo bench failed"; }
sed 's/^/  /' "$WORK/bench-cri.txt"
RAW_CRI_MS=$(sed -n 's/^RESULT raw_cri_median_ms .* sum=\([0-9.]*\).*/\1/p' "$WORK/bench-cri.txt")
RAW_CRI_MS=${RAW_CRI_MS:-n/a}

# ---------------------------------------------------------------- 3. picolet, steady state

section "3. picolet running $STATIC_PODS static pods: memory and CPU"
loadavg
PORT=$(helper freeport)
kubelet_config staticPodPath="$WORK/manifests" containerRuntimeEndpoint="unix://$SOCK" \
    podLogsDir="$WORK/logs" healthzPort="$PORT" >"$WORK/config.yaml"
# No kubepods tree: a benchmark must leave no cgroups in the machine's hierarchy behind (the
# scratch containerd kills the pods after picolet has stopped, so nothing would remove them).
"$REPO/target/release/picolet" --config "$WORK/config.yaml" --root-dir "$WORK/kubelet" \
    --cgroups-per-qos=false --enforce-node-allocatable=none \
    --hostname-override "$NODE" </dev/null >"$WORK/picolet.log" 2>&1 3>&- 4>&- &
PICOLET_PID=$!
say "  picolet: pid $PICOLET_PID, API http://127.0.0.1:$PORT, log $WORK/picolet.log (default verbosity)"
run_child helper wait-api "$PORT" "$PICOLET_PID" 20 || { tail -n 20 "$WORK/picolet.log" >&2; die "picolet did not start"; }
t_pods=$(now)
for ((i = 0; i < STATIC_PODS; i++)); do write_manifest "static-$i"; done
run_child helper wait-running "$PORT" "$PICOLET_PID" "$STATIC_PODS" static- 180 "$t_pods" >"$WORK/up.txt" ||
    { tail -n 30 "$WORK/picolet.log" >&2; die "the static pods did not all run"; }
up=$(<"$WORK/up.txt")
say "  $STATIC_PODS manifests written -> all $STATIC_PODS pods Running in /pods: $up s"
say "  settling 5 s, then sampling for $SECONDS_WINDOW s (BENCH_SECONDS)"
sleep 5
run_child helper sample "$PICOLET_PID" "$CONTAINERD_PID" "$DIR" "$SECONDS_WINDOW" "$CLK_TCK" \
    "picolet running, $STATIC_PODS pods"
if [[ $BASELINE_SECONDS -gt 0 ]]; then
    say ""
    say "  for comparison, containerd and the shims with picolet paused (SIGSTOP), same pods:"
    kill -STOP "$PICOLET_PID"
    run_child helper sample 0 "$CONTAINERD_PID" "$DIR" "$BASELINE_SECONDS" "$CLK_TCK" "picolet paused" ||
        { kill -CONT "$PICOLET_PID"; die "sampling failed"; }
    kill -CONT "$PICOLET_PID"
    sleep 2
fi

# ---------------------------------------------------------------- 4. latency

section "4. Manifest write -> container running, $LATENCY_RUNS times (one new pod each, $STATIC_PODS+ pods running)"
loadavg
say "  clock starts at rename(2) of the manifest into $WORK/manifests; polled every 5 ms (/proc) and 10 ms (/pods)"
say "  seen in /pods:     the pod is listed by picolet's API (file noticed and accepted)"
say "  process exec'd:    a new 'sleep 3600' process exists (runc has started the task: containerd's RUNNING)"
say "  running in /pods:  picolet's API shows the container state 'running'"
say "  ctr task:          containerd's task status of that process, read once afterwards with ctr"
run_child helper latency "$PORT" "$WORK/manifests" "$LATENCY_RUNS" "$NODE" "$SOCK" "$IMAGE" "$RAW_CRI_MS" "$PICOLET_PID" "$WORK/picolet.log"

# ---------------------------------------------------------------- teardown

section "Teardown"
rm -f -- "$WORK"/manifests/*.yaml
run_child helper wait-gone "$PORT" "static-,lat-" 120 >"$WORK/gone.txt"
say "  manifests deleted -> all $((STATIC_PODS + LATENCY_RUNS)) pods gone from /pods: $(<"$WORK/gone.txt") s"
run_child helper wait-stopped "$SOCK" 120 >"$WORK/stopped.txt"
say "  manifests deleted -> no task RUNNING in containerd (ctr, polled every 0.5 s): $(<"$WORK/stopped.txt") (terminationGracePeriodSeconds: 1; sleep as PID 1 ignores SIGTERM)"
say "  containers and sandboxes still listed by containerd: $(ctr -a "$SOCK" -n k8s.io containers ls -q | wc -l)"
kill -TERM "$PICOLET_PID"
for ((i = 0; i < 150; i++)); do
    if ! kill -0 "$PICOLET_PID" 2>/dev/null || [[ $(cut -d' ' -f3 "/proc/$PICOLET_PID/stat" 2>/dev/null) == Z ]]; then
        break
    fi
    sleep 0.1
done
if [[ $i == 150 ]]; then
    say "  picolet did not exit within 15 s of SIGTERM: sending SIGKILL"
    kill -KILL "$PICOLET_PID" 2>/dev/null || true
fi
rc=0
wait "$PICOLET_PID" || rc=$?
say "  picolet stopped by SIGTERM: exit status $rc"
PICOLET_PID=
bash "$SCRATCH" stop "$DIR" 2>&1 | sed 's/^/  /'
CONTAINERD_STARTED=0
helper leftovers "$DIR"
say ""
say "done; logs in $WORK (picolet.log, bench-cri.txt, build/)"
