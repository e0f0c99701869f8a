//! Drive and job leases with heartbeats and a fencing epoch. There are no cartridge leases: a
//! cartridge belongs to whoever holds the drive it is in (docs/DECISIONS.md).
//!
//! Taking a lease increments its epoch. A worker keeps the epoch it got in a [`Fence`] and calls
//! [`Fence::check`] before every container and barrier it writes; the check re-reads the row, so
//! a worker whose lease expired or was taken over gets [`JobsError::Fenced`] and must stop.
//!
//! Three rules make the fence hold for a worker frozen past its lease (SIGSTOP, a paused VM)
//! and then woken:
//! - an expired lease is never renewed ([`LeaseManager::heartbeat`]), even if nobody took it:
//!   its claims may already be back in the queue, so waking up means taking a new epoch;
//! - [`Fence::within_term`] knows, from this host's monotonic clock and no database round trip,
//!   when the lease has lapsed for certain; the write path asks it before every record, so a
//!   woken writer does not write one more;
//! - the catalogue re-checks the lease row inside the transactions that close a container and
//!   make it durable or verified (`reel_engine::catalogue::WriterLease`), and claims move to
//!   another worker only a grace period after the expiry
//!   ([`crate::requests::ORPHAN_GRACE_MS`]), so copies made live under the lease are
//!   committed before anyone else can take the requests over.

use std::time::Duration;

use serde::Serialize;
use sqlx::Row;

use crate::db::BeginWrite;
use crate::db::{Db, now_ms};
use crate::error::{JobsError, Result};
use crate::on_db;

/// Lease resource name of a drive.
pub fn drive_resource(drive: &str) -> String {
    format!("drive:{drive}")
}

/// Lease resource name of a job (one runner at a time).
pub fn job_resource(job_id: &str) -> String {
    format!("job:{job_id}")
}

/// Proof of holding a lease at one epoch.
#[derive(Debug, Clone)]
pub struct Fence {
    db: Db,
    /// The leased resource (`drive:NAME`, `cartridge:BARCODE`).
    pub resource: String,
    /// The holder (worker name).
    pub holder: String,
    /// The epoch this holder got.
    pub epoch: i64,
    /// When the lease lapses at the latest, on this host's monotonic clock: the instant
    /// before the last acquire or renewal was sent, plus the ttl (the database's expiry is
    /// no earlier). Shared by clones, moved on by every renewal. A process frozen past it
    /// (SIGSTOP, a paused VM) sees so on waking without asking the database.
    valid_until: std::sync::Arc<std::sync::Mutex<std::time::Instant>>,
}

/// One lease row, for display.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct LeaseInfo {
    /// Resource.
    pub resource: String,
    /// Holder, if held.
    pub holder: Option<String>,
    /// Current epoch.
    pub epoch: i64,
    /// Expiry (unix ms).
    pub expires_ms: i64,
}

impl Fence {
    /// Whether the lease can still be current by this host's clock (no database round trip:
    /// cheap enough for every record written). `false` means it has lapsed for certain;
    /// `true` still needs [`Fence::check`] to know nobody took it.
    pub fn within_term(&self) -> bool {
        self.valid_until
            .lock()
            .map(|t| std::time::Instant::now() < *t)
            .unwrap_or(false)
    }

    fn extend_term(&self, sent: std::time::Instant, ttl: Duration) {
        if let Ok(mut t) = self.valid_until.lock() {
            *t = sent + ttl;
        }
    }

    /// Fail with [`JobsError::Fenced`] unless this holder still holds the lease at this epoch
    /// and the lease has not expired. Call before every write to tape or catalogue.
    pub async fn check(&self) -> Result<()> {
        let info = LeaseManager::new(self.db.clone())
            .get(&self.resource)
            .await?;
        let now = now_ms();
        match info {
            Some(l)
                if l.epoch == self.epoch
                    && l.holder.as_deref() == Some(&self.holder)
                    && l.expires_ms >= now =>
            {
                if self.within_term() {
                    Ok(())
                } else {
                    // The database's clock may not have caught up; this host's has.
                    Err(JobsError::Fenced {
                        resource: self.resource.clone(),
                        held: self.epoch,
                        current: l.epoch,
                        holder: format!("{} (its term ran out on this host's clock)", self.holder),
                    })
                }
            }
            Some(l) => Err(JobsError::Fenced {
                resource: self.resource.clone(),
                held: self.epoch,
                current: l.epoch,
                holder: match (&l.holder, l.expires_ms < now) {
                    (Some(h), false) => h.clone(),
                    (Some(h), true) => format!("{h} (expired)"),
                    (None, _) => "nobody".into(),
                },
            }),
            None => Err(JobsError::Fenced {
                resource: self.resource.clone(),
                held: self.epoch,
                current: 0,
                holder: "nobody".into(),
            }),
        }
    }
}

