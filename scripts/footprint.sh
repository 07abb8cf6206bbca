#!/usr/bin/env bash
# picolet's footprint in one run, printed as figures (nothing is asserted; it fails only when a
# step cannot run at all). Run as root.
#
#   1. stripped release binary per target and build (scripts/size-report.sh's table: static-only
#      and full, for each target whose Rust standard library is installed)
#   2. the release picolet with 0, 10 and 50 static pods on a scratch containerd: time from start
#      to /healthz answering ok and to every pod Running, then picolet's RSS and CPU over
#      FOOTPRINT_SECONDS beside containerd's and the shims'
#   3. the same with an apiserver connection: a real control plane on loopback
#      (scripts/control-plane.sh, binaries from scripts/k8s-build.sh's cache), picolet joined as a
#      node with 10 static pods: start to healthy, to the Node Ready and every mirror pod there,
#      then RSS and CPU
#
# Environment:
#   FOOTPRINT_SECONDS      sampling window of each phase (default 60)
#   FOOTPRINT_PODS         the static pod counts of step 2 (default "0 10 50")
#   FOOTPRINT_SKIP_SIZES=1 skip step 1 (it builds 2 binaries per target, ~3 min each on 2 cores)
#   FOOTPRINT_SKIP_CLUSTER=1 skip step 3
#   FOOTPRINT_BIN          measure this picolet binary (default features) instead of building
#                          target/release/picolet
#   FOOTPRINT_DIR          scratch directory (default /tmp/pfoot; short: unix sockets live there)
#
# Each picolet starts against the pods its predecessor left running (SIGTERM leaves pods running,
# as the kubelet does), so "all Running" counts the new pods and the adopted ones.
# Every process it starts is stopped by PID when it ends, Ctrl-C included.
set -euo pipefail
REPO=$(cd "$(dirname -- "${BASH_SOURCE[0]}")/.." && pwd)
DIR=${FOOTPRINT_DIR:-/tmp/pfoot}
WINDOW=${FOOTPRINT_SECONDS:-60}
read -r -a COUNTS <<<"${FOOTPRINT_PODS:-0 10 50}"
NODE=footprint-node
IMAGE=picolet.local/busybox:1
SCRATCH=$REPO/scripts/scratch-containerd.sh
HELPER=$REPO/scripts/bench/helper.py
WORK=$DIR/pl
CP_DIR=$DIR/cp

. "$REPO/scripts/lib/common.sh"
. "$REPO/scripts/lib/kubelet-config.sh"
helper() { python3 "$HELPER" "$@"; }

[[ $(id -u) == 0 ]] || die "run as root (containerd, runc and CNI need it)"
[[ $WINDOW =~ ^[0-9]+$ && $WINDOW -gt 0 ]] || die "FOOTPRINT_SECONDS must be a positive integer"
for b in cargo python3 ctr containerd getconf; do command -v "$b" >/dev/null || die "$b not found"; done
CLK_TCK=$(getconf CLK_TCK)

PICOLET_PID=
CONTAINERD_STARTED=0
CP_STARTED=0
stop_picolet() {
    stop_pid "$PICOLET_PID"
    PICOLET_PID=
}
# picolet runs with its kubepods tree, as by default, but under a cgroup root of this script's
# own, removed at the end in every mounted hierarchy: the pods outlive each picolet, so no
# picolet is left to remove their cgroups.
CGROUP_ROOT=/picolet-footprint
cleanup() {
    stop_picolet
    [[ $CP_STARTED == 1 ]] && bash "$REPO/scripts/control-plane.sh" stop "$CP_DIR" >/dev/null 2>&1
    [[ $CONTAINERD_STARTED == 1 ]] && bash "$SCRATCH" stop "$DIR" 2>&1 | sed 's/^/  /'
    remove_cgroup_tree "$CGROUP_ROOT"
}
cleanup_on_exit cleanup

write_manifest() { write_sleep_pod "$WORK/manifests" "$1" "$IMAGE"; }

