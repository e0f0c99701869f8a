//! # reel-scsi-protocol: the SCSI tape protocol, once, for every SCSI plugin
//!
//! reel reaches real hardware through two plugins: `reel-plugin-scsi` sends every command
//! itself (SG_IO or iSCSI), `reel-plugin-mhvtl` lets the kernel's `st` driver move the tape and
//! sends the rest through `sg`. Both speak the same SSC, SMC and SPC, and this crate is that
//! speech, so it exists once: the plugins keep only what differs between them (how a command
//! reaches the device, when to retry, how an ABI call maps onto commands).
//!
//! - [`cdb`]: one module per SCSI feature, each with its CDB builders and the parsers of its
//!   answers (never a panic on short or malformed data: a [`cdb::ParseError`] says what was
//!   wrong).
//! - [`sense`]: fixed and descriptor sense with the stream bits and the INFORMATION residue,
//!   the words an operator reads for the codes a tape library meets, and the ABI fault that
//!   carries them.
//! - [`command`]: one command's data phase and how it completed, whatever carried it.
//! - [`sg`]: the Linux `SG_IO` ioctl, the only `unsafe` code here.
//!
//! It has no exported symbol and depends only on the ABI crate: a library for plugins, not a
//! plugin.

pub mod cdb;
pub mod command;
pub mod sense;
pub mod sg;
