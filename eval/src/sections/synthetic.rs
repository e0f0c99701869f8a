//! Shoe-shining of a synthetic writer (seed 000 §4.1): a producer at 600, 250, 150, 50 and
//! 20 MB/s feeds 512 MiB of 1 MiB records to one drive through the simulator's synthetic
//! timeline; the drive's underruns and streaming rate (bytes over drive busy time) must match
//! the seed's table. The size is the seed's in quick mode too: the figures depend on it.

use anyhow::{Result, anyhow};
use serde_json::json;

use crate::rig::{SimRig, busy_s};
use crate::row::{Basis, Row, Target};
use crate::sections::Ctx;

const SECTION: &str = "Synthetic writer 600 / 250 / 150 / 50 / 20 MB/s";
const MIB: usize = 1 << 20;

/// (feed MB/s, seed underruns, seed streaming MB/s) — seed 000 §4.1.
const SEED: [(f64, u64, f64); 5] = [
    (600.0, 0, 399.0),
    (250.0, 0, 250.0),
    (150.0, 1, 89.0),
    (50.0, 3, 45.0),
    (20.0, 8, 20.0),
];

/// Run the section.
pub fn run(ctx: &Ctx) -> Result<Vec<Row>> {
    let mut rig = SimRig::new(&ctx.plugin, &ctx.scratch, &ctx.model, "sim.cartridges=5")?;
    let rec = vec![0xA5u8; MIB];
    let records = 512u64;
    let mut rows = Vec::new();
    for (slot, &(feed, seed_underruns, seed_mbps)) in SEED.iter().enumerate() {
        let (mut d, _mount) = rig.mount(slot as u32, 0)?;
        rig.control(&format!(
            r#"{{"op":"feed","drive":0,"bytes_per_sec":{}}}"#,
            feed * 1e6
        ))?;
        let before = d.statistics().map_err(|e| anyhow!("statistics: {e}"))?;
        let busy0 = busy_s(&mut d)?;
        for _ in 0..records {
            d.write_record(&rec, None)
                .map_err(|e| anyhow!("write at {feed} MB/s: {e}"))?;
        }
        d.write_filemarks(1, false)
            .map_err(|e| anyhow!("filemark: {e}"))?;
        let after = d.statistics().map_err(|e| anyhow!("statistics: {e}"))?;
        let busy = busy_s(&mut d)? - busy0;
        let bytes = records * MIB as u64;
        let rate = bytes as f64 / busy / 1e6;
        let underruns = after.backhitch_underrun - before.backhitch_underrun;
        let profile = json!({
            "busy_s": busy,
            "streaming_s": (after.streaming_ns - before.streaming_ns) as f64 / 1e9,
            "backhitch_underrun": underruns,
            "backhitch_sync": after.backhitch_sync - before.backhitch_sync,
            "bytes": bytes,
        });
        let workload = format!(
            "synthetic producer at {feed} MB/s ({{\"op\":\"feed\"}}), 512 MiB in 1 MiB records, \
             one sync filemark; drive busy time. A bare drive, not a job: the figure is the \
             drive model's answer to a feed rate, which no scheduling or orchestration changes"
        );
        rows.push(
            Row::info(
                SECTION,
                &format!("{feed} MB/s feed: underruns"),
                underruns as f64,
                "underruns",
                Basis::Simulated,
            )
            .seed(seed_underruns as f64)
            .target(
                Target::Equals(seed_underruns as f64),
                &format!("{seed_underruns} (the seed's table)"),
            )
            .note(workload.clone())
            .profile(profile.clone()),
        );
        // The seed prints whole MB/s; the model's first record streams at the floor before
        // the feed is known (docs/SIMULATOR.md §6): 2 % + rounding.
        let tol = seed_mbps * 0.02 + 0.6;
        // The bound: the tape cannot stream faster than the feed or the native rate.
        let bound = (feed * 1e6).min(ctx.model.stream_bps) / 1e6;
        rows.push(
            Row::info(
                SECTION,
                &format!("{feed} MB/s feed: tape streaming"),
                rate,
                "MB/s",
                Basis::Simulated,
            )
            .seed(seed_mbps)
            .target(
                Target::Within(seed_mbps, tol),
                &format!("{seed_mbps} MB/s ± {tol:.1} (the seed's table)"),
            )
            .bound(bound)
            .note(workload)
            .profile(profile),
        );
        rig.dismount(d, slot as u32)?;
    }
    let c = rig.counters()?;
    rows.push(crate::sections::eod_row(SECTION, c.violations));
    Ok(rows)
}
