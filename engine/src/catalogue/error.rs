//! What can go wrong with the catalogue, each error saying what was wrong and what to do.

use thiserror::Error;

/// A catalogue operation failed.
#[derive(Debug, Error)]
pub enum CatalogueError {
    /// The catalogue URL is neither `sqlite:PATH` nor `postgres://…`, or one of its parts is bad.
    #[error(
        "catalogue URL `{url}` is not usable: {reason}; give `sqlite:/path/to/catalogue.db` or \
         `postgres://user@host:5432/db[?schema=NAME]`"
    )]
    InvalidUrl {
        /// The URL, with any password replaced by `***`.
        url: String,
        /// What is wrong with it.
        reason: String,
    },

    /// The database could not be opened or reached.
    #[error("cannot open the catalogue at `{url}`: {source}; {hint}")]
    Open {
        /// The URL, with any password replaced by `***`.
        url: String,
        /// What to check.
        hint: &'static str,
        /// The driver's error.
        #[source]
        source: sqlx::Error,
    },

    /// The open lock of a SQLite catalogue could not be taken (`database/open_lock.rs`).
    #[error("cannot open the catalogue at `{url}`: {source}; check that its directory is writable")]
    OpenLock {
        /// The URL.
        url: String,
        /// What failed, naming the lock file.
        #[source]
        source: std::io::Error,
    },

    /// The database opened but does not give the durability the catalogue needs.
    #[error("the catalogue at `{url}` is not durable: {reason}")]
    NotDurable {
        /// The URL, with any password replaced by `***`.
        url: String,
        /// What setting is wrong and how to fix it.
        reason: String,
    },

    /// The embedded schema migrations could not be applied.
    #[error(
        "cannot bring the catalogue schema up to date: {source}; if the database was written by a \
         newer reel, run that version, otherwise restore the database from a backup"
    )]
    Migrate {
        /// The migrator's error.
        #[source]
        source: sqlx::migrate::MigrateError,
    },

    /// A query failed in the database. A fault of the store itself (full, locked, read-only,
    /// I/O: [`StoreFault`]) says so and what to do; anything else asks to check the database.
    #[error(
        "catalogue operation `{op}` failed in the database: {}{source}; {}",
        StoreFault::of(.source).map(|f| format!("{f}: ")).unwrap_or_default(),
        StoreFault::of(.source).map_or(
            "check that the database is reachable and has free space, then retry",
            |f| f.advice()
        )
    )]
    Database {
        /// The catalogue operation that ran the query.
        op: &'static str,
        /// The driver's error.
        #[source]
        source: sqlx::Error,
    },

    /// An object key is not acceptable.
    #[error("object key {key:?} is refused: {reason}")]
    InvalidKey {
        /// The key as given (cut to 200 characters in the message if longer).
        key: String,
        /// Why it is refused.
        reason: String,
    },

    /// A name, barcode or figure given to the catalogue is not acceptable.
    #[error("{what} {value:?} is refused: {reason}")]
    InvalidInput {
        /// What was given (a pool name, a barcode, a record size, …).
        what: &'static str,
        /// The value given.
        value: String,
        /// Why it is refused and what is accepted.
        reason: String,
    },

    /// A figure does not fit the catalogue's signed 64-bit columns.
    #[error("{field} = {value} is too large for the catalogue (at most {max}); this is a bug in the caller", max = i64::MAX)]
    OutOfRange {
        /// The field.
        field: &'static str,
        /// The value given.
        value: u64,
    },

    /// The cartridge is not in the catalogue.
    #[error(
        "cartridge {barcode} is not in the catalogue; add it first (`reel library inventory` or intake)"
    )]
    UnknownCartridge {
        /// The barcode asked for.
        barcode: String,
    },

    /// The pool does not exist.
    #[error(
        "pool {pool:?} does not exist; create it first (`ensure_pool`, or a storage class that names it)"
    )]
    UnknownPool {
        /// The pool asked for.
        pool: String,
    },

    /// The container is not in the catalogue.
    #[error("container {id} is not in the catalogue")]
    UnknownContainer {
        /// The container id asked for.
        id: i64,
    },

    /// The operation is not allowed in the cartridge's present state or position.
    #[error("cartridge {barcode}: {reason}")]
    CartridgeRefused {
        /// The cartridge.
        barcode: String,
        /// Why, and what to do.
        reason: String,
    },

    /// The operation is not allowed in the container's present state.
    #[error("container {id}: {reason}")]
    ContainerRefused {
        /// The container.
        id: i64,
        /// Why, and what to do.
        reason: String,
    },

    /// A copy names an object generation already catalogued with different content.
    #[error(
        "object {key:?} generation {generation} is already catalogued with {existing}, this copy \
         says {given}; take a new generation (`next_generation`) and write the object again"
    )]
    ObjectConflict {
        /// The key.
        key: String,
        /// The generation.
        generation: u64,
        /// Size and hash on record.
        existing: String,
        /// Size and hash given.
        given: String,
    },

    /// The copies given to `close_container` are inconsistent.
    #[error("container {id}: copy of {key:?} generation {generation} is refused: {reason}")]
    InvalidCopy {
        /// The container being closed.
        id: i64,
        /// The key of the refused copy.
        key: String,
        /// Its generation.
        generation: u64,
        /// Why.
        reason: String,
    },

    /// No legal hold has this number.
    #[error("there is no legal hold {id}; list them with `reel hold ls --all`")]
    UnknownHold {
        /// The number asked for.
        id: i64,
    },

    /// A deletion would remove what a legal hold covers (`hold.rs`).
    #[error(
        "{what} is under legal hold {hold} (placed by {by}: {reason}); nothing it covers is \
         deleted until the hold is released (`reel hold release {hold}`, by whoever may lift it)"
    )]
    Held {
        /// The key or prefix asked for (`key a/b`, `prefix a/`).
        what: String,
        /// The hold's number.
        hold: i64,
        /// Who placed it.
        by: String,
        /// Why.
        reason: String,
    },

    /// A deletion would remove a generation its storage class still retains (`retention.rs`).
    #[error(
        "object key {key:?} generation {generation} is retained by storage class {storage_class} \
         for {days_left} more day(s); it cannot be deleted before its retention ends"
    )]
    Retained {
        /// The key.
        key: String,
        /// The generation.
        generation: u64,
        /// The class whose retention holds it.
        storage_class: String,
        /// Days left, rounded up.
        days_left: i64,
    },

    /// An undelete named objects whose deletion is older than the quarantine: their copies are
    /// dead space, and reclaim may already have erased them.
    #[error(
        "{what} was deleted {days} days ago, past the {quarantine_days}-day quarantine; it can no \
         longer be brought back (its copies count as dead space)"
    )]
    PastQuarantine {
        /// The key or prefix asked for.
        what: String,
        /// Days since its deletion.
        days: i64,
        /// The quarantine.
        quarantine_days: u64,
    },

    /// A state name is not one the catalogue knows.
    #[error("unknown {kind} state {value:?}; expected one of: {expected}")]
    UnknownState {
        /// "cartridge" or "container".
        kind: &'static str,
        /// The name given.
        value: String,
        /// The accepted names.
        expected: &'static str,
    },

    /// The writer's lease is no longer current: another worker may have taken its work over,
    /// so nothing it wrote may become a live copy (see `writer_lease`). Not retryable by this
    /// writer; the work is redone under a current lease.
    #[error(
        "the writer's lease {resource} (epoch {epoch}) is no longer held: {reason}; nothing it \
         wrote becomes live, and its requests go to a worker that holds a lease"
    )]
    Fenced {
        /// The leased resource.
        resource: String,
        /// The epoch the writer held.
        epoch: i64,
        /// What the lease row says now.
        reason: String,
    },

    /// A stored value is impossible (negative size, bad hash length, unknown state).
    #[error(
        "the catalogue holds an impossible value: {what}; the database was changed outside reel \
         or is damaged — run `reel catalog rebuild` or restore a backup"
    )]
    Corrupt {
        /// What was found, and where.
        what: String,
    },
}

