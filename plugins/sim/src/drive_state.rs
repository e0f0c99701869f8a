//! One simulated drive's modelled state: its cartridge, position, buffer and streaming, the
//! faults armed on it, its statistics and its share of the event log. The drive handle
//! (`drive.rs`) runs commands on it; the shared state (`shared.rs`) holds one per drive.

use std::collections::VecDeque;
use std::io::Write;
use std::path::PathBuf;
use std::sync::MutexGuard;

use reel_plugin_abi::sdk::Fault;
use reel_plugin_abi::{REEL_LBP_OFF, ReelDriveStats};

use crate::cartridge::Cartridge;
use crate::config::SimConfig;
use crate::sense;
use crate::stream::{Stop, Streamer};

/// Where the records' arrival times come from.
#[derive(Clone, Debug, PartialEq)]
pub enum Feed {
    /// The host's wall clock: the time between calls is host time on the drive's timeline.
    HostClock,
    /// A synthetic producer at a fixed rate: record i is ready when its last byte is produced.
    Rate {
        /// Bytes per second.
        bytes_per_sec: f64,
        /// Modelled time the last record was ready.
        produced_at: f64,
    },
    /// Explicit arrival times (modelled seconds from `origin`) for the next records; the host
    /// clock resumes when they run out.
    Arrivals {
        /// Time the list was given.
        origin: f64,
        /// Offsets of the next arrivals.
        times: VecDeque<f64>,
    },
}

/// Faults armed on a drive; each is consumed as it fires.
#[derive(Clone, Debug, Default)]
pub struct DriveFaults {
    /// Next write is damaged between host and drive at this offset.
    pub corrupt_write: Option<u32>,
    /// Next read is damaged between drive and host at this offset.
    pub corrupt_read: Option<u32>,
    /// Next write is stored damaged at this offset after the drive's checks.
    pub silent_write: Option<u32>,
    /// Next write stores only this many bytes and fails.
    pub short_write: Option<u64>,
    /// Next synchronous filemark fails with a deferred write error.
    pub deferred_write_error: bool,
    /// Next command fails with HARDWARE ERROR.
    pub drive_fault: bool,
    /// Next command reports cleaning required.
    pub cleaning_required: bool,
    /// The drive dies after this many more records.
    pub dies_after: Option<u64>,
    /// The library loses power after this drive writes this many more records.
    pub power_cut_after: Option<u64>,
    /// The countdown of `power_cut_after` ran out in the command that just ran: the library
    /// cuts the power once that command has released the drive.
    pub power_cut_due: bool,
    /// Next write is refused as a WORM overwrite.
    pub worm_overwrite: bool,
    /// The next READ ATTRIBUTE (MAM) of this attribute (`Some(None)`: of any) meets a unit
    /// attention, a reset at that very moment.
    pub ua_on_mam_read: Option<Option<u16>>,
}

/// Per-drive modelled state, shared between the drive handle and the library.
pub struct DriveState {
    /// Drive index.
    pub index: u32,
    /// The cartridge in the drive, loaded or not.
    pub cart: Option<Cartridge>,
    /// Whether the cartridge is threaded and ready.
    pub loaded: bool,
    /// Logical position (next object).
    pub pos: u64,
    /// Position lost (reset, power cut).
    pub pos_unknown: bool,
    /// LBP mode (`REEL_LBP_*`), kept across loads.
    pub lbp: u32,
    /// Unit attention reported to the next command.
    pub pending_ua: Option<(u8, u8)>,
    /// Dead: every command fails with HARDWARE ERROR until `robot_recover`.
    pub dead: bool,
    /// Armed faults.
    pub faults: DriveFaults,
    /// Early warning after this many more bytes (armed before a load).
    pub ew_rel: Option<u64>,
    /// End of medium after this many more bytes (armed before a load).
    pub eom_rel: Option<u64>,
    /// Early warning at this data offset of the loaded cartridge.
    pub ew_abs: Option<u64>,
    /// End of medium at this data offset of the loaded cartridge.
    pub eom_abs: Option<u64>,
    /// TapeAlert flag 20 (clean now) raised.
    pub clean_alert: bool,
    /// TapeAlert flag 22 (expired cleaning media) raised, until the cartridge is unloaded.
    pub cleaning_expired: bool,
    /// TapeAlert flag 4 (media) raised for the loaded cartridge, until it is unloaded.
    pub media_alert: bool,
    /// Statistics.
    pub stats: ReelDriveStats,
    /// `drive_write_records` calls that wrote more than one record (one arrival for several
    /// records, docs/ABI.md): the simulator's own counter, not one of the drive's log pages.
    pub writes_together: u64,
    /// The drive's modelled timeline, seconds.
    pub now: f64,
    /// Buffer and tape motion.
    pub streamer: Streamer,
    /// Arrival times of written records.
    pub feed: Feed,
    /// Shared mode: the library's event log, where writes short of EOD and relabels are
    /// appended as they happen (so no process's death loses them).
    pub events: Option<PathBuf>,
    /// Shared mode: how much of `stats.busy_ns` is already in the event log.
    busy_logged_ns: u64,
    pub(crate) elapsed: f64,
}

