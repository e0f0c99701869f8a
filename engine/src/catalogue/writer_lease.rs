//! Fencing a writer in the catalogue itself: a container closes, and becomes durable or
//! verified, only in a transaction that finds its writer's lease current.
//!
//! A worker writes to tape under a lease (a row of `reel_leases`: resource, holder, epoch,
//! expiry), which the jobs layer takes and renews. Checking the lease before a write is not
//! enough: a worker frozen (SIGSTOP, a VM pause, a long GC-like stall) between its check and
//! its catalogue update would wake up past its lease, after another worker took its requests
//! over, and make a second set of copies live. So the catalogue re-reads the lease **inside**
//! the transaction that closes a container or makes it durable or verified, and refuses with
//! [`CatalogueError::Fenced`] unless the row still names this holder at this epoch and has not
//! expired. On PostgreSQL the row is read `FOR SHARE`, so nobody can take the lease over between
//! the check and the commit.
//!
//! Only what makes copies count is fenced. A container's death and the cartridge's end of data
//! are facts about the tape, recorded whoever records them (a fenced writer must still be able
//! to mark its own unfinished containers dead and move end of data past what it wrote).
//!
//! The table is the jobs layer's lease table; the catalogue's migration 0004 creates it too (the
//! same definition, `IF NOT EXISTS`), so a catalogue used without the jobs layer has it and
//! either migration may run first. A catalogue handle without a writer lease
//! ([`Catalogue::fenced_by`] never called: the demo, single-process tools) checks nothing.

use std::time::{SystemTime, UNIX_EPOCH};

use super::Catalogue;
use super::error::CatalogueError;

/// The lease a writer holds, as the catalogue checks it: the row `resource` of `reel_leases`
/// must name `holder` at `epoch`, unexpired.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct WriterLease {
    /// The leased resource (`drive:NAME`).
    pub resource: String,
    /// Who holds it (the worker's name).
    pub holder: String,
    /// The epoch the holder got when it took the lease.
    pub epoch: i64,
}

/// The lease row as read inside a fenced transaction.
pub(crate) type LeaseRow = (Option<String>, i64, i64);

impl WriterLease {
    /// Ok if `row` (holder, epoch, expiry in unix ms) is still this lease, unexpired at `now_ms`.
    pub(crate) fn holds(&self, row: Option<LeaseRow>, now_ms: i64) -> Result<(), CatalogueError> {
        let fenced = |reason: String| CatalogueError::Fenced {
            resource: self.resource.clone(),
            epoch: self.epoch,
            reason,
        };
        match row {
            None => Err(fenced("the lease does not exist".into())),
            Some((holder, epoch, _)) if epoch != self.epoch => Err(fenced(format!(
                "it was taken again (epoch {epoch}, holder {})",
                holder.as_deref().unwrap_or("nobody")
            ))),
            Some((holder, _, _)) if holder.as_deref() != Some(self.holder.as_str()) => {
                Err(fenced(format!(
                    "it is held by {}",
                    holder.as_deref().unwrap_or("nobody (released)")
                )))
            }
            Some((_, _, expires)) if expires < now_ms => Err(fenced(format!(
                "it expired {} ms ago",
                now_ms.saturating_sub(expires)
            ))),
            Some(_) => Ok(()),
        }
    }
}

/// Milliseconds since the Unix epoch (the lease table's clock).
pub(crate) fn now_ms() -> i64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map(|d| i64::try_from(d.as_millis()).unwrap_or(i64::MAX))
        .unwrap_or(0)
}

/// Inside a write transaction `$tx` of catalogue `$cat`: refuse with
/// [`CatalogueError::Fenced`] unless the catalogue's writer lease (if it has one) is current.
macro_rules! check_writer {
    ($cat:expr, $tx:ident, $op:expr, $for_share:expr) => {
        if let Some(w) = $cat.writer.as_deref() {
            let sql = if $for_share {
                "SELECT holder, epoch, expires_ms FROM reel_leases WHERE resource = $1 FOR SHARE"
            } else {
                "SELECT holder, epoch, expires_ms FROM reel_leases WHERE resource = $1"
            };
            let row: Option<$crate::catalogue::writer_lease::LeaseRow> = sqlx::query_as(sql)
                .bind(&w.resource)
                .fetch_optional(&mut *$tx)
                .await
                .ctx($op)?;
            w.holds(row, $crate::catalogue::writer_lease::now_ms())?;
        }
    };
}
pub(crate) use check_writer;

