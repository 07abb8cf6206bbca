//! Decoding a static pod manifest (YAML or JSON) into a [`Pod`].
//!
//! Decoding is lenient about fields picolet does not model: they are
//! returned in [`Decoded::unknown_fields`] (paths such as
//! `metadata.finalizers`), which [`super::fields::check`] sorts into standard fields refused,
//! standard fields ignored as upstream ignores them on a node, and fields that are no Pod field
//! (the only ones reported as unknown); validation refuses anything else picolet cannot honour. Type errors are strict
//! and carry the field path plus, where the parser knows it, line and column.
//!
//! Input beyond [`Limits::MANIFEST`] (size, nesting, documents, scalar length, nodes) is refused
//! before any parsing, so a hostile file costs a linear scan and nothing more.

use std::fmt;

use serde::de::DeserializeSeed;

use super::pod::Pod;
use crate::limits::{self, LimitError, Limits, Syntax};

/// Manifest encoding.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Format {
    Yaml,
    Json,
}

impl Format {
    /// Picks the format from a file extension (`yaml`, `yml`, `json`, any case).
    pub fn from_extension(ext: &str) -> Option<Format> {
        if ext.eq_ignore_ascii_case("yaml") || ext.eq_ignore_ascii_case("yml") {
            Some(Format::Yaml)
        } else if ext.eq_ignore_ascii_case("json") {
            Some(Format::Json)
        } else {
            None
        }
    }

    /// The syntax the limits check reads.
    pub fn syntax(self) -> Syntax {
        match self {
            Format::Yaml => Syntax::Yaml,
            Format::Json => Syntax::Json,
        }
    }
}

/// A decoded pod plus the fields that were present but not understood.
#[derive(Debug, Clone, PartialEq)]
pub struct Decoded {
    pub pod: Pod,
    /// Paths of ignored fields, in the same notation as validation errors
    /// (`metadata.finalizers`, `spec.schedulerName`), each mapping's keys in sorted order.
    pub unknown_fields: Vec<String>,
    /// The manifest document as parsed, whole (the static pod identity hashes it).
    pub document: serde_json::Value,
}

#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum DecodeError {
    #[error("{0}")]
    Limit(#[from] LimitError),
    #[error("manifest is empty")]
    Empty,
    #[error("manifest holds {0} yaml documents; put exactly one pod in each file")]
    MultipleDocuments(usize),
    #[error("{}", not_pod_message(.api_version, .kind))]
    NotPod {
        api_version: Option<String>,
        kind: Option<String>,
    },
    /// A syntax or type error. `path` is "" when the error is not inside a
    /// field (for example a syntax error); line and column are 1-based.
    #[error("{}", invalid_message(.path, .message, *.line, *.column))]
    Invalid {
        path: String,
        message: String,
        line: Option<usize>,
        column: Option<usize>,
    },
}

fn not_pod_message(api_version: &Option<String>, kind: &Option<String>) -> String {
    const ONLY: &str = "only apiVersion v1, kind Pod is accepted";
    let api = match api_version.as_deref() {
        Some(a) if !a.is_empty() => format!("apiVersion {a}"),
        _ => "no apiVersion".to_owned(),
    };
    match kind.as_deref() {
        Some(k) if !k.is_empty() => {
            let article = if k.starts_with(['A', 'E', 'I', 'O', 'U']) {
                "an"
            } else {
                "a"
            };
            format!("manifest is {article} {k} ({api}); {ONLY}")
        }
        _ => format!("manifest has no kind ({api}); {ONLY}"),
    }
}

fn invalid_message(
    path: &str,
    message: &str,
    line: Option<usize>,
    column: Option<usize>,
) -> String {
    let mut s = String::new();
    if !path.is_empty() {
        s.push_str(path);
        s.push_str(": ");
    }
    s.push_str(message);
    if let (Some(l), Some(c)) = (line, column) {
        s.push_str(&format!(" at line {l} column {c}"));
    }
    s
}

mod header {
    /// Just enough of the object to refuse the wrong kind before a full
    /// decode. Named `Pod` so serde's "expected struct Pod" reads well.
    #[derive(serde::Deserialize)]
    #[serde(rename_all = "camelCase")]
    pub(super) struct Pod {
        #[serde(default)]
        pub api_version: Option<String>,
        #[serde(default)]
        pub kind: Option<String>,
    }
}

use header::Pod as TypeMeta;

/// Decodes one v1 Pod. YAML input must hold exactly one non-empty document
/// (empty documents, e.g. from a trailing `---`, are skipped). Input beyond
/// [`Limits::MANIFEST`] is refused before it is parsed.
pub fn decode_pod(bytes: &[u8], format: Format) -> Result<Decoded, DecodeError> {
    limits::check(bytes, format.syntax(), &Limits::MANIFEST)?;
    match format {
        Format::Yaml => decode_yaml(bytes),
        Format::Json => decode_json(bytes),
    }
}

fn check_type(meta: TypeMeta) -> Result<(), DecodeError> {
    if meta.api_version.as_deref() == Some("v1") && meta.kind.as_deref() == Some("Pod") {
        Ok(())
    } else {
        Err(DecodeError::NotPod {
            api_version: meta.api_version,
            kind: meta.kind,
        })
    }
}

