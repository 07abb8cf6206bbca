//! The settings read and written by walking `flags::SETTINGS`: the flags of a run, the
//! `KubeletConfiguration` file (a serde visitor that reads each row's field as its type), the
//! checks of settings together, the flags' part of `picolet --help`, and `/configz`. Flags
//! override the file.

use std::collections::BTreeMap;
use std::fmt;
use std::path::{Path, PathBuf};

use serde::de::{self, DeserializeSeed, IgnoredAny, MapAccess, Visitor};
use serde::{Deserialize, Deserializer};

use super::flags::{Field, SETTINGS, SWITCH, Setting, Target};
use super::options::{Options, OptionsError, bad, validate_image_gc};
use crate::api::parse_duration;
use crate::limits::{self, Limits, Syntax};

/// What the flags ask for (the subcommands are told apart before, in `cli`).
#[derive(Debug, Clone, PartialEq)]
pub enum Parsed {
    Run(Box<Options>),
    Help,
    Version,
}

const CONFIG_API_VERSION: &str = "kubelet.config.k8s.io/v1beta1";

/// Reads a KubeletConfiguration file into `o`. The file must be a regular file within
/// [`Limits::CONFIG`].
pub fn load_config(path: &Path, o: &mut Options) -> Result<(), OptionsError> {
    let mut ev = crate::eviction::Settings::default();
    load_config_eviction(path, o, &mut ev)?;
    o.eviction = ev.build().map_err(|reason| OptionsError::Config {
        path: path.to_owned(),
        reason,
    })?;
    Ok(())
}

fn load_config_eviction(
    path: &Path,
    o: &mut Options,
    ev: &mut crate::eviction::Settings,
) -> Result<(), OptionsError> {
    let bytes = limits::read_file(path, &Limits::CONFIG).map_err(|e| OptionsError::Config {
        path: path.to_owned(),
        reason: e.to_string(),
    })?;
    parse_config_into(&bytes, path, o, ev)
}

/// Applies a KubeletConfiguration document to `o`; `path` names it in errors.
pub fn parse_config(bytes: &[u8], path: &Path, o: &mut Options) -> Result<(), OptionsError> {
    let mut ev = crate::eviction::Settings::default();
    parse_config_into(bytes, path, o, &mut ev)?;
    o.eviction = ev.build().map_err(|reason| OptionsError::Config {
        path: path.to_owned(),
        reason,
    })?;
    Ok(())
}

fn parse_config_into(
    bytes: &[u8],
    path: &Path,
    o: &mut Options,
    ev: &mut crate::eviction::Settings,
) -> Result<(), OptionsError> {
    let err = |reason: String| OptionsError::Config {
        path: path.to_owned(),
        reason,
    };
    limits::check(bytes, Syntax::Yaml, &Limits::CONFIG).map_err(|e| err(e.to_string()))?;
    let mut unknown = Vec::new();
    // The document read whole first, then field by field from that value.
    let mut docs = yaml_serde::Deserializer::from_slice(bytes);
    let first = docs
        .next()
        .ok_or_else(|| err("the file holds no YAML document".to_owned()))?;
    let whole = crate::api::decode::yaml_json(first).map_err(err)?;
    if docs.next().is_some() {
        return Err(err("more than one YAML document".to_owned()));
    }
    let mut doc: Document =
        serde_path_to_error::deserialize(serde_ignored::Deserializer::new(whole, &mut |p| {
            unknown.push(p.to_string())
        }))
        .map_err(|e| {
            let at = e.path().to_string();
            err(if at == "." {
                e.inner().to_string()
            } else {
                format!("{at}: {}", e.inner())
            })
        })?;
    if doc.kind != "KubeletConfiguration" {
        return Err(err(format!(
            "kind: expected \"KubeletConfiguration\", got {:?}",
            doc.kind
        )));
    }
    if doc.api_version != CONFIG_API_VERSION {
        return Err(err(format!(
            "apiVersion: expected {CONFIG_API_VERSION:?}, got {:?}",
            doc.api_version
        )));
    }
    // In the table's order, whatever the file's.
    doc.values.sort_by_key(|(i, _)| *i);
    for (i, value) in doc.values {
        let s = &SETTINGS[i];
        let mut t = Target {
            o,
            ev,
            origin: s.field,
        };
        read(&mut t, s.read, value).map_err(|r| err(format!("{}: {r}", s.field)))?;
    }
    o.shutdown.validate().map_err(err)?;
    const MAX_WARNINGS: usize = 20;
    let more = unknown.len().saturating_sub(MAX_WARNINGS);
    o.config_warnings = unknown
        .into_iter()
        .take(MAX_WARNINGS)
        .map(|f| format!("{}: field {f:?} is not used by picolet", path.display()))
        .collect();
    if more > 0 {
        o.config_warnings.push(format!(
            "{}: {more} more fields are not used by picolet",
            path.display()
        ));
    }
    Ok(())
}

/// A field's value as the file gives it, of the type its [`Field`] names.
enum Value {
    Text(String),
    Bool(bool),
    U16(u16),
    U32(u32),
    I32(i32),
    I64(i64),
    Map(BTreeMap<String, String>),
    List(Vec<String>),
    Priorities(Vec<crate::nodeshutdown::ByPriority>),
}

/// Applies a field's value.
fn read(t: &mut Target, field: Field, value: Value) -> Result<(), String> {
    match (field, value) {
        (Field::Text(f), Value::Text(v)) => f(t, v),
        (Field::Duration(f), Value::Text(s)) => f(
            t,
            parse_duration(&s).map_err(|r| format!("invalid duration {s:?}: {r}"))?,
        ),
        (Field::Bool(f), Value::Bool(v)) => f(t, v),
        (Field::U16(f), Value::U16(v)) => f(t, v),
        (Field::U32(f), Value::U32(v)) => f(t, v),
        (Field::I32(f), Value::I32(v)) => f(t, v),
        (Field::I64(f), Value::I64(v)) => f(t, v),
        (Field::Map(f), Value::Map(v)) => f(t, v),
        (Field::List(f), Value::List(v)) => f(t, v),
        (Field::Priorities(f), Value::Priorities(v)) => f(t, v),
        _ => unreachable!("a field's value is read as its type"),
    }
}

/// A `KubeletConfiguration` document: its kind, and the values of the table's fields, by row.
#[derive(Default)]
struct Document {
    api_version: String,
    kind: String,
    values: Vec<(usize, Value)>,
}

impl<'de> Deserialize<'de> for Document {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        let mut doc = Document::default();
        d.deserialize_struct(
            section_name(""),
            &[],
            Section {
                prefix: "",
                doc: &mut doc,
            },
        )?;
        Ok(doc)
    }
}