# wait_healthz PORT TIMEOUT: until /healthz answers 200 (healthz needs the runtime listed and the
# loop turning, not just the socket open).
wait_healthz() {
    local port=$1 deadline=$(($(date +%s) + $2))
    while [[ $(date +%s) -lt $deadline ]]; do
        kill -0 "$PICOLET_PID" 2>/dev/null || die "picolet exited (log: $WORK/picolet.log)"
        if python3 -c 'import sys, urllib.request; urllib.request.urlopen("http://127.0.0.1:%s/healthz" % sys.argv[1], timeout=1)' "$port" 2>/dev/null; then
            return 0
        fi
        sleep 0.02
    done
    die "picolet's /healthz did not answer ok within $2 s"
}

say "picolet footprint (figures only; nothing is asserted)"
say "  machine: $(nproc) CPUs, $(awk '/MemTotal/ {printf "%.1f GiB", $2/1048576}' /proc/meminfo) RAM, kernel $(uname -r), $(rustc --version)"
say "  load average at start: $(cut -d' ' -f1-3 /proc/loadavg) (other work on the machine skews the CPU figures)"

# ---------------------------------------------------------------- 1. sizes
section "1. Stripped release binary per target and build"
if [[ ${FOOTPRINT_SKIP_SIZES:-0} == 1 ]]; then
    say "  skipped (FOOTPRINT_SKIP_SIZES=1)"
else
    (cd "$REPO" && SIZE_REPORT_TABLE_ONLY=1 nice -n 5 scripts/size-report.sh) | sed 's/^/  /'
fi

# ---------------------------------------------------------------- 2. static pods
if [[ -n ${FOOTPRINT_BIN:-} ]]; then
    BIN=$FOOTPRINT_BIN
    [[ -x $BIN ]] || die "FOOTPRINT_BIN=$BIN is not an executable"
else
    (cd "$REPO" && cargo build --release --locked -q)
    BIN=$REPO/target/release/picolet
fi
say ""
say "  binary measured below: $BIN ($(stat -c %s "$BIN") bytes, default features)"

if [[ -f $DIR/containerd.pid ]] && p=$(<"$DIR/containerd.pid") && [[ $(cat "/proc/$p/comm" 2>/dev/null) == containerd ]]; then
    die "a containerd for $DIR is already running (pid $p): scripts/scratch-containerd.sh stop $DIR"
fi
[[ -d $DIR ]] && { bash "$SCRATCH" stop "$DIR" >/dev/null 2>&1 || true; rm -rf --one-file-system -- "$DIR/root" "$WORK" "$CP_DIR"; }
mkdir -p "$WORK/manifests" "$WORK/logs"
CONTAINERD_STARTED=1
SOCK=$(bash "$SCRATCH" start "$DIR" 2>"$DIR/scratch-start.log" | tail -n 1) ||
    { cat "$DIR/scratch-start.log" >&2; die "starting the scratch containerd failed"; }
CONTAINERD_PID=$(<"$DIR/containerd.pid")
PORT=$(helper freeport)

# run_phase TITLE WANT_PODS [picolet flags...]: starts picolet, times it to healthy and to the
# pods Running, samples, stops it (its pods keep running).
run_phase() {
    local title=$1 want=$2
    shift 2
    local t0 t_healthy
    t0=$(now)
    "$BIN" --config "$WORK/config.yaml" --root-dir "$WORK/kubelet" --hostname-override "$NODE" "$@" \
        </dev/null >>"$WORK/picolet.log" 2>&1 &
    PICOLET_PID=$!
    wait_healthz "$PORT" 120
    t_healthy=$(since "$t0" 2)
    say "  start -> /healthz ok: $t_healthy s"
    if [[ $want -gt 0 ]]; then
        helper wait-running "$PORT" "$PICOLET_PID" "$want" static- 300 "$t0" >"$WORK/up.txt" ||
            { tail -n 30 "$WORK/picolet.log" >&2; die "the $want static pods did not all run"; }
        say "  start -> all $want pods Running in /pods: $(<"$WORK/up.txt") s"
    fi
    if [[ $(type -t phase_extra) == function ]]; then phase_extra "$t0"; fi
    say "  settling 5 s, then sampling for $WINDOW s"
    sleep 5
    helper sample "$PICOLET_PID" "$CONTAINERD_PID" "$DIR" "$WINDOW" "$CLK_TCK" "$title" | sed 's/^RESULT/  RESULT/'
    stop_picolet
}

