//! `reel cartridge import`: taking cartridges in from the library's import/export elements.
//! The request is a row in the store (`reel_cartridge_imports`), so it reaches a worker that
//! holds the library, on whichever host that is; the worker takes it at its next maintenance
//! pass, moves the cartridges into empty slots, gives each exported one back the state it had
//! and records what it did.

use serde::Serialize;
use sqlx::Row;
use utoipa::ToSchema;

use crate::db::{Db, now_ms};
use crate::error::{JobsError, Result};
use crate::on_db;

/// A request taken by a worker that has not finished it within this long is taken again (the
/// worker died); the moves it made are found done.
pub const TAKEN_FOR_MS: i64 = 60_000;

/// Longest result kept, in bytes (one line per cartridge).
const MAX_RESULT: usize = 16_000;

/// Most barcodes one request names.
pub const MAX_BARCODES: usize = 1000;

/// One import request and what became of it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, ToSchema)]
pub struct CartridgeImport {
    /// Its number.
    pub id: i64,
    /// The library it is for (empty: any).
    pub library: String,
    /// The cartridges asked for (empty: everything in the mail slots).
    pub barcodes: Vec<String>,
    /// When it was asked for (unix ms).
    pub requested_ms: i64,
    /// Who asked.
    pub requested_by: String,
    /// The worker that took it (empty: none yet).
    pub taken_by: String,
    /// When it was done (unix ms; 0: not yet).
    pub done_ms: i64,
    /// What was done, one line per cartridge.
    pub result: String,
}

impl CartridgeImport {
    /// Whether a worker has done it.
    pub fn is_done(&self) -> bool {
        self.done_ms > 0
    }
}

/// Reads and writes `reel_cartridge_imports`.
#[derive(Debug, Clone)]
pub struct CartridgeImports {
    db: Db,
}

/// The columns [`from_row`] reads.
macro_rules! import_columns {
    () => {
        "id, library, barcodes, requested_ms, requested_by, taken_by, done_ms, result"
    };
}

fn from_row<R: Row>(r: &R) -> std::result::Result<CartridgeImport, sqlx::Error>
where
    for<'a> &'a str: sqlx::ColumnIndex<R>,
    for<'a> i64: sqlx::Decode<'a, R::Database> + sqlx::Type<R::Database>,
    for<'a> String: sqlx::Decode<'a, R::Database> + sqlx::Type<R::Database>,
{
    let barcodes: String = r.try_get("barcodes")?;
    Ok(CartridgeImport {
        id: r.try_get("id")?,
        library: r.try_get("library")?,
        barcodes: barcodes.split_whitespace().map(String::from).collect(),
        requested_ms: r.try_get("requested_ms")?,
        requested_by: r.try_get("requested_by")?,
        taken_by: r.try_get("taken_by")?,
        done_ms: r.try_get("done_ms")?,
        result: r.try_get("result")?,
    })
}

/// Check the barcodes of a request: at most [`MAX_BARCODES`], each 1 to 32 printable ASCII
/// characters without spaces, none twice.
pub fn check_barcodes(barcodes: &[String]) -> Result<()> {
    if barcodes.len() > MAX_BARCODES {
        return Err(JobsError::Refused {
            what: format!("{} barcodes in one request", barcodes.len()),
            hint: format!("give at most {MAX_BARCODES}, or none for every mail slot"),
        });
    }
    let mut seen = std::collections::BTreeSet::new();
    for b in barcodes {
        if b.is_empty() || b.len() > 32 || !b.bytes().all(|c| c.is_ascii_graphic()) {
            return Err(JobsError::Refused {
                what: format!("`{}` is not a barcode", b.escape_debug()),
                hint: "give 1 to 32 printable ASCII characters, without spaces".into(),
            });
        }
        if !seen.insert(b) {
            return Err(JobsError::Refused {
                what: format!("barcode {b} is given twice"),
                hint: "give each cartridge once".into(),
            });
        }
    }
    Ok(())
}

impl CartridgeImports {
    /// The import requests on this database.
    pub fn new(db: Db) -> CartridgeImports {
        CartridgeImports { db }
    }

