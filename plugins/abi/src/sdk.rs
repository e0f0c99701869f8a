//! The Rust SDK for writing a plugin: implement [`Library`] and [`Drive`], then call
//! [`export_plugin!`](crate::export_plugin). The macro builds the static v1 table whose
//! trampolines check pointers, wrap every call in `catch_unwind`, poison a handle whose call
//! panicked, and fill the caller's status. A plugin written with the SDK has no `unsafe` code.

use std::ffi::CStr;

use crate::types::*;

/// A failed call, as the plugin reports it: a return code plus SCSI sense.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Fault {
    /// `REEL_E_*` return code (negative).
    pub code: i32,
    /// Sense key (with `REEL_E_CHECK_CONDITION`).
    pub sense_key: u8,
    /// Additional sense code.
    pub asc: u8,
    /// Additional sense code qualifier.
    pub ascq: u8,
    /// `REEL_FLAG_*` bits; `SENSE_VALID` is added for check conditions.
    pub flags: u32,
    /// SSC INFORMATION residue.
    pub residue: i64,
    /// Bytes transferred into the caller's buffer despite the error (reads with ILI).
    pub transferred: usize,
    /// CRC32C of the record as stored, for a read that ended in an error but delivered a
    /// record (ILI) while LBP is on: written to the call's `out_crc`.
    pub crc: Option<u32>,
    /// Human-readable detail.
    pub message: String,
}

impl Fault {
    /// CHECK CONDITION with the given sense key and ASC/ASCQ.
    pub fn check(sense_key: u8, asc: (u8, u8), message: impl Into<String>) -> Self {
        Fault {
            code: REEL_E_CHECK_CONDITION,
            sense_key,
            asc: asc.0,
            ascq: asc.1,
            flags: REEL_FLAG_SENSE_VALID,
            residue: 0,
            transferred: 0,
            crc: None,
            message: message.into(),
        }
    }

    /// A non-SCSI error with the given `REEL_E_*` code.
    pub fn code(code: i32, message: impl Into<String>) -> Self {
        Fault {
            code,
            sense_key: 0,
            asc: 0,
            ascq: 0,
            flags: 0,
            residue: 0,
            transferred: 0,
            crc: None,
            message: message.into(),
        }
    }

    /// The call is not supported by this plugin.
    pub fn unsupported(what: &str) -> Self {
        Self::code(
            REEL_E_UNSUPPORTED,
            format!("{what} is not supported by this plugin"),
        )
    }

    /// An argument was invalid.
    pub fn invalid(message: impl Into<String>) -> Self {
        Self::code(REEL_E_INVALID_ARG, message)
    }

    /// An internal plugin error (its own files, its own state).
    pub fn internal(message: impl Into<String>) -> Self {
        Self::code(REEL_E_INTERNAL, message)
    }

    /// Add `REEL_FLAG_*` bits.
    pub fn with_flags(mut self, flags: u32) -> Self {
        self.flags |= flags;
        self
    }

    /// Set the INFORMATION residue (and mark it valid).
    pub fn with_residue(mut self, residue: i64) -> Self {
        self.residue = residue;
        self.flags |= REEL_FLAG_RESIDUE_VALID;
        self
    }

    /// Record how many bytes reached the caller's buffer.
    pub fn with_transferred(mut self, n: usize) -> Self {
        self.transferred = n;
        self
    }

    /// The CRC32C of the record a failed read delivered (an ILI read under LBP).
    pub fn with_crc(mut self, crc: Option<u32>) -> Self {
        self.crc = crc;
        self
    }

    fn fill(&self, status: &mut ReelStatus) {
        status.sense_key = self.sense_key;
        status.asc = self.asc;
        status.ascq = self.ascq;
        status.flags |= self.flags;
        status.residue = self.residue;
        status.set_message(&self.message);
    }
}

impl std::fmt::Display for Fault {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "code {} sense {:X}/{:02X}/{:02X}: {}",
            self.code, self.sense_key, self.asc, self.ascq, self.message
        )
    }
}

impl std::error::Error for Fault {}

/// Per-call context a plugin fills besides its result: the call's elapsed time and any
/// status flags to report on success.
#[derive(Debug, Default)]
pub struct Call {
    /// Time the call took (modelled or measured), in nanoseconds.
    pub elapsed_ns: u64,
    /// `REEL_FLAG_*` bits to report even on success.
    pub flags: u32,
}

/// One changer element, in Rust form.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Element {
    /// `REEL_ELEMENT_*` type.
    pub kind: u32,
    /// Element address.
    pub address: u32,
    /// Ordinal within its type.
    pub index: u32,
    /// `REEL_ELEMENT_*` flags.
    pub flags: u32,
    /// Where the medium came from, 0 if unknown.
    pub source_address: u32,
    /// Barcode, empty if none.
    pub barcode: String,
}

impl Element {
    /// Convert to the C form (barcode truncated to fit).
    pub fn to_c(&self) -> ReelElement {
        let mut e = ReelElement::zeroed();
        e.kind = self.kind;
        e.address = self.address;
        e.index = self.index;
        e.flags = self.flags;
        e.source_address = self.source_address;
        copy_cstr(&mut e.barcode, &self.barcode);
        e
    }
}

/// Drive identity in Rust form.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct DriveInfo {
    /// Vendor.
    pub vendor: String,
    /// Product.
    pub product: String,
    /// Unit serial number.
    pub serial: String,
    /// Largest record accepted, bytes.
    pub max_record_bytes: u64,
    /// ABI 1.2: this drive's `REEL_CAP_*` bits, when they are fewer than the library's (a
    /// library of mixed drives). `None`: the library's [`Library::CAPS`].
    pub capabilities: Option<u64>,
}

/// A library's identity (ABI 1.1 `library_info`).
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct LibraryInfo {
    /// Vendor.
    pub vendor: String,
    /// Product.
    pub product: String,
    /// Serial number: the same on every host that reaches this library.
    pub serial: String,
}

/// A record read from tape: its length and, under LBP, its CRC32C.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct ReadRecord {
    /// Bytes placed in the caller's buffer.
    pub len: usize,
    /// CRC32C of the record as stored, when LBP is on.
    pub crc: Option<u32>,
}

