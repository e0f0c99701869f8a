//! The host side of the ABI: load a plugin by path, negotiate its table, and call it through
//! safe handles. The engine's device host and the contract kit both build on this module, so
//! the unsafe FFI lives in one place.
//!
//! Rules enforced here (docs/ABI.md): an unknown major version is refused; the table is copied
//! into a zeroed one of our own size (`min(struct_size, ours)` bytes), so a slot the plugin does
//! not know is NULL, and a NULL slot answers `REEL_E_UNSUPPORTED`; libraries are never unloaded;
//! a handle whose call panicked is poisoned and only closed afterwards.

// `CallError` carries the plugin's full `ReelStatus` (sense, flags, residue, 256-byte message)
// by value: that status IS the error the engine reasons about. Boxing it would change every
// public signature here for no gain: a failed tape command costs milliseconds to hours, a
// 300-byte move costs nanoseconds.
#![allow(clippy::result_large_err)]

use std::ffi::{CStr, CString, c_char};
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};

use crate::sdk::{DriveInfo, Element, Geometry, LibraryInfo, ReadRecord, WriteRecord};
use crate::types::*;

/// Why a plugin could not be loaded. Each names the file and what to do.
#[derive(Debug, thiserror::Error)]
pub enum LoadError {
    /// dlopen failed: not a shared library, wrong architecture, missing dependency.
    #[error(
        "{path}: not a loadable plugin library ({reason}); check the path names a reel plugin .so built for this machine"
    )]
    NotALibrary {
        /// The file.
        path: PathBuf,
        /// What the dynamic loader said.
        reason: String,
    },
    /// The library has no `reel_plugin_v1` symbol.
    #[error(
        "{path}: no `{symbol}` entry symbol; this is not a reel ABI v1 plugin (was it built with export_plugin! or REEL_REGISTER_PLUGIN?)"
    )]
    NoEntry {
        /// The file.
        path: PathBuf,
        /// The symbol looked for.
        symbol: &'static str,
    },
    /// The entry returned NULL.
    #[error("{path}: the entry symbol returned no table")]
    NullTable {
        /// The file.
        path: PathBuf,
    },
    /// The table's major version is not one this host speaks.
    #[error(
        "{path}: plugin speaks ABI major {found}, this reel speaks {expected}; rebuild the plugin against this reel's reel_plugin.h"
    )]
    UnknownMajor {
        /// The file.
        path: PathBuf,
        /// What the plugin said.
        found: u16,
        /// What we speak.
        expected: u16,
    },
    /// The table is smaller than the fixed v1 header plus the required slots.
    #[error(
        "{path}: plugin table is {found} bytes, at least {minimum} are needed; the plugin is corrupt or built against a broken header"
    )]
    TableTooSmall {
        /// The file.
        path: PathBuf,
        /// The struct_size the plugin reported.
        found: u32,
        /// The minimum accepted.
        minimum: u32,
    },
    /// A slot every plugin must fill is NULL.
    #[error("{path}: required call `{slot}` is missing from the plugin table")]
    MissingRequired {
        /// The file.
        path: PathBuf,
        /// The slot name.
        slot: &'static str,
    },
    /// The table's struct_size ends inside a call slot: copying it would leave part of a
    /// pointer in the host's table, and the host would call a garbage address.
    #[error(
        "{path}: plugin table is {found} bytes, which ends inside a call slot (slots are {slot} bytes each after the first {minimum}); the plugin is corrupt or built against a broken header"
    )]
    TableEndsInsideSlot {
        /// The file.
        path: PathBuf,
        /// The struct_size the plugin reported.
        found: u32,
        /// The size of one slot.
        slot: usize,
        /// Where whole slots start to count.
        minimum: u32,
    },
    /// A capability bit is set but a call it needs is NULL.
    #[error(
        "{path}: plugin declares {capability} but its table has no `{slot}`; clear the bit or fill the slot"
    )]
    CapabilityWithoutCall {
        /// The file.
        path: PathBuf,
        /// The capability's name (`REEL_CAP_*`).
        capability: &'static str,
        /// The missing slot.
        slot: &'static str,
    },
    /// The file is not one reel may load: writable by others than its owner, owned by
    /// someone other than root or reel's user, or not a regular file (see `plugin_file`).
    #[error("{path}: refused to load this plugin: {reason}")]
    Untrusted {
        /// The file.
        path: PathBuf,
        /// Why, and what to do.
        reason: String,
    },
    /// The file cannot be opened or examined (missing, no permission).
    #[error(
        "{path}: cannot open the plugin file ({reason}); check the path, and that the user reel runs as can read it"
    )]
    Unreadable {
        /// The file.
        path: PathBuf,
        /// What the system said.
        reason: String,
    },
    /// No plugin of this name is installed.
    #[error(
        "no plugin named `{name}`: looked for {file} in {searched}; install the plugin, set [library] plugin_dir to where it is, or give the path of its .so"
    )]
    NotInstalled {
        /// The name asked for.
        name: String,
        /// The file name it maps to.
        file: String,
        /// The directories searched, comma-separated.
        searched: String,
    },
    /// `thread_model` is none of the `REEL_THREAD_*` values.
    #[error(
        "{path}: plugin thread_model is {found}; known are 0 (REEL_THREAD_SERIALIZE_ALL) and 1 (REEL_THREAD_SERIALIZE_PER_HANDLE)"
    )]
    UnknownThreadModel {
        /// The file.
        path: PathBuf,
        /// What the plugin said.
        found: u32,
    },
}

/// A failed call: the return code and the full status the plugin filled.
#[derive(Clone, Debug)]
pub struct CallError {
    /// `REEL_E_*` code.
    pub code: i32,
    /// The status as filled by the plugin.
    pub status: ReelStatus,
    /// Which call failed.
    pub call: &'static str,
}

impl CallError {
    fn local(call: &'static str, code: i32, msg: &str) -> Self {
        let mut status = ReelStatus::new();
        status.set_message(msg);
        CallError { code, status, call }
    }

