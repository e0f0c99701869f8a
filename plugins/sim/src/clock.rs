//! The simulator's clocks: INSTANT (modelled time is only accounted) and SCALED (the caller
//! sleeps the modelled time divided by the scale).
//!
//! SCALED pacing is by debt: every call adds its modelled time / scale to a debt; the pacer
//! sleeps only once the debt reaches a millisecond, sleeps exactly the debt (never rounded up)
//! and subtracts what it actually slept, so many sub-millisecond calls add up to the right
//! total and an oversleep is paid back by the next calls.

use std::sync::Arc;
use std::time::{Duration, Instant};

/// Milliseconds since the Unix epoch (wall clock), stamped on every event of the log so a
/// test can line the library's history up with its own.
pub fn unix_ms() -> u64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_millis() as u64)
        .unwrap_or(0)
}

/// Where the pacer reads time and sleeps: the real clock, or a fake one in tests.
pub trait TimeSource: Send + Sync {
    /// Monotonic time since an arbitrary origin.
    fn now(&self) -> Duration;
    /// Sleep for `d`.
    fn sleep(&self, d: Duration);
}

/// The real monotonic clock and `std::thread::sleep`.
#[derive(Debug)]
pub struct RealTime {
    origin: Instant,
}

impl RealTime {
    /// A real clock with its origin now.
    pub fn new() -> Self {
        RealTime {
            origin: Instant::now(),
        }
    }
}

impl Default for RealTime {
    fn default() -> Self {
        Self::new()
    }
}

impl TimeSource for RealTime {
    fn now(&self) -> Duration {
        self.origin.elapsed()
    }
    fn sleep(&self, d: Duration) {
        std::thread::sleep(d);
    }
}

/// Smallest debt the pacer sleeps for; below it the debt is carried to the next call.
pub const MIN_SLEEP: Duration = Duration::from_millis(1);
/// Largest credit an oversleep may leave (so a long stall does not let later calls run free).
const MAX_CREDIT_NS: f64 = 50_000_000.0;

/// Paces one handle's calls under the SCALED clock; does nothing under INSTANT.
pub struct Pacer {
    scale: Option<f64>,
    debt_ns: f64,
    time: Arc<dyn TimeSource>,
    slept: Duration,
}

impl std::fmt::Debug for Pacer {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Pacer")
            .field("scale", &self.scale)
            .field("debt_ns", &self.debt_ns)
            .field("slept", &self.slept)
            .finish()
    }
}

impl Pacer {
    /// An INSTANT pacer: never sleeps.
    pub fn instant() -> Self {
        Pacer {
            scale: None,
            debt_ns: 0.0,
            time: Arc::new(RealTime::new()),
            slept: Duration::ZERO,
        }
    }

    /// A SCALED pacer: modelled time / `scale` is slept on `time`.
    pub fn scaled(scale: f64, time: Arc<dyn TimeSource>) -> Self {
        Pacer {
            scale: Some(scale),
            debt_ns: 0.0,
            time,
            slept: Duration::ZERO,
        }
    }

    /// Account `modelled_ns` of modelled time, sleeping if the debt reached [`MIN_SLEEP`].
    pub fn pace(&mut self, modelled_ns: u64) {
        let Some(scale) = self.scale else {
            return;
        };
        self.debt_ns += modelled_ns as f64 / scale;
        if self.debt_ns < MIN_SLEEP.as_nanos() as f64 {
            return;
        }
        let want = Duration::from_nanos(self.debt_ns as u64);
        let t0 = self.time.now();
        self.time.sleep(want);
        let slept = self.time.now().saturating_sub(t0);
        self.slept += slept;
        self.debt_ns = (self.debt_ns - slept.as_nanos() as f64).max(-MAX_CREDIT_NS);
    }

    /// Debt not yet slept (negative: credit from an oversleep), in nanoseconds.
    pub fn debt_ns(&self) -> f64 {
        self.debt_ns
    }

    /// Total wall time slept so far.
    pub fn slept(&self) -> Duration {
        self.slept
    }
}

#[cfg(test)]
pub(crate) mod fake {
    use super::*;
    use std::sync::Mutex;

    /// A fake clock: sleeping advances it by the request plus a fixed oversleep.
    pub struct FakeTime {
        pub now: Mutex<Duration>,
        pub sleeps: Mutex<Vec<Duration>>,
        pub oversleep: Duration,
    }

    impl FakeTime {
        pub fn new(oversleep: Duration) -> Arc<Self> {
            Arc::new(FakeTime {
                now: Mutex::new(Duration::ZERO),
                sleeps: Mutex::new(Vec::new()),
                oversleep,
            })
        }
    }

    impl TimeSource for FakeTime {
        fn now(&self) -> Duration {
            *self.now.lock().unwrap()
        }
        fn sleep(&self, d: Duration) {
            self.sleeps.lock().unwrap().push(d);
            *self.now.lock().unwrap() += d + self.oversleep;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::fake::FakeTime;
    use super::*;

    #[test]
    fn instant_never_sleeps() {
        let mut p = Pacer::instant();
        p.pace(3_600_000_000_000);
        assert_eq!(p.slept(), Duration::ZERO);
    }

    #[test]
    fn sub_millisecond_calls_accumulate_without_rounding_up() {
        let t = FakeTime::new(Duration::ZERO);
        let mut p = Pacer::scaled(20.0, t.clone());
        // 1000 calls of 0.5 ms modelled = 25 µs wall each: 25 ms in all.
        for _ in 0..1000 {
            p.pace(500_000);
        }
        let sleeps = t.sleeps.lock().unwrap().clone();
        let total: Duration = sleeps.iter().sum();
        // Every sleep happened at a debt of at least 1 ms, and the total is the exact debt
        // minus what is still carried (under 1 ms).
        assert!(sleeps.iter().all(|s| *s >= MIN_SLEEP), "{sleeps:?}");
        assert_eq!(sleeps.len(), 25);
        let owed = total.as_nanos() as f64 + p.debt_ns();
        assert!((owed - 25_000_000.0).abs() < 1.0, "owed {owed}");
        assert!(p.debt_ns() < 1_000_000.0);
    }

    #[test]
    fn oversleep_is_paid_back() {
        let t = FakeTime::new(Duration::from_micros(400));
        let mut p = Pacer::scaled(1.0, t.clone());
        p.pace(2_000_000); // sleep 2 ms, oversleep 0.4 ms → credit 0.4 ms
        assert!((p.debt_ns() + 400_000.0).abs() < 1.0);
        p.pace(1_000_000); // debt 0.6 ms: carried, no sleep
        assert_eq!(t.sleeps.lock().unwrap().len(), 1);
        p.pace(1_000_000); // debt 1.6 ms: sleep 1.6 ms
        let sleeps = t.sleeps.lock().unwrap().clone();
        assert_eq!(sleeps[1], Duration::from_micros(1600));
    }

    #[test]
    fn scale_divides_modelled_time() {
        let t = FakeTime::new(Duration::ZERO);
        let mut p = Pacer::scaled(20.0, t.clone());
        p.pace(60_000_000_000);
        assert_eq!(p.slept(), Duration::from_secs(3));
    }
}
