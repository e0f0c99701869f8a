//! The `#[repr(C)]` types of ABI v1: the plugin table, the status every call fills, and the
//! small value structs passed across the boundary.
//!
//! Rules (docs/ABI.md has the full text):
//! - every struct that may grow starts with `struct_size`, set by whoever owns the memory;
//! - tables are append-only: a slot is never moved, removed or given a new signature;
//! - a NULL slot means "unsupported";
//! - the caller owns every buffer; handles are opaque.

use std::ffi::{c_char, c_void};

/// Major version of this ABI. A breaking change gets a new entry symbol (`reel_plugin_v2`).
pub const REEL_ABI_MAJOR: u16 = 1;
/// Minor version: bumped when slots are appended to [`ReelPluginV1`].
///
/// - 1.0: the core table.
/// - 1.1: `library_info` (the library's own identity: vendor, product, serial number).
/// - 1.2: `set_log` (the host's log sink for the plugin's events) and
///   `ReelDriveInfo::capabilities` (what one drive can do, in a library of mixed drives).
/// - 1.3: `ReelDriveStats` error counters (write and read errors the drive corrected and did
///   not, SCSI log pages 02h and 03h).
/// - 1.4: `drive_write_records` (several records handed to the drive in one call, so a
///   container's small header reaches the buffer together with its first data record).
pub const REEL_ABI_MINOR: u16 = 4;
/// Name of the exported entry symbol for major version 1.
pub const REEL_PLUGIN_ENTRY_V1: &str = "reel_plugin_v1";

// ---- return codes -------------------------------------------------------------------------

/// The call succeeded. The status may still carry flags (for example early warning on write).
pub const REEL_OK: i32 = 0;
/// The device reported CHECK CONDITION: the sense in the status says what happened.
pub const REEL_E_CHECK_CONDITION: i32 = -1;
/// The plugin does not implement this call or this argument combination.
pub const REEL_E_UNSUPPORTED: i32 = -2;
/// An argument was invalid (null pointer, bad index, malformed config or request).
pub const REEL_E_INVALID_ARG: i32 = -3;
/// The caller's buffer is too small; the status residue holds the size needed.
pub const REEL_E_BUFFER_TOO_SMALL: i32 = -4;
/// The plugin panicked inside this call. The handle is poisoned.
pub const REEL_E_PANICKED: i32 = -5;
/// The handle was poisoned by an earlier panic; only close is allowed.
pub const REEL_E_POISONED: i32 = -6;
/// The transport to the device failed (iSCSI session lost, SG_IO error, timeout).
pub const REEL_E_TRANSPORT: i32 = -7;
/// An internal plugin error that is not a device condition (I/O on the plugin's own files).
pub const REEL_E_INTERNAL: i32 = -8;

// ---- status flags -------------------------------------------------------------------------

/// The command ran into a filemark (read or space).
pub const REEL_FLAG_FILEMARK: u32 = 1 << 0;
/// End of medium or early warning (SSC EOM bit).
pub const REEL_FLAG_EOM: u32 = 1 << 1;
/// Incorrect length indicator: the record was not the length requested.
pub const REEL_FLAG_ILI: u32 = 1 << 2;
/// The sense fields are valid.
pub const REEL_FLAG_SENSE_VALID: u32 = 1 << 3;
/// The residue (SSC INFORMATION) field is valid.
pub const REEL_FLAG_RESIDUE_VALID: u32 = 1 << 4;
/// The error is deferred: it belongs to an earlier buffered command.
pub const REEL_FLAG_DEFERRED: u32 = 1 << 5;

/// Length of the message buffer in [`ReelStatus`], NUL included.
pub const REEL_MESSAGE_LEN: usize = 256;

/// What every call fills. Owned by the caller; the plugin writes it before returning.
#[repr(C)]
#[derive(Clone, Copy)]
pub struct ReelStatus {
    /// Size of this struct as the caller allocated it.
    pub struct_size: u32,
    /// SCSI sense key (0 when none).
    pub sense_key: u8,
    /// Additional sense code.
    pub asc: u8,
    /// Additional sense code qualifier.
    pub ascq: u8,
    /// Reserved, zero.
    pub reserved0: u8,
    /// `REEL_FLAG_*` bits.
    pub flags: u32,
    /// Reserved, zero.
    pub reserved1: u32,
    /// SSC INFORMATION: records, filemarks or bytes not processed (signed).
    pub residue: i64,
    /// Time the call took: modelled on a simulator, measured on hardware.
    pub elapsed_ns: u64,
    /// UTF-8 message, NUL terminated, possibly empty.
    pub message: [c_char; REEL_MESSAGE_LEN],
}

impl ReelStatus {
    /// A zeroed status with its `struct_size` set.
    pub const fn new() -> Self {
        ReelStatus {
            struct_size: std::mem::size_of::<ReelStatus>() as u32,
            sense_key: 0,
            asc: 0,
            ascq: 0,
            reserved0: 0,
            flags: 0,
            reserved1: 0,
            residue: 0,
            elapsed_ns: 0,
            message: [0; REEL_MESSAGE_LEN],
        }
    }

    /// The message as a Rust string (lossy, up to the first NUL).
    pub fn message_str(&self) -> String {
        let bytes: Vec<u8> = self
            .message
            .iter()
            .take_while(|c| **c != 0)
            .map(|c| *c as u8)
            .collect();
        String::from_utf8_lossy(&bytes).into_owned()
    }

