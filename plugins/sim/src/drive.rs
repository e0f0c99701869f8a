//! One simulated drive: its state (cartridge, position, buffer, faults, statistics) and the
//! SSC-like commands, timed by the model.

use std::sync::Arc;
use std::time::Duration;

use reel_plugin_abi::sdk::{Call, Drive, DriveInfo, Fault, Geometry, ReadRecord, WriteRecord};
use reel_plugin_abi::seek::{self, CostModel, PhysicalPos, TapeGeometry};
use reel_plugin_abi::{
    REEL_FLAG_DEFERRED, REEL_FLAG_EOM, REEL_FLAG_ILI, REEL_LBP_CRC32C, REEL_LBP_OFF, REEL_POS_BOP,
    REEL_POS_EOP, REEL_POS_PHYSICAL_VALID, REEL_POS_UNKNOWN, REEL_SPACE_EOD, REEL_SPACE_FILEMARKS,
    REEL_SPACE_RECORDS, ReelDriveStats, ReelExtent, ReelPosition, asc, mam, sense_key as sk,
};

use crate::cartridge::Cartridge;
use crate::clock::Pacer;
use crate::config::{LocateModel, SimConfig};
use crate::drive_state::{DriveState, Feed, ns};
use crate::sense;
use crate::shared::{DriveLock, Shared};
use crate::stream::Stop;

/// The time model of positioning on the loaded medium.
struct Motion<'a> {
    cfg: &'a SimConfig,
    capacity: u64,
}

impl Motion<'_> {
    fn pass_s(&self) -> f64 {
        self.cfg.locate_full_pass_ms as f64 / 1000.0 * self.cfg.locate_speed_factor
    }

    fn geometry(&self) -> TapeGeometry {
        match self.cfg.locate {
            LocateModel::Linear => TapeGeometry::linear(),
            LocateModel::Serpentine => {
                let range = (self.pass_s() / CostModel::cta().per_lpos_s).round() as u64;
                TapeGeometry::serpentine(self.cfg.wraps, 0, range.max(1))
            }
        }
    }

    fn bytes_per_wrap(&self) -> u64 {
        (self.capacity / u64::from(self.cfg.wraps.max(1))).max(1)
    }

    fn physical(&self, offset: u64) -> PhysicalPos {
        let g = self.geometry();
        let bpw = self.bytes_per_wrap();
        let wrap = (offset / bpw).min(u64::from(g.wraps.saturating_sub(1))) as u32;
        let into = (offset - u64::from(wrap) * bpw).min(bpw);
        let along = (into as u128 * g.max_lpos as u128 / bpw as u128) as u64;
        let lpos = if TapeGeometry::is_forward(wrap) {
            along
        } else {
            g.max_lpos - along
        };
        PhysicalPos { wrap, lpos }
    }

    /// Fraction of the tape length between BOT and the head.
    fn along(&self, offset: u64) -> f64 {
        match self.cfg.locate {
            LocateModel::Linear => (offset as f64 / self.capacity as f64).min(1.0),
            LocateModel::Serpentine => {
                let g = self.geometry();
                self.physical(offset).lpos as f64 / g.max_lpos as f64
            }
        }
    }

    fn locate_s(&self, from: u64, to: u64) -> f64 {
        if from == to {
            return 0.0;
        }
        match self.cfg.locate {
            LocateModel::Linear => {
                let frac = from.abs_diff(to) as f64 / self.capacity as f64;
                self.cfg.locate_settle_ms as f64 / 1000.0 + self.pass_s() * frac.min(1.0)
            }
            LocateModel::Serpentine => CostModel::cta().locate_seconds(
                &self.geometry(),
                self.physical(from),
                self.physical(to),
            ),
        }
    }

    fn rewind_s(&self, from: u64) -> f64 {
        let min = self.cfg.rewind_min_ms as f64 / 1000.0;
        let max = self.cfg.rewind_max_ms as f64 / 1000.0;
        min + (max - min) * self.along(from)
    }
}

/// A drive handle, as the ABI opens it.
pub struct SimDrive {
    shared: Arc<Shared>,
    index: u32,
    pacer: Pacer,
    last_return: Option<Duration>,
    /// Shared mode: this process's ownership of the drive.
    owner: Option<Arc<DriveLock>>,
}

impl Drop for SimDrive {
    /// Shared mode: the last handle of a drive gives it up; what its cartridge was given
    /// reaches the medium first (as when a library is closed), since another process may take
    /// the cartridge once the drive has no owner.
    fn drop(&mut self) {
        if let Some(owner) = self.owner.take()
            && Arc::strong_count(&owner) == 1
            && let Ok(mut st) = self.shared.drive(self.index)
        {
            if let Some(c) = st.cart.as_mut()
                && let Err(e) = c.close_files()
            {
                tracing::error!(drive = self.index, error = %e, "syncing the cartridge on drive close failed");
            }
            st.loaded = false;
        }
    }
}

