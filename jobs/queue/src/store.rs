//! reel's job records: the mirror of every job with what apalis does not keep (progress,
//! checkpoint, cancel request, persisted retry time, result).

use std::time::Duration;

use serde::Serialize;
use sqlx::Row;

use crate::db::BeginWrite;
use crate::db::{Db, now_ms};
use crate::error::{JobsError, Result};
use crate::job::{JobKind, JobSpec, JobState};
use crate::on_db;

/// One job as reel records it.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct JobRecord {
    /// Job id (UUID).
    pub id: String,
    /// Kind.
    pub kind: JobKind,
    /// What was asked.
    pub spec: JobSpec,
    /// State.
    pub state: JobState,
    /// Higher first.
    pub priority: i32,
    /// Attempts started so far.
    pub attempts: u32,
    /// Attempts allowed.
    pub max_attempts: u32,
    /// Not to be started before this time (unix ms): the persisted retry backoff.
    pub not_before_ms: i64,
    /// Worker running it (or that ran it last).
    pub worker: Option<String>,
    /// The apalis task carrying the current attempt.
    pub apalis_task_id: Option<String>,
    /// Progress.
    pub progress: Progress,
    /// Last checkpoint saved by the handler (resume point after a crash).
    pub checkpoint: Option<serde_json::Value>,
    /// A user asked to cancel; the handler stops at its next record boundary.
    pub cancel_requested: bool,
    /// Result of a finished job.
    pub result: Option<serde_json::Value>,
    /// Last error.
    pub error: Option<String>,
    /// Created (unix ms).
    pub created_ms: i64,
    /// Last change (unix ms).
    pub updated_ms: i64,
    /// When it reached a final state (unix ms).
    pub finished_ms: Option<i64>,
    /// The API token that submitted it ([`crate::token`]); `None` for the `reel` command.
    pub token_id: Option<String>,
}

/// Objects and bytes done out of the totals known so far.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize)]
pub struct Progress {
    /// Objects finished.
    pub objects_done: u64,
    /// Objects in the job.
    pub objects_total: u64,
    /// Bytes finished.
    pub bytes_done: u64,
    /// Bytes in the job.
    pub bytes_total: u64,
}

/// A running job as the worker finishes it (see [`JobStore::running`]).
#[derive(Debug, Clone, PartialEq)]
pub struct RunningJob {
    /// Job id.
    pub id: String,
    /// Kind.
    pub kind: JobKind,
    /// Progress recorded.
    pub progress: Progress,
    /// Its tape requests are planned (checkpoint `{"planned": true}`).
    pub planned: bool,
    /// A user asked to cancel it.
    pub cancel_requested: bool,
}

/// Which jobs a list shows.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct JobFilter {
    /// Only jobs in this state.
    pub state: Option<JobState>,
    /// Only jobs this token submitted.
    pub token_id: Option<String>,
    /// Only jobs after this one in the list's order (its `created_ms` and id): the cursor.
    pub after: Option<(i64, String)>,
}

/// What happened when a worker tried to start an attempt.
#[derive(Debug, Clone, PartialEq)]
pub enum StartOutcome {
    /// Run it; `resume` holds the checkpoint of an earlier, interrupted attempt.
    Run {
        /// The record after the start.
        record: Box<JobRecord>,
    },
    /// A cancel was requested before the start; the job is now cancelled.
    Cancelled,
    /// Already final (a duplicate delivery); nothing to do.
    AlreadyFinal(JobState),
    /// The delivery is not the job's current apalis task (a duplicate push); ignore it.
    Stale,
    /// Its retry time has not come (a stale or early delivery).
    NotYet {
        /// When it may start.
        not_before_ms: i64,
    },
}

/// What happened to a failed attempt.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum FailOutcome {
    /// Queued again, not before this time.
    Retry {
        /// Unix ms.
        not_before_ms: i64,
        /// The delay chosen.
        delay: Duration,
    },
    /// Attempts exhausted or the error is permanent: failed for good.
    Failed,
    /// Cancel was requested meanwhile: cancelled.
    Cancelled,
}

/// How many characters of a job id the CLI shows; [`JobStore::resolve`] takes them back.
pub const SHORT_ID: usize = 8;

const COLUMNS: &str = "id, kind, spec, state, priority, attempts, max_attempts, not_before, worker, apalis_task_id, \
    objects_done, objects_total, bytes_done, bytes_total, checkpoint, cancel_requested, result, error, \
    created_ms, updated_ms, finished_ms, token_id";

/// Access to the job records.
#[derive(Clone, Debug)]
pub struct JobStore {
    db: Db,
}

