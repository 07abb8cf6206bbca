//! The system bus and systemd-logind, as upstream's `nodeshutdown/systemd`: a connection of
//! picolet's own on the bus's unix socket (SASL EXTERNAL, descriptors passed with
//! SCM_RIGHTS), logind's `InhibitDelayMaxUSec`, the delay inhibitor lock, the
//! `PrepareForShutdown` signal, and the `logind.conf.d` drop-in with logind told to reload it.
//! Every call is bounded by [`CALL_TIMEOUT`].

use std::collections::VecDeque;
use std::io;
use std::os::fd::AsRawFd;
use std::os::unix::net::UnixStream;
use std::path::{Path, PathBuf};
use std::time::Duration;

use async_io::Async;
use futures_lite::AsyncWriteExt;

use super::dbus::{self, Address, Fd, Malformed, Message, Value};
use crate::rt;

pub const LOGIND: &str = "org.freedesktop.login1";
pub const LOGIND_PATH: &str = "/org/freedesktop/login1";
pub const LOGIND_MANAGER: &str = "org.freedesktop.login1.Manager";
const BUS: &str = "org.freedesktop.DBus";
const BUS_PATH: &str = "/org/freedesktop/DBus";
const PROPERTIES: &str = "org.freedesktop.DBus.Properties";

/// The longest picolet waits for an answer on the bus.
pub const CALL_TIMEOUT: Duration = Duration::from_secs(10);
/// The longest SASL line accepted.
const MAX_LINE: usize = 512;
/// Descriptors one read accepts.
const MAX_FDS: usize = 16;

#[derive(Debug, thiserror::Error)]
pub enum Error {
    #[error("{0}")]
    Io(String),
    #[error("authenticating to the bus: {0}")]
    Auth(String),
    #[error(transparent)]
    Wire(#[from] Malformed),
    #[error("{name}: {message}")]
    Remote { name: String, message: String },
    #[error("the bus closed the connection")]
    Closed,
    #[error("no answer from the bus within {0:?}")]
    Timeout(Duration),
    #[error("{0}")]
    Unexpected(String),
}

impl Error {
    /// The name has no owner on the bus (logind is not running, or not installed).
    pub fn is_service_unknown(&self) -> bool {
        matches!(self, Error::Remote { name, .. }
            if name == "org.freedesktop.DBus.Error.ServiceUnknown"
                || name == "org.freedesktop.DBus.Error.NameHasNoOwner")
    }
}

fn io_err(what: &str) -> impl Fn(io::Error) -> Error + '_ {
    move |e| Error::Io(format!("{what}: {e}"))
}

/// The system bus's address: `$DBUS_SYSTEM_BUS_ADDRESS`, else the well-known socket.
pub fn system_bus_address() -> Result<Address, dbus::AddressError> {
    match std::env::var("DBUS_SYSTEM_BUS_ADDRESS") {
        Ok(a) if !a.is_empty() => dbus::parse_address(&a),
        _ => Ok(Address::Path(dbus::SYSTEM_BUS.into())),
    }
}

/// One connection to a bus.
pub struct Bus {
    sock: Async<UnixStream>,
    rbuf: Vec<u8>,
    fds: VecDeque<Fd>,
    serial: u32,
    /// Signals that arrived while a call waited for its reply.
    signals: VecDeque<Message>,
    /// The name the bus gave this connection.
    pub unique_name: String,
}

impl std::fmt::Debug for Bus {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Bus")
            .field("unique_name", &self.unique_name)
            .finish()
    }
}

impl Bus {
    /// Connects, authenticates by the socket's credentials, agrees on descriptor passing and
    /// says Hello.
    pub async fn connect(addr: &Address) -> Result<Bus, Error> {
        rt::timeout(CALL_TIMEOUT, Self::connect_inner(addr))
            .await
            .map_err(|_| Error::Timeout(CALL_TIMEOUT))?
    }

