//! The medium changer through its `sg` node: READ ELEMENT STATUS (one element type per
//! request, with volume tags: some changers, tgt among them, corrupt the all-types answer) and
//! MOVE MEDIUM.

use std::fs::File;
use std::os::fd::AsFd;
use std::path::{Path, PathBuf};
use std::time::Duration;

use reel_plugin_abi::sdk::{Element, Fault, LibraryInfo};
use reel_plugin_abi::{
    REEL_E_TRANSPORT, REEL_ELEMENT_DRIVE, REEL_ELEMENT_IMPORT_EXPORT, REEL_ELEMENT_PICKER,
    REEL_ELEMENT_SLOT, asc, sense_key,
};

use reel_scsi_protocol::cdb::{element, inquiry};
use reel_scsi_protocol::command::DataDir;

use crate::sg;

/// Allocation for one element type's status (a few thousand slots with volume tags).
const ELEMENT_STATUS_ALLOC: usize = 256 * 1024;

/// An open changer.
pub struct Changer {
    path: PathBuf,
    file: File,
    timeout: Duration,
    picker: Option<u16>,
    /// The changer's identity (INQUIRY, VPD 80h): the library's (ABI 1.1 `library_info`).
    pub info: LibraryInfo,
}

/// Open a SCSI node read-write and non-blocking (a node without medium must still open).
pub fn open_node(path: &Path) -> Result<File, nix::errno::Errno> {
    use std::os::unix::fs::OpenOptionsExt;
    std::fs::OpenOptions::new()
        .read(true)
        .write(true)
        .custom_flags(nix::libc::O_NONBLOCK)
        .open(path)
        .map_err(|e| nix::errno::Errno::from_raw(e.raw_os_error().unwrap_or(nix::libc::EIO)))
}

impl Changer {
    /// Open the changer's `sg` node and check it answers INQUIRY as a medium changer.
    pub fn open(path: &Path, timeout: Duration) -> Result<Changer, Fault> {
        let file = open_node(path).map_err(|e| {
            crate::errno::errno_fault(e, &format!("opening changer {}", path.display()))
        })?;
        let c = Changer {
            path: path.to_path_buf(),
            file,
            timeout,
            picker: None,
            info: LibraryInfo::default(),
        };
        let mut inq = [0u8; 96];
        let n = c.command("INQUIRY", &inquiry::inquiry(96), DataDir::In(&mut inq))?;
        let inquiry::Inquiry {
            device_type: kind,
            vendor,
            product,
            ..
        } = inquiry::Inquiry::parse(&inq[..n])
            .map_err(|e| Fault::code(REEL_E_TRANSPORT, format!("{}: {e}", c.path.display())))?;
        if kind != inquiry::TYPE_CHANGER {
            return Err(Fault::invalid(format!(
                "{} is a {vendor} {product} of SCSI type {kind}, not a medium changer (type 8); \
                 name the changer's sg node or serial in `changer=`",
                c.path.display()
            )));
        }
        // The unit serial number names the library on every host; a changer without one is
        // named from the configuration by the host.
        let serial = sg::unit_serial(|what, cdb, data| c.command(what, cdb, data));
        tracing::info!(changer = %c.path.display(), %vendor, %product, %serial, "changer open");
        let mut c = c;
        c.info = LibraryInfo {
            vendor,
            product,
            serial,
        };
        Ok(c)
    }

    fn command(&self, what: &str, cdb: &[u8], data: DataDir<'_>) -> Result<usize, Fault> {
        let name = format!("{what} on changer {}", self.path.display());
        match sg::run(self.file.as_fd(), cdb, data, self.timeout) {
            Ok((None, n)) => Ok(n),
            Ok((Some(s), _)) => Err(s.fault_for(&name)),
            Err(e) => Err(Fault::code(REEL_E_TRANSPORT, format!("{name}: {e}"))),
        }
    }

    /// The elements of one type (the ABI's kinds are SMC's element type codes), numbered in
    /// address order; an ILLEGAL REQUEST (no such type) gives none.
    fn elements(&self, kind: u32) -> Result<Vec<Element>, Fault> {
        let mut buf = vec![0u8; ELEMENT_STATUS_ALLOC];
        let code = u8::try_from(kind).unwrap_or(element::TYPE_DATA_TRANSFER);
        let cdb = element::read_element_status(code, 0, 0xFFFF, true, false, buf.len() as u32);
        match self.command("READ ELEMENT STATUS", &cdb, DataDir::In(&mut buf)) {
            Ok(n) => {
                let mut status = element::parse(&buf[..n]).map_err(|e| {
                    Fault::code(REEL_E_TRANSPORT, format!("{}: {e}", self.path.display()))
                })?;
                // a device may add pages of other types
                status.retain(|e| e.element_type == code);
                status.sort_by_key(|e| e.address);
                Ok(status
                    .iter()
                    .enumerate()
                    .map(|(n, e)| e.to_element(n as u32))
                    .collect())
            }
            Err(f) if f.sense_key == sense_key::ILLEGAL_REQUEST && kind != REEL_ELEMENT_SLOT => {
                tracing::debug!(kind, "changer has no elements of this type: {}", f.message);
                Ok(Vec::new())
            }
            Err(f) => Err(f),
        }
    }

    /// Every element: pickers, slots, import/export, drives.
    pub fn inventory(&mut self) -> Result<Vec<Element>, Fault> {
        let mut all = Vec::new();
        for kind in [
            REEL_ELEMENT_PICKER,
            REEL_ELEMENT_SLOT,
            REEL_ELEMENT_IMPORT_EXPORT,
            REEL_ELEMENT_DRIVE,
        ] {
            let e = self.elements(kind)?;
            if kind == REEL_ELEMENT_PICKER {
                self.picker = e.first().map(|p| p.address as u16);
            }
            all.extend(e);
        }
        Ok(all)
    }

    /// MOVE MEDIUM from one element address to another.
    pub fn move_medium(&mut self, source: u32, destination: u32) -> Result<(), Fault> {
        let addr = |a: u32| {
            u16::try_from(a).map_err(|_| {
                Fault::check(
                    sense_key::ILLEGAL_REQUEST,
                    asc::INVALID_ELEMENT_ADDRESS,
                    format!(
                        "element address {a} is out of SMC's 16-bit range; take the inventory again"
                    ),
                )
            })
        };
        let (s, d) = (addr(source)?, addr(destination)?);
        if self.picker.is_none() {
            self.picker = self
                .elements(REEL_ELEMENT_PICKER)?
                .first()
                .map(|p| p.address as u16);
        }
        let t = self.picker.unwrap_or(0);
        tracing::info!(changer = %self.path.display(), source, destination, "MOVE MEDIUM");
        self.command(
            &format!("MOVE MEDIUM {source} -> {destination}"),
            &element::move_medium(t, s, d),
            DataDir::None,
        )
        .map(|_| ())
    }
}
