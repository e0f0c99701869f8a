//! One tape drive through the Linux `st` driver on its no-rewind node (`/dev/nstN`), in
//! variable block mode, with the drive's own `sg` node for what st does not offer (READ
//! POSITION with the file number, TEST UNIT READY, INQUIRY, READ BLOCK LIMITS, MAM, LOG SENSE)
//! and to recover the sense of a read that st reports only as EIO.
//!
//! What st imposes (docs/MHVTL.md has the long form):
//! - a filemark read returns 0 bytes, and so does the first read at end of data after a
//!   filemark; MTIOCGET's GMT_EOD tells them apart;
//! - after writing, st writes one filemark by itself before a rewind, locate (MTSEEK),
//!   backward space over filemarks or unload, and when the node is closed;
//! - in the early-warning zone st answers every other write with ENOSPC without writing;
//! - a record longer than the read request is skipped with ENOMEM (this plugin reads through a
//!   bounce buffer of the drive's maximum record size to keep SSC's ILI semantics);
//! - st consumes the drive's UNIT ATTENTION inside MTLOAD: the plugin reports the ABI's
//!   6/28/00 once after each successful load itself.

use std::fs::File;
use std::io::{Read, Write};
use std::os::fd::AsFd;
use std::path::PathBuf;
use std::time::{Duration, Instant};

use nix::errno::Errno;
use reel_plugin_abi::sdk::{Call, DriveInfo, Fault, ReadRecord};
use reel_plugin_abi::{
    REEL_E_INVALID_ARG, REEL_E_TRANSPORT, REEL_E_UNSUPPORTED, REEL_FLAG_EOM, REEL_FLAG_FILEMARK,
    REEL_FLAG_ILI, REEL_POS_BOP, REEL_POS_EOP, REEL_POS_UNKNOWN, REEL_SPACE_EOD,
    REEL_SPACE_FILEMARKS, REEL_SPACE_RECORDS, ReelDriveStats, ReelPosition, asc, sense_key,
};

use reel_scsi_protocol::cdb::{attribute, inquiry, log, motion, position, rw, unit};
use reel_scsi_protocol::command::DataDir;

use crate::changer::open_node;
use crate::errno::errno_fault;
use crate::mtio::{self, op};
use crate::sg;

/// LOG SENSE page 2Eh, TapeAlert: one parameter per flag (the st path reads this page; the
/// SCSI plugin reads the response page 12h).
const PAGE_TAPE_ALERT: u8 = 0x2E;

/// Valid bits of [`ReelDriveStats::valid`] this plugin fills (field order after `valid`).
pub const STATS_VALID: u32 = (1 << 0) // busy_ns
    | (1 << 2) // locate_ns
    | (1 << 3) // mount_ns
    | (1 << 4) // bytes_written
    | (1 << 5) // bytes_read
    | (1 << 6) // records_written
    | (1 << 7) // records_read
    | (1 << 8) // filemarks_written
    | (1 << 9) // locates
    | (1 << 13); // mounts

/// Which statistics bucket a call's time goes to.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Bucket {
    Other,
    Locate,
    Mount,
}

/// A drive opened through st.
pub struct StDrive {
    name: String,
    nst: PathBuf,
    tape: File,
    sg: Option<File>,
    sg_path: Option<PathBuf>,
    timeout: Duration,
    max_record: u64,
    bounce: Vec<u8>,
    stats: ReelDriveStats,
    /// Records were written since the last filemark: st would add a filemark of its own
    /// before a rewind, locate, backward filemark space or unload, and at close.
    armed: bool,
    /// A load succeeded and no medium command has run since: report 6/28/00 once.
    pending_attention: bool,
}

/// What a 0-byte st read means.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ZeroRead {
    /// A filemark was crossed.
    Filemark,
    /// End of data (st returns 0 for the first blank check after a filemark).
    EndOfData,
}

/// Classify a 0-byte read by st's generic status after it.
pub fn classify_zero_read(gstat: i64) -> ZeroRead {
    if gstat & mtio::GMT_EOD != 0 {
        ZeroRead::EndOfData
    } else {
        ZeroRead::Filemark
    }
}

