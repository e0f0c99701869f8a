//! Positioning checks over the reference layout `R0 R1 R2 FM R3 R4 FM R5 EOD`
//! (blocks 0..=7, filemarks at blocks 3 and 6, EOD at block 8 in file 2).

use super::context::{Ctx, LAYOUT_EOD, LAYOUT_EOD_FILE, expect_sense, ok, pattern};
use crate::types::*;

fn pattern_of(block: u64) -> Vec<u8> {
    let len = super::context::LAYOUT[block as usize].unwrap_or(0);
    pattern(block, len)
}

/// READ POSITION: block and file numbers at BOT, mid-file and at EOD.
pub(super) fn read_position(ctx: &mut Ctx) -> Result<(), String> {
    ctx.reference_layout()?;
    ok("rewind", ctx.drive()?.rewind())?;
    let p = ctx.position()?;
    if (p.block, p.file) != (0, 0) || p.flags & REEL_POS_BOP == 0 {
        return Err(format!(
            "at BOT expected block 0 file 0 with BOP, got block {} file {} flags {:#x}",
            p.block, p.file, p.flags
        ));
    }
    ctx.expect_record("read record 0", &pattern_of(0))?;
    ctx.expect_record("read record 1", &pattern_of(1))?;
    ctx.expect_position("after two records", 2, 0)?;
    ok("space to EOD", ctx.drive()?.space(REEL_SPACE_EOD, 0))?;
    ctx.expect_position("at EOD", LAYOUT_EOD, LAYOUT_EOD_FILE)
}

/// LOCATE to blocks in every file, to BOT and to EOD; reads land on the right record.
pub(super) fn locate(ctx: &mut Ctx) -> Result<(), String> {
    ctx.reference_layout()?;
    for (block, file) in [(5u64, 1u64), (0, 0), (7, 2), (4, 1), (1, 0)] {
        ok(&format!("locate {block}"), ctx.drive()?.locate(block))?;
        ctx.expect_position(&format!("after locate {block}"), block, file)?;
        ctx.expect_record(&format!("read after locate {block}"), &pattern_of(block))?;
    }
    ok("locate EOD", ctx.drive()?.locate(LAYOUT_EOD))?;
    ctx.expect_position("after locate to EOD", LAYOUT_EOD, LAYOUT_EOD_FILE)
}

/// SPACE forward over records (stopping after a filemark it meets, FILEMARK flag, residue),
/// over filemarks, to EOD, and into EOD (BLANK CHECK).
pub(super) fn space_forward(ctx: &mut Ctx) -> Result<(), String> {
    ctx.reference_layout()?;
    ok("rewind", ctx.drive()?.rewind())?;
    ok("space 2 records", ctx.drive()?.space(REEL_SPACE_RECORDS, 2))?;
    ctx.expect_position("after spacing 2 records", 2, 0)?;
    let e = expect_sense(
        "space 2 records from block 2 (meets the filemark at block 3)",
        ctx.drive()?.space(REEL_SPACE_RECORDS, 2),
        sense_key::NO_SENSE,
        asc::FILEMARK,
        REEL_FLAG_FILEMARK,
    )?;
    if e.status.residue != 1 {
        return Err(format!(
            "space 2 records over 1 record and a filemark: residue {}, expected 1",
            e.status.residue
        ));
    }
    ctx.expect_position("after a record space stopped by a filemark", 4, 1)?;
    ok("rewind", ctx.drive()?.rewind())?;
    ok(
        "space 1 filemark",
        ctx.drive()?.space(REEL_SPACE_FILEMARKS, 1),
    )?;
    ctx.expect_position("after spacing 1 filemark", 4, 1)?;
    ok(
        "space 1 more filemark",
        ctx.drive()?.space(REEL_SPACE_FILEMARKS, 1),
    )?;
    ctx.expect_position("after spacing 2 filemarks", 7, 2)?;
    expect_sense(
        "space 1 filemark from the last file (runs into EOD)",
        ctx.drive()?.space(REEL_SPACE_FILEMARKS, 1),
        sense_key::BLANK_CHECK,
        asc::END_OF_DATA,
        0,
    )?;
    ok("rewind", ctx.drive()?.rewind())?;
    ok("space to EOD", ctx.drive()?.space(REEL_SPACE_EOD, 0))?;
    ctx.expect_position("after space to EOD", LAYOUT_EOD, LAYOUT_EOD_FILE)
}

