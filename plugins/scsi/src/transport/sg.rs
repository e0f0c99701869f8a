//! SG_IO on Linux `/dev/sg*`: one ioctl per command, page-aligned bounce buffer.
//!
//! Results are checked in the order LTFS's sg backend uses: errno, `host_status`,
//! `driver_status`, then the SCSI status and sense (returned to the caller as a
//! [`Completion`]).

use std::alloc::Layout;
use std::fs::{File, OpenOptions};
use std::os::fd::AsRawFd;
use std::os::unix::fs::OpenOptionsExt;
use std::time::Duration;

use super::{Completion, DataDir, Transport, TransportError};

/// `struct sg_io_hdr` from `<scsi/sg.h>`.
#[repr(C)]
struct SgIoHdr {
    interface_id: i32,
    dxfer_direction: i32,
    cmd_len: u8,
    mx_sb_len: u8,
    iovec_count: u16,
    dxfer_len: u32,
    dxferp: *mut std::ffi::c_void,
    cmdp: *mut u8,
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
/// Largest data phase we send in one SG_IO (the sg driver's own limit is set by the HBA).
const MAX_TRANSFER: usize = 16 * 1024 * 1024;
const PAGE: usize = 4096;

nix::ioctl_readwrite_bad!(sg_io_ioctl, 0x2285, SgIoHdr);

/// A page-aligned, zero-initialised buffer for SG_IO data phases.
struct AlignedBuf {
    ptr: *mut u8,
    len: usize,
}

// SAFETY: the buffer is plain owned memory; it is only touched by the thread owning it.
unsafe impl Send for AlignedBuf {}

impl AlignedBuf {
    fn new(len: usize) -> AlignedBuf {
        let len = len.max(PAGE).div_ceil(PAGE) * PAGE;
        let Ok(layout) = Layout::from_size_align(len, PAGE) else {
            return AlignedBuf {
                ptr: std::ptr::null_mut(),
                len: 0,
            };
        };
        // SAFETY: layout has non-zero size.
        let ptr = unsafe { std::alloc::alloc_zeroed(layout) };
        if ptr.is_null() {
            std::alloc::handle_alloc_error(layout);
        }
        AlignedBuf { ptr, len }
    }

    fn as_mut_slice(&mut self) -> &mut [u8] {
        if self.ptr.is_null() {
            return &mut [];
        }
        // SAFETY: ptr is valid for len bytes and exclusively owned.
        unsafe { std::slice::from_raw_parts_mut(self.ptr, self.len) }
    }
}

impl Drop for AlignedBuf {
    fn drop(&mut self) {
        if self.ptr.is_null() {
            return;
        }
        if let Ok(layout) = Layout::from_size_align(self.len, PAGE) {
            // SAFETY: allocated in `new` with this layout.
            unsafe { std::alloc::dealloc(self.ptr, layout) };
        }
    }
}

/// An open `/dev/sgN`.
pub struct SgTransport {
    path: String,
    file: File,
    bounce: AlignedBuf,
}

impl SgTransport {
    /// Open the sg node read-write and exclusive (`O_EXCL`: no other sg user of this device).
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
        let fd = file.as_raw_fd();
        nix::fcntl::fcntl(
            fd,
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
            bounce: AlignedBuf::new(256 * 1024),
        })
    }
}

fn host_meaning(host: u16) -> &'static str {
    match host {
        0x01 => "no connect: device gone",
        0x02 => "bus busy",
        0x03 => "time out",
        0x04 => "bad target",
        0x05 => "aborted",
        0x06 => "parity error",
        0x07 => "internal HBA error",
        0x08 => "bus reset",
        0x0B => "soft error, retry",
        0x0C => "requeue",
        0x11 => "nexus failure (reservation conflict)",
        _ => "unknown",
    }
}

