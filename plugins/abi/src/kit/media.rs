//! Medium checks: load/unload, unit attention after a load, MAM and WORM.

use super::context::{Ctx, expect_sense, ok, pattern};
use crate::types::*;

/// Load the scratch cartridge, find it at BOT, unload it, and (with a changer) see the
/// inventory follow.
pub(super) fn load_unload(ctx: &mut Ctx) -> Result<(), String> {
    ctx.mount(false)?;
    let p = ctx.position()?;
    if p.block != 0 || p.file != 0 || p.flags & REEL_POS_BOP == 0 {
        return Err(format!(
            "after load expected BOT (block 0, file 0, BOP flag), got block {} file {} flags {:#x}",
            p.block, p.file, p.flags
        ));
    }
    if ctx.has_changer() {
        let drive = ctx.drive_element()?;
        let barcode = ctx
            .mounted
            .as_ref()
            .map(|m| m.barcode.clone())
            .unwrap_or_default();
        if drive.flags & REEL_ELEMENT_FULL == 0 || drive.barcode != barcode {
            return Err(format!(
                "inventory does not show {barcode} in drive element {}",
                drive.address
            ));
        }
    }
    ctx.dismount()?;
    if ctx.has_changer() {
        let drive = ctx.drive_element()?;
        if drive.flags & REEL_ELEMENT_FULL != 0 {
            return Err("drive element still full after unload and move back".into());
        }
    }
    Ok(())
}

/// The first drive command after a successful LOAD gets UNIT ATTENTION 6/28/00, once.
pub(super) fn unit_attention(ctx: &mut Ctx) -> Result<(), String> {
    ctx.mount(false)?;
    ok("drive_unload", ctx.drive()?.unload())?;
    ctx.loaded = false;
    ctx.layout_written = false;
    ok("drive_load", ctx.drive()?.load())?;
    ctx.loaded = true;
    let first = ctx.drive()?.test_ready();
    expect_sense(
        "first command after load",
        first,
        sense_key::UNIT_ATTENTION,
        asc::MEDIUM_MAY_HAVE_CHANGED,
        0,
    )?;
    ok("second command after load", ctx.drive()?.test_ready())
}

/// MAM: two attributes written, read back, overwritten, and still there after a reload.
pub(super) fn mam(ctx: &mut Ctx) -> Result<(), String> {
    ctx.mount(false)?;
    let label = b"reel contract kit".to_vec();
    let pool = b"kit-pool-1".to_vec();
    let d = ctx.drive()?;
    ok(
        "mam_write USER_MEDIUM_TEXT_LABEL",
        d.mam_write(mam::USER_MEDIUM_TEXT_LABEL, &label),
    )?;
    ok(
        "mam_write MEDIA_POOL",
        d.mam_write(mam::MEDIA_POOL, b"first"),
    )?;
    ok(
        "mam_write MEDIA_POOL (overwrite)",
        d.mam_write(mam::MEDIA_POOL, &pool),
    )?;
    let check = |ctx: &mut Ctx, when: &str| -> Result<(), String> {
        let d = ctx.drive()?;
        let got = ok(
            "mam_read USER_MEDIUM_TEXT_LABEL",
            d.mam_read(mam::USER_MEDIUM_TEXT_LABEL),
        )?;
        if got != label {
            return Err(format!("{when}: USER_MEDIUM_TEXT_LABEL reads back {got:?}"));
        }
        let got = ok("mam_read MEDIA_POOL", d.mam_read(mam::MEDIA_POOL))?;
        if got != pool {
            return Err(format!(
                "{when}: MEDIA_POOL reads back {got:?} (overwrite lost?)"
            ));
        }
        Ok(())
    };
    check(ctx, "right after writing")?;
    ok("drive_unload", ctx.drive()?.unload())?;
    ctx.loaded = false;
    ctx.layout_written = false;
    ok("drive_load", ctx.drive()?.load())?;
    ctx.loaded = true;
    ctx.clear_unit_attention()?;
    check(ctx, "after unload and load")
}

/// WORM: blank or written, the cartridge accepts appends at EOD and refuses a write anywhere
/// else with DATA PROTECT 7/30/0C, leaving the data intact.
pub(super) fn worm(ctx: &mut Ctx) -> Result<(), String> {
    ctx.mount(true)?;
    let d = ctx.drive()?;
    ok("space to EOD", d.space(REEL_SPACE_EOD, 0))?;
    let eod = ok("read_position", d.read_position())?;
    if eod.block == 0 {
        // Blank WORM: write the first two records (allowed once).
        ok(
            "write record 0 on blank WORM",
            d.write_record(&pattern(100, 512), None),
        )?;
        ok(
            "write record 1 on blank WORM",
            d.write_record(&pattern(101, 512), None),
        )?;
    }
    ok("rewind", d.rewind())?;
    let mut first = vec![0u8; 65536];
    let r0 = ok("read record 0", d.read_record(&mut first))?;
    first.truncate(r0.len);
    ok("rewind", d.rewind())?;
    expect_sense(
        "write at BOT of a written WORM cartridge",
        d.write_record(&pattern(7, 512), None),
        sense_key::DATA_PROTECT,
        asc::WORM_OVERWRITE_ATTEMPTED,
        0,
    )?;
    ok("locate 1", d.locate(1))?;
    expect_sense(
        "write at block 1 of a written WORM cartridge (not EOD)",
        d.write_record(&pattern(8, 512), None),
        sense_key::DATA_PROTECT,
        asc::WORM_OVERWRITE_ATTEMPTED,
        0,
    )?;
    ok("space to EOD", d.space(REEL_SPACE_EOD, 0))?;
    let before = ok("read_position", d.read_position())?;
    ok(
        "append at EOD of a WORM cartridge",
        d.write_record(&pattern(9, 512), None),
    )?;
    let after = ok("read_position", d.read_position())?;
    if after.block != before.block + 1 {
        return Err(format!(
            "append at EOD moved from block {} to {}",
            before.block, after.block
        ));
    }
    ok("rewind", d.rewind())?;
    ctx.expect_record("record 0 after refused overwrites", &first)?;
    ctx.dismount()
}
