//! The apiserver side of pod certificates (`crate::podcertificate`): the node's
//! PodCertificateRequests listed and watched (`certificates.k8s.io/v1`, with
//! `fieldSelector=spec.nodeName=<node>`, the only list and watch the Node authorizer allows a
//! node, as the kubelet's informer asks), on a thread of its own while a pod projects a
//! certificate; and a request created for a source: the service account's UID read (the Node
//! authorizer lets a node get the service accounts of its pods), the node's UID read once, a
//! new key made, the request posted.

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};

use serde_json::Value;

use crate::apiclient::backoff::Jitter;
use crate::apiclient::watch::{self, Event, ObjectError, Watched};
use crate::apiclient::{ACCEPT_METADATA, ApiError, CALL_TIMEOUT, Client};
use crate::objects::PodCertificateNeed;
use crate::podcertificate::{Outcome, Requests, decode_request, key_algorithm, new_key};

/// The node's requests, listed and watched as one collection.
struct RequestSet {
    node: String,
    requests: Requests,
    resource_version: String,
}

fn decode(v: &Value) -> Result<(String, Outcome), ObjectError> {
    decode_request(v).map_err(|e| ObjectError::Decode {
        what: Some("podcertificaterequest"),
        source: e.into(),
    })
}

impl Watched for RequestSet {
    fn what(&self) -> &'static str {
        "podcertificaterequests"
    }

    fn path(&self, query: &str) -> String {
        format!(
            "/apis/certificates.k8s.io/v1/podcertificaterequests?fieldSelector=spec.nodeName%3D{}{query}",
            self.node
        )
    }

    fn replace(&mut self, list: Value) -> Result<(), ObjectError> {
        let items = match list.get("items") {
            None | Some(Value::Null) => &[][..],
            Some(Value::Array(items)) => &items[..],
            Some(_) => return Err(ObjectError::NotAnArray("items")),
        };
        let mut all = Requests::new();
        for (i, v) in items.iter().enumerate() {
            let (name, o) = decode(v).map_err(|e| ObjectError::item("items", i, e))?;
            all.insert(name, o);
        }
        self.requests = all;
        self.resource_version = watch::list_resource_version(&list);
        Ok(())
    }

    fn apply_object(&mut self, event: Event, object: Value) -> Result<bool, ObjectError> {
        let (name, o) = decode(&object)?;
        Ok(match event {
            Event::Deleted => self.requests.remove(&name).is_some(),
            Event::Added | Event::Modified => self.requests.insert(name, o.clone()) != Some(o),
        })
    }

    fn resource_version(&mut self) -> &mut String {
        &mut self.resource_version
    }

    fn count(&self) -> usize {
        self.requests.len()
    }
}

/// Lists and watches the node's requests on the calling thread, sending them all (with
/// `generation`) after the list and after each change, until `alive` is cleared.
pub fn watch_requests(
    client: &Client,
    node: &str,
    generation: u64,
    alive: &AtomicBool,
    seen: &async_channel::Sender<(u64, Arc<Requests>)>,
) {
    let mut set = RequestSet {
        node: node.to_owned(),
        requests: Requests::new(),
        resource_version: String::new(),
    };
    let mut jitter = Jitter::new("podcertificaterequests");
    let opts = watch::Options {
        poll_interval: None,
        log_prefix: "pod certificates",
        forbidden_hint: "the pods projecting pod certificates wait; the Node authorizer lets a \
                         node list and watch the PodCertificateRequests of its name"
            .into(),
    };
    let running = || alive.load(Ordering::Relaxed) && !seen.is_closed();
    let mut emit = |set: &RequestSet| {
        seen.send_blocking((generation, Arc::new(set.requests.clone())))
            .is_ok()
            && running()
    };
    watch::run(client, &mut set, &opts, &mut jitter, &running, &mut emit);
}

fn uid_of(v: &Value, what: &str) -> Result<String, ApiError> {
    v["metadata"]["uid"]
        .as_str()
        .filter(|u| !u.is_empty())
        .map(str::to_owned)
        .ok_or_else(|| ApiError::decode(what, "no metadata.uid"))
}

