#!/usr/bin/env bash
# Runs upstream's node conformance specs (e2e.test of the Kubernetes release
# tests/k8s pins) against picolet, or against the upstream kubelet of the same
# release as the reference for what can pass on this machine. Run as root.
#
#   scripts/conformance.sh                    NodeConformance against picolet
#   NODE=kubelet scripts/conformance.sh       the same against the upstream kubelet
#   SELECTION=conformance scripts/conformance.sh
#                                             '[sig-node] ... [Conformance]' instead
#   SPECS=tests/conformance-ci.txt scripts/conformance.sh
#                                             only the specs that file names
#   DRY_RUN=1 scripts/conformance.sh          list the selected specs, start nothing
#
# Steps: builds what is missing (scripts/k8s-build.sh for the control plane and,
# with --e2e, e2e.test, ginkgo, the kubelet, agnhost and nnp, all cached by
# version under /var/cache/picolet-k8s; picolet's release build), builds the
# test images offline and imports them under the names
# test/utils/image/manifest.go of the pinned module gives them (busybox, nonroot
# and nonewprivs from the machine's busybox-static, agnhost from its Go source,
# pause), starts a control plane with its controllers (scripts/control-plane.sh),
# a scratch containerd (scripts/scratch-containerd.sh) and the node joined to
# them, waits for the Node Ready, and runs the selection with ginkgo. Then it
# prints the counts, one line per failed spec, and where the reports are.
#
# Selections (focus / skip, ginkgo regular expressions):
#   nodeconformance  '\[NodeConformance\]' / '\[Serial\]|\[Disruptive\]|\[Flaky\]|\[Slow\]|\[Feature:'
#   conformance      '\[sig-node\].*\[Conformance\]' / the same skip
#   SPECS=FILE       one full spec name per line ('#' starts a comment), each
#                    matched as a literal text; no skip
#
# A failed spec whose output names an image this script did not import (nginx,
# httpd, ...: images that cannot be built here) is counted and listed apart.
#
# Environment:
#   NODE            picolet (default) or kubelet
#   SELECTION       nodeconformance (default) or conformance
#   SPECS           a spec list file (overrides SELECTION)
#   PROCS           ginkgo's parallel processes (default 4)
#   PICOLET_BIN     the picolet binary to run (default: cargo build --release)
#   CONFORMANCE_DIR scratch directory (default /tmp/pconf; short: unix sockets
#                   live there); its previous run is removed at the start
#   GINKGO_TIMEOUT  the whole run's limit (default 3h)
#   SCRATCH_CONTAINERD_BIN
#                   run the containerd (and ctr, shim) of this bin directory
#                   instead of the machine's 1.6: containerd 2.x as
#                   `scripts/k8s-build.sh --containerd` builds it
#
# The reports stay in CONFORMANCE_DIR/report: junit.xml, report.json (ginkgo's),
# summary.txt (what this script printed), ginkgo.log (the whole output), and
# the node's, containerd's and the control plane's logs beside them.
#
# The upstream kubelet runs in a mount namespace of its own, where the files it
# writes whatever its flags say (the kernel tunables under /proc/sys it sets,
# /var/lib/kubelet/device-plugins, /var/log/containers) are bind mounts of
# files under CONFORMANCE_DIR; only its root directory is shared with the
# machine's namespace (containerd must see the volumes it mounts there). Both
# nodes get a cgroup root of their own, created in every mounted hierarchy and
# removed at the end. Every process this script starts is stopped by its PID
# when it ends, Ctrl-C included; builds run under `nice -n 19`.
# shellcheck disable=SC2317 # cleanup runs from the EXIT trap, start_picolet and start_kubelet as "start_$NODE_KIND"
set -euo pipefail

