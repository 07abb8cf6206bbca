#!/usr/bin/env bash
# Builds the control plane the cluster tests run against, from the Go module in
# tests/k8s: kube-apiserver, kube-controller-manager, kube-scheduler and kubectl
# of the pinned Kubernetes release, and etcd (the etcd server module's own main
# package). The binaries go to a cache directory keyed by the versions, outside
# the work tree; a binary already there is not built again. Prints that bin
# directory as the last line of stdout; progress and figures go to stderr.
#
#   scripts/k8s-build.sh            build what is missing, print the bin directory
#   scripts/k8s-build.sh --key      print the cache key only (builds nothing)
#   scripts/k8s-build.sh --e2e [--key]
#                                   the same for the node conformance tooling
#                                   instead, from the Go module in tests/k8s-e2e
#                                   (same Kubernetes release, refused otherwise):
#                                   e2e.test (`go test -c k8s.io/kubernetes/test/e2e`),
#                                   ginkgo's CLI, the upstream kubelet, agnhost
#                                   (version set to its image tag) and nnp (the
#                                   nonewprivs test image's program); a cache key
#                                   and bin directory of their own, so the control
#                                   plane's key never moves with them
#   scripts/k8s-build.sh --tools [--key]
#                                   the same for the other upstream programs the
#                                   tests run beside the control plane, from the
#                                   Go module in tests/k8s-tools (one module, so
#                                   the packages they share are built once):
#                                   metrics-server (version set to its module's)
#                                   the Distribution registry (its version
#                                   variable set likewise) and konnectivity-server
#                                   (the apiserver network proxy's server, whose
#                                   version `go version -m` reads)
#   scripts/k8s-build.sh --containerd [--key]
#                                   the same for containerd 2.x, the runtime
#                                   current clusters run (the tests default to the
#                                   machine's containerd 1.6), from the Go module in
#                                   tests/containerd2: containerd, its runc shim
#                                   (containerd-shim-runc-v2) and ctr, version set
#                                   to the module's; scratch-containerd.sh runs
#                                   them when SCRATCH_CONTAINERD_BIN names that
#                                   bin directory
#   scripts/k8s-build.sh --cluster [--key]
#                                   the same for the node components of the
#                                   cluster harness (scripts/cluster.sh):
#                                   kube-proxy (cmd/kube-proxy of the same
#                                   Kubernetes release, from the Go module in
#                                   tests/k8s-cluster, refused otherwise) and
#                                   CoreDNS (tests/coredns/main.go, its own
#                                   module: the plugins a cluster DNS uses)
#   scripts/k8s-build.sh --containerd --arch arm64 [--key]
#                                   the same containerd cross-built for arm64
#                                   (GOARCH=arm64), for the arm64 guest of
#                                   scripts/guest.sh: a key of its own; checked
#                                   with `go version -m` instead of being run
#
# Environment:
#   PICOLET_K8S_CACHE     cache root (default /var/cache/picolet-k8s); it holds
#                         <key>/bin, and the Go module and build caches of the
#                         build (gomod/, gocache/), kept apart from the user's
#   PICOLET_K8S_KEEP_GOCACHE=1
#                         keep the Go build cache (several GB) after a complete
#                         build; by default it is removed once every binary is in
#                         the cache, since nothing reads it again until the pins
#                         change
#   GO                    the go command (default: go on PATH, then /usr/local/go/bin/go)
#
# The Go builds run under `nice -n 19`: the machine is shared.
set -euo pipefail

ROOT=$(cd "$(dirname -- "${BASH_SOURCE[0]}")/.." && pwd)
MOD=$ROOT/tests/k8s
E2E_MOD=$ROOT/tests/k8s-e2e
TOOLS_MOD=$ROOT/tests/k8s-tools
CONTAINERD_MOD=$ROOT/tests/containerd2
CLUSTER_MOD=$ROOT/tests/k8s-cluster
COREDNS_MOD=$ROOT/tests/coredns
CACHE_ROOT=${PICOLET_K8S_CACHE:-/var/cache/picolet-k8s}

PROG=k8s-build
# shellcheck source=scripts/lib/common.sh
. "$ROOT/scripts/lib/common.sh"

