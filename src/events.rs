//! Kubernetes Events, as the kubelet records them: a reason and a message about a pod, one of
//! its containers, or the node (Pulling, Created, Started, Killing, Unhealthy, BackOff, ...).
//!
//! [`record`] is called where the event happens, on the executor thread. It always writes the
//! log line; when the node is joined to a cluster a [`Recorder`] is installed for the thread and
//! the event also goes through upstream's correlation (a spam filter per object, aggregation of
//! similar messages, and deduplication: a repeated event bumps `count` and `lastTimestamp` of the
//! object already sent instead of making a new one) into a bounded queue in memory (the oldest
//! write dropped first; nothing is written to flash), which a task sends to the apiserver as it
//! answers, and keeps while it does not.

use std::cell::{Cell, RefCell};
use std::collections::{HashMap, HashSet, VecDeque};
use std::rc::Rc;

use serde_json::{Value, json};

/// Normal or Warning.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Type {
    Normal,
    Warning,
}

impl Type {
    fn as_str(self) -> &'static str {
        match self {
            Type::Normal => "Normal",
            Type::Warning => "Warning",
        }
    }
}

/// The object an event is about (`involvedObject`).
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct ObjectRef {
    pub kind: &'static str,
    pub namespace: String,
    pub name: String,
    pub uid: String,
    /// `spec.containers{name}` (or `initContainers`, `ephemeralContainers`) for a container's events.
    pub field_path: String,
}

impl ObjectRef {
    pub fn pod(p: &crate::api::Pod) -> ObjectRef {
        ObjectRef {
            kind: "Pod",
            namespace: if p.metadata.namespace.is_empty() {
                "default".into()
            } else {
                p.metadata.namespace.clone()
            },
            name: p.metadata.name.clone(),
            uid: p.metadata.uid.clone(),
            field_path: String::new(),
        }
    }

    /// A container of the pod, by name (an init container's path when it is one).
    pub fn container(p: &crate::api::Pod, name: &str) -> ObjectRef {
        let is = |cs: &[crate::api::Container]| cs.iter().any(|c| c.name == name);
        let list = if is(&p.spec.init_containers) {
            "initContainers"
        } else if is(&p.spec.ephemeral_containers) {
            "ephemeralContainers"
        } else {
            "containers"
        };
        ObjectRef {
            field_path: format!("spec.{list}{{{name}}}"),
            ..ObjectRef::pod(p)
        }
    }

    /// The node; its events live in namespace `default`, its name standing in for a UID, as
    /// the kubelet's.
    pub fn node(name: &str) -> ObjectRef {
        ObjectRef {
            kind: "Node",
            namespace: "default".into(),
            name: name.into(),
            uid: name.into(),
            field_path: String::new(),
        }
    }

    fn key(&self) -> String {
        format!(
            "{}/{}/{}/{}/{}",
            self.kind, self.namespace, self.name, self.uid, self.field_path
        )
    }
}

thread_local! {
    static RECORDER: RefCell<Option<Rc<Recorder>>> = const { RefCell::new(None) };
    /// The events logged on this thread, for their repeats.
    static LOGGED: RefCell<crate::retry::Repeats> = RefCell::new(crate::retry::Repeats::default());
}

/// Records an event: the log line always, and the apiserver's object when a recorder is
/// installed on this thread.
pub fn record(obj: &ObjectRef, t: Type, reason: &str, message: &str) {
    let what = if obj.field_path.is_empty() {
        format!("{} {}/{}", obj.kind, obj.namespace, obj.name)
    } else {
        format!(
            "{} {}/{} {}",
            obj.kind, obj.namespace, obj.name, obj.field_path
        )
    };
    // As the apiserver's copy aggregates repeats (same object, reason and message), so does
    // the log: the first is printed, repeats are counted, and a warning's are summed up at
    // most every 10 minutes (a normal event's count is the apiserver's to show).
    let key = format!("{what}\0{reason}");
    let repeats = LOGGED.with(|l| l.borrow_mut().print(&key, message, crate::rt::now_nanos()));
    if let Some(n) = repeats
        && (n == 0 || matches!(t, Type::Warning))
    {
        let more = if n > 0 {
            format!(" ({n} more times since last logged)")
        } else {
            String::new()
        };
        match t {
            Type::Normal => log::info!("{reason}: {message} ({what}){more}"),
            Type::Warning => log::warn!("{reason}: {message} ({what}){more}"),
        }
    }
    let r = RECORDER.with(|r| r.borrow().clone());
    if let Some(r) = r {
        r.observe(obj, t, reason, message, crate::rt::now_nanos());
    }
}

