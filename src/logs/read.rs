//! Reading a container's log as the kubelet's `/containerLogs` serves it: the query's options
//! (`tailLines`, `sinceSeconds`, `sinceTime`, `timestamps`, `previous`, `limitBytes`, `follow`),
//! and a reader going through the rotated files (gzipped or not) and then the live log,
//! joining partial lines, and when following, picking up where it stopped and the new live log
//! after a rotation. The decisions ([`parse_query`], [`Output`], [`tail_start`]) are pure; the
//! [`Reader`] does blocking file IO and runs off the executor thread.

use std::collections::VecDeque;
use std::fs;
use std::io::{self, BufRead, BufReader, Read, Seek};
use std::os::unix::fs::MetadataExt;
use std::path::{Path, PathBuf};

#[cfg(test)]
use super::format::Stream;
use super::format::{self, Joiner, Line};
use super::rotate;

/// The options of one request, as upstream's `PodLogOptions`.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct LogOptions {
    /// Only the last this many lines.
    pub tail: Option<u64>,
    /// Stop after this many bytes of output.
    pub limit_bytes: Option<u64>,
    /// Only lines at or after this time (unix nanoseconds).
    pub since: Option<i64>,
    pub follow: bool,
    pub timestamps: bool,
    pub previous: bool,
}

/// A refused query: the HTTP status (400: not decodable, 422: invalid) and why.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct QueryError {
    pub code: u16,
    pub message: String,
}

fn percent_decode(s: &str) -> String {
    let hex = |c: u8| char::from(c).to_digit(16);
    let b = s.as_bytes();
    let mut out = Vec::with_capacity(b.len());
    let mut i = 0;
    while i < b.len() {
        match b[i] {
            b'+' => out.push(b' '),
            b'%' if i + 2 < b.len() => match (hex(b[i + 1]), hex(b[i + 2])) {
                (Some(h), Some(l)) => {
                    out.push(u8::try_from(h * 16 + l).unwrap_or(b'?'));
                    i += 3;
                    continue;
                }
                _ => out.push(b'%'),
            },
            c => out.push(c),
        }
        i += 1;
    }
    String::from_utf8_lossy(&out).into_owned()
}

/// Go's query conversion of a bool: absent or `false`/`0` is false, anything else true.
fn boolean(v: &str) -> bool {
    !(v == "0" || v.eq_ignore_ascii_case("false"))
}

fn int(name: &str, v: &str) -> Result<i64, QueryError> {
    v.parse().map_err(|_| QueryError {
        code: 400,
        message: format!("{name}: invalid value {v:?}: not an integer"),
    })
}

fn invalid(name: &str, v: impl std::fmt::Display, why: &str) -> QueryError {
    QueryError {
        code: 422,
        message: format!("{name}: Invalid value: {v}: {why}"),
    }
}

/// Decodes and validates a `/containerLogs` query string (without the `?`) at `now` (unix
/// nanoseconds). Unknown parameters are ignored, as upstream; `tail` is the old name of
/// `tailLines` (`tail=all` meaning every line).
pub fn parse_query(query: &str, now: i64) -> Result<LogOptions, QueryError> {
    let mut o = LogOptions::default();
    let mut since_seconds = None;
    let mut since_time = None;
    let mut seen = std::collections::HashSet::new();
    for pair in query.split('&').filter(|p| !p.is_empty()) {
        let (k, v) = pair.split_once('=').unwrap_or((pair, ""));
        let (k, v) = (percent_decode(k), percent_decode(v));
        let key = if k == "tail" { "tailLines" } else { k.as_str() };
        if !seen.insert(key.to_owned()) {
            continue; // the first value counts
        }
        match key {
            "tailLines" if k == "tail" && v == "all" => {}
            "tailLines" => {
                let n = int(key, &v)?;
                o.tail =
                    Some(u64::try_from(n).map_err(|_| {
                        invalid("tailLines", n, "must be greater than or equal to 0")
                    })?);
            }
            "limitBytes" => {
                let n = int(key, &v)?;
                if n < 1 {
                    return Err(invalid("limitBytes", n, "must be greater than 0"));
                }
                o.limit_bytes = u64::try_from(n).ok();
            }
            "sinceSeconds" => {
                let n = int(key, &v)?;
                if n < 1 {
                    return Err(invalid("sinceSeconds", n, "must be greater than 0"));
                }
                since_seconds = Some(n);
            }
            "sinceTime" => {
                since_time = Some(format::parse_time(v.as_bytes()).ok_or_else(|| QueryError {
                    code: 400,
                    message: format!("sinceTime: invalid value {v:?}: not an RFC 3339 time"),
                })?);
            }
            "timestamps" => o.timestamps = boolean(&v),
            "follow" => o.follow = boolean(&v),
            "previous" => o.previous = boolean(&v),
            _ => {}
        }
    }
    o.since = match (since_seconds, since_time) {
        (Some(_), Some(_)) => {
            return Err(QueryError {
                code: 422,
                message: "at most one of `sinceTime` or `sinceSeconds` may be specified".into(),
            });
        }
        (Some(s), None) => Some(now.saturating_sub(s.saturating_mul(1_000_000_000))),
        (None, t) => t,
    };
    Ok(o)
}