/// One record of a [`Drive::write_records`] call: its bytes and, under LBP, its CRC32C.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct WriteRecord<'a> {
    /// The record.
    pub data: &'a [u8],
    /// Its CRC32C, when the host protects it with LBP.
    pub crc: Option<u32>,
}

/// Medium geometry in Rust form.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Geometry {
    /// Wraps (0 = linear model).
    pub wraps: u32,
    /// Bands.
    pub bands: u32,
    /// Smallest LPOS.
    pub min_lpos: u64,
    /// Largest LPOS.
    pub max_lpos: u64,
    /// Native capacity in bytes.
    pub capacity_bytes: u64,
    /// End-of-wrap positions: the first block past the end of each wrap written so far.
    pub eowp: Vec<u64>,
}

/// Copy a Rust string into a fixed C buffer, truncated on a char boundary, NUL terminated.
pub fn copy_cstr(dst: &mut [std::ffi::c_char], src: &str) {
    if dst.is_empty() {
        return;
    }
    let mut end = src.len().min(dst.len() - 1);
    while !src.is_char_boundary(end) {
        end -= 1;
    }
    for (d, s) in dst.iter_mut().zip(src.as_bytes()[..end].iter()) {
        *d = *s as std::ffi::c_char;
    }
    dst[end] = 0;
}

/// A library (changer plus drives) as a plugin implements it.
///
/// Calls on one handle never overlap (thread model `SERIALIZE_PER_HANDLE`), but the library
/// and its drives are separate handles and run in parallel: share state between them with
/// your own synchronisation.
pub trait Library: Sized + Send + 'static {
    /// The drive handle type.
    type Drive: Drive;
    /// Plugin name.
    const NAME: &'static CStr;
    /// Plugin version.
    const VERSION: &'static CStr;
    /// `REEL_CAP_*` bits.
    const CAPS: u64;

    /// Open the library from a configuration string.
    fn open(config: &str, call: &mut Call) -> Result<Self, Fault>;
    /// Every element of the changer.
    fn inventory(&mut self, call: &mut Call) -> Result<Vec<Element>, Fault>;
    /// MOVE MEDIUM between two element addresses.
    fn move_medium(&mut self, source: u32, destination: u32, call: &mut Call) -> Result<(), Fault>;
    /// Take a cartridge in from an import/export element.
    fn import(&mut self, ie: u32, slot: u32, call: &mut Call) -> Result<(), Fault> {
        self.move_medium(ie, slot, call)
    }
    /// Put a cartridge out to an import/export element.
    fn export(&mut self, slot: u32, ie: u32, call: &mut Call) -> Result<(), Fault> {
        self.move_medium(slot, ie, call)
    }
    /// Plugin-specific action; returns the response text.
    fn control(&mut self, _request: &str, _call: &mut Call) -> Result<String, Fault> {
        Err(Fault::unsupported("control"))
    }
    /// The library's identity (ABI 1.1). The default answers "unsupported": the host then
    /// names the library from its configuration.
    fn info(&mut self, _call: &mut Call) -> Result<LibraryInfo, Fault> {
        Err(Fault::unsupported("library_info"))
    }
    /// Open the drive with the given index.
    fn open_drive(&mut self, index: u32, call: &mut Call) -> Result<Self::Drive, Fault>;
}

/// One tape drive as a plugin implements it. Default methods answer "unsupported".
pub trait Drive: Send + 'static {
    /// Identity.
    fn info(&mut self, call: &mut Call) -> Result<DriveInfo, Fault>;
    /// TEST UNIT READY.
    fn test_ready(&mut self, call: &mut Call) -> Result<(), Fault>;
    /// LOAD.
    fn load(&mut self, call: &mut Call) -> Result<(), Fault>;
    /// UNLOAD.
    fn unload(&mut self, call: &mut Call) -> Result<(), Fault>;
    /// REWIND.
    fn rewind(&mut self, call: &mut Call) -> Result<(), Fault>;
    /// LOCATE to a block.
    fn locate(&mut self, block: u64, call: &mut Call) -> Result<(), Fault>;
    /// SPACE (`REEL_SPACE_*`), negative count backward.
    fn space(&mut self, kind: u32, count: i64, call: &mut Call) -> Result<(), Fault>;
    /// READ POSITION.
    fn read_position(&mut self, call: &mut Call) -> Result<ReelPosition, Fault>;
    /// WRITE one record; `crc` is given when the host protects it with LBP.
    fn write_record(&mut self, data: &[u8], crc: Option<u32>, call: &mut Call)
    -> Result<(), Fault>;
    /// WRITE several records in order, handed over as one arrival (ABI 1.4
    /// `drive_write_records`). Returns how many were written before the record the result
    /// describes: all of them and `Ok` when every one was written without a flag; otherwise
    /// the first record whose outcome was an error, or success with flags in `call.flags`
    /// (early warning), and that outcome. The default writes them one [`Drive::write_record`]
    /// at a time; a drive that models its buffer overrides it so no host time passes between
    /// them.
    fn write_records(
        &mut self,
        records: &[WriteRecord<'_>],
        call: &mut Call,
    ) -> (usize, Result<(), Fault>) {
        for (i, r) in records.iter().enumerate() {
            let mut one = Call::default();
            let result = self.write_record(r.data, r.crc, &mut one);
            call.elapsed_ns += one.elapsed_ns;
            if result.is_err() || one.flags != 0 {
                call.flags |= one.flags;
                return (i, result);
            }
        }
        (records.len(), Ok(()))
    }
    /// WRITE FILEMARKS.
    fn write_filemarks(
        &mut self,
        count: u32,
        immediate: bool,
        call: &mut Call,
    ) -> Result<(), Fault>;
    /// READ one record into `buffer`.
    fn read_record(&mut self, buffer: &mut [u8], call: &mut Call) -> Result<ReadRecord, Fault>;
    /// Set the LBP mode.
    fn set_lbp(&mut self, _mode: u32, _call: &mut Call) -> Result<(), Fault> {
        Err(Fault::unsupported("logical block protection"))
    }
    /// READ ATTRIBUTE.
    fn mam_read(&mut self, _attribute: u16, _call: &mut Call) -> Result<Vec<u8>, Fault> {
        Err(Fault::unsupported("MAM"))
    }
    /// WRITE ATTRIBUTE.
    fn mam_write(&mut self, _attribute: u16, _data: &[u8], _call: &mut Call) -> Result<(), Fault> {
        Err(Fault::unsupported("MAM"))
    }
    /// Statistics.
    fn statistics(&mut self, _call: &mut Call) -> Result<ReelDriveStats, Fault> {
        Err(Fault::unsupported("statistics"))
    }
    /// TapeAlert bitmap.
    fn tape_alerts(&mut self, _call: &mut Call) -> Result<u64, Fault> {
        Err(Fault::unsupported("tape alerts"))
    }
    /// Medium geometry.
    fn geometry(&mut self, _call: &mut Call) -> Result<Geometry, Fault> {
        Err(Fault::unsupported("geometry"))
    }
    /// Native RAO: a permutation of `0..extents.len()`.
    fn rao(&mut self, _extents: &[ReelExtent], _call: &mut Call) -> Result<Vec<u32>, Fault> {
        Err(Fault::unsupported("native RAO"))
    }
}

