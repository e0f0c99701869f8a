//! Shared mode (`sim.shared=true`): two library handles on one directory behave as two processes
//! sharing one SCSI library. Each owns the drives it opened; the changer state on disk is the
//! truth; a move out of a drive the other handle has loaded is refused; counters stay per
//! handle while the event log counts the whole library.

mod common;

use common::*;
use reel_plugin_abi::sdk::{Call, Drive, Element, Library};
use reel_plugin_abi::{REEL_ELEMENT_DRIVE, REEL_ELEMENT_FULL, REEL_ELEMENT_LOADED, REEL_SPACE_EOD};
use reel_plugin_sim::SimLibrary;

const SHARED: &str = "sim.shared=true;sim.calibrated=true;sim.drives=2;sim.cartridges=4";

fn open(dir: &std::path::Path) -> SimLibrary {
    open_lib(dir, SHARED)
}

fn drive_el(lib: &mut SimLibrary, i: u32) -> Element {
    lib.inventory(&mut Call::default())
        .unwrap()
        .into_iter()
        .find(|e| e.kind == REEL_ELEMENT_DRIVE && e.index == i)
        .unwrap()
}

fn mv(lib: &mut SimLibrary, from: u32, to: u32) -> Result<(), reel_plugin_abi::sdk::Fault> {
    lib.move_medium(from, to, &mut Call::default())
}

