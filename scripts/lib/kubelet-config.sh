# shellcheck shell=bash
# The KubeletConfiguration file the scripts give picolet and the upstream kubelet.
#
#   . "$(dirname -- "${BASH_SOURCE[0]}")/lib/kubelet-config.sh"
#   kubelet_config staticPodPath="$DIR/manifests" healthzPort="$PORT" "evictionHard:
#     memory.available: \"0\"" >"$DIR/config.yaml"
#
# Prints the apiVersion and kind, then each argument in order: FIELD=VALUE as `FIELD: VALUE`,
# anything else (a field with its indented lines, a comment, an empty string) as it is, on
# lines of its own.

kubelet_config() {
    local arg
    printf 'apiVersion: kubelet.config.k8s.io/v1beta1\nkind: KubeletConfiguration\n'
    for arg in "$@"; do
        if [[ $arg =~ ^[A-Za-z][A-Za-z0-9]*= ]]; then
            printf '%s: %s\n' "${arg%%=*}" "${arg#*=}"
        else
            printf '%s\n' "$arg"
        fi
    done
}

# The eviction and image GC thresholds of a node on the machine's shared disk (scripts/
# conformance.sh, scripts/cluster.sh), an argument of kubelet_config; the comment goes into the
# file.
# shellcheck disable=SC2034 # read by the scripts that source this
SHARED_DISK_CONFIG="# The machine's disk, not the node, is what these settings answer: a shared development
# disk with some 10 % free puts a node under disk pressure at upstream's defaults
# (imagefs.available 15 %), which taints it NoSchedule and fails most specs; and image GC
# would remove the test images imported offline.
evictionHard:
  memory.available: 100Mi
  nodefs.available: 1%
  nodefs.inodesFree: 1%
  imagefs.available: 1%
imageGCHighThresholdPercent: 100
imageGCLowThresholdPercent: 99"
