//! Fills the object store (`crate::objects`) with the ConfigMaps, Secrets and service-account
//! tokens the node's API pods use, and checkpoints it so the pods start without the apiserver.
//!
//! The Node authorizer lets a node read only the objects of pods bound to it, one by one. How a
//! change of one is seen is the kubelet's `configMapAndSecretChangeDetectionStrategy`
//! ([`ChangeDetection`]): by default (`Watch`) each object a pod uses is listed and watched on
//! its own (a list and a watch with `fieldSelector=metadata.name=<name>`, which the Node
//! authorizer allows as it allows the GET), on a thread of its own, from when a pod first needs
//! it until no pod has used it for [`UNUSED_GRACE`]: an object that does not change then costs
//! the watch's bookmarks and its renewal every 5 to 10 minutes, and a change arrives at once.
//! With `Cache` each object is read with a GET of its own when a pod first needs it (the loop
//! wakes the task as soon as it has a new or updated API pod) and then every [`OBJECT_TTL`];
//! with `Get`, every `syncFrequency`. Tokens come from the TokenRequest API, bound to their pod,
//! and are requested again at 80 % of their lifetime (or after 24 h). A changed object makes
//! the pods using it sync at once, which rewrites their volumes. Every call runs on the
//! blocking pool; an apiserver that is away leaves the store as it was, so pods keep the
//! content and the tokens they had.
//!
//! ClusterTrustBundles are cluster-scoped and a projection may pick them by signer and labels:
//! as the kubelet's informer, the node lists and watches all of them (`certificates.k8s.io/v1`,
//! which the Node authorizer lets a node get, list and watch), whatever the strategy above, from
//! when a pod first projects one until no pod has for [`UNUSED_GRACE`]; a change makes the pods
//! that project bundles sync at once.
//!
//! Pod certificates (`crate::podcertificate`) ride the same rounds: while a pod projects one,
//! the node's PodCertificateRequests are listed and watched (`cluster::podcertificate`), the
//! manager's step runs every round, and the requests it asks for are created; an issued or
//! refused credential makes its pod sync at once. The credentials are never checkpointed.

use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::path::{Path, PathBuf};
use std::rc::Rc;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use base64::Engine as _;
use serde::{Deserialize, Serialize};
use serde_json::{Value, json};

use super::Kubelet;
use crate::api::time::parse_rfc3339;
use crate::apiclient::backoff::{Jitter, backoff_delay};
use crate::apiclient::watch::{self, Event, ObjectError, Watched};
use crate::apiclient::{ApiError, Client};
use crate::kuberuntime::each_as_ready;
use crate::objects::{
    Bundle, Bundles, ChangeDetection, Contents, Data, Kind, Needs, Object, Store, Token, TokenSpec,
};
use crate::podcertificate::Requests;
use crate::rt;

/// How often an object in use is read again under the `Cache` strategy. A change reaches the
/// files within this (the pods are synced at once), as fast as the kubelet's TTL cache and sync
/// period make it in the worst case (1 min + 1 min); a shorter period would cost a node with 10
/// pods its budget of 7 requests a minute, of which the Lease takes 6.
pub const OBJECT_TTL: Duration = Duration::from_secs(120);
/// How often the pods' needs are looked at (in memory; a call only when something is due).
/// A new or changed API pod is looked at as soon as the loop has it, not at the next round.
pub const ROUND: Duration = Duration::from_secs(1);
/// The most calls a round has in flight at once (each holds a thread of the blocking pool).
/// Each answer is acted on as it comes: a pod whose token is in syncs at once, without waiting
/// for the tokens of the pods created with it.
pub const PARALLEL: usize = 8;
/// An object or token no pod has used for this long leaves the store (and the checkpoint).
/// Not at once: right after a start, the pods may not have arrived yet.
pub const UNUSED_GRACE: Duration = Duration::from_secs(300);
/// The checkpoint's size limit: past it, it is not rewritten (and a warning says so).
pub const MAX_CHECKPOINT: usize = 16 << 20;

fn b64() -> base64::engine::GeneralPurpose {
    base64::engine::general_purpose::STANDARD
}

/// The data of a ConfigMap or Secret as the apiserver returns it.
pub fn decode_object(kind: Kind, v: &Value) -> Result<Data, String> {
    let mut out = Data::new();
    let decode = |field: &str, out: &mut Data, base64: bool| -> Result<(), String> {
        let Some(m) = v.get(field).and_then(Value::as_object) else {
            return Ok(());
        };
        for (k, val) in m {
            let s = val
                .as_str()
                .ok_or_else(|| format!("{field}.{k}: not a string"))?;
            let bytes = if base64 {
                b64()
                    .decode(s)
                    .map_err(|e| format!("{field}.{k}: not base64: {e}"))?
            } else {
                s.as_bytes().to_vec()
            };
            out.insert(k.clone(), bytes);
        }
        Ok(())
    };
    match kind {
        Kind::ConfigMap => {
            decode("data", &mut out, false)?;
            decode("binaryData", &mut out, true)?;
        }
        Kind::Secret => decode("data", &mut out, true)?,
    }
    Ok(out)
}

/// A ClusterTrustBundle as the apiserver returns it: its name and what a projection uses.
pub fn decode_bundle(v: &Value) -> Result<(String, Bundle), String> {
    let name = v["metadata"]["name"]
        .as_str()
        .filter(|n| !n.is_empty())
        .ok_or("metadata.name: empty")?
        .to_owned();
    let text = |field: &Value, what: &str| -> Result<String, String> {
        match field {
            Value::Null => Ok(String::new()),
            Value::String(s) => Ok(s.clone()),
            _ => Err(format!("{name}: {what}: not a string")),
        }
    };
    let mut labels = BTreeMap::new();
    if let Some(m) = v["metadata"]["labels"].as_object() {
        for (k, val) in m {
            labels.insert(k.clone(), text(val, &format!("metadata.labels.{k}"))?);
        }
    }
    let bundle = Bundle {
        signer_name: text(&v["spec"]["signerName"], "spec.signerName")?,
        labels,
        trust_bundle: text(&v["spec"]["trustBundle"], "spec.trustBundle")?,
    };
    Ok((name, bundle))
}

fn now_secs() -> i64 {
    rt::now_nanos().div_euclid(1_000_000_000)
}

