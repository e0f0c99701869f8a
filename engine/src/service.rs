//! The tape service: one host's drives, its library and the catalogue, and the mechanisms the
//! jobs layer's executor builds every tape action from: hold a drive with a given cartridge
//! (mounting it), pick and hold a writable cartridge of a pool on a given drive, run a write,
//! read-back, label or rebuild session on what is held, unmount, and recover what a crash left
//! pending. It decides nothing about jobs: which work a drive takes, which copy a recall reads
//! and when a mount gives way are the scheduler's and the executor's (jobs/src), so the worker,
//! the tests and the benchmark all go one way to the tape.
//!
//! Drives are handed out here: a job that needs a cartridge gets the drive that already holds
//! it, else an idle empty drive, else an idle drive whose cartridge is put back. There is no
//! cartridge lease: a cartridge belongs to whoever holds the drive it is in (across hosts, the
//! jobs layer's drive lease, whose fence a held drive carries, and its drive board), and the
//! library itself refuses to move a cartridge out of a drive another host uses
//! (docs/DECISIONS.md, "One authority for a cartridge").
//!
//! Hosts that share one library (each using some of its drives) see each other's drives in the
//! library's inventory. A cartridge loaded in a drive this host does not use is in use there:
//! [`TapeService::acquire`] waits for it, [`TapeService::acquire_on`] answers
//! [`SessionError::HeldElsewhere`] at once (the jobs scheduler then does other work and tries
//! again), and a writer picks another cartridge. A cartridge left unloaded in such a drive (its
//! host unloaded it, or died) is moved from there by the robot.

use std::collections::{HashMap, HashSet};
use std::path::Path;
use std::sync::Arc;
use std::time::Duration;

use reel_plugin_abi::{
    REEL_ELEMENT_DRIVE, REEL_ELEMENT_FULL, REEL_ELEMENT_LOADED, REEL_ELEMENT_SLOT,
    REEL_ELEMENT_WORM, REEL_LBP_CRC32C,
};
use tokio::sync::{Mutex, OwnedMutexGuard};
use tracing::{info, warn};

use crate::catalogue::{Cartridge, CartridgeState, Catalogue, ContainerState};
use crate::device::{DeviceError, Drive, Library};
use crate::session::copied::{Positions, SetAside, SkipCopied, split_copied};
use crate::session::intake::{IntakeOutcome, check_epoch, label_cartridge};
use crate::session::mount::{self, Mount};
use crate::session::order::OrderPolicy;
use crate::session::rebuild::{RebuildReport, rebuild_cartridge};
use crate::session::recall::RecallOptions;
use crate::session::recovery::{RecoveryReport, recover_cartridge};
use crate::session::verify::{DriveFault, VerifyTarget, read_back};
use crate::session::write::{ArchiveItem, Refill, WriteContext, write_session};
use crate::session::{CancelToken, Fence, NoFence, ProgressFn, SessionConfig, SessionError};

#[derive(Default)]
struct DriveState {
    mounted: Option<Mount>,
}

struct DriveSlot {
    drive: Drive,
    state: Arc<Mutex<DriveState>>,
}

/// A drive held by one task, with the cartridge it asked for mounted.
pub struct HeldDrive {
    /// The drive.
    pub drive: Drive,
    /// The mount.
    pub mount: Mount,
    /// The lease's fence.
    pub fence: Arc<dyn Fence>,
    guard: OwnedMutexGuard<DriveState>,
}

/// Options of [`TapeService::open`].
#[derive(Clone, Debug)]
pub struct ServiceOptions {
    /// Drive indices this host uses (None: every drive of the library).
    pub drives: Option<Vec<u32>>,
    /// Session tunables.
    pub session: SessionConfig,
    /// Capacity recorded for cartridges the catalogue does not know yet, until a drive
    /// reports the real one (at labelling and before each write session). 0, the default,
    /// records "unknown": no figure is made up; a test rig that knows its cartridges may give
    /// theirs.
    pub default_capacity_bytes: u64,
    /// Pool new cartridges are labelled into when a write needs one and none is labelled.
    pub auto_label: bool,
    /// Unmounts whose drive reported a medium TapeAlert flag after which a cartridge takes
    /// no more writes (state full, with the flags as the reason); 0: never.
    pub media_alert_limit: u32,
    /// Barcodes starting with this are cleaning cartridges, besides those the changer reports
    /// as cleaning media ([`crate::session::clean`]); empty: the changer's word only.
    pub cleaning_prefix: String,
}

impl Default for ServiceOptions {
    fn default() -> Self {
        ServiceOptions {
            drives: None,
            session: SessionConfig::default(),
            default_capacity_bytes: 0,
            auto_label: true,
            media_alert_limit: 1,
            cleaning_prefix: "CLN".into(),
        }
    }
}

/// One host's tape service.
pub struct TapeService {
    catalogue: Catalogue,
    library: Library,
    drives: Vec<DriveSlot>,
    options: ServiceOptions,
    /// Drive index → barcode mounted, kept beside the per-drive locks.
    mounted: std::sync::Mutex<HashMap<u32, String>>,
    /// Held while a writer picks (and perhaps labels) a cartridge, so two copies or two jobs
    /// never pick the same new cartridge.
    allocation: Mutex<()>,
    /// Cartridges being mounted right now, so two tasks never mount one cartridge in two drives.
    mounting: std::sync::Mutex<HashSet<String>>,
    /// Whether the library has drives this host does not use (other hosts may share it).
    foreign_drives: bool,
    /// Where this host's drives report what their checks catch.
    integrity: crate::integrity::IntegrityLog,
    /// The library's name in health readings, once the host has named it.
    health_library: Arc<std::sync::RwLock<String>>,
    /// This host's drives that asked for cleaning at an unmount (TapeAlert 20 or 21), by
    /// index, until they are cleaned (or a cleaning was tried).
    wants_cleaning: Arc<std::sync::Mutex<HashSet<u32>>>,
}

/// Refuse a record size above what drive `index` accepts (its READ BLOCK LIMITS, reported by
/// the plugin as `max_record_bytes`; 0 means the plugin does not know), when the drive is opened:
/// a larger record would fail its first write, or (the kernel st driver refuses reads larger
/// than the limit with EINVAL) leave a tape this drive cannot read back.
pub fn check_record_size(
    index: u32,
    info: &crate::device::DriveInfo,
    record_size: usize,
) -> Result<(), SessionError> {
    let limit = info.max_record_bytes;
    if limit == 0 || record_size as u64 <= limit {
        return Ok(());
    }
    Err(SessionError::Config(format!(
        "drive {index} ({} {}, serial {}) accepts records of at most {limit} bytes (its READ BLOCK \
         LIMITS), but the record size is {record_size} bytes: set [archive] record_size (or \
         REEL_ARCHIVE_RECORD_SIZE) to at most {limit}, or leave this drive out of [library] drives",
        info.vendor.trim(),
        info.product.trim(),
        info.serial.trim(),
    )))
}

/// Attempts to record one catch while the store is away (about a minute in all).
const CATCH_ATTEMPTS: u32 = 12;