    /// Sense key, ASC and ASCQ.
    pub fn sense(&self) -> (u8, u8, u8) {
        (self.status.sense_key, self.status.asc, self.status.ascq)
    }

    /// Whether the status carries the given `REEL_FLAG_*` bit.
    pub fn has_flag(&self, flag: u32) -> bool {
        self.status.flags & flag != 0
    }
}

impl std::fmt::Display for CallError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let name = match self.code {
            REEL_E_CHECK_CONDITION => "check condition",
            REEL_E_UNSUPPORTED => "unsupported",
            REEL_E_INVALID_ARG => "invalid argument",
            REEL_E_BUFFER_TOO_SMALL => "buffer too small",
            REEL_E_PANICKED => "plugin panicked",
            REEL_E_POISONED => "handle poisoned",
            REEL_E_TRANSPORT => "transport error",
            REEL_E_INTERNAL => "internal plugin error",
            _ => "unknown error code",
        };
        write!(
            f,
            "{}: {} ({}), sense {:X}/{:02X}/{:02X}",
            self.call, name, self.code, self.status.sense_key, self.status.asc, self.status.ascq
        )?;
        let m = self.status.message_str();
        if !m.is_empty() {
            write!(f, ": {m}")?;
        }
        Ok(())
    }
}

impl std::error::Error for CallError {}

/// A loaded plugin. Never unloaded: the library stays mapped for the life of the process.
pub struct Plugin {
    table: ReelPluginV1,
    path: PathBuf,
    name: String,
    version: String,
    plugin_struct_size: u32,
    /// Held for `REEL_THREAD_SERIALIZE_ALL` plugins around every call.
    global: Mutex<()>,
}

impl std::fmt::Debug for Plugin {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Plugin")
            .field("path", &self.path)
            .field("name", &self.name)
            .field("version", &self.version)
            .field("caps", &format_args!("{:#x}", self.table.caps))
            .finish()
    }
}

/// Every `REEL_CAP_*` bit with its name, for messages (load refusals, the kit's skips).
pub const CAP_NAMES: &[(u64, &str)] = &[
    (REEL_CAP_CHANGER, "REEL_CAP_CHANGER"),
    (REEL_CAP_LBP, "REEL_CAP_LBP"),
    (REEL_CAP_MAM, "REEL_CAP_MAM"),
    (REEL_CAP_GEOMETRY, "REEL_CAP_GEOMETRY"),
    (REEL_CAP_RAO, "REEL_CAP_RAO"),
    (REEL_CAP_WORM, "REEL_CAP_WORM"),
    (REEL_CAP_STATISTICS, "REEL_CAP_STATISTICS"),
    (REEL_CAP_TAPE_ALERTS, "REEL_CAP_TAPE_ALERTS"),
    (REEL_CAP_IMPORT_EXPORT, "REEL_CAP_IMPORT_EXPORT"),
    (REEL_CAP_EARLY_WARNING, "REEL_CAP_EARLY_WARNING"),
    (REEL_CAP_IMMEDIATE_FILEMARKS, "REEL_CAP_IMMEDIATE_FILEMARKS"),
    (REEL_CAP_SPACE_BACKWARD, "REEL_CAP_SPACE_BACKWARD"),
    (REEL_CAP_TEST_CONTROL, "REEL_CAP_TEST_CONTROL"),
];

/// The name of one capability bit (`"an unknown capability"` for a bit ABI v1 does not define).
pub fn cap_name(bit: u64) -> &'static str {
    CAP_NAMES
        .iter()
        .find(|(b, _)| *b == bit)
        .map_or("an unknown capability", |(_, n)| *n)
}

