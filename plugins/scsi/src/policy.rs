//! How long and how often a command is retried or waited for: UNIT ATTENTION, NOT READY while
//! becoming ready, BUSY. Configured per library (`config.rs`), applied by every command of a
//! device (`device.rs`).

use std::time::Duration;

/// Retry and wait policy.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Policy {
    /// How many UNIT ATTENTIONs in a row a command is retried through.
    pub unit_attention_retries: u32,
    /// How long a command is retried while the unit is becoming ready (04/01, 04/07).
    pub not_ready_wait: Duration,
    /// Pause between retries while becoming ready or busy.
    pub poll: Duration,
    /// How many BUSY statuses in a row are retried.
    pub busy_retries: u32,
}

impl Default for Policy {
    fn default() -> Policy {
        Policy {
            unit_attention_retries: 8,
            not_ready_wait: Duration::from_secs(600),
            poll: Duration::from_secs(1),
            busy_retries: 30,
        }
    }
}
