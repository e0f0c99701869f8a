//! The bridge to apalis 1.0: submission puts a [`Ticket`] on the job kind's apalis queue; apalis
//! delivers it to one worker and re-delivers it when that worker dies. Everything else about
//! the job (state, retries with backoff, cancel, progress, checkpoint) is in [`JobStore`].
//!
//! Pitfalls handled here (evidence in docs/JOBS.md):
//! - apalis retries a failed task at once (`fetch_next.sql` takes `Failed AND attempts < max_attempts`
//!   with no delay): reel never returns an error to apalis; a failed attempt re-pushes a new
//!   ticket with `run_after(backoff)` and records `not_before` in its own table.
//! - apalis-sqlite sets `synchronous=OFF`: its queue lives in a separate file (`jobs.db`).
//! - `vacuum_before` on SQLite compares an INTEGER `run_at` with a TEXT `datetime()` and so
//!   deletes every finished row regardless of age; PostgreSQL has no retention at all: reel
//!   prunes apalis's finished rows with its own statements.

use std::str::FromStr;
use std::time::Duration;

use apalis::prelude::{TaskBuilder, TaskId, TaskSink};
use apalis_postgres::PostgresStorage;
use apalis_sqlite::SqliteStorage;
use serde::{Deserialize, Serialize};
use sqlx::sqlite::{SqliteConnectOptions, SqlitePoolOptions};
use sqlx::{PgPool, SqlitePool};

use crate::backoff::Backoff;
use crate::config::{Config, WorkerConfig};
use crate::db::{Db, now_ms};
use crate::error::{JobsError, Result};
use crate::job::{JobKind, JobSpec};
use crate::store::{JobRecord, JobStore};

/// What travels through apalis: only the job id. The payload stays in reel's record.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Ticket {
    /// The reel job id.
    pub job_id: String,
}

/// The database apalis keeps its queue in.
#[derive(Debug, Clone)]
pub enum ApalisDb {
    /// `jobs.db`, apart from the durable store.
    Sqlite(SqlitePool),
    /// Schema `apalis` of the store database.
    Postgres(PgPool),
}

