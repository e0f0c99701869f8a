//! Logical block protection on the way out of the drive: the one rule for every record reel
//! reads.
//!
//! Under LBP the drive sends each record with the CRC32C it read from the tape. A record whose
//! bytes do not match it was damaged between drive and host (a cable, an HBA, a bus): that says
//! nothing about the tape, so the record is reported ([`CatchKind::LbpOnRead`]) and read once
//! more after a LOCATE back to it, before anyone judges the copy. A drive that runs the check
//! itself reports the same thing as ABORTED COMMAND 10/01, and gets the same second read. A
//! MEDIUM ERROR is reported ([`CatchKind::MediumError`]) and not read again: the drive has
//! already run its own read retries before giving up.
//!
//! On the way in, the drive checks the CRC32C reel sends with each record and refuses a record
//! that does not match it, writing nothing ([`write_checked`]): it is reported
//! ([`CatchKind::LbpOnWrite`]) and sent again, at most twice more.

use reel_plugin_abi::host::DriveHandle;
use reel_plugin_abi::sdk::ReadRecord;

use super::DeviceError;
use crate::integrity::{CatchKind, Reporter};

/// Whether a record read arrived as the drive read it: its bytes match the CRC32C the drive
/// sent with them. Always true with LBP off (there is nothing to check against).
pub fn arrived_whole(lbp: bool, r: &ReadRecord, buf: &[u8]) -> bool {
    !lbp || r.crc == Some(crc32c::crc32c(&buf[..r.len.min(buf.len())]))
}

/// Check a record read at `block` that nobody will re-read (a record read through on the
/// way to another, or the first record of a tail being identified): a damaged arrival is
/// reported; returns whether it arrived whole.
pub fn check_read(lbp: bool, r: &ReadRecord, buf: &[u8], block: u64, reporter: &Reporter) -> bool {
    let whole = arrived_whole(lbp, r, buf);
    if !whole {
        reporter.report(
            CatchKind::LbpOnRead,
            block,
            block,
            None,
            format!("record at block {block} arrived with a CRC32C that does not match its bytes"),
        );
    }
    whole
}

/// Write one record with its CRC32C (`crc`, under LBP) at the drive's position, block `block`
/// (the caller's count: no command is spent asking the drive, which could consume a deferred
/// error meant for the next write): a record the drive refuses as damaged on the way (ABORTED
/// COMMAND 10/01: nothing was written, the drive is still where it was) is reported and sent
/// again, at most twice more. Returns the last attempt's outcome; `refused_ns` gets the time
/// the refused attempts took.
// The plugin call's own error, as `DriveHandle::write_record` returns it: the write loop reads
// its status (elapsed time, flags, residue).
#[allow(clippy::result_large_err)]
pub fn write_checked(
    h: &mut DriveHandle,
    rec: &[u8],
    crc: Option<u32>,
    block: u64,
    reporter: &Reporter,
    refused_ns: &mut u64,
) -> Result<(), reel_plugin_abi::host::CallError> {
    let mut result = h.write_record(rec, crc);
    for _ in 0..2 {
        match &result {
            Err(e) if refused_on_write(e, block, reporter, refused_ns) => {
                result = h.write_record(rec, crc);
            }
            _ => break,
        }
    }
    result
}

/// Whether a write failed because the drive refused the record for `block` under LBP (its
/// CRC32C did not match; nothing was written, so it is sent again): reported, and its time
/// added to `refused_ns`. The one rule for a single write and for records written together.
pub fn refused_on_write(
    e: &reel_plugin_abi::host::CallError,
    block: u64,
    reporter: &Reporter,
    refused_ns: &mut u64,
) -> bool {
    if !matches!(
        DeviceError::from_call(e.clone()),
        DeviceError::LbpMismatch { .. }
    ) {
        return false;
    }
    *refused_ns += e.status.elapsed_ns;
    reporter.report(
        CatchKind::LbpOnWrite,
        block,
        block,
        None,
        format!(
            "the drive refused the record for block {block}: its CRC32C did not match; sent again"
        ),
    );
    true
}

/// Report a read of `block` that failed in a way a check names: the drive's own LBP check
/// ([`CatchKind::LbpOnRead`]) or a MEDIUM ERROR ([`CatchKind::MediumError`]). Other errors are
/// the drive's, not the data's: nothing is reported. Returns whether it was an LBP failure.
pub fn report_read_error(e: &DeviceError, block: u64, reporter: &Reporter) -> bool {
    match e {
        DeviceError::LbpMismatch { .. } => {
            reporter.report(
                CatchKind::LbpOnRead,
                block,
                block,
                None,
                format!("the drive's LBP check failed reading block {block}"),
            );
            true
        }
        DeviceError::Medium { .. } => {
            reporter.report(
                CatchKind::MediumError,
                block,
                block,
                None,
                format!("medium error reading block {block}: {e}"),
            );
            false
        }
        _ => false,
    }
}

/// Time a checked read spent, in nanoseconds, for the caller's summary.
#[derive(Clone, Copy, Debug, Default)]
pub struct ReadTime {
    /// Reading records.
    pub transfer_ns: u64,
    /// Locating back for the second read.
    pub position_ns: u64,
    /// LOCATEs issued.
    pub locates: u64,
    /// The last READ alone (for read-through timing).
    pub last_read_ns: u64,
}

/// What a checked read of one record gave.
#[derive(Debug)]
pub enum Checked {
    /// The record, whole (`len` bytes in the buffer).
    Whole(ReadRecord),
    /// It arrived damaged twice, or could not be located again to read it once more: this
    /// copy of the record cannot be used now (another copy, or a retry later, may do).
    Damaged(String),
}

/// Read the record at `block`, where the drive is positioned, under the rule above. Errors
/// other than a damaged arrival come back as the call's error (after a MEDIUM ERROR is
/// reported); the position is then unknown.
pub fn read_checked(
    h: &mut DriveHandle,
    block: u64,
    buf: &mut [u8],
    lbp: bool,
    reporter: &Reporter,
    time: &mut ReadTime,
) -> Result<Checked, DeviceError> {
    let mut failure = String::new();
    for attempt in 0..2 {
        if attempt > 0 {
            match h.locate(block) {
                Ok(()) => {
                    time.position_ns += h.last_status().elapsed_ns;
                    time.locates += 1;
                }
                Err(e) => {
                    time.position_ns += e.status.elapsed_ns;
                    time.locates += 1;
                    failure.push_str(&format!(
                        "; cannot locate back to it: {}",
                        DeviceError::from_call(e)
                    ));
                    break;
                }
            }
        }
        match h.read_record(buf) {
            Ok(r) => {
                let ns = h.last_status().elapsed_ns;
                time.transfer_ns += ns;
                time.last_read_ns = ns;
                if check_read(lbp, &r, buf, block, reporter) {
                    return Ok(Checked::Whole(r));
                }
                failure = format!(
                    "block {block} failed its CRC32C between drive and host{}",
                    if attempt > 0 { ", read twice" } else { "" }
                );
            }
            Err(e) => {
                time.transfer_ns += e.status.elapsed_ns;
                let e = DeviceError::from_call(e);
                if !report_read_error(&e, block, reporter) {
                    return Err(e);
                }
                failure = format!(
                    "block {block}: the drive's LBP check failed{}",
                    if attempt > 0 { ", read twice" } else { "" }
                );
            }
        }
    }
    Ok(Checked::Damaged(failure))
}