/// The TokenRequest body for a pod's projected token: its audience (none: the apiserver's
/// own), its lifetime, bound to the pod so it dies with it.
pub fn token_request(spec: &TokenSpec) -> Value {
    let audiences: Vec<&str> = if spec.audience.is_empty() {
        Vec::new()
    } else {
        vec![spec.audience.as_str()]
    };
    json!({
        "apiVersion": "authentication.k8s.io/v1",
        "kind": "TokenRequest",
        "spec": {
            "audiences": audiences,
            "expirationSeconds": spec.expiration_seconds,
            "boundObjectRef": {
                "apiVersion": "v1",
                "kind": "Pod",
                "name": spec.pod_name,
                "uid": spec.pod_uid,
            },
        },
    })
}

/// The token of a TokenRequest answer, with its lifetime as the apiserver granted it.
pub fn token_of(answer: &Value, asked_seconds: i64) -> Result<Token, String> {
    let token = answer["status"]["token"]
        .as_str()
        .filter(|t| !t.is_empty())
        .ok_or("TokenRequest answer without status.token")?
        .to_owned();
    let now = now_secs();
    let granted = answer["spec"]["expirationSeconds"]
        .as_i64()
        .unwrap_or(asked_seconds);
    let expires = answer["status"]["expirationTimestamp"]
        .as_str()
        .and_then(parse_rfc3339)
        .unwrap_or(now + granted);
    Ok(Token {
        token,
        issued: expires - granted,
        expires,
    })
}

/// Whether a token must be requested now.
pub fn token_due(current: Option<&Token>, now_secs: i64) -> bool {
    current.is_none_or(|t| now_secs >= t.refresh_at())
}

// ---- checkpoint ----

#[derive(Serialize, Deserialize)]
struct SavedObject {
    kind: String,
    key: String,
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    missing: bool,
    #[serde(default)]
    data: BTreeMap<String, String>,
}

#[derive(Serialize, Deserialize)]
struct SavedToken {
    key: String,
    token: String,
    issued: i64,
    expires: i64,
}

#[derive(Serialize, Deserialize)]
struct SavedBundle {
    name: String,
    #[serde(default, skip_serializing_if = "String::is_empty")]
    signer_name: String,
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    labels: BTreeMap<String, String>,
    trust_bundle: String,
}

#[derive(Serialize, Deserialize, Default)]
struct Saved {
    objects: Vec<SavedObject>,
    tokens: Vec<SavedToken>,
    /// The ClusterTrustBundles, when they were listed (absent in older checkpoints).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    bundles: Option<Vec<SavedBundle>>,
}

fn encode_checkpoint(c: &Contents) -> Vec<u8> {
    let saved = Saved {
        objects: c
            .objects
            .iter()
            .map(|((kind, key), o)| SavedObject {
                kind: kind.as_str().to_owned(),
                key: key.clone(),
                missing: *o == Object::Missing,
                data: match o {
                    Object::Present(d) => d
                        .iter()
                        .map(|(k, v)| (k.clone(), b64().encode(v)))
                        .collect(),
                    Object::Missing => BTreeMap::new(),
                },
            })
            .collect(),
        tokens: c
            .tokens
            .iter()
            .map(|(key, t)| SavedToken {
                key: key.clone(),
                token: t.token.clone(),
                issued: t.issued,
                expires: t.expires,
            })
            .collect(),
        bundles: c.bundles.as_ref().map(|all| {
            all.iter()
                .map(|(name, b)| SavedBundle {
                    name: name.clone(),
                    signer_name: b.signer_name.clone(),
                    labels: b.labels.clone(),
                    trust_bundle: b.trust_bundle.clone(),
                })
                .collect()
        }),
    };
    serde_json::to_vec(&saved).unwrap_or_default()
}

/// Reads the checkpoint into `store`. A missing file is "nothing known"; an unreadable one is
/// reported (naming the file) and ignored: the apiserver is then asked again.
pub fn load_checkpoint(path: &Path, store: &Store) -> Result<usize, String> {
    let Some(saved) = crate::atomic_file::read_json::<Saved>(path, MAX_CHECKPOINT)? else {
        return Ok(0);
    };
    let mut c = Contents::default();
    for o in saved.objects {
        let kind = match o.kind.as_str() {
            "configmap" => Kind::ConfigMap,
            "secret" => Kind::Secret,
            other => return Err(format!("{}: unknown kind {other:?}", path.display())),
        };
        let obj = if o.missing {
            Object::Missing
        } else {
            let mut d = Data::new();
            for (k, v) in o.data {
                let bytes = b64()
                    .decode(v)
                    .map_err(|e| format!("{}: {}: {e}", path.display(), o.key))?;
                d.insert(k, bytes);
            }
            Object::Present(Arc::new(d))
        };
        c.objects.insert((kind, o.key), obj);
    }
    for t in saved.tokens {
        c.tokens.insert(
            t.key,
            Token {
                token: t.token,
                issued: t.issued,
                expires: t.expires,
            },
        );
    }
    c.bundles = saved.bundles.map(|all| {
        Arc::new(
            all.into_iter()
                .map(|b| {
                    let bundle = Bundle {
                        signer_name: b.signer_name,
                        labels: b.labels,
                        trust_bundle: b.trust_bundle,
                    };
                    (b.name, bundle)
                })
                .collect(),
        )
    });
    let n = c.objects.len() + c.tokens.len() + c.bundles.as_ref().map_or(0, |b| b.len());
    *store.lock() = c;
    Ok(n)
}

/// Writes the checkpoint (secrets and tokens inside: owner-only) when it changed since `last`.
fn save_checkpoint(path: &Path, bytes: Vec<u8>, last: &mut Vec<u8>) {
    if bytes == *last {
        return;
    }
    if bytes.len() > MAX_CHECKPOINT {
        log::warn!(
            "not checkpointing the pods' objects: larger than {MAX_CHECKPOINT} bytes; a restart \
             without the apiserver would not find them"
        );
        return;
    }
    match crate::atomic_file::write_mode(path, &bytes, 0o600) {
        Ok(()) => *last = bytes,
        Err(e) => log::warn!("writing {}: {e}", path.display()),
    }
}

// ---- the task ----

type ObjKey = (Kind, String, String);

/// One ConfigMap or Secret, listed and watched on its own (`fieldSelector=metadata.name=`).
struct OneObject {
    key: ObjKey,
    resource_version: String,
    /// What the last list or event said; none before the first list.
    current: Option<Object>,
    /// The object is immutable: it cannot change, so its watch ends (as the kubelet's does).
    immutable: bool,
}

impl OneObject {
    fn decode(&mut self, v: &Value) -> Result<Object, ObjectError> {
        self.immutable = v["immutable"] == true;
        decode_object(self.key.0, v)
            .map(|d| Object::Present(Arc::new(d)))
            .map_err(|e| ObjectError::Decode {
                what: Some(self.key.0.as_str()),
                source: e.into(),
            })
    }