fn decode_yaml(bytes: &[u8]) -> Result<Decoded, DecodeError> {
    // Every document is parsed, to count them; stop at the first error: yaml_serde keeps
    // yielding (or panics on) documents after one. Empty documents (a trailing `---`) are null.
    let mut first = None;
    let mut count = 0;
    for (i, doc) in yaml_serde::Deserializer::from_slice(bytes).enumerate() {
        match serde_path_to_error::deserialize::<_, Document>(doc) {
            Ok(Document(serde_json::Value::Null)) => {}
            Ok(Document(value)) => {
                count += 1;
                if first.is_none() {
                    first = Some((i, value));
                }
            }
            Err(e) => return Err(yaml_error(e.path().to_string(), e.inner())),
        }
    }
    let Some((index, document)) = first else {
        return Err(DecodeError::Empty);
    };
    if count > 1 {
        return Err(DecodeError::MultipleDocuments(count));
    }
    decode_document(document, |path| {
        let doc = yaml_serde::Deserializer::from_slice(bytes).nth(index)?;
        let e = Locate(path).deserialize(doc).err()?;
        let loc = e.location().filter(|_| e.to_string().contains(FOUND))?;
        Some((loc.line(), loc.column()))
    })
}

fn decode_json(bytes: &[u8]) -> Result<Decoded, DecodeError> {
    let bytes = bytes.strip_prefix(b"\xEF\xBB\xBF").unwrap_or(bytes);
    if bytes.iter().all(u8::is_ascii_whitespace) {
        return Err(DecodeError::Empty);
    }
    let mut de = serde_json::Deserializer::from_slice(bytes);
    let Document(document) = serde_path_to_error::deserialize(&mut de)
        .map_err(|e| json_error(e.path().to_string(), e.inner()))?;
    de.end().map_err(|e| json_error(String::new(), &e))?;
    if document.is_null() {
        return Err(DecodeError::Empty);
    }
    decode_document(document, |path| {
        let mut de = serde_json::Deserializer::from_slice(bytes);
        let e = Locate(path).deserialize(&mut de).err()?;
        (e.line() != 0 && e.to_string().contains(FOUND)).then(|| (e.line(), e.column()))
    })
}

/// Checks the document's type and decodes the Pod from it; `locate` finds the line and column
/// of a field path in the source, for a type error.
fn decode_document(
    document: serde_json::Value,
    locate: impl Fn(&[Segment]) -> Option<(usize, usize)>,
) -> Result<Decoded, DecodeError> {
    let invalid_at = |e: &serde_path_to_error::Error<serde_json::Error>| {
        let at = locate(&segments(e.path()));
        invalid(
            e.path().to_string(),
            e.inner().to_string(),
            at.map(|a| a.0),
            at.map(|a| a.1),
        )
    };
    if !document.is_object() {
        use serde::de::Unexpected;
        let found = match &document {
            serde_json::Value::Array(_) => Unexpected::Seq,
            serde_json::Value::String(s) => Unexpected::Str(s),
            serde_json::Value::Bool(b) => Unexpected::Bool(*b),
            serde_json::Value::Number(n) => match (n.as_u64(), n.as_i64(), n.as_f64()) {
                (Some(u), ..) => Unexpected::Unsigned(u),
                (_, Some(i), _) => Unexpected::Signed(i),
                (.., f) => Unexpected::Float(f.unwrap_or_default()),
            },
            _ => Unexpected::Unit,
        };
        let message = format!("invalid type: {found}, expected struct Pod");
        let at = locate(&[]);
        return Err(invalid(
            String::new(),
            message,
            at.map(|a| a.0),
            at.map(|a| a.1),
        ));
    }
    let meta: TypeMeta = serde_path_to_error::deserialize(&document).map_err(|e| invalid_at(&e))?;
    check_type(meta)?;
    let mut unknown_fields = Vec::new();
    let pod = pod_from_value(document.clone(), &mut |path| {
        let mut s = String::new();
        push_path(&path, &mut s);
        unknown_fields.push(s);
    })
    .map_err(|e| invalid_at(&e))?;
    Ok(Decoded {
        pod,
        unknown_fields,
        document,
    })
}

