//! The Kubernetes protobuf encoding (`application/vnd.kubernetes.protobuf`) of the answers
//! picolet reads in it: the metadata of an object it wrote (asked for as a
//! `PartialObjectMetadata`) and an error `Status`; and of the one object it creates often, an
//! Event.
//!
//! Every object travels in an envelope: the 4 bytes `k8s\0`, then a `runtime.Unknown` holding
//! the object's apiVersion and kind and the object's own bytes. Every top-level API object has
//! its `ObjectMeta` as field 1, so the metadata of any object decodes the same way; the fields
//! picolet does not read are skipped. A written object's metadata in protobuf is about half of
//! its JSON (no field names, no quoting, timestamps as two varints); the objects picolet reads
//! whole stay JSON.

use prost::Message;
use serde_json::{Map, Value, json};

mod k8s {
    pub mod meta {
        tonic::include_proto!("k8s.meta");
    }
    pub mod core {
        tonic::include_proto!("k8s.core");
    }
}
use k8s::meta as pb;

/// The media type of the encoding.
pub const MEDIA_TYPE: &str = "application/vnd.kubernetes.protobuf";
/// What starts every encoded object.
const MAGIC: &[u8; 4] = b"k8s\0";

/// Whether a `Content-Type` names the protobuf encoding (parameters aside).
pub fn is_protobuf(content_type: Option<&str>) -> bool {
    content_type.is_some_and(|ct| {
        ct.split(';')
            .next()
            .is_some_and(|m| m.trim().eq_ignore_ascii_case(MEDIA_TYPE))
    })
}

/// The envelope's kind and the object's bytes.
pub(super) fn open(bytes: &[u8]) -> Result<(pb::TypeMeta, Vec<u8>), String> {
    let rest = bytes
        .strip_prefix(MAGIC)
        .ok_or_else(|| "not a Kubernetes protobuf object: no k8s\\0 prefix".to_owned())?;
    let unknown = pb::Unknown::decode(rest).map_err(|e| format!("the envelope: {e}"))?;
    if !unknown.content_encoding().is_empty() {
        return Err(format!(
            "content encoding {:?} not supported",
            unknown.content_encoding()
        ));
    }
    Ok((
        unknown.type_meta.unwrap_or_default(),
        unknown.raw.unwrap_or_default(),
    ))
}

/// An object's metadata, as the JSON the callers read from a `PartialObjectMetadata`
/// (`{"apiVersion", "kind", "metadata": {name, namespace, uid, resourceVersion, generation,
/// labels, ownerReferences, managedFields}}`, a field manager's record with its manager and operation
/// alone; fields the answer leaves out are left out).
pub fn metadata_json(bytes: &[u8]) -> Result<Value, String> {
    let (type_meta, raw) = open(bytes)?;
    let object = pb::PartialObjectMetadata::decode(raw.as_slice())
        .map_err(|e| format!("{}: {e}", type_meta.kind()))?;
    let mut meta = Map::new();
    if let Some(m) = object.metadata {
        let strings = [
            ("name", m.name),
            ("namespace", m.namespace),
            ("uid", m.uid),
            ("resourceVersion", m.resource_version),
        ];
        for (k, v) in strings {
            if let Some(v) = v {
                meta.insert(k.into(), Value::String(v));
            }
        }
        if let Some(g) = m.generation {
            meta.insert("generation".into(), json!(g));
        }
        if !m.labels.is_empty() {
            let labels: Map<String, Value> = m
                .labels
                .into_iter()
                .map(|(k, v)| (k, Value::String(v)))
                .collect();
            meta.insert("labels".into(), Value::Object(labels));
        }
        if !m.owner_references.is_empty() {
            let owners = m.owner_references.into_iter().map(|o| {
                let mut v = json!({
                    "apiVersion": o.api_version(),
                    "kind": o.kind(),
                    "name": o.name(),
                    "uid": o.uid(),
                });
                if let Some(c) = o.controller {
                    v["controller"] = json!(c);
                }
                v
            });
            meta.insert("ownerReferences".into(), owners.collect());
        }
        if !m.managed_fields.is_empty() {
            let records = m.managed_fields.into_iter().map(|f| {
                let mut v = Map::new();
                if let Some(m) = f.manager {
                    v.insert("manager".into(), Value::String(m));
                }
                if let Some(o) = f.operation {
                    v.insert("operation".into(), Value::String(o));
                }
                Value::Object(v)
            });
            meta.insert("managedFields".into(), records.collect());
        }
    }
    Ok(json!({
        "apiVersion": type_meta.api_version(),
        "kind": type_meta.kind(),
        "metadata": meta,
    }))
}

