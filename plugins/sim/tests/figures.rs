//! The seed's figures (seed 000 §1 and §4.1), reproduced by the model under the INSTANT clock.
//! Every figure here is SIMULATED.

mod common;

use common::*;
use reel_plugin_abi::ReelExtent;
use reel_plugin_abi::sdk::{Call, Drive};
use reel_plugin_abi::seek::{self, CostModel, TapeGeometry};

const MIB: usize = 1 << 20;

/// Write `n` records of `size` bytes on the cartridge in slot 0, unload it, put it back.
fn prepare(rig: &mut Rig, n: usize, size: usize) {
    let mut d = mount(rig, 0, 0);
    let rec = vec![0x5Au8; size];
    for _ in 0..n {
        ok(write(&mut d, &rec));
    }
    ok(d.write_filemarks(1, false, &mut Call::default()));
    ok(d.unload(&mut Call::default()));
    rig.mv(drive_addr(0), slot_addr(0));
}

/// (first byte at mid-tape, whole mount cycle at mid-tape) in modelled seconds.
fn mid_tape_cycle(profile: &str) -> (f64, f64) {
    // A 64 MiB cartridge written to 40 MiB: block 32 starts at exactly half the tape.
    let mut rig = Rig::new(&format!(
        "sim.profile={profile};sim.calibrated=true;sim.capacity_bytes={}",
        64 * MIB
    ));
    prepare(&mut rig, 40, MIB);
    let robot = rig.mv(slot_addr(0), drive_addr(0));
    let mut d = rig.drive(0);
    let (r, load) = timed(&mut d, |d, c| d.load(c));
    ok(r);
    let _ = d.test_ready(&mut Call::default()); // the unit attention after a load
    let (r, locate) = timed(&mut d, |d, c| d.locate(32, c));
    ok(r);
    let first_byte = robot + load + locate;
    let (r, unload) = timed(&mut d, |d, c| d.unload(c));
    ok(r);
    let back = rig.mv(drive_addr(0), slot_addr(0));
    (first_byte, first_byte + unload + back)
}

#[test]
fn lto9_first_byte_75s_and_mount_cycle_148s_at_mid_tape() {
    // Seed §1: robot 8 + load 15 + locate (2 + 100 × 0.5) = 75 s; + rewind (3 + 94 × 0.5)
    // + unload 15 + robot 8 = 148 s.
    let (first, cycle) = mid_tape_cycle("lto9");
    assert!((first - 75.0).abs() < 1e-6, "first byte {first}");
    assert!((cycle - 148.0).abs() < 1e-6, "cycle {cycle}");
}

#[test]
fn simplant_first_byte_about_157s_and_cycle_about_265s() {
    // Seed §1: robot 15 + load 90 + 172 s × 0.6 × 0.5 = 156.6 s ("about 157"); + rewind
    // (50 + 40 × 0.5) + unload 25 + robot 15 = 266.6 s ("about 265", docs/SIMULATOR.md).
    let (first, cycle) = mid_tape_cycle("simplant");
    assert!((first - 157.0).abs() <= 157.0 * 0.01, "first byte {first}");
    assert!((cycle - 265.0).abs() <= 265.0 * 0.01, "cycle {cycle}");
}

#[test]
fn first_load_calibration_two_hours_once_per_cartridge() {
    // Seed §1: N-FIRSTLOAD, 2 h on top of the first load, once, remembered by the cartridge.
    let mut rig = Rig::new("");
    rig.mv(slot_addr(0), drive_addr(0));
    let mut d = rig.drive(0);
    let (r, first) = timed(&mut d, |d, c| d.load(c));
    ok(r);
    assert!((first - (15.0 + 7200.0)).abs() < 1e-6, "{first}");
    let _ = d.test_ready(&mut Call::default());
    ok(d.unload(&mut Call::default()));
    let (r, second) = timed(&mut d, |d, c| d.load(c));
    ok(r);
    assert!((second - 15.0).abs() < 1e-6, "{second}");
}

