//! The D-Bus wire format, the part picolet speaks and no more: messages with their header
//! fields, bodies of the basic types `y b i u t s o g h` and single-value variants `v`, in
//! either byte order (a message keeps its sender's), and the lines of the SASL handshake.
//! Everything read is bounds-checked: a malformed message is an error naming the field, never
//! a panic. Messages picolet writes are little-endian.

use std::fmt;
use std::os::fd::RawFd;

pub const METHOD_CALL: u8 = 1;
pub const METHOD_RETURN: u8 = 2;
pub const ERROR: u8 = 3;
pub const SIGNAL: u8 = 4;

/// Header flag: no reply is wanted.
pub const NO_REPLY_EXPECTED: u8 = 0x1;

/// The largest message picolet accepts. The bus allows 128 MiB; logind's replies and
/// signals are a few hundred bytes.
pub const MAX_MESSAGE: usize = 1 << 20;

/// Header field codes.
const PATH: u8 = 1;
const INTERFACE: u8 = 2;
const MEMBER: u8 = 3;
const ERROR_NAME: u8 = 4;
const REPLY_SERIAL: u8 = 5;
const DESTINATION: u8 = 6;
const SENDER: u8 = 7;
const SIGNATURE: u8 = 8;
const UNIX_FDS: u8 = 9;

/// A malformed message: which field, and what is wrong with it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Malformed {
    pub field: &'static str,
    pub why: String,
}

impl fmt::Display for Malformed {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "malformed D-Bus message: {}: {}", self.field, self.why)
    }
}

impl std::error::Error for Malformed {}

fn bad(field: &'static str, why: impl Into<String>) -> Malformed {
    Malformed {
        field,
        why: why.into(),
    }
}

/// A value of a body (or a header field).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Value {
    Byte(u8),
    Bool(bool),
    I32(i32),
    U32(u32),
    U64(u64),
    Str(String),
    Path(String),
    Sig(String),
    /// An index into the message's file descriptors.
    Fd(u32),
    Variant(Box<Value>),
}

impl Value {
    fn code(&self) -> char {
        match self {
            Value::Byte(_) => 'y',
            Value::Bool(_) => 'b',
            Value::I32(_) => 'i',
            Value::U32(_) => 'u',
            Value::U64(_) => 't',
            Value::Str(_) => 's',
            Value::Path(_) => 'o',
            Value::Sig(_) => 'g',
            Value::Fd(_) => 'h',
            Value::Variant(_) => 'v',
        }
    }
}

/// A file descriptor received with a message, closed when dropped.
#[derive(Debug)]
pub struct Fd(RawFd);

impl Fd {
    /// Takes ownership of a descriptor the kernel installed for this process (SCM_RIGHTS).
    pub fn from_received(fd: RawFd) -> Fd {
        Fd(fd)
    }

    pub fn raw(&self) -> RawFd {
        self.0
    }
}

impl Drop for Fd {
    fn drop(&mut self) {
        let _ = nix::unistd::close(self.0);
    }
}

/// One message.
#[derive(Debug, Default)]
pub struct Message {
    pub kind: u8,
    pub flags: u8,
    pub serial: u32,
    pub path: Option<String>,
    pub interface: Option<String>,
    pub member: Option<String>,
    pub error_name: Option<String>,
    pub reply_serial: Option<u32>,
    pub destination: Option<String>,
    pub sender: Option<String>,
    /// The number of descriptors the message carries.
    pub unix_fds: u32,
    pub body: Vec<Value>,
    /// The descriptors that came with it (filled in by the connection).
    pub fds: Vec<Fd>,
}

impl Message {
    pub fn method_call(
        destination: &str,
        path: &str,
        interface: &str,
        member: &str,
        body: Vec<Value>,
    ) -> Message {
        Message {
            kind: METHOD_CALL,
            path: Some(path.into()),
            interface: Some(interface.into()),
            member: Some(member.into()),
            destination: Some(destination.into()),
            body,
            ..Message::default()
        }
    }

    pub fn signal(path: &str, interface: &str, member: &str, body: Vec<Value>) -> Message {
        Message {
            kind: SIGNAL,
            path: Some(path.into()),
            interface: Some(interface.into()),
            member: Some(member.into()),
            body,
            ..Message::default()
        }
    }

