//! What a repack asks of the catalogue: the live copies of a cartridge in tape order, how much
//! live data a cartridge holds, and the one step that retires a copy once another is safe.
//!
//! A copy is **live** when its object is not deleted and its container is durable or verified:
//! the same rule as `visible!` in `object.rs`, applied to one cartridge. A deleted object's
//! copies are not live: a repack leaves them where they are (they are dead space once their
//! quarantine ends, and `reel undelete` still finds them until then).
//!
//! [`Catalogue::drop_copy_on`] is the only way a copy leaves the catalogue while its object
//! stays: in one transaction it checks that the object keeps a copy in a durable (or, when
//! asked, verified) container on another cartridge, and only then deletes the copy rows on the
//! cartridge being emptied. On PostgreSQL the object's row is locked first, so two repacks of
//! two cartridges holding the two copies of one object cannot each drop theirs on the strength
//! of the other.

use serde::Serialize;

use super::Catalogue;
use super::backend::{from_db, in_write_tx, on_pool, to_db};
use super::error::{DbContext, Result};
use super::object::{CopyRow, copy_columns, validate_key};
use super::{ContainerState, CopyLocation};

/// A place on a cartridge in tape order: the block of a container's header, a byte offset in
/// its data stream, and the object's catalogue id, which orders the empty objects that share
/// an offset with each other and with the object after them. A repack walks a cartridge from
/// one to the next.
#[derive(
    Clone, Copy, Debug, Default, PartialEq, Eq, PartialOrd, Ord, Serialize, serde::Deserialize,
)]
pub struct TapePosition {
    /// Block number of the container's header record.
    pub block: u64,
    /// Byte offset of the object in the container's data stream.
    pub offset: u64,
    /// The object's catalogue id (0 in a cursor saved before it was kept: that walk may
    /// read an empty object again, never skip one).
    #[serde(default)]
    pub object: i64,
}

/// A live copy and its place in tape order ([`Catalogue::live_copies_on`]).
#[derive(Clone, Debug)]
pub struct PlacedCopy {
    /// Where it is.
    pub position: TapePosition,
    /// The copy.
    pub copy: CopyLocation,
}

/// A copy row with its object's id.
#[derive(sqlx::FromRow)]
struct PlacedRow {
    #[sqlx(flatten)]
    copy: CopyRow,
    object_id: i64,
}

/// How much live data a cartridge holds.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize)]
pub struct LiveOn {
    /// Live copies (objects) on it.
    pub objects: u64,
    /// Their bytes.
    pub bytes: u64,
}

/// What [`Catalogue::drop_copy_on`] did.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum DropOutcome {
    /// The copy on the cartridge is gone from the catalogue.
    Dropped,
    /// The cartridge held no copy of it (dropped by an earlier attempt).
    NotThere,
    /// Kept: the object has no other copy that counts.
    NoOtherCopy,
}

impl Catalogue {
    /// Up to `limit` live copies on `barcode` strictly after `after` (from the start when
    /// `None`), in tape order.
    pub async fn live_copies_on(
        &self,
        barcode: &str,
        after: Option<TapePosition>,
        limit: u32,
    ) -> Result<Vec<PlacedCopy>> {
        const OP: &str = "live_copies_on";
        let (block, offset, object) = match after {
            Some(p) => (
                to_db("block", p.block)?,
                to_db("offset", p.offset)?,
                p.object,
            ),
            None => (-1, -1, -1),
        };
        let rows: Vec<PlacedRow> = on_pool!(&self.backend, |pool| {
            sqlx::query_as(concat!(
                "SELECT ",
                copy_columns!(),
                ", c.object_id FROM containers k \
                 JOIN copies c ON c.container_id = k.id \
                 JOIN objects o ON o.id = c.object_id \
                 JOIN cartridges t ON t.barcode = k.barcode \
                 WHERE k.barcode = $1 AND k.state IN ('durable', 'verified') \
                   AND o.deletion_id IS NULL \
                   AND (k.first_block > $2 OR (k.first_block = $2 AND (c.byte_offset > $3 \
                        OR (c.byte_offset = $3 AND c.object_id > $5)))) \
                 ORDER BY k.first_block, c.byte_offset, c.object_id LIMIT $4",
            ))
            .bind(barcode)
            .bind(block)
            .bind(offset)
            .bind(i64::from(limit))
            .bind(object)
            .fetch_all(pool)
            .await
            .ctx(OP)?
        });
        rows.into_iter()
            .map(|r| {
                let copy = CopyLocation::try_from(r.copy)?;
                Ok(PlacedCopy {
                    position: TapePosition {
                        block: copy.container_first_block,
                        offset: copy.offset,
                        object: r.object_id,
                    },
                    copy,
                })
            })
            .collect()
    }

