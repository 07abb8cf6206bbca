//! Pods read in the Kubernetes protobuf encoding: a Pod, a PodList and a watch event of the
//! node's pods, decoded into the JSON the apiserver would have sent for them, so that
//! everything after (the pod decoder, its checks of unknown fields, the checkpoint) reads one
//! form.
//!
//! The decoding is driven by a table made at build time from `proto/k8s/pod.proto` (the Pod and
//! every message it holds, as the pinned API release defines them; written by
//! `scripts/k8s-pod-proto.py`): field numbers, JSON names, and where the JSON encoding differs
//! from the protobuf one, which the table says per field:
//! - an embedded Go struct (a Volume's `VolumeSource`, a Probe's `ProbeHandler`) is a message of
//!   its own in protobuf and its fields are the parent's in JSON (`INLINE`);
//! - a scalar that is no pointer in Go is written always in protobuf, and left out of the JSON
//!   when it is zero if its JSON tag says `omitempty` (`OMIT_EMPTY`); a pointer's zero (a grace
//!   period of 0) is written in both and kept;
//! - `Time` is seconds and nanoseconds (RFC 3339 in JSON, `null` when zero), `Quantity` a
//!   message of one string, `IntOrString` a message of three fields, `FieldsV1` JSON bytes.
//!
//! A field the table does not know (one a later API release added) is skipped, as the JSON
//! decoder of a pod leaves a field it does not model. Wrong wire types, truncated fields and
//! text that is not UTF-8 are errors naming the message and the field.

use serde_json::{Map, Value};

use super::protobuf;

/// What a message is in JSON.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Special {
    /// An object of its fields.
    None,
    /// RFC 3339 in seconds, `null` when zero.
    Time,
    /// Its one string.
    Quantity,
    /// A number or a string, as its type field says.
    IntOrString,
    /// The JSON its bytes hold.
    FieldsV1,
}

/// A field's kind.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Kind {
    String,
    Bool,
    Int32,
    Int64,
    /// A message: its index in [`MESSAGES`].
    Message(u16),
    /// `map<string, string>`.
    MapString,
    /// `map<string, M>`.
    MapMessage(u16),
}

/// Many values (an array in JSON).
const REPEATED: u8 = 1;
/// An embedded struct: its fields are the parent's in JSON.
const INLINE: u8 = 2;
/// A scalar left out of the JSON when zero.
const OMIT_EMPTY: u8 = 4;
/// A message left out of the JSON when zero (`omitzero`).
const OMIT_ZERO: u8 = 8;

#[derive(Debug)]
pub(super) struct Field {
    number: u32,
    name: &'static str,
    kind: Kind,
    flags: u8,
}

#[derive(Debug)]
pub(super) struct Message {
    name: &'static str,
    special: Special,
    fields: &'static [Field],
}

include!(concat!(env!("OUT_DIR"), "/pod_schema.rs"));

/// Nesting deeper than the schema has is an error, not a deep recursion.
const MAX_DEPTH: u32 = 40;
/// The seconds of Go's zero time (year 1).
const ZERO_TIME_SECONDS: i64 = -62_135_596_800;

/// A Pod or a PodList in the envelope (`k8s\0`, then the `runtime.Unknown`), as its JSON.
pub fn object(bytes: &[u8]) -> Result<Value, String> {
    let (type_meta, raw) = protobuf::open(bytes)?;
    let (api_version, kind) = (type_meta.api_version(), type_meta.kind());
    let index = match kind {
        "Pod" => POD,
        "PodList" => POD_LIST,
        other => {
            return Err(format!(
                "a {other:?} where a Pod or a PodList was asked for"
            ));
        }
    };
    let mut v = message(&raw, index, 0).map_err(|e| format!("{kind} {e}"))?;
    if let Value::Object(o) = &mut v {
        o.insert("apiVersion".into(), Value::String(api_version.to_owned()));
        o.insert("kind".into(), Value::String(kind.to_owned()));
    }
    Ok(v)
}