/// Which gatekeeping a command gets before it runs.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Gate {
    /// INQUIRY-like: answered even by a dead drive, no unit attention.
    Passive,
    /// A normal command: dead drive, unit attention and one-shot faults apply.
    Command,
}

impl SimDrive {
    pub(crate) fn new(shared: Arc<Shared>, index: u32, owner: Option<Arc<DriveLock>>) -> Self {
        let pacer = shared.pacer();
        SimDrive {
            shared,
            index,
            pacer,
            last_return: None,
            owner,
        }
    }

    fn run<R>(
        &mut self,
        call: &mut Call,
        gate: Gate,
        f: impl FnOnce(&mut DriveState, &SimConfig) -> Result<R, Fault>,
    ) -> Result<R, Fault> {
        self.run_synced(call, gate, false, f)
    }

    /// Run a command. In shared mode, a drive whose cartridge is not loaded first catches up
    /// with the layout on disk (another process may have moved a cartridge in or out) and
    /// keeps the changer locked while the command runs; with `save_loaded` (LOAD, UNLOAD) the
    /// drive's loaded state is then saved for the other processes.
    fn run_synced<R>(
        &mut self,
        call: &mut Call,
        gate: Gate,
        save_loaded: bool,
        f: impl FnOnce(&mut DriveState, &SimConfig) -> Result<R, Fault>,
    ) -> Result<R, Fault> {
        let shared = self.shared.clone();
        crate::mailbox::deliver(&shared, self.index);
        let mut changer = None;
        if shared.cfg.shared {
            let loaded = shared.drive(self.index)?.loaded;
            if !loaded || save_loaded {
                changer = Some(shared.changer()?);
            }
        }
        let wall = shared.time.now();
        let gap = self
            .last_return
            .map(|t| wall.saturating_sub(t).as_secs_f64())
            .unwrap_or(0.0);
        let (result, elapsed, power_cut) = {
            let mut st = shared.drive(self.index)?;
            if st.feed == Feed::HostClock {
                st.now += gap;
            }
            st.elapsed = 0.0;
            let r = gatekeep(&mut st, gate).and_then(|()| f(&mut st, &shared.cfg));
            let elapsed = st.elapsed;
            st.now += elapsed;
            (r, elapsed, std::mem::take(&mut st.faults.power_cut_due))
        };
        if power_cut {
            // Every drive's lock is taken in turn, so this one's must be released first.
            let lost = shared.power_cut()?;
            tracing::warn!(drive = self.index, lost, "power cut (injected)");
        }
        if save_loaded && let Some(ch) = changer.as_mut() {
            let loaded = {
                let mut st = shared.drive(self.index)?;
                st.log_busy();
                st.loaded
            };
            shared.set_loaded(ch, self.index, loaded)?;
        }
        drop(changer);
        call.elapsed_ns = ns(elapsed);
        self.pacer.pace(call.elapsed_ns);
        self.last_return = Some(shared.time.now());
        result
    }
}

fn gatekeep(st: &mut DriveState, gate: Gate) -> Result<(), Fault> {
    if gate == Gate::Passive {
        return Ok(());
    }
    if st.dead {
        return Err(sense::hardware(
            "the drive has failed; pull its cartridge with the robot ({\"op\":\"robot_recover\"})",
        ));
    }
    if let Some(ua) = st.pending_ua.take() {
        let msg = if ua == asc::MEDIUM_MAY_HAVE_CHANGED {
            "not ready to ready change: medium may have changed"
        } else {
            "power on, reset or bus device reset occurred"
        };
        return Err(Fault::check(sk::UNIT_ATTENTION, ua, msg));
    }
    if std::mem::take(&mut st.faults.drive_fault) {
        return Err(sense::hardware("drive fault (injected)"));
    }
    if std::mem::take(&mut st.faults.cleaning_required) {
        st.clean_alert = true;
        return Err(Fault::check(
            sk::NO_SENSE,
            asc::CLEANING_REQUESTED,
            "cleaning requested: load a cleaning cartridge ({\"op\":\"clean\"})",
        ));
    }
    Ok(())
}

fn motion<'a>(st: &DriveState, cfg: &'a SimConfig) -> Motion<'a> {
    let capacity = st
        .cart
        .as_ref()
        .map_or(cfg.capacity_bytes, |c| c.meta.capacity_bytes)
        .max(1);
    Motion { cfg, capacity }
}

fn locate_to(st: &mut DriveState, cfg: &SimConfig, target: u64) -> Result<(), Fault> {
    let c = st.cart_ref()?;
    let (from, to) = (c.offset_of(st.pos), c.offset_of(target));
    if target != st.pos {
        let t = motion(st, cfg).locate_s(from, to);
        st.spend(t);
        st.stats.locate_ns += ns(t);
        st.stats.locates += 1;
    }
    st.pos = target;
    st.pos_unknown = false;
    Ok(())
}

fn ew_point(st: &DriveState, cfg: &SimConfig, c: &Cartridge) -> u64 {
    let natural = cfg.early_warning_bytes(c.meta.capacity_bytes);
    st.ew_abs.map_or(natural, |e| e.min(natural))
}