/// The fault a SPACE that stopped early reports, from the positions before and after and st's
/// status. `count` is the signed request. Positions are `(block, file, at_bop)`.
pub fn space_stop_fault(
    kind: u32,
    count: i64,
    before: (u64, u64, bool),
    after: (u64, u64, bool),
    gstat: i64,
) -> Fault {
    let n = count.unsigned_abs() as i64;
    let forward = count > 0;
    // The residue carries the sign of the request (docs/ABI.md, Spacing).
    let sign = if forward { 1 } else { -1 };
    let moved_blocks = after.0.abs_diff(before.0) as i64;
    let moved_files = after.1.abs_diff(before.1) as i64;
    let bot = |done: i64| {
        Fault::check(
            sense_key::NO_SENSE,
            asc::BEGINNING_OF_MEDIUM,
            format!("space stopped at beginning of medium after {done} of {n}"),
        )
        .with_flags(REEL_FLAG_EOM)
        .with_residue(sign * (n - done))
    };
    let eod = |done: i64| {
        Fault::check(
            sense_key::BLANK_CHECK,
            asc::END_OF_DATA,
            format!("space stopped at end of data after {done} of {n}"),
        )
        .with_residue(sign * (n - done))
    };
    match kind {
        REEL_SPACE_FILEMARKS if forward => eod(moved_files),
        REEL_SPACE_FILEMARKS => bot(moved_files),
        _ if !forward && after.2 => bot(moved_blocks),
        _ if forward && gstat & mtio::GMT_EOD != 0 => eod(moved_blocks),
        _ => {
            // Stopped on a filemark: it counts as an object passed but not as a record.
            let done = (moved_blocks - 1).max(0);
            Fault::check(
                sense_key::NO_SENSE,
                asc::FILEMARK,
                format!("space stopped at a filemark after {done} of {n} records"),
            )
            .with_flags(REEL_FLAG_FILEMARK)
            .with_residue(sign * (n - done))
        }
    }
}

/// The outcome of reading a record of `len` bytes into a buffer of `cap` bytes, `delivered` of
/// them copied: the record, or (longer than the buffer) NO SENSE with ILI, residue
/// `cap - len` and the bytes delivered, as docs/ABI.md specifies.
pub fn record_outcome(len: usize, delivered: usize, cap: usize) -> Result<ReadRecord, Fault> {
    if len > cap {
        return Err(Fault::check(
            sense_key::NO_SENSE,
            asc::NONE,
            format!(
                "record of {len} bytes is longer than the buffer of {cap}; the first {delivered} \
                 bytes were delivered and the tape is past the record"
            ),
        )
        .with_flags(REEL_FLAG_ILI)
        .with_residue(cap as i64 - len as i64)
        .with_transferred(delivered));
    }
    Ok(ReadRecord { len, crc: None })
}

/// Open a no-rewind st node read-write, or read-only when the cartridge is write protected.
fn open_tape(nst: &std::path::Path, name: &str) -> Result<File, Fault> {
    match open_node(nst) {
        Ok(f) => Ok(f),
        Err(Errno::EACCES | Errno::EROFS) => {
            use std::os::unix::fs::OpenOptionsExt;
            std::fs::OpenOptions::new()
                .read(true)
                .custom_flags(nix::libc::O_NONBLOCK)
                .open(nst)
                .map_err(|e| {
                    errno_fault(
                        Errno::from_raw(e.raw_os_error().unwrap_or(nix::libc::EIO)),
                        &format!("opening {name} read-only"),
                    )
                })
        }
        Err(e) => Err(errno_fault(e, &format!("opening {name}"))),
    }
}

/// st options this plugin needs: logical block addresses for MTSEEK/MTIOCPOS (BT=0), no
/// block-limit check in st (the drive answers for its own limits; tgt reports a minimum of 4
/// bytes it does not enforce), synchronous writes (an error belongs to the write that caused
/// it). Needs CAP_SYS_ADMIN; without it st keeps its defaults and a warning says so.
fn set_st_options(tape: &File, name: &str) {
    for (what, v) in [
        (
            "logical block addresses, no block-limit check",
            mtio::MT_ST_SETBOOLEANS | mtio::MT_ST_SCSI2LOGICAL | mtio::MT_ST_NO_BLKLIMS,
        ),
        (
            "synchronous writes",
            mtio::MT_ST_CLEARBOOLEANS | mtio::MT_ST_ASYNC_WRITES | mtio::MT_ST_BUFFER_WRITES,
        ),
    ] {
        if let Err(e) = mtio::top(tape.as_fd(), op::MTSETDRVBUFFER, v) {
            tracing::warn!(drive = %name, "cannot set st option {what}: {e} (needs CAP_SYS_ADMIN)");
        }
    }
}

