//! The drive board: what every leased drive, on every host, holds or is about to mount.
//!
//! Each drive loop decides alone, but its decision must see the other drives: a per-group
//! drive cap counts the group's drives on every host, a cartridge is in one drive at a time,
//! and a pool that already has a drive writing to it needs twice the work for a second one.
//! So every drive loop publishes its mount here (`reel_drives`) and reads the others' before
//! each decision.
//!
//! A row is trusted only while its writer still holds the drive lease at the epoch it wrote:
//! every read joins `reel_leases`, so a crashed host's rows drop out when its lease lapses, and
//! a worker fenced out of a drive can no longer take a place on the board.
//!
//! Taking a place for a new mount ([`DriveBoard::reserve`]) is one atomic check-and-set, so two
//! drives deciding at the same moment cannot both take the last slot of a capped group or the
//! same cartridge: on SQLite the statement runs in a `BEGIN IMMEDIATE` transaction (one writer),
//! on PostgreSQL under a table lock that only reservations take (readers never wait).

use sqlx::Row;

use crate::db::{Db, now_ms};
use crate::error::{JobsError, Result};
use crate::lease::Fence;
use crate::mount::MountTarget;
use crate::on_db;

/// A drive's mount as published on the board.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct BoardMount {
    /// What the mount serves.
    pub target: MountTarget,
    /// The cartridge loaded; `None` while the mount is under way (or for a write mount whose
    /// cartridge is not chosen yet).
    pub barcode: Option<String>,
    /// The pool of the target (for reads: the cartridge's pool).
    pub pool: Option<String>,
    /// The scheduler group of that pool, whose drive cap the mount counts against.
    pub group: Option<String>,
    /// When the mount was decided (unix ms).
    pub since_ms: i64,
}

/// One live row of the board.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct BoardEntry {
    /// Drive name.
    pub drive: String,
    /// Worker holding the drive's lease.
    pub holder: String,
    /// What it holds or is mounting; `None` when empty.
    pub mount: Option<BoardMount>,
}

/// Reads and writes `reel_drives`.
#[derive(Debug, Clone)]
pub struct DriveBoard {
    db: Db,
}

/// Rows whose writer still holds the drive lease at the epoch it wrote, as of `$1`.
const LIVE: &str = "reel_drives d JOIN reel_leases l ON l.resource = 'drive:' || d.drive \
                    AND l.holder = d.holder AND l.epoch = d.epoch AND l.expires_ms >= $1";

fn split(target: &MountTarget) -> (&'static str, &str) {
    match target {
        MountTarget::Read { barcode } => ("read", barcode),
        MountTarget::Write { pool } => ("write", pool),
    }
}

fn join(mode: &str, target: String) -> Option<MountTarget> {
    match mode {
        "read" => Some(MountTarget::Read { barcode: target }),
        "write" => Some(MountTarget::Write { pool: target }),
        _ => None,
    }
}

/// The drive name of a drive lease.
pub(crate) fn drive_of(fence: &Fence) -> Result<&str> {
    fence
        .resource
        .strip_prefix("drive:")
        .ok_or_else(|| JobsError::Internal(format!("{} is not a drive lease", fence.resource)))
}

impl DriveBoard {
    /// The board on this database.
    pub fn new(db: Db) -> DriveBoard {
        DriveBoard { db }
    }

    /// Publish what the fenced drive holds now (`None`: empty). Fails with
    /// [`JobsError::Fenced`] when the drive lease is no longer held.
    pub async fn publish(&self, fence: &Fence, mount: Option<&BoardMount>) -> Result<()> {
        fence.check().await?;
        let drive = drive_of(fence)?;
        let (mode, target) = match mount {
            Some(m) => {
                let (mode, t) = split(&m.target);
                (Some(mode), Some(t))
            }
            None => (None, None),
        };
        let sql = "INSERT INTO reel_drives (drive, holder, epoch, mode, target, barcode, pool, grp, since_ms, updated_ms) \
                   VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10) \
                   ON CONFLICT (drive) DO UPDATE SET holder = excluded.holder, epoch = excluded.epoch, \
                   mode = excluded.mode, target = excluded.target, barcode = excluded.barcode, \
                   pool = excluded.pool, grp = excluded.grp, since_ms = excluded.since_ms, \
                   updated_ms = excluded.updated_ms";
        let now = now_ms();
        on_db!(&self.db, |p| sqlx::query(sql)
            .bind(drive)
            .bind(&fence.holder)
            .bind(fence.epoch)
            .bind(mode)
            .bind(target)
            .bind(mount.and_then(|m| m.barcode.as_deref()))
            .bind(mount.and_then(|m| m.pool.as_deref()))
            .bind(mount.and_then(|m| m.group.as_deref()))
            .bind(mount.map(|m| m.since_ms).unwrap_or(0))
            .bind(now)
            .execute(p)
            .await
            .map(|_| ())
            .map_err(self.db.err("publishing a drive's mount")))
    }

