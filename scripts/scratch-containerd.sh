#!/usr/bin/env bash
# scratch-containerd.sh start|stop|restart DIR
#
# Runs a private containerd 1.6 (CRI plugin enabled) whose every path lives under
# DIR, for end-to-end tests of picolet against a real CRI runtime. Nothing of the
# machine's own containerd (/run/containerd/containerd.sock, /var/lib/containerd,
# /etc/containerd, /etc/cni/net.d) is used or touched.
#
#   start DIR    write DIR/config.toml and a CNI conflist, start containerd
#                (log DIR/containerd.log, pid DIR/containerd.pid), wait until it
#                and its CRI service answer, import picolet.local/pause:1 (the
#                sandbox image) and picolet.local/busybox:1 into namespace k8s.io.
#                Prints the socket path as the last line of stdout.
#   stop DIR     kill containerd, every shim and container process of this
#                instance, unmount everything under DIR, release its pod IPs,
#                delete the bridge when no other scratch instance is left.
#                Idempotent; touches only processes and mounts tied to DIR.
#   restart DIR  kill containerd only (shims and pods keep running) and start it
#                again with the same config; waits until CRI answers.
#
# Environment: SCRATCH_CONTAINERD_BIN=DIR3 runs the containerd, ctr and
# containerd-shim-runc-v2 in DIR3 instead of those on PATH: containerd 2.x as
# `scripts/k8s-build.sh --containerd` builds it (its last line of stdout is that
# directory). The config is written in the format of the version found
# (version 2 for containerd 1.x, version 3 for 2.x).
#
# Environment (start): SCRATCH_CONTAINERD_REGISTRY_HOSTS=DIR2 sets the CRI
# plugin's registry config_path to DIR2 (an absolute directory of
# <host:port>/hosts.toml, containerd's registry host configuration: a private
# registry's CA, say). Unset, the config has no registry section.
#
# Environment (start, containerd 2.x only): SCRATCH_CONTAINERD_PROFILE chooses the
# plugin set, for measuring what a configuration costs (scripts/bench-node-memory.sh):
#   (unset)  the test instance's: the plugins a test never needs turned off;
#   stock    containerd's default plugins, every one on (NRI's socket and the /opt
#            plugin's directory moved under DIR);
#   device   the device profile the project ships: systemd/containerd/picolet-device.toml
#            imported, and the Go settings of systemd/containerd/picolet-device.conf
#            (its Environment= lines) in containerd's environment, which its shims inherit.
#
# Environment (start and stop): SCRATCH_CONTAINERD_SUBNET=A.B.C.0/24 gives the
# pods that subnet (gateway A.B.C.1 on the bridge) instead of 10.244.77.0/24:
# scripts/cluster.sh runs one instance in each node's network namespace (where
# the bridge is that namespace's own), each with a pod CIDR and a
# PICOLET_SCRATCH_RUN of its own.
#
# Outside DIR, the only state is shared by all scratch instances (so that pods of
# concurrent instances on the one bridge never get the same IP):
#   $PICOLET_SCRATCH_RUN (default /run/picolet-scratch): lock, instance registry,
#       host-local IPAM reservations;
#   the bridge picolet0 (10.244.77.1/24);
#   shim sockets /run/containerd/s/<hash> (containerd 1.6 always puts them there;
#       the hash covers DIR's socket path, so instances never collide);
#   CNI result cache files /var/lib/cni/results/<network>-<sandbox id>-<ifname>.
# stop removes what belongs to DIR from each of them.
set -euo pipefail

readonly NETWORK_NAME=picolet-scratch
readonly BRIDGE=picolet0
SUBNET=${SCRATCH_CONTAINERD_SUBNET:-10.244.77.0/24}
[[ $SUBNET =~ ^(([0-9]{1,3}\.){2}[0-9]{1,3})\.0/24$ ]] ||
    { printf 'scratch-containerd: error: SCRATCH_CONTAINERD_SUBNET=%s: expected A.B.C.0/24\n' "$SUBNET" >&2; exit 1; }
readonly SUBNET GATEWAY=${BASH_REMATCH[1]}.1
readonly PAUSE_IMAGE=picolet.local/pause:1
readonly BUSYBOX_IMAGE=picolet.local/busybox:1
readonly CNI_BIN_DIR=/usr/lib/cni
readonly SHARED=${PICOLET_SCRATCH_RUN:-/run/picolet-scratch}
readonly START_TIMEOUT_S=${SCRATCH_CONTAINERD_TIMEOUT:-20}
SCRIPT_DIR=$(cd "$(dirname -- "${BASH_SOURCE[0]}")" && pwd -P)
readonly SCRIPT_DIR
readonly DEVICE_PROFILE=$SCRIPT_DIR/../systemd/containerd/picolet-device.toml
readonly DEVICE_DROPIN=$SCRIPT_DIR/../systemd/containerd/picolet-device.conf
PROG=scratch-containerd
# shellcheck source=scripts/lib/common.sh
. "$SCRIPT_DIR/lib/common.sh"

