//! Mixed workload: 4 closed-loop readers and 1 archiving writer on 2 drives for one modelled
//! hour (SCALED clock), with one job per object (OFF) against one job per request (ON) in the same run.
//!
//! Workload (documented in the report): two cartridges hold the readers' objects, each object
//! followed on tape by a filler so the objects are spread along the tape. Each reader, in a
//! loop with no think time, asks for 6 objects drawn at random from both cartridges and waits
//! until all 6 are in place; a third cartridge takes the writer's archives, one object at a
//! time, back to back, with reel's default verify (FULL). Every read and write is a job
//! submitted to the queue and run by the worker runtime. ON, a reader's 6 objects are one
//! recall job (the scheduler groups them per cartridge with whatever else is queued there, the
//! executor reads them in planned order); OFF they are 6 recall jobs one after another, one
//! object each: the scheduler still batches what the four readers have queued at once, so OFF
//! is "one job per object", not "no batching at all" (a bare session no longer exists to
//! switch it off), and it pays each job's host latency six times. Latency is per reader request (6 objects), wall time × the clock
//! scale = modelled seconds: host overhead (job polling included) is counted, scaled, as in the
//! seed's run.

use std::path::PathBuf;
use std::time::Instant;

use anyhow::Result;
use rand::seq::SliceRandom;
use rand::{SeedableRng, rngs::StdRng};
use serde_json::json;

use crate::row::{Basis, Row, Target, percentile};
use crate::sections::{Ctx, eod_row, wrong_bytes_row};
use crate::spool::{check_file, make_spool, make_spool_file};
use crate::worker_rig::{Worker, archive_spec, archived, recall_spec, recalled};

const SECTION: &str =
    "Mixed: 4 closed-loop readers + 1 archiving writer, 2 drives, one modelled hour";
const MIB: u64 = 1 << 20;
const READERS: usize = 4;
const PER_REQUEST: usize = 6;

struct Outcome {
    recalls: u64,
    failed: u64,
    latencies: Vec<f64>,
    written_bytes: u64,
    modelled_s: f64,
    checks: Vec<(PathBuf, String)>,
    reasons: Vec<String>,
}

/// The clock and the writer's object size of a phase.
#[derive(Clone, Copy)]
struct Workload {
    scale: f64,
    hour_s: f64,
    wsize: u64,
}

