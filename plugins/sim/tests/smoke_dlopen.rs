//! The simulator loaded through dlopen, without the contract kit: inventory, a mount, a few
//! records written and read back through the C ABI.

use std::path::PathBuf;

use reel_plugin_abi::host::{LibraryHandle, Plugin};
use reel_plugin_abi::{REEL_CAP_TEST_CONTROL, REEL_ELEMENT_DRIVE, REEL_ELEMENT_SLOT};

/// The cdylib next to the test: `target/<profile>/deps/libreel_plugin_sim.so`, which
/// `cargo test` rebuilds with the rlib, else `target/<profile>/libreel_plugin_sim.so` (only
/// `cargo build` refreshes that one, so it may be stale).
pub fn plugin_path() -> PathBuf {
    let exe = std::env::current_exe().unwrap();
    let deps = exe.parent().unwrap();
    let fresh = deps.join("libreel_plugin_sim.so");
    if fresh.exists() {
        return fresh;
    }
    deps.parent().unwrap().join("libreel_plugin_sim.so")
}

/// What the host's log subscriber wrote.
#[derive(Clone, Default)]
struct Log(std::sync::Arc<std::sync::Mutex<Vec<u8>>>);

impl std::io::Write for Log {
    fn write(&mut self, b: &[u8]) -> std::io::Result<usize> {
        self.0.lock().unwrap().extend_from_slice(b);
        Ok(b.len())
    }
    fn flush(&mut self) -> std::io::Result<()> {
        Ok(())
    }
}

#[test]
fn dlopen_inventory_mount_write_read() {
    let path = plugin_path();
    assert!(path.exists(), "{} not built", path.display());
    // ABI 1.2: the simulator's own `tracing` events reach this host's log, under its name.
    let log = Log::default();
    let writer = log.clone();
    let _scope = tracing::subscriber::set_default(
        tracing_subscriber::fmt()
            .with_writer(move || writer.clone())
            .with_ansi(false)
            .with_max_level(tracing::Level::INFO)
            .finish(),
    );
    let plugin = Plugin::load(&path).unwrap();
    assert_eq!(plugin.name(), "reel-sim");
    assert!(plugin.has_cap(REEL_CAP_TEST_CONTROL));
    let dir = tempfile::tempdir().unwrap();
    let mut lib = LibraryHandle::open(
        &plugin,
        &format!("dir={};sim.calibrated=true", dir.path().display()),
    )
    .unwrap();
    let logged = String::from_utf8_lossy(&log.0.lock().unwrap()).into_owned();
    assert!(
        logged.contains("reel_plugin")
            && logged.contains("plugin=reel-sim")
            && logged.contains("simulated library open (figures SIMULATED)"),
        "the simulator's open event did not reach the host: {logged}"
    );
    let inv = lib.inventory().unwrap();
    let drives: Vec<_> = inv
        .iter()
        .filter(|e| e.kind == REEL_ELEMENT_DRIVE)
        .collect();
    let slots: Vec<_> = inv.iter().filter(|e| e.kind == REEL_ELEMENT_SLOT).collect();
    assert_eq!(drives.len(), 2);
    assert_eq!(drives[1].address, 257);
    assert_eq!(slots.len(), 16);
    assert_eq!(slots[0].address, 1024);
    assert_eq!(slots[0].barcode, "RL0001L9");
    assert_eq!(slots[7].barcode, "RL0008L9");

    lib.move_medium(1024, 256).unwrap();
    assert_eq!(
        lib.last_status().elapsed_ns,
        8_000_000_000,
        "robot move 8 s"
    );
    let mut d = lib.open_drive(0).unwrap();
    d.load().unwrap();
    assert_eq!(d.last_status().elapsed_ns, 15_000_000_000, "load 15 s");
    let ua = d.test_ready().unwrap_err();
    assert_eq!(ua.sense(), (6, 0x28, 0));
    d.test_ready().unwrap();
    let rec: Vec<u8> = (0..65536u32).map(|i| (i % 251) as u8).collect();
    for _ in 0..4 {
        d.write_record(&rec, None).unwrap();
    }
    d.write_filemarks(1, false).unwrap();
    d.rewind().unwrap();
    let mut buf = vec![0u8; 65536];
    let r = d.read_record(&mut buf).unwrap();
    assert_eq!(r.len, 65536);
    assert_eq!(buf, rec);
    let counters = lib.control(r#"{"op":"counters"}"#).unwrap();
    assert!(counters.contains(r#""basis":"SIMULATED""#), "{counters}");
}