/// The first capability bit set whose calls are not all in `t`, as (capability, slot).
/// A capability the host relies on must come with the calls that serve it: a plugin that
/// declares MAM without `drive_mam_read` would otherwise fail at the first cartridge.
pub fn capability_without_call(t: &ReelPluginV1) -> Option<(&'static str, &'static str)> {
    let needs: [(u64, &'static str, bool); 12] = [
        (
            REEL_CAP_CHANGER,
            "library_inventory",
            t.library_inventory.is_some(),
        ),
        (REEL_CAP_CHANGER, "library_move", t.library_move.is_some()),
        (
            REEL_CAP_IMPORT_EXPORT,
            "library_import",
            t.library_import.is_some(),
        ),
        (
            REEL_CAP_IMPORT_EXPORT,
            "library_export",
            t.library_export.is_some(),
        ),
        (REEL_CAP_TEST_CONTROL, "control", t.control.is_some()),
        (REEL_CAP_LBP, "drive_set_lbp", t.drive_set_lbp.is_some()),
        (REEL_CAP_MAM, "drive_mam_read", t.drive_mam_read.is_some()),
        (REEL_CAP_MAM, "drive_mam_write", t.drive_mam_write.is_some()),
        (
            REEL_CAP_STATISTICS,
            "drive_statistics",
            t.drive_statistics.is_some(),
        ),
        (
            REEL_CAP_TAPE_ALERTS,
            "drive_tape_alerts",
            t.drive_tape_alerts.is_some(),
        ),
        (
            REEL_CAP_GEOMETRY,
            "drive_geometry",
            t.drive_geometry.is_some(),
        ),
        (REEL_CAP_RAO, "drive_rao", t.drive_rao.is_some()),
    ];
    needs
        .into_iter()
        .find(|(bit, _, present)| t.caps & bit != 0 && !present)
        .map(|(bit, slot, _)| (cap_name(bit), slot))
}

/// Smallest table accepted: every slot up to and including `drive_read_record` (the v1.0 core).
pub const MINIMUM_TABLE_SIZE: u32 =
    (std::mem::offset_of!(ReelPluginV1, drive_read_record) + std::mem::size_of::<usize>()) as u32;

impl Plugin {
    /// Load a plugin from a shared library path and negotiate its v1 table. The file must be
    /// one reel may load (owned by root or this process's user, writable by no one else:
    /// [`LoadError::Untrusted`] otherwise), and the file checked is the file loaded.
    pub fn load(path: impl AsRef<Path>) -> Result<Arc<Plugin>, LoadError> {
        let path = path.as_ref().to_path_buf();
        let opened = crate::plugin_file::open_trusted(&path)?;
        let open_name = opened.loader_name.clone();
        // SAFETY: loading a library runs its initialisers; that is inherent to plugins. The
        // operator chose this path in the configuration, and its owner and mode were checked
        // through the descriptor the loader now opens.
        let lib = unsafe { libloading::Library::new(&open_name) }.map_err(|e| {
            LoadError::NotALibrary {
                path: path.clone(),
                // The loader names the descriptor; the operator knows the file by its path.
                reason: e.to_string().replace(
                    &open_name.display().to_string(),
                    &path.display().to_string(),
                ),
            }
        })?;
        // The loader knows the library by the descriptor's name, and matches a later dlopen
        // by name before it compares files: were the descriptor closed, the next plugin opened
        // on the same number would be handed this library. It stays open for the life of the
        // process, as the library stays loaded.
        opened.keep();
        // Never unloaded: Rust cdylibs with thread-locals are not safe to dlclose.
        let lib: &'static libloading::Library = Box::leak(Box::new(lib));
        // SAFETY: the symbol's type is fixed by ABI v1; a plugin exporting it promises it.
        let entry: libloading::Symbol<'static, ReelPluginEntryV1> = unsafe {
            lib.get(REEL_PLUGIN_ENTRY_V1.as_bytes())
        }
        .map_err(|_| LoadError::NoEntry {
            path: path.clone(),
            symbol: REEL_PLUGIN_ENTRY_V1,
        })?;
        // SAFETY: calling the entry has no preconditions; it returns a static table or NULL.
        let raw = unsafe { entry() };
        // SAFETY: a non-NULL table returned by the entry symbol is static, immutable and at
        // least as large as its own struct_size says (ABI contract).
        let plugin = unsafe { Self::negotiate(raw, path) }?;
        plugin.give_log();
        Ok(plugin)
    }

    /// ABI 1.2: give a dlopened plugin the host's log sink, once, before any other call, so its
    /// events reach this process's `tracing` under its name (target `reel_plugin`). Not done
    /// for a table linked into this process ([`Plugin::from_table`]): it shares our `tracing`.
    fn give_log(&self) {
        let Some(set_log) = self.table.set_log else {
            return;
        };
        // The context lives as long as the plugin: forever (plugins are never unloaded).
        let name: &'static CStr = Box::leak(
            CString::new(self.name.replace('\0', ""))
                .unwrap_or_default()
                .into_boxed_c_str(),
        );
        let max_level =
            crate::plugin_log::filter_number(tracing::level_filters::LevelFilter::current());
        // SAFETY: the slot is the plugin's set_log; `host_log` may be called from any thread and
        // never unwinds, and its context is a static NUL-terminated string.
        unsafe {
            set_log(
                Some(host_log),
                name.as_ptr() as *mut std::ffi::c_void,
                max_level,
            )
        };
    }

    /// Negotiate a table that is already in this process (a statically linked plugin, or a
    /// test plugin built with [`crate::sdk::plugin_table`]) through the same checks as
    /// [`Plugin::load`]. `label` stands in for the path in errors and logs.
    ///
    /// As with `load`, the table is trusted to honour the ABI contract: `name` and `version`
    /// NULL or static NUL-terminated strings, every slot implementing its call. Tables built by
    /// [`crate::sdk::plugin_table`] do.
    pub fn from_table(table: &'static ReelPluginV1, label: &str) -> Result<Arc<Plugin>, LoadError> {
        // SAFETY: a `&'static ReelPluginV1` is readable for `size_of::<ReelPluginV1>()` bytes
        // for the life of the process, and negotiation copies at most that many whatever
        // struct_size says. Its strings are static per the ABI contract (see above), the same
        // trust `load` places in a dlopened table.
        unsafe { Self::negotiate(table, PathBuf::from(label)) }
    }

    /// The one negotiation every table goes through: major version, struct_size, copy into a
    /// zeroed table of our size, required slots.
    ///
    /// # Safety
    /// `raw` must be NULL or point to a static table readable for
    /// `min(struct_size, size_of::<ReelPluginV1>())` bytes, whose `name` and `version` are NULL
    /// or static NUL-terminated strings.
    unsafe fn negotiate(raw: *const ReelPluginV1, path: PathBuf) -> Result<Arc<Plugin>, LoadError> {
        if raw.is_null() {
            return Err(LoadError::NullTable { path });
        }
        // SAFETY: the header fields are at fixed offsets in every v1 table; read them first.
        let (struct_size, major) = unsafe { ((*raw).struct_size, (*raw).abi_major) };
        if major != REEL_ABI_MAJOR {
            return Err(LoadError::UnknownMajor {
                path,
                found: major,
                expected: REEL_ABI_MAJOR,
            });
        }
        let minimum = MINIMUM_TABLE_SIZE;
        if struct_size < minimum {
            return Err(LoadError::TableTooSmall {
                path,
                found: struct_size,
                minimum,
            });
        }
        let ours = std::mem::size_of::<ReelPluginV1>();
        let slot = std::mem::size_of::<usize>();
        if (struct_size as usize) < ours && !((struct_size - minimum) as usize).is_multiple_of(slot)
        {
            return Err(LoadError::TableEndsInsideSlot {
                path,
                found: struct_size,
                slot,
                minimum,
            });
        }
        let n = (struct_size as usize).min(ours);
        let mut table = std::mem::MaybeUninit::<ReelPluginV1>::zeroed();
        // SAFETY: the plugin's table is at least `n` bytes (its struct_size); ours is `ours`
        // bytes and zeroed, and an all-zero ReelPluginV1 is valid (NULL pointers, None slots).
        let table = unsafe {
            std::ptr::copy_nonoverlapping(raw as *const u8, table.as_mut_ptr() as *mut u8, n);
            table.assume_init()
        };
        let read_str = |p: *const c_char| -> String {
            if p.is_null() {
                String::new()
            } else {
                // SAFETY: the ABI requires static NUL-terminated strings here.
                unsafe { CStr::from_ptr(p) }.to_string_lossy().into_owned()
            }
        };
        let name = read_str(table.name);
        let version = read_str(table.version);
        let required: [(&'static str, bool); 4] = [
            ("library_open", table.library_open.is_some()),
            ("library_close", table.library_close.is_some()),
            ("drive_open", table.drive_open.is_some()),
            ("drive_close", table.drive_close.is_some()),
        ];
        for (slot, present) in required {
            if !present {
                return Err(LoadError::MissingRequired { path, slot });
            }
        }
        if let Some((capability, slot)) = capability_without_call(&table) {
            return Err(LoadError::CapabilityWithoutCall {
                path,
                capability,
                slot,
            });
        }
        if !matches!(
            table.thread_model,
            REEL_THREAD_SERIALIZE_ALL | REEL_THREAD_SERIALIZE_PER_HANDLE
        ) {
            return Err(LoadError::UnknownThreadModel {
                path,
                found: table.thread_model,
            });
        }
        Ok(Arc::new(Plugin {
            table,
            path,
            name,
            version,
            plugin_struct_size: struct_size,
            global: Mutex::new(()),
        }))
    }

    /// The path it was loaded from.
    pub fn path(&self) -> &Path {
        &self.path
    }
    /// The plugin's name.
    pub fn name(&self) -> &str {
        &self.name
    }
    /// The plugin's version.
    pub fn version(&self) -> &str {
        &self.version
    }
    /// `REEL_CAP_*` bits.
    pub fn caps(&self) -> u64 {
        self.table.caps
    }
    /// Whether every bit of `cap` is set.
    pub fn has_cap(&self, cap: u64) -> bool {
        self.table.caps & cap == cap
    }
    /// ABI minor version the plugin was built against.
    pub fn abi_minor(&self) -> u16 {
        self.table.abi_minor
    }
    /// The table size the plugin reported.
    pub fn struct_size(&self) -> u32 {
        self.plugin_struct_size
    }
    /// The negotiated table (slots unknown to the plugin are None).
    pub fn table(&self) -> &ReelPluginV1 {
        &self.table
    }

    fn serialize(&self) -> Option<std::sync::MutexGuard<'_, ()>> {
        if self.table.thread_model == REEL_THREAD_SERIALIZE_ALL {
            Some(self.global.lock().unwrap_or_else(|p| p.into_inner()))
        } else {
            None
        }
    }
}