/// Sends an event to the apiserver without a log line, for what logs in its own words (the
/// image preload's lines, or a [`crate::retry::Failures`] keeping a repeated failure quiet).
/// Returns false when no recorder is installed on this thread (the node is not joined).
pub fn emit(obj: &ObjectRef, t: Type, reason: &str, message: &str) -> bool {
    let r = RECORDER.with(|r| r.borrow().clone());
    match r {
        Some(r) => {
            r.observe(obj, t, reason, message, crate::rt::now_nanos());
            true
        }
        None => false,
    }
}

/// Installs the recorder of this thread (the executor's), replacing any.
pub fn install(r: Rc<Recorder>) {
    RECORDER.with(|x| *x.borrow_mut() = Some(r));
}

/// Upstream's correlation constants.
const SPAM_BURST: f64 = 25.0;
/// One token every 5 minutes.
const SPAM_REFILL_NANOS: f64 = 300e9;
const AGGREGATE_MAX_DISTINCT: usize = 10;
const AGGREGATE_WINDOW_NANOS: i64 = 600_000_000_000;
const AGGREGATE_PREFIX: &str = "(combined from similar events): ";
/// Objects and keys remembered; past this the oldest half of the memory is forgotten.
const MEMORY_MAX: usize = 4096;
/// Writes waiting for the apiserver.
pub const QUEUE_MAX: usize = 1000;

/// One write to the apiserver.
#[derive(Debug, Clone, PartialEq)]
pub enum Write {
    /// A new Event object.
    Create(Value),
    /// A seen one again: its count, last time and message; `first` is the object as first
    /// created, to create it again if the apiserver no longer has it.
    Patch {
        namespace: String,
        name: String,
        count: u64,
        last: String,
        message: String,
        first: std::sync::Arc<Value>,
    },
}

/// Sets what a repeat changes in an Event object.
fn repeat(v: &mut Value, count: u64, last: &str, message: &str) {
    v["count"] = json!(count);
    v["lastTimestamp"] = json!(last);
    v["message"] = json!(message);
}

impl Write {
    fn name(&self) -> (&str, &str) {
        match self {
            Write::Create(v) => (
                v["metadata"]["namespace"].as_str().unwrap_or(""),
                v["metadata"]["name"].as_str().unwrap_or(""),
            ),
            Write::Patch {
                namespace, name, ..
            } => (namespace, name),
        }
    }

    /// A patch as the create of the whole object, under the same name, with the patch's
    /// count, time and message (for an event the apiserver expired meanwhile).
    #[cfg(any(test, feature = "apiserver"))]
    fn recreated(&self) -> Option<Write> {
        let Write::Patch {
            count,
            last,
            message,
            first,
            ..
        } = self
        else {
            return None;
        };
        let mut v = (**first).clone();
        repeat(&mut v, *count, last, message);
        Some(Write::Create(v))
    }
}

struct Seen {
    namespace: String,
    name: String,
    count: u64,
    at: i64,
    first: std::sync::Arc<Value>,
}

/// Upstream's correlation, pure: what each event becomes (a create, a patch, or nothing).
#[derive(Default)]
pub struct Correlator {
    /// Spam filter: tokens and the time they were counted, per object.
    buckets: HashMap<String, (f64, i64)>,
    /// Aggregation: the distinct messages per (object, type, reason) and when counting began.
    similar: HashMap<String, (HashSet<String>, i64)>,
    /// Deduplication: the object sent for each (object, type, reason, message).
    seen: HashMap<String, Seen>,
}

