//! The simulated library: storage slots, import/export slots, drives and one robot, with the
//! element addresses of an SMC changer, persisted in `<dir>/library.json`.
//!
//! Element addresses: picker 1, drive `i` at 256+i, import/export `i` at 768+i, slot `i` at
//! 1024+i. Barcodes are `RL0001L9`, `RL0002L9`, ...; WORM cartridges end in `LZ`.
//!
//! The changer knows its cartridges by barcode; a cartridge's records are opened only while it
//! is in a drive this library handle owns (opened when it is moved in, synced and closed when
//! it is moved out).
//!
//! **Shared mode** (`sim.shared=true`): several processes open one library directory, as drive
//! hosts share a real SCSI library. `library.json` is then the changer's source of truth: every
//! changer operation (inventory, move, import/export, recovery) holds an advisory lock on
//! `<dir>/.changer.lock`, re-reads the file first and writes it back atomically. Each drive
//! belongs to the process that opened it (`<dir>/drive-N.lock`, holding its pid); the owner
//! saves whether the drive's cartridge is loaded. A move out of a drive another live process
//! has loaded is refused with MEDIUM REMOVAL PREVENTED; a drive whose owner is gone counts as
//! not loaded (as a reopened library's drives do).

use std::collections::{BTreeMap, BTreeSet};
use std::ffi::CStr;
use std::fs::File;
use std::path::Path;
use std::sync::atomic::AtomicU64;
use std::sync::{Arc, Mutex, Weak};

use reel_plugin_abi::sdk::{Call, Element, Fault, Library, LibraryInfo};
use reel_plugin_abi::{
    REEL_CAP_CHANGER, REEL_CAP_EARLY_WARNING, REEL_CAP_GEOMETRY, REEL_CAP_IMMEDIATE_FILEMARKS,
    REEL_CAP_IMPORT_EXPORT, REEL_CAP_LBP, REEL_CAP_MAM, REEL_CAP_RAO, REEL_CAP_SPACE_BACKWARD,
    REEL_CAP_STATISTICS, REEL_CAP_TAPE_ALERTS, REEL_CAP_TEST_CONTROL, REEL_CAP_WORM,
    REEL_ELEMENT_CLEANING, REEL_ELEMENT_DRIVE, REEL_ELEMENT_EXCEPT, REEL_ELEMENT_FULL,
    REEL_ELEMENT_IMPORT_EXPORT, REEL_ELEMENT_LOADED, REEL_ELEMENT_PICKER, REEL_ELEMENT_SLOT,
    REEL_ELEMENT_WORM, asc, sense_key as sk,
};

use crate::cartridge::Cartridge;
use crate::clock::{Pacer, RealTime, TimeSource};
use crate::config::SimConfig;
use crate::drive::SimDrive;
use crate::drive_state::DriveState;
use crate::sense;
use crate::shared::{
    Addr, Changer, DRIVE_BASE, Flock, GeometryFile, IE_BASE, LibraryFile, PICKER_ADDRESS,
    SLOT_BASE, Shared, barcode, io_fault, place, read_library_file,
};

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
        let lock = lock_dir(&cfg.dir, cfg.shared)?;
        let changer_file = if cfg.shared {
            Some(
                std::fs::OpenOptions::new()
                    .create(true)
                    .truncate(false)
                    .write(true)
                    .open(cfg.dir.join(".changer.lock"))
                    .map_err(io_fault("changer lock file"))?,
            )
        } else {
            None
        };
        let drives = (0..cfg.drives)
            .map(|i| Mutex::new(DriveState::new(i, &cfg)))
            .collect();
        let owners = (0..cfg.drives).map(|_| Mutex::new(Weak::new())).collect();
        let empty = Changer {
            slots: Vec::new(),
            ie: Vec::new(),
            in_drive: Vec::new(),
            loaded: Vec::new(),
            homes: BTreeMap::new(),
            worm: BTreeMap::new(),
            library_moves: 0,
        };
        let shared = Arc::new(Shared {
            cfg,
            changer: Mutex::new(empty),
            drives,
            owners,
            medium_errors: Mutex::new(Vec::new()),
            robot_moves: AtomicU64::new(0),
            time,
            _lock: lock,
            changer_file,
        });
        {
            let mut ch = shared.changer.lock().unwrap_or_else(|p| p.into_inner());
            // In shared mode the layout is read (and a new library created) under the changer
            // lock; declared after `ch`, so released before it.
            let _flock = match shared.changer_file.as_ref() {
                Some(f) => {
                    f.lock().map_err(io_fault("lock the changer"))?;
                    Some(Flock(f))
                }
                None => None,
            };
            let cfg = &shared.cfg;
            let layout = load_layout(cfg)?;
            if !cfg.shared {
                // One process owns every drive: a cartridge left in one is there again, not
                // loaded.
                for (i, b) in layout.drives.iter().enumerate() {
                    if let Some(b) = b {
                        shared.drive(i as u32)?.cart =
                            Some(Cartridge::open(&cfg.dir, b).map_err(io_fault("open cartridge"))?);
                    }
                }
            }
            *ch = Changer {
                slots: layout.slots,
                ie: layout.ie,
                in_drive: layout.drives,
                loaded: (0..cfg.drives)
                    .map(|i| cfg.shared && layout.loaded.contains(&i))
                    .collect(),
                homes: layout.homes,
                worm: layout.worm,
                library_moves: layout.robot_moves,
            };
            shared.save_layout(&ch)?;
        }
        tracing::info!(dir = %shared.cfg.dir.display(), profile = %shared.cfg.profile, shared = shared.cfg.shared, "simulated library open (figures SIMULATED)");
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
    slots: Vec<Option<String>>,
    ie: Vec<Option<String>>,
    drives: Vec<Option<String>>,
    homes: BTreeMap<String, u32>,
    loaded: BTreeSet<u32>,
    worm: BTreeMap<String, bool>,
    robot_moves: u64,
}