    /// Copy `msg` into the message buffer, truncated on a UTF-8 boundary and NUL terminated.
    pub fn set_message(&mut self, msg: &str) {
        let mut end = msg.len().min(REEL_MESSAGE_LEN - 1);
        while !msg.is_char_boundary(end) {
            end -= 1;
        }
        for (dst, src) in self.message.iter_mut().zip(msg.as_bytes()[..end].iter()) {
            *dst = *src as c_char;
        }
        self.message[end] = 0;
    }
}

impl Default for ReelStatus {
    fn default() -> Self {
        Self::new()
    }
}

impl std::fmt::Debug for ReelStatus {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ReelStatus")
            .field(
                "sense",
                &format_args!("{:X}/{:02X}/{:02X}", self.sense_key, self.asc, self.ascq),
            )
            .field("flags", &self.flags)
            .field("residue", &self.residue)
            .field("elapsed_ns", &self.elapsed_ns)
            .field("message", &self.message_str())
            .finish()
    }
}

// ---- capabilities -------------------------------------------------------------------------

/// The plugin has a medium changer (inventory, move).
pub const REEL_CAP_CHANGER: u64 = 1u64 << 0;
/// Logical block protection with CRC32C.
pub const REEL_CAP_LBP: u64 = 1u64 << 1;
/// Medium auxiliary memory read/write.
pub const REEL_CAP_MAM: u64 = 1u64 << 2;
/// Medium geometry (wraps, LPOS, end-of-wrap positions) for access ordering.
pub const REEL_CAP_GEOMETRY: u64 = 1u64 << 3;
/// Native recommended access order.
pub const REEL_CAP_RAO: u64 = 1u64 << 4;
/// WORM media are supported (and refuse overwrite).
pub const REEL_CAP_WORM: u64 = 1u64 << 5;
/// Statistics (`drive_statistics`) are reported.
pub const REEL_CAP_STATISTICS: u64 = 1u64 << 6;
/// TapeAlert flags are reported.
pub const REEL_CAP_TAPE_ALERTS: u64 = 1u64 << 7;
/// Import/export elements (mail slots).
pub const REEL_CAP_IMPORT_EXPORT: u64 = 1u64 << 8;
/// Early warning can be reached in a test (the contract kit checks EW and EOM).
pub const REEL_CAP_EARLY_WARNING: u64 = 1u64 << 9;
/// Immediate filemarks (WRITE FILEMARKS with IMMED).
pub const REEL_CAP_IMMEDIATE_FILEMARKS: u64 = 1u64 << 10;
/// Backward space (records and filemarks).
pub const REEL_CAP_SPACE_BACKWARD: u64 = 1u64 << 11;
/// A `control` call that can provoke test conditions (`ew_at`, `unit_attention`); see docs/ABI.md.
pub const REEL_CAP_TEST_CONTROL: u64 = 1u64 << 12;

// ---- thread models ------------------------------------------------------------------------

/// The host serialises every call into the plugin.
pub const REEL_THREAD_SERIALIZE_ALL: u32 = 0;
/// Calls on one handle never overlap; different handles run in parallel (default for tape).
pub const REEL_THREAD_SERIALIZE_PER_HANDLE: u32 = 1;

// ---- value structs ------------------------------------------------------------------------

/// Element types of a medium changer.
pub const REEL_ELEMENT_PICKER: u32 = 1;
/// Storage slot.
pub const REEL_ELEMENT_SLOT: u32 = 2;
/// Import/export slot (mail slot).
pub const REEL_ELEMENT_IMPORT_EXPORT: u32 = 3;
/// Data transfer element (a drive).
pub const REEL_ELEMENT_DRIVE: u32 = 4;

/// Element flag: holds a medium.
pub const REEL_ELEMENT_FULL: u32 = 1 << 0;
/// Element flag: the medium is WORM.
pub const REEL_ELEMENT_WORM: u32 = 1 << 1;
/// Element flag: the medium is loaded (threaded) in the drive, not only present.
pub const REEL_ELEMENT_LOADED: u32 = 1 << 2;
/// Element flag: the element is in an abnormal state (drive dead, slot inaccessible).
pub const REEL_ELEMENT_EXCEPT: u32 = 1 << 3;
/// Element flag: the medium is a cleaning cartridge (SMC medium type 2h, or what the plugin
/// knows of its library's cleaning media). ABI 1.x plugins that predate it never set it; the
/// host also knows cleaning cartridges by a configured barcode prefix.
pub const REEL_ELEMENT_CLEANING: u32 = 1 << 4;

/// Barcode buffer length (SMC primary volume tag is 32 bytes), NUL included.
pub const REEL_BARCODE_LEN: usize = 40;

/// One changer element as reported by `library_inventory`.
#[repr(C)]
#[derive(Clone, Copy)]
pub struct ReelElement {
    /// `REEL_ELEMENT_*` type.
    pub kind: u32,
    /// Element address as the changer numbers it.
    pub address: u32,
    /// Ordinal within its type (drive index for `drive_open`).
    pub index: u32,
    /// `REEL_ELEMENT_FULL` and friends.
    pub flags: u32,
    /// Address the medium came from, when known (0 otherwise).
    pub source_address: u32,
    /// Reserved, zero.
    pub reserved: u32,
    /// Barcode (volume tag), NUL terminated; empty if none or unreadable.
    pub barcode: [c_char; REEL_BARCODE_LEN],
}

impl ReelElement {
    /// A zeroed element.
    pub const fn zeroed() -> Self {
        ReelElement {
            kind: 0,
            address: 0,
            index: 0,
            flags: 0,
            source_address: 0,
            reserved: 0,
            barcode: [0; REEL_BARCODE_LEN],
        }
    }
}

