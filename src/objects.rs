//! The API objects the node's pods use: ConfigMaps, Secrets, service-account tokens and
//! ClusterTrustBundles, as last read from the apiserver (or from the checkpoint when it is out of reach), and what each pod
//! needs of them.
//!
//! The store is plain shared data: the cluster side (`cluster::objects`) fills it, volume
//! preparation and container environments read it, both off the executor thread. "Unknown"
//! (never read, no checkpoint) is kept apart from "missing" (the apiserver said 404): a pod
//! waits for the first, and an optional reference gets nothing from the second. Values are
//! never logged, and the `Debug` form shows names only.

use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::sync::{Arc, Mutex, MutexGuard};

use serde::Deserialize;

use crate::api::{Container, Pod};

/// Keys and values of a ConfigMap (`data` and `binaryData`) or a Secret (decoded).
pub type Data = BTreeMap<String, Vec<u8>>;

/// What the node knows of one ConfigMap or Secret.
#[derive(Clone, PartialEq, Eq)]
pub enum Object {
    Present(Arc<Data>),
    /// The apiserver answered that it does not exist.
    Missing,
}

/// A service-account token and its lifetime, in unix seconds.
#[derive(Clone, PartialEq, Eq)]
pub struct Token {
    pub token: String,
    pub issued: i64,
    pub expires: i64,
}

impl Token {
    /// When the token must be requested again, as the kubelet's token manager decides: at 80 %
    /// of its lifetime, and no later than 24 h after it was issued (the apiserver may extend
    /// the lifetime it grants far beyond what the pod asked for).
    pub fn refresh_at(&self) -> i64 {
        let ttl = self.expires.saturating_sub(self.issued).max(0);
        let at_80 = self.expires.saturating_sub(ttl / 5);
        at_80.min(self.issued.saturating_add(MAX_TOKEN_AGE_SECS))
    }
}

impl std::fmt::Debug for Token {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Token")
            .field("issued", &self.issued)
            .field("expires", &self.expires)
            .finish_non_exhaustive()
    }
}

pub const MAX_TOKEN_AGE_SECS: i64 = 24 * 3600;
/// The lifetime a projected token gets when the pod names none (the API's default), and the
/// least the API accepts.
pub const DEFAULT_TOKEN_SECONDS: i64 = 3600;
pub const MIN_TOKEN_SECONDS: i64 = 600;

/// Which kind of object a reference names.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum Kind {
    ConfigMap,
    Secret,
}

impl Kind {
    pub fn as_str(self) -> &'static str {
        match self {
            Kind::ConfigMap => "configmap",
            Kind::Secret => "secret",
        }
    }
    pub fn resource(self) -> &'static str {
        match self {
            Kind::ConfigMap => "configmaps",
            Kind::Secret => "secrets",
        }
    }
}

/// How changes of the ConfigMaps and Secrets the pods use are seen: the kubelet's
/// `configMapAndSecretChangeDetectionStrategy`, with its values.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum ChangeDetection {
    /// A list and a watch of each object (the kubelet's default).
    #[default]
    Watch,
    /// A GET of each object when a pod first needs it, then every `OBJECT_TTL` (2 min).
    Cache,
    /// A GET of each object when a pod first needs it, then every `syncFrequency` (the
    /// kubelet reads it at each sync of a pod that uses it).
    Get,
}

impl ChangeDetection {
    pub fn parse(s: &str) -> Result<ChangeDetection, String> {
        match s {
            "Watch" => Ok(ChangeDetection::Watch),
            "Cache" => Ok(ChangeDetection::Cache),
            "Get" => Ok(ChangeDetection::Get),
            other => Err(format!("{other:?}: not one of Watch, Cache, Get")),
        }
    }

    pub fn as_str(self) -> &'static str {
        match self {
            ChangeDetection::Watch => "Watch",
            ChangeDetection::Cache => "Cache",
            ChangeDetection::Get => "Get",
        }
    }
}

/// A token as a pod asks for it; `key()` identifies it in the store.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord)]
pub struct TokenSpec {
    pub namespace: String,
    pub service_account: String,
    /// Empty: the apiserver's own audiences.
    pub audience: String,
    pub expiration_seconds: i64,
    pub pod_name: String,
    pub pod_uid: String,
}

impl TokenSpec {
    pub fn key(&self) -> String {
        format!(
            "{}/{}/{}/{}/{}",
            self.pod_uid,
            self.namespace,
            self.service_account,
            self.expiration_seconds,
            self.audience
        )
    }
}

/// One ClusterTrustBundle (`certificates.k8s.io/v1`) as the node keeps it.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct Bundle {
    /// Empty for a bundle of no signer (reachable by name only).
    pub signer_name: String,
    pub labels: BTreeMap<String, String>,
    /// The PEM certificates (`spec.trustBundle`).
    pub trust_bundle: String,
}

/// Every ClusterTrustBundle of the cluster, by name.
pub type Bundles = BTreeMap<String, Bundle>;

/// Everything the store holds.
#[derive(Default, Clone, PartialEq)]
pub struct Contents {
    /// By (kind, "namespace/name").
    pub objects: BTreeMap<(Kind, String), Object>,
    /// By [`TokenSpec::key`].
    pub tokens: BTreeMap<String, Token>,
    /// The cluster's ClusterTrustBundles, all of them (as the kubelet's informer holds them);
    /// none until they are listed, and only while a pod projects one.
    pub bundles: Option<Arc<Bundles>>,
    /// The pods' podCertificate credentials, by [`pod_certificate_key`]: in memory only (the
    /// private keys are never checkpointed), filled by the pod certificate manager.
    pub pod_certificates: BTreeMap<String, PodCredential>,
}

