//! An operator's request for a drive that the worker holding it carries out, on whichever
//! host that is: `reel drive reset` (recover what a drive holds through the changer, typically
//! a drive that died with a cartridge in it; table `reel_drive_resets`) and `reel drive clean`
//! (clean it with a cleaning cartridge; `reel_drive_cleans`). Each is a row in the store, the
//! last request per drive; the worker does it at its next poll and records what it did.
//!
//! Only a drive that is down can be reset (an operator takes it out of service first, so no
//! batch runs on it). A drive is cleaned between two batches, up or down.

use serde::Serialize;
use sqlx::Row;
use utoipa::ToSchema;

use crate::db::{Db, now_ms};
use crate::drive_state::DriveStates;
use crate::error::{JobsError, Result};
use crate::on_db;

/// What an operator asks of a drive.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum DriveRequestKind {
    /// `reel drive reset`.
    Reset,
    /// `reel drive clean`.
    Clean,
}

/// The statements of one kind's table.
struct Statements {
    what: &'static str,
    insert: &'static str,
    get: &'static str,
    finish: &'static str,
}

macro_rules! statements {
    ($what:literal, $table:literal) => {
        Statements {
            what: $what,
            insert: concat!(
                "INSERT INTO ",
                $table,
                " (drive, requested_ms, requested_by, done_ms, result) VALUES ($1, $2, $3, 0, '') \
                 ON CONFLICT (drive) DO UPDATE SET requested_ms = excluded.requested_ms, \
                 requested_by = excluded.requested_by, done_ms = 0, result = ''"
            ),
            get: concat!(
                "SELECT drive, requested_ms, requested_by, done_ms, result FROM ",
                $table,
                " WHERE drive = $1"
            ),
            finish: concat!(
                "UPDATE ",
                $table,
                " SET done_ms = $3, result = $4 WHERE drive = $1 AND requested_ms = $2"
            ),
        }
    };
}

const RESETS: Statements = statements!("reset", "reel_drive_resets");
const CLEANS: Statements = statements!("cleaning", "reel_drive_cleans");

/// A drive's last request of one kind.
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

/// Reads and writes one kind's requests (`reel_drive_resets` or `reel_drive_cleans`).
#[derive(Debug, Clone)]
pub struct DriveResets {
    db: Db,
    kind: DriveRequestKind,
}

impl DriveResets {
    /// The resets on this database.
    pub fn new(db: Db) -> DriveResets {
        DriveResets {
            db,
            kind: DriveRequestKind::Reset,
        }
    }

    /// The cleaning requests on this database.
    pub fn cleans(db: Db) -> DriveResets {
        DriveResets {
            db,
            kind: DriveRequestKind::Clean,
        }
    }

    /// Which kind of request these are.
    pub fn kind(&self) -> DriveRequestKind {
        self.kind
    }

    fn sql(&self) -> &'static Statements {
        match self.kind {
            DriveRequestKind::Reset => &RESETS,
            DriveRequestKind::Clean => &CLEANS,
        }
    }

    /// Ask for `drive` to be reset (refused unless the drive is down) or cleaned.
    pub async fn request(&self, drive: &str, by: &str) -> Result<DriveReset> {
        let state = DriveStates::new(self.db.clone()).get_known(drive).await?;
        if self.kind == DriveRequestKind::Reset && state.is_up() {
            return Err(JobsError::Refused {
                what: format!("drive {drive} is in service"),
                hint: format!(
                    "take it down first (`reel drive down {drive} --reason …`): a reset moves its cartridge out through the changer"
                ),
            });
        }
        let now = now_ms();
        let sql = self.sql().insert;
        on_db!(&self.db, |p| sqlx::query(sql)
            .bind(drive)
            .bind(now)
            .bind(by)
            .execute(p)
            .await
            .map(|_| ()))
        .map_err(
            self.db
                .err(format!("asking for a drive {}", self.sql().what)),
        )?;
        self.get(drive).await?.ok_or_else(|| JobsError::NotFound {
            what: format!("the {} of drive {drive} vanished", self.sql().what),
            hint: "ask again".into(),
        })
    }

    /// The last request for `drive`, if any.
    pub async fn get(&self, drive: &str) -> Result<Option<DriveReset>> {
        let sql = self.sql().get;
        let doing = format!("reading a drive {}", self.sql().what);
        on_db!(&self.db, |p| {
            let row = sqlx::query(sql)
                .bind(drive)
                .fetch_optional(p)
                .await
                .map_err(self.db.err(doing.clone()))?;
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
            .map_err(self.db.err(doing))
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
        let sql = self.sql().finish;
        on_db!(&self.db, |p| sqlx::query(sql)
            .bind(drive)
            .bind(requested_ms)
            .bind(now_ms().max(requested_ms))
            .bind(&result)
            .execute(p)
            .await
            .map(|_| ()))
        .map_err(
            self.db
                .err(format!("recording a drive {}", self.sql().what)),
        )
    }
}
