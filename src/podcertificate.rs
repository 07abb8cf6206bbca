//! Pod certificates (KEP-4317, feature `apiserver`), as upstream's `pkg/kubelet/podcertificate`:
//! for each `podCertificate` source of an API pod the node makes a key, asks the source's signer
//! for a certificate with a PodCertificateRequest (`certificates.k8s.io/v1`), waits for it to be
//! issued, hands the key and chain to the pod's volume, and asks again with a new key at the
//! certificate's `beginRefreshAt` (plus up to 5 minutes of jitter, as upstream).
//!
//! [`Manager`] is upstream's `IssuingManager` state machine as a pure step over the pods'
//! sources and the requests the node sees (`cluster::objects` lists and watches the requests of
//! the node, creates the ones [`Step::create`] names, and runs the step every round): a source
//! waits for its first request (`credential bundle is not issued yet`, the pod's volume not
//! ready), is fresh once it is issued, and keeps its credential while a refresh request waits. A
//! request denied or failed is final: the volume fails with the condition's reason and message,
//! and a Warning event says so once. A request created but not seen for 10 minutes is taken as
//! deleted and made again. As upstream, nothing survives a restart: the private keys live in
//! memory and in the pods' volumes only, never in a checkpoint, so a restarted node asks again.
//!
//! Keys come from ring: `ECDSAP256`, `ECDSAP384` and `ED25519`. ring cannot generate RSA or
//! ECDSA P-521 keys, so a source asking for `RSA3072`, `RSA4096` or `ECDSAP521` is refused
//! with a message naming the pod, the volume, the field and the value.

use std::collections::{BTreeMap, BTreeSet};
use std::sync::Arc;
use std::time::Duration;

use base64::Engine as _;
use serde_json::{Value, json};

use crate::apiclient::backoff::Jitter;
use crate::objects::{Contents, PodCertificateNeed, PodCredential};
use crate::pki::KeyAlgorithm;

/// A request created but not seen after this long (plus jitter) is taken as deleted, and a new
/// one is made (upstream's `assumeDeletedThreshold`).
pub const ASSUME_DELETED_AFTER_SECS: i64 = 600;
/// A certificate not refreshed this long after its `beginRefreshAt` is overdue (a Warning
/// event, once), as upstream's `refreshOverdueDuration`.
pub const REFRESH_OVERDUE_AFTER_SECS: i64 = 600;
/// The most jitter added to `beginRefreshAt` (and to the deletion threshold), as upstream's,
/// so the sources of many pods do not ask in step.
pub const JITTER: Duration = Duration::from_secs(300);

/// The key of a source's key type, or why the node cannot make it (pod, volume, field, value).
pub fn key_algorithm(need: &PodCertificateNeed) -> Result<KeyAlgorithm, String> {
    let kt = need.source.key_type.as_str();
    let field = || {
        format!(
            "pod {}/{}: volume {:?}: sources[{}].podCertificate.keyType {kt:?}",
            need.namespace, need.pod_name, need.volume, need.index
        )
    };
    match kt {
        "ECDSAP256" => Ok(KeyAlgorithm::EcdsaP256),
        "ECDSAP384" => Ok(KeyAlgorithm::EcdsaP384),
        "ED25519" => Ok(KeyAlgorithm::Ed25519),
        "RSA3072" | "RSA4096" | "ECDSAP521" => Err(format!(
            "{}: not supported by picolet, whose crypto library (ring) cannot generate RSA or \
             ECDSA P-521 keys; ECDSAP256, ECDSAP384 and ED25519 are",
            field()
        )),
        _ => Err(format!(
            "{}: unknown key type; supported: ECDSAP256, ECDSAP384, ED25519",
            field()
        )),
    }
}

/// A new key for a source (PKCS#8 PEM, as the volume gets it) and the stub PKCS#10 request
/// (DER) the PodCertificateRequest carries.
pub fn new_key(alg: KeyAlgorithm) -> Result<(Vec<u8>, Vec<u8>), crate::pki::PkiError> {
    let (pkcs8, csr) = crate::pki::new_key_and_stub_csr(alg)?;
    Ok((crate::pki::pem("PRIVATE KEY", &pkcs8).into_bytes(), csr))
}

