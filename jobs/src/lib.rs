//! # reel-jobs: the `reel` command
//!
//! The binary's own crate: the command line, the HTTP API of `reel serve`, `reel demo` and the
//! terminal output. The jobs and tape requests live in `reel-queue`, the worker runtime in
//! `reel-worker`; this crate puts them in front of users and depends on both, never the other
//! way round (as ripgrep keeps its binary apart from its libraries). See docs/JOBS.md.
//!
//! - [`cli`]: the `reel` command line.
//! - [`api`]: the HTTP API of `reel serve` (jobs, catalogue, /metrics, /openapi.json).
//! - [`demo`]: `reel demo`, the main job on SQLite and the simulator.
//! - [`manpage`]: `reel man DIR`, the manual pages generated from the command line.
//! - [`plugin_cmd`]: `reel plugin ls|check`, the installed device plugins and the contract kit.
//! - [`logging`]: its log and terminal output, which never panics on a closed pipe.

#![deny(missing_docs)]

pub mod api;
pub mod cartridge_cmd;
pub mod cli;
pub mod demo;
pub mod drive_cmd;
pub mod key_cmd;
pub mod lifecycle_cmd;
pub mod logging;
pub mod manpage;
pub mod plugin_cmd;
pub mod queue_cmd;
pub mod repack_cmd;
pub mod text;
pub mod vault_cmd;

pub use reel_queue::{JobsError, Result};
