//! The shutdown manager's task on the executor (upstream's `managerImpl`): it connects to the
//! system bus, makes sure logind's `InhibitDelayMaxSec` covers the grace period, takes the delay
//! lock and waits for `PrepareForShutdown`. On `true` it runs the sequence
//! ([`super::process_shutdown`]) and releases the lock; on `false` (a cancelled shutdown) the
//! node admits pods and is Ready again, and the lock is taken again. When the bus or logind
//! goes away, or was never there, the task says so once and tries again with a growing delay
//! (counted, not logged again) while picolet runs on without the feature.

use std::path::PathBuf;
use std::rc::Rc;
use std::time::Duration;

use super::dbus::{Address, Fd};
use super::systemd::{self, Bus, Event};
use super::{Config, Node, PodInfo};
use crate::rt;
use crate::sync_loop::Kubelet;

/// The reason logind shows for picolet's lock (`systemd-inhibit --list`).
pub const WHY: &str = "picolet needs time to stop the pods before the node shuts down";

/// The first retry after a failure, and the most any retry waits.
pub const RETRY: Duration = Duration::from_secs(1);
pub const RETRY_MAX: Duration = Duration::from_secs(300);
/// How long logind is given to apply a reloaded configuration.
const RELOAD_WAIT: Duration = Duration::from_secs(2);

/// What the manager works with.
#[derive(Debug, Clone)]
pub struct Settings {
    pub config: Config,
    pub root_dir: PathBuf,
    pub bus: Address,
    /// Where the `InhibitDelayMaxSec` drop-in goes.
    pub logind_conf_dir: PathBuf,
}

/// The delay before retry number `n` (1-based): 1 s doubling to [`RETRY_MAX`].
pub fn retry_delay(n: u32) -> Duration {
    RETRY
        .saturating_mul(1u32 << n.saturating_sub(1).min(16))
        .min(RETRY_MAX)
}

/// The loop's side of the seam.
struct KubeletNode(Rc<Kubelet>);

impl Node for KubeletNode {
    fn set_shutting_down(&self, on: bool) {
        self.0.set_shutting_down(on);
    }
    fn active_pods(&self) -> Vec<PodInfo> {
        self.0.shutdown_pods()
    }
    fn kill(&self, uid: &str, grace: i64) -> bool {
        self.0.shutdown_kill(uid, grace)
    }
    fn stopped(&self, uid: &str) -> bool {
        self.0.pod_stopped(uid)
    }
    fn statuses_posted(&self) -> bool {
        // No apiserver to post to (an offline node): nothing to wait for.
        #[cfg(feature = "apiserver")]
        {
            self.0.status_unreachable()
                || self
                    .0
                    .api_pod_statuses()
                    .iter()
                    .all(|p| crate::cluster::same_but_times(&p.current, &p.in_api))
        }
        #[cfg(not(feature = "apiserver"))]
        true
    }
}

/// Starts the manager for a running agent: the one call `agent::run` makes (through
/// `agent::shutdown`). Nothing when the grace period is zero (the feature is off, as upstream).
pub(crate) fn start(
    o: &crate::cli::options::Options,
    kubelet: &Rc<Kubelet>,
) -> Option<rt::Task<()>> {
    match super::load_state(&o.root_dir) {
        Ok(Some(s)) => log::info!("{}", super::describe_state(&s)),
        Ok(None) => {}
        Err(e) => log::warn!("ignoring the graceful shutdown state file: {e}"),
    }
    if !o.shutdown.enabled() {
        log::info!("graceful node shutdown: off (shutdownGracePeriod is 0)");
        return None;
    }
    let bus = match systemd::system_bus_address() {
        Ok(b) => b,
        Err(e) => {
            log::warn!(
                "graceful node shutdown off: $DBUS_SYSTEM_BUS_ADDRESS {e}; pods are not stopped \
                 before the machine shuts down"
            );
            return None;
        }
    };
    let settings = Settings {
        config: o.shutdown.clone(),
        root_dir: o.root_dir.clone(),
        bus,
        logind_conf_dir: systemd::LOGIND_CONF_DIR.into(),
    };
    let node: Rc<dyn Node> = Rc::new(KubeletNode(kubelet.clone()));
    let name = kubelet.node_name();
    Some(rt::spawn(run(settings, node, name)))
}

