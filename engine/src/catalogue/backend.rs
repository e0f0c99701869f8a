//! Connecting to the catalogue database: SQLite (one file, WAL, `synchronous=FULL`) or
//! PostgreSQL (a pool), the durability checks, and the embedded migrations.
//!
//! Every query in the catalogue is written once, with `$1`-style placeholders that both drivers
//! accept, and run on whichever pool the catalogue holds through [`on_pool!`] and
//! [`in_write_tx!`], which expand the same code once per backend.

use std::str::FromStr;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use sqlx::postgres::PgConnectOptions;
use sqlx::sqlite::{SqliteConnectOptions, SqliteJournalMode, SqlitePoolOptions, SqliteSynchronous};
use sqlx::{AssertSqlSafe, Connection, PgConnection, PgPool, SqlitePool};
use tracing::{info, warn};

use super::error::{CatalogueError, DbContext, Result, redact_url};
use crate::database::{
    discard_unclean_sqlite, postgres_pool_options, postgres_session, vet_idle_connections,
};

/// How long an SQLite writer waits for another writer before giving up.
const SQLITE_BUSY_TIMEOUT: Duration = Duration::from_secs(30);
/// SQLite connections (readers run in parallel under WAL; writers take turns).
const SQLITE_MAX_CONNECTIONS: u32 = 4;
/// PostgreSQL connections per catalogue.
const POSTGRES_MAX_CONNECTIONS: u32 = 10;
/// How long to wait for a free pooled connection.
const ACQUIRE_TIMEOUT: Duration = Duration::from_secs(60);
/// The table where the catalogue's applied migrations are recorded (not sqlx's default, so the
/// jobs layer can keep its own migrations in its own table in the same database).
pub const MIGRATIONS_TABLE: &str = "_reel_catalogue_migrations";

/// The database behind a catalogue.
#[derive(Clone, Debug)]
pub(crate) enum Backend {
    /// One SQLite file.
    Sqlite(SqlitePool),
    /// A PostgreSQL pool.
    Postgres(PgPool),
}

/// Run `$body` with `$pool` bound to the backend's concrete pool (`&SqlitePool` or `&PgPool`).
/// The body is compiled once per backend, so the same query text serves both.
macro_rules! on_pool {
    ($backend:expr, |$pool:ident| $body:expr) => {
        match $backend {
            $crate::catalogue::backend::Backend::Sqlite($pool) => $body,
            $crate::catalogue::backend::Backend::Postgres($pool) => $body,
        }
    };
}
pub(crate) use on_pool;

/// Run `$body` in a write transaction bound to `$tx`, and commit it; the body's value is the
/// macro's value. The body runs in an async block: leaving it with `?` or `return Err(..)` rolls
/// the transaction back at once (releasing its locks) and returns the error from the enclosing
/// function. On SQLite the transaction starts with `BEGIN IMMEDIATE`, so it holds the write lock
/// from its first read and never fails half-way on a lock upgrade; on PostgreSQL it is a plain
/// `BEGIN` (read committed) and the body takes row locks with its first `UPDATE`.
macro_rules! in_write_tx {
    (@run $tx:ident, $op:expr, $body:expr) => {{
        let outcome: $crate::catalogue::error::Result<_> = async { Ok($body) }.await;
        match outcome {
            Ok(value) => {
                $crate::catalogue::error::DbContext::ctx($tx.commit().await, $op)?;
                value
            }
            Err(e) => {
                if let Err(rollback) = $tx.rollback().await {
                    ::tracing::warn!(op = $op, error = %rollback, "rollback failed; the connection is dropped");
                }
                return Err(e);
            }
        }
    }};
    ($backend:expr, $op:expr, |$tx:ident| $body:expr) => {
        match $backend {
            $crate::catalogue::backend::Backend::Sqlite(pool) => {
                let mut $tx = $crate::catalogue::error::DbContext::ctx(
                    pool.begin_with("BEGIN IMMEDIATE").await,
                    $op,
                )?;
                $crate::catalogue::backend::in_write_tx!(@run $tx, $op, $body)
            }
            $crate::catalogue::backend::Backend::Postgres(pool) => {
                let mut $tx = $crate::catalogue::error::DbContext::ctx(pool.begin().await, $op)?;
                $crate::catalogue::backend::in_write_tx!(@run $tx, $op, $body)
            }
        }
    };
}
pub(crate) use in_write_tx;