/// Rounds of `REEL_E_BUFFER_TOO_SMALL` [`LibraryHandle::control`] follows before it gives up.
/// The `ReelDriveStats::valid` bits of the fields before ABI 1.3 (`busy_ns` to `relabels`).
const STATS_VALID_BEFORE_1_3: u32 = 0xFFFF;

const CONTROL_GROW_ROUNDS: usize = 4;
/// The largest `control` response the host accepts (16 MiB).
const CONTROL_MAX_RESPONSE: usize = 16 << 20;

/// Turn a return code plus status into a Result.
fn finish(call: &'static str, rc: i32, status: ReelStatus) -> Result<ReelStatus, CallError> {
    if rc == REEL_OK {
        Ok(status)
    } else {
        Err(CallError {
            code: rc,
            status,
            call,
        })
    }
}

struct LibraryRaw {
    plugin: Arc<Plugin>,
    raw: *mut ReelLibrary,
}

// SAFETY: the raw handle is only used through `LibraryHandle` (`&mut self`, one caller at a
// time) and closed once in Drop; ABI thread model SERIALIZE_PER_HANDLE allows any thread.
unsafe impl Send for LibraryRaw {}
// SAFETY: drive handles share the Arc only to keep the library open until they close; they
// never call through it.
unsafe impl Sync for LibraryRaw {}

impl Drop for LibraryRaw {
    fn drop(&mut self) {
        if let Some(close) = self.plugin.table.library_close {
            let _g = self.plugin.serialize();
            // SAFETY: `raw` came from library_open and every drive handle (which holds this
            // Arc) is already closed; closed exactly once here.
            unsafe { close(self.raw) };
        }
    }
}

/// An open library (changer). Calls take `&mut self`: one at a time.
pub struct LibraryHandle {
    inner: Arc<LibraryRaw>,
    /// Status of the last call, successful or not.
    last: ReelStatus,
}

macro_rules! slot {
    ($plugin:expr, $slot:ident) => {
        match $plugin.table.$slot {
            Some(f) => f,
            None => {
                return Err(CallError::local(
                    stringify!($slot),
                    REEL_E_UNSUPPORTED,
                    concat!(stringify!($slot), " is not provided by this plugin"),
                ));
            }
        }
    };
}

impl LibraryHandle {
    /// Open the plugin's library with a configuration string.
    pub fn open(plugin: &Arc<Plugin>, config: &str) -> Result<LibraryHandle, CallError> {
        let f = slot!(plugin, library_open);
        let cfg = CString::new(config).map_err(|_| {
            CallError::local(
                "library_open",
                REEL_E_INVALID_ARG,
                "config contains a NUL byte",
            )
        })?;
        let mut out: *mut ReelLibrary = std::ptr::null_mut();
        let mut st = ReelStatus::new();
        let _g = plugin.serialize();
        // SAFETY: valid C string, out pointer and status for the duration of the call.
        let rc = unsafe { f(cfg.as_ptr(), &mut out, &mut st) };
        drop(_g);
        finish("library_open", rc, st)?;
        if out.is_null() {
            return Err(CallError::local(
                "library_open",
                REEL_E_INTERNAL,
                "plugin returned success but no library handle",
            ));
        }
        Ok(LibraryHandle {
            inner: Arc::new(LibraryRaw {
                plugin: plugin.clone(),
                raw: out,
            }),
            last: st,
        })
    }

    /// The plugin behind this handle.
    pub fn plugin(&self) -> &Arc<Plugin> {
        &self.inner.plugin
    }

