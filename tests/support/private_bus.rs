//! A private D-Bus bus (Debian's dbus-daemon with a configuration of its own in a temporary
//! directory, never the machine's system bus) and a fake systemd-logind on it
//! (`fake_logind.py`, python3-dbus), for the graceful shutdown tests.
#![allow(dead_code, reason = "each test binary uses a different part")]

use std::io::{BufRead, BufReader, Write};
use std::path::Path;
use std::process::{Child, ChildStdin, Command, Stdio};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

/// A dbus-daemon listening on `<dir>/bus.sock`; stopped (by its PID) when dropped.
pub struct PrivateBus {
    child: Child,
    pub address: String,
}

impl PrivateBus {
    pub fn start(dir: &Path) -> PrivateBus {
        std::fs::create_dir_all(dir).unwrap();
        let conf = dir.join("bus.conf");
        std::fs::write(
            &conf,
            format!(
                r#"<!DOCTYPE busconfig PUBLIC "-//freedesktop//DTD D-Bus Bus Configuration 1.0//EN"
 "http://www.freedesktop.org/standards/dbus/1.0/busconfig.dtd">
<busconfig>
  <type>picolet-test</type>
  <listen>unix:path={}</listen>
  <auth>EXTERNAL</auth>
  <policy context="default">
    <allow user="*"/>
    <allow own="*"/>
    <allow send_destination="*"/>
    <allow receive_sender="*"/>
  </policy>
</busconfig>
"#,
                dir.join("bus.sock").display()
            ),
        )
        .unwrap();
        let mut child = Command::new("dbus-daemon")
            .arg(format!("--config-file={}", conf.display()))
            .args(["--nofork", "--nopidfile", "--print-address"])
            .stdout(Stdio::piped())
            .stderr(Stdio::inherit())
            .spawn()
            .expect("dbus-daemon (Debian's dbus-daemon package) must be installed");
        let mut line = String::new();
        BufReader::new(child.stdout.take().unwrap())
            .read_line(&mut line)
            .unwrap();
        let address = line.trim().to_owned();
        assert!(address.starts_with("unix:"), "dbus-daemon printed {line:?}");
        PrivateBus { child, address }
    }
}

impl Drop for PrivateBus {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// `fake_logind.py` on a bus: what it reported, and its commands.
pub struct FakeLogind {
    child: Child,
    stdin: ChildStdin,
    lines: Arc<Mutex<Vec<String>>>,
}

impl FakeLogind {
    /// Starts the fake with logind's `InhibitDelayMaxUSec` and, optionally, the drop-in whose
    /// `InhibitDelayMaxSec` a `KillUnit` makes the new delay; waits until it owns its names.
    pub fn start(address: &str, delay_usec: u64, drop_in: Option<&Path>) -> FakeLogind {
        let script = concat!(env!("CARGO_MANIFEST_DIR"), "/tests/support/fake_logind.py");
        let mut cmd = Command::new("/usr/bin/python3");
        cmd.arg(script).arg(address).arg(delay_usec.to_string());
        if let Some(p) = drop_in {
            cmd.arg(p);
        }
        let mut child = cmd
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::inherit())
            .spawn()
            .expect("/usr/bin/python3 with python3-dbus and python3-gi");
        let stdin = child.stdin.take().unwrap();
        let out = child.stdout.take().unwrap();
        let lines = Arc::new(Mutex::new(Vec::new()));
        let l = lines.clone();
        std::thread::spawn(move || {
            for line in BufReader::new(out).lines().map_while(Result::ok) {
                l.lock().unwrap().push(line);
            }
        });
        let f = FakeLogind {
            child,
            stdin,
            lines,
        };
        let t0 = Instant::now();
        while f.count("ready") == 0 {
            assert!(
                t0.elapsed() < Duration::from_secs(20),
                "the fake logind did not start"
            );
            std::thread::sleep(Duration::from_millis(50));
        }
        f
    }

    /// Sends a command ("shutdown true", "shutdown false").
    pub fn send(&mut self, cmd: &str) {
        writeln!(self.stdin, "{cmd}").unwrap();
        self.stdin.flush().unwrap();
    }

    pub fn lines(&self) -> Vec<String> {
        self.lines.lock().unwrap().clone()
    }

    /// How many reported lines start with `prefix`.
    pub fn count(&self, prefix: &str) -> usize {
        self.lines()
            .iter()
            .filter(|l| l.starts_with(prefix))
            .count()
    }

    /// Stops the fake (by its PID): logind leaves the bus.
    pub fn stop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

impl Drop for FakeLogind {
    fn drop(&mut self) {
        self.stop();
    }
}
