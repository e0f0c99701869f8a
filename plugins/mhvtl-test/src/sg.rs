//! Commands this plugin sends itself through `sg` (the kernel's `st` moves the tape): SG_IO
//! from `reel-scsi-protocol`, with this plugin's retry rule, UNIT ATTENTION retried three
//! times and "becoming ready" waited out for a few seconds.

use std::os::fd::BorrowedFd;
use std::time::Duration;

use reel_scsi_protocol::cdb::inquiry;
use reel_scsi_protocol::command::{DataDir, STATUS_GOOD};
use reel_scsi_protocol::sense::Sense;
use reel_scsi_protocol::sg::{self as sgio, SgError};

/// A command that ended without an answer from the device.
#[derive(Debug, thiserror::Error)]
pub enum CommandError {
    /// Below the SCSI level: the ioctl, the adapter, a timeout.
    #[error(transparent)]
    Sg(#[from] SgError),
    /// The device answered with a status other than GOOD and gave no sense.
    #[error("SCSI status {0:#04x} without sense (busy or reserved by another initiator)")]
    Status(u8),
}

/// Run a command, retrying UNIT ATTENTION (up to three times) and "becoming ready" (a few
/// seconds). `Ok((None, n))` on GOOD, `Ok((Some(sense), n))` on CHECK CONDITION; `n` is the
/// data transferred.
pub fn run(
    fd: BorrowedFd<'_>,
    cdb: &[u8],
    mut data: DataDir<'_>,
    timeout: Duration,
) -> Result<(Option<Sense>, usize), CommandError> {
    let mut attempts = 0;
    loop {
        let c = sgio::execute(fd, cdb, data.reborrow(), timeout)?;
        attempts += 1;
        if c.status == STATUS_GOOD {
            return Ok((None, c.transferred));
        }
        match Sense::parse(&c.sense) {
            Some(s) if s.key == 0x06 && attempts <= 3 => {
                tracing::debug!(sense = %s.describe(), "unit attention, retrying");
            }
            Some(s) if s.is(0x02, (0x04, 0x01)) && attempts <= 30 => {
                std::thread::sleep(Duration::from_millis(200));
            }
            Some(s) => return Ok((Some(s), c.transferred)),
            // BUSY, RESERVATION CONFLICT, or CHECK CONDITION without sense.
            None => return Err(CommandError::Status(c.status)),
        }
    }
}

/// A device's unit serial number (INQUIRY VPD 80h) through `command` (a drive's or the
/// changer's SG command), trimmed; empty when the device reports none or the command fails:
/// a serial is an identity to show, never a reason to refuse the device.
pub fn unit_serial(
    command: impl FnOnce(&str, &[u8], DataDir<'_>) -> Result<usize, reel_plugin_abi::sdk::Fault>,
) -> String {
    let mut vpd = [0u8; 252];
    command(
        "INQUIRY VPD 80h",
        &inquiry::inquiry_vpd(0x80, 252),
        DataDir::In(&mut vpd),
    )
    .ok()
    .and_then(|n| inquiry::parse_serial(&vpd[..n.min(vpd.len())]).ok())
    .unwrap_or_default()
}