impl std::fmt::Debug for Contents {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Contents")
            .field("objects", &self.objects.keys().collect::<Vec<_>>())
            .field("tokens", &self.tokens.len())
            .field("bundles", &self.bundles.as_ref().map(|b| b.len()))
            .field("pod_certificates", &self.pod_certificates.len())
            .finish()
    }
}

/// The shared store (cheap to clone).
#[derive(Debug, Clone, Default)]
pub struct Store(Arc<Mutex<Contents>>);

impl Store {
    pub fn lock(&self) -> MutexGuard<'_, Contents> {
        self.0
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    }
}

fn key(namespace: &str, name: &str) -> String {
    format!("{namespace}/{name}")
}

impl Contents {
    pub fn object(&self, kind: Kind, namespace: &str, name: &str) -> Option<&Object> {
        self.objects.get(&(kind, key(namespace, name)))
    }

    /// The data of a referenced object: `Ok(None)` when it is missing and `optional`, an error
    /// naming it when it is unknown or required and missing.
    pub fn data(
        &self,
        kind: Kind,
        namespace: &str,
        name: &str,
        optional: bool,
    ) -> Result<Option<Arc<Data>>, String> {
        match self.object(kind, namespace, name) {
            Some(Object::Present(d)) => Ok(Some(d.clone())),
            Some(Object::Missing) if optional => Ok(None),
            Some(Object::Missing) => Err(format!("{} {namespace}/{name} not found", kind.as_str())),
            None => Err(format!(
                "{} {namespace}/{name} not read from the apiserver yet",
                kind.as_str()
            )),
        }
    }

    /// The file of a `clusterTrustBundle` projection, as the kubelet's ClusterTrustBundle
    /// manager makes it: the certificates of the named bundle, or of every bundle of the signer
    /// that the label selector matches (no selector matches none, an empty one every bundle),
    /// deduplicated and in [`trust_anchors`]'s order. Nothing found is an empty file when the
    /// projection is optional, else an error with upstream's words.
    pub fn trust_anchors(&self, p: &ClusterTrustBundleProjection) -> Result<Vec<u8>, String> {
        let optional = p.optional.unwrap_or(false);
        let all = self
            .bundles
            .as_ref()
            .ok_or("ClusterTrustBundles not read from the apiserver yet")?;
        if let Some(name) = &p.name {
            return match all.get(name) {
                Some(b) => Ok(trust_anchors(&[b])),
                None if optional => Ok(Vec::new()),
                None => Err(format!(
                    "while getting ClusterTrustBundle: clustertrustbundles.certificates.k8s.io \
                     {name:?} not found"
                )),
            };
        }
        let Some(signer) = &p.signer_name else {
            return Err(
                "ClusterTrustBundle projection requires either name or signerName to be set".into(),
            );
        };
        let mut chosen = Vec::new();
        for b in all.values().filter(|b| b.signer_name == *signer) {
            let selected = match &p.label_selector {
                None => false,
                Some(sel) => sel
                    .matches(&b.labels)
                    .map_err(|e| format!("while parsing label selector: {e}"))?,
            };
            if selected {
                chosen.push(b);
            }
        }
        if chosen.is_empty() {
            if optional {
                return Ok(Vec::new());
            }
            return Err(
                "combination of signerName and labelSelector matched zero ClusterTrustBundles"
                    .into(),
            );
        }
        Ok(trust_anchors(&chosen))
    }

    /// The private key and certificate chain of a pod's podCertificate source, as the
    /// kubelet's manager hands them out; an error with upstream's words while the request is
    /// pending ("... yet": the pod waits) or once it was refused.
    pub fn pod_certificate(&self, key: &str) -> Result<KeyAndChain, String> {
        match self.pod_certificates.get(key) {
            Some(PodCredential::Issued { key, chain }) => Ok((key.clone(), chain.clone())),
            Some(PodCredential::Refused(m)) => Err(m.clone()),
            None => Err("credential bundle is not issued yet".into()),
        }
    }
}

/// The certificates of some bundles as one PEM file, as upstream normalizes them: every PEM
/// block of each bundle (whatever its type, headers dropped), deduplicated by content, sorted by
/// their DER bytes and then shuffled, each written back as a `CERTIFICATE` block with 64-column
/// base64. The shuffle is upstream's (so no client comes to rely on an order); its seed is the
/// process's, so one set of certificates keeps its order (and its file) until a restart.
pub fn trust_anchors(bundles: &[&Bundle]) -> Vec<u8> {
    use base64::Engine as _;
    let mut ders = BTreeSet::new();
    for b in bundles {
        ders.extend(pem_blocks(&b.trust_bundle));
    }
    let mut list: Vec<Vec<u8>> = ders.into_iter().collect();
    let mut rng = shuffle_seed();
    for i in (1..list.len()).rev() {
        rng = splitmix(rng);
        let j = usize::try_from(rng % (i as u64 + 1)).unwrap_or(0);
        list.swap(i, j);
    }
    let engine = base64::engine::general_purpose::STANDARD;
    let mut out = Vec::new();
    for der in list {
        out.extend_from_slice(b"-----BEGIN CERTIFICATE-----\n");
        let text = engine.encode(der);
        for line in text.as_bytes().chunks(64) {
            out.extend_from_slice(line);
            out.push(b'\n');
        }
        out.extend_from_slice(b"-----END CERTIFICATE-----\n");
    }
    out
}