/// Takes, renews and releases leases.
#[derive(Debug, Clone)]
pub struct LeaseManager {
    db: Db,
}

impl LeaseManager {
    /// Leases on this database.
    pub fn new(db: Db) -> LeaseManager {
        LeaseManager { db }
    }

    /// Take the lease if it is free, expired, or already ours; the epoch increments.
    pub async fn acquire(&self, resource: &str, holder: &str, ttl: Duration) -> Result<Fence> {
        let sent = std::time::Instant::now();
        let now = now_ms();
        let expires = now + ttl.as_millis() as i64;
        let epoch: Option<i64> = on_db!(&self.db, |p| {
            let mut tx = p
                .begin_write()
                .await
                .map_err(self.db.err("taking a lease"))?;
            sqlx::query("INSERT INTO reel_leases (resource, holder, epoch, expires_ms, heartbeat_ms) VALUES ($1, NULL, 0, 0, 0) ON CONFLICT (resource) DO NOTHING")
                .bind(resource)
                .execute(&mut *tx)
                .await
                .map_err(self.db.err("taking a lease"))?;
            let row = sqlx::query(
                "UPDATE reel_leases SET holder = $2, epoch = epoch + 1, expires_ms = $3, heartbeat_ms = $4 \
                 WHERE resource = $1 AND (holder IS NULL OR holder = $2 OR expires_ms < $4) RETURNING epoch",
            )
            .bind(resource)
            .bind(holder)
            .bind(expires)
            .bind(now)
            .fetch_optional(&mut *tx)
            .await
            .map_err(self.db.err("taking a lease"))?;
            tx.commit().await.map_err(self.db.err("taking a lease"))?;
            row.map(|r| r.try_get::<i64, _>("epoch"))
                .transpose()
                .map_err(self.db.err("taking a lease"))?
        });
        match epoch {
            Some(epoch) => Ok(Fence {
                db: self.db.clone(),
                resource: resource.into(),
                holder: holder.into(),
                epoch,
                valid_until: std::sync::Arc::new(std::sync::Mutex::new(sent + ttl)),
            }),
            None => {
                let holder = self
                    .get(resource)
                    .await?
                    .and_then(|l| l.holder)
                    .unwrap_or_else(|| "unknown".into());
                Err(JobsError::LeaseBusy {
                    resource: resource.into(),
                    holder,
                })
            }
        }
    }

    /// Extend the lease; fails with [`JobsError::Fenced`] when the epoch moved on **or the
    /// lease has expired**. An expired lease is never renewed, even when nobody took it over
    /// meanwhile: its claims may already be back in the queue and another worker writing
    /// them, so a holder that wakes up past its expiry (frozen, paused, starved) has lost it
    /// and must take a new epoch.
    pub async fn heartbeat(&self, fence: &Fence, ttl: Duration) -> Result<()> {
        let sent = std::time::Instant::now();
        let now = now_ms();
        let n = on_db!(&self.db, |p| sqlx::query(
            "UPDATE reel_leases SET expires_ms = $4, heartbeat_ms = $5 \
             WHERE resource = $1 AND holder = $2 AND epoch = $3 AND expires_ms >= $5"
        )
        .bind(&fence.resource)
        .bind(&fence.holder)
        .bind(fence.epoch)
        .bind(now + ttl.as_millis() as i64)
        .bind(now)
        .execute(p)
        .await
        .map(|r| r.rows_affected()))
        .map_err(self.db.err("renewing a lease"))?;
        let took = sent.elapsed();
        if took > ttl / 4 {
            tracing::warn!(
                resource = %fence.resource,
                took_ms = took.as_millis() as u64,
                lease_ms = ttl.as_millis() as u64,
                "renewing a lease took more than a quarter of its term: the database is slow \
                 or its write lock is contended"
            );
        }
        if n == 1 {
            fence.extend_term(sent, ttl);
            Ok(())
        } else {
            fence.check().await.and(Err(JobsError::Fenced {
                resource: fence.resource.clone(),
                held: fence.epoch,
                current: -1,
                holder: "unknown".into(),
            }))
        }
    }

    /// Give the lease up (only if still held at this epoch).
    pub async fn release(&self, fence: &Fence) -> Result<()> {
        on_db!(&self.db, |p| sqlx::query(
            "UPDATE reel_leases SET holder = NULL, expires_ms = 0 WHERE resource = $1 AND holder = $2 AND epoch = $3"
        )
        .bind(&fence.resource)
        .bind(&fence.holder)
        .bind(fence.epoch)
        .execute(p)
        .await
        .map(|_| ()))
        .map_err(self.db.err("releasing a lease"))
    }

