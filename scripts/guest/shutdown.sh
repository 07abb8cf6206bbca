# scripts/guest.sh shutdown: graceful node shutdown in a booted guest joined to a real
# control plane. Sourced by scripts/guest.sh (its boot, gx, check, fail, wait_off and the
# run's directory and share); not run on its own.
#
# One disk, three boots:
#   boot 1  the guest's network (user-mode, restrict=on, a single forward to the host's
#           loopback apiserver) and nothing else reachable; picolet joined with
#           shutdownGracePeriod 30s / shutdownGracePeriodCriticalPods 10s: logind's drop-in,
#           the delay lock; logind restarted: the lock taken again; a signal from anyone but
#           logind ignored; a shutdown logind starts and then abandons (true, then false):
#           NotReady, then Ready and pods admitted again; then three pods (a preStop hook, a
#           SIGTERM handler that needs 5 s, a system-node-critical static pod) and
#           `systemctl reboot`, the apiserver polled from the host while the guest goes down
#   boot 2  the files the pods wrote as they stopped: the order and the shares; the static
#           pod runs again, the node is Ready; a new API pod, checkpointed; a power cut
#   boot 3  no forward at all (the apiserver unreachable): the API pod comes back from the
#           checkpoint
# shellcheck shell=bash
# shellcheck disable=SC2034 # (NIC, PASSED: read by scripts/guest.sh, which sources this file)

NODE=picolet-guest
GRACE=30 CRITICAL=10
REGULAR=$((GRACE - CRITICAL))
MSG_POD="Pod was terminated in response to imminent node shutdown."
MSG_NODE="node is shutting down"
T_ALL=$(now)
[[ $ARCH == amd64 ]] || log "note: the shutdown scenario's shares are sized for the amd64 guest"
log "$ARCH guest, graceful shutdown (shutdownGracePeriod ${GRACE}s, critical pods ${CRITICAL}s), image $IMAGE, picolet $PICOLET; run directory $RUN"

# ---------------------------------------------------------------- the control plane

command -v jq >/dev/null || die "jq is missing (scripts/install-deps.sh installs it)"
[[ -x /usr/bin/python3 ]] || die "/usr/bin/python3 is missing (the guest's forward runs on it)"
CP=$RUN/control-plane
CLEANUPS+=("\"$ROOT/scripts/control-plane.sh\" stop \"$CP\" >/dev/null 2>&1")
t0=$(now)
"$ROOT/scripts/control-plane.sh" start "$CP" --node "$NODE" >"$RUN/control-plane.log" 2>&1 || {
    tail -n 20 "$RUN/control-plane.log" >&2
    fail "the control plane did not start (scripts/control-plane.sh start $CP; log $RUN/control-plane.log)"
}
# shellcheck disable=SC1091
. "$CP/cluster.env"
K=("$KUBECTL" --kubeconfig "$CP/admin.kubeconfig" --request-timeout=10s)
API_PORT=${APISERVER##*:}
log "control plane up in $(since "$t0") s: $APISERVER"
# No controller manager runs: the namespaces' default service accounts are made here.
for ns in default kube-system; do
    "${K[@]}" -n "$ns" create serviceaccount default >/dev/null 2>&1 ||
        "${K[@]}" -n "$ns" get serviceaccount default >/dev/null || fail "creating the service account default in $ns"
done
# The guest reaches the apiserver as https://kubernetes:6443 (a name on its certificate):
# kubernetes is 10.0.2.100 in the guest's /etc/hosts, and qemu forwards each connection to
# 10.0.2.100:6443 to the apiserver on the host's loopback (scripts/guest/fwd.py).
sed -E "s#server: https://127\.0\.0\.1:[0-9]+#server: https://kubernetes:6443#" \
    "$CP/node-$NODE.kubeconfig" >"$SHARE/kubelet.conf"
grep -q 'server: https://kubernetes:6443$' "$SHARE/kubelet.conf" || fail "the node's kubeconfig names no server to rewrite"
install -m 0644 "$GUEST_DIR/fwd.py" "$RUN/fwd.py"
NIC_JOINED=(-nic "user,model=virtio-net-pci,restrict=on,guestfwd=tcp:10.0.2.100:6443-cmd:/usr/bin/python3 $RUN/fwd.py $API_PORT")
NIC_OFFLINE=(-nic "user,model=virtio-net-pci,restrict=on")
NIC=("${NIC_JOINED[@]}")

cat >"$SHARE/picolet.yaml" <<EOF
apiVersion: kubelet.config.k8s.io/v1beta1
kind: KubeletConfiguration
shutdownGracePeriod: ${GRACE}s
shutdownGracePeriodCriticalPods: ${CRITICAL}s
EOF
# The guest's address, at every boot, on the one virtio network device.
cat >"$SHARE/guest-net" <<'EOF'
#!/bin/bash
# (udev renames the device while this runs, eth0 to ens3: retried until it holds)
udevadm settle --timeout=30 || true
for _ in $(seq 300); do
    dev=
    for d in /sys/class/net/*; do [[ -e $d/device ]] && dev=${d##*/}; done
    if [[ -n $dev ]] && ip link set "$dev" up 2>/dev/null && ip addr replace 10.0.2.15/24 dev "$dev" 2>/dev/null; then
        echo "guest-net: 10.0.2.15/24 on $dev"
        exit 0
    fi
    sleep 0.1
