//! Containers: one tape file each (header record, data records, footer, filemark), created
//! `pending`, then `durable` after a synchronous barrier, `verified` after a read-back, or `dead`.

use std::collections::BTreeSet;
use std::fmt;
use std::str::FromStr;

use serde::{Deserialize, Serialize};
use sqlx::QueryBuilder;
use uuid::Uuid;

use super::Catalogue;
use super::backend::{Backend, from_db, in_write_tx, now_unix, on_pool, sha_from_db, to_db};
use super::error::{CatalogueError, DbContext, Result, shorten};
use super::writer_lease::check_writer;

/// Where a container is in its life. The only moves are
/// pending → durable → verified, pending → verified (read back before a barrier was recorded,
/// as a rebuild does), and any state → dead; durable and verified need a closed container.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum ContainerState {
    /// Being written, or written but not yet covered by a synchronous barrier: reports nothing.
    Pending,
    /// Covered by a synchronous barrier: its objects are archived.
    Durable,
    /// Read back and checked after it became durable.
    Verified,
    /// Dead space on tape (crash tail, failed verify, lost): reports nothing, never comes back.
    Dead,
}

impl ContainerState {
    /// Every state, in declaration order.
    pub const ALL: [ContainerState; 4] = [
        ContainerState::Pending,
        ContainerState::Durable,
        ContainerState::Verified,
        ContainerState::Dead,
    ];

    /// The lower-case name stored in the catalogue and shown to operators.
    pub fn as_str(self) -> &'static str {
        match self {
            ContainerState::Pending => "pending",
            ContainerState::Durable => "durable",
            ContainerState::Verified => "verified",
            ContainerState::Dead => "dead",
        }
    }

    /// Whether objects in a container in this state are reported as archived.
    pub fn is_visible(self) -> bool {
        matches!(self, ContainerState::Durable | ContainerState::Verified)
    }

    /// The states a container may be in to move to `self` (moving to its own state is a no-op).
    fn predecessors(self) -> &'static [&'static str] {
        match self {
            ContainerState::Pending => &["pending"],
            ContainerState::Durable => &["pending", "durable"],
            ContainerState::Verified => &["pending", "durable", "verified"],
            ContainerState::Dead => &["pending", "durable", "verified", "dead"],
        }
    }
}

impl fmt::Display for ContainerState {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

impl FromStr for ContainerState {
    type Err = CatalogueError;

    fn from_str(s: &str) -> Result<Self> {
        ContainerState::ALL
            .into_iter()
            .find(|st| st.as_str() == s)
            .ok_or_else(|| CatalogueError::UnknownState {
                kind: "container",
                value: shorten(s),
                expected: "pending, durable, verified, dead",
            })
    }
}

/// One container as the catalogue knows it.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct Container {
    /// Catalogue id.
    pub id: i64,
    /// The UUID written in its header.
    pub uuid: Uuid,
    /// The cartridge it is on.
    pub barcode: String,
    /// Its tape file number.
    pub file_number: u64,
    /// Block number of its header record.
    pub first_block: u64,
    /// Block number of its last record (the footer's last); None until closed.
    pub last_block: Option<u64>,
    /// Length of its data stream (the data records concatenated); 0 until closed.
    pub bytes: u64,
    /// Size of its data records.
    pub record_size: u32,
    /// SHA-256 of its data stream; None until closed.
    #[serde(serialize_with = "super::object::serialize_opt_sha")]
    pub sha256: Option<[u8; 32]>,
    /// Where it is in its life.
    pub state: ContainerState,
    /// When it was created, seconds since the Unix epoch.
    pub created_unix: u64,
}

/// The columns of [`ContainerRow`], in order.
macro_rules! container_columns {
    () => {
        "id, uuid, barcode, file_number, first_block, last_block, bytes, record_size, sha256, \
         state, created_unix"
    };
}

