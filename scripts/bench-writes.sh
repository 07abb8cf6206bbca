#!/usr/bin/env bash
# Flash wear: the bytes picolet itself writes to disk with 10 steady static pods. Starts a
# scratch containerd (scripts/scratch-containerd.sh) and picolet with its root dir, manifests,
# pod logs and its own log under BENCH_DIR (on a real disk, not tmpfs: /proc/<pid>/io counts
# only what reaches the block layer), waits until the 10 pods run and BENCH_SETTLE seconds more,
# then over BENCH_SECONDS reads picolet's write_bytes from /proc/<pid>/io and, with strace on
# every thread, which files it wrote, created, renamed or removed. Prints the bytes written in
# the window and per hour (extrapolated); asserts nothing. Run as root.
#
#   BENCH_SECONDS   the measured window (default 300)
#   BENCH_SETTLE    seconds between "all running" and the window (default 30)
#   BENCH_DIR       scratch directory (default /tmp/pbench-writes)
#   PICOLET_BIN     the binary to run (default: cargo build --release, target/release/picolet)
#
# The containers' own logs are written by containerd, not picolet: they are not counted.
set -euo pipefail
REPO=$(cd "$(dirname -- "${BASH_SOURCE[0]}")/.." && pwd)
DIR=${BENCH_DIR:-/tmp/pbench-writes}
WINDOW=${BENCH_SECONDS:-300}
SETTLE=${BENCH_SETTLE:-30}
PODS=10
WORK=$DIR/pl
SCRATCH=$REPO/scripts/scratch-containerd.sh
. "$REPO/scripts/lib/common.sh"
. "$REPO/scripts/lib/kubelet-config.sh"

[[ $(id -u) == 0 ]] || die "run as root (containerd, runc and strace need it)"
for b in python3 strace containerd ctr; do
    command -v "$b" >/dev/null || die "$b not found (scripts/install-deps.sh; apt-get install strace)"
done
if [[ -z ${PICOLET_BIN:-} ]]; then
    say "== building the release picolet"
    (cd "$REPO" && nice -n 19 cargo build --release --locked -q)
    PICOLET_BIN=$REPO/target/release/picolet
fi
[[ -x $PICOLET_BIN ]] || die "$PICOLET_BIN is not an executable"
fs=$(df --output=fstype "$(dirname "$DIR")" | tail -n 1)
[[ $fs != tmpfs ]] || die "BENCH_DIR $DIR is on tmpfs: nothing there reaches a disk; choose another"

PICOLET=
STRACE=
cleanup() {
    set +e
    stop_pid "$STRACE"
    stop_pid "$PICOLET"
    bash "$SCRATCH" stop "$DIR/c" >/dev/null 2>&1
}
trap cleanup EXIT

say "== starting a scratch containerd in $DIR/c"
mkdir -p "$DIR"
SOCK=$(bash "$SCRATCH" start "$DIR/c" | tail -n 1)
rm -rf "$WORK"
mkdir -p "$WORK/manifests"
PORT=$(free_port)
kubelet_config staticPodPath="$WORK/manifests" containerRuntimeEndpoint="unix://$SOCK" \
    podLogsDir="$WORK/logs" healthzPort="$PORT" >"$WORK/config.yaml"
"$PICOLET_BIN" --config "$WORK/config.yaml" --root-dir "$WORK/root" --hostname-override bench \
    --cgroups-per-qos=false --enforce-node-allocatable=none </dev/null >"$WORK/picolet.log" 2>&1 &
PICOLET=$!
say "  picolet pid $PICOLET ($PICOLET_BIN), its log $WORK/picolet.log (default verbosity)"
for ((p = 0; p < PODS; p++)); do
    printf 'apiVersion: v1\nkind: Pod\nmetadata:\n  name: steady-%d\nspec:\n  terminationGracePeriodSeconds: 1\n  containers:\n  - name: sleep\n    image: picolet.local/busybox:1\n    command: [sleep, "36000"]\n' "$p" \
        >"$WORK/manifests/.steady-$p.yaml.tmp"
    mv -f "$WORK/manifests/.steady-$p.yaml.tmp" "$WORK/manifests/steady-$p.yaml"