fn load_layout(cfg: &SimConfig) -> Result<Layout, Fault> {
    let file = read_library_file(cfg)?;
    let geometry = GeometryFile {
        drives: cfg.drives,
        slots: cfg.slots,
        ie_slots: cfg.ie_slots,
    };
    if cfg.shared
        && let Some(g) = file.as_ref().and_then(|f| f.geometry)
        && g != geometry
    {
        return Err(Fault::invalid(format!(
            "the shared library in {} has {} drives, {} slots and {} mail slots, and this \
             configuration says {}, {} and {}: every process sharing a library must configure \
             the same sim.drives, sim.slots and sim.ie_slots",
            cfg.dir.display(),
            g.drives,
            g.slots,
            g.ie_slots,
            cfg.drives,
            cfg.slots,
            cfg.ie_slots
        )));
    }
    let mut l = Layout {
        slots: vec![None; cfg.slots as usize],
        ie: vec![None; cfg.ie_slots as usize],
        drives: vec![None; cfg.drives as usize],
        homes: BTreeMap::new(),
        loaded: BTreeSet::new(),
        worm: BTreeMap::new(),
        robot_moves: 0,
    };
    let mut on_disk = cartridge_dirs(&cfg.dir)?;
    if file.is_none() && on_disk.is_empty() {
        let first_worm = cfg.cartridges - cfg.worm_cartridges;
        for n in 0..cfg.cartridges {
            let worm = n >= first_worm;
            let bc = barcode(&cfg.barcode_prefix, n + 1, worm);
            Cartridge::create(&cfg.dir, &bc, worm, cfg.calibrated, cfg.capacity_bytes)
                .map_err(io_fault("create cartridge"))?;
            l.homes.insert(bc.clone(), n);
            l.worm.insert(bc.clone(), worm);
            l.slots[n as usize] = Some(bc);
        }
        for n in 0..cfg.cleaning_cartridges {
            let bc = crate::shared::cleaning_barcode(n + 1);
            Cartridge::create(&cfg.dir, &bc, false, true, cfg.capacity_bytes)
                .map_err(io_fault("create cleaning cartridge"))?;
            let slot = cfg.cartridges + n;
            l.homes.insert(bc.clone(), slot);
            l.worm.insert(bc.clone(), false);
            l.slots[slot as usize] = Some(bc);
        }
        return Ok(l);
    }
    let file = file.unwrap_or_default();
    l.homes = file.homes.clone();
    l.loaded = file.loaded.clone();
    l.robot_moves = file.robot_moves;
    let outside: Vec<String> = file
        .locations
        .iter()
        .filter(|(_, a)| **a == 0)
        .map(|(b, _)| b.clone())
        .collect();
    let known: Vec<String> = file
        .locations
        .iter()
        .filter(|(b, a)| {
            let present = on_disk.contains(b);
            if **a != 0 && !present {
                tracing::warn!(barcode = %b, "library.json names a cartridge with no directory; skipped");
            }
            **a != 0 && present
        })
        .map(|(b, _)| b.clone())
        .collect();
    let mut kept = LibraryFile::default();
    for b in &known {
        kept.locations.insert(b.clone(), file.locations[b]);
    }
    let mut misplaced = Vec::new();
    let placed = place(cfg, &kept, &mut misplaced);
    l.slots = placed.slots;
    l.ie = placed.ie;
    l.drives = placed.drives;
    on_disk.retain(|b| !known.contains(b) || misplaced.contains(b));
    // Cartridges on disk but not placed (a crash before library.json was written, or a layout
    // that no longer fits): into free slots.
    for bc in on_disk {
        if outside.contains(&bc) {
            continue;
        }
        let Some(i) = l.slots.iter().position(|s| s.is_none()) else {
            return Err(Fault::invalid(format!(
                "cartridge {bc} has no free slot; raise sim.slots (now {})",
                cfg.slots
            )));
        };
        l.homes.insert(bc.clone(), i as u32);
        l.slots[i] = Some(bc);
    }
    for bc in l
        .slots
        .iter()
        .chain(l.ie.iter())
        .chain(l.drives.iter())
        .flatten()
    {
        let m = Cartridge::read_meta(&cfg.dir, bc).map_err(io_fault("read cartridge meta"))?;
        l.worm.insert(bc.clone(), m.worm);
    }
    Ok(l)
}

