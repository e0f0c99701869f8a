//! Tape sessions: what one drive does with one mounted cartridge.
//!
//! - [`mount`]: robot move, load, label check; unmount.
//! - [`write`]: the archive data path (spool → hash → records → drive) with group commit.
//! - [`source`]: an archive source opened safely, read within its size, checked unchanged.
//! - [`space`]: a cartridge's capacity and the room left before the next object.
//! - [`verify`]: read-back of what a session wrote, in one sequential pass.
//! - [`recall`]: ordered reads of extents into a pool of destination writers.
//! - [`intake`]: calibration and labelling of new cartridges.
//! - [`recovery`]: the crash rules applied to a cartridge at mount time.
//! - [`rebuild`]: the catalogue reconstructed from the tapes alone.
//!
//! Sessions never choose which cartridge to mount: the scheduler in `reel-jobs` does. They
//! never write anywhere but at end of data.

pub mod clean;
pub mod confine;
pub mod copied;
pub mod destination;
pub mod intake;
pub mod label_check;
pub mod mail_slot;
pub mod mount;
pub mod order;
pub mod rebuild;
pub mod recall;
pub mod recovery;
pub mod source;
pub mod space;
pub mod verify;
pub mod write;

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};

use serde::{Deserialize, Serialize};

use crate::catalogue::CatalogueError;
use crate::device::DeviceError;
use crate::format::FormatError;

/// Which containers a write session reads back before it acknowledges them.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize, Default)]
#[serde(rename_all = "lowercase")]
pub enum VerifyMode {
    /// Every container, in one sequential pass after the session's last barrier.
    #[default]
    Full,
    /// The first container of a session, then one in `sample_every`.
    Sampled,
    /// None.
    None,
}

impl std::str::FromStr for VerifyMode {
    type Err = String;
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        match s.to_ascii_lowercase().as_str() {
            "full" => Ok(VerifyMode::Full),
            "sampled" => Ok(VerifyMode::Sampled),
            "none" => Ok(VerifyMode::None),
            other => Err(format!(
                "unknown verify mode `{other}`; use full, sampled or none"
            )),
        }
    }
}

/// Tunables of the data paths. Defaults are what an LTO-9 library wants.
#[derive(Clone, Debug, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct SessionConfig {
    /// Data record size in bytes (256 KiB to 8 MiB).
    pub record_size: usize,
    /// Close a container once it holds this many bytes.
    pub container_bytes: u64,
    /// Group commit: a synchronous filemark at least every this many bytes...
    pub barrier_bytes: u64,
    /// ...or every this many seconds of host time.
    pub barrier_seconds: f64,
    /// Read-back policy.
    pub verify: VerifyMode,
    /// With `Sampled`: one container in this many is read back.
    pub sample_every: u64,
    /// Records buffered between the framing pipeline and the drive thread.
    pub pipeline_records: usize,
    /// Use logical block protection (CRC32C per record) when the drive offers it.
    pub lbp: bool,
    /// After early warning, write at most this many bytes more (the queued records and the
    /// closing tail of the container); a container whose tail would not fit is given up
    /// (filemark, dead) instead of running into end of medium. Near the end of a cartridge the
    /// pipeline holds no more than this. At least one record.
    pub early_warning_margin_bytes: u64,
    /// Recall: gaps shorter than this are read through instead of located.
    pub read_through_gap_bytes: u64,
    /// Recall: parallel destination writer threads.
    pub writer_threads: usize,
    /// Recall: records of read-ahead between the drive and the writers.
    pub read_ahead_records: usize,
    /// Recall: fsync every recalled file before its rename.
    pub fsync: bool,
}

impl Default for SessionConfig {
    fn default() -> Self {
        SessionConfig {
            record_size: 1 << 20,
            container_bytes: 4 << 30,
            barrier_bytes: 16 << 30,
            barrier_seconds: 60.0,
            verify: VerifyMode::Full,
            sample_every: 10,
            pipeline_records: 64,
            lbp: true,
            early_warning_margin_bytes: space::DEFAULT_EARLY_WARNING_MARGIN,
            // Reading through beats a LOCATE (about 2 s settle plus travel) up to roughly a GiB
            // at LTO-9's 400 MB/s (eval/REPORT.md).
            read_through_gap_bytes: 1 << 30,
            // The restore sweep in eval/REPORT.md: more writers keep up better with one drive.
            writer_threads: 16,
            read_ahead_records: 256,
            fsync: true,
        }
    }
}