/// Turns lines into output: drops those before `since`, prefixes timestamps, and cuts at
/// `limitBytes` (the last line cut in the middle, as upstream).
#[derive(Debug, Clone)]
pub struct Output {
    since: Option<i64>,
    timestamps: bool,
    remaining: Option<u64>,
}

impl Output {
    pub fn new(o: &LogOptions) -> Output {
        Output {
            since: o.since,
            timestamps: o.timestamps,
            remaining: o.limit_bytes,
        }
    }

    /// True once the byte limit is used up.
    pub fn done(&self) -> bool {
        self.remaining == Some(0)
    }

    /// Appends one line to `out`.
    pub fn write(&mut self, l: &Line, out: &mut Vec<u8>) {
        if self.done() || self.since.is_some_and(|s| l.time < s) {
            return;
        }
        let start = out.len();
        if self.timestamps {
            out.extend_from_slice(format::format_time(l.time).as_bytes());
            out.push(b' ');
        }
        out.extend_from_slice(&l.content);
        out.push(b'\n');
        if let Some(r) = &mut self.remaining {
            let n = u64::try_from(out.len() - start).unwrap_or(u64::MAX);
            if n > *r {
                out.truncate(start + usize::try_from(*r).unwrap_or(usize::MAX));
                *r = 0;
            } else {
                *r -= n;
            }
        }
    }
}

/// Where the last `tail` lines start, given each file's line count (oldest file first): the
/// index of the first file to read and how many of its lines to skip.
pub fn tail_start(counts: &[u64], tail: u64) -> (usize, u64) {
    let mut sum = 0u64;
    for (i, &c) in counts.iter().enumerate().rev() {
        sum += c;
        if sum >= tail {
            return (i, sum - tail);
        }
    }
    (0, 0)
}

/// The longest raw line read; the rest of a longer one is dropped (containerd splits lines at
/// 16 KiB, so only a damaged file has longer ones).
pub const MAX_RAW_LINE: usize = 256 * 1024;

enum Raw {
    /// A whole line (without its `\n`).
    Line,
    /// The end of the file came before a `\n`; what there was is in the buffer.
    Unterminated,
    Eof,
}

/// Reads one line into `buf` (cleared first), keeping at most [`MAX_RAW_LINE`] bytes of it.
fn read_raw(r: &mut dyn BufRead, buf: &mut Vec<u8>) -> io::Result<Raw> {
    buf.clear();
    let mut any = false;
    loop {
        let chunk = match r.fill_buf() {
            Ok(c) => c,
            Err(e) if e.kind() == io::ErrorKind::Interrupted => continue,
            Err(e) => return Err(e),
        };
        if chunk.is_empty() {
            return Ok(if any { Raw::Unterminated } else { Raw::Eof });
        }
        any = true;
        let (take, found) = match chunk.iter().position(|&b| b == b'\n') {
            Some(i) => (i, true),
            None => (chunk.len(), false),
        };
        let room = MAX_RAW_LINE.saturating_sub(buf.len());
        buf.extend_from_slice(&chunk[..take.min(room)]);
        r.consume(if found { take + 1 } else { take });
        if found {
            return Ok(Raw::Line);
        }
    }
}

