//! Retry delays: exponential, capped, persisted as the job's `not_before`.

use std::time::Duration;

/// How long to wait before the next attempt.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Backoff {
    /// Delay after the first failed attempt.
    pub base: Duration,
    /// Longest delay.
    pub max: Duration,
}

impl Backoff {
    /// Delay after `attempts` failed attempts (1 = the first failure): base · 2^(attempts-1), capped.
    pub fn delay(&self, attempts: u32) -> Duration {
        let shift = attempts.saturating_sub(1).min(30);
        let ms = (self.base.as_millis() as u64).saturating_mul(1u64 << shift);
        Duration::from_millis(ms).min(self.max)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn doubles_and_caps() {
        let b = Backoff {
            base: Duration::from_secs(10),
            max: Duration::from_secs(60),
        };
        assert_eq!(b.delay(1), Duration::from_secs(10));
        assert_eq!(b.delay(2), Duration::from_secs(20));
        assert_eq!(b.delay(3), Duration::from_secs(40));
        assert_eq!(b.delay(4), Duration::from_secs(60));
        assert_eq!(b.delay(500), Duration::from_secs(60));
        assert_eq!(b.delay(0), Duration::from_secs(10));
    }
}
