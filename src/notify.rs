//! systemd's notification protocol (sd_notify(3)) spoken directly, without libsystemd: one
//! datagram per message on the unix socket named by `$NOTIFY_SOCKET` (a path, or an abstract
//! name written `@name`). picolet sends `READY=1` once the runtime has been listed and the loop
//! turns, `STATUS=` when its one-line state changes, `WATCHDOG=1` at half of `$WATCHDOG_USEC`
//! only while the sync loop and the PLEG are healthy (the checks `/healthz` makes), and
//! `STOPPING=1` on shutdown. A stalled loop or PLEG, or a stuck executor (the task feeding the
//! watchdog runs on it), stops the pings, and systemd restarts picolet.

use std::ffi::OsStr;
use std::io;
use std::os::unix::net::{SocketAddr, UnixDatagram};
use std::rc::Rc;
use std::time::{Duration, Instant};

use crate::rt;

/// A connection to the service manager's notification socket.
#[derive(Debug)]
pub struct Notifier {
    sock: UnixDatagram,
    addr: SocketAddr,
    /// How often to ping the watchdog (half its timeout), when systemd watches this process.
    pub watchdog: Option<Duration>,
}

/// Parses `$NOTIFY_SOCKET`: an absolute path, or `@name` for an abstract socket.
pub fn socket_addr(v: &OsStr) -> Result<SocketAddr, String> {
    let b = v.as_encoded_bytes();
    match b.first() {
        Some(b'/') => SocketAddr::from_pathname(v).map_err(|e| format!("NOTIFY_SOCKET {v:?}: {e}")),
        Some(b'@') => {
            use std::os::linux::net::SocketAddrExt;
            SocketAddr::from_abstract_name(&b[1..]).map_err(|e| format!("NOTIFY_SOCKET {v:?}: {e}"))
        }
        _ => Err(format!(
            "NOTIFY_SOCKET {v:?}: neither an absolute path nor an abstract name (@...)"
        )),
    }
}

/// The watchdog ping period from `$WATCHDOG_USEC` and `$WATCHDOG_PID`: half the timeout, and
/// none when the variables are absent, zero, or meant for another process (a pid that is not
/// ours: the variables were inherited).
pub fn watchdog_period(usec: Option<&str>, pid: Option<&str>, own_pid: u32) -> Option<Duration> {
    let usec: u64 = usec?.trim().parse().ok().filter(|u| *u > 0)?;
    if let Some(p) = pid
        && p.trim().parse::<u32>().ok() != Some(own_pid)
    {
        return None;
    }
    Some(Duration::from_micros(usec / 2))
}

impl Notifier {
    /// The notifier the environment asks for: `Ok(None)` when not started by systemd with
    /// `Type=notify` (no `$NOTIFY_SOCKET`).
    pub fn from_env() -> Result<Option<Notifier>, String> {
        let Some(path) = std::env::var_os("NOTIFY_SOCKET") else {
            return Ok(None);
        };
        let usec = std::env::var("WATCHDOG_USEC").ok();
        let pid = std::env::var("WATCHDOG_PID").ok();
        let watchdog = watchdog_period(usec.as_deref(), pid.as_deref(), std::process::id());
        Notifier::new(&path, watchdog).map(Some)
    }

    pub fn new(path: &OsStr, watchdog: Option<Duration>) -> Result<Notifier, String> {
        let addr = socket_addr(path)?;
        let sock = UnixDatagram::unbound().map_err(|e| format!("NOTIFY_SOCKET: socket: {e}"))?;
        // A full socket buffer must never block the executor: a lost ping is retried next tick.
        sock.set_nonblocking(true)
            .map_err(|e| format!("NOTIFY_SOCKET: socket: {e}"))?;
        Ok(Notifier {
            sock,
            addr,
            watchdog,
        })
    }

    /// Sends one message (newline-separated assignments).
    pub fn send(&self, msg: &str) -> io::Result<()> {
        self.sock.send_to_addr(msg.as_bytes(), &self.addr).map(drop)
    }
}

/// What the agent looks like from outside at one instant.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Health {
    /// Healthy, but the runtime has not been listed yet: not ready, watchdog fed.
    Starting(String),
    /// Ready: the runtime was listed, the loop turns and the PLEG relists.
    Healthy(String),
    /// The loop or the PLEG stalled: the watchdog is no longer fed.
    Unhealthy(String),
}

/// The protocol's state: which messages the next tick sends (pure, for tests).
#[derive(Debug, Default)]
pub struct Tracker {
    ready: bool,
    status: String,
    last_ping: Option<Instant>,
}

impl Tracker {
    /// The message to send now, if any: `READY=1` the first time the agent is healthy, `STATUS=`
    /// when the status line changed, `WATCHDOG=1` when healthy and a period has passed.
    pub fn step(&mut self, now: Instant, health: &Health, watchdog: Option<Duration>) -> String {
        let (ok, status) = match health {
            Health::Starting(s) => (true, s),
            Health::Healthy(s) => (true, s),
            Health::Unhealthy(s) => (false, s),
        };
        let mut msg = String::new();
        if matches!(health, Health::Healthy(_)) && !self.ready {
            self.ready = true;
            msg.push_str("READY=1\n");
        }
        if *status != self.status {
            self.status.clone_from(status);
            msg.push_str("STATUS=");
            // One line: a newline would start a new assignment.
            msg.push_str(&status.replace('\n', " "));
            msg.push('\n');
        }
        if let Some(period) = watchdog
            && ok
            && self
                .last_ping
                .is_none_or(|t| now.saturating_duration_since(t) >= period)
        {
            self.last_ping = Some(now);
            msg.push_str("WATCHDOG=1\n");
        }
        msg
    }
}

