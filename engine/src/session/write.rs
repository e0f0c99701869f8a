//! The archive data path, three threads joined by bounded queues so the tape streams: the
//! spool reader reads each spool file straight into record buffers and hashes every object; the
//! hasher computes the container's SHA-256 over the data records and their CRC32C; the drive
//! thread writes them and hands the buffers back to the reader for the next records. The two
//! SHA-256 passes over every byte thus run in parallel, and every byte is copied once on the
//! host (page cache into the record buffer).
//!
//! Durability is group commit: container-closing filemarks are written immediate, and one
//! synchronous filemark per `barrier_bytes` or `barrier_seconds` (and at the end) makes every
//! container before it durable. A container is `pending` in the catalogue before its first
//! record reaches the drive, `durable` once a barrier covers it, `verified` after read-back.
//! Early warning closes the current container cleanly and ends the session on this cartridge;
//! what is not durable here is handed back to be written elsewhere. Nothing is ever written
//! anywhere but at end of data.
//!
//! A session may be given a [`Refill`]: once it has framed every item it was given, it asks it
//! for more before it closes, so work that arrives while it writes (a repack's next slice)
//! joins the session instead of paying a synchronous filemark, a stop and a new session. The
//! group-commit barriers still make its containers durable as it goes.
//!
//! Space ([`super::space`]): before each object the reader checks that it fits in the room the
//! cartridge has left (its size, its container's overhead and the early-warning margin); one
//! that does not closes the container and ends the session here ([`WriteOutcome::no_room`]).
//! After early warning the reader abandons the object it is reading (it goes elsewhere),
//! closes the container with the objects it completed, and the drive thread writes at most
//! `early_warning_margin_bytes` more; a container whose tail would not fit is given up
//! (filemark, dead) rather than run into end of medium. Near the end of a cartridge the
//! pipeline holds no more than that margin, so the close after early warning fits it.

use std::path::PathBuf;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::Instant;

use reel_plugin_abi::host::{CallError, DriveHandle};
use reel_plugin_abi::sdk::WriteRecord;
use reel_plugin_abi::{REEL_CAP_LBP, REEL_LBP_CRC32C, REEL_SPACE_EOD};
use sha2::{Digest, Sha256};
use tokio::sync::mpsc;
use tracing::{Instrument, info, info_span, warn};
use uuid::Uuid;

use super::source::{self, SourceFault, SourceStamp};
use super::space::{self, NoRoom, Room};
use super::verify::{self, VerifyTarget};
use super::{
    CancelToken, Fence, Progress, ProgressFn, SessionConfig, SessionError, SessionSummary,
    VerifyMode, secs, unix_now,
};
use crate::catalogue::{Cartridge, Catalogue, CatalogueError, ContainerState, NewCopy};
use crate::device::lbp::{refused_on_write, write_checked};
use crate::device::{DeviceError, Drive};
use crate::format::{ContainerHeader, ExternalHashBuilder, ObjectKind};
use crate::integrity::Reporter;

/// One object to archive: a key, its generation, and the spool file holding its bytes.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ArchiveItem {
    /// Object key.
    pub key: String,
    /// Generation (the same for every copy of one archive).
    pub generation: u64,
    /// Spool file.
    pub path: PathBuf,
    /// Expected size in bytes (of a link: of its target).
    pub size: u64,
    /// What the source was planned as: a regular file, or a symbolic link archived as a link
    /// (its target is the object's bytes; it is never followed).
    pub kind: ObjectKind,
    /// The source as the archive's planner saw it, when it recorded that: a source changed
    /// since is refused rather than archived (two copies of one object must be one content).
    pub planned: Option<SourceStamp>,
    /// The root the source must be reached beneath, with no symbolic link on the way, when the
    /// job came with an API token's roots ([`crate::session::confine`]); `None`: any path.
    pub confine: Option<PathBuf>,
}

/// What a write session achieved on one cartridge.
#[derive(Debug)]
pub struct WriteOutcome {
    /// Items now durable (and read back, as the verify mode asks) on this cartridge, and
    /// items found already copied in its pool by an earlier attempt (not written again).
    pub written: Vec<ArchiveItem>,
    /// Items not durable here: write them to another cartridge (or again).
    pub remaining: Vec<ArchiveItem>,
    /// Items whose source could not be archived (missing, not a regular file, unreadable,
    /// changed): none of their bytes is indexed or catalogued; the rest of the session went on.
    pub failed: Vec<(ArchiveItem, SourceFault)>,
    /// The cartridge reached early warning or end of medium, or the next object does not fit
    /// and the cartridge is to take no more ([`NoRoom::marks_full`]): mark it full.
    pub cartridge_full: bool,
    /// The session ended before this object because it does not fit in the room left (the
    /// object and the ones after it are in `remaining`).
    pub no_room: Option<NoRoom>,
    /// Containers that became durable or verified.
    pub containers: Vec<i64>,
    /// Where the time went.
    pub summary: SessionSummary,
    /// Why the session stopped early, if it did (device error, cancel, lost lease).
    pub stopped_by: Option<SessionError>,
}

impl WriteOutcome {
    /// No session ran: every item was found already copied in the pool.
    pub fn nothing_to_write(already: Vec<ArchiveItem>) -> WriteOutcome {
        WriteOutcome {
            written: already,
            remaining: Vec::new(),
            failed: Vec::new(),
            cartridge_full: false,
            no_room: None,
            containers: Vec::new(),
            summary: SessionSummary::default(),
            stopped_by: None,
        }
    }
}

/// More items for a session that has framed everything it was given (see the module doc).
///
/// Asked from the spool reader's thread, between containers and when a container's items run
/// out; an empty answer ends the session, and the refill is not asked again. The answer may
/// take a while (the caller waits for work it knows is coming), but it is dropped unfinished if
/// the session stops meanwhile, so what it takes must be accounted for where it is taken.
pub trait Refill: Send {
    /// The next items to write, or none.
    fn more(&mut self) -> futures::future::BoxFuture<'_, Vec<ArchiveItem>>;
}

/// A session's items by position: the ones it was given, then what its refill adds.
struct ItemList {
    items: std::sync::Mutex<Vec<ArchiveItem>>,
    refill: std::sync::Mutex<Option<Box<dyn Refill>>>,
}