done
python3 - "$PORT" "$PODS" <<'EOF' || die "the pods did not all run within 180 s"
import json, sys, time, urllib.request
port, want = sys.argv[1], int(sys.argv[2])
t0 = time.time()
while time.time() - t0 < 180:
    try:
        items = json.load(urllib.request.urlopen(f"http://127.0.0.1:{port}/pods", timeout=5))["items"]
        running = [p for p in items if p.get("status", {}).get("phase") == "Running"]
        if len(running) >= want:
            print(f"  {len(running)} pods Running after {time.time() - t0:.1f} s")
            sys.exit(0)
    except Exception:
        pass
    time.sleep(0.5)
sys.exit(1)
EOF
say "== settling ${SETTLE} s, then measuring for ${WINDOW} s"
sleep "$SETTLE"
write_bytes() { awk '/^write_bytes:/ {print $2}' "/proc/$PICOLET/io"; }
syscw() { awk '/^syscw:/ {print $2}' "/proc/$PICOLET/io"; }
strace -f -qq -yy -s 0 -e trace=openat,creat,rename,renameat,renameat2,unlink,unlinkat,mkdir,mkdirat,write,pwrite64,writev,fsync,fdatasync,truncate,ftruncate \
    -o "$WORK/strace.txt" -p "$PICOLET" 2>/dev/null &
STRACE=$!
sleep 1
w0=$(write_bytes)
c0=$(syscw)
sleep "$WINDOW"
w1=$(write_bytes)
c1=$(syscw)
kill "$STRACE" 2>/dev/null || true
wait "$STRACE" 2>/dev/null || true
STRACE=
kill -0 "$PICOLET" 2>/dev/null || die "picolet died during the window (log: $WORK/picolet.log)"
say ""
say "== bytes picolet wrote to disk (/proc/$PICOLET/io write_bytes) with $PODS steady pods"
python3 - "$w0" "$w1" "$c0" "$c1" "$WINDOW" "$WORK/strace.txt" <<'EOF'
import collections, re, sys
w0, w1, c0, c1, window = (int(x) for x in sys.argv[1:6])
d = w1 - w0
print(f"  window {window} s: {d} bytes written to disk, {c1 - c0} write syscalls of any kind (sockets included)")
print(f"  per hour (extrapolated): {d * 3600 / window:.0f} bytes = {d * 3600 / window / 1024:.1f} KiB")
files = collections.Counter()
ops = collections.Counter()
for line in open(sys.argv[6], errors="replace"):
    m = re.search(r'(\w+)\((\d+)<([^>]*)>.*=\s*(\d+)', line)
    if m and m.group(1) in ("write", "pwrite64", "writev"):
        target = m.group(3)
        if target.startswith("/"):
            files[target] += int(m.group(4))
        continue
    m = re.search(r'(openat|creat|rename\w*|unlink\w*|mkdir\w*|fsync|fdatasync|\w*truncate)\((.*)\)\s*=\s*(-?\d+)', line)
    if not m:
        continue
    call, args = m.group(1), m.group(2)
    if call == "openat" and not re.search(r'O_WRONLY|O_RDWR|O_CREAT', args):
        continue
    path = re.findall(r'"([^"]*)"', args) or re.findall(r'<([^>]*)>', args)
    ops[(call, path[-1] if path else args)] += 1
if not files and not ops:
    print("  files written, created, renamed or removed in the window (strace): none")
for f, n in files.most_common(20):
    print(f"  wrote {n} bytes to {f}")
for (call, p), n in ops.most_common(20):
    print(f"  {call} {p}: {n} times")
EOF
say "  (load average $(cut -d' ' -f1-3 /proc/loadavg); picolet's own log: $(stat -c %s "$WORK/picolet.log") bytes in all)"
