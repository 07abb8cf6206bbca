#!/usr/bin/env bash
# scripts/bench.sh: picolet's benchmarks on this machine. Prints figures; asserts nothing about
# them (it fails only when a step cannot run at all). Run as root.
#
#   1. size of the stripped release binary: x86_64, and aarch64 / armv7 when their Rust target
#      is installed and the cross gcc exists
#   2. raw CRI call times and PLEG relist cost: `cargo bench --bench cri` on a scratch containerd
#   3. the release picolet running 10 static pods: its RSS and CPU over BENCH_SECONDS, beside
#      containerd's and the shims'; then containerd alone while picolet is paused (SIGSTOP)
#   4. manifest write -> container running latency, 5 times, next to the raw CRI time of step 2
#
# Environment:
#   BENCH_SECONDS           sampling window of step 3 (default 60)
#   BENCH_BASELINE_SECONDS  window with picolet paused (default: BENCH_SECONDS; 0 skips it).
#                           Keep it over 30 s: the shims wake every 30 s by themselves.
#   BENCH_DIR               scratch directory (default /tmp/pbench; keep it short: unix sockets)
#   BENCH_SKIP_CROSS=1      skip the aarch64/armv7 builds
#
# Every process it starts is stopped by PID on exit, Ctrl-C included; the scratch containerd is
# stopped with scripts/scratch-containerd.sh, which removes its pods, shims and mounts.
set -euo pipefail
cd "$(dirname -- "${BASH_SOURCE[0]}")/.."
REPO=$(pwd -P)

DIR=${BENCH_DIR:-/tmp/pbench}
SECONDS_WINDOW=${BENCH_SECONDS:-60}
BASELINE_SECONDS=${BENCH_BASELINE_SECONDS:-$SECONDS_WINDOW}
WORK=$DIR/pl # picolet's config, manifests, root dir, logs
NODE=bench-node
STATIC_PODS=10
LATENCY_RUNS=5
IMAGE=picolet.local/busybox:1
SCRATCH=$REPO/scripts/scratch-containerd.sh

say() { printf '%s\n' "$*"; }
section() { printf '\n==== %s\n' "$*"; }
loadavg() { say "  load average now: $(cut -d' ' -f1-3 /proc/loadavg) (1, 5, 15 min; other work on the machine skews the figures)"; }
die() {
    printf 'bench: error: %s\n' "$*" >&2
    exit 1
}
now() { printf '%s' "${EPOCHREALTIME/,/.}"; }
since() { python3 -c "import sys; print('%.1f' % (float(sys.argv[2]) - float(sys.argv[1])))" "$1" "$(now)"; }

[[ $(id -u) == 0 ]] || die "run as root (containerd, runc and CNI need it)"
[[ $SECONDS_WINDOW =~ ^[0-9]+$ && $SECONDS_WINDOW -gt 0 ]] || die "BENCH_SECONDS must be a positive integer"
[[ $BASELINE_SECONDS =~ ^[0-9]+$ ]] || die "BENCH_BASELINE_SECONDS must be an integer"
for b in cargo python3 ctr containerd getconf; do
    command -v "$b" >/dev/null || die "$b not found"
done
CLK_TCK=$(getconf CLK_TCK)

# ---------------------------------------------------------------- process bookkeeping

PICOLET_PID=
CHILD_PID= # the helper or cargo command currently waited for
CONTAINERD_STARTED=0

# PIDs of the descendants of $1, deepest first.
descendants() {
    local p kids=()
    mapfile -t kids < <(ps -o pid= --ppid "$1" 2>/dev/null | tr -d ' ')
    for p in "${kids[@]}"; do
        [[ -n $p ]] || continue
        descendants "$p"
        printf '%s\n' "$p"
    done
}

