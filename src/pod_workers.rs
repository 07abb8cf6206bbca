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
    Terminate {
        uid: String,
        grace: i64,
        /// The pod's namespace and name, to find its logs when the runtime holds nothing.
        namespace: String,
        name: String,
        /// Evicted: the pod stays (Failed, Evicted) and keeps its status, its containers
        /// shown terminated, instead of being forgotten.
        evicted: bool,
        /// Deleted through the API: its final status, containers terminated, stays to be
        /// posted before the pod is deleted for good.
        deleted: bool,
    },
}

impl Work {
    /// The pod the work is for.
    pub fn uid(&self) -> &str {
        match self {
            Work::Sync(p) => &p.metadata.uid,
            Work::Terminate { uid, .. } => uid,
        }
    }
}

/// A pod being terminated, as the sync loop keeps it: what its worker needs ([`Work::Terminate`]),
/// and its name so a pod of the same name can wait for it (upstream keeps a pod's termination
/// request and its evicted and deleted marks in the pod workers too).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Term {
    pub grace: i64,
    pub namespace: String,
    pub name: String,
    /// Evicted: stopped, but kept with its status as a Failed pod.
    pub evicted: bool,
    /// Deleted through the API: its final status (containers terminated) is kept to be
    /// posted before the pod is deleted for good.
    pub deleted: bool,
}

impl Term {
    pub fn work(&self, uid: &str) -> Work {
        Work::Terminate {
            uid: uid.to_owned(),
            grace: self.grace,
            namespace: self.namespace.clone(),
            name: self.name.clone(),
            evicted: self.evicted,
            deleted: self.deleted,
        }
    }
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
    let at = rt::mono_nanos();
    let st = match inspect(sh, uid).await {
        Ok(st) => st,
        Err(e) => {
            log::warn!("sync of pod {} ({uid}): inspecting: {e}", pod.metadata.name);
            return Some(Duration::from_secs(2));
        }
    };
    // Its errors are logged by the runtime manager, by state change (crate::retry).
    let outcome = sh.rm.sync_pod(pod, &st).await;
    // After acting, observe again so status and cache show the result at once.
    let after = rt::mono_nanos();
    let (fresh, seen_at) = if outcome.acted {
        match inspect(sh, uid).await {
            Ok(s) => (s, after),
            Err(_) => (st, at),
        }
    } else {
        (st, at)
    };
    let waiting = |name: &str| sh.rm.waiting(uid, name).map(|w| (w.reason, w.message));
    sh.status.update(pod, &fresh, waiting);
    sh.cache
        .borrow_mut()
        .put(fresh, seen_at, Some(grace_period(pod)));
    outcome.retry_after
}

/// The pod's runtime status, under the inspection deadline.
async fn inspect(
    sh: &Shared,
    uid: &str,
) -> Result<crate::kubecontainer::PodRuntimeStatus, InspectError> {
    match rt::timeout(INSPECT_DEADLINE, sh.rm.pod_status(uid)).await {
        Ok(r) => r.map_err(InspectError::Runtime),
        Err(e) => Err(InspectError::Deadline(e)),
    }
}

/// Why a worker could not see its pod in the runtime.
#[derive(Debug)]
enum InspectError {
    /// The runtime answered with an error.
    Runtime(crate::cri::CriError),
    /// No answer within [`INSPECT_DEADLINE`].
    Deadline(rt::Elapsed),
}

impl std::fmt::Display for InspectError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            InspectError::Runtime(e) => write!(f, "{e}"),
            InspectError::Deadline(e) => write!(f, "{e}"),
        }
    }
}

impl std::error::Error for InspectError {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        match self {
            InspectError::Runtime(e) => Some(e),
            InspectError::Deadline(e) => Some(e),
        }
    }
}

