//! Cleaning cartridges and the cleanings done with them (`cleaning_cartridges`, `cleanings`).
//! A cleaning cartridge never has a row in `cartridges`: it is not data. Its uses are the
//! cleanings reel did with it; once a drive reports it used up it is marked expired and not
//! loaded again (an operator replaces it).

use serde::Serialize;

use super::Catalogue;
use super::backend::{in_write_tx, now_unix, on_pool};
use super::error::{DbContext, Result};

/// A cleaning cartridge as the catalogue keeps it.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct CleaningCartridge {
    /// Its barcode.
    pub barcode: String,
    /// Cleanings reel did with it.
    pub uses: u64,
    /// When it was last used (unix seconds; 0: never).
    pub last_used_unix: i64,
    /// When a drive reported it used up (unix seconds; 0: it is not).
    pub expired_unix: i64,
}

/// What one cleaning did.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum CleaningOutcome {
    /// The drive was cleaned.
    Cleaned,
    /// The cartridge was used up: the drive was not cleaned.
    Expired,
}

impl CleaningOutcome {
    fn as_str(self) -> &'static str {
        match self {
            CleaningOutcome::Cleaned => "cleaned",
            CleaningOutcome::Expired => "expired",
        }
    }
}

/// One cleaning of a drive.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct CleaningRecord {
    /// Its number.
    pub id: i64,
    /// The library's name (as in drive names).
    pub library: String,
    /// The drive's index.
    pub drive: u32,
    /// The cleaning cartridge.
    pub barcode: String,
    /// When (unix seconds).
    pub at_unix: i64,
    /// `cleaned` or `expired`.
    pub outcome: String,
}

#[derive(sqlx::FromRow)]
struct CartridgeRow {
    barcode: String,
    uses: i64,
    last_used_unix: i64,
    expired_unix: i64,
}

#[derive(sqlx::FromRow)]
struct CleaningRow {
    id: i64,
    library: String,
    drive: i64,
    barcode: String,
    at_unix: i64,
    outcome: String,
}

impl Catalogue {
    /// Record cleaning cartridges the library holds (those known already are left as they
    /// are).
    pub async fn note_cleaning_cartridges(&self, barcodes: &[String]) -> Result<()> {
        const OP: &str = "note_cleaning_cartridges";
        for b in barcodes {
            on_pool!(&self.backend, |pool| {
                sqlx::query(
                    "INSERT INTO cleaning_cartridges (barcode) VALUES ($1) \
                     ON CONFLICT (barcode) DO NOTHING",
                )
                .bind(b)
                .execute(pool)
                .await
                .ctx(OP)?;
            });
        }
        Ok(())
    }

    /// Record a cleaning of drive `drive` of `library` with `barcode`: a use, or its expiry.
    pub async fn record_cleaning(
        &self,
        library: &str,
        drive: u32,
        barcode: &str,
        outcome: CleaningOutcome,
    ) -> Result<()> {
        const OP: &str = "record_cleaning";
        let now = now_unix();
        in_write_tx!(&self.backend, OP, |tx| {
            sqlx::query(
                "INSERT INTO cleaning_cartridges (barcode) VALUES ($1) \
                 ON CONFLICT (barcode) DO NOTHING",
            )
            .bind(barcode)
            .execute(&mut *tx)
            .await
            .ctx(OP)?;
            let sql = match outcome {
                CleaningOutcome::Cleaned => {
                    "UPDATE cleaning_cartridges SET uses = uses + 1, last_used_unix = $2 \
                     WHERE barcode = $1"
                }
                CleaningOutcome::Expired => {
                    "UPDATE cleaning_cartridges SET last_used_unix = $2, expired_unix = $2 \
                     WHERE barcode = $1"
                }
            };
            sqlx::query(sql)
                .bind(barcode)
                .bind(now)
                .execute(&mut *tx)
                .await
                .ctx(OP)?;
            sqlx::query(
                "INSERT INTO cleanings (library, drive, barcode, at_unix, outcome) \
                 VALUES ($1, $2, $3, $4, $5)",
            )
            .bind(library)
            .bind(i64::from(drive))
            .bind(barcode)
            .bind(now)
            .bind(outcome.as_str())
            .execute(&mut *tx)
            .await
            .ctx(OP)?;
        });
        Ok(())
    }