/// How many lines a reader holds (partial records joined; unparsable lines not counted).
fn count_lines(r: &mut dyn BufRead) -> io::Result<u64> {
    let mut buf = Vec::new();
    let (mut n, mut pending) = (0u64, [false; 2]);
    loop {
        match read_raw(r, &mut buf)? {
            Raw::Eof => break,
            Raw::Line | Raw::Unterminated => {
                if let Ok(rec) = format::parse_record(&buf) {
                    let p = &mut pending[rec.stream as usize];
                    *p = rec.partial;
                    if !rec.partial {
                        n += 1;
                    }
                }
            }
        }
    }
    Ok(n + pending.iter().filter(|p| **p).count() as u64)
}

/// The records of `raw`, a log file's bytes: decompressed when the file is gzipped.
fn records<'a>(gzipped: bool, raw: impl Read + Send + 'a) -> Box<dyn BufRead + Send + 'a> {
    if gzipped {
        Box::new(BufReader::new(flate2::read::GzDecoder::new(raw)))
    } else {
        Box::new(BufReader::with_capacity(32 * 1024, raw))
    }
}

/// One of a log's files as it was when a request came: opened then, so a rotation meanwhile
/// (the live file renamed, a rotated one gzipped, the oldest removed) changes nothing of what
/// is read, with its length then. A request that does not follow reads no further than that
/// length, so `tailLines=N` gives N lines however fast the container writes.
struct Snapshot {
    path: PathBuf,
    file: fs::File,
    len: u64,
}

impl Snapshot {
    /// None when the file is gone.
    fn open(path: &Path) -> io::Result<Option<Snapshot>> {
        match fs::File::open(path) {
            Ok(file) => Ok(Some(Snapshot {
                len: file.metadata()?.len(),
                path: path.to_owned(),
                file,
            })),
            Err(e) if e.kind() == io::ErrorKind::NotFound => Ok(None),
            Err(e) => Err(io::Error::new(
                e.kind(),
                format!("opening {}: {e}", path.display()),
            )),
        }
    }

    fn gzipped(&self) -> bool {
        self.path.extension().is_some_and(|e| e == "gz")
    }

    /// The file from its start, up to the snapshot's length unless `follow` (a gzipped file
    /// is complete: its length is its end).
    fn reader(mut self, follow: bool) -> io::Result<(Box<dyn BufRead + Send>, u64)> {
        self.file.rewind()?;
        let ino = self.file.metadata()?.ino();
        let limit = if follow { u64::MAX } else { self.len };
        Ok((records(self.gzipped(), self.file.take(limit)), ino))
    }

    fn count_lines(&mut self) -> io::Result<u64> {
        self.file.rewind()?;
        count_lines(&mut *records(self.gzipped(), (&self.file).take(self.len)))
    }
}

struct Current {
    path: PathBuf,
    reader: Box<dyn BufRead + Send>,
    ino: u64,
    live: bool,
}

/// What a [`Reader::pump`] ended with.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Pump {
    /// At the end of the live log; following, more may come.
    More,
    /// Nothing more to send: the end of the log (not following), the byte limit, or the
    /// receiver went away.
    Done,
}

/// Reads a container's log files in order. `Send`, so it moves into the blocking pool for each
/// pump and back.
pub struct Reader {
    /// The files still to read, oldest first.
    files: VecDeque<Snapshot>,
    /// Following, a rotation was seen: the new live log is opened once these are read.
    reopen_live: bool,
    live: PathBuf,
    cur: Option<Current>,
    skip: u64,
    joiner: Joiner,
    out: Output,
    follow: bool,
    /// Bytes of an unterminated last line of the live log, read again with the rest of it.
    carry: Vec<u8>,
}

