//! Framing: the [`ContainerBuilder`] turns a stream of object bytes into fixed-size data
//! records, hashing as it goes (each object's SHA-256 and the container's), and produces the
//! footer at the end. It is on the write hot path: every byte is copied exactly once (into the
//! record buffer) and hashed while it is still in cache; record buffers are reused through
//! [`ContainerBuilder::recycle`].

use sha2::{Digest, Sha256};

use super::container::ContainerHeader;
use super::error::FormatError;
use super::footer::{Footer, IndexEntry, MAX_KEY_LEN};
use super::{MAX_RECORD_SIZE, MIN_RECORD_SIZE};

/// Bytes copied and hashed per step: small enough to stay in L2 between the copy and the two
/// hash passes.
const STEP: usize = 64 << 10;
/// Writes at least this long hash the object on a second thread.
const PARALLEL_HASH_MIN: usize = 1 << 20;
/// Spare record buffers kept for reuse.
const MAX_SPARE: usize = 16;

struct OpenObject {
    key: String,
    generation: u64,
    offset: u64,
    hasher: Sha256,
}

/// Turns a stream of object bytes into fixed-size data records and hashes as it goes
/// (object SHA-256 and container SHA-256). Used by the write pipeline; never copies more
/// than once.
///
/// Order of use: [`header_record`](Self::header_record) (write it first), then for each object
/// [`begin_object`](Self::begin_object), [`write`](Self::write) as often as needed (write the
/// records it returns to tape in order), [`end_object`](Self::end_object); finally
/// [`finish`](Self::finish) and write what it returns, then a filemark.
pub struct ContainerBuilder {
    header: ContainerHeader,
    record_size: usize,
    current: Vec<u8>,
    spare: Vec<Vec<u8>>,
    container: Sha256,
    object: Option<OpenObject>,
    entries: Vec<IndexEntry>,
    data_bytes: u64,
    data_records: u64,
}

impl ContainerBuilder {
    /// A builder for the container described by `header`; the record size comes from the
    /// header. A record size outside 256 KiB..8 MiB is clamped into range (and the header
    /// updated to match, so the container stays self-consistent); use
    /// [`try_new`](Self::try_new) to refuse it instead.
    pub fn new(mut header: ContainerHeader) -> Self {
        let rs = (header.record_size as usize).clamp(MIN_RECORD_SIZE, MAX_RECORD_SIZE);
        if rs != header.record_size as usize {
            tracing::warn!(
                requested = header.record_size,
                used = rs,
                "record size out of range, clamped"
            );
        }
        header.record_size = rs as u32;
        ContainerBuilder {
            header,
            record_size: rs,
            current: Vec::with_capacity(rs),
            spare: Vec::new(),
            container: Sha256::new(),
            object: None,
            entries: Vec::new(),
            data_bytes: 0,
            data_records: 0,
        }
    }

    /// Like [`new`](Self::new) but refuses a header that fails
    /// [`ContainerHeader::validate`].
    pub fn try_new(header: ContainerHeader) -> Result<Self, FormatError> {
        header.validate()?;
        Ok(Self::new(header))
    }

    /// The header as it will be written.
    pub fn header(&self) -> &ContainerHeader {
        &self.header
    }

    /// The data record size in bytes.
    pub fn record_size(&self) -> usize {
        self.record_size
    }

    /// The header record: the first record of the container.
    pub fn header_record(&self) -> Vec<u8> {
        self.header.encode()
    }

    /// Start an object at the current end of the data stream. Fails if an object is already
    /// open or the key is empty or longer than 4096 bytes.
    pub fn begin_object(&mut self, key: &str, generation: u64) -> Result<(), FormatError> {
        if let Some(open) = &self.object {
            return Err(FormatError::Usage {
                reason: format!(
                    "begin_object({key:?}) while object {:?} is still open; call end_object first",
                    open.key
                ),
            });
        }
        if key.is_empty() || key.len() > MAX_KEY_LEN {
            return Err(FormatError::InvalidField {
                structure: "object",
                field: "key",
                offset: 0,
                reason: format!("is {} bytes, keys are 1 to {MAX_KEY_LEN} bytes", key.len()),
            });
        }
        self.object = Some(OpenObject {
            key: key.to_owned(),
            generation,
            offset: self.data_bytes,
            hasher: Sha256::new(),
        });
        Ok(())
    }

