//! The drive actor: one drive handle owned by its own OS thread (`reel-drive-N`), fed by a
//! channel, with async methods for the engine. Streaming loops (write a container, read a
//! range) run as one closure on the thread through [`Drive::run`], so records go from buffer
//! to plugin without a channel round trip each.

use std::time::Duration;

use reel_plugin_abi::host::{CallError, DriveHandle};
use reel_plugin_abi::sdk::{DriveInfo, Geometry};
use reel_plugin_abi::types::{ReelDriveStats, ReelExtent, ReelPosition};

use super::actor::Actor;
use super::error::DeviceError;

/// Unit attentions waited out after a load before giving up (a load normally raises one).
const MAX_UNIT_ATTENTIONS: u32 = 8;
/// TEST UNIT READY polls while the drive reports "becoming ready" (2/04/01) after a load.
const MAX_BECOMING_READY_POLLS: u32 = 120;
/// Pause between "becoming ready" polls (on the drive's own thread, never the runtime's).
const BECOMING_READY_PAUSE: Duration = Duration::from_millis(500);

/// One drive handle owned by its own OS thread ("reel-drive-N"). Clones share the thread;
/// the drive is closed when the last clone is dropped.
#[derive(Clone)]
pub struct Drive {
    index: u32,
    actor: Actor<DriveHandle>,
    plugin: std::sync::Arc<reel_plugin_abi::host::Plugin>,
    /// This drive's `REEL_CAP_*` bits (a library may mix drives that can do more or less).
    caps: u64,
    /// Whether logical block protection was switched on through [`Drive::set_lbp`].
    lbp: std::sync::Arc<std::sync::atomic::AtomicBool>,
    /// Read and locate timings seen on this drive, for read-through decisions.
    timings: std::sync::Arc<std::sync::Mutex<super::DriveTimings>>,
    /// Where this drive's sessions report what their checks caught.
    integrity: std::sync::Arc<std::sync::Mutex<crate::integrity::IntegrityLog>>,
    /// Where this drive reports its health at each unmount.
    health: std::sync::Arc<std::sync::Mutex<crate::health::HealthLog>>,
    /// The drive's statistics when its cartridge was loaded, to report the change at unload.
    at_load: std::sync::Arc<std::sync::Mutex<Option<ReelDriveStats>>>,
}

impl std::fmt::Debug for Drive {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Drive").field("index", &self.index).finish()
    }
}

impl Drive {
    pub(crate) fn spawn(index: u32, handle: DriveHandle) -> Result<Drive, DeviceError> {
        let plugin = handle.plugin().clone();
        let caps = handle.caps();
        let actor = Actor::spawn(format!("reel-drive-{index}"), handle)?;
        Ok(Drive {
            index,
            actor,
            plugin,
            caps,
            lbp: Default::default(),
            timings: Default::default(),
            integrity: Default::default(),
            health: Default::default(),
            at_load: Default::default(),
        })
    }

    /// Send this drive's health readings to `log` (the host keeps them in the catalogue).
    pub fn set_health_log(&self, log: crate::health::HealthLog) {
        *self.health.lock().unwrap_or_else(|p| p.into_inner()) = log;
    }

    /// Note the drive's statistics as a cartridge is loaded (best effort: a drive that keeps
    /// none reports no change at unload).
    pub async fn note_loaded(&self) {
        let stats = self.statistics().await.ok();
        *self.at_load.lock().unwrap_or_else(|p| p.into_inner()) = stats;
    }

    /// Send `reading` to this drive's health log: once per load, when its cartridge has left
    /// the drive (not at an unload that failed, which is tried again or followed by a pull).
    pub fn report_health(&self, reading: crate::health::Reading) {
        self.health
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .report(reading);
    }

