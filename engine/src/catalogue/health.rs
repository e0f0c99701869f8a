//! Cartridge health (`cartridge_health`): what drives reported at each unmount
//! ([`crate::health::Reading`]), appended, listed by cartridge or by drive, newest first.

use serde::Serialize;

use super::Catalogue;
use super::backend::on_pool;
use super::error::{DbContext, Result};
use crate::health::{Concern, ErrorCounts, Reading};

/// One unmount's reading as the catalogue keeps it.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct HealthRecord {
    /// Its number (ascending in the order they were recorded).
    pub id: i64,
    /// The cartridge.
    pub barcode: String,
    /// The library's name (as in drive names).
    pub library: String,
    /// The drive's index in its library.
    pub drive: u32,
    /// The drive's serial number.
    pub drive_serial: String,
    /// When (unix seconds).
    pub at_unix: i64,
    /// TapeAlert flags (flag n in bit n − 1).
    pub tape_alerts: u64,
    /// The flags in words (`4 media, 20 clean now`).
    pub alerts: String,
    /// Bytes written while loaded.
    pub bytes_written: Option<u64>,
    /// Bytes read while loaded.
    pub bytes_read: Option<u64>,
    /// Read-retry repositions while loaded.
    pub repositions: Option<u64>,
    /// Backhitches while loaded.
    pub backhitches: Option<u64>,
    /// The drive's error counters while loaded.
    pub errors: ErrorCounts,
}

#[derive(sqlx::FromRow)]
struct HealthRow {
    id: i64,
    barcode: String,
    library: String,
    drive: i64,
    drive_serial: String,
    at_unix: i64,
    tape_alerts: i64,
    bytes_written: Option<i64>,
    bytes_read: Option<i64>,
    repositions: Option<i64>,
    backhitches: Option<i64>,
    write_errors_corrected: Option<i64>,
    write_errors_uncorrected: Option<i64>,
    read_errors_corrected: Option<i64>,
    read_errors_uncorrected: Option<i64>,
}

/// Longest drive serial kept (a plugin reports what the drive says).
const MAX_SERIAL: usize = 64;

fn count(v: Option<u64>) -> Option<i64> {
    v.map(|n| i64::try_from(n).unwrap_or(i64::MAX))
}

impl From<HealthRow> for HealthRecord {
    fn from(r: HealthRow) -> HealthRecord {
        // The bitmap is kept as the same 64 bits in a signed column.
        let bits = r.tape_alerts as u64;
        HealthRecord {
            id: r.id,
            barcode: r.barcode,
            library: r.library,
            drive: u32::try_from(r.drive).unwrap_or(u32::MAX),
            drive_serial: r.drive_serial,
            at_unix: r.at_unix,
            tape_alerts: bits,
            alerts: crate::health::describe(bits),
            bytes_written: r.bytes_written.map(|n| n.max(0) as u64),
            bytes_read: r.bytes_read.map(|n| n.max(0) as u64),
            repositions: r.repositions.map(|n| n.max(0) as u64),
            backhitches: r.backhitches.map(|n| n.max(0) as u64),
            errors: ErrorCounts {
                write_corrected: r.write_errors_corrected.map(|n| n.max(0) as u64),
                write_uncorrected: r.write_errors_uncorrected.map(|n| n.max(0) as u64),
                read_corrected: r.read_errors_corrected.map(|n| n.max(0) as u64),
                read_uncorrected: r.read_errors_uncorrected.map(|n| n.max(0) as u64),
            },
        }
    }
}

const COLUMNS: &str = "id, barcode, library, drive, drive_serial, at_unix, tape_alerts, bytes_written, \
                       bytes_read, repositions, backhitches, write_errors_corrected, \
                       write_errors_uncorrected, read_errors_corrected, read_errors_uncorrected";

impl Catalogue {
    /// Append one unmount's reading.
    pub async fn record_health(&self, r: &Reading) -> Result<()> {
        const OP: &str = "record_health";
        let serial: String = r.drive_serial.chars().take(MAX_SERIAL).collect();
        on_pool!(&self.backend, |pool| {
            sqlx::query(
                "INSERT INTO cartridge_health (barcode, drive, drive_serial, at_unix, tape_alerts, \
                 bytes_written, bytes_read, repositions, backhitches, library, \
                 write_errors_corrected, write_errors_uncorrected, read_errors_corrected, \
                 read_errors_uncorrected) \
                 VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11, $12, $13, $14)",
            )
            .bind(&r.barcode)
            .bind(i64::from(r.drive))
            .bind(&serial)
            .bind(r.unix)
            .bind(r.tape_alerts as i64)
            .bind(count(r.bytes_written))
            .bind(count(r.bytes_read))
            .bind(count(r.repositions))
            .bind(count(r.backhitches))
            .bind(&r.library)
            .bind(count(r.errors.write_corrected))
            .bind(count(r.errors.write_uncorrected))
            .bind(count(r.errors.read_corrected))
            .bind(count(r.errors.read_uncorrected))
            .execute(pool)
            .await
            .ctx(OP)?;
        });
        Ok(())
    }

