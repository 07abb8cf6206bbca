//! Pod workers: one serialized worker per pod UID.
//!
//! A worker runs one sync at a time. Work sent while it is busy lands in a one-slot mailbox
//! where the newest request replaces an older one (updates coalesce to the latest), except that
//! a termination is never replaced by a sync: once a pod is going away, it goes away.

use std::cell::RefCell;
use std::collections::HashMap;
use std::rc::Rc;
use std::time::Duration;

use crate::api::Pod;
use crate::kuberuntime::RuntimeManager;
use crate::kuberuntime::config::grace_period;
use crate::pleg::Cache;
use crate::rt;
use crate::status::manager::StatusManager;

/// What a worker is asked to do.
#[derive(Debug, Clone)]
pub enum Work {
    /// Bring the pod to its spec.
    Sync(Rc<Pod>),
    /// Stop the pod and remove everything it left in the runtime and on disk.
    Terminate { uid: String, grace: i64 },
}

/// What a worker reports back to the sync loop after each piece of work.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Done {
    /// A sync finished; sync again after this long at the latest.
    Synced {
        uid: String,
        retry_after: Option<Duration>,
    },
    /// The pod is gone from the runtime; its worker has exited.
    Terminated { uid: String },
    /// Termination failed; the loop retries it.
    TerminateFailed { uid: String },
}

struct Worker {
    slot: Rc<RefCell<Option<Work>>>,
    wake: async_channel::Sender<()>,
    _task: rt::Task<()>,
}

/// Shared pieces every worker uses.
pub struct Shared {
    pub rm: Rc<RuntimeManager>,
    pub cache: Rc<RefCell<Cache>>,
    pub status: Rc<StatusManager>,
    pub done: async_channel::Sender<Done>,
}

pub struct PodWorkers {
    shared: Rc<Shared>,
    workers: RefCell<HashMap<String, Worker>>,
}

/// Deadline for the inspection a sync starts with.
const INSPECT_DEADLINE: Duration = Duration::from_secs(30);

async fn sync(sh: &Shared, pod: &Pod) -> Option<Duration> {
    let uid = pod.metadata.uid.as_str();
    let st = match rt::timeout(INSPECT_DEADLINE, sh.rm.pod_status(uid)).await {
        Ok(Ok(st)) => st,
        Ok(Err(e)) => {
            log::warn!("sync of pod {} ({uid}): inspecting: {e}", pod.metadata.name);
            return Some(Duration::from_secs(2));
        }
        Err(e) => {
            log::warn!("sync of pod {} ({uid}): inspecting: {e}", pod.metadata.name);
            return Some(Duration::from_secs(2));
        }
    };
    let at = rt::now_nanos();
    let outcome = sh.rm.sync_pod(pod, &st).await;
    for e in &outcome.errors {
        log::warn!("sync of pod {} ({uid}): {e}", pod.metadata.name);
    }
    // Observe again after acting, so status and cache show the result at once.
    let after = rt::now_nanos();
    let fresh = match rt::timeout(INSPECT_DEADLINE, sh.rm.pod_status(uid)).await {
        Ok(Ok(s)) => {
            sh.cache
                .borrow_mut()
                .put(s.clone(), after, Some(grace_period(pod)));
            s
        }
        _ => {
            sh.cache
                .borrow_mut()
                .put(st.clone(), at, Some(grace_period(pod)));
            st
        }
    };
    sh.status.update(pod, &fresh, &sh.rm);
    outcome.retry_after
}

async fn terminate(sh: &Shared, uid: &str, grace: i64) -> bool {
    let st = match rt::timeout(INSPECT_DEADLINE, sh.rm.pod_status(uid)).await {
        Ok(Ok(st)) => st,
        Ok(Err(e)) => {
            log::warn!("terminating pod {uid}: inspecting: {e}");
            return false;
        }
        Err(e) => {
            log::warn!("terminating pod {uid}: inspecting: {e}");
            return false;
        }
    };
    if !st.sandboxes.is_empty() || !st.containers.is_empty() {
        log::info!(
            "stopping pod {} ({uid}) with grace period {grace}s",
            st.name
        );
    }
    match sh.rm.remove_pod(&st, grace).await {
        Ok(()) => {
            sh.cache.borrow_mut().remove(uid);
            sh.status.remove(uid);
            true
        }
        Err(e) => {
            log::warn!("terminating pod {} ({uid}): {e}", st.name);
            false
        }
    }
}

async fn worker_loop(
    sh: Rc<Shared>,
    uid: String,
    slot: Rc<RefCell<Option<Work>>>,
    wake: async_channel::Receiver<()>,
) {
    while wake.recv().await.is_ok() {
        let Some(work) = slot.borrow_mut().take() else {
            continue;
        };
        match work {
            Work::Sync(pod) => {
                let retry_after = sync(&sh, &pod).await;
                let _ = sh
                    .done
                    .send(Done::Synced {
                        uid: uid.clone(),
                        retry_after,
                    })
                    .await;
            }
            Work::Terminate { grace, .. } => {
                let msg = if terminate(&sh, &uid, grace).await {
                    Done::Terminated { uid: uid.clone() }
                } else {
                    Done::TerminateFailed { uid: uid.clone() }
                };
                let _ = sh.done.send(msg).await;
            }
        }
    }
}

impl PodWorkers {
    pub fn new(shared: Rc<Shared>) -> Self {
        PodWorkers {
            shared,
            workers: RefCell::default(),
        }
    }

    /// Hands work to the pod's worker, starting one if needed. Returns true when the work adds
    /// one more report to come (false when it replaced, or lost to, work still waiting).
    pub fn dispatch(&self, work: Work) -> bool {
        let uid = match &work {
            Work::Sync(p) => p.metadata.uid.clone(),
            Work::Terminate { uid, .. } => uid.clone(),
        };
        let mut workers = self.workers.borrow_mut();
        let w = workers.entry(uid.clone()).or_insert_with(|| {
            let slot = Rc::new(RefCell::new(None));
            let (wake, rx) = async_channel::bounded(1);
            let task = rt::spawn(worker_loop(self.shared.clone(), uid, slot.clone(), rx));
            Worker {
                slot,
                wake,
                _task: task,
            }
        });
        let added = {
            let mut slot = w.slot.borrow_mut();
            let added = slot.is_none();
            let keep_terminate =
                matches!(*slot, Some(Work::Terminate { .. })) && matches!(work, Work::Sync(_));
            if !keep_terminate {
                *slot = Some(work);
            }
            added
        };
        // A full wake channel already means "look at the slot".
        let _ = w.wake.try_send(());
        added
    }

    /// Forgets a worker whose pod is gone (its task ends with it).
    pub fn remove(&self, uid: &str) {
        self.workers.borrow_mut().remove(uid);
    }

    pub fn has(&self, uid: &str) -> bool {
        self.workers.borrow().contains_key(uid)
    }

    pub fn len(&self) -> usize {
        self.workers.borrow().len()
    }

    pub fn is_empty(&self) -> bool {
        self.workers.borrow().is_empty()
    }

    /// The grace period to terminate a pod with.
    pub fn grace_for(pod: &Pod) -> i64 {
        grace_period(pod)
    }
}
