//! The apiserver pod source (feature `apiserver`): the pods bound to this node
//! (`spec.nodeName=<node>`), listed once, then watched from the list's resourceVersion with
//! bookmarks on (`apiclient::watch`, which holds the fleet behaviour: resuming, 410 Gone,
//! jittered back-off, `--apiserver-poll-interval`). Every change hands the mux a full snapshot,
//! source `api`, as the file source does.
//!
//! The network work runs on a thread of its own (a watch blocks in a read for minutes); the
//! executor only receives snapshots.

use std::collections::BTreeMap;
use std::time::Duration;

use crate::api::Pod;
use crate::apiclient::Client;
use crate::apiclient::backoff::Jitter;
use crate::apiclient::watch::{self, Applied, Event, ObjectError, WatchError, Watched};
#[cfg(test)]
use crate::apiclient::watch::{MAX_EVENT, read_watch};

use super::{ANNOTATION_CONFIG_MIRROR, ANNOTATION_CONFIG_SOURCE, Snapshot, Source};

/// A mirror pod the apiserver holds for one of this node's static pods.
#[derive(Debug, Clone, PartialEq)]
pub struct MirrorPod {
    pub namespace: String,
    pub name: String,
    pub uid: String,
    /// The static pod's hash it mirrors (`kubernetes.io/config.mirror`).
    pub hash: String,
    pub status: crate::api::PodStatus,
    pub deleting: bool,
}

/// The mirror pods last seen, shared with the mirror manager.
pub type Mirrors = std::sync::Arc<std::sync::Mutex<Option<Vec<MirrorPod>>>>;

fn is_mirror(p: &Pod) -> bool {
    p.metadata
        .annotations
        .contains_key(ANNOTATION_CONFIG_MIRROR)
}

#[derive(Debug, Clone)]
pub struct ApiSourceConfig {
    pub node_name: String,
    /// List every this long instead of watching.
    pub poll_interval: Option<Duration>,
    /// Where the node's API pods are checkpointed (`<root-dir>/checkpoints/pods.json`).
    pub checkpoint: Option<std::path::PathBuf>,
    /// The node as admission sees it: a pod placed here that does not fit its labels and taints
    /// has the Node read again before the pod is handed over ([`refresh_node`]).
    pub node: Option<crate::admission::NodeInfo>,
}

/// The node's pods as the API shows them: pure, fed by lists and watch events.
#[derive(Debug, Default)]
pub struct PodSet {
    pods: BTreeMap<String, Pod>,
    /// The node whose pods these are (the list's field selector).
    node: String,
    /// The resourceVersion to resume a watch from.
    pub resource_version: String,
}

impl PodSet {
    /// Replaces the set with a full list (a PodList's JSON).
    pub fn replace_list(&mut self, mut list: serde_json::Value) -> Result<(), ObjectError> {
        // Through a Value, as watch events are: one copy of the Pod structs' deserializer in the
        // binary (from a Value) instead of a second one from bytes (docs/figures.md, "Footprint").
        let items = pods_of(&mut list, "items")?;
        self.pods = items
            .into_iter()
            .map(|p| (p.metadata.uid.clone(), p))
            .collect();
        self.resource_version = watch::list_resource_version(&list);
        Ok(())
    }

    /// Applies one line of a watch stream (the fuzz target's way in).
    pub fn apply(&mut self, line: &[u8]) -> Result<Applied, WatchError> {
        watch::apply(self, line)
    }

    /// Applies one frame of a watch stream in the protobuf encoding (the fuzz target's way in).
    pub fn apply_frame(&mut self, frame: &[u8]) -> Result<Applied, WatchError> {
        let (kind, object) =
            crate::apiclient::pod_proto::watch_event(frame).map_err(WatchError::Protobuf)?;
        watch::apply_event(self, kind, object)
    }

    /// The node's pods, marked as coming from the API. Pods being deleted are in it: the loop
    /// stops them with their deletion's grace period, then they are deleted for good.
    pub fn snapshot(&self) -> Snapshot {
        // Mirror pods are the apiserver's view of static pods: never run as pods of their own.
        let pods = self
            .pods
            .values()
            .filter(|p| !is_mirror(p))
            .cloned()
            .map(|mut p| {
                p.metadata
                    .annotations
                    .insert(ANNOTATION_CONFIG_SOURCE.into(), Source::Api.as_str().into());
                p
            })
            .collect();
        Snapshot {
            source: Source::Api,
            pods,
        }
    }

