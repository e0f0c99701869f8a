//! Cartridges: their state, pool, label and where their end of data is.

use std::fmt;
use std::str::FromStr;

use serde::{Deserialize, Serialize};
use sqlx::QueryBuilder;
use uuid::Uuid;

use super::Catalogue;
use super::backend::{from_db, in_write_tx, now_unix, on_pool, to_db};
use super::error::{CatalogueError, DbContext, Result, shorten};
use super::pool::validate_name;

/// Where a cartridge is in its life.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum CartridgeState {
    /// Known to the library, not yet labelled by reel.
    New,
    /// Labelled and in a pool: can be written (unless WORM rules say otherwise) and read.
    Active,
    /// Taken out of service by an operator or after an error: not written; read only if no
    /// other copy exists.
    Disabled,
    /// End of medium reached: read only.
    Full,
    /// Damaged or lost durable data: read only as a last resort.
    Broken,
    /// Its live data is being copied elsewhere: not written.
    Repacking,
    /// Taken out of the library: cannot be mounted.
    Exported,
}

impl CartridgeState {
    /// Every state, in declaration order.
    pub const ALL: [CartridgeState; 7] = [
        CartridgeState::New,
        CartridgeState::Active,
        CartridgeState::Disabled,
        CartridgeState::Full,
        CartridgeState::Broken,
        CartridgeState::Repacking,
        CartridgeState::Exported,
    ];

    /// The lower-case name stored in the catalogue and shown to operators.
    pub fn as_str(self) -> &'static str {
        match self {
            CartridgeState::New => "new",
            CartridgeState::Active => "active",
            CartridgeState::Disabled => "disabled",
            CartridgeState::Full => "full",
            CartridgeState::Broken => "broken",
            CartridgeState::Repacking => "repacking",
            CartridgeState::Exported => "exported",
        }
    }
}

impl fmt::Display for CartridgeState {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

impl FromStr for CartridgeState {
    type Err = CatalogueError;

    fn from_str(s: &str) -> Result<Self> {
        CartridgeState::ALL
            .into_iter()
            .find(|st| st.as_str() == s)
            .ok_or_else(|| CatalogueError::UnknownState {
                kind: "cartridge",
                value: shorten(s),
                expected: "new, active, disabled, full, broken, repacking, exported",
            })
    }
}

/// One cartridge as the catalogue knows it.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct Cartridge {
    /// The barcode (the library's name for it).
    pub barcode: String,
    /// The pool it was labelled for; None until labelled.
    pub pool: Option<String>,
    /// Where it is in its life.
    pub state: CartridgeState,
    /// Write once, read many: never relabelled, never rewritten.
    pub worm: bool,
    /// Native capacity in bytes.
    pub capacity_bytes: u64,
    /// Bytes of data in durable containers.
    pub used_bytes: u64,
    /// Block number of end of data: the next block written goes there.
    pub eod_block: u64,
    /// Tape file number of the next container.
    pub next_file: u64,
    /// The drive has calibrated it (first load done).
    pub calibrated: bool,
    /// How many times reel mounted it.
    pub mount_count: u64,
    /// Label epoch: incremented each time it is relabelled.
    pub label_epoch: u64,
    /// The UUID written in its label; None until labelled.
    pub cartridge_uuid: Option<Uuid>,
    /// Why it is in its state (empty when no one said).
    pub state_reason: String,
    /// Who put it in its state: an operator, or `reel` for reel's own transitions (empty:
    /// never changed, or changed before reel kept this).
    pub state_by: String,
    /// When its state last changed (unix seconds; 0: not recorded).
    pub state_unix: i64,
    /// When reel last mounted it (unix seconds; 0: never).
    pub last_mounted_unix: i64,
    /// When its end of data last moved: its last write (unix seconds; 0: never).
    pub last_written_unix: i64,
    /// When reel last read data from it, by a recall or a verify (unix seconds; 0: never).
    pub last_read_unix: i64,
    /// Since when its label is unchecked (it came back from a vault and no one has read its
    /// label since; unix seconds); 0: nothing to check. No write goes to it before the check.
    pub label_unchecked_unix: i64,
}

impl Cartridge {
    /// Whether it has room for `needed` bytes by the catalogue's figures: its capacity is
    /// unknown (0) or its capacity less its used bytes is at least `needed`. The rule
    /// [`Catalogue::writable_cartridge`] selects by.
    pub fn has_room(&self, needed: u64) -> bool {
        self.capacity_bytes == 0 || self.capacity_bytes.saturating_sub(self.used_bytes) >= needed
    }
}

/// The columns of [`CartridgeRow`], in order.
macro_rules! cartridge_columns {
    () => {
        "barcode, pool, state, worm, capacity_bytes, used_bytes, eod_block, next_file, \
         calibrated, mount_count, label_epoch, cartridge_uuid, state_reason, state_by, \
         state_unix, last_mounted_unix, last_written_unix, last_read_unix, label_unchecked_unix"
    };
}

/// A `cartridges` row as stored.
#[derive(sqlx::FromRow)]
struct CartridgeRow {
    barcode: String,
    pool: Option<String>,
    state: String,
    worm: bool,
    capacity_bytes: i64,
    used_bytes: i64,
    eod_block: i64,
    next_file: i64,
    calibrated: bool,
    mount_count: i64,
    label_epoch: i64,
    cartridge_uuid: Option<Uuid>,
    state_reason: String,
    state_by: String,
    state_unix: i64,
    last_mounted_unix: i64,
    last_written_unix: i64,
    last_read_unix: i64,
    label_unchecked_unix: i64,
}

