#!/usr/bin/env bash
# The cost of a measurement pass of ephemeral storage, for trees of 1,000 and 100,000 files
# (BENCH_FILES=n,m for others). Prints figures; asserts nothing.
#
#   scripts/bench-storage.sh [bench|agent|all]     (default: all)
#
# bench: `cargo bench --bench storage` (benches/storage.rs) walks each tree as the eviction
#   rounds do, within the default budget of entries a pass, on the blocking pool, while a task
#   on the executor ticks every 100 ms; it prints the passes a figure takes, a pass's wall time,
#   the whole walk, the tick's worst lateness, and one unbounded pass.
# agent: the release picolet on a scratch containerd (run as root), one static pod with an
#   emptyDir on disk; each tree is copied into the emptyDir in turn and the running agent
#   measures it in its eviction rounds (every 10 s). Printed from picolet's own log (-v=4): its
#   passes while the tree was there (entries, wall time median and longest, how many passes a
#   complete figure took), the sync loop's tick (due every second) at its latest in the
#   minutes the tree was measured, and the Summary API's figure for the volume against `du`.
#   Everything it starts lives under /tmp/pbench-storage-agent and is stopped by PID on exit.
#   PICOLET_BIN=path runs that binary instead of building the release one.
#
# The trees live under BENCH_DIR (default /var/tmp/pbench-storage: 100 files of 4 KiB a
# directory) and are kept for the next run (BENCH_KEEP=0 removes them); the page cache is left
# as it is (warm after the first run).
set -euo pipefail
REPO=$(cd "$(dirname -- "${BASH_SOURCE[0]}")/.." && pwd)
cd "$REPO"
. scripts/lib/common.sh
WHAT=${1:-all}
BENCH_DIR=${BENCH_DIR:-/var/tmp/pbench-storage}
FILES=${BENCH_FILES:-1000,100000}

bench() {
    section "the walk alone (cargo bench --bench storage)"
    # The agent part copies the same trees: kept until it is done.
    local keep=${BENCH_KEEP:-1}
    [[ $WHAT == all ]] && keep=1
    BENCH_KEEP=$keep nice -n 10 cargo bench --locked --bench storage
}

# make_tree ROOT FILES: the layout benches/storage.rs makes (kept, marked complete).
make_tree() {
    [[ -e $1/.complete ]] && return
    python3 - "$1" "$2" <<'PY'
import os, shutil, sys
root, files = sys.argv[1], int(sys.argv[2])
shutil.rmtree(root, ignore_errors=True)
data = b"x" * 4096
for i in range(files):
    d = os.path.join(root, f"d{i // 100}")
    if i % 100 == 0:
        os.makedirs(d, exist_ok=True)
    with open(os.path.join(d, f"f{i}"), "wb") as f:
        f.write(data)
open(os.path.join(root, ".complete"), "wb").close()
PY
}

agent() {
    [[ $(id -u) == 0 ]] || die "the agent part runs as root (containerd, runc)"
    # Global: the EXIT trap runs after this function has returned.
    dir=/tmp/pbench-storage-agent
    cleanup() {
        [[ -n ${PICOLET_PID:-} ]] && kill "$PICOLET_PID" 2>/dev/null
        wait 2>/dev/null || true
        scripts/scratch-containerd.sh stop "$dir/c" >/dev/null 2>&1 || true
    }
    trap cleanup EXIT
    scripts/scratch-containerd.sh stop "$dir/c" >/dev/null 2>&1 || true
    rm -rf --one-file-system "$dir"
    mkdir -p "$dir/manifests"
    section "the running agent (scratch containerd, eviction rounds every 10 s)"
    local bin=${PICOLET_BIN:-target/release/picolet}
    if [[ -z ${PICOLET_BIN:-} ]]; then
        log "building the release picolet"
        nice -n 10 cargo build --locked --quiet --release
    fi
    local sock port
    sock=$(scripts/scratch-containerd.sh start "$dir/c" | tail -n 1)
    port=$(python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])')
    cat >"$dir/config.yaml" <<YAML
apiVersion: kubelet.config.k8s.io/v1beta1
kind: KubeletConfiguration
staticPodPath: $dir/manifests
containerRuntimeEndpoint: unix://$sock
podLogsDir: $dir/logs
healthzPort: $port
port: 0
evictionHard:
  memory.available: "0"
YAML
    cat >"$dir/manifests/tree.yaml" <<YAML
apiVersion: v1
kind: Pod
metadata: {name: tree}
spec:
  terminationGracePeriodSeconds: 1
  volumes: [{name: scratch, emptyDir: {}}]
  containers:
  - {name: main, image: picolet.local/busybox:1, command: [sleep, "86400"], volumeMounts: [{name: scratch, mountPath: /scratch}]}
