//! The library's elements as a worker last read them (`reel_library_elements`): drives, storage
//! slots, import/export slots and the picker, with the barcode each holds.
//!
//! `reel serve` never opens the device plugin (the workers own the changer), so a worker
//! publishes what its changer reports every `INVENTORY_EVERY` (in the worker crate), and the dashboard
//! and `GET /v1/library` read it from here with the time it was seen.

use serde::Serialize;
use sqlx::Row;
use utoipa::ToSchema;

use crate::db::{BeginWrite, Db, now_ms};
use crate::error::Result;
use crate::on_db;

/// One element of the library.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, ToSchema)]
pub struct ElementView {
    /// The library's id (the prefix of its drive names, `LIBRARY-INDEX`).
    pub library: String,
    /// `drive`, `slot`, `import_export` or `picker`.
    pub kind: String,
    /// Its ordinal among the elements of its kind.
    pub index: u32,
    /// Its element address in the changer.
    pub address: u32,
    /// The barcode of the cartridge in it; `None` when it is empty (or holds a cartridge
    /// without a label the changer can read: see `full`).
    pub barcode: Option<String>,
    /// Whether it holds a cartridge.
    pub full: bool,
    /// The plugin's `REEL_ELEMENT_*` flags.
    pub flags: u32,
}

/// The element kind's name for a `REEL_ELEMENT_*` type.
pub fn kind_name(kind: u32) -> &'static str {
    use reel_plugin_abi::{
        REEL_ELEMENT_DRIVE, REEL_ELEMENT_IMPORT_EXPORT, REEL_ELEMENT_PICKER, REEL_ELEMENT_SLOT,
    };
    match kind {
        REEL_ELEMENT_DRIVE => "drive",
        REEL_ELEMENT_SLOT => "slot",
        REEL_ELEMENT_IMPORT_EXPORT => "import_export",
        REEL_ELEMENT_PICKER => "picker",
        _ => "other",
    }
}

/// What the last worker to look saw.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, ToSchema)]
pub struct InventoryView {
    /// The elements, by kind and index.
    pub elements: Vec<ElementView>,
    /// The worker that saw them.
    pub seen_by: Option<String>,
    /// When (unix ms); 0 if no worker published yet.
    pub seen_ms: i64,
}

/// Reads and writes `reel_library_elements`.
#[derive(Debug, Clone)]
pub struct Inventory {
    db: Db,
}

const DOING: &str = "recording the library's elements";

impl Inventory {
    /// The inventory on this database.
    pub fn new(db: Db) -> Inventory {
        Inventory { db }
    }

    /// Replace the recorded elements of `library` with `elements`, seen now by `worker`.
    pub async fn publish(
        &self,
        worker: &str,
        library: &str,
        elements: &[ElementView],
    ) -> Result<()> {
        let now = now_ms();
        macro_rules! run {
            ($p:ident) => {{
                let mut tx = $p.begin_write().await.map_err(self.db.err(DOING))?;
                sqlx::query("DELETE FROM reel_library_elements WHERE library = $1")
                    .bind(library)
                    .execute(&mut *tx)
                    .await
                    .map_err(self.db.err(DOING))?;
                for e in elements {
                    sqlx::query(
                        "INSERT INTO reel_library_elements \
                         (library, kind, idx, address, barcode, flags, seen_by, seen_ms) \
                         VALUES ($8, $1, $2, $3, $4, $5, $6, $7) \
                         ON CONFLICT (library, kind, idx) DO NOTHING",
                    )
                    .bind(&e.kind)
                    .bind(i64::from(e.index))
                    .bind(i64::from(e.address))
                    .bind(e.barcode.as_deref())
                    .bind(i64::from(e.flags))
                    .bind(worker)
                    .bind(now)
                    .bind(library)
                    .execute(&mut *tx)
                    .await
                    .map_err(self.db.err(DOING))?;
                }
                tx.commit().await.map_err(self.db.err(DOING))
            }};
        }
        on_db!(&self.db, |p| run!(p))
    }

    /// The recorded elements.
    pub async fn read(&self) -> Result<InventoryView> {
        const READING: &str = "reading the library's elements";
        let sql = "SELECT library, kind, idx, address, barcode, flags, seen_by, seen_ms \
                   FROM reel_library_elements ORDER BY library, kind, idx";
        on_db!(&self.db, |p| {
            let rows = sqlx::query(sql)
                .fetch_all(p)
                .await
                .map_err(self.db.err(READING))?;
            let mut view = InventoryView {
                elements: Vec::with_capacity(rows.len()),
                seen_by: None,
                seen_ms: 0,
            };
            for r in rows {
                let flags: i64 = r.try_get("flags").map_err(self.db.err(READING))?;
                let flags = flags as u32;
                let seen_ms: i64 = r.try_get("seen_ms").map_err(self.db.err(READING))?;
                if seen_ms >= view.seen_ms {
                    view.seen_ms = seen_ms;
                    view.seen_by = Some(r.try_get("seen_by").map_err(self.db.err(READING))?);
                }
                let idx: i64 = r.try_get("idx").map_err(self.db.err(READING))?;
                let address: i64 = r.try_get("address").map_err(self.db.err(READING))?;
                view.elements.push(ElementView {
                    library: r.try_get("library").map_err(self.db.err(READING))?,
                    kind: r.try_get("kind").map_err(self.db.err(READING))?,
                    index: idx as u32,
                    address: address as u32,
                    barcode: r.try_get("barcode").map_err(self.db.err(READING))?,
                    full: flags & reel_plugin_abi::REEL_ELEMENT_FULL != 0,
                    flags,
                });
            }
            Ok(view)
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::db::testdb;

    fn slot(index: u32, barcode: Option<&str>) -> ElementView {
        ElementView {
            library: "lib".into(),
            kind: "slot".into(),
            index,
            address: 1000 + index,
            barcode: barcode.map(String::from),
            full: barcode.is_some(),
            flags: if barcode.is_some() {
                reel_plugin_abi::REEL_ELEMENT_FULL
            } else {
                0
            },
        }
    }

    #[tokio::test]
    async fn a_publish_replaces_what_was_seen() {
        let mut dbs = vec![testdb::sqlite().await];
        dbs.extend(testdb::postgres("inventory_publish_replaces").await);
        for t in dbs {
            let inv = Inventory::new(t.db.clone());
            assert_eq!(inv.read().await.unwrap().seen_ms, 0);
            inv.publish("w1", "lib", &[slot(0, Some("A00001L9")), slot(1, None)])
                .await
                .unwrap();
            let v = inv.read().await.unwrap();
            assert_eq!(v.elements.len(), 2);
            assert_eq!(v.elements[0].barcode.as_deref(), Some("A00001L9"));
            assert!(v.elements[0].full && !v.elements[1].full);
            assert_eq!(v.seen_by.as_deref(), Some("w1"));
            inv.publish("w2", "lib", &[slot(1, Some("A00001L9"))])
                .await
                .unwrap();
            let v = inv.read().await.unwrap();
            assert_eq!(v.elements, vec![slot(1, Some("A00001L9"))]);
            assert_eq!(v.seen_by.as_deref(), Some("w2"));
            // Another library's elements stand beside them.
            let mut other = slot(1, Some("B00001L9"));
            other.library = "other".into();
            inv.publish("w3", "other", std::slice::from_ref(&other))
                .await
                .unwrap();
            let v = inv.read().await.unwrap();
            assert_eq!(v.elements, vec![slot(1, Some("A00001L9")), other]);
        }
    }
}
