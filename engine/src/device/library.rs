//! The library actor: one library (changer) handle owned by its own OS thread, with async
//! methods for the engine. Drives are opened through it and each gets a thread of its own.

use std::sync::Arc;

use reel_plugin_abi::host::{LibraryHandle, Plugin};
use reel_plugin_abi::sdk::{Element, LibraryInfo};

use super::actor::Actor;
use super::drive::Drive;
use super::error::DeviceError;

/// One library handle owned by its own OS thread (`reel-library`). Clones share the thread;
/// the handle is closed when the last clone and the last [`Drive`] opened from it are gone.
#[derive(Clone)]
pub struct Library {
    actor: Actor<LibraryHandle>,
    plugin: Arc<Plugin>,
}

impl std::fmt::Debug for Library {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Library")
            .field("plugin", &self.plugin)
            .finish()
    }
}

impl Library {
    /// Open the plugin's library with its configuration string, then hand the handle to its
    /// thread. Blocks while the plugin opens the library (call it from a blocking context if
    /// the plugin's open is slow).
    pub fn open(plugin: Arc<Plugin>, config: &str) -> Result<Library, DeviceError> {
        let handle = LibraryHandle::open(&plugin, config)?;
        let actor = Actor::spawn("reel-library".to_owned(), handle)?;
        tracing::info!(plugin = plugin.name(), "library opened");
        Ok(Library { actor, plugin })
    }

    /// The plugin behind this library.
    pub fn plugin(&self) -> &Arc<Plugin> {
        &self.plugin
    }

    /// Run a closure on the library thread with exclusive access to the handle.
    pub async fn run<R: Send + 'static>(
        &self,
        f: impl FnOnce(&mut LibraryHandle) -> R + Send + 'static,
    ) -> Result<R, DeviceError> {
        self.actor.run("run", f).await
    }

    /// Every element of the changer (slots, drives, mail slots), with barcodes.
    pub async fn inventory(&self) -> Result<Vec<Element>, DeviceError> {
        self.actor
            .run("library_inventory", |h| {
                h.inventory().map_err(DeviceError::from_call)
            })
            .await?
    }

    /// The library's identity as the plugin reports it (ABI 1.1 `library_info`); None when the
    /// plugin cannot tell (a 1.0 plugin, a configuration without a changer).
    pub async fn info(&self) -> Result<Option<LibraryInfo>, DeviceError> {
        match self
            .actor
            .run("library_info", |h| h.info().map_err(DeviceError::from_call))
            .await?
        {
            Ok(i) => Ok(Some(i)),
            Err(DeviceError::Unsupported { .. }) => Ok(None),
            Err(e) => Err(e),
        }
    }

    /// The name every host gives this library in drive names, drive leases and the drive
    /// board: [`library_name`] of its reported identity, so hosts agree however the plugin is
    /// installed or configured there; `fallback` (a name from the configuration) when the
    /// plugin reports none, with a warning, since hosts must then configure it identically.
    pub async fn identity(&self, fallback: &str) -> Result<String, DeviceError> {
        if let Some(name) = self.info().await?.as_ref().and_then(library_name) {
            return Ok(name);
        }
        tracing::warn!(
            plugin = self.plugin.name(),
            name = fallback,
            "the plugin reports no library serial number: the library is named from the plugin path and config, so every host sharing it must install and configure the plugin identically"
        );
        Ok(fallback.to_owned())
    }

    /// MOVE MEDIUM from element `src` to element `dst`; returns the move's elapsed time (ns).
    pub async fn move_medium(&self, src: u32, dst: u32) -> Result<u64, DeviceError> {
        self.actor
            .run("library_move", move |h| {
                h.move_medium(src, dst).map_err(DeviceError::from_call)?;
                Ok(h.last_status().elapsed_ns)
            })
            .await?
    }

    /// Put the cartridge in storage slot `slot` out to import/export element `ie` (addresses).
    pub async fn export(&self, slot: u32, ie: u32) -> Result<u64, DeviceError> {
        self.actor
            .run("library_export", move |h| {
                h.export(slot, ie).map_err(DeviceError::from_call)?;
                Ok(h.last_status().elapsed_ns)
            })
            .await?
    }

    /// Take the cartridge in import/export element `ie` into storage slot `slot` (addresses).
    pub async fn import(&self, ie: u32, slot: u32) -> Result<u64, DeviceError> {
        self.actor
            .run("library_import", move |h| {
                h.import(ie, slot).map_err(DeviceError::from_call)?;
                Ok(h.last_status().elapsed_ns)
            })
            .await?
    }

    /// A plugin-specific request (the simulator's fault injection); returns the response text.
    pub async fn control(&self, request: &str) -> Result<String, DeviceError> {
        let request = request.to_owned();
        self.actor
            .run("control", move |h| {
                h.control(&request).map_err(DeviceError::from_call)
            })
            .await?
    }

    /// Open the drive with the given index; the drive gets its own thread (`reel-drive-N`).
    pub async fn open_drive(&self, index: u32) -> Result<Drive, DeviceError> {
        let handle = self
            .actor
            .run("drive_open", move |h| {
                h.open_drive(index).map_err(DeviceError::from_call)
            })
            .await??;
        Drive::spawn(index, handle)
    }
}

/// A library's name from its identity: its product and serial number, with anything but
/// ASCII letters, digits, `.` and `_` made `_` (the name goes into lease resources and log
/// lines), e.g. `simlib-3F9A0C21B7D4`. None without a serial number.
pub fn library_name(info: &LibraryInfo) -> Option<String> {
    let clean = |s: &str, max: usize| -> String {
        s.trim()
            .chars()
            .take(max)
            .map(|c| {
                if c.is_ascii_alphanumeric() || c == '.' || c == '_' {
                    c
                } else {
                    '_'
                }
            })
            .collect()
    };
    let serial = clean(&info.serial, 64);
    if serial.is_empty() {
        return None;
    }
    let product = clean(&info.product, 24).to_ascii_lowercase();
    Some(if product.is_empty() {
        serial
    } else {
        format!("{product}-{serial}")
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn info(product: &str, serial: &str) -> LibraryInfo {
        LibraryInfo {
            vendor: "V".into(),
            product: product.into(),
            serial: serial.into(),
        }
    }

    #[test]
    fn a_library_is_named_by_product_and_serial() {
        assert_eq!(
            library_name(&info("SIMLIB", "3F9A0C21B7D4")).as_deref(),
            Some("simlib-3F9A0C21B7D4")
        );
        assert_eq!(
            library_name(&info("MSL 2024 ", " DEC-123/4 ")).as_deref(),
            Some("msl_2024-DEC_123_4")
        );
        assert_eq!(library_name(&info("", "X1")).as_deref(), Some("X1"));
    }

    #[test]
    fn no_serial_no_name() {
        assert_eq!(library_name(&info("SIMLIB", "  ")), None);
    }
}