impl StDrive {
    /// Open the drive's nodes and set st up: variable blocks, logical block addresses for
    /// MTSEEK, synchronous writes (so an error belongs to the write that caused it).
    pub fn open(
        nst: PathBuf,
        sg_path: Option<PathBuf>,
        timeout: Duration,
        label: &str,
    ) -> Result<StDrive, Fault> {
        let name = format!("{} ({label})", nst.display());
        // The st options live in the driver (per device) and take effect when st next checks
        // the tape, which it does at open: set them, close, open again (st allows one opener).
        let tape = open_tape(&nst, &name)?;
        set_st_options(&tape, &name);
        drop(tape);
        let tape = open_tape(&nst, &name)?;
        let sg = match &sg_path {
            Some(p) => match open_node(p) {
                Ok(f) => Some(f),
                Err(e) => {
                    tracing::warn!(drive = %name, sg = %p.display(), "cannot open the sg node ({e}); \
                        READ POSITION falls back to st, MAM and LOG SENSE are unavailable");
                    None
                }
            },
            None => {
                tracing::warn!(drive = %name, "no sg node found for this drive in sysfs (is the sg module loaded?)");
                None
            }
        };
        let mut d = StDrive {
            name,
            nst,
            tape,
            sg,
            sg_path,
            timeout,
            max_record: 0,
            bounce: Vec::new(),
            armed: false,
            pending_attention: false,
            stats: ReelDriveStats {
                struct_size: std::mem::size_of::<ReelDriveStats>() as u32,
                valid: STATS_VALID,
                ..ReelDriveStats::default()
            },
        };
        d.max_record = d.block_limits().unwrap_or(0);
        if d.online() {
            d.variable_blocks();
        }
        tracing::info!(drive = %d.name, sg = ?d.sg_path, max_record = d.max_record, "drive open");
        Ok(d)
    }

    fn online(&self) -> bool {
        mtio::get(self.tape.as_fd()).is_ok_and(|g| g.gstat() & mtio::GMT_ONLINE != 0)
    }

    fn variable_blocks(&self) {
        if let Err(e) = mtio::top(self.tape.as_fd(), op::MTSETBLK, 0) {
            tracing::warn!(drive = %self.name, "MTSETBLK 0 (variable block mode) failed: {e}");
        }
    }

    fn block_limits(&self) -> Option<u64> {
        let mut b = [0u8; 6];
        let n = self
            .sg_command(
                "READ BLOCK LIMITS",
                &motion::read_block_limits(),
                DataDir::In(&mut b),
            )
            .ok()?;
        motion::BlockLimits::parse(&b[..n])
            .ok()
            .map(|l| u64::from(l.max))
            .filter(|m| *m > 0)
    }

    /// Run `f`, timing it into `call` and the statistics.
    fn timed<T>(
        &mut self,
        call: &mut Call,
        bucket: Bucket,
        f: impl FnOnce(&mut Self, &mut Call) -> Result<T, Fault>,
    ) -> Result<T, Fault> {
        let t0 = Instant::now();
        let r = f(self, call);
        let ns = t0.elapsed().as_nanos() as u64;
        call.elapsed_ns = ns;
        self.stats.busy_ns += ns;
        match bucket {
            Bucket::Locate => self.stats.locate_ns += ns,
            Bucket::Mount => self.stats.mount_ns += ns,
            Bucket::Other => {}
        }
        if let Err(f) = &r {
            tracing::debug!(drive = %self.name, "{f}");
        }
        r
    }

    fn no_sg(&self, what: &str) -> Fault {
        Fault::code(
            REEL_E_UNSUPPORTED,
            format!(
                "{what} on {} needs the drive's sg node, which was not found; load the sg module \
                 and reopen the library",
                self.name
            ),
        )
    }

    /// One CDB through the drive's sg node.
    fn sg_command(&self, what: &str, cdb: &[u8], data: DataDir<'_>) -> Result<usize, Fault> {
        let Some(sg) = &self.sg else {
            return Err(self.no_sg(what));
        };
        let name = format!("{what} on {}", self.name);
        match sg::run(sg.as_fd(), cdb, data, self.timeout) {
            Ok((None, n)) => Ok(n),
            Ok((Some(s), _)) => Err(s.fault_for(&name)),
            Err(e) => Err(Fault::code(REEL_E_TRANSPORT, format!("{name}: {e}"))),
        }
    }

    /// After st said EIO, ask the drive (TEST UNIT READY) whether it has a condition that
    /// explains it; otherwise map the errno.
    fn refine(&self, e: Errno, what: &str) -> Fault {
        let what = format!("{what} on {}", self.name);
        if e == Errno::EIO
            && self.sg.is_some()
            && let Err(f) =
                self.sg_command("TEST UNIT READY", &unit::test_unit_ready(), DataDir::None)
            && f.sense_key != sense_key::NO_SENSE
        {
            return Fault {
                message: format!("{what}: {}", f.message),
                ..f
            };
        }
        errno_fault(e, &what)
    }

    /// Keep st from writing a filemark of its own: after records, st writes one before REWIND,
    /// MTSEEK, MTBSF and unload (and at close). WRITE FILEMARKS with a count of 0 flushes the
    /// drive's buffer, writes nothing, and returns st to idle.
    fn disarm(&mut self) -> Result<(), Fault> {
        if self.armed {
            self.st(
                "WRITE FILEMARKS 0 (flush before repositioning)",
                op::MTWEOF,
                0,
            )?;
            self.armed = false;
        }
        Ok(())
    }

