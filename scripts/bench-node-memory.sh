#!/usr/bin/env bash
# The whole node's memory, not the node agent's alone: the agent (picolet, or the upstream
# kubelet beside it), containerd and one shim per pod, by proportional set size (PSS,
# /proc/PID/smaps_rollup: each page shared by N processes counts 1/N to each, so the shims'
# shared pages are counted once in all), with 0, 10 and 50 static pods, on containerd 2.x with
# its stock plugin set and with the device profile the project ships (systemd/containerd/: the
# plugins a node never uses turned off, and Go's GC settings for containerd and its shims).
# Figures only; nothing is asserted. Run as root.
#
#   scripts/bench-node-memory.sh
#
# Environment:
#   NODE_MEMORY_AGENTS     the node agents (default "picolet"; "picolet kubelet" runs the
#                          upstream kubelet of scripts/k8s-build.sh --e2e too, standalone with
#                          the same static pods, as scripts/compare-kubelet.sh runs it: its own
#                          mount namespace, failCgroupV1 false, the cgroupfs driver, the same
#                          cgroup root)
#   NODE_MEMORY_PODS       static pod counts, in rising order (default "0 10 50")
#   NODE_MEMORY_PROFILES   containerd configurations (default "stock device"): stock and
#                          device as scripts/scratch-containerd.sh's SCRATCH_CONTAINERD_PROFILE
#                          gives them, on containerd 2.x; 1.6 for the machine's containerd 1.6
#                          (Debian's) with the test instance's configuration
#   NODE_MEMORY_SETTLE     seconds between the last pod Running and the reading (default 20)
#   PICOLET_BIN            the picolet measured (default target/release/picolet, built when
#                          missing)
#   SCRATCH_CONTAINERD_BIN containerd 2.x (default: scripts/k8s-build.sh --containerd's)
#   NODE_MEMORY_DIR        scratch directory (default /tmp/pnmem)
#
# The programs run are copies in NODE_MEMORY_DIR/bin, whose pages no other process on the
# machine shares. Each agent and profile gets a fresh containerd of its own; the agent runs once
# on it and the manifests grow from one count to the next (the pods of the smaller count stay).
# Whether all run is read from containerd (a running sandbox and container per pod). Every
# process it starts is stopped by PID when it ends, Ctrl-C included.
set -euo pipefail
REPO=$(cd "$(dirname -- "${BASH_SOURCE[0]}")/.." && pwd)
DIR=${NODE_MEMORY_DIR:-/tmp/pnmem}
SETTLE=${NODE_MEMORY_SETTLE:-20}
read -r -a COUNTS <<<"${NODE_MEMORY_PODS:-0 10 50}"
read -r -a PROFILES <<<"${NODE_MEMORY_PROFILES:-stock device}"
read -r -a AGENTS <<<"${NODE_MEMORY_AGENTS:-picolet}"
NODE=memory-node
IMAGE=picolet.local/busybox:1
SCRATCH=$REPO/scripts/scratch-containerd.sh
HELPER=$REPO/scripts/bench/helper.py
WORK=$DIR/pl
PROG=bench-node-memory

. "$REPO/scripts/lib/common.sh"
. "$REPO/scripts/lib/kubelet-config.sh"
. "$REPO/scripts/lib/upstream-kubelet.sh"
helper() { python3 "$HELPER" "$@"; }

