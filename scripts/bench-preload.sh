#!/usr/bin/env bash
# Import time of preloaded image archives: the test busybox image (what scripts/build-image.sh
# makes: busybox-static, a config, a manifest) as a plain OCI tar and gzip-compressed, each
# imported BENCH_RUNS times into a scratch containerd (scripts/scratch-containerd.sh) by picolet
# with --image-preload-dir, from a fresh root dir (no record), then once more with the record of
# the last run (the restart case: nothing read). Each run's image has its own layer (a marker
# file of the run), so every blob is written; the figure is picolet's own, the time its log line
# gives from reading the archive to the last image record pinned. Prints the archive's bytes and
# the times; asserts nothing. Run as root.
#
#   BENCH_RUNS    imports per archive (default 5)
#   BENCH_DIR     scratch directory (default /tmp/pbench-preload)
#   PICOLET_BIN   the binary to run (default: cargo build --release, target/release/picolet)
#
# SCRATCH_CONTAINERD_BIN picks the containerd, as for the tests.
set -euo pipefail
REPO=$(cd "$(dirname -- "${BASH_SOURCE[0]}")/.." && pwd)
DIR=${BENCH_DIR:-/tmp/pbench-preload}
RUNS=${BENCH_RUNS:-5}
SCRATCH=$REPO/scripts/scratch-containerd.sh
. "$REPO/scripts/lib/common.sh"
. "$REPO/scripts/lib/kubelet-config.sh"

[[ $(id -u) == 0 ]] || die "run as root (containerd and runc need it)"
for b in containerd ctr gzip python3; do
    command -v "$b" >/dev/null || die "$b not found (scripts/install-deps.sh)"
done
if [[ -z ${PICOLET_BIN:-} ]]; then
    say "== building the release picolet"
    (cd "$REPO" && nice -n 19 cargo build --release --locked -q)
    PICOLET_BIN=$REPO/target/release/picolet
fi
[[ -x $PICOLET_BIN ]] || die "$PICOLET_BIN is not an executable"

PICOLET=
cleanup() {
    set +e
    stop_pid "$PICOLET"
    bash "$SCRATCH" stop "$DIR/c" >/dev/null 2>&1
}
trap cleanup EXIT

say "== starting a scratch containerd in $DIR/c"
rm -rf "$DIR"
mkdir -p "$DIR"
SOCK=$(bash "$SCRATCH" start "$DIR/c" | tail -n 1)
ctr_() { "${SCRATCH_CONTAINERD_BIN:+$SCRATCH_CONTAINERD_BIN/}ctr" --address "$SOCK" -n k8s.io "$@" 2>/dev/null; }
say "  $(ctr_ version | awk '/Version:/ {print $2; exit}') at $SOCK"

# import_once ROOT ARCHIVE: starts picolet with the archive alone in its preload directory and root
# dir ROOT, waits for the archive's log line, stops picolet; prints the line's parenthesis.
import_once() {
    local root=$1 archive=$2 images=$DIR/images port line
    rm -rf "$images"
    mkdir -p "$images" "$root" "$DIR/manifests"
    cp -p "$archive" "$images/"
    port=$(free_port)
    kubelet_config staticPodPath="$DIR/manifests" containerRuntimeEndpoint="unix://$SOCK" \
        healthzPort="$port" podLogsDir="$DIR/logs" >"$DIR/config.yaml"
    "$PICOLET_BIN" --config "$DIR/config.yaml" --root-dir "$root" --hostname-override bench \
        --image-preload-dir "$images" --cgroups-per-qos=false --enforce-node-allocatable=none \
        </dev/null >"$DIR/picolet.log" 2>&1 &
    PICOLET=$!
    for _ in $(seq 600); do
        line=$(grep -m1 -E "preloaded .*\(pinned; |image archive .*: " "$DIR/picolet.log" || true)
        [[ -n $line ]] && break
        sleep 0.1
    done
    stop_pid "$PICOLET"
    PICOLET=
    [[ $line == *"preloaded "* ]] || die_with_log "$DIR/picolet.log" 20 "no import of $archive"
    printf '%s\n' "${line##*(pinned; }"
}

# ms TEXT: the duration at the end of a log line's parenthesis ("...; 41.2ms)"), in ms.
ms() {
    python3 -c '
import re, sys
m = re.search(r"; ([0-9.]+)(ns|µs|us|ms|s)\)$", sys.argv[1])
v, u = float(m.group(1)), m.group(2)
print("%.1f" % (v * {"ns": 1e-6, "µs": 1e-3, "us": 1e-3, "ms": 1, "s": 1e3}[u]))' "$1"
}

say "== importing, $RUNS runs per archive (picolet $PICOLET_BIN)"
printf '%-10s %12s %s\n' archive bytes "import ms per run (median)"
for kind in tar tar.gz; do
    times=()
    bytes=0
    for ((r = 1; r <= RUNS; r++)); do
        mkdir -p "$DIR/add-$r"
        echo "run $r $(now)" >"$DIR/add-$r/run"
        name=picolet.local/bench-preload:$r
        bash "$REPO/scripts/build-image.sh" --add "$DIR/add-$r" "$DIR/busybox-$r.tar" "$name" sleep 1 \
            >/dev/null
        archive=$DIR/busybox-$r.tar
        if [[ $kind == tar.gz ]]; then
            gzip -6 -c "$archive" >"$archive.gz"
            archive=$archive.gz
        fi
        bytes=$(stat -c %s "$archive")
        out=$(import_once "$DIR/root-$kind-$r" "$archive")
        [[ $out == "3 blobs written, 0 present;"* ]] || die "run $r of $kind: not all written: $out"
        times+=("$(ms "$out")")
        last_archive=$archive
        ctr_ images rm "$name" >/dev/null
    done
    median=$(printf '%s\n' "${times[@]}" | sort -n | awk '{a[NR]=$1} END {print a[int((NR+1)/2)]}')
    printf '%-10s %12d %s (%s)\n' "$kind" "$bytes" "${times[*]}" "$median"
done

say "== the restart case: the last archive imported into a new root dir, then again with its record"
import_once "$DIR/root-restart" "$last_archive" >/dev/null
out=$(import_once "$DIR/root-restart" "$last_archive")
[[ $out == "imported before, not read again;"* ]] || die "not skipped: $out"
printf '%-10s %12d %s ms (record matched, image present: not read)\n' "restart" \
    "$(stat -c %s "$last_archive")" "$(ms "$out")"