fn shuffle_seed() -> u64 {
    static SEED: std::sync::OnceLock<u64> = std::sync::OnceLock::new();
    *SEED.get_or_init(|| {
        let t = crate::rt::now_nanos().to_le_bytes();
        crate::hash::fnv1a64(&[&t, &std::process::id().to_le_bytes()])
    })
}

fn splitmix(x: u64) -> u64 {
    let mut z = x.wrapping_add(0x9E37_79B9_7F4A_7C15);
    z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
    z ^ (z >> 31)
}

/// The DER bytes of each PEM block of `text` (as Go's `pem.Decode` in a loop): text outside
/// blocks, the headers of a block and a block whose body is not base64 are skipped.
pub fn pem_blocks(text: &str) -> Vec<Vec<u8>> {
    use base64::Engine as _;
    let engine = base64::engine::general_purpose::STANDARD;
    let mut out = Vec::new();
    let mut lines = text.lines();
    while let Some(line) = lines.next() {
        let Some(kind) = line
            .trim_end()
            .strip_prefix("-----BEGIN ")
            .and_then(|r| r.strip_suffix("-----"))
        else {
            continue;
        };
        let end = format!("-----END {kind}-----");
        let mut body = String::new();
        let mut closed = false;
        for l in lines.by_ref() {
            let l = l.trim();
            if l == end {
                closed = true;
                break;
            }
            if l.contains(':') {
                continue;
            }
            body.push_str(l);
        }
        if closed && let Ok(der) = engine.decode(body.as_bytes()) {
            out.push(der);
        }
    }
    out
}

// ---- what pods reference ----

/// A file mode: a number, or an octal literal with a leading zero (`0644`), which a YAML
/// manifest means as octal (YAML 1.1, as upstream's reader takes it) and the YAML reader hands
/// over as text.
fn file_mode<'de, D: serde::Deserializer<'de>>(d: D) -> Result<Option<i32>, D::Error> {
    #[derive(Deserialize)]
    #[serde(untagged)]
    enum Mode {
        Number(i32),
        Text(String),
    }
    match Option::<Mode>::deserialize(d)? {
        None => Ok(None),
        Some(Mode::Number(n)) => Ok(Some(n)),
        Some(Mode::Text(t)) => octal(&t).map(Some).ok_or_else(|| {
            serde::de::Error::custom(format!(
                "invalid file mode {t:?}: expected a number (or an octal literal such as 0644)"
            ))
        }),
    }
}

/// `0644` as 420; `None` for anything but a zero followed by octal digits.
pub fn octal(t: &str) -> Option<i32> {
    let digits = t.strip_prefix('0')?;
    if digits.is_empty() || !digits.bytes().all(|b| (b'0'..=b'7').contains(&b)) {
        return None;
    }
    i32::from_str_radix(digits, 8).ok()
}

#[derive(Debug, Clone, Default, Deserialize)]
#[serde(default, rename_all = "camelCase")]
pub struct KeyToPath {
    pub key: String,
    pub path: String,
    #[serde(deserialize_with = "file_mode")]
    pub mode: Option<i32>,
}

#[derive(Debug, Clone, Default, Deserialize)]
#[serde(default, rename_all = "camelCase")]
pub struct ConfigMapVolume {
    pub name: String,
    pub items: Vec<KeyToPath>,
    #[serde(deserialize_with = "file_mode")]
    pub default_mode: Option<i32>,
    pub optional: Option<bool>,
}

#[derive(Debug, Clone, Default, Deserialize)]
#[serde(default, rename_all = "camelCase")]
pub struct SecretVolume {
    pub secret_name: String,
    pub items: Vec<KeyToPath>,
    #[serde(deserialize_with = "file_mode")]
    pub default_mode: Option<i32>,
    pub optional: Option<bool>,
}

#[derive(Debug, Clone, Default, Deserialize)]
#[serde(default, rename_all = "camelCase")]
pub struct ObjectProjection {
    pub name: String,
    pub items: Vec<KeyToPath>,
    pub optional: Option<bool>,
}

#[derive(Debug, Clone, Default, Deserialize)]
#[serde(default, rename_all = "camelCase")]
pub struct TokenProjection {
    pub audience: String,
    pub expiration_seconds: Option<i64>,
    pub path: String,
}

#[derive(Debug, Clone, Default, Deserialize)]
#[serde(default, rename_all = "camelCase")]
pub struct ResourceFieldSelector {
    pub container_name: String,
    pub resource: String,
    pub divisor: Option<crate::api::Quantity>,
}

#[derive(Debug, Clone, Default, Deserialize)]
#[serde(default, rename_all = "camelCase")]
pub struct DownwardApiFile {
    pub path: String,
    pub field_ref: Option<crate::api::ObjectFieldSelector>,
    pub resource_field_ref: Option<ResourceFieldSelector>,
    #[serde(deserialize_with = "file_mode")]
    pub mode: Option<i32>,
}

#[derive(Debug, Clone, Default, Deserialize)]
#[serde(default, rename_all = "camelCase")]
pub struct DownwardApiVolume {
    pub items: Vec<DownwardApiFile>,
    #[serde(deserialize_with = "file_mode")]
    pub default_mode: Option<i32>,
}

