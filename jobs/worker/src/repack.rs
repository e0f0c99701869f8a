//! Running a repack job: every live object of some cartridges read in tape order and written
//! again through the normal write path, to cartridges of a destination pool.
//!
//! The job runs here, on the worker that holds its job lease, as a loop over its cartridges.
//! For each one it keeps a bounded **window** of objects in flight, as ordinary tape requests
//! of the job, so the scheduler, the drive board and the drive loops treat them like any
//! other work:
//!
//! 1. **Expand.** The next live copies of the source, in tape order after the job's cursor,
//!    become read requests on the source cartridge, each reading one object into the job's
//!    directory of the repack buffer (`[repack] buffer_dir`). Reads are queued in **slices**
//!    of at most `[repack] window` objects and a quarter of `[repack] buffer_bytes`, the next
//!    once the last is read; four windows of objects are in flight at most in all, and the
//!    buffer holds `[repack] buffer_bytes` at most: reads wait while it is full
//!    (back-pressure), so a repack of a million objects never queues a million requests.
//!    With two drives free, one reads a slice while the other writes the slice before it;
//!    with one, it reads until the buffer is full, then writes.
//! 2. **Read → write.** Once a slice is read, each of its reads becomes a write request of
//!    the same object and generation to the destination pool, whose source file is the
//!    buffered one; they swap in one transaction ([`TapeRequests::settle_into`]). A slice
//!    goes to the writer whole, so a write session holds many objects (one container close,
//!    filemark and sync for them all), while the source drive reads the next slice.
//! 3. **Write → retire.** A write that is done (its container durable, verified if the pool
//!    verifies in full) retires the source's copy in the catalogue
//!    ([`Catalogue::drop_copy_on`], which keeps it unless another copy counts) and removes the
//!    buffered file. A repack that only adds copies keeps the source's copy.
//!
//! While it runs, the source is `repacking`: nothing writes to it, and recalls still read it
//! (a copy not yet retired is valid). When every object is moved it is `full` with no live
//! data, ready for reclaim; objects it could not move are named in the job's result, and the
//! cartridge goes back to the state it had.
//!
//! Repack requests carry the job's priority, [`REPACK_PRIORITY`](reel_queue::job::REPACK_PRIORITY)
//! by default: below user work on a shared cartridge or pool, and the scheduler holds them to
//! `[repack] max_drives` drives. A cancel, a shutdown or a crash stops the loop between two
//! steps; what it has done is in the catalogue and its requests, its cursor in the job's
//! checkpoint, and a new attempt carries on from there.

use std::collections::HashSet;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use reel_engine::catalogue::{
    CartridgeState, Catalogue, CopyDrop, CopyLocation, DropOutcome, REEL, TapePosition,
};
use reel_engine::format::ObjectKind;
use reel_engine::session::destination::Overwrite;
use reel_queue::error::{JobsError, Result};
use reel_queue::job::RepackJob;
use reel_queue::request_detail::{self, ReadDetail, WriteDetail};
use reel_queue::store::{JobRecord, Progress};
use reel_queue::{Fence, NewTapeRequest, TapeRequest};
use serde::{Deserialize, Serialize};
use tokio_util::sync::CancellationToken;

use crate::scheduler::MountTarget;
use crate::worker::{Runtime, TapeExecutor};

/// Objects a job has in flight in all (reads and writes), as a multiple of its window of
/// reads: the source drive reads ahead of the writer by this much at most.
const IN_FLIGHT: usize = 4;

/// Slices the buffer is read in: a slice is a quarter of `[repack] buffer_bytes`.
const SLICES: u64 = 4;

/// Failures a result lists at most; it counts them all.
const LISTED: usize = 20;

/// Live copies listed from the catalogue per query while a slice is filled.
const LIST_PAGE: usize = 1_000;

/// Copies retired per catalogue transaction. On SQLite a write transaction holds the file's
/// one write lock, and every other writer of the host waits for it in SQLite's busy handler,
/// which is not first come, first served: a thousand objects per transaction, back to back,
/// held the lock so long that the job's own lease renewals missed their term on a loaded host
/// (the lease expired mid-repack). A hundred keep each transaction to milliseconds.
const RETIRE_CHUNK: usize = 100;