# Stops PID and its descendants: SIGTERM to all, SIGKILL to what is left after 10 s.
stop_tree() {
    local pid=$1 p i left
    [[ -n $pid ]] && kill -0 "$pid" 2>/dev/null || return 0
    local all=()
    mapfile -t all < <(descendants "$pid")
    all+=("$pid")
    for p in "${all[@]}"; do kill -CONT "$p" 2>/dev/null || true; done
    for p in "${all[@]}"; do kill -TERM "$p" 2>/dev/null || true; done
    for ((i = 0; i < 100; i++)); do
        left=0
        for p in "${all[@]}"; do
            if [[ -e /proc/$p ]] && [[ $(cut -d' ' -f3 "/proc/$p/stat" 2>/dev/null) != Z ]]; then left=1; fi
        done
        [[ $left == 1 ]] || break
        sleep 0.1
    done
    for p in "${all[@]}"; do kill -KILL "$p" 2>/dev/null || true; done
    wait "$pid" 2>/dev/null || true
}

# The script's own stdout/stderr, for the trap: it may run while a redirected command is waited
# for (run_child ... >FILE), and its messages belong on the terminal, not in FILE.
exec 3>&1 4>&2
cleanup() {
    local rc=$?
    trap - EXIT INT TERM
    set +e
    exec 1>&3 2>&4
    if [[ -n $CHILD_PID ]]; then
        stop_tree "$CHILD_PID"
    fi
    if [[ -n $PICOLET_PID ]] && kill -0 "$PICOLET_PID" 2>/dev/null; then
        say "bench: stopping picolet (pid $PICOLET_PID)"
        stop_tree "$PICOLET_PID"
    fi
    if [[ $CONTAINERD_STARTED == 1 ]]; then
        say "bench: stopping the scratch containerd in $DIR"
        bash "$SCRATCH" stop "$DIR" 2>&1 | sed 's/^/  /'
    fi
    exit "$rc"
}
trap cleanup EXIT
trap 'exit 130' INT
trap 'exit 143' TERM

# Runs a command in the background and waits for it, so that a signal to this script is handled
# at once (the trap then stops the command by PID).
run_child() {
    local rc=0
    "$@" 3>&- 4>&- &
    CHILD_PID=$!
    wait "$CHILD_PID" || rc=$?
    CHILD_PID=
    return "$rc"
}

# ---------------------------------------------------------------- python helpers