impl std::fmt::Debug for Reader {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Reader")
            .field("live", &self.live)
            .field(
                "files",
                &self.files.iter().map(|f| &f.path).collect::<Vec<_>>(),
            )
            .finish_non_exhaustive()
    }
}

/// Opens every file of the log whose live file is `live`, oldest first. A rotation between
/// listing the directory and opening a file (the live file renamed and not yet made again, a
/// rotated file gzipped and removed) lists again, a few times, so that no file is skipped. An
/// error when neither the live log nor any rotated file exists.
fn open_all(live: &Path) -> io::Result<Vec<Snapshot>> {
    const ATTEMPTS: u32 = 3;
    let dir = live.parent().unwrap_or(Path::new("."));
    let name = live
        .file_name()
        .and_then(|n| n.to_str())
        .unwrap_or_default();
    for attempt in 1..=ATTEMPTS {
        let names = match rotate::list_dir(dir) {
            Ok(n) => n,
            Err(e) if e.kind() == io::ErrorKind::NotFound => Vec::new(),
            Err(e) => return Err(io::Error::new(e.kind(), format!("{}: {e}", dir.display()))),
        };
        let mut paths: Vec<PathBuf> = rotate::all_logs(name, &names)
            .into_iter()
            .map(|n| dir.join(n))
            .collect();
        let mut whole = names.iter().any(|n| n == name);
        if !whole {
            paths.pop();
        }
        let mut files = Vec::with_capacity(paths.len());
        for p in &paths {
            match Snapshot::open(p)? {
                Some(s) => files.push(s),
                None => whole = false,
            }
        }
        if whole || attempt == ATTEMPTS {
            if files.is_empty() {
                break;
            }
            return Ok(files);
        }
        std::thread::sleep(std::time::Duration::from_millis(10));
    }
    Err(io::Error::new(
        io::ErrorKind::NotFound,
        format!("failed to open log file {:?}: no such file", live.display()),
    ))
}

/// How many bytes are handed to the sink at a time.
const CHUNK: usize = 32 * 1024;

impl Reader {
    /// Opens the log whose live file is `live`, with its rotated files. An error when neither
    /// the live log nor any rotated file exists.
    pub fn new(live: &Path, o: &LogOptions) -> io::Result<Reader> {
        let mut files = open_all(live)?;
        let mut skip = 0;
        if o.tail == Some(0) && !o.follow {
            files.clear();
        } else if let Some(t) = o.tail {
            // Newest first, and only as many files as the tail reaches into: a short tail of a
            // busy log reads the live file alone, not every gzipped one.
            let mut counts = Vec::new();
            let mut sum = 0;
            for f in files.iter_mut().rev() {
                // At least the newest, so that `tailLines=0&follow` still follows it.
                if sum >= t && !counts.is_empty() {
                    break;
                }
                let n = f.count_lines()?;
                sum += n;
                counts.push(n);
            }
            counts.reverse();
            let (first, s) = tail_start(&counts, t);
            files.drain(..files.len() - counts.len() + first);
            skip = s;
        }
        Ok(Reader {
            files: files.into(),
            reopen_live: false,
            live: live.to_owned(),
            cur: None,
            skip,
            joiner: Joiner::default(),
            out: Output::new(o),
            follow: o.follow,
            carry: Vec::new(),
        })
    }

    /// Stops following: the next pump reads to the end and finishes.
    pub fn stop_following(&mut self) {
        self.follow = false;
    }

    fn emit(&mut self, l: &Line, buf: &mut Vec<u8>) {
        if self.skip > 0 {
            self.skip -= 1;
        } else {
            self.out.write(l, buf);
        }
    }