/// A database that cannot take writes for a reason of its own (not a bad query): what
/// [`StoreFault::of`] recognises in a driver error, for SQLite and PostgreSQL alike. Every one is
/// worth retrying once the operator has mended it; none is a reason to restart reel.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum StoreFault {
    /// The database or the disk under it is full (SQLite `SQLITE_FULL`, "database or disk is
    /// full"; PostgreSQL `53100 disk_full`; `ENOSPC` from the file system).
    Full,
    /// Another connection held the write lock longer than the busy timeout (SQLite
    /// `SQLITE_BUSY` / `SQLITE_LOCKED`, "database is locked"; PostgreSQL `55P03 lock_not_available`).
    Locked,
    /// The database file, its directory or the server refuses writes (SQLite
    /// `SQLITE_READONLY`; PostgreSQL `25006 read_only_sql_transaction`, a standby).
    ReadOnly,
    /// The file system failed a read or write of the database file or its `-wal`, `-shm` or
    /// `-journal` file (SQLite `SQLITE_IOERR*`, which a full disk also gives when the WAL
    /// cannot grow).
    Io,
    /// The connection to the server was lost: the server ended it (PostgreSQL `57P01`
    /// admin shutdown, `57P02` crash shutdown, `57P03` cannot connect now, class `08`
    /// connection exceptions) or the socket failed. The pool opens a new one; the work is
    /// retried.
    Disconnected,
}