impl Correlator {
    pub fn observe(
        &mut self,
        host: &str,
        obj: &ObjectRef,
        t: Type,
        reason: &str,
        message: &str,
        now: i64,
    ) -> Option<Write> {
        if self.buckets.len() > MEMORY_MAX {
            self.buckets.clear();
        }
        if self.similar.len() > MEMORY_MAX {
            self.similar.clear();
        }
        if self.seen.len() > MEMORY_MAX {
            let mut by_age: Vec<i64> = self.seen.values().map(|s| s.at).collect();
            by_age.sort_unstable();
            let cut = by_age[by_age.len() / 2];
            self.seen.retain(|_, s| s.at > cut);
        }
        // Spam filter: a token bucket per source and object.
        let okey = obj.key();
        let (tokens, last) = self
            .buckets
            .get(&okey)
            .copied()
            .unwrap_or((SPAM_BURST, now));
        #[allow(clippy::cast_precision_loss, reason = "nanoseconds as a rate")]
        let tokens = (tokens + (now - last).max(0) as f64 / SPAM_REFILL_NANOS).min(SPAM_BURST);
        if tokens < 1.0 {
            self.buckets.insert(okey, (tokens, now));
            return None;
        }
        self.buckets.insert(okey.clone(), (tokens - 1.0, now));
        // Aggregation: past ten distinct messages of one kind in ten minutes, one event stands
        // for them all.
        let akey = format!("{okey}/{}/{reason}", t.as_str());
        let entry = self
            .similar
            .entry(akey.clone())
            .or_insert_with(|| (HashSet::new(), now));
        if now - entry.1 > AGGREGATE_WINDOW_NANOS {
            *entry = (HashSet::new(), now);
        }
        entry.0.insert(message.to_owned());
        let (key, message) = if entry.0.len() >= AGGREGATE_MAX_DISTINCT {
            (akey, format!("{AGGREGATE_PREFIX}{message}"))
        } else {
            (format!("{akey}/{message}"), message.to_owned())
        };
        let at = crate::api::rfc3339(now);
        if let Some(s) = self.seen.get_mut(&key) {
            s.count += 1;
            s.at = now;
            return Some(Write::Patch {
                namespace: s.namespace.clone(),
                name: s.name.clone(),
                count: s.count,
                last: at,
                message,
                first: s.first.clone(),
            });
        }
        let name = format!("{}.{:x}", obj.name, now);
        let mut involved = json!({
            "kind": obj.kind,
            "name": obj.name,
            "uid": obj.uid,
            "apiVersion": "v1",
        });
        if obj.kind != "Node" {
            involved["namespace"] = json!(obj.namespace);
        }
        if !obj.field_path.is_empty() {
            involved["fieldPath"] = json!(obj.field_path);
        }
        let event = json!({
            "apiVersion": "v1",
            "kind": "Event",
            "metadata": {"name": name, "namespace": obj.namespace},
            "involvedObject": involved,
            "reason": reason,
            "message": message,
            "source": {"component": "kubelet", "host": host},
            "firstTimestamp": at,
            "lastTimestamp": at,
            "count": 1,
            "type": t.as_str(),
            "reportingComponent": "kubelet",
            "reportingInstance": host,
        });
        self.seen.insert(
            key,
            Seen {
                namespace: obj.namespace.clone(),
                name,
                count: 1,
                at: now,
                first: std::sync::Arc::new(event.clone()),
            },
        );
        Some(Write::Create(event))
    }
}

/// The node's recorder: correlation, and the writes waiting to be sent.
pub struct Recorder {
    host: String,
    correlator: RefCell<Correlator>,
    queue: RefCell<VecDeque<Write>>,
    wake: (async_channel::Sender<()>, async_channel::Receiver<()>),
    /// Writes dropped because the queue was full (the oldest first).
    pub dropped: Cell<u64>,
}

impl Recorder {
    pub fn new(host: &str) -> Recorder {
        Recorder {
            host: host.to_owned(),
            correlator: RefCell::default(),
            queue: RefCell::default(),
            wake: async_channel::bounded(1),
            dropped: Cell::new(0),
        }
    }

    fn observe(&self, obj: &ObjectRef, t: Type, reason: &str, message: &str, now: i64) {
        let Some(w) = self
            .correlator
            .borrow_mut()
            .observe(&self.host, obj, t, reason, message, now)
        else {
            return;
        };
        self.push(w);
    }

    /// Queues a write; a patch of an object still waiting to be created updates that create.
    pub fn push(&self, w: Write) {
        let mut q = self.queue.borrow_mut();
        if let Write::Patch {
            namespace,
            name,
            count,
            last,
            message,
            ..
        } = &w
            && let Some(Write::Create(v)) = q
                .iter_mut()
                .find(|x| matches!(x, Write::Create(_)) && x.name() == (namespace, name))
        {
            repeat(v, *count, last, message);
            return;
        }
        if q.len() >= QUEUE_MAX {
            q.pop_front();
            self.dropped.set(self.dropped.get() + 1);
        }
        q.push_back(w);
        let _ = self.wake.0.try_send(());
    }

    /// How many writes wait.
    pub fn pending(&self) -> usize {
        self.queue.borrow().len()
    }

    /// The reason and message of every event waiting to be created, for tests.
    #[cfg(test)]
    pub fn queued(&self) -> Vec<(String, String)> {
        self.queue
            .borrow()
            .iter()
            .filter_map(|w| match w {
                Write::Create(v) => Some((
                    v["reason"].as_str().unwrap_or_default().to_owned(),
                    v["message"].as_str().unwrap_or_default().to_owned(),
                )),
                _ => None,
            })
            .collect()
    }

    #[cfg(any(test, feature = "apiserver"))]
    fn pop(&self) -> Option<Write> {
        self.queue.borrow_mut().pop_front()
    }

