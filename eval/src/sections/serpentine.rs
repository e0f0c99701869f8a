//! Recall order on a serpentine cartridge: a full 64 GiB cartridge of 280 wraps, 100 random
//! extents, read in request order, ascending block order and the recommended (greedy,
//! cost-model) order; drive busy time of each (SIMULATED).
//!
//! Filling 64 GiB through the drive would write 64 GiB to this machine's disk. The cartridge
//! is instead laid out directly in the simulator's documented on-disk format
//! (docs/SIMULATOR.md §5: `data` records back to back, `index` 24-byte entries): `data` is a
//! sparse file of the full length and only the records of the 100 extents hold real bytes, a
//! keyed pattern checked byte for byte on every read. The simulator then opens it as any
//! cartridge written earlier; positions, geometry (EOWP) and locate times are its own.

use std::fs::OpenOptions;
use std::os::unix::fs::FileExt;
use std::path::{Path, PathBuf};

use anyhow::{Context, Result, anyhow, bail};
use rand::{Rng, SeedableRng, rngs::StdRng};
use reel_plugin_abi::ReelExtent;
use reel_plugin_abi::host::DriveHandle;
use reel_plugin_abi::seek::{self, CostModel, TapeGeometry};
use serde_json::json;

use crate::rig::{SimRig, busy_s, fill_pattern};
use crate::row::{Basis, Row, Target};
use crate::sections::{Ctx, eod_row, wrong_bytes_row};

const SECTION: &str =
    "Recall order on a serpentine cartridge (280 wraps, full size), 100 random extents";
const REC: u64 = 8 << 20;
const WRAPS: u32 = 280;
const EXTENTS: usize = 100;
const SEED: u64 = 0x5E4F_E171;

/// One index entry in the simulator's format (docs/SIMULATOR.md §5).
fn entry(offset: u64, len: u32, filemark: bool) -> [u8; 24] {
    let mut b = [0u8; 24];
    b[0..8].copy_from_slice(&offset.to_le_bytes());
    b[8..12].copy_from_slice(&len.to_le_bytes());
    b[12] = u8::from(filemark);
    let crc = crc32c::crc32c(&b[..20]);
    b[20..24].copy_from_slice(&crc.to_le_bytes());
    b
}

fn cartridge_dir(lib: &Path) -> Result<PathBuf> {
    for e in std::fs::read_dir(lib)? {
        let p = e?.path();
        if p.join("meta.json").is_file() {
            return Ok(p);
        }
    }
    bail!("no cartridge directory in {}", lib.display())
}

/// Lay out a full cartridge of `records` records with real bytes in `extents` only.
fn lay_out(lib: &Path, records: u64, extents: &[(u64, u64)]) -> Result<()> {
    let cart = cartridge_dir(lib)?;
    let data = OpenOptions::new()
        .write(true)
        .truncate(true)
        .open(cart.join("data"))
        .context("opening the cartridge's data file")?;
    data.set_len(records * REC)?;
    let mut buf = vec![0u8; REC as usize];
    for &(first, last) in extents {
        for b in first..=last {
            fill_pattern(SEED, b, &mut buf);
            data.write_all_at(&buf, b * REC)?;
        }
    }
    data.sync_all()?;
    let mut index = Vec::with_capacity((records as usize + 1) * 24);
    for i in 0..records {
        index.extend_from_slice(&entry(i * REC, REC as u32, false));
    }
    index.extend_from_slice(&entry(records * REC, 0, true));
    std::fs::write(cart.join("index"), index)?;
    Ok(())
}

/// 100 non-overlapping extents of 1-4 records, in the order a caller asked for them.
fn random_extents(records: u64) -> Vec<(u64, u64)> {
    let mut rng = StdRng::seed_from_u64(SEED);
    let mut out: Vec<(u64, u64)> = Vec::with_capacity(EXTENTS);
    while out.len() < EXTENTS {
        let len = rng.gen_range(1..=4u64);
        let first = rng.gen_range(0..records - len);
        let last = first + len - 1;
        if out.iter().all(|&(f, l)| last + 1 < f || first > l + 1) {
            out.push((first, last));
        }
    }
    out
}

struct Pass {
    drive_s: f64,
    locates: u64,
    wrong: u64,
    checked: u64,
}

fn read_in_order(d: &mut DriveHandle, extents: &[(u64, u64)], order: &[usize]) -> Result<Pass> {
    d.rewind().map_err(|e| anyhow!("rewind: {e}"))?;
    let locates0 = d.statistics().map_err(|e| anyhow!("{e}"))?.locates;
    let busy0 = busy_s(d)?;
    let mut buf = vec![0u8; REC as usize];
    let mut want = vec![0u8; REC as usize];
    let (mut wrong, mut checked) = (0u64, 0u64);
    for &i in order {
        let (first, last) = extents[i];
        d.locate(first)
            .map_err(|e| anyhow!("locate {first}: {e}"))?;
        for b in first..=last {
            let r = d
                .read_record(&mut buf)
                .map_err(|e| anyhow!("read block {b}: {e}"))?;
            fill_pattern(SEED, b, &mut want);
            wrong += buf[..r.len]
                .iter()
                .zip(&want)
                .filter(|(a, b)| a != b)
                .count() as u64
                + (REC as usize - r.len) as u64;
            checked += r.len as u64;
        }
    }
    Ok(Pass {
        drive_s: busy_s(d)? - busy0,
        locates: d.statistics().map_err(|e| anyhow!("{e}"))?.locates - locates0,
        wrong,
        checked,
    })
}