    fn st(&self, what: &str, o: i16, count: i32) -> Result<(), Fault> {
        mtio::top(self.tape.as_fd(), o, count).map_err(|e| self.refine(e, what))
    }

    fn position(&self) -> Result<ReelPosition, Fault> {
        if self.sg.is_some() {
            let mut b = [0u8; 32];
            match self.sg_command(
                "READ POSITION",
                &position::read_position_long(),
                DataDir::In(&mut b),
            ) {
                Ok(n) => {
                    return position::parse_long(&b[..n])
                        .map(|p| p.to_reel())
                        .map_err(|e| Fault::code(REEL_E_TRANSPORT, format!("{}: {e}", self.name)));
                }
                Err(f) if f.sense_key == sense_key::ILLEGAL_REQUEST => {
                    let mut s = [0u8; 20];
                    let n = self.sg_command(
                        "READ POSITION (short)",
                        &position::read_position_short(),
                        DataDir::In(&mut s),
                    )?;
                    let mut p = position::parse_short(&s[..n])
                        .map(|p| p.to_reel())
                        .map_err(|e| {
                            Fault::code(REEL_E_TRANSPORT, format!("{}: {e}", self.name))
                        })?;
                    p.file = self.st_file().unwrap_or_else(|| {
                        p.flags |= REEL_POS_UNKNOWN;
                        0
                    });
                    return Ok(p);
                }
                Err(f) => return Err(f),
            }
        }
        let block = mtio::pos(self.tape.as_fd()).map_err(|e| self.refine(e, "MTIOCPOS"))?;
        let g = mtio::get(self.tape.as_fd()).map_err(|e| self.refine(e, "MTIOCGET"))?;
        let mut p = ReelPosition {
            block: block.max(0) as u64,
            file: g.mt_fileno.max(0) as u64,
            ..ReelPosition::default()
        };
        if g.mt_fileno < 0 || block < 0 {
            p.flags |= REEL_POS_UNKNOWN;
        }
        if g.gstat() & mtio::GMT_BOT != 0 {
            p.flags |= REEL_POS_BOP;
        }
        if g.gstat() & mtio::GMT_EOT != 0 {
            p.flags |= REEL_POS_EOP;
        }
        Ok(p)
    }

    fn st_file(&self) -> Option<u64> {
        mtio::get(self.tape.as_fd())
            .ok()
            .and_then(|g| u64::try_from(g.mt_fileno).ok())
    }

    fn gstat(&self) -> i64 {
        mtio::get(self.tape.as_fd()).map(|g| g.gstat()).unwrap_or(0)
    }

    /// Re-issue a read that st failed with EIO through sg, to get its sense (and its data,
    /// when the drive now returns the record).
    fn read_via_sg(&mut self, len: usize, buffer: &mut [u8]) -> Result<ReadRecord, Fault> {
        let Some(sg) = &self.sg else {
            return Err(errno_fault(Errno::EIO, &format!("READ on {}", self.name)));
        };
        let want = len.min(rw::MAX_TRANSFER);
        let Some(cdb) = rw::read6(want, false) else {
            return Err(errno_fault(
                Errno::EINVAL,
                &format!("READ on {}", self.name),
            ));
        };
        let use_bounce = want > buffer.len();
        if use_bounce && self.bounce.len() < want {
            self.bounce.resize(want, 0);
        }
        let target: &mut [u8] = if use_bounce {
            &mut self.bounce[..want]
        } else {
            &mut buffer[..want]
        };
        let what = format!("READ on {}", self.name);
        let (sense, transferred) = sg::run(sg.as_fd(), &cdb, DataDir::In(target), self.timeout)
            .map_err(|e| Fault::code(REEL_E_TRANSPORT, format!("{what}: {e}")))?;
        // ILI: INFORMATION = requested - actual length (negative for a longer record).
        let record_len = match sense {
            None => transferred,
            Some(s) if s.ili && s.key == sense_key::NO_SENSE => {
                (want as i64 - s.information.unwrap_or(0)).max(0) as usize
            }
            Some(s) if s.filemark => return Err(Self::filemark_fault(&self.name)),
            Some(s) => return Err(s.fault_for(&what)),
        };
        self.deliver(record_len, record_len.min(want), use_bounce, buffer)
    }

    /// Hand a record of `len` bytes, of which `landed` reached `buffer` (or the bounce
    /// buffer), to the caller: SSC's ILI semantics when it is longer than the caller's buffer.
    fn deliver(
        &mut self,
        len: usize,
        landed: usize,
        bounced: bool,
        buffer: &mut [u8],
    ) -> Result<ReadRecord, Fault> {
        self.stats.records_read += 1;
        self.stats.bytes_read += landed as u64;
        let cap = buffer.len();
        let delivered = landed.min(cap);
        if bounced {
            buffer[..delivered].copy_from_slice(&self.bounce[..delivered]);
        }
        record_outcome(len, delivered, cap)
    }

