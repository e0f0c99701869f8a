//! Failed tape requests as an operator reviews them (`reel jobs failed`, CTA's
//! `failedrequest ls`): every failed request of a job that was not cancelled and whose
//! failures no operator has dropped, with its reason. An operator retries a job's failures
//! (`reel jobs retry`, which queues them again) or drops them ([`drop_failures`]): they stay with
//! the job, and the job leaves the list.

use serde::Serialize;
use sqlx::Row;

use crate::db::{Db, now_ms};
use crate::error::{JobsError, Result};
use crate::mount::MountTarget;
use crate::on_db;

/// One failed request.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, utoipa::ToSchema)]
pub struct FailedRequest {
    /// The job.
    pub job: String,
    /// The job's kind.
    pub kind: String,
    /// The job's state.
    pub job_state: String,
    /// The object.
    pub key: String,
    /// The cartridge (reads) or pool (writes) it was for.
    #[schema(value_type = Object)]
    pub target: MountTarget,
    /// Why it failed.
    pub reason: String,
    /// Attempts it failed.
    pub attempts: u32,
    /// When it failed (unix ms).
    pub failed_ms: i64,
}

/// Up to `limit` failed requests to review, newest first; of `job` only when given.
pub async fn list(db: &Db, job: Option<&str>, limit: u32) -> Result<Vec<FailedRequest>> {
    select(db, job, true, limit).await
}

/// Up to `limit` of `job`'s failed requests, newest first, dropped or not (not those a cancel
/// failed): what `reel jobs show` lists.
pub async fn of_job(db: &Db, job: &str, limit: u32) -> Result<Vec<FailedRequest>> {
    select(db, Some(job), false, limit).await
}

async fn select(
    db: &Db,
    job: Option<&str>,
    to_review: bool,
    limit: u32,
) -> Result<Vec<FailedRequest>> {
    const DOING: &str = "listing failed requests";
    let sql = "SELECT r.job_id, j.kind, j.state AS job_state, r.object_key, r.mode, \
               COALESCE(r.barcode, '') AS barcode, COALESCE(r.pool, '') AS pool, \
               COALESCE(r.error, '') AS error, r.attempts, r.updated_ms \
               FROM reel_tape_requests r JOIN reel_jobs j ON j.id = r.job_id \
               WHERE r.state = 'failed' AND ($1 = '' OR r.job_id = $1) AND ($3 = 0 \
                 OR (j.state <> 'cancelled' AND j.failures_dropped_ms IS NULL)) \
               AND COALESCE(r.error, '') <> 'cancelled' \
               ORDER BY r.updated_ms DESC, r.id DESC LIMIT $2";
    on_db!(db, |p| {
        let rows = sqlx::query(sql)
            .bind(job.unwrap_or(""))
            .bind(i64::from(limit))
            .bind(i64::from(to_review))
            .fetch_all(p)
            .await
            .map_err(db.err(DOING))?;
        rows.iter()
            .map(|r| -> std::result::Result<FailedRequest, sqlx::Error> {
                let mode: String = r.try_get("mode")?;
                Ok(FailedRequest {
                    job: r.try_get("job_id")?,
                    kind: r.try_get("kind")?,
                    job_state: r.try_get("job_state")?,
                    key: r.try_get("object_key")?,
                    target: if mode == "read" {
                        MountTarget::Read {
                            barcode: r.try_get("barcode")?,
                        }
                    } else {
                        MountTarget::Write {
                            pool: r.try_get("pool")?,
                        }
                    },
                    reason: r.try_get("error")?,
                    attempts: r.try_get::<i32, _>("attempts")?.max(0) as u32,
                    failed_ms: r.try_get("updated_ms")?,
                })
            })
            .collect::<std::result::Result<Vec<_>, _>>()
            .map_err(db.err(DOING))
    })
}

/// Drop the failures of the failed job `job` from the list to review; returns how many failed
/// requests it had. Refused for a job that has not failed (a running job's failures may still
/// be joined by others; a done or cancelled one has none to review).
pub async fn drop_failures(db: &Db, job: &str) -> Result<u64> {
    // Dropping again keeps the first time.
    let sql = "UPDATE reel_jobs SET failures_dropped_ms = COALESCE(failures_dropped_ms, $2) \
               WHERE id = $1 AND state = 'failed'";
    let n = on_db!(db, |p| sqlx::query(sql)
        .bind(job)
        .bind(now_ms())
        .execute(p)
        .await
        .map(|r| r.rows_affected()))
    .map_err(db.err("dropping a job's failures"))?;
    if n == 0 {
        let state: Option<String> = on_db!(db, |p| sqlx::query_scalar(
            "SELECT state FROM reel_jobs WHERE id = $1"
        )
        .bind(job)
        .fetch_optional(p)
        .await)
        .map_err(db.err("reading a job's state"))?;
        return Err(match state {
            None => JobsError::NoSuchJob(job.to_string()),
            Some(state) => JobsError::BadJobState {
                id: job.to_string(),
                state,
                hint: "only a failed job's failures can be dropped".into(),
            },
        });
    }
    let count = "SELECT CAST(COUNT(*) AS BIGINT) FROM reel_tape_requests WHERE job_id = $1 AND state = 'failed'";
    let failed: i64 = on_db!(db, |p| sqlx::query_scalar(count)
        .bind(job)
        .fetch_one(p)
        .await)
    .map_err(db.err("counting a job's failed requests"))?;
    Ok(failed.max(0) as u64)
}
