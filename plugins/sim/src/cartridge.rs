//! One simulated cartridge: a directory holding its records, filemarks, calibration and MAM.
//!
//! Layout of `<library dir>/<barcode>/`:
//! - `data`: every record's bytes, appended back to back (opened `O_APPEND`, buffered);
//! - `index`: one 24-byte entry per logical object (record or filemark): data offset (u64 LE),
//!   length (u32 LE), kind (u8), 7 reserved bytes, and a CRC32C of the first 20 bytes;
//! - `meta.json`: barcode, WORM, calibrated, capacity, load count (replaced atomically);
//! - `mam.json`: host-written MAM attributes (replaced atomically).
//!
//! Crash safety: `data` and `index` are fsynced (data first) at the drive's synchronous points
//! (a synchronous filemark, an unload). On open, index entries that are torn, fail their CRC,
//! or point past the end of `data` are dropped with everything after them, and both files are
//! truncated to the consistent prefix. A host crash therefore loses at most what was written
//! since the last synchronous point, which is what a real drive may lose too.

use std::collections::BTreeMap;
use std::fs::{File, OpenOptions};
use std::io::{self, BufWriter, Read, Write};
use std::path::{Path, PathBuf};

use serde::{Deserialize, Serialize};

use crate::data_file::DataFile;

const ENTRY_BYTES: usize = 24;
const KIND_RECORD: u8 = 0;
const KIND_FILEMARK: u8 = 1;

/// A logical object on the medium.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Entry {
    /// Offset of its bytes in the data file (for a filemark: the data end at that point).
    pub offset: u64,
    /// Record length (0 for a filemark).
    pub len: u32,
    /// Whether it is a filemark.
    pub filemark: bool,
}

impl Entry {
    fn encode(&self) -> [u8; ENTRY_BYTES] {
        let mut b = [0u8; ENTRY_BYTES];
        b[0..8].copy_from_slice(&self.offset.to_le_bytes());
        b[8..12].copy_from_slice(&self.len.to_le_bytes());
        b[12] = if self.filemark {
            KIND_FILEMARK
        } else {
            KIND_RECORD
        };
        let crc = crc32c::crc32c(&b[..20]);
        b[20..24].copy_from_slice(&crc.to_le_bytes());
        b
    }

    fn decode(b: &[u8]) -> Option<Entry> {
        let crc = u32::from_le_bytes(b[20..24].try_into().ok()?);
        if crc32c::crc32c(&b[..20]) != crc {
            return None;
        }
        let kind = b[12];
        if kind != KIND_RECORD && kind != KIND_FILEMARK {
            return None;
        }
        Some(Entry {
            offset: u64::from_le_bytes(b[0..8].try_into().ok()?),
            len: u32::from_le_bytes(b[8..12].try_into().ok()?),
            filemark: kind == KIND_FILEMARK,
        })
    }
}

/// Persistent facts about a cartridge.
#[derive(Clone, Debug, Serialize, Deserialize, PartialEq, Eq)]
pub struct Meta {
    /// Barcode (volume tag).
    pub barcode: String,
    /// Write once, read many.
    pub worm: bool,
    /// First-load calibration done.
    pub calibrated: bool,
    /// Native capacity in bytes.
    pub capacity_bytes: u64,
    /// Loads so far.
    pub load_count: u64,
}

struct Files {
    data: DataFile,
    index: BufWriter<File>,
}

/// A cartridge, wherever it is in the library.
pub struct Cartridge {
    dir: PathBuf,
    /// Its persistent facts.
    pub meta: Meta,
    mam: BTreeMap<u16, Vec<u8>>,
    entries: Vec<Entry>,
    filemarks: Vec<u64>,
    data_end: u64,
    files: Option<Files>,
    /// Objects the modelled drive has committed to the medium (the rest is in its buffer).
    committed: usize,
}

impl Drop for Cartridge {
    /// A closed library keeps what its drives were given: the buffers reach the medium.
    fn drop(&mut self) {
        if let Err(e) = self.flush() {
            tracing::error!(barcode = %self.meta.barcode, error = %e, "flushing cartridge on close failed");
        }
    }
}