fn counters(lib: &mut SimLibrary) -> serde_json::Value {
    serde_json::from_str(
        &lib.control(r#"{"op":"counters"}"#, &mut Call::default())
            .unwrap(),
    )
    .unwrap()
}

#[test]
fn each_handle_owns_the_drives_it_opened() {
    let dir = tempfile::tempdir().unwrap();
    let mut a = open(dir.path());
    let mut b = open(dir.path());
    let _d0 = a.open_drive(0, &mut Call::default()).unwrap();
    let f = b.open_drive(0, &mut Call::default()).err().unwrap();
    assert!(
        f.message.contains("drive 0")
            && f.message
                .contains(&format!("in use by process {}", std::process::id())),
        "{}",
        f.message
    );
    // Opening it again through the owner is fine; the other handle takes drive 1.
    let _again = a.open_drive(0, &mut Call::default()).unwrap();
    let _d1 = b.open_drive(1, &mut Call::default()).unwrap();
    // A library without sim.shared cannot join, nor one of another geometry.
    let cfg = format!("dir={}", dir.path().display());
    let f = SimLibrary::open(&cfg, &mut Call::default()).err().unwrap();
    assert!(f.message.contains("sim.shared"), "{}", f.message);
    let f = SimLibrary::open(
        &format!("{cfg};{SHARED};sim.drives=3"),
        &mut Call::default(),
    )
    .err()
    .unwrap();
    assert!(f.message.contains("same sim.drives"), "{}", f.message);
    // Per-drive controls go to the owner.
    let f = b
        .control(
            r#"{"op":"fault","kind":"drive_fault","drive":0}"#,
            &mut Call::default(),
        )
        .err()
        .unwrap();
    assert!(f.message.contains("owned by process"), "{}", f.message);
}

#[test]
fn moves_are_seen_by_the_other_handle_and_a_loaded_drive_is_not_robbed() {
    let dir = tempfile::tempdir().unwrap();
    let mut a = open(dir.path());
    let mut b = open(dir.path());
    let mut d0 = a.open_drive(0, &mut Call::default()).unwrap();
    let mut d1 = b.open_drive(1, &mut Call::default()).unwrap();

    // A mounts slot 0's cartridge in its drive and writes three records.
    mv(&mut a, slot_addr(0), drive_addr(0)).unwrap();
    let e = drive_el(&mut b, 0);
    assert!(e.flags & REEL_ELEMENT_FULL != 0 && e.flags & REEL_ELEMENT_LOADED == 0);
    let barcode = e.barcode.clone();
    load(&mut d0);
    for n in 0..3u8 {
        ok(write(&mut d0, &[n; 1000]));
    }
    ok(d0.write_filemarks(1, false, &mut Call::default()));
    // B sees it loaded and cannot pull it out: MEDIUM REMOVAL PREVENTED, naming the owner.
    assert!(drive_el(&mut b, 0).flags & REEL_ELEMENT_LOADED != 0);
    let f = mv(&mut b, drive_addr(0), drive_addr(1)).err().unwrap();
    assert_eq!(sense(&f), (5, 0x53, 0x02), "{}", f.message);
    assert!(f.message.contains("process"), "{}", f.message);
    // Nor put anything into the full drive.
    let f = mv(&mut b, slot_addr(1), drive_addr(0)).err().unwrap();
    assert_eq!(sense(&f), (5, 0x3B, 0x0D), "{}", f.message);

    // A unloads: B may now take the cartridge into its own drive and reads what A wrote.
    ok(d0.unload(&mut Call::default()));
    assert!(drive_el(&mut b, 0).flags & REEL_ELEMENT_LOADED == 0);
    mv(&mut b, drive_addr(0), drive_addr(1)).unwrap();
    load(&mut d1);
    ok(d1.space(REEL_SPACE_EOD, 0, &mut Call::default()));
    assert_eq!(ok(d1.read_position(&mut Call::default())).block, 4);
    ok(d1.locate(1, &mut Call::default()));
    let mut buf = vec![0u8; 4096];
    let r = ok(d1.read_record(&mut buf, &mut Call::default()));
    assert_eq!(&buf[..r.len], &[1u8; 1000][..]);

    // A's view follows: its drive is empty, drive 1 holds the cartridge.
    let f = d0.test_ready(&mut Call::default()).unwrap_err();
    assert_eq!(sense(&f), (2, 0x3A, 0x00), "{}", f.message);
    let e = drive_el(&mut a, 1);
    assert_eq!(e.barcode, barcode);
    assert!(e.flags & REEL_ELEMENT_LOADED != 0);

    // B puts slot 2's cartridge into A's empty drive; A loads it at its next command.
    let inv = a.inventory(&mut Call::default()).unwrap();
    let other = inv
        .iter()
        .find(|e| e.address == slot_addr(2))
        .unwrap()
        .barcode
        .clone();
    mv(&mut b, slot_addr(2), drive_addr(0)).unwrap();
    load(&mut d0);
    let serial = ok(d0.mam_read(0x0401, &mut Call::default()));
    assert_eq!(String::from_utf8_lossy(&serial).trim(), other);
    // Back to slots, each by its owner, and both see the same layout.
    ok(d0.unload(&mut Call::default()));
    ok(d1.unload(&mut Call::default()));
    mv(&mut a, drive_addr(0), slot_addr(2)).unwrap();
    mv(&mut b, drive_addr(1), slot_addr(0)).unwrap();
    let (ia, ib) = (
        a.inventory(&mut Call::default()).unwrap(),
        b.inventory(&mut Call::default()).unwrap(),
    );
    let view = |v: &[Element]| -> Vec<(u32, String)> {
        v.iter().map(|e| (e.address, e.barcode.clone())).collect()
    };
    assert_eq!(view(&ia), view(&ib));
}

#[test]
fn a_drive_whose_owner_is_gone_counts_as_unloaded() {
    let dir = tempfile::tempdir().unwrap();
    let mut b = open(dir.path());
    {
        let mut a = open(dir.path());
        let mut d0 = a.open_drive(0, &mut Call::default()).unwrap();
        mv(&mut a, slot_addr(0), drive_addr(0)).unwrap();
        load(&mut d0);
        ok(write(&mut d0, &[7u8; 500]));
        assert!(drive_el(&mut b, 0).flags & REEL_ELEMENT_LOADED != 0);
        // The process dies with the cartridge loaded (its handles are closed).
    }
    let e = drive_el(&mut b, 0);
    assert!(e.flags & REEL_ELEMENT_FULL != 0 && e.flags & REEL_ELEMENT_LOADED == 0);
    // The drive is free to own, and the cartridge free to move, with what was written.
    let mut d1 = b.open_drive(1, &mut Call::default()).unwrap();
    mv(&mut b, drive_addr(0), drive_addr(1)).unwrap();
    load(&mut d1);
    ok(d1.space(REEL_SPACE_EOD, 0, &mut Call::default()));
    assert_eq!(ok(d1.read_position(&mut Call::default())).block, 1);
    let _d0 = b.open_drive(0, &mut Call::default()).unwrap();
}

#[test]
fn counters_are_per_handle_and_the_library_log_counts_every_process() {
    let dir = tempfile::tempdir().unwrap();
    let mut a = open(dir.path());
    let mut b = open(dir.path());
    let mut d0 = a.open_drive(0, &mut Call::default()).unwrap();
    let _d1 = b.open_drive(1, &mut Call::default()).unwrap();
    mv(&mut a, slot_addr(0), drive_addr(0)).unwrap();
    load(&mut d0);
    for _ in 0..3 {
        ok(write(&mut d0, &[1u8; 100]));
    }
    // A write short of EOD: a violation, counted where it happened and in the library log.
    ok(d0.locate(1, &mut Call::default()));
    ok(write(&mut d0, &[2u8; 100]));
    let (ca, cb) = (counters(&mut a), counters(&mut b));
    assert_eq!(ca["violations"], 1, "{ca}");
    assert_eq!(ca["drives"][0]["records_written"], 4, "{ca}");
    assert_eq!(ca["drives"][0]["owned"], true, "{ca}");
    assert_eq!(cb["violations"], 0, "{cb}");
    assert_eq!(cb["drives"][0]["records_written"], 0, "{cb}");
    assert_eq!(cb["drives"][0]["owned"], false, "{cb}");
    assert_eq!(ca["robot_moves"], 1, "{ca}");
    assert_eq!(cb["robot_moves"], 0, "{cb}");
    for c in [&ca, &cb] {
        assert_eq!(c["library"]["violations"], 1, "{c}");
        assert_eq!(c["library"]["robot_moves"], 1, "{c}");
    }
    // The log outlives the process that wrote it.
    drop(d0);
    drop(a);
    assert_eq!(counters(&mut b)["library"]["violations"], 1);
}

/// Write `request` into drive `d`'s mailbox the way a sender should: elsewhere, then renamed in.
fn post(dir: &std::path::Path, d: u32, name: &str, request: &str) {
    let mb = dir.join("mailbox").join(format!("drive-{d}"));
    std::fs::create_dir_all(&mb).unwrap();
    let tmp = dir.join("mailbox").join(format!(".{name}.tmp"));
    std::fs::write(&tmp, request).unwrap();
    std::fs::rename(&tmp, mb.join(format!("{name}.json"))).unwrap();
}

fn delivered(dir: &std::path::Path) -> Vec<serde_json::Value> {
    std::fs::read_to_string(dir.join("mailbox").join("delivered.jsonl"))
        .unwrap_or_default()
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect()
}

#[test]
fn a_drive_fault_reaches_the_owner_through_the_mailbox() {
    let dir = tempfile::tempdir().unwrap();
    let mut a = open(dir.path());
    let mut b = open(dir.path());
    let mut d0 = a.open_drive(0, &mut Call::default()).unwrap();
    mv(&mut a, slot_addr(0), drive_addr(0)).unwrap();
    load(&mut d0);
    // B cannot arm A's drive through its own handle, but it can post the request.
    post(
        dir.path(),
        0,
        "0001",
        r#"{"op":"fault","kind":"drive_fault","drive":0}"#,
    );
    post(dir.path(), 0, "0002", r#"{"op":"no_such_op"}"#);
    // A handle that does not own drive 0 leaves its mail alone.
    let _ = b.inventory(&mut Call::default()).unwrap();
    assert!(delivered(dir.path()).is_empty());
    // The owner's next command takes both, in name order: the fault hits that very command.
    let f = d0.test_ready(&mut Call::default()).unwrap_err();
    assert_eq!(sense(&f).0, 4, "{}", f.message);
    let log = delivered(dir.path());
    assert_eq!(log.len(), 2, "{log:?}");
    assert_eq!(log[0]["ok"], true, "{log:?}");
    assert_eq!(log[0]["request"]["kind"], "drive_fault", "{log:?}");
    assert_eq!(log[1]["ok"], false, "{log:?}");
    assert!(
        log[1]["error"]
            .as_str()
            .unwrap()
            .contains("unknown control op"),
        "{log:?}"
    );
    ok(d0.test_ready(&mut Call::default()));
    // Mail for an idle drive is delivered at the owner's next inventory too.
    post(
        dir.path(),
        0,
        "0003",
        r#"{"op":"fault","kind":"cleaning_required","drive":0}"#,
    );
    let _ = a.inventory(&mut Call::default()).unwrap();
    assert_eq!(delivered(dir.path()).len(), 3);
    assert!(
        std::fs::read_dir(dir.path().join("mailbox/drive-0"))
            .unwrap()
            .next()
            .is_none()
    );
}

#[test]
fn modelled_busy_time_outlives_the_process_that_spent_it() {
    let dir = tempfile::tempdir().unwrap();
    let mut b = open(dir.path());
    let spent = {
        let mut a = open(dir.path());
        let mut d0 = a.open_drive(0, &mut Call::default()).unwrap();
        mv(&mut a, slot_addr(0), drive_addr(0)).unwrap();
        load(&mut d0);
        ok(write(&mut d0, &[1u8; 4096]));
        ok(d0.unload(&mut Call::default()));
        counters(&mut a)["drives"][0]["busy_ns"].as_u64().unwrap()
    };
    assert!(spent > 0);
    // LOAD and UNLOAD logged it: the other handle sees the whole of it after A is gone.
    assert_eq!(
        counters(&mut b)["library"]["busy_ns"].as_u64().unwrap(),
        spent
    );
}

#[test]
fn faults_that_took_effect_are_in_the_library_log_with_their_block() {
    let dir = tempfile::tempdir().unwrap();
    let mut a = open(dir.path());
    let mut b = open(dir.path());
    let mut d0 = a.open_drive(0, &mut Call::default()).unwrap();
    mv(&mut a, slot_addr(0), drive_addr(0)).unwrap();
    load(&mut d0);
    for _ in 0..3 {
        ok(write(&mut d0, &[1u8; 100]));
    }
    // Armed and never met: not in the log. Armed and met at block 1 on the way back: in it.
    a.control(
        r#"{"op":"fault","kind":"corrupt_write","drive":0,"offset":3}"#,
        &mut Call::default(),
    )
    .unwrap();
    a.control(r#"{"op":"disarm","drive":0}"#, &mut Call::default())
        .unwrap();
    a.control(
        r#"{"op":"fault","kind":"corrupt_read","drive":0,"offset":3}"#,
        &mut Call::default(),
    )
    .unwrap();
    ok(d0.locate(1, &mut Call::default()));
    let mut buf = vec![0u8; 4096];
    d0.read_record(&mut buf, &mut Call::default()).unwrap();
    // A power cut drops what only the buffer held: logged with the first block lost.
    ok(d0.space(REEL_SPACE_EOD, 0, &mut Call::default()));
    ok(write(&mut d0, &[2u8; 100]));
    a.control(r#"{"op":"power_cut"}"#, &mut Call::default())
        .unwrap();
    let fired = counters(&mut b)["library"]["fired"].clone();
    let events: Vec<(&str, u64)> = fired
        .as_array()
        .unwrap()
        .iter()
        .map(|e| (e["event"].as_str().unwrap(), e["block"].as_u64().unwrap()))
        .collect();
    assert_eq!(events[0], ("fired_corrupt_read", 1), "{fired}");
    assert!(
        events.iter().all(|(e, _)| *e != "fired_corrupt_write"),
        "a disarmed fault never fired: {fired}"
    );
    assert!(
        events
            .iter()
            .any(|(e, block)| *e == "lost_buffer" && *block <= 3),
        "{fired}"
    );
    assert!(fired[0]["t_ms"].as_u64().unwrap() > 0, "{fired}");
}

#[test]
fn a_write_a_worm_cartridge_refused_is_in_the_library_log() {
    let dir = tempfile::tempdir().unwrap();
    let cfg = format!("{SHARED};sim.worm_cartridges=1");
    let mut a = open_lib(dir.path(), &cfg);
    let mut b = open_lib(dir.path(), &cfg);
    let mut d0 = a.open_drive(0, &mut Call::default()).unwrap();
    // The last cartridge is the WORM one.
    mv(&mut a, slot_addr(3), drive_addr(0)).unwrap();
    load(&mut d0);
    for _ in 0..2 {
        ok(write(&mut d0, &[1u8; 100]));
    }
    ok(d0.locate(0, &mut Call::default()));
    let refused = write(&mut d0, &[2u8; 100]).unwrap_err();
    assert_eq!(sense(&refused).0, 7, "{}", refused.message);
    let c = counters(&mut b);
    assert_eq!(c["library"]["worm_refusals"], 1, "{c}");
    assert_eq!(c["library"]["violations"], 0, "nothing was written: {c}");
}
