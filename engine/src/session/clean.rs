//! Cleaning a drive with one of the library's cleaning cartridges, through the changer.
//!
//! A cleaning cartridge is one the changer reports as cleaning media
//! ([`REEL_ELEMENT_CLEANING`], SMC medium type 2h) or whose barcode starts with the configured
//! prefix (`CLN` by default, the industry's convention). reel never takes one in as data.
//!
//! [`clean`] moves a usable cleaning cartridge from its slot into the empty drive and has the
//! drive load it: the drive cleans its head (a real drive takes a minute or two, reported as
//! "becoming ready", and may answer that a cleaning cartridge is installed) and does not
//! thread it. The drive's TapeAlert flags then say whether the cartridge was used up (flag 22,
//! expired cleaning media; 23, invalid cleaning tape). The cartridge goes back to its slot
//! either way. What reel counts (uses, expiry) is the caller's to record.

use reel_plugin_abi::sdk::Element;
use reel_plugin_abi::{
    REEL_ELEMENT_CLEANING, REEL_ELEMENT_DRIVE, REEL_ELEMENT_FULL, REEL_ELEMENT_SLOT,
};
use tracing::{info, warn};

use super::SessionError;
use crate::device::{DeviceError, Drive, Library};

/// Whether the full element `e` holds a cleaning cartridge: the changer says so, or its
/// barcode starts with `prefix` (empty: the changer's word only).
pub fn is_cleaning(e: &Element, prefix: &str) -> bool {
    e.flags & REEL_ELEMENT_FULL != 0
        && (e.flags & REEL_ELEMENT_CLEANING != 0
            || (!prefix.is_empty() && e.barcode.starts_with(prefix)))
}

/// Whether `barcode` is a cleaning cartridge's by its prefix alone (for a cartridge the
/// changer is not reporting now).
pub fn has_cleaning_prefix(barcode: &str, prefix: &str) -> bool {
    !prefix.is_empty() && barcode.starts_with(prefix)
}

/// What a cleaning did.
#[derive(Clone, Debug, PartialEq)]
pub enum Cleaned {
    /// The drive was cleaned with this cartridge.
    Done {
        /// The cleaning cartridge.
        barcode: String,
        /// Seconds the robot and the drive took.
        seconds: f64,
    },
    /// The cartridge is used up (TapeAlert 22 or 23): the drive was not cleaned.
    Expired {
        /// The cleaning cartridge.
        barcode: String,
        /// The flags the drive raised.
        flags: Vec<u8>,
    },
    /// The library holds no cleaning cartridge reel may use.
    NoCartridge,
}

/// TapeAlert flags that say the cleaning cartridge did not clean.
const SPENT_FLAGS: [u8; 2] = [22, 23];

/// Clean `drive` (empty) with the first cleaning cartridge in a storage slot for which
/// `usable` holds, and put the cartridge back.
pub async fn clean(
    library: &Library,
    drive: &Drive,
    prefix: &str,
    usable: impl Fn(&str) -> bool,
) -> Result<Cleaned, SessionError> {
    let inv = library.inventory().await?;
    let de = inv
        .iter()
        .find(|e| e.kind == REEL_ELEMENT_DRIVE && e.index == drive.index())
        .cloned()
        .ok_or_else(|| {
            SessionError::Other(format!(
                "the library reports no drive with index {}",
                drive.index()
            ))
        })?;
    if de.flags & REEL_ELEMENT_FULL != 0 {
        return Err(SessionError::Other(format!(
            "drive {} holds {}: unload it before cleaning",
            drive.index(),
            if de.barcode.is_empty() {
                "a cartridge"
            } else {
                &de.barcode
            }
        )));
    }
    let found = inv
        .iter()
        .find(|e| e.kind == REEL_ELEMENT_SLOT && is_cleaning(e, prefix) && usable(&e.barcode))
        .cloned();
    let Some(from) = found else {
        return Ok(Cleaned::NoCartridge);
    };
    let barcode = from.barcode.clone();
    let mut seconds = super::secs(library.move_medium(from.address, de.address).await?);
    let loaded = load_cleaning(drive).await;
    let flags = match drive.tape_alerts().await {
        Ok(bits) => (1..=64u8)
            .filter(|f| bits & (1u64 << (f - 1)) != 0)
            .collect::<Vec<_>>(),
        Err(e) => {
            warn!(drive = drive.index(), error = %e, "cannot read the TapeAlert flags after cleaning");
            Vec::new()
        }
    };
    // The drive ejects a cleaning cartridge itself; an unload that finds it so is no fault.
    match drive.unload().await {
        Ok(ns) => seconds += super::secs(ns),
        Err(DeviceError::NotReady { .. }) => {}
        Err(e) => {
            warn!(drive = drive.index(), error = %e, "unload after cleaning failed; moving the cartridge anyway")
        }
    }
    seconds += super::secs(
        library
            .move_medium(de.address, from.address)
            .await
            .map_err(|e| {
                SessionError::Other(format!(
                    "cleaning cartridge {barcode} cannot go back from drive {} to slot {}: {e}; \
             `reel drive reset` the drive once it is down",
                    drive.index(),
                    from.index
                ))
            })?,
    );
    match loaded {
        Err(e) => Err(SessionError::Other(format!(
            "drive {} did not take cleaning cartridge {barcode}: {e}",
            drive.index()
        ))),
        Ok(()) if flags.iter().any(|f| SPENT_FLAGS.contains(f)) => {
            warn!(drive = drive.index(), %barcode, ?flags, "the cleaning cartridge is used up");
            Ok(Cleaned::Expired { barcode, flags })
        }
        Ok(()) => {
            info!(drive = drive.index(), %barcode, seconds, "drive cleaned");
            Ok(Cleaned::Done { barcode, seconds })
        }
    }
}

/// Have the drive take the cleaning cartridge the robot put in it. A drive reports a cleaning
/// cartridge installed (30h) or still becoming ready when it cleans; both mean it took it. A
/// "cleaning requested" it had yet to report is reported first: load again.
async fn load_cleaning(drive: &Drive) -> Result<(), DeviceError> {
    let mut pending_report = true;
    loop {
        let Err(e) = drive.load().await else {
            return Ok(());
        };
        match e.sense() {
            Some((_, 0x30, _)) | Some((_, 0x04, _)) => return Ok(()),
            Some((_, 0x00, 0x17)) if std::mem::take(&mut pending_report) => {}
            _ => return Err(e),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn el(flags: u32, barcode: &str) -> Element {
        Element {
            kind: REEL_ELEMENT_SLOT,
            address: 1024,
            index: 0,
            flags,
            source_address: 0,
            barcode: barcode.into(),
        }
    }

    #[test]
    fn cleaning_media_by_the_changer_or_by_prefix() {
        assert!(is_cleaning(&el(REEL_ELEMENT_FULL, "CLN001L1"), "CLN"));
        assert!(is_cleaning(
            &el(REEL_ELEMENT_FULL | REEL_ELEMENT_CLEANING, "XX0001L1"),
            "CLN"
        ));
        assert!(!is_cleaning(&el(REEL_ELEMENT_FULL, "RL0001L9"), "CLN"));
        assert!(!is_cleaning(&el(REEL_ELEMENT_FULL, "CLN001L1"), ""));
        // An empty element holds nothing.
        assert!(!is_cleaning(&el(REEL_ELEMENT_CLEANING, "CLN001L1"), "CLN"));
        assert!(has_cleaning_prefix("CLN9", "CLN"));
        assert!(!has_cleaning_prefix("CLN9", ""));
    }
}
