//! # reel-plugin-scsi: real drives and changers (SSC/SMC over SG_IO or iSCSI)
//!
//! The device plugin that puts reel on real LTO hardware. It speaks SSC to tape drives and SMC
//! to medium changers, keeps the full sense of every command (key, ASC/ASCQ, FILEMARK, EOM,
//! ILI and the INFORMATION residue) and hands it to the engine through the ABI status.
//!
//! Layers, bottom up:
//! - `reel_scsi_protocol` (plugins/scsi-protocol), shared with the st/sg plugin: the CDB
//!   builders and parsers of every SCSI feature, sense, the SG_IO ioctl.
//! - [`transport`]: how a CDB reaches a device — SG_IO on `/dev/sg*`, or iSCSI through
//!   libiscsi loaded at run time (no build dependency on it).
//! - [`device`]: one logical unit, opened from the config; per-command timeouts ([`timeouts`]),
//!   unit attention retried, becoming ready waited out ([`policy`]).
//! - [`drive`], [`changer`]: the ABI calls mapped to commands; [`lbp`] for CRC32C logical
//!   block protection.
//! - [`library`]: the SDK [`Library`](reel_plugin_abi::sdk::Library) exported as
//!   `reel_plugin_v1`; [`config`] parses its configuration string, [`resolve`] finds devices
//!   named by serial.
//!
//! docs/SCSI.md lists which commands are verified against tgt and which only against the
//! scripted fake target of the unit tests.

pub mod changer;
pub mod config;
pub mod device;
pub mod drive;
pub mod error;
pub mod lbp;
pub mod library;
pub mod policy;
pub mod resolve;
pub mod timeouts;
pub mod transport;

reel_plugin_abi::export_plugin!(crate::library::ScsiLibrary);