    fn filemark_fault(name: &str) -> Fault {
        Fault::check(
            sense_key::NO_SENSE,
            asc::FILEMARK,
            format!("READ on {name}: filemark"),
        )
        .with_flags(REEL_FLAG_FILEMARK)
    }

    fn eod_fault(name: &str) -> Fault {
        Fault::check(
            sense_key::BLANK_CHECK,
            asc::END_OF_DATA,
            format!("READ on {name}: end of data"),
        )
    }

    /// Early warning after a write that went to the medium: CHECK CONDITION NO SENSE 0/00/02
    /// with EOM (docs/ABI.md, Writing); the data is written.
    fn early_warning(&self, what: &str) -> Fault {
        Fault::check(
            sense_key::NO_SENSE,
            asc::END_OF_MEDIUM,
            format!(
                "{what} on {}: written, early warning: finish the current container and close \
                 the cartridge",
                self.name
            ),
        )
        .with_flags(REEL_FLAG_EOM)
    }

    /// The UNIT ATTENTION 6/28/00 the ABI reports once after a load (st consumed the drive's
    /// own inside MTLOAD).
    fn unit_attention(&mut self) -> Result<(), Fault> {
        if std::mem::take(&mut self.pending_attention) {
            return Err(Fault::check(
                sense_key::UNIT_ATTENTION,
                asc::MEDIUM_MAY_HAVE_CHANGED,
                format!(
                    "{}: medium may have changed (loaded); the next command runs normally",
                    self.name
                ),
            ));
        }
        Ok(())
    }
}

impl reel_plugin_abi::sdk::Drive for StDrive {
    fn info(&mut self, call: &mut Call) -> Result<DriveInfo, Fault> {
        self.timed(call, Bucket::Other, |d, _| {
            let mut inq = [0u8; 96];
            let n = d.sg_command("INQUIRY", &inquiry::inquiry(96), DataDir::In(&mut inq))?;
            let inquiry::Inquiry {
                vendor, product, ..
            } = inquiry::Inquiry::parse(&inq[..n])
                .map_err(|e| Fault::code(REEL_E_TRANSPORT, format!("{}: {e}", d.name)))?;
            let serial = sg::unit_serial(|what, cdb, data| d.sg_command(what, cdb, data));
            if d.max_record == 0 {
                d.max_record = d.block_limits().unwrap_or(0);
            }
            Ok(DriveInfo {
                vendor,
                product,
                serial,
                max_record_bytes: d.max_record,
                capabilities: None,
            })
        })
    }

    fn test_ready(&mut self, call: &mut Call) -> Result<(), Fault> {
        self.timed(call, Bucket::Other, |d, _| {
            d.unit_attention()?;
            if d.sg.is_some() {
                return d
                    .sg_command("TEST UNIT READY", &unit::test_unit_ready(), DataDir::None)
                    .map(|_| ());
            }
            if d.online() {
                Ok(())
            } else {
                Err(errno_fault(
                    Errno::ENOMEDIUM,
                    &format!("TEST UNIT READY on {}", d.name),
                ))
            }
        })
    }

    fn load(&mut self, call: &mut Call) -> Result<(), Fault> {
        self.timed(call, Bucket::Mount, |d, _| {
            // MTLOAD makes st check the tape again (new medium, write protection, block size).
            d.st("LOAD", op::MTLOAD, 0)?;
            d.variable_blocks();
            if d.max_record == 0 {
                d.max_record = d.block_limits().unwrap_or(0);
            }
            d.stats.mounts += 1;
            d.pending_attention = true;
            Ok(())
        })
    }

    fn unload(&mut self, call: &mut Call) -> Result<(), Fault> {
        self.timed(call, Bucket::Mount, |d, _| {
            d.pending_attention = false;
            d.disarm()?;
            d.st("UNLOAD", op::MTOFFL, 0)
        })
    }

    fn rewind(&mut self, call: &mut Call) -> Result<(), Fault> {
        self.timed(call, Bucket::Locate, |d, _| {
            d.unit_attention()?;
            d.disarm()?;
            d.st("REWIND", op::MTREW, 0)
        })
    }

