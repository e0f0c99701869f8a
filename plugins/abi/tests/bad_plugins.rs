//! Bad plugins get clear errors naming the file and the reason, and the host survives: not a
//! shared library, no entry symbol, unknown major version, struct_size too small, and a plugin
//! that panics inside a call (that drive handle is poisoned; another keeps working).

mod common;

use std::ffi::CStr;
use std::path::Path;

use reel_plugin_abi::host::{LibraryHandle, LoadError, MINIMUM_TABLE_SIZE, Plugin};
use reel_plugin_abi::sdk::{self, Call, DriveInfo, Element, Fault, ReadRecord};
use reel_plugin_abi::types::*;

fn load_err(path: &Path) -> LoadError {
    match Plugin::load(path) {
        Ok(p) => panic!("{} loaded as {p:?}, expected an error", path.display()),
        Err(e) => e,
    }
}

fn assert_names_file(e: &LoadError, path: &Path) {
    let text = e.to_string();
    assert!(
        text.contains(&path.display().to_string()),
        "error does not name the file: {text}"
    );
}

#[test]
fn not_a_shared_library() {
    let dir = tempfile::tempdir().expect("temp dir");
    let path = dir.path().join("notes.so");
    std::fs::write(&path, "this is a text file, not an ELF object\n").expect("write");
    let e = load_err(&path);
    assert!(matches!(e, LoadError::NotALibrary { .. }), "{e:?}");
    assert_names_file(&e, &path);
    assert!(
        e.to_string().contains("not a loadable plugin library"),
        "{e}"
    );
}

#[test]
fn missing_file() {
    let path = Path::new("/nonexistent/reel/plugin.so");
    let e = load_err(path);
    // Not a wrong library: a file that cannot be opened, and the message says what to check.
    assert!(matches!(e, LoadError::Unreadable { .. }), "{e:?}");
    assert!(e.to_string().contains("check the path"), "{e}");
    assert_names_file(&e, path);
}

#[test]
fn library_without_entry_symbol() {
    let dir = tempfile::tempdir().expect("temp dir");
    let so = common::compile_c(
        dir.path(),
        "noentry",
        "#include \"reel_plugin.h\"\n\
         REEL_PLUGIN_EXPORT int reel_plugin_v2(void) { return 0; }\n",
        &[],
    );
    let e = load_err(&so);
    assert!(
        matches!(
            e,
            LoadError::NoEntry {
                symbol: "reel_plugin_v1",
                ..
            }
        ),
        "{e:?}"
    );
    assert_names_file(&e, &so);
    assert!(e.to_string().contains("reel_plugin_v1"), "{e}");
}

/// A C plugin whose table header is filled by hand with the given struct_size and major.
fn table_source(struct_size: &str, major: u32) -> String {
    format!(
        "#include \"reel_plugin.h\"\n\
         static int32_t op(const char *c, ReelLibrary **o, ReelStatus *s) {{ (void)c; (void)o; (void)s; return REEL_E_UNSUPPORTED; }}\n\
         static void cl(ReelLibrary *l) {{ (void)l; }}\n\
         static int32_t dop(ReelLibrary *l, uint32_t i, ReelDrive **o, ReelStatus *s) {{ (void)l; (void)i; (void)o; (void)s; return REEL_E_UNSUPPORTED; }}\n\
         static void dcl(ReelDrive *d) {{ (void)d; }}\n\
         static const ReelPluginV1 table = {{\n\
           .struct_size = {struct_size}, .abi_major = {major}, .abi_minor = 0,\n\
           .name = \"bad\", .version = \"0\", .caps = 0, .thread_model = REEL_THREAD_SERIALIZE_ALL,\n\
           .library_open = op, .library_close = cl, .drive_open = dop, .drive_close = dcl,\n\
         }};\n\
         REEL_REGISTER_PLUGIN(table)\n"
    )
}

#[test]
fn unknown_major_version() {
    let dir = tempfile::tempdir().expect("temp dir");
    let so = common::compile_c(
        dir.path(),
        "major2",
        &table_source("sizeof(ReelPluginV1)", 2),
        &[],
    );
    let e = load_err(&so);
    assert!(
        matches!(
            e,
            LoadError::UnknownMajor {
                found: 2,
                expected: 1,
                ..
            }
        ),
        "{e:?}"
    );
    assert_names_file(&e, &so);
    assert!(e.to_string().contains("ABI major 2"), "{e}");
}