/// Where a repack job is: saved in its checkpoint after every step, read back by a new attempt.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
struct Cursor {
    /// The cartridge being repacked (an index in the job's list).
    index: usize,
    /// The last copy of it expanded into a read, in tape order.
    after: Option<TapePosition>,
    /// Every live copy of it has been expanded.
    source_done: bool,
    /// Its first slice was held back until the next was read (see `lead`).
    #[serde(default)]
    lead: bool,
    /// Its state before the job made it `repacking`, to give back if it keeps live data.
    prior_state: Option<String>,
    /// Live objects and bytes on all the job's cartridges when it started.
    total_objects: u64,
    total_bytes: u64,
    /// Objects moved (their source copy retired) or copied (`add_copies`), and their bytes.
    moved: u64,
    moved_bytes: u64,
    /// Objects that could not be moved, counted and the first few named.
    failed: u64,
    failures: Vec<Failure>,
    /// Cartridges done, each with what it ended as.
    cartridges: Vec<CartridgeEnd>,
    /// The totals are counted.
    counted: bool,
}

/// One object the job could not move.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
struct Failure {
    key: String,
    barcode: String,
    reason: String,
}

/// What one source cartridge ended as.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
struct CartridgeEnd {
    barcode: String,
    /// Its state after the job.
    state: String,
    /// Live objects left on it (0: it may be reclaimed once nothing else keeps it).
    live_left: u64,
    /// Why it was skipped, if it was.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    skipped: Option<String>,
}

/// What a repack's request carries besides the read or write detail.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
struct RepackNote {
    /// The source cartridge.
    from: String,
    /// The destination pool.
    to: String,
    /// The object's generation.
    generation: u64,
    /// Its kind (file or link), for the write.
    kind: ObjectKind,
    /// The buffered file.
    staged: PathBuf,
    /// The last container id when the read was queued: the old copy is retired only for a
    /// copy in a container made after it (`Catalogue::drop_copy_on`).
    #[serde(default)]
    since: i64,
}

/// The note of a repack request (the `repack` member of its detail).
fn note_of(r: &TapeRequest) -> Result<RepackNote> {
    serde_json::from_value(r.detail.get("repack").cloned().unwrap_or_default()).map_err(|e| {
        JobsError::RequestDetail {
            request: r.id,
            reason: format!("not a repack request: {e}"),
        }
    })
}

/// `detail` with the repack note added.
fn with_note(mut detail: serde_json::Value, note: &RepackNote) -> serde_json::Value {
    if let Some(m) = detail.as_object_mut() {
        m.insert(
            "repack".into(),
            serde_json::to_value(note).unwrap_or_default(),
        );
    }
    detail
}

/// States a repack job moves data off: those a submission takes
/// ([`reel_queue::repack_select::repackable`]), and `repacking` (its own, when it resumes).
fn repackable(state: CartridgeState) -> bool {
    reel_queue::repack_select::repackable(state) || state == CartridgeState::Repacking
}

/// Run repack job `rec` to its end; returns its result document.
pub async fn run<E: TapeExecutor>(
    rt: &Arc<Runtime<E>>,
    rec: &JobRecord,
    job: &RepackJob,
    fence: &Fence,
    cancel: &CancellationToken,
) -> Result<serde_json::Value> {
    let Some(cat) = rt.executor.object_catalogue() else {
        return Err(JobsError::Internal(
            "this worker's executor has no catalogue to repack with".into(),
        ));
    };
    let mut cur: Cursor = rec
        .checkpoint
        .as_ref()
        .and_then(|c| c.get("repack"))
        .and_then(|c| serde_json::from_value(c.clone()).ok())
        .unwrap_or_default();
    // A job run again after it ended (`reel jobs retry` of a repack that could not move some
    // objects) walks its cartridges again: what it moved is gone from them.
    if cur.index >= job.cartridges.len() {
        cur = Cursor::default();
    }
    let buffer = PathBuf::from(&rt.config.repack.buffer_dir).join(&rec.id);
    std::fs::create_dir_all(&buffer).map_err(|source| JobsError::Io {
        doing: "creating the repack buffer",
        path: buffer.clone(),
        source,
    })?;
    if !cur.counted {
        for b in &job.cartridges {
            let live = cat.live_on(b).await?;
            cur.total_objects += live.objects;
            cur.total_bytes += live.bytes;
        }
        cur.counted = true;
        save(rt, rec, &cur).await?;
    }
    let attempt = Attempt {
        rt,
        cat,
        rec,
        job,
        fence,
        cancel,
        buffer: &buffer,
    };
    let result = repack_all(&attempt, &mut cur).await;
    // A user's cancel (not a shutdown: the job resumes then) gives the cartridge being
    // repacked its state back, once no drive holds its requests.
    if result.is_err()
        && cancel.is_cancelled()
        && rt
            .queue
            .store()
            .cancel_requested(&rec.id)
            .await
            .unwrap_or(false)
    {
        rt.requests.cancel_job(&rec.id).await?;
        settle_claimed(rt, rec).await;
        if let Some(b) = job.cartridges.get(cur.index) {
            give_back(cat, rec, b, &cur).await;
        }
        remove_buffer(&buffer);
    }
    result?;
    remove_buffer(&buffer);
    if cur.failed > 0 {
        // Not done: some objects are where they were. The job fails saying which, and a
        // retry walks the cartridges again.
        let first: Vec<String> = cur
            .failures
            .iter()
            .take(3)
            .map(|f| format!("{} on {}: {}", f.key, f.barcode, f.reason))
            .collect();
        return Err(JobsError::Invalid(
            reel_queue::submission::SubmissionError::Invalid {
                field: "cartridges",
                value: job.cartridges.join(","),
                reason: format!(
                    "{} of {} objects could not be moved and stay where they were ({}{}); {} moved; \
                     `reel jobs retry {}` tries them again",
                    cur.failed,
                    cur.total_objects,
                    first.join("; "),
                    if cur.failed > 3 { "; …" } else { "" },
                    cur.moved,
                    rec.id
                ),
            },
        ));
    }
    Ok(serde_json::json!({
        "objects": cur.moved,
        "bytes": cur.moved_bytes,
        "objects_at_start": cur.total_objects,
        "failed": cur.failed,
        "failures": cur.failures,
        "cartridges": cur.cartridges,
        "add_copies": job.add_copies,
    }))
}

