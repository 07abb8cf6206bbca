//! List and watch of one collection, for every watched kind (the node's pods, the cluster's
//! Services): listed once, then watched from the list's resourceVersion with bookmarks on
//! (unless [`Client::set_watch_bookmarks`] turned them off, for a metered link).
//!
//! Fleet behaviour: a watch that breaks resumes from the last resourceVersion it saw (bookmarks
//! keep it fresh), so a short outage costs one watch request, not a list; only 410 Gone lists
//! again, and a watch that keeps expiring backs off instead of listing in a loop. Reconnects
//! wait a random time up to a doubling cap ("full jitter", 1 s to 30 s), so a fleet whose
//! apiserver restarts comes back spread out; watch lengths are randomised (5 to 10 min) so their
//! renewals spread too. A poll interval replaces the watch with a plain list every interval, for
//! links whose middleboxes cut long connections.
//!
//! Each watched kind runs [`run`] on a thread of its own (a watch blocks in a read for minutes).

use std::io::{BufRead, BufReader, Read};
use std::time::Duration;

use super::backoff::{Jitter, backoff_delay};
use super::{ApiError, Client};

/// Longest line of a watch stream (one event: an object is at most ~1.5 MB in etcd).
pub const MAX_EVENT: usize = 4 << 20;
const WATCH_MIN: Duration = Duration::from_secs(300);

/// What a watch event asks for.
#[derive(Debug, PartialEq, Eq)]
pub enum Applied {
    /// The set changed.
    Changed,
    /// Nothing to tell (a bookmark, or an event that changes nothing kept).
    Unchanged,
    /// The watch's resourceVersion is too old: list again.
    Gone,
    /// The server sent an error event.
    Error(String),
}

/// Why a line of a watch stream, or the stream itself, was not taken.
#[derive(Debug)]
pub enum WatchError {
    /// The line is beyond the decoders' cost limits (checked before parsing).
    Limits(crate::limits::LimitError),
    /// The line is not a watch event's JSON.
    Json(serde_json::Error),
    /// The frame is not a watch event in protobuf.
    Protobuf(String),
    /// An event type the API does not send.
    UnknownType(String),
    /// The set refused the event's object.
    Object {
        /// The event's type (`ADDED`, `MODIFIED`, `DELETED`).
        event: String,
        source: ObjectError,
    },
    /// Reading the stream failed.
    Read(std::io::Error),
    /// A line longer than [`MAX_EVENT`].
    TooLong,
}

impl std::fmt::Display for WatchError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            WatchError::Limits(e) => write!(f, "watch event: {e}"),
            WatchError::Json(e) => write!(f, "watch event: {e}"),
            WatchError::Protobuf(e) => write!(f, "watch event: {e}"),
            WatchError::UnknownType(t) => write!(f, "watch event of unknown type {t:?}"),
            WatchError::Object { event, source } => write!(f, "watch event {event}: {source}"),
            WatchError::Read(e) => write!(f, "reading the watch: {e}"),
            WatchError::TooLong => write!(f, "watch event larger than {MAX_EVENT} bytes"),
        }
    }
}

impl std::error::Error for WatchError {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        match self {
            WatchError::Limits(e) => Some(e),
            WatchError::Json(e) => Some(e),
            WatchError::Object { source, .. } => Some(source),
            WatchError::Read(e) => Some(e),
            WatchError::UnknownType(_) | WatchError::TooLong | WatchError::Protobuf(_) => None,
        }
    }
}

