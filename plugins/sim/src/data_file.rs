//! A cartridge's `data` file: the records' bytes back to back, appended at the end only.
//!
//! A real drive takes the host's records by DMA; the host's page cache never holds them. The
//! simulator keeps its medium in a file, and on a virtual machine a buffered write into fresh
//! page-cache pages costs far more than the copy itself (1.4 CPU s/GB measured on the 2-core
//! CI guest: each new page is faulted in by the hypervisor first), which made the simulated
//! drive the busiest thread of an archive and held back the host path it exists to measure.
//! So the file is written and read with `O_DIRECT`: appends go into an aligned staging buffer
//! (memory that stays resident) and reach the file in aligned blocks; reads go through an
//! aligned read buffer. The file's length is always the data's exact length after a flush: a
//! padded last block is trimmed back.
//!
//! Where the filesystem refuses direct I/O (tmpfs before Linux 6.6, some network filesystems),
//! the file is opened buffered and everything else works the same.

use std::fs::{File, OpenOptions};
use std::io;
use std::os::unix::fs::{FileExt, OpenOptionsExt};
use std::path::Path;

/// Alignment of direct I/O: offsets, lengths and buffer addresses (covers 512-byte and 4Kn
/// devices).
const ALIGN: usize = 4096;
/// Bytes staged before they are written out in one direct write.
const STAGE_BYTES: usize = 4 << 20;

/// A heap buffer whose usable part starts on an [`ALIGN`] boundary.
struct AlignedBuf {
    raw: Vec<u8>,
    start: usize,
    len: usize,
}

impl AlignedBuf {
    fn new(len: usize) -> AlignedBuf {
        let raw = vec![0u8; len + ALIGN];
        // For a byte pointer at run time this is the exact distance to the next boundary.
        let start = raw.as_ptr().align_offset(ALIGN).min(ALIGN);
        AlignedBuf { raw, start, len }
    }

    fn aligned(&self) -> bool {
        (self.raw.as_ptr() as usize + self.start).is_multiple_of(ALIGN)
    }

    fn get(&self) -> &[u8] {
        &self.raw[self.start..self.start + self.len]
    }

    fn get_mut(&mut self) -> &mut [u8] {
        &mut self.raw[self.start..self.start + self.len]
    }

    /// Make the usable part at least `len` bytes (contents not kept).
    fn reserve(&mut self, len: usize) {
        if self.len < len {
            *self = AlignedBuf::new(len.next_multiple_of(ALIGN));
        }
    }
}

/// The data file of one cartridge.
pub struct DataFile {
    file: File,
    direct: bool,
    /// Bytes `[base, base + fill)` of the data; `base` is a multiple of [`ALIGN`] in direct mode.
    stage: AlignedBuf,
    base: u64,
    fill: usize,
    /// Whether the stage holds bytes the file does not.
    dirty: bool,
    read_buf: AlignedBuf,
}

impl std::fmt::Debug for DataFile {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("DataFile")
            .field("direct", &self.direct)
            .field("end", &self.end())
            .finish()
    }
}

fn open(path: &Path, direct: bool) -> io::Result<File> {
    let mut o = OpenOptions::new();
    o.read(true).write(true);
    if direct {
        o.custom_flags(nix::fcntl::OFlag::O_DIRECT.bits());
    }
    o.open(path)
}

impl DataFile {
    /// Open `path`, whose first `end` bytes are the data (a longer file is cut to `end`).
    /// Direct I/O when the filesystem takes it, buffered otherwise.
    pub fn open(path: &Path, end: u64) -> io::Result<DataFile> {
        DataFile::open_with(path, end, true)
    }

    /// [`DataFile::open`], trying direct I/O only if `want_direct`.
    fn open_with(path: &Path, end: u64, want_direct: bool) -> io::Result<DataFile> {
        let stage = AlignedBuf::new(STAGE_BYTES);
        let try_direct = want_direct && stage.aligned();
        let (file, direct) = match open(path, try_direct) {
            Ok(f) => (f, try_direct),
            Err(e) if e.raw_os_error() == Some(nix::libc::EINVAL) => (open(path, false)?, false),
            Err(e) => return Err(e),
        };
        let mut d = DataFile {
            file,
            direct,
            stage,
            base: 0,
            fill: 0,
            dirty: false,
            read_buf: AlignedBuf::new(0),
        };
        if d.file.metadata()?.len() != end {
            d.file.set_len(end)?;
        }
        if let Err(e) = d.load_tail(end) {
            // Some filesystems accept O_DIRECT at open and refuse it at the first transfer.
            if !d.direct || e.raw_os_error() != Some(nix::libc::EINVAL) {
                return Err(e);
            }
            d.file = open(path, false)?;
            d.direct = false;
            d.load_tail(end)?;
        }
        Ok(d)
    }