/// An Event (the JSON picolet's recorder makes, `crate::events`) in the envelope, for a
/// create; `None` when a timestamp is not RFC 3339 (the caller sends the JSON then).
pub fn encode_event(v: &Value) -> Option<Vec<u8>> {
    use k8s::core;
    let text = |v: &Value| v.as_str().map(str::to_owned);
    let time = |v: &Value| -> Option<Option<pb::Time>> {
        match v.as_str() {
            None => Some(None),
            Some(t) => Some(Some(pb::Time {
                seconds: Some(crate::api::time::parse_rfc3339(t)?),
                nanos: Some(0),
            })),
        }
    };
    let o = &v["involvedObject"];
    let event = core::Event {
        metadata: Some(pb::ObjectMeta {
            name: text(&v["metadata"]["name"]),
            namespace: text(&v["metadata"]["namespace"]),
            ..Default::default()
        }),
        involved_object: Some(core::ObjectReference {
            kind: text(&o["kind"]),
            namespace: text(&o["namespace"]),
            name: text(&o["name"]),
            uid: text(&o["uid"]),
            api_version: text(&o["apiVersion"]),
            resource_version: text(&o["resourceVersion"]),
            field_path: text(&o["fieldPath"]),
        }),
        reason: text(&v["reason"]),
        message: text(&v["message"]),
        source: Some(core::EventSource {
            component: text(&v["source"]["component"]),
            host: text(&v["source"]["host"]),
        }),
        first_timestamp: time(&v["firstTimestamp"])?,
        last_timestamp: time(&v["lastTimestamp"])?,
        count: v["count"].as_i64().and_then(|c| i32::try_from(c).ok()),
        r#type: text(&v["type"]),
        reporting_component: text(&v["reportingComponent"]),
        reporting_instance: text(&v["reportingInstance"]),
    };
    Some(envelope("v1", "Event", event.encode_to_vec()))
}

/// An Event in the envelope back as the JSON [`encode_event`] took (the test servers read
/// what picolet sends).
#[doc(hidden)]
pub fn event_json(bytes: &[u8]) -> Option<Value> {
    let (type_meta, raw) = open(bytes).ok()?;
    if type_meta.kind() != "Event" {
        return None;
    }
    let e = k8s::core::Event::decode(raw.as_slice()).ok()?;
    let at = |t: &Option<pb::Time>| {
        t.as_ref()
            .map(|t| Value::String(crate::api::rfc3339(t.seconds() * 1_000_000_000)))
            .unwrap_or(Value::Null)
    };
    let m = e.metadata.clone().unwrap_or_default();
    let o = e.involved_object.clone().unwrap_or_default();
    let mut involved = json!({
        "kind": o.kind(), "name": o.name(), "uid": o.uid(), "apiVersion": o.api_version(),
    });
    if let Some(ns) = &o.namespace {
        involved["namespace"] = json!(ns);
    }
    if let Some(f) = &o.field_path {
        involved["fieldPath"] = json!(f);
    }
    let source = e.source.clone().unwrap_or_default();
    Some(json!({
        "apiVersion": type_meta.api_version(),
        "kind": "Event",
        "metadata": {"name": m.name(), "namespace": m.namespace()},
        "involvedObject": involved,
        "reason": e.reason(),
        "message": e.message(),
        "source": {"component": source.component(), "host": source.host()},
        "firstTimestamp": at(&e.first_timestamp),
        "lastTimestamp": at(&e.last_timestamp),
        "count": e.count(),
        "type": e.r#type(),
        "reportingComponent": e.reporting_component(),
        "reportingInstance": e.reporting_instance(),
    }))
}