/// A `containers` row as stored.
#[derive(sqlx::FromRow)]
struct ContainerRow {
    id: i64,
    uuid: Uuid,
    barcode: String,
    file_number: i64,
    first_block: i64,
    last_block: Option<i64>,
    bytes: i64,
    record_size: i32,
    sha256: Option<Vec<u8>>,
    state: String,
    created_unix: i64,
}

impl TryFrom<ContainerRow> for Container {
    type Error = CatalogueError;

    fn try_from(r: ContainerRow) -> Result<Container> {
        Ok(Container {
            state: r.state.parse().map_err(|_| CatalogueError::Corrupt {
                what: format!("container {} has state {:?}", r.id, r.state),
            })?,
            id: r.id,
            uuid: r.uuid,
            barcode: r.barcode,
            file_number: from_db("container file_number", r.file_number)?,
            first_block: from_db("container first_block", r.first_block)?,
            last_block: r
                .last_block
                .map(|b| from_db("container last_block", b))
                .transpose()?,
            bytes: from_db("container bytes", r.bytes)?,
            record_size: u32::try_from(r.record_size).map_err(|_| CatalogueError::Corrupt {
                what: format!("container {} has record size {}", r.id, r.record_size),
            })?,
            sha256: r
                .sha256
                .map(|h| sha_from_db("container sha256", h))
                .transpose()?,
            created_unix: from_db("container created_unix", r.created_unix)?,
        })
    }
}

fn rows_to_containers(rows: Vec<ContainerRow>) -> Result<Vec<Container>> {
    rows.into_iter().map(Container::try_from).collect()
}

/// Ids per `IN (…)` list when changing container states.
const IDS_PER_STATEMENT: usize = 500;

impl Catalogue {
    /// Record a new container, Pending, before its first record is written. Returns its id.
    ///
    /// Refused unless the cartridge is Active and labelled, and the container starts at or after
    /// the cartridge's recorded end of data, after every live container on it (file number and
    /// block), so that nothing is ever written except at end of data.
    pub async fn create_container(
        &self,
        uuid: Uuid,
        barcode: &str,
        file_number: u64,
        first_block: u64,
        record_size: u32,
    ) -> Result<i64> {
        self.insert_container(uuid, barcode, file_number, first_block, record_size, false)
            .await
    }

    /// Record, Pending, a container `catalog rebuild` found on the tape (close it with
    /// [`Catalogue::close_container`] next). Unlike [`Catalogue::create_container`] nothing is
    /// written: the cartridge may be in any state and the container anywhere on it, but it
    /// must not lie inside a live container the catalogue already records there.
    pub async fn record_found_container(
        &self,
        uuid: Uuid,
        barcode: &str,
        file_number: u64,
        first_block: u64,
        record_size: u32,
    ) -> Result<i64> {
        self.insert_container(uuid, barcode, file_number, first_block, record_size, true)
            .await
    }