# name|package: the binaries, in build order (the apiserver first: the others
# share most of its packages). A package marked "test:" is built with
# `go test -c` (its test binary).
TARGETS=(
    "kube-apiserver|k8s.io/kubernetes/cmd/kube-apiserver"
    "kube-controller-manager|k8s.io/kubernetes/cmd/kube-controller-manager"
    "kube-scheduler|k8s.io/kubernetes/cmd/kube-scheduler"
    "kubectl|k8s.io/kubernetes/cmd/kubectl"
    "etcd|go.etcd.io/etcd/server/v3"
)
E2E_TARGETS=(
    "kubelet|k8s.io/kubernetes/cmd/kubelet"
    "ginkgo|github.com/onsi/ginkgo/v2/ginkgo"
    "agnhost|k8s.io/kubernetes/test/images/agnhost"
    "nnp|k8s.io/kubernetes/test/images/nonewprivs"
    "e2e.test|test:k8s.io/kubernetes/test/e2e"
)
TOOLS_TARGETS=(
    "metrics-server|sigs.k8s.io/metrics-server/cmd/metrics-server"
    "registry|github.com/distribution/distribution/v3/cmd/registry"
    "konnectivity-server|sigs.k8s.io/apiserver-network-proxy/cmd/server"
)
# name|package|module directory (default: the build's one module)
CLUSTER_TARGETS=(
    "kube-proxy|k8s.io/kubernetes/cmd/kube-proxy"
    "coredns|picolet.local/tests/coredns|$COREDNS_MOD"
)
CONTAINERD_TARGETS=(
    "containerd|github.com/containerd/containerd/v2/cmd/containerd"
    "containerd-shim-runc-v2|github.com/containerd/containerd/v2/cmd/containerd-shim-runc-v2"
    "ctr|github.com/containerd/containerd/v2/cmd/ctr"
)

find_go() {
    if [[ -n ${GO:-} ]]; then
        [[ -x $GO ]] || command -v "$GO" >/dev/null || die "GO=$GO is not an executable"
        printf '%s' "$GO"
    elif command -v go >/dev/null; then
        command -v go
    elif [[ -x /usr/local/go/bin/go ]]; then
        printf '%s' /usr/local/go/bin/go
    else
        die "no go command: not on PATH, not at /usr/local/go/bin/go (scripts/install-deps.sh names what is needed)"
    fi
}

# module_version MODULE [MODDIR]: the version MODDIR/go.mod (default
# tests/k8s/go.mod) requires.
module_version() {
    local v mod=${2:-$MOD}
    v=$(awk -v m="$1" '($1 == m || ($1 == "require" && $2 == m)) && $0 !~ /=>/ { print ($1 == m ? $2 : $3); exit }' "$mod/go.mod")
    [[ -n $v ]] || die "$mod/go.mod does not require $1"
    printf '%s' "$v"
}

E2E=false
TOOLS=false
CONTAINERD=false
CLUSTER=false
KEY_ONLY=false
GOARCH_WANT=
builds=0
while [[ $# -gt 0 ]]; do
    case $1 in
        --e2e) E2E=true builds=$((builds + 1)) ;;
        --tools) TOOLS=true builds=$((builds + 1)) ;;
        --containerd) CONTAINERD=true builds=$((builds + 1)) ;;
        --cluster) CLUSTER=true builds=$((builds + 1)) ;;
        --key) KEY_ONLY=true ;;
        --arch) [[ $# -ge 2 ]] || die "--arch needs amd64 or arm64"; GOARCH_WANT=$2; shift ;;
        *) die "usage: $0 [--e2e | --tools | --cluster | --containerd [--arch amd64|arm64]] [--key]" ;;
    esac
    shift
done
[[ $builds -le 1 ]] || die "--e2e, --tools, --cluster and --containerd are separate builds: ask for one at a time"
case $GOARCH_WANT in
    '' | amd64) GOARCH_WANT= ;;
    arm64) $CONTAINERD || die "--arch arm64 is for --containerd only" ;;
    *) die "--arch must be amd64 or arm64, not '$GOARCH_WANT'" ;;
esac

GO=$(find_go)
[[ -f $MOD/go.mod && -f $MOD/go.sum ]] || die "$MOD/go.mod or go.sum is missing"
K8S_VERSION=$(module_version k8s.io/kubernetes)
ETCD_VERSION=$(module_version go.etcd.io/etcd/server/v3)
[[ $K8S_VERSION =~ ^v1\.([0-9]+)\.([0-9]+)$ ]] ||
    die "tests/k8s/go.mod: k8s.io/kubernetes version $K8S_VERSION is not a release vX.Y.Z"
