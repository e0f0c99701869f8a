//! What the library handle and its drive handles share ([`Shared`]): the changer's state and
//! its persistence in `<dir>/library.json`, each drive's modelled state, the drive ownership
//! locks and the changer lock of shared mode, the registry of medium errors, the robot, the
//! event log and the power cut. The library (`library.rs`), the drives (`drive.rs`) and the
//! test controls (`control.rs`) all use it; it uses none of them, so they import no one
//! another through it.
//!
//! Element addresses: picker 1, drive `i` at 256+i, import/export `i` at 768+i, slot `i` at
//! 1024+i. Barcodes are `RL0001L9`, `RL0002L9`, ...; WORM cartridges end in `LZ`.

use std::collections::{BTreeMap, BTreeSet};
use std::fs::File;
use std::io::Write;
use std::path::PathBuf;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, MutexGuard, Weak};

use reel_plugin_abi::sdk::Fault;
use reel_plugin_abi::{asc, sense_key as sk};
use serde::{Deserialize, Serialize};

use crate::cartridge::Cartridge;
use crate::clock::{Pacer, TimeSource};
use crate::config::{ClockMode, SimConfig};
use crate::drive_state::{DriveGuard, DriveState};
use crate::sense;

/// Address of the picker.
pub const PICKER_ADDRESS: u32 = 1;
/// Address of drive 0.
pub const DRIVE_BASE: u32 = 256;
/// Address of import/export element 0.
pub const IE_BASE: u32 = 768;
/// Address of storage slot 0.
pub const SLOT_BASE: u32 = 1024;

/// The append-only log of writes short of EOD and relabels, in shared mode (one JSON object a
/// line), so the whole library's count survives any one process.
pub const EVENTS_FILE: &str = "events.jsonl";

/// The barcode of cartridge `n` (1-based): `RL0001L9` with the default prefix `RL`; WORM
/// cartridges end in `LZ`, the LTO-9 WORM suffix.
pub fn barcode(prefix: &str, n: u32, worm: bool) -> String {
    format!("{prefix}{n:04}{}", if worm { "LZ" } else { "L9" })
}

/// The barcode of cleaning cartridge `n` (1-based): `CLN001L1`.
pub fn cleaning_barcode(n: u32) -> String {
    format!("{CLEANING_PREFIX}{n:03}L1")
}

/// Barcodes of cleaning cartridges start with this (the industry's convention): the
/// simulator's changer reports them as cleaning media, and a drive loaded with one cleans.
pub const CLEANING_PREFIX: &str = "CLN";

/// Whether `barcode` is a cleaning cartridge's.
pub fn is_cleaning(barcode: &str) -> bool {
    barcode.starts_with(CLEANING_PREFIX)
}

/// An element address decoded.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Addr {
    /// Drive index.
    Drive(u32),
    /// Import/export index.
    Ie(u32),
    /// Slot index.
    Slot(u32),
}

/// The changer's state: which barcode each element holds. Drives this handle owns also hold
/// the open cartridge in their [`DriveState`]; `in_drive` mirrors them.
pub struct Changer {
    pub(crate) slots: Vec<Option<String>>,
    pub(crate) ie: Vec<Option<String>>,
    /// Barcode in each drive.
    pub(crate) in_drive: Vec<Option<String>>,
    /// Whether each drive's cartridge is loaded, as its owner last saved it (shared mode).
    pub(crate) loaded: Vec<bool>,
    /// Home slot of every cartridge (the slot it last came from).
    pub(crate) homes: BTreeMap<String, u32>,
    /// WORM flag of every cartridge seen (a fact of the cartridge, never changes).
    pub(crate) worm: BTreeMap<String, bool>,
    /// Robot moves of the whole library, every process (shared mode).
    pub(crate) library_moves: u64,
}

#[derive(Serialize, Deserialize, Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct GeometryFile {
    pub(crate) drives: u32,
    pub(crate) slots: u32,
    pub(crate) ie_slots: u32,
}

