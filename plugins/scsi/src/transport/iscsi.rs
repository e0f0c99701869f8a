//! iSCSI through libiscsi, loaded at run time with `libloading` so that building reel needs no
//! libiscsi: only hosts that use `iscsi://` devices need the Debian package `libiscsi7`.
//!
//! A handful of hand-written FFI declarations cover the functions called. The leading part of
//! `struct scsi_task` is declared here (libiscsi 1.19, x86_64) and checked against the library
//! at load time: a task is created and the fields this module reads back must hold what was
//! passed, so a libiscsi with another layout is refused instead of misread.

use std::ffi::{CStr, CString, c_char, c_int, c_uchar, c_void};
use std::sync::OnceLock;
use std::time::Duration;

use reel_scsi_protocol::command::{Completion, DataDir};

use super::{Transport, TransportError};

/// The shared library opened at run time.
pub const LIBISCSI: &str = "libiscsi.so.7";
/// Debian package that ships [`LIBISCSI`].
pub const LIBISCSI_PACKAGE: &str = "libiscsi7";

#[repr(C)]
struct IscsiContext {
    _p: [u8; 0],
}

#[repr(C)]
struct ScsiIovec {
    base: *mut c_void,
    len: usize,
}

#[repr(C)]
struct IscsiData {
    size: usize,
    data: *mut c_uchar,
}

/// Leading part of `struct scsi_task` (libiscsi 1.19, x86_64): status 0, cdb_size 4,
/// xfer_dir 8, expxferlen 12, cdb 16, residual_status 32, residual 40, sense 48, datain 64.
#[repr(C)]
struct ScsiTask {
    status: c_int,
    cdb_size: c_int,
    xfer_dir: c_int,
    expxferlen: c_int,
    cdb: [c_uchar; 16],
    residual_status: c_int,
    residual: usize,
    sense: [u8; 16],
    datain_size: c_int,
    datain_data: *mut c_uchar,
}

const XFER_NONE: c_int = 0;
const XFER_READ: c_int = 1;
const XFER_WRITE: c_int = 2;
const SESSION_NORMAL: c_int = 2;
const HEADER_DIGEST_NONE: c_int = 0;
const RESIDUAL_UNDERFLOW: c_int = 1;
const STATUS_ERROR: c_int = 0x0f00_0001;
const STATUS_TIMEOUT: c_int = 0x0f00_0002;
const STATUS_CANCELLED: c_int = 0x0f00_0000;

type CreateContext = unsafe extern "C" fn(*const c_char) -> *mut IscsiContext;
type DestroyContext = unsafe extern "C" fn(*mut IscsiContext) -> c_int;
type SetString = unsafe extern "C" fn(*mut IscsiContext, *const c_char) -> c_int;
type SetInt = unsafe extern "C" fn(*mut IscsiContext, c_int) -> c_int;
type FullConnect = unsafe extern "C" fn(*mut IscsiContext, *const c_char, c_int) -> c_int;
type Logout = unsafe extern "C" fn(*mut IscsiContext) -> c_int;
type GetError = unsafe extern "C" fn(*mut IscsiContext) -> *const c_char;
type CreateTask = unsafe extern "C" fn(c_int, *mut c_uchar, c_int, c_int) -> *mut ScsiTask;
type FreeTask = unsafe extern "C" fn(*mut ScsiTask);
type SetIovIn = unsafe extern "C" fn(*mut ScsiTask, *mut ScsiIovec, c_int);
type CommandSync =
    unsafe extern "C" fn(*mut IscsiContext, c_int, *mut ScsiTask, *mut IscsiData) -> *mut ScsiTask;

/// The libiscsi functions this transport calls.
struct Api {
    create_context: CreateContext,
    destroy_context: DestroyContext,
    set_targetname: SetString,
    set_session_type: SetInt,
    set_header_digest: SetInt,
    set_timeout: SetInt,
    full_connect_sync: FullConnect,
    logout_sync: Logout,
    get_error: GetError,
    create_task: CreateTask,
    free_task: FreeTask,
    set_iov_in: SetIovIn,
    command_sync: CommandSync,
    _lib: libloading::Library,
}

static API: OnceLock<Result<Api, String>> = OnceLock::new();

fn load_api() -> Result<Api, String> {
    load_api_from(LIBISCSI)
}

