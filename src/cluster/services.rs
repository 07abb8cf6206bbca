//! The cluster's Services for the containers' environment (`crate::services`), kept by list and
//! watch (`apiclient::watch`, on the `api-services` thread) as the kubelet's informer keeps them:
//! every namespace, headless services left out by the field selector
//! `spec.clusterIP!=None`. Only the namespace, name, clusterIP and ports of each are kept.
//!
//! The set is checkpointed to `<root-dir>/checkpoints/services.json` (a ServiceList holding
//! only those fields, written atomically when they changed), so a node that starts while the
//! apiserver is out of reach gives its pods' containers the variables they had.

use std::path::{Path, PathBuf};
use std::time::Duration;

use serde::{Deserialize, Serialize};

use crate::apiclient::Client;
use crate::apiclient::backoff::Jitter;
use crate::apiclient::watch::{self, Event, ObjectError, Watched};
use crate::services::{Port, Service, Shared, is_ip_set};

/// Largest checkpoint written or read.
const MAX_CHECKPOINT: usize = 16 << 20;

/// A Service as far as the variables go; the apiserver's JSON and the checkpoint's.
#[derive(Debug, Default, Serialize, Deserialize)]
#[serde(default)]
struct WireService {
    metadata: WireMeta,
    spec: WireSpec,
}

#[derive(Debug, Default, Serialize, Deserialize)]
#[serde(default)]
struct WireMeta {
    namespace: Option<String>,
    name: Option<String>,
}

#[derive(Debug, Default, Serialize, Deserialize)]
#[serde(default)]
struct WireSpec {
    #[serde(rename = "clusterIP", skip_serializing_if = "Option::is_none")]
    cluster_ip: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    ports: Option<Vec<WirePort>>,
}

#[derive(Debug, Default, Serialize, Deserialize)]
#[serde(default)]
struct WirePort {
    #[serde(skip_serializing_if = "Option::is_none")]
    name: Option<String>,
    port: i32,
    #[serde(skip_serializing_if = "Option::is_none")]
    protocol: Option<String>,
}

type Key = (Box<str>, Box<str>);

fn decode(v: serde_json::Value) -> Result<(Key, Service), ObjectError> {
    let w: WireService = serde_json::from_value(v).map_err(|e| ObjectError::Decode {
        what: Some("service"),
        source: Box::new(e),
    })?;
    let ns = w.metadata.namespace.unwrap_or_default();
    let name = w.metadata.name.unwrap_or_default();
    if name.is_empty() {
        return Err(ObjectError::Empty {
            what: "service",
            field: "metadata.name",
        });
    }
    let ports = w
        .spec
        .ports
        .unwrap_or_default()
        .into_iter()
        .map(|p| Port {
            name: p.name.unwrap_or_default().into(),
            port: p.port,
            protocol: p.protocol.unwrap_or_default().into(),
        })
        .collect();
    Ok((
        (ns.into(), name.into()),
        Service {
            cluster_ip: w.spec.cluster_ip.unwrap_or_default().into(),
            ports,
        },
    ))
}

fn encode(key: &Key, s: &Service) -> WireService {
    let opt = |x: &str| (!x.is_empty()).then(|| x.to_owned());
    WireService {
        metadata: WireMeta {
            namespace: Some(key.0.to_string()),
            name: Some(key.1.to_string()),
        },
        spec: WireSpec {
            cluster_ip: Some(s.cluster_ip.to_string()),
            ports: Some(
                s.ports
                    .iter()
                    .map(|p| WirePort {
                        name: opt(&p.name),
                        port: p.port,
                        protocol: opt(&p.protocol),
                    })
                    .collect(),
            ),
        },
    }
}

/// The watched set: writes straight into the shared cache (one copy of the Services).
#[derive(Debug)]
pub struct ServiceSet {
    shared: Shared,
    resource_version: String,
}

impl ServiceSet {
    pub fn new(shared: Shared) -> ServiceSet {
        ServiceSet {
            shared,
            resource_version: String::new(),
        }
    }

    /// The checkpoint bytes of the set: a ServiceList of what is kept.
    fn checkpoint(&self) -> Vec<u8> {
        let items: Vec<WireService> = self
            .shared
            .lock()
            .by_name
            .iter()
            .map(|(k, s)| encode(k, s))
            .collect();
        serde_json::to_vec(&serde_json::json!({ "items": items })).unwrap_or_default()
    }
}

