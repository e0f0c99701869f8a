//! Test harness: a fresh catalogue per test, on SQLite (a file in a temporary directory) or on
//! PostgreSQL (a schema with a random name in the database named by `REEL_TEST_POSTGRES_URL`,
//! dropped when the harness is dropped). Tests on one PostgreSQL database run in parallel
//! safely: each has its own schema, selected with the catalogue URL's `?schema=` parameter.
//!
//! When `REEL_TEST_POSTGRES_URL` is unset, [`postgres`] prints `SKIPPED: REEL_TEST_POSTGRES_URL
//! unset` to the real standard error (not the captured one) and returns `Ok(None)`; with
//! `CI=true` (or `CI=1`) it returns an error instead, and so does an unreachable server
//! whenever the variable is set: a PostgreSQL test never passes silently where it was asked for.
//!
//! Enabled in this crate's tests and, for other crates, with the `testing` feature.

use std::io::Write;

use sqlx::{AssertSqlSafe, Connection, PgConnection};
use tempfile::TempDir;

use super::backend::split_schema_param;
use super::{Catalogue, CatalogueError};

/// The environment variable naming the PostgreSQL test database.
pub const POSTGRES_URL_VAR: &str = "REEL_TEST_POSTGRES_URL";

/// The harness could not give a catalogue.
#[derive(Debug, thiserror::Error)]
pub enum HarnessError {
    /// PostgreSQL tests are required (CI) but not configured.
    #[error(
        "{POSTGRES_URL_VAR} is unset but CI is set: PostgreSQL tests must run in CI; set it to \
         e.g. postgres://postgres@127.0.0.1:5432/test"
    )]
    PostgresRequired,
    /// The test database could not be reached or prepared.
    #[error("PostgreSQL test database from {POSTGRES_URL_VAR}: {what}: {source}")]
    Postgres {
        /// What was being done.
        what: &'static str,
        /// The driver's error.
        #[source]
        source: sqlx::Error,
    },
    /// The temporary directory could not be made.
    #[error("cannot create a temporary directory for a test catalogue: {0}")]
    TempDir(#[source] std::io::Error),
    /// The catalogue did not open.
    #[error(transparent)]
    Catalogue(#[from] CatalogueError),
}

/// Where a test catalogue lives, and what to clean up.
#[derive(Debug)]
enum Place {
    /// The temporary directory holding the SQLite file (removed on drop).
    Sqlite(TempDir),
    /// The PostgreSQL schema (dropped on drop), and the URL to reach its database.
    Postgres { admin_url: String, schema: String },
}

/// A fresh catalogue for one test. Dropping it removes the SQLite directory or drops the
/// PostgreSQL schema.
#[derive(Debug)]
pub struct TestCatalogue {
    catalogue: Catalogue,
    url: String,
    place: Place,
}

impl TestCatalogue {
    /// The catalogue.
    pub fn catalogue(&self) -> &Catalogue {
        &self.catalogue
    }

    /// The URL that opens this same catalogue again (another pool, another process).
    pub fn url(&self) -> &str {
        &self.url
    }

    /// `"sqlite"` or `"postgres"`.
    pub fn backend(&self) -> &'static str {
        self.catalogue.backend()
    }

    /// The temporary directory holding the SQLite file (None on PostgreSQL); removed on drop.
    pub fn sqlite_dir(&self) -> Option<&std::path::Path> {
        match &self.place {
            Place::Sqlite(dir) => Some(dir.path()),
            Place::Postgres { .. } => None,
        }
    }

    /// The PostgreSQL schema of this catalogue (None on SQLite).
    pub fn schema(&self) -> Option<&str> {
        match &self.place {
            Place::Postgres { schema, .. } => Some(schema),
            Place::Sqlite(_) => None,
        }
    }
}

impl Drop for TestCatalogue {
    fn drop(&mut self) {
        if let Place::Postgres { admin_url, schema } = &self.place {
            drop_schema_blocking(admin_url, schema);
        }
        // A TempDir removes itself.
    }
}