/// Why a watched set refused a list or an object, naming where in it.
#[derive(Debug)]
pub enum ObjectError {
    /// A list's field (`items`) is not an array.
    NotAnArray(&'static str),
    /// Item `index` of a list's `field` was refused.
    Item {
        field: &'static str,
        index: usize,
        source: Box<ObjectError>,
    },
    /// The object does not decode; `what` ("pod", "service") names it where nothing else does.
    Decode {
        what: Option<&'static str>,
        source: Box<dyn std::error::Error + Send + Sync>,
    },
    /// A field the object must have is empty.
    Empty {
        what: &'static str,
        field: &'static str,
    },
}

impl ObjectError {
    /// Item `index` of `field`.
    pub fn item(field: &'static str, index: usize, e: ObjectError) -> ObjectError {
        ObjectError::Item {
            field,
            index,
            source: Box::new(e),
        }
    }
}

impl std::fmt::Display for ObjectError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            ObjectError::NotAnArray(field) => write!(f, "{field}: not an array"),
            ObjectError::Item {
                field,
                index,
                source,
            } => write!(f, "{field}[{index}]: {source}"),
            ObjectError::Decode {
                what: Some(what),
                source,
            } => write!(f, "{what}: {source}"),
            ObjectError::Decode { what: None, source } => write!(f, "{source}"),
            ObjectError::Empty { what, field } => write!(f, "{what}: {field}: empty"),
        }
    }
}

impl std::error::Error for ObjectError {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        match self {
            ObjectError::Item { source, .. } => Some(source.as_ref()),
            ObjectError::Decode { source, .. } => Some(source.as_ref()),
            ObjectError::NotAnArray(_) | ObjectError::Empty { .. } => None,
        }
    }
}

/// The kind of an object event.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Event {
    Added,
    Modified,
    Deleted,
}

/// A set of objects kept by list and watch.
pub trait Watched {
    /// What is watched, for log lines ("pods", "services").
    fn what(&self) -> &'static str;
    /// The collection's path with `query` (`&watch=true...`, may be empty) appended; the path
    /// carries a `?` already.
    fn path(&self, query: &str) -> String;
    /// Replaces the set with a list's `items` (the list as decoded JSON).
    fn replace(&mut self, list: serde_json::Value) -> Result<(), ObjectError>;
    /// Applies one object event; true when the set changed.
    fn apply_object(
        &mut self,
        event: Event,
        object: serde_json::Value,
    ) -> Result<bool, ObjectError>;
    /// The resourceVersion to resume a watch from.
    fn resource_version(&mut self) -> &mut String;
    /// How many objects the set holds (for log lines).
    fn count(&self) -> usize;
    /// Whether the set holds Pods, which are listed and watched in the protobuf encoding when
    /// the client's content type is protobuf ([`super::pod_proto`]).
    fn pods(&self) -> bool {
        false
    }
}

#[derive(Debug, serde::Deserialize)]
struct WatchEvent {
    #[serde(rename = "type")]
    kind: String,
    object: serde_json::Value,
}

/// Applies one line of a watch stream to `set`.
pub fn apply<W: Watched + ?Sized>(set: &mut W, line: &[u8]) -> Result<Applied, WatchError> {
    crate::limits::check(
        line,
        crate::limits::Syntax::Json,
        &crate::limits::Limits::API,
    )
    .map_err(WatchError::Limits)?;
    let ev: WatchEvent = serde_json::from_slice(line).map_err(WatchError::Json)?;
    apply_event(set, ev.kind, ev.object)
}

/// Applies one watch event, its type and its object's JSON, to `set`.
pub fn apply_event<W: Watched + ?Sized>(
    set: &mut W,
    kind: String,
    object: serde_json::Value,
) -> Result<Applied, WatchError> {
    let ev = WatchEvent { kind, object };
    let rv = ev
        .object
        .pointer("/metadata/resourceVersion")
        .and_then(|v| v.as_str())
        .map(str::to_owned);
    let event = match ev.kind.as_str() {
        "BOOKMARK" => {
            if let Some(rv) = rv {
                *set.resource_version() = rv;
            }
            return Ok(Applied::Unchanged);
        }
        "ERROR" => {
            let code = ev.object.get("code").and_then(|c| c.as_u64());
            let msg = ev
                .object
                .get("message")
                .and_then(|m| m.as_str())
                .unwrap_or("")
                .to_owned();
            return Ok(if code == Some(410) {
                Applied::Gone
            } else {
                Applied::Error(msg)
            });
        }
        "ADDED" => Event::Added,
        "MODIFIED" => Event::Modified,
        "DELETED" => Event::Deleted,
        other => return Err(WatchError::UnknownType(other.to_owned())),
    };
    if let Some(rv) = rv {
        *set.resource_version() = rv;
    }
    let changed = set
        .apply_object(event, ev.object)
        .map_err(|source| WatchError::Object {
            event: ev.kind,
            source,
        })?;
    Ok(if changed {
        Applied::Changed
    } else {
        Applied::Unchanged
    })
}