    /// Takes what a list or an event says; true when it changed.
    fn take(&mut self, o: Object) -> bool {
        let changed = self.current.as_ref() != Some(&o);
        self.current = Some(o);
        changed
    }
}

impl Watched for OneObject {
    fn what(&self) -> &'static str {
        self.key.0.resource()
    }

    fn path(&self, query: &str) -> String {
        let (kind, ns, name) = &self.key;
        format!(
            "/api/v1/namespaces/{ns}/{}?fieldSelector=metadata.name%3D{name}{query}",
            kind.resource()
        )
    }

    fn replace(&mut self, list: Value) -> Result<(), ObjectError> {
        let items = match list.get("items") {
            None | Some(Value::Null) => &[][..],
            Some(Value::Array(items)) => &items[..],
            Some(_) => return Err(ObjectError::NotAnArray("items")),
        };
        let name = &self.key.2;
        let o = match items.iter().find(|i| i["metadata"]["name"] == **name) {
            Some(v) => self.decode(v)?,
            None => {
                self.immutable = false;
                Object::Missing
            }
        };
        self.resource_version = watch::list_resource_version(&list);
        self.take(o);
        Ok(())
    }

    fn apply_object(&mut self, event: Event, object: Value) -> Result<bool, ObjectError> {
        if object["metadata"]["name"] != *self.key.2 {
            return Ok(false);
        }
        let o = match event {
            Event::Deleted => {
                self.immutable = false;
                Object::Missing
            }
            Event::Added | Event::Modified => self.decode(&object)?,
        };
        Ok(self.take(o))
    }

    fn resource_version(&mut self) -> &mut String {
        &mut self.resource_version
    }

    fn count(&self) -> usize {
        usize::from(matches!(self.current, Some(Object::Present(_))))
    }
}

/// Lists and watches one object on the calling thread, sending what it holds after the list
/// and after each change, until `alive` is cleared or the task is gone.
fn watch_object(
    client: &Client,
    key: ObjKey,
    alive: &AtomicBool,
    seen: &async_channel::Sender<(ObjKey, Object)>,
) {
    let (kind, ns, name) = key.clone();
    let mut set = OneObject {
        key: key.clone(),
        resource_version: String::new(),
        current: None,
        immutable: false,
    };
    let mut jitter = Jitter::new(&format!("{}:{ns}/{name}", kind.as_str()));
    let opts = watch::Options {
        poll_interval: None,
        log_prefix: "api objects",
        forbidden_hint: format!(
            "{} {ns}/{name}: the pods using it wait; a node may read only what the pods bound \
             to it use",
            kind.as_str()
        ),
    };
    let running = || alive.load(Ordering::Relaxed) && !seen.is_closed();
    let mut emit = |set: &OneObject| {
        if let Some(o) = &set.current
            && seen.send_blocking((key.clone(), o.clone())).is_err()
        {
            return false;
        }
        // An immutable object is read once: its watch ends here, and is not started again.
        !set.immutable && running()
    };
    watch::run(client, &mut set, &opts, &mut jitter, &running, &mut emit);
}

/// Every ClusterTrustBundle, listed and watched as one collection.
#[derive(Default)]
struct BundleSet {
    bundles: Bundles,
    resource_version: String,
}

impl BundleSet {
    fn decode(v: &Value) -> Result<(String, Bundle), ObjectError> {
        decode_bundle(v).map_err(|e| ObjectError::Decode {
            what: Some("clustertrustbundle"),
            source: e.into(),
        })
    }
}

impl Watched for BundleSet {
    fn what(&self) -> &'static str {
        "clustertrustbundles"
    }

    fn path(&self, query: &str) -> String {
        let base = "/apis/certificates.k8s.io/v1/clustertrustbundles";
        match query.strip_prefix('&') {
            Some(q) => format!("{base}?{q}"),
            None if query.is_empty() => base.to_owned(),
            None => format!("{base}?{query}"),
        }
    }

    fn replace(&mut self, list: Value) -> Result<(), ObjectError> {
        let items = match list.get("items") {
            None | Some(Value::Null) => &[][..],
            Some(Value::Array(items)) => &items[..],
            Some(_) => return Err(ObjectError::NotAnArray("items")),
        };
        let mut all = Bundles::new();
        for (i, v) in items.iter().enumerate() {
            let (name, b) = Self::decode(v).map_err(|e| ObjectError::item("items", i, e))?;
            all.insert(name, b);
        }
        self.bundles = all;
        self.resource_version = watch::list_resource_version(&list);
        Ok(())
    }

    fn apply_object(&mut self, event: Event, object: Value) -> Result<bool, ObjectError> {
        let (name, b) = Self::decode(&object)?;
        Ok(match event {
            Event::Deleted => self.bundles.remove(&name).is_some(),
            Event::Added | Event::Modified => self.bundles.insert(name, b.clone()) != Some(b),
        })
    }

    fn resource_version(&mut self) -> &mut String {
        &mut self.resource_version
    }

    fn count(&self) -> usize {
        self.bundles.len()
    }
}

/// Lists and watches every ClusterTrustBundle on the calling thread, sending them all (with
/// `generation`) after the list and after each change, until `alive` is cleared.
fn watch_bundles(
    client: &Client,
    generation: u64,
    alive: &AtomicBool,
    seen: &async_channel::Sender<(u64, Arc<Bundles>)>,
) {
    let mut set = BundleSet::default();
    let mut jitter = Jitter::new("clustertrustbundles");
    let opts = watch::Options {
        poll_interval: None,
        log_prefix: "api objects",
        forbidden_hint: "the pods projecting ClusterTrustBundles wait; the Node authorizer \
                         lets a node get, list and watch them"
            .into(),
    };
    let running = || alive.load(Ordering::Relaxed) && !seen.is_closed();
    let mut emit = |set: &BundleSet| {
        seen.send_blocking((generation, Arc::new(set.bundles.clone())))
            .is_ok()
            && running()
    };
    watch::run(client, &mut set, &opts, &mut jitter, &running, &mut emit);
}

/// What a watch saw while the task waited.
enum Heard {
    Object(ObjKey, Object),
    Bundles(u64, Arc<Bundles>),
    Requests(u64, Arc<Requests>),
}