[[ $(id -u) == 0 ]] || die "run as root (containerd, runc and CNI need it)"
[[ $SETTLE =~ ^[0-9]+$ ]] || die "NODE_MEMORY_SETTLE must be a number of seconds, not '$SETTLE'"
for n in "${COUNTS[@]}"; do [[ $n =~ ^[0-9]+$ ]] || die "NODE_MEMORY_PODS: '$n' is not a count"; done
((${#AGENTS[@]} > 0)) || die "NODE_MEMORY_AGENTS names no agent"
for a in "${AGENTS[@]}"; do [[ $a == picolet || $a == kubelet ]] || die "NODE_MEMORY_AGENTS: '$a' is neither picolet nor kubelet"; done
for c in python3 ctr unshare mount; do command -v "$c" >/dev/null || die "$c not found (scripts/install-deps.sh)"; done
KUBELET=
if [[ " ${AGENTS[*]} " == *" kubelet "* ]]; then
    key=$("$REPO/scripts/k8s-build.sh" --e2e --key | tail -n 1) || die "scripts/k8s-build.sh --e2e --key failed"
    KUBELET=${PICOLET_K8S_CACHE:-/var/cache/picolet-k8s}/$key/bin/kubelet
    [[ -x $KUBELET ]] ||
        die "the upstream kubelet is not built ($KUBELET; NODE_MEMORY_AGENTS has kubelet): scripts/k8s-build.sh --e2e builds it"
fi
if [[ -z ${SCRATCH_CONTAINERD_BIN:-} ]]; then
    SCRATCH_CONTAINERD_BIN=$("$REPO/scripts/k8s-build.sh" --containerd 2>/dev/null | tail -n 1) ||
        die "containerd 2.x is not built: scripts/k8s-build.sh --containerd"
fi
export SCRATCH_CONTAINERD_BIN
BIN=${PICOLET_BIN:-$REPO/target/release/picolet}
if [[ -z ${PICOLET_BIN:-} && ! -x $BIN ]]; then (cd "$REPO" && cargo build --release --locked -q); fi
[[ -x $BIN ]] || die "PICOLET_BIN=$BIN is not an executable"

AGENT_PID=
CONTAINERD_STARTED=0
CGROUP_ROOT=/picolet-node-memory
cleanup() {
    stop_pid "$AGENT_PID"
    AGENT_PID=
    [[ $CONTAINERD_STARTED == 1 ]] && bash "$SCRATCH" stop "$DIR" >/dev/null 2>&1
    CONTAINERD_STARTED=0
    node_dir_cleanup "$WORK" "$CGROUP_ROOT"
    remove_cgroup_tree "$CGROUP_ROOT"
}
on_exit() {
    cleanup
    rm -rf -- "${DIR:?}/bin"
}
cleanup_on_exit on_exit

# Private copies of the programs: PSS splits a file's pages among every process that maps them,
# so other instances of the same files on the machine (a cluster or another bench beside this
# one) would lower the figures below what a device, where this node is alone, sees.
mkdir -p "$DIR/bin/containerd"
cp -- "$SCRATCH_CONTAINERD_BIN"/* "$DIR/bin/containerd/" || die "cannot copy containerd's programs into $DIR/bin"
SCRATCH_CONTAINERD_BIN=$DIR/bin/containerd
cp -- "$BIN" "$DIR/bin/picolet" || die "cannot copy $BIN into $DIR/bin"
BIN=$DIR/bin/picolet
if [[ -n $KUBELET ]]; then
    cp -- "$KUBELET" "$DIR/bin/kubelet" || die "cannot copy $KUBELET into $DIR/bin"
    KUBELET=$DIR/bin/kubelet
fi

say "the node's memory by PSS: the agent ($(IFS=,; echo "${AGENTS[*]}")), containerd and its shims (figures only)"
say "  machine: $(nproc) CPUs, $(awk '/MemTotal/ {printf "%.1f GiB", $2/1048576}' /proc/meminfo) RAM, kernel $(uname -r), load $(cut -d' ' -f1-3 /proc/loadavg)"
say "  picolet: $BIN ($(stat -c %s "$BIN") bytes); $("$SCRATCH_CONTAINERD_BIN/containerd" --version 2>/dev/null | awk '{print $1, $3}')"
[[ -z $KUBELET ]] || say "  kubelet: $KUBELET ($("$KUBELET" --version 2>/dev/null | awk '{print $2}'), $(stat -c %s "$KUBELET") bytes)"
say "  device profile: $(grep -c '^  "io\.containerd' "$REPO/systemd/containerd/picolet-device.toml") plugins off; $(sed -n 's/^Environment=//p' "$REPO/systemd/containerd/picolet-device.conf" | tr '\n' ' ')"
start_agent() { # start_agent AGENT PORT
    case $1 in
        picolet)
            kubelet_config staticPodPath="$WORK/manifests" containerRuntimeEndpoint="unix://$SOCK" \
                podLogsDir="$WORK/logs" healthzPort="$2" cgroupRoot="$CGROUP_ROOT" "$SHARED_DISK_CONFIG" >"$WORK/config.yaml"
            "$BIN" --config "$WORK/config.yaml" --root-dir "$WORK/kubelet" --hostname-override "$NODE" \
                </dev/null >>"$WORK/picolet.log" 2>&1 &
            AGENT_PID=$! ;;
        kubelet)
            upstream_kubelet_prepare "$WORK" "$CGROUP_ROOT"
            kubelet_config staticPodPath="$WORK/manifests" failCgroupV1=false cgroupDriver=cgroupfs \
                cgroupRoot="$CGROUP_ROOT" failSwapOn=false containerRuntimeEndpoint="unix://$SOCK" \
                podLogsDir="$WORK/logs" volumePluginDir="$WORK/volume-plugins" \
                makeIPTablesUtilChains=false address=127.0.0.1 port="$(helper freeport)" readOnlyPort=0 \
                healthzBindAddress=127.0.0.1 healthzPort="$2" "$UPSTREAM_KUBELET_STANDALONE_AUTH" "$SHARED_DISK_CONFIG" \
                >"$WORK/config.yaml"
            upstream_kubelet_launch "$WORK" "$WORK/kubelet.log" "$KUBELET" --config "$WORK/config.yaml" \
                --root-dir "$WORK/kubelet" --cert-dir "$WORK/kubelet/pki" --hostname-override "$NODE"
            AGENT_PID=$UPSTREAM_KUBELET_PID ;;
    esac
}

# wait_pods N LIMIT_S: until containerd runs N sandboxes and N containers of the static pods
# (what both agents are judged by), or the agent exits, or LIMIT_S pass.
wait_pods() {
    local end=$((SECONDS + $2)) have
    while :; do
        have=$(ctr -a "$SOCK" -n k8s.io tasks ls 2>/dev/null | awk '$3 == "RUNNING"' | wc -l)
        ((have >= 2 * $1)) && return 0
        kill -0 "$AGENT_PID" 2>/dev/null || { say "  the agent (pid $AGENT_PID) exited"; return 1; }
        ((SECONDS < end)) || { say "  $have of $((2 * $1)) sandboxes and containers running after $2 s"; return 1; }
        sleep 1
    done
}

declare -A RESULT
for agent in "${AGENTS[@]}"; do
for profile in "${PROFILES[@]}"; do
    section "$agent, containerd profile: $profile"
    bash "$SCRATCH" stop "$DIR" >/dev/null 2>&1 || true
    node_dir_cleanup "$WORK" "$CGROUP_ROOT"
    rm -rf --one-file-system -- "$DIR/root" "$WORK"
    mkdir -p "$WORK/manifests" "$WORK/logs"
    CONTAINERD_STARTED=1
    case $profile in
        stock | device) start_env=(SCRATCH_CONTAINERD_PROFILE="$profile") ;;
        1.6) start_env=(-u SCRATCH_CONTAINERD_BIN -u SCRATCH_CONTAINERD_PROFILE) ;;
        *) die "NODE_MEMORY_PROFILES: '$profile' is not stock, device or 1.6" ;;
    esac
    SOCK=$(env "${start_env[@]}" bash "$SCRATCH" start "$DIR" 2>"$DIR.start.log" | tail -n 1) ||
        { cat "$DIR.start.log" >&2; die "the scratch containerd did not start with profile $profile"; }
    CONTAINERD_PID=$(<"$DIR/containerd.pid")
    say "  $(env "${start_env[@]}" bash -c 'PATH=${SCRATCH_CONTAINERD_BIN:-/nonexistent}:$PATH; containerd --version; ctr -a "$1" plugins ls 2>/dev/null | awk "NR > 1 && \$NF == \"ok\"" | wc -l' _ "$SOCK" | awk 'NR == 1 { v = $3 } NR == 2 { print "containerd " v ", " $1 " plugins loaded" }')"
    start_agent "$agent" "$(helper freeport)"
    have=0
    for n in "${COUNTS[@]}"; do
        for ((i = have; i < n; i++)); do write_sleep_pod "$WORK/manifests" "static-$i" "$IMAGE"; done
        have=$((n > have ? n : have))
        wait_pods "$n" 600 ||
            { tail -n 30 "$WORK/$agent.log" >&2; die "the $n static pods did not all run ($agent, profile $profile)"; }
        sleep "$SETTLE"
        out=$(helper pss "$AGENT_PID" "$CONTAINERD_PID" "$DIR" "$n static pods, $agent, profile $profile, read $SETTLE s after all ran, load $(cut -d' ' -f1-3 /proc/loadavg)" "$agent")
        grep -v '^RESULT' <<<"$out"
        RESULT[$agent.$profile.$n]=$(sed -n 's/^RESULT node_pss //p' <<<"$out")
    done
    cleanup
done
done

section "summary: PSS in MiB (agent + containerd + shims = node), load at the end $(cut -d' ' -f1-3 /proc/loadavg)"
printf '  %-8s' pods
for agent in "${AGENTS[@]}"; do for profile in "${PROFILES[@]}"; do printf ' %34s' "$agent, $profile"; done; done
printf '\n'
for n in "${COUNTS[@]}"; do
    printf '  %-8s' "$n"
    for agent in "${AGENTS[@]}"; do for profile in "${PROFILES[@]}"; do
        r=${RESULT[$agent.$profile.$n]}
        printf ' %34s' "$(awk -v r="$r" 'BEGIN { split(r, kv, " "); for (i in kv) { split(kv[i], p, "="); v[p[1]] = p[2] }
            printf "%.1f + %.1f + %.1f = %.1f", v["agent_kib"]/1024, v["containerd_kib"]/1024, v["shims_kib"]/1024, v["node_kib"]/1024 }')"
    done; done
    printf '\n'
done