fn eom_point(st: &DriveState, c: &Cartridge) -> u64 {
    let natural = c.meta.capacity_bytes;
    st.eom_abs.map_or(natural, |e| e.min(natural))
}

/// A write (record or filemark) at a position short of EOD: truncate, count, or refuse.
fn prepare_overwrite(st: &mut DriveState) -> Result<(), Fault> {
    let pos = st.pos;
    let c = st.cart_mut()?;
    if pos >= c.eod() {
        return Ok(());
    }
    if c.meta.worm {
        let barcode = c.barcode().to_string();
        // Refused, and nothing written, but asked for all the same: the library's log keeps it.
        st.log_event("worm_overwrite_refused", &barcode, pos);
        return Err(sense::worm_overwrite(&barcode));
    }
    let relabel = pos == 0;
    let barcode = c.barcode().to_string();
    c.truncate_to(pos).map_err(|e| sense::io("truncate", e))?;
    st.log_event(
        if relabel {
            "relabel"
        } else {
            "write_not_at_eod"
        },
        &barcode,
        pos,
    );
    if relabel {
        st.stats.relabels += 1;
        tracing::info!(
            drive = st.index,
            "relabel: write at BOT over a written cartridge"
        );
    } else {
        st.stats.writes_not_at_eod += 1;
        tracing::warn!(
            drive = st.index,
            block = pos,
            "write short of end of data (violation)"
        );
    }
    Ok(())
}

fn arrival(st: &mut DriveState, bytes: u64) -> f64 {
    let now = st.now;
    let at = match &mut st.feed {
        Feed::HostClock => now,
        Feed::Rate {
            bytes_per_sec,
            produced_at,
        } => {
            *produced_at += bytes as f64 / *bytes_per_sec;
            now.max(*produced_at)
        }
        Feed::Arrivals { origin, times } => match times.pop_front() {
            Some(t) => now.max(*origin + t),
            None => now,
        },
    };
    if matches!(&st.feed, Feed::Arrivals { times, .. } if times.is_empty()) {
        st.feed = Feed::HostClock;
    }
    at
}

fn write_record(
    st: &mut DriveState,
    cfg: &SimConfig,
    data: &[u8],
    crc: Option<u32>,
) -> Result<(), Fault> {
    st.cart_ref()?;
    st.known_pos()?;
    if data.len() as u64 > cfg.max_record_bytes {
        return Err(sense::invalid_field(format!(
            "record of {} bytes exceeds the drive's maximum of {} (sim.max_record_bytes)",
            data.len(),
            cfg.max_record_bytes
        )));
    }
    if data.is_empty() {
        return Err(sense::invalid_field(
            "a record of zero bytes cannot be written",
        ));
    }
    if std::mem::take(&mut st.faults.worm_overwrite) {
        let bc = st.cart_ref()?.barcode().to_string();
        return Err(sense::worm_overwrite(&bc));
    }
    // Damage between host and drive, before the drive sees the record.
    let mut damaged: Option<Vec<u8>> = None;
    if let Some(off) = st.faults.corrupt_write.take() {
        let mut v = data.to_vec();
        let i = (off as usize).min(v.len() - 1);
        v[i] ^= 0xFF;
        damaged = Some(v);
        let bc = st.cart_ref()?.barcode().to_string();
        st.log_event("fired_corrupt_write", &bc, st.pos);
    }
    let received: &[u8] = damaged.as_deref().unwrap_or(data);
    if st.lbp == REEL_LBP_CRC32C {
        let ok = crc.is_some_and(|c| c == crc32c::crc32c(received));
        if !ok {
            return Err(Fault::check(
                sk::ABORTED_COMMAND,
                asc::LBP_GUARD_CHECK_FAILED,
                if crc.is_none() {
                    "LBP is on but the record came without its CRC32C; nothing written"
                } else {
                    "logical block guard check failed: the record's CRC32C does not match; nothing written"
                },
            ));
        }
    }
    let pos = st.pos;
    {
        let c = st.cart_ref()?;
        let start = if pos < c.eod() {
            c.offset_of(pos)
        } else {
            c.data_end()
        };
        if start + received.len() as u64 > eom_point(st, c) {
            return Err(Fault::check(
                sk::VOLUME_OVERFLOW,
                asc::END_OF_MEDIUM,
                "end of medium: the record does not fit; nothing written",
            )
            .with_flags(REEL_FLAG_EOM)
            .with_residue(received.len() as i64));
        }
    }
    prepare_overwrite(st)?;
    // Damage after the drive's checks: stored as is.
    let mut stored: Option<Vec<u8>> = None;
    if let Some(off) = st.faults.silent_write.take() {
        let mut v = received.to_vec();
        let i = (off as usize).min(v.len() - 1);
        v[i] ^= 0xFF;
        stored = Some(v);
        let bc = st.cart_ref()?.barcode().to_string();
        let at = st.cart_ref()?.eod();
        st.log_event("fired_silent_write", &bc, at);
    }
    let mut to_store: &[u8] = stored.as_deref().unwrap_or(received);
    let short = st.faults.short_write.take();
    if short.is_some() {
        let bc = st.cart_ref()?.barcode().to_string();
        let at = st.cart_ref()?.eod();
        st.log_event("fired_short_write", &bc, at);
    }
    if let Some(n) = short {
        to_store = &to_store[..(n as usize).min(to_store.len())];
    }
    let len = to_store.len() as u64;
    let c = st.cart_mut()?;
    c.append_record(to_store)
        .map_err(|e| sense::io("append record", e))?;
    c.commit_older_than(cfg.buffer_bytes);
    let data_end = c.data_end();
    st.pos = st.cart_ref()?.eod();
    let at = arrival(st, len);
    st.now = at;
    let cost = st.streamer.write(len, at);
    st.elapsed += cost.host_wait_s;
    st.stats.busy_ns += ns(cost.stream_s + cost.backhitch_s);
    st.stats.streaming_ns += ns(cost.stream_s);
    st.count_backhitch(cost.backhitch);
    st.stats.bytes_written += len;
    st.stats.records_written += 1;
    if let Some(n) = short {
        let missing = data.len() as u64 - n.min(data.len() as u64);
        return Err(Fault::check(
            sk::MEDIUM_ERROR,
            asc::WRITE_ERROR,
            format!("short write (injected): {n} of {} bytes stored", data.len()),
        )
        .with_residue(missing as i64));
    }
    if last_of_countdown(&mut st.faults.dies_after) {
        st.dead = true;
        let lost = st.lose_buffer()?;
        tracing::warn!(
            drive = st.index,
            lost,
            "drive died (injected); its buffer is lost"
        );
        return Ok(());
    }
    if last_of_countdown(&mut st.faults.power_cut_after) {
        st.faults.power_cut_due = true;
        return Ok(());
    }
    let c = st.cart_ref()?;
    if data_end > ew_point(st, cfg, c) {
        return Err(Fault::check(
            sk::NO_SENSE,
            asc::END_OF_MEDIUM,
            "early warning: the record was written; finish the file and change cartridges",
        )
        .with_flags(REEL_FLAG_EOM));
    }
    Ok(())
}

