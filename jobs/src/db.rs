//! The connection to reel's own job tables: one schema, two backends (SQLite, PostgreSQL).
//!
//! SQLite opens the durable store file (`reel.db`, WAL, `synchronous=FULL`), never apalis's
//! `jobs.db` (which apalis sets to `synchronous=OFF`). The same SQL text serves both backends:
//! placeholders are written `$1, $2, …` which sqlx binds by number on SQLite too.

use std::str::FromStr;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use reel_engine::catalogue::{postgres_pool_options, postgres_session, vet_idle_connections};
use sqlx::postgres::PgConnectOptions;
use sqlx::sqlite::{SqliteConnectOptions, SqliteJournalMode, SqlitePoolOptions, SqliteSynchronous};
use sqlx::{PgPool, SqlitePool};

use crate::error::{JobsError, Result};

/// Table in which reel records its own job-table migrations (apart from the catalogue's and apalis's).
pub const MIGRATIONS_TABLE: &str = "_reel_jobs_migrations";

/// A pool on reel's job tables.
#[derive(Clone, Debug)]
pub enum Db {
    /// The embedded default.
    Sqlite(SqlitePool),
    /// Shared by many hosts.
    Postgres(PgPool),
}

/// Run the same sqlx code on whichever pool `db` holds (the body is compiled once per backend).
#[macro_export]
#[doc(hidden)]
macro_rules! on_db {
    ($db:expr, |$p:ident| $body:expr) => {
        match $db {
            $crate::db::Db::Sqlite($p) => $body,
            $crate::db::Db::Postgres($p) => $body,
        }
    };
}

/// The open lock of the SQLite file of `sqlite:PATH[?options]` (the catalogue's
/// `open_lock`): one process at a time connects and migrates it.
pub(crate) async fn sqlite_open_lock(path: &str) -> Result<reel_engine::catalogue::SqliteOpenLock> {
    let file = path.split('?').next().unwrap_or(path);
    reel_engine::catalogue::lock_sqlite_open(std::path::Path::new(file))
        .await
        .map_err(|source| JobsError::Io {
            doing: "taking the open lock of",
            path: file.into(),
            source,
        })
}

impl Db {
    /// Open `sqlite:PATH` (created if missing) or `postgres://…` and apply reel's migrations.
    pub async fn connect(url: &str) -> Result<Db> {
        // One process at a time connects and migrates a SQLite file (the catalogue's open
        // lock): held until the migrations below ran.
        let mut _open = None;
        let db = if let Some(path) = url.strip_prefix("sqlite:") {
            _open = Some(sqlite_open_lock(path).await?);
            let opts = SqliteConnectOptions::from_str(&format!("sqlite:{path}"))
                .map_err(|e| db_err("sqlite", format!("parsing url {url}"), e))?
                .create_if_missing(true)
                .journal_mode(SqliteJournalMode::Wal)
                .synchronous(SqliteSynchronous::Full)
                .foreign_keys(true)
                .busy_timeout(Duration::from_secs(30));
            let pool = vet_idle_connections(SqlitePoolOptions::new())
                .max_connections(4)
                .connect_with(opts)
                .await
                .map_err(|e| db_err("sqlite", format!("opening {path}"), e))?;
            Db::Sqlite(pool)
        } else if url.starts_with("postgres://") || url.starts_with("postgresql://") {
            let opts = postgres_session(
                PgConnectOptions::from_str(url)
                    .map_err(|e| db_err("postgres", format!("parsing url {}", redact(url)), e))?,
            );
            let pool = postgres_pool_options()
                .max_connections(8)
                .connect_with(opts)
                .await
                .map_err(|e| db_err("postgres", format!("connecting to {}", redact(url)), e))?;
            Db::Postgres(pool)
        } else {
            return Err(JobsError::Config {
                origin: "[store] url".into(),
                message: format!(
                    "`{}` is neither `sqlite:PATH` nor `postgres://…`",
                    redact(url)
                ),
            });
        };
        db.migrate().await?;
        Ok(db)
    }