    /// The mirror pods among the node's pods.
    pub fn mirrors(&self) -> Vec<MirrorPod> {
        self.pods
            .values()
            .filter(|p| is_mirror(p))
            .map(|p| MirrorPod {
                namespace: p.metadata.namespace.clone(),
                name: p.metadata.name.clone(),
                uid: p.metadata.uid.clone(),
                hash: p.metadata.annotations[ANNOTATION_CONFIG_MIRROR].clone(),
                status: p.status.clone(),
                deleting: p.metadata.deletion_timestamp.is_some(),
            })
            .collect()
    }

    pub fn len(&self) -> usize {
        self.pods.len()
    }

    pub fn is_empty(&self) -> bool {
        self.pods.is_empty()
    }
}

impl Watched for PodSet {
    fn what(&self) -> &'static str {
        "pods"
    }

    fn path(&self, query: &str) -> String {
        format!(
            "/api/v1/pods?fieldSelector=spec.nodeName%3D{}{query}",
            self.node
        )
    }

    fn replace(&mut self, list: serde_json::Value) -> Result<(), ObjectError> {
        self.replace_list(list)
    }

    fn apply_object(
        &mut self,
        event: Event,
        object: serde_json::Value,
    ) -> Result<bool, ObjectError> {
        let pod = pod_from_value(object, Some("pod"))?;
        let uid = pod.metadata.uid.clone();
        Ok(if event == Event::Deleted {
            self.pods.remove(&uid).is_some()
        } else if self.pods.get(&uid) == Some(&pod) {
            false
        } else {
            self.pods.insert(uid, pod);
            true
        })
    }

    fn resource_version(&mut self) -> &mut String {
        &mut self.resource_version
    }

    fn count(&self) -> usize {
        self.pods.len()
    }

    fn pods(&self) -> bool {
        true
    }
}

/// Largest checkpoint written or read (a node's pods are far smaller).
const MAX_CHECKPOINT: usize = 16 << 20;

/// The checkpoint: the node's API pods as last seen, without their status (which changes often
/// and is the apiserver's to keep), so a picolet that starts while the apiserver is unreachable
/// runs them at once. A pod whose status is Succeeded or Failed keeps its phase, reason and
/// message: it ended (stopped by a node shutdown before a reboot, say) and must not run again. A missing file means "unknown"; a file with no pods means "known empty".
/// No resourceVersion: it moves with every status change, and a restarted picolet lists anyway.
#[derive(serde::Serialize)]
struct Checkpoint {
    pods: Vec<Pod>,
}

/// A Pod from a JSON value, through the binary's one copy of the Pod deserializer (fields it
/// does not model are the apiserver's to keep, and ignored here).
/// `what` names the object in the error where nothing else does.
fn pod_from_value(v: serde_json::Value, what: Option<&'static str>) -> Result<Pod, ObjectError> {
    crate::api::pod_from_value(v, &mut |_| {}).map_err(|e| ObjectError::Decode {
        what,
        source: Box::new(e),
    })
}

/// Each Pod of `field` (an array) of a JSON object, e.g. a list's `items`; an error names the
/// item.
fn pods_of(object: &mut serde_json::Value, field: &'static str) -> Result<Vec<Pod>, ObjectError> {
    let items = match object.get_mut(field).map(serde_json::Value::take) {
        None | Some(serde_json::Value::Null) => return Ok(Vec::new()),
        Some(serde_json::Value::Array(items)) => items,
        Some(_) => return Err(ObjectError::NotAnArray(field)),
    };
    items
        .into_iter()
        .enumerate()
        .map(|(i, item)| pod_from_value(item, None).map_err(|e| ObjectError::item(field, i, e)))
        .collect()
}

impl PodSet {
    /// The checkpoint bytes of the current set.
    fn checkpoint(&self) -> Vec<u8> {
        let pods = self
            .pods
            .values()
            .map(|p| {
                let mut p = p.clone();
                let finished = matches!(p.status.phase.as_deref(), Some("Succeeded" | "Failed"));
                p.status = if finished {
                    crate::api::PodStatus {
                        phase: p.status.phase.take(),
                        reason: p.status.reason.take(),
                        message: p.status.message.take(),
                        ..Default::default()
                    }
                } else {
                    Default::default()
                };
                p.metadata.resource_version = None;
                p
            })
            .collect();
        serde_json::to_vec(&Checkpoint { pods }).unwrap_or_default()
    }
}

