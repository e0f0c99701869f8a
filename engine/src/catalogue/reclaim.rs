//! What keeps a cartridge from being reclaimed, and the catalogue's half of reclaiming it.
//!
//! Reclaim gives a cartridge back to its pool as an empty one: its containers are marked dead
//! here, then the session writes a new label at the beginning of the tape with the next label
//! epoch ([`crate::session::intake::relabel_for_reclaim`]), so nothing the catalogue knew of
//! the old tape can match the new one. It is refused while the cartridge holds anything that
//! must survive:
//!
//! - a **live** copy (an object not deleted, in a durable or verified container): repack first;
//! - a copy of a deleted object still in its **quarantine** (`reel undelete` needs it);
//! - a copy of an object under an active **legal hold**, deleted or not;
//! - a copy of an object generation whose **retention** has not ended;
//! - a **pending** container (a write not yet settled by recovery);
//! - **WORM** media (it cannot be rewritten: it leaves the library once its retention ends);
//! - a state other than `full` or `disabled` (an `active` cartridge still takes writes, a
//!   `repacking` one is being emptied, a `broken` one is not reused, an `exported` one is out).
//!
//! [`Catalogue::retire_for_reclaim`] checks all of it again inside the transaction that marks
//! the containers dead, so a delete undone or a hold placed since the check is never lost.

use serde::Serialize;

use super::Catalogue;
use super::backend::{from_db, in_write_tx, now_unix};
use super::cartridge::CartridgeState;
use super::error::{CatalogueError, DbContext, Result};
use super::retention::retained_now;

/// What a cartridge holds that reclaim must keep, and whether it may be reclaimed.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize)]
pub struct ReclaimCheck {
    /// The cartridge.
    pub barcode: String,
    /// Its state.
    pub state: String,
    /// Whether it is WORM media.
    pub worm: bool,
    /// Live copies on it.
    pub live: u64,
    /// Copies of deleted objects still in their quarantine.
    pub quarantined: u64,
    /// Copies of objects an active legal hold covers.
    pub held: u64,
    /// Copies of generations still under retention.
    pub retained: u64,
    /// Containers not yet settled (a write in progress or awaiting recovery).
    pub pending: u64,
    /// Bytes of dead space reclaim gives back (the cartridge's used bytes).
    pub used_bytes: u64,
}

impl ReclaimCheck {
    /// Why the cartridge may not be reclaimed now, if it may not; the wording says what to do.
    pub fn refusal(&self) -> Option<String> {
        let b = &self.barcode;
        if self.worm {
            return Some(format!(
                "cartridge {b} is WORM media: it cannot be rewritten; export it once nothing on it is retained"
            ));
        }
        if self.state != CartridgeState::Full.as_str()
            && self.state != CartridgeState::Disabled.as_str()
        {
            return Some(format!(
                "cartridge {b} is {}; only a full or disabled cartridge is reclaimed: repack it first, or mark it full (`reel cartridge state {b} full --reason …`) if it holds nothing live",
                self.state
            ));
        }
        if self.live > 0 {
            return Some(format!(
                "cartridge {b} holds {} live objects; repack it first (`reel repack --barcode {b}`)",
                self.live
            ));
        }
        if self.held > 0 {
            return Some(format!(
                "cartridge {b} holds {} copies under a legal hold; release the hold first",
                self.held
            ));
        }
        if self.retained > 0 {
            return Some(format!(
                "cartridge {b} holds {} copies still under retention; reclaim it when the retention ends",
                self.retained
            ));
        }
        if self.quarantined > 0 {
            return Some(format!(
                "cartridge {b} holds {} deleted objects still in quarantine (`reel undelete` may want them); reclaim it when the quarantine ends",
                self.quarantined
            ));
        }
        if self.pending > 0 {
            return Some(format!(
                "cartridge {b} has {} containers not yet settled; let recovery run first",
                self.pending
            ));
        }
        None
    }
}

