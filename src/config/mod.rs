//! Pod sources and the config mux that merges them into one stream of updates.
//!
//! Every source hands the mux a full snapshot of its pods (the kubelet's SET operation); the mux
//! diffs it against that source's previous snapshot and emits ADD, UPDATE, REMOVE and RECONCILE
//! for the sync loop. A source counts as seen after its first snapshot; orphan cleanup waits until
//! every configured source has been seen, so a slow source never gets its pods killed.

#[cfg(feature = "apiserver")]
pub mod api;
#[cfg(feature = "file-source")]
pub mod file;
#[cfg(feature = "file-source")]
pub mod last_valid;
pub mod static_pod;

use std::collections::{BTreeMap, HashMap, HashSet};

use crate::api::Pod;

#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Source {
    File,
    Http,
    Api,
}

impl Source {
    /// The value of the `kubernetes.io/config.source` annotation.
    pub fn as_str(self) -> &'static str {
        match self {
            Source::File => "file",
            Source::Http => "http",
            Source::Api => "api",
        }
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Op {
    Add,
    Update,
    Remove,
    Reconcile,
}

#[derive(Debug, Clone)]
pub struct PodUpdate {
    pub op: Op,
    pub source: Source,
    pub pods: Vec<Pod>,
}

/// Everything one source currently holds.
#[derive(Debug, Clone)]
pub struct Snapshot {
    pub source: Source,
    pub pods: Vec<Pod>,
}

pub const ANNOTATION_CONFIG_HASH: &str = "kubernetes.io/config.hash";
pub const ANNOTATION_CONFIG_SOURCE: &str = "kubernetes.io/config.source";
pub const ANNOTATION_CONFIG_SEEN: &str = "kubernetes.io/config.seen";
pub const ANNOTATION_CONFIG_MIRROR: &str = "kubernetes.io/config.mirror";

/// Annotations only the node agent sets: a change in them is not a change of the pod.
const LOCAL_ANNOTATIONS: [&str; 3] = [
    ANNOTATION_CONFIG_HASH,
    ANNOTATION_CONFIG_SOURCE,
    ANNOTATION_CONFIG_SEEN,
];

fn user_annotations(p: &Pod) -> BTreeMap<&str, &str> {
    p.metadata
        .annotations
        .iter()
        .filter(|(k, _)| !LOCAL_ANNOTATIONS.contains(&k.as_str()))
        .map(|(k, v)| (k.as_str(), v.as_str()))
        .collect()
}

/// Whether the sync loop must act on a changed pod (UPDATE), only refresh its status
/// (RECONCILE), or nothing at all.
fn classify(old: &Pod, new: &Pod) -> Option<Op> {
    let (o, n) = (&old.metadata, &new.metadata);
    let changed = old.spec != new.spec
        || o.labels != n.labels
        || o.deletion_timestamp != n.deletion_timestamp
        || o.owner_references != n.owner_references
        || user_annotations(old) != user_annotations(new);
    if changed {
        Some(Op::Update)
    } else if old.status != new.status {
        Some(Op::Reconcile)
    } else {
        None
    }
}

/// Merges source snapshots into pod updates.
#[derive(Debug, Default)]
pub struct Mux {
    pods: HashMap<Source, HashMap<String, Pod>>,
    seen: HashSet<Source>,
    expected: Vec<Source>,
}

impl Mux {
    /// A mux for the given configured sources.
    pub fn new(expected: &[Source]) -> Self {
        Mux {
            expected: expected.to_vec(),
            ..Mux::default()
        }
    }

    /// True once every configured source has delivered its first snapshot.
    pub fn all_sources_seen(&self) -> bool {
        self.expected.iter().all(|s| self.seen.contains(s))
    }