impl ItemList {
    fn new(items: Vec<ArchiveItem>, refill: Option<Box<dyn Refill>>) -> ItemList {
        ItemList {
            items: std::sync::Mutex::new(items),
            refill: std::sync::Mutex::new(refill),
        }
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, Vec<ArchiveItem>> {
        self.items.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// The item at position `i`, if there is one yet.
    fn get(&self, i: usize) -> Option<ArchiveItem> {
        self.lock().get(i).cloned()
    }

    /// The item at `i`, asking the refill for more once the list is used up (between two
    /// containers: see `frame`); `None` ends the session. A refill still waiting when the
    /// session stops (`stopped`) is dropped.
    fn next(
        &self,
        i: usize,
        rt: &tokio::runtime::Handle,
        stopped: &(dyn Fn() -> bool + Sync),
    ) -> Option<ArchiveItem> {
        if let Some(it) = self.get(i) {
            return Some(it);
        }
        let mut slot = self.refill.lock().unwrap_or_else(|e| e.into_inner());
        let refill = slot.as_mut()?;
        let more = rt.block_on(async {
            tokio::select! {
                more = refill.more() => more,
                () = async {
                    while !stopped() {
                        tokio::time::sleep(std::time::Duration::from_millis(20)).await;
                    }
                } => Vec::new(),
            }
        });
        if more.is_empty() {
            *slot = None;
            return None;
        }
        info!(objects = more.len(), "more objects join the write session");
        let mut items = self.lock();
        items.extend(more);
        items.get(i).cloned()
    }

    /// Every item, by position.
    fn take(&self) -> Vec<ArchiveItem> {
        std::mem::take(&mut *self.lock())
    }
}

/// Everything a write session needs besides the cartridge and the items.
#[derive(Clone)]
pub struct WriteContext {
    /// The catalogue.
    pub catalogue: Catalogue,
    /// The drive holding the cartridge.
    pub drive: Drive,
    /// Tunables.
    pub config: SessionConfig,
    /// Lease check before writes.
    pub fence: Arc<dyn Fence>,
    /// Cooperative cancel.
    pub cancel: CancelToken,
    /// Progress callback (objects and bytes durable), by the items' positions (the given
    /// ones, then the refill's in the order it gave them).
    pub progress: ProgressFn,
}

/// A container the producer has framed completely.
#[derive(Clone, Debug)]
struct Closed {
    id: i64,
    first_block: u64,
    last_block: u64,
    bytes: u64,
    sha256: [u8; 32],
    copies: Vec<NewCopy>,
    items: Vec<usize>,
}

/// From the spool reader to the hasher.
enum Item {
    /// A container starts: its catalogue row exists (pending).
    Begin,
    /// A header or footer record.
    Record(Vec<u8>),
    /// A data record: part of the container's data stream and its SHA-256.
    Data(Vec<u8>),
    /// The container's data records were all sent: reply with their SHA-256 (for the footer).
    Seal(crossbeam_channel::Sender<[u8; 32]>),
    /// The container's last record was sent: write its filemark.
    End { closed: Closed, sync: bool },
    /// The container is given up (early warning before any of its objects was complete): end
    /// it with a synchronous filemark; it is dead space.
    GiveUp,
}

/// From the hasher to the drive thread.
enum Out {
    /// A container starts.
    Begin,
    /// A record to write, with its CRC32C under LBP; data record buffers go back for reuse.
    Record {
        rec: Vec<u8>,
        crc: Option<u32>,
        data: bool,
    },
    /// Write the container's filemark.
    End { closed: Closed, sync: bool },
    /// End the open container with a synchronous filemark; it is dead space.
    GiveUp,
}

enum Event {
    Written(Closed),
    Barrier {
        block: u64,
        file: u64,
    },
    EarlyWarning,
    /// The open container's tail would have gone past the early-warning margin: given up.
    GaveUp,
    Overflow,
    Stopped(SessionError),
}

#[derive(Default)]
struct DriveTally {
    transfer_ns: u64,
    flush_ns: u64,
    position_ns: u64,
}

/// Write `items` to the mounted, labelled `cartridge` at its end of data, then what `refill`
/// gives while the session lasts.
///
/// Returns what became durable here and what must go elsewhere. Errors are returned only
/// when nothing could start (positioning, catalogue); a failure mid-session is reported in
/// [`WriteOutcome::stopped_by`] with everything durable so far kept.
pub async fn write_session(
    ctx: &WriteContext,
    cartridge: &Cartridge,
    items: Vec<ArchiveItem>,
    refill: Option<Box<dyn Refill>>,
) -> Result<WriteOutcome, SessionError> {
    ctx.config.validate()?;
    let span = info_span!("write_session", barcode = %cartridge.barcode, drive = ctx.drive.index(), items = items.len());
    run(ctx, cartridge, items, refill).instrument(span).await
}

async fn run(
    ctx: &WriteContext,
    cartridge: &Cartridge,
    items: Vec<ArchiveItem>,
    refill: Option<Box<dyn Refill>>,
) -> Result<WriteOutcome, SessionError> {
    let mut summary = SessionSummary::default();
    let barcode = cartridge.barcode.clone();
    let pool = cartridge
        .pool
        .clone()
        .ok_or_else(|| SessionError::Cartridge {
            barcode: barcode.clone(),
            reason: "has no pool: label it with `reel intake` first".into(),
        })?;
    let cart_uuid = cartridge
        .cartridge_uuid
        .ok_or_else(|| SessionError::Cartridge {
            barcode: barcode.clone(),
            reason: "is not labelled; run `reel intake` first".into(),
        })?;

    // Position at end of data and check it is where the catalogue says.
    let t = ctx.drive.space(REEL_SPACE_EOD, 0).await?;
    summary.position_s += secs(t);
    summary.locates += 1;
    let pos = ctx.drive.read_position().await?;
    if pos.block != cartridge.eod_block {
        return Err(SessionError::EodMismatch {
            barcode,
            found: pos.block,
            expected: cartridge.eod_block,
        });
    }
    let mut lbp = ctx.config.lbp && ctx.drive.has_cap(REEL_CAP_LBP);
    if lbp {
        ctx.drive.set_lbp(REEL_LBP_CRC32C).await?;
        // a drive that refuses LBP is run without it (Drive::set_lbp)
        lbp = ctx.drive.lbp_enabled();
    }

    // The room this cartridge has left (None: unknown; early warning decides).
    let remaining = space::reported_remaining(&ctx.drive).await;
    let room = Room::plan(
        cartridge.capacity_bytes,
        cartridge.used_bytes,
        remaining,
        ctx.config.early_warning_margin_bytes,
    );
    match room {
        Some(r) => {
            info!(barcode = %barcode, capacity = r.capacity, left = r.left, "room on the cartridge")
        }
        None => {
            warn!(barcode = %barcode, "capacity unknown (the drive reports none): objects are started without a room check; early warning ends the session")
        }
    }

    let items = Arc::new(ItemList::new(items, refill));
    let depth = ctx.config.pipeline_records.max(2);
    // Bytes of records the reader has sent that the drive has not written yet.
    let in_flight = Arc::new(AtomicU64::new(0));
    let (tx, hash_rx) = crossbeam_channel::bounded::<Item>((depth / 4).max(2));
    let (hash_tx, rx) = crossbeam_channel::bounded::<Out>(depth);
    // Written data record buffers, back to the spool reader.
    let (recycle_tx, recycle_rx) = crossbeam_channel::unbounded::<Vec<u8>>();
    let (ev_tx, mut ev_rx) = mpsc::unbounded_channel::<Event>();
    let close_soon = Arc::new(AtomicBool::new(false));
    let abort = Arc::new(AtomicBool::new(false));

    // Producer: read, hash, frame.
    let producer = {
        let items = items.clone();
        let cfg = ctx.config.clone();
        let catalogue = ctx.catalogue.clone();
        let close_soon = close_soon.clone();
        let abort = abort.clone();
        let rt = tokio::runtime::Handle::current();
        let start = ProducerStart {
            barcode: barcode.clone(),
            pool: pool.clone(),
            cartridge_uuid: cart_uuid,
            first_block: cartridge.eod_block,
            first_file: cartridge.next_file,
            room,
            pipeline_bytes: (depth as u64 + (depth / 4).max(2) as u64 + 2)
                * ctx.config.record_size as u64,
        };
        let in_flight = in_flight.clone();
        std::thread::Builder::new()
            .name("reel-spool".into())
            .spawn(move || {
                produce(
                    rt,
                    catalogue,
                    cfg,
                    start,
                    &items,
                    Queues {
                        tx,
                        recycle: recycle_rx,
                        in_flight,
                    },
                    &close_soon,
                    &abort,
                )
            })
            .map_err(|e| {
                SessionError::Other(format!("cannot start the spool reader thread: {e}"))
            })?
    };
    // Hasher: container SHA-256 and CRC32C, between the reader and the drive.
    let hasher = std::thread::Builder::new()
        .name("reel-hash".into())
        .spawn(move || hash_stage(hash_rx, hash_tx, lbp))
        .map_err(|e| SessionError::Other(format!("cannot start the hashing thread: {e}")));
    let hasher = match hasher {
        Ok(h) => h,
        Err(e) => {
            // The reader stops at its first send (the hasher's queue is gone).
            abort.store(true, Ordering::SeqCst);
            let _ = producer.join();
            return Err(e);
        }
    };

    // Drive thread: drain the queue.
    let drive_job = {
        let fence = ctx.fence.clone();
        let cancel = ctx.cancel.clone();
        let close_soon = close_soon.clone();
        let abort = abort.clone();
        let drive = ctx.drive.clone();
        let in_flight = in_flight.clone();
        let margin = ctx.config.early_warning_margin_bytes;
        let room_at_start = room;
        let reporter = ctx.drive.reporter(&barcode);
        let first_block = pos.block;
        let prime_bytes = PRIME_BYTES.min(depth as u64 * ctx.config.record_size as u64 / 2);
        async move {
            drive
                .run(move |h| {
                    drain(
                        h,
                        rx,
                        DrainEnds {
                            ev: ev_tx,
                            recycle: recycle_tx,
                            in_flight,
                            reporter,
                            first_block,
                            prime_bytes,
                        },
                        &*fence,
                        &cancel,
                        &close_soon,
                        &abort,
                        margin,
                        room_at_start,
                    )
                })
                .await
        }
    };
    let drive_task = tokio::spawn(drive_job);

    // Coordinator: keep the catalogue in step with the tape.
    let mut written_not_durable: Vec<Closed> = Vec::new();
    let mut durable: Vec<Closed> = Vec::new();
    let mut cartridge_full = false;
    let mut stopped_by: Option<SessionError> = None;
    let mut used = cartridge.used_bytes;
    let mut progress = Progress::default();
    while let Some(ev) = ev_rx.recv().await {
        match ev {
            Event::Written(c) => {
                // A close the catalogue refuses leaves the container pending (dead below) and
                // stops the session; the session's other containers are kept as usual.
                match ctx
                    .catalogue
                    .close_container(c.id, c.last_block, c.bytes, c.sha256, &c.copies)
                    .await
                {
                    Ok(()) => written_not_durable.push(c),
                    Err(e) => {
                        warn!(container = c.id, barcode = %barcode, error = %e, "the catalogue refused the container's close; the session stops");
                        abort.store(true, Ordering::SeqCst);
                        stopped_by.get_or_insert(match e {
                            CatalogueError::Fenced { .. } => SessionError::Fenced(e.to_string()),
                            e => SessionError::Catalogue(e),
                        });
                    }
                }
            }
            Event::Barrier { block, file } => {
                let ids: Vec<i64> = written_not_durable.iter().map(|c| c.id).collect();
                let mut live = true;
                if !ids.is_empty() {
                    match ctx
                        .catalogue
                        .set_container_state(&ids, ContainerState::Durable)
                        .await
                    {
                        Ok(()) => {}
                        // The lease lapsed: these containers never count (dead below, as
                        // begun and not durable); the tape's end of data still moves past them.
                        Err(e @ CatalogueError::Fenced { .. }) => {
                            warn!(barcode = %barcode, error = %e, "lease lost before the barrier's containers became durable; they are dead space and the session stops");
                            abort.store(true, Ordering::SeqCst);
                            stopped_by.get_or_insert(SessionError::Fenced(e.to_string()));
                            live = false;
                        }
                        Err(e) => {
                            // The reader stops at its next step (and asks its refill no more).
                            abort.store(true, Ordering::SeqCst);
                            return Err(e.into());
                        }
                    }
                }
                let mut finished: Vec<usize> = Vec::new();
                if live {
                    for c in &written_not_durable {
                        used += c.bytes;
                        if ctx.config.verify == VerifyMode::None {
                            progress.objects += c.items.len() as u64;
                            progress.bytes += c.bytes;
                            finished.extend(c.items.iter().copied());
                        }
                    }
                }
                if let Err(e) = ctx.catalogue.set_eod(&barcode, block, file, used).await {
                    abort.store(true, Ordering::SeqCst);
                    return Err(e.into());
                }
                progress.block = Some(block);
                if live {
                    durable.append(&mut written_not_durable);
                } else {
                    written_not_durable.clear();
                }
                (ctx.progress)(progress, &finished);
            }
            Event::EarlyWarning => {
                info!(barcode = %barcode, "early warning: closing the container and the cartridge");
                cartridge_full = true;
            }
            Event::GaveUp => {
                warn!(barcode = %barcode, margin = ctx.config.early_warning_margin_bytes, "early warning: the open container's tail would exceed the margin; it is given up (dead) and its objects go elsewhere");
                cartridge_full = true;
            }
            Event::Overflow => {
                warn!(barcode = %barcode, "end of medium before the container closed");
                cartridge_full = true;
            }
            Event::Stopped(e) => {
                stopped_by = Some(e);
            }
        }
    }
    let tally = match drive_task.await {
        Ok(Ok(t)) => t,
        Ok(Err(e)) => {
            stopped_by.get_or_insert(SessionError::Device(e));
            DriveTally::default()
        }
        Err(e) => {
            stopped_by.get_or_insert(SessionError::Other(format!("drive task failed: {e}")));
            DriveTally::default()
        }
    };
    abort.store(true, Ordering::SeqCst);
    let Produced {
        begun,
        failed,
        stopped,
        no_room,
    } = match producer.join() {
        Ok(p) => p,
        Err(_) => Produced {
            stopped: Some(SessionError::Other(
                "the spool reader thread panicked".into(),
            )),
            ..Produced::default()
        },
    };
    if let Some(e) = stopped {
        stopped_by.get_or_insert(e);
    }
    // The reader has stopped: the list is final.
    let items = items.take();
    if let Some(nr) = &no_room {
        let least = space::least_needed(
            ctx.config.record_size,
            ctx.config.early_warning_margin_bytes,
        );
        if nr.marks_full(least) {
            info!(barcode = %barcode, reason = %nr, first = nr.first, "the next object does not fit and the cartridge takes nothing more for it: marked full");
            cartridge_full = true;
        } else {
            info!(barcode = %barcode, reason = %nr, "the next object does not fit: the session ends here; the cartridge keeps its room for smaller objects");
        }
    }
    if hasher.join().is_err() {
        stopped_by.get_or_insert(SessionError::Other("the hashing thread panicked".into()));
    }
    for (i, fault) in &failed {
        warn!(barcode = %barcode, key = %items[*i].key, error = %fault, "object not archived");
    }
    summary.transfer_s += secs(tally.transfer_ns);
    summary.flush_s += secs(tally.flush_ns);
    summary.position_s += secs(tally.position_ns);

    // Containers begun but not covered by a barrier are dead space now.
    let durable_ids: std::collections::HashSet<i64> = durable.iter().map(|c| c.id).collect();
    let dead: Vec<i64> = begun
        .iter()
        .copied()
        .filter(|id| !durable_ids.contains(id))
        .collect();
    if !dead.is_empty() {
        ctx.catalogue
            .set_container_state(&dead, ContainerState::Dead)
            .await?;
    }

    // Read back as the verify mode asks.
    let mut verified_ok: Vec<Closed> = Vec::new();
    let to_verify: Vec<usize> = match ctx.config.verify {
        VerifyMode::None => vec![],
        VerifyMode::Full => (0..durable.len()).collect(),
        VerifyMode::Sampled => (0..durable.len())
            .filter(|i| (*i as u64).is_multiple_of(ctx.config.sample_every))
            .collect(),
    };
    let mut failed_verify: std::collections::HashSet<i64> = Default::default();
    if !to_verify.is_empty()
        && stopped_by
            .as_ref()
            .map(|e| !matches!(e, SessionError::Device(_)))
            .unwrap_or(true)
    {
        let targets: Vec<VerifyTarget> = to_verify
            .iter()
            .map(|&i| VerifyTarget {
                id: durable[i].id,
                first_block: durable[i].first_block,
                last_block: durable[i].last_block,
                sha256: durable[i].sha256,
                objects: durable[i].copies.len(),
            })
            .collect();
        let vr = verify::read_back(
            &ctx.drive,
            &barcode,
            &targets,
            verify::DriveFault::Record,
            &ctx.cancel,
        )
        .await?;
        summary.position_s += vr.summary.position_s;
        summary.transfer_s += vr.summary.transfer_s;
        summary.locates += vr.summary.locates;
        let mut ok_ids = Vec::new();
        for (id, res) in vr.results {
            match res {
                Ok(()) => ok_ids.push(id),
                Err(reason) => {
                    warn!(container = id, barcode = %barcode, %reason, "read-back failed; the container is dead and its objects are written again");
                    failed_verify.insert(id);
                }
            }
        }
        if !ok_ids.is_empty() {
            match ctx
                .catalogue
                .set_container_state(&ok_ids, ContainerState::Verified)
                .await
            {
                Ok(()) => {}
                // The lease lapsed during the read-back: another worker may be writing these
                // objects again, so this writer's durable copies die rather than linger as
                // extra, never-verified copies.
                Err(e @ CatalogueError::Fenced { .. }) => {
                    warn!(barcode = %barcode, error = %e, containers = ok_ids.len(), "lease lost during the read-back; the containers it read back are dead, their objects are written again under a current lease");
                    stopped_by.get_or_insert(SessionError::Fenced(e.to_string()));
                    ctx.catalogue
                        .set_container_state(&ok_ids, ContainerState::Dead)
                        .await?;
                    failed_verify.extend(ok_ids.iter().copied());
                }
                Err(e) => return Err(e.into()),
            }
        }
        let bad: Vec<i64> = failed_verify.iter().copied().collect();
        if !bad.is_empty() {
            ctx.catalogue
                .set_container_state(&bad, ContainerState::Dead)
                .await?;
        }
    }
    let mut written_idx: Vec<usize> = Vec::new();
    let mut containers = Vec::new();
    let mut finished: Vec<usize> = Vec::new();
    for c in durable {
        if failed_verify.contains(&c.id) {
            continue;
        }
        if ctx.config.verify != VerifyMode::None {
            progress.objects += c.items.len() as u64;
            progress.bytes += c.bytes;
            finished.extend(c.items.iter().copied());
        }
        summary.bytes += c.bytes;
        summary.objects += c.items.len() as u64;
        summary.containers += 1;
        containers.push(c.id);
        written_idx.extend(c.items.iter().copied());
        verified_ok.push(c);
    }
    (ctx.progress)(progress, &finished);
    let mut settled: std::collections::HashSet<usize> = written_idx.iter().copied().collect();
    settled.extend(failed.iter().map(|(i, _)| *i));
    let written: Vec<ArchiveItem> = written_idx.iter().map(|&i| items[i].clone()).collect();
    let remaining: Vec<ArchiveItem> = (0..items.len())
        .filter(|i| !settled.contains(i))
        .map(|i| items[i].clone())
        .collect();
    let failed: Vec<(ArchiveItem, SourceFault)> = failed
        .into_iter()
        .map(|(i, f)| (items[i].clone(), f))
        .collect();
    info!(
        barcode = %barcode,
        written = written.len(),
        remaining = remaining.len(),
        failed = failed.len(),
        full = cartridge_full,
        transfer_s = summary.transfer_s,
        flush_s = summary.flush_s,
        "write session done"
    );
    Ok(WriteOutcome {
        written,
        remaining,
        failed,
        cartridge_full,
        no_room,
        containers,
        summary,
        stopped_by,
    })
}

struct ProducerStart {
    barcode: String,
    pool: String,
    cartridge_uuid: Uuid,
    first_block: u64,
    first_file: u64,
    /// The room left at the start (None: unknown).
    room: Option<Room>,
    /// Bytes the pipeline's queues hold when full.
    pipeline_bytes: u64,
}

/// The spool reader's ends of the pipeline.
struct Queues {
    /// To the hasher.
    tx: crossbeam_channel::Sender<Item>,
    /// Data record buffers back from the drive thread.
    recycle: crossbeam_channel::Receiver<Vec<u8>>,
    /// Bytes sent and not yet written (the drive thread takes them off).
    in_flight: Arc<AtomicU64>,
}

/// The reader's sending end: counts what it sends, in flight and framed this session.
struct Feed {
    tx: crossbeam_channel::Sender<Item>,
    in_flight: Arc<AtomicU64>,
    /// Bytes of records sent this session, filemarks counted as `space` counts them.
    framed: u64,
}

impl Feed {
    /// Send `item`; false when the hasher (so the drive side) is gone.
    fn send(&mut self, item: Item) -> bool {
        let len = match &item {
            Item::Record(r) | Item::Data(r) => r.len() as u64,
            _ => 0,
        };
        self.in_flight.fetch_add(len, Ordering::SeqCst);
        self.framed += len;
        self.tx.send(item).is_ok()
    }
}

/// The drive thread's other ends of the pipeline.
struct DrainEnds {
    /// Events to the coordinator.
    ev: mpsc::UnboundedSender<Event>,
    /// Written data record buffers back to the reader.
    recycle: crossbeam_channel::Sender<Vec<u8>>,
    /// Bytes sent and not yet written (taken off as records are written).
    in_flight: Arc<AtomicU64>,
    /// Where a record the drive refused under LBP is reported.
    reporter: Reporter,
    /// The block the first record goes to (end of data, as checked when the session began).
    first_block: u64,
    /// Bytes gathered for the drive's first call while the tape is stopped.
    prime_bytes: u64,
}

/// The hasher: hashes every data record into the container's SHA-256 (answering `Seal` with
/// it), adds each record's CRC32C under LBP, and passes everything on in order. Stops when
/// either side goes away.
fn hash_stage(
    rx: crossbeam_channel::Receiver<Item>,
    tx: crossbeam_channel::Sender<Out>,
    lbp: bool,
) {
    let mut container = Sha256::new();
    for it in rx.iter() {
        let out = match it {
            Item::Begin => Out::Begin,
            Item::Record(rec) => Out::Record {
                crc: lbp.then(|| crc32c::crc32c(&rec)),
                rec,
                data: false,
            },
            Item::Data(rec) => {
                container.update(&rec);
                Out::Record {
                    crc: lbp.then(|| crc32c::crc32c(&rec)),
                    rec,
                    data: true,
                }
            }
            Item::Seal(reply) => {
                let sha = std::mem::replace(&mut container, Sha256::new()).finalize();
                // A reader that stopped waiting has stopped the session.
                let _ = reply.send(sha.into());
                continue;
            }
            Item::End { closed, sync } => Out::End { closed, sync },
            Item::GiveUp => Out::GiveUp,
        };
        if tx.send(out).is_err() {
            return;
        }
    }
}

/// What the spool reader did.
#[derive(Default)]
struct Produced {
    /// Containers begun (each has a pending catalogue row before its first record is queued
    /// for the drive).
    begun: Vec<i64>,
    /// Items whose source failed, by index: their bytes (if any were framed) are dead space.
    failed: Vec<(usize, SourceFault)>,
    /// Why the reader stopped early, if not because the drive side did.
    stopped: Option<SessionError>,
    /// The object the reader stopped before: it does not fit in the room left.
    no_room: Option<NoRoom>,
}

/// Frame the items into containers.
#[allow(clippy::too_many_arguments)]
fn produce(
    rt: tokio::runtime::Handle,
    catalogue: Catalogue,
    cfg: SessionConfig,
    start: ProducerStart,
    items: &ItemList,
    queues: Queues,
    close_soon: &AtomicBool,
    abort: &AtomicBool,
) -> Produced {
    let mut out = Produced::default();
    if let Err(e) = frame(
        &rt, &catalogue, &cfg, &start, items, queues, close_soon, abort, &mut out,
    ) {
        out.stopped = Some(e);
    }
    out
}

/// How reading one object's source ended.
enum Read {
    /// All its bytes were framed and the source did not change.
    Whole,
    /// The source failed: the object is abandoned, the session goes on.
    Fault(SourceFault),
    /// The drive side stopped (or the session is aborting): stop framing.
    Stop,
    /// Early warning came while it was read: the object is abandoned (dead space in the
    /// container, not indexed) and goes to another cartridge.
    EarlyWarning,
}

/// What the reader waits for before it reads the next record near the end of a cartridge.
struct Throttle<'a> {
    /// Early warning seen by the drive thread.
    close_soon: &'a AtomicBool,
    /// The room left (None: unknown, never throttled).
    room: Option<Room>,
    /// Bytes the pipeline holds when full.
    pipeline_bytes: u64,
    /// Bytes the pipeline may hold near the end: the margin less the closing tail.
    near_end_bytes: u64,
    /// The record size.
    record_size: u64,
}

impl Throttle<'_> {
    /// Wait until the next record may be read: at once, unless the cartridge is near its end
    /// and the pipeline holds more than the margin allows (one record is always allowed).
    /// Some when the reader must stop reading the object instead.
    fn wait(&self, feed: &Feed, stopped: &dyn Fn() -> bool) -> Option<Read> {
        loop {
            if stopped() {
                return Some(Read::Stop);
            }
            if self.close_soon.load(Ordering::SeqCst) {
                return Some(Read::EarlyWarning);
            }
            let near = self
                .room
                .is_some_and(|r| r.near_end(feed.framed, self.pipeline_bytes));
            if !near {
                return None;
            }
            let q = feed.in_flight.load(Ordering::SeqCst);
            if q == 0 || q + self.record_size <= self.near_end_bytes {
                return None;
            }
            std::thread::sleep(std::time::Duration::from_micros(200));
        }
    }
}