    /// Whether the file is written and read with `O_DIRECT`.
    pub fn is_direct(&self) -> bool {
        self.direct
    }

    /// The data's length, staged bytes included.
    pub fn end(&self) -> u64 {
        self.base + self.fill as u64
    }

    /// Stage the bytes at `end` so that the next write starts on an aligned offset: the
    /// partial last block is read back into the stage.
    fn load_tail(&mut self, end: u64) -> io::Result<()> {
        self.base = if self.direct {
            end - end % ALIGN as u64
        } else {
            end
        };
        self.fill = (end - self.base) as usize;
        self.dirty = false;
        if self.fill > 0 {
            let n = self.fill;
            let (stage, file, base) = (&mut self.stage, &self.file, self.base);
            read_at_least(file, &mut stage.get_mut()[..ALIGN], n, base)?;
        }
        Ok(())
    }

    /// Append `data` at the end (staged; in the file at the next flush or when the stage fills).
    pub fn append(&mut self, mut data: &[u8]) -> io::Result<()> {
        while !data.is_empty() {
            if self.fill == STAGE_BYTES {
                self.write_out(false)?;
            }
            let n = (STAGE_BYTES - self.fill).min(data.len());
            self.stage.get_mut()[self.fill..self.fill + n].copy_from_slice(&data[..n]);
            self.fill += n;
            self.dirty = true;
            data = &data[n..];
        }
        Ok(())
    }

    /// Write the staged bytes out. In direct mode the whole blocks leave the stage and a
    /// partial last block stays (it is written again with the bytes that complete it); with
    /// `all` that block is written too, padded, and the file trimmed to the data's length.
    fn write_out(&mut self, all: bool) -> io::Result<()> {
        if !self.direct {
            self.file
                .write_all_at(&self.stage.get()[..self.fill], self.base)?;
            self.base += self.fill as u64;
            self.fill = 0;
            self.dirty = false;
            return Ok(());
        }
        let whole = self.fill - self.fill % ALIGN;
        let tail = self.fill - whole;
        if all && tail > 0 {
            let padded = whole + ALIGN;
            self.stage.get_mut()[self.fill..padded].fill(0);
            self.file
                .write_all_at(&self.stage.get()[..padded], self.base)?;
            self.file.set_len(self.end())?;
            self.dirty = false;
        } else if whole > 0 {
            self.file
                .write_all_at(&self.stage.get()[..whole], self.base)?;
            self.dirty = tail > 0;
        }
        if whole > 0 {
            self.stage.get_mut().copy_within(whole..self.fill, 0);
            self.base += whole as u64;
            self.fill = tail;
        }
        Ok(())
    }

    /// Put every staged byte into the file (no fsync).
    pub fn flush(&mut self) -> io::Result<()> {
        if self.dirty {
            self.write_out(true)?;
        }
        Ok(())
    }

    /// Flush, then make the data durable.
    pub fn sync(&mut self) -> io::Result<()> {
        self.flush()?;
        self.file.sync_data()
    }

    /// Read exactly `buf.len()` bytes at `offset` (flushes first).
    pub fn read_exact_at(&mut self, buf: &mut [u8], offset: u64) -> io::Result<()> {
        self.flush()?;
        if buf.is_empty() {
            return Ok(());
        }
        if !self.direct {
            return self.file.read_exact_at(buf, offset);
        }
        let from = offset - offset % ALIGN as u64;
        let skip = (offset - from) as usize;
        let need = skip + buf.len();
        let span = need.next_multiple_of(ALIGN);
        self.read_buf.reserve(span);
        read_at_least(&self.file, &mut self.read_buf.get_mut()[..span], need, from)?;
        buf.copy_from_slice(&self.read_buf.get()[skip..need]);
        Ok(())
    }

    /// Cut the data to `len` bytes (never longer than it is).
    pub fn truncate(&mut self, len: u64) -> io::Result<()> {
        self.flush()?;
        let len = len.min(self.end());
        self.file.set_len(len)?;
        self.load_tail(len)
    }

    /// Flip every bit of the stored byte at `offset` and make it durable (silent damage).
    pub fn flip_byte(&mut self, offset: u64) -> io::Result<()> {
        if offset >= self.end() {
            return Err(io::Error::new(
                io::ErrorKind::InvalidInput,
                format!("byte {offset} is past the data's end {}", self.end()),
            ));
        }
        if offset >= self.base {
            self.stage.get_mut()[(offset - self.base) as usize] ^= 0xFF;
            self.dirty = true;
        } else if self.direct {
            // A whole block below the stage: read it, flip the byte, write it back.
            self.flush()?;
            let from = offset - offset % ALIGN as u64;
            self.read_buf.reserve(ALIGN);
            let block = &mut self.read_buf.get_mut()[..ALIGN];
            read_at_least(&self.file, block, ALIGN, from)?;
            block[(offset - from) as usize] ^= 0xFF;
            self.file.write_all_at(block, from)?;
        } else {
            let mut b = [0u8; 1];
            self.file.read_exact_at(&mut b, offset)?;
            b[0] ^= 0xFF;
            self.file.write_all_at(&b, offset)?;
        }
        self.sync()
    }
}

