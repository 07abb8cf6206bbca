# shellcheck shell=bash
# Sourced by scripts/conformance.sh and scripts/compare-kubelet.sh: runs the
# upstream kubelet on a shared machine without letting it change the machine.
#
# Whatever its flags say, the kubelet sets kernel tunables under /proc/sys
# (setupKernelTunables), creates /var/lib/kubelet/device-plugins and links in
# /var/log/containers. It runs in a mount namespace of its own where those are
# bind mounts of files under NODE_DIR/host. Its root directory is under
# NODE_DIR, which is made a shared mount first, so the volumes it mounts there
# (tmpfs for secrets and tokens) reach the machine's namespace, where containerd
# looks for them. The cgroup root it is given is created in every mounted
# hierarchy first (it refuses a cgroupRoot that does not exist) and removed by
# node_dir_cleanup.
#
#   upstream_kubelet_prepare NODE_DIR CGROUP_ROOT
#   upstream_kubelet_launch NODE_DIR LOG KUBELET ARGS...   (sets UPSTREAM_KUBELET_PID)
#   upstream_kubelet_argv NODE_DIR KUBELET ARGS...         (sets UPSTREAM_KUBELET_ARGV: the
#                                                          command launch runs, for a caller
#                                                          that starts it its own way)
#   node_dir_cleanup NODE_DIR CGROUP_ROOT                 (after the node and its
#                                                          pods are gone)
#
# The caller sources scripts/lib/common.sh first (log, die, cgroup_mounts).

# The kubelet config lines of a standalone kubelet on loopback (the comparisons'): nothing
# authenticated, everything allowed.
# shellcheck disable=SC2034 # used by the scripts that source this one
UPSTREAM_KUBELET_STANDALONE_AUTH='authentication:
  anonymous:
    enabled: false
  webhook:
    enabled: false
authorization:
  mode: AlwaysAllow'

# The tunables setupKernelTunables may write.
UPSTREAM_KUBELET_TUNABLES=(vm/overcommit_memory vm/panic_on_oom kernel/panic kernel/panic_on_oops
    kernel/keys/root_maxkeys kernel/keys/root_maxbytes)

upstream_kubelet_prepare() {
    local dir=$1 cgroup_root=$2 t mnt host=$1/host
    mkdir -p "$dir"
    if ! awk -v d="$dir" '$5 == d { found = 1 } END { exit !found }' /proc/self/mountinfo; then
        mount --bind "$dir" "$dir" || die "mount --bind $dir failed"
    fi
    mount --make-shared "$dir" || die "mount --make-shared $dir failed"
    mkdir -p "$host/sys" "$host/var-lib/kubelet/device-plugins" "$host/var-log/containers"
    for t in "${UPSTREAM_KUBELET_TUNABLES[@]}"; do
        cat "/proc/sys/$t" >"$host/sys/${t//\//.}" || die "cannot read /proc/sys/$t"
    done
    while read -r mnt; do
        mkdir -p "$mnt$cgroup_root" || die "cannot create the cgroup $mnt$cgroup_root"
    done < <(cgroup_mounts)
}

upstream_kubelet_argv() {
    local dir=$1
    shift
    # shellcheck disable=SC2016 # expanded by the inner bash
    local setup='
        set -e
        host=$1
        shift
        for t in '"${UPSTREAM_KUBELET_TUNABLES[*]}"'; do
            mount --bind "$host/sys/${t//\//.}" "/proc/sys/$t"
        done
        mount --bind "$host/var-lib" /var/lib
        mount --bind "$host/var-log" /var/log
        exec "$@"'
    # --propagation unchanged: the machine's mounts are private, so nothing
    # mounted in the new namespace reaches the machine's, except below the
    # shared NODE_DIR.
    # shellcheck disable=SC2034 # read by the caller
    UPSTREAM_KUBELET_ARGV=(unshare --mount --propagation unchanged -- bash -c "$setup" _ "$dir/host" "$@")
}

upstream_kubelet_launch() {
    local dir=$1 logfile=$2
    shift 2
    upstream_kubelet_argv "$dir" "$@"
    "${UPSTREAM_KUBELET_ARGV[@]}" </dev/null >"$logfile" 2>&1 &
    # shellcheck disable=SC2034 # read by the caller
    UPSTREAM_KUBELET_PID=$!
}

# Unmounts everything under NODE_DIR (volumes a node mounted, the shared bind
# mount), deepest first, and removes CGROUP_ROOT in every hierarchy.
node_dir_cleanup() {
    local dir=$1 cgroup_root=$2 mp mnt
    while read -r mp; do
        umount -l -- "$mp" 2>/dev/null || log "warning: could not unmount $mp"
    done < <(awk -v d="$dir" '$5 == d || index($5, d "/") == 1 { print $5 }' /proc/self/mountinfo | sort -r)
    while read -r mnt; do
        [[ -d $mnt$cgroup_root ]] || continue
        find "$mnt$cgroup_root" -depth -type d -exec rmdir {} \; 2>/dev/null ||
            log "warning: could not remove every cgroup under $mnt$cgroup_root"
    done < <(cgroup_mounts)
}