/// Reads a watch stream line by line, applying each event and calling `emit` after each change
/// (it returns false to stop); returns how the stream ended.
pub fn read_watch<W: Watched + ?Sized>(
    body: impl Read,
    set: &mut W,
    emit: &mut dyn FnMut(&W) -> bool,
) -> Result<Applied, WatchError> {
    let mut r = BufReader::new(body);
    let mut line = Vec::new();
    loop {
        line.clear();
        let n = (&mut r)
            .take(MAX_EVENT as u64 + 1)
            .read_until(b'\n', &mut line)
            .map_err(WatchError::Read)?;
        if n == 0 {
            return Ok(Applied::Unchanged);
        }
        if line.len() > MAX_EVENT {
            return Err(WatchError::TooLong);
        }
        if line.iter().all(u8::is_ascii_whitespace) {
            continue;
        }
        if let Some(end) = after(apply(set, &line)?, set, emit) {
            return Ok(end);
        }
    }
}

/// What a reader of a watch does after an event: `emit` after a change, and go on (`None`) or
/// end with what the watch came to.
fn after<W: ?Sized>(
    applied: Applied,
    set: &W,
    emit: &mut dyn FnMut(&W) -> bool,
) -> Option<Applied> {
    match applied {
        Applied::Changed => (!emit(set)).then_some(Applied::Unchanged),
        Applied::Unchanged => None,
        end @ (Applied::Gone | Applied::Error(_)) => Some(end),
    }
}

/// [`read_watch`] of a watch stream in the protobuf encoding: frames of a 4-byte big-endian
/// length and a `WatchEvent` ([`super::pod_proto::watch_event`]).
pub fn read_watch_frames<W: Watched + ?Sized>(
    body: impl Read,
    set: &mut W,
    emit: &mut dyn FnMut(&W) -> bool,
) -> Result<Applied, WatchError> {
    let mut r = BufReader::new(body);
    let mut frame = Vec::new();
    loop {
        let mut len = [0u8; 4];
        match r.read_exact(&mut len) {
            Ok(()) => {}
            Err(e) if e.kind() == std::io::ErrorKind::UnexpectedEof => {
                return Ok(Applied::Unchanged);
            }
            Err(e) => return Err(WatchError::Read(e)),
        }
        let len = u32::from_be_bytes(len) as usize;
        if len > MAX_EVENT {
            return Err(WatchError::TooLong);
        }
        frame.resize(len, 0);
        r.read_exact(&mut frame).map_err(WatchError::Read)?;
        let (kind, object) = super::pod_proto::watch_event(&frame).map_err(WatchError::Protobuf)?;
        if let Some(end) = after(apply_event(set, kind, object)?, set, emit) {
            return Ok(end);
        }
    }
}

/// How [`run`] goes about it.
#[derive(Debug, Clone)]
pub struct Options {
    /// List every this long instead of watching.
    pub poll_interval: Option<Duration>,
    /// What log lines start with ("api source").
    pub log_prefix: &'static str,
    /// Said once, after the refusal, when the apiserver refuses the set (403).
    pub forbidden_hint: String,
}