impl TryFrom<CartridgeRow> for Cartridge {
    type Error = CatalogueError;

    fn try_from(r: CartridgeRow) -> Result<Cartridge> {
        Ok(Cartridge {
            state: r.state.parse().map_err(|_| CatalogueError::Corrupt {
                what: format!("cartridge {} has state {:?}", r.barcode, r.state),
            })?,
            pool: r.pool,
            worm: r.worm,
            capacity_bytes: from_db("cartridge capacity_bytes", r.capacity_bytes)?,
            used_bytes: from_db("cartridge used_bytes", r.used_bytes)?,
            eod_block: from_db("cartridge eod_block", r.eod_block)?,
            next_file: from_db("cartridge next_file", r.next_file)?,
            calibrated: r.calibrated,
            mount_count: from_db("cartridge mount_count", r.mount_count)?,
            label_epoch: from_db("cartridge label_epoch", r.label_epoch)?,
            cartridge_uuid: r.cartridge_uuid,
            state_reason: r.state_reason,
            state_by: r.state_by,
            state_unix: r.state_unix,
            last_mounted_unix: r.last_mounted_unix,
            last_written_unix: r.last_written_unix,
            last_read_unix: r.last_read_unix,
            label_unchecked_unix: r.label_unchecked_unix,
            barcode: r.barcode,
        })
    }
}

fn rows_to_cartridges(rows: Vec<CartridgeRow>) -> Result<Vec<Cartridge>> {
    rows.into_iter().map(Cartridge::try_from).collect()
}

/// Who reel's own state changes are recorded as.
pub const REEL: &str = "reel";

/// Longest barcode accepted (LTO labels are 8 characters; some libraries report more).
const MAX_BARCODE_LEN: usize = 32;

/// Barcodes: 1 to 32 printable ASCII characters, no spaces.
pub(crate) fn validate_barcode(barcode: &str) -> Result<()> {
    let ok = !barcode.is_empty()
        && barcode.len() <= MAX_BARCODE_LEN
        && barcode.bytes().all(|b| b.is_ascii_graphic());
    if ok {
        Ok(())
    } else {
        Err(CatalogueError::InvalidInput {
            what: "barcode",
            value: shorten(barcode),
            reason: format!(
                "use 1 to {MAX_BARCODE_LEN} printable ASCII characters without spaces \
                 (trim the padding some libraries report)"
            ),
        })
    }
}

/// Block number of end of data right after labelling: the label record (block 0) and its
/// filemark (block 1).
pub const LABELLED_EOD_BLOCK: u64 = 2;
/// The first container's tape file number (file 0 is the label).
pub const FIRST_CONTAINER_FILE: u64 = 1;

impl Catalogue {
    /// Add a cartridge in state New. Returns false (and changes nothing) if it is known.
    pub async fn add_cartridge(
        &self,
        barcode: &str,
        worm: bool,
        capacity_bytes: u64,
    ) -> Result<bool> {
        const OP: &str = "add_cartridge";
        validate_barcode(barcode)?;
        let capacity = to_db("capacity_bytes", capacity_bytes)?;
        let now = now_unix();
        let done = on_pool!(&self.backend, |pool| {
            sqlx::query(
                "INSERT INTO cartridges (barcode, state, worm, capacity_bytes, created_unix, updated_unix) \
                 VALUES ($1, 'new', $2, $3, $4, $4) ON CONFLICT (barcode) DO NOTHING",
            )
            .bind(barcode)
            .bind(worm)
            .bind(capacity)
            .bind(now)
            .execute(pool)
            .await
            .ctx(OP)?
            .rows_affected()
        });
        Ok(done == 1)
    }

    /// The cartridge with this barcode, if known.
    pub async fn cartridge(&self, barcode: &str) -> Result<Option<Cartridge>> {
        const OP: &str = "cartridge";
        let row: Option<CartridgeRow> = on_pool!(&self.backend, |pool| {
            sqlx::query_as(concat!(
                "SELECT ",
                cartridge_columns!(),
                " FROM cartridges WHERE barcode = $1"
            ))
            .bind(barcode)
            .fetch_optional(pool)
            .await
            .ctx(OP)?
        });
        row.map(Cartridge::try_from).transpose()
    }

    /// Every cartridge, by barcode.
    pub async fn cartridges(&self) -> Result<Vec<Cartridge>> {
        const OP: &str = "cartridges";
        let rows: Vec<CartridgeRow> = on_pool!(&self.backend, |pool| {
            sqlx::query_as(concat!(
                "SELECT ",
                cartridge_columns!(),
                " FROM cartridges ORDER BY barcode"
            ))
            .fetch_all(pool)
            .await
            .ctx(OP)?
        });
        rows_to_cartridges(rows)
    }

    /// Set the state of a cartridge. Refused: Active for a cartridge never labelled, New for
    /// one that holds live (not dead) containers.
    ///
    /// This is reel's own change (by `reel`): marking a cartridge `full` (early warning, a
    /// write error) leaves one that is `disabled`, `broken` or `exported` as it is, so an
    /// operator's out-of-service state and its reason are never undone by a write that was
    /// already running.
    pub async fn set_cartridge_state(&self, barcode: &str, state: CartridgeState) -> Result<()> {
        self.set_state_inner(barcode, state, "", REEL, state == CartridgeState::Full)
            .await
    }