/// One attempt of a repack job: what each of its steps reads.
struct Attempt<'a, E> {
    rt: &'a Arc<Runtime<E>>,
    cat: &'a Catalogue,
    rec: &'a JobRecord,
    job: &'a RepackJob,
    fence: &'a Fence,
    cancel: &'a CancellationToken,
    buffer: &'a Path,
}

impl<E> Clone for Attempt<'_, E> {
    fn clone(&self) -> Self {
        *self
    }
}

impl<E> Copy for Attempt<'_, E> {}

async fn repack_all<E: TapeExecutor>(a: &Attempt<'_, E>, cur: &mut Cursor) -> Result<()> {
    let Attempt {
        rt,
        cat,
        rec,
        job,
        fence,
        ..
    } = *a;
    while let Some(barcode) = job.cartridges.get(cur.index) {
        let Some(cart) = cat.cartridge(barcode).await? else {
            end_cartridge(
                cur,
                barcode,
                "unknown",
                0,
                Some("not in the catalogue".into()),
            );
            save(rt, rec, cur).await?;
            continue;
        };
        let to_pool = match job.to_pool.clone().or(cart.pool.clone()) {
            Some(p) => p,
            None => {
                end_cartridge(
                    cur,
                    barcode,
                    cart.state.as_str(),
                    0,
                    Some("it is in no pool: name the destination (--to-pool)".into()),
                );
                save(rt, rec, cur).await?;
                continue;
            }
        };
        if !repackable(cart.state) {
            let why = format!("it is {}: nothing is read from it", cart.state);
            end_cartridge(cur, barcode, cart.state.as_str(), 0, Some(why));
            save(rt, rec, cur).await?;
            continue;
        }
        if !job.add_copies && cart.state != CartridgeState::Repacking {
            cur.prior_state = Some(cart.state.as_str().to_string());
            save(rt, rec, cur).await?;
            fenced(fence).await?;
            cat.set_cartridge_state_noted(
                barcode,
                CartridgeState::Repacking,
                &format!("repack job {}", rec.id),
                &job.by,
            )
            .await?;
        }
        tracing::info!(%barcode, to = %to_pool, "repacking");
        repack_one(a, cur, barcode, &cart.pool, &to_pool).await?;
        // Every object expanded and settled: what is left could not be moved.
        let live = cat.live_on(barcode).await?;
        let state = if job.add_copies {
            cart.state
        } else if live.objects == 0 {
            // Broken media stays broken (reclaim never reuses it); anything else is full.
            let (end, why) = if cur.prior_state.as_deref() == Some(CartridgeState::Broken.as_str())
            {
                (
                    CartridgeState::Broken,
                    format!(
                        "repacked by job {}: no live data left; broken media is not reused",
                        rec.id
                    ),
                )
            } else {
                (
                    CartridgeState::Full,
                    format!("repacked by job {}: no live data left", rec.id),
                )
            };
            fenced(fence).await?;
            cat.set_cartridge_state_noted(barcode, end, &why, &job.by)
                .await?;
            end
        } else {
            give_back(cat, rec, barcode, cur).await;
            cur.prior_state
                .as_deref()
                .and_then(|s| s.parse().ok())
                .unwrap_or(CartridgeState::Full)
        };
        tracing::info!(%barcode, live_left = live.objects, %state, "repacked");
        end_cartridge(cur, barcode, state.as_str(), live.objects, None);
        save(rt, rec, cur).await?;
    }
    Ok(())
}