/// Space by records.
pub const REEL_SPACE_RECORDS: u32 = 0;
/// Space by filemarks.
pub const REEL_SPACE_FILEMARKS: u32 = 1;
/// Space to end of data (count ignored).
pub const REEL_SPACE_EOD: u32 = 3;

/// Position flag: at beginning of partition.
pub const REEL_POS_BOP: u32 = 1 << 0;
/// Position flag: at end of partition (past early warning).
pub const REEL_POS_EOP: u32 = 1 << 1;
/// Position flag: `wrap` and `lpos` are valid.
pub const REEL_POS_PHYSICAL_VALID: u32 = 1 << 2;
/// Position flag: the position is unknown (lost after an error); block and file are not valid.
pub const REEL_POS_UNKNOWN: u32 = 1 << 3;

/// A logical position, with the physical one where the drive knows it.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct ReelPosition {
    /// Logical object (block) number: records and filemarks count.
    pub block: u64,
    /// Number of filemarks before this position.
    pub file: u64,
    /// Partition number.
    pub partition: u32,
    /// `REEL_POS_*` bits.
    pub flags: u32,
    /// Wrap number (when `REEL_POS_PHYSICAL_VALID`).
    pub wrap: u32,
    /// Longitudinal position (when `REEL_POS_PHYSICAL_VALID`).
    pub lpos: u32,
}

/// LBP off.
pub const REEL_LBP_OFF: u32 = 0;
/// LBP with CRC32C (Castagnoli) appended to every record.
pub const REEL_LBP_CRC32C: u32 = 1;

/// Write-record flag: `crc` carries the record's CRC32C and must be checked by the drive.
pub const REEL_WRITE_HAS_CRC: u32 = 1 << 0;

/// One record of a [`ReelPluginV1::drive_write_records`] call (ABI 1.4): what one
/// `drive_write_record` call takes, as a value.
#[repr(C)]
#[derive(Clone, Copy, Debug)]
pub struct ReelWriteRecord {
    /// The record's bytes; valid for `len` bytes during the call.
    pub data: *const u8,
    /// Length in bytes (more than 0).
    pub len: usize,
    /// Its CRC32C, when `flags` has `REEL_WRITE_HAS_CRC`.
    pub crc: u32,
    /// `REEL_WRITE_*` bits.
    pub flags: u32,
}

/// Drive statistics. Counters the plugin cannot know stay zero and their bit in `valid` clear.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct ReelDriveStats {
    /// Size of this struct as the caller allocated it.
    pub struct_size: u32,
    /// Bitmap of valid fields, in field order after `valid` (bit 0 = `busy_ns`).
    pub valid: u32,
    /// Time the drive was busy (any command).
    pub busy_ns: u64,
    /// Time the tape was streaming data.
    pub streaming_ns: u64,
    /// Time spent locating and spacing.
    pub locate_ns: u64,
    /// Time spent in robot moves, loads and unloads.
    pub mount_ns: u64,
    /// Bytes written to the medium.
    pub bytes_written: u64,
    /// Bytes read from the medium.
    pub bytes_read: u64,
    /// Records written.
    pub records_written: u64,
    /// Records read.
    pub records_read: u64,
    /// Filemarks written.
    pub filemarks_written: u64,
    /// Locate and space operations.
    pub locates: u64,
    /// Backhitches caused by buffer underrun (shoe-shining).
    pub backhitch_underrun: u64,
    /// Backhitches caused by a synchronous filemark stop.
    pub backhitch_sync: u64,
    /// Read-retry repositions.
    pub repositions: u64,
    /// Loads.
    pub mounts: u64,
    /// Writes made anywhere but at end of data (a simulator counts these; must stay 0).
    pub writes_not_at_eod: u64,
    /// Relabels: writes at BOT over a written read-write cartridge.
    pub relabels: u64,
    /// Write errors the drive corrected (rewrites; SCSI log page 02h, "total errors
    /// corrected"). From ABI 1.3.
    pub write_errors_corrected: u64,
    /// Write errors the drive could not correct (log page 02h, "total uncorrected errors").
    /// From ABI 1.3.
    pub write_errors_uncorrected: u64,
    /// Read errors the drive corrected (retries, ECC; log page 03h). From ABI 1.3.
    pub read_errors_corrected: u64,
    /// Read errors the drive could not correct (log page 03h). From ABI 1.3.
    pub read_errors_uncorrected: u64,
}

/// Medium geometry for access ordering, as read after a load.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct ReelGeometry {
    /// Size of this struct as the caller allocated it.
    pub struct_size: u32,
    /// Number of wraps (0 if the medium is modelled as one linear track).
    pub wraps: u32,
    /// Number of bands (4 on LTO).
    pub bands: u32,
    /// Reserved, zero.
    pub reserved: u32,
    /// Smallest LPOS of a wrap.
    pub min_lpos: u64,
    /// Largest LPOS of a wrap.
    pub max_lpos: u64,
    /// Native capacity of the medium in bytes.
    pub capacity_bytes: u64,
    /// Number of end-of-wrap positions written into the caller's array.
    pub eowp_count: u32,
    /// Reserved, zero.
    pub reserved2: u32,
}

/// An extent of blocks for native RAO: `[first_block, last_block]` inclusive.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct ReelExtent {
    /// First block of the extent.
    pub first_block: u64,
    /// Last block of the extent.
    pub last_block: u64,
}