#[derive(Debug, Clone, Default, Deserialize)]
#[serde(default, rename_all = "camelCase")]
pub struct ProjectionSource {
    pub config_map: Option<ObjectProjection>,
    pub secret: Option<ObjectProjection>,
    #[serde(rename = "downwardAPI")]
    pub downward_api: Option<DownwardApiVolume>,
    pub service_account_token: Option<TokenProjection>,
    pub cluster_trust_bundle: Option<ClusterTrustBundleProjection>,
    pub pod_certificate: Option<PodCertificateProjection>,
}

/// `projected.sources[].podCertificate`: a key the node makes for the pod, certified by
/// `signerName` through a PodCertificateRequest, written to the paths set.
#[derive(Debug, Clone, Default, PartialEq, Eq, Deserialize)]
#[serde(default, rename_all = "camelCase")]
pub struct PodCertificateProjection {
    pub signer_name: String,
    pub key_type: String,
    pub max_expiration_seconds: Option<i32>,
    pub credential_bundle_path: String,
    pub key_path: String,
    pub certificate_chain_path: String,
    pub user_annotations: BTreeMap<String, String>,
}

/// One podCertificate source of a pod: the pod it is for and what it asks.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PodCertificateNeed {
    pub namespace: String,
    pub pod_name: String,
    pub pod_uid: String,
    pub service_account: String,
    pub volume: String,
    /// The source's index in `projected.sources`.
    pub index: usize,
    pub source: PodCertificateProjection,
}

/// The store's key of a pod's podCertificate source: `<pod uid>/<volume>/<index>`.
pub fn pod_certificate_key(pod_uid: &str, volume: &str, index: usize) -> String {
    format!("{pod_uid}/{volume}/{index}")
}

/// A pod certificate's private key (PKCS#8 PEM) and chain (PEM, leaf first).
pub type KeyAndChain = (Arc<Vec<u8>>, Arc<Vec<u8>>);

/// What a podCertificate source has: the key and chain it projects, or why it never will.
#[derive(Clone, PartialEq, Eq)]
pub enum PodCredential {
    /// The private key (PKCS#8 PEM) and the issued chain (PEM, leaf first).
    Issued {
        key: Arc<Vec<u8>>,
        chain: Arc<Vec<u8>>,
    },
    /// A final refusal (a request denied or failed, a key type picolet cannot make).
    Refused(String),
}

impl std::fmt::Debug for PodCredential {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            PodCredential::Issued { chain, .. } => {
                write!(f, "Issued(chain of {} bytes)", chain.len())
            }
            PodCredential::Refused(m) => write!(f, "Refused({m:?})"),
        }
    }
}

/// `projected.sources[].clusterTrustBundle`: one bundle by `name`, or the bundles of
/// `signerName` that `labelSelector` picks, written to `path`.
#[derive(Debug, Clone, Default, Deserialize)]
#[serde(default, rename_all = "camelCase")]
pub struct ClusterTrustBundleProjection {
    pub name: Option<String>,
    pub signer_name: Option<String>,
    pub label_selector: Option<LabelSelector>,
    pub optional: Option<bool>,
    pub path: String,
}

/// A label selector (`metav1.LabelSelector`): every `matchLabels` pair and every
/// `matchExpressions` requirement must hold; an empty one matches everything.
#[derive(Debug, Clone, Default, Deserialize)]
#[serde(default, rename_all = "camelCase")]
pub struct LabelSelector {
    pub match_labels: BTreeMap<String, String>,
    pub match_expressions: Vec<LabelSelectorRequirement>,
}

#[derive(Debug, Clone, Default, Deserialize)]
#[serde(default, rename_all = "camelCase")]
pub struct LabelSelectorRequirement {
    pub key: String,
    pub operator: String,
    pub values: Vec<String>,
}

impl LabelSelector {
    /// Whether `labels` satisfy the selector; an error names a requirement upstream's
    /// `LabelSelectorAsSelector` refuses.
    pub fn matches(&self, labels: &BTreeMap<String, String>) -> Result<bool, String> {
        let mut ok = self
            .match_labels
            .iter()
            .all(|(k, v)| labels.get(k) == Some(v));
        for r in &self.match_expressions {
            let value = labels.get(&r.key);
            let held = match r.operator.as_str() {
                "In" | "NotIn" if r.values.is_empty() => {
                    return Err(format!(
                        "key {:?}: for 'in', 'notin' operators, values set can't be empty",
                        r.key
                    ));
                }
                "In" => value.is_some_and(|v| r.values.contains(v)),
                "NotIn" => value.is_none_or(|v| !r.values.contains(v)),
                "Exists" | "DoesNotExist" if !r.values.is_empty() => {
                    return Err(format!(
                        "key {:?}: values set must be empty for exists and does not exist",
                        r.key
                    ));
                }
                "Exists" => value.is_some(),
                "DoesNotExist" => value.is_none(),
                other => return Err(format!("{other:?} is not a valid label selector operator")),
            };
            ok &= held;
        }
        Ok(ok)
    }
}

#[derive(Debug, Clone, Default, Deserialize)]
#[serde(default, rename_all = "camelCase")]
pub struct ProjectedVolume {
    pub sources: Vec<ProjectionSource>,
    #[serde(deserialize_with = "file_mode")]
    pub default_mode: Option<i32>,
}

/// A volume whose content comes from the API or the pod itself.
#[derive(Debug, Clone)]
pub enum ApiVolume {
    ConfigMap(ConfigMapVolume),
    Secret(SecretVolume),
    Projected(ProjectedVolume),
    DownwardApi(DownwardApiVolume),
}

