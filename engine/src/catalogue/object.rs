//! Objects (one generation of one key) and their copies, as reported to callers: only through
//! durable or verified containers.

use serde::{Serialize, Serializer};
use sqlx::QueryBuilder;

use super::Catalogue;
use super::backend::{from_db, on_pool, sha_from_db, to_db};
use super::cartridge::CartridgeState;
use super::container::ContainerState;
use super::error::{CatalogueError, DbContext, Result, shorten};
use crate::format::{ObjectKind, ObjectMeta};

/// What the catalogue holds of an object found by [`Catalogue::copies_in_pool`].
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct CopiedObject {
    /// Its size in bytes.
    pub size: u64,
    /// Its modification time, when recorded (format version 2).
    pub mtime_ns: Option<i64>,
}

/// Keys bound in one `IN (...)` list (well under SQLite's 32 766 parameters).
const KEYS_PER_STATEMENT: usize = 1000;

/// Longest object key, in bytes of UTF-8.
pub const MAX_KEY_BYTES: usize = 4096;

/// No key begins with this segment: it is the private directory a recall keeps its partial
/// files in, directly under the destination root (`session::destination`).
pub const RESERVED_FIRST_SEGMENT: &str = ".reel-partial";

/// Check an object key. A key is a relative path of UTF-8 segments joined by `/`: 1 to
/// [`MAX_KEY_BYTES`] bytes, no NUL, no leading `/`, no empty segment (`a//b`, a trailing `/`),
/// no `.` or `..` segment, and not [`RESERVED_FIRST_SEGMENT`] first. This is the one rule for
/// keys: archive submission and planning check the keys they derive with it, the catalogue refuses any other key, and a recall's
/// [`safe_join`](crate::session::destination::safe_join) applies it before joining a key to
/// its destination, so every key the catalogue holds can be recalled.
pub fn validate_key(key: &str) -> Result<()> {
    let reason = if key.is_empty() {
        "it is empty".to_string()
    } else if key.len() > MAX_KEY_BYTES {
        format!(
            "it is {} bytes long; keys are at most {MAX_KEY_BYTES} bytes of UTF-8",
            key.len()
        )
    } else if let Some(at) = key.find('\0') {
        format!("it holds a NUL byte at byte {at}; keys cannot contain NUL")
    } else if key.starts_with('/') {
        "it starts with `/`; keys are relative paths".to_string()
    } else if key.split('/').next() == Some(RESERVED_FIRST_SEGMENT) {
        format!(
            "it starts with `{RESERVED_FIRST_SEGMENT}`, the name a recall's destination keeps for its partial files"
        )
    } else if let Some(seg) = key
        .split('/')
        .find(|s| s.is_empty() || *s == "." || *s == "..")
    {
        if seg.is_empty() {
            "it has an empty segment (`//`, or a trailing `/`); segments are joined by one `/`"
                .to_string()
        } else {
            format!("it has a `{seg}` segment; keys cannot contain `.` or `..` segments")
        }
    } else {
        return Ok(());
    };
    Err(CatalogueError::InvalidKey {
        key: shorten(key),
        reason,
    })
}

/// Check a key prefix (of an archive's keys, or of a listing): empty, or such that a key that
/// continues it can pass [`validate_key`] (so `backups/` is a prefix, `/x` and `a//` are not).
pub fn validate_key_prefix(prefix: &str) -> Result<()> {
    if prefix.is_empty() {
        return Ok(());
    }
    if prefix.len() >= MAX_KEY_BYTES {
        return Err(CatalogueError::InvalidKey {
            key: shorten(prefix),
            reason: format!(
                "as a key prefix it is {} bytes long, leaving no room in a key of at most {MAX_KEY_BYTES} bytes",
                prefix.len()
            ),
        });
    }
    validate_key(&format!("{prefix}x")).map_err(|e| match e {
        CatalogueError::InvalidKey { reason, .. } => CatalogueError::InvalidKey {
            key: shorten(prefix),
            reason: format!("as a key prefix, {reason}"),
        },
        other => other,
    })
}

/// The SQL condition "object `o` is not deleted (`deletion.rs`) and has a copy in a durable or
/// verified container".
///
/// Written so that the only way to evaluate it is object first: the copies of `o` through the
/// `copies` primary key (`object_id` leads it), then each copy's container through its primary
/// key. Both are scalar subqueries, which neither PostgreSQL nor SQLite turns into joins: an
/// `EXISTS` is pulled up into a semi-join, and on tables without statistics (straight after a
/// bulk load, before anything has run ANALYZE) PostgreSQL chose to hash or materialise the
/// whole `copies` table for it: 21 s for one look-up at 10 000 000 objects. A join of `copies`
/// with `containers` inside the subquery let it start from the durable containers instead and
/// probe every one of them. As written, a look-up costs a few index probes whatever the
/// statistics say.
macro_rules! visible {
    ($o:literal) => {
        concat!(
            $o,
            ".deletion_id IS NULL AND ",
            "(SELECT 1 FROM copies vc WHERE vc.object_id = ",
            $o,
            ".id AND (SELECT vk.state FROM containers vk WHERE vk.id = vc.container_id) \
             IN ('durable', 'verified') LIMIT 1) IS NOT NULL"
        )
    };
}