    fn locate(&mut self, block: u64, call: &mut Call) -> Result<(), Fault> {
        self.timed(call, Bucket::Locate, |d, _| {
            d.unit_attention()?;
            let target = i32::try_from(block).map_err(|_| {
                Fault::code(
                    REEL_E_INVALID_ARG,
                    format!("block {block} is beyond st's MTSEEK range (2^31-1)"),
                )
            })?;
            d.disarm()?;
            d.stats.locates += 1;
            match mtio::top(d.tape.as_fd(), op::MTSEEK, target) {
                Ok(()) => Ok(()),
                Err(e) => {
                    let f = d.refine(e, &format!("LOCATE {block}"));
                    // TEST UNIT READY found nothing wrong: the block is past the end of data.
                    if e == Errno::EIO
                        && f.sense_key == sense_key::MEDIUM_ERROR
                        && f.asc == 0
                        && let Ok(p) = d.position()
                        && p.block < block
                    {
                        return Err(Fault::check(
                            sense_key::BLANK_CHECK,
                            asc::END_OF_DATA,
                            format!(
                                "LOCATE {block} on {}: end of data at block {}",
                                d.name, p.block
                            ),
                        ));
                    }
                    Err(f)
                }
            }
        })
    }

    fn space(&mut self, kind: u32, count: i64, call: &mut Call) -> Result<(), Fault> {
        self.timed(call, Bucket::Locate, |d, _| {
            d.unit_attention()?;
            let o = match (kind, count > 0) {
                (REEL_SPACE_RECORDS, true) => op::MTFSR,
                (REEL_SPACE_RECORDS, false) => op::MTBSR,
                (REEL_SPACE_FILEMARKS, true) => op::MTFSF,
                (REEL_SPACE_FILEMARKS, false) => op::MTBSF,
                (REEL_SPACE_EOD, _) => op::MTEOM,
                _ => {
                    return Err(Fault::invalid(format!(
                        "space kind {kind} is not records (0), filemarks (1) or end of data (3)"
                    )));
                }
            };
            if count == 0 && kind != REEL_SPACE_EOD {
                return Ok(());
            }
            let n = i32::try_from(count.unsigned_abs()).map_err(|_| {
                Fault::invalid(format!("space count {count} is beyond st's range (2^31-1)"))
            })?;
            d.disarm()?;
            d.stats.locates += 1;
            let before = d.position().ok();
            match mtio::top(
                d.tape.as_fd(),
                o,
                if kind == REEL_SPACE_EOD { 0 } else { n },
            ) {
                Ok(()) => Ok(()),
                Err(e) => {
                    let f = d.refine(e, &format!("SPACE {count}"));
                    if kind == REEL_SPACE_EOD
                        || e != Errno::EIO
                        || f.sense_key != sense_key::MEDIUM_ERROR
                    {
                        return Err(f);
                    }
                    match (before, d.position().ok()) {
                        (Some(b), Some(a)) => {
                            let mut fault = space_stop_fault(
                                kind,
                                count,
                                (b.block, b.file, b.flags & REEL_POS_BOP != 0),
                                (a.block, a.file, a.flags & REEL_POS_BOP != 0),
                                d.gstat(),
                            );
                            fault.message = format!("SPACE on {}: {}", d.name, fault.message);
                            Err(fault)
                        }
                        _ => Err(f),
                    }
                }
            }
        })
    }

    fn read_position(&mut self, call: &mut Call) -> Result<ReelPosition, Fault> {
        self.timed(call, Bucket::Other, |d, _| {
            d.unit_attention()?;
            d.position()
        })
    }

    fn write_record(
        &mut self,
        data: &[u8],
        crc: Option<u32>,
        call: &mut Call,
    ) -> Result<(), Fault> {
        self.timed(call, Bucket::Other, |d, _| {
            d.unit_attention()?;
            if crc.is_some() {
                return Err(Fault::unsupported(
                    "logical block protection (st cannot carry protection information)",
                ));
            }
            if data.is_empty() {
                return Err(Fault::invalid("a record of 0 bytes cannot be written through st"));
            }
            if d.max_record > 0 && data.len() as u64 > d.max_record {
                return Err(Fault::invalid(format!(
                    "record of {} bytes is larger than the drive's maximum of {} (READ BLOCK LIMITS)",
                    data.len(),
                    d.max_record
                )));
            }
            let mut retried = false;
            loop {
                match d.tape.write(data) {
                    Ok(n) if n == data.len() => {
                        d.armed = true;
                        d.stats.records_written += 1;
                        d.stats.bytes_written += n as u64;
                        if retried || d.gstat() & mtio::GMT_EOT != 0 {
                            return Err(d.early_warning("WRITE"));
                        }
                        return Ok(());
                    }
                    Ok(n) => {
                        return Err(Fault::check(
                            sense_key::VOLUME_OVERFLOW,
                            asc::END_OF_MEDIUM,
                            format!("WRITE on {}: only {n} of {} bytes written", d.name, data.len()),
                        )
                        .with_flags(REEL_FLAG_EOM)
                        .with_residue((data.len() - n) as i64));
                    }
                    // In the early-warning zone st refuses every other write with ENOSPC
                    // without writing; the next one goes through. Twice in a row is the end.
                    Err(e) if e.raw_os_error() == Some(nix::libc::ENOSPC) && !retried => {
                        retried = true;
                    }
                    Err(e) => {
                        let errno = Errno::from_raw(e.raw_os_error().unwrap_or(nix::libc::EIO));
                        let mut f = d.refine(errno, "WRITE");
                        if errno == Errno::ENOSPC {
                            f = f.with_residue(data.len() as i64);
                        }
                        return Err(f);
                    }
                }
            }
        })
    }