impl ApalisDb {
    /// Connect and run apalis's migrations (`setup`).
    pub async fn connect(url: &str) -> Result<ApalisDb> {
        let qerr = |backend: &'static str, location: &str, doing: &str| {
            let doing = doing.to_string();
            let location = location.to_string();
            move |e: apalis_sqlite::Error| JobsError::Queue {
                backend,
                location,
                doing,
                message: e.to_string(),
            }
        };
        if let Some(path) = url.strip_prefix("sqlite:") {
            // One process at a time connects and migrates a SQLite file (the catalogue's open
            // lock), held until apalis's set-up below ran.
            let _open = crate::db::sqlite_open_lock(path).await?;
            let opts = SqliteConnectOptions::from_str(&format!("sqlite:{path}"))
                .map_err(crate::db::Db::err_at(
                    "sqlite",
                    path,
                    "parsing the jobs url",
                ))?
                .create_if_missing(true)
                .busy_timeout(Duration::from_secs(30));
            let pool = reel_engine::database::discard_unclean_sqlite(
                reel_engine::database::vet_idle_connections(SqlitePoolOptions::new()),
            )
            .max_connections(4)
            .connect_with(opts)
            .await
            .map_err(crate::db::Db::err_at(
                "sqlite",
                path,
                "opening the apalis queue file",
            ))?;
            // A worker and a command opening a new queue at once race for its first
            // migration; the loser looks again once the winner committed.
            let mut attempt = 0;
            loop {
                match SqliteStorage::setup(&pool).await {
                    Ok(_) => break,
                    Err(_) if attempt < 20 => {
                        attempt += 1;
                        tokio::time::sleep(Duration::from_millis(100)).await;
                    }
                    Err(e) => return Err(qerr("sqlite", path, "migrating the apalis queue")(e)),
                }
            }
            Ok(ApalisDb::Sqlite(pool))
        } else {
            let options = reel_engine::database::postgres_session(
                sqlx::postgres::PgConnectOptions::from_str(url).map_err(crate::db::Db::err_at(
                    "postgres",
                    crate::db::redact(url),
                    "parsing the apalis queue's url",
                ))?,
            );
            let pool = reel_engine::database::postgres_pool_options()
                .connect_with(options)
                .await
                .map_err(crate::db::Db::err_at(
                    "postgres",
                    crate::db::redact(url),
                    "connecting the apalis queue",
                ))?;
            // CREATE EXTENSION (hstore) is not safe against a concurrent one in a new
            // database: the loser retries once the winner committed.
            let mut attempt = 0;
            loop {
                match PostgresStorage::<()>::setup(&pool).await {
                    Ok(_) => break,
                    Err(_) if attempt < 20 => {
                        attempt += 1;
                        tokio::time::sleep(Duration::from_millis(100)).await;
                    }
                    Err(e) => {
                        return Err(JobsError::Queue {
                            backend: "postgres",
                            location: crate::db::postgres_location(&pool),
                            doing: "migrating the apalis queue (needs the hstore extension)".into(),
                            message: e.to_string(),
                        });
                    }
                }
            }
            Ok(ApalisDb::Postgres(pool))
        }
    }

    /// `sqlite` or `postgres`.
    pub fn backend(&self) -> &'static str {
        match self {
            ApalisDb::Sqlite(_) => "sqlite",
            ApalisDb::Postgres(_) => "postgres",
        }
    }

    /// An apalis storage handle for one job kind (used to push and by workers).
    pub fn sqlite_storage(
        pool: &SqlitePool,
        kind: JobKind,
        w: &WorkerConfig,
    ) -> SqliteStorage<Ticket> {
        let cfg = apalis_sqlite::Config::default()
            .queue(kind.queue())
            .heartbeat_interval(Duration::from_millis(w.heartbeat_ms))
            .missed_heartbeats(missed_heartbeats(w))
            .batch_size(w.concurrency.max(1));
        SqliteStorage::new(pool).with_config(cfg)
    }

    /// An apalis storage handle for one job kind on PostgreSQL.
    pub fn postgres_storage(
        pool: &PgPool,
        kind: JobKind,
        w: &WorkerConfig,
    ) -> PostgresStorage<Ticket> {
        let cfg = apalis_postgres::Config::default()
            .queue(kind.queue())
            .heartbeat_interval(Duration::from_millis(w.heartbeat_ms))
            .missed_heartbeats(missed_heartbeats(w))
            .batch_size(w.concurrency.max(1));
        PostgresStorage::new(pool).with_config(cfg)
    }

    /// Push a ticket; returns the apalis task id.
    async fn push(
        &self,
        kind: JobKind,
        ticket: Ticket,
        priority: i32,
        delay: Duration,
        w: &WorkerConfig,
    ) -> Result<String> {
        let id = ulid::Ulid::generate();
        let task = TaskBuilder::new(ticket)
            .task_id(TaskId::from(id))
            .priority(priority.max(0) as usize)
            // apalis must never retry by itself (it would retry at once); reel re-pushes with a delay.
            .max_attempts(1)
            .run_after(delay)
            .build();
        match self {
            ApalisDb::Sqlite(pool) => Self::sqlite_storage(pool, kind, w)
                .push_task(task)
                .await
                .map_err(|e| JobsError::Queue {
                    backend: "sqlite",
                    location: crate::db::sqlite_location(pool),
                    doing: format!("queueing a {kind} job"),
                    message: e.to_string(),
                })?,
            ApalisDb::Postgres(pool) => Self::postgres_storage(pool, kind, w)
                .push_task(task)
                .await
                .map_err(|e| JobsError::Queue {
                    backend: "postgres",
                    location: crate::db::postgres_location(pool),
                    doing: format!("queueing a {kind} job"),
                    message: e.to_string(),
                })?,
        }
        Ok(id.to_string())
    }

    /// Delete apalis's finished rows older than `retention`.
    pub async fn prune(&self, retention: Duration) -> Result<u64> {
        let secs = retention.as_secs() as i64;
        match self {
            ApalisDb::Sqlite(pool) => {
                let cutoff = now_ms() / 1000 - secs;
                sqlx::query(
                    "DELETE FROM Jobs WHERE (status IN ('Done','Killed') OR (status = 'Failed' AND attempts >= max_attempts)) \
                     AND done_at IS NOT NULL AND done_at < $1",
                )
                .bind(cutoff)
                .execute(pool)
                .await
                .map(|r| r.rows_affected())
                .map_err(crate::db::Db::err_at(
                    "sqlite",
                    crate::db::sqlite_location(pool),
                    "pruning the apalis queue",
                ))
            }
            ApalisDb::Postgres(pool) => sqlx::query(
                "DELETE FROM apalis.jobs WHERE (status IN ('Done','Killed') OR (status = 'Failed' AND attempts >= max_attempts)) \
                 AND done_at IS NOT NULL AND done_at < now() - make_interval(secs => $1::double precision)",
            )
            .bind(secs as f64)
            .execute(pool)
            .await
            .map(|r| r.rows_affected())
            .map_err(crate::db::Db::err_at(
                "postgres",
                crate::db::postgres_location(pool),
                "pruning the apalis queue",
            )),
        }
    }
}

/// How many heartbeats a worker may miss before apalis re-delivers its jobs.
pub fn missed_heartbeats(w: &WorkerConfig) -> usize {
    (w.lease_ms / w.heartbeat_ms.max(1)).max(2) as usize
}