/// One archived generation of one key.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct Object {
    /// The key.
    pub key: String,
    /// Its generation (1 for the first archive of the key).
    pub generation: u64,
    /// Size in bytes.
    pub size: u64,
    /// SHA-256 of its content.
    #[serde(serialize_with = "serialize_sha")]
    pub sha256: [u8; 32],
    /// When it was catalogued, seconds since the Unix epoch.
    pub created_unix: u64,
    /// Its filesystem metadata (kind, mode, owner, mtime), when it was recorded.
    pub meta: Option<ObjectMeta>,
}

/// Where one copy of an object is: enough to LOCATE straight to it.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct CopyLocation {
    /// The key.
    pub key: String,
    /// Its generation.
    pub generation: u64,
    /// The cartridge holding the copy.
    pub barcode: String,
    /// That cartridge's state.
    pub cartridge_state: CartridgeState,
    /// The container holding the copy.
    pub container_id: i64,
    /// The container's tape file number.
    pub file_number: u64,
    /// Block number of the container's header record.
    pub container_first_block: u64,
    /// Block number of the container's last record (its footer).
    pub container_last_block: u64,
    /// The container's data record size.
    pub record_size: u32,
    /// Byte offset of the object in the container's data stream.
    pub offset: u64,
    /// Length of the object in the container's data stream.
    pub length: u64,
    /// SHA-256 of the object's content.
    #[serde(serialize_with = "serialize_sha")]
    pub sha256: [u8; 32],
    /// The container's state (durable or verified).
    pub container_state: ContainerState,
    /// The object's filesystem metadata (kind, mode, owner, mtime), when it was recorded.
    pub meta: Option<ObjectMeta>,
}

/// One object copy written into a container, given to [`Catalogue::close_container`].
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct NewCopy {
    /// The key.
    pub key: String,
    /// Its generation (from [`Catalogue::next_generation`]).
    pub generation: u64,
    /// Size of the object in bytes.
    pub size: u64,
    /// SHA-256 of its content.
    pub sha256: [u8; 32],
    /// Byte offset of the object in the container's data stream.
    pub offset: u64,
    /// Length of the object in the container's data stream.
    pub length: u64,
    /// Its filesystem metadata, when the archive recorded it (every new archive does).
    pub meta: Option<ObjectMeta>,
}

/// Serialize a hash as lower-case hex.
pub(crate) fn serialize_sha<S: Serializer>(
    h: &[u8; 32],
    s: S,
) -> std::result::Result<S::Ok, S::Error> {
    s.serialize_str(&hex::encode(h))
}

/// Serialize an optional hash as lower-case hex or null.
pub(crate) fn serialize_opt_sha<S: Serializer>(
    h: &Option<[u8; 32]>,
    s: S,
) -> std::result::Result<S::Ok, S::Error> {
    match h {
        Some(h) => s.serialize_str(&hex::encode(h)),
        None => s.serialize_none(),
    }
}

/// An `objects` row as reported.
#[derive(sqlx::FromRow)]
struct ObjectRow {
    key: String,
    generation: i64,
    size: i64,
    sha256: Vec<u8>,
    created_unix: i64,
    #[sqlx(flatten)]
    meta: MetaColumns,
}

/// The metadata columns of an `objects` row (`kind` 0 and NULLs: nothing recorded).
#[derive(sqlx::FromRow)]
pub(crate) struct MetaColumns {
    kind: i64,
    mode: Option<i64>,
    uid: Option<i64>,
    gid: Option<i64>,
    mtime_ns: Option<i64>,
    flags: Option<i64>,
}

/// Kind, mode, uid, gid, mtime, flags as bound.
pub(crate) type MetaValues = (
    i64,
    Option<i64>,
    Option<i64>,
    Option<i64>,
    Option<i64>,
    Option<i64>,
);

/// Bit 0 of `objects.flags`: the file was sparse.
const FLAG_SPARSE: i64 = 1;

/// The columns of `MetaColumns`, of objects aliased `o`.
macro_rules! meta_columns {
    () => {
        "o.kind, o.mode, o.uid, o.gid, o.mtime_ns, o.flags"
    };
}
pub(crate) use meta_columns;