HELPER=$WORK/bench_helper.py
write_helper() {
    cat >"$HELPER" <<'PY'
"""Helpers of scripts/bench.sh: polling picolet's local API and sampling /proc. Prints figures."""
import calendar
import json
import os
import re
import socket
import statistics
import subprocess
import sys
import time
import urllib.request


def get(port, path, timeout=2.0):
    try:
        with urllib.request.urlopen("http://127.0.0.1:%d%s" % (port, path), timeout=timeout) as r:
            return r.read()
    except Exception:
        return None


def pods(port):
    body = get(port, "/pods")
    if body is None:
        return None
    try:
        return json.loads(body).get("items") or []
    except ValueError:
        return None


def alive(pid):
    try:
        with open("/proc/%d/stat" % pid) as f:
            return f.read().rsplit(") ", 1)[1][0] not in "ZX"
    except (OSError, IndexError):
        return False


def running(pod):
    st = pod.get("status") or {}
    cs = st.get("containerStatuses") or []
    return st.get("phase") == "Running" and cs and all("running" in (c.get("state") or {}) for c in cs)


def cmd_freeport():
    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    print(s.getsockname()[1])
    s.close()


def cmd_wait_api(port, pid, timeout):
    port, pid, t0 = int(port), int(pid), time.monotonic()
    while time.monotonic() - t0 < float(timeout):
        if get(port, "/healthz") is not None:
            return
        if not alive(pid):
            sys.exit("picolet (pid %d) exited before its API answered" % pid)
        time.sleep(0.05)
    sys.exit("picolet's API did not answer within %s s" % timeout)


def cmd_wait_running(port, pid, want, prefix, timeout, t_start):
    port, pid, want = int(port), int(pid), int(want)
    t0 = time.monotonic()
    n = 0
    while time.monotonic() - t0 < float(timeout):
        items = pods(port) or []
        n = sum(1 for p in items if p["metadata"]["name"].startswith(prefix) and running(p))
        if n >= want:
            print("%.1f" % (time.time() - float(t_start)))
            return
        if not alive(pid):
            sys.exit("picolet (pid %d) exited" % pid)
        time.sleep(0.1)
    sys.exit("only %d of %d pods running after %s s" % (n, want, timeout))


def cmd_wait_gone(port, prefixes, timeout):
    port, t0 = int(port), time.monotonic()
    prefixes = prefixes.split(",")
    left = []
    while time.monotonic() - t0 < float(timeout):
        items = pods(port)
        if items is not None:
            left = [p["metadata"]["name"] for p in items if p["metadata"]["name"].startswith(tuple(prefixes))]
            if not left:
                print("%.1f" % (time.monotonic() - t0))
                return
        time.sleep(0.2)
    print("timeout (still listed after %s s: %s)" % (timeout, " ".join(left)))


# ---- /proc sampling

def proc_status(pid):
    out = {}
    try:
        with open("/proc/%d/status" % pid) as f:
            for line in f:
                k, _, v = line.partition(":")
                out[k] = v.strip()
    except OSError:
        return None
    return out


def kb(status, key):
    v = (status or {}).get(key, "0 kB").split()
    return int(v[0]) if v else 0


def cpu_ticks(pid):
    try:
        with open("/proc/%d/stat" % pid) as f:
            rest = f.read().rsplit(") ", 1)[1].split()
        return int(rest[11]) + int(rest[12])
    except (OSError, IndexError, ValueError):
        return None


def cmdline(pid):
    try:
        with open("/proc/%d/cmdline" % pid, "rb") as f:
            return [a.decode(errors="replace") for a in f.read().split(b"\0") if a]
    except OSError:
        return []


def shims(scratch):
    out = []
    for d in os.listdir("/proc"):
        if not d.isdigit():
            continue
        args = cmdline(int(d))
        if args and os.path.basename(args[0]).startswith("containerd-shim") and any(scratch in a for a in args):
            out.append(int(d))
    return out


def mib(k):
    return "%.1f MiB" % (k / 1024.0)


def cmd_sample(picolet_pid, containerd_pid, scratch, seconds, clk_tck, title):
    """RSS (sampled each second) and CPU (utime+stime delta) of picolet, containerd and the shims."""
    pp, cp, seconds, tck = int(picolet_pid), int(containerd_pid), int(seconds), float(clk_tck)
    procs = [("picolet (pid %d)" % pp, pp), ("containerd (pid %d)" % cp, cp)] if pp > 0 else [("containerd (pid %d)" % cp, cp)]
    sh0 = shims(scratch)
    t0 = time.monotonic()
    c0 = {pid: cpu_ticks(pid) for _, pid in procs}
    s0 = {pid: cpu_ticks(pid) for pid in sh0}
    rss = {pid: [] for _, pid in procs}
    shim_rss = []
    for i in range(seconds + 1):
        for _, pid in procs:
            rss[pid].append(kb(proc_status(pid), "VmRSS"))
        shim_rss.append(sum(kb(proc_status(p), "VmRSS") for p in sh0))
        if i < seconds:
            time.sleep(max(0.0, t0 + i + 1 - time.monotonic()))
    t1 = time.monotonic()
    c1 = {pid: cpu_ticks(pid) for _, pid in procs}
    s1 = {pid: cpu_ticks(pid) for pid in sh0}
    el = t1 - t0
    print("  %s: window %.1f s, %d RSS samples (1 per second), CLK_TCK %d" % (title, el, len(shim_rss), tck))
    print("  %-26s %10s %21s %10s %8s %10s %16s" % ("process", "RSS avg", "RSS min..max", "VmHWM", "threads", "CPU time", "CPU (1 core=100%)"))
    for name, pid in procs:
        st = proc_status(pid)
        r = rss[pid]
        if c0[pid] is None or c1[pid] is None:
            cpu_s, pct = "n/a", "n/a"
        else:
            sec = (c1[pid] - c0[pid]) / tck
            cpu_s, pct = "%.2f s" % sec, "%.2f %%" % (100.0 * sec / el)
        print("  %-26s %10s %21s %10s %8s %10s %16s" % (
            name, mib(statistics.mean(r)), "%s..%s" % (mib(min(r)).split()[0], mib(max(r))),
            mib(kb(st, "VmHWM")), (st or {}).get("Threads", "?"), cpu_s, pct))
    both = [p for p in sh0 if s0.get(p) is not None and s1.get(p) is not None]
    sec = sum(s1[p] - s0[p] for p in both) / tck
    print("  %-26s %10s %21s %10s %8s %10s %16s" % (
        "containerd-shim x%d (total)" % len(sh0), mib(statistics.mean(shim_rss)),
        "%s..%s" % (mib(min(shim_rss)).split()[0], mib(max(shim_rss))), "", "", "%.2f s" % sec,
        "%.2f %%" % (100.0 * sec / el)))
    if pp > 0:
        r = rss[pp]
        c = c1[pp] - c0[pp] if c0[pp] is not None and c1[pp] is not None else -1
        print("RESULT picolet_steady rss_avg_kib=%d vmhwm_kib=%d cpu_pct=%.3f window_s=%.1f" % (
            statistics.mean(r), kb(proc_status(pp), "VmHWM"), 100.0 * c / tck / el, el))


# ---- manifest -> running latency

MANIFEST = """apiVersion: v1
kind: Pod
metadata:
  name: %s
spec:
  terminationGracePeriodSeconds: 1
  containers:
  - name: sleep
    image: %s
    command: ["sleep", "3600"]
"""


def ctr_task_status(sock, pid):
    try:
        out = subprocess.run(["ctr", "-a", sock, "-n", "k8s.io", "tasks", "ls"], capture_output=True,
                             text=True, timeout=10).stdout
    except (OSError, subprocess.SubprocessError):
        return "ctr failed"
    for line in out.splitlines()[1:]:
        f = line.split()
        if len(f) >= 3 and f[1] == str(pid):
            return f[2]
    return "not listed"


LOG_LINE = re.compile(r"^[IWEDF](\d\d)(\d\d) (\d\d):(\d\d):(\d\d)\.(\d{6}) ")
LOG_STEPS = (("added", "adding pod"), ("sandbox", "creating sandbox"), ("started", "started container"))


def log_times(log, full, t_wall):
    """Seconds after t_wall at which picolet logged each step for pod `full` (klog lines, UTC)."""
    year = time.gmtime(t_wall).tm_year
    name = re.compile(r"(?<![\w.-])%s(?![\w.-])" % re.escape(full))
    out = {}
    try:
        lines = open(log, errors="replace").read().splitlines()
    except OSError:
        return out
    for line in lines:
        m = LOG_LINE.match(line)
        if not m or not name.search(line):
            continue
        mo, d, h, mi, se, us = (int(x) for x in m.groups())
        t = calendar.timegm((year, mo, d, h, mi, se, 0, 0, 0)) + us / 1e6 - t_wall
        for key, text in LOG_STEPS:
            if key not in out and text in line and t > -1:
                out[key] = t
    return out


def cmd_latency(port, manifests, runs, node, sock, image, raw_ms, picolet_pid, log):
    port, runs, pp = int(port), int(runs), int(picolet_pid)
    raw = float(raw_ms) if raw_ms not in ("", "n/a") else None
    rows = []
    print("  %-4s %-16s %14s %18s %18s  %s" % ("run", "pod", "seen in /pods", "process exec'd", "running in /pods", "ctr task"))
    for i in range(runs):
        name = "lat-%d" % i
        full = "%s-%s" % (name, node)
        before = {int(d) for d in os.listdir("/proc") if d.isdigit()}
        tmp = os.path.join(manifests, ".%s.yaml.tmp" % name)
        with open(tmp, "w") as f:
            f.write(MANIFEST % (name, image))
        t_wall = time.time()
        t0 = time.monotonic()
        os.rename(tmp, os.path.join(manifests, name + ".yaml"))
        seen = execd = api = None
        pid = None
        next_api = t0
        candidates = set()
        while time.monotonic() - t0 < 60:
            now = time.monotonic()
            if execd is None:
                # Only processes that are new since the write are re-read: a container's process
                # is `runc init` first and execs `sleep 3600` when the task starts.
                for d in os.listdir("/proc"):
                    if d.isdigit() and int(d) not in before:
                        candidates.add(int(d))
                for p in list(candidates):
                    args = cmdline(p)
                    if not args:
                        candidates.discard(p)
                    elif args == ["sleep", "3600"]:
                        execd, pid = time.monotonic() - t0, p
                        break
            if api is None and now >= next_api:
                next_api = now + 0.010
                for p in pods(port) or []:
                    if p["metadata"]["name"] == full:
                        if seen is None:
                            seen = time.monotonic() - t0
                        if running(p):
                            api = time.monotonic() - t0
            if execd is not None and api is not None:
                break
            if pp > 0 and not alive(pp):
                sys.exit("picolet exited")
            time.sleep(0.005)
        task = ctr_task_status(sock, pid) if pid else "-"
        f = lambda v: "%.1f ms" % (v * 1000) if v is not None else "timeout"
        print("  %-4d %-16s %14s %18s %18s  %s" % (i + 1, full, f(seen), f(execd), f(api), task))
        rows.append((seen, execd, api, full, t_wall))
        time.sleep(2)
    med = lambda k: statistics.median([r[k] for r in rows if r[k] is not None]) if any(r[k] is not None for r in rows) else None
    m_seen, m_exec, m_api = med(0), med(1), med(2)
    f = lambda v: "%.1f ms" % (v * 1000) if v is not None else "n/a"
    print("  %-4s %-16s %14s %18s %18s" % ("med", "", f(m_seen), f(m_exec), f(m_api)))
    if raw is not None:
        print("  raw CRI RunPodSandbox+CreateContainer+StartContainer (median of step 2): %.1f ms" % raw)
        if m_exec is not None:
            print("  picolet's overhead to the container process: %.1f ms (%.2fx the raw CRI time)"
                  % (m_exec * 1000 - raw, m_exec * 1000 / raw))
        if m_api is not None:
            print("  picolet's overhead to running in /pods:      %.1f ms (%.2fx the raw CRI time)"
                  % (m_api * 1000 - raw, m_api * 1000 / raw))
    vals = tuple("%.1f" % (v * 1000) if v is not None else "n/a" for v in (m_seen, m_exec, m_api))
    # Where the time goes, from picolet's own log lines (default verbosity logs these three).
    steps = [log_times(log, full, tw) for (_, _, _, full, tw) in rows]
    print("  from picolet's log (%s), ms after the rename:" % log)
    print("  %-4s %-16s %12s %22s %26s %14s" % ("run", "pod", "pod added", "sandbox call begins", "StartContainer returned", "CRI sequence"))
    for i, (st, row) in enumerate(zip(steps, rows)):
        seq = st["started"] - st["sandbox"] if "started" in st and "sandbox" in st else None
        print("  %-4d %-16s %12s %22s %26s %14s" % (i + 1, row[3], f(st.get("added")), f(st.get("sandbox")), f(st.get("started")), f(seq)))
    med_of = lambda xs: statistics.median(xs) if xs else None
    m_added = med_of([st["added"] for st in steps if "added" in st])
    m_sb = med_of([st["sandbox"] for st in steps if "sandbox" in st])
    m_seq = med_of([st["started"] - st["sandbox"] for st in steps if "started" in st and "sandbox" in st])
    print("  %-4s %-16s %12s %22s %26s %14s" % ("med", "", f(m_added), f(m_sb), "", f(m_seq)))
    print("  (CRI sequence: RunPodSandbox, PodSandboxStatus, ImageStatus, CreateContainer, StartContainer as picolet")
    print("   runs them, with 10+ pods running; compare with the raw median sum above)")
    print("RESULT latency_median_ms seen=%s process=%s api_running=%s raw_cri=%s" % (vals + (raw_ms or "n/a",)))


def cmd_wait_stopped(sock, timeout):
    """Polls ctr every 0.5 s until no task of the k8s.io namespace is RUNNING."""
    t0 = time.monotonic()
    n = -1
    while time.monotonic() - t0 < float(timeout):
        try:
            out = subprocess.run(["ctr", "-a", sock, "-n", "k8s.io", "tasks", "ls"], capture_output=True,
                                 text=True, timeout=10).stdout
            n = sum(1 for line in out.splitlines()[1:] if line.split()[2:3] == ["RUNNING"])
        except (OSError, subprocess.SubprocessError):
            n = -1
        if n == 0:
            print("%.1f s" % (time.monotonic() - t0))
            return
        time.sleep(0.5)
    print("timeout: %s tasks still RUNNING after %s s" % (n, timeout))


def cmd_leftovers(scratch):
    procs = []
    for d in os.listdir("/proc"):
        if not d.isdigit() or int(d) == os.getpid():
            continue
        args = cmdline(int(d))
        if any(scratch in a for a in args[1:] + args[:1]):
            procs.append("%s %s" % (d, " ".join(args)[:100]))
            continue
        try:
            with open("/proc/%s/mountinfo" % d) as f:
                for line in f:
                    parts = line.split()
                    if parts[4] == "/" and ("=" + scratch + "/") in line:
                        procs.append("%s %s (container)" % (d, " ".join(args)[:60]))
                        break
        except OSError:
            pass
    mounts = []
    with open("/proc/self/mountinfo") as f:
        for line in f:
            mp = line.split()[4].encode().decode("unicode_escape")
            if mp == scratch or mp.startswith(scratch + "/"):
                mounts.append(mp)
    print("  processes tied to %s: %d%s" % (scratch, len(procs), "".join("\n    " + p for p in procs)))
    print("  mounts under %s:      %d%s" % (scratch, len(mounts), "".join("\n    " + m for m in mounts)))


if __name__ == "__main__":
    cmd, args = sys.argv[1].replace("-", "_"), sys.argv[2:]
    globals()["cmd_" + cmd](*args)
PY
}