/// Run the section.
pub fn run(ctx: &Ctx) -> Result<Vec<Row>> {
    let m = &ctx.model;
    // Full to the early-warning point's side: 97 % of the capacity in 8 MiB records.
    let records = m.capacity_bytes * 97 / 100 / REC;
    let extents = random_extents(records);
    let extra = format!(
        "sim.cartridges=1;sim.locate=serpentine;sim.wraps={WRAPS};sim.max_record_bytes={REC}"
    );
    let mut rig = SimRig::prepared(&ctx.plugin, &ctx.scratch, m, &extra, |dir| {
        lay_out(dir, records, &extents)
    })?;
    let (mut d, _) = rig.mount(0, 0)?;
    let geo = d.geometry().map_err(|e| anyhow!("geometry: {e}"))?;
    if geo.wraps != WRAPS {
        bail!(
            "the simulator reports {} wraps, expected {WRAPS}",
            geo.wraps
        );
    }
    let g = TapeGeometry {
        wraps: geo.wraps,
        bands: geo.bands,
        min_lpos: geo.min_lpos,
        max_lpos: geo.max_lpos,
    };
    let model = CostModel::cta();
    let request: Vec<usize> = (0..extents.len()).collect();
    let ascending = seek::ascending_order(&extents);
    let plan = seek::plan_order(&g, &geo.eowp, 0, &extents, &model);
    // The drive's native RAO must agree with the engine's software plan (one seek model).
    let abi: Vec<ReelExtent> = extents
        .iter()
        .map(|&(f, l)| ReelExtent {
            first_block: f,
            last_block: l,
        })
        .collect();
    d.rewind().map_err(|e| anyhow!("rewind: {e}"))?;
    let native: Vec<usize> = d
        .rao(&abi)
        .map_err(|e| anyhow!("native RAO: {e}"))?
        .into_iter()
        .map(|i| i as usize)
        .collect();
    let predicted = |o: &[usize]| seek::order_seconds(&g, &geo.eowp, 0, &extents, o, &model);
    let req = read_in_order(&mut d, &extents, &request)?;
    let asc = read_in_order(&mut d, &extents, &ascending)?;
    let rao = read_in_order(&mut d, &extents, &plan.order)?;
    let stream_s: f64 = extents
        .iter()
        .map(|&(f, l)| m.stream_s((l - f + 1) * REC))
        .sum();
    let workload = format!(
        "64 GiB cartridge, {WRAPS} wraps (serpentine, CTA cost model), {records} records of 8 MiB \
         ({:.1} GiB), {EXTENTS} random extents of 1-4 records (seed {SEED:#x}); drive busy time \
         from BOT for each order (locates + {stream_s:.1} s of reads). The drive read directly \
         (through the plugin, dlopen), not a job: the figure compares orders on one cartridge, \
         planned by reel_plugin_abi::seek::plan_order, the function a recall session's planner \
         calls (the random8 and batching rows measure recall order through jobs)",
        (records * REC) as f64 / (1u64 << 30) as f64
    );
    let prof = |p: &Pass, o: &[usize]| {
        json!({"drive_s": p.drive_s, "locates": p.locates, "model_locate_s": predicted(o),
               "read_s": stream_s})
    };
    let mut rows = vec![
        Row::info(
            SECTION,
            "request order: drive time",
            req.drive_s,
            "s",
            Basis::Simulated,
        )
        .note(workload.clone())
        .profile(prof(&req, &request)),
        Row::info(
            SECTION,
            "ascending order: drive time",
            asc.drive_s,
            "s",
            Basis::Simulated,
        )
        .note(workload.clone())
        .profile(prof(&asc, &ascending)),
        Row::info(
            SECTION,
            "recommended order (greedy, cost model): drive time",
            rao.drive_s,
            "s",
            Basis::Simulated,
        )
        .note(format!(
            "{workload}; the drive's native RAO {} the engine's software plan",
            if native == plan.order {
                "equals"
            } else {
                "DIFFERS from"
            }
        ))
        .profile(prof(&rao, &plan.order)),
        Row::info(
            SECTION,
            "recommended order: drive time below ascending",
            (1.0 - rao.drive_s / asc.drive_s) * 100.0,
            "%",
            Basis::Simulated,
        )
        .target(Target::AtLeast(30.0), "≥ 30 % below ascending order"),
        Row::info(
            SECTION,
            "recommended order: drive time below request order",
            (1.0 - rao.drive_s / req.drive_s) * 100.0,
            "%",
            Basis::Simulated,
        )
        .target(Target::AtLeast(50.0), "≥ 50 % below request order"),
        Row::info(
            SECTION,
            "native RAO equals the software plan",
            f64::from(u8::from(native == plan.order)),
            "bool",
            Basis::Simulated,
        )
        .target(Target::Equals(1.0), "1 (one seek model)"),
    ];
    let wrong = req.wrong + asc.wrong + rao.wrong;
    let checked = req.checked + asc.checked + rao.checked;
    rows.push(wrong_bytes_row(SECTION, wrong, checked));
    rig.dismount(d, 0)?;
    let c = rig.counters()?;
    rows.push(eod_row(SECTION, c.violations));
    Ok(rows)
}
