#!/usr/bin/env python3
"""Parses Prometheus text (format 0.0.4) from stdin with the Prometheus project's own Python
parser (prometheus_client, pinned in scripts/install-deps.sh) and prints its families as JSON:
[{name, type, help, samples: [{name, labels, value, timestamp}]}]. Beyond what the parser
refuses, it refuses a family opened twice, a sample repeated with the same labels, and a
histogram whose buckets are not cumulative or do not end in +Inf. Exit 1 with the reason."""

import json
import math
import sys

try:
    from prometheus_client.parser import text_string_to_metric_families
except ImportError as e:
    print(f"prom_check: prometheus_client is missing ({e}): run scripts/install-deps.sh", file=sys.stderr)
    sys.exit(1)


def fail(msg):
    print(f"prom_check: {msg}", file=sys.stderr)
    sys.exit(1)


def main():
    text = sys.stdin.read()
    try:
        families = list(text_string_to_metric_families(text))
    except Exception as e:  # the parser's own refusal
        fail(f"parser refused the text: {e!r}")
    out, seen = [], set()
    for fam in families:
        if fam.name in seen:
            fail(f"family {fam.name} appears twice")
        seen.add(fam.name)
        keys = set()
        buckets = {}
        for s in fam.samples:
            key = (s.name, tuple(sorted(s.labels.items())))
            if key in keys:
                fail(f"sample {s.name}{s.labels} repeated")
            keys.add(key)
            if fam.type == "histogram" and s.name.endswith("_bucket"):
                rest = tuple(sorted((k, v) for k, v in s.labels.items() if k != "le"))
                buckets.setdefault(rest, []).append((float(s.labels["le"]), s.value))
        for rest, bs in buckets.items():
            if bs[-1][0] != math.inf:
                fail(f"histogram {fam.name}{dict(rest)} does not end in +Inf")
            for (le0, c0), (le1, c1) in zip(bs, bs[1:]):
                if le1 <= le0 or c1 < c0:
                    fail(f"histogram {fam.name}{dict(rest)} buckets not cumulative at le={le1}")
        out.append({
            "name": fam.name,
            "type": fam.type,
            "help": fam.documentation,
            "samples": [
                {
                    "name": s.name,
                    "labels": s.labels,
                    "value": s.value if math.isfinite(s.value) else str(s.value),
                    "timestamp": None if s.timestamp is None else float(s.timestamp),
                }
                for s in fam.samples
            ],
        })
    json.dump(out, sys.stdout)


main()