/// The columns of [`CopyRow`], of objects `o`, copies `c`, containers `k` and cartridges `t`.
macro_rules! copy_columns {
    () => {
        concat!(
            "o.key, o.generation, t.barcode, t.state AS cartridge_state, \
             k.id AS container_id, k.file_number, k.first_block, k.last_block, k.record_size, \
             c.byte_offset, c.byte_length, o.sha256, k.state AS container_state, ",
            $crate::catalogue::object::meta_columns!()
        )
    };
}
pub(crate) use copy_columns;

impl MetaColumns {
    /// The columns for `meta`, as they are stored.
    pub(crate) fn of(meta: Option<&ObjectMeta>) -> MetaColumns {
        match meta {
            None => MetaColumns {
                kind: 0,
                mode: None,
                uid: None,
                gid: None,
                mtime_ns: None,
                flags: None,
            },
            Some(m) => MetaColumns {
                kind: i64::from(m.kind.code()),
                mode: Some(i64::from(m.mode & 0o7777)),
                uid: Some(i64::from(m.uid)),
                gid: Some(i64::from(m.gid)),
                mtime_ns: Some(m.mtime_ns),
                flags: Some(if m.sparse { FLAG_SPARSE } else { 0 }),
            },
        }
    }

    /// Read the columns back; a kind or a field out of range is corruption.
    fn decode(self, key: &str) -> Result<Option<ObjectMeta>> {
        if self.kind == 0 {
            return Ok(None);
        }
        let corrupt = |what: &str| CatalogueError::Corrupt {
            what: format!("object {}: {what}", shorten(key)),
        };
        let kind = u8::try_from(self.kind)
            .ok()
            .and_then(ObjectKind::from_code)
            .ok_or_else(|| corrupt(&format!("kind {}", self.kind)))?;
        let u = |v: Option<i64>, name: &str| {
            v.and_then(|v| u32::try_from(v).ok())
                .ok_or_else(|| corrupt(&format!("{name} {v:?}")))
        };
        Ok(Some(ObjectMeta {
            kind,
            mode: u(self.mode, "mode")? & 0o7777,
            uid: u(self.uid, "uid")?,
            gid: u(self.gid, "gid")?,
            mtime_ns: self.mtime_ns.ok_or_else(|| corrupt("no mtime"))?,
            sparse: self.flags.unwrap_or(0) & FLAG_SPARSE != 0,
        }))
    }

    /// Kind, mode, uid, gid, mtime, flags for binding.
    pub(crate) fn values(&self) -> MetaValues {
        (
            self.kind,
            self.mode,
            self.uid,
            self.gid,
            self.mtime_ns,
            self.flags,
        )
    }
}

impl TryFrom<ObjectRow> for Object {
    type Error = CatalogueError;

    fn try_from(r: ObjectRow) -> Result<Object> {
        Ok(Object {
            meta: r.meta.decode(&r.key)?,
            generation: from_db("object generation", r.generation)?,
            size: from_db("object size", r.size)?,
            sha256: sha_from_db("object sha256", r.sha256)?,
            created_unix: from_db("object created_unix", r.created_unix)?,
            key: r.key,
        })
    }
}

/// A copy joined with its container and cartridge.
#[derive(sqlx::FromRow)]
pub(super) struct CopyRow {
    key: String,
    generation: i64,
    barcode: String,
    cartridge_state: String,
    container_id: i64,
    file_number: i64,
    first_block: i64,
    last_block: Option<i64>,
    record_size: i32,
    byte_offset: i64,
    byte_length: i64,
    sha256: Vec<u8>,
    container_state: String,
    #[sqlx(flatten)]
    meta: MetaColumns,
}

impl TryFrom<CopyRow> for CopyLocation {
    type Error = CatalogueError;

    fn try_from(r: CopyRow) -> Result<CopyLocation> {
        let corrupt = |what: String| CatalogueError::Corrupt { what };
        Ok(CopyLocation {
            meta: r.meta.decode(&r.key)?,
            generation: from_db("object generation", r.generation)?,
            cartridge_state: r.cartridge_state.parse().map_err(|_| {
                corrupt(format!(
                    "cartridge {} has state {:?}",
                    r.barcode, r.cartridge_state
                ))
            })?,
            container_state: r.container_state.parse().map_err(|_| {
                corrupt(format!(
                    "container {} has state {:?}",
                    r.container_id, r.container_state
                ))
            })?,
            container_id: r.container_id,
            file_number: from_db("container file_number", r.file_number)?,
            container_first_block: from_db("container first_block", r.first_block)?,
            container_last_block: from_db(
                "container last_block",
                r.last_block.ok_or_else(|| {
                    corrupt(format!(
                        "durable container {} has no last block",
                        r.container_id
                    ))
                })?,
            )?,
            record_size: u32::try_from(r.record_size).map_err(|_| {
                corrupt(format!(
                    "container {} has record size {}",
                    r.container_id, r.record_size
                ))
            })?,
            offset: from_db("copy byte_offset", r.byte_offset)?,
            length: from_db("copy byte_length", r.byte_length)?,
            sha256: sha_from_db("object sha256", r.sha256)?,
            barcode: r.barcode,
            key: r.key,
        })
    }
}