impl DriveState {
    /// A new, empty drive.
    pub fn new(index: u32, cfg: &SimConfig) -> Self {
        DriveState {
            index,
            cart: None,
            loaded: false,
            pos: 0,
            pos_unknown: false,
            lbp: REEL_LBP_OFF,
            pending_ua: None,
            dead: false,
            faults: DriveFaults::default(),
            ew_rel: None,
            eom_rel: None,
            ew_abs: None,
            eom_abs: None,
            clean_alert: false,
            cleaning_expired: false,
            media_alert: false,
            writes_together: 0,
            stats: ReelDriveStats {
                struct_size: std::mem::size_of::<ReelDriveStats>() as u32,
                // Every counter: the model has no soft errors, so its corrected-error counts
                // are truly zero; an injected medium error is an uncorrected read error.
                valid: 0xF_FFFF,
                ..Default::default()
            },
            now: 0.0,
            streamer: Streamer::new(
                cfg.stream_bytes_per_sec as f64,
                cfg.min_stream_bytes_per_sec as f64,
                cfg.buffer_bytes as f64,
                cfg.start_bytes as f64,
                cfg.backhitch_ms as f64 / 1000.0,
            ),
            feed: Feed::HostClock,
            events: None,
            busy_logged_ns: 0,
            elapsed: 0.0,
        }
    }

    /// A drive taken over by a new owner (shared mode): as after a power-on, with no cartridge
    /// (the caller puts the one the layout says), keeping this process's statistics and clock.
    pub fn reset_for_owner(&mut self, cfg: &SimConfig) {
        let (stats, now, logged) = (self.stats, self.now, self.busy_logged_ns);
        let together = self.writes_together;
        *self = DriveState::new(self.index, cfg);
        self.stats = stats;
        self.writes_together = together;
        self.now = now;
        self.busy_logged_ns = logged;
    }

    /// Shared mode: append an event (`write_not_at_eod`, `relabel`, or an injected fault
    /// that took effect: `fired_corrupt_write`, `fired_corrupt_read`, `fired_silent_write`,
    /// `fired_short_write`, `fired_medium_error`) to the library's log.
    pub(crate) fn log_event(&self, event: &str, barcode: &str, block: u64) {
        self.append_event(serde_json::json!({
            "event": event,
            "pid": std::process::id(),
            "drive": self.index,
            "barcode": barcode,
            "block": block,
        }));
    }

    /// Shared mode: append the drive's modelled busy time since the last such event
    /// (`drive_busy`, `ns`), at every LOAD and UNLOAD, so the library's modelled time survives
    /// the processes that spent it (a killed one loses at most its last mount's).
    pub fn log_busy(&mut self) {
        let delta = self.stats.busy_ns.saturating_sub(self.busy_logged_ns);
        if self.events.is_none() || delta == 0 {
            return;
        }
        self.busy_logged_ns = self.stats.busy_ns;
        self.append_event(serde_json::json!({
            "event": "drive_busy",
            "pid": std::process::id(),
            "drive": self.index,
            "ns": delta,
        }));
    }