/// Trampolines the [`export_plugin!`](crate::export_plugin) macro puts in the table. Public
/// only so the macro can name them; a plugin never calls them.
#[doc(hidden)]
pub mod trampoline {
    use super::*;
    use std::ffi::c_char;
    use std::panic::{AssertUnwindSafe, catch_unwind};

    /// A handle as the SDK allocates it.
    pub struct Handle<T> {
        inner: T,
        poisoned: bool,
    }

    fn panic_message(p: &(dyn std::any::Any + Send)) -> String {
        if let Some(s) = p.downcast_ref::<&str>() {
            (*s).to_string()
        } else if let Some(s) = p.downcast_ref::<String>() {
            s.clone()
        } else {
            "unknown panic".to_string()
        }
    }

    /// The caller's status for one call: a fresh status of our own, written back when dropped,
    /// at most the `struct_size` bytes the caller declared, so a host built against a smaller
    /// `ReelStatus` (an older header) is never written past its end. Its `struct_size` is kept,
    /// and a message cut short by a smaller struct still ends in a NUL.
    pub struct StatusOut {
        ptr: *mut ReelStatus,
        local: ReelStatus,
        len: usize,
    }

    impl std::ops::Deref for StatusOut {
        type Target = ReelStatus;
        fn deref(&self) -> &ReelStatus {
            &self.local
        }
    }

    impl std::ops::DerefMut for StatusOut {
        fn deref_mut(&mut self) -> &mut ReelStatus {
            &mut self.local
        }
    }

    impl Drop for StatusOut {
        fn drop(&mut self) {
            let message_at = std::mem::offset_of!(ReelStatus, message);
            if self.len > message_at {
                let last = (self.len - message_at - 1).min(REEL_MESSAGE_LEN - 1);
                self.local.message[last] = 0;
            }
            // SAFETY: the caller's status is writable for the `struct_size` bytes it declared
            // (ABI contract) and `len` is at most that; `local` is ours, so they do not overlap.
            unsafe {
                std::ptr::copy_nonoverlapping(
                    &self.local as *const ReelStatus as *const u8,
                    self.ptr as *mut u8,
                    self.len,
                )
            };
        }
    }

    /// Reset the caller's status for a call: `None` when it is NULL.
    ///
    /// # Safety
    /// `status` must be null or point to a `ReelStatus` writable for the `struct_size` bytes
    /// its first field declares.
    unsafe fn status_mut(status: *mut ReelStatus) -> Option<StatusOut> {
        if status.is_null() {
            return None;
        }
        // SAFETY: a non-null status holds at least its first field (ABI contract); read it
        // unaligned, as a C caller's struct is not ours.
        let size = unsafe { std::ptr::addr_of!((*status).struct_size).read_unaligned() };
        let mut local = ReelStatus::new();
        local.struct_size = size;
        Some(StatusOut {
            ptr: status,
            local,
            len: (size as usize).min(std::mem::size_of::<ReelStatus>()),
        })
    }

    /// Refuse a call whose arguments are invalid before the plugin sees it: the status is
    /// reset like every call's and says why.
    ///
    /// # Safety
    /// As [`status_mut`].
    unsafe fn refuse(status: *mut ReelStatus, why: &str) -> i32 {
        // SAFETY: contract of this function.
        if let Some(mut st) = unsafe { status_mut(status) } {
            st.set_message(why);
        }
        REEL_E_INVALID_ARG
    }

    /// Run `f` on the handle behind `h`, catching panics and filling `status`.
    ///
    /// # Safety
    /// `h` must be null or a handle created by this SDK for type `T`; `status` null or valid.
    pub unsafe fn with_handle<T, R>(
        h: *mut std::ffi::c_void,
        status: *mut ReelStatus,
        f: impl FnOnce(&mut T, &mut Call) -> Result<R, Fault>,
        ok: impl FnOnce(R) -> Result<(), Fault>,
    ) -> i32 {
        // SAFETY: contract of this function.
        let Some(mut st) = (unsafe { status_mut(status) }) else {
            return REEL_E_INVALID_ARG;
        };
        // SAFETY: `h` was created by `Box::into_raw(Box<Handle<T>>)` in this module.
        let Some(handle) = (unsafe { (h as *mut Handle<T>).as_mut() }) else {
            st.set_message("null handle");
            return REEL_E_INVALID_ARG;
        };
        if handle.poisoned {
            st.set_message("handle poisoned by an earlier panic; close it");
            return REEL_E_POISONED;
        }
        let mut call = Call::default();
        let result = catch_unwind(AssertUnwindSafe(|| {
            let r = f(&mut handle.inner, &mut call);
            r.and_then(ok)
        }));
        st.elapsed_ns = call.elapsed_ns;
        st.flags |= call.flags;
        match result {
            Ok(Ok(())) => REEL_OK,
            Ok(Err(fault)) => {
                fault.fill(&mut st);
                fault.code
            }
            Err(p) => {
                handle.poisoned = true;
                st.set_message(&format!("plugin panicked: {}", panic_message(p.as_ref())));
                REEL_E_PANICKED
            }
        }
    }

