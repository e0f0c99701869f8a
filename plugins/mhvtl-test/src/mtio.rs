//! The magnetic tape ioctls of the Linux `st` driver (`<sys/mtio.h>`): MTIOCTOP, MTIOCGET,
//! MTIOCPOS. The only module of this plugin with `unsafe` code (SG_IO is `reel_scsi_protocol::sg`).

use std::os::fd::{AsRawFd, BorrowedFd};

use nix::errno::Errno;

/// `struct mtop`.
#[repr(C)]
#[derive(Clone, Copy, Debug)]
pub struct MtOp {
    /// Operation (`MT*`).
    pub op: i16,
    /// Count.
    pub count: i32,
}

/// `struct mtget`.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default)]
pub struct MtGet {
    /// Drive type.
    pub mt_type: std::ffi::c_long,
    /// Residual count (st: the partition).
    pub mt_resid: std::ffi::c_long,
    /// Device-dependent status: block size and density.
    pub mt_dsreg: std::ffi::c_long,
    /// Generic status (`GMT_*`).
    pub mt_gstat: std::ffi::c_long,
    /// Error register.
    pub mt_erreg: std::ffi::c_long,
    /// File number as st counts it (-1 unknown).
    pub mt_fileno: i32,
    /// Block number within the file as st counts it (-1 unknown).
    pub mt_blkno: i32,
}

impl MtGet {
    /// `mt_gstat` widened to i64 (`c_long` is 32 bits on 32-bit targets).
    #[allow(clippy::unnecessary_cast, reason = "c_long is i32 on 32-bit targets")]
    pub fn gstat(&self) -> i64 {
        self.mt_gstat as i64
    }
}

/// `struct mtpos`.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default)]
pub struct MtPos {
    /// Block number.
    pub mt_blkno: std::ffi::c_long,
}

/// Operations of MTIOCTOP used here.
pub mod op {
    /// Forward space over filemarks.
    pub const MTFSF: i16 = 1;
    /// Backward space over filemarks.
    pub const MTBSF: i16 = 2;
    /// Forward space records.
    pub const MTFSR: i16 = 3;
    /// Backward space records.
    pub const MTBSR: i16 = 4;
    /// Write filemarks, synchronously.
    pub const MTWEOF: i16 = 5;
    /// Rewind.
    pub const MTREW: i16 = 6;
    /// Rewind and unload.
    pub const MTOFFL: i16 = 7;
    /// Space to end of data.
    pub const MTEOM: i16 = 12;
    /// Set the block size (0 = variable).
    pub const MTSETBLK: i16 = 20;
    /// Locate to a block.
    pub const MTSEEK: i16 = 22;
    /// Set driver options.
    pub const MTSETDRVBUFFER: i16 = 24;
    /// Load.
    pub const MTLOAD: i16 = 30;
    /// Write filemarks with IMMED.
    pub const MTWEOFI: i16 = 35;
}

/// `GMT_EOF`: at a filemark.
pub const GMT_EOF: i64 = 0x8000_0000;
/// `GMT_BOT`: at beginning of tape.
pub const GMT_BOT: i64 = 0x4000_0000;
/// `GMT_EOT`: end of tape (early warning passed).
pub const GMT_EOT: i64 = 0x2000_0000;
/// `GMT_EOD`: end of data.
pub const GMT_EOD: i64 = 0x0800_0000;
/// `GMT_WR_PROT`: write protected.
pub const GMT_WR_PROT: i64 = 0x0400_0000;
/// `GMT_ONLINE`: a tape is loaded and ready.
pub const GMT_ONLINE: i64 = 0x0100_0000;
/// `GMT_DR_OPEN`: no tape.
pub const GMT_DR_OPEN: i64 = 0x0004_0000;

/// `MT_ST_SETBOOLEANS` for MTSETDRVBUFFER.
pub const MT_ST_SETBOOLEANS: i32 = 0x3000_0000;
/// `MT_ST_CLEARBOOLEANS` for MTSETDRVBUFFER.
pub const MT_ST_CLEARBOOLEANS: i32 = 0x4000_0000;
/// Buffered writes (fixed block mode).
pub const MT_ST_BUFFER_WRITES: i32 = 0x1;
/// Asynchronous writes: errors would surface on a later call.
pub const MT_ST_ASYNC_WRITES: i32 = 0x2;
/// Do not let st enforce READ BLOCK LIMITS itself: the drive answers for its limits.
pub const MT_ST_NO_BLKLIMS: i32 = 0x200;
/// Logical block addresses for MTSEEK/MTTELL (LOCATE/READ POSITION with BT=0).
pub const MT_ST_SCSI2LOGICAL: i32 = 0x800;

nix::ioctl_write_ptr!(mtioctop, b'm', 1, MtOp);
nix::ioctl_read!(mtiocget, b'm', 2, MtGet);
nix::ioctl_read!(mtiocpos, b'm', 3, MtPos);

/// MTIOCTOP.
pub fn top(fd: BorrowedFd<'_>, op: i16, count: i32) -> Result<(), Errno> {
    let m = MtOp { op, count };
    // SAFETY: `m` is a valid `struct mtop` that lives across this synchronous ioctl; the
    // kernel only reads it.
    unsafe { mtioctop(fd.as_raw_fd(), &m) }.map(|_| ())
}

/// MTIOCGET.
pub fn get(fd: BorrowedFd<'_>) -> Result<MtGet, Errno> {
    let mut g = MtGet::default();
    // SAFETY: `g` is a writable `struct mtget` of the size the ioctl number encodes.
    unsafe { mtiocget(fd.as_raw_fd(), &mut g) }?;
    Ok(g)
}

/// MTIOCPOS: the block number as st reads it from the drive.
pub fn pos(fd: BorrowedFd<'_>) -> Result<i64, Errno> {
    let mut p = MtPos::default();
    // SAFETY: `p` is a writable `struct mtpos` of the size the ioctl number encodes.
    unsafe { mtiocpos(fd.as_raw_fd(), &mut p) }?;
    #[allow(clippy::unnecessary_cast, reason = "c_long is i32 on 32-bit targets")]
    let block = p.mt_blkno as i64;
    Ok(block)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn struct_sizes_match_the_kernel_abi() {
        // x86_64 and aarch64 (LP64): the ioctl numbers encode these sizes.
        assert_eq!(std::mem::size_of::<MtOp>(), 8);
        assert_eq!(std::mem::size_of::<MtGet>(), 48);
        assert_eq!(std::mem::size_of::<MtPos>(), 8);
    }
}