/// Close the cartridge at the cursor and move to the next.
fn end_cartridge(
    cur: &mut Cursor,
    barcode: &str,
    state: &str,
    live_left: u64,
    skipped: Option<String>,
) {
    cur.cartridges.push(CartridgeEnd {
        barcode: barcode.to_string(),
        state: state.to_string(),
        live_left,
        skipped,
    });
    cur.index += 1;
    cur.after = None;
    cur.source_done = false;
    cur.lead = false;
    cur.prior_state = None;
}

async fn repack_one<E: TapeExecutor>(
    a: &Attempt<'_, E>,
    cur: &mut Cursor,
    barcode: &str,
    source_pool: &Option<String>,
    to_pool: &str,
) -> Result<()> {
    let Attempt {
        rt,
        cat,
        rec,
        job,
        fence,
        cancel,
        buffer,
    } = *a;
    let cfg = &rt.config.repack;
    let window = cfg.window as usize;
    let verified_only = rt.config.archive.verify == reel_queue::config::VerifyMode::Full;
    // Steps in a row in which nothing moved: each lists the job's requests, so the loop waits
    // longer while the drives are busy with a slice (see `step_pause`).
    let mut idle: u32 = 0;
    loop {
        if cancel.is_cancelled() {
            return Err(JobsError::Cancelled(rec.id.clone()));
        }
        fenced(fence).await?;
        // 1. What finished since the last step moves on.
        // At most `window` reads and `IN_FLIGHT × window` requests in all (below): this lists
        // every request of the job.
        let reqs = rt
            .requests
            .of_job(&rec.id, (window * (IN_FLIGHT + 1) + 16) as u32)
            .await?;
        let mut forget = Vec::new();
        let mut add = Vec::new();
        // Keys with a request of the job (a key goes once: one write batch cannot hold it
        // twice), the reads among them, and the bytes the buffer holds or is about to.
        let mut in_flight: HashSet<String> = HashSet::new();
        let mut reads = 0usize;
        let mut in_flight_bytes = 0u64;
        let (mut moved, mut moved_bytes) = (0u64, 0u64);
        let mut failures = Vec::new();
        // Written objects whose source copy this step retires, in one transaction.
        let mut retire: Vec<(&TapeRequest, RepackNote)> = Vec::new();
        // A slice's reads become writes together, once none of them is still to be read: the
        // writer then takes the slice in one session (one container close, filemark and
        // sync for many objects, not one per object as they trickle in) while the source drive
        // reads the next slice.
        let slice_read = !reqs.iter().any(|r| {
            matches!(r.target, MountTarget::Read { .. })
                && !matches!(r.state.as_str(), "done" | "failed")
        });
        // The reader's lead: a cartridge's first slice, once read, waits as reads until the
        // next one is read too (when the buffer and the window have room for it), so the
        // writer starts with two slices and the source drive stays a slice ahead of it. Were
        // the writer to start with one, it would finish it just as the next is read (both
        // drives stream at the same rate), and any delay in turning that one into writes (a
        // step of this loop, a claim) would run its tape dry: a backhitch per slice.
        let lead = slice_read
            && !cur.lead
            && reqs
                .iter()
                .any(|r| r.state == "done" && matches!(r.target, MountTarget::Read { .. }))
            && !cur.source_done
            && reqs.len() < window * IN_FLIGHT
            && reqs
                .iter()
                .filter(|r| r.state != "failed")
                .map(|r| r.bytes)
                .sum::<u64>()
                < cfg.buffer_bytes;
        for r in &reqs {
            let note = match note_of(r) {
                Ok(n) => n,
                Err(e) => {
                    // Not a request this loop made: counted as failed, never retried.
                    failures.push(Failure {
                        key: r.object_key.clone(),
                        barcode: barcode.into(),
                        reason: e.to_string(),
                    });
                    if matches!(r.state.as_str(), "done" | "failed") {
                        forget.push(r.id);
                    }
                    continue;
                }
            };
            match (r.state.as_str(), &r.target) {
                // Held for the reader's lead: buffered, not counted as a read in progress.
                ("done", MountTarget::Read { .. }) if lead => {
                    in_flight.insert(r.object_key.clone());
                    in_flight_bytes += r.bytes;
                }
                ("done", MountTarget::Read { .. }) if !slice_read => {
                    in_flight.insert(r.object_key.clone());
                    in_flight_bytes += r.bytes;
                    reads += 1;
                }
                ("done", MountTarget::Read { .. }) => {
                    add.push(write_request(r, &note, rec.priority));
                    forget.push(r.id);
                    in_flight.insert(r.object_key.clone());
                    in_flight_bytes += r.bytes;
                }
                ("done", MountTarget::Write { .. }) => {
                    if !job.add_copies {
                        // Retired below, with the step's other written objects.
                        retire.push((r, note));
                        continue;
                    }
                    moved += 1;
                    moved_bytes += r.bytes;
                    remove_file(&note.staged);
                    forget.push(r.id);
                }
                ("failed", target) => {
                    let what = match target {
                        MountTarget::Read { .. } => "reading it",
                        MountTarget::Write { .. } => "writing it",
                    };
                    failures.push(Failure {
                        key: r.object_key.clone(),
                        barcode: note.from.clone(),
                        reason: format!(
                            "{what}: {}",
                            r.error.clone().unwrap_or_else(|| "failed".into())
                        ),
                    });
                    remove_file(&note.staged);
                    forget.push(r.id);
                }
                (_, target) => {
                    in_flight.insert(r.object_key.clone());
                    in_flight_bytes += r.bytes;
                    if matches!(target, MountTarget::Read { .. }) {
                        reads += 1;
                    }
                }
            }
        }
        // Every copy the step's written objects left on their source goes in one catalogue
        // transaction per `RETIRE_CHUNK` of them, not one per object. Before each, the job's
        // lease is renewed, not only checked: the loop is the host's busiest writer while it
        // runs, and the renewal must not depend on the heartbeat task winning the write lock
        // between its transactions.
        for chunk in retire.chunks(RETIRE_CHUNK) {
            rt.leases.heartbeat(fence, rt.lease_ttl()).await?;
            let drops: Vec<CopyDrop> = chunk
                .iter()
                .map(|(r, note)| CopyDrop {
                    key: r.object_key.clone(),
                    generation: note.generation,
                    barcode: note.from.clone(),
                    newer_than: note.since,
                })
                .collect();
            let outcomes = cat.drop_copies_on(&drops, verified_only).await?;
            for ((r, note), outcome) in chunk.iter().zip(outcomes) {
                match outcome {
                    DropOutcome::Dropped | DropOutcome::NotThere => {
                        moved += 1;
                        moved_bytes += r.bytes;
                    }
                    DropOutcome::NoOtherCopy => {
                        failures.push(Failure {
                            key: r.object_key.clone(),
                            barcode: note.from.clone(),
                            reason: format!(
                                "no new {} copy of it was made in pool {} (a copy it already \
                                 had there is not a new one: moving it there would leave it \
                                 a copy fewer); the copy on {} is kept",
                                if verified_only { "verified" } else { "durable" },
                                note.to,
                                note.from
                            ),
                        });
                    }
                }
                remove_file(&note.staged);
                forget.push(r.id);
            }
        }
        let settled = !forget.is_empty() || !add.is_empty();
        if settled {
            fenced(fence).await?;
            rt.requests.settle_into(&rec.id, &forget, &add).await?;
            cur.moved += moved;
            cur.moved_bytes += moved_bytes;
            cur.failed += failures.len() as u64;
            for f in failures {
                if cur.failures.len() < LISTED {
                    cur.failures.push(f);
                }
            }
            save(rt, rec, cur).await?;
        }
        // 2. Room in the window of reads and in the buffer: the next copies of the source, in
        //    tape order. Writes do not count against the window, only against the buffer, so
        //    the source drive reads on while another drive writes what it read.
        //    Reads go in slices of a quarter of the buffer: the next slice is queued once the
        //    last one is read, so one drive reads it while another writes the last.
        let mut expanded = false;
        let slice = (cfg.buffer_bytes / SLICES).max(1);
        if !cur.source_done
            && reads == 0
            && in_flight.len() < window * IN_FLIGHT
            && in_flight_bytes < cfg.buffer_bytes
        {
            let mut new = Vec::new();
            let mut room_bytes = slice.min(cfg.buffer_bytes - in_flight_bytes);
            // The newest container before the slice's reads are queued (see `read_request`).
            let mut since: Option<i64> = None;
            // The catalogue is listed a page at a time until the slice is full: a slice of
            // small objects holds a window of them, not one page.
            'slice: while new.len() < window {
                let page = (window - new.len()).min(LIST_PAGE) as u32;
                let copies = cat.live_copies_on(barcode, cur.after, page).await?;
                if copies.is_empty() {
                    cur.source_done = true;
                    break;
                }
                let since = match since {
                    Some(s) => s,
                    None => *since.insert(cat.last_container_id().await?),
                };
                for placed in copies {
                    let c = placed.copy;
                    // An object larger than the room left waits for the buffer to empty (it
                    // goes alone when nothing else is in flight); another generation of a key
                    // in flight waits for it (one write batch cannot hold a key twice).
                    let alone = in_flight.is_empty() && new.is_empty();
                    if (c.length > room_bytes && !alone) || in_flight.contains(&c.key) {
                        break 'slice;
                    }
                    cur.after = Some(placed.position);
                    if job.add_copies
                        && cat
                            .has_copy_in_pool(to_pool, barcode, &c.key, c.generation)
                            .await?
                    {
                        continue;
                    }
                    room_bytes = room_bytes.saturating_sub(c.length);
                    in_flight.insert(c.key.clone());
                    new.push(read_request(
                        &c,
                        placed.position,
                        buffer,
                        source_pool,
                        to_pool,
                        rec.priority,
                        since,
                    ));
                }
            }
            if !new.is_empty() {
                fenced(fence).await?;
                rt.requests.add(&rec.id, &new).await?;
                expanded = true;
            }
            save(rt, rec, cur).await?;
        }
        // The first slice waits for this second one at most: it is not held again.
        if lead {
            cur.lead = true;
            save(rt, rec, cur).await?;
        }
        // 3. Done when every copy is expanded and every request settled.
        if cur.source_done && reqs.is_empty() && add.is_empty() && !expanded {
            return Ok(());
        }
        if settled || expanded {
            idle = 0;
        } else {
            let pause = step_pause(rt, idle);
            tokio::select! {
                r = slice_read_within(rt, &rec.id, to_pool, pause), if reads > 0 => r?,
                _ = tokio::time::sleep(pause), if reads == 0 => {}
                _ = cancel.cancelled() => {}
            }
            idle = idle.saturating_add(1);
        }
    }
}