/// Reads a checkpoint: `Ok(None)` when there is none (unknown), an error naming the file when it
/// is unreadable (it is then ignored: better to wait for the apiserver than run a guess).
pub fn load_checkpoint(path: &std::path::Path) -> Result<Option<PodSet>, String> {
    // Through a Value, like the list and watch events (one copy of the Pod deserializer).
    let Some(mut c) = crate::atomic_file::read_json::<serde_json::Value>(path, MAX_CHECKPOINT)?
    else {
        return Ok(None);
    };
    // A checkpoint without its pods array is damaged, not "known empty".
    if !c.get("pods").is_some_and(serde_json::Value::is_array) {
        return Err(format!("{}: no `pods` array", path.display()));
    }
    let pods = pods_of(&mut c, "pods").map_err(|e| format!("{}: {e}", path.display()))?;
    Ok(Some(PodSet {
        pods: pods
            .into_iter()
            .map(|p| (p.metadata.uid.clone(), p))
            .collect(),
        resource_version: String::new(),
        node: String::new(),
    }))
}

/// Writes the checkpoint when its content changed since `last` (status changes never do).
fn save_checkpoint(path: &std::path::Path, set: &PodSet, last: &mut Vec<u8>) {
    let bytes = set.checkpoint();
    if bytes == *last {
        return;
    }
    if bytes.len() > MAX_CHECKPOINT {
        log::warn!(
            "api source: not checkpointing {} pods: larger than {MAX_CHECKPOINT} bytes",
            set.len()
        );
        return;
    }
    match crate::atomic_file::write(path, &bytes) {
        Ok(()) => *last = bytes,
        Err(e) => log::warn!("api source: writing {}: {e}", path.display()),
    }
}

/// Runs the source on the calling thread until the receiver of `tx` goes away.
pub fn run_blocking(
    client: Client,
    cfg: ApiSourceConfig,
    tx: async_channel::Sender<Snapshot>,
    mirrors: Mirrors,
) {
    let mut jitter = Jitter::new(&cfg.node_name);
    let mut set = PodSet::default();
    let mut written = Vec::new();
    // Run what the node had before anything is asked of the apiserver: it may be far away.
    if let Some(path) = &cfg.checkpoint {
        match load_checkpoint(path) {
            Ok(Some(saved)) => {
                log::info!(
                    "api source: running {} pods from the checkpoint until the apiserver answers",
                    saved.len()
                );
                written = saved.checkpoint();
                let _ = tx.send_blocking(saved.snapshot());
                // Resume from where the checkpoint left off: its pods are what picolet runs.
                set = saved;
            }
            Ok(None) => {}
            Err(e) => log::warn!("api source: ignoring the checkpoint: {e}"),
        }
    }
    set.node = cfg.node_name.clone();
    let opts = watch::Options {
        poll_interval: cfg.poll_interval,
        log_prefix: "api source",
        forbidden_hint: format!(
            "check that the kubeconfig's identity is system:node:{} in group system:nodes",
            cfg.node_name
        ),
    };
    let mut placed = std::collections::HashSet::new();
    let mut emit = |set: &PodSet| {
        if let Some(node) = &cfg.node {
            refresh_node(&client, node, set, &mut placed);
        }
        if let Ok(mut m) = mirrors.lock() {
            *m = Some(set.mirrors());
        }
        if let Some(path) = &cfg.checkpoint {
            save_checkpoint(path, set, &mut written);
        }
        tx.send_blocking(set.snapshot()).is_ok()
    };
    let alive = || !tx.is_closed();
    watch::run(&client, &mut set, &opts, &mut jitter, &alive, &mut emit);
}

