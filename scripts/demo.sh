#!/usr/bin/env bash
# picolet's main job, on this machine: starts a scratch containerd (its own socket, state and
# images under $DIR, nothing of the machine's own containerd touched), builds the busybox test
# image offline, and runs picolet on the static pods in examples/. Run as root.
#
#   scripts/demo.sh                 run until Ctrl-C (edit $DIR/manifests meanwhile)
#   DEMO_SECONDS=30 scripts/demo.sh run 30 s after the pods are up, then clean up
set -euo pipefail
cd "$(dirname -- "${BASH_SOURCE[0]}")/.."
repo=$(pwd -P)
. scripts/lib/common.sh
. scripts/lib/kubelet-config.sh

DIR=${PICOLET_DEMO_DIR:-/tmp/picolet-demo}
PORT=${PICOLET_DEMO_PORT:-10248}

scripts/install-deps.sh
echo "== building picolet (release)"
cargo build --release --locked
bin=$repo/target/release/picolet
ls -l "$bin"

pid=
cleanup() {
    trap - EXIT INT TERM
    if [ -n "$pid" ] && kill -0 "$pid" 2>/dev/null; then
        kill -TERM "$pid"
        wait "$pid" 2>/dev/null || true
    fi
    echo "== stopping the scratch containerd and its pods"
    "$repo/scripts/scratch-containerd.sh" stop "$DIR" || true
    remove_cgroup_tree "$CGROUP_ROOT" || true
}

# The pods' cgroups live under a tree of the demo's own (cgroupRoot below), removed when it ends,
# in every mounted cgroup hierarchy (v2, or v1's controllers).
CGROUP_ROOT=/picolet-demo
trap cleanup EXIT INT TERM

echo "== starting a scratch containerd in $DIR"
# Each demo starts from nothing: what an earlier run left there is stopped and removed.
scripts/scratch-containerd.sh stop "$DIR" >/dev/null 2>&1 || true
rm -rf "$DIR"
sock=$(scripts/scratch-containerd.sh start "$DIR" | tail -n 1)
mkdir -p "$DIR/manifests"
cp examples/*.yaml examples/*.json "$DIR/manifests/"
kubelet_config staticPodPath="$DIR/manifests" containerRuntimeEndpoint="unix://$sock" \
    podLogsDir="$DIR/logs" healthzPort="$PORT" cgroupRoot="$CGROUP_ROOT" >"$DIR/kubelet-config.yaml"

echo "== running picolet (log: $DIR/picolet.log)"
"$bin" --config "$DIR/kubelet-config.yaml" --root-dir "$DIR/kubelet" >"$DIR/picolet.log" 2>&1 &
pid=$!

api() { python3 -c "import sys,urllib.request; sys.stdout.write(urllib.request.urlopen('http://127.0.0.1:$PORT$1', timeout=2).read().decode())" 2>/dev/null; }

table() {
    api /pods | python3 -c '
import json, sys
pods = json.load(sys.stdin)["items"]
print("%-10s %-22s %-10s %-16s %s" % ("NAMESPACE", "NAME", "PHASE", "IP", "CONTAINERS (state/restarts)"))
for p in pods:
    s = p.get("status", {})
    cs = ", ".join("%s %s/%d" % (c["name"], next(iter(c["state"]), "?"), c["restartCount"]) for c in s.get("containerStatuses", []))
    print("%-10s %-22s %-10s %-16s %s" % (p["metadata"]["namespace"], p["metadata"]["name"], s.get("phase", "?"), s.get("podIP", "-"), cs))
'
}

echo "== waiting for the pods to run"
want=$(ls "$DIR/manifests" | wc -l)
for _ in $(seq 1 120); do
    running=$(api /pods | python3 -c 'import json,sys; print(sum(p["status"].get("phase")=="Running" for p in json.load(sys.stdin)["items"]))' 2>/dev/null || echo 0)
    [ "$running" = "$want" ] && break
    kill -0 "$pid" || { echo "picolet exited:"; cat "$DIR/picolet.log"; exit 1; }
    sleep 0.5
done
table
echo
echo "== what containerd runs (ground truth: ctr tasks ls)"
ctr -a "$sock" -n k8s.io tasks ls
echo
ip=$(api /pods | python3 -c 'import json,sys; print(next(p["status"].get("podIP","") for p in json.load(sys.stdin)["items"] if p["metadata"]["name"].startswith("web-")))')
echo "== the web pod answers on http://$ip:8080/"
python3 -c "import urllib.request; print(urllib.request.urlopen('http://$ip:8080/', timeout=5).read().decode().strip())"
echo
echo "== picolet's log"
cat "$DIR/picolet.log"
echo
echo "Try: edit or delete files in $DIR/manifests, or write an invalid one over a good one;"
echo "     curl http://127.0.0.1:$PORT/pods, curl http://127.0.0.1:$PORT/manifests;"
echo "     $bin logs --healthz-port $PORT web-\$(hostname) (the web pod's log)"
if [ -n "${DEMO_SECONDS:-}" ]; then
    sleep "$DEMO_SECONDS"
    table
else
    echo "Press Ctrl-C to stop picolet and the scratch containerd."
    tail -n 0 -f "$DIR/picolet.log" &
    wait "$pid"
fi