/// The smallest string greater than every string that starts with `prefix`, in UTF-8 byte
/// order (= code point order), or None if there is none (the prefix is all U+10FFFF).
pub(crate) fn prefix_upper_bound(prefix: &str) -> Option<String> {
    let mut chars: Vec<char> = prefix.chars().collect();
    while let Some(last) = chars.pop() {
        let next = match last as u32 {
            0xD7FF => Some('\u{E000}'),
            c => char::from_u32(c + 1),
        };
        if let Some(next) = next {
            chars.push(next);
            return Some(chars.into_iter().collect());
        }
    }
    None
}

impl Catalogue {
    /// The next generation number for a key: one more than any generation catalogued for it,
    /// visible or not (1 for a new key). It is not a reservation: two writers asking at once get
    /// the same number, and the second `close_container` with different content is refused.
    pub async fn next_generation(&self, key: &str) -> Result<u64> {
        const OP: &str = "next_generation";
        validate_key(key)?;
        let max: Option<i64> = on_pool!(&self.backend, |pool| {
            sqlx::query_scalar("SELECT MAX(generation) FROM objects WHERE key = $1")
                .bind(key)
                .fetch_one(pool)
                .await
                .ctx(OP)?
        });
        Ok(from_db("object generation", max.unwrap_or(0))? + 1)
    }

    /// [`Catalogue::next_generation`] of many keys at once, in the order given: one statement
    /// per [`KEYS_PER_STATEMENT`] keys instead of a round trip each (an archive of a million
    /// small objects spent most of its time on those).
    pub async fn next_generations(&self, keys: &[String]) -> Result<Vec<u64>> {
        const OP: &str = "next_generations";
        for k in keys {
            validate_key(k)?;
        }
        let mut highest: std::collections::HashMap<String, i64> =
            std::collections::HashMap::with_capacity(keys.len());
        for chunk in keys.chunks(KEYS_PER_STATEMENT) {
            let rows: Vec<(String, i64)> = on_pool!(&self.backend, |pool| {
                let mut qb =
                    QueryBuilder::new("SELECT key, MAX(generation) FROM objects WHERE key IN (");
                let mut list = qb.separated(", ");
                for k in chunk {
                    list.push_bind(k.as_str());
                }
                qb.push(") GROUP BY key");
                qb.build_query_as().fetch_all(pool).await.ctx(OP)?
            });
            highest.extend(rows);
        }
        keys.iter()
            .map(|k| Ok(from_db("object generation", highest.get(k).copied().unwrap_or(0))? + 1))
            .collect()
    }

    /// The latest generation of the key that has at least one durable or verified copy.
    pub async fn object(&self, key: &str) -> Result<Option<Object>> {
        const OP: &str = "object";
        validate_key(key)?;
        let row: Option<ObjectRow> = on_pool!(&self.backend, |pool| {
            sqlx::query_as(concat!(
                "SELECT o.key, o.generation, o.size, o.sha256, o.created_unix, ",
                meta_columns!(),
                " FROM objects o \
                 WHERE o.key = $1 AND ",
                visible!("o"),
                " ORDER BY o.generation DESC LIMIT 1"
            ))
            .bind(key)
            .fetch_optional(pool)
            .await
            .ctx(OP)?
        });
        row.map(Object::try_from).transpose()
    }

    /// The copies of that generation in durable or verified containers: those on Active or Full
    /// cartridges first, verified before durable, then by cartridge and file.
    pub async fn copies(&self, key: &str, generation: u64) -> Result<Vec<CopyLocation>> {
        const OP: &str = "copies";
        validate_key(key)?;
        let generation = to_db("generation", generation)?;
        let rows: Vec<CopyRow> = on_pool!(&self.backend, |pool| {
            sqlx::query_as(concat!(
                "SELECT ",
                copy_columns!(),
                " FROM objects o \
                 JOIN copies c ON c.object_id = o.id \
                 JOIN containers k ON k.id = c.container_id \
                 JOIN cartridges t ON t.barcode = k.barcode \
                 WHERE o.key = $1 AND o.generation = $2 AND k.state IN ('durable', 'verified') \
                 ORDER BY CASE WHEN t.state IN ('active', 'full') THEN 0 ELSE 1 END, \
                          CASE WHEN k.state = 'verified' THEN 0 ELSE 1 END, \
                          t.barcode, k.file_number",
            ))
            .bind(key)
            .bind(generation)
            .fetch_all(pool)
            .await
            .ctx(OP)?
        });
        rows.into_iter().map(CopyLocation::try_from).collect()
    }

