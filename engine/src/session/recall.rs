//! The recall data path: one reader per drive (the drive thread) reads the planned runs with
//! read-ahead into reused record buffers and feeds a pool of destination writer threads, which
//! write partial files and hash them; complete files go to finisher threads, which check every
//! object's length and SHA-256, fsync and rename into place, and only then report the object. The destination never stalls the
//! drive for long, and several drives can restore into one directory at once.
//!
//! Partial files live in each destination root's private directory (see [`super::destination`]):
//! the session opens every root once at its start, which removes what an interrupted recall left
//! there, and a partial file of an object that fails, or that the session stops before finishing,
//! is removed at once. When the session ends no partial file of it is left, and the private
//! directory goes if it is empty.

use std::collections::HashMap;
use std::path::PathBuf;
use std::sync::Arc;

use serde::Serialize;
use sha2::{Digest, Sha256};
use tracing::{Instrument, info, info_span, warn};

use super::destination::{Overwrite, Partial, Placed, Placement, Staging};
use super::order::{self, OrderPolicy, OrderSource};
use super::{CancelToken, Progress, ProgressFn, SessionError, SessionSummary, secs};
use crate::device::lbp::{Checked, ReadTime, check_read, read_checked, report_read_error};
use crate::device::{DeviceError, Drive};
use crate::format::MAX_RECORD_SIZE;
use crate::format::ObjectMeta;
use crate::integrity::{CatchKind, Reporter};

/// One object to recall from the mounted cartridge.
#[derive(Clone, Debug)]
pub struct RecallItem {
    /// Object key (for reports).
    pub key: String,
    /// Block of the container's header record.
    pub container_first_block: u64,
    /// The container's data record size.
    pub record_size: u32,
    /// Byte offset of the object in the container's data stream.
    pub offset: u64,
    /// Length in bytes.
    pub length: u64,
    /// Expected SHA-256.
    pub sha256: [u8; 32],
    /// Final path (already checked with `destination::safe_join`).
    pub dest: PathBuf,
    /// The destination root the path must stay under.
    pub root: PathBuf,
    /// The object's metadata, restored on the file (or the link) when recorded.
    pub meta: Option<ObjectMeta>,
    /// What to do with an existing file at `dest`.
    pub overwrite: Overwrite,
    /// The root `root` must be reached beneath with no symbolic link on the way, when the job
    /// came with an API token's roots ([`crate::session::confine`]).
    pub confine: Option<PathBuf>,
}

impl RecallItem {
    /// First and last tape block holding the object (an empty object still reads one block).
    pub fn blocks(&self) -> (u64, u64) {
        let rs = self.record_size.max(1) as u64;
        let first = self.container_first_block + 1 + self.offset / rs;
        let last = self.container_first_block + 1 + (self.offset + self.length.max(1) - 1) / rs;
        (first, last)
    }
}

/// Why one object could not be recalled from this copy.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
#[serde(tag = "kind", content = "detail", rename_all = "snake_case")]
pub enum RecallFailure {
    /// The copy is unreadable or damaged: try another copy, and report this one.
    BadCopy(String),
    /// The destination could not be written.
    Destination(String),
    /// The session stopped before this object.
    NotAttempted(String),
}

/// Per-object result.
#[derive(Clone, Debug, Serialize)]
pub struct RecallResult {
    /// Index into the items given.
    pub index: usize,
    /// Key.
    pub key: String,
    /// Bytes written, or why not.
    pub outcome: Result<u64, RecallFailure>,
}

/// What a recall session did.
#[derive(Debug, Serialize)]
pub struct RecallReport {
    /// One per item, in item order.
    pub results: Vec<RecallResult>,
    /// Drive time.
    pub summary: SessionSummary,
    /// How the batch was ordered.
    pub order_source: OrderSource,
    /// Modelled locate seconds of the order used and of ascending order (when known).
    pub modelled_s: Option<f64>,
    /// Modelled locate seconds of ascending order (when known).
    pub ascending_s: Option<f64>,
    /// Drive time from the session's start to the first byte of the first object.
    pub first_byte_s: Option<f64>,
}

/// Tunables of one recall session.
#[derive(Clone, Debug)]
pub struct RecallOptions {
    /// Order policy.
    pub policy: OrderPolicy,
    /// Gaps up to this many bytes are read through.
    pub read_through_gap_bytes: u64,
    /// Destination writer threads.
    pub writer_threads: usize,
    /// Records of read-ahead per writer.
    pub read_ahead_records: usize,
    /// fsync each file before its rename.
    pub fsync: bool,
}