    /// The body's signature.
    pub fn signature(&self) -> String {
        signature_of(&self.body)
    }

    /// Is this the signal `interface.member`?
    pub fn is_signal(&self, interface: &str, member: &str) -> bool {
        self.kind == SIGNAL
            && self.interface.as_deref() == Some(interface)
            && self.member.as_deref() == Some(member)
    }

    /// The message in the wire format, little-endian, with this serial.
    pub fn encode(&self, serial: u32) -> Result<Vec<u8>, Malformed> {
        if serial == 0 {
            return Err(bad("serial", "must not be zero"));
        }
        let mut body = Writer::default();
        for v in &self.body {
            body.value(v)?;
        }
        let mut w = Writer::default();
        w.buf.extend_from_slice(&[b'l', self.kind, self.flags, 1]);
        w.u32(u32::try_from(body.buf.len()).map_err(|_| bad("body", "too long"))?);
        w.u32(serial);
        let mut fields: Vec<(u8, Value)> = Vec::new();
        let s = |v: &Option<String>| v.clone().map(Value::Str);
        if let Some(p) = &self.path {
            fields.push((PATH, Value::Path(p.clone())));
        }
        for (code, v) in [
            (INTERFACE, s(&self.interface)),
            (MEMBER, s(&self.member)),
            (ERROR_NAME, s(&self.error_name)),
            (DESTINATION, s(&self.destination)),
            (SENDER, s(&self.sender)),
        ] {
            if let Some(v) = v {
                fields.push((code, v));
            }
        }
        if let Some(r) = self.reply_serial {
            fields.push((REPLY_SERIAL, Value::U32(r)));
        }
        let sig = self.signature();
        if !sig.is_empty() {
            fields.push((SIGNATURE, Value::Sig(sig)));
        }
        if self.unix_fds > 0 {
            fields.push((UNIX_FDS, Value::U32(self.unix_fds)));
        }
        // The array's length, then its elements from the next 8-byte boundary.
        let len_at = w.buf.len();
        w.u32(0);
        w.align(8);
        let start = w.buf.len();
        for (code, v) in fields {
            w.align(8);
            w.buf.push(code);
            w.value(&Value::Variant(Box::new(v)))?;
        }
        let len = u32::try_from(w.buf.len() - start).map_err(|_| bad("header", "too long"))?;
        w.buf[len_at..len_at + 4].copy_from_slice(&len.to_le_bytes());
        w.align(8);
        w.buf.extend_from_slice(&body.buf);
        if w.buf.len() > MAX_MESSAGE {
            return Err(bad("message length", format!("{} bytes", w.buf.len())));
        }
        Ok(w.buf)
    }