    fn append_event(&self, mut line: serde_json::Value) {
        let Some(path) = &self.events else { return };
        line["t_ms"] = serde_json::json!(crate::clock::unix_ms());
        let r = std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(path)
            .and_then(|mut f| f.write_all(format!("{line}\n").as_bytes()));
        if let Err(e) = r {
            tracing::error!(path = %path.display(), error = %e, "cannot append to the library's event log");
        }
    }

    /// Charge time the robot or the library spent on this drive's behalf.
    pub fn charge_mount(&mut self, secs: f64) {
        self.stats.busy_ns += ns(secs);
        self.stats.mount_ns += ns(secs);
        self.now += secs;
    }

    /// The buffer is lost (power cut, dying drive): what only it held is dropped.
    pub fn lose_buffer(&mut self) -> Result<u64, Fault> {
        self.streamer.lose_buffer();
        match self.cart.as_mut() {
            Some(c) => {
                let lost = c
                    .drop_uncommitted()
                    .map_err(|e| sense::io("drop buffer", e))?;
                let eod = c.eod();
                if self.pos > eod {
                    self.pos = eod;
                }
                if lost > 0 {
                    // Records from `eod` on are gone: a fault that took effect on one of them
                    // went with it.
                    let bc = c.barcode().to_string();
                    self.log_event("lost_buffer", &bc, eod);
                }
                Ok(lost)
            }
            None => Ok(0),
        }
    }

    /// Take the cartridge out (for the robot), syncing it first.
    pub fn take_cartridge(&mut self) -> Result<Option<Cartridge>, Fault> {
        if let Some(c) = self.cart.as_mut() {
            c.close_files()
                .map_err(|e| sense::io("close cartridge", e))?;
        }
        self.loaded = false;
        self.pos = 0;
        self.pos_unknown = false;
        self.ew_abs = None;
        self.eom_abs = None;
        Ok(self.cart.take())
    }

    pub(crate) fn spend(&mut self, secs: f64) {
        self.elapsed += secs;
        self.stats.busy_ns += ns(secs);
    }

    pub(crate) fn cart_ref(&self) -> Result<&Cartridge, Fault> {
        match (&self.cart, self.loaded) {
            (None, _) => Err(sense::no_medium()),
            (Some(_), false) => Err(sense::not_loaded()),
            (Some(c), true) => Ok(c),
        }
    }

    pub(crate) fn cart_mut(&mut self) -> Result<&mut Cartridge, Fault> {
        match (&mut self.cart, self.loaded) {
            (None, _) => Err(sense::no_medium()),
            (Some(_), false) => Err(sense::not_loaded()),
            (Some(c), true) => Ok(c),
        }
    }

    pub(crate) fn known_pos(&self) -> Result<(), Fault> {
        if self.pos_unknown {
            Err(sense::position_unknown())
        } else {
            Ok(())
        }
    }

    /// Drain the write buffer to the medium (a synchronous filemark, or `Positioned` before a
    /// positioning or read command); the host waits for it. Returns the wait.
    pub(crate) fn drain_buffer(&mut self, cause: Stop) -> f64 {
        let d = self.streamer.drain(self.now, cause);
        self.elapsed += d.wait_s;
        self.stats.busy_ns += ns(d.backhitch_s);
        self.count_backhitch(d.backhitch);
        d.wait_s
    }

    pub(crate) fn count_backhitch(&mut self, cause: Option<Stop>) {
        match cause {
            Some(Stop::Underrun) => self.stats.backhitch_underrun += 1,
            Some(Stop::SyncStop) => self.stats.backhitch_sync += 1,
            _ => {}
        }
    }

    /// Drain the write buffer before a positioning or read command.
    pub(crate) fn settle_buffer(&mut self) -> Result<(), Fault> {
        let wait = self.drain_buffer(Stop::Positioned);
        self.now += wait;
        if let Some(c) = self.cart.as_mut() {
            c.commit_all();
            c.flush().map_err(|e| sense::io("flush", e))?;
        }
        Ok(())
    }
}

pub(crate) fn ns(secs: f64) -> u64 {
    (secs * 1e9).round().max(0.0) as u64
}

/// Lock guard helper type for the library.
pub(crate) type DriveGuard<'a> = MutexGuard<'a, DriveState>;
