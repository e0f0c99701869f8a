//! SG_IO on Linux `/dev/sg*`: the node opened exclusively, each command sent with
//! `reel_scsi_protocol::sg::execute` (one ioctl, the caller's buffer), its failures below the
//! SCSI level named with the device.

use std::fs::{File, OpenOptions};
use std::os::fd::{AsFd, AsRawFd};
use std::os::unix::fs::OpenOptionsExt;
use std::time::Duration;

use reel_scsi_protocol::command::{Completion, DataDir};
use reel_scsi_protocol::sg::{self as sgio, SgError};

use super::{Transport, TransportError};

/// A transport over one sg node.
pub struct SgTransport {
    path: String,
    file: File,
}

impl SgTransport {
    /// Open `path` (`/dev/sgN`) read-write and exclusively.
    pub fn open(path: &str) -> Result<SgTransport, TransportError> {
        let file = OpenOptions::new()
            .read(true)
            .write(true)
            .custom_flags(nix::libc::O_EXCL | nix::libc::O_NONBLOCK)
            .open(path)
            .map_err(|source| TransportError::Io {
                device: path.to_string(),
                what: "open (needs read-write access to the sg node; is another program using the drive?)",
                source,
            })?;
        // Clear O_NONBLOCK: SG_IO must block until the command completes.
        nix::fcntl::fcntl(
            file.as_raw_fd(),
            nix::fcntl::FcntlArg::F_SETFL(nix::fcntl::OFlag::empty()),
        )
        .map_err(|e| TransportError::Io {
            device: path.to_string(),
            what: "fcntl(F_SETFL)",
            source: std::io::Error::from(e),
        })?;
        Ok(SgTransport {
            path: path.to_string(),
            file,
        })
    }
}

impl Transport for SgTransport {
    fn execute(
        &mut self,
        cdb: &[u8],
        data: DataDir<'_>,
        timeout: Duration,
    ) -> Result<Completion, TransportError> {
        sgio::execute(self.file.as_fd(), cdb, data, timeout).map_err(|e| match e {
            SgError::Ioctl(errno) => TransportError::Io {
                device: self.path.clone(),
                what: "SG_IO ioctl",
                source: std::io::Error::from(errno),
            },
            SgError::Timeout => TransportError::Timeout {
                device: self.path.clone(),
                opcode: cdb.first().copied().unwrap_or(0),
                secs: timeout.as_secs(),
            },
            SgError::Adapter {
                host,
                driver,
                meaning,
            } => TransportError::Adapter {
                device: self.path.clone(),
                host,
                driver,
                meaning,
            },
            SgError::TooLarge { len, max } => TransportError::TooLarge {
                device: self.path.clone(),
                len,
                max,
            },
            e @ SgError::CdbTooLong(_) => TransportError::BadAddress {
                address: self.path.clone(),
                reason: e.to_string(),
            },
        })
    }

    fn describe(&self) -> String {
        self.path.clone()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn missing_node_names_the_device() {
        let Err(e) = SgTransport::open("/dev/sg-reel-does-not-exist") else {
            panic!("opened a missing node");
        };
        assert!(e.to_string().contains("/dev/sg-reel-does-not-exist"), "{e}");
    }

    #[test]
    fn a_node_that_is_not_sg_names_the_device_and_the_ioctl() {
        let mut t = SgTransport::open("/dev/null").expect("/dev/null opens read-write");
        let e = t
            .execute(&[0; 6], DataDir::None, Duration::from_secs(1))
            .unwrap_err();
        assert!(e.to_string().contains("/dev/null: SG_IO ioctl"), "{e}");
    }
}
