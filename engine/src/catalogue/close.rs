//! Closing a container: its blocks, length, hash, objects and copies, in one transaction with
//! batched statements (a container of 10 000 small objects is a few dozen statements, not
//! 10 000 round trips).

use std::collections::{HashMap, HashSet};

use sqlx::QueryBuilder;

use super::Catalogue;
use super::backend::{Backend, in_write_tx, now_unix, to_db};
use super::error::{CatalogueError, DbContext, Result, shorten};
use super::object::{MetaColumns, NewCopy, validate_key};
use super::writer_lease::check_writer;

/// Rows per multi-row statement on SQLite: 400 objects × 11 values stays far below SQLite's
/// 32 766 bound variables and keeps each statement small.
pub(crate) const ROWS_PER_STATEMENT: usize = 400;

/// Rows per statement on PostgreSQL, where a chunk is bound as one array per column and
/// expanded server-side by `UNNEST` (five parameters whatever the chunk's size): one round trip
/// and one parse per 10 000 rows instead of per 400, with nothing to plan per value.
pub(crate) const PG_ROWS_PER_STATEMENT: usize = 10_000;

/// Statements `close_container` runs for `copies` new objects in chunks of `per_statement`:
/// one update, then per chunk an object insert, an object id look-up (on PostgreSQL only for
/// keys the insert did not add, so none for new objects) and a copy insert.
#[cfg(test)]
pub(crate) fn close_statements(copies: usize, per_statement: usize, look_up: bool) -> usize {
    1 + (2 + usize::from(look_up)) * copies.div_ceil(per_statement)
}