    /// Read the drive's TapeAlert flags and the change in its statistics since the load, for
    /// `barcode`, which is about to leave the drive. Best effort: what the drive cannot tell
    /// is left out; `None` when it answers nothing.
    pub async fn read_health(&self, barcode: &str) -> Option<crate::health::Reading> {
        let alerts = if self.caps & reel_plugin_abi::REEL_CAP_TAPE_ALERTS != 0 {
            self.tape_alerts().await.ok()
        } else {
            None
        };
        let now = self.statistics().await.ok();
        let before = *self.at_load.lock().unwrap_or_else(|p| p.into_inner());
        let serial = self.info().await.map(|i| i.serial.trim().to_string());
        if alerts.is_none() && now.is_none() && serial.is_err() {
            tracing::debug!(
                drive = self.index,
                barcode,
                "the drive reports no health at unmount"
            );
            return None;
        }
        // A field the drive kept at the load and at the unload (its `valid` bit in both: a
        // load-time reading that failed is all zeros, and would charge the drive's lifetime
        // totals to this cartridge), changed since the load.
        let delta = |bit: u32, f: fn(&ReelDriveStats) -> u64| -> Option<u64> {
            let (now, before) = (now?, before?);
            (now.valid & before.valid & (1 << bit) != 0).then(|| f(&now).saturating_sub(f(&before)))
        };
        Some(crate::health::Reading {
            barcode: barcode.to_string(),
            library: String::new(),
            drive: self.index,
            drive_serial: serial.unwrap_or_default(),
            unix: std::time::SystemTime::now()
                .duration_since(std::time::UNIX_EPOCH)
                .map(|d| d.as_secs() as i64)
                .unwrap_or(0),
            tape_alerts: alerts.unwrap_or(0),
            bytes_written: delta(4, |s| s.bytes_written),
            bytes_read: delta(5, |s| s.bytes_read),
            repositions: delta(12, |s| s.repositions),
            backhitches: match (
                delta(10, |s| s.backhitch_underrun),
                delta(11, |s| s.backhitch_sync),
            ) {
                (None, None) => None,
                (a, b) => Some(a.unwrap_or(0) + b.unwrap_or(0)),
            },
            errors: crate::health::ErrorCounts {
                write_corrected: delta(16, |s| s.write_errors_corrected),
                write_uncorrected: delta(17, |s| s.write_errors_uncorrected),
                read_corrected: delta(18, |s| s.read_errors_corrected),
                read_uncorrected: delta(19, |s| s.read_errors_uncorrected),
            },
        })
    }

    /// Send what this drive's checks catch to `log` (the host drains it into the catalogue).
    pub fn set_integrity_log(&self, log: crate::integrity::IntegrityLog) {
        *self.integrity.lock().unwrap_or_else(|p| p.into_inner()) = log;
    }

    /// A reporter of failed checks on `barcode` in this drive.
    pub fn reporter(&self, barcode: &str) -> crate::integrity::Reporter {
        let log = self
            .integrity
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .clone();
        crate::integrity::Reporter::new(log, barcode, self.index)
    }

    /// The drive's index in its library.
    pub fn index(&self) -> u32 {
        self.index
    }

    /// The plugin driving it.
    pub fn plugin(&self) -> &std::sync::Arc<reel_plugin_abi::host::Plugin> {
        &self.plugin
    }

    /// Whether this drive has every bit of `cap` (`REEL_CAP_*`): what the plugin said of this
    /// drive when it was opened, which in a library of mixed drives may be less than what the
    /// plugin can do on others.
    pub fn has_cap(&self, cap: u64) -> bool {
        self.caps & cap == cap
    }

    /// The read and locate timings this drive has shown (shared by its sessions): recall
    /// decides from them whether a gap is read through or located over.
    pub fn timings(&self) -> std::sync::Arc<std::sync::Mutex<super::DriveTimings>> {
        self.timings.clone()
    }

    /// Whether LBP (CRC32C per record) is on: records written need their CRC, and records read
    /// come with the stored CRC to check.
    pub fn lbp_enabled(&self) -> bool {
        self.lbp.load(std::sync::atomic::Ordering::SeqCst)
    }