impl Transport for SgTransport {
    fn execute(
        &mut self,
        cdb: &[u8],
        mut data: DataDir<'_>,
        timeout: Duration,
    ) -> Result<Completion, TransportError> {
        let len = data.len();
        if len > MAX_TRANSFER {
            return Err(TransportError::TooLarge {
                device: self.path.clone(),
                len,
                max: MAX_TRANSFER,
            });
        }
        if self.bounce.len < len {
            self.bounce = AlignedBuf::new(len);
        }
        let (dir, dxferp) = match &data {
            DataDir::None => (SG_DXFER_NONE, std::ptr::null_mut()),
            DataDir::In(_) => (SG_DXFER_FROM_DEV, self.bounce.ptr),
            DataDir::Out(b) => {
                self.bounce.as_mut_slice()[..b.len()].copy_from_slice(b);
                (SG_DXFER_TO_DEV, self.bounce.ptr)
            }
        };
        let mut cdb_buf = [0u8; 16];
        let cdb_len = cdb.len().min(16);
        cdb_buf[..cdb_len].copy_from_slice(&cdb[..cdb_len]);
        let mut sense = [0u8; 64];
        let ms = u32::try_from(timeout.as_millis()).unwrap_or(u32::MAX);
        let mut hdr = SgIoHdr {
            interface_id: i32::from(b'S'),
            dxfer_direction: dir,
            cmd_len: cdb_len as u8,
            mx_sb_len: sense.len() as u8,
            iovec_count: 0,
            dxfer_len: len as u32,
            dxferp: dxferp as *mut std::ffi::c_void,
            cmdp: cdb_buf.as_mut_ptr(),
            sbp: sense.as_mut_ptr(),
            timeout: ms,
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
        // SAFETY: hdr points at live buffers: cdb_buf (16 bytes), sense (64 bytes) and the
        // page-aligned bounce buffer of at least `len` bytes, all outliving the ioctl.
        let r = unsafe { sg_io_ioctl(self.file.as_raw_fd(), &mut hdr) };
        if let Err(e) = r {
            return Err(TransportError::Io {
                device: self.path.clone(),
                what: "SG_IO ioctl",
                source: std::io::Error::from(e),
            });
        }
        if hdr.host_status == 0x03 || hdr.driver_status & 0x0F == 0x06 {
            return Err(TransportError::Timeout {
                device: self.path.clone(),
                opcode: cdb.first().copied().unwrap_or(0),
                secs: timeout.as_secs(),
            });
        }
        if hdr.host_status != 0 {
            return Err(TransportError::Adapter {
                device: self.path.clone(),
                host: hdr.host_status,
                driver: hdr.driver_status,
                meaning: host_meaning(hdr.host_status),
            });
        }
        // driver_status: low nibble 0x08 (DRIVER_SENSE) is normal with CHECK CONDITION.
        let drv = hdr.driver_status & 0x0F;
        if drv != 0 && drv != 0x08 {
            return Err(TransportError::Adapter {
                device: self.path.clone(),
                host: hdr.host_status,
                driver: hdr.driver_status,
                meaning: "driver error",
            });
        }
        let resid = usize::try_from(hdr.resid.max(0)).unwrap_or(0);
        let transferred = len.saturating_sub(resid);
        if let DataDir::In(b) = &mut data {
            let n = transferred.min(b.len());
            b[..n].copy_from_slice(&self.bounce.as_mut_slice()[..n]);
        }
        let sense_len = usize::from(hdr.sb_len_wr).min(sense.len());
        Ok(Completion {
            status: hdr.status,
            sense: sense[..sense_len].to_vec(),
            transferred,
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
    fn header_matches_the_kernel_layout() {
        // <scsi/sg.h> on x86_64: 88 bytes, resid at 72.
        assert_eq!(std::mem::size_of::<SgIoHdr>(), 88);
        let h = std::mem::MaybeUninit::<SgIoHdr>::uninit();
        let base = h.as_ptr() as usize;
        // SAFETY: only computing field addresses of an uninitialised value, never reading.
        let resid = unsafe { std::ptr::addr_of!((*h.as_ptr()).resid) } as usize;
        assert_eq!(resid - base, 72);
    }

    #[test]
    fn aligned_buffer_is_page_aligned_and_rounded() {
        let mut b = AlignedBuf::new(5000);
        assert_eq!(b.ptr as usize % PAGE, 0);
        assert_eq!(b.len, 8192);
        assert!(b.as_mut_slice().iter().all(|x| *x == 0));
    }

    #[test]
    fn missing_node_names_the_device() {
        let Err(e) = SgTransport::open("/dev/sg-reel-does-not-exist") else {
            panic!("opened a missing node");
        };
        assert!(e.to_string().contains("/dev/sg-reel-does-not-exist"), "{e}");
    }
}