/// Runs until dropped: a session at a time, retried with backoff when it fails.
pub async fn run(s: Settings, node: Rc<dyn Node>, node_name: String) {
    let mut failures = 0u32;
    loop {
        let e = session(&s, &*node, &node_name, &mut failures).await;
        failures = failures.saturating_add(1);
        let wait = retry_delay(failures);
        if failures == 1 {
            log::warn!(
                "graceful node shutdown unavailable: {e}; picolet runs on without it (pods are \
                 not stopped before the machine shuts down) and tries again, quietly, every up \
                 to {}s",
                RETRY_MAX.as_secs()
            );
        } else {
            log::debug!(
                "graceful node shutdown: attempt {failures} failed: {e}; next in {}s",
                wait.as_secs()
            );
        }
        rt::sleep(wait).await;
    }
}

/// Makes sure logind waits long enough for the lock: raises `InhibitDelayMaxSec` with a
/// drop-in and a reload when it is shorter than the grace period. When it cannot (a read-only
/// `/etc`, no systemd to reload logind), the lock is still taken: the pods get what logind
/// allows, with a warning, where upstream goes without the lock. An error only when logind
/// does not answer.
async fn ensure_delay(s: &Settings, bus: &mut Bus) -> Result<Duration, systemd::Error> {
    let requested = s.config.period_requested();
    let current = systemd::inhibit_delay_max(bus).await?;
    if requested <= current {
        return Ok(current);
    }
    let short = |have: Duration, why: &str| {
        log::warn!(
            "graceful node shutdown: logind waits at most {}s for the lock (InhibitDelayMaxSec), \
             less than the {}s the grace periods need, and {why}: pods stopping at shutdown get \
             {}s in all",
            have.as_secs(),
            requested.as_secs(),
            have.as_secs()
        );
    };
    let path = match systemd::write_inhibit_delay(&s.logind_conf_dir, requested) {
        Ok(p) => p,
        Err(e) => {
            short(
                current,
                &format!("picolet could not write its drop-in: {e}"),
            );
            return Ok(current);
        }
    };
    if let Err(e) = systemd::reload_logind(bus).await {
        short(
            current,
            &format!(
                "logind could not be reloaded after writing {}: {e}",
                path.display()
            ),
        );
        return Ok(current);
    }
    let deadline = rt::now() + RELOAD_WAIT;
    loop {
        let updated = systemd::inhibit_delay_max(bus).await?;
        if updated >= requested {
            log::info!(
                "graceful node shutdown: logind's InhibitDelayMaxSec raised from {}s to {}s \
                 ({})",
                current.as_secs(),
                updated.as_secs(),
                path.display()
            );
            return Ok(updated);
        }
        if rt::now() >= deadline {
            short(
                updated,
                &format!(
                    "writing {} and reloading logind did not raise it",
                    path.display()
                ),
            );
            return Ok(updated);
        }
        rt::sleep(Duration::from_millis(200)).await;
    }
}

