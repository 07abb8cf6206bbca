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
containers() {
    local -A status=() pid=()
    local id p st rest
    while read -r id p st rest; do
        [[ $id == TASK ]] && continue
        status[$id]=$st pid[$id]=$p
    done < <("${CTR[@]}" tasks ls 2>/dev/null)
    for id in $("${CTR[@]}" containers ls -q 2>/dev/null); do
        "${CTR[@]}" containers info "$id" 2>/dev/null | jq -r --arg id "$id" --arg node "-$(hostname)" \
            --arg st "${status[$id]:--}" --arg pid "${pid[$id]:--}" \
            '.Labels as $l | [$id,
              (if $l["io.cri-containerd.kind"] == "sandbox" then "sandbox" else "container" end),
              ($l["io.kubernetes.pod.name"] // "-" | rtrimstr($node)),
              ($l["io.kubernetes.container.name"] // "-"),
              $st, $pid] | join(" ")'
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
# saved manifest passes `picolet validate`, a PEM file has its END line; no temporary file of
# an interrupted write is left once picolet has started. Prints what it checked.
files_whole() {
    local root=${1:-/var/lib/kubelet} f bad=0 n=0 names=()
    while IFS= read -r -d '' f; do
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