    /// The live copies on `barcode` and their bytes.
    pub async fn live_on(&self, barcode: &str) -> Result<LiveOn> {
        const OP: &str = "live_on";
        let (objects, bytes): (i64, i64) = on_pool!(&self.backend, |pool| {
            sqlx::query_as(
                "SELECT CAST(COUNT(*) AS BIGINT), CAST(COALESCE(SUM(c.byte_length), 0) AS BIGINT) \
                 FROM containers k \
                 JOIN copies c ON c.container_id = k.id \
                 JOIN objects o ON o.id = c.object_id \
                 WHERE k.barcode = $1 AND k.state IN ('durable', 'verified') \
                   AND o.deletion_id IS NULL",
            )
            .bind(barcode)
            .fetch_one(pool)
            .await
            .ctx(OP)?
        });
        Ok(LiveOn {
            objects: from_db("live objects", objects)?,
            bytes: from_db("live bytes", bytes)?,
        })
    }

    /// Of these (key, generation), those that have a copy that counts in `pool`: in a
    /// durable or verified container on a cartridge of the pool other than `except`. What a
    /// repack that only adds copies skips.
    pub async fn has_copy_in_pool(
        &self,
        pool: &str,
        except: &str,
        key: &str,
        generation: u64,
    ) -> Result<bool> {
        const OP: &str = "has_copy_in_pool";
        let generation = to_db("generation", generation)?;
        let n: i64 = on_pool!(&self.backend, |p| {
            sqlx::query_scalar(
                "SELECT CAST(COUNT(*) AS BIGINT) FROM objects o \
                 JOIN copies c ON c.object_id = o.id \
                 JOIN containers k ON k.id = c.container_id \
                 JOIN cartridges t ON t.barcode = k.barcode \
                 WHERE o.key = $1 AND o.generation = $2 AND t.pool = $3 AND t.barcode <> $4 \
                   AND k.state IN ('durable', 'verified')",
            )
            .bind(key)
            .bind(generation)
            .bind(pool)
            .bind(except)
            .fetch_one(p)
            .await
            .ctx(OP)?
        });
        Ok(n > 0)
    }

    /// The highest container id so far (0 when there is none): containers made later have
    /// higher ids. A repack notes it before it reads an object, and retires the object's old
    /// copy only for a copy in a container made after it ([`Catalogue::drop_copy_on`]).
    pub async fn last_container_id(&self) -> Result<i64> {
        const OP: &str = "last_container_id";
        let id: Option<i64> = on_pool!(&self.backend, |pool| {
            sqlx::query_scalar("SELECT MAX(id) FROM containers")
                .fetch_one(pool)
                .await
                .ctx(OP)?
        });
        Ok(id.unwrap_or(0))
    }

    /// Retire the copy of (`key`, `generation`) on `barcode`, only if the object keeps a copy
    /// in a durable or verified container (`verified_only`: a verified one) on another
    /// cartridge that is not broken, exported or being repacked itself, in a container made
    /// after `newer_than` (a container id, [`Catalogue::last_container_id`]): the copy a
    /// repack wrote, never one the object had before, so a move never leaves an object with
    /// fewer copies than it had. One transaction; see the module's note on concurrent
    /// repacks.
    pub async fn drop_copy_on(
        &self,
        key: &str,
        generation: u64,
        barcode: &str,
        verified_only: bool,
        newer_than: i64,
    ) -> Result<DropOutcome> {
        let drop = CopyDrop {
            key: key.to_string(),
            generation,
            barcode: barcode.to_string(),
            newer_than,
        };
        let mut out = self
            .drop_copies_on(std::slice::from_ref(&drop), verified_only)
            .await?;
        Ok(out.pop().unwrap_or(DropOutcome::NotThere))
    }