/// Read one object's source into the container being built: at most its declared size plus
/// one byte (a source that grew is caught without reading it to its new end, and a device
/// never reaches here), stamped before and after.
fn read_object(
    b: &mut ExternalHashBuilder,
    it: &ArchiveItem,
    feed: &mut Feed,
    recycle: &crossbeam_channel::Receiver<Vec<u8>>,
    records: &mut u64,
    stopped: &dyn Fn() -> bool,
    throttle: &Throttle<'_>,
) -> Result<Read, SessionError> {
    let mut opened = match source::open_as(
        it.kind,
        &it.path,
        it.size,
        it.planned.as_ref(),
        it.confine.as_deref(),
    ) {
        Ok(x) => x,
        Err(fault) => return Ok(Read::Fault(fault)),
    };
    b.begin_object(&it.key, it.generation)?;
    b.set_object_meta(opened.meta)?;
    let mut src = std::io::Read::take(&mut opened.bytes, it.size.saturating_add(1));
    let mut n_total = 0u64;
    loop {
        match throttle.wait(feed, stopped) {
            None => {}
            Some(Read::EarlyWarning) => {
                b.abandon_object();
                return Ok(Read::EarlyWarning);
            }
            Some(other) => return Ok(other),
        }
        for r in recycle.try_iter() {
            b.recycle(r);
        }
        // Straight from the page cache into the record buffer.
        let (n, full) = match b.fill_from(&mut src) {
            Ok(x) => x,
            Err(e) => {
                b.abandon_object();
                return Ok(Read::Fault(SourceFault::unreadable(&it.path, &e)));
            }
        };
        n_total += n as u64;
        if let Some(r) = full {
            *records += 1;
            if !feed.send(Item::Data(r)) {
                return Ok(Read::Stop);
            }
        }
        if n == 0 {
            break;
        }
    }
    if let Err(fault) = source::check_opened_unchanged(&it.path, &opened, n_total) {
        b.abandon_object();
        return Ok(Read::Fault(fault));
    }
    Ok(Read::Whole)
}

