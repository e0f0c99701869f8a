//! Tape requests: what drives do. A read request names a cartridge; a write request names a
//! pool. Each belongs to a job. Queue summaries feed the scheduler (in the worker crate); a drive claims a
//! whole batch for its mount in one statement: `FOR UPDATE SKIP LOCKED` on PostgreSQL (two
//! claimers never get the same row and never wait on each other), a single writer transaction
//! (`BEGIN IMMEDIATE`) on SQLite.

use std::time::Duration;

use serde::{Deserialize, Serialize};
use sqlx::Row;

use crate::backoff::Backoff;
use crate::db::BeginWrite;
use crate::db::{Db, now_ms};
use crate::error::{JobsError, Result};
use crate::lease::Fence;
use crate::mount::{MountMode, MountTarget, QueueSummary};
use crate::on_db;

/// Read or write (stored as `read` / `write`).
pub type RequestMode = MountMode;

/// A request to add.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct NewTapeRequest {
    /// Read from a cartridge, or write to a pool.
    pub target: MountTarget,
    /// For reads: the cartridge's pool (for group caps). For writes: ignored.
    pub pool: Option<String>,
    /// Object key.
    pub object_key: String,
    /// Bytes to move.
    pub bytes: u64,
    /// Files (objects) it counts for.
    pub files: u64,
    /// Priority (usually the job's).
    pub priority: i32,
    /// Executor-specific detail (e.g. container, block, offset, source path), JSON.
    pub detail: serde_json::Value,
}

/// A stored request.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct TapeRequest {
    /// Row id.
    pub id: i64,
    /// Owning job.
    pub job_id: String,
    /// Target.
    pub target: MountTarget,
    /// Pool (for reads, the cartridge's).
    pub pool: Option<String>,
    /// Object key.
    pub object_key: String,
    /// Bytes.
    pub bytes: u64,
    /// Files.
    pub files: u64,
    /// Priority.
    pub priority: i32,
    /// Detail JSON.
    pub detail: serde_json::Value,
    /// `queued`, `claimed`, `waiting` (out a retry backoff), `done`, `failed`.
    pub state: String,
    /// Lease resource that claimed it.
    pub claimed_by: Option<String>,
    /// Lease epoch of the claim.
    pub claim_epoch: Option<i64>,
    /// Failure reason.
    pub error: Option<String>,
    /// Failed attempts so far (see [`TapeRequests::retry`]).
    pub attempts: u32,
}

/// Drops a job's requests that no drive holds (`$1` the job, `$2` now): used by
/// [`TapeRequests::cancel_job`] and in the transaction that records a cancel.
pub(crate) const CANCEL_JOB_REQUESTS: &str = "UPDATE reel_tape_requests SET state = 'failed', error = 'cancelled', updated_ms = $2 \
     WHERE job_id = $1 AND state IN ('queued', 'waiting')";

/// What [`TapeRequests::retry`] did.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct RetryCounts {
    /// Requests now waiting out their backoff.
    pub waiting: u64,
    /// Requests that spent their attempts and failed.
    pub failed: u64,
}

/// Counts of one job's requests.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize)]
pub struct JobRequestCounts {
    /// All requests.
    pub total: u64,
    /// Done.
    pub done: u64,
    /// Failed.
    pub failed: u64,
    /// Claimed by a drive: in a batch now.
    pub claimed: u64,
    /// Bytes of all.
    pub bytes_total: u64,
    /// Bytes done.
    pub bytes_done: u64,
}

const COLS: &str = "id, job_id, mode, barcode, pool, object_key, bytes, files, priority, detail, state, claimed_by, claim_epoch, error, attempts";

macro_rules! decode_request {
    ($r:expr) => {{
        let r = $r;
        (|| -> std::result::Result<TapeRequest, sqlx::Error> {
            let mode: String = r.try_get("mode")?;
            let barcode: Option<String> = r.try_get("barcode")?;
            let pool: Option<String> = r.try_get("pool")?;
            let target = if mode == "read" {
                MountTarget::Read {
                    barcode: barcode.unwrap_or_default(),
                }
            } else {
                MountTarget::Write {
                    pool: pool.clone().unwrap_or_default(),
                }
            };
            let detail: Option<String> = r.try_get("detail")?;
            Ok(TapeRequest {
                id: r.try_get("id")?,
                job_id: r.try_get("job_id")?,
                target,
                pool,
                object_key: r.try_get("object_key")?,
                bytes: r.try_get::<i64, _>("bytes")? as u64,
                files: r.try_get::<i64, _>("files")? as u64,
                priority: r.try_get::<i64, _>("priority")? as i32,
                detail: detail
                    .and_then(|d| serde_json::from_str(&d).ok())
                    .unwrap_or(serde_json::Value::Null),
                state: r.try_get("state")?,
                claimed_by: r.try_get("claimed_by")?,
                claim_epoch: r.try_get("claim_epoch")?,
                error: r.try_get("error")?,
                attempts: r.try_get::<i32, _>("attempts")?.max(0) as u32,
            })
        })()
    }};
}

/// Requests one drive has claimed, of one job.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, utoipa::ToSchema)]
pub struct DriveWork {
    /// The drive.
    pub drive: String,
    /// The job.
    pub job: String,
    /// Requests claimed.
    pub files: u64,
    /// Their bytes.
    pub bytes: u64,
}

/// Access to the tape requests.
#[derive(Debug, Clone)]
pub struct TapeRequests {
    db: Db,
}

/// How much one claim may take.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ClaimLimit {
    /// Most requests.
    pub max_files: u64,
    /// Most bytes (the first request is always taken, even if larger).
    pub max_bytes: u64,
}

/// What a running write batch of one job may still be given ([`TapeRequests::writes_coming`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct WritesComing {
    /// The job's writes queued for the batch's pool.
    pub queued_writes: u64,
    /// The job's reads a drive has taken.
    pub reads_claimed: u64,
    /// The job's reads read and not yet turned into writes.
    pub reads_done: u64,
    /// The job's reads a drive has yet to take (queued, or waiting out a backoff).
    pub reads_queued: u64,
}

/// Rows per `INSERT` on PostgreSQL (one array per column, so the statement has ten parameters
/// whatever its size).
pub const PG_ROWS_PER_INSERT: usize = 10_000;

/// How long after its lease's expiry a claim waits before it goes back to the queue
/// ([`TapeRequests::requeue_orphaned_claims`]): longer than a catalogue transaction takes
/// between its lease check and its commit.
pub const ORPHAN_GRACE_MS: i64 = 2_000;
/// Rows per `INSERT` on SQLite: 11 bound values a row stays below SQLite's 32 766 variables.
pub const SQLITE_ROWS_PER_INSERT: usize = 2_000;

/// A request as its columns.
struct RequestRow<'a> {
    mode: &'static str,
    /// The barcode (reads) or pool (writes): what the queue is per.
    target: &'a str,
    barcode: Option<&'a str>,
    pool: Option<&'a str>,
    object_key: &'a str,
    bytes: i64,
    files: i64,
    priority: i64,
    detail: String,
}

impl<'a> From<&'a NewTapeRequest> for RequestRow<'a> {
    fn from(r: &'a NewTapeRequest) -> Self {
        let (mode, target, barcode, pool) = match &r.target {
            MountTarget::Read { barcode } => (
                "read",
                barcode.as_str(),
                Some(barcode.as_str()),
                r.pool.as_deref(),
            ),
            MountTarget::Write { pool } => ("write", pool.as_str(), None, Some(pool.as_str())),
        };
        RequestRow {
            mode,
            target,
            barcode,
            pool,
            object_key: &r.object_key,
            bytes: r.bytes.min(i64::MAX as u64) as i64,
            files: r.files.min(i64::MAX as u64) as i64,
            priority: i64::from(r.priority),
            detail: r.detail.to_string(),
        }
    }
}

impl TapeRequests {
    /// Requests on this database.
    pub fn new(db: Db) -> TapeRequests {
        TapeRequests { db }
    }

    /// Add a job's requests in one transaction, in multi-row statements: on PostgreSQL one
    /// array per column expanded by `UNNEST` ([`PG_ROWS_PER_INSERT`] rows a statement), on
    /// SQLite multi-row `VALUES` ([`SQLITE_ROWS_PER_INSERT`] rows a statement). Rows go in
    /// target order (the order among one target's requests is kept), so the per-target queue
    /// rows the insert triggers update are locked in the same order by every transaction.
    pub async fn add(&self, job_id: &str, reqs: &[NewTapeRequest]) -> Result<()> {
        self.add_inner(job_id, reqs, None, &[]).await.map(|_| ())
    }

    /// In one transaction: forget the job's settled requests `forget` (rows done or failed are
    /// deleted; a job that forgets them keeps its own account of their work, as a repack does)
    /// and add `reqs`. A crash leaves both or neither, so the work a forgotten request led to
    /// is queued exactly once.
    pub async fn settle_into(
        &self,
        job_id: &str,
        forget: &[i64],
        reqs: &[NewTapeRequest],
    ) -> Result<()> {
        self.add_inner(job_id, reqs, None, forget).await.map(|_| ())
    }