    /// Status of the last call (its `elapsed_ns`, flags, message).
    pub fn last_status(&self) -> &ReelStatus {
        &self.last
    }

    /// The library's identity (ABI 1.1). A 1.0 plugin, or one that cannot tell, answers
    /// `REEL_E_UNSUPPORTED`.
    pub fn info(&mut self) -> Result<LibraryInfo, CallError> {
        let p = self.inner.plugin.clone();
        let f = slot!(p, library_info);
        let mut out = ReelLibraryInfo::new();
        let mut st = ReelStatus::new();
        let _g = p.serialize();
        // SAFETY: valid handle, out struct and status for the call.
        let rc = unsafe { f(self.inner.raw, &mut out, &mut st) };
        drop(_g);
        self.last = st;
        finish("library_info", rc, st)?;
        Ok(LibraryInfo {
            vendor: cbuf_to_string(&out.vendor),
            product: cbuf_to_string(&out.product),
            serial: cbuf_to_string(&out.serial),
        })
    }

    /// Every changer element.
    pub fn inventory(&mut self) -> Result<Vec<Element>, CallError> {
        let p = self.inner.plugin.clone();
        let f = slot!(p, library_inventory);
        let mut cap: u32 = 64;
        loop {
            let mut buf = vec![ReelElement::zeroed(); cap as usize];
            let mut count = 0u32;
            let mut st = ReelStatus::new();
            let _g = p.serialize();
            // SAFETY: buffer of `cap` elements, count and status valid during the call.
            let rc = unsafe { f(self.inner.raw, buf.as_mut_ptr(), cap, &mut count, &mut st) };
            drop(_g);
            self.last = st;
            if rc == REEL_E_BUFFER_TOO_SMALL && count > cap {
                cap = count;
                continue;
            }
            finish("library_inventory", rc, st)?;
            let n = (count as usize).min(buf.len());
            return Ok(buf[..n]
                .iter()
                .map(|e| Element {
                    kind: e.kind,
                    address: e.address,
                    index: e.index,
                    flags: e.flags,
                    source_address: e.source_address,
                    barcode: cbuf_to_string(&e.barcode),
                })
                .collect());
        }
    }

    fn two_addr(
        &mut self,
        name: &'static str,
        f: unsafe extern "C" fn(*mut ReelLibrary, u32, u32, *mut ReelStatus) -> i32,
        a: u32,
        b: u32,
    ) -> Result<(), CallError> {
        let mut st = ReelStatus::new();
        let _g = self.inner.plugin.serialize();
        // SAFETY: valid handle and status for the call.
        let rc = unsafe { f(self.inner.raw, a, b, &mut st) };
        drop(_g);
        self.last = st;
        finish(name, rc, st).map(|_| ())
    }

    /// MOVE MEDIUM.
    pub fn move_medium(&mut self, source: u32, destination: u32) -> Result<(), CallError> {
        let f = slot!(self.inner.plugin, library_move);
        self.two_addr("library_move", f, source, destination)
    }

    /// Import from an import/export element into a slot.
    pub fn import(&mut self, ie: u32, slot: u32) -> Result<(), CallError> {
        let f = slot!(self.inner.plugin, library_import);
        self.two_addr("library_import", f, ie, slot)
    }

    /// Export from a slot to an import/export element.
    pub fn export(&mut self, slot: u32, ie: u32) -> Result<(), CallError> {
        let f = slot!(self.inner.plugin, library_export);
        self.two_addr("library_export", f, slot, ie)
    }

    /// Plugin-specific control request; returns the response text.
    pub fn control(&mut self, request: &str) -> Result<String, CallError> {
        let req = CString::new(request).map_err(|_| {
            CallError::local("control", REEL_E_INVALID_ARG, "request contains a NUL byte")
        })?;
        let mut cap = 4096usize;
        // A response that keeps growing (or a plugin that keeps asking for more) is refused
        // after a few rounds rather than followed without end.
        for _ in 0..CONTROL_GROW_ROUNDS {
            let mut buf = vec![0 as c_char; cap];
            let mut st = ReelStatus::new();
            let (rc, len) = self.control_raw(&req, &mut buf, &mut st)?;
            self.last = st;
            if rc == REEL_E_BUFFER_TOO_SMALL && len + 1 > cap {
                if len >= CONTROL_MAX_RESPONSE {
                    break;
                }
                cap = len + 1;
                continue;
            }
            finish("control", rc, st)?;
            return Ok(cbuf_to_string(&buf[..len.min(cap)]));
        }
        Err(CallError::local(
            "control",
            REEL_E_INTERNAL,
            "the plugin kept asking for a larger response buffer (over 16 MiB or 4 rounds); it is not answering this request",
        ))
    }

    /// One `control` call exactly as given: `response.len()` is the capacity, `status` is
    /// passed as it is (its `struct_size` included). For the contract kit, which checks what a
    /// plugin does with a response buffer that is too small and with a status it must reset
    /// and may not write past; [`LibraryHandle::control`] is the call for everything else.
    /// Returns the plugin's code and its `out_len`.
    pub fn control_raw(
        &mut self,
        request: &CStr,
        response: &mut [c_char],
        status: &mut ReelStatus,
    ) -> Result<(i32, usize), CallError> {
        let p = self.inner.plugin.clone();
        let f = slot!(p, control);
        let mut len = 0usize;
        let _g = p.serialize();
        // SAFETY: valid handle and request string; the response buffer is `response.len()`
        // bytes and the status a whole ReelStatus, whatever struct_size it declares.
        let rc = unsafe {
            f(
                self.inner.raw,
                request.as_ptr(),
                response.as_mut_ptr(),
                response.len(),
                &mut len,
                status,
            )
        };
        Ok((rc, len))
    }