#[derive(Serialize, Deserialize, Default)]
pub(crate) struct LibraryFile {
    pub(crate) version: u32,
    /// Barcode → element address (0: outside the library).
    pub(crate) locations: BTreeMap<String, u32>,
    /// Barcode → home slot index.
    pub(crate) homes: BTreeMap<String, u32>,
    /// The element counts the library was created with.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub(crate) geometry: Option<GeometryFile>,
    /// Drives whose cartridge is loaded (shared mode: saved by each drive's owner).
    #[serde(default, skip_serializing_if = "BTreeSet::is_empty")]
    pub(crate) loaded: BTreeSet<u32>,
    /// Robot moves by every process (shared mode).
    #[serde(default)]
    pub(crate) robot_moves: u64,
}

/// Ownership of one drive by this library handle (shared mode): an advisory lock on
/// `<dir>/drive-N.lock`, which holds the owner's pid. Released when the last drive handle
/// opened on it is closed.
pub struct DriveLock {
    _file: File,
}

/// Holds `<dir>/.changer.lock` for one changer operation (shared mode).
pub(crate) struct Flock<'a>(pub(crate) &'a File);

impl Drop for Flock<'_> {
    fn drop(&mut self) {
        if let Err(e) = self.0.unlock() {
            tracing::error!(error = %e, "releasing the changer lock failed");
        }
    }
}

/// The changer, locked for one operation. In shared mode it also holds the changer file lock
/// and was re-read from disk when taken.
pub struct ChangerGuard<'a> {
    // Field order matters: the file lock is released before the in-process mutex, so another
    // thread of this process never believes it holds the file lock while it is being released.
    pub(crate) _flock: Option<Flock<'a>>,
    pub(crate) ch: MutexGuard<'a, Changer>,
}

impl std::ops::Deref for ChangerGuard<'_> {
    type Target = Changer;
    fn deref(&self) -> &Changer {
        &self.ch
    }
}

impl std::ops::DerefMut for ChangerGuard<'_> {
    fn deref_mut(&mut self) -> &mut Changer {
        &mut self.ch
    }
}

/// State shared by the library handle and its drive handles.
pub struct Shared {
    /// The configuration.
    pub cfg: SimConfig,
    pub(crate) changer: Mutex<Changer>,
    pub(crate) drives: Vec<Mutex<DriveState>>,
    /// Shared mode: the drives this handle owns (a live lock).
    pub(crate) owners: Vec<Mutex<Weak<DriveLock>>>,
    pub(crate) medium_errors: Mutex<Vec<(String, u64)>>,
    pub(crate) robot_moves: AtomicU64,
    /// Wall clock (pacing and host-clock arrivals).
    pub time: Arc<dyn TimeSource>,
    /// Advisory lock on `<dir>/.lock`, held while the library is open: exclusive, or shared in
    /// shared mode (so the two modes never mix on one directory).
    pub(crate) _lock: File,
    /// Shared mode: `<dir>/.changer.lock`, locked for each changer operation.
    pub(crate) changer_file: Option<File>,
}

pub(crate) fn io_fault(what: &str) -> impl FnOnce(std::io::Error) -> Fault + '_ {
    move |e| sense::io(what, e)
}