fn decode<R: Row>(row: &R) -> std::result::Result<JobRecord, JobsError>
where
    for<'a> &'a str: sqlx::ColumnIndex<R>,
    for<'a> String: sqlx::Decode<'a, R::Database> + sqlx::Type<R::Database>,
    for<'a> Option<String>: sqlx::Decode<'a, R::Database> + sqlx::Type<R::Database>,
    for<'a> i64: sqlx::Decode<'a, R::Database> + sqlx::Type<R::Database>,
    for<'a> Option<i64>: sqlx::Decode<'a, R::Database> + sqlx::Type<R::Database>,
{
    let get_err = |e: sqlx::Error| JobsError::Database {
        backend: "sql",
        location: "the job table".into(),
        doing: "decoding a job row".into(),
        source: e,
    };
    let id: String = row.try_get("id").map_err(get_err)?;
    let bad = |what: String| JobsError::BadJobState {
        id: id.clone(),
        state: what,
        hint: "the row was edited by hand; fix or delete it".into(),
    };
    let kind: String = row.try_get("kind").map_err(get_err)?;
    let state: String = row.try_get("state").map_err(get_err)?;
    let spec: String = row.try_get("spec").map_err(get_err)?;
    let json = |s: Option<String>| s.and_then(|s| serde_json::from_str(&s).ok());
    Ok(JobRecord {
        kind: kind.parse().map_err(bad)?,
        state: state.parse().map_err(bad)?,
        spec: serde_json::from_str(&spec).map_err(|source| JobsError::Payload {
            id: id.clone(),
            source,
        })?,
        priority: row.try_get::<i64, _>("priority").map_err(get_err)? as i32,
        attempts: row.try_get::<i64, _>("attempts").map_err(get_err)? as u32,
        max_attempts: row.try_get::<i64, _>("max_attempts").map_err(get_err)? as u32,
        not_before_ms: row.try_get("not_before").map_err(get_err)?,
        worker: row.try_get("worker").map_err(get_err)?,
        apalis_task_id: row.try_get("apalis_task_id").map_err(get_err)?,
        progress: Progress {
            objects_done: row.try_get::<i64, _>("objects_done").map_err(get_err)? as u64,
            objects_total: row.try_get::<i64, _>("objects_total").map_err(get_err)? as u64,
            bytes_done: row.try_get::<i64, _>("bytes_done").map_err(get_err)? as u64,
            bytes_total: row.try_get::<i64, _>("bytes_total").map_err(get_err)? as u64,
        },
        checkpoint: json(row.try_get("checkpoint").map_err(get_err)?),
        cancel_requested: row.try_get::<i64, _>("cancel_requested").map_err(get_err)? != 0,
        result: json(row.try_get("result").map_err(get_err)?),
        error: row.try_get("error").map_err(get_err)?,
        created_ms: row.try_get("created_ms").map_err(get_err)?,
        updated_ms: row.try_get("updated_ms").map_err(get_err)?,
        finished_ms: row.try_get("finished_ms").map_err(get_err)?,
        token_id: row.try_get("token_id").map_err(get_err)?,
        id,
    })
}

impl JobStore {
    /// Records on this database.
    pub fn new(db: Db) -> JobStore {
        JobStore { db }
    }

    /// The database.
    pub fn db(&self) -> &Db {
        &self.db
    }

    /// Record a new queued job.
    pub async fn insert(
        &self,
        spec: &JobSpec,
        priority: i32,
        max_attempts: u32,
    ) -> Result<JobRecord> {
        self.insert_for(spec, priority, max_attempts, None).await
    }

    /// Record a new queued job submitted with an API token (`None`: the `reel` command).
    pub async fn insert_for(
        &self,
        spec: &JobSpec,
        priority: i32,
        max_attempts: u32,
        token_id: Option<&str>,
    ) -> Result<JobRecord> {
        let id = uuid::Uuid::new_v4().to_string();
        let now = now_ms();
        let spec_json = serde_json::to_string(spec).map_err(|source| JobsError::Payload {
            id: id.clone(),
            source,
        })?;
        let sql = "INSERT INTO reel_jobs (id, kind, spec, state, priority, attempts, max_attempts, not_before, created_ms, updated_ms, token_id) \
                   VALUES ($1, $2, $3, 'queued', $4, 0, $5, $6, $6, $6, $7)";
        on_db!(&self.db, |p| sqlx::query(sql)
            .bind(&id)
            .bind(spec.kind().as_str())
            .bind(&spec_json)
            .bind(priority as i64)
            .bind(max_attempts as i64)
            .bind(now)
            .bind(token_id)
            .execute(p)
            .await
            .map(|_| ()))
        .map_err(self.db.err("recording a new job"))?;
        self.get(&id).await?.ok_or(JobsError::NoSuchJob(id))
    }

