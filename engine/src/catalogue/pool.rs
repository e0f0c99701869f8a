//! Pools (sets of cartridges that take the same copy) and storage classes (how many copies an
//! object gets: one per pool, copy `i` in `pools[i]`).

use serde::Serialize;

use super::Catalogue;
use super::backend::{in_write_tx, now_unix, on_pool};
use super::error::{CatalogueError, DbContext, Result};

/// How many copies an object of a class gets, and where: copy `i` goes to `pools[i]`.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct StorageClass {
    /// The class name.
    pub name: String,
    /// The pool of each copy, in copy order; never empty, no pool twice.
    pub pools: Vec<String>,
}

/// Longest pool or storage class name.
const MAX_NAME_LEN: usize = 64;

/// Pool and storage class names: 1 to 64 characters of `A-Z a-z 0-9 . _ -`, so they are safe in
/// file names, URLs, metrics labels and config keys.
pub(crate) fn validate_name(what: &'static str, name: &str) -> Result<()> {
    let ok = !name.is_empty()
        && name.len() <= MAX_NAME_LEN
        && name
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || matches!(c, '.' | '_' | '-'));
    if ok {
        Ok(())
    } else {
        Err(CatalogueError::InvalidInput {
            what,
            value: super::error::shorten(name),
            reason: format!(
                "use 1 to {MAX_NAME_LEN} characters of letters, digits, '.', '_' and '-'"
            ),
        })
    }
}

impl Catalogue {
    /// Create the pool if it does not exist.
    pub async fn ensure_pool(&self, name: &str) -> Result<()> {
        const OP: &str = "ensure_pool";
        validate_name("pool name", name)?;
        on_pool!(&self.backend, |pool| {
            sqlx::query(
                "INSERT INTO pools (name, created_unix) VALUES ($1, $2) ON CONFLICT (name) DO NOTHING",
            )
            .bind(name)
            .bind(now_unix())
            .execute(pool)
            .await
            .ctx(OP)?;
        });
        Ok(())
    }

    /// Create or update a storage class: one copy per pool, copy `i` in `pools[i]`. Pools that
    /// do not exist are created. An existing class gets exactly this list of pools.
    pub async fn ensure_storage_class(&self, name: &str, pools: &[String]) -> Result<()> {
        const OP: &str = "ensure_storage_class";
        validate_name("storage class name", name)?;
        if pools.is_empty() {
            return Err(CatalogueError::InvalidInput {
                what: "storage class",
                value: name.to_string(),
                reason: "it names no pool; give one pool per copy".into(),
            });
        }
        for (i, p) in pools.iter().enumerate() {
            validate_name("pool name", p)?;
            if pools[..i].contains(p) {
                return Err(CatalogueError::InvalidInput {
                    what: "storage class",
                    value: name.to_string(),
                    reason: format!(
                        "pool {p:?} is named twice; each copy needs its own pool so that copies \
                         never share cartridges"
                    ),
                });
            }
        }
        let now = now_unix();
        in_write_tx!(&self.backend, OP, |tx| {
            sqlx::query(
                "INSERT INTO storage_classes (name, created_unix) VALUES ($1, $2) \
                 ON CONFLICT (name) DO NOTHING",
            )
            .bind(name)
            .bind(now)
            .execute(&mut *tx)
            .await
            .ctx(OP)?;
            sqlx::query("DELETE FROM storage_class_pools WHERE storage_class = $1")
                .bind(name)
                .execute(&mut *tx)
                .await
                .ctx(OP)?;
            for (index, p) in pools.iter().enumerate() {
                sqlx::query(
                    "INSERT INTO pools (name, created_unix) VALUES ($1, $2) \
                     ON CONFLICT (name) DO NOTHING",
                )
                .bind(p)
                .bind(now)
                .execute(&mut *tx)
                .await
                .ctx(OP)?;
                let index = i32::try_from(index).map_err(|_| CatalogueError::InvalidInput {
                    what: "storage class",
                    value: name.to_string(),
                    reason: "too many copies".into(),
                })?;
                sqlx::query(
                    "INSERT INTO storage_class_pools (storage_class, copy_index, pool) \
                     VALUES ($1, $2, $3)",
                )
                .bind(name)
                .bind(index)
                .bind(p)
                .execute(&mut *tx)
                .await
                .ctx(OP)?;
            }
        });
        Ok(())
    }