impl Shared {
    /// Lock one drive's state.
    pub fn drive(&self, index: u32) -> Result<DriveGuard<'_>, Fault> {
        let m = self
            .drives
            .get(index as usize)
            .ok_or_else(|| Fault::invalid(format!("no drive {index}")))?;
        Ok(m.lock().unwrap_or_else(|p| p.into_inner()))
    }

    /// Lock the changer for one operation. In shared mode: take the changer file lock, re-read
    /// `library.json`, and bring the drives this handle owns in line with it (a cartridge
    /// another process moved into or out of one of them while it was not loaded).
    pub fn changer(&self) -> Result<ChangerGuard<'_>, Fault> {
        let ch = self.changer.lock().unwrap_or_else(|p| p.into_inner());
        let Some(f) = self.changer_file.as_ref() else {
            return Ok(ChangerGuard { _flock: None, ch });
        };
        f.lock().map_err(io_fault("lock the changer"))?;
        let mut g = ChangerGuard {
            _flock: Some(Flock(f)),
            ch,
        };
        self.refresh(&mut g)?;
        Ok(g)
    }

    /// Shared mode: re-read the layout and reconcile the drives this handle owns.
    fn refresh(&self, ch: &mut Changer) -> Result<(), Fault> {
        let file = read_library_file(&self.cfg)?.ok_or_else(|| {
            Fault::invalid(format!(
                "{} is missing: the shared library's layout was removed while open; reopen the library",
                self.cfg.dir.join("library.json").display()
            ))
        })?;
        let placed = place(&self.cfg, &file, &mut Vec::new());
        ch.slots = placed.slots;
        ch.ie = placed.ie;
        ch.in_drive = placed.drives;
        ch.loaded = (0..self.cfg.drives)
            .map(|i| file.loaded.contains(&i))
            .collect();
        ch.homes = file.homes;
        ch.library_moves = file.robot_moves;
        let all: Vec<String> = ch
            .slots
            .iter()
            .chain(ch.ie.iter())
            .chain(ch.in_drive.iter())
            .flatten()
            .cloned()
            .collect();
        for bc in all {
            if let std::collections::btree_map::Entry::Vacant(v) = ch.worm.entry(bc) {
                let m = Cartridge::read_meta(&self.cfg.dir, v.key())
                    .map_err(io_fault("read cartridge meta"))?;
                v.insert(m.worm);
            }
        }
        for i in 0..self.drive_count() {
            if !self.owns(i) {
                continue;
            }
            let mut st = self.drive(i)?;
            let disk = ch.in_drive[i as usize].clone();
            let mem = st.cart.as_ref().map(|c| c.barcode().to_string());
            if mem != disk {
                if st.loaded {
                    // Nobody may move a loaded cartridge: keep what the drive holds.
                    tracing::warn!(
                        drive = i,
                        ?disk,
                        ?mem,
                        "library.json disagrees with a loaded drive this process owns; keeping the drive's cartridge"
                    );
                    ch.in_drive[i as usize] = mem;
                } else {
                    drop(st.take_cartridge()?);
                    if let Some(bc) = disk {
                        st.cart = Some(
                            Cartridge::open(&self.cfg.dir, &bc)
                                .map_err(io_fault("open cartridge"))?,
                        );
                    }
                }
            }
            ch.loaded[i as usize] = st.loaded;
        }
        Ok(())
    }

    /// A pacer for a new handle, per the clock mode.
    pub fn pacer(&self) -> Pacer {
        match self.cfg.clock {
            ClockMode::Instant => Pacer::instant(),
            ClockMode::Scaled => Pacer::scaled(self.cfg.time_scale, self.time.clone()),
        }
    }

    /// Consume an armed medium error at (barcode, block), if any.
    pub fn take_medium_error(&self, barcode: &str, block: u64) -> bool {
        let mut m = self.medium_errors.lock().unwrap_or_else(|p| p.into_inner());
        match m.iter().position(|(b, k)| b == barcode && *k == block) {
            Some(i) => {
                m.remove(i);
                true
            }
            None => false,
        }
    }

    /// Shared mode: append an event that no drive ran (a stored block damaged through the
    /// control channel, `fired_corrupt_stored`) to the library's log.
    pub fn log_event(&self, event: &str, barcode: &str, block: u64) {
        if !self.cfg.shared {
            return;
        }
        let line = serde_json::json!({
            "event": event,
            "pid": std::process::id(),
            "barcode": barcode,
            "block": block,
            "t_ms": crate::clock::unix_ms(),
        });
        let r = std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(self.cfg.dir.join(EVENTS_FILE))
            .and_then(|mut f| std::io::Write::write_all(&mut f, format!("{line}\n").as_bytes()));
        if let Err(e) = r {
            tracing::error!(error = %e, "cannot append to the library's event log");
        }
    }

    /// Arm a medium error.
    pub fn add_medium_error(&self, barcode: &str, block: u64) {
        self.medium_errors
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .push((barcode.to_string(), block));
    }

    /// Number of drives.
    pub fn drive_count(&self) -> u32 {
        self.drives.len() as u32
    }

    /// Robot moves so far (this process).
    pub fn robot_moves(&self) -> u64 {
        self.robot_moves.load(Ordering::Relaxed)
    }

    /// Whether this handle owns drive `index`: always outside shared mode; in shared mode,
    /// while a drive handle opened on it is open.
    pub fn owns(&self, index: u32) -> bool {
        if !self.cfg.shared {
            return true;
        }
        self.owners
            .get(index as usize)
            .is_some_and(|w| w.lock().unwrap_or_else(|p| p.into_inner()).strong_count() > 0)
    }

    fn drive_lock_path(&self, index: u32) -> PathBuf {
        self.cfg.dir.join(format!("drive-{index}.lock"))
    }

    /// Open (creating it) drive `index`'s lock file, unlocked; with its path.
    fn open_drive_lock(&self, index: u32) -> Result<(std::fs::File, PathBuf), Fault> {
        let path = self.drive_lock_path(index);
        let f = std::fs::OpenOptions::new()
            .read(true)
            .write(true)
            .create(true)
            .truncate(false)
            .open(&path)
            .map_err(io_fault("drive lock file"))?;
        Ok((f, path))
    }

    /// Shared mode, a drive this handle does not own: the pid of the live process that owns
    /// it, if any. Called under the changer lock (as drives are claimed), so the probe never
    /// races a claim.
    pub fn foreign_owner(&self, index: u32) -> Result<Option<u32>, Fault> {
        if !self.cfg.shared || self.owns(index) {
            return Ok(None);
        }
        let (f, path) = self.open_drive_lock(index)?;
        match f.try_lock() {
            Ok(()) => {
                f.unlock().map_err(io_fault("drive lock file"))?;
                Ok(None)
            }
            Err(std::fs::TryLockError::WouldBlock) => Ok(Some(
                std::fs::read_to_string(&path)
                    .ok()
                    .and_then(|s| s.trim().parse().ok())
                    .unwrap_or(0),
            )),
            Err(std::fs::TryLockError::Error(e)) => Err(sense::io("probe drive lock", e)),
        }
    }

    /// Refuse a per-drive request for a drive another live process owns (shared mode): its
    /// state lives in that process.
    pub fn check_not_foreign(&self, index: u32, what: &str) -> Result<(), Fault> {
        if !self.cfg.shared || self.owns(index) {
            return Ok(());
        }
        let _g = self.changer()?;
        match self.foreign_owner(index)? {
            Some(pid) => Err(Fault::invalid(format!(
                "{what}: drive {index} is owned by process {pid} (sim.shared); send the request \
                 through that process's library handle"
            ))),
            None => Ok(()),
        }
    }

    /// Shared mode: take drive `index` for this handle (see [`DriveLock`]). Its state starts
    /// afresh from the layout on disk: the cartridge it holds, not loaded.
    pub fn claim_drive(&self, index: u32) -> Result<Option<Arc<DriveLock>>, Fault> {
        if !self.cfg.shared {
            return Ok(None);
        }
        let mut ch = self.changer()?;
        let mut w = self.owners[index as usize]
            .lock()
            .unwrap_or_else(|p| p.into_inner());
        if let Some(l) = w.upgrade() {
            return Ok(Some(l));
        }
        let (mut f, path) = self.open_drive_lock(index)?;
        match f.try_lock() {
            Ok(()) => {}
            Err(std::fs::TryLockError::WouldBlock) => {
                let pid = std::fs::read_to_string(&path).unwrap_or_default();
                return Err(Fault::invalid(format!(
                    "drive {index} of the simulated library in {} is in use by process {} \
                     (sim.shared: each drive belongs to one process); give this host other \
                     drives ([library] drives) or stop that process",
                    self.cfg.dir.display(),
                    pid.trim()
                )));
            }
            Err(std::fs::TryLockError::Error(e)) => return Err(sense::io("lock drive", e)),
        }
        f.set_len(0)
            .and_then(|()| f.write_all(std::process::id().to_string().as_bytes()))
            .map_err(io_fault("drive lock file"))?;
        let lock = Arc::new(DriveLock { _file: f });
        *w = Arc::downgrade(&lock);
        drop(w);
        {
            let mut st = self.drive(index)?;
            drop(st.take_cartridge()?);
            st.reset_for_owner(&self.cfg);
            st.events = Some(self.cfg.dir.join(EVENTS_FILE));
            if let Some(bc) = ch.in_drive[index as usize].clone() {
                st.cart =
                    Some(Cartridge::open(&self.cfg.dir, &bc).map_err(io_fault("open cartridge"))?);
            }
        }
        ch.loaded[index as usize] = false;
        self.save_layout(&ch)?;
        tracing::info!(
            drive = index,
            pid = std::process::id(),
            "drive owned (sim.shared)"
        );
        Ok(Some(lock))
    }

    /// Record whether drive `index` is loaded (shared mode: others read it).
    pub fn set_loaded(&self, ch: &mut Changer, index: u32, loaded: bool) -> Result<(), Fault> {
        if !self.cfg.shared || ch.loaded[index as usize] == loaded {
            return Ok(());
        }
        ch.loaded[index as usize] = loaded;
        self.save_layout(ch)
    }

    /// Run `f` on the cartridge with `barcode`, wherever it is (in shared mode, not in a drive
    /// another live process owns).
    pub fn with_cartridge<R>(
        &self,
        barcode: &str,
        f: impl FnOnce(&mut Cartridge, Option<&mut DriveState>) -> Result<R, Fault>,
    ) -> Result<R, Fault> {
        let ch = self.changer()?;
        let in_changer = ch
            .slots
            .iter()
            .chain(ch.ie.iter())
            .flatten()
            .any(|b| b == barcode);
        let drive = ch
            .in_drive
            .iter()
            .position(|b| b.as_deref() == Some(barcode))
            .map(|i| i as u32);
        if !in_changer && drive.is_none() {
            return Err(Fault::invalid(format!(
                "no cartridge {barcode} in the library; see the inventory for barcodes"
            )));
        }
        if let Some(i) = drive.filter(|&i| self.owns(i)) {
            let mut st = self.drive(i)?;
            let st = &mut *st;
            let Some(mut c) = st.cart.take() else {
                return Err(Fault::internal(format!(
                    "drive {i} should hold {barcode} but is empty"
                )));
            };
            let r = f(&mut c, Some(st));
            st.cart = Some(c);
            return r;
        }
        if let Some(i) = drive
            && let Some(pid) = self.foreign_owner(i)?
        {
            return Err(Fault::invalid(format!(
                "cartridge {barcode} is in drive {i}, owned by process {pid} (sim.shared); send \
                 the request through that process's library handle, or wait until it is back in \
                 a slot"
            )));
        }
        // In a slot, a mail slot, or a drive nobody owns: its directory, under the changer lock.
        let mut c = Cartridge::open(&self.cfg.dir, barcode).map_err(io_fault("open cartridge"))?;
        let r = f(&mut c, None);
        drop(c);
        drop(ch);
        r
    }

    pub(crate) fn save_layout(&self, ch: &Changer) -> Result<(), Fault> {
        let mut f = LibraryFile {
            version: 1,
            geometry: Some(GeometryFile {
                drives: self.cfg.drives,
                slots: self.cfg.slots,
                ie_slots: self.cfg.ie_slots,
            }),
            robot_moves: ch.library_moves,
            ..Default::default()
        };
        for (i, b) in ch.slots.iter().enumerate() {
            if let Some(b) = b {
                f.locations.insert(b.clone(), SLOT_BASE + i as u32);
            }
        }
        for (i, b) in ch.ie.iter().enumerate() {
            if let Some(b) = b {
                f.locations.insert(b.clone(), IE_BASE + i as u32);
            }
        }
        for (i, b) in ch.in_drive.iter().enumerate() {
            if let Some(b) = b {
                f.locations.insert(b.clone(), DRIVE_BASE + i as u32);
                if self.cfg.shared && ch.loaded[i] {
                    f.loaded.insert(i as u32);
                }
            }
        }
        f.homes = ch.homes.clone();
        let bytes = serde_json::to_vec_pretty(&f).map_err(|e| Fault::internal(e.to_string()))?;
        let path = self.cfg.dir.join("library.json");
        let tmp = self.cfg.dir.join("library.json.tmp");
        std::fs::write(&tmp, bytes)
            .and_then(|()| std::fs::rename(&tmp, &path))
            .map_err(io_fault("library.json"))
    }

    pub(crate) fn decode(&self, address: u32) -> Result<Addr, Fault> {
        if (DRIVE_BASE..IE_BASE).contains(&address) {
            let i = address - DRIVE_BASE;
            if i < self.cfg.drives {
                return Ok(Addr::Drive(i));
            }
        } else if (IE_BASE..SLOT_BASE).contains(&address) {
            let i = address - IE_BASE;
            if i < self.cfg.ie_slots {
                return Ok(Addr::Ie(i));
            }
        } else if address >= SLOT_BASE {
            let i = address - SLOT_BASE;
            if i < self.cfg.slots {
                return Ok(Addr::Slot(i));
            }
        }
        Err(Fault::check(
            sk::ILLEGAL_REQUEST,
            asc::INVALID_ELEMENT_ADDRESS,
            format!("element address {address} does not exist in this library"),
        ))
    }

    /// Move a cartridge between two elements, charging the robot to the drive it serves.
    pub fn move_medium(&self, source: u32, destination: u32) -> Result<f64, Fault> {
        let (src, dst) = (self.decode(source)?, self.decode(destination)?);
        let robot_s = self.cfg.robot_ms as f64 / 1000.0;
        let mut ch = self.changer()?;
        let held = |ch: &Changer, a: Addr| -> Option<String> {
            match a {
                Addr::Slot(i) => ch.slots[i as usize].clone(),
                Addr::Ie(i) => ch.ie[i as usize].clone(),
                Addr::Drive(i) => ch.in_drive[i as usize].clone(),
            }
        };
        if src == dst {
            return match held(&ch, src) {
                Some(_) => Ok(0.0),
                None => Err(source_empty(source)),
            };
        }
        if held(&ch, dst).is_some() {
            return Err(Fault::check(
                sk::ILLEGAL_REQUEST,
                asc::DESTINATION_FULL,
                format!("destination element {destination} is full"),
            ));
        }
        let Some(bc) = held(&ch, src) else {
            return Err(source_empty(source));
        };
        let owned_drive = |a: Addr| matches!(a, Addr::Drive(i) if self.owns(i));
        if let Addr::Drive(i) = src {
            if owned_drive(src) {
                let st = self.drive(i)?;
                if st.loaded && !st.dead {
                    return Err(Fault::check(
                        sk::ILLEGAL_REQUEST,
                        asc::MEDIUM_REMOVAL_PREVENTED,
                        format!("the cartridge in drive {i} is loaded; UNLOAD it first"),
                    ));
                }
            } else if ch.loaded[i as usize]
                && let Some(pid) = self.foreign_owner(i)?
            {
                return Err(Fault::check(
                    sk::ILLEGAL_REQUEST,
                    asc::MEDIUM_REMOVAL_PREVENTED,
                    format!(
                        "the cartridge in drive {i} ({bc}) is loaded by process {pid}, which owns \
                         that drive; it moves once that process unloads it"
                    ),
                ));
            }
        }
        // Open the cartridge for a drive of ours before anything changes, so a failure leaves
        // the library as it was.
        let mut cart = if owned_drive(dst) && !owned_drive(src) {
            Some(Cartridge::open(&self.cfg.dir, &bc).map_err(io_fault("open cartridge"))?)
        } else {
            None
        };
        match src {
            Addr::Slot(i) => {
                ch.slots[i as usize] = None;
                ch.homes.insert(bc.clone(), i);
            }
            Addr::Ie(i) => ch.ie[i as usize] = None,
            Addr::Drive(i) => {
                if owned_drive(src) {
                    let mut st = self.drive(i)?;
                    let c = st.take_cartridge()?;
                    st.charge_mount(robot_s);
                    if owned_drive(dst) {
                        cart = c;
                    }
                }
                ch.in_drive[i as usize] = None;
                ch.loaded[i as usize] = false;
            }
        }
        match dst {
            Addr::Slot(i) => {
                ch.homes.insert(bc.clone(), i);
                ch.slots[i as usize] = Some(bc);
            }
            Addr::Ie(i) => ch.ie[i as usize] = Some(bc),
            Addr::Drive(i) => {
                ch.in_drive[i as usize] = Some(bc.clone());
                ch.loaded[i as usize] = false;
                if owned_drive(dst) {
                    let mut st = self.drive(i)?;
                    st.cart = Some(cart.ok_or_else(|| {
                        Fault::internal(format!("cartridge {bc} was not opened for drive {i}"))
                    })?);
                    st.loaded = false;
                    st.pos = 0;
                    st.pos_unknown = false;
                    st.charge_mount(robot_s);
                }
                // A drive another process owns: that process picks the cartridge up from
                // library.json at its next command.
            }
        }
        self.robot_moves.fetch_add(1, Ordering::Relaxed);
        ch.library_moves += 1;
        self.save_layout(&ch)?;
        Ok(robot_s)
    }

    /// Pull the cartridge out of a (dead) drive back to its home slot and replace the drive.
    pub fn robot_recover(&self, drive: u32) -> Result<f64, Fault> {
        self.check_not_foreign(drive, "robot_recover")?;
        let robot_s = self.cfg.robot_ms as f64 / 1000.0;
        let mut ch = self.changer()?;
        let mut st = self.drive(drive)?;
        let mut t = 0.0;
        if let Some(cart) = st.take_cartridge()? {
            let bc = cart.barcode().to_string();
            drop(cart);
            let home = ch
                .homes
                .get(&bc)
                .copied()
                .filter(|&h| ch.slots[h as usize].is_none());
            let slot = home
                .or_else(|| ch.slots.iter().position(|s| s.is_none()).map(|i| i as u32))
                .ok_or_else(|| {
                    Fault::check(
                        sk::ILLEGAL_REQUEST,
                        asc::DESTINATION_FULL,
                        "no free slot to put the recovered cartridge in; export one first",
                    )
                })?;
            ch.homes.insert(bc.clone(), slot);
            ch.slots[slot as usize] = Some(bc);
            ch.in_drive[drive as usize] = None;
            ch.loaded[drive as usize] = false;
            st.charge_mount(robot_s);
            self.robot_moves.fetch_add(1, Ordering::Relaxed);
            ch.library_moves += 1;
            t = robot_s;
        }
        st.dead = false;
        st.faults = Default::default();
        st.streamer.lose_buffer();
        st.pending_ua = Some(asc::POWER_ON_RESET);
        drop(st);
        self.save_layout(&ch)?;
        Ok(t)
    }

    /// Put a cartridge into an import/export element (an operator's insert): a new blank one,
    /// or an existing cartridge directory.
    pub fn ie_insert(&self, ie: u32, barcode: &str, worm: bool) -> Result<(), Fault> {
        let mut ch = self.changer()?;
        if ie >= self.cfg.ie_slots {
            return Err(Fault::invalid(format!("no import/export element {ie}")));
        }
        if ch.ie[ie as usize].is_some() {
            return Err(Fault::invalid(format!(
                "import/export element {ie} is full"
            )));
        }
        if barcode.is_empty() || barcode.len() > 32 || !barcode.is_ascii() {
            return Err(Fault::invalid("barcode must be 1..=32 ASCII characters"));
        }
        if ch
            .slots
            .iter()
            .chain(ch.ie.iter())
            .chain(ch.in_drive.iter())
            .flatten()
            .any(|b| b == barcode)
        {
            return Err(Fault::invalid(format!(
                "cartridge {barcode} is already in the library"
            )));
        }
        let is_worm = if self.cfg.dir.join(barcode).exists() {
            Cartridge::read_meta(&self.cfg.dir, barcode)
                .map_err(io_fault("open"))?
                .worm
        } else {
            Cartridge::create(
                &self.cfg.dir,
                barcode,
                worm,
                self.cfg.calibrated,
                self.cfg.capacity_bytes,
            )
            .map_err(io_fault("create"))?;
            worm
        };
        ch.worm.insert(barcode.to_string(), is_worm);
        ch.ie[ie as usize] = Some(barcode.to_string());
        self.save_layout(&ch)
    }

    /// Take a cartridge out of an import/export element (its directory is kept).
    pub fn ie_remove(&self, ie: u32) -> Result<String, Fault> {
        let mut ch = self.changer()?;
        let bc = ch
            .ie
            .get_mut(ie as usize)
            .and_then(|s| s.take())
            .ok_or_else(|| Fault::invalid(format!("import/export element {ie} is empty")))?;
        self.save_layout(&ch)?;
        Ok(bc)
    }

    /// Every drive's statistics (in shared mode, drives this handle does not own report what
    /// this process did on them: nothing, unless it owned them before).
    pub fn all_stats(&self) -> Vec<reel_plugin_abi::ReelDriveStats> {
        (0..self.drive_count())
            .filter_map(|i| self.drive(i).ok().map(|s| s.stats))
            .collect()
    }

    /// Cut the power: every drive's buffer is dropped, positions are lost (in shared mode, the
    /// drives this handle owns: the others' buffers live in their owners).
    pub fn power_cut(&self) -> Result<u64, Fault> {
        let mut lost = 0;
        for i in 0..self.drive_count() {
            if !self.owns(i) {
                continue;
            }
            let mut st = self.drive(i)?;
            lost += st.lose_buffer()?;
            if st.loaded {
                st.pos_unknown = true;
            }
            st.pending_ua = Some(asc::POWER_ON_RESET);
            // One cut: the countdowns armed on the other drives went with the power.
            st.faults.power_cut_after = None;
        }
        Ok(lost)
    }

    /// Shared mode: the whole library's writes short of EOD and relabels, from every process
    /// that ever opened it (`events.jsonl`), and its robot moves.
    pub fn library_counters(&self) -> Result<Option<LibraryCounters>, Fault> {
        if !self.cfg.shared {
            return Ok(None);
        }
        let moves = self.changer()?.library_moves;
        let text = match std::fs::read_to_string(self.cfg.dir.join(EVENTS_FILE)) {
            Ok(t) => t,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => String::new(),
            Err(e) => return Err(sense::io(EVENTS_FILE, e)),
        };
        let mut c = LibraryCounters {
            robot_moves: moves,
            ..Default::default()
        };
        for line in text.lines().filter(|l| !l.trim().is_empty()) {
            let v: serde_json::Value = serde_json::from_str(line).map_err(|e| {
                Fault::invalid(format!("{EVENTS_FILE} has a line that is not JSON: {e}"))
            })?;
            match v.get("event").and_then(|e| e.as_str()) {
                Some("write_not_at_eod") => c.violations += 1,
                Some("relabel") => c.relabels += 1,
                Some("worm_overwrite_refused") => c.worm_refusals += 1,
                Some("drive_busy") => {
                    c.busy_ns += v.get("ns").and_then(serde_json::Value::as_u64).unwrap_or(0)
                }
                Some(e) if e.starts_with("fired_") || e == "lost_buffer" => c.fired.push(v),
                _ => {}
            }
        }
        Ok(Some(c))
    }
}