    /// One job.
    pub async fn get(&self, id: &str) -> Result<Option<JobRecord>> {
        let sql = format!("SELECT {COLUMNS} FROM reel_jobs WHERE id = $1");
        on_db!(&self.db, |p| {
            let row = sqlx::query(sqlx::AssertSqlSafe(sql.clone()))
                .bind(id)
                .fetch_optional(p)
                .await
                .map_err(self.db.err("reading a job"))?;
            row.as_ref().map(decode).transpose()
        })
    }

    /// One job, or [`JobsError::NoSuchJob`].
    pub async fn require(&self, id: &str) -> Result<JobRecord> {
        self.get(id)
            .await?
            .ok_or_else(|| JobsError::NoSuchJob(id.to_string()))
    }

    /// The whole id of the job `id` names: the id itself, or the one job whose id starts with
    /// it (as the CLI shows ids: their first [`SHORT_ID`] characters). Refused when several
    /// jobs start with it; [`JobsError::NoSuchJob`] when none does.
    pub async fn resolve(&self, id: &str) -> Result<String> {
        if self.get(id).await?.is_some() {
            return Ok(id.to_string());
        }
        // Only what ids are made of: no LIKE wildcard can reach the pattern.
        if id.len() > 36 || !id.chars().all(|c| c.is_ascii_hexdigit() || c == '-') {
            return Err(JobsError::NoSuchJob(id.to_string()));
        }
        if id.len() < 4 {
            return Err(JobsError::Refused {
                what: format!("`{id}` is too short to name a job"),
                hint: "give at least 4 characters of its id (`reel jobs list` shows 8)".into(),
            });
        }
        let sql = "SELECT id FROM reel_jobs WHERE id LIKE $1 ORDER BY id LIMIT 2";
        let pattern = format!("{}%", id.to_ascii_lowercase());
        let ids: Vec<String> = on_db!(&self.db, |p| sqlx::query_scalar(sql)
            .bind(&pattern)
            .fetch_all(p)
            .await)
        .map_err(self.db.err("finding a job by the start of its id"))?;
        match ids.as_slice() {
            [one] => Ok(one.clone()),
            [] => Err(JobsError::NoSuchJob(id.to_string())),
            _ => Err(JobsError::Refused {
                what: format!("several jobs have ids starting with {id}"),
                hint: "give more of the id (`reel jobs list --json` shows them whole)".into(),
            }),
        }
    }

    /// Jobs, newest first, optionally of one state.
    pub async fn list(&self, state: Option<JobState>, limit: u32) -> Result<Vec<JobRecord>> {
        self.page(
            &JobFilter {
                state,
                ..JobFilter::default()
            },
            limit,
        )
        .await
    }

    /// One page of jobs, newest first: those `filter` selects, after its cursor.
    pub async fn page(&self, filter: &JobFilter, limit: u32) -> Result<Vec<JobRecord>> {
        let sql = format!(
            "SELECT {COLUMNS} FROM reel_jobs WHERE ($1 = '' OR state = $1) AND ($2 = '' OR token_id = $2) \
             AND ($3 < 0 OR created_ms < $3 OR (created_ms = $3 AND id > $4)) \
             ORDER BY created_ms DESC, id LIMIT $5"
        );
        let st = filter.state.map(|s| s.as_str()).unwrap_or("");
        let token = filter.token_id.as_deref().unwrap_or("");
        let (after_ms, after_id) = match &filter.after {
            Some((ms, id)) => (*ms, id.as_str()),
            None => (-1, ""),
        };
        on_db!(&self.db, |p| {
            let rows = sqlx::query(sqlx::AssertSqlSafe(sql.clone()))
                .bind(st)
                .bind(token)
                .bind(after_ms)
                .bind(after_id)
                .bind(limit as i64)
                .fetch_all(p)
                .await
                .map_err(self.db.err("listing jobs"))?;
            rows.iter().map(decode).collect()
        })
    }

    /// Ids of the jobs a token submitted that have not finished (to cancel when it is revoked).
    pub async fn unfinished_of_token(&self, token_id: &str) -> Result<Vec<String>> {
        let sql = "SELECT id FROM reel_jobs WHERE token_id = $1 AND state IN ('queued','running') ORDER BY created_ms";
        on_db!(&self.db, |p| {
            let rows = sqlx::query(sql)
                .bind(token_id)
                .fetch_all(p)
                .await
                .map_err(self.db.err("listing a token's jobs"))?;
            rows.iter()
                .map(|r| {
                    r.try_get::<String, _>("id")
                        .map_err(self.db.err("listing a token's jobs"))
                })
                .collect()
        })
    }

