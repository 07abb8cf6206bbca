#!/usr/bin/env bash
# A Kubernetes cluster on one machine, for the conformance specs that need more
# than one node: the control plane of scripts/control-plane.sh, and two (or
# three) picolet nodes, each in a network namespace of its own with its own
# scratch containerd 2.x, pod CIDR and kube-proxy, and CoreDNS as a Deployment
# on the nodes. With CLUSTER_AGENT=kubelet the nodes run the upstream kubelet
# of the pinned release instead, on the same harness: the reference the same
# e2e run on picolet nodes is compared with (scripts/conformance-diff.py). Run
# as root.
#
#   scripts/cluster.sh up [DIR]       start it all; prints DIR as the last line
#   scripts/cluster.sh check [DIR]    cross-node pod to pod, a Service through
#                                     kube-proxy from the other node, a Service
#                                     name through CoreDNS; prints each result
#   scripts/cluster.sh e2e [DIR] [GINKGO_ARG...]
#                                     e2e.test of the pinned release against
#                                     the cluster (FOCUS and SKIP: ginkgo
#                                     regular expressions; default FOCUS the
#                                     cross-node networking and DNS
#                                     [Conformance] specs); reports in DIR/report
#   scripts/cluster.sh down [DIR]     stop and remove everything up made
#
# DIR defaults to /tmp/pcluster (short: unix sockets live under it).
#
# The network, all of it made here and removed by down (nothing of the
# machine's own interfaces, routes or rules is changed; no packet leaves the
# machine: no namespace has a default route and the machine forwards nothing):
#   bridge pcl0, 10.250.0.1/24, on the machine: the node network. Its
#     route_localnet is on, and one nat PREROUTING rule (comment "picolet
#     cluster DIR") sends 10.250.0.1:PORT to the apiserver on 127.0.0.1:PORT;
#     the apiserver advertises 10.250.0.1 (the kubernetes Service's endpoint)
#     and its certificate names that address
#   network namespace pcl-nodeI (I = 1, 2[, 3]): veth pcl-nI (on the bridge) to
#     eth0 10.250.0.1I/24 in the namespace (the node's IP); pod CIDR
#     10.251.I.0/24 on the namespace's own bridge picolet0 (the CNI bridge
#     plugin of its scratch containerd); routes to the other nodes' pod CIDRs
#     through their node IPs, and 10.96.0.0/16 (Services) on eth0
#   on the machine, routes to each pod CIDR through its node IP (the apiserver
#     reaches pods: its proxy subresources, and admission webhooks and
#     aggregated APIs at their endpoints' pod IPs: --enable-aggregator-routing,
#     since no kube-proxy runs beside the apiserver to give it Service IPs)
# In each namespace run the node's containerd, picolet (node name pcl-nodeI,
# node API on its node IP, port 10250, cgroup root /picolet-cluster-nI) and
# kube-proxy (iptables mode, the namespace's own tables); their mount namespace
# is the machine's (volumes picolet mounts are seen by runc). The Node's
# spec.podCIDR is set once it registers (no controller allocates CIDRs here).
#
# With CLUSTER_AGENT=kubelet, the upstream kubelet (scripts/k8s-build.sh
# --e2e's, the release tests/k8s-e2e pins) takes picolet's place in each
# namespace with what picolet is given: the node's containerd, name, node IP,
# node API address, port and certificates, credentials, clusterDNS and
# clusterDomain, cgroup root, pod logs directory and the shared-disk eviction
# thresholds; its node API authenticates clients by the cluster CA and asks
# the apiserver to authorize them, as picolet's does. It runs as
# scripts/conformance.sh runs it (scripts/lib/upstream-kubelet.sh): in a mount
# namespace of its own where /var/lib, /var/log and the kernel tunables it sets
# are files under DIR/nI/kubelet, its root directory DIR/nI/kubelet/root a
# shared mount (containerd sees the volumes it mounts there).
#
# CoreDNS (Deployment coredns, Service kube-dns 10.96.0.10 in kube-system) runs
# from an image built here around `scripts/k8s-build.sh --cluster`'s binary;
# each node has clusterDNS 10.96.0.10 and clusterDomain cluster.local.
#
# e2e also serves the test images it builds under registry.k8s.io names from a
# registry mirror: the Distribution registry (scripts/k8s-build.sh --tools) on
# 10.250.0.1, to which each node's containerd sends registry.k8s.io (DIR/hosts,
# its registry host configuration, read at every pull). Specs that pull with
# imagePullPolicy Always pull the stand-ins from it; nothing leaves the machine
# (an image the mirror lacks falls through to registry.k8s.io, which is not
# reachable, as a name that does not exist would).
#
# Environment:
#   NODES           2 (default) or 3
#   CLUSTER_AGENT   picolet (default) or kubelet: what runs on the nodes (up;
#                   check, e2e and down take it from DIR/cluster.env)
#   PICOLET_BIN     the picolet binary (default target/debug/picolet, built
#                   with cargo build when missing)
#   START_TIMEOUT_S each wait's limit (default 180)
#   FOCUS, SKIP, PROCS, GINKGO_TIMEOUT (e2e)
#
# Every process up starts is recorded by PID in DIR/run and stopped by that PID
# (its command line checked to name DIR); builds run under `nice -n 19`.
# shellcheck disable=SC2317 # functions called indirectly
set -euo pipefail

REPO=$(cd "$(dirname -- "${BASH_SOURCE[0]}")/.." && pwd)
PROG=cluster
# shellcheck source=scripts/lib/common.sh
. "$REPO/scripts/lib/common.sh"
# shellcheck source=scripts/lib/kubelet-config.sh
. "$REPO/scripts/lib/kubelet-config.sh"
# shellcheck source=scripts/lib/upstream-kubelet.sh
. "$REPO/scripts/lib/upstream-kubelet.sh"

