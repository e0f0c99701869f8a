//! Repack through the worker runtime: a cartridge of large objects and one of many small
//! objects, each moved by a repack job (reads of the source in tape order into the repack
//! buffer, writes to another cartridge of the pool, verify NONE), and the latency of user
//! recalls from a third cartridge while the cartridge of large objects is repacked again,
//! against the same recalls without it.
//!
//! Rates are the SIMULATED drive time the simulator counts (INSTANT clock): the bytes moved
//! over the busier of the two drives' busy time, mounts excluded (the two drives stream at
//! once, so the slower one sets the pace). Latency is on the SCALED clock, wall time × scale,
//! host overhead included (scaled), as in the mixed section.

use std::path::PathBuf;
use std::time::Instant;

use anyhow::{Result, anyhow};
use rand::seq::SliceRandom;
use rand::{SeedableRng, rngs::StdRng};
use reel_queue::job::{JobSpec, RepackJob, RepackSelection};
use serde_json::json;

use crate::row::{Basis, Row, Target, percentile};
use crate::sections::archive::drive_profile;
use crate::sections::{Ctx, eod_row, wrong_bytes_row};
use crate::spool::{check_file, make_spool};
use crate::worker_rig::{Worker, recall_spec, recalled};

const SECTION: &str = "Repack: a source and a destination drive, and user recalls meanwhile";
const MIB: u64 = 1 << 20;

/// The repack job for one cartridge.
fn repack_spec(barcode: &str) -> JobSpec {
    JobSpec::Repack(RepackJob {
        selection: RepackSelection {
            barcodes: vec![barcode.to_string()],
            ..RepackSelection::default()
        },
        cartridges: vec![barcode.to_string()],
        to_pool: None,
        add_copies: false,
        by: "reel-bench".into(),
    })
}

/// What one repack measured.
struct Moved {
    objects: u64,
    bytes: u64,
    /// Bytes over the busier drive's steady time (MB/s).
    rate: f64,
    profile: serde_json::Value,
}

/// Repack `barcode` and measure it on the simulator's counters.
fn repack(e: &Worker, barcode: &str) -> Result<Moved> {
    let c0 = e.counters()?;
    let r = e.run(repack_spec(barcode))?;
    let c1 = e.counters()?;
    let n = |k: &str| {
        r.result
            .as_ref()
            .and_then(|v| v.get(k))
            .and_then(serde_json::Value::as_u64)
            .unwrap_or(0)
    };
    let (objects, bytes) = (n("objects"), n("bytes"));
    let drives = c0.drives.len().max(c1.drives.len());
    let profiles: Vec<(f64, serde_json::Value)> =
        (0..drives).map(|d| drive_profile(&c0, &c1, d)).collect();
    let busiest = profiles.iter().map(|p| p.0).fold(0.0, f64::max);
    if busiest <= 0.0 {
        return Err(anyhow!("the repack of {barcode} used no drive time"));
    }
    Ok(Moved {
        objects,
        bytes,
        rate: bytes as f64 / busiest / 1e6,
        profile: json!({"result": r.result, "drives": profiles.into_iter().map(|p| p.1).collect::<Vec<_>>()}),
    })
}

/// What a reader recalled: each file and its key, for the byte check.
type Recalls = Vec<(PathBuf, String)>;

/// A closed-loop reader recalling 2 random `keys` a request for `modelled_s`, or until `stop`
/// says so; its latencies (modelled seconds) and what it recalled, for the byte check.
fn reader(
    e: &Worker,
    ctx: &Ctx,
    keys: &[String],
    scale: f64,
    modelled_s: f64,
    tag: &str,
    stop: &dyn Fn() -> bool,
) -> Result<(Vec<f64>, Recalls)> {
    let dest = ctx
        .scratch
        .join(format!("reel-bench-repack-{tag}-{}", std::process::id()));
    std::fs::create_dir_all(&dest)?;
    let mut rng = StdRng::seed_from_u64(7);
    let (mut lat, mut checks) = (Vec::new(), Vec::new());
    let start = Instant::now();
    let mut it = 0;
    while start.elapsed().as_secs_f64() * scale < modelled_s && !stop() {
        let pick: Vec<String> = keys.choose_multiple(&mut rng, 2).cloned().collect();
        let root = dest.join(format!("{it}"));
        it += 1;
        let t = Instant::now();
        let r = e.run(recall_spec(&pick, &root))?;
        lat.push(t.elapsed().as_secs_f64() * scale);
        if recalled(&r).objects == pick.len() as u64 {
            checks.extend(pick.into_iter().map(|k| (root.join(&k), k)));
        }
    }
    Ok((lat, checks))
}