impl StoreFault {
    /// The store fault behind a driver error, if it is one.
    pub fn of(e: &sqlx::Error) -> Option<StoreFault> {
        match e {
            sqlx::Error::Database(db) => {
                let code = db.code()?;
                if let Ok(n) = code.parse::<i32>() {
                    // SQLite: an extended result code; its low byte is the primary code.
                    return match n & 0xff {
                        13 => Some(StoreFault::Full),      // SQLITE_FULL
                        5 | 6 => Some(StoreFault::Locked), // SQLITE_BUSY, SQLITE_LOCKED
                        8 => Some(StoreFault::ReadOnly),   // SQLITE_READONLY
                        10 | 14 => Some(StoreFault::Io),   // SQLITE_IOERR, SQLITE_CANTOPEN
                        _ => None,
                    };
                }
                match code.as_ref() {
                    "53100" => Some(StoreFault::Full),
                    "55P03" => Some(StoreFault::Locked),
                    "25006" => Some(StoreFault::ReadOnly),
                    c if c.starts_with("58") => Some(StoreFault::Io),
                    "57P01" | "57P02" | "57P03" => Some(StoreFault::Disconnected),
                    c if c.starts_with("08") => Some(StoreFault::Disconnected),
                    _ => None,
                }
            }
            sqlx::Error::Io(io) if io.raw_os_error() == Some(28) => Some(StoreFault::Full), // ENOSPC
            sqlx::Error::Io(_) | sqlx::Error::Tls(_) => Some(StoreFault::Disconnected),
            _ => None,
        }
    }

    /// The store fault named in an error message that only kept the driver's text (apalis's
    /// errors): SQLite's and PostgreSQL's own wording of each fault.
    pub fn in_message(message: &str) -> Option<StoreFault> {
        let m = message.to_ascii_lowercase();
        if m.contains("database or disk is full")
            || m.contains("no space left on device")
            || m.contains("could not extend file")
        {
            Some(StoreFault::Full)
        } else if m.contains("database is locked") || m.contains("database table is locked") {
            Some(StoreFault::Locked)
        } else if m.contains("attempt to write a readonly database")
            || m.contains("read-only transaction")
        {
            Some(StoreFault::ReadOnly)
        } else if m.contains("disk i/o error") {
            Some(StoreFault::Io)
        } else if m.contains("terminating connection")
            || m.contains("server closed the connection")
            || m.contains("connection reset")
            || m.contains("broken pipe")
            || m.contains("connection refused")
        {
            Some(StoreFault::Disconnected)
        } else {
            None
        }
    }