    /// Wrap an existing PostgreSQL pool (e.g. the catalogue's) and migrate.
    pub async fn from_postgres(pool: PgPool) -> Result<Db> {
        let db = Db::Postgres(pool);
        db.migrate().await?;
        Ok(db)
    }

    /// Wrap an existing SQLite pool (e.g. the catalogue's) and migrate.
    pub async fn from_sqlite(pool: SqlitePool) -> Result<Db> {
        let db = Db::Sqlite(pool);
        db.migrate().await?;
        Ok(db)
    }

    /// `sqlite` or `postgres`.
    pub fn backend(&self) -> &'static str {
        match self {
            Db::Sqlite(_) => "sqlite",
            Db::Postgres(_) => "postgres",
        }
    }

    async fn migrate(&self) -> Result<()> {
        match self {
            Db::Sqlite(p) => {
                let mut m = sqlx::migrate!("./migrations/sqlite");
                m.dangerous_set_table_name(MIGRATIONS_TABLE);
                // Two processes opening a new file at once (a worker and a command) may both
                // try to apply the first migration; SQLite has no migration lock, so the loser
                // looks again once the winner has committed.
                let mut attempt = 0;
                loop {
                    match m.run(p).await {
                        Ok(()) => break,
                        Err(e) if attempt < 20 => {
                            attempt += 1;
                            tracing::debug!(error = %e, attempt, "migration raced another process; retrying");
                            tokio::time::sleep(std::time::Duration::from_millis(100)).await;
                        }
                        Err(e) => return Err(e.into()),
                    }
                }
            }
            Db::Postgres(p) => {
                let mut m = sqlx::migrate!("./migrations/postgres");
                m.dangerous_set_table_name(MIGRATIONS_TABLE);
                m.run(p).await?;
            }
        }
        Ok(())
    }

    /// Build the error for a failed statement on a named backend.
    pub(crate) fn err_static(
        backend: &'static str,
        doing: &'static str,
    ) -> impl FnOnce(sqlx::Error) -> JobsError {
        move |source| JobsError::Database {
            backend,
            doing: doing.to_string(),
            source,
        }
    }

    /// Build the error for a failed statement.
    pub(crate) fn err(&self, doing: impl Into<String>) -> impl FnOnce(sqlx::Error) -> JobsError {
        let backend = self.backend();
        let doing = doing.into();
        move |source| JobsError::Database {
            backend,
            doing,
            source,
        }
    }
}

pub(crate) fn db_err(backend: &'static str, doing: String, source: sqlx::Error) -> JobsError {
    JobsError::Database {
        backend,
        doing,
        source,
    }
}

/// Hide the password of a database URL before printing it.
pub fn redact(url: &str) -> String {
    match (url.find("://"), url.rfind('@')) {
        (Some(s), Some(at)) if at > s => {
            let userinfo = &url[s + 3..at];
            match userinfo.find(':') {
                Some(c) => format!("{}{}:***{}", &url[..s + 3], &userinfo[..c], &url[at..]),
                None => url.to_string(),
            }
        }
        _ => url.to_string(),
    }
}

/// Now, in unix milliseconds.
pub fn now_ms() -> i64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map(|d| d.as_millis() as i64)
        .unwrap_or(0)
}

#[cfg(test)]
pub(crate) mod testdb {
    //! Test databases: a fresh SQLite file, or a fresh PostgreSQL database per test.
    use super::*;

    /// A test database that lives as long as this value.
    pub struct TestDb {
        /// The pool.
        pub db: Db,
        /// URL of the database (for apalis and for reconnecting).
        pub url: String,
        _dir: Option<tempfile::TempDir>,
        drop_pg: Option<(String, String)>,
    }

    /// A fresh SQLite database in a temporary directory.
    pub async fn sqlite() -> TestDb {
        let dir = tempfile::tempdir().expect("tempdir");
        let url = format!("sqlite:{}", dir.path().join("reel.db").display());
        let db = Db::connect(&url).await.expect("open sqlite");
        TestDb {
            db,
            url,
            _dir: Some(dir),
            drop_pg: None,
        }
    }