/// One more record written against an armed countdown of records (`dies_after`,
/// `power_cut_after`): true when it was the last one, and the countdown is disarmed.
fn last_of_countdown(left: &mut Option<u64>) -> bool {
    match left {
        Some(n) if *n > 1 => {
            *n -= 1;
            false
        }
        Some(_) => {
            *left = None;
            true
        }
        None => false,
    }
}

fn write_filemarks(st: &mut DriveState, count: u32, immediate: bool) -> Result<(), Fault> {
    st.cart_ref()?;
    st.known_pos()?;
    if count > 0 {
        if std::mem::take(&mut st.faults.worm_overwrite) {
            let bc = st.cart_ref()?.barcode().to_string();
            return Err(sense::worm_overwrite(&bc));
        }
        prepare_overwrite(st)?;
        let c = st.cart_mut()?;
        for _ in 0..count {
            c.append_filemark()
                .map_err(|e| sense::io("append filemark", e))?;
        }
        st.pos = c.eod();
        st.stats.filemarks_written += u64::from(count);
    }
    if immediate {
        return Ok(());
    }
    if std::mem::take(&mut st.faults.deferred_write_error) {
        let lost = st.lose_buffer()?;
        st.pos = st.cart_ref()?.eod();
        return Err(Fault::check(
            sk::MEDIUM_ERROR,
            asc::WRITE_ERROR,
            format!(
                "deferred write error (injected): {lost} buffered objects were not written; \
                 the position is now the end of data"
            ),
        )
        .with_flags(REEL_FLAG_DEFERRED));
    }
    st.drain_buffer(Stop::SyncStop);
    let c = st.cart_mut()?;
    c.sync().map_err(|e| sense::io("sync", e))?;
    Ok(())
}