    /// Read a C string argument.
    ///
    /// # Safety
    /// `s` must be null or a NUL-terminated string valid for the call.
    unsafe fn arg_str<'a>(s: *const c_char) -> Result<&'a str, Fault> {
        if s.is_null() {
            return Err(Fault::invalid("null string argument"));
        }
        // SAFETY: non-null and NUL terminated per the ABI contract.
        let c = unsafe { CStr::from_ptr(s) };
        c.to_str()
            .map_err(|_| Fault::invalid("string argument is not UTF-8"))
    }

    /// `library_open`.
    ///
    /// # Safety
    /// ABI contract: valid config string, out pointer and status.
    pub unsafe extern "C" fn library_open<L: Library>(
        config: *const c_char,
        out: *mut *mut ReelLibrary,
        status: *mut ReelStatus,
    ) -> i32 {
        // SAFETY: contract of this function.
        let Some(mut st) = (unsafe { status_mut(status) }) else {
            return REEL_E_INVALID_ARG;
        };
        if out.is_null() {
            st.set_message("null out pointer");
            return REEL_E_INVALID_ARG;
        }
        let mut call = Call::default();
        let r = catch_unwind(AssertUnwindSafe(|| {
            // SAFETY: contract of this function.
            let cfg = unsafe { arg_str(config) }?;
            L::open(cfg, &mut call)
        }));
        st.elapsed_ns = call.elapsed_ns;
        st.flags |= call.flags;
        match r {
            Ok(Ok(lib)) => {
                let h = Box::new(Handle {
                    inner: lib,
                    poisoned: false,
                });
                // SAFETY: `out` is non-null and writable per the contract.
                unsafe { *out = Box::into_raw(h) as *mut ReelLibrary };
                REEL_OK
            }
            Ok(Err(f)) => {
                f.fill(&mut st);
                f.code
            }
            Err(p) => {
                st.set_message(&format!("plugin panicked: {}", panic_message(p.as_ref())));
                REEL_E_PANICKED
            }
        }
    }

    /// `library_close`.
    ///
    /// # Safety
    /// `lib` must be null or a library handle from `library_open`, closed once.
    pub unsafe extern "C" fn library_close<L: Library>(lib: *mut ReelLibrary) {
        if lib.is_null() {
            return;
        }
        // SAFETY: created by Box::into_raw in library_open; ownership returns here once.
        let h = unsafe { Box::from_raw(lib as *mut Handle<L>) };
        let _ = catch_unwind(AssertUnwindSafe(move || drop(h)));
    }

    /// `library_inventory`.
    ///
    /// # Safety
    /// ABI contract.
    pub unsafe extern "C" fn library_inventory<L: Library>(
        lib: *mut ReelLibrary,
        elements: *mut ReelElement,
        capacity: u32,
        out_count: *mut u32,
        status: *mut ReelStatus,
    ) -> i32 {
        if out_count.is_null() || (elements.is_null() && capacity > 0) {
            // SAFETY: `status` is as the ABI contract of this function says.
            return unsafe {
                refuse(
                    status,
                    "library_inventory: out_count is NULL or (elements is NULL and capacity > 0)",
                )
            };
        }
        // SAFETY: contract of this function.
        unsafe {
            with_handle::<L, _>(
                lib as *mut _,
                status,
                |l, c| l.inventory(c),
                |els| {
                    *out_count = els.len() as u32;
                    if els.len() > capacity as usize {
                        return Err(Fault::code(
                            REEL_E_BUFFER_TOO_SMALL,
                            format!("{} elements, buffer holds {}", els.len(), capacity),
                        )
                        .with_residue(els.len() as i64));
                    }
                    for (i, e) in els.iter().enumerate() {
                        *elements.add(i) = e.to_c();
                    }
                    Ok(())
                },
            )
        }
    }

    /// `set_log` (ABI 1.2): the plugin's `tracing` events go to the host's callback.
    ///
    /// # Safety
    /// ABI contract: `log` NULL or a callback callable from any thread, `context` valid for as
    /// long as the plugin is loaded.
    pub unsafe extern "C" fn set_log(
        log: ReelLogFn,
        context: *mut std::ffi::c_void,
        max_level: u32,
    ) {
        let _ = std::panic::catch_unwind(|| crate::plugin_log::install(log, context, max_level));
    }

    /// `library_info` (ABI 1.1).
    ///
    /// # Safety
    /// ABI contract.
    pub unsafe extern "C" fn library_info<L: Library>(
        lib: *mut ReelLibrary,
        out: *mut ReelLibraryInfo,
        status: *mut ReelStatus,
    ) -> i32 {
        if out.is_null() {
            // SAFETY: `status` is as the ABI contract of this function says.
            return unsafe { refuse(status, "library_info: out is NULL") };
        }
        // SAFETY: contract of this function.
        unsafe {
            with_handle::<L, _>(
                lib as *mut _,
                status,
                |l, c| l.info(c),
                |i| {
                    let mut o = ReelLibraryInfo::new();
                    copy_cstr(&mut o.vendor, &i.vendor);
                    copy_cstr(&mut o.product, &i.product);
                    copy_cstr(&mut o.serial, &i.serial);
                    // Only as much as the caller allocated (an older caller's smaller struct).
                    let size =
                        ((*out).struct_size as usize).min(std::mem::size_of::<ReelLibraryInfo>());
                    o.struct_size = (*out).struct_size;
                    std::ptr::copy_nonoverlapping(
                        &o as *const _ as *const u8,
                        out as *mut u8,
                        size,
                    );
                    Ok(())
                },
            )
        }
    }

    /// `library_move`.
    ///
    /// # Safety
    /// ABI contract.
    pub unsafe extern "C" fn library_move<L: Library>(
        lib: *mut ReelLibrary,
        source: u32,
        destination: u32,
        status: *mut ReelStatus,
    ) -> i32 {
        // SAFETY: contract of this function.
        unsafe {
            with_handle::<L, _>(
                lib as *mut _,
                status,
                |l, c| l.move_medium(source, destination, c),
                Ok,
            )
        }
    }