    /// Take a place on the board for a new mount, atomically, unless it would break a rule:
    /// its group already has `cap` live drives of the same mode elsewhere (`cap` 0 = no cap),
    /// (for a read) another live drive holds or is mounting the same cartridge, or (for a
    /// write) more live drives elsewhere write the same pool than the `writers_seen` the
    /// decision counted: another drive loop decided the same write a moment ago, and a second
    /// cartridge would be loaded (or labelled) for work one drive was deemed enough for.
    /// `false` when refused; the drive then keeps what it had and decides again on its next
    /// turn, with the other drive's mount counted.
    pub async fn reserve(
        &self,
        fence: &Fence,
        mount: &BoardMount,
        cap: u32,
        writers_seen: u32,
    ) -> Result<bool> {
        fence.check().await?;
        let drive = drive_of(fence)?;
        let (mode, target) = split(&mount.target);
        let now = now_ms();
        // Parameters: $1 now, $2 drive, $3 holder, $4 epoch, $5 mode, $6 target, $7 pool,
        // $8 group, $9 since, $10 cap, $11 writers seen.
        let ensure = "INSERT INTO reel_drives (drive, holder, epoch, updated_ms) VALUES ($2, $3, $4, $1) \
                      ON CONFLICT (drive) DO NOTHING";
        let take = format!(
            "UPDATE reel_drives SET holder = $3, epoch = $4, mode = $5, target = $6, barcode = NULL, \
             pool = $7, grp = $8, since_ms = $9, updated_ms = $1 \
             WHERE drive = $2 \
             AND ($10 = 0 OR $8 IS NULL OR (SELECT count(*) FROM {LIVE} \
                  WHERE d.drive <> $2 AND d.grp = $8 AND d.mode = $5) < $10) \
             AND NOT ($5 = 'read' AND EXISTS (SELECT 1 FROM {LIVE} \
                  WHERE d.drive <> $2 AND ((d.mode = 'read' AND d.target = $6) OR d.barcode = $6))) \
             AND NOT ($5 = 'write' AND (SELECT count(*) FROM {LIVE} \
                  WHERE d.drive <> $2 AND d.mode = 'write' AND d.target = $6) > $11)"
        );
        let cap = i64::from(cap);
        // Ensure the row, take the place if the rules allow, commit; the number of rows taken.
        macro_rules! run {
            ($tx:ident) => {{
                sqlx::query(ensure)
                    .bind(now)
                    .bind(drive)
                    .bind(&fence.holder)
                    .bind(fence.epoch)
                    .execute(&mut *$tx)
                    .await
                    .map_err(self.db.err("reserving a drive's mount"))?;
                let n = sqlx::query(sqlx::AssertSqlSafe(take.as_str()))
                    .bind(now)
                    .bind(drive)
                    .bind(&fence.holder)
                    .bind(fence.epoch)
                    .bind(mode)
                    .bind(target)
                    .bind(mount.pool.as_deref())
                    .bind(mount.group.as_deref())
                    .bind(mount.since_ms)
                    .bind(cap)
                    .bind(i64::from(writers_seen))
                    .execute(&mut *$tx)
                    .await
                    .map_err(self.db.err("reserving a drive's mount"))?
                    .rows_affected();
                $tx.commit()
                    .await
                    .map_err(self.db.err("reserving a drive's mount"))?;
                n
            }};
        }
        let taken = match &self.db {
            Db::Sqlite(p) => {
                let mut tx = p
                    .begin_with("BEGIN IMMEDIATE")
                    .await
                    .map_err(self.db.err("reserving a drive's mount"))?;
                run!(tx)
            }
            Db::Postgres(p) => {
                let mut tx = p
                    .begin()
                    .await
                    .map_err(self.db.err("reserving a drive's mount"))?;
                // Serialises reservations only: SHARE ROW EXCLUSIVE conflicts with itself and
                // with writers, not with the plain reads of `live`.
                sqlx::query("LOCK TABLE reel_drives IN SHARE ROW EXCLUSIVE MODE")
                    .execute(&mut *tx)
                    .await
                    .map_err(self.db.err("reserving a drive's mount"))?;
                run!(tx)
            }
        };
        Ok(taken == 1)
    }

    /// Every live drive on the board, in drive order.
    pub async fn live(&self) -> Result<Vec<BoardEntry>> {
        let sql = format!(
            "SELECT d.drive, d.holder, d.mode, d.target, d.barcode, d.pool, d.grp, d.since_ms \
             FROM {LIVE} ORDER BY d.drive"
        );
        let now = now_ms();
        on_db!(&self.db, |p| {
            let rows = sqlx::query(sqlx::AssertSqlSafe(sql.as_str()))
                .bind(now)
                .fetch_all(p)
                .await
                .map_err(self.db.err("reading the drive board"))?;
            rows.into_iter()
                .map(|r| {
                    let mode: Option<String> = r.try_get("mode")?;
                    let target: Option<String> = r.try_get("target")?;
                    let mount = match mode.zip(target).and_then(|(m, t)| join(m.as_str(), t)) {
                        Some(target) => Some(BoardMount {
                            target,
                            barcode: r.try_get("barcode")?,
                            pool: r.try_get("pool")?,
                            group: r.try_get("grp")?,
                            since_ms: r.try_get("since_ms")?,
                        }),
                        None => None,
                    };
                    Ok(BoardEntry {
                        drive: r.try_get("drive")?,
                        holder: r.try_get("holder")?,
                        mount,
                    })
                })
                .collect::<std::result::Result<Vec<_>, sqlx::Error>>()
                .map_err(self.db.err("reading the drive board"))
        })
    }
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use super::*;
    use crate::db::testdb;
    use crate::lease::{LeaseManager, drive_resource};