fn read_record(
    st: &mut DriveState,
    cfg: &SimConfig,
    shared: &Shared,
    buf: &mut [u8],
) -> Result<ReadRecord, Fault> {
    st.cart_ref()?;
    st.known_pos()?;
    st.settle_buffer()?;
    let pos = st.pos;
    let lbp = st.lbp == REEL_LBP_CRC32C;
    let c = st.cart_ref()?;
    let Some(e) = c.entry(pos) else {
        return Err(sense::blank_check());
    };
    if e.filemark {
        st.pos += 1;
        return Err(sense::filemark().with_residue(buf.len() as i64));
    }
    let barcode = c.barcode().to_string();
    if shared.take_medium_error(&barcode, pos) {
        st.log_event("fired_medium_error", &barcode, pos);
        let t = cfg.reposition_ms as f64 / 1000.0;
        st.spend(t);
        st.stats.repositions += 1;
        st.stats.read_errors_uncorrected += 1;
        return Err(Fault::check(
            sk::MEDIUM_ERROR,
            asc::UNRECOVERED_READ_ERROR,
            format!("unrecovered read error at block {pos} of {barcode} (injected); retry or use another copy"),
        )
        .with_residue(buf.len() as i64));
    }
    let c = st.cart_mut()?;
    let len = e.len as usize;
    let crc = if len > buf.len() && lbp {
        let mut whole = vec![0u8; len];
        c.read_record(pos, &mut whole)
            .map_err(|e| sense::io("read", e))?;
        buf.copy_from_slice(&whole[..buf.len()]);
        Some(crc32c::crc32c(&whole))
    } else {
        c.read_record(pos, buf).map_err(|e| sense::io("read", e))?;
        lbp.then(|| crc32c::crc32c(&buf[..len.min(buf.len())]))
    };
    let delivered = len.min(buf.len());
    if let Some(off) = st.faults.corrupt_read.take()
        && delivered > 0
    {
        buf[(off as usize).min(delivered - 1)] ^= 0xFF;
        let bc = st.cart_ref()?.barcode().to_string();
        st.log_event("fired_corrupt_read", &bc, pos);
    }
    let t = len as f64 / cfg.stream_bytes_per_sec as f64;
    st.spend(t);
    st.stats.streaming_ns += ns(t);
    st.stats.bytes_read += delivered as u64;
    st.stats.records_read += 1;
    st.pos += 1;
    if len > buf.len() {
        return Err(Fault::check(
            sk::NO_SENSE,
            asc::NONE,
            format!(
                "record of {len} bytes, buffer of {}: incorrect length",
                buf.len()
            ),
        )
        .with_flags(REEL_FLAG_ILI)
        .with_residue(buf.len() as i64 - len as i64)
        .with_transferred(buf.len())
        .with_crc(crc));
    }
    Ok(ReadRecord { len, crc })
}

fn space(st: &mut DriveState, cfg: &SimConfig, kind: u32, count: i64) -> Result<(), Fault> {
    st.cart_ref()?;
    st.known_pos()?;
    st.settle_buffer()?;
    let c = st.cart_ref()?;
    let eod = c.eod();
    let fms = c.filemarks();
    let pos = st.pos;
    let (target, fault): (u64, Option<Fault>) = match kind {
        REEL_SPACE_EOD => (eod, None),
        REEL_SPACE_RECORDS if count >= 0 => {
            let n = count as u64;
            let next_fm = fms.get(fms.partition_point(|&f| f < pos)).copied();
            let want = pos.saturating_add(n);
            match next_fm {
                Some(fm) if fm < want => {
                    let spaced = fm - pos;
                    (
                        fm + 1,
                        Some(sense::filemark().with_residue((n - spaced) as i64)),
                    )
                }
                _ if want > eod => (
                    eod,
                    Some(sense::blank_check().with_residue((want - eod) as i64)),
                ),
                _ => (want, None),
            }
        }
        REEL_SPACE_RECORDS => {
            let n = count.unsigned_abs();
            let idx = fms.partition_point(|&f| f < pos);
            let prev_fm = idx.checked_sub(1).map(|i| fms[i]);
            let want = pos as i128 - n as i128;
            match prev_fm {
                Some(fm) if (fm as i128) >= want => {
                    let spaced = pos - fm - 1;
                    // The residue carries the sign of the count (docs/ABI.md, Spacing).
                    (
                        fm,
                        Some(sense::filemark().with_residue(-((n - spaced) as i64))),
                    )
                }
                _ if want < 0 => (0, Some(sense::bom().with_residue(want as i64))),
                _ => (want as u64, None),
            }
        }
        REEL_SPACE_FILEMARKS if count >= 0 => {
            let n = count as u64;
            let idx = fms.partition_point(|&f| f < pos) as u64;
            if n == 0 {
                (pos, None)
            } else if idx + n - 1 < fms.len() as u64 {
                (fms[(idx + n - 1) as usize] + 1, None)
            } else {
                let have = fms.len() as u64 - idx;
                (
                    eod,
                    Some(sense::blank_check().with_residue((n - have) as i64)),
                )
            }
        }
        REEL_SPACE_FILEMARKS => {
            let n = count.unsigned_abs();
            let idx = fms.partition_point(|&f| f < pos) as u64;
            if idx >= n {
                (fms[(idx - n) as usize], None)
            } else {
                (0, Some(sense::bom().with_residue(-((n - idx) as i64))))
            }
        }
        other => {
            return Err(sense::invalid_field(format!(
                "SPACE code {other} is not supported (records, filemarks or end of data)"
            )));
        }
    };
    locate_to(st, cfg, target)?;
    match fault {
        Some(f) => Err(f),
        None => Ok(()),
    }
}

impl Drive for SimDrive {
    fn info(&mut self, call: &mut Call) -> Result<DriveInfo, Fault> {
        let index = self.index;
        self.run(call, Gate::Passive, |_, cfg| {
            Ok(DriveInfo {
                vendor: "REEL".into(),
                product: format!("SIM-{}", cfg.profile.to_uppercase()),
                serial: format!("SIMDRV{index:03}"),
                max_record_bytes: cfg.max_record_bytes,
                capabilities: None,
            })
        })
    }