/// Decodes a Pod from a JSON value. This is the binary's one copy of the Pod structs' derived
/// deserializer: static manifests (YAML or JSON, parsed into a value first), the apiserver's
/// list and watch events and the checkpoint all come through it (docs/figures.md). Each
/// field no Pod struct knows is passed to `ignored`; an error carries the field's path. A null
/// field is as if absent, wherever the Pod comes from.
pub fn pod_from_value(
    mut value: serde_json::Value,
    ignored: &mut dyn FnMut(serde_ignored::Path<'_>),
) -> Result<Pod, serde_path_to_error::Error<serde_json::Error>> {
    drop_nulls(&mut value);
    serde_path_to_error::deserialize(serde_ignored::Deserializer::new(value, &mut { ignored }))
}

/// A null field is the field's default, as when it is absent (`env:` with nothing after it in a
/// manifest, `creationTimestamp: null` from a client): upstream's decoding leaves a field that is
/// null at its zero value.
fn drop_nulls(value: &mut serde_json::Value) {
    match value {
        serde_json::Value::Object(map) => {
            map.retain(|_, v| !v.is_null());
            map.values_mut().for_each(drop_nulls);
        }
        serde_json::Value::Array(items) => items.iter_mut().for_each(drop_nulls),
        _ => {}
    }
}

/// A manifest document as a JSON value, built as serde_json builds one (so its hash, the static
/// pod's identity, is the same), except that a key given twice in one mapping is refused instead
/// of the last one silently winning.
/// One YAML document read whole into a JSON value (as the kubelet reads its files: YAML turned
/// into JSON, then decoded), for a reader that decodes it field by field afterwards: the YAML
/// parser read field by field panics on some malformed keys (an empty key with an anchor or a
/// tag), read whole it does not. The error is the failing path and the parser's message.
pub fn yaml_json<'de, D: serde::Deserializer<'de>>(d: D) -> Result<serde_json::Value, String>
where
    D::Error: fmt::Display,
{
    serde_path_to_error::deserialize::<_, Document>(d)
        .map(|Document(v)| v)
        .map_err(|e| {
            let at = e.path().to_string();
            if at == "." {
                e.inner().to_string()
            } else {
                format!("{at}: {}", e.inner())
            }
        })
}

struct Document(serde_json::Value);

impl<'de> serde::Deserialize<'de> for Document {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Document, D::Error> {
        d.deserialize_any(DocumentVisitor).map(Document)
    }
}

struct DocumentVisitor;

impl<'de> serde::de::Visitor<'de> for DocumentVisitor {
    type Value = serde_json::Value;

    fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("any value")
    }
    fn visit_bool<E>(self, v: bool) -> Result<serde_json::Value, E> {
        Ok(serde_json::Value::Bool(v))
    }
    fn visit_i64<E>(self, v: i64) -> Result<serde_json::Value, E> {
        Ok(serde_json::Value::Number(v.into()))
    }
    fn visit_u64<E>(self, v: u64) -> Result<serde_json::Value, E> {
        Ok(serde_json::Value::Number(v.into()))
    }
    fn visit_i128<E: serde::de::Error>(self, v: i128) -> Result<serde_json::Value, E> {
        match (i64::try_from(v), u64::try_from(v)) {
            (Ok(i), _) => self.visit_i64(i),
            (_, Ok(u)) => self.visit_u64(u),
            _ => Err(E::custom("number out of range")),
        }
    }
    fn visit_u128<E: serde::de::Error>(self, v: u128) -> Result<serde_json::Value, E> {
        u64::try_from(v)
            .map(|u| serde_json::Value::Number(u.into()))
            .map_err(|_| E::custom("number out of range"))
    }
    fn visit_f64<E>(self, v: f64) -> Result<serde_json::Value, E> {
        Ok(serde_json::Number::from_f64(v)
            .map_or(serde_json::Value::Null, serde_json::Value::Number))
    }
    fn visit_str<E>(self, v: &str) -> Result<serde_json::Value, E> {
        Ok(serde_json::Value::String(v.to_owned()))
    }
    fn visit_string<E>(self, v: String) -> Result<serde_json::Value, E> {
        Ok(serde_json::Value::String(v))
    }
    fn visit_none<E>(self) -> Result<serde_json::Value, E> {
        Ok(serde_json::Value::Null)
    }
    fn visit_unit<E>(self) -> Result<serde_json::Value, E> {
        Ok(serde_json::Value::Null)
    }
    fn visit_some<D: serde::Deserializer<'de>>(self, d: D) -> Result<serde_json::Value, D::Error> {
        d.deserialize_any(self)
    }
    fn visit_seq<A: serde::de::SeqAccess<'de>>(
        self,
        mut seq: A,
    ) -> Result<serde_json::Value, A::Error> {
        let mut items = Vec::new();
        while let Some(Document(v)) = seq.next_element()? {
            items.push(v);
        }
        Ok(serde_json::Value::Array(items))
    }
    fn visit_map<A: serde::de::MapAccess<'de>>(
        self,
        mut map: A,
    ) -> Result<serde_json::Value, A::Error> {
        let mut out = serde_json::Map::new();
        while let Some(key) = map.next_key::<String>()? {
            let Document(value) = map.next_value()?;
            if out.contains_key(&key) {
                return Err(serde::de::Error::custom(format_args!(
                    "duplicate key `{key}`"
                )));
            }
            out.insert(key, value);
        }
        Ok(serde_json::Value::Object(out))
    }
}

/// One step of a field path, as serde_path_to_error records it.
enum Segment {
    Key(String),
    Index(usize),
}

/// The path's steps up to the first one it does not know.
fn segments(path: &serde_path_to_error::Path) -> Vec<Segment> {
    use serde_path_to_error::Segment as S;
    path.iter()
        .map_while(|s| match s {
            S::Map { key } => Some(Segment::Key(key.clone())),
            S::Seq { index } => Some(Segment::Index(*index)),
            _ => None,
        })
        .collect()
}

/// The message [`Locate`] stops with where the path ends; the parser adds its position to it.
const FOUND: &str = "(the field is here)";

/// Walks a source document along a field path and stops there with an error, for the line and
/// column the parser puts on it. Only when a type error is reported: the document was parsed
/// once already.
struct Locate<'a>(&'a [Segment]);

impl<'de> serde::de::DeserializeSeed<'de> for Locate<'_> {
    type Value = ();
    fn deserialize<D: serde::Deserializer<'de>>(self, d: D) -> Result<(), D::Error> {
        d.deserialize_any(self)
    }
}