/// How long the loop waits after `idle` steps in a row in which nothing moved: a worker poll
/// (at least a tenth of a second), doubling with each idle step up to 2 s. A slice a drive
/// takes minutes over is not listed ten times a second.
fn step_pause<E>(rt: &Runtime<E>, idle: u32) -> Duration {
    let poll = rt.config.worker.poll_interval_ms.max(100);
    Duration::from_millis((poll << idle.min(5)).min(2_000).max(poll))
}

/// Wait up to `pause` for job `id`'s reads to be read, looking every worker poll (at least
/// every 100 ms): a slice turns into writes as soon as it is read, not up to a pause later,
/// while the writer streams what it has (its drive runs dry if the next slice comes late).
/// Counting the job's requests ([`TapeRequests::writes_coming`](reel_queue::TapeRequests::writes_coming),
/// the count a writer waiting for them reads too) is one indexed query; listing them is what
/// the pause spares.
async fn slice_read_within<E>(
    rt: &Runtime<E>,
    id: &str,
    to_pool: &str,
    pause: Duration,
) -> Result<()> {
    let look = Duration::from_millis(rt.config.worker.poll_interval_ms.clamp(20, 100));
    let until = tokio::time::Instant::now() + pause;
    while tokio::time::Instant::now() < until {
        tokio::time::sleep(look.min(until - tokio::time::Instant::now())).await;
        let c = rt.requests.writes_coming(id, to_pool).await?;
        if c.reads_claimed + c.reads_queued == 0 {
            break;
        }
    }
    Ok(())
}

