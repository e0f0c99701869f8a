//! The simulated library: storage slots, import/export slots, drives and one robot, with the
//! element addresses of an SMC changer, persisted in `<dir>/library.json`.
//!
//! Element addresses: picker 1, drive `i` at 256+i, import/export `i` at 768+i, slot `i` at
//! 1024+i. Barcodes are `RL0001L9`, `RL0002L9`, ...; WORM cartridges end in `LZ`.

use std::collections::BTreeMap;
use std::ffi::CStr;
use std::path::Path;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};

use reel_plugin_abi::sdk::{Call, Element, Fault, Library};
use reel_plugin_abi::{
    REEL_CAP_CHANGER, REEL_CAP_EARLY_WARNING, REEL_CAP_GEOMETRY, REEL_CAP_IMMEDIATE_FILEMARKS,
    REEL_CAP_IMPORT_EXPORT, REEL_CAP_LBP, REEL_CAP_MAM, REEL_CAP_RAO, REEL_CAP_SPACE_BACKWARD,
    REEL_CAP_STATISTICS, REEL_CAP_TAPE_ALERTS, REEL_CAP_TEST_CONTROL, REEL_CAP_WORM,
    REEL_ELEMENT_DRIVE, REEL_ELEMENT_EXCEPT, REEL_ELEMENT_FULL, REEL_ELEMENT_IMPORT_EXPORT,
    REEL_ELEMENT_LOADED, REEL_ELEMENT_PICKER, REEL_ELEMENT_SLOT, REEL_ELEMENT_WORM, asc,
    sense_key as sk,
};
use serde::{Deserialize, Serialize};

use crate::cartridge::Cartridge;
use crate::clock::{Pacer, RealTime, TimeSource};
use crate::config::{ClockMode, SimConfig};
use crate::drive::{DriveGuard, DriveState, SimDrive};
use crate::sense;

/// Address of the picker.
pub const PICKER_ADDRESS: u32 = 1;
/// Address of drive 0.
pub const DRIVE_BASE: u32 = 256;
/// Address of import/export element 0.
pub const IE_BASE: u32 = 768;
/// Address of storage slot 0.
pub const SLOT_BASE: u32 = 1024;