/// An error answer's reason and message, if it is a `Status`.
pub fn status(bytes: &[u8]) -> Option<(String, String)> {
    let (type_meta, raw) = open(bytes).ok()?;
    if type_meta.kind() != "Status" {
        return None;
    }
    let s = pb::Status::decode(raw.as_slice()).ok()?;
    Some((s.reason.unwrap_or_default(), s.message.unwrap_or_default()))
}

/// A `Status` in the envelope as its JSON (`code`, `reason`, `message`): a watch's `ERROR`
/// event.
pub(super) fn status_json(bytes: &[u8]) -> Result<Value, String> {
    let (type_meta, raw) = open(bytes)?;
    if type_meta.kind() != "Status" {
        return Err(format!(
            "a {:?} where a Status was expected",
            type_meta.kind()
        ));
    }
    let s = pb::Status::decode(raw.as_slice()).map_err(|e| format!("Status: {e}"))?;
    Ok(json!({"kind": "Status", "code": s.code(), "reason": s.reason(), "message": s.message()}))
}

/// A watch frame's event type and its object's bytes (in the envelope).
pub(super) fn watch_event(frame: &[u8]) -> Result<(String, Vec<u8>), String> {
    let e = pb::WatchEvent::decode(frame).map_err(|e| format!("WatchEvent: {e}"))?;
    let kind = e.r#type.ok_or("a watch event without a type")?;
    Ok((kind, e.object.and_then(|o| o.raw).unwrap_or_default()))
}

/// A watch frame of `kind` with `object` (in the envelope), as the apiserver streams it.
#[cfg(test)]
pub(crate) fn encode_watch_event(kind: &str, object: &[u8]) -> Vec<u8> {
    pb::WatchEvent {
        r#type: Some(kind.into()),
        object: Some(pb::RawExtension {
            raw: Some(object.to_vec()),
        }),
    }
    .encode_to_vec()
}

/// An object in the envelope.
pub fn envelope(api_version: &str, kind: &str, raw: Vec<u8>) -> Vec<u8> {
    let unknown = pb::Unknown {
        type_meta: Some(pb::TypeMeta {
            api_version: Some(api_version.into()),
            kind: Some(kind.into()),
        }),
        raw: Some(raw),
        content_encoding: Some(String::new()),
        content_type: Some(String::new()),
    };
    let mut out = MAGIC.to_vec();
    unknown.encode(&mut out).expect("a Vec grows");
    out
}

/// A `PartialObjectMetadata` in the envelope, as the apiserver answers one.
#[doc(hidden)]
pub fn encode_metadata(name: &str, namespace: &str, resource_version: &str) -> Vec<u8> {
    encode_metadata_of(&json!({
        "name": name, "namespace": namespace, "resourceVersion": resource_version,
    }))
}

/// The `PartialObjectMetadata` of an object's JSON `metadata` (the fields [`metadata_json`]
/// reads), in the envelope.
#[doc(hidden)]
pub fn encode_metadata_of(m: &Value) -> Vec<u8> {
    let text = |v: &Value| v.as_str().map(str::to_owned);
    let list = |v: &Value| v.as_array().cloned().unwrap_or_default();
    let object = pb::PartialObjectMetadata {
        metadata: Some(pb::ObjectMeta {
            name: text(&m["name"]),
            namespace: text(&m["namespace"]),
            uid: text(&m["uid"]),
            resource_version: text(&m["resourceVersion"]),
            generation: m["generation"].as_i64(),
            labels: m["labels"]
                .as_object()
                .map(|l| {
                    l.iter()
                        .filter_map(|(k, v)| Some((k.clone(), v.as_str()?.to_owned())))
                        .collect()
                })
                .unwrap_or_default(),
            owner_references: list(&m["ownerReferences"])
                .iter()
                .map(|o| pb::OwnerReference {
                    kind: text(&o["kind"]),
                    name: text(&o["name"]),
                    uid: text(&o["uid"]),
                    api_version: text(&o["apiVersion"]),
                    controller: o["controller"].as_bool(),
                })
                .collect(),
            managed_fields: list(&m["managedFields"])
                .iter()
                .map(|f| pb::ManagedFieldsEntry {
                    manager: text(&f["manager"]),
                    operation: text(&f["operation"]),
                })
                .collect(),
        }),
    };
    envelope(
        "meta.k8s.io/v1",
        "PartialObjectMetadata",
        object.encode_to_vec(),
    )
}

