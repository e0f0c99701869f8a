//! Drives in and out of service (`reel_drive_states`), for every host at once.
//!
//! An operator takes a drive down with a reason (`reel drive down`, or `POST
//! /v1/drives/{drive}/down`), and a worker takes one down itself when it fails again and again
//! ([`AutoDown`], `[worker] drive_down_failures` within `drive_down_window_seconds`). A drive
//! that is down gets no new mount: its drive loop ends the step it is in (a bounded batch,
//! ended at a record boundary), gives back what it claimed, unloads and waits until the drive
//! is up again (`reel drive up`). The state is in the store, not in a worker, so it holds
//! across restarts and every host sharing a PostgreSQL store sees it, as CTA's `drive
//! down` does.
//!
//! A drive without a row is up; `up` deletes nothing but records who brought it back and when,
//! so `reel drive ls` keeps the last reason.

use std::collections::VecDeque;
use std::time::{Duration, Instant};

use serde::Serialize;
use sqlx::Row;
use utoipa::ToSchema;

use crate::db::{Db, now_ms};
use crate::error::{JobsError, Result};
use crate::on_db;

/// Longest drive name accepted.
const MAX_DRIVE_NAME: usize = 200;

/// In service or not.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, ToSchema)]
#[serde(rename_all = "lowercase")]
pub enum Service {
    /// Takes mounts.
    Up,
    /// Takes no mount until brought up.
    Down,
}

impl Service {
    fn as_str(self) -> &'static str {
        match self {
            Service::Up => "up",
            Service::Down => "down",
        }
    }
}

/// A drive's service state as last set.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, ToSchema)]
pub struct DriveService {
    /// The drive (`LIBRARY-INDEX`).
    pub drive: String,
    /// Up or down.
    pub state: Service,
    /// Why it was set (for `up`, why it was down before, or what the operator said).
    pub reason: String,
    /// Who set it: an OS user, `token:ID` for the API, `worker:NAME` when a worker took the
    /// drive down itself.
    pub by: String,
    /// Whether a worker set it on its own (repeated failures).
    pub automatic: bool,
    /// Since when (unix ms).
    pub since_ms: i64,
}

impl DriveService {
    /// A drive no one ever took down: up, with no reason.
    fn never_set(drive: &str) -> DriveService {
        DriveService {
            drive: drive.to_string(),
            state: Service::Up,
            reason: String::new(),
            by: String::new(),
            automatic: false,
            since_ms: 0,
        }
    }

    /// Whether the drive takes mounts.
    pub fn is_up(&self) -> bool {
        self.state == Service::Up
    }
}

/// Reads and writes `reel_drive_states`.
#[derive(Debug, Clone)]
pub struct DriveStates {
    db: Db,
}

fn refused(what: String, hint: &str) -> JobsError {
    JobsError::Refused {
        what,
        hint: hint.to_string(),
    }
}

/// A drive name as an operator typed it: what drive names are made of (a library id and an
/// index), bounded.
fn check_drive_name(drive: &str) -> Result<()> {
    if drive.is_empty()
        || drive.len() > MAX_DRIVE_NAME
        || !drive
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || matches!(c, '-' | '_' | '.'))
    {
        return Err(refused(
            format!("`{}` is not a drive name", drive.escape_debug()),
            "drive names are LIBRARY-INDEX, as `reel drive ls` lists them",
        ));
    }
    Ok(())
}

impl DriveStates {
    /// The states on this database.
    pub fn new(db: Db) -> DriveStates {
        DriveStates { db }
    }

    /// The drives any worker has seen: in a changer's inventory, holding a drive lease, on the
    /// board, or with a state. Sorted.
    pub async fn known_drives(&self) -> Result<Vec<String>> {
        let sql = "SELECT library || '-' || CAST(idx AS TEXT) FROM reel_library_elements WHERE kind = 'drive' \
                   UNION SELECT SUBSTR(resource, 7) FROM reel_leases WHERE resource LIKE 'drive:%' \
                   UNION SELECT drive FROM reel_drives \
                   UNION SELECT drive FROM reel_drive_states";
        let mut names: Vec<String> =
            on_db!(&self.db, |p| sqlx::query_scalar(sql).fetch_all(p).await)
                .map_err(self.db.err("listing the drives"))?;
        names.sort();
        names.dedup();
        Ok(names)
    }