done
echo "guest-net: no network device to configure (${dev:-none found})"
exit 1
EOF
cat >"$SHARE/guest-net.service" <<'EOF'
[Unit]
Description=the guest's address on its user-mode network
Before=network-online.target picolet.service
Wants=network-online.target

[Service]
Type=oneshot
RemainAfterExit=yes
ExecStart=/usr/local/sbin/guest-net

[Install]
WantedBy=multi-user.target
EOF

# The pods write "EPOCH UPTIME" stamps on the guest's disk (/var/lib/gs) as they stop.
STAMP='stamp() { echo "$(date +%s) $(cut -d" " -f1 /proc/uptime)" >"/gs/$1"; sync; }'
pod() { # pod NAME NAMESPACE SPEC_EXTRA CONTAINER_EXTRA SCRIPT
    cat <<EOF
apiVersion: v1
kind: Pod
metadata:
  name: $1
  namespace: $2
spec:
  hostNetwork: true
  automountServiceAccountToken: false
  terminationGracePeriodSeconds: 60
  tolerations: [{operator: Exists}]
$3  volumes:
  - name: gs
    hostPath: {path: /var/lib/gs, type: DirectoryOrCreate}
  containers:
  - name: main
    image: picolet.local/busybox:1
    imagePullPolicy: Never
    volumeMounts: [{name: gs, mountPath: /gs}]
$4    command:
    - sh
    - -c
    - |
      $STAMP
      $5
      while :; do sleep 1 & wait; done
EOF
}
# A static pod of the highest class: stopped last.
pod critical kube-system "  priorityClassName: system-node-critical
" "" "trap 'stamp critical.term; exit 0' TERM" | sed '/automountServiceAccountToken/d' >"$SHARE/critical.yaml"
# API pods: one whose preStop hook writes a file, one that needs 5 s after SIGTERM.
pod prestop default "  nodeName: $NODE
" "    lifecycle:
      preStop:
        exec:
          command: [sh, -c, '$STAMP; stamp prestop.hook']
" "trap 'stamp prestop.term; exit 0' TERM" >"$RUN/prestop.yaml"
pod sigterm default "  nodeName: $NODE
" "" "trap 'stamp sigterm.term; sleep 5; stamp sigterm.done; exit 0' TERM" >"$RUN/sigterm.yaml"
pod survivor default "  nodeName: $NODE
" "" "trap 'exit 0' TERM" >"$RUN/survivor.yaml"
"$PICOLET" validate "$SHARE/critical.yaml" >/dev/null || fail "the static pod's manifest does not validate"