/// Drive identity (INQUIRY and VPD 80h).
#[repr(C)]
#[derive(Clone, Copy)]
pub struct ReelDriveInfo {
    /// Size of this struct as the caller allocated it.
    pub struct_size: u32,
    /// Reserved, zero.
    pub reserved: u32,
    /// Vendor, NUL terminated.
    pub vendor: [c_char; 16],
    /// Product, NUL terminated.
    pub product: [c_char; 32],
    /// Unit serial number, NUL terminated.
    pub serial: [c_char; 64],
    /// Largest record the drive accepts, in bytes.
    pub max_record_bytes: u64,
    /// ABI 1.2: the `REEL_CAP_*` bits of this drive (a library may mix drive generations: LBP,
    /// MAM or RAO on some drives only). The host reads it only from a plugin built against
    /// minor 2 or later, keeps only bits the table's `caps` also has, and takes 0 (the field
    /// left zeroed) as "the library's bits".
    pub capabilities: u64,
}

impl ReelDriveInfo {
    /// A zeroed info struct with `struct_size` set.
    pub const fn new() -> Self {
        ReelDriveInfo {
            struct_size: std::mem::size_of::<ReelDriveInfo>() as u32,
            reserved: 0,
            vendor: [0; 16],
            product: [0; 32],
            serial: [0; 64],
            max_record_bytes: 0,
            capabilities: 0,
        }
    }
}

impl Default for ReelDriveInfo {
    fn default() -> Self {
        Self::new()
    }
}

/// Library identity (ABI 1.1): for a SCSI library the medium changer's INQUIRY and VPD 80h.
/// The serial number is what the host names the library by (drive leases, the drive board,
/// drive names), so it must be the same on every host that reaches this library, however the
/// plugin is installed or configured there.
#[repr(C)]
#[derive(Clone, Copy)]
pub struct ReelLibraryInfo {
    /// Size of this struct as the caller allocated it.
    pub struct_size: u32,
    /// Reserved, zero.
    pub reserved: u32,
    /// Vendor, NUL terminated.
    pub vendor: [c_char; 16],
    /// Product, NUL terminated.
    pub product: [c_char; 32],
    /// Serial number, NUL terminated; stable for the life of the library.
    pub serial: [c_char; 64],
}

impl ReelLibraryInfo {
    /// A zeroed info struct with `struct_size` set.
    pub const fn new() -> Self {
        ReelLibraryInfo {
            struct_size: std::mem::size_of::<ReelLibraryInfo>() as u32,
            reserved: 0,
            vendor: [0; 16],
            product: [0; 32],
            serial: [0; 64],
        }
    }
}

impl Default for ReelLibraryInfo {
    fn default() -> Self {
        Self::new()
    }
}

// ---- handles ------------------------------------------------------------------------------

/// Opaque library handle, created by `library_open`.
#[repr(C)]
pub struct ReelLibrary {
    _private: [u8; 0],
}

/// Opaque drive handle, created by `drive_open`.
#[repr(C)]
pub struct ReelDrive {
    _private: [u8; 0],
}

// ---- the table ----------------------------------------------------------------------------

// ---- slot types (one typedef per function slot of the table) ---------------------------

/// Log levels of [`ReelLogFn`], most severe first.
pub const REEL_LOG_ERROR: u32 = 1;
/// A condition the operator should look at.
pub const REEL_LOG_WARN: u32 = 2;
/// What a plugin did (a library opened, a device resolved).
pub const REEL_LOG_INFO: u32 = 3;
/// Detail for someone debugging the plugin.
pub const REEL_LOG_DEBUG: u32 = 4;
/// Every command.
pub const REEL_LOG_TRACE: u32 = 5;

/// The host's log sink (ABI 1.2): `level` a `REEL_LOG_*`, `target` where in the plugin the
/// event comes from and `message` its text (both NUL-terminated UTF-8, valid only during the
/// call), `context` what the host gave `set_log`. The host may be called from any thread the
/// plugin runs on, copies what it keeps, never calls back into the plugin, and never unwinds.
pub type ReelLogFn = Option<
    unsafe extern "C" fn(
        context: *mut c_void,
        level: u32,
        target: *const c_char,
        message: *const c_char,
    ),
>;

/// The type of the [`ReelPluginV1::set_log`] slot.
pub type ReelSetLogFn =
    Option<unsafe extern "C" fn(log: ReelLogFn, context: *mut c_void, max_level: u32)>;

/// The type of the [`ReelPluginV1::drive_test_ready`] slot.
pub type ReelDriveTestReadyFn =
    Option<unsafe extern "C" fn(drive: *mut ReelDrive, status: *mut ReelStatus) -> i32>;

/// The type of the [`ReelPluginV1::drive_load`] slot.
pub type ReelDriveLoadFn =
    Option<unsafe extern "C" fn(drive: *mut ReelDrive, status: *mut ReelStatus) -> i32>;

/// The type of the [`ReelPluginV1::drive_unload`] slot.
pub type ReelDriveUnloadFn =
    Option<unsafe extern "C" fn(drive: *mut ReelDrive, status: *mut ReelStatus) -> i32>;

/// The type of the [`ReelPluginV1::drive_rewind`] slot.
pub type ReelDriveRewindFn =
    Option<unsafe extern "C" fn(drive: *mut ReelDrive, status: *mut ReelStatus) -> i32>;

/// The type of the [`ReelPluginV1::library_open`] slot.
pub type ReelLibraryOpenFn = Option<
    unsafe extern "C" fn(
        config: *const c_char,
        out: *mut *mut ReelLibrary,
        status: *mut ReelStatus,
    ) -> i32,