readonly BRIDGE=pcl0
readonly HOST_IP=10.250.0.1
readonly CLUSTER_CIDR=10.251.0.0/16
readonly SERVICE_CIDR=10.96.0.0/16
readonly DNS_IP=10.96.0.10
readonly KUBELET_PORT=10250
START_TIMEOUT_S=${START_TIMEOUT_S:-180}
NODE_COUNT=${NODES:-2}
[[ $NODE_COUNT == 2 || $NODE_COUNT == 3 ]] || die "NODES must be 2 or 3 (got '$NODE_COUNT')"
CACHE_ROOT=${PICOLET_K8S_CACHE:-/var/cache/picolet-k8s}
AGENT=${CLUSTER_AGENT:-picolet}
[[ $AGENT == picolet || $AGENT == kubelet ]] || die "CLUSTER_AGENT must be picolet or kubelet (got '$AGENT')"

usage() {
    sed -n '2,/^set -euo/p' "${BASH_SOURCE[0]}" | sed '$d; s/^# \{0,1\}//' >&2
    exit 2
}

node_name() { printf 'pcl-node%s' "$1"; }
node_ip() { printf '10.250.0.1%s' "$1"; }
pod_cidr() { printf '10.251.%s.0/24' "$1"; }
cgroup_root() { printf '/picolet-cluster-n%s' "$1"; }
in_ns() { # in_ns I COMMAND...: COMMAND in node I's network namespace (the machine's mounts)
    local i=$1
    shift
    nsenter --net="/run/netns/$(node_name "$i")" -- "$@"
}

# ---------------------------------------------------------------- processes

# launch I NAME COMMAND...: COMMAND in node I's namespace, in a session of its
# own, output to DIR/logs/NAME.log, PID to DIR/run/NAME.pid.
launch() {
    local i=$1 name=$2
    shift 2
    setsid nsenter --net="/run/netns/$(node_name "$i")" -- "$@" </dev/null >>"$DIR/logs/$name.log" 2>&1 &
    printf '%s\n' "$!" >"$DIR/run/$name.pid"
}

stop_named() {
    local pid
    pid=$(pid_of "$DIR" "$1")
    if [[ -n $pid ]]; then
        stop_pid "$pid" "$1"
        wait_gone "$pid" 50 || log "warning: $1 (pid $pid) still runs"
        log "stopped $1 (pid $pid)"
    fi
    rm -f -- "$DIR/run/$1.pid"
}

# wait_until WHAT COMMAND...: runs COMMAND until it succeeds, for at most
# START_TIMEOUT_S; dies naming WHAT.
wait_until() {
    local what=$1 t0 deadline
    shift
    t0=$(now)
    deadline=$((SECONDS + START_TIMEOUT_S))
    until "$@" >/dev/null 2>&1; do
        ((SECONDS < deadline)) || die "no $what within $START_TIMEOUT_S s"
        sleep 0.5
    done
    log "$what after $(since "$t0") s"
}

# ---------------------------------------------------------------- network

dnat_rule() { # the nat PREROUTING rule to the apiserver on loopback, as iptables -S prints it
    printf '%s\n' -d "$HOST_IP/32" -p tcp -m tcp --dport "$APISERVER_PORT" \
        -m comment --comment "picolet cluster $DIR" -j DNAT --to-destination "127.0.0.1:$APISERVER_PORT"
}

net_up() {
    local i j
    ! ip link show "$BRIDGE" >/dev/null 2>&1 ||
        die "bridge $BRIDGE exists: another cluster is up (run: $0 down DIR with its DIR)"
    ip link add "$BRIDGE" type bridge
    printf '%s\n' "$BRIDGE" >"$DIR/net/bridge"
    ip addr add "$HOST_IP/24" dev "$BRIDGE"
    ip link set "$BRIDGE" up
    # (route_localnet: the rule above may send what comes in here to 127.0.0.1)
    sysctl -qw "net.ipv4.conf.$BRIDGE.route_localnet=1"
    for ((i = 1; i <= NODE_COUNT; i++)); do
        local ns
        ns=$(node_name "$i")
        ! ip netns list | grep -qw -- "$ns" || die "network namespace $ns exists: another cluster is up"
        ip netns add "$ns"
        printf '%s\n' "$ns" >>"$DIR/net/netns"
        ip link add "pcl-n$i" type veth peer name eth0 netns "$ns"
        ip link set "pcl-n$i" master "$BRIDGE" up
        in_ns "$i" ip link set lo up
        in_ns "$i" ip addr add "$(node_ip "$i")/24" dev eth0
        in_ns "$i" ip link set eth0 up
        in_ns "$i" ip route add "$SERVICE_CIDR" dev eth0
        for ((j = 1; j <= NODE_COUNT; j++)); do
            [[ $j == "$i" ]] || in_ns "$i" ip route add "$(pod_cidr "$j")" via "$(node_ip "$j")"
        done
        in_ns "$i" sysctl -qw net.ipv4.ip_forward=1
        # (pods on one node's bridge reach each other's Services: the bridge's
        # frames go through the namespace's iptables)
        in_ns "$i" sysctl -qw net.bridge.bridge-nf-call-iptables=1
        ip route add "$(pod_cidr "$i")" via "$(node_ip "$i")" dev "$BRIDGE"
    done
    log "network up: bridge $BRIDGE $HOST_IP/24, namespaces $(paste -sd ' ' "$DIR/net/netns")"
}