    /// `library_import`.
    ///
    /// # Safety
    /// ABI contract.
    pub unsafe extern "C" fn library_import<L: Library>(
        lib: *mut ReelLibrary,
        ie: u32,
        slot: u32,
        status: *mut ReelStatus,
    ) -> i32 {
        // SAFETY: contract of this function.
        unsafe { with_handle::<L, _>(lib as *mut _, status, |l, c| l.import(ie, slot, c), Ok) }
    }

    /// `library_export`.
    ///
    /// # Safety
    /// ABI contract.
    pub unsafe extern "C" fn library_export<L: Library>(
        lib: *mut ReelLibrary,
        slot: u32,
        ie: u32,
        status: *mut ReelStatus,
    ) -> i32 {
        // SAFETY: contract of this function.
        unsafe { with_handle::<L, _>(lib as *mut _, status, |l, c| l.export(slot, ie, c), Ok) }
    }

    /// `control`.
    ///
    /// # Safety
    /// ABI contract.
    pub unsafe extern "C" fn control<L: Library>(
        lib: *mut ReelLibrary,
        request: *const c_char,
        response: *mut c_char,
        capacity: usize,
        out_len: *mut usize,
        status: *mut ReelStatus,
    ) -> i32 {
        if out_len.is_null() || (response.is_null() && capacity > 0) {
            // SAFETY: `status` is as the ABI contract of this function says.
            return unsafe {
                refuse(
                    status,
                    "control: out_len is NULL or (response is NULL and capacity > 0)",
                )
            };
        }
        // SAFETY: contract of this function.
        unsafe {
            with_handle::<L, _>(
                lib as *mut _,
                status,
                |l, c| {
                    let req = arg_str(request)?;
                    l.control(req, c)
                },
                |resp| {
                    if resp.len() + 1 > capacity {
                        // The capacity that then succeeds: the text and its NUL.
                        *out_len = resp.len() + 1;
                        return Err(Fault::code(
                            REEL_E_BUFFER_TOO_SMALL,
                            format!(
                                "response of {} bytes, buffer holds {}",
                                resp.len(),
                                capacity
                            ),
                        )
                        .with_residue(resp.len() as i64 + 1));
                    }
                    *out_len = resp.len();
                    std::ptr::copy_nonoverlapping(
                        resp.as_ptr() as *const c_char,
                        response,
                        resp.len(),
                    );
                    *response.add(resp.len()) = 0;
                    Ok(())
                },
            )
        }
    }

    /// `drive_open`.
    ///
    /// # Safety
    /// ABI contract.
    pub unsafe extern "C" fn drive_open<L: Library>(
        lib: *mut ReelLibrary,
        index: u32,
        out: *mut *mut ReelDrive,
        status: *mut ReelStatus,
    ) -> i32 {
        if out.is_null() {
            // SAFETY: `status` is as the ABI contract of this function says.
            return unsafe { refuse(status, "drive_open: out is NULL") };
        }
        // SAFETY: contract of this function.
        unsafe {
            with_handle::<L, _>(
                lib as *mut _,
                status,
                |l, c| l.open_drive(index, c),
                |d| {
                    let h = Box::new(Handle {
                        inner: d,
                        poisoned: false,
                    });
                    *out = Box::into_raw(h) as *mut ReelDrive;
                    Ok(())
                },
            )
        }
    }

    /// `drive_close`.
    ///
    /// # Safety
    /// `drive` null or a handle from `drive_open`, closed once.
    pub unsafe extern "C" fn drive_close<L: Library>(drive: *mut ReelDrive) {
        if drive.is_null() {
            return;
        }
        // SAFETY: created by Box::into_raw in drive_open; ownership returns here once.
        let h = unsafe { Box::from_raw(drive as *mut Handle<L::Drive>) };
        let _ = catch_unwind(AssertUnwindSafe(move || drop(h)));
    }

    macro_rules! drive_simple {
        ($name:ident, $method:ident) => {
            /// Trampoline for the drive call of the same name.
            ///
            /// # Safety
            /// ABI contract.
            pub unsafe extern "C" fn $name<L: Library>(
                drive: *mut ReelDrive,
                status: *mut ReelStatus,
            ) -> i32 {
                // SAFETY: contract of this function.
                unsafe {
                    with_handle::<L::Drive, _>(drive as *mut _, status, |d, c| d.$method(c), Ok)
                }
            }
        };
    }
    drive_simple!(drive_test_ready, test_ready);
    drive_simple!(drive_load, load);
    drive_simple!(drive_unload, unload);
    drive_simple!(drive_rewind, rewind);

    /// `drive_info`.
    ///
    /// # Safety
    /// ABI contract.
    pub unsafe extern "C" fn drive_info<L: Library>(
        drive: *mut ReelDrive,
        out: *mut ReelDriveInfo,
        status: *mut ReelStatus,
    ) -> i32 {
        if out.is_null() {
            // SAFETY: `status` is as the ABI contract of this function says.
            return unsafe { refuse(status, "drive_info: out is NULL") };
        }
        // SAFETY: contract of this function.
        unsafe {
            with_handle::<L::Drive, _>(
                drive as *mut _,
                status,
                |d, c| d.info(c),
                |i| {
                    let mut o = ReelDriveInfo::new();
                    copy_cstr(&mut o.vendor, &i.vendor);
                    copy_cstr(&mut o.product, &i.product);
                    copy_cstr(&mut o.serial, &i.serial);
                    o.max_record_bytes = i.max_record_bytes;
                    o.capabilities = i.capabilities.unwrap_or(L::CAPS) & L::CAPS;
                    let size =
                        ((*out).struct_size as usize).min(std::mem::size_of::<ReelDriveInfo>());
                    o.struct_size = (*out).struct_size;
                    std::ptr::copy_nonoverlapping(
                        &o as *const _ as *const u8,
                        out as *mut u8,
                        size,
                    );
                    Ok(())
                },
            )
        }
    }