# node_ready: the node's Ready condition in the apiserver, "STATUS REASON MESSAGE".
node_ready() {
    "${K[@]}" get node "$NODE" -o json 2>/dev/null |
        jq -r '.status.conditions[]? | select(.type == "Ready") | "\(.status) \(.reason) \(.message)"'
}
# wait_ready LIMIT_S: until the apiserver shows the node Ready.
wait_ready() {
    local end=$((SECONDS + $1)) r=
    while ((SECONDS < end)); do
        r=$(node_ready)
        [[ $r == True* ]] && return 0
        sleep 1
    done
    fail "the node is not Ready in the apiserver within $1 s (last: ${r:-no node})"
}

# ---------------------------------------------------------------- boot 1: joined

boot
check "the guest runs systemd with containerd" 60 'wait_active containerd 120 && wait_active guest-images.service 60 && wait_active systemd-logind 60'
check "install picolet as the unit file installs it, joined, with a shutdown grace period" 90 '
    install -m 0755 /mnt/host/guest-net /usr/local/sbin/guest-net
    install -m 0644 /mnt/host/guest-net.service /etc/systemd/system/guest-net.service
    grep -q " kubernetes$" /etc/hosts || echo "10.0.2.100 kubernetes" >>/etc/hosts
    install -m 0755 /mnt/host/picolet /usr/bin/picolet
    install -m 0644 /mnt/host/picolet.service /etc/systemd/system/picolet.service
    mkdir -p /etc/kubernetes/manifests /var/lib/gs
    install -m 0600 /mnt/host/kubelet.conf /etc/kubernetes/kubelet.conf
    install -m 0644 /mnt/host/picolet.yaml /etc/kubernetes/picolet.yaml
    printf "PICOLET_ARGS=\"--cgroup-driver=systemd --kubeconfig=/etc/kubernetes/kubelet.conf --config=/etc/kubernetes/picolet.yaml\"\n" >/etc/default/picolet
    sync
    systemctl daemon-reload
    systemctl enable --now guest-net.service 2>&1 | grep -v "^Created symlink" || true
    systemctl is-active -q guest-net.service || { systemctl status --no-pager guest-net.service; exit 1; }
    ip -4 -o addr show scope global
    systemctl enable --now picolet.service 2>&1 | grep -v "^Created symlink" || true
    systemctl is-active picolet >/dev/null || { diag; exit 1; }
    picolet --version'
