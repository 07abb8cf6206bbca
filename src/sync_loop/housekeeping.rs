//! Housekeeping (every 2 s, once every source has been seen and the runtime listed, so nothing
//! is killed for a source that is merely slow): pods the runtime holds that no source defines
//! are terminated, pods with dead containers beyond the kept ones are garbage-collected (each
//! pod at most once per [`CONTAINER_GC_PERIOD`], the kubelet's container GC period), and
//! directories of pods that exist nowhere are removed. Pure: it plans from what it is shown, the
//! loop's state (`super::state`) records the plan and turns it into commands.

use std::collections::{HashMap, HashSet};
use std::time::{Duration, Instant};

use crate::kubecontainer::PodRuntimeStatus;
use crate::kuberuntime::gc_plan;
use crate::pleg::Cache;
use crate::pod_manager::PodManager;
use crate::pod_workers::Term;

/// What housekeeping reads of the loop's state.
pub(super) struct Known<'a> {
    /// The desired pods.
    pub pods: &'a PodManager,
    /// Pods being terminated.
    pub terminating: &'a HashMap<String, Term>,
    /// Reports to come per pod.
    pub in_flight: &'a HashMap<String, usize>,
    /// Pods (or leftover directories) whose garbage collection runs.
    pub collecting: &'a HashSet<String>,
    /// When each pod's dead containers and old sandboxes were last collected.
    pub collected_at: &'a HashMap<String, Instant>,
}

/// How often each pod's dead containers and old sandboxes are collected (upstream's
/// ContainerGCPeriod). A pod's first collection is not held back.
pub const CONTAINER_GC_PERIOD: Duration = Duration::from_secs(60);

/// What one housekeeping round decided, in the order it is carried out.
#[derive(Debug, Default)]
pub(super) struct Plan {
    /// Pods the runtime holds that no source defines, to terminate.
    pub orphans: Vec<(String, Term)>,
    /// Desired pods with dead containers or old sandboxes to collect, by UID.
    pub collect: Vec<(String, PodRuntimeStatus)>,
    /// Directories of pods that exist nowhere, to remove.
    pub dirs: Vec<String>,
}

pub(super) fn plan(st: Known<'_>, cache: &Cache, pod_dirs: &[String], now: Instant) -> Plan {
    let mut out = Plan::default();
    let mut cached = cache.uids();
    cached.sort();
    for uid in &cached {
        if st.pods.contains(uid) || st.terminating.contains_key(uid) {
            continue;
        }
        let Some(c) = cache.get(uid) else { continue };
        // Stopped as the kubelet stops an orphan: a 1 s override, raised to the 2 s minimum
        // at the stop itself; a preStop hook (from the container's annotations) gets 1 s.
        let t = Term {
            grace: crate::kuberuntime::config::ORPHAN_GRACE_PERIOD,
            namespace: c.status.namespace.to_string(),
            name: c.status.name.to_string(),
            evicted: false,
            deleted: false,
        };
        log::info!(
            "removing orphaned pod {}/{} ({uid}): no source defines it",
            t.namespace,
            t.name
        );
        out.orphans.push((uid.clone(), t));
    }
    for uid in &cached {
        if !st.pods.contains(uid) || st.in_flight.contains_key(uid) || st.collecting.contains(uid) {
            continue;
        }
        let recent = st
            .collected_at
            .get(uid)
            .is_some_and(|&t| now.saturating_duration_since(t) < CONTAINER_GC_PERIOD);
        if !recent
            && let Some(c) = cache.get(uid)
            && !gc_plan(&c.status).is_empty()
        {
            out.collect.push((uid.clone(), c.status.clone()));
        }
    }
    for dir in pod_dirs {
        let busy =
            st.pods.contains(dir) || st.terminating.contains_key(dir) || cache.get(dir).is_some();
        if !busy && !st.collecting.contains(dir) && !out.dirs.contains(dir) {
            out.dirs.push(dir.clone());
        }
    }
    out
}