    fn read(barcode: &str, group: Option<&str>) -> BoardMount {
        BoardMount {
            target: MountTarget::Read {
                barcode: barcode.into(),
            },
            barcode: None,
            pool: Some("p".into()),
            group: group.map(Into::into),
            since_ms: now_ms(),
        }
    }

    async fn board_rules(db: Db) {
        let leases = LeaseManager::new(db.clone());
        let board = DriveBoard::new(db);
        let ttl = Duration::from_secs(60);
        let a = leases
            .acquire(&drive_resource("d0"), "host-a", ttl)
            .await
            .unwrap();
        let b = leases
            .acquire(&drive_resource("d1"), "host-b", ttl)
            .await
            .unwrap();
        let c = leases
            .acquire(&drive_resource("d2"), "host-b", ttl)
            .await
            .unwrap();

        // Group vo may use one read drive: d0 takes it, d1 is refused, an uncapped group is not.
        assert!(
            board
                .reserve(&a, &read("A1", Some("vo")), 1, 0)
                .await
                .unwrap()
        );
        assert!(
            !board
                .reserve(&b, &read("A2", Some("vo")), 1, 0)
                .await
                .unwrap()
        );
        assert!(
            board
                .reserve(&b, &read("A2", Some("vo")), 2, 0)
                .await
                .unwrap()
        );
        assert!(board.reserve(&c, &read("B1", None), 1, 0).await.unwrap());
        // d0 re-reserving for itself does not count itself.
        assert!(
            board
                .reserve(&a, &read("A3", Some("vo")), 2, 0)
                .await
                .unwrap()
        );

        // A cartridge is in one drive at a time: A3 is d0's, whether mounting or loaded.
        assert!(!board.reserve(&c, &read("A3", None), 0, 0).await.unwrap());
        let mut loaded = read("A3", Some("vo"));
        loaded.barcode = Some("A3".into());
        board.publish(&a, Some(&loaded)).await.unwrap();
        assert!(!board.reserve(&c, &read("A3", None), 0, 0).await.unwrap());

        let live = board.live().await.unwrap();
        assert_eq!(
            live.iter().map(|e| e.drive.as_str()).collect::<Vec<_>>(),
            ["d0", "d1", "d2"]
        );
        assert_eq!(
            live[0].mount.as_ref().unwrap().barcode.as_deref(),
            Some("A3")
        );
        assert_eq!(live[0].holder, "host-a");

        // d0's host dies: its lease lapses and its row no longer counts.
        leases.heartbeat(&a, Duration::ZERO).await.unwrap();
        tokio::time::sleep(Duration::from_millis(5)).await;
        assert_eq!(board.live().await.unwrap().len(), 2);
        assert!(
            board
                .reserve(&c, &read("A3", Some("vo")), 0, 0)
                .await
                .unwrap()
        );
        // ... and a fenced writer cannot publish or reserve.
        assert!(matches!(
            board.publish(&a, None).await,
            Err(JobsError::Fenced { .. })
        ));
        assert!(matches!(
            board.reserve(&a, &read("A9", None), 0, 0).await,
            Err(JobsError::Fenced { .. })
        ));

        // Two loops decide the same write at once, each seeing no other writer of pool w: the
        // first takes its place, the second is refused; deciding again, it counts the first.
        let write = |pool: &str| BoardMount {
            target: MountTarget::Write { pool: pool.into() },
            barcode: None,
            pool: Some(pool.into()),
            group: None,
            since_ms: now_ms(),
        };
        assert!(board.reserve(&b, &write("w"), 0, 0).await.unwrap());
        assert!(!board.reserve(&c, &write("w"), 0, 0).await.unwrap());
        assert!(board.reserve(&c, &write("w"), 0, 1).await.unwrap());
        // Another pool's writer does not count.
        assert!(board.reserve(&c, &write("x"), 0, 0).await.unwrap());

        // Emptied drives hold nothing.
        board.publish(&b, None).await.unwrap();
        let live = board.live().await.unwrap();
        assert_eq!(live[0].drive, "d1");
        assert_eq!(live[0].mount, None);
    }

    #[tokio::test]
    async fn board_rules_on_sqlite() {
        let t = testdb::sqlite().await;
        board_rules(t.db.clone()).await;
    }

    #[tokio::test]
    async fn board_rules_on_postgres() {
        let Some(t) = testdb::postgres("board_rules_on_postgres").await else {
            return;
        };
        board_rules(t.db.clone()).await;
    }
}