/// The read of one live copy into the buffer.
fn read_request(
    c: &CopyLocation,
    position: TapePosition,
    buffer: &Path,
    source_pool: &Option<String>,
    to_pool: &str,
    priority: i32,
    since: i64,
) -> NewTapeRequest {
    // One name per copy on the cartridge: its container, offset and object (empty objects
    // share an offset with the next one; two of them once shared a buffered file).
    let staged = buffer.join(format!(
        "c{}-{}-{}",
        c.container_id, c.offset, position.object
    ));
    let detail = ReadDetail::of(c, staged.clone(), buffer.to_path_buf(), Overwrite::Always);
    let note = RepackNote {
        from: c.barcode.clone(),
        to: to_pool.to_string(),
        generation: c.generation,
        kind: c.meta.map(|m| m.kind).unwrap_or(ObjectKind::File),
        staged,
        since,
    };
    NewTapeRequest {
        target: MountTarget::Read {
            barcode: c.barcode.clone(),
        },
        pool: source_pool.clone(),
        object_key: c.key.clone(),
        bytes: c.length,
        files: 1,
        priority,
        detail: with_note(request_detail::to_json(&detail), &note),
    }
}

/// The write of a buffered object to the destination pool.
fn write_request(read: &TapeRequest, note: &RepackNote, priority: i32) -> NewTapeRequest {
    let detail = WriteDetail {
        path: note.staged.clone(),
        generation: note.generation,
        size: read.bytes,
        kind: note.kind,
        // The buffered file is the repack's own: nothing changes it behind the write.
        mtime_ns: None,
        ctime_ns: None,
        confine: None,
    };
    NewTapeRequest {
        target: MountTarget::Write {
            pool: note.to.clone(),
        },
        pool: Some(note.to.clone()),
        object_key: read.object_key.clone(),
        bytes: read.bytes,
        files: 1,
        priority,
        detail: with_note(request_detail::to_json(&detail), note),
    }
}

