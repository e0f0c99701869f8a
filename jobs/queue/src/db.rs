//! The connection to reel's own job tables: one schema, two backends (SQLite, PostgreSQL).
//!
//! SQLite opens the durable store file (`reel.db`, WAL, `synchronous=FULL`), never apalis's
//! `jobs.db` (which apalis sets to `synchronous=OFF`). The same SQL text serves both backends:
//! placeholders are written `$1, $2, …` which sqlx binds by number on SQLite too.

use std::str::FromStr;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use reel_engine::database::{
    discard_unclean_sqlite, postgres_pool_options, postgres_session, vet_idle_connections,
};
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

/// A transaction that will write. On SQLite it is `BEGIN IMMEDIATE`: the write lock is taken
/// at the start (waiting out the busy timeout), so a read followed by a write in it cannot fail
/// at once with `SQLITE_BUSY` because another writer committed in between (a deferred
/// transaction's read snapshot cannot be upgraded then). On PostgreSQL it is a plain `BEGIN`
/// (row locks and the statements' own conditions serialise the writers).
pub(crate) trait BeginWrite {
    /// The database.
    type Database: sqlx::Database;
    /// Begin the transaction.
    fn begin_write(
        &self,
    ) -> impl std::future::Future<
        Output = std::result::Result<sqlx::Transaction<'static, Self::Database>, sqlx::Error>,
    > + Send;
}

impl BeginWrite for SqlitePool {
    type Database = sqlx::Sqlite;
    fn begin_write(
        &self,
    ) -> impl std::future::Future<
        Output = std::result::Result<sqlx::Transaction<'static, sqlx::Sqlite>, sqlx::Error>,
    > + Send {
        self.begin_with("BEGIN IMMEDIATE")
    }
}

impl BeginWrite for PgPool {
    type Database = sqlx::Postgres;
    fn begin_write(
        &self,
    ) -> impl std::future::Future<
        Output = std::result::Result<sqlx::Transaction<'static, sqlx::Postgres>, sqlx::Error>,
    > + Send {
        self.begin()
    }
}

/// The open lock of the SQLite file of `sqlite:PATH[?options]` (the catalogue's
/// `open_lock`): one process at a time connects and migrates it.
pub(crate) async fn sqlite_open_lock(path: &str) -> Result<reel_engine::database::SqliteOpenLock> {
    let file = path.split('?').next().unwrap_or(path);
    reel_engine::database::lock_sqlite_open(std::path::Path::new(file))
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
                .map_err(|e| db_err("sqlite", path, format!("parsing url {url}"), e))?
                .create_if_missing(true)
                .journal_mode(SqliteJournalMode::Wal)
                .synchronous(SqliteSynchronous::Full)
                .foreign_keys(true)
                .busy_timeout(Duration::from_secs(30));
            let pool = discard_unclean_sqlite(vet_idle_connections(SqlitePoolOptions::new()))
                .max_connections(4)
                .connect_with(opts)
                .await
                .map_err(|e| db_err("sqlite", path, format!("opening {path}"), e))?;
            Db::Sqlite(pool)
        } else if url.starts_with("postgres://") || url.starts_with("postgresql://") {
            let opts = postgres_session(PgConnectOptions::from_str(url).map_err(|e| {
                db_err(
                    "postgres",
                    redact(url),
                    format!("parsing url {}", redact(url)),
                    e,
                )
            })?);
            let pool = postgres_pool_options()
                .max_connections(8)
                .connect_with(opts)
                .await
                .map_err(|e| {
                    db_err(
                        "postgres",
                        redact(url),
                        format!("connecting to {}", redact(url)),
                        e,
                    )
                })?;
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

    /// Build the error for a failed statement on a named backend and database.
    pub(crate) fn err_at(
        backend: &'static str,
        location: impl Into<String>,
        doing: &'static str,
    ) -> impl FnOnce(sqlx::Error) -> JobsError {
        let location = location.into();
        move |source| db_err(backend, location, doing.to_string(), source)
    }

    /// Build the error for a failed statement (naming the database only when it fails).
    pub(crate) fn err(&self, doing: impl Into<String>) -> impl FnOnce(sqlx::Error) -> JobsError {
        let db = self.clone();
        let doing = doing.into();
        move |source| db_err(db.backend(), db.location(), doing, source)
    }

    /// The database, for messages: the SQLite file, or PostgreSQL's `host:port/database`.
    pub fn location(&self) -> String {
        match self {
            Db::Sqlite(p) => sqlite_location(p),
            Db::Postgres(p) => postgres_location(p),
        }
    }

    /// Probe that the store takes a write (`GET /healthz`): one upsert of the one row of
    /// `reel_health`, committed, so a full disk, a held write lock or a read-only file shows
    /// here rather than in the next job. Gives up after `within` (the busy timeout is 30 s;
    /// a health check must answer sooner).
    pub async fn probe_write(&self, within: Duration) -> Result<()> {
        const DOING: &str = "probing that the store takes a write";
        let sql = "INSERT INTO reel_health (id, probed_ms) VALUES (1, $1) \
                   ON CONFLICT (id) DO UPDATE SET probed_ms = excluded.probed_ms";
        let now = now_ms();
        let write = async {
            crate::on_db!(self, |p| sqlx::query(sql)
                .bind(now)
                .execute(p)
                .await
                .map(|_| ())
                .map_err(self.err(DOING)))
        };
        match tokio::time::timeout(within, write).await {
            Ok(r) => r,
            Err(_) => Err(JobsError::Database {
                backend: self.backend(),
                location: self.location(),
                doing: DOING.into(),
                source: sqlx::Error::Io(std::io::Error::new(
                    std::io::ErrorKind::TimedOut,
                    format!(
                        "no write went through within {} ms: another connection holds the write lock, or the database stalls",
                        within.as_millis()
                    ),
                )),
            }),
        }
    }
}