check "the guest reaches the apiserver through its forward, and nothing else" 60 "
    tcp() { timeout 5 bash -c \"exec 3<>/dev/tcp/\$1/\$2\" 2>/dev/null; }
    tcp kubernetes 6443 && echo 'ok kubernetes:6443 (10.0.2.100, the forward to the apiserver) connects' || { echo 'WRONG: kubernetes:6443 does not connect'; exit 1; }
    bad=0
    for t in 10.0.2.2:$API_PORT 10.0.2.2:22 1.1.1.1:443 10.0.2.3:53; do
        if tcp \${t%:*} \${t#*:}; then echo \"WRONG: \$t connects\"; bad=1; else echo \"ok \$t does not connect\"; fi
    done
    exit \$bad"
t0=$(now)
wait_ready 240
log "ok: the node is Ready in the apiserver ($(since "$t0") s after picolet started): $(node_ready)"
check "logind's delay raised by picolet's drop-in, and picolet holds the delay lock" 90 '
    for i in $(seq 120); do systemd-inhibit --list --no-pager 2>/dev/null | grep -q "^ *picolet .*shutdown.*delay" && break; sleep 0.5; done
    systemd-inhibit --list --no-pager | grep -E "WHO|picolet"
    systemd-inhibit --list --no-pager | grep -q "^ *picolet .*shutdown.*delay" || { echo "NO delay lock of picolet"; diag; exit 1; }
    cat /etc/systemd/logind.conf.d/99-picolet.conf
    grep -qx "InhibitDelayMaxSec='"$GRACE"'" /etc/systemd/logind.conf.d/99-picolet.conf || { echo "WRONG drop-in"; exit 1; }
    d=$(busctl get-property org.freedesktop.login1 /org/freedesktop/login1 org.freedesktop.login1.Manager InhibitDelayMaxUSec)
    echo "logind InhibitDelayMaxUSec: $d"
    [[ $d == "t '"$((GRACE * 1000000))"'" ]] || { echo "WRONG: logind did not take the drop-in"; exit 1; }'

# logind restarted: a new logind knows no lock; picolet takes a new one.
check "logind restarted: picolet takes the lock again" 90 '
    old=$(systemctl show -p MainPID --value systemd-logind)
    systemctl restart systemd-logind
    new=$(systemctl show -p MainPID --value systemd-logind)
    [[ $new != "$old" && $new != 0 ]] || { echo "logind was not restarted ($old -> $new)"; exit 1; }
    t0=$(cut -d" " -f1 /proc/uptime)
    for i in $(seq 120); do systemd-inhibit --list --no-pager 2>/dev/null | grep -q "^ *picolet .*shutdown.*delay" && break; sleep 0.5; done
    systemd-inhibit --list --no-pager | grep -q "^ *picolet .*shutdown.*delay" || { echo "NO delay lock of picolet after the restart"; systemd-inhibit --list --no-pager; diag; exit 1; }
    echo "logind pid $old -> $new; the new logind lists picolet'"'"'s delay lock $(awk -v a="$t0" -v b="$(cut -d" " -f1 /proc/uptime)" "BEGIN { printf \"%.1f\", b - a }") s after the restart"
    journalctl -b -u picolet --no-pager -q | grep "logind restarted"'

# A PrepareForShutdown from a process other than logind is not logind's word: ignored.
check "a PrepareForShutdown(true) sent by another process than logind is ignored" 60 '
    busctl emit /org/freedesktop/login1 org.freedesktop.login1.Manager PrepareForShutdown b true || exit 1
    sleep 5
    if journalctl -b -u picolet --no-pager -q | grep -q "the node shuts down"; then
        echo "WRONG: picolet acted on a signal that did not come from logind"; exit 1
    fi
    echo "busctl emit ... PrepareForShutdown b true: no shutdown started (the signal'"'"'s sender is not org.freedesktop.login1)"'
r=$(node_ready)
[[ $r == True* ]] || fail "the node is not Ready after a foreign PrepareForShutdown: $r"

# A shutdown logind starts and abandons. A signal from another process is ignored (above),
# so the test makes logind itself send both: with reboot.target refusing to be started by
# request (RefuseManualStart=yes, a runtime drop-in), `systemctl reboot` is accepted by logind
# (the target is loaded), which sends PrepareForShutdown(true), waits for picolet's delay lock,
# then fails to start the target and sends PrepareForShutdown(false) ("Tell people that they
# now may take a lock again"). (A masked target would not do: logind refuses a masked target
# before it sends anything.) The host watches the node meanwhile.
"${K[@]}" get node "$NODE" --watch --output-watch-events -o json --request-timeout=0 >"$RUN/cancel-watch.json" 2>"$RUN/cancel-watch.err" &
WATCH_PID=$!
CLEANUPS+=("kill $WATCH_PID 2>/dev/null")
sleep 2
check "a cancelled shutdown: logind's PrepareForShutdown(true), then (false)" 120 '
    mkdir -p /run/systemd/system/reboot.target.d
    printf "[Unit]\nRefuseManualStart=yes\n" >/run/systemd/system/reboot.target.d/50-refuse.conf
    systemctl daemon-reload
    systemctl reboot 2>&1 || true
    for i in $(seq 180); do journalctl -b -u picolet --no-pager -q | grep -q "the shutdown was cancelled" && break; sleep 0.5; done
    rm -rf /run/systemd/system/reboot.target.d
    systemctl daemon-reload
    journalctl -b -u picolet --no-pager -q -o short-monotonic | grep -E "the node shuts down|released the lock|was cancelled"
    journalctl -b -u systemd-logind --no-pager -q | tail -n 4
    journalctl -b -u picolet --no-pager -q | grep -q "the shutdown was cancelled" || { echo "NO PrepareForShutdown(false) reached picolet"; diag; exit 1; }
    for i in $(seq 60); do systemd-inhibit --list --no-pager 2>/dev/null | grep -q "^ *picolet .*shutdown.*delay" && break; sleep 0.5; done
    systemd-inhibit --list --no-pager | grep -q "^ *picolet .*shutdown.*delay" || { echo "NO delay lock after the cancel"; exit 1; }
    echo "the delay lock is held again"'
end=$((SECONDS + 60))
seq_ok=
while ((SECONDS < end)); do
    seq_ready=$(jq -r 'select(.object.status.conditions != null) | .object.status.conditions[] | select(.type == "Ready") | "\(.status)|\(.message)"' "$RUN/cancel-watch.json" 2>/dev/null | uniq)
    if awk -F'|' -v m="$MSG_NODE" '$1 == "False" && $2 == m { f = 1 } f && $1 == "True" { ok = 1 } END { exit !ok }' <<<"$seq_ready"; then
        seq_ok=1
        break
    fi
    sleep 1
done
kill "$WATCH_PID" 2>/dev/null || true
wait "$WATCH_PID" 2>/dev/null || true
[[ -n $seq_ok ]] || fail "the apiserver did not show the node NotReady (\"$MSG_NODE\") and then Ready again; Ready conditions seen: $(tr '\n' ';' <<<"$seq_ready")"
log "ok: the apiserver showed the node's Ready condition: $(tr '\n' ';' <<<"$seq_ready" | sed 's/;$//; s/;/ -> /g')"

# The pods, admitted after the cancel: a static pod and two API pods.
"${K[@]}" apply -f "$RUN/prestop.yaml" -f "$RUN/sigterm.yaml" >/dev/null || fail "creating the API pods"
check "after the cancel the node admits pods: the static and the API pods run" 240 '
    cp /mnt/host/critical.yaml /etc/kubernetes/manifests/
    wait_running 200 critical prestop sigterm && no_duplicates'
end=$((SECONDS + 60))
until [[ $("${K[@]}" get pods -n default -o json | jq -r '[.items[] | select(.status.phase == "Running")] | length') == 2 ]]; do
    ((SECONDS < end)) || fail "the API pods are not Running in the apiserver: $("${K[@]}" get pods -A -o wide 2>&1)"
    sleep 1
done
"${K[@]}" get -n kube-system pod "critical-$NODE" >/dev/null 2>&1 || log "note: no mirror pod of the static pod in the apiserver yet"

# ---------------------------------------------------------------- the reboot

# The host polls the apiserver while the guest goes down: one line per answer, with the time
# the answer was complete.
POLLS=$RUN/shutdown-polls.jsonl
: >"$POLLS"
(
    while :; do
        n=$("${K[@]}" get --raw "/api/v1/nodes/$NODE" 2>/dev/null) &&
            p=$("${K[@]}" get --raw "/api/v1/pods?fieldSelector=spec.nodeName%3D$NODE" 2>/dev/null) &&
            printf '{"t":%s,"node":%s,"pods":%s}\n' "$(date +%s.%N)" "$n" "$p" >>"$POLLS"
        sleep 0.3
    done
) &
POLL_PID=$!
CLEANUPS+=("kill $POLL_PID 2>/dev/null")
sleep 1
t_ask=$(now)
check "ask for a reboot" 30 'rm -f /var/lib/gs/*; sync; setsid sh -c "sleep 1; systemctl reboot" </dev/null >/dev/null 2>&1 &'
wait_off $((GRACE + 120))
t_off=$(now)
sleep 1
kill "$POLL_PID" 2>/dev/null || true
wait "$POLL_PID" 2>/dev/null || true
log "the host read the apiserver $(wc -l <"$POLLS") times while the guest went down ($(awk -v a="$t_ask" -v b="$t_off" 'BEGIN { printf "%.1f", b - a }') s)"
# The first answer with the node NotReady for the shutdown, and the first with both API pods'
# final statuses, each before qemu ended.
first_notready=$(jq -r --arg m "$MSG_NODE" 'select(.node.status.conditions[] | select(.type == "Ready") | .status == "False" and .reason == "KubeletNotReady" and .message == $m) | .t' "$POLLS" | head -n 1)
final_q='[.pods.items[] | select(.metadata.namespace == "default" and (.metadata.name == "prestop" or .metadata.name == "sigterm"))
    | select(.status.phase == "Failed" and .status.reason == "Terminated" and .status.message == $m
             and any(.status.conditions[]?; .type == "DisruptionTarget" and .status == "True"))] | length == 2'