    /// The drive's state; up (with no reason) when none was ever set.
    pub async fn get(&self, drive: &str) -> Result<DriveService> {
        let sql = "SELECT drive, state, reason, by_whom, automatic, since_ms FROM reel_drive_states WHERE drive = $1";
        let row = on_db!(&self.db, |p| sqlx::query(sql)
            .bind(drive)
            .fetch_optional(p)
            .await
            .map(|r| r.map(|r| decode(&r))))
        .map_err(self.db.err("reading a drive's state"))?;
        Ok(row.unwrap_or_else(|| DriveService::never_set(drive)))
    }

    /// Every drive known ([`Self::known_drives`]) with its state.
    /// Two queries, whatever the number of drives (the dashboard polls this).
    pub async fn list(&self) -> Result<Vec<DriveService>> {
        let sql =
            "SELECT drive, state, reason, by_whom, automatic, since_ms FROM reel_drive_states";
        let set: std::collections::HashMap<String, DriveService> =
            on_db!(&self.db, |p| sqlx::query(sql).fetch_all(p).await.map(
                |rows| rows
                    .iter()
                    .map(decode)
                    .map(|s| (s.drive.clone(), s))
                    .collect()
            ))
            .map_err(self.db.err("reading the drives' states"))?;
        Ok(self
            .known_drives()
            .await?
            .into_iter()
            .map(|d| {
                set.get(&d)
                    .cloned()
                    .unwrap_or_else(|| DriveService::never_set(&d))
            })
            .collect())
    }

    /// Take `drive` out of service. Refused for a name no worker has seen, or without a
    /// reason ([`crate::reason::check`]). Taking down a drive already down replaces its reason,
    /// who and when.
    pub async fn down(&self, drive: &str, reason: &str, by: &str) -> Result<DriveService> {
        check_drive_name(drive)?;
        let reason = crate::reason::check(reason)?;
        self.require_known(drive).await?;
        self.set(drive, Service::Down, &reason, by, false).await
    }

    /// Put `drive` back in service; `note` (may be empty) is kept as the reason.
    pub async fn up(&self, drive: &str, note: &str, by: &str) -> Result<DriveService> {
        check_drive_name(drive)?;
        let note = if note.trim().is_empty() {
            String::new()
        } else {
            crate::reason::check(note)?
        };
        self.require_known(drive).await?;
        // A reset asked for while it was down and not done by now is not done later, on a
        // drive in service or at its next time down.
        let close = "UPDATE reel_drive_resets SET done_ms = $2, \
                     result = 'not done: the drive was brought up first' \
                     WHERE drive = $1 AND done_ms < requested_ms";
        let now = now_ms();
        on_db!(&self.db, |p| sqlx::query(close)
            .bind(drive)
            .bind(now)
            .execute(p)
            .await
            .map(|_| ()))
        .map_err(self.db.err("closing a drive's pending reset"))?;
        self.set(drive, Service::Up, &note, by, false).await
    }

    /// A worker takes its own drive down after repeated failures.
    pub async fn down_automatically(
        &self,
        drive: &str,
        reason: &str,
        worker: &str,
    ) -> Result<DriveService> {
        let mut reason = reason.to_string();
        while reason.len() > crate::reason::MAX_REASON {
            reason.pop();
        }
        self.set(
            drive,
            Service::Down,
            &reason,
            &format!("worker:{worker}"),
            true,
        )
        .await
    }

    /// The state of `drive`, refused for a malformed name or one no worker has seen.
    pub async fn get_known(&self, drive: &str) -> Result<DriveService> {
        check_drive_name(drive)?;
        self.require_known(drive).await?;
        self.get(drive).await
    }

    async fn require_known(&self, drive: &str) -> Result<()> {
        if self.known_drives().await?.iter().any(|d| d == drive) {
            return Ok(());
        }
        Err(JobsError::NotFound {
            what: format!("no worker has seen a drive `{drive}`"),
            hint: "`reel drive ls` lists the drives (a drive is listed once a worker has run on its library)".into(),
        })
    }

