//! Early warning and end of medium, provoked through the test-control requests
//! `test.early_warning_after` and `test.end_of_medium_after` (docs/ABI.md, "Test control").

use super::context::{Ctx, expect_sense, ok, pattern};
use crate::types::*;

fn control(ctx: &mut Ctx, op: &str, bytes: u64) -> Result<(), String> {
    let request =
        serde_json::json!({"op": op, "drive": ctx.opts.drive, "bytes": bytes}).to_string();
    let response = ok(&format!("control {request}"), ctx.library.control(&request))?;
    let v: serde_json::Value = serde_json::from_str(&response)
        .map_err(|e| format!("control {request}: response {response:?} is not JSON ({e})"))?;
    if v.get("ok") != Some(&serde_json::Value::Bool(true)) {
        return Err(format!(
            "control {request}: response {response} lacks \"ok\":true"
        ));
    }
    Ok(())
}

/// Past early warning a write succeeds in substance (the data IS written) but returns CHECK
/// CONDITION, NO SENSE 00/02 with EOM.
pub(super) fn early_warning(ctx: &mut Ctx) -> Result<(), String> {
    let result = early_warning_body(ctx);
    // The thresholds belong to the loaded medium: a reload clears them, also after a failure,
    // so later checks start clean.
    let cleanup = ctx.dismount();
    result.and(cleanup)
}

/// The status and buffer rules on a call every TEST_CONTROL plugin answers (docs/ABI.md,
/// "Calls, status and ownership"): a response buffer too small answers
/// `REEL_E_BUFFER_TOO_SMALL` with the capacity that then succeeds; a status declared smaller
/// than the struct is not written past its `struct_size`; a call that succeeds resets a status
/// that held another call's sense, flags and residue.
fn status_and_buffer_rules(ctx: &mut Ctx) -> Result<(), String> {
    let request = serde_json::json!({
        "op": "test.early_warning_after", "drive": ctx.opts.drive, "bytes": 1u64 << 60
    })
    .to_string();
    let request = std::ffi::CString::new(request).map_err(|e| e.to_string())?;
    const SENTINEL: std::ffi::c_char = 0x5A;
    // A status that stops before its message, the message bytes marked.
    let mut st = ReelStatus::new();
    st.struct_size = std::mem::offset_of!(ReelStatus, message) as u32;
    st.message = [SENTINEL; REEL_MESSAGE_LEN];
    let mut small = [0 as std::ffi::c_char; 1];
    let (rc, needed) = ok(
        "control, 1-byte response buffer",
        ctx.library.control_raw(&request, &mut small, &mut st),
    )?;
    if rc != REEL_E_BUFFER_TOO_SMALL || needed <= 1 {
        return Err(format!(
            "control with a 1-byte response buffer: code {rc}, out_len {needed}; expected \
             REEL_E_BUFFER_TOO_SMALL ({REEL_E_BUFFER_TOO_SMALL}) and the capacity needed"
        ));
    }
    if st.message.iter().any(|c| *c != SENTINEL)
        || st.struct_size != std::mem::offset_of!(ReelStatus, message) as u32
    {
        return Err(format!(
            "the plugin wrote past the status's struct_size ({} bytes, the message excluded)",
            std::mem::offset_of!(ReelStatus, message)
        ));
    }
    // Success with exactly that capacity, into a status still holding an earlier error.
    let mut st = ReelStatus::new();
    st.sense_key = sense_key::MEDIUM_ERROR;
    st.asc = 0x11;
    st.flags = REEL_FLAG_SENSE_VALID | REEL_FLAG_FILEMARK | REEL_FLAG_RESIDUE_VALID;
    st.residue = 99;
    let mut response = vec![0 as std::ffi::c_char; needed];
    let (rc, len) = ok(
        "control, response buffer of out_len",
        ctx.library.control_raw(&request, &mut response, &mut st),
    )?;
    if rc != REEL_OK {
        return Err(format!(
            "control with the {needed} bytes its REEL_E_BUFFER_TOO_SMALL asked for: code {rc}; \
             out_len must be the capacity that then succeeds (the NUL included)"
        ));
    }
    if len >= needed {
        return Err(format!(
            "control: out_len {len} leaves no room for the NUL in {needed}"
        ));
    }
    if st.sense_key != 0 || st.flags != 0 || st.residue != 0 {
        return Err(format!(
            "a successful control left an earlier status in place (sense key {}, flags {:#x}, \
             residue {}): every call resets the status",
            st.sense_key, st.flags, st.residue
        ));
    }
    Ok(())
}

