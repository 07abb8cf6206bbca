#!/usr/bin/env bash
# Upstream's image volume [Conformance] spec ("[sig-node] ImageVolume should
# succeed with pod and pull policy of Always") against picolet on containerd
# 2.x, through scripts/conformance.sh. The spec pulls its volume image
# (registry.k8s.io/e2e-test-images/kitten) with pullPolicy Always, so the node
# must reach a registry that serves it: this script starts the Distribution
# registry (scripts/k8s-build.sh --tools) on a free loopback port, pushes a
# stand-in of that image into it, and gives the scratch containerd a
# hosts.toml that sends registry.k8s.io to it (a mirror; nothing leaves the
# machine). Run as root.
#
# The stand-in holds what the spec reads from the mounted volume: data.json
# naming kitten.jpg, and an etc/os-release naming Alpine Linux (upstream's image
# is Alpine's; this one is a busybox tree made here, and says so in its
# os-release's comment).
#
# Environment: PICOLET_BIN, SCRATCH_CONTAINERD_BIN (default: the cached 2.x),
# CONFORMANCE_DIR (default /tmp/pconf-iv), as scripts/conformance.sh takes them.
# shellcheck disable=SC2317 # cleanup runs from the EXIT trap
set -euo pipefail
REPO=$(cd "$(dirname -- "${BASH_SOURCE[0]}")/.." && pwd)
PROG="image-volume-conformance"
# shellcheck source=scripts/lib/common.sh
. "$REPO/scripts/lib/common.sh"
# shellcheck source=scripts/lib/registry-mirror.sh
. "$REPO/scripts/lib/registry-mirror.sh"
[[ $(id -u) == 0 ]] || die "run as root (containerd, runc and CNI need it)"
command -v skopeo >/dev/null || die "skopeo is missing (scripts/install-deps.sh installs it)"

WORK=$(mktemp -d /tmp/picolet-iv.XXXXXX)
MIRROR_PID=
cleanup() {
    if [[ -n $MIRROR_PID ]] && alive "$MIRROR_PID"; then
        kill "$MIRROR_PID" 2>/dev/null || true
        wait "$MIRROR_PID" 2>/dev/null || true
    fi
    rm -rf -- "$WORK"
}
trap cleanup EXIT

TOOLS=$("$REPO/scripts/k8s-build.sh" --tools | tail -n 1) || die "scripts/k8s-build.sh --tools failed"
SCRATCH_CONTAINERD_BIN=${SCRATCH_CONTAINERD_BIN:-$("$REPO/scripts/k8s-build.sh" --containerd | tail -n 1)} ||
    die "scripts/k8s-build.sh --containerd failed"
export SCRATCH_CONTAINERD_BIN

# The image's name as the pinned e2e.test asks for it.
E2E_BIN=$("$REPO/scripts/k8s-build.sh" --e2e | tail -n 1) || die "scripts/k8s-build.sh --e2e failed"
go=$(command -v go || printf '%s' /usr/local/go/bin/go)
K8S_SRC=$(cd "$REPO/tests/k8s-e2e" && GOFLAGS=-mod=readonly GOMODCACHE=/var/cache/picolet-k8s/gomod "$go" list -m -f '{{.Dir}}' k8s.io/kubernetes) ||
    die "cannot locate the k8s.io/kubernetes module source (scripts/k8s-build.sh --e2e downloads it)"
MANIFEST=$K8S_SRC/test/utils/image/manifest.go
DIR=$WORK
# shellcheck source=scripts/lib/test-images.sh
. "$REPO/scripts/lib/test-images.sh"
kitten=$(image_ref Kitten) || die "cannot read the kitten image's name from $MANIFEST"
[[ $kitten == registry.k8s.io/* ]] || die "the kitten image is not on registry.k8s.io: $kitten"
: "$E2E_BIN"

# The stand-in image.
mkdir -p "$WORK/kitten/etc"
printf '{"image": "kitten.jpg", "made": "a stand-in built by picolet'"'"'s scripts/image-volume-conformance.sh"}\n' >"$WORK/kitten/data.json"
printf '%s\n' '# A stand-in for the e2e kitten image, built from busybox; the spec reads the name below.' \
    'NAME="Alpine Linux"' 'ID=alpine' >"$WORK/kitten/etc/os-release"
bash "$REPO/scripts/build-image.sh" --add "$WORK/kitten" "$WORK/kitten.tar" "$kitten" sh >/dev/null ||
    die "building the stand-in of $kitten failed"

# The registry, on loopback, with the stand-in; containerd sends registry.k8s.io to it.
port=$(free_port)
mirror_start "$TOOLS" "$WORK/registry" 127.0.0.1 "$port" "$WORK/registry.log"
skopeo copy --quiet --dest-tls-verify=false "oci-archive:$WORK/kitten.tar" "docker://127.0.0.1:$port/${kitten#registry.k8s.io/}" ||
    die "pushing the stand-in to the registry failed"
log "registry on 127.0.0.1:$port serves ${kitten#registry.k8s.io/}"
mirror_hosts "$WORK/hosts" "127.0.0.1:$port"
export SCRATCH_CONTAINERD_REGISTRY_HOSTS=$WORK/hosts

printf '%s\n' '[sig-node] ImageVolume should succeed with pod and pull policy of Always [LinuxOnly] [MinimumKubeletVersion:1.35] [Conformance]' \
    >"$WORK/specs.txt"
CONFORMANCE_DIR=${CONFORMANCE_DIR:-/tmp/pconf-iv} SPECS=$WORK/specs.txt PROCS=1 bash "$REPO/scripts/conformance.sh"
