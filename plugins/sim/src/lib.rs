//! # reel-plugin-sim: a simulated LTO-9-class tape library (figures are SIMULATED)
//!
//! The library every reel test, the demo and the benchmark run on. It models the seed's
//! LTO-9-class library (seed `000_*` §1; docs/SIMULATOR.md lists every key, default and
//! formula): robot, load, unload, rewind and locate times (linear or serpentine, the latter by
//! CTA's cost model in [`reel_plugin_abi::seek`]), streaming with speed matching, the 1 GiB
//! drive buffer and backhitches, first-load calibration, LBP, MAM, WORM, faults injected
//! through `control`, and cartridges as directories that survive a restart. Every figure it
//! reports is modelled, never measured: SIMULATED.
//!
//! Built as a cdylib (loaded through the ABI, `reel_plugin_v1`) and an rlib (its own tests).
//!
//! Modules: [`config`] (the config string), [`clock`] (INSTANT and SCALED pacing), [`stream`]
//! (buffer, speed matching, backhitch), [`cartridge`] (on-disk layout), [`drive_state`] (one
//! drive's modelled state), [`drive`] (the drive handle and its commands), [`shared`] (what the
//! library and drive handles share: changer state and persistence, locks, the medium-error
//! registry, the power cut), [`library`] (the library handle: opening, layout, elements),
//! [`control`] (faults and test controls), [`mailbox`] (controls from other processes),
//! [`sense`] (sense conditions). Dependencies point one way: `library` → `drive` → `shared` →
//! `drive_state`.

pub mod cartridge;
pub mod clock;
pub mod config;
pub mod control;
pub mod data_file;
pub mod drive;
pub mod drive_state;
pub mod identity;
pub mod library;
pub mod mailbox;
pub mod sense;
pub mod shared;
pub mod stream;

pub use library::SimLibrary;

reel_plugin_abi::export_plugin!(crate::library::SimLibrary);
