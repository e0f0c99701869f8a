//! Cartridges, their records, calibration, MAM and the element layout survive closing and
//! reopening the library; a power cut keeps only what reached the medium.

mod common;

use common::*;
use reel_plugin_abi::sdk::{Call, Drive, Library};
use reel_plugin_abi::{REEL_ELEMENT_DRIVE, REEL_ELEMENT_SLOT, REEL_SPACE_EOD};

#[test]
fn records_calibration_mam_and_layout_survive_reopen() {
    let mut rig = Rig::new(""); // uncalibrated cartridges
    let mut d = mount(&mut rig, 2, 0);
    for i in 0..5u8 {
        ok(write(&mut d, &vec![i; 3000]));
    }
    ok(d.write_filemarks(1, false, &mut Call::default()));
    ok(d.mam_write(0x0803, b"my label", &mut Call::default()));
    ok(d.unload(&mut Call::default()));
    rig.mv(drive_addr(0), slot_addr(9)); // moved to another slot
    drop(d);
    rig.reopen();

    let inv = rig.lib.inventory(&mut Call::default()).unwrap();
    let slot9 = inv
        .iter()
        .find(|e| e.kind == REEL_ELEMENT_SLOT && e.index == 9)
        .unwrap();
    assert_eq!(slot9.barcode, "RL0003L9");
    let slot2 = inv
        .iter()
        .find(|e| e.kind == REEL_ELEMENT_SLOT && e.index == 2)
        .unwrap();
    assert!(slot2.barcode.is_empty());

    rig.mv(slot_addr(9), drive_addr(1));
    let mut d = rig.drive(1);
    let (r, t) = timed(&mut d, |d, c| d.load(c));
    ok(r);
    assert!(
        (t - 15.0).abs() < 1e-6,
        "calibration remembered: no second 2 h ({t} s)"
    );
    let _ = d.test_ready(&mut Call::default());
    assert_eq!(ok(d.mam_read(0x0803, &mut Call::default())), b"my label");
    assert_eq!(
        ok(d.mam_read(reel_plugin_abi::mam::LOAD_COUNT, &mut Call::default())),
        2u64.to_be_bytes()
    );
    let mut b = vec![0u8; 4000];
    for i in 0..5u8 {
        let r = ok(d.read_record(&mut b, &mut Call::default()));
        assert_eq!(r.len, 3000);
        assert!(b[..3000].iter().all(|x| *x == i));
    }
}

#[test]
fn a_cartridge_left_in_a_drive_is_still_there_after_reopen() {
    let mut rig = Rig::new("sim.calibrated=true");
    let mut d = mount(&mut rig, 0, 1);
    ok(write(&mut d, &[1u8; 100]));
    drop(d);
    rig.reopen(); // the closed library flushes what the drive was given
    let inv = rig.lib.inventory(&mut Call::default()).unwrap();
    let drive1 = inv
        .iter()
        .find(|e| e.kind == REEL_ELEMENT_DRIVE && e.index == 1)
        .unwrap();
    assert_eq!(drive1.barcode, "RL0001L9");
    let mut d = rig.drive(1);
    assert_eq!(
        sense(&d.test_ready(&mut Call::default()).unwrap_err()),
        (2, 0x04, 0x02)
    );
    load(&mut d);
    ok(d.space(REEL_SPACE_EOD, 0, &mut Call::default()));
    assert_eq!(ok(d.read_position(&mut Call::default())).block, 1);
}

#[test]
fn power_cut_then_reopen_shows_only_what_was_synced() {
    let mut rig = Rig::new("sim.calibrated=true");
    let mut d = mount(&mut rig, 0, 0);
    ok(write(&mut d, &[1u8; 100]));
    ok(d.write_filemarks(1, false, &mut Call::default()));
    ok(write(&mut d, &[2u8; 100])); // only in the 1 GiB drive buffer
    rig.control(r#"{"op":"power_cut"}"#).unwrap();
    drop(d);
    rig.reopen();
    let mut d = rig.drive(0);
    load(&mut d);
    ok(d.space(REEL_SPACE_EOD, 0, &mut Call::default()));
    assert_eq!(ok(d.read_position(&mut Call::default())).block, 2);
}
