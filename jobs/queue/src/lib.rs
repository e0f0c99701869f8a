//! # reel-queue: jobs, tape requests and the tables they live in
//!
//! What a caller asked for and what the drives owe it, kept in SQLite or PostgreSQL so every
//! host sees the same queue. Two levels, as in CTA: **jobs** are what a caller asked for
//! (archive these files, recall these keys) and travel through apalis for submission, delivery
//! to a worker and crash re-delivery; **tape requests** are what a drive does (read extents of
//! one cartridge, write objects to a pool) and live in reel's own tables with leases, fencing,
//! progress, checkpoints and cancel requests, which apalis does not model. See docs/JOBS.md.
//!
//! This crate holds the data and the rules on it, and nothing that drives a tape: the worker
//! runtime (`reel-worker`) claims from it, and the `reel` binary (CLI and HTTP API) submits to
//! it and reads it. Nothing here depends on either.
//!
//! - [`config`]: `reel.toml` and `REEL_*` overrides, shared by every part of reel.
//! - [`job`]: job kinds and their specs, built once from what a caller gave ([`job::SpecError`]
//!   says what was wrong; each surface words it for its own inputs).
//! - [`submission`]: the checks a job spec passes before it is queued, and the archive source
//!   walk the planner shares.
//! - [`db`]: the pool on reel's own tables and their migrations.
//! - [`store`]: job records; [`apalis_bridge`]: the apalis queue and [`JobQueue`] over both.
//! - [`requests`]: tape requests, claims and progress; [`mount`]: what a mount is for;
//!   [`outstanding`]: a job's requests not done yet; [`failed`]: failed requests to review.
//! - [`lease`]: leases and fencing epochs; [`backoff`]: the retry policy.
//! - [`drives`]: the drive board every host publishes to; [`inventory`]: the changer's view;
//!   [`drive_state`]: drives in and out of service; [`drive_request`]: an operator's reset or cleaning of a drive.
//! - [`cartridge_task`]: verify, intake and rebuild work queued on a cartridge;
//!   [`request_detail`]: what a finished request found.
//! - [`token`]: API tokens, their scopes and roots; [`confine`]: where a token's jobs may read
//!   and write on the server.

#![deny(missing_docs)]

pub mod apalis_bridge;
pub mod backoff;
pub mod cartridge_import;
pub mod cartridge_task;
pub mod config;
pub mod confine;
pub mod db;
pub mod drive_progress;
pub mod drive_request;
pub mod drive_state;
pub mod drives;
pub mod error;
pub mod failed;
pub mod inventory;
pub mod job;
pub mod lease;
pub mod mount;
pub mod outstanding;
pub mod reason;
pub mod repack_select;
pub mod request_detail;
pub mod requests;
pub mod store;
pub mod submission;
pub mod text;
pub mod token;

pub use apalis_bridge::{ApalisDb, JobQueue, Ticket};
pub use backoff::Backoff;
pub use drive_state::{DriveService, DriveStates, Service};
pub use drives::{BoardEntry, BoardMount, DriveBoard};
pub use error::{JobsError, Result};
pub use inventory::{ElementView, Inventory, InventoryView};
pub use lease::{Fence, LeaseManager};
pub use requests::{ClaimLimit, NewTapeRequest, RequestMode, TapeRequest, TapeRequests};
pub use store::{FailOutcome, JobRecord, JobStore, Progress, StartOutcome};