    /// Reads what there is, handing the output to `sink` in chunks; `sink` returns false when
    /// nobody listens any more.
    pub fn pump(&mut self, sink: &mut dyn FnMut(Vec<u8>) -> bool) -> io::Result<Pump> {
        let mut out = Vec::new();
        let mut raw = Vec::new();
        loop {
            if out.len() >= CHUNK && !sink(std::mem::take(&mut out)) {
                return Ok(Pump::Done);
            }
            if self.out.done() {
                break;
            }
            let Some(cur) = &mut self.cur else {
                let next = match self.files.pop_front() {
                    None if std::mem::take(&mut self.reopen_live) => {
                        Some(Snapshot::open(&self.live)?.ok_or_else(|| {
                            io::Error::new(
                                io::ErrorKind::NotFound,
                                format!("{} gone after a rotation", self.live.display()),
                            )
                        })?)
                    }
                    next => next,
                };
                let Some(file) = next else {
                    // The live log was missing when the reader opened (a container whose log
                    // was removed): what the rotated files held is all there is.
                    for l in self.joiner.finish() {
                        self.emit(&l, &mut out);
                    }
                    break;
                };
                let live = self.files.is_empty() && file.path == self.live;
                let path = file.path.clone();
                let (reader, ino) = file.reader(live && self.follow)?;
                self.cur = Some(Current {
                    path,
                    reader,
                    ino,
                    live,
                });
                continue;
            };
            match read_raw(&mut *cur.reader, &mut raw)? {
                Raw::Line => {
                    let line = if self.carry.is_empty() {
                        std::mem::take(&mut raw)
                    } else {
                        let mut c = std::mem::take(&mut self.carry);
                        c.extend_from_slice(&raw);
                        c
                    };
                    self.record(&line, &mut out);
                    raw = line;
                }
                Raw::Unterminated if cur.live && self.follow => {
                    self.carry.extend_from_slice(&raw);
                }
                Raw::Unterminated => {
                    let mut line = std::mem::take(&mut self.carry);
                    line.extend_from_slice(&raw);
                    self.record(&line, &mut out);
                }
                Raw::Eof if !cur.live => self.cur = None,
                Raw::Eof => {
                    if self.follow {
                        // Rotated meanwhile: the runtime writes a new file. What it wrote to
                        // this one after the end just read is read first, to this file's end.
                        let now = fs::metadata(&cur.path).map(|m| m.ino()).ok();
                        if now.is_some() && now != Some(cur.ino) {
                            cur.live = false;
                            self.reopen_live = true;
                            continue;
                        }
                        if !out.is_empty() && !sink(out) {
                            return Ok(Pump::Done);
                        }
                        return Ok(Pump::More);
                    }
                    if !self.carry.is_empty() {
                        let line = std::mem::take(&mut self.carry);
                        self.record(&line, &mut out);
                    }
                    for l in self.joiner.finish() {
                        self.emit(&l, &mut out);
                    }
                    break;
                }
            }
        }
        if !out.is_empty() {
            sink(out);
        }
        Ok(Pump::Done)
    }

    fn record(&mut self, line: &[u8], out: &mut Vec<u8>) {
        match format::parse_record(line) {
            Ok(r) => {
                if let Some(l) = self.joiner.push(&r) {
                    self.emit(&l, out);
                }
            }
            Err(e) => log::debug!(
                "{}: skipping a line that is not a CRI log record: {e}",
                self.live.display()
            ),
        }
    }
}

/// Reads a whole log at once (not following): for tests and small logs.
pub fn read_all(live: &Path, o: &LogOptions) -> io::Result<Vec<u8>> {
    let mut o = o.clone();
    o.follow = false;
    let mut r = Reader::new(live, &o)?;
    let mut all = Vec::new();
    r.pump(&mut |c| {
        all.extend_from_slice(&c);
        true
    })?;
    Ok(all)
}

/// Decompresses a gzip file (for tests and the rotation's checks).
pub fn gunzip(path: &Path) -> io::Result<Vec<u8>> {
    let mut v = Vec::new();
    flate2::read::GzDecoder::new(fs::File::open(path)?).read_to_end(&mut v)?;
    Ok(v)
}

#[cfg(test)]
mod tests {
    use super::*;

    const NOW: i64 = 1_714_566_896_000_000_000; // 2024-05-01T12:34:56Z