impl Watched for ServiceSet {
    fn what(&self) -> &'static str {
        "services"
    }

    fn path(&self, query: &str) -> String {
        // As the kubelet's informer: headless services give no variables, so none is listed.
        format!("/api/v1/services?fieldSelector=spec.clusterIP%21%3DNone{query}")
    }

    fn replace(&mut self, mut list: serde_json::Value) -> Result<(), ObjectError> {
        let items = match list.get_mut("items").map(serde_json::Value::take) {
            None | Some(serde_json::Value::Null) => Vec::new(),
            Some(serde_json::Value::Array(items)) => items,
            Some(_) => return Err(ObjectError::NotAnArray("items")),
        };
        let mut by_name = std::collections::BTreeMap::new();
        for (i, item) in items.into_iter().enumerate() {
            let (k, s) = decode(item).map_err(|e| ObjectError::item("items", i, e))?;
            if is_ip_set(&s.cluster_ip) {
                by_name.insert(k, s);
            }
        }
        self.resource_version = watch::list_resource_version(&list);
        let mut c = self.shared.lock();
        c.by_name = by_name;
        c.synced = true;
        Ok(())
    }

    fn apply_object(
        &mut self,
        event: Event,
        object: serde_json::Value,
    ) -> Result<bool, ObjectError> {
        let (k, s) = decode(object)?;
        let mut c = self.shared.lock();
        // A service whose clusterIP went away (its type turned ExternalName) gives nothing.
        Ok(if event == Event::Deleted || !is_ip_set(&s.cluster_ip) {
            c.by_name.remove(&k).is_some()
        } else if c.by_name.get(&k) == Some(&s) {
            false
        } else {
            c.by_name.insert(k, s);
            true
        })
    }

    fn resource_version(&mut self) -> &mut String {
        &mut self.resource_version
    }

    fn count(&self) -> usize {
        self.shared.lock().by_name.len()
    }
}

/// Fills `shared` from a checkpoint and marks it synced; how many services it held, `Ok(None)`
/// when there is none, an error naming the file when it does not read (it is then ignored).
pub fn load_checkpoint(path: &Path, shared: &Shared) -> Result<Option<usize>, String> {
    let Some(list) = crate::atomic_file::read_json::<serde_json::Value>(path, MAX_CHECKPOINT)?
    else {
        return Ok(None);
    };
    if !list.get("items").is_some_and(serde_json::Value::is_array) {
        return Err(format!("{}: no `items` array", path.display()));
    }
    let mut set = ServiceSet::new(shared.clone());
    set.replace(list)
        .map_err(|e| format!("{}: {e}", path.display()))?;
    Ok(Some(set.count()))
}

/// Writes the checkpoint when its content changed since `last`.
fn save_checkpoint(path: &Path, set: &ServiceSet, last: &mut Vec<u8>) {
    let bytes = set.checkpoint();
    if bytes == *last {
        return;
    }
    if bytes.len() > MAX_CHECKPOINT {
        log::warn!("api services: not checkpointing: larger than {MAX_CHECKPOINT} bytes");
        return;
    }
    match crate::atomic_file::write(path, &bytes) {
        Ok(()) => *last = bytes,
        Err(e) => log::warn!("api services: writing {}: {e}", path.display()),
    }
}