    #[cfg(feature = "apiserver")]
    fn push_front(&self, w: Write) {
        self.queue.borrow_mut().push_front(w);
    }
}

/// Sends the recorder's writes as the apiserver answers: a write that got no answer (or a 5xx)
/// is kept and tried again after a back-off (1 s doubling to 30 s); one the apiserver refused
/// is dropped, except a patch of an event it no longer has (events expire after an hour),
/// which is created again.
#[cfg(feature = "apiserver")]
pub async fn run(recorder: Rc<Recorder>, client: crate::apiclient::Client) {
    use std::time::Duration;
    let mut backoff = Duration::from_secs(1);
    // Refusals are logged by state change: the first with its cause, then counted.
    let mut refused = crate::retry::Failures::cleanups();
    const WHAT: &str = "writing events to the apiserver";
    loop {
        let Some(w) = recorder.pop() else {
            let _ = recorder.wake.1.recv().await;
            continue;
        };
        let c = client.clone();
        let (w, res) = crate::rt::unblock(move || {
            let r = send(&c, &w);
            (w, r)
        })
        .await;
        match res {
            Ok(()) => {
                backoff = Duration::from_secs(1);
                refused.succeeded(WHAT, WHAT);
            }
            Err(e) if e.is_transport() || e.is_server_error() => {
                log::debug!("events: {e}; kept for later");
                recorder.push_front(w);
                crate::rt::sleep(backoff).await;
                backoff = (backoff * 2).min(Duration::from_secs(30));
            }
            Err(e) if e.is_not_found() => {
                if let Some(again) = w.recreated() {
                    let (ns, name) = w.name();
                    log::debug!("events: {ns}/{name} expired; created again");
                    recorder.push(again);
                }
            }
            Err(e) => {
                refused.failed(WHAT, WHAT, &format!("{e}; dropped"), crate::rt::now_nanos());
            }
        }
    }
}

