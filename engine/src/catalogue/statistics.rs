//! Planner statistics on PostgreSQL: the catalogue runs `ANALYZE` on its own tables once they
//! have outgrown the statistics the planner holds for them.
//!
//! PostgreSQL plans a query from per-column statistics that only `ANALYZE` gathers. Until a
//! table has them the planner assumes 200 distinct values in every column, so a join on
//! `copies.object_id` looks like 50 000 rows per object at 10 000 000 objects, and it picks hash
//! joins over whole tables: [`Catalogue::copies`] took 1.1 s there, and the `EXISTS` form of
//! the visibility test 21 s. Autovacuum normally gathers them, but a bulk archive outruns it
//! (it analyses after 10 % growth, at most once a minute per table), and a server run with
//! `autovacuum = off` never does. The PostgreSQL manual's advice for a bulk load is to run
//! `ANALYZE` afterwards; closing a container is reel's bulk load, so reel does it there.
//!
//! The rule ([`outgrown`]): once `objects` has at least [`MIN_OBJECTS`] rows and twice as many
//! as its statistics say (`pg_class.reltuples`, -1 before the first `ANALYZE`). A catalogue
//! growing from nothing to 10 000 000 objects is analysed about ten times, each time after its
//! size has doubled, so the cost stays a small fraction of the load's. The row count is read
//! as `MAX(id)` (an index probe; the catalogue never deletes objects, and ids lost to rolled
//! back closes only bring the next `ANALYZE` a little forward).
//!
//! Only the columns the catalogue's queries filter and join on are analysed: `objects (key,
//! generation)`, `copies (object_id, container_id)`, all of `containers` (small). On the 2-core
//! test machine, `ANALYZE` of the whole of `objects` at 10 000 000 rows took 4.1 s, of its
//! `key` column 1.8 s; the three statements together took 1.3 s at 5 000 000 objects.
//!
//! The `ANALYZE` runs in a task of its own after the close has committed, at most one at a
//! time per catalogue handle: a close does not wait for it. Its failure (for instance a role
//! that does not own the tables) is logged and changes nothing: the statistics only steer
//! plans, never results.

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};

use sqlx::PgPool;

use super::Catalogue;
use super::backend::Backend;
use super::error::{DbContext, Result};

/// Below this many objects the planner's defaults are harmless; no `ANALYZE` is run for them.
pub(crate) const MIN_OBJECTS: i64 = 10_000;

/// Whether `objects` rows have outgrown the statistics, which counted `reltuples` rows (-1:
/// never analysed).
pub(crate) fn outgrown(objects: i64, reltuples: f32) -> bool {
    objects >= MIN_OBJECTS && objects as f64 >= 2.0 * f64::from(reltuples.max(0.0))
}

/// The statements `ANALYZE` runs, in order.
const ANALYZE: [&str; 3] = [
    "ANALYZE objects (key, generation)",
    "ANALYZE copies (object_id, container_id)",
    "ANALYZE containers",
];

/// The per-handle state: whether an `ANALYZE` started after a close is still running.
/// Clones share it.
#[derive(Clone, Debug, Default)]
pub(crate) struct Statistics {
    running: Arc<AtomicBool>,
}

impl Statistics {
    /// After a container close on PostgreSQL: start an `ANALYZE` in the background if the
    /// tables have outgrown their statistics and none is running. Never fails: a failure to
    /// check is logged.
    pub(crate) async fn after_close(&self, pool: &PgPool) {
        if self.running.load(Ordering::Acquire) {
            return;
        }
        let Ok(runtime) = tokio::runtime::Handle::try_current() else {
            return;
        };
        match needs_analyze(pool).await {
            Ok(false) => {}
            Ok(true) => {
                if self
                    .running
                    .compare_exchange(false, true, Ordering::AcqRel, Ordering::Acquire)
                    .is_err()
                {
                    return;
                }
                let running = Arc::clone(&self.running);
                let pool = pool.clone();
                runtime.spawn(async move {
                    if let Err(e) = analyze(&pool).await {
                        tracing::warn!(
                            error = %e,
                            "planner statistics not refreshed; look-ups may take slow plans \
                             until ANALYZE runs (autovacuum, or the catalogue's owner)"
                        );
                    }
                    running.store(false, Ordering::Release);
                });
            }
            Err(e) => tracing::warn!(error = %e, "could not check the planner statistics"),
        }
    }
}

/// Whether `objects` has outgrown its statistics ([`outgrown`]).
async fn needs_analyze(pool: &PgPool) -> Result<bool> {
    const OP: &str = "check planner statistics";
    let (objects, reltuples): (i64, f32) = sqlx::query_as(
        "SELECT COALESCE((SELECT MAX(id) FROM objects), 0), \
                (SELECT reltuples FROM pg_class WHERE oid = 'objects'::regclass)",
    )
    .fetch_one(pool)
    .await
    .ctx(OP)?;
    Ok(outgrown(objects, reltuples))
}