/// The check's counts, in one statement over the cartridge's containers that are not dead
/// (`$1` the barcode, `$2` now).
const COUNTS: &str = concat!(
    "SELECT \
       CAST(COALESCE(SUM(CASE WHEN o.deletion_id IS NULL AND k.state IN ('durable', 'verified') \
                              THEN 1 ELSE 0 END), 0) AS BIGINT) AS live, \
       CAST(COALESCE(SUM(CASE WHEN d.purge_after_unix > $2 THEN 1 ELSE 0 END), 0) AS BIGINT) AS quarantined, \
       CAST(COALESCE(SUM(CASE WHEN EXISTS (SELECT 1 FROM legal_holds h WHERE h.released_unix IS NULL \
                                AND (h.key = o.key OR (h.prefix IS NOT NULL \
                                     AND substr(o.key, 1, length(h.prefix)) = h.prefix))) \
                              THEN 1 ELSE 0 END), 0) AS BIGINT) AS held, \
       CAST(COALESCE(SUM(CASE WHEN EXISTS (SELECT 1 FROM object_retention r \
                                WHERE r.key = o.key AND r.generation = o.generation AND ",
    retained_now!("$2"),
    ") THEN 1 ELSE 0 END), 0) AS BIGINT) AS retained \
     FROM containers k \
     JOIN copies c ON c.container_id = k.id \
     JOIN objects o ON o.id = c.object_id \
     LEFT JOIN deletions d ON d.id = o.deletion_id \
     WHERE k.barcode = $1 AND k.state <> 'dead'"
);

/// The cartridge's own columns the check reads.
const CARTRIDGE: &str = "SELECT state, CAST(CASE WHEN worm THEN 1 ELSE 0 END AS BIGINT), used_bytes \
                         FROM cartridges WHERE barcode = $1";

/// Its pending containers.
const PENDING: &str =
    "SELECT CAST(COUNT(*) AS BIGINT) FROM containers WHERE barcode = $1 AND state = 'pending'";

macro_rules! reclaim_check_in {
    ($conn:expr, $barcode:expr, $now:expr, $op:expr) => {{
        let row: Option<(String, i64, i64)> = sqlx::query_as(CARTRIDGE)
            .bind($barcode)
            .fetch_optional(&mut *$conn)
            .await
            .ctx($op)?;
        let Some((state, worm, used)) = row else {
            return Err(CatalogueError::UnknownCartridge {
                barcode: $barcode.to_string(),
            });
        };
        let (live, quarantined, held, retained): (i64, i64, i64, i64) = sqlx::query_as(COUNTS)
            .bind($barcode)
            .bind($now)
            .fetch_one(&mut *$conn)
            .await
            .ctx($op)?;
        let pending: i64 = sqlx::query_scalar(PENDING)
            .bind($barcode)
            .fetch_one(&mut *$conn)
            .await
            .ctx($op)?;
        ReclaimCheck {
            barcode: $barcode.to_string(),
            state,
            worm: worm != 0,
            live: from_db("live copies", live)?,
            quarantined: from_db("quarantined copies", quarantined)?,
            held: from_db("held copies", held)?,
            retained: from_db("retained copies", retained)?,
            pending: from_db("pending containers", pending)?,
            used_bytes: from_db("used bytes", used)?,
        }
    }};
}

impl Catalogue {
    /// What keeps `barcode` from being reclaimed now ([`ReclaimCheck::refusal`]).
    pub async fn reclaim_check(&self, barcode: &str) -> Result<ReclaimCheck> {
        const OP: &str = "reclaim_check";
        let now = now_unix();
        let check = match &self.backend {
            super::backend::Backend::Sqlite(p) => {
                let mut c = p.acquire().await.ctx(OP)?;
                reclaim_check_in!(c, barcode, now, OP)
            }
            super::backend::Backend::Postgres(p) => {
                let mut c = p.acquire().await.ctx(OP)?;
                reclaim_check_in!(c, barcode, now, OP)
            }
        };
        Ok(check)
    }

