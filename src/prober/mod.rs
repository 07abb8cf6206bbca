//! Liveness, readiness and startup probes, as the kubelet's prober manager runs them
//! (`pkg/kubelet/prober`): one worker per probe of each container, all of them tasks on the one
//! executor (no thread per probe), timed by the one clock.
//!
//! A worker reads its container from the status cache, runs its handler (exec through the
//! runtime, httpGet, tcpSocket, grpc) every `periodSeconds`, counts consecutive results against
//! the thresholds and records the result per container instance in [`Results`]. A change is
//! sent to the sync loop as an [`Update`]: a liveness or startup failure makes the next sync kill
//! and restart the container, a readiness or startup change makes it regenerate the status
//! (`ready`, `started`, the Ready and ContainersReady conditions).

mod grpc;
pub mod results;
mod worker;

use std::cell::RefCell;
use std::collections::HashMap;
use std::rc::Rc;
use std::time::{Duration, Instant};

use crate::api::{Container, Pod, Probe};
use crate::kuberuntime::{ExecError, RuntimeManager};
use crate::pleg::Cache;
use crate::probe::{http, http_target, resolve_port};
use crate::rt;

pub use results::{Kind, ProbeCounts, ProbeResult, Results};

/// What running a handler once gave: success or failure with its output, or an error that
/// says nothing about the container (the result is thrown away, as upstream does).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Outcome {
    Success(String),
    /// A success the kubelet reports with a `ProbeWarning` event (a redirect not followed).
    Warning(String),
    Failure(String),
    Error(String),
}

/// A probe result that changed, for the sync loop.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Update {
    pub uid: String,
    pub container: String,
    pub kind: Kind,
    pub result: ProbeResult,
}

/// A probe's settings with the API defaults filled in.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Timing {
    pub initial_delay: Duration,
    pub period: Duration,
    pub timeout: Duration,
    pub success_threshold: u32,
    pub failure_threshold: u32,
}

fn secs(v: Option<i32>, default: u32) -> u32 {
    v.and_then(|v| u32::try_from(v).ok()).unwrap_or(default)
}

impl Timing {
    /// initialDelaySeconds 0, periodSeconds 10, timeoutSeconds 1, successThreshold 1,
    /// failureThreshold 3 when unset (zero period, timeout and thresholds mean the default
    /// too, as the API server would have filled them in).
    pub fn of(p: &Probe) -> Timing {
        let nz = |v: Option<i32>, d: u32| match secs(v, d) {
            0 => d,
            x => x,
        };
        Timing {
            initial_delay: Duration::from_secs(u64::from(secs(p.initial_delay_seconds, 0))),
            period: Duration::from_secs(u64::from(nz(p.period_seconds, 10))),
            timeout: Duration::from_secs(u64::from(nz(p.timeout_seconds, 1))),
            success_threshold: nz(p.success_threshold, 1),
            failure_threshold: nz(p.failure_threshold, 3),
        }
    }
}

/// Turns an HTTP answer into a probe outcome (`pkg/probe/http`): 2xx succeed, a 3xx (a
/// redirect not followed) succeeds with a warning; the failure message never carries the body.
pub fn http_outcome(r: Result<http::Response, http::GetError>) -> Outcome {
    match r {
        Err(e) => Outcome::Failure(e.to_string()),
        Ok(r) if (200..400).contains(&r.status) => {
            let body = String::from_utf8_lossy(&r.body).into_owned();
            if r.status >= 300 || r.unfollowed_redirect {
                Outcome::Warning(format!("Probe terminated redirects, Response body: {body}"))
            } else {
                Outcome::Success(body)
            }
        }
        Ok(r) => Outcome::Failure(format!("HTTP probe failed with statuscode: {}", r.status)),
    }
}