fn load_api_from(file: &str) -> Result<Api, String> {
    // SAFETY: loading libiscsi runs its initialisers, which have no preconditions.
    let lib = unsafe { libloading::Library::new(file) }.map_err(|e| e.to_string())?;
    macro_rules! sym {
        ($name:literal, $ty:ty) => {{
            // SAFETY: the symbol is declared with the signature of libiscsi's header.
            let s: libloading::Symbol<$ty> = unsafe { lib.get($name) }
                .map_err(|e| format!("{}: {e}", String::from_utf8_lossy($name)))?;
            *s
        }};
    }
    let api = Api {
        create_context: sym!(b"iscsi_create_context\0", CreateContext),
        destroy_context: sym!(b"iscsi_destroy_context\0", DestroyContext),
        set_targetname: sym!(b"iscsi_set_targetname\0", SetString),
        set_session_type: sym!(b"iscsi_set_session_type\0", SetInt),
        set_header_digest: sym!(b"iscsi_set_header_digest\0", SetInt),
        set_timeout: sym!(b"iscsi_set_timeout\0", SetInt),
        full_connect_sync: sym!(b"iscsi_full_connect_sync\0", FullConnect),
        logout_sync: sym!(b"iscsi_logout_sync\0", Logout),
        get_error: sym!(b"iscsi_get_error\0", GetError),
        create_task: sym!(b"scsi_create_task\0", CreateTask),
        free_task: sym!(b"scsi_free_scsi_task\0", FreeTask),
        set_iov_in: sym!(b"scsi_task_set_iov_in\0", SetIovIn),
        command_sync: sym!(b"iscsi_scsi_command_sync\0", CommandSync),
        _lib: lib,
    };
    check_layout(&api)?;
    Ok(api)
}

/// Create a task and read back the fields whose offsets this module assumes.
fn check_layout(api: &Api) -> Result<(), String> {
    let mut cdb = [0x12u8, 0x01, 0x80, 0x00, 0xFC, 0x00];
    // SAFETY: cdb is valid for 6 bytes; the task is freed below.
    let t = unsafe { (api.create_task)(6, cdb.as_mut_ptr(), XFER_READ, 252) };
    if t.is_null() {
        return Err("scsi_create_task returned NULL".to_string());
    }
    // SAFETY: t is a live task returned by libiscsi.
    let ok = unsafe {
        let task = &*t;
        task.cdb_size == 6
            && task.xfer_dir == XFER_READ
            && task.expxferlen == 252
            && task.cdb[..6] == cdb
    };
    // SAFETY: t came from scsi_create_task.
    unsafe { (api.free_task)(t) };
    if ok {
        Ok(())
    } else {
        Err("struct scsi_task layout differs from libiscsi 1.19; this reel build does not support this libiscsi".to_string())
    }
}

fn api() -> Result<&'static Api, TransportError> {
    API.get_or_init(load_api)
        .as_ref()
        .map_err(|detail| TransportError::LibraryMissing {
            library: LIBISCSI,
            package: LIBISCSI_PACKAGE,
            detail: detail.clone(),
        })
}

/// Parts of an `iscsi://HOST:PORT/TARGET-IQN/LUN` address.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct IscsiAddress {
    /// `host:port` (port 3260 added when missing).
    pub portal: String,
    /// Target IQN.
    pub target: String,
    /// Logical unit number.
    pub lun: i32,
}

impl IscsiAddress {
    /// Parse an address.
    pub fn parse(url: &str) -> Result<IscsiAddress, TransportError> {
        let bad = |reason: &str| TransportError::BadAddress {
            address: url.to_string(),
            reason: format!("{reason}; expected iscsi://HOST:PORT/TARGET-IQN/LUN"),
        };
        let rest = url
            .strip_prefix("iscsi://")
            .ok_or_else(|| bad("missing iscsi:// scheme"))?;
        let (portal, path) = rest.split_once('/').ok_or_else(|| bad("no target"))?;
        let (target, lun) = path.rsplit_once('/').ok_or_else(|| bad("no LUN"))?;
        if portal.is_empty() || target.is_empty() {
            return Err(bad("empty portal or target"));
        }
        let lun: i32 = lun.parse().map_err(|_| bad("LUN is not a number"))?;
        if !(0..=16383).contains(&lun) {
            return Err(bad("LUN out of range 0..16383"));
        }
        let portal = if portal.contains(':') {
            portal.to_string()
        } else {
            format!("{portal}:3260")
        };
        Ok(IscsiAddress {
            portal,
            target: target.to_string(),
            lun,
        })
    }
}

/// One iSCSI session to one logical unit.
pub struct IscsiTransport {
    url: String,
    lun: i32,
    ctx: *mut IscsiContext,
    api: &'static Api,
    timeout_secs: c_int,
}

// SAFETY: the libiscsi context is owned by this value and used by one thread at a time
// (`&mut self` on every call); libiscsi keeps no thread-local state for it.
unsafe impl Send for IscsiTransport {}