    /// Check `barcode` again and, when nothing keeps it, mark every container on it dead, in one
    /// transaction (on PostgreSQL the legal holds and the cartridge are locked first: a hold
    /// placed or an object undeleted meanwhile waits, then finds the containers dead or the
    /// check refused). Returns the check; a refusal changed nothing. The caller relabels the
    /// tape next.
    pub async fn retire_for_reclaim(&self, barcode: &str) -> Result<ReclaimCheck> {
        const OP: &str = "retire_for_reclaim";
        let now = now_unix();
        let is_pg = matches!(self.backend, super::backend::Backend::Postgres(_));
        let check = in_write_tx!(&self.backend, OP, |tx| {
            if is_pg {
                sqlx::query("LOCK TABLE legal_holds IN SHARE MODE")
                    .execute(&mut *tx)
                    .await
                    .ctx(OP)?;
                sqlx::query("SELECT barcode FROM cartridges WHERE barcode = $1 FOR UPDATE")
                    .bind(barcode)
                    .execute(&mut *tx)
                    .await
                    .ctx(OP)?;
            }
            let check = reclaim_check_in!(tx, barcode, now, OP);
            if check.refusal().is_none() {
                sqlx::query(
                    "UPDATE containers SET state = 'dead' WHERE barcode = $1 AND state <> 'dead'",
                )
                .bind(barcode)
                .execute(&mut *tx)
                .await
                .ctx(OP)?;
            }
            check
        });
        Ok(check)
    }
}

#[cfg(test)]
mod tests {
    use super::super::test_support::{
        TestResult, cat, container_with, copy, labelled, on_both_backends,
    };
    use super::*;
    use crate::catalogue::testing::TestCatalogue;
    use crate::catalogue::{ContainerState, DeleteScope, HoldScope};

    on_both_backends!(reclaim_refuses_what_must_survive_and_retires_what_may_go);

    async fn reclaim_refuses_what_must_survive_and_retires_what_may_go(
        db: &TestCatalogue,
    ) -> TestResult {
        let c = cat(db);
        labelled(c, "A1", "p").await?;
        let durable = ContainerState::Durable;
        container_with(
            c,
            "A1",
            &[copy("r/1", 1, 0, 10, 1), copy("r/2", 1, 10, 10, 2)],
            durable,
        )
        .await?;
        // Active: refused whatever it holds.
        let check = c.reclaim_check("A1").await?;
        assert!(
            check.refusal().is_some_and(|r| r.contains("is active")),
            "{check:?}"
        );
        c.set_cartridge_state("A1", CartridgeState::Full).await?;
        let check = c.reclaim_check("A1").await?;
        assert_eq!(check.live, 2);
        assert!(
            check
                .refusal()
                .is_some_and(|r| r.contains("2 live objects"))
        );
        // Deleted, in quarantine: refused for that.
        let keys = vec!["r/1".to_string(), "r/2".to_string()];
        let d = c
            .open_deletion("job-1", "tester", "test", &DeleteScope::Keys(&keys), 3600)
            .await?;
        c.delete_batch(d, &DeleteScope::Keys(&keys), "", 100)
            .await?;
        let check = c.reclaim_check("A1").await?;
        assert_eq!((check.live, check.quarantined), (0, 2), "{check:?}");
        assert!(check.refusal().is_some_and(|r| r.contains("quarantine")));
        // A hold on a deleted key keeps it too.
        c.place_hold(&HoldScope::Key("r/1".into()), "legal", "case 7")
            .await?;
        let check = c.reclaim_check("A1").await?;
        assert_eq!(check.held, 1);
        // The retire step checks again: refused, nothing changed.
        let retired = c.retire_for_reclaim("A1").await?;
        assert!(retired.refusal().is_some());
        assert!(
            c.containers_on("A1")
                .await?
                .iter()
                .all(|k| k.state == durable)
        );
        // Past its quarantine, held by nothing: retired, every container dead.
        labelled(c, "B1", "p").await?;
        container_with(c, "B1", &[copy("s/1", 1, 0, 10, 5)], durable).await?;
        c.set_cartridge_state("B1", CartridgeState::Full).await?;
        let gone = vec!["s/1".to_string()];
        let d = c
            .open_deletion("job-2", "tester", "test", &DeleteScope::Keys(&gone), 0)
            .await?;
        c.delete_batch(d, &DeleteScope::Keys(&gone), "", 100)
            .await?;
        let retired = c.retire_for_reclaim("B1").await?;
        assert_eq!(retired.refusal(), None, "{retired:?}");
        assert!(
            c.containers_on("B1")
                .await?
                .iter()
                .all(|k| k.state == ContainerState::Dead)
        );
        // WORM media is never reclaimed.
        c.ensure_pool("p").await?;
        c.add_cartridge("W1", true, 18_000_000_000_000).await?;
        let worm = c.reclaim_check("W1").await?;
        assert!(worm.refusal().is_some_and(|r| r.contains("WORM")));
        Ok(())
    }
}
