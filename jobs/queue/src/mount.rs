//! What a mount is for: a cartridge's reads or a pool's writes ([`MountTarget`]), and the
//! summary of the work queued for one ([`QueueSummary`]). The queue keys its tape requests by
//! them, the drive board shows them, and the scheduler (in the worker crate) decides over them.

use std::time::Duration;

use serde::{Deserialize, Serialize};

/// Read or write; one mount never mixes them.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum MountMode {
    /// Recall or verify.
    Read,
    /// Archive.
    Write,
}

/// What a queue is for: one cartridge's reads, or one pool's writes.
#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(tag = "mode", rename_all = "lowercase")]
pub enum MountTarget {
    /// Read from this cartridge.
    Read {
        /// Barcode.
        barcode: String,
    },
    /// Write to some cartridge of this pool.
    Write {
        /// Pool name.
        pool: String,
    },
}

impl MountTarget {
    /// Read or write.
    pub fn mode(&self) -> MountMode {
        match self {
            MountTarget::Read { .. } => MountMode::Read,
            MountTarget::Write { .. } => MountMode::Write,
        }
    }
}

/// The queued work for one target.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct QueueSummary {
    /// The cartridge (reads) or pool (writes).
    pub target: MountTarget,
    /// The pool the target belongs to (for reads: the cartridge's pool), to find its group.
    pub pool: Option<String>,
    /// Bytes queued.
    pub bytes: u64,
    /// Files (requests) queued.
    pub files: u64,
    /// Age of the oldest queued request.
    pub oldest_age: Duration,
    /// Highest priority queued.
    pub priority: i32,
}