    fn test_ready(&mut self, call: &mut Call) -> Result<(), Fault> {
        self.run(call, Gate::Command, |st, _| st.cart_ref().map(|_| ()))
    }

    fn load(&mut self, call: &mut Call) -> Result<(), Fault> {
        self.run_synced(call, Gate::Command, true, |st, cfg| {
            if st.cart.is_none() {
                return Err(sense::no_medium());
            }
            if st.loaded {
                st.settle_buffer()?;
                let from = st.cart_ref()?.offset_of(st.pos);
                let t = motion(st, cfg).rewind_s(from);
                st.spend(t);
                st.stats.locate_ns += ns(t);
                st.pos = 0;
                st.pos_unknown = false;
                return Ok(());
            }
            let mut t = cfg.load_ms as f64 / 1000.0;
            let c = st.cart.as_mut().ok_or_else(sense::no_medium)?;
            if crate::shared::is_cleaning(c.barcode()) {
                // A cleaning cartridge: the drive cleans itself (or, with the cartridge used
                // up, raises TapeAlert 22 and does not) and ejects it; it is never threaded.
                let used = c.meta.load_count;
                c.meta.load_count += 1;
                c.save_meta().map_err(|e| sense::io("save meta", e))?;
                if used >= cfg.cleaning_uses {
                    tracing::info!(barcode = c.barcode(), used, "expired cleaning cartridge");
                    st.cleaning_expired = true;
                } else {
                    tracing::info!(barcode = c.barcode(), used = used + 1, "drive cleaned");
                    t += cfg.cleaning_ms as f64 / 1000.0;
                    st.clean_alert = false;
                    st.faults.cleaning_required = false;
                    st.cleaning_expired = false;
                }
                st.spend(t);
                st.stats.mount_ns += ns(t);
                return Ok(());
            }
            if !c.meta.calibrated {
                t += cfg.first_load_ms as f64 / 1000.0;
                c.meta.calibrated = true;
                tracing::info!(barcode = c.barcode(), "first-load calibration");
            }
            c.meta.load_count += 1;
            c.save_meta().map_err(|e| sense::io("save meta", e))?;
            let data_end = c.data_end();
            st.spend(t);
            st.stats.mount_ns += ns(t);
            st.stats.mounts += 1;
            st.loaded = true;
            st.pos = 0;
            st.pos_unknown = false;
            st.drain_buffer(Stop::Positioned);
            st.ew_abs = st.ew_rel.take().map(|n| data_end + n);
            st.eom_abs = st.eom_rel.take().map(|n| data_end + n);
            st.pending_ua = Some(asc::MEDIUM_MAY_HAVE_CHANGED);
            Ok(())
        })
    }

    fn unload(&mut self, call: &mut Call) -> Result<(), Fault> {
        self.run_synced(call, Gate::Command, true, |st, cfg| {
            if st.cart.is_none() {
                return Err(sense::no_medium());
            }
            // The expired cleaning cartridge leaves the drive.
            st.cleaning_expired = false;
            if !st.loaded {
                return Ok(());
            }
            st.settle_buffer()?;
            let from = st.cart_ref()?.offset_of(st.pos);
            let t = motion(st, cfg).rewind_s(from) + cfg.unload_ms as f64 / 1000.0;
            st.spend(t);
            st.stats.mount_ns += ns(t);
            if let Some(c) = st.cart.as_mut() {
                c.close_files()
                    .map_err(|e| sense::io("sync on unload", e))?;
            }
            st.loaded = false;
            st.media_alert = false;
            st.pos = 0;
            st.pos_unknown = false;
            st.ew_abs = None;
            st.eom_abs = None;
            Ok(())
        })
    }

    fn rewind(&mut self, call: &mut Call) -> Result<(), Fault> {
        self.run(call, Gate::Command, |st, cfg| {
            st.cart_ref()?;
            st.settle_buffer()?;
            let from = st.cart_ref()?.offset_of(st.pos);
            let t = motion(st, cfg).rewind_s(from);
            st.spend(t);
            st.stats.locate_ns += ns(t);
            st.pos = 0;
            st.pos_unknown = false;
            Ok(())
        })
    }

    fn locate(&mut self, block: u64, call: &mut Call) -> Result<(), Fault> {
        self.run(call, Gate::Command, |st, cfg| {
            st.cart_ref()?;
            st.settle_buffer()?;
            let eod = st.cart_ref()?.eod();
            if block > eod {
                locate_to(st, cfg, eod)?;
                return Err(sense::blank_check().with_residue((block - eod) as i64));
            }
            locate_to(st, cfg, block)
        })
    }

    fn space(&mut self, kind: u32, count: i64, call: &mut Call) -> Result<(), Fault> {
        self.run(call, Gate::Command, |st, cfg| space(st, cfg, kind, count))
    }