struct Fetcher {
    client: Client,
    store: Store,
    jitter: Jitter,
    /// How often an object is read again; none: each is watched.
    ttl: Option<Duration>,
    /// The objects watched, each with the flag that ends its watch.
    watches: HashMap<ObjKey, Arc<AtomicBool>>,
    /// Where the watches send what they see.
    seen: async_channel::Sender<(ObjKey, Object)>,
    /// The watch of the ClusterTrustBundles, while a pod projects one: its generation (what
    /// an older watch still sends is not taken) and the flag that ends it.
    bundle_watch: Option<(u64, Arc<AtomicBool>)>,
    bundle_generation: u64,
    bundles_seen: async_channel::Sender<(u64, Arc<Bundles>)>,
    bundles_unused_since: Option<Instant>,
    /// When each object is next read; absent: read it now.
    next: HashMap<ObjKey, Instant>,
    /// Consecutive failures per object or token key, for the backoff.
    failures: HashMap<String, u32>,
    /// Token keys waiting after a failure, until when.
    token_wait: HashMap<String, Instant>,
    unused_since: HashMap<String, Instant>,
    /// What a refusal was already said of (once each, not once per retry).
    told: BTreeSet<String>,
    /// Pod certificates: the node's name and UID (read once), the manager, the watch of the
    /// node's requests (generation and flag) and what it last sent, the sources waiting after a
    /// failed creation, until when.
    node_name: String,
    node_uid: String,
    pod_certs: crate::podcertificate::Manager,
    request_watch: Option<(u64, Arc<AtomicBool>)>,
    request_generation: u64,
    requests_seen: async_channel::Sender<(u64, Arc<Requests>)>,
    requests: Option<Arc<Requests>>,
    requests_unused_since: Option<Instant>,
    create_wait: HashMap<String, Instant>,
}

async fn call(
    c: Client,
    method: &'static str,
    path: String,
    body: Option<Value>,
) -> Result<Value, ApiError> {
    rt::unblock(move || {
        let body = body.map(|b| {
            (
                "application/json",
                serde_json::to_vec(&b).unwrap_or_default(),
            )
        });
        c.json::<Value>(method, &path, body)
    })
    .await
}

impl Fetcher {
    fn failed(&mut self, what: &str, key: &str, e: &ApiError) -> Duration {
        let n = self.failures.entry(key.to_owned()).or_default();
        *n = n.saturating_add(1);
        let wait = backoff_delay(*n, &mut self.jitter).max(Duration::from_secs(1));
        if e.is_forbidden() {
            if self.told.insert(key.to_owned()) {
                log::error!(
                    "{what}: {e}: the apiserver refuses it to this node (a node may read only \
                     what the pods bound to it use)"
                );
            }
        } else if *n == 1 || (*n >= 8 && n.is_power_of_two()) {
            // The first failure, then at doubling counts: an outage is said, not flooded.
            log::warn!("{what}: {e} (retrying)");
        }
        wait
    }

    /// Reads one object.
    fn fetch(&self, k: &ObjKey) -> impl Future<Output = Result<Value, ApiError>> + use<> {
        let (kind, ns, name) = k;
        let path = format!("/api/v1/namespaces/{ns}/{}/{name}", kind.resource());
        call(self.client.clone(), "GET", path, None)
    }

    /// Takes in what reading one object answered; returns whether the store changed.
    fn fetched(&mut self, k: &ObjKey, answer: Result<Value, ApiError>) -> bool {
        let (kind, ns, name) = k;
        let id = format!("{}:{ns}/{name}", kind.as_str());
        let got = match answer {
            Ok(v) => match decode_object(*kind, &v) {
                Ok(d) => Object::Present(Arc::new(d)),
                Err(m) => {
                    log::warn!("{} {ns}/{name}: {m}", kind.as_str());
                    self.next.insert(k.clone(), rt::now() + OBJECT_TTL);
                    return false;
                }
            },
            Err(e) if e.is_not_found() => Object::Missing,
            Err(e) => {
                let wait = self.failed(&format!("reading {} {ns}/{name}", kind.as_str()), &id, &e);
                self.next.insert(k.clone(), rt::now() + wait);
                return false;
            }
        };
        self.failures.remove(&id);
        self.told.remove(&id);
        let ttl = self.ttl.unwrap_or(OBJECT_TTL);
        let spread = self.jitter.below(ttl / 10);
        self.next.insert(k.clone(), rt::now() + ttl + spread);
        self.put(k, got)
    }

    /// Stores what an object holds; returns whether the store changed.
    fn put(&self, k: &ObjKey, got: Object) -> bool {
        let (kind, ns, name) = k;
        let mut store = self.store.lock();
        let slot = (*kind, format!("{ns}/{name}"));
        if store.objects.get(&slot) == Some(&got) {
            return false;
        }
        store.objects.insert(slot, got);
        true
    }

    /// Starts the watch of the ClusterTrustBundles when it is not running.
    fn watch_bundles(&mut self) {
        if self.bundle_watch.is_some() {
            return;
        }
        self.bundle_generation += 1;
        let generation = self.bundle_generation;
        let alive = Arc::new(AtomicBool::new(true));
        let (client, flag, seen) = (
            self.client.clone(),
            alive.clone(),
            self.bundles_seen.clone(),
        );
        let spawned = std::thread::Builder::new()
            .name("api-bundles".into())
            .spawn(move || watch_bundles(&client, generation, &flag, &seen));
        match spawned {
            Ok(_) => self.bundle_watch = Some((generation, alive)),
            // Tried again next round.
            Err(e) => log::warn!("starting the watch of ClusterTrustBundles: {e}"),
        }
    }

    /// Stores what the ClusterTrustBundle watch of `generation` saw; true when it changed.
    fn put_bundles(&self, generation: u64, all: Arc<Bundles>) -> bool {
        if self.bundle_watch.as_ref().map(|(g, _)| *g) != Some(generation) {
            return false;
        }
        let mut store = self.store.lock();
        if store.bundles.as_deref() == Some(&*all) {
            return false;
        }
        store.bundles = Some(all);
        true
    }

    /// Starts the watch of the node's PodCertificateRequests when it is not running.
    fn watch_requests(&mut self) {
        if self.request_watch.is_some() {
            return;
        }
        self.request_generation += 1;
        let generation = self.request_generation;
        let alive = Arc::new(AtomicBool::new(true));
        let (client, node, flag, seen) = (
            self.client.clone(),
            self.node_name.clone(),
            alive.clone(),
            self.requests_seen.clone(),
        );
        let spawned = std::thread::Builder::new()
            .name("api-podcerts".into())
            .spawn(move || {
                super::podcertificate::watch_requests(&client, &node, generation, &flag, &seen)
            });
        match spawned {
            Ok(_) => self.request_watch = Some((generation, alive)),
            // Tried again next round.
            Err(e) => log::warn!("starting the watch of PodCertificateRequests: {e}"),
        }
    }