/// Open the backend named by `url` and bring its schema up to date.
pub(crate) async fn connect(url: &str) -> Result<Backend> {
    if url.starts_with("sqlite:") {
        connect_sqlite(url).await.map(Backend::Sqlite)
    } else if url.starts_with("postgres://") || url.starts_with("postgresql://") {
        connect_postgres(url).await.map(Backend::Postgres)
    } else {
        Err(CatalogueError::InvalidUrl {
            url: redact_url(url),
            reason: "unknown scheme".into(),
        })
    }
}

/// SQLite: one file, created if missing; WAL with `synchronous=FULL` so that every commit is on
/// stable storage before it returns (an acknowledged archive survives a power cut); foreign keys
/// on; writers wait for each other up to [`SQLITE_BUSY_TIMEOUT`].
async fn connect_sqlite(url: &str) -> Result<SqlitePool> {
    let shown = redact_url(url);
    if url.contains(":memory:") || url.contains("mode=memory") {
        return Err(CatalogueError::InvalidUrl {
            url: shown,
            reason:
                "an in-memory catalogue loses everything when the process ends; give a file path"
                    .into(),
        });
    }
    let options = SqliteConnectOptions::from_str(url).map_err(|e| CatalogueError::InvalidUrl {
        url: shown.clone(),
        reason: e.to_string(),
    })?;
    let path = options.get_filename().to_path_buf();
    if path.as_os_str().is_empty() {
        return Err(CatalogueError::InvalidUrl {
            url: shown,
            reason: "no file path after `sqlite:`".into(),
        });
    }
    if let Some(dir) = path
        .parent()
        .filter(|d| !d.as_os_str().is_empty() && !d.is_dir())
    {
        return Err(CatalogueError::InvalidUrl {
            url: shown,
            reason: format!(
                "directory {} does not exist; create it (reel creates the file, not its directory)",
                dir.display()
            ),
        });
    }
    // One process at a time connects (WAL switch) and migrates a file (open_lock.rs).
    let _open = crate::database::lock_sqlite_open(&path)
        .await
        .map_err(|source| CatalogueError::OpenLock {
            url: shown.clone(),
            source,
        })?;
    let options = options
        .create_if_missing(true)
        .journal_mode(SqliteJournalMode::Wal)
        .synchronous(SqliteSynchronous::Full)
        .foreign_keys(true)
        .busy_timeout(SQLITE_BUSY_TIMEOUT);
    let pool = discard_unclean_sqlite(vet_idle_connections(SqlitePoolOptions::new()))
        .max_connections(SQLITE_MAX_CONNECTIONS)
        .acquire_timeout(ACQUIRE_TIMEOUT)
        .connect_with(options)
        .await
        .map_err(|source| CatalogueError::Open {
            url: shown.clone(),
            hint: "check that the file is a reel catalogue and that its directory is writable",
            source,
        })?;
    check_sqlite_durability(&pool, &shown).await?;
    let mut migrator = sqlx::migrate!("./migrations/sqlite");
    migrator.dangerous_set_table_name(MIGRATIONS_TABLE);
    // SQLite has no migration lock: a second process opening a new file at the same moment
    // may lose the race for the first migration; it looks again once the winner committed.
    let mut attempt = 0;
    loop {
        match migrator.run(&pool).await {
            Ok(()) => break,
            Err(_) if attempt < 20 => {
                attempt += 1;
                tokio::time::sleep(std::time::Duration::from_millis(100)).await;
            }
            Err(source) => return Err(CatalogueError::Migrate { source }),
        }
    }
    info!(path = %path.display(), "catalogue open (sqlite, WAL, synchronous=FULL)");
    Ok(pool)
}