net_down() {
    local ns rule=()
    if [[ -f $DIR/net/apiserver-port ]]; then
        APISERVER_PORT=$(<"$DIR/net/apiserver-port")
        mapfile -t rule < <(dnat_rule)
        while iptables -w -t nat -C PREROUTING "${rule[@]}" 2>/dev/null; do
            iptables -w -t nat -D PREROUTING "${rule[@]}" || break
        done
        rm -f -- "$DIR/net/apiserver-port"
    fi
    if [[ -f $DIR/net/netns ]]; then
        while read -r ns; do
            [[ -n $ns ]] || continue
            # (the veths and the namespace's routes and rules go with it)
            ip netns del "$ns" 2>/dev/null || true
        done <"$DIR/net/netns"
        rm -f -- "$DIR/net/netns"
    fi
    if [[ -f $DIR/net/bridge ]]; then
        # (the routes through it and its sysctls go with it)
        ip link del "$(<"$DIR/net/bridge")" 2>/dev/null || true
        rm -f -- "$DIR/net/bridge"
    fi
}

# ---------------------------------------------------------------- certificates

# sign NAME SUBJECT EXTENSIONS: DIR/pki/NAME.crt for a new EC key, signed by the
# control plane's CA.
sign() {
    local name=$1 subj=$2 ext=$3 p=$DIR/pki
    openssl ecparam -name prime256v1 -genkey -noout -out "$p/$name.key" 2>/dev/null || die "openssl ecparam for $name failed"
    openssl req -new -key "$p/$name.key" -subj "$subj" -out "$p/$name.csr" 2>/dev/null || die "openssl req for $name failed"
    printf 'basicConstraints = critical, CA:FALSE\n%s\n' "$ext" >"$p/$name.ext"
    openssl x509 -req -in "$p/$name.csr" -CA "$CP/pki/ca.crt" -CAkey "$CP/pki/ca.key" \
        -set_serial "0x$(openssl rand -hex 16)" -days 30 -sha256 -extfile "$p/$name.ext" -out "$p/$name.crt" 2>/dev/null ||
        die "openssl x509 signing $name failed"
    rm -f -- "$p/$name.csr" "$p/$name.ext"
    chmod 600 "$p/$name.key"
}

# kubeconfig FILE USER CERT KEY: for the node network's address of the apiserver.
kubeconfig() {
    local file=$1 user=$2 tmp=$1.tmp
    rm -f -- "$tmp"
    {
        "$KUBECTL" config --kubeconfig="$tmp" set-cluster picolet-test --server="https://$HOST_IP:$APISERVER_PORT" \
            --certificate-authority="$CP/pki/ca.crt" --embed-certs=true &&
            "$KUBECTL" config --kubeconfig="$tmp" set-credentials "$user" \
                --client-certificate="$3" --client-key="$4" --embed-certs=true &&
            "$KUBECTL" config --kubeconfig="$tmp" set-context default --cluster=picolet-test --user="$user" &&
            "$KUBECTL" config --kubeconfig="$tmp" use-context default
    } >/dev/null || die "kubectl config could not write $file"
    mv -f -- "$tmp" "$file"
}

make_credentials() {
    local i n
    mkdir -p "$DIR/pki"
    for ((i = 1; i <= NODE_COUNT; i++)); do
        n=$(node_name "$i")
        sign "node-$n" "/O=system:nodes/CN=system:node:$n" "keyUsage = critical, digitalSignature, keyEncipherment
extendedKeyUsage = clientAuth"
        # The node API's certificate names the node IP the apiserver dials.
        sign "node-$n-serving" "/O=system:nodes/CN=system:node:$n" "keyUsage = critical, digitalSignature, keyEncipherment
extendedKeyUsage = serverAuth
subjectAltName = DNS:$n, IP:$(node_ip "$i"), IP:127.0.0.1"
        kubeconfig "$DIR/node-$n.kubeconfig" "system:node:$n" "$DIR/pki/node-$n.crt" "$DIR/pki/node-$n.key"
    done
    # kube-proxy's identity: the user RBAC's bootstrap binding system:node-proxier names.
    sign kube-proxy "/CN=system:kube-proxy" "keyUsage = critical, digitalSignature, keyEncipherment
extendedKeyUsage = clientAuth"
    kubeconfig "$DIR/kube-proxy.kubeconfig" system:kube-proxy "$DIR/pki/kube-proxy.crt" "$DIR/pki/kube-proxy.key"
}

# ---------------------------------------------------------------- nodes

