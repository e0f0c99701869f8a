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

    /// The open lock of a SQLite catalogue could not be taken (`open_lock.rs`).
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

    /// A query failed in the database.
    #[error(
        "catalogue operation `{op}` failed in the database: {source}; check that the database is reachable and has free space, then retry"
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