/// Refuse to go on when the job lease is lost (a worker frozen past it, whose job another
/// worker now runs).
async fn fenced(fence: &Fence) -> Result<()> {
    fence.check().await
}

/// Save the cursor and the progress.
async fn save<E: TapeExecutor>(rt: &Arc<Runtime<E>>, rec: &JobRecord, cur: &Cursor) -> Result<()> {
    rt.queue
        .store()
        .set_checkpoint(&rec.id, &serde_json::json!({ "repack": cur }))
        .await?;
    rt.queue
        .store()
        .set_progress(
            &rec.id,
            Progress {
                objects_done: cur.moved,
                objects_total: cur.total_objects.max(cur.moved),
                bytes_done: cur.moved_bytes,
                bytes_total: cur.total_bytes.max(cur.moved_bytes),
            },
        )
        .await
}

/// Give the cartridge the state it had before the job (it keeps live data).
async fn give_back(cat: &Catalogue, rec: &JobRecord, barcode: &str, cur: &Cursor) {
    let Some(prior) = cur
        .prior_state
        .as_deref()
        .and_then(|s| s.parse::<CartridgeState>().ok())
    else {
        return;
    };
    let why = format!("repack job {} ended with live data left on it", rec.id);
    if let Err(e) = cat
        .set_cartridge_state_noted(barcode, prior, &why, REEL)
        .await
    {
        tracing::warn!(%barcode, error = %e, "cannot give the cartridge its state back");
    }
}

/// Wait (a bounded time) for drives to finish the job's claimed requests, so nothing writes
/// into the buffer after it is removed.
async fn settle_claimed<E: TapeExecutor>(rt: &Arc<Runtime<E>>, rec: &JobRecord) {
    for _ in 0..600 {
        match rt.requests.counts(&rec.id).await {
            Ok(c) if c.claimed == 0 => return,
            Err(_) => return,
            Ok(_) => tokio::time::sleep(Duration::from_millis(100)).await,
        }
    }
}

fn remove_file(p: &Path) {
    match std::fs::remove_file(p) {
        Ok(()) => {}
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
        Err(e) => {
            tracing::warn!(path = %p.display(), error = %e, "cannot remove a buffered object")
        }
    }
}

fn remove_buffer(dir: &Path) {
    if let Err(e) = std::fs::remove_dir_all(dir)
        && e.kind() != std::io::ErrorKind::NotFound
    {
        tracing::warn!(path = %dir.display(), error = %e, "cannot remove the repack buffer");
    }
}