/// What the pragmas of one SQLite connection say.
#[derive(Debug, PartialEq, Eq)]
pub(crate) struct SqlitePragmas {
    /// `PRAGMA journal_mode`, lower case.
    pub journal_mode: String,
    /// `PRAGMA synchronous` (2 = FULL).
    pub synchronous: i64,
    /// `PRAGMA foreign_keys` (1 = on).
    pub foreign_keys: i64,
}

/// Read the durability pragmas of one pooled connection.
pub(crate) async fn sqlite_pragmas(conn: &mut sqlx::SqliteConnection) -> Result<SqlitePragmas> {
    const OP: &str = "read sqlite pragmas";
    let journal_mode: String = sqlx::query_scalar("PRAGMA journal_mode")
        .fetch_one(&mut *conn)
        .await
        .ctx(OP)?;
    let synchronous: i64 = sqlx::query_scalar("PRAGMA synchronous")
        .fetch_one(&mut *conn)
        .await
        .ctx(OP)?;
    let foreign_keys: i64 = sqlx::query_scalar("PRAGMA foreign_keys")
        .fetch_one(&mut *conn)
        .await
        .ctx(OP)?;
    Ok(SqlitePragmas {
        journal_mode: journal_mode.to_ascii_lowercase(),
        synchronous,
        foreign_keys,
    })
}

/// Refuse a file system where WAL could not be enabled (some network file systems), and check
/// the per-connection settings took.
async fn check_sqlite_durability(pool: &SqlitePool, shown: &str) -> Result<()> {
    let mut conn = pool.acquire().await.ctx("open sqlite catalogue")?;
    let p = sqlite_pragmas(&mut conn).await?;
    let fail = |reason: String| CatalogueError::NotDurable {
        url: shown.to_string(),
        reason,
    };
    if p.journal_mode != "wal" {
        return Err(fail(format!(
            "SQLite runs journal_mode={} instead of WAL; put the catalogue on a local file system",
            p.journal_mode
        )));
    }
    if p.synchronous != 2 {
        return Err(fail(format!(
            "SQLite runs synchronous={} instead of FULL (2)",
            p.synchronous
        )));
    }
    if p.foreign_keys != 1 {
        return Err(fail("SQLite foreign keys are off".into()));
    }
    Ok(())
}

/// Split reel's `schema=NAME` parameter off a PostgreSQL URL. Returns the URL without it (for
/// the driver) and the schema name, if any.
pub(crate) fn split_schema_param(url: &str) -> Result<(String, Option<String>)> {
    let shown = redact_url(url);
    let (head, fragment) = match url.split_once('#') {
        Some((h, f)) => (h, Some(f)),
        None => (url, None),
    };
    let Some((base, query)) = head.split_once('?') else {
        return Ok((url.to_string(), None));
    };
    let mut kept: Vec<&str> = Vec::new();
    let mut schema = None;
    for pair in query.split('&').filter(|p| !p.is_empty()) {
        match pair.split_once('=') {
            Some(("schema", value)) => {
                if schema.is_some() {
                    return Err(CatalogueError::InvalidUrl {
                        url: shown,
                        reason: "`schema` is given twice".into(),
                    });
                }
                let value = value.to_string();
                validate_schema_name(&value).map_err(|reason| CatalogueError::InvalidUrl {
                    url: shown.clone(),
                    reason,
                })?;
                schema = Some(value);
            }
            _ => kept.push(pair),
        }
    }
    let mut out = base.to_string();
    if !kept.is_empty() {
        out.push('?');
        out.push_str(&kept.join("&"));
    }
    if let Some(f) = fragment {
        out.push('#');
        out.push_str(f);
    }
    Ok((out, schema))
}

/// A schema name reel accepts: an unquoted PostgreSQL identifier in lower case, so it needs no
/// escaping and means the same thing in `psql`.
pub(crate) fn validate_schema_name(name: &str) -> std::result::Result<(), String> {
    let mut chars = name.chars();
    let first_ok = chars
        .next()
        .is_some_and(|c| c.is_ascii_lowercase() || c == '_');
    let rest_ok = name
        .chars()
        .all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || c == '_');
    if !first_ok || !rest_ok || name.len() > 63 {
        return Err(format!(
            "schema name {name:?} must be 1 to 63 characters of a-z, 0-9 and _, not starting with a digit"
        ));
    }
    Ok(())
}