/// Run the section.
pub fn run(ctx: &Ctx) -> Result<Vec<Row>> {
    // The full run fills a cartridge of 13 GiB (simulated: the LTO-9 model's rates and times
    // on a smaller medium, so the run fits the host's disk) to 92 % with 1 GiB objects, and
    // holds 100 000 objects of 64 KiB on another.
    let (large_n, large, small_n, small, user_n, user, window_s, scale) = if ctx.quick {
        (4, 256 * MIB, 2_000, 256 << 10, 16, 8 * MIB, 120.0, 50.0)
    } else {
        (12, 1024 * MIB, 100_000, 64 << 10, 40, 16 * MIB, 180.0, 1.0)
    };
    let capacity: Option<u64> = (!ctx.quick).then_some(13 << 30);
    // Slices of a quarter of the buffer: several slices per cartridge, so reading one and
    // writing the last overlap on two drives.
    let buffer_bytes = if ctx.quick { 1 << 30 } else { 8 << 30 };
    let buffer = tempfile::Builder::new()
        .prefix("reel-bench-repack-buffer-")
        .tempdir_in(&ctx.scratch)?;
    let buffer_dir = buffer.path().display().to_string();
    // Three drives: the repack may hold two (a source and a destination), users the third.
    // Verify NONE: the rows measure the repack's own streaming against the drive's native
    // rate. A pool that verifies reads back what it writes on the destination drive (FULL:
    // every byte, half its rate; SAMPLED: a share of it), whatever the repack does.
    let mut e = Worker::new(
        ctx,
        3,
        7,
        &[("cr", "pr"), ("cs", "ps"), ("cu", "pu")],
        |c| {
            c.repack.max_drives = 2;
            c.repack.buffer_dir = buffer_dir;
            c.repack.buffer_bytes = buffer_bytes;
            c.archive.verify = reel_queue::config::VerifyMode::None;
            if let Some(cap) = capacity {
                c.library.plugin_config = c.library.plugin_config.replace(
                    &format!("sim.capacity_bytes={}", ctx.model.capacity_bytes),
                    &format!("sim.capacity_bytes={cap}"),
                );
            }
        },
    )?;
    // Large objects go to pool pr (and back), small ones to ps, the users' to pu.
    for (b, pool) in [
        ("RL0001L9", "pr"),
        ("RL0002L9", "pr"),
        ("RL0006L9", "pr"),
        ("RL0004L9", "ps"),
        ("RL0005L9", "ps"),
        ("RL0003L9", "pu"),
    ] {
        e.intake(&[b.to_string()], pool)?;
    }
    let spool = tempfile::Builder::new()
        .prefix("reel-bench-spool-")
        .tempdir_in(&ctx.scratch)?;

    // The spool's files go once archived (their bytes are regenerated for the checks).
    let unspool = |items: &[(String, PathBuf)]| {
        for (_, p) in items {
            let _ = std::fs::remove_file(p);
        }
    };

    // 1. Large objects: archived to one cartridge, repacked to another.
    let items = make_spool(spool.path(), "rl", large_n, large)?;
    e.archive(&items, "cr")?;
    unspool(&items);
    let (src_large, _) = e.first_block(&items[0].0)?;
    // A cartridge to repack waits in its slot (it is full or old): the repack starts cold,
    // not with the source still in the drive that wrote it, at its end of data.
    e.unmount_all()?;
    let big = repack(&e, &src_large)?;
    let large_keys: Vec<String> = items.iter().map(|(k, _)| k.clone()).collect();
    drop(items);

    // 2. Small objects, likewise.
    let items = make_spool(spool.path(), "rs", small_n, small)?;
    e.archive(&items, "cs")?;
    unspool(&items);
    let (src_small, _) = e.first_block(&items[0].0)?;
    e.unmount_all()?;
    let many = repack(&e, &src_small)?;
    let sample: Vec<String> = items
        .iter()
        .step_by((small_n / 50).max(1))
        .map(|(k, _)| k.clone())
        .collect();
    drop(items);

    // 3. User recalls from their own cartridge, without a repack, then while the cartridge
    //    now holding the large objects is repacked again, on the SCALED clock. The full run
    //    keeps it at 1×, real time: at 50× the host must move the repack's bytes 50 times
    //    faster than the drives do, cannot, and its own contention, multiplied by 50, was
    //    what the ratio measured. The quick run stays at 50× to stay quick.
    let users = make_spool(spool.path(), "ru", user_n, user)?;
    e.archive(&users, "cu")?;
    let user_keys: Vec<String> = users.iter().map(|(k, _)| k.clone()).collect();
    drop(users);
    let (src_busy, _) = e.first_block(&large_keys[0])?;
    e.reclock(scale)?;
    // One recall first, not counted: the restart left the library cold, and the first
    // request would pay the user cartridge's mount in the baseline alone.
    e.recall(
        &user_keys[..1],
        &ctx.scratch
            .join(format!("reel-bench-repack-warm-{}", std::process::id())),
    )?;
    let (base, mut checks) = reader(&e, ctx, &user_keys, scale, window_s, "base", &|| false)?;
    let id = e.rt.block_on(e.submit(repack_spec(&src_busy)))?;
    // Only while the repack runs: a request that starts after it ended is not "during".
    let (during, more) = reader(&e, ctx, &user_keys, scale, window_s, "during", &|| {
        e.ended(&id).unwrap_or(true)
    })?;
    checks.extend(more);
    let repacked = e.rt.block_on(e.finished(&id))?;
    // Back to the INSTANT clock for the read-back.
    let scaled = format!("sim.clock=scaled;sim.time_scale={scale}");
    e.restart(|c| {
        c.library.plugin_config = c
            .library
            .plugin_config
            .replace(&scaled, "sim.clock=instant")
    })?;

    // Every object moved is read back from its new copy and compared.
    let dest = tempfile::Builder::new()
        .prefix("reel-bench-dest-")
        .tempdir_in(&ctx.scratch)?;
    let (mut wrong, mut checked) = (0, 0);
    // A few large objects at a time, each removed once compared (the disk holds the library).
    for keys in large_keys.chunks(4) {
        e.recall(keys, dest.path())?;
        for k in keys {
            let (w, c) = check_file(&dest.path().join(k), k, large);
            wrong += w;
            checked += c;
            let _ = std::fs::remove_file(dest.path().join(k));
        }
    }
    e.recall(&sample, dest.path())?;
    for k in &sample {
        let (w, c) = check_file(&dest.path().join(k), k, small);
        wrong += w;
        checked += c;
    }
    for (p, k) in &checks {
        let (w, c) = check_file(p, k, user);
        wrong += w;
        checked += c;
    }
    for tag in ["base", "during", "warm"] {
        let _ = std::fs::remove_dir_all(
            ctx.scratch
                .join(format!("reel-bench-repack-{tag}-{}", std::process::id())),
        );
    }
    let native = ctx.model.stream_bps / 1e6;
    let p90 = |l: &[f64]| percentile(l, 90.0).unwrap_or(f64::NAN);
    let ratio = p90(&during) / p90(&base);
    let note = format!(
        "3 drives (the repack may hold 2: [repack] max_drives = 2), verify NONE (a pool that \
         verifies FULL reads every byte back on the destination drive, half its rate), the \
         repack buffer on the scratch disk ({} MiB: read in slices of a quarter of it); \
         {large_n} objects of {} MiB, then {small_n} of {} KiB, each on a cartridge of their \
         own{}, repacked by one job each, from its slot, to another cartridge of the pool; rate = \
         bytes moved over the busier drive's busy time less mounts (INSTANT clock); latency: one \
         closed-loop reader asking 2 random objects of {} MiB from a third cartridge, {:.0} \
         modelled s without a repack, then up to {:.0} modelled s while the cartridge holding \
         the large objects is repacked again, the reader stopping when it ends \
         (SCALED clock at {scale}×, host overhead included, scaled)",
        buffer_bytes >> 20,
        large >> 20,
        small >> 10,
        capacity
            .map(|c| format!(
                " (cartridges of {} GiB in this run, the large objects filling one to {:.0} %)",
                c >> 30,
                100.0 * (large_n as u64 * large) as f64 / c as f64
            ))
            .unwrap_or_default(),
        user >> 20,
        window_s,
        window_s
    );
    Ok(vec![
        Row::info(
            SECTION,
            "repack rate, large objects",
            big.rate,
            "MB/s",
            Basis::Simulated,
        )
        .target(
            Target::AtLeast(0.9 * native),
            &format!("≥ 90 % of the drive's native {native:.0} MB/s"),
        )
        .note(note)
        .profile(json!({"objects": big.objects, "bytes": big.bytes, "run": big.profile})),
        Row::info(
            SECTION,
            "repack rate, small objects",
            many.rate,
            "MB/s",
            Basis::Simulated,
        )
        .target(
            Target::AtLeast(0.7 * native),
            &format!("≥ 70 % of the drive's native {native:.0} MB/s"),
        )
        .profile(json!({"objects": many.objects, "bytes": many.bytes, "run": many.profile})),
        Row::info(
            SECTION,
            "user recall latency p90 without a repack",
            p90(&base),
            "s",
            Basis::Simulated,
        )
        .profile(json!({"requests": base.len(), "p50": percentile(&base, 50.0)})),
        Row::info(
            SECTION,
            "user recall latency p90 during a repack",
            p90(&during),
            "s",
            Basis::Simulated,
        )
        .profile(
            json!({"requests": during.len(), "p50": percentile(&during, 50.0),
                "repack": repacked.result}),
        ),
        Row::info(
            SECTION,
            "p90 during a repack against without, same run",
            ratio,
            "×",
            Basis::Simulated,
        )
        .target(
            Target::AtMost(1.5),
            "≤ 1.5 × the same recalls without a repack",
        ),
        Row::info(
            SECTION,
            "objects moved",
            (big.objects + many.objects) as f64,
            "objects",
            Basis::Simulated,
        )
        .target(
            Target::Equals((large_n + small_n) as f64),
            "every live object of both cartridges",
        ),
        wrong_bytes_row(SECTION, wrong, checked),
        eod_row(SECTION, e.counters()?.violations),
    ])
}
