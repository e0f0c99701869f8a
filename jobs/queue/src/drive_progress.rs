//! What each drive's running batch has done so far (`reel_drive_progress`), for `reel drive
//! show` and `GET /v1/drives/{drive}`: the jobs it serves, its files and bytes done of its
//! total, the tape block near which it is, since when.
//!
//! The worker holding the drive writes its row about once a second while a batch runs and
//! deletes it when the batch settles. As on the drive board ([`crate::drives`]), a row counts
//! only while its writer still holds the drive lease at the epoch it wrote: a crashed host's
//! batch drops out of view when its lease lapses, never shown as running forever.

use serde::Serialize;
use sqlx::Row;

use crate::db::{Db, now_ms};
use crate::drives::drive_of;
use crate::error::Result;
use crate::lease::Fence;
use crate::on_db;

/// How many of a batch's job ids are kept (a batch of recalls can serve thousands of jobs; the
/// count is kept in full).
pub const JOBS_KEPT: usize = 20;

/// A running batch's progress.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, utoipa::ToSchema)]
pub struct BatchProgress {
    /// The jobs it serves (at most [`JOBS_KEPT`], in id order).
    pub jobs: Vec<String>,
    /// How many jobs it serves in all.
    pub job_count: u64,
    /// Files (objects, containers, labels) in the batch.
    pub files: u64,
    /// Of which finished.
    pub files_done: u64,
    /// Bytes in the batch.
    pub bytes: u64,
    /// Of which finished.
    pub bytes_done: u64,
    /// The tape block near which the drive is: the end of data after a write's last group
    /// commit, the first block of the container of the last object recalled. `None` until the
    /// batch has finished something.
    pub block: Option<u64>,
    /// When the batch started (unix ms).
    pub started_ms: i64,
    /// When this was written (unix ms).
    pub updated_ms: i64,
}

impl BatchProgress {
    /// Bytes finished per second from the batch's start to `now_ms` (unix ms), MEASURED: a
    /// batch that stalls shows its rate falling. `None` before the first second or the first
    /// finished byte.
    pub fn rate_bytes_per_sec(&self, now_ms: i64) -> Option<u64> {
        let ms = u64::try_from(now_ms.saturating_sub(self.started_ms)).ok()?;
        (ms >= 1000 && self.bytes_done > 0)
            .then(|| u64::try_from(u128::from(self.bytes_done) * 1000 / u128::from(ms)).ok())
            .flatten()
    }
}

fn to_db(n: u64) -> i64 {
    i64::try_from(n).unwrap_or(i64::MAX)
}

fn from_db(n: i64) -> u64 {
    u64::try_from(n).unwrap_or(0)
}

/// Reads and writes `reel_drive_progress`.
#[derive(Debug, Clone)]
pub struct DriveProgress {
    db: Db,
}

impl DriveProgress {
    /// The progress rows on this database.
    pub fn new(db: Db) -> DriveProgress {
        DriveProgress { db }
    }

    /// Write the fenced drive's batch progress (its `updated_ms` is set to now). Fails with
    /// [`crate::error::JobsError::Fenced`] when the drive lease is no longer held; a writer
    /// that lost the lease between that check and the write never replaces the row of a
    /// later holder (a higher epoch).
    pub async fn report(&self, fence: &Fence, p: &BatchProgress) -> Result<()> {
        fence.check().await?;
        let drive = drive_of(fence)?;
        let jobs: Vec<&String> = p.jobs.iter().take(JOBS_KEPT).collect();
        let jobs = serde_json::to_string(&jobs).unwrap_or_else(|_| "[]".into());
        let sql = "INSERT INTO reel_drive_progress (drive, holder, epoch, jobs, job_count, files, \
                   files_done, bytes, bytes_done, block, started_ms, updated_ms) \
                   VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11, $12) \
                   ON CONFLICT (drive) DO UPDATE SET holder = excluded.holder, \
                   epoch = excluded.epoch, jobs = excluded.jobs, job_count = excluded.job_count, \
                   files = excluded.files, files_done = excluded.files_done, \
                   bytes = excluded.bytes, bytes_done = excluded.bytes_done, \
                   block = excluded.block, started_ms = excluded.started_ms, \
                   updated_ms = excluded.updated_ms \
                   WHERE reel_drive_progress.epoch <= excluded.epoch";
        let now = now_ms();
        on_db!(&self.db, |pool| sqlx::query(sql)
            .bind(drive)
            .bind(&fence.holder)
            .bind(fence.epoch)
            .bind(&jobs)
            .bind(to_db(p.job_count))
            .bind(to_db(p.files))
            .bind(to_db(p.files_done))
            .bind(to_db(p.bytes))
            .bind(to_db(p.bytes_done))
            .bind(p.block.map(to_db))
            .bind(p.started_ms)
            .bind(now)
            .execute(pool)
            .await
            .map(|_| ())
            .map_err(self.db.err("recording a drive's batch progress")))
    }

    /// The batch of the fenced drive settled: its row goes. A row this holder no longer owns
    /// is left to its owner.
    pub async fn clear(&self, fence: &Fence) -> Result<()> {
        let drive = drive_of(fence)?;
        let sql = "DELETE FROM reel_drive_progress WHERE drive = $1 AND holder = $2";
        on_db!(&self.db, |pool| sqlx::query(sql)
            .bind(drive)
            .bind(&fence.holder)
            .execute(pool)
            .await
            .map(|_| ())
            .map_err(self.db.err("clearing a drive's batch progress")))
    }

