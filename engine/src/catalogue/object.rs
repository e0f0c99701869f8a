//! Objects (one generation of one key) and their copies, as reported to callers: only through
//! durable or verified containers.

use serde::{Serialize, Serializer};

use super::Catalogue;
use super::backend::{from_db, on_pool, sha_from_db, to_db};
use super::cartridge::CartridgeState;
use super::container::ContainerState;
use super::error::{CatalogueError, DbContext, Result, shorten};

/// Longest object key, in bytes of UTF-8.
pub const MAX_KEY_BYTES: usize = 4096;

/// Check an object key: any UTF-8 string of 1 to [`MAX_KEY_BYTES`] bytes without NUL.
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
    } else {
        return Ok(());
    };
    Err(CatalogueError::InvalidKey {
        key: shorten(key),
        reason,
    })
}

/// The SQL condition "object `o` has a copy in a durable or verified container".
macro_rules! visible {
    ($o:literal) => {
        concat!(
            "EXISTS (SELECT 1 FROM copies vc JOIN containers vk ON vk.id = vc.container_id \
             WHERE vc.object_id = ",
            $o,
            ".id AND vk.state IN ('durable', 'verified'))"
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
}

impl TryFrom<ObjectRow> for Object {
    type Error = CatalogueError;

    fn try_from(r: ObjectRow) -> Result<Object> {
        Ok(Object {
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
struct CopyRow {
    key: String,
    generation: i64,
    barcode: String,
    cartridge_state: String,
    container_id: i64,
    file_number: i64,
    first_block: i64,
    record_size: i32,
    byte_offset: i64,
    byte_length: i64,
    sha256: Vec<u8>,
    container_state: String,
}

impl TryFrom<CopyRow> for CopyLocation {
    type Error = CatalogueError;

    fn try_from(r: CopyRow) -> Result<CopyLocation> {
        let corrupt = |what: String| CatalogueError::Corrupt { what };
        Ok(CopyLocation {
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

    /// The latest generation of the key that has at least one durable or verified copy.
    pub async fn object(&self, key: &str) -> Result<Option<Object>> {
        const OP: &str = "object";
        validate_key(key)?;
        let row: Option<ObjectRow> = on_pool!(&self.backend, |pool| {
            sqlx::query_as(concat!(
                "SELECT o.key, o.generation, o.size, o.sha256, o.created_unix FROM objects o \
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
            sqlx::query_as(
                "SELECT o.key, o.generation, t.barcode, t.state AS cartridge_state, \
                        k.id AS container_id, k.file_number, k.first_block, k.record_size, \
                        c.byte_offset, c.byte_length, o.sha256, k.state AS container_state \
                 FROM objects o \
                 JOIN copies c ON c.object_id = o.id \
                 JOIN containers k ON k.id = c.container_id \
                 JOIN cartridges t ON t.barcode = k.barcode \
                 WHERE o.key = $1 AND o.generation = $2 AND k.state IN ('durable', 'verified') \
                 ORDER BY CASE WHEN t.state IN ('active', 'full') THEN 0 ELSE 1 END, \
                          CASE WHEN k.state = 'verified' THEN 0 ELSE 1 END, \
                          t.barcode, k.file_number",
            )
            .bind(key)
            .bind(generation)
            .fetch_all(pool)
            .await
            .ctx(OP)?
        });
        rows.into_iter().map(CopyLocation::try_from).collect()
    }

    /// Archived keys starting with `prefix` (empty: all), in key order (UTF-8 bytes), at most
    /// `limit`: for each key, its latest generation that has a durable or verified copy.
    pub async fn list_objects(&self, prefix: &str, limit: u64) -> Result<Vec<Object>> {
        const OP: &str = "list_objects";
        if !prefix.is_empty() {
            validate_key(prefix)?;
        }
        let limit = i64::try_from(limit).unwrap_or(i64::MAX);
        // Latest visible generation: visible, and no later visible generation of the same key.
        let rows: Vec<ObjectRow> = match prefix_upper_bound(prefix) {
            Some(upper) if !prefix.is_empty() => on_pool!(&self.backend, |pool| {
                sqlx::query_as(concat!(
                    "SELECT o.key, o.generation, o.size, o.sha256, o.created_unix FROM objects o \
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
                    "SELECT o.key, o.generation, o.size, o.sha256, o.created_unix FROM objects o \
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
