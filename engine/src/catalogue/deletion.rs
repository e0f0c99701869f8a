//! Deleting objects (`deletions`, `objects.deletion_id`): immediate in the catalogue, logical
//! on tape.
//!
//! A delete job opens one deletion ([`Catalogue::open_deletion`]: who, why, what was asked)
//! and marks objects with it in bounded batches ([`Catalogue::delete_batch`]), each one
//! transaction, so a prefix of a million keys is a thousand short transactions that a crash
//! interrupts between, never a million round trips or one transaction holding the store. A
//! marked object is gone from look-ups, listings and recalls (the `visible!` rule of
//! `object.rs`), every generation of its key with it. It is in the recycle log
//! ([`Catalogue::recycle_log`]) and [`Catalogue::undelete`] brings it back while its deletion
//! is younger than the quarantine; after that its copies are dead space, which reclaim may
//! erase. The bytes stay on tape until then: a tape is append-only, so space comes back only
//! by reclaiming a whole cartridge.
//!
//! A batch reads the active legal holds in its own transaction and skips the keys they cover
//! (`hold.rs` says what a hold covers); a submission is refused before that if it meets one.

use serde::Serialize;

use super::Catalogue;
use super::backend::{Backend, in_write_tx, now_unix, on_pool};
use super::error::{CatalogueError, DbContext, Result, shorten};
use super::hold::{active_holds_locked, check_reason};
use super::object::{prefix_upper_bound, validate_key, validate_key_prefix};
use super::retention::retained_now;

/// Keys one statement names at most.
const KEYS_PER_STATEMENT: usize = 500;

/// Seconds in a day.
pub const DAY: u64 = 86_400;

/// What a deletion or an undelete names.
#[derive(Clone, Copy, Debug)]
pub enum DeleteScope<'a> {
    /// These keys (sorted, without repeats).
    Keys(&'a [String]),
    /// Every key under this prefix (never empty).
    Prefix(&'a str),
}

impl DeleteScope<'_> {
    /// `prefix a/` or `3 keys`, as the deletion records it.
    pub fn describe(&self) -> String {
        match self {
            DeleteScope::Keys([k]) => format!("key {k}"),
            DeleteScope::Keys(k) => format!("{} keys", k.len()),
            DeleteScope::Prefix(p) => format!("prefix {p}"),
        }
    }

    fn check(&self) -> Result<()> {
        match self {
            DeleteScope::Keys(keys) => {
                for k in *keys {
                    validate_key(k)?;
                }
                if keys.windows(2).any(|w| w[0] >= w[1]) {
                    return Err(CatalogueError::InvalidInput {
                        what: "key list",
                        value: format!("{} keys", keys.len()),
                        reason: "it is not sorted without repeats (a bug in the caller)".into(),
                    });
                }
                Ok(())
            }
            DeleteScope::Prefix(p) => {
                validate_key_prefix(p)?;
                if p.is_empty() {
                    return Err(CatalogueError::InvalidInput {
                        what: "prefix",
                        value: String::new(),
                        reason: "an empty prefix names every object; give a prefix".into(),
                    });
                }
                Ok(())
            }
        }
    }
}

/// What one [`Catalogue::delete_batch`] did.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize)]
pub struct DeleteBatch {
    /// Keys deleted.
    pub keys: u64,
    /// Object generations deleted (every generation of a key goes with it).
    pub objects: u64,
    /// Keys skipped because a legal hold covers them, with the hold's number.
    pub held: Vec<(String, i64)>,
    /// Keys named that have nothing to delete (never archived, or deleted already).
    pub missing: Vec<String>,
    /// Keys skipped because their storage class still retains a generation of them.
    pub retained: Vec<String>,
    /// The last key this batch looked at: the next batch starts after it.
    pub last: Option<String>,
    /// Whether there may be more after `last`.
    pub more: bool,
}