>;

/// The type of the [`ReelPluginV1::library_close`] slot.
pub type ReelLibraryCloseFn = Option<unsafe extern "C" fn(library: *mut ReelLibrary)>;

/// The type of the [`ReelPluginV1::library_inventory`] slot.
pub type ReelLibraryInventoryFn = Option<
    unsafe extern "C" fn(
        library: *mut ReelLibrary,
        elements: *mut ReelElement,
        capacity: u32,
        out_count: *mut u32,
        status: *mut ReelStatus,
    ) -> i32,
>;

/// The type of the [`ReelPluginV1::library_move`] slot.
pub type ReelLibraryMoveFn = Option<
    unsafe extern "C" fn(
        library: *mut ReelLibrary,
        source: u32,
        destination: u32,
        status: *mut ReelStatus,
    ) -> i32,
>;

/// The type of the [`ReelPluginV1::library_import`] slot.
pub type ReelLibraryImportFn = Option<
    unsafe extern "C" fn(
        library: *mut ReelLibrary,
        ie_address: u32,
        slot_address: u32,
        status: *mut ReelStatus,
    ) -> i32,
>;

/// The type of the [`ReelPluginV1::library_export`] slot.
pub type ReelLibraryExportFn = Option<
    unsafe extern "C" fn(
        library: *mut ReelLibrary,
        slot_address: u32,
        ie_address: u32,
        status: *mut ReelStatus,
    ) -> i32,
>;

/// The type of the [`ReelPluginV1::control`] slot.
pub type ReelControlFn = Option<
    unsafe extern "C" fn(
        library: *mut ReelLibrary,
        request: *const c_char,
        response: *mut c_char,
        capacity: usize,
        out_len: *mut usize,
        status: *mut ReelStatus,
    ) -> i32,
>;

/// The type of the [`ReelPluginV1::drive_open`] slot.
pub type ReelDriveOpenFn = Option<
    unsafe extern "C" fn(
        library: *mut ReelLibrary,
        index: u32,
        out: *mut *mut ReelDrive,
        status: *mut ReelStatus,
    ) -> i32,
>;

/// The type of the [`ReelPluginV1::drive_close`] slot.
pub type ReelDriveCloseFn = Option<unsafe extern "C" fn(drive: *mut ReelDrive)>;

/// The type of the [`ReelPluginV1::drive_info`] slot.
pub type ReelDriveInfoFn = Option<
    unsafe extern "C" fn(
        drive: *mut ReelDrive,
        out: *mut ReelDriveInfo,
        status: *mut ReelStatus,
    ) -> i32,
>;

/// The type of the [`ReelPluginV1::drive_locate`] slot.
pub type ReelDriveLocateFn =
    Option<unsafe extern "C" fn(drive: *mut ReelDrive, block: u64, status: *mut ReelStatus) -> i32>;

/// The type of the [`ReelPluginV1::drive_space`] slot.
pub type ReelDriveSpaceFn = Option<
    unsafe extern "C" fn(
        drive: *mut ReelDrive,
        kind: u32,
        count: i64,
        status: *mut ReelStatus,
    ) -> i32,
>;

/// The type of the [`ReelPluginV1::drive_read_position`] slot.
pub type ReelDriveReadPositionFn = Option<
    unsafe extern "C" fn(
        drive: *mut ReelDrive,
        out: *mut ReelPosition,
        status: *mut ReelStatus,
    ) -> i32,
>;

/// The type of the [`ReelPluginV1::drive_write_record`] slot.
pub type ReelDriveWriteRecordFn = Option<
    unsafe extern "C" fn(
        drive: *mut ReelDrive,
        data: *const u8,
        len: usize,
        crc: u32,
        flags: u32,
        status: *mut ReelStatus,
    ) -> i32,
>;

/// The type of the [`ReelPluginV1::drive_write_records`] slot.
pub type ReelDriveWriteRecordsFn = Option<
    unsafe extern "C" fn(
        drive: *mut ReelDrive,
        records: *const ReelWriteRecord,
        count: usize,
        out_written: *mut usize,
        status: *mut ReelStatus,
    ) -> i32,
>;

/// The type of the [`ReelPluginV1::drive_write_filemarks`] slot.
pub type ReelDriveWriteFilemarksFn = Option<
    unsafe extern "C" fn(
        drive: *mut ReelDrive,
        count: u32,
        immediate: u32,
        status: *mut ReelStatus,
    ) -> i32,
>;

/// The type of the [`ReelPluginV1::drive_read_record`] slot.
pub type ReelDriveReadRecordFn = Option<
    unsafe extern "C" fn(
        drive: *mut ReelDrive,
        buffer: *mut u8,
        capacity: usize,
        out_len: *mut usize,
        out_crc: *mut u32,
        status: *mut ReelStatus,
    ) -> i32,
>;

/// The type of the [`ReelPluginV1::drive_set_lbp`] slot.
pub type ReelDriveSetLbpFn =
    Option<unsafe extern "C" fn(drive: *mut ReelDrive, mode: u32, status: *mut ReelStatus) -> i32>;

/// The type of the [`ReelPluginV1::drive_mam_read`] slot.
pub type ReelDriveMamReadFn = Option<
    unsafe extern "C" fn(
        drive: *mut ReelDrive,
        attribute: u16,
        buffer: *mut u8,
        capacity: usize,
        out_len: *mut usize,
        status: *mut ReelStatus,
    ) -> i32,
