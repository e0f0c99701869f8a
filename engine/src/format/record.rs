//! Framing: the [`ContainerBuilder`] turns a stream of object bytes into fixed-size data
//! records, hashing as it goes (each object's SHA-256 and the container's), and produces the
//! footer at the end. It is on the write hot path: every byte is copied exactly once (into the
//! record buffer: [`ContainerBuilder::fill_from`] reads a source straight into it) and hashed
//! while it is still in cache; record buffers are reused through [`ContainerBuilder::recycle`].
//! The container's SHA-256 may be computed by the caller on another thread
//! ([`ContainerBuilder::with_external_container_hash`]), so the two hash passes over every
//! byte run in parallel.

use std::io::{self, Read};

use sha2::{Digest, Sha256};

use super::container::ContainerHeader;
use super::error::FormatError;
use super::footer::{Footer, IndexEntry, MAX_KEY_LEN};
use super::meta::ObjectMeta;
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
    meta: Option<ObjectMeta>,
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
    /// The record being filled: its length is the record size once it has a buffer (bytes
    /// past `filled` are stale), so reads go straight into it without zeroing it first.
    current: Vec<u8>,
    filled: usize,
    spare: Vec<Vec<u8>>,
    /// `None`: the caller hashes the data records (see `with_external_container_hash`).
    container: Option<Sha256>,
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
            current: Vec::new(),
            filled: 0,
            spare: Vec::new(),
            container: Some(Sha256::new()),
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
            meta: None,
        });
        Ok(())
    }

    /// Record the open object's filesystem metadata (kind, mode, owner, mtime) in its index
    /// entry. Fails if no object is open.
    pub fn set_object_meta(&mut self, meta: ObjectMeta) -> Result<(), FormatError> {
        let o = self.object.as_mut().ok_or_else(|| FormatError::Usage {
            reason: "set_object_meta without an open object; call begin_object first".into(),
        })?;
        o.meta = Some(meta);
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
            && self.container.is_some()
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
            self.ensure_buffer();
            let room = self.record_size - self.filled;
            let n = room.min(data.len()).min(STEP);
            let (step, rest) = data.split_at(n);
            self.current[self.filled..self.filled + n].copy_from_slice(step);
            self.filled += n;
            self.hash(step);
            data = rest;
            if let Some(r) = self.take_if_full() {
                full.push(r);
            }
        }
        full
    }

    /// Read the open object's next bytes from `src` straight into the current record buffer
    /// (one read of at most the rest of the record: no intermediate copy) and hash them.
    /// Returns how many bytes were read (0: `src` is at its end) and the record that became
    /// full, if one did. Interrupted reads are retried; other read errors are returned and
    /// leave the builder as it was before the call.
    pub fn fill_from(&mut self, src: &mut impl Read) -> io::Result<(usize, Option<Vec<u8>>)> {
        self.ensure_buffer();
        let n = loop {
            match src.read(&mut self.current[self.filled..self.record_size]) {
                Ok(n) => break n,
                Err(e) if e.kind() == io::ErrorKind::Interrupted => continue,
                Err(e) => return Err(e),
            }
        };
        let start = self.filled;
        self.filled += n;
        // Hash in cache-sized steps: the read just brought these bytes into L2.
        let mut at = start;
        while at < self.filled {
            let end = (at + STEP).min(self.filled);
            let (object, container, current) =
                (&mut self.object, &mut self.container, &self.current);
            let step = &current[at..end];
            if let Some(c) = container {
                c.update(step);
            }
            if let Some(o) = object {
                o.hasher.update(step);
            }
            at = end;
        }
        self.data_bytes += n as u64;
        Ok((n, self.take_if_full()))
    }

    fn hash(&mut self, step: &[u8]) {
        if let Some(c) = &mut self.container {
            c.update(step);
        }
        if let Some(o) = &mut self.object {
            o.hasher.update(step);
        }
        self.data_bytes += step.len() as u64;
    }

    /// Give the current record a full-size buffer if it has none yet.
    fn ensure_buffer(&mut self) {
        if self.current.len() != self.record_size {
            let mut b = self.spare.pop().unwrap_or_default();
            // A recycled full record is already this long: nothing is zeroed then.
            b.resize(self.record_size, 0);
            self.current = b;
        }
    }

    /// The current record, if it is full; the next record starts in a fresh buffer.
    fn take_if_full(&mut self) -> Option<Vec<u8>> {
        if self.filled < self.record_size {
            return None;
        }
        self.filled = 0;
        self.data_records += 1;
        Some(std::mem::take(&mut self.current))
    }

    /// Give a record buffer back once it is on tape, so the next records reuse its memory.
    pub fn recycle(&mut self, mut record: Vec<u8>) {
        if record.capacity() >= self.record_size && self.spare.len() < MAX_SPARE {
            // Full records keep their length; only a short one is topped up (with zeros).
            record.resize(self.record_size, 0);
            self.spare.push(record);
        }
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
            meta: o.meta,
        };
        self.entries.push(entry.clone());
        Ok(entry)
    }

    /// Drop the open object: its bytes stay in the data stream as dead space and no index
    /// entry is made for it (docs/FORMAT.md §4.2). For a source that failed part way (it
    /// changed or could not be read): what was framed of it is never indexed. No-op when no
    /// object is open.
    pub fn abandon_object(&mut self) {
        self.object = None;
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
        let mut out: Vec<Vec<u8>> = self.finish_data().into_iter().collect();
        // Always `Some` here: only `ExternalHashBuilder` clears it, and it has no `finish`.
        let sha = self
            .container
            .take()
            .map(|c| c.finalize().into())
            .unwrap_or_default();
        let (footer_records, footer) = self.close(sha);
        out.extend(footer_records);
        (out, footer)
    }

    /// The last, short data record, if the data stream does not end on a record boundary;
    /// `None` if it does, or on a second call.
    fn finish_data(&mut self) -> Option<Vec<u8>> {
        if let Some(o) = &self.object {
            tracing::warn!(key = %o.key, "container finished with an open object; it is not indexed");
        }
        if self.filled == 0 {
            return None;
        }
        let mut last = std::mem::take(&mut self.current);
        last.truncate(self.filled);
        self.filled = 0;
        self.data_records += 1;
        Some(last)
    }

    /// The footer records and the footer, with `container_sha256`; every data record must have
    /// been handed out already.
    fn close(self, container_sha256: [u8; 32]) -> (Vec<Vec<u8>>, Footer) {
        let footer = Footer {
            container_uuid: self.header.container_uuid,
            entries: self.entries,
            data_bytes: self.data_bytes,
            data_records: self.data_records,
            sha256: container_sha256,
        };
        let records = footer.encode(self.record_size);
        (records, footer)
    }
}

