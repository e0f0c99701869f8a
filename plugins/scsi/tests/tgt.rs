//! Integration tests against reel's tape library rig (`tests/rig`): a real third-party SCSI
//! target (tgt's SSC drives and SMC changer) over iSCSI on loopback, driven through the plugin
//! loaded with dlopen, as the engine loads it.
//!
//! Needs tgt's tools, libiscsi and the patched tgtd (READ POSITION, LOCATE, SPACE, early
//! warning): run `tests/rig/setup.sh` once (root; idempotent). Without them the test is
//! skipped with a loud message, except when `CI=true`, where it fails.
//!
//! Env: `TGTD`, `REEL_RIG_DIR` (see `tests/rig/rig.rs`), `REEL_TGT_PORT` / `REEL_TGT_CN`
//! (default 3270 / 7).

use std::sync::Arc;

use reel_plugin_abi::host::{LibraryHandle, Plugin};
use reel_plugin_abi::kit::{self, KitOptions, Outcome};
use reel_plugin_abi::*;

#[path = "../../../tests/rig/rig.rs"]
mod rig;
use rig::Rig;

fn plugin() -> Arc<Plugin> {
    let path = rig::built_cdylib("reel_plugin_scsi");
    Plugin::load(&path).unwrap_or_else(|e| panic!("load {}: {e}", path.display()))
}

fn element(inv: &[sdk::Element], address: u32) -> sdk::Element {
    inv.iter()
        .find(|e| e.address == address)
        .cloned()
        .unwrap_or_else(|| panic!("no element {address} in {inv:?}"))
}