    async fn insert_container(
        &self,
        uuid: Uuid,
        barcode: &str,
        file_number: u64,
        first_block: u64,
        record_size: u32,
        found_on_tape: bool,
    ) -> Result<i64> {
        const OP: &str = "create_container";
        let file_db = to_db("file_number", file_number)?;
        let block_db = to_db("first_block", first_block)?;
        let record_db = i32::try_from(record_size)
            .ok()
            .filter(|&r| r > 0)
            .ok_or_else(|| CatalogueError::InvalidInput {
                what: "record size",
                value: record_size.to_string(),
                reason: "it must be between 1 and 2^31-1 bytes".into(),
            })?;
        let now = now_unix();
        let refused = |reason: String| CatalogueError::CartridgeRefused {
            barcode: shorten(barcode),
            reason,
        };
        let id = in_write_tx!(&self.backend, OP, |tx| {
            let found = sqlx::query("UPDATE cartridges SET updated_unix = $1 WHERE barcode = $2")
                .bind(now)
                .bind(barcode)
                .execute(&mut *tx)
                .await
                .ctx(OP)?
                .rows_affected();
            if found == 0 {
                return Err(CatalogueError::UnknownCartridge {
                    barcode: shorten(barcode),
                });
            }
            let (state, labelled, eod, next_file): (String, bool, i64, i64) = sqlx::query_as(
                "SELECT state, cartridge_uuid IS NOT NULL, eod_block, next_file \
                 FROM cartridges WHERE barcode = $1",
            )
            .bind(barcode)
            .fetch_one(&mut *tx)
            .await
            .ctx(OP)?;
            if found_on_tape {
                let inside: i64 = sqlx::query_scalar(
                    "SELECT COUNT(*) FROM containers WHERE barcode = $1 AND state <> 'dead' \
                     AND (file_number = $2 OR (first_block <= $3 AND COALESCE(last_block, first_block) >= $3))",
                )
                .bind(barcode)
                .bind(file_db)
                .bind(block_db)
                .fetch_one(&mut *tx)
                .await
                .ctx(OP)?;
                if inside > 0 {
                    return Err(refused(format!(
                        "a container found at file {file_number}, block {first_block} lies inside a live \
                         container the catalogue records there; mark that one dead first if the tape is right"
                    )));
                }
            } else if state != "active" || !labelled {
                return Err(refused(format!(
                    "it is {state}{}; containers are written only to active, labelled cartridges",
                    if labelled { "" } else { " and unlabelled" }
                )));
            }
            if !found_on_tape && (block_db < eod || file_db < next_file) {
                return Err(refused(format!(
                    "a container at file {file_number}, block {first_block} would be before end \
                     of data (file {next_file}, block {eod}); write only at end of data"
                )));
            }
            let (last_file, last_block): (Option<i64>, Option<i64>) = sqlx::query_as(
                "SELECT MAX(file_number), MAX(COALESCE(last_block, first_block)) FROM containers \
                 WHERE barcode = $1 AND state <> 'dead'",
            )
            .bind(barcode)
            .fetch_one(&mut *tx)
            .await
            .ctx(OP)?;
            if !found_on_tape
                && (last_file.is_some_and(|f| file_db <= f)
                    || last_block.is_some_and(|b| block_db <= b))
            {
                return Err(refused(format!(
                    "a container at file {file_number}, block {first_block} would not follow the \
                     live container ending at file {}, block {}; write only at end of data",
                    last_file.unwrap_or_default(),
                    last_block.unwrap_or_default()
                )));
            }
            let taken: i64 = sqlx::query_scalar("SELECT COUNT(*) FROM containers WHERE uuid = $1")
                .bind(uuid)
                .fetch_one(&mut *tx)
                .await
                .ctx(OP)?;
            if taken > 0 {
                return Err(CatalogueError::InvalidInput {
                    what: "container UUID",
                    value: uuid.to_string(),
                    reason: "another container has it; give each container a new UUID".into(),
                });
            }
            let id: i64 = sqlx::query_scalar(
                "INSERT INTO containers (uuid, barcode, file_number, first_block, record_size, \
                 state, created_unix, updated_unix) \
                 VALUES ($1, $2, $3, $4, $5, 'pending', $6, $6) RETURNING id",
            )
            .bind(uuid)
            .bind(barcode)
            .bind(file_db)
            .bind(block_db)
            .bind(record_db)
            .bind(now)
            .fetch_one(&mut *tx)
            .await
            .ctx(OP)?;
            id
        });
        Ok(id)
    }

