//! Loading plugins by path, once per path: a library is dlopened the first time its path is
//! asked for and the same [`Plugin`] is handed out after that. Libraries are never unloaded.

use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex, OnceLock, PoisonError};

use reel_plugin_abi::host::Plugin;

use super::error::DeviceError;

static LOADED: OnceLock<Mutex<HashMap<PathBuf, Arc<Plugin>>>> = OnceLock::new();

/// Load the plugin at `path`, or return the one already loaded from the same file (paths are
/// compared after resolving symlinks and `..`). Errors name the file and say what to do. A
/// failed load is not remembered: fix the file and call again. Blocks while the library loads
/// (its initialisers run); call it at start-up or from a blocking context.
pub fn load_plugin(path: &Path) -> Result<Arc<Plugin>, DeviceError> {
    let key = std::fs::canonicalize(path).unwrap_or_else(|_| path.to_path_buf());
    let mut loaded = LOADED
        .get_or_init(Default::default)
        .lock()
        .unwrap_or_else(PoisonError::into_inner);
    if let Some(p) = loaded.get(&key) {
        return Ok(p.clone());
    }
    let plugin = Plugin::load(path)?;
    tracing::info!(
        path = %path.display(),
        name = plugin.name(),
        version = plugin.version(),
        abi_minor = plugin.abi_minor(),
        caps = format_args!("{:#x}", plugin.caps()),
        "device plugin loaded"
    );
    loaded.insert(key, plugin.clone());
    Ok(plugin)
}