/// One frame of a watch stream in protobuf (a `WatchEvent`: its type and its object in the
/// envelope; the stream's frames carry no envelope of their own), as the event's type and the
/// object's JSON; an `ERROR` event's object is the `Status` as JSON (`code`, `reason`,
/// `message`).
pub fn watch_event(frame: &[u8]) -> Result<(String, Value), String> {
    let (kind, raw) = protobuf::watch_event(frame)?;
    let object = if kind == "ERROR" {
        protobuf::status_json(&raw)?
    } else {
        object(&raw)?
    };
    Ok((kind, object))
}

/// The protobuf wire format, read from a slice.
struct Reader<'a>(&'a [u8]);

impl<'a> Reader<'a> {
    fn varint(&mut self) -> Result<u64, String> {
        let mut v = 0u64;
        for (i, &b) in self.0.iter().enumerate().take(10) {
            v |= u64::from(b & 0x7f) << (7 * i);
            if b & 0x80 == 0 {
                self.0 = &self.0[i + 1..];
                return Ok(v);
            }
        }
        Err("a varint runs past its end".into())
    }

    /// The next field's number and wire type, or `None` at the end.
    fn key(&mut self) -> Result<Option<(u32, u8)>, String> {
        if self.0.is_empty() {
            return Ok(None);
        }
        let k = self.varint()?;
        let number =
            u32::try_from(k >> 3).map_err(|_| format!("field number {} too large", k >> 3))?;
        Ok(Some((number, (k & 7) as u8)))
    }

    fn bytes(&mut self) -> Result<&'a [u8], String> {
        let len = self.varint()?;
        let len = usize::try_from(len)
            .ok()
            .filter(|&l| l <= self.0.len())
            .ok_or_else(|| format!("a field of {len} bytes where {} are left", self.0.len()))?;
        let (v, rest) = self.0.split_at(len);
        self.0 = rest;
        Ok(v)
    }

    fn skip(&mut self, wire: u8) -> Result<(), String> {
        let n = match wire {
            0 => return self.varint().map(drop),
            1 => 8,
            2 => return self.bytes().map(drop),
            5 => 4,
            w => return Err(format!("wire type {w} not supported")),
        };
        if self.0.len() < n {
            return Err("a fixed-size field runs past its end".into());
        }
        self.0 = &self.0[n..];
        Ok(())
    }
}

fn text(b: &[u8]) -> Result<String, String> {
    String::from_utf8(b.to_vec()).map_err(|_| "not UTF-8".to_owned())
}

/// `e` (an error inside field `name`) with the field in front: `name.rest.of.path: what` when
/// `e` names a path already, `name: what` otherwise.
fn at(name: &str, e: String) -> String {
    match e.split_once(": ") {
        Some((path, _)) if !path.contains(' ') => format!("{name}.{e}"),
        _ => format!("{name}: {e}"),
    }
}

/// The message `index` of the table in `bytes`, as its JSON.
fn message(bytes: &[u8], index: u16, depth: u32) -> Result<Value, String> {
    let m = &MESSAGES[usize::from(index)];
    if depth > MAX_DEPTH {
        return Err(format!("nested deeper than {MAX_DEPTH} (in {})", m.name));
    }
    if m.special != Special::None {
        return special(bytes, m);
    }
    let mut obj = Map::new();
    let mut r = Reader(bytes);
    while let Some((number, wire)) = r.key()? {
        let Ok(i) = m.fields.binary_search_by_key(&number, |f| f.number) else {
            r.skip(wire).map_err(|e| format!("field {number}: {e}"))?;
            continue;
        };
        let f = &m.fields[i];
        field(&mut r, wire, f, &mut obj, depth).map_err(|e| at(f.name, e))?;
    }
    Ok(Value::Object(obj))
}