/// Submit, cancel, retry and prune jobs.
#[derive(Debug, Clone)]
pub struct JobQueue {
    store: JobStore,
    apalis: ApalisDb,
    worker: WorkerConfig,
}

impl JobQueue {
    /// Open the store (`[store] url`) and apalis's queue (`jobs_url` on SQLite, the store on PostgreSQL).
    pub async fn open(config: &Config) -> Result<JobQueue> {
        let db = Db::connect(&config.store.url).await?;
        let apalis_url = if config.store.is_postgres() {
            &config.store.url
        } else {
            &config.store.jobs_url
        };
        let apalis = ApalisDb::connect(apalis_url).await?;
        Ok(JobQueue::from_parts(db, apalis, config.worker.clone()))
    }

    /// From an open store and queue.
    pub fn from_parts(db: Db, apalis: ApalisDb, worker: WorkerConfig) -> JobQueue {
        JobQueue {
            store: JobStore::new(db),
            apalis,
            worker,
        }
    }

    /// The job records.
    pub fn store(&self) -> &JobStore {
        &self.store
    }

    /// The apalis queue.
    pub fn apalis(&self) -> &ApalisDb {
        &self.apalis
    }

    /// Worker settings (attempts, backoff).
    pub fn worker_config(&self) -> &WorkerConfig {
        &self.worker
    }

    /// The retry backoff.
    pub fn backoff(&self) -> Backoff {
        Backoff {
            base: Duration::from_millis(self.worker.backoff_base_ms),
            max: Duration::from_millis(self.worker.backoff_max_ms),
        }
    }

    /// Record and queue a job; returns its record.
    pub async fn submit(&self, spec: JobSpec, priority: Option<i32>) -> Result<JobRecord> {
        self.submit_for(spec, priority, None).await
    }

    /// [`JobQueue::submit`] on behalf of an API token, recorded with the job.
    pub async fn submit_for(
        &self,
        spec: JobSpec,
        priority: Option<i32>,
        token_id: Option<&str>,
    ) -> Result<JobRecord> {
        spec.validate().map_err(|m| JobsError::Config {
            origin: "the submitted job".into(),
            message: m,
        })?;
        let priority = priority.unwrap_or_else(|| spec.default_priority());
        let rec = self
            .store
            .insert_for(&spec, priority, self.worker.max_attempts, token_id)
            .await?;
        self.push(&rec, Duration::ZERO).await?;
        self.store.require(&rec.id).await
    }

    /// Push a ticket for the job's next attempt and link it (first link wins; others go stale).
    pub async fn push(&self, rec: &JobRecord, delay: Duration) -> Result<Option<String>> {
        let task = self
            .apalis
            .push(
                rec.kind,
                Ticket {
                    job_id: rec.id.clone(),
                },
                rec.priority,
                delay,
                &self.worker,
            )
            .await?;
        Ok(self
            .store
            .link_apalis_task(&rec.id, &task)
            .await?
            .then_some(task))
    }

    /// Cancel: at once when queued, at the next record boundary when running.
    pub async fn cancel(&self, id: &str) -> Result<JobRecord> {
        self.store.request_cancel(id).await
    }

    /// Re-queue a failed or cancelled job with fresh attempts.
    pub async fn retry(&self, id: &str) -> Result<JobRecord> {
        let rec = self.store.retry(id).await?;
        crate::requests::TapeRequests::new(self.store.db().clone())
            .requeue_failed(id)
            .await?;
        self.push(&rec, Duration::ZERO).await?;
        self.store.require(id).await
    }

    /// Push tickets for queued jobs that have none (a crash between record and push).
    pub async fn reconcile(&self) -> Result<usize> {
        let mut n = 0;
        for rec in self.store.unpushed().await? {
            let delay = Duration::from_millis((rec.not_before_ms - now_ms()).max(0) as u64);
            if self.push(&rec, delay).await?.is_some() {
                n += 1;
            }
        }
        // A ticket not taken long after it was due was lost by the queue (seen under load with
        // apalis 1.0): push a new one; the stale ticket no longer matches the job's link and
        // is ignored if it ever arrives.
        let stale_ms = (self.worker.poll_interval_ms as i64 * 50).max(10_000);
        for rec in self.store.stale_queued(stale_ms).await? {
            if let Some(old) = rec.apalis_task_id.clone() {
                tracing::warn!(job = %rec.id, ticket = %old, "queued job not taken; pushing a new ticket");
                self.store.unlink_apalis_task(&rec.id, &old).await?;
                if self.push(&rec, Duration::ZERO).await?.is_some() {
                    n += 1;
                }
            }
        }
        Ok(n)
    }

    /// Delete finished jobs older than the retention, in reel's tables and in apalis's.
    pub async fn prune(&self, retention: Duration) -> Result<(u64, u64)> {
        Ok((
            self.store.prune(retention).await?,
            self.apalis.prune(retention).await?,
        ))
    }
}