    #[test]
    fn queries_decode_like_the_kubelets() {
        let q = |s: &str| parse_query(s, NOW);
        assert_eq!(q("").unwrap(), LogOptions::default());
        let o = q("tailLines=5&timestamps=true&follow&previous=0&limitBytes=10&x=y").unwrap();
        assert_eq!(
            o,
            LogOptions {
                tail: Some(5),
                limit_bytes: Some(10),
                since: None,
                follow: true,
                timestamps: true,
                previous: false,
            }
        );
        assert_eq!(q("tail=7").unwrap().tail, Some(7));
        assert_eq!(q("tail=all").unwrap().tail, None);
        assert_eq!(q("tailLines=0").unwrap().tail, Some(0));
        assert_eq!(
            q("sinceSeconds=60").unwrap().since,
            Some(NOW - 60_000_000_000)
        );
        assert_eq!(
            q("sinceTime=2024-05-01T12%3A00%3A00Z").unwrap().since,
            Some(1_714_564_800_000_000_000)
        );
        assert!(!q("timestamps=FALSE").unwrap().timestamps);
        assert!(q("timestamps=yes").unwrap().timestamps);
    }

    #[test]
    fn bad_queries_are_refused_naming_the_parameter() {
        let e = |s: &str| parse_query(s, NOW).unwrap_err();
        let x = e("tailLines=abc");
        assert_eq!(x.code, 400);
        assert!(x.message.contains("tailLines") && x.message.contains("abc"));
        let x = e("tailLines=-1");
        assert_eq!(x.code, 422);
        assert_eq!(
            x.message,
            "tailLines: Invalid value: -1: must be greater than or equal to 0"
        );
        assert_eq!(e("limitBytes=0").code, 422);
        assert_eq!(e("sinceSeconds=0").code, 422);
        assert_eq!(e("sinceTime=yesterday").code, 400);
        let x = e("sinceSeconds=5&sinceTime=2024-05-01T12:00:00Z");
        assert_eq!(x.code, 422);
        assert!(x.message.contains("at most one"));
    }

    fn line(t: i64, c: &str) -> Line {
        Line {
            time: t,
            stream: Stream::Stdout,
            content: c.as_bytes().to_vec(),
        }
    }

    #[test]
    fn output_filters_prefixes_and_cuts() {
        let mut o = Output::new(&LogOptions {
            since: Some(10),
            timestamps: true,
            limit_bytes: Some(45),
            ..Default::default()
        });
        let mut buf = Vec::new();
        o.write(&line(5, "old"), &mut buf);
        assert!(buf.is_empty(), "before since");
        o.write(&line(10, "a"), &mut buf);
        assert_eq!(buf, b"1970-01-01T00:00:00.000000010Z a\n");
        o.write(&line(11, "bcdefghijklmnop"), &mut buf);
        assert_eq!(buf.len(), 45);
        assert!(
            buf.ends_with(b"a\n1970-01-01T0"),
            "{}",
            String::from_utf8_lossy(&buf)
        );
        assert!(o.done());
        o.write(&line(12, "more"), &mut buf);
        assert_eq!(buf.len(), 45);
    }

    #[test]
    fn tail_starts_in_the_right_file() {
        assert_eq!(tail_start(&[3, 4, 5], 2), (2, 3));
        assert_eq!(tail_start(&[3, 4, 5], 5), (2, 0));
        assert_eq!(tail_start(&[3, 4, 5], 6), (1, 3));
        assert_eq!(tail_start(&[3, 4, 5], 100), (0, 0));
        assert_eq!(tail_start(&[3, 4, 5], 0), (2, 5));
        assert_eq!(tail_start(&[], 3), (0, 0));
    }

    fn dir(name: &str) -> PathBuf {
        let d = std::env::temp_dir().join(format!("picolet-logread-{name}-{}", std::process::id()));
        let _ = fs::remove_dir_all(&d);
        fs::create_dir_all(&d).unwrap();
        d
    }

    fn rec(i: u32, tag: &str, c: &str) -> String {
        format!("2024-05-01T12:00:{i:02}.000000000Z stdout {tag} {c}\n")
    }