/// One occurrence of field `f` into `obj`.
fn field(
    r: &mut Reader,
    wire: u8,
    f: &Field,
    obj: &mut Map<String, Value>,
    depth: u32,
) -> Result<(), String> {
    let numeric = matches!(f.kind, Kind::Bool | Kind::Int32 | Kind::Int64);
    if f.flags & REPEATED != 0 && numeric && wire == 2 {
        // A packed repeated scalar.
        let mut packed = Reader(r.bytes()?);
        while !packed.0.is_empty() {
            let v = scalar(packed.varint()?, f.kind)?;
            push(obj, f.name, v);
        }
        return Ok(());
    }
    let want = if numeric { 0 } else { 2 };
    if wire != want {
        return Err(format!("wire type {wire}, not {want}"));
    }
    let v = match f.kind {
        Kind::Bool | Kind::Int32 | Kind::Int64 => scalar(r.varint()?, f.kind)?,
        Kind::String => Value::String(text(r.bytes()?)?),
        Kind::Message(m) => message(r.bytes()?, m, depth + 1)?,
        Kind::MapString | Kind::MapMessage(_) => {
            let (k, v) = entry(r.bytes()?, f.kind, depth)?;
            let map = obj
                .entry(f.name)
                .or_insert_with(|| Value::Object(Map::new()));
            if let Value::Object(map) = map {
                map.insert(k, v);
            }
            return Ok(());
        }
    };
    if f.flags & REPEATED != 0 {
        push(obj, f.name, v);
    } else if f.flags & INLINE != 0 {
        if let Value::Object(inner) = v {
            obj.extend(inner);
        }
    } else {
        let omitted = (f.flags & OMIT_EMPTY != 0 && is_zero(&v))
            || (f.flags & OMIT_ZERO != 0
                && (v.is_null() || v.as_object().is_some_and(Map::is_empty)));
        if !omitted {
            obj.insert(f.name.to_owned(), v);
        }
    }
    Ok(())
}

fn push(obj: &mut Map<String, Value>, name: &str, v: Value) {
    if let Value::Array(a) = obj.entry(name).or_insert_with(|| Value::Array(Vec::new())) {
        a.push(v);
    }
}

fn scalar(v: u64, kind: Kind) -> Result<Value, String> {
    Ok(match kind {
        Kind::Bool => Value::Bool(v != 0),
        // Two's complement, as the wire carries a negative int32 in ten bytes.
        Kind::Int32 => Value::from(int32(v.cast_signed())?),
        _ => Value::from(v.cast_signed()),
    })
}

fn int32(v: i64) -> Result<i32, String> {
    i32::try_from(v).map_err(|_| format!("{v} is out of an int32's range"))
}

fn is_zero(v: &Value) -> bool {
    match v {
        Value::String(s) => s.is_empty(),
        Value::Bool(b) => !b,
        Value::Number(n) => n.as_i64() == Some(0),
        _ => false,
    }
}

/// A map entry: its key (field 1) and value (field 2).
fn entry(bytes: &[u8], kind: Kind, depth: u32) -> Result<(String, Value), String> {
    let mut r = Reader(bytes);
    let (mut key, mut value) = (String::new(), None);
    while let Some((number, wire)) = r.key()? {
        match (number, wire, kind) {
            (1, 2, _) => key = text(r.bytes()?).map_err(|e| format!("a key: {e}"))?,
            (2, 2, Kind::MapString) => {
                value = Some(Value::String(
                    text(r.bytes()?).map_err(|e| format!("the value of {key:?}: {e}"))?,
                ))
            }
            (2, 2, Kind::MapMessage(m)) => value = Some(message(r.bytes()?, m, depth + 1)?),
            (_, w, _) => r.skip(w)?,
        }
    }
    let value = value.unwrap_or_else(|| match kind {
        Kind::MapMessage(m) => message(&[], m, depth + 1).unwrap_or(Value::Null),
        _ => Value::String(String::new()),
    });
    Ok((key, value))
}