struct Chunk {
    item: usize,
    data: Arc<Record>,
    range: std::ops::Range<usize>,
    last: bool,
}

/// One record read from tape. Its buffer goes back to the reader's pool when the last chunk
/// that uses it is written, so records are read into memory that is already mapped (no
/// allocation, no zeroing, no page faults per record).
struct Record {
    buf: Vec<u8>,
    len: usize,
    pool: Option<crossbeam_channel::Sender<Vec<u8>>>,
}

impl Record {
    fn empty() -> Self {
        Record {
            buf: Vec::new(),
            len: 0,
            pool: None,
        }
    }

    fn bytes(&self) -> &[u8] {
        &self.buf[..self.len]
    }
}

impl Drop for Record {
    fn drop(&mut self) {
        if let Some(pool) = &self.pool {
            // A full pool (or a finished reader) just frees the buffer.
            let _ = pool.try_send(std::mem::take(&mut self.buf));
        }
    }
}

/// The reader's record buffers: reused through a bounded queue that the writers fill.
struct Buffers {
    size: usize,
    back: crossbeam_channel::Sender<Vec<u8>>,
    free: crossbeam_channel::Receiver<Vec<u8>>,
}

impl Buffers {
    fn new(size: usize, keep: usize) -> Self {
        let (back, free) = crossbeam_channel::bounded(keep.max(1));
        Buffers { size, back, free }
    }

    /// A buffer of `size` bytes (contents unspecified).
    fn take(&self) -> Vec<u8> {
        match self.free.try_recv() {
            Ok(b) if b.len() == self.size => b,
            _ => vec![0u8; self.size],
        }
    }

    fn wrap(&self, buf: Vec<u8>, len: usize) -> Record {
        Record {
            buf,
            len,
            pool: Some(self.back.clone()),
        }
    }
}

enum WriterMsg {
    Chunk(Chunk),
    /// The reader failed on this item: drop its partial file.
    Abort(usize, RecallFailure),
}