    /// Release every lease a worker start holds (graceful shutdown): those held under its name
    /// (drives) and those held by one delivery of a ticket to it (`name/ticket/tag`, jobs).
    pub async fn release_all(&self, worker: &str) -> Result<u64> {
        on_db!(&self.db, |p| sqlx::query(
            "UPDATE reel_leases SET holder = NULL, expires_ms = 0 \
             WHERE holder = $1 OR substr(holder, 1, length($1) + 1) = $1 || '/'"
        )
        .bind(worker)
        .execute(p)
        .await
        .map(|r| r.rows_affected()))
        .map_err(self.db.err("releasing leases"))
    }

    /// One lease.
    pub async fn get(&self, resource: &str) -> Result<Option<LeaseInfo>> {
        let row = on_db!(&self.db, |p| {
            sqlx::query(
                "SELECT resource, holder, epoch, expires_ms FROM reel_leases WHERE resource = $1",
            )
            .bind(resource)
            .fetch_optional(p)
            .await
            .and_then(|r| {
                r.map(|r| {
                    Ok(LeaseInfo {
                        resource: r.try_get("resource")?,
                        holder: r.try_get("holder")?,
                        epoch: r.try_get("epoch")?,
                        expires_ms: r.try_get("expires_ms")?,
                    })
                })
                .transpose()
            })
        });
        row.map_err(self.db.err("reading a lease"))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::db::testdb;

    async fn lease_rules(db: Db) {
        let m = LeaseManager::new(db);
        let r = drive_resource("d0");
        let a = m
            .acquire(&r, "worker-a", Duration::from_secs(60))
            .await
            .unwrap();
        a.check().await.unwrap();
        // Busy for another holder while live.
        let busy = m
            .acquire(&r, "worker-b", Duration::from_secs(60))
            .await
            .unwrap_err();
        assert!(
            matches!(busy, JobsError::LeaseBusy { ref holder, .. } if holder == "worker-a"),
            "{busy}"
        );
        m.heartbeat(&a, Duration::from_secs(60)).await.unwrap();
        // Let a's lease expire (ttl 0 renew puts expiry in the past) and b takes over.
        m.heartbeat(&a, Duration::ZERO).await.unwrap();
        tokio::time::sleep(Duration::from_millis(5)).await;
        assert!(
            matches!(a.check().await, Err(JobsError::Fenced { .. })),
            "an expired lease must fence"
        );
        // Nobody took it yet, and still an expired lease does not come back to life.
        assert!(
            matches!(
                m.heartbeat(&a, Duration::from_secs(60)).await,
                Err(JobsError::Fenced { .. })
            ),
            "an expired lease was renewed"
        );
        assert!(a.check().await.is_err(), "the failed renewal revived it");
        let b = m
            .acquire(&r, "worker-b", Duration::from_secs(60))
            .await
            .unwrap();
        assert!(b.epoch > a.epoch);
        b.check().await.unwrap();
        // a is fenced for good: check, heartbeat and release cannot touch b's lease.
        let err = a.check().await.unwrap_err();
        assert!(
            matches!(err, JobsError::Fenced { held, current, .. } if held == a.epoch && current == b.epoch),
            "{err}"
        );
        assert!(m.heartbeat(&a, Duration::from_secs(60)).await.is_err());
        m.release(&a).await.unwrap();
        b.check().await.unwrap();
        // Release frees it; re-acquire bumps the epoch again.
        m.release(&b).await.unwrap();
        assert!(b.check().await.is_err());
        let c = m
            .acquire(&r, "worker-a", Duration::from_secs(60))
            .await
            .unwrap();
        assert_eq!(c.epoch, b.epoch + 1);
        assert_eq!(m.release_all("worker-a").await.unwrap(), 1);
        // A start's job leases are held per delivery (`name/ticket/tag`): they go with it. A
        // worker whose name merely begins the same keeps its own.
        let ttl = Duration::from_secs(60);
        let drive = m.acquire(&r, "worker-a", ttl).await.unwrap();
        let job = m.acquire("job:1", "worker-a/t1/0001", ttl).await.unwrap();
        let other = m.acquire("job:2", "worker-ab/t2/0002", ttl).await.unwrap();
        assert_eq!(m.release_all("worker-a").await.unwrap(), 2);
        assert!(drive.check().await.is_err());
        assert!(job.check().await.is_err());
        other.check().await.unwrap();
    }

    #[tokio::test]
    async fn leases_fence_on_sqlite() {
        let t = testdb::sqlite().await;
        lease_rules(t.db.clone()).await;
    }

    #[tokio::test]
    async fn leases_fence_on_postgres() {
        let Some(t) = testdb::postgres("leases_fence_on_postgres").await else {
            return;
        };
        lease_rules(t.db.clone()).await;
    }
}