impl<'de> serde::de::Visitor<'de> for Locate<'_> {
    type Value = ();

    fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("any value")
    }
    fn visit_bool<E: serde::de::Error>(self, _: bool) -> Result<(), E> {
        self.here()
    }
    fn visit_i64<E: serde::de::Error>(self, _: i64) -> Result<(), E> {
        self.here()
    }
    fn visit_u64<E: serde::de::Error>(self, _: u64) -> Result<(), E> {
        self.here()
    }
    fn visit_f64<E: serde::de::Error>(self, _: f64) -> Result<(), E> {
        self.here()
    }
    fn visit_str<E: serde::de::Error>(self, _: &str) -> Result<(), E> {
        self.here()
    }
    fn visit_unit<E: serde::de::Error>(self) -> Result<(), E> {
        self.here()
    }
    fn visit_none<E: serde::de::Error>(self) -> Result<(), E> {
        self.here()
    }
    fn visit_some<D: serde::Deserializer<'de>>(self, d: D) -> Result<(), D::Error> {
        d.deserialize_any(self)
    }
    fn visit_seq<A: serde::de::SeqAccess<'de>>(self, mut seq: A) -> Result<(), A::Error> {
        let Some((Segment::Index(want), rest)) = self.0.split_first() else {
            self.here()?;
            while seq.next_element::<serde::de::IgnoredAny>()?.is_some() {}
            return Ok(());
        };
        for _ in 0..*want {
            if seq.next_element::<serde::de::IgnoredAny>()?.is_none() {
                return Ok(());
            }
        }
        seq.next_element_seed(Locate(rest))?;
        while seq.next_element::<serde::de::IgnoredAny>()?.is_some() {}
        Ok(())
    }
    fn visit_map<A: serde::de::MapAccess<'de>>(self, mut map: A) -> Result<(), A::Error> {
        let want = match self.0.split_first() {
            Some((Segment::Key(want), rest)) => Some((want, rest)),
            _ => {
                self.here()?;
                None
            }
        };
        while let Some(key) = map.next_key::<String>()? {
            match want {
                Some((want, rest)) if key == *want => map.next_value_seed(Locate(rest))?,
                _ => map.next_value::<serde::de::IgnoredAny>().map(|_| ())?,
            };
        }
        Ok(())
    }
}

impl Locate<'_> {
    /// Stops with [`FOUND`] when the path ends here.
    fn here<E: serde::de::Error>(&self) -> Result<(), E> {
        if self.0.is_empty() {
            Err(E::custom(FOUND))
        } else {
            Ok(())
        }
    }
}

/// Writes a serde_ignored path as `a.b[0].c`, skipping Option/newtype levels.
fn push_path(path: &serde_ignored::Path, out: &mut String) {
    use serde_ignored::Path;
    match path {
        Path::Root => {}
        Path::Seq { parent, index } => {
            push_path(parent, out);
            out.push_str(&format!("[{index}]"));
        }
        Path::Map { parent, key } => {
            push_path(parent, out);
            if !out.is_empty() {
                out.push('.');
            }
            out.push_str(key);
        }
        Path::Some { parent }
        | Path::NewtypeStruct { parent }
        | Path::NewtypeVariant { parent } => push_path(parent, out),
    }
}

/// Drops serde_path_to_error's placeholders: "." for the root and "?" for a
/// key it never learned (e.g. at end of input).
fn normalize_path(path: String) -> String {
    if path == "." {
        return String::new();
    }
    if !path.split('.').any(|part| part == "?") {
        return path;
    }
    let parts: Vec<&str> = path.split('.').filter(|part| *part != "?").collect();
    parts.join(".")
}

/// Builds an `Invalid` error, moving the location and any path prefix that
/// the parser put into its message into their own fields.
fn invalid(
    path: String,
    mut message: String,
    line: Option<usize>,
    column: Option<usize>,
) -> DecodeError {
    let path = normalize_path(path);
    if let (Some(l), Some(c)) = (line, column) {
        message = message.replacen(&format!(" at line {l} column {c}"), "", 1);
    }
    let prefix = format!("{path}: ");
    if let Some(rest) = message.strip_prefix(&prefix).filter(|_| !path.is_empty()) {
        message = rest.to_owned();
    }
    DecodeError::Invalid {
        path,
        message,
        line,
        column,
    }
}

fn yaml_error(path: String, e: &yaml_serde::Error) -> DecodeError {
    let loc = e.location();
    invalid(
        path,
        e.to_string(),
        loc.as_ref().map(|l| l.line()),
        loc.as_ref().map(|l| l.column()),
    )
}

fn json_error(path: String, e: &serde_json::Error) -> DecodeError {
    let known = e.line() != 0;
    invalid(
        path,
        e.to_string(),
        known.then(|| e.line()),
        known.then(|| e.column()),
    )
}

impl fmt::Display for Format {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            Format::Yaml => "yaml",
            Format::Json => "json",
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::api::pod::{IntOrString, RestartPolicy};

    fn yaml(s: &str) -> Result<Decoded, DecodeError> {
        decode_pod(s.as_bytes(), Format::Yaml)
    }

    fn json(s: &str) -> Result<Decoded, DecodeError> {
        decode_pod(s.as_bytes(), Format::Json)
    }

    fn invalid_parts(e: DecodeError) -> (String, String, Option<usize>, Option<usize>) {
        match e {
            DecodeError::Invalid {
                path,
                message,
                line,
                column,
            } => (path, message, line, column),
            other => panic!("expected Invalid, got {other:?}"),
        }
    }