/// Inserting a closing container's objects and copies on one backend's connection, inside the
/// caller's transaction. Returns how many statements it ran.
trait BulkInsert {
    /// Insert the objects (known generations are left as they are and checked against) and
    /// the copies of container `id`.
    async fn insert_copies(
        &mut self,
        id: i64,
        prepared: &[Prepared<'_>],
        now: i64,
    ) -> Result<usize>;
}

const OP_CLOSE: &str = "close_container";

impl BulkInsert for sqlx::SqliteConnection {
    /// Multi-row `VALUES` statements of [`ROWS_PER_STATEMENT`] rows: SQLite runs in-process,
    /// so a statement costs no round trip and its bound variables are capped.
    async fn insert_copies(
        &mut self,
        id: i64,
        prepared: &[Prepared<'_>],
        now: i64,
    ) -> Result<usize> {
        let mut statements = 0;
        for chunk in prepared.chunks(ROWS_PER_STATEMENT) {
            let mut qb = QueryBuilder::new(
                "INSERT INTO objects \
                 (key, generation, size, sha256, created_unix, kind, mode, uid, gid, mtime_ns, flags) ",
            );
            qb.push_values(chunk, |mut row, c| {
                let (kind, mode, uid, gid, mtime_ns, flags) = c.meta.values();
                row.push_bind(c.key.to_string())
                    .push_bind(c.generation)
                    .push_bind(c.size)
                    .push_bind(c.sha256.to_vec())
                    .push_bind(now)
                    .push_bind(kind)
                    .push_bind(mode)
                    .push_bind(uid)
                    .push_bind(gid)
                    .push_bind(mtime_ns)
                    .push_bind(flags);
            });
            qb.push(" ON CONFLICT (key, generation) DO NOTHING");
            qb.build().execute(&mut *self).await.ctx(OP_CLOSE)?;

            let mut qb = QueryBuilder::new(
                "SELECT id, key, generation, size, sha256 FROM objects \
                 WHERE (key, generation) IN (",
            );
            qb.push_values(chunk, |mut row, c| {
                row.push_bind(c.key.to_string()).push_bind(c.generation);
            });
            qb.push(")");
            let found: Vec<ObjectIdRow> = qb
                .build_query_as()
                .fetch_all(&mut *self)
                .await
                .ctx(OP_CLOSE)?;
            let ids = object_ids(found, chunk)?;

            let mut qb = QueryBuilder::new(
                "INSERT INTO copies (object_id, container_id, byte_offset, byte_length) ",
            );
            qb.push_values(chunk.iter().zip(ids), |mut row, (c, object_id)| {
                row.push_bind(object_id)
                    .push_bind(id)
                    .push_bind(c.offset)
                    .push_bind(c.length);
            });
            qb.build().execute(&mut *self).await.ctx(OP_CLOSE)?;
            statements += 3;
        }
        Ok(statements)
    }
}

impl BulkInsert for sqlx::PgConnection {
    /// One array per column, expanded by `UNNEST`, in chunks of [`PG_ROWS_PER_STATEMENT`]. The
    /// objects insert returns the ids of the rows it added; only keys it did not add (a second
    /// copy of a known object, or one another closing container committed while this insert
    /// waited on its key) are looked up, in a statement of their own so that under read
    /// committed it sees that commit. The look-up joins the arrays to `objects` through the
    /// `(key, generation)` index, a nested loop whatever the table's statistics.
    async fn insert_copies(
        &mut self,
        id: i64,
        prepared: &[Prepared<'_>],
        now: i64,
    ) -> Result<usize> {
        let mut statements = 0;
        for chunk in prepared.chunks(PG_ROWS_PER_STATEMENT) {
            let keys: Vec<&str> = chunk.iter().map(|c| c.key).collect();
            let generations: Vec<i64> = chunk.iter().map(|c| c.generation).collect();
            let sizes: Vec<i64> = chunk.iter().map(|c| c.size).collect();
            let hashes: Vec<&[u8]> = chunk.iter().map(|c| c.sha256.as_slice()).collect();
            let metas: Vec<_> = chunk.iter().map(|c| c.meta.values()).collect();
            let kinds: Vec<i64> = metas.iter().map(|m| m.0).collect();
            let modes: Vec<Option<i64>> = metas.iter().map(|m| m.1).collect();
            let uids: Vec<Option<i64>> = metas.iter().map(|m| m.2).collect();
            let gids: Vec<Option<i64>> = metas.iter().map(|m| m.3).collect();
            let mtimes: Vec<Option<i64>> = metas.iter().map(|m| m.4).collect();
            let flags: Vec<Option<i64>> = metas.iter().map(|m| m.5).collect();
            let added: Vec<(i64, String, i64)> = sqlx::query_as(
                "INSERT INTO objects \
                   (key, generation, size, sha256, created_unix, \
                    kind, mode, uid, gid, mtime_ns, flags) \
                 SELECT u.key, u.generation, u.size, u.sha256, $5, \
                        u.kind, u.mode, u.uid, u.gid, u.mtime_ns, u.flags \
                 FROM UNNEST($1::text[], $2::bigint[], $3::bigint[], $4::bytea[], \
                             $6::bigint[], $7::bigint[], $8::bigint[], $9::bigint[], \
                             $10::bigint[], $11::bigint[]) \
                      AS u(key, generation, size, sha256, kind, mode, uid, gid, mtime_ns, flags) \
                 ON CONFLICT (key, generation) DO NOTHING \
                 RETURNING id, key, generation",
            )
            .bind(&keys)
            .bind(&generations)
            .bind(&sizes)
            .bind(&hashes)
            .bind(now)
            .bind(&kinds)
            .bind(&modes)
            .bind(&uids)
            .bind(&gids)
            .bind(&mtimes)
            .bind(&flags)
            .fetch_all(&mut *self)
            .await
            .ctx(OP_CLOSE)?;
            statements += 1;

            // Where each object sits in the chunk (`prepare` refused a key and generation
            // listed twice). Rows the insert added hold this chunk's content by construction:
            // no check.
            let at: HashMap<(&str, i64), usize> = chunk
                .iter()
                .enumerate()
                .map(|(i, c)| ((c.key, c.generation), i))
                .collect();
            let mut ids: Vec<Option<i64>> = vec![None; chunk.len()];
            for (object_id, key, generation) in added {
                if let Some(&i) = at.get(&(key.as_str(), generation)) {
                    ids[i] = Some(object_id);
                }
            }
            let known: Vec<usize> = (0..chunk.len()).filter(|&i| ids[i].is_none()).collect();
            if !known.is_empty() {
                let (known_keys, known_generations): (Vec<&str>, Vec<i64>) = known
                    .iter()
                    .map(|&i| (chunk[i].key, chunk[i].generation))
                    .unzip();
                let found: Vec<ObjectIdRow> = sqlx::query_as(
                    "SELECT o.id, o.key, o.generation, o.size, o.sha256 \
                     FROM UNNEST($1::text[], $2::bigint[]) AS u(key, generation) \
                     JOIN objects o ON o.key = u.key AND o.generation = u.generation",
                )
                .bind(&known_keys)
                .bind(&known_generations)
                .fetch_all(&mut *self)
                .await
                .ctx(OP_CLOSE)?;
                statements += 1;
                let checked = object_ids(found, known.iter().map(|&i| &chunk[i]))?;
                for (&i, object_id) in known.iter().zip(checked) {
                    ids[i] = Some(object_id);
                }
            }
            // Every slot is filled: by the insert, or by `object_ids`, which fails otherwise.
            let ids: Vec<i64> =
                ids.into_iter()
                    .collect::<Option<_>>()
                    .ok_or_else(|| CatalogueError::Corrupt {
                        what: format!("container {id}: an object id missing after its insert"),
                    })?;

            let offsets: Vec<i64> = chunk.iter().map(|c| c.offset).collect();
            let lengths: Vec<i64> = chunk.iter().map(|c| c.length).collect();
            sqlx::query(
                "INSERT INTO copies (object_id, container_id, byte_offset, byte_length) \
                 SELECT u.object_id, $2, u.byte_offset, u.byte_length \
                 FROM UNNEST($1::bigint[], $3::bigint[], $4::bigint[]) \
                      AS u(object_id, byte_offset, byte_length)",
            )
            .bind(&ids)
            .bind(id)
            .bind(&offsets)
            .bind(&lengths)
            .execute(&mut *self)
            .await
            .ctx(OP_CLOSE)?;
            statements += 1;
        }
        Ok(statements)
    }
}

/// A copy checked and converted for the database.
struct Prepared<'a> {
    key: &'a str,
    generation: i64,
    size: i64,
    sha256: &'a [u8; 32],
    offset: i64,
    length: i64,
    meta: MetaColumns,
}

/// Check the copies of container `id` (whose data stream is `bytes` long) before any write.
fn prepare(id: i64, bytes: u64, copies: &[NewCopy]) -> Result<Vec<Prepared<'_>>> {
    let invalid = |c: &NewCopy, reason: String| CatalogueError::InvalidCopy {
        id,
        key: shorten(&c.key),
        generation: c.generation,
        reason,
    };
    let mut seen: HashSet<(&str, u64)> = HashSet::with_capacity(copies.len());
    let mut out = Vec::with_capacity(copies.len());
    for c in copies {
        validate_key(&c.key)?;
        if c.generation == 0 {
            return Err(invalid(c, "generations start at 1".into()));
        }
        if !seen.insert((c.key.as_str(), c.generation)) {
            return Err(invalid(c, "it is listed twice in this container".into()));
        }
        let end = c.offset.checked_add(c.length).filter(|&e| e <= bytes);
        if end.is_none() {
            return Err(invalid(
                c,
                format!(
                    "bytes {}+{} run past the container's {bytes} bytes of data",
                    c.offset, c.length
                ),
            ));
        }
        out.push(Prepared {
            key: &c.key,
            generation: to_db("generation", c.generation)?,
            size: to_db("object size", c.size)?,
            sha256: &c.sha256,
            offset: to_db("copy offset", c.offset)?,
            length: to_db("copy length", c.length)?,
            meta: MetaColumns::of(c.meta.as_ref()),
        });
    }
    // Two objects never share bytes of the data stream.
    let mut by_offset: Vec<&NewCopy> = copies.iter().filter(|c| c.length > 0).collect();
    by_offset.sort_by_key(|c| c.offset);
    for pair in by_offset.windows(2) {
        if pair[0].offset + pair[0].length > pair[1].offset {
            return Err(invalid(
                pair[1],
                format!(
                    "its bytes from {} overlap {:?} generation {} (bytes {}+{})",
                    pair[1].offset,
                    shorten(&pair[0].key),
                    pair[0].generation,
                    pair[0].offset,
                    pair[0].length
                ),
            ));
        }
    }
    Ok(out)
}

/// An object row as looked up while closing.
#[derive(sqlx::FromRow)]
struct ObjectIdRow {
    id: i64,
    key: String,
    generation: i64,
    size: i64,
    sha256: Vec<u8>,
}

impl Catalogue {
    /// The container is fully written (footer and filemark issued, not yet durable): record
    /// its last block, data length, SHA-256, its objects (new generations are added; known ones
    /// must have the same size and hash) and its copies, all in ONE transaction.
    ///
    /// Fenced by the handle's writer lease ([`Catalogue::fenced_by`]): refused with
    /// [`CatalogueError::Fenced`] once it is not current.
    ///
    /// Only a pending container not yet closed can be closed. Its objects stay invisible until
    /// it becomes durable ([`Catalogue::set_container_state`]). Refused, with nothing written: a
    /// bad key, generation 0, a copy listed twice or running past `bytes` or overlapping another,
    /// an object generation already catalogued with other content.
    pub async fn close_container(
        &self,
        id: i64,
        last_block: u64,
        bytes: u64,
        sha256: [u8; 32],
        copies: &[NewCopy],
    ) -> Result<()> {
        self.close_container_counted(id, last_block, bytes, sha256, copies)
            .await
            .map(|_| ())
    }

