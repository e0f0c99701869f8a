//! Retention (`object_retention`): an object generation archived under a storage class with a
//! retention cannot be deleted before `created_unix + retain_days` days, and, when its class
//! says so, expires after it.
//!
//! The planner of an archive records the days of its class for each key and generation it
//! plans ([`Catalogue::record_retention`]), before anything is written: the generation becomes
//! visible later with the same (key, generation). The days are fixed then, so changing the
//! configuration shortens nothing already archived. The rule "still retained" is
//! `retained_now!`, used by the delete batch (which skips retained keys), the submission
//! check (which refuses them) and expiry ([`Catalogue::expire_batch`], which takes only what
//! it no longer covers, and never what a legal hold covers).

use serde::Serialize;

use super::Catalogue;
use super::backend::{Backend, from_db, in_write_tx, now_unix, on_pool, to_db};
use super::deletion::DAY;
use super::error::{CatalogueError, DbContext, Result};
use super::hold::active_holds_locked;

/// Rows one statement names at most.
const ROWS_PER_STATEMENT: usize = 500;

/// The SQL condition "generation `o` with retention `r` is still retained at `$now`" (the
/// placeholder is the caller's).
macro_rules! retained_now {
    ($now:literal) => {
        concat!("o.created_unix + r.retain_days * 86400 > ", $now)
    };
}
pub(crate) use retained_now;

/// One generation still under retention.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct Retained {
    /// The key.
    pub key: String,
    /// The generation.
    pub generation: u64,
    /// The storage class whose retention holds it.
    pub storage_class: String,
    /// Until when (unix seconds).
    pub until_unix: i64,
}

/// What one [`Catalogue::expire_batch`] did.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize)]
pub struct ExpireBatch {
    /// Generations deleted.
    pub objects: u64,
    /// Generations past their retention left alone because a legal hold covers their key.
    pub held: u64,
    /// The last object id looked at: the next batch starts after it.
    pub last_id: Option<i64>,
    /// Whether there may be more after it.
    pub more: bool,
}

impl Catalogue {
    /// Record that these (key, generation) of `class` are retained `days` days from their
    /// creation. A generation recorded twice keeps the longer retention.
    pub async fn record_retention(
        &self,
        class: &str,
        days: u64,
        objects: &[(String, u64)],
    ) -> Result<()> {
        const OP: &str = "record_retention";
        if days == 0 {
            return Ok(());
        }
        let days = to_db("retain_days", days)?;
        for chunk in objects.chunks(ROWS_PER_STATEMENT) {
            let gens = chunk
                .iter()
                .map(|(_, g)| to_db("generation", *g))
                .collect::<Result<Vec<i64>>>()?;
            on_pool!(&self.backend, |pool| {
                let mut qb = sqlx::QueryBuilder::new(
                    "INSERT INTO object_retention (key, generation, storage_class, retain_days) ",
                );
                qb.push_values(chunk.iter().zip(&gens), |mut row, ((key, _), g)| {
                    row.push_bind(key.as_str())
                        .push_bind(*g)
                        .push_bind(class)
                        .push_bind(days);
                });
                qb.push(
                    " ON CONFLICT (key, generation) DO UPDATE SET \
                     retain_days = CASE WHEN excluded.retain_days > object_retention.retain_days \
                     THEN excluded.retain_days ELSE object_retention.retain_days END, \
                     storage_class = CASE WHEN excluded.retain_days > object_retention.retain_days \
                     THEN excluded.storage_class ELSE object_retention.storage_class END",
                );
                qb.build().execute(pool).await.ctx(OP)?;
            });
        }
        Ok(())
    }

