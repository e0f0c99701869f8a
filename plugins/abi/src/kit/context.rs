//! State shared by the checks: the open library and drive, which cartridge is where, and the
//! small assertion helpers every check uses. Every helper returns `Err(String)` with the reason
//! a check fails, so checks read as a straight line of `?`.

use crate::host::{CallError, DriveHandle, LibraryHandle};
use crate::sdk::Element;
use crate::types::*;

/// What the kit runs against.
#[derive(Clone, Debug, Default)]
pub struct KitOptions {
    /// Index of the drive to use (the `index` of its drive element).
    pub drive: u32,
    /// Barcode of the read-write scratch cartridge; default: the first full read-write slot.
    pub scratch_barcode: Option<String>,
    /// Barcode of the WORM scratch cartridge; default: the first full WORM slot.
    pub worm_barcode: Option<String>,
}

/// The cartridge currently in the drive, and the slot it goes back to.
#[derive(Clone, Debug)]
pub(super) struct Mounted {
    /// Its barcode.
    pub barcode: String,
    /// The storage slot it returns to.
    pub home: u32,
    /// Whether it is the WORM scratch cartridge.
    pub worm: bool,
}

/// What the checks share: handles, where the scratch cartridges are, what is on the tape.
pub(super) struct Ctx {
    /// The open library.
    pub library: LibraryHandle,
    /// The kit's options.
    pub opts: KitOptions,
    drive: Option<DriveHandle>,
    /// The cartridge threaded in the drive (None: empty or unknown).
    pub mounted: Option<Mounted>,
    /// Whether the medium in the drive is loaded (LOAD succeeded, UA cleared).
    pub loaded: bool,
    /// Whether the reference layout is on the loaded scratch cartridge.
    pub layout_written: bool,
}

/// The reference layout written from BOT by [`Ctx::reference_layout`]:
/// `R0 R1 R2 FM R3 R4 FM R5 EOD` (blocks 0..=7, EOD at block 8, file 2).
pub(super) const LAYOUT: &[Option<usize>] = &[
    Some(80),
    Some(4096),
    Some(1000),
    None,
    Some(65536),
    Some(1),
    None,
    Some(3000),
];
/// Block number of end of data after [`LAYOUT`].
pub(super) const LAYOUT_EOD: u64 = 8;
/// File number at end of data after [`LAYOUT`].
pub(super) const LAYOUT_EOD_FILE: u64 = 2;

/// Deterministic record content: record `seed`, `len` bytes. Different seeds differ in their
/// first bytes so a record read from the wrong block is caught.
pub(super) fn pattern(seed: u64, len: usize) -> Vec<u8> {
    let mut x = seed.wrapping_mul(0x9E37_79B9_7F4A_7C15) | 1;
    (0..len)
        .map(|_| {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            (x >> 24) as u8
        })
        .collect()
}

/// Describe a call result for a failure message.
pub(super) fn describe<T>(r: &Result<T, CallError>) -> String {
    match r {
        Ok(_) => "success".to_string(),
        Err(e) => e.to_string(),
    }
}

/// Require a CHECK CONDITION with the given sense key and ASC/ASCQ and every bit of `flags`.
pub(super) fn expect_sense<T>(
    what: &str,
    r: Result<T, CallError>,
    key: u8,
    asc: (u8, u8),
    flags: u32,
) -> Result<CallError, String> {
    match r {
        Err(e)
            if e.code == REEL_E_CHECK_CONDITION
                && e.sense() == (key, asc.0, asc.1)
                && e.status.flags & flags == flags =>
        {
            Ok(e)
        }
        other => Err(format!(
            "{what}: expected CHECK CONDITION {key:X}/{:02X}/{:02X}{}, got {}{}",
            asc.0,
            asc.1,
            flag_names(flags),
            describe(&other),
            match &other {
                Err(e) => format!(" flags{}", flag_names(e.status.flags)),
                Ok(_) => String::new(),
            }
        )),
    }
}

/// ` [FILEMARK EOM]` style rendering of status flags.
pub(super) fn flag_names(flags: u32) -> String {
    let names: Vec<&str> = [
        (REEL_FLAG_FILEMARK, "FILEMARK"),
        (REEL_FLAG_EOM, "EOM"),
        (REEL_FLAG_ILI, "ILI"),
    ]
    .iter()
    .filter(|(b, _)| flags & b != 0)
    .map(|(_, n)| *n)
    .collect();
    if names.is_empty() {
        String::new()
    } else {
        format!(" [{}]", names.join(" "))
    }
}

/// Require success.
pub(super) fn ok<T>(what: &str, r: Result<T, CallError>) -> Result<T, String> {
    r.map_err(|e| format!("{what}: {e}"))
}