/// A backward SPACE stopped early reports the requested count minus the count done: negative
/// (docs/ABI.md, `drive_space`).
fn expect_residue(what: &str, e: &crate::host::CallError, residue: i64) -> Result<(), String> {
    if e.status.flags & REEL_FLAG_RESIDUE_VALID == 0 || e.status.residue != residue {
        return Err(format!(
            "{what}: residue {}{}, expected {residue} (requested minus done, negative going back)",
            e.status.residue,
            if e.status.flags & REEL_FLAG_RESIDUE_VALID == 0 {
                " without RESIDUE_VALID"
            } else {
                ""
            }
        ));
    }
    Ok(())
}

/// SPACE backward over records (stopping on the BOT side of a filemark it meets, or at BOT)
/// and over filemarks (ending on the BOT side of the last one crossed), with the negative
/// residue of a space stopped early.
pub(super) fn space_backward(ctx: &mut Ctx) -> Result<(), String> {
    ctx.reference_layout()?;
    ok("locate 5", ctx.drive()?.locate(5))?;
    ok(
        "space -1 record",
        ctx.drive()?.space(REEL_SPACE_RECORDS, -1),
    )?;
    ctx.expect_position("after spacing back 1 record", 4, 1)?;
    let e = expect_sense(
        "space -1 record from block 4 (meets the filemark at block 3)",
        ctx.drive()?.space(REEL_SPACE_RECORDS, -1),
        sense_key::NO_SENSE,
        asc::FILEMARK,
        REEL_FLAG_FILEMARK,
    )?;
    expect_residue("space -1 record stopped by a filemark", &e, -1)?;
    ctx.expect_position("after a backward record space stopped by a filemark", 3, 0)?;
    ok("space to EOD", ctx.drive()?.space(REEL_SPACE_EOD, 0))?;
    ok(
        "space -1 filemark",
        ctx.drive()?.space(REEL_SPACE_FILEMARKS, -1),
    )?;
    ctx.expect_position("after spacing back 1 filemark from EOD", 6, 1)?;
    ok(
        "space -1 more filemark",
        ctx.drive()?.space(REEL_SPACE_FILEMARKS, -1),
    )?;
    ctx.expect_position("after spacing back 2 filemarks", 3, 0)?;
    ok(
        "space +1 filemark",
        ctx.drive()?.space(REEL_SPACE_FILEMARKS, 1),
    )?;
    ctx.expect_position("after spacing forward over it again", 4, 1)?;
    ok("locate 2", ctx.drive()?.locate(2))?;
    ok(
        "space -2 records",
        ctx.drive()?.space(REEL_SPACE_RECORDS, -2),
    )?;
    ctx.expect_position("after spacing back to BOT", 0, 0)?;
    ok("locate 2", ctx.drive()?.locate(2))?;
    let e = expect_sense(
        "space -5 records from block 2 (meets BOT after 2)",
        ctx.drive()?.space(REEL_SPACE_RECORDS, -5),
        sense_key::NO_SENSE,
        asc::BEGINNING_OF_MEDIUM,
        REEL_FLAG_EOM,
    )?;
    expect_residue("space -5 records stopped at BOT", &e, -3)?;
    ctx.expect_position("after a backward space stopped at BOT", 0, 0)?;
    ctx.expect_record("read record 0 after spacing back", &pattern_of(0))
}

/// Reading a filemark: CHECK CONDITION, NO SENSE 00/01 with FILEMARK, positioned after it.
pub(super) fn read_filemark(ctx: &mut Ctx) -> Result<(), String> {
    ctx.reference_layout()?;
    ok("locate 2", ctx.drive()?.locate(2))?;
    ctx.expect_record("read record 2", &pattern_of(2))?;
    let mut buf = vec![0u8; 1024];
    let r = ctx.drive()?.read_record(&mut buf);
    expect_sense(
        "read at the filemark (block 3)",
        r,
        sense_key::NO_SENSE,
        asc::FILEMARK,
        REEL_FLAG_FILEMARK,
    )?;
    ctx.expect_position("after reading a filemark", 4, 1)?;
    ctx.expect_record("read the record after the filemark", &pattern_of(4))
}

/// Reading at EOD: BLANK CHECK 8/00/05, position stays at EOD.
pub(super) fn read_eod(ctx: &mut Ctx) -> Result<(), String> {
    ctx.reference_layout()?;
    ok("locate 7", ctx.drive()?.locate(7))?;
    ctx.expect_record("read record 7", &pattern_of(7))?;
    let mut buf = vec![0u8; 1024];
    let r = ctx.drive()?.read_record(&mut buf);
    expect_sense(
        "read at EOD",
        r,
        sense_key::BLANK_CHECK,
        asc::END_OF_DATA,
        0,
    )?;
    ctx.expect_position("after reading at EOD", LAYOUT_EOD, LAYOUT_EOD_FILE)
}