#[test]
fn synthetic_writer_shoe_shining_table() {
    // Seed §4.1: a synthetic writer at 600/250/150/50/20 MB/s over 512 MiB: 0/0/1/3/8
    // underruns, tape streaming 399/250/89/45/20 MB/s (drive time: streaming + backhitches).
    let rows = [
        (600e6, 0u64, 399.0),
        (250e6, 0, 250.0),
        (150e6, 1, 89.0),
        (50e6, 3, 45.0),
        (20e6, 8, 20.0),
    ];
    let mut rig = Rig::new("sim.calibrated=true");
    let mut d = mount(&mut rig, 0, 0);
    let rec = vec![0xA5u8; MIB];
    for (feed, underruns, mbps) in rows {
        ok(d.rewind(&mut Call::default()));
        rig.control(&format!(
            r#"{{"op":"feed","drive":0,"bytes_per_sec":{feed}}}"#
        ))
        .unwrap();
        let before = ok(d.statistics(&mut Call::default()));
        for _ in 0..512 {
            ok(write(&mut d, &rec));
        }
        ok(d.write_filemarks(1, false, &mut Call::default()));
        let after = ok(d.statistics(&mut Call::default()));
        let busy = (after.busy_ns - before.busy_ns) as f64 / 1e9;
        let rate = (512 * MIB) as f64 / busy / 1e6;
        let u = after.backhitch_underrun - before.backhitch_underrun;
        eprintln!(
            "feed {} MB/s: {u} underruns, streaming {rate:.1} MB/s (SIMULATED)",
            feed / 1e6
        );
        assert_eq!(u, underruns, "feed {feed}");
        assert!(
            (rate - mbps).abs() <= mbps * 0.02 + 0.6,
            "feed {feed}: {rate} vs {mbps}"
        );
    }
    // Rewriting from BOT each round is a relabel, never a violation.
    let st = ok(d.statistics(&mut Call::default()));
    assert_eq!(st.writes_not_at_eod, 0);
    assert_eq!(st.relabels, 4);
}

#[test]
fn serpentine_greedy_order_beats_ascending_by_a_quarter() {
    // Seed §1: 64 MiB cartridge, 8 wraps, INSTANT: 15 extents near both ends of six wraps,
    // 298 s of drive time in recommended order against 430 s ascending (31 % less).
    const REC: usize = 256 << 10; // 32 records a wrap of 8 MiB
    let mut rig = Rig::new(&format!(
        "sim.calibrated=true;sim.locate=serpentine;sim.wraps=8;sim.capacity_bytes={}",
        64 * MIB
    ));
    let mut d = mount(&mut rig, 0, 0);
    let rec = vec![1u8; REC];
    for _ in 0..(7 * 32) {
        ok(write(&mut d, &rec));
    }
    ok(d.write_filemarks(1, false, &mut Call::default()));
    let geo = ok(d.geometry(&mut Call::default()));
    assert_eq!(geo.wraps, 8);
    assert_eq!(geo.eowp, vec![32, 64, 96, 128, 160, 192, 224]);
    // Near both ends of wraps 0..6, and three more near an end.
    let mut extents = Vec::new();
    for w in 0..6u64 {
        extents.push((w * 32 + 1, w * 32 + 2));
        extents.push((w * 32 + 29, w * 32 + 30));
    }
    for w in [1u64, 3, 4] {
        extents.push((w * 32 + 4, w * 32 + 4));
    }
    assert_eq!(extents.len(), 15);
    let ascending = seek::ascending_order(&extents);
    let abi: Vec<ReelExtent> = extents
        .iter()
        .map(|&(f, l)| ReelExtent {
            first_block: f,
            last_block: l,
        })
        .collect();
    ok(d.rewind(&mut Call::default()));
    let native: Vec<usize> = ok(d.rao(&abi, &mut Call::default()))
        .into_iter()
        .map(|i| i as usize)
        .collect();
    // The engine's software RAO from the reported geometry agrees with the drive's.
    let g = TapeGeometry {
        wraps: geo.wraps,
        bands: geo.bands,
        min_lpos: geo.min_lpos,
        max_lpos: geo.max_lpos,
    };
    let plan = seek::plan_order(&g, &geo.eowp, 0, &extents, &CostModel::cta());
    assert_eq!(plan.order, native);

    let mut buf = vec![0u8; REC];
    let mut drive_time = |order: &[usize]| -> f64 {
        ok(d.rewind(&mut Call::default()));
        let before = ok(d.statistics(&mut Call::default())).busy_ns;
        for &i in order {
            let (first, last) = extents[i];
            ok(d.locate(first, &mut Call::default()));
            for _ in first..=last {
                ok(d.read_record(&mut buf, &mut Call::default()));
            }
        }
        (ok(d.statistics(&mut Call::default())).busy_ns - before) as f64 / 1e9
    };
    let asc_s = drive_time(&ascending);
    let rao_s = drive_time(&native);
    eprintln!(
        "serpentine: recommended order {rao_s:.1} s, ascending {asc_s:.1} s, {:.0} % less (SIMULATED)",
        (1.0 - rao_s / asc_s) * 100.0
    );
    assert!(
        rao_s <= 0.75 * asc_s,
        "recommended {rao_s} s vs ascending {asc_s} s"
    );
}