first_final=$(jq -r --arg m "$MSG_POD" "select($final_q) | .t" "$POLLS" | head -n 1)
rel() { awk -v a="$t_ask" -v b="$1" 'BEGIN { printf "%.1f", b - a }'; }
[[ -n $first_notready ]] || fail "the apiserver never showed the node NotReady (KubeletNotReady, \"$MSG_NODE\") while the guest went down (polls: $POLLS)"
[[ -n $first_final ]] || fail "the apiserver never showed both API pods' final statuses while the guest went down; last seen: $(tail -n 1 "$POLLS" | jq -c '[.pods.items[] | {n: .metadata.name, phase: .status.phase, reason: .status.reason, message: .status.message, c: [.status.conditions[]? | .type]}]')"
awk -v a="$first_notready" -v b="$first_final" -v o="$t_off" 'BEGIN { exit !(a < o && b < o) }' ||
    fail "the statuses reached the apiserver only after the guest was down"
log "ok: the apiserver showed the node NotReady (KubeletNotReady, \"$MSG_NODE\") $(rel "$first_notready") s after the reboot was asked, and both API pods Failed/Terminated with \"$MSG_POD\" and a DisruptionTarget condition $(rel "$first_final") s after; qemu ended $(rel "$t_off") s after"
jq -c 'select(.t == '"$first_final"') | .pods.items[] | select(.metadata.namespace == "default") |
    {pod: .metadata.name, phase: .status.phase, reason: .status.reason, disruption: [.status.conditions[]? | select(.type == "DisruptionTarget") | .reason]}' "$POLLS" | sed 's/^/    /' >&2

