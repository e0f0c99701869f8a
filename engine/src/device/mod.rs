//! The device host: plugins loaded by path (through `reel_plugin_abi::host`, where the
//! loading, negotiation and unsafe FFI live), a library actor and one OS thread per drive fed
//! by a channel, with async methods for the engine and typed errors mapped from SCSI sense.
//!
//! - [`load_plugin`]: dlopen once per path; libraries are never unloaded.
//! - [`find_plugin`]: a plugin by name in the plugin directories, or by path.
//! - [`Library`]: the changer handle on its own thread; opens [`Drive`]s.
//! - [`Drive`]: one drive handle on its own thread `reel-drive-N`; a tape call can take hours
//!   and never blocks the async runtime; a plugin panic poisons that drive only.
//! - [`lbp`]: the one rule for every record read (its CRC32C checked, a damaged arrival
//!   reported and read once more).
//! - [`DeviceError`]: what a failed call means ([`classify`] is the sense table) and what to do.

mod actor;
mod drive;
mod error;
pub mod lbp;
mod library;
mod plugin;
mod plugin_dir;
mod timing;

pub use drive::Drive;
pub use error::{DeviceError, Kind, Sense, classify};
pub use library::{Library, library_name};
pub use plugin::load_plugin;
pub use plugin_dir::{
    DEFAULT_PLUGIN_DIR, find_plugin, installed_plugins, is_plugin_name, plugin_dirs,
    plugin_file_name,
};
pub use reel_plugin_abi::host::{CallError, DriveHandle, LibraryHandle, LoadError, Plugin};
pub use reel_plugin_abi::sdk::{DriveInfo, Element, Geometry, LibraryInfo, ReadRecord};
pub use reel_plugin_abi::types::{ReelDriveStats, ReelExtent, ReelPosition};
pub use timing::DriveTimings;