    /// Reads one message from the start of `buf`: `None` while `buf` holds less than the whole
    /// message, else the message (without its descriptors) and the bytes it took.
    pub fn decode(buf: &[u8]) -> Result<Option<(Message, usize)>, Malformed> {
        if buf.len() < 16 {
            return Ok(None);
        }
        let be = match buf[0] {
            b'l' => false,
            b'B' => true,
            b => return Err(bad("endianness", format!("byte {b:#04x}"))),
        };
        if buf[3] != 1 {
            return Err(bad("protocol version", buf[3].to_string()));
        }
        let mut r = Reader {
            buf,
            pos: 4,
            be,
            field: "header",
        };
        let body_len = r.u32()?;
        let serial = r.u32()?;
        let fields_len = r.u32()?;
        if serial == 0 {
            return Err(bad("serial", "zero"));
        }
        let header_end = 16u64 + u64::from(fields_len);
        let body_at = header_end.div_ceil(8) * 8;
        let total = body_at + u64::from(body_len);
        if total > MAX_MESSAGE as u64 {
            return Err(bad(
                "message length",
                format!("{total} bytes, more than the {MAX_MESSAGE} accepted"),
            ));
        }
        // Within MAX_MESSAGE: these fit a usize.
        let size = |v: u64| usize::try_from(v).map_err(|_| bad("message length", v.to_string()));
        let (header_end, body_at, total) = (size(header_end)?, size(body_at)?, size(total)?);
        if buf.len() < total {
            return Ok(None);
        }
        let mut m = Message {
            kind: buf[1],
            flags: buf[2],
            serial,
            ..Message::default()
        };
        let mut sig = String::new();
        let mut r = Reader {
            buf: &buf[..header_end],
            pos: 16,
            be,
            field: "header field",
        };
        while r.pos < header_end {
            r.align(8)?;
            let code = r.u8()?;
            // Each field's value comes in a variant.
            let v = match r.variant()? {
                Value::Variant(inner) => *inner,
                v => v,
            };
            match code {
                PATH => match v {
                    Value::Path(p) => m.path = Some(p),
                    o => return Err(bad("PATH", format!("type {:?}", o.code()))),
                },
                INTERFACE => m.interface = Some(string_field("INTERFACE", v)?),
                MEMBER => m.member = Some(string_field("MEMBER", v)?),
                ERROR_NAME => m.error_name = Some(string_field("ERROR_NAME", v)?),
                DESTINATION => m.destination = Some(string_field("DESTINATION", v)?),
                SENDER => m.sender = Some(string_field("SENDER", v)?),
                REPLY_SERIAL => match v {
                    Value::U32(s) => m.reply_serial = Some(s),
                    o => return Err(bad("REPLY_SERIAL", format!("type {:?}", o.code()))),
                },
                UNIX_FDS => match v {
                    Value::U32(n) => m.unix_fds = n,
                    o => return Err(bad("UNIX_FDS", format!("type {:?}", o.code()))),
                },
                SIGNATURE => match v {
                    Value::Sig(g) => sig = g,
                    o => return Err(bad("SIGNATURE", format!("type {:?}", o.code()))),
                },
                // Unknown fields are skipped, as the specification says.
                _ => {}
            }
        }
        match m.kind {
            METHOD_CALL if m.path.is_none() || m.member.is_none() => {
                return Err(bad("header", "a method call without PATH or MEMBER"));
            }
            METHOD_RETURN if m.reply_serial.is_none() => {
                return Err(bad("REPLY_SERIAL", "missing from a method return"));
            }
            ERROR if m.reply_serial.is_none() || m.error_name.is_none() => {
                return Err(bad("header", "an error without REPLY_SERIAL or ERROR_NAME"));
            }
            SIGNAL if m.path.is_none() || m.interface.is_none() || m.member.is_none() => {
                return Err(bad("header", "a signal without PATH, INTERFACE or MEMBER"));
            }
            _ => {}
        }
        let mut b = Reader {
            buf: &buf[body_at..total],
            pos: 0,
            be,
            field: "body",
        };
        for c in sig.chars() {
            m.body.push(b.value(c)?);
        }
        if b.pos != b.buf.len() {
            return Err(bad(
                "body",
                format!(
                    "{} bytes past the signature {sig:?}",
                    b.buf.len().saturating_sub(b.pos)
                ),
            ));
        }
        for v in &m.body {
            if let Value::Fd(i) = v
                && *i >= m.unix_fds
            {
                return Err(bad(
                    "body",
                    format!("descriptor index {i} of {} sent", m.unix_fds),
                ));
            }
        }
        Ok(Some((m, total)))
    }
}

fn string_field(field: &'static str, v: Value) -> Result<String, Malformed> {
    match v {
        Value::Str(s) => Ok(s),
        o => Err(bad(field, format!("type {:?}", o.code()))),
    }
}

fn signature_of(values: &[Value]) -> String {
    values.iter().map(Value::code).collect()
}

#[derive(Default)]
struct Writer {
    buf: Vec<u8>,
}

impl Writer {
    fn align(&mut self, n: usize) {
        while !self.buf.len().is_multiple_of(n) {
            self.buf.push(0);
        }
    }

    fn u32(&mut self, v: u32) {
        self.align(4);
        self.buf.extend_from_slice(&v.to_le_bytes());
    }

    fn text(&mut self, field: &'static str, s: &str) -> Result<(), Malformed> {
        if s.contains('\0') {
            return Err(bad(field, "contains a NUL byte"));
        }
        self.u32(u32::try_from(s.len()).map_err(|_| bad(field, "too long"))?);
        self.buf.extend_from_slice(s.as_bytes());
        self.buf.push(0);
        Ok(())
    }

    fn sig(&mut self, s: &str) -> Result<(), Malformed> {
        let n = u8::try_from(s.len()).map_err(|_| bad("signature", "longer than 255"))?;
        self.buf.push(n);
        self.buf.extend_from_slice(s.as_bytes());
        self.buf.push(0);
        Ok(())
    }

