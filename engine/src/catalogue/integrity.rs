//! The integrity log (`integrity_catches`): every failed check a session reported
//! ([`crate::integrity`]), appended, listed by cartridge.

use std::collections::BTreeMap;

use serde::Serialize;

use super::Catalogue;
use super::backend::{from_db, on_pool, to_db};
use super::error::{CatalogueError, DbContext, Result};
use crate::integrity::{Catch, CatchKind};

/// A catch as the catalogue keeps it.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct CatchRecord {
    /// Its number (ascending in the order they were recorded).
    pub id: i64,
    /// When it was recorded, milliseconds since the Unix epoch.
    pub at_ms: i64,
    /// What was caught.
    #[serde(flatten)]
    pub catch: Catch,
}

#[derive(sqlx::FromRow)]
struct CatchRow {
    id: i64,
    barcode: String,
    drive: i64,
    kind: String,
    first_block: i64,
    last_block: i64,
    container_id: Option<i64>,
    detail: String,
    at_ms: i64,
}

/// Longest detail kept (a plugin's report can be long).
const MAX_DETAIL: usize = 1000;

impl Catalogue {
    /// Append a catch.
    pub async fn record_catch(&self, c: &Catch) -> Result<()> {
        const OP: &str = "record_catch";
        let now = super::writer_lease::now_ms();
        let mut detail = c.detail.clone();
        if detail.len() > MAX_DETAIL {
            let mut cut = MAX_DETAIL;
            while !detail.is_char_boundary(cut) {
                cut -= 1;
            }
            detail.truncate(cut);
        }
        let first = to_db("first_block", c.first_block)?;
        let last = to_db("last_block", c.last_block.max(c.first_block))?;
        on_pool!(&self.backend, |pool| {
            sqlx::query(
                "INSERT INTO integrity_catches (barcode, drive, kind, first_block, last_block, \
                 container_id, detail, at_ms) VALUES ($1, $2, $3, $4, $5, $6, $7, $8)",
            )
            .bind(&c.barcode)
            .bind(i64::from(c.drive))
            .bind(c.kind.as_str())
            .bind(first)
            .bind(last)
            .bind(c.container_id)
            .bind(&detail)
            .bind(now)
            .execute(pool)
            .await
            .ctx(OP)?;
        });
        Ok(())
    }

    /// The catches recorded, oldest first: of one cartridge, or all; at most `limit`, after
    /// the one numbered `after` (0: from the start).
    pub async fn catches(
        &self,
        barcode: Option<&str>,
        after: i64,
        limit: u64,
    ) -> Result<Vec<CatchRecord>> {
        const OP: &str = "catches";
        // More than the table can hold is all of it.
        let limit = i64::try_from(limit).unwrap_or(i64::MAX);
        let rows: Vec<CatchRow> = on_pool!(&self.backend, |pool| {
            sqlx::query_as(
                "SELECT id, barcode, drive, kind, first_block, last_block, container_id, detail, \
                 at_ms FROM integrity_catches WHERE ($1 IS NULL OR barcode = $1) AND id > $2 \
                 ORDER BY id LIMIT $3",
            )
            .bind(barcode)
            .bind(after)
            .bind(limit)
            .fetch_all(pool)
            .await
            .ctx(OP)?
        });
        rows.into_iter()
            .map(|r| {
                let kind = CatchKind::parse(&r.kind).ok_or_else(|| CatalogueError::Corrupt {
                    what: format!("integrity catch {} has kind {:?}", r.id, r.kind),
                })?;
                Ok(CatchRecord {
                    id: r.id,
                    at_ms: r.at_ms,
                    catch: Catch {
                        barcode: r.barcode,
                        drive: u32::try_from(r.drive).map_err(|_| CatalogueError::Corrupt {
                            what: format!("integrity catch {} has drive {}", r.id, r.drive),
                        })?,
                        kind,
                        first_block: from_db("catch first_block", r.first_block)?,
                        last_block: from_db("catch last_block", r.last_block)?,
                        container_id: r.container_id,
                        detail: r.detail,
                    },
                })
            })
            .collect()
    }

    /// How many catches each cartridge has (of one cartridge, or of all), by barcode: the
    /// `errors` of `reel cartridge ls|show`. Cartridges with none are absent.
    pub async fn catch_counts(&self, barcode: Option<&str>) -> Result<BTreeMap<String, u64>> {
        const OP: &str = "catch_counts";
        let rows: Vec<(String, i64)> = on_pool!(&self.backend, |pool| {
            sqlx::query_as(
                "SELECT barcode, COUNT(*) FROM integrity_catches \
                 WHERE ($1 IS NULL OR barcode = $1) GROUP BY barcode",
            )
            .bind(barcode)
            .fetch_all(pool)
            .await
            .ctx(OP)?
        });
        rows.into_iter()
            .map(|(b, n)| Ok((b, from_db("catch count", n)?)))
            .collect()
    }
}

#[cfg(test)]
mod tests {
    use crate::catalogue::test_support::{TestResult, cat, on_both_backends};
    use crate::catalogue::testing::TestCatalogue;
    use crate::integrity::{Catch, CatchKind};

    on_both_backends!(catches_are_kept_in_order_and_listed_by_cartridge);

    async fn catches_are_kept_in_order_and_listed_by_cartridge(db: &TestCatalogue) -> TestResult {
        let c = cat(db);
        for (bc, kind, block) in [
            ("RL0001L9", CatchKind::LbpOnRead, 12),
            ("RL0002L9", CatchKind::Content, 40),
            ("RL0001L9", CatchKind::MediumError, 99),
        ] {
            c.record_catch(&Catch {
                barcode: bc.into(),
                drive: 1,
                kind,
                first_block: block,
                last_block: block + 3,
                container_id: Some(5),
                detail: "x".repeat(5000),
            })
            .await?;
        }
        let all = c.catches(None, 0, 100).await?;
        assert_eq!(all.len(), 3);
        assert!(all.windows(2).all(|w| w[0].id < w[1].id));
        assert_eq!(all[0].catch.detail.len(), 1000, "details are bounded");
        let one = c.catches(Some("RL0001L9"), 0, 100).await?;
        let kinds: Vec<_> = one.iter().map(|r| r.catch.kind).collect();
        assert_eq!(kinds, vec![CatchKind::LbpOnRead, CatchKind::MediumError]);
        assert_eq!(
            (one[1].catch.first_block, one[1].catch.last_block),
            (99, 102)
        );
        let after = c.catches(None, all[0].id, 1).await?;
        assert_eq!(after.len(), 1);
        assert_eq!(after[0].catch.barcode, "RL0002L9");
        let counts = c.catch_counts(None).await?;
        assert_eq!(counts.get("RL0001L9"), Some(&2));
        assert_eq!(counts.get("RL0002L9"), Some(&1));
        assert_eq!(counts.len(), 2);
        let one = c.catch_counts(Some("RL0002L9")).await?;
        assert_eq!(
            one.into_iter().collect::<Vec<_>>(),
            vec![("RL0002L9".into(), 1)]
        );
        assert!(c.catch_counts(Some("RL0009L9")).await?.is_empty());
        Ok(())
    }
}