    /// reel stops writing to an active cartridge (state full, with `reason`, by reel): its
    /// medium reported failing. Any other state is left as it is (an operator's disabled or
    /// broken, a full one, a new one); returns whether it changed.
    pub async fn retire_from_writes(&self, barcode: &str, reason: &str) -> Result<bool> {
        const OP: &str = "retire_from_writes";
        let now = now_unix();
        let n = on_pool!(&self.backend, |pool| {
            sqlx::query(
                "UPDATE cartridges SET state = 'full', state_reason = $2, state_by = $3, \
                 state_unix = $4, updated_unix = $4 WHERE barcode = $1 AND state = 'active'",
            )
            .bind(barcode)
            .bind(reason)
            .bind(REEL)
            .bind(now)
            .execute(pool)
            .await
            .ctx(OP)?
            .rows_affected()
        });
        Ok(n > 0)
    }

    /// An operator's change of state, recording why and who (kept until the next change).
    /// Checked as [`Self::set_cartridge_state`], and applied whatever the present state.
    pub async fn set_cartridge_state_noted(
        &self,
        barcode: &str,
        state: CartridgeState,
        reason: &str,
        by: &str,
    ) -> Result<()> {
        self.set_state_inner(barcode, state, reason, by, false)
            .await
    }

    async fn set_state_inner(
        &self,
        barcode: &str,
        state: CartridgeState,
        reason: &str,
        by: &str,
        keep_out_of_service: bool,
    ) -> Result<()> {
        const OP: &str = "set_cartridge_state";
        let now = now_unix();
        in_write_tx!(&self.backend, OP, |tx| {
            // Lock the row first (PostgreSQL row lock; SQLite already holds the write lock).
            let found = sqlx::query("UPDATE cartridges SET updated_unix = $1 WHERE barcode = $2")
                .bind(now)
                .bind(barcode)
                .execute(&mut *tx)
                .await
                .ctx(OP)?
                .rows_affected();
            if found == 0 {
                return Err(unknown(barcode));
            }
            match state {
                CartridgeState::Active => {
                    let labelled: bool = sqlx::query_scalar(
                        "SELECT cartridge_uuid IS NOT NULL FROM cartridges WHERE barcode = $1",
                    )
                    .bind(barcode)
                    .fetch_one(&mut *tx)
                    .await
                    .ctx(OP)?;
                    if !labelled {
                        return Err(refused(
                            barcode,
                            "it was never labelled, so it cannot be active; run intake on it",
                        ));
                    }
                }
                CartridgeState::New => {
                    let live: i64 = sqlx::query_scalar(
                        "SELECT COUNT(*) FROM containers WHERE barcode = $1 AND state <> 'dead'",
                    )
                    .bind(barcode)
                    .fetch_one(&mut *tx)
                    .await
                    .ctx(OP)?;
                    if live > 0 {
                        return Err(refused(
                            barcode,
                            format!(
                                "it holds {live} live containers, so it cannot go back to new; \
                                 repack it and mark its containers dead first"
                            ),
                        ));
                    }
                }
                _ => {}
            }
            sqlx::query(
                "UPDATE cartridges SET state = $1, state_reason = $3, state_by = $4, state_unix = $5 \
                 WHERE barcode = $2 AND NOT ($6 AND state IN ('disabled', 'broken', 'exported'))",
            )
                .bind(state.as_str())
                .bind(barcode)
                .bind(reason)
                .bind(by)
                .bind(now)
                .bind(keep_out_of_service)
                .execute(&mut *tx)
                .await
                .ctx(OP)?;
        });
        Ok(())
    }

    /// Record the cartridge's capacity as a drive reported it for the loaded medium (0: not
    /// known). Cartridges are added with the capacity of the inventory, which is not measured;
    /// this replaces it with the drive's figure at the first mount for writing or labelling.
    pub async fn set_capacity(&self, barcode: &str, capacity_bytes: u64) -> Result<()> {
        const OP: &str = "set_capacity";
        let capacity = to_db("capacity_bytes", capacity_bytes)?;
        let now = now_unix();
        let n = on_pool!(&self.backend, |pool| {
            sqlx::query(
                "UPDATE cartridges SET capacity_bytes = $1, updated_unix = $2 WHERE barcode = $3",
            )
            .bind(capacity)
            .bind(now)
            .bind(barcode)
            .execute(pool)
            .await
            .ctx(OP)?
            .rows_affected()
        });
        if n == 0 {
            return Err(unknown(barcode));
        }
        Ok(())
    }

    /// The largest capacity known (reported by a drive, not 0) of the cartridges labelled into
    /// `pool`, else of any cartridge of the library that may still be labelled into it (state
    /// New); None when no such capacity is known yet.
    pub async fn largest_capacity(&self, pool: &str) -> Result<Option<u64>> {
        const OP: &str = "largest_capacity";
        let (in_pool, new): (Option<i64>, Option<i64>) = on_pool!(&self.backend, |db| {
            sqlx::query_as(
                "SELECT MAX(CASE WHEN pool = $1 THEN capacity_bytes END),                         MAX(CASE WHEN state = 'new' AND worm = FALSE THEN capacity_bytes END)                  FROM cartridges WHERE capacity_bytes > 0",
            )
            .bind(pool)
            .fetch_one(db)
            .await
            .ctx(OP)?
        });
        let best = in_pool.max(new);
        best.map(|b| from_db("cartridge capacity_bytes", b))
            .transpose()
    }

    /// Record that the drive calibrated the cartridge (first load done).
    pub async fn set_calibrated(&self, barcode: &str) -> Result<()> {
        self.update_one(
            "set_calibrated",
            "UPDATE cartridges SET calibrated = TRUE, updated_unix = $1 WHERE barcode = $2",
            barcode,
        )
        .await
    }