/// PostgreSQL: a pool. With `?schema=NAME` in the URL the schema is created if missing and every
/// connection starts with `search_path = NAME` (sent in its start-up packet), so the catalogue's
/// tables (and its migrations table) live in that schema.
async fn connect_postgres(url: &str) -> Result<PgPool> {
    let shown = redact_url(url);
    let (driver_url, schema) = split_schema_param(url)?;
    let mut options = postgres_session(PgConnectOptions::from_str(&driver_url).map_err(|e| {
        CatalogueError::InvalidUrl {
            url: shown.clone(),
            reason: e.to_string(),
        }
    })?);
    if let Some(schema) = &schema {
        // Validated: lower-case letters, digits and underscores, so it needs no quoting.
        options = options.options([("search_path", schema)]);
    }
    // One direct connection first: an unreachable server or a refused login is reported at
    // once, not after the pool has retried for its whole acquire timeout.
    let probe = PgConnection::connect_with(&options)
        .await
        .map_err(|source| CatalogueError::Open {
            url: shown.clone(),
            hint: "check that the server is running, the URL's host, port, user and database, and pg_hba.conf",
            source,
        })?;
    let _ = probe.close().await;
    let pool_options = postgres_pool_options()
        .max_connections(POSTGRES_MAX_CONNECTIONS)
        .acquire_timeout(ACQUIRE_TIMEOUT);
    let pool = pool_options
        .connect_with(options)
        .await
        .map_err(|source| CatalogueError::Open {
            url: shown.clone(),
            hint: "check that the server is running, the URL's host, port, user and database, and pg_hba.conf",
            source,
        })?;
    if let Some(schema) = &schema {
        let create = format!("CREATE SCHEMA IF NOT EXISTS \"{schema}\"");
        sqlx::query(AssertSqlSafe(create))
            .execute(&pool)
            .await
            .ctx("create catalogue schema")?;
    }
    check_postgres_durability(&pool).await?;
    let mut migrator = sqlx::migrate!("./migrations/postgres");
    migrator.dangerous_set_table_name(MIGRATIONS_TABLE);
    migrator
        .run(&pool)
        .await
        .map_err(|source| CatalogueError::Migrate { source })?;
    info!(url = %shown, schema = schema.as_deref().unwrap_or("(search_path)"), "catalogue open (postgres)");
    Ok(pool)
}

/// Warn when the server would lose acknowledged commits in a crash.
async fn check_postgres_durability(pool: &PgPool) -> Result<()> {
    const OP: &str = "read postgres settings";
    let fsync: String = sqlx::query_scalar("SELECT current_setting('fsync')")
        .fetch_one(pool)
        .await
        .ctx(OP)?;
    let sync_commit: String = sqlx::query_scalar("SELECT current_setting('synchronous_commit')")
        .fetch_one(pool)
        .await
        .ctx(OP)?;
    if fsync == "off" || sync_commit == "off" {
        warn!(
            fsync,
            synchronous_commit = sync_commit,
            "PostgreSQL may lose acknowledged catalogue commits in a crash; set fsync=on and synchronous_commit=on for production"
        );
    }
    Ok(())
}

/// Seconds since the Unix epoch, as stored in the catalogue.
pub(crate) fn now_unix() -> i64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map(|d| i64::try_from(d.as_secs()).unwrap_or(i64::MAX))
        .unwrap_or(0)
}

/// A figure for a signed 64-bit column.
pub(crate) fn to_db(field: &'static str, value: u64) -> Result<i64> {
    i64::try_from(value).map_err(|_| CatalogueError::OutOfRange { field, value })
}

/// A figure read back from a signed 64-bit column.
pub(crate) fn from_db(field: &'static str, value: i64) -> Result<u64> {
    u64::try_from(value).map_err(|_| CatalogueError::Corrupt {
        what: format!("{field} is negative ({value})"),
    })
}