/// Cartridges left `repacking` by a repack job that no longer runs (cancelled, or failed for
/// good, while no worker was running it; or gone): each gets back the state its job saved (or
/// `full` when it holds no live data), and the buffers of ended jobs are removed. Run by every
/// worker's maintenance pass; what it does is the same whichever worker does it. Returns the
/// cartridges given back.
pub async fn sweep<E: TapeExecutor>(rt: &Arc<Runtime<E>>) -> Result<u32> {
    let Some(cat) = rt.executor.object_catalogue() else {
        return Ok(0);
    };
    let store = rt.queue.store();
    let mut given = 0;
    for c in cat.cartridges().await? {
        if c.state != CartridgeState::Repacking {
            continue;
        }
        let job = match c.state_reason.strip_prefix("repack job ") {
            Some(id) => store.get(id).await?,
            None => None,
        };
        if job.as_ref().is_some_and(|j| !j.state.is_final()) {
            continue;
        }
        // The state the job saved, when it saved one for this cartridge.
        let prior: Option<CartridgeState> = job.as_ref().and_then(|j| {
            let cur: Cursor =
                serde_json::from_value(j.checkpoint.as_ref()?.get("repack")?.clone()).ok()?;
            let named = match &j.spec {
                reel_queue::job::JobSpec::Repack(r) => r.cartridges.get(cur.index)? == &c.barcode,
                _ => false,
            };
            if named {
                cur.prior_state?.parse().ok()
            } else {
                None
            }
        });
        let live = cat.live_on(&c.barcode).await?;
        let state = match prior {
            Some(p) if live.objects > 0 || p == CartridgeState::Broken => p,
            _ if live.objects == 0 => CartridgeState::Full,
            Some(p) => p,
            None => CartridgeState::Full,
        };
        let why = format!(
            "its repack ({}) ended{}; {} live objects left on it",
            c.state_reason,
            job.as_ref()
                .map(|j| format!(" {}", j.state))
                .unwrap_or_default(),
            live.objects
        );
        cat.set_cartridge_state_noted(&c.barcode, state, &why, REEL)
            .await?;
        tracing::warn!(barcode = %c.barcode, %state, reason = %why, "cartridge given back after its repack ended");
        given += 1;
    }
    // Buffers of jobs that ended.
    if let Ok(dir) = std::fs::read_dir(&rt.config.repack.buffer_dir) {
        for entry in dir.flatten() {
            let name = entry.file_name().to_string_lossy().to_string();
            let ended = match store.get(&name).await {
                Ok(Some(j)) => j.state.is_final(),
                Ok(None) => true,
                Err(_) => false,
            };
            if ended {
                remove_buffer(&entry.path());
            }
        }
    }
    Ok(given)
}

/// The lease one worker holds while it runs the policy pass, for `[repack] every_minutes`:
/// other workers skip the pass meanwhile.
pub const POLICY_LEASE: &str = "reel.repack-policy";

/// The policy pass (`[repack] auto`): what the pools' policies ask for
/// ([`reel_queue::repack_select::policy_plan`]), submitted as jobs, leaving out cartridges an
/// unfinished repack or reclaim already names. Run by one worker at a time. Returns the jobs
/// submitted.
pub async fn policy_pass<E: TapeExecutor>(rt: &Arc<Runtime<E>>) -> Result<usize> {
    let Some(cat) = rt.executor.object_catalogue() else {
        return Ok(0);
    };
    let ttl = Duration::from_secs(rt.config.repack.every_minutes.max(1) * 60);
    if rt
        .leases
        .acquire(POLICY_LEASE, &rt.name, ttl)
        .await
        .is_err()
    {
        return Ok(0);
    }
    let busy = reel_queue::repack_select::busy(rt.queue.store()).await?;
    let plan = reel_queue::repack_select::policy_plan(cat, &rt.config, &busy).await?;
    let mut submitted = 0;
    for spec in reel_queue::repack_select::policy_jobs(&plan, REEL) {
        // Checked as a submission is: a cartridge that changed since the plan is refused.
        let checked = async {
            reel_queue::repack_select::queue_refusal(rt.queue.store(), &busy, &spec).await?;
            reel_queue::submission::check(&spec, &rt.config, cat).await
        }
        .await;
        if let Err(e) = checked {
            tracing::warn!(kind = %spec.kind(), error = %e, "a policy's job is refused");
            continue;
        }
        let rec = rt.queue.submit(spec, None).await?;
        tracing::info!(job = %rec.id, kind = %rec.kind, "submitted by the repack policy");
        submitted += 1;
    }
    Ok(submitted)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_note_travels_in_the_detail_beside_the_read() {
        let note = RepackNote {
            from: "A00001".into(),
            to: "p".into(),
            generation: 3,
            kind: ObjectKind::File,
            staged: "/b/c1-0".into(),
            since: 7,
        };
        let d = with_note(serde_json::json!({"generation": 3}), &note);
        let r = TapeRequest {
            id: 1,
            job_id: "j".into(),
            target: MountTarget::Read {
                barcode: "A00001".into(),
            },
            pool: None,
            object_key: "k".into(),
            bytes: 1,
            files: 1,
            priority: 5,
            detail: d,
            state: "queued".into(),
            claimed_by: None,
            claim_epoch: None,
            error: None,
            attempts: 0,
        };
        assert_eq!(note_of(&r).ok(), Some(note));
        let plain = TapeRequest {
            detail: serde_json::json!({"generation": 3}),
            ..r
        };
        assert!(note_of(&plain).is_err());
    }

    #[test]
    fn only_cartridges_in_the_library_with_data_are_repacked() {
        assert!(repackable(CartridgeState::Full));
        assert!(repackable(CartridgeState::Broken));
        assert!(!repackable(CartridgeState::New));
        assert!(!repackable(CartridgeState::Exported));
    }
}