helper() { python3 "$HELPER" "$@"; }

write_manifest() { # write_manifest NAME: dot-temp file, then rename into the directory
    local name=$1
    cat >"$WORK/manifests/.$name.yaml.tmp" <<EOF
apiVersion: v1
kind: Pod
metadata:
  name: $name
spec:
  terminationGracePeriodSeconds: 1
  containers:
  - name: sleep
    image: $IMAGE
    command: ["sleep", "3600"]
EOF
    mv -f -- "$WORK/manifests/.$name.yaml.tmp" "$WORK/manifests/$name.yaml"
}

# ---------------------------------------------------------------- prepare the scratch dir

# Never take over (or stop) a containerd that runs for DIR already.
if [[ -f $DIR/containerd.pid ]]; then
    p=$(<"$DIR/containerd.pid")
    if [[ $p =~ ^[0-9]+$ ]] && [[ $(cat "/proc/$p/comm" 2>/dev/null) == containerd ]]; then
        die "a containerd for $DIR is already running (pid $p); stop it first: scripts/scratch-containerd.sh stop $DIR"
    fi
fi
if [[ -d $DIR ]]; then
    # What a crashed earlier run left: processes, mounts, and pods in containerd's metadata
    # (which a new containerd would recover and the relists would count). The image cache stays.
    bash "$SCRATCH" stop "$DIR" >/dev/null 2>&1 || die "cleaning what an earlier run left in $DIR failed: run scripts/scratch-containerd.sh stop $DIR"
    rm -rf --one-file-system -- "$DIR/root" "$WORK"