impl IscsiTransport {
    /// Log in to the target and address the LUN.
    pub fn connect(url: &str, initiator: &str) -> Result<IscsiTransport, TransportError> {
        let addr = IscsiAddress::parse(url)?;
        let api = api()?;
        let cstr = |s: &str| {
            CString::new(s).map_err(|_| TransportError::BadAddress {
                address: url.to_string(),
                reason: "contains a NUL byte".to_string(),
            })
        };
        let ini = cstr(initiator)?;
        let target = cstr(&addr.target)?;
        let portal = cstr(&addr.portal)?;
        // SAFETY: ini is a valid C string for the call.
        let ctx = unsafe { (api.create_context)(ini.as_ptr()) };
        if ctx.is_null() {
            return Err(TransportError::Session {
                device: url.to_string(),
                message: "iscsi_create_context failed (out of memory or bad initiator name)"
                    .to_string(),
            });
        }
        let t = IscsiTransport {
            url: url.to_string(),
            lun: addr.lun,
            ctx,
            api,
            timeout_secs: 0,
        };
        // SAFETY: ctx is live; the strings outlive the calls.
        let rc = unsafe {
            (api.set_targetname)(ctx, target.as_ptr());
            (api.set_session_type)(ctx, SESSION_NORMAL);
            (api.set_header_digest)(ctx, HEADER_DIGEST_NONE);
            (api.set_timeout)(ctx, 30);
            (api.full_connect_sync)(ctx, portal.as_ptr(), addr.lun)
        };
        if rc != 0 {
            return Err(TransportError::Session {
                device: url.to_string(),
                message: format!(
                    "login to {} failed: {}; is the target up and the IQN right?",
                    addr.portal,
                    t.last_error()
                ),
            });
        }
        Ok(t)
    }

    fn last_error(&self) -> String {
        // SAFETY: ctx is live; libiscsi returns a NUL-terminated string owned by the context.
        let p = unsafe { (self.api.get_error)(self.ctx) };
        if p.is_null() {
            return "unknown error".to_string();
        }
        // SAFETY: non-null, NUL terminated, valid until the next libiscsi call.
        unsafe { CStr::from_ptr(p) }.to_string_lossy().into_owned()
    }
}

impl Drop for IscsiTransport {
    fn drop(&mut self) {
        // SAFETY: ctx is live and dropped once.
        unsafe {
            (self.api.logout_sync)(self.ctx);
            (self.api.destroy_context)(self.ctx);
        }
    }
}

impl Transport for IscsiTransport {
    fn execute(
        &mut self,
        cdb: &[u8],
        mut data: DataDir<'_>,
        timeout: Duration,
    ) -> Result<Completion, TransportError> {
        let len = data.len();
        let xfer_len = c_int::try_from(len).map_err(|_| TransportError::TooLarge {
            device: self.url.clone(),
            len,
            max: c_int::MAX as usize,
        })?;
        let secs = c_int::try_from(timeout.as_secs().max(1)).unwrap_or(c_int::MAX);
        if secs != self.timeout_secs {
            // SAFETY: ctx is live.
            unsafe { (self.api.set_timeout)(self.ctx, secs) };
            self.timeout_secs = secs;
        }
        let mut cdb_buf = [0u8; 16];
        let cdb_len = cdb.len().min(16);
        cdb_buf[..cdb_len].copy_from_slice(&cdb[..cdb_len]);
        let (dir, ptr) = match &mut data {
            DataDir::None => (XFER_NONE, std::ptr::null_mut()),
            DataDir::In(b) => (XFER_READ, b.as_mut_ptr()),
            DataDir::Out(b) => (XFER_WRITE, b.as_ptr() as *mut u8),
        };
        // SAFETY: cdb_buf is valid for cdb_len bytes (libiscsi copies it).
        let task = unsafe {
            (self.api.create_task)(cdb_len as c_int, cdb_buf.as_mut_ptr(), dir, xfer_len)
        };
        if task.is_null() {
            return Err(TransportError::Session {
                device: self.url.clone(),
                message: "scsi_create_task failed (out of memory)".to_string(),
            });
        }
        let mut iov = ScsiIovec {
            base: ptr as *mut c_void,
            len,
        };
        let mut out = IscsiData {
            size: len,
            data: ptr,
        };
        // SAFETY: task is live; iov and out point at the caller's buffer, which outlives the
        // synchronous command. Data-in goes straight into the caller's buffer (so the data of
        // an ILI or filemark read is kept even on CHECK CONDITION).
        let r = unsafe {
            if dir == XFER_READ {
                (self.api.set_iov_in)(task, &mut iov, 1);
            }
            let d = if dir == XFER_WRITE {
                &mut out as *mut IscsiData
            } else {
                std::ptr::null_mut()
            };
            (self.api.command_sync)(self.ctx, self.lun, task, d)
        };
        // SAFETY: task is live until freed at the end of this block.
        let result = unsafe {
            let t = &*task;
            if r.is_null() || t.status == STATUS_ERROR || t.status == STATUS_CANCELLED {
                Err(TransportError::Session {
                    device: self.url.clone(),
                    message: format!(
                        "command {:#04x} failed: {}",
                        cdb.first().copied().unwrap_or(0),
                        self.last_error()
                    ),
                })
            } else if t.status == STATUS_TIMEOUT {
                Err(TransportError::Timeout {
                    device: self.url.clone(),
                    opcode: cdb.first().copied().unwrap_or(0),
                    secs: timeout.as_secs(),
                })
            } else {
                let residual = if t.residual_status == RESIDUAL_UNDERFLOW {
                    t.residual
                } else {
                    0
                };
                let mut sense = Vec::new();
                if t.status == c_int::from(reel_scsi_protocol::command::STATUS_CHECK_CONDITION)
                    && t.datain_size > 2
                    && !t.datain_data.is_null()
                {
                    // libiscsi leaves the raw sense (2-byte length, then sense) in datain.
                    let raw = std::slice::from_raw_parts(t.datain_data, t.datain_size as usize);
                    let n = usize::from(u16::from_be_bytes([raw[0], raw[1]])).min(raw.len() - 2);
                    sense = raw[2..2 + n].to_vec();
                }
                Ok(Completion {
                    status: (t.status & 0xFF) as u8,
                    sense,
                    transferred: len.saturating_sub(residual),
                })
            }
        };
        // SAFETY: task came from scsi_create_task and is freed once.
        unsafe { (self.api.free_task)(task) };
        result
    }

