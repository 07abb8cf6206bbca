#!/usr/bin/env bash
# picolet and the upstream kubelet (the release tests/k8s pins, built by
# scripts/k8s-build.sh --e2e) side by side, one after the other on the same
# scratch containerd with the same static pod manifests, no apiserver. Prints a
# table; asserts nothing (it fails only when a step cannot run at all). Run as
# root.
#
# For each node agent, for each static pod count (default 0, 10 and 50), on a
# containerd started clean for it: start the agent with that many busybox pods
# in its manifest directory, time start to /healthz answering ok and to every
# pod's containers running (ground truth from containerd: `ctr tasks ls`, a
# sandbox and a container per pod), let it settle 5 s, then sample its RSS every
# second and its CPU time over the window; then stop it. Then, on a clean
# containerd again, the latencies: 20 manifests written one after another into
# the running agent's directory, each timed from the write to its container's
# first command having run (it touches a file in a hostPath the script polls
# every 10 ms), p50 and p95; and a container that exits 2 s after it starts,
# timed from its exit to the next instance's first command (its first restart,
# which neither agent delays: the crash back-off starts with the second).
# Then joined: for each agent, a control plane of its own (scripts/control-plane.sh
# with its controllers, the apiserver auditing the node's requests) and a clean
# containerd; the agent joins through a byte-counting TCP relay in front of the
# apiserver; 10 pods (COMPARE_JOINED_PODS) bound to the node are created at once
# and each timed from the create to the apiserver showing it Running (polled
# every 0.2 s); after 10 s of rest, the node's requests (audit events, by
# request) and the bytes through the relay (both ways, TLS included) over the
# window, given per minute and per day (the window's bytes times 86400 / its
# length: an extrapolation), with the TCP connections the relay accepted and,
# per request kind (verb, resource), the requests a minute. Then, with
# COMPARE_CHURN_SECONDS, the same figures over a window of churn: a pod created
# every minute and the one before it deleted. Beside the agent, over both windows,
# two watches of the node's pods as the admin, from the same resourceVersion, one
# asking for JSON and one for protobuf: the bytes of their bodies are what the
# node's pod watch carries in each encoding (the same events; TLS and HTTP/2
# framing not counted), per day.
# Binary sizes are of the files run: picolet's release build and the kubelet
# as scripts/k8s-build.sh builds it (-s -w, stripped of symbols).
#
# Environment:
#   COMPARE_SECONDS  sampling window per phase (default 60)
#   COMPARE_PODS     static pod counts (default "0 10 50"; empty skips those phases)
#   COMPARE_LATENCY_PODS  manifests timed one by one (default 20; 0 skips the phase)
#   COMPARE_JOINED_PODS   API pods in the joined phase (default 10; 0 skips the phase)
#   COMPARE_REST_SECONDS  the joined phase's window at rest (default COMPARE_SECONDS); the
#                    node status goes out at least every 5 min and watches are renewed
#                    every 5 to 10 min, so a day's bytes are best extrapolated from 600 s
#   COMPARE_CHURN_SECONDS the joined phase's window of churn after the one at rest
#                    (default 0: none; 600 gives ten pods created and deleted)
#   COMPARE_AGENTS   the agents run (default "picolet kubelet"; the side-by-side table
#                    needs both, either alone prints its rows; picolet alone needs no
#                    kubelet built)
#   COMPARE_JOIN_CONFIG  more KubeletConfiguration lines for the joined phase, as YAML
#                    (e.g. "nodeLeaseDurationSeconds: 600" for the settings of a metered link)
#   COMPARE_PICOLET_FLAGS  more picolet flags for the joined phase (e.g.
#                    "--apiserver-watch-bookmarks=false" for a metered link)
#   COMPARE_RELAY_LOG  a file the relay appends a line to for each read it passes on
#                    ("EPOCH up|down BYTES"): where the joined phase's bytes go, by time
#   COMPARE_DIR      scratch directory (default /tmp/pcmp; short: sockets live there)
#   COMPARE_CGROUP_ROOT  the agents' cgroup root (default /picolet-compare; another one lets
#                    two runs share the machine, with another node API port in
#                    COMPARE_JOIN_CONFIG, e.g. "port: 10251")
#   PICOLET_BIN      the picolet to run (default: cargo build --release)
#
# The kubelet runs as scripts/conformance.sh runs it (scripts/lib/upstream-kubelet.sh:
# a mount namespace of its own, its own cgroup root), standalone: no
# kubeconfig, authentication off, authorization AlwaysAllow, on loopback.
# Every process it starts is stopped by its PID when it ends, Ctrl-C included.
# shellcheck disable=SC2317 # cleanup runs from the EXIT trap, start_picolet and start_kubelet as "start_$agent"
set -euo pipefail

REPO=$(cd "$(dirname -- "${BASH_SOURCE[0]}")/.." && pwd)
PROG=compare
# shellcheck source=scripts/lib/common.sh
. "$REPO/scripts/lib/common.sh"
# shellcheck source=scripts/lib/kubelet-config.sh
. "$REPO/scripts/lib/kubelet-config.sh"
# shellcheck source=scripts/lib/upstream-kubelet.sh
. "$REPO/scripts/lib/upstream-kubelet.sh"
WINDOW=${COMPARE_SECONDS:-60}
read -r -a COUNTS <<<"${COMPARE_PODS-0 10 50}"
LATENCY_PODS=${COMPARE_LATENCY_PODS:-20}
JOINED_PODS=${COMPARE_JOINED_PODS:-10}
REST_WINDOW=${COMPARE_REST_SECONDS:-$WINDOW}
CHURN_WINDOW=${COMPARE_CHURN_SECONDS:-0}
read -r -a AGENTS <<<"${COMPARE_AGENTS-picolet kubelet}"
DIR=${COMPARE_DIR:-/tmp/pcmp}
IMAGE=picolet.local/busybox:1
NODE_NAME=compare-node