#[test]
fn struct_size_too_small() {
    let dir = tempfile::tempdir().expect("temp dir");
    let so = common::compile_c(dir.path(), "small", &table_source("48", 1), &[]);
    let e = load_err(&so);
    assert!(
        matches!(e, LoadError::TableTooSmall { found: 48, minimum, .. } if minimum == MINIMUM_TABLE_SIZE),
        "{e:?}"
    );
    assert_names_file(&e, &so);
}

#[test]
fn a_well_formed_table_from_the_same_source_loads() {
    // The control for the two tests above: the same C table with a correct header loads, so
    // their failures come from the header fields alone.
    let dir = tempfile::tempdir().expect("temp dir");
    let so = common::compile_c(
        dir.path(),
        "good",
        &table_source("sizeof(ReelPluginV1)", 1),
        &[],
    );
    let p = Plugin::load(&so).unwrap_or_else(|e| panic!("{e}"));
    assert_eq!(p.name(), "bad");
    assert!(p.table().drive_read_record.is_none());
}

#[test]
fn from_table_runs_the_same_negotiation() {
    static SMALL: ReelPluginV1 = {
        let mut t = sdk::plugin_table::<Panicky>();
        t.struct_size = 40;
        t
    };
    static MAJOR3: ReelPluginV1 = {
        let mut t = sdk::plugin_table::<Panicky>();
        t.abi_major = 3;
        t
    };
    let e = Plugin::from_table(&SMALL, "static:small").expect_err("too small");
    assert!(
        matches!(e, LoadError::TableTooSmall { found: 40, .. }),
        "{e:?}"
    );
    assert!(e.to_string().contains("static:small"), "{e}");
    let e = Plugin::from_table(&MAJOR3, "static:major3").expect_err("major 3");
    assert!(
        matches!(e, LoadError::UnknownMajor { found: 3, .. }),
        "{e:?}"
    );
}

#[test]
fn a_table_that_ends_inside_a_slot_is_refused() {
    // One byte past the v1.0 core: the copy would hold one byte of `drive_set_lbp`'s pointer.
    static TORN: ReelPluginV1 = {
        let mut t = sdk::plugin_table::<Panicky>();
        t.struct_size = reel_plugin_abi::host::MINIMUM_TABLE_SIZE + 1;
        t
    };
    let e = Plugin::from_table(&TORN, "static:torn").expect_err("torn slot");
    assert!(matches!(e, LoadError::TableEndsInsideSlot { .. }), "{e:?}");
    assert!(e.to_string().contains("static:torn"), "{e}");
    // A whole slot more is a v1.0 plugin that knows one more call: fine.
    static WHOLE: ReelPluginV1 = {
        let mut t = sdk::plugin_table::<Panicky>();
        t.struct_size =
            reel_plugin_abi::host::MINIMUM_TABLE_SIZE + std::mem::size_of::<usize>() as u32;
        t
    };
    let p = Plugin::from_table(&WHOLE, "static:whole").expect("whole slots");
    assert!(p.table().drive_set_lbp.is_some());
    assert!(p.table().drive_mam_read.is_none());
}

#[test]
fn a_capability_without_its_call_is_refused() {
    static NO_MAM_READ: ReelPluginV1 = {
        let mut t = sdk::plugin_table::<Panicky>();
        t.caps |= REEL_CAP_MAM;
        t.drive_mam_read = None;
        t
    };
    let e = Plugin::from_table(&NO_MAM_READ, "static:nomam").expect_err("MAM without its call");
    assert!(
        matches!(
            e,
            LoadError::CapabilityWithoutCall {
                capability: "REEL_CAP_MAM",
                slot: "drive_mam_read",
                ..
            }
        ),
        "{e:?}"
    );
    // One table of names serves the load check and the kit: every v1 bit, each once.
    let names = reel_plugin_abi::host::CAP_NAMES;
    let all: u64 = names.iter().fold(0, |a, (b, _)| a | b);
    assert_eq!(
        all,
        (1 << 13) - 1,
        "bits 0..=12, REEL_CAP_CHANGER to REEL_CAP_TEST_CONTROL"
    );
    assert_eq!(names.len(), 13);
    assert_eq!(
        reel_plugin_abi::host::cap_name(REEL_CAP_RAO),
        "REEL_CAP_RAO"
    );
    // The same table without the bit loads: the host never calls what it was not promised.
    static NO_MAM: ReelPluginV1 = {
        let mut t = sdk::plugin_table::<Panicky>();
        t.caps &= !REEL_CAP_MAM;
        t.drive_mam_read = None;
        t
    };
    Plugin::from_table(&NO_MAM, "static:nomambit").expect("no MAM, no MAM call");
}

