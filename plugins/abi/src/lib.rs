//! # reel-plugin-abi: the device plugin ABI of reel
//!
//! reel reaches every tape library through a *device plugin*: a shared library loaded at run
//! time that exports one symbol, `reel_plugin_v1`, returning a static table of C function
//! pointers. This crate holds everything on both sides of that boundary:
//!
//! - [`types`]: the `#[repr(C)]` table, status and value structs; `include/reel_plugin.h` is
//!   generated from it by cbindgen and checked in.
//! - [`sdk`]: traits and the [`export_plugin!`] macro to write a plugin in safe Rust.
//! - [`host`]: loading a plugin by path, negotiating its table and calling it through safe
//!   handles (used by the engine's device host and by the contract kit).
//! - [`seek`]: the tape seek cost model (CTA's) and recommended-access-order planning, shared by
//!   the simulator (to time locates and answer native RAO) and the engine (software RAO).
//! - [`kit`]: the plugin contract kit, run by the `reel-plugin-check` binary.
//! - [`config`]: the one way every plugin reads its configuration string.
//! - [`plugin_log`]: a plugin's `tracing` events handed to the host's log (ABI 1.2).
//!
//! docs/ABI.md describes every call, its sense on success and error, buffer ownership, the
//! thread model and the versioning rules.

pub mod config;
pub mod host;
pub mod kit;
mod plugin_file;
pub mod plugin_log;
pub mod sdk;
pub mod seek;
pub mod types;

pub use types::*;
