//! Media health: what a drive says about itself and its cartridge each time a cartridge leaves
//! it. At every unmount the drive's TapeAlert flags and the change in its statistics while the
//! cartridge was loaded (bytes, read-retry repositions, backhitches) are read ([`Reading`]) and
//! sent to the host's [`HealthLog`]; the service keeps them in the catalogue, per drive and per
//! cartridge, with history (`reel cartridge show`, `reel drive show`), and stops writes to a
//! cartridge whose medium alerts reach the limit.
//!
//! TapeAlert (SSC-4 Annex A, LOG SENSE page 2Eh) reports up to 64 flags; the ABI carries them as
//! a bitmap, flag *n* in bit *n − 1*. [`flag_name`] names them and [`concern`] sorts them into
//! what they are about: the medium, the drive, cleaning, or neither.

use tokio::sync::mpsc;

/// What one unmount found.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Reading {
    /// The cartridge that left the drive.
    pub barcode: String,
    /// The library's name, as the host names its drives (`LIBRARY-INDEX`); empty until the
    /// host has named it ([`crate::service::TapeService::name_library`]).
    pub library: String,
    /// The drive's index in its library.
    pub drive: u32,
    /// The drive's serial number (its identity across re-cabling and renumbering).
    pub drive_serial: String,
    /// When (unix seconds).
    pub unix: i64,
    /// TapeAlert flags set at the unmount (flag n in bit n − 1); 0 when the drive reports none
    /// or cannot.
    pub tape_alerts: u64,
    /// Bytes written while the cartridge was loaded, when the drive counts them.
    pub bytes_written: Option<u64>,
    /// Bytes read while the cartridge was loaded.
    pub bytes_read: Option<u64>,
    /// Read-retry repositions while it was loaded (the drive recovering errors).
    pub repositions: Option<u64>,
    /// Backhitches while it was loaded (underrun and synchronous stops).
    pub backhitches: Option<u64>,
    /// Write and read errors the drive corrected, and those it could not, while it was
    /// loaded (SCSI log pages 02h and 03h), where the drive counts them.
    pub errors: ErrorCounts,
}

/// A drive's error counters over one load; `None` where the drive does not count.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, serde::Serialize)]
pub struct ErrorCounts {
    /// Write errors corrected (rewrites).
    pub write_corrected: Option<u64>,
    /// Write errors not corrected.
    pub write_uncorrected: Option<u64>,
    /// Read errors corrected (retries, ECC).
    pub read_corrected: Option<u64>,
    /// Read errors not corrected.
    pub read_uncorrected: Option<u64>,
}

impl ErrorCounts {
    /// In words for people: `read errors 3 corrected, 1 not; write errors 0 corrected, ?
    /// not` (`?`: not counted); a side the drive does not count at all is left out, and all
    /// of it when it counts nothing.
    pub fn describe(&self) -> String {
        let n = |v: Option<u64>| v.map_or("?".to_string(), |n| n.to_string());
        let side = |what: &str, c: Option<u64>, u: Option<u64>| -> Option<String> {
            (c.is_some() || u.is_some())
                .then(|| format!("{what} errors {} corrected, {} not", n(c), n(u)))
        };
        [
            side("read", self.read_corrected, self.read_uncorrected),
            side("write", self.write_corrected, self.write_uncorrected),
        ]
        .into_iter()
        .flatten()
        .collect::<Vec<_>>()
        .join("; ")
    }
}

/// What a TapeAlert flag is about.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Concern {
    /// The medium is failing or worn: writes to it should stop.
    Medium,
    /// The drive needs service.
    Drive,
    /// The drive asks for cleaning, or a cleaning cartridge is spent or wrong.
    Cleaning,
    /// Informational, or about the library or the host.
    Other,
}