#[cfg(feature = "apiserver")]
fn send(c: &crate::apiclient::Client, w: &Write) -> Result<(), crate::apiclient::ApiError> {
    match w {
        Write::Create(v) => {
            let ns = v["metadata"]["namespace"].as_str().unwrap_or("default");
            // In protobuf under `contentType` (about 40 % smaller), as the kubelet sends them.
            let body = c
                .protobuf()
                .then(|| crate::apiclient::protobuf::encode_event(v))
                .flatten()
                .map(|b| (crate::apiclient::protobuf::MEDIA_TYPE, b))
                .unwrap_or_else(|| {
                    (
                        "application/json",
                        serde_json::to_vec(v).unwrap_or_default(),
                    )
                });
            match c.write(
                "POST",
                &format!("/api/v1/namespaces/{ns}/events"),
                Some(body),
            ) {
                Err(e) if e.is_conflict() => Ok(()),
                r => r,
            }
        }
        Write::Patch {
            namespace,
            name,
            count,
            last,
            message,
            ..
        } => {
            let body = json!({"count": count, "lastTimestamp": last, "message": message});
            c.write(
                "PATCH",
                &format!("/api/v1/namespaces/{namespace}/events/{name}"),
                Some((
                    "application/strategic-merge-patch+json",
                    serde_json::to_vec(&body).unwrap_or_default(),
                )),
            )
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn pod_ref() -> ObjectRef {
        ObjectRef {
            kind: "Pod",
            namespace: "default".into(),
            name: "web".into(),
            uid: "u1".into(),
            field_path: "spec.containers{main}".into(),
        }
    }

    const S: i64 = 1_000_000_000;

    #[test]
    fn a_repeated_event_bumps_the_count_of_the_object_sent() {
        let mut c = Correlator::default();
        let o = pod_ref();
        let first = c
            .observe("n", &o, Type::Warning, "BackOff", "back-off", 100 * S)
            .unwrap();
        let Write::Create(v) = &first else {
            panic!("{first:?}")
        };
        assert_eq!(v["count"], 1);
        assert_eq!(v["involvedObject"]["fieldPath"], "spec.containers{main}");
        assert_eq!(v["involvedObject"]["namespace"], "default");
        assert_eq!(v["source"]["host"], "n");
        let name = v["metadata"]["name"].as_str().unwrap().to_owned();
        assert!(name.starts_with("web."), "{name}");
        let again = c
            .observe("n", &o, Type::Warning, "BackOff", "back-off", 110 * S)
            .unwrap();
        assert_eq!(
            again,
            Write::Patch {
                namespace: "default".into(),
                name,
                count: 2,
                last: crate::api::rfc3339(110 * S),
                message: "back-off".into(),
                first: std::sync::Arc::new(v.clone()),
            }
        );
        // Expired in the apiserver: the whole object again, same name, the repeat's figures.
        let Some(Write::Create(re)) = again.recreated() else {
            panic!("{again:?}")
        };
        assert_eq!(re["metadata"]["name"], v["metadata"]["name"]);
        assert_eq!(re["involvedObject"], v["involvedObject"]);
        assert_eq!(re["reason"], "BackOff");
        assert_eq!(re["type"], "Warning");
        assert_eq!(re["count"], 2);
        assert_eq!(re["firstTimestamp"], crate::api::rfc3339(100 * S));
        assert_eq!(re["lastTimestamp"], crate::api::rfc3339(110 * S));
        // Another reason is another object.
        assert!(matches!(
            c.observe(
                "n",
                &o,
                Type::Normal,
                "Started",
                "Started container main",
                111 * S
            ),
            Some(Write::Create(_))
        ));
    }

    #[test]
    fn ten_distinct_messages_aggregate_into_one_event() {
        let mut c = Correlator::default();
        let o = pod_ref();
        let mut creates = 0;
        let mut last = None;
        for i in 0..14 {
            let w = c
                .observe(
                    "n",
                    &o,
                    Type::Warning,
                    "Unhealthy",
                    &format!("probe failed: {i}"),
                    i * S,
                )
                .unwrap();
            if matches!(w, Write::Create(_)) {
                creates += 1;
            }
            last = Some(w);
        }
        // Nine distinct events, then one aggregate that later ones bump.
        assert_eq!(creates, 10);
        let Some(Write::Patch { count, message, .. }) = last else {
            panic!("{last:?}")
        };
        assert_eq!(count, 5);
        assert_eq!(message, format!("{AGGREGATE_PREFIX}probe failed: 13"));
    }

    #[test]
    fn the_spam_filter_allows_a_burst_then_one_event_every_five_minutes() {
        let mut c = Correlator::default();
        let o = pod_ref();
        let sent = (0..40)
            .filter(|i| {
                c.observe("n", &o, Type::Normal, "Pulled", "same", i * S / 10)
                    .is_some()
            })
            .count();
        assert_eq!(sent, 25);
        assert!(
            c.observe("n", &o, Type::Normal, "Pulled", "same", 60 * S)
                .is_none()
        );
        assert!(
            c.observe("n", &o, Type::Normal, "Pulled", "same", 305 * S)
                .is_some()
        );
        // Another object has a bucket of its own.
        let other = ObjectRef::node("n");
        assert!(
            c.observe("n", &other, Type::Normal, "NodeReady", "ready", 61 * S)
                .is_some()
        );
    }

    #[test]
    fn send_goes_to_the_recorder_only_when_one_is_installed() {
        let o = ObjectRef::node("n");
        // Each test runs on a thread of its own: none is installed on this one yet.
        assert!(!emit(&o, Type::Normal, "Preloaded", "app.tar"));
        let r = Rc::new(Recorder::new("n"));
        install(r.clone());
        assert!(emit(
            &o,
            Type::Warning,
            "FailedPreload",
            "bad.tar: truncated"
        ));
        let Some(Write::Create(v)) = r.pop() else {
            panic!("one event queued")
        };
        assert_eq!(v["reason"], "FailedPreload");
        assert_eq!(v["type"], "Warning");
        assert_eq!(v["involvedObject"]["kind"], "Node");
        RECORDER.with(|x| *x.borrow_mut() = None);
    }

    #[test]
    fn the_queue_is_bounded_and_patches_fold_into_waiting_creates() {
        let r = Recorder::new("n");
        let o = pod_ref();
        r.observe(&o, Type::Warning, "BackOff", "back-off", 10 * S);
        r.observe(&o, Type::Warning, "BackOff", "back-off", 20 * S);
        assert_eq!(r.pending(), 1, "the patch updated the create still waiting");
        let Some(Write::Create(v)) = r.pop() else {
            panic!()
        };
        assert_eq!(v["count"], 2);
        assert_eq!(v["lastTimestamp"], crate::api::rfc3339(20 * S));
        for i in 0..(QUEUE_MAX + 5) {
            r.push(Write::Patch {
                namespace: "default".into(),
                name: format!("e{i}"),
                count: 2,
                last: String::new(),
                message: String::new(),
                first: std::sync::Arc::default(),
            });
        }
        assert_eq!(r.pending(), QUEUE_MAX);
        assert_eq!(r.dropped.get(), 5);
        assert_eq!(
            r.pop().unwrap().name(),
            ("default", "e5"),
            "the oldest went first"
        );
    }
}