    fn value(&mut self, v: &Value) -> Result<(), Malformed> {
        match v {
            Value::Byte(b) => self.buf.push(*b),
            Value::Bool(b) => self.u32(u32::from(*b)),
            Value::I32(i) => {
                self.align(4);
                self.buf.extend_from_slice(&i.to_le_bytes());
            }
            Value::U32(u) | Value::Fd(u) => self.u32(*u),
            Value::U64(u) => {
                self.align(8);
                self.buf.extend_from_slice(&u.to_le_bytes());
            }
            Value::Str(s) => self.text("string", s)?,
            Value::Path(s) => self.text("object path", s)?,
            Value::Sig(s) => self.sig(s)?,
            Value::Variant(inner) => {
                if matches!(**inner, Value::Variant(_)) {
                    return Err(bad("variant", "a variant in a variant"));
                }
                self.sig(&inner.code().to_string())?;
                self.value(inner)?;
            }
        }
        Ok(())
    }
}

/// Reads values from a buffer whose offset 0 is 8-aligned in the message.
struct Reader<'a> {
    buf: &'a [u8],
    pos: usize,
    be: bool,
    field: &'static str,
}

impl<'a> Reader<'a> {
    fn take(&mut self, n: usize) -> Result<&'a [u8], Malformed> {
        let end = self
            .pos
            .checked_add(n)
            .filter(|e| *e <= self.buf.len())
            .ok_or_else(|| {
                bad(
                    self.field,
                    format!(
                        "{n} bytes wanted at offset {} of {}",
                        self.pos,
                        self.buf.len()
                    ),
                )
            })?;
        let s = &self.buf[self.pos..end];
        self.pos = end;
        Ok(s)
    }

    fn align(&mut self, n: usize) -> Result<(), Malformed> {
        let pad = (n - self.pos % n) % n;
        let p = self.take(pad)?;
        if p.iter().any(|b| *b != 0) {
            return Err(bad(self.field, "non-zero padding"));
        }
        Ok(())
    }

    fn u8(&mut self) -> Result<u8, Malformed> {
        Ok(self.take(1)?[0])
    }

    fn u32(&mut self) -> Result<u32, Malformed> {
        self.align(4)?;
        let b: [u8; 4] = self
            .take(4)?
            .try_into()
            .map_err(|_| bad(self.field, "u32"))?;
        Ok(if self.be {
            u32::from_be_bytes(b)
        } else {
            u32::from_le_bytes(b)
        })
    }

    fn u64(&mut self) -> Result<u64, Malformed> {
        self.align(8)?;
        let b: [u8; 8] = self
            .take(8)?
            .try_into()
            .map_err(|_| bad(self.field, "u64"))?;
        Ok(if self.be {
            u64::from_be_bytes(b)
        } else {
            u64::from_le_bytes(b)
        })
    }

    fn text(&mut self, len: usize) -> Result<String, Malformed> {
        let bytes = self.take(len)?;
        if self.u8()? != 0 {
            return Err(bad(self.field, "string not NUL-terminated"));
        }
        if bytes.contains(&0) {
            return Err(bad(self.field, "NUL byte inside a string"));
        }
        String::from_utf8(bytes.to_vec()).map_err(|_| bad(self.field, "string not UTF-8"))
    }

    fn string(&mut self) -> Result<String, Malformed> {
        let n = self.u32()? as usize;
        self.text(n)
    }

    fn signature(&mut self) -> Result<String, Malformed> {
        let n = self.u8()? as usize;
        self.text(n)
    }

    fn value(&mut self, code: char) -> Result<Value, Malformed> {
        Ok(match code {
            'y' => Value::Byte(self.u8()?),
            'b' => match self.u32()? {
                0 => Value::Bool(false),
                1 => Value::Bool(true),
                n => return Err(bad(self.field, format!("boolean {n}"))),
            },
            'i' => Value::I32(self.u32()?.cast_signed()),
            'u' => Value::U32(self.u32()?),
            'h' => Value::Fd(self.u32()?),
            't' => Value::U64(self.u64()?),
            's' => Value::Str(self.string()?),
            'o' => Value::Path(self.string()?),
            'g' => Value::Sig(self.signature()?),
            'v' => self.variant()?,
            c => {
                return Err(bad(
                    self.field,
                    format!("type {c:?} is not one picolet reads"),
                ));
            }
        })
    }

    /// A variant holding one value of a basic type.
    fn variant(&mut self) -> Result<Value, Malformed> {
        let sig = self.signature()?;
        let mut cs = sig.chars();
        match (cs.next(), cs.next()) {
            (Some(c), None) if c != 'v' => Ok(Value::Variant(Box::new(self.value(c)?))),
            _ => Err(bad(
                self.field,
                format!("variant of signature {sig:?} is not one picolet reads"),
            )),
        }
    }
}