/// Lists and watches `set` on the calling thread, calling `emit` after every list and every
/// change, until `emit` returns false or `alive` does.
pub fn run<W: Watched>(
    client: &Client,
    set: &mut W,
    opts: &Options,
    jitter: &mut Jitter,
    alive: &dyn Fn() -> bool,
    emit: &mut dyn FnMut(&W) -> bool,
) {
    let mut listed = false;
    let mut failures = 0u32;
    let mut forbidden_told = false;
    let stop = std::cell::Cell::new(false);
    let mut emit = |set: &W| {
        let go = emit(set);
        stop.set(stop.get() || !go);
        go
    };
    loop {
        if !alive() {
            return;
        }
        let result = round(client, opts, set, &mut listed, jitter, &mut emit);
        if stop.get() {
            return;
        }
        match result {
            // A watch that delivered events, or ended by its own timeout.
            Ok(true) => failures = 0,
            // Nothing came through (410 right after a list, say): back off as for an error,
            // so an apiserver whose cache lags never meets a tight list loop.
            Ok(false) => {
                failures = failures.saturating_add(1);
                std::thread::sleep(backoff_delay(failures, jitter));
            }
            Err(e) => {
                if e.is_gone() {
                    listed = false;
                }
                failures = failures.saturating_add(1);
                let wait = backoff_delay(failures, jitter);
                let (prefix, what) = (opts.log_prefix, set.what());
                if e.is_forbidden() {
                    if !forbidden_told {
                        log::error!(
                            "{prefix}: the apiserver refuses this node's {what} ({e}); {}",
                            opts.forbidden_hint
                        );
                        forbidden_told = true;
                    }
                } else {
                    log::warn!("{prefix}: {e}; retrying in {wait:?}");
                }
                std::thread::sleep(wait);
            }
        }
    }
}

/// One list (when needed) and one watch. `Ok(true)` when the round made progress.
fn round<W: Watched>(
    client: &Client,
    opts: &Options,
    set: &mut W,
    listed: &mut bool,
    jitter: &mut Jitter,
    emit: &mut dyn FnMut(&W) -> bool,
) -> Result<bool, ApiError> {
    let (prefix, what) = (opts.log_prefix, set.what());
    if !*listed || opts.poll_interval.is_some() {
        let path = set.path("");
        let list: serde_json::Value = if set.pods() {
            client.pod_list(&path)?
        } else {
            client.json("GET", &path, None)?
        };
        set.replace(list)
            .map_err(|e| ApiError::decode(format!("GET {path}"), e))?;
        *listed = true;
        log::debug!(
            "{prefix}: listed {} {what} at {}",
            set.count(),
            set.resource_version()
        );
        if !emit(set) {
            return Ok(true);
        }
        if let Some(every) = opts.poll_interval {
            std::thread::sleep(every);
            return Ok(true);
        }
    }
    let length = WATCH_MIN + jitter.below(WATCH_MIN);
    let q = watch_query(set.resource_version(), length, client.watch_bookmarks());
    let started = set.resource_version().clone();
    let idle = length + Duration::from_secs(30);
    let read = if set.pods() {
        let (framed, body) = client.pod_stream(&set.path(&q), idle)?;
        if framed {
            read_watch_frames(body, set, emit)
        } else {
            read_watch(body, set, emit)
        }
    } else {
        read_watch(client.stream(&set.path(&q), idle)?, set, emit)
    };
    match read {
        Ok(Applied::Gone) => {
            log::info!(
                "{prefix}: resourceVersion {} expired; listing again",
                set.resource_version()
            );
            *listed = false;
            // Progress only if the watch moved on before it expired.
            Ok(*set.resource_version() != started)
        }
        Ok(Applied::Error(m)) => Err(ApiError::decode("watch", m)),
        Ok(_) => Ok(true),
        Err(e) => Err(ApiError::decode("watch", e)),
    }
}

/// The query of a watch from `resource_version` for `length`, with bookmarks or without.
fn watch_query(resource_version: &str, length: Duration, bookmarks: bool) -> String {
    format!(
        "&watch=true{}&resourceVersion={resource_version}&timeoutSeconds={}",
        if bookmarks {
            "&allowWatchBookmarks=true"
        } else {
            ""
        },
        length.as_secs()
    )
}

/// The `resourceVersion` of a list's `metadata`, taken out of it.
pub fn list_resource_version(list: &serde_json::Value) -> String {
    list.pointer("/metadata/resourceVersion")
        .and_then(|v| v.as_str())
        .unwrap_or_default()
        .to_owned()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_watch_asks_for_bookmarks_only_when_they_are_on() {
        let length = Duration::from_secs(420);
        assert_eq!(
            watch_query("17", length, true),
            "&watch=true&allowWatchBookmarks=true&resourceVersion=17&timeoutSeconds=420"
        );
        let q = watch_query("17", length, false);
        assert_eq!(q, "&watch=true&resourceVersion=17&timeoutSeconds=420");
        assert!(!q.contains("Bookmarks"));
    }
}