    /// Every drive's running batch whose writer still holds the drive lease at the epoch it
    /// wrote, by drive name.
    pub async fn live(&self) -> Result<Vec<(String, BatchProgress)>> {
        let sql = "SELECT g.drive, g.jobs, g.job_count, g.files, g.files_done, g.bytes, \
                   g.bytes_done, g.block, g.started_ms, g.updated_ms \
                   FROM reel_drive_progress g JOIN reel_leases l \
                   ON l.resource = 'drive:' || g.drive AND l.holder = g.holder \
                   AND l.epoch = g.epoch AND l.expires_ms >= $1 ORDER BY g.drive";
        let now = now_ms();
        on_db!(&self.db, |pool| {
            let rows = sqlx::query(sql)
                .bind(now)
                .fetch_all(pool)
                .await
                .map_err(self.db.err("reading the drives' batch progress"))?;
            rows.into_iter()
                .map(|r| {
                    let jobs: String = r.try_get("jobs")?;
                    let block: Option<i64> = r.try_get("block")?;
                    Ok((
                        r.try_get("drive")?,
                        BatchProgress {
                            jobs: serde_json::from_str(&jobs).unwrap_or_default(),
                            job_count: from_db(r.try_get("job_count")?),
                            files: from_db(r.try_get("files")?),
                            files_done: from_db(r.try_get("files_done")?),
                            bytes: from_db(r.try_get("bytes")?),
                            bytes_done: from_db(r.try_get("bytes_done")?),
                            block: block.map(from_db),
                            started_ms: r.try_get("started_ms")?,
                            updated_ms: r.try_get("updated_ms")?,
                        },
                    ))
                })
                .collect::<std::result::Result<Vec<_>, sqlx::Error>>()
                .map_err(self.db.err("reading the drives' batch progress"))
        })
    }
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use super::*;
    use crate::db::testdb;
    use crate::error::JobsError;
    use crate::lease::{LeaseManager, drive_resource};

    async fn progress_is_kept_while_the_lease_holds(db: Db) {
        let leases = LeaseManager::new(db.clone());
        let progress = DriveProgress::new(db);
        let ttl = Duration::from_secs(60);
        let a = leases
            .acquire(&drive_resource("d0"), "host-a", ttl)
            .await
            .unwrap();
        let b = leases
            .acquire(&drive_resource("d1"), "host-b", ttl)
            .await
            .unwrap();
        let started = now_ms() - 2000;
        let mut p = BatchProgress {
            jobs: (0..30).map(|i| format!("job-{i:02}")).collect(),
            job_count: 30,
            files: 64,
            bytes: 64 << 20,
            started_ms: started,
            ..BatchProgress::default()
        };
        progress.report(&a, &p).await.unwrap();
        let live = progress.live().await.unwrap();
        assert_eq!(live.len(), 1);
        let (drive, got) = &live[0];
        assert_eq!(drive, "d0");
        assert_eq!(got.jobs.len(), JOBS_KEPT, "ids are bounded");
        assert_eq!(got.job_count, 30, "the count is not");
        assert_eq!((got.files_done, got.block), (0, None));
        assert_eq!(
            got.rate_bytes_per_sec(now_ms()),
            None,
            "nothing finished yet"
        );

        // Half done, near block 1000: about 16 MiB/s over the two seconds.
        p.files_done = 32;
        p.bytes_done = 32 << 20;
        p.block = Some(1000);
        progress.report(&a, &p).await.unwrap();
        progress
            .report(&b, &BatchProgress::default())
            .await
            .unwrap();
        let live = progress.live().await.unwrap();
        assert_eq!(live.len(), 2);
        let got = &live[0].1;
        assert_eq!((got.files_done, got.block), (32, Some(1000)));
        let rate = got.rate_bytes_per_sec(now_ms()).unwrap();
        assert!(rate > 0 && rate <= 16 << 20, "{rate}");
        // Stalled: the rate falls as time passes.
        assert!(got.rate_bytes_per_sec(started + 4000).unwrap() <= 8 << 20);

        // Cleared when the batch settles.
        progress.clear(&a).await.unwrap();
        assert_eq!(progress.live().await.unwrap().len(), 1);

        // d1's host dies: its lease lapses, its batch is no longer shown, and a fenced
        // writer cannot report.
        leases.heartbeat(&b, Duration::ZERO).await.unwrap();
        tokio::time::sleep(Duration::from_millis(5)).await;
        assert!(progress.live().await.unwrap().is_empty());
        assert!(matches!(
            progress.report(&b, &p).await,
            Err(JobsError::Fenced { .. })
        ));
    }

    #[tokio::test]
    async fn progress_on_sqlite() {
        let t = testdb::sqlite().await;
        progress_is_kept_while_the_lease_holds(t.db.clone()).await;
    }

    #[tokio::test]
    async fn progress_on_postgres() {
        let Some(t) = testdb::postgres("drive_progress_on_postgres").await else {
            return;
        };
        progress_is_kept_while_the_lease_holds(t.db.clone()).await;
    }
}