    /// A fresh PostgreSQL database, or `None` (with a loud SKIPPED) when
    /// `REEL_TEST_POSTGRES_URL` is unset. Under `CI=true` a missing URL panics.
    pub async fn postgres(test: &str) -> Option<TestDb> {
        let Ok(base) = std::env::var("REEL_TEST_POSTGRES_URL") else {
            if std::env::var("CI").as_deref() == Ok("true") {
                panic!("REEL_TEST_POSTGRES_URL is unset under CI=true: {test} needs PostgreSQL");
            }
            // Written to the stderr handle, not eprintln!, so the test harness does not capture it.
            use std::io::Write;
            let _ = writeln!(
                std::io::stderr(),
                "*** SKIPPED {test} on PostgreSQL: set REEL_TEST_POSTGRES_URL=postgres://… (CI=true makes this a failure) ***"
            );
            return None;
        };
        let name = format!("reel_jobs_t_{}", uuid::Uuid::new_v4().simple());
        let admin = sqlx::PgPool::connect(&base)
            .await
            .expect("connect REEL_TEST_POSTGRES_URL");
        sqlx::query(sqlx::AssertSqlSafe(format!("CREATE DATABASE {name}")))
            .execute(&admin)
            .await
            .expect("create test database");
        admin.close().await;
        let url = replace_db_name(&base, &name);
        let db = Db::connect(&url).await.expect("open postgres test db");
        Some(TestDb {
            db,
            url,
            _dir: None,
            drop_pg: Some((base, name)),
        })
    }

    impl Drop for TestDb {
        /// Drop the test's PostgreSQL database (on a thread with its own runtime, since the
        /// test's runtime may be shutting down).
        fn drop(&mut self) {
            let Some((base, name)) = self.drop_pg.take() else {
                return;
            };
            let t = std::thread::spawn(move || {
                let Ok(rt) = tokio::runtime::Builder::new_current_thread()
                    .enable_all()
                    .build()
                else {
                    return;
                };
                rt.block_on(async {
                    if let Ok(admin) = sqlx::PgPool::connect(&base).await {
                        let _ = sqlx::query(sqlx::AssertSqlSafe(format!(
                            "DROP DATABASE IF EXISTS {name} WITH (FORCE)"
                        )))
                        .execute(&admin)
                        .await;
                        admin.close().await;
                    }
                });
            });
            let _ = t.join();
        }
    }

    /// Swap the database name in a PostgreSQL URL.
    pub fn replace_db_name(base: &str, name: &str) -> String {
        let (head, query) = match base.find('?') {
            Some(q) => (&base[..q], &base[q..]),
            None => (base, ""),
        };
        let after_scheme = head.find("://").map(|i| i + 3).unwrap_or(0);
        match head[after_scheme..].find('/') {
            Some(slash) => format!("{}/{name}{query}", &head[..after_scheme + slash]),
            None => format!("{head}/{name}{query}"),
        }
    }

    #[test]
    fn db_name_is_replaced() {
        assert_eq!(
            replace_db_name("postgres://u@h:5432/test", "x"),
            "postgres://u@h:5432/x"
        );
        assert_eq!(replace_db_name("postgres://u@h", "x"), "postgres://u@h/x");
        assert_eq!(
            replace_db_name("postgres://u@h/t?sslmode=disable", "x"),
            "postgres://u@h/x?sslmode=disable"
        );
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn password_is_redacted() {
        assert_eq!(redact("postgres://u:secret@h/db"), "postgres://u:***@h/db");
        assert_eq!(redact("postgres://u@h/db"), "postgres://u@h/db");
        assert_eq!(redact("sqlite:/x/reel.db"), "sqlite:/x/reel.db");
    }

    #[tokio::test]
    async fn sqlite_migrations_apply_twice() {
        let t = testdb::sqlite().await;
        // Reopening runs the migrator again: it must be a no-op.
        let again = Db::connect(&t.url).await.expect("reopen");
        assert_eq!(again.backend(), "sqlite");
    }

    #[tokio::test]
    async fn postgres_migrations_apply_twice() {
        let Some(t) = testdb::postgres("postgres_migrations_apply_twice").await else {
            return;
        };
        let again = Db::connect(&t.url).await.expect("reopen");
        assert_eq!(again.backend(), "postgres");
    }
}
