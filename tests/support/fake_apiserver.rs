//! A fake kube-apiserver on loopback (plain HTTP, std threads), for what a real one cannot be
//! made to do on command: drop every watch, answer 410 Gone, refuse with 403, stall, cut the link
//! and leave its connections dead, silence the watches. It keeps
//! Nodes, Leases, Pods and Services as JSON with one resourceVersion counter and an event log, and
//! speaks the parts of the API a node agent uses: list (with `fieldSelector=spec.nodeName=` for
//! pods, `spec.clusterIP!=None` for services), watch
//! (chunked JSON lines, bookmarks when asked, `timeoutSeconds`, 410 for a compacted resourceVersion), create,
//! get, update, merge-patch (status subresource with a UID precondition, a resourceVersion in
//! the patch as a precondition), delete, and answers a write with the object's metadata alone
//! when asked (`as=PartialObjectMetadata`). It is not a
//! substitute for the real apiserver: the end-to-end cluster tests run one.

use std::collections::BTreeMap;
use std::io::{BufRead, BufReader, Read, Write};
use std::net::{TcpListener, TcpStream};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Condvar, Mutex};
use std::time::{Duration, Instant};

use serde_json::{Value, json};

#[derive(Default)]
struct State {
    rv: u64,
    /// Key ("nodes/n", "leases/kube-node-lease/n", "pods/ns/name") to object.
    objects: BTreeMap<String, Value>,
    /// (resourceVersion, type, object) of every pod change.
    pod_events: Vec<(u64, &'static str, Value)>,
    /// The same for Services.
    service_events: Vec<(u64, &'static str, Value)>,
    /// The same for ConfigMaps and Secrets, each with its key ("configmaps/ns/name").
    object_events: Vec<(u64, &'static str, Value)>,
    /// The same for ClusterTrustBundles (cluster-scoped: "clustertrustbundles/name").
    bundle_events: Vec<(u64, &'static str, Value)>,
    /// The same for PodCertificateRequests ("pcrs/ns/name").
    pcr_events: Vec<(u64, &'static str, Value)>,
    pcrs_made: u64,
    /// Watches asking for a resourceVersion below this get 410 Gone.
    compacted_below: u64,
    /// Every request: (method, path with query).
    requests: Vec<(String, String)>,
    /// When each request arrived, in order.
    times: Vec<Instant>,
    /// The body of each request (JSON, or null), in order.
    bodies: Vec<Value>,
    /// TCP connections accepted.
    connections: u64,
    /// Bytes received and sent (bodies and headers), for traffic figures.
    bytes_in: u64,
    bytes_out: u64,
    /// Bookmarks sent on every watch.
    bookmarks: u64,
    /// Bumped to end every open watch.
    watch_generation: u64,
    /// Requests whose path starts with one of these get 403.
    forbidden: Vec<String>,
    /// While set, requests are refused at once (the apiserver is "down").
    down: bool,
    /// While set, requests are read and never answered (a black-holed link).
    stalled: bool,
    /// While set, the link is cut: as `stalled`, and every connection open when it was cut, or
    /// opened while it is, stays dead for good (`link_cuts` counts the cuts).
    link_cut: bool,
    link_cuts: u64,
    /// Bumped to make every open watch fall silent for good (its connection left open).
    watch_silences: u64,
    /// The next this many requests of a method and path prefix are carried out and their
    /// answer lost (the connection closed instead): a write that landed while its caller saw a
    /// failure.
    lose_answers: Vec<(String, String, u32)>,
    /// TokenRequests received: ("token/<ns>/<sa>", body).
    token_requests: Vec<(String, Value)>,
    tokens_issued: u64,
    /// The `Authorization` header of every request ("" without one), in order.
    auths: Vec<String>,
    /// CertificateSigningRequests: signed at once for this long when set, else left pending
    /// until `approve_csr` or `deny_csr`.
    csr_auto_lifetime: Option<u64>,
    csrs_made: u64,
    /// Bearer tokens refused with 401 (a bootstrap token that expired).
    bad_tokens: Vec<String>,
}

#[derive(Clone)]
pub struct FakeApi {
    pub port: u16,
    state: Arc<(Mutex<State>, Condvar)>,
    stop: Arc<AtomicBool>,
    ca: Arc<picolet::pki::TestCa>,
}

fn status(code: u16, reason: &str, message: &str) -> Value {
    json!({"kind": "Status", "apiVersion": "v1", "status": "Failure", "code": code, "reason": reason, "message": message})
}

/// Whether a Service matches a list's or watch's field selector (only `spec.clusterIP!=None`).
fn service_selected(q: &BTreeMap<String, String>, o: &Value) -> bool {
    match q.get("fieldSelector").map(String::as_str) {
        Some("spec.clusterIP!=None") => o["spec"]["clusterIP"] != "None",
        _ => true,
    }
}

fn merge(into: &mut Value, patch: &Value) {
    match (into, patch) {
        (Value::Object(a), Value::Object(b)) => {
            for (k, v) in b {
                if v.is_null() {
                    a.remove(k);
                } else {
                    merge(a.entry(k.clone()).or_insert(Value::Null), v);
                }
            }
        }
        (a, b) => *a = b.clone(),
    }
}

/// A strategic merge patch as the apiserver applies one to a pod's status: `conditions`
/// merged by `type`, `podIPs` and `hostIPs` by `ip` (the entries the patch does not name kept,
/// one marked `$patch: delete` removed), everything else as in a merge patch.
fn strategic_merge(into: &mut Value, patch: &Value) {
    match (into, patch) {
        (Value::Object(a), Value::Object(b)) => {
            for (k, v) in b {
                if v.is_null() {
                    a.remove(k);
                } else if let Some(key) = match k.as_str() {
                    "conditions" => Some("type"),
                    "podIPs" | "hostIPs" => Some("ip"),
                    _ => None,
                } && let Value::Array(want) = v
                {
                    let slot = a.entry(k.clone()).or_insert(Value::Null);
                    if !slot.is_array() {
                        *slot = Value::Array(Vec::new());
                    }
                    let have = slot.as_array_mut().expect("an array, made so above");
                    for c in want {
                        if c["$patch"] == "delete" {
                            have.retain(|h| h[key] != c[key]);
                            continue;
                        }
                        match have.iter_mut().find(|h| h[key] == c[key]) {
                            Some(h) => *h = c.clone(),
                            None => have.push(c.clone()),
                        }
                    }
                } else {
                    strategic_merge(a.entry(k.clone()).or_insert(Value::Null), v);
                }
            }
        }
        (a, b) => *a = b.clone(),
    }
}

fn query(path: &str) -> (String, BTreeMap<String, String>) {
    let (p, q) = path.split_once('?').unwrap_or((path, ""));
    let q = q
        .split('&')
        .filter_map(|kv| kv.split_once('='))
        .map(|(k, v)| (k.to_owned(), v.replace("%3D", "=").replace("%21", "!")))
        .collect();
    (p.to_owned(), q)
}

/// Approves a CertificateSigningRequest object and puts the certificate the fake CA signs in
/// its status, valid from a second ago for `lifetime` seconds.
fn sign_csr(ca: &picolet::pki::TestCa, o: &mut Value, lifetime: u64) {
    use base64::Engine;
    let b64 = base64::engine::general_purpose::STANDARD;
    let req = b64
        .decode(o["spec"]["request"].as_str().unwrap_or(""))
        .unwrap_or_default();
    let now = picolet::api::time::unix_nanos_now() / 1_000_000_000;
    let server = o["spec"]["signerName"] == "kubernetes.io/kubelet-serving";
    let cert = ca
        .issue(
            &req,
            now - 1,
            now - 1 + i64::try_from(lifetime).unwrap(),
            server,
        )
        .expect("the fake CA signs the request");
    o["status"] = json!({
        "conditions": [{"type": "Approved", "status": "True", "reason": "AutoApproved", "message": "approved by the fake"}],
        "certificate": b64.encode(cert),
    });
}

impl State {
    /// Stores an object under `key`: the watch event's type, "ADDED" or "MODIFIED".
    fn upsert(&mut self, key: String, o: Value) -> &'static str {
        match self.objects.insert(key, o) {
            Some(_) => "MODIFIED",
            None => "ADDED",
        }
    }
}

impl FakeApi {
    pub fn start() -> FakeApi {
        let l = TcpListener::bind("127.0.0.1:0").expect("bind fake apiserver");
        let port = l.local_addr().unwrap().port();
        let api = FakeApi {
            port,
            state: Arc::new((Mutex::new(State::default()), Condvar::new())),
            stop: Arc::new(AtomicBool::new(false)),
            ca: Arc::new(picolet::pki::TestCa::new("fake-cluster-ca").unwrap()),
        };
        let a = api.clone();
        std::thread::spawn(move || {
            for conn in l.incoming() {
                if a.stop.load(Ordering::SeqCst) {
                    return;
                }
                let Ok(conn) = conn else { continue };
                a.with(|s| s.connections += 1);
                let a = a.clone();
                std::thread::spawn(move || a.serve(conn));
            }
        });
        api
    }

    pub fn url(&self) -> String {
        format!("http://127.0.0.1:{}", self.port)
    }

    /// A kubeconfig for this server with a bearer token.
    pub fn kubeconfig(&self, dir: &std::path::Path) -> std::path::PathBuf {
        let p = dir.join("kubeconfig");
        std::fs::write(
            &p,
            format!(
                "apiVersion: v1\nkind: Config\nclusters:\n- name: fake\n  cluster:\n    server: {}\n\
                 users:\n- name: node\n  user:\n    token: fake-token\ncontexts:\n- name: fake\n  context:\n    \
                 cluster: fake\n    user: node\ncurrent-context: fake\n",
                self.url()
            ),
        )
        .unwrap();
        p
    }

    fn with<T>(&self, f: impl FnOnce(&mut State) -> T) -> T {
        let (m, cv) = &*self.state;
        let r = f(&mut m.lock().unwrap());
        cv.notify_all();
        r
    }

    pub fn get(&self, key: &str) -> Option<Value> {
        self.with(|s| s.objects.get(key).cloned())
    }

    /// Stores `object` under `key` ("leases/kube-node-lease/n") as it is, as if another writer
    /// had made it.
    pub fn insert(&self, key: &str, object: Value) {
        self.with(|s| s.objects.insert(key.to_owned(), object));
    }

    /// Requests seen so far whose method and path start as given.
    pub fn count(&self, method: &str, path_prefix: &str) -> usize {
        self.with(|s| {
            s.requests
                .iter()
                .filter(|(m, p)| m == method && p.starts_with(path_prefix))
                .count()
        })
    }

    /// Lists of the node's pods received (watches not counted).
    pub fn pod_lists(&self) -> usize {
        self.with(|s| {
            s.requests
                .iter()
                .filter(|(m, p)| {
                    m == "GET" && p.starts_with("/api/v1/pods?") && !p.contains("watch=true")
                })
                .count()
        })
    }

    /// Watches of the node's pods received.
    pub fn pod_watches(&self) -> usize {
        self.count("GET", "/api/v1/pods?") - self.pod_lists()
    }

    /// The Event objects the node created, as they are now (patches applied).
    pub fn events(&self) -> Vec<Value> {
        self.with(|s| {
            s.objects
                .iter()
                .filter(|(k, _)| k.starts_with("events/"))
                .map(|(_, v)| v.clone())
                .collect()
        })
    }

    pub fn requests(&self) -> Vec<(String, String)> {
        self.with(|s| s.requests.clone())
    }

    /// When each request arrived, in the order of [`requests`](Self::requests).
    pub fn request_times(&self) -> Vec<Instant> {
        self.with(|s| s.times.clone())
    }

    /// The body of each request (null when it had none or it was not JSON), in the order of
    /// [`requests`](Self::requests).
    pub fn request_bodies(&self) -> Vec<Value> {
        self.with(|s| s.bodies.clone())
    }

    /// TCP connections accepted so far.
    pub fn connections(&self) -> u64 {
        self.with(|s| s.connections)
    }

    /// Bookmarks sent so far, on every watch (only to those that asked for them).
    pub fn bookmarks(&self) -> u64 {
        self.with(|s| s.bookmarks)
    }

    /// (bytes received, bytes sent) so far.
    pub fn traffic(&self) -> (u64, u64) {
        self.with(|s| (s.bytes_in, s.bytes_out))
    }

    /// Creates a pod (as a scheduler's binding would leave it) and records the event.
    pub fn create_pod(&self, mut pod: Value) {
        self.with(|s| {
            s.rv += 1;
            let ns = pod["metadata"]["namespace"]
                .as_str()
                .unwrap_or("default")
                .to_owned();
            let name = pod["metadata"]["name"].as_str().unwrap().to_owned();
            pod["metadata"]["namespace"] = json!(ns);
            pod["metadata"]["resourceVersion"] = json!(s.rv.to_string());
            if pod["metadata"]["uid"].is_null() {
                pod["metadata"]["uid"] = json!(format!("uid-{name}-{}", s.rv));
            }
            s.objects.insert(format!("pods/{ns}/{name}"), pod.clone());
            let rv = s.rv;
            s.pod_events.push((rv, "ADDED", pod));
        });
    }

    /// Creates or replaces a Service (`spec` as given), recording the event.
    pub fn put_service(&self, ns: &str, name: &str, spec: Value) {
        self.with(|s| {
            s.rv += 1;
            let key = format!("services/{ns}/{name}");
            let kind = if s.objects.contains_key(&key) {
                "MODIFIED"
            } else {
                "ADDED"
            };
            let o = json!({
                "apiVersion": "v1",
                "kind": "Service",
                "metadata": {"name": name, "namespace": ns, "resourceVersion": s.rv.to_string(),
                             "uid": format!("uid-svc-{name}")},
                "spec": spec,
                "status": {"loadBalancer": {}},
            });
            s.objects.insert(key, o.clone());
            let rv = s.rv;
            s.service_events.push((rv, kind, o));
        });
    }

    /// Deletes a Service, recording the event.
    pub fn delete_service(&self, ns: &str, name: &str) {
        self.with(|s| {
            if let Some(mut o) = s.objects.remove(&format!("services/{ns}/{name}")) {
                s.rv += 1;
                o["metadata"]["resourceVersion"] = json!(s.rv.to_string());
                let rv = s.rv;
                s.service_events.push((rv, "DELETED", o));
            }
        });
    }

    /// How many times the Services were listed (not watched).
    pub fn service_lists(&self) -> usize {
        self.with(|s| {
            s.requests
                .iter()
                .filter(|(m, p)| {
                    m == "GET" && p.starts_with("/api/v1/services?") && !p.contains("watch=true")
                })
                .count()
        })
    }

    /// Deletes a pod at once (grace 0) and records the event.
    /// Creates or replaces a ConfigMap (`data` as given) or a Secret (`data` base64-encoded by
    /// the caller), as kubectl would.
    pub fn put_object(&self, kind: &str, ns: &str, name: &str, data: Value) {
        self.with(|s| {
            s.rv += 1;
            let o = json!({
                "apiVersion": "v1",
                "kind": if kind == "secrets" { "Secret" } else { "ConfigMap" },
                "metadata": {"name": name, "namespace": ns, "resourceVersion": s.rv.to_string()},
                "data": data,
            });
            let t = s.upsert(format!("{kind}/{ns}/{name}"), o.clone());
            let rv = s.rv;
            s.object_events.push((rv, t, o));
        });
    }

    /// Creates or replaces a ClusterTrustBundle (`certificates.k8s.io/v1`).
    pub fn put_bundle(&self, name: &str, signer: &str, labels: Value, pem: &str) {
        self.with(|s| {
            s.rv += 1;
            let o = json!({
                "apiVersion": "certificates.k8s.io/v1",
                "kind": "ClusterTrustBundle",
                "metadata": {"name": name, "labels": labels, "resourceVersion": s.rv.to_string()},
                "spec": {"signerName": signer, "trustBundle": pem},
            });
            let t = s.upsert(format!("clustertrustbundles/{name}"), o.clone());
            let rv = s.rv;
            s.bundle_events.push((rv, t, o));
        });
    }

    /// Deletes a ClusterTrustBundle.
    pub fn delete_bundle(&self, name: &str) {
        self.with(|s| {
            if let Some(mut o) = s.objects.remove(&format!("clustertrustbundles/{name}")) {
                s.rv += 1;
                o["metadata"]["resourceVersion"] = json!(s.rv.to_string());
                let rv = s.rv;
                s.bundle_events.push((rv, "DELETED", o));
            }
        });
    }

    /// The PodCertificateRequests held, oldest first.
    pub fn pod_certificate_requests(&self) -> Vec<Value> {
        self.with(|s| {
            let mut v: Vec<Value> = s
                .objects
                .iter()
                .filter(|(k, _)| k.starts_with("pcrs/"))
                .map(|(_, o)| o.clone())
                .collect();
            v.sort_by_key(|o| o["metadata"]["creationIndex"].as_u64());
            v
        })
    }

    /// Sets a PodCertificateRequest's status as its signer would, and records the event.
    fn set_pcr_status(&self, ns: &str, name: &str, status: Value) {
        self.with(|s| {
            s.rv += 1;
            let rv = s.rv;
            let o = s
                .objects
                .get_mut(&format!("pcrs/{ns}/{name}"))
                .unwrap_or_else(|| panic!("no PodCertificateRequest {ns}/{name}"));
            o["status"] = status;
            o["metadata"]["resourceVersion"] = json!(rv.to_string());
            let o = o.clone();
            s.pcr_events.push((rv, "MODIFIED", o));
        });
    }

    /// Issues a PodCertificateRequest as a signer would: a certificate from the fake's CA for
    /// the public key of its stub request, valid from now for `lifetime` seconds (the
    /// request's `maxExpirationSeconds` when shorter), to be refreshed 30 minutes before its
    /// end (the e2e signer's choice). Returns the chain (PEM).
    pub fn issue_pcr(&self, ns: &str, name: &str, lifetime: i64) -> String {
        let now = picolet::api::time::unix_nanos_now() / 1_000_000_000;
        self.issue_pcr_at(ns, name, now, now + lifetime - 1800, now + lifetime)
    }

    /// [`FakeApi::issue_pcr`] with a certificate whose `beginRefreshAt` passed 5 minutes ago
    /// (and the jitter a node adds to it is below 5 minutes): due for a refresh at once.
    pub fn issue_pcr_due(&self, ns: &str, name: &str) -> String {
        let now = picolet::api::time::unix_nanos_now() / 1_000_000_000;
        self.issue_pcr_at(ns, name, now - 600, now - 300, now + 3000)
    }

    fn issue_pcr_at(
        &self,
        ns: &str,
        name: &str,
        not_before: i64,
        refresh: i64,
        not_after: i64,
    ) -> String {
        use base64::Engine;
        let o = self
            .with(|s| s.objects.get(&format!("pcrs/{ns}/{name}")).cloned())
            .unwrap_or_else(|| panic!("no PodCertificateRequest {ns}/{name}"));
        let req = base64::engine::general_purpose::STANDARD
            .decode(o["spec"]["stubPKCS10Request"].as_str().unwrap_or(""))
            .expect("stubPKCS10Request is base64");
        let max = o["spec"]["maxExpirationSeconds"].as_i64().unwrap_or(86400);
        let not_after = not_after.min(not_before + max);
        let chain = self
            .ca
            .issue(&req, not_before, not_after, true)
            .expect("the fake CA signs the stub request's key");
        let t = |secs: i64| picolet::api::time::rfc3339(secs * 1_000_000_000);
        self.set_pcr_status(
            ns,
            name,
            json!({
                "conditions": [{"type": "Issued", "status": "True", "reason": "Reason", "message": "Issued", "lastTransitionTime": t(not_before)}],
                "certificateChain": chain,
                "notBefore": t(not_before),
                "beginRefreshAt": t(refresh.min(not_after)),
                "notAfter": t(not_after),
            }),
        );
        chain
    }

    /// Denies a PodCertificateRequest as a signer would.
    pub fn deny_pcr(&self, ns: &str, name: &str, reason: &str, message: &str) {
        self.set_pcr_status(
            ns,
            name,
            json!({"conditions": [{"type": "Denied", "status": "True", "reason": reason, "message": message, "lastTransitionTime": "2026-01-01T00:00:00Z"}]}),
        );
    }

    /// The TokenRequests received: ("token/<ns>/<sa>", body).
    pub fn token_requests(&self) -> Vec<(String, Value)> {
        self.with(|s| s.token_requests.clone())
    }

    pub fn delete_pod(&self, ns: &str, name: &str) {
        self.with(|s| {
            if let Some(mut p) = s.objects.remove(&format!("pods/{ns}/{name}")) {
                s.rv += 1;
                p["metadata"]["resourceVersion"] = json!(s.rv.to_string());
                let rv = s.rv;
                s.pod_events.push((rv, "DELETED", p));
            }
        });
    }

    /// Evicts a pod as the Eviction API does: the `DisruptionTarget` condition (reason
    /// `EvictionByEvictionAPI`) set on its status, then a graceful deletion.
    pub fn evict(&self, ns: &str, name: &str, grace: i64) {
        self.add_condition(
            ns,
            name,
            json!({"type": "DisruptionTarget", "status": "True",
                "reason": "EvictionByEvictionAPI", "message": "Eviction API: evicting",
                "lastTransitionTime": "2026-01-01T00:00:00Z"}),
        );
        self.mark_deleting(ns, name, grace);
    }

    /// Adds a condition to a pod's status, as another writer (a controller, the Eviction API)
    /// does, and tells the watches.
    pub fn add_condition(&self, ns: &str, name: &str, c: Value) {
        self.with(|s| {
            s.rv += 1;
            let rv = s.rv;
            if let Some(p) = s.objects.get_mut(&format!("pods/{ns}/{name}")) {
                match p["status"]["conditions"].as_array_mut() {
                    Some(cs) => cs.push(c),
                    None => p["status"]["conditions"] = json!([c]),
                }
                p["metadata"]["resourceVersion"] = json!(rv.to_string());
                let o = p.clone();
                s.pod_events.push((rv, "MODIFIED", o));
            }
        });
    }

    /// The pods deleted so far, as they were when deleted.
    pub fn deleted_pods(&self) -> Vec<Value> {
        self.with(|s| {
            s.pod_events
                .iter()
                .filter(|(_, t, _)| *t == "DELETED")
                .map(|(_, _, o)| o.clone())
                .collect()
        })
    }

    /// Starts a graceful deletion, as `kubectl delete pod` does: the pod gets a deletionTimestamp
    /// and stays until the node agent deletes it with grace 0.
    pub fn mark_deleting(&self, ns: &str, name: &str, grace: i64) {
        self.with(|s| {
            s.rv += 1;
            let rv = s.rv;
            if let Some(p) = s.objects.get_mut(&format!("pods/{ns}/{name}")) {
                p["metadata"]["deletionTimestamp"] = json!("2026-01-01T00:00:00Z");
                p["metadata"]["deletionGracePeriodSeconds"] = json!(grace);
                p["metadata"]["resourceVersion"] = json!(rv.to_string());
                let o = p.clone();
                s.pod_events.push((rv, "MODIFIED", o));
            }
        });
    }

    /// The pods in a namespace whose annotations hold `key`.
    pub fn pods_with_annotation(&self, key: &str) -> Vec<Value> {
        self.with(|s| {
            s.objects
                .iter()
                .filter(|(k, v)| {
                    k.starts_with("pods/") && !v["metadata"]["annotations"][key].is_null()
                })
                .map(|(_, v)| v.clone())
                .collect()
        })
    }

    /// Ends every open watch, as an apiserver restart or a middlebox does.
    pub fn drop_watches(&self) {
        self.with(|s| s.watch_generation += 1);
    }

    /// Other objects change and history is compacted up to now, while every watch drops (an
    /// apiserver restart after a compaction): watchers resuming from what they last saw get 410
    /// Gone; the version a new list returns is watchable.
    pub fn compact_and_drop_watches(&self) {
        self.with(|s| {
            s.rv += 1;
            s.compacted_below = s.rv;
            s.watch_generation += 1;
        });
    }

    /// Every watch gets 410 Gone, even from the version a list just returned (an apiserver whose
    /// watch cache lags behind its lists).
    pub fn expire_every_watch(&self) {
        self.with(|s| s.compacted_below = u64::MAX);
    }

    /// A bootstrap kubeconfig: this server and a bootstrap token.
    pub fn bootstrap_kubeconfig(&self, dir: &std::path::Path, token: &str) -> std::path::PathBuf {
        let p = dir.join("bootstrap-kubeconfig");
        std::fs::write(
            &p,
            format!(
                "apiVersion: v1\nkind: Config\nclusters:\n- name: fake\n  cluster:\n    server: {}\n\
                 users:\n- name: tls-bootstrap-token-user\n  user:\n    token: {token}\ncontexts:\n- name: boot\n  context:\n    \
                 cluster: fake\n    user: tls-bootstrap-token-user\ncurrent-context: boot\n",
                self.url()
            ),
        )
        .unwrap();
        p
    }

    /// CertificateSigningRequests are approved and signed at once, valid for `lifetime`
    /// seconds from a second ago (`None`: left pending for the test to decide).
    pub fn auto_sign(&self, lifetime: Option<u64>) {
        self.with(|s| s.csr_auto_lifetime = lifetime);
    }

    /// Every CertificateSigningRequest, in the order they came.
    pub fn csrs(&self) -> Vec<Value> {
        self.with(|s| {
            let mut v: Vec<Value> = s
                .objects
                .iter()
                .filter(|(k, _)| k.starts_with("csrs/"))
                .map(|(_, v)| v.clone())
                .collect();
            v.sort_by_key(|o| o["metadata"]["creationIndex"].as_u64());
            v
        })
    }

    /// Approves and signs a pending request, valid for `lifetime` seconds.
    pub fn approve_csr(&self, name: &str, lifetime: u64) {
        let ca = self.ca.clone();
        self.with(|s| {
            let o = s
                .objects
                .get_mut(&format!("csrs/{name}"))
                .expect("no such CSR");
            sign_csr(&ca, o, lifetime);
            s.rv += 1;
        });
    }

    /// Denies a pending request.
    pub fn deny_csr(&self, name: &str) {
        self.with(|s| {
            let o = s.objects.get_mut(&format!("csrs/{name}")).expect("no such CSR");
            o["status"]["conditions"] = json!([{"type": "Denied", "status": "True", "reason": "TestDenied", "message": "denied by the test"}]);
            s.rv += 1;
        });
    }

    /// Requests with this bearer token get 401 from now on.
    pub fn refuse_token(&self, token: &str) {
        self.with(|s| s.bad_tokens.push(token.to_owned()));
    }

    /// The `Authorization` header of each request whose method and path start as given.
    pub fn auths_of(&self, method: &str, path_prefix: &str) -> Vec<String> {
        self.with(|s| {
            s.requests
                .iter()
                .zip(&s.auths)
                .filter(|((m, p), _)| m == method && p.starts_with(path_prefix))
                .map(|(_, a)| a.clone())
                .collect()
        })
    }

    pub fn forbid(&self, path_prefix: &str) {
        self.with(|s| s.forbidden.push(path_prefix.to_owned()));
    }

    /// Takes the server down (every request fails at once) or back up.
    pub fn set_down(&self, down: bool) {
        self.with(|s| {
            s.down = down;
            s.watch_generation += 1;
        });
    }

    /// The next `n` requests of `method` whose path starts with `prefix` are carried out, and
    /// the connection is closed instead of answering: the caller sees no answer though its
    /// write landed.
    pub fn lose_answers(&self, method: &str, prefix: &str, n: u32) {
        self.with(|s| {
            s.lose_answers
                .push((method.to_owned(), prefix.to_owned(), n))
        });
    }

    /// Reads every request and never answers it until unset (a link whose far end went silent:
    /// connections open, nothing comes back); the held connections are closed when it is unset.
    pub fn set_stalled(&self, stalled: bool) {
        self.with(|s| {
            s.stalled = stalled;
            s.watch_generation += 1;
        });
    }

    /// Cuts the link to the node (`true`) or brings it back. While cut, requests are read and
    /// never answered. Unlike `set_stalled`, nothing is closed, then or after: a connection open
    /// when the link was cut, or opened while it was, never carries another byte (a NAT mapping
    /// lost, a cellular link that came back with new addresses), not even an open watch's
    /// events or a close. Only what the node opens after the link is back is answered.
    pub fn cut_link(&self, cut: bool) {
        self.with(|s| {
            s.link_cut = cut;
            if cut {
                s.link_cuts += 1;
            }
        });
    }

    /// Every open watch falls silent for good, its connection open, while everything else goes on
    /// answering (the apiserver behind a load balancer gone with the watch's connection, say).
    pub fn silence_watches(&self) {
        self.with(|s| s.watch_silences += 1);
    }

    /// A connection whose path is gone: reads and drops whatever comes, answers nothing, until
    /// the node closes it or the fake stops.
    fn dead(&self, conn: &TcpStream) {
        let mut c = conn;
        let _ = conn.set_read_timeout(Some(Duration::from_millis(200)));
        let mut buf = [0u8; 4096];
        while !self.stop.load(Ordering::SeqCst) {
            match c.read(&mut buf) {
                Ok(0) => return,
                Ok(_) => {}
                Err(e)
                    if matches!(
                        e.kind(),
                        std::io::ErrorKind::WouldBlock | std::io::ErrorKind::TimedOut
                    ) => {}
                Err(_) => return,
            }
        }
    }

    pub fn stop(&self) {
        self.stop.store(true, Ordering::SeqCst);
        self.drop_watches();
        let _ = TcpStream::connect(("127.0.0.1", self.port));
    }

    fn serve(&self, conn: TcpStream) {
        let cuts = self.with(|s| s.link_cuts);
        let mut r = BufReader::new(conn.try_clone().unwrap());
        let mut w = conn;
        loop {
            let mut line = String::new();
            if r.read_line(&mut line).unwrap_or(0) == 0 {
                return;
            }
            let mut parts = line.split_whitespace();
            let (method, path) = (
                parts.next().unwrap_or("").to_owned(),
                parts.next().unwrap_or("").to_owned(),
            );
            let mut len = 0usize;
            let mut auth = String::new();
            let mut accept = String::new();
            let mut content_type = String::new();
            let mut head_len = line.len();
            loop {
                let mut h = String::new();
                if r.read_line(&mut h).unwrap_or(0) == 0 {
                    return;
                }
                head_len += h.len();
                if h == "\r\n" {
                    break;
                }
                if let Some((k, v)) = h.split_once(':')
                    && k.eq_ignore_ascii_case("content-length")
                {
                    len = v.trim().parse().unwrap_or(0);
                }
                if let Some((k, v)) = h.split_once(':')
                    && k.eq_ignore_ascii_case("authorization")
                {
                    auth = v.trim().to_owned();
                }
                if let Some((k, v)) = h.split_once(':')
                    && k.eq_ignore_ascii_case("accept")
                {
                    accept = v.trim().to_owned();
                }
                if let Some((k, v)) = h.split_once(':')
                    && k.eq_ignore_ascii_case("content-type")
                {
                    content_type = v.trim().to_owned();
                }
            }
            let mut body = vec![0; len];
            if r.read_exact(&mut body).is_err() {
                return;
            }
            let received = (head_len + len) as u64;
            // An Event may come in protobuf (picolet's default `contentType`): kept as its
            // JSON, so the tests read every Event alike.
            let body: Value = if content_type.starts_with(picolet::apiclient::protobuf::MEDIA_TYPE)
            {
                picolet::apiclient::protobuf::event_json(&body).unwrap_or(Value::Null)
            } else {
                serde_json::from_slice(&body).unwrap_or(Value::Null)
            };
            let (down, stalled, dead) = self.with(|s| {
                s.requests.push((method.clone(), path.clone()));
                s.bodies.push(body.clone());
                s.auths.push(auth.clone());
                s.times.push(Instant::now());
                s.bytes_in += received;
                (s.down, s.stalled, s.link_cut || s.link_cuts != cuts)
            });
            if dead {
                self.dead(&w);
                return;
            }
            if down {
                return; // connection closed without an answer
            }
            if stalled {
                while self.with(|s| s.stalled) && !self.stop.load(Ordering::SeqCst) {
                    std::thread::sleep(std::time::Duration::from_millis(200));
                }
                return;
            }
            let (p, q) = query(&path);
            if q.get("watch").is_some_and(|v| v == "true") {
                self.watch(&mut w, &p, &q, cuts);
                return;
            }
            let refused = self.with(|s| s.bad_tokens.iter().any(|t| auth == format!("Bearer {t}")));
            let (code, v) = if refused {
                (401, status(401, "Unauthorized", "Unauthorized"))
            } else {
                self.handle(&method, &p, &q, &content_type, body)
            };
            let lost = self.with(|s| {
                let hit = s
                    .lose_answers
                    .iter_mut()
                    .find(|(m, pre, n)| *n > 0 && *m == method && path.starts_with(pre.as_str()));
                hit.map(|(_, _, n)| *n -= 1).is_some()
            });
            if lost {
                return;
            }
            // The written object's metadata alone, when asked for (as the apiserver answers
            // `as=PartialObjectMetadata;g=meta.k8s.io;v=v1`), in protobuf when that comes
            // first in the Accept (the metadata and an error Status, as the apiserver encodes
            // them; see `picolet::apiclient::protobuf`).
            let protobuf = accept.starts_with(picolet::apiclient::protobuf::MEDIA_TYPE);
            let ok = (200..300).contains(&code);
            let (content_type, text) = if protobuf
                && ok
                && accept.contains("as=PartialObjectMetadata")
            {
                let b = picolet::apiclient::protobuf::encode_metadata_of(&v["metadata"]);
                (picolet::apiclient::protobuf::MEDIA_TYPE, b)
            } else if protobuf && !ok && v["kind"] == "Status" {
                let b = picolet::apiclient::protobuf::encode_status(
                    code.into(),
                    v["reason"].as_str().unwrap_or(""),
                    v["message"].as_str().unwrap_or(""),
                );
                (picolet::apiclient::protobuf::MEDIA_TYPE, b)
            } else if accept.contains("as=PartialObjectMetadata") && ok {
                let m = json!({"kind": "PartialObjectMetadata", "apiVersion": "meta.k8s.io/v1", "metadata": v["metadata"]});
                ("application/json", serde_json::to_vec(&m).unwrap())
            } else {
                ("application/json", serde_json::to_vec(&v).unwrap())
            };
            let head = format!(
                "HTTP/1.1 {code} X\r\nContent-Type: {content_type}\r\nContent-Length: {}\r\n\r\n",
                text.len()
            );
            self.with(|s| s.bytes_out += (head.len() + text.len()) as u64);
            if w.write_all(head.as_bytes())
                .and_then(|_| w.write_all(&text))
                .is_err()
            {
                return;
            }
        }
    }

    fn handle(
        &self,
        method: &str,
        p: &str,
        q: &BTreeMap<String, String>,
        content_type: &str,
        body: Value,
    ) -> (u16, Value) {
        let ca = self.ca.clone();
        self.with(|s| {
            if s.forbidden.iter().any(|f| p.starts_with(f.as_str())) {
                return (403, status(403, "Forbidden", "forbidden by the fake"));
            }
            let segs: Vec<&str> = p.trim_start_matches('/').split('/').collect();
            let key = match segs.as_slice() {
                ["api", "v1", "nodes"] => "nodes".to_owned(),
                ["api", "v1", "nodes", n] | ["api", "v1", "nodes", n, "status"] => format!("nodes/{n}"),
                ["apis", "coordination.k8s.io", "v1", "namespaces", ns, "leases"] => format!("leases/{ns}"),
                ["apis", "coordination.k8s.io", "v1", "namespaces", ns, "leases", n] => format!("leases/{ns}/{n}"),
                ["api", "v1", "pods"] => "pods".to_owned(),
                ["api", "v1", "services"] => "services".to_owned(),
                ["api", "v1", "namespaces", ns, kind @ ("configmaps" | "secrets"), n] => format!("{kind}/{ns}/{n}"),
                // A node lists one object at a time, by name (the Node authorizer's rule).
                ["api", "v1", "namespaces", ns, kind @ ("configmaps" | "secrets")] => {
                    match q.get("fieldSelector").and_then(|f| f.strip_prefix("metadata.name=")) {
                        Some(n) if method == "GET" => format!("list/{kind}/{ns}/{n}"),
                        _ => return (403, status(403, "Forbidden", "a node lists objects only by name")),
                    }
                }
                ["api", "v1", "namespaces", ns, "serviceaccounts", sa, "token"] => format!("token/{ns}/{sa}"),
                ["api", "v1", "namespaces", ns, "pods"] => format!("newpod/{ns}"),
                ["api", "v1", "namespaces", ns, "events"] => format!("newevent/{ns}"),
                ["api", "v1", "namespaces", ns, "events", n] => format!("events/{ns}/{n}"),
                ["api", "v1", "namespaces", ns, "pods", n] | ["api", "v1", "namespaces", ns, "pods", n, "status"] => {
                    format!("pods/{ns}/{n}")
                }
                ["apis", "certificates.k8s.io", "v1", "certificatesigningrequests"] => "newcsr".to_owned(),
                ["apis", "certificates.k8s.io", "v1", "clustertrustbundles"] => "clustertrustbundles".to_owned(),
                ["api", "v1", "namespaces", ns, "serviceaccounts", sa] => format!("serviceaccounts/{ns}/{sa}"),
                // A node lists and watches the requests of its own name only (the Node
                // authorizer's rule).
                ["apis", "certificates.k8s.io", "v1", "podcertificaterequests"] => {
                    match q.get("fieldSelector").and_then(|f| f.strip_prefix("spec.nodeName=")) {
                        Some(n) if method == "GET" => format!("pcrlist/{n}"),
                        _ => return (403, status(403, "Forbidden", "can only list/watch podcertificaterequests with nodeName field selector")),
                    }
                }
                ["apis", "certificates.k8s.io", "v1", "namespaces", ns, "podcertificaterequests"] => format!("newpcr/{ns}"),
                ["apis", "certificates.k8s.io", "v1", "namespaces", ns, "podcertificaterequests", n] => format!("pcrs/{ns}/{n}"),
                ["apis", "certificates.k8s.io", "v1", "certificatesigningrequests", n] => format!("csrs/{n}"),
                _ => return (404, status(404, "NotFound", &format!("no route {p}"))),
            };
            match (method, key.as_str()) {
                ("GET", "pods") => {
                    let node = q.get("fieldSelector").and_then(|f| f.strip_prefix("spec.nodeName=")).unwrap_or("");
                    let items: Vec<Value> = s
                        .objects
                        .iter()
                        .filter(|(k, v)| k.starts_with("pods/") && v["spec"]["nodeName"] == node)
                        .map(|(_, v)| v.clone())
                        .collect();
                    (200, json!({"kind": "PodList", "apiVersion": "v1", "metadata": {"resourceVersion": s.rv.to_string()}, "items": items}))
                }
                ("GET", k) if k.starts_with("list/") => {
                    let key = &k["list/".len()..];
                    let items: Vec<Value> = s.objects.get(key).cloned().into_iter().collect();
                    (200, json!({"kind": "List", "apiVersion": "v1", "metadata": {"resourceVersion": s.rv.to_string()}, "items": items}))
                }
                ("GET", "clustertrustbundles") => {
                    let items: Vec<Value> = s
                        .objects
                        .iter()
                        .filter(|(k, _)| k.starts_with("clustertrustbundles/"))
                        .map(|(_, v)| v.clone())
                        .collect();
                    (200, json!({"kind": "ClusterTrustBundleList", "apiVersion": "certificates.k8s.io/v1", "metadata": {"resourceVersion": s.rv.to_string()}, "items": items}))
                }
                ("GET", k) if k.starts_with("serviceaccounts/") => {
                    // Every service account exists, with a UID of its name.
                    let (ns, sa) = k["serviceaccounts/".len()..].split_once('/').unwrap();
                    (200, json!({"apiVersion": "v1", "kind": "ServiceAccount", "metadata": {"name": sa, "namespace": ns, "uid": format!("sa-uid-{ns}-{sa}")}}))
                }
                ("GET", k) if k.starts_with("pcrlist/") => {
                    let node = &k["pcrlist/".len()..];
                    let items: Vec<Value> = s
                        .objects
                        .iter()
                        .filter(|(k, v)| k.starts_with("pcrs/") && v["spec"]["nodeName"] == node)
                        .map(|(_, v)| v.clone())
                        .collect();
                    (200, json!({"kind": "PodCertificateRequestList", "apiVersion": "certificates.k8s.io/v1", "metadata": {"resourceVersion": s.rv.to_string()}, "items": items}))
                }
                ("POST", k) if k.starts_with("newpcr/") => {
                    // What the apiserver's validation and the NodeRestriction admission check:
                    // the request names the pod, its service account and the node by UID.
                    let ns = &k["newpcr/".len()..];
                    let spec = &body["spec"];
                    let text = |f: &str| spec[f].as_str().unwrap_or("").to_owned();
                    let pod = s.objects.get(&format!("pods/{ns}/{}", text("podName"))).cloned();
                    let node = s.objects.get(&format!("nodes/{}", text("nodeName"))).cloned();
                    let invalid = |m: String| (422, status(422, "Invalid", &m));
                    let Some(pod) = pod else {
                        return invalid(format!("pod {ns}/{} not found", text("podName")));
                    };
                    if pod["metadata"]["uid"] != text("podUID").as_str() || pod["spec"]["nodeName"] != text("nodeName").as_str() {
                        return invalid(format!("pod UID or node does not match: {spec}"));
                    }
                    if node.is_none_or(|n| n["metadata"]["uid"] != text("nodeUID").as_str()) {
                        return invalid(format!("node UID does not match: {spec}"));
                    }
                    let sa = pod["spec"]["serviceAccountName"].as_str().unwrap_or("default");
                    if text("serviceAccountName") != sa || text("serviceAccountUID") != format!("sa-uid-{ns}-{sa}") {
                        return invalid(format!("service account does not match: {spec}"));
                    }
                    if text("signerName").is_empty() || text("stubPKCS10Request").is_empty() || spec.get("pkixPublicKey").is_some() {
                        return invalid(format!("exactly one of (stubPKCS10Request) or (pkixPublicKey, proofOfPossession) must be set: {spec}"));
                    }
                    s.pcrs_made += 1;
                    s.rv += 1;
                    let prefix = body["metadata"]["generateName"].as_str().unwrap_or("").to_owned();
                    let name = format!("{prefix}{}", s.pcrs_made);
                    let mut o = body;
                    o["metadata"]["name"] = json!(name);
                    o["metadata"]["creationIndex"] = json!(s.pcrs_made);
                    o["metadata"]["creationTimestamp"] = json!(picolet::api::time::rfc3339(picolet::api::time::unix_nanos_now()));
                    o["metadata"]["resourceVersion"] = json!(s.rv.to_string());
                    if o["spec"]["maxExpirationSeconds"].is_null() {
                        o["spec"]["maxExpirationSeconds"] = json!(86400);
                    }
                    o["status"] = json!({});
                    s.objects.insert(format!("pcrs/{ns}/{name}"), o.clone());
                    let rv = s.rv;
                    s.pcr_events.push((rv, "ADDED", o.clone()));
                    (201, o)
                }
                ("GET", "services") => {
                    let items: Vec<Value> = s
                        .objects
                        .iter()
                        .filter(|(k, v)| k.starts_with("services/") && service_selected(q, v))
                        .map(|(_, v)| v.clone())
                        .collect();
                    (200, json!({"kind": "ServiceList", "apiVersion": "v1", "metadata": {"resourceVersion": s.rv.to_string()}, "items": items}))
                }
                ("POST", "nodes") | ("POST", _) if key == "nodes" || key.starts_with("leases/") => {
                    let name = body["metadata"]["name"].as_str().unwrap_or("").to_owned();
                    let k = if key == "nodes" { format!("nodes/{name}") } else { format!("{key}/{name}") };
                    if s.objects.contains_key(&k) {
                        return (409, status(409, "AlreadyExists", &format!("{k} already exists")));
                    }
                    s.rv += 1;
                    let mut o = body;
                    o["metadata"]["resourceVersion"] = json!(s.rv.to_string());
                    o["metadata"]["uid"] = json!(format!("uid-{name}"));
                    s.objects.insert(k, o.clone());
                    (201, o)
                }
                ("POST", k) if k.starts_with("token/") => {
                    // A TokenRequest: a new token each time, its lifetime as asked.
                    s.tokens_issued += 1;
                    let exp = body["spec"]["expirationSeconds"].as_i64().unwrap_or(3600);
                    let at = picolet::api::time::unix_nanos_now() + exp * 1_000_000_000;
                    let mut o = body.clone();
                    o["status"] = json!({
                        "token": format!("fake-token-{}", s.tokens_issued),
                        "expirationTimestamp": picolet::api::time::rfc3339(at),
                    });
                    s.token_requests.push((k.to_owned(), body));
                    (201, o)
                }
                ("POST", "newcsr") => {
                    s.csrs_made += 1;
                    s.rv += 1;
                    let prefix = body["metadata"]["generateName"].as_str().unwrap_or("csr-").to_owned();
                    let name = format!("{prefix}{}", s.csrs_made);
                    let mut o = body;
                    o["metadata"]["name"] = json!(name);
                    o["metadata"]["creationIndex"] = json!(s.csrs_made);
                    o["metadata"]["resourceVersion"] = json!(s.rv.to_string());
                    o["status"] = json!({});
                    if let Some(life) = s.csr_auto_lifetime {
                        sign_csr(&ca, &mut o, life);
                    }
                    s.objects.insert(format!("csrs/{name}"), o.clone());
                    (201, o)
                }
                ("POST", k) if k.starts_with("newevent/") => {
                    // Events are kept as sent, for the tests to read (`FakeApi::events`).
                    let ns = &k["newevent/".len()..];
                    let name = body["metadata"]["name"].as_str().unwrap_or("").to_owned();
                    let key = format!("events/{ns}/{name}");
                    if s.objects.contains_key(&key) {
                        return (409, status(409, "AlreadyExists", &format!("{key} already exists")));
                    }
                    s.rv += 1;
                    s.objects.insert(key, body.clone());
                    (201, body)
                }
                ("POST", k) if k.starts_with("newpod/") => {
                    let ns = &k["newpod/".len()..];
                    let name = body["metadata"]["name"].as_str().unwrap_or("").to_owned();
                    let key = format!("pods/{ns}/{name}");
                    if s.objects.contains_key(&key) {
                        return (409, status(409, "AlreadyExists", &format!("{key} already exists")));
                    }
                    s.rv += 1;
                    let mut o = body;
                    o["metadata"]["namespace"] = json!(ns);
                    o["metadata"]["resourceVersion"] = json!(s.rv.to_string());
                    o["metadata"]["uid"] = json!(format!("uid-{name}-{}", s.rv));
                    s.objects.insert(key, o.clone());
                    let rv = s.rv;
                    s.pod_events.push((rv, "ADDED", o.clone()));
                    (201, o)
                }
                ("GET", k) => match s.objects.get(k) {
                    Some(o) => (200, o.clone()),
                    None => (404, status(404, "NotFound", &format!("{k} not found"))),
                },
                ("PUT", k) => {
                    let Some(cur) = s.objects.get(k) else {
                        return (404, status(404, "NotFound", &format!("{k} not found")));
                    };
                    if body["metadata"]["resourceVersion"] != cur["metadata"]["resourceVersion"] {
                        return (409, status(409, "Conflict", "the object has been modified"));
                    }
                    s.rv += 1;
                    let mut o = body;
                    o["metadata"]["resourceVersion"] = json!(s.rv.to_string());
                    s.objects.insert(k.to_owned(), o.clone());
                    (200, o)
                }
                ("PATCH", k) => {
                    let rv = s.rv + 1;
                    let Some(cur) = s.objects.get_mut(k) else {
                        return (404, status(404, "NotFound", &format!("{k} not found")));
                    };
                    if let Some(uid) = body["metadata"]["uid"].as_str()
                        && cur["metadata"]["uid"] != uid
                    {
                        return (409, status(409, "Conflict", "Precondition failed: UID in precondition does not match"));
                    }
                    // A resourceVersion in a patch is a precondition, as the apiserver takes it.
                    if body["metadata"]["resourceVersion"].is_string()
                        && body["metadata"]["resourceVersion"] != cur["metadata"]["resourceVersion"]
                    {
                        return (409, status(409, "Conflict", "the object has been modified"));
                    }
                    let mut patch = body;
                    if let Some(m) = patch.get_mut("metadata").and_then(Value::as_object_mut) {
                        m.remove("uid");
                        m.remove("resourceVersion");
                    }
                    if content_type.starts_with("application/strategic-merge-patch+json") {
                        strategic_merge(cur, &patch);
                    } else {
                        merge(cur, &patch);
                    }
                    cur["metadata"]["resourceVersion"] = json!(rv.to_string());
                    let o = cur.clone();
                    s.rv = rv;
                    if k.starts_with("pods/") {
                        s.pod_events.push((rv, "MODIFIED", o.clone()));
                    }
                    (200, o)
                }
                ("DELETE", k) if k.starts_with("pods/") => {
                    let Some(cur) = s.objects.get(k) else {
                        return (404, status(404, "NotFound", &format!("{k} not found")));
                    };
                    if let Some(uid) = body["preconditions"]["uid"].as_str()
                        && cur["metadata"]["uid"] != uid
                    {
                        return (409, status(409, "Conflict", "Precondition failed: UID in precondition does not match"));
                    }
                    if body["gracePeriodSeconds"] != 0 {
                        return (422, status(422, "Invalid", "the fake only deletes with grace 0"));
                    }
                    let mut o = s.objects.remove(k).unwrap();
                    s.rv += 1;
                    o["metadata"]["resourceVersion"] = json!(s.rv.to_string());
                    let rv = s.rv;
                    s.pod_events.push((rv, "DELETED", o.clone()));
                    (200, o)
                }
                _ => (405, status(405, "MethodNotAllowed", method)),
            }
        })
    }

    fn watch(&self, w: &mut TcpStream, p: &str, q: &BTreeMap<String, String>, cuts: u64) {
        let services = p == "/api/v1/services";
        let bundles = p == "/apis/certificates.k8s.io/v1/clustertrustbundles";
        let pcrs = p == "/apis/certificates.k8s.io/v1/podcertificaterequests";
        // One ConfigMap or Secret by name: "configmaps/ns/name".
        let object = match p
            .trim_start_matches('/')
            .split('/')
            .collect::<Vec<_>>()
            .as_slice()
        {
            [
                "api",
                "v1",
                "namespaces",
                ns,
                kind @ ("configmaps" | "secrets"),
            ] => {
                let name = q
                    .get("fieldSelector")
                    .and_then(|f| f.strip_prefix("metadata.name="));
                Some(format!("{kind}/{ns}/{}", name.unwrap_or("")))
            }
            _ => None,
        };
        if self.with(|s| s.forbidden.iter().any(|f| p.starts_with(f.as_str()))) {
            let text =
                serde_json::to_vec(&status(403, "Forbidden", "forbidden by the fake")).unwrap();
            let head = format!(
                "HTTP/1.1 403 X\r\nContent-Type: application/json\r\nContent-Length: {}\r\n\r\n",
                text.len()
            );
            let _ = w
                .write_all(head.as_bytes())
                .and_then(|_| w.write_all(&text));
            return;
        }
        let from: u64 = q
            .get("resourceVersion")
            .and_then(|v| v.parse().ok())
            .unwrap_or(0);
        let node = q
            .get("fieldSelector")
            .and_then(|f| f.strip_prefix("spec.nodeName="))
            .unwrap_or("")
            .to_owned();
        let bookmarks = q.get("allowWatchBookmarks").is_some_and(|v| v == "true");
        let limit = Duration::from_secs(
            q.get("timeoutSeconds")
                .and_then(|v| v.parse().ok())
                .unwrap_or(300),
        );
        let head = "HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nTransfer-Encoding: chunked\r\n\r\n";
        if w.write_all(head.as_bytes()).is_err() {
            return;
        }
        let send = |w: &mut TcpStream, v: &Value| {
            let mut line = serde_json::to_vec(v).unwrap();
            line.push(b'\n');
            self.with(|s| s.bytes_out += line.len() as u64 + 8);
            write!(w, "{:x}\r\n", line.len())
                .and_then(|_| w.write_all(&line))
                .and_then(|_| w.write_all(b"\r\n"))
                .and_then(|_| w.flush())
                .is_ok()
        };
        let (m, cv) = &*self.state;
        let mut g = m.lock().unwrap();
        if from != 0 && from < g.compacted_below {
            drop(g);
            send(
                w,
                &json!({"type": "ERROR", "object": status(410, "Expired", "too old resource version")}),
            );
            let _ = w.write_all(b"0\r\n\r\n");
            return;
        }
        let (generation, silences) = (g.watch_generation, g.watch_silences);
        let mut sent = from;
        let t0 = Instant::now();
        let mut said = Instant::now();
        loop {
            if g.link_cuts != cuts || g.watch_silences != silences {
                drop(g);
                self.dead(w);
                return;
            }
            if g.watch_generation != generation || self.stop.load(Ordering::SeqCst) {
                // Dropped: no clean end of the chunked body, as a cut connection.
                drop(g);
                let _ = w.shutdown(std::net::Shutdown::Both);
                return;
            }
            let news: Vec<(u64, &str, Value)> = if object.is_some() {
                &g.object_events
            } else if bundles {
                &g.bundle_events
            } else if pcrs {
                &g.pcr_events
            } else if services {
                &g.service_events
            } else {
                &g.pod_events
            }
            .iter()
            .filter(|(rv, _, o)| {
                *rv > sent
                    && if let Some(key) = &object {
                        let kind = if o["kind"] == "Secret" {
                            "secrets"
                        } else {
                            "configmaps"
                        };
                        let m = &o["metadata"];
                        *key == format!(
                            "{kind}/{}/{}",
                            m["namespace"].as_str().unwrap_or(""),
                            m["name"].as_str().unwrap_or("")
                        )
                    } else if bundles {
                        true
                    } else if services {
                        service_selected(q, o)
                    } else {
                        // Pods and PodCertificateRequests: the node's.
                        o["spec"]["nodeName"] == node.as_str()
                    }
            })
            .map(|(rv, t, o)| (*rv, *t, o.clone()))
            .collect();
            let last = g.rv;
            drop(g);
            for (rv, t, o) in news {
                if !send(w, &json!({"type": t, "object": o})) {
                    return;
                }
                sent = sent.max(rv);
                said = Instant::now();
            }
            // The real apiserver's watch cache sends a bookmark about every minute (the Leases of
            // a live cluster move its resourceVersion all the time) to a watch that asked for
            // them; so does this one.
            if bookmarks && (last > sent || said.elapsed() >= Duration::from_secs(60)) {
                said = Instant::now();
                // Other objects moved the counter, or a minute passed: a bookmark keeps the
                // watcher current.
                if !send(
                    w,
                    &json!({"type": "BOOKMARK", "object": {"kind": if object.is_some() { "ConfigMap" } else if bundles { "ClusterTrustBundle" } else if pcrs { "PodCertificateRequest" } else if services { "Service" } else { "Pod" }, "metadata": {"resourceVersion": last.to_string()}}}),
                ) {
                    return;
                }
                self.with(|s| s.bookmarks += 1);
                sent = last;
            }
            g = m.lock().unwrap();
            if t0.elapsed() >= limit {
                drop(g);
                let _ = w.write_all(b"0\r\n\r\n");
                return;
            }
            g = cv.wait_timeout(g, Duration::from_millis(200)).unwrap().0;
        }
    }
}
