#!/usr/bin/env bash
# Booted guests: picolet as the shipped systemd unit installs it, on a Debian bookworm
# device booted by emulation (qemu TCG), with the distribution kernel on the cgroup v2
# unified hierarchy and containerd 2.x with the systemd cgroup driver. Run as root.
#
#   scripts/guest.sh image [--arch A]
#       build the guest image (or find it in the cache) and print its directory
#       (scripts/guest/image.sh: mmdebstrap of Debian's packages, cached by its inputs)
#   scripts/guest.sh scenarios [--arch A] [--cuts N] [--picolet PATH] [--upgrade-to PATH]
#                              [--if-cached] [--figures]
#       boot the image and run the device scenarios on one disk (a qcow2 overlay of the
#       image, kept across the boots of the run). With --if-cached the run happens only
#       when the image's root file system (the slow part of an image build: over ten
#       minutes for arm64) is already cached; otherwise it says so and exits 0:
#         boot      qemu started -> picolet installed -> the first static pod's container
#                   running, in seconds (and boot -> running on every later boot)
#         upgrade   a new /usr/bin/picolet put in place and the unit restarted: no pod
#                   restarts (same container ids and processes)
#         reboot    `systemctl reboot`: the same pods come back, no duplicate sandbox or
#                   container
#         power cut N times: SIGKILL of qemu at a random moment while picolet is busy (a
#                   manifest rewritten every second, a container crashing and restarting),
#                   boot again: every file picolet keeps is whole, picolet starts, every
#                   pod runs, no duplicates; prints how many boots needed more than a
#                   normal start
#       With --figures, the first boot also prints the node's memory at rest with 0, 10 and
#       50 pods (picolet alone first, then 7 more pods beside the 3 steady ones, then 40 more,
#       all 47 removed again), and the guest has 2048 MiB of memory instead of 1024.
#       Default: amd64, 2 cuts, target/debug/picolet. `--cuts 20` is the long run.
#   scripts/guest.sh shutdown [--arch A] [--picolet PATH]
#       graceful node shutdown, joined to a control plane of its own (scripts/control-plane.sh)
#       that the guest reaches through qemu's user-mode network (restrict=on, one forward to
#       the host's loopback apiserver; nothing else reachable): logind's drop-in and delay
#       lock, a logind restart, a cancelled shutdown, then `systemctl reboot` with a preStop
#       pod, a pod that needs 5 s after SIGTERM and a critical static pod (the order and the
#       shares from the stamps they wrote, the apiserver polled while the guest goes down),
#       and an offline boot (API pods back from the checkpoint); see
#       scripts/guest/shutdown.sh
#   scripts/guest.sh flash [--arch A] [--picolet PATH] [--agent picolet|kubelet]
#       flash writes at rest: picolet as its unit with 10 static pods (one log line a minute
#       each), then over an hour the bytes written to the guest's disk (/sys/block/vda/stat),
#       by picolet, containerd and the shims (/proc/PID/io write_bytes) and into
#       /var/log/pods, in the window and per hour, and the files modified, and the node's
#       memory with the pods at rest; figures only (scripts/guest/flash.sh;
#       GUEST_FLASH_SECONDS, default 3600, and the other GUEST_FLASH_* settings it lists).
#       --agent kubelet runs the upstream kubelet of the pinned release instead (standalone,
#       the same static pods, containerd and systemd cgroup driver; amd64 only, built by
#       scripts/k8s-build.sh --e2e): the reference the figures are compared with
#   scripts/guest.sh e2e [--arch A] [--tests "NAME..."]
#       the containerd end-to-end files (every tests/e2e*.rs, or the NAMEs given) built here
#       (cargo test --features e2e --no-run; for arm64 with --target aarch64-unknown-linux-gnu
#       into target/cross, as the test command builds it) and run inside the guest, one by one,
#       on its kernel (cgroup v2, systemd) with its containerd 2.x: the checkout is shared
#       read-only and mounted at its own path in the guest, so the test binaries find picolet
#       and the scripts where they were built; the image is the tests variant (the same plus
#       iptables, python3, zstd; 4 GiB). Prints each file's counts and time, then the whole;
#       fails when a file fails. GUEST_E2E_THREADS (default 1), GUEST_E2E_DEADLINE_SCALE (the
#       tests' waits times this, default 4) and GUEST_E2E_LIMIT (seconds a file may take,
#       default 5400) tune it; see scripts/guest/e2e.sh
#
# Environment:
#   PICOLET_GUEST_CACHE   image cache (default /var/cache/picolet-guest)
#   GUEST_CONTAINERD_BIN  directory with containerd, containerd-shim-runc-v2 and ctr for the
#                         guest's architecture (default: what `scripts/k8s-build.sh
#                         --containerd` builds, for arm64 with --arch arm64)
#   GUEST_MEMORY_MIB      the guest's memory (default 1024, 2048 with --figures or e2e)
#   GUEST_RUN_DIR         the run's directory (default /tmp/picolet-guest-ARCH-PID; removed
#                         at the end of a passing run unless GUEST_KEEP=1)
#
# Nothing leaves the machine: the guest has no network device (-nic none), or in the shutdown
# scenario only a forward to the host's loopback apiserver; files go in and results come out
# through a 9p share. Every wait has a deadline; a failure names what
# failed and prints the tail of the guest's console (and the guest's own diagnosis when it
# still answers). The qemu this script starts is stopped by its PID on every exit.
set -euo pipefail
# (The whole script is one compound command, read before it runs: editing the file during a
# run cannot change the run.)
{
ROOT=$(cd "$(dirname -- "${BASH_SOURCE[0]}")/.." && pwd -P)
GUEST_DIR=$ROOT/scripts/guest

log() { printf 'guest: %s\n' "$*" >&2; }
die() { printf 'guest: error: %s\n' "$*" >&2; exit 1; }
now() { date +%s.%N; }
since() { awk -v a="$1" -v b="$(now)" 'BEGIN { printf "%.1f", b - a }'; }

usage() {
    sed -n '2,/^set -euo/p' "${BASH_SOURCE[0]}" | sed -e '/^set -euo/d' -e 's/^# \{0,1\}//' >&2
    exit 2
}

[[ $# -ge 1 ]] || usage
CMD=$1
shift
ARCH=amd64 CUTS=2 PICOLET='' UPGRADE_TO='' IF_CACHED=0 FIGURES=0 AGENT=picolet E2E_TESTS=''
while [[ $# -gt 0 ]]; do
    case $1 in
        --figures) FIGURES=1; shift ;;
        --if-cached) IF_CACHED=1; shift ;;
        --arch) ARCH=${2:?--arch needs a value}; shift 2 ;;
        --cuts) CUTS=${2:?--cuts needs a value}; shift 2 ;;
        --picolet) PICOLET=${2:?--picolet needs a path}; shift 2 ;;
        --agent) AGENT=${2:?--agent needs a value}; shift 2 ;;
        --upgrade-to) UPGRADE_TO=${2:?--upgrade-to needs a path}; shift 2 ;;
        --tests) E2E_TESTS=${2:?--tests needs names of tests/*.rs files}; shift 2 ;;
        -h | --help) usage ;;
        *) die "unknown argument '$1' (see --help)" ;;
    esac
done
[[ $CUTS =~ ^[0-9]+$ ]] || die "--cuts must be a number, not '$CUTS'"
[[ $AGENT == picolet || $AGENT == kubelet ]] || die "--agent must be picolet or kubelet, not '$AGENT'"
[[ $AGENT == picolet || $CMD == flash ]] || die "--agent kubelet is for the flash command only"
[[ $AGENT == picolet || $ARCH == amd64 ]] || die "--agent kubelet runs on the amd64 guest only (the kubelet is built for this machine)"
[[ -z $E2E_TESTS || $CMD == e2e ]] || die "--tests is for the e2e command only"
[[ $CMD != e2e ]] || export GUEST_IMAGE_VARIANT=tests
if [[ $FIGURES == 1 || $CMD == e2e ]]; then MEMORY_MIB=${GUEST_MEMORY_MIB:-2048}; else MEMORY_MIB=${GUEST_MEMORY_MIB:-1024}; fi
[[ $MEMORY_MIB =~ ^[0-9]+$ ]] || die "GUEST_MEMORY_MIB must be a number of MiB, not '$MEMORY_MIB'"
[[ $(id -u) == 0 ]] || die "must run as root"
# shellcheck disable=SC2054 # (the commas are qemu's option syntax)
case $ARCH in
    amd64)
        QEMU=(qemu-system-x86_64 -accel tcg,thread=multi)
        # no_timer_check: on a loaded host the emulated CPU can be too slow for the kernel's
        # early check of the IO-APIC timer, which then panics ("IO-APIC + timer doesn't work!"),
        # as it did on 2026-12-07 with three guests and a build on the 2-core machine.
        # maxcpus=1: the second CPU is brought online by guest-cfs-bandwidth.service once its
        # quota has turned CFS bandwidth control on (see that unit: the code patch that turns
        # it on hung both vCPUs when two ran).
        CONSOLE=ttyS0 TIMEOUT_SCALE=1 RUST_TARGET='' KERNEL_EXTRA='no_timer_check maxcpus=1' ;;
    arm64)
        QEMU=(qemu-system-aarch64 -M virt -cpu max,pauth-impdef=on -accel tcg,thread=multi)
        CONSOLE=ttyAMA0 TIMEOUT_SCALE=2 RUST_TARGET=aarch64-unknown-linux-gnu KERNEL_EXTRA='' ;;
    *) die "--arch must be amd64 or arm64, not '$ARCH'" ;;
esac

# ---------------------------------------------------------------- image

containerd_bin() {
    if [[ -n ${GUEST_CONTAINERD_BIN:-} ]]; then
        printf '%s' "$GUEST_CONTAINERD_BIN"
        return
    fi
    local args=(--containerd)
    [[ $ARCH == amd64 ]] || args+=(--arch "$ARCH")
    "$ROOT/scripts/k8s-build.sh" "${args[@]}" | tail -n 1 ||
        die "building containerd 2.x for $ARCH failed (scripts/k8s-build.sh ${args[*]})"
}

build_image() {
    local bin t0 img
    # Whether the slow part is cached is known before containerd for the guest is built.
    if [[ $IF_CACHED == 1 ]] && ! GUEST_IMAGE_PROBE=1 bash "$GUEST_DIR/image.sh" "$ARCH" ""; then
        log "SKIPPED: the $ARCH guest's root file system is not cached (--if-cached); scripts/guest.sh image --arch $ARCH builds it"
        exit 0
    fi
    bin=$(containerd_bin) || exit 1
    t0=$(now)
    local rc=0
    img=$(GUEST_IMAGE_IF_CACHED=$IF_CACHED bash "$GUEST_DIR/image.sh" "$ARCH" "$bin" | tail -n 1) || rc=$?
    if [[ $rc == 3 && $IF_CACHED == 1 ]]; then
        log "SKIPPED: the $ARCH guest's root file system is not cached (--if-cached); scripts/guest.sh image --arch $ARCH builds it"
        exit 0
    fi
    [[ $rc == 0 ]] || die "the $ARCH guest image could not be built (see above)"
    [[ -f $img/info ]] || die "scripts/guest/image.sh printed no image directory"
    log "image $img ready in $(since "$t0") s: disk $(du -m "$img/disk.img" | cut -f1) MiB used (of $(du -m --apparent-size "$img/disk.img" | cut -f1) MiB), kernel $(sed -n 's/^kernel //p' "$img/info"), $(sed -n 's/^containerd //p' "$img/info")"
    printf '%s\n' "$img"
}

if [[ $CMD == image ]]; then
    build_image
    exit 0
fi
[[ $CMD == scenarios || $CMD == shutdown || $CMD == flash || $CMD == e2e ]] || usage

# ---------------------------------------------------------------- the guest machine

for t in "${QEMU[0]}" qemu-img; do
    command -v "$t" >/dev/null || die "$t is missing: scripts/install-deps.sh --guest installs it"
done
if [[ $CMD == e2e ]]; then
    # The test binaries and the debug picolet they start, built before anything else.
    . "$GUEST_DIR/e2e.sh"
    e2e_build
    PICOLET=${PICOLET:-$E2E_PICOLET}
fi
if [[ -z $PICOLET ]]; then
    if [[ -n $RUST_TARGET ]]; then PICOLET=$ROOT/target/$RUST_TARGET/debug/picolet; else PICOLET=$ROOT/target/debug/picolet; fi
fi
[[ -x $PICOLET ]] || die "no picolet binary at $PICOLET (cargo build${RUST_TARGET:+ --target $RUST_TARGET}, or --picolet PATH)"
[[ -z $UPGRADE_TO || -x $UPGRADE_TO ]] || die "--upgrade-to $UPGRADE_TO is not an executable"
IMAGE=$(build_image)
[[ -n $IMAGE ]] || exit 0 # --if-cached, and not cached: said so above
RUN=${GUEST_RUN_DIR:-/tmp/picolet-guest-$ARCH-$$}
SHARE=$RUN/share
rm -rf -- "$RUN"
mkdir -p "$SHARE/cmd" "$SHARE/manifests"
qemu-img create -q -f qcow2 -b "$IMAGE/disk.img" -F raw "$RUN/disk.qcow2" || die "qemu-img create failed"
install -m 0755 "$PICOLET" "$SHARE/picolet"
install -m 0755 "${UPGRADE_TO:-$PICOLET}" "$SHARE/picolet-upgrade"
install -m 0644 "$ROOT/systemd/picolet.service" "$SHARE/picolet.service"
install -m 0644 "$GUEST_DIR/lib.sh" "$SHARE/lib.sh"

QEMU_PID='' BOOT=0 BOOT_T0='' CONSOLE_LOG='' CMD_N=0
# The guest's network: none, unless a scenario sets NIC (user-mode networking with
# restrict=on and only forwards to loopback services of the host). It comes last on qemu's
# command line: its device takes the PCI slot after the disk's and the share's, so the share
# is probed as early as without it (the guest mounts it at boot, once).
NIC=(-nic none)
# More 9p shares a command adds (e2e: the checkout), before the network device.
SHARES=()
stop_qemu() {
    if [[ -n $QEMU_PID ]] && kill -0 "$QEMU_PID" 2>/dev/null; then
        kill -KILL "$QEMU_PID" 2>/dev/null || true
        wait "$QEMU_PID" 2>/dev/null || true
    fi
    QEMU_PID=
}
PASSED=0
CLEANUPS=()
cleanup() {
    stop_qemu
    local c
    for c in "${CLEANUPS[@]}"; do eval "$c" || true; done
    if [[ $PASSED == 1 && ${GUEST_KEEP:-0} != 1 ]]; then
        rm -rf -- "$RUN"
    else
        log "run directory kept: $RUN (consoles: $RUN/console-*.log)"
    fi
}
trap cleanup EXIT
trap 'exit 1' INT TERM HUP

fail() {
    printf '\nguest: FAILED (%s, boot %d): %s\n' "$ARCH" "$BOOT" "$1" >&2
    if [[ -n $CONSOLE_LOG && -f $CONSOLE_LOG ]]; then
        printf -- '--- last 40 lines of the guest console (%s)\n' "$CONSOLE_LOG" >&2
        # (without systemd's progress spinner of slow jobs)
        tr '\r' '\n' <"$CONSOLE_LOG" | sed 's/\x1b\[[0-9;]*[A-Za-z]//g' | grep -Ev '^M?\[.{6}\] (A start|A stop)? ?[Jj]ob ' |
            grep -v '^M*$' | tail -n 40 >&2
    fi
    exit 1
}

# boot: start qemu on the run's disk, wait until the guest agent answers.
boot() {
    BOOT=$((BOOT + 1))
    CONSOLE_LOG=$RUN/console-$BOOT.log
    rm -f -- "$SHARE/ready" "$SHARE/heartbeat"
    BOOT_T0=$(now)
    "${QEMU[@]}" -m "$MEMORY_MIB" -smp 2 -display none -no-reboot \
        -kernel "$IMAGE/vmlinuz" -initrd "$IMAGE/initrd.img" \
        -append "root=/dev/vda rw console=$CONSOLE systemd.unified_cgroup_hierarchy=1 panic=-1 loglevel=4 sysrq_always_enabled=1 nokaslr${KERNEL_EXTRA:+ $KERNEL_EXTRA}" \
        -monitor "unix:$RUN/monitor.sock,server=on,wait=off" \
        -drive "file=$RUN/disk.qcow2,format=qcow2,if=virtio" \
        -virtfs "local,path=$SHARE,mount_tag=host0,security_model=none" \
        -serial "file:$CONSOLE_LOG" "${SHARES[@]}" "${NIC[@]}" </dev/null >"$RUN/qemu-$BOOT.log" 2>&1 &
    QEMU_PID=$!
    local limit=$((240 * TIMEOUT_SCALE)) end
    end=$((SECONDS + limit))
    while [[ ! -f $SHARE/ready ]]; do
        if ! kill -0 "$QEMU_PID" 2>/dev/null; then
            wait "$QEMU_PID" 2>/dev/null || true
            QEMU_PID=
            fail "qemu exited before the guest came up (kernel, initrd or root file system failed; qemu said: $(tail -n 3 "$RUN/qemu-$BOOT.log" | tr '\n' ' '))"
        fi
        ((SECONDS < end)) || { hang_report; fail "the guest did not come up within $limit s (no answer from guest-agent.service: a hang in boot?)"; }
        sleep 0.2
    done
    BOOT_READY=$(since "$BOOT_T0")
    log "boot $BOOT: guest up $BOOT_READY s after qemu started (guest uptime $(cut -d' ' -f2 "$SHARE/ready") s)"
}

# gx LIMIT_S SCRIPT: runs SCRIPT in the guest (with lib.sh sourced) under `timeout LIMIT_S`
# there; its output is in $GX_OUT, its exit status is returned (124: the guest's timeout hit,
# and the output so far is kept). A guest that dies, or does not answer 60 s after the limit
# (a hung guest), fails the run with the command's output so far.
GX_OUT=
gx() {
    local limit=$(($1 * TIMEOUT_SCALE)) id end rc
    CMD_N=$((CMD_N + 1))
    id=$(printf 'b%02d-%04d' "$BOOT" "$CMD_N")
    printf 'set -u\n. /mnt/host/lib.sh\n%s\n' "$2" >"$SHARE/cmd/$id.body"
    printf 'timeout -k 5 %d bash /mnt/host/cmd/%s.body\n' "$limit" "$id" >"$SHARE/cmd/.$id"
    mv -- "$SHARE/cmd/.$id" "$SHARE/cmd/$id.sh"
    end=$((SECONDS + limit + 60))
    while [[ ! -f $SHARE/cmd/$id.rc ]]; do
        if ! kill -0 "$QEMU_PID" 2>/dev/null; then
            gx_partial "$id"
            fail "the guest stopped while running: $2"
        fi
        if ((SECONDS >= end)); then
            gx_partial "$id"
            hang_report
            fail "no answer from the guest within $((limit + 60)) s (the guest hangs) to: $2"
        fi
        sleep 0.2
    done
    GX_OUT=$(<"$SHARE/cmd/$id.out")
    rc=$(<"$SHARE/cmd/$id.rc")
    if [[ $rc == 124 ]]; then
        GX_OUT+=$'\n'"(stopped by its time limit of $limit s in the guest)"
    fi
    return "$rc"
}
# hang_report: what can be learnt of a guest that stopped answering, without its help: the
# age of the heartbeat guest-agent writes to the share every 5 s (a 9p share that stopped, or
# a guest that stopped altogether), qemu's own state and each vCPU's instruction pointer twice
# (a frozen machine, or one that runs), and on amd64 the kernel's list of blocked tasks and
# its CPU backtraces (SysRq w and l sent as keys, the console raised to loglevel 9 first),
# printed from the console.
hang_report() {
    local hb mark
    printf -- '--- the guest stopped answering: what the host sees\n' >&2
    if [[ -f $SHARE/heartbeat ]]; then
        hb=$(stat -c %Y "$SHARE/heartbeat")
        printf 'guest-agent heartbeat: last written %d s ago (guest uptime then %s s)\n' \
            "$(($(date +%s) - hb))" "$(cat "$SHARE/heartbeat")" >&2
    else
        printf 'guest-agent heartbeat: never written this boot\n' >&2
    fi
    [[ -n $QEMU_PID ]] && kill -0 "$QEMU_PID" 2>/dev/null || { printf 'qemu is not running\n' >&2; return 0; }
    python3 "$GUEST_DIR/monitor.py" "$RUN/monitor.sock" 'info status' 'info registers -a' >"$RUN/hang-1.txt" 2>&1 || true
    sleep 2
    python3 "$GUEST_DIR/monitor.py" "$RUN/monitor.sock" 'info registers -a' >"$RUN/hang-2.txt" 2>&1 || true
    head -n 2 "$RUN/hang-1.txt" >&2
    printf 'vCPU instruction pointers, 2 s apart: %s | %s\n' \
        "$(grep -oE '(RIP|PC)=[0-9a-f]+' "$RUN/hang-1.txt" | tr '\n' ' ')" \
        "$(grep -oE '(RIP|PC)=[0-9a-f]+' "$RUN/hang-2.txt" | tr '\n' ' ')" >&2
    [[ $ARCH == amd64 && -n $CONSOLE_LOG ]] || return 0
    mark=$(stat -c %s "$CONSOLE_LOG")
    python3 "$GUEST_DIR/monitor.py" "$RUN/monitor.sock" 'sendkey alt-sysrq-9' >/dev/null 2>&1 || true
    sleep 1
    python3 "$GUEST_DIR/monitor.py" "$RUN/monitor.sock" 'sendkey alt-sysrq-w' >/dev/null 2>&1 || true
    sleep 3
    python3 "$GUEST_DIR/monitor.py" "$RUN/monitor.sock" 'sendkey alt-sysrq-l' >/dev/null 2>&1 || true
    sleep 5
    printf -- '--- the guest console after SysRq w and l (blocked tasks, CPU backtraces; whole in %s)\n' "$CONSOLE_LOG" >&2
    tail -c +"$((mark + 1))" "$CONSOLE_LOG" | tr -d '\r' | head -n 150 >&2
}
gx_partial() {
    printf -- '--- output so far of the guest command %s\n' "$1" >&2
    cat -- "$SHARE/cmd/$1.out" >&2 2>/dev/null || true
}

# check WHAT LIMIT_S SCRIPT: gx that must succeed; prints its output.
check() {
    local what=$1
    local rc=0
    gx "$2" "$3" || rc=$?
    if [[ $rc != 0 ]]; then
        printf '%s\n' "$GX_OUT" >&2
        # A command stopped by its time limit printed no diagnosis of its own.
        if [[ $rc == 124 ]] && gx 60 diag; then
            printf '%s\n' "$GX_OUT" >&2
        fi
        fail "$what"
    fi
    log "ok: $what"
    [[ -z $GX_OUT ]] || printf '%s\n' "$GX_OUT" | sed 's/^/    /' >&2
}

# wait_off LIMIT_S: until qemu exits by itself (a reboot or poweroff, with -no-reboot).
wait_off() {
    local limit=$(($1 * TIMEOUT_SCALE)) end t0
    t0=$(now)
    end=$((SECONDS + limit))
    while kill -0 "$QEMU_PID" 2>/dev/null; do
        ((SECONDS < end)) || fail "the guest did not shut down within $limit s"
        sleep 0.2
    done
    wait "$QEMU_PID" 2>/dev/null || true
    QEMU_PID=
    log "boot $BOOT: the guest went down $(since "$t0") s after it was asked"
}

power_cut() {
    kill -KILL "$QEMU_PID"
    wait "$QEMU_PID" 2>/dev/null || true
    QEMU_PID=
}

# ---------------------------------------------------------------- the pods

# manifest NAME SPEC_EXTRA CONTAINER_EXTRA SCRIPT
manifest() {
    cat <<EOF
apiVersion: v1
kind: Pod
metadata:
  name: $1
  annotations:
    guest.picolet.local/rev: "${5:-0}"
spec:
$2  containers:
  - name: main
    image: picolet.local/busybox:1
    imagePullPolicy: Never
    command: ["sh", "-c", "$4"]
$3
EOF
}
# A container that stops at SIGTERM (a shell as PID 1 has no default handler).
LOOP="trap 'exit 0' TERM; while :; do date >/tmp/alive; sleep 2 & wait; done"
manifest web "  hostNetwork: true
" "" "$LOOP" >"$SHARE/manifests/web.yaml"
manifest bridged "" "" "$LOOP" >"$SHARE/manifests/bridged.yaml"
manifest limited "  hostNetwork: true
" "    resources:
      limits: {cpu: 200m, memory: 64Mi}" "$LOOP" >"$SHARE/manifests/limited.yaml"
# A pod that outgrows its memory limit (the string doubles until its 24Mi are gone).
manifest hog "  hostNetwork: true
  restartPolicy: Never
" "    resources:
      limits: {memory: 24Mi}" 'a=xxxxxxxxxxxxxxxx; while true; do a=\"$a$a\"; done' >"$SHARE/manifests/hog.yaml"
# A pod that takes 200 MiB of memory (a memory-backed emptyDir filled) and holds it.
manifest swell "  hostNetwork: true
  volumes:
  - name: fill
    emptyDir: {medium: Memory, sizeLimit: 300Mi}
" "    volumeMounts:
    - {name: fill, mountPath: /fill}" "dd if=/dev/zero of=/fill/x bs=1M count=200 && $LOOP" >"$SHARE/manifests/swell.yaml"
# The busy set for the power cuts: a pod that crashes every few seconds, and one whose
# manifest the guest rewrites every second (each rewrite a new pod for picolet).
manifest crashy "  hostNetwork: true
" "" "sleep 3; exit 1" >"$SHARE/manifests/crashy.yaml"
cat >"$SHARE/churn.sh" <<EOF
#!/bin/bash
# Rewrites /etc/kubernetes/manifests/churn.yaml every second, as a config tool does (a
# temporary file renamed over it), each time with a new revision.
i=0
while :; do
    i=\$((i + 1))
    cat >/etc/kubernetes/manifests/.churn.tmp <<EOM
$(manifest churn "  hostNetwork: true
" "" "$LOOP" '$i')
EOM
    mv -f /etc/kubernetes/manifests/.churn.tmp /etc/kubernetes/manifests/churn.yaml
    sleep 1
done
EOF
STEADY=(web bridged limited)

# ---------------------------------------------------------------- scenarios

if [[ $CMD == shutdown ]]; then
    . "$GUEST_DIR/shutdown.sh"
    exit 0
fi
if [[ $CMD == flash ]]; then
    . "$GUEST_DIR/flash.sh"
    exit 0
fi
if [[ $CMD == e2e ]]; then
    e2e_run
    exit 0
fi

T_ALL=$(now)
log "$ARCH guest, image $IMAGE, picolet $PICOLET ($(du -k "$PICOLET" | cut -f1) KiB), $CUTS power cuts; run directory $RUN"

# 1. First boot: install picolet as the unit file installs it, then the static pods.
boot
check "the guest runs systemd on cgroup v2 with containerd" 60 '
    wait_active containerd 120 || exit 1
    [[ $(stat -fc %T /sys/fs/cgroup) == cgroup2fs ]] || { echo "not cgroup v2: $(stat -fc %T /sys/fs/cgroup)"; exit 1; }
    echo "$(uname -r), $(stat -fc %T /sys/fs/cgroup) ($(cat /sys/fs/cgroup/cgroup.controllers)), systemd $(systemctl --version | head -n1 | cut -d" " -f2), $(containerd --version | cut -d" " -f3)"
    wait_active guest-images.service 60
    q=$(cat /sys/fs/cgroup/system.slice/guest-cfs-bandwidth.service/cpu.max 2>&1)
    [[ $q == "1000000 100000" ]] || { echo "CFS bandwidth not on from early boot: guest-cfs-bandwidth.service cpu.max: $q"; exit 1; }
    [[ $(nproc) == 2 ]] || { echo "$(nproc) CPUs online, not 2 (guest-cfs-bandwidth.service brings the others online): $(cat /sys/devices/system/cpu/online)"; exit 1; }
    echo "CFS bandwidth on from early boot (guest-cfs-bandwidth.service cpu.max $q), then CPUs $(cat /sys/devices/system/cpu/online) online"'
t_install=$(now)
check "install picolet as the unit file installs it" 60 '
    install -m 0755 /mnt/host/picolet /usr/bin/picolet
    install -m 0644 /mnt/host/picolet.service /etc/systemd/system/picolet.service
    mkdir -p /etc/kubernetes/manifests
    printf "PICOLET_ARGS=\"--cgroup-driver=systemd\"\n" >/etc/default/picolet
    [[ '"$FIGURES"' == 1 ]] || cp /mnt/host/manifests/web.yaml /mnt/host/manifests/bridged.yaml /mnt/host/manifests/limited.yaml /etc/kubernetes/manifests/
    sync
    systemctl daemon-reload
    systemctl enable --now picolet.service 2>&1 | grep -v "^Created symlink" || true
    systemctl is-active picolet >/dev/null || { diag; exit 1; }
    picolet --version'
if [[ $FIGURES == 1 ]]; then
    check "the node's memory with no pod, picolet idle (a figure; host load $(cut -d' ' -f1-3 /proc/loadavg))" 60 'sleep 20; footprint'
    check "the steady pods' manifests put in place" 30 '
        cp /mnt/host/manifests/web.yaml /mnt/host/manifests/bridged.yaml /mnt/host/manifests/limited.yaml /etc/kubernetes/manifests/
        sync; echo copied'
fi
check "the first static pod's container runs" 180 'wait_running 150 web'
first_pod=$(since "$BOOT_T0")
check "every static pod runs, once" 180 'wait_running 150 web bridged limited && no_duplicates'
check "the node's memory with ${#STEADY[@]} pods at rest (a figure)" 30 'sleep 10; footprint'
if [[ $FIGURES == 1 ]]; then
    for i in 1 2 3 4 5 6 7; do
        manifest "extra$i" "" "" "$LOOP" >"$SHARE/manifests/extra$i.yaml"
    done
    check "10 pods: 7 more beside the steady ones" 420 '
        cp /mnt/host/manifests/extra?.yaml /etc/kubernetes/manifests/
        wait_running 400 web bridged limited extra1 extra2 extra3 extra4 extra5 extra6 extra7'
    check "the node's memory with 10 pods at rest (a figure; host load $(cut -d' ' -f1-3 /proc/loadavg))" 60 'sleep 20; footprint'
    more=()
    for ((i = 8; i <= 47; i++)); do
        manifest "extra$i" "" "" "$LOOP" >"$SHARE/manifests/extra$i.yaml"
        more+=("extra$i")
    done
    check "50 pods: 40 more" 1860 "
        cp /mnt/host/manifests/extra*.yaml /etc/kubernetes/manifests/
        wait_running 1800 web bridged limited extra1 extra2 extra3 extra4 extra5 extra6 extra7 ${more[*]}"
    check "the node's memory with 50 pods at rest (a figure; host load $(cut -d' ' -f1-3 /proc/loadavg))" 60 'sleep 20; footprint'
    check "the 47 extra pods removed" 960 "
        rm /etc/kubernetes/manifests/extra*.yaml
        wait_gone 900 extra1 extra2 extra3 extra4 extra5 extra6 extra7 ${more[*]}"
fi
log "boot 1: qemu started -> first pod running $first_pod s (picolet installed $(awk -v a="$BOOT_T0" -v b="$t_install" 'BEGIN { printf "%.1f", b - a }') s after qemu started)"

# cgroup v2 under the systemd driver, read from the kernel's files.
check "cgroup v2: the kubepods slices, cpu.max and memory.max of a limited pod" 60 'cgroup_v2'
check "cgroup v2: a pod over its memory limit is OOMKilled, behind memory.events oom_kill" 240 '
    cp /mnt/host/manifests/hog.yaml /etc/kubernetes/manifests/
    oom_killed hog 200 || { diag; exit 1; }
    rm /etc/kubernetes/manifests/hog.yaml'
check "cgroup v2: PSI files, and picolet serves them" 60 'psi'
check "cgroup v2: memory.available from the v2 root crosses a hard threshold: the pod that filled memory is evicted, no other" 300 'memory_eviction 270'

# 2. Upgrade in place: new binary, unit restarted, no pod restarts.
check "upgrade in place: no pod restarts" 120 '
    before=$(running_sets)
    old=$(systemctl show -p MainPID --value picolet)
    install -m 0755 /mnt/host/picolet-upgrade /usr/bin/.picolet.new
    mv -f /usr/bin/.picolet.new /usr/bin/picolet
    systemctl restart picolet
    systemctl is-active picolet >/dev/null || { diag; exit 1; }
    new=$(systemctl show -p MainPID --value picolet)
    [[ $new != "$old" && $new != 0 ]] || { echo "picolet was not restarted (MainPID $old -> $new)"; exit 1; }
    # Several sync loops of the new picolet.
    sleep 25
    after=$(running_sets)
    if [[ $before != "$after" ]]; then
        echo "pods restarted across the upgrade (kind pod container id pid):"
        diff <(echo "$before") <(echo "$after")
        diag
        exit 1
    fi
    echo "picolet pid $old -> $new; $(wc -l <<<"$after") sandboxes and containers unchanged (ids and pids)"'

# 3. Reboot: the same pods come back, no duplicates.
check "ask for a reboot" 30 'setsid sh -c "sleep 1; systemctl reboot" </dev/null >/dev/null 2>&1 &'
wait_off 120
boot
check "after a reboot the same pods run, once" 240 'wait_running 200 web bridged limited && no_duplicates'
log "boot $BOOT (reboot): qemu started -> every pod running $(since "$BOOT_T0") s"

# 4. Power cuts while picolet is busy.
check "start the busy load" 30 '
    cp /mnt/host/manifests/crashy.yaml /etc/kubernetes/manifests/
    setsid bash /mnt/host/churn.sh </dev/null >/dev/null 2>&1 &
    echo started'
extra=0
for ((cut = 1; cut <= CUTS; cut++)); do
    # A random moment 5-25 s into the load (the churn pod recreated several times, crashy
    # restarting, status and checkpoint writes).
    wait_s=$((5 + RANDOM % 21))
    sleep "$wait_s"
    log "power cut $cut/$CUTS: SIGKILL of qemu $wait_s s into the busy load"
    power_cut
    boot
    check "after power cut $cut every pod runs, once" 300 'wait_running 240 web bridged limited churn crashy:sandbox && no_duplicates'
    up=$(since "$BOOT_T0")
    check "after power cut $cut picolet runs and every file it keeps is whole" 60 '
        systemctl is-active picolet >/dev/null || { diag; exit 1; }
        files_whole /var/lib/kubelet'
    gx 60 '
        n=$(systemctl show -p NRestarts --value picolet); c=$(systemctl show -p NRestarts --value containerd)
        # (the crashing pod'"'"'s back-off is expected: it crashes on purpose)
        warnings=$(journalctl -b -u picolet -p warning --no-pager -q | grep -v "BackOff: Back-off restarting failed container main in pod crashy-")
        w=$(grep -c . <<<"$warnings")
        j=$(journalctl -b -k --no-pager -q | grep -c "recovery complete")
        echo "$n $c $w $j"
        head -n 5 <<<"$warnings"' || fail "reading the journal after power cut $cut"
    read -r n c w j <<<"$(head -n 1 <<<"$GX_OUT")"
    note="picolet restarts $n, containerd restarts $c, picolet warnings $w (besides the crashing pod's back-off), ext4 journal replays $j"
    if [[ $n != 0 || $c != 0 || $w != 0 ]]; then
        extra=$((extra + 1))
        note+=" (more than a normal start:$(tail -n +2 <<<"$GX_OUT" | sed 's/^/ | /' | tr -d '\n'))"
    fi
    log "power cut $cut/$CUTS: every pod running $up s after qemu started; $note"
    check "restart the busy load" 30 'setsid bash /mnt/host/churn.sh </dev/null >/dev/null 2>&1 & echo started'
done
if ((CUTS > 0)); then
    log "power cuts: $CUTS, boots that needed more than a normal start: $extra"
fi
stop_qemu
PASSED=1
log "$ARCH: every scenario passed in $(since "$T_ALL") s ($BOOT boots; first pod $first_pod s after qemu started)"
exit 0
}