fn source_empty(address: u32) -> Fault {
    Fault::check(
        sk::ILLEGAL_REQUEST,
        asc::SOURCE_EMPTY,
        format!("source element {address} is empty"),
    )
}

/// The whole library's history in shared mode, every process included (from the event log
/// and the layout).
#[derive(Debug, Default, Clone)]
pub struct LibraryCounters {
    /// Writes short of EOD.
    pub violations: u64,
    /// Cartridges relabelled.
    pub relabels: u64,
    /// Writes short of EOD on a WORM cartridge (refused by the drive, nothing written).
    pub worm_refusals: u64,
    /// Robot moves.
    pub robot_moves: u64,
    /// Modelled drive busy time, summed over drives, as logged at each LOAD and UNLOAD.
    pub busy_ns: u64,
    /// Injected faults that took effect (`fired_*`: the event, barcode, block, pid and wall
    /// time), and buffers lost with the records they held (`lost_buffer`), in log order.
    pub fired: Vec<serde_json::Value>,
}

pub(crate) fn read_library_file(cfg: &SimConfig) -> Result<Option<LibraryFile>, Fault> {
    let path = cfg.dir.join("library.json");
    match std::fs::read(&path) {
        Ok(b) => Ok(Some(serde_json::from_slice(&b).map_err(|e| {
            Fault::invalid(format!(
                "{} is not a simulator layout ({e}); move it away to start a new library",
                path.display()
            ))
        })?)),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(None),
        Err(e) => Err(sense::io("library.json", e)),
    }
}

pub(crate) struct Placed {
    pub(crate) slots: Vec<Option<String>>,
    pub(crate) ie: Vec<Option<String>>,
    pub(crate) drives: Vec<Option<String>>,
}

/// Put every cartridge of `file` in its element; those whose element does not exist or is
/// taken go to `misplaced`.
pub(crate) fn place(cfg: &SimConfig, file: &LibraryFile, misplaced: &mut Vec<String>) -> Placed {
    let mut p = Placed {
        slots: vec![None; cfg.slots as usize],
        ie: vec![None; cfg.ie_slots as usize],
        drives: vec![None; cfg.drives as usize],
    };
    for (bc, addr) in &file.locations {
        if *addr == 0 {
            continue;
        }
        let el = if (DRIVE_BASE..IE_BASE).contains(addr) {
            p.drives.get_mut((addr - DRIVE_BASE) as usize)
        } else if (IE_BASE..SLOT_BASE).contains(addr) {
            p.ie.get_mut((addr - IE_BASE) as usize)
        } else {
            p.slots.get_mut(addr.saturating_sub(SLOT_BASE) as usize)
        };
        match el {
            Some(e) if e.is_none() => *e = Some(bc.clone()),
            _ => misplaced.push(bc.clone()),
        }
    }
    p
}