    /// Takes what the request watch of `generation` saw; true when it is the current one.
    fn put_requests(&mut self, generation: u64, all: Arc<Requests>) -> bool {
        if self.request_watch.as_ref().map(|(g, _)| *g) != Some(generation) {
            return false;
        }
        self.requests = Some(all);
        true
    }

    /// The pod certificate manager's step, its events, and the requests it asks for created
    /// (each answer taken as it comes). Returns the pods whose files changed.
    async fn pod_certificates(&mut self, needs: &Needs) -> BTreeSet<String> {
        let now = rt::now();
        let secs = now_secs();
        let step = {
            let mut store = self.store.lock();
            self.pod_certs.step(
                secs,
                &needs.pod_certificates,
                self.requests.as_deref(),
                &mut store,
            )
        };
        for (k, reason, message) in &step.events {
            if let Some(n) = needs.pod_certificates.get(k) {
                let pod = crate::events::ObjectRef {
                    kind: "Pod",
                    namespace: n.namespace.clone(),
                    name: n.pod_name.clone(),
                    uid: n.pod_uid.clone(),
                    field_path: String::new(),
                };
                crate::events::record(&pod, crate::events::Type::Warning, reason, message);
            }
        }
        self.create_wait
            .retain(|k, _| needs.pod_certificates.contains_key(k));
        let gone = |id: &String| {
            id.strip_prefix("podcert:")
                .is_some_and(|k| !needs.pod_certificates.contains_key(k))
        };
        self.failures.retain(|id, _| !gone(id));
        self.told.retain(|id| !gone(id));
        let due: Vec<(String, crate::objects::PodCertificateNeed)> = step
            .create
            .iter()
            .filter(|k| self.create_wait.get(*k).is_none_or(|t| *t <= now))
            .filter_map(|k| Some((k.clone(), needs.pod_certificates.get(k)?.clone())))
            .collect();
        for (k, need) in due {
            let (client, node, mut node_uid) = (
                self.client.clone(),
                self.node_name.clone(),
                self.node_uid.clone(),
            );
            let n = need.clone();
            let (answer, uid) = rt::unblock(move || {
                let a = super::podcertificate::create_request(&client, &node, &mut node_uid, &n);
                (a, node_uid)
            })
            .await;
            let what = format!(
                "creating a PodCertificateRequest for pod {}/{} (volume {:?}, signer {})",
                need.namespace, need.pod_name, need.volume, need.source.signer_name
            );
            match answer {
                Ok((name, key)) => {
                    self.node_uid = uid;
                    let id = format!("podcert:{k}");
                    self.failures.remove(&id);
                    self.told.remove(&id);
                    self.create_wait.remove(&k);
                    log::debug!("{what}: {name}");
                    // The node's own clock: a request not seen 10 min after the node made it is
                    // taken as deleted, whatever the apiserver's clock says.
                    self.pod_certs.created(&k, name, now_secs(), key);
                }
                Err(e) => {
                    // The node's UID is read again: the Node may have been made anew.
                    self.node_uid.clear();
                    let wait = self.failed(&what, &format!("podcert:{k}"), &e);
                    self.create_wait.insert(k, rt::now() + wait);
                }
            }
        }
        step.changed
    }

    /// Starts the watch of an object that has none.
    fn watch(&mut self, k: &ObjKey) {
        if self.watches.contains_key(k) {
            return;
        }
        let alive = Arc::new(AtomicBool::new(true));
        let (client, key, flag, seen) = (
            self.client.clone(),
            k.clone(),
            alive.clone(),
            self.seen.clone(),
        );
        let spawned = std::thread::Builder::new()
            .name("api-object".into())
            .spawn(move || watch_object(&client, key, &flag, &seen));
        match spawned {
            Ok(_) => {
                self.watches.insert(k.clone(), alive);
            }
            // Tried again next round.
            Err(e) => log::warn!(
                "starting the watch of {} {}/{}: {e}",
                k.0.as_str(),
                k.1,
                k.2
            ),
        }
    }

    /// Requests one token.
    fn request_token(
        &self,
        spec: &TokenSpec,
    ) -> impl Future<Output = Result<Value, ApiError>> + use<> {
        let path = format!(
            "/api/v1/namespaces/{}/serviceaccounts/{}/token",
            spec.namespace, spec.service_account
        );
        call(self.client.clone(), "POST", path, Some(token_request(spec)))
    }

    /// Takes in what requesting one token answered; returns whether the store changed.
    fn token_answered(
        &mut self,
        key: &str,
        spec: &TokenSpec,
        answer: Result<Value, ApiError>,
    ) -> bool {
        let what = format!(
            "requesting a token for service account {}/{} (pod {})",
            spec.namespace, spec.service_account, spec.pod_name
        );
        match answer
            .map_err(|e| (e.to_string(), Some(e)))
            .and_then(|a| token_of(&a, spec.expiration_seconds).map_err(|m| (m, None)))
        {
            Ok(t) => {
                self.failures.remove(key);
                self.told.remove(key);
                self.token_wait.remove(key);
                log::debug!("{what}: valid until {}", t.expires);
                self.store.lock().tokens.insert(key.to_owned(), t);
                true
            }
            Err((m, e)) => {
                let e = e.unwrap_or_else(|| ApiError::decode("TokenRequest", m));
                let wait = self.failed(&what, key, &e);
                self.token_wait.insert(key.to_owned(), rt::now() + wait);
                false
            }
        }
    }

