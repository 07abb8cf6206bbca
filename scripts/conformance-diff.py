#!/usr/bin/env python3
"""Compares two ginkgo JSON reports of scripts/conformance.sh (report.json):
the reference (the upstream kubelet) and a node under test (picolet).

    scripts/conformance-diff.py REFERENCE.json NODE.json [--passing OUT.txt [--under SECONDS]]

Prints the counts of both, then the specs the reference passed and the node
did not, grouped by the first line of their failure (pod names, UIDs, numbers
and times blanked, so one cause gathers its specs), largest group first; then
the specs the node passed and the reference did not. With --passing, writes
the names of the specs both passed (in under SECONDS on the node, with
--under), one a line, sorted: a spec list for scripts/conformance.sh's SPECS.
Asserts nothing.
"""
import json
import re
import sys


def specs(path):
    out = {}
    for report in json.load(open(path, encoding="utf-8")):
        for s in report["SpecReports"]:
            if s["LeafNodeType"] != "It":
                continue
            name = " ".join(s["ContainerHierarchyTexts"] + [s["LeafNodeText"]])
            state = s["State"]
            failure = s.get("Failure") or {}
            if state == "skipped" and not failure.get("Message"):
                continue  # filtered out by the selection
            out[name] = (state, failure, s.get("RunTime", 0) / 1e9)
    return out


BLANKS = [
    (re.compile(r"[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}"), "<uid>"),
    (re.compile(r"\b[a-z0-9]+(?:-[a-z0-9]+)*-<uid>"), "<pod>"),
    (re.compile(r"\b[a-z]+(?:-[a-z]+)*-\d{3,5}\b"), "<namespace>"),
    (re.compile(r"\d+(?:\.\d+)?"), "N"),
]


def cause(failure):
    lines = (failure.get("Message") or "").strip().splitlines()
    text = lines[0] if lines else "(no message)"
    for pattern, repl in BLANKS:
        text = pattern.sub(repl, text)
    loc = failure.get("Location", {}).get("FileName", "")
    loc = loc.split("/test/", 1)[-1] if "/test/" in loc else loc
    return "%s  [%s]" % (text[:180], loc)


def counts(name, s):
    by = {}
    for state, _, _ in s.values():
        by[state] = by.get(state, 0) + 1
    return "%s: %d specs ran, %s" % (name, len(s), ", ".join("%s %d" % kv for kv in sorted(by.items())))


def main(argv):
    args = argv[1:]
    passing_out = None
    under = None
    if "--under" in args:
        i = args.index("--under")
        under = float(args[i + 1])
        del args[i:i + 2]
    if "--passing" in args:
        i = args.index("--passing")
        passing_out = args[i + 1]
        del args[i:i + 2]
    if len(args) != 2:
        sys.exit(__doc__)
    ref, node = specs(args[0]), specs(args[1])
    print(counts("reference", ref))
    print(counts("node", node))
    groups = {}
    for name, (state, failure, _) in node.items():
        if state == "passed" or ref.get(name, ("",))[0] != "passed":
            continue
        groups.setdefault(cause(failure), []).append(name)
    lost = sum(len(v) for v in groups.values())
    print("\npassed by the reference, not by the node: %d, in %d groups" % (lost, len(groups)))
    for key, names in sorted(groups.items(), key=lambda kv: (-len(kv[1]), kv[0])):
        print("\n%d x %s" % (len(names), key))
        for n in sorted(names):
            print("    " + n)
    gained = sorted(n for n, (st, _, _) in node.items() if st == "passed" and ref.get(n, ("",))[0] != "passed")
    print("\npassed by the node, not by the reference: %d" % len(gained))
    for n in gained:
        print("    %s (reference: %s)" % (n, ref.get(n, ("not run",))[0]))
    if passing_out:
        with open(passing_out, "w", encoding="utf-8") as f:
            for n in sorted(n for n, (st, _, t) in node.items()
                            if st == "passed" and ref.get(n, ("",))[0] == "passed" and (under is None or t < under)):
                f.write(n + "\n")


if __name__ == "__main__":
    main(sys.argv)