impl Ctx {
    /// A context over an open library; the drive is opened on first use.
    pub fn new(library: LibraryHandle, opts: KitOptions) -> Self {
        Ctx {
            library,
            opts,
            drive: None,
            mounted: None,
            loaded: false,
            layout_written: false,
        }
    }

    /// Whether the plugin claims a changer (`REEL_CAP_CHANGER`).
    pub fn has_changer(&self) -> bool {
        self.library.plugin().has_cap(REEL_CAP_CHANGER)
    }

    /// The drive handle, opened on first use.
    pub fn drive(&mut self) -> Result<&mut DriveHandle, String> {
        if self.drive.is_none() {
            let d = ok(
                &format!("drive_open({})", self.opts.drive),
                self.library.open_drive(self.opts.drive),
            )?;
            self.drive = Some(d);
        }
        self.drive
            .as_mut()
            .ok_or_else(|| "drive handle unavailable".to_string())
    }

    /// Every changer element.
    pub fn inventory(&mut self) -> Result<Vec<Element>, String> {
        ok("library_inventory", self.library.inventory())
    }

    /// The drive element the kit uses.
    pub fn drive_element(&mut self) -> Result<Element, String> {
        let index = self.opts.drive;
        self.inventory()?
            .into_iter()
            .find(|e| e.kind == REEL_ELEMENT_DRIVE && e.index == index)
            .ok_or_else(|| format!("inventory has no drive element with index {index}"))
    }

    /// A full storage slot holding the wanted kind of scratch cartridge.
    pub fn scratch_slot(&mut self, worm: bool) -> Result<Element, String> {
        let wanted = if worm {
            self.opts.worm_barcode.clone()
        } else {
            self.opts.scratch_barcode.clone()
        };
        let inv = self.inventory()?;
        inv.into_iter()
            .find(|e| {
                e.kind == REEL_ELEMENT_SLOT
                    && e.flags & REEL_ELEMENT_FULL != 0
                    && (e.flags & REEL_ELEMENT_WORM != 0) == worm
                    && wanted.as_ref().is_none_or(|b| *b == e.barcode)
            })
            .ok_or_else(|| {
                format!(
                    "no {} scratch cartridge{} in a storage slot; put one in the library \
                     configuration",
                    if worm { "WORM" } else { "read-write" },
                    wanted
                        .map(|b| format!(" with barcode {b}"))
                        .unwrap_or_default()
                )
            })
    }

    /// Accept at most one UNIT ATTENTION from TEST UNIT READY, then require ready.
    pub fn clear_unit_attention(&mut self) -> Result<(), String> {
        let d = self.drive()?;
        match d.test_ready() {
            Ok(()) => Ok(()),
            Err(e) if e.status.sense_key == sense_key::UNIT_ATTENTION => {
                ok("test_ready after unit attention", d.test_ready())
            }
            Err(e) => Err(format!("test_ready after load: {e}")),
        }
    }

    /// Unload and put the mounted cartridge back in its slot (changer) or just unload.
    pub fn dismount(&mut self) -> Result<(), String> {
        if self.loaded {
            ok("drive_unload", self.drive()?.unload())?;
            self.loaded = false;
        }
        self.layout_written = false;
        if let Some(m) = self.mounted.take() {
            let drive = self.drive_element()?;
            ok(
                &format!("move {} from drive back to slot {}", m.barcode, m.home),
                self.library.move_medium(drive.address, m.home),
            )?;
        }
        Ok(())
    }

    /// Make sure the wanted scratch cartridge is loaded and ready at an unknown position.
    pub fn mount(&mut self, worm: bool) -> Result<(), String> {
        if self.loaded && self.mounted.as_ref().is_none_or(|m| m.worm == worm) {
            return Ok(());
        }
        if !self.has_changer() {
            if worm {
                return Err("WORM checks need a changer".into());
            }
            ok("drive_load", self.drive()?.load())?;
            self.loaded = true;
            return self.clear_unit_attention();
        }
        self.dismount()?;
        let drive = self.drive_element()?;
        if drive.flags & REEL_ELEMENT_FULL != 0 {
            // Left over from an earlier run: send it home.
            let home = if drive.source_address != 0 {
                drive.source_address
            } else {
                self.empty_slot()?.address
            };
            let _ = self.drive()?.unload();
            ok(
                "return the cartridge found in the drive",
                self.library.move_medium(drive.address, home),
            )?;
        }
        let slot = self.scratch_slot(worm)?;
        ok(
            &format!(
                "move {} from slot {} to drive {}",
                slot.barcode, slot.address, drive.address
            ),
            self.library.move_medium(slot.address, drive.address),
        )?;
        self.mounted = Some(Mounted {
            barcode: slot.barcode,
            home: slot.address,
            worm,
        });
        ok("drive_load", self.drive()?.load())?;
        self.loaded = true;
        self.clear_unit_attention()
    }