/// The name of TapeAlert flag `flag` (1..=64), as SSC-4 gives it.
pub fn flag_name(flag: u8) -> &'static str {
    match flag {
        1 => "read warning",
        2 => "write warning",
        3 => "hard error",
        4 => "media",
        5 => "read failure",
        6 => "write failure",
        7 => "media life",
        8 => "not data grade",
        9 => "write protect",
        10 => "no removal",
        11 => "cleaning media",
        12 => "unsupported format",
        13 => "recoverable mechanical cartridge failure",
        14 => "unrecoverable mechanical cartridge failure",
        15 => "memory chip in cartridge failure",
        16 => "forced eject",
        17 => "read only format",
        18 => "tape directory corrupted on load",
        19 => "nearing media life",
        20 => "clean now",
        21 => "clean periodic",
        22 => "expired cleaning media",
        23 => "invalid cleaning tape",
        24 => "retension requested",
        25 => "dual-port interface error",
        26 => "cooling fan failure",
        27 => "power supply failure",
        28 => "power consumption",
        29 => "drive maintenance",
        30 => "hardware A",
        31 => "hardware B",
        32 => "interface",
        33 => "eject media",
        34 => "microcode update fail",
        35 => "drive humidity",
        36 => "drive temperature",
        37 => "drive voltage",
        38 => "predictive failure",
        39 => "diagnostics required",
        49 => "lost statistics",
        50 => "tape directory invalid at unload",
        51 => "tape system area write failure",
        52 => "tape system area read failure",
        53 => "no start of data",
        54 => "loading failure",
        55 => "unrecoverable unload failure",
        56 => "automation interface failure",
        57 => "microcode failure",
        58 => "WORM medium integrity check failed",
        59 => "WORM medium overwrite attempted",
        _ => "obsolete or vendor specific",
    }
}

/// What TapeAlert flag `flag` is about.
pub fn concern(flag: u8) -> Concern {
    match flag {
        4..=8 | 13..=15 | 18 | 19 | 50..=53 | 58 => Concern::Medium,
        20..=23 => Concern::Cleaning,
        25..=39 | 54 | 55 | 57 => Concern::Drive,
        _ => Concern::Other,
    }
}

/// The flags set in `bits`, lowest first.
pub fn flags(bits: u64) -> Vec<u8> {
    (1..=64u8)
        .filter(|f| bits & (1u64 << (f - 1)) != 0)
        .collect()
}

/// The flags of `bits` that are about `what`.
pub fn flags_of(bits: u64, what: Concern) -> Vec<u8> {
    flags(bits)
        .into_iter()
        .filter(|f| concern(*f) == what)
        .collect()
}

/// `bits` in words: `4 media, 20 clean now`; empty for none.
pub fn describe(bits: u64) -> String {
    flags(bits)
        .into_iter()
        .map(|f| format!("{f} {}", flag_name(f)))
        .collect::<Vec<_>>()
        .join(", ")
}

/// Where drives send their [`Reading`]s. The default only logs them; [`HealthLog::channel`] gives the receiving end to a task that keeps them.
#[derive(Debug, Clone, Default)]
pub struct HealthLog {
    tx: Option<mpsc::UnboundedSender<Reading>>,
}

impl HealthLog {
    /// A log and the receiver of what is sent to it.
    pub fn channel() -> (HealthLog, mpsc::UnboundedReceiver<Reading>) {
        let (tx, rx) = mpsc::unbounded_channel();
        (HealthLog { tx: Some(tx) }, rx)
    }

    /// Send one reading (traced either way; alerts at warn).
    pub fn report(&self, r: Reading) {
        if r.tape_alerts != 0 {
            tracing::warn!(
                barcode = %r.barcode,
                drive = r.drive,
                alerts = %describe(r.tape_alerts),
                "TapeAlert flags at unmount"
            );
        } else {
            tracing::debug!(barcode = %r.barcode, drive = r.drive, "no TapeAlert flag at unmount");
        }
        if let Some(tx) = &self.tx {
            let _ = tx.send(r);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn flags_are_numbered_from_one() {
        let bits = (1u64 << 3) | (1u64 << 19) | (1u64 << 29);
        assert_eq!(flags(bits), vec![4, 20, 30]);
        assert_eq!(describe(bits), "4 media, 20 clean now, 30 hardware A");
        assert_eq!(flags_of(bits, Concern::Medium), vec![4]);
        assert_eq!(flags_of(bits, Concern::Cleaning), vec![20]);
        assert_eq!(flags_of(bits, Concern::Drive), vec![30]);
        assert_eq!(flags(1u64 << 63), vec![64]);
        assert!(describe(0).is_empty());
    }
}