/// An error `Status` in the envelope.
#[doc(hidden)]
pub fn encode_status(code: i32, reason: &str, message: &str) -> Vec<u8> {
    let s = pb::Status {
        metadata: Some(pb::ListMeta::default()),
        status: Some("Failure".into()),
        message: Some(message.into()),
        reason: Some(reason.into()),
        code: Some(code),
    };
    envelope("v1", "Status", s.encode_to_vec())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn media_type_is_recognised_with_parameters_and_case() {
        assert!(is_protobuf(Some("application/vnd.kubernetes.protobuf")));
        assert!(is_protobuf(Some(
            "Application/Vnd.Kubernetes.Protobuf;as=PartialObjectMetadata;g=meta.k8s.io;v=v1"
        )));
        assert!(!is_protobuf(Some("application/json")));
        assert!(!is_protobuf(Some(
            "application/vnd.kubernetes.protobuf.watch"
        )));
        assert!(!is_protobuf(None));
    }

    #[test]
    fn metadata_is_read_from_the_envelope() {
        let v = metadata_json(&encode_metadata("n1", "kube-node-lease", "4711")).unwrap();
        assert_eq!(v["kind"], "PartialObjectMetadata");
        assert_eq!(v["apiVersion"], "meta.k8s.io/v1");
        assert_eq!(v["metadata"]["resourceVersion"], "4711");
        assert_eq!(v["metadata"]["name"], "n1");
        assert_eq!(v["metadata"]["namespace"], "kube-node-lease");
        assert!(v["metadata"].get("uid").is_none());
    }

    #[test]
    fn an_event_is_encoded_field_by_field() {
        let v = json!({
            "apiVersion": "v1",
            "kind": "Event",
            "metadata": {"name": "web.18f3", "namespace": "default"},
            "involvedObject": {"kind": "Pod", "name": "web", "namespace": "default",
                               "uid": "u1", "apiVersion": "v1", "fieldPath": "spec.containers{c}"},
            "reason": "Started",
            "message": "Started container c",
            "source": {"component": "kubelet", "host": "n1"},
            "firstTimestamp": "2026-12-06T22:00:00Z",
            "lastTimestamp": "2026-12-06T22:00:05Z",
            "count": 1,
            "type": "Normal",
            "reportingComponent": "kubelet",
            "reportingInstance": "n1",
        });
        let bytes = encode_event(&v).unwrap();
        let (tm, raw) = open(&bytes).unwrap();
        assert_eq!((tm.api_version(), tm.kind()), ("v1", "Event"));
        let e = k8s::core::Event::decode(raw.as_slice()).unwrap();
        assert_eq!(e.metadata.as_ref().unwrap().name(), "web.18f3");
        assert_eq!(e.metadata.as_ref().unwrap().namespace(), "default");
        let o = e.involved_object.as_ref().unwrap();
        assert_eq!(
            (o.kind(), o.name(), o.uid(), o.field_path()),
            ("Pod", "web", "u1", "spec.containers{c}")
        );
        assert_eq!(
            (e.reason(), e.message()),
            ("Started", "Started container c")
        );
        assert_eq!(e.source.as_ref().unwrap().host(), "n1");
        assert_eq!(e.first_timestamp.as_ref().unwrap().seconds(), 1_796_594_400);
        assert_eq!(e.last_timestamp.as_ref().unwrap().seconds(), 1_796_594_405);
        assert_eq!((e.count(), e.r#type()), (1, "Normal"));
        assert_eq!(
            (e.reporting_component(), e.reporting_instance()),
            ("kubelet", "n1")
        );
        assert_eq!(event_json(&bytes).unwrap(), v, "decoded back");
        // The same Event in JSON is nearly twice as large.
        let json_len = serde_json::to_vec(&v).unwrap().len();
        assert!(
            bytes.len() * 3 < json_len * 2,
            "{} vs {json_len}",
            bytes.len()
        );
        let mut bad = v.clone();
        bad["lastTimestamp"] = json!("yesterday");
        assert_eq!(encode_event(&bad), None);
    }

    #[test]
    fn owners_and_field_managers_are_read() {
        let object = pb::PartialObjectMetadata {
            metadata: Some(pb::ObjectMeta {
                name: Some("n1".into()),
                resource_version: Some("9".into()),
                owner_references: vec![pb::OwnerReference {
                    kind: Some("Node".into()),
                    name: Some("n1".into()),
                    uid: Some("u1".into()),
                    api_version: Some("v1".into()),
                    controller: None,
                }],
                managed_fields: vec![pb::ManagedFieldsEntry {
                    manager: Some("kubelet".into()),
                    operation: Some("Update".into()),
                }],
                ..Default::default()
            }),
        };
        let bytes = envelope(
            "meta.k8s.io/v1",
            "PartialObjectMetadata",
            object.encode_to_vec(),
        );
        let v = metadata_json(&bytes).unwrap();
        assert_eq!(
            v["metadata"]["ownerReferences"],
            json!([{"apiVersion": "v1", "kind": "Node", "name": "n1", "uid": "u1"}])
        );
        assert_eq!(
            v["metadata"]["managedFields"],
            json!([{"manager": "kubelet", "operation": "Update"}])
        );
        // None of either: neither key.
        let v = metadata_json(&encode_metadata("n", "ns", "1")).unwrap();
        assert!(v["metadata"].get("ownerReferences").is_none());
        assert!(v["metadata"].get("managedFields").is_none());
    }

    #[test]
    fn a_nodes_labels_come_through_the_metadata() {
        let m = json!({"name": "edge-1", "resourceVersion": "7",
                       "labels": {"kubernetes.io/hostname": "edge-1", "zone": "north"}});
        let v = metadata_json(&encode_metadata_of(&m)).unwrap();
        assert_eq!(v["metadata"]["labels"], m["labels"]);
        assert_eq!(v["metadata"]["name"], "edge-1");
        // No labels: no key.
        let v = metadata_json(&encode_metadata_of(&json!({"name": "n"}))).unwrap();
        assert!(v["metadata"].get("labels").is_none());
    }

    #[test]
    fn fields_not_read_are_skipped() {
        // ObjectMeta with labels (11) and managedFields (17) before resourceVersion (6): the
        // order on the wire does not matter, and unknown fields are skipped.
        let mut meta = Vec::new();
        meta.extend_from_slice(&[0x5a, 0x06]); // 11: a 6-byte map entry
        meta.extend_from_slice(&[0x0a, 0x01, b'a', 0x12, 0x01, b'b']);
        meta.extend_from_slice(&[0x8a, 0x01, 0x02, 0x0a, 0x00]); // 17: 2 bytes
        meta.extend_from_slice(&[0x32, 0x02, b'4', b'2']); // 6: "42"
        let mut object = vec![0x0a, u8::try_from(meta.len()).unwrap()];
        object.extend_from_slice(&meta);
        object.extend_from_slice(&[0x12, 0x00]); // spec (2), empty
        let v = metadata_json(&envelope("coordination.k8s.io/v1", "Lease", object)).unwrap();
        assert_eq!(v["metadata"]["resourceVersion"], "42");
        assert_eq!(v["metadata"]["labels"], json!({"a": "b"}));
        assert_eq!(v["kind"], "Lease");
    }

    #[test]
    fn bad_input_is_refused_with_the_reason() {
        let e = metadata_json(b"{\"kind\":\"Status\"}").unwrap_err();
        assert!(e.contains("no k8s\\0 prefix"), "{e}");
        let e = metadata_json(b"k8s\0\x0a\xff").unwrap_err();
        assert!(e.starts_with("the envelope:"), "{e}");
        let mut gz = encode_metadata("n", "ns", "1");
        // contentEncoding (3) = "gzip", appended: the last value of a field wins.
        gz.extend_from_slice(&[0x1a, 0x04, b'g', b'z', b'i', b'p']);
        let e = metadata_json(&gz).unwrap_err();
        assert!(e.contains("\"gzip\" not supported"), "{e}");
    }

    #[test]
    fn a_status_gives_reason_and_message() {
        let b = encode_status(409, "Conflict", "the object has been modified");
        assert_eq!(
            status(&b),
            Some(("Conflict".into(), "the object has been modified".into()))
        );
        assert_eq!(status(&encode_metadata("n", "ns", "1")), None);
        assert_eq!(status(b"not protobuf"), None);
    }
}