    /// Which of `wanted` (key, generation) already have a copy in `pool` that counts: in a
    /// verified container (or, unless `verified_only`, a durable one) on an active or full
    /// cartridge. A writer asked to write such an object again has nothing to do: its copy was
    /// made by an earlier attempt whose acknowledgement was lost (a worker frozen or killed
    /// between making the copy live and completing the request).
    ///
    /// Returns, for each such object, what the catalogue holds of it, so the caller can tell
    /// the same object from another content planned under the same generation.
    pub async fn copies_in_pool(
        &self,
        pool: &str,
        wanted: &[(String, u64)],
        verified_only: bool,
    ) -> Result<std::collections::HashMap<(String, u64), CopiedObject>> {
        const OP: &str = "copies_in_pool";
        let mut found = std::collections::HashMap::new();
        for chunk in wanted.chunks(400) {
            let gens = chunk
                .iter()
                .map(|(_, g)| to_db("generation", *g))
                .collect::<Result<Vec<i64>>>()?;
            let rows: Vec<(String, i64, i64, Option<i64>)> = on_pool!(&self.backend, |pool_| {
                let mut qb = QueryBuilder::new(
                    "SELECT DISTINCT o.key, o.generation, o.size, o.mtime_ns FROM objects o \
                     JOIN copies c ON c.object_id = o.id \
                     JOIN containers k ON k.id = c.container_id \
                     JOIN cartridges t ON t.barcode = k.barcode \
                     WHERE t.pool = ",
                );
                qb.push_bind(pool);
                qb.push(" AND t.state IN ('active', 'full') AND k.state IN (");
                qb.push(if verified_only {
                    "'verified'"
                } else {
                    "'durable', 'verified'"
                });
                qb.push(") AND (o.key, o.generation) IN (");
                let mut list = qb.separated(", ");
                for ((key, _), g) in chunk.iter().zip(&gens) {
                    list.push("(");
                    list.push_bind_unseparated(key.clone());
                    list.push_unseparated(", ");
                    list.push_bind_unseparated(*g);
                    list.push_unseparated(")");
                }
                qb.push(")");
                qb.build_query_as().fetch_all(pool_).await.ctx(OP)?
            });
            for (key, g, size, mtime_ns) in rows {
                found.insert(
                    (key, from_db("generation", g)?),
                    CopiedObject {
                        size: from_db("size", size)?,
                        mtime_ns,
                    },
                );
            }
        }
        Ok(found)
    }

    /// Archived keys starting with `prefix` (empty: all), in key order (UTF-8 bytes), at most
    /// `limit`: for each key, its latest generation that has a durable or verified copy.
    pub async fn list_objects(&self, prefix: &str, limit: u64) -> Result<Vec<Object>> {
        const OP: &str = "list_objects";
        validate_key_prefix(prefix)?;
        let limit = i64::try_from(limit).unwrap_or(i64::MAX);
        // Latest visible generation: visible, and no later visible generation of the same key.
        let rows: Vec<ObjectRow> = match prefix_upper_bound(prefix) {
            Some(upper) if !prefix.is_empty() => on_pool!(&self.backend, |pool| {
                sqlx::query_as(concat!(
                    "SELECT o.key, o.generation, o.size, o.sha256, o.created_unix, ",
                    meta_columns!(),
                    " FROM objects o \
                     WHERE o.key >= $1 AND o.key < $2 AND ",
                    visible!("o"),
                    " AND NOT EXISTS (SELECT 1 FROM objects n WHERE n.key = o.key \
                       AND n.generation > o.generation AND ",
                    visible!("n"),
                    ") ORDER BY o.key LIMIT $3"
                ))
                .bind(prefix)
                .bind(upper)
                .bind(limit)
                .fetch_all(pool)
                .await
                .ctx(OP)?
            }),
            _ => on_pool!(&self.backend, |pool| {
                sqlx::query_as(concat!(
                    "SELECT o.key, o.generation, o.size, o.sha256, o.created_unix, ",
                    meta_columns!(),
                    " FROM objects o \
                     WHERE o.key >= $1 AND ",
                    visible!("o"),
                    " AND NOT EXISTS (SELECT 1 FROM objects n WHERE n.key = o.key \
                       AND n.generation > o.generation AND ",
                    visible!("n"),
                    ") ORDER BY o.key LIMIT $2"
                ))
                .bind(prefix)
                .bind(limit)
                .fetch_all(pool)
                .await
                .ctx(OP)?
            }),
        };
        rows.into_iter().map(Object::try_from).collect()
    }