/// What a worker needs besides its probe: the runtime (exec), the status cache (its
/// container), the results, where updates go, the node's IP (host-network pods), and the
/// workers' running totals.
pub(crate) struct Ctx {
    pub rm: Rc<RuntimeManager>,
    pub cache: Rc<RefCell<Cache>>,
    pub results: Results,
    pub updates: async_channel::Sender<Update>,
    pub node_ip: String,
    pub counts: RefCell<HashMap<Key, ProbeCounts>>,
    /// Wakes a readiness worker before its next tick, by pod UID and container name.
    pub wake_readiness: RefCell<HashMap<(String, String), async_channel::Sender<()>>>,
}

impl Ctx {
    /// Records a result and tells the loop when it changed. A container whose startup probe
    /// has just succeeded has its readiness probed at once, not a readiness period later (as
    /// the kubelet's UpdatePodStatus triggers it).
    pub(crate) fn set(&self, uid: &str, container: &str, id: &str, kind: Kind, r: ProbeResult) {
        if kind == Kind::Startup && r == ProbeResult::Success {
            let key = (uid.to_owned(), container.to_owned());
            if let Some(tx) = self.wake_readiness.borrow().get(&key) {
                let _ = tx.try_send(());
            }
        }
        if self.results.set(id, kind, r) {
            let _ = self.updates.try_send(Update {
                uid: uid.to_owned(),
                container: container.to_owned(),
                kind,
                result: r,
            });
        }
    }

    /// Runs a probe's handler once against a container instance, within its timeout.
    pub(crate) async fn run(
        &self,
        p: &Probe,
        c: &Container,
        container_id: &str,
        pod_ip: &str,
    ) -> Outcome {
        let t = Timing::of(p);
        if let Some(e) = &p.exec {
            return match self.rm.exec_sync(container_id, &e.command, t.timeout).await {
                Ok(o) => {
                    let out =
                        String::from_utf8_lossy(&o.output[..o.output.len().min(http::MAX_BODY)])
                            .into_owned();
                    if o.exit_code == 0 {
                        Outcome::Success(out)
                    } else {
                        Outcome::Failure(out)
                    }
                }
                Err(ExecError::Timeout) => {
                    Outcome::Failure(format!("command {:?} timed out", e.command.join(" ")))
                }
                Err(ExecError::Runtime(m)) => Outcome::Error(m),
            };
        }
        let timeout = t.timeout;
        if let Some(h) = &p.http_get {
            let target = match http_target(h, c, pod_ip) {
                Ok(t) => t,
                Err(e) => return Outcome::Error(e),
            };
            let ua = format!("kube-probe/{}", http::KUBE_VERSION);
            let url = target.url();
            return match rt::timeout(timeout, http::get(&target, &ua)).await {
                Ok(r) => http_outcome(r),
                Err(_) => Outcome::Failure(format!(
                    "Get {url:?}: context deadline exceeded (Client.Timeout exceeded while awaiting headers)"
                )),
            };
        }
        if let Some(s) = &p.tcp_socket {
            let port = match resolve_port(&s.port, c) {
                Ok(p) => p,
                Err(e) => return Outcome::Error(e),
            };
            let host = s
                .host
                .as_deref()
                .filter(|h| !h.is_empty())
                .unwrap_or(pod_ip);
            let addr = http::host_port(host, port);
            return match rt::timeout(timeout, http::dial(host, port)).await {
                Ok(Ok(_)) => Outcome::Success(String::new()),
                Ok(Err(e)) => Outcome::Failure(e.to_string()),
                Err(_) => Outcome::Failure(format!("dial tcp {addr}: i/o timeout")),
            };
        }
        if let Some(g) = &p.grpc {
            let Ok(port) = u16::try_from(g.port) else {
                return Outcome::Error(format!("invalid port number: {}", g.port));
            };
            let service = g.service.as_deref().unwrap_or("");
            let secs = timeout.as_secs();
            return match rt::timeout(timeout, grpc::check(pod_ip, port, service, secs)).await {
                Ok(o) => o,
                Err(_) => Outcome::Failure(format!(
                    "timeout: health rpc did not complete within {secs}s"
                )),
            };
        }
        Outcome::Error(format!("missing probe handler for container {}", c.name))
    }
}

pub(crate) type Key = (String, String, Kind);

