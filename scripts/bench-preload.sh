#!/usr/bin/env bash
# Import time of preloaded image archives, and boot to pods running from them with no registry.
#
# 1. The test busybox image (what scripts/build-image.sh makes: busybox-static, a config, a
#    manifest) as a plain OCI tar, gzip- and zstd-compressed, each imported BENCH_RUNS times into
#    a scratch containerd (scripts/scratch-containerd.sh) by picolet with --image-preload-dir,
#    from a fresh root dir (no record), then once more with the record of the last run (the
#    restart case: nothing read). Each run's image has its own layer (a marker file of the run),
#    so every blob is written.
# 2. Images of ~5 MB and ~100 MB (the busybox image plus a file of that many random bytes, which
#    no compressor shrinks), plain, gzip and zstd, BENCH_LARGE_RUNS times each; between imports the
#    image is removed with `ctr images rm --sync`, so containerd holds none of its blobs.
# 3. Boot to pods running, offline: a new scratch containerd per run whose images (the pause
#    image too) are removed, picolet started with only archives in its preload directory (the
#    pause image's and the ~5 MB image's) and a static pod naming the latter; the time from
#    picolet's start to the pod Running in its local API (/pods). BENCH_BOOT_RUNS runs.
#
# Import times are picolet's own, the time its log line gives from reading the archive to the
# last image record pinned. Prints the archives' bytes and the times; asserts nothing. Run as
# root.
#
#   BENCH_RUNS        imports per busybox archive (default 5)
#   BENCH_LARGE_RUNS  imports per ~5 MB / ~100 MB archive (default 3)
#   BENCH_BOOT_RUNS   boots (default 3)
#   BENCH_DIR         scratch directory (default /tmp/pbench-preload)
#   PICOLET_BIN       the binary to run (default: cargo build --release, target/release/picolet)
#
# SCRATCH_CONTAINERD_BIN picks the containerd, as for the tests.
set -euo pipefail
REPO=$(cd "$(dirname -- "${BASH_SOURCE[0]}")/.." && pwd)
DIR=${BENCH_DIR:-/tmp/pbench-preload}
RUNS=${BENCH_RUNS:-5}
LARGE_RUNS=${BENCH_LARGE_RUNS:-3}
BOOT_RUNS=${BENCH_BOOT_RUNS:-3}
SCRATCH=$REPO/scripts/scratch-containerd.sh
. "$REPO/scripts/lib/common.sh"
. "$REPO/scripts/lib/kubelet-config.sh"

[[ $(id -u) == 0 ]] || die "run as root (containerd and runc need it)"
for b in containerd ctr gzip zstd python3; do
    command -v "$b" >/dev/null || die "$b not found (scripts/install-deps.sh)"
done
if [[ -z ${PICOLET_BIN:-} ]]; then
    say "== building the release picolet"
    (cd "$REPO" && nice -n 19 cargo build --release --locked -q)
    PICOLET_BIN=$REPO/target/release/picolet
fi
[[ -x $PICOLET_BIN ]] || die "$PICOLET_BIN is not an executable"

PICOLET=
BOOT_C=
cleanup() {
    set +e
    stop_pid "$PICOLET"
    bash "$SCRATCH" stop "$DIR/c" >/dev/null 2>&1
    [[ -z $BOOT_C ]] || bash "$SCRATCH" stop "$BOOT_C" >/dev/null 2>&1
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
# compress ARCHIVE KIND: prints the path of ARCHIVE as KIND (tar, tar.gz, tar.zst).
compress() {
    case $2 in
        tar) printf '%s\n' "$1" ;;
        tar.gz) gzip -6 -c "$1" >"$1.gz" && printf '%s\n' "$1.gz" ;;
        tar.zst) zstd -q -3 -f -o "$1.zst" "$1" && printf '%s\n' "$1.zst" ;;
    esac
}

for kind in tar tar.gz tar.zst; do
    times=()
    bytes=0
    for ((r = 1; r <= RUNS; r++)); do
        mkdir -p "$DIR/add-$r"
        echo "run $r $(now)" >"$DIR/add-$r/run"
        name=picolet.local/bench-preload:$r
        bash "$REPO/scripts/build-image.sh" --add "$DIR/add-$r" "$DIR/busybox-$r.tar" "$name" sleep 1 \
            >/dev/null
        archive=$(compress "$DIR/busybox-$r.tar" "$kind")
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