fi
mkdir -p "$WORK/manifests" "$WORK/logs" "$WORK/build"
write_helper

say "picolet benchmarks (figures only; nothing is asserted)"
say "  machine: $(nproc) CPUs, $(awk '/MemTotal/ {printf "%.1f GiB", $2/1048576}' /proc/meminfo) RAM, kernel $(uname -r), $(rustc --version)"
say "  scratch dir: $DIR"

# ---------------------------------------------------------------- 1. binary sizes

section "1. Release binary size (profile.release: opt-level=z, lto, codegen-units=1, panic=abort, strip)"

size_line() { # size_line TRIPLE PATH
    local bytes desc=
    bytes=$(stat -c %s "$2")
    if command -v file >/dev/null; then
        desc=$(file -b "$2" | awk -F', ' '{print $2 ", " $4 ", " $NF}')
    fi
    printf '  %-32s %9d bytes = %7.1f KiB = %5.2f MiB   (%s)\n' "$1" "$bytes" \
        "$(awk -v b="$bytes" 'BEGIN {print b/1024}')" "$(awk -v b="$bytes" 'BEGIN {print b/1048576}')" "$desc"
}

t0=$(now)
if ! run_child cargo build --release --locked >"$WORK/build/x86_64.log" 2>&1; then
    tail -n 20 "$WORK/build/x86_64.log" >&2
    die "cargo build --release failed (log above)"