    /// What is wrong, in a few words.
    pub fn what(self) -> &'static str {
        match self {
            StoreFault::Full => "the database or the disk under it is full",
            StoreFault::Locked => {
                "the database is locked: another connection held its write lock longer than the busy timeout"
            }
            StoreFault::ReadOnly => "the database refuses writes (read-only)",
            StoreFault::Io => "an I/O error on the database file or its -wal/-shm/-journal file",
            StoreFault::Disconnected => {
                "the connection to the database server was lost (the server ended it or restarted)"
            }
        }
    }

    /// What the operator should do (reel itself retries).
    pub fn advice(self) -> &'static str {
        match self {
            StoreFault::Full => {
                "free space on the file system holding the database (with its -wal and -journal \
                 files) or raise the server's quota; reel retries the work and needs no restart"
            }
            StoreFault::Locked => {
                "find the process holding a write transaction on the database (for SQLite \
                 `fuser` on the file; a `sqlite3` shell left in a transaction is a usual suspect) \
                 and end it; reel retries the work"
            }
            StoreFault::ReadOnly => {
                "make the database file and its directory writable by reel's user, or point \
                 [store] url at the primary server; reel retries the work"
            }
            StoreFault::Io => {
                "check the file system holding the database (kernel log, free space, mount \
                 state); reel retries the work"
            }
            StoreFault::Disconnected => {
                "reel reconnects and retries the work; if this repeats, check that the database \
                 server is up and reachable"
            }
        }
    }
}

impl std::fmt::Display for StoreFault {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.what())
    }
}

impl CatalogueError {
    /// The store fault behind this error, if it is one ([`StoreFault::of`]).
    pub fn store_fault(&self) -> Option<StoreFault> {
        match self {
            CatalogueError::Database { source, .. } | CatalogueError::Open { source, .. } => {
                StoreFault::of(source)
            }
            _ => None,
        }
    }
}

/// Result of a catalogue operation.
pub type Result<T> = std::result::Result<T, CatalogueError>;

/// Attach the catalogue operation's name to a driver error.
pub(crate) trait DbContext<T> {
    /// Map a driver error into [`CatalogueError::Database`] for operation `op`.
    fn ctx(self, op: &'static str) -> Result<T>;
}

impl<T> DbContext<T> for std::result::Result<T, sqlx::Error> {
    fn ctx(self, op: &'static str) -> Result<T> {
        self.map_err(|source| CatalogueError::Database { op, source })
    }
}

/// Replace the password of a URL (`scheme://user:password@host`) by `***` for messages and logs.
pub(crate) fn redact_url(url: &str) -> String {
    let Some(scheme_end) = url.find("://") else {
        return url.to_string();
    };
    let rest = &url[scheme_end + 3..];
    let authority_end = rest.find(['/', '?', '#']).unwrap_or(rest.len());
    let authority = &rest[..authority_end];
    let Some(at) = authority.rfind('@') else {
        return url.to_string();
    };
    let userinfo = &authority[..at];
    match userinfo.find(':') {
        Some(colon) => format!(
            "{}{}:***{}",
            &url[..scheme_end + 3],
            &userinfo[..colon],
            &rest[at..]
        ),
        None => url.to_string(),
    }
}

/// Cut long user input for error messages.
pub(crate) fn shorten(s: &str) -> String {
    const MAX: usize = 200;
    if s.chars().count() <= MAX {
        s.to_string()
    } else {
        let mut out: String = s.chars().take(MAX).collect();
        out.push('…');
        out
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn redacts_the_password_only() {
        assert_eq!(
            redact_url("postgres://reel:s3cr@t@db.example:5432/reel?schema=a"),
            "postgres://reel:***@db.example:5432/reel?schema=a"
        );
        assert_eq!(
            redact_url("postgres://reel@db/reel"),
            "postgres://reel@db/reel"
        );
        assert_eq!(
            redact_url("sqlite:/var/lib/reel/c.db"),
            "sqlite:/var/lib/reel/c.db"
        );
        // An '@' after the authority is not a password separator.
        assert_eq!(
            redact_url("postgres://h/db?x=a:b@c"),
            "postgres://h/db?x=a:b@c"
        );
    }

    #[test]
    fn shortens_long_input_on_a_char_boundary() {
        let long = "é".repeat(300);
        let s = shorten(&long);
        assert_eq!(s.chars().count(), 201);
        assert!(s.ends_with('…'));
        assert_eq!(shorten("abc"), "abc");
    }
}