    /// A job's state and progress, without its spec: for waiters that poll.
    pub async fn status(&self, id: &str) -> Result<Option<(JobState, Progress)>> {
        let sql = "SELECT state, objects_done, objects_total, bytes_done, bytes_total FROM reel_jobs WHERE id = $1";
        let row = on_db!(&self.db, |p| {
            let row = sqlx::query(sql)
                .bind(id)
                .fetch_optional(p)
                .await
                .map_err(self.db.err("reading a job's state"))?;
            row.map(|row| {
                let get = |c: &str| row.try_get::<i64, _>(c).map(|v| v as u64);
                Ok::<_, sqlx::Error>((
                    row.try_get::<String, _>("state")?,
                    Progress {
                        objects_done: get("objects_done")?,
                        objects_total: get("objects_total")?,
                        bytes_done: get("bytes_done")?,
                        bytes_total: get("bytes_total")?,
                    },
                ))
            })
            .transpose()
            .map_err(self.db.err("reading a job's state"))
        })?;
        row.map(|(state, p)| {
            state
                .parse()
                .map(|s| (s, p))
                .map_err(|what| JobsError::BadJobState {
                    id: id.to_string(),
                    state: what,
                    hint: "the row was edited by hand; fix or delete it".into(),
                })
        })
        .transpose()
    }

    /// `(kind, state, count)` over every job (for `/metrics`).
    pub async fn counts(&self) -> Result<Vec<(String, String, i64)>> {
        let db = &self.db;
        let sql = "SELECT kind, state, COUNT(*) AS n FROM reel_jobs GROUP BY kind, state";
        on_db!(db, |p| {
            let rows = sqlx::query(sql)
                .fetch_all(p)
                .await
                .map_err(db.err("counting jobs"))?;
            rows.iter()
                .map(|r| {
                    Ok((
                        r.try_get::<String, _>("kind")?,
                        r.try_get::<String, _>("state")?,
                        r.try_get::<i64, _>("n")?,
                    ))
                })
                .collect::<std::result::Result<Vec<_>, sqlx::Error>>()
                .map_err(db.err("counting jobs"))
        })
    }

    /// The running jobs, with only what finishing them needs: no spec (a job's spec can name
    /// a million objects, and this runs after every drive batch and on every heartbeat).
    pub async fn running(&self, limit: u32) -> Result<Vec<RunningJob>> {
        let sql = "SELECT id, kind, objects_done, objects_total, bytes_done, bytes_total, checkpoint, cancel_requested \
                   FROM reel_jobs WHERE state = 'running' ORDER BY created_ms, id LIMIT $1";
        on_db!(&self.db, |p| {
            let rows = sqlx::query(sql)
                .bind(limit as i64)
                .fetch_all(p)
                .await
                .map_err(self.db.err("listing running jobs"))?;
            rows.iter()
                .map(|row| {
                    let get = |c: &str| row.try_get::<i64, _>(c);
                    let id: String = row.try_get("id")?;
                    let kind: String = row.try_get("kind")?;
                    let checkpoint: Option<String> = row.try_get("checkpoint")?;
                    Ok((
                        id,
                        kind,
                        Progress {
                            objects_done: get("objects_done")? as u64,
                            objects_total: get("objects_total")? as u64,
                            bytes_done: get("bytes_done")? as u64,
                            bytes_total: get("bytes_total")? as u64,
                        },
                        checkpoint,
                        get("cancel_requested")? != 0,
                    ))
                })
                .collect::<std::result::Result<Vec<_>, sqlx::Error>>()
                .map_err(self.db.err("listing running jobs"))
        })?
        .into_iter()
        .map(|(id, kind, progress, checkpoint, cancel_requested)| {
            Ok(RunningJob {
                kind: kind.parse().map_err(|what| JobsError::BadJobState {
                    id: id.clone(),
                    state: what,
                    hint: "the row was edited by hand; fix or delete it".into(),
                })?,
                planned: checkpoint
                    .and_then(|s| serde_json::from_str::<serde_json::Value>(&s).ok())
                    .and_then(|c| c.get("planned").and_then(|v| v.as_bool()))
                    .unwrap_or(false),
                id,
                progress,
                cancel_requested,
            })
        })
        .collect()
    }

    /// Link the apalis task carrying the job's next attempt, if none is linked yet.
    /// Returns false when another push won (the caller's ticket is then stale and ignored).
    pub async fn link_apalis_task(&self, id: &str, task_id: &str) -> Result<bool> {
        let n = self
            .exec(
                "linking the apalis task",
                "UPDATE reel_jobs SET apalis_task_id = $2, updated_ms = $3 WHERE id = $1 AND apalis_task_id IS NULL",
                id,
                |q| q.bind_str(task_id).bind_i64(now_ms()),
            )
            .await?;
        Ok(n == 1)
    }

    /// Forget the linked apalis task (it was consumed without running the job), so that
    /// [`crate::JobQueue::reconcile`] pushes a new one.
    pub async fn unlink_apalis_task(&self, id: &str, task_id: &str) -> Result<()> {
        self.exec(
            "unlinking the apalis task",
            "UPDATE reel_jobs SET apalis_task_id = NULL, updated_ms = $3 WHERE id = $1 AND apalis_task_id = $2 AND state = 'queued'",
            id,
            |q| q.bind_str(task_id).bind_i64(now_ms()),
        )
        .await
        .map(|_| ())
    }