>;

/// The type of the [`ReelPluginV1::drive_mam_write`] slot.
pub type ReelDriveMamWriteFn = Option<
    unsafe extern "C" fn(
        drive: *mut ReelDrive,
        attribute: u16,
        data: *const u8,
        len: usize,
        status: *mut ReelStatus,
    ) -> i32,
>;

/// The type of the [`ReelPluginV1::drive_statistics`] slot.
pub type ReelDriveStatisticsFn = Option<
    unsafe extern "C" fn(
        drive: *mut ReelDrive,
        out: *mut ReelDriveStats,
        status: *mut ReelStatus,
    ) -> i32,
>;

/// The type of the [`ReelPluginV1::drive_tape_alerts`] slot.
pub type ReelDriveTapeAlertsFn = Option<
    unsafe extern "C" fn(drive: *mut ReelDrive, out: *mut u64, status: *mut ReelStatus) -> i32,
>;

/// The type of the [`ReelPluginV1::drive_geometry`] slot.
pub type ReelDriveGeometryFn = Option<
    unsafe extern "C" fn(
        drive: *mut ReelDrive,
        out: *mut ReelGeometry,
        eowp: *mut u64,
        capacity: u32,
        status: *mut ReelStatus,
    ) -> i32,
>;

/// The type of the [`ReelPluginV1::drive_rao`] slot.
pub type ReelDriveRaoFn = Option<
    unsafe extern "C" fn(
        drive: *mut ReelDrive,
        extents: *const ReelExtent,
        count: u32,
        out_order: *mut u32,
        status: *mut ReelStatus,
    ) -> i32,
>;

/// The type of the [`ReelPluginV1::library_info`] slot.
pub type ReelLibraryInfoFn = Option<
    unsafe extern "C" fn(
        library: *mut ReelLibrary,
        out: *mut ReelLibraryInfo,
        status: *mut ReelStatus,
    ) -> i32,
>;

/// The v1 plugin table, returned by the exported `reel_plugin_v1` symbol. Static, immutable.
///
/// Append-only: new slots go at the end and bump [`REEL_ABI_MINOR`]. A NULL slot is
/// "unsupported". Every call with a `status` argument fills it and returns a `REEL_*` code.
#[repr(C)]
pub struct ReelPluginV1 {
    /// Size of this table as the plugin compiled it.
    pub struct_size: u32,
    /// Must be [`REEL_ABI_MAJOR`] (1).
    pub abi_major: u16,
    /// Minor version the plugin was built against.
    pub abi_minor: u16,
    /// Plugin name, static NUL-terminated UTF-8.
    pub name: *const c_char,
    /// Plugin version, static NUL-terminated UTF-8.
    pub version: *const c_char,
    /// `REEL_CAP_*` bits.
    pub caps: u64,
    /// `REEL_THREAD_*` model.
    pub thread_model: u32,
    /// Reserved, zero.
    pub reserved: u32,

    /// Open a library with a configuration string (`key=value` lines or TOML; plugin-defined).
    pub library_open: ReelLibraryOpenFn,
    /// Close a library. Every drive handle must be closed first.
    pub library_close: ReelLibraryCloseFn,
    /// Fill up to `capacity` elements; `out_count` receives the total number of elements.
    /// If `capacity` is too small, returns `REEL_E_BUFFER_TOO_SMALL` with the count needed.
    pub library_inventory: ReelLibraryInventoryFn,
    /// MOVE MEDIUM from one element address to another.
    pub library_move: ReelLibraryMoveFn,
    /// Take a cartridge in from an import/export element into a storage slot.
    pub library_import: ReelLibraryImportFn,
    /// Put a cartridge out from a storage slot to an import/export element.
    pub library_export: ReelLibraryExportFn,
    /// Plugin-specific action (fault injection, diagnostics). Request and response are UTF-8
    /// (JSON by convention). `out_len` receives the response length (needed size on
    /// `REEL_E_BUFFER_TOO_SMALL`).
    pub control: ReelControlFn,

    /// Open the drive with the given index (the `index` of its drive element).
    pub drive_open: ReelDriveOpenFn,
    /// Close a drive handle (allowed on a poisoned handle).
    pub drive_close: ReelDriveCloseFn,
    /// Identity of the drive.
    pub drive_info: ReelDriveInfoFn,
    /// TEST UNIT READY.
    pub drive_test_ready: ReelDriveTestReadyFn,
    /// LOAD: thread the medium in the drive and position at BOT.
    pub drive_load: ReelDriveLoadFn,
    /// UNLOAD: rewind and eject, ready for the robot.
    pub drive_unload: ReelDriveUnloadFn,
    /// REWIND to BOT.
    pub drive_rewind: ReelDriveRewindFn,
    /// LOCATE to a logical block.
    pub drive_locate: ReelDriveLocateFn,
    /// SPACE `count` (negative = backward) records or filemarks, or to EOD.
    pub drive_space: ReelDriveSpaceFn,
    /// READ POSITION.
    pub drive_read_position: ReelDriveReadPositionFn,
    /// WRITE one variable-length record. With `REEL_WRITE_HAS_CRC`, `crc` is its CRC32C.
    pub drive_write_record: ReelDriveWriteRecordFn,
    /// WRITE FILEMARKS; `immediate` != 0 returns before the buffer is on the medium.
    pub drive_write_filemarks: ReelDriveWriteFilemarksFn,
    /// READ one record into the caller's buffer; `out_len` receives its length and `out_crc`
    /// its CRC32C when LBP is on.
    pub drive_read_record: ReelDriveReadRecordFn,
    /// Set the logical block protection mode (`REEL_LBP_*`); kept across loads.
    pub drive_set_lbp: ReelDriveSetLbpFn,
    /// READ ATTRIBUTE: the value of one MAM attribute.
    pub drive_mam_read: ReelDriveMamReadFn,
    /// WRITE ATTRIBUTE: set one MAM attribute.
    pub drive_mam_write: ReelDriveMamWriteFn,
    /// Drive statistics.
    pub drive_statistics: ReelDriveStatisticsFn,
    /// TapeAlert flags 1..64 as a bitmap (bit n-1 = flag n).
    pub drive_tape_alerts: ReelDriveTapeAlertsFn,
    /// Medium geometry and up to `capacity` end-of-wrap positions (block number of the first
    /// block past the end of each wrap).
    pub drive_geometry: ReelDriveGeometryFn,
    /// Native recommended access order: writes a permutation of `0..count` into `out_order`.
    pub drive_rao: ReelDriveRaoFn,

