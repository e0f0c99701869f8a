//! The error type of the jobs layer. Every variant says what went wrong and what to do.

use std::path::PathBuf;

use reel_engine::catalogue::StoreFault;

/// Errors of the jobs layer (queue, leases, config, worker).
#[derive(Debug, thiserror::Error)]
pub enum JobsError {
    /// The config file could not be read.
    #[error(
        "cannot read config file {path}: {source}; check the path given to --config or REEL_CONFIG"
    )]
    ConfigRead {
        /// The file.
        path: PathBuf,
        /// The I/O error.
        source: std::io::Error,
    },
    /// The config file or an override is invalid.
    #[error("invalid configuration in {origin}: {message}")]
    Config {
        /// Where the bad value came from (the file, or the environment variable).
        origin: String,
        /// What is wrong, naming the key.
        message: String,
    },
    /// A database operation failed. A fault of the store itself (full, locked, read-only, I/O)
    /// is named with what to do ([`StoreFault`]); the worker retries the job either way.
    #[error(
        "job store ({backend}) at {location} failed while {doing}: {}{source}; {}",
        StoreFault::of(.source).map(|f| format!("{f}: ")).unwrap_or_default(),
        StoreFault::of(.source).map_or(
            "check that the database at the configured [store] url is reachable and writable",
            |f| f.advice()
        )
    )]
    Database {
        /// `sqlite` or `postgres`.
        backend: &'static str,
        /// The database: the SQLite file, or PostgreSQL's `host:port/database`.
        location: String,
        /// What reel was doing.
        doing: String,
        /// The driver error.
        source: sqlx::Error,
    },
    /// Applying reel's job-table migrations failed.
    #[error(
        "cannot migrate reel's job tables: {0}; the database may hold a newer schema (upgrade reel) or be read-only"
    )]
    Migrate(#[from] sqlx::migrate::MigrateError),
    /// The apalis queue failed.
    #[error(
        "job queue (apalis, {backend}) at {location} failed while {doing}: {message}{}",
        StoreFault::in_message(.message).map(|f| format!("; {f}: {}", f.advice())).unwrap_or_default()
    )]
    Queue {
        /// `sqlite` or `postgres`.
        backend: &'static str,
        /// The queue's database: the SQLite file (`jobs.db`), or PostgreSQL's `host:port/database`.
        location: String,
        /// What reel was doing.
        doing: String,
        /// The apalis error, rendered.
        message: String,
    },
    /// No job with that id.
    #[error("no job with id {0}; list jobs with `reel jobs list`")]
    NoSuchJob(String),
    /// Something looked up does not exist.
    #[error("{what}; {hint}")]
    NotFound {
        /// What was not found.
        what: String,
        /// What to do.
        hint: String,
    },
    /// An operator's request was refused as given (a malformed name, a missing reason).
    #[error("{what}; {hint}")]
    Refused {
        /// What was wrong.
        what: String,
        /// What to do.
        hint: String,
    },
    /// The job is not in a state that allows the operation.
    #[error("job {id} is {state}: {hint}")]
    BadJobState {
        /// The job.
        id: String,
        /// Its current state.
        state: String,
        /// What the user can do.
        hint: String,
    },
    /// A stored job payload could not be decoded.
    #[error(
        "job {id} has an unreadable payload ({source}); it was written by an incompatible reel version: cancel it and submit again"
    )]
    Payload {
        /// The job.
        id: String,
        /// The serde error.
        source: serde_json::Error,
    },
    /// A lease is held by someone else.
    #[error("{resource} is leased by {holder} until its lease expires; wait, or stop that worker")]
    LeaseBusy {
        /// The drive or cartridge.
        resource: String,
        /// The current holder.
        holder: String,
    },
    /// The fencing check failed: this worker lost its lease and must not write.
    #[error(
        "lease on {resource} lost (held epoch {held}, current epoch {current}, holder {holder}): stop writing and release the drive; another worker took over"
    )]
    Fenced {
        /// The drive or cartridge.
        resource: String,
        /// The epoch this worker holds.
        held: i64,
        /// The epoch in the database.
        current: i64,
        /// The current holder, if any.
        holder: String,
    },
    /// The job was cancelled while it ran.
    #[error("job {0} was cancelled")]
    Cancelled(String),
    /// A job spec was refused: at submission, or by the planner (never retried). Transparent,
    /// so a report of the error chain (`{:#}`) says it once.
    #[error(transparent)]
    Invalid(#[from] crate::submission::SubmissionError),
    /// A tape request's stored detail cannot be read by this reel (never retried).
    #[error(
        "tape request {request} carries a detail this reel cannot read ({reason}); it was planned by an incompatible reel version: cancel its job and submit it again"
    )]
    RequestDetail {
        /// The request's row id.
        request: i64,
        /// What is wrong with it.
        reason: String,
    },
    /// A tape request ended failed.
    #[error("request {request} ({key}) failed: {reason}")]
    RequestFailed {
        /// The request's row id.
        request: i64,
        /// Its object key (or cartridge task name).
        key: String,
        /// Why.
        reason: String,
    },
    /// A job watched to its end (the demo, `--wait`) ended other than done.
    #[error("{kind} job {id} ended {state}: {reason}")]
    JobEnded {
        /// archive, recall, verify, intake, rebuild.
        kind: String,
        /// The job.
        id: String,
        /// Its final state.
        state: String,
        /// Its error.
        reason: String,
    },
    /// Files the demo recalled differ from what it archived.
    #[error(
        "recalled files differ from the originals: {0}; this is a fault of reel or of the plugin, report it with the demo's directory"
    )]
    Differs(String),
    /// Recovery of interrupted tape work at start-up failed; its type is kept (a drive fault
    /// is retried by starting again, a catalogue fault names the store's).
    #[error("recovery at start-up failed: {0}")]
    Recovery(#[source] reel_engine::session::SessionError),
    /// Something reel itself got wrong (a task that panicked, a broken invariant): a bug.
    #[error("internal error: {0}; this is a bug in reel, report it with the log")]
    Internal(String),
    /// A drive failed in the middle of a batch (its requests were settled already).
    #[error("drive {drive} failed: {reason}")]
    DriveFailed {
        /// The drive.
        drive: String,
        /// The fault.
        reason: String,
    },
    /// Tape work failed in the engine (a device, medium, catalogue or session error), with its
    /// type kept, so the worker can tell a failed drive from a refused request.
    #[error("tape work failed: {0}")]
    Session(#[from] reel_engine::session::SessionError),
    /// The catalogue failed.
    #[error(transparent)]
    Catalogue(#[from] reel_engine::catalogue::CatalogueError),
    /// A data-encryption key could not be had or kept (a missing key, a refused key file, a
    /// key manager that failed); its type is kept, so a key manager worth asking again is
    /// told from a key that is not there.
    #[error(transparent)]
    Key(#[from] reel_keys::KeyError),
    /// An I/O error on a local path.
    #[error("{doing} {path}: {source}")]
    Io {
        /// What reel was doing.
        doing: &'static str,
        /// The path.
        path: PathBuf,
        /// The I/O error.
        source: std::io::Error,
    },
}

impl JobsError {
    /// The store fault behind this error, if it is one: the database (job tables, apalis queue
    /// or catalogue) is full, locked, read-only or failing I/O, rather than refusing a query.
    pub fn store_fault(&self) -> Option<StoreFault> {
        match self {
            JobsError::Database { source, .. } => StoreFault::of(source),
            JobsError::Queue { message, .. } => StoreFault::in_message(message),
            JobsError::Catalogue(c) => c.store_fault(),
            JobsError::Session(reel_engine::session::SessionError::Catalogue(c))
            | JobsError::Recovery(reel_engine::session::SessionError::Catalogue(c)) => {
                c.store_fault()
            }
            _ => None,
        }
    }

    /// Whether another attempt cannot succeed: a spec the planner refused, a bad config, an
    /// unreadable payload, or an engine error that says the same (a key that cannot be a path,
    /// an invalid setting). The worker fails such a job at once with the reason; anything else
    /// (a drive, medium, database or lease fault, a busy store) is retried with backoff.
    pub fn is_permanent(&self) -> bool {
        use reel_engine::session::SessionError as S;
        matches!(
            self,
            JobsError::Payload { .. }
                | JobsError::Config { .. }
                | JobsError::Invalid(_)
                | JobsError::RequestDetail { .. }
                | JobsError::Session(S::Config(_) | S::UnsafeKey { .. })
        ) || matches!(self, JobsError::Key(k) if !k.is_retryable())
    }

    /// Whether a drive itself failed ([`reel_engine::device::DeviceError::is_drive_failure`]):
    /// the drive needs service; another drive may do the work.
    pub fn is_drive_failure(&self) -> bool {
        match self {
            JobsError::Session(e) | JobsError::Recovery(e) => e.is_drive_failure(),
            JobsError::DriveFailed { .. } => true,
            _ => false,
        }
    }
}

/// Result of the jobs layer.
pub type Result<T> = std::result::Result<T, JobsError>;
