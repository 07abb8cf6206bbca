#!/usr/bin/env python3
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


def resident_split(pid):
    """picolet's resident pages by what maps them: its own executable, other files (libc, the
    loader), the main heap ([heap]: glibc's arena), the main thread's stack, and other anonymous
    mappings (the other threads' stacks and guard pages, allocations glibc mmaps for itself)."""
    try:
        exe = os.readlink("/proc/%d/exe" % pid)
        with open("/proc/%d/smaps" % pid) as f:
            lines = f.read().splitlines()
    except OSError:
        return "n/a"
    parts = {"binary": 0, "other files": 0, "heap": 0, "main stack": 0, "other anonymous": 0}
    what = None
    for line in lines:
        head = line.split()
        if head and "-" in head[0] and ":" not in head[0]:
            path = head[5] if len(head) > 5 else ""
            if path == exe:
                what = "binary"
            elif path == "[heap]":
                what = "heap"
            elif path == "[stack]":
                what = "main stack"
            elif path.startswith("/"):
                what = "other files"
            else:
                what = "other anonymous"
        elif head and head[0] == "Rss:" and what:
            parts[what] += int(head[1])
    return ", ".join("%s %.2f MiB" % (k, v / 1024.0) for k, v in parts.items())


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
        print("  picolet resident at the window's end, by mapping (/proc/%d/smaps): %s" % (pp, resident_split(pp)))
        r = rss[pp]
        c = c1[pp] - c0[pp] if c0[pp] is not None and c1[pp] is not None else -1
        print("RESULT picolet_steady rss_avg_kib=%d vmhwm_kib=%d cpu_pct=%.3f window_s=%.1f" % (
            statistics.mean(r), kb(proc_status(pp), "VmHWM"), 100.0 * c / tck / el, el))


def rollup(pid):
    """Pss and Rss of a process in KiB from /proc/PID/smaps_rollup, or None when it is gone."""
    try:
        with open("/proc/%d/smaps_rollup" % pid) as f:
            text = f.read()
    except OSError:
        return None
    out = {}
    for line in text.splitlines():
        head = line.split()
        if len(head) >= 2 and head[0] in ("Rss:", "Pss:", "Pss_Anon:", "Pss_File:"):
            out[head[0][:-1]] = int(head[1])
    return out


def cmd_pss(agent_pid, containerd_pid, scratch, title, agent="picolet"):
    """The node's memory by proportional set size: the node agent (picolet, or the kubelet),
    containerd and every shim of the scratch instance (PSS splits the pages the shims share
    among them, so the sum is what they hold together, where RSS counts each shared page once
    per shim). One line per part, then a RESULT line: pss_kib for the agent, containerd, the
    shims and the three together."""
    pp, cp = int(agent_pid), int(containerd_pid)
    parts = [(agent, [pp] if pp > 0 else []), ("containerd", [cp]), ("shims", shims(scratch))]
    print("  %s" % title)
    print("  %-22s %6s %12s %12s %12s %12s" % ("part", "procs", "PSS", "PSS anon", "PSS file", "RSS"))
    totals = {}
    for name, pids in parts:
        rs = [r for r in (rollup(p) for p in pids) if r is not None]
        sums = {k: sum(r.get(k, 0) for r in rs) for k in ("Pss", "Pss_Anon", "Pss_File", "Rss")}
        totals[name] = sums["Pss"]
        print("  %-22s %6d %12s %12s %12s %12s" % (
            name, len(rs), mib(sums["Pss"]), mib(sums["Pss_Anon"]), mib(sums["Pss_File"]), mib(sums["Rss"])))
    node = sum(totals.values())
    print("  %-22s %6s %12s" % ("node (the three)", "", mib(node)))
    print("RESULT node_pss agent_kib=%d containerd_kib=%d shims_kib=%d node_kib=%d shims=%d" % (
        totals[agent], totals["containerd"], totals["shims"], node, len(parts[2][1])))


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