    /// The generations of `keys` that are not deleted and still retained now, by key.
    pub async fn retained_among(&self, keys: &[String]) -> Result<Vec<Retained>> {
        const OP: &str = "retained_among";
        let now = now_unix();
        let mut out = Vec::new();
        for chunk in keys.chunks(ROWS_PER_STATEMENT) {
            let rows: Vec<(String, i64, String, i64)> = on_pool!(&self.backend, |pool| {
                let mut qb = sqlx::QueryBuilder::new(concat!(
                    "SELECT o.key, o.generation, r.storage_class, \
                            o.created_unix + r.retain_days * 86400 \
                     FROM object_retention r \
                     JOIN objects o ON o.key = r.key AND o.generation = r.generation \
                     WHERE o.deletion_id IS NULL AND ",
                    retained_now!("")
                ));
                qb.push_bind(now);
                qb.push(" AND o.key IN (");
                let mut list = qb.separated(", ");
                for k in chunk {
                    list.push_bind(k.as_str());
                }
                qb.push(") ORDER BY o.key, o.generation");
                qb.build_query_as().fetch_all(pool).await.ctx(OP)?
            });
            for (key, g, storage_class, until_unix) in rows {
                out.push(Retained {
                    key,
                    generation: from_db("generation", g)?,
                    storage_class,
                    until_unix,
                });
            }
        }
        Ok(out)
    }

    /// Delete, with `deletion`, up to `limit` generations of `classes` whose retention has
    /// ended, with object id above `after_id`; those whose key a legal hold covers stay. One
    /// transaction.
    pub async fn expire_batch(
        &self,
        deletion: i64,
        classes: &[String],
        after_id: i64,
        limit: usize,
    ) -> Result<ExpireBatch> {
        const OP: &str = "expire_batch";
        if classes.is_empty() {
            return Ok(ExpireBatch::default());
        }
        let limit = limit.max(1);
        let now = now_unix();
        let postgres = matches!(self.backend, Backend::Postgres(_));
        let out = in_write_tx!(&self.backend, OP, |tx| {
            let holds = active_holds_locked!(tx, postgres, OP);
            let mut qb = sqlx::QueryBuilder::new(concat!(
                "SELECT o.id, o.key FROM object_retention r \
                 JOIN objects o ON o.key = r.key AND o.generation = r.generation \
                 WHERE o.deletion_id IS NULL AND NOT ",
                retained_now!("")
            ));
            qb.push_bind(now);
            qb.push(" AND o.id > ");
            qb.push_bind(after_id);
            qb.push(" AND r.storage_class IN (");
            let mut list = qb.separated(", ");
            for c in classes {
                list.push_bind(c.as_str());
            }
            qb.push(") ORDER BY o.id LIMIT ");
            qb.push_bind(i64::try_from(limit).unwrap_or(i64::MAX));
            let found: Vec<(i64, String)> =
                qb.build_query_as().fetch_all(&mut *tx).await.ctx(OP)?;
            let mut batch = ExpireBatch {
                last_id: found.last().map(|(id, _)| *id),
                more: found.len() == limit,
                ..ExpireBatch::default()
            };
            let mut doomed = Vec::with_capacity(found.len());
            for (id, key) in &found {
                if holds.iter().any(|h| h.covers(key)) {
                    batch.held += 1;
                } else {
                    doomed.push(*id);
                }
            }
            for chunk in doomed.chunks(ROWS_PER_STATEMENT) {
                let mut qb = sqlx::QueryBuilder::new("UPDATE objects SET deletion_id = ");
                qb.push_bind(deletion);
                qb.push(" WHERE deletion_id IS NULL AND id IN (");
                let mut list = qb.separated(", ");
                for id in chunk {
                    list.push_bind(*id);
                }
                qb.push(")");
                batch.objects += qb.build().execute(&mut *tx).await.ctx(OP)?.rows_affected();
            }
            batch
        });
        Ok(out)
    }
}

