//! # reel-jobs: jobs, queue, worker runtime and the `reel` command
//!
//! Two levels, as in CTA (DESIGN.md §5): **jobs** are what a caller asked for (archive these
//! files, recall these keys) and travel through apalis 1.0 for submission, delivery to a worker
//! and crash re-delivery; **tape requests** are what a drive does (read extents of one cartridge,
//! write objects to a pool) and live in reel's own tables with leases, fencing, progress,
//! checkpoints and cancel requests, which apalis does not model. See docs/JOBS.md.
//!
//! - [`config`]: `reel.toml` and `REEL_*` overrides.
//! - [`job`]: job kinds and payloads.
//! - [`submission`]: the checks a job spec passes before it is queued (CLI and API), and the
//!   archive source walk the planner shares.
//! - [`db`]: the pool on reel's own tables (SQLite or PostgreSQL).
//! - [`queue`]: job records, the apalis bridge, tape requests and claims, leases and fencing.
//! - [`scheduler`]: the mount decision, a pure function.
//! - [`cartridge_task`]: verify, intake and rebuild work queued as tape requests on a cartridge.
//! - [`worker`]: the worker process and the [`worker::TapeExecutor`] trait the engine implements.
//! - [`executor`]: the tape executor, built on the engine's service and sessions.
//! - [`demo`]: `reel demo`, the main job on SQLite and the simulator.
//! - [`cli`]: the `reel` command line.
//! - [`logging`]: its log and terminal output, which never panics on a closed pipe.
//! - [`confine`]: where a token's jobs may read and write on the server.
//! - [`token`]: API tokens, their scopes and roots.
//! - [`api`]: the HTTP API of `reel serve` (jobs, catalogue, /metrics, /openapi.json).

#![deny(missing_docs)]

pub mod api;
pub mod cartridge_task;
pub mod cli;
pub mod config;
pub mod confine;
pub mod db;
pub mod demo;
pub mod drive_metrics;
pub mod embedded;
pub mod error;
pub mod executor;
pub mod job;
pub mod logging;
pub mod queue;
pub mod recall_copy;
pub mod request_detail;
pub mod scheduler;
pub mod submission;
pub mod token;
pub mod worker;

pub use error::{JobsError, Result};