    /// Start an attempt on `worker`: atomically checks cancel, final state and retry time.
    /// `task_id` is the apalis task delivering it: a delivery of any other task is stale. A job
    /// with no task linked yet takes this one: a submission pushes its ticket before it links
    /// it, and a worker quick enough to receive the ticket in between used to drop it as
    /// stale, leaving the job queued until the stale-ticket sweep re-pushed it (seen under
    /// load as a recall queued for two minutes).
    pub async fn start(&self, id: &str, worker: &str, task_id: &str) -> Result<StartOutcome> {
        let now = now_ms();
        // Cancel requested before start: cancel now.
        let n = self
            .exec(
                "cancelling before start",
                "UPDATE reel_jobs SET state = 'cancelled', finished_ms = $2, updated_ms = $2 \
                 WHERE id = $1 AND cancel_requested <> 0 AND state IN ('queued','running')",
                id,
                |q| q.bind_i64(now),
            )
            .await?;
        if n == 1 {
            return Ok(StartOutcome::Cancelled);
        }
        let n = self
            .exec(
                "starting a job",
                "UPDATE reel_jobs SET state = 'running', attempts = attempts + 1, worker = $2, updated_ms = $3, \
                 apalis_task_id = $4 \
                 WHERE id = $1 AND state IN ('queued','running') AND not_before <= $3 \
                 AND (apalis_task_id = $4 OR apalis_task_id IS NULL)",
                id,
                |q| q.bind_str(worker).bind_i64(now).bind_str(task_id),
            )
            .await?;
        let record = self.require(id).await?;
        if n == 1 {
            return Ok(StartOutcome::Run {
                record: Box::new(record),
            });
        }
        if record.state.is_final() {
            Ok(StartOutcome::AlreadyFinal(record.state))
        } else if record.apalis_task_id.as_deref() != Some(task_id) {
            Ok(StartOutcome::Stale)
        } else {
            Ok(StartOutcome::NotYet {
                not_before_ms: record.not_before_ms,
            })
        }
    }

    /// Record progress (totals may grow as the job learns its size).
    pub async fn set_progress(&self, id: &str, p: Progress) -> Result<()> {
        let sql = "UPDATE reel_jobs SET objects_done = $2, objects_total = $3, bytes_done = $4, bytes_total = $5, updated_ms = $6 WHERE id = $1 AND state = 'running'";
        on_db!(&self.db, |pool| sqlx::query(sql)
            .bind(id)
            .bind(p.objects_done as i64)
            .bind(p.objects_total as i64)
            .bind(p.bytes_done as i64)
            .bind(p.bytes_total as i64)
            .bind(now_ms())
            .execute(pool)
            .await
            .map(|_| ()))
        .map_err(self.db.err("recording progress"))
    }

    /// Save a checkpoint: where to resume after a crash.
    pub async fn set_checkpoint(&self, id: &str, checkpoint: &serde_json::Value) -> Result<()> {
        let text = checkpoint.to_string();
        self.exec(
            "saving a checkpoint",
            "UPDATE reel_jobs SET checkpoint = $2, updated_ms = $3 WHERE id = $1",
            id,
            |q| q.bind_str(&text).bind_i64(now_ms()),
        )
        .await
        .map(|_| ())
    }

    /// True when a user asked to cancel.
    pub async fn cancel_requested(&self, id: &str) -> Result<bool> {
        Ok(self.require(id).await?.cancel_requested)
    }

    /// Finish successfully.
    pub async fn finish(&self, id: &str, result: &serde_json::Value) -> Result<()> {
        let text = result.to_string();
        let now = now_ms();
        self.exec(
            "finishing a job",
            "UPDATE reel_jobs SET state = 'done', result = $2, error = NULL, finished_ms = $3, updated_ms = $3 WHERE id = $1 AND state = 'running'",
            id,
            |q| q.bind_str(&text).bind_i64(now),
        )
        .await
        .map(|_| ())
    }

    /// Mark a running job cancelled (the handler saw the request and stopped).
    pub async fn mark_cancelled(&self, id: &str) -> Result<()> {
        let now = now_ms();
        self.exec(
            "cancelling a job",
            "UPDATE reel_jobs SET state = 'cancelled', finished_ms = $2, updated_ms = $2 WHERE id = $1 AND state IN ('queued','running')",
            id,
            |q| q.bind_i64(now),
        )
        .await
        .map(|_| ())
    }

