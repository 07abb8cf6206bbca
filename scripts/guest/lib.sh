# The guest-side helpers of scripts/guest.sh's scenarios: sourced by the command files the
# harness drops into the share (/mnt/host/cmd), inside the guest. Ground truth comes from
# containerd itself (ctr -n k8s.io), the kernel and systemd, never from picolet.
# shellcheck shell=bash

CTR=(ctr -n k8s.io)

uptime_s() { cut -d' ' -f1 /proc/uptime; }

# wait_active UNIT LIMIT_S: until the unit is active (it may still be starting at boot).
wait_active() {
    local i
    for ((i = 0; i < $2 * 2; i++)); do
        systemctl is-active -q "$1" && return 0
        sleep 0.5
    done
    echo "$1 is not active after $2 s"
    systemctl status --no-pager -n 20 "$1"
    return 1
}

# containers: one line per container containerd holds in k8s.io:
#   ID KIND POD CONTAINER STATUS PID
# KIND is sandbox or container, POD the pod's name without the node's suffix a static pod's
# name carries, STATUS the task's (RUNNING, STOPPED, ...; "-" without a task).
# A container's labels never change: what `ctr containers info` said of an ID is kept in
# /run/guest-containers (tmpfs: gone at the next boot), so a listing asks containerd twice
# (tasks, container IDs) plus once per container it has not seen, not once per container: under
# emulation each ctr call costs about a second, and 100 of them outlast a wait.
containers() {
    local -A status=() pid=()
    local id p st rest meta kind pod name
    mkdir -p /run/guest-containers
    while read -r id p st rest; do
        [[ $id == TASK ]] && continue
        status[$id]=$st pid[$id]=$p
    done < <(timeout 20 "${CTR[@]}" tasks ls 2>/dev/null || echo "containers: ctr tasks ls failed or took over 20 s" >&2)
    for id in $(timeout 20 "${CTR[@]}" containers ls -q 2>/dev/null || echo "containers: ctr containers ls failed or took over 20 s" >&2); do
        meta=/run/guest-containers/$id
        if [[ ! -s $meta ]]; then
            timeout 20 "${CTR[@]}" containers info "$id" 2>/dev/null | jq -r --arg node "-$(hostname)" \
                '.Labels as $l | [
                  (if $l["io.cri-containerd.kind"] == "sandbox" then "sandbox" else "container" end),
                  ($l["io.kubernetes.pod.name"] // "-" | rtrimstr($node)),
                  ($l["io.kubernetes.container.name"] // "-")] | join(" ")' >"$meta.tmp" 2>/dev/null &&
                [[ -s $meta.tmp ]] && mv -f "$meta.tmp" "$meta"
            rm -f "$meta.tmp"
        fi
        [[ -s $meta ]] || continue
        read -r kind pod name <"$meta"
        printf '%s %s %s %s %s %s\n' "$id" "$kind" "$pod" "$name" "${status[$id]:--}" "${pid[$id]:--}"
    done
}

# running_sets: the running sandboxes and containers as "KIND POD CONTAINER ID PID", sorted.
running_sets() {
    containers | awk '$5 == "RUNNING" { print $2, $3, $4, $1, $6 }' | sort
}

# wait_running DEADLINE_S POD...: until every POD has a running sandbox and a running
# container, each exactly one; prints the uptime at which that held. Pods named NAME:sandbox
# need only their sandbox (a container that crashes on purpose).
wait_running() {
    local deadline=$1 p name want ok list
    shift
    local end=$(( $(cut -d. -f1 /proc/uptime) + deadline ))
    while :; do
        list=$(running_sets)
        ok=1
        for p in "$@"; do
            name=${p%%:*}
            want=container
            [[ $p == *:sandbox ]] && want=sandbox
            [[ $(awk -v n="$name" '$1 == "sandbox" && $2 == n' <<<"$list" | wc -l) == 1 ]] || ok=0
            if [[ $want == container ]]; then
                [[ $(awk -v n="$name" '$1 == "container" && $2 == n' <<<"$list" | wc -l) -ge 1 ]] || ok=0
            fi
        done
        if [[ $ok == 1 ]]; then
            echo "running at uptime $(uptime_s) s"
            return 0
        fi
        if (( $(cut -d. -f1 /proc/uptime) >= end )); then
            echo "NOT all running within ${deadline} s: $*"
            echo "--- running sandboxes and containers (kind pod container id pid):"
            printf '%s\n' "$list"
            echo "--- every container containerd holds (id kind pod container status pid):"
            containers
            diag
            return 1
        fi
        sleep 1
    done
}

# no_duplicates: at most one running sandbox per pod and one running container per pod and
# container name; prints the counts.
no_duplicates() {
    local list dups
    list=$(running_sets)
    dups=$(awk '{ k = $1 " " $2 " " $3; n[k]++ } END { for (k in n) if (n[k] > 1) print n[k] " x " k }' <<<"$list")
    printf 'running: %d sandboxes, %d containers\n' "$(grep -c '^sandbox ' <<<"$list")" "$(grep -c '^container ' <<<"$list")"
    if [[ -n $dups ]]; then
        echo "DUPLICATES (count kind pod container):"
        printf '%s\n' "$dups"
        printf '%s\n' "$list"
        return 1
    fi
}

# files_whole: every file picolet keeps under its root dir must be whole: JSON parses, a
# saved manifest passes `picolet validate`, a PEM file has its END line. The temporary files
# of interrupted writes (.NAME.tmp) are listed apart: picolet never reads them and replaces
# them at its next write of NAME. Prints what it checked.
files_whole() {
    local root=${1:-/var/lib/kubelet} f bad=0 n=0 names=()
    while IFS= read -r -d '' f; do
        case ${f##*/} in
            .*.tmp) echo "left by an interrupted write (not read): ${f#"$root"/}"; continue ;;
        esac
        n=$((n + 1))
        names+=("${f#"$root"/}")
        case $f in
            *.json)
                jq -e . "$f" >/dev/null 2>&1 || { echo "TORN (not JSON): $f ($(stat -c %s "$f") bytes)"; bad=1; } ;;
            */static-pods/*.yaml | */static-pods/*.yml)
                picolet validate "$f" >/dev/null 2>&1 || { echo "TORN (picolet validate fails): $f"; picolet validate "$f" 2>&1 | tail -n 3; bad=1; } ;;
            *.pem | *.crt | *.key)
                grep -q -- '-----END ' "$f" || { echo "TORN (no PEM END line): $f"; bad=1; } ;;
        esac
    done < <(find "$root" -xdev -path "$root/pods" -prune -o -type f -print0 2>/dev/null)
    echo "checked $n files under $root: ${names[*]}"
    return $bad
}

# diag: what a failure report needs from the guest.
diag() {
    echo "--- systemctl status picolet containerd"
    systemctl status --no-pager -n 0 picolet containerd 2>&1 | head -n 30
    echo "--- journalctl -u picolet (last 40)"
    journalctl -b -u picolet --no-pager -n 40 2>&1
    echo "--- journalctl -u containerd (last 15)"
    journalctl -b -u containerd --no-pager -n 15 2>&1
}

# api PATH: GET on picolet's local API (the healthz port); the body of a 200 answer. (bash's
# /dev/tcp: the static busybox's wget crashes in glibc's resolver.)
api() {
    local out
    out=$(timeout 20 bash -c 'exec 3<>/dev/tcp/127.0.0.1/10248 || exit 1
        printf "GET %s HTTP/1.0\r\nHost: localhost\r\n\r\n" "$1" >&3
        cat <&3' _ "$1") || return 1
    [[ $out == "HTTP/1."[01]" 200"* ]] || { echo "GET $1: ${out%%$'\r'*}" >&2; return 1; }
    printf '%s\n' "${out#*$'\r\n\r\n'}"
}

# expect_file FILE VALUE: the cgroup file holds VALUE.
expect_file() {
    local got
    got=$(cat "$1" 2>/dev/null) || { echo "MISSING $1"; return 1; }
    if [[ $got != "$2" ]]; then
        echo "WRONG $1: '$got', expected '$2'"
        return 1
    fi
    echo "ok $1 = $got"
}

# cgroup_of POD: the unified-hierarchy cgroup of the pod's running container (from the kernel).
cgroup_of() {
    local pid
    pid=$(running_sets | awk -v n="$1" '$1 == "container" && $2 == n { print $5; exit }')
    [[ -n $pid ]] || { echo "no running container of $1" >&2; return 1; }
    awk -F: '$1 == "0" { print $3 }' "/proc/$pid/cgroup"
}

# cgroup_v2: the kubepods tree under the systemd driver, and the limits of a Guaranteed pod
# (cpu 200m, memory 64Mi) in cpu.max and memory.max of its pod slice and container scope.
cgroup_v2() {
    local cg=/sys/fs/cgroup bad=0 s p
    for s in kubepods.slice kubepods.slice/kubepods-besteffort.slice kubepods.slice/kubepods-burstable.slice; do
        [[ -d $cg/$s ]] && echo "ok $cg/$s" || { echo "MISSING $cg/$s"; bad=1; }
    done
    p=$(cgroup_of limited) || return 1
    echo "limited (Guaranteed): $p"
    if [[ $p != /kubepods.slice/kubepods-pod*.slice/cri-containerd-*.scope ]]; then
        echo "WRONG: not kubepods.slice/kubepods-pod<uid>.slice/cri-containerd-<id>.scope"
        bad=1
    fi
    expect_file "$cg$p/cpu.max" "20000 100000" || bad=1
    expect_file "$cg$p/memory.max" 67108864 || bad=1
    expect_file "$cg${p%/*}/cpu.max" "20000 100000" || bad=1
    expect_file "$cg${p%/*}/memory.max" 67108864 || bad=1
    p=$(cgroup_of web) || return 1
    echo "web (BestEffort): $p"
    if [[ $p != /kubepods.slice/kubepods-besteffort.slice/kubepods-besteffort-pod*.slice/cri-containerd-*.scope ]]; then
        echo "WRONG: not under kubepods-besteffort.slice"
        bad=1
    fi
    expect_file "$cg$p/memory.max" max || bad=1
    return $bad
}

# oom_killed POD LIMIT_S: the pod's container is killed by the kernel for its memory limit
# within LIMIT_S seconds: picolet reports it terminated with exit code 137, and memory.events of
# the pod's slice counts the kill (oom_kill). The reason (OOMKilled) is the runtime's, which
# picolet passes on: containerd sets it from the shim's OOM event, which can come after the
# exit event; a reason other than OOMKilled is printed as a warning, not a failure.
oom_killed() {
    local pod=$1 deadline=$((SECONDS + $2)) st="" uid slice reason
    while ((SECONDS < deadline)); do
        st=$(api /pods | jq -c --arg p "$pod-$(hostname)" '.items[] | select(.metadata.name == $p) |
            {uid: .metadata.uid, t: .status.containerStatuses[0].state.terminated}' 2>/dev/null)
        [[ $(jq -r '.t.exitCode // empty' <<<"$st" 2>/dev/null) != "" ]] && break
        sleep 1
    done
    echo "picolet's status of $pod: $st"
    [[ $(jq -r '.t.exitCode // empty' <<<"$st" 2>/dev/null) != "" ]] || { echo "NOT terminated within $2 s"; return 1; }
    [[ $(jq -r '.t.exitCode' <<<"$st") == 137 ]] || { echo "WRONG exit code"; return 1; }
    uid=$(jq -r .uid <<<"$st")
    slice=$(find /sys/fs/cgroup/kubepods.slice -maxdepth 2 -type d -name "*pod${uid//-/_}.slice" | head -n 1)
    [[ -n $slice ]] || { echo "no pod slice for uid $uid"; return 1; }
    echo "$slice/memory.events: $(tr '\n' ' ' <"$slice/memory.events")"
    [[ $(awk '$1 == "oom_kill" { print $2 }' "$slice/memory.events") -ge 1 ]] || { echo "WRONG: no oom_kill in memory.events"; return 1; }
    reason=$(jq -r '.t.reason // empty' <<<"$st")
    [[ $reason == OOMKilled ]] || echo "WARN: the runtime gave the reason ${reason:-none}, not OOMKilled (its OOM event came after the exit)"
}

# psi: the kernel's pressure files exist for the pods, and picolet serves them: the
# container_pressure_* series in /metrics/cadvisor; /stats/summary holds the pods' v2 figures
# and the PSI of the node, the pod and its containers.
psi() {
    local f bad=0 m s
    for f in cpu memory io; do
        f=/sys/fs/cgroup/kubepods.slice/$f.pressure
        grep -q '^some ' "$f" && grep -q '^full ' "$f" && echo "ok $f has some and full" || { echo "WRONG $f"; bad=1; }
    done
    m=$(api /metrics/cadvisor) || { echo "no /metrics/cadvisor"; return 1; }
    for f in container_pressure_cpu_waiting_seconds_total container_pressure_memory_stalled_seconds_total container_pressure_io_waiting_seconds_total; do
        n=$(grep -c "^$f{.*pod=\"limited-" <<<"$m")
        [[ $n -ge 1 ]] && echo "ok /metrics/cadvisor: $n series $f of the limited pod" || { echo "MISSING /metrics/cadvisor $f for the limited pod"; bad=1; }
    done
    s=$(api /stats/summary) || { echo "no /stats/summary"; return 1; }
    jq -e --arg p "limited-$(hostname)" '.pods[] | select(.podRef.name == $p) |
        (.cpu.usageCoreNanoSeconds > 0) and (.memory.workingSetBytes > 0)' <<<"$s" >/dev/null &&
        echo "ok /stats/summary: the limited pod's cpu and memory" || { echo "WRONG /stats/summary for the limited pod"; bad=1; }
    # PSI in the Summary, as upstream's: cpu, memory and io of the pod, its containers and
    # the node, each with both lines.
    jq -e --arg p "limited-$(hostname)" '
        def psi: (.psi.some.total | type == "number") and (.psi.full.avg10 | type == "number");
        (.node | (.cpu | psi) and (.memory | psi) and (.io | psi)) and
        (.pods[] | select(.podRef.name == $p) |
            (.cpu | psi) and (.memory | psi) and (.io | psi) and
            ([.containers[] | (.cpu | psi) and (.memory | psi) and (.io | psi)] | all))' <<<"$s" >/dev/null &&
        echo "ok /stats/summary: cpu, memory and io PSI of the node, the limited pod and its containers: $(jq -c --arg p "limited-$(hostname)" '.pods[] | select(.podRef.name == $p) | .memory.psi.some' <<<"$s")" ||
        { echo "WRONG /stats/summary PSI: $(jq -c --arg p "limited-$(hostname)" '{node: {cpu: .node.cpu.psi, io: .node.io}, pod: (.pods[] | select(.podRef.name == $p) | {cpu: .cpu.psi, memory: .memory.psi, io: .io})}' <<<"$s")"; bad=1; }
    return $bad
}

# memory_eviction DEADLINE_S: the memory.available eviction on the v2 signal. picolet runs for
# a while with a hard threshold 100 MiB below what is available now (capacity minus the v2
# root's working set, as /stats/summary gives it), and the swell pod fills a memory-backed
# emptyDir with 200 MiB: swell is evicted (Failed, reason Evicted, a message naming memory),
# while web, bridged and limited run on untouched. picolet gets its usual settings back and
# swell is removed whether swell was evicted or not (the wait ends before the command's limit).
memory_eviction() {
    local deadline=$((SECONDS + $1)) s avail thr st="" before after rc=0
    steady() { running_sets | awk '$2 ~ /^(web|bridged|limited)$/'; }
    s=$(api /stats/summary) || { echo "no /stats/summary"; return 1; }
    avail=$(jq '.node.memory.availableBytes' <<<"$s")
    [[ $avail =~ ^[0-9]+$ ]] || { echo "no node memory.availableBytes in /stats/summary: $avail"; return 1; }
    thr=$((avail / 1048576 - 100))
    ((thr >= 64)) || { echo "only $((avail / 1048576)) MiB available: too little to evict on"; return 1; }
    echo "memory.available $((avail / 1048576)) MiB (capacity minus the v2 root's working set); --eviction-hard=memory.available<${thr}Mi"
    before=$(steady)
    cp /etc/default/picolet /etc/default/picolet.usual
    printf 'PICOLET_ARGS="--cgroup-driver=systemd --eviction-hard=memory.available<%sMi"\n' "$thr" >/etc/default/picolet
    systemctl restart picolet
    cp /mnt/host/manifests/swell.yaml /etc/kubernetes/manifests/
    while ((SECONDS < deadline)); do
        st=$(api /pods | jq -c --arg p "swell-$(hostname)" '.items[] | select(.metadata.name == $p) |
            .status | {phase, reason, message}' 2>/dev/null)
        [[ $(jq -r '.reason // empty' <<<"$st" 2>/dev/null) == Evicted ]] && break
        sleep 1
    done
    mv -f /etc/default/picolet.usual /etc/default/picolet
    rm -f /etc/kubernetes/manifests/swell.yaml
    systemctl restart picolet
    echo "picolet's status of swell: $st"
    [[ $(jq -r '.reason // empty' <<<"$st") == Evicted ]] || { echo "NOT evicted within $1 s"; diag; return 1; }
    [[ $(jq -r .phase <<<"$st") == Failed ]] || { echo "WRONG phase"; rc=1; }
    [[ $(jq -r .message <<<"$st") == "The node was low on resource: memory."* ]] || { echo "WRONG message"; rc=1; }
    wait_gone $((deadline - SECONDS > 30 ? deadline - SECONDS : 30)) swell || rc=1
    after=$(steady)
    if [[ $before != "$after" ]]; then
        echo "WRONG: other pods changed (kind pod container id pid):"
        diff <(echo "$before") <(echo "$after")
        rc=1
    fi
    return $rc
}

# wait_gone DEADLINE_S POD...: until no sandbox or container of any POD runs.
wait_gone() {
    local deadline=$1 p left
    shift
    local end=$(( $(cut -d. -f1 /proc/uptime) + deadline ))
    while :; do
        left=$(running_sets | awk -v pods=" $* " 'index(pods, " " $2 " ")')
        [[ -z $left ]] && { echo "gone at uptime $(uptime_s) s"; return 0; }
        if (( $(cut -d. -f1 /proc/uptime) >= end )); then
            echo "still running after ${deadline} s:"
            printf '%s\n' "$left"
            return 1
        fi
        sleep 1
    done
}

# footprint [UNIT]: the node's memory at rest, from the v2 memory.current of the units and
# slices (a figure, not a check), the agent's own RSS beside it, and the proportional set size
# (PSS, /proc/PID/smaps_rollup) of the agent, containerd and the shims. UNIT is the agent's
# unit (default picolet; kubelet for the reference).
footprint() {
    local agent=${1:-picolet} u pid total=0 p n=0 pss_shims=0 pss_pic pss_ctd
    mib() { awk '{ printf "%.1f MiB", $1 / 1048576 }' "$1"; }
    for u in "system.slice/$agent.service" system.slice/containerd.service kubepods.slice; do
        printf '%s memory.current %s\n' "${u#*/}" "$(mib "/sys/fs/cgroup/$u/memory.current")"
        total=$((total + $(cat "/sys/fs/cgroup/$u/memory.current")))
    done
    printf 'the three together %s\n' "$(awk -v b="$total" 'BEGIN { printf "%.1f MiB", b / 1048576 }')"
    pid=$(systemctl show -p MainPID --value "$agent")
    printf '%s VmRSS %s; containerd-shim-runc-v2 processes: %s (in containerd.service)\n' "$agent" \
        "$(awk '/^VmRSS/ { printf "%.1f MiB", $2 / 1024 }' "/proc/$pid/status")" \
        "$(pgrep -c -f containerd-shim-runc-v2 || true)"
    pss() { awk '$1 == "Pss:" { print $2 }' "/proc/$1/smaps_rollup" 2>/dev/null || echo 0; }
    pss_pic=$(pss "$pid")
    pss_ctd=$(pss "$(systemctl show -p MainPID --value containerd)")
    for p in $(pgrep -f containerd-shim-runc-v2); do
        pss_shims=$((pss_shims + $(pss "$p")))
        n=$((n + 1))
    done
    awk -v a="$pss_pic" -v b="$pss_ctd" -v c="$pss_shims" -v n="$n" -v agent="$agent" 'BEGIN {
        printf "PSS: %s %.1f MiB, containerd %.1f MiB, %d shims %.1f MiB, the three together %.1f MiB\n",
            agent, a / 1024, b / 1024, n, c / 1024, (a + b + c) / 1024 }'
}
