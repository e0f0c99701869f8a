//! # reel-worker: the worker runtime
//!
//! One worker process per drive host turns the queue's tape requests into tape work. It
//! publishes its drives on the board every host shares, asks the [`scheduler`] which queue each
//! free drive should serve, claims that queue's requests under a lease, and runs them through
//! the [`executor`], which drives the engine's service and sessions through the device plugin.
//!
//! Dependencies point one way: this crate uses `reel-queue` (the tables and the rules on them)
//! and `reel-engine` (the tape), and knows nothing of the `reel` binary's CLI or HTTP API.
//!
//! - [`scheduler`]: the mount decision, a pure function.
//! - [`worker`]: the worker process, its drive loops and the [`worker::TapeExecutor`] trait.
//! - [`executor`]: the tape executor, built on the engine's service and sessions.
//! - [`recall_copy`]: which copy of an object a recall reads.
//! - [`hold`]: why queued work waits, for the operator's views.
//! - [`vault`]: the robot's half of exporting and importing cartridges.
//! - [`drive_metrics`]: the drive loops' metrics.
//! - [`embedded`]: a worker inside another process (`reel demo`, tests, the benchmark).

#![deny(missing_docs)]

pub mod delete;
pub mod drive_metrics;
pub mod embedded;
pub mod executor;
pub mod hold;
pub mod more_writes;
pub mod recall_copy;
pub mod repack;
pub mod reroute;
pub mod scheduler;
pub mod vault;
pub mod worker;