impl SessionConfig {
    /// Check the values an operator may have mistyped.
    pub fn validate(&self) -> Result<(), SessionError> {
        use crate::format::{MAX_RECORD_SIZE, MIN_RECORD_SIZE};
        if !(MIN_RECORD_SIZE..=MAX_RECORD_SIZE).contains(&self.record_size) {
            return Err(SessionError::Config(format!(
                "record_size {} is out of range; use {} to {} bytes",
                self.record_size, MIN_RECORD_SIZE, MAX_RECORD_SIZE
            )));
        }
        if self.container_bytes < self.record_size as u64 {
            return Err(SessionError::Config(
                "container_bytes must be at least one record".into(),
            ));
        }
        if self.early_warning_margin_bytes < self.record_size as u64 {
            return Err(SessionError::Config(format!(
                "early_warning_margin_bytes {} is less than one record ({} bytes)",
                self.early_warning_margin_bytes, self.record_size
            )));
        }
        if self.writer_threads == 0 || self.writer_threads > 256 {
            return Err(SessionError::Config(
                "writer_threads must be between 1 and 256".into(),
            ));
        }
        if self.sample_every == 0 {
            return Err(SessionError::Config(
                "sample_every must be at least 1".into(),
            ));
        }
        Ok(())
    }
}

/// Everything that can end a session.
#[derive(Debug, thiserror::Error)]
pub enum SessionError {
    /// The drive or library reported an error.
    #[error(transparent)]
    Device(#[from] DeviceError),
    /// The catalogue failed.
    #[error(transparent)]
    Catalogue(#[from] CatalogueError),
    /// What was read from tape is not what reel wrote.
    #[error("{0}")]
    Format(#[from] FormatError),
    /// A local file could not be read or written.
    #[error("{path}: {source}")]
    Io {
        /// The file.
        path: String,
        /// The error.
        #[source]
        source: std::io::Error,
    },
    /// The cartridge in the drive is not the one the catalogue expects, or not reel's.
    #[error("cartridge {barcode}: {reason}")]
    Cartridge {
        /// Barcode.
        barcode: String,
        /// What is wrong and what to do.
        reason: String,
    },
    /// The tape's end of data is not where the catalogue says.
    #[error(
        "cartridge {barcode}: end of data is at block {found}, the catalogue expects {expected}; run recovery (reel worker does this at mount)"
    )]
    EodMismatch {
        /// Barcode.
        barcode: String,
        /// Where the tape says.
        found: u64,
        /// Where the catalogue says.
        expected: u64,
    },
    /// A read-back found data that does not match what was written.
    #[error("verify of container {container} on {barcode} failed: {reason}")]
    VerifyFailed {
        /// Barcode.
        barcode: String,
        /// Container id.
        container: i64,
        /// What differed.
        reason: String,
    },
    /// A key that would escape the destination or is not a valid path.
    #[error("key {key:?} cannot be recalled into a directory: {reason}")]
    UnsafeKey {
        /// The key.
        key: String,
        /// Why.
        reason: String,
    },
    /// The session was cancelled.
    #[error("cancelled")]
    Cancelled,
    /// A configuration value is invalid.
    #[error("invalid configuration: {0}")]
    Config(String),
    /// The fencing epoch moved: another worker owns this drive or cartridge now.
    #[error("lost the lease: {0}")]
    Fenced(String),
    /// The cartridge is loaded in a drive this host does not use (another host sharing the
    /// library is using it). Not a failure of the cartridge: it can be mounted here once that
    /// host unloads it.
    #[error(
        "cartridge {barcode} is loaded in drive {drive}, which another host sharing the library uses; it is mounted here once that host unloads it (retry later)"
    )]
    HeldElsewhere {
        /// Barcode.
        barcode: String,
        /// The library's index of the drive holding it.
        drive: u32,
    },
    /// Anything else, with its explanation.
    #[error("{0}")]
    Other(String),
}

impl SessionError {
    /// Wrap an I/O error with the path it concerns.
    pub fn io(path: impl AsRef<std::path::Path>, source: std::io::Error) -> Self {
        SessionError::Io {
            path: path.as_ref().display().to_string(),
            source,
        }
    }