    /// Replaces a source's pods with a snapshot and returns what changed, in the order
    /// REMOVE, ADD, UPDATE, RECONCILE (removals first, so a name freed by one pod can be reused).
    pub fn merge(&mut self, snap: Snapshot) -> Vec<PodUpdate> {
        self.seen.insert(snap.source);
        let old = self.pods.remove(&snap.source).unwrap_or_default();
        let mut new: HashMap<String, Pod> = HashMap::with_capacity(snap.pods.len());
        let (mut adds, mut updates, mut reconciles) = (Vec::new(), Vec::new(), Vec::new());
        for p in snap.pods {
            let uid = p.metadata.uid.clone();
            match old.get(&uid) {
                None => adds.push(p.clone()),
                Some(o) => match classify(o, &p) {
                    Some(Op::Update) => updates.push(p.clone()),
                    Some(_) => reconciles.push(p.clone()),
                    None => {}
                },
            }
            new.insert(uid, p);
        }
        let mut removes: Vec<Pod> = old
            .into_iter()
            .filter(|(uid, _)| !new.contains_key(uid))
            .map(|(_, p)| p)
            .collect();
        removes.sort_by(|a, b| a.metadata.name.cmp(&b.metadata.name));
        self.pods.insert(snap.source, new);
        let source = snap.source;
        [
            (Op::Remove, removes),
            (Op::Add, adds),
            (Op::Update, updates),
            (Op::Reconcile, reconciles),
        ]
        .into_iter()
        .filter(|(_, pods)| !pods.is_empty())
        .map(|(op, pods)| PodUpdate { op, source, pods })
        .collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn pod(uid: &str, image: &str) -> Pod {
        let mut p = Pod::default();
        p.metadata.name = format!("p-{uid}");
        p.metadata.uid = uid.into();
        p.spec.containers.push(crate::api::Container {
            name: "c".into(),
            image: image.into(),
            ..Default::default()
        });
        p
    }

    fn snap(pods: Vec<Pod>) -> Snapshot {
        Snapshot {
            source: Source::File,
            pods,
        }
    }

    fn ops(u: &[PodUpdate]) -> Vec<(Op, Vec<String>)> {
        u.iter()
            .map(|u| {
                (
                    u.op,
                    u.pods.iter().map(|p| p.metadata.uid.clone()).collect(),
                )
            })
            .collect()
    }

    #[test]
    fn first_snapshot_adds_and_marks_seen() {
        let mut m = Mux::new(&[Source::File]);
        assert!(!m.all_sources_seen());
        let u = m.merge(snap(vec![pod("a", "x")]));
        assert_eq!(ops(&u), vec![(Op::Add, vec!["a".to_owned()])]);
        assert!(m.all_sources_seen());
    }

    #[test]
    fn empty_first_snapshot_still_counts_as_seen() {
        let mut m = Mux::new(&[Source::File, Source::Api]);
        assert!(m.merge(snap(vec![])).is_empty());
        assert!(!m.all_sources_seen());
        m.merge(Snapshot {
            source: Source::Api,
            pods: vec![],
        });
        assert!(m.all_sources_seen());
    }

    #[test]
    fn diff_yields_remove_add_update() {
        let mut m = Mux::new(&[Source::File]);
        m.merge(snap(vec![pod("a", "x"), pod("b", "x")]));
        let u = m.merge(snap(vec![pod("a", "y"), pod("c", "x")]));
        assert_eq!(
            ops(&u),
            vec![
                (Op::Remove, vec!["b".to_owned()]),
                (Op::Add, vec!["c".to_owned()]),
                (Op::Update, vec!["a".to_owned()]),
            ]
        );
    }

    #[test]
    fn local_annotations_do_not_count_as_change() {
        let mut m = Mux::new(&[Source::File]);
        m.merge(snap(vec![pod("a", "x")]));
        let mut p = pod("a", "x");
        p.metadata
            .annotations
            .insert(ANNOTATION_CONFIG_SEEN.into(), "later".into());
        assert!(m.merge(snap(vec![p.clone()])).is_empty());
        p.metadata
            .annotations
            .insert("user/thing".into(), "1".into());
        assert_eq!(
            ops(&m.merge(snap(vec![p.clone()]))),
            vec![(Op::Update, vec!["a".to_owned()])]
        );
        p.status.phase = Some("Running".into());
        assert_eq!(
            ops(&m.merge(snap(vec![p]))),
            vec![(Op::Reconcile, vec!["a".to_owned()])]
        );
    }

    #[test]
    fn sources_are_independent() {
        let mut m = Mux::new(&[Source::File, Source::Http]);
        m.merge(snap(vec![pod("a", "x")]));
        let u = m.merge(Snapshot {
            source: Source::Http,
            pods: vec![],
        });
        assert!(
            u.is_empty(),
            "an empty http snapshot must not remove file pods"
        );
    }
}
