//! `SG_IO` on a Linux `/dev/sg*` (or `/dev/nst*`) node: one CDB, its data and its sense,
//! synchronously. The only `unsafe` code of this crate: the ioctl and its header.
//!
//! Results are classified in the order the kernel reports them: the ioctl's errno, a timeout
//! (`host_status` DID_TIME_OUT or `driver_status` DRIVER_TIMEOUT), then sense (the device
//! answered, whatever the adapter says next to it), then an adapter or driver failure without
//! sense. What remains is the device's SCSI status, for the caller's retry policy.

use std::os::fd::{AsRawFd, BorrowedFd};
use std::time::Duration;

use nix::errno::Errno;

use crate::command::{Completion, DataDir};

/// Failures below the SCSI level: the command's outcome is unknown.
#[derive(Debug, thiserror::Error)]
pub enum SgError {
    /// The ioctl itself failed.
    #[error("SG_IO ioctl failed: {0}")]
    Ioctl(Errno),
    /// The command did not complete within its timeout.
    #[error("the command did not complete within its timeout")]
    Timeout,
    /// The host adapter or the kernel driver reported a failure and the device gave no sense.
    #[error("host adapter status {host:#04x}, driver status {driver:#04x} ({meaning})")]
    Adapter {
        /// `host_status`.
        host: u16,
        /// `driver_status`.
        driver: u16,
        /// What the codes mean.
        meaning: &'static str,
    },
    /// A CDB longer than the 16 bytes SG_IO carries.
    #[error("a CDB of {0} bytes is longer than the 16 SG_IO carries")]
    CdbTooLong(usize),
    /// The data phase is larger than one SG_IO command carries.
    #[error("a data phase of {len} bytes exceeds the {max} bytes one SG_IO command carries")]
    TooLarge {
        /// Requested length.
        len: usize,
        /// The limit.
        max: usize,
    },
}

/// The largest data phase sent in one command (the kernel's sg default reserve is smaller;
/// larger transfers make it allocate, up to this).
pub const MAX_TRANSFER: usize = 16 * 1024 * 1024;

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
/// `host_status` DID_TIME_OUT.
const DID_TIME_OUT: u16 = 0x03;
/// `driver_status` DRIVER_TIMEOUT (low nibble).
const DRIVER_TIMEOUT: u16 = 0x06;
/// `driver_status` DRIVER_SENSE: sense is valid, not a failure.
const DRIVER_SENSE: u16 = 0x08;

nix::ioctl_readwrite_bad!(sg_io_ioctl, 0x2285, SgIoHdr);

/// What a `host_status` means, for messages.
pub fn host_meaning(host: u16) -> &'static str {
    match host {
        0x00 => "no adapter error",
        0x01 => "no connect: device gone",
        0x02 => "bus busy",
        0x03 => "time out",
        0x04 => "bad target",
        0x05 => "aborted",
        0x06 => "parity error",
        0x07 => "internal adapter error",
        0x08 => "bus reset",
        0x0B => "soft error, retry",
        0x0C => "requeue",
        0x11 => "nexus failure (reservation conflict)",
        _ => "unknown",
    }
}