/// A SQLite pool's file, for messages.
pub(crate) fn sqlite_location(p: &SqlitePool) -> String {
    p.connect_options().get_filename().display().to_string()
}

/// A PostgreSQL pool's `host:port/database`, for messages (no user, no password).
pub(crate) fn postgres_location(p: &PgPool) -> String {
    let o = p.connect_options();
    format!(
        "{}:{}/{}",
        o.get_host(),
        o.get_port(),
        o.get_database().unwrap_or("")
    )
}

pub(crate) fn db_err(
    backend: &'static str,
    location: impl Into<String>,
    doing: String,
    source: sqlx::Error,
) -> JobsError {
    JobsError::Database {
        backend,
        location: location.into(),
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

#[cfg(any(test, feature = "testing"))]
pub mod testdb {
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
    use reel_engine::catalogue::StoreFault;

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

    /// A one-connection pool on the test file with the policy of [`Db::connect`], and
    /// `pragma` run on its connection.
    async fn one_connection(url: &str, pragma: Option<&'static str>) -> SqlitePool {
        let opts = SqliteConnectOptions::from_str(url)
            .unwrap()
            .journal_mode(SqliteJournalMode::Wal)
            .busy_timeout(Duration::from_secs(30));
        discard_unclean_sqlite(vet_idle_connections(SqlitePoolOptions::new()))
            .max_connections(1)
            .after_connect(move |conn, _| {
                Box::pin(async move {
                    if let Some(p) = pragma {
                        sqlx::query(p).execute(conn).await?;
                    }
                    Ok(())
                })
            })
            .connect_with(opts)
            .await
            .unwrap()
    }

    /// Another process's view: one fresh connection that waits at most 1 s for the write lock.
    async fn other_writer(url: &str) -> sqlx::SqliteConnection {
        use sqlx::ConnectOptions;
        SqliteConnectOptions::from_str(url)
            .unwrap()
            .busy_timeout(Duration::from_secs(1))
            .connect()
            .await
            .unwrap()
    }

    /// A transaction that SQLite rolled back by itself (as it may on a full disk) must not
    /// leave its connection out of step with sqlx: without the pool's release check the next
    /// transaction on it was a SAVEPOINT whose failure left the transaction open, and the idle
    /// connection held SQLite's write lock ("database is locked" for every other writer until
    /// the process restarted).
    #[tokio::test]
    async fn a_failed_transaction_leaves_no_write_lock_behind() {
        let t = testdb::sqlite().await;
        let pool = one_connection(&t.url, None).await;
        for ddl in [
            "CREATE TABLE t_fault (x TEXT)",
            "CREATE TRIGGER t_fault_rollback BEFORE INSERT ON t_fault WHEN NEW.x = 'rollback' \
             BEGIN SELECT RAISE(ROLLBACK, 'simulated failure that ends the transaction'); END",
            "CREATE TRIGGER t_fault_abort BEFORE INSERT ON t_fault WHEN NEW.x = 'abort' \
             BEGIN SELECT RAISE(ABORT, 'simulated failure of one statement'); END",
        ] {
            sqlx::query(ddl).execute(&pool).await.unwrap();
        }
        let insert = |x: &'static str| sqlx::query("INSERT INTO t_fault (x) VALUES ($1)").bind(x);
        for round in 0..3 {
            // SQLite ends this transaction itself; sqlx's ROLLBACK on drop then fails.
            let mut tx = pool.begin_with("BEGIN IMMEDIATE").await.unwrap();
            assert!(insert("rollback").execute(&mut *tx).await.is_err());
            drop(tx);
            // The next transaction on the (only) connection writes, then fails and is dropped.
            let mut tx = pool.begin().await.unwrap();
            insert("kept-not").execute(&mut *tx).await.unwrap();
            assert!(insert("abort").execute(&mut *tx).await.is_err());
            drop(tx);
            // Another connection writes at once (it waits at most 1 s for the lock).
            let mut other = other_writer(&t.url).await;
            insert("other")
                .execute(&mut other)
                .await
                .unwrap_or_else(|e| {
                    panic!("round {round}: another writer after a failed transaction: {e}")
                });
            // The pool's own connection takes the write lock again.
            let mut tx = pool
                .begin_with("BEGIN IMMEDIATE")
                .await
                .unwrap_or_else(|e| {
                    panic!("round {round}: BEGIN IMMEDIATE after a failed transaction: {e}")
                });
            insert("kept-not").execute(&mut *tx).await.unwrap();
            assert!(insert("abort").execute(&mut *tx).await.is_err());
            drop(tx);
            // And the pool's own plain writes are committed, not swallowed by an open transaction.
            insert("pool").execute(&pool).await.unwrap();
            let n: i64 = sqlx::query_scalar("SELECT count(*) FROM t_fault WHERE x = 'pool'")
                .fetch_one(&mut other)
                .await
                .unwrap();
            assert_eq!(
                n,
                round + 1,
                "round {round}: a plain write of the pool was not committed"
            );
        }
        let lost: i64 = sqlx::query_scalar("SELECT count(*) FROM t_fault WHERE x = 'kept-not'")
            .fetch_one(&pool)
            .await
            .unwrap();
        assert_eq!(lost, 0, "rows of failed transactions were committed");
    }

    /// A PostgreSQL server that ends the connection (an administrator's
    /// `pg_terminate_backend`, a restart) is a lost connection, not a failed query: the
    /// error says so, and the pool's next query works on a new connection.
    #[tokio::test]
    async fn a_terminated_postgres_connection_is_named_and_the_pool_reconnects() {
        let Some(t) = testdb::postgres("terminated_postgres_connection").await else {
            return;
        };
        let Db::Postgres(pool) = &t.db else {
            panic!("a PostgreSQL test database");
        };
        let mut conn = pool.acquire().await.unwrap();
        let pid: i32 = sqlx::query_scalar("SELECT pg_backend_pid()")
            .fetch_one(&mut *conn)
            .await
            .unwrap();
        let mut admin = <sqlx::PgConnection as sqlx::Connection>::connect(&t.url)
            .await
            .unwrap();
        sqlx::query("SELECT pg_terminate_backend($1)")
            .bind(pid)
            .execute(&mut admin)
            .await
            .unwrap();
        let err = sqlx::query("SELECT 1")
            .execute(&mut *conn)
            .await
            .map_err(t.db.err("reading a job"))
            .unwrap_err();
        assert_eq!(err.store_fault(), Some(StoreFault::Disconnected), "{err}");
        assert!(err.to_string().contains("connection"), "{err}");
        drop(conn);
        sqlx::query("SELECT 1").execute(pool).await.unwrap();
    }

    /// A full SQLite store (here `max_page_count`, as a full disk gives `SQLITE_FULL`) is
    /// reported as full, naming the file and saying to free space, never as unreachable; the
    /// failed write holds no lock, and writes go through again once there is room.
    #[tokio::test]
    async fn a_full_sqlite_store_is_named_and_frees_its_lock() {
        let t = testdb::sqlite().await;
        let file = t.url.strip_prefix("sqlite:").unwrap().to_string();
        sqlx::query("CREATE TABLE t_big (b BLOB)")
            .execute(on_sqlite(&t.db))
            .await
            .unwrap();
        // The connection may not grow the file: every page it has is all it gets.
        let full = Db::Sqlite(one_connection(&t.url, Some("PRAGMA max_page_count = 1")).await);
        let err = sqlx::query("INSERT INTO t_big (b) VALUES (zeroblob(1048576))")
            .execute(on_sqlite(&full))
            .await
            .map_err(full.err("queueing a job"))
            .unwrap_err();
        assert_eq!(err.store_fault(), Some(StoreFault::Full), "{err}");
        let text = err.to_string();
        assert!(text.contains(&file), "the message names the file: {text}");
        assert!(
            text.contains("full") && text.contains("free space"),
            "{text}"
        );
        assert!(!text.contains("reachable"), "{text}");
        // The failed write left no lock: another process writes at once.
        let mut other = other_writer(&t.url).await;
        sqlx::query("INSERT INTO t_big (b) VALUES (x'00')")
            .execute(&mut other)
            .await
            .unwrap();
        // Room again (here: the limit lifted on the same pooled connection): writes go through.
        let p = on_sqlite(&full);
        sqlx::query("PRAGMA max_page_count = 1073741823")
            .execute(p)
            .await
            .unwrap();
        sqlx::query("INSERT INTO t_big (b) VALUES (zeroblob(1048576))")
            .execute(p)
            .await
            .unwrap();
        full.probe_write(Duration::from_secs(2)).await.unwrap();
    }

    fn on_sqlite(db: &Db) -> &SqlitePool {
        match db {
            Db::Sqlite(p) => p,
            Db::Postgres(_) => unreachable!(),
        }
    }

    /// The health probe writes: a write lock held elsewhere makes it fail within its timeout,
    /// naming the file; once the lock is gone it passes.
    #[tokio::test]
    async fn the_write_probe_sees_a_held_write_lock() {
        let t = testdb::sqlite().await;
        t.db.probe_write(Duration::from_secs(2)).await.unwrap();
        let mut other = other_writer(&t.url).await;
        sqlx::query("BEGIN IMMEDIATE")
            .execute(&mut other)
            .await
            .unwrap();
        let err =
            t.db.probe_write(Duration::from_millis(500))
                .await
                .unwrap_err();
        let text = err.to_string();
        assert!(
            text.contains(t.url.strip_prefix("sqlite:").unwrap()),
            "{text}"
        );
        assert!(text.contains("write lock"), "{text}");
        sqlx::query("ROLLBACK").execute(&mut other).await.unwrap();
        t.db.probe_write(Duration::from_secs(5)).await.unwrap();
    }

    #[tokio::test]
    async fn postgres_write_probe_passes() {
        let Some(t) = testdb::postgres("postgres_write_probe_passes").await else {
            return;
        };
        t.db.probe_write(Duration::from_secs(2)).await.unwrap();
        t.db.probe_write(Duration::from_secs(2)).await.unwrap();
        assert!(t.db.location().contains(":5432/"), "{}", t.db.location());
    }

    #[test]
    fn store_faults_are_recognised_in_messages() {
        assert_eq!(
            StoreFault::in_message(
                "error returned from database: (code: 13) database or disk is full"
            ),
            Some(StoreFault::Full)
        );
        assert_eq!(
            StoreFault::in_message("database is locked"),
            Some(StoreFault::Locked)
        );
        assert_eq!(StoreFault::in_message("UNIQUE constraint failed"), None);
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