/// Recall `items` from the cartridge `barcode` mounted in `drive`.
pub async fn recall_session(
    drive: &Drive,
    barcode: &str,
    items: Vec<RecallItem>,
    opts: &RecallOptions,
    cancel: &CancelToken,
    progress: ProgressFn,
) -> Result<RecallReport, SessionError> {
    let span = info_span!("recall_session", drive = drive.index(), items = items.len());
    let reporter = drive.reporter(barcode);
    async move {
        let extents: Vec<(u64, u64)> = items.iter().map(|i| i.blocks()).collect();
        let pos = drive.read_position().await?;
        let plan = order::plan(drive, pos.block, &extents, opts.policy).await;
        let rs = items
            .iter()
            .map(|i| i.record_size as u64)
            .max()
            .unwrap_or(1 << 20)
            .max(1);
        let gap_blocks = opts.read_through_gap_bytes / rs;
        let runs = order::runs(&extents, &plan.order, gap_blocks);
        let stages = stage_items(&items);
        let items = Arc::new(items);
        let n_writers = opts.writer_threads.clamp(1, 256);
        let per_writer = (opts.read_ahead_records / n_writers).max(4);
        // Room for the largest record of these containers, and some slack: a longer record
        // is refused by the drive with an incorrect-length error, i.e. a bad copy.
        let buf_size = (rs as usize).min(MAX_RECORD_SIZE) + 4096;
        // Every buffer that can be in flight: each writer's queue, one it is writing, and the
        // reader's cached record.
        let buffers = Buffers::new(buf_size, n_writers * (per_writer + 1) + 2);

        // Finishers: check the hash, fsync, rename, report. A writer hands a complete file over
        // and goes on with its next object, so the reader never waits for an fsync.
        let (res_tx, res_rx) = crossbeam_channel::unbounded::<RecallResult>();
        let (fin_tx, fin_rx) = crossbeam_channel::bounded::<(Open, usize)>(2 * n_writers);
        let mut finishers = Vec::new();
        for w in 0..n_writers {
            let fin_rx = fin_rx.clone();
            let items = items.clone();
            let res_tx = res_tx.clone();
            let fsync = opts.fsync;
            let progress = progress.clone();
            let reporter = reporter.clone();
            finishers.push(
                std::thread::Builder::new()
                    .name(format!("reel-fsync-{w}"))
                    .spawn(move || finisher(fin_rx, &items, res_tx, fsync, progress, &reporter))
                    .map_err(|e| {
                        SessionError::Other(format!("cannot start a finisher thread: {e}"))
                    })?,
            );
        }
        drop(fin_rx);

        // Writers.
        let mut senders = Vec::new();
        let mut joins = Vec::new();
        for w in 0..n_writers {
            let (tx, rx) = crossbeam_channel::bounded::<WriterMsg>(per_writer);
            senders.push(tx);
            let items = items.clone();
            let stages = stages.clone();
            let res_tx = res_tx.clone();
            let fin_tx = fin_tx.clone();
            joins.push(
                std::thread::Builder::new()
                    .name(format!("reel-writer-{w}"))
                    .spawn(move || writer(rx, &items, &stages, res_tx, fin_tx))
                    .map_err(|e| {
                        SessionError::Other(format!("cannot start a writer thread: {e}"))
                    })?,
            );
        }
        drop(res_tx);
        drop(fin_tx);

        // Reader on the drive thread.
        let reader_items = items.clone();
        let cancel2 = cancel.clone();
        let check = Check {
            lbp: drive.lbp_enabled(),
            reporter: reporter.clone(),
        };
        let timings = drive.timings();
        let read = drive
            .run(move |h| {
                let mut gaps = Gaps::new(gap_blocks, &timings);
                read_runs(
                    h,
                    &reader_items,
                    &runs,
                    &senders,
                    &cancel2,
                    &check,
                    &mut gaps,
                    &buffers,
                )
            })
            .await;
        for j in joins {
            let _ = j.join();
        }
        // The writers are gone, so is every sender of the finishers' queue.
        for j in finishers {
            let _ = j.join();
        }
        // Every partial file of the session is renamed or removed (each goes with its writer or
        // finisher); the last reference to a root's staging removes its private directory if
        // that is empty.
        drop(stages);
        let (summary, first_byte_s, stop) = match read {
            Ok(r) => r,
            Err(e) => (SessionSummary::default(), None, Some(e.to_string())),
        };
        let mut results: Vec<Option<RecallResult>> = vec![None; items.len()];
        for r in res_rx.iter() {
            let i = r.index;
            results[i] = Some(r);
        }
        let results: Vec<RecallResult> = results
            .into_iter()
            .enumerate()
            .map(|(i, r)| {
                r.unwrap_or_else(|| RecallResult {
                    index: i,
                    key: items[i].key.clone(),
                    outcome: Err(RecallFailure::NotAttempted(
                        stop.clone()
                            .unwrap_or_else(|| "the session ended first".into()),
                    )),
                })
            })
            .collect();
        if cancel.is_cancelled() {
            return Err(SessionError::Cancelled);
        }
        let ok = results.iter().filter(|r| r.outcome.is_ok()).count();
        info!(ok, failed = results.len() - ok, order = ?plan.source, "recall session done");
        Ok(RecallReport {
            results,
            summary,
            order_source: plan.source,
            modelled_s: plan.modelled_s,
            ascending_s: plan.ascending_s,
            first_byte_s,
        })
    }
    .instrument(span)
    .await
}

type ReadOutcome = (SessionSummary, Option<f64>, Option<String>);

/// How records read are checked (`device::lbp`), and where a failed check is reported.
struct Check {
    lbp: bool,
    reporter: Reporter,
}

