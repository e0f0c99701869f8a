//! Changer checks: inventory, MOVE MEDIUM and its errors.

use std::collections::HashSet;

use super::context::{Ctx, expect_sense, ok};
use crate::sdk::Element;
use crate::types::*;

/// Inventory: valid element kinds, unique addresses, the kit's drive present, full/empty and
/// barcodes consistent, and a second inventory identical to the first.
pub(super) fn inventory(ctx: &mut Ctx) -> Result<(), String> {
    let inv = ctx.inventory()?;
    if inv.is_empty() {
        return Err("inventory returned no elements".into());
    }
    let mut addresses = HashSet::new();
    let mut barcodes = HashSet::new();
    for e in &inv {
        if !matches!(
            e.kind,
            REEL_ELEMENT_PICKER
                | REEL_ELEMENT_SLOT
                | REEL_ELEMENT_IMPORT_EXPORT
                | REEL_ELEMENT_DRIVE
        ) {
            return Err(format!("element {} has unknown kind {}", e.address, e.kind));
        }
        if !addresses.insert(e.address) {
            return Err(format!("element address {} appears twice", e.address));
        }
        let full = e.flags & REEL_ELEMENT_FULL != 0;
        if !full && !e.barcode.is_empty() {
            return Err(format!(
                "empty element {} reports barcode {:?}",
                e.address, e.barcode
            ));
        }
        if !full && e.flags & (REEL_ELEMENT_WORM | REEL_ELEMENT_LOADED) != 0 {
            return Err(format!(
                "empty element {} has WORM or LOADED set",
                e.address
            ));
        }
        if full && !e.barcode.is_empty() && !barcodes.insert(e.barcode.clone()) {
            return Err(format!("barcode {} appears in two elements", e.barcode));
        }
    }
    let count = |k: u32| inv.iter().filter(|e| e.kind == k).count();
    if count(REEL_ELEMENT_SLOT) == 0 {
        return Err("inventory has no storage slot".into());
    }
    ctx.drive_element()?;
    let again = ctx.inventory()?;
    if again != inv {
        return Err("two inventories in a row differ with nothing moved".into());
    }
    Ok(())
}

/// `library_info` (ABI 1.1), optional: a plugin that cannot tell answers
/// `REEL_E_UNSUPPORTED`; one that answers gives a non-empty serial number of printable ASCII,
/// the same at every call (hosts name the library by it).
pub(super) fn library_info(ctx: &mut Ctx) -> Result<(), String> {
    let first = match ctx.library.info() {
        Ok(i) => i,
        Err(e) if e.code == REEL_E_UNSUPPORTED => return Ok(()),
        Err(e) => return Err(format!("library_info: {e}")),
    };
    if first.serial.trim().is_empty() {
        return Err(
            "library_info succeeded with an empty serial number; answer REEL_E_UNSUPPORTED instead"
                .into(),
        );
    }
    for (what, v) in [
        ("vendor", &first.vendor),
        ("product", &first.product),
        ("serial", &first.serial),
    ] {
        if !v.chars().all(|c| c.is_ascii_graphic() || c == ' ') {
            return Err(format!("library_info {what} {v:?} is not printable ASCII"));
        }
    }
    let again = ok("library_info", ctx.library.info())?;
    if again != first {
        return Err(format!(
            "library_info changed between two calls: {first:?} then {again:?}"
        ));
    }
    Ok(())
}

fn find(inv: &[Element], address: u32) -> Result<&Element, String> {
    inv.iter()
        .find(|e| e.address == address)
        .ok_or_else(|| format!("element {address} vanished from the inventory"))
}

/// MOVE MEDIUM from an empty source (5/3B/0E) and to a full destination (5/3B/0D); the
/// inventory is unchanged afterwards.
pub(super) fn move_errors(ctx: &mut Ctx) -> Result<(), String> {
    ctx.dismount()?;
    let inv = ctx.inventory()?;
    let slots: Vec<&Element> = inv.iter().filter(|e| e.kind == REEL_ELEMENT_SLOT).collect();
    let empties: Vec<&&Element> = slots
        .iter()
        .filter(|e| e.flags & REEL_ELEMENT_FULL == 0)
        .collect();
    let fulls: Vec<&&Element> = slots
        .iter()
        .filter(|e| e.flags & REEL_ELEMENT_FULL != 0)
        .collect();
    if empties.len() < 2 || fulls.len() < 2 {
        return Err(format!(
            "the kit needs at least two full and two empty storage slots, found {} full and {} \
             empty; add cartridges or slots to the configuration",
            fulls.len(),
            empties.len()
        ));
    }
    let (e1, e2, f1, f2) = (
        empties[0].address,
        empties[1].address,
        fulls[0].address,
        fulls[1].address,
    );
    expect_sense(
        &format!("move from empty slot {e1} to empty slot {e2}"),
        ctx.library.move_medium(e1, e2),
        sense_key::ILLEGAL_REQUEST,
        asc::SOURCE_EMPTY,
        0,
    )?;
    expect_sense(
        &format!("move from full slot {f1} to full slot {f2}"),
        ctx.library.move_medium(f1, f2),
        sense_key::ILLEGAL_REQUEST,
        asc::DESTINATION_FULL,
        0,
    )?;
    if ctx.inventory()? != inv {
        return Err("a refused move changed the inventory".into());
    }
    Ok(())
}

/// A slot-to-slot move and back: the barcode travels, source and destination flip full/empty.
pub(super) fn move_round_trip(ctx: &mut Ctx) -> Result<(), String> {
    ctx.dismount()?;
    let from = ctx.scratch_slot(false)?;
    let to = ctx.empty_slot()?;
    ok(
        &format!("move {} -> {}", from.address, to.address),
        ctx.library.move_medium(from.address, to.address),
    )?;
    let inv = ctx.inventory()?;
    let (src, dst) = (find(&inv, from.address)?, find(&inv, to.address)?);
    if src.flags & REEL_ELEMENT_FULL != 0 || dst.flags & REEL_ELEMENT_FULL == 0 {
        return Err(format!(
            "after moving {} -> {} the inventory says source {} and destination {}",
            from.address,
            to.address,
            if src.flags & REEL_ELEMENT_FULL != 0 {
                "full"
            } else {
                "empty"
            },
            if dst.flags & REEL_ELEMENT_FULL != 0 {
                "full"
            } else {
                "empty"
            },
        ));
    }
    if dst.barcode != from.barcode {
        return Err(format!(
            "moved barcode {:?} but the destination reports {:?}",
            from.barcode, dst.barcode
        ));
    }
    ok(
        &format!("move {} -> {} (back)", to.address, from.address),
        ctx.library.move_medium(to.address, from.address),
    )?;
    let inv = ctx.inventory()?;
    if find(&inv, from.address)?.barcode != from.barcode {
        return Err("the cartridge did not come back to its slot".into());
    }
    Ok(())
}