    /// Set the state of containers, all or none.
    ///
    /// Allowed: pending → durable / verified (the container must be closed), durable →
    /// verified, any → dead, and a state to itself. Anything else, or an unknown id, refuses the
    /// whole call and changes nothing. Durable and verified are fenced by the handle's writer
    /// lease ([`Catalogue::fenced_by`]); dead is not.
    pub async fn set_container_state(&self, ids: &[i64], state: ContainerState) -> Result<()> {
        const OP: &str = "set_container_state";
        let ids: Vec<i64> = ids
            .iter()
            .copied()
            .collect::<BTreeSet<_>>()
            .into_iter()
            .collect();
        if ids.is_empty() {
            return Ok(());
        }
        let now = now_unix();
        let needs_closed = matches!(state, ContainerState::Durable | ContainerState::Verified);
        let for_share = matches!(self.backend, Backend::Postgres(_));
        in_write_tx!(&self.backend, OP, |tx| {
            // Making copies count is the writer's to do only while it holds its lease; a
            // death is recorded whoever records it.
            if needs_closed {
                check_writer!(self, tx, OP, for_share);
            }
            for chunk in ids.chunks(IDS_PER_STATEMENT) {
                let mut qb = QueryBuilder::new("UPDATE containers SET state = ");
                qb.push_bind(state.as_str());
                qb.push(", updated_unix = ");
                qb.push_bind(now);
                qb.push(" WHERE id IN (");
                let mut list = qb.separated(", ");
                for id in chunk {
                    list.push_bind(*id);
                }
                qb.push(") AND state IN (");
                let mut list = qb.separated(", ");
                for s in state.predecessors() {
                    list.push_bind(*s);
                }
                qb.push(")");
                if needs_closed {
                    qb.push(" AND last_block IS NOT NULL");
                }
                let changed = qb.build().execute(&mut *tx).await.ctx(OP)?.rows_affected();
                if changed != chunk.len() as u64 {
                    // Find out which one refused, for the message; the transaction rolls back.
                    let mut qb = QueryBuilder::new(concat!(
                        "SELECT ",
                        container_columns!(),
                        " FROM containers WHERE id IN ("
                    ));
                    let mut list = qb.separated(", ");
                    for id in chunk {
                        list.push_bind(*id);
                    }
                    qb.push(")");
                    let rows: Vec<ContainerRow> =
                        qb.build_query_as().fetch_all(&mut *tx).await.ctx(OP)?;
                    let found = rows_to_containers(rows)?;
                    return Err(transition_error(chunk, &found, state));
                }
            }
        });
        Ok(())
    }

    /// The container with this id, if known.
    pub async fn container(&self, id: i64) -> Result<Option<Container>> {
        const OP: &str = "container";
        let row: Option<ContainerRow> = on_pool!(&self.backend, |pool| {
            sqlx::query_as(concat!(
                "SELECT ",
                container_columns!(),
                " FROM containers WHERE id = $1"
            ))
            .bind(id)
            .fetch_optional(pool)
            .await
            .ctx(OP)?
        });
        row.map(Container::try_from).transpose()
    }

    /// Every container on the cartridge, dead ones included, by file number (then id).
    pub async fn containers_on(&self, barcode: &str) -> Result<Vec<Container>> {
        const OP: &str = "containers_on";
        let rows: Vec<ContainerRow> = on_pool!(&self.backend, |pool| {
            sqlx::query_as(concat!(
                "SELECT ",
                container_columns!(),
                " FROM containers WHERE barcode = $1 ORDER BY file_number, id"
            ))
            .bind(barcode)
            .fetch_all(pool)
            .await
            .ctx(OP)?
        });
        rows_to_containers(rows)
    }

    /// Every pending container (what start-up recovery looks at), by cartridge and file number.
    pub async fn pending_containers(&self) -> Result<Vec<Container>> {
        const OP: &str = "pending_containers";
        let rows: Vec<ContainerRow> = on_pool!(&self.backend, |pool| {
            sqlx::query_as(concat!(
                "SELECT ",
                container_columns!(),
                " FROM containers WHERE state = 'pending' ORDER BY barcode, file_number, id"
            ))
            .fetch_all(pool)
            .await
            .ctx(OP)?
        });
        rows_to_containers(rows)
    }

