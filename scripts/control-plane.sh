#!/usr/bin/env bash
# A private Kubernetes control plane on loopback for the cluster tests: the real
# etcd and kube-apiserver (and, with --controllers, kube-scheduler and
# kube-controller-manager) built by scripts/k8s-build.sh, with certificates this
# script makes. Every file lives under DIR; every process is started by this
# script, recorded by PID in DIR/run/, and stopped by that PID.
#
#   scripts/control-plane.sh start DIR [--node NAME]... [--controllers]
#                                [--bootstrap-token ID.SECRET] [--signing-duration DUR]
#   scripts/control-plane.sh stop DIR
#
# start (re)creates DIR's certificates, kubeconfigs and etcd data (it refuses
# while DIR's control plane runs), starts etcd and the apiserver on free loopback
# ports, waits for /readyz, and prints DIR's canonical path as the last line of
# stdout. DIR then holds:
#   cluster.env                  BIN, KUBECTL, APISERVER, ETCD, NODES (comma-
#                                separated), CONTROLLERS (0 or 1); a shell can
#                                source it
#   admin.kubeconfig             user picolet-test-admin in group system:masters
#   node-NAME.kubeconfig         user system:node:NAME, group system:nodes, EC P-256
#                                key in SEC1 form ("EC PRIVATE KEY"); certificates
#                                and key embedded (*-data), as `kubectl config
#                                set-credentials --embed-certs` writes them
#   node-NAME-rsa.kubeconfig     the same identity with an RSA key in PKCS#1 form
#                                ("RSA PRIVATE KEY"), embedded
#   node-NAME-pkcs8.kubeconfig   the EC key in PKCS#8 form ("PRIVATE KEY"), with
#                                the certificates and key as file paths, relative
#                                to the kubeconfig's directory (pki/...), as
#                                kubectl writes paths
#   pki/                         ca.crt/.key, apiserver, admin, node and
#                                controller certificates, sa.key/sa.pub (the
#                                service-account signing key pair), the front
#                                proxy's CA and client certificate; for each
#                                node a serving certificate node-NAME-serving
#                                (DNS:NAME, IP:127.0.0.1) for its node API, and
#                                apiserver-kubelet-client, the certificate the
#                                apiserver presents to node APIs (system:masters)
#   logs/COMPONENT.log, run/COMPONENT.pid, etcd/ (etcd's data)
#
# The apiserver runs with --authorization-mode=Node,RBAC and NodeRestriction on
# top of the default admission plugins, reaches node APIs as kubeadm sets it up
# (its kubelet client certificate, the cluster CA for their serving
# certificates, InternalIP first), and a service-account issuer and keys,
# so the TokenRequest API works. With --controllers, start also waits until the
# controller manager has created the default ServiceAccount and the
# kube-root-ca.crt ConfigMap in namespace default.
#
# --bootstrap-token ID.SECRET sets a node up to join as kubeadm join does: the
# apiserver runs with --enable-bootstrap-token-auth, the token's Secret
# (bootstrap-token-ID in kube-system, group
# system:bootstrappers:kubeadm:default-node-token) and kubeadm's
# ClusterRoleBindings are created (system:node-bootstrapper and the nodeclient
# approval for that group, selfnodeclient approval for system:nodes), the
# controller manager also runs bootstrapsigner and tokencleaner, and DIR gets
# bootstrap.kubeconfig (the cluster CA embedded, the token as its user).
# --signing-duration DUR is the controller manager's --cluster-signing-duration
# (the lifetime of the certificates its signer issues; the signer backdates
# notBefore by 5 minutes, and honours no minimum for this flag).
#
# stop sends SIGTERM (SIGKILL after 10 s) to the PIDs in DIR/run/ whose command
# line names DIR, and nothing else; it leaves DIR's files for inspection.
#
# Environment: PICOLET_K8S_BIN, a directory holding etcd, kube-apiserver,
# kube-scheduler, kube-controller-manager and kubectl, instead of
# scripts/k8s-build.sh's cache; START_TIMEOUT_S (default 180);
# CONTROLLER_MANAGER_EXTRA_FLAGS, more kube-controller-manager flags, split on
# whitespace (a node whose Lease lasts longer than 50 s needs a longer
# --node-monitor-grace-period);
# APISERVER_EXTRA_FLAGS, more kube-apiserver flags, split on whitespace (the
# conformance run sets --kubelet-preferred-address-types);
# APISERVER_EXTRA_SANS, more subjectAltName entries of the apiserver's serving
# certificate, as openssl writes them ("IP:10.250.0.1,DNS:name": the cluster
# harness reaches the apiserver at an address of its own bridge).
set -euo pipefail