    /// Run a closure on the drive thread with exclusive access to the handle (for streaming
    /// loops). Map its `CallError`s with [`DeviceError::from_call`]. Early warning arrives as
    /// CHECK CONDITION 0/00/02 with `REEL_FLAG_EOM` (the data written, docs/ABI.md); a write
    /// loop also honours `REEL_FLAG_EOM` on a successful write from a lax plugin.
    pub async fn run<R: Send + 'static>(
        &self,
        f: impl FnOnce(&mut DriveHandle) -> R + Send + 'static,
    ) -> Result<R, DeviceError> {
        self.actor.run("run", f).await
    }

    /// Run one plugin call on the drive thread; its `CallError` is mapped there, so only the
    /// small typed error crosses back.
    async fn call<R: Send + 'static>(
        &self,
        call: &'static str,
        f: impl FnOnce(&mut DriveHandle) -> Result<R, DeviceError> + Send + 'static,
    ) -> Result<R, DeviceError> {
        let r = self.actor.run(call, f).await?;
        if let Err(e) = &r {
            tracing::debug!(drive = self.index, error = %e, "drive call failed");
        }
        r
    }

    /// A call with no result but its elapsed time (ns).
    async fn timed(
        &self,
        call: &'static str,
        f: impl FnOnce(&mut DriveHandle) -> Result<(), DeviceError> + Send + 'static,
    ) -> Result<u64, DeviceError> {
        self.call(call, move |h| {
            f(h)?;
            Ok(h.last_status().elapsed_ns)
        })
        .await
    }

    /// LOAD, then wait until the drive is ready: the unit attention a load raises (medium
    /// changed) is consumed with TEST UNIT READY (bounded), and "becoming ready" is polled, so
    /// the caller sees a ready drive. Returns the total elapsed time (ns).
    pub async fn load(&self) -> Result<u64, DeviceError> {
        self.actor.run("drive_load", load_until_ready).await?
    }

    /// UNLOAD (rewind and eject); returns the elapsed time (ns).
    pub async fn unload(&self) -> Result<u64, DeviceError> {
        self.timed("drive_unload", |h| typed(h.unload())).await
    }

    /// REWIND to BOT; returns the elapsed time (ns).
    pub async fn rewind(&self) -> Result<u64, DeviceError> {
        self.timed("drive_rewind", |h| typed(h.rewind())).await
    }

    /// LOCATE to a logical block; returns the elapsed time (ns).
    pub async fn locate(&self, block: u64) -> Result<u64, DeviceError> {
        self.timed("drive_locate", move |h| typed(h.locate(block)))
            .await
    }

    /// SPACE `count` (negative: backward) of `kind` (`REEL_SPACE_*`); returns the elapsed time.
    pub async fn space(&self, kind: u32, count: i64) -> Result<u64, DeviceError> {
        self.timed("drive_space", move |h| typed(h.space(kind, count)))
            .await
    }

    /// READ POSITION.
    pub async fn read_position(&self) -> Result<ReelPosition, DeviceError> {
        self.call("drive_read_position", |h| typed(h.read_position()))
            .await
    }

    /// WRITE FILEMARKS (`immediate`: return before the buffer is on the medium); returns the
    /// elapsed time (ns).
    pub async fn write_filemarks(&self, count: u32, immediate: bool) -> Result<u64, DeviceError> {
        self.timed("drive_write_filemarks", move |h| {
            typed(h.write_filemarks(count, immediate))
        })
        .await
    }

    /// Set the logical block protection mode (`REEL_LBP_*`).
    ///
    /// A drive that refuses LBP (`REEL_E_UNSUPPORTED`: older generations, virtual libraries
    /// such as tgt) is run without it, with a warning, rather than refused: LBP guards the
    /// path between host and head, while every record still carries its own CRC32C in the
    /// container format and every object its SHA-256. [`Drive::lbp_enabled`] tells which.
    pub async fn set_lbp(&self, mode: u32) -> Result<(), DeviceError> {
        match self
            .call("drive_set_lbp", move |h| typed(h.set_lbp(mode)))
            .await
        {
            Ok(()) => {}
            Err(DeviceError::Unsupported { detail, .. })
                if mode != reel_plugin_abi::REEL_LBP_OFF =>
            {
                tracing::warn!(
                    drive = self.index,
                    %detail,
                    "the drive refuses logical block protection; writing and reading without it"
                );
                self.lbp.store(false, std::sync::atomic::Ordering::SeqCst);
                return Ok(());
            }
            Err(e) => return Err(e),
        }
        self.lbp.store(
            mode != reel_plugin_abi::REEL_LBP_OFF,
            std::sync::atomic::Ordering::SeqCst,
        );
        Ok(())
    }

    /// READ ATTRIBUTE: one MAM attribute's value.
    pub async fn mam_read(&self, attr: u16) -> Result<Vec<u8>, DeviceError> {
        self.call("drive_mam_read", move |h| typed(h.mam_read(attr)))
            .await
    }

    /// WRITE ATTRIBUTE: set one MAM attribute.
    pub async fn mam_write(&self, attr: u16, data: Vec<u8>) -> Result<(), DeviceError> {
        self.call("drive_mam_write", move |h| typed(h.mam_write(attr, &data)))
            .await
    }

    /// The TapeAlert flags set now (flag n in bit n − 1; see [`crate::health`]).
    pub async fn tape_alerts(&self) -> Result<u64, DeviceError> {
        self.call("drive_tape_alerts", |h| typed(h.tape_alerts()))
            .await
    }

    /// Drive statistics.
    pub async fn statistics(&self) -> Result<ReelDriveStats, DeviceError> {
        self.call("drive_statistics", |h| typed(h.statistics()))
            .await
    }

    /// Medium geometry (wraps, LPOS range, end-of-wrap positions) for access ordering.
    pub async fn geometry(&self) -> Result<Geometry, DeviceError> {
        self.call("drive_geometry", |h| typed(h.geometry())).await
    }

    /// Native recommended access order: a permutation of the extents' indices.
    pub async fn rao(&self, extents: Vec<ReelExtent>) -> Result<Vec<u32>, DeviceError> {
        self.call("drive_rao", move |h| typed(h.rao(&extents)))
            .await
    }

    /// Drive identity (vendor, product, serial, largest record).
    pub async fn info(&self) -> Result<DriveInfo, DeviceError> {
        self.call("drive_info", |h| typed(h.info())).await
    }
}