async fn terminate(
    sh: &Shared,
    uid: &str,
    grace: i64,
    namespace: &str,
    name: &str,
    keep: Keep,
) -> bool {
    let mut st = match inspect(sh, uid).await {
        Ok(st) => st,
        Err(e) => {
            log::warn!("terminating pod {namespace}/{name} ({uid}): inspecting: {e}");
            return false;
        }
    };
    if st.name.is_empty() {
        // Nothing left in the runtime: the spec still names the logs and volumes to remove.
        st.name = name.into();
        st.namespace = namespace.into();
    }
    if !st.sandboxes.is_empty() || !st.containers.is_empty() {
        log::info!("stopping pod {namespace}/{name} ({uid}) with grace period {grace}s");
    }
    if let Err(e) = sh.rm.kill_pod(&st, grace).await {
        log::warn!("terminating pod {namespace}/{name} ({uid}): {e}");
        return false;
    }
    // Stopped but not yet removed: what the runtime says of its containers now (exit codes,
    // finish times) is the status a deleted pod is last posted with. The removal works from
    // this look, so no hook runs twice.
    let st = match inspect(sh, uid).await {
        Ok(mut stopped) => {
            if stopped.name.is_empty() {
                stopped.name = name.into();
                stopped.namespace = namespace.into();
            }
            stopped
        }
        Err(e) => {
            log::warn!("terminating pod {namespace}/{name} ({uid}): inspecting: {e}");
            return false;
        }
    };
    if keep.deleted {
        sh.status.stopped(uid, &st, rt::now_nanos());
    }
    if let Err(e) = sh.rm.remove_pod(&st, grace).await {
        log::warn!("terminating pod {namespace}/{name} ({uid}): {e}");
        return false;
    }
    // A sync cancelled in the middle of a runtime call may have had the runtime create an
    // object after the inspection above: look once more, so "terminated" means nothing is left.
    match inspect(sh, uid).await {
        Ok(left) if left.sandboxes.is_empty() && left.containers.is_empty() => {}
        Ok(_) => {
            log::info!("pod {namespace}/{name} ({uid}) left objects behind; removing them too");
            return false;
        }
        Err(e) => {
            log::warn!("terminating pod {namespace}/{name} ({uid}): inspecting: {e}");
            return false;
        }
    }
    sh.cache.borrow_mut().remove(uid);
    if keep.evicted {
        sh.status.eviction_done(uid, rt::now_nanos());
    } else if keep.deleted {
        // Kept for the final status post; forgotten once the pod is deleted for good.
    } else {
        sh.status.remove(uid);
    }
    true
}

/// Which status a terminated pod keeps.
#[derive(Clone, Copy)]
struct Keep {
    evicted: bool,
    deleted: bool,
}

fn terminate_waiting(slot: &RefCell<Option<Work>>) -> bool {
    matches!(*slot.borrow(), Some(Work::Terminate { .. }))
}