    fn describe(&self) -> String {
        self.url.clone()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_iscsi_addresses() {
        let a = IscsiAddress::parse("iscsi://127.0.0.1:3270/iqn.2026-11.test:reel/3").unwrap();
        assert_eq!(a.portal, "127.0.0.1:3270");
        assert_eq!(a.target, "iqn.2026-11.test:reel");
        assert_eq!(a.lun, 3);
        let b = IscsiAddress::parse("iscsi://tapehost/iqn.x:y/0").unwrap();
        assert_eq!(b.portal, "tapehost:3260");
        for bad in [
            "iscsi://h:1/iqn",
            "iscsi://h:1/iqn/x",
            "iscsi:///iqn/1",
            "http://h/iqn/1",
            "iscsi://h:1/iqn/99999",
        ] {
            let e = IscsiAddress::parse(bad).unwrap_err().to_string();
            assert!(e.contains("iscsi://HOST:PORT"), "{bad}: {e}");
        }
    }

    #[test]
    fn task_prefix_layout() {
        let t = std::mem::MaybeUninit::<ScsiTask>::uninit();
        let base = t.as_ptr() as usize;
        // SAFETY: only field addresses are computed, nothing is read.
        let (rs, r, s, d) = unsafe {
            (
                std::ptr::addr_of!((*t.as_ptr()).residual_status) as usize,
                std::ptr::addr_of!((*t.as_ptr()).residual) as usize,
                std::ptr::addr_of!((*t.as_ptr()).sense) as usize,
                std::ptr::addr_of!((*t.as_ptr()).datain_data) as usize,
            )
        };
        assert_eq!((rs - base, r - base, s - base, d - base), (32, 40, 48, 72));
    }

    #[test]
    fn a_missing_library_is_an_error_not_a_crash() {
        let Err(e) = load_api_from("libiscsi-reel-test-missing.so.7") else {
            panic!("loaded a library that does not exist");
        };
        assert!(e.contains("libiscsi-reel-test-missing.so.7"), "{e}");
    }

    #[test]
    fn the_installed_libiscsi_passes_the_layout_check() {
        // Only where libiscsi is installed (the rig); elsewhere there is nothing to check.
        if std::path::Path::new("/usr/lib/x86_64-linux-gnu/libiscsi.so.7").exists()
            && let Err(e) = load_api()
        {
            panic!("libiscsi is installed but refused: {e}");
        }
    }

    #[test]
    fn missing_library_error_names_the_package() {
        let e = TransportError::LibraryMissing {
            library: LIBISCSI,
            package: LIBISCSI_PACKAGE,
            detail: "not found".into(),
        };
        let s = e.to_string();
        assert!(
            s.contains("libiscsi.so.7") && s.contains("apt-get install libiscsi7"),
            "{s}"
        );
    }
}