/// The drive side: read each run, slice objects out of records, hand them to writers.
#[allow(clippy::too_many_arguments)]
fn read_runs(
    h: &mut reel_plugin_abi::host::DriveHandle,
    items: &[RecallItem],
    runs: &[Vec<usize>],
    writers: &[crossbeam_channel::Sender<WriterMsg>],
    cancel: &CancelToken,
    check: &Check,
    gaps: &mut Gaps<'_>,
    buffers: &Buffers,
) -> ReadOutcome {
    let mut sum = SessionSummary::default();
    let mut clock_ns: u64 = 0;
    let mut first_byte: Option<f64> = None;
    // The drive's position: the next block a READ returns, if known.
    let mut pos: Option<u64> = h.read_position().ok().map(|p| p.block);
    let mut cached: Option<(u64, Arc<Record>)> = None;
    let n = writers.len();
    let mut seq = 0usize;
    for run in runs {
        for &i in run {
            if cancel.is_cancelled() {
                return (sum, first_byte, Some("cancelled".into()));
            }
            let it = &items[i];
            let w = &writers[seq % n];
            seq += 1;
            let (first, last) = it.blocks();
            let rs = it.record_size as u64;
            let start = it.offset;
            let end = it.offset + it.length;
            if it.length == 0 {
                let _ = w.send(WriterMsg::Chunk(Chunk {
                    item: i,
                    data: Arc::new(Record::empty()),
                    range: 0..0,
                    last: true,
                }));
                continue;
            }
            let mut failed: Option<RecallFailure> = None;
            for b in first..=last {
                // Cancel stops at the next record boundary: a partial object's partial file
                // is removed by its writer, nothing half-written is renamed into place.
                if cancel.is_cancelled() {
                    return (sum, first_byte, Some("cancelled".into()));
                }
                let rec = match &cached {
                    Some((cb, d)) if *cb == b => d.clone(),
                    _ => match fetch(
                        h,
                        b,
                        &mut pos,
                        gaps,
                        &mut sum,
                        &mut clock_ns,
                        check,
                        buffers,
                    ) {
                        Ok(d) => {
                            let d = Arc::new(d);
                            cached = Some((b, d.clone()));
                            d
                        }
                        Err(f) => {
                            failed = Some(f);
                            pos = None;
                            cached = None;
                            break;
                        }
                    },
                };
                if first_byte.is_none() {
                    first_byte = Some(clock_ns as f64 / 1e9);
                }
                let rec_len = rec.len as u64;
                let rec_start = (b - it.container_first_block - 1) * rs;
                let lo = start.max(rec_start) - rec_start;
                let hi = end.min(rec_start + rec_len).saturating_sub(rec_start);
                if hi < lo || rec_len < lo {
                    failed = Some(RecallFailure::BadCopy(format!(
                        "block {b} holds {rec_len} bytes, the object needs bytes {lo}..{} of it",
                        end - rec_start
                    )));
                    break;
                }
                let chunk = Chunk {
                    item: i,
                    data: rec,
                    range: lo as usize..hi as usize,
                    last: b == last,
                };
                if w.send(WriterMsg::Chunk(chunk)).is_err() {
                    return (
                        sum,
                        first_byte,
                        Some("the destination writers stopped".into()),
                    );
                }
            }
            if let Some(f) = failed {
                warn!(key = %it.key, failure = ?f, "copy unreadable");
                let _ = w.send(WriterMsg::Abort(i, f));
            } else {
                sum.objects += 1;
                sum.bytes += it.length;
            }
        }
    }
    (sum, first_byte, None)
}

/// How the reader crosses forward gaps: reads through those up to the break-even the drive's
/// own timings show ([`crate::device::DriveTimings`]), or the configured gap until it has shown
/// enough; feeds those timings as it goes.
struct Gaps<'a> {
    configured: u64,
    /// The drive's timings as of the session's start, fed as the session goes (no lock per
    /// record); written back to the drive when the session ends.
    local: crate::device::DriveTimings,
    shared: &'a std::sync::Mutex<crate::device::DriveTimings>,
    /// The last command was a record read (so the next read's time is pure streaming).
    after_read: bool,
}

impl<'a> Gaps<'a> {
    fn new(configured: u64, shared: &'a std::sync::Mutex<crate::device::DriveTimings>) -> Self {
        let local = shared.lock().map(|t| t.clone()).unwrap_or_default();
        Gaps {
            configured,
            local,
            shared,
            after_read: false,
        }
    }

    fn read_through_blocks(&self) -> u64 {
        self.local.read_through_blocks(self.configured)
    }

    fn read(&mut self, ns: u64) {
        if self.after_read {
            self.local.sequential_read(ns);
        }
        self.after_read = true;
    }

    fn located(&mut self, from: Option<u64>, to: u64, ns: u64) {
        if let Some(from) = from {
            self.local.forward_locate(from, to, ns);
        }
        self.after_read = false;
    }
}

impl Drop for Gaps<'_> {
    /// The drive runs one session at a time: what this one learned is the drive's now.
    fn drop(&mut self) {
        if let Ok(mut t) = self.shared.lock() {
            *t = std::mem::take(&mut self.local);
        }
    }
}

/// LOCATE to block `b`, with its time on the session's clock; the modelled nanoseconds it took.
// The ABI's CallError is returned as the drive handle returns it (the caller formats it once).
#[allow(clippy::result_large_err)]
fn locate(
    h: &mut reel_plugin_abi::host::DriveHandle,
    b: u64,
    sum: &mut SessionSummary,
    clock_ns: &mut u64,
    gaps: &mut Gaps<'_>,
) -> Result<u64, reel_plugin_abi::host::CallError> {
    let r = h.locate(b);
    let ns = h.last_status().elapsed_ns;
    sum.position_s += secs(ns);
    sum.locates += 1;
    *clock_ns += ns;
    gaps.after_read = false;
    r.map(|()| ns)
}