/// Whether `it` fits in the room left after `framed` bytes: None when it does (or the room is
/// unknown), else why not. An object is counted with its index entry and a whole container's
/// overhead (a header, a short last record, the footer, a filemark), so the check holds
/// whether it opens a container or joins one.
fn no_room(
    room: Option<Room>,
    cfg: &SessionConfig,
    it: &ArchiveItem,
    framed: u64,
) -> Option<NoRoom> {
    let room = room?;
    let needed = space::room_needed(it.size, &it.key, cfg.record_size, room.reserve);
    if framed.saturating_add(needed) <= room.left {
        return None;
    }
    Some(NoRoom {
        key: it.key.clone(),
        needed,
        left: room.after(framed),
        capacity: room.capacity,
        fits_empty: room.fits_empty(framed, needed),
        first: framed == 0,
    })
}

#[allow(clippy::too_many_arguments)]
fn frame(
    rt: &tokio::runtime::Handle,
    catalogue: &Catalogue,
    cfg: &SessionConfig,
    start: &ProducerStart,
    items: &ItemList,
    queues: Queues,
    close_soon: &AtomicBool,
    abort: &AtomicBool,
    out: &mut Produced,
) -> Result<(), SessionError> {
    let Queues {
        tx,
        recycle,
        in_flight,
    } = queues;
    let mut feed = Feed {
        tx,
        in_flight,
        framed: 0,
    };
    let rs = cfg.record_size as u64;
    let throttle = Throttle {
        close_soon,
        room: start.room,
        pipeline_bytes: start.pipeline_bytes,
        // The close after early warning: a short last record and the footer.
        near_end_bytes: cfg
            .early_warning_margin_bytes
            .saturating_sub(space::container_overhead(cfg.record_size) - rs),
        record_size: rs,
    };
    let mut block = start.first_block;
    let mut file = start.first_file;
    let mut next = 0usize;
    let mut since_barrier_bytes = 0u64;
    let mut since_barrier = Instant::now();
    let stopped = || abort.load(Ordering::SeqCst);
    let stopping = || abort.load(Ordering::SeqCst) || close_soon.load(Ordering::SeqCst);
    while !stopping() {
        let Some(first) = items.next(next, rt, &stopping) else {
            break;
        };
        if let Some(nr) = no_room(start.room, cfg, &first, feed.framed) {
            out.no_room = Some(nr);
            return Ok(());
        }
        let uuid = Uuid::new_v4();
        let header = ContainerHeader {
            container_uuid: uuid,
            cartridge_uuid: start.cartridge_uuid,
            barcode: start.barcode.clone(),
            pool: start.pool.clone(),
            record_size: cfg.record_size as u32,
            sequence: file,
            created_unix: unix_now(),
        };
        let first_block = block;
        let id = rt.block_on(catalogue.create_container(
            uuid,
            &start.barcode,
            file,
            first_block,
            cfg.record_size as u32,
        ))?;
        out.begun.push(id);
        let mut b = ExternalHashBuilder::new(header);
        // A failed send means the drive side stopped: what is framed is not written.
        if !feed.send(Item::Begin) || !feed.send(Item::Record(b.header_record())) {
            return Ok(());
        }
        let mut records: u64 = 1;
        let mut copies = Vec::new();
        let mut in_container = Vec::new();
        let container_start = next;
        let mut early_warning = false;
        // Only items given before the container began: a refill is asked between containers,
        // so an object that joins the session is in a container created after it was given
        // (a repack retires its source copy only for a copy in a container newer than its
        // write request).
        while let Some(it) = items.get(next) {
            let it = &it;
            if next > container_start
                && let Some(nr) = no_room(start.room, cfg, it, feed.framed)
            {
                out.no_room = Some(nr);
                break;
            }
            match read_object(
                &mut b,
                it,
                &mut feed,
                &recycle,
                &mut records,
                &stopped,
                &throttle,
            )? {
                Read::Stop => return Ok(()),
                Read::EarlyWarning => {
                    // Not settled: it stays in `remaining` for the next cartridge.
                    early_warning = true;
                    break;
                }
                Read::Fault(fault) => out.failed.push((next, fault)),
                Read::Whole => {
                    let e = b.end_object()?;
                    copies.push(NewCopy {
                        key: e.key,
                        generation: e.generation,
                        size: e.length,
                        sha256: e.sha256,
                        offset: e.offset,
                        length: e.length,
                        meta: e.meta,
                    });
                    in_container.push(next);
                }
            }
            next += 1;
            if b.data_bytes() >= cfg.container_bytes || close_soon.load(Ordering::SeqCst) {
                break;
            }
        }
        if early_warning && copies.is_empty() {
            // Nothing complete to keep: end it with a filemark, dead space.
            let _ = feed.send(Item::GiveUp);
            return Ok(());
        }
        let bytes = b.data_bytes();
        if let Some(r) = b.finish_data() {
            records += 1;
            if !feed.send(Item::Data(r)) {
                return Ok(());
            }
        }
        let (reply_tx, reply_rx) = crossbeam_channel::bounded(1);
        if !feed.send(Item::Seal(reply_tx)) {
            return Ok(());
        }
        // No answer: the hasher stopped because the drive side did. A hasher that stopped may
        // leave this request unread in its queue (its sender, this thread, is still alive), so
        // wait in steps and give up once the session is stopping.
        let container_sha = loop {
            match reply_rx.recv_timeout(std::time::Duration::from_millis(20)) {
                Ok(sha) => break sha,
                Err(crossbeam_channel::RecvTimeoutError::Timeout) if !stopped() => {}
                Err(_) => return Ok(()),
            }
        };
        let (tail, footer) = b.finish_with(container_sha)?;
        for r in tail {
            records += 1;
            if !feed.send(Item::Record(r)) {
                return Ok(());
            }
        }
        since_barrier_bytes += bytes;
        // The next object (given, or asked of the refill only when nothing else ends the
        // session) does not fit a new container here: this one is the session's last, and
        // ends with the barrier that makes the session's containers durable.
        let last = early_warning
            || out.no_room.is_some()
            || close_soon.load(Ordering::SeqCst)
            || match items.next(next, rt, &stopping) {
                None => true,
                Some(it) => match no_room(start.room, cfg, &it, feed.framed) {
                    Some(nr) => {
                        out.no_room = Some(nr);
                        true
                    }
                    None => false,
                },
            };
        let sync = last
            || since_barrier_bytes >= cfg.barrier_bytes
            || since_barrier.elapsed().as_secs_f64() >= cfg.barrier_seconds;
        if sync {
            since_barrier_bytes = 0;
            since_barrier = Instant::now();
        }
        let closed = Closed {
            id,
            first_block,
            last_block: first_block + records - 1,
            bytes,
            sha256: footer.sha256,
            copies,
            items: in_container,
        };
        if !feed.send(Item::End { closed, sync }) {
            return Ok(());
        }
        feed.framed += space::FILEMARK;
        // The container's records, then its filemark.
        block = first_block + records + 1;
        file += 1;
        if last {
            break;
        }
    }
    Ok(())
}

