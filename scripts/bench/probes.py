#!/usr/bin/env python3
"""Samples picolet's RSS and CPU for scripts/bench-probes.sh, once without and once with probes. Prints figures."""
import json, os, statistics, sys, time, urllib.request
port, pid, window, pods, per_pod = (int(x) for x in sys.argv[1:])
tck = os.sysconf("SC_CLK_TCK")

def listing():
    try:
        with urllib.request.urlopen("http://127.0.0.1:%d/pods" % port, timeout=5) as r:
            return json.load(r)["items"]
    except Exception:
        return []

def ready(p):
    return any(c["type"] == "Ready" and c["status"] == "True" for c in p["status"].get("conditions", []))

def wait_ready(phase):
    t0 = time.monotonic()
    while time.monotonic() - t0 < 600:
        items = [p for p in listing() if p["metadata"]["name"].startswith("probe-")]
        if len(items) == pods and all(ready(p) for p in items):
            probed = sum(1 for p in items for c in p["spec"]["containers"]
                         if c.get("readinessProbe") or c.get("livenessProbe"))
            if (phase == "probes") == (probed == pods * per_pod):
                return probed
        time.sleep(1)
    sys.exit("pods not all ready after 600 s")

def cpu():
    with open("/proc/%d/stat" % pid) as f:
        fields = f.read().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / tck

def kb(key):
    with open("/proc/%d/status" % pid) as f:
        for line in f:
            if line.startswith(key + ":"):
                return int(line.split()[1])
    return 0

def measure(phase):
    probed = wait_ready(phase)
    time.sleep(20)  # let start-up work settle
    c0, t0, rss = cpu(), time.monotonic(), []
    while time.monotonic() - t0 < window:
        rss.append(kb("VmRSS"))
        time.sleep(1)
    el = time.monotonic() - t0
    used = cpu() - c0
    print("  %-9s probes %3d: picolet RSS avg %.2f MiB (min %.2f, max %.2f), VmHWM %.2f MiB, "
          "CPU %.2f s in %.0f s = %.3f %% of one core" % (
              phase, probed, statistics.mean(rss) / 1024, min(rss) / 1024, max(rss) / 1024,
              kb("VmHWM") / 1024, used, el, 100 * used / el))
    print("RESULT %s probes=%d rss_avg_kib=%d cpu_pct=%.3f window_s=%.0f" % (
        phase, probed, statistics.mean(rss), 100 * used / el, el))
    sys.stdout.flush()

phase_file = os.environ["PHASE_FILE"]
measure("none")
open(phase_file, "w").write("next")
while os.path.exists(phase_file):
    time.sleep(0.2)
measure("probes")
