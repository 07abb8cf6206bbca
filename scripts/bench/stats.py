#!/usr/bin/env python3
"""Helpers of scripts/bench-stats.sh: what serving the accounting costs picolet. Prints figures;
asserts nothing.

  stats.py wait PORT PID CONTAINERS            until /pods shows CONTAINERS running containers
  stats.py cost PORT PID CONTAINERS RUNS       CPU and wall of one scrape of each endpoint
  stats.py window PORT PID SECONDS MODE LABEL  picolet's RSS and CPU over SECONDS, MODE idle
                                               (nothing scraped) or scrape (every endpoint every 15 s)
"""
import glob
import json
import os
import statistics
import sys
import time
import urllib.request

ENDPOINTS = ["/metrics/cadvisor", "/stats/summary", "/metrics/resource", "/metrics"]
TCK = os.sysconf("SC_CLK_TCK")


def get(port, path):
    with urllib.request.urlopen("http://127.0.0.1:%d%s" % (port, path), timeout=30) as r:
        return r.read()


def running_containers(port):
    try:
        items = json.loads(get(port, "/pods"))["items"]
    except Exception:
        return 0
    return sum(1 for p in items for c in (p.get("status") or {}).get("containerStatuses") or []
               if "running" in (c.get("state") or {}))


def cpu_ns(pid):
    """CPU time of every thread of the process, nanoseconds (schedstat: ns resolution)."""
    total = 0
    for f in glob.glob("/proc/%d/task/*/schedstat" % pid):
        try:
            with open(f) as fh:
                total += int(fh.read().split()[0])
        except (OSError, ValueError, IndexError):
            pass  # a pool thread that just ended
    return total


def cpu_ticks_s(pid):
    with open("/proc/%d/stat" % pid) as f:
        fields = f.read().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / TCK


def kib(pid, key):
    with open("/proc/%d/status" % pid) as f:
        for line in f:
            if line.startswith(key + ":"):
                return int(line.split()[1])
    return 0


def cmd_wait(port, pid, want):
    t0 = time.monotonic()
    while time.monotonic() - t0 < 900:
        n = running_containers(port)
        if n >= want:
            print("  %d containers running after %.0f s" % (n, time.monotonic() - t0))
            return
        os.kill(pid, 0)
        time.sleep(1)
    sys.exit("only %d of %d containers running after 900 s" % (running_containers(port), want))


def scrape(port, pid, path):
    c0, t0 = cpu_ns(pid), time.perf_counter()
    body = get(port, path)
    return time.perf_counter() - t0, (cpu_ns(pid) - c0) / 1e9, len(body)


def cmd_cost(port, pid, containers, runs):
    print("  one scrape at %d containers (picolet's CPU on all its threads, and wall at the client):" % containers)
    for path in ENDPOINTS:
        first = scrape(port, pid, path)
        walls, cpus = [], []
        for _ in range(runs):
            w, c, size = scrape(port, pid, path)
            walls.append(w)
            cpus.append(c)
            time.sleep(0.05)
        print("    %-18s %7.2f ms CPU, %7.2f ms wall (median of %d; max %.2f / %.2f ms), %6d bytes; "
              "first scrape %.2f ms CPU, %.2f ms wall" % (
                  path, 1e3 * statistics.median(cpus), 1e3 * statistics.median(walls), runs,
                  1e3 * max(cpus), 1e3 * max(walls), size, 1e3 * first[1], 1e3 * first[0]))
        print("RESULT cost containers=%d path=%s cpu_ms=%.3f wall_ms=%.3f bytes=%d" % (
            containers, path, 1e3 * statistics.median(cpus), 1e3 * statistics.median(walls), size))
    sys.stdout.flush()


def cmd_window(port, pid, seconds, mode, label):
    c0, t0, rss = cpu_ticks_s(pid), time.monotonic(), []
    next_scrape, scrapes = t0, 0
    while time.monotonic() - t0 < seconds:
        if mode == "scrape" and time.monotonic() >= next_scrape:
            for path in ENDPOINTS:
                get(port, path)
            scrapes += 1
            next_scrape += 15
        rss.append(kib(pid, "VmRSS"))
        time.sleep(1)
    el = time.monotonic() - t0
    used = cpu_ticks_s(pid) - c0
    print("  %-28s RSS avg %.2f MiB (min %.2f, max %.2f), VmHWM %.2f MiB, CPU %.2f s in %.0f s = "
          "%.3f %% of one core%s" % (
              label, statistics.mean(rss) / 1024, min(rss) / 1024, max(rss) / 1024,
              kib(pid, "VmHWM") / 1024, used, el, 100 * used / el,
              " (%d scrapes of the %d endpoints)" % (scrapes, len(ENDPOINTS)) if scrapes else ""))
    print("RESULT window label=%s mode=%s rss_avg_kib=%d cpu_pct=%.3f" % (
        label.replace(" ", "_"), mode, statistics.mean(rss), 100 * used / el))
    sys.stdout.flush()


def main():
    cmd, args = sys.argv[1], sys.argv[2:]
    port, pid = int(args[0]), int(args[1])
    if cmd == "wait":
        cmd_wait(port, pid, int(args[2]))
    elif cmd == "cost":
        cmd_cost(port, pid, int(args[2]), int(args[3]))
    elif cmd == "window":
        cmd_window(port, pid, float(args[2]), args[3], args[4])
    else:
        sys.exit("unknown command " + cmd)


main()