    /// Append bytes of the open object; returns the data records that became full, ready to
    /// go to tape in order. Bytes written with no object open are framed and counted in the
    /// container's hash but belong to no index entry (dead space).
    ///
    /// Writes of at least 1 MiB hash the object on a second (scoped) thread while this one
    /// copies and hashes the container stream, so framing runs at about the speed of one
    /// SHA-256 pass; write in large slices (a few MiB) on the hot path.
    pub fn write(&mut self, data: &[u8]) -> Vec<Vec<u8>> {
        if data.len() >= PARALLEL_HASH_MIN
            && let Some(mut object) = self.object.take()
        {
            let framed = std::thread::scope(|s| {
                let hasher = &mut object.hasher;
                let helper = std::thread::Builder::new()
                    .name("reel-hash".into())
                    .spawn_scoped(s, move || hasher.update(data));
                match helper {
                    Ok(h) => {
                        let full = self.frame(data);
                        // A panic inside SHA-256 would be a bug in sha2: re-raise it rather
                        // than index a wrong digest.
                        if let Err(p) = h.join() {
                            std::panic::resume_unwind(p);
                        }
                        Some(full)
                    }
                    Err(e) => {
                        tracing::debug!(error = %e, "no hashing thread, hashing inline");
                        None
                    }
                }
            });
            self.object = Some(object);
            if let Some(full) = framed {
                return full;
            }
        }
        self.frame(data)
    }

    /// Copy `data` into record buffers, hashing the container stream (and the open object, if
    /// it is still in `self.object`) one cache-sized step at a time.
    fn frame(&mut self, mut data: &[u8]) -> Vec<Vec<u8>> {
        let mut full = Vec::new();
        while !data.is_empty() {
            let room = self.record_size - self.current.len();
            let n = room.min(data.len()).min(STEP);
            let (step, rest) = data.split_at(n);
            self.current.extend_from_slice(step);
            self.container.update(step);
            if let Some(o) = &mut self.object {
                o.hasher.update(step);
            }
            self.data_bytes += n as u64;
            data = rest;
            if self.current.len() == self.record_size {
                let next = self.take_buffer();
                full.push(std::mem::replace(&mut self.current, next));
                self.data_records += 1;
            }
        }
        full
    }

    /// Give a record buffer back once it is on tape, so the next records reuse its memory.
    pub fn recycle(&mut self, mut record: Vec<u8>) {
        if record.capacity() >= self.record_size && self.spare.len() < MAX_SPARE {
            record.clear();
            self.spare.push(record);
        }
    }

    fn take_buffer(&mut self) -> Vec<u8> {
        self.spare
            .pop()
            .unwrap_or_else(|| Vec::with_capacity(self.record_size))
    }

    /// Close the open object: its index entry, with its length and SHA-256. Fails if no
    /// object is open.
    pub fn end_object(&mut self) -> Result<IndexEntry, FormatError> {
        let o = self.object.take().ok_or_else(|| FormatError::Usage {
            reason: "end_object without an open object; call begin_object first".into(),
        })?;
        let entry = IndexEntry {
            key: o.key,
            generation: o.generation,
            offset: o.offset,
            length: self.data_bytes - o.offset,
            sha256: o.hasher.finalize().into(),
        };
        self.entries.push(entry.clone());
        Ok(entry)
    }

    /// Bytes in the data stream so far.
    pub fn data_bytes(&self) -> u64 {
        self.data_bytes
    }

    /// Index entries of the objects closed so far.
    pub fn entries(&self) -> &[IndexEntry] {
        &self.entries
    }

