//! SG_IO on a Linux `sg` (or `st`) node: one CDB, its data and its sense.
//!
//! This is the only module besides [`crate::mtio`] with `unsafe` code: the `SG_IO` ioctl.

use std::os::fd::{AsRawFd, BorrowedFd};
use std::time::Duration;

use nix::errno::Errno;

use crate::sense::Sense;

/// SCSI status GOOD.
pub const STATUS_GOOD: u8 = 0x00;
/// SCSI status CHECK CONDITION.
pub const STATUS_CHECK_CONDITION: u8 = 0x02;

/// Direction and buffer of a command's data phase.
pub enum Data<'a> {
    /// No data.
    None,
    /// Data from the device into this buffer.
    In(&'a mut [u8]),
    /// Data from this buffer to the device.
    Out(&'a [u8]),
}

/// How a command completed at the SCSI level.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Completion {
    /// SCSI status byte.
    pub status: u8,
    /// Sense, when the device returned any.
    pub sense: Option<Sense>,
    /// Bytes transferred (requested minus the residual count).
    pub transferred: usize,
}

/// Errors below the SCSI level.
#[derive(Debug, thiserror::Error)]
pub enum SgError {
    /// The ioctl itself failed.
    #[error("SG_IO ioctl failed: {0}")]
    Ioctl(Errno),
    /// The device answered with a status other than GOOD and gave no sense.
    #[error("SCSI status {0:#04x} without sense (busy or reserved by another initiator)")]
    Status(u8),
    /// The host adapter or the kernel reported a transport failure.
    #[error("transport failure (host_status {host:#x}, driver_status {driver:#x})")]
    Transport {
        /// `host_status`.
        host: u16,
        /// `driver_status`.
        driver: u16,
    },
}

/// `struct sg_io_hdr` of `<scsi/sg.h>`.
#[repr(C)]
struct SgIoHdr {
    interface_id: i32,
    dxfer_direction: i32,
    cmd_len: u8,
    mx_sb_len: u8,
    iovec_count: u16,
    dxfer_len: u32,
    dxferp: *mut std::ffi::c_void,
    cmdp: *const u8,
    sbp: *mut u8,
    timeout: u32,
    flags: u32,
    pack_id: i32,
    usr_ptr: *mut std::ffi::c_void,
    status: u8,
    masked_status: u8,
    msg_status: u8,
    sb_len_wr: u8,
    host_status: u16,
    driver_status: u16,
    resid: i32,
    duration: u32,
    info: u32,
}

const SG_DXFER_NONE: i32 = -1;
const SG_DXFER_TO_DEV: i32 = -2;
const SG_DXFER_FROM_DEV: i32 = -3;
/// `DRIVER_SENSE`: sense is valid, not a transport failure.
const DRIVER_SENSE: u16 = 0x08;

nix::ioctl_readwrite_bad!(sg_io_ioctl, 0x2285, SgIoHdr);

