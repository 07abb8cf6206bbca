#!/usr/bin/env bash
# The node API's cost: the release picolet joined to the test control plane (scripts/
# control-plane.sh) on a scratch containerd, one pod. Prints picolet's RSS idle, with 10 open
# `kubectl exec -i -- cat` streams and with N_IDLE (default 200) idle streams at once (held
# open by kubectl attach -i), the latency of `kubectl exec POD -- true` end to end (p50 and
# p95 over 20 runs), and the events a crash-looping pod costs in requests over BENCH_SECONDS
# (default 300). Asserts nothing. Run as root; everything it starts lives under
# /tmp/pbench-node-api and is stopped by PID when it ends.
set -euo pipefail
cd "$(dirname -- "${BASH_SOURCE[0]}")/.."
DIR=/tmp/pbench-node-api
N_IDLE=${N_IDLE:-200}
SECONDS_CRASH=${BENCH_SECONDS:-300}
NODE=bench-node

. scripts/lib/common.sh
# Each open stream is a process group of its own (kubectl and the sleep feeding its stdin),
# stopped as a group.
pids=()
stop_streams() {
    for p in "${pids[@]}"; do kill -- "-$p" 2>/dev/null || true; done
    pids=()
}
cleanup() {
    stop_streams
    [[ -n ${PICOLET_PID:-} ]] && kill "$PICOLET_PID" 2>/dev/null
    wait 2>/dev/null || true
    scripts/scratch-containerd.sh stop "$DIR/containerd" >/dev/null 2>&1 || true
    scripts/control-plane.sh stop "$DIR/cp" >/dev/null 2>&1 || true
}
trap cleanup EXIT

rm -rf "$DIR"
mkdir -p "$DIR/manifests"
log "building the release picolet"
cargo build --locked --quiet --release
scripts/control-plane.sh start "$DIR/cp" --node "$NODE" --controllers >/dev/null
source "$DIR/cp/cluster.env"
sock=$(scripts/scratch-containerd.sh start "$DIR/containerd" | tail -n 1)
k() { "$KUBECTL" --kubeconfig "$DIR/cp/admin.kubeconfig" "$@"; }
port=$(python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])')
target/release/picolet --kubeconfig "$DIR/cp/node-$NODE.kubeconfig" --hostname-override "$NODE" \
    --root-dir "$DIR/root" --container-runtime-endpoint "unix://$sock" \
    --cgroups-per-qos=false --enforce-node-allocatable=none --healthz-port 0 \
    --node-ip 127.0.0.1 --address 127.0.0.1 --port "$port" \
    --tls-cert-file "$DIR/cp/pki/node-$NODE-serving.crt" \
    --tls-private-key-file "$DIR/cp/pki/node-$NODE-serving.key" \
    --client-ca-file "$DIR/cp/pki/ca.crt" >"$DIR/picolet.log" 2>&1 &
PICOLET_PID=$!
rss() { awk '/^VmRSS/ { printf "%.2f", $2 / 1024 }' "/proc/$PICOLET_PID/status"; }
k wait --for=condition=Ready "node/$NODE" --timeout=120s >/dev/null
k apply -f - >/dev/null <<YAML
apiVersion: v1
kind: Pod
metadata: {name: shell, namespace: default}
spec:
  nodeName: $NODE
  tolerations: [{operator: Exists}]
  containers:
  - {name: main, image: picolet.local/busybox:1, imagePullPolicy: IfNotPresent, command: [sleep, "86400"], stdin: true}
YAML
k wait --for=condition=Ready pod/shell --timeout=120s >/dev/null
sleep 10
echo "picolet RSS idle, one pod:               $(rss) MiB"

times=()
for _ in $(seq 20); do
    t0=$(date +%s%N)
    k exec shell -- true
    times+=($(( ($(date +%s%N) - t0) / 1000000 )))
done
sorted=$(printf '%s\n' "${times[@]}" | sort -n)
echo "kubectl exec POD -- true, p50:           $(sed -n 10p <<<"$sorted") ms"
echo "kubectl exec POD -- true, p95:           $(sed -n 19p <<<"$sorted") ms"

open_streams() { # open_streams N VERB...
    local n=$1
    shift
    for _ in $(seq "$n"); do
        setsid bash -c 'sleep 3600 | "$@"' _ "$KUBECTL" --kubeconfig "$DIR/cp/admin.kubeconfig" \
            "$@" >/dev/null 2>&1 &
        pids+=($!)
    done
}
open_streams 10 exec -i shell -- cat
sleep 15
echo "picolet RSS with 10 exec streams open:   $(rss) MiB"
open_streams "$N_IDLE" attach -i shell
sleep 30
conns=$(ss -tnH state established "( sport = :$port )" | wc -l)
echo "picolet RSS with $N_IDLE more idle streams: $(rss) MiB ($conns connections to the node API)"
stop_streams
sleep 10
echo "picolet RSS after they closed:           $(rss) MiB"

before=$(k get --raw /metrics | awk '/^apiserver_request_total\{/ && /resource="events"/ { s += $NF } END { print s + 0 }')
k apply -f - >/dev/null <<YAML
apiVersion: v1
kind: Pod
metadata: {name: crasher, namespace: default}
spec:
  nodeName: $NODE
  tolerations: [{operator: Exists}]
  containers:
  - {name: main, image: picolet.local/busybox:1, imagePullPolicy: IfNotPresent, command: [sh, -c, "exit 1"]}
YAML
sleep "$SECONDS_CRASH"
after=$(k get --raw /metrics | awk '/^apiserver_request_total\{/ && /resource="events"/ { s += $NF } END { print s + 0 }')
events=$((after - before))
echo "a crash-looping pod's events:            $events requests in ${SECONDS_CRASH} s ($(( events * 3600 / SECONDS_CRASH )) an hour)"
k get events --field-selector involvedObject.name=crasher \
    -o 'jsonpath={range .items[*]}{.reason} count={.count}{"\n"}{end}' | sed 's/^/    /'