/// Read into `buf` at `offset` until at least `need` bytes are in (a direct read may stop at
/// the end of the file, inside the last block).
fn read_at_least(file: &File, buf: &mut [u8], need: usize, offset: u64) -> io::Result<()> {
    let mut got = 0;
    while got < need {
        match file.read_at(&mut buf[got..], offset + got as u64) {
            Ok(0) => {
                return Err(io::Error::new(
                    io::ErrorKind::UnexpectedEof,
                    format!(
                        "data file ends at byte {}, {} bytes short",
                        offset + got as u64,
                        need - got
                    ),
                ));
            }
            Ok(n) => got += n,
            Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
            Err(e) => return Err(e),
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn pattern(n: usize, seed: u8) -> Vec<u8> {
        (0..n)
            .map(|i| (i as u8).wrapping_mul(31).wrapping_add(seed))
            .collect()
    }

    /// Both ways of keeping the file: direct where /tmp takes it, and buffered.
    const MODES: [bool; 2] = [true, false];

    #[test]
    fn appends_reads_and_reopens_at_unaligned_lengths() {
        for direct in MODES {
            appends_reads_and_reopens(direct);
        }
    }

    /// A new, empty data file in a temporary directory (kept alive by the returned guard).
    fn empty(direct: bool) -> (tempfile::TempDir, std::path::PathBuf, DataFile) {
        let t = tempfile::tempdir().unwrap();
        let p = t.path().join("data");
        File::create(&p).unwrap();
        let d = DataFile::open_with(&p, 0, direct).unwrap();
        (t, p, d)
    }

    fn appends_reads_and_reopens(direct: bool) {
        let (_t, p, mut d) = empty(direct);
        if !direct {
            assert!(!d.is_direct());
        }
        let mut all = Vec::new();
        for (i, n) in [100usize, 4096, 1 << 20, 7, (4 << 20) + 3, 5000]
            .into_iter()
            .enumerate()
        {
            let r = pattern(n, i as u8);
            d.append(&r).unwrap();
            all.extend_from_slice(&r);
            // Read back across the stage and the file at every step.
            let mut b = vec![0u8; 300.min(all.len())];
            let at = all.len() - b.len();
            d.read_exact_at(&mut b, at as u64).unwrap();
            assert_eq!(b, all[at..]);
        }
        d.sync().unwrap();
        assert_eq!(std::fs::metadata(&p).unwrap().len(), all.len() as u64);
        drop(d);
        let mut d = DataFile::open_with(&p, all.len() as u64, direct).unwrap();
        d.append(b"more").unwrap();
        all.extend_from_slice(b"more");
        let mut b = vec![0u8; all.len()];
        d.read_exact_at(&mut b, 0).unwrap();
        assert_eq!(b, all);
        assert_eq!(std::fs::read(&p).unwrap(), all);
    }

    #[test]
    fn truncate_and_flip_keep_the_file_and_the_stage_agreeing() {
        for direct in MODES {
            truncate_and_flip(direct);
        }
    }

    fn truncate_and_flip(direct: bool) {
        let (_t, p, mut d) = empty(direct);
        let mut all = pattern(3 * ALIGN + 123, 9);
        d.append(&all).unwrap();
        d.truncate(2 * ALIGN as u64 + 10).unwrap();
        all.truncate(2 * ALIGN + 10);
        assert_eq!(d.end(), all.len() as u64);
        // Flip one byte in a whole block and one in the staged tail.
        d.flip_byte(5).unwrap();
        all[5] ^= 0xFF;
        d.flip_byte(2 * ALIGN as u64 + 3).unwrap();
        all[2 * ALIGN + 3] ^= 0xFF;
        d.append(b"tail").unwrap();
        all.extend_from_slice(b"tail");
        d.flush().unwrap();
        assert_eq!(std::fs::read(&p).unwrap(), all);
        assert!(d.flip_byte(all.len() as u64).is_err());
    }

    #[test]
    fn a_longer_file_is_cut_to_the_data() {
        let t = tempfile::tempdir().unwrap();
        let p = t.path().join("data");
        for direct in MODES {
            std::fs::write(&p, pattern(10_000, 1)).unwrap();
            let mut d = DataFile::open_with(&p, 6000, direct).unwrap();
            assert_eq!(std::fs::metadata(&p).unwrap().len(), 6000);
            let mut b = vec![0u8; 6000];
            d.read_exact_at(&mut b, 0).unwrap();
            assert_eq!(b, pattern(10_000, 1)[..6000]);
        }
    }
}