    /// A failed attempt: queue again after `delay` if attempts remain and `retryable`, else fail.
    /// An attempt that is not `counted` (the database connection was lost under it: nothing
    /// about the job failed) is queued again without using up one of `max_attempts`.
    pub async fn fail_attempt(
        &self,
        id: &str,
        error: &str,
        retryable: bool,
        counted: bool,
        delay: Duration,
    ) -> Result<FailOutcome> {
        let rec = self.require(id).await?;
        let now = now_ms();
        if rec.cancel_requested {
            self.mark_cancelled(id).await?;
            return Ok(FailOutcome::Cancelled);
        }
        if retryable && (rec.attempts < rec.max_attempts || !counted) {
            let not_before_ms = now + delay.as_millis() as i64;
            let sql = if counted {
                "UPDATE reel_jobs SET state = 'queued', error = $2, not_before = $3, apalis_task_id = NULL, updated_ms = $4 WHERE id = $1 AND state = 'running'"
            } else {
                "UPDATE reel_jobs SET state = 'queued', error = $2, not_before = $3, apalis_task_id = NULL, updated_ms = $4, \
                 attempts = CASE WHEN attempts > 0 THEN attempts - 1 ELSE 0 END WHERE id = $1 AND state = 'running'"
            };
            self.exec("scheduling a retry", sql, id, |q| {
                q.bind_str(error).bind_i64(not_before_ms).bind_i64(now)
            })
            .await?;
            Ok(FailOutcome::Retry {
                not_before_ms,
                delay,
            })
        } else {
            self.exec(
                "failing a job",
                "UPDATE reel_jobs SET state = 'failed', error = $2, finished_ms = $3, updated_ms = $3 WHERE id = $1 AND state = 'running'",
                id,
                |q| q.bind_str(error).bind_i64(now),
            )
            .await?;
            Ok(FailOutcome::Failed)
        }
    }

    /// A running attempt interrupted by shutdown: queued again at once, keeping its checkpoint.
    /// The attempt does not count against `max_attempts`.
    pub async fn requeue_interrupted(&self, id: &str) -> Result<()> {
        let now = now_ms();
        self.exec(
            "re-queueing an interrupted job",
            "UPDATE reel_jobs SET state = 'queued', attempts = CASE WHEN attempts > 0 THEN attempts - 1 ELSE 0 END, \
             not_before = $2, apalis_task_id = NULL, updated_ms = $2 WHERE id = $1 AND state = 'running'",
            id,
            |q| q.bind_i64(now),
        )
        .await
        .map(|_| ())
    }

    /// A running job that never planned its tape requests and whose runner is gone: no live
    /// holder of its job lease (`lease_resource`) since before `gone_before_ms`. Its runner's
    /// last bookkeeping failed (a lost database connection), so its ticket ended without
    /// recording the attempt; queued again at once, the attempt not counted. True if this
    /// call queued it (one worker of many does).
    pub async fn requeue_orphan(
        &self,
        id: &str,
        lease_resource: &str,
        gone_before_ms: i64,
    ) -> Result<bool> {
        let now = now_ms();
        self.exec(
            "re-queueing a job whose runner is gone",
            "UPDATE reel_jobs SET state = 'queued', attempts = CASE WHEN attempts > 0 THEN attempts - 1 ELSE 0 END, \
             not_before = $2, apalis_task_id = NULL, updated_ms = $2 \
             WHERE id = $1 AND state = 'running' AND checkpoint IS NULL AND updated_ms < $4 \
             AND NOT EXISTS (SELECT 1 FROM reel_leases WHERE resource = $3 AND holder IS NOT NULL AND expires_ms >= $4)",
            id,
            |q| q.bind_i64(now).bind_str(lease_resource).bind_i64(gone_before_ms),
        )
        .await
        .map(|n| n == 1)
    }

    /// Ask to cancel. A queued job is cancelled at once; a running one at its next record boundary.
    pub async fn request_cancel(&self, id: &str) -> Result<JobRecord> {
        let rec = self.require(id).await?;
        if rec.state.is_final() {
            return Err(JobsError::BadJobState {
                id: id.into(),
                state: rec.state.to_string(),
                hint: "it already finished; nothing to cancel".into(),
            });
        }
        let now = now_ms();
        // One transaction: once the cancel is recorded, no drive can claim the job's queued
        // or waiting requests (a batch already holding some drops them at its end).
        const DOING: &str = "requesting cancel";
        on_db!(&self.db, |p| {
            let mut tx = p.begin_write().await.map_err(self.db.err(DOING))?;
            sqlx::query(
                "UPDATE reel_jobs SET cancel_requested = 1, updated_ms = $2, \
                 state = CASE WHEN state = 'queued' THEN 'cancelled' ELSE state END, \
                 finished_ms = CASE WHEN state = 'queued' THEN $2 ELSE finished_ms END \
                 WHERE id = $1",
            )
            .bind(id)
            .bind(now)
            .execute(&mut *tx)
            .await
            .map_err(self.db.err(DOING))?;
            sqlx::query(crate::requests::CANCEL_JOB_REQUESTS)
                .bind(id)
                .bind(now)
                .execute(&mut *tx)
                .await
                .map_err(self.db.err(DOING))?;
            tx.commit().await.map_err(self.db.err(DOING))?;
        });
        self.require(id).await
    }