    async fn set(
        &self,
        drive: &str,
        state: Service,
        reason: &str,
        by: &str,
        automatic: bool,
    ) -> Result<DriveService> {
        let now = now_ms();
        // Every change (a new reason, a new who) restarts the time: what is shown is when
        // the state as shown was set.
        let sql = "INSERT INTO reel_drive_states (drive, state, reason, by_whom, automatic, since_ms) \
                   VALUES ($1, $2, $3, $4, $5, $6) \
                   ON CONFLICT (drive) DO UPDATE SET \
                     since_ms = excluded.since_ms, \
                     state = excluded.state, reason = excluded.reason, \
                     by_whom = excluded.by_whom, automatic = excluded.automatic";
        on_db!(&self.db, |p| sqlx::query(sql)
            .bind(drive)
            .bind(state.as_str())
            .bind(reason)
            .bind(by)
            .bind(automatic as i64)
            .bind(now)
            .execute(p)
            .await
            .map(|_| ()))
        .map_err(self.db.err("setting a drive's state"))?;
        self.get(drive).await
    }
}

fn decode<R: Row>(r: &R) -> DriveService
where
    for<'a> &'a str: sqlx::ColumnIndex<R>,
    for<'a> String: sqlx::Decode<'a, R::Database> + sqlx::Type<R::Database>,
    for<'a> i64: sqlx::Decode<'a, R::Database> + sqlx::Type<R::Database>,
{
    let state: String = r.try_get("state").unwrap_or_default();
    DriveService {
        drive: r.try_get("drive").unwrap_or_default(),
        // Only this module writes the column; anything but `down` is up.
        state: if state == "down" {
            Service::Down
        } else {
            Service::Up
        },
        reason: r.try_get("reason").unwrap_or_default(),
        by: r.try_get("by_whom").unwrap_or_default(),
        automatic: r.try_get::<i64, _>("automatic").unwrap_or(0) != 0,
        since_ms: r.try_get("since_ms").unwrap_or(0),
    }
}

/// When a drive has failed often enough to be taken down: `failures` drive failures within
/// `window` (`[worker] drive_down_failures`, `drive_down_window_seconds`; 0 failures: never).
#[derive(Debug)]
pub struct AutoDown {
    failures: u32,
    window: Duration,
    seen: VecDeque<Instant>,
}

impl AutoDown {
    /// A counter for one drive.
    pub fn new(failures: u32, window: Duration) -> AutoDown {
        AutoDown {
            failures,
            window,
            seen: VecDeque::new(),
        }
    }

    /// Count a failure at `at`; true when it makes `failures` within the window.
    pub fn failed(&mut self, at: Instant) -> bool {
        if self.failures == 0 {
            return false;
        }
        self.seen.push_back(at);
        while let Some(&first) = self.seen.front() {
            if at.duration_since(first) > self.window {
                self.seen.pop_front();
            } else {
                break;
            }
        }
        self.seen.len() >= self.failures as usize
    }

    /// Forget the failures (the drive was brought back up).
    pub fn reset(&mut self) {
        self.seen.clear();
    }

    /// How many failures make a drive go down.
    pub fn threshold(&self) -> u32 {
        self.failures
    }

    /// The window they must fall in.
    pub fn window(&self) -> Duration {
        self.window
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn failures_count_only_within_the_window() {
        let t = Instant::now();
        let mut a = AutoDown::new(3, Duration::from_secs(60));
        assert!(!a.failed(t));
        assert!(!a.failed(t + Duration::from_secs(30)));
        // The first fell out of the window: two within it.
        assert!(!a.failed(t + Duration::from_secs(61)));
        assert!(a.failed(t + Duration::from_secs(62)));
        a.reset();
        assert!(!a.failed(t + Duration::from_secs(63)));
        let mut never = AutoDown::new(0, Duration::from_secs(60));
        assert!((0..100).all(|_| !never.failed(t)));
    }

    #[test]
    fn names_and_reasons_are_checked() {
        assert!(check_drive_name("simlib-3F9A0C21B7D4-0").is_ok());
        for bad in ["", "a b", "x;rm", "../x", &"d".repeat(201)] {
            assert!(check_drive_name(bad).is_err(), "{bad}");
        }
    }
}