/// Reads the Node again when a pod the scheduler placed here since the last look does not fit
/// the node's labels and NoExecute taints as admission knows them (a label added with
/// `kubectl label node` moments before, which the next status report would only bring minutes
/// later): so admission weighs it against the Node the scheduler saw, as upstream's kubelet
/// does with its node lister, without watching the Node (each of its status reports would come
/// back over the link). One read for all such pods of a change; each pod is looked at once.
/// `placed` holds the uids looked at, pruned to the set.
fn refresh_node(
    client: &Client,
    node: &crate::admission::NodeInfo,
    set: &PodSet,
    placed: &mut std::collections::HashSet<String>,
) -> bool {
    placed.retain(|uid| set.pods.contains_key(uid));
    let mut misfit = None;
    for (uid, p) in &set.pods {
        if !placed.insert(uid.clone()) || is_mirror(p) {
            continue;
        }
        let ended = matches!(p.status.phase.as_deref(), Some("Succeeded" | "Failed"));
        if misfit.is_none() && !ended && !node.fits_placement(p) {
            misfit = Some(format!("{}/{}", p.metadata.namespace, p.metadata.name));
        }
    }
    let Some(pod) = misfit else {
        return false;
    };
    let path = format!("/api/v1/nodes/{}", node.name);
    match client.json::<serde_json::Value>("GET", &path, None) {
        Ok(v) => {
            log::debug!(
                "api source: read Node {} again: pod {pod} did not fit its labels or taints as known",
                node.name
            );
            node.seen.read(&v)
        }
        Err(e) => {
            log::warn!(
                "api source: reading Node {} for pod {pod}, which does not fit its labels or \
                 taints as known: {e}",
                node.name
            );
            false
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ev(kind: &str, uid: &str, rv: &str, extra: &str) -> Vec<u8> {
        format!(
            r#"{{"type":"{kind}","object":{{"kind":"Pod","metadata":{{"name":"p-{uid}","namespace":"default","uid":"{uid}","resourceVersion":"{rv}"{extra}}},"spec":{{"nodeName":"n","containers":[{{"name":"c","image":"busybox"}}]}}}}}}"#
        )
        .into_bytes()
    }

    #[test]
    fn list_then_events_track_pods_and_the_resource_version() {
        let mut s = PodSet::default();
        let list: serde_json::Value = serde_json::from_str(
            r#"{"metadata":{"resourceVersion":"10"},"items":[{"metadata":{"name":"a","namespace":"default","uid":"a","resourceVersion":"9"},"spec":{"containers":[]}}]}"#,
        )
        .unwrap();
        s.replace_list(list).unwrap();
        assert_eq!((s.len(), s.resource_version.as_str()), (1, "10"));
        assert_eq!(
            s.apply(&ev("ADDED", "b", "11", "")).unwrap(),
            Applied::Changed
        );
        assert_eq!(
            s.apply(&ev("MODIFIED", "b", "12", "")).unwrap(),
            Applied::Changed
        );
        // The same object again (a re-sent event) changes nothing.
        assert_eq!(
            s.apply(&ev("MODIFIED", "b", "12", "")).unwrap(),
            Applied::Unchanged
        );
        let bm =
            br#"{"type":"BOOKMARK","object":{"kind":"Pod","metadata":{"resourceVersion":"40"}}}"#;
        assert_eq!(s.apply(bm).unwrap(), Applied::Unchanged);
        assert_eq!(s.resource_version, "40");
        // Being deleted: still in the snapshot, with its deletion's grace period.
        let deleting =
            r#","deletionTimestamp":"2026-01-01T00:00:00Z","deletionGracePeriodSeconds":3"#;
        assert_eq!(
            s.apply(&ev("MODIFIED", "a", "41", deleting)).unwrap(),
            Applied::Changed
        );
        let snap = s.snapshot();
        assert_eq!(snap.source, Source::Api);
        let names: Vec<&str> = snap.pods.iter().map(|p| p.metadata.name.as_str()).collect();
        assert_eq!(names, vec!["p-a", "p-b"]);
        assert_eq!(snap.pods[0].metadata.deletion_grace_period_seconds, Some(3));
        assert_eq!(
            snap.pods[0].metadata.annotations[ANNOTATION_CONFIG_SOURCE],
            "api"
        );
        assert_eq!(
            s.apply(&ev("DELETED", "a", "42", "")).unwrap(),
            Applied::Changed
        );
        assert_eq!(
            s.apply(&ev("DELETED", "a", "43", "")).unwrap(),
            Applied::Unchanged
        );
        assert_eq!(s.len(), 1);
        let gone = br#"{"type":"ERROR","object":{"kind":"Status","code":410,"reason":"Expired","message":"too old resource version"}}"#;
        assert_eq!(s.apply(gone).unwrap(), Applied::Gone);
        assert!(
            s.apply(b"{not json")
                .unwrap_err()
                .to_string()
                .starts_with("watch event: ")
        );
    }

    #[test]
    fn a_watch_event_beyond_the_limits_is_refused_before_parsing() {
        let mut s = PodSet::default();
        // 100,000 nested arrays inside an otherwise valid event: the pre-pass names the depth.
        let deep = format!(
            r#"{{"type":"ADDED","object":{{"x":{}{}}}}}"#,
            "[".repeat(100_000),
            "]".repeat(100_000)
        );
        let e = s.apply(deep.as_bytes()).unwrap_err();
        assert!(matches!(e, WatchError::Limits(_)), "{e:?}");
        let e = e.to_string();
        assert!(e.starts_with("watch event: refused"), "{e}");
        assert!(e.contains("nested deeper than the limit of 64"), "{e}");
        assert!(s.is_empty());
    }

    #[test]
    fn a_watch_stream_is_read_line_by_line_until_it_ends() {
        let mut s = PodSet::default();
        let mut stream = Vec::new();
        for (k, u, rv) in [
            ("ADDED", "x", "1"),
            ("ADDED", "y", "2"),
            ("DELETED", "x", "3"),
        ] {
            stream.extend(ev(k, u, rv, ""));
            stream.extend(b"\n\n");
        }
        let mut seen = Vec::new();
        let end = read_watch(&stream[..], &mut s, &mut |set| {
            seen.push(set.len());
            true
        })
        .unwrap();
        assert_eq!(end, Applied::Unchanged);
        assert_eq!(seen, vec![1, 2, 1]);
        assert_eq!(s.resource_version, "3");
        // An oversized line is refused, not buffered without end.
        let huge = vec![b'x'; MAX_EVENT + 10];
        assert!(read_watch(&huge[..], &mut s, &mut |_| true).is_err());
    }

    #[test]
    fn a_watch_stream_in_protobuf_is_read_frame_by_frame() {
        use crate::apiclient::watch::read_watch_frames;
        let frame = |b: &[u8]| [&u32::try_from(b.len()).unwrap().to_be_bytes()[..], b].concat();
        // The ADDED event of a real apiserver's watch, then an ERROR with a 410 Status.
        let added = include_bytes!("../../fuzz/seeds/watch_frame/added");
        let status = crate::apiclient::protobuf::encode_status(410, "Expired", "too old");
        let error = crate::apiclient::protobuf::encode_watch_event("ERROR", &status);
        let stream = [frame(added), frame(&error)].concat();
        let mut s = PodSet::default();
        let mut seen = Vec::new();
        let end = read_watch_frames(&stream[..], &mut s, &mut |set| {
            seen.push(set.len());
            true
        })
        .unwrap();
        assert_eq!(end, Applied::Gone);
        assert_eq!(seen, vec![1]);
        assert_eq!(s.snapshot().pods[0].metadata.name, "seed");
        // A stream that ends between frames ends the watch; one cut inside a frame, a frame
        // longer than an event may be, or a frame that is no event are errors.
        let mut s = PodSet::default();
        let end = read_watch_frames(&frame(added)[..], &mut s, &mut |_| true).unwrap();
        assert_eq!(end, Applied::Unchanged);
        let cut = &frame(added)[..100];
        assert!(matches!(
            read_watch_frames(cut, &mut s, &mut |_| true),
            Err(WatchError::Read(_))
        ));
        let long = u32::try_from(MAX_EVENT + 1).unwrap().to_be_bytes();
        assert!(matches!(
            read_watch_frames(&long[..], &mut s, &mut |_| true),
            Err(WatchError::TooLong)
        ));
        let e = read_watch_frames(&frame(b"\x0a\x01")[..], &mut s, &mut |_| true).unwrap_err();
        assert!(matches!(e, WatchError::Protobuf(_)), "{e:?}");
    }

    #[test]
    fn a_checkpoint_keeps_the_end_of_a_pod_that_ended() {
        let dir = std::env::temp_dir().join(format!("picolet-ckpt-end-{}", std::process::id()));
        let path = dir.join("pods.json");
        let _ = std::fs::remove_dir_all(&dir);
        let mut s = PodSet::default();
        let mut last = Vec::new();
        let running = br#"{"type":"ADDED","object":{"kind":"Pod","metadata":{"name":"p-a","namespace":"default","uid":"a","resourceVersion":"5"},"spec":{"nodeName":"n","containers":[{"name":"c","image":"busybox"}]},"status":{"phase":"Running","hostIP":"10.0.0.1"}}}"#;
        s.apply(running).unwrap();
        save_checkpoint(&path, &s, &mut last);
        let back = load_checkpoint(&path).unwrap().unwrap().snapshot();
        assert_eq!(
            back.pods[0].status,
            Default::default(),
            "a running pod's status is not kept"
        );
        // Stopped by a node shutdown: the checkpoint is rewritten with the end, so a reboot
        // that reads it does not run the pod again.
        let ended = br#"{"type":"MODIFIED","object":{"kind":"Pod","metadata":{"name":"p-a","namespace":"default","uid":"a","resourceVersion":"6"},"spec":{"nodeName":"n","containers":[{"name":"c","image":"busybox"}]},"status":{"phase":"Failed","reason":"Terminated","message":"Pod was terminated in response to imminent node shutdown.","hostIP":"10.0.0.1"}}}"#;
        s.apply(ended).unwrap();
        let before = last.clone();
        save_checkpoint(&path, &s, &mut last);
        assert_ne!(last, before, "rewritten");
        let back = load_checkpoint(&path).unwrap().unwrap().snapshot();
        let st = &back.pods[0].status;
        assert_eq!(st.phase.as_deref(), Some("Failed"));
        assert_eq!(st.reason.as_deref(), Some("Terminated"));
        assert_eq!(
            st.message.as_deref(),
            Some("Pod was terminated in response to imminent node shutdown.")
        );
        assert_eq!(st.host_ip, None, "nothing else of the status");
        let _ = std::fs::remove_dir_all(&dir);
    }

    #[test]
    fn checkpoints_keep_known_empty_apart_from_missing_and_skip_status_changes() {
        let dir = std::env::temp_dir().join(format!("picolet-ckpt-{}", std::process::id()));
        let path = dir.join("pods.json");
        let _ = std::fs::remove_dir_all(&dir);
        assert!(
            load_checkpoint(&path).unwrap().is_none(),
            "missing: unknown"
        );
        let mut s = PodSet::default();
        let mut last = Vec::new();
        save_checkpoint(&path, &s, &mut last);
        let empty = load_checkpoint(&path).unwrap().expect("known empty");
        assert_eq!(empty.len(), 0);
        s.apply(&ev("ADDED", "a", "5", "")).unwrap();
        save_checkpoint(&path, &s, &mut last);
        let m1 = std::fs::metadata(&path).unwrap().modified().unwrap();
        // A status-only change writes nothing (flash wear).
        let status = br#"{"type":"MODIFIED","object":{"kind":"Pod","metadata":{"name":"p-a","namespace":"default","uid":"a","resourceVersion":"6"},"spec":{"nodeName":"n","containers":[{"name":"c","image":"busybox"}]},"status":{"phase":"Running"}}}"#;
        assert_eq!(s.apply(status).unwrap(), Applied::Changed);
        let before = last.clone();
        save_checkpoint(&path, &s, &mut last);
        assert_eq!(last, before, "not rewritten");
        assert_eq!(std::fs::metadata(&path).unwrap().modified().unwrap(), m1);
        let back = load_checkpoint(&path).unwrap().unwrap();
        assert_eq!(back.len(), 1);
        assert_eq!(back.snapshot().pods[0].metadata.uid, "a");
        std::fs::write(&path, b"{torn").unwrap();
        let e = load_checkpoint(&path).unwrap_err();
        assert!(e.starts_with(&path.display().to_string()), "{e}");
        // Damaged, not known empty: no pods array; and a bad pod is named by its place and field.
        std::fs::write(&path, b"{}").unwrap();
        let e = load_checkpoint(&path).unwrap_err();
        assert!(e.ends_with("no `pods` array"), "{e}");
        std::fs::write(
            &path,
            br#"{"pods":[{"metadata":{"uid":"a"}},{"spec":{"hostNetwork":"yes"}}]}"#,
        )
        .unwrap();
        let e = load_checkpoint(&path).unwrap_err();
        assert!(e.contains("pods[1]: spec.hostNetwork: invalid type"), "{e}");
        // A null field is as if absent, as from any client.
        std::fs::write(&path, br#"{"pods":[{"metadata":{"uid":"a","creationTimestamp":null},"spec":{"containers":null}}]}"#)
            .unwrap();
        assert_eq!(load_checkpoint(&path).unwrap().unwrap().len(), 1);
        let _ = std::fs::remove_dir_all(&dir);
    }
}