    /// How many object copies the container holds (0 until it is closed).
    pub async fn container_object_count(&self, id: i64) -> Result<u64> {
        const OP: &str = "container_object_count";
        let n: i64 = on_pool!(&self.backend, |pool| {
            sqlx::query_scalar("SELECT COUNT(*) FROM copies WHERE container_id = $1")
                .bind(id)
                .fetch_one(pool)
                .await
                .ctx(OP)?
        });
        from_db("copy count", n)
    }

    /// The objects (key, generation) the container holds copies of, in key order.
    pub async fn container_objects(&self, id: i64) -> Result<Vec<(String, u64)>> {
        const OP: &str = "container_objects";
        let rows: Vec<(String, i64)> = on_pool!(&self.backend, |pool| {
            sqlx::query_as(
                "SELECT o.key, o.generation FROM copies c JOIN objects o ON o.id = c.object_id \
                 WHERE c.container_id = $1 ORDER BY o.key, o.generation",
            )
            .bind(id)
            .fetch_all(pool)
            .await
            .ctx(OP)?
        });
        rows.into_iter()
            .map(|(k, g)| Ok((k, from_db("generation", g)?)))
            .collect()
    }
}

/// The error for the first id in `chunk` that could not move to `to`.
fn transition_error(chunk: &[i64], found: &[Container], to: ContainerState) -> CatalogueError {
    for id in chunk {
        let Some(c) = found.iter().find(|c| c.id == *id) else {
            return CatalogueError::UnknownContainer { id: *id };
        };
        let from = c.state;
        if !to.predecessors().contains(&from.as_str()) {
            let reason = if from == ContainerState::Dead {
                format!("it is dead and can never become {to}; write its objects again")
            } else {
                format!("it cannot go from {from} back to {to}")
            };
            return CatalogueError::ContainerRefused { id: *id, reason };
        }
        if matches!(to, ContainerState::Durable | ContainerState::Verified)
            && c.last_block.is_none()
        {
            return CatalogueError::ContainerRefused {
                id: *id,
                reason: format!("it is not closed, so it cannot be {to}; close it first"),
            };
        }
    }
    CatalogueError::ContainerRefused {
        id: chunk.first().copied().unwrap_or_default(),
        reason: format!("its state changed while moving it to {to}; retry"),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::catalogue::CartridgeState;
    use crate::catalogue::test_support::{
        TestResult, cat, container_with, copy, labelled, on_both_backends, sha,
    };
    use crate::catalogue::testing::TestCatalogue;

    on_both_backends!(
        containers_are_created_only_at_end_of_data,
        state_moves_are_checked_all_or_nothing,
        containers_are_listed_per_cartridge,
    );

    #[test]
    fn state_names_round_trip() {
        for s in ContainerState::ALL {
            assert_eq!(s.as_str().parse::<ContainerState>().unwrap(), s);
            assert_eq!(
                serde_json::to_value(s).unwrap(),
                serde_json::Value::String(s.to_string())
            );
        }
        assert!("DEAD".parse::<ContainerState>().is_err());
        let visible: Vec<_> = ContainerState::ALL
            .into_iter()
            .filter(|s| s.is_visible())
            .collect();
        assert_eq!(visible, [ContainerState::Durable, ContainerState::Verified]);
    }

    async fn containers_are_created_only_at_end_of_data(db: &TestCatalogue) -> TestResult {
        let c = cat(db);
        let e = c
            .create_container(Uuid::new_v4(), "NOPE", 1, 2, 1 << 20)
            .await
            .unwrap_err();
        assert!(matches!(e, CatalogueError::UnknownCartridge { .. }), "{e}");
        c.add_cartridge("C1", false, 1000).await?;
        let e = c
            .create_container(Uuid::new_v4(), "C1", 1, 2, 1 << 20)
            .await
            .unwrap_err();
        assert!(e.to_string().contains("unlabelled"), "{e}");
        labelled(c, "C2", "p").await?;
        let e = c
            .create_container(Uuid::new_v4(), "C2", 1, 2, 0)
            .await
            .unwrap_err();
        assert!(
            matches!(
                e,
                CatalogueError::InvalidInput {
                    what: "record size",
                    ..
                }
            ),
            "{e}"
        );
        // Before end of data (block 2, file 1 after labelling).
        let e = c
            .create_container(Uuid::new_v4(), "C2", 1, 1, 1 << 20)
            .await
            .unwrap_err();
        assert!(e.to_string().contains("before end of data"), "{e}");
        let e = c
            .create_container(Uuid::new_v4(), "C2", 0, 2, 1 << 20)
            .await
            .unwrap_err();
        assert!(e.to_string().contains("before end of data"), "{e}");
        let u = Uuid::new_v4();
        let a = c.create_container(u, "C2", 1, 2, 1 << 20).await?;
        let k = c.container(a).await?.ok_or("missing")?;
        assert_eq!(
            (
                k.uuid,
                k.barcode.as_str(),
                k.file_number,
                k.first_block,
                k.last_block,
                k.bytes,
                k.record_size,
                k.sha256,
                k.state
            ),
            (
                u,
                "C2",
                1,
                2,
                None,
                0,
                1 << 20,
                None,
                ContainerState::Pending
            )
        );
        // Group commit: the next container follows the pending one, before any new end of data.
        let e = c
            .create_container(Uuid::new_v4(), "C2", 1, 9, 1 << 20)
            .await
            .unwrap_err();
        assert!(e.to_string().contains("would not follow"), "{e}");
        let e = c
            .create_container(Uuid::new_v4(), "C2", 2, 2, 1 << 20)
            .await
            .unwrap_err();
        assert!(e.to_string().contains("would not follow"), "{e}");
        c.close_container(a, 10, 5, sha(1), &[copy("k", 1, 0, 5, 1)])
            .await?;
        let e = c
            .create_container(Uuid::new_v4(), "C2", 2, 10, 1 << 20)
            .await
            .unwrap_err();
        assert!(e.to_string().contains("would not follow"), "{e}");
        let b = c
            .create_container(Uuid::new_v4(), "C2", 2, 12, 1 << 20)
            .await?;
        assert!(b > a);
        // UUIDs are unique.
        let e = c
            .create_container(u, "C2", 3, 20, 1 << 20)
            .await
            .unwrap_err();
        assert!(
            matches!(
                e,
                CatalogueError::InvalidInput {
                    what: "container UUID",
                    ..
                }
            ),
            "{e}"
        );
        // After a crash the pending tail is dead; its file number is written again.
        c.set_container_state(&[a, b], ContainerState::Dead).await?;
        let again = c
            .create_container(Uuid::new_v4(), "C2", 1, 2, 1 << 20)
            .await?;
        assert!(again > b);
        // Not on a cartridge that is not active.
        c.set_cartridge_state("C2", CartridgeState::Full).await?;
        let e = c
            .create_container(Uuid::new_v4(), "C2", 5, 50, 1 << 20)
            .await
            .unwrap_err();
        assert!(e.to_string().contains("it is full"), "{e}");
        Ok(())
    }

    async fn state_moves_are_checked_all_or_nothing(db: &TestCatalogue) -> TestResult {
        let c = cat(db);
        labelled(c, "T1", "p").await?;
        let closed =
            container_with(c, "T1", &[copy("a", 1, 0, 4, 1)], ContainerState::Pending).await?;
        let open = c
            .create_container(Uuid::new_v4(), "T1", 2, 100, 1 << 20)
            .await?;
        c.set_container_state(&[], ContainerState::Durable).await?;
        // An open container cannot become durable; the closed one in the same call is unchanged.
        let e = c
            .set_container_state(&[closed, open], ContainerState::Durable)
            .await
            .unwrap_err();
        assert!(
            matches!(e, CatalogueError::ContainerRefused { id, .. } if id == open),
            "{e}"
        );
        assert!(e.to_string().contains("not closed"), "{e}");
        assert_eq!(
            c.container(closed).await?.ok_or("missing")?.state,
            ContainerState::Pending
        );
        let e = c
            .set_container_state(&[closed, 999_999], ContainerState::Durable)
            .await
            .unwrap_err();
        assert!(
            matches!(e, CatalogueError::UnknownContainer { id: 999_999 }),
            "{e}"
        );
        assert_eq!(
            c.container(closed).await?.ok_or("missing")?.state,
            ContainerState::Pending
        );

        // Duplicates in the list are fine; moving to the same state is a no-op.
        c.set_container_state(&[closed, closed], ContainerState::Durable)
            .await?;
        c.set_container_state(&[closed], ContainerState::Durable)
            .await?;
        let e = c
            .set_container_state(&[closed], ContainerState::Pending)
            .await
            .unwrap_err();
        assert!(
            e.to_string().contains("from durable back to pending"),
            "{e}"
        );
        c.set_container_state(&[closed], ContainerState::Verified)
            .await?;
        let e = c
            .set_container_state(&[closed], ContainerState::Durable)
            .await
            .unwrap_err();
        assert!(
            e.to_string().contains("from verified back to durable"),
            "{e}"
        );
        // Dead is final.
        c.set_container_state(&[closed, open], ContainerState::Dead)
            .await?;
        for s in [
            ContainerState::Pending,
            ContainerState::Durable,
            ContainerState::Verified,
        ] {
            let e = c.set_container_state(&[closed], s).await.unwrap_err();
            assert!(
                e.to_string().contains("dead and can never become"),
                "{s}: {e}"
            );
        }
        // A rebuild reads a container back before any barrier: pending → verified.
        let rebuilt =
            container_with(c, "T1", &[copy("b", 1, 0, 4, 2)], ContainerState::Verified).await?;
        assert_eq!(
            c.container(rebuilt).await?.ok_or("missing")?.state,
            ContainerState::Verified
        );

        // Many ids (more than one statement's worth) in one call.
        let mut ids = Vec::new();
        for i in 0..(IDS_PER_STATEMENT as u32 + 20) {
            let key = format!("m{i}");
            ids.push(
                container_with(c, "T1", &[copy(&key, 1, 0, 1, i)], ContainerState::Pending).await?,
            );
        }
        c.set_container_state(&ids, ContainerState::Durable).await?;
        let durable = c
            .containers_on("T1")
            .await?
            .into_iter()
            .filter(|k| k.state == ContainerState::Durable)
            .count();
        assert_eq!(durable, ids.len());
        assert_eq!(c.container_object_count(ids[0]).await?, 1);
        assert_eq!(c.container_object_count(open).await?, 0);
        Ok(())
    }

    async fn containers_are_listed_per_cartridge(db: &TestCatalogue) -> TestResult {
        let c = cat(db);
        labelled(c, "A1", "p").await?;
        labelled(c, "B1", "p").await?;
        let a1 = container_with(c, "A1", &[copy("x", 1, 0, 3, 1)], ContainerState::Durable).await?;
        let b1 = container_with(c, "B1", &[copy("y", 1, 0, 3, 2)], ContainerState::Pending).await?;
        let a2 = container_with(c, "A1", &[copy("z", 1, 0, 3, 3)], ContainerState::Pending).await?;
        c.set_container_state(&[a2], ContainerState::Dead).await?;
        let a3 = container_with(c, "A1", &[copy("z", 1, 0, 3, 3)], ContainerState::Pending).await?;
        let on_a: Vec<(i64, u64)> = c
            .containers_on("A1")
            .await?
            .into_iter()
            .map(|k| (k.id, k.file_number))
            .collect();
        assert_eq!(on_a, [(a1, 1), (a2, 2), (a3, 2)]);
        assert!(c.containers_on("NOPE").await?.is_empty());
        let pending: Vec<i64> = c
            .pending_containers()
            .await?
            .into_iter()
            .map(|k| k.id)
            .collect();
        assert_eq!(pending, [a3, b1]);
        assert_eq!(c.container(-1).await?, None);
        Ok(())
    }
}
