//! The catalogue: what is on which tape.
//!
//! One schema on two backends, both tested with every query:
//!
//! - **SQLite** (the default, one host): `sqlite:/path/to/catalogue.db`, one file created if
//!   missing, WAL with `synchronous=FULL` (every commit is on stable storage before it returns,
//!   so an acknowledged archive survives a power cut), foreign keys on, a 30 s busy timeout.
//! - **PostgreSQL** (many hosts): `postgres://user@host:5432/db`, a connection pool. Add
//!   `?schema=NAME` to keep the catalogue in its own schema: the schema is created if missing
//!   and every pooled connection sets `search_path` to it.
//!
//! The migrations are embedded in the binary and run by [`Catalogue::open`]; they are recorded
//! in their own table ([`MIGRATIONS_TABLE`]) so the jobs layer can run its own migrator in the
//! same database through [`Catalogue::pool_sqlite`] / [`Catalogue::pool_postgres`].
//!
//! **Visibility.** An object is reported as archived ([`Catalogue::object`],
//! [`Catalogue::list_objects`], [`Catalogue::count_objects`], [`Catalogue::copies`]) only through
//! a copy in a [`ContainerState::Durable`] or [`ContainerState::Verified`] container: a container
//! closed but not yet covered by a synchronous barrier reports nothing.
//!
//! **Guards.** The catalogue refuses what would let a later write destroy acknowledged data:
//! containers are created only at or after the recorded end of data of an active, labelled
//! cartridge, in file and block order; end of data never moves back over a durable container;
//! a cartridge holding live containers is never relabelled; a dead container never comes back.

mod backend;
mod cartridge;
mod cleaning;
mod close;
mod container;
mod deletion;
mod dump;
mod error;
mod health;
mod hold;
mod integrity;
mod object;
mod pool;
mod reclaim;
mod repack;
mod retention;
mod statistics;
#[cfg(test)]
mod test_support;
#[cfg(any(test, feature = "testing"))]
pub mod testing;
mod vault;
mod writer_lease;

pub use backend::MIGRATIONS_TABLE;
pub use cartridge::{Cartridge, CartridgeState, FIRST_CONTAINER_FILE, LABELLED_EOD_BLOCK, REEL};
pub use cleaning::{CleaningCartridge, CleaningOutcome, CleaningRecord};
pub use container::{Container, ContainerState};
pub use deletion::{DAY, DeleteBatch, DeleteScope, Recycled, Undeleted, quarantine_secs};
pub use error::{CatalogueError, Result, StoreFault};
pub use health::HealthRecord;
pub use hold::{HoldScope, LegalHold, MAX_REASON, check_reason, is_invisible};
pub use integrity::CatchRecord;
pub use object::{
    CopiedObject, CopyLocation, MAX_KEY_BYTES, NewCopy, Object, RESERVED_FIRST_SEGMENT,
    validate_key, validate_key_prefix,
};
pub use pool::StorageClass;
pub use reclaim::ReclaimCheck;
pub use repack::{CopyDrop, DropOutcome, LiveOn, PlacedCopy, TapePosition};
pub use retention::{ExpireBatch, Retained, retained_refusal};
pub use vault::{MAX_LOCATION, VaultEntry, check_location};
pub use writer_lease::WriterLease;

use backend::Backend;

/// The catalogue: a handle on its database. Cheap to clone (clones share the pool).
#[derive(Clone, Debug)]
pub struct Catalogue {
    backend: Backend,
    statistics: statistics::Statistics,
    /// Fences container closes and durable/verified transitions (`writer_lease`).
    writer: Option<std::sync::Arc<WriterLease>>,
}

impl Catalogue {
    /// Open the catalogue at `url` and bring its schema up to date.
    ///
    /// `url` is `sqlite:PATH` (the file is created if missing; its directory must exist) or
    /// `postgres://…` / `postgresql://…`, optionally with `?schema=NAME` (1 to 63 characters of
    /// `a-z 0-9 _`), which puts the catalogue's tables in that schema, created if missing.
    pub async fn open(url: &str) -> Result<Catalogue> {
        Ok(Catalogue {
            backend: backend::connect(url).await?,
            statistics: statistics::Statistics::default(),
            writer: None,
        })
    }