/// The SASL line that authenticates as `uid` by the socket's credentials: the uid's decimal
/// digits, hex-encoded. The connection's first byte, a NUL, comes before it.
pub fn auth_external(uid: u32) -> Vec<u8> {
    let hex: String = uid
        .to_string()
        .bytes()
        .map(|b| format!("{b:02x}"))
        .collect();
    let mut v = vec![0u8];
    v.extend_from_slice(format!("AUTH EXTERNAL {hex}\r\n").as_bytes());
    v
}

/// Where the system bus listens.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Address {
    Path(std::path::PathBuf),
    Abstract(Vec<u8>),
}

impl fmt::Display for Address {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Address::Path(p) => write!(f, "unix:path={}", p.display()),
            Address::Abstract(a) => write!(f, "unix:abstract={}", String::from_utf8_lossy(a)),
        }
    }
}

/// The system bus's default socket.
pub const SYSTEM_BUS: &str = "/run/dbus/system_bus_socket";

/// The first `unix:path=` or `unix:abstract=` of a bus address list
/// (`$DBUS_SYSTEM_BUS_ADDRESS`), its `%xx` escapes decoded.
pub fn parse_address(s: &str) -> Result<Address, AddressError> {
    for entry in s.split(';').filter(|e| !e.is_empty()) {
        let Some(rest) = entry.strip_prefix("unix:") else {
            continue;
        };
        for kv in rest.split(',') {
            let (k, v) = kv.split_once('=').unwrap_or((kv, ""));
            let value = unescape(v).map_err(|at| AddressError::BadEscape {
                address: s.to_owned(),
                at,
            })?;
            match k {
                "path" => {
                    let p = String::from_utf8(value).map_err(|_| AddressError::PathNotUtf8 {
                        address: s.to_owned(),
                    })?;
                    return Ok(Address::Path(p.into()));
                }
                "abstract" => return Ok(Address::Abstract(value)),
                _ => {}
            }
        }
    }
    Err(AddressError::NoUnixAddress {
        address: s.to_owned(),
    })
}

/// Why a bus address list gives no address picolet can use.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum AddressError {
    /// A `%xx` escape that is not one, at this byte of its value.
    BadEscape {
        address: String,
        at: usize,
    },
    PathNotUtf8 {
        address: String,
    },
    /// Neither `unix:path=` nor `unix:abstract=` (the only transports picolet uses).
    NoUnixAddress {
        address: String,
    },
}

impl std::fmt::Display for AddressError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            AddressError::BadEscape { address, at } => {
                write!(f, "{address:?}: bad escape at byte {at}")
            }
            AddressError::PathNotUtf8 { address } => write!(f, "{address:?}: path is not UTF-8"),
            AddressError::NoUnixAddress { address } => write!(
                f,
                "{address:?}: no unix:path= or unix:abstract= address (the only transports \
                 picolet uses)"
            ),
        }
    }
}

impl std::error::Error for AddressError {}