/// Read block `b`: read through from the current position when `b` is ahead by at most the
/// read-through gap (cheaper than a LOCATE), locate otherwise.
#[allow(clippy::too_many_arguments)]
fn fetch(
    h: &mut reel_plugin_abi::host::DriveHandle,
    b: u64,
    pos: &mut Option<u64>,
    gaps: &mut Gaps<'_>,
    sum: &mut SessionSummary,
    clock_ns: &mut u64,
    check: &Check,
    buffers: &Buffers,
) -> Result<Record, RecallFailure> {
    let mut buf = buffers.take();
    // Read through a forward gap up to the drive's break-even; locate otherwise. The limit is
    // worked out only when there is a gap (a sequential read has none).
    let mut limit: Option<u64> = None;
    while let Some(p) = *pos {
        if p >= b || b - p > *limit.get_or_insert_with(|| gaps.read_through_blocks()) + 1 {
            break;
        }
        match h.read_record(&mut buf) {
            Ok(r) => {
                let ns = h.last_status().elapsed_ns;
                sum.transfer_s += secs(ns);
                *clock_ns += ns;
                *pos = Some(p + 1);
                gaps.read(ns);
                // Not used, but checked like every record read.
                check_read(check.lbp, &r, &buf, p, &check.reporter);
            }
            Err(e) => {
                let ns = h.last_status().elapsed_ns;
                sum.transfer_s += secs(ns);
                *clock_ns += ns;
                gaps.after_read = false;
                // A filemark on the way (the one after the label, or between containers) is
                // one block address: step over it like a record. Anything else: locate (a
                // failed check is reported like every read's).
                *pos = match DeviceError::from_call(e) {
                    DeviceError::Filemark { .. } => Some(p + 1),
                    other => {
                        report_read_error(&other, p, &check.reporter);
                        None
                    }
                };
            }
        }
    }
    if *pos != Some(b) {
        let from = *pos;
        let ns = locate(h, b, sum, clock_ns, gaps).map_err(|e| {
            RecallFailure::BadCopy(format!(
                "cannot locate to block {b}: {}",
                DeviceError::from_call(e)
            ))
        })?;
        gaps.located(from, b, ns);
    }
    // One more read for damage on the way from the drive (LBP); a MEDIUM ERROR is not read
    // again (`device::lbp`): another copy is read.
    let mut time = ReadTime::default();
    let read = read_checked(h, b, &mut buf, check.lbp, &check.reporter, &mut time);
    sum.transfer_s += secs(time.transfer_ns);
    sum.position_s += secs(time.position_ns);
    sum.locates += time.locates;
    *clock_ns += time.transfer_ns + time.position_ns;
    match read {
        Ok(Checked::Whole(r)) => {
            *pos = Some(b + 1);
            if time.locates == 0 {
                gaps.read(time.last_read_ns);
            } else {
                gaps.after_read = false;
            }
            Ok(buffers.wrap(buf, r.len))
        }
        Ok(Checked::Damaged(why)) => {
            *pos = None;
            gaps.after_read = false;
            Err(RecallFailure::BadCopy(why))
        }
        Err(e) => {
            *pos = None;
            gaps.after_read = false;
            Err(RecallFailure::BadCopy(format!("block {b}: {e}")))
        }
    }
}

/// Each item's destination root, opened once per session (or why it cannot be used).
type Stages = Arc<Vec<Result<Arc<Staging>, String>>>;

/// Open each distinct destination root of `items` (removing the partial files an interrupted
/// recall left there); one entry per item.
fn stage_items(items: &[RecallItem]) -> Stages {
    let mut by_root: HashMap<&std::path::Path, Result<Arc<Staging>, String>> = HashMap::new();
    let out = items
        .iter()
        .map(|it| {
            by_root
                .entry(it.root.as_path())
                .or_insert_with(|| {
                    Staging::open_within(&it.root, it.confine.as_deref()).inspect_err(|e| {
                        warn!(root = %it.root.display(), error = %e, "destination refused");
                    })
                })
                .clone()
        })
        .collect();
    Arc::new(out)
}

/// An object being written: its partial file (removed when this is dropped, unless renamed).
struct Open {
    item: usize,
    partial: Partial,
    hasher: Sha256,
    bytes: u64,
}

/// A finisher: checks a complete file's length and SHA-256, fsyncs it, renames it into place,
/// and only then reports it recalled.
fn finisher(
    rx: crossbeam_channel::Receiver<(Open, usize)>,
    items: &[RecallItem],
    results: crossbeam_channel::Sender<RecallResult>,
    fsync: bool,
    progress: ProgressFn,
    reporter: &Reporter,
) {
    let mut done = Progress::default();
    for (o, i) in rx.iter() {
        let r = finish_file(o, &items[i], fsync, reporter);
        if let Ok(n) = &r {
            done.objects += 1;
            done.bytes += n;
            done.block = Some(items[i].container_first_block);
            progress(done, &[i]);
        }
        let _ = results.send(RecallResult {
            index: i,
            key: items[i].key.clone(),
            outcome: r,
        });
    }
}

