//! What can go wrong with keys, as one type callers can match: a key that is missing or
//! refused is permanent for the work that needs it; an external key manager that timed out
//! or could not be run may answer next time ([`KeyError::is_retryable`]).

use std::path::PathBuf;

/// An error about keys. No variant holds key bytes.
#[derive(Debug, thiserror::Error)]
pub enum KeyError {
    /// A key id that is not one reel accepts.
    #[error(
        "key id {id:?} is not valid: {why} (use 1 to 64 letters, digits, '.', '_' or '-', \
         starting with a letter or digit)"
    )]
    BadId {
        /// The id given.
        id: String,
        /// What is wrong with it.
        why: &'static str,
    },
    /// No key with that id where it was looked for.
    #[error(
        "no key {id} in {place}: create it (`reel key create {id}`) or import it (`reel key import`)"
    )]
    NotFound {
        /// The id.
        id: String,
        /// Where it was looked for (a key file, a key-manager command).
        place: String,
    },
    /// A key with that id already exists.
    #[error("a key {id} already exists in {file}: pick another id (a key is never replaced)")]
    Exists {
        /// The id.
        id: String,
        /// The key file.
        file: PathBuf,
    },
    /// The key file may not be used: its owner or mode lets someone else read it, or it is
    /// not a regular file.
    #[error("key file {file} is refused: {why}")]
    Unsafe {
        /// The key file.
        file: PathBuf,
        /// Why, and what to do.
        why: String,
    },
    /// Reading or writing a key file failed. The I/O error is part of the message, not a
    /// `source` as well: a caller printing the chain (`{:#}`) would say it twice.
    #[error("{doing} {file}: {error}")]
    Io {
        /// What was being done.
        doing: &'static str,
        /// The file.
        file: PathBuf,
        /// The error.
        error: std::io::Error,
    },
    /// A key file that does not parse.
    #[error(
        "key file {file} is damaged: {why}; restore it from a backup or import the keys from their paper copies"
    )]
    Damaged {
        /// The key file.
        file: PathBuf,
        /// What does not parse.
        why: String,
    },
    /// A passphrase that does not open a protected key (or a protected copy that was changed).
    #[error(
        "the passphrase does not open the protected copy of key {id} (or the copy was altered)"
    )]
    WrongPassphrase {
        /// The key id.
        id: String,
    },
    /// A passphrase too weak to protect a key.
    #[error("the passphrase is too short: use at least {min} characters")]
    WeakPassphrase {
        /// Its shortest length.
        min: usize,
    },
    /// Paper-key text that cannot be read back.
    #[error("the paper key cannot be read: {why}")]
    Paper {
        /// What is wrong, naming the line where there is one.
        why: String,
    },
    /// A key that is not what its id and fingerprint say.
    #[error("key {id} does not match: its fingerprint is {got}, {expected} was expected")]
    Mismatch {
        /// The key id.
        id: String,
        /// The fingerprint expected.
        expected: String,
        /// The fingerprint of the key found.
        got: String,
    },
    /// An external key-manager command that failed or answered wrongly.
    #[error("key manager `{command}` for key {id} (pool {pool}): {why}")]
    Manager {
        /// The program.
        command: String,
        /// The key id asked for.
        id: String,
        /// The pool asked for.
        pool: String,
        /// What went wrong (never what it printed on its standard output).
        why: String,
        /// Whether asking again may work (it timed out, or could not be started).
        retryable: bool,
    },
}

impl KeyError {
    /// Whether the same request may succeed later without anyone changing anything.
    pub fn is_retryable(&self) -> bool {
        match self {
            KeyError::Manager { retryable, .. } => *retryable,
            KeyError::Io { error, .. } => matches!(
                error.kind(),
                std::io::ErrorKind::Interrupted | std::io::ErrorKind::WouldBlock
            ),
            _ => false,
        }
    }
}