/// The refusal of deleting a retained generation.
pub fn retained_refusal(r: &Retained) -> CatalogueError {
    CatalogueError::Retained {
        key: super::error::shorten(&r.key),
        generation: r.generation,
        storage_class: r.storage_class.clone(),
        days_left: ((r.until_unix - now_unix()).max(1) + DAY as i64 - 1) / DAY as i64,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::catalogue::ContainerState;
    use crate::catalogue::deletion::DeleteScope;
    use crate::catalogue::hold::HoldScope;
    use crate::catalogue::test_support::{
        TestResult, cat, container_with, copy, labelled, on_both_backends,
    };
    use crate::catalogue::testing::TestCatalogue;

    on_both_backends!(retained_generations_are_not_deleted_and_expire_after);

    /// Move every object's creation `days` back.
    async fn age(c: &Catalogue, days: i64) -> TestResult {
        on_pool!(&c.backend, |pool| {
            sqlx::query("UPDATE objects SET created_unix = created_unix - $1")
                .bind(days * 86_400)
                .execute(pool)
                .await?;
        });
        Ok(())
    }

    async fn retained_generations_are_not_deleted_and_expire_after(
        db: &TestCatalogue,
    ) -> TestResult {
        let c = cat(db);
        labelled(c, "A1", "p").await?;
        let keys = ["r/a", "r/b", "r/c", "s/a"];
        let copies: Vec<_> = keys
            .iter()
            .enumerate()
            .map(|(i, k)| copy(k, 1, i as u64 * 10, 10, i as u32))
            .collect();
        container_with(c, "A1", &copies, ContainerState::Durable).await?;
        let gens = |ks: &[&str]| ks.iter().map(|k| (k.to_string(), 1u64)).collect::<Vec<_>>();
        c.record_retention("gold", 2, &gens(&["r/a", "r/b", "r/c"]))
            .await?;
        c.record_retention("silver", 1, &gens(&["s/a"])).await?;
        // Recorded twice with a shorter retention: the longer one stays.
        c.record_retention("gold", 1, &gens(&["r/a"])).await?;
        let named = ["r/a".to_string(), "s/a".to_string()];
        let r = c.retained_among(&named).await?;
        assert_eq!(r.len(), 2);
        assert_eq!((r[0].storage_class.as_str(), r[0].generation), ("gold", 1));
        assert!(
            retained_refusal(&r[0])
                .to_string()
                .contains("2 more day(s)")
        );
        // A prefix delete skips what is retained.
        let p = DeleteScope::Prefix("r/");
        let d = c.open_deletion("j1", "alice", "tidy", &p, 31 * DAY).await?;
        let b = c.delete_batch(d, &p, "", 100).await?;
        assert_eq!((b.keys, b.retained.len()), (0, 3));
        // Nothing has expired yet.
        let run = c
            .open_expiry("expiry-1", &["gold".into()], 31 * DAY)
            .await?;
        assert_eq!(
            c.expire_batch(run, &["gold".into()], 0, 100).await?.objects,
            0
        );
        // A day and a bit later silver's retention is over, gold's is not.
        age(c, 1).await?;
        assert_eq!(c.retained_among(&named).await?.len(), 1);
        let one = ["s/a".to_string()];
        let k = DeleteScope::Keys(&one);
        let d2 = c.open_deletion("j2", "alice", "tidy", &k, 31 * DAY).await?;
        assert_eq!(c.delete_batch(d2, &k, "", 100).await?.keys, 1);
        // Three days on, gold expires, except the key under a hold; silver is not expiring.
        age(c, 2).await?;
        let h = c
            .place_hold(&HoldScope::Key("r/b".into()), "legal", "case")
            .await?;
        let mut after = 0;
        let (mut objects, mut held) = (0, 0);
        loop {
            let b = c.expire_batch(run, &["gold".into()], after, 2).await?;
            objects += b.objects;
            held += b.held;
            match (b.more, b.last_id) {
                (true, Some(id)) => after = id,
                _ => break,
            }
        }
        assert_eq!((objects, held), (2, 1));
        assert!(c.object("r/a").await?.is_none());
        assert!(c.object("r/b").await?.is_some());
        let log = c.recycle_log("r/", 10).await?;
        assert_eq!(log.len(), 2);
        assert_eq!(log[0].deleted_by, "reel (retention)");
        c.release_hold(h.id, "legal", "closed").await?;
        assert_eq!(
            c.expire_batch(run, &["gold".into()], 0, 100).await?.objects,
            1
        );
        Ok(())
    }
}