    /// The storage class `name`, if it exists.
    pub async fn storage_class(&self, name: &str) -> Result<Option<StorageClass>> {
        const OP: &str = "storage_class";
        let rows: Vec<(String, String)> = on_pool!(&self.backend, |pool| {
            sqlx::query_as(
                "SELECT storage_class, pool FROM storage_class_pools \
                 WHERE storage_class = $1 ORDER BY copy_index",
            )
            .bind(name)
            .fetch_all(pool)
            .await
            .ctx(OP)?
        });
        Ok(group_classes(rows).pop())
    }

    /// Every storage class, by name.
    pub async fn storage_classes(&self) -> Result<Vec<StorageClass>> {
        const OP: &str = "storage_classes";
        let rows: Vec<(String, String)> = on_pool!(&self.backend, |pool| {
            sqlx::query_as(
                "SELECT storage_class, pool FROM storage_class_pools \
                 ORDER BY storage_class, copy_index",
            )
            .fetch_all(pool)
            .await
            .ctx(OP)?
        });
        Ok(group_classes(rows))
    }

    /// Whether the pool exists.
    pub async fn pool_exists(&self, name: &str) -> Result<bool> {
        const OP: &str = "pool_exists";
        let n: i64 = on_pool!(&self.backend, |pool| {
            sqlx::query_scalar("SELECT COUNT(*) FROM pools WHERE name = $1")
                .bind(name)
                .fetch_one(pool)
                .await
                .ctx(OP)?
        });
        Ok(n > 0)
    }
}

/// Fold (class, pool) rows, ordered by class then copy, into classes.
fn group_classes(rows: Vec<(String, String)>) -> Vec<StorageClass> {
    let mut out: Vec<StorageClass> = Vec::new();
    for (class, pool) in rows {
        match out.last_mut() {
            Some(last) if last.name == class => last.pools.push(pool),
            _ => out.push(StorageClass {
                name: class,
                pools: vec![pool],
            }),
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::catalogue::test_support::{TestResult, cat, on_both_backends};
    use crate::catalogue::testing::TestCatalogue;

    on_both_backends!(
        pools_are_idempotent_and_names_checked,
        storage_classes_replace_their_pools
    );

    async fn pools_are_idempotent_and_names_checked(db: &TestCatalogue) -> TestResult {
        let c = cat(db);
        c.ensure_pool("lto9-a").await?;
        c.ensure_pool("lto9-a").await?;
        assert!(c.pool_exists("lto9-a").await?);
        assert!(!c.pool_exists("lto9-b").await?);
        for bad in ["", "has space", "slash/y", &"x".repeat(65), "naïve"] {
            let e = c.ensure_pool(bad).await.unwrap_err();
            assert!(
                matches!(
                    e,
                    CatalogueError::InvalidInput {
                        what: "pool name",
                        ..
                    }
                ),
                "{bad:?}: {e}"
            );
        }
        Ok(())
    }

    async fn storage_classes_replace_their_pools(db: &TestCatalogue) -> TestResult {
        let c = cat(db);
        assert_eq!(c.storage_class("gold").await?, None);
        assert!(c.storage_classes().await?.is_empty());
        c.ensure_storage_class("gold", &["p1".into(), "p2".into()])
            .await?;
        // The pools were created.
        assert!(c.pool_exists("p1").await? && c.pool_exists("p2").await?);
        assert_eq!(
            c.storage_class("gold").await?,
            Some(StorageClass {
                name: "gold".into(),
                pools: vec!["p1".into(), "p2".into()]
            })
        );
        // Replacing changes order and count.
        c.ensure_storage_class("gold", &["p3".into(), "p1".into(), "p2".into()])
            .await?;
        c.ensure_storage_class("bronze", &["p1".into()]).await?;
        let all = c.storage_classes().await?;
        assert_eq!(
            all,
            vec![
                StorageClass {
                    name: "bronze".into(),
                    pools: vec!["p1".into()]
                },
                StorageClass {
                    name: "gold".into(),
                    pools: vec!["p3".into(), "p1".into(), "p2".into()]
                },
            ]
        );
        // Refused, and the class is unchanged.
        let e = c
            .ensure_storage_class("gold", &["p1".into(), "p1".into()])
            .await
            .unwrap_err();
        assert!(e.to_string().contains("named twice"), "{e}");
        let e = c.ensure_storage_class("gold", &[]).await.unwrap_err();
        assert!(e.to_string().contains("no pool"), "{e}");
        let e = c
            .ensure_storage_class("gold", &["ok".into(), "bad name".into()])
            .await
            .unwrap_err();
        assert!(matches!(e, CatalogueError::InvalidInput { .. }), "{e}");
        assert_eq!(
            c.storage_class("gold").await?.map(|s| s.pools.len()),
            Some(3)
        );
        assert!(!c.pool_exists("ok").await?);
        Ok(())
    }
}