/// `v` with its `%xx` escapes decoded; the error is the byte where a bad escape starts.
fn unescape(v: &str) -> Result<Vec<u8>, usize> {
    let b = v.as_bytes();
    let mut out = Vec::with_capacity(b.len());
    let mut i = 0;
    while i < b.len() {
        if b[i] == b'%' {
            let hex = b
                .get(i + 1..i + 3)
                .and_then(|h| std::str::from_utf8(h).ok())
                .and_then(|h| u8::from_str_radix(h, 16).ok())
                .ok_or(i)?;
            out.push(hex);
            i += 3;
        } else {
            out.push(b[i]);
            i += 1;
        }
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_method_call_round_trips() {
        let m = Message::method_call(
            "org.freedesktop.login1",
            "/org/freedesktop/login1",
            "org.freedesktop.login1.Manager",
            "Inhibit",
            vec![
                Value::Str("shutdown".into()),
                Value::Str("picolet".into()),
                Value::Str("why".into()),
                Value::Str("delay".into()),
            ],
        );
        let bytes = m.encode(7).unwrap();
        assert_eq!(&bytes[..4], b"l\x01\x00\x01");
        let (d, n) = Message::decode(&bytes).unwrap().unwrap();
        assert_eq!(n, bytes.len());
        assert_eq!(d.serial, 7);
        assert_eq!(d.kind, METHOD_CALL);
        assert_eq!(d.member.as_deref(), Some("Inhibit"));
        assert_eq!(d.path.as_deref(), Some("/org/freedesktop/login1"));
        assert_eq!(d.destination.as_deref(), Some("org.freedesktop.login1"));
        assert_eq!(d.signature(), "ssss");
        assert_eq!(d.body, m.body);
        // Every prefix is "not yet".
        for cut in 0..bytes.len() {
            assert!(Message::decode(&bytes[..cut]).unwrap().is_none(), "{cut}");
        }
    }

    #[test]
    fn every_value_type_round_trips_with_its_alignment() {
        let mut m = Message::signal("/a", "a.b", "C", Vec::new());
        m.body = vec![
            Value::Byte(7),
            Value::U64(1 << 40),
            Value::Bool(true),
            Value::I32(-5),
            Value::Path("/x/y".into()),
            Value::Sig("sb".into()),
            Value::Variant(Box::new(Value::U64(90_000_000))),
            Value::Fd(0),
            Value::Str(String::new()),
        ];
        m.unix_fds = 1;
        m.reply_serial = Some(3);
        m.sender = Some(":1.5".into());
        let bytes = m.encode(1).unwrap();
        let (d, _) = Message::decode(&bytes).unwrap().unwrap();
        assert_eq!(d.body, m.body);
        assert_eq!(d.signature(), "ytbiogvhs");
        assert_eq!((d.unix_fds, d.reply_serial), (1, Some(3)));
        assert_eq!(d.sender.as_deref(), Some(":1.5"));
    }

    /// A signal as a big-endian peer sends it: PrepareForShutdown(true).
    fn big_endian_signal() -> Vec<u8> {
        let mut v = vec![b'B', SIGNAL, 0, 1];
        v.extend_from_slice(&4u32.to_be_bytes()); // body
        v.extend_from_slice(&9u32.to_be_bytes()); // serial
        let mut fields = Vec::new();
        let mut field = |code: u8, sig: u8, val: &[u8]| {
            while fields.len() % 8 != 0 {
                fields.push(0);
            }
            fields.extend_from_slice(&[code, 1, sig, 0]);
            fields.extend_from_slice(val);
        };
        let s = |t: &str| {
            let mut b = (u32::try_from(t.len()).unwrap()).to_be_bytes().to_vec();
            b.extend_from_slice(t.as_bytes());
            b.push(0);
            b
        };
        field(PATH, b'o', &s("/org/freedesktop/login1"));
        field(INTERFACE, b's', &s("org.freedesktop.login1.Manager"));
        field(MEMBER, b's', &s("PrepareForShutdown"));
        field(SIGNATURE, b'g', &[1, b'b', 0]);
        v.extend_from_slice(&u32::try_from(fields.len()).unwrap().to_be_bytes());
        v.extend_from_slice(&fields);
        while v.len() % 8 != 0 {
            v.push(0);
        }
        v.extend_from_slice(&1u32.to_be_bytes());
        v
    }

    #[test]
    fn a_big_endian_signal_is_read() {
        let b = big_endian_signal();
        let (m, n) = Message::decode(&b).unwrap().unwrap();
        assert_eq!(n, b.len());
        assert!(m.is_signal("org.freedesktop.login1.Manager", "PrepareForShutdown"));
        assert_eq!(m.body, vec![Value::Bool(true)]);
    }

    #[test]
    fn malformed_input_is_an_error_naming_the_field() {
        let good = big_endian_signal();
        let err = |b: &[u8]| Message::decode(b).unwrap_err();
        let mut b = good.clone();
        b[0] = b'x';
        assert_eq!(err(&b).field, "endianness");
        let mut b = good.clone();
        b[3] = 2;
        assert_eq!(err(&b).field, "protocol version");
        // A body length past the cap.
        let mut b = good.clone();
        b[4..8].copy_from_slice(&u32::MAX.to_be_bytes());
        assert_eq!(err(&b).field, "message length");
        // A boolean that is neither 0 nor 1.
        let mut b = good.clone();
        let l = b.len();
        b[l - 1] = 2;
        let e = err(&b);
        assert_eq!((e.field, e.why.as_str()), ("body", "boolean 2"));
        // A string length running past the header.
        let mut b = good.clone();
        b[20..24].copy_from_slice(&1000u32.to_be_bytes());
        assert_eq!(err(&b).field, "header field");
        // Serial zero.
        let mut b = good.clone();
        b[8..12].copy_from_slice(&0u32.to_be_bytes());
        assert_eq!(err(&b).field, "serial");
        // A signal without its member.
        let m = Message {
            kind: SIGNAL,
            path: Some("/a".into()),
            interface: Some("a.b".into()),
            ..Message::default()
        };
        assert_eq!(err(&m.encode(1).unwrap()).field, "header");
        // A method return without the serial it answers.
        let m = Message {
            kind: METHOD_RETURN,
            ..Message::default()
        };
        assert_eq!(err(&m.encode(1).unwrap()).field, "REPLY_SERIAL");
        // A descriptor index beyond those sent.
        let mut m = Message::signal("/a", "a.b", "C", vec![Value::Fd(1)]);
        m.unix_fds = 1;
        let e = err(&m.encode(1).unwrap());
        assert_eq!(e.field, "body");
        assert!(e.why.contains("descriptor index 1"), "{e}");
        // Bytes past the signature.
        let mut b = m.encode(1).unwrap();
        b.extend_from_slice(&[0; 8]);
        let body_len = u32::from_le_bytes(b[4..8].try_into().unwrap()) + 8;
        b[4..8].copy_from_slice(&body_len.to_le_bytes());
        assert!(err(&b).why.contains("past the signature"));
    }

    #[test]
    fn truncated_and_random_input_never_panics() {
        let good = big_endian_signal();
        // Every single-byte change of a valid message decodes or errs, never panics.
        for i in 0..good.len() {
            for x in [0u8, 1, 0x7f, 0x80, 0xff] {
                let mut b = good.clone();
                b[i] = x;
                let _ = Message::decode(&b);
            }
        }
        // A cheap deterministic byte stream.
        let mut s = 0x2545_f491_4f6c_dd1du64;
        for _ in 0..2000 {
            let mut b = vec![b'l', 4, 0, 1];
            for _ in 0..60 {
                s ^= s << 13;
                s ^= s >> 7;
                s ^= s << 17;
                b.push((s & 0xff) as u8);
            }
            // Small lengths, so the fields are read.
            b[4] &= 0x1f;
            b[5..8].fill(0);
            b[12] &= 0x3f;
            b[13..16].fill(0);
            let _ = Message::decode(&b);
        }
    }

    #[test]
    fn the_auth_line_carries_the_uid_in_hex() {
        assert_eq!(auth_external(0), b"\0AUTH EXTERNAL 30\r\n");
        assert_eq!(auth_external(1000), b"\0AUTH EXTERNAL 31303030\r\n");
    }

    #[test]
    fn bus_addresses() {
        assert_eq!(
            parse_address("unix:path=/run/dbus/system_bus_socket"),
            Ok(Address::Path("/run/dbus/system_bus_socket".into()))
        );
        assert_eq!(
            parse_address("tcp:host=x,port=1;unix:path=/tmp/a%20b,guid=0123"),
            Ok(Address::Path("/tmp/a b".into()))
        );
        assert_eq!(
            parse_address("unix:abstract=/tmp/dbus-XYZ,guid=1"),
            Ok(Address::Abstract(b"/tmp/dbus-XYZ".to_vec()))
        );
        assert!(parse_address("tcp:host=localhost,port=1").is_err());
        assert!(
            parse_address("unix:path=/a%zz")
                .unwrap_err()
                .to_string()
                .contains("bad escape")
        );
    }
}