/// A destination writer: partial file and hash; a complete file goes to a finisher.
fn writer(
    rx: crossbeam_channel::Receiver<WriterMsg>,
    items: &[RecallItem],
    stages: &[Result<Arc<Staging>, String>],
    results: crossbeam_channel::Sender<RecallResult>,
    finish: crossbeam_channel::Sender<(Open, usize)>,
) {
    let mut open: Option<Open> = None;
    // An item whose file could not be started or written: its remaining chunks are dropped.
    let mut skip: Option<usize> = None;
    let report = |i: usize, outcome: Result<u64, RecallFailure>| {
        let _ = results.send(RecallResult {
            index: i,
            key: items[i].key.clone(),
            outcome,
        });
    };
    for msg in rx.iter() {
        match msg {
            WriterMsg::Abort(i, f) => {
                // Dropping the open file removes it.
                drop(open.take());
                if skip != Some(i) {
                    report(i, Err(f));
                }
            }
            WriterMsg::Chunk(c) => {
                let it = &items[c.item];
                if skip == Some(c.item) {
                    continue;
                }
                if open.as_ref().map(|o| o.item) != Some(c.item) {
                    drop(open.take());
                    match start_file(it, c.item, &stages[c.item]) {
                        Ok(o) => open = Some(o),
                        Err(f) => {
                            report(c.item, Err(f));
                            skip = Some(c.item);
                            continue;
                        }
                    }
                }
                let Some(o) = open.as_mut() else { continue };
                let data = &c.data.bytes()[c.range.clone()];
                o.hasher.update(data);
                let at = o.bytes;
                o.bytes += data.len() as u64;
                let holes = it.meta.is_some_and(|m| m.sparse);
                if let Err(e) = o.partial.append(data, at, holes) {
                    drop(open.take());
                    report(
                        c.item,
                        Err(RecallFailure::Destination(format!(
                            "{}: {e}",
                            it.dest.display()
                        ))),
                    );
                    skip = Some(c.item);
                    continue;
                }
                if c.last
                    && let Some(o) = open.take()
                    && let Err(crossbeam_channel::SendError((o, _))) = finish.send((o, c.item))
                {
                    drop(o);
                    report(
                        c.item,
                        Err(RecallFailure::Destination(format!(
                            "{}: the session's finisher threads stopped before the file was synced",
                            it.dest.display()
                        ))),
                    );
                }
            }
        }
    }
    drop(open);
}

fn start_file(
    it: &RecallItem,
    item: usize,
    stage: &Result<Arc<Staging>, String>,
) -> Result<Open, RecallFailure> {
    let stage = stage
        .as_ref()
        .map_err(|e| RecallFailure::Destination(e.clone()))?;
    // A link's bytes are its target: refused before anything is streamed if they cannot be.
    if it
        .meta
        .is_some_and(|m| m.kind == crate::format::ObjectKind::Symlink)
        && !(1..=super::source::MAX_LINK_TARGET).contains(&it.length)
    {
        return Err(RecallFailure::Destination(format!(
            "{}: the catalogue records a symbolic link of {} bytes; a link target is 1 to {} bytes",
            it.dest.display(),
            it.length,
            super::source::MAX_LINK_TARGET
        )));
    }
    let rel = it.dest.strip_prefix(&it.root).map_err(|_| {
        RecallFailure::Destination(format!(
            "{} is not under the destination {}",
            it.dest.display(),
            it.root.display()
        ))
    })?;
    let partial = stage.create(rel).map_err(RecallFailure::Destination)?;
    Ok(Open {
        item,
        partial,
        hasher: Sha256::new(),
        bytes: 0,
    })
}

fn finish_file(
    o: Open,
    it: &RecallItem,
    fsync: bool,
    reporter: &Reporter,
) -> Result<u64, RecallFailure> {
    // On every early return the partial file is dropped, i.e. removed.
    let digest: [u8; 32] = o.hasher.finalize().into();
    if o.bytes != it.length || digest != it.sha256 {
        let why = format!(
            "object {} read back with {} bytes and SHA-256 {}, the catalogue has {} bytes and {}",
            it.key,
            o.bytes,
            hex::encode(digest),
            it.length,
            hex::encode(it.sha256)
        );
        let (first, last) = it.blocks();
        reporter.report(CatchKind::Content, first, last, None, why.clone());
        return Err(RecallFailure::BadCopy(why));
    }
    if it.meta.is_some_and(|m| m.sparse) {
        o.partial.set_len(o.bytes).map_err(|e| {
            RecallFailure::Destination(format!("{}: {e}", o.partial.path().display()))
        })?;
    }
    if let Some(m) = &it.meta {
        o.partial.set_meta(m).map_err(RecallFailure::Destination)?;
    }
    if fsync {
        o.partial.sync().map_err(|e| {
            RecallFailure::Destination(format!("{}: fsync: {e}", o.partial.path().display()))
        })?;
    }
    let placed = o
        .partial
        .commit_as(&Placement {
            overwrite: it.overwrite,
            meta: it.meta.as_ref(),
            sha256: it.sha256,
            length: it.length,
        })
        .map_err(RecallFailure::Destination)?;
    if placed == Placed::Identical {
        info!(key = %it.key, dest = %it.dest.display(), "an identical file is in place already; left as it is");
    }
    Ok(o.bytes)
}