YAML
    "$bin" --config "$dir/config.yaml" --root-dir "$dir/root" \
        --hostname-override bench-node --cgroups-per-qos=false --enforce-node-allocatable=none \
        -v=4 >"$dir/picolet.log" 2>&1 &
    PICOLET_PID=$!
    local api=http://127.0.0.1:$port uid="" t0
    t0=$(now)
    while [[ -z $uid ]]; do
        (($(since "$t0" 0) < 120)) || die_with_log "$dir/picolet.log" 40 "the pod did not run in 120 s"
        uid=$(curl -fsS "$api/pods" 2>/dev/null | python3 -c '
import json, sys
for p in json.load(sys.stdin)["items"]:
    if p["metadata"]["name"] == "tree-bench-node" and p["status"].get("phase") == "Running":
        print(p["metadata"]["uid"])' 2>/dev/null || true)
        sleep 1
    done
    local vol="$dir/root/pods/$uid/volumes/kubernetes.io~empty-dir/scratch"
    say "$bin, $(nproc) CPUs, $(date -u '+%F %H:%M UTC'), load average $(cut -d' ' -f1-3 /proc/loadavg)"
    local files from inodes
    for files in ${FILES//,/ }; do
        make_tree "$BENCH_DIR/t$files" "$files"
        cp -a "$BENCH_DIR/t$files" "$vol/t$files"
        rm -f "$vol/t$files/.complete"
        from=$(wc -l <"$dir/picolet.log")
        t0=$(now)
        # A complete figure of the tree in the Summary API, then two minutes more (about 12
        # rounds, and two of the sync loop's one-minute reports of its tick).
        inodes=0
        while ((inodes < files)); do
            (($(since "$t0" 0) < 600)) || die_with_log "$dir/picolet.log" 40 "no complete figure of $files files in 600 s"
            sleep 2
            inodes=$(curl -fsS "$api/stats/summary" | python3 -c '
import json, sys
for p in json.load(sys.stdin).get("pods", []):
    for v in p.get("volume") or []:
        if v.get("name") == "scratch":
            print(v.get("inodesUsed", 0))' || echo 0)
            inodes=${inodes:-0}
        done
        local first
        first=$(since "$t0")
        sleep 125
        local summary du_bytes
        summary=$(curl -fsS "$api/stats/summary" | python3 -c '
import json, sys
for p in json.load(sys.stdin).get("pods", []):
    for v in p.get("volume") or []:
        if v.get("name") == "scratch":
            print(v.get("usedBytes", 0), v.get("inodesUsed", 0))')
        du_bytes=$(du -x -s -B1 "$vol" | cut -f1)
        say ""
        say "$files files in the emptyDir: the first complete figure after ${first} s (load average $(cut -d' ' -f1-3 /proc/loadavg))"
        say "  Summary API: ${summary% *} bytes, ${summary#* } inodes; du -x -s -B1: $du_bytes bytes"
        tail -n "+$((from + 1))" "$dir/picolet.log" | python3 -c '
import re, statistics, sys
passes, ticks = [], []
for line in sys.stdin:
    m = re.search(r"storage: measurement pass over (\d+) directories: (\d+) entries in ([\d.]+) ms, (\d+) figures completed, (\d+) to finish", line)
    if m:
        passes.append((int(m[2]), float(m[3]), int(m[4]), int(m[5])))
    m = re.search(r"sync loop: (\d+) ticks in the last (\d+) s, the worst ([\d.]+) ms late", line)
    if m:
        ticks.append((int(m[1]), float(m[3])))
if not passes:
    sys.exit("no measurement pass logged")
walls = sorted(p[1] for p in passes)
entries = [p[0] for p in passes]
# Passes per complete figure of the tree: from one pass that left nothing to finish to the next.
print(f"  {len(passes)} passes: {min(entries)}..{max(entries)} entries each, "
      f"wall time median {statistics.median(walls):.1f} ms, longest {walls[-1]:.1f} ms")
done = [i for i, p in enumerate(passes) if p[3] == 0]
spans = [b - a for a, b in zip(done, done[1:])]
if spans:
    print(f"  passes from one complete figure to the next: {max(spans)}")
if ticks:
    print(f"  the sync loop tick (1 s): {sum(t[0] for t in ticks)} ticks in {len(ticks)} one-minute reports, "
          f"the worst {max(t[1] for t in ticks):.1f} ms late")
else:
    print("  the sync loop tick: no one-minute report in this time")
'
        rm -rf "$vol/t$files"
        sleep 12
    done
    if [[ ${BENCH_KEEP:-1} == 0 ]]; then rm -rf "$BENCH_DIR"; fi
}

case $WHAT in
bench) bench ;;
agent) agent ;;
all)
    bench
    agent
    ;;
*) die "usage: $0 [bench|agent|all]" ;;
esac
