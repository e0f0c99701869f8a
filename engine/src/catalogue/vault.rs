//! Vaulting in the catalogue (`cartridge_vault`): cartridges sent out of the library and where
//! they went.
//!
//! [`Catalogue::send_to_vault`] makes a cartridge `exported` at once (no new work picks it,
//! a batch on it stops at a record boundary) and remembers the state it had, with its reason;
//! the physical move to an import/export element follows when a worker can make it
//! ([`Catalogue::mark_left`]). [`Catalogue::back_from_vault`] restores the state it had when
//! it comes back. A cartridge is `exported` exactly when it has a row here; the state is set
//! by these functions only (an operator's `reel cartridge state` refuses it).

use serde::Serialize;

use super::Catalogue;
use super::backend::{in_write_tx, now_unix, on_pool};
use super::cartridge::CartridgeState;
use super::error::{CatalogueError, DbContext, Result, shorten};

/// Longest vault location kept, in bytes.
pub const MAX_LOCATION: usize = 200;

/// A cartridge out of the library, as the catalogue keeps it.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct VaultEntry {
    /// The cartridge.
    pub barcode: String,
    /// Where it went (`--to`): a vault, a shelf, a courier.
    pub location: String,
    /// The state it had and gets back when it returns.
    pub state_before: CartridgeState,
    /// That state's reason.
    pub reason_before: String,
    /// Who sent it.
    pub exported_by: String,
    /// When (unix seconds).
    pub exported_unix: i64,
    /// When it left the storage slots (unix seconds; 0: still inside, waiting for a free
    /// import/export element or for the drive holding it).
    pub left_unix: i64,
}

#[derive(sqlx::FromRow)]
struct VaultRow {
    barcode: String,
    location: String,
    state_before: String,
    reason_before: String,
    exported_by: String,
    exported_unix: i64,
    left_unix: i64,
}

impl TryFrom<VaultRow> for VaultEntry {
    type Error = CatalogueError;

    fn try_from(r: VaultRow) -> Result<VaultEntry> {
        Ok(VaultEntry {
            state_before: r
                .state_before
                .parse()
                .map_err(|_| CatalogueError::Corrupt {
                    what: format!(
                        "vaulted cartridge {} had state {:?}",
                        r.barcode, r.state_before
                    ),
                })?,
            barcode: r.barcode,
            location: r.location,
            reason_before: r.reason_before,
            exported_by: r.exported_by,
            exported_unix: r.exported_unix,
            left_unix: r.left_unix,
        })
    }
}

/// The columns of [`VaultRow`], in order.
macro_rules! vault_columns {
    () => {
        "barcode, location, state_before, reason_before, exported_by, exported_unix, left_unix"
    };
}

fn refused(barcode: &str, reason: impl Into<String>) -> CatalogueError {
    CatalogueError::CartridgeRefused {
        barcode: shorten(barcode),
        reason: reason.into(),
    }
}

/// Check a vault location: 1 to [`MAX_LOCATION`] bytes, no control characters.
pub fn check_location(location: &str) -> std::result::Result<(), String> {
    let l = location.trim();
    if l.is_empty() {
        return Err(
            "the location is empty: say where the cartridges go (`--to \"vault B\"`)".into(),
        );
    }
    if l.len() > MAX_LOCATION {
        return Err(format!(
            "the location is {} bytes; at most {MAX_LOCATION}",
            l.len()
        ));
    }
    if l.chars().any(char::is_control) {
        return Err("the location holds control characters".into());
    }
    Ok(())
}