REPO=$(cd "$(dirname -- "${BASH_SOURCE[0]}")/.." && pwd)
PROG=conformance
# shellcheck source=scripts/lib/common.sh
. "$REPO/scripts/lib/common.sh"
# shellcheck source=scripts/lib/kubelet-config.sh
. "$REPO/scripts/lib/kubelet-config.sh"
# shellcheck source=scripts/lib/upstream-kubelet.sh
. "$REPO/scripts/lib/upstream-kubelet.sh"
# shellcheck source=scripts/lib/e2e.sh
. "$REPO/scripts/lib/e2e.sh"
NODE_KIND=${NODE:-picolet}
SELECTION=${SELECTION:-nodeconformance}
SPECS_FILE=${SPECS:-}
PROCS=${PROCS:-4}
DIR=${CONFORMANCE_DIR:-/tmp/pconf}
GINKGO_TIMEOUT=${GINKGO_TIMEOUT:-3h}
DRY=${DRY_RUN:-0}
CACHE_ROOT=${PICOLET_K8S_CACHE:-/var/cache/picolet-k8s}
# The apiserver reaches the node's API (logs, exec) at the node's Hostname
# address, which is its name: localhost resolves to the loopback address the
# node listens on. (A loopback --node-ip is no way: the kubelet refuses it.)
NODE_NAME=localhost
SKIP='\[Serial\]|\[Disruptive\]|\[Flaky\]|\[Slow\]|\[Feature:'

case $NODE_KIND in picolet | kubelet) ;; *) die "NODE must be picolet or kubelet (got '$NODE_KIND')" ;; esac
[[ $PROCS =~ ^[1-9][0-9]*$ ]] || die "PROCS must be a positive count"
if [[ -n $SPECS_FILE ]]; then
    [[ -f $SPECS_FILE ]] || die "SPECS=$SPECS_FILE: no such file"
    SELECTION=specs
fi
case $SELECTION in
    nodeconformance) FOCUS='\[NodeConformance\]' ;;
    conformance) FOCUS='\[sig-node\].*\[Conformance\]' ;;
    specs)
        # Each name escaped for a regular expression and anchored, all joined.
        FOCUS=$(python3 - "$SPECS_FILE" <<'EOF'
import re, sys
names = []
for line in open(sys.argv[1], encoding="utf-8"):
    line = line.strip()
    if line and not line.startswith("#"):
        names.append(re.sub(r"([\\.^$|?*+()\[\]{}])", r"\\\1", line))
if not names:
    sys.exit("the spec list is empty")
print("|".join(names))
EOF
        ) || die "cannot read the spec list $SPECS_FILE"
        SKIP=
        ;;
    *) die "SELECTION must be nodeconformance or conformance (got '$SELECTION')" ;;