    /// Put a failed or cancelled job back in the queue with fresh attempts.
    pub async fn retry(&self, id: &str) -> Result<JobRecord> {
        let now = now_ms();
        let n = self
            .exec(
                "re-queueing a job",
                "UPDATE reel_jobs SET state = 'queued', attempts = 0, cancel_requested = 0, not_before = $2, \
                 apalis_task_id = NULL, finished_ms = NULL, failures_dropped_ms = NULL, updated_ms = $2 WHERE id = $1 AND state IN ('failed','cancelled')",
                id,
                |q| q.bind_i64(now),
            )
            .await?;
        let rec = self.require(id).await?;
        if n == 0 {
            return Err(JobsError::BadJobState {
                id: id.into(),
                state: rec.state.to_string(),
                hint: "only failed or cancelled jobs can be retried".into(),
            });
        }
        Ok(rec)
    }

    /// Queued jobs with no apalis task (a crash between recording and pushing): to re-push.
    pub async fn unpushed(&self) -> Result<Vec<JobRecord>> {
        let sql = format!(
            "SELECT {COLUMNS} FROM reel_jobs WHERE state = 'queued' AND apalis_task_id IS NULL ORDER BY created_ms"
        );
        on_db!(&self.db, |p| {
            let rows = sqlx::query(sqlx::AssertSqlSafe(sql.clone()))
                .fetch_all(p)
                .await
                .map_err(self.db.err("finding unpushed jobs"))?;
            rows.iter().map(decode).collect()
        })
    }

    /// Queued jobs whose apalis ticket was pushed but not taken for `stale_ms`: a ticket apalis
    /// lost (reel re-pushes them; the job record decides which ticket may run).
    pub async fn stale_queued(&self, stale_ms: i64) -> Result<Vec<JobRecord>> {
        let sql = format!(
            "SELECT {COLUMNS} FROM reel_jobs WHERE state = 'queued' AND apalis_task_id IS NOT NULL \
             AND not_before < $1 AND updated_ms < $1 ORDER BY created_ms"
        );
        let cutoff = now_ms() - stale_ms;
        on_db!(&self.db, |p| {
            let rows = sqlx::query(sqlx::AssertSqlSafe(sql.clone()))
                .bind(cutoff)
                .fetch_all(p)
                .await
                .map_err(self.db.err("finding stale queued jobs"))?;
            rows.iter().map(decode).collect()
        })
    }

    /// Delete final jobs (and their tape requests) that finished before `now - retention`.
    pub async fn prune(&self, retention: Duration) -> Result<u64> {
        let cutoff = now_ms() - retention.as_millis() as i64;
        let del_requests = "DELETE FROM reel_tape_requests WHERE job_id IN \
             (SELECT id FROM reel_jobs WHERE state IN ('done','failed','cancelled') AND finished_ms < $1)";
        let del_jobs = "DELETE FROM reel_jobs WHERE state IN ('done','failed','cancelled') AND finished_ms < $1";
        on_db!(&self.db, |p| {
            let mut tx = p.begin_write().await.map_err(self.db.err("pruning jobs"))?;
            sqlx::query(del_requests)
                .bind(cutoff)
                .execute(&mut *tx)
                .await
                .map_err(self.db.err("pruning tape requests"))?;
            let n = sqlx::query(del_jobs)
                .bind(cutoff)
                .execute(&mut *tx)
                .await
                .map_err(self.db.err("pruning jobs"))?
                .rows_affected();
            tx.commit().await.map_err(self.db.err("pruning jobs"))?;
            Ok(n)
        })
    }

    async fn exec(
        &self,
        doing: &str,
        sql: &'static str,
        id: &str,
        bind: impl FnOnce(Binds) -> Binds,
    ) -> Result<u64> {
        let binds = bind(Binds::default());
        on_db!(&self.db, |p| {
            let mut q = sqlx::query(sql).bind(id);
            for b in &binds.0 {
                q = match b {
                    Bind::I64(v) => q.bind(*v),
                    Bind::Str(s) => q.bind(s.clone()),
                };
            }
            q.execute(p)
                .await
                .map(|r| r.rows_affected())
                .map_err(self.db.err(doing))
        })
    }
}