    fn read_position(&mut self, call: &mut Call) -> Result<ReelPosition, Fault> {
        self.run(call, Gate::Command, |st, cfg| {
            let c = st.cart_ref()?;
            let mut p = ReelPosition {
                partition: 0,
                ..Default::default()
            };
            if st.pos_unknown {
                p.flags = REEL_POS_UNKNOWN;
                return Ok(p);
            }
            p.block = st.pos;
            p.file = c.file_of(st.pos);
            let off = c.offset_of(st.pos);
            if st.pos == 0 {
                p.flags |= REEL_POS_BOP;
            }
            if off > ew_point(st, cfg, c) {
                p.flags |= REEL_POS_EOP;
            }
            if cfg.locate == LocateModel::Serpentine {
                let ph = motion(st, cfg).physical(off);
                p.flags |= REEL_POS_PHYSICAL_VALID;
                p.wrap = ph.wrap;
                p.lpos = ph.lpos as u32;
            }
            Ok(p)
        })
    }

    fn write_record(
        &mut self,
        data: &[u8],
        crc: Option<u32>,
        call: &mut Call,
    ) -> Result<(), Fault> {
        self.run(call, Gate::Command, |st, cfg| {
            write_record(st, cfg, data, crc)
        })
    }

    /// The records arrive together: one command's host gap, so the drive's buffer sees no
    /// time pass between them. Each later record meets the checks a command of its own would
    /// (a drive that died, a unit attention, a one-shot fault), and a power cut armed by one
    /// of them ends the call after it, as it would end a single write.
    fn write_records(
        &mut self,
        records: &[WriteRecord<'_>],
        call: &mut Call,
    ) -> (usize, Result<(), Fault>) {
        let mut written = 0;
        let result = self.run(call, Gate::Command, |st, cfg| {
            for (i, r) in records.iter().enumerate() {
                if i > 0 {
                    gatekeep(st, Gate::Command)?;
                }
                write_record(st, cfg, r.data, r.crc)?;
                written += 1;
                if st.faults.power_cut_due {
                    break;
                }
            }
            if written > 1 {
                st.writes_together += 1;
            }
            Ok(())
        });
        (written, result)
    }

    fn write_filemarks(
        &mut self,
        count: u32,
        immediate: bool,
        call: &mut Call,
    ) -> Result<(), Fault> {
        self.run(call, Gate::Command, |st, _| {
            write_filemarks(st, count, immediate)
        })
    }

    fn read_record(&mut self, buffer: &mut [u8], call: &mut Call) -> Result<ReadRecord, Fault> {
        let shared = self.shared.clone();
        self.run(call, Gate::Command, |st, cfg| {
            read_record(st, cfg, &shared, buffer)
        })
    }

    fn set_lbp(&mut self, mode: u32, call: &mut Call) -> Result<(), Fault> {
        self.run(call, Gate::Command, |st, cfg| {
            if !cfg.lbp_capable {
                return Err(Fault::unsupported(
                    "logical block protection (sim.lbp=false)",
                ));
            }
            if mode != REEL_LBP_OFF && mode != REEL_LBP_CRC32C {
                // docs/ABI.md: an unknown mode is the caller's error, not the drive's sense
                return Err(Fault::invalid(format!(
                    "LBP mode {mode} is not one of 0 (off) and 1 (CRC32C)"
                )));
            }
            st.lbp = mode;
            Ok(())
        })
    }

    fn mam_read(&mut self, attribute: u16, call: &mut Call) -> Result<Vec<u8>, Fault> {
        self.run(call, Gate::Command, |st, _| {
            if let Some(target) = st.faults.ua_on_mam_read
                && target.is_none_or(|a| a == attribute)
            {
                st.faults.ua_on_mam_read = None;
                return Err(Fault::check(
                    sk::UNIT_ATTENTION,
                    asc::POWER_ON_RESET,
                    "power on, reset or bus device reset occurred (injected at a MAM read)",
                ));
            }
            let c = st.cart.as_ref().ok_or_else(sense::no_medium)?;
            let mib = |b: u64| (b >> 20).to_be_bytes().to_vec();
            match attribute {
                mam::REMAINING_CAPACITY => {
                    Ok(mib(c.meta.capacity_bytes.saturating_sub(c.data_end())))
                }
                0x0001 => Ok(mib(c.meta.capacity_bytes)),
                mam::LOAD_COUNT => Ok(c.meta.load_count.to_be_bytes().to_vec()),
                mam::MEDIUM_MANUFACTURER => Ok(b"REEL-SIM".to_vec()),
                mam::MEDIUM_SERIAL => Ok(format!("{:<32}", c.barcode()).into_bytes()),
                _ => c.mam_get(attribute).cloned().ok_or_else(|| {
                    sense::invalid_field(format!(
                        "MAM attribute {attribute:04X}h is not set on {}",
                        c.barcode()
                    ))
                }),
            }
        })
    }

    fn mam_write(&mut self, attribute: u16, data: &[u8], call: &mut Call) -> Result<(), Fault> {
        self.run(call, Gate::Command, |st, _| {
            let c = st.cart.as_mut().ok_or_else(sense::no_medium)?;
            if attribute < 0x0800 {
                return Err(Fault::check(
                    sk::ILLEGAL_REQUEST,
                    asc::INVALID_FIELD_IN_PARAMETER_LIST,
                    format!(
                        "MAM attribute {attribute:04X}h is read-only (device or medium attribute)"
                    ),
                ));
            }
            c.mam_set(attribute, data)
                .map_err(|e| sense::io("save MAM", e))
        })
    }

    fn statistics(&mut self, call: &mut Call) -> Result<ReelDriveStats, Fault> {
        self.run(call, Gate::Passive, |st, _| Ok(st.stats))
    }

    fn tape_alerts(&mut self, call: &mut Call) -> Result<u64, Fault> {
        self.run(call, Gate::Passive, |st, _| {
            let mut a = 0u64;
            if st.clean_alert {
                a |= 1 << 19; // flag 20: clean now
            }
            if st.cleaning_expired {
                a |= 1 << 21; // flag 22: expired cleaning media
            }
            if st.media_alert {
                a |= 1 << 3; // flag 4: media
            }
            if st.dead {
                a |= 1 << 29; // flag 30: hardware A
            }
            Ok(a)
        })
    }

    fn geometry(&mut self, call: &mut Call) -> Result<Geometry, Fault> {
        self.run(call, Gate::Command, |st, cfg| {
            let c = st.cart_ref()?;
            let m = motion(st, cfg);
            let g = m.geometry();
            let eowp = if g.is_serpentine() {
                c.eowp(m.bytes_per_wrap(), g.wraps)
            } else {
                Vec::new()
            };
            Ok(Geometry {
                wraps: g.wraps,
                bands: g.bands,
                min_lpos: g.min_lpos,
                max_lpos: g.max_lpos,
                capacity_bytes: c.meta.capacity_bytes,
                eowp,
            })
        })
    }

    fn rao(&mut self, extents: &[ReelExtent], call: &mut Call) -> Result<Vec<u32>, Fault> {
        self.run(call, Gate::Command, |st, cfg| {
            let c = st.cart_ref()?;
            if let Some(bad) = extents.iter().find(|e| e.first_block > e.last_block) {
                return Err(sense::invalid_field(format!(
                    "RAO extent {}..{} has its first block after its last",
                    bad.first_block, bad.last_block
                )));
            }
            let m = motion(st, cfg);
            let g = m.geometry();
            let eowp = if g.is_serpentine() {
                c.eowp(m.bytes_per_wrap(), g.wraps)
            } else {
                Vec::new()
            };
            let ex: Vec<(u64, u64)> = extents
                .iter()
                .map(|e| (e.first_block, e.last_block))
                .collect();
            let plan = seek::plan_order(&g, &eowp, st.pos, &ex, &CostModel::cta());
            Ok(plan.order.into_iter().map(|i| i as u32).collect())
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn cfg(extra: &str) -> SimConfig {
        SimConfig::parse(&format!("dir=/nonexistent;{extra}")).unwrap()
    }

    #[test]
    fn linear_locate_and_rewind_formulas() {
        let c = cfg("");
        let m = Motion {
            cfg: &c,
            capacity: 1000,
        };
        assert!((m.locate_s(0, 500) - 52.0).abs() < 1e-9);
        assert!((m.locate_s(1000, 0) - 102.0).abs() < 1e-9);
        assert_eq!(m.locate_s(10, 10), 0.0);
        assert!((m.rewind_s(500) - 50.0).abs() < 1e-9);
        assert!((m.rewind_s(1000) - 97.0).abs() < 1e-9);
    }

    #[test]
    fn serpentine_positions_run_back_on_odd_wraps() {
        let c = cfg("sim.locate=serpentine;sim.wraps=8");
        let m = Motion {
            cfg: &c,
            capacity: 800,
        };
        let range = m.geometry().max_lpos;
        assert_eq!(range, (100.0f64 / 0.0006192).round() as u64);
        assert_eq!(m.physical(0), PhysicalPos { wrap: 0, lpos: 0 });
        assert_eq!(
            m.physical(50),
            PhysicalPos {
                wrap: 0,
                lpos: range / 2
            }
        );
        assert_eq!(
            m.physical(100),
            PhysicalPos {
                wrap: 1,
                lpos: range
            }
        );
        assert_eq!(m.physical(199).wrap, 1);
        assert!(m.physical(199).lpos < range / 50);
        // A whole-wrap traverse costs the base plus the full pass (and a landing-zone change).
        let t = m.locate_s(0, 99);
        assert!((t - (4.29 - 6.04 + 0.99 * 100.0)).abs() < 0.01, "{t}");
        // Rewinding from the BOT end of wrap 1 is short.
        assert!(m.rewind_s(199) < 4.0);
    }
}