/// Lists and watches the Services into `shared` on the calling thread, until nothing else holds
/// the cache.
pub fn run_blocking(
    client: Client,
    shared: Shared,
    node_name: &str,
    poll_interval: Option<Duration>,
    checkpoint: Option<PathBuf>,
) {
    let mut jitter = Jitter::new(&format!("{node_name}/services"));
    let probe = shared.clone();
    let mut set = ServiceSet::new(shared);
    // What the checkpoint holds when it was loaded; otherwise the first list writes one, empty
    // or not (an empty set read is known, and a restart offline must know it).
    let mut written = if probe.lock().synced {
        set.checkpoint()
    } else {
        Vec::new()
    };
    let opts = watch::Options {
        poll_interval,
        log_prefix: "api services",
        forbidden_hint: format!(
            "containers get no service variables and API pods wait; the Node authorizer lets \
             system:node:{node_name} list and watch services"
        ),
    };
    let mut emit = |set: &ServiceSet| {
        if let Some(path) = &checkpoint {
            save_checkpoint(path, set, &mut written);
        }
        true
    };
    // The probe and the set hold the cache: alone, nobody reads it any more.
    let alive = || probe.holders() > 2;
    watch::run(&client, &mut set, &opts, &mut jitter, &alive, &mut emit);
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::apiclient::watch::{Applied, apply};

    fn ev(kind: &str, ns: &str, name: &str, rv: &str, ip: &str) -> Vec<u8> {
        format!(
            r#"{{"type":"{kind}","object":{{"kind":"Service","metadata":{{"name":"{name}","namespace":"{ns}","resourceVersion":"{rv}","labels":{{"x":"y"}}}},"spec":{{"clusterIP":"{ip}","clusterIPs":["{ip}"],"type":"ClusterIP","ports":[{{"name":"http","port":80,"protocol":"TCP","targetPort":8080}}],"selector":{{"app":"a"}}}},"status":{{"loadBalancer":{{}}}}}}}}"#
        )
        .into_bytes()
    }

    #[test]
    fn a_list_then_events_keep_only_what_the_variables_need() {
        let shared = Shared::default();
        let mut set = ServiceSet::new(shared.clone());
        assert!(!shared.lock().synced);
        let list = serde_json::json!({
            "kind": "ServiceList",
            "metadata": {"resourceVersion": "10"},
            "items": [
                {"metadata": {"name": "kubernetes", "namespace": "default"},
                 "spec": {"clusterIP": "10.0.0.1", "ports": [{"name": "https", "port": 443, "protocol": "TCP", "targetPort": 6443}]}},
                {"metadata": {"name": "ext", "namespace": "a"}, "spec": {"type": "ExternalName", "externalName": "x.example"}},
                {"metadata": {"name": "null-ports", "namespace": "a"}, "spec": {"clusterIP": "10.0.0.9", "ports": null}}
            ]
        });
        set.replace(list).unwrap();
        assert_eq!(set.resource_version, "10");
        {
            let c = shared.lock();
            assert!(c.synced);
            let names: Vec<String> = c.by_name.keys().map(|(n, s)| format!("{n}/{s}")).collect();
            assert_eq!(names, vec!["a/null-ports", "default/kubernetes"]);
            assert_eq!(
                c.by_name[&("default".into(), "kubernetes".into())],
                Service {
                    cluster_ip: "10.0.0.1".into(),
                    ports: vec![Port {
                        name: "https".into(),
                        port: 443,
                        protocol: "TCP".into()
                    }]
                    .into()
                }
            );
        }
        assert_eq!(
            apply(&mut set, &ev("ADDED", "a", "web", "11", "10.0.0.5")).unwrap(),
            Applied::Changed
        );
        // Labels, selector, status: nothing the variables read; no change.
        let same = String::from_utf8(ev("MODIFIED", "a", "web", "12", "10.0.0.5"))
            .unwrap()
            .replace(r#""app":"a""#, r#""app":"b""#);
        assert_eq!(
            apply(&mut set, same.as_bytes()).unwrap(),
            Applied::Unchanged
        );
        assert_eq!(set.resource_version, "12");
        assert_eq!(
            shared.lock().env("a", true)["WEB_PORT_80_TCP"],
            "tcp://10.0.0.5:80"
        );
        // Turned into an ExternalName: no clusterIP, gone from the cache.
        assert_eq!(
            apply(&mut set, &ev("MODIFIED", "a", "web", "13", "")).unwrap(),
            Applied::Changed
        );
        assert_eq!(
            apply(&mut set, &ev("ADDED", "a", "web", "14", "10.0.0.6")).unwrap(),
            Applied::Changed
        );
        assert_eq!(
            apply(&mut set, &ev("DELETED", "a", "web", "15", "10.0.0.6")).unwrap(),
            Applied::Changed
        );
        assert_eq!(set.count(), 2);
        assert!(
            apply(
                &mut set,
                br#"{"type":"ADDED","object":{"metadata":{"namespace":"a"}}}"#
            )
            .unwrap_err()
            .to_string()
            .ends_with("watch event ADDED: service: metadata.name: empty")
        );
    }

    #[test]
    fn the_checkpoint_gives_the_same_set_and_counts_as_read() {
        let dir = std::env::temp_dir().join(format!("picolet-svc-ckpt-{}", std::process::id()));
        let path = dir.join("services.json");
        let _ = std::fs::remove_dir_all(&dir);
        let shared = Shared::default();
        assert_eq!(load_checkpoint(&path, &shared).unwrap(), None);
        assert!(!shared.lock().synced, "no checkpoint: unknown");
        let mut set = ServiceSet::new(shared.clone());
        apply(&mut set, &ev("ADDED", "a", "web", "1", "fd00::5")).unwrap();
        let mut last = Vec::new();
        save_checkpoint(&path, &set, &mut last);
        let m1 = std::fs::metadata(&path).unwrap().modified().unwrap();
        save_checkpoint(&path, &set, &mut last);
        assert_eq!(std::fs::metadata(&path).unwrap().modified().unwrap(), m1);
        let back = Shared::default();
        assert_eq!(load_checkpoint(&path, &back).unwrap(), Some(1));
        assert!(back.lock().synced);
        assert_eq!(back.lock().by_name, shared.lock().by_name);
        assert_eq!(back.lock().env("a", true)["WEB_PORT"], "tcp://[fd00::5]:80");
        std::fs::write(&path, b"{}").unwrap();
        let e = load_checkpoint(&path, &Shared::default()).unwrap_err();
        assert!(e.ends_with("no `items` array"), "{e}");
        let _ = std::fs::remove_dir_all(&dir);
    }
}