/// Extra bind values after the id ($2, $3, …).
#[derive(Default)]
struct Binds(Vec<Bind>);
enum Bind {
    I64(i64),
    Str(String),
}
impl Binds {
    fn bind_i64(mut self, v: i64) -> Self {
        self.0.push(Bind::I64(v));
        self
    }
    fn bind_str(mut self, v: &str) -> Self {
        self.0.push(Bind::Str(v.to_string()));
        self
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::db::testdb;
    use crate::job::{JobSpec, RecallJob, RecallSelection};

    /// A recall of prefix `x`, the job these tests move through its states.
    fn recall_spec() -> JobSpec {
        JobSpec::Recall(RecallJob {
            selection: RecallSelection::Prefix("x".into()),
            destination: "/tmp/d".into(),
            overwrite: Default::default(),
            confine: None,
        })
    }

    /// A ticket delivered between the submission's push and its link starts the job (it was
    /// dropped as stale); once linked, another task's delivery is stale.
    async fn start_rules(db: Db) {
        let store = JobStore::new(db);
        let spec = recall_spec();
        let id = store.insert(&spec, 50, 3).await.unwrap().id;
        let run = store.start(&id, "w", "t1").await.unwrap();
        assert!(matches!(run, StartOutcome::Run { .. }), "{run:?}");
        assert!(
            !store.link_apalis_task(&id, "t1").await.unwrap(),
            "the late link finds the task linked by the start"
        );
        let stale = store.start(&id, "w", "t2").await.unwrap();
        assert!(matches!(stale, StartOutcome::Stale), "{stale:?}");
        // The same task again (apalis re-delivers after a crash) resumes it.
        let again = store.start(&id, "w", "t1").await.unwrap();
        assert!(matches!(again, StartOutcome::Run { .. }), "{again:?}");
    }

    #[tokio::test]
    async fn start_sqlite() {
        let t = testdb::sqlite().await;
        start_rules(t.db.clone()).await;
    }

    #[tokio::test]
    async fn start_postgres() {
        let Some(t) = testdb::postgres("store_start_postgres").await else {
            return;
        };
        start_rules(t.db.clone()).await;
    }

    /// A running job with no plan and no live holder of its job lease is queued again, once;
    /// while a runner holds the lease, it is left alone.
    #[tokio::test]
    async fn a_job_whose_runner_is_gone_is_queued_again() {
        let t = testdb::sqlite().await;
        let store = JobStore::new(t.db.clone());
        let leases = crate::lease::LeaseManager::new(t.db.clone());
        let spec = recall_spec();
        let id = store.insert(&spec, 50, 3).await.unwrap().id;
        let res = crate::lease::job_resource(&id);
        let fence = leases
            .acquire(&res, "runner", Duration::from_secs(60))
            .await
            .unwrap();
        let r = store.start(&id, "w", "t1").await.unwrap();
        assert!(matches!(r, StartOutcome::Run { .. }), "{r:?}");
        let later = now_ms() + 1_000;
        assert!(
            !store.requeue_orphan(&id, &res, later).await.unwrap(),
            "its runner holds the lease"
        );
        leases.release(&fence).await.unwrap();
        assert!(store.requeue_orphan(&id, &res, later).await.unwrap());
        let rec = store.require(&id).await.unwrap();
        assert_eq!(rec.state, JobState::Queued);
        assert_eq!(rec.attempts, 0, "the lost attempt is not counted");
        assert!(!store.requeue_orphan(&id, &res, later).await.unwrap());
    }

    /// An attempt lost to a dropped database connection is queued again without using up
    /// one of the job's attempts; a counted one fails the job at its limit.
    #[tokio::test]
    async fn an_uncounted_attempt_keeps_the_job_alive() {
        let t = testdb::sqlite().await;
        let store = JobStore::new(t.db.clone());
        let spec = recall_spec();
        let id = store.insert(&spec, 50, 2).await.unwrap().id;
        let run = |n: u32| {
            let store = &store;
            let id = id.clone();
            async move {
                let r = store.start(&id, "w", &format!("t{n}")).await.unwrap();
                assert!(matches!(r, StartOutcome::Run { .. }), "{r:?}");
            }
        };
        for n in 0..5 {
            run(n).await;
            let out = store
                .fail_attempt(&id, "connection lost", true, false, Duration::ZERO)
                .await
                .unwrap();
            assert!(matches!(out, FailOutcome::Retry { .. }), "{out:?}");
        }
        assert!(store.require(&id).await.unwrap().attempts <= 1);
        run(10).await;
        let out = store
            .fail_attempt(&id, "drive", true, true, Duration::ZERO)
            .await
            .unwrap();
        assert!(matches!(out, FailOutcome::Retry { .. }), "{out:?}");
        run(11).await;
        let out = store
            .fail_attempt(&id, "drive", true, true, Duration::ZERO)
            .await
            .unwrap();
        assert!(matches!(out, FailOutcome::Failed), "{out:?}");
    }
}
