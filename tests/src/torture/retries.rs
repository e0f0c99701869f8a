//! The `retries-back-off` invariant: no tape request is tried more often than the workers'
//! `max_attempts`, and none is tried again before its backoff ran out. A request that loops
//! (a drive mounting for it, failing, and mounting again at once) shows here as too many
//! attempts or too little time between its first and its last.
//!
//! Read from the store the workers share (`reel_tape_requests`): a request's `attempts` counts
//! its failed attempts (a `reel jobs retry` sets it back to 0; an attempt lost to a dropped
//! connection, a cancel or a lost lease is not counted), and after failed attempt `k` it waits
//! `backoff.delay(k)` before it can be claimed again. So a request with `a` failed attempts
//! lived at least the sum of the first `a - 1` delays between its creation and its last
//! update (the last failure may have ended it).

use std::time::Duration;

use reel_queue::Backoff;

/// One request as the store keeps it.
#[derive(Debug, Clone)]
pub struct RequestRow {
    /// Its id.
    pub id: i64,
    /// Failed attempts counted.
    pub attempts: u32,
    /// Created, Unix ms.
    pub created_ms: i64,
    /// Last changed, Unix ms.
    pub updated_ms: i64,
    /// Its state.
    pub state: String,
}

/// What the check saw.
#[derive(Debug, Default, Clone, serde::Serialize)]
pub struct RetryTally {
    /// Requests in the store.
    pub requests: u64,
    /// Requests with at least one failed attempt.
    pub retried: u64,
    /// The most failed attempts of one request.
    pub most_attempts: u32,
}

/// Check every request; one line per request that broke the rule.
pub fn check(
    rows: &[RequestRow],
    max_attempts: u32,
    backoff: Backoff,
) -> (RetryTally, Vec<String>) {
    let mut t = RetryTally {
        requests: rows.len() as u64,
        ..Default::default()
    };
    let mut problems = Vec::new();
    for r in rows {
        if r.attempts > 0 {
            t.retried += 1;
        }
        t.most_attempts = t.most_attempts.max(r.attempts);
        if r.attempts > max_attempts {
            problems.push(format!(
                "tape request {} ({}) has {} failed attempts, more than max_attempts {max_attempts}",
                r.id, r.state, r.attempts
            ));
        }
        let waited: Duration = (1..r.attempts).map(|k| backoff.delay(k)).sum();
        let lived = r.updated_ms.saturating_sub(r.created_ms).max(0) as u128;
        if lived < waited.as_millis() {
            problems.push(format!(
                "tape request {} ({}) failed {} times within {lived} ms of its creation; its \
                 backoff alone is {} ms: it was retried without waiting",
                r.id,
                r.state,
                r.attempts,
                waited.as_millis()
            ));
        }
    }
    (t, problems)
}

/// Every tape request in the store at `url` (`sqlite:PATH` or `postgres://…`).
pub async fn load(url: &str) -> Result<Vec<RequestRow>, sqlx::Error> {
    const Q: &str =
        "SELECT id, attempts, created_ms, updated_ms, state FROM reel_tape_requests ORDER BY id";
    type Row = (i64, i64, i64, i64, String);
    let rows: Vec<Row> = if url.starts_with("sqlite:") {
        let pool = sqlx::SqlitePool::connect(url).await?;
        let r = sqlx::query_as(Q).fetch_all(&pool).await;
        pool.close().await;
        r?
    } else {
        let pool = sqlx::PgPool::connect(url).await?;
        let r: Vec<(i64, i32, i64, i64, String)> = sqlx::query_as(Q).fetch_all(&pool).await?;
        pool.close().await;
        r.into_iter()
            .map(|(id, a, c, u, s)| (id, i64::from(a), c, u, s))
            .collect()
    };
    Ok(rows
        .into_iter()
        .map(|(id, attempts, created_ms, updated_ms, state)| RequestRow {
            id,
            attempts: attempts.max(0) as u32,
            created_ms,
            updated_ms,
            state,
        })
        .collect())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn row(attempts: u32, lived_ms: i64) -> RequestRow {
        RequestRow {
            id: 1,
            attempts,
            created_ms: 1_000,
            updated_ms: 1_000 + lived_ms,
            state: "failed".into(),
        }
    }

    #[test]
    fn a_request_retried_before_its_backoff_or_too_often_is_named() {
        let b = Backoff {
            base: Duration::from_millis(500),
            max: Duration::from_millis(2000),
        };
        // Three failures: it waited 500 + 1000 ms at least.
        let (t, p) = check(&[row(3, 1_500), row(1, 0), row(0, 0)], 3, b);
        assert!(p.is_empty(), "{p:?}");
        assert_eq!((t.requests, t.retried, t.most_attempts), (3, 2, 3));
        let (_, p) = check(&[row(3, 1_400)], 3, b);
        assert!(p[0].contains("without waiting"), "{p:?}");
        let (_, p) = check(&[row(4, 10_000)], 3, b);
        assert!(p[0].contains("more than max_attempts"), "{p:?}");
    }
}