esac
[[ $DIR == /* && $DIR != / ]] || die "CONFORMANCE_DIR must be an absolute path other than /"
[[ $(id -u) == 0 || $DRY == 1 ]] || die "run as root (containerd, runc, CNI and the node need it)"
for c in python3 ctr containerd unshare mount umount flock; do
    command -v "$c" >/dev/null || die "$c not found (scripts/install-deps.sh --k8s installs what is needed)"
done

# ---------------------------------------------------------------- builds

t_build=$(now)
log "building what is missing (the first time: the control plane, then e2e.test and the rest; tens of minutes on 2 cores)"
CP_BIN=$("$REPO/scripts/k8s-build.sh" | tail -n 1) || die "scripts/k8s-build.sh failed"
E2E_BIN=$("$REPO/scripts/k8s-build.sh" --e2e | tail -n 1) || die "scripts/k8s-build.sh --e2e failed"
e2e_sources
log "binaries ready in $(since "$t_build") s: $CP_BIN, $E2E_BIN"

mkdir -p "$DIR"
DIR=$(cd "$DIR" && pwd -P)
REPORT=$DIR/report

GINKGO_FLAGS=(--no-color "--procs=$PROCS" "--timeout=$GINKGO_TIMEOUT" "--focus=$FOCUS")
[[ -z $SKIP ]] || GINKGO_FLAGS+=("--skip=$SKIP")

if [[ $DRY == 1 ]]; then
    mkdir -p "$REPORT"
    "$E2E_BIN/ginkgo" --no-color --dry-run -v "--focus=$FOCUS" ${SKIP:+"--skip=$SKIP"} \
        --json-report=dry-run.json --output-dir="$REPORT" "$E2E_BIN/e2e.test" -- --provider=local >"$REPORT/dry-run.log" 2>&1 ||
        { tail -n 20 "$REPORT/dry-run.log" >&2; die "ginkgo --dry-run failed"; }
    python3 - "$REPORT/dry-run.json" <<'EOF'
import json, sys
report = json.load(open(sys.argv[1]))[0]
names = sorted(" ".join(s["ContainerHierarchyTexts"] + [s["LeafNodeText"]])
               for s in report["SpecReports"] if s["LeafNodeType"] == "It" and s["State"] == "passed")
for n in names:
    print(n)
print("selected: %d of %d specs" % (report["PreRunStats"]["SpecsThatWillRun"], report["PreRunStats"]["TotalSpecs"]), file=sys.stderr)
EOF
    exit 0
fi

if [[ $NODE_KIND == picolet ]]; then
    if [[ -n ${PICOLET_BIN:-} ]]; then
        [[ -x $PICOLET_BIN ]] || die "PICOLET_BIN=$PICOLET_BIN is not an executable"
    else
        (cd "$REPO" && nice -n 19 cargo build --release --locked -q) || die "cargo build --release failed"
        PICOLET_BIN=$REPO/target/release/picolet
    fi
fi

# ---------------------------------------------------------------- clean up at exit

NODE_PID=
CP_STARTED=0
CTRD_STARTED=0
CGROUP_ROOT=/picolet-conformance-$NODE_KIND

cleanup() {
    stop_ginkgo
    stop_pid "$NODE_PID" "$NODE_KIND"
    [[ $CP_STARTED == 1 ]] && bash "$REPO/scripts/control-plane.sh" stop "$DIR/cp" 2>>"$DIR/stop.log"
    [[ $CTRD_STARTED == 1 ]] && bash "$REPO/scripts/scratch-containerd.sh" stop "$DIR/ctrd" 2>>"$DIR/stop.log"
    node_dir_cleanup "$DIR/node" "$CGROUP_ROOT"
}
cleanup_on_exit cleanup

# ---------------------------------------------------------------- the previous run

if [[ -d $DIR/ctrd ]]; then
    bash "$REPO/scripts/scratch-containerd.sh" stop "$DIR/ctrd" >/dev/null 2>&1 || true
fi
if [[ -d $DIR/cp ]]; then
    bash "$REPO/scripts/control-plane.sh" stop "$DIR/cp" >/dev/null 2>&1 || true
fi
node_dir_cleanup "$DIR/node" "$CGROUP_ROOT"
rm -rf --one-file-system -- "$DIR/node" "$DIR/images" "$DIR/cp" "$REPORT" "$DIR/stop.log"
mkdir -p "$DIR/node" "$DIR/images" "$REPORT"

# ---------------------------------------------------------------- images

# shellcheck source=scripts/lib/test-images.sh
. "$REPO/scripts/lib/test-images.sh"

# ---------------------------------------------------------------- the node

start_picolet() {
    HEALTHZ_PORT=$(free_port)
    KUBELET_PORT=$(free_port)
    # The node API as kubeadm sets a node up: a serving certificate the cluster CA signed
    # (the apiserver checks it), client certificates of that CA (the apiserver's own), tokens
    # and authorization reviewed by the apiserver. picolet takes a loopback node IP, which the
    # apiserver then dials first.
    kubelet_config containerRuntimeEndpoint="unix://$SOCK" podLogsDir="$DIR/node/pod-logs" \
        healthzPort="$HEALTHZ_PORT" cgroupRoot="$CGROUP_ROOT" address=127.0.0.1 port="$KUBELET_PORT" \
        tlsCertFile="$DIR/cp/pki/node-$NODE_NAME-serving.crt" \
        tlsPrivateKeyFile="$DIR/cp/pki/node-$NODE_NAME-serving.key" "authentication:
  x509:
    clientCAFile: $DIR/cp/pki/ca.crt" "$SHARED_DISK_CONFIG" >"$DIR/node/config.yaml"
    "$PICOLET_BIN" --config "$DIR/node/config.yaml" --root-dir "$DIR/node/root" \
        --kubeconfig "$DIR/cp/node-$NODE_NAME.kubeconfig" --hostname-override "$NODE_NAME" \
        --node-ip 127.0.0.1 \
        </dev/null >"$DIR/node.log" 2>&1 &
    NODE_PID=$!
}

start_kubelet() {
    HEALTHZ_PORT=$(free_port)
    KUBELET_PORT=$(free_port)
    upstream_kubelet_prepare "$DIR/node" "$CGROUP_ROOT"
    kubelet_config failCgroupV1=false cgroupDriver=cgroupfs cgroupRoot="$CGROUP_ROOT" failSwapOn=false \
        containerRuntimeEndpoint="unix://$SOCK" podLogsDir="$DIR/node/pod-logs" \
        volumePluginDir="$DIR/node/volume-plugins" makeIPTablesUtilChains=false address=127.0.0.1 \
        port="$KUBELET_PORT" readOnlyPort=0 "$SHARED_DISK_CONFIG" healthzBindAddress=127.0.0.1 \
        healthzPort="$HEALTHZ_PORT" clusterDomain=cluster.local resolvConf=/etc/resolv.conf \
        "# The serving certificate the cluster CA signed for the node (the apiserver
# checks it). The node API, on loopback only, lets requests in unauthenticated." \
        tlsCertFile="$DIR/cp/pki/node-$NODE_NAME-serving.crt" \
        tlsPrivateKeyFile="$DIR/cp/pki/node-$NODE_NAME-serving.key" "authentication:
  anonymous:
    enabled: true
  webhook:
    enabled: false
authorization:
  mode: AlwaysAllow" >"$DIR/node/config.yaml"
    upstream_kubelet_launch "$DIR/node" "$DIR/node.log" \
        "$E2E_BIN/kubelet" --config "$DIR/node/config.yaml" --root-dir "$DIR/node/root" \
        --cert-dir "$DIR/node/root/pki" \
        --kubeconfig "$DIR/cp/node-$NODE_NAME.kubeconfig" --hostname-override "$NODE_NAME" \
        --v=2
    NODE_PID=$UPSTREAM_KUBELET_PID
}

node_ready() {
    [[ $("$CP_BIN/kubectl" --kubeconfig "$DIR/cp/admin.kubeconfig" --request-timeout=5s get node "$NODE_NAME" \
        -o 'jsonpath={.status.conditions[?(@.type=="Ready")].status}' 2>/dev/null) == True ]]
}

# ---------------------------------------------------------------- run

build_images
t0=$(now)
CP_STARTED=1
PICOLET_K8S_BIN=$CP_BIN \
    bash "$REPO/scripts/control-plane.sh" start "$DIR/cp" --node "$NODE_NAME" --controllers \
    >/dev/null 2>"$DIR/control-plane.log" || { tail -n 20 "$DIR/control-plane.log" >&2; die "the control plane did not start"; }
CTRD_STARTED=1
SOCK=$(bash "$REPO/scripts/scratch-containerd.sh" start "$DIR/ctrd" 2>"$DIR/containerd-start.log" | tail -n 1) ||
    { tail -n 20 "$DIR/containerd-start.log" >&2; die "the scratch containerd did not start"; }
for tar in "$DIR"/images/*.tar; do
    "${SCRATCH_CONTAINERD_BIN:+$SCRATCH_CONTAINERD_BIN/}ctr" -a "$SOCK" -n k8s.io images import "$tar" >/dev/null 2>>"$DIR/containerd-start.log" || die "importing $tar failed"
done
RUNTIME_VERSION=$("${SCRATCH_CONTAINERD_BIN:+$SCRATCH_CONTAINERD_BIN/}ctr" -a "$SOCK" version 2>/dev/null |
    awk '/^Server:/ { s = 1 } s && $1 == "Version:" { print $2; exit }') || RUNTIME_VERSION=unknown
log "control plane and containerd ${RUNTIME_VERSION:-unknown} up in $(since "$t0") s; images imported"

t0=$(now)
"start_$NODE_KIND"
deadline=$((SECONDS + 180))
until node_ready; do
    alive "$NODE_PID" || { tail -n 30 "$DIR/node.log" >&2; die "$NODE_KIND exited before its Node was Ready"; }
    ((SECONDS < deadline)) || { tail -n 30 "$DIR/node.log" >&2; die "the Node was not Ready within 180 s"; }
    sleep 0.5
done
log "$NODE_KIND started; Node $NODE_NAME Ready after $(since "$t0") s"

t0=$(now)
log "running ginkgo (${GINKGO_FLAGS[*]}); output in $REPORT/ginkgo.log"
ginkgo_rc=0
run_ginkgo "$REPORT" "$DIR/cp/admin.kubeconfig" "$CP_BIN/kubectl" "${GINKGO_FLAGS[@]}" -- \
    --kubelet-root-dir="$DIR/node/root" || ginkgo_rc=$?
run_s=$(since "$t0")
[[ -f $REPORT/report.json ]] || { tail -n 30 "$REPORT/ginkgo.log" >&2; die "ginkgo exited with $ginkgo_rc and wrote no report"; }

summary_rc=0
python3 - "$REPORT/report.json" "$NODE_KIND on containerd ${RUNTIME_VERSION:-unknown}" "$SELECTION" "$run_s" "${IMAGES[@]}" <<'EOF' | tee "$REPORT/summary.txt" || summary_rc=$?
import json, re, sys
path, node, selection, run_s, *imported = sys.argv[1:]
imported = set(imported)
reports = json.load(open(path))
specs = [s for r in reports for s in r["SpecReports"] if s["LeafNodeType"] == "It"]
will_run = sum(r["PreRunStats"]["SpecsThatWillRun"] for r in reports)
def name(s):
    return " ".join(s["ContainerHierarchyTexts"] + [s["LeafNodeText"]])
ref = re.compile(r'\b((?:[a-z0-9-]+\.)+[a-z]{2,}(?::\d+)?/[A-Za-z0-9._/-]+:[A-Za-z0-9._-]+)')
passed, failed, apart, skipped = [], [], [], []
for s in specs:
    state = s["State"]
    if state == "passed":
        passed.append(s)
    elif state == "skipped":
        # Filtered out: no failure; skipped while running: a message.
        if s.get("Failure", {}).get("Message"):
            skipped.append(s)
    elif state == "pending":
        pass
    else:
        text = json.dumps(s.get("Failure", {})) + s.get("CapturedGinkgoWriterOutput", "") + s.get("CapturedStdOutErr", "")
        missing = sorted({m for m in ref.findall(text) if m not in imported and not m.startswith("invalid.")})
        missing = [m for m in missing if m.split("/")[0] in ("registry.k8s.io", "docker.io", "gcr.io", "quay.io")]
        (apart if missing else failed).append((s, missing))
print("conformance %s against %s: selected %d, passed %d, failed %d, skipped %d; failed for an image not built here: %d (ginkgo ran %s s)" % (
    selection, node, will_run, len(passed), len(failed), len(skipped), len(apart), run_s))
for s, _ in sorted(failed, key=lambda x: name(x[0])):
    f = s.get("Failure", {})
    where = f.get("Location", {})
    msg = (f.get("Message") or "").strip().splitlines()
    print("FAILED %s -- %s:%s: %s" % (name(s), where.get("FileName", "?").split("/test/")[-1], where.get("LineNumber", "?"), msg[0][:200] if msg else s["State"]))
for s, missing in sorted(apart, key=lambda x: name(x[0])):
    print("IMAGE NOT BUILT HERE (%s) %s" % (", ".join(missing), name(s)))
for s in sorted(skipped, key=name):
    print("SKIPPED %s -- %s" % (name(s), (s["Failure"]["Message"] or "").strip().splitlines()[0][:160]))
if will_run == 0:
    sys.exit("conformance: error: the selection is empty")
sys.exit(1 if failed or apart or len(passed) + len(failed) + len(apart) + len(skipped) != will_run else 0)
EOF
log "reports: $REPORT/junit.xml, $REPORT/report.json, $REPORT/summary.txt, $REPORT/ginkgo.log; node log $DIR/node.log"
exit "$summary_rc"
