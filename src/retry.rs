//! Retries that keep failing, per object: when the next attempt is due, and what the log says.
//!
//! The delays are the kubelet's per-key backoff ([`Backoff`], as for crash loops and image
//! pulls): each failure doubles the object's delay up to a cap, a success or a change of the
//! object forgets it. The log follows the state, not the attempts: the first failure is one
//! warning with its cause, a failure with another cause is one more, repeats are counted and
//! summed up at most once per [`SUMMARY_EVERY`] ("still failing after N attempts: cause"), and
//! the success that ends a run of failures is one info line. A stuck object thus costs a few
//! lines an hour, not one per attempt.
//!
//! Times are unix nanoseconds from [`crate::rt::now_nanos`], the one clock, so tests drive the
//! tracker with a fake clock or plain numbers.

use std::collections::HashMap;
use std::time::Duration;

use crate::kuberuntime::backoff::Backoff;

/// At most one summary line per object this often while it keeps failing.
pub const SUMMARY_EVERY: Duration = Duration::from_secs(600);

/// What a call logged.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Report {
    /// The first failure of the object: a warning with the cause.
    First,
    /// A failure for another cause than the last one: a warning with the new cause.
    Changed,
    /// A repeat of the same failure: counted, nothing logged.
    Counted,
    /// A repeat, and the summary was due: "still failing after N attempts".
    Summary,
    /// The success after failures: one info line.
    Recovered,
    /// A success with no failure before: nothing logged.
    Quiet,
}

#[derive(Debug, Clone)]
struct Entry {
    /// The last cause, as printed.
    cause: String,
    /// Failed attempts since the first failure.
    attempts: u64,
    /// When a line about this object was last logged.
    reported: i64,
    /// When it last failed.
    last: i64,
    /// The shapes of the causes seen in this run of failures: causes that take turns (an
    /// image pull's ErrImagePull and ImagePullBackOff) are reported once each.
    seen: Vec<String>,
    /// Nothing about it was logged above debug level (a wait that ended by itself): its end is
    /// not logged above that either.
    quiet: bool,
}

/// At most this many causes are remembered per object.
const SEEN_MAX: usize = 8;

/// The failures of one kind of action (removing sandboxes, say), by object.
#[derive(Debug, Clone)]
pub struct Failures {
    backoff: Backoff,
    max: Duration,
    entries: HashMap<String, Entry>,
}

fn nanos(d: Duration) -> i64 {
    i64::try_from(d.as_nanos()).unwrap_or(i64::MAX)
}

/// A cause with its numbers and identifiers folded, so that "sandbox 3f2a...: cni not
/// initialized" and "sandbox 9bc1...: cni not initialized" are one cause.
fn shape(cause: &str) -> String {
    let mut out = String::with_capacity(cause.len());
    let mut word = String::new();
    let flush = |word: &mut String, out: &mut String| {
        if word.bytes().any(|b| b.is_ascii_digit()) {
            out.push('#');
        } else {
            out.push_str(word);
        }
        word.clear();
    };
    for c in cause.chars() {
        if c.is_ascii_alphanumeric() || c == '-' || c == '_' {
            word.push(c);
        } else {
            flush(&mut word, &mut out);
            out.push(c);
        }
    }
    flush(&mut word, &mut out);
    out
}

impl Failures {
    /// Delays from `initial`, doubling to `max`.
    pub fn new(initial: Duration, max: Duration) -> Failures {
        Failures {
            backoff: Backoff::new(initial, max),
            max,
            entries: HashMap::new(),
        }
    }

    /// Removals and clean-ups: 2 s (the housekeeping period) doubling to 5 min.
    pub fn cleanups() -> Failures {
        Failures::new(Duration::from_secs(2), Duration::from_secs(300))
    }

    /// Whether `key` is failing.
    pub fn failing(&self, key: &str) -> bool {
        self.entries.contains_key(key)
    }

    /// Whether an attempt on `key` is due at `now`: it has no failure, or its delay has passed
    /// since the last one.
    pub fn due(&self, key: &str, now: i64) -> bool {
        !self.entries.contains_key(key) || self.backoff.remaining_since_last(key, now).is_none()
    }

    /// The delay before the next attempt on `key`, if it is failing.
    pub fn delay(&self, key: &str) -> Option<Duration> {
        self.entries
            .contains_key(key)
            .then(|| self.backoff.delay(key))
            .flatten()
    }

    /// Failed attempts on `key` since its first failure.
    pub fn attempts(&self, key: &str) -> u64 {
        self.entries.get(key).map_or(0, |e| e.attempts)
    }