    /// `drive_locate`.
    ///
    /// # Safety
    /// ABI contract.
    pub unsafe extern "C" fn drive_locate<L: Library>(
        drive: *mut ReelDrive,
        block: u64,
        status: *mut ReelStatus,
    ) -> i32 {
        // SAFETY: contract of this function.
        unsafe {
            with_handle::<L::Drive, _>(drive as *mut _, status, |d, c| d.locate(block, c), Ok)
        }
    }

    /// `drive_space`.
    ///
    /// # Safety
    /// ABI contract.
    pub unsafe extern "C" fn drive_space<L: Library>(
        drive: *mut ReelDrive,
        kind: u32,
        count: i64,
        status: *mut ReelStatus,
    ) -> i32 {
        // SAFETY: contract of this function.
        unsafe {
            with_handle::<L::Drive, _>(drive as *mut _, status, |d, c| d.space(kind, count, c), Ok)
        }
    }

    /// `drive_read_position`.
    ///
    /// # Safety
    /// ABI contract.
    pub unsafe extern "C" fn drive_read_position<L: Library>(
        drive: *mut ReelDrive,
        out: *mut ReelPosition,
        status: *mut ReelStatus,
    ) -> i32 {
        if out.is_null() {
            // SAFETY: `status` is as the ABI contract of this function says.
            return unsafe { refuse(status, "drive_read_position: out is NULL") };
        }
        // SAFETY: contract of this function.
        unsafe {
            with_handle::<L::Drive, _>(
                drive as *mut _,
                status,
                |d, c| d.read_position(c),
                |p| {
                    *out = p;
                    Ok(())
                },
            )
        }
    }

    /// `drive_write_record`.
    ///
    /// # Safety
    /// ABI contract: `data` valid for `len` bytes.
    pub unsafe extern "C" fn drive_write_record<L: Library>(
        drive: *mut ReelDrive,
        data: *const u8,
        len: usize,
        crc: u32,
        flags: u32,
        status: *mut ReelStatus,
    ) -> i32 {
        if data.is_null() && len > 0 {
            // SAFETY: `status` is as the ABI contract of this function says.
            return unsafe { refuse(status, "drive_write_record: data is NULL and len > 0") };
        }
        let buf: &[u8] = if len == 0 {
            &[]
        } else {
            // SAFETY: non-null and valid for `len` bytes per the contract.
            unsafe { std::slice::from_raw_parts(data, len) }
        };
        let crc = (flags & REEL_WRITE_HAS_CRC != 0).then_some(crc);
        // SAFETY: contract of this function.
        unsafe {
            with_handle::<L::Drive, _>(
                drive as *mut _,
                status,
                |d, c| d.write_record(buf, crc, c),
                Ok,
            )
        }
    }

    /// `drive_write_records` (ABI 1.4).
    ///
    /// # Safety
    /// ABI contract: `records` valid for `count` elements, each record's `data` valid for its
    /// `len` bytes; `out_written` valid for a write.
    pub unsafe extern "C" fn drive_write_records<L: Library>(
        drive: *mut ReelDrive,
        records: *const ReelWriteRecord,
        count: usize,
        out_written: *mut usize,
        status: *mut ReelStatus,
    ) -> i32 {
        if out_written.is_null() || (records.is_null() && count > 0) {
            // SAFETY: `status` is as the ABI contract of this function says.
            return unsafe {
                refuse(
                    status,
                    "drive_write_records: out_written is NULL, or records is NULL and count > 0",
                )
            };
        }
        // SAFETY: valid for a write per the contract; nothing is written yet.
        unsafe { *out_written = 0 };
        let raw: &[ReelWriteRecord] = if count == 0 {
            &[]
        } else {
            // SAFETY: non-null and valid for `count` elements per the contract.
            unsafe { std::slice::from_raw_parts(records, count) }
        };
        let mut list = Vec::with_capacity(raw.len());
        for r in raw {
            if r.data.is_null() && r.len > 0 {
                // SAFETY: `status` is as the ABI contract of this function says.
                return unsafe { refuse(status, "drive_write_records: a record's data is NULL") };
            }
            let data: &[u8] = if r.len == 0 {
                &[]
            } else {
                // SAFETY: non-null and valid for `len` bytes per the contract.
                unsafe { std::slice::from_raw_parts(r.data, r.len) }
            };
            let crc = (r.flags & REEL_WRITE_HAS_CRC != 0).then_some(r.crc);
            list.push(WriteRecord { data, crc });
        }
        let mut written = 0;
        // SAFETY: contract of this function.
        let rc = unsafe {
            with_handle::<L::Drive, _>(
                drive as *mut _,
                status,
                |d, c| {
                    let (n, r) = d.write_records(&list, c);
                    written = n.min(list.len());
                    r
                },
                Ok,
            )
        };
        // SAFETY: valid for a write per the contract.
        unsafe { *out_written = written };
        rc
    }

    /// `drive_write_filemarks`.
    ///
    /// # Safety
    /// ABI contract.
    pub unsafe extern "C" fn drive_write_filemarks<L: Library>(
        drive: *mut ReelDrive,
        count: u32,
        immediate: u32,
        status: *mut ReelStatus,
    ) -> i32 {
        // SAFETY: contract of this function.
        unsafe {
            with_handle::<L::Drive, _>(
                drive as *mut _,
                status,
                |d, c| d.write_filemarks(count, immediate != 0, c),
                Ok,
            )
        }
    }