    /// Open a drive by index.
    pub fn open_drive(&mut self, index: u32) -> Result<DriveHandle, CallError> {
        let p = self.inner.plugin.clone();
        let f = slot!(p, drive_open);
        let mut out: *mut ReelDrive = std::ptr::null_mut();
        let mut st = ReelStatus::new();
        let _g = p.serialize();
        // SAFETY: valid handle, out pointer and status for the call.
        let rc = unsafe { f(self.inner.raw, index, &mut out, &mut st) };
        drop(_g);
        self.last = st;
        finish("drive_open", rc, st)?;
        if out.is_null() {
            return Err(CallError::local(
                "drive_open",
                REEL_E_INTERNAL,
                "plugin returned success but no drive handle",
            ));
        }
        let mut drive = DriveHandle {
            library: self.inner.clone(),
            raw: out,
            last: st,
            poisoned: false,
            index,
            caps: p.caps(),
        };
        if p.abi_minor() >= 2 && p.table.drive_info.is_some() {
            match drive.info() {
                Ok(info) => drive.caps = info.capabilities.unwrap_or(drive.caps),
                // the handle is unusable: say so now, not at its first use
                Err(e) if drive.poisoned => return Err(e),
                // the drive may be unreachable until a cartridge is in; the library's bits
                Err(e) => {
                    tracing::debug!(plugin = %p.name, drive = index, "drive_info at open: {e}")
                }
            }
        }
        Ok(drive)
    }
}

/// The host's log sink given to plugins (ABI 1.2 `set_log`): records a plugin's event in this
/// process's `tracing`, target `reel_plugin`, with the plugin's name and where in it the event
/// was raised.
///
/// # Safety
/// `context` is the static plugin name `give_log` passed; `target` and `message` are NULL or
/// NUL-terminated strings valid for the call (ABI contract).
unsafe extern "C" fn host_log(
    context: *mut std::ffi::c_void,
    level: u32,
    target: *const c_char,
    message: *const c_char,
) {
    let text = |p: *const c_char| {
        if p.is_null() {
            String::new()
        } else {
            // SAFETY: NUL-terminated and valid for the call (contract above).
            unsafe { CStr::from_ptr(p) }.to_string_lossy().into_owned()
        }
    };
    let (plugin, module, message) = (text(context as *const c_char), text(target), text(message));
    // A panic must not unwind into the plugin's frames.
    let _ = std::panic::catch_unwind(move || match level {
        REEL_LOG_ERROR => tracing::error!(target: "reel_plugin", %plugin, %module, "{message}"),
        REEL_LOG_WARN => tracing::warn!(target: "reel_plugin", %plugin, %module, "{message}"),
        REEL_LOG_INFO => tracing::info!(target: "reel_plugin", %plugin, %module, "{message}"),
        REEL_LOG_DEBUG => tracing::debug!(target: "reel_plugin", %plugin, %module, "{message}"),
        _ => tracing::trace!(target: "reel_plugin", %plugin, %module, "{message}"),
    });
}

fn cbuf_to_string(b: &[c_char]) -> String {
    let bytes: Vec<u8> = b
        .iter()
        .take_while(|c| **c != 0)
        .map(|c| *c as u8)
        .collect();
    String::from_utf8_lossy(&bytes).into_owned()
}

/// An open drive. Send, not Sync: one call at a time, from any one thread.
pub struct DriveHandle {
    library: Arc<LibraryRaw>,
    raw: *mut ReelDrive,
    last: ReelStatus,
    poisoned: bool,
    index: u32,
    caps: u64,
}

// SAFETY: ABI thread model SERIALIZE_PER_HANDLE: a drive handle may be used from any thread as
// long as calls do not overlap, which `&mut self` guarantees.
unsafe impl Send for DriveHandle {}

impl Drop for DriveHandle {
    fn drop(&mut self) {
        if let Some(close) = self.library.plugin.table.drive_close {
            let _g = self.library.plugin.serialize();
            // SAFETY: `raw` came from drive_open and is closed exactly once here; close is
            // allowed on a poisoned handle.
            unsafe { close(self.raw) };
        }
    }
}

impl DriveHandle {
    /// The drive's index in its library.
    pub fn index(&self) -> u32 {
        self.index
    }
    /// The plugin behind this handle.
    pub fn plugin(&self) -> &Arc<Plugin> {
        &self.library.plugin
    }
    /// Status of the last call (its `elapsed_ns`, flags, message), successful or not.
    pub fn last_status(&self) -> &ReelStatus {
        &self.last
    }
    /// Whether a call panicked inside the plugin; every later call fails.
    pub fn is_poisoned(&self) -> bool {
        self.poisoned
    }

    /// Run a call, record its status and poison the handle on a panic.
    fn run(
        &mut self,
        name: &'static str,
        f: impl FnOnce(*mut ReelDrive, *mut ReelStatus) -> i32,
    ) -> Result<ReelStatus, CallError> {
        if self.poisoned {
            return Err(CallError::local(
                name,
                REEL_E_POISONED,
                "drive handle poisoned by an earlier plugin panic; reopen the drive",
            ));
        }
        let mut st = ReelStatus::new();
        let plugin = self.library.plugin.clone();
        let _g = plugin.serialize();
        let rc = f(self.raw, &mut st);
        drop(_g);
        self.last = st;
        if rc == REEL_E_PANICKED || rc == REEL_E_POISONED {
            self.poisoned = true;
        }
        finish(name, rc, st)
    }

    /// Identity.
    pub fn info(&mut self) -> Result<DriveInfo, CallError> {
        let f = slot!(self.library.plugin, drive_info);
        let mut out = ReelDriveInfo::new();
        // SAFETY: valid handle, out struct and status for the call.
        self.run("drive_info", |d, s| unsafe { f(d, &mut out, s) })?;
        let plugin = &self.library.plugin;
        Ok(DriveInfo {
            vendor: cbuf_to_string(&out.vendor),
            product: cbuf_to_string(&out.product),
            serial: cbuf_to_string(&out.serial),
            max_record_bytes: out.max_record_bytes,
            // before 1.2 the field is not the plugin's, and 0 is a struct the plugin zeroed
            // without filling it (a 1.1 plugin rebuilt against the 1.2 header): the library's
            // bits apply
            capabilities: (plugin.abi_minor() >= 2 && out.capabilities != 0)
                .then_some(out.capabilities & plugin.caps()),
        })
    }