#[test]
fn the_sdk_writes_no_more_status_than_the_caller_declared_and_resets_it_on_a_refusal() {
    // A caller whose ReelStatus is shorter than ours (an older header): its struct ends 8 bytes
    // into the message, and what follows it in memory is not the plugin's to write.
    #[repr(C)]
    struct Short {
        status: ReelStatus,
    }
    let table = sdk::plugin_table::<Panicky>();
    let read_position = table.drive_read_position.expect("slot");
    let message_at = std::mem::offset_of!(ReelStatus, message);
    let declared = message_at + 8;
    let mut buf = Short {
        status: ReelStatus::new(),
    };
    // A stale status from an earlier call, and a canary past the declared end.
    buf.status.struct_size = declared as u32;
    buf.status.sense_key = 3;
    buf.status.residue = 99;
    for b in buf.status.message.iter_mut() {
        *b = 0x55;
    }
    // SAFETY: the trampoline checks `out` before it touches the (null) handle; the status is
    // writable for the size it declares.
    let rc = unsafe { read_position(std::ptr::null_mut(), std::ptr::null_mut(), &mut buf.status) };
    assert_eq!(rc, REEL_E_INVALID_ARG);
    assert_eq!(buf.status.struct_size, declared as u32, "struct_size kept");
    assert_eq!(buf.status.sense_key, 0, "the stale status was reset");
    assert_eq!(buf.status.residue, 0, "the stale status was reset");
    let written: Vec<u8> = buf.status.message[..8].iter().map(|c| *c as u8).collect();
    assert_eq!(&written, b"drive_r\0", "the message, cut to end in a NUL");
    assert!(
        buf.status.message[8..].iter().all(|c| *c as u8 == 0x55),
        "nothing written past the declared struct_size"
    );
}

#[test]
fn control_says_the_capacity_that_then_succeeds() {
    let table = sdk::plugin_table::<Panicky>();
    let (open, close, control) = (
        table.library_open.expect("slot"),
        table.library_close.expect("slot"),
        table.control.expect("slot"),
    );
    let mut lib = std::ptr::null_mut();
    let mut st = ReelStatus::new();
    // SAFETY: a valid config string, out pointer and status.
    assert_eq!(unsafe { open(c"".as_ptr(), &mut lib, &mut st) }, REEL_OK);
    let request = c"hello";
    let mut len = 0usize;
    let mut small = [0 as std::ffi::c_char; 4];
    // SAFETY: a live library handle, a buffer of the capacity given, out_len and status.
    let rc = unsafe {
        control(
            lib,
            request.as_ptr(),
            small.as_mut_ptr(),
            small.len(),
            &mut len,
            &mut st,
        )
    };
    assert_eq!(rc, REEL_E_BUFFER_TOO_SMALL);
    assert_eq!(len, "echo:hello".len() + 1, "the text and its NUL");
    let mut exact = vec![0 as std::ffi::c_char; len];
    // SAFETY: as above, with the capacity the plugin asked for.
    let rc = unsafe {
        control(
            lib,
            request.as_ptr(),
            exact.as_mut_ptr(),
            exact.len(),
            &mut len,
            &mut st,
        )
    };
    assert_eq!(rc, REEL_OK, "{}", st.message_str());
    assert_eq!(len, "echo:hello".len());
    // SAFETY: the handle from `open`, closed once.
    unsafe { close(lib) };
}

#[test]
fn an_unknown_thread_model_is_refused() {
    static THREADS7: ReelPluginV1 = {
        let mut t = sdk::plugin_table::<Panicky>();
        t.thread_model = 7;
        t
    };
    let e = Plugin::from_table(&THREADS7, "static:threads7").expect_err("thread model 7");
    assert!(
        matches!(e, LoadError::UnknownThreadModel { found: 7, .. }),
        "{e:?}"
    );
}

// ---- a Rust plugin that panics -------------------------------------------------------------

struct Panicky;
struct PanickyDrive;

impl sdk::Library for Panicky {
    type Drive = PanickyDrive;
    const NAME: &'static CStr = c"panicky";
    const VERSION: &'static CStr = c"0.1.0";
    const CAPS: u64 = REEL_CAP_CHANGER;

    fn open(_config: &str, _call: &mut Call) -> Result<Self, Fault> {
        Ok(Panicky)
    }
    fn inventory(&mut self, _call: &mut Call) -> Result<Vec<Element>, Fault> {
        Ok(Vec::new())
    }
    fn control(&mut self, request: &str, _call: &mut Call) -> Result<String, Fault> {
        Ok(format!("echo:{request}"))
    }
    fn move_medium(&mut self, _s: u32, _d: u32, _call: &mut Call) -> Result<(), Fault> {
        Ok(())
    }
    fn open_drive(&mut self, _index: u32, _call: &mut Call) -> Result<PanickyDrive, Fault> {
        Ok(PanickyDrive)
    }
}