    /// Whether the drive itself failed ([`DeviceError::is_drive_failure`]).
    pub fn is_drive_failure(&self) -> bool {
        matches!(self, SessionError::Device(d) if d.is_drive_failure())
    }
}

/// Cooperative cancellation, checked at record boundaries.
#[derive(Clone, Debug, Default)]
pub struct CancelToken(Arc<AtomicBool>);

impl CancelToken {
    /// A token not yet cancelled.
    pub fn new() -> Self {
        Self::default()
    }
    /// Ask the session to stop at its next record boundary.
    pub fn cancel(&self) {
        self.0.store(true, Ordering::SeqCst);
    }
    /// Whether cancellation was asked for.
    pub fn is_cancelled(&self) -> bool {
        self.0.load(Ordering::SeqCst)
    }
}

/// A check, made before each write, that this worker still owns the drive and cartridge.
/// The jobs layer implements it with its lease epochs; tests and the demo use [`NoFence`].
pub trait Fence: Send + Sync {
    /// Ok if the lease is still ours; the error explains who took it.
    fn check(&self) -> Result<(), String>;

    /// The lease as the catalogue checks it inside the transactions that make copies live
    /// ([`crate::catalogue::Catalogue::fenced_by`]); `None` (the default) when there is no
    /// lease row to check.
    fn writer_lease(&self) -> Option<crate::catalogue::WriterLease> {
        None
    }

    /// A check with no I/O, made before every record: `false` once the lease has lapsed for
    /// certain by this host's clock (a process frozen past its term sees it on waking, before
    /// it writes another record). `true` (the default) when there is no term.
    fn within_term(&self) -> bool {
        true
    }
}

/// A fence that always holds (single process, no leases).
#[derive(Clone, Copy, Debug, Default)]
pub struct NoFence;

impl Fence for NoFence {
    fn check(&self) -> Result<(), String> {
        Ok(())
    }
}

/// Progress reported by sessions: objects and bytes done so far.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize)]
pub struct Progress {
    /// Objects finished.
    pub objects: u64,
    /// Bytes finished.
    pub bytes: u64,
    /// The tape block near which the session is: the end of data after a write's last group
    /// commit, the first block of the container of the last object recalled; `None` until
    /// known.
    pub block: Option<u64>,
}

/// A progress callback: the session's totals so far, and the indices (in the session's item
/// list) of the items this report finishes: a recalled file in place, or archived objects
/// durable (verified, under a verify policy).
pub type ProgressFn = Arc<dyn Fn(Progress, &[usize]) + Send + Sync>;

/// A progress callback that ignores everything.
pub fn no_progress() -> ProgressFn {
    Arc::new(|_, _| {})
}

/// What a mount's worth of tape work cost, like CTA's end-of-session summary. Times are the
/// plugin's elapsed_ns (modelled on a simulator, measured on hardware).
#[derive(Clone, Debug, Default, Serialize, Deserialize, PartialEq)]
pub struct SessionSummary {
    /// Robot, load and unload time.
    pub mount_s: f64,
    /// Locate and space time.
    pub position_s: f64,
    /// Record transfer time.
    pub transfer_s: f64,
    /// Synchronous filemark (flush) time.
    pub flush_s: f64,
    /// Bytes moved to or from tape (payload).
    pub bytes: u64,
    /// Objects moved.
    pub objects: u64,
    /// Containers written or read.
    pub containers: u64,
    /// Locates issued.
    pub locates: u64,
}

impl SessionSummary {
    /// Add another summary to this one.
    pub fn add(&mut self, o: &SessionSummary) {
        self.mount_s += o.mount_s;
        self.position_s += o.position_s;
        self.transfer_s += o.transfer_s;
        self.flush_s += o.flush_s;
        self.bytes += o.bytes;
        self.objects += o.objects;
        self.containers += o.containers;
        self.locates += o.locates;
    }

    /// Total drive time in seconds.
    pub fn drive_s(&self) -> f64 {
        self.mount_s + self.position_s + self.transfer_s + self.flush_s
    }
}

/// Seconds from a plugin's elapsed nanoseconds.
pub(crate) fn secs(ns: u64) -> f64 {
    ns as f64 / 1e9
}

/// Seconds since the Unix epoch.
pub(crate) fn unix_now() -> u64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_secs())
        .unwrap_or(0)
}
