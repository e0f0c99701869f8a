//! A job's tape requests that are not done yet, grouped by where they are: queued for a
//! cartridge or pool, claimed by a drive, or waiting out a retry backoff. `reel jobs show` and
//! `GET /v1/jobs/{id}` pair each queued group with the rule that holds its queue.

use serde::Serialize;
use sqlx::Row;

use crate::db::Db;
use crate::error::Result;
use crate::mount::MountTarget;
use crate::on_db;

/// Most groups one job lists (one per cartridge or pool, and per drive).
pub const MAX_GROUPS: u32 = 200;

/// Requests of one job in one state for one target.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct RequestGroup {
    /// `queued`, `claimed` or `waiting`.
    pub state: String,
    /// The cartridge (reads) or pool (writes).
    pub target: MountTarget,
    /// The pool (for reads, the cartridge's).
    pub pool: Option<String>,
    /// The drive holding them, for `claimed`.
    pub drive: Option<String>,
    /// Requests.
    pub files: u64,
    /// Their bytes.
    pub bytes: u64,
    /// For `waiting`: when the first of them is queued again (unix ms).
    pub next_ms: Option<i64>,
    /// For `waiting`: the most attempts any of them has failed.
    pub attempts: u32,
    /// For `waiting`: one of their last errors.
    pub error: Option<String>,
}

/// The not-done requests of `job_id`, grouped (at most [`MAX_GROUPS`] groups): claimed first,
/// then queued, then waiting; the largest groups first within each.
pub async fn of_job(db: &Db, job_id: &str) -> Result<Vec<RequestGroup>> {
    const DOING: &str = "grouping a job's outstanding requests";
    let sql = "SELECT state, mode, COALESCE(barcode, '') AS barcode, COALESCE(pool, '') AS pool, \
               COALESCE(claimed_by, '') AS claimed_by, CAST(COUNT(*) AS BIGINT) AS files, \
               CAST(COALESCE(SUM(bytes), 0) AS BIGINT) AS bytes, \
               CAST(MIN(not_before_ms) AS BIGINT) AS next_ms, CAST(MAX(attempts) AS BIGINT) AS attempts, \
               MAX(error) AS error \
               FROM reel_tape_requests WHERE job_id = $1 AND state IN ('queued', 'claimed', 'waiting') \
               GROUP BY state, mode, barcode, pool, claimed_by \
               ORDER BY CASE state WHEN 'claimed' THEN 0 WHEN 'queued' THEN 1 ELSE 2 END, files DESC \
               LIMIT $2";
    on_db!(db, |p| {
        let rows = sqlx::query(sql)
            .bind(job_id)
            .bind(i64::from(MAX_GROUPS))
            .fetch_all(p)
            .await
            .map_err(db.err(DOING))?;
        rows.iter()
            .map(|r| -> std::result::Result<RequestGroup, sqlx::Error> {
                let state: String = r.try_get("state")?;
                let mode: String = r.try_get("mode")?;
                let barcode: String = r.try_get("barcode")?;
                let pool: String = r.try_get("pool")?;
                let by: String = r.try_get("claimed_by")?;
                let waiting = state == "waiting";
                Ok(RequestGroup {
                    target: if mode == "read" {
                        MountTarget::Read { barcode }
                    } else {
                        MountTarget::Write { pool: pool.clone() }
                    },
                    pool: (!pool.is_empty()).then_some(pool),
                    drive: (state == "claimed")
                        .then(|| by.strip_prefix("drive:").unwrap_or(&by).to_string()),
                    files: r.try_get::<i64, _>("files")?.max(0) as u64,
                    bytes: r.try_get::<i64, _>("bytes")?.max(0) as u64,
                    next_ms: if waiting {
                        r.try_get::<Option<i64>, _>("next_ms")?
                    } else {
                        None
                    },
                    attempts: r.try_get::<Option<i64>, _>("attempts")?.unwrap_or(0).max(0) as u32,
                    error: if waiting { r.try_get("error")? } else { None },
                    state,
                })
            })
            .collect::<std::result::Result<Vec<_>, _>>()
            .map_err(db.err(DOING))
    })
}