impl sdk::Drive for PanickyDrive {
    fn info(&mut self, _call: &mut Call) -> Result<DriveInfo, Fault> {
        Ok(DriveInfo::default())
    }
    fn test_ready(&mut self, _call: &mut Call) -> Result<(), Fault> {
        Ok(())
    }
    fn load(&mut self, _call: &mut Call) -> Result<(), Fault> {
        Ok(())
    }
    fn unload(&mut self, _call: &mut Call) -> Result<(), Fault> {
        Ok(())
    }
    fn rewind(&mut self, _call: &mut Call) -> Result<(), Fault> {
        Ok(())
    }
    fn locate(&mut self, _block: u64, _call: &mut Call) -> Result<(), Fault> {
        Ok(())
    }
    fn space(&mut self, _kind: u32, _count: i64, _call: &mut Call) -> Result<(), Fault> {
        Ok(())
    }
    fn read_position(&mut self, _call: &mut Call) -> Result<ReelPosition, Fault> {
        Ok(ReelPosition::default())
    }
    fn write_record(
        &mut self,
        data: &[u8],
        _crc: Option<u32>,
        _call: &mut Call,
    ) -> Result<(), Fault> {
        if data == b"boom" {
            panic!("simulated plugin bug on write");
        }
        Ok(())
    }
    fn write_filemarks(
        &mut self,
        _n: u32,
        _immediate: bool,
        _call: &mut Call,
    ) -> Result<(), Fault> {
        Ok(())
    }
    fn read_record(&mut self, _buffer: &mut [u8], _call: &mut Call) -> Result<ReadRecord, Fault> {
        Ok(ReadRecord { len: 0, crc: None })
    }
}

static PANICKY: ReelPluginV1 = sdk::plugin_table::<Panicky>();

#[test]
fn panic_poisons_only_that_drive_handle() {
    let plugin = Plugin::from_table(&PANICKY, "static:panicky").expect("negotiate");
    let mut lib = LibraryHandle::open(&plugin, "").expect("open");
    let mut a = lib.open_drive(0).expect("drive handle a");
    let mut b = lib.open_drive(0).expect("drive handle b");

    a.write_record(b"fine", None).expect("a normal write");
    let e = a
        .write_record(b"boom", None)
        .expect_err("the plugin panics");
    assert_eq!(e.code, REEL_E_PANICKED, "{e}");
    assert!(
        e.status.message_str().contains("simulated plugin bug"),
        "{e}"
    );
    assert!(a.is_poisoned());

    let e = a.test_ready().expect_err("poisoned handle");
    assert_eq!(e.code, REEL_E_POISONED, "{e}");
    let e = a.write_record(b"fine", None).expect_err("still poisoned");
    assert_eq!(e.code, REEL_E_POISONED, "{e}");

    assert!(!b.is_poisoned());
    b.test_ready().expect("the other handle keeps working");
    b.write_record(b"fine", None)
        .expect("the other handle keeps writing");
    // Dropping the poisoned handle closes it (close is allowed on a poisoned handle).
    drop(a);
    lib.open_drive(0)
        .expect("a fresh handle after the panic")
        .test_ready()
        .expect("ready");
}

/// A `control` slot that answers every capacity with a larger one.
unsafe extern "C" fn control_always_wants_more(
    _library: *mut ReelLibrary,
    _request: *const std::ffi::c_char,
    _response: *mut std::ffi::c_char,
    capacity: usize,
    out_len: *mut usize,
    _status: *mut ReelStatus,
) -> i32 {
    // SAFETY: the host passes a valid out_len.
    unsafe { *out_len = capacity.saturating_mul(4) };
    REEL_E_BUFFER_TOO_SMALL
}

/// The host follows `REEL_E_BUFFER_TOO_SMALL` a few rounds, then refuses: a plugin that always
/// asks for more does not make it loop or allocate without end.
#[test]
fn control_refuses_a_response_that_keeps_growing() {
    let mut table = sdk::plugin_table::<Panicky>();
    table.control = Some(control_always_wants_more);
    let table: &'static ReelPluginV1 = Box::leak(Box::new(table));
    let plugin = Plugin::from_table(table, "greedy").expect("negotiate");
    let mut lib = LibraryHandle::open(&plugin, "").expect("library_open");
    let e = lib.control("{}").unwrap_err();
    assert_eq!(e.code, REEL_E_INTERNAL, "{e}");
    assert!(
        e.to_string()
            .contains("kept asking for a larger response buffer"),
        "{e}"
    );
}