SCRIPT_DIR=$(cd "$(dirname -- "${BASH_SOURCE[0]}")" && pwd)
START_TIMEOUT_S=${START_TIMEOUT_S:-180}
CLUSTER=picolet-test
COMPONENTS=(etcd kube-apiserver kube-scheduler kube-controller-manager)

PROG=control-plane
# shellcheck source=scripts/lib/common.sh
. "$SCRIPT_DIR/lib/common.sh"

usage() {
    sed -n '2,/^set -euo/p' "${BASH_SOURCE[0]}" | sed '$d; s/^# \{0,1\}//' >&2
    exit 2
}

# ---------------------------------------------------------------- processes

stop_component() {
    local name=$1 pid i
    pid=$(pid_of "$DIR" "$name")
    if [[ -n $pid ]]; then
        kill -TERM "$pid" 2>/dev/null || true
        for ((i = 0; i < 100; i++)); do
            alive "$pid" || break
            sleep 0.1
        done
        if alive "$pid"; then
            log "$name (pid $pid) ignored SIGTERM for 10 s; sending SIGKILL"
            kill -KILL "$pid" 2>/dev/null || true
            for ((i = 0; i < 50; i++)); do
                alive "$pid" || break
                sleep 0.1
            done
            ! alive "$pid" || die "$name (pid $pid) survived SIGKILL"
        fi
        log "stopped $name (pid $pid)"
    fi
    rm -f -- "$DIR/run/$name.pid"
}

