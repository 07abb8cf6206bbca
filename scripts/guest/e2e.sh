# scripts/guest.sh e2e: the containerd end-to-end files inside the booted amd64 guest, on its
# kernel (cgroup v2 under systemd) with its containerd 2.x, as they run on the host in the test
# command. Sourced by scripts/guest.sh (its boot, gx, check, fail and the run's directory and
# share); not run on its own.
#
# e2e_build (on the host, before the image): `cargo test --features e2e --no-run` of the files
# asked for (--tests "NAME...", default every tests/e2e*.rs), which also builds the debug picolet
# they start; for the arm64 guest with --target aarch64-unknown-linux-gnu into target/cross (the
# test command's directory for the ARM builds), so they run natively in the guest. e2e_run: one boot of the tests variant of the image (iptables, python3 and zstd
# besides the device's packages; 4 GiB), the checkout shared read-only (9p) and mounted at its
# own path, so what the binaries were built with (env!("CARGO_MANIFEST_DIR"), the picolet
# binary's path) is where they look; the guest's own containerd and nothing else stopped (each
# test starts a scratch containerd of its own, from /usr/local/bin: the guest's 2.x build).
# Then each file in turn, from the checkout as cargo runs it, with GUEST_E2E_THREADS test
# threads (default 1: the guest's two vCPUs are emulated), every wait of the tests allowed
# GUEST_E2E_DEADLINE_SCALE times as long as on the host (PICOLET_TEST_DEADLINE_SCALE, default
# 4: an emulated machine is that much slower; what the tests wait for does not change) and the
# file GUEST_E2E_LIMIT seconds at most (default 5400); its output goes to e2e-NAME.log in the run directory (kept). A file that fails
# does not stop the others; the run fails at the end if one did.
# shellcheck shell=bash
# shellcheck disable=SC2034 # (PASSED: read by scripts/guest.sh, which sources this file)

E2E_THREADS=${GUEST_E2E_THREADS:-1}
E2E_LIMIT=${GUEST_E2E_LIMIT:-5400}
E2E_SCALE=${GUEST_E2E_DEADLINE_SCALE:-4}
[[ $E2E_SCALE =~ ^[1-9][0-9]*$ ]] || die "GUEST_E2E_DEADLINE_SCALE must be a whole number above 0, not '$E2E_SCALE'"
[[ $E2E_THREADS =~ ^[1-9][0-9]*$ ]] || die "GUEST_E2E_THREADS must be a number above 0, not '$E2E_THREADS'"
[[ $E2E_LIMIT =~ ^[1-9][0-9]*$ ]] || die "GUEST_E2E_LIMIT must be a number of seconds above 0, not '$E2E_LIMIT'"

# e2e_build: the test binaries, as "NAME PATH" lines in E2E_BINS; the picolet they start,
# E2E_PICOLET.
E2E_BINS=()
E2E_TARGET_DIR=$ROOT/target E2E_PICOLET=$ROOT/target/debug/picolet
if [[ -n $RUST_TARGET ]]; then
    E2E_TARGET_DIR=$ROOT/target/cross E2E_PICOLET=$ROOT/target/cross/$RUST_TARGET/debug/picolet