/// Run [`ANALYZE`] on the catalogue's tables.
async fn analyze(pool: &PgPool) -> Result<()> {
    let started = std::time::Instant::now();
    for statement in ANALYZE {
        sqlx::query(statement).execute(pool).await.ctx("ANALYZE")?;
    }
    tracing::info!(
        seconds = started.elapsed().as_secs_f64(),
        "planner statistics refreshed (ANALYZE of objects, copies, containers)"
    );
    Ok(())
}

impl Catalogue {
    /// On PostgreSQL, run `ANALYZE` on the catalogue's tables now if they have outgrown their
    /// planner statistics (at least 10 000 objects, and twice as many as when they were last
    /// analysed, or never analysed), and wait for it; returns whether it ran.
    /// Closing a container does the same in the background; this is for operators and tests
    /// that want it done before they go on. On SQLite it does nothing (its planner prefers
    /// the indexes without statistics).
    pub async fn refresh_statistics(&self) -> Result<bool> {
        let Backend::Postgres(pool) = &self.backend else {
            return Ok(false);
        };
        if !needs_analyze(pool).await? {
            return Ok(false);
        }
        analyze(pool).await?;
        Ok(true)
    }

    /// Whether an `ANALYZE` started by a container close is still running on this handle.
    #[cfg(test)]
    pub(crate) fn statistics_running(&self) -> bool {
        self.statistics.running.load(Ordering::Acquire)
    }
}

#[cfg(test)]
mod tests {
    use std::time::{Duration, Instant};

    use uuid::Uuid;

    use super::*;
    use crate::catalogue::ContainerState;
    use crate::catalogue::test_support::{TestResult, cat, copy, labelled, on_both_backends, sha};
    use crate::catalogue::testing::TestCatalogue;

    on_both_backends!(a_bulk_load_is_analysed_after_its_close);

    /// What the planner believes `objects` holds (-1: never analysed).
    async fn reltuples(pool: &PgPool) -> std::result::Result<f32, sqlx::Error> {
        sqlx::query_scalar("SELECT reltuples FROM pg_class WHERE oid = 'objects'::regclass")
            .fetch_one(pool)
            .await
    }

    async fn a_bulk_load_is_analysed_after_its_close(db: &TestCatalogue) -> TestResult {
        let c = cat(db);
        labelled(c, "STAT01", "p").await?;
        let n = u32::try_from(MIN_OBJECTS)?;
        let copies: Vec<_> = (0..n)
            .map(|i| copy(&format!("stat/{i:05}"), 1, u64::from(i) * 10, 10, i))
            .collect();
        let id = c
            .create_container(Uuid::new_v4(), "STAT01", 1, 2, 1 << 20)
            .await?;
        let Some(pool) = c.pool_postgres() else {
            c.close_container(id, 3, u64::from(n) * 10, sha(1), &copies)
                .await?;
            // SQLite: nothing to do, nothing done.
            assert!(!c.refresh_statistics().await?);
            assert!(!c.statistics_running());
            return Ok(());
        };
        assert!(
            reltuples(pool).await? < 0.0,
            "a new catalogue is not analysed yet"
        );
        c.close_container(id, 3, u64::from(n) * 10, sha(1), &copies)
            .await?;
        // The close returned before the ANALYZE it started; wait for that one.
        let deadline = Instant::now() + Duration::from_secs(60);
        while c.statistics_running() {
            if Instant::now() > deadline {
                return Err("the ANALYZE started by the close did not finish in 60 s".into());
            }
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
        assert_eq!(reltuples(pool).await?, MIN_OBJECTS as f32);
        // Fresh statistics: nothing to refresh until the objects double.
        assert!(!c.refresh_statistics().await?);
        c.set_container_state(&[id], ContainerState::Durable)
            .await?;
        let o = c.object("stat/09999").await?.ok_or("missing")?;
        assert_eq!(o.sha256, sha(9999));
        Ok(())
    }

    #[test]
    fn statistics_are_refreshed_when_the_objects_have_doubled() {
        // Small catalogues keep the planner's defaults.
        assert!(!outgrown(MIN_OBJECTS - 1, -1.0));
        // Never analysed.
        assert!(outgrown(MIN_OBJECTS, -1.0));
        assert!(outgrown(MIN_OBJECTS, 0.0));
        // Analysed at 1 000 000: again at 2 000 000, not before.
        assert!(!outgrown(1_999_999, 1_000_000.0));
        assert!(outgrown(2_000_000, 1_000_000.0));
    }
}
