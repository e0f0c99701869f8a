//! SSC behaviour the engine relies on: filemarks, EOD, ILI, spacing, overwrite accounting,
//! LBP, the changer's addresses and errors, the configuration's errors.

mod common;

use common::*;
use reel_plugin_abi::sdk::{Call, Drive, Library};
use reel_plugin_abi::{
    REEL_ELEMENT_IMPORT_EXPORT, REEL_ELEMENT_WORM, REEL_FLAG_EOM, REEL_FLAG_FILEMARK,
    REEL_FLAG_ILI, REEL_LBP_CRC32C, REEL_POS_BOP, REEL_SPACE_FILEMARKS, REEL_SPACE_RECORDS,
};
use reel_plugin_sim::SimLibrary;

/// R0 R1 FM R2 R3 FM R4, records of 10×(block+1) bytes.
fn layout(d: &mut reel_plugin_sim::drive::SimDrive) {
    for (i, fm) in [(0, false), (1, true), (2, false), (3, true), (4, false)] {
        ok(write(d, &vec![i as u8; 10 * (i + 1)]));
        if fm {
            ok(d.write_filemarks(1, false, &mut Call::default()));
        }
    }
}

#[test]
fn read_filemark_eod_and_ili() {
    let mut rig = Rig::new("sim.calibrated=true");
    let mut d = mount(&mut rig, 0, 0);
    layout(&mut d);
    ok(d.rewind(&mut Call::default()));
    let mut b = vec![0u8; 100];
    ok(d.read_record(&mut b, &mut Call::default()));
    ok(d.read_record(&mut b, &mut Call::default()));
    let f = d.read_record(&mut b, &mut Call::default()).unwrap_err();
    assert_eq!(sense(&f), (0, 0, 1));
    assert_ne!(f.flags & REEL_FLAG_FILEMARK, 0);
    let p = ok(d.read_position(&mut Call::default()));
    assert_eq!((p.block, p.file), (3, 1), "after the filemark");
    // ILI: buffer of 5 bytes, record of 30.
    let mut small = [0u8; 5];
    let f = d.read_record(&mut small, &mut Call::default()).unwrap_err();
    assert_ne!(f.flags & REEL_FLAG_ILI, 0);
    assert_eq!(f.residue, 5 - 30);
    assert_eq!(f.transferred, 5);
    assert_eq!(small, [2u8; 5]);
    ok(d.locate(6, &mut Call::default()));
    ok(d.read_record(&mut b, &mut Call::default()));
    let f = d.read_record(&mut b, &mut Call::default()).unwrap_err();
    assert_eq!(sense(&f), (8, 0, 5), "BLANK CHECK at EOD");
    let f = d.locate(99, &mut Call::default()).unwrap_err();
    assert_eq!(sense(&f), (8, 0, 5));
}

#[test]
fn space_records_and_filemarks_both_ways() {
    let mut rig = Rig::new("sim.calibrated=true");
    let mut d = mount(&mut rig, 0, 0);
    layout(&mut d); // blocks: R0=0 R1=1 FM=2 R2=3 R3=4 FM=5 R4=6, EOD 7
    ok(d.rewind(&mut Call::default()));
    ok(d.space(REEL_SPACE_FILEMARKS, 2, &mut Call::default()));
    assert_eq!(ok(d.read_position(&mut Call::default())).block, 6);
    ok(d.space(REEL_SPACE_FILEMARKS, -1, &mut Call::default()));
    assert_eq!(
        ok(d.read_position(&mut Call::default())).block,
        5,
        "BOT side of the mark"
    );
    ok(d.locate(3, &mut Call::default()));
    let f = d
        .space(REEL_SPACE_RECORDS, 5, &mut Call::default())
        .unwrap_err();
    assert_ne!(f.flags & REEL_FLAG_FILEMARK, 0);
    assert_eq!(f.residue, 3);
    assert_eq!(ok(d.read_position(&mut Call::default())).block, 6);
    let f = d
        .space(REEL_SPACE_RECORDS, -1, &mut Call::default())
        .unwrap_err();
    assert_ne!(f.flags & REEL_FLAG_FILEMARK, 0);
    assert_eq!(f.residue, -1, "the residue carries the sign of the count");
    assert_eq!(ok(d.read_position(&mut Call::default())).block, 5);
    ok(d.locate(1, &mut Call::default()));
    let f = d
        .space(REEL_SPACE_RECORDS, -3, &mut Call::default())
        .unwrap_err();
    assert_eq!(sense(&f), (0, 0, 4));
    assert_ne!(f.flags & REEL_FLAG_EOM, 0);
    assert_eq!(f.residue, -2, "the residue carries the sign of the count");
    let p = ok(d.read_position(&mut Call::default()));
    assert_eq!(p.block, 0);
    assert_ne!(p.flags & REEL_POS_BOP, 0);
    let f = d
        .space(REEL_SPACE_FILEMARKS, 3, &mut Call::default())
        .unwrap_err();
    assert_eq!(sense(&f), (8, 0, 5));
    assert_eq!(f.residue, 1);
}