K8S_MINOR=${BASH_REMATCH[1]}
# The toolchain go selects inside the module: the local one, or the one it
# switches to when go.mod asks for a newer Go (GOTOOLCHAIN=auto).
GO_VERSION=$(cd "$MOD" && "$GO" env GOVERSION) ||
    die "$GO env GOVERSION failed in $MOD (tests/k8s/go.mod needs $(awk '$1 == "go" { print "go " $2 }' "$MOD/go.mod"))"

# Everything that changes the binaries is in the key.
LDFLAGS="-s -w"
for pkg in k8s.io/client-go/pkg/version k8s.io/component-base/version; do
    LDFLAGS+=" -X $pkg.gitVersion=$K8S_VERSION -X $pkg.gitMajor=1 -X $pkg.gitMinor=$K8S_MINOR -X $pkg.gitTreeState=clean"
done
BUILD_FLAGS=(-trimpath -buildvcs=false -ldflags "$LDFLAGS")
if $E2E; then
    [[ -f $E2E_MOD/go.mod && -f $E2E_MOD/go.sum ]] || die "$E2E_MOD/go.mod or go.sum is missing"
    E2E_K8S_VERSION=$(module_version k8s.io/kubernetes "$E2E_MOD")
    [[ $E2E_K8S_VERSION == "$K8S_VERSION" ]] ||
        die "tests/k8s-e2e/go.mod pins k8s.io/kubernetes $E2E_K8S_VERSION, tests/k8s/go.mod $K8S_VERSION: they must be the same release"
    GINKGO_VERSION=$(module_version github.com/onsi/ginkgo/v2 "$E2E_MOD")
    # agnhost reports the version of its image (test/images/agnhost/VERSION,
    # the tag test/utils/image/manifest.go gives it).
    K8S_SRC=$(cd "$E2E_MOD" && GOFLAGS=-mod=readonly GOMODCACHE=$CACHE_ROOT/gomod "$GO" list -m -f '{{.Dir}}' k8s.io/kubernetes 2>/dev/null) || K8S_SRC=
    if [[ -z $K8S_SRC || ! -f $K8S_SRC/test/images/agnhost/VERSION ]]; then
        (cd "$E2E_MOD" && GOFLAGS=-mod=readonly GOMODCACHE=$CACHE_ROOT/gomod nice -n 19 "$GO" mod download k8s.io/kubernetes) >&2 ||
            die "go mod download k8s.io/kubernetes failed in $E2E_MOD"
        K8S_SRC=$(cd "$E2E_MOD" && GOFLAGS=-mod=readonly GOMODCACHE=$CACHE_ROOT/gomod "$GO" list -m -f '{{.Dir}}' k8s.io/kubernetes) ||
            die "go list -m k8s.io/kubernetes failed in $E2E_MOD"
    fi
    AGNHOST_VERSION=$(<"$K8S_SRC/test/images/agnhost/VERSION")
    MOD=$E2E_MOD
    TARGETS=("${E2E_TARGETS[@]}")
    KEY_HASH=$({ grep -v '^[[:space:]]*//' "$MOD/go.mod"; cat "$MOD/go.sum"; printf '%s\0' CGO_ENABLED=0 "${BUILD_FLAGS[@]}" "${TARGETS[@]}" "agnhost $AGNHOST_VERSION"; } | sha256sum)
    KEY=k8s-e2e-$K8S_VERSION-$GO_VERSION-${KEY_HASH:0:12}
elif $TOOLS; then
    [[ -f $TOOLS_MOD/go.mod && -f $TOOLS_MOD/go.sum ]] || die "$TOOLS_MOD/go.mod or go.sum is missing"
    METRICS_SERVER_VERSION=$(module_version sigs.k8s.io/metrics-server "$TOOLS_MOD")
    REGISTRY_VERSION=$(module_version github.com/distribution/distribution/v3 "$TOOLS_MOD")
    KONNECTIVITY_VERSION=$(module_version sigs.k8s.io/apiserver-network-proxy "$TOOLS_MOD")
    GO_VERSION=$(cd "$TOOLS_MOD" && "$GO" env GOVERSION) || die "$GO env GOVERSION failed in $TOOLS_MOD"
    MOD=$TOOLS_MOD
    TARGETS=("${TOOLS_TARGETS[@]}")
    KEY_HASH=$({ grep -v '^[[:space:]]*//' "$MOD/go.mod"; cat "$MOD/go.sum"; printf '%s\0' CGO_ENABLED=0 "${BUILD_FLAGS[@]}" "${TARGETS[@]}"; } | sha256sum)
    KEY=k8s-tools-metrics-server-$METRICS_SERVER_VERSION-$GO_VERSION-${KEY_HASH:0:12}