impl ApiVolume {
    /// The volume's source when it is one of these kinds; an error names a malformed one.
    pub fn of(v: &crate::api::Volume) -> Option<Result<ApiVolume, String>> {
        fn parse<T: serde::de::DeserializeOwned>(
            v: &serde_json::Value,
            f: fn(T) -> ApiVolume,
        ) -> Result<ApiVolume, String> {
            serde_json::from_value(v.clone())
                .map(f)
                .map_err(|e| e.to_string())
        }
        let (kind, value) = v.other.iter().next()?;
        Some(match kind.as_str() {
            "configMap" => parse(value, ApiVolume::ConfigMap),
            "secret" => parse(value, ApiVolume::Secret),
            "projected" => parse(value, ApiVolume::Projected),
            "downwardAPI" => parse(value, ApiVolume::DownwardApi),
            _ => return None,
        })
    }

    /// The directory kind under `volumes/`, as the kubelet names its plugins.
    pub fn plugin_dir(&self) -> &'static str {
        match self {
            ApiVolume::ConfigMap(_) => "kubernetes.io~configmap",
            ApiVolume::Secret(_) => "kubernetes.io~secret",
            ApiVolume::Projected(_) => "kubernetes.io~projected",
            ApiVolume::DownwardApi(_) => "kubernetes.io~downward-api",
        }
    }

    /// Secrets, tokens and pod metadata live in memory only, as upstream keeps them.
    pub fn on_tmpfs(&self) -> bool {
        !matches!(self, ApiVolume::ConfigMap(_))
    }
}

/// The volume's projected source, if any. configMap and secret volumes come only from the
/// apiserver (validation refuses them in static pods, as upstream), so a build without the
/// apiserver client reads only downwardAPI and projected volumes, which static pods may use (with
/// downwardAPI sources alone).
pub fn api_volume(v: &crate::api::Volume) -> Option<Result<ApiVolume, String>> {
    if cfg!(feature = "apiserver")
        || v.other.contains_key("downwardAPI")
        || v.other.contains_key("projected")
    {
        ApiVolume::of(v)
    } else {
        None
    }
}

#[derive(Debug, Clone, Default, Deserialize)]
#[serde(default, rename_all = "camelCase")]
pub struct KeySelector {
    pub name: String,
    pub key: String,
    pub optional: Option<bool>,
}

#[derive(Debug, Clone, Default, Deserialize)]
#[serde(default, rename_all = "camelCase")]
pub struct ObjectRef {
    pub name: String,
    pub optional: Option<bool>,
}

#[derive(Debug, Clone, Default, Deserialize)]
#[serde(default, rename_all = "camelCase")]
pub struct EnvFromSource {
    pub prefix: String,
    pub config_map_ref: Option<ObjectRef>,
    pub secret_ref: Option<ObjectRef>,
}

fn namespace(pod: &Pod) -> &str {
    if pod.metadata.namespace.is_empty() {
        "default"
    } else {
        &pod.metadata.namespace
    }
}

fn service_account(pod: &Pod) -> &str {
    pod.spec
        .service_account_name
        .as_deref()
        .filter(|s| !s.is_empty())
        .unwrap_or("default")
}

/// The token a projection asks for, bound to the pod.
pub fn token_spec(pod: &Pod, t: &TokenProjection) -> TokenSpec {
    TokenSpec {
        namespace: namespace(pod).to_owned(),
        service_account: service_account(pod).to_owned(),
        audience: t.audience.clone(),
        expiration_seconds: t
            .expiration_seconds
            .unwrap_or(DEFAULT_TOKEN_SECONDS)
            .max(MIN_TOKEN_SECONDS),
        pod_name: pod.metadata.name.clone(),
        pod_uid: pod.metadata.uid.clone(),
    }
}

/// What a set of pods needs from the apiserver.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Needs {
    /// (kind, namespace, name) → the UIDs of the pods that use it.
    pub objects: BTreeMap<(Kind, String, String), BTreeSet<String>>,
    pub tokens: BTreeMap<String, TokenSpec>,
    /// The UIDs of the pods that project ClusterTrustBundles.
    pub bundles: BTreeSet<String>,
    /// The podCertificate sources of the pods, by [`pod_certificate_key`].
    pub pod_certificates: BTreeMap<String, PodCertificateNeed>,
}