/// Take the library directory's advisory lock: exclusive (two libraries opened on one directory
/// would corrupt each other's cartridges), or shared in shared mode, where the changer and drive
/// locks keep the processes apart.
fn lock_dir(dir: &Path, shared: bool) -> Result<File, Fault> {
    let path = dir.join(".lock");
    let f = std::fs::OpenOptions::new()
        .create(true)
        .truncate(false)
        .write(true)
        .open(&path)
        .map_err(io_fault("lock file"))?;
    let r = if shared {
        f.try_lock_shared()
    } else {
        f.try_lock()
    };
    match r {
        Ok(()) => Ok(f),
        Err(std::fs::TryLockError::WouldBlock) if shared => Err(Fault::invalid(format!(
            "library directory {} is open without sim.shared (by this or another process); \
             every process sharing it must set sim.shared=true",
            dir.display()
        ))),
        Err(std::fs::TryLockError::WouldBlock) => Err(Fault::invalid(format!(
            "library directory {} is already open (by this or another process); close that \
             library (and its drives) first, or set sim.shared=true in every process to share it",
            dir.display()
        ))),
        Err(std::fs::TryLockError::Error(e)) => Err(sense::io("lock library directory", e)),
    }
}

fn cartridge_dirs(dir: &Path) -> Result<Vec<String>, Fault> {
    let mut out = Vec::new();
    let rd = std::fs::read_dir(dir).map_err(io_fault("read library dir"))?;
    for e in rd {
        let e = e.map_err(io_fault("read library dir"))?;
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
    const VERSION: &'static CStr = reel_plugin_abi::crate_version!();
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
        crate::mailbox::deliver_all(&self.shared);
        let s = &self.shared;
        let ch = s.changer()?;
        let mut out = vec![Element {
            kind: REEL_ELEMENT_PICKER,
            address: PICKER_ADDRESS,
            index: 0,
            flags: 0,
            source_address: 0,
            barcode: String::new(),
        }];
        let cart_el = |kind, address, index, bc: Option<&String>, extra: u32| {
            let home = bc
                .and_then(|b| ch.homes.get(b))
                .map_or(0, |h| SLOT_BASE + h);
            let worm = bc.is_some_and(|b| ch.worm.get(b).copied().unwrap_or(false));
            Element {
                kind,
                address,
                index,
                flags: extra
                    | if bc.is_some() { REEL_ELEMENT_FULL } else { 0 }
                    | if worm { REEL_ELEMENT_WORM } else { 0 }
                    | if bc.is_some_and(|b| crate::shared::is_cleaning(b)) {
                        REEL_ELEMENT_CLEANING
                    } else {
                        0
                    },
                source_address: home,
                barcode: bc.cloned().unwrap_or_default(),
            }
        };
        for i in 0..s.drive_count() {
            let mut extra = 0;
            let bc = if s.owns(i) {
                let st = s.drive(i)?;
                if st.loaded {
                    extra |= REEL_ELEMENT_LOADED;
                }
                if st.dead {
                    extra |= REEL_ELEMENT_EXCEPT;
                }
                st.cart.as_ref().map(|c| c.barcode().to_string())
            } else {
                // Another process's drive, as its owner saved it; loaded only while that
                // owner lives.
                let bc = ch.in_drive[i as usize].clone();
                if bc.is_some() && ch.loaded[i as usize] && s.foreign_owner(i)?.is_some() {
                    extra |= REEL_ELEMENT_LOADED;
                }
                bc
            };
            out.push(cart_el(
                REEL_ELEMENT_DRIVE,
                DRIVE_BASE + i,
                i,
                bc.as_ref(),
                extra,
            ));
        }
        for (i, b) in ch.ie.iter().enumerate() {
            let i = i as u32;
            out.push(cart_el(
                REEL_ELEMENT_IMPORT_EXPORT,
                IE_BASE + i,
                i,
                b.as_ref(),
                0,
            ));
        }
        for (i, b) in ch.slots.iter().enumerate() {
            let i = i as u32;
            out.push(cart_el(REEL_ELEMENT_SLOT, SLOT_BASE + i, i, b.as_ref(), 0));
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

    fn info(&mut self, _call: &mut Call) -> Result<LibraryInfo, Fault> {
        let serial = crate::identity::serial(&self.shared.cfg.dir)
            .map_err(|e| crate::sense::io("serial", e))?;
        Ok(LibraryInfo {
            vendor: crate::identity::VENDOR.into(),
            product: crate::identity::PRODUCT.into(),
            serial,
        })
    }

    fn open_drive(&mut self, index: u32, _call: &mut Call) -> Result<SimDrive, Fault> {
        if index >= self.shared.drive_count() {
            return Err(Fault::invalid(format!(
                "no drive {index}: this library has {} (sim.drives)",
                self.shared.drive_count()
            )));
        }
        let owner = self.shared.claim_drive(index)?;
        Ok(SimDrive::new(self.shared.clone(), index, owner))
    }
}