    /// How many keys are archived (have a generation with a durable or verified copy).
    pub async fn count_objects(&self) -> Result<u64> {
        const OP: &str = "count_objects";
        let n: i64 = on_pool!(&self.backend, |pool| {
            sqlx::query_scalar(concat!(
                "SELECT COUNT(DISTINCT o.key) FROM objects o WHERE ",
                visible!("o")
            ))
            .fetch_one(pool)
            .await
            .ctx(OP)?
        });
        from_db("object count", n)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::catalogue::test_support::{
        TestResult, cat, container_with, copy, labelled, on_both_backends, sha,
    };
    use crate::catalogue::testing::TestCatalogue;

    on_both_backends!(
        objects_are_visible_only_through_durable_containers,
        generations_count_past_invisible_ones,
        listing_uses_byte_order_and_exact_prefixes,
        keys_are_utf8_paths_without_nul_or_dot_segments,
        copies_on_healthy_cartridges_come_first,
    );

    #[test]
    fn key_validation_says_which_key_and_why() {
        assert!(validate_key("a").is_ok());
        assert!(validate_key(&"é".repeat(2048)).is_ok()); // 4096 bytes
        let e = validate_key(&"é".repeat(2049)).unwrap_err();
        assert!(e.to_string().contains("4098 bytes long"), "{e}");
        let e = validate_key("dir/a\0b").unwrap_err();
        assert!(
            e.to_string().contains("\"dir/a\\0b\"") && e.to_string().contains("byte 5"),
            "{e}"
        );
        let e = validate_key("").unwrap_err();
        assert!(e.to_string().contains("empty"), "{e}");
        for (bad, why) in [
            ("/etc/passwd", "starts with `/`"),
            ("a//b", "empty segment"),
            ("a/", "empty segment"),
            ("./a", "`.` segment"),
            ("a/./b", "`.` segment"),
            ("..", "`..` segment"),
            ("a/../../x", "`..` segment"),
        ] {
            let e = validate_key(bad).unwrap_err().to_string();
            assert!(e.contains(&format!("{bad:?}")) && e.contains(why), "{e}");
        }
        for good in [".hidden", "a/..b", "a/b.", "日本/語 x.txt", "a\\b"] {
            assert!(validate_key(good).is_ok(), "{good:?}");
        }
    }

    #[test]
    fn key_prefixes_follow_the_key_rule() {
        for good in ["", "backups/", "a", "a/b", "a/.", "..x"] {
            assert!(validate_key_prefix(good).is_ok(), "{good:?}");
        }
        for (bad, why) in [
            ("/", "starts with `/`"),
            ("a//", "empty segment"),
            ("../", "`..` segment"),
            ("a/./", "`.` segment"),
            ("a\0", "NUL"),
        ] {
            let e = validate_key_prefix(bad).unwrap_err().to_string();
            assert!(e.contains(&format!("{bad:?}")) && e.contains(why), "{e}");
        }
        let long = "x".repeat(MAX_KEY_BYTES);
        assert!(
            validate_key_prefix(&long)
                .unwrap_err()
                .to_string()
                .contains("no room")
        );
        assert!(validate_key_prefix(&long[1..]).is_ok());
    }

    #[test]
    fn prefix_bounds_cover_exactly_the_prefix() {
        assert_eq!(prefix_upper_bound("abc").as_deref(), Some("abd"));
        assert_eq!(
            prefix_upper_bound("a\u{D7FF}").as_deref(),
            Some("a\u{E000}")
        );
        assert_eq!(prefix_upper_bound("a\u{10FFFF}").as_deref(), Some("b"));
        assert_eq!(prefix_upper_bound("\u{10FFFF}\u{10FFFF}"), None);
        assert_eq!(prefix_upper_bound(""), None);
        // Byte order of UTF-8 is code point order: every key with the prefix sorts between.
        for (p, k) in [
            ("ab", "ab\u{10FFFF}zz"),
            ("é", "éé"),
            ("a\u{D7FF}", "a\u{D7FF}\u{10FFFF}"),
        ] {
            let up = prefix_upper_bound(p).unwrap();
            assert!(k >= p && k.as_bytes() < up.as_bytes(), "{p:?} {k:?} {up:?}");
        }
    }

    async fn objects_are_visible_only_through_durable_containers(db: &TestCatalogue) -> TestResult {
        let c = cat(db);
        labelled(c, "V1", "p").await?;
        let id = container_with(
            c,
            "V1",
            &[copy("v/a", 1, 0, 10, 1), copy("v/b", 1, 10, 5, 2)],
            ContainerState::Pending,
        )
        .await?;
        // Closed but not durable: nothing is reported as archived.
        assert_eq!(c.object("v/a").await?, None);
        assert!(c.copies("v/a", 1).await?.is_empty());
        assert!(c.list_objects("", 100).await?.is_empty());
        assert_eq!(c.count_objects().await?, 0);
        c.set_container_state(&[id], ContainerState::Durable)
            .await?;
        let a = c.object("v/a").await?.ok_or("missing")?;
        assert_eq!(
            (a.key.as_str(), a.generation, a.size, a.sha256),
            ("v/a", 1, 10, sha(1))
        );
        assert!(a.created_unix > 0);
        assert_eq!(c.count_objects().await?, 2);
        assert_eq!(c.list_objects("v/", 100).await?.len(), 2);
        c.set_container_state(&[id], ContainerState::Verified)
            .await?;
        assert_eq!(c.count_objects().await?, 2);
        // A dead container reports nothing again.
        c.set_container_state(&[id], ContainerState::Dead).await?;
        assert_eq!(c.object("v/a").await?, None);
        assert!(c.copies("v/b", 1).await?.is_empty());
        assert_eq!(c.count_objects().await?, 0);
        assert!(c.list_objects("", 10).await?.is_empty());
        Ok(())
    }

    async fn generations_count_past_invisible_ones(db: &TestCatalogue) -> TestResult {
        let c = cat(db);
        labelled(c, "G1", "p").await?;
        assert_eq!(c.next_generation("g").await?, 1);
        container_with(c, "G1", &[copy("g", 1, 0, 10, 1)], ContainerState::Durable).await?;
        assert_eq!(c.next_generation("g").await?, 2);
        // Generation 2 closed but pending: the object is still generation 1, the next is 3.
        let pending =
            container_with(c, "G1", &[copy("g", 2, 0, 20, 2)], ContainerState::Pending).await?;
        assert_eq!(c.next_generation("g").await?, 3);
        assert_eq!(c.object("g").await?.map(|o| o.generation), Some(1));
        let listed: Vec<(String, u64)> = c
            .list_objects("g", 10)
            .await?
            .into_iter()
            .map(|o| (o.key, o.generation))
            .collect();
        assert_eq!(listed, [("g".to_string(), 1)]);
        c.set_container_state(&[pending], ContainerState::Durable)
            .await?;
        let g = c.object("g").await?.ok_or("missing")?;
        assert_eq!((g.generation, g.size), (2, 20));
        assert_eq!(c.list_objects("g", 10).await?.len(), 1, "one row per key");
        assert_eq!(
            c.count_objects().await?,
            1,
            "keys are counted, not generations"
        );
        // Both generations keep their own copies.
        assert_eq!(c.copies("g", 1).await?.len(), 1);
        assert_eq!(c.copies("g", 2).await?[0].sha256, sha(2));
        assert!(c.copies("g", 3).await?.is_empty());
        // Many keys at once agree with one at a time, in the order given, across statements.
        let mut keys: Vec<String> = (0..2500).map(|i| format!("n/{i}")).collect();
        keys.insert(1234, "g".into());
        let all = c.next_generations(&keys).await?;
        assert_eq!(all.len(), keys.len());
        assert_eq!(all[1234], 3);
        assert!(all.iter().enumerate().all(|(i, g)| i == 1234 || *g == 1));
        assert!(c.next_generations(&["".to_string()]).await.is_err());
        assert!(c.next_generations(&[]).await?.is_empty());
        Ok(())
    }

    async fn listing_uses_byte_order_and_exact_prefixes(db: &TestCatalogue) -> TestResult {
        let c = cat(db);
        labelled(c, "O1", "p").await?;
        let keys = [
            "a%c",
            "a_c",
            "abc",
            "ab",
            "A",
            "B",
            "é/x",
            "é/y",
            "z\u{10FFFF}",
            "a",
            "a/b/c",
        ];
        let copies: Vec<NewCopy> = keys
            .iter()
            .enumerate()
            .map(|(i, k)| copy(k, 1, i as u64 * 10, 10, i as u32))
            .collect();
        container_with(c, "O1", &copies, ContainerState::Durable).await?;
        let list = |p: &'static str, n: u64| async move {
            c.list_objects(p, n)
                .await
                .map(|v| v.into_iter().map(|o| o.key).collect::<Vec<_>>())
        };
        // Byte order on both backends: upper case before lower case before non-ASCII.
        assert_eq!(
            list("", 100).await?,
            [
                "A",
                "B",
                "a",
                "a%c",
                "a/b/c",
                "a_c",
                "ab",
                "abc",
                "z\u{10FFFF}",
                "é/x",
                "é/y"
            ]
        );
        // Prefixes are exact: % and _ are not wildcards, case matters.
        assert_eq!(list("a%", 100).await?, ["a%c"]);
        assert_eq!(list("a_", 100).await?, ["a_c"]);
        assert_eq!(list("ab", 100).await?, ["ab", "abc"]);
        assert_eq!(list("A", 100).await?, ["A"]);
        assert_eq!(list("é/", 100).await?, ["é/x", "é/y"]);
        assert_eq!(list("z\u{10FFFF}", 100).await?, ["z\u{10FFFF}"]);
        assert!(list("nothing", 100).await?.is_empty());
        assert_eq!(list("a", 3).await?, ["a", "a%c", "a/b/c"]);
        assert!(list("a", 0).await?.is_empty());
        assert_eq!(c.list_objects("a", u64::MAX).await?.len(), 6);
        let e = c.list_objects("bad\0", 10).await.unwrap_err();
        assert!(matches!(e, CatalogueError::InvalidKey { .. }), "{e}");
        Ok(())
    }