    async fn connect_inner(addr: &Address) -> Result<Bus, Error> {
        let what = format!("connecting to the bus at {addr}");
        let stream = match addr {
            Address::Path(p) => UnixStream::connect(p).map_err(io_err(&what))?,
            Address::Abstract(name) => {
                use std::os::linux::net::SocketAddrExt;
                let a = std::os::unix::net::SocketAddr::from_abstract_name(name)
                    .map_err(io_err(&what))?;
                UnixStream::connect_addr(&a).map_err(io_err(&what))?
            }
        };
        let sock = Async::new(stream).map_err(io_err(&what))?;
        let mut bus = Bus {
            sock,
            rbuf: Vec::new(),
            fds: VecDeque::new(),
            serial: 0,
            signals: VecDeque::new(),
            unique_name: String::new(),
        };
        bus.authenticate().await?;
        let reply = bus
            .call_inner(Message::method_call(
                BUS,
                BUS_PATH,
                BUS,
                "Hello",
                Vec::new(),
            ))
            .await?;
        match reply.body.first() {
            Some(Value::Str(name)) => bus.unique_name = name.clone(),
            _ => {
                return Err(Error::Unexpected(
                    "Hello: no unique name in the reply".into(),
                ));
            }
        }
        Ok(bus)
    }

    async fn authenticate(&mut self) -> Result<(), Error> {
        let uid = nix::unistd::geteuid().as_raw();
        self.write(&dbus::auth_external(uid)).await?;
        let line = self.line().await?;
        if !line.starts_with("OK ") {
            return Err(Error::Auth(format!("AUTH EXTERNAL answered {line:?}")));
        }
        self.write(b"NEGOTIATE_UNIX_FD\r\n").await?;
        let line = self.line().await?;
        if line != "AGREE_UNIX_FD" {
            return Err(Error::Auth(format!("NEGOTIATE_UNIX_FD answered {line:?}")));
        }
        self.write(b"BEGIN\r\n").await
    }

    /// One line of the handshake, without its CRLF.
    async fn line(&mut self) -> Result<String, Error> {
        loop {
            if let Some(i) = self.rbuf.windows(2).position(|w| w == b"\r\n") {
                let line: Vec<u8> = self.rbuf.drain(..i + 2).take(i).collect();
                return String::from_utf8(line)
                    .map_err(|_| Error::Auth("a line that is not UTF-8".into()));
            }
            if self.rbuf.len() > MAX_LINE {
                return Err(Error::Auth(format!("a line longer than {MAX_LINE} bytes")));
            }
            self.fill().await?;
        }
    }

    async fn write(&mut self, bytes: &[u8]) -> Result<(), Error> {
        let mut s = &self.sock;
        s.write_all(bytes)
            .await
            .map_err(io_err("writing to the bus"))
    }

    /// Reads what the socket has, with any descriptors that came with it.
    async fn fill(&mut self) -> Result<(), Error> {
        use nix::sys::socket::{ControlMessageOwned, MsgFlags, recvmsg};
        let mut chunk = [0u8; 4096];
        let mut cmsg = nix::cmsg_space!([std::os::fd::RawFd; MAX_FDS]);
        let (n, fds) = self
            .sock
            .read_with(|s| {
                let mut iov = [io::IoSliceMut::new(&mut chunk)];
                let msg = recvmsg::<()>(
                    s.as_raw_fd(),
                    &mut iov,
                    Some(&mut cmsg),
                    MsgFlags::MSG_CMSG_CLOEXEC,
                )
                .map_err(io::Error::from)?;
                let mut fds = Vec::new();
                for c in msg.cmsgs().map_err(io::Error::from)? {
                    if let ControlMessageOwned::ScmRights(v) = c {
                        fds.extend(v.into_iter().map(Fd::from_received));
                    }
                }
                Ok((msg.bytes, fds))
            })
            .await
            .map_err(io_err("reading from the bus"))?;
        self.fds.extend(fds);
        if n == 0 {
            return Err(Error::Closed);
        }
        self.rbuf.extend_from_slice(&chunk[..n]);
        Ok(())
    }

    /// The next whole message, with its descriptors.
    async fn read_message(&mut self) -> Result<Message, Error> {
        loop {
            if let Some((mut m, used)) = Message::decode(&self.rbuf)? {
                self.rbuf.drain(..used);
                let n = m.unix_fds as usize;
                if self.fds.len() < n {
                    return Err(Error::Wire(Malformed {
                        field: "UNIX_FDS",
                        why: format!("{n} announced, {} received", self.fds.len()),
                    }));
                }
                m.fds = self.fds.drain(..n).collect();
                return Ok(m);
            }
            self.fill().await?;
        }
    }

    async fn send(&mut self, m: &Message) -> Result<u32, Error> {
        self.serial = self.serial.wrapping_add(1).max(1);
        let serial = self.serial;
        let bytes = m.encode(serial)?;
        self.write(&bytes).await?;
        Ok(serial)
    }