    /// `"sqlite"` or `"postgres"`.
    pub fn backend(&self) -> &'static str {
        match self.backend {
            Backend::Sqlite(_) => "sqlite",
            Backend::Postgres(_) => "postgres",
        }
    }

    /// The SQLite pool, for the jobs layer's own tables in the same file (None on PostgreSQL).
    /// Keep writes short: SQLite has one writer at a time.
    pub fn pool_sqlite(&self) -> Option<&sqlx::SqlitePool> {
        match &self.backend {
            Backend::Sqlite(p) => Some(p),
            Backend::Postgres(_) => None,
        }
    }

    /// The PostgreSQL pool, for the jobs layer's own tables in the same database (None on
    /// SQLite). With `?schema=NAME`, its connections' `search_path` is that schema.
    pub fn pool_postgres(&self) -> Option<&sqlx::PgPool> {
        match &self.backend {
            Backend::Postgres(p) => Some(p),
            Backend::Sqlite(_) => None,
        }
    }

    /// Close the pool: wait for connections in use to come back, then close them all. Other
    /// clones of this catalogue can no longer be used afterwards.
    pub async fn close(&self) {
        match &self.backend {
            Backend::Sqlite(p) => p.close().await,
            Backend::Postgres(p) => p.close().await,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::test_support::{TestResult, cat, container_with, copy, labelled, on_both_backends};
    use super::testing::{self, TestCatalogue};
    use super::*;

    on_both_backends!(
        every_pooled_connection_is_configured,
        data_survives_reopening_and_migrations_are_recorded,
        writers_in_parallel_all_commit,
    );

    async fn every_pooled_connection_is_configured(db: &TestCatalogue) -> TestResult {
        let c = cat(db);
        // Hold several connections at once so the pool opens more than one.
        match (c.pool_sqlite(), c.pool_postgres()) {
            (Some(pool), None) => {
                assert_eq!(c.backend(), "sqlite");
                let mut held = Vec::new();
                for _ in 0..3 {
                    held.push(pool.acquire().await?);
                }
                for conn in &mut held {
                    let p = backend::sqlite_pragmas(conn).await?;
                    assert_eq!(
                        p,
                        backend::SqlitePragmas {
                            journal_mode: "wal".into(),
                            synchronous: 2,
                            foreign_keys: 1
                        }
                    );
                }
            }
            (None, Some(pool)) => {
                assert_eq!(c.backend(), "postgres");
                let schema = db.schema().ok_or("no schema")?;
                let mut held = Vec::new();
                for _ in 0..3 {
                    held.push(pool.acquire().await?);
                }
                for conn in &mut held {
                    let current: String = sqlx::query_scalar("SELECT current_schema()")
                        .fetch_one(&mut **conn)
                        .await?;
                    assert_eq!(current, schema);
                }
            }
            _ => return Err("exactly one pool accessor must answer".into()),
        }
        Ok(())
    }

    async fn data_survives_reopening_and_migrations_are_recorded(db: &TestCatalogue) -> TestResult {
        let c = cat(db);
        labelled(c, "R1", "p").await?;
        container_with(
            c,
            "R1",
            &[copy("kept", 1, 0, 10, 1)],
            ContainerState::Durable,
        )
        .await?;
        let again = Catalogue::open(db.url()).await?; // migrations run again: a no-op
        assert_eq!(again.object("kept").await?.map(|o| o.generation), Some(1));
        let applied: i64 = match (again.pool_sqlite(), again.pool_postgres()) {
            (Some(p), _) => {
                sqlx::query_scalar("SELECT COUNT(*) FROM _reel_catalogue_migrations WHERE success")
                    .fetch_one(p)
                    .await?
            }
            (_, Some(p)) => {
                sqlx::query_scalar("SELECT COUNT(*) FROM _reel_catalogue_migrations WHERE success")
                    .fetch_one(p)
                    .await?
            }
            _ => return Err("no pool".into()),
        };
        // 0001, 0003 (object metadata), 0004 (the writer lease table), 0005 (the integrity
        // log), 0006 (cartridge state notes), 0007 (cartridge health), 0008 (the vault), 0009
        // (cleaning), 0010 (last read), 0011 (drives' error counters) and 0012 (labels
        // unchecked since a vault), 0013 (deletions and legal holds); PostgreSQL has one more:
        // copies' references checked per statement (0002).
        let expected = if again.pool_postgres().is_some() {
            13
        } else {
            12
        };
        assert_eq!(applied, expected);
        again.close().await;
        c.close().await;
        let third = Catalogue::open(db.url()).await?;
        assert_eq!(third.count_objects().await?, 1);
        third.close().await;
        Ok(())
    }

    async fn writers_in_parallel_all_commit(db: &TestCatalogue) -> TestResult {
        let c = cat(db);
        let mut tasks = Vec::new();
        for w in 0..6u32 {
            let c = c.clone();
            tasks.push(tokio::spawn(async move {
                let barcode = format!("PAR{w:03}");
                labelled(&c, &barcode, "p").await?;
                for i in 0..5u32 {
                    let key = format!("w{w}/{i}");
                    container_with(
                        &c,
                        &barcode,
                        &[copy(&key, 1, 0, 10, w * 100 + i)],
                        ContainerState::Durable,
                    )
                    .await?;
                }
                TestResult::Ok(())
            }));
        }
        for t in tasks {
            t.await??;
        }
        assert_eq!(c.count_objects().await?, 30);
        Ok(())
    }

    #[tokio::test]
    async fn bad_urls_say_what_to_give() -> TestResult {
        let dir = tempfile::tempdir()?;
        let missing = dir.path().join("no/such/dir/c.db");
        for (url, expect) in [
            ("mysql://h/db".to_string(), "unknown scheme"),
            ("sqlite::memory:".to_string(), "in-memory"),
            (format!("sqlite:{}", missing.display()), "does not exist"),
            ("postgres://u:pw@h/db?schema=Bad".to_string(), "schema name"),
        ] {
            let e = Catalogue::open(&url).await.unwrap_err();
            let msg = e.to_string();
            assert!(msg.contains(expect), "{url}: {msg}");
            assert!(!msg.contains(":pw@"), "password leaked: {msg}");
        }
        // A server that is not there: an Open error naming what to check, password hidden.
        let e = Catalogue::open("postgres://u:pw@127.0.0.1:1/db")
            .await
            .unwrap_err();
        assert!(matches!(e, CatalogueError::Open { .. }), "{e}");
        assert!(e.to_string().contains("u:***@127.0.0.1:1"), "{e}");
        Ok(())
    }

    #[tokio::test]
    async fn sqlite_file_is_created_and_reused() -> TestResult {
        let dir = tempfile::tempdir()?;
        let path = dir.path().join("catalogue.db");
        let url = format!("sqlite:{}", path.display());
        let c = Catalogue::open(&url).await?;
        assert!(path.exists());
        c.add_cartridge("F1", false, 1).await?;
        c.close().await;
        let c = Catalogue::open(&url).await?;
        assert!(c.cartridge("F1").await?.is_some());
        Ok(())
    }

    #[tokio::test]
    async fn postgres_schemas_keep_catalogues_apart() -> TestResult {
        let (Some(a), Some(b)) = (testing::postgres().await?, testing::postgres().await?) else {
            return Ok(());
        };
        a.catalogue().add_cartridge("ONLYA", false, 1).await?;
        assert!(b.catalogue().cartridge("ONLYA").await?.is_none());
        assert_ne!(a.schema(), b.schema());
        Ok(())
    }
}
