//! Transports: how a CDB reaches a device. One trait, two implementations: SG_IO on Linux
//! `/dev/sg*` ([`sg`]) and iSCSI through libiscsi loaded at run time ([`iscsi`]). The unit
//! tests add a scripted fake target (`fake`). A command's data phase and completion are
//! `reel_scsi_protocol::command`'s, the same whatever carries them.

use std::time::Duration;

use reel_scsi_protocol::command::{Completion, DataDir};

pub mod iscsi;
pub mod sg;

#[cfg(test)]
pub mod fake;

/// A transport failure: the command's outcome is unknown (nothing to do with sense).
#[derive(Debug, thiserror::Error)]
pub enum TransportError {
    /// An operating system call failed.
    #[error("{device}: {what} failed: {source}")]
    Io {
        /// The device path or URL.
        device: String,
        /// The call.
        what: &'static str,
        /// The OS error.
        #[source]
        source: std::io::Error,
    },
    /// The host adapter or driver reported an error (SG_IO `host_status`/`driver_status`).
    #[error(
        "{device}: host adapter status {host:#04x}, driver status {driver:#04x} ({meaning}); check cabling, the HBA and dmesg"
    )]
    Adapter {
        /// The device path.
        device: String,
        /// `host_status`.
        host: u16,
        /// `driver_status`.
        driver: u16,
        /// What the codes mean.
        meaning: &'static str,
    },
    /// The command did not complete within its timeout.
    #[error(
        "{device}: command {opcode:#04x} timed out after {secs} s; the device may need a reset or the timeout a raise (timeout.* config keys)"
    )]
    Timeout {
        /// The device.
        device: String,
        /// Opcode of the command.
        opcode: u8,
        /// The timeout, seconds.
        secs: u64,
    },
    /// The iSCSI session failed (login, connection lost).
    #[error("{device}: iSCSI: {message}")]
    Session {
        /// The URL.
        device: String,
        /// libiscsi's error text.
        message: String,
    },
    /// A shared library the transport needs is missing.
    #[error(
        "cannot load {library} ({detail}); install the Debian package {package} (apt-get install {package}) or use the sg: transport"
    )]
    LibraryMissing {
        /// The library file name.
        library: &'static str,
        /// Debian package that provides it.
        package: &'static str,
        /// The loader's error.
        detail: String,
    },
    /// The device address is malformed.
    #[error("bad device address `{address}`: {reason}")]
    BadAddress {
        /// What was given.
        address: String,
        /// What is wrong and what is expected.
        reason: String,
    },
    /// The data phase is larger than the transport can carry in one command.
    #[error("{device}: data phase of {len} bytes exceeds what the transport allows ({max})")]
    TooLarge {
        /// The device.
        device: String,
        /// Requested length.
        len: usize,
        /// The limit.
        max: usize,
    },
}

/// A path to one SCSI logical unit.
///
/// Implementations are not shared between threads: each drive handle owns its own transport
/// (its own file descriptor or iSCSI session).
pub trait Transport: Send {
    /// Run one command and wait for it (up to `timeout`).
    fn execute(
        &mut self,
        cdb: &[u8],
        data: DataDir<'_>,
        timeout: Duration,
    ) -> Result<Completion, TransportError>;

    /// The device address, for messages.
    fn describe(&self) -> String;
}

/// Open a transport from a device address: `iscsi://host:port/iqn/lun`, `sg:/dev/sgN` or a
/// bare `/dev/sgN` path. `initiator` is the iSCSI initiator name.
pub fn open(address: &str, initiator: &str) -> Result<Box<dyn Transport>, TransportError> {
    if address.starts_with("iscsi://") {
        Ok(Box::new(iscsi::IscsiTransport::connect(
            address, initiator,
        )?))
    } else if let Some(path) = address.strip_prefix("sg:") {
        Ok(Box::new(sg::SgTransport::open(path)?))
    } else if address.starts_with("/dev/") {
        Ok(Box::new(sg::SgTransport::open(address)?))
    } else {
        Err(TransportError::BadAddress {
            address: address.to_string(),
            reason: "expected iscsi://HOST:PORT/TARGET-IQN/LUN, sg:/dev/sgN or serial=SERIAL"
                .to_string(),
        })
    }
}