    /// ABI 1.1. The library's identity (for a SCSI library, the medium changer's INQUIRY and
    /// unit serial number). NULL (a 1.0 plugin): the host names the library from its
    /// configuration instead.
    pub library_info: ReelLibraryInfoFn,
    /// ABI 1.2. The host's log sink: the host calls it once, right after loading the plugin and
    /// before any other call, so that the plugin's log events reach the host's log with the
    /// plugin's name. `max_level` is the most verbose `REEL_LOG_*` level the host records. NULL:
    /// the plugin's events stay its own.
    pub set_log: ReelSetLogFn,
    /// ABI 1.4. WRITE `count` records in order, handed to the drive back to back as one
    /// arrival (a drive that models its buffer sees no host time between them). Each record
    /// is written as `drive_write_record` would write it. The call stops at the first record
    /// whose outcome is anything but REEL_OK without flags: `out_written` receives the number
    /// of records before it, all written, and the return code and status are that record's
    /// own (REEL_OK with the EOM flag: it was written at early warning; an error: as
    /// `drive_write_record`'s). When every record was written, `out_written` is `count` and
    /// the status covers the whole call. REEL_OK without flags and `out_written` below `count`
    /// means the plugin stopped early: the rest were not written and may be sent again. NULL:
    /// the host writes the records one call at a time.
    pub drive_write_records: ReelDriveWriteRecordsFn,
}

// SAFETY: the table is immutable static data; its raw pointers point at static strings and its
// function pointers are plain code addresses. Sharing it across threads is sound.
unsafe impl Sync for ReelPluginV1 {}
// SAFETY: as above; the table owns nothing that is tied to a thread.
unsafe impl Send for ReelPluginV1 {}

/// Signature of the exported entry symbol `reel_plugin_v1`.
pub type ReelPluginEntryV1 = unsafe extern "C" fn() -> *const ReelPluginV1;

// ---- sense ------------------------------------------------------------------------------

/// SCSI sense keys used across the ABI.
pub mod sense_key {
    /// No sense (flags such as FILEMARK or EOM may still be set).
    pub const NO_SENSE: u8 = 0x0;
    /// Recovered error.
    pub const RECOVERED_ERROR: u8 = 0x1;
    /// Not ready.
    pub const NOT_READY: u8 = 0x2;
    /// Medium error.
    pub const MEDIUM_ERROR: u8 = 0x3;
    /// Hardware error.
    pub const HARDWARE_ERROR: u8 = 0x4;
    /// Illegal request.
    pub const ILLEGAL_REQUEST: u8 = 0x5;
    /// Unit attention.
    pub const UNIT_ATTENTION: u8 = 0x6;
    /// Data protect (write protected, WORM).
    pub const DATA_PROTECT: u8 = 0x7;
    /// Blank check (end of data).
    pub const BLANK_CHECK: u8 = 0x8;
    /// Aborted command (LBP CRC mismatch among others).
    pub const ABORTED_COMMAND: u8 = 0xB;
    /// Volume overflow (physical end of medium).
    pub const VOLUME_OVERFLOW: u8 = 0xD;
}