impl std::fmt::Debug for Cartridge {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Cartridge")
            .field("barcode", &self.meta.barcode)
            .field("objects", &self.entries.len())
            .field("data_end", &self.data_end)
            .finish()
    }
}

fn write_atomic(path: &Path, bytes: &[u8]) -> io::Result<()> {
    let tmp = path.with_extension("tmp");
    {
        let mut f = File::create(&tmp)?;
        f.write_all(bytes)?;
        f.sync_all()?;
    }
    std::fs::rename(&tmp, path)?;
    if let Some(parent) = path.parent() {
        File::open(parent)?.sync_all()?;
    }
    Ok(())
}

fn hex(b: &[u8]) -> String {
    b.iter().map(|x| format!("{x:02x}")).collect()
}

fn unhex(s: &str) -> Option<Vec<u8>> {
    if !s.len().is_multiple_of(2) {
        return None;
    }
    (0..s.len())
        .step_by(2)
        .map(|i| u8::from_str_radix(s.get(i..i + 2)?, 16).ok())
        .collect()
}

impl Cartridge {
    /// Create a new, blank cartridge directory.
    pub fn create(
        library_dir: &Path,
        barcode: &str,
        worm: bool,
        calibrated: bool,
        capacity_bytes: u64,
    ) -> io::Result<Cartridge> {
        let dir = library_dir.join(barcode);
        std::fs::create_dir_all(&dir)?;
        File::create(dir.join("data"))?.sync_all()?;
        File::create(dir.join("index"))?.sync_all()?;
        let c = Cartridge {
            dir,
            meta: Meta {
                barcode: barcode.to_string(),
                worm,
                calibrated,
                capacity_bytes,
                load_count: 0,
            },
            mam: BTreeMap::new(),
            entries: Vec::new(),
            filemarks: Vec::new(),
            data_end: 0,
            files: None,
            committed: 0,
        };
        c.save_mam()?;
        c.save_meta()?;
        Ok(c)
    }

    /// Read only a cartridge's `meta.json` (its WORM flag, capacity, calibration), without
    /// opening its records.
    pub fn read_meta(library_dir: &Path, barcode: &str) -> io::Result<Meta> {
        let path = library_dir.join(barcode).join("meta.json");
        serde_json::from_slice(&std::fs::read(path)?)
            .map_err(|e| io::Error::new(io::ErrorKind::InvalidData, format!("meta.json: {e}")))
    }

    /// Open an existing cartridge directory, dropping any torn tail left by a crash.
    pub fn open(library_dir: &Path, barcode: &str) -> io::Result<Cartridge> {
        let dir = library_dir.join(barcode);
        let meta: Meta = serde_json::from_slice(&std::fs::read(dir.join("meta.json"))?)
            .map_err(|e| io::Error::new(io::ErrorKind::InvalidData, format!("meta.json: {e}")))?;
        let mam_raw: BTreeMap<String, String> = match std::fs::read(dir.join("mam.json")) {
            Ok(b) => serde_json::from_slice(&b).map_err(|e| {
                io::Error::new(io::ErrorKind::InvalidData, format!("mam.json: {e}"))
            })?,
            Err(e) if e.kind() == io::ErrorKind::NotFound => BTreeMap::new(),
            Err(e) => return Err(e),
        };
        let mut mam = BTreeMap::new();
        for (k, v) in mam_raw {
            let id = u16::from_str_radix(&k, 16).map_err(|_| {
                io::Error::new(io::ErrorKind::InvalidData, format!("mam.json: bad id {k}"))
            })?;
            let val = unhex(&v).ok_or_else(|| {
                io::Error::new(
                    io::ErrorKind::InvalidData,
                    format!("mam.json: bad value of {k}"),
                )
            })?;
            mam.insert(id, val);
        }
        let data_len = std::fs::metadata(dir.join("data"))?.len();
        let mut raw = Vec::new();
        File::open(dir.join("index"))?.read_to_end(&mut raw)?;
        let mut entries = Vec::with_capacity(raw.len() / ENTRY_BYTES);
        let mut end = 0u64;
        for chunk in raw.chunks_exact(ENTRY_BYTES) {
            let Some(e) = Entry::decode(chunk) else { break };
            if e.offset != end || e.offset + u64::from(e.len) > data_len {
                break;
            }
            end = e.offset + u64::from(e.len);
            entries.push(e);
        }
        let index_len = (entries.len() * ENTRY_BYTES) as u64;
        if index_len != raw.len() as u64 || end != data_len {
            tracing::warn!(
                barcode,
                kept = entries.len(),
                "cartridge had a torn tail (a crash before its last synchronous point); dropped it"
            );
            OpenOptions::new()
                .write(true)
                .open(dir.join("index"))?
                .set_len(index_len)?;
            OpenOptions::new()
                .write(true)
                .open(dir.join("data"))?
                .set_len(end)?;
        }
        let filemarks = entries
            .iter()
            .enumerate()
            .filter(|(_, e)| e.filemark)
            .map(|(i, _)| i as u64)
            .collect();
        let n = entries.len();
        Ok(Cartridge {
            dir,
            meta,
            mam,
            entries,
            filemarks,
            data_end: end,
            files: None,
            committed: n,
        })
    }

