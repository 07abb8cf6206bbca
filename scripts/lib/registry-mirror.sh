# shellcheck shell=bash
# A mirror of registry.k8s.io for the tests: the Distribution registry
# (scripts/k8s-build.sh --tools) serving plain HTTP on an address of this
# machine, and the hosts.toml that sends registry.k8s.io to it (containerd's
# registry host configuration, which containerd reads at every pull). An image
# the mirror lacks falls through to registry.k8s.io, which is not reachable
# here, as a name that does not exist would. Sourced by scripts/cluster.sh and
# scripts/image-volume-conformance.sh, after scripts/lib/common.sh.
#
#   mirror_start TOOLS ROOT ADDR PORT LOG [PIDFILE]
#                                          # config and data under ROOT; sets
#                                          # MIRROR_PID (and writes PIDFILE) at
#                                          # once; returns once it answers
#   mirror_hosts HOSTS_DIR ADDR:PORT       # HOSTS_DIR/registry.k8s.io/hosts.toml,
#                                          # written whole

mirror_start() {
    local tools=$1 root=$2 addr=$3 port=$4 log=$5 pidfile=${6:-} deadline
    mkdir -p -- "$root/data"
    printf 'version: 0.1\nlog:\n  level: warn\nstorage:\n  filesystem:\n    rootdirectory: %s\nhttp:\n  addr: %s:%s\n  secret: picolet-test\n' \
        "$root/data" "$addr" "$port" >"$root/config.yml"
    setsid "$tools/registry" serve "$root/config.yml" </dev/null >>"$log" 2>&1 &
    MIRROR_PID=$!
    [[ -z $pidfile ]] || printf '%s\n' "$MIRROR_PID" >"$pidfile"
    deadline=$((SECONDS + 30))
    until curl -fsS "http://$addr:$port/v2/" >/dev/null 2>&1; do
        alive "$MIRROR_PID" || { tail -n 20 "$log" >&2; die "the registry mirror exited (log $log)"; }
        ((SECONDS < deadline)) || die "the registry mirror on $addr:$port did not answer within 30 s (log $log)"
        sleep 0.2
    done
}

mirror_hosts() {
    local dir=$1/registry.k8s.io
    mkdir -p -- "$dir"
    printf 'server = "https://registry.k8s.io"\n\n[host."http://%s"]\n  capabilities = ["pull", "resolve"]\n' \
        "$2" >"$dir/hosts.toml.tmp"
    mv -f -- "$dir/hosts.toml.tmp" "$dir/hosts.toml"
}