/// The answers docs/ABI.md gives: an unknown control op is unsupported, an unknown LBP mode is
/// the caller's error, and a cartridge in the drive but not loaded is NOT READY 04/02 (no
/// cartridge at all: 3A/00).
#[test]
fn answers_match_the_abi_document() {
    let mut rig = Rig::new("sim.calibrated=true");
    let f = rig.control(r#"{"op":"no.such.op"}"#).unwrap_err();
    assert_eq!(f.code, reel_plugin_abi::REEL_E_UNSUPPORTED, "{}", f.message);
    let mut d = rig.drive(0);
    assert_eq!(
        sense(&d.test_ready(&mut Call::default()).unwrap_err()),
        (2, 0x3A, 0)
    );
    rig.mv(slot_addr(0), drive_addr(0));
    assert_eq!(
        sense(&d.test_ready(&mut Call::default()).unwrap_err()),
        (2, 0x04, 0x02)
    );
    load(&mut d);
    let f = d.set_lbp(7, &mut Call::default()).unwrap_err();
    assert_eq!(f.code, reel_plugin_abi::REEL_E_INVALID_ARG, "{}", f.message);
    ok(d.set_lbp(REEL_LBP_CRC32C, &mut Call::default()));
}

#[test]
fn overwrites_are_violations_except_a_relabel_at_bot() {
    let mut rig = Rig::new("sim.calibrated=true");
    let mut d = mount(&mut rig, 0, 0);
    layout(&mut d);
    ok(d.locate(3, &mut Call::default()));
    ok(write(&mut d, &[9u8; 10])); // truncates what follows
    let st = ok(d.statistics(&mut Call::default()));
    assert_eq!((st.writes_not_at_eod, st.relabels), (1, 0));
    ok(d.space(reel_plugin_abi::REEL_SPACE_EOD, 0, &mut Call::default()));
    assert_eq!(ok(d.read_position(&mut Call::default())).block, 4);
    ok(d.rewind(&mut Call::default()));
    ok(write(&mut d, &[7u8; 10]));
    let st = ok(d.statistics(&mut Call::default()));
    assert_eq!((st.writes_not_at_eod, st.relabels), (1, 1));
    let c = rig.control(r#"{"op":"counters"}"#).unwrap();
    assert_eq!(c["violations"], 1);
    assert_eq!(c["relabels"], 1);
    assert_eq!(c["basis"], "SIMULATED");
    assert_eq!(c["robot_moves"], 1);
}

#[test]
fn lbp_mode_checks_crc_and_survives_a_reload() {
    let mut rig = Rig::new("sim.calibrated=true");
    let mut d = mount(&mut rig, 0, 0);
    ok(d.set_lbp(REEL_LBP_CRC32C, &mut Call::default()));
    ok(d.unload(&mut Call::default()));
    load(&mut d);
    let r = vec![3u8; 64];
    let f = d
        .write_record(&r, Some(0xDEAD_BEEF), &mut Call::default())
        .unwrap_err();
    assert_eq!(sense(&f), (0xB, 0x10, 0x01), "mode kept across the reload");
    let f = d.write_record(&r, None, &mut Call::default()).unwrap_err();
    assert_eq!(sense(&f), (0xB, 0x10, 0x01), "a record without its CRC");
    assert_eq!(
        ok(d.read_position(&mut Call::default())).block,
        0,
        "nothing written"
    );
    ok(d.write_record(&r, Some(crc32c::crc32c(&r)), &mut Call::default()));
    // An ILI read under LBP still says the record's CRC as stored (the whole record's).
    ok(d.locate(0, &mut Call::default()));
    let mut small = [0u8; 10];
    let f = d.read_record(&mut small, &mut Call::default()).unwrap_err();
    assert_ne!(f.flags & REEL_FLAG_ILI, 0);
    assert_eq!(f.crc, Some(crc32c::crc32c(&r)));
    assert_eq!(f.transferred, 10);
}

#[test]
fn changer_addresses_barcodes_worm_and_errors() {
    let mut rig = Rig::new("sim.worm_cartridges=2");
    let inv = rig.lib.inventory(&mut Call::default()).unwrap();
    assert_eq!(inv[0].address, 1, "picker");
    let slots: Vec<_> = inv.iter().filter(|e| e.address >= 1024).collect();
    assert_eq!(slots[5].barcode, "RL0006L9");
    assert_eq!(slots[6].barcode, "RL0007LZ");
    assert_ne!(slots[6].flags & REEL_ELEMENT_WORM, 0);
    let ie: Vec<_> = inv
        .iter()
        .filter(|e| e.kind == REEL_ELEMENT_IMPORT_EXPORT)
        .collect();
    assert_eq!(
        ie.iter().map(|e| e.address).collect::<Vec<_>>(),
        vec![768, 769, 770, 771]
    );
    let mut c = Call::default();
    let f = rig.lib.move_medium(1024 + 15, 256, &mut c).unwrap_err();
    assert_eq!(sense(&f), (5, 0x3B, 0x0E), "source empty");
    let f = rig.lib.move_medium(1024, 1025, &mut c).unwrap_err();
    assert_eq!(sense(&f), (5, 0x3B, 0x0D), "destination full");
    let f = rig.lib.move_medium(1024, 9999, &mut c).unwrap_err();
    assert_eq!(sense(&f), (5, 0x21, 0x01), "no such element");
    // Loaded cartridges cannot be pulled; export/import through the mail slots.
    let _d = mount(&mut rig, 0, 0);
    let f = rig.lib.move_medium(256, 1024, &mut c).unwrap_err();
    assert_eq!(sense(&f), (5, 0x53, 0x02));
    rig.lib.export(1025, 768, &mut c).unwrap();
    assert!((secs(&c) - 8.0).abs() < 1e-9);
    rig.lib.import(768, 1025, &mut c).unwrap();
    let r = rig
        .control(r#"{"op":"ie_insert","ie":1,"barcode":"RL0100L9"}"#)
        .unwrap();
    assert_eq!(r["ok"], true);
    rig.lib.import(769, 1024 + 12, &mut c).unwrap();
}

#[test]
fn robot_time_is_charged_to_the_drive_it_serves() {
    let mut rig = Rig::new("sim.calibrated=true");
    rig.mv(slot_addr(0), drive_addr(1));
    let mut d1 = rig.drive(1);
    let mut d0 = rig.drive(0);
    assert_eq!(
        ok(d1.statistics(&mut Call::default())).mount_ns,
        8_000_000_000
    );
    assert_eq!(ok(d0.statistics(&mut Call::default())).mount_ns, 0);
}

#[test]
fn config_errors_name_the_key() {
    let dir = tempfile::tempdir().unwrap();
    let cfg = format!("dir={};sim.robot_seconds=3", dir.path().display());
    let f = SimLibrary::open(&cfg, &mut Call::default()).err().unwrap();
    assert!(f.message.contains("sim.robot_seconds"), "{}", f.message);
    let f = SimLibrary::open("sim.drives=2", &mut Call::default())
        .err()
        .unwrap();
    assert!(f.message.contains("dir"), "{}", f.message);
}

#[test]
fn a_library_directory_opens_once_at_a_time() {
    let rig = Rig::new("");
    let cfg = format!("dir={}", rig.dir.path().display());
    let f = SimLibrary::open(&cfg, &mut Call::default()).err().unwrap();
    assert!(f.message.contains("already open"), "{}", f.message);
}

#[test]
fn a_lone_small_record_starts_the_tape_unless_a_start_threshold_is_set() {
    // Seed 000's rule (the default): a 100-byte record starts the positioned tape, drains at
    // once, and the record that follows 10 ms later pays an underrun. With the opt-in start
    // threshold the tape waits for the data set and streams both without a stop.
    for (extra, underruns) in [("", 1), (";sim.start_bytes=4194304", 0)] {
        let mut rig = Rig::new(&format!("sim.calibrated=true{extra}"));
        let mut d = mount(&mut rig, 0, 0);
        rig.control(r#"{"op":"feed","drive":0,"arrivals_ms":[0,10]}"#)
            .unwrap();
        ok(write(&mut d, &[7u8; 100]));
        ok(write(&mut d, &vec![7u8; 8 << 20]));
        ok(d.write_filemarks(1, false, &mut Call::default()));
        let st = ok(d.statistics(&mut Call::default()));
        assert_eq!(st.backhitch_underrun, underruns, "config {extra:?}");
    }
}

#[test]
fn synthetic_arrival_times_drive_the_backhitches() {
    let mut rig = Rig::new("sim.calibrated=true;sim.start_bytes=0");
    let mut d = mount(&mut rig, 0, 0);
    // Three records: the second arrives 10 s after the first (the buffer ran dry: an underrun),
    // the third right behind it.
    rig.control(r#"{"op":"feed","drive":0,"arrivals_ms":[0,10000,10001]}"#)
        .unwrap();
    for _ in 0..3 {
        ok(write(&mut d, &[1u8; 4096]));
    }
    ok(d.write_filemarks(1, false, &mut Call::default()));
    ok(write(&mut d, &[1u8; 4096])); // after a synchronous filemark: one sync backhitch
    let st = ok(d.statistics(&mut Call::default()));
    assert_eq!((st.backhitch_underrun, st.backhitch_sync), (1, 1));
    let c = rig.control(r#"{"op":"counters"}"#).unwrap();
    assert_eq!(c["drives"][0]["backhitch_underrun"], 1);
}

#[test]
fn a_header_handed_over_with_its_first_data_record_does_not_stop_the_tape() {
    // Seed 000's rule: a 100-byte record alone starts the positioned tape and drains at once,
    // so a data record that follows on the host's clock finds it stopped (an underrun). Handed
    // over in one call (ABI 1.4 write_records) they arrive together: the tape streams on.
    use reel_plugin_abi::sdk::WriteRecord;
    for together in [false, true] {
        let mut rig = Rig::new("sim.calibrated=true");
        let mut d = mount(&mut rig, 0, 0);
        let header = [7u8; 100];
        let data = vec![7u8; 8 << 20];
        if together {
            let list = [
                WriteRecord {
                    data: &header,
                    crc: None,
                },
                WriteRecord {
                    data: &data,
                    crc: None,
                },
            ];
            let (n, r) = d.write_records(&list, &mut Call::default());
            ok(r);
            assert_eq!(n, 2);
        } else {
            ok(write(&mut d, &header));
            std::thread::sleep(std::time::Duration::from_millis(2));
            ok(write(&mut d, &data));
        }
        ok(d.write_filemarks(1, false, &mut Call::default()));
        let st = ok(d.statistics(&mut Call::default()));
        assert_eq!(
            st.backhitch_underrun,
            u64::from(!together),
            "together: {together}"
        );
    }
}