    /// Barcode.
    pub fn barcode(&self) -> &str {
        &self.meta.barcode
    }

    /// Persist `meta.json`.
    pub fn save_meta(&self) -> io::Result<()> {
        let b = serde_json::to_vec_pretty(&self.meta)
            .map_err(|e| io::Error::new(io::ErrorKind::InvalidData, e))?;
        write_atomic(&self.dir.join("meta.json"), &b)
    }

    fn save_mam(&self) -> io::Result<()> {
        let m: BTreeMap<String, String> = self
            .mam
            .iter()
            .map(|(k, v)| (format!("{k:04x}"), hex(v)))
            .collect();
        let b = serde_json::to_vec_pretty(&m)
            .map_err(|e| io::Error::new(io::ErrorKind::InvalidData, e))?;
        write_atomic(&self.dir.join("mam.json"), &b)
    }

    /// A host-written MAM attribute.
    pub fn mam_get(&self, id: u16) -> Option<&Vec<u8>> {
        self.mam.get(&id)
    }

    /// Set a host-written MAM attribute (persisted at once).
    pub fn mam_set(&mut self, id: u16, value: &[u8]) -> io::Result<()> {
        self.mam.insert(id, value.to_vec());
        self.save_mam()
    }

    fn files(&mut self) -> io::Result<&mut Files> {
        if self.files.is_none() {
            let index = OpenOptions::new()
                .append(true)
                .open(self.dir.join("index"))?;
            self.files = Some(Files {
                data: DataFile::open(&self.dir.join("data"), self.data_end)?,
                index: BufWriter::with_capacity(64 << 10, index),
            });
        }
        // The branch above guarantees Some.
        self.files
            .as_mut()
            .ok_or_else(|| io::Error::other("cartridge files not open"))
    }

    /// Number of logical objects (records and filemarks): the EOD block.
    pub fn eod(&self) -> u64 {
        self.entries.len() as u64
    }

    /// Bytes of record data on the medium.
    pub fn data_end(&self) -> u64 {
        self.data_end
    }

    /// The object at `block`.
    pub fn entry(&self, block: u64) -> Option<Entry> {
        self.entries.get(usize::try_from(block).ok()?).copied()
    }

    /// Byte offset of `block` on the medium (the data end for EOD and beyond).
    pub fn offset_of(&self, block: u64) -> u64 {
        self.entry(block).map_or(self.data_end, |e| e.offset)
    }

    /// Filemarks before `block`.
    pub fn file_of(&self, block: u64) -> u64 {
        self.filemarks.partition_point(|&f| f < block) as u64
    }

    /// Block numbers of the filemarks.
    pub fn filemarks(&self) -> &[u64] {
        &self.filemarks
    }

    /// Whether anything was ever written (objects on the medium).
    pub fn is_written(&self) -> bool {
        !self.entries.is_empty()
    }