/// The PodCertificateRequest the node creates for a source, as the kubelet's: named by the
/// apiserver (`generateName: req-`), owned by the pod, naming the pod, its service account and
/// the node with their UIDs, the source's signer, lifetime and annotations, and the stub
/// request.
pub fn request_body(
    need: &PodCertificateNeed,
    service_account_uid: &str,
    node_name: &str,
    node_uid: &str,
    stub_csr: &[u8],
) -> Value {
    let mut spec = json!({
        "signerName": need.source.signer_name,
        "podName": need.pod_name,
        "podUID": need.pod_uid,
        "serviceAccountName": need.service_account,
        "serviceAccountUID": service_account_uid,
        "nodeName": node_name,
        "nodeUID": node_uid,
        "stubPKCS10Request": base64::engine::general_purpose::STANDARD.encode(stub_csr),
    });
    if let Some(s) = need.source.max_expiration_seconds {
        spec["maxExpirationSeconds"] = json!(s);
    }
    if !need.source.user_annotations.is_empty() {
        spec["unverifiedUserAnnotations"] = json!(need.source.user_annotations);
    }
    json!({
        "apiVersion": "certificates.k8s.io/v1",
        "kind": "PodCertificateRequest",
        "metadata": {
            "namespace": need.namespace,
            "generateName": "req-",
            "ownerReferences": [{
                "apiVersion": "v1",
                "kind": "Pod",
                "name": need.pod_name,
                "uid": need.pod_uid,
            }],
        },
        "spec": spec,
    })
}

/// Where a request stands, as its conditions say (the first `Issued`, `Denied` or `Failed`
/// condition decides, as upstream reads them).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Outcome {
    Pending,
    Issued {
        /// The chain, each block written back as a bare `CERTIFICATE` block (upstream's
        /// `cleanCertificateChain`).
        chain: Arc<Vec<u8>>,
        begin_refresh_at: i64,
        not_after: i64,
    },
    Denied {
        reason: String,
        message: String,
    },
    Failed {
        reason: String,
        message: String,
    },
}

/// The requests of the node the watch holds: `namespace/name` to their outcome.
pub type Requests = BTreeMap<String, Outcome>;

/// A request's `namespace/name` and outcome, from the object the apiserver returns.
pub fn decode_request(v: &Value) -> Result<(String, Outcome), String> {
    let m = &v["metadata"];
    let (ns, name) = (
        m["namespace"].as_str().unwrap_or(""),
        m["name"].as_str().unwrap_or(""),
    );
    if name.is_empty() {
        return Err("metadata.name: empty".into());
    }
    let id = format!("{ns}/{name}");
    let st = &v["status"];
    let text = |c: &Value, k: &str| c[k].as_str().unwrap_or("").to_owned();
    let secs = |k: &str| -> Result<i64, String> {
        st[k]
            .as_str()
            .and_then(crate::api::time::parse_rfc3339)
            .ok_or_else(|| format!("{id}: status.{k}: not a time: {}", st[k]))
    };
    for c in st["conditions"].as_array().into_iter().flatten() {
        let outcome = match c["type"].as_str() {
            Some("Denied") => Outcome::Denied {
                reason: text(c, "reason"),
                message: text(c, "message"),
            },
            Some("Failed") => Outcome::Failed {
                reason: text(c, "reason"),
                message: text(c, "message"),
            },
            Some("Issued") => {
                let blocks =
                    crate::objects::pem_blocks(st["certificateChain"].as_str().unwrap_or(""));
                let chain: String = blocks
                    .iter()
                    .map(|d| crate::pki::pem("CERTIFICATE", d))
                    .collect();
                Outcome::Issued {
                    chain: Arc::new(chain.into_bytes()),
                    begin_refresh_at: secs("beginRefreshAt")?,
                    not_after: secs("notAfter")?,
                }
            }
            _ => continue,
        };
        return Ok((id, outcome));
    }
    Ok((id, Outcome::Pending))
}