    /// Close the container: the last (short) data record if any, then the footer records; and
    /// the footer itself. Write them in order, then a filemark. An object still open is not
    /// indexed (its bytes stay in the stream as dead space): end it first to keep it.
    pub fn finish(mut self) -> (Vec<Vec<u8>>, Footer) {
        if let Some(o) = &self.object {
            tracing::warn!(key = %o.key, "container finished with an open object; it is not indexed");
        }
        let mut out = Vec::new();
        if !self.current.is_empty() {
            out.push(std::mem::take(&mut self.current));
            self.data_records += 1;
        }
        let footer = Footer {
            container_uuid: self.header.container_uuid,
            entries: self.entries,
            data_bytes: self.data_bytes,
            data_records: self.data_records,
            sha256: self.container.finalize().into(),
        };
        out.extend(footer.encode(self.record_size));
        (out, footer)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use uuid::Uuid;

    fn header(rs: u32) -> ContainerHeader {
        ContainerHeader {
            container_uuid: Uuid::from_u128(1),
            cartridge_uuid: Uuid::from_u128(2),
            barcode: "RL0001L9".into(),
            pool: "p".into(),
            record_size: rs,
            sequence: 1,
            created_unix: 0,
        }
    }

    #[test]
    fn records_are_full_size_except_the_last_and_offsets_follow_the_stream() {
        let rs = MIN_RECORD_SIZE;
        let mut b = ContainerBuilder::new(header(rs as u32));
        let mut records = Vec::new();
        let a: Vec<u8> = (0..rs + 100).map(|i| i as u8).collect();
        b.begin_object("a", 1).unwrap();
        records.extend(b.write(&a[..10]));
        records.extend(b.write(&a[10..]));
        let ea = b.end_object().unwrap();
        b.begin_object("b", 1).unwrap();
        records.extend(b.write(&[7u8; 50]));
        let eb = b.end_object().unwrap();
        assert_eq!((ea.offset, ea.length), (0, rs as u64 + 100));
        assert_eq!((eb.offset, eb.length), (rs as u64 + 100, 50));
        assert_eq!(ea.sha256, <[u8; 32]>::from(Sha256::digest(&a)));
        assert_eq!(records.len(), 1);
        let (tail, footer) = b.finish();
        assert_eq!(tail[0].len(), 150);
        assert_eq!(footer.data_records, 2);
        assert_eq!(footer.data_bytes, rs as u64 + 150);
        let mut all = records.concat();
        all.extend_from_slice(&tail[0]);
        assert_eq!(footer.sha256, <[u8; 32]>::from(Sha256::digest(&all)));
        assert_eq!(Footer::decode(&tail[1..]).unwrap(), footer);
    }

    #[test]
    fn large_writes_hashed_on_two_threads_give_the_same_digests() {
        let data: Vec<u8> = (0..3 * PARALLEL_HASH_MIN + 12345)
            .map(|i| (i % 251) as u8)
            .collect();
        let run = |slice: usize| {
            let mut b = ContainerBuilder::new(header(MIN_RECORD_SIZE as u32));
            let mut recs = Vec::new();
            b.begin_object("big", 1).unwrap();
            for part in data.chunks(slice) {
                recs.extend(b.write(part));
            }
            let e = b.end_object().unwrap();
            let (tail, footer) = b.finish();
            recs.extend(tail);
            (recs, e, footer)
        };
        let (big_recs, big_entry, big_footer) = run(2 * PARALLEL_HASH_MIN);
        let (small_recs, small_entry, small_footer) = run(4096);
        assert_eq!(big_entry.sha256, <[u8; 32]>::from(Sha256::digest(&data)));
        assert_eq!(big_entry, small_entry);
        assert_eq!(big_footer, small_footer);
        assert_eq!(big_recs, small_recs);
    }

    #[test]
    fn misuse_is_an_error_not_a_panic() {
        let mut b = ContainerBuilder::new(header(1 << 20));
        assert!(matches!(b.end_object(), Err(FormatError::Usage { .. })));
        b.begin_object("k", 0).unwrap();
        assert!(matches!(
            b.begin_object("k2", 0),
            Err(FormatError::Usage { .. })
        ));
        b.end_object().unwrap();
        assert!(b.begin_object("", 0).is_err());
        assert!(b.begin_object(&"x".repeat(MAX_KEY_LEN + 1), 0).is_err());
        assert!(b.begin_object(&"x".repeat(MAX_KEY_LEN), 0).is_ok());
    }

    #[test]
    fn out_of_range_record_size_is_clamped_or_refused() {
        let b = ContainerBuilder::new(header(1000));
        assert_eq!(b.record_size(), MIN_RECORD_SIZE);
        assert_eq!(b.header().record_size as usize, MIN_RECORD_SIZE);
        assert!(ContainerBuilder::try_new(header(1000)).is_err());
        assert!(ContainerBuilder::try_new(header(1 << 20)).is_ok());
    }

    #[test]
    fn recycled_buffers_are_reused() {
        let rs = MIN_RECORD_SIZE;
        let mut b = ContainerBuilder::new(header(rs as u32));
        b.begin_object("k", 0).unwrap();
        let first = b.write(&vec![1u8; rs]);
        assert_eq!(first.len(), 1);
        let ptr = first[0].as_ptr();
        for r in first {
            b.recycle(r);
        }
        // `current` is a fresh buffer that fills first; then the recycled one is taken.
        let second = b.write(&vec![2u8; rs * 2]);
        assert_eq!(second.len(), 2);
        assert_eq!(second[1].as_ptr(), ptr);
        assert!(second.iter().all(|r| r.len() == rs));
    }
}
