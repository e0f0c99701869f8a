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
    assert!(matches!(e, LoadError::NotALibrary { .. }), "{e:?}");
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