/// The name a section's type error gives (`expected struct ConfigAuthentication`), as it always
/// has.
fn section_name(prefix: &str) -> &'static str {
    match prefix {
        "" => "KubeletConfiguration",
        "authentication." => "ConfigAuthentication",
        "authentication.x509." => "ConfigX509",
        "authentication.webhook." => "ConfigWebhookAuthn",
        "authentication.anonymous." => "ConfigAnonymous",
        "authorization." => "ConfigAuthorization",
        "authorization.webhook." => "ConfigWebhookAuthz",
        _ => "section",
    }
}

/// The fields of a mapping whose dotted path is `prefix` (empty, or ending in a dot): each a
/// row's field, a section holding some, or unknown (then ignored, and reported).
struct Section<'a> {
    prefix: &'static str,
    doc: &'a mut Document,
}

impl<'de> Visitor<'de> for Section<'_> {
    type Value = ();

    fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
        write!(f, "struct {}", section_name(self.prefix))
    }

    fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<(), A::Error> {
        let mut seen: Vec<&'static str> = Vec::new();
        let mut once = |name: &'static str| {
            if seen.contains(&name) {
                return Err(de::Error::duplicate_field(name));
            }
            seen.push(name);
            Ok(())
        };
        while let Some(Key(key)) = map.next_key()? {
            let path = format!("{}{key}", self.prefix);
            let at = self.prefix.len();
            if self.prefix.is_empty() && (key == "apiVersion" || key == "kind") {
                let (name, slot) = if key == "kind" {
                    ("kind", &mut self.doc.kind)
                } else {
                    ("apiVersion", &mut self.doc.api_version)
                };
                once(name)?;
                *slot = map.next_value()?;
            } else if let Some(i) = SETTINGS.iter().position(|s| s.field == path) {
                once(&SETTINGS[i].field[at..])?;
                let value = match SETTINGS[i].read {
                    Field::FlagOnly => None,
                    Field::Text(_) | Field::Duration(_) => {
                        map.next_value::<Option<_>>()?.map(Value::Text)
                    }
                    Field::Bool(_) => map.next_value::<Option<_>>()?.map(Value::Bool),
                    Field::U16(_) => map.next_value::<Option<_>>()?.map(Value::U16),
                    Field::U32(_) => map.next_value::<Option<_>>()?.map(Value::U32),
                    Field::I32(_) => map.next_value::<Option<_>>()?.map(Value::I32),
                    Field::I64(_) => map.next_value::<Option<_>>()?.map(Value::I64),
                    Field::Map(_) => map.next_value::<Option<_>>()?.map(Value::Map),
                    Field::List(_) => map.next_value::<Option<_>>()?.map(Value::List),
                    Field::Priorities(_) => map.next_value::<Option<_>>()?.map(Value::Priorities),
                };
                self.doc.values.extend(value.map(|v| (i, v)));
            } else if let Some(s) = SETTINGS.iter().find(|s| {
                s.field.len() > path.len()
                    && s.field.starts_with(&path)
                    && s.field.as_bytes()[path.len()] == b'.'
            }) {
                once(&s.field[at..path.len()])?;
                map.next_value_seed(OptionalSection {
                    prefix: &s.field[..=path.len()],
                    doc: &mut *self.doc,
                })?;
            } else {
                map.next_value::<IgnoredAny>()?;
            }
        }
        Ok(())
    }
}

/// A section, or null.
struct OptionalSection<'a> {
    prefix: &'static str,
    doc: &'a mut Document,
}

impl<'de> DeserializeSeed<'de> for OptionalSection<'_> {
    type Value = ();

    fn deserialize<D: Deserializer<'de>>(self, d: D) -> Result<(), D::Error> {
        d.deserialize_option(self)
    }
}

impl<'de> Visitor<'de> for OptionalSection<'_> {
    type Value = ();

    fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
        f.write_str("option")
    }

    fn visit_none<E: de::Error>(self) -> Result<(), E> {
        Ok(())
    }

    fn visit_unit<E: de::Error>(self) -> Result<(), E> {
        Ok(())
    }

    fn visit_some<D: Deserializer<'de>>(self, d: D) -> Result<(), D::Error> {
        let name = section_name(self.prefix);
        d.deserialize_struct(
            name,
            &[],
            Section {
                prefix: self.prefix,
                doc: self.doc,
            },
        )
    }
}

/// A mapping's key.
struct Key(String);

impl<'de> Deserialize<'de> for Key {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        d.deserialize_identifier(KeyVisitor)
    }
}

struct KeyVisitor;

impl Visitor<'_> for KeyVisitor {
    type Value = Key;

    fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
        f.write_str("field identifier")
    }

    fn visit_str<E: de::Error>(self, v: &str) -> Result<Key, E> {
        Ok(Key(v.to_owned()))
    }

    fn visit_bytes<E: de::Error>(self, v: &[u8]) -> Result<Key, E> {
        Ok(Key(String::from_utf8_lossy(v).into_owned()))
    }

    fn visit_u64<E: de::Error>(self, v: u64) -> Result<Key, E> {
        Ok(Key(v.to_string()))
    }
}