    /// Every cleaning cartridge reel has seen, by barcode.
    pub async fn cleaning_cartridges(&self) -> Result<Vec<CleaningCartridge>> {
        const OP: &str = "cleaning_cartridges";
        let rows: Vec<CartridgeRow> = on_pool!(&self.backend, |pool| {
            sqlx::query_as(
                "SELECT barcode, uses, last_used_unix, expired_unix FROM cleaning_cartridges \
                 ORDER BY barcode",
            )
            .fetch_all(pool)
            .await
            .ctx(OP)?
        });
        Ok(rows
            .into_iter()
            .map(|r| CleaningCartridge {
                barcode: r.barcode,
                uses: u64::try_from(r.uses).unwrap_or(0),
                last_used_unix: r.last_used_unix,
                expired_unix: r.expired_unix,
            })
            .collect())
    }

    /// The last `limit` cleanings of drive `drive` of `library`, newest first.
    pub async fn cleanings_of_drive(
        &self,
        library: &str,
        drive: u32,
        limit: u32,
    ) -> Result<Vec<CleaningRecord>> {
        const OP: &str = "cleanings_of_drive";
        let rows: Vec<CleaningRow> = on_pool!(&self.backend, |pool| {
            sqlx::query_as(
                "SELECT id, library, drive, barcode, at_unix, outcome FROM cleanings \
                 WHERE library = $1 AND drive = $2 ORDER BY id DESC LIMIT $3",
            )
            .bind(library)
            .bind(i64::from(drive))
            .bind(i64::from(limit))
            .fetch_all(pool)
            .await
            .ctx(OP)?
        });
        Ok(rows
            .into_iter()
            .map(|r| CleaningRecord {
                id: r.id,
                library: r.library,
                drive: u32::try_from(r.drive).unwrap_or(u32::MAX),
                barcode: r.barcode,
                at_unix: r.at_unix,
                outcome: r.outcome,
            })
            .collect())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::catalogue::test_support::{TestResult, cat, on_both_backends};
    use crate::catalogue::testing::TestCatalogue;

    on_both_backends!(uses_and_expiry_are_counted);

    async fn uses_and_expiry_are_counted(db: &TestCatalogue) -> TestResult {
        let c = cat(db);
        c.note_cleaning_cartridges(&["CLN001L1".into(), "CLN002L1".into()])
            .await?;
        c.note_cleaning_cartridges(&["CLN001L1".into()]).await?;
        c.record_cleaning("lib", 0, "CLN001L1", CleaningOutcome::Cleaned)
            .await?;
        c.record_cleaning("lib", 1, "CLN001L1", CleaningOutcome::Cleaned)
            .await?;
        c.record_cleaning("lib", 0, "CLN002L1", CleaningOutcome::Expired)
            .await?;
        let all = c.cleaning_cartridges().await?;
        assert_eq!(all.len(), 2);
        assert_eq!((all[0].uses, all[0].expired_unix), (2, 0));
        assert_eq!(all[1].uses, 0);
        assert_ne!(all[1].expired_unix, 0);
        let d0 = c.cleanings_of_drive("lib", 0, 10).await?;
        assert_eq!(d0.len(), 2);
        assert_eq!(
            (d0[0].barcode.as_str(), d0[0].outcome.as_str()),
            ("CLN002L1", "expired")
        );
        assert!(c.cleanings_of_drive("other", 0, 10).await?.is_empty());
        // A cleaning cartridge is not a data cartridge.
        assert!(c.cartridge("CLN001L1").await?.is_none());
        Ok(())
    }
}