    /// Ask for `barcodes` (none: everything in the mail slots) to be taken in, by a worker of
    /// `library` (empty: any).
    pub async fn request(
        &self,
        library: &str,
        barcodes: &[String],
        by: &str,
    ) -> Result<CartridgeImport> {
        check_barcodes(barcodes)?;
        let sql = "INSERT INTO reel_cartridge_imports (library, barcodes, requested_ms, requested_by) \
                   VALUES ($1, $2, $3, $4) RETURNING id";
        let joined = barcodes.join(" ");
        let now = now_ms();
        let id: i64 = on_db!(&self.db, |p| sqlx::query_scalar(sql)
            .bind(library)
            .bind(&joined)
            .bind(now)
            .bind(by)
            .fetch_one(p)
            .await)
        .map_err(self.db.err("asking for a cartridge import"))?;
        self.get(id).await?.ok_or_else(|| JobsError::NotFound {
            what: format!("import request {id} vanished"),
            hint: "ask again".into(),
        })
    }

    /// One request.
    pub async fn get(&self, id: i64) -> Result<Option<CartridgeImport>> {
        const SQL: &str = concat!(
            "SELECT ",
            import_columns!(),
            " FROM reel_cartridge_imports WHERE id = $1"
        );
        on_db!(&self.db, |p| {
            let row = sqlx::query(SQL)
                .bind(id)
                .fetch_optional(p)
                .await
                .map_err(self.db.err("reading an import request"))?;
            row.as_ref()
                .map(from_row)
                .transpose()
                .map_err(self.db.err("reading an import request"))
        })
    }

    /// The latest `limit` requests, newest first.
    pub async fn recent(&self, limit: i64) -> Result<Vec<CartridgeImport>> {
        const SQL: &str = concat!(
            "SELECT ",
            import_columns!(),
            " FROM reel_cartridge_imports ORDER BY id DESC LIMIT $1"
        );
        on_db!(&self.db, |p| {
            let rows = sqlx::query(SQL)
                .bind(limit)
                .fetch_all(p)
                .await
                .map_err(self.db.err("reading import requests"))?;
            rows.iter()
                .map(from_row)
                .collect::<std::result::Result<Vec<_>, _>>()
                .map_err(self.db.err("reading import requests"))
        })
    }

    /// Take the oldest request for `library` not done and not taken by a live worker, as
    /// `worker`; `None` when there is none.
    pub async fn take(&self, library: &str, worker: &str) -> Result<Option<CartridgeImport>> {
        let now = now_ms();
        let sql = "SELECT id FROM reel_cartridge_imports WHERE done_ms = 0 \
                   AND (library = '' OR library = $1) AND (taken_by = '' OR taken_ms < $2) \
                   ORDER BY id LIMIT 1";
        let id: Option<i64> = on_db!(&self.db, |p| sqlx::query_scalar(sql)
            .bind(library)
            .bind(now - TAKEN_FOR_MS)
            .fetch_optional(p)
            .await)
        .map_err(self.db.err("looking for import requests"))?;
        let Some(id) = id else { return Ok(None) };
        let claim = "UPDATE reel_cartridge_imports SET taken_by = $2, taken_ms = $3 \
                     WHERE id = $1 AND done_ms = 0 AND (taken_by = '' OR taken_ms < $4)";
        let n = on_db!(&self.db, |p| sqlx::query(claim)
            .bind(id)
            .bind(worker)
            .bind(now)
            .bind(now - TAKEN_FOR_MS)
            .execute(p)
            .await
            .map(|r| r.rows_affected()))
        .map_err(self.db.err("taking an import request"))?;
        if n == 0 {
            // Another worker took it first.
            return Ok(None);
        }
        self.get(id).await
    }

    /// Record what was done for request `id`.
    pub async fn finish(&self, id: i64, result: &str) -> Result<()> {
        let mut result = result.to_string();
        if result.len() > MAX_RESULT {
            let mut cut = MAX_RESULT;
            while !result.is_char_boundary(cut) {
                cut -= 1;
            }
            result.truncate(cut);
            result.push_str("\n…");
        }
        let sql = "UPDATE reel_cartridge_imports SET done_ms = $2, result = $3 WHERE id = $1";
        on_db!(&self.db, |p| sqlx::query(sql)
            .bind(id)
            .bind(now_ms().max(1))
            .bind(&result)
            .execute(p)
            .await
            .map(|_| ()))
        .map_err(self.db.err("recording an import"))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn barcodes_are_checked() {
        assert!(check_barcodes(&[]).is_ok());
        assert!(check_barcodes(&["A1".into(), "B2".into()]).is_ok());
        for bad in ["", "a b", "é", &"x".repeat(33)] {
            assert!(check_barcodes(&[bad.to_string()]).is_err(), "{bad:?}");
        }
        assert!(check_barcodes(&["A1".into(), "A1".into()]).is_err());
        let many: Vec<String> = (0..=MAX_BARCODES).map(|i| format!("B{i}")).collect();
        assert!(check_barcodes(&many).is_err());
    }
}