start_containerd() {
    local i=$1 d=$DIR/n$1 sock
    mkdir -p "$d" "$DIR/hosts"
    sock=$(SCRATCH_CONTAINERD_SUBNET=$(pod_cidr "$i") PICOLET_SCRATCH_RUN=$d/scratch-run \
        SCRATCH_CONTAINERD_REGISTRY_HOSTS=$DIR/hosts SCRATCH_CONTAINERD_BIN=$CONTAINERD_BIN in_ns "$i" bash "$REPO/scripts/scratch-containerd.sh" start "$d/ctrd" \
        2>>"$DIR/logs/containerd-$i-start.log" | tail -n 1) ||
        die_with_log "$DIR/logs/containerd-$i-start.log" 20 "the containerd of $(node_name "$i") did not start"
    printf '%s\n' "$sock" >"$d/containerd.sock.path"
    local tar
    for tar in "$DIR"/images/*.tar; do
        "$CONTAINERD_BIN/ctr" -a "$sock" -n k8s.io images import "$tar" >/dev/null 2>>"$DIR/logs/containerd-$i-start.log" ||
            die_with_log "$DIR/logs/containerd-$i-start.log" 3 "importing $tar into $(node_name "$i")'s containerd failed"
    done
}

stop_containerd() {
    local i=$1 d=$DIR/n$1
    [[ -d $d/ctrd ]] || return 0
    if [[ -e /run/netns/$(node_name "$i") ]]; then
        SCRATCH_CONTAINERD_SUBNET=$(pod_cidr "$i") PICOLET_SCRATCH_RUN=$d/scratch-run SCRATCH_CONTAINERD_BIN=$CONTAINERD_BIN \
            in_ns "$i" bash "$REPO/scripts/scratch-containerd.sh" stop "$d/ctrd" 2>>"$DIR/logs/stop.log" ||
            log "warning: stopping $(node_name "$i")'s containerd failed (see $DIR/logs/stop.log)"
    else
        SCRATCH_CONTAINERD_SUBNET=$(pod_cidr "$i") PICOLET_SCRATCH_RUN=$d/scratch-run SCRATCH_CONTAINERD_BIN=$CONTAINERD_BIN \
            bash "$REPO/scripts/scratch-containerd.sh" stop "$d/ctrd" 2>>"$DIR/logs/stop.log" ||
            log "warning: stopping $(node_name "$i")'s containerd failed (see $DIR/logs/stop.log)"
    fi
}

start_picolet() {
    local i=$1 n d=$DIR/n$1
    n=$(node_name "$i")
    kubelet_config containerRuntimeEndpoint="unix://$(<"$d/containerd.sock.path")" podLogsDir="$d/pod-logs" \
        cgroupRoot="$(cgroup_root "$i")" address="$(node_ip "$i")" port="$KUBELET_PORT" \
        clusterDomain=cluster.local "clusterDNS:
- $DNS_IP" \
        tlsCertFile="$DIR/pki/node-$n-serving.crt" tlsPrivateKeyFile="$DIR/pki/node-$n-serving.key" "authentication:
  x509:
    clientCAFile: $CP/pki/ca.crt" "$SHARED_DISK_CONFIG" >"$d/config.yaml"
    launch "$i" "picolet-$i" "$PICOLET_BIN" --config "$d/config.yaml" --root-dir "$d/root" \
        --kubeconfig "$DIR/node-$n.kubeconfig" --hostname-override "$n" --node-ip "$(node_ip "$i")"
}

# The upstream kubelet in picolet's place: the same containerd, name, node IP, node API
# (address, port, serving certificate, clients by the cluster CA; authorization asked of the
# apiserver, the kubelet's default as picolet's), credentials, clusterDNS, cgroup root and
# pod logs directory; what the kubelet needs besides on this machine as
# scripts/conformance.sh gives it (cgroup v1 allowed, swap tolerated, no iptables chains of
# its own, its volume plugin directory and certificate directory under its own).
start_kubelet() {
    local i=$1 n d=$DIR/n$1 k=$DIR/n$1/kubelet
    n=$(node_name "$i")
    upstream_kubelet_prepare "$k" "$(cgroup_root "$i")"
    kubelet_config failCgroupV1=false cgroupDriver=cgroupfs failSwapOn=false makeIPTablesUtilChains=false \
        containerRuntimeEndpoint="unix://$(<"$d/containerd.sock.path")" podLogsDir="$d/pod-logs" \
        volumePluginDir="$k/volume-plugins" cgroupRoot="$(cgroup_root "$i")" address="$(node_ip "$i")" \
        port="$KUBELET_PORT" readOnlyPort=0 healthzBindAddress=127.0.0.1 resolvConf=/etc/resolv.conf \
        clusterDomain=cluster.local "clusterDNS:
- $DNS_IP" \
        tlsCertFile="$DIR/pki/node-$n-serving.crt" tlsPrivateKeyFile="$DIR/pki/node-$n-serving.key" "authentication:
  x509:
    clientCAFile: $CP/pki/ca.crt" "$SHARED_DISK_CONFIG" >"$k/config.yaml"
    upstream_kubelet_argv "$k" "$KUBELET_BIN" --config "$k/config.yaml" --root-dir "$k/root" \
        --cert-dir "$k/root/pki" --kubeconfig "$DIR/node-$n.kubeconfig" --hostname-override "$n" \
        --node-ip "$(node_ip "$i")" --v=2
    launch "$i" "kubelet-$i" "${UPSTREAM_KUBELET_ARGV[@]}"
}

start_kube_proxy() {
    local i=$1
    launch "$i" "kube-proxy-$i" "$CLUSTER_BIN/kube-proxy" --kubeconfig="$DIR/kube-proxy.kubeconfig" \
        --hostname-override="$(node_name "$i")" --proxy-mode=iptables --cluster-cidr="$CLUSTER_CIDR" \
        --bind-address="$(node_ip "$i")" --metrics-bind-address=127.0.0.1:10249 --healthz-bind-address=127.0.0.1:10256 \
        --conntrack-max-per-core=0 --conntrack-tcp-timeout-established=0 --conntrack-tcp-timeout-close-wait=0 --v=2
    # (conntrack: the table's size and timeouts are the machine's, left alone)
}

kube() { "$KUBECTL" --kubeconfig="$CP/admin.kubeconfig" --request-timeout=10s "$@"; }

node_ready() {
    [[ $(kube get node "$1" -o 'jsonpath={.status.conditions[?(@.type=="Ready")].status}') == True ]]
}
node_registered() { kube get node "$1"; }
proxy_healthy() { in_ns "$1" timeout 3 bash -c 'exec 3<>/dev/tcp/127.0.0.1/10256 && printf "GET /healthz HTTP/1.0\r\n\r\n" >&3 && grep -q "200 OK" <&3'; }

# ---------------------------------------------------------------- CoreDNS

deploy_coredns() {
    kube apply -f - >/dev/null <<EOF
apiVersion: v1
kind: ServiceAccount
metadata: {name: coredns, namespace: kube-system}
---
apiVersion: rbac.authorization.k8s.io/v1
kind: ClusterRole
metadata: {name: "system:coredns"}
rules:
- apiGroups: [""]
  resources: [endpoints, services, pods, namespaces]
  verbs: [list, watch]
- apiGroups: [discovery.k8s.io]
  resources: [endpointslices]
  verbs: [list, watch]
---
apiVersion: rbac.authorization.k8s.io/v1
kind: ClusterRoleBinding
metadata: {name: "system:coredns"}
roleRef: {apiGroup: rbac.authorization.k8s.io, kind: ClusterRole, name: "system:coredns"}
subjects: [{kind: ServiceAccount, name: coredns, namespace: kube-system}]
---
apiVersion: v1
kind: ConfigMap
metadata: {name: coredns, namespace: kube-system}
data:
  Corefile: |
    .:53 {
        errors
        health {
            lameduck 5s
        }
        ready
        kubernetes cluster.local in-addr.arpa ip6.arpa {
            pods insecure
            fallthrough in-addr.arpa ip6.arpa
            ttl 30
        }
        cache 30
        loop
        reload
        loadbalance
    }
---
apiVersion: apps/v1
kind: Deployment
metadata:
  name: coredns
  namespace: kube-system
  labels: {k8s-app: kube-dns}
spec:
  replicas: 2
  selector:
    matchLabels: {k8s-app: kube-dns}
  template:
    metadata:
      labels: {k8s-app: kube-dns}
    spec:
      serviceAccountName: coredns
      priorityClassName: system-cluster-critical
      dnsPolicy: Default
      affinity:
        podAntiAffinity:
          preferredDuringSchedulingIgnoredDuringExecution:
          - weight: 100
            podAffinityTerm:
              labelSelector:
                matchLabels: {k8s-app: kube-dns}
              topologyKey: kubernetes.io/hostname
      containers:
      - name: coredns
        image: $COREDNS_IMAGE
        imagePullPolicy: Never
        args: ["-conf", "/etc/coredns/Corefile"]
        volumeMounts:
        - {name: config-volume, mountPath: /etc/coredns, readOnly: true}
        ports:
        - {containerPort: 53, name: dns, protocol: UDP}
        - {containerPort: 53, name: dns-tcp, protocol: TCP}
        livenessProbe:
          httpGet: {path: /health, port: 8080}
          initialDelaySeconds: 10
          timeoutSeconds: 5
        readinessProbe:
          httpGet: {path: /ready, port: 8181}
      volumes:
      - name: config-volume
        configMap:
          name: coredns
          items: [{key: Corefile, path: Corefile}]
---
apiVersion: v1
kind: Service
metadata:
  name: kube-dns
  namespace: kube-system
  labels: {k8s-app: kube-dns, kubernetes.io/name: CoreDNS}
spec:
  selector: {k8s-app: kube-dns}
  clusterIP: $DNS_IP
  ports:
  - {name: dns, port: 53, protocol: UDP}
  - {name: dns-tcp, port: 53, protocol: TCP}
EOF
}

coredns_available() {
    [[ $(kube -n kube-system get deployment coredns -o 'jsonpath={.status.availableReplicas}') == 2 ]]
}

# ---------------------------------------------------------------- up / down

binaries() {
    if [[ $AGENT == kubelet ]]; then
        # The kubelet of the pinned release, as scripts/k8s-build.sh --e2e caches it (not built
        # here: that build takes most of an hour), before the others are looked for or built.
        local key
        key=$("$REPO/scripts/k8s-build.sh" --e2e --key | tail -n 1) || die "scripts/k8s-build.sh --e2e --key failed"
        KUBELET_BIN=$CACHE_ROOT/$key/bin/kubelet
        [[ -x $KUBELET_BIN ]] ||
            die "CLUSTER_AGENT=kubelet: the upstream kubelet of the pinned release is not built ($KUBELET_BIN is missing); scripts/k8s-build.sh --e2e builds it"
    fi
    CP_BIN=$("$REPO/scripts/k8s-build.sh" | tail -n 1) || die "scripts/k8s-build.sh failed"
    CLUSTER_BIN=$("$REPO/scripts/k8s-build.sh" --cluster | tail -n 1) || die "scripts/k8s-build.sh --cluster failed"
    CONTAINERD_BIN=$("$REPO/scripts/k8s-build.sh" --containerd | tail -n 1) || die "scripts/k8s-build.sh --containerd failed"
    KUBECTL=$CP_BIN/kubectl
    COREDNS_VERSION=$("$CLUSTER_BIN/coredns" -version | awk -F- '/^CoreDNS-/ { print $2; exit }')
    COREDNS_IMAGE=picolet.local/coredns:$COREDNS_VERSION
}

cmd_up() {
    local i t0 n
    [[ $(id -u) == 0 ]] || die "run as root (namespaces, containerd and the nodes need it)"
    for n in ip nsenter iptables openssl sysctl setsid python3 unshare mount umount; do
        command -v "$n" >/dev/null || die "$n not found (scripts/install-deps.sh --k8s installs what is needed)"
    done
    [[ ! -f $DIR/run/up ]] || die "$DIR holds a cluster that is up; run: $0 down $DIR"
    binaries
    if [[ $AGENT == kubelet ]]; then
        PICOLET_BIN=
    elif [[ -n ${PICOLET_BIN:-} ]]; then
        [[ -x $PICOLET_BIN ]] || die "PICOLET_BIN=$PICOLET_BIN is not an executable"
    else
        PICOLET_BIN=$REPO/target/debug/picolet
        [[ -x $PICOLET_BIN ]] || (cd "$REPO" && nice -n 19 cargo build --locked -q) || die "cargo build failed"
    fi
    t0=$(now)
    rm -rf --one-file-system -- "$DIR"
    mkdir -p "$DIR/run" "$DIR/logs" "$DIR/net" "$DIR/images/root/coredns"
    : >"$DIR/run/up"
    UP_OK=0
    trap 'if [[ $UP_OK != 1 ]]; then log "up failed: taking down what it made"; set +e; cmd_down; fi' EXIT

    # The CoreDNS image: its binary on the busybox image of build-image.sh.
    cp -- "$CLUSTER_BIN/coredns" "$DIR/images/root/coredns/coredns"
    bash "$REPO/scripts/build-image.sh" --add "$DIR/images/root/coredns" --entrypoint /coredns \
        "$DIR/images/coredns.tar" "$COREDNS_IMAGE" >/dev/null || die "building $COREDNS_IMAGE failed"

    net_up
    local nodes=()
    for ((i = 1; i <= NODE_COUNT; i++)); do nodes+=(--node "$(node_name "$i")"); done
    PICOLET_K8S_BIN=$CP_BIN APISERVER_EXTRA_SANS="IP:$HOST_IP" \
        APISERVER_EXTRA_FLAGS="--advertise-address=$HOST_IP --endpoint-reconciler-type=lease --enable-aggregator-routing=true ${APISERVER_EXTRA_FLAGS:-}" \
        bash "$REPO/scripts/control-plane.sh" start "$CP" "${nodes[@]}" --controllers \
        >/dev/null 2>"$DIR/logs/control-plane-start.log" ||
        die_with_log "$DIR/logs/control-plane-start.log" 20 "the control plane did not start"
    # shellcheck disable=SC1091 # written by control-plane.sh
    APISERVER_PORT=$(. "$CP/cluster.env" && printf '%s' "${APISERVER##*:}")
    printf '%s\n' "$APISERVER_PORT" >"$DIR/net/apiserver-port"
    local rule=()
    mapfile -t rule < <(dnat_rule)
    iptables -w -t nat -A PREROUTING "${rule[@]}"
    make_credentials
    log "control plane up; the nodes reach it at https://$HOST_IP:$APISERVER_PORT"

    for ((i = 1; i <= NODE_COUNT; i++)); do
        start_containerd "$i"
        "start_$AGENT" "$i"
        start_kube_proxy "$i"
    done
    for ((i = 1; i <= NODE_COUNT; i++)); do
        n=$(node_name "$i")
        wait_until "Node $n registered" node_registered "$n"
        kube patch node "$n" --type=merge -p "{\"spec\":{\"podCIDR\":\"$(pod_cidr "$i")\",\"podCIDRs\":[\"$(pod_cidr "$i")\"]}}" >/dev/null ||
            die "setting Node $n's podCIDR failed"
    done
    for ((i = 1; i <= NODE_COUNT; i++)); do
        n=$(node_name "$i")
        alive "$(pid_of "$DIR" "$AGENT-$i")" || die_with_log "$DIR/logs/$AGENT-$i.log" 30 "the $AGENT of $n exited"
        wait_until "Node $n Ready" node_ready "$n"
        wait_until "kube-proxy of $n healthy (127.0.0.1:10256 in its namespace)" proxy_healthy "$i"
    done
    deploy_coredns || die "creating CoreDNS's objects failed"
    wait_until "CoreDNS Deployment with 2 available replicas" coredns_available
    {
        printf 'KUBECONFIG=%s\nKUBECTL=%s\nCP_BIN=%s\nCLUSTER_BIN=%s\nCONTAINERD_BIN=%s\n' \
            "$CP/admin.kubeconfig" "$KUBECTL" "$CP_BIN" "$CLUSTER_BIN" "$CONTAINERD_BIN"
        printf 'NODES=%s\nAGENT=%s\nPICOLET_BIN=%s\nKUBELET_BIN=%s\n' "$NODE_COUNT" "$AGENT" "$PICOLET_BIN" "${KUBELET_BIN:-}"
    } >"$DIR/cluster.env"
    UP_OK=1
    log "cluster up in $(since "$t0") s: $NODE_COUNT $AGENT nodes; kubectl --kubeconfig $CP/admin.kubeconfig"
    printf '%s\n' "$DIR"
}

# mounts_under DIR: the mount points at or below DIR, deepest first.
mounts_under() { awk -v d="$1" '$5 == d || index($5, d "/") == 1 { print $5 }' /proc/self/mountinfo | sort -r; }

cmd_down() {
    local i
    [[ -d $DIR ]] || return 0
    mkdir -p "$DIR/logs"
    CONTAINERD_BIN=
    if [[ -f $DIR/cluster.env ]]; then
        # shellcheck disable=SC1091
        CONTAINERD_BIN=$(. "$DIR/cluster.env" && printf '%s' "$CONTAINERD_BIN")
    fi
    [[ -n $CONTAINERD_BIN ]] || CONTAINERD_BIN=$("$REPO/scripts/k8s-build.sh" --containerd | tail -n 1)
    for ((i = 1; i <= 3; i++)); do
        stop_named "kube-proxy-$i"
        stop_named "picolet-$i"
        stop_named "kubelet-$i"
    done
    stop_named registry
    for ((i = 1; i <= 3; i++)); do
        stop_containerd "$i"
    done
    bash "$REPO/scripts/control-plane.sh" stop "$CP" 2>>"$DIR/logs/stop.log" || log "warning: stopping the control plane failed"
    for ((i = 1; i <= 3; i++)); do
        [[ -d $DIR/n$i ]] || continue
        # What the node mounted under its root directory (volumes; the kubelet's root
        # directory's shared bind mount too), then its cgroups.
        while read -r mp; do
            umount -l -- "$mp" 2>/dev/null || log "warning: could not unmount $mp"
        done < <(mounts_under "$DIR/n$i")
        remove_cgroup_tree "$(cgroup_root "$i")" || log "warning: could not remove every cgroup under $(cgroup_root "$i")"
        # The kubelet's root directory and the files it took for /var/lib and /var/log,
        # unless something is still mounted there (a bind mount may lead out of DIR).
        if [[ -d $DIR/n$i/kubelet ]]; then
            if [[ -z $(mounts_under "$DIR/n$i/kubelet") ]]; then
                rm -rf --one-file-system -- "$DIR/n$i/kubelet/root" "$DIR/n$i/kubelet/host" "$DIR/n$i/kubelet/volume-plugins"
            else
                log "warning: mounts are left under $DIR/n$i/kubelet; its files are kept"
            fi
        fi
    done
    # The bulk (containerd's content and snapshots, the image archives, the mirror's blobs,
    # etcd's data) goes too: nothing in it explains a failure, and a disk that kept it after
    # every run would fill.
    for ((i = 1; i <= 3; i++)); do
        [[ -d $DIR/n$i/ctrd ]] || continue
        if [[ -z $(mounts_under "$DIR/n$i/ctrd") ]]; then
            rm -rf --one-file-system -- "$DIR/n$i/ctrd/root" "$DIR/n$i/ctrd/state"
        else
            log "warning: mounts are left under $DIR/n$i/ctrd; its files are kept"
        fi
    done
    rm -rf --one-file-system -- "$DIR/images" "$DIR/registry/data" "$CP/etcd"
    net_down
    rm -f -- "$DIR/run/up"
    log "down: $DIR's processes, mounts, cgroups, namespaces, links, routes, rules and stored images are gone (logs and reports kept)"
}

# load_env: the variables up wrote into DIR/cluster.env (AGENT, the node agent, among them);
# dies when no cluster is up there, or when CLUSTER_AGENT names another agent than it runs.
load_env() {
    [[ -f $DIR/cluster.env && -f $DIR/run/up ]] || die "$DIR holds no cluster that is up (run: $0 up $DIR)"
    AGENT=
    # shellcheck disable=SC1091
    . "$DIR/cluster.env"
    AGENT=${AGENT:-picolet}
    [[ -z ${CLUSTER_AGENT:-} || $CLUSTER_AGENT == "$AGENT" ]] ||
        die "the cluster in $DIR runs $AGENT nodes, not $CLUSTER_AGENT (CLUSTER_AGENT)"
}

# ---------------------------------------------------------------- check

# check_pod NAME NODE_I LABEL COMMAND: a busybox pod pinned to node NODE_I
# (dnsPolicy ClusterFirst, the default).
check_pod() {
    local name=$1 i=$2 label=$3 cmd=$4
    kube apply -f - >/dev/null <<EOF
apiVersion: v1
kind: Pod
metadata:
  name: $name
  namespace: cluster-check
  labels: {app: $label}
spec:
  nodeName: $(node_name "$i")
  terminationGracePeriodSeconds: 1
  containers:
  - name: main
    image: picolet.local/busybox:1
    imagePullPolicy: Never
    command: ["sh", "-c", "$cmd"]
EOF
}

pod_running() { [[ $(kube -n cluster-check get pod "$1" -o 'jsonpath={.status.phase}') == Running ]]; }

# http_get HOST PORT: the words that run GET / on HOST:PORT in the client pod.
http_get() { printf '%s\n' sh -c "printf 'GET / HTTP/1.0\\r\\n\\r\\n' | busybox nc -w 5 $1 $2"; }

# probe WHAT EXPECTED COMMAND...: runs COMMAND (http_get's words in its place) in
# the client pod; prints ok or FAILED with WHAT, counts the failures.
CHECK_FAILED=0
probe() {
    local what=$1 want=$2 out t0 argv=()
    shift 2
    t0=$(now)
    if [[ $1 == http_get ]]; then
        mapfile -t argv < <(http_get "$2" "$3")
        set -- "${argv[@]}"
    fi
    out=$(kube -n cluster-check exec client -- "$@" 2>&1) || true
    if [[ $out == *"$want"* ]]; then
        say "ok      $what ($(since "$t0") s)"
    else
        say "FAILED  $what: got '${out//$'\n'/ }'"
        CHECK_FAILED=$((CHECK_FAILED + 1))
    fi
}

cmd_check() {
    local ip1 ip2 cluster_ip i
    load_env
    kube delete namespace cluster-check --ignore-not-found --wait=true >/dev/null
    kube create namespace cluster-check >/dev/null
    wait_until "ServiceAccount default in namespace cluster-check" kube -n cluster-check get serviceaccount default
    # A web server on node 1, one on node 2, the client on node 2.
    for i in 1 2; do
        check_pod "web-$i" "$i" "web-$i" "mkdir -p /www && echo served-by-web-$i >/www/index.html && exec httpd -f -p 8080 -h /www"
    done
    check_pod client 2 client "exec sleep 3600"
    kube -n cluster-check create service clusterip web --tcp=80:8080 >/dev/null
    kube -n cluster-check patch service web --type=merge -p '{"spec":{"selector":{"app":"web-1"}}}' >/dev/null
    for i in web-1 web-2 client; do
        wait_until "pod $i Running" pod_running "$i"
    done
    ip1=$(kube -n cluster-check get pod web-1 -o 'jsonpath={.status.podIP}')
    ip2=$(kube -n cluster-check get pod web-2 -o 'jsonpath={.status.podIP}')
    cluster_ip=$(kube -n cluster-check get service web -o 'jsonpath={.spec.clusterIP}')
    section "from pod client on $(node_name 2)"
    # (HTTP by busybox nc: the machine's static busybox wget crashes, even on loopback)
    probe "pod to pod across nodes: web-1 on $(node_name 1) at $ip1:8080" served-by-web-1 http_get "$ip1" 8080
    probe "pod to pod on one node: web-2 at $ip2:8080" served-by-web-2 http_get "$ip2" 8080
    probe "Service web through kube-proxy to $(node_name 1): $cluster_ip:80" served-by-web-1 http_get "$cluster_ip" 80
    probe "the Service's name through CoreDNS (the pod's resolv.conf): web.cluster-check.svc.cluster.local" \
        "Address: $cluster_ip" busybox nslookup web.cluster-check.svc.cluster.local
    probe "the Service by its short name (ClusterFirst's search path, CoreDNS, kube-proxy): web:80" served-by-web-1 \
        http_get web 80
    kube delete namespace cluster-check --wait=false >/dev/null
    [[ $CHECK_FAILED == 0 ]] || die "$CHECK_FAILED checks failed"
    log "all checks passed"
}

# ---------------------------------------------------------------- e2e

# shellcheck source=scripts/lib/e2e.sh
. "$REPO/scripts/lib/e2e.sh"

# shellcheck source=scripts/lib/registry-mirror.sh
. "$REPO/scripts/lib/registry-mirror.sh"

# serve_mirror: the registry mirror (see the top of this file) started afresh on
# the bridge address, holding every image of IMAGES named under registry.k8s.io
# (pushed from node 1's containerd, which has imported them).
serve_mirror() {
    local tools port image sock t0 n=0
    t0=$(now)
    tools=$("$REPO/scripts/k8s-build.sh" --tools | tail -n 1) || die "scripts/k8s-build.sh --tools failed"
    rm -f -- "$DIR/hosts/registry.k8s.io/hosts.toml"
    stop_named registry
    rm -rf -- "$DIR/registry"
    port=$(free_port)
    mirror_start "$tools" "$DIR/registry" "$HOST_IP" "$port" "$DIR/logs/registry.log" "$DIR/run/registry.pid"
    sock=$(<"$DIR/n1/containerd.sock.path")
    for image in "${IMAGES[@]}"; do
        [[ $image == registry.k8s.io/* ]] || continue
        "$CONTAINERD_BIN/ctr" -a "$sock" -n k8s.io images push --plain-http \
            "$HOST_IP:$port/${image#registry.k8s.io/}" "$image" >/dev/null 2>>"$DIR/logs/registry.log" ||
            die_with_log "$DIR/logs/registry.log" 20 "pushing $image to the registry mirror failed"
        n=$((n + 1))
    done
    mirror_hosts "$DIR/hosts" "$HOST_IP:$port"
    log "registry mirror on $HOST_IP:$port serves $n images as registry.k8s.io's (ready in $(since "$t0") s)"
}

DEFAULT_FOCUS='Networking Granular Checks: Pods .*\[Conformance\]|\[sig-network\] DNS .*\[Conformance\]|\[sig-network\] Services should serve a basic endpoint from pods .*\[Conformance\]'
DEFAULT_SKIP='\[Serial\]|\[Disruptive\]|\[Flaky\]|\[Slow\]'

cmd_e2e() {
    local i t0 rc=0 tar sock report=$DIR/report
    load_env
    E2E_BIN=$("$REPO/scripts/k8s-build.sh" --e2e | tail -n 1) || die "scripts/k8s-build.sh --e2e failed"
    e2e_sources
    # shellcheck source=scripts/lib/test-images.sh
    . "$REPO/scripts/lib/test-images.sh"
    rm -rf -- "$DIR/images/root" "$report"
    mkdir -p "$DIR/images" "$report"
    build_images
    for ((i = 1; i <= NODES; i++)); do
        sock=$(<"$DIR/n$i/containerd.sock.path")
        for tar in "$DIR"/images/*.tar; do
            "$CONTAINERD_BIN/ctr" -a "$sock" -n k8s.io images import "$tar" >/dev/null ||
                die "importing $tar into $(node_name "$i")'s containerd failed"
        done
    done
    serve_mirror
    local flags=(--no-color "--procs=${PROCS:-2}" "--timeout=${GINKGO_TIMEOUT:-1h}" "--focus=${FOCUS:-$DEFAULT_FOCUS}")
    [[ -z ${SKIP-$DEFAULT_SKIP} ]] || flags+=("--skip=${SKIP-$DEFAULT_SKIP}")
    t0=$(now)
    log "running ginkgo (${flags[*]} $*); output in $report/ginkgo.log"
    run_ginkgo "$report" "$CP/admin.kubeconfig" "$KUBECTL" "${flags[@]}" "$@" -- --dns-domain=cluster.local || rc=$?
    [[ -f $report/report.json ]] || die_with_log "$report/ginkgo.log" 30 "ginkgo exited with $rc and wrote no report"
    python3 - "$report/report.json" "$(since "$t0")" "$AGENT" <<'EOF' | tee "$report/summary.txt"
import json, sys
reports = json.load(open(sys.argv[1]))
specs = [s for r in reports for s in r["SpecReports"] if s["LeafNodeType"] == "It"]
will_run = sum(r["PreRunStats"]["SpecsThatWillRun"] for r in reports)
name = lambda s: " ".join(s["ContainerHierarchyTexts"] + [s["LeafNodeText"]])
ran = [s for s in specs if s["State"] not in ("skipped", "pending")]
passed = [s for s in ran if s["State"] == "passed"]
print("%s cluster: selected %d, passed %d, failed %d (ginkgo ran %s s)" % (sys.argv[3], will_run, len(passed), len(ran) - len(passed), sys.argv[2]))
for s in sorted(ran, key=name):
    if s["State"] == "passed":
        print("passed  %s (%.0f s)" % (name(s), s["RunTime"] / 1e9))
    else:
        f = s.get("Failure", {})
        msg = (f.get("Message") or "").strip().splitlines()
        print("FAILED  %s -- %s:%s: %s" % (name(s), f.get("Location", {}).get("FileName", "?").split("/test/")[-1],
              f.get("Location", {}).get("LineNumber", "?"), msg[0][:240] if msg else s["State"]))
EOF
    log "reports: $report/junit.xml, report.json, summary.txt, ginkgo.log"
    return "$rc"
}

[[ $# -ge 1 ]] || usage
cmd=$1
shift
DIR=/tmp/pcluster
if [[ $# -gt 0 && $1 != -* ]]; then
    DIR=$1
    shift
fi
[[ $DIR == /* && $DIR != / ]] || die "DIR must be an absolute path other than /"
mkdir -p "$DIR"
DIR=$(cd "$DIR" && pwd -P)
CP=$DIR/cp
case $cmd in
    up) cmd_up ;;
    down) cmd_down ;;
    check) cmd_check ;;
    e2e)
        trap stop_ginkgo EXIT
        cmd_e2e "$@"
        ;;
    *) usage ;;
esac