    /// `drive_read_record`.
    ///
    /// # Safety
    /// ABI contract: `buffer` writable for `capacity` bytes.
    pub unsafe extern "C" fn drive_read_record<L: Library>(
        drive: *mut ReelDrive,
        buffer: *mut u8,
        capacity: usize,
        out_len: *mut usize,
        out_crc: *mut u32,
        status: *mut ReelStatus,
    ) -> i32 {
        if out_len.is_null() || (buffer.is_null() && capacity > 0) {
            // SAFETY: `status` is as the ABI contract of this function says.
            return unsafe {
                refuse(
                    status,
                    "drive_read_record: out_len is NULL or (buffer is NULL and capacity > 0)",
                )
            };
        }
        // SAFETY: out_len is non-null per the check above.
        unsafe { *out_len = 0 };
        let buf: &mut [u8] = if capacity == 0 {
            &mut []
        } else {
            // SAFETY: non-null and writable for `capacity` bytes per the contract.
            unsafe { std::slice::from_raw_parts_mut(buffer, capacity) }
        };
        // SAFETY: contract of this function.
        unsafe {
            with_handle::<L::Drive, _>(
                drive as *mut _,
                status,
                |d, c| match d.read_record(buf, c) {
                    Ok(r) => Ok(r),
                    Err(f) => {
                        *out_len = f.transferred.min(capacity);
                        if let (Some(crc), false) = (f.crc, out_crc.is_null()) {
                            *out_crc = crc;
                        }
                        Err(f)
                    }
                },
                |r| {
                    *out_len = r.len.min(capacity);
                    if let (Some(crc), false) = (r.crc, out_crc.is_null()) {
                        *out_crc = crc;
                    }
                    Ok(())
                },
            )
        }
    }

    /// `drive_set_lbp`.
    ///
    /// # Safety
    /// ABI contract.
    pub unsafe extern "C" fn drive_set_lbp<L: Library>(
        drive: *mut ReelDrive,
        mode: u32,
        status: *mut ReelStatus,
    ) -> i32 {
        // SAFETY: contract of this function.
        unsafe {
            with_handle::<L::Drive, _>(drive as *mut _, status, |d, c| d.set_lbp(mode, c), Ok)
        }
    }

    /// `drive_mam_read`.
    ///
    /// # Safety
    /// ABI contract.
    pub unsafe extern "C" fn drive_mam_read<L: Library>(
        drive: *mut ReelDrive,
        attribute: u16,
        buffer: *mut u8,
        capacity: usize,
        out_len: *mut usize,
        status: *mut ReelStatus,
    ) -> i32 {
        if out_len.is_null() || (buffer.is_null() && capacity > 0) {
            // SAFETY: `status` is as the ABI contract of this function says.
            return unsafe {
                refuse(
                    status,
                    "drive_mam_read: out_len is NULL or (buffer is NULL and capacity > 0)",
                )
            };
        }
        // SAFETY: contract of this function.
        unsafe {
            with_handle::<L::Drive, _>(
                drive as *mut _,
                status,
                |d, c| d.mam_read(attribute, c),
                |v| {
                    *out_len = v.len();
                    if v.len() > capacity {
                        return Err(Fault::code(
                            REEL_E_BUFFER_TOO_SMALL,
                            format!("attribute of {} bytes, buffer holds {}", v.len(), capacity),
                        )
                        .with_residue(v.len() as i64));
                    }
                    std::ptr::copy_nonoverlapping(v.as_ptr(), buffer, v.len());
                    Ok(())
                },
            )
        }
    }

    /// `drive_mam_write`.
    ///
    /// # Safety
    /// ABI contract.
    pub unsafe extern "C" fn drive_mam_write<L: Library>(
        drive: *mut ReelDrive,
        attribute: u16,
        data: *const u8,
        len: usize,
        status: *mut ReelStatus,
    ) -> i32 {
        if data.is_null() && len > 0 {
            // SAFETY: `status` is as the ABI contract of this function says.
            return unsafe { refuse(status, "drive_mam_write: data is NULL and len > 0") };
        }
        let buf: &[u8] = if len == 0 {
            &[]
        } else {
            // SAFETY: non-null and valid for `len` bytes per the contract.
            unsafe { std::slice::from_raw_parts(data, len) }
        };
        // SAFETY: contract of this function.
        unsafe {
            with_handle::<L::Drive, _>(
                drive as *mut _,
                status,
                |d, c| d.mam_write(attribute, buf, c),
                Ok,
            )
        }
    }

    /// `drive_statistics`.
    ///
    /// # Safety
    /// ABI contract.
    pub unsafe extern "C" fn drive_statistics<L: Library>(
        drive: *mut ReelDrive,
        out: *mut ReelDriveStats,
        status: *mut ReelStatus,
    ) -> i32 {
        if out.is_null() {
            // SAFETY: `status` is as the ABI contract of this function says.
            return unsafe { refuse(status, "drive_statistics: out is NULL") };
        }
        // SAFETY: contract of this function.
        unsafe {
            with_handle::<L::Drive, _>(
                drive as *mut _,
                status,
                |d, c| d.statistics(c),
                |mut s| {
                    let caller = (*out).struct_size;
                    s.struct_size = caller;
                    let size = (caller as usize).min(std::mem::size_of::<ReelDriveStats>());
                    std::ptr::copy_nonoverlapping(
                        &s as *const _ as *const u8,
                        out as *mut u8,
                        size,
                    );
                    Ok(())
                },
            )
        }
    }

    /// `drive_tape_alerts`.
    ///
    /// # Safety
    /// ABI contract.
    pub unsafe extern "C" fn drive_tape_alerts<L: Library>(
        drive: *mut ReelDrive,
        out: *mut u64,
        status: *mut ReelStatus,
    ) -> i32 {
        if out.is_null() {
            // SAFETY: `status` is as the ABI contract of this function says.
            return unsafe { refuse(status, "drive_tape_alerts: out is NULL") };
        }
        // SAFETY: contract of this function.
        unsafe {
            with_handle::<L::Drive, _>(
                drive as *mut _,
                status,
                |d, c| d.tape_alerts(c),
                |a| {
                    *out = a;
                    Ok(())
                },
            )
        }
    }