/// Additional sense code / qualifier pairs used across the ABI.
pub mod asc {
    /// 00/00 no additional sense.
    pub const NONE: (u8, u8) = (0x00, 0x00);
    /// 00/01 filemark detected.
    pub const FILEMARK: (u8, u8) = (0x00, 0x01);
    /// 00/02 end-of-partition/medium detected (early warning).
    pub const END_OF_MEDIUM: (u8, u8) = (0x00, 0x02);
    /// 00/04 beginning-of-partition/medium detected.
    pub const BEGINNING_OF_MEDIUM: (u8, u8) = (0x00, 0x04);
    /// 00/05 end of data detected.
    pub const END_OF_DATA: (u8, u8) = (0x00, 0x05);
    /// 00/17 cleaning requested.
    pub const CLEANING_REQUESTED: (u8, u8) = (0x00, 0x17);
    /// 04/01 logical unit is in process of becoming ready.
    pub const BECOMING_READY: (u8, u8) = (0x04, 0x01);
    /// 0C/00 write error.
    pub const WRITE_ERROR: (u8, u8) = (0x0C, 0x00);
    /// 10/01 logical block guard check failed (LBP CRC mismatch).
    pub const LBP_GUARD_CHECK_FAILED: (u8, u8) = (0x10, 0x01);
    /// 11/00 unrecovered read error.
    pub const UNRECOVERED_READ_ERROR: (u8, u8) = (0x11, 0x00);
    /// 14/03 end of data not found.
    pub const EOD_NOT_FOUND: (u8, u8) = (0x14, 0x03);
    /// 1A/00 parameter list length error.
    pub const PARAMETER_LIST_LENGTH: (u8, u8) = (0x1A, 0x00);
    /// 20/00 invalid command operation code.
    pub const INVALID_OPCODE: (u8, u8) = (0x20, 0x00);
    /// 21/01 invalid element address.
    pub const INVALID_ELEMENT_ADDRESS: (u8, u8) = (0x21, 0x01);
    /// 24/00 invalid field in CDB.
    pub const INVALID_FIELD_IN_CDB: (u8, u8) = (0x24, 0x00);
    /// 26/00 invalid field in parameter list.
    pub const INVALID_FIELD_IN_PARAMETER_LIST: (u8, u8) = (0x26, 0x00);
    /// 27/00 write protected.
    pub const WRITE_PROTECTED: (u8, u8) = (0x27, 0x00);
    /// 28/00 not ready to ready change, medium may have changed.
    pub const MEDIUM_MAY_HAVE_CHANGED: (u8, u8) = (0x28, 0x00);
    /// 29/00 power on, reset or bus device reset occurred.
    pub const POWER_ON_RESET: (u8, u8) = (0x29, 0x00);
    /// 30/01 cannot read medium, unknown format.
    pub const UNKNOWN_FORMAT: (u8, u8) = (0x30, 0x01);
    /// 30/0C WORM medium, overwrite attempted.
    pub const WORM_OVERWRITE_ATTEMPTED: (u8, u8) = (0x30, 0x0C);
    /// 3A/00 medium not present.
    pub const MEDIUM_NOT_PRESENT: (u8, u8) = (0x3A, 0x00);
    /// 3B/0D medium destination element full.
    pub const DESTINATION_FULL: (u8, u8) = (0x3B, 0x0D);
    /// 3B/0E medium source element empty.
    pub const SOURCE_EMPTY: (u8, u8) = (0x3B, 0x0E);
    /// 3B/0F end of medium reached (volume overflow).
    pub const END_OF_MEDIUM_REACHED: (u8, u8) = (0x3B, 0x0F);
    /// 44/00 internal target failure.
    pub const INTERNAL_TARGET_FAILURE: (u8, u8) = (0x44, 0x00);
    /// 50/00 write append error (position lost).
    pub const WRITE_APPEND_ERROR: (u8, u8) = (0x50, 0x00);
    /// 52/00 cartridge fault.
    pub const CARTRIDGE_FAULT: (u8, u8) = (0x52, 0x00);
    /// 53/00 media load or eject failed.
    pub const LOAD_EJECT_FAILED: (u8, u8) = (0x53, 0x00);
    /// 53/02 medium removal prevented.
    pub const MEDIUM_REMOVAL_PREVENTED: (u8, u8) = (0x53, 0x02);
}

/// MAM attribute identifiers reel uses (SPC-4 READ ATTRIBUTE / WRITE ATTRIBUTE).
///
/// SPC-4 ranges: 0000h-03FFh device type (read-only), 0400h-07FFh medium type (read-only),
/// 0800h-0BFFh host type (writable), 0C00h-0FFFh device vendor-unique, 1000h-13FFh medium
/// vendor-unique (read-only), 1400h-17FFh host vendor-unique (writable).
pub mod mam {
    /// 0000h REMAINING CAPACITY IN PARTITION (MiB), device type, read-only.
    pub const REMAINING_CAPACITY: u16 = 0x0000;
    /// 0003h LOAD COUNT, device type, read-only.
    pub const LOAD_COUNT: u16 = 0x0003;
    /// 0400h MEDIUM MANUFACTURER, medium type, read-only.
    pub const MEDIUM_MANUFACTURER: u16 = 0x0400;
    /// 0401h MEDIUM SERIAL NUMBER, medium type, read-only.
    pub const MEDIUM_SERIAL: u16 = 0x0401;
    /// 0800h APPLICATION VENDOR, host type.
    pub const APPLICATION_VENDOR: u16 = 0x0800;
    /// 0801h APPLICATION NAME, host type.
    pub const APPLICATION_NAME: u16 = 0x0801;
    /// 0802h APPLICATION VERSION, host type.
    pub const APPLICATION_VERSION: u16 = 0x0802;
    /// 0803h USER MEDIUM TEXT LABEL, host type.
    pub const USER_MEDIUM_TEXT_LABEL: u16 = 0x0803;
    /// 0806h BARCODE, host type.
    pub const BARCODE: u16 = 0x0806;
    /// 0808h MEDIA POOL, host type.
    pub const MEDIA_POOL: u16 = 0x0808;
    /// 080Bh APPLICATION FORMAT VERSION, host type (reel keeps its label epoch in
    /// [`REEL_LABEL_EPOCH`], see docs/FORMAT.md).
    pub const APPLICATION_FORMAT_VERSION: u16 = 0x080B;
    /// 1400h reel's label epoch (u64, big-endian as SCSI binary attributes are), in SPC-4's host vendor-unique range
    /// (1400h-17FFh), which drives let the host write. (1000h-13FFh is the medium
    /// vendor-unique range, read-only on real drives.)
    pub const REEL_LABEL_EPOCH: u16 = 0x1400;
    /// 1401h reel's cartridge UUID (16 bytes), host vendor-unique range.
    pub const REEL_CARTRIDGE_UUID: u16 = 0x1401;
}