    /// One round: read what is due (the pods each answer makes ready handed to `ready` as soon
    /// as it comes), drop what no pod used for a while. Returns whether the store changed.
    async fn round(&mut self, needs: &Needs, ready: &dyn Fn(BTreeSet<String>)) -> bool {
        let now = rt::now();
        let mut changed = false;
        if self.ttl.is_none() {
            for k in needs.objects.keys() {
                self.watch(k);
            }
        }
        if !needs.bundles.is_empty() {
            self.watch_bundles();
        }
        if !needs.pod_certificates.is_empty() {
            self.watch_requests();
        }
        let pods = self.pod_certificates(needs).await;
        if !pods.is_empty() {
            ready(pods);
        }
        let due: Vec<(ObjKey, BTreeSet<String>)> = needs
            .objects
            .iter()
            .filter(|(k, _)| self.ttl.is_some() && self.next.get(*k).is_none_or(|t| *t <= now))
            .map(|(k, v)| (k.clone(), v.clone()))
            .collect();
        let calls: Vec<_> = due.iter().map(|(k, _)| self.fetch(k)).collect();
        each_as_ready(calls, PARALLEL, |i, answer| {
            let (k, uids) = &due[i];
            if self.fetched(k, answer) {
                changed = true;
                ready(uids.clone());
            }
        })
        .await;
        let secs = now_secs();
        let due: Vec<(String, TokenSpec)> = {
            let store = self.store.lock();
            needs
                .tokens
                .iter()
                .filter(|(k, _)| token_due(store.tokens.get(*k), secs))
                .filter(|(k, _)| self.token_wait.get(*k).is_none_or(|t| *t <= now))
                .map(|(k, s)| (k.clone(), s.clone()))
                .collect()
        };
        let calls: Vec<_> = due
            .iter()
            .map(|(_, spec)| self.request_token(spec))
            .collect();
        each_as_ready(calls, PARALLEL, |i, answer| {
            let (k, spec) = &due[i];
            if self.token_answered(k, spec, answer) {
                changed = true;
                ready(BTreeSet::from([spec.pod_uid.clone()]));
            }
        })
        .await;
        changed |= self.collect_unused(needs, now);
        changed
    }

    fn collect_unused(&mut self, needs: &Needs, now: Instant) -> bool {
        let used: BTreeSet<String> = needs
            .objects
            .keys()
            .map(|(k, ns, n)| format!("{}:{ns}/{n}", k.as_str()))
            .chain(needs.tokens.keys().map(|k| format!("token:{k}")))
            .collect();
        let mut store = self.store.lock();
        let held: Vec<String> = store
            .objects
            .keys()
            .map(|(k, key)| format!("{}:{key}", k.as_str()))
            .chain(store.tokens.keys().map(|k| format!("token:{k}")))
            .collect();
        self.unused_since.retain(|k, _| !used.contains(k));
        let mut changed = false;
        if !needs.pod_certificates.is_empty() {
            self.requests_unused_since = None;
        } else if self.request_watch.is_some() {
            let since = *self.requests_unused_since.get_or_insert(now);
            if now.saturating_duration_since(since) >= UNUSED_GRACE {
                self.requests_unused_since = None;
                self.requests = None;
                // It ends at its next event or renewal.
                if let Some((_, alive)) = self.request_watch.take() {
                    alive.store(false, Ordering::Relaxed);
                }
            }
        }
        if !needs.bundles.is_empty() {
            self.bundles_unused_since = None;
        } else if store.bundles.is_some() || self.bundle_watch.is_some() {
            let since = *self.bundles_unused_since.get_or_insert(now);
            if now.saturating_duration_since(since) >= UNUSED_GRACE {
                self.bundles_unused_since = None;
                changed |= store.bundles.take().is_some();
                // It ends at its next event or renewal.
                if let Some((_, alive)) = self.bundle_watch.take() {
                    alive.store(false, Ordering::Relaxed);
                }
            }
        }
        for h in held.into_iter().filter(|h| !used.contains(h)) {
            let since = *self.unused_since.entry(h.clone()).or_insert(now);
            if now.saturating_duration_since(since) < UNUSED_GRACE {
                continue;
            }
            self.unused_since.remove(&h);
            changed = true;
            if let Some(key) = h.strip_prefix("token:") {
                store.tokens.remove(key);
            } else if let Some((kind, key)) = h.split_once(':') {
                let kind = if kind == "secret" {
                    Kind::Secret
                } else {
                    Kind::ConfigMap
                };
                store.objects.remove(&(kind, key.to_owned()));
                if let Some((ns, name)) = key.split_once('/') {
                    let k = (kind, ns.to_owned(), name.to_owned());
                    self.next.remove(&k);
                    // Its watch ends at its next event or renewal.
                    if let Some(alive) = self.watches.remove(&k) {
                        alive.store(false, Ordering::Relaxed);
                    }
                }
            }
        }
        changed
    }
}