    fn write_filemarks(
        &mut self,
        count: u32,
        immediate: bool,
        call: &mut Call,
    ) -> Result<(), Fault> {
        self.timed(call, Bucket::Other, |d, _| {
            d.unit_attention()?;
            let n = i32::try_from(count)
                .map_err(|_| Fault::invalid(format!("filemark count {count} is too large")))?;
            let o = if immediate { op::MTWEOFI } else { op::MTWEOF };
            d.st(
                if immediate {
                    "WRITE FILEMARKS (immediate)"
                } else {
                    "WRITE FILEMARKS"
                },
                o,
                n,
            )?;
            d.armed = false;
            d.stats.filemarks_written += count as u64;
            if count > 0 && d.position().is_ok_and(|p| p.flags & REEL_POS_EOP != 0) {
                return Err(d.early_warning("WRITE FILEMARKS"));
            }
            Ok(())
        })
    }

    fn read_record(&mut self, buffer: &mut [u8], call: &mut Call) -> Result<ReadRecord, Fault> {
        self.timed(call, Bucket::Other, |d, _| {
            d.unit_attention()?;
            if buffer.is_empty() {
                return Err(Fault::invalid("read buffer of 0 bytes"));
            }
            // Read at least the drive's maximum record: st skips a longer record with ENOMEM.
            let want = if d.max_record > 0 {
                d.max_record as usize
            } else {
                buffer.len()
            };
            let bounced = want > buffer.len();
            if bounced && d.bounce.len() < want {
                d.bounce.resize(want, 0);
            }
            let r = if bounced {
                d.tape.read(&mut d.bounce[..want])
            } else {
                d.tape.read(&mut buffer[..want])
            };
            // st switches to reading (no filemark of its own any more), whatever the outcome.
            d.armed = false;
            match r {
                Ok(0) => match classify_zero_read(d.gstat()) {
                    ZeroRead::Filemark => Err(Self::filemark_fault(&d.name)),
                    ZeroRead::EndOfData => Err(Self::eod_fault(&d.name)),
                },
                Ok(n) => d.deliver(n, n, bounced, buffer),
                Err(e) => match Errno::from_raw(e.raw_os_error().unwrap_or(nix::libc::EIO)) {
                    Errno::EIO => d.read_via_sg(want, buffer),
                    other => Err(d.refine(other, "READ")),
                },
            }
        })
    }

    fn mam_read(&mut self, attribute: u16, call: &mut Call) -> Result<Vec<u8>, Fault> {
        self.timed(call, Bucket::Other, |d, _| {
            d.unit_attention()?;
            let mut b = vec![0u8; 64 * 1024];
            let n = d.sg_command(
                "READ ATTRIBUTE",
                &attribute::read_attribute(attribute, b.len() as u32),
                DataDir::In(&mut b),
            )?;
            attribute::parse(&b[..n])
                .map_err(|e| Fault::code(REEL_E_TRANSPORT, format!("{}: {e}", d.name)))?
                .iter()
                .find(|a| a.id == attribute)
                .map(attribute::value_of)
                .ok_or_else(|| {
                    Fault::check(
                        sense_key::ILLEGAL_REQUEST,
                        asc::INVALID_FIELD_IN_CDB,
                        format!("MAM attribute {attribute:04X}h is not set on this cartridge"),
                    )
                })
        })
    }

    fn mam_write(&mut self, attribute: u16, data: &[u8], call: &mut Call) -> Result<(), Fault> {
        self.timed(call, Bucket::Other, |d, _| {
            d.unit_attention()?;
            let list =
                attribute::encode(attribute, data).map_err(|e| Fault::invalid(e.to_string()))?;
            let c = attribute::write_attribute(list.len() as u32);
            d.sg_command("WRITE ATTRIBUTE", &c, DataDir::Out(&list))
                .map(|_| ())
        })
    }

    fn statistics(&mut self, call: &mut Call) -> Result<ReelDriveStats, Fault> {
        self.timed(call, Bucket::Other, |d, _| Ok(d.stats))
    }

    fn tape_alerts(&mut self, call: &mut Call) -> Result<u64, Fault> {
        self.timed(call, Bucket::Other, |d, _| {
            let mut b = vec![0u8; 1024];
            let n = d.sg_command(
                "LOG SENSE 2Eh",
                &log::log_sense(PAGE_TAPE_ALERT, 0, b.len() as u16),
                DataDir::In(&mut b),
            )?;
            log::parse(&b[..n], PAGE_TAPE_ALERT)
                .map(|params| log::tape_alert_flags(&params))
                .map_err(|e| Fault::code(REEL_E_TRANSPORT, format!("{}: {e}", d.name)))
        })
    }
}

