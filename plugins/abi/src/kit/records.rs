//! Record checks: label at BOT, records with and without LBP, filemarks, ILI, statistics.

use super::context::{Ctx, LAYOUT, expect_sense, ok, pattern};
use crate::types::*;

/// A label record written at BOT reads back, and the position is block 1 after it.
pub(super) fn label_at_bot(ctx: &mut Ctx) -> Result<(), String> {
    ctx.mount(false)?;
    ctx.layout_written = false;
    let mut label = b"VOL1REELKT".to_vec();
    label.resize(80, b' ');
    let d = ctx.drive()?;
    ok("rewind", d.rewind())?;
    ok("write label at BOT", d.write_record(&label, None))?;
    ok("write filemark after label", d.write_filemarks(1, false))?;
    ctx.expect_position("after label and filemark", 2, 1)?;
    ok("rewind", ctx.drive()?.rewind())?;
    ctx.expect_record("read label", &label)?;
    ctx.expect_position("after reading the label", 1, 0)
}

/// Records of several sizes without LBP: written, position advances by one per record, read
/// back byte for byte.
pub(super) fn records(ctx: &mut Ctx) -> Result<(), String> {
    ctx.reference_layout()?;
    ok("rewind", ctx.drive()?.rewind())?;
    for (block, entry) in LAYOUT.iter().enumerate() {
        match entry {
            Some(len) => ctx.expect_record(
                &format!("read record {block}"),
                &pattern(block as u64, *len),
            )?,
            None => ok(
                "space over filemark",
                ctx.drive()?.space(REEL_SPACE_FILEMARKS, 1),
            )?,
        }
        let p = ctx.position()?;
        if p.block != block as u64 + 1 {
            return Err(format!(
                "after block {block} the position is block {}, expected {}",
                p.block,
                block + 1
            ));
        }
    }
    Ok(())
}

/// Several records handed over in one call (ABI 1.4 `drive_write_records`; the host writes
/// them one call each for a plugin without it): all written, in order, one block each, and
/// they read back byte for byte.
pub(super) fn records_together(ctx: &mut Ctx) -> Result<(), String> {
    ctx.mount(false)?;
    ctx.layout_written = false;
    let recs = [pattern(400, 90), pattern(401, 5000), pattern(402, 3000)];
    let d = ctx.drive()?;
    ok("rewind", d.rewind())?;
    let list: Vec<crate::sdk::WriteRecord<'_>> = recs
        .iter()
        .map(|r| crate::sdk::WriteRecord { data: r, crc: None })
        .collect();
    let (n, result) = d.write_records(&list);
    ok("write 3 records together", result)?;
    if n != recs.len() {
        return Err(format!(
            "write_records answered REEL_OK with {n} of {} records written",
            recs.len()
        ));
    }
    ok("write filemark", ctx.drive()?.write_filemarks(1, false))?;
    ctx.expect_position("after 3 records and a filemark", 4, 1)?;
    ok("rewind", ctx.drive()?.rewind())?;
    for (i, r) in recs.iter().enumerate() {
        ctx.expect_record(&format!("read record {i} written together"), r)?;
    }
    Ok(())
}

/// LBP: a record with a good CRC32C is accepted; a bad CRC is refused with ABORTED COMMAND
/// B/10/01 and nothing written; reads return the stored record's CRC32C.
pub(super) fn records_lbp(ctx: &mut Ctx) -> Result<(), String> {
    ctx.mount(false)?;
    ctx.layout_written = false;
    let good = pattern(200, 5000);
    let crc = crc32c::crc32c(&good);
    let d = ctx.drive()?;
    ok("set_lbp(CRC32C)", d.set_lbp(REEL_LBP_CRC32C))?;
    let result = (|| -> Result<(), String> {
        let d = ctx.drive()?;
        ok("rewind", d.rewind())?;
        ok("write with good CRC32C", d.write_record(&good, Some(crc)))?;
        ctx.expect_position("after good LBP record", 1, 0)?;
        let d = ctx.drive()?;
        expect_sense(
            "write with bad CRC32C",
            d.write_record(&pattern(201, 5000), Some(crc ^ 0x5a5a_0001)),
            sense_key::ABORTED_COMMAND,
            asc::LBP_GUARD_CHECK_FAILED,
            0,
        )?;
        ctx.expect_position("after refused LBP record (nothing written)", 1, 0)?;
        ok("rewind", ctx.drive()?.rewind())?;
        let mut buf = vec![0u8; 8192];
        let r = ok("read LBP record", ctx.drive()?.read_record(&mut buf))?;
        if buf[..r.len] != good[..] {
            return Err("LBP record content differs".into());
        }
        if r.crc != Some(crc) {
            return Err(format!(
                "read returned CRC {:?}, the record's CRC32C is {crc:#010x}",
                r.crc
            ));
        }
        let eod = ctx.drive()?.read_record(&mut buf);
        expect_sense(
            "read after the one good record (the bad one must not be there)",
            eod,
            sense_key::BLANK_CHECK,
            asc::END_OF_DATA,
            0,
        )?;
        Ok(())
    })();
    let off = ctx.drive()?.set_lbp(REEL_LBP_OFF);
    result?;
    ok("set_lbp(OFF)", off)
}