    /// Records a failed attempt on `key` (`what` names the action and the object, as the log
    /// line starts) and logs it if the state changed or the summary is due.
    pub fn failed(&mut self, key: &str, what: &str, cause: &str, now: i64) -> Report {
        self.record(key, what, cause, now, log::Level::Warn)
    }

    /// As [`Failures::failed`], for a wait that is expected to end by itself (a pod whose
    /// service account token is still being requested): the first attempt is logged at debug
    /// level only; a change of cause and the summary of one that lasts are warnings as ever.
    pub fn waiting(&mut self, key: &str, what: &str, cause: &str, now: i64) -> Report {
        self.record(key, what, cause, now, log::Level::Debug)
    }

    fn record(
        &mut self,
        key: &str,
        what: &str,
        cause: &str,
        now: i64,
        first: log::Level,
    ) -> Report {
        self.backoff.next(key, now);
        let report = match self.entries.get_mut(key) {
            None => {
                log::log!(
                    first,
                    "{what}: {cause} (retried with backoff; repeats are counted)"
                );
                self.entries.insert(
                    key.to_owned(),
                    Entry {
                        cause: cause.to_owned(),
                        attempts: 1,
                        reported: now,
                        last: now,
                        seen: vec![shape(cause)],
                        quiet: first == log::Level::Debug,
                    },
                );
                return Report::First;
            }
            Some(e) => {
                e.attempts += 1;
                e.last = now;
                let sh = shape(cause);
                if !e.seen.contains(&sh) {
                    if e.seen.len() == SEEN_MAX {
                        e.seen.remove(0);
                    }
                    e.seen.push(sh);
                    log::warn!(
                        "{what}: {cause} (after {} failed attempts: {})",
                        e.attempts - 1,
                        e.cause
                    );
                    e.reported = now;
                    e.quiet = false;
                    Report::Changed
                } else if now.saturating_sub(e.reported) >= nanos(SUMMARY_EVERY) {
                    log::warn!(
                        "{what}: still failing after {} attempts: {cause}",
                        e.attempts
                    );
                    e.reported = now;
                    e.quiet = false;
                    Report::Summary
                } else {
                    Report::Counted
                }
            }
        };
        if let Some(e) = self.entries.get_mut(key) {
            e.cause = cause.to_owned();
        }
        report
    }

    /// Records a successful attempt on `key`: forgets its failures, and logs the recovery if it
    /// had any.
    pub fn succeeded(&mut self, key: &str, what: &str) -> Report {
        self.backoff.forget(key);
        match self.entries.remove(key) {
            Some(e) => {
                let level = if e.quiet {
                    log::Level::Debug
                } else {
                    log::Level::Info
                };
                log::log!(
                    level,
                    "{what}: succeeded after {} failed attempts",
                    e.attempts
                );
                Report::Recovered
            }
            None => Report::Quiet,
        }
    }

    /// Makes the next attempt on `key` due at once, its delay starting afresh from the initial
    /// one, while keeping its count: what it was waiting for came back (the runtime's network
    /// is ready), so the retry should not sit out a delay, and its success still says after how
    /// many failed attempts.
    pub fn retry_now(&mut self, key: &str) {
        self.backoff.forget(key);
    }

    /// Forgets `key` without a line: the object changed or went away.
    pub fn forget(&mut self, key: &str) {
        self.backoff.forget(key);
        self.entries.remove(key);
    }

    /// Forgets, without a line, the objects not tried for twice the longest delay: they went
    /// away without a last attempt (the pod holding them was removed).
    pub fn gc(&mut self, now: i64) {
        let limit = nanos(self.max).saturating_mul(2);
        self.backoff.gc(now);
        self.entries
            .retain(|_, e| now.saturating_sub(e.last) <= limit);
    }

    /// How many objects are failing.
    #[cfg(test)]
    pub fn len(&self) -> usize {
        self.entries.len()
    }
}

/// Lines that repeat (events, which the apiserver aggregates by object, reason and message):
/// the first is printed, repeats are counted, and the line is printed again with the count at
/// most once per [`SUMMARY_EVERY`].
#[derive(Debug, Default)]
pub struct Repeats {
    /// key (with its message's shape) -> (repeats since last printed, when last printed, when
    /// last seen).
    entries: HashMap<String, (u64, i64, i64)>,
    added: u64,
}