# ---------------------------------------------------------------- boot 2: after the reboot

boot
check "the pods stopped in order, each within its share (the stamps they wrote as they stopped)" 60 '
    cd /var/lib/gs || exit 1
    for f in prestop.hook prestop.term sigterm.term sigterm.done critical.term; do
        [[ -s $f ]] || { echo "MISSING /var/lib/gs/$f"; ls -l; exit 1; }
    done
    st=/var/lib/kubelet/graceful_node_shutdown_state
    cat "$st"; echo
    start=$(date -d "$(jq -r .startTime "$st")" +%s) && stop=$(date -d "$(jq -r .endTime "$st")" +%s) || { echo "WRONG state file"; exit 1; }
    e() { cut -d" " -f1 "$1"; }
    u() { cut -d" " -f2 "$1"; }
    d() { awk -v a="$1" -v b="$2" "BEGIN { printf \"%.2f\", b - a }"; }
    t0=$(u prestop.hook)
    printf "%-14s %8s %14s\n" stamp "+s" "s from start"
    for f in prestop.hook prestop.term sigterm.term sigterm.done critical.term; do
        printf "%-14s %8s %14s\n" "$f" "$(d "$t0" "$(u $f)")" "$(( $(e $f) - start ))"
    done
    echo "shutdown: $(( stop - start )) s from start to end (state file)"
    bad=0
    ge() { awk -v a="$1" -v b="$2" "BEGIN { exit !(a >= b) }"; }
    ge "$(u prestop.term)" "$(u prestop.hook)" || { echo "WRONG: SIGTERM before the preStop hook"; bad=1; }
    ge "$(d "$(u sigterm.term)" "$(u sigterm.done)")" 5 || { echo "WRONG: the SIGTERM handler did not get its 5 s"; bad=1; }
    ge "$(u critical.term)" "$(u sigterm.done)" || { echo "WRONG: the critical pod stopped before the regular pods"; bad=1; }
    ge "$(u critical.term)" "$(u prestop.term)" || { echo "WRONG: the critical pod stopped before the regular pods"; bad=1; }
    # (stamps in whole seconds: 1 s of slack)
    (( $(e sigterm.done) - start <= '"$REGULAR"' + 1 )) || { echo "WRONG: a regular pod ran past its share ('"$REGULAR"' s)"; bad=1; }
    (( $(e prestop.term) - start <= '"$REGULAR"' + 1 )) || { echo "WRONG: a regular pod ran past its share ('"$REGULAR"' s)"; bad=1; }
    (( $(e critical.term) - start <= '"$GRACE"' + 1 )) || { echo "WRONG: the critical pod stopped after the grace period"; bad=1; }
    (( stop - start <= '"$GRACE"' + 1 )) || { echo "WRONG: the shutdown took longer than the grace period"; bad=1; }
    exit $bad'