    async fn call_inner(&mut self, m: Message) -> Result<Message, Error> {
        let serial = self.send(&m).await?;
        loop {
            let r = self.read_message().await?;
            match r.kind {
                dbus::METHOD_RETURN if r.reply_serial == Some(serial) => return Ok(r),
                dbus::ERROR if r.reply_serial == Some(serial) => {
                    let message = match r.body.first() {
                        Some(Value::Str(s)) => s.clone(),
                        _ => String::new(),
                    };
                    return Err(Error::Remote {
                        name: r.error_name.unwrap_or_default(),
                        message,
                    });
                }
                dbus::SIGNAL => self.signals.push_back(r),
                // Calls to picolet, or replies to nothing it waits for: dropped.
                _ => {}
            }
        }
    }

    /// Calls a method and waits for its reply (other messages meanwhile: signals are kept).
    pub async fn call(&mut self, m: Message) -> Result<Message, Error> {
        let what = format!(
            "{}.{}",
            m.interface.clone().unwrap_or_default(),
            m.member.clone().unwrap_or_default()
        );
        rt::timeout(CALL_TIMEOUT, self.call_inner(m))
            .await
            .map_err(|_| Error::Timeout(CALL_TIMEOUT))?
            .map_err(|e| match e {
                Error::Remote { name, message } => Error::Remote {
                    name,
                    message: format!("{what}: {message}"),
                },
                e => e,
            })
    }

    /// The next signal (of those the match rules let through).
    pub async fn next_signal(&mut self) -> Result<Message, Error> {
        if let Some(s) = self.signals.pop_front() {
            return Ok(s);
        }
        loop {
            let m = self.read_message().await?;
            if m.kind == dbus::SIGNAL {
                return Ok(m);
            }
        }
    }

    /// Asks the bus to send this connection the signals `rule` matches.
    pub async fn add_match(&mut self, rule: &str) -> Result<(), Error> {
        self.call(Message::method_call(
            BUS,
            BUS_PATH,
            BUS,
            "AddMatch",
            vec![Value::Str(rule.into())],
        ))
        .await
        .map(drop)
    }
}

/// logind's `InhibitDelayMaxUSec`: how long a delay lock may hold a shutdown back.
pub async fn inhibit_delay_max(bus: &mut Bus) -> Result<Duration, Error> {
    let r = bus
        .call(Message::method_call(
            LOGIND,
            LOGIND_PATH,
            PROPERTIES,
            "Get",
            vec![
                Value::Str(LOGIND_MANAGER.into()),
                Value::Str("InhibitDelayMaxUSec".into()),
            ],
        ))
        .await?;
    match r.body.first() {
        Some(Value::Variant(v)) => match **v {
            Value::U64(us) => Ok(Duration::from_micros(us)),
            ref o => Err(Error::Unexpected(format!(
                "InhibitDelayMaxUSec from logind is a {o:?}, not a uint64"
            ))),
        },
        _ => Err(Error::Unexpected(format!(
            "InhibitDelayMaxUSec: a reply of signature {:?}",
            r.signature()
        ))),
    }
}

/// Takes a delay lock for shutdown: held while the descriptor is open.
pub async fn inhibit(bus: &mut Bus, why: &str) -> Result<Fd, Error> {
    let mut r = bus
        .call(Message::method_call(
            LOGIND,
            LOGIND_PATH,
            LOGIND_MANAGER,
            "Inhibit",
            vec![
                Value::Str("shutdown".into()),
                Value::Str("picolet".into()),
                Value::Str(why.into()),
                Value::Str("delay".into()),
            ],
        ))
        .await?;
    match r.body.first() {
        Some(Value::Fd(i)) => {
            let i = *i as usize;
            if i < r.fds.len() {
                Ok(r.fds.swap_remove(i))
            } else {
                Err(Error::Unexpected(
                    "Inhibit: the reply names a descriptor it did not carry".into(),
                ))
            }
        }
        _ => Err(Error::Unexpected(format!(
            "Inhibit: a reply of signature {:?}, not \"h\"",
            r.signature()
        ))),
    }
}

/// The match rules: logind's `PrepareForShutdown`, and logind's name changing owner (logind
/// restarted, or stopped).
pub async fn watch(bus: &mut Bus) -> Result<(), Error> {
    bus.add_match(&format!(
        "type='signal',sender='{LOGIND}',interface='{LOGIND_MANAGER}',\
         member='PrepareForShutdown',path='{LOGIND_PATH}'"
    ))
    .await?;
    bus.add_match(&format!(
        "type='signal',sender='{BUS}',interface='{BUS}',member='NameOwnerChanged',\
         arg0='{LOGIND}'"
    ))
    .await
}