/// Drop a test schema. Drop is not async: this runs on a thread with its own small runtime, so
/// it works inside or outside a tokio runtime, and even while a test unwinds.
fn drop_schema_blocking(admin_url: &str, schema: &str) {
    let admin_url = admin_url.to_string();
    let schema = schema.to_string();
    let joined = std::thread::spawn(move || {
        let rt = match tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
        {
            Ok(rt) => rt,
            Err(e) => {
                tracing::warn!(%schema, error = %e, "cannot drop test schema");
                return;
            }
        };
        rt.block_on(async {
            match PgConnection::connect(&admin_url).await {
                Ok(mut conn) => {
                    if let Err(e) = drop_schema(&mut conn, &schema).await {
                        tracing::warn!(%schema, error = %e, "cannot drop test schema");
                    }
                    let _ = conn.close().await;
                }
                Err(e) => tracing::warn!(%schema, error = %e, "cannot drop test schema"),
            }
        });
    })
    .join();
    if joined.is_err() {
        tracing::warn!("the thread dropping a test schema panicked");
    }
}

/// End the test catalogue's own sessions (tagged with the schema as `application_name`: a
/// transaction a failed test left open would block the drop), then drop the schema.
async fn drop_schema(conn: &mut PgConnection, schema: &str) -> Result<(), sqlx::Error> {
    sqlx::query("SET lock_timeout = '10s'")
        .execute(&mut *conn)
        .await?;
    sqlx::query(
        "SELECT pg_terminate_backend(pid) FROM pg_stat_activity \
         WHERE application_name = $1 AND pid <> pg_backend_pid()",
    )
    .bind(schema)
    .execute(&mut *conn)
    .await?;
    sqlx::query(AssertSqlSafe(format!(
        "DROP SCHEMA IF EXISTS \"{schema}\" CASCADE"
    )))
    .execute(&mut *conn)
    .await?;
    Ok(())
}

/// A fresh SQLite catalogue in a new temporary directory.
pub async fn sqlite() -> Result<TestCatalogue, HarnessError> {
    let dir = tempfile::Builder::new()
        .prefix("reel-catalogue-")
        .tempdir()
        .map_err(HarnessError::TempDir)?;
    let url = format!("sqlite:{}", dir.path().join("catalogue.db").display());
    let catalogue = Catalogue::open(&url).await?;
    Ok(TestCatalogue {
        catalogue,
        url,
        place: Place::Sqlite(dir),
    })
}

/// Whether the CI environment variable asks for every test to run.
fn in_ci() -> bool {
    std::env::var("CI").is_ok_and(|v| v.eq_ignore_ascii_case("true") || v == "1")
}

/// A fresh PostgreSQL catalogue in a new schema of the `REEL_TEST_POSTGRES_URL` database, or
/// `Ok(None)` (after a loud SKIPPED line) when the variable is unset outside CI.
pub async fn postgres() -> Result<Option<TestCatalogue>, HarnessError> {
    let admin_url = match std::env::var(POSTGRES_URL_VAR) {
        Ok(url) if !url.trim().is_empty() => url,
        _ => {
            if in_ci() {
                return Err(HarnessError::PostgresRequired);
            }
            // Straight to the process's stderr: the test harness does not capture this, so the
            // skip is seen even when the test passes.
            let _ = writeln!(
                std::io::stderr(),
                "SKIPPED: {POSTGRES_URL_VAR} unset (PostgreSQL catalogue test did not run)"
            );
            return Ok(None);
        }
    };
    let (admin_url, _) = split_schema_param(&admin_url)?;
    let schema = format!("reel_test_{}", uuid::Uuid::new_v4().simple());
    let mut conn =
        PgConnection::connect(&admin_url)
            .await
            .map_err(|source| HarnessError::Postgres {
                what: "cannot connect",
                source,
            })?;
    sqlx::query(AssertSqlSafe(format!("CREATE SCHEMA \"{schema}\"")))
        .execute(&mut conn)
        .await
        .map_err(|source| HarnessError::Postgres {
            what: "cannot create the test schema",
            source,
        })?;
    let _ = conn.close().await;
    let sep = if admin_url.contains('?') { '&' } else { '?' };
    let url = format!("{admin_url}{sep}schema={schema}&application_name={schema}");
    let catalogue = match Catalogue::open(&url).await {
        Ok(c) => c,
        Err(e) => {
            drop_schema_blocking(&admin_url, &schema);
            return Err(e.into());
        }
    };
    Ok(Some(TestCatalogue {
        catalogue,
        url,
        place: Place::Postgres { admin_url, schema },
    }))
}
