//! `reel drive reset`: recovering what a drive holds through the changer, typically a drive
//! that died with a cartridge in it. The request is a row in the store (`reel_drive_resets`),
//! so it reaches the worker holding the drive on whichever host that is; the worker does it at
//! its next poll (only while the drive is down, so no batch is running on it) and records what
//! it did. Only a drive that is down can be reset: an operator takes it out of service first.

use serde::Serialize;
use sqlx::Row;
use utoipa::ToSchema;

use crate::db::{Db, now_ms};
use crate::drive_state::DriveStates;
use crate::error::{JobsError, Result};
use crate::on_db;

/// A drive's last reset request.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, ToSchema)]
pub struct DriveReset {
    /// The drive.
    pub drive: String,
    /// When it was asked for (unix ms).
    pub requested_ms: i64,
    /// Who asked.
    pub requested_by: String,
    /// When the worker did it (unix ms; 0: not yet).
    pub done_ms: i64,
    /// What it did: where the cartridge went, or why it could not.
    pub result: String,
}

impl DriveReset {
    /// Whether the worker has done the last request.
    pub fn is_done(&self) -> bool {
        self.done_ms >= self.requested_ms
    }
}

/// Reads and writes `reel_drive_resets`.
#[derive(Debug, Clone)]
pub struct DriveResets {
    db: Db,
}

impl DriveResets {
    /// The resets on this database.
    pub fn new(db: Db) -> DriveResets {
        DriveResets { db }
    }

    /// Ask for `drive` to be reset; refused unless the drive is down.
    pub async fn request(&self, drive: &str, by: &str) -> Result<DriveReset> {
        let state = DriveStates::new(self.db.clone()).get_known(drive).await?;
        if state.is_up() {
            return Err(JobsError::Refused {
                what: format!("drive {drive} is in service"),
                hint: format!(
                    "take it down first (`reel drive down {drive} --reason …`): a reset moves its cartridge out through the changer"
                ),
            });
        }
        let now = now_ms();
        let sql = "INSERT INTO reel_drive_resets (drive, requested_ms, requested_by, done_ms, result) \
                   VALUES ($1, $2, $3, 0, '') ON CONFLICT (drive) DO UPDATE SET \
                   requested_ms = excluded.requested_ms, requested_by = excluded.requested_by, \
                   done_ms = 0, result = ''";
        on_db!(&self.db, |p| sqlx::query(sql)
            .bind(drive)
            .bind(now)
            .bind(by)
            .execute(p)
            .await
            .map(|_| ()))
        .map_err(self.db.err("asking for a drive reset"))?;
        self.get(drive).await?.ok_or_else(|| JobsError::NotFound {
            what: format!("the reset of drive {drive} vanished"),
            hint: "ask again".into(),
        })
    }

    /// The last request for `drive`, if any.
    pub async fn get(&self, drive: &str) -> Result<Option<DriveReset>> {
        let sql = "SELECT drive, requested_ms, requested_by, done_ms, result FROM reel_drive_resets WHERE drive = $1";
        on_db!(&self.db, |p| {
            let row = sqlx::query(sql)
                .bind(drive)
                .fetch_optional(p)
                .await
                .map_err(self.db.err("reading a drive reset"))?;
            row.map(|r| -> std::result::Result<DriveReset, sqlx::Error> {
                Ok(DriveReset {
                    drive: r.try_get("drive")?,
                    requested_ms: r.try_get("requested_ms")?,
                    requested_by: r.try_get("requested_by")?,
                    done_ms: r.try_get("done_ms")?,
                    result: r.try_get("result")?,
                })
            })
            .transpose()
            .map_err(self.db.err("reading a drive reset"))
        })
    }

    /// The request the worker of `drive` has still to do, if any.
    pub async fn pending(&self, drive: &str) -> Result<Option<DriveReset>> {
        Ok(self.get(drive).await?.filter(|r| !r.is_done()))
    }

    /// Record what was done for the request made at `requested_ms` (a newer request stays
    /// pending).
    pub async fn finish(&self, drive: &str, requested_ms: i64, result: &str) -> Result<()> {
        let mut result = result.to_string();
        while result.len() > crate::reason::MAX_REASON {
            result.pop();
        }
        let sql = "UPDATE reel_drive_resets SET done_ms = $3, result = $4 WHERE drive = $1 AND requested_ms = $2";
        on_db!(&self.db, |p| sqlx::query(sql)
            .bind(drive)
            .bind(requested_ms)
            .bind(now_ms().max(requested_ms))
            .bind(&result)
            .execute(p)
            .await
            .map(|_| ()))
        .map_err(self.db.err("recording a drive reset"))
    }
}
