//! Per-key exponential backoff for container restarts (CrashLoopBackOff) and image pulls
//! (ImagePullBackOff): 10 s doubling to 300 s, an entry forgotten after 600 s without a failure.
//!
//! As upstream: the first restart after a crash is immediate; each later one waits the current
//! delay counted from when the container finished.

use std::collections::HashMap;
use std::time::Duration;

#[derive(Debug, Clone)]
pub struct Backoff {
    initial: Duration,
    max: Duration,
    /// key → (delay, when the delay was last raised), times in unix nanos.
    entries: HashMap<String, (Duration, i64)>,
}

fn nanos(d: Duration) -> i64 {
    i64::try_from(d.as_nanos()).unwrap_or(i64::MAX)
}

impl Backoff {
    pub fn new(initial: Duration, max: Duration) -> Self {
        Backoff {
            initial,
            max,
            entries: HashMap::new(),
        }
    }

    /// The kubelet's container restart backoff: 10 s to 300 s.
    pub fn container_restarts() -> Self {
        Backoff::new(Duration::from_secs(10), Duration::from_secs(300))
    }

    fn expired(&self, now: i64, last: i64) -> bool {
        now.saturating_sub(last) > nanos(self.max) * 2
    }

    /// When the backoff started at `since` ends, if it has not yet: `Some(remaining)`.
    pub fn remaining(&self, key: &str, since: i64, now: i64) -> Option<Duration> {
        let &(delay, last) = self.entries.get(key)?;
        if self.expired(now, last) {
            return None;
        }
        let end = since.saturating_add(nanos(delay));
        // Never more than the delay itself, even if the wall clock stepped back since `since`.
        (now < end).then(|| Duration::from_nanos(u64::try_from(end - now).unwrap_or(0)).min(delay))
    }

    /// How long `key` stays blocked counted from its last recorded attempt (image pulls).
    pub fn remaining_since_last(&self, key: &str, now: i64) -> Option<Duration> {
        let &(_, last) = self.entries.get(key)?;
        self.remaining(key, last, now)
    }

    /// Records an attempt at `now`: the first sets the initial delay, each later one doubles it.
    pub fn next(&mut self, key: &str, now: i64) {
        let d = match self.entries.get(key) {
            Some(&(d, last)) if !self.expired(now, last) => (d * 2).min(self.max),
            _ => self.initial,
        };
        self.entries.insert(key.to_owned(), (d, now));
    }

    /// The current delay for `key`, if any.
    pub fn delay(&self, key: &str) -> Option<Duration> {
        self.entries.get(key).map(|e| e.0)
    }

    /// Drops entries not raised for twice the maximum delay.
    pub fn gc(&mut self, now: i64) {
        let limit = nanos(self.max) * 2;
        self.entries
            .retain(|_, (_, last)| now.saturating_sub(*last) <= limit);
    }

    /// Forgets one key (an image that could be pulled after all).
    pub fn forget(&mut self, key: &str) {
        self.entries.remove(key);
    }

    /// Forgets every key starting with `prefix` (a pod that went away).
    pub fn forget_prefix(&mut self, prefix: &str) {
        self.entries.retain(|k, _| !k.starts_with(prefix));
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const S: i64 = 1_000_000_000;

    #[test]
    fn first_attempt_is_free_then_delays_double_to_cap() {
        let mut b = Backoff::container_restarts();
        assert_eq!(b.remaining("k", 0, 0), None);
        b.next("k", 0);
        assert_eq!(b.delay("k"), Some(Duration::from_secs(10)));
        let mut want = 10;
        for i in 1..10 {
            b.next("k", i * 20 * S);
            want = (want * 2).min(300);
            assert_eq!(b.delay("k"), Some(Duration::from_secs(want)), "step {i}");
        }
        assert_eq!(b.delay("k"), Some(Duration::from_secs(300)));
    }

    #[test]
    fn remaining_counts_from_finish_time() {
        let mut b = Backoff::container_restarts();
        b.next("k", 100 * S);
        // finished at 105 s: blocked until 115 s
        assert_eq!(
            b.remaining("k", 105 * S, 106 * S),
            Some(Duration::from_secs(9))
        );
        assert_eq!(b.remaining("k", 105 * S, 115 * S), None);
        assert_eq!(b.remaining("other", 105 * S, 106 * S), None);
        // The wall clock stepped back an hour: still at most the delay.
        assert_eq!(
            b.remaining("k", 105 * S, 105 * S - 3600 * S),
            Some(Duration::from_secs(10))
        );
    }

    #[test]
    fn forgotten_after_600s_quiet() {
        let mut b = Backoff::container_restarts();
        b.next("k", 0);
        b.next("k", S);
        assert_eq!(b.delay("k"), Some(Duration::from_secs(20)));
        b.next("k", 602 * S);
        assert_eq!(b.delay("k"), Some(Duration::from_secs(10)));
        b.gc(1300 * S);
        assert_eq!(b.delay("k"), None);
    }

    #[test]
    fn forget_prefix_drops_a_pods_keys() {
        let mut b = Backoff::container_restarts();
        b.next("uid1/a", 0);
        b.next("uid2/a", 0);
        b.forget_prefix("uid1/");
        assert_eq!(b.delay("uid1/a"), None);
        assert!(b.delay("uid2/a").is_some());
    }
}