[[ $(id -u) == 0 ]] || die "run as root (containerd, runc and CNI need it)"
[[ $WINDOW =~ ^[0-9]+$ && $WINDOW -gt 0 ]] || die "COMPARE_SECONDS must be a positive integer"
for n in "${COUNTS[@]}"; do [[ $n =~ ^[0-9]+$ ]] || die "COMPARE_PODS: $n is not a count"; done
[[ $LATENCY_PODS =~ ^[0-9]+$ ]] || die "COMPARE_LATENCY_PODS must be a count"
[[ $JOINED_PODS =~ ^[0-9]+$ ]] || die "COMPARE_JOINED_PODS must be a count"
[[ $REST_WINDOW =~ ^[0-9]+$ && $REST_WINDOW -gt 0 ]] || die "COMPARE_REST_SECONDS must be a positive integer"
[[ $CHURN_WINDOW =~ ^[0-9]+$ ]] || die "COMPARE_CHURN_SECONDS must be a number of seconds"
((${#AGENTS[@]} > 0)) || die "COMPARE_AGENTS names no agent"
for a in "${AGENTS[@]}"; do [[ $a == picolet || $a == kubelet ]] || die "COMPARE_AGENTS: $a is neither picolet nor kubelet"; done
[[ $DIR == /* && $DIR != / ]] || die "COMPARE_DIR must be an absolute path other than /"
for c in python3 ctr containerd unshare mount getconf; do command -v "$c" >/dev/null || die "$c not found"; done
CLK_TCK=$(getconf CLK_TCK)

# The kubelet only when it runs: picolet alone needs no --e2e build.
KUBELET=
if [[ " ${AGENTS[*]} " == *" kubelet "* ]]; then
    KBIN=$("$REPO/scripts/k8s-build.sh" --e2e | tail -n 1) || die "scripts/k8s-build.sh --e2e failed"
    KUBELET=$KBIN/kubelet
fi
if ((JOINED_PODS > 0)); then
    CP_BIN=$("$REPO/scripts/k8s-build.sh" | tail -n 1) || die "scripts/k8s-build.sh failed"
fi
if [[ -z ${PICOLET_BIN:-} ]]; then
    (cd "$REPO" && nice -n 19 cargo build --release --locked -q) || die "cargo build --release failed"
    PICOLET_BIN=$REPO/target/release/picolet
fi
[[ -x $PICOLET_BIN ]] || die "$PICOLET_BIN is not an executable"

AGENT_PID=
CTRD_STARTED=0
CP_STARTED=0
RELAY_PID=
ECHO_PIDS=()
JOIN_CONFIG=
JOIN_ARGS=()
CGROUP_ROOT=${COMPARE_CGROUP_ROOT:-/picolet-compare}

stop_agent() {
    stop_pid "$AGENT_PID"
    AGENT_PID=
}

stop_relay() {
    [[ -n $RELAY_PID ]] || return 0
    kill -TERM "$RELAY_PID" 2>/dev/null || true
    wait "$RELAY_PID" 2>/dev/null || true
    RELAY_PID=
}

stop_echo_watches() {
    local pid
    for pid in "${ECHO_PIDS[@]}"; do stop_pid "$pid"; done
    ECHO_PIDS=()
}

stop_control_plane() {
    [[ $CP_STARTED == 1 ]] || return 0
    bash "$REPO/scripts/control-plane.sh" stop "$DIR/cp" 2>>"$DIR/control-plane-stop.log" || true
    CP_STARTED=0
}

stop_containerd() {
    [[ $CTRD_STARTED == 1 ]] || return 0
    bash "$REPO/scripts/scratch-containerd.sh" stop "$DIR/ctrd" 2>>"$DIR/containerd-stop.log" || true
    CTRD_STARTED=0
}

cleanup() {
    stop_agent
    stop_echo_watches
    stop_relay
    stop_containerd
    stop_control_plane
    node_dir_cleanup "$DIR/node" "$CGROUP_ROOT"
}
cleanup_on_exit cleanup

start_containerd() {
    # Clean: what an earlier containerd here recorded (the last run's sandboxes and
    # containers) would be orphans the agent must stop before its pods of the same names.
    rm -rf --one-file-system -- "$DIR/ctrd"
    CTRD_STARTED=1
    SOCK=$(bash "$REPO/scripts/scratch-containerd.sh" start "$DIR/ctrd" 2>"$DIR/containerd-start.log" | tail -n 1) ||
        { tail -n 20 "$DIR/containerd-start.log" >&2; die "the scratch containerd did not start"; }
    CTRD_PID=$(<"$DIR/ctrd/containerd.pid")
}

write_manifests() { # write_manifests COUNT
    local i
    rm -rf -- "$DIR/node/manifests"
    mkdir -p "$DIR/node/manifests"
    for ((i = 0; i < $1; i++)); do
        cat >"$DIR/node/manifests/static-$i.yaml" <<EOF
apiVersion: v1
kind: Pod
metadata:
  name: static-$i
spec:
  terminationGracePeriodSeconds: 1
  containers:
  - name: sleep
    image: $IMAGE
    imagePullPolicy: Never
    command: ["sleep", "3600"]
EOF
    done
}

start_picolet() {
    kubelet_config staticPodPath="$DIR/node/manifests" containerRuntimeEndpoint="unix://$SOCK" \
        podLogsDir="$DIR/node/pod-logs" healthzPort="$HEALTHZ_PORT" cgroupRoot="$CGROUP_ROOT" \
        "$JOIN_CONFIG" >"$DIR/node/picolet.yaml"
    "$PICOLET_BIN" --config "$DIR/node/picolet.yaml" --root-dir "$DIR/node/root" --hostname-override "$NODE_NAME" \
        "${JOIN_ARGS[@]}" </dev/null >>"$DIR/picolet.log" 2>&1 &
    AGENT_PID=$!
}

start_kubelet() {
    upstream_kubelet_prepare "$DIR/node" "$CGROUP_ROOT"
    kubelet_config staticPodPath="$DIR/node/manifests" failCgroupV1=false cgroupDriver=cgroupfs \
        cgroupRoot="$CGROUP_ROOT" failSwapOn=false containerRuntimeEndpoint="unix://$SOCK" \
        podLogsDir="$DIR/node/pod-logs" volumePluginDir="$DIR/node/volume-plugins" \
        makeIPTablesUtilChains=false address=127.0.0.1 port="$(free_port)" readOnlyPort=0 \
        healthzBindAddress=127.0.0.1 healthzPort="$HEALTHZ_PORT" "$UPSTREAM_KUBELET_STANDALONE_AUTH" \
        "$JOIN_CONFIG" >"$DIR/node/kubelet.yaml"
    upstream_kubelet_launch "$DIR/node" "$DIR/kubelet.log" "$KUBELET" --config "$DIR/node/kubelet.yaml" \
        --root-dir "$DIR/node/root" --cert-dir "$DIR/node/root/pki" --hostname-override "$NODE_NAME" \
        "${JOIN_ARGS[@]}"
    AGENT_PID=$UPSTREAM_KUBELET_PID
}

healthz_ok() {
    python3 -c 'import sys, urllib.request
r = urllib.request.urlopen("http://127.0.0.1:%s/healthz" % sys.argv[1], timeout=1)
sys.exit(0 if r.status == 200 and r.read().strip() == b"ok" else 1)' "$HEALTHZ_PORT" 2>/dev/null
}

running_tasks() {
    ctr -a "$SOCK" -n k8s.io tasks ls 2>/dev/null | awk '$3 == "RUNNING"' | wc -l
}

# sample PID SECONDS: "mean_rss_kib max_rss_kib cpu_percent" over the window.
sample() {
    python3 - "$1" "$2" "$CLK_TCK" <<'EOF'
import sys, time
pid, window, tck = int(sys.argv[1]), int(sys.argv[2]), int(sys.argv[3])
def cpu():
    f = open("/proc/%d/stat" % pid).read().rsplit(")", 1)[1].split()
    return int(f[11]) + int(f[12])
def rss():
    for line in open("/proc/%d/status" % pid):
        if line.startswith("VmRSS:"):
            return int(line.split()[1])
c0, t0, rs = cpu(), time.monotonic(), []
while time.monotonic() - t0 < window:
    rs.append(rss())
    time.sleep(1)
c1, t1 = cpu(), time.monotonic()
print("%.0f %d %.2f" % (sum(rs) / len(rs), max(rs), 100.0 * (c1 - c0) / tck / (t1 - t0)))
EOF
}

declare -A R
say_row() { printf '%s\n' "$*"; }

mkdir -p "$DIR"
DIR=$(cd "$DIR" && pwd -P)
stop_containerd_if_left() {
    [[ -d $DIR/ctrd ]] && bash "$REPO/scripts/scratch-containerd.sh" stop "$DIR/ctrd" >/dev/null 2>&1
    node_dir_cleanup "$DIR/node" "$CGROUP_ROOT"
    rm -rf --one-file-system -- "$DIR/node" "$DIR"/*.log
}
stop_containerd_if_left || true

# wait_file PATH LIMIT_S: polls every 10 ms until PATH exists; fails after LIMIT_S.
wait_file() {
    python3 -c 'import os, sys, time
path, limit = sys.argv[1], float(sys.argv[2])
t0 = time.monotonic()
while not os.path.exists(path):
    if time.monotonic() - t0 > limit:
        sys.exit(1)
    time.sleep(0.01)' "$1" "$2"
}

# percentile P VALUES...: the nearest-rank percentile.
percentile() {
    local p=$1
    shift
    printf '%s\n' "$@" | sort -g | awk -v p="$p" '{ v[NR] = $1 } END { i = int((p * NR + 99) / 100); if (i < 1) i = 1; printf "%.2f", v[i] }'
}

# latency_manifest NAME SCRIPT: a pod whose container runs SCRIPT with /probe (a hostPath).
latency_manifest() {
    cat >"$DIR/node/manifests/.$1.tmp" <<EOF
apiVersion: v1
kind: Pod
metadata:
  name: $1
spec:
  terminationGracePeriodSeconds: 1
  containers:
  - name: main
    image: $IMAGE
    imagePullPolicy: Never
    command: ["sh", "-c", "$2"]
    volumeMounts:
    - {name: probe, mountPath: /probe}
  volumes:
  - {name: probe, hostPath: {path: $DIR/probe}}
EOF
    mv -f -- "$DIR/node/manifests/.$1.tmp" "$DIR/node/manifests/$1.yaml"
}

latencies() { # latencies AGENT: the per-pod start and restart latencies, into R
    local agent=$1 i t0 lat=()
    rm -rf -- "$DIR/probe"
    mkdir -p "$DIR/probe"
    for ((i = 0; i < LATENCY_PODS; i++)); do
        t0=$(now)
        latency_manifest "lat-$i" "touch /probe/lat-$i; exec sleep 3600"
        wait_file "$DIR/probe/lat-$i" 120 || die "$agent: pod lat-$i did not start within 120 s"
        lat+=("$(since "$t0" 2)")
    done
    R[$agent,lat50]=$(percentile 50 "${lat[@]}")
    R[$agent,lat95]=$(percentile 95 "${lat[@]}")
    # Timed from the exit the container announces (2 s after its start) to the next
    # instance's first command.
    # shellcheck disable=SC2016 # the container's shell expands these
    latency_manifest crasher 'n=$(ls /probe | grep -c ^run-); touch /probe/run-$n; sleep 2; touch /probe/exit-$n; exit 1'
    wait_file "$DIR/probe/exit-0" 120 || die "$agent: the crashing pod did not run"
    t0=$(now)
    wait_file "$DIR/probe/run-1" 120 || die "$agent: the crashed container was not restarted within 120 s"
    R[$agent,restart]=$(since "$t0" 2)
    log "$agent: manifest → first command p50 ${R[$agent,lat50]} s, p95 ${R[$agent,lat95]} s; exit → restarted ${R[$agent,restart]} s"
}

# A TCP relay from a free loopback port to the apiserver, counting the bytes it
# carries both ways and the connections it accepted into DIR/relay.bytes
# ("UP DOWN CONNECTIONS", rewritten every 0.5 s).
start_relay() { # start_relay PORT HOST:PORT
    python3 - "$1" "$2" "$DIR/relay.bytes" "${COMPARE_RELAY_LOG:-}" <<'EOF' &
import asyncio, os, sys, time
port, target, out, trace = int(sys.argv[1]), sys.argv[2], sys.argv[3], sys.argv[4]
host, tport = target.rsplit(":", 1)
count = [0, 0, 0]
trace = open(trace, "a", buffering=1) if trace else None
async def pipe(r, w, i):
    try:
        while data := await r.read(65536):
            count[i] += len(data)
            if trace:
                trace.write("%.3f %s %d\n" % (time.time(), "up" if i == 0 else "down", len(data)))
            w.write(data)
            await w.drain()
    except (ConnectionError, asyncio.IncompleteReadError):
        pass
    finally:
        w.close()
async def serve(r, w):
    count[2] += 1
    try:
        ur, uw = await asyncio.open_connection(host, int(tport))
    except OSError:
        w.close()
        return
    await asyncio.gather(pipe(r, uw, 0), pipe(ur, w, 1))
async def report():
    while True:
        with open(out + ".tmp", "w") as f:
            f.write("%d %d %d\n" % tuple(count))
        os.replace(out + ".tmp", out)
        await asyncio.sleep(0.5)
async def main():
    server = await asyncio.start_server(serve, "127.0.0.1", port)
    asyncio.create_task(report())
    async with server:
        await server.serve_forever()
asyncio.run(main())
EOF
    RELAY_PID=$!
}

relay_bytes() { # the relay's "UP DOWN CONNECTIONS"
    cat "$DIR/relay.bytes"
}

# Distinct requests of the node (audit IDs) received in [FROM, TO) (epoch seconds);
# by verb and resource, a minute and in all, they go to BREAKDOWN.
node_requests() { # node_requests FROM TO BREAKDOWN
    python3 - "$DIR/cp/audit.log" "system:node:$NODE_NAME" "$1" "$2" "$3" <<'EOF'
import collections, json, sys
from datetime import datetime
path, user, t1, t2, out = sys.argv[1], sys.argv[2], float(sys.argv[3]), float(sys.argv[4]), sys.argv[5]
ids = {}
for line in open(path):
    e = json.loads(line)
    if e.get("user", {}).get("username") != user:
        continue
    t = datetime.fromisoformat(e["requestReceivedTimestamp"].replace("Z", "+00:00")).timestamp()
    if t1 <= t < t2:
        r = e.get("objectRef", {})
        ids[e["auditID"]] = "%s %s%s" % (e["verb"], r.get("resource", e.get("requestURI", "?")),
                                         "/" + r["subresource"] if r.get("subresource") else "")
with open(out, "w") as f:
    for k, n in collections.Counter(ids.values()).most_common():
        f.write("%7.2f a minute (%d) %s\n" % (n * 60 / (t2 - t1), n, k))
print(len(ids))
EOF
}

api_pod_yaml() { # api_pod_yaml NAME: an API pod bound to the node, sleeping
    cat <<EOF
---
apiVersion: v1
kind: Pod
metadata:
  name: $1
  namespace: default
spec:
  nodeName: $NODE_NAME
  terminationGracePeriodSeconds: 1
  containers:
  - name: sleep
    image: $IMAGE
    imagePullPolicy: Never
    command: ["sleep", "3600"]
EOF
}

joined_pods_yaml() {
    local i
    for ((i = 0; i < JOINED_PODS; i++)); do
        api_pod_yaml "api-$i"
    done
}

# The node's pod watch in both encodings: two watches of the node's pods as the admin
# (pki/admin.* of the control plane in DIR/cp), from the same resourceVersion, with
# bookmarks as the agents ask for them, one asking for JSON and one for protobuf, their
# bodies into DIR/watch.json and DIR/watch.protobuf.
start_echo_watches() { # start_echo_watches APISERVER KUBECTL...
    local apiserver=$1 rv enc accept path
    shift
    rv=$("$@" get --raw "/api/v1/pods?fieldSelector=spec.nodeName%3D$NODE_NAME&limit=1" |
        python3 -c 'import json, sys; print(json.load(sys.stdin)["metadata"]["resourceVersion"])') ||
        die "listing the node's pods for the watches' resourceVersion failed"
    path="/api/v1/pods?fieldSelector=spec.nodeName%3D$NODE_NAME&watch=true&allowWatchBookmarks=true&resourceVersion=$rv&timeoutSeconds=7200"
    for enc in json protobuf; do
        if [[ $enc == json ]]; then accept=application/json; else accept=application/vnd.kubernetes.protobuf; fi
        curl -sS -N --cacert "$DIR/cp/pki/ca.crt" --cert "$DIR/cp/pki/admin.crt" --key "$DIR/cp/pki/admin.key" \
            -H "Accept: $accept" -o "$DIR/watch.$enc" "$apiserver$path" 2>>"$DIR/watch.log" &
        ECHO_PIDS+=($!)
    done
}

echo_bytes() { # the watches' "JSON PROTOBUF" bytes so far
    printf '%s %s\n' "$(stat -c %s "$DIR/watch.json" 2>/dev/null || echo 0)" \
        "$(stat -c %s "$DIR/watch.protobuf" 2>/dev/null || echo 0)"
}

# echo_row KEY T1 T2 JSON1 PROTO1 JSON2 PROTO2: the window's pod watch bytes a day in
# each encoding, into R[$agent,KEY].
echo_row() {
    local j p
    alive "${ECHO_PIDS[0]}" && alive "${ECHO_PIDS[1]}" || die "a pod watch in one encoding ended early (see $DIR/watch.log)"
    j=$(awk -v a="$4" -v b="$6" -v t1="$2" -v t2="$3" 'BEGIN { printf "%.2f", (b - a) * 86400 / (t2 - t1) / 1048576 }')
    p=$(awk -v a="$5" -v b="$7" -v t1="$2" -v t2="$3" 'BEGIN { printf "%.2f", (b - a) * 86400 / (t2 - t1) / 1048576 }')
    R[$agent,$1]="JSON $j MiB, protobuf $p MiB ($(awk -v j="$j" -v p="$p" 'BEGIN { if (j > 0) printf "%.0f %%", p * 100 / j; else print "-" }') of it)"
    log "$agent: the node's pod watch over the window ($((${6} - ${4})) bytes of JSON, $((${7} - ${5})) of protobuf), a day: ${R[$agent,$1]}"
}

# The window of churn (CHURN_WINDOW s): each minute a pod is created and the one
# made the minute before deleted; the bytes and requests over it, into R.
churn() { # churn AGENT KUBECTL...
    local agent=$1 t1 t2 up1 down1 conn1 up2 down2 conn2 ej1 ep1 ej2 ep2 k=0 end next
    shift
    t1=$(now)
    read -r up1 down1 conn1 < <(relay_bytes)
    read -r ej1 ep1 < <(echo_bytes)
    end=$((SECONDS + CHURN_WINDOW))
    while ((SECONDS < end)); do
        next=$((SECONDS + 60))
        api_pod_yaml "churn-$k" | "$@" create -f - >/dev/null || die "creating pod churn-$k failed"
        if ((k > 0)); then
            "$@" delete pod -n default "churn-$((k - 1))" --wait=false >/dev/null || die "deleting pod churn-$((k - 1)) failed"
        fi
        k=$((k + 1))
        alive "$AGENT_PID" || die "$agent exited"
        while ((SECONDS < next && SECONDS < end)); do sleep 1; done
    done
    t2=$(now)
    read -r up2 down2 conn2 < <(relay_bytes)
    read -r ej2 ep2 < <(echo_bytes)
    echo_row cwatch "$t1" "$t2" "$ej1" "$ep1" "$ej2" "$ep2"
    R[$agent,creq]=$(node_requests "$t1" "$t2" "$DIR/$agent-churn-requests.txt" | awk -v w="$(awk -v a="$t1" -v b="$t2" 'BEGIN { print b - a }')" '{ printf "%.1f", $1 * 60 / w }')
    R[$agent,cbytes]=$(awk -v a="$((up1 + down1))" -v b="$((up2 + down2))" -v t1="$t1" -v t2="$t2" 'BEGIN { printf "%.2f", (b - a) * 86400 / (t2 - t1) / 1048576 }')
    R[$agent,cpods]=$k
    log "$agent joined in churn, $(awk -v a="$t1" -v b="$t2" 'BEGIN { printf "%.0f", b - a }') s, $k pods created, $((conn2 - conn1)) new connections: $((up2 - up1)) bytes up, $((down2 - down1)) down, extrapolated a day ${R[$agent,cbytes]} MiB; ${R[$agent,creq]} requests a minute; by kind:"
    sed 's/^/    /' "$DIR/$agent-churn-requests.txt" >&2
    "$@" delete pod -n default "churn-$((k - 1))" --wait=false >/dev/null || true
}

joined() { # joined AGENT: the joined rows, into R
    local agent=$1 t0 deadline relay_port apiserver kubectl t1 t2 up1 down1 conn1 up2 down2 conn2 ej1 ep1 ej2 ep2 lat=() name phase rss_mean cpu more=()
    local -A seen=()
    mkdir -p "$DIR/cp"
    # The node's requests, one audit event per stage: (RequestReceived left out).
    cat >"$DIR/audit-policy.yaml" <<EOF
apiVersion: audit.k8s.io/v1
kind: Policy
omitStages: [RequestReceived]
rules:
- level: Metadata
  users: ["system:node:$NODE_NAME"]
- level: None
EOF
    CP_STARTED=1
    APISERVER_EXTRA_FLAGS="--audit-policy-file=$DIR/audit-policy.yaml --audit-log-path=$DIR/cp/audit.log --audit-log-format=json --audit-log-maxsize=0 --audit-log-mode=blocking" \
        PICOLET_K8S_BIN=$CP_BIN bash "$REPO/scripts/control-plane.sh" start "$DIR/cp" --node "$NODE_NAME" --controllers \
        >/dev/null 2>"$DIR/control-plane.log" || { tail -n 20 "$DIR/control-plane.log" >&2; die "the control plane did not start"; }
    # shellcheck disable=SC1091 # written by control-plane.sh
    # shellcheck disable=SC2153 # set by cluster.env
    apiserver=$(. "$DIR/cp/cluster.env" && printf '%s' "$APISERVER")
    kubectl=("$CP_BIN/kubectl" --kubeconfig "$DIR/cp/admin.kubeconfig" --request-timeout=10s)
    relay_port=$(free_port)
    start_relay "$relay_port" "${apiserver#https://}"
    sed "s#server: $apiserver#server: https://127.0.0.1:$relay_port#" "$DIR/cp/node-$NODE_NAME.kubeconfig" >"$DIR/node-relay.kubeconfig"
    grep -q "127.0.0.1:$relay_port" "$DIR/node-relay.kubeconfig" || die "could not point the node's kubeconfig at the relay"
    start_containerd
    write_manifests 0
    HEALTHZ_PORT=$(free_port)
    JOIN_ARGS=(--kubeconfig "$DIR/node-relay.kubeconfig" --node-ip 127.0.0.1)
    if [[ $agent == picolet ]]; then
        read -r -a more <<<"${COMPARE_PICOLET_FLAGS:-}"
        JOIN_ARGS+=("${more[@]}")
    fi
    JOIN_CONFIG="evictionHard: {memory.available: 100Mi, nodefs.available: 1%, nodefs.inodesFree: 1%, imagefs.available: 1%}
imageGCHighThresholdPercent: 100
imageGCLowThresholdPercent: 99${COMPARE_JOIN_CONFIG:+
$COMPARE_JOIN_CONFIG}"
    "start_$agent"
    JOIN_ARGS=()
    JOIN_CONFIG=
    deadline=$((SECONDS + 120))
    until [[ $("${kubectl[@]}" get node "$NODE_NAME" -o 'jsonpath={.status.conditions[?(@.type=="Ready")].status}' 2>/dev/null) == True ]]; do
        alive "$AGENT_PID" || { tail -n 20 "$DIR/$agent.log" >&2; die "$agent exited"; }
        ((SECONDS < deadline)) || die "$agent: node $NODE_NAME not Ready within 120 s"
        sleep 0.5
    done
    # The default ServiceAccount the pods' token volume needs exists (--controllers waits).
    t0=$(now)
    joined_pods_yaml | "${kubectl[@]}" create -f - >/dev/null || die "creating the API pods failed"
    deadline=$((SECONDS + 300))
    while ((${#seen[@]} < JOINED_PODS)); do
        while read -r name phase; do
            if [[ $phase == Running && -z ${seen[$name]+x} ]]; then
                seen[$name]=1
                lat+=("$(since "$t0" 2)")
            fi
        done < <("${kubectl[@]}" get pods -n default -o 'jsonpath={range .items[*]}{.metadata.name} {.status.phase}{"\n"}{end}' 2>/dev/null)
        alive "$AGENT_PID" || die "$agent exited"
        ((SECONDS < deadline)) || die "$agent: ${#seen[@]} of $JOINED_PODS API pods Running after 300 s"
        sleep 0.2
    done
    R[$agent,j50]=$(percentile 50 "${lat[@]}")
    R[$agent,j95]=$(percentile 95 "${lat[@]}")
    R[$agent,jall]=$(since "$t0" 2)
    start_echo_watches "$apiserver" "${kubectl[@]}"
    sleep 10
    t1=$(now)
    read -r up1 down1 conn1 < <(relay_bytes)
    read -r ej1 ep1 < <(echo_bytes)
    read -r rss_mean _ cpu < <(sample "$AGENT_PID" "$REST_WINDOW")
    t2=$(now)
    read -r up2 down2 conn2 < <(relay_bytes)
    read -r ej2 ep2 < <(echo_bytes)
    echo_row jwatch "$t1" "$t2" "$ej1" "$ep1" "$ej2" "$ep2"
    R[$agent,jrss]=$(awk -v a="$rss_mean" 'BEGIN { printf "%.1f", a / 1024 }')
    R[$agent,jcpu]=$cpu
    R[$agent,jreq]=$(node_requests "$t1" "$t2" "$DIR/$agent-requests.txt" | awk -v w="$(awk -v a="$t1" -v b="$t2" 'BEGIN { print b - a }')" '{ printf "%.1f", $1 * 60 / w }')
    # The window's bytes scaled to a day (an extrapolation from the window at rest).
    perday() { awk -v a="$1" -v b="$2" -v t1="$t1" -v t2="$t2" 'BEGIN { printf "%.2f", (b - a) * 86400 / (t2 - t1) / 1048576 }'; }
    R[$agent,jbytes]=$(perday "$((up1 + down1))" "$((up2 + down2))")
    R[$agent,jup]=$(perday "$up1" "$up2")
    R[$agent,jdown]=$(perday "$down1" "$down2")
    R[$agent,jconn]=$((conn2 - conn1))
    log "$agent joined: $JOINED_PODS API pods Running p50 ${R[$agent,j50]} s, p95 ${R[$agent,j95]} s; ${R[$agent,jreq]} requests/min, ${R[$agent,jbytes]} MiB/day, RSS ${R[$agent,jrss]} MiB, CPU $cpu %"
    log "$agent joined at rest, $(awk -v a="$t1" -v b="$t2" 'BEGIN { printf "%.0f", b - a }') s: $((up2 - up1)) bytes up, $((down2 - down1)) down (TLS included), extrapolated a day: ${R[$agent,jup]} MiB up + ${R[$agent,jdown]} MiB down = ${R[$agent,jbytes]} MiB; ${R[$agent,jconn]} new TCP connections; requests by kind:"
    sed 's/^/    /' "$DIR/$agent-requests.txt" >&2
    ((CHURN_WINDOW == 0)) || churn "$agent" "${kubectl[@]}"
    stop_echo_watches
    stop_agent
    stop_relay
    stop_containerd
    stop_control_plane
    node_dir_cleanup "$DIR/node" "$CGROUP_ROOT"
    rm -rf --one-file-system -- "$DIR/node" "$DIR/cp"
}

log "machine: $(nproc) CPUs, kernel $(uname -r), load average $(cut -d' ' -f1-3 /proc/loadavg)"
for agent in "${AGENTS[@]}"; do
    PHASES=("${COUNTS[@]}")
    ((LATENCY_PODS == 0)) || PHASES+=(latency)
    for n in "${PHASES[@]}"; do
        start_containerd
        if [[ $n == latency ]]; then
            write_manifests 0
            HEALTHZ_PORT=$(free_port)
            "start_$agent"
            deadline=$((SECONDS + 120))
            until healthz_ok; do
                alive "$AGENT_PID" || { tail -n 20 "$DIR/$agent.log" >&2; die "$agent exited"; }
                ((SECONDS < deadline)) || die "$agent's /healthz did not answer ok within 120 s"
                sleep 0.02
            done
            latencies "$agent"
            stop_agent
            stop_containerd
            continue
        fi
        write_manifests "$n"

        HEALTHZ_PORT=$(free_port)
        t0=$(now)
        "start_$agent"
        deadline=$((SECONDS + 120))
        until healthz_ok; do
            alive "$AGENT_PID" || { tail -n 20 "$DIR/$agent.log" >&2; die "$agent exited"; }
            ((SECONDS < deadline)) || die "$agent's /healthz did not answer ok within 120 s"
            sleep 0.02
        done
        R[$agent,$n,healthz]=$(since "$t0" 2)
        if ((n > 0)); then
            deadline=$((SECONDS + 300))
            until (($(running_tasks) >= 2 * n)); do
                alive "$AGENT_PID" || die "$agent exited"
                ((SECONDS < deadline)) || die "$agent did not run $n pods within 300 s"
                sleep 0.1
            done
            R[$agent,$n,running]=$(since "$t0" 2)
        fi
        sleep 5
        read -r rss_mean rss_max cpu < <(sample "$AGENT_PID" "$WINDOW")
        R[$agent,$n,rss]=$(awk -v a="$rss_mean" 'BEGIN { printf "%.1f", a / 1024 }')
        R[$agent,$n,rssmax]=$(awk -v a="$rss_max" 'BEGIN { printf "%.1f", a / 1024 }')
        R[$agent,$n,cpu]=$cpu
        R[$agent,$n,ctrd]=$(awk '/^VmRSS:/ { printf "%.1f", $2 / 1024 }' "/proc/$CTRD_PID/status")
        log "$agent, $n pods: healthz ${R[$agent,$n,healthz]} s, running ${R[$agent,$n,running]:--} s, RSS ${R[$agent,$n,rss]} MiB, CPU $cpu %"
        stop_agent
        stop_containerd
    done
    node_dir_cleanup "$DIR/node" "$CGROUP_ROOT"
    rm -rf --one-file-system -- "$DIR/node"
done

if ((JOINED_PODS > 0)); then
    for agent in "${AGENTS[@]}"; do
        joined "$agent"
    done
fi
if ((${#AGENTS[@]} < 2)); then
    agent=${AGENTS[0]}
    say_row ""
    say_row "$agent alone, $(date -u +%Y-%m-%d), $(nproc) CPUs, ${WINDOW} s windows (joined at rest: ${REST_WINDOW} s)"
    say_row ""
    for n in "${COUNTS[@]}"; do
        say_row "$n pods: start → /healthz ok ${R[$agent,$n,healthz]} s, running ${R[$agent,$n,running]:--} s, RSS ${R[$agent,$n,rss]} MiB, CPU ${R[$agent,$n,cpu]} %"
    done
    if ((JOINED_PODS > 0)); then
        say_row "joined, $JOINED_PODS API pods: created → Running p50 ${R[$agent,j50]} s, p95 ${R[$agent,j95]} s"
        say_row "joined, $JOINED_PODS API pods, at rest: ${R[$agent,jreq]} requests a minute, ${R[$agent,jconn]} new connections, bytes a day (extrapolated) ${R[$agent,jup]} MiB up + ${R[$agent,jdown]} MiB down = ${R[$agent,jbytes]} MiB"
        say_row "requests by kind:"
        sed 's/^/    /' "$DIR/$agent-requests.txt"
        say_row "the node's pod watch at rest, bytes a day (the same events in each encoding): ${R[$agent,jwatch]}"
        if ((CHURN_WINDOW > 0)); then
            say_row "joined, in churn (${R[$agent,cpods]} pods created and deleted, one a minute): ${R[$agent,creq]} requests a minute, bytes a day (extrapolated) ${R[$agent,cbytes]} MiB"
            sed 's/^/    /' "$DIR/$agent-churn-requests.txt"
            say_row "the node's pod watch in churn, bytes a day (the same events in each encoding): ${R[$agent,cwatch]}"
        fi
    fi
    exit 0
fi

ratio() { awk -v p="$1" -v k="$2" 'BEGIN { if (p > 0) printf "%.1fx", k / p; else print "-" }'; }
P_SIZE=$(stat -c %s "$PICOLET_BIN")
K_SIZE=$(stat -c %s "$KUBELET")
say_row ""
say_row "picolet and the upstream kubelet $("$KUBELET" --version | awk '{ print $2 }'), same scratch containerd ($(containerd --version | awk '{ print $3 }')), $(date -u +%Y-%m-%d), $(nproc) CPUs, ${WINDOW} s windows (joined: ${REST_WINDOW} s at rest$( ((CHURN_WINDOW == 0)) || printf ', %s s in churn' "$CHURN_WINDOW"))"
say_row ""
say_row "| | picolet | kubelet | kubelet / picolet |"
say_row "|---|---|---|---|"
say_row "| binary size | $(awk -v b="$P_SIZE" 'BEGIN { printf "%.1f MiB", b / 1048576 }') | $(awk -v b="$K_SIZE" 'BEGIN { printf "%.1f MiB", b / 1048576 }') | $(ratio "$P_SIZE" "$K_SIZE") |"
for n in "${COUNTS[@]}"; do
    say_row "| $n pods: start → /healthz ok | ${R[picolet,$n,healthz]} s | ${R[kubelet,$n,healthz]} s | $(ratio "${R[picolet,$n,healthz]}" "${R[kubelet,$n,healthz]}") |"
    if ((n > 0)); then
        say_row "| $n pods: start → all running | ${R[picolet,$n,running]} s | ${R[kubelet,$n,running]} s | $(ratio "${R[picolet,$n,running]}" "${R[kubelet,$n,running]}") |"
    fi
    say_row "| $n pods: RSS mean (max) | ${R[picolet,$n,rss]} (${R[picolet,$n,rssmax]}) MiB | ${R[kubelet,$n,rss]} (${R[kubelet,$n,rssmax]}) MiB | $(ratio "${R[picolet,$n,rss]}" "${R[kubelet,$n,rss]}") |"
    say_row "| $n pods: CPU, % of one core | ${R[picolet,$n,cpu]} | ${R[kubelet,$n,cpu]} | $(ratio "${R[picolet,$n,cpu]}" "${R[kubelet,$n,cpu]}") |"
    say_row "| $n pods: containerd RSS beside it | ${R[picolet,$n,ctrd]} MiB | ${R[kubelet,$n,ctrd]} MiB | |"
done
if ((LATENCY_PODS > 0)); then
say_row "| manifest written → its container's first command, p50 of $LATENCY_PODS | ${R[picolet,lat50]} s | ${R[kubelet,lat50]} s | $(ratio "${R[picolet,lat50]}" "${R[kubelet,lat50]}") |"
say_row "| manifest written → its container's first command, p95 of $LATENCY_PODS | ${R[picolet,lat95]} s | ${R[kubelet,lat95]} s | $(ratio "${R[picolet,lat95]}" "${R[kubelet,lat95]}") |"
say_row "| container exited → first restart running | ${R[picolet,restart]} s | ${R[kubelet,restart]} s | $(ratio "${R[picolet,restart]}" "${R[kubelet,restart]}") |"
fi
if ((JOINED_PODS > 0)); then
    say_row "| joined, $JOINED_PODS API pods: created → Running, p50 | ${R[picolet,j50]} s | ${R[kubelet,j50]} s | $(ratio "${R[picolet,j50]}" "${R[kubelet,j50]}") |"
    say_row "| joined, $JOINED_PODS API pods: created → Running, p95 | ${R[picolet,j95]} s | ${R[kubelet,j95]} s | $(ratio "${R[picolet,j95]}" "${R[kubelet,j95]}") |"
    say_row "| joined, $JOINED_PODS API pods: requests to the apiserver a minute | ${R[picolet,jreq]} | ${R[kubelet,jreq]} | $(ratio "${R[picolet,jreq]}" "${R[kubelet,jreq]}") |"
    say_row "| joined, $JOINED_PODS API pods: bytes to and from the apiserver a day | ${R[picolet,jbytes]} MiB | ${R[kubelet,jbytes]} MiB | $(ratio "${R[picolet,jbytes]}" "${R[kubelet,jbytes]}") |"
    say_row "| joined, $JOINED_PODS API pods: the node's pod watch a day | ${R[picolet,jwatch]} | ${R[kubelet,jwatch]} | |"
    if ((CHURN_WINDOW > 0)); then
        say_row "| joined, a pod created and one deleted a minute: requests a minute | ${R[picolet,creq]} | ${R[kubelet,creq]} | $(ratio "${R[picolet,creq]}" "${R[kubelet,creq]}") |"
        say_row "| joined, a pod created and one deleted a minute: bytes a day | ${R[picolet,cbytes]} MiB | ${R[kubelet,cbytes]} MiB | $(ratio "${R[picolet,cbytes]}" "${R[kubelet,cbytes]}") |"
        say_row "| joined, a pod created and one deleted a minute: the node's pod watch a day | ${R[picolet,cwatch]} | ${R[kubelet,cwatch]} | |"
    fi
    say_row "| joined, $JOINED_PODS API pods: RSS mean | ${R[picolet,jrss]} MiB | ${R[kubelet,jrss]} MiB | $(ratio "${R[picolet,jrss]}" "${R[kubelet,jrss]}") |"
    say_row "| joined, $JOINED_PODS API pods: CPU, % of one core | ${R[picolet,jcpu]} | ${R[kubelet,jcpu]} | $(ratio "${R[picolet,jcpu]}" "${R[kubelet,jcpu]}") |"
fi
