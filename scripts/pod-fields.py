#!/usr/bin/env python3
"""Prints the field paths of the core/v1 Pod schema, one a line, from an OpenAPI v3 document.

    scripts/pod-fields.py api__v1_openapi.json > tests/data/pod-fields-v1.37.txt

The document is api/openapi-spec/v3/api__v1_openapi.json of the k8s.io/kubernetes module.
Arrays are written `[]` (`spec.containers[].ports[].hostPort`). The walk stops where a deeper
list would say nothing a node does differently: maps, quantities, the pod's status, object
metadata below the pod's own, and the volume sources picolet does not implement (their kind
alone is listed, as they are refused or ignored whole).
"""
import json
import sys

PREFIX = "#/components/schemas/"
CORE = "io.k8s.api.core.v1."
# Volume sources walked into; every other kind is listed by its name alone.
VOLUME_KINDS = {"hostPath", "emptyDir", "downwardAPI", "projected", "configMap", "secret"}
# Definitions never walked into.
LEAVES = {
    "io.k8s.apimachinery.pkg.apis.meta.v1.ManagedFieldsEntry",
    "io.k8s.apimachinery.pkg.apis.meta.v1.OwnerReference",
    "io.k8s.apimachinery.pkg.api.resource.Quantity",
    "io.k8s.apimachinery.pkg.util.intstr.IntOrString",
    "io.k8s.apimachinery.pkg.apis.meta.v1.Time",
    "io.k8s.apimachinery.pkg.apis.meta.v1.MicroTime",
    CORE + "PodStatus",
    CORE + "EphemeralContainer",
    CORE + "PodSchedulingGate",
    CORE + "PodResourceClaim",
    CORE + "ResourceClaim",
    CORE + "PodAffinity",
    CORE + "PodAntiAffinity",
    CORE + "PreferredSchedulingTerm",
    CORE + "TopologySpreadConstraint",
}


def ref_of(prop):
    if "$ref" in prop:
        return prop["$ref"][len(PREFIX):]
    for part in prop.get("allOf", []):
        if "$ref" in part:
            return part["$ref"][len(PREFIX):]
    return None


def walk(schemas, name, path, out, depth):
    props = schemas[name].get("properties", {})
    for key in sorted(props):
        prop = props[key]
        sub = f"{path}.{key}" if path else key
        if name == "io.k8s.api.core.v1.Pod" and key in ("apiVersion", "kind"):
            out.append(sub)
            continue
        ref, suffix = ref_of(prop), ""
        if ref is None and prop.get("type") == "array":
            ref, suffix = ref_of(prop.get("items", {})), "[]"
        out.append(sub + suffix)
        if ref is None or ref in LEAVES or depth > 12:
            continue
        if name == CORE + "Volume" and key not in VOLUME_KINDS:
            continue
        if name == CORE + "VolumeProjection" and key == "clusterTrustBundle":
            continue
        if ref == "io.k8s.apimachinery.pkg.apis.meta.v1.ObjectMeta" and path:
            continue
        walk(schemas, ref, sub + suffix, out, depth + 1)


def main():
    doc = json.load(open(sys.argv[1]))
    schemas = doc["components"]["schemas"]
    out = []
    walk(schemas, CORE + "Pod", "", out, 0)
    for p in out:
        print(p)


main()
