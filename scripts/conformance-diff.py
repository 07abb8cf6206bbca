#!/usr/bin/env python3
"""Compares two runs of upstream's e2e specs: the reference (the upstream
kubelet) and a node under test (picolet). Either run is a node conformance run
of scripts/conformance.sh or a cluster run of scripts/cluster.sh e2e.

    scripts/conformance-diff.py REFERENCE NODE [--passing OUT.txt [--under SECONDS]]

REFERENCE and NODE are each ginkgo's JSON report (report.json), its JUnit
report (junit.xml), or a directory holding one: the report directory, or the
script's directory with it under report/ (CONFORMANCE_DIR, or scripts/cluster.sh's
DIR: `scripts/conformance-diff.py /tmp/pcluster-kubelet /tmp/pcluster`).
report.json is read when both are there. A run is named by its node agent as the
summary.txt beside its report says it (`kubelet cluster: ...`, `... against
picolet on containerd ...`) when there is one, "reference" and "node" otherwise.

Prints the counts of both, then the specs the reference passed and the node
did not, grouped by the first line of the node's failure (pod names, UIDs,
numbers and times blanked, so one cause gathers its specs), largest group
first; then the specs the node passed and the reference did not, grouped the
same way by the reference's failure; then how many specs only one of them ran
(the first 30 of each named).
With --passing, writes the names of the specs both passed (in under SECONDS on
the node, with --under), one a line, sorted: a spec list for
scripts/conformance.sh's SPECS. Asserts nothing.
"""
import json
import os
import re
import sys
import xml.etree.ElementTree as ET


def specs_json(path):
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


LABELS = re.compile(r" \[([^\[\]]*)\]$")
AT = re.compile(r"\bat: (\S+?):(\d+)\b")


def junit_name(text):
    """A JUnit test case's name as report.json names the spec: without ginkgo's "[It] " and
    the list of the spec's labels it appends ("[sig-node, NodeConformance]"; a list of one
    label is told from the name's own last tag by that tag's appearing earlier as well)."""
    name = text[len("[It] "):]
    m = LABELS.search(name)
    if m:
        inner = m.group(1)
        rest = name[:m.start()]
        if ", " in inner or "[%s]" % inner in rest:
            name = rest
    return name


def specs_junit(path):
    out = {}
    for case in ET.parse(path).getroot().iter("testcase"):
        text = case.get("name", "")
        if not text.startswith("[It] "):
            continue  # the suite's own nodes: [SynchronizedBeforeSuite] and the like
        name = junit_name(text)
        state = case.get("status") or "passed"
        failure = {}
        skipped = case.find("skipped")
        if state == "skipped":
            message = skipped.get("message", "") if skipped is not None else ""
            if message in ("", "skipped"):
                continue  # filtered out by the selection
            failure = {"Message": message}
        else:
            element = case.find("failure")
            if element is None:
                element = case.find("error")
            if element is not None:
                failure = {"Message": element.get("message", "")}
                at = AT.search(element.text or "")
                if at:
                    failure["Location"] = {"FileName": at.group(1), "LineNumber": int(at.group(2))}
        out[name] = (state, failure, float(case.get("time") or 0))
    return out


def report_path(arg):
    """The report file ARG names, directly or as a directory holding one."""
    if os.path.isfile(arg):
        return arg
    if os.path.isdir(arg):
        for sub in ("", "report"):
            for f in ("report.json", "junit.xml"):
                p = os.path.join(arg, sub, f)
                if os.path.isfile(p):
                    return p
        sys.exit("%s: no report.json or junit.xml in it or in its report/" % arg)
    sys.exit("%s: no such file or directory" % arg)


def load(arg, default_label):
    path = report_path(arg)
    try:
        specs = specs_junit(path) if path.endswith(".xml") else specs_json(path)
    except (OSError, ValueError, KeyError, ET.ParseError) as e:
        sys.exit("%s: not a ginkgo report: %s" % (path, e))
    label = default_label
    summary = os.path.join(os.path.dirname(path), "summary.txt")
    if os.path.isfile(summary):
        with open(summary, encoding="utf-8") as f:
            first = f.readline()
        m = re.match(r"([a-z][a-z0-9-]*) cluster:", first) or re.search(r" against ([a-z][a-z0-9-]*) on ", first)
        if m:
            label = m.group(1)
    return label, specs


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


def passed_by_one(winner, loser, winner_label, loser_label):
    """Prints the specs WINNER passed and LOSER ran and did not pass, grouped by LOSER's cause."""
    groups = {}
    for name, (state, failure, _) in loser.items():
        if state == "passed" or winner.get(name, ("",))[0] != "passed":
            continue
        groups.setdefault("(%s) %s" % (state, cause(failure)), []).append(name)
    total = sum(len(v) for v in groups.values())
    print("\npassed by %s, not by %s: %d, in %d groups" % (winner_label, loser_label, total, len(groups)))
    for key, names in sorted(groups.items(), key=lambda kv: (-len(kv[1]), kv[0])):
        print("\n%d x %s" % (len(names), key))
        for n in sorted(names):
            print("    " + n)


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
    ref_label, ref = load(args[0], "reference")
    node_label, node = load(args[1], "node")
    if ref_label == node_label:
        ref_label, node_label = "the reference (%s)" % ref_label, "the node (%s)" % node_label
    print(counts(ref_label, ref))
    print(counts(node_label, node))
    passed_by_one(ref, node, ref_label, node_label)
    passed_by_one(node, ref, node_label, ref_label)
    only_ref = sorted(set(ref) - set(node))
    only_node = sorted(set(node) - set(ref))
    print("\nran by %s alone: %d; by %s alone: %d" % (ref_label, len(only_ref), node_label, len(only_node)))
    for label, names, runs in ((ref_label, only_ref, ref), (node_label, only_node, node)):
        for n in names[:30]:
            print("    %s: %s (%s)" % (label, n, runs[n][0]))
        if len(names) > 30:
            print("    %s: ... and %d more" % (label, len(names) - 30))
    if passing_out:
        with open(passing_out, "w", encoding="utf-8") as f:
            for n in sorted(n for n, (st, _, t) in node.items()
                            if st == "passed" and ref.get(n, ("",))[0] == "passed" and (under is None or t < under)):
                f.write(n + "\n")


if __name__ == "__main__":
    main(sys.argv)