/// A [`ContainerBuilder`] that leaves the container's SHA-256 to its caller, so the two hash
/// passes over every byte (object and container) can run on two threads without a barrier:
/// the caller hashes every data record this builder hands out ([`write`](Self::write),
/// [`fill_from`](Self::fill_from), [`finish_data`](Self::finish_data)), in order, and closes
/// the container with [`finish_with`](Self::finish_with). Object hashes and framing are the
/// builder's, exactly as with [`ContainerBuilder`].
pub struct ExternalHashBuilder(ContainerBuilder);

impl ExternalHashBuilder {
    /// A builder for the container described by `header` (record size clamped as
    /// [`ContainerBuilder::new`] does).
    pub fn new(header: ContainerHeader) -> Self {
        let mut b = ContainerBuilder::new(header);
        b.container = None;
        ExternalHashBuilder(b)
    }

    /// The header record: the first record of the container (not a data record).
    pub fn header_record(&self) -> Vec<u8> {
        self.0.header_record()
    }

    /// The data record size in bytes.
    pub fn record_size(&self) -> usize {
        self.0.record_size()
    }

    /// See [`ContainerBuilder::begin_object`].
    pub fn begin_object(&mut self, key: &str, generation: u64) -> Result<(), FormatError> {
        self.0.begin_object(key, generation)
    }

    /// See [`ContainerBuilder::write`]; the returned records are data records.
    pub fn write(&mut self, data: &[u8]) -> Vec<Vec<u8>> {
        self.0.write(data)
    }

    /// See [`ContainerBuilder::fill_from`]; a returned record is a data record.
    pub fn fill_from(&mut self, src: &mut impl Read) -> io::Result<(usize, Option<Vec<u8>>)> {
        self.0.fill_from(src)
    }

    /// See [`ContainerBuilder::set_object_meta`].
    pub fn set_object_meta(&mut self, meta: ObjectMeta) -> Result<(), FormatError> {
        self.0.set_object_meta(meta)
    }

    /// See [`ContainerBuilder::end_object`].
    pub fn end_object(&mut self) -> Result<IndexEntry, FormatError> {
        self.0.end_object()
    }

    /// See [`ContainerBuilder::abandon_object`].
    pub fn abandon_object(&mut self) {
        self.0.abandon_object()
    }

    /// See [`ContainerBuilder::recycle`].
    pub fn recycle(&mut self, record: Vec<u8>) {
        self.0.recycle(record)
    }

    /// Bytes in the data stream so far.
    pub fn data_bytes(&self) -> u64 {
        self.0.data_bytes()
    }

    /// The last, short data record, if the data stream does not end on a record boundary (hash
    /// it like the others); `None` if it does, or on a second call. An object still open is
    /// not indexed: end it first to keep it.
    pub fn finish_data(&mut self) -> Option<Vec<u8>> {
        self.0.finish_data()
    }