say "== ~5 MB and ~100 MB images (busybox and a file of random bytes), $LARGE_RUNS runs per archive"
printf '%-18s %12s %s\n' archive bytes "import ms per run (median)"
for mb in 5 100; do
    for kind in tar tar.gz tar.zst; do
        times=()
        bytes=0
        for ((r = 1; r <= LARGE_RUNS; r++)); do
            rm -rf "$DIR/add-big"
            mkdir -p "$DIR/add-big"
            head -c $((mb * 1000000)) /dev/urandom >"$DIR/add-big/data"
            name=picolet.local/bench-$mb:$r
            bash "$REPO/scripts/build-image.sh" --add "$DIR/add-big" "$DIR/big.tar" "$name" sleep 1 \
                >/dev/null
            archive=$(compress "$DIR/big.tar" "$kind")
            bytes=$(stat -c %s "$archive")
            out=$(import_once "$DIR/root-$mb-$kind-$r" "$archive")
            [[ $out == "3 blobs written, 0 present;"* ]] || die "$mb MB $kind run $r: not all written: $out"
            times+=("$(ms "$out")")
            ctr_ images rm --sync "$name" >/dev/null
            rm -f "$DIR/big.tar" "$DIR/big.tar.gz" "$DIR/big.tar.zst"
        done
        median=$(printf '%s\n' "${times[@]}" | sort -n | awk '{a[NR]=$1} END {print a[int((NR+1)/2)]}')
        printf '%-18s %12d %s (%s)\n' "${mb}MB.$kind" "$bytes" "${times[*]}" "$median"
    done
done

say "== boot to pods running, offline: only archives in the preload directory, $BOOT_RUNS runs"
rm -rf "$DIR/add-boot"
mkdir -p "$DIR/add-boot"
head -c 5000000 /dev/urandom >"$DIR/add-boot/data"
APP=picolet.local/bench-boot:1
bash "$REPO/scripts/build-image.sh" --add "$DIR/add-boot" "$DIR/boot-app.tar" "$APP" sleep 3600 >/dev/null
gzip -6 -c "$DIR/boot-app.tar" >"$DIR/boot-app.tar.gz"
boots=()
for ((r = 1; r <= BOOT_RUNS; r++)); do
    BOOT_C=$DIR/b$r
    bsock=$(bash "$SCRATCH" start "$BOOT_C" | tail -n 1)
    bctr() { "${SCRATCH_CONTAINERD_BIN:+$SCRATCH_CONTAINERD_BIN/}ctr" --address "$bsock" -n k8s.io "$@"; }
    pause_tar=$(ls "$BOOT_C"/images/pause-*.tar)
    for im in $(bctr images ls -q); do bctr images rm --sync "$im" >/dev/null; done
    [[ -z $(bctr images ls -q) ]] || die "images left in $BOOT_C"
    images=$DIR/boot-images-$r manifests=$DIR/boot-manifests-$r
    rm -rf "$images" "$manifests" "$DIR/boot-root-$r"
    mkdir -p "$images" "$manifests"
    cp "$pause_tar" "$images/pause.tar"
    cp "$DIR/boot-app.tar.gz" "$images/app.tar.gz"
    write_sleep_pod "$manifests" app "$APP"
    port=$(free_port)
    kubelet_config staticPodPath="$manifests" containerRuntimeEndpoint="unix://$bsock" \
        healthzPort="$port" podLogsDir="$DIR/logs" >"$DIR/config.yaml"
    t0=$(now)
    "$PICOLET_BIN" --config "$DIR/config.yaml" --root-dir "$DIR/boot-root-$r" --hostname-override bench \
        --image-preload-dir "$images" --cgroups-per-qos=false --enforce-node-allocatable=none \
        </dev/null >"$DIR/boot-$r.log" 2>&1 &
    PICOLET=$!
    # Polls the local API every 20 ms; prints the seconds from t0 to the pod Running.
    secs=$(python3 - "$port" "$t0" <<'PY'
import json, sys, time, urllib.request
port, t0 = int(sys.argv[1]), float(sys.argv[2])
deadline = time.time() + 120
while time.time() < deadline:
    try:
        with urllib.request.urlopen("http://127.0.0.1:%d/pods" % port, timeout=1) as r:
            pods = json.load(r).get("items", [])
        if any(p["metadata"]["name"].startswith("app") and p.get("status", {}).get("phase") == "Running" for p in pods):
            print("%.2f" % (time.time() - t0))
            sys.exit(0)
    except Exception:
        pass
    time.sleep(0.02)
sys.exit(1)
PY
    ) || die_with_log "$DIR/boot-$r.log" 30 "run $r: the pod did not run within 120 s"
    boots+=("$secs")
    stop_pid "$PICOLET"
    PICOLET=
    bash "$SCRATCH" stop "$BOOT_C" >/dev/null 2>&1
    BOOT_C=
done
median=$(printf '%s\n' "${boots[@]}" | sort -n | awk '{a[NR]=$1} END {print a[int((NR+1)/2)]}')
printf '%-18s %12d %s s (%s s)\n' "boot, app.tar.gz" "$(stat -c %s "$DIR/boot-app.tar.gz")" "${boots[*]}" "$median"
