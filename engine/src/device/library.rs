//! The library actor: one library (changer) handle owned by its own OS thread, with async
//! methods for the engine. Drives are opened through it and each gets a thread of its own.

use std::sync::Arc;

use reel_plugin_abi::host::{LibraryHandle, Plugin};
use reel_plugin_abi::sdk::Element;

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

    /// MOVE MEDIUM from element `src` to element `dst`; returns the move's elapsed time (ns).
    pub async fn move_medium(&self, src: u32, dst: u32) -> Result<u64, DeviceError> {
        self.actor
            .run("library_move", move |h| {
                h.move_medium(src, dst).map_err(DeviceError::from_call)?;
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