    /// Append a record at EOD (buffered; durable at the next [`Cartridge::sync`]).
    pub fn append_record(&mut self, data: &[u8]) -> io::Result<()> {
        let len = u32::try_from(data.len())
            .map_err(|_| io::Error::new(io::ErrorKind::InvalidInput, "record too large"))?;
        let e = Entry {
            offset: self.data_end,
            len,
            filemark: false,
        };
        let f = self.files()?;
        f.data.append(data)?;
        f.index.write_all(&e.encode())?;
        self.data_end += u64::from(len);
        self.entries.push(e);
        Ok(())
    }

    /// Append a filemark at EOD.
    pub fn append_filemark(&mut self) -> io::Result<()> {
        let e = Entry {
            offset: self.data_end,
            len: 0,
            filemark: true,
        };
        self.files()?.index.write_all(&e.encode())?;
        self.filemarks.push(self.entries.len() as u64);
        self.entries.push(e);
        Ok(())
    }

    /// Push buffered bytes to the OS (no fsync): needed before reading them back.
    pub fn flush(&mut self) -> io::Result<()> {
        if let Some(f) = self.files.as_mut() {
            f.data.flush()?;
            f.index.flush()?;
        }
        Ok(())
    }

    /// Make everything durable: flush and fsync the data, then the index.
    pub fn sync(&mut self) -> io::Result<()> {
        if let Some(f) = self.files.as_mut() {
            f.data.sync()?;
            f.index.flush()?;
            f.index.get_ref().sync_data()?;
        }
        self.committed = self.entries.len();
        Ok(())
    }

    /// Close the open files (after a sync), e.g. when the cartridge leaves a drive.
    pub fn close_files(&mut self) -> io::Result<()> {
        self.sync()?;
        self.files = None;
        Ok(())
    }

    /// The modelled drive buffer: objects beyond the last `buffer_bytes` of data written
    /// since the last commit point are on the medium.
    pub fn commit_older_than(&mut self, buffer_bytes: u64) {
        while self.committed < self.entries.len()
            && self.data_end - self.entries[self.committed].offset > buffer_bytes
        {
            self.committed += 1;
        }
    }

    /// Everything written so far is on the medium (the drive flushed its buffer).
    pub fn commit_all(&mut self) {
        self.committed = self.entries.len();
    }

    /// Objects committed to the medium.
    pub fn committed(&self) -> u64 {
        self.committed as u64
    }

    /// Drop every object from `block` on (an overwrite, a lost buffer).
    pub fn truncate_to(&mut self, block: u64) -> io::Result<()> {
        let keep = usize::try_from(block)
            .unwrap_or(usize::MAX)
            .min(self.entries.len());
        if keep == self.entries.len() {
            return Ok(());
        }
        self.flush()?;
        let new_end = self.entries[keep].offset;
        let f = self.files()?;
        f.data.truncate(new_end)?;
        f.index.get_ref().set_len((keep * ENTRY_BYTES) as u64)?;
        self.entries.truncate(keep);
        while self.filemarks.last().is_some_and(|&b| b >= keep as u64) {
            self.filemarks.pop();
        }
        self.data_end = new_end;
        self.committed = self.committed.min(keep);
        Ok(())
    }

    /// Drop what only the drive buffer held (a power cut or a dying drive).
    pub fn drop_uncommitted(&mut self) -> io::Result<u64> {
        let lost = self.eod() - self.committed();
        self.truncate_to(self.committed())?;
        self.sync()?;
        Ok(lost)
    }

    /// Read record `block` into `buf` (up to its length); returns the record's full length.
    pub fn read_record(&mut self, block: u64, buf: &mut [u8]) -> io::Result<usize> {
        let e = self
            .entry(block)
            .ok_or_else(|| io::Error::new(io::ErrorKind::InvalidInput, "no record there"))?;
        self.flush()?;
        let n = (e.len as usize).min(buf.len());
        self.files()?.data.read_exact_at(&mut buf[..n], e.offset)?;
        Ok(e.len as usize)
    }

    /// Flip the bits of one stored byte of record `block` at `offset` (silent damage).
    pub fn corrupt_stored(&mut self, block: u64, offset: u32) -> io::Result<()> {
        let e = self
            .entry(block)
            .filter(|e| !e.filemark && e.len > 0)
            .ok_or_else(|| {
                io::Error::new(
                    io::ErrorKind::InvalidInput,
                    format!("block {block} is not a record"),
                )
            })?;
        let at = e.offset + u64::from(offset.min(e.len - 1));
        self.files()?.data.flip_byte(at)
    }