/// What a signal means to the shutdown manager.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Event {
    /// `PrepareForShutdown(true)`: the shutdown starts; `false`: it was cancelled.
    PrepareForShutdown(bool),
    /// logind has a new owner (it restarted): a lock taken before is gone.
    LogindRestarted,
    /// logind left the bus.
    LogindGone,
}

/// Reads a signal; `None` for others, an error for a malformed one of ours.
pub fn event(m: &Message) -> Result<Option<Event>, Error> {
    if m.is_signal(LOGIND_MANAGER, "PrepareForShutdown") {
        return match m.body.as_slice() {
            [Value::Bool(b)] => Ok(Some(Event::PrepareForShutdown(*b))),
            _ => Err(Error::Unexpected(format!(
                "PrepareForShutdown of signature {:?}, not \"b\"",
                m.signature()
            ))),
        };
    }
    if m.is_signal(BUS, "NameOwnerChanged")
        && let [Value::Str(name), Value::Str(_old), Value::Str(new)] = m.body.as_slice()
        && name == LOGIND
    {
        return Ok(Some(if new.is_empty() {
            Event::LogindGone
        } else {
            Event::LogindRestarted
        }));
    }
    Ok(None)
}

/// Where upstream writes its logind drop-in, and picolet's file in it.
pub const LOGIND_CONF_DIR: &str = "/etc/systemd/logind.conf.d";
pub const LOGIND_CONF_FILE: &str = "99-picolet.conf";

/// Writes the drop-in raising `InhibitDelayMaxSec` to `delay` (whole seconds, rounded up),
/// atomically; returns its path.
pub fn write_inhibit_delay(dir: &Path, delay: Duration) -> Result<PathBuf, super::FileError> {
    let path = dir.join(LOGIND_CONF_FILE);
    let secs = delay.as_secs() + u64::from(delay.subsec_nanos() > 0);
    let text = format!(
        "# Written by picolet: logind waits this long for its delay lock at shutdown\n\
         # (shutdownGracePeriod, or the sum of shutdownGracePeriodByPodPriority).\n\
         [Login]\nInhibitDelayMaxSec={secs}\n"
    );
    crate::atomic_file::create_dir_all(dir).map_err(super::FileError::io(dir))?;
    crate::atomic_file::write(&path, text.as_bytes()).map_err(super::FileError::io(&path))?;
    Ok(path)
}

