//! Housekeeping (every 2 s, once every source has been seen and the runtime listed, so nothing
//! is killed for a source that is merely slow): pods the runtime holds that no source defines
//! are terminated, pods with dead containers beyond the kept ones are garbage-collected, and
//! directories of pods that exist nowhere are removed. Pure: it plans, the loop acts.

use crate::kuberuntime::gc_plan;
use crate::pleg::Cache;

use super::state::{Command, LoopState, Term};

pub(super) fn plan(st: &mut LoopState, cache: &Cache, pod_dirs: &[String], out: &mut Vec<Command>) {
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
        if let Some(c) = cache.get(uid)
            && !gc_plan(&c.status).is_empty()
        {
            st.collecting.insert(uid.clone());
            out.push(Command::CollectGarbage(c.status.clone()));
        }
    }
    for dir in pod_dirs {
        let busy =
            st.pods.contains(dir) || st.terminating.contains_key(dir) || cache.get(dir).is_some();
        if !busy && st.collecting.insert(dir.clone()) {
            log::info!("removing leftover directory of pod {dir}");
            out.push(Command::RemovePodDir(dir.clone()));
        }
    }
    out.push(Command::ExpireBackoffs);
}