/// The credential a source projects, and when it is to be refreshed.
#[derive(Clone)]
struct Current {
    key: Arc<Vec<u8>>,
    chain: Arc<Vec<u8>>,
    begin_refresh_at: i64,
    /// `beginRefreshAt` with the jitter added: when the refresh request is made.
    refresh_at: i64,
    not_after: i64,
    overdue_told: bool,
    expired_told: bool,
}

/// A request made and not yet answered: its key, its `namespace/name`, and when it is taken as
/// deleted if the watch has not shown it.
#[derive(Clone)]
struct Waiting {
    key: Arc<Vec<u8>>,
    request: String,
    abandon_at: i64,
}

/// Upstream's states of a projection: initial, wait, fresh, waitrefresh, denied or failed (one
/// final state here, with the volume's message).
#[derive(Clone)]
enum State {
    Initial,
    Wait(Waiting),
    Fresh(Current),
    WaitRefresh(Current, Waiting),
    Refused(String),
}

/// What one step asks of the task around it.
#[derive(Debug, Default, PartialEq, Eq)]
pub struct Step {
    /// The sources (store keys) a request is to be created for now.
    pub create: Vec<String>,
    /// The pods whose files changed (a credential issued or refused).
    pub changed: BTreeSet<String>,
    /// Warning events about a pod: (source key, reason, message).
    pub events: Vec<(String, &'static str, String)>,
}

/// The state of every podCertificate source of the node's pods.
pub struct Manager {
    states: BTreeMap<String, State>,
    jitter: Jitter,
}

impl Default for Manager {
    fn default() -> Manager {
        Manager {
            states: BTreeMap::new(),
            jitter: Jitter::new("podcertificates"),
        }
    }
}

impl std::fmt::Debug for Manager {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Manager")
            .field("sources", &self.states.len())
            .finish_non_exhaustive()
    }
}

impl Manager {
    fn jitter_secs(&mut self) -> i64 {
        i64::try_from(self.jitter.below(JITTER).as_secs()).unwrap_or(0)
    }

    /// Whether any source waits for a request (to be made, or to be answered).
    pub fn is_empty(&self) -> bool {
        self.states.is_empty()
    }

    /// One pass over the pods' sources at `now` (Unix seconds), with the requests the watch
    /// holds (`None` before its first list): moves each source along, puts each credential (or
    /// refusal) in `store`, drops the sources of pods gone.
    pub fn step(
        &mut self,
        now: i64,
        needs: &BTreeMap<String, PodCertificateNeed>,
        requests: Option<&Requests>,
        store: &mut Contents,
    ) -> Step {
        let mut out = Step::default();
        self.states.retain(|k, _| needs.contains_key(k));
        store.pod_certificates.retain(|k, _| needs.contains_key(k));
        for (k, need) in needs {
            let state = self.states.get(k).cloned().unwrap_or(State::Initial);
            let next = match state {
                State::Initial => match key_algorithm(need) {
                    Ok(_) => {
                        out.create.push(k.clone());
                        State::Initial
                    }
                    Err(m) => {
                        log::error!("{m}");
                        State::Refused(m)
                    }
                },
                State::Wait(w) => match requests.and_then(|r| r.get(&w.request)) {
                    None if now >= w.abandon_at => {
                        log::warn!(
                            "PodCertificateRequest {} appears to have been deleted; asking again",
                            w.request
                        );
                        out.create.push(k.clone());
                        State::Initial
                    }
                    None | Some(Outcome::Pending) => State::Wait(w),
                    Some(o) => self.answered(k, &w, o, None, &mut out),
                },
                State::Fresh(mut c) => {
                    self.tell_late(k, &mut c, now, &mut out);
                    if now >= c.refresh_at {
                        out.create.push(k.clone());
                    }
                    State::Fresh(c)
                }
                State::WaitRefresh(mut c, w) => {
                    self.tell_late(k, &mut c, now, &mut out);
                    match requests.and_then(|r| r.get(&w.request)) {
                        None if now >= w.abandon_at => {
                            log::warn!(
                                "PodCertificateRequest {} appears to have been deleted; asking \
                                 again",
                                w.request
                            );
                            out.create.push(k.clone());
                            State::Fresh(c)
                        }
                        None | Some(Outcome::Pending) => State::WaitRefresh(c, w),
                        Some(o) => self.answered(k, &w, o, Some(c), &mut out),
                    }
                }
                State::Refused(m) => State::Refused(m),
            };
            let credential = match &next {
                State::Fresh(c) | State::WaitRefresh(c, _) => Some(PodCredential::Issued {
                    key: c.key.clone(),
                    chain: c.chain.clone(),
                }),
                State::Refused(m) => Some(PodCredential::Refused(m.clone())),
                State::Initial | State::Wait(_) => None,
            };
            if store.pod_certificates.get(k) != credential.as_ref() {
                match credential {
                    Some(c) => store.pod_certificates.insert(k.clone(), c),
                    None => store.pod_certificates.remove(k),
                };
                out.changed.insert(need.pod_uid.clone());
            }
            self.states.insert(k.clone(), next);
        }
        out
    }