/// Creates a request for a source (blocking: run it on the blocking pool): returns its
/// `namespace/name` and the new private key (PEM). `node_uid` is read once and kept.
pub fn create_request(
    client: &Client,
    node_name: &str,
    node_uid: &mut String,
    need: &PodCertificateNeed,
) -> Result<(String, Vec<u8>), ApiError> {
    let alg = key_algorithm(need).map_err(|m| ApiError::decode("podCertificate", m))?;
    if node_uid.is_empty() {
        let n: Value = client.json("GET", &format!("/api/v1/nodes/{node_name}"), None)?;
        *node_uid = uid_of(&n, "node")?;
    }
    let sa: Value = client.json(
        "GET",
        &format!(
            "/api/v1/namespaces/{}/serviceaccounts/{}",
            need.namespace, need.service_account
        ),
        None,
    )?;
    let sa_uid = uid_of(&sa, "serviceaccount")?;
    let (key, csr) = new_key(alg).map_err(|e| ApiError::decode("a new key", e))?;
    let body = crate::podcertificate::request_body(need, &sa_uid, node_name, node_uid, &csr);
    let path = format!(
        "/apis/certificates.k8s.io/v1/namespaces/{}/podcertificaterequests",
        need.namespace
    );
    // The answer's metadata alone: its name.
    let answer: Value = client.json_accepting(
        "POST",
        &path,
        Some((
            "application/json",
            serde_json::to_vec(&body).unwrap_or_default(),
        )),
        CALL_TIMEOUT,
        ACCEPT_METADATA,
    )?;
    let name = answer["metadata"]["name"]
        .as_str()
        .filter(|n| !n.is_empty())
        .ok_or_else(|| ApiError::decode("PodCertificateRequest", "no metadata.name"))?;
    Ok((format!("{}/{name}", need.namespace), key))
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn the_nodes_requests_are_listed_and_watched_by_its_name() {
        let mut set = RequestSet {
            node: "n1".into(),
            requests: Requests::new(),
            resource_version: String::new(),
        };
        assert_eq!(
            set.path(""),
            "/apis/certificates.k8s.io/v1/podcertificaterequests?fieldSelector=spec.nodeName%3Dn1"
        );
        assert_eq!(
            set.path("&watch=true&resourceVersion=5"),
            "/apis/certificates.k8s.io/v1/podcertificaterequests?fieldSelector=spec.nodeName%3Dn1\
             &watch=true&resourceVersion=5"
        );
        let pcr = |name: &str, status: serde_json::Value| json!({"metadata": {"namespace": "ns", "name": name}, "status": status});
        let denied = json!({"conditions": [{"type": "Denied", "reason": "R", "message": "M"}]});
        set.replace(json!({"metadata": {"resourceVersion": "5"},
                           "items": [pcr("req-1", json!({})), pcr("req-2", denied.clone())]}))
            .unwrap();
        assert_eq!(set.resource_version, "5");
        assert_eq!(set.requests["ns/req-1"], Outcome::Pending);
        assert!(matches!(set.requests["ns/req-2"], Outcome::Denied { .. }));
        // The same outcome is no change; a new one, a new request and a deletion are.
        assert!(
            !set.apply_object(Event::Modified, pcr("req-1", json!({})))
                .unwrap()
        );
        assert!(
            set.apply_object(Event::Modified, pcr("req-1", denied))
                .unwrap()
        );
        assert!(
            set.apply_object(Event::Added, pcr("req-3", json!({})))
                .unwrap()
        );
        assert!(
            set.apply_object(Event::Deleted, pcr("req-2", json!({})))
                .unwrap()
        );
        let names: Vec<&str> = set.requests.keys().map(String::as_str).collect();
        assert_eq!(names, ["ns/req-1", "ns/req-3"]);
        // An issued request without its times is refused by name and field.
        let bad = pcr(
            "req-4",
            json!({"conditions": [{"type": "Issued"}], "certificateChain": ""}),
        );
        let e = set.apply_object(Event::Added, bad).unwrap_err().to_string();
        assert_eq!(
            e,
            "podcertificaterequest: ns/req-4: status.beginRefreshAt: not a time: null"
        );
    }
}