impl Needs {
    pub fn add_pod(&mut self, pod: &Pod) {
        let ns = namespace(pod).to_owned();
        let uid = pod.metadata.uid.clone();
        let mut obj = |kind: Kind, name: &str| {
            if !name.is_empty() {
                self.objects
                    .entry((kind, ns.clone(), name.to_owned()))
                    .or_default()
                    .insert(uid.clone());
            }
        };
        for v in &pod.spec.volumes {
            match ApiVolume::of(v) {
                Some(Ok(ApiVolume::ConfigMap(c))) => obj(Kind::ConfigMap, &c.name),
                Some(Ok(ApiVolume::Secret(s))) => obj(Kind::Secret, &s.secret_name),
                Some(Ok(ApiVolume::Projected(p))) => {
                    for (index, s) in p.sources.iter().enumerate() {
                        if let Some(c) = &s.config_map {
                            obj(Kind::ConfigMap, &c.name);
                        }
                        if let Some(c) = &s.secret {
                            obj(Kind::Secret, &c.name);
                        }
                        if let Some(t) = &s.service_account_token {
                            let spec = token_spec(pod, t);
                            self.tokens.insert(spec.key(), spec);
                        }
                        if s.cluster_trust_bundle.is_some() {
                            self.bundles.insert(pod.metadata.uid.clone());
                        }
                        if let Some(c) = &s.pod_certificate {
                            self.pod_certificates.insert(
                                pod_certificate_key(&uid, &v.name, index),
                                PodCertificateNeed {
                                    namespace: ns.clone(),
                                    pod_name: pod.metadata.name.clone(),
                                    pod_uid: uid.clone(),
                                    service_account: service_account(pod).to_owned(),
                                    volume: v.name.clone(),
                                    index,
                                    source: c.clone(),
                                },
                            );
                        }
                    }
                }
                _ => {}
            }
        }
        // Registry credentials: a missing one does not hold the pull back, as upstream.
        for s in &pod.spec.image_pull_secrets {
            obj(Kind::Secret, &s.name);
        }
        for c in pod.spec.init_containers.iter().chain(&pod.spec.containers) {
            for e in &c.env {
                let Some(from) = &e.value_from else { continue };
                for (kind, sel) in [
                    (Kind::ConfigMap, &from.config_map_key_ref),
                    (Kind::Secret, &from.secret_key_ref),
                ] {
                    if let Some(s) = sel.as_ref().and_then(|s| key_selector(s).ok()) {
                        obj(kind, &s.name);
                    }
                }
            }
            for f in &c.env_from {
                if let Ok(f) = serde_json::from_value::<EnvFromSource>(f.clone()) {
                    if let Some(r) = &f.config_map_ref {
                        obj(Kind::ConfigMap, &r.name);
                    }
                    if let Some(r) = &f.secret_ref {
                        obj(Kind::Secret, &r.name);
                    }
                }
            }
        }
    }
}

fn key_selector(v: &serde_json::Value) -> Result<KeySelector, String> {
    serde_json::from_value(v.clone()).map_err(|e| e.to_string())
}

/// A container's environment as it comes from ConfigMaps and Secrets.
#[derive(Default, Clone, PartialEq)]
pub struct ObjectEnv {
    /// From `envFrom`, in order, prefixes applied.
    pub from: Vec<(String, String)>,
    /// By index in `env`: the value of a `configMapKeyRef`/`secretKeyRef`, or `None` when it
    /// is optional and absent (the variable is then left out, as upstream); the runtime manager
    /// adds the `resourceFieldRef` values (`kuberuntime::env::resource_refs`).
    pub refs: HashMap<usize, Option<String>>,
    /// The service variables (`crate::services`), by name: `$(VAR)` in env, command and args
    /// may name them, and each that the container does not set itself is added after its own.
    pub services: BTreeMap<String, String>,
}

impl std::fmt::Debug for ObjectEnv {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let names: Vec<&str> = self.from.iter().map(|(k, _)| k.as_str()).collect();
        f.debug_struct("ObjectEnv")
            .field("from", &names)
            .field("refs", &self.refs.len())
            .field("services", &self.services.len())
            .finish()
    }
}

fn text(bytes: &[u8]) -> String {
    String::from_utf8_lossy(bytes).into_owned()
}