/// What [`Catalogue::undelete`] brought back.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize)]
pub struct Undeleted {
    /// Keys brought back.
    pub keys: u64,
    /// Object generations brought back.
    pub objects: u64,
    /// Keys under the prefix whose deletion is past the quarantine (not brought back).
    pub past_quarantine: u64,
}

/// One deleted object generation in the recycle log.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct Recycled {
    /// The key.
    pub key: String,
    /// The generation.
    pub generation: u64,
    /// Its size in bytes.
    pub size: u64,
    /// The deletion's number.
    pub deletion: i64,
    /// The delete job.
    pub job_id: String,
    /// When (unix seconds).
    pub deleted_unix: i64,
    /// Who deleted it.
    pub deleted_by: String,
    /// Why.
    pub reason: String,
    /// When its quarantine ends (unix seconds): until then `reel undelete` brings it back.
    pub purge_after_unix: i64,
}

#[derive(sqlx::FromRow)]
struct RecycledRow {
    key: String,
    generation: i64,
    size: i64,
    deletion: i64,
    job_id: String,
    deleted_unix: i64,
    purge_after_unix: i64,
    deleted_by: String,
    reason: String,
}

impl Catalogue {
    /// The deletion of delete job `job_id`: made now (by `by`, for `reason`, of `scope`, with
    /// a quarantine of `quarantine_secs` from now) or, for a job run again after a crash, the
    /// one its first run made.
    pub async fn open_deletion(
        &self,
        job_id: &str,
        by: &str,
        reason: &str,
        scope: &DeleteScope<'_>,
        quarantine_secs: u64,
    ) -> Result<i64> {
        check_reason("reason", reason)?;
        check_reason("name of who deletes", by)?;
        scope.check()?;
        self.insert_deletion(job_id, by, reason, &scope.describe(), quarantine_secs)
            .await
    }

    /// The deletion of the expiry run `run` (one per run of `reel_worker::delete::expire`), by
    /// reel, of what the retention of `classes` no longer covers.
    pub async fn open_expiry(
        &self,
        run: &str,
        classes: &[String],
        quarantine_secs: u64,
    ) -> Result<i64> {
        self.insert_deletion(
            run,
            "reel (retention)",
            &format!("its retention ended (storage class {})", classes.join(", ")),
            "expiry",
            quarantine_secs,
        )
        .await
    }

    async fn insert_deletion(
        &self,
        job_id: &str,
        by: &str,
        reason: &str,
        scope: &str,
        quarantine_secs: u64,
    ) -> Result<i64> {
        const OP: &str = "open_deletion";
        let now = now_unix();
        let purge = now.saturating_add(i64::try_from(quarantine_secs).unwrap_or(i64::MAX));
        let id: i64 = on_pool!(&self.backend, |pool| {
            sqlx::query(
                "INSERT INTO deletions \
                 (job_id, deleted_unix, purge_after_unix, deleted_by, reason, scope) \
                 VALUES ($1, $2, $3, $4, $5, $6) ON CONFLICT (job_id) DO NOTHING",
            )
            .bind(job_id)
            .bind(now)
            .bind(purge)
            .bind(by.trim())
            .bind(reason.trim())
            .bind(shorten(scope))
            .execute(pool)
            .await
            .ctx(OP)?;
            sqlx::query_scalar("SELECT id FROM deletions WHERE job_id = $1")
                .bind(job_id)
                .fetch_one(pool)
                .await
                .ctx(OP)?
        });
        Ok(id)
    }