    /// First block past the end of each completed wrap, for wraps of `bytes_per_wrap` bytes.
    pub fn eowp(&self, bytes_per_wrap: u64, wraps: u32) -> Vec<u64> {
        let mut out = Vec::new();
        if bytes_per_wrap == 0 {
            return out;
        }
        for w in 1..=u64::from(wraps) {
            let boundary = w * bytes_per_wrap;
            if self.data_end < boundary {
                break;
            }
            let first = self.entries.partition_point(|e| e.offset < boundary);
            out.push(first as u64);
        }
        out
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn records_filemarks_survive_reopen_and_torn_tail_is_dropped() {
        let t = tempfile::tempdir().unwrap();
        let mut c = Cartridge::create(t.path(), "RL0001L9", false, false, 1 << 20).unwrap();
        c.append_record(b"hello").unwrap();
        c.append_filemark().unwrap();
        c.append_record(b"world!").unwrap();
        c.sync().unwrap();
        c.mam_set(0x0801, b"reel").unwrap();
        c.meta.calibrated = true;
        c.save_meta().unwrap();
        drop(c);
        // A torn index entry and stray data bytes, as a crash mid-write would leave.
        let dir = t.path().join("RL0001L9");
        let mut idx = OpenOptions::new()
            .append(true)
            .open(dir.join("index"))
            .unwrap();
        idx.write_all(&[1, 2, 3]).unwrap();
        let mut data = OpenOptions::new()
            .append(true)
            .open(dir.join("data"))
            .unwrap();
        data.write_all(b"junk").unwrap();
        let mut c = Cartridge::open(t.path(), "RL0001L9").unwrap();
        assert_eq!(c.eod(), 3);
        assert_eq!(c.filemarks(), &[1]);
        assert_eq!(c.file_of(2), 1);
        assert!(c.meta.calibrated);
        assert_eq!(c.mam_get(0x0801).unwrap(), b"reel");
        let mut buf = [0u8; 16];
        assert_eq!(c.read_record(2, &mut buf).unwrap(), 6);
        assert_eq!(&buf[..6], b"world!");
        assert_eq!(std::fs::metadata(dir.join("data")).unwrap().len(), 11);
    }

    #[test]
    fn truncate_then_append_and_uncommitted_drop() {
        let t = tempfile::tempdir().unwrap();
        let mut c = Cartridge::create(t.path(), "RL0002L9", false, true, 1 << 20).unwrap();
        for i in 0..4u8 {
            c.append_record(&[i; 10]).unwrap();
        }
        c.truncate_to(2).unwrap();
        c.append_record(&[9; 3]).unwrap();
        assert_eq!(c.eod(), 3);
        assert_eq!(c.data_end(), 23);
        c.sync().unwrap();
        c.append_record(&[7; 100]).unwrap();
        c.append_record(&[8; 100]).unwrap();
        c.commit_older_than(150);
        assert_eq!(
            c.committed(),
            4,
            "the first 100-byte record left the 150-byte buffer"
        );
        assert_eq!(c.drop_uncommitted().unwrap(), 1);
        drop(c);
        let mut c = Cartridge::open(t.path(), "RL0002L9").unwrap();
        assert_eq!(c.eod(), 4);
        let mut b = [0u8; 100];
        assert_eq!(c.read_record(2, &mut b).unwrap(), 3);
        assert_eq!(&b[..3], &[9, 9, 9]);
        c.corrupt_stored(3, 5).unwrap();
        c.read_record(3, &mut b).unwrap();
        assert_eq!(b[5], 7 ^ 0xFF);
    }

    #[test]
    fn end_of_wrap_positions() {
        let t = tempfile::tempdir().unwrap();
        let mut c = Cartridge::create(t.path(), "RL0003L9", false, true, 100).unwrap();
        for _ in 0..5 {
            c.append_record(&[0; 10]).unwrap(); // offsets 0,10,20,30,40
        }
        assert_eq!(c.eowp(25, 4), vec![3, 5]);
        assert_eq!(c.eowp(20, 4), vec![2, 4]);
    }
}