/// The most a write session hands the drive in its first call after the tape stopped (the
/// session's start at a located tape, a synchronous filemark): a data set's worth, at most
/// half the pipeline.
const PRIME_BYTES: u64 = 8 << 20;

/// How long the drive thread waits for the pipeline to fill that first call before it writes
/// what it has.
const PRIME_WAIT: std::time::Duration = std::time::Duration::from_millis(50);

/// A record on its way to the drive: its bytes, its CRC32C under LBP, and whether it is a
/// data record (its buffer goes back to the reader).
type Pending = (Vec<u8>, Option<u32>, bool);

/// The drive side: write what arrives, report barriers, stop cleanly. After early warning it
/// writes at most `margin` bytes more, or, when the room is known, as much as the capacity the
/// drive reports still takes with `margin` kept free (an early-warning zone larger than the
/// margin is not run into end of medium either way); a record past both gives the open
/// container up.
///
/// While the tape is stopped (the session starts at a located tape; a synchronous filemark
/// stops it) the records that arrive are gathered, up to a data set ([`PRIME_BYTES`]) or for
/// at most [`PRIME_WAIT`], and handed to the drive in one call
/// ([`DriveHandle::write_records`]). A container's header (about 100 bytes) sent alone would
/// start the tape, drain in under a microsecond and stop it again before the data arrived,
/// one backhitch per session (docs/DECISIONS.md 42 and 56); a pipeline still filling at the
/// start of a session would do the same a few records later.
#[allow(clippy::too_many_arguments)]
fn drain(
    h: &mut DriveHandle,
    rx: crossbeam_channel::Receiver<Out>,
    ends: DrainEnds,
    fence: &dyn Fence,
    cancel: &CancelToken,
    close_soon: &AtomicBool,
    abort: &AtomicBool,
    margin: u64,
    room: Option<Room>,
) -> DriveTally {
    let DrainEnds {
        ev,
        recycle,
        in_flight,
        reporter,
        first_block,
        prime_bytes,
    } = ends;
    let mut t = Tape {
        fence,
        cancel,
        ev: &ev,
        in_flight: &in_flight,
        reporter: &reporter,
        recycle: &recycle,
        abort,
        close_soon,
        margin,
        room,
        open_container: false,
        next_block: first_block,
        tally: DriveTally::default(),
        past_ew: None,
        written: 0,
    };
    // Records gathered while the tape is stopped.
    let mut gathered: Vec<Pending> = Vec::new();
    let mut stopped = true;
    loop {
        let next = if gathered.is_empty() {
            rx.recv().ok()
        } else {
            match rx.recv_timeout(PRIME_WAIT) {
                Ok(it) => Some(it),
                Err(crossbeam_channel::RecvTimeoutError::Timeout) => {
                    // The pipeline is slow to fill: the drive gets what there is.
                    stopped = false;
                    if t.put(h, std::mem::take(&mut gathered)).is_err() {
                        return t.tally;
                    }
                    continue;
                }
                Err(crossbeam_channel::RecvTimeoutError::Disconnected) => None,
            }
        };
        let Some(it) = next else {
            // The producer is done (or gone): what was gathered still goes to the drive.
            let _ = t.put(h, std::mem::take(&mut gathered));
            return t.tally;
        };
        match it {
            Out::Begin => {
                if let Err(who) = fence.check() {
                    recycle_data(&recycle, std::mem::take(&mut gathered));
                    t.stop(SessionError::Fenced(who));
                    return t.tally;
                }
                t.open_container = true;
            }
            Out::Record { rec, crc, data } => {
                if stopped {
                    gathered.push((rec, crc, data));
                    let bytes: u64 = gathered.iter().map(|(r, _, _)| r.len() as u64).sum();
                    if bytes < prime_bytes {
                        continue;
                    }
                    stopped = false;
                    if t.put(h, std::mem::take(&mut gathered)).is_err() {
                        return t.tally;
                    }
                } else if t.put(h, vec![(rec, crc, data)]).is_err() {
                    return t.tally;
                }
            }
            Out::End { closed, sync } => {
                // A container smaller than a data set: all of it goes before its filemark, and
                // the tape moves from then on (until a synchronous filemark stops it again).
                if !gathered.is_empty() {
                    stopped = false;
                }
                if t.put(h, std::mem::take(&mut gathered)).is_err() {
                    return t.tally;
                }
                if let Err(who) = fence.check() {
                    close_tail(h, &ev, &mut t.tally, t.open_container);
                    t.stop(SessionError::Fenced(who));
                    return t.tally;
                }
                let r = h.write_filemarks(1, !sync);
                t.written += space::FILEMARK;
                let ns = h.last_status().elapsed_ns;
                if sync {
                    t.tally.flush_ns += ns;
                } else {
                    t.tally.transfer_ns += ns;
                }
                let eom_flag = h.last_status().flags & reel_plugin_abi::REEL_FLAG_EOM != 0;
                match r.map_err(DeviceError::from_call) {
                    Ok(()) if eom_flag => {
                        t.next_block += 1;
                        t.early_warning();
                    }
                    Ok(()) => t.next_block += 1,
                    Err(DeviceError::EarlyWarning { .. }) => {
                        t.next_block += 1;
                        t.early_warning();
                    }
                    Err(DeviceError::EndOfMedium { .. }) => {
                        let _ = ev.send(Event::Overflow);
                        abort.store(true, Ordering::SeqCst);
                        return t.tally;
                    }
                    Err(e) => {
                        t.stop(SessionError::Device(e));
                        return t.tally;
                    }
                }
                t.open_container = false;
                let _ = ev.send(Event::Written(closed));
                if sync {
                    // The synchronous filemark stopped the tape.
                    stopped = true;
                    match h.read_position() {
                        Ok(p) => {
                            t.next_block = p.block;
                            let _ = ev.send(Event::Barrier {
                                block: p.block,
                                file: p.file,
                            });
                        }
                        Err(e) => {
                            t.stop(SessionError::Device(DeviceError::from_call(e)));
                            return t.tally;
                        }
                    }
                }
            }
            Out::GiveUp => {
                // The open container is dead space: what was gathered of it is not written.
                recycle_data(&recycle, std::mem::take(&mut gathered));
                close_tail(h, &ev, &mut t.tally, t.open_container);
                return t.tally;
            }
        }
    }
}