    /// `drive_geometry`.
    ///
    /// # Safety
    /// ABI contract.
    pub unsafe extern "C" fn drive_geometry<L: Library>(
        drive: *mut ReelDrive,
        out: *mut ReelGeometry,
        eowp: *mut u64,
        capacity: u32,
        status: *mut ReelStatus,
    ) -> i32 {
        if out.is_null() || (eowp.is_null() && capacity > 0) {
            // SAFETY: `status` is as the ABI contract of this function says.
            return unsafe {
                refuse(
                    status,
                    "drive_geometry: out is NULL or (eowp is NULL and capacity > 0)",
                )
            };
        }
        // SAFETY: contract of this function.
        unsafe {
            with_handle::<L::Drive, _>(
                drive as *mut _,
                status,
                |d, c| d.geometry(c),
                |g| {
                    let n = g.eowp.len().min(capacity as usize);
                    for (i, b) in g.eowp.iter().take(n).enumerate() {
                        *eowp.add(i) = *b;
                    }
                    let caller = (*out).struct_size;
                    let o = ReelGeometry {
                        struct_size: caller,
                        wraps: g.wraps,
                        bands: g.bands,
                        reserved: 0,
                        min_lpos: g.min_lpos,
                        max_lpos: g.max_lpos,
                        capacity_bytes: g.capacity_bytes,
                        eowp_count: n as u32,
                        reserved2: 0,
                    };
                    let size = (caller as usize).min(std::mem::size_of::<ReelGeometry>());
                    std::ptr::copy_nonoverlapping(
                        &o as *const _ as *const u8,
                        out as *mut u8,
                        size,
                    );
                    Ok(())
                },
            )
        }
    }

    /// `drive_rao`.
    ///
    /// # Safety
    /// ABI contract: `extents` valid for `count`, `out_order` writable for `count`.
    pub unsafe extern "C" fn drive_rao<L: Library>(
        drive: *mut ReelDrive,
        extents: *const ReelExtent,
        count: u32,
        out_order: *mut u32,
        status: *mut ReelStatus,
    ) -> i32 {
        if count > 0 && (extents.is_null() || out_order.is_null()) {
            // SAFETY: `status` is as the ABI contract of this function says.
            return unsafe {
                refuse(
                    status,
                    "drive_rao: count > 0 and (extents is NULL or out_order is NULL)",
                )
            };
        }
        let ext: &[ReelExtent] = if count == 0 {
            &[]
        } else {
            // SAFETY: valid for `count` elements per the contract.
            unsafe { std::slice::from_raw_parts(extents, count as usize) }
        };
        // SAFETY: contract of this function.
        unsafe {
            with_handle::<L::Drive, _>(
                drive as *mut _,
                status,
                |d, c| d.rao(ext, c),
                |order| {
                    if order.len() != count as usize {
                        return Err(Fault::internal(format!(
                            "plugin RAO returned {} entries for {} extents",
                            order.len(),
                            count
                        )));
                    }
                    for (i, o) in order.iter().enumerate() {
                        *out_order.add(i) = *o;
                    }
                    Ok(())
                },
            )
        }
    }
}

/// The calling crate's version (`CARGO_PKG_VERSION`) as a `&'static CStr`, for
/// [`Library::VERSION`]: the version a plugin reports is the one its package was built as.
///
/// ```ignore
/// const VERSION: &'static CStr = reel_plugin_abi::crate_version!();
/// ```
#[macro_export]
macro_rules! crate_version {
    () => {
        match ::std::ffi::CStr::from_bytes_with_nul(
            concat!(env!("CARGO_PKG_VERSION"), "\0").as_bytes(),
        ) {
            Ok(v) => v,
            Err(_) => c"unknown",
        }
    };
}

/// Export a [`Library`] implementation as the `reel_plugin_v1` entry symbol of a cdylib.
///
/// ```ignore
/// reel_plugin_abi::export_plugin!(my_plugin::MyLibrary);
/// ```
#[macro_export]
macro_rules! export_plugin {
    ($lib:ty) => {
        #[doc(hidden)]
        pub static REEL_PLUGIN_TABLE_V1: $crate::types::ReelPluginV1 =
            $crate::sdk::plugin_table::<$lib>();

        /// The ABI v1 entry point: returns the static plugin table.
        #[unsafe(no_mangle)]
        pub extern "C" fn reel_plugin_v1() -> *const $crate::types::ReelPluginV1 {
            &REEL_PLUGIN_TABLE_V1
        }
    };
}

/// Build the v1 table for a library type; used by [`export_plugin!`](crate::export_plugin).
pub const fn plugin_table<L: Library>() -> ReelPluginV1 {
    use trampoline as t;
    ReelPluginV1 {
        struct_size: std::mem::size_of::<ReelPluginV1>() as u32,
        abi_major: REEL_ABI_MAJOR,
        abi_minor: REEL_ABI_MINOR,
        name: L::NAME.as_ptr(),
        version: L::VERSION.as_ptr(),
        caps: L::CAPS,
        thread_model: REEL_THREAD_SERIALIZE_PER_HANDLE,
        reserved: 0,
        library_open: Some(t::library_open::<L>),
        library_close: Some(t::library_close::<L>),
        library_inventory: Some(t::library_inventory::<L>),
        library_move: Some(t::library_move::<L>),
        library_import: Some(t::library_import::<L>),
        library_export: Some(t::library_export::<L>),
        control: Some(t::control::<L>),
        drive_open: Some(t::drive_open::<L>),
        drive_close: Some(t::drive_close::<L>),
        drive_info: Some(t::drive_info::<L>),
        drive_test_ready: Some(t::drive_test_ready::<L>),
        drive_load: Some(t::drive_load::<L>),
        drive_unload: Some(t::drive_unload::<L>),
        drive_rewind: Some(t::drive_rewind::<L>),
        drive_locate: Some(t::drive_locate::<L>),
        drive_space: Some(t::drive_space::<L>),
        drive_read_position: Some(t::drive_read_position::<L>),
        drive_write_record: Some(t::drive_write_record::<L>),
        drive_write_filemarks: Some(t::drive_write_filemarks::<L>),
        drive_read_record: Some(t::drive_read_record::<L>),
        drive_set_lbp: Some(t::drive_set_lbp::<L>),
        drive_mam_read: Some(t::drive_mam_read::<L>),
        drive_mam_write: Some(t::drive_mam_write::<L>),
        drive_statistics: Some(t::drive_statistics::<L>),
        drive_tape_alerts: Some(t::drive_tape_alerts::<L>),
        drive_geometry: Some(t::drive_geometry::<L>),
        drive_rao: Some(t::drive_rao::<L>),
        library_info: Some(t::library_info::<L>),
        set_log: Some(t::set_log),
        drive_write_records: Some(t::drive_write_records::<L>),
    }
}