    /// A request answered: issued (the new credential), denied or failed (final).
    fn answered(
        &mut self,
        k: &str,
        w: &Waiting,
        o: &Outcome,
        current: Option<Current>,
        out: &mut Step,
    ) -> State {
        let (verb, reason, message, event) = match o {
            Outcome::Issued {
                chain,
                begin_refresh_at,
                not_after,
            } => {
                let refresh_at = begin_refresh_at.saturating_add(self.jitter_secs());
                log::debug!(
                    "PodCertificateRequest {} issued; refreshed from {refresh_at}",
                    w.request
                );
                return State::Fresh(Current {
                    key: w.key.clone(),
                    chain: chain.clone(),
                    begin_refresh_at: *begin_refresh_at,
                    refresh_at,
                    not_after: *not_after,
                    overdue_told: false,
                    expired_told: false,
                });
            }
            Outcome::Pending => {
                return match current {
                    Some(c) => State::WaitRefresh(c, w.clone()),
                    None => State::Wait(w.clone()),
                };
            }
            Outcome::Denied { reason, message } => ("denied", reason, message, "Denied"),
            Outcome::Failed { reason, message } => ("failed", reason, message, "Failed"),
        };
        out.events.push((
            k.to_owned(),
            event,
            format!(
                "PodCertificateRequest {} {}, reason={reason:?}, message={message:?}",
                w.request,
                if verb == "denied" {
                    "was denied"
                } else {
                    "failed"
                }
            ),
        ));
        State::Refused(format!(
            "PodCertificateRequest was permanently {verb}: reason={reason:?} message={message:?}"
        ))
    }

    /// A refresh that is late, and a certificate that expired: a Warning event each, once.
    fn tell_late(&mut self, k: &str, c: &mut Current, now: i64, out: &mut Step) {
        if !c.overdue_told
            && now
                > c.begin_refresh_at
                    .saturating_add(REFRESH_OVERDUE_AFTER_SECS)
        {
            c.overdue_told = true;
            out.events.push((
                k.to_owned(),
                "CertificateOverdueForRefresh",
                "PodCertificate refresh overdue".into(),
            ));
        }
        if !c.expired_told && now > c.not_after {
            c.expired_told = true;
            out.events.push((
                k.to_owned(),
                "CertificateExpired",
                "PodCertificate expired".into(),
            ));
        }
    }

    /// A request created for source `k` at `created_at` (Unix seconds, by the node's clock:
    /// upstream counts from the request's `creationTimestamp`, which a skewed node would misread)
    /// with the key `key` (PEM): the source waits for it.
    pub fn created(&mut self, k: &str, request: String, created_at: i64, key: Vec<u8>) {
        let abandon_at = created_at
            .saturating_add(ASSUME_DELETED_AFTER_SECS)
            .saturating_add(self.jitter_secs());
        let w = Waiting {
            key: Arc::new(key),
            request,
            abandon_at,
        };
        let next = match self.states.remove(k) {
            Some(State::Fresh(c) | State::WaitRefresh(c, _)) => State::WaitRefresh(c, w),
            Some(State::Refused(m)) => State::Refused(m),
            None | Some(State::Initial | State::Wait(_)) => State::Wait(w),
        };
        self.states.insert(k.to_owned(), next);
    }
}

#[cfg(test)]
mod tests;