    async fn keys_are_utf8_paths_without_nul_or_dot_segments(db: &TestCatalogue) -> TestResult {
        let c = cat(db);
        labelled(c, "K1", "p").await?;
        let long = "ü".repeat(2048); // 4096 bytes
        let odd = "..etc/passwd\n\t 'quoted' \"dq\" \\ 🦀 日本語";
        container_with(
            c,
            "K1",
            &[copy(&long, 1, 0, 1, 1), copy(odd, 1, 1, 1, 2)],
            ContainerState::Durable,
        )
        .await?;
        assert_eq!(c.object(&long).await?.map(|o| o.key), Some(long.clone()));
        assert_eq!(c.object(odd).await?.map(|o| o.sha256), Some(sha(2)));
        for bad in [
            "",
            "a\0",
            &"x".repeat(4097),
            "../x",
            "/x",
            "a//b",
            "a/./b",
            "a/",
        ] {
            assert!(
                matches!(c.object(bad).await, Err(CatalogueError::InvalidKey { .. })),
                "{bad:?}"
            );
            assert!(
                matches!(
                    c.next_generation(bad).await,
                    Err(CatalogueError::InvalidKey { .. })
                ),
                "{bad:?}"
            );
            assert!(
                matches!(
                    c.copies(bad, 1).await,
                    Err(CatalogueError::InvalidKey { .. })
                ),
                "{bad:?}"
            );
        }
        Ok(())
    }