check "after the reboot the static pod runs again, the API pods the shutdown stopped do not" 240 '
    wait_running 200 critical && no_duplicates || exit 1
    sleep 5
    list=$(running_sets)
    grep -q "^container critical " <<<"$list" || { echo "the runtime'"'"'s containers could not be listed"; exit 1; }
    again=$(awk "\$2 == \"prestop\" || \$2 == \"sigterm\"" <<<"$list")
    [[ -z $again ]] || { echo "RUN AGAIN after the reboot:"; echo "$again"; exit 1; }'
t0=$(now)
wait_ready 240
log "ok: the node is Ready again in the apiserver ($(since "$t0") s after the static pod ran): $(node_ready)"
phases=$("${K[@]}" get pods -n default -o json | jq -r '[.items[] | "\(.metadata.name)=\(.status.phase)"] | join(" ")')
[[ $phases == "prestop=Failed sigterm=Failed" ]] || fail "the API pods stopped by the shutdown are not Failed after the reboot: $phases"
log "ok: after the reboot the API pods stopped by the shutdown stay as the apiserver says: $phases"

# ---------------------------------------------------------------- boot 3: offline

"${K[@]}" apply -f "$RUN/survivor.yaml" >/dev/null || fail "creating the API pod survivor"
check "an API pod runs and is checkpointed" 240 '
    wait_running 200 survivor || exit 1
    for i in $(seq 60); do grep -q "\"survivor\"" /var/lib/kubelet/checkpoints/pods.json 2>/dev/null && break; sleep 1; done
    grep -q "\"survivor\"" /var/lib/kubelet/checkpoints/pods.json || { echo "survivor is not in checkpoints/pods.json"; exit 1; }
    sync
    echo "checkpoints/pods.json: $(jq -c "[.. | objects | select(.metadata? and .spec?) | .metadata.name]" /var/lib/kubelet/checkpoints/pods.json 2>/dev/null)"'
log "power cut: SIGKILL of qemu; the next boot has no forward (the apiserver unreachable)"
power_cut
NIC=("${NIC_OFFLINE[@]}")
boot
check "offline: the apiserver is unreachable from the guest" 60 '
    if timeout 5 bash -c "exec 3<>/dev/tcp/10.0.2.100/6443" 2>/dev/null; then echo "WRONG: 10.0.2.100:6443 connects"; exit 1; fi
    echo "ok kubernetes:6443 does not connect"'
check "offline: the API pod comes back from the checkpoint, the static pod runs, the pods that ended do not" 300 '
    wait_running 240 survivor critical && no_duplicates || exit 1
    sleep 5
    list=$(running_sets)
    grep -q "^container critical " <<<"$list" || { echo "the runtime'"'"'s containers could not be listed"; exit 1; }
    again=$(awk "\$2 == \"prestop\" || \$2 == \"sigterm\"" <<<"$list")
    [[ -z $again ]] || { echo "RUN AGAIN from the checkpoint:"; echo "$again"; exit 1; }'
log "boot $BOOT (offline): qemu started -> every pod running $(since "$BOOT_T0") s"
stop_qemu
PASSED=1
log "$ARCH: the graceful shutdown scenarios passed in $(since "$T_ALL") s ($BOOT boots)"
