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