    /// Up to `limit` of a job's requests, whatever their state, by id: for a job that keeps a
    /// small window of requests in flight (a repack).
    pub async fn of_job(&self, job_id: &str, limit: u32) -> Result<Vec<TapeRequest>> {
        let sql =
            format!("SELECT {COLS} FROM reel_tape_requests WHERE job_id = $1 ORDER BY id LIMIT $2");
        crate::on_db!(&self.db, |p| {
            let rows = sqlx::query(sqlx::AssertSqlSafe(sql))
                .bind(job_id)
                .bind(i64::from(limit))
                .fetch_all(p)
                .await
                .map_err(self.db.err("listing a job's requests"))?;
            rows.iter()
                .map(|r| decode_request!(r))
                .collect::<std::result::Result<Vec<_>, _>>()
                .map_err(self.db.err("reading a job's requests"))
        })
    }

    /// A job's plan: its requests added and its `checkpoint` recorded in one transaction, only
    /// if the job has no checkpoint yet. False (nothing added) when another runner of the job
    /// planned it first: a runner frozen past its job lease, whose job was queued again and
    /// planned by a new runner meanwhile, never adds a second set of requests.
    pub async fn add_plan(
        &self,
        job_id: &str,
        reqs: &[NewTapeRequest],
        checkpoint: &serde_json::Value,
    ) -> Result<bool> {
        self.add_inner(job_id, reqs, Some(&checkpoint.to_string()), &[])
            .await
    }

