//! # reel-engine: catalogue, on-tape format, device host and sessions
//!
//! The engine is what makes reel an archive: it decides what goes where on tape, streams it
//! there, proves it was written, finds it again fast, and loses nothing when a worker, a drive
//! or the power dies. It depends on `reel-plugin-abi` only; device plugins are loaded by path.
//!
//! - [`device`]: the device host (plugins, library actor, one OS thread per drive, typed errors).
//! - [`format`](mod@format): the on-tape format (label, containers, footers) and its decoders.
//! - [`catalogue`]: what is where, on SQLite or PostgreSQL.
//! - [`integrity`]: what reel's checks caught (LBP, SHA-256, medium errors), kept by cartridge.
//! - [`health`]: what drives report at each unmount (TapeAlert flags, error statistics).
//! - [`session`]: what one drive does with one mounted cartridge (write, verify, recall,
//!   intake, recovery, rebuild).
//! - [`service`]: one host's tape service: the mechanisms the jobs layer builds every tape
//!   action from (hold a drive with a cartridge, pick a writable one, run a session on what is
//!   held, unmount, recover), with drive hand-out (a cartridge belongs to whoever holds the
//!   drive it is in). Policy (which work, which copy, when to unmount) is the jobs layer's.

pub mod catalogue;
pub mod database;
pub mod device;
pub mod format;
pub mod health;
pub mod integrity;
pub mod service;
pub mod session;