/// Parses the flags of a run (without the program name): the config file first, then every
/// other flag in the order given.
pub fn parse(args: &[String]) -> Result<Parsed, OptionsError> {
    let mut pairs: Vec<(&'static Setting, String)> = Vec::new();
    let mut i = 0;
    while i < args.len() {
        let a = &args[i];
        i += 1;
        match a.as_str() {
            "-h" | "--help" => return Ok(Parsed::Help),
            "--version" => return Ok(Parsed::Version),
            _ => {}
        }
        let Some(stripped) = a.strip_prefix("--").or_else(|| a.strip_prefix('-')) else {
            return Err(OptionsError::Unexpected(a.clone()));
        };
        let name = stripped.split_once('=').map_or(stripped, |(n, _)| n);
        let Some(s) = SETTINGS
            .iter()
            .find(|s| !s.flag.is_empty() && s.flag == name)
        else {
            return Err(OptionsError::UnknownFlag(format!("--{name}")));
        };
        let value = match stripped.split_once('=') {
            Some((_, v)) => v.to_owned(),
            None if s.arg == SWITCH => "true".to_owned(),
            None => {
                let v = args
                    .get(i)
                    .cloned()
                    .ok_or_else(|| OptionsError::MissingValue(a.clone()))?;
                i += 1;
                v
            }
        };
        pairs.push((s, value));
    }
    let mut o = Options::default();
    let mut ev = crate::eviction::Settings::default();
    let cfg_path = pairs
        .iter()
        .find(|(s, _)| s.flag == "config")
        .map(|(_, p)| PathBuf::from(p));
    if let Some(path) = &cfg_path {
        load_config_eviction(path, &mut o, &mut ev)?;
    }
    for (s, v) in &pairs {
        let flag = dashed(s.flag);
        let mut t = Target {
            o: &mut o,
            ev: &mut ev,
            origin: &flag,
        };
        (s.parse)(&mut t, v).map_err(|r| bad(&flag, v, r))?;
    }
    check(o, ev, cfg_path.as_deref()).map(|o| Parsed::Run(Box::new(o)))
}

/// `-v` for a one-letter flag, `--name` otherwise.
fn dashed(flag: &str) -> String {
    if flag.len() == 1 {
        format!("-{flag}")
    } else {
        format!("--{flag}")
    }
}

/// The checks of settings together, once every source is read.
fn check(
    mut o: Options,
    ev: crate::eviction::Settings,
    cfg_path: Option<&Path>,
) -> Result<Options, OptionsError> {
    o.eviction = ev.build().map_err(|reason| {
        // A setting from the file (its field name starts the message) is named with the
        // file; a flag names itself.
        match (cfg_path, !reason.starts_with("--")) {
            (Some(path), true) => OptionsError::Config {
                path: path.to_owned(),
                reason,
            },
            _ => OptionsError::Invalid(reason),
        }
    })?;
    if o.sync_frequency.is_zero() {
        return Err(bad("--sync-frequency", "0", "must be positive"));
    }
    if o.file_check_frequency.is_zero() {
        return Err(bad("--file-check-frequency", "0", "must be positive"));
    }
    validate_image_gc(&o)?;
    {
        use crate::kuberuntime::pullmanager::VerificationPolicy;
        let v = &o.image_pull_verification;
        if !v.allowlist.is_empty() && v.policy != VerificationPolicy::NeverVerifyAllowlistedImages {
            let reason = format!(
                "preloadedImagesVerificationAllowlist {:?}: can only be set when \
                 imagePullCredentialsVerificationPolicy is NeverVerifyAllowlistedImages, not {}",
                v.allowlist,
                v.policy.as_str()
            );
            return Err(match cfg_path {
                Some(path) => OptionsError::Config {
                    path: path.to_owned(),
                    reason,
                },
                None => OptionsError::Invalid(reason),
            });
        }
    }
    if o.serving.tls_cert_file.is_some() != o.serving.tls_private_key_file.is_some() {
        return Err(OptionsError::Invalid(
            "--tls-cert-file and --tls-private-key-file (tlsCertFile, tlsPrivateKeyFile) go \
             together: set both or neither"
                .into(),
        ));
    }
    if o.bootstrap_kubeconfig.is_some() && o.kubeconfig.is_none() {
        return Err(OptionsError::Invalid(
            "--bootstrap-kubeconfig needs --kubeconfig: the path the node's own kubeconfig is              written to"
                .into(),
        ));
    }
    if o.serving.server_tls_bootstrap && o.serving.tls_cert_file.is_some() {
        return Err(OptionsError::Invalid(
            "serverTLSBootstrap and --tls-cert-file (tlsCertFile) exclude each other: the              serving certificate comes either from the cluster or from the file"
                .into(),
        ));
    }
    // "none" alone means no enforcement, as an empty list.
    o.cgroups.enforce_node_allocatable.retain(|e| e != "none");
    o.cgroups.validate().map_err(OptionsError::Invalid)?;
    crate::cri::parse_endpoint(&o.container_runtime_endpoint).map_err(|e| {
        bad(
            "--container-runtime-endpoint",
            &o.container_runtime_endpoint,
            e,
        )
    })?;
    Ok(o)
}

/// The flags' part of `picolet --help`: a line for each flag of the table (the name, the
/// value's placeholder, the help from column 37), with the help's further lines below it.
pub fn flags_usage() -> String {
    let mut out = String::new();
    for s in SETTINGS
        .iter()
        .filter(|s| !s.flag.is_empty() && !s.help.is_empty())
    {
        let name = if s.flag.len() == 1 {
            format!("-{0}, --{0}", s.flag)
        } else {
            dashed(s.flag)
        };
        let left = if s.arg == SWITCH {
            format!("{name}{SWITCH}")
        } else {
            format!("{name} {}", s.arg)
        };
        let mut lines = s.help.split('\n');
        let first = lines.next().unwrap_or_default();
        if left.len() < 35 {
            out.push_str(&format!("  {left:<35}{first}\n"));
        } else {
            out.push_str(&format!("  {left}  {first}\n"));
        }
        for line in lines {
            out.push_str(&format!("{:37}{line}\n", ""));
        }
    }
    out
}

/// `/configz`: the settings in force, with `KubeletConfiguration`'s field names, for the node
/// API on `port`.
pub fn configz(o: &Options, port: u16) -> serde_json::Value {
    let mut config = serde_json::json!({"enableServer": true});
    for s in SETTINGS {
        let Some(value) = s.configz else { continue };
        let mut at = &mut config;
        let mut names = s.field.split('.').peekable();
        while let Some(name) = names.next() {
            let map = at.as_object_mut().expect("a section is an object");
            if names.peek().is_none() {
                map.insert(name.to_owned(), value(o, port));
                break;
            }
            at = map.entry(name).or_insert_with(|| serde_json::json!({}));
        }
    }
    serde_json::json!({ "kubeletconfig": config })
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use super::*;
    use crate::cli::options::Tunnel;

    fn args(s: &[&str]) -> Vec<String> {
        s.iter().map(|x| (*x).to_owned()).collect()
    }

    fn run(s: &[&str]) -> Options {
        match parse(&args(s)).unwrap() {
            Parsed::Run(o) => *o,
            c => panic!("{c:?}"),
        }
    }

    #[test]
    fn konnectivity_agent_flags() {
        assert_eq!(run(&[]).tunnel, Tunnel::default());
        let t = run(&[
            "--proxy-server-host=proxy.example",
            "--proxy-server-port=8132",
            "--ca-cert=/etc/k/ca.crt",
            "--agent-cert=/etc/k/a.crt",
            "--agent-key=/etc/k/a.key",
            "--service-account-token-path=/var/run/t",
            "--agent-id=edge-7",
            "--agent-identifiers=host=edge-7",
            "--keepalive-time=30s",
            "--proxy-allowed-destinations=10.0.0.5:9100, *",
        ])
        .tunnel;
        assert_eq!(t.host, "proxy.example");
        assert_eq!(t.port, 8132);
        assert_eq!(t.ca_cert, Some(PathBuf::from("/etc/k/ca.crt")));
        assert_eq!(t.agent_cert, Some(PathBuf::from("/etc/k/a.crt")));
        assert_eq!(t.agent_key, Some(PathBuf::from("/etc/k/a.key")));
        assert_eq!(t.token_path, Some(PathBuf::from("/var/run/t")));
        assert_eq!(t.agent_id.as_deref(), Some("edge-7"));
        assert_eq!(t.agent_identifiers.as_deref(), Some("host=edge-7"));
        assert_eq!(t.keepalive, Duration::from_secs(30));
        assert_eq!(t.allowed, ["10.0.0.5:9100", "*"]);
        let e = parse(&args(&["--proxy-server-port=99999"]))
            .unwrap_err()
            .to_string();
        assert!(
            e.contains("--proxy-server-port") && e.contains("99999"),
            "{e}"
        );
        let e = parse(&args(&["--keepalive-time=10ms"]))
            .unwrap_err()
            .to_string();
        assert!(
            e.contains("--keepalive-time") && e.contains("at least 1s"),
            "{e}"
        );
    }

    #[test]
    fn bootstrap_and_rotation_flags_and_fields() {
        let o = run(&["--kubeconfig", "/k"]);
        assert!(!o.rotation(), "off without a bootstrap kubeconfig");
        let o = run(&["--kubeconfig", "/k", "--bootstrap-kubeconfig", "/b"]);
        assert_eq!(o.bootstrap_kubeconfig.as_deref(), Some(Path::new("/b")));
        assert!(o.rotation(), "on by default when bootstrapping");
        let o = run(&[
            "--kubeconfig",
            "/k",
            "--bootstrap-kubeconfig",
            "/b",
            "--rotate-certificates=false",
        ]);
        assert!(!o.rotation());
        let o = run(&["--kubeconfig", "/k", "--rotate-certificates"]);
        assert!(o.rotation());
        let e = parse(&args(&["--bootstrap-kubeconfig", "/b"])).unwrap_err();
        assert!(e.to_string().contains("needs --kubeconfig"), "{e}");
        let mut o = Options::default();
        parse_config(
            b"apiVersion: kubelet.config.k8s.io/v1beta1\nkind: KubeletConfiguration\n\
              rotateCertificates: true\nserverTLSBootstrap: true\n",
            Path::new("/c.yaml"),
            &mut o,
        )
        .unwrap();
        assert_eq!(o.rotate_certificates, Some(true));
        assert!(o.serving.server_tls_bootstrap);
        assert!(o.config_warnings.is_empty(), "{:?}", o.config_warnings);
        let e = parse_config(
            b"apiVersion: kubelet.config.k8s.io/v1beta1\nkind: KubeletConfiguration\n\
              rotateCertificates: maybe\n",
            Path::new("/c.yaml"),
            &mut o,
        )
        .unwrap_err()
        .to_string();
        assert!(
            e.contains("/c.yaml") && e.contains("rotateCertificates"),
            "{e}"
        );
    }

    #[test]
    fn image_gc_settings_from_flags_and_file_with_upstream_defaults() {
        let o = run(&["--pod-manifest-path", "/m"]);
        let p = o.image_gc_policy();
        assert_eq!(
            (p.high_threshold_percent, p.low_threshold_percent),
            (85, 80)
        );
        assert_eq!(p.min_age, Duration::from_secs(120));
        assert_eq!(p.max_age, Duration::ZERO);
        assert_eq!(o.pod_infra_container_image, None);
        let o = run(&[
            "--image-gc-high-threshold=70",
            "--image-gc-low-threshold",
            "60",
            "--minimum-image-ttl-duration=5m",
            "--pod-infra-container-image=registry.k8s.io/pause:3.10",
        ]);
        assert_eq!(
            (
                o.image_gc_high_threshold_percent,
                o.image_gc_low_threshold_percent
            ),
            (70, 60)
        );
        assert_eq!(o.image_minimum_gc_age, Duration::from_secs(300));
        assert_eq!(
            o.pod_infra_container_image.as_deref(),
            Some("registry.k8s.io/pause:3.10")
        );
        let cfg = write_cfg(
            "gc.yaml",
            "apiVersion: kubelet.config.k8s.io/v1beta1\nkind: KubeletConfiguration\n\
             imageGCHighThresholdPercent: 1\nimageGCLowThresholdPercent: 0\n\
             imageMinimumGCAge: 0s\nimageMaximumGCAge: 168h\n",
        );
        let o = run(&["--config", cfg.to_str().unwrap()]);
        let p = o.image_gc_policy();
        assert_eq!((p.high_threshold_percent, p.low_threshold_percent), (1, 0));
        assert_eq!(p.min_age, Duration::ZERO);
        assert_eq!(p.max_age, Duration::from_secs(168 * 3600));
        assert!(o.config_warnings.is_empty(), "{:?}", o.config_warnings);
        // The flag wins over the file.
        let o = run(&[
            "--config",
            cfg.to_str().unwrap(),
            "--image-gc-low-threshold=0",
            "--image-gc-high-threshold=50",
        ]);
        assert_eq!(o.image_gc_high_threshold_percent, 50);
        std::fs::remove_file(&cfg).unwrap();
    }

    #[test]
    fn bad_image_gc_settings_name_the_field_and_the_value() {
        let err = |a: &[&str]| parse(&args(a)).unwrap_err().to_string();
        assert_eq!(
            err(&["--image-gc-high-threshold=101"]),
            "invalid configuration: imageGCHighThresholdPercent (--image-gc-high-threshold) 101 \
             must be between 0 and 100, inclusive"
        );
        let e = err(&["--image-gc-low-threshold=-1"]);
        assert!(
            e.contains(
                "imageGCLowThresholdPercent (--image-gc-low-threshold) -1 must be between 0 and 100"
            ),
            "{e}"
        );
        assert_eq!(
            err(&["--image-gc-low-threshold=85"]),
            "invalid configuration: imageGCLowThresholdPercent (--image-gc-low-threshold) 85 \
             must be less than imageGCHighThresholdPercent (--image-gc-high-threshold) 85"
        );
        assert!(err(&["--image-gc-high-threshold=50"]).contains("80 must be less than"));
        assert_eq!(
            err(&["--image-gc-high-threshold=x"]),
            "flag --image-gc-high-threshold: invalid value \"x\": not a whole number"
        );
        let e = err(&["--minimum-image-ttl-duration=soon"]);
        assert!(
            e.starts_with("flag --minimum-image-ttl-duration: invalid value \"soon\""),
            "{e}"
        );
        let cfg = write_cfg(
            "gc-bad.yaml",
            "apiVersion: kubelet.config.k8s.io/v1beta1\nkind: KubeletConfiguration\n\
             imageMaximumGCAge: 1m\n",
        );
        assert_eq!(
            err(&["--config", cfg.to_str().unwrap()]),
            "invalid configuration: imageMaximumGCAge 1m0s must be greater than imageMinimumGCAge 2m0s"
        );
        std::fs::remove_file(&cfg).unwrap();
        let cfg = write_cfg(
            "gc-bad2.yaml",
            "apiVersion: kubelet.config.k8s.io/v1beta1\nkind: KubeletConfiguration\n\
             imageMinimumGCAge: later\n",
        );
        let e = err(&["--config", cfg.to_str().unwrap()]);
        assert!(
            e.contains("gc-bad2.yaml")
                && e.contains("imageMinimumGCAge: invalid duration \"later\""),
            "{e}"
        );
        std::fs::remove_file(&cfg).unwrap();
    }

    #[test]
    fn flags_both_forms() {
        let o = run(&[
            "--pod-manifest-path=/etc/k",
            "--hostname-override",
            "edge",
            "-v=4",
            "--node-ip",
            "10.0.0.5",
        ]);
        assert_eq!(o.pod_manifest_path, Some(PathBuf::from("/etc/k")));
        assert_eq!(o.hostname_override.as_deref(), Some("edge"));
        assert_eq!(o.verbosity, 4);
        assert_eq!(o.node_ip, Some("10.0.0.5".parse().unwrap()));
        assert_eq!(run(&["--v", "2"]).verbosity, 2);
    }

    #[test]
    fn bad_flags_are_named() {
        let e = parse(&args(&["--pod-manifest-path"]))
            .unwrap_err()
            .to_string();
        assert_eq!(e, "flag --pod-manifest-path needs a value");
        let e = parse(&args(&["--nope=1"])).unwrap_err().to_string();
        assert_eq!(e, "unknown flag \"--nope\" (see --help)");
        let e = parse(&args(&["--nope"])).unwrap_err().to_string();
        assert_eq!(e, "unknown flag \"--nope\" (see --help)");
        let e = parse(&args(&["--node-ip=300.1.1.1"]))
            .unwrap_err()
            .to_string();
        assert!(e.contains("--node-ip") && e.contains("300.1.1.1"), "{e}");
        let e = parse(&args(&["--container-runtime-endpoint=tcp://x"]))
            .unwrap_err()
            .to_string();
        assert!(e.contains("tcp://x"), "{e}");
        assert!(matches!(
            parse(&args(&["stray"])),
            Err(OptionsError::Unexpected(_))
        ));
    }

    #[test]
    fn cgroup_flags() {
        let o = run(&[]);
        assert_eq!(o.cgroups, crate::cm::CgroupConfig::default());
        assert!(o.cgroups.per_qos && o.cgroups.enforces_pods());
        let o = run(&[
            "--cgroup-driver=systemd",
            "--cgroup-root",
            "/edge.slice",
            "--kube-reserved=cpu=100m,memory=100Mi",
            "--system-reserved",
            "memory=50Mi",
            "--pod-max-pids=512",
            "--cgroups-per-qos",
        ]);
        assert_eq!(o.cgroups.driver, crate::cm::Driver::Systemd);
        assert_eq!(o.cgroups.root, "/edge.slice");
        assert_eq!(o.cgroups.reserved().memory, 150 << 20);
        assert_eq!(o.cgroups.reserved().milli_cpu, 100);
        assert_eq!(o.cgroups.pod_pids_limit, 512);
        let o = run(&["--cgroups-per-qos=false", "--enforce-node-allocatable=none"]);
        assert!(!o.cgroups.per_qos && !o.cgroups.enforces_pods());
        let e = parse(&args(&["--cgroups-per-qos=false"]))
            .unwrap_err()
            .to_string();
        assert!(e.contains("--enforce-node-allocatable"), "{e}");
        let e = parse(&args(&["--cgroup-driver=cgroupsfs"]))
            .unwrap_err()
            .to_string();
        assert!(
            e.contains("--cgroup-driver") && e.contains("cgroupsfs"),
            "{e}"
        );
        let e = parse(&args(&["--kube-reserved=gpu=1"]))
            .unwrap_err()
            .to_string();
        assert!(e.contains("--kube-reserved") && e.contains("gpu"), "{e}");
    }

    #[test]
    fn cluster_dns_from_flags_and_file() {
        let o = run(&[
            "--cluster-dns=10.96.0.10,10.96.0.11",
            "--cluster-domain=cluster.local",
        ]);
        let want: Vec<std::net::IpAddr> =
            vec!["10.96.0.10".parse().unwrap(), "10.96.0.11".parse().unwrap()];
        assert_eq!(o.cluster_dns, want);
        assert_eq!(o.cluster_domain, "cluster.local");
        let none = run(&[]);
        assert!(none.cluster_dns.is_empty() && none.cluster_domain.is_empty());
        let e = parse(&args(&["--cluster-dns=10.96.0.10,dns"]))
            .unwrap_err()
            .to_string();
        assert!(
            e.contains("--cluster-dns") && e.contains("not an IP address"),
            "{e}"
        );
        let cfg = write_cfg(
            "dns",
            "apiVersion: kubelet.config.k8s.io/v1beta1\nkind: KubeletConfiguration\n\
             clusterDNS: [10.96.0.10]\nclusterDomain: cluster.local\n",
        );
        let o = run(&["--config", cfg.to_str().unwrap()]);
        assert_eq!(o.cluster_dns, want[..1]);
        assert_eq!(o.cluster_domain, "cluster.local");
        std::fs::remove_file(&cfg).unwrap();
        let cfg = write_cfg(
            "dns-bad",
            "apiVersion: kubelet.config.k8s.io/v1beta1\nkind: KubeletConfiguration\n\
             clusterDNS: [10.96.0.10, kube-dns]\n",
        );
        let e = parse(&args(&["--config", cfg.to_str().unwrap()]))
            .unwrap_err()
            .to_string();
        assert!(
            e.contains("dns-bad") && e.contains("clusterDNS") && e.contains("\"kube-dns\""),
            "{e}"
        );
        std::fs::remove_file(&cfg).unwrap();
    }

    fn write_cfg(name: &str, body: &str) -> PathBuf {
        let p =
            std::env::temp_dir().join(format!("picolet-cfg-{name}-{}.yaml", std::process::id()));
        std::fs::write(&p, body).unwrap();
        p
    }

    #[test]
    fn config_file_and_flag_precedence() {
        let p = write_cfg(
            "ok",
            "apiVersion: kubelet.config.k8s.io/v1beta1\nkind: KubeletConfiguration\nstaticPodPath: /etc/kubernetes/manifests\nfileCheckFrequency: 5s\nsyncFrequency: 30s\ncontainerRuntimeEndpoint: unix:///run/k3s.sock\nhealthzPort: 0\ncgroupDriver: systemd\nkubeReserved:\n  cpu: 100m\n  memory: 100Mi\npodPidsLimit: 1024\nenforceNodeAllocatable: [pods]\nmaxPods: 20\nallowedUnsafeSysctls: [\"kernel.shm*\"]\nmaxOpenFiles: 1000\n",
        );
        let ps = p.display().to_string();
        let o = run(&["--config", &ps, "--file-check-frequency=7s"]);
        assert_eq!(
            o.pod_manifest_path,
            Some(PathBuf::from("/etc/kubernetes/manifests"))
        );
        assert_eq!(
            o.file_check_frequency,
            Duration::from_secs(7),
            "flags override the file"
        );
        assert_eq!(o.sync_frequency, Duration::from_secs(30));
        assert_eq!(o.container_runtime_endpoint, "unix:///run/k3s.sock");
        assert_eq!(o.healthz_port, 0);
        assert_eq!(o.config_warnings.len(), 1);
        assert!(o.config_warnings[0].contains("maxOpenFiles"));
        assert_eq!(o.max_pods, 20);
        assert_eq!(o.allowed_unsafe_sysctls, ["kernel.shm*"]);
        assert_eq!(run(&["--config", &ps, "--max-pods=300"]).max_pods, 300);
        assert_eq!(run(&[]).max_pods, 110);
        assert_eq!(
            run(&["--allowed-unsafe-sysctls=kernel.msg*,net.core.somaxconn"])
                .allowed_unsafe_sysctls,
            ["kernel.msg*", "net.core.somaxconn"]
        );
        assert_eq!(
            parse(&args(&["--allowed-unsafe-sysctls=vm.swappiness"]))
                .unwrap_err()
                .to_string(),
            bad(
                "--allowed-unsafe-sysctls",
                "vm.swappiness",
                "the sysctls \"vm.swappiness\" are not known to be namespaced"
            )
            .to_string()
        );
        assert_eq!(o.cgroups.driver, crate::cm::Driver::Systemd);
        assert_eq!(o.cgroups.kube_reserved.memory, 100 << 20);
        assert_eq!(o.cgroups.pod_pids_limit, 1024);
        std::fs::remove_file(p).unwrap();
    }

    #[test]
    fn container_log_rotation_settings() {
        assert_eq!(
            run(&[]).container_log,
            crate::logs::rotate::Policy::default()
        );
        let o = run(&[
            "--container-log-max-size=1Ki",
            "--container-log-max-files",
            "3",
        ]);
        assert_eq!(o.container_log.max_size, Some(1024));
        assert_eq!(o.container_log.max_files, 3);
        assert_eq!(
            run(&["--container-log-max-size=-1"]).container_log.max_size,
            None
        );
        assert_eq!(
            run(&["--container-log-max-size=10M"])
                .container_log
                .max_size,
            Some(10_000_000)
        );
        let e = parse(&args(&["--container-log-max-files=1"]))
            .unwrap_err()
            .to_string();
        assert_eq!(
            e,
            "flag --container-log-max-files: invalid value \"1\": must be greater than 1"
        );
        let e = parse(&args(&["--container-log-max-size=lots"]))
            .unwrap_err()
            .to_string();
        assert!(
            e.contains("--container-log-max-size") && e.contains("lots"),
            "{e}"
        );
        let p = write_cfg(
            "logs",
            "apiVersion: kubelet.config.k8s.io/v1beta1\nkind: KubeletConfiguration\ncontainerLogMaxSize: 2Mi\ncontainerLogMaxFiles: 4\n",
        );
        let ps = p.display().to_string();
        let o = run(&["--config", &ps]);
        assert_eq!(o.container_log.max_size, Some(2 * 1024 * 1024));
        assert_eq!(o.container_log.max_files, 4);
        assert!(o.config_warnings.is_empty());
        let o = run(&["--config", &ps, "--container-log-max-files=6"]);
        assert_eq!(o.container_log.max_files, 6, "flags override the file");
        std::fs::remove_file(&p).unwrap();
        let p = write_cfg(
            "logs-bad",
            "apiVersion: kubelet.config.k8s.io/v1beta1\nkind: KubeletConfiguration\ncontainerLogMaxFiles: 0\n",
        );
        let e = parse(&args(&["--config", &p.display().to_string()]))
            .unwrap_err()
            .to_string();
        assert!(
            e.contains(&p.display().to_string())
                && e.contains("containerLogMaxFiles: invalid value 0: must be greater than 1"),
            "{e}"
        );
        std::fs::remove_file(&p).unwrap();
    }

    #[test]
    fn image_pull_credentials_verification_settings() {
        use crate::kuberuntime::pullmanager::VerificationPolicy;
        let o = run(&[]);
        assert_eq!(
            o.image_pull_verification.policy,
            VerificationPolicy::NeverVerifyPreloadedImages,
            "upstream's default"
        );
        let head = "apiVersion: kubelet.config.k8s.io/v1beta1\nkind: KubeletConfiguration\n";
        let p = write_cfg(
            "pullverify",
            &format!(
                "{head}imagePullCredentialsVerificationPolicy: NeverVerifyAllowlistedImages\n\
                 preloadedImagesVerificationAllowlist: [\"registry.local/fleet/*\"]\n"
            ),
        );
        let ps = p.display().to_string();
        let o = run(&["--config", &ps]);
        assert_eq!(
            o.image_pull_verification.policy,
            VerificationPolicy::NeverVerifyAllowlistedImages
        );
        assert_eq!(
            o.image_pull_verification.allowlist,
            ["registry.local/fleet/*"]
        );
        let k = configz(&o, 10250);
        assert_eq!(
            k["kubeletconfig"]["imagePullCredentialsVerificationPolicy"],
            "NeverVerifyAllowlistedImages"
        );
        for (name, body, says) in [
            (
                "pullverify-value",
                "imagePullCredentialsVerificationPolicy: Sometimes\n",
                "imagePullCredentialsVerificationPolicy: \"Sometimes\": unknown image pull credentials verification policy",
            ),
            (
                "pullverify-pattern",
                "imagePullCredentialsVerificationPolicy: NeverVerifyAllowlistedImages\n\
                 preloadedImagesVerificationAllowlist: [\"reg/*/x\"]\n",
                "preloadedImagesVerificationAllowlist",
            ),
            (
                "pullverify-both",
                "preloadedImagesVerificationAllowlist: [\"docker.io/library/nginx\"]\n",
                "can only be set when imagePullCredentialsVerificationPolicy is NeverVerifyAllowlistedImages, not NeverVerifyPreloadedImages",
            ),
        ] {
            let p = write_cfg(name, &format!("{head}{body}"));
            let e = parse(&args(&["--config", &p.display().to_string()]))
                .unwrap_err()
                .to_string();
            assert!(
                e.contains(&p.display().to_string()) && e.contains(says),
                "{name}: {e}"
            );
            std::fs::remove_file(&p).unwrap();
        }
        std::fs::remove_file(&p).unwrap();
    }

    #[test]
    fn bad_config_names_file_and_field() {
        let p = write_cfg(
            "bad",
            "apiVersion: kubelet.config.k8s.io/v1beta1\nkind: KubeletConfiguration\nhealthzPort: lots\n",
        );
        let e = parse(&args(&["--config", &p.display().to_string()]))
            .unwrap_err()
            .to_string();
        assert!(
            e.contains(&p.display().to_string()) && e.contains("healthzPort"),
            "{e}"
        );
        std::fs::remove_file(&p).unwrap();
        let p = write_cfg(
            "dur",
            "apiVersion: kubelet.config.k8s.io/v1beta1\nkind: KubeletConfiguration\nsyncFrequency: soon\n",
        );
        let e = parse(&args(&["--config", &p.display().to_string()]))
            .unwrap_err()
            .to_string();
        assert!(e.contains("syncFrequency") && e.contains("soon"), "{e}");
        std::fs::remove_file(&p).unwrap();
        let p = write_cfg("kind", "apiVersion: v1\nkind: Pod\n");
        let e = parse(&args(&["--config", &p.display().to_string()]))
            .unwrap_err()
            .to_string();
        assert!(e.contains("kind"), "{e}");
        std::fs::remove_file(&p).unwrap();
        let e = parse(&args(&["--config", "/nonexistent/cfg.yaml"]))
            .unwrap_err()
            .to_string();
        assert!(e.contains("/nonexistent/cfg.yaml"), "{e}");
    }

    #[test]
    fn the_api_content_type_from_the_file_and_the_flag_with_the_kubelets_default() {
        use crate::cli::options::ContentType;
        assert_eq!(run(&[]).kube_api_content_type, ContentType::Protobuf);
        let p = write_cfg(
            "ctype",
            "apiVersion: kubelet.config.k8s.io/v1beta1\nkind: KubeletConfiguration\n\
             contentType: application/json\n",
        );
        let ps = p.display().to_string();
        let o = run(&["--config", &ps]);
        assert_eq!(o.kube_api_content_type, ContentType::Json);
        assert_eq!(
            configz(&o, 10250)["kubeletconfig"]["contentType"],
            "application/json"
        );
        let o = run(&[
            "--config",
            &ps,
            "--kube-api-content-type",
            "application/vnd.kubernetes.protobuf",
        ]);
        assert_eq!(o.kube_api_content_type, ContentType::Protobuf);
        std::fs::remove_file(&p).unwrap();
        let e = parse(&args(&["--kube-api-content-type", "application/yaml"]))
            .unwrap_err()
            .to_string();
        assert!(
            e.contains("--kube-api-content-type") && e.contains("\"application/yaml\""),
            "{e}"
        );
        let p = write_cfg(
            "ctype-bad",
            "apiVersion: kubelet.config.k8s.io/v1beta1\nkind: KubeletConfiguration\n\
             contentType: text/plain\n",
        );
        let e = parse(&args(&["--config", &p.display().to_string()]))
            .unwrap_err()
            .to_string();
        assert!(e.contains("contentType") && e.contains("text/plain"), "{e}");
        std::fs::remove_file(&p).unwrap();
    }

    #[test]
    fn heartbeat_settings_from_the_file_and_the_flag_refused_at_zero() {
        let p = write_cfg(
            "beats",
            "apiVersion: kubelet.config.k8s.io/v1beta1\nkind: KubeletConfiguration\n\
             nodeLeaseDurationSeconds: 240\nnodeStatusUpdateFrequency: 1m\n\
             nodeStatusReportFrequency: 1h\n",
        );
        let ps = p.display().to_string();
        let o = run(&["--config", &ps]);
        assert_eq!(o.node_lease_duration_seconds, 240);
        assert_eq!(o.node_status_update_frequency, Duration::from_secs(60));
        assert_eq!(o.node_status_report_frequency, Duration::from_secs(3600));
        let k = &configz(&o, 10250)["kubeletconfig"];
        assert_eq!(k["nodeLeaseDurationSeconds"], 240, "{k}");
        assert_eq!(k["nodeStatusUpdateFrequency"], "1m0s", "{k}");
        assert_eq!(k["nodeStatusReportFrequency"], "1h0m0s", "{k}");
        // The flag over the file, as every flag.
        let o = run(&["--config", &ps, "--node-status-update-frequency", "20s"]);
        assert_eq!(o.node_status_update_frequency, Duration::from_secs(20));
        // The defaults: the kubelet's.
        let d = run(&[]);
        assert_eq!(
            (
                d.node_lease_duration_seconds,
                d.node_status_update_frequency,
                d.node_status_report_frequency
            ),
            (40, Duration::from_secs(10), Duration::from_secs(300))
        );
        std::fs::remove_file(&p).unwrap();
        for (field, value) in [
            ("nodeLeaseDurationSeconds", "0"),
            ("nodeLeaseDurationSeconds", "-5"),
            ("nodeStatusUpdateFrequency", "0s"),
            ("nodeStatusReportFrequency", "0s"),
        ] {
            let p = write_cfg(
                "beats0",
                &format!(
                    "apiVersion: kubelet.config.k8s.io/v1beta1\nkind: KubeletConfiguration\n\
                     {field}: {value}\n"
                ),
            );
            let e = parse(&args(&["--config", &p.display().to_string()]))
                .unwrap_err()
                .to_string();
            assert!(e.contains(field) && e.contains(value), "{e}");
            std::fs::remove_file(&p).unwrap();
        }
        let e = parse(&args(&["--node-status-update-frequency", "0s"]))
            .unwrap_err()
            .to_string();
        assert!(e.contains("--node-status-update-frequency"), "{e}");
    }

    #[test]
    fn eviction_flags_and_config() {
        use crate::eviction::Signal;
        use crate::eviction::threshold::Amount;
        let o = run(&[]);
        assert_eq!(o.eviction, crate::eviction::Config::default());
        let p = write_cfg(
            "evict",
            "apiVersion: kubelet.config.k8s.io/v1beta1\nkind: KubeletConfiguration\n\
             evictionHard:\n  memory.available: 200Mi\n  pid.available: \"1000\"\n\
             evictionSoft:\n  memory.available: 1Gi\nevictionSoftGracePeriod:\n  memory.available: 1m30s\n\
             evictionMinimumReclaim:\n  memory.available: 100Mi\n\
             evictionPressureTransitionPeriod: 1m\nevictionMaxPodGracePeriod: 20\n",
        );
        let ps = p.display().to_string();
        let o = run(&["--config", &ps]);
        let t = &o.eviction.thresholds;
        assert_eq!(t.len(), 3, "{t:?}");
        assert!(t.iter().any(|t| t.signal == Signal::PidAvailable && t.hard));
        let soft = t.iter().find(|t| !t.hard).unwrap();
        assert_eq!(soft.grace, Duration::from_secs(90));
        assert_eq!(soft.min_reclaim, Some(Amount::Absolute(100 << 20)));
        assert_eq!(
            o.eviction.pressure_transition_period,
            Duration::from_secs(60)
        );
        assert_eq!(o.eviction.max_pod_grace_period, 20);
        assert_eq!(o.config_warnings, Vec::<String>::new());
        // Flags override the file, each map whole.
        let o = run(&[
            "--config",
            &ps,
            "--eviction-hard=memory.available<1Gi,nodefs.available<5%",
            "--eviction-pressure-transition-period=30s",
            "--eviction-memory-psi-threshold=10",
        ]);
        let hard: Vec<_> = o.eviction.thresholds.iter().filter(|t| t.hard).collect();
        assert_eq!(hard.len(), 2);
        assert_eq!(hard[0].value, Amount::Absolute(1 << 30));
        assert_eq!(
            o.eviction.pressure_transition_period,
            Duration::from_secs(30)
        );
        assert_eq!(o.eviction.memory_psi_threshold, Some(10.0));
        std::fs::remove_file(&p).unwrap();

        let e = parse(&args(&["--eviction-hard=memory.available>1Gi"]))
            .unwrap_err()
            .to_string();
        assert_eq!(
            e,
            "flag --eviction-hard: invalid value \"memory.available>1Gi\": \"memory.available>1Gi\": expected signal<value"
        );
        let e = parse(&args(&["--eviction-soft=memory.available<1Gi"]))
            .unwrap_err()
            .to_string();
        assert_eq!(
            e,
            "--eviction-soft: memory.available: a soft threshold needs a grace period in evictionSoftGracePeriod"
        );
        let e = parse(&args(&["--eviction-max-pod-grace-period=soon"]))
            .unwrap_err()
            .to_string();
        assert!(
            e.contains("--eviction-max-pod-grace-period") && e.contains("soon"),
            "{e}"
        );
        let p = write_cfg(
            "evict-bad",
            "apiVersion: kubelet.config.k8s.io/v1beta1\nkind: KubeletConfiguration\nevictionHard:\n  nodefs.available: 110%\n",
        );
        let e = parse(&args(&["--config", &p.display().to_string()]))
            .unwrap_err()
            .to_string();
        assert_eq!(
            e,
            format!(
                "{}: evictionHard: nodefs.available: percentage \"110%\" must be between 0% and 100%",
                p.display()
            )
        );
        std::fs::remove_file(&p).unwrap();
    }

    #[test]
    fn hostile_config_files_are_refused_by_name() {
        let cfg = |body: String| {
            let mut o = Options::default();
            parse_config(
                body.as_bytes(),
                Path::new("/etc/picolet/config.yaml"),
                &mut o,
            )
            .map(|()| o)
            .map_err(|e| e.to_string())
        };
        let head = "apiVersion: kubelet.config.k8s.io/v1beta1\nkind: KubeletConfiguration\n";
        let e = cfg(format!(
            "{head}x: {}{}\n",
            "[".repeat(100_000),
            "]".repeat(100_000)
        ))
        .unwrap_err();
        assert_eq!(
            e,
            "/etc/picolet/config.yaml: refused: nested deeper than the limit of 64 levels at line 3 column 67"
        );
        let e = cfg(format!(
            "{head}x: &a [{}]\ny: [{}]\n",
            "1,".repeat(100),
            "*a,".repeat(300)
        ))
        .unwrap_err();
        assert!(
            e.contains("refused: more than the limit of 20000 nodes"),
            "{e}"
        );
        let many: String = (0..50).map(|i| format!("unused{i}: 1\n")).collect();
        let o = cfg(format!("{head}{many}")).unwrap();
        assert_eq!(o.config_warnings.len(), 21);
        assert!(o.config_warnings[20].ends_with("30 more fields are not used by picolet"));
        // A key that is an empty scalar with an anchor or a tag: an error or an unknown field,
        // never a panic (the YAML parser read field by field panicked on it).
        for text in [
            "&apiVersion: kubelheapiVersion:lthzPoett.",
            "&a \"\": 1\n",
            "!t : 1\n",
            "x: 1\n&b : 2\n",
            "? &a\n: y\n",
        ] {
            let r = parse_config(
                text.as_bytes(),
                Path::new("/etc/picolet/config.yaml"),
                &mut Options::default(),
            );
            assert!(r.is_err(), "{text:?}: no kind, so refused");
        }
        let o = cfg(format!("{head}&a : 1\nx: {{&b : 2}}\n")).unwrap();
        assert!(
            o.config_warnings.iter().any(|w| w.contains("field \"x\"")),
            "{:?}",
            o.config_warnings
        );
        // Not a regular file: refused at once, never read (a FIFO would block a plain read).
        let e = parse(&args(&["--config", "/dev/zero"]))
            .unwrap_err()
            .to_string();
        assert_eq!(e, "/dev/zero: not a regular file: it is a character device");
    }

    #[test]
    fn configz_reports_the_settings_in_force_with_upstreams_names() {
        let full = write_cfg(
            "configz",
            "apiVersion: kubelet.config.k8s.io/v1beta1\nkind: KubeletConfiguration\n\
             staticPodPath: /m\nsyncFrequency: 30s\nfileCheckFrequency: 5s\naddress: 10.0.0.1\n\
             tlsCertFile: /c\ntlsPrivateKeyFile: /k\ntlsMinVersion: VersionTLS13\n\
             authentication:\n  x509: {clientCAFile: /ca}\n  webhook: {enabled: false, cacheTTL: 1m}\n\
             \x20 anonymous: {enabled: true}\n\
             authorization:\n  mode: AlwaysAllow\n  webhook: {cacheAuthorizedTTL: 1m, cacheUnauthorizedTTL: 2s}\n\
             healthzPort: 1\nhealthzBindAddress: 0.0.0.0\ncontainerRuntimeEndpoint: unix:///r.sock\n\
             imageServiceEndpoint: unix:///i.sock\nruntimeRequestTimeout: 1m\npodLogsDir: /l\n\
             containerLogMaxFiles: 3\nimageGCHighThresholdPercent: 90\nimageGCLowThresholdPercent: 10\n\
             imageMinimumGCAge: 1m\ncgroupDriver: systemd\ncgroupsPerQOS: true\ncgroupRoot: /c\n\
             podPidsLimit: 9\nrotateCertificates: true\n",
        );
        let ps = full.display().to_string();
        let v = configz(&run(&["--config", &ps]), 10251);
        let k = &v["kubeletconfig"];
        for (field, want) in [
            ("staticPodPath", serde_json::json!("/m")),
            ("syncFrequency", serde_json::json!("30s")),
            ("address", serde_json::json!("10.0.0.1")),
            ("port", serde_json::json!(10251)),
            ("tlsMinVersion", serde_json::json!("VersionTLS13")),
            ("healthzPort", serde_json::json!(1)),
            ("imageGCHighThresholdPercent", serde_json::json!(90)),
            ("imageMinimumGCAge", serde_json::json!("1m0s")),
            ("cgroupDriver", serde_json::json!("systemd")),
            ("podPidsLimit", serde_json::json!(9)),
            ("enableServer", serde_json::json!(true)),
        ] {
            assert_eq!(k[field], want, "{field} in {k}");
        }
        assert_eq!(k["authentication"]["webhook"]["enabled"], false, "{k}");
        assert_eq!(k["authentication"]["anonymous"]["enabled"], true, "{k}");
        assert_eq!(k["authorization"]["mode"], "AlwaysAllow", "{k}");
        assert_eq!(k["authorization"]["webhook"]["cacheUnauthorizedTTL"], "2s");
        // Joined without a mode given: the webhook, as upstream's defaults with a kubeconfig.
        let joined = configz(&run(&["--kubeconfig", "/k"]), 10250);
        assert_eq!(joined["kubeletconfig"]["authorization"]["mode"], "Webhook");
        assert_eq!(
            joined["kubeletconfig"]["authentication"]["webhook"]["enabled"],
            true
        );
        let alone = configz(&run(&[]), 0);
        assert_eq!(
            alone["kubeletconfig"]["authorization"]["mode"],
            "AlwaysAllow"
        );
        std::fs::remove_file(&full).unwrap();
    }
}