    async fn copies_on_healthy_cartridges_come_first(db: &TestCatalogue) -> TestResult {
        let c = cat(db);
        for b in ["C1", "C2", "C3", "C4"] {
            labelled(c, b, &format!("pool-{b}")).await?;
        }
        let one = |off| [copy("k", 1, off, 10, 5)];
        let k1 = container_with(c, "C1", &one(0), ContainerState::Durable).await?;
        let k2 = container_with(c, "C2", &one(10), ContainerState::Durable).await?;
        let k3 = container_with(c, "C3", &one(20), ContainerState::Verified).await?;
        let k4 = container_with(c, "C4", &one(30), ContainerState::Verified).await?;
        c.set_cartridge_state("C1", CartridgeState::Disabled)
            .await?;
        c.set_cartridge_state("C2", CartridgeState::Full).await?;
        c.set_cartridge_state("C4", CartridgeState::Broken).await?;
        let locs = c.copies("k", 1).await?;
        let order: Vec<i64> = locs.iter().map(|l| l.container_id).collect();
        // Active/full first (verified before durable), then the others (verified first).
        assert_eq!(order, [k3, k2, k4, k1]);
        let l = &locs[0];
        assert_eq!(
            (
                l.barcode.as_str(),
                l.cartridge_state,
                l.container_state,
                l.file_number,
                l.container_first_block,
                l.record_size,
                l.offset,
                l.length
            ),
            (
                "C3",
                CartridgeState::Active,
                ContainerState::Verified,
                1,
                2,
                1 << 20,
                20,
                10
            )
        );
        let json = serde_json::to_value(l)?;
        assert_eq!(
            json["sha256"],
            serde_json::Value::String(hex::encode(sha(5)))
        );
        assert_eq!(json["cartridge_state"], "active");
        Ok(())
    }
}