    /// [`Catalogue::close_container`], returning how many statements it ran.
    pub(crate) async fn close_container_counted(
        &self,
        id: i64,
        last_block: u64,
        bytes: u64,
        sha256: [u8; 32],
        copies: &[NewCopy],
    ) -> Result<usize> {
        const OP: &str = "close_container";
        let last_db = to_db("last_block", last_block)?;
        let bytes_db = to_db("bytes", bytes)?;
        let prepared = prepare(id, bytes, copies)?;
        let now = now_unix();
        let for_share = matches!(self.backend, Backend::Postgres(_));
        let statements = in_write_tx!(&self.backend, OP, |tx| {
            check_writer!(self, tx, OP, for_share);
            let mut statements = 0usize;
            let closed = sqlx::query(
                "UPDATE containers SET last_block = $1, bytes = $2, sha256 = $3, closed_unix = $4, \
                 updated_unix = $4 \
                 WHERE id = $5 AND state = 'pending' AND last_block IS NULL AND first_block <= $1",
            )
            .bind(last_db)
            .bind(bytes_db)
            .bind(sha256.as_slice())
            .bind(now)
            .bind(id)
            .execute(&mut *tx)
            .await
            .ctx(OP)?
            .rows_affected();
            statements += 1;
            if closed == 0 {
                let row: Option<(String, Option<i64>, i64)> = sqlx::query_as(
                    "SELECT state, last_block, first_block FROM containers WHERE id = $1",
                )
                .bind(id)
                .fetch_optional(&mut *tx)
                .await
                .ctx(OP)?;
                return Err(close_refused(id, last_block, row));
            }
            statements += BulkInsert::insert_copies(&mut *tx, id, &prepared, now).await?;
            statements
        });
        tracing::debug!(
            container = id,
            copies = copies.len(),
            statements,
            "container closed"
        );
        if let Backend::Postgres(pool) = &self.backend {
            self.statistics.after_close(pool).await;
        }
        Ok(statements)
    }
}

/// Match looked-up object rows to the copies `wanted`, refusing content that differs from what
/// is catalogued. Returns the object id of each copy, in the order given.
fn object_ids<'p, 'a: 'p>(
    found: Vec<ObjectIdRow>,
    wanted: impl IntoIterator<Item = &'p Prepared<'a>>,
) -> Result<Vec<i64>> {
    let by_key: HashMap<(String, i64), ObjectIdRow> = found
        .into_iter()
        .map(|r| ((r.key.clone(), r.generation), r))
        .collect();
    wanted
        .into_iter()
        .map(|c| {
            let Some(row) = by_key.get(&(c.key.to_string(), c.generation)) else {
                return Err(CatalogueError::Corrupt {
                    what: format!(
                        "object {:?} generation {} vanished while its container was closed",
                        shorten(c.key),
                        c.generation
                    ),
                });
            };
            if row.size != c.size || row.sha256.as_slice() != c.sha256.as_slice() {
                return Err(CatalogueError::ObjectConflict {
                    key: shorten(c.key),
                    generation: u64::try_from(c.generation).unwrap_or_default(),
                    existing: format!("{} bytes, SHA-256 {}", row.size, hex::encode(&row.sha256)),
                    given: format!("{} bytes, SHA-256 {}", c.size, hex::encode(c.sha256)),
                });
            }
            Ok(row.id)
        })
        .collect()
}