impl Catalogue {
    /// Send `barcode` to `location`: it becomes `exported` (reason `at LOCATION`, by `by`),
    /// and the state it had is kept to be restored. Refused for an unknown cartridge, one
    /// already exported, and one being repacked (its repack owns it).
    pub async fn send_to_vault(
        &self,
        barcode: &str,
        location: &str,
        by: &str,
    ) -> Result<VaultEntry> {
        const OP: &str = "send_to_vault";
        let location = location.trim();
        check_location(location).map_err(|e| refused(barcode, e))?;
        let now = now_unix();
        in_write_tx!(&self.backend, OP, |tx| {
            let row: Option<(String, String, String, i64)> = sqlx::query_as(
                "SELECT state, state_reason, state_by, state_unix FROM cartridges WHERE barcode = $1",
            )
            .bind(barcode)
            .fetch_optional(&mut *tx)
            .await
            .ctx(OP)?;
            let Some((state, reason, by_before, unix_before)) = row else {
                return Err(CatalogueError::UnknownCartridge {
                    barcode: shorten(barcode),
                });
            };
            if state == CartridgeState::Exported.as_str() {
                let at: Option<String> =
                    sqlx::query_scalar("SELECT location FROM cartridge_vault WHERE barcode = $1")
                        .bind(barcode)
                        .fetch_optional(&mut *tx)
                        .await
                        .ctx(OP)?;
                return Err(refused(
                    barcode,
                    format!(
                        "it is already exported (to {}); import it first to send it elsewhere",
                        at.unwrap_or_else(|| "an unrecorded location".into())
                    ),
                ));
            }
            if state == CartridgeState::Repacking.as_str() {
                return Err(refused(
                    barcode,
                    "it is being repacked; let the repack finish (or cancel it) first",
                ));
            }
            sqlx::query(
                "INSERT INTO cartridge_vault (barcode, location, state_before, reason_before, \
                 by_before, unix_before, exported_by, exported_unix, left_unix) \
                 VALUES ($1, $2, $3, $4, $5, $6, $7, $8, 0)",
            )
            .bind(barcode)
            .bind(location)
            .bind(&state)
            .bind(&reason)
            .bind(&by_before)
            .bind(unix_before)
            .bind(by)
            .bind(now)
            .execute(&mut *tx)
            .await
            .ctx(OP)?;
            sqlx::query(
                "UPDATE cartridges SET state = 'exported', state_reason = $2, state_by = $3, \
                 state_unix = $4, updated_unix = $4 WHERE barcode = $1",
            )
            .bind(barcode)
            .bind(format!("at {location}"))
            .bind(by)
            .bind(now)
            .execute(&mut *tx)
            .await
            .ctx(OP)?;
        });
        self.vault_entry(barcode)
            .await?
            .ok_or_else(|| CatalogueError::Corrupt {
                what: format!("cartridge {barcode} was exported but has no vault entry"),
            })
    }

    /// Record that `barcode` has left the storage slots (now, unless already recorded).
    /// Returns whether this call recorded it.
    pub async fn mark_left(&self, barcode: &str) -> Result<bool> {
        const OP: &str = "mark_left";
        let now = now_unix();
        let n = on_pool!(&self.backend, |pool| {
            sqlx::query(
                "UPDATE cartridge_vault SET left_unix = $2 WHERE barcode = $1 AND left_unix = 0",
            )
            .bind(barcode)
            .bind(now)
            .execute(pool)
            .await
            .ctx(OP)?
            .rows_affected()
        });
        Ok(n > 0)
    }

    /// `barcode` is back (or its export was called off before it left): it gets the state
    /// and reason it had before, recorded as changed by `by`. Returns that state, or `None`
    /// when it was not exported (nothing changes).
    pub async fn back_from_vault(&self, barcode: &str, by: &str) -> Result<Option<CartridgeState>> {
        const OP: &str = "back_from_vault";
        let now = now_unix();
        let restored = in_write_tx!(&self.backend, OP, |tx| {
            let row: Option<(String, String)> = sqlx::query_as(
                "SELECT state_before, reason_before FROM cartridge_vault WHERE barcode = $1",
            )
            .bind(barcode)
            .fetch_optional(&mut *tx)
            .await
            .ctx(OP)?;
            match row {
                None => None,
                Some((state, reason)) => {
                    sqlx::query("DELETE FROM cartridge_vault WHERE barcode = $1")
                        .bind(barcode)
                        .execute(&mut *tx)
                        .await
                        .ctx(OP)?;
                    // A labelled one's label is unchecked until read (no write before).
                    sqlx::query(
                        "UPDATE cartridges SET state = $2, state_reason = $3, state_by = $4, \
                         state_unix = $5, updated_unix = $5, label_unchecked_unix = \
                         CASE WHEN cartridge_uuid IS NULL THEN 0 ELSE $5 END WHERE barcode = $1",
                    )
                    .bind(barcode)
                    .bind(&state)
                    .bind(&reason)
                    .bind(by)
                    .bind(now)
                    .execute(&mut *tx)
                    .await
                    .ctx(OP)?;
                    Some(state)
                }
            }
        });
        restored
            .map(|s| {
                s.parse().map_err(|_| CatalogueError::Corrupt {
                    what: format!("vaulted cartridge {barcode} had state {s:?}"),
                })
            })
            .transpose()
    }