/// The barcode of cartridge `n` (1-based): `RL0001L9` with the default prefix `RL`; WORM
/// cartridges end in `LZ`, the LTO-9 WORM suffix.
pub fn barcode(prefix: &str, n: u32, worm: bool) -> String {
    format!("{prefix}{n:04}{}", if worm { "LZ" } else { "L9" })
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

/// The changer's own state (slots and mail slots); drives hold their cartridges themselves.
pub struct Changer {
    slots: Vec<Option<Cartridge>>,
    ie: Vec<Option<Cartridge>>,
    /// Barcode in each drive (mirrors the drive states, updated only under this lock).
    in_drive: Vec<Option<String>>,
    /// Home slot of every cartridge (the slot it last came from).
    homes: BTreeMap<String, u32>,
}

#[derive(Serialize, Deserialize, Default)]
struct LibraryFile {
    version: u32,
    /// Barcode → element address (0: outside the library).
    locations: BTreeMap<String, u32>,
    /// Barcode → home slot index.
    homes: BTreeMap<String, u32>,
}

/// State shared by the library handle and its drive handles.
pub struct Shared {
    /// The configuration.
    pub cfg: SimConfig,
    changer: Mutex<Changer>,
    drives: Vec<Mutex<DriveState>>,
    medium_errors: Mutex<Vec<(String, u64)>>,
    robot_moves: AtomicU64,
    /// Wall clock (pacing and host-clock arrivals).
    pub time: Arc<dyn TimeSource>,
    /// Advisory lock on `<dir>/.lock`, held while the library is open.
    _lock: std::fs::File,
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

    fn changer(&self) -> MutexGuard<'_, Changer> {
        self.changer.lock().unwrap_or_else(|p| p.into_inner())
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

    /// Robot moves so far.
    pub fn robot_moves(&self) -> u64 {
        self.robot_moves.load(Ordering::Relaxed)
    }

    /// Run `f` on the cartridge with `barcode`, wherever it is.
    pub fn with_cartridge<R>(
        &self,
        barcode: &str,
        f: impl FnOnce(&mut Cartridge, Option<&mut DriveState>) -> Result<R, Fault>,
    ) -> Result<R, Fault> {
        let mut guard = self.changer();
        let ch = &mut *guard;
        if let Some(c) = ch
            .slots
            .iter_mut()
            .chain(ch.ie.iter_mut())
            .flatten()
            .find(|c| c.barcode() == barcode)
        {
            return f(c, None);
        }
        let drive = ch
            .in_drive
            .iter()
            .position(|b| b.as_deref() == Some(barcode));
        drop(guard);
        if let Some(i) = drive {
            let mut st = self.drive(i as u32)?;
            let st = &mut *st;
            if let Some(mut c) = st.cart.take() {
                let r = f(&mut c, Some(st));
                st.cart = Some(c);
                return r;
            }
        }
        Err(Fault::invalid(format!(
            "no cartridge {barcode} in the library; see the inventory for barcodes"
        )))
    }

    fn save_layout(&self, ch: &Changer) -> Result<(), Fault> {
        let mut f = LibraryFile {
            version: 1,
            ..Default::default()
        };
        for (i, c) in ch.slots.iter().enumerate() {
            if let Some(c) = c {
                f.locations
                    .insert(c.barcode().to_string(), SLOT_BASE + i as u32);
            }
        }
        for (i, c) in ch.ie.iter().enumerate() {
            if let Some(c) = c {
                f.locations
                    .insert(c.barcode().to_string(), IE_BASE + i as u32);
            }
        }
        for (i, b) in ch.in_drive.iter().enumerate() {
            if let Some(b) = b {
                f.locations.insert(b.clone(), DRIVE_BASE + i as u32);
            }
        }
        f.homes = ch.homes.clone();
        let bytes = serde_json::to_vec_pretty(&f).map_err(|e| Fault::internal(e.to_string()))?;
        let path = self.cfg.dir.join("library.json");
        let tmp = self.cfg.dir.join("library.json.tmp");
        std::fs::write(&tmp, bytes)
            .and_then(|()| std::fs::rename(&tmp, &path))
            .map_err(|e| sense::io("library.json", e))
    }

    fn decode(&self, address: u32) -> Result<Addr, Fault> {
        let bad = || {
            Fault::check(
                sk::ILLEGAL_REQUEST,
                asc::INVALID_ELEMENT_ADDRESS,
                format!("element address {address} does not exist in this library"),
            )
        };
        let ch = self.changer();
        if (DRIVE_BASE..IE_BASE).contains(&address) {
            let i = address - DRIVE_BASE;
            if i < self.drive_count() {
                return Ok(Addr::Drive(i));
            }
        } else if (IE_BASE..SLOT_BASE).contains(&address) {
            let i = address - IE_BASE;
            if (i as usize) < ch.ie.len() {
                return Ok(Addr::Ie(i));
            }
        } else if address >= SLOT_BASE {
            let i = address - SLOT_BASE;
            if (i as usize) < ch.slots.len() {
                return Ok(Addr::Slot(i));
            }
        }
        Err(bad())
    }

    /// Move a cartridge between two elements, charging the robot to the drive it serves.
    pub fn move_medium(&self, source: u32, destination: u32) -> Result<f64, Fault> {
        let (src, dst) = (self.decode(source)?, self.decode(destination)?);
        let robot_s = self.cfg.robot_ms as f64 / 1000.0;
        let mut ch = self.changer();
        // Destination must be empty.
        let dest_full = match dst {
            Addr::Slot(i) => ch.slots[i as usize].is_some(),
            Addr::Ie(i) => ch.ie[i as usize].is_some(),
            Addr::Drive(i) => ch.in_drive[i as usize].is_some(),
        };
        if src == dst {
            let full = match src {
                Addr::Slot(i) => ch.slots[i as usize].is_some(),
                Addr::Ie(i) => ch.ie[i as usize].is_some(),
                Addr::Drive(i) => ch.in_drive[i as usize].is_some(),
            };
            return if full {
                Ok(0.0)
            } else {
                Err(source_empty(source))
            };
        }
        if dest_full {
            return Err(Fault::check(
                sk::ILLEGAL_REQUEST,
                asc::DESTINATION_FULL,
                format!("destination element {destination} is full"),
            ));
        }
        let cart = match src {
            Addr::Slot(i) => ch.slots[i as usize].take(),
            Addr::Ie(i) => ch.ie[i as usize].take(),
            Addr::Drive(i) => {
                if ch.in_drive[i as usize].is_none() {
                    None
                } else {
                    let mut st = self.drive(i)?;
                    if st.loaded && !st.dead {
                        return Err(Fault::check(
                            sk::ILLEGAL_REQUEST,
                            asc::MEDIUM_REMOVAL_PREVENTED,
                            format!("the cartridge in drive {i} is loaded; UNLOAD it first"),
                        ));
                    }
                    let c = st.take_cartridge()?;
                    st.charge_mount(robot_s);
                    ch.in_drive[i as usize] = None;
                    c
                }
            }
        };
        let Some(cart) = cart else {
            return Err(source_empty(source));
        };
        if let Addr::Slot(i) = src {
            ch.homes.insert(cart.barcode().to_string(), i);
        }
        match dst {
            Addr::Slot(i) => {
                ch.homes.insert(cart.barcode().to_string(), i);
                ch.slots[i as usize] = Some(cart);
            }
            Addr::Ie(i) => ch.ie[i as usize] = Some(cart),
            Addr::Drive(i) => {
                let mut st = self.drive(i)?;
                ch.in_drive[i as usize] = Some(cart.barcode().to_string());
                st.cart = Some(cart);
                st.loaded = false;
                st.pos = 0;
                st.pos_unknown = false;
                st.charge_mount(robot_s);
            }
        }
        self.robot_moves.fetch_add(1, Ordering::Relaxed);
        self.save_layout(&ch)?;
        Ok(robot_s)
    }

    /// Pull the cartridge out of a (dead) drive back to its home slot and replace the drive.
    pub fn robot_recover(&self, drive: u32) -> Result<f64, Fault> {
        let robot_s = self.cfg.robot_ms as f64 / 1000.0;
        let mut ch = self.changer();
        let mut st = self.drive(drive)?;
        let mut t = 0.0;
        if let Some(cart) = st.take_cartridge()? {
            let bc = cart.barcode().to_string();
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
            ch.homes.insert(bc, slot);
            ch.slots[slot as usize] = Some(cart);
            ch.in_drive[drive as usize] = None;
            st.charge_mount(robot_s);
            self.robot_moves.fetch_add(1, Ordering::Relaxed);
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

    /// Put a new blank cartridge into an import/export element (an operator's insert).
    pub fn ie_insert(&self, ie: u32, barcode: &str, worm: bool) -> Result<(), Fault> {
        let mut ch = self.changer();
        let slot = ch
            .ie
            .get_mut(ie as usize)
            .ok_or_else(|| Fault::invalid(format!("no import/export element {ie}")))?;
        if slot.is_some() {
            return Err(Fault::invalid(format!(
                "import/export element {ie} is full"
            )));
        }
        if barcode.is_empty() || barcode.len() > 32 || !barcode.is_ascii() {
            return Err(Fault::invalid("barcode must be 1..=32 ASCII characters"));
        }
        if self.cfg.dir.join(barcode).exists() {
            *slot =
                Some(Cartridge::open(&self.cfg.dir, barcode).map_err(|e| sense::io("open", e))?);
        } else {
            *slot = Some(
                Cartridge::create(
                    &self.cfg.dir,
                    barcode,
                    worm,
                    self.cfg.calibrated,
                    self.cfg.capacity_bytes,
                )
                .map_err(|e| sense::io("create", e))?,
            );
        }
        self.save_layout(&ch)
    }

    /// Take a cartridge out of an import/export element (its directory is kept).
    pub fn ie_remove(&self, ie: u32) -> Result<String, Fault> {
        let mut ch = self.changer();
        let c = ch
            .ie
            .get_mut(ie as usize)
            .and_then(|s| s.take())
            .ok_or_else(|| Fault::invalid(format!("import/export element {ie} is empty")))?;
        self.save_layout(&ch)?;
        Ok(c.barcode().to_string())
    }

    /// Every drive's statistics.
    pub fn all_stats(&self) -> Vec<reel_plugin_abi::ReelDriveStats> {
        (0..self.drive_count())
            .filter_map(|i| self.drive(i).ok().map(|s| s.stats))
            .collect()
    }

    /// Cut the power: every drive's buffer is dropped, positions are lost.
    pub fn power_cut(&self) -> Result<u64, Fault> {
        let mut lost = 0;
        for i in 0..self.drive_count() {
            let mut st = self.drive(i)?;
            lost += st.lose_buffer()?;
            if st.loaded {
                st.pos_unknown = true;
            }
            st.pending_ua = Some(asc::POWER_ON_RESET);
        }
        Ok(lost)
    }
}

fn source_empty(address: u32) -> Fault {
    Fault::check(
        sk::ILLEGAL_REQUEST,
        asc::SOURCE_EMPTY,
        format!("source element {address} is empty"),
    )
}

/// The simulated library, as the ABI opens it.
pub struct SimLibrary {
    shared: Arc<Shared>,
    pacer: Pacer,
}

impl SimLibrary {
    /// Open with an explicit wall clock (tests inject one).
    pub fn open_with_time(config: &str, time: Arc<dyn TimeSource>) -> Result<Self, Fault> {
        let cfg = SimConfig::parse(config).map_err(|e| Fault::invalid(e.to_string()))?;
        std::fs::create_dir_all(&cfg.dir).map_err(|e| {
            Fault::invalid(format!(
                "cannot create library directory {}: {e}",
                cfg.dir.display()
            ))
        })?;
        let lock = lock_dir(&cfg.dir)?;
        let changer = load_layout(&cfg)?;
        let mut drives = Vec::new();
        for i in 0..cfg.drives {
            drives.push(Mutex::new(DriveState::new(i, &cfg)));
        }
        let mut in_drive = vec![None; cfg.drives as usize];
        let mut ch = Changer {
            slots: changer.slots,
            ie: changer.ie,
            in_drive: Vec::new(),
            homes: changer.homes,
        };
        for (i, c) in changer.drives.into_iter().enumerate() {
            if let Some(c) = c {
                in_drive[i] = Some(c.barcode().to_string());
                if let Some(m) = drives.get(i) {
                    m.lock().unwrap_or_else(|p| p.into_inner()).cart = Some(c);
                }
            }
        }
        ch.in_drive = in_drive;
        let shared = Arc::new(Shared {
            cfg,
            changer: Mutex::new(ch),
            drives,
            medium_errors: Mutex::new(Vec::new()),
            robot_moves: AtomicU64::new(0),
            time,
            _lock: lock,
        });
        {
            let ch = shared.changer();
            shared.save_layout(&ch)?;
        }
        tracing::info!(dir = %shared.cfg.dir.display(), profile = %shared.cfg.profile, "simulated library open (figures SIMULATED)");
        let pacer = shared.pacer();
        Ok(SimLibrary { shared, pacer })
    }

    /// The shared state (tests and the control module).
    pub fn shared(&self) -> &Arc<Shared> {
        &self.shared
    }

    fn timed<R>(
        &mut self,
        call: &mut Call,
        f: impl FnOnce(&Shared) -> Result<(R, f64), Fault>,
    ) -> Result<R, Fault> {
        let (r, secs) = f(&self.shared)?;
        call.elapsed_ns = (secs * 1e9).round() as u64;
        self.pacer.pace(call.elapsed_ns);
        Ok(r)
    }
}

struct Layout {
    slots: Vec<Option<Cartridge>>,
    ie: Vec<Option<Cartridge>>,
    drives: Vec<Option<Cartridge>>,
    homes: BTreeMap<String, u32>,
}

fn load_layout(cfg: &SimConfig) -> Result<Layout, Fault> {
    let mut l = Layout {
        slots: (0..cfg.slots).map(|_| None).collect(),
        ie: (0..cfg.ie_slots).map(|_| None).collect(),
        drives: (0..cfg.drives).map(|_| None).collect(),
        homes: BTreeMap::new(),
    };
    let path = cfg.dir.join("library.json");
    let file: Option<LibraryFile> = match std::fs::read(&path) {
        Ok(b) => Some(serde_json::from_slice(&b).map_err(|e| {
            Fault::invalid(format!(
                "{} is not a simulator layout ({e}); move it away to start a new library",
                path.display()
            ))
        })?),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => None,
        Err(e) => return Err(sense::io("library.json", e)),
    };
    let mut on_disk = cartridge_dirs(&cfg.dir)?;
    if file.is_none() && on_disk.is_empty() {
        let first_worm = cfg.cartridges - cfg.worm_cartridges;
        for n in 0..cfg.cartridges {
            let worm = n >= first_worm;
            let bc = barcode(&cfg.barcode_prefix, n + 1, worm);
            let c = Cartridge::create(&cfg.dir, &bc, worm, cfg.calibrated, cfg.capacity_bytes)
                .map_err(|e| sense::io("create cartridge", e))?;
            l.homes.insert(bc, n);
            l.slots[n as usize] = Some(c);
        }
        return Ok(l);
    }
    let file = file.unwrap_or_default();
    l.homes = file.homes.clone();
    let outside: Vec<String> = file
        .locations
        .iter()
        .filter(|(_, a)| **a == 0)
        .map(|(b, _)| b.clone())
        .collect();
    for (bc, addr) in &file.locations {
        if *addr == 0 {
            continue;
        }
        let Some(i) = on_disk.iter().position(|d| d == bc) else {
            tracing::warn!(barcode = %bc, "library.json names a cartridge with no directory; skipped");
            continue;
        };
        on_disk.remove(i);
        let c = Cartridge::open(&cfg.dir, bc).map_err(|e| sense::io("open cartridge", e))?;
        let place = if (DRIVE_BASE..IE_BASE).contains(addr) {
            l.drives.get_mut((addr - DRIVE_BASE) as usize)
        } else if (IE_BASE..SLOT_BASE).contains(addr) {
            l.ie.get_mut((addr - IE_BASE) as usize)
        } else {
            l.slots.get_mut(addr.saturating_sub(SLOT_BASE) as usize)
        };
        match place {
            Some(p) if p.is_none() => *p = Some(c),
            _ => on_disk.push(bc.clone()),
        }
    }
    // Cartridges on disk but not placed (a crash before library.json was written, or a layout
    // that no longer fits): into free slots.
    for bc in on_disk {
        if outside.contains(&bc) {
            continue;
        }
        let c = Cartridge::open(&cfg.dir, &bc).map_err(|e| sense::io("open cartridge", e))?;
        let Some(i) = l.slots.iter().position(|s| s.is_none()) else {
            return Err(Fault::invalid(format!(
                "cartridge {bc} has no free slot; raise sim.slots (now {})",
                cfg.slots
            )));
        };
        l.homes.insert(bc, i as u32);
        l.slots[i] = Some(c);
    }
    Ok(l)
}

/// Take the library directory's advisory lock: two open libraries on one directory would
/// corrupt each other's cartridges.
fn lock_dir(dir: &Path) -> Result<std::fs::File, Fault> {
    let path = dir.join(".lock");
    let f = std::fs::OpenOptions::new()
        .create(true)
        .truncate(false)
        .write(true)
        .open(&path)
        .map_err(|e| sense::io("lock file", e))?;
    match f.try_lock() {
        Ok(()) => Ok(f),
        Err(std::fs::TryLockError::WouldBlock) => Err(Fault::invalid(format!(
            "library directory {} is already open (by this or another process); close that \
             library (and its drives) first",
            dir.display()
        ))),
        Err(std::fs::TryLockError::Error(e)) => Err(sense::io("lock library directory", e)),
    }
}

fn cartridge_dirs(dir: &Path) -> Result<Vec<String>, Fault> {
    let mut out = Vec::new();
    let rd = std::fs::read_dir(dir).map_err(|e| sense::io("read library dir", e))?;
    for e in rd {
        let e = e.map_err(|e| sense::io("read library dir", e))?;
        if e.path().join("meta.json").is_file()
            && let Some(name) = e.file_name().to_str()
        {
            out.push(name.to_string());
        }
    }
    out.sort();
    Ok(out)
}

impl Library for SimLibrary {
    type Drive = SimDrive;
    const NAME: &'static CStr = c"reel-sim";
    const VERSION: &'static CStr = c"0.1.0";
    const CAPS: u64 = REEL_CAP_CHANGER
        | REEL_CAP_LBP
        | REEL_CAP_MAM
        | REEL_CAP_GEOMETRY
        | REEL_CAP_RAO
        | REEL_CAP_WORM
        | REEL_CAP_STATISTICS
        | REEL_CAP_TAPE_ALERTS
        | REEL_CAP_IMPORT_EXPORT
        | REEL_CAP_EARLY_WARNING
        | REEL_CAP_IMMEDIATE_FILEMARKS
        | REEL_CAP_SPACE_BACKWARD
        | REEL_CAP_TEST_CONTROL;

    fn open(config: &str, _call: &mut Call) -> Result<Self, Fault> {
        Self::open_with_time(config, Arc::new(RealTime::new()))
    }

    fn inventory(&mut self, _call: &mut Call) -> Result<Vec<Element>, Fault> {
        let s = &self.shared;
        let ch = s.changer();
        let mut out = vec![Element {
            kind: REEL_ELEMENT_PICKER,
            address: PICKER_ADDRESS,
            index: 0,
            flags: 0,
            source_address: 0,
            barcode: String::new(),
        }];
        let cart_el = |kind, address, index, c: Option<&Cartridge>, extra: u32| {
            let home = c
                .and_then(|c| ch.homes.get(c.barcode()))
                .map_or(0, |h| SLOT_BASE + h);
            Element {
                kind,
                address,
                index,
                flags: extra
                    | c.map_or(0, |c| {
                        REEL_ELEMENT_FULL | if c.meta.worm { REEL_ELEMENT_WORM } else { 0 }
                    }),
                source_address: home,
                barcode: c.map(|c| c.barcode().to_string()).unwrap_or_default(),
            }
        };
        for i in 0..s.drive_count() {
            let st = s.drive(i)?;
            let mut extra = 0;
            if st.loaded {
                extra |= REEL_ELEMENT_LOADED;
            }
            if st.dead {
                extra |= REEL_ELEMENT_EXCEPT;
            }
            out.push(cart_el(
                REEL_ELEMENT_DRIVE,
                DRIVE_BASE + i,
                i,
                st.cart.as_ref(),
                extra,
            ));
        }
        for (i, c) in ch.ie.iter().enumerate() {
            let i = i as u32;
            out.push(cart_el(
                REEL_ELEMENT_IMPORT_EXPORT,
                IE_BASE + i,
                i,
                c.as_ref(),
                0,
            ));
        }
        for (i, c) in ch.slots.iter().enumerate() {
            let i = i as u32;
            out.push(cart_el(REEL_ELEMENT_SLOT, SLOT_BASE + i, i, c.as_ref(), 0));
        }
        Ok(out)
    }

    fn move_medium(&mut self, source: u32, destination: u32, call: &mut Call) -> Result<(), Fault> {
        self.timed(call, |s| {
            s.move_medium(source, destination).map(|t| ((), t))
        })
    }

    fn import(&mut self, ie: u32, slot: u32, call: &mut Call) -> Result<(), Fault> {
        let (a, b) = (self.shared.decode(ie)?, self.shared.decode(slot)?);
        if !matches!((a, b), (Addr::Ie(_), Addr::Slot(_))) {
            return Err(Fault::check(
                sk::ILLEGAL_REQUEST,
                asc::INVALID_ELEMENT_ADDRESS,
                "import moves from an import/export element (768+i) to a slot (1024+i)",
            ));
        }
        self.move_medium(ie, slot, call)
    }

    fn export(&mut self, slot: u32, ie: u32, call: &mut Call) -> Result<(), Fault> {
        let (a, b) = (self.shared.decode(slot)?, self.shared.decode(ie)?);
        if !matches!((a, b), (Addr::Slot(_), Addr::Ie(_))) {
            return Err(Fault::check(
                sk::ILLEGAL_REQUEST,
                asc::INVALID_ELEMENT_ADDRESS,
                "export moves from a slot (1024+i) to an import/export element (768+i)",
            ));
        }
        self.move_medium(slot, ie, call)
    }

    fn control(&mut self, request: &str, call: &mut Call) -> Result<String, Fault> {
        self.timed(call, |s| crate::control::handle(s, request))
    }

    fn open_drive(&mut self, index: u32, _call: &mut Call) -> Result<SimDrive, Fault> {
        if index >= self.shared.drive_count() {
            return Err(Fault::invalid(format!(
                "no drive {index}: this library has {} (sim.drives)",
                self.shared.drive_count()
            )));
        }
        Ok(SimDrive::new(self.shared.clone(), index))
    }
}