cmd_stop() {
    [[ -d $DIR ]] || return 0
    DIR=$(cd "$DIR" && pwd -P)
    local i
    for ((i = ${#COMPONENTS[@]} - 1; i >= 0; i--)); do
        stop_component "${COMPONENTS[i]}"
    done
}

# launch COMPONENT ARGS...: starts BIN/COMPONENT in its own session, output to
# its log; records its PID.
launch() {
    local name=$1
    shift
    setsid "$BIN/$name" "$@" </dev/null >>"$DIR/logs/$name.log" 2>&1 &
    printf '%s\n' "$!" >"$DIR/run/$name.pid"
}

fail_with_log() { die_with_log "$DIR/logs/$1.log" 30 "$2"; } # fail_with_log COMPONENT MESSAGE

# wait_for COMPONENT WHAT COMMAND...: runs COMMAND until it succeeds, while
# COMPONENT is alive, for at most START_TIMEOUT_S.
wait_for() {
    local name=$1 what=$2 t0 deadline pid
    shift 2
    t0=$(now)
    deadline=$((SECONDS + START_TIMEOUT_S))
    pid=$(<"$DIR/run/$name.pid")
    while ((SECONDS < deadline)); do
        alive "$pid" || fail_with_log "$name" "$name (pid $pid) exited before $what"
        if "$@" >/dev/null 2>&1; then
            log "$what after $(since "$t0") s"
            return 0
        fi
        sleep 0.2
    done
    fail_with_log "$name" "no $what within $START_TIMEOUT_S s"
}

# ---------------------------------------------------------------- ports

# free_ports N: N distinct TCP ports in 20000-32767 (below the kernel's
# ephemeral range) that nothing listens on or is connected from, and that no
# other start has taken in the last 10 minutes: two control planes starting at
# once (tests run in parallel) pick before either binds, so each records what
# it took in a shared file, under a lock.
PORTS_TAKEN=${TMPDIR:-/tmp}/picolet-control-plane-ports
free_ports() {
    local -A used=()
    local p t n=0 tries=0 now
    now=$(date +%s)
    exec {lock}>>"$PORTS_TAKEN.lock"
    flock "$lock"
    while read -r p; do used[${p##*:}]=1; done < <(ss -Htan | awk '{ print $4 }')
    local kept=()
    if [[ -f $PORTS_TAKEN ]]; then
        while read -r p t; do
            [[ $p =~ ^[0-9]+$ && $t =~ ^[0-9]+$ ]] || continue
            ((now - t < 600)) || continue
            used[$p]=1
            kept+=("$p $t")
        done <"$PORTS_TAKEN"
    fi
    local picked=()
    while ((n < $1)); do
        ((tries++ < 1000)) || die "found no free loopback ports"
        p=$((20000 + RANDOM % 12768))
        [[ -z ${used[$p]+x} ]] || continue
        used[$p]=1
        picked+=("$p")
        kept+=("$p $now")
        n=$((n + 1))
    done
    printf '%s\n' "${kept[@]}" >"$PORTS_TAKEN.new" && mv -f "$PORTS_TAKEN.new" "$PORTS_TAKEN"
    flock -u "$lock"
    exec {lock}>&-
    printf '%s\n' "${picked[@]}"
}

# ---------------------------------------------------------------- certificates

# sign NAME SUBJECT EXTENSIONS: pki/NAME.crt for pki/NAME.key, signed by the
# cluster CA (or by pki/$CA.crt if CA is set).
sign() {
    local name=$1 subj=$2 ext=$3
    openssl req -new -key "$PKI/$name.key" -subj "$subj" -out "$PKI/$name.csr" 2>/dev/null ||
        die "openssl req for $name failed"
    printf 'basicConstraints = critical, CA:FALSE\n%s\n' "$ext" >"$PKI/$name.ext"
    openssl x509 -req -in "$PKI/$name.csr" -CA "$PKI/${CA:-ca}.crt" -CAkey "$PKI/${CA:-ca}.key" \
        -set_serial "0x$(openssl rand -hex 16)" -days 365 -sha256 \
        -extfile "$PKI/$name.ext" -out "$PKI/$name.crt" 2>/dev/null ||
        die "openssl x509 signing $name failed"
    rm -f -- "$PKI/$name.csr" "$PKI/$name.ext"
}

ec_key() { openssl ecparam -name prime256v1 -genkey -noout -out "$PKI/$1.key" 2>/dev/null || die "openssl ecparam for $1 failed"; }
rsa_key() { openssl genrsa -traditional -out "$PKI/$1.key" 2048 2>/dev/null || die "openssl genrsa for $1 failed"; }

# expect_pem FILE FIRST_LINE: the key has the form the kubeconfig variant promises.
expect_pem() {
    [[ $(head -n 1 "$1") == "$2" ]] || die "$1 starts with '$(head -n 1 "$1")', expected '$2' (openssl $(openssl version))"
}

CLIENT_EXT='keyUsage = critical, digitalSignature, keyEncipherment
extendedKeyUsage = clientAuth'

make_pki() {
    local n
    mkdir -p "$PKI"
    ec_key ca
    openssl req -x509 -new -key "$PKI/ca.key" -subj "/CN=$CLUSTER-ca" -days 3650 -sha256 \
        -addext "basicConstraints = critical, CA:TRUE" \
        -addext "keyUsage = critical, keyCertSign, cRLSign, digitalSignature" \
        -out "$PKI/ca.crt" 2>/dev/null || die "openssl req -x509 for the CA failed"
    ec_key apiserver
    sign apiserver "/CN=kube-apiserver" "keyUsage = critical, digitalSignature, keyEncipherment
extendedKeyUsage = serverAuth
subjectAltName = IP:127.0.0.1, IP:10.96.0.1, DNS:localhost, DNS:kubernetes, DNS:kubernetes.default, DNS:kubernetes.default.svc, DNS:kubernetes.default.svc.cluster.local${APISERVER_EXTRA_SANS:+, $APISERVER_EXTRA_SANS}"
    ec_key admin
    sign admin "/O=system:masters/CN=$CLUSTER-admin" "$CLIENT_EXT"
    ec_key kube-scheduler
    sign kube-scheduler "/CN=system:kube-scheduler" "$CLIENT_EXT"
    ec_key kube-controller-manager
    sign kube-controller-manager "/CN=system:kube-controller-manager" "$CLIENT_EXT"
    for n in "${NODES[@]}"; do
        ec_key "node-$n"
        expect_pem "$PKI/node-$n.key" "-----BEGIN EC PRIVATE KEY-----"
        sign "node-$n" "/O=system:nodes/CN=system:node:$n" "$CLIENT_EXT"
        openssl pkcs8 -topk8 -nocrypt -in "$PKI/node-$n.key" -out "$PKI/node-$n-pkcs8.key" 2>/dev/null ||
            die "openssl pkcs8 for node-$n failed"
        expect_pem "$PKI/node-$n-pkcs8.key" "-----BEGIN PRIVATE KEY-----"
        rsa_key "node-$n-rsa"
        expect_pem "$PKI/node-$n-rsa.key" "-----BEGIN RSA PRIVATE KEY-----"
        sign "node-$n-rsa" "/O=system:nodes/CN=system:node:$n" "$CLIENT_EXT"
        ec_key "node-$n-serving"
        sign "node-$n-serving" "/O=system:nodes/CN=system:node:$n" "keyUsage = critical, digitalSignature, keyEncipherment
extendedKeyUsage = serverAuth
subjectAltName = DNS:$n, IP:127.0.0.1"
    done
    ec_key apiserver-kubelet-client
    sign apiserver-kubelet-client "/O=system:masters/CN=kube-apiserver-kubelet-client" "$CLIENT_EXT"
    # The front proxy (the aggregation layer) has a CA of its own, as kubeadm makes
    # it: no cluster client certificate can pose as the proxy.
    ec_key front-proxy-ca
    openssl req -x509 -new -key "$PKI/front-proxy-ca.key" -subj "/CN=$CLUSTER-front-proxy-ca" -days 3650 -sha256 \
        -addext "basicConstraints = critical, CA:TRUE" \
        -addext "keyUsage = critical, keyCertSign, cRLSign, digitalSignature" \
        -out "$PKI/front-proxy-ca.crt" 2>/dev/null || die "openssl req -x509 for the front proxy CA failed"
    ec_key front-proxy-client
    CA=front-proxy-ca sign front-proxy-client "/CN=front-proxy-client" "$CLIENT_EXT"
    rsa_key sa
    openssl rsa -in "$PKI/sa.key" -pubout -out "$PKI/sa.pub" 2>/dev/null || die "openssl rsa -pubout failed"
    chmod 600 "$PKI"/*.key
}

# kubeconfig FILE USER CERT KEY EMBED: written with kubectl config, as kubectl
# writes it.
kubeconfig() {
    local file=$1 user=$2 cert=$3 key=$4 embed=$5 tmp=$1.tmp
    rm -f -- "$tmp"
    {
        "$KUBECTL" config --kubeconfig="$tmp" set-cluster "$CLUSTER" --server="$APISERVER" \
            --certificate-authority="$PKI/ca.crt" --embed-certs="$embed" &&
            "$KUBECTL" config --kubeconfig="$tmp" set-credentials "$user" \
                --client-certificate="$cert" --client-key="$key" --embed-certs="$embed" &&
            "$KUBECTL" config --kubeconfig="$tmp" set-context "$user@$CLUSTER" --cluster="$CLUSTER" --user="$user" &&
            "$KUBECTL" config --kubeconfig="$tmp" use-context "$user@$CLUSTER"
    } >/dev/null || die "kubectl config could not write $file"
    mv -f -- "$tmp" "$file"
}

make_kubeconfigs() {
    local n
    kubeconfig "$DIR/admin.kubeconfig" "$CLUSTER-admin" "$PKI/admin.crt" "$PKI/admin.key" true
    kubeconfig "$DIR/kube-scheduler.kubeconfig" system:kube-scheduler "$PKI/kube-scheduler.crt" "$PKI/kube-scheduler.key" true
    kubeconfig "$DIR/kube-controller-manager.kubeconfig" system:kube-controller-manager \
        "$PKI/kube-controller-manager.crt" "$PKI/kube-controller-manager.key" true
    for n in "${NODES[@]}"; do
        kubeconfig "$DIR/node-$n.kubeconfig" "system:node:$n" "$PKI/node-$n.crt" "$PKI/node-$n.key" true
        kubeconfig "$DIR/node-$n-rsa.kubeconfig" "system:node:$n" "$PKI/node-$n-rsa.crt" "$PKI/node-$n-rsa.key" true
        kubeconfig "$DIR/node-$n-pkcs8.kubeconfig" "system:node:$n" "$PKI/node-$n.crt" "$PKI/node-$n-pkcs8.key" false
    done
}

# ---------------------------------------------------------------- start

etcd_healthy() {
    local reply
    # shellcheck disable=SC2016 # $1 expands in the inner bash
    reply=$(timeout 3 bash -c 'exec 3<>"/dev/tcp/127.0.0.1/$1" && printf "GET /health HTTP/1.0\r\n\r\n" >&3 && cat <&3' _ "$ETCD_PORT") || return 1
    [[ $reply == *'"health":"true"'* ]]
}

apiserver_ready() {
    [[ $("$KUBECTL" --kubeconfig="$DIR/admin.kubeconfig" --request-timeout=5s get --raw /readyz) == ok ]]
}

# The scheduler's and controller manager's /healthz: always allowed, no
# credentials needed, over TLS with their self-signed serving certificates
# (kubectl would prompt for a password without credentials).
healthz() {
    local reply
    reply=$(printf 'GET /healthz HTTP/1.0\r\nHost: 127.0.0.1\r\n\r\n' |
        timeout 5 openssl s_client -connect "127.0.0.1:$1" -quiet 2>/dev/null) || return 1
    [[ $reply == "HTTP/1.0 200 OK"* && $reply == *$'\r\n\r\nok' ]]
}

controllers_working() {
    "$KUBECTL" --kubeconfig="$DIR/admin.kubeconfig" --request-timeout=5s -n default get serviceaccount default &&
        "$KUBECTL" --kubeconfig="$DIR/admin.kubeconfig" --request-timeout=5s -n default get configmap kube-root-ca.crt
}

start_etcd() {
    launch etcd --name=default --data-dir="$DIR/etcd" \
        --listen-client-urls="http://127.0.0.1:$ETCD_PORT" --advertise-client-urls="http://127.0.0.1:$ETCD_PORT" \
        --listen-peer-urls="http://127.0.0.1:$ETCD_PEER_PORT" --initial-advertise-peer-urls="http://127.0.0.1:$ETCD_PEER_PORT" \
        --initial-cluster="default=http://127.0.0.1:$ETCD_PEER_PORT" --initial-cluster-state=new \
        --unsafe-no-fsync --log-level=warn
    # (--unsafe-no-fsync: the data is scratch; syncing it would only slow a
    # shared machine's disk.)
    wait_for etcd "etcd healthy on 127.0.0.1:$ETCD_PORT" etcd_healthy
}

start_apiserver() {
    local extra=()
    read -r -a extra <<<"${APISERVER_EXTRA_FLAGS:-}"
    if [[ -n $BOOTSTRAP_TOKEN ]]; then
        extra+=(--enable-bootstrap-token-auth)
    fi
    launch kube-apiserver \
        --etcd-servers="http://127.0.0.1:$ETCD_PORT" \
        --bind-address=127.0.0.1 --advertise-address=127.0.0.1 --secure-port="$APISERVER_PORT" \
        --tls-cert-file="$PKI/apiserver.crt" --tls-private-key-file="$PKI/apiserver.key" \
        --client-ca-file="$PKI/ca.crt" \
        --requestheader-client-ca-file="$PKI/front-proxy-ca.crt" \
        --requestheader-allowed-names=front-proxy-client \
        --requestheader-username-headers=X-Remote-User \
        --requestheader-group-headers=X-Remote-Group \
        --requestheader-extra-headers-prefix=X-Remote-Extra- \
        --proxy-client-cert-file="$PKI/front-proxy-client.crt" \
        --proxy-client-key-file="$PKI/front-proxy-client.key" \
        --authorization-mode=Node,RBAC \
        --enable-admission-plugins=NodeRestriction \
        --kubelet-client-certificate="$PKI/apiserver-kubelet-client.crt" \
        --kubelet-client-key="$PKI/apiserver-kubelet-client.key" \
        --kubelet-certificate-authority="$PKI/ca.crt" \
        --kubelet-preferred-address-types=InternalIP,ExternalIP,Hostname \
        --service-account-issuer=https://kubernetes.default.svc.cluster.local \
        --service-account-key-file="$PKI/sa.pub" \
        --service-account-signing-key-file="$PKI/sa.key" \
        --service-cluster-ip-range=10.96.0.0/16 \
        --endpoint-reconciler-type=none \
        --allow-privileged=true \
        --profiling=false \
        "${extra[@]}"
    # (--endpoint-reconciler-type=none: the apiserver's loopback address may not
    # stand in the kubernetes Service's endpoints; nothing here needs them.)
    wait_for kube-apiserver "kube-apiserver ready on $APISERVER" apiserver_ready
}

start_controllers() {
    local cm_extra=()
    read -r -a cm_extra <<<"${CONTROLLER_MANAGER_EXTRA_FLAGS:-}"
    if [[ -n $BOOTSTRAP_TOKEN ]]; then
        cm_extra+=("--controllers=*,bootstrapsigner,tokencleaner")
    fi
    if [[ -n $SIGNING_DURATION ]]; then
        cm_extra+=("--cluster-signing-duration=$SIGNING_DURATION")
    fi
    launch kube-scheduler \
        --kubeconfig="$DIR/kube-scheduler.kubeconfig" \
        --authentication-kubeconfig="$DIR/kube-scheduler.kubeconfig" \
        --authorization-kubeconfig="$DIR/kube-scheduler.kubeconfig" \
        --bind-address=127.0.0.1 --secure-port="$SCHEDULER_PORT" --cert-dir="$DIR/run/kube-scheduler" \
        --leader-elect=false
    launch kube-controller-manager \
        --kubeconfig="$DIR/kube-controller-manager.kubeconfig" \
        --authentication-kubeconfig="$DIR/kube-controller-manager.kubeconfig" \
        --authorization-kubeconfig="$DIR/kube-controller-manager.kubeconfig" \
        --bind-address=127.0.0.1 --secure-port="$CONTROLLER_MANAGER_PORT" --cert-dir="$DIR/run/kube-controller-manager" \
        --leader-elect=false \
        --use-service-account-credentials=true \
        --service-account-private-key-file="$PKI/sa.key" \
        --root-ca-file="$PKI/ca.crt" \
        --cluster-signing-cert-file="$PKI/ca.crt" --cluster-signing-key-file="$PKI/ca.key" \
        "${cm_extra[@]}"
    wait_for kube-scheduler "kube-scheduler healthy on 127.0.0.1:$SCHEDULER_PORT" healthz "$SCHEDULER_PORT"
    wait_for kube-controller-manager "kube-controller-manager healthy on 127.0.0.1:$CONTROLLER_MANAGER_PORT" \
        healthz "$CONTROLLER_MANAGER_PORT"
    wait_for kube-controller-manager "default ServiceAccount and kube-root-ca.crt ConfigMap" controllers_working
}

# The bootstrap token's Secret, kubeadm's bindings for TLS bootstrap, and
# bootstrap.kubeconfig.
setup_bootstrap() {
    local id=${BOOTSTRAP_TOKEN%%.*} secret=${BOOTSTRAP_TOKEN#*.} group=system:bootstrappers:kubeadm:default-node-token
    "$KUBECTL" --kubeconfig="$DIR/admin.kubeconfig" apply -f - >/dev/null <<EOF
apiVersion: v1
kind: Secret
metadata:
  name: bootstrap-token-$id
  namespace: kube-system
type: bootstrap.kubernetes.io/token
stringData:
  token-id: "$id"
  token-secret: "$secret"
  usage-bootstrap-authentication: "true"
  usage-bootstrap-signing: "true"
  auth-extra-groups: $group
---
apiVersion: rbac.authorization.k8s.io/v1
kind: ClusterRoleBinding
metadata:
  name: kubeadm:kubelet-bootstrap
roleRef: {apiGroup: rbac.authorization.k8s.io, kind: ClusterRole, name: system:node-bootstrapper}
subjects: [{apiGroup: rbac.authorization.k8s.io, kind: Group, name: $group}]
---
apiVersion: rbac.authorization.k8s.io/v1
kind: ClusterRoleBinding
metadata:
  name: kubeadm:node-autoapprove-bootstrap
roleRef: {apiGroup: rbac.authorization.k8s.io, kind: ClusterRole, name: "system:certificates.k8s.io:certificatesigningrequests:nodeclient"}
subjects: [{apiGroup: rbac.authorization.k8s.io, kind: Group, name: $group}]
---
apiVersion: rbac.authorization.k8s.io/v1
kind: ClusterRoleBinding
metadata:
  name: kubeadm:node-autoapprove-certificate-rotation
roleRef: {apiGroup: rbac.authorization.k8s.io, kind: ClusterRole, name: "system:certificates.k8s.io:certificatesigningrequests:selfnodeclient"}
subjects: [{apiGroup: rbac.authorization.k8s.io, kind: Group, name: system:nodes}]
EOF
    local tmp=$DIR/bootstrap.kubeconfig.tmp
    rm -f -- "$tmp"
    "$KUBECTL" config --kubeconfig="$tmp" set-cluster "$CLUSTER" --server="$APISERVER" \
        --certificate-authority="$PKI/ca.crt" --embed-certs=true >/dev/null &&
        "$KUBECTL" config --kubeconfig="$tmp" set-credentials tls-bootstrap-token-user \
            --token="$BOOTSTRAP_TOKEN" >/dev/null &&
        "$KUBECTL" config --kubeconfig="$tmp" set-context "tls-bootstrap-token-user@$CLUSTER" \
            --cluster="$CLUSTER" --user=tls-bootstrap-token-user >/dev/null &&
        "$KUBECTL" config --kubeconfig="$tmp" use-context "tls-bootstrap-token-user@$CLUSTER" >/dev/null ||
        die "writing bootstrap.kubeconfig failed"
    mv -f -- "$tmp" "$DIR/bootstrap.kubeconfig"
}

check_prerequisites() {
    local missing=() c
    for c in openssl ss setsid flock timeout awk; do
        command -v "$c" >/dev/null || missing+=("$c")
    done
    [[ ${#missing[@]} -eq 0 ]] ||
        die "missing commands: ${missing[*]} (scripts/install-deps.sh installs openssl, iproute2 and util-linux)"
}

cmd_start() {
    local n t0 name
    check_prerequisites
    for n in "${NODES[@]}"; do
        [[ $n =~ ^[a-z0-9]([-a-z0-9.]*[a-z0-9])?$ && ${#n} -le 63 ]] ||
            die "--node $n: not a valid node name (lowercase RFC 1123, at most 63 characters)"
    done
    mkdir -p "$DIR"
    DIR=$(cd "$DIR" && pwd -P)
    for name in "${COMPONENTS[@]}"; do
        [[ -z $(pid_of "$DIR" "$name") ]] || die "$name of $DIR is already running; run: $0 stop $DIR"
    done
    if [[ -n ${PICOLET_K8S_BIN:-} ]]; then
        BIN=$PICOLET_K8S_BIN
    else
        BIN=$("$SCRIPT_DIR/k8s-build.sh" | tail -n 1) || die "scripts/k8s-build.sh failed"
    fi
    for name in "${COMPONENTS[@]}" kubectl; do
        [[ -x $BIN/$name ]] || die "$BIN/$name is missing (run scripts/k8s-build.sh)"
    done
    KUBECTL=$BIN/kubectl
    t0=$(now)
    PKI=$DIR/pki
    # Only what an earlier start made here.
    rm -rf -- "$PKI" "$DIR/etcd" "$DIR/run" "$DIR/logs" "$DIR"/*.kubeconfig "$DIR/cluster.env"
    mkdir -p "$DIR/run" "$DIR/logs"
    make_pki
    local ports=()
    mapfile -t ports < <(free_ports 5)
    ((${#ports[@]} == 5)) || die "could not pick 5 free loopback ports (see the error above)"
    ETCD_PORT=${ports[0]} ETCD_PEER_PORT=${ports[1]} APISERVER_PORT=${ports[2]}
    SCHEDULER_PORT=${ports[3]} CONTROLLER_MANAGER_PORT=${ports[4]}
    APISERVER=https://127.0.0.1:$APISERVER_PORT
    make_kubeconfigs
    log "certificates and kubeconfigs in $(since "$t0") s"
    # A start that fails half-way must not leave anything running.
    START_OK=0
    trap 'if [[ $START_OK != 1 ]]; then log "start failed: stopping what it started"; cmd_stop || true; fi' EXIT
    start_etcd
    start_apiserver
    if [[ -n $BOOTSTRAP_TOKEN ]]; then
        setup_bootstrap
    fi
    if $CONTROLLERS; then
        start_controllers
    fi
    {
        printf 'BIN=%s\nKUBECTL=%s\nAPISERVER=%s\nETCD=%s\n' "$BIN" "$KUBECTL" "$APISERVER" "http://127.0.0.1:$ETCD_PORT"
        printf 'NODES=%s\nCONTROLLERS=%s\n' "$(IFS=,; printf '%s' "${NODES[*]}")" "$($CONTROLLERS && echo 1 || echo 0)"
    } >"$DIR/cluster.env.tmp"
    mv -f -- "$DIR/cluster.env.tmp" "$DIR/cluster.env"
    START_OK=1
    log "control plane up in $(since "$t0") s: $APISERVER ($("$KUBECTL" --kubeconfig="$DIR/admin.kubeconfig" version -o json 2>/dev/null | awk -F'"' '/gitVersion/ { v = $4 } END { print "server " v }'))"
    printf '%s\n' "$DIR"
}

[[ $# -ge 2 ]] || usage
cmd=$1 DIR=$2
shift 2
NODES=()
CONTROLLERS=false
BOOTSTRAP_TOKEN=
SIGNING_DURATION=
case $cmd in
    start)
        while [[ $# -gt 0 ]]; do
            case $1 in
                --node) [[ $# -ge 2 ]] || usage; NODES+=("$2"); shift 2 ;;
                --controllers) CONTROLLERS=true; shift ;;
                --bootstrap-token)
                    [[ $# -ge 2 && $2 =~ ^[a-z0-9]{6}\.[a-z0-9]{16}$ ]] ||
                        die "--bootstrap-token: expected ID.SECRET ([a-z0-9]{6}.[a-z0-9]{16}), got ${2:-nothing}"
                    BOOTSTRAP_TOKEN=$2; shift 2 ;;
                --signing-duration) [[ $# -ge 2 ]] || usage; SIGNING_DURATION=$2; shift 2 ;;
                *) usage ;;
            esac
        done
        cmd_start
        ;;
    stop)
        [[ $# -eq 0 ]] || usage
        cmd_stop
        ;;
    *) usage ;;
esac