    /// Count one more mount of the cartridge.
    pub async fn add_mount(&self, barcode: &str) -> Result<()> {
        self.update_one(
            "add_mount",
            "UPDATE cartridges SET mount_count = mount_count + 1, updated_unix = $1, \
             last_mounted_unix = $1 WHERE barcode = $2",
            barcode,
        )
        .await
    }

    /// Record that reel read data from the cartridge now (a recall or a verify).
    pub async fn note_read(&self, barcode: &str) -> Result<()> {
        self.update_one(
            "note_read",
            "UPDATE cartridges SET last_read_unix = $1, updated_unix = $1 WHERE barcode = $2",
            barcode,
        )
        .await
    }

    /// The cartridge's label was read and is the one the catalogue recorded: writes may use it
    /// again.
    pub async fn set_label_checked(&self, barcode: &str) -> Result<()> {
        self.update_one(
            "set_label_checked",
            "UPDATE cartridges SET label_unchecked_unix = 0, updated_unix = $1 WHERE barcode = $2",
            barcode,
        )
        .await
    }

    /// Run `sql` (binding now, barcode) and require that it changed the cartridge.
    async fn update_one(&self, op: &'static str, sql: &'static str, barcode: &str) -> Result<()> {
        let now = now_unix();
        let n = on_pool!(&self.backend, |pool| {
            sqlx::query(sql)
                .bind(now)
                .bind(barcode)
                .execute(pool)
                .await
                .ctx(op)?
                .rows_affected()
        });
        if n == 0 {
            return Err(unknown(barcode));
        }
        Ok(())
    }

    /// After labelling: pool, UUID, epoch, state Active, `eod_block` = 2 (label record and
    /// filemark), `next_file` = 1, `used_bytes` = 0.
    ///
    /// The pool must exist. Refused: a cartridge holding live containers (their data would be
    /// lost; mark them dead first), a WORM cartridge already labelled, an epoch that does not
    /// increase, a UUID another cartridge has. Labelling again with the cartridge's present
    /// pool, UUID and epoch changes nothing (a retried intake or a rebuild).
    pub async fn set_labelled(
        &self,
        barcode: &str,
        pool: &str,
        uuid: Uuid,
        epoch: u64,
    ) -> Result<()> {
        const OP: &str = "set_labelled";
        validate_name("pool name", pool)?;
        let epoch_db = to_db("label epoch", epoch)?;
        if !self.pool_exists(pool).await? {
            return Err(CatalogueError::UnknownPool { pool: pool.into() });
        }
        let now = now_unix();
        in_write_tx!(&self.backend, OP, |tx| {
            let found = sqlx::query("UPDATE cartridges SET updated_unix = $1 WHERE barcode = $2")
                .bind(now)
                .bind(barcode)
                .execute(&mut *tx)
                .await
                .ctx(OP)?
                .rows_affected();
            if found == 0 {
                return Err(unknown(barcode));
            }
            let row: CartridgeRow = sqlx::query_as(concat!(
                "SELECT ",
                cartridge_columns!(),
                " FROM cartridges WHERE barcode = $1"
            ))
            .bind(barcode)
            .fetch_one(&mut *tx)
            .await
            .ctx(OP)?;
            let current = Cartridge::try_from(row)?;
            let same_label = current.cartridge_uuid == Some(uuid)
                && current.label_epoch == epoch
                && current.pool.as_deref() == Some(pool);
            if !same_label {
                if current.worm && current.cartridge_uuid.is_some() {
                    return Err(refused(
                        barcode,
                        "it is WORM and already labelled; it can never be relabelled",
                    ));
                }
                if current.cartridge_uuid.is_some() && epoch <= current.label_epoch {
                    return Err(refused(
                        barcode,
                        format!(
                            "label epoch {epoch} does not increase on the present epoch {}; \
                             relabel with epoch {}",
                            current.label_epoch,
                            current.label_epoch + 1
                        ),
                    ));
                }
                let live: i64 = sqlx::query_scalar(
                    "SELECT COUNT(*) FROM containers WHERE barcode = $1 AND state <> 'dead'",
                )
                .bind(barcode)
                .fetch_one(&mut *tx)
                .await
                .ctx(OP)?;
                if live > 0 {
                    return Err(refused(
                        barcode,
                        format!(
                            "it holds {live} live containers that relabelling would destroy; \
                             repack it and mark them dead first"
                        ),
                    ));
                }
                let other: Option<String> = sqlx::query_scalar(
                    "SELECT barcode FROM cartridges WHERE cartridge_uuid = $1 AND barcode <> $2",
                )
                .bind(uuid)
                .bind(barcode)
                .fetch_optional(&mut *tx)
                .await
                .ctx(OP)?;
                if let Some(other) = other {
                    return Err(refused(
                        barcode,
                        format!(
                            "label UUID {uuid} already belongs to cartridge {other}; use a new UUID"
                        ),
                    ));
                }
                sqlx::query(
                    "UPDATE cartridges SET pool = $1, cartridge_uuid = $2, label_epoch = $3, \
                     state = 'active', eod_block = $4, next_file = $5, used_bytes = 0, \
                     state_reason = 'labelled', state_by = $7, state_unix = $8 \
                     WHERE barcode = $6",
                )
                .bind(pool)
                .bind(uuid)
                .bind(epoch_db)
                .bind(to_db("eod_block", LABELLED_EOD_BLOCK)?)
                .bind(to_db("next_file", FIRST_CONTAINER_FILE)?)
                .bind(barcode)
                .bind(REEL)
                .bind(now_unix())
                .execute(&mut *tx)
                .await
                .ctx(OP)?;
            }
        });
        Ok(())
    }

