//! One process at a time opens a new SQLite file: the open lock.
//!
//! SQLite has no migration lock, and switching a fresh file to WAL needs it exclusively, so a
//! worker and a command started at the same moment on a fresh data directory could each fail
//! with "database is locked" (seen in 3 of 5 tries) or apply the first migration twice. Every
//! reel process that opens a SQLite file (the catalogue, the job tables, the apalis queue)
//! first takes an exclusive `flock(2)` on `FILE.open-lock` beside it and holds it while it
//! connects and migrates; the others wait their turn. The lock is advisory, taken only for the
//! open, and released when the guard drops (or the process dies), so it never blocks a running
//! process's reads and writes.

use std::fs::{File, OpenOptions};
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use nix::fcntl::{Flock, FlockArg};

/// How long a process waits for another one's open to finish.
pub const OPEN_LOCK_WAIT: Duration = Duration::from_secs(60);

/// Held while one SQLite file is opened and migrated.
#[derive(Debug)]
pub struct SqliteOpenLock {
    _lock: Flock<File>,
}

/// The lock file of `db`: `DB.open-lock` in the same directory.
pub fn open_lock_path(db: &Path) -> PathBuf {
    let mut name = db.as_os_str().to_owned();
    name.push(".open-lock");
    PathBuf::from(name)
}

/// Take the open lock of the SQLite file `db`, waiting up to [`OPEN_LOCK_WAIT`] for another
/// process's open. The error names the lock file.
pub async fn lock_sqlite_open(db: &Path) -> std::io::Result<SqliteOpenLock> {
    let path = open_lock_path(db);
    let named = |e: std::io::Error| {
        std::io::Error::new(e.kind(), format!("open lock {}: {e}", path.display()))
    };
    let deadline = Instant::now() + OPEN_LOCK_WAIT;
    loop {
        let file = OpenOptions::new()
            .create(true)
            .truncate(false)
            .write(true)
            .open(&path)
            .map_err(named)?;
        match Flock::lock(file, FlockArg::LockExclusiveNonblock) {
            Ok(lock) => return Ok(SqliteOpenLock { _lock: lock }),
            Err((_, nix::errno::Errno::EWOULDBLOCK)) if Instant::now() < deadline => {
                tokio::time::sleep(Duration::from_millis(20)).await;
            }
            Err((_, e)) => {
                return Err(named(std::io::Error::other(format!(
                    "{e}; another reel process has been opening this database for over {} s",
                    OPEN_LOCK_WAIT.as_secs()
                ))));
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn a_second_open_waits_for_the_first() {
        let dir = tempfile::tempdir().unwrap();
        let db = dir.path().join("reel.db");
        let first = lock_sqlite_open(&db).await.unwrap();
        assert!(open_lock_path(&db).exists());
        let t0 = Instant::now();
        let waiter = tokio::spawn({
            let db = db.clone();
            async move { lock_sqlite_open(&db).await.map(|_| t0.elapsed()) }
        });
        tokio::time::sleep(Duration::from_millis(200)).await;
        assert!(!waiter.is_finished(), "the second open did not wait");
        drop(first);
        let waited = waiter.await.unwrap().unwrap();
        assert!(waited >= Duration::from_millis(200), "{waited:?}");
    }
}