    /// [`Catalogue::drop_copy_on`] for many copies, in one transaction: a repack retires
    /// what a write batch made durable together, not one round trip per object. The
    /// outcomes are in the order of `drops`.
    pub async fn drop_copies_on(
        &self,
        drops: &[CopyDrop],
        verified_only: bool,
    ) -> Result<Vec<DropOutcome>> {
        const OP: &str = "drop_copy_on";
        let mut rows = Vec::with_capacity(drops.len());
        for (i, d) in drops.iter().enumerate() {
            validate_key(&d.key)?;
            rows.push((i, d, to_db("generation", d.generation)?));
        }
        // Objects are locked in one order (key, generation), whoever retires them, so two
        // transactions never wait on each other's locks.
        rows.sort_by(|a, b| (&a.1.key, a.2).cmp(&(&b.1.key, b.2)));
        if rows.is_empty() {
            return Ok(Vec::new());
        }
        let states: &[&str] = if verified_only {
            &[ContainerState::Verified.as_str()]
        } else {
            &[
                ContainerState::Durable.as_str(),
                ContainerState::Verified.as_str(),
            ]
        };
        let (first, second) = (states[0], *states.last().unwrap_or(&states[0]));
        // Static per backend: no statement text is built or copied per object.
        let select: &'static str = match self.backend {
            super::backend::Backend::Postgres(_) => {
                "SELECT id FROM objects WHERE key = $1 AND generation = $2 FOR UPDATE"
            }
            super::backend::Backend::Sqlite(_) => {
                "SELECT id FROM objects WHERE key = $1 AND generation = $2"
            }
        };
        let outcomes = in_write_tx!(&self.backend, OP, |tx| {
            let mut outcomes = vec![DropOutcome::NotThere; rows.len()];
            for (i, d, generation) in &rows {
                let id: Option<i64> = sqlx::query_scalar(select)
                    .bind(&d.key)
                    .bind(*generation)
                    .fetch_optional(&mut *tx)
                    .await
                    .ctx(OP)?;
                let outcome = match id {
                    None => DropOutcome::NotThere,
                    Some(id) => {
                        let others: i64 = sqlx::query_scalar(
                            "SELECT CAST(COUNT(*) AS BIGINT) FROM copies c \
                             JOIN containers k ON k.id = c.container_id \
                             JOIN cartridges t ON t.barcode = k.barcode \
                             WHERE c.object_id = $1 AND k.barcode <> $2 \
                               AND k.state IN ($3, $4) AND k.id > $5 \
                               AND t.state NOT IN ('broken', 'exported', 'repacking')",
                        )
                        .bind(id)
                        .bind(&d.barcode)
                        .bind(first)
                        .bind(second)
                        .bind(d.newer_than)
                        .fetch_one(&mut *tx)
                        .await
                        .ctx(OP)?;
                        if others == 0 {
                            DropOutcome::NoOtherCopy
                        } else {
                            let n = sqlx::query(
                                "DELETE FROM copies WHERE object_id = $1 AND container_id IN \
                                 (SELECT id FROM containers WHERE barcode = $2)",
                            )
                            .bind(id)
                            .bind(&d.barcode)
                            .execute(&mut *tx)
                            .await
                            .ctx(OP)?
                            .rows_affected();
                            if n == 0 {
                                DropOutcome::NotThere
                            } else {
                                DropOutcome::Dropped
                            }
                        }
                    }
                };
                outcomes[*i] = outcome;
            }
            outcomes
        });
        Ok(outcomes)
    }
}

/// One copy a repack retires ([`Catalogue::drop_copies_on`]).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct CopyDrop {
    /// The object's key.
    pub key: String,
    /// Its generation.
    pub generation: u64,
    /// The cartridge whose copy goes.
    pub barcode: String,
    /// The newest container before the repack wrote the new copy
    /// ([`Catalogue::last_container_id`]): only a copy in a later one counts.
    pub newer_than: i64,
}

#[cfg(test)]
mod tests {
    use super::super::test_support::{
        TestResult, cat, container_with, copy, labelled, on_both_backends,
    };
    use super::*;
    use crate::catalogue::CartridgeState;
    use crate::catalogue::testing::TestCatalogue;

    on_both_backends!(live_copies_walk_in_tape_order_and_a_drop_needs_another_copy);