/// A health log whose readings a task appends to the catalogue (`reel cartridge show`, `reel
/// drive show`), once each (a reading lost to a store that is away is logged, not retried: the
/// next unmount reads the drive again). A cartridge whose unmounts reported a medium TapeAlert
/// flag `limit` times (0: never) takes no more writes: reel makes an active one full, with the
/// flags as the reason (an operator's disabled or broken stays).
///
/// A drive whose reading asks for cleaning (TapeAlert 20 clean now, 21 clean periodic) goes
/// into `wants_cleaning`, for its worker to clean it before its next mount.
fn keep_health(
    catalogue: &Catalogue,
    limit: u32,
    library: Arc<std::sync::RwLock<String>>,
    wants_cleaning: Arc<std::sync::Mutex<HashSet<u32>>>,
) -> crate::health::HealthLog {
    let (log, mut rx) = crate::health::HealthLog::channel();
    let catalogue = catalogue.clone();
    tokio::spawn(async move {
        while let Some(mut r) = rx.recv().await {
            if crate::health::flags_of(r.tape_alerts, crate::health::Concern::Cleaning)
                .iter()
                .any(|f| matches!(f, 20 | 21))
            {
                info!(drive = r.drive, "the drive asks for cleaning");
                wants_cleaning
                    .lock()
                    .unwrap_or_else(|p| p.into_inner())
                    .insert(r.drive);
            }
            r.library = library.read().unwrap_or_else(|p| p.into_inner()).clone();
            if let Err(e) = catalogue.record_health(&r).await {
                warn!(error = %e, barcode = %r.barcode, "a drive's health reading is not recorded");
                continue;
            }
            let medium = crate::health::flags_of(r.tape_alerts, crate::health::Concern::Medium);
            if limit == 0 || medium.is_empty() {
                continue;
            }
            let retire = match catalogue.medium_alerts(&r.barcode).await {
                Ok(n) if n >= u64::from(limit) => Some(n),
                Ok(_) => None,
                Err(e) => {
                    warn!(error = %e, barcode = %r.barcode, "cannot count the cartridge's medium alerts");
                    None
                }
            };
            if let Some(n) = retire {
                let reason = format!(
                    "drive {} (serial {}) reported TapeAlert {} at unmount ({n} such unmount{}): \
                     no more writes; read it and repack it",
                    r.drive,
                    r.drive_serial,
                    medium
                        .iter()
                        .map(|f| format!("{f} {}", crate::health::flag_name(*f)))
                        .collect::<Vec<_>>()
                        .join(", "),
                    if n == 1 { "" } else { "s" }
                );
                match catalogue.retire_from_writes(&r.barcode, &reason).await {
                    Ok(true) => {
                        warn!(barcode = %r.barcode, %reason, "cartridge takes no more writes")
                    }
                    Ok(false) => {}
                    Err(e) => {
                        warn!(error = %e, barcode = %r.barcode, "cannot stop writes to a failing cartridge")
                    }
                }
            }
        }
    });
    log
}

/// An integrity log whose catches a task appends to the catalogue (`reel library integrity`),
/// each retried with backoff for about a minute if the store is away (a busy SQLite file, a
/// PostgreSQL restart); the task ends with the last drive.
fn keep_catches(catalogue: &Catalogue) -> crate::integrity::IntegrityLog {
    let (log, mut rx, pending) = crate::integrity::IntegrityLog::channel();
    let catalogue = catalogue.clone();
    tokio::spawn(async move {
        while let Some(c) = rx.recv().await {
            for attempt in 1..=CATCH_ATTEMPTS {
                match catalogue.record_catch(&c).await {
                    Ok(()) => break,
                    Err(e) if attempt < CATCH_ATTEMPTS => {
                        tracing::warn!(error = %e, attempt, "cannot record an integrity catch yet");
                        let ms = (250u64 << attempt.min(5)).min(8_000);
                        tokio::time::sleep(std::time::Duration::from_millis(ms)).await;
                    }
                    Err(e) => {
                        tracing::error!(error = %e, barcode = %c.barcode, kind = c.kind.as_str(), "an integrity catch is not recorded");
                    }
                }
            }
            pending.taken();
        }
    });
    log
}

impl TapeService {
    /// Open the library through `plugin_path` with `plugin_config`, open this host's drives,
    /// and learn the cartridges the library holds.
    pub async fn open(
        catalogue: Catalogue,
        plugin_path: &Path,
        plugin_config: &str,
        options: ServiceOptions,
    ) -> Result<TapeService, SessionError> {
        options.session.validate()?;
        let plugin = crate::device::load_plugin(plugin_path)?;
        let library = Library::open(plugin, plugin_config)?;
        let inv = library.inventory().await?;
        let all: Vec<u32> = inv
            .iter()
            .filter(|e| e.kind == reel_plugin_abi::REEL_ELEMENT_DRIVE)
            .map(|e| e.index)
            .collect();
        let wanted = options.drives.clone().unwrap_or_else(|| all.clone());
        let foreign_drives = all.iter().any(|i| !wanted.contains(i));
        let integrity = keep_catches(&catalogue);
        let health_library: Arc<std::sync::RwLock<String>> = Default::default();
        let wants_cleaning: Arc<std::sync::Mutex<HashSet<u32>>> = Default::default();
        let health = keep_health(
            &catalogue,
            options.media_alert_limit,
            health_library.clone(),
            wants_cleaning.clone(),
        );
        let mut drives = Vec::new();
        for i in wanted {
            if !all.contains(&i) {
                return Err(SessionError::Config(format!(
                    "drive {i} is not in the library (it has drives {all:?})"
                )));
            }
            let drive = library.open_drive(i).await?;
            drive.set_integrity_log(integrity.clone());
            drive.set_health_log(health.clone());
            check_record_size(i, &drive.info().await?, options.session.record_size)?;
            drives.push(DriveSlot {
                drive,
                state: Arc::new(Mutex::new(DriveState::default())),
            });
        }
        // Start clean: a cartridge left in one of our drives by an earlier run goes back to
        // a slot, so the mount state below is the library's. A drive that fails to give it
        // back does not stop the host (its other drives work, and this one is tried again
        // when it is next used, as after any failed unload); it is logged.
        for d in &drives {
            if mount::mounted_barcode(&library, &d.drive).await?.is_some()
                && let Err(e) = mount::unmount(&library, &d.drive, None).await
            {
                warn!(drive = d.drive.index(), error = %e, "a cartridge left in the drive by an earlier run could not be unloaded; the drive is tried again when next used");
            }
        }
        let svc = TapeService {
            catalogue,
            library,
            drives,
            options,
            mounted: Default::default(),
            allocation: Mutex::new(()),
            mounting: Default::default(),
            foreign_drives,
            integrity,
            health_library,
            wants_cleaning,
        };
        svc.sync_inventory().await?;
        Ok(svc)
    }

    /// Wait until what the drives' checks caught so far is in the catalogue, at most
    /// `within` (a stopping worker calls it, so its last catches are not lost); whether it is.
    pub async fn settle_catches(&self, within: std::time::Duration) -> bool {
        self.integrity.settled(within).await
    }

    /// The catalogue.
    pub fn catalogue(&self) -> &Catalogue {
        &self.catalogue
    }
    /// The library.
    pub fn library(&self) -> &Library {
        &self.library
    }
    /// This host's drives.
    pub fn drives(&self) -> Vec<Drive> {
        self.drives.iter().map(|d| d.drive.clone()).collect()
    }
    /// Session tunables.
    pub fn session_config(&self) -> &SessionConfig {
        &self.options.session
    }

    /// Record every cartridge the library holds that the catalogue does not know: data
    /// cartridges as new, cleaning cartridges as such (never as data).
    pub async fn sync_inventory(&self) -> Result<Vec<Cartridge>, SessionError> {
        let inv = self.library.inventory().await?;
        let cleaning: Vec<String> = inv
            .iter()
            .filter(|e| !e.barcode.is_empty() && self.is_cleaning(e))
            .map(|e| e.barcode.clone())
            .collect();
        self.catalogue.note_cleaning_cartridges(&cleaning).await?;
        for e in inv.iter().filter(|e| {
            e.flags & REEL_ELEMENT_FULL != 0 && !e.barcode.is_empty() && !self.is_cleaning(e)
        }) {
            self.catalogue
                .add_cartridge(
                    &e.barcode,
                    e.flags & REEL_ELEMENT_WORM != 0,
                    self.options.default_capacity_bytes,
                )
                .await?;
        }
        Ok(self.catalogue.cartridges().await?)
    }