elif $CLUSTER; then
    for m in "$CLUSTER_MOD" "$COREDNS_MOD"; do
        [[ -f $m/go.mod && -f $m/go.sum ]] || die "$m/go.mod or go.sum is missing"
    done
    CLUSTER_K8S_VERSION=$(module_version k8s.io/kubernetes "$CLUSTER_MOD")
    [[ $CLUSTER_K8S_VERSION == "$K8S_VERSION" ]] ||
        die "tests/k8s-cluster/go.mod pins k8s.io/kubernetes $CLUSTER_K8S_VERSION, tests/k8s/go.mod $K8S_VERSION: they must be the same release"
    COREDNS_VERSION=$(module_version github.com/coredns/coredns "$COREDNS_MOD")
    GO_VERSION=$(cd "$CLUSTER_MOD" && "$GO" env GOVERSION) || die "$GO env GOVERSION failed in $CLUSTER_MOD"
    COREDNS_GO_VERSION=$(cd "$COREDNS_MOD" && "$GO" env GOVERSION) || die "$GO env GOVERSION failed in $COREDNS_MOD"
    [[ $COREDNS_GO_VERSION == "$GO_VERSION" ]] ||
        die "tests/coredns selects $COREDNS_GO_VERSION, tests/k8s-cluster $GO_VERSION: one key holds one toolchain"
    MOD=$CLUSTER_MOD
    TARGETS=("${CLUSTER_TARGETS[@]}")
    KEY_HASH=$({ for m in "$CLUSTER_MOD" "$COREDNS_MOD"; do grep -v '^[[:space:]]*//' "$m/go.mod"; cat "$m/go.sum"; done
        grep -v '^[[:space:]]*//' "$COREDNS_MOD/main.go"; printf '%s\0' CGO_ENABLED=0 "${BUILD_FLAGS[@]}" "${TARGETS[@]#*$ROOT/}"; } | sha256sum)
    KEY=k8s-cluster-$K8S_VERSION-coredns-$COREDNS_VERSION-$GO_VERSION-${KEY_HASH:0:12}
elif $CONTAINERD; then
    [[ -f $CONTAINERD_MOD/go.mod && -f $CONTAINERD_MOD/go.sum ]] || die "$CONTAINERD_MOD/go.mod or go.sum is missing"
    CONTAINERD_VERSION=$(module_version github.com/containerd/containerd/v2 "$CONTAINERD_MOD")
    GO_VERSION=$(cd "$CONTAINERD_MOD" && "$GO" env GOVERSION) || die "$GO env GOVERSION failed in $CONTAINERD_MOD"
    MOD=$CONTAINERD_MOD
    TARGETS=("${CONTAINERD_TARGETS[@]}")
    # (containerd's version variables, as its own Makefile sets them)
    BUILD_FLAGS=(-trimpath -buildvcs=false -ldflags "-s -w -X github.com/containerd/containerd/v2/version.Version=$CONTAINERD_VERSION -X github.com/containerd/containerd/v2/version.Revision=module")
    KEY_HASH=$({ grep -v '^[[:space:]]*//' "$MOD/go.mod"; cat "$MOD/go.sum"; printf '%s\0' CGO_ENABLED=0 "${BUILD_FLAGS[@]}" "${TARGETS[@]}"; } | sha256sum)
    KEY=containerd-$CONTAINERD_VERSION-$GO_VERSION-${KEY_HASH:0:12}
    if [[ -n $GOARCH_WANT ]]; then
        KEY_HASH=$(printf '%s\0' "$KEY_HASH" "GOARCH=$GOARCH_WANT" | sha256sum)
        KEY=containerd-$CONTAINERD_VERSION-$GO_VERSION-$GOARCH_WANT-${KEY_HASH:0:12}
        export GOARCH=$GOARCH_WANT
    fi