/// Changer inventory, drive mapping by serial, MOVE MEDIUM and its errors.
fn changer_inventory_and_moves(rig: &Rig, p: &Arc<Plugin>) {
    let mut lib = LibraryHandle::open(p, &rig.config()).expect("library_open");
    let inv = lib.inventory().expect("inventory");
    let count = |k| inv.iter().filter(|e| e.kind == k).count();
    assert_eq!(count(REEL_ELEMENT_PICKER), 1);
    assert_eq!(count(REEL_ELEMENT_SLOT), 8);
    assert_eq!(count(REEL_ELEMENT_IMPORT_EXPORT), 4);
    assert_eq!(count(REEL_ELEMENT_DRIVE), 2);
    for i in 1..=8u32 {
        let e = element(&inv, 1023 + i);
        assert_eq!(e.kind, REEL_ELEMENT_SLOT);
        assert_eq!(e.barcode, format!("GFS{i:03}L9"));
        assert_ne!(e.flags & REEL_ELEMENT_FULL, 0);
        assert_eq!(e.index, i - 1);
    }
    assert_eq!(element(&inv, 256).index, 0);
    assert_eq!(element(&inv, 257).index, 1);
    // drive index -> element -> serial, through the changer's DVCID (the second descriptor is
    // cut short by tgt and matched by elimination)
    let drives: serde_json::Value =
        serde_json::from_str(&lib.control(r#"{"op":"drives"}"#).expect("control drives"))
            .expect("json");
    assert_eq!(drives[0]["element"], 256);
    assert_eq!(drives[0]["serial"], "DRV0000001");
    assert_eq!(drives[1]["element"], 257);
    assert_eq!(drives[1]["serial"], "DRV0000002");
    let mut d1 = lib.open_drive(1).expect("open drive 1");
    assert_eq!(d1.info().expect("info").serial, "DRV0000002");
    drop(d1);

    // export two cartridges to the mail slots: the contract kit needs two empty slots
    lib.export(1030, 768).expect("export GFS007L9");
    lib.move_medium(1031, 769).expect("move GFS008L9 to I/E");
    let inv = lib.inventory().expect("inventory");
    assert_eq!(element(&inv, 768).barcode, "GFS007L9");
    assert_eq!(element(&inv, 768).source_address, 1030);
    assert_eq!(element(&inv, 1030).flags & REEL_ELEMENT_FULL, 0);
    assert!(element(&inv, 1030).barcode.is_empty());

    // refused moves keep their sense
    let e = lib.move_medium(1030, 1031).unwrap_err();
    assert_eq!(e.sense(), (5, 0x3B, 0x0E), "{e}");
    let e = lib.move_medium(1024, 1025).unwrap_err();
    assert_eq!(e.sense(), (5, 0x3B, 0x0D), "{e}");
    let e = lib.move_medium(70000, 1025).unwrap_err();
    assert_eq!(e.code, REEL_E_INVALID_ARG);

    // INITIALIZE ELEMENT STATUS is accepted and leaves the inventory as it was
    lib.control(r#"{"op":"initialize_element_status"}"#)
        .expect("initialize element status");
    assert_eq!(lib.inventory().expect("inventory"), inv);
}

/// A record read back is the one written; a mismatch names its length or first bad byte
/// (not a megabyte of both in the panic message).
fn same_bytes(got: &[u8], want: &[u8], what: &str) {
    assert_eq!(got.len(), want.len(), "{what}: length");
    if let Some(at) = got.iter().zip(want).position(|(a, b)| a != b) {
        panic!(
            "{what}: byte {at} of {} is {:#04x}, written {:#04x}",
            want.len(),
            got[at],
            want[at]
        );
    }
}

/// Records written, read back, located and spaced over on the second drive.
fn records_on_drive_two(rig: &Rig, p: &Arc<Plugin>) {
    let mut lib = LibraryHandle::open(p, &rig.config()).expect("library_open");
    lib.move_medium(1025, 257).expect("GFS002L9 -> drive 257");
    let inv = lib.inventory().expect("inventory");
    assert_eq!(element(&inv, 257).barcode, "GFS002L9");
    let mut d = lib.open_drive(1).expect("open drive 1");
    d.load().expect("load");
    let e = d.test_ready().unwrap_err();
    assert_eq!(e.sense(), (6, 0x28, 0x00));
    d.test_ready().expect("ready");
    d.rewind().expect("rewind");
    let pos = d.read_position().expect("position");
    assert_eq!((pos.block, pos.file), (0, 0));
    assert_ne!(pos.flags & REEL_POS_BOP, 0);

    // three files of 20 records, sizes varying from 1 byte to 1 MiB
    let record = |f: usize, r: usize| -> Vec<u8> {
        let len = [1usize, 512, 65536, 262144, 1 << 20][(f * 20 + r) % 5];
        (0..len).map(|i| (i * 31 + f * 7 + r * 13) as u8).collect()
    };
    for f in 0..3 {
        for r in 0..20 {
            d.write_record(&record(f, r), None).expect("write");
        }
        d.write_filemarks(1, f == 1).expect("filemark");
    }
    let eod = d.read_position().expect("position at EOD");
    assert_eq!((eod.block, eod.file), (63, 3));

    d.rewind().expect("rewind");
    let mut buf = vec![0u8; (1 << 20) + 4096];
    for f in 0..3 {
        for r in 0..20 {
            let got = d.read_record(&mut buf).expect("read");
            same_bytes(
                &buf[..got.len],
                &record(f, r),
                &format!("file {f} record {r}"),
            );
        }
        let e = d.read_record(&mut buf).unwrap_err();
        assert_ne!(e.status.flags & REEL_FLAG_FILEMARK, 0, "{e}");
    }
    let e = d.read_record(&mut buf).unwrap_err();
    assert_eq!(e.sense(), (8, 0x00, 0x05), "{e}");

    // locate into the second file and read
    d.locate(21 + 5).expect("locate");
    let got = d.read_record(&mut buf).expect("read after locate");
    same_bytes(
        &buf[..got.len],
        &record(1, 5),
        "file 1 record 5 after locate",
    );
    let pos = d.read_position().expect("position");
    assert_eq!((pos.block, pos.file), (27, 1));
    // space back over a filemark
    d.space(REEL_SPACE_FILEMARKS, -1)
        .expect("space -1 filemark");
    let pos = d.read_position().expect("position");
    assert_eq!((pos.block, pos.file), (20, 0));
    d.space(REEL_SPACE_EOD, 0).expect("space EOD");
    assert_eq!(d.read_position().expect("position").block, 63);

    let st = d.statistics().expect("statistics");
    assert_eq!(st.records_written, 60);
    assert_eq!(st.records_read, 61);
    d.unload().expect("unload");
    drop(d);
    lib.move_medium(257, 1025).expect("GFS002L9 back home");

    // end of medium on a 64 MiB cartridge (patched tgtd): early warning is CHECK CONDITION
    // 0/00/02 with EOM and the record written (docs/ABI.md), then VOLUME OVERFLOW with EOM and
    // the residue, nothing written past it
    lib.move_medium(1026, 257).expect("GFS003L9 -> drive 257");
    let mut d = lib.open_drive(1).expect("open drive 1");
    d.load().expect("load");
    let _ = d.test_ready();
    d.rewind().expect("rewind");
    let rec = vec![0x5Au8; 1 << 20];
    let (mut good, mut warned) = (0u64, None);
    let overflow = loop {
        match d.write_record(&rec, None) {
            Ok(()) => good += 1,
            // Early warning: written.
            Err(e) if e.status.sense_key == 0 && e.has_flag(REEL_FLAG_EOM) => {
                good += 1;
                if warned.is_none() {
                    warned = Some(good);
                }
            }
            Err(e) => break e,
        }
        assert!(
            good < 200,
            "no end of medium after {good} MiB on a 64 MiB cartridge"
        );
    };
    let warned = warned.expect("early warning before the end");
    assert!(
        warned < good,
        "early warning at record {warned}, last good record {good}"
    );
    assert_eq!(overflow.status.sense_key, 0x0D, "{overflow}");
    assert!(overflow.has_flag(REEL_FLAG_EOM), "{overflow}");
    assert!(overflow.has_flag(REEL_FLAG_RESIDUE_VALID), "{overflow}");
    assert_eq!(overflow.status.residue, 1 << 20, "{overflow}");
    let pos = d.read_position().expect("position at the end");
    assert_eq!(pos.block, good);
    assert_ne!(pos.flags & REEL_POS_EOP, 0);
    d.rewind().expect("rewind");
    d.unload().expect("unload");
    drop(d);
    lib.move_medium(257, 1026).expect("GFS003L9 back home");
    let inv = lib.inventory().expect("inventory");
    assert_eq!(element(&inv, 1025).barcode, "GFS002L9");
    assert_eq!(element(&inv, 257).flags & REEL_ELEMENT_FULL, 0);
}

/// The plugin contract kit. tgt emulates neither MAM nor LBP: those checks must fail with
/// the plugin's "not supported by this drive" error, every other check must pass.
fn contract_kit(rig: &Rig, p: &Arc<Plugin>) {
    let opts = KitOptions {
        drive: 0,
        scratch_barcode: Some("GFS001L9".into()),
        worm_barcode: None,
    };
    let report = kit::run(p, &rig.config(), &opts);
    eprintln!("{report}");
    for c in &report.checks {
        match (&c.outcome, c.name) {
            (Outcome::Failed(why), "mam" | "records.lbp") => assert!(
                why.contains("not supported by this drive"),
                "{}: tgt lacks it, but the failure says something else: {why}",
                c.name
            ),
            (Outcome::Failed(why), name) => panic!("kit check {name} failed: {why}\n{report}"),
            _ => {}
        }
    }
    assert_eq!(report.outcome("records"), Some(&Outcome::Passed));
    assert_eq!(report.outcome("locate"), Some(&Outcome::Passed));
}

#[test]
fn tgt_library() {
    let port = std::env::var("REEL_TGT_PORT")
        .ok()
        .and_then(|p| p.parse().ok())
        .unwrap_or(3270);
    let cn = std::env::var("REEL_TGT_CN")
        .ok()
        .and_then(|p| p.parse().ok())
        .unwrap_or(7);
    let Some(rig) = Rig::up(port, cn, 64) else {
        return;
    };
    let p = plugin();
    assert_eq!(p.name(), "reel-plugin-scsi");
    changer_inventory_and_moves(&rig, &p);
    records_on_drive_two(&rig, &p);
    contract_kit(&rig, &p);
    ambiguous_serials_need_drive_elements(&rig, &p);
}

/// tgt copies only the first 10 bytes of a drive's serial into the changer's identifier of
/// its element: drives whose serials share them cannot be told apart. The plugin refuses to
/// guess, says so, and `drive_elements=` ties them.
fn ambiguous_serials_need_drive_elements(rig: &Rig, p: &Arc<Plugin>) {
    rig.set_drive_serial(1, "SAMEPREFIX01");
    rig.set_drive_serial(2, "SAMEPREFIX02");
    let mut lib = LibraryHandle::open(p, &rig.config()).expect("library_open");
    let e = lib.open_drive(0).map(|_| ()).unwrap_err().to_string();
    assert!(
        e.contains("does not tell apart") && e.contains("drive_elements="),
        "{e}"
    );
    drop(lib);
    // Tied explicitly: drive 0 is element 256, which the rig serves as LUN 1.
    let config = format!("{}\ndrive_elements=256,257", rig.config());
    let mut lib = LibraryHandle::open(p, &config).expect("library_open with drive_elements");
    let drives: serde_json::Value =
        serde_json::from_str(&lib.control(r#"{"op":"drives"}"#).expect("control drives"))
            .expect("json");
    assert_eq!(drives[0]["element"], 256);
    assert_eq!(drives[0]["serial"], "SAMEPREFIX01");
    assert_eq!(drives[1]["serial"], "SAMEPREFIX02");
    let mut d0 = lib.open_drive(0).expect("open drive 0");
    assert_eq!(d0.info().expect("info").serial, "SAMEPREFIX01");
    drop(d0);
    // An element the changer does not have is refused when the library is opened.
    let wrong = format!("{}\ndrive_elements=256,999", rig.config());
    let e = LibraryHandle::open(p, &wrong)
        .map(|_| ())
        .unwrap_err()
        .to_string();
    assert!(e.contains("element 999") && e.contains("256, 257"), "{e}");
    rig.set_drive_serial(1, "DRV0000001");
    rig.set_drive_serial(2, "DRV0000002");
}