    const NGINX: &str = "\
apiVersion: v1
kind: Pod
metadata:
  name: nginx
spec:
  containers:
  - name: nginx
    image: nginx:1.14.2
    ports:
    - containerPort: 80
";

    #[test]
    fn nginx_yaml() {
        let d = yaml(NGINX).unwrap();
        assert_eq!(d.pod.metadata.name, "nginx");
        assert_eq!(d.pod.spec.containers[0].ports[0].container_port, 80);
        assert!(d.unknown_fields.is_empty(), "{:?}", d.unknown_fields);
    }

    #[test]
    fn nginx_json() {
        let d = json(
            r#"{"apiVersion":"v1","kind":"Pod","metadata":{"name":"nginx"},
               "spec":{"containers":[{"name":"nginx","image":"nginx:1.14.2","ports":[{"containerPort":80}]}]}}"#,
        )
        .unwrap();
        assert_eq!(d.pod, yaml(NGINX).unwrap().pod);
        let bom = format!("\u{feff}{}", serde_json::to_string(&d.pod).unwrap());
        assert_eq!(json(&bom).unwrap().pod, d.pod);
    }

    #[test]
    fn init_containers_example() {
        // https://kubernetes.io/docs/concepts/workloads/pods/init-containers/
        let d = yaml(
            "\
apiVersion: v1
kind: Pod
metadata:
  name: myapp-pod
  labels:
    app.kubernetes.io/name: MyApp
spec:
  containers:
  - name: myapp-container
    image: busybox:1.28
    command: ['sh', '-c', 'echo The app is running! && sleep 3600']
  initContainers:
  - name: init-myservice
    image: busybox:1.28
    command: ['sh', '-c', \"until nslookup myservice.$(cat /var/run/secrets/kubernetes.io/serviceaccount/namespace).svc.cluster.local; do echo waiting for myservice; sleep 2; done\"]
  - name: init-mydb
    image: busybox:1.28
    command: ['sh', '-c', \"until nslookup mydb.$(cat /var/run/secrets/kubernetes.io/serviceaccount/namespace).svc.cluster.local; do echo waiting for mydb; sleep 2; done\"]
",
        )
        .unwrap();
        let p = &d.pod;
        assert_eq!(p.metadata.labels["app.kubernetes.io/name"], "MyApp");
        assert_eq!(p.spec.init_containers.len(), 2);
        assert_eq!(p.spec.init_containers[1].name, "init-mydb");
        assert_eq!(
            p.spec.containers[0].command[2],
            "echo The app is running! && sleep 3600"
        );
        assert!(d.unknown_fields.is_empty());
    }

    #[test]
    fn resources_and_named_probe_port() {
        // https://kubernetes.io/docs/concepts/configuration/manage-resources-containers/
        // and the named-port liveness probe from configure-liveness-readiness-startup-probes
        let d = yaml(
            "\
apiVersion: v1
kind: Pod
metadata:
  name: frontend
spec:
  restartPolicy: OnFailure
  containers:
  - name: app
    image: images.my-company.example/app:v4
    resources:
      requests:
        memory: \"64Mi\"
        cpu: \"250m\"
      limits:
        memory: \"128Mi\"
        cpu: \"500m\"
    ports:
    - name: liveness-port
      containerPort: 8080
    livenessProbe:
      httpGet:
        path: /healthz
        port: liveness-port
      failureThreshold: 1
      periodSeconds: 10
    startupProbe:
      httpGet:
        path: /healthz
        port: 8080
      failureThreshold: 30
",
        )
        .unwrap();
        let c = &d.pod.spec.containers[0];
        assert_eq!(d.pod.spec.restart_policy, Some(RestartPolicy::OnFailure));
        assert_eq!(c.resources.limits["memory"].value(), 128 << 20);
        assert_eq!(c.resources.limits["cpu"].milli_value(), 500);
        assert_eq!(c.resources.requests["cpu"].milli_value(), 250);
        let live = c
            .liveness_probe
            .as_ref()
            .unwrap()
            .http_get
            .as_ref()
            .unwrap();
        assert_eq!(live.port, IntOrString::String("liveness-port".into()));
        let start = c.startup_probe.as_ref().unwrap();
        assert_eq!(
            start.http_get.as_ref().unwrap().port,
            IntOrString::Int(8080)
        );
        assert_eq!(start.failure_threshold, Some(30));
    }

    #[test]
    fn unknown_fields_are_reported_with_paths() {
        let d = yaml(
            "\
apiVersion: v1
kind: Pod
metadata:
  name: x
  generateName: x-
  finalizers: [a/b]
spec:
  affinity: {}
  securityContext:
    seccompProfile: {type: RuntimeDefault}
  containers:
  - name: a
    image: busybox
    lifecycle:
      preStop:
        exec: {command: [sleep, '5']}
      stopSignal: SIGUSR1
    securityContext:
      capabilities:
        add: [NET_ADMIN]
        bogus: 1
    livenessProbe:
      exec: {command: [\"true\"]}
      foo: 2
    resources:
      claims: []
",
        )
        .unwrap();
        assert_eq!(
            d.unknown_fields,
            [
                "metadata.finalizers",
                "metadata.generateName",
                "spec.containers[0].lifecycle.stopSignal",
                "spec.containers[0].livenessProbe.foo",
                "spec.containers[0].resources.claims",
                "spec.containers[0].securityContext.capabilities.bogus",
            ]
        );
        // status is modelled and not reported
        let d = yaml(&format!(
            "{NGINX}status:\n  phase: Running\n  podIP: 10.1.1.1\n"
        ))
        .unwrap();
        assert!(d.unknown_fields.is_empty(), "{:?}", d.unknown_fields);
        assert_eq!(d.pod.status.pod_ip.as_deref(), Some("10.1.1.1"));
    }

    #[test]
    fn unknown_fields_inside_volumes_are_reported_once() {
        let src = "\
apiVersion: v1
kind: Pod
metadata: {name: v}
spec:
  containers: [{name: a, image: b}]
  volumes:
  - name: host
    hostPath: {path: /srv, bogus: 1}
  - name: scratch
    emptyDir: {medium: Memory, sizeLimt: 1Gi}
  - name: cfg
    configMap: {name: c, whatever: 1}
  - name: odd
    notAVolumeType: {}
";
        let d = yaml(src).unwrap();
        assert_eq!(
            d.unknown_fields,
            [
                "spec.volumes[0].hostPath.bogus",
                "spec.volumes[1].emptyDir.sizeLimt"
            ]
        );
        let v = &d.pod.spec.volumes;
        assert_eq!(v[0].host_path.as_ref().unwrap().path, "/srv");
        assert_eq!(
            v[1].empty_dir.as_ref().unwrap().medium.as_deref(),
            Some("Memory")
        );
        // other volume kinds (and unrecognised keys) are kept whole for validation
        assert_eq!(v[2].other.keys().collect::<Vec<_>>(), ["configMap"]);
        assert_eq!(v[2].other["configMap"]["whatever"], 1);
        assert_eq!(v[3].other.keys().collect::<Vec<_>>(), ["notAVolumeType"]);

        // the same through JSON
        let j = serde_json::to_string(&serde_json::json!({
            "apiVersion": "v1", "kind": "Pod", "metadata": {"name": "v"},
            "spec": {"containers": [{"name": "a", "image": "b"}],
                     "volumes": [{"name": "host", "hostPath": {"path": "/srv", "bogus": 1}},
                                 {"name": "c", "secret": {"secretName": "s"}}]}
        }))
        .unwrap();
        let d = json(&j).unwrap();
        assert_eq!(d.unknown_fields, ["spec.volumes[0].hostPath.bogus"]);
        assert!(d.pod.spec.volumes[1].other.contains_key("secret"));
    }

    #[test]
    fn errors_inside_volumes_keep_their_path() {
        let (path, msg, line, col) = invalid_parts(
            yaml("apiVersion: v1\nkind: Pod\nspec:\n  volumes:\n  - name: a\n    hostPath:\n      path: [1]\n")
                .unwrap_err(),
        );
        assert_eq!(path, "spec.volumes[0].hostPath.path");
        assert!(
            msg.starts_with("invalid type: sequence, expected a string"),
            "{msg}"
        );
        assert_eq!((line, col), (Some(7), Some(13)));

        let (path, msg, ..) = invalid_parts(
            yaml("apiVersion: v1\nkind: Pod\nspec:\n  volumes:\n  - name: a\n    emptyDir: {sizeLimit: 1XB}\n")
                .unwrap_err(),
        );
        assert_eq!(path, "spec.volumes[0].emptyDir.sizeLimit");
        assert!(msg.contains("unknown suffix \"XB\""), "{msg}");
    }

    #[test]
    fn type_errors_carry_path_and_location() {
        let src = "\
apiVersion: v1
kind: Pod
metadata:
  name: x
spec:
  containers:
  - name: a
    image: b
  - name: c
    image: d
    ports:
    - containerPort: eighty
";
        let e = yaml(src).unwrap_err();
        assert_eq!(
            e.to_string(),
            "spec.containers[1].ports[0].containerPort: invalid type: string \"eighty\", expected i32 at line 12 column 22"
        );
        let (path, _, line, col) = invalid_parts(e);
        assert_eq!(path, "spec.containers[1].ports[0].containerPort");
        assert_eq!((line, col), (Some(12), Some(22)));

        let e =
            json(r#"{"apiVersion":"v1","kind":"Pod","spec":{"hostNetwork":"yes"}}"#).unwrap_err();
        let (path, msg, line, col) = invalid_parts(e);
        assert_eq!(path, "spec.hostNetwork");
        assert_eq!(msg, "invalid type: string \"yes\", expected a boolean");
        assert_eq!((line, col), (Some(1), Some(59)));

        let (path, msg, ..) = invalid_parts(
            yaml("apiVersion: v1\nkind: Pod\nspec:\n  restartPolicy: Sometimes\n").unwrap_err(),
        );
        assert_eq!(path, "spec.restartPolicy");
        assert!(msg.starts_with("unknown variant `Sometimes`"), "{msg}");

        let (path, msg, ..) = invalid_parts(
            yaml("apiVersion: v1\nkind: Pod\nspec:\n  containers:\n  - name: a\n    resources:\n      limits:\n        memory: 12Mb\n")
                .unwrap_err(),
        );
        assert_eq!(path, "spec.containers[0].resources.limits.memory");
        assert!(msg.contains("unknown suffix \"Mb\""), "{msg}");

        let (path, ..) = invalid_parts(
            yaml("apiVersion: v1\nkind: Pod\nspec:\n  securityContext:\n    runAsUser: root\n")
                .unwrap_err(),
        );
        assert_eq!(path, "spec.securityContext.runAsUser");
    }

    #[test]
    fn syntax_errors() {
        let (path, msg, line, col) =
            invalid_parts(yaml("apiVersion: v1\nkind: Pod\nspec: [1\n").unwrap_err());
        // the path is where the parser was when it gave up
        assert_eq!(path, "spec");
        assert!(msg.starts_with("did not find expected ',' or ']'"), "{msg}");
        assert!(!msg.contains("at line 4"), "{msg}");
        assert_eq!(line, Some(4));
        assert!(col.is_some());

        let (path, msg, line, _) = invalid_parts(json("{\"apiVersion\": \"v1\",\n").unwrap_err());
        assert_eq!(path, "");
        assert_eq!(msg, "EOF while parsing a value");
        assert_eq!(normalize_path("spec.?".into()), "spec");
        assert_eq!(normalize_path(".".into()), "");
        assert_eq!(normalize_path("a.b[0].c".into()), "a.b[0].c");
        assert_eq!(line, Some(2));

        let (_, msg, ..) =
            invalid_parts(json(r#"{"apiVersion":"v1","kind":"Pod"}{}"#).unwrap_err());
        assert_eq!(msg, "trailing characters");

        // an error in a later document is reported, and iteration stops there
        let (_, msg, ..) = invalid_parts(yaml(&format!("{NGINX}---\na: *nope\n")).unwrap_err());
        assert_eq!(msg, "unknown anchor");
        let (_, msg, ..) = invalid_parts(yaml("a: *nope\n---\nb: 1\n").unwrap_err());
        assert_eq!(msg, "unknown anchor");

        let (path, msg, ..) = invalid_parts(yaml("- apiVersion: v1\n").unwrap_err());
        assert_eq!(path, "");
        assert!(
            msg.starts_with("invalid type: sequence, expected struct Pod"),
            "{msg}"
        );
        let (_, msg, ..) = invalid_parts(json("\"Pod\"").unwrap_err());
        assert!(msg.starts_with("invalid type: string \"Pod\""), "{msg}");
        let (path, msg, ..) = invalid_parts(yaml("apiVersion: v1\nkind: [Pod]\n").unwrap_err());
        assert_eq!(path, "kind");
        assert_eq!(msg, "invalid type: sequence, expected a string");
        let (path, ..) = invalid_parts(json(r#"{"apiVersion": 1}"#).unwrap_err());
        assert_eq!(path, "apiVersion");
    }

    #[test]
    fn values_decode_as_upstream_decodes_them() {
        // A null field is its default, as when absent.
        let d = yaml("apiVersion: v1\nkind: Pod\nmetadata:\n  name: x\n  labels:\nspec:\n  securityContext:\n  containers:\n  - name: a\n    image: b\n    env:\n    resources:\n").unwrap();
        assert!(d.pod.metadata.labels.is_empty());
        assert!(d.pod.spec.containers[0].env.is_empty());
        assert!(d.unknown_fields.is_empty(), "{:?}", d.unknown_fields);
        // ... and the document keeps it, as written.
        assert!(d.document["metadata"]["labels"].is_null());

        // An unquoted number or boolean is no string: upstream's YAML-to-JSON decoding refuses
        // it too. The error names the field and where it is.
        let e = yaml("apiVersion: v1\nkind: Pod\nspec:\n  containers:\n  - name: a\n    image: b\n    args: [sleep, 3600]\n").unwrap_err();
        assert_eq!(
            e.to_string(),
            "spec.containers[0].args[1]: invalid type: integer `3600`, expected a string at line 7 column 19"
        );
        let e = json(
            r#"{"apiVersion":"v1","kind":"Pod","spec":{"containers":[{"name":"a","image":true}]}}"#,
        )
        .unwrap_err();
        assert_eq!(
            e.to_string(),
            "spec.containers[0].image: invalid type: boolean `true`, expected a string at line 1 column 78"
        );

        // A key given twice is refused, in YAML and JSON alike; in the kubelet one silently wins.
        let e = yaml("apiVersion: v1\nkind: Pod\nspec:\n  containers:\n  - name: a\n    image: b\n    image: c\n").unwrap_err();
        let (path, msg, line, _) = invalid_parts(e);
        assert_eq!(
            (path.as_str(), msg.as_str()),
            ("spec.containers[0]", "duplicate key `image`")
        );
        assert_eq!(line, Some(5));
        let e = json(r#"{"apiVersion":"v1","kind":"Pod","kind":"Pod"}"#).unwrap_err();
        assert_eq!(invalid_parts(e).1, "duplicate key `kind`");
    }

    #[test]
    fn empty_documents() {
        for s in [
            "",
            "\n\n",
            "# just a comment\n",
            "---\n",
            "---\n...\n",
            "~\n",
            "null\n",
            "---\n---\n",
        ] {
            assert_eq!(yaml(s).unwrap_err(), DecodeError::Empty, "{s:?}");
        }
        for s in ["", "  \n", "null", "\u{feff}"] {
            assert_eq!(json(s).unwrap_err(), DecodeError::Empty, "{s:?}");
        }
        let (_, msg, ..) = invalid_parts(json("null x").unwrap_err());
        assert_eq!(msg, "trailing characters");
        assert_eq!(DecodeError::Empty.to_string(), "manifest is empty");
    }

    #[test]
    fn one_document_only() {
        let e = yaml(&format!("{NGINX}---\n{NGINX}")).unwrap_err();
        assert_eq!(e, DecodeError::MultipleDocuments(2));
        assert_eq!(
            e.to_string(),
            "manifest holds 2 yaml documents; put exactly one pod in each file"
        );
        let e = yaml(&format!("{NGINX}---\nkind: Service\n---\n{NGINX}")).unwrap_err();
        assert_eq!(e, DecodeError::MultipleDocuments(3));
        // leading/trailing separators and empty documents are fine
        assert!(yaml(&format!("---\n{NGINX}---\n")).is_ok());
        assert!(yaml(&format!("---\n---\n{NGINX}...\n")).is_ok());
        assert_eq!(
            yaml(&format!("---\n{NGINX}")).unwrap().pod.metadata.name,
            "nginx"
        );
    }

    #[test]
    fn wrong_kind_is_named() {
        let e = yaml(
            "apiVersion: apps/v1\nkind: Deployment\nmetadata:\n  name: web\nspec:\n  replicas: 3\n  template: {}\n",
        )
        .unwrap_err();
        assert_eq!(
            e,
            DecodeError::NotPod {
                api_version: Some("apps/v1".into()),
                kind: Some("Deployment".into())
            }
        );
        assert_eq!(
            e.to_string(),
            "manifest is a Deployment (apiVersion apps/v1); only apiVersion v1, kind Pod is accepted"
        );
        let e = yaml("apiVersion: networking.k8s.io/v1\nkind: Ingress\n").unwrap_err();
        assert_eq!(
            e.to_string(),
            "manifest is an Ingress (apiVersion networking.k8s.io/v1); only apiVersion v1, kind Pod is accepted"
        );
        let e = yaml("apiVersion: v2\nkind: Pod\n").unwrap_err();
        assert_eq!(
            e.to_string(),
            "manifest is a Pod (apiVersion v2); only apiVersion v1, kind Pod is accepted"
        );
        let e = yaml("kind: Pod\nmetadata: {name: a}\n").unwrap_err();
        assert_eq!(
            e.to_string(),
            "manifest is a Pod (no apiVersion); only apiVersion v1, kind Pod is accepted"
        );
        let e = json(r#"{"apiVersion":"v1","metadata":{"name":"a"}}"#).unwrap_err();
        assert_eq!(
            e.to_string(),
            "manifest has no kind (apiVersion v1); only apiVersion v1, kind Pod is accepted"
        );
        // kind is checked before the body, so a Deployment's spec does not
        // produce confusing type errors
        assert!(matches!(
            json(r#"{"apiVersion":"apps/v1","kind":"Deployment","spec":{"replicas":"x"}}"#),
            Err(DecodeError::NotPod { .. })
        ));
        // kind is case sensitive, as in Kubernetes
        assert!(matches!(
            yaml("apiVersion: v1\nkind: pod\n"),
            Err(DecodeError::NotPod { .. })
        ));
    }

    #[test]
    fn input_beyond_the_limits_is_refused_before_parsing() {
        let deep = format!("{NGINX}x: {}{}\n", "[".repeat(100_000), "]".repeat(100_000));
        let e = yaml(&deep).unwrap_err();
        assert!(matches!(
            e,
            DecodeError::Limit(LimitError::TooDeep { limit: 64, .. })
        ));
        assert_eq!(
            e.to_string(),
            "refused: nested deeper than the limit of 64 levels at line 11 column 67"
        );
        let deep = format!("{}{}", "[".repeat(100), "]".repeat(100));
        assert!(matches!(json(&deep), Err(DecodeError::Limit(_))));
        let e = decode_pod(b"apiVersion: v1\nkind: \xffPod\n", Format::Yaml).unwrap_err();
        assert_eq!(e.to_string(), "refused: not valid UTF-8 at line 2 column 7");
    }

    #[test]
    fn the_document_is_the_pods_own() {
        let d = yaml(&format!("---\n---\n{NGINX}---\n")).unwrap();
        assert_eq!(d.document["metadata"]["name"], "nginx");
        assert_eq!(
            d.document["spec"]["containers"][0]["ports"][0]["containerPort"],
            80
        );
        let j = serde_json::to_string(&d.document).unwrap();
        assert_eq!(json(&format!("\u{feff}{j}")).unwrap().document, d.document);
    }

    #[test]
    fn format_from_extension() {
        assert_eq!(Format::from_extension("yaml"), Some(Format::Yaml));
        assert_eq!(Format::from_extension("YML"), Some(Format::Yaml));
        assert_eq!(Format::from_extension("json"), Some(Format::Json));
        assert_eq!(Format::from_extension("txt"), None);
        assert_eq!(Format::Json.to_string(), "json");
    }

    #[test]
    fn defaults_apply_to_missing_fields() {
        let d = yaml("apiVersion: v1\nkind: Pod\n").unwrap();
        assert_eq!(d.pod.metadata.name, "");
        assert!(d.pod.spec.containers.is_empty());
        assert!(!d.pod.spec.host_network);
        // explicit nulls mean "unset"
        let d = yaml("apiVersion: v1\nkind: Pod\nspec:\n  nodeName: ~\n  securityContext: null\n")
            .unwrap();
        assert_eq!(d.pod.spec.node_name, None);
        assert_eq!(d.pod.spec.security_context, None);
    }
}