else
    # (go.mod's comment lines are left out: they change no binary.)
    KEY_HASH=$({ grep -v '^[[:space:]]*//' "$MOD/go.mod"; cat "$MOD/go.sum"; printf '%s\0' CGO_ENABLED=0 "${BUILD_FLAGS[@]}" "${TARGETS[@]}"; } | sha256sum)
    KEY=k8s-$K8S_VERSION-etcd-$ETCD_VERSION-$GO_VERSION-${KEY_HASH:0:12}
fi

if $KEY_ONLY; then
    printf '%s\n' "$KEY"
    exit 0
fi

BIN=$CACHE_ROOT/$KEY/bin
export GOMODCACHE=$CACHE_ROOT/gomod
export GOCACHE=$CACHE_ROOT/gocache
export CGO_ENABLED=0
export GOFLAGS=-mod=readonly
mkdir -p "$BIN" || die "cannot create $BIN (set PICOLET_K8S_CACHE to a writable directory)"

# binary_ok NAME: the cached binary runs and reports the pinned version.
binary_ok() {
    local out want
    [[ -x $BIN/$1 ]] || return 1
    if [[ -n $GOARCH_WANT ]]; then
        # A foreign binary: its build information instead of a run.
        out=$("$GO" version -m "$BIN/$1" 2>/dev/null) || return 1
        [[ $out == *"GOARCH=$GOARCH_WANT"* && $out == *"github.com/containerd/containerd/v2	$CONTAINERD_VERSION"* ]]
        return
    fi
    case $1 in
        kubectl) out=$("$BIN/$1" version --client 2>/dev/null) ;;
        ginkgo) out=$("$BIN/$1" version 2>/dev/null) ;;
        nnp) out=$("$BIN/$1" 2>/dev/null) ;;
        containerd-shim-runc-v2) out=$("$BIN/$1" -v 2>/dev/null) ;;
        konnectivity-server) out=$("$GO" version -m "$BIN/$1" 2>/dev/null) ;;
        coredns) out=$("$BIN/$1" -version 2>/dev/null) ;;
        *) out=$("$BIN/$1" --version 2>/dev/null) ;;
    esac || return 1
    case $1 in
        etcd) want="etcd Version: ${ETCD_VERSION#v}" ;;
        ginkgo) want="Ginkgo Version ${GINKGO_VERSION#v}" ;;
        agnhost) want="version $AGNHOST_VERSION" ;;
        metrics-server) want=$METRICS_SERVER_VERSION ;;
        registry) want=" github.com/distribution/distribution/v3 $REGISTRY_VERSION" ;;
        containerd | ctr) want=" $CONTAINERD_VERSION" ;;
        coredns) want="CoreDNS-${COREDNS_VERSION#v}" ;;
        containerd-shim-runc-v2) want="Version:  $CONTAINERD_VERSION" ;;
        konnectivity-server) want="sigs.k8s.io/apiserver-network-proxy	$KONNECTIVITY_VERSION" ;;
        nnp) want="Effective uid: " ;;
        *) want=$K8S_VERSION ;;
    esac
    [[ $out == *"$want"* ]]
}

