//! Housekeeping (every 2 s, once every source has been seen and the runtime listed, so nothing
//! is killed for a source that is merely slow): pods the runtime holds that no source defines
//! are terminated, pods with dead containers beyond the kept ones are garbage-collected (each
//! pod at most once per [`CONTAINER_GC_PERIOD`], the kubelet's container GC period), and
//! directories of pods that exist nowhere are removed. Pure: it plans, the loop acts.

use std::time::{Duration, Instant};

use crate::kuberuntime::gc_plan;
use crate::pleg::Cache;

use super::state::{Command, LoopState, Term};

/// How often each pod's dead containers and old sandboxes are collected (upstream's
/// ContainerGCPeriod). A pod's first collection is not held back.
pub const CONTAINER_GC_PERIOD: Duration = Duration::from_secs(60);

pub(super) fn plan(
    st: &mut LoopState,
    cache: &Cache,
    pod_dirs: &[String],
    now: Instant,
    out: &mut Vec<Command>,
) {
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
        st.terminate(uid.clone(), t, out);
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
            st.collected_at.insert(uid.clone(), now);
            st.collecting.insert(uid.clone());
            out.push(Command::CollectGarbage(c.status.clone()));
        }
    }
    st.collected_at.retain(|uid, _| cache.get(uid).is_some());
    for dir in pod_dirs {
        let busy =
            st.pods.contains(dir) || st.terminating.contains_key(dir) || cache.get(dir).is_some();
        if !busy && st.collecting.insert(dir.clone()) {
            out.push(Command::RemovePodDir(dir.clone()));
        }
    }
    out.push(Command::ExpireBackoffs);
}