#[cfg(test)]
mod tests {
    use std::path::Path;

    use super::*;
    use crate::session::destination::{PARTIAL_DIR, safe_join};

    fn item(root: &Path, key: &str, data: &[u8]) -> RecallItem {
        RecallItem {
            key: key.into(),
            container_first_block: 0,
            record_size: 1 << 20,
            offset: 0,
            length: data.len() as u64,
            sha256: Sha256::digest(data).into(),
            dest: safe_join(root, key).unwrap(),
            root: root.to_path_buf(),
            meta: None,
            overwrite: Overwrite::Never,
            confine: None,
        }
    }

    /// `data` as chunks of `item`, in `parts` pieces.
    fn chunks(item: usize, data: &[u8], parts: usize) -> Vec<WriterMsg> {
        let rec = Arc::new(Record {
            buf: data.to_vec(),
            len: data.len(),
            pool: None,
        });
        let step = data.len().div_ceil(parts).max(1);
        let mut out = Vec::new();
        let mut lo = 0;
        loop {
            let hi = (lo + step).min(data.len());
            out.push(WriterMsg::Chunk(Chunk {
                item,
                data: rec.clone(),
                range: lo..hi,
                last: hi == data.len(),
            }));
            if hi == data.len() {
                return out;
            }
            lo = hi;
        }
    }

    /// The session's destination side without a drive: stage the roots, run one writer per
    /// message list and a finisher, end the session; the results by item.
    fn run(items: Vec<RecallItem>, per_writer: Vec<Vec<WriterMsg>>) -> Vec<RecallResult> {
        let stages = stage_items(&items);
        let items = Arc::new(items);
        let (res_tx, res_rx) = crossbeam_channel::unbounded();
        let (fin_tx, fin_rx) = crossbeam_channel::bounded::<(Open, usize)>(4);
        let fin = {
            let items = items.clone();
            let res_tx = res_tx.clone();
            std::thread::spawn(move || {
                finisher(
                    fin_rx,
                    &items,
                    res_tx,
                    true,
                    crate::session::no_progress(),
                    &crate::integrity::Reporter::new(
                        crate::integrity::IntegrityLog::traced_only(),
                        "TEST01L9",
                        0,
                    ),
                )
            })
        };
        let mut joins = Vec::new();
        for msgs in per_writer {
            let (tx, rx) = crossbeam_channel::unbounded();
            let items = items.clone();
            let stages = stages.clone();
            let res_tx = res_tx.clone();
            let fin_tx = fin_tx.clone();
            joins.push(std::thread::spawn(move || {
                writer(rx, &items, &stages, res_tx, fin_tx)
            }));
            for m in msgs {
                tx.send(m).unwrap();
            }
        }
        drop((res_tx, fin_tx));
        for j in joins {
            j.join().unwrap();
        }
        fin.join().unwrap();
        drop(stages);
        let mut r: Vec<RecallResult> = res_rx.iter().collect();
        r.sort_by_key(|r| r.index);
        r
    }

    fn data(n: usize, seed: u8) -> Vec<u8> {
        (0..n).map(|i| (i as u8).wrapping_mul(31) ^ seed).collect()
    }

    #[test]
    fn a_recalled_object_leaves_no_partial() {
        let root = tempfile::tempdir().unwrap();
        let d = data(100_000, 1);
        let r = run(vec![item(root.path(), "a/b/c", &d)], vec![chunks(0, &d, 7)]);
        assert_eq!(r[0].outcome, Ok(d.len() as u64));
        assert_eq!(std::fs::read(root.path().join("a/b/c")).unwrap(), d);
        assert!(!root.path().join(PARTIAL_DIR).exists());
    }