    /// A live log with two rotated files before it, the oldest gzipped: lines 0..9.
    fn rotated_log(d: &Path) -> PathBuf {
        let gz = d.join("0.log.20240501-120000.gz");
        let mut e = flate2::write::GzEncoder::new(
            fs::File::create(&gz).unwrap(),
            flate2::Compression::default(),
        );
        for i in 0..3 {
            io::Write::write_all(&mut e, rec(i, "F", &format!("line {i}")).as_bytes()).unwrap();
        }
        e.finish().unwrap();
        let mut mid = String::new();
        for i in 3..6 {
            mid.push_str(&rec(i, "F", &format!("line {i}")));
        }
        // A line split in two records, the second of which follows a garbage line.
        mid.push_str(&rec(6, "P", "line "));
        mid.push_str("garbage\n");
        mid.push_str(&rec(6, "F", "6"));
        fs::write(d.join("0.log.20240501-121000"), mid).unwrap();
        let mut live = String::new();
        for i in 7..10 {
            live.push_str(&rec(i, "F", &format!("line {i}")));
        }
        let p = d.join("0.log");
        fs::write(&p, live).unwrap();
        fs::write(d.join("0.log.20240501-110000.tmp"), "junk").unwrap();
        p
    }

    fn lines(b: &[u8]) -> Vec<String> {
        String::from_utf8_lossy(b)
            .lines()
            .map(str::to_owned)
            .collect()
    }

    #[test]
    fn reads_across_rotated_and_gzipped_files() {
        let d = dir("all");
        let live = rotated_log(&d);
        let all = lines(&read_all(&live, &LogOptions::default()).unwrap());
        let want: Vec<String> = (0..10).map(|i| format!("line {i}")).collect();
        assert_eq!(all, want);
        let t = |n| {
            lines(
                &read_all(
                    &live,
                    &LogOptions {
                        tail: Some(n),
                        ..Default::default()
                    },
                )
                .unwrap(),
            )
        };
        assert_eq!(t(2), want[8..]);
        assert_eq!(t(5), want[5..], "tail reaches into the rotated file");
        assert_eq!(t(8), want[2..], "and into the gzipped one");
        assert_eq!(t(50), want);
        assert!(t(0).is_empty());
        let since = format::parse_time(b"2024-05-01T12:00:04Z").unwrap();
        let s = lines(
            &read_all(
                &live,
                &LogOptions {
                    since: Some(since),
                    ..Default::default()
                },
            )
            .unwrap(),
        );
        assert_eq!(s, want[4..]);
        let b = read_all(
            &live,
            &LogOptions {
                limit_bytes: Some(10),
                ..Default::default()
            },
        )
        .unwrap();
        assert_eq!(b, b"line 0\nlin");
        let ts = lines(
            &read_all(
                &live,
                &LogOptions {
                    timestamps: true,
                    tail: Some(1),
                    ..Default::default()
                },
            )
            .unwrap(),
        );
        assert_eq!(ts, ["2024-05-01T12:00:09.000000000Z line 9"]);
        let _ = fs::remove_dir_all(&d);
    }

    #[test]
    fn a_missing_log_is_an_error_naming_it() {
        let d = dir("missing");
        let e = Reader::new(&d.join("3.log"), &LogOptions::default()).unwrap_err();
        assert!(e.to_string().contains("3.log"), "{e}");
        let _ = fs::remove_dir_all(&d);
    }

