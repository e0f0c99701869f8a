//! Every fault of the seed's vocabulary (docs/SIMULATOR.md) fires once, with its sense, and
//! the next call behaves as the seed says.

mod common;

use common::*;
use reel_plugin_abi::sdk::{Call, Drive};
use reel_plugin_abi::{REEL_FLAG_DEFERRED, REEL_FLAG_EOM, REEL_LBP_CRC32C, REEL_POS_UNKNOWN};

fn rec(n: usize, seed: u8) -> Vec<u8> {
    (0..n)
        .map(|i| (i as u8).wrapping_mul(31).wrapping_add(seed))
        .collect()
}

fn rig_with_drive() -> (Rig, reel_plugin_sim::drive::SimDrive) {
    let mut rig = Rig::new("sim.calibrated=true;sim.worm_cartridges=1");
    let d = mount(&mut rig, 0, 0);
    (rig, d)
}

fn crc(b: &[u8]) -> Option<u32> {
    Some(crc32c::crc32c(b))
}

#[test]
fn corrupt_in_transit_on_write_is_refused_under_lbp_and_stored_damaged_without() {
    let (mut rig, mut d) = rig_with_drive();
    ok(d.set_lbp(REEL_LBP_CRC32C, &mut Call::default()));
    let r = rec(4096, 1);
    rig.control(r#"{"op":"fault","kind":"corrupt_write","drive":0,"offset":10}"#)
        .unwrap();
    let f = d
        .write_record(&r, crc(&r), &mut Call::default())
        .unwrap_err();
    assert_eq!(sense(&f), (0xB, 0x10, 0x01));
    // Nothing written; the next write goes through.
    assert_eq!(ok(d.read_position(&mut Call::default())).block, 0);
    ok(d.write_record(&r, crc(&r), &mut Call::default()));
    // Without LBP the damaged record is stored.
    ok(d.set_lbp(0, &mut Call::default()));
    rig.control(r#"{"op":"fault","kind":"corrupt_write","drive":0,"offset":10}"#)
        .unwrap();
    ok(write(&mut d, &r));
    ok(d.locate(1, &mut Call::default()));
    let mut b = vec![0u8; 4096];
    ok(d.read_record(&mut b, &mut Call::default()));
    assert_ne!(b, r);
    assert_eq!(b[10], r[10] ^ 0xFF);
}

#[test]
fn corrupt_in_transit_on_read_is_caught_by_the_crc() {
    let (mut rig, mut d) = rig_with_drive();
    ok(d.set_lbp(REEL_LBP_CRC32C, &mut Call::default()));
    let r = rec(4096, 2);
    ok(d.write_record(&r, crc(&r), &mut Call::default()));
    ok(d.rewind(&mut Call::default()));
    rig.control(r#"{"op":"fault","kind":"corrupt_read","drive":0,"offset":7}"#)
        .unwrap();
    let mut b = vec![0u8; 4096];
    let got = ok(d.read_record(&mut b, &mut Call::default()));
    assert_eq!(got.crc, crc(&r), "the CRC of the record as stored");
    assert_ne!(got.crc, crc(&b), "the host's check finds the damage");
    // Consumed: the next read is clean.
    ok(d.rewind(&mut Call::default()));
    let got = ok(d.read_record(&mut b, &mut Call::default()));
    assert_eq!(b, r);
    assert_eq!(got.crc, crc(&b));
}

#[test]
fn medium_error_at_cartridge_and_block_then_retry_succeeds() {
    let (mut rig, mut d) = rig_with_drive();
    for i in 0..3 {
        ok(write(&mut d, &rec(1000, i)));
    }
    ok(d.rewind(&mut Call::default()));
    rig.control(r#"{"op":"fault","kind":"medium_error","barcode":"RL0001L9","block":1}"#)
        .unwrap();
    let mut b = vec![0u8; 1000];
    ok(d.read_record(&mut b, &mut Call::default()));
    let (r, t) = timed(&mut d, |d, c| d.read_record(&mut b, c));
    assert_eq!(sense(&r.unwrap_err()), (3, 0x11, 0));
    assert!(t >= 5.0, "a read-retry reposition (5 s) is charged: {t}");
    assert_eq!(ok(d.read_position(&mut Call::default())).block, 1);
    ok(d.read_record(&mut b, &mut Call::default()));
    assert_eq!(b, rec(1000, 1));
    let st = ok(d.statistics(&mut Call::default()));
    assert_eq!(st.repositions, 1);
    // An uncorrected read error, counted as a drive's log page 03h counts it; the model has
    // no soft errors, so nothing corrected, and all four counters are valid.
    assert_eq!(
        (
            st.read_errors_uncorrected,
            st.read_errors_corrected,
            st.write_errors_corrected,
            st.write_errors_uncorrected
        ),
        (1, 0, 0, 0)
    );
    assert_eq!(st.valid >> 16 & 0xF, 0xF);
}

#[test]
fn deferred_write_error_at_the_next_synchronous_filemark() {
    let (mut rig, mut d) = rig_with_drive();
    ok(write(&mut d, &rec(1000, 0)));
    ok(d.write_filemarks(1, false, &mut Call::default()));
    rig.control(r#"{"op":"fault","kind":"deferred_write_error","drive":0}"#)
        .unwrap();
    ok(write(&mut d, &rec(1000, 1)));
    ok(d.write_filemarks(1, true, &mut Call::default())); // immediate: not a sync point
    let f = d
        .write_filemarks(1, false, &mut Call::default())
        .unwrap_err();
    assert_eq!(sense(&f), (3, 0x0C, 0));
    assert_ne!(f.flags & REEL_FLAG_DEFERRED, 0);
    // The buffered record and filemarks are gone; the position is the end of data.
    assert_eq!(ok(d.read_position(&mut Call::default())).block, 2);
    ok(write(&mut d, &rec(1000, 2)));
    ok(d.write_filemarks(1, false, &mut Call::default()));
}

#[test]
fn short_write_stores_a_prefix_and_reports_the_residue() {
    let (mut rig, mut d) = rig_with_drive();
    rig.control(r#"{"op":"fault","kind":"short_write","drive":0,"bytes":100}"#)
        .unwrap();
    let f = write(&mut d, &rec(1000, 0)).unwrap_err();
    assert_eq!(sense(&f), (3, 0x0C, 0));
    assert_eq!(f.residue, 900);
    ok(write(&mut d, &rec(1000, 1)));
    ok(d.rewind(&mut Call::default()));
    let mut b = vec![0u8; 2000];
    assert_eq!(ok(d.read_record(&mut b, &mut Call::default())).len, 100);
    assert_eq!(ok(d.read_record(&mut b, &mut Call::default())).len, 1000);
}

#[test]
fn silent_corruption_on_write_and_of_a_stored_record_pass_lbp() {
    let (mut rig, mut d) = rig_with_drive();
    ok(d.set_lbp(REEL_LBP_CRC32C, &mut Call::default()));
    let (a, b2, c) = (rec(512, 1), rec(512, 2), rec(512, 3));
    rig.control(r#"{"op":"fault","kind":"silent_corrupt_write","drive":0,"offset":3}"#)
        .unwrap();
    ok(d.write_record(&a, crc(&a), &mut Call::default()));
    ok(d.write_record(&b2, crc(&b2), &mut Call::default()));
    ok(d.write_record(&c, crc(&c), &mut Call::default()));
    ok(d.write_filemarks(1, false, &mut Call::default()));
    rig.control(
        r#"{"op":"fault","kind":"corrupt_stored","barcode":"RL0001L9","block":2,"offset":9}"#,
    )
    .unwrap();
    ok(d.rewind(&mut Call::default()));
    let mut buf = vec![0u8; 512];
    for (want, off) in [(&a, Some(3usize)), (&b2, None), (&c, Some(9))] {
        let got = ok(d.read_record(&mut buf, &mut Call::default()));
        // The drive returns the CRC of what it stored: LBP passes, the bytes are wrong.
        assert_eq!(got.crc, crc(&buf));
        match off {
            Some(o) => assert_eq!(buf[o], want[o] ^ 0xFF),
            None => assert_eq!(&buf, want),
        }
    }
}

#[test]
fn unit_attention_and_position_lost() {
    let (mut rig, mut d) = rig_with_drive();
    ok(write(&mut d, &rec(100, 0)));
    rig.control(r#"{"op":"fault","kind":"unit_attention","drive":0}"#)
        .unwrap();
    let f = write(&mut d, &rec(100, 1)).unwrap_err();
    assert_eq!(sense(&f), (6, 0x29, 0));
    ok(write(&mut d, &rec(100, 1)));
    assert_eq!(ok(d.read_position(&mut Call::default())).block, 2);

    rig.control(r#"{"op":"fault","kind":"position_lost","drive":0}"#)
        .unwrap();
    assert_eq!(
        sense(&d.test_ready(&mut Call::default()).unwrap_err()),
        (6, 0x29, 0)
    );
    let p = ok(d.read_position(&mut Call::default()));
    assert_ne!(p.flags & REEL_POS_UNKNOWN, 0);
    assert_eq!(
        sense(&write(&mut d, &rec(100, 2)).unwrap_err()),
        (5, 0x2C, 0)
    );
    ok(d.locate(2, &mut Call::default()));
    ok(write(&mut d, &rec(100, 2)));
}

#[test]
fn drive_fault_and_cleaning_required_hit_the_next_command_once() {
    let (mut rig, mut d) = rig_with_drive();
    rig.control(r#"{"op":"fault","kind":"drive_fault","drive":0}"#)
        .unwrap();
    assert_eq!(
        sense(&d.test_ready(&mut Call::default()).unwrap_err()),
        (4, 0x44, 0)
    );
    ok(d.test_ready(&mut Call::default()));
    rig.control(r#"{"op":"fault","kind":"cleaning_required","drive":0}"#)
        .unwrap();
    assert_eq!(
        sense(&d.test_ready(&mut Call::default()).unwrap_err()),
        (0, 0x00, 0x17)
    );
    ok(d.test_ready(&mut Call::default()));
    assert_ne!(
        ok(d.tape_alerts(&mut Call::default())) & (1 << 19),
        0,
        "TapeAlert 20"
    );
    rig.control(r#"{"op":"clean","drive":0}"#).unwrap();
    assert_eq!(ok(d.tape_alerts(&mut Call::default())), 0);
}

#[test]
fn disarm_drops_the_faults_not_met_yet() {
    let (mut rig, mut d) = rig_with_drive();
    rig.control(r#"{"op":"fault","kind":"drive_fault","drive":0}"#)
        .unwrap();
    rig.control(r#"{"op":"fault","kind":"short_write","drive":0,"bytes":10}"#)
        .unwrap();
    rig.control(r#"{"op":"fault","kind":"early_warning","drive":0,"bytes":0}"#)
        .unwrap();
    rig.control(r#"{"op":"disarm","drive":0}"#).unwrap();
    ok(d.test_ready(&mut Call::default()));
    ok(write(&mut d, &rec(100, 0)));
    ok(write(&mut d, &rec(100, 1)));
    ok(d.locate(0, &mut Call::default()));
    let mut buf = vec![0u8; 4096];
    assert_eq!(ok(d.read_record(&mut buf, &mut Call::default())).len, 100);
}

#[test]
fn drive_dies_after_n_records_and_the_robot_pulls_the_cartridge() {
    let (mut rig, mut d) = rig_with_drive();
    ok(write(&mut d, &rec(100, 0)));
    ok(d.write_filemarks(1, false, &mut Call::default()));
    rig.control(r#"{"op":"fault","kind":"drive_dies","drive":0,"after_records":2}"#)
        .unwrap();
    ok(write(&mut d, &rec(100, 1)));
    ok(write(&mut d, &rec(100, 2)));
    for _ in 0..2 {
        assert_eq!(
            sense(&d.test_ready(&mut Call::default()).unwrap_err()),
            (4, 0x44, 0)
        );
    }
    let rep = rig.control(r#"{"op":"robot_recover","drive":0}"#).unwrap();
    assert_eq!(rep["ok"], true);
    // The replaced drive reports a power-on reset once.
    assert_eq!(
        sense(&d.test_ready(&mut Call::default()).unwrap_err()),
        (6, 0x29, 0)
    );
    // The cartridge is home; its buffer was lost: only the synced record and filemark remain.
    let mut d = mount(&mut rig, 0, 0);
    ok(d.space(reel_plugin_abi::REEL_SPACE_EOD, 0, &mut Call::default()));
    assert_eq!(ok(d.read_position(&mut Call::default())).block, 2);
}

#[test]
fn early_warning_then_end_of_medium() {
    let (mut rig, mut d) = rig_with_drive();
    rig.control(r#"{"op":"fault","kind":"early_warning","drive":0,"bytes":250}"#)
        .unwrap();
    ok(write(&mut d, &rec(100, 0)));
    ok(write(&mut d, &rec(100, 1)));
    let f = write(&mut d, &rec(100, 2)).unwrap_err();
    assert_eq!(sense(&f), (0, 0x00, 0x02));
    assert_ne!(f.flags & REEL_FLAG_EOM, 0);
    assert_eq!(
        ok(d.read_position(&mut Call::default())).block,
        3,
        "written"
    );
    let r = rig
        .control(r#"{"op":"fault","kind":"end_of_medium","drive":0,"bytes":150}"#)
        .unwrap();
    assert_eq!(r, serde_json::json!({"ok": true}));
    let _ = write(&mut d, &rec(100, 3)); // still before the end: written with EW
    let f = write(&mut d, &rec(100, 4)).unwrap_err();
    assert_eq!(sense(&f), (0xD, 0x00, 0x02));
    assert_ne!(f.flags & REEL_FLAG_EOM, 0);
    assert_eq!(
        ok(d.read_position(&mut Call::default())).block,
        4,
        "nothing written"
    );
}

#[test]
fn worm_overwrite_fault_and_worm_media() {
    let (mut rig, mut d) = rig_with_drive();
    rig.control(r#"{"op":"fault","kind":"worm_overwrite","drive":0}"#)
        .unwrap();
    assert_eq!(
        sense(&write(&mut d, &rec(10, 0)).unwrap_err()),
        (7, 0x30, 0x0C)
    );
    ok(write(&mut d, &rec(10, 0)));
    // The last cartridge is WORM: appending works, a rewrite at BOT is refused.
    ok(d.unload(&mut Call::default()));
    rig.mv(drive_addr(0), slot_addr(0));
    let mut w = mount(&mut rig, 7, 1);
    ok(write(&mut w, &rec(10, 1)));
    ok(write(&mut w, &rec(10, 2)));
    ok(w.rewind(&mut Call::default()));
    assert_eq!(
        sense(&write(&mut w, &rec(10, 3)).unwrap_err()),
        (7, 0x30, 0x0C)
    );
    ok(w.locate(1, &mut Call::default()));
    assert_eq!(
        sense(&write(&mut w, &rec(10, 3)).unwrap_err()),
        (7, 0x30, 0x0C)
    );
}

#[test]
fn foreign_cartridge_and_mam_epoch_bumped_by_another_host() {
    let mut rig = Rig::new("sim.calibrated=true");
    rig.control(r#"{"op":"fault","kind":"foreign_cartridge","barcode":"RL0002L9"}"#)
        .unwrap();
    let r = rig
        .control(r#"{"op":"fault","kind":"mam_epoch_bump","barcode":"RL0002L9"}"#)
        .unwrap();
    assert_eq!(r["epoch"], 1);
    let mut d = mount(&mut rig, 1, 0);
    let mut b = vec![0u8; 1024];
    let got = ok(d.read_record(&mut b, &mut Call::default()));
    assert_eq!(got.len, 80);
    assert!(b.starts_with(b"VOL1RL0002"));
    let e = ok(d.mam_read(reel_plugin_abi::mam::REEL_LABEL_EPOCH, &mut Call::default()));
    assert_eq!(e, 1u64.to_be_bytes());
    let r = rig
        .control(r#"{"op":"fault","kind":"mam_epoch_bump","barcode":"RL0002L9"}"#)
        .unwrap();
    assert_eq!(r["epoch"], 2);
}

#[test]
fn power_cut_drops_every_drive_buffer() {
    let mut rig = Rig::new("sim.calibrated=true;sim.buffer_bytes=1000");
    let mut d0 = mount(&mut rig, 0, 0);
    let mut d1 = mount(&mut rig, 1, 1);
    ok(write(&mut d0, &rec(100, 0)));
    ok(d0.write_filemarks(1, false, &mut Call::default()));
    for i in 0..30 {
        ok(write(&mut d0, &rec(100, i))); // 3000 bytes: the first 2000 left the buffer
        ok(write(&mut d1, &rec(100, i)));
    }
    let r = rig.control(r#"{"op":"power_cut"}"#).unwrap();
    assert_eq!(r["ok"], true);
    // Power on: unit attention, position unknown until a rewind or locate.
    assert_eq!(
        sense(&d0.test_ready(&mut Call::default()).unwrap_err()),
        (6, 0x29, 0)
    );
    ok(d0.rewind(&mut Call::default()));
    ok(d0.space(reel_plugin_abi::REEL_SPACE_EOD, 0, &mut Call::default()));
    let eod = ok(d0.read_position(&mut Call::default())).block;
    // 1 record + filemark synced, then 20 records committed past the 1000-byte buffer.
    assert_eq!(eod, 2 + 20);
    let _ = d1.test_ready(&mut Call::default());
    ok(d1.rewind(&mut Call::default()));
    ok(d1.space(reel_plugin_abi::REEL_SPACE_EOD, 0, &mut Call::default()));
    assert_eq!(ok(d1.read_position(&mut Call::default())).block, 20);
}

#[test]
fn power_cut_armed_on_a_drive_fires_after_its_nth_record_and_once() {
    let mut rig = Rig::new("sim.calibrated=true;sim.buffer_bytes=1000");
    let mut d0 = mount(&mut rig, 0, 0);
    let mut d1 = mount(&mut rig, 1, 1);
    ok(write(&mut d0, &rec(100, 0)));
    ok(d0.write_filemarks(1, false, &mut Call::default()));
    let e = rig
        .control(r#"{"op":"fault","kind":"power_cut","drive":0,"after_records":0}"#)
        .unwrap_err();
    assert!(e.message.contains("after_records"), "{}", e.message);
    for d in 0..2 {
        rig.control(&format!(
            r#"{{"op":"fault","kind":"power_cut","drive":{d},"after_records":30}}"#
        ))
        .unwrap();
    }
    for i in 0..29 {
        ok(write(&mut d0, &rec(100, i)));
        ok(write(&mut d1, &rec(100, i)));
    }
    // Drive 1's buffer is still whole until drive 0's 30th record cuts the power for both.
    ok(d1.test_ready(&mut Call::default()));
    ok(write(&mut d0, &rec(100, 29)));
    for d in [&mut d0, &mut d1] {
        assert_eq!(
            sense(&d.test_ready(&mut Call::default()).unwrap_err()),
            (6, 0x29, 0)
        );
        ok(d.rewind(&mut Call::default()));
    }
    // 1 record + filemark synced, then 20 of drive 0's 30 records past its 1000-byte buffer;
    // 19 of drive 1's 29.
    ok(d0.space(reel_plugin_abi::REEL_SPACE_EOD, 0, &mut Call::default()));
    assert_eq!(ok(d0.read_position(&mut Call::default())).block, 2 + 20);
    ok(d1.space(reel_plugin_abi::REEL_SPACE_EOD, 0, &mut Call::default()));
    assert_eq!(ok(d1.read_position(&mut Call::default())).block, 19);
    // The cut took drive 1's countdown with it: its next records do not cut the power again.
    ok(write(&mut d1, &rec(100, 0)));
    ok(write(&mut d1, &rec(100, 1)));
    ok(d0.test_ready(&mut Call::default()));
}

#[test]
fn unknown_fault_and_op_are_named() {
    let mut rig = Rig::new("");
    let e = rig
        .control(r#"{"op":"fault","kind":"gremlins","drive":0}"#)
        .unwrap_err();
    assert!(e.message.contains("gremlins"));
    let e = rig.control(r#"{"op":"nope"}"#).unwrap_err();
    assert!(e.message.contains("nope"));
    let e = rig
        .control(r#"{"op":"fault","kind":"drive_fault"}"#)
        .unwrap_err();
    assert!(e.message.contains("drive"));
}

#[test]
fn records_written_together_stop_at_the_first_that_is_not_plainly_written() {
    use reel_plugin_abi::sdk::WriteRecord;
    let together = |d: &mut reel_plugin_sim::drive::SimDrive, recs: &[Vec<u8>]| {
        let list: Vec<WriteRecord<'_>> = recs
            .iter()
            .map(|r| WriteRecord { data: r, crc: None })
            .collect();
        d.write_records(&list, &mut Call::default())
    };
    // Early warning on the second record: it is written and its answer is the call's; the
    // third is not written.
    let (mut rig, mut d) = rig_with_drive();
    rig.control(r#"{"op":"fault","kind":"early_warning","drive":0,"bytes":150}"#)
        .unwrap();
    let (n, r) = together(&mut d, &[rec(100, 0), rec(100, 1), rec(100, 2)]);
    assert_eq!(n, 1);
    let f = r.unwrap_err();
    assert_eq!(sense(&f), (0, 0x00, 0x02));
    assert_ne!(f.flags & REEL_FLAG_EOM, 0);
    assert_eq!(ok(d.read_position(&mut Call::default())).block, 2);
    // End of medium on the first: nothing written.
    rig.control(r#"{"op":"fault","kind":"end_of_medium","drive":0,"bytes":50}"#)
        .unwrap();
    let (n, r) = together(&mut d, &[rec(100, 3), rec(100, 4)]);
    assert_eq!(n, 0);
    assert_eq!(sense(&r.unwrap_err()), (0xD, 0x00, 0x02));
    assert_eq!(ok(d.read_position(&mut Call::default())).block, 2);

    // A drive that dies after the first record fails the second as a command of its own
    // would.
    let (mut rig, mut d) = rig_with_drive();
    rig.control(r#"{"op":"fault","kind":"drive_dies","drive":0,"after_records":1}"#)
        .unwrap();
    let (n, r) = together(&mut d, &[rec(100, 0), rec(100, 1)]);
    assert_eq!(n, 1);
    assert_eq!(sense(&r.unwrap_err()), (4, 0x44, 0));
}