/// Send one CDB (at most 16 bytes) through SG_IO on `fd` and wait up to `timeout` for it.
pub fn execute(
    fd: BorrowedFd<'_>,
    cdb: &[u8],
    data: DataDir<'_>,
    timeout: Duration,
) -> Result<Completion, SgError> {
    let len = data.len();
    if len > MAX_TRANSFER {
        return Err(SgError::TooLarge {
            len,
            max: MAX_TRANSFER,
        });
    }
    let mut cdb_buf = [0u8; 16];
    let cdb_len = cdb.len();
    if cdb_len > cdb_buf.len() {
        return Err(SgError::CdbTooLong(cdb_len));
    }
    cdb_buf[..cdb_len].copy_from_slice(cdb);
    let mut sense = [0u8; 96];
    let (dir, ptr) = match data {
        DataDir::None => (SG_DXFER_NONE, std::ptr::null_mut()),
        DataDir::In(b) => (SG_DXFER_FROM_DEV, b.as_mut_ptr().cast()),
        DataDir::Out(b) => (SG_DXFER_TO_DEV, b.as_ptr().cast_mut().cast()),
    };
    let mut hdr = SgIoHdr {
        interface_id: i32::from(b'S'),
        dxfer_direction: dir,
        cmd_len: cdb_len as u8,
        mx_sb_len: sense.len() as u8,
        iovec_count: 0,
        dxfer_len: len as u32,
        dxferp: ptr,
        cmdp: cdb_buf.as_ptr(),
        sbp: sense.as_mut_ptr(),
        timeout: u32::try_from(timeout.as_millis()).unwrap_or(u32::MAX),
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
    // SAFETY: `hdr` points at `cdb_buf` (16 bytes, cmd_len of them used), `sense` (mx_sb_len
    // bytes) and the caller's data buffer (dxfer_len bytes, borrowed for this call), all alive
    // for the duration of this synchronous ioctl. The kernel writes only into `sense`, the
    // data buffer (FROM_DEV) and `hdr`; a TO_DEV buffer is only read.
    unsafe { sg_io_ioctl(fd.as_raw_fd(), &mut hdr) }.map_err(SgError::Ioctl)?;
    if hdr.host_status == DID_TIME_OUT || hdr.driver_status & 0x0F == DRIVER_TIMEOUT {
        return Err(SgError::Timeout);
    }
    let sense_len = usize::from(hdr.sb_len_wr).min(sense.len());
    let driver = hdr.driver_status & 0x0F;
    // The device answered when it returned CHECK CONDITION with sense; otherwise an adapter
    // or driver failure means the outcome is unknown, whatever the status byte says.
    let answered = sense_len > 0 && hdr.status == crate::command::STATUS_CHECK_CONDITION;
    if !answered && (hdr.host_status != 0 || (driver != 0 && driver != DRIVER_SENSE)) {
        return Err(SgError::Adapter {
            host: hdr.host_status,
            driver: hdr.driver_status,
            meaning: if hdr.host_status != 0 {
                host_meaning(hdr.host_status)
            } else {
                "driver error"
            },
        });
    }
    let resid = usize::try_from(hdr.resid.max(0)).unwrap_or(0);
    Ok(Completion {
        status: hdr.status,
        sense: sense[..sense_len].to_vec(),
        transferred: len.saturating_sub(resid),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn header_matches_the_kernel_layout() {
        // <scsi/sg.h> on x86_64: 88 bytes, resid at 72.
        assert_eq!(std::mem::size_of::<SgIoHdr>(), 88);
        assert_eq!(std::mem::offset_of!(SgIoHdr, resid), 72);
        assert_eq!(std::mem::offset_of!(SgIoHdr, host_status), 68);
    }

    #[test]
    fn a_cdb_longer_than_16_bytes_is_refused_not_cut() {
        let f = std::fs::File::open("/dev/null").expect("/dev/null");
        let e = execute(
            std::os::fd::AsFd::as_fd(&f),
            &[0u8; 17],
            DataDir::None,
            Duration::from_secs(1),
        )
        .unwrap_err();
        assert!(matches!(e, SgError::CdbTooLong(17)), "{e}");
    }

    #[test]
    fn a_data_phase_too_large_is_refused_before_the_ioctl() {
        let f = std::fs::File::open("/dev/null").expect("/dev/null");
        let big = vec![0u8; MAX_TRANSFER + 1];
        let e = execute(
            std::os::fd::AsFd::as_fd(&f),
            &[0x0A, 0, 0, 0, 0, 0],
            DataDir::Out(&big),
            Duration::from_secs(1),
        )
        .unwrap_err();
        assert!(matches!(e, SgError::TooLarge { .. }), "{e}");
    }

    #[test]
    fn an_ioctl_on_a_node_that_is_not_sg_fails_with_its_errno() {
        let f = std::fs::File::open("/dev/null").expect("/dev/null");
        let e = execute(
            std::os::fd::AsFd::as_fd(&f),
            &[0; 6],
            DataDir::None,
            Duration::from_secs(1),
        )
        .unwrap_err();
        assert!(matches!(e, SgError::Ioctl(_)), "{e}");
    }
}