    #[test]
    fn following_picks_up_new_lines_unterminated_ends_and_a_rotation() {
        let d = dir("follow");
        let live = d.join("0.log");
        fs::write(&live, rec(0, "F", "a")).unwrap();
        let mut r = Reader::new(
            &live,
            &LogOptions {
                follow: true,
                ..Default::default()
            },
        )
        .unwrap();
        let mut got = Vec::new();
        let mut sink = |c: Vec<u8>| {
            got.extend_from_slice(&c);
            true
        };
        assert_eq!(r.pump(&mut sink).unwrap(), Pump::More);
        // Half a line: not shown until its newline comes.
        let mut f = fs::OpenOptions::new().append(true).open(&live).unwrap();
        io::Write::write_all(&mut f, b"2024-05-01T12:00:01Z stdout F b").unwrap();
        assert_eq!(r.pump(&mut sink).unwrap(), Pump::More);
        io::Write::write_all(&mut f, b"c\n").unwrap();
        assert_eq!(r.pump(&mut sink).unwrap(), Pump::More);
        // Rotated: the old file renamed, a new live one written.
        io::Write::write_all(&mut f, rec(2, "F", "d").as_bytes()).unwrap();
        fs::rename(&live, d.join("0.log.20240501-120000")).unwrap();
        fs::write(&live, rec(3, "F", "e")).unwrap();
        assert_eq!(r.pump(&mut sink).unwrap(), Pump::More);
        r.stop_following();
        assert_eq!(r.pump(&mut sink).unwrap(), Pump::Done);
        assert_eq!(lines(&got), ["a", "bc", "d", "e"]);
        let _ = fs::remove_dir_all(&d);
    }

    #[test]
    fn a_request_reads_the_log_as_it_was_when_it_came() {
        let d = dir("snapshot");
        let live = rotated_log(&d);
        let append = |i: u32| {
            let mut f = fs::OpenOptions::new().append(true).open(&live).unwrap();
            io::Write::write_all(&mut f, rec(i, "F", &format!("line {i}")).as_bytes()).unwrap();
        };
        let opts = |tail, follow| LogOptions {
            tail,
            follow,
            ..Default::default()
        };
        let pump_all = |r: &mut Reader| {
            let mut got = Vec::new();
            r.pump(&mut |c| {
                got.extend_from_slice(&c);
                true
            })
            .unwrap();
            lines(&got)
        };
        // Lines written between the request and the reading: not in the answer, whose tail
        // is exactly the lines asked for.
        let mut tail = Reader::new(&live, &opts(Some(2), false)).unwrap();
        let mut whole = Reader::new(&live, &opts(None, false)).unwrap();
        append(10);
        append(11);
        assert_eq!(pump_all(&mut tail), ["line 8", "line 9"]);
        let want: Vec<String> = (0..10).map(|i| format!("line {i}")).collect();
        // A rotated file compressed (and the plain one removed) before its turn comes.
        let plain = d.join("0.log.20240501-121000");
        let mut e = flate2::write::GzEncoder::new(
            fs::File::create(d.join("0.log.20240501-121000.gz")).unwrap(),
            flate2::Compression::default(),
        );
        io::Write::write_all(&mut e, &fs::read(&plain).unwrap()).unwrap();
        e.finish().unwrap();
        fs::remove_file(&plain).unwrap();
        assert_eq!(pump_all(&mut whole), want);
        // Rotated in between: the file the request saw is the one read.
        let mut tail = Reader::new(&live, &opts(Some(3), false)).unwrap();
        fs::rename(&live, d.join("0.log.20240501-130000")).unwrap();
        fs::write(&live, rec(20, "F", "line 20")).unwrap();
        assert_eq!(pump_all(&mut tail), ["line 9", "line 10", "line 11"]);
        // Following, what comes after is wanted; tailLines=0 starts at the end.
        let mut follow = Reader::new(&live, &opts(Some(0), true)).unwrap();
        assert_eq!(pump_all(&mut follow), Vec::<String>::new());
        append(21);
        assert_eq!(pump_all(&mut follow), ["line 21"]);
        let _ = fs::remove_dir_all(&d);
    }

    #[test]
    fn a_gone_receiver_ends_the_pump() {
        let d = dir("gone");
        let live = d.join("0.log");
        fs::write(&live, rec(0, "F", &"x".repeat(1000)).repeat(100)).unwrap();
        let mut r = Reader::new(
            &live,
            &LogOptions {
                follow: true,
                ..Default::default()
            },
        )
        .unwrap();
        assert_eq!(r.pump(&mut |_| false).unwrap(), Pump::Done);
        let _ = fs::remove_dir_all(&d);
    }
}