    /// The last `limit` readings of cartridge `barcode`, newest first.
    pub async fn health_of_cartridge(
        &self,
        barcode: &str,
        limit: u32,
    ) -> Result<Vec<HealthRecord>> {
        const OP: &str = "health_of_cartridge";
        let sql = format!(
            "SELECT {COLUMNS} FROM cartridge_health WHERE barcode = $1 ORDER BY id DESC LIMIT $2"
        );
        let rows: Vec<HealthRow> = on_pool!(&self.backend, |pool| {
            sqlx::query_as(sqlx::AssertSqlSafe(sql.clone()))
                .bind(barcode)
                .bind(i64::from(limit))
                .fetch_all(pool)
                .await
                .ctx(OP)?
        });
        Ok(rows.into_iter().map(HealthRecord::from).collect())
    }

    /// The last `limit` readings of drive `index` of `library` (as drive names name it),
    /// newest first.
    pub async fn health_of_library_drive(
        &self,
        library: &str,
        index: u32,
        limit: u32,
    ) -> Result<Vec<HealthRecord>> {
        const OP: &str = "health_of_library_drive";
        let sql = format!(
            "SELECT {COLUMNS} FROM cartridge_health WHERE library = $3 AND drive = $1 \
             ORDER BY id DESC LIMIT $2"
        );
        let rows: Vec<HealthRow> = on_pool!(&self.backend, |pool| {
            sqlx::query_as(sqlx::AssertSqlSafe(sql.clone()))
                .bind(i64::from(index))
                .bind(i64::from(limit))
                .bind(library)
                .fetch_all(pool)
                .await
                .ctx(OP)?
        });
        Ok(rows.into_iter().map(HealthRecord::from).collect())
    }

    /// How many of cartridge `barcode`'s unmounts reported a medium TapeAlert flag
    /// ([`Concern::Medium`]), counted in the database.
    pub async fn medium_alerts(&self, barcode: &str) -> Result<u64> {
        const OP: &str = "medium_alerts";
        // The medium flags as the stored bitmap (the same 64 bits in a signed column).
        let mask = (1..=64u8)
            .filter(|f| crate::health::concern(*f) == Concern::Medium)
            .fold(0u64, |m, f| m | 1u64 << (f - 1)) as i64;
        let n: i64 = on_pool!(&self.backend, |pool| {
            sqlx::query_scalar(
                "SELECT COUNT(*) FROM cartridge_health WHERE barcode = $1 AND (tape_alerts & $2) <> 0",
            )
            .bind(barcode)
            .bind(mask)
            .fetch_one(pool)
            .await
            .ctx(OP)?
        });
        Ok(n.max(0) as u64)
    }
}

#[cfg(test)]
mod tests {
    use crate::catalogue::test_support::{TestResult, cat, on_both_backends};
    use crate::catalogue::testing::TestCatalogue;
    use crate::health::{ErrorCounts, Reading};

    on_both_backends!(readings_are_kept_by_cartridge_and_drive);

    async fn readings_are_kept_by_cartridge_and_drive(db: &TestCatalogue) -> TestResult {
        let c = cat(db);
        let r = |bc: &str, serial: &str, alerts: u64| Reading {
            barcode: bc.into(),
            library: "lib".into(),
            drive: 1,
            drive_serial: serial.into(),
            unix: 1_800_000_000,
            tape_alerts: alerts,
            bytes_written: Some(10),
            bytes_read: None,
            repositions: Some(3),
            backhitches: None,
            errors: ErrorCounts {
                read_corrected: Some(7),
                read_uncorrected: Some(1),
                ..ErrorCounts::default()
            },
        };
        c.record_health(&r("RL0001L9", "DRV1", 0)).await?;
        c.record_health(&r("RL0001L9", "DRV2", 1 << 3)).await?;
        // Flag 64: the top bit survives the signed column.
        c.record_health(&r("RL0002L9", "DRV2", 1 << 63)).await?;
        let one = c.health_of_cartridge("RL0001L9", 10).await?;
        assert_eq!(one.len(), 2);
        assert_eq!(one[0].drive_serial, "DRV2", "newest first");
        assert_eq!(one[0].alerts, "4 media");
        assert_eq!(one[0].bytes_written, Some(10));
        assert_eq!(one[0].bytes_read, None);
        assert_eq!(
            (
                one[0].errors.read_corrected,
                one[0].errors.read_uncorrected,
                one[0].errors.write_corrected
            ),
            (Some(7), Some(1), None)
        );
        assert_eq!(
            one[0].errors.describe(),
            "read errors 7 corrected, 1 not",
            "a side the drive does not count is left out"
        );
        assert_eq!(c.medium_alerts("RL0001L9").await?, 1);
        assert_eq!(c.medium_alerts("RL0002L9").await?, 0);
        let drv = c.health_of_library_drive("lib", 1, 10).await?;
        assert_eq!(drv.len(), 3);
        assert_eq!(drv[0].tape_alerts, 1 << 63);
        assert_eq!(c.health_of_library_drive("lib", 1, 1).await?.len(), 1);
        assert!(c.health_of_library_drive("other", 1, 10).await?.is_empty());
        Ok(())
    }
}