/// The agent's health as the notification protocol reports it.
pub fn health(k: &crate::sync_loop::Kubelet) -> Health {
    match k.healthz() {
        Err(e) => Health::Unhealthy(format!("unhealthy: {e}")),
        Ok(()) if !k.has_listed() => Health::Starting("waiting for the container runtime".into()),
        Ok(()) => Health::Healthy(format!("running {} pods", k.pod_count())),
    }
}

/// Sends the notifications for as long as the agent runs. Ticks every second (or at the ping
/// period when shorter), on the executor: if the executor is stuck, the pings stop too.
pub async fn run(n: Rc<Notifier>, k: Rc<crate::sync_loop::Kubelet>) {
    let tick = n
        .watchdog
        .map_or(Duration::from_secs(1), |p| p.min(Duration::from_secs(1)));
    let mut t = Tracker::default();
    let mut failing = false;
    loop {
        let h = health(&k);
        if let Health::Unhealthy(e) = &h
            && t.ready
            && !failing
        {
            log::warn!("not feeding the systemd watchdog: {e}");
        }
        let msg = t.step(rt::now(), &h, n.watchdog);
        if !msg.is_empty() {
            match n.send(&msg) {
                Ok(()) => failing = false,
                Err(e) if !failing => {
                    failing = true;
                    log::warn!("notifying systemd: {e}");
                }
                Err(_) => {}
            }
        }
        rt::sleep(tick).await;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn watchdog_period_is_half_the_timeout_and_only_for_this_process() {
        let half = Some(Duration::from_secs(15));
        assert_eq!(watchdog_period(Some("30000000"), None, 7), half);
        assert_eq!(watchdog_period(Some("30000000"), Some("7"), 7), half);
        assert_eq!(watchdog_period(Some("30000000"), Some("8"), 7), None);
        assert_eq!(watchdog_period(Some("30000000"), Some("x"), 7), None);
        assert_eq!(watchdog_period(Some("0"), None, 7), None);
        assert_eq!(watchdog_period(Some("soon"), None, 7), None);
        assert_eq!(watchdog_period(None, Some("7"), 7), None);
    }

    #[test]
    fn socket_addresses() {
        use std::os::linux::net::SocketAddrExt;
        let a = socket_addr(OsStr::new("/run/systemd/notify")).unwrap();
        assert_eq!(
            a.as_pathname(),
            Some(std::path::Path::new("/run/systemd/notify"))
        );
        let a = socket_addr(OsStr::new("@sd-notify/1")).unwrap();
        assert_eq!(a.as_abstract_name(), Some(&b"sd-notify/1"[..]));
        let e = socket_addr(OsStr::new("run/notify")).unwrap_err();
        assert!(
            e.contains("NOTIFY_SOCKET") && e.contains("run/notify"),
            "{e}"
        );
    }

    #[test]
    fn ready_once_status_on_change_watchdog_only_while_healthy() {
        let t0 = Instant::now();
        let p = Some(Duration::from_secs(10));
        let at = |s: u64| t0 + Duration::from_secs(s);
        let mut t = Tracker::default();
        let starting = Health::Starting("waiting".into());
        let healthy = Health::Healthy("running 1 pods".into());
        let sick = Health::Unhealthy("unhealthy: stalled".into());
        assert_eq!(t.step(at(0), &starting, p), "STATUS=waiting\nWATCHDOG=1\n");
        assert_eq!(t.step(at(1), &starting, p), "");
        assert_eq!(
            t.step(at(2), &healthy, p),
            "READY=1\nSTATUS=running 1 pods\n"
        );
        assert_eq!(t.step(at(10), &healthy, p), "WATCHDOG=1\n");
        assert_eq!(t.step(at(15), &healthy, p), "");
        assert_eq!(t.step(at(21), &sick, p), "STATUS=unhealthy: stalled\n");
        assert_eq!(t.step(at(40), &sick, p), "", "no ping while unhealthy");
        // Recovered: ready is not sent again, the pings resume at once.
        assert_eq!(
            t.step(at(41), &healthy, p),
            "STATUS=running 1 pods\nWATCHDOG=1\n"
        );
        // Without a watchdog, only READY and STATUS.
        let mut t = Tracker::default();
        assert_eq!(
            t.step(at(0), &healthy, None),
            "READY=1\nSTATUS=running 1 pods\n"
        );
        assert_eq!(t.step(at(99), &healthy, None), "");
        // A status on two lines stays one assignment.
        let mut t = Tracker::default();
        let h = Health::Unhealthy("a\nb".into());
        assert_eq!(t.step(at(0), &h, None), "STATUS=a b\n");
    }

    /// The datagrams reach a socket listening where `$NOTIFY_SOCKET` points, path or abstract.
    #[test]
    fn sends_to_path_and_abstract_sockets() {
        let dir = std::env::temp_dir().join(format!("picolet-notify-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).unwrap();
        let path = dir.join("notify");
        let l = UnixDatagram::bind(&path).unwrap();
        let n = Notifier::new(path.as_os_str(), None).unwrap();
        n.send("READY=1\n").unwrap();
        let mut buf = [0u8; 64];
        let k = l.recv(&mut buf).unwrap();
        assert_eq!(&buf[..k], b"READY=1\n");

        use std::os::linux::net::SocketAddrExt;
        let name = format!("picolet-notify-test-{}", std::process::id());
        let l = UnixDatagram::bind_addr(&SocketAddr::from_abstract_name(name.as_bytes()).unwrap())
            .unwrap();
        let n = Notifier::new(OsStr::new(&format!("@{name}")), None).unwrap();
        n.send("STOPPING=1\n").unwrap();
        let k = l.recv(&mut buf).unwrap();
        assert_eq!(&buf[..k], b"STOPPING=1\n");
        std::fs::remove_dir_all(&dir).unwrap();
    }
}