/// Map a plugin call's result on the drive thread.
fn typed<T>(r: Result<T, CallError>) -> Result<T, DeviceError> {
    r.map_err(DeviceError::from_call)
}

/// LOAD and wait for a ready drive; runs on the drive thread.
fn load_until_ready(h: &mut DriveHandle) -> Result<u64, DeviceError> {
    let mut elapsed = 0u64;
    let mut attentions = 0u32;
    loop {
        let r = h.load();
        elapsed += h.last_status().elapsed_ns;
        match r.map_err(DeviceError::from_call) {
            Ok(()) => break,
            // A unit attention means the command was not executed: report it and retry.
            Err(DeviceError::UnitAttention { sense, .. }) if attentions < MAX_UNIT_ATTENTIONS => {
                attentions += 1;
                tracing::debug!(%sense, "unit attention on load, retrying");
            }
            Err(e) => return Err(e),
        }
    }
    let mut polls = 0u32;
    loop {
        let r = h.test_ready();
        elapsed += h.last_status().elapsed_ns;
        match r.map_err(DeviceError::from_call) {
            Ok(()) => return Ok(elapsed),
            Err(DeviceError::UnitAttention { sense, .. }) if attentions < MAX_UNIT_ATTENTIONS => {
                attentions += 1;
                tracing::debug!(%sense, "unit attention after load consumed");
            }
            Err(DeviceError::NotReady { sense, .. })
                if (sense.asc, sense.ascq) == (0x04, 0x01) && polls < MAX_BECOMING_READY_POLLS =>
            {
                polls += 1;
                std::thread::sleep(BECOMING_READY_PAUSE);
            }
            // A plugin without TEST UNIT READY: the load's own success stands.
            Err(DeviceError::Unsupported { .. }) => return Ok(elapsed),
            Err(e) => return Err(e),
        }
    }
}