    /// Mark with `deletion` every generation of the next at most `limit` keys of `scope` that
    /// sort after `after` (`""`: from the start), skipping those a legal hold covers; one
    /// transaction. Returns what it did and where the next batch starts. Keys are checked
    /// (valid, sorted, no repeats) a batch at a time, the ones the batch looks at: a job of
    /// 100 000 keys in batches of 2000 checks each key once, not once per batch.
    pub async fn delete_batch(
        &self,
        deletion: i64,
        scope: &DeleteScope<'_>,
        after: &str,
        limit: usize,
    ) -> Result<DeleteBatch> {
        const OP: &str = "delete_batch";
        let limit = limit.max(1);
        // The keys this batch looks at, checked here (a prefix is checked whole: one string).
        let window: &[String] = match scope {
            DeleteScope::Keys(keys) => {
                let start = keys.partition_point(|k| k.as_str() <= after);
                let end = keys.len().min(start.saturating_add(limit));
                let window = &keys[start..end];
                DeleteScope::Keys(window).check()?;
                window
            }
            DeleteScope::Prefix(_) => {
                scope.check()?;
                &[]
            }
        };
        let now = now_unix();
        let postgres = matches!(self.backend, Backend::Postgres(_));
        let out = in_write_tx!(&self.backend, OP, |tx| {
            let holds = active_holds_locked!(tx, postgres, OP);
            // The keys this batch looks at, and which of them have something to delete.
            let (looked, live): (Vec<String>, Vec<String>) = match scope {
                DeleteScope::Keys(_) => {
                    let looked: Vec<String> = window.to_vec();
                    let mut live = Vec::with_capacity(looked.len());
                    for chunk in looked.chunks(KEYS_PER_STATEMENT) {
                        let mut qb = sqlx::QueryBuilder::new(
                            "SELECT DISTINCT key FROM objects WHERE deletion_id IS NULL AND key IN (",
                        );
                        let mut list = qb.separated(", ");
                        for k in chunk {
                            list.push_bind(k.as_str());
                        }
                        qb.push(")");
                        let found: Vec<String> =
                            qb.build_query_scalar().fetch_all(&mut *tx).await.ctx(OP)?;
                        live.extend(found);
                    }
                    live.sort();
                    (looked, live)
                }
                DeleteScope::Prefix(prefix) => {
                    let n = i64::try_from(limit).unwrap_or(i64::MAX);
                    let found: Vec<String> = match prefix_upper_bound(prefix) {
                        Some(upper) => sqlx::query_scalar(
                            "SELECT DISTINCT key FROM objects WHERE key >= $1 AND key < $2 \
                             AND key > $3 AND deletion_id IS NULL ORDER BY key LIMIT $4",
                        )
                        .bind(*prefix)
                        .bind(upper)
                        .bind(after)
                        .bind(n)
                        .fetch_all(&mut *tx)
                        .await
                        .ctx(OP)?,
                        None => sqlx::query_scalar(
                            "SELECT DISTINCT key FROM objects WHERE key >= $1 \
                             AND key > $2 AND deletion_id IS NULL ORDER BY key LIMIT $3",
                        )
                        .bind(*prefix)
                        .bind(after)
                        .bind(n)
                        .fetch_all(&mut *tx)
                        .await
                        .ctx(OP)?,
                    };
                    (found.clone(), found)
                }
            };
            let mut batch = DeleteBatch {
                last: looked.last().cloned(),
                more: looked.len() == limit,
                ..DeleteBatch::default()
            };
            if let DeleteScope::Keys(_) = scope {
                batch.missing = looked
                    .iter()
                    .filter(|k| live.binary_search(k).is_err())
                    .cloned()
                    .collect();
            }
            // Keys with a generation their class still retains stay, as held ones do.
            let mut retained = std::collections::HashSet::new();
            for chunk in live.chunks(KEYS_PER_STATEMENT) {
                let mut qb = sqlx::QueryBuilder::new(concat!(
                    "SELECT DISTINCT o.key FROM object_retention r \
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
                qb.push(")");
                let found: Vec<String> =
                    qb.build_query_scalar().fetch_all(&mut *tx).await.ctx(OP)?;
                retained.extend(found);
            }
            let mut doomed = Vec::with_capacity(live.len());
            for k in live {
                match holds.iter().find(|h| h.covers(&k)) {
                    Some(h) => batch.held.push((k, h.id)),
                    None if retained.contains(&k) => batch.retained.push(k),
                    None => doomed.push(k),
                }
            }
            for chunk in doomed.chunks(KEYS_PER_STATEMENT) {
                let mut qb = sqlx::QueryBuilder::new("UPDATE objects SET deletion_id = ");
                qb.push_bind(deletion);
                qb.push(" WHERE deletion_id IS NULL AND key IN (");
                let mut list = qb.separated(", ");
                for k in chunk {
                    list.push_bind(k.as_str());
                }
                qb.push(")");
                let done = qb.build().execute(&mut *tx).await.ctx(OP)?;
                batch.objects += done.rows_affected();
            }
            batch.keys = doomed.len() as u64;
            batch
        });
        Ok(out)
    }

    /// Bring back what `scope` names whose deletion's quarantine has not ended (the quarantine
    /// is fixed when the deletion is made: a later, longer setting brings back nothing whose
    /// copies were already dead space), every generation of each key. Keys named one by one
    /// are all brought back or none: one that is not deleted, or past its quarantine, refuses
    /// the call. A prefix brings back what it can and counts the keys it cannot; it is refused
    /// only when nothing under it can come back.
    pub async fn undelete(&self, scope: &DeleteScope<'_>) -> Result<Undeleted> {
        const OP: &str = "undelete";
        scope.check()?;
        let now = now_unix();
        let past = |what: String, deleted: i64, quarantine: i64| CatalogueError::PastQuarantine {
            what,
            days: (now - deleted).max(0) / DAY as i64,
            quarantine_days: u64::try_from(quarantine.max(0)).unwrap_or(0) / DAY,
        };
        let out = in_write_tx!(&self.backend, OP, |tx| {
            let mut out = Undeleted::default();
            match scope {
                DeleteScope::Keys(keys) => {
                    for chunk in keys.chunks(KEYS_PER_STATEMENT) {
                        // Each key's latest deletion: when its quarantine ends, when it was
                        // made, how long it was.
                        let mut qb = sqlx::QueryBuilder::new(
                            "SELECT o.key, MAX(d.purge_after_unix), MAX(d.deleted_unix), \
                                    MAX(d.purge_after_unix - d.deleted_unix) FROM objects o \
                             JOIN deletions d ON d.id = o.deletion_id WHERE o.key IN (",
                        );
                        let mut list = qb.separated(", ");
                        for k in chunk {
                            list.push_bind(k.as_str());
                        }
                        qb.push(") GROUP BY o.key");
                        let found: Vec<(String, i64, i64, i64)> =
                            qb.build_query_as().fetch_all(&mut *tx).await.ctx(OP)?;
                        let found: std::collections::HashMap<String, (i64, i64, i64)> = found
                            .into_iter()
                            .map(|(k, purge, deleted, q)| (k, (purge, deleted, q)))
                            .collect();
                        for k in chunk {
                            match found.get(k) {
                                None => {
                                    return Err(CatalogueError::InvalidKey {
                                        key: shorten(k),
                                        reason: "nothing of it is deleted; list what is with \
                                                 `reel recycle ls`"
                                            .into(),
                                    });
                                }
                                Some(&(purge, deleted, q)) if purge <= now => {
                                    return Err(past(format!("key {}", shorten(k)), deleted, q));
                                }
                                Some(_) => {}
                            }
                        }
                        let mut qb = sqlx::QueryBuilder::new(
                            "UPDATE objects SET deletion_id = NULL WHERE deletion_id IN \
                             (SELECT id FROM deletions WHERE purge_after_unix > ",
                        );
                        qb.push_bind(now);
                        qb.push(") AND key IN (");
                        let mut list = qb.separated(", ");
                        for k in chunk {
                            list.push_bind(k.as_str());
                        }
                        qb.push(")");
                        out.objects += qb.build().execute(&mut *tx).await.ctx(OP)?.rows_affected();
                        out.keys += chunk.len() as u64;
                    }
                }
                DeleteScope::Prefix(prefix) => {
                    let upper =
                        prefix_upper_bound(prefix).unwrap_or_else(|| "\u{10FFFF}".repeat(2));
                    // Keys that can come back, keys with something deleted, and of the
                    // deletions past their quarantine the latest and its length.
                    let (within, all, newest_past, quarantine): (
                        i64,
                        i64,
                        Option<i64>,
                        Option<i64>,
                    ) = sqlx::query_as(
                        "SELECT \
                               COUNT(DISTINCT CASE WHEN d.purge_after_unix > $3 THEN o.key END), \
                               COUNT(DISTINCT o.key), \
                               MAX(CASE WHEN d.purge_after_unix <= $3 THEN d.deleted_unix END), \
                               MAX(CASE WHEN d.purge_after_unix <= $3 \
                                   THEN d.purge_after_unix - d.deleted_unix END) \
                             FROM objects o JOIN deletions d ON d.id = o.deletion_id \
                             WHERE o.key >= $1 AND o.key < $2",
                    )
                    .bind(*prefix)
                    .bind(&upper)
                    .bind(now)
                    .fetch_one(&mut *tx)
                    .await
                    .ctx(OP)?;
                    if within == 0 {
                        return Err(match newest_past {
                            Some(deleted) if all > 0 => past(
                                format!("everything deleted under prefix {}", shorten(prefix)),
                                deleted,
                                quarantine.unwrap_or(0),
                            ),
                            _ => CatalogueError::InvalidInput {
                                what: "prefix",
                                value: shorten(prefix),
                                reason: "nothing under it is deleted; list what is with \
                                         `reel recycle ls`"
                                    .into(),
                            },
                        });
                    }
                    let done = sqlx::query(
                        "UPDATE objects SET deletion_id = NULL WHERE key >= $1 AND key < $2 \
                         AND deletion_id IN (SELECT id FROM deletions WHERE purge_after_unix > $3)",
                    )
                    .bind(*prefix)
                    .bind(&upper)
                    .bind(now)
                    .execute(&mut *tx)
                    .await
                    .ctx(OP)?;
                    out.objects = done.rows_affected();
                    out.keys = within as u64;
                    out.past_quarantine = (all - within).max(0) as u64;
                }
            }
            out
        });
        Ok(out)
    }

    /// The recycle log: deleted object generations whose key starts with `prefix` (`""`:
    /// all), by key and generation, at most `limit`, each with when its quarantine ends.
    pub async fn recycle_log(&self, prefix: &str, limit: u64) -> Result<Vec<Recycled>> {
        const OP: &str = "recycle_log";
        validate_key_prefix(prefix)?;
        let limit = i64::try_from(limit).unwrap_or(i64::MAX);
        let upper = prefix_upper_bound(prefix).unwrap_or_else(|| "\u{10FFFF}".repeat(2));
        let rows: Vec<RecycledRow> = on_pool!(&self.backend, |pool| {
            sqlx::query_as(
                "SELECT o.key, o.generation, o.size, d.id AS deletion, d.job_id, \
                        d.deleted_unix, d.purge_after_unix, d.deleted_by, d.reason \
                 FROM objects o JOIN deletions d ON d.id = o.deletion_id \
                 WHERE o.deletion_id IS NOT NULL AND o.key >= $1 AND o.key < $2 \
                 ORDER BY o.key, o.generation LIMIT $3",
            )
            .bind(prefix)
            .bind(&upper)
            .bind(limit)
            .fetch_all(pool)
            .await
            .ctx(OP)?
        });
        rows.into_iter()
            .map(|r| {
                Ok(Recycled {
                    generation: super::backend::from_db("generation", r.generation)?,
                    size: super::backend::from_db("size", r.size)?,
                    purge_after_unix: r.purge_after_unix,
                    key: r.key,
                    deletion: r.deletion,
                    job_id: r.job_id,
                    deleted_unix: r.deleted_unix,
                    deleted_by: r.deleted_by,
                    reason: r.reason,
                })
            })
            .collect()
    }

    /// How many keys and object generations deletion `id` holds deleted now (every attempt of
    /// its job together, less what was undeleted).
    pub async fn deletion_size(&self, id: i64) -> Result<(u64, u64)> {
        const OP: &str = "deletion_size";
        let (keys, objects): (i64, i64) = on_pool!(&self.backend, |pool| {
            sqlx::query_as(
                "SELECT COUNT(DISTINCT key), COUNT(*) FROM objects WHERE deletion_id = $1",
            )
            .bind(id)
            .fetch_one(pool)
            .await
            .ctx(OP)?
        });
        Ok((
            u64::try_from(keys).unwrap_or(0),
            u64::try_from(objects).unwrap_or(0),
        ))
    }

    /// Remove deletion `id` if it deleted nothing (an expiry run that found nothing due).
    pub async fn drop_empty_deletion(&self, id: i64) -> Result<()> {
        const OP: &str = "drop_empty_deletion";
        on_pool!(&self.backend, |pool| {
            sqlx::query(
                "DELETE FROM deletions WHERE id = $1 \
                 AND NOT EXISTS (SELECT 1 FROM objects WHERE deletion_id = $1)",
            )
            .bind(id)
            .execute(pool)
            .await
            .ctx(OP)?;
        });
        Ok(())
    }

    /// Which of `keys` have something to delete (a generation not deleted), in the order given.
    pub async fn live_among(&self, keys: &[String]) -> Result<Vec<String>> {
        const OP: &str = "live_among";
        let mut live = std::collections::HashSet::new();
        for chunk in keys.chunks(KEYS_PER_STATEMENT) {
            for k in chunk {
                validate_key(k)?;
            }
            let found: Vec<String> = on_pool!(&self.backend, |pool| {
                let mut qb = sqlx::QueryBuilder::new(
                    "SELECT DISTINCT key FROM objects WHERE deletion_id IS NULL AND key IN (",
                );
                let mut list = qb.separated(", ");
                for k in chunk {
                    list.push_bind(k.as_str());
                }
                qb.push(")");
                qb.build_query_scalar().fetch_all(pool).await.ctx(OP)?
            });
            live.extend(found);
        }
        Ok(keys.iter().filter(|k| live.contains(*k)).cloned().collect())
    }

    /// Whether some key under `prefix` has something to delete. (Whether there is one, not
    /// how many: a count of a million keys is a scan.)
    pub async fn live_under(&self, prefix: &str) -> Result<bool> {
        const OP: &str = "live_under";
        validate_key_prefix(prefix)?;
        let upper = prefix_upper_bound(prefix).unwrap_or_else(|| "\u{10FFFF}".repeat(2));
        let one: Option<String> = on_pool!(&self.backend, |pool| {
            sqlx::query_scalar(
                "SELECT key FROM objects WHERE key >= $1 AND key < $2 \
                 AND deletion_id IS NULL ORDER BY key LIMIT 1",
            )
            .bind(prefix)
            .bind(&upper)
            .fetch_optional(pool)
            .await
            .ctx(OP)?
        });
        Ok(one.is_some())
    }
}

/// The quarantine as seconds, from days.
pub fn quarantine_secs(days: u64) -> u64 {
    days.saturating_mul(DAY)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::catalogue::ContainerState;
    use crate::catalogue::hold::HoldScope;
    use crate::catalogue::test_support::{
        TestResult, cat, container_with, copy, labelled, on_both_backends,
    };
    use crate::catalogue::testing::TestCatalogue;

    on_both_backends!(
        a_prefix_is_deleted_in_batches_and_comes_back_within_quarantine,
        held_keys_are_skipped_and_named_keys_report_what_is_missing,
        past_the_quarantine_nothing_comes_back
    );

    const Q: u64 = 31 * DAY;

    async fn archive(c: &Catalogue, keys: &[&str]) -> TestResult {
        let copies: Vec<_> = keys
            .iter()
            .enumerate()
            .map(|(i, k)| copy(k, 1, i as u64 * 10, 10, i as u32))
            .collect();
        container_with(c, "A1", &copies, ContainerState::Durable).await?;
        Ok(())
    }

    async fn a_prefix_is_deleted_in_batches_and_comes_back_within_quarantine(
        db: &TestCatalogue,
    ) -> TestResult {
        let c = cat(db);
        labelled(c, "A1", "p").await?;
        let keys: Vec<String> = (0..7).map(|i| format!("d/{i}")).collect();
        let mut all: Vec<&str> = keys.iter().map(String::as_str).collect();
        all.push("e/0");
        archive(c, &all).await?;
        let scope = DeleteScope::Prefix("d/");
        assert!(c.live_under("d/").await?);
        let d = c
            .open_deletion("job1", "alice", "cleanup", &scope, Q)
            .await?;
        // The same job again (a crash and a retry): the same deletion.
        assert_eq!(
            c.open_deletion("job1", "alice", "cleanup", &scope, Q)
                .await?,
            d
        );
        let mut after = String::new();
        let mut deleted = 0;
        let mut batches = 0;
        loop {
            let b = c.delete_batch(d, &scope, &after, 3).await?;
            deleted += b.keys;
            batches += 1;
            match (b.more, b.last) {
                (true, Some(l)) => after = l,
                _ => break,
            }
        }
        assert_eq!((deleted, batches), (7, 3));
        assert!(c.object("d/3").await?.is_none());
        assert!(c.object("e/0").await?.is_some());
        assert_eq!(c.list_objects("", 100).await?.len(), 1);
        assert_eq!(c.count_objects().await?, 1);
        assert!(!c.live_under("d/").await?);
        let named = ["d/1".to_string(), "e/0".to_string(), "zz".to_string()];
        assert_eq!(c.live_among(&named).await?, vec!["e/0".to_string()]);
        let log = c.recycle_log("d/", 100).await?;
        assert_eq!(log.len(), 7);
        assert_eq!(log[0].deleted_by, "alice");
        assert_eq!(log[0].purge_after_unix, log[0].deleted_unix + Q as i64);
        // A batch after everything is deleted finds nothing.
        let b = c.delete_batch(d, &scope, "", 3).await?;
        assert_eq!((b.keys, b.more), (0, false));
        // Undelete one key, then the rest by prefix.
        let one = ["d/3".to_string()];
        let u = c.undelete(&DeleteScope::Keys(&one)).await?;
        assert_eq!((u.keys, u.objects), (1, 1));
        assert!(c.object("d/3").await?.is_some());
        // Undeleting a key that is not deleted is refused, naming it.
        let e = c.undelete(&DeleteScope::Keys(&one)).await.unwrap_err();
        assert!(e.to_string().contains("nothing of it is deleted"), "{e}");
        let u = c.undelete(&scope).await?;
        assert_eq!((u.keys, u.past_quarantine), (6, 0));
        assert_eq!(c.list_objects("d/", 100).await?.len(), 7);
        assert!(c.recycle_log("", 100).await?.is_empty());
        // Nothing deleted under the prefix any more: refused.
        assert!(c.undelete(&scope).await.is_err());
        // Refusals of the scope itself.
        assert!(
            c.delete_batch(d, &DeleteScope::Prefix(""), "", 3)
                .await
                .is_err()
        );
        let unsorted = ["b".to_string(), "a".to_string()];
        assert!(
            c.delete_batch(d, &DeleteScope::Keys(&unsorted), "", 3)
                .await
                .is_err()
        );
        Ok(())
    }

    async fn held_keys_are_skipped_and_named_keys_report_what_is_missing(
        db: &TestCatalogue,
    ) -> TestResult {
        let c = cat(db);
        labelled(c, "A1", "p").await?;
        archive(c, &["h/a", "h/b", "h/c", "k"]).await?;
        let h = c
            .place_hold(&HoldScope::Key("h/b".into()), "legal", "case 7")
            .await?;
        let keys: Vec<String> = ["h/a", "h/b", "nope"].map(String::from).to_vec();
        let scope = DeleteScope::Keys(&keys);
        let d = c.open_deletion("job2", "bob", "tidy", &scope, Q).await?;
        let b = c.delete_batch(d, &scope, "", 100).await?;
        assert_eq!(b.keys, 1);
        assert_eq!(b.held, vec![("h/b".to_string(), h.id)]);
        assert_eq!(b.missing, vec!["nope".to_string()]);
        assert!(!b.more);
        assert!(c.object("h/a").await?.is_none());
        assert!(c.object("h/b").await?.is_some());
        // A prefix deletion skips the held key too; once released it goes.
        let p = DeleteScope::Prefix("h/");
        let d2 = c.open_deletion("job3", "bob", "tidy", &p, Q).await?;
        let b = c.delete_batch(d2, &p, "", 100).await?;
        assert_eq!((b.keys, b.held.len()), (1, 1));
        c.release_hold(h.id, "legal", "closed").await?;
        let b = c.delete_batch(d2, &p, "", 100).await?;
        assert_eq!((b.keys, b.held.len()), (1, 0));
        assert!(c.list_objects("h/", 10).await?.is_empty());
        assert!(c.object("k").await?.is_some());
        Ok(())
    }

    async fn past_the_quarantine_nothing_comes_back(db: &TestCatalogue) -> TestResult {
        let c = cat(db);
        labelled(c, "A1", "p").await?;
        archive(c, &["q/a", "q/b"]).await?;
        let p = DeleteScope::Prefix("q/");
        // An hour's quarantine, made a day ago.
        let d = c.open_deletion("job4", "carol", "old", &p, 3600).await?;
        c.delete_batch(d, &p, "", 100).await?;
        on_pool!(&c.backend, |pool| {
            sqlx::query(
                "UPDATE deletions SET deleted_unix = deleted_unix - 86400, \
                 purge_after_unix = purge_after_unix - 86400 WHERE id = $1",
            )
            .bind(d)
            .execute(pool)
            .await?;
        });
        let e = c.undelete(&p).await.unwrap_err();
        assert!(
            matches!(
                e,
                CatalogueError::PastQuarantine {
                    days: 1,
                    quarantine_days: 0,
                    ..
                }
            ),
            "{e}"
        );
        let one = ["q/a".to_string()];
        let e = c.undelete(&DeleteScope::Keys(&one)).await.unwrap_err();
        assert!(e.to_string().contains("past the 0-day quarantine"), "{e}");
        assert!(c.object("q/a").await?.is_none());
        // A later deletion with a long quarantine comes back alone: the prefix brings back
        // what it can and counts the rest.
        labelled(c, "A2", "p").await?;
        let copies = [copy("q/c", 1, 0, 10, 9)];
        container_with(c, "A2", &copies, ContainerState::Durable).await?;
        let three = ["q/c".to_string()];
        let k = DeleteScope::Keys(&three);
        let d2 = c.open_deletion("job5", "carol", "new", &k, Q).await?;
        c.delete_batch(d2, &k, "", 100).await?;
        let u = c.undelete(&p).await?;
        assert_eq!((u.keys, u.past_quarantine), (1, 2));
        assert!(c.object("q/c").await?.is_some() && c.object("q/a").await?.is_none());
        Ok(())
    }
}
