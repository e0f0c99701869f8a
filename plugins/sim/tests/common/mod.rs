//! Shared helpers for the simulator's integration tests: a library in a temporary directory,
//! driven through the SDK traits (the rlib), with each call's modelled seconds.
#![allow(dead_code)]

use std::path::Path;

use reel_plugin_abi::sdk::{Call, Drive, Fault, Library};
use reel_plugin_sim::SimLibrary;
use reel_plugin_sim::drive::SimDrive;

/// Drive element address of drive `i`.
pub fn drive_addr(i: u32) -> u32 {
    256 + i
}
/// Storage slot address of slot `i`.
pub fn slot_addr(i: u32) -> u32 {
    1024 + i
}

/// A library in a temporary directory.
pub struct Rig {
    pub dir: tempfile::TempDir,
    pub lib: SimLibrary,
    pub extra: String,
}

impl Rig {
    pub fn new(extra: &str) -> Rig {
        let dir = tempfile::tempdir().unwrap();
        let lib = open_lib(dir.path(), extra);
        Rig {
            dir,
            lib,
            extra: extra.to_string(),
        }
    }

    /// Close the library (every drive handle must be dropped first) and open it again.
    pub fn reopen(&mut self) {
        let scratch = tempfile::tempdir().unwrap();
        let old = std::mem::replace(&mut self.lib, open_lib(scratch.path(), ""));
        drop(old);
        self.lib = open_lib(self.dir.path(), &self.extra);
    }

    pub fn drive(&mut self, i: u32) -> SimDrive {
        self.lib.open_drive(i, &mut Call::default()).unwrap()
    }

    /// MOVE MEDIUM; returns modelled seconds.
    pub fn mv(&mut self, from: u32, to: u32) -> f64 {
        let mut c = Call::default();
        self.lib.move_medium(from, to, &mut c).unwrap();
        secs(&c)
    }

    pub fn control(&mut self, req: &str) -> Result<serde_json::Value, Fault> {
        let mut c = Call::default();
        let r = self.lib.control(req, &mut c)?;
        Ok(serde_json::from_str(&r).unwrap())
    }
}

pub fn open_lib(dir: &Path, extra: &str) -> SimLibrary {
    let cfg = format!("dir={};{extra}", dir.display());
    SimLibrary::open(&cfg, &mut Call::default()).unwrap()
}

pub fn secs(c: &Call) -> f64 {
    c.elapsed_ns as f64 / 1e9
}

/// Run a drive call; returns its result and modelled seconds.
pub fn timed<R>(
    d: &mut SimDrive,
    f: impl FnOnce(&mut SimDrive, &mut Call) -> Result<R, Fault>,
) -> (Result<R, Fault>, f64) {
    let mut c = Call::default();
    let r = f(d, &mut c);
    (r, secs(&c))
}

/// LOAD and clear the unit attention the first command after it reports; returns load secs.
pub fn load(d: &mut SimDrive) -> f64 {
    let (r, t) = timed(d, |d, c| d.load(c));
    r.unwrap();
    let ua = d.test_ready(&mut Call::default()).unwrap_err();
    assert_eq!((ua.sense_key, ua.asc, ua.ascq), (6, 0x28, 0));
    d.test_ready(&mut Call::default()).unwrap();
    t
}

pub fn write(d: &mut SimDrive, data: &[u8]) -> Result<(), Fault> {
    d.write_record(data, None, &mut Call::default())
}

pub fn sense(f: &Fault) -> (u8, u8, u8) {
    (f.sense_key, f.asc, f.ascq)
}

pub fn ok<R>(r: Result<R, Fault>) -> R {
    match r {
        Ok(v) => v,
        Err(f) => panic!("unexpected fault: {f}"),
    }
}

/// Bring cartridge from slot `slot` into drive `drive` and load it.
pub fn mount(rig: &mut Rig, slot: u32, drive: u32) -> SimDrive {
    rig.mv(slot_addr(slot), drive_addr(drive));
    let mut d = rig.drive(drive);
    load(&mut d);
    d
}