/// A SHA-256 read back from a BLOB/BYTEA column.
pub(crate) fn sha_from_db(field: &'static str, value: Vec<u8>) -> Result<[u8; 32]> {
    <[u8; 32]>::try_from(value.as_slice()).map_err(|_| CatalogueError::Corrupt {
        what: format!("{field} is {} bytes long, not 32", value.len()),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn schema_param_is_split_off_and_other_params_kept() {
        let (u, s) = split_schema_param(
            "postgres://u@h:5432/db?sslmode=disable&schema=reel_a&application_name=x",
        )
        .unwrap();
        assert_eq!(
            u,
            "postgres://u@h:5432/db?sslmode=disable&application_name=x"
        );
        assert_eq!(s.as_deref(), Some("reel_a"));
        let (u, s) = split_schema_param("postgres://u@h/db?schema=s1").unwrap();
        assert_eq!(u, "postgres://u@h/db");
        assert_eq!(s.as_deref(), Some("s1"));
        let (u, s) = split_schema_param("postgres://u@h/db").unwrap();
        assert_eq!(u, "postgres://u@h/db");
        assert_eq!(s, None);
    }

    #[test]
    fn bad_schema_names_are_refused() {
        for bad in [
            "postgres://h/db?schema=",
            "postgres://h/db?schema=Reel",
            "postgres://h/db?schema=1abc",
            "postgres://h/db?schema=a%22b",
            "postgres://h/db?schema=a;drop",
            "postgres://h/db?schema=a&schema=b",
        ] {
            let e = split_schema_param(bad).unwrap_err();
            assert!(matches!(e, CatalogueError::InvalidUrl { .. }), "{bad}: {e}");
        }
        assert!(validate_schema_name(&"a".repeat(63)).is_ok());
        assert!(validate_schema_name(&"a".repeat(64)).is_err());
    }

    #[test]
    fn unsigned_figures_are_range_checked() {
        assert_eq!(to_db("x", 5).unwrap(), 5);
        assert!(matches!(
            to_db("x", u64::MAX),
            Err(CatalogueError::OutOfRange { field: "x", .. })
        ));
        assert!(matches!(
            from_db("y", -1),
            Err(CatalogueError::Corrupt { .. })
        ));
        assert!(sha_from_db("h", vec![0; 31]).is_err());
        assert_eq!(sha_from_db("h", vec![7; 32]).unwrap(), [7; 32]);
    }

    #[test]
    fn sessions_turn_jit_off_unless_the_url_says_otherwise() {
        let plain = postgres_session(PgConnectOptions::from_str("postgres://u@h/db").unwrap());
        assert_eq!(plain.get_options(), Some("-c jit=off"));
        let own = postgres_session(
            PgConnectOptions::from_str("postgres://u@h/db?options=-c%20jit%3Don").unwrap(),
        );
        assert_eq!(own.get_options(), Some("-c jit=on"));
        let other = postgres_session(
            PgConnectOptions::from_str("postgres://u@h/db?options=-c%20work_mem%3D64MB").unwrap(),
        );
        assert_eq!(other.get_options(), Some("-c work_mem=64MB -c jit=off"));
    }

    /// Every pooled catalogue connection runs without JIT (a key look-up on tables not yet
    /// analysed was compiled before it ran: 6-23 ms instead of 0.1 ms at a million objects).
    #[tokio::test]
    async fn postgres_catalogue_connections_run_without_jit() {
        let Some(db) = crate::catalogue::testing::postgres().await.unwrap() else {
            return;
        };
        let pool = db.catalogue().pool_postgres().unwrap();
        for _ in 0..3 {
            // `client`: set by the connection's start-up options, not the server's default
            // (which would pass this test on a server configured with jit = off).
            let (jit, source): (String, String) =
                sqlx::query_as("SELECT setting, source FROM pg_settings WHERE name = 'jit'")
                    .fetch_one(pool)
                    .await
                    .unwrap();
            assert_eq!((jit.as_str(), source.as_str()), ("off", "client"));
        }
    }
}