    async fn live_copies_walk_in_tape_order_and_a_drop_needs_another_copy(
        db: &TestCatalogue,
    ) -> TestResult {
        let c = cat(db);
        labelled(c, "A1", "p").await?;
        labelled(c, "B1", "q").await?;
        let durable = ContainerState::Durable;
        // Two containers on A1: a/1 and a/2 in the first, a/3 in the second; a/2 also on B1.
        container_with(
            c,
            "A1",
            &[copy("a/1", 1, 0, 10, 1), copy("a/2", 1, 10, 20, 2)],
            durable,
        )
        .await?;
        container_with(c, "A1", &[copy("a/3", 1, 0, 30, 3)], durable).await?;
        container_with(c, "B1", &[copy("a/2", 1, 0, 20, 2)], durable).await?;
        let all = c.live_copies_on("A1", None, 10).await?;
        let keys: Vec<&str> = all.iter().map(|c| c.copy.key.as_str()).collect();
        assert_eq!(keys, ["a/1", "a/2", "a/3"]);
        let after = c.live_copies_on("A1", Some(all[0].position), 1).await?;
        assert_eq!(after.len(), 1);
        assert_eq!(after[0].copy.key, "a/2");
        let last = c.live_copies_on("A1", Some(all[2].position), 10).await?;
        assert!(last.is_empty());
        // Empty objects share their offset with each other and with the next object: a walk
        // one copy at a time meets each of them once (the torture run found one skipped).
        labelled(c, "A2", "z").await?;
        container_with(
            c,
            "A2",
            &[
                copy("e/1", 1, 0, 0, 4),
                copy("e/2", 1, 0, 0, 5),
                copy("e/3", 1, 0, 7, 6),
            ],
            durable,
        )
        .await?;
        let (mut seen, mut at) = (Vec::new(), None);
        while let Some(p) = c.live_copies_on("A2", at, 1).await?.pop() {
            seen.push(p.copy.key.clone());
            at = Some(p.position);
        }
        assert_eq!(seen, ["e/1", "e/2", "e/3"]);
        assert_eq!(
            c.live_on("A1").await?,
            LiveOn {
                objects: 3,
                bytes: 60
            }
        );
        // a/1 has no other copy: kept. a/2 has one on B1: dropped, once.
        assert_eq!(
            c.drop_copy_on("a/1", 1, "A1", false, 0).await?,
            DropOutcome::NoOtherCopy
        );
        assert_eq!(
            c.drop_copy_on("a/2", 1, "A1", false, 0).await?,
            DropOutcome::Dropped
        );
        assert_eq!(
            c.drop_copy_on("a/2", 1, "A1", false, 0).await?,
            DropOutcome::NotThere
        );
        // B1's copy is durable, not verified: a verified-only drop keeps a/2's last copy.
        assert_eq!(
            c.drop_copy_on("a/2", 1, "B1", true, 0).await?,
            DropOutcome::NoOtherCopy
        );
        assert_eq!(
            c.live_on("A1").await?,
            LiveOn {
                objects: 2,
                bytes: 40
            }
        );
        // A copy the object had before the mark is not the repack's: a move that wrote no
        // new copy (its pool already held one) keeps the old.
        let mark = c.last_container_id().await?;
        container_with(c, "A1", &[copy("a/5", 1, 0, 5, 5)], durable).await?;
        container_with(c, "B1", &[copy("a/5", 1, 0, 5, 5)], durable).await?;
        let after = c.last_container_id().await?;
        assert_eq!(
            c.drop_copy_on("a/5", 1, "A1", false, after).await?,
            DropOutcome::NoOtherCopy
        );
        assert_eq!(
            c.drop_copy_on("a/5", 1, "A1", false, mark).await?,
            DropOutcome::Dropped
        );
        assert!(c.has_copy_in_pool("q", "A1", "a/2", 1).await?);
        assert!(!c.has_copy_in_pool("q", "B1", "a/2", 1).await?);
        // A cartridge being repacked itself is not the other copy.
        container_with(c, "A1", &[copy("a/4", 1, 0, 5, 4)], durable).await?;
        container_with(c, "B1", &[copy("a/4", 1, 0, 5, 4)], durable).await?;
        c.set_cartridge_state("B1", CartridgeState::Repacking)
            .await?;
        assert_eq!(
            c.drop_copy_on("a/4", 1, "A1", false, 0).await?,
            DropOutcome::NoOtherCopy
        );
        // Many at once, in one transaction: each answered as alone, in the order asked
        // (objects are locked in key order, not in this one).
        c.set_cartridge_state("B1", CartridgeState::Active).await?;
        container_with(c, "A1", &[copy("b/1", 1, 0, 5, 7)], durable).await?;
        container_with(c, "B1", &[copy("b/1", 1, 0, 5, 7)], durable).await?;
        let drop = |key: &str| CopyDrop {
            key: key.into(),
            generation: 1,
            barcode: "A1".into(),
            newer_than: 0,
        };
        assert_eq!(
            c.drop_copies_on(&[drop("b/1"), drop("a/1"), drop("a/2"), drop("a/4")], false)
                .await?,
            [
                DropOutcome::Dropped,
                DropOutcome::NoOtherCopy,
                DropOutcome::NotThere,
                DropOutcome::Dropped,
            ]
        );
        assert!(c.drop_copies_on(&[], false).await?.is_empty());
        Ok(())
    }
}