fn filemarks(ctx: &mut Ctx, immediate: bool) -> Result<(), String> {
    ctx.reference_layout()?;
    ctx.layout_written = false;
    let what = if immediate {
        "immediate"
    } else {
        "synchronous"
    };
    let d = ctx.drive()?;
    ok("rewind", d.rewind())?;
    ok("write record", d.write_record(&pattern(300, 100), None))?;
    ok(
        &format!("write 1 {what} filemark"),
        d.write_filemarks(1, immediate),
    )?;
    ctx.expect_position(&format!("after 1 {what} filemark"), 2, 1)?;
    ok(
        &format!("write 2 {what} filemarks"),
        ctx.drive()?.write_filemarks(2, immediate),
    )?;
    ctx.expect_position(&format!("after 2 more {what} filemarks"), 4, 3)?;
    ok(
        "write record",
        ctx.drive()?.write_record(&pattern(301, 100), None),
    )?;
    ok("rewind", ctx.drive()?.rewind())?;
    ok(
        "space 3 filemarks",
        ctx.drive()?.space(REEL_SPACE_FILEMARKS, 3),
    )?;
    ctx.expect_record("record after the filemarks", &pattern(301, 100))
}

/// Synchronous filemarks: counted in block and file numbers.
pub(super) fn filemarks_sync(ctx: &mut Ctx) -> Result<(), String> {
    filemarks(ctx, false)
}

/// Immediate filemarks: same positions as synchronous ones.
pub(super) fn filemarks_immediate(ctx: &mut Ctx) -> Result<(), String> {
    filemarks(ctx, true)
}

/// A record longer than the buffer: CHECK CONDITION with ILI, residue `capacity - length`
/// (negative), the first `capacity` bytes delivered, positioned after the record.
pub(super) fn read_ili(ctx: &mut Ctx) -> Result<(), String> {
    ctx.reference_layout()?;
    let len = LAYOUT[1].unwrap_or(0);
    let expected = pattern(1, len);
    ok("locate 1", ctx.drive()?.locate(1))?;
    let mut buf = vec![0u8; 100];
    match ctx.drive()?.read_record_partial(&mut buf) {
        Ok(r) => {
            return Err(format!(
                "read of a {len}-byte record into 100 bytes succeeded with length {}",
                r.len
            ));
        }
        Err((e, got)) => {
            let e = expect_sense(
                "read into a short buffer",
                Err::<(), _>(e),
                sense_key::NO_SENSE,
                asc::NONE,
                REEL_FLAG_ILI,
            )?;
            let residue = 100 - len as i64;
            if e.status.residue != residue {
                return Err(format!(
                    "ILI residue {} , expected {residue} (buffer - record length)",
                    e.status.residue
                ));
            }
            if got != 100 || buf[..] != expected[..100] {
                return Err(format!(
                    "ILI read delivered {got} bytes, expected the record's first 100"
                ));
            }
        }
    }
    ctx.expect_position("after the ILI read", 2, 0)
}

const VALID_BYTES_WRITTEN: u32 = 1 << 4;
const VALID_BYTES_READ: u32 = 1 << 5;
const VALID_RECORDS_WRITTEN: u32 = 1 << 6;
const VALID_RECORDS_READ: u32 = 1 << 7;

/// Statistics: the counters a plugin declares valid move with a write and a read.
pub(super) fn statistics(ctx: &mut Ctx) -> Result<(), String> {
    ctx.reference_layout()?;
    let d = ctx.drive()?;
    let before = ok("statistics", d.statistics())?;
    ok("space to EOD", d.space(REEL_SPACE_EOD, 0))?;
    let rec = pattern(400, 10_000);
    ok("write record", d.write_record(&rec, None))?;
    ok("locate 0", d.locate(0))?;
    let mut buf = vec![0u8; 1000];
    ok("read record", d.read_record(&mut buf))?;
    let after = ok("statistics", d.statistics())?;
    ctx.layout_written = false;
    let counters = [
        (
            VALID_BYTES_WRITTEN,
            "bytes_written",
            before.bytes_written,
            after.bytes_written,
            10_000,
        ),
        (
            VALID_BYTES_READ,
            "bytes_read",
            before.bytes_read,
            after.bytes_read,
            1,
        ),
        (
            VALID_RECORDS_WRITTEN,
            "records_written",
            before.records_written,
            after.records_written,
            1,
        ),
        (
            VALID_RECORDS_READ,
            "records_read",
            before.records_read,
            after.records_read,
            1,
        ),
    ];
    let mut seen = 0;
    for (bit, name, b, a, at_least) in counters {
        if after.valid & bit == 0 {
            continue;
        }
        seen += 1;
        if a < b.saturating_add(at_least) {
            return Err(format!(
                "{name} went from {b} to {a} across the kit's I/O (expected at least +{at_least})"
            ));
        }
    }
    if seen == 0 {
        return Err(
            "REEL_CAP_STATISTICS is set but no byte or record counter is marked valid".into(),
        );
    }
    Ok(())
}