/// Send one CDB through SG_IO on `fd` and wait for it (up to `timeout`).
pub fn execute(
    fd: BorrowedFd<'_>,
    cdb: &[u8],
    data: Data<'_>,
    timeout: Duration,
) -> Result<Completion, SgError> {
    let mut sense = [0u8; 96];
    let (dir, ptr, len) = match data {
        Data::None => (SG_DXFER_NONE, std::ptr::null_mut(), 0usize),
        Data::In(b) => (
            SG_DXFER_FROM_DEV,
            b.as_mut_ptr() as *mut std::ffi::c_void,
            b.len(),
        ),
        Data::Out(b) => (
            SG_DXFER_TO_DEV,
            b.as_ptr() as *mut std::ffi::c_void,
            b.len(),
        ),
    };
    let mut hdr = SgIoHdr {
        interface_id: b'S' as i32,
        dxfer_direction: dir,
        cmd_len: cdb.len() as u8,
        mx_sb_len: sense.len() as u8,
        iovec_count: 0,
        dxfer_len: len as u32,
        dxferp: ptr,
        cmdp: cdb.as_ptr(),
        sbp: sense.as_mut_ptr(),
        timeout: timeout.as_millis().min(u32::MAX as u128) as u32,
        flags: 0,
        pack_id: 0,
        usr_ptr: std::ptr::null_mut(),
        status: 0,
        masked_status: 0,
        msg_status: 0,
        sb_len_wr: 0,
        host_status: 0,
        driver_status: 0,
        resid: 0,
        duration: 0,
        info: 0,
    };
    // SAFETY: `hdr` points at `cdb`, `sense` and the caller's data buffer, all alive and of the
    // lengths given for the duration of this synchronous ioctl; the kernel writes only into
    // `sense` (up to mx_sb_len), the data buffer (up to dxfer_len, for FROM_DEV) and `hdr`.
    unsafe { sg_io_ioctl(fd.as_raw_fd(), &mut hdr) }.map_err(SgError::Ioctl)?;
    let sense_len = (hdr.sb_len_wr as usize).min(sense.len());
    let parsed = if sense_len > 0 {
        Sense::parse(&sense[..sense_len])
    } else {
        None
    };
    // A transport failure without sense; with sense the device answered.
    if (hdr.host_status != 0 || (hdr.driver_status & !DRIVER_SENSE & 0x0F) != 0) && parsed.is_none()
    {
        return Err(SgError::Transport {
            host: hdr.host_status,
            driver: hdr.driver_status,
        });
    }
    Ok(Completion {
        status: hdr.status,
        sense: parsed,
        transferred: len.saturating_sub(hdr.resid.max(0) as usize),
    })
}

/// Run a command, retrying UNIT ATTENTION (up to three times) and "becoming ready" (a few
/// seconds). Returns `Ok(None)` on GOOD and `Ok(Some(sense))` on CHECK CONDITION.
pub fn run(
    fd: BorrowedFd<'_>,
    cdb: &[u8],
    mut data: Data<'_>,
    timeout: Duration,
) -> Result<(Option<Sense>, usize), SgError> {
    let mut attempts = 0;
    loop {
        let d = match &mut data {
            Data::None => Data::None,
            Data::In(b) => Data::In(b),
            Data::Out(b) => Data::Out(b),
        };
        let c = execute(fd, cdb, d, timeout)?;
        attempts += 1;
        match (c.status, c.sense) {
            (STATUS_GOOD, _) => return Ok((None, c.transferred)),
            (_, Some(s)) if s.key == 0x06 && attempts <= 3 => {
                tracing::debug!(sense = %s.describe(), "unit attention, retrying");
            }
            (_, Some(s)) if s.key == 0x02 && s.asc == 0x04 && s.ascq == 0x01 && attempts <= 30 => {
                std::thread::sleep(Duration::from_millis(200));
            }
            (_, Some(s)) => return Ok((Some(s), c.transferred)),
            // BUSY, RESERVATION CONFLICT, or CHECK CONDITION without sense.
            (status, None) => return Err(SgError::Status(status)),
        }
    }
}

/// A device's unit serial number (INQUIRY VPD 80h) through `command` (a drive's or the
/// changer's SG command), trimmed; empty when the device reports none or the command fails:
/// a serial is an identity to show, never a reason to refuse the device.
pub fn unit_serial(
    command: impl FnOnce(&str, &[u8], Data<'_>) -> Result<usize, reel_plugin_abi::sdk::Fault>,
) -> String {
    let mut vpd = [0u8; 252];
    command(
        "INQUIRY VPD 80h",
        &crate::cdb::inquiry(Some(0x80), 252),
        Data::In(&mut vpd),
    )
    .ok()
    .and_then(|n| crate::cdb::parse_vpd80(&vpd[..n.min(vpd.len())]).ok())
    .unwrap_or_default()
}