    async fn add_inner(
        &self,
        job_id: &str,
        reqs: &[NewTapeRequest],
        claim: Option<&str>,
        forget: &[i64],
    ) -> Result<bool> {
        const DOING: &str = "adding tape requests";
        const CLAIM: &str = "UPDATE reel_jobs SET checkpoint = $2, updated_ms = $3 \
                             WHERE id = $1 AND checkpoint IS NULL";
        let now = now_ms();
        let mut rows: Vec<RequestRow<'_>> = reqs.iter().map(RequestRow::from).collect();
        rows.sort_by(|a, b| (a.mode, a.target, a.pool).cmp(&(b.mode, b.target, b.pool)));
        match &self.db {
            Db::Postgres(p) => {
                let mut tx = p.begin_write().await.map_err(self.db.err(DOING))?;
                if let Some(c) = claim {
                    let n = sqlx::query(CLAIM)
                        .bind(job_id)
                        .bind(c)
                        .bind(now)
                        .execute(&mut *tx)
                        .await
                        .map_err(self.db.err(DOING))?
                        .rows_affected();
                    if n == 0 {
                        return Ok(false);
                    }
                }
                for ids in forget.chunks(500) {
                    let mut qb = sqlx::QueryBuilder::new(
                        "DELETE FROM reel_tape_requests WHERE state IN ('done', 'failed') AND job_id = ",
                    );
                    qb.push_bind(job_id);
                    qb.push(" AND id IN (");
                    let mut list = qb.separated(", ");
                    for id in ids {
                        list.push_bind(*id);
                    }
                    qb.push(")");
                    qb.build()
                        .execute(&mut *tx)
                        .await
                        .map_err(self.db.err(DOING))?;
                }
                for chunk in rows.chunks(PG_ROWS_PER_INSERT) {
                    let col =
                        |f: fn(&RequestRow<'_>) -> i64| chunk.iter().map(f).collect::<Vec<_>>();
                    sqlx::query(
                        "INSERT INTO reel_tape_requests (job_id, mode, barcode, pool, object_key, bytes, files, priority, detail, created_ms, updated_ms) \
                         SELECT $1, u.mode, u.barcode, u.pool, u.object_key, u.bytes, u.files, u.priority, u.detail, $10, $10 \
                         FROM UNNEST($2::text[], $3::text[], $4::text[], $5::text[], $6::bigint[], $7::bigint[], $8::bigint[], $9::text[]) \
                              AS u(mode, barcode, pool, object_key, bytes, files, priority, detail)",
                    )
                    .bind(job_id)
                    .bind(chunk.iter().map(|r| r.mode).collect::<Vec<_>>())
                    .bind(chunk.iter().map(|r| r.barcode).collect::<Vec<_>>())
                    .bind(chunk.iter().map(|r| r.pool).collect::<Vec<_>>())
                    .bind(chunk.iter().map(|r| r.object_key).collect::<Vec<_>>())
                    .bind(col(|r| r.bytes))
                    .bind(col(|r| r.files))
                    .bind(col(|r| r.priority))
                    .bind(chunk.iter().map(|r| r.detail.as_str()).collect::<Vec<_>>())
                    .bind(now)
                    .execute(&mut *tx)
                    .await
                    .map_err(self.db.err(DOING))?;
                }
                tx.commit().await.map_err(self.db.err(DOING))?;
                Ok(true)
            }
            Db::Sqlite(p) => {
                let mut tx = p.begin_write().await.map_err(self.db.err(DOING))?;
                if let Some(c) = claim {
                    let n = sqlx::query(CLAIM)
                        .bind(job_id)
                        .bind(c)
                        .bind(now)
                        .execute(&mut *tx)
                        .await
                        .map_err(self.db.err(DOING))?
                        .rows_affected();
                    if n == 0 {
                        return Ok(false);
                    }
                }
                for ids in forget.chunks(500) {
                    let mut qb = sqlx::QueryBuilder::new(
                        "DELETE FROM reel_tape_requests WHERE state IN ('done', 'failed') AND job_id = ",
                    );
                    qb.push_bind(job_id);
                    qb.push(" AND id IN (");
                    let mut list = qb.separated(", ");
                    for id in ids {
                        list.push_bind(*id);
                    }
                    qb.push(")");
                    qb.build()
                        .execute(&mut *tx)
                        .await
                        .map_err(self.db.err(DOING))?;
                }
                for chunk in rows.chunks(SQLITE_ROWS_PER_INSERT) {
                    let mut qb = sqlx::QueryBuilder::new(
                        "INSERT INTO reel_tape_requests (job_id, mode, barcode, pool, object_key, bytes, files, priority, detail, created_ms, updated_ms) ",
                    );
                    qb.push_values(chunk, |mut b, r| {
                        b.push_bind(job_id)
                            .push_bind(r.mode)
                            .push_bind(r.barcode)
                            .push_bind(r.pool)
                            .push_bind(r.object_key)
                            .push_bind(r.bytes)
                            .push_bind(r.files)
                            .push_bind(r.priority)
                            .push_bind(r.detail.as_str())
                            .push_bind(now)
                            .push_bind(now);
                    });
                    qb.build()
                        .execute(&mut *tx)
                        .await
                        .map_err(self.db.err(DOING))?;
                }
                tx.commit().await.map_err(self.db.err(DOING))?;
                Ok(true)
            }
        }
    }

    /// The requests each drive has claimed now (its batch), per job.
    pub async fn by_drive(&self) -> Result<Vec<DriveWork>> {
        const DOING: &str = "reading the drives' claimed requests";
        let sql = "SELECT claimed_by, job_id, CAST(COUNT(*) AS BIGINT) AS files, \
                   CAST(SUM(bytes) AS BIGINT) AS bytes FROM reel_tape_requests \
                   WHERE state = 'claimed' AND claimed_by IS NOT NULL \
                   GROUP BY claimed_by, job_id ORDER BY claimed_by, job_id";
        on_db!(&self.db, |p| {
            let rows = sqlx::query(sql)
                .fetch_all(p)
                .await
                .map_err(self.db.err(DOING))?;
            rows.iter()
                .map(|r| {
                    let by: String = r.try_get("claimed_by")?;
                    let files: i64 = r.try_get("files")?;
                    let bytes: Option<i64> = r.try_get("bytes")?;
                    Ok(DriveWork {
                        drive: by.strip_prefix("drive:").unwrap_or(&by).to_string(),
                        job: r.try_get("job_id")?,
                        files: files.max(0) as u64,
                        bytes: bytes.unwrap_or(0).max(0) as u64,
                    })
                })
                .collect::<std::result::Result<Vec<_>, sqlx::Error>>()
                .map_err(self.db.err(DOING))
        })
    }

    /// Queue summaries: one per cartridge for reads, one per pool for writes, over queued
    /// requests of every job.
    ///
    /// Bytes, files and pool come from `reel_tape_queues`, which triggers keep up as requests
    /// enter and leave the queue (one row per target and request pool); the oldest request and
    /// the highest priority of each target are one probe each of a partial index over queued
    /// requests. The cost grows with the number of targets, not of queued requests.
    pub async fn summaries(&self) -> Result<Vec<QueueSummary>> {
        let now = now_ms();
        let sql = "SELECT s.mode, CASE WHEN s.mode = 'read' THEN s.target ELSE '' END AS barcode, \
                   CASE WHEN s.mode = 'read' THEN s.pool ELSE s.target END AS pool, \
                   CAST(s.bytes AS BIGINT) AS bytes, CAST(s.files AS BIGINT) AS files, \
                   COALESCE(CASE WHEN s.mode = 'read' \
                     THEN (SELECT r.created_ms FROM reel_tape_requests r WHERE r.state = 'queued' AND r.mode = 'read' \
                           AND r.barcode = s.target ORDER BY r.created_ms LIMIT 1) \
                     ELSE (SELECT r.created_ms FROM reel_tape_requests r WHERE r.state = 'queued' AND r.mode = 'write' \
                           AND r.pool = s.target ORDER BY r.created_ms LIMIT 1) END, $1) AS oldest, \
                   COALESCE(CASE WHEN s.mode = 'read' \
                     THEN (SELECT r.priority FROM reel_tape_requests r WHERE r.barcode = s.target AND r.state = 'queued' \
                           AND r.mode = 'read' ORDER BY r.priority DESC LIMIT 1) \
                     ELSE (SELECT r.priority FROM reel_tape_requests r WHERE r.state = 'queued' AND r.mode = 'write' \
                           AND r.pool = s.target ORDER BY r.priority DESC LIMIT 1) END, 0) AS priority \
                   FROM (SELECT mode, target, MAX(pool) AS pool, SUM(bytes) AS bytes, SUM(files) AS files \
                         FROM reel_tape_queues WHERE files > 0 GROUP BY mode, target) s \
                   ORDER BY 1, 2, 3";
        let rows = crate::on_db!(&self.db, |p| {
            let rows = sqlx::query(sql)
                .bind(now)
                .fetch_all(p)
                .await
                .map_err(self.db.err("summarising tape requests"))?;
            rows.iter()
                .map(|r| -> std::result::Result<_, sqlx::Error> {
                    Ok((
                        r.try_get::<String, _>("mode")?,
                        r.try_get::<String, _>("barcode")?,
                        r.try_get::<String, _>("pool")?,
                        r.try_get::<i64, _>("bytes")?,
                        r.try_get::<i64, _>("files")?,
                        r.try_get::<i64, _>("oldest")?,
                        r.try_get::<i64, _>("priority")?,
                    ))
                })
                .collect::<std::result::Result<Vec<_>, _>>()
                .map_err(self.db.err("summarising tape requests"))?
        });
        Ok(rows
            .into_iter()
            .map(
                |(mode, barcode, pool, bytes, files, oldest, prio)| QueueSummary {
                    target: if mode == "read" {
                        MountTarget::Read { barcode }
                    } else {
                        MountTarget::Write { pool: pool.clone() }
                    },
                    pool: (!pool.is_empty()).then_some(pool),
                    bytes: bytes as u64,
                    files: files as u64,
                    oldest_age: Duration::from_millis((now - oldest).max(0) as u64),
                    priority: prio as i32,
                },
            )
            .collect())
    }

    /// Claim a batch of queued requests for `target` under the drive lease `fence`, highest
    /// priority first, within `limit`. Checks the fence first: a fenced worker claims nothing.
    pub async fn claim(
        &self,
        target: &MountTarget,
        fence: &Fence,
        limit: ClaimLimit,
    ) -> Result<Vec<TapeRequest>> {
        self.claim_where(target, fence, limit, None).await
    }

    /// [`claim`](Self::claim), of one job's requests only: what a batch of that job takes
    /// while it runs ([`writes_coming`](Self::writes_coming)).
    pub async fn claim_of_job(
        &self,
        target: &MountTarget,
        fence: &Fence,
        limit: ClaimLimit,
        job_id: &str,
    ) -> Result<Vec<TapeRequest>> {
        self.claim_where(target, fence, limit, Some(job_id)).await
    }

    /// What a write batch of `job_id` to `pool` may still be given by that job: its writes
    /// queued for the pool (claim them), its reads being read or read and not yet turned into
    /// writes (a repack's next slice: wait for them), and its reads still queued.
    pub async fn writes_coming(&self, job_id: &str, pool: &str) -> Result<WritesComing> {
        let sql = "SELECT \
                   CAST(COALESCE(SUM(CASE WHEN mode = 'write' AND state = 'queued' AND pool = $2 THEN 1 ELSE 0 END), 0) AS BIGINT) AS writes, \
                   CAST(COALESCE(SUM(CASE WHEN mode = 'read' AND state = 'claimed' THEN 1 ELSE 0 END), 0) AS BIGINT) AS claimed_reads, \
                   CAST(COALESCE(SUM(CASE WHEN mode = 'read' AND state = 'done' THEN 1 ELSE 0 END), 0) AS BIGINT) AS done_reads, \
                   CAST(COALESCE(SUM(CASE WHEN mode = 'read' AND state IN ('queued', 'waiting') THEN 1 ELSE 0 END), 0) AS BIGINT) AS queued_reads \
                   FROM reel_tape_requests WHERE job_id = $1";
        crate::on_db!(&self.db, |p| {
            let r = sqlx::query(sql)
                .bind(job_id)
                .bind(pool)
                .fetch_one(p)
                .await
                .map_err(self.db.err("counting a job's writes to come"))?;
            let g = |c: &str| r.try_get::<i64, _>(c).map(|v| v.max(0) as u64);
            (|| -> std::result::Result<WritesComing, sqlx::Error> {
                Ok(WritesComing {
                    queued_writes: g("writes")?,
                    reads_claimed: g("claimed_reads")?,
                    reads_done: g("done_reads")?,
                    reads_queued: g("queued_reads")?,
                })
            })()
            .map_err(self.db.err("counting a job's writes to come"))
        })
    }

    async fn claim_where(
        &self,
        target: &MountTarget,
        fence: &Fence,
        limit: ClaimLimit,
        job_id: Option<&str>,
    ) -> Result<Vec<TapeRequest>> {
        fence.check().await?;
        let (mode, col, key) = match target {
            MountTarget::Read { barcode } => ("read", "barcode", barcode.as_str()),
            MountTarget::Write { pool } => ("write", "pool", pool.as_str()),
        };
        let now = now_ms();
        let lock = match self.db {
            Db::Postgres(_) => "FOR UPDATE SKIP LOCKED",
            Db::Sqlite(_) => "",
        };
        // `col` is one of two fixed column names and `of_job` a fixed clause; nothing
        // user-supplied is formatted in.
        let of_job = if job_id.is_some() {
            "AND job_id = $8"
        } else {
            ""
        };
        let sql = format!(
            "WITH c AS (SELECT id AS cid, bytes AS cbytes, priority AS cprio FROM reel_tape_requests \
                 WHERE state = 'queued' AND mode = $1 AND {col} = $2 {of_job} ORDER BY priority DESC, id LIMIT $3 {lock}), \
             w AS (SELECT cid, SUM(cbytes) OVER (ORDER BY cprio DESC, cid) - cbytes AS before FROM c) \
             UPDATE reel_tape_requests SET state = 'claimed', claimed_by = $4, claim_epoch = $5, updated_ms = $6 \
             FROM w WHERE reel_tape_requests.id = w.cid AND (w.before = 0 OR w.before < $7) RETURNING {COLS}"
        );
        let mut out = match &self.db {
            Db::Postgres(p) => {
                let mut q = sqlx::query(sqlx::AssertSqlSafe(sql))
                    .bind(mode)
                    .bind(key)
                    .bind(limit.max_files.min(i64::MAX as u64) as i64)
                    .bind(&fence.resource)
                    .bind(fence.epoch)
                    .bind(now)
                    .bind(limit.max_bytes.min(i64::MAX as u64) as i64);
                if let Some(j) = job_id {
                    q = q.bind(j);
                }
                let rows = q
                    .fetch_all(p)
                    .await
                    .map_err(self.db.err("claiming tape requests"))?;
                rows.iter()
                    .map(|r| decode_request!(r))
                    .collect::<std::result::Result<Vec<_>, _>>()
            }
            Db::Sqlite(p) => {
                // One writer at a time: take the write lock up front so the read-then-update is atomic.
                let mut tx = p
                    .begin_with("BEGIN IMMEDIATE")
                    .await
                    .map_err(self.db.err("claiming tape requests"))?;
                let mut q = sqlx::query(sqlx::AssertSqlSafe(sql))
                    .bind(mode)
                    .bind(key)
                    .bind(limit.max_files.min(i64::MAX as u64) as i64)
                    .bind(&fence.resource)
                    .bind(fence.epoch)
                    .bind(now)
                    .bind(limit.max_bytes.min(i64::MAX as u64) as i64);
                if let Some(j) = job_id {
                    q = q.bind(j);
                }
                let rows = q
                    .fetch_all(&mut *tx)
                    .await
                    .map_err(self.db.err("claiming tape requests"))?;
                tx.commit()
                    .await
                    .map_err(self.db.err("claiming tape requests"))?;
                rows.iter()
                    .map(|r| decode_request!(r))
                    .collect::<std::result::Result<Vec<_>, _>>()
            }
        }
        .map_err(self.db.err("reading claimed tape requests"))?;
        out.sort_by(|a, b| b.priority.cmp(&a.priority).then(a.id.cmp(&b.id)));
        Ok(out)
    }

    /// Mark requests done. Fenced: only the claim's holder at its epoch may do it.
    pub async fn complete(&self, ids: &[i64], fence: &Fence) -> Result<u64> {
        self.finish(ids, fence, "done", None).await
    }

    /// Record what finished requests found ([`crate::cartridge_task`]), before they are marked
    /// done. Only requests this claim still holds are written.
    pub async fn record_results(
        &self,
        results: &[(i64, serde_json::Value)],
        fence: &Fence,
    ) -> Result<u64> {
        if results.is_empty() {
            return Ok(0);
        }
        fence.check().await?;
        let sql = "UPDATE reel_tape_requests SET result = $1 \
                   WHERE id = $2 AND state = 'claimed' AND claimed_by = $3 AND claim_epoch = $4";
        crate::on_db!(&self.db, |p| {
            let mut tx = p
                .begin_write()
                .await
                .map_err(self.db.err("recording tape request results"))?;
            let mut n = 0;
            for (id, result) in results {
                n += sqlx::query(sql)
                    .bind(result.to_string())
                    .bind(id)
                    .bind(&fence.resource)
                    .bind(fence.epoch)
                    .execute(&mut *tx)
                    .await
                    .map_err(self.db.err("recording tape request results"))?
                    .rows_affected();
            }
            tx.commit()
                .await
                .map_err(self.db.err("recording tape request results"))?;
            Ok(n)
        })
    }

    /// The results recorded on a job's done requests, in request order.
    pub async fn results(&self, job_id: &str) -> Result<Vec<serde_json::Value>> {
        let sql = "SELECT result FROM reel_tape_requests \
                   WHERE job_id = $1 AND state = 'done' AND result IS NOT NULL ORDER BY id";
        crate::on_db!(&self.db, |p| {
            let rows = sqlx::query(sql)
                .bind(job_id)
                .fetch_all(p)
                .await
                .map_err(self.db.err("reading a job's request results"))?;
            rows.iter()
                .map(|r| {
                    let text: String = r.try_get("result")?;
                    Ok(serde_json::from_str(&text).unwrap_or(serde_json::Value::String(text)))
                })
                .collect::<std::result::Result<Vec<_>, sqlx::Error>>()
                .map_err(self.db.err("reading a job's request results"))
        })
    }

    /// Mark requests failed with a reason.
    pub async fn fail(&self, ids: &[i64], fence: &Fence, reason: &str) -> Result<u64> {
        self.finish(ids, fence, "failed", Some(reason)).await
    }

    async fn finish(
        &self,
        ids: &[i64],
        fence: &Fence,
        state: &'static str,
        reason: Option<&str>,
    ) -> Result<u64> {
        fence.check().await?;
        let sql = "UPDATE reel_tape_requests SET state = $1, error = $2, updated_ms = $3 \
                   WHERE id = $4 AND state = 'claimed' AND claimed_by = $5 AND claim_epoch = $6";
        let now = now_ms();
        crate::on_db!(&self.db, |p| {
            let mut tx = p
                .begin_write()
                .await
                .map_err(self.db.err("finishing tape requests"))?;
            let mut n = 0;
            for id in ids {
                n += sqlx::query(sql)
                    .bind(state)
                    .bind(reason)
                    .bind(now)
                    .bind(id)
                    .bind(&fence.resource)
                    .bind(fence.epoch)
                    .execute(&mut *tx)
                    .await
                    .map_err(self.db.err("finishing tape requests"))?
                    .rows_affected();
            }
            tx.commit()
                .await
                .map_err(self.db.err("finishing tape requests"))?;
            Ok(n)
        })
    }

    /// Give claimed requests back to the queue (a batch stopped early). Fenced like `complete`.
    pub async fn unclaim(&self, ids: &[i64], fence: &Fence) -> Result<u64> {
        if ids.is_empty() {
            return Ok(0);
        }
        let sql = "UPDATE reel_tape_requests SET state = 'queued', claimed_by = NULL, claim_epoch = NULL, updated_ms = $1 \
                   WHERE id = $2 AND state = 'claimed' AND claimed_by = $3 AND claim_epoch = $4";
        let now = now_ms();
        crate::on_db!(&self.db, |p| {
            let mut tx = p
                .begin_write()
                .await
                .map_err(self.db.err("returning claims"))?;
            let mut n = 0;
            for id in ids {
                n += sqlx::query(sql)
                    .bind(now)
                    .bind(id)
                    .bind(&fence.resource)
                    .bind(fence.epoch)
                    .execute(&mut *tx)
                    .await
                    .map_err(self.db.err("returning claims"))?
                    .rows_affected();
            }
            tx.commit().await.map_err(self.db.err("returning claims"))?;
            Ok(n)
        })
    }

    /// Give back to the queue every request still claimed under `fence`: a drive step that
    /// failed part-way (its bookkeeping met a database error after the batch ran) leaves none
    /// stranded while its worker lives. A request of a job cancelled meanwhile is dropped
    /// (`failed`, `cancelled`), as `drop_cancelled` does, never queued again. Called between
    /// steps, when the drive has no batch.
    pub async fn release_claims(&self, fence: &Fence) -> Result<u64> {
        const DOING: &str = "returning a failed step's claims";
        let held = "state = 'claimed' AND claimed_by = $2 AND claim_epoch = $3";
        let drop = format!(
            "UPDATE reel_tape_requests SET state = 'failed', error = 'cancelled', claimed_by = NULL, \
             claim_epoch = NULL, updated_ms = $1 WHERE {held} AND job_id IN \
             (SELECT id FROM reel_jobs WHERE cancel_requested <> 0)"
        );
        let requeue = format!(
            "UPDATE reel_tape_requests SET state = 'queued', claimed_by = NULL, claim_epoch = NULL, \
             updated_ms = $1 WHERE {held}"
        );
        let now = now_ms();
        crate::on_db!(&self.db, |p| {
            let mut tx = p.begin_write().await.map_err(self.db.err(DOING))?;
            let mut n = 0;
            for sql in [&drop, &requeue] {
                n += sqlx::query(sqlx::AssertSqlSafe(sql.as_str()))
                    .bind(now)
                    .bind(&fence.resource)
                    .bind(fence.epoch)
                    .execute(&mut *tx)
                    .await
                    .map_err(self.db.err(DOING))?
                    .rows_affected();
            }
            tx.commit().await.map_err(self.db.err(DOING))?;
            Ok(n)
        })
    }

    /// Claimed requests whose attempt failed in a way another attempt may mend (a drive or
    /// medium fault, a source being written to): each counts one attempt and waits out the
    /// backoff for that many (state `waiting`, not counted in the queue summary, so no drive
    /// mounts for it meanwhile), or fails for good with its reason once `max_attempts` are
    /// spent. Fenced like `complete`. Returns how many now wait and how many failed.
    pub async fn retry(
        &self,
        failures: &[(i64, String)],
        fence: &Fence,
        backoff: Backoff,
        max_attempts: u32,
    ) -> Result<RetryCounts> {
        let mut counts = RetryCounts::default();
        if failures.is_empty() {
            return Ok(counts);
        }
        fence.check().await?;
        const DOING: &str = "scheduling a request's retry";
        let now = now_ms();
        let get = "SELECT attempts FROM reel_tape_requests \
                   WHERE id = $1 AND state = 'claimed' AND claimed_by = $2 AND claim_epoch = $3";
        let set = "UPDATE reel_tape_requests SET state = $1, attempts = $2, not_before_ms = $3, error = $4, \
                   claimed_by = NULL, claim_epoch = NULL, updated_ms = $5 \
                   WHERE id = $6 AND state = 'claimed' AND claimed_by = $7 AND claim_epoch = $8";
        crate::on_db!(&self.db, |p| {
            let mut tx = p.begin_write().await.map_err(self.db.err(DOING))?;
            for (id, why) in failures {
                let Some(done): Option<i32> = sqlx::query_scalar(get)
                    .bind(id)
                    .bind(&fence.resource)
                    .bind(fence.epoch)
                    .fetch_optional(&mut *tx)
                    .await
                    .map_err(self.db.err(DOING))?
                else {
                    continue;
                };
                let attempts = done.max(0) as u32 + 1;
                let (state, not_before, error) = if attempts >= max_attempts.max(1) {
                    counts.failed += 1;
                    (
                        "failed",
                        0,
                        format!("gave up after {attempts} attempt(s): {why}"),
                    )
                } else {
                    counts.waiting += 1;
                    let wait = backoff.delay(attempts).as_millis() as i64;
                    (
                        "waiting",
                        now + wait,
                        format!("attempt {attempts} of {max_attempts} failed: {why}"),
                    )
                };
                sqlx::query(set)
                    .bind(state)
                    .bind(attempts as i32)
                    .bind(not_before)
                    .bind(error)
                    .bind(now)
                    .bind(id)
                    .bind(&fence.resource)
                    .bind(fence.epoch)
                    .execute(&mut *tx)
                    .await
                    .map_err(self.db.err(DOING))?;
            }
            tx.commit().await.map_err(self.db.err(DOING))?;
            Ok(counts)
        })
    }

    /// Queue again every waiting request whose backoff has passed. Runs on every drive step
    /// and heartbeat, on any worker (idempotent).
    pub async fn release_due(&self) -> Result<u64> {
        let sql = "UPDATE reel_tape_requests SET state = 'queued', updated_ms = $1 \
                   WHERE state = 'waiting' AND not_before_ms <= $1";
        let now = now_ms();
        crate::on_db!(&self.db, |p| sqlx::query(sql)
            .bind(now)
            .execute(p)
            .await
            .map(|r| r.rows_affected()))
        .map_err(self.db.err("queueing requests whose backoff passed"))
    }

    /// Drop claimed requests of a cancelled job (a batch stopped for the cancel): they are
    /// never queued again. Fenced like `complete`.
    pub async fn drop_cancelled(&self, ids: &[i64], fence: &Fence) -> Result<u64> {
        self.finish(ids, fence, "failed", Some("cancelled")).await
    }

    /// Put back in the queue every claim whose lease is gone (holder died, epoch moved on),
    /// or expired at least [`ORPHAN_GRACE_MS`] ago. The grace covers a writer's transaction
    /// that checked the lease just before it expired and has not committed yet (the catalogue
    /// fences container closes by the lease, `reel_engine::catalogue::WriterLease`): its copies
    /// are committed before the claims move, so whoever takes them over sees those copies.
    pub async fn requeue_orphaned_claims(&self) -> Result<u64> {
        let sql = "UPDATE reel_tape_requests SET state = 'queued', claimed_by = NULL, claim_epoch = NULL, updated_ms = $1 \
                   WHERE state = 'claimed' AND NOT EXISTS (SELECT 1 FROM reel_leases l WHERE l.resource = reel_tape_requests.claimed_by \
                   AND l.epoch = reel_tape_requests.claim_epoch AND l.holder IS NOT NULL AND l.expires_ms >= $2)";
        let now = now_ms();
        // First retire the leases past their grace. A writer's fenced catalogue transaction
        // holds its lease row FOR SHARE until it commits (on SQLite it holds the write lock),
        // so this waits for one in flight, and any that starts later finds the lease gone:
        // the claims below move only after every copy made under the old lease is committed.
        crate::on_db!(&self.db, |p| sqlx::query(
            "UPDATE reel_leases SET holder = NULL WHERE holder IS NOT NULL AND expires_ms < $1"
        )
        .bind(now - ORPHAN_GRACE_MS)
        .execute(p)
        .await
        .map(|_| ()))
        .map_err(self.db.err("retiring lapsed leases"))?;
        crate::on_db!(&self.db, |p| sqlx::query(sql)
            .bind(now)
            .bind(now - ORPHAN_GRACE_MS)
            .execute(p)
            .await
            .map(|r| r.rows_affected()))
        .map_err(self.db.err("re-queueing orphaned claims"))
    }

    /// The cartridges that queued read requests wait for.
    pub async fn queued_read_barcodes(&self) -> Result<Vec<String>> {
        let sql = "SELECT DISTINCT barcode FROM reel_tape_requests WHERE state = 'queued' AND mode = 'read' AND barcode IS NOT NULL";
        crate::on_db!(&self.db, |p| sqlx::query_scalar(sql).fetch_all(p).await)
            .map_err(self.db.err("listing the cartridges queued reads wait for"))
    }

    /// Queued read requests of a cartridge (to re-route when it is disabled or broken).
    pub async fn queued_reads_of(&self, barcode: &str) -> Result<Vec<TapeRequest>> {
        let sql = format!(
            "SELECT {COLS} FROM reel_tape_requests WHERE state = 'queued' AND mode = 'read' AND barcode = $1 ORDER BY id"
        );
        crate::on_db!(&self.db, |p| {
            let rows = sqlx::query(sqlx::AssertSqlSafe(sql))
                .bind(barcode)
                .fetch_all(p)
                .await
                .map_err(self.db.err("listing queued reads"))?;
            rows.iter()
                .map(|r| decode_request!(r))
                .collect::<std::result::Result<Vec<_>, _>>()
                .map_err(self.db.err("listing queued reads"))
        })
    }

    /// Send a queued read to another copy (another cartridge).
    pub async fn reroute(
        &self,
        id: i64,
        barcode: &str,
        pool: Option<&str>,
        detail: &serde_json::Value,
    ) -> Result<bool> {
        let sql = "UPDATE reel_tape_requests SET barcode = $2, pool = $3, detail = $4, updated_ms = $5 WHERE id = $1 AND state = 'queued' AND mode = 'read'";
        let now = now_ms();
        crate::on_db!(&self.db, |p| sqlx::query(sql)
            .bind(id)
            .bind(barcode)
            .bind(pool)
            .bind(detail.to_string())
            .bind(now)
            .execute(p)
            .await
            .map(|r| r.rows_affected() == 1))
        .map_err(self.db.err("re-routing a read"))
    }

    /// Fail a queued request with a reason (no other copy).
    pub async fn fail_queued(&self, id: i64, reason: &str) -> Result<bool> {
        let sql = "UPDATE reel_tape_requests SET state = 'failed', error = $2, updated_ms = $3 WHERE id = $1 AND state = 'queued'";
        let now = now_ms();
        crate::on_db!(&self.db, |p| sqlx::query(sql)
            .bind(id)
            .bind(reason)
            .bind(now)
            .execute(p)
            .await
            .map(|r| r.rows_affected() == 1))
        .map_err(self.db.err("failing a queued request"))
    }

    /// Drop a job's queued and waiting requests (cancel).
    pub async fn cancel_job(&self, job_id: &str) -> Result<u64> {
        let sql = CANCEL_JOB_REQUESTS;
        let now = now_ms();
        crate::on_db!(&self.db, |p| sqlx::query(sql)
            .bind(job_id)
            .bind(now)
            .execute(p)
            .await
            .map(|r| r.rows_affected()))
        .map_err(self.db.err("cancelling a job's requests"))
    }

    /// Put a job's failed requests back in the queue (`reel jobs retry`).
    pub async fn requeue_failed(&self, job_id: &str) -> Result<u64> {
        let sql = "UPDATE reel_tape_requests SET state = 'queued', error = NULL, claimed_by = NULL, claim_epoch = NULL, \
                   attempts = 0, not_before_ms = 0, updated_ms = $2 WHERE job_id = $1 AND state = 'failed'";
        let now = now_ms();
        crate::on_db!(&self.db, |p| sqlx::query(sql)
            .bind(job_id)
            .bind(now)
            .execute(p)
            .await
            .map(|r| r.rows_affected()))
        .map_err(self.db.err("re-queueing failed requests"))
    }

    /// Up to `limit` of a job's failed requests: (object key, reason), oldest first.
    pub async fn failures(&self, job_id: &str, limit: u32) -> Result<Vec<(String, String)>> {
        let sql = "SELECT object_key, COALESCE(error, '') AS error FROM reel_tape_requests \
                   WHERE job_id = $1 AND state = 'failed' ORDER BY id LIMIT $2";
        crate::on_db!(&self.db, |p| {
            let rows = sqlx::query(sql)
                .bind(job_id)
                .bind(i64::from(limit))
                .fetch_all(p)
                .await
                .map_err(self.db.err("listing a job's failed requests"))?;
            rows.iter()
                .map(|r| Ok((r.try_get("object_key")?, r.try_get("error")?)))
                .collect::<std::result::Result<Vec<_>, sqlx::Error>>()
                .map_err(self.db.err("listing a job's failed requests"))
        })
    }

    /// Counts of a job's requests (its progress).
    pub async fn counts(&self, job_id: &str) -> Result<JobRequestCounts> {
        let sql = "SELECT CAST(COUNT(*) AS BIGINT) AS total, \
                   CAST(COALESCE(SUM(CASE WHEN state = 'done' THEN 1 ELSE 0 END), 0) AS BIGINT) AS done, \
                   CAST(COALESCE(SUM(CASE WHEN state = 'failed' THEN 1 ELSE 0 END), 0) AS BIGINT) AS failed, \
                   CAST(COALESCE(SUM(CASE WHEN state = 'claimed' THEN 1 ELSE 0 END), 0) AS BIGINT) AS claimed, \
                   CAST(COALESCE(SUM(bytes), 0) AS BIGINT) AS bytes_total, \
                   CAST(COALESCE(SUM(CASE WHEN state = 'done' THEN bytes ELSE 0 END), 0) AS BIGINT) AS bytes_done \
                   FROM reel_tape_requests WHERE job_id = $1";
        crate::on_db!(&self.db, |p| {
            let r = sqlx::query(sql)
                .bind(job_id)
                .fetch_one(p)
                .await
                .map_err(self.db.err("counting a job's requests"))?;
            let g = |c: &str| r.try_get::<i64, _>(c).map(|v| v as u64);
            (|| -> std::result::Result<JobRequestCounts, sqlx::Error> {
                Ok(JobRequestCounts {
                    total: g("total")?,
                    done: g("done")?,
                    failed: g("failed")?,
                    claimed: g("claimed")?,
                    bytes_total: g("bytes_total")?,
                    bytes_done: g("bytes_done")?,
                })
            })()
            .map_err(self.db.err("counting a job's requests"))
        })
    }
}

impl From<&TapeRequest> for JobsError {
    fn from(r: &TapeRequest) -> JobsError {
        JobsError::RequestFailed {
            request: r.id,
            key: r.object_key.clone(),
            reason: r.error.clone().unwrap_or_default(),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::db::testdb;
    use crate::job::{JobSpec, RecallJob, RecallSelection};
    use crate::lease::{LeaseManager, drive_resource};
    use crate::store::JobStore;
    use std::collections::BTreeSet;

    fn read_req(barcode: &str, key: &str, bytes: u64, prio: i32) -> NewTapeRequest {
        NewTapeRequest {
            target: MountTarget::Read {
                barcode: barcode.into(),
            },
            pool: Some("p1".into()),
            object_key: key.into(),
            bytes,
            files: 1,
            priority: prio,
            detail: serde_json::json!({"block": 7}),
        }
    }

    async fn job(store: &JobStore) -> String {
        let spec = JobSpec::Recall(RecallJob {
            selection: RecallSelection::Prefix("x".into()),
            destination: "/tmp/d".into(),
            overwrite: Default::default(),
            confine: None,
        });
        store.insert(&spec, 50, 3).await.unwrap().id
    }

    /// 50 jobs × 4 reads over 5 cartridges: 5 summaries; one claim per cartridge takes the
    /// requests of every job for it.
    async fn batching(db: Db) {
        let store = JobStore::new(db.clone());
        let reqs = TapeRequests::new(db.clone());
        for j in 0..50u32 {
            let id = job(&store).await;
            let batch: Vec<_> = (0..4u32)
                .map(|k| read_req(&format!("C{}", (j + k) % 5), &format!("k{j}-{k}"), 1000, 50))
                .collect();
            reqs.add(&id, &batch).await.unwrap();
        }
        let sums = reqs.summaries().await.unwrap();
        assert_eq!(sums.len(), 5);
        assert!(
            sums.iter()
                .all(|s| s.files == 40 && s.bytes == 40_000 && s.pool.as_deref() == Some("p1"))
        );
        let leases = LeaseManager::new(db.clone());
        let fence = leases
            .acquire(&drive_resource("d0"), "w", Duration::from_secs(60))
            .await
            .unwrap();
        let claimed = reqs
            .claim(
                &MountTarget::Read {
                    barcode: "C0".into(),
                },
                &fence,
                ClaimLimit {
                    max_files: 1000,
                    max_bytes: u64::MAX,
                },
            )
            .await
            .unwrap();
        assert_eq!(claimed.len(), 40);
        let jobs: BTreeSet<_> = claimed.iter().map(|r| r.job_id.clone()).collect();
        assert!(jobs.len() > 10, "one claim covers many jobs");
        assert_eq!(reqs.summaries().await.unwrap().len(), 4);
        // Byte cap: at most 3 more (3 × 1000 bytes), the first always taken.
        let capped = reqs
            .claim(
                &MountTarget::Read {
                    barcode: "C1".into(),
                },
                &fence,
                ClaimLimit {
                    max_files: 1000,
                    max_bytes: 2500,
                },
            )
            .await
            .unwrap();
        assert_eq!(capped.len(), 3);
        // Complete under the fence; a stale fence cannot.
        let ids: Vec<i64> = claimed.iter().map(|r| r.id).collect();
        assert_eq!(reqs.complete(&ids, &fence).await.unwrap(), 40);
        let c = reqs.counts(&claimed[0].job_id).await.unwrap();
        assert!(c.done >= 1 && c.total == 4);
        leases.heartbeat(&fence, Duration::ZERO).await.unwrap();
        tokio::time::sleep(Duration::from_millis(5)).await;
        let other = leases
            .acquire(&drive_resource("d0"), "w2", Duration::from_secs(60))
            .await
            .unwrap();
        let capped_ids: Vec<i64> = capped.iter().map(|r| r.id).collect();
        assert!(matches!(
            reqs.complete(&capped_ids, &fence).await,
            Err(JobsError::Fenced { .. })
        ));
        // The old holder's claims are orphaned: back in the queue.
        assert_eq!(reqs.requeue_orphaned_claims().await.unwrap(), 3);
        let again = reqs
            .claim(
                &MountTarget::Read {
                    barcode: "C1".into(),
                },
                &other,
                ClaimLimit {
                    max_files: 1000,
                    max_bytes: u64::MAX,
                },
            )
            .await
            .unwrap();
        assert_eq!(again.len(), 40);
    }

    /// One plan per job: a second runner's plan (after the first recorded its checkpoint) adds
    /// nothing.
    async fn one_plan(db: Db) {
        let store = JobStore::new(db.clone());
        let reqs = TapeRequests::new(db.clone());
        let id = job(&store).await;
        let plan = [read_req("C0", "a", 10, 50), read_req("C0", "b", 10, 50)];
        let cp = serde_json::json!({"planned": true, "requests": 2});
        assert!(reqs.add_plan(&id, &plan, &cp).await.unwrap());
        assert!(!reqs.add_plan(&id, &plan, &cp).await.unwrap());
        assert_eq!(reqs.counts(&id).await.unwrap().total, 2);
        let rec = store.require(&id).await.unwrap();
        assert_eq!(rec.checkpoint, Some(cp));
    }

    #[tokio::test]
    async fn one_plan_per_job_sqlite() {
        one_plan(testdb::sqlite().await.db.clone()).await;
    }

    #[tokio::test]
    async fn one_plan_per_job_postgres() {
        let Some(t) = testdb::postgres("one_plan_per_job").await else {
            return;
        };
        one_plan(t.db.clone()).await;
    }

    /// A write batch's later claims: only its own job's writes to its pool, and what the job
    /// still reads (in progress, or queued) is counted apart.
    async fn writes_of_one_job(db: Db) {
        let store = JobStore::new(db.clone());
        let reqs = TapeRequests::new(db.clone());
        let (a, b) = (job(&store).await, job(&store).await);
        let write = |key: &str| NewTapeRequest {
            target: MountTarget::Write { pool: "p1".into() },
            pool: Some("p1".into()),
            object_key: key.into(),
            bytes: 10,
            files: 1,
            priority: 50,
            detail: serde_json::json!({}),
        };
        reqs.add(
            &a,
            &[
                write("a1"),
                read_req("SRC", "a2", 10, 50),
                read_req("SRC", "a3", 10, 50),
            ],
        )
        .await
        .unwrap();
        reqs.add(&b, &[write("b1")]).await.unwrap();
        let leases = LeaseManager::new(db.clone());
        let f = leases
            .acquire(&drive_resource("d1"), "w1", Duration::from_secs(60))
            .await
            .unwrap();
        let c = reqs.writes_coming(&a, "p1").await.unwrap();
        assert_eq!(
            (c.queued_writes, c.reads_claimed, c.reads_queued),
            (1, 0, 2)
        );
        assert_eq!(c.reads_claimed + c.reads_queued, 2, "reads still to read");
        // A read taken by a drive is in progress.
        let src = MountTarget::Read {
            barcode: "SRC".into(),
        };
        let one = ClaimLimit {
            max_files: 1,
            max_bytes: 100,
        };
        assert_eq!(reqs.claim(&src, &f, one).await.unwrap().len(), 1);
        let c = reqs.writes_coming(&a, "p1").await.unwrap();
        assert_eq!((c.reads_claimed, c.reads_done, c.reads_queued), (1, 0, 1));
        assert_eq!(c.reads_claimed + c.reads_queued, 2, "reads still to read");
        // Job a's claim takes its own write, never b's; another pool's count is none.
        let pool = MountTarget::Write { pool: "p1".into() };
        let limit = ClaimLimit {
            max_files: 10,
            max_bytes: 1000,
        };
        let got = reqs.claim_of_job(&pool, &f, limit, &a).await.unwrap();
        assert_eq!(
            got.iter()
                .map(|r| r.object_key.as_str())
                .collect::<Vec<_>>(),
            ["a1"]
        );
        assert!(
            reqs.claim_of_job(&pool, &f, limit, &a)
                .await
                .unwrap()
                .is_empty()
        );
        assert_eq!(reqs.writes_coming(&a, "p2").await.unwrap().queued_writes, 0);
        assert_eq!(reqs.writes_coming(&b, "p1").await.unwrap().queued_writes, 1);
    }

    #[tokio::test]
    async fn a_batch_claims_only_its_jobs_writes_sqlite() {
        writes_of_one_job(testdb::sqlite().await.db.clone()).await;
    }

    #[tokio::test]
    async fn a_batch_claims_only_its_jobs_writes_postgres() {
        let Some(t) = testdb::postgres("a_batch_claims_only_its_jobs_writes").await else {
            return;
        };
        writes_of_one_job(t.db.clone()).await;
    }

    #[tokio::test]
    async fn batching_and_fenced_claims_sqlite() {
        let t = testdb::sqlite().await;
        batching(t.db.clone()).await;
    }

    #[tokio::test]
    async fn batching_and_fenced_claims_postgres() {
        let Some(t) = testdb::postgres("batching_and_fenced_claims_postgres").await else {
            return;
        };
        batching(t.db.clone()).await;
    }

    /// Two claimers race on the same cartridge queue many times: no request is ever returned
    /// to both, and together they take everything.
    async fn concurrent_claims(db: Db) {
        let store = JobStore::new(db.clone());
        let reqs = TapeRequests::new(db.clone());
        let id = job(&store).await;
        let batch: Vec<_> = (0..200)
            .map(|k| read_req("SHARED", &format!("k{k}"), 10, 50))
            .collect();
        reqs.add(&id, &batch).await.unwrap();
        let leases = LeaseManager::new(db.clone());
        let f1 = leases
            .acquire(&drive_resource("d1"), "w1", Duration::from_secs(60))
            .await
            .unwrap();
        let f2 = leases
            .acquire(&drive_resource("d2"), "w2", Duration::from_secs(60))
            .await
            .unwrap();
        let target = MountTarget::Read {
            barcode: "SHARED".into(),
        };
        let limit = ClaimLimit {
            max_files: 7,
            max_bytes: u64::MAX,
        };
        let run = |fence: Fence| {
            let reqs = reqs.clone();
            let target = target.clone();
            tokio::spawn(async move {
                let mut got = Vec::new();
                loop {
                    let b = reqs.claim(&target, &fence, limit).await.unwrap();
                    if b.is_empty() {
                        break;
                    }
                    got.extend(b.into_iter().map(|r| r.id));
                    tokio::task::yield_now().await;
                }
                got
            })
        };
        let (a, b) = (run(f1), run(f2));
        let (a, b) = (a.await.unwrap(), b.await.unwrap());
        let sa: BTreeSet<_> = a.iter().collect();
        let sb: BTreeSet<_> = b.iter().collect();
        assert_eq!(sa.len(), a.len(), "no duplicates within a claimer");
        assert!(sa.is_disjoint(&sb), "a request was claimed twice");
        assert_eq!(sa.len() + sb.len(), 200, "everything claimed exactly once");
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn concurrent_claims_never_overlap_sqlite() {
        let t = testdb::sqlite().await;
        concurrent_claims(t.db.clone()).await;
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn concurrent_claims_never_overlap_postgres() {
        let Some(t) = testdb::postgres("concurrent_claims_never_overlap_postgres").await else {
            return;
        };
        concurrent_claims(t.db.clone()).await;
    }

    /// The summary as an aggregate over every queued request (what `summaries` computed before
    /// `reel_tape_queues`): (mode, barcode, pool, bytes, files, oldest, priority).
    async fn aggregate(db: &Db) -> Vec<(String, String, String, i64, i64, i64, i64)> {
        let sql = "SELECT mode, COALESCE(barcode, '') AS barcode, COALESCE(MAX(pool), '') AS pool, \
                   CAST(SUM(bytes) AS BIGINT) AS bytes, CAST(SUM(files) AS BIGINT) AS files, \
                   MIN(created_ms) AS oldest, MAX(priority) AS priority \
                   FROM reel_tape_requests WHERE state = 'queued' \
                   GROUP BY mode, COALESCE(barcode, ''), CASE WHEN mode = 'write' THEN pool ELSE '' END \
                   ORDER BY 1, 2, 3";
        crate::on_db!(db, |p| sqlx::query_as(sql).fetch_all(p).await.unwrap())
    }

    /// Every way a request enters or leaves the queue keeps `reel_tape_queues` equal to the
    /// aggregate over the requests themselves.
    async fn summaries_track_every_change(db: Db) {
        let store = JobStore::new(db.clone());
        let reqs = TapeRequests::new(db.clone());
        let check = |label: &'static str| {
            let db = db.clone();
            let reqs = reqs.clone();
            async move {
                let want = aggregate(&db).await;
                let got = reqs.summaries().await.unwrap();
                let got: Vec<_> = got
                    .into_iter()
                    .map(|q| {
                        let (mode, barcode) = match q.target {
                            MountTarget::Read { barcode } => ("read".to_string(), barcode),
                            MountTarget::Write { .. } => ("write".to_string(), String::new()),
                        };
                        (
                            mode,
                            barcode,
                            q.pool.unwrap_or_default(),
                            q.bytes as i64,
                            q.files as i64,
                            q.priority as i64,
                        )
                    })
                    .collect();
                let want: Vec<_> = want
                    .into_iter()
                    .map(|(m, b, p, by, f, _, pr)| (m, b, p, by, f, pr))
                    .collect();
                assert_eq!(got, want, "after {label}");
            }
        };
        let a = job(&store).await;
        let b = job(&store).await;
        let mut batch: Vec<_> = (0..30u32)
            .map(|k| {
                read_req(
                    &format!("C{}", k % 3),
                    &format!("a{k}"),
                    100 + u64::from(k),
                    (k % 7) as i32,
                )
            })
            .collect();
        batch.push(NewTapeRequest {
            target: MountTarget::Write { pool: "p1".into() },
            pool: None,
            object_key: "w0".into(),
            bytes: 9,
            files: 2,
            priority: 3,
            detail: serde_json::Value::Null,
        });
        reqs.add(&a, &batch).await.unwrap();
        let other: Vec<_> = (0..10u32)
            .map(|k| NewTapeRequest {
                pool: None,
                ..read_req("C1", &format!("b{k}"), 5, 9)
            })
            .collect();
        reqs.add(&b, &other).await.unwrap();
        check("add").await;
        let leases = LeaseManager::new(db.clone());
        let fence = leases
            .acquire(&drive_resource("d0"), "w", Duration::from_secs(60))
            .await
            .unwrap();
        let c1 = MountTarget::Read {
            barcode: "C1".into(),
        };
        let claimed = reqs
            .claim(
                &c1,
                &fence,
                ClaimLimit {
                    max_files: 6,
                    max_bytes: u64::MAX,
                },
            )
            .await
            .unwrap();
        assert_eq!(claimed.len(), 6);
        check("claim").await;
        let ids: Vec<i64> = claimed.iter().map(|r| r.id).collect();
        assert_eq!(reqs.unclaim(&ids[..3], &fence).await.unwrap(), 3);
        check("unclaim").await;
        assert_eq!(reqs.complete(&ids[3..], &fence).await.unwrap(), 3);
        check("complete").await;
        let q = reqs.queued_reads_of("C2").await.unwrap();
        assert!(
            reqs.reroute(q[0].id, "C9", Some("p9"), &serde_json::json!({}))
                .await
                .unwrap()
        );
        assert!(reqs.fail_queued(q[1].id, "no copy").await.unwrap());
        check("reroute and fail").await;
        assert!(reqs.cancel_job(&b).await.unwrap() > 0);
        check("cancel").await;
        assert!(reqs.requeue_failed(&b).await.unwrap() > 0);
        check("requeue failed").await;
        crate::on_db!(&db, |p| sqlx::query("DELETE FROM reel_jobs WHERE id = $1")
            .bind(&a)
            .execute(p)
            .await
            .map(|_| ())
            .unwrap());
        check("job deleted").await;
        // Job b's 10 requests, less the 3 completed.
        assert_eq!(
            reqs.summaries()
                .await
                .unwrap()
                .iter()
                .map(|q| q.files)
                .sum::<u64>(),
            7
        );
    }

    #[tokio::test]
    async fn summaries_track_every_change_sqlite() {
        let t = testdb::sqlite().await;
        summaries_track_every_change(t.db.clone()).await;
    }

    #[tokio::test]
    async fn summaries_track_every_change_postgres() {
        let Some(t) = testdb::postgres("summaries_track_every_change_postgres").await else {
            return;
        };
        summaries_track_every_change(t.db.clone()).await;
    }

    async fn reroute_rules(db: Db) {
        let store = JobStore::new(db.clone());
        let reqs = TapeRequests::new(db.clone());
        let id = job(&store).await;
        reqs.add(
            &id,
            &[
                read_req("BROKEN", "a", 5, 50),
                read_req("BROKEN", "b", 5, 50),
            ],
        )
        .await
        .unwrap();
        let q = reqs.queued_reads_of("BROKEN").await.unwrap();
        assert_eq!(q.len(), 2);
        assert!(
            reqs.reroute(
                q[0].id,
                "COPY2",
                Some("p2"),
                &serde_json::json!({"block": 9})
            )
            .await
            .unwrap()
        );
        assert!(reqs.fail_queued(q[1].id, "no other copy").await.unwrap());
        assert!(reqs.queued_reads_of("BROKEN").await.unwrap().is_empty());
        let moved = reqs.queued_reads_of("COPY2").await.unwrap();
        assert_eq!(moved[0].detail["block"], 9);
        let c = reqs.counts(&id).await.unwrap();
        assert_eq!((c.total, c.failed), (2, 1));
    }

    /// A failed attempt waits out its backoff outside the queue summary, comes back when it is
    /// due, fails for good once its attempts are spent; a cancel drops what no drive holds in
    /// the same transaction, and a batch holding the rest drops them.
    async fn attempts_rules(db: Db) {
        let store = JobStore::new(db.clone());
        let reqs = TapeRequests::new(db.clone());
        let leases = LeaseManager::new(db.clone());
        let fence = leases
            .acquire(&drive_resource("d0"), "w", Duration::from_secs(60))
            .await
            .unwrap();
        let c0 = MountTarget::Read {
            barcode: "C0".into(),
        };
        let all = ClaimLimit {
            max_files: 100,
            max_bytes: u64::MAX,
        };
        let id = job(&store).await;
        reqs.add(
            &id,
            &[
                read_req("C0", "a", 5, 50),
                read_req("C0", "b", 5, 50),
                read_req("C0", "c", 5, 50),
            ],
        )
        .await
        .unwrap();
        let got = reqs.claim(&c0, &fence, all).await.unwrap();
        assert_eq!(got.len(), 3);
        let slow = Backoff {
            base: Duration::from_secs(3600),
            max: Duration::from_secs(3600),
        };
        let r = reqs
            .retry(
                &[(got[0].id, "medium error".into()), (got[1].id, "x".into())],
                &fence,
                slow,
                2,
            )
            .await
            .unwrap();
        assert_eq!((r.waiting, r.failed), (2, 0));
        reqs.unclaim(&[got[2].id], &fence).await.unwrap();
        // Waiting requests are not in the summary: only `c` is queued.
        let sums = reqs.summaries().await.unwrap();
        assert_eq!(sums.len(), 1);
        assert_eq!(sums[0].files, 1);
        assert_eq!(
            reqs.release_due().await.unwrap(),
            0,
            "an hour's backoff is not due"
        );
        let c = reqs.counts(&id).await.unwrap();
        assert_eq!((c.total, c.done, c.failed), (3, 0, 0), "waiting is neither");
        // Only `c` can be claimed now.
        let again = reqs.claim(&c0, &fence, all).await.unwrap();
        assert_eq!(again.len(), 1);
        assert_eq!(again[0].object_key, "c");
        assert_eq!(again[0].attempts, 0);
        // A zero backoff is due at once; the second failure spends the two attempts.
        let now = Backoff {
            base: Duration::ZERO,
            max: Duration::ZERO,
        };
        let r = reqs
            .retry(&[(again[0].id, "read error".into())], &fence, now, 2)
            .await
            .unwrap();
        assert_eq!((r.waiting, r.failed), (1, 0));
        assert_eq!(reqs.release_due().await.unwrap(), 1);
        let third = reqs.claim(&c0, &fence, all).await.unwrap();
        assert_eq!(third.len(), 1);
        assert_eq!(third[0].attempts, 1);
        let r = reqs
            .retry(&[(third[0].id, "read error".into())], &fence, now, 2)
            .await
            .unwrap();
        assert_eq!((r.waiting, r.failed), (0, 1));
        let failures = reqs.failures(&id, 10).await.unwrap();
        assert_eq!(failures.len(), 1);
        assert_eq!(failures[0].0, "c");
        assert!(
            failures[0]
                .1
                .contains("gave up after 2 attempt(s): read error"),
            "{failures:?}"
        );
        // A stale fence schedules nothing.
        leases.heartbeat(&fence, Duration::ZERO).await.unwrap();
        tokio::time::sleep(Duration::from_millis(5)).await;
        let other = leases
            .acquire(&drive_resource("d0"), "w2", Duration::from_secs(60))
            .await
            .unwrap();
        assert!(matches!(
            reqs.retry(&[(third[0].id, "x".into())], &fence, now, 2)
                .await,
            Err(JobsError::Fenced { .. })
        ));
        // Cancel: the job's waiting requests are dropped with the cancel itself.
        let id2 = job(&store).await;
        reqs.add(
            &id2,
            &[read_req("C1", "d", 5, 50), read_req("C1", "e", 5, 50)],
        )
        .await
        .unwrap();
        let c1 = MountTarget::Read {
            barcode: "C1".into(),
        };
        let held = reqs
            .claim(
                &c1,
                &other,
                ClaimLimit {
                    max_files: 1,
                    max_bytes: u64::MAX,
                },
            )
            .await
            .unwrap();
        assert_eq!(held.len(), 1);
        store.request_cancel(&id2).await.unwrap();
        assert!(reqs.claim(&c1, &other, all).await.unwrap().is_empty());
        assert_eq!(reqs.drop_cancelled(&[held[0].id], &other).await.unwrap(), 1);
        let c = reqs.counts(&id2).await.unwrap();
        assert_eq!((c.total, c.failed), (2, 2));
        assert!(
            reqs.summaries()
                .await
                .unwrap()
                .iter()
                .all(|s| s.files == 0 || s.target != c1)
        );
    }

    #[tokio::test]
    async fn attempts_sqlite() {
        let t = testdb::sqlite().await;
        attempts_rules(t.db.clone()).await;
    }

    #[tokio::test]
    async fn attempts_postgres() {
        let Some(t) = testdb::postgres("attempts_postgres").await else {
            return;
        };
        attempts_rules(t.db.clone()).await;
    }

    #[tokio::test]
    async fn reroute_sqlite() {
        let t = testdb::sqlite().await;
        reroute_rules(t.db.clone()).await;
    }

    #[tokio::test]
    async fn reroute_postgres() {
        let Some(t) = testdb::postgres("reroute_postgres").await else {
            return;
        };
        reroute_rules(t.db.clone()).await;
    }

    /// A claim whose lease lapsed moves back to the queue only [`ORPHAN_GRACE_MS`] after the
    /// expiry (a writer's fenced transaction may still be committing); one whose lease was
    /// released or taken again moves at once.
    async fn orphan_grace_rules(db: Db) {
        let store = JobStore::new(db.clone());
        let reqs = TapeRequests::new(db.clone());
        let id = job(&store).await;
        reqs.add(
            &id,
            &[read_req("C0", "k0", 10, 50), read_req("C0", "k1", 10, 50)],
        )
        .await
        .unwrap();
        let leases = LeaseManager::new(db.clone());
        let fence = leases
            .acquire(&drive_resource("d0"), "w", Duration::from_secs(60))
            .await
            .unwrap();
        let target = MountTarget::Read {
            barcode: "C0".into(),
        };
        let all = ClaimLimit {
            max_files: 1000,
            max_bytes: u64::MAX,
        };
        assert_eq!(reqs.claim(&target, &fence, all).await.unwrap().len(), 2);
        let expire = |ago_ms: i64| {
            let db = db.clone();
            async move {
                crate::on_db!(&db, |p| sqlx::query(
                    "UPDATE reel_leases SET expires_ms = $1 WHERE resource = 'drive:d0'"
                )
                .bind(now_ms() - ago_ms)
                .execute(p)
                .await
                .map(|_| ()))
                .unwrap();
            }
        };
        expire(ORPHAN_GRACE_MS / 2).await;
        assert_eq!(
            reqs.requeue_orphaned_claims().await.unwrap(),
            0,
            "within the grace"
        );
        expire(ORPHAN_GRACE_MS + 1_000).await;
        assert_eq!(
            reqs.requeue_orphaned_claims().await.unwrap(),
            2,
            "past the grace"
        );
        // Released: at once.
        let fence = leases
            .acquire(&drive_resource("d0"), "w", Duration::from_secs(60))
            .await
            .unwrap();
        assert_eq!(reqs.claim(&target, &fence, all).await.unwrap().len(), 2);
        leases.release(&fence).await.unwrap();
        assert_eq!(reqs.requeue_orphaned_claims().await.unwrap(), 2, "released");
    }

    /// A failed step's claims go back to the queue, except those of a job cancelled meanwhile,
    /// which are dropped; claims under another lease are left alone.
    async fn release_claims_rules(db: Db) {
        let store = JobStore::new(db.clone());
        let reqs = TapeRequests::new(db.clone());
        let (kept, cancelled, other) = (job(&store).await, job(&store).await, job(&store).await);
        reqs.add(&kept, &[read_req("C0", "a", 10, 50)])
            .await
            .unwrap();
        reqs.add(&cancelled, &[read_req("C0", "b", 10, 50)])
            .await
            .unwrap();
        reqs.add(&other, &[read_req("C1", "c", 10, 50)])
            .await
            .unwrap();
        let leases = LeaseManager::new(db.clone());
        let ttl = Duration::from_secs(60);
        let fence = leases
            .acquire(&drive_resource("d0"), "w", ttl)
            .await
            .unwrap();
        let fence1 = leases
            .acquire(&drive_resource("d1"), "w", ttl)
            .await
            .unwrap();
        let limit = ClaimLimit {
            max_files: 10,
            max_bytes: u64::MAX,
        };
        let read = |b: &str| MountTarget::Read { barcode: b.into() };
        assert_eq!(
            reqs.claim(&read("C0"), &fence, limit).await.unwrap().len(),
            2
        );
        let on_d1 = reqs.claim(&read("C1"), &fence1, limit).await.unwrap();
        assert_eq!(on_d1.len(), 1);
        store.request_cancel(&cancelled).await.unwrap();
        assert_eq!(reqs.release_claims(&fence).await.unwrap(), 2);
        let sums = reqs.summaries().await.unwrap();
        assert_eq!(sums.len(), 1, "{sums:?}");
        assert_eq!((sums[0].target.clone(), sums[0].files), (read("C0"), 1));
        assert_eq!(reqs.counts(&cancelled).await.unwrap().failed, 1);
        assert_eq!(
            reqs.failures(&cancelled, 10).await.unwrap()[0].1,
            "cancelled"
        );
        assert_eq!(reqs.counts(&other).await.unwrap().failed, 0);
        // Nothing left under the first lease; the other drive's claim stands.
        assert_eq!(reqs.release_claims(&fence).await.unwrap(), 0);
        assert_eq!(reqs.complete(&[on_d1[0].id], &fence1).await.unwrap(), 1);
    }

    #[tokio::test]
    async fn release_claims_sqlite() {
        let t = testdb::sqlite().await;
        release_claims_rules(t.db.clone()).await;
    }

    #[tokio::test]
    async fn release_claims_postgres() {
        let Some(t) = testdb::postgres("release_claims_postgres").await else {
            return;
        };
        release_claims_rules(t.db.clone()).await;
    }

    #[tokio::test]
    async fn orphan_grace_sqlite() {
        let t = testdb::sqlite().await;
        orphan_grace_rules(t.db.clone()).await;
    }

    #[tokio::test]
    async fn orphan_grace_postgres() {
        let Some(t) = testdb::postgres("orphan_grace_postgres").await else {
            return;
        };
        orphan_grace_rules(t.db.clone()).await;
    }
}
