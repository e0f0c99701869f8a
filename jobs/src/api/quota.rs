//! A byte budget for a directory reel serve fills on clients' behalf (the upload spool, the
//! staging area of recalls): bytes are taken before they are written and given back when the
//! janitor removes them, so concurrent requests can never overcommit it.
//!
//! An amount larger than the whole budget can never fit (507 Insufficient Storage); one that
//! does not fit now will once jobs finish and the janitor frees their space (503 with
//! `Retry-After`).

use std::sync::atomic::{AtomicU64, Ordering};

use axum::http::StatusCode;

use super::ApiError;

/// How long a client is told to wait when the budget is full for now.
pub const RETRY_AFTER_SECONDS: u64 = 30;

/// A byte budget: `limit`, of which `used` are taken.
#[derive(Debug)]
pub struct Quota {
    what: &'static str,
    key: &'static str,
    limit: u64,
    used: AtomicU64,
}

/// Why bytes could not be taken.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum QuotaFull {
    /// The amount alone exceeds the budget: it will never fit.
    Never {
        /// What the budget is for.
        what: &'static str,
        /// Its configuration key.
        key: &'static str,
        /// The amount asked for.
        asked: u64,
        /// The budget.
        limit: u64,
    },
    /// Not now: the budget is taken by other work.
    NotNow {
        /// What the budget is for.
        what: &'static str,
        /// The amount asked for.
        asked: u64,
        /// Bytes free now.
        free: u64,
    },
}

impl Quota {
    /// A budget of `limit` bytes of which `used` are taken already (found on disk at start).
    pub fn new(what: &'static str, key: &'static str, limit: u64, used: u64) -> Quota {
        Quota {
            what,
            key,
            limit,
            used: AtomicU64::new(used),
        }
    }

    /// Refuse an amount larger than the whole budget.
    fn ever(&self, n: u64) -> Result<(), QuotaFull> {
        if n > self.limit {
            return Err(QuotaFull::Never {
                what: self.what,
                key: self.key,
                asked: n,
                limit: self.limit,
            });
        }
        Ok(())
    }

    /// Take `n` bytes, or say why not.
    pub fn take(&self, n: u64) -> Result<(), QuotaFull> {
        self.ever(n)?;
        self.used
            .fetch_update(Ordering::AcqRel, Ordering::Acquire, |used| {
                used.checked_add(n).filter(|total| *total <= self.limit)
            })
            .map(|_| ())
            .map_err(|used| QuotaFull::NotNow {
                what: self.what,
                asked: n,
                free: self.limit.saturating_sub(used),
            })
    }

    /// Whether `n` bytes would fit now, taking nothing.
    pub fn fits(&self, n: u64) -> Result<(), QuotaFull> {
        self.ever(n)?;
        let used = self.used();
        if used.saturating_add(n) > self.limit {
            return Err(QuotaFull::NotNow {
                what: self.what,
                asked: n,
                free: self.limit.saturating_sub(used),
            });
        }
        Ok(())
    }

    /// Give `n` bytes back.
    pub fn give_back(&self, n: u64) {
        let _ = self
            .used
            .fetch_update(Ordering::AcqRel, Ordering::Acquire, |used| {
                Some(used.saturating_sub(n))
            });
    }

    /// Bytes taken now.
    pub fn used(&self) -> u64 {
        self.used.load(Ordering::Acquire)
    }

    /// The budget.
    pub fn limit(&self) -> u64 {
        self.limit
    }
}

impl QuotaFull {
    /// The answer to the client: 507 for never, 503 with `Retry-After` for not now.
    pub fn into_error(self) -> ApiError {
        match self {
            QuotaFull::Never {
                what,
                key,
                asked,
                limit,
            } => ApiError::new(
                StatusCode::INSUFFICIENT_STORAGE,
                format!("{asked} bytes will never fit in the {what}, which holds {limit} bytes in all"),
                format!("the operator raises [serve] {key}; until then this object cannot go through reel serve"),
            ),
            QuotaFull::NotNow { what, asked, free } => ApiError::new(
                StatusCode::SERVICE_UNAVAILABLE,
                format!("the {what} is full for now: {asked} bytes asked, {free} free"),
                format!("space comes back as jobs finish; retry after {RETRY_AFTER_SECONDS} s (Retry-After)"),
            )
            .retry_after(RETRY_AFTER_SECONDS),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn takes_up_to_the_limit_and_tells_never_from_not_now() {
        let q = Quota::new("spool", "spool_bytes", 100, 10);
        assert_eq!(q.take(90), Ok(()));
        assert_eq!(q.used(), 100);
        assert!(matches!(q.take(1), Err(QuotaFull::NotNow { free: 0, .. })));
        assert!(matches!(
            q.take(101),
            Err(QuotaFull::Never { limit: 100, .. })
        ));
        q.give_back(50);
        assert_eq!(q.take(50), Ok(()));
        q.give_back(1_000);
        assert_eq!(q.used(), 0, "giving back more than taken stops at zero");
    }

    #[test]
    fn concurrent_takers_never_overcommit() {
        let q = std::sync::Arc::new(Quota::new("spool", "spool_bytes", 1_000, 0));
        let handles: Vec<_> = (0..8)
            .map(|_| {
                let q = q.clone();
                std::thread::spawn(move || (0..100).filter(|_| q.take(7).is_ok()).count())
            })
            .collect();
        let taken: usize = handles.into_iter().map(|h| h.join().unwrap()).sum();
        assert_eq!(taken, 1_000 / 7);
        assert!(q.used() <= 1_000);
    }
}