fn phase(
    e: &mut Worker,
    ctx: &Ctx,
    keys: &[String],
    w: &Workload,
    on: bool,
    tag: &str,
) -> Result<Outcome> {
    let Workload {
        scale,
        hour_s,
        wsize,
    } = *w;
    e.unmount_all()?;
    let e = &*e;
    let wall = hour_s / scale;
    let start = Instant::now();
    let dest = ctx
        .scratch
        .join(format!("reel-bench-mixed-{tag}-{}", std::process::id()));
    std::fs::create_dir_all(&dest)?;
    let wspool = ctx
        .scratch
        .join(format!("reel-bench-mixed-w-{tag}-{}", std::process::id()));
    std::fs::create_dir_all(&wspool)?;
    let out = e.rt.block_on(async {
        let readers = (0..READERS).map(|r| {
            let dest = dest.clone();
            async move {
                let mut rng = StdRng::seed_from_u64(100 + r as u64);
                let (mut n, mut failed, mut lat, mut checks) = (0u64, 0u64, Vec::new(), Vec::new());
                let mut reasons: Vec<String> = Vec::new();
                let mut it = 0;
                while start.elapsed().as_secs_f64() < wall {
                    let pick: Vec<String> = keys
                        .choose_multiple(&mut rng, PER_REQUEST)
                        .cloned()
                        .collect();
                    let root = dest.join(format!("r{r}-{it}"));
                    it += 1;
                    let t = Instant::now();
                    let asked: Vec<Vec<String>> = if on {
                        vec![pick.clone()]
                    } else {
                        pick.iter().map(|k| vec![k.clone()]).collect()
                    };
                    let mut results = Vec::new();
                    for ks in &asked {
                        let r = async {
                            let id = e.submit(recall_spec(ks, &root)).await?;
                            e.finished(&id).await
                        }
                        .await;
                        results.push(r);
                    }
                    if start.elapsed().as_secs_f64() > wall {
                        break; // finished after the hour: not counted
                    }
                    lat.push(t.elapsed().as_secs_f64() * scale);
                    let mut bad: Vec<String> = Vec::new();
                    for (r, ks) in results.into_iter().zip(asked) {
                        match r {
                            Ok(rec) => n += recalled(&rec).objects,
                            Err(e) => {
                                failed += ks.len() as u64;
                                reasons.push(format!("{}: {e}", ks.join(",")));
                                bad.extend(ks);
                            }
                        }
                    }
                    for k in pick {
                        if !bad.contains(&k) {
                            checks.push((root.join(&k), k));
                        }
                    }
                }
                (n, failed, lat, checks, reasons)
            }
        });
        let writer = async {
            let mut bytes = 0u64;
            let mut i = 0;
            // The writer's next object is made while the current one archives, off the
            // runtime's threads (a blocking write here would stall the readers' polling): the
            // writer archives back to back, with no gap of the benchmark's own making.
            let make = |i: u32| {
                let key = format!("w{tag}-{i:05}");
                let path = wspool.join(&key);
                tokio::task::spawn_blocking(move || {
                    make_spool_file(&path, &key, wsize).map(|()| (key, path))
                })
            };
            let mut next = Some(make(i));
            while start.elapsed().as_secs_f64() < wall {
                let Some(made) = next.take() else {
                    break;
                };
                let Ok(Ok((key, path))) = made.await else {
                    break;
                };
                i += 1;
                next = Some(make(i));
                let done = async {
                    let id = e
                        .submit(archive_spec(&[(key, path.clone())], "cw")?)
                        .await?;
                    e.finished(&id).await
                }
                .await;
                if let Ok(rec) = done {
                    bytes += archived(&rec).bytes;
                }
                let _ = std::fs::remove_file(&path);
            }
            // The object made for after the hour is not archived.
            if let Some(made) = next
                && let Ok(Ok((_, path))) = made.await
            {
                let _ = std::fs::remove_file(&path);
            }
            bytes
        };
        let (rs, w) = tokio::join!(futures::future::join_all(readers), writer);
        (rs, w)
    });
    let modelled_s = start.elapsed().as_secs_f64() * scale;
    let _ = std::fs::remove_dir_all(&wspool);
    let (rs, written_bytes) = out;
    let mut o = Outcome {
        recalls: 0,
        failed: 0,
        latencies: Vec::new(),
        written_bytes,
        modelled_s,
        checks: Vec::new(),
        reasons: Vec::new(),
    };
    for (n, f, l, c, why) in rs {
        o.reasons.extend(why);
        o.recalls += n;
        o.failed += f;
        o.latencies.extend(l);
        o.checks.extend(c);
    }
    Ok(o)
}