async fn worker_loop(
    sh: Rc<Shared>,
    uid: String,
    slot: Rc<RefCell<Option<Work>>>,
    wake: async_channel::Receiver<()>,
) {
    loop {
        let work = slot.borrow_mut().take();
        let Some(work) = work else {
            if wake.recv().await.is_err() {
                return;
            }
            continue;
        };
        let done = match work {
            Work::Sync(pod) => {
                // A termination sent meanwhile cancels the sync (a slow image pull, say), as
                // upstream cancels a sync's context: the pod is going away anyway.
                let cancelled = async {
                    while wake.recv().await.is_ok() {
                        if terminate_waiting(&slot) {
                            return None;
                        }
                    }
                    std::future::pending().await
                };
                // Boxed, here and below: a sync's state machine is some 16 KiB, and inline it
                // would size every idle worker's task, one per pod, for the pod's whole life.
                let retry_after = futures_lite::future::or(
                    async { Some(Box::pin(sync(&sh, &pod)).await) },
                    cancelled,
                )
                .await;
                if retry_after.is_none() {
                    log::info!(
                        "sync of pod {} cancelled: the pod is being removed",
                        pod.metadata.name
                    );
                }
                Done::Synced {
                    uid: uid.clone(),
                    retry_after: retry_after.flatten(),
                }
            }
            Work::Terminate {
                grace,
                namespace,
                name,
                evicted,
                deleted,
                ..
            } => {
                let keep = Keep { evicted, deleted };
                if Box::pin(terminate(&sh, &uid, grace, &namespace, &name, keep)).await {
                    Done::Terminated { uid: uid.clone() }
                } else {
                    Done::TerminateFailed { uid: uid.clone() }
                }
            }
        };
        if sh.done.send(done).await.is_err() {
            return;
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
        let uid = work.uid().to_owned();
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
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::cri::fake::FakeRuntime;
    use crate::kuberuntime::NodeContext;
    use crate::rt::FakeClock;

    fn pod(uid: &str, image: &str) -> Rc<Pod> {
        let v = serde_json::json!({
            "metadata": {"name": "p", "namespace": "default", "uid": uid},
            "spec": {"containers": [{"name": "c", "image": image}]}
        });
        Rc::new(serde_json::from_value(v).unwrap())
    }

    #[test]
    fn an_idle_worker_holds_a_small_task_whatever_a_sync_needs() {
        // One worker task lives as long as its pod; a sync's state lives only while it runs.
        let fake = Rc::new(FakeRuntime::new());
        let (done, _rx) = async_channel::unbounded();
        let sh = Rc::new(Shared {
            rm: Rc::new(RuntimeManager::new(
                fake.clone(),
                fake,
                NodeContext::default(),
            )),
            cache: Rc::default(),
            status: Rc::new(StatusManager::new("192.0.2.1")),
            done,
        });
        let (_wake, rx) = async_channel::bounded(1);
        let task = worker_loop(sh.clone(), "u".into(), Rc::default(), rx);
        let p = pod("u", "i:1");
        let one_sync = sync(&sh, &p);
        let (task, one_sync) = (size_of_val(&task), size_of_val(&one_sync));
        assert!(task <= 1024, "a worker task is {task} bytes");
        assert!(
            one_sync > task,
            "a sync ({one_sync} bytes) is what boxing keeps out of the task ({task} bytes)"
        );
    }

    #[test]
    fn work_coalesces_and_a_termination_wins_and_cancels_the_sync() {
        let clock = FakeClock::install();
        let dir = std::env::temp_dir().join(format!("picolet-workers-{}", std::process::id()));
        rt::block_on(async {
            let fake = FakeRuntime::new();
            // Every pull takes an hour: the first sync hangs in it.
            fake.set_pullable("slow:1");
            fake.set_delay("PullImage", Duration::from_secs(3600));
            let svc = Rc::new(fake.clone());
            let node = NodeContext {
                root_dir: dir.join("root"),
                pod_logs_dir: dir.join("logs"),
                ..Default::default()
            };
            let (done_tx, done_rx) = async_channel::unbounded();
            let workers = PodWorkers::new(Rc::new(Shared {
                rm: Rc::new(RuntimeManager::new(svc.clone(), svc, node)),
                cache: Rc::default(),
                status: Rc::new(StatusManager::new("192.0.2.1")),
                done: done_tx,
            }));
            assert!(workers.dispatch(Work::Sync(pod("u", "slow:1"))));
            rt::settle().await;
            assert_eq!(fake.calls("PullImage"), 1, "the first sync is pulling");
            // While it pulls, newer work waits in the one slot, replacing older work.
            assert!(workers.dispatch(Work::Sync(pod("u", "slow:1"))));
            assert!(
                !workers.dispatch(Work::Sync(pod("u", "slow:1"))),
                "replaced"
            );
            let term = Work::Terminate {
                uid: "u".into(),
                grace: 1,
                namespace: "default".into(),
                name: "p".into(),
                evicted: false,
                deleted: false,
            };
            assert!(!workers.dispatch(term), "replaces the waiting sync");
            assert!(
                !workers.dispatch(Work::Sync(pod("u", "slow:1"))),
                "a sync never replaces a termination"
            );
            // The termination cancels the pull in progress: two reports, no more pulls.
            let first = done_rx.recv().await.unwrap();
            assert_eq!(
                first,
                Done::Synced {
                    uid: "u".into(),
                    retry_after: None
                }
            );
            let second = done_rx.recv().await.unwrap();
            assert_eq!(second, Done::Terminated { uid: "u".into() });
            rt::settle().await;
            assert!(done_rx.is_empty());
            assert_eq!(fake.calls("PullImage"), 1);
            assert_eq!(clock.elapsed(), Duration::ZERO, "no time had to pass");
        });
        let _ = std::fs::remove_dir_all(&dir);
    }
}
