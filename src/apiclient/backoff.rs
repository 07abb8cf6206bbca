//! The backoff every loop against the apiserver (and the tunnel) shares: full jitter below a
//! doubling cap, from a small random source seeded per process and node, so that a fleet does
//! not retry in step.

use std::time::Duration;

const BACKOFF_BASE: Duration = Duration::from_millis(1000);
const BACKOFF_CAP: Duration = Duration::from_secs(30);

/// A small random source for jitter (splitmix64), seeded per process and node.
#[derive(Debug, Clone)]
pub struct Jitter(u64);

impl Jitter {
    pub fn new(seed: &str) -> Jitter {
        let t = u64::try_from(crate::rt::now_nanos()).unwrap_or(0);
        Jitter(crate::hash::fnv1a64(&[seed.as_bytes()]) ^ t ^ u64::from(std::process::id()))
    }

    pub fn next_u64(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9E37_79B9_7F4A_7C15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        z ^ (z >> 31)
    }

    /// A duration uniformly in `[0, max)`.
    pub fn below(&mut self, max: Duration) -> Duration {
        let ms = u64::try_from(max.as_millis()).unwrap_or(u64::MAX).max(1);
        Duration::from_millis(self.next_u64() % ms)
    }
}

/// Full-jitter exponential backoff: the n-th consecutive failure waits a random time below
/// `min(cap, base * 2^n)`.
pub fn backoff_delay(failures: u32, jitter: &mut Jitter) -> Duration {
    let window = BACKOFF_BASE
        .checked_mul(1u32 << failures.min(16))
        .unwrap_or(BACKOFF_CAP)
        .min(BACKOFF_CAP);
    jitter.below(window)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn backoff_is_jittered_below_a_doubling_cap() {
        let mut j = Jitter::new("node-a");
        for failures in 0..10 {
            let cap = BACKOFF_BASE
                .checked_mul(1 << failures)
                .unwrap()
                .min(BACKOFF_CAP);
            for _ in 0..50 {
                assert!(backoff_delay(failures, &mut j) < cap);
            }
        }
        // Two nodes do not wait the same times.
        let (mut a, mut b) = (Jitter(1), Jitter(2));
        let da: Vec<_> = (0..5).map(|_| backoff_delay(5, &mut a)).collect();
        let db: Vec<_> = (0..5).map(|_| backoff_delay(5, &mut b)).collect();
        assert_ne!(da, db);
    }
}