fn early_warning_body(ctx: &mut Ctx) -> Result<(), String> {
    ctx.reference_layout()?;
    ctx.layout_written = false;
    ok("space to EOD", ctx.drive()?.space(REEL_SPACE_EOD, 0))?;
    let start = ctx.position()?.block;
    status_and_buffer_rules(ctx)?;
    control(ctx, "test.early_warning_after", 1000)?;
    let (a, b, c) = (pattern(500, 600), pattern(501, 600), pattern(502, 100));
    ok(
        "write 600 bytes before early warning",
        ctx.drive()?.write_record(&a, None),
    )?;
    expect_sense(
        "write crossing early warning",
        ctx.drive()?.write_record(&b, None),
        sense_key::NO_SENSE,
        asc::END_OF_MEDIUM,
        REEL_FLAG_EOM,
    )?;
    expect_sense(
        "write past early warning",
        ctx.drive()?.write_record(&c, None),
        sense_key::NO_SENSE,
        asc::END_OF_MEDIUM,
        REEL_FLAG_EOM,
    )?;
    let p = ctx.position()?;
    if p.block != start + 3 {
        return Err(format!(
            "three writes from block {start} (two in early warning) left the position at {}; \
             writes in early warning must be written",
            p.block
        ));
    }
    ok(&format!("locate {start}"), ctx.drive()?.locate(start))?;
    ctx.expect_record("record before early warning", &a)?;
    ctx.expect_record("record crossing early warning", &b)?;
    ctx.expect_record("record past early warning", &c)
}

/// At end of medium a write fails with VOLUME OVERFLOW D/00/02 and EOM, and nothing is
/// written.
pub(super) fn end_of_medium(ctx: &mut Ctx) -> Result<(), String> {
    let result = end_of_medium_body(ctx);
    let cleanup = ctx.dismount();
    result.and(cleanup)
}

fn end_of_medium_body(ctx: &mut Ctx) -> Result<(), String> {
    ctx.reference_layout()?;
    ctx.layout_written = false;
    ok("space to EOD", ctx.drive()?.space(REEL_SPACE_EOD, 0))?;
    let start = ctx.position()?.block;
    control(ctx, "test.early_warning_after", 500)?;
    control(ctx, "test.end_of_medium_after", 1000)?;
    let a = pattern(600, 600);
    expect_sense(
        "write crossing early warning",
        ctx.drive()?.write_record(&a, None),
        sense_key::NO_SENSE,
        asc::END_OF_MEDIUM,
        REEL_FLAG_EOM,
    )?;
    expect_sense(
        "write crossing end of medium",
        ctx.drive()?.write_record(&pattern(601, 600), None),
        sense_key::VOLUME_OVERFLOW,
        asc::END_OF_MEDIUM,
        REEL_FLAG_EOM,
    )?;
    ctx.expect_position(
        "after a write refused at end of medium",
        start + 1,
        LAYOUT_FILE,
    )?;
    ok(&format!("locate {start}"), ctx.drive()?.locate(start))?;
    ctx.expect_record("record written before end of medium", &a)?;
    let mut buf = vec![0u8; 1024];
    let r = ctx.drive()?.read_record(&mut buf);
    expect_sense(
        "read after the last written record (the refused one must not be there)",
        r,
        sense_key::BLANK_CHECK,
        asc::END_OF_DATA,
        0,
    )?;
    Ok(())
}

const LAYOUT_FILE: u64 = super::context::LAYOUT_EOD_FILE;