    /// Where `barcode` was sent, if it is out.
    pub async fn vault_entry(&self, barcode: &str) -> Result<Option<VaultEntry>> {
        const OP: &str = "vault_entry";
        const SQL: &str = concat!(
            "SELECT ",
            vault_columns!(),
            " FROM cartridge_vault WHERE barcode = $1"
        );
        let row: Option<VaultRow> = on_pool!(&self.backend, |pool| {
            sqlx::query_as(SQL)
                .bind(barcode)
                .fetch_optional(pool)
                .await
                .ctx(OP)?
        });
        row.map(VaultEntry::try_from).transpose()
    }

    /// Every cartridge out of the library, by barcode.
    pub async fn vault_entries(&self) -> Result<Vec<VaultEntry>> {
        const OP: &str = "vault_entries";
        const SQL: &str = concat!(
            "SELECT ",
            vault_columns!(),
            " FROM cartridge_vault ORDER BY barcode"
        );
        let rows: Vec<VaultRow> = on_pool!(&self.backend, |pool| {
            sqlx::query_as(SQL).fetch_all(pool).await.ctx(OP)?
        });
        rows.into_iter().map(VaultEntry::try_from).collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::catalogue::test_support::{TestResult, cat, labelled, on_both_backends};
    use crate::catalogue::testing::TestCatalogue;

    on_both_backends!(a_cartridge_goes_out_and_comes_back_as_it_was);

    async fn a_cartridge_goes_out_and_comes_back_as_it_was(db: &TestCatalogue) -> TestResult {
        let c = cat(db);
        labelled(c, "A1", "p").await?;
        c.set_cartridge_state_noted("A1", CartridgeState::Disabled, "dusty", "ops")
            .await?;
        let e = c.send_to_vault("A1", "  vault B ", "alice").await?;
        assert_eq!(e.location, "vault B");
        assert_eq!(e.state_before, CartridgeState::Disabled);
        assert_eq!(e.left_unix, 0);
        let a = c.cartridge("A1").await?.ok_or("missing")?;
        assert_eq!(a.state, CartridgeState::Exported);
        assert_eq!(a.state_reason, "at vault B");
        assert_eq!(a.state_by, "alice");
        // Twice: refused, naming where it is.
        let again = c.send_to_vault("A1", "vault C", "bob").await.unwrap_err();
        assert!(again.to_string().contains("vault B"), "{again}");
        // reel's own `full` does not replace it.
        c.set_cartridge_state("A1", CartridgeState::Full).await?;
        assert_eq!(
            c.cartridge("A1").await?.ok_or("missing")?.state,
            CartridgeState::Exported
        );
        assert!(c.mark_left("A1").await?);
        assert!(!c.mark_left("A1").await?);
        assert_ne!(c.vault_entry("A1").await?.ok_or("gone")?.left_unix, 0);
        assert_eq!(c.vault_entries().await?.len(), 1);
        assert_eq!(
            c.back_from_vault("A1", "bob").await?,
            Some(CartridgeState::Disabled)
        );
        let a = c.cartridge("A1").await?.ok_or("missing")?;
        assert_eq!(a.state, CartridgeState::Disabled);
        assert_eq!(a.state_reason, "dusty");
        assert!(
            a.label_unchecked_unix > 0,
            "its label is unchecked until read"
        );
        c.set_label_checked("A1").await?;
        assert_eq!(
            c.cartridge("A1")
                .await?
                .ok_or("missing")?
                .label_unchecked_unix,
            0
        );
        assert_eq!(c.back_from_vault("A1", "bob").await?, None);
        assert!(c.vault_entries().await?.is_empty());
        // Unknown, empty and hostile locations.
        assert!(matches!(
            c.send_to_vault("NOPE", "v", "x").await.unwrap_err(),
            CatalogueError::UnknownCartridge { .. }
        ));
        for bad in ["", "   ", "a\nb", &"x".repeat(MAX_LOCATION + 1)] {
            assert!(c.send_to_vault("A1", bad, "x").await.is_err(), "{bad:?}");
        }
        assert_eq!(
            c.cartridge("A1").await?.ok_or("missing")?.state,
            CartridgeState::Disabled
        );
        Ok(())
    }
}