/// Why a container could not be closed, from its (state, last_block, first_block) row.
fn close_refused(
    id: i64,
    last_block: u64,
    row: Option<(String, Option<i64>, i64)>,
) -> CatalogueError {
    let reason = match row {
        None => return CatalogueError::UnknownContainer { id },
        Some((state, _, _)) if state != "pending" => {
            format!("it is {state}; only a pending container can be closed")
        }
        Some((_, Some(last), _)) => {
            format!("it is already closed (last block {last})")
        }
        Some((_, None, first)) => {
            format!("last block {last_block} is before its first block {first}")
        }
    };
    CatalogueError::ContainerRefused { id, reason }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::catalogue::test_support::{
        TestResult, cat, container_with, copy, labelled, on_both_backends, sha,
    };
    use crate::catalogue::testing::TestCatalogue;
    use crate::catalogue::{ContainerState, NewCopy};
    use uuid::Uuid;

    on_both_backends!(
        ten_thousand_copies_close_in_one_batched_transaction,
        a_conflict_in_the_last_chunk_writes_nothing,
        bad_copies_and_bad_containers_are_refused,
        a_second_copy_shares_the_object,
        copies_point_only_at_rows_that_exist,
    );

    /// 10 000 small objects back to back.
    fn many(n: u32, prefix: &str) -> Vec<NewCopy> {
        (0..n)
            .map(|i| copy(&format!("{prefix}/{i:05}"), 1, u64::from(i) * 100, 100, i))
            .collect()
    }

    #[test]
    fn statement_count_grows_per_chunk_not_per_copy() {
        let n = ROWS_PER_STATEMENT;
        assert_eq!(close_statements(0, n, true), 1);
        assert_eq!(close_statements(1, n, true), 4);
        assert_eq!(close_statements(n, n, true), 4);
        assert_eq!(close_statements(n + 1, n, true), 7);
        assert_eq!(close_statements(10_000, n, true), 1 + 3 * 25);
        assert_eq!(close_statements(10_000, PG_ROWS_PER_STATEMENT, false), 3);
        assert_eq!(close_statements(25_000, PG_ROWS_PER_STATEMENT, false), 7);
    }

    async fn ten_thousand_copies_close_in_one_batched_transaction(
        db: &TestCatalogue,
    ) -> TestResult {
        let c = cat(db);
        labelled(c, "BULK01", "p").await?;
        let copies = many(10_000, "bulk");
        let id = c
            .create_container(Uuid::new_v4(), "BULK01", 1, 2, 1 << 20)
            .await?;
        let statements = c
            .close_container_counted(id, 3, 1_000_000, sha(7), &copies)
            .await?;
        let expected = match c.backend() {
            "postgres" => close_statements(10_000, PG_ROWS_PER_STATEMENT, false),
            _ => close_statements(10_000, ROWS_PER_STATEMENT, true),
        };
        assert_eq!(statements, expected);
        assert!(
            statements < 100,
            "{statements} statements for 10 000 copies"
        );
        assert_eq!(c.container_object_count(id).await?, 10_000);
        // Not visible until durable.
        assert_eq!(c.count_objects().await?, 0);
        c.set_container_state(&[id], ContainerState::Durable)
            .await?;
        assert_eq!(c.count_objects().await?, 10_000);
        let k = c.container(id).await?.ok_or("missing")?;
        assert_eq!(
            (k.last_block, k.bytes, k.sha256),
            (Some(3), 1_000_000, Some(sha(7)))
        );
        let o = c.object("bulk/09999").await?.ok_or("missing")?;
        assert_eq!((o.generation, o.size, o.sha256), (1, 100, sha(9999)));
        let loc = c.copies("bulk/09999", 1).await?;
        assert_eq!(loc.len(), 1);
        assert_eq!(
            (loc[0].offset, loc[0].length, loc[0].container_id),
            (999_900, 100, id)
        );
        Ok(())
    }

    async fn a_conflict_in_the_last_chunk_writes_nothing(db: &TestCatalogue) -> TestResult {
        let c = cat(db);
        labelled(c, "ATOM01", "p").await?;
        // "atom/09999" generation 1 is already catalogued with other content.
        container_with(
            c,
            "ATOM01",
            &[copy("atom/09999", 1, 0, 100, 424_242)],
            ContainerState::Durable,
        )
        .await?;
        let copies = many(10_000, "atom");
        let cart = c.cartridge("ATOM01").await?.ok_or("missing")?;
        let id = c
            .create_container(
                Uuid::new_v4(),
                "ATOM01",
                cart.next_file,
                cart.eod_block,
                1 << 20,
            )
            .await?;
        let e = c
            .close_container(id, cart.eod_block + 3, 1_000_000, sha(1), &copies)
            .await
            .unwrap_err();
        assert!(
            matches!(e, CatalogueError::ObjectConflict { ref key, generation: 1, .. } if key == "atom/09999"),
            "{e}"
        );
        assert!(e.to_string().contains("next_generation"), "{e}");
        // One transaction: the container is still open and none of the other 9 999 objects exist.
        let k = c.container(id).await?.ok_or("missing")?;
        assert_eq!(
            (k.state, k.last_block, k.bytes, k.sha256),
            (ContainerState::Pending, None, 0, None)
        );
        assert_eq!(c.next_generation("atom/00000").await?, 1);
        assert_eq!(c.next_generation("atom/09998").await?, 1);
        assert_eq!(c.container_object_count(id).await?, 0);
        // The same container closes once the caller takes a new generation.
        let mut fixed = copies;
        if let Some(last) = fixed.last_mut() {
            last.generation = c.next_generation("atom/09999").await?;
        }
        c.close_container(id, cart.eod_block + 3, 1_000_000, sha(1), &fixed)
            .await?;
        assert_eq!(c.container_object_count(id).await?, 10_000);
        Ok(())
    }

    async fn bad_copies_and_bad_containers_are_refused(db: &TestCatalogue) -> TestResult {
        let c = cat(db);
        labelled(c, "BAD01", "p").await?;
        let id = c
            .create_container(Uuid::new_v4(), "BAD01", 1, 2, 1 << 20)
            .await?;
        let cases: Vec<(Vec<NewCopy>, &str)> = vec![
            (vec![copy("", 1, 0, 1, 1)], "empty"),
            (vec![copy("a\0b", 1, 0, 1, 1)], "NUL"),
            (vec![copy(&"k".repeat(4097), 1, 0, 1, 1)], "4097 bytes"),
            (vec![copy("g0", 0, 0, 1, 1)], "generations start at 1"),
            (
                vec![copy("d", 1, 0, 1, 1), copy("d", 1, 1, 1, 2)],
                "listed twice",
            ),
            (vec![copy("past", 1, 95, 10, 1)], "run past"),
            (
                vec![copy("o1", 1, 0, 10, 1), copy("o2", 1, 5, 10, 2)],
                "overlap",
            ),
            (vec![copy("huge", 1, u64::MAX, 2, 1)], "run past"),
        ];
        for (copies, expect) in cases {
            let e = c
                .close_container(id, 5, 100, sha(1), &copies)
                .await
                .unwrap_err();
            assert!(e.to_string().contains(expect), "{expect}: {e}");
            assert_eq!(c.container(id).await?.ok_or("missing")?.last_block, None);
        }
        // Zero-length objects may share an offset.
        let ok = vec![
            copy("e1", 1, 0, 0, 1),
            copy("e2", 1, 0, 0, 2),
            copy("f", 1, 0, 100, 3),
        ];
        let e = c
            .close_container(id, 1, 100, sha(1), &ok)
            .await
            .unwrap_err();
        assert!(e.to_string().contains("before its first block"), "{e}");
        let e = c
            .close_container(4242, 9, 100, sha(1), &ok)
            .await
            .unwrap_err();
        assert!(
            matches!(e, CatalogueError::UnknownContainer { id: 4242 }),
            "{e}"
        );
        c.close_container(id, 5, 100, sha(1), &ok).await?;
        let e = c
            .close_container(id, 5, 100, sha(1), &ok)
            .await
            .unwrap_err();
        assert!(e.to_string().contains("already closed"), "{e}");
        c.set_container_state(&[id], ContainerState::Dead).await?;
        let e = c
            .close_container(id, 5, 100, sha(1), &ok)
            .await
            .unwrap_err();
        assert!(e.to_string().contains("it is dead"), "{e}");
        Ok(())
    }

    async fn a_second_copy_shares_the_object(db: &TestCatalogue) -> TestResult {
        let c = cat(db);
        labelled(c, "P1C001", "p1").await?;
        labelled(c, "P2C001", "p2").await?;
        let one = [copy("shared", 1, 0, 50, 9)];
        let a = container_with(c, "P1C001", &one, ContainerState::Durable).await?;
        let b = container_with(
            c,
            "P2C001",
            &[copy("shared", 1, 100, 50, 9)],
            ContainerState::Durable,
        )
        .await?;
        let locs = c.copies("shared", 1).await?;
        let mut got: Vec<(i64, u64)> = locs.iter().map(|l| (l.container_id, l.offset)).collect();
        got.sort();
        assert_eq!(got, [(a, 0), (b, 100)]);
        assert_eq!(c.count_objects().await?, 1);
        Ok(())
    }

    /// The schema's own guard, below the close's checks: a copy of a missing object or in a
    /// missing container is refused (foreign keys on SQLite, a per-statement trigger on
    /// PostgreSQL), and on PostgreSQL the rows copies point at cannot go away.
    async fn copies_point_only_at_rows_that_exist(db: &TestCatalogue) -> TestResult {
        let c = cat(db);
        labelled(c, "REF001", "p").await?;
        let k = container_with(
            c,
            "REF001",
            &[copy("ref", 1, 0, 10, 1)],
            ContainerState::Durable,
        )
        .await?;
        let bad_object = "INSERT INTO copies (object_id, container_id, byte_offset, byte_length) \
                          SELECT MAX(id) + 1000, $1, 0, 1 FROM objects";
        let bad_container = "INSERT INTO copies (object_id, container_id, byte_offset, byte_length) \
                             SELECT MAX(id), $1 + 1000, 0, 1 FROM objects";
        match (c.pool_sqlite(), c.pool_postgres()) {
            (Some(p), _) => {
                for q in [bad_object, bad_container] {
                    let e = sqlx::query(q).bind(k).execute(p).await.unwrap_err();
                    assert!(e.to_string().contains("FOREIGN KEY"), "{e}");
                }
            }
            (_, Some(p)) => {
                for (q, what) in [(bad_object, "object"), (bad_container, "container")] {
                    let e = sqlx::query(q).bind(k).execute(p).await.unwrap_err();
                    let code = e.as_database_error().and_then(|d| d.code());
                    assert_eq!(code.as_deref(), Some("23503"), "{e}");
                    assert!(e.to_string().contains(what), "{e}");
                }
                for q in [
                    "DELETE FROM objects",
                    "DELETE FROM containers WHERE id = -1",
                    "TRUNCATE objects CASCADE",
                    "TRUNCATE containers CASCADE",
                    "UPDATE objects SET id = DEFAULT",
                    "UPDATE containers SET id = DEFAULT",
                ] {
                    let e = sqlx::query(q).execute(p).await.unwrap_err();
                    let code = e.as_database_error().and_then(|d| d.code());
                    assert_eq!(code.as_deref(), Some("23001"), "{q}: {e}");
                }
                // Updates that leave the ids alone still work.
                sqlx::query("UPDATE containers SET updated_unix = updated_unix WHERE id = $1")
                    .bind(k)
                    .execute(p)
                    .await?;
            }
            _ => return Err("no pool".into()),
        }
        // Nothing changed.
        assert_eq!(c.copies("ref", 1).await?.len(), 1);
        assert_eq!(c.container_object_count(k).await?, 1);
        Ok(())
    }
}