/// Starts and stops the probe workers of the pods picolet runs.
pub struct ProbeManager {
    ctx: Rc<Ctx>,
    workers: RefCell<HashMap<Key, rt::Task<()>>>,
    started: Instant,
    updates: async_channel::Receiver<Update>,
}

impl std::fmt::Debug for ProbeManager {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ProbeManager")
            .field("workers", &self.workers.borrow().len())
            .finish()
    }
}

impl ProbeManager {
    /// A manager writing to the runtime manager's results.
    pub fn new(rm: Rc<RuntimeManager>, cache: Rc<RefCell<Cache>>, node_ip: &str) -> ProbeManager {
        let (tx, rx) = async_channel::unbounded();
        let ctx = Rc::new(Ctx {
            results: rm.probe_results(),
            rm,
            cache,
            updates: tx,
            node_ip: node_ip.to_owned(),
            counts: RefCell::default(),
            wake_readiness: RefCell::default(),
        });
        ProbeManager {
            ctx,
            workers: RefCell::default(),
            started: rt::now(),
            updates: rx,
        }
    }

    /// Every running worker's totals, for `/metrics/probes`.
    pub fn counts(&self) -> Vec<ProbeCounts> {
        let mut v: Vec<ProbeCounts> = self.ctx.counts.borrow().values().cloned().collect();
        v.sort_by(|a, b| {
            (&a.namespace, &a.pod, &a.container, a.kind.name()).cmp(&(
                &b.namespace,
                &b.pod,
                &b.container,
                b.kind.name(),
            ))
        });
        v
    }

    /// Where changed results arrive, for the sync loop.
    pub fn updates(&self) -> async_channel::Receiver<Update> {
        self.updates.clone()
    }

    /// Starts a worker for every probe of the pod's containers (and sidecars) that has none.
    pub fn add_pod(&self, pod: &Rc<Pod>) {
        let sidecars = pod.spec.init_containers.iter().filter(|c| c.is_sidecar());
        for c in sidecars.chain(&pod.spec.containers) {
            for kind in [Kind::Startup, Kind::Readiness, Kind::Liveness] {
                let Some(p) = kind.spec(c) else { continue };
                let key = (pod.metadata.uid.clone(), c.name.clone(), kind);
                if self.workers.borrow().contains_key(&key) {
                    continue;
                }
                let timing = Timing::of(p);
                // Right after picolet starts, spread the first probes over a period so that
                // adopted pods are not all probed at once (as the kubelet does).
                let jitter = if rt::now().saturating_duration_since(self.started) < timing.period {
                    let h = crate::hash::fnv1a64(&[
                        key.0.as_bytes(),
                        key.1.as_bytes(),
                        kind.name().as_bytes(),
                    ]);
                    let ms = u64::try_from(timing.period.as_millis())
                        .unwrap_or(u64::MAX)
                        .max(1);
                    Duration::from_millis(h % ms)
                } else {
                    Duration::ZERO
                };
                let task = rt::spawn(worker::run(
                    self.ctx.clone(),
                    pod.clone(),
                    c.name.clone(),
                    kind,
                    jitter,
                ));
                self.workers.borrow_mut().insert(key, task);
            }
        }
    }

    /// Stops the pod's workers (dropping a task cancels it) and forgets their results.
    pub fn remove_pod(&self, uid: &str) {
        let gone: Vec<Key> = self
            .workers
            .borrow()
            .keys()
            .filter(|k| k.0 == uid)
            .cloned()
            .collect();
        let cache = self.ctx.cache.borrow();
        for k in gone {
            self.workers.borrow_mut().remove(&k);
            if let Some(st) = cache.get(uid) {
                for c in st.status.containers.iter().filter(|c| *c.name == *k.1) {
                    self.ctx.results.remove(&c.id, k.2);
                }
            }
        }
    }

    /// How many workers run.
    #[cfg(test)]
    pub fn workers(&self) -> usize {
        self.workers.borrow().len()
    }
}

#[cfg(test)]
mod tests;