    /// Record where end of data is after a barrier or a recovery.
    ///
    /// Refused if it would put end of data at or before the last block, or `next_file` at or
    /// before the file, of a durable or verified container: the next write would overwrite
    /// acknowledged data. Mark such containers dead first if the tape really lost them.
    pub async fn set_eod(
        &self,
        barcode: &str,
        eod_block: u64,
        next_file: u64,
        used_bytes: u64,
    ) -> Result<()> {
        const OP: &str = "set_eod";
        let eod = to_db("eod_block", eod_block)?;
        let file = to_db("next_file", next_file)?;
        let used = to_db("used_bytes", used_bytes)?;
        let now = now_unix();
        in_write_tx!(&self.backend, OP, |tx| {
            let found = sqlx::query("UPDATE cartridges SET updated_unix = $1 WHERE barcode = $2")
                .bind(now)
                .bind(barcode)
                .execute(&mut *tx)
                .await
                .ctx(OP)?
                .rows_affected();
            if found == 0 {
                return Err(unknown(barcode));
            }
            let (last_block, last_file): (Option<i64>, Option<i64>) = sqlx::query_as(
                "SELECT MAX(last_block), MAX(file_number) FROM containers \
                 WHERE barcode = $1 AND state IN ('durable', 'verified')",
            )
            .bind(barcode)
            .fetch_one(&mut *tx)
            .await
            .ctx(OP)?;
            if let Some(last) = last_block.filter(|&b| eod <= b) {
                return Err(refused(
                    barcode,
                    format!(
                        "end of data at block {eod_block} would be inside durable data (a durable \
                         container ends at block {last}); mark lost containers dead first"
                    ),
                ));
            }
            if let Some(last) = last_file.filter(|&f| file <= f) {
                return Err(refused(
                    barcode,
                    format!(
                        "next file {next_file} would reuse durable file {last}; mark lost \
                         containers dead first"
                    ),
                ));
            }
            sqlx::query(
                "UPDATE cartridges SET eod_block = $1, next_file = $2, used_bytes = $3, \
                 last_written_unix = CASE WHEN eod_block <> $1 THEN $5 ELSE last_written_unix END \
                 WHERE barcode = $4",
            )
            .bind(eod)
            .bind(file)
            .bind(used)
            .bind(barcode)
            .bind(now_unix())
            .execute(&mut *tx)
            .await
            .ctx(OP)?;
        });
        Ok(())
    }

    /// An Active, labelled cartridge of `pool`, not in `exclude`, not WORM unless `worm_ok`,
    /// with room for `needed` bytes ([`Cartridge::has_room`]: the write's first object, as
    /// [`crate::session::space::room_needed`] counts it): the fullest first (fill tapes before
    /// starting new ones), then by barcode.
    pub async fn writable_cartridge(
        &self,
        pool: &str,
        exclude: &[String],
        worm_ok: bool,
        needed: u64,
    ) -> Result<Option<Cartridge>> {
        const OP: &str = "writable_cartridge";
        let needed = i64::try_from(needed).unwrap_or(i64::MAX);
        let row: Option<CartridgeRow> = on_pool!(&self.backend, |db| {
            let mut qb = QueryBuilder::new(concat!(
                "SELECT ",
                cartridge_columns!(),
                " FROM cartridges WHERE state = 'active' AND cartridge_uuid IS NOT NULL AND pool = "
            ));
            qb.push_bind(pool.to_string());
            if !worm_ok {
                qb.push(" AND worm = FALSE");
            }
            // Capacity 0 is unknown: early warning decides there.
            qb.push(" AND (capacity_bytes = 0 OR capacity_bytes - used_bytes >= ");
            qb.push_bind(needed);
            qb.push(")");
            if !exclude.is_empty() {
                qb.push(" AND barcode NOT IN (");
                let mut list = qb.separated(", ");
                for b in exclude {
                    list.push_bind(b.clone());
                }
                qb.push(")");
            }
            qb.push(" ORDER BY used_bytes DESC, barcode LIMIT 1");
            qb.build_query_as().fetch_optional(db).await.ctx(OP)?
        });
        row.map(Cartridge::try_from).transpose()
    }

    /// Calibrated cartridges still in state New: the spares intake keeps ready, by barcode.
    pub async fn spare_cartridges(&self) -> Result<Vec<Cartridge>> {
        const OP: &str = "spare_cartridges";
        let rows: Vec<CartridgeRow> = on_pool!(&self.backend, |pool| {
            sqlx::query_as(concat!(
                "SELECT ",
                cartridge_columns!(),
                " FROM cartridges WHERE state = 'new' AND calibrated = TRUE ORDER BY barcode"
            ))
            .fetch_all(pool)
            .await
            .ctx(OP)?
        });
        rows_to_cartridges(rows)
    }
}

fn unknown(barcode: &str) -> CatalogueError {
    CatalogueError::UnknownCartridge {
        barcode: shorten(barcode),
    }
}