impl Drop for StDrive {
    fn drop(&mut self) {
        if let Err(f) = self.disarm() {
            tracing::warn!(drive = %self.name, "flush at close failed: {f}");
        }
        tracing::debug!(drive = %self.name, nst = %self.nst.display(), "drive closed");
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use reel_plugin_abi::{REEL_E_CHECK_CONDITION, REEL_FLAG_RESIDUE_VALID};

    #[test]
    fn records_fitting_and_longer_than_the_buffer() {
        assert_eq!(
            record_outcome(1000, 1000, 4096),
            Ok(ReadRecord {
                len: 1000,
                crc: None
            })
        );
        assert_eq!(
            record_outcome(4096, 4096, 4096),
            Ok(ReadRecord {
                len: 4096,
                crc: None
            })
        );
        let f = record_outcome(4096, 100, 100).unwrap_err();
        assert_eq!(f.code, REEL_E_CHECK_CONDITION);
        assert_eq!((f.sense_key, f.asc, f.ascq), (0, 0, 0));
        assert!(f.flags & REEL_FLAG_ILI != 0 && f.flags & REEL_FLAG_RESIDUE_VALID != 0);
        assert_eq!(f.residue, 100 - 4096);
        assert_eq!(f.transferred, 100);
    }

    #[test]
    fn zero_reads() {
        assert_eq!(classify_zero_read(mtio::GMT_EOF), ZeroRead::Filemark);
        assert_eq!(
            classify_zero_read(mtio::GMT_EOD | mtio::GMT_ONLINE),
            ZeroRead::EndOfData
        );
        assert_eq!(classify_zero_read(0), ZeroRead::Filemark);
    }

    #[test]
    fn space_records_forward_into_a_filemark() {
        // A B FM C: from 0, space 5 records; stops after the FM at object 3.
        let f = space_stop_fault(
            REEL_SPACE_RECORDS,
            5,
            (0, 0, true),
            (3, 1, false),
            mtio::GMT_EOF,
        );
        assert_eq!(f.code, REEL_E_CHECK_CONDITION);
        assert_eq!((f.sense_key, f.asc, f.ascq), (0, 0, 1));
        assert!(f.flags & REEL_FLAG_FILEMARK != 0 && f.flags & REEL_FLAG_RESIDUE_VALID != 0);
        assert_eq!(f.residue, 3, "2 records spaced of 5");
    }

    #[test]
    fn space_records_forward_into_eod() {
        let f = space_stop_fault(
            REEL_SPACE_RECORDS,
            4,
            (3, 1, false),
            (5, 1, false),
            mtio::GMT_EOD,
        );
        assert_eq!((f.sense_key, f.asc, f.ascq), (8, 0, 5));
        assert_eq!(f.residue, 2);
    }

    #[test]
    fn space_backward_to_bot_and_to_a_filemark() {
        let f = space_stop_fault(REEL_SPACE_RECORDS, -4, (2, 0, false), (0, 0, true), 0);
        assert_eq!((f.sense_key, f.asc, f.ascq), (0, 0, 4));
        assert!(f.flags & REEL_FLAG_EOM != 0);
        assert_eq!(f.residue, -2, "the residue carries the sign of the count");
        // A B FM C D: from 5 back 4 records: stops on the BOP side of the FM at 2.
        let f = space_stop_fault(REEL_SPACE_RECORDS, -4, (5, 1, false), (2, 0, false), 0);
        assert_eq!((f.sense_key, f.asc, f.ascq), (0, 0, 1));
        assert_eq!(f.residue, -2, "C and D spaced");
    }

    #[test]
    fn space_filemarks() {
        let f = space_stop_fault(
            REEL_SPACE_FILEMARKS,
            3,
            (0, 0, true),
            (5, 2, false),
            mtio::GMT_EOD,
        );
        assert_eq!((f.sense_key, f.asc, f.ascq), (8, 0, 5));
        assert_eq!(f.residue, 1);
        let f = space_stop_fault(REEL_SPACE_FILEMARKS, -3, (5, 2, false), (0, 0, true), 0);
        assert_eq!((f.sense_key, f.asc, f.ascq), (0, 0, 4));
        assert_eq!(f.residue, -1);
    }

    #[test]
    fn stats_valid_bits_name_filled_fields() {
        // bit 1 (streaming_ns) and 10-12 (backhitches, repositions) are not measurable via st
        assert_eq!(STATS_VALID & (1 << 1), 0);
        assert_eq!(STATS_VALID & (0b111 << 10), 0);
        assert_ne!(STATS_VALID & (1 << 13), 0);
    }
}