    /// Close the container with `container_sha256`, the SHA-256 of every data record in
    /// order: the footer records, and the footer. Write them in order, then a filemark. Fails
    /// if a data record was not handed out yet (call [`finish_data`](Self::finish_data) first).
    pub fn finish_with(
        self,
        container_sha256: [u8; 32],
    ) -> Result<(Vec<Vec<u8>>, Footer), FormatError> {
        if self.0.filled != 0 {
            return Err(FormatError::Usage {
                reason: "finish_with while the last data record is still open; call finish_data first and hash it".into(),
            });
        }
        Ok(self.0.close(container_sha256))
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
    fn an_abandoned_object_is_dead_space_of_no_index_entry() {
        let mut b = ContainerBuilder::new(header(MIN_RECORD_SIZE as u32));
        b.begin_object("kept", 1).unwrap();
        let _ = b.write(&[1u8; 10]);
        b.end_object().unwrap();
        b.begin_object("torn", 1).unwrap();
        let _ = b.write(&[2u8; 20]);
        b.abandon_object();
        b.begin_object("after", 1).unwrap();
        let _ = b.write(&[3u8; 5]);
        let after = b.end_object().unwrap();
        assert_eq!(
            (after.offset, after.length),
            (30, 5),
            "the torn bytes stay in the stream"
        );
        let (_, footer) = b.finish();
        let keys: Vec<&str> = footer.entries.iter().map(|e| e.key.as_str()).collect();
        assert_eq!(keys, ["kept", "after"]);
        assert_eq!(footer.data_bytes, 35);
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
        // The next record starts in the recycled buffer.
        let second = b.write(&vec![2u8; rs * 2]);
        assert_eq!(second.len(), 2);
        assert_eq!(second[0].as_ptr(), ptr);
        assert!(second.iter().all(|r| r.len() == rs));
        assert!(second.iter().all(|r| r.iter().all(|&x| x == 2)));
    }

    /// A reader that hands out at most `max` bytes per read, to cut records at odd places.
    struct Dribble<'a> {
        data: &'a [u8],
        max: usize,
    }

    impl std::io::Read for Dribble<'_> {
        fn read(&mut self, buf: &mut [u8]) -> std::io::Result<usize> {
            let n = buf.len().min(self.max).min(self.data.len());
            buf[..n].copy_from_slice(&self.data[..n]);
            self.data = &self.data[n..];
            Ok(n)
        }
    }

    #[test]
    fn reading_into_records_with_an_external_container_hash_matches_write() {
        let rs = MIN_RECORD_SIZE;
        let objects: Vec<Vec<u8>> = [3 * rs + 17, 5, rs, 2 * rs - 1]
            .iter()
            .enumerate()
            .map(|(k, &n)| (0..n).map(|i| (i * 31 + k * 7 + i / 977) as u8).collect())
            .collect();
        // Reference: the copying path with the builder's own container hash.
        let mut reference = ContainerBuilder::new(header(rs as u32));
        let mut want = Vec::new();
        let mut want_entries = Vec::new();
        for (k, o) in objects.iter().enumerate() {
            reference.begin_object(&format!("o{k}"), 1).unwrap();
            want.extend(reference.write(o));
            want_entries.push(reference.end_object().unwrap());
        }
        let (tail, want_footer) = reference.finish();
        want.extend(tail);

        for max in [1000, rs / 3, rs, 4 * rs] {
            let mut b = ExternalHashBuilder::new(header(rs as u32));
            let mut got = Vec::new();
            let mut container = Sha256::new();
            let mut entries = Vec::new();
            for (k, o) in objects.iter().enumerate() {
                b.begin_object(&format!("o{k}"), 1).unwrap();
                let mut src = Dribble { data: o, max };
                loop {
                    let (n, full) = b.fill_from(&mut src).unwrap();
                    if let Some(r) = full {
                        container.update(&r);
                        // Recycled buffers come back with stale bytes: they must not leak.
                        got.push(r.clone());
                        b.recycle(r);
                    }
                    if n == 0 {
                        break;
                    }
                }
                entries.push(b.end_object().unwrap());
            }
            let last = b.finish_data().unwrap();
            container.update(&last);
            got.push(last);
            assert!(b.finish_data().is_none());
            let (footer_recs, footer) = b.finish_with(container.finalize().into()).unwrap();
            got.extend(footer_recs);
            assert_eq!(entries, want_entries, "read size {max}");
            assert_eq!(footer, want_footer, "read size {max}");
            assert_eq!(got, want, "read size {max}");
        }
    }

    #[test]
    fn external_hash_builder_refuses_to_close_over_an_unfinished_record() {
        let mut b = ExternalHashBuilder::new(header(MIN_RECORD_SIZE as u32));
        b.begin_object("k", 0).unwrap();
        assert!(b.write(&[1u8; 10]).is_empty());
        b.end_object().unwrap();
        assert!(matches!(
            b.finish_with([0; 32]),
            Err(FormatError::Usage { .. })
        ));
    }

    #[test]
    fn read_errors_leave_the_builder_unchanged() {
        struct Broken;
        impl std::io::Read for Broken {
            fn read(&mut self, _: &mut [u8]) -> std::io::Result<usize> {
                Err(std::io::Error::other("disk on fire"))
            }
        }
        let mut b = ContainerBuilder::new(header(MIN_RECORD_SIZE as u32));
        b.begin_object("k", 0).unwrap();
        assert!(b.fill_from(&mut Broken).is_err());
        assert_eq!(b.data_bytes(), 0);
        let e = b.end_object().unwrap();
        assert_eq!(e.sha256, <[u8; 32]>::from(Sha256::digest(b"")));
    }
}