fn refused(barcode: &str, reason: impl Into<String>) -> CatalogueError {
    CatalogueError::CartridgeRefused {
        barcode: shorten(barcode),
        reason: reason.into(),
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
        cartridges_are_added_once_and_listed,
        labelling_sets_end_of_data_and_guards_live_data,
        state_changes_are_checked,
        counters_and_unknown_cartridges,
        end_of_data_never_moves_over_durable_data,
        writable_cartridge_fills_the_fullest_first,
        writable_cartridge_has_room_for_the_first_object,
        capacities_are_recorded_and_the_largest_found,
    );

    async fn capacities_are_recorded_and_the_largest_found(db: &TestCatalogue) -> TestResult {
        let c = cat(db);
        c.ensure_pool("p").await?;
        assert_eq!(c.largest_capacity("p").await?, None);
        c.add_cartridge("A1", false, 0).await?;
        c.add_cartridge("W1", true, 0).await?;
        assert_eq!(c.largest_capacity("p").await?, None);
        c.set_capacity("W1", 900).await?;
        // A WORM cartridge is never picked for writing.
        assert_eq!(c.largest_capacity("p").await?, None);
        c.set_capacity("A1", 500).await?;
        assert_eq!(
            c.cartridge("A1").await?.ok_or("missing")?.capacity_bytes,
            500
        );
        assert_eq!(c.largest_capacity("p").await?, Some(500));
        c.set_labelled("A1", "p", Uuid::new_v4(), 1).await?;
        c.add_cartridge("B1", false, 0).await?;
        c.set_labelled("B1", "p", Uuid::new_v4(), 1).await?;
        c.set_capacity("B1", 700).await?;
        assert_eq!(c.largest_capacity("p").await?, Some(700));
        assert_eq!(c.largest_capacity("other").await?, None);
        let e = c.set_capacity("NOPE", 1).await.unwrap_err();
        assert!(matches!(e, CatalogueError::UnknownCartridge { .. }), "{e}");
        Ok(())
    }

    #[test]
    fn state_names_round_trip() {
        for s in CartridgeState::ALL {
            assert_eq!(s.as_str().parse::<CartridgeState>().unwrap(), s);
            assert_eq!(
                serde_json::to_value(s).unwrap(),
                serde_json::Value::String(s.to_string())
            );
        }
        let e = "Active".parse::<CartridgeState>().unwrap_err();
        assert!(e.to_string().contains("expected one of"), "{e}");
    }

    #[test]
    fn barcodes_are_checked() {
        assert!(validate_barcode("A00001L9").is_ok());
        for bad in ["", "A0001 L9", "tab\t", &"X".repeat(33), "ÄÖ0001"] {
            assert!(validate_barcode(bad).is_err(), "{bad:?}");
        }
    }

    async fn cartridges_are_added_once_and_listed(db: &TestCatalogue) -> TestResult {
        let c = cat(db);
        assert!(
            c.add_cartridge("B00002L9", true, 18_000_000_000_000)
                .await?
        );
        assert!(
            c.add_cartridge("A00001L9", false, 12_000_000_000_000)
                .await?
        );
        // Known: no-op, the first facts stay.
        assert!(!c.add_cartridge("A00001L9", true, 1).await?);
        let a = c.cartridge("A00001L9").await?.ok_or("missing")?;
        assert_eq!(
            a,
            Cartridge {
                barcode: "A00001L9".into(),
                pool: None,
                state: CartridgeState::New,
                worm: false,
                capacity_bytes: 12_000_000_000_000,
                used_bytes: 0,
                eod_block: 0,
                next_file: 0,
                calibrated: false,
                mount_count: 0,
                label_epoch: 0,
                cartridge_uuid: None,
                state_reason: String::new(),
                state_by: String::new(),
                state_unix: 0,
                last_mounted_unix: 0,
                last_written_unix: 0,
                last_read_unix: 0,
                label_unchecked_unix: 0,
            }
        );
        assert!(c.cartridge("B00002L9").await?.ok_or("missing")?.worm);
        assert_eq!(c.cartridge("NOPE").await?, None);
        let all: Vec<String> = c
            .cartridges()
            .await?
            .into_iter()
            .map(|c| c.barcode)
            .collect();
        assert_eq!(all, ["A00001L9", "B00002L9"]);
        let e = c.add_cartridge("bad code", false, 1).await.unwrap_err();
        assert!(
            matches!(
                e,
                CatalogueError::InvalidInput {
                    what: "barcode",
                    ..
                }
            ),
            "{e}"
        );
        let e = c.add_cartridge("C1", false, u64::MAX).await.unwrap_err();
        assert!(matches!(e, CatalogueError::OutOfRange { .. }), "{e}");
        Ok(())
    }

    async fn labelling_sets_end_of_data_and_guards_live_data(db: &TestCatalogue) -> TestResult {
        let c = cat(db);
        c.add_cartridge("L1", false, 1000).await?;
        let u1 = Uuid::new_v4();
        let e = c.set_labelled("L1", "nopool", u1, 1).await.unwrap_err();
        assert!(matches!(e, CatalogueError::UnknownPool { .. }), "{e}");
        c.ensure_pool("p").await?;
        c.ensure_pool("q").await?;
        let e = c.set_labelled("NOPE", "p", u1, 1).await.unwrap_err();
        assert!(matches!(e, CatalogueError::UnknownCartridge { .. }), "{e}");
        c.set_labelled("L1", "p", u1, 1).await?;
        let l = c.cartridge("L1").await?.ok_or("missing")?;
        assert_eq!(l.state, CartridgeState::Active);
        assert_eq!(l.pool.as_deref(), Some("p"));
        assert_eq!(l.cartridge_uuid, Some(u1));
        assert_eq!(
            (l.label_epoch, l.eod_block, l.next_file, l.used_bytes),
            (1, 2, 1, 0)
        );

        // Data on it: relabelling is refused; the same label again is a no-op.
        let id =
            container_with(c, "L1", &[copy("k", 1, 0, 10, 1)], ContainerState::Durable).await?;
        let before = c.cartridge("L1").await?;
        c.set_labelled("L1", "p", u1, 1).await?;
        assert_eq!(c.cartridge("L1").await?, before);
        let e = c
            .set_labelled("L1", "q", Uuid::new_v4(), 2)
            .await
            .unwrap_err();
        assert!(e.to_string().contains("live containers"), "{e}");
        // Epochs only increase.
        let e = c
            .set_labelled("L1", "q", Uuid::new_v4(), 1)
            .await
            .unwrap_err();
        assert!(e.to_string().contains("does not increase"), "{e}");
        // Once its data is dead, it can be relabelled (recycled), and end of data restarts.
        c.set_container_state(&[id], ContainerState::Dead).await?;
        let u2 = Uuid::new_v4();
        c.set_labelled("L1", "q", u2, 2).await?;
        let l = c.cartridge("L1").await?.ok_or("missing")?;
        assert_eq!(
            (
                l.pool.as_deref(),
                l.cartridge_uuid,
                l.label_epoch,
                l.eod_block,
                l.next_file
            ),
            (Some("q"), Some(u2), 2, 2, 1)
        );

        // A UUID belongs to one cartridge.
        c.add_cartridge("L2", false, 1000).await?;
        let e = c.set_labelled("L2", "p", u2, 1).await.unwrap_err();
        assert!(
            e.to_string().contains("already belongs to cartridge L1"),
            "{e}"
        );

        // WORM: labelled once, never again.
        c.add_cartridge("W1", true, 1000).await?;
        c.set_labelled("W1", "p", Uuid::new_v4(), 1).await?;
        let e = c
            .set_labelled("W1", "p", Uuid::new_v4(), 2)
            .await
            .unwrap_err();
        assert!(e.to_string().contains("WORM"), "{e}");
        Ok(())
    }

    async fn state_changes_are_checked(db: &TestCatalogue) -> TestResult {
        let c = cat(db);
        c.add_cartridge("S1", false, 1000).await?;
        let e = c
            .set_cartridge_state("S1", CartridgeState::Active)
            .await
            .unwrap_err();
        assert!(e.to_string().contains("never labelled"), "{e}");
        assert_eq!(
            c.cartridge("S1").await?.ok_or("missing")?.state,
            CartridgeState::New
        );
        c.set_cartridge_state("S1", CartridgeState::Disabled)
            .await?;
        assert_eq!(
            c.cartridge("S1").await?.ok_or("missing")?.state,
            CartridgeState::Disabled
        );
        let e = c
            .set_cartridge_state("NOPE", CartridgeState::Full)
            .await
            .unwrap_err();
        assert!(matches!(e, CatalogueError::UnknownCartridge { .. }), "{e}");

        labelled(c, "S2", "p").await?;
        container_with(c, "S2", &[copy("k", 1, 0, 10, 1)], ContainerState::Durable).await?;
        for s in [
            CartridgeState::Full,
            CartridgeState::Disabled,
            CartridgeState::Active,
            CartridgeState::Exported,
        ] {
            c.set_cartridge_state("S2", s).await?;
            assert_eq!(c.cartridge("S2").await?.ok_or("missing")?.state, s);
        }
        let e = c
            .set_cartridge_state("S2", CartridgeState::New)
            .await
            .unwrap_err();
        assert!(e.to_string().contains("live containers"), "{e}");
        // reel's own `full` (a write that hit early warning) leaves an operator's
        // out-of-service state and reason alone; the operator's own change applies.
        for out in [CartridgeState::Disabled, CartridgeState::Broken] {
            c.set_cartridge_state_noted("S2", out, "leader pin", "ops")
                .await?;
            c.set_cartridge_state("S2", CartridgeState::Full).await?;
            let now = c.cartridge("S2").await?.ok_or("missing")?;
            assert_eq!(
                (now.state, now.state_reason.as_str(), now.state_by.as_str()),
                (out, "leader pin", "ops")
            );
        }
        c.set_cartridge_state_noted("S2", CartridgeState::Full, "checked", "ops")
            .await?;
        assert_eq!(
            c.cartridge("S2").await?.ok_or("missing")?.state,
            CartridgeState::Full
        );
        Ok(())
    }

    async fn counters_and_unknown_cartridges(db: &TestCatalogue) -> TestResult {
        let c = cat(db);
        c.add_cartridge("M1", false, 1000).await?;
        c.add_mount("M1").await?;
        c.add_mount("M1").await?;
        c.set_calibrated("M1").await?;
        let m = c.cartridge("M1").await?.ok_or("missing")?;
        assert_eq!((m.mount_count, m.calibrated), (2, true));
        assert_eq!(m.last_read_unix, 0, "never read yet");
        c.note_read("M1").await?;
        assert!(c.cartridge("M1").await?.ok_or("missing")?.last_read_unix > 0);
        assert!(matches!(
            c.note_read("NOPE").await,
            Err(CatalogueError::UnknownCartridge { .. })
        ));
        assert!(matches!(
            c.add_mount("NOPE").await,
            Err(CatalogueError::UnknownCartridge { .. })
        ));
        assert!(matches!(
            c.set_calibrated("NOPE").await,
            Err(CatalogueError::UnknownCartridge { .. })
        ));
        assert!(matches!(
            c.set_eod("NOPE", 5, 2, 0).await,
            Err(CatalogueError::UnknownCartridge { .. })
        ));

        // Spares: calibrated and still New.
        c.add_cartridge("M0", false, 1000).await?;
        c.add_cartridge("M2", false, 1000).await?;
        c.set_calibrated("M2").await?;
        labelled(c, "M3", "p").await?;
        c.set_calibrated("M3").await?;
        let spares: Vec<String> = c
            .spare_cartridges()
            .await?
            .into_iter()
            .map(|c| c.barcode)
            .collect();
        assert_eq!(spares, ["M1", "M2"]);
        Ok(())
    }

    async fn end_of_data_never_moves_over_durable_data(db: &TestCatalogue) -> TestResult {
        let c = cat(db);
        labelled(c, "E1", "p").await?;
        c.set_eod("E1", 40, 3, 123).await?;
        let e1 = c.cartridge("E1").await?.ok_or("missing")?;
        assert_eq!((e1.eod_block, e1.next_file, e1.used_bytes), (40, 3, 123));
        // With no durable data it may move back (a recovery found the tape shorter).
        c.set_eod("E1", 2, 1, 0).await?;
        let id =
            container_with(c, "E1", &[copy("k", 1, 0, 10, 1)], ContainerState::Durable).await?;
        let k = c.container(id).await?.ok_or("missing")?;
        let last = k.last_block.ok_or("not closed")?;
        let e = c.set_eod("E1", last, 5, 0).await.unwrap_err();
        assert!(e.to_string().contains("inside durable data"), "{e}");
        let e = c
            .set_eod("E1", last + 2, k.file_number, 0)
            .await
            .unwrap_err();
        assert!(e.to_string().contains("would reuse durable file"), "{e}");
        // Once the container is known lost (dead), end of data may move back over it.
        c.set_container_state(&[id], ContainerState::Dead).await?;
        c.set_eod("E1", k.first_block, k.file_number, 0).await?;
        Ok(())
    }

    async fn writable_cartridge_fills_the_fullest_first(db: &TestCatalogue) -> TestResult {
        let c = cat(db);
        assert_eq!(c.writable_cartridge("p", &[], true, 0).await?, None);
        for b in ["W01", "W02", "W03", "W04", "W05"] {
            labelled(c, b, "p").await?;
        }
        labelled(c, "X01", "other").await?;
        c.set_eod("W01", 10, 2, 100).await?;
        c.set_eod("W02", 10, 2, 300).await?;
        c.set_eod("W03", 10, 2, 200).await?;
        c.set_eod("X01", 10, 2, 900).await?;
        c.set_cartridge_state("W02", CartridgeState::Full).await?;
        // W04 and W05: used 0; W05 is WORM.
        c.add_cartridge("W06", true, 1000).await?;
        c.set_labelled("W06", "p", Uuid::new_v4(), 1).await?;
        c.set_eod("W06", 10, 2, 999).await?;
        c.add_cartridge("W07", false, 1000).await?; // unlabelled, New

        let pick = |ex: &[&str], worm_ok: bool| {
            let ex: Vec<String> = ex.iter().map(|s| s.to_string()).collect();
            async move {
                c.writable_cartridge("p", &ex, worm_ok, 0)
                    .await
                    .map(|o| o.map(|c| c.barcode))
            }
        };
        assert_eq!(pick(&[], false).await?.as_deref(), Some("W03"));
        assert_eq!(pick(&[], true).await?.as_deref(), Some("W06"));
        assert_eq!(pick(&["W03"], false).await?.as_deref(), Some("W01"));
        assert_eq!(pick(&["W03", "W01"], false).await?.as_deref(), Some("W04"));
        assert_eq!(pick(&["W03", "W01", "W04", "W05"], false).await?, None);
        assert_eq!(c.writable_cartridge("nopool", &[], true, 0).await?, None);
        Ok(())
    }

    async fn writable_cartridge_has_room_for_the_first_object(db: &TestCatalogue) -> TestResult {
        let c = cat(db);
        // R1: 1000 of which 900 used (100 left); R2: 1000 of which 500 used (500 left);
        // R3: capacity unknown (0), 950 used; R4: 1000, empty.
        c.ensure_pool("p").await?;
        for (b, cap, used) in [
            ("R1", 1000, 900),
            ("R2", 1000, 500),
            ("R3", 0, 950),
            ("R4", 1000, 0),
        ] {
            c.add_cartridge(b, false, cap).await?;
            c.set_labelled(b, "p", Uuid::new_v4(), 1).await?;
            c.set_eod(b, 10, 2, used).await?;
        }
        let pick = |ex: &[&str], needed: u64| {
            let ex: Vec<String> = ex.iter().map(|s| s.to_string()).collect();
            async move {
                c.writable_cartridge("p", &ex, false, needed)
                    .await
                    .map(|o| o.map(|c| c.barcode))
            }
        };
        // The fullest first among those with room; unknown capacity always has room.
        assert_eq!(pick(&[], 0).await?.as_deref(), Some("R3"));
        assert_eq!(pick(&["R3"], 100).await?.as_deref(), Some("R1"));
        assert_eq!(pick(&["R3"], 101).await?.as_deref(), Some("R2"));
        assert_eq!(pick(&["R3"], 500).await?.as_deref(), Some("R2"));
        assert_eq!(pick(&["R3"], 501).await?.as_deref(), Some("R4"));
        assert_eq!(pick(&["R3"], 1000).await?.as_deref(), Some("R4"));
        assert_eq!(pick(&["R3"], 1001).await?, None);
        assert_eq!(pick(&[], u64::MAX).await?.as_deref(), Some("R3"));
        // The same rule as Cartridge::has_room.
        for b in ["R1", "R2", "R3", "R4"] {
            let cart = c.cartridge(b).await?.ok_or("missing")?;
            for needed in [0, 100, 101, 500, 501, 1000, 1001] {
                let chosen = pick(
                    &["R1", "R2", "R3", "R4"]
                        .iter()
                        .copied()
                        .filter(|x| *x != b)
                        .collect::<Vec<_>>(),
                    needed,
                )
                .await?;
                assert_eq!(chosen.is_some(), cart.has_room(needed), "{b} {needed}");
            }
        }
        Ok(())
    }
}