/// One connection's life: returns why it ended.
async fn session(s: &Settings, node: &dyn Node, node_name: &str, failures: &mut u32) -> String {
    let mut bus = match Bus::connect(&s.bus).await {
        Ok(b) => b,
        Err(e) => return format!("no system bus: {e}"),
    };
    if let Err(e) = systemd::watch(&mut bus).await {
        return format!("watching logind: {e}");
    }
    let delay = match ensure_delay(s, &mut bus).await {
        Ok(d) => d,
        Err(e) => return format!("logind: {e}"),
    };
    let mut lock: Option<Fd> = match systemd::inhibit(&mut bus, WHY).await {
        Ok(fd) => Some(fd),
        Err(e) => return format!("taking logind's delay lock: {e}"),
    };
    log::info!(
        "graceful node shutdown: holding logind's delay lock{} (InhibitDelayMaxSec {}s); {}",
        if *failures > 0 {
            format!(" after {} failed attempts", *failures)
        } else {
            String::new()
        },
        delay.as_secs(),
        s.config.describe()
    );
    *failures = 0;
    let me = crate::events::ObjectRef::node(node_name);
    loop {
        let m = match bus.next_signal().await {
            Ok(m) => m,
            Err(e) => return format!("the system bus connection ended: {e}"),
        };
        let ev = match systemd::event(&m) {
            Ok(Some(ev)) => ev,
            Ok(None) => continue,
            Err(e) => {
                log::warn!("graceful node shutdown: ignoring a signal: {e}");
                continue;
            }
        };
        match ev {
            Event::PrepareForShutdown(true) => {
                log::info!("graceful node shutdown: the node shuts down; stopping pods");
                crate::events::record(
                    &me,
                    crate::events::Type::Normal,
                    "NodeShutdown",
                    "Shutdown manager detected shutdown event",
                );
                let out = super::process_shutdown(&s.config, &s.root_dir, node).await;
                let stopped = out.groups.iter().all(|g| g.2);
                drop(lock.take());
                log::info!(
                    "graceful node shutdown: {} of pods {}; released the lock",
                    if stopped {
                        "every group"
                    } else {
                        "not every group"
                    },
                    "stopped in time"
                );
            }
            Event::PrepareForShutdown(false) => {
                log::info!(
                    "graceful node shutdown: the shutdown was cancelled; admitting pods again"
                );
                crate::events::record(
                    &me,
                    crate::events::Type::Normal,
                    "NodeShutdown",
                    "Shutdown manager detected shutdown cancellation",
                );
                node.set_shutting_down(false);
                if lock.is_none() {
                    match systemd::inhibit(&mut bus, WHY).await {
                        Ok(fd) => lock = Some(fd),
                        Err(e) => return format!("taking logind's delay lock again: {e}"),
                    }
                }
            }
            Event::LogindRestarted => {
                log::info!("graceful node shutdown: logind restarted; taking the lock again");
                drop(lock.take());
                if let Err(e) = ensure_delay(s, &mut bus).await {
                    return format!("logind: {e}");
                }
                match systemd::inhibit(&mut bus, WHY).await {
                    Ok(fd) => lock = Some(fd),
                    Err(e) => return format!("taking logind's delay lock again: {e}"),
                }
            }
            Event::LogindGone => {
                log::info!(
                    "graceful node shutdown: logind left the bus; the lock is taken again when \
                     it is back"
                );
                drop(lock.take());
            }
        }
    }
}

/// What `picolet check` says of graceful shutdown: the effective grace periods and whether the
/// lock can be taken (taken and released at once). `Ok` is a detail line; `Err` a detail line
/// and its fix.
pub fn check(o: &crate::cli::options::Options) -> Result<String, (String, String)> {
    if !o.shutdown.enabled() {
        return Ok("off (shutdownGracePeriod is 0): pods are left to systemd at shutdown".into());
    }
    let desc = o.shutdown.describe();
    let probe = async {
        let addr = systemd::system_bus_address().map_err(|e| e.to_string())?;
        let mut bus = Bus::connect(&addr)
            .await
            .map_err(|e| format!("no system bus: {e}"))?;
        let delay = systemd::inhibit_delay_max(&mut bus)
            .await
            .map_err(|e| format!("logind: {e}"))?;
        let lock = systemd::inhibit(&mut bus, WHY)
            .await
            .map_err(|e| format!("taking logind's delay lock: {e}"))?;
        drop(lock);
        Ok::<Duration, String>(delay)
    };
    match rt::block_on(probe) {
        Ok(delay) => {
            let requested = o.shutdown.period_requested();
            let note = if delay >= requested {
                String::new()
            } else {
                format!(
                    " (picolet raises it to {}s at start, with {}/{})",
                    requested.as_secs(),
                    systemd::LOGIND_CONF_DIR,
                    systemd::LOGIND_CONF_FILE
                )
            };
            Ok(format!(
                "{desc}; logind's delay lock can be taken, InhibitDelayMaxSec {}s{note}",
                delay.as_secs()
            ))
        }
        Err(e) => Err((
            format!("{desc}, but {e}: pods are not stopped before a shutdown"),
            "run systemd-logind and the system D-Bus, or set shutdownGracePeriod: 0".into(),
        )),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn retries_back_off_to_five_minutes() {
        let secs: Vec<u64> = (1..=11).map(|n| retry_delay(n).as_secs()).collect();
        assert_eq!(secs, [1, 2, 4, 8, 16, 32, 64, 128, 256, 300, 300]);
        assert_eq!(retry_delay(u32::MAX), RETRY_MAX);
    }
}