    #[test]
    fn two_requests_for_one_key_both_land() {
        let root = tempfile::tempdir().unwrap();
        let d = data(300_000, 2);
        let items = vec![
            item(root.path(), "k/dup", &d),
            item(root.path(), "k/dup", &d),
        ];
        // Two writers, as the session has: both files are open at once.
        for _ in 0..20 {
            let r = run(items.clone(), vec![chunks(0, &d, 30), chunks(1, &d, 30)]);
            for x in &r {
                assert_eq!(x.outcome, Ok(d.len() as u64), "{x:?}");
            }
            assert_eq!(std::fs::read(root.path().join("k/dup")).unwrap(), d);
            assert!(!root.path().join(PARTIAL_DIR).exists());
        }
    }

    #[test]
    fn stale_partials_are_removed_at_the_start() {
        let root = tempfile::tempdir().unwrap();
        let dir = root.path().join(PARTIAL_DIR);
        std::fs::create_dir(&dir).unwrap();
        std::fs::set_permissions(&dir, std::os::unix::fs::PermissionsExt::from_mode(0o700))
            .unwrap();
        let stale = dir.join(format!("{:032x}-big.bin", 0xdeadu128));
        std::fs::write(&stale, b"half an object").unwrap();
        let stages = stage_items(&[item(root.path(), "x", b"")]);
        assert!(!stale.exists());
        assert!(dir.exists(), "the session is still running");
        drop(stages);
        assert!(!dir.exists());
    }

    #[test]
    fn failed_objects_leave_no_partial() {
        let root = tempfile::tempdir().unwrap();
        let outside = tempfile::tempdir().unwrap();
        std::os::unix::fs::symlink(outside.path(), root.path().join("link")).unwrap();
        let d = data(50_000, 3);
        let mut bad = item(root.path(), "bad", &d);
        bad.sha256 = [0; 32];
        let items = vec![
            bad,
            item(root.path(), "aborted", &d),
            item(root.path(), "link/escape", &d),
            item(root.path(), "good", &d),
        ];
        let mut w0 = chunks(0, &d, 3);
        // The reader fails half-way through the second object.
        let mut second = chunks(1, &d, 4);
        second.truncate(2);
        w0.extend(second);
        w0.push(WriterMsg::Abort(
            1,
            RecallFailure::BadCopy("block 9".into()),
        ));
        let mut w1 = chunks(2, &d, 2);
        w1.extend(chunks(3, &d, 2));
        let r = run(items, vec![w0, w1]);
        assert!(
            matches!(r[0].outcome, Err(RecallFailure::BadCopy(_))),
            "{:?}",
            r[0]
        );
        assert!(
            matches!(r[1].outcome, Err(RecallFailure::BadCopy(_))),
            "{:?}",
            r[1]
        );
        match &r[2].outcome {
            Err(RecallFailure::Destination(m)) => assert!(m.contains("symbolic link"), "{m}"),
            o => panic!("{o:?}"),
        }
        assert_eq!(r[3].outcome, Ok(d.len() as u64));
        assert!(!root.path().join("bad").exists());
        assert!(!root.path().join("aborted").exists());
        assert!(std::fs::read_dir(outside.path()).unwrap().next().is_none());
        assert!(!root.path().join(PARTIAL_DIR).exists());
    }

    #[test]
    fn a_session_that_stops_mid_object_leaves_no_partial() {
        let root = tempfile::tempdir().unwrap();
        let d = data(50_000, 4);
        let mut msgs = chunks(0, &d, 5);
        msgs.truncate(3);
        let r = run(vec![item(root.path(), "cut", &d)], vec![msgs]);
        assert!(r.is_empty(), "{r:?}");
        assert!(!root.path().join("cut").exists());
        assert!(!root.path().join(PARTIAL_DIR).exists());
    }

    #[test]
    fn a_refused_private_dir_fails_its_objects_only() {
        let root = tempfile::tempdir().unwrap();
        let other = tempfile::tempdir().unwrap();
        let outside = tempfile::tempdir().unwrap();
        std::os::unix::fs::symlink(outside.path(), root.path().join(PARTIAL_DIR)).unwrap();
        let d = data(1000, 5);
        let r = run(
            vec![item(root.path(), "f", &d), item(other.path(), "f", &d)],
            vec![chunks(0, &d, 1), chunks(1, &d, 1)],
        );
        match &r[0].outcome {
            Err(RecallFailure::Destination(m)) => assert!(m.contains("symbolic link"), "{m}"),
            o => panic!("{o:?}"),
        }
        assert_eq!(r[1].outcome, Ok(1000));
        assert!(std::fs::read_dir(outside.path()).unwrap().next().is_none());
        assert!(!root.path().join("f").exists());
    }
}