/// Has systemd send logind SIGHUP, on which it reads its configuration again (what upstream
/// does: `KillUnit("systemd-logind.service", "all", SIGHUP)`).
pub async fn reload_logind(bus: &mut Bus) -> Result<(), Error> {
    bus.call(Message::method_call(
        "org.freedesktop.systemd1",
        "/org/freedesktop/systemd1",
        "org.freedesktop.systemd1.Manager",
        "KillUnit",
        vec![
            Value::Str("systemd-logind.service".into()),
            Value::Str("all".into()),
            Value::I32(1),
        ],
    ))
    .await
    .map(drop)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn signals_become_events() {
        let s = |iface: &str, member: &str, body| Message::signal("/x", iface, member, body);
        assert_eq!(
            event(&s(
                LOGIND_MANAGER,
                "PrepareForShutdown",
                vec![Value::Bool(true)]
            ))
            .unwrap(),
            Some(Event::PrepareForShutdown(true))
        );
        assert_eq!(
            event(&s(
                LOGIND_MANAGER,
                "PrepareForShutdown",
                vec![Value::Bool(false)]
            ))
            .unwrap(),
            Some(Event::PrepareForShutdown(false))
        );
        let e = event(&s(
            LOGIND_MANAGER,
            "PrepareForShutdown",
            vec![Value::U32(1)],
        ))
        .unwrap_err();
        assert!(e.to_string().contains("signature \"u\""), "{e}");
        let owner = |new: &str| {
            s(
                BUS,
                "NameOwnerChanged",
                vec![
                    Value::Str(LOGIND.into()),
                    Value::Str(":1.4".into()),
                    Value::Str(new.into()),
                ],
            )
        };
        assert_eq!(event(&owner(":1.9")).unwrap(), Some(Event::LogindRestarted));
        assert_eq!(event(&owner("")).unwrap(), Some(Event::LogindGone));
        assert_eq!(event(&s("a.b", "C", Vec::new())).unwrap(), None);
    }

    /// A bus that does the handshake, reads Hello, and answers with `reply` (bytes).
    fn fake_bus(name: &str, reply: Vec<u8>) -> (Address, std::thread::JoinHandle<Vec<u8>>) {
        use std::io::{Read, Write};
        let dir = std::env::temp_dir().join(format!("picolet-bus-{name}-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).unwrap();
        let path = dir.join("bus.sock");
        let l = std::os::unix::net::UnixListener::bind(&path).unwrap();
        let t = std::thread::spawn(move || {
            let (mut s, _) = l.accept().unwrap();
            let mut got = Vec::new();
            let mut buf = [0u8; 1024];
            let mut step = 0;
            while step < 3 {
                let n = s.read(&mut buf).unwrap();
                got.extend_from_slice(&buf[..n]);
                let lines = got.windows(2).filter(|w| *w == b"\r\n").count();
                while step < lines.min(3) {
                    match step {
                        0 => s.write_all(b"OK 0123456789abcdef\r\n").unwrap(),
                        1 => s.write_all(b"AGREE_UNIX_FD\r\n").unwrap(),
                        _ => {}
                    }
                    step += 1;
                }
            }
            // Hello may have come with BEGIN, or comes now.
            let begin = got.windows(7).position(|w| w == b"BEGIN\r\n").unwrap() + 7;
            let mut hello = got[begin..].to_vec();
            while Message::decode(&hello).unwrap().is_none() {
                let n = s.read(&mut buf).unwrap();
                hello.extend_from_slice(&buf[..n]);
            }
            s.write_all(&reply).unwrap();
            let _ = std::fs::remove_dir_all(&dir);
            got
        });
        (Address::Path(path), t)
    }

    #[test]
    fn the_handshake_and_hello_against_a_fake_bus() {
        let mut r = Message {
            kind: dbus::METHOD_RETURN,
            reply_serial: Some(1),
            body: vec![Value::Str(":1.42".into())],
            ..Message::default()
        };
        r.sender = Some(BUS.into());
        let (addr, t) = fake_bus("hello", r.encode(1).unwrap());
        let bus = rt::block_on(Bus::connect(&addr)).unwrap();
        assert_eq!(bus.unique_name, ":1.42");
        let got = t.join().unwrap();
        let uid = nix::unistd::geteuid().as_raw();
        assert!(got.starts_with(&dbus::auth_external(uid)));
        assert!(
            got.windows(19).any(|w| w == b"NEGOTIATE_UNIX_FD\r\n"),
            "{}",
            String::from_utf8_lossy(&got)
        );
    }

    #[test]
    fn a_malformed_reply_or_a_closed_bus_is_an_error_not_a_panic() {
        let mut bad = vec![b'x'; 16];
        bad[3] = 1;
        let (addr, t) = fake_bus("garbage", bad);
        let e = rt::block_on(Bus::connect(&addr)).unwrap_err();
        t.join().unwrap();
        assert!(e.to_string().contains("endianness"), "{e}");

        // A reply announcing a descriptor that never came.
        let r = Message {
            kind: dbus::METHOD_RETURN,
            reply_serial: Some(1),
            unix_fds: 1,
            body: vec![Value::Str(":1.1".into())],
            ..Message::default()
        };
        let (addr, t) = fake_bus("nofd", r.encode(1).unwrap());
        let e = rt::block_on(Bus::connect(&addr)).unwrap_err();
        t.join().unwrap();
        assert!(e.to_string().contains("UNIX_FDS"), "{e}");

        // Half a message, then the bus goes away.
        let r = Message {
            kind: dbus::METHOD_RETURN,
            reply_serial: Some(1),
            body: vec![Value::Str(":1.1".into())],
            ..Message::default()
        };
        let half = r.encode(1).unwrap()[..20].to_vec();
        let (addr, t) = fake_bus("closed", half);
        let e = rt::block_on(Bus::connect(&addr)).unwrap_err();
        t.join().unwrap();
        assert!(matches!(e, Error::Closed), "{e}");
    }

    #[test]
    fn the_drop_in_raises_the_delay_in_whole_seconds() {
        let d = std::env::temp_dir().join(format!("picolet-logind-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&d);
        let p =
            write_inhibit_delay(&d.join("logind.conf.d"), Duration::from_millis(30_500)).unwrap();
        let text = std::fs::read_to_string(&p).unwrap();
        assert!(p.ends_with("logind.conf.d/99-picolet.conf"));
        assert!(text.contains("[Login]\nInhibitDelayMaxSec=31\n"), "{text}");
        let _ = std::fs::remove_dir_all(&d);
    }
}