fi
e2e_build() {
    local names=() n args=() out t0
    if [[ -n $E2E_TESTS ]]; then
        read -ra names <<<"${E2E_TESTS//,/ }"
    else
        for n in "$ROOT"/tests/e2e*.rs; do names+=("$(basename "$n" .rs)"); done
    fi
    for n in "${names[@]}"; do
        [[ -f $ROOT/tests/$n.rs ]] || die "--tests: no tests/$n.rs"
        args+=(--test "$n")
    done
    t0=$(now)
    [[ -z $RUST_TARGET ]] || args+=(--target "$RUST_TARGET")
    log "building ${#names[@]} test files and the debug picolet for $ARCH (cargo test --features e2e --no-run${RUST_TARGET:+ --target $RUST_TARGET})"
    out=$(cd "$ROOT" && CARGO_TARGET_DIR=$E2E_TARGET_DIR cargo test --locked --features e2e --no-run --message-format=json-render-diagnostics "${args[@]}") ||
        die "cargo test --no-run failed (its messages are above)"
    mapfile -t E2E_BINS < <(python3 -c '
import json, sys
want = sys.argv[1:]
found = {}
for line in sys.stdin:
    try:
        m = json.loads(line)
    except ValueError:
        continue
    t = m.get("target", {})
    if m.get("reason") == "compiler-artifact" and m.get("executable") and t.get("kind") == ["test"]:
        found[t["name"]] = m["executable"]
for n in want:
    print(n, found.get(n, ""))
' "${names[@]}" <<<"$out")
    for n in "${E2E_BINS[@]}"; do
        [[ -x ${n#* } ]] || die "cargo built no test binary for ${n%% *}"
    done
    log "built in $(since "$t0") s"
}

e2e_run() {
    local line name bin t0 rc counts passed=0 failed=0 bad=()
    T_ALL=$(now)
    SHARES=(-virtfs "local,path=$ROOT,mount_tag=checkout,security_model=none,readonly=on")
    log "$ARCH guest, the containerd end-to-end files: ${#E2E_BINS[@]} of them, $E2E_THREADS test thread(s), waits x$E2E_SCALE, image $IMAGE, $MEMORY_MIB MiB; run directory $RUN"
    boot
    check "the guest runs systemd on cgroup v2, with the tools the tests call" 60 '
        wait_active containerd 120 || exit 1
        [[ $(stat -fc %T /sys/fs/cgroup) == cgroup2fs ]] || { echo "not cgroup v2: $(stat -fc %T /sys/fs/cgroup)"; exit 1; }
        for t in iptables python3 zstd busybox runc; do command -v "$t" >/dev/null || { echo "$t is missing from the image"; exit 1; }; done
        python3 -c "import prometheus_client" || { echo "python3-prometheus-client is missing from the image"; exit 1; }
        echo "$(uname -r), $(stat -fc %T /sys/fs/cgroup), $(/usr/local/bin/containerd --version | cut -d" " -f3), $(nproc) CPUs, $(free -m | awk "/^Mem:/ { print \$2 }") MiB"'
    check "the checkout mounted read-only at its own path; the guest's containerd stopped" 120 "
        mkdir -p '$ROOT'
        mount -t 9p -o trans=virtio,version=9p2000.L,ro,msize=262144 checkout '$ROOT' || exit 1
        [[ -x '$E2E_PICOLET' ]] || { echo 'no $E2E_PICOLET in the guest'; exit 1; }
        systemctl stop containerd
        '$E2E_PICOLET' --version"
    for line in "${E2E_BINS[@]}"; do
        name=${line%% *} bin=${line#* }
        t0=$(now)
        rc=0
        gx "$E2E_LIMIT" "cd '$ROOT' && SCRATCH_CONTAINERD_BIN=/usr/local/bin PICOLET_TEST_DEADLINE_SCALE=$E2E_SCALE RUST_BACKTRACE=1 '$bin' --test-threads=$E2E_THREADS 2>&1" || rc=$?
        printf '%s\n' "$GX_OUT" >"$RUN/e2e-$name.log"
        counts=$(grep -E '^test result: ' "$RUN/e2e-$name.log" | tail -n 1)
        counts=${counts#test result: }
        if [[ $rc == 0 ]]; then
            log "ok: $name: ${counts%%; finished*} ($(since "$t0") s)"
        else
            log "FAILED: $name (exit $rc): ${counts:-no result line} ($(since "$t0") s); the failures:"
            grep -E '^(test .* FAILED|---- .* stdout ----|thread .* panicked)' "$RUN/e2e-$name.log" | head -n 40 >&2 || true
            bad+=("$name")
        fi
        [[ $counts =~ ([0-9]+)\ passed ]] && passed=$((passed + BASH_REMATCH[1]))
        [[ $counts =~ ([0-9]+)\ failed ]] && failed=$((failed + BASH_REMATCH[1]))
    done
    log "the containerd end-to-end files in the $ARCH guest: ${#E2E_BINS[@]} files, $passed tests passed, $failed failed, in $(since "$T_ALL") s; each file's output in $RUN/e2e-*.log"
    # (A failed run keeps its directory anyway.)
    [[ ${#bad[@]} -eq 0 ]] || fail "end-to-end files that failed in the guest: ${bad[*]}"
    PASSED=1
    # The logs are the run's result: kept with the directory.
    GUEST_KEEP=1
}