    /// Cartridges loaded in drives of the library that this host does not use (another host
    /// sharing the library is using them), with the drive's index. Empty, without asking the
    /// library, when this host uses every drive.
    pub async fn held_elsewhere(&self) -> Result<Vec<(String, u32)>, SessionError> {
        if !self.foreign_drives {
            return Ok(Vec::new());
        }
        let ours: HashSet<u32> = self.drives.iter().map(|d| d.drive.index()).collect();
        let inv = self.library.inventory().await?;
        Ok(inv
            .into_iter()
            .filter(|e| {
                e.kind == REEL_ELEMENT_DRIVE
                    && !ours.contains(&e.index)
                    && e.flags & REEL_ELEMENT_FULL != 0
                    && e.flags & REEL_ELEMENT_LOADED != 0
                    && !e.barcode.is_empty()
            })
            .map(|e| (e.barcode, e.index))
            .collect())
    }

    /// The drive of another host that has `barcode` loaded, if any.
    async fn drive_elsewhere(&self, barcode: &str) -> Result<Option<u32>, SessionError> {
        Ok(self
            .held_elsewhere()
            .await?
            .into_iter()
            .find(|(b, _)| b == barcode)
            .map(|(_, i)| i))
    }

    /// Get a drive with `barcode` mounted: the drive holding it, else an idle empty one, else
    /// an idle one whose cartridge goes back to its slot. Waits while every drive is busy,
    /// while the cartridge is in a busy drive, or while another host sharing the library has
    /// it loaded.
    pub async fn acquire(&self, barcode: &str) -> Result<HeldDrive, SessionError> {
        if self.drives.is_empty() {
            return Err(SessionError::Config("this host uses no drives".into()));
        }
        let mut told = false;
        let mut wait_elsewhere = |drive: u32| {
            if !told {
                info!(
                    barcode,
                    drive,
                    "cartridge is loaded in another host's drive; waiting until it is unloaded"
                );
                told = true;
            }
            tokio::time::sleep(Duration::from_millis(250))
        };
        loop {
            let map = self.mounted_map();
            let mut in_busy_drive = false;
            for d in &self.drives {
                if map.get(&d.drive.index()).is_some_and(|b| b == barcode) {
                    match d.state.clone().try_lock_owned() {
                        Ok(g) => return self.finish_acquire(d, g, barcode).await,
                        Err(_) => in_busy_drive = true,
                    }
                }
            }
            if !in_busy_drive && self.reserve(barcode) {
                match self.drive_elsewhere(barcode).await {
                    Ok(None) => {}
                    Ok(Some(drive)) => {
                        self.unreserve(barcode);
                        wait_elsewhere(drive).await;
                        continue;
                    }
                    Err(e) => {
                        self.unreserve(barcode);
                        return Err(e);
                    }
                }
                let mut candidate = None;
                for d in &self.drives {
                    if let Ok(g) = d.state.clone().try_lock_owned() {
                        let empty = g.mounted.is_none();
                        if empty || candidate.is_none() {
                            candidate = Some((d, g));
                        }
                        if empty {
                            break;
                        }
                    }
                }
                if let Some((d, g)) = candidate {
                    let r = self.finish_acquire(d, g, barcode).await;
                    self.unreserve(barcode);
                    // Another host loaded it between the check and the move: wait for it.
                    if let Err(SessionError::HeldElsewhere { drive, .. }) = r {
                        wait_elsewhere(drive).await;
                        continue;
                    }
                    return r;
                }
                self.unreserve(barcode);
            }
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    }

    /// Claim the right to mount `barcode`: refused while another task mounts it or one of our
    /// drives holds it (the check and the claim are one step under the lock).
    fn reserve(&self, barcode: &str) -> bool {
        let mut m = self.mounting.lock().unwrap_or_else(|e| e.into_inner());
        if m.contains(barcode) || self.mounted_map().values().any(|b| b == barcode) {
            return false;
        }
        m.insert(barcode.to_string());
        true
    }

    fn unreserve(&self, barcode: &str) {
        self.mounting
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .remove(barcode);
    }

    /// Which cartridge each of our drives holds, readable while drives are busy.
    /// The cartridge this service has mounted in drive `index`, if any.
    pub fn mounted_on(&self, index: u32) -> Option<String> {
        self.mounted_map().remove(&index)
    }

    fn mounted_map(&self) -> HashMap<u32, String> {
        self.mounted
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .clone()
    }

    fn set_mounted(&self, drive: u32, barcode: Option<&str>) {
        let mut m = self.mounted.lock().unwrap_or_else(|e| e.into_inner());
        match barcode {
            Some(b) => m.insert(drive, b.to_string()),
            None => m.remove(&drive),
        };
    }

    async fn finish_acquire(
        &self,
        d: &DriveSlot,
        mut g: OwnedMutexGuard<DriveState>,
        barcode: &str,
    ) -> Result<HeldDrive, SessionError> {
        if let Some(m) = g.mounted.as_ref().filter(|m| m.barcode != barcode).cloned() {
            mount::unmount(&self.library, &d.drive, Some(m.source_slot)).await?;
            g.mounted = None;
            self.set_mounted(d.drive.index(), None);
        }
        // No lease of its own: whoever holds the drive holds what is in it (the jobs layer
        // gives this held drive its drive lease's fence).
        let fence: Arc<dyn Fence> = Arc::new(NoFence);
        let m = match g.mounted.clone() {
            // Already in this drive: no robot move, no load.
            Some(m) => Mount {
                mount_s: 0.0,
                already: true,
                ..m
            },
            None => {
                // The library may hold a cartridge in this drive from an earlier run.
                if let Some(other) = mount::mounted_barcode(&self.library, &d.drive).await?
                    && other != barcode
                {
                    mount::unmount(&self.library, &d.drive, None).await?;
                }
                let m = mount::mount(&self.library, &d.drive, barcode).await?;
                self.catalogue.add_mount(barcode).await?;
                if d.drive.has_cap(reel_plugin_abi::REEL_CAP_LBP) && self.options.session.lbp {
                    d.drive.set_lbp(REEL_LBP_CRC32C).await?;
                }
                g.mounted = Some(m.clone());
                self.set_mounted(d.drive.index(), Some(barcode));
                m
            }
        };
        Ok(HeldDrive {
            drive: d.drive.clone(),
            mount: m,
            fence,
            guard: g,
        })
    }

    /// After a device error: put the cartridge back in its slot if the library still can, and
    /// forget the mount, so the next use starts from a fresh load (position, buffer and mode
    /// are not trusted after a reset, a power cut or a dead drive).
    pub async fn eject(&self, held: HeldDrive) {
        let (barcode, drive) = (held.mount.barcode.clone(), held.drive.index());
        if let Err(e) = self.unmount_held(held).await {
            warn!(barcode = %barcode, drive, error = %e, "cannot put the cartridge back after an error; the next mount will try again");
        }
    }

    /// Forget every mount and put back whatever the library reports in our drives (after a
    /// drive was replaced or the library reset).
    pub async fn reset_mounts(&self) {
        for d in &self.drives {
            d.state.lock().await.mounted = None;
            self.set_mounted(d.drive.index(), None);
            if let Ok(Some(_)) = mount::mounted_barcode(&self.library, &d.drive).await
                && let Err(e) = mount::unmount(&self.library, &d.drive, None).await
            {
                warn!(drive = d.drive.index(), error = %e, "cannot empty the drive");
            }
        }
    }

    /// Write `items` at end of data of the cartridge held in `held`: crash rules first, then
    /// the MAM label epoch check, then the write session. Marks the cartridge full on early
    /// warning, end of medium or a write error that is the cartridge's. Gives the drive back
    /// (None when it had to be ejected after a device error). `refill`, when given, is asked for
    /// more items once these are written ([`Refill`]); what it gives is reported in the outcome
    /// like the rest.
    pub async fn write_held(
        &self,
        held: HeldDrive,
        items: Vec<ArchiveItem>,
        refill: Option<Box<dyn Refill>>,
        cancel: &CancelToken,
        progress: ProgressFn,
    ) -> (
        Option<HeldDrive>,
        Result<crate::session::write::WriteOutcome, HeldWriteError>,
    ) {
        let barcode = held.mount.barcode.clone();
        let cart = match self.catalogue.cartridge(&barcode).await {
            Ok(Some(c)) => c,
            Ok(None) => {
                return (
                    Some(held),
                    Err(HeldWriteError::Failed(SessionError::Other(format!(
                        "cartridge {barcode} is not in the catalogue"
                    )))),
                );
            }
            Err(e) => return (Some(held), Err(HeldWriteError::Failed(e.into()))),
        };
        let cart = match self.ensure_recovered(&held, &cart).await {
            Ok(c) => c,
            Err(e) => {
                if matches!(e, SessionError::Device(_)) {
                    self.eject(held).await;
                    return (None, Err(e.into()));
                }
                // Recovery took it out of writing (broken, or another catalogue's data past
                // its end): the batch goes to another cartridge without counting an attempt.
                if let SessionError::Cartridge { reason, .. } = e {
                    return (Some(held), Err(HeldWriteError::Refused { items, reason }));
                }
                return (Some(held), Err(e.into()));
            }
        };
        match self.settle_unverified(&held, &cart, cancel).await {
            Ok(None) => {}
            // It does not read back what it holds: it takes no more, and the batch goes to
            // another cartridge.
            Ok(Some(reason)) => {
                return (Some(held), Err(HeldWriteError::Refused { items, reason }));
            }
            Err(e @ SessionError::Device(_)) => {
                self.eject(held).await;
                return (None, Err(e.into()));
            }
            Err(SessionError::Catalogue(crate::catalogue::CatalogueError::Fenced {
                resource,
                epoch,
                reason,
            })) => {
                let e = SessionError::Fenced(format!("{resource} (epoch {epoch}): {reason}"));
                return (Some(held), Err(e.into()));
            }
            // Nothing is lost by leaving them for later: the write goes on.
            Err(e) => {
                warn!(barcode = %cart.barcode, error = %e, "cannot settle the containers an interrupted read-back left; they stay durable and the write goes on");
            }
        }
        // Objects whose copy in this pool already counts were written by an earlier attempt
        // that could not acknowledge them (its worker frozen, killed or fenced after the copy
        // became live, or its read-back settled just above): written, not written twice.
        let given: Vec<String> = items.iter().map(|it| it.key.clone()).collect();
        let (already, items) = match self.already_copied(&cart, items).await {
            Ok(split) => split,
            Err(e) => return (Some(held), Err(HeldWriteError::Failed(e))),
        };
        if items.is_empty() {
            return (
                Some(held),
                Ok(crate::session::write::WriteOutcome::nothing_to_write(
                    already,
                )),
            );
        }
        match check_epoch(&held.drive, &cart.barcode, cart.label_epoch).await {
            Ok(()) => {}
            // The drive could not say (a reset, a unit attention, a hardware error): that is
            // the drive's moment, not the cartridge's epoch. Ejected, and the attempt is tried
            // again. An attribute the cartridge does not have (ILLEGAL REQUEST) still disables
            // it: its label was never finished.
            Err(SessionError::Device(e)) if e.is_drive_fault() => {
                let e = SessionError::Device(e);
                self.eject(held).await;
                return (None, Err(e.into()));
            }
            Err(e) => {
                warn!(barcode = %cart.barcode, error = %e, "cartridge disabled");
                if let Err(e) = self
                    .catalogue
                    .set_cartridge_state(&cart.barcode, CartridgeState::Disabled)
                    .await
                {
                    return (Some(held), Err(HeldWriteError::Failed(e.into())));
                }
                return (
                    Some(held),
                    Err(HeldWriteError::Refused {
                        items,
                        reason: e.to_string(),
                    }),
                );
            }
        }
        // Back from a vault and its label not read since: read it before the first write (the
        // import's label-check job may not have run yet). A label that is not the one the
        // catalogue recorded: the cartridge is broken with what differs, the items go
        // elsewhere.
        if cart.label_unchecked_unix != 0 {
            use crate::session::label_check::{LabelCheck, check_label};
            match check_label(&self.catalogue, &held.drive, &cart.barcode).await {
                Ok(LabelCheck::Matches { .. }) => {
                    if let Err(e) = self.catalogue.set_label_checked(&cart.barcode).await {
                        return (Some(held), Err(HeldWriteError::Failed(e.into())));
                    }
                    info!(barcode = %cart.barcode, "label checked before the first write since the vault");
                }
                Ok(LabelCheck::Differs { reason } | LabelCheck::Unknown { reason }) => {
                    let why = format!("label check: {reason}");
                    warn!(barcode = %cart.barcode, reason = %why, "cartridge broken; the write goes elsewhere");
                    if let Err(e) = self
                        .catalogue
                        .set_cartridge_state_noted(
                            &cart.barcode,
                            CartridgeState::Broken,
                            &why,
                            crate::catalogue::REEL,
                        )
                        .await
                    {
                        return (Some(held), Err(HeldWriteError::Failed(e.into())));
                    }
                    return (
                        Some(held),
                        Err(HeldWriteError::Refused { items, reason: why }),
                    );
                }
                // The drive's moment, not the cartridge's label: ejected, tried again.
                Err(SessionError::Device(e)) if e.is_drive_fault() => {
                    let e = SessionError::Device(e);
                    self.eject(held).await;
                    return (None, Err(e.into()));
                }
                Err(e) => return (Some(held), Err(HeldWriteError::Failed(e))),
            }
        }
        // The capacity the drive reports for this medium replaces the inventory's figure.
        let cart = match crate::session::space::record_capacity(
            &self.catalogue,
            &held.drive,
            &cart.barcode,
        )
        .await
        {
            Ok(capacity_bytes) => Cartridge {
                capacity_bytes,
                ..cart
            },
            Err(e) => return (Some(held), Err(HeldWriteError::Failed(e.into()))),
        };
        // The session reports progress by its own positions; the caller counts by its list.
        let positions = Positions::default();
        positions.record(&given, &items);
        let ctx = WriteContext {
            // Its closes and durable/verified transitions hold only under the lease.
            catalogue: self.catalogue.fenced_by(held.fence.writer_lease()),
            drive: held.drive.clone(),
            config: self.options.session.clone(),
            fence: held.fence.clone(),
            cancel: cancel.clone(),
            progress: positions.translate(progress),
        };
        // What joins the session is filtered as its first items were.
        let aside = Arc::new(std::sync::Mutex::new(SetAside::default()));
        let refill = match (refill, cart.pool.clone()) {
            (Some(r), Some(pool)) => Some(Box::new(SkipCopied::new(
                r,
                self.catalogue.clone(),
                pool,
                self.verified_only(),
                aside.clone(),
                positions.clone(),
            )) as Box<dyn Refill>),
            (r, _) => r,
        };
        let out = match write_session(&ctx, &cart, items, refill).await {
            Ok(mut o) => {
                let aside = std::mem::take(&mut *aside.lock().unwrap_or_else(|e| e.into_inner()));
                o.written.extend(already);
                o.written.extend(aside.already);
                o.remaining.extend(aside.unchecked);
                o
            }
            Err(e) => {
                if matches!(e, SessionError::Device(_)) {
                    self.eject(held).await;
                    return (None, Err(e.into()));
                }
                return (Some(held), Err(e.into()));
            }
        };
        let full = out.cartridge_full || out.stopped_by.as_ref().is_some_and(cartridge_fault);
        if let Some(e) = out.stopped_by.as_ref().filter(|e| cartridge_fault(e)) {
            // What is durable on it stays readable; nothing more is written to it.
            warn!(barcode = %cart.barcode, error = %e, "write failed on this cartridge; it takes no more writes (marked full: consider repacking it) and the rest goes elsewhere");
        }
        if full
            && let Err(e) = self
                .catalogue
                .set_cartridge_state(&cart.barcode, CartridgeState::Full)
                .await
        {
            return (Some(held), Err(HeldWriteError::Failed(e.into())));
        }
        let back = if matches!(out.stopped_by, Some(SessionError::Device(_)))
            && !out.stopped_by.as_ref().is_some_and(cartridge_fault)
        {
            self.eject(held).await;
            None
        } else {
            Some(held)
        };
        (back, Ok(out))
    }

    /// Bytes `item` needs on a cartridge ([`crate::session::space::room_needed`] with this
    /// service's record size and early-warning margin): what a write whose first object it is
    /// asks of the cartridge chosen for it, the figure the write session checks it against.
    pub fn room_needed(&self, item: &ArchiveItem) -> u64 {
        crate::session::space::room_needed(
            item.size,
            &item.key,
            self.options.session.record_size,
            self.options.session.early_warning_margin_bytes,
        )
    }

    /// Hold drive `index` with `barcode` mounted in it (waits while the drive is busy). Fails
    /// when the cartridge sits in another of this host's drives, and with
    /// [`SessionError::HeldElsewhere`] (before touching drive `index`) while another host
    /// sharing the library has it loaded.
    pub async fn acquire_on(&self, index: u32, barcode: &str) -> Result<HeldDrive, SessionError> {
        let d = self
            .drives
            .iter()
            .find(|d| d.drive.index() == index)
            .ok_or_else(|| SessionError::Config(format!("this host does not use drive {index}")))?;
        if let Some((other, _)) = self
            .mounted_map()
            .into_iter()
            .find(|(i, b)| *i != index && b == barcode)
        {
            return Err(SessionError::Other(format!(
                "cartridge {barcode} is in drive {other}; it is used there"
            )));
        }
        if self.mounted_map().get(&index).is_none_or(|b| b != barcode)
            && let Some(drive) = self.drive_elsewhere(barcode).await?
        {
            return Err(SessionError::HeldElsewhere {
                barcode: barcode.to_string(),
                drive,
            });
        }
        let g = d.state.clone().lock_owned().await;
        self.finish_acquire(d, g, barcode)
            .await
            .map_err(|e| self.stuck_in_own_drive(e))
    }

    /// A cartridge the changer shows loaded in a drive of this host that this host does not
    /// count as mounted is stuck in a drive that failed with it, not "held by another host":
    /// say so, and what recovers it.
    fn stuck_in_own_drive(&self, e: SessionError) -> SessionError {
        match e {
            SessionError::HeldElsewhere { barcode, drive }
                if self.drives.iter().any(|d| d.drive.index() == drive) =>
            {
                SessionError::Cartridge {
                    barcode,
                    reason: format!(
                        "is loaded in drive {drive} of this host, which failed with it; take that \
                         drive down (`reel drive down`) and recover the cartridge with `reel drive \
                         reset`"
                    ),
                }
            }
            e => e,
        }
    }

    /// Hold drive `index` with a writable cartridge of `pool` mounted that has room for
    /// `needed` bytes ([`TapeService::room_needed`] of the write's first object; 0 for any):
    /// the one already in this drive if it is such a cartridge (no remount), else a labelled
    /// one with room, else a new one labelled now on this drive. Cartridges mounted in this
    /// host's other drives, those loaded in other hosts' drives, and those in `exclude` are
    /// left alone.
    pub async fn writable_on(
        &self,
        index: u32,
        pool: &str,
        exclude: &[String],
        needed: u64,
    ) -> Result<HeldDrive, SessionError> {
        let _pick = self.allocation.lock().await;
        let mut exclude: Vec<String> = exclude.to_vec();
        exclude.extend(
            self.mounted_map()
                .into_iter()
                .filter(|(i, _)| *i != index)
                .map(|(_, b)| b),
        );
        exclude.extend(self.held_elsewhere().await?.into_iter().map(|(b, _)| b));
        self.catalogue.ensure_pool(pool).await?;
        if let Some(cur) = self.mounted_map().get(&index).cloned()
            && !exclude.contains(&cur)
            && let Some(c) = self.catalogue.cartridge(&cur).await?
            && c.state == CartridgeState::Active
            && c.pool.as_deref() == Some(pool)
            && c.cartridge_uuid.is_some()
            && !c.worm
            && c.has_room(needed)
        {
            match self.acquire_on(index, &cur).await {
                Ok(h) => return Ok(h),
                Err(e) => {
                    if e.is_drive_failure() {
                        return Err(e);
                    }
                    warn!(barcode = %cur, error = %e, "mounted cartridge not available for writing");
                    exclude.push(cur);
                }
            }
        }
        for _ in 0..64 {
            if let Some(c) = self
                .catalogue
                .writable_cartridge(pool, &exclude, false, needed)
                .await?
            {
                match self.acquire_on(index, &c.barcode).await {
                    Ok(h) => return Ok(h),
                    Err(e) => {
                        if e.is_drive_failure() {
                            return Err(e);
                        }
                        warn!(barcode = %c.barcode, error = %e, "writable cartridge not available");
                        exclude.push(c.barcode);
                        continue;
                    }
                }
            }
            if !self.options.auto_label {
                break;
            }
            let news: Vec<Cartridge> = self
                .catalogue
                .cartridges()
                .await?
                .into_iter()
                .filter(|c| {
                    c.state == CartridgeState::New
                        && !c.worm
                        && !exclude.contains(&c.barcode)
                        && !self.is_cleaning_barcode(&c.barcode)
                })
                .collect();
            let Some(c) = news.iter().find(|c| c.calibrated).or_else(|| news.first()) else {
                break;
            };
            let held = match self.acquire_on(index, &c.barcode).await {
                Ok(h) => h,
                Err(e) => {
                    if e.is_drive_failure() {
                        return Err(e);
                    }
                    warn!(barcode = %c.barcode, error = %e, "new cartridge not available");
                    exclude.push(c.barcode.clone());
                    continue;
                }
            };
            match label_cartridge(&self.catalogue, &held.drive, &c.barcode, pool).await? {
                IntakeOutcome::Labelled { .. } => return Ok(held),
                other => {
                    info!(barcode = %c.barcode, outcome = ?other, "not labelled into {pool}");
                    exclude.push(c.barcode.clone());
                }
            }
        }
        Err(SessionError::Other(format!(
            "pool {pool} has no writable cartridge; add cartridges to the library and run `reel intake --pool {pool}`"
        )))
    }

    /// Unload the held drive and put its cartridge back.
    pub async fn unmount_held(&self, mut held: HeldDrive) -> Result<(), SessionError> {
        held.guard.mounted = None;
        self.set_mounted(held.drive.index(), None);
        mount::unmount(&self.library, &held.drive, Some(held.mount.source_slot))
            .await
            .map(|_| ())
    }

    /// Forget what this service believes drive `index` holds (after it was emptied from
    /// outside the held-drive path).
    pub async fn reset_mounts_of(&self, index: u32) {
        if let Some(d) = self.drives.iter().find(|d| d.drive.index() == index) {
            d.state.lock().await.mounted = None;
            self.set_mounted(index, None);
        }
    }

    /// Name the library as the host names its drives (`LIBRARY-INDEX`), so the health
    /// readings of its drives say which library they are of.
    pub fn name_library(&self, name: &str) {
        *self
            .health_library
            .write()
            .unwrap_or_else(|p| p.into_inner()) = name.to_string();
    }

    /// Recover what drive `index` holds through the changer ([`mount::pull`]) and forget it
    /// was mounted: `reel drive reset`, for a drive taken out of service.
    pub async fn reset_drive(&self, index: u32) -> Result<Option<mount::Pulled>, SessionError> {
        let Some(d) = self.drives.iter().find(|d| d.drive.index() == index) else {
            return Err(SessionError::Config(format!(
                "drive {index} is not one of this host's drives"
            )));
        };
        let mut g = d.state.lock().await;
        let pulled = mount::pull(&self.library, &d.drive).await;
        g.mounted = None;
        self.set_mounted(index, None);
        pulled
    }

    /// Put every mounted cartridge back in its slot.
    pub async fn unmount_all(&self) -> Result<(), SessionError> {
        for d in &self.drives {
            let mut g = d.state.lock().await;
            if let Some(m) = g.mounted.take() {
                self.set_mounted(d.drive.index(), None);
                mount::unmount(&self.library, &d.drive, Some(m.source_slot)).await?;
            } else if mount::mounted_barcode(&self.library, &d.drive)
                .await?
                .is_some()
            {
                mount::unmount(&self.library, &d.drive, None).await?;
            }
        }
        Ok(())
    }

    /// The library's new cartridges (inventory synced first) that intake may label: not WORM,
    /// not known to reel.
    pub async fn new_cartridges(&self) -> Result<Vec<String>, SessionError> {
        Ok(self
            .sync_inventory()
            .await?
            .into_iter()
            .filter(|c| {
                c.state == CartridgeState::New && !c.worm && !self.is_cleaning_barcode(&c.barcode)
            })
            .map(|c| c.barcode)
            .collect())
    }

    /// Whether the full element `e` holds a cleaning cartridge, by the changer's word or the
    /// configured prefix ([`crate::session::clean::is_cleaning`]).
    pub fn is_cleaning(&self, e: &reel_plugin_abi::sdk::Element) -> bool {
        crate::session::clean::is_cleaning(e, &self.options.cleaning_prefix)
    }

    /// Whether `barcode` is a cleaning cartridge's by the configured prefix (one catalogued
    /// as data before the prefix was known is never labelled).
    pub fn is_cleaning_barcode(&self, barcode: &str) -> bool {
        crate::session::clean::has_cleaning_prefix(barcode, &self.options.cleaning_prefix)
    }

    /// Whether drive `index` asked for cleaning at an unmount and has not been cleaned since.
    pub fn wants_cleaning(&self, index: u32) -> bool {
        self.wants_cleaning
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .contains(&index)
    }

    /// Clean drive `index` with a cleaning cartridge of the library (`reel drive clean`, or a
    /// drive that asked for it): what it holds goes back to its slot first. Records the use, or
    /// the cartridge's expiry, and forgets the drive's request either way (it asks again at
    /// its next unmount if it still needs it, so a library without a usable cleaning
    /// cartridge costs an inventory per mount, not a loop).
    pub async fn clean_drive(
        &self,
        index: u32,
    ) -> Result<crate::session::clean::Cleaned, SessionError> {
        use crate::catalogue::CleaningOutcome;
        use crate::session::clean::{Cleaned, clean};
        let Some(d) = self.drives.iter().find(|d| d.drive.index() == index) else {
            return Err(SessionError::Config(format!(
                "drive {index} is not one of this host's drives"
            )));
        };
        let mut g = d.state.lock().await;
        self.wants_cleaning
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .remove(&index);
        if let Some(m) = g.mounted.take() {
            self.set_mounted(index, None);
            mount::unmount(&self.library, &d.drive, Some(m.source_slot)).await?;
        } else if mount::mounted_barcode(&self.library, &d.drive)
            .await?
            .is_some()
        {
            mount::unmount(&self.library, &d.drive, None).await?;
        }
        let expired: HashSet<String> = self
            .catalogue
            .cleaning_cartridges()
            .await?
            .into_iter()
            .filter(|c| c.expired_unix > 0)
            .map(|c| c.barcode)
            .collect();
        let out = clean(
            &self.library,
            &d.drive,
            &self.options.cleaning_prefix,
            |b| !expired.contains(b),
        )
        .await?;
        let library = self
            .health_library
            .read()
            .unwrap_or_else(|p| p.into_inner())
            .clone();
        match &out {
            Cleaned::Done { barcode, .. } => {
                self.catalogue
                    .record_cleaning(&library, index, barcode, CleaningOutcome::Cleaned)
                    .await?
            }
            Cleaned::Expired { barcode, .. } => {
                self.catalogue
                    .record_cleaning(&library, index, barcode, CleaningOutcome::Expired)
                    .await?
            }
            Cleaned::NoCartridge => {}
        }
        Ok(out)
    }

    /// Calibrate and label the cartridge mounted in `held` into `pool` (created if missing).
    pub async fn label_held(
        &self,
        held: &HeldDrive,
        pool: &str,
    ) -> Result<IntakeOutcome, SessionError> {
        self.catalogue.ensure_pool(pool).await?;
        label_cartridge(&self.catalogue, &held.drive, &held.mount.barcode, pool).await
    }

    /// Reclaim the cartridge in `held` ([`crate::session::intake::relabel_for_reclaim`]).
    pub async fn reclaim_held(
        &self,
        held: &HeldDrive,
    ) -> Result<crate::session::intake::ReclaimOutcome, SessionError> {
        crate::session::intake::relabel_for_reclaim(
            &self.catalogue,
            &held.drive,
            &held.mount.barcode,
        )
        .await
    }

    /// Read the label of the cartridge in `held` and compare it with the catalogue
    /// ([`crate::session::label_check`]); changes nothing.
    pub async fn check_label_held(
        &self,
        held: &HeldDrive,
    ) -> Result<crate::session::label_check::LabelCheck, SessionError> {
        crate::session::label_check::check_label(&self.catalogue, &held.drive, &held.mount.barcode)
            .await
    }

    /// Keep `spares` calibrated new cartridges ready: when fewer are ready, calibrate one (its
    /// first load) on an idle drive. Only with two or more drives in service, so a write never
    /// waits behind a two-hour calibration; and only on a drive nobody holds right now. Returns
    /// the barcode calibrated, if any.
    pub async fn calibrate_one_spare(&self, spares: usize) -> Result<Option<String>, SessionError> {
        if self.drives.len() < 2 || spares == 0 {
            return Ok(None);
        }
        let cartridges = self.catalogue.cartridges().await?;
        let new: Vec<&Cartridge> = cartridges
            .iter()
            .filter(|c| c.state == CartridgeState::New && !c.worm)
            .collect();
        if new.iter().filter(|c| c.calibrated).count() >= spares {
            return Ok(None);
        }
        let Some(target) = new.iter().find(|c| !c.calibrated) else {
            return Ok(None);
        };
        // An idle drive, and at least one other idle drive left for real work.
        let idle: Vec<&DriveSlot> = self
            .drives
            .iter()
            .filter(|d| d.state.try_lock().is_ok())
            .collect();
        if idle.len() < 2 {
            return Ok(None);
        }
        let d = idle[idle.len() - 1];
        let Ok(g) = d.state.clone().try_lock_owned() else {
            return Ok(None);
        };
        let held = self.finish_acquire(d, g, &target.barcode).await?;
        self.catalogue.set_calibrated(&target.barcode).await?;
        info!(barcode = %target.barcode, drive = held.drive.index(), "spare calibrated");
        let source = held.mount.source_slot;
        let mut held = held;
        held.guard.mounted = None;
        self.set_mounted(held.drive.index(), None);
        mount::unmount(&self.library, &held.drive, Some(source)).await?;
        Ok(Some(target.barcode.clone()))
    }

    /// Apply the crash rules to a held cartridge if the catalogue has pending containers on it
    /// or its end of data is not where the catalogue says; returns the fresh catalogue row.
    async fn ensure_recovered(
        &self,
        held: &HeldDrive,
        cart: &Cartridge,
    ) -> Result<Cartridge, SessionError> {
        let pending = self
            .catalogue
            .containers_on(&cart.barcode)
            .await?
            .iter()
            .any(|c| c.state == ContainerState::Pending);
        let pos_ok = if pending {
            false
        } else {
            held.drive.space(reel_plugin_abi::REEL_SPACE_EOD, 0).await?;
            held.drive.read_position().await?.block == cart.eod_block
        };
        if !pos_ok {
            let rep = recover_cartridge(&self.catalogue, &held.drive, cart).await?;
            if !rep.lost_durable.is_empty() {
                self.catalogue
                    .set_cartridge_state(&cart.barcode, CartridgeState::Broken)
                    .await?;
                return Err(SessionError::Cartridge {
                    barcode: cart.barcode.clone(),
                    reason: format!(
                        "holds less than the catalogue says (end of data {} < {}); marked broken",
                        rep.tape_eod, rep.catalogue_eod
                    ),
                });
            }
            if let Some(found) = rep.orphan {
                return Err(SessionError::Cartridge {
                    barcode: cart.barcode.clone(),
                    reason: format!(
                        "holds data past the catalogue's end of data that this catalogue did not write ({found}); \
                         nothing was appended and it is marked full: run `reel catalog rebuild {}` to take that data in",
                        cart.barcode
                    ),
                });
            }
        }
        self.catalogue
            .cartridge(&cart.barcode)
            .await?
            .ok_or_else(|| {
                SessionError::Other(format!(
                    "cartridge {} vanished from the catalogue",
                    cart.barcode
                ))
            })
    }

    /// Settle what a lost read-back left. Under FULL verify a session's durable containers
    /// exist only between its barrier and its read-back, and the held cartridge is in this
    /// host's drive, so durable containers after the cartridge's last verified one belong to
    /// no session: its worker was killed or fenced during the read-back, the database went
    /// away at the verified commit, or a drive fault ended the session before it. They are
    /// settled before the cartridge takes more: one whose every object already has a verified
    /// copy elsewhere in the pool (written again meanwhile) is dead; the others are read back
    /// now and the good ones become verified. A container is never killed for a failed
    /// read-back here: some of them were acknowledged (a drive fault after a barrier still
    /// reports what was durable), so one that does not read back stays durable until its
    /// objects are copied elsewhere or `reel verify` reads it, and the cartridge is marked
    /// full (read only): it takes no more data, and no later write reads the bad container
    /// again and again. Returns why the cartridge was taken out of writing, if it was. Containers
    /// before the last verified one (written before the pool was read back, say) are left to
    /// `reel verify`: settling is bounded by one interrupted session's worth. Fenced by the held
    /// drive's lease, like the session's own transitions.
    async fn settle_unverified(
        &self,
        held: &HeldDrive,
        cart: &Cartridge,
        cancel: &CancelToken,
    ) -> Result<Option<String>, SessionError> {
        if self.options.session.verify != crate::session::VerifyMode::Full {
            return Ok(None);
        }
        let Some(pool) = cart.pool.as_deref() else {
            return Ok(None);
        };
        let catalogue = self.catalogue.fenced_by(held.fence.writer_lease());
        let containers = catalogue.containers_on(&cart.barcode).await?;
        let after = containers
            .iter()
            .filter(|c| c.state == ContainerState::Verified)
            .map(|c| c.file_number)
            .max();
        let mut targets = Vec::new();
        let mut surplus = Vec::new();
        for c in containers {
            let (ContainerState::Durable, Some(last_block), Some(sha256)) =
                (c.state, c.last_block, c.sha256)
            else {
                continue;
            };
            if after.is_some_and(|f| c.file_number < f) {
                continue;
            }
            let objects = catalogue.container_objects(c.id).await?;
            if all_copied_elsewhere(&catalogue, pool, &objects).await? {
                surplus.push(c.id);
            } else {
                targets.push(VerifyTarget {
                    id: c.id,
                    first_block: c.first_block,
                    last_block,
                    sha256,
                    objects: objects.len(),
                });
            }
        }
        if !surplus.is_empty() {
            warn!(barcode = %cart.barcode, containers = ?surplus, "containers left durable and never verified, whose objects were written and verified again elsewhere: dead");
            catalogue
                .set_container_state(&surplus, ContainerState::Dead)
                .await?;
        }
        if targets.is_empty() {
            return Ok(None);
        }
        warn!(barcode = %cart.barcode, containers = targets.len(), "containers left durable and never verified by an interrupted read-back: reading them back now");
        let rep = read_back(
            &held.drive,
            &cart.barcode,
            &targets,
            DriveFault::Record,
            cancel,
        )
        .await?;
        let ok: Vec<i64> = rep
            .results
            .iter()
            .filter(|(_, r)| r.is_ok())
            .map(|(id, _)| *id)
            .collect();
        if !ok.is_empty() {
            catalogue
                .set_container_state(&ok, ContainerState::Verified)
                .await?;
        }
        let bad: Vec<i64> = rep
            .results
            .iter()
            .filter(|(_, r)| r.is_err())
            .map(|(id, _)| *id)
            .collect();
        if bad.is_empty() {
            return Ok(None);
        }
        for (id, r) in &rep.results {
            if let Err(reason) = r {
                warn!(barcode = %cart.barcode, container = id, %reason, "a container left unverified does not read back; it stays durable (it may hold acknowledged objects) until they are copied elsewhere or `reel verify` reads it");
            }
        }
        self.catalogue
            .set_cartridge_state(&cart.barcode, CartridgeState::Full)
            .await?;
        Ok(Some(format!(
            "containers {bad:?} left unverified do not read back; the cartridge is marked full (read only): run `reel verify` on it"
        )))
    }

    /// Split `items` into those with a copy in `cart`'s pool that already counts (verified,
    /// or durable when nothing is read back) and those still to write.
    async fn already_copied(
        &self,
        cart: &Cartridge,
        items: Vec<ArchiveItem>,
    ) -> Result<(Vec<ArchiveItem>, Vec<ArchiveItem>), SessionError> {
        let Some(pool) = cart.pool.as_deref() else {
            return Ok((Vec::new(), items));
        };
        split_copied(&self.catalogue, pool, self.verified_only(), items).await
    }

    /// Whether only a verified copy counts (FULL verify); under sampled verify an acknowledged
    /// copy may stay durable for good, and it counts.
    fn verified_only(&self) -> bool {
        self.options.session.verify == crate::session::VerifyMode::Full
    }

    /// Recover every cartridge with pending containers (start-up after a crash).
    pub async fn recover_pending(&self) -> Result<Vec<(String, RecoveryReport)>, SessionError> {
        let pending = self.catalogue.pending_containers().await?;
        let barcodes: std::collections::BTreeSet<String> =
            pending.into_iter().map(|c| c.barcode).collect();
        let mut out = Vec::new();
        for b in barcodes {
            let Some(cart) = self.catalogue.cartridge(&b).await? else {
                continue;
            };
            if let Some(drive) = self.drive_elsewhere(&b).await? {
                // The host using it recovers it (a write mount recovers first), or this host
                // does when it next mounts it.
                info!(barcode = %b, drive, "cartridge with pending containers is loaded in another host's drive; not recovered now");
                continue;
            }
            let held = self.acquire(&b).await?;
            let r = recover_cartridge(&self.catalogue, &held.drive, &cart).await?;
            out.push((b, r));
        }
        Ok(out)
    }

    /// Read back the durable and verified containers of the cartridge mounted in `held` (only
    /// those in `only`, when given), in block order, and mark each verified or dead. A
    /// container in `only` that is neither durable nor verified is not read: the report gives
    /// it an error naming its state.
    pub async fn verify_held(
        &self,
        held: &HeldDrive,
        only: Option<&[i64]>,
        cancel: &CancelToken,
    ) -> Result<crate::session::verify::VerifyReport, SessionError> {
        let barcode = held.mount.barcode.as_str();
        let containers = self.catalogue.containers_on(barcode).await?;
        let mut unreadable: Vec<(i64, Result<(), String>)> = Vec::new();
        if let Some(only) = only {
            for id in only {
                match containers.iter().find(|c| c.id == *id) {
                    None => unreadable.push((
                        *id,
                        Err(format!("container {id} is not on cartridge {barcode}")),
                    )),
                    Some(c)
                        if !matches!(
                            c.state,
                            ContainerState::Durable | ContainerState::Verified
                        ) =>
                    {
                        unreadable.push((
                            *id,
                            Err(format!(
                                "container {id} on {barcode} is {}: only durable or verified containers are read back",
                                c.state.as_str()
                            )),
                        ))
                    }
                    Some(_) => {}
                }
            }
        }
        let mut targets: Vec<VerifyTarget> = containers
            .iter()
            .filter(|c| only.is_none_or(|o| o.contains(&c.id)))
            .filter(|c| matches!(c.state, ContainerState::Durable | ContainerState::Verified))
            .filter_map(|c| {
                Some(VerifyTarget {
                    id: c.id,
                    first_block: c.first_block,
                    last_block: c.last_block?,
                    sha256: c.sha256?,
                    objects: 0,
                })
            })
            .collect();
        for t in targets.iter_mut() {
            t.objects = self.catalogue.container_object_count(t.id).await? as usize;
        }
        let mut rep = read_back(&held.drive, barcode, &targets, DriveFault::Stop, cancel).await?;
        let ok: Vec<i64> = rep
            .results
            .iter()
            .filter(|(_, r)| r.is_ok())
            .map(|(i, _)| *i)
            .collect();
        let bad: Vec<i64> = rep
            .results
            .iter()
            .filter(|(_, r)| r.is_err())
            .map(|(i, _)| *i)
            .collect();
        if !ok.is_empty() {
            self.catalogue
                .set_container_state(&ok, ContainerState::Verified)
                .await?;
            self.catalogue.note_read(barcode).await?;
        }
        if !bad.is_empty() {
            warn!(barcode, bad = ?bad, "containers failed verification; their objects are read from other copies");
            self.catalogue
                .set_container_state(&bad, ContainerState::Dead)
                .await?;
        }
        rep.results.extend(unreadable);
        Ok(rep)
    }

    /// The cartridges a rebuild of `barcodes` reads, each with whether the library reports it
    /// WORM: the named ones, or (when empty) every cartridge with a barcode in a slot or a
    /// drive of the library.
    pub async fn rebuild_targets(
        &self,
        barcodes: &[String],
    ) -> Result<Vec<(String, bool)>, SessionError> {
        let inventory: Vec<(String, bool)> = self
            .library
            .inventory()
            .await?
            .into_iter()
            .filter(|e| {
                e.flags & REEL_ELEMENT_FULL != 0
                    && !e.barcode.is_empty()
                    && matches!(e.kind, REEL_ELEMENT_SLOT | REEL_ELEMENT_DRIVE)
            })
            .map(|e| (e.barcode, e.flags & REEL_ELEMENT_WORM != 0))
            .collect();
        if barcodes.is_empty() {
            return Ok(inventory);
        }
        // Each named cartridge once, in the order named; one the library does not hold is
        // refused, not mounted in vain.
        let mut out: Vec<(String, bool)> = Vec::with_capacity(barcodes.len());
        for b in barcodes {
            if out.iter().any(|(o, _)| o == b) {
                continue;
            }
            let Some(found) = inventory.iter().find(|(i, _)| i == b) else {
                return Err(SessionError::Cartridge {
                    barcode: b.clone(),
                    reason: "is not in the library; `reel library inventory` lists the cartridges it holds".into(),
                });
            };
            out.push(found.clone());
        }
        Ok(out)
    }

    /// Rebuild the catalogue entries of the cartridge mounted in `held` from the tape alone.
    /// A blank or foreign cartridge is [`SessionError::Cartridge`]: nothing to rebuild.
    pub async fn rebuild_held(
        &self,
        held: &HeldDrive,
        worm: bool,
        cancel: &CancelToken,
    ) -> Result<RebuildReport, SessionError> {
        rebuild_cartridge(
            &self.catalogue,
            &held.drive,
            &held.mount.barcode,
            self.options.default_capacity_bytes,
            worm,
            &self.options.session,
            cancel,
        )
        .await
    }
}

/// Why [`TapeService::write_held`] wrote nothing.
#[derive(Debug)]
pub enum HeldWriteError {
    /// The cartridge must not be written (another host's label epoch): the items come back.
    Refused {
        /// The items, to write elsewhere.
        items: Vec<ArchiveItem>,
        /// Why.
        reason: String,
    },
    /// Anything else.
    Failed(SessionError),
}

impl From<SessionError> for HeldWriteError {
    fn from(e: SessionError) -> Self {
        HeldWriteError::Failed(e)
    }
}

/// A write error that is the cartridge's, not the drive's: the cartridge takes no more writes
/// and the session continues elsewhere.
pub fn cartridge_fault(e: &SessionError) -> bool {
    matches!(
        e,
        SessionError::Device(DeviceError::Medium { .. })
            | SessionError::Device(DeviceError::DataProtect { .. })
            | SessionError::Device(DeviceError::Worm { .. })
    )
}

/// Default recall options from a session config.
pub fn recall_options(cfg: &SessionConfig, policy: OrderPolicy) -> RecallOptions {
    RecallOptions {
        policy,
        read_through_gap_bytes: cfg.read_through_gap_bytes,
        writer_threads: cfg.writer_threads,
        read_ahead_records: cfg.read_ahead_records,
        fsync: cfg.fsync,
    }
}

/// Whether every one of `objects` (at least one) has a verified copy in `pool` on another
/// container than the one asking.
async fn all_copied_elsewhere(
    catalogue: &Catalogue,
    pool: &str,
    objects: &[(String, u64)],
) -> Result<bool, SessionError> {
    if objects.is_empty() {
        return Ok(false);
    }
    let found = catalogue.copies_in_pool(pool, objects, true).await?;
    Ok(objects.iter().all(|o| found.contains_key(o)))
}