fi
say "  (x86_64 build: $(since "$t0") s)"
size_line "x86_64-unknown-linux-gnu" "$REPO/target/release/picolet"

installed=$(rustup target list --installed 2>/dev/null || true)
for spec in aarch64-unknown-linux-gnu:aarch64-linux-gnu-gcc armv7-unknown-linux-gnueabihf:arm-linux-gnueabihf-gcc; do
    triple=${spec%%:*} gcc=${spec#*:}
    if [[ ${BENCH_SKIP_CROSS:-0} == 1 ]]; then
        say "  $triple: skipped (BENCH_SKIP_CROSS=1)"
        continue
    fi
    if ! grep -qx "$triple" <<<"$installed"; then
        say "  $triple: skipped (rust target not installed: rustup target add $triple)"
        continue
    fi
    if ! command -v "$gcc" >/dev/null; then
        say "  $triple: skipped ($gcc not found)"
        continue
    fi
    upper=$(tr 'a-z-' 'A-Z_' <<<"$triple")
    t0=$(now)
    if run_child env "CARGO_TARGET_${upper}_LINKER=$gcc" "CC_${triple//-/_}=$gcc" \
        cargo build --release --locked --target "$triple" >"$WORK/build/$triple.log" 2>&1; then
        size_line "$triple" "$REPO/target/$triple/release/picolet"
        say "  (build: $(since "$t0") s)"
    else
        why=$(grep -m 3 -E '^(error|warning: .*failed)' "$WORK/build/$triple.log" | tr '\n' ' ')
        say "  $triple: build failed: ${why:-$(tail -n 1 "$WORK/build/$triple.log")} (log: $WORK/build/$triple.log)"
    fi
done

# ---------------------------------------------------------------- 2. cargo bench

section "2. Raw CRI call times and PLEG relist cost (cargo bench --bench cri)"
loadavg
CONTAINERD_STARTED=1
SOCK=$(bash "$SCRATCH" start "$DIR" 2>"$WORK/scratch-start.log" 3>&- 4>&- | tail -n 1) ||
    { cat "$WORK/scratch-start.log" >&2; die "starting the scratch containerd failed"; }
CONTAINERD_PID=$(<"$DIR/containerd.pid")
say "  scratch containerd: pid $CONTAINERD_PID, socket $SOCK"
say "  command: cargo bench --bench cri -- unix://$SOCK"
run_child cargo bench --locked --bench cri -- "unix://$SOCK" >"$WORK/bench-cri.txt" 2>"$WORK/bench-cri.err" ||
    { cat "$WORK/bench-cri.txt" "$WORK/bench-cri.err" >&2; die "cargo bench failed"; }
sed 's/^/  /' "$WORK/bench-cri.txt"
RAW_CRI_MS=$(sed -n 's/^RESULT raw_cri_median_ms .* sum=\([0-9.]*\).*/\1/p' "$WORK/bench-cri.txt")
RAW_CRI_MS=${RAW_CRI_MS:-n/a}

# ---------------------------------------------------------------- 3. picolet, steady state

section "3. picolet running $STATIC_PODS static pods: memory and CPU"
loadavg
PORT=$(helper freeport)
cat >"$WORK/config.yaml" <<EOF
apiVersion: kubelet.config.k8s.io/v1beta1
kind: KubeletConfiguration
staticPodPath: $WORK/manifests
containerRuntimeEndpoint: unix://$SOCK
podLogsDir: $WORK/logs
healthzPort: $PORT
EOF
"$REPO/target/release/picolet" --config "$WORK/config.yaml" --root-dir "$WORK/kubelet" \
    --hostname-override "$NODE" </dev/null >"$WORK/picolet.log" 2>&1 3>&- 4>&- &
PICOLET_PID=$!
say "  picolet: pid $PICOLET_PID, API http://127.0.0.1:$PORT, log $WORK/picolet.log (default verbosity)"
run_child helper wait-api "$PORT" "$PICOLET_PID" 20 || { tail -n 20 "$WORK/picolet.log" >&2; die "picolet did not start"; }
t_pods=$(now)
for ((i = 0; i < STATIC_PODS; i++)); do write_manifest "static-$i"; done
run_child helper wait-running "$PORT" "$PICOLET_PID" "$STATIC_PODS" static- 180 "$t_pods" >"$WORK/up.txt" ||
    { tail -n 30 "$WORK/picolet.log" >&2; die "the static pods did not all run"; }
up=$(<"$WORK/up.txt")
say "  $STATIC_PODS manifests written -> all $STATIC_PODS pods Running in /pods: $up s"
say "  settling 5 s, then sampling for $SECONDS_WINDOW s (BENCH_SECONDS)"
sleep 5
run_child helper sample "$PICOLET_PID" "$CONTAINERD_PID" "$DIR" "$SECONDS_WINDOW" "$CLK_TCK" \
    "picolet running, $STATIC_PODS pods"
if [[ $BASELINE_SECONDS -gt 0 ]]; then
    say ""
    say "  for comparison, containerd and the shims with picolet paused (SIGSTOP), same pods:"
    kill -STOP "$PICOLET_PID"
    run_child helper sample 0 "$CONTAINERD_PID" "$DIR" "$BASELINE_SECONDS" "$CLK_TCK" "picolet paused" ||
        { kill -CONT "$PICOLET_PID"; die "sampling failed"; }
    kill -CONT "$PICOLET_PID"
    sleep 2
fi

# ---------------------------------------------------------------- 4. latency

section "4. Manifest write -> container running, $LATENCY_RUNS times (one new pod each, $STATIC_PODS+ pods running)"
loadavg
say "  clock starts at rename(2) of the manifest into $WORK/manifests; polled every 5 ms (/proc) and 10 ms (/pods)"
say "  seen in /pods:     the pod is listed by picolet's API (file noticed and accepted)"
say "  process exec'd:    a new 'sleep 3600' process exists (runc has started the task: containerd's RUNNING)"
say "  running in /pods:  picolet's API shows the container state 'running'"
say "  ctr task:          containerd's task status of that process, read once afterwards with ctr"
run_child helper latency "$PORT" "$WORK/manifests" "$LATENCY_RUNS" "$NODE" "$SOCK" "$IMAGE" "$RAW_CRI_MS" "$PICOLET_PID" "$WORK/picolet.log"

# ---------------------------------------------------------------- teardown

section "Teardown"
rm -f -- "$WORK"/manifests/*.yaml
run_child helper wait-gone "$PORT" "static-,lat-" 120 >"$WORK/gone.txt"
say "  manifests deleted -> all $((STATIC_PODS + LATENCY_RUNS)) pods gone from /pods: $(<"$WORK/gone.txt") s"
run_child helper wait-stopped "$SOCK" 120 >"$WORK/stopped.txt"
say "  manifests deleted -> no task RUNNING in containerd (ctr, polled every 0.5 s): $(<"$WORK/stopped.txt") (terminationGracePeriodSeconds: 1; sleep as PID 1 ignores SIGTERM)"
say "  containers and sandboxes still listed by containerd: $(ctr -a "$SOCK" -n k8s.io containers ls -q | wc -l)"
kill -TERM "$PICOLET_PID"
for ((i = 0; i < 150; i++)); do
    if ! kill -0 "$PICOLET_PID" 2>/dev/null || [[ $(cut -d' ' -f3 "/proc/$PICOLET_PID/stat" 2>/dev/null) == Z ]]; then
        break
    fi
    sleep 0.1
done
if [[ $i == 150 ]]; then
    say "  picolet did not exit within 15 s of SIGTERM: sending SIGKILL"
    kill -KILL "$PICOLET_PID" 2>/dev/null || true
fi
rc=0
wait "$PICOLET_PID" || rc=$?
say "  picolet stopped by SIGTERM: exit status $rc"
PICOLET_PID=
bash "$SCRATCH" stop "$DIR" 2>&1 | sed 's/^/  /'
CONTAINERD_STARTED=0
helper leftovers "$DIR"
say ""
say "done; logs in $WORK (picolet.log, bench-cri.txt, build/)"