build_missing() {
    local t name pkg dir t0 t_all before after tmp built=0
    local flags=() build=()
    t_all=$(now)
    exec 8>"$CACHE_ROOT/.gocache.lock"
    flock -s 8
    before=$(du -sk "$GOMODCACHE/cache/download" 2>/dev/null | cut -f1) || before=0
    for t in "${TARGETS[@]}"; do
        name=${t%%|*} pkg=${t#*|} dir=$MOD
        if [[ $pkg == *'|'* ]]; then
            dir=${pkg#*|} pkg=${pkg%%|*}
        fi
        if binary_ok "$name"; then
            continue
        fi
        log "building $name ($pkg) with $GO_VERSION under nice -n 19 ..."
        t0=$(now)
        tmp=$BIN/.$name.tmp.$$
        rm -f -- "$tmp"
        flags=("${BUILD_FLAGS[@]}")
        if [[ $name == agnhost ]]; then
            flags=(-trimpath -buildvcs=false -ldflags "$LDFLAGS -X main.Version=$AGNHOST_VERSION")
        elif [[ $name == metrics-server ]]; then
            # (it reports client-go's version variable, as its own Makefile sets it)
            flags=(-trimpath -buildvcs=false -ldflags "-s -w -X k8s.io/client-go/pkg/version.gitVersion=$METRICS_SERVER_VERSION")
        elif [[ $name == registry ]]; then
            # (its version variable, as its own Makefile sets it)
            flags=(-trimpath -buildvcs=false -ldflags "-s -w -X github.com/distribution/distribution/v3/version.version=$REGISTRY_VERSION")
        fi
        if [[ $pkg == test:* ]]; then
            build=(test -c)
            pkg=${pkg#test:}
        else
            build=(build)
        fi
        if ! (cd "$dir" && nice -n 19 "$GO" "${build[@]}" "${flags[@]}" -o "$tmp" "$pkg"); then
            rm -f -- "$tmp"
            die "go build $pkg failed"
        fi
        mv -f -- "$tmp" "$BIN/$name"
        binary_ok "$name" || die "$BIN/$name does not run or does not report the pinned version"
        log "built $name in $(since "$t0") s ($(du -m "$BIN/$name" | cut -f1) MiB)"
        built=$((built + 1))
    done
    if [[ $built -gt 0 ]]; then
        after=$(du -sk "$GOMODCACHE/cache/download" 2>/dev/null | cut -f1) || after=0
        log "built $built binaries in $(since "$t_all") s; modules downloaded by this run: $(((after - before) / 1024)) MiB (module download cache now $((after / 1024)) MiB, extracted modules $(du -sm "$GOMODCACHE" 2>/dev/null | cut -f1) MiB in all, Go build cache $(du -sm "$GOCACHE" 2>/dev/null | cut -f1) MiB)"
        {
            if $E2E; then
                printf 'kubernetes %s\nginkgo %s\nagnhost %s\ngo %s\n' "$K8S_VERSION" "$GINKGO_VERSION" "$AGNHOST_VERSION" "$GO_VERSION"
            elif $TOOLS; then
                printf 'metrics-server %s\nregistry %s\ngo %s\n' "$METRICS_SERVER_VERSION" "$REGISTRY_VERSION" "$GO_VERSION"
            elif $CLUSTER; then
                printf 'kubernetes %s\ncoredns %s\ngo %s\n' "$K8S_VERSION" "$COREDNS_VERSION" "$GO_VERSION"
            elif $CONTAINERD; then
                printf 'containerd %s\ngo %s\ngoarch %s\n' "$CONTAINERD_VERSION" "$GO_VERSION" "${GOARCH_WANT:-$("$GO" env GOARCH)}"
            else
                printf 'kubernetes %s\netcd %s\ngo %s\n' "$K8S_VERSION" "$ETCD_VERSION" "$GO_VERSION"
            fi
            printf 'built %s in %s s\n' "$(date -u +%Y-%m-%dT%H:%M:%SZ)" "$(since "$t_all")"
        } >"$CACHE_ROOT/$KEY/VERSIONS.tmp"
        mv -f -- "$CACHE_ROOT/$KEY/VERSIONS.tmp" "$CACHE_ROOT/$KEY/VERSIONS"
        # The Go build cache is shared by both builds (control plane and --e2e):
        # removed only when no other build holds it.
        if [[ ${PICOLET_K8S_KEEP_GOCACHE:-0} != 1 ]]; then
            if flock -n -x 8; then
                rm -rf -- "$GOCACHE"
            else
                log "Go build cache kept: another build is using it"
            fi
        fi
    fi
}

t0=$(now)
# One build at a time per cache (two test runs at once wait for one build).
exec 9>"$CACHE_ROOT/$KEY/.lock"
flock 9
build_missing
flock -u 9
if $CLUSTER; then
    log "kube-proxy $K8S_VERSION, coredns $COREDNS_VERSION, $GO_VERSION: binaries ready in $BIN ($(since "$t0") s)"
elif $CONTAINERD; then
    log "containerd $CONTAINERD_VERSION, $GO_VERSION: binaries ready in $BIN ($(since "$t0") s)"
elif $TOOLS; then
    log "metrics-server $METRICS_SERVER_VERSION, registry $REGISTRY_VERSION, $GO_VERSION: binaries ready in $BIN ($(since "$t0") s)"
elif $E2E; then
    log "kubernetes $K8S_VERSION, ginkgo $GINKGO_VERSION, agnhost $AGNHOST_VERSION, $GO_VERSION: binaries ready in $BIN ($(since "$t0") s)"
else
    log "kubernetes $K8S_VERSION, etcd $ETCD_VERSION, $GO_VERSION: binaries ready in $BIN ($(since "$t0") s)"
fi
printf '%s\n' "$BIN"