    /// This drive's `REEL_CAP_*` bits: what the plugin said of it when it was opened (ABI
    /// 1.2), else the library's.
    pub fn caps(&self) -> u64 {
        self.caps
    }

    /// Whether this drive has every bit of `cap`.
    pub fn has_cap(&self, cap: u64) -> bool {
        self.caps & cap == cap
    }

    /// TEST UNIT READY.
    pub fn test_ready(&mut self) -> Result<(), CallError> {
        let f = slot!(self.library.plugin, drive_test_ready);
        // SAFETY: valid handle and status for the call.
        self.run("drive_test_ready", |d, s| unsafe { f(d, s) })
            .map(|_| ())
    }
    /// LOAD.
    pub fn load(&mut self) -> Result<(), CallError> {
        let f = slot!(self.library.plugin, drive_load);
        // SAFETY: valid handle and status for the call.
        self.run("drive_load", |d, s| unsafe { f(d, s) })
            .map(|_| ())
    }
    /// UNLOAD.
    pub fn unload(&mut self) -> Result<(), CallError> {
        let f = slot!(self.library.plugin, drive_unload);
        // SAFETY: valid handle and status for the call.
        self.run("drive_unload", |d, s| unsafe { f(d, s) })
            .map(|_| ())
    }
    /// REWIND.
    pub fn rewind(&mut self) -> Result<(), CallError> {
        let f = slot!(self.library.plugin, drive_rewind);
        // SAFETY: valid handle and status for the call.
        self.run("drive_rewind", |d, s| unsafe { f(d, s) })
            .map(|_| ())
    }
    /// LOCATE to a block.
    pub fn locate(&mut self, block: u64) -> Result<(), CallError> {
        let f = slot!(self.library.plugin, drive_locate);
        // SAFETY: valid handle and status for the call.
        self.run("drive_locate", |d, s| unsafe { f(d, block, s) })
            .map(|_| ())
    }
    /// SPACE (`REEL_SPACE_*`), negative count backward.
    pub fn space(&mut self, kind: u32, count: i64) -> Result<(), CallError> {
        let f = slot!(self.library.plugin, drive_space);
        // SAFETY: valid handle and status for the call.
        self.run("drive_space", |d, s| unsafe { f(d, kind, count, s) })
            .map(|_| ())
    }
    /// READ POSITION.
    pub fn read_position(&mut self) -> Result<ReelPosition, CallError> {
        let f = slot!(self.library.plugin, drive_read_position);
        let mut out = ReelPosition::default();
        // SAFETY: valid handle, out struct and status for the call.
        self.run("drive_read_position", |d, s| unsafe { f(d, &mut out, s) })?;
        Ok(out)
    }
    /// WRITE one record, with its CRC32C when LBP is on.
    pub fn write_record(&mut self, data: &[u8], crc: Option<u32>) -> Result<(), CallError> {
        let f = slot!(self.library.plugin, drive_write_record);
        let (c, flags) = match crc {
            Some(c) => (c, REEL_WRITE_HAS_CRC),
            None => (0, 0),
        };
        // SAFETY: `data` is valid for its length during the call.
        self.run("drive_write_record", |d, s| unsafe {
            f(d, data.as_ptr(), data.len(), c, flags, s)
        })
        .map(|_| ())
    }
    /// WRITE several records in order, handed to the drive as one arrival (ABI 1.4
    /// `drive_write_records`; a plugin without it gets one `drive_write_record` call each).
    ///
    /// Returns how many were written before the record the result describes. All of them
    /// and `Ok` with no flag in [`DriveHandle::last_status`]: every record was written. Fewer
    /// and `Ok` with a flag: that record was written, at early warning. Fewer and `Ok` with
    /// no flag: the drive stopped early, the rest were not written. Fewer and `Err`: that
    /// record's error, as [`DriveHandle::write_record`] reports it.
    pub fn write_records(&mut self, records: &[WriteRecord<'_>]) -> (usize, Result<(), CallError>) {
        let Some(f) = self.library.plugin.table.drive_write_records else {
            let mut elapsed = 0;
            for (i, r) in records.iter().enumerate() {
                let result = self.write_record(r.data, r.crc);
                elapsed += self.last.elapsed_ns;
                if result.is_err() || self.last.flags != 0 {
                    self.last.elapsed_ns = elapsed;
                    return (
                        i,
                        result.map_err(|mut e| {
                            e.status.elapsed_ns = elapsed;
                            e
                        }),
                    );
                }
            }
            self.last.elapsed_ns = elapsed;
            return (records.len(), Ok(()));
        };
        let raw: Vec<ReelWriteRecord> = records
            .iter()
            .map(|r| ReelWriteRecord {
                data: r.data.as_ptr(),
                len: r.data.len(),
                crc: r.crc.unwrap_or(0),
                flags: if r.crc.is_some() {
                    REEL_WRITE_HAS_CRC
                } else {
                    0
                },
            })
            .collect();
        let mut written = 0usize;
        // SAFETY: every record's bytes and the array are valid for the call; `written` is a
        // valid out pointer.
        let result = self
            .run("drive_write_records", |d, s| unsafe {
                f(d, raw.as_ptr(), raw.len(), &mut written, s)
            })
            .map(|_| ());
        // A plugin cannot claim more records than it was given.
        (written.min(records.len()), result)
    }
    /// WRITE FILEMARKS.
    pub fn write_filemarks(&mut self, count: u32, immediate: bool) -> Result<(), CallError> {
        let f = slot!(self.library.plugin, drive_write_filemarks);
        // SAFETY: valid handle and status for the call.
        self.run("drive_write_filemarks", |d, s| unsafe {
            f(d, count, immediate as u32, s)
        })
        .map(|_| ())
    }
    /// READ one record into `buffer`. On an error, `CallError` carries the sense; bytes that
    /// reached the buffer anyway (ILI) are reported by [`DriveHandle::read_record_partial`].
    pub fn read_record(&mut self, buffer: &mut [u8]) -> Result<ReadRecord, CallError> {
        self.read_record_partial(buffer).map_err(|(e, _)| e)
    }
    /// READ one record; on error also returns the bytes transferred.
    pub fn read_record_partial(
        &mut self,
        buffer: &mut [u8],
    ) -> Result<ReadRecord, (CallError, usize)> {
        let f = match self.library.plugin.table.drive_read_record {
            Some(f) => f,
            None => {
                return Err((
                    CallError::local("drive_read_record", REEL_E_UNSUPPORTED, "no read"),
                    0,
                ));
            }
        };
        let mut len = 0usize;
        let mut crc = 0u32;
        let cap = buffer.len();
        let ptr = buffer.as_mut_ptr();
        // SAFETY: buffer writable for `cap` bytes; len, crc and status valid during the call.
        let r = self.run("drive_read_record", |d, s| unsafe {
            f(d, ptr, cap, &mut len, &mut crc, s)
        });
        match r {
            Ok(_) => Ok(ReadRecord {
                len: len.min(cap),
                crc: Some(crc),
            }),
            Err(e) => Err((e, len.min(cap))),
        }
    }
    /// Set the LBP mode.
    pub fn set_lbp(&mut self, mode: u32) -> Result<(), CallError> {
        let f = slot!(self.library.plugin, drive_set_lbp);
        // SAFETY: valid handle and status for the call.
        self.run("drive_set_lbp", |d, s| unsafe { f(d, mode, s) })
            .map(|_| ())
    }
    /// READ ATTRIBUTE.
    pub fn mam_read(&mut self, attribute: u16) -> Result<Vec<u8>, CallError> {
        let f = slot!(self.library.plugin, drive_mam_read);
        let mut cap = 1024usize;
        loop {
            let mut buf = vec![0u8; cap];
            let mut len = 0usize;
            let p = buf.as_mut_ptr();
            // SAFETY: buffer writable for `cap` bytes, len and status valid during the call.
            let r = self.run("drive_mam_read", |d, s| unsafe {
                f(d, attribute, p, cap, &mut len, s)
            });
            match r {
                Err(e) if e.code == REEL_E_BUFFER_TOO_SMALL && len > cap => cap = len,
                Err(e) => return Err(e),
                Ok(_) => {
                    buf.truncate(len.min(cap));
                    return Ok(buf);
                }
            }
        }
    }
    /// WRITE ATTRIBUTE.
    pub fn mam_write(&mut self, attribute: u16, data: &[u8]) -> Result<(), CallError> {
        let f = slot!(self.library.plugin, drive_mam_write);
        // SAFETY: data valid for its length during the call.
        self.run("drive_mam_write", |d, s| unsafe {
            f(d, attribute, data.as_ptr(), data.len(), s)
        })
        .map(|_| ())
    }
    /// Statistics.
    pub fn statistics(&mut self) -> Result<ReelDriveStats, CallError> {
        let f = slot!(self.library.plugin, drive_statistics);
        let mut out = ReelDriveStats {
            struct_size: std::mem::size_of::<ReelDriveStats>() as u32,
            ..Default::default()
        };
        // SAFETY: valid handle, out struct and status for the call.
        self.run("drive_statistics", |d, s| unsafe { f(d, &mut out, s) })?;
        // Before 1.3 the struct ends at `relabels`: what a plugin says of the fields after it
        // (stray bits in `valid`) is not the plugin's to say.
        if self.library.plugin.abi_minor() < 3 {
            out.valid &= STATS_VALID_BEFORE_1_3;
        }
        Ok(out)
    }
    /// TapeAlert bitmap.
    pub fn tape_alerts(&mut self) -> Result<u64, CallError> {
        let f = slot!(self.library.plugin, drive_tape_alerts);
        let mut out = 0u64;
        // SAFETY: valid handle, out value and status for the call.
        self.run("drive_tape_alerts", |d, s| unsafe { f(d, &mut out, s) })?;
        Ok(out)
    }
    /// Medium geometry with end-of-wrap positions.
    pub fn geometry(&mut self) -> Result<Geometry, CallError> {
        let f = slot!(self.library.plugin, drive_geometry);
        let mut out = ReelGeometry {
            struct_size: std::mem::size_of::<ReelGeometry>() as u32,
            ..Default::default()
        };
        let mut eowp = vec![0u64; 1024];
        let cap = eowp.len() as u32;
        let p = eowp.as_mut_ptr();
        // SAFETY: out struct, eowp array of `cap` and status valid during the call.
        self.run("drive_geometry", |d, s| unsafe {
            f(d, &mut out, p, cap, s)
        })?;
        eowp.truncate((out.eowp_count as usize).min(eowp.len()));
        Ok(Geometry {
            wraps: out.wraps,
            bands: out.bands,
            min_lpos: out.min_lpos,
            max_lpos: out.max_lpos,
            capacity_bytes: out.capacity_bytes,
            eowp,
        })
    }
    /// Native RAO: a permutation of the extents' indices.
    pub fn rao(&mut self, extents: &[ReelExtent]) -> Result<Vec<u32>, CallError> {
        let f = slot!(self.library.plugin, drive_rao);
        let mut order = vec![0u32; extents.len()];
        let n = extents.len() as u32;
        let p = order.as_mut_ptr();
        // SAFETY: extents valid for `n`, order writable for `n`, status valid.
        self.run("drive_rao", |d, s| unsafe {
            f(d, extents.as_ptr(), n, p, s)
        })?;
        let mut seen = vec![false; order.len()];
        for &i in &order {
            match seen.get_mut(i as usize) {
                Some(s) if !*s => *s = true,
                _ => {
                    return Err(CallError::local(
                        "drive_rao",
                        REEL_E_INTERNAL,
                        "plugin RAO answer is not a permutation of the extents",
                    ));
                }
            }
        }
        Ok(order)
    }
}