impl Repeats {
    /// Whether to print a line for `key` with `message` at `now`: `Some(0)` the first time,
    /// `Some(n)` when the summary of `n` repeats not printed is due, `None` to stay quiet.
    pub fn print(&mut self, key: &str, message: &str, now: i64) -> Option<u64> {
        let k = format!("{key}\0{}", shape(message));
        match self.entries.get_mut(&k) {
            Some((n, printed, last)) => {
                *last = now;
                if now.saturating_sub(*printed) >= nanos(SUMMARY_EVERY) {
                    let repeats = *n;
                    (*n, *printed) = (0, now);
                    Some(repeats)
                } else {
                    *n += 1;
                    None
                }
            }
            None => {
                self.added += 1;
                if self.added.is_multiple_of(64) {
                    // Lines not seen for twice the summary period start afresh.
                    let limit = nanos(SUMMARY_EVERY).saturating_mul(2);
                    self.entries
                        .retain(|_, (_, _, last)| now.saturating_sub(*last) <= limit);
                }
                self.entries.insert(k, (0, now, now));
                Some(0)
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const S: i64 = 1_000_000_000;

    #[test]
    fn first_failure_warns_repeats_are_counted_and_summed_up_every_ten_minutes() {
        let mut f = Failures::cleanups();
        let mut t = 0;
        assert!(f.due("a", t));
        assert_eq!(f.failed("a", "removing a", "busy", t), Report::First);
        let mut reports = Vec::new();
        // An hour of attempts, each as soon as it is due.
        while t < 3600 * S {
            t += S;
            if f.due("a", t) {
                reports.push((t, f.failed("a", "removing a", "busy", t)));
            }
        }
        let summaries: Vec<i64> = reports
            .iter()
            .filter(|(_, r)| *r == Report::Summary)
            .map(|(t, _)| *t)
            .collect();
        assert!(
            reports
                .iter()
                .all(|(_, r)| matches!(r, Report::Counted | Report::Summary))
        );
        // At most one summary per ten minutes: six in the hour at most, and at least five.
        assert!((5..=6).contains(&summaries.len()), "{summaries:?}");
        for w in summaries.windows(2) {
            assert!(w[1] - w[0] >= nanos(SUMMARY_EVERY), "{summaries:?}");
        }
        // The delays doubled to the cap: 2+4+...+256 then every 300 s, about 20 attempts.
        assert!(reports.len() < 25, "{} attempts", reports.len());
        assert_eq!(f.delay("a"), Some(Duration::from_secs(300)));
        assert_eq!(f.attempts("a"), 1 + reports.len() as u64);
    }

    #[test]
    fn a_wait_backs_off_and_is_summed_up_as_a_failure_is() {
        let mut w = Failures::cleanups();
        let mut f = Failures::cleanups();
        assert_eq!(w.waiting("a", "x", "no token yet", 0), Report::First);
        assert_eq!(f.failed("a", "x", "no token yet", 0), Report::First);
        let mut t = 0;
        while t < 1200 * S {
            t += S;
            assert_eq!(w.due("a", t), f.due("a", t));
            if w.due("a", t) {
                assert_eq!(
                    w.waiting("a", "x", "no token yet", t),
                    f.failed("a", "x", "no token yet", t)
                );
            }
        }
        assert_eq!(w.attempts("a"), f.attempts("a"));
        // A wait that turns into another cause is reported as a change.
        assert_eq!(
            w.waiting("a", "x", "token request refused", t + 300 * S),
            Report::Changed
        );
    }

    #[test]
    fn backoff_doubles_from_the_first_failure_and_a_success_resets_it() {
        let mut f = Failures::cleanups();
        f.failed("a", "x", "busy", 0);
        assert!(!f.due("a", S));
        assert!(f.due("a", 2 * S));
        f.failed("a", "x", "busy", 2 * S);
        assert!(!f.due("a", 5 * S));
        assert!(f.due("a", 6 * S));
        assert!(f.due("b", 0), "other objects are not held back");
        assert_eq!(f.succeeded("a", "x"), Report::Recovered);
        assert!(f.due("a", 6 * S));
        assert_eq!(f.delay("a"), None);
        assert_eq!(f.succeeded("a", "x"), Report::Quiet);
        // After the reset the next failure is a first one again, with the initial delay.
        assert_eq!(f.failed("a", "x", "busy", 7 * S), Report::First);
        assert_eq!(f.delay("a"), Some(Duration::from_secs(2)));
    }

    #[test]
    fn another_cause_is_reported_the_same_cause_with_other_ids_is_not() {
        let mut f = Failures::cleanups();
        f.failed(
            "a",
            "x",
            "sandbox 3f2a9b11c0: cni plugin not initialized",
            0,
        );
        assert_eq!(
            f.failed(
                "a",
                "x",
                "sandbox 77bc01ffe9: cni plugin not initialized",
                2 * S
            ),
            Report::Counted
        );
        assert_eq!(
            f.failed("a", "x", "device or resource busy", 6 * S),
            Report::Changed
        );
        assert_eq!(f.attempts("a"), 3);
    }

    #[test]
    fn forgetting_an_object_that_changed_or_went_away_is_silent() {
        let mut f = Failures::cleanups();
        f.failed("a", "x", "busy", 0);
        f.failed("b", "x", "busy", 0);
        f.forget("a");
        assert!(f.due("a", S));
        assert_eq!(f.failed("a", "x", "busy", S), Report::First);
        assert_eq!(f.len(), 2);
        // Not tried for twice the cap: gone without a line.
        f.gc(600 * S);
        assert_eq!(f.len(), 2);
        f.gc(600 * S + 1);
        assert_eq!(f.len(), 1);
        f.gc(601 * S + 1);
        assert_eq!(f.len(), 0);
        assert!(f.due("b", 601 * S));
    }

    #[test]
    fn retry_now_ends_the_wait_and_keeps_the_count() {
        let clock = crate::rt::FakeClock::install();
        let mut f = Failures::cleanups();
        let mut now = crate::rt::now_nanos();
        for _ in 0..6 {
            f.failed("a", "x", "busy", now);
            clock.advance(f.delay("a").unwrap());
            now = crate::rt::now_nanos();
        }
        f.failed("a", "x", "busy", now);
        assert_eq!(f.delay("a"), Some(Duration::from_secs(128)));
        clock.advance(Duration::from_secs(1));
        assert!(!f.due("a", crate::rt::now_nanos()));
        f.retry_now("a");
        assert!(f.due("a", crate::rt::now_nanos()));
        assert!(f.failing("a"));
        assert_eq!(f.attempts("a"), 7);
        // A failure after it waits the initial delay again, and is counted, not printed.
        assert_eq!(
            f.failed("a", "x", "busy", crate::rt::now_nanos()),
            Report::Counted
        );
        assert_eq!(f.delay("a"), Some(Duration::from_secs(2)));
        assert_eq!(f.succeeded("a", "x"), Report::Recovered);
    }

    #[test]
    fn driven_by_the_fake_clock() {
        let clock = crate::rt::FakeClock::install();
        let mut f = Failures::cleanups();
        f.failed("a", "x", "busy", crate::rt::now_nanos());
        clock.advance(Duration::from_secs(1));
        assert!(!f.due("a", crate::rt::now_nanos()));
        clock.advance(Duration::from_secs(1));
        assert!(f.due("a", crate::rt::now_nanos()));
    }

    #[test]
    fn causes_that_take_turns_are_reported_once_each() {
        let mut f = Failures::cleanups();
        f.failed("p", "x", "ErrImagePull: no route", 0);
        assert_eq!(
            f.failed("p", "x", "ImagePullBackOff: back-off", S),
            Report::Changed
        );
        for i in 2..20 {
            let cause = if i % 2 == 0 {
                "ErrImagePull: no route"
            } else {
                "ImagePullBackOff: back-off"
            };
            assert_eq!(f.failed("p", "x", cause, i * S), Report::Counted, "{i}");
        }
    }

    #[test]
    fn repeated_lines_are_printed_once_then_summed_up_every_ten_minutes() {
        let mut r = Repeats::default();
        assert_eq!(
            r.print("pod a BackOff", "back-off pulling 127.0.0.1:5/x", 0),
            Some(0)
        );
        assert_eq!(
            r.print("pod b BackOff", "back-off pulling 127.0.0.1:5/x", 0),
            Some(0)
        );
        let printed: Vec<(i64, u64)> = (1..=3600)
            .filter_map(|t| {
                r.print("pod a BackOff", "back-off pulling 127.0.0.1:7/x", t * S)
                    .map(|n| (t, n))
            })
            .collect();
        assert_eq!(
            printed,
            vec![
                (600, 599),
                (1200, 599),
                (1800, 599),
                (2400, 599),
                (3000, 599),
                (3600, 599)
            ]
        );
        assert_eq!(
            r.print("pod a BackOff", "another message", 3600 * S),
            Some(0)
        );
    }

    #[test]
    fn shape_folds_numbers_and_ids_only() {
        assert_eq!(
            shape("pod 1b2c-33 at 12:01: no such file"),
            "pod # at #:#: no such file"
        );
    }
}