    /// An empty storage slot.
    pub fn empty_slot(&mut self) -> Result<Element, String> {
        self.inventory()?
            .into_iter()
            .find(|e| e.kind == REEL_ELEMENT_SLOT && e.flags & REEL_ELEMENT_FULL == 0)
            .ok_or_else(|| "no empty storage slot; the kit needs one free slot".to_string())
    }

    /// READ POSITION.
    pub fn position(&mut self) -> Result<ReelPosition, String> {
        ok("read_position", self.drive()?.read_position())
    }

    /// Require the logical position `(block, file)`.
    pub fn expect_position(&mut self, what: &str, block: u64, file: u64) -> Result<(), String> {
        let p = self.position()?;
        if p.flags & REEL_POS_UNKNOWN != 0 {
            return Err(format!("{what}: position reported unknown"));
        }
        if (p.block, p.file) != (block, file) {
            return Err(format!(
                "{what}: expected block {block} file {file}, read_position says block {} file {}",
                p.block, p.file
            ));
        }
        Ok(())
    }

    /// Read the next record and require it to equal `expected`.
    pub fn expect_record(&mut self, what: &str, expected: &[u8]) -> Result<(), String> {
        let mut buf = vec![0u8; expected.len().max(1) + 4096];
        let r = ok(what, self.drive()?.read_record(&mut buf))?;
        if r.len != expected.len() {
            return Err(format!(
                "{what}: record of {} bytes read, {} written",
                r.len,
                expected.len()
            ));
        }
        if buf[..r.len] != *expected {
            return Err(format!(
                "{what}: record content differs from what was written"
            ));
        }
        Ok(())
    }

    /// Write [`LAYOUT`] from BOT on the read-write scratch cartridge (once per mount).
    pub fn reference_layout(&mut self) -> Result<(), String> {
        self.mount(false)?;
        if self.layout_written {
            return Ok(());
        }
        if self.library.plugin().has_cap(REEL_CAP_LBP) {
            ok("set_lbp(OFF)", self.drive()?.set_lbp(REEL_LBP_OFF))?;
        }
        let d = self.drive()?;
        ok("rewind", d.rewind())?;
        for (block, entry) in LAYOUT.iter().enumerate() {
            match entry {
                Some(len) => ok(
                    &format!("write record {block} of the reference layout"),
                    d.write_record(&pattern(block as u64, *len), None),
                )?,
                None => ok(
                    &format!("write filemark {block} of the reference layout"),
                    d.write_filemarks(1, false),
                )?,
            }
        }
        self.expect_position("after the reference layout", LAYOUT_EOD, LAYOUT_EOD_FILE)?;
        self.layout_written = true;
        Ok(())
    }

    /// Best-effort cleanup: unload and return the cartridge home, then close the drive.
    pub fn finish(&mut self) {
        let _ = self.dismount();
        self.drive = None;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn pattern_is_deterministic_and_seed_dependent() {
        assert_eq!(pattern(3, 64), pattern(3, 64));
        assert_ne!(pattern(3, 64), pattern(4, 64));
        assert_eq!(pattern(5, 10)[..], pattern(5, 100)[..10]);
        assert!(pattern(0, 0).is_empty());
    }

    #[test]
    fn layout_constants_agree() {
        assert_eq!(LAYOUT.len() as u64, LAYOUT_EOD);
        assert_eq!(
            LAYOUT.iter().filter(|e| e.is_none()).count() as u64,
            LAYOUT_EOD_FILE
        );
    }

    #[test]
    fn expect_sense_accepts_only_the_named_sense() {
        let mut st = ReelStatus::new();
        st.sense_key = sense_key::NO_SENSE;
        st.asc = 0;
        st.ascq = 1;
        st.flags = REEL_FLAG_FILEMARK | REEL_FLAG_SENSE_VALID;
        let e = CallError {
            code: REEL_E_CHECK_CONDITION,
            status: st,
            call: "drive_read_record",
        };
        assert!(
            expect_sense(
                "x",
                Err::<(), _>(e.clone()),
                0,
                asc::FILEMARK,
                REEL_FLAG_FILEMARK
            )
            .is_ok()
        );
        let why = expect_sense(
            "x",
            Err::<(), _>(e.clone()),
            0,
            asc::FILEMARK,
            REEL_FLAG_EOM,
        )
        .unwrap_err();
        assert!(why.contains("[EOM]"), "{why}");
        assert!(expect_sense("x", Err::<(), _>(e.clone()), 8, asc::END_OF_DATA, 0).is_err());
        assert!(expect_sense("x", Ok(()), 0, asc::FILEMARK, 0).is_err());
    }
}