/// Keeps the store filled for the node's API pods, and its checkpoint written. `detection` says
/// how changes are seen; `sync_frequency` is how often `Get` reads an object again.
pub async fn run_objects(
    client: Client,
    kubelet: Rc<dyn Kubelet>,
    store: Store,
    checkpoint: Option<PathBuf>,
    detection: ChangeDetection,
    sync_frequency: Duration,
    node_name: String,
) {
    let (seen, seen_rx) = async_channel::unbounded();
    let (bundles_seen, bundles_rx) = async_channel::unbounded();
    let (requests_seen, requests_rx) = async_channel::unbounded();
    let mut f = Fetcher {
        client,
        store: store.clone(),
        jitter: Jitter::new("objects"),
        ttl: match detection {
            ChangeDetection::Watch => None,
            ChangeDetection::Cache => Some(OBJECT_TTL),
            ChangeDetection::Get => Some(sync_frequency),
        },
        watches: HashMap::new(),
        seen,
        bundle_watch: None,
        bundle_generation: 0,
        bundles_seen,
        bundles_unused_since: None,
        next: HashMap::new(),
        failures: HashMap::new(),
        token_wait: HashMap::new(),
        unused_since: HashMap::new(),
        told: BTreeSet::new(),
        node_name,
        node_uid: String::new(),
        pod_certs: crate::podcertificate::Manager::default(),
        request_watch: None,
        request_generation: 0,
        requests_seen,
        requests: None,
        requests_unused_since: None,
        create_wait: HashMap::new(),
    };
    let mut written = checkpoint
        .as_ref()
        .map(|_| encode_checkpoint(&store.lock()))
        .unwrap_or_default();
    let mut tick = rt::interval(ROUND);
    let pods_changed = kubelet.api_pods_changed();
    // What a watch said while the task waited.
    let mut heard: Option<Heard> = None;
    loop {
        let mut needs = Needs::default();
        for p in kubelet.api_pods() {
            needs.add_pod(&p);
        }
        let mut changed = f.round(&needs, &|uids| kubelet.sync_now(&uids)).await;
        let mut pods = BTreeSet::new();
        let mut requests_changed = false;
        // What the watches saw: the pods using a changed object sync at once.
        let mut take = |h: Heard| match h {
            Heard::Object(k, o) => {
                if f.watches.contains_key(&k) && f.put(&k, o) {
                    changed = true;
                    pods.extend(needs.objects.get(&k).into_iter().flatten().cloned());
                }
            }
            Heard::Bundles(generation, all) => {
                if f.put_bundles(generation, all) {
                    changed = true;
                    pods.extend(needs.bundles.iter().cloned());
                }
            }
            // Taken in by the manager's step, at once below.
            Heard::Requests(generation, all) => {
                requests_changed |= f.put_requests(generation, all);
            }
        };
        if let Some(h) = heard.take() {
            take(h);
        }
        while let Ok((k, o)) = seen_rx.try_recv() {
            take(Heard::Object(k, o));
        }
        while let Ok((g, all)) = bundles_rx.try_recv() {
            take(Heard::Bundles(g, all));
        }
        while let Ok((g, all)) = requests_rx.try_recv() {
            take(Heard::Requests(g, all));
        }
        if requests_changed {
            pods.extend(f.pod_certificates(&needs).await);
        }
        if !pods.is_empty() {
            kubelet.sync_now(&pods);
        }
        if changed && let Some(path) = &checkpoint {
            let bytes = encode_checkpoint(&store.lock());
            let path = path.clone();
            let last = std::mem::take(&mut written);
            written = rt::unblock(move || {
                let mut last = last;
                save_checkpoint(&path, bytes, &mut last);
                last
            })
            .await;
        }
        // The next round: at the tick, as soon as the loop has new or changed API pods, or
        // as soon as a watch saw an object.
        use futures_lite::future::or;
        heard = or(
            async {
                tick.tick().await;
                None
            },
            or(
                async {
                    if pods_changed.recv().await.is_err() {
                        std::future::pending::<()>().await;
                    }
                    None
                },
                or(
                    async {
                        let (k, o) = seen_rx.recv().await.ok()?;
                        Some(Heard::Object(k, o))
                    },
                    or(
                        async {
                            let (g, all) = bundles_rx.recv().await.ok()?;
                            Some(Heard::Bundles(g, all))
                        },
                        async {
                            let (g, all) = requests_rx.recv().await.ok()?;
                            Some(Heard::Requests(g, all))
                        },
                    ),
                ),
            ),
        )
        .await;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn objects_decode_as_the_api_returns_them() {
        let cm = json!({"data": {"a": "1"}, "binaryData": {"b": "AAE="}});
        let d = decode_object(Kind::ConfigMap, &cm).unwrap();
        assert_eq!(d["a"], b"1");
        assert_eq!(d["b"], vec![0u8, 1]);
        let s = json!({"data": {"pw": "aHVudGVyMg=="}});
        assert_eq!(decode_object(Kind::Secret, &s).unwrap()["pw"], b"hunter2");
        let bad = json!({"data": {"pw": "%%%"}});
        assert!(
            decode_object(Kind::Secret, &bad)
                .unwrap_err()
                .starts_with("data.pw: not base64")
        );
        assert!(decode_object(Kind::Secret, &json!({})).unwrap().is_empty());
    }

    #[test]
    fn one_object_is_listed_and_watched_by_name() {
        let mut o = OneObject {
            key: (Kind::ConfigMap, "ns".into(), "kube-root-ca.crt".into()),
            resource_version: String::new(),
            current: None,
            immutable: false,
        };
        assert_eq!(
            o.path("&watch=true"),
            "/api/v1/namespaces/ns/configmaps?fieldSelector=metadata.name%3Dkube-root-ca.crt&watch=true"
        );
        // Listed: there, or not.
        o.replace(json!({"metadata": {"resourceVersion": "7"}, "items": []}))
            .unwrap();
        assert!(o.current == Some(Object::Missing));
        assert_eq!(o.resource_version, "7");
        let cm = |v: &str| {
            json!({"metadata": {"name": "kube-root-ca.crt", "resourceVersion": "9"},
                   "data": {"ca.crt": v}})
        };
        o.replace(json!({"metadata": {"resourceVersion": "9"}, "items": [cm("A")]}))
            .unwrap();
        let a = |v: &str| {
            let d: Data = [("ca.crt".to_owned(), v.as_bytes().to_vec())]
                .into_iter()
                .collect();
            Some(Object::Present(Arc::new(d)))
        };
        assert!(o.current == a("A"));
        // Events: the same content is no change, new content is, deletion is Missing.
        assert!(!o.apply_object(Event::Modified, cm("A")).unwrap());
        assert!(o.apply_object(Event::Modified, cm("B")).unwrap());
        assert!(o.current == a("B"));
        let other = json!({"metadata": {"name": "other"}, "data": {"x": "y"}});
        assert!(!o.apply_object(Event::Modified, other).unwrap());
        assert!(o.apply_object(Event::Deleted, cm("B")).unwrap());
        assert!(o.current == Some(Object::Missing));
        // Bad data is refused by name.
        let bad = json!({"metadata": {"name": "kube-root-ca.crt"}, "data": {"k": 1}});
        let e = o.apply_object(Event::Added, bad).unwrap_err().to_string();
        assert_eq!(e, "configmap: data.k: not a string");
        // An immutable object says so.
        let mut fixed = cm("C");
        fixed["immutable"] = json!(true);
        assert!(o.apply_object(Event::Added, fixed).unwrap());
        assert!(o.immutable);
    }

    #[test]
    fn every_cluster_trust_bundle_is_listed_and_watched() {
        let mut set = BundleSet::default();
        assert_eq!(
            set.path(""),
            "/apis/certificates.k8s.io/v1/clustertrustbundles"
        );
        assert_eq!(
            set.path("&watch=true&resourceVersion=5"),
            "/apis/certificates.k8s.io/v1/clustertrustbundles?watch=true&resourceVersion=5"
        );
        let ctb = |name: &str, signer: &str, pem: &str| {
            json!({"apiVersion": "certificates.k8s.io/v1", "kind": "ClusterTrustBundle",
                   "metadata": {"name": name, "labels": {"alive": "true"}},
                   "spec": {"signerName": signer, "trustBundle": pem}})
        };
        set.replace(json!({"metadata": {"resourceVersion": "5"},
                           "items": [ctb("a", "x.io/s", "P1"), ctb("b", "", "P2")]}))
            .unwrap();
        assert_eq!(set.resource_version, "5");
        assert_eq!(set.bundles.len(), 2);
        assert_eq!(set.bundles["a"].signer_name, "x.io/s");
        assert_eq!(set.bundles["a"].labels["alive"], "true");
        assert_eq!(set.bundles["b"].trust_bundle, "P2");
        // The same content is no change; new content, a new bundle and a deletion are.
        assert!(
            !set.apply_object(Event::Modified, ctb("a", "x.io/s", "P1"))
                .unwrap()
        );
        assert!(
            set.apply_object(Event::Modified, ctb("a", "x.io/s", "P3"))
                .unwrap()
        );
        assert!(
            set.apply_object(Event::Added, ctb("c", "x.io/s", "P4"))
                .unwrap()
        );
        assert!(
            set.apply_object(Event::Deleted, ctb("b", "", "P2"))
                .unwrap()
        );
        assert!(
            !set.apply_object(Event::Deleted, ctb("b", "", "P2"))
                .unwrap()
        );
        let names: Vec<&str> = set.bundles.keys().map(String::as_str).collect();
        assert_eq!(names, ["a", "c"]);
        assert_eq!(set.bundles["a"].trust_bundle, "P3");
        // A malformed bundle is refused by name and field.
        let bad = json!({"metadata": {"name": "z"}, "spec": {"trustBundle": 7}});
        let e = set.apply_object(Event::Added, bad).unwrap_err().to_string();
        assert_eq!(e, "clustertrustbundle: z: spec.trustBundle: not a string");
        let e = set
            .replace(json!({"items": [{"metadata": {}}]}))
            .unwrap_err()
            .to_string();
        assert_eq!(e, "items[0]: clustertrustbundle: metadata.name: empty");
    }

    #[test]
    fn rfc3339_parses_as_the_apiserver_writes_it() {
        assert_eq!(parse_rfc3339("1970-01-01T00:00:00Z"), Some(0));
        assert_eq!(parse_rfc3339("2023-11-14T22:13:20Z"), Some(1_700_000_000));
        assert_eq!(parse_rfc3339("2024-02-29T12:00:00Z"), Some(1_709_208_000));
        let now = rt::now_nanos() / 1_000_000_000;
        assert_eq!(
            parse_rfc3339(&crate::api::time::rfc3339(now * 1_000_000_000)),
            Some(now)
        );
        assert_eq!(parse_rfc3339("2024-13-01T00:00:00Z"), None);
        assert_eq!(parse_rfc3339("yesterday"), None);
    }

    #[test]
    fn token_requests_are_bound_to_the_pod() {
        let spec = TokenSpec {
            namespace: "ns".into(),
            service_account: "sa".into(),
            audience: String::new(),
            expiration_seconds: 3607,
            pod_name: "p".into(),
            pod_uid: "u1".into(),
        };
        let r = token_request(&spec);
        assert_eq!(r["spec"]["expirationSeconds"], 3607);
        assert_eq!(r["spec"]["audiences"], json!([]));
        assert_eq!(
            r["spec"]["boundObjectRef"],
            json!({"apiVersion": "v1", "kind": "Pod", "name": "p", "uid": "u1"})
        );
        let with = TokenSpec {
            audience: "vault".into(),
            ..spec
        };
        assert_eq!(token_request(&with)["spec"]["audiences"], json!(["vault"]));
    }

    #[test]
    fn tokens_refresh_at_80_percent_under_the_fake_clock() {
        let clock = rt::FakeClock::install();
        let exp = rfc_in(3607);
        let answer = json!({
            "spec": {"expirationSeconds": 3607},
            "status": {"token": "tok", "expirationTimestamp": exp},
        });
        let t = token_of(&answer, 3607).unwrap();
        assert_eq!(t.expires - t.issued, 3607);
        assert!(!token_due(Some(&t), now_secs()));
        // 79 % of the lifetime: not yet. 80 %: due.
        clock.advance(Duration::from_secs(3607 * 79 / 100));
        assert!(!token_due(Some(&t), now_secs()));
        clock.advance(Duration::from_secs(3607 / 100 + 2));
        assert!(token_due(Some(&t), now_secs()));
        // A token the apiserver extended to a year is renewed after a day.
        let long = json!({
            "spec": {"expirationSeconds": 31_536_000},
            "status": {"token": "tok", "expirationTimestamp": rfc_in(31_536_000)},
        });
        let t = token_of(&long, 3607).unwrap();
        clock.advance(Duration::from_secs(86_400 - 10));
        assert!(!token_due(Some(&t), now_secs()));
        clock.advance(Duration::from_secs(20));
        assert!(token_due(Some(&t), now_secs()));
        assert!(token_due(None, now_secs()));
        assert!(token_of(&json!({"status": {}}), 600).is_err());
    }

    fn rfc_in(secs: i64) -> String {
        crate::api::time::rfc3339((now_secs() + secs) * 1_000_000_000)
    }

    #[test]
    fn the_checkpoint_round_trips_is_owner_only_and_keeps_missing_apart() {
        let dir = std::env::temp_dir().join(format!("picolet-objckpt-{}", std::process::id()));
        let path = dir.join("objects.json");
        let _ = std::fs::remove_dir_all(&dir);
        let store = Store::default();
        assert_eq!(load_checkpoint(&path, &store).unwrap(), 0);
        {
            let mut c = store.lock();
            let d: Data = [("k".to_owned(), vec![0u8, 255])].into_iter().collect();
            c.objects
                .insert((Kind::Secret, "ns/s".into()), Object::Present(Arc::new(d)));
            c.objects
                .insert((Kind::ConfigMap, "ns/gone".into()), Object::Missing);
            c.tokens.insert(
                "u/ns/sa/3607/".into(),
                Token {
                    token: "tok".into(),
                    issued: 1,
                    expires: 3608,
                },
            );
            let b = Bundle {
                signer_name: "x.io/s".into(),
                labels: [("alive".to_owned(), "true".to_owned())].into(),
                trust_bundle: "PEM".into(),
            };
            c.bundles = Some(Arc::new([("x.io:s:1".to_owned(), b)].into()));
        }
        let mut last = Vec::new();
        save_checkpoint(&path, encode_checkpoint(&store.lock()), &mut last);
        use std::os::unix::fs::PermissionsExt;
        assert_eq!(
            std::fs::metadata(&path).unwrap().permissions().mode() & 0o777,
            0o600
        );
        let back = Store::default();
        assert_eq!(load_checkpoint(&path, &back).unwrap(), 4);
        assert_eq!(*back.lock(), *store.lock());
        // Bundles never listed stay unknown across a restart (not an empty list).
        store.lock().bundles = None;
        save_checkpoint(&path, encode_checkpoint(&store.lock()), &mut last);
        assert_eq!(load_checkpoint(&path, &back).unwrap(), 3);
        assert!(back.lock().bundles.is_none());
        std::fs::write(&path, b"{torn").unwrap();
        let e = load_checkpoint(&path, &back).unwrap_err();
        assert!(e.starts_with(&path.display().to_string()), "{e}");
        let _ = std::fs::remove_dir_all(&dir);
    }
}
