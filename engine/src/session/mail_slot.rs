//! The library's import/export elements (mail slots): a cartridge sent out of the storage
//! slots for vaulting, and cartridges an operator put in taken into empty storage slots.
//! Robot moves only: what the catalogue records about them is the caller's
//! ([`crate::catalogue::Catalogue::send_to_vault`] and its kin).
//!
//! A cartridge loaded in a drive is not moved from there: it goes out once the drive has
//! unloaded it. A cartridge taken in never goes to the home slot of a cartridge now in a
//! drive, so that cartridge goes back where it came from.

use std::collections::BTreeSet;

use reel_plugin_abi::sdk::Element;
use reel_plugin_abi::{
    REEL_ELEMENT_DRIVE, REEL_ELEMENT_FULL, REEL_ELEMENT_IMPORT_EXPORT, REEL_ELEMENT_SLOT,
};
use tracing::info;

use super::SessionError;
use super::mount::find_cartridge;
use crate::device::Library;

/// What became of a cartridge to send out.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum SendOut {
    /// Moved to the import/export element with this index.
    Moved {
        /// The element's index.
        ie: u32,
    },
    /// Already in the import/export element with this index.
    InMailSlot {
        /// The element's index.
        ie: u32,
    },
    /// This library does not hold it: an operator took it out, or it is in another library
    /// sharing the catalogue (whose worker sends it out).
    NotInLibrary,
    /// In the drive with this index: it goes out once the drive has unloaded it.
    InDrive {
        /// The drive's index.
        drive: u32,
    },
    /// Every import/export element is full: it waits for an operator to empty one.
    MailSlotsFull,
    /// The library has no import/export elements: an operator takes it out by hand.
    NoMailSlots,
}

impl SendOut {
    /// Whether the cartridge has left this library's storage slots for a mail slot. One this
    /// library does not hold is not counted: it may be in another library, whose worker moves
    /// it.
    pub fn has_left(&self) -> bool {
        matches!(self, SendOut::Moved { .. } | SendOut::InMailSlot { .. })
    }
}

impl std::fmt::Display for SendOut {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            SendOut::Moved { ie } => write!(f, "moved to mail slot {ie}"),
            SendOut::InMailSlot { ie } => write!(f, "in mail slot {ie}"),
            SendOut::NotInLibrary => write!(f, "not in this library"),
            SendOut::InDrive { drive } => {
                write!(f, "in drive {drive}; it goes out once the drive unloads it")
            }
            SendOut::MailSlotsFull => write!(
                f,
                "waiting for a free mail slot (take the cartridges out of the full ones)"
            ),
            SendOut::NoMailSlots => write!(
                f,
                "the library has no mail slots: take it out of its slot by hand"
            ),
        }
    }
}

fn is_full(e: &Element) -> bool {
    e.flags & REEL_ELEMENT_FULL != 0
}

/// Move `barcode` from its storage slot to the first empty import/export element.
pub async fn send_out(library: &Library, barcode: &str) -> Result<SendOut, SessionError> {
    let inv = library.inventory().await?;
    let Some(at) = find_cartridge(&inv, barcode).cloned() else {
        return Ok(SendOut::NotInLibrary);
    };
    match at.kind {
        REEL_ELEMENT_IMPORT_EXPORT => return Ok(SendOut::InMailSlot { ie: at.index }),
        REEL_ELEMENT_DRIVE => return Ok(SendOut::InDrive { drive: at.index }),
        REEL_ELEMENT_SLOT => {}
        other => {
            return Err(SessionError::Other(format!(
                "the library reports cartridge {barcode} in an element of type {other} at \
                 address {}; move it to a storage slot by hand",
                at.address
            )));
        }
    }
    if !inv.iter().any(|e| e.kind == REEL_ELEMENT_IMPORT_EXPORT) {
        return Ok(SendOut::NoMailSlots);
    }
    let free = inv
        .iter()
        .find(|e| e.kind == REEL_ELEMENT_IMPORT_EXPORT && !is_full(e))
        .cloned();
    let Some(free) = free else {
        return Ok(SendOut::MailSlotsFull);
    };
    library
        .export(at.address, free.address)
        .await
        .map_err(|e| SessionError::Cartridge {
            barcode: barcode.to_string(),
            reason: format!(
                "the robot could not move it from slot {} to mail slot {}: {e}",
                at.index, free.index
            ),
        })?;
    info!(
        barcode,
        slot = at.index,
        mail_slot = free.index,
        "sent out to a mail slot"
    );
    Ok(SendOut::Moved { ie: free.index })
}

/// A cartridge found in an import/export element by [`take_in`].
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct TakenIn {
    /// Its barcode (empty: it has no readable barcode label).
    pub barcode: String,
    /// The import/export element's index.
    pub ie: u32,
    /// The storage slot's index it went to, or why it stayed.
    pub outcome: Result<u32, String>,
}

/// Take what the import/export elements hold into empty storage slots: every cartridge, or
/// those in `only`. A cartridge with no barcode stays where it is (reel could not track it);
/// so does every cartridge once no empty slot is left.
pub async fn take_in(
    library: &Library,
    only: Option<&BTreeSet<String>>,
) -> Result<Vec<TakenIn>, SessionError> {
    let inv = library.inventory().await?;
    // Homes of cartridges now in drives: they go back there.
    let homes: BTreeSet<u32> = inv
        .iter()
        .filter(|e| e.kind == REEL_ELEMENT_DRIVE && is_full(e) && e.source_address != 0)
        .map(|e| e.source_address)
        .collect();
    // Empty slots, those that are no drive cartridge's home first.
    let mut empty: Vec<Element> = inv
        .iter()
        .filter(|e| e.kind == REEL_ELEMENT_SLOT && !is_full(e))
        .cloned()
        .collect();
    empty.sort_by_key(|e| homes.contains(&e.address));
    let mut empty = empty.into_iter();
    let full_mail_slots: Vec<Element> = inv
        .iter()
        .filter(|e| e.kind == REEL_ELEMENT_IMPORT_EXPORT && is_full(e))
        .cloned()
        .collect();
    let mut out = Vec::new();
    for e in &full_mail_slots {
        if only.is_some_and(|o| !o.contains(&e.barcode)) {
            continue;
        }
        let outcome = if e.barcode.is_empty() {
            Err("it has no readable barcode label; label it and put it back".to_string())
        } else {
            match empty.next() {
                None => Err("no empty storage slot; send a cartridge out first".to_string()),
                Some(slot) => match library.import(e.address, slot.address).await {
                    Ok(_) => {
                        info!(barcode = %e.barcode, mail_slot = e.index, slot = slot.index, "taken in");
                        Ok(slot.index)
                    }
                    Err(err) => Err(format!(
                        "the robot could not move it to slot {}: {err}",
                        slot.index
                    )),
                },
            }
        };
        out.push(TakenIn {
            barcode: e.barcode.clone(),
            ie: e.index,
            outcome,
        });
    }
    Ok(out)
}