/// Resolves a container's `envFrom` and its `configMapKeyRef`/`secretKeyRef` variables; an
/// error (the container's CreateContainerConfigError) names the object and key, never a value.
pub fn container_env(pod: &Pod, c: &Container, store: &Contents) -> Result<ObjectEnv, String> {
    if !cfg!(feature = "apiserver") {
        // Static pods cannot reference API objects (validation refuses them).
        return Ok(ObjectEnv::default());
    }
    let ns = namespace(pod);
    let mut out = ObjectEnv::default();
    for (i, f) in c.env_from.iter().enumerate() {
        let f: EnvFromSource =
            serde_json::from_value(f.clone()).map_err(|e| format!("envFrom[{i}]: {e}"))?;
        let (kind, r) = match (&f.config_map_ref, &f.secret_ref) {
            (Some(r), None) => (Kind::ConfigMap, r),
            (None, Some(r)) => (Kind::Secret, r),
            _ => {
                return Err(format!(
                    "envFrom[{i}]: exactly one of configMapRef and secretRef is required"
                ));
            }
        };
        let Some(data) = store.data(kind, ns, &r.name, r.optional.unwrap_or(false))? else {
            continue;
        };
        for (k, v) in data.iter() {
            let name = format!("{}{k}", f.prefix);
            // Keys that cannot be a variable name are skipped, as upstream does.
            if name.is_empty() || name.contains('=') {
                continue;
            }
            out.from.push((name, text(v)));
        }
    }
    for (i, e) in c.env.iter().enumerate() {
        let Some(from) = &e.value_from else { continue };
        for (kind, sel) in [
            (Kind::ConfigMap, &from.config_map_key_ref),
            (Kind::Secret, &from.secret_key_ref),
        ] {
            let Some(sel) = sel else { continue };
            let s = key_selector(sel).map_err(|m| format!("env {:?}: {m}", e.name))?;
            let optional = s.optional.unwrap_or(false);
            let value = match store.data(kind, ns, &s.name, optional)? {
                None => None,
                Some(d) => match d.get(&s.key) {
                    Some(v) => Some(text(v)),
                    None if optional => None,
                    None => {
                        return Err(format!(
                            "couldn't find key {} in {} {ns}/{}",
                            s.key,
                            kind.as_str(),
                            s.name
                        ));
                    }
                },
            };
            out.refs.insert(i, value);
        }
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn pod(yaml: &str) -> Pod {
        yaml_serde::from_str(yaml).unwrap()
    }

    fn present(pairs: &[(&str, &str)]) -> Object {
        Object::Present(Arc::new(
            pairs
                .iter()
                .map(|(k, v)| ((*k).to_owned(), v.as_bytes().to_vec()))
                .collect(),
        ))
    }

    const ENV_POD: &str = "metadata: {name: p, namespace: ns, uid: u1}
spec:
  containers:
  - name: c
    image: i
    envFrom:
    - configMapRef: {name: cm}
    - prefix: S_
      secretRef: {name: sec}
    - configMapRef: {name: absent, optional: true}
    env:
    - {name: A, valueFrom: {configMapKeyRef: {name: cm, key: a}}}
    - {name: B, valueFrom: {secretKeyRef: {name: sec, key: nokey, optional: true}}}
    - {name: C, valueFrom: {configMapKeyRef: {name: absent, key: x, optional: true}}}
    - {name: D, value: plain}
";

    #[test]
    fn env_from_objects_with_optional_keys_and_objects() {
        let p = pod(ENV_POD);
        let mut s = Contents::default();
        s.objects.insert(
            (Kind::ConfigMap, "ns/cm".into()),
            present(&[("a", "1"), ("bad=key", "x")]),
        );
        s.objects.insert(
            (Kind::Secret, "ns/sec".into()),
            present(&[("pw", "hunter2")]),
        );
        s.objects
            .insert((Kind::ConfigMap, "ns/absent".into()), Object::Missing);
        let e = container_env(&p, &p.spec.containers[0], &s).unwrap();
        assert_eq!(
            e.from,
            vec![
                ("a".to_owned(), "1".to_owned()),
                ("S_pw".to_owned(), "hunter2".to_owned())
            ]
        );
        assert_eq!(e.refs[&0], Some("1".to_owned()));
        assert_eq!(e.refs[&1], None);
        assert_eq!(e.refs[&2], None);
        assert!(!e.refs.contains_key(&3));
        assert!(!format!("{e:?}").contains("hunter2"), "values never shown");

        // A required key that is not there, a required object that is missing, one never read.
        let mut p2 = p.clone();
        p2.spec.containers[0].env[0].value_from = Some(crate::api::EnvVarSource {
            config_map_key_ref: Some(serde_json::json!({"name": "cm", "key": "zz"})),
            ..Default::default()
        });
        assert_eq!(
            container_env(&p2, &p2.spec.containers[0], &s).unwrap_err(),
            "couldn't find key zz in configmap ns/cm"
        );
        s.objects
            .insert((Kind::Secret, "ns/sec".into()), Object::Missing);
        assert_eq!(
            container_env(&p, &p.spec.containers[0], &s).unwrap_err(),
            "secret ns/sec not found"
        );
        s.objects.remove(&(Kind::Secret, "ns/sec".into()));
        assert_eq!(
            container_env(&p, &p.spec.containers[0], &s).unwrap_err(),
            "secret ns/sec not read from the apiserver yet"
        );
    }

    #[test]
    fn needs_name_every_object_and_token_of_a_pod() {
        let p = pod("metadata: {name: p, namespace: ns, uid: u1}
spec:
  serviceAccountName: sa
  imagePullSecrets: [{name: regcred}]
  containers:
  - name: c
    image: i
    envFrom: [{secretRef: {name: s-env}}]
    env: [{name: A, valueFrom: {configMapKeyRef: {name: cm-env, key: a}}}]
  volumes:
  - {name: a, configMap: {name: cm}}
  - {name: b, secret: {secretName: s}}
  - name: kube-api-access
    projected:
      sources:
      - serviceAccountToken: {expirationSeconds: 3607, path: token}
      - configMap: {name: kube-root-ca.crt, items: [{key: ca.crt, path: ca.crt}]}
      - downwardAPI: {items: [{path: namespace, fieldRef: {fieldPath: metadata.namespace}}]}
  - name: short
    projected: {sources: [{serviceAccountToken: {audience: vault, expirationSeconds: 60, path: t}}]}
  - {name: e, emptyDir: {}}
");
        let mut n = Needs::default();
        n.add_pod(&p);
        let names: Vec<String> = n
            .objects
            .keys()
            .map(|(k, ns, name)| format!("{}:{ns}/{name}", k.as_str()))
            .collect();
        assert_eq!(
            names,
            vec![
                "configmap:ns/cm",
                "configmap:ns/cm-env",
                "configmap:ns/kube-root-ca.crt",
                "secret:ns/regcred",
                "secret:ns/s",
                "secret:ns/s-env"
            ]
        );
        let tokens: Vec<&TokenSpec> = n.tokens.values().collect();
        assert_eq!(tokens.len(), 2);
        assert!(tokens.iter().all(|t| t.pod_uid == "u1"
            && t.pod_name == "p"
            && t.service_account == "sa"
            && t.namespace == "ns"));
        // The API's minimum is applied to a lifetime below it.
        let exp: BTreeSet<i64> = tokens.iter().map(|t| t.expiration_seconds).collect();
        assert_eq!(exp, BTreeSet::from([600, 3607]));
    }

    #[test]
    fn pem_blocks_are_read_as_go_reads_them_and_written_back_normalized() {
        let text = "junk before\n-----BEGIN CERTIFICATE-----\nAAEC\n-----END CERTIFICATE-----\n\
                    -----BEGIN OTHER-----\nProc-Type: 4,ENCRYPTED\n\nAwQ=\n-----END OTHER-----\n\
                    -----BEGIN CERTIFICATE-----\n%%%\n-----END CERTIFICATE-----\n\
                    -----BEGIN CERTIFICATE-----\nAAEC\n-----END CERTIFICATE-----\n";
        assert_eq!(
            pem_blocks(text),
            vec![vec![0, 1, 2], vec![3, 4], vec![0, 1, 2]]
        );
        let b = Bundle {
            trust_bundle: text.into(),
            ..Bundle::default()
        };
        let out = String::from_utf8(trust_anchors(&[&b])).unwrap();
        let mut blocks: Vec<&str> = out.split_inclusive("-----END CERTIFICATE-----\n").collect();
        blocks.sort();
        assert_eq!(
            blocks,
            vec![
                "-----BEGIN CERTIFICATE-----\nAAEC\n-----END CERTIFICATE-----\n",
                "-----BEGIN CERTIFICATE-----\nAwQ=\n-----END CERTIFICATE-----\n",
            ]
        );
        // Long bodies wrap at 64 columns, as Go's encoder writes them.
        let long = Bundle {
            trust_bundle: format!(
                "-----BEGIN CERTIFICATE-----\n{}\n-----END CERTIFICATE-----\n",
                "A".repeat(100)
            ),
            ..Bundle::default()
        };
        let out = String::from_utf8(trust_anchors(&[&long])).unwrap();
        let widths: Vec<usize> = out.lines().map(str::len).collect();
        assert_eq!(widths, vec![27, 64, 36, 25]);
        assert!(trust_anchors(&[]).is_empty());
    }

    #[test]
    fn label_selectors_match_as_upstreams() {
        let labels: BTreeMap<String, String> = [("a", "1"), ("b", "2")]
            .into_iter()
            .map(|(k, v)| (k.to_owned(), v.to_owned()))
            .collect();
        let sel = |y: &str| -> LabelSelector { yaml_serde::from_str(y).unwrap() };
        assert!(sel("{}").matches(&labels).unwrap());
        assert!(sel("{matchLabels: {a: '1'}}").matches(&labels).unwrap());
        assert!(
            !sel("{matchLabels: {a: '1', c: '3'}}")
                .matches(&labels)
                .unwrap()
        );
        let expr = |op: &str, values: &str| {
            sel(&format!(
                "{{matchExpressions: [{{key: a, operator: {op}, values: {values}}}]}}"
            ))
            .matches(&labels)
        };
        assert_eq!(expr("In", "['1', '9']"), Ok(true));
        assert_eq!(expr("NotIn", "['1']"), Ok(false));
        assert_eq!(expr("Exists", "[]"), Ok(true));
        assert_eq!(expr("DoesNotExist", "[]"), Ok(false));
        assert!(expr("In", "[]").is_err());
        assert!(expr("Exists", "['1']").is_err());
        assert!(
            !sel("{matchExpressions: [{key: z, operator: Exists}]}")
                .matches(&labels)
                .unwrap()
        );
        assert!(
            sel("{matchExpressions: [{key: z, operator: NotIn, values: [x]}]}")
                .matches(&labels)
                .unwrap()
        );
    }

    #[test]
    fn needs_name_the_pods_projecting_trust_bundles() {
        let p = pod("metadata: {name: p, namespace: ns, uid: u9}
spec:
  containers: [{name: c, image: i}]
  volumes:
  - name: ctb
    projected: {sources: [{clusterTrustBundle: {signerName: x.io/s, labelSelector: {}, path: b.crt}}]}
");
        let mut n = Needs::default();
        n.add_pod(&p);
        assert_eq!(n.bundles, BTreeSet::from(["u9".to_owned()]));
        assert!(n.objects.is_empty());
    }

    #[test]
    fn needs_name_each_pod_certificate_source_by_pod_volume_and_index() {
        let p = pod("metadata: {name: p, namespace: ns, uid: u9}
spec:
  serviceAccountName: sa
  containers: [{name: c, image: i}]
  volumes:
  - name: tls
    projected:
      sources:
      - downwardAPI: {items: [{path: n, fieldRef: {fieldPath: metadata.name}}]}
      - podCertificate: {signerName: x.io/s, keyType: ECDSAP256, maxExpirationSeconds: 3600, credentialBundlePath: b.pem, userAnnotations: {x.io/a: b}}
");
        let mut n = Needs::default();
        n.add_pod(&p);
        let need = &n.pod_certificates["u9/tls/1"];
        assert_eq!(
            (
                need.namespace.as_str(),
                need.pod_name.as_str(),
                need.service_account.as_str(),
                need.index
            ),
            ("ns", "p", "sa", 1)
        );
        assert_eq!(need.source.max_expiration_seconds, Some(3600));
        assert_eq!(need.source.user_annotations["x.io/a"], "b");
        assert_eq!(n.pod_certificates.len(), 1);
    }

    #[test]
    fn tokens_refresh_at_80_percent_or_after_a_day() {
        let t = Token {
            token: "x".into(),
            issued: 1000,
            expires: 1000 + 3607,
        };
        assert_eq!(t.refresh_at(), 1000 + 3607 - 721);
        // An extended token (a year) is still renewed after 24 h.
        let long = Token {
            token: "secret-value".into(),
            issued: 0,
            expires: 365 * 86400,
        };
        assert_eq!(long.refresh_at(), 86400);
        assert!(!format!("{long:?}").contains("secret-value"));
    }
}
