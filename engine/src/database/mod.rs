//! The policy of every reel database pool, in one place: the catalogue's and the jobs layer's
//! (job tables, apalis queue) pools are all built from these, so a connection is vetted,
//! released, reaped (never) and configured the same way whichever part of reel holds it.
//!
//! - [`vet_idle_connections`]: ping only connections that sat idle; no reaper task.
//! - [`discard_unclean_sqlite`]: a SQLite connection back from a failed transaction that is
//!   still in one is closed, not kept.
//! - [`postgres_pool_options`] and [`postgres_session`]: `TCP_NODELAY` on every connection,
//!   JIT off in every session.
//! - [`lock_sqlite_open`]: one process at a time opens and migrates a SQLite file.

use std::time::Duration;

use sqlx::Connection;
use sqlx::postgres::{PgConnectOptions, PgPoolOptions};
use sqlx::sqlite::SqlitePoolOptions;
use tracing::warn;

mod open_lock;
mod tcp_nodelay;

pub use open_lock::{OPEN_LOCK_WAIT, SqliteOpenLock, lock_sqlite_open, open_lock_path};
use tcp_nodelay::nodelay_on_connect;

/// A pooled connection idle at least this long is pinged before use.
const PING_IF_IDLE: Duration = Duration::from_secs(30);

/// The pool policy for every reel database pool (catalogue, jobs): a connection that sat idle
/// for [`PING_IF_IDLE`] is pinged before it is handed out (a server restart or a firewall may
/// have dropped it; a dead one is replaced), the others go straight to their query. sqlx's
/// default pings before every acquire, which doubled the round trips of every catalogue call
/// (the PostgreSQL key look-up measured p50 0.36 ms with it).
///
/// The pools keep no reaper: no idle timeout and no maximum lifetime, so sqlx spawns no
/// maintenance task. sqlx 0.9.0's task can read an idle count that wrapped below zero
/// (`release` publishes a connection before it counts it, and a concurrent acquire counts it
/// out first) and then loops without yielding: a `reel jobs wait` and a worker's shutdown were
/// seen spinning a core for minutes after their work was done (sqlx issue 3645, fixed upstream
/// after 0.9.0). The connections are few (at most 10 per pool) and a dead one is found by the
/// ping above, so reaping them bought nothing.
pub fn vet_idle_connections<DB: sqlx::Database>(
    options: sqlx::pool::PoolOptions<DB>,
) -> sqlx::pool::PoolOptions<DB> {
    options
        .idle_timeout(None)
        .max_lifetime(None)
        .min_connections(0)
        .test_before_acquire(false)
        .before_acquire(|conn, meta| {
            Box::pin(async move {
                if meta.idle_for < PING_IF_IDLE {
                    return Ok(true);
                }
                Ok(conn.ping().await.is_ok())
            })
        })
}

/// The release policy of every reel SQLite pool (catalogue, job tables, apalis queue): a
/// connection that comes back to the pool still inside a transaction is closed, not kept.
///
/// sqlx counts a connection's transaction depth itself. When SQLite has already rolled a
/// transaction back on its own (it may after `SQLITE_FULL`, `SQLITE_IOERR` or a trigger's
/// `RAISE(ROLLBACK)`), the `ROLLBACK` that sqlx sends when the failed transaction is dropped
/// fails ("no transaction is active") and the count stays at 1. The next `begin()` on that
/// connection then issues `SAVEPOINT` instead of `BEGIN`, and when that transaction fails in
/// turn its rollback is `ROLLBACK TO SAVEPOINT`, which leaves the transaction open: the idle
/// connection kept SQLite's write lock ("database is locked" for every other writer, seen for
/// over 90 s after a full disk was freed, until the worker was restarted), and the plain writes
/// it ran afterwards were never committed. Closing such a connection ends its transaction and
/// releases the lock at once; the pool opens a fresh one when it needs it.
pub fn discard_unclean_sqlite(options: SqlitePoolOptions) -> SqlitePoolOptions {
    options.after_release(|conn, _meta| {
        Box::pin(async move {
            if !conn.is_in_transaction() {
                return Ok(true);
            }
            // A dropped transaction queued its rollback on the connection's worker; a ping runs
            // after it (the worker takes commands in order), so the depth read next is final.
            conn.ping().await?;
            if conn.is_in_transaction() {
                warn!(
                    "a SQLite connection came back from a failed transaction still in one (its rollback failed); closing it so it holds no lock"
                );
                return Ok(false);
            }
            Ok(true)
        })
    })
}

/// The pool options of every reel PostgreSQL pool (catalogue, job tables, apalis queue): idle
/// connections vetted before use ([`vet_idle_connections`]) and `TCP_NODELAY` set on each new
/// connection (`tcp_nodelay`).
pub fn postgres_pool_options() -> PgPoolOptions {
    nodelay_on_connect(vet_idle_connections(PgPoolOptions::new()))
}

/// The session settings of every reel PostgreSQL connection (catalogue, jobs), sent in the
/// start-up packet so they cost no round trip: `jit = off`. reel's statements are short index
/// look-ups, and on tables the planner has no statistics for yet (straight after a bulk load,
/// before autovacuum's ANALYZE) their estimated cost passes `jit_above_cost`: PostgreSQL then
/// compiled every key look-up before running it, 6 to 23 ms of JIT for a 0.1 ms query at a
/// million objects. An operator who wants JIT anyway says so in the URL (`options=-c jit=on`): a
/// URL that sets `jit` itself is left as it is.
pub fn postgres_session(options: PgConnectOptions) -> PgConnectOptions {
    if options.get_options().is_some_and(|o| o.contains("jit")) {
        return options;
    }
    options.options([("jit", "off")])
}
