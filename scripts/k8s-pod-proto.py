#!/usr/bin/env python3
"""Writes proto/k8s/pod.proto: the Pod and PodList of core/v1 in the Kubernetes protobuf
encoding, with every message they hold, as the pinned API release defines them.

    scripts/k8s-pod-proto.py API_DIR APIMACHINERY_DIR > proto/k8s/pod.proto

API_DIR and APIMACHINERY_DIR are the k8s.io/api and k8s.io/apimachinery modules of the
release tests/k8s pins (`go mod download -json k8s.io/api@v0.37.2` prints the "Dir").
The field names and numbers come from their generated.proto files; from the Go types
(types.go) come what the JSON encoding does differently, which the decoder
(src/apiclient/pod_proto.rs) needs to give the same object as the JSON would:
  // json=NAME   the field's JSON name where it is not the protobuf one
  // inline      an embedded Go struct: its fields are the parent's in JSON
  // omitempty   a scalar that is no pointer and whose JSON leaves out its zero value
                 (the protobuf encoding writes such a field always)
Comments of the source files are not carried over.
"""

import re
import sys

ROOTS = ["Pod", "PodList"]
# Messages the decoder gives a JSON form of their own (src/apiclient/pod_proto.rs).
SPECIAL = {"Time", "Quantity", "IntOrString", "FieldsV1"}
SCALARS = {"string", "bool", "int32", "int64", "bytes", "double"}


def die(msg):
    sys.stderr.write("k8s-pod-proto: " + msg + "\n")
    sys.exit(1)


def proto_messages(path):
    """{message: [(label, type, name, number)]} of a generated.proto (label: optional,
    repeated or map:KEY)."""
    out, cur = {}, None
    for n, raw in enumerate(open(path, encoding="utf-8"), 1):
        line = raw.split("//", 1)[0].strip()
        if not line:
            continue
        m = re.match(r"^message (\w+) \{$", line)
        if m:
            if cur is not None:
                die(f"{path}:{n}: nested message")
            cur = out.setdefault(m.group(1), [])
            continue
        if line == "}":
            cur = None
            continue
        if cur is None:
            continue
        m = re.match(r"^(optional|repeated) ([\w.]+) (\w+) = (\d+);$", line)
        if m:
            cur.append((m.group(1), m.group(2).split(".")[-1], m.group(3), int(m.group(4))))
            continue
        m = re.match(r"^map<(\w+), ([\w.]+)> (\w+) = (\d+);$", line)
        if m:
            cur.append(("map:" + m.group(1), m.group(2).split(".")[-1], m.group(3), int(m.group(4))))
            continue
        die(f"{path}:{n}: not understood: {line}")
    return out


def go_fields(path):
    """{struct: {protobuf number: (json name, omitempty, omitzero, pointer, embedded)}}."""
    out, cur = {}, None
    for raw in open(path, encoding="utf-8"):
        m = re.match(r"^type (\w+) struct \{", raw)
        if m:
            cur = out.setdefault(m.group(1), {})
            continue
        if raw.startswith("}"):
            cur = None
            continue
        if cur is None:
            continue
        m = re.match(r"^\t([\w.]+)(?: +([^ `]+))? +`([^`]*)`", raw)
        if not m:
            continue
        tags = dict(re.findall(r'(\w+):"([^"]*)"', m.group(3)))
        if "protobuf" not in tags:
            continue
        number = int(tags["protobuf"].split(",")[1])
        gotype = m.group(2)
        embedded = gotype is None
        parts = tags.get("json", "").split(",")
        cur[number] = (parts[0], "omitempty" in parts[1:], "omitzero" in parts[1:],
                       (gotype or "").startswith("*"), embedded and parts[0] == "")
    return out


def main():
    if len(sys.argv) != 3:
        die("usage: k8s-pod-proto.py API_DIR APIMACHINERY_DIR")
    api, mach = sys.argv[1], sys.argv[2]
    messages, twice, go = {}, set(), {}
    for path in [f"{api}/core/v1/generated.proto",
                 f"{mach}/pkg/apis/meta/v1/generated.proto",
                 f"{mach}/pkg/api/resource/generated.proto",
                 f"{mach}/pkg/util/intstr/generated.proto"]:
        for name, fields in proto_messages(path).items():
            if name in messages and messages[name] != fields:
                twice.add(name)
            messages[name] = fields
    for path in [f"{api}/core/v1/types.go", f"{mach}/pkg/apis/meta/v1/types.go"]:
        for name, fields in go_fields(path).items():
            go.setdefault(name, {}).update(fields)
    order, seen, todo = [], set(), list(ROOTS)
    while todo:
        name = todo.pop(0)
        if name in seen:
            continue
        seen.add(name)
        if name not in messages:
            die(f"no message {name}")
        if name in twice:
            die(f"{name} is defined twice, differently, in the files read")
        order.append(name)
        if name in SPECIAL:
            continue
        for _, typ, _, _ in messages[name]:
            if typ not in SCALARS:
                todo.append(typ)
    lines = [
        "// The Pod and PodList of core/v1 in the Kubernetes protobuf encoding, and every message",
        "// they hold: field names and numbers as the API release tests/k8s pins defines them.",
        "// Written by scripts/k8s-pod-proto.py (its header says what the trailing comments mean);",
        "// read by build.rs, which makes the table src/apiclient/pod_proto.rs decodes with.",
        'syntax = "proto2";',
        "",
        "package k8s.pod;",
    ]
    for name in sorted(order):
        lines += ["", f"message {name} {{"]
        gofs = go.get(name)
        if gofs is None and name not in SPECIAL:
            die(f"no Go struct {name}")
        for label, typ, field, number in messages[name]:
            notes = []
            if gofs is not None:
                if number not in gofs:
                    die(f"{name}.{field} = {number}: not in the Go struct")
                jname, omitempty, omitzero, pointer, inline = gofs[number]
                if inline:
                    notes.append("inline")
                elif jname != field:
                    notes.append("json=" + jname)
                if typ in SCALARS and label == "optional" and not pointer and (omitempty or omitzero):
                    notes.append("omitempty")
                if typ not in SCALARS and omitzero and not pointer:
                    notes.append("omitzero")
            if label.startswith("map:"):
                decl = f"  map<{label[4:]}, {typ}> {field} = {number};"
            else:
                decl = f"  {label} {typ} {field} = {number};"
            lines.append(decl + (" // " + " ".join(notes) if notes else ""))
        lines.append("}")
    print("\n".join(lines))
    sys.stderr.write(f"k8s-pod-proto: {len(order)} messages, "
                     f"{sum(len(messages[n]) for n in order)} fields\n")


try:
    main()
except OSError as e:
    die(f"{e.filename}: {e.strerror}")