kubelet_config staticPodPath="$WORK/manifests" containerRuntimeEndpoint="unix://$SOCK" \
    podLogsDir="$WORK/logs" healthzPort="$PORT" cgroupRoot="$CGROUP_ROOT" >"$WORK/config.yaml"

for n in "${COUNTS[@]}"; do
    [[ $n =~ ^[0-9]+$ ]] || die "FOOTPRINT_PODS: $n is not a count"
    section "2. $n static pods (no apiserver)"
    have=$(find "$WORK/manifests" -name 'static-*.yaml' | wc -l)
    for ((i = have; i < n; i++)); do write_manifest "static-$i"; done
    for ((i = n; i < have; i++)); do rm -f -- "$WORK/manifests/static-$i.yaml"; done
    say "  $n manifests ($((n > have ? n - have : 0)) new, the rest left running by the previous phase)"
    run_phase "picolet with $n static pods" "$n"
done

# ---------------------------------------------------------------- 3. with an apiserver
section "3. Joined to a real control plane (etcd + kube-apiserver on loopback), 10 static pods"
if [[ ${FOOTPRINT_SKIP_CLUSTER:-0} == 1 ]]; then
    say "  skipped (FOOTPRINT_SKIP_CLUSTER=1)"
    exit 0
fi
K8S_BIN=$("$REPO/scripts/k8s-build.sh" 2>"$DIR/k8s-build.log" | tail -n 1) ||
    { tail -n 5 "$DIR/k8s-build.log" >&2; die "the control plane binaries are not built (scripts/k8s-build.sh)"; }
CP_STARTED=1
PICOLET_K8S_BIN=$K8S_BIN bash "$REPO/scripts/control-plane.sh" start "$CP_DIR" --node "$NODE" >/dev/null 2>"$DIR/control-plane.log" ||
    { tail -n 20 "$DIR/control-plane.log" >&2; die "the control plane did not start"; }
KUBECTL=("$K8S_BIN/kubectl" --kubeconfig "$CP_DIR/admin.kubeconfig")
for ((i = 10; i < 50; i++)); do rm -f -- "$WORK/manifests/static-$i.yaml"; done
for ((i = 0; i < 10; i++)); do [[ -f $WORK/manifests/static-$i.yaml ]] || write_manifest "static-$i"; done
say "  kube-apiserver $("$K8S_BIN/kube-apiserver" --version | awk '{print $2}'), node kubeconfig $CP_DIR/node-$NODE.kubeconfig"
phase_extra() { # t0: the Node Ready and the 10 mirror pods listed by the apiserver
    local t0=$1 deadline=$(($(date +%s) + 180)) ready=
    while [[ $(date +%s) -lt $deadline ]]; do
        if [[ -z $ready ]] && [[ $("${KUBECTL[@]}" get node "$NODE" -o 'jsonpath={.status.conditions[?(@.type=="Ready")].status}' 2>/dev/null) == True ]]; then
            ready=$(since "$t0" 2)
            say "  start -> Node Ready in the apiserver: $ready s"
        fi
        if [[ -n $ready ]] && [[ $("${KUBECTL[@]}" get pods -n default --no-headers 2>/dev/null | grep -c "^static-.*-$NODE .*Running") == 10 ]]; then
            say "  start -> 10 mirror pods Running in the apiserver: $(since "$t0" 2) s"
            return 0
        fi
        sleep 0.2
    done
    die "the Node or its mirror pods did not appear within 180 s"
}
run_phase "picolet joined, 10 static pods with mirror pods" 10 --kubeconfig "$CP_DIR/node-$NODE.kubeconfig"
say ""
say "done; logs in $WORK/picolet.log, $DIR/control-plane.log"
