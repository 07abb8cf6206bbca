# shellcheck shell=bash
# Running upstream's e2e.test under ginkgo, as scripts/conformance.sh and scripts/cluster.sh
# do: where the pinned Kubernetes module's source is, the run itself with the flags both
# pass, and stopping it when the script ends.
#
#   REPO=... CACHE_ROOT=... E2E_BIN=...   # E2E_BIN: scripts/k8s-build.sh --e2e's directory
#   . "$REPO/scripts/lib/e2e.sh"
#   e2e_sources                           # sets K8S_SRC and MANIFEST
#   run_ginkgo REPORT KUBECONFIG KUBECTL GINKGO_FLAG... [-- E2E_TEST_FLAG...] || rc=$?
#   stop_ginkgo                           # from the caller's clean-up or EXIT trap
#
# The caller sources scripts/lib/common.sh first (die).

GINKGO_PID=

# e2e_sources: K8S_SRC, the k8s.io/kubernetes module's source in the Go module cache
# (scripts/k8s-build.sh --e2e downloads it), and MANIFEST, its test/utils/image/manifest.go.
e2e_sources() {
    local go
    go=$(command -v go || printf '%s' /usr/local/go/bin/go)
    K8S_SRC=$(cd "$REPO/tests/k8s-e2e" && GOFLAGS=-mod=readonly GOMODCACHE=$CACHE_ROOT/gomod "$go" list -m -f '{{.Dir}}' k8s.io/kubernetes) ||
        die "cannot locate the k8s.io/kubernetes module source (scripts/k8s-build.sh --e2e downloads it)"
    MANIFEST=$K8S_SRC/test/utils/image/manifest.go
    [[ -f $MANIFEST ]] || die "$MANIFEST is missing"
}

# run_ginkgo REPORT KUBECONFIG KUBECTL GINKGO_FLAG... [-- E2E_TEST_FLAG...]: e2e.test under
# ginkgo in a session of its own against the apiserver of KUBECONFIG (the local provider, no
# node allowed to be not Ready, no log dump), junit.xml and report.json written into REPORT,
# the whole output into REPORT/ginkgo.log; returns ginkgo's exit status. GINKGO_PID is its
# PID meanwhile, for stop_ginkgo.
run_ginkgo() {
    local report=$1 kubeconfig=$2 kubectl=$3 rc=0
    local flags=()
    shift 3
    while [[ $# -gt 0 && $1 != -- ]]; do
        flags+=("$1")
        shift
    done
    [[ $# -eq 0 ]] || shift
    setsid "$E2E_BIN/ginkgo" "${flags[@]}" --junit-report=junit.xml --json-report=report.json --output-dir="$report" \
        "$E2E_BIN/e2e.test" -- \
        --kubeconfig="$kubeconfig" --provider=local --allowed-not-ready-nodes=0 --disable-log-dump \
        --report-dir="$report" --kubectl-path="$kubectl" "$@" \
        >"$report/ginkgo.log" 2>&1 &
    GINKGO_PID=$!
    wait "$GINKGO_PID" || rc=$?
    GINKGO_PID=
    return "$rc"
}

# stop_ginkgo: ginkgo runs in a process group of its own (PGID = its PID) with its e2e.test
# processes: SIGINT to the group (ginkgo's own interrupt), the group killed after 20 s.
stop_ginkgo() {
    local i
    [[ -n $GINKGO_PID ]] || return 0
    kill -INT -- "-$GINKGO_PID" 2>/dev/null || true
    for ((i = 0; i < 200; i++)); do
        kill -0 -- "-$GINKGO_PID" 2>/dev/null || break
        sleep 0.1
    done
    kill -KILL -- "-$GINKGO_PID" 2>/dev/null || true
    wait "$GINKGO_PID" 2>/dev/null || true
}