usage() {
    printf 'usage: %s start|stop|restart DIR\n' "${0##*/}" >&2
    exit 2
}

[[ $# -eq 2 ]] || usage
cmd=$1
[[ -n $2 ]] || die "DIR must not be empty"
[[ $2 == /* ]] || set -- "$1" "$PWD/$2"
[[ $2 != / ]] || die "DIR must not be /"
[[ $(id -u) == 0 ]] || die "must run as root (containerd, runc and CNI need it)"
if [[ -n ${SCRATCH_CONTAINERD_BIN:-} ]]; then
    for b in containerd ctr containerd-shim-runc-v2; do
        [[ -x $SCRATCH_CONTAINERD_BIN/$b ]] ||
            die "SCRATCH_CONTAINERD_BIN=$SCRATCH_CONTAINERD_BIN has no executable $b (scripts/k8s-build.sh --containerd builds them)"
    done
    # containerd starts its shims by name from PATH.
    export PATH=$SCRATCH_CONTAINERD_BIN:$PATH
fi

# ---------------------------------------------------------------- paths

set_paths() {
    DIR=$1
    SOCK=$DIR/containerd.sock
    TTRPC_SOCK=$DIR/containerd.sock.ttrpc
    CONFIG=$DIR/config.toml
    LOGFILE=$DIR/containerd.log
    PIDFILE=$DIR/containerd.pid
    CNI_CONF_DIR=$DIR/cni/conf
    IMAGE_CACHE=$DIR/images
    ENV_FILE=$DIR/containerd.env
    IPAM_DIR=$SHARED/ipam
    INSTANCE_KEY=$(printf '%s' "$DIR" | sha256sum)
    INSTANCE_KEY=${INSTANCE_KEY:0:16}
}

# ---------------------------------------------------------------- shared state

with_shared_lock() { # with_shared_lock FUNC ARGS...
    mkdir -p "$SHARED/instances" "$IPAM_DIR/$NETWORK_NAME"
    local fd
    exec {fd}>"$SHARED/lock"
    flock "$fd"
    local rc=0
    "$@" || rc=$?
    exec {fd}>&-
    return "$rc"
}

# Runs FUNC while holding host-local's own lock on the network's reservations.
with_ipam_lock() {
    local fd
    mkdir -p "$IPAM_DIR/$NETWORK_NAME"
    exec {fd}>"$IPAM_DIR/$NETWORK_NAME/lock"
    flock "$fd"
    local rc=0
    "$@" || rc=$?
    exec {fd}>&-
    return "$rc"
}

# release_ips --all | release_ips ID...: frees the host-local reservations held
# by the given container (sandbox) ids, or all of them.
release_ips() {
    local f first id all=0
    local -A ids=()
    if [[ ${1-} == --all ]]; then
        all=1
    else
        for id in "$@"; do ids[$id]=1; done
    fi
    for f in "$IPAM_DIR/$NETWORK_NAME"/*; do
        [[ -f $f ]] || continue
        case ${f##*/} in lock | last_reserved_ip.*) continue ;; esac
        first=
        read -r first <"$f" || true
        first=${first%$'\r'}
        if [[ $all == 1 || (-n $first && -n ${ids[$first]+x}) ]]; then
            rm -f -- "$f"
        fi
    done
}

# Called with the shared lock held. Forgets instances whose DIR is gone; when no
# instance is left, every reservation is stale and is dropped.
register_instance() {
    local f d live=0
    for f in "$SHARED/instances"/*; do
        [[ -f $f ]] || continue
        d=$(<"$f")
        if [[ $d != "$DIR" && ! -f $d/config.toml ]]; then
            rm -f -- "$f"
            continue
        fi
        [[ $d == "$DIR" ]] || live=$((live + 1))
    done
    if [[ $live == 0 ]]; then
        with_ipam_lock release_ips --all
    fi
    printf '%s' "$DIR" >"$SHARED/instances/$INSTANCE_KEY"
}

# Called with the shared lock held.
deregister_instance() {
    rm -f -- "$SHARED/instances/$INSTANCE_KEY"
    local f d live=0
    for f in "$SHARED/instances"/*; do
        [[ -f $f ]] || continue
        d=$(<"$f")
        if [[ ! -f $d/config.toml ]]; then
            rm -f -- "$f"
            continue
        fi
        live=$((live + 1))
    done
    if [[ $live == 0 ]]; then
        if ip link show "$BRIDGE" >/dev/null 2>&1; then
            ip link del "$BRIDGE" || log "warning: could not delete bridge $BRIDGE"
        fi
        with_ipam_lock release_ips --all
    fi
}

# ---------------------------------------------------------------- config

check_prerequisites() {
    local missing=() b
    for b in containerd ctr runc containerd-shim-runc-v2; do
        command -v "$b" >/dev/null || missing+=("$b")
    done
    for b in bridge host-local portmap loopback; do
        [[ -x $CNI_BIN_DIR/$b ]] || missing+=("$CNI_BIN_DIR/$b")
    done
    for b in ip flock; do
        command -v "$b" >/dev/null || missing+=("$b")
    done
    if [[ ${#missing[@]} -gt 0 ]]; then
        die "missing: ${missing[*]}; install them with: apt-get install -y containerd runc containernetworking-plugins busybox-static iproute2 util-linux"
    fi
    # sun_path holds 108 bytes including the terminating NUL.
    if [[ ${#TTRPC_SOCK} -gt 107 ]]; then
        die "DIR is too long for a unix socket path ($TTRPC_SOCK is ${#TTRPC_SOCK} bytes, at most 107): use a shorter DIR"
    fi
    if [[ $DIR == *[[:space:]\"\\]* ]]; then
        die "DIR must not contain whitespace, quotes or backslashes: $DIR"
    fi
}

# The major version of the containerd on PATH (1 or 2).
containerd_major() {
    local out
    out=$(containerd --version 2>&1) || die "containerd --version failed: $out"
    [[ $out =~ \ v?([0-9]+)\.[0-9]+ ]] || die "containerd --version printed no version: $out"
    printf '%s' "${BASH_REMATCH[1]}"
}

write_config() {
    mkdir -p "$DIR/root" "$DIR/state" "$DIR/runc" "$CNI_CONF_DIR" "$IMAGE_CACHE"
    chmod 0711 "$DIR/root" "$DIR/state"
    local major
    major=$(containerd_major)
    : >"$ENV_FILE"
    case ${SCRATCH_CONTAINERD_PROFILE:-} in
        '' | stock) ;;
        device)
            # KEY=VALUE lines for launch_containerd, from the drop-in's Environment= lines.
            sed -n 's/^Environment=\(.*\)$/\1/p' "$DEVICE_DROPIN" | tr ' ' '\n' |
                grep -E '^[A-Z_][A-Z0-9_]*=' >"$ENV_FILE" || true ;;
        *) die "SCRATCH_CONTAINERD_PROFILE must be stock or device, not '$SCRATCH_CONTAINERD_PROFILE'" ;;
    esac
    if [[ -n ${SCRATCH_CONTAINERD_PROFILE:-} && $major != 2 ]]; then
        die "SCRATCH_CONTAINERD_PROFILE is for containerd 2.x (this is $major.x)"
    fi
    case $major in
        1) write_config_v2 ;;
        2) write_config_v3 "$(containerd_config_version)" ;;
        *) die "containerd $major.x: this script knows the config of 1.x and 2.x only" ;;
    esac
    mv -f -- "$CONFIG.tmp" "$CONFIG"
    write_cni_config
}

# The config version the containerd on PATH writes by default (3, or 4 from 2.3).
containerd_config_version() {
    local v
    v=$(containerd config default 2>/dev/null | awk '$1 == "version" && $2 == "=" { print $3; exit }')
    [[ $v =~ ^[0-9]+$ ]] || die "containerd config default printed no config version"
    printf '%s' "$v"
}

write_config_v2() {
    cat >"$CONFIG.tmp" <<EOF
# Written by scripts/scratch-containerd.sh: a private containerd for tests.
# Every path lives under $DIR.
version = 2
root = "$DIR/root"
state = "$DIR/state"
# Do not touch containerd's own oom_score_adj.
oom_score = 0
# Refuse to start at all if the CRI plugin cannot load.
required_plugins = ["io.containerd.grpc.v1.cri"]
# Snapshotters this VM cannot or need not run, and the opt plugin (it would
# create /opt/containerd). (io.containerd.runtime.v1.linux must stay: in 1.6 the
# tasks service, and so the CRI plugin, refuse to load without it.)
disabled_plugins = [
  "io.containerd.snapshotter.v1.aufs",
  "io.containerd.snapshotter.v1.btrfs",
  "io.containerd.snapshotter.v1.zfs",
  "io.containerd.snapshotter.v1.devmapper",
  "io.containerd.internal.v1.opt",
  "io.containerd.tracing.processor.v1.otlp",
  "io.containerd.internal.v1.tracing",
]

$(servers_config 2)

[plugins]
  [plugins."io.containerd.grpc.v1.cri"]
    sandbox_image = "$PAUSE_IMAGE"
    # Needed only on these test VMs, which lack CAP_SYS_RESOURCE: without it runc
    # cannot lower oom_score_adj and every sandbox fails with "can't get final
    # child's PID from pipe: EOF". A real device does not need it.
    restrict_oom_score_adj = true
    # Pod network namespaces are bind-mounted under
    # $DIR/state/io.containerd.grpc.v1.cri/netns instead of /var/run/netns.
    netns_mounts_under_state_dir = true
    # The CRI streaming server (exec/attach/port-forward) on a random local port.
    stream_server_address = "127.0.0.1"
    stream_server_port = "0"
    enable_selinux = false

    [plugins."io.containerd.grpc.v1.cri".cni]
      bin_dir = "$CNI_BIN_DIR"
      conf_dir = "$CNI_CONF_DIR"
      max_conf_num = 1

    [plugins."io.containerd.grpc.v1.cri".containerd]
      snapshotter = "overlayfs"
      default_runtime_name = "runc"
      disable_snapshot_annotations = true

      [plugins."io.containerd.grpc.v1.cri".containerd.runtimes.runc]
        runtime_type = "io.containerd.runc.v2"

        [plugins."io.containerd.grpc.v1.cri".containerd.runtimes.runc.options]
          SystemdCgroup = false
          # runc's state under DIR instead of /run/containerd/runc.
          Root = "$DIR/runc"
EOF
    if [[ -n ${SCRATCH_CONTAINERD_REGISTRY_HOSTS:-} ]]; then
        [[ $SCRATCH_CONTAINERD_REGISTRY_HOSTS == /* && -d $SCRATCH_CONTAINERD_REGISTRY_HOSTS ]] ||
            die "SCRATCH_CONTAINERD_REGISTRY_HOSTS=$SCRATCH_CONTAINERD_REGISTRY_HOSTS is not an absolute path to a directory"
        cat >>"$CONFIG.tmp" <<EOF

    # Registry hosts (SCRATCH_CONTAINERD_REGISTRY_HOSTS): <host:port>/hosts.toml
    # files, say a test registry's CA.
    [plugins."io.containerd.grpc.v1.cri".registry]
      config_path = "$SCRATCH_CONTAINERD_REGISTRY_HOSTS"
EOF
    fi
}

# The same settings in containerd 2.x's format (config version 3 or 4, given as
# $1: the one the binary writes itself), where the CRI plugin is split into an
# images and a runtime plugin.
write_config_v3() {
    cat >"$CONFIG.tmp" <<EOF
# Written by scripts/scratch-containerd.sh: a private containerd 2.x for tests.
# Every path lives under $DIR.
version = $1
root = "$DIR/root"
state = "$DIR/state"
oom_score = 0
$(plugin_set_v3)
required_plugins = ["io.containerd.grpc.v1.cri"]

$(servers_config "$1")

[plugins]
$(plugin_paths_v3)
  [plugins."io.containerd.cri.v1.images"]
    snapshotter = "overlayfs"
    disable_snapshot_annotations = true

    [plugins."io.containerd.cri.v1.images".pinned_images]
      sandbox = "$PAUSE_IMAGE"
EOF
    if [[ -n ${SCRATCH_CONTAINERD_REGISTRY_HOSTS:-} ]]; then
        [[ $SCRATCH_CONTAINERD_REGISTRY_HOSTS == /* && -d $SCRATCH_CONTAINERD_REGISTRY_HOSTS ]] ||
            die "SCRATCH_CONTAINERD_REGISTRY_HOSTS=$SCRATCH_CONTAINERD_REGISTRY_HOSTS is not an absolute path to a directory"
        cat >>"$CONFIG.tmp" <<EOF

    [plugins."io.containerd.cri.v1.images".registry]
      config_path = "$SCRATCH_CONTAINERD_REGISTRY_HOSTS"
EOF
    fi
    cat >>"$CONFIG.tmp" <<EOF

  [plugins."io.containerd.cri.v1.runtime"]
    restrict_oom_score_adj = true
    netns_mounts_under_state_dir = true
    enable_selinux = false

    [plugins."io.containerd.cri.v1.runtime".cni]
      bin_dirs = ["$CNI_BIN_DIR"]
      conf_dir = "$CNI_CONF_DIR"
      max_conf_num = 1

    [plugins."io.containerd.cri.v1.runtime".containerd]
      default_runtime_name = "runc"

      [plugins."io.containerd.cri.v1.runtime".containerd.runtimes.runc]
        runtime_type = "io.containerd.runc.v2"

        [plugins."io.containerd.cri.v1.runtime".containerd.runtimes.runc.options]
          SystemdCgroup = false
          Root = "$DIR/runc"

  [plugins."io.containerd.grpc.v1.cri"]
    stream_server_address = "127.0.0.1"
    stream_server_port = "0"
EOF
}

# imports and disabled_plugins of the chosen profile (SCRATCH_CONTAINERD_PROFILE).
plugin_set_v3() {
    case ${SCRATCH_CONTAINERD_PROFILE:-} in
        stock) printf '%s\n' 'imports = []' 'disabled_plugins = []' ;;
        device) printf 'imports = ["%s"]\ndisabled_plugins = []\n' "$DEVICE_PROFILE" ;;
        *)
            cat <<'EOF'
# Nothing from /etc/containerd/conf.d (version 4 imports it unless told).
imports = []
# As for 1.x, and NRI (it would serve /var/run/nri/nri.sock) and the snapshotters
# 2.x adds.
disabled_plugins = [
  "io.containerd.snapshotter.v1.btrfs",
  "io.containerd.snapshotter.v1.zfs",
  "io.containerd.snapshotter.v1.devmapper",
  "io.containerd.snapshotter.v1.blockfile",
  "io.containerd.snapshotter.v1.erofs",
  "io.containerd.internal.v1.opt",
  "io.containerd.tracing.processor.v1.otlp",
  "io.containerd.internal.v1.tracing",
  "io.containerd.nri.v1.nri",
]
EOF
            ;;
    esac
}

# With every plugin on (stock), the two that would use paths outside DIR get paths in it.
plugin_paths_v3() {
    [[ ${SCRATCH_CONTAINERD_PROFILE:-} == stock ]] || return 0
    cat <<EOF
  [plugins."io.containerd.internal.v1.opt"]
    path = "$DIR/opt"

  [plugins."io.containerd.nri.v1.nri"]
    socket_path = "$DIR/nri.sock"
    plugin_path = "$DIR/nri/plugins"
    plugin_config_path = "$DIR/nri/conf.d"
EOF
}

# The sockets containerd serves, in config version $1's place for them: tables
# of their own up to version 3, server plugins from version 4. No debug socket
# and no metrics endpoint.
servers_config() {
    if [[ $1 -le 3 ]]; then
        cat <<EOF
[grpc]
  address = "$SOCK"

[ttrpc]
  address = "$TTRPC_SOCK"

[debug]
  address = ""
  level = "info"

[metrics]
  address = ""
EOF
    else
        cat <<EOF
[debug]
  level = "info"

[plugins."io.containerd.server.v1.grpc"]
  address = "$SOCK"

[plugins."io.containerd.server.v1.ttrpc"]
  address = "$TTRPC_SOCK"

[plugins."io.containerd.server.v1.debug"]
  address = ""

[plugins."io.containerd.server.v1.metrics"]
  address = ""
EOF
    fi
}

write_cni_config() {

    # The CRI plugin adds the loopback interface itself (with $CNI_BIN_DIR/loopback),
    # so the chain only holds bridge (+ host-local IPAM) and portmap (hostPort).
    # ipMasq is off: masquerading would add per-pod iptables rules that a killed
    # pod (no CNI DEL) would leak. The IPAM data directory is shared by all scratch
    # instances, so that concurrent instances on the one bridge never hand out the
    # same address.
    cat >"$CNI_CONF_DIR/10-$NETWORK_NAME.conflist.tmp" <<EOF
{
  "cniVersion": "1.0.0",
  "name": "$NETWORK_NAME",
  "plugins": [
    {
      "type": "bridge",
      "bridge": "$BRIDGE",
      "isGateway": true,
      "ipMasq": false,
      "hairpinMode": true,
      "ipam": {
        "type": "host-local",
        "dataDir": "$IPAM_DIR",
        "ranges": [[{ "subnet": "$SUBNET", "gateway": "$GATEWAY" }]],
        "routes": [{ "dst": "0.0.0.0/0" }]
      }
    },
    {
      "type": "portmap",
      "capabilities": { "portMappings": true }
    }
  ]
}
EOF
    mv -f -- "$CNI_CONF_DIR/10-$NETWORK_NAME.conflist.tmp" "$CNI_CONF_DIR/10-$NETWORK_NAME.conflist"
}

# ---------------------------------------------------------------- processes

# Prints the PID of DIR's containerd if it is alive (checked against its command
# line, so that a recycled PID is never taken for it).
containerd_pid() {
    local pid args=()
    [[ -f $PIDFILE ]] || return 0
    pid=$(<"$PIDFILE")
    [[ $pid =~ ^[0-9]+$ ]] || return 0
    mapfile -d '' -t args 2>/dev/null <"/proc/$pid/cmdline" || return 0
    # Right after the launch the process may still be "setsid containerd ...".
    [[ ${#args[@]} -ge 1 && ${args[0]##*/} == setsid ]] && args=("${args[@]:1}")
    if [[ ${#args[@]} -ge 3 && ${args[0]##*/} == containerd && " ${args[*]} " == *" $CONFIG "* ]]; then
        printf '%s' "$pid"
    fi
}

# Prints "PID KIND" for every process tied to DIR, KIND being one of
#   containerd  a containerd whose command line names DIR/...
#   shim        a containerd-shim* whose command line names DIR/... (-address)
#   runc        a runc/ctr whose command line names DIR/...
#   container   a process whose root mount is an overlay made of DIR/... layers
# The running script and its ancestors are never listed.
tied_processes() {
    local -A skip=()
    local p pid base a rest mp kind
    local args=()
    p=$BASHPID
    while [[ $p =~ ^[0-9]+$ && $p -gt 1 && -z ${skip[$p]+x} ]]; do
        skip[$p]=1
        p=$(ppid_of "$p")
    done
    skip[$$]=1
    for p in /proc/[0-9]*; do
        pid=${p#/proc/}
        [[ -z ${skip[$pid]+x} ]] || continue
        args=()
        mapfile -d '' -t args 2>/dev/null <"$p/cmdline" || continue
        [[ ${#args[@]} -gt 0 ]] || continue # kernel thread or zombie
        base=${args[0]##*/}
        kind=
        case $base in
            containerd | setsid) kind=containerd ;;
            containerd-shim*) kind=shim ;;
            runc | ctr) kind=runc ;;
        esac
        if [[ -n $kind ]]; then
            for a in "${args[@]}"; do
                if [[ $a == "$DIR" || $a == "$DIR"/* || $a == *"=$DIR/"* ]]; then
                    printf '%s %s\n' "$pid" "$kind"
                    continue 2
                fi
            done
        fi
        # A process in our own mount namespace is no container process.
        [[ ! /proc/$pid/ns/mnt -ef /proc/self/ns/mnt ]] || continue
        # The mount at "/" of the process: in a container it is an overlay whose
        # lowerdir/upperdir lie in DIR's snapshotter.
        while read -r _ _ _ _ mp rest; do
            [[ $mp == / ]] || continue
            if [[ $rest == *"=$DIR/"* || $rest == *":$DIR/"* ]]; then
                printf '%s container\n' "$pid"
                continue 2
            fi
        done 2>/dev/null <"$p/mountinfo" || true
    done
}

ppid_of() {
    local k v
    while read -r k v; do
        if [[ $k == PPid: ]]; then
            printf '%s' "$v"
            return 0
        fi
    done 2>/dev/null <"/proc/$1/status" || true
}

stop_containerd() {
    local pid
    pid=$(containerd_pid)
    if [[ -n $pid ]]; then
        kill -TERM "$pid" 2>/dev/null || true
        if ! wait_gone "$pid" 100; then
            log "containerd (pid $pid) ignored SIGTERM for 10 s; sending SIGKILL"
            kill -KILL "$pid" 2>/dev/null || true
            wait_gone "$pid" 50 || die "containerd (pid $pid) survived SIGKILL"
        fi
    fi
    rm -f -- "$PIDFILE"
}

kill_everything() {
    local round pid kind n
    local containers=() shims=() others=()
    for ((round = 0; round < 100; round++)); do
        containers=() shims=() others=()
        while read -r pid kind; do
            case $kind in
                container | runc) containers+=("$pid") ;;
                shim) shims+=("$pid") ;;
                *) others+=("$pid") ;;
            esac
        done < <(tied_processes)
        n=$((${#containers[@]} + ${#shims[@]} + ${#others[@]}))
        [[ $n -gt 0 ]] || return 0
        # Container processes first (their shim still reaps them), then the shims.
        if [[ ${#containers[@]} -gt 0 ]]; then
            kill -KILL "${containers[@]}" 2>/dev/null || true
        elif [[ ${#shims[@]} -gt 0 || ${#others[@]} -gt 0 ]]; then
            kill -KILL "${shims[@]}" "${others[@]}" 2>/dev/null || true
        fi
        sleep 0.1
    done
    die "processes tied to $DIR survive SIGKILL: $(tied_processes | tr '\n' ' ')"
}

# ---------------------------------------------------------------- mounts

# Mount points at or under DIR, in /proc/self/mountinfo order (parents first).
mounts_under_dir() {
    local mp
    while read -r _ _ _ _ mp _; do
        mp=$(printf '%b' "$mp")
        if [[ $mp == "$DIR" || $mp == "$DIR"/* ]]; then
            printf '%s\n' "$mp"
        fi
    done </proc/self/mountinfo
}

unmount_all() {
    local mps=() i try errs=
    for ((try = 0; try < 20; try++)); do
        mapfile -t mps < <(mounts_under_dir)
        [[ ${#mps[@]} -gt 0 ]] || return 0
        # A second round is common when other instances change the mount table
        # at the same time (a read of mountinfo can then miss entries).
        if [[ $try -gt 1 ]]; then
            log "note: umount round $((try + 1)): still mounted: ${mps[*]} (${errs:-no umount errors})"
        fi
        errs=
        for ((i = ${#mps[@]} - 1; i >= 0; i--)); do
            errs+=$(umount -l -- "${mps[i]}" 2>&1) || true
        done
        sleep 0.05
    done
    die "still mounted under $DIR after 20 rounds of umount -l: ${mps[*]} ($errs)"
}

# ---------------------------------------------------------------- start

wait_ready() { # wait_ready PID LOG_OFFSET START_TIME
    local pid=$1 offset=$2 t0=$3 deadline
    deadline=$((SECONDS + START_TIMEOUT_S))
    local sock_ok=0
    while ((SECONDS < deadline)); do
        # (Not containerd_pid: right after the fork the child may not have
        # exec'd setsid/containerd yet.)
        if ! alive "$pid"; then
            fail_with_log "containerd (pid $pid) exited during startup"
        fi
        if [[ $sock_ok == 0 ]] && [[ -S $SOCK ]] &&
            timeout 5 ctr --connect-timeout 1s -a "$SOCK" version >/dev/null 2>&1; then
            sock_ok=1
            log "containerd socket answered after $(since "$t0" 2) s"
        fi
        # The CRI service answers (instead of "server is not initialized yet")
        # once it has recovered its state; it logs this line right before.
        if [[ $sock_ok == 1 ]] && tail -c "+$((offset + 1))" "$LOGFILE" | grep -q 'Start streaming server'; then
            log "CRI ready after $(since "$t0" 2) s"
            return 0
        fi
        sleep 0.05
    done
    fail_with_log "containerd did not get ready within $START_TIMEOUT_S s (socket answered: $sock_ok)"
}

fail_with_log() { die_with_log "$LOGFILE" 40 "$1"; }

launch_containerd() {
    local offset=0 t0 pid
    [[ -f $LOGFILE ]] && offset=$(stat -c %s "$LOGFILE")
    t0=$(now)
    # setsid: containerd gets its own session, so a Ctrl-C meant for the test
    # does not leave it half-dead. All its fds are redirected: a caller reading
    # this script's stdout must not wait for containerd to close it.
    # With the profile's Go settings (SCRATCH_CONTAINERD_PROFILE=device) in its environment,
    # which the shims inherit; the subshell execs, so $! is containerd's pid.
    (
        if [[ -s $ENV_FILE ]]; then
            mapfile -t env <"$ENV_FILE"
            export "${env[@]}"
        fi
        exec setsid containerd --config "$CONFIG" </dev/null >>"$LOGFILE" 2>&1
    ) &
    pid=$!
    printf '%s\n' "$pid" >"$PIDFILE"
    wait_ready "$pid" "$offset" "$t0"
}

# build_image VAR NAME FILE_STEM [CMD...]: builds the image archive unless the
# cache under DIR/images has it; stores its path in VAR.
build_image() {
    local var=$1 name=$2 stem=$3 key tar t0
    shift 3
    # The cache key covers the builder, the busybox binary and the command.
    # (A missing busybox is reported by build-image.sh below.)
    key=$({ cat -- "$SCRIPT_DIR/build-image.sh" "${BUSYBOX:-/bin/busybox}" 2>/dev/null || true; printf '%s\0' "$name" "$@"; } | sha256sum)
    tar=$IMAGE_CACHE/$stem-${key:0:12}.tar
    if [[ ! -f $tar ]]; then
        t0=$(now)
        rm -f -- "$IMAGE_CACHE/$stem"-*.tar
        bash "$SCRIPT_DIR/build-image.sh" "$tar" "$name" "$@" || die "building $name failed"
        log "built $name in $(since "$t0" 2) s"
    fi
    printf -v "$var" '%s' "$tar"
}

import_image() { # import_image TAR
    local t0 out
    t0=$(now)
    if ! out=$(ctr -a "$SOCK" -n k8s.io images import "$1" 2>&1); then
        die "importing $1 failed: $out"
    fi
    log "imported ${1##*/} in $(since "$t0" 2) s"
}

cmd_start() {
    # Checked again on the canonical path; this check only avoids creating DIR.
    [[ ${#TTRPC_SOCK} -le 107 ]] ||
        die "DIR is too long for a unix socket path ($TTRPC_SOCK is ${#TTRPC_SOCK} bytes, at most 107): use a shorter DIR"
    mkdir -p "$DIR"
    set_paths "$(cd "$DIR" && pwd -P)"
    check_prerequisites
    local pid
    pid=$(containerd_pid)
    [[ -z $pid ]] || die "a containerd for $DIR is already running (pid $pid); run: $0 stop $DIR"
    write_config
    local pause_tar busybox_tar
    build_image pause_tar "$PAUSE_IMAGE" pause sleep 2147483647
    build_image busybox_tar "$BUSYBOX_IMAGE" busybox sh
    with_shared_lock register_instance
    # A start that fails half-way must not leave containerd running.
    START_OK=0
    trap 'if [[ $START_OK != 1 ]]; then log "start failed: stopping what it started"; (cmd_stop) || true; fi' EXIT
    rm -f -- "$SOCK" "$TTRPC_SOCK"
    launch_containerd
    import_image "$pause_tar"
    import_image "$busybox_tar"
    START_OK=1
    printf '%s\n' "$SOCK"
}

cmd_restart() {
    [[ -d $DIR ]] || die "$DIR does not exist; run: $0 start $DIR"
    set_paths "$(cd "$DIR" && pwd -P)"
    [[ -f $CONFIG ]] || die "$CONFIG does not exist; run: $0 start $DIR"
    check_prerequisites
    stop_containerd
    rm -f -- "$SOCK" "$TTRPC_SOCK"
    launch_containerd
    printf '%s\n' "$SOCK"
}

# ---------------------------------------------------------------- stop

# Ids of every sandbox/container/task DIR's containerd ever knew about that still
# has a directory under DIR.
known_ids() {
    local d
    for d in "$DIR"/root/io.containerd.grpc.v1.cri/sandboxes/* \
        "$DIR"/root/io.containerd.grpc.v1.cri/containers/* \
        "$DIR"/state/io.containerd.grpc.v1.cri/sandboxes/* \
        "$DIR"/state/io.containerd.grpc.v1.cri/containers/* \
        "$DIR"/state/io.containerd.runtime.v2.task/*/*; do
        [[ -d $d ]] && printf '%s\n' "${d##*/}"
    done
    return 0
}

remove_shim_sockets() {
    local f addr
    for f in "$DIR"/state/io.containerd.runtime.v2.task/*/*/address; do
        [[ -f $f ]] || continue
        addr=$(<"$f")
        addr=${addr#unix://}
        if [[ $addr == /run/containerd/s/* && -S $addr ]]; then
            rm -f -- "$addr"
        fi
    done
}

# Containers created without the CRI plugin (ctr run) keep runc's state in the
# default /run/containerd/runc/NAMESPACE/ID; remove those whose state names DIR.
remove_default_runc_state() {
    local d ns id state
    for d in "$DIR"/state/io.containerd.runtime.v2.task/*/*; do
        [[ -d $d ]] || continue
        id=${d##*/}
        ns=${d%/*}
        ns=${ns##*/}
        state=/run/containerd/runc/$ns/$id/state.json
        if [[ -f $state ]] && grep -qF -- "\"$DIR/" "$state"; then
            rm -rf -- "/run/containerd/runc/$ns/$id"
        fi
    done
}

# The portmap plugin's hostPort rules for the given sandbox ids: a killed pod
# gets no CNI DEL, so its DNAT rule and CNI-DN-* chain would stay. Rules are
# deleted by their full spec (not by number), so concurrent changes are safe.
release_portmaps() {
    command -v iptables >/dev/null || return 0
    local -A want=()
    local id line proto ports chain
    local chains=()
    for id in "$@"; do want[$id]=1; done
    local re='^-A CNI-HOSTPORT-DNAT -p ([a-z0-9]+) -m comment --comment "dnat name: \\"'
    re+="$NETWORK_NAME"
    re+='\\" id: \\"([0-9a-f]+)\\"" -m multiport --dports ([0-9,:]+) -j (CNI-DN-[0-9a-f]+)$'
    while IFS= read -r line; do
        [[ $line =~ $re ]] || continue
        proto=${BASH_REMATCH[1]} id=${BASH_REMATCH[2]} ports=${BASH_REMATCH[3]} chain=${BASH_REMATCH[4]}
        [[ -n ${want[$id]+x} ]] || continue
        iptables -w -t nat -D CNI-HOSTPORT-DNAT -p "$proto" -m comment \
            --comment "dnat name: \"$NETWORK_NAME\" id: \"$id\"" \
            -m multiport --dports "$ports" -j "$chain" 2>/dev/null || true
        chains+=("$chain")
    done < <(iptables -w -t nat -S CNI-HOSTPORT-DNAT 2>/dev/null || true)
    for chain in "${chains[@]}"; do
        iptables -w -t nat -F "$chain" 2>/dev/null || true
        iptables -w -t nat -X "$chain" 2>/dev/null || true
    done
}

cmd_stop() {
    if [[ ! -d $DIR ]]; then
        # Nothing can be running for a missing DIR; still forget it.
        set_paths "$DIR"
        with_shared_lock deregister_instance
        return 0
    fi
    set_paths "$(cd "$DIR" && pwd -P)"
    stop_containerd
    kill_everything
    local ids=() id
    mapfile -t ids < <(known_ids | sort -u)
    remove_shim_sockets
    remove_default_runc_state
    if [[ ${#ids[@]} -gt 0 ]]; then
        with_ipam_lock release_ips "${ids[@]}"
        release_portmaps "${ids[@]}"
        for id in "${ids[@]}"; do
            rm -f -- "/var/lib/cni/results/$NETWORK_NAME-$id-"* "/var/lib/cni/results/cni-loopback-$id-"*
        done
    fi
    unmount_all
    # state is volatile (like /run after a reboot): the next start begins clean.
    rm -rf --one-file-system -- "$DIR/state" "$DIR/runc"
    rm -f -- "$SOCK" "$TTRPC_SOCK" "$PIDFILE"
    with_shared_lock deregister_instance
    log "stopped $DIR"
}

case $cmd in
    start) set_paths "$2"; cmd_start ;;
    stop) set_paths "$2"; cmd_stop ;;
    restart) set_paths "$2"; cmd_restart ;;
    *) usage ;;
esac