/// Run the section.
pub fn run(ctx: &Ctx) -> Result<Vec<Row>> {
    let (per_cart, size, filler, wsize, hour_s, scale) = if ctx.quick {
        (16, 8 * MIB, 32 * MIB, 32 * MIB, 900.0, 50.0)
    } else {
        (40, 16 * MIB, 128 * MIB, 256 * MIB, 3600.0, 50.0)
    };
    let mut e = Worker::new(
        ctx,
        2,
        3,
        &[("ca", "pa"), ("cb", "pb"), ("cw", "pw")],
        |_| {},
    )?;
    e.intake(&["RL0001L9".to_string()], "pa")?;
    e.intake(&["RL0002L9".to_string()], "pb")?;
    e.intake(&["RL0003L9".to_string()], "pw")?;
    let spool = tempfile::Builder::new()
        .prefix("reel-bench-spool-")
        .tempdir_in(&ctx.scratch)?;
    let mut keys = Vec::new();
    for (class, tag) in [("ca", "a"), ("cb", "b")] {
        let xs = make_spool(spool.path(), &format!("m{tag}"), per_cart, size)?;
        let fs = make_spool(spool.path(), &format!("mf{tag}"), per_cart, filler)?;
        let items: Vec<(String, PathBuf)> = xs
            .iter()
            .zip(&fs)
            .flat_map(|(a, b)| [a.clone(), b.clone()])
            .collect();
        e.archive(&items, class)?;
        keys.extend(xs.into_iter().map(|(k, _)| k));
    }
    drop(spool);
    e.reclock(scale)?;
    let w = Workload {
        scale,
        hour_s,
        wsize,
    };
    let off = phase(&mut e, ctx, &keys, &w, false, "off")?;
    let on = phase(&mut e, ctx, &keys, &w, true, "on")?;
    let (mut wrong, mut checked) = (0, 0);
    for o in [&off, &on] {
        for (p, k) in &o.checks {
            let (w, c) = check_file(p, k, size);
            wrong += w;
            checked += c;
        }
    }
    for tag in ["off", "on"] {
        let _ = std::fs::remove_dir_all(
            ctx.scratch
                .join(format!("reel-bench-mixed-{tag}-{}", std::process::id())),
        );
    }
    let per_hour = |o: &Outcome| o.recalls as f64 * 3600.0 / o.modelled_s;
    let p = |o: &Outcome, q| percentile(&o.latencies, q).unwrap_or(f64::NAN);
    let note = format!(
        "{per_cart} objects of {} MiB on each of 2 cartridges (each followed by a {} MiB filler); \
         {READERS} closed-loop readers asking {PER_REQUEST} random objects a request, no think \
         time; 1 writer archiving {} MiB objects back to back (verify FULL) on a third cartridge; \
         2 drives; every read and write a job through the worker runtime (scheduler max_age 0, \
         drive loops and job pick-up polling every 20 ms, a job's end seen within 50 ms: each \
         job costs up to a few modelled seconds of host latency, scaled); {:.0} modelled minutes per variant on the SCALED clock at \
         {scale}× (host overhead included, scaled); OFF = each object its own recall job, one \
         after another; ON = one recall job per reader request (the scheduler batches it per \
         cartridge, planned order)",
        size >> 20,
        filler >> 20,
        wsize >> 20,
        hour_s / 60.0
    );
    let prof = |o: &Outcome| {
        json!({"recalls": o.recalls, "failed": o.failed, "modelled_s": o.modelled_s,
        "requests": o.latencies.len(), "archived_bytes": o.written_bytes,
        "latency_p50_s": p(o, 50.0), "latency_p90_s": p(o, 90.0),
        "failures": o.reasons.iter().take(5).collect::<Vec<_>>()})
    };
    let ratio = per_hour(&on) / per_hour(&off);
    Ok(vec![
        Row::info(SECTION, "recalls per hour, one job per object (OFF)", per_hour(&off), "recalls/h", Basis::Simulated)
            .note(note).profile(prof(&off)),
        Row::info(SECTION, "recalls per hour, one job per request, scheduler batching (ON)", per_hour(&on), "recalls/h", Basis::Simulated)
            .seed(325.0).profile(prof(&on)),
        Row::info(SECTION, "ON against OFF, same run", ratio, "×", Basis::Simulated)
            .target(Target::AtLeast(2.0), "≥ 2 × the same workload with one job per object"),
        Row::info(SECTION, "request latency p50, ON", p(&on, 50.0), "s", Basis::Simulated).seed(6.7),
        Row::info(SECTION, "request latency p90, ON", p(&on, 90.0), "s", Basis::Simulated).seed(19.0),
        Row::info(SECTION, "archived by the writer meanwhile, ON", on.written_bytes as f64 / 1e9, "GB", Basis::Simulated),
        Row::info(SECTION, "failed recalls", (on.failed + off.failed) as f64, "recalls", Basis::Simulated)
            .target(Target::Equals(0.0), "0 failed")
            .note(format!("first failures: {}", on.reasons.iter().chain(&off.reasons).take(3).cloned().collect::<Vec<_>>().join(" | ")))
            .profile(json!({"off": off.reasons.iter().take(5).collect::<Vec<_>>(), "on": on.reasons.iter().take(5).collect::<Vec<_>>()})),
        wrong_bytes_row(SECTION, wrong, checked),
        eod_row(SECTION, e.counters()?.violations),
    ])
}