impl Catalogue {
    /// This catalogue, fencing every container close and every durable or verified transition
    /// by `lease` (see the module docs); `None` fences nothing.
    pub fn fenced_by(&self, lease: Option<WriterLease>) -> Catalogue {
        let mut c = self.clone();
        c.writer = lease.map(std::sync::Arc::new);
        c
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::catalogue::ContainerState;
    use crate::catalogue::test_support::{
        TestResult, cat, container_with, copy, labelled, on_both_backends,
    };
    use crate::catalogue::testing::TestCatalogue;

    on_both_backends!(
        a_lapsed_writer_makes_nothing_live,
        copies_in_pool_counts_what_counts
    );

    /// Put the lease row as a jobs layer would: `holder` at `epoch`, expiring at `expires_ms`.
    async fn set_lease(
        c: &Catalogue,
        holder: Option<&str>,
        epoch: i64,
        expires_ms: i64,
    ) -> TestResult {
        let sql = "INSERT INTO reel_leases (resource, holder, epoch, expires_ms, heartbeat_ms) \
                   VALUES ('drive:lib-0', $1, $2, $3, 0) ON CONFLICT (resource) DO UPDATE \
                   SET holder = excluded.holder, epoch = excluded.epoch, expires_ms = excluded.expires_ms";
        match (c.pool_sqlite(), c.pool_postgres()) {
            (Some(p), _) => {
                sqlx::query(sql)
                    .bind(holder)
                    .bind(epoch)
                    .bind(expires_ms)
                    .execute(p)
                    .await?;
            }
            (_, Some(p)) => {
                sqlx::query(sql)
                    .bind(holder)
                    .bind(epoch)
                    .bind(expires_ms)
                    .execute(p)
                    .await?;
            }
            _ => unreachable!(),
        }
        Ok(())
    }

    async fn a_lapsed_writer_makes_nothing_live(db: &TestCatalogue) -> TestResult {
        let plain = cat(db);
        labelled(plain, "T1", "p").await?;
        let c = plain.fenced_by(Some(lease()));
        // Current: a container closes and becomes durable and verified.
        set_lease(plain, Some("host-a"), 7, now_ms() + 60_000).await?;
        container_with(&c, "T1", &[copy("a", 1, 0, 4, 1)], ContainerState::Verified).await?;
        // Expired, nobody took it: the close and the transitions are refused, a death is not.
        let closed =
            container_with(&c, "T1", &[copy("b", 1, 0, 4, 2)], ContainerState::Pending).await?;
        set_lease(plain, Some("host-a"), 7, now_ms() - 1).await?;
        for state in [ContainerState::Durable, ContainerState::Verified] {
            let e = c.set_container_state(&[closed], state).await.unwrap_err();
            assert!(
                matches!(e, CatalogueError::Fenced { ref resource, epoch: 7, .. } if resource == "drive:lib-0"),
                "{e}"
            );
            assert!(e.to_string().contains("expired"), "{e}");
        }
        let e = container_with(&c, "T1", &[copy("c", 1, 0, 4, 3)], ContainerState::Pending)
            .await
            .unwrap_err();
        assert!(e.to_string().contains("no longer held"), "{e}");
        c.set_container_state(&[closed], ContainerState::Dead)
            .await?;
        // Taken again by another host: refused; the unfenced handle is not fenced.
        set_lease(plain, Some("host-b"), 8, now_ms() + 60_000).await?;
        let e = container_with(&c, "T1", &[copy("d", 1, 0, 4, 4)], ContainerState::Pending)
            .await
            .unwrap_err();
        assert!(
            e.to_string()
                .contains("taken again (epoch 8, holder host-b)"),
            "{e}"
        );
        container_with(
            plain,
            "T1",
            &[copy("d", 1, 0, 4, 4)],
            ContainerState::Verified,
        )
        .await?;
        assert!(
            plain.copies("b", 1).await?.is_empty(),
            "b never became live"
        );
        Ok(())
    }

    async fn copies_in_pool_counts_what_counts(db: &TestCatalogue) -> TestResult {
        let c = cat(db);
        labelled(c, "T1", "p").await?;
        labelled(c, "T2", "q").await?;
        container_with(c, "T1", &[copy("v", 1, 0, 4, 1)], ContainerState::Verified).await?;
        container_with(c, "T1", &[copy("d", 1, 0, 4, 2)], ContainerState::Durable).await?;
        container_with(c, "T1", &[copy("x", 1, 0, 4, 3)], ContainerState::Dead).await?;
        container_with(c, "T2", &[copy("q", 1, 0, 4, 4)], ContainerState::Verified).await?;
        let wanted: Vec<(String, u64)> = ["v", "d", "x", "q", "none"]
            .iter()
            .map(|k| (k.to_string(), 1))
            .chain([("v".to_string(), 2)])
            .collect();
        let keys = |m: std::collections::HashMap<(String, u64), crate::catalogue::CopiedObject>| {
            m.into_keys().collect::<std::collections::BTreeSet<_>>()
        };
        let got = c.copies_in_pool("p", &wanted, true).await?;
        assert_eq!(got[&("v".to_string(), 1)].size, 4);
        assert_eq!(keys(got), [("v".to_string(), 1)].into_iter().collect());
        let got = c.copies_in_pool("p", &wanted, false).await?;
        assert_eq!(
            keys(got),
            [("v".to_string(), 1), ("d".to_string(), 1)]
                .into_iter()
                .collect()
        );
        // A copy on a cartridge taken out of service does not count.
        c.set_cartridge_state("T1", crate::catalogue::CartridgeState::Disabled)
            .await?;
        assert!(c.copies_in_pool("p", &wanted, false).await?.is_empty());
        Ok(())
    }

    fn lease() -> WriterLease {
        WriterLease {
            resource: "drive:lib-0".into(),
            holder: "host-a".into(),
            epoch: 7,
        }
    }

    #[test]
    fn only_the_same_holder_at_the_same_epoch_unexpired_holds() {
        let l = lease();
        let ok = |row| l.holds(Some(row), 1_000);
        ok((Some("host-a".into()), 7, 1_000)).unwrap();
        for (row, says) in [
            ((Some("host-a".into()), 8, 5_000), "taken again (epoch 8"),
            ((Some("host-b".into()), 7, 5_000), "held by host-b"),
            ((None, 7, 5_000), "nobody (released)"),
            ((Some("host-a".into()), 7, 999), "expired 1 ms ago"),
        ] {
            let e = ok(row).unwrap_err().to_string();
            assert!(e.contains(says) && e.contains("drive:lib-0"), "{e}");
        }
        let e = l.holds(None, 0).unwrap_err().to_string();
        assert!(e.contains("does not exist"), "{e}");
    }
}