/// A message with a JSON form of its own.
fn special(bytes: &[u8], m: &Message) -> Result<Value, String> {
    let mut r = Reader(bytes);
    let (mut ints, mut string, mut raw) = ([0i64; 3], None, None);
    let mut any = false;
    while let Some((number, wire)) = r.key()? {
        any = true;
        match (number, wire) {
            (1..=3, 0) => ints[number as usize - 1] = r.varint()?.cast_signed(),
            (1 | 3, 2) => {
                let b = r.bytes()?;
                if m.special == Special::FieldsV1 {
                    raw = Some(b);
                } else {
                    string = Some(text(b)?);
                }
            }
            (_, w) => r.skip(w)?,
        }
    }
    Ok(match m.special {
        Special::Time => {
            let (seconds, nanos) = (ints[0], int32(ints[1])?);
            if !any || (seconds == ZERO_TIME_SECONDS && nanos == 0) {
                Value::Null
            } else {
                let at = seconds
                    .checked_mul(1_000_000_000)
                    .and_then(|s| s.checked_add(i64::from(nanos)))
                    .ok_or_else(|| format!("out of range: {seconds} s"))?;
                Value::String(crate::api::time::rfc3339(at))
            }
        }
        Special::Quantity => Value::String(string.unwrap_or_default()),
        Special::IntOrString => {
            if ints[0] == 1 {
                Value::String(string.unwrap_or_default())
            } else {
                Value::from(int32(ints[1])?)
            }
        }
        Special::FieldsV1 => match raw {
            None => Value::Object(Map::new()),
            Some(b) => serde_json::from_slice(b).map_err(|e| format!("not JSON: {e}"))?,
        },
        Special::None => unreachable!("an ordinary message is not special"),
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    // The wire format, written by hand.
    fn varint(mut v: u64, out: &mut Vec<u8>) {
        while v >= 0x80 {
            out.push(u8::try_from(v & 0x7f).unwrap() | 0x80);
            v >>= 7;
        }
        out.push(u8::try_from(v).unwrap());
    }
    fn int(number: u32, v: i64) -> Vec<u8> {
        let mut out = Vec::new();
        varint(u64::from(number) << 3, &mut out);
        varint(v.cast_unsigned(), &mut out);
        out
    }
    fn bytes(number: u32, b: &[u8]) -> Vec<u8> {
        let mut out = Vec::new();
        varint(u64::from(number) << 3 | 2, &mut out);
        varint(b.len() as u64, &mut out);
        out.extend_from_slice(b);
        out
    }
    fn msg(fields: &[Vec<u8>]) -> Vec<u8> {
        fields.concat()
    }
    fn envelope(kind: &str, raw: &[u8]) -> Vec<u8> {
        protobuf::envelope("v1", kind, raw.to_vec())
    }

    fn pod() -> Vec<u8> {
        let meta = msg(&[
            bytes(1, b"web"),
            bytes(5, b"u1"),
            bytes(6, b"17"),
            // creationTimestamp 2024-05-01T12:34:56Z
            bytes(8, &msg(&[int(1, 1_714_566_896)])),
            bytes(11, &msg(&[bytes(1, b"app"), bytes(2, b"web")])),
            bytes(11, &msg(&[bytes(1, b"empty")])),
            // A field this release does not have: skipped.
            bytes(99, b"later"),
        ]);
        let volume = msg(&[
            bytes(1, b"scratch"),
            bytes(
                2,
                &msg(&[bytes(
                    2,
                    &msg(&[bytes(1, b""), bytes(2, &bytes(1, b"64Mi"))]),
                )]),
            ),
        ]);
        let probe = msg(&[bytes(
            1,
            &msg(&[bytes(
                3,
                &bytes(1, &msg(&[int(1, 1), int(2, 0), bytes(3, b"http")])),
            )]),
        )]);
        let container = msg(&[
            bytes(1, b"main"),
            bytes(2, b""),
            bytes(6, &msg(&[bytes(1, b""), int(3, 8080)])),
            bytes(
                8,
                &bytes(1, &msg(&[bytes(1, b"cpu"), bytes(2, &bytes(1, b"500m"))])),
            ),
            bytes(11, &probe),
        ]);
        let security = msg(&[int(4, 0), int(4, 3000), bytes(4, &[1, 2])]);
        let spec = msg(&[
            bytes(1, &volume),
            bytes(2, &container),
            int(4, 0),
            int(11, 0),
            bytes(14, &security),
        ]);
        envelope("Pod", &msg(&[bytes(1, &meta), bytes(2, &spec)]))
    }

    #[test]
    fn a_pod_reads_as_the_json_the_apiserver_sends() {
        let v = object(&pod()).unwrap();
        assert_eq!(
            v,
            json!({
                "apiVersion": "v1", "kind": "Pod",
                "metadata": {"name": "web", "uid": "u1", "resourceVersion": "17",
                             "creationTimestamp": "2024-05-01T12:34:56Z",
                             "labels": {"app": "web", "empty": ""}},
                "spec": {
                    // The volume source's fields are the volume's; an empty medium is left out.
                    "volumes": [{"name": "scratch", "emptyDir": {"sizeLimit": "64Mi"}}],
                    // The image and the port's name are left out when empty, not the name.
                    "containers": [{"name": "main", "ports": [{"containerPort": 8080}],
                                    "resources": {"limits": {"cpu": "500m"}},
                                    "readinessProbe": {"tcpSocket": {"port": "http"}}}],
                    // A pointer set to zero is kept; a plain bool's false is left out.
                    "terminationGracePeriodSeconds": 0,
                    // Repeated numbers unpacked and packed.
                    "securityContext": {"supplementalGroups": [0, 3000, 1, 2]}
                }
            })
        );
        // What picolet makes of it.
        let pod = crate::api::pod_from_value(v, &mut |_| {}).unwrap();
        assert_eq!(pod.metadata.name, "web");
    }

    /// A frame of a real watch (kube-apiserver v1.37.2, `Accept:
    /// application/vnd.kubernetes.protobuf`, the ADDED event of a pod made with kubectl): the
    /// fuzz target's seed.
    #[test]
    fn a_frame_of_the_apiservers_watch() {
        let frame = include_bytes!("../../fuzz/seeds/watch_frame/added");
        let (kind, v) = watch_event(frame).unwrap();
        assert_eq!(kind, "ADDED");
        assert_eq!(
            (&v["apiVersion"], &v["kind"]),
            (&json!("v1"), &json!("Pod"))
        );
        assert_eq!(v["metadata"]["labels"], json!({"app": "seed"}));
        assert!(
            v["metadata"]["creationTimestamp"]
                .as_str()
                .is_some_and(|t| t.ends_with('Z'))
        );
        assert_eq!(
            v["metadata"]["managedFields"][0]["manager"],
            "kubectl-create"
        );
        assert!(v["metadata"]["managedFields"][0]["fieldsV1"]["f:spec"].is_object());
        let spec = &v["spec"];
        assert_eq!(spec["terminationGracePeriodSeconds"], 0);
        assert_eq!(spec["nodeName"], "seed-node");
        assert_eq!(
            spec["volumes"][0],
            json!({"name": "scratch", "emptyDir": {"sizeLimit": "1Mi"}})
        );
        let c = &spec["containers"][0];
        assert_eq!(c["readinessProbe"]["tcpSocket"], json!({"port": 8080}));
        // The requests as the apiserver defaults them from the limits.
        assert_eq!(
            c["resources"],
            json!({"limits": {"memory": "64Mi"}, "requests": {"memory": "64Mi"}})
        );
        assert_eq!(c["command"], json!(["sh", "-c", "sleep 3600"]));
        let pod = crate::api::pod_from_value(v, &mut |_| {}).unwrap();
        assert_eq!(pod.metadata.name, "seed");
    }

    #[test]
    fn times_int_or_strings_and_managed_fields() {
        let time = |b: &[u8]| special(b, &MESSAGES[index_of("Time")]).unwrap();
        assert_eq!(
            time(&[]),
            Value::Null,
            "an empty Time is Go's zero time: null"
        );
        assert_eq!(time(&int(1, ZERO_TIME_SECONDS)), Value::Null);
        assert_eq!(
            time(&msg(&[int(1, 0), int(2, 5)])),
            json!("1970-01-01T00:00:00Z")
        );
        assert!(special(&int(1, i64::MAX), &MESSAGES[index_of("Time")]).is_err());
        let ios = |b: &[u8]| special(b, &MESSAGES[index_of("IntOrString")]).unwrap();
        assert_eq!(ios(&msg(&[int(1, 0), int(2, 8080)])), json!(8080));
        assert_eq!(ios(&msg(&[int(1, 1), bytes(3, b"http")])), json!("http"));
        let fields = |b: &[u8]| special(b, &MESSAGES[index_of("FieldsV1")]);
        assert_eq!(
            fields(&bytes(1, br#"{"f:spec":{}}"#)).unwrap(),
            json!({"f:spec": {}})
        );
        assert!(fields(&bytes(1, b"{")).is_err());
    }

    fn index_of(name: &str) -> usize {
        MESSAGES.iter().position(|m| m.name == name).unwrap()
    }

    #[test]
    fn the_table_is_sorted_and_every_kind_points_at_a_message() {
        for m in &MESSAGES {
            assert!(
                m.fields.windows(2).all(|w| w[0].number < w[1].number),
                "{}",
                m.name
            );
            for f in m.fields {
                if let Kind::Message(i) | Kind::MapMessage(i) = f.kind {
                    assert!(usize::from(i) < MESSAGES.len(), "{}.{}", m.name, f.name);
                }
            }
        }
        assert_eq!(MESSAGES[usize::from(POD)].name, "Pod");
        assert_eq!(MESSAGES[usize::from(POD_LIST)].name, "PodList");
    }

    #[test]
    fn a_list_and_watch_events() {
        let raw = pod();
        let item = protobuf::open(&raw).unwrap().1;
        let list = envelope(
            "PodList",
            &msg(&[bytes(1, &bytes(2, b"40")), bytes(2, &item)]),
        );
        let v = object(&list).unwrap();
        assert_eq!(v["kind"], "PodList");
        assert_eq!(v["metadata"]["resourceVersion"], "40");
        assert_eq!(v["items"][0]["metadata"]["name"], "web");
        assert!(
            v["items"][0].get("kind").is_none(),
            "a list's items carry no kind, as in JSON"
        );

        let event = protobuf::encode_watch_event("MODIFIED", &raw);
        let (kind, object) = watch_event(&event).unwrap();
        assert_eq!(
            (kind.as_str(), &object["metadata"]["name"]),
            ("MODIFIED", &json!("web"))
        );
        let gone = protobuf::encode_status(410, "Expired", "too old resource version");
        let (kind, status) = watch_event(&protobuf::encode_watch_event("ERROR", &gone)).unwrap();
        assert_eq!(kind, "ERROR");
        assert_eq!(status["code"], 410);
        assert_eq!(status["message"], "too old resource version");
    }

    #[test]
    fn bad_input_is_an_error_naming_where() {
        let spec_with = |field: Vec<u8>| envelope("Pod", &bytes(2, &field));
        // A bool sent as bytes.
        let e = object(&spec_with(bytes(11, b"x"))).unwrap_err();
        assert_eq!(e, "Pod spec.hostNetwork: wire type 2, not 0");
        // A name that is not UTF-8.
        let e = object(&envelope("Pod", &bytes(1, &bytes(1, &[0xff])))).unwrap_err();
        assert_eq!(e, "Pod metadata.name: not UTF-8");
        // Deeper, in a map.
        let labels = bytes(1, &bytes(11, &msg(&[bytes(1, b"app"), bytes(2, &[0xc3])])));
        let e = object(&envelope("Pod", &labels)).unwrap_err();
        assert_eq!(e, "Pod metadata.labels: the value of \"app\": not UTF-8");
        // Truncated.
        let mut cut = pod();
        cut.truncate(cut.len() - 3);
        assert!(object(&cut).is_err());
        assert!(object(b"k8s\0").unwrap_err().contains("a \"\" where a Pod"));
        assert!(
            object(&envelope("Node", &[]))
                .unwrap_err()
                .contains("\"Node\"")
        );
        assert!(
            watch_event(&bytes(2, &bytes(1, &pod())))
                .unwrap_err()
                .contains("without a type")
        );
        // Ten continuation bytes: no varint.
        assert!(
            object(&envelope(
                "Pod",
                &[
                    0x08, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff
                ]
            ))
            .is_err()
        );
    }
}