/// Give the data record buffers of records that will not be written back to the reader.
fn recycle_data(recycle: &crossbeam_channel::Sender<Vec<u8>>, records: Vec<Pending>) {
    for (rec, _, data) in records {
        if data {
            let _ = recycle.send(rec);
        }
    }
}

/// The drive thread has stopped the session (the reason is already sent).
struct Halt;

/// Where the drive thread stands: the next block, what it wrote, early warning.
struct Tape<'a> {
    fence: &'a dyn Fence,
    cancel: &'a CancelToken,
    ev: &'a mpsc::UnboundedSender<Event>,
    in_flight: &'a AtomicU64,
    reporter: &'a Reporter,
    recycle: &'a crossbeam_channel::Sender<Vec<u8>>,
    abort: &'a AtomicBool,
    close_soon: &'a AtomicBool,
    margin: u64,
    room: Option<Room>,
    /// A container's first record was sent and its filemark not yet.
    open_container: bool,
    /// The block the next record or filemark goes to: counted, and taken from the drive at
    /// each barrier.
    next_block: u64,
    tally: DriveTally,
    /// Bytes written since early warning; None before it.
    past_ew: Option<u64>,
    /// Bytes written this session, filemarks counted as `space` counts them.
    written: u64,
}

impl Tape<'_> {
    fn stop(&self, e: SessionError) {
        self.abort.store(true, Ordering::SeqCst);
        let _ = self.ev.send(Event::Stopped(e));
    }

    fn early_warning(&mut self) {
        self.past_ew.get_or_insert(0);
        if !self.close_soon.swap(true, Ordering::SeqCst) {
            let _ = self.ev.send(Event::EarlyWarning);
        }
    }

    /// Write `records` in order: before early warning, as many as the drive takes in one call;
    /// the rest one at a time, each checked against the early-warning margin. Data record
    /// buffers go back to the reader.
    fn put(&mut self, h: &mut DriveHandle, records: Vec<Pending>) -> Result<(), Halt> {
        if records.is_empty() {
            return Ok(());
        }
        let refusal = if self.cancel.is_cancelled() {
            Some(SessionError::Cancelled)
        } else if !self.fence.within_term() {
            // Woken past the lease's term (frozen, paused): not one more record of data.
            Some(SessionError::Fenced(
                "the lease's term ran out on this host's clock before the next record".into(),
            ))
        } else {
            None
        };
        if let Some(e) = refusal {
            // The tape is still in this drive, so its end is closed with a filemark; the open
            // container is dead space the catalogue never counts.
            recycle_data(self.recycle, records);
            close_tail(h, self.ev, &mut self.tally, self.open_container);
            self.stop(e);
            return Err(Halt);
        }
        let mut done = 0;
        if records.len() > 1 && self.past_ew.is_none() {
            match self.write_together(h, &records) {
                Ok(n) => done = n,
                Err(Halt) => {
                    recycle_data(self.recycle, records);
                    return Err(Halt);
                }
            }
        }
        let mut rest = records.into_iter();
        for (rec, _, data) in rest.by_ref().take(done) {
            if data {
                let _ = self.recycle.send(rec);
            }
        }
        while let Some((rec, crc, data)) = rest.next() {
            let len = rec.len() as u64;
            if let Some(past) = self.past_ew
                && past + len > self.margin
                && !self.room.is_some_and(|r| r.fits(self.written, len))
            {
                warn!(
                    written_past_early_warning = past,
                    record = len,
                    margin = self.margin,
                    "early-warning margin reached: the open container is given up"
                );
                let mut unwritten = vec![(rec, crc, data)];
                unwritten.extend(rest);
                recycle_data(self.recycle, unwritten);
                close_tail(h, self.ev, &mut self.tally, self.open_container);
                self.abort.store(true, Ordering::SeqCst);
                let _ = self.ev.send(Event::GaveUp);
                return Err(Halt);
            }
            // Damaged between host and drive: the drive refused it under LBP and wrote
            // nothing, so it is sent again (`device::lbp`).
            let result = write_checked(
                h,
                &rec,
                crc,
                self.next_block,
                self.reporter,
                &mut self.tally.transfer_ns,
            );
            if data {
                // The reader may be gone (session stopping): the buffer is just freed.
                let _ = self.recycle.send(rec);
            }
            let last = h.last_status();
            let (flags, ns) = (last.flags, last.elapsed_ns);
            if let Err(halt) = self.settle(result, flags, ns, len) {
                recycle_data(self.recycle, rest.collect());
                return Err(halt);
            }
        }
        Ok(())
    }

    /// Write the queued records in one call ([`DriveHandle::write_records`]). Returns how
    /// many of them are settled (written, or written at early warning); the rest go one at a
    /// time: the drive stopped early, or refused one under LBP (reported; it is sent again).
    fn write_together(
        &mut self,
        h: &mut DriveHandle,
        queue: &[(Vec<u8>, Option<u32>, bool)],
    ) -> Result<usize, Halt> {
        let records: Vec<WriteRecord<'_>> = queue
            .iter()
            .map(|(rec, crc, _)| WriteRecord {
                data: rec,
                crc: *crc,
            })
            .collect();
        let (n, result) = h.write_records(&records);
        for (rec, _, _) in &queue[..n] {
            let len = rec.len() as u64;
            self.next_block += 1;
            self.written += len;
            self.in_flight.fetch_sub(len, Ordering::SeqCst);
        }
        let last = h.last_status();
        let (flags, ns) = (last.flags, last.elapsed_ns);
        let Some((rec, _, _)) = queue.get(n) else {
            self.tally.transfer_ns += ns;
            return Ok(n);
        };
        match result {
            Ok(()) if flags == 0 => {
                self.tally.transfer_ns += ns;
                Ok(n)
            }
            Err(e)
                if refused_on_write(
                    &e,
                    self.next_block,
                    self.reporter,
                    &mut self.tally.transfer_ns,
                ) =>
            {
                Ok(n)
            }
            other => {
                self.settle(other, flags, ns, rec.len() as u64)?;
                Ok(n + 1)
            }
        }
    }

    /// What writing one record of `len` bytes came to (`flags` and `ns`: the drive's status
    /// after a success): written (perhaps at early warning), or the session stops here (end
    /// of medium, a device error).
    fn settle(
        &mut self,
        result: Result<(), CallError>,
        flags: u32,
        ns: u64,
        len: u64,
    ) -> Result<(), Halt> {
        let was_past = self.past_ew.is_some();
        match result {
            Ok(()) => {
                self.next_block += 1;
                self.tally.transfer_ns += ns;
                // A plugin may report early warning as success with the EOM flag.
                if flags & reel_plugin_abi::REEL_FLAG_EOM != 0 {
                    self.early_warning();
                }
            }
            Err(e) => {
                self.tally.transfer_ns += e.status.elapsed_ns;
                match DeviceError::from_call(e) {
                    DeviceError::EarlyWarning { .. } => {
                        self.next_block += 1;
                        self.early_warning();
                    }
                    DeviceError::EndOfMedium { .. } => {
                        self.in_flight.fetch_sub(len, Ordering::SeqCst);
                        let _ = self.ev.send(Event::Overflow);
                        self.abort.store(true, Ordering::SeqCst);
                        return Err(Halt);
                    }
                    other => {
                        self.in_flight.fetch_sub(len, Ordering::SeqCst);
                        self.stop(SessionError::Device(other));
                        return Err(Halt);
                    }
                }
            }
        }
        if was_past && let Some(past) = self.past_ew.as_mut() {
            *past += len;
        }
        self.written += len;
        // After early warning is flagged, so a reader that sees the pipeline empty also sees
        // early warning.
        self.in_flight.fetch_sub(len, Ordering::SeqCst);
        Ok(())
    }
}

/// After a cancel, or when a container is given up past early warning, end the partial
/// container with a synchronous filemark so end of data is clean; the partial container is
/// dead space (containers written before it become durable).
fn close_tail(
    h: &mut DriveHandle,
    ev: &mpsc::UnboundedSender<Event>,
    tally: &mut DriveTally,
    open_container: bool,
) {
    if !open_container {
        return;
    }
    if h.write_filemarks(1, false).is_ok() {
        tally.flush_ns += h.last_status().elapsed_ns;
        if let Ok(p) = h.read_position() {
            let _ = ev.send(Event::Barrier {
                block: p.block,
                file: p.file,
            });
        }
    }
}
