//! The [`ContainerReader`]: reads one container sequentially, record by record, in tape order
//! (header, data records, footer records), and checks everything it can in that one pass.
//!
//! A reader cannot tell a data record from a footer record by position until the filemark, so
//! records that are intact footer records (magic, CRC) are held back until either a record
//! follows that cannot continue the footer (they were data after all: an archived reel tape
//! image, say) or [`ContainerReader::finish`] is called at the filemark. Memory is bounded by
//! the footer's size.

use sha2::{Digest, Sha256};

use super::container::ContainerHeader;
use super::error::FormatError;
use super::footer::{self, Footer, IndexEntry};

/// Object hash checking against a known index (see [`ContainerReader::with_index`]).
struct ObjectCheck {
    entries: Vec<IndexEntry>,
    next: usize,
    hasher: Sha256,
    first_record: u64,
}

/// Reads a container sequentially, record by record (header, data, footer) and checks
/// everything: header decode, record sizes, container hash, footer framing and CRCs, the
/// index, and, when the index is known up front ([`with_index`](Self::with_index)), each
/// object's SHA-256.
///
/// Object hashes need the object boundaries before the data goes by, and those are in the
/// footer at the end; so [`new`](Self::new) checks the container's SHA-256 (which covers every
/// object byte) and the index's consistency, and [`with_index`](Self::with_index) adds the
/// per-object check. Verify passes the catalogue's index; `catalog rebuild` reads the footer
/// first (space to the filemark, step back over the trailer's record count) and then streams
/// the container with it. After an error the reader's state is meaningless: stop and report.
pub struct ContainerReader {
    header: Option<ContainerHeader>,
    record_size: usize,
    records: u64,
    data_bytes: u64,
    data_records: u64,
    short_record: Option<u64>,
    hasher: Sha256,
    pending: Vec<Vec<u8>>,
    pending_first: u64,
    pending_count: u32,
    check: Option<ObjectCheck>,
}

impl Default for ContainerReader {
    fn default() -> Self {
        Self::new()
    }
}

impl ContainerReader {
    /// A reader that checks the container's structure and SHA-256.
    pub fn new() -> Self {
        ContainerReader {
            header: None,
            record_size: 0,
            records: 0,
            data_bytes: 0,
            data_records: 0,
            short_record: None,
            hasher: Sha256::new(),
            pending: Vec::new(),
            pending_first: 0,
            pending_count: 0,
            check: None,
        }
    }

    /// A reader that also checks the SHA-256 of each object in `entries` as its bytes go by,
    /// and at [`finish`](Self::finish) that the footer lists every one of them unchanged.
    /// `entries` may be a subset of the container's index, in any order; overlapping entries
    /// are refused.
    pub fn with_index(mut entries: Vec<IndexEntry>) -> Result<Self, FormatError> {
        entries.sort_by_key(|e| (e.offset, e.length));
        let mut end_prev = 0u64;
        for e in &entries {
            let end = e.offset.checked_add(e.length);
            match end {
                Some(end) if e.offset >= end_prev => end_prev = end,
                _ => {
                    return Err(FormatError::InvalidField {
                        structure: "expected index",
                        field: "offset",
                        offset: 0,
                        reason: format!(
                            "object {:?} at {} + {} overlaps another expected object",
                            e.key, e.offset, e.length
                        ),
                    });
                }
            }
        }
        let mut r = Self::new();
        r.check = Some(ObjectCheck {
            entries,
            next: 0,
            hasher: Sha256::new(),
            first_record: 0,
        });
        Ok(r)
    }

    /// Records pushed so far (header included).
    pub fn records(&self) -> u64 {
        self.records
    }

    /// The header, once the first record was pushed and decoded.
    pub fn header(&self) -> Option<&ContainerHeader> {
        self.header.as_ref()
    }

    /// Push the next record of the container, in tape order.
    pub fn push_record(&mut self, rec: &[u8]) -> Result<(), FormatError> {
        let n = self.records;
        self.records += 1;
        if self.header.is_none() {
            if n > 0 {
                return Err(FormatError::Layout {
                    reason: format!("record {n} pushed after the header record failed to decode"),
                });
            }
            let h = ContainerHeader::decode(rec).map_err(|e| e.in_record(0))?;
            self.record_size = h.record_size as usize;
            self.header = Some(h);
            return Ok(());
        }
        match footer::peek_record(rec) {
            Some((index, count)) => {
                let continues = !self.pending.is_empty()
                    && index as usize == self.pending.len()
                    && count == self.pending_count;
                if continues {
                    self.pending.push(rec.to_vec());
                    return Ok(());
                }
                self.flush_pending()?;
                if index == 0 {
                    self.pending_first = n;
                    self.pending_count = count;
                    self.pending.push(rec.to_vec());
                    Ok(())
                } else {
                    self.data(n, rec)
                }
            }
            None => {
                self.flush_pending()?;
                self.data(n, rec)
            }
        }
    }

    /// Records held back as possible footer records turned out to be data.
    fn flush_pending(&mut self) -> Result<(), FormatError> {
        let pending = std::mem::take(&mut self.pending);
        for (i, r) in pending.iter().enumerate() {
            self.data(self.pending_first + i as u64, r)?;
        }
        Ok(())
    }

    fn data(&mut self, n: u64, rec: &[u8]) -> Result<(), FormatError> {
        let rs = self.record_size;
        if rec.is_empty() {
            return Err(FormatError::Layout {
                reason: format!("record {n} is empty; data records hold 1 to {rs} bytes"),
            });
        }
        if rec.len() > rs {
            return Err(FormatError::Layout {
                reason: format!(
                    "record {n} is {} bytes, larger than the container's record size of {rs}",
                    rec.len()
                ),
            });
        }
        if let Some(short) = self.short_record {
            return Err(FormatError::Layout {
                reason: format!(
                    "record {n} follows the short data record {short}; only the last data record may be shorter than {rs} bytes (a record is missing or the footer is damaged)"
                ),
            });
        }
        if rec.len() < rs {
            self.short_record = Some(n);
        }
        self.hasher.update(rec);
        if let Some(check) = &mut self.check {
            check_objects(check, n, self.data_bytes, rec)?;
        }
        self.data_bytes += rec.len() as u64;
        self.data_records += 1;
        Ok(())
    }

    /// Call at the filemark: decodes the footer from the records held back, and checks it
    /// against what was read (record count, byte count, container SHA-256, container UUID,
    /// and the expected objects).
    pub fn finish(mut self) -> Result<(ContainerHeader, Footer), FormatError> {
        let header = self.header.take().ok_or_else(|| FormatError::Layout {
            reason: "no valid header record: the container is empty or its header is damaged"
                .into(),
        })?;
        let count = self.pending_count;
        if self.pending.is_empty() || self.pending.len() != count as usize {
            return Err(FormatError::Layout {
                reason: format!(
                    "the container ends at record {} without a complete footer ({} of {} footer records found); the write was cut short or the footer is damaged",
                    self.records,
                    self.pending.len(),
                    count
                ),
            });
        }
        let mut index = Vec::new();
        let mut trailer = None;
        let mut version = None;
        for (i, rec) in self.pending.iter().enumerate() {
            let at = self.pending_first + i as u64;
            let (chunk, t, v) =
                footer::decode_record(rec, i as u32, count).map_err(|e| e.in_record(at))?;
            footer::same_version(&mut version, v).map_err(|e| e.in_record(at))?;
            index.extend_from_slice(chunk);
            trailer = t;
        }
        let last = self.pending_first + u64::from(count) - 1;
        let (trailer, index_crc) = trailer.ok_or_else(|| {
            FormatError::Layout {
                reason: "the last footer record has no trailer".into(),
            }
            .in_record(last)
        })?;
        let version = version.unwrap_or(super::FORMAT_VERSION);
        let footer = footer::finish_decode(&index, trailer, index_crc, version)
            .map_err(|e| e.in_record(self.pending_first))?;
        if footer.container_uuid != header.container_uuid {
            return Err(FormatError::Layout {
                reason: format!(
                    "the footer belongs to container {}, the header to {}; records of two containers are mixed",
                    footer.container_uuid, header.container_uuid
                ),
            });
        }
        if footer.data_records != self.data_records || footer.data_bytes != self.data_bytes {
            return Err(FormatError::Layout {
                reason: format!(
                    "the footer says {} data records and {} bytes, {} records and {} bytes were read; data records are missing or cut short",
                    footer.data_records, footer.data_bytes, self.data_records, self.data_bytes
                ),
            });
        }
        let computed: [u8; 32] = self.hasher.finalize().into();
        if computed != footer.sha256 {
            return Err(FormatError::DigestMismatch {
                what: format!("container {} data stream", header.container_uuid),
                expected: hex::encode(footer.sha256),
                computed: hex::encode(computed),
            });
        }
        if let Some(mut check) = self.check.take() {
            finish_objects(&mut check, self.data_bytes, &footer)?;
        }
        Ok((header, footer))
    }
}

/// Feed the bytes of data record `n` (stream offset `pos`) to the expected objects.
fn check_objects(
    check: &mut ObjectCheck,
    n: u64,
    mut pos: u64,
    mut rest: &[u8],
) -> Result<(), FormatError> {
    while let Some(e) = check.entries.get(check.next) {
        if pos < e.offset {
            let skip = (e.offset - pos).min(rest.len() as u64) as usize;
            if skip == rest.len() {
                return Ok(());
            }
            pos += skip as u64;
            rest = rest.get(skip..).unwrap_or_default();
        }
        let end = e.offset + e.length; // checked in with_index
        if pos == e.offset {
            check.first_record = n;
        }
        let take = (end - pos).min(rest.len() as u64) as usize;
        let (now, later) = rest.split_at(take);
        check.hasher.update(now);
        pos += take as u64;
        rest = later;
        if pos == end {
            let computed: [u8; 32] = std::mem::take(&mut check.hasher).finalize().into();
            if computed != e.sha256 {
                return Err(object_mismatch(e, check.first_record, n, computed).in_record(n));
            }
            check.next += 1;
        } else {
            return Ok(());
        }
    }
    Ok(())
}

fn object_mismatch(e: &IndexEntry, first: u64, last: u64, computed: [u8; 32]) -> FormatError {
    FormatError::DigestMismatch {
        what: format!(
            "object {:?} generation {} (offset {}, {} bytes, container records {first}..={last})",
            e.key, e.generation, e.offset, e.length
        ),
        expected: hex::encode(e.sha256),
        computed: hex::encode(computed),
    }
}

/// At the end: zero-length objects at the end of the stream, objects the data never reached,
/// and every expected object must be in the footer unchanged.
fn finish_objects(
    check: &mut ObjectCheck,
    data_bytes: u64,
    footer: &Footer,
) -> Result<(), FormatError> {
    while let Some(e) = check.entries.get(check.next) {
        if e.length == 0 && e.offset <= data_bytes {
            let computed: [u8; 32] = Sha256::digest([]).into();
            if computed != e.sha256 {
                return Err(object_mismatch(e, 0, 0, computed));
            }
            check.next += 1;
            continue;
        }
        return Err(FormatError::Layout {
            reason: format!(
                "object {:?} at offset {} + {} bytes lies beyond the end of the data stream ({data_bytes} bytes)",
                e.key, e.offset, e.length
            ),
        });
    }
    for e in &check.entries {
        let from = footer.entries.partition_point(|f| f.offset < e.offset);
        let found = footer.entries[from..]
            .iter()
            .take_while(|f| f.offset == e.offset)
            .any(|f| f == e);
        if !found {
            return Err(FormatError::Layout {
                reason: format!(
                    "object {:?} generation {} at offset {} is not in the container's footer as expected; the catalogue and the tape disagree",
                    e.key, e.generation, e.offset
                ),
            });
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::format::{ContainerBuilder, MIN_RECORD_SIZE};
    use proptest::prelude::*;
    use uuid::Uuid;

    fn header(rs: usize) -> ContainerHeader {
        ContainerHeader {
            container_uuid: Uuid::from_u128(11),
            cartridge_uuid: Uuid::from_u128(12),
            barcode: "RL0002L9".into(),
            pool: "p".into(),
            record_size: rs as u32,
            sequence: 4,
            created_unix: 5,
        }
    }

    /// Build a container from objects (written in uneven slices); returns its records in tape
    /// order, the footer and the index entries.
    fn build(rs: usize, objects: &[(String, Vec<u8>)], slice: usize) -> (Vec<Vec<u8>>, Footer) {
        let mut b = ContainerBuilder::new(header(rs));
        let mut recs = vec![b.header_record()];
        for (i, (k, data)) in objects.iter().enumerate() {
            b.begin_object(k, i as u64).unwrap();
            for part in data.chunks(slice.max(1)) {
                recs.extend(b.write(part));
            }
            b.end_object().unwrap();
        }
        let (tail, footer) = b.finish();
        recs.extend(tail);
        (recs, footer)
    }

    fn read(
        recs: &[Vec<u8>],
        index: Option<Vec<IndexEntry>>,
    ) -> Result<(ContainerHeader, Footer), FormatError> {
        let mut r = match index {
            Some(i) => ContainerReader::with_index(i)?,
            None => ContainerReader::new(),
        };
        for rec in recs {
            r.push_record(rec)?;
        }
        r.finish()
    }

    fn objects(sizes: &[usize]) -> Vec<(String, Vec<u8>)> {
        sizes
            .iter()
            .enumerate()
            .map(|(i, &n)| {
                (
                    format!("obj/{i}"),
                    (0..n).map(|j| (j * 31 + i) as u8).collect(),
                )
            })
            .collect()
    }

    #[test]
    fn an_empty_container_round_trips() {
        let (recs, footer) = build(MIN_RECORD_SIZE, &[], 1);
        assert_eq!(recs.len(), 2);
        let (h, f) = read(&recs, None).unwrap();
        assert_eq!(h, header(MIN_RECORD_SIZE));
        assert_eq!(f, footer);
        assert_eq!(f.data_bytes, 0);
    }

    #[test]
    fn a_damaged_object_is_named_with_its_records() {
        let rs = MIN_RECORD_SIZE;
        let objs = objects(&[100, rs * 2, 10]);
        let (mut recs, footer) = build(rs, &objs, 4096);
        recs[2][5] ^= 0x80; // inside obj/1, in data record 2 (container record 2)
        let err = read(&recs, Some(footer.entries.clone()))
            .unwrap_err()
            .to_string();
        assert!(err.contains("obj/1"), "{err}");
        assert!(err.contains("SHA-256 mismatch"), "{err}");
        let err = read(&recs, None).unwrap_err().to_string();
        assert!(err.contains("container"), "{err}");
    }

    #[test]
    fn missing_footer_and_missing_data_are_reported() {
        let rs = MIN_RECORD_SIZE;
        let (recs, _) = build(rs, &objects(&[rs * 3 + 7]), 1 << 16);
        let no_footer = &recs[..recs.len() - 1];
        let err = read(no_footer, None).unwrap_err().to_string();
        assert!(err.contains("without a complete footer"), "{err}");
        let mut no_data = recs.clone();
        no_data.remove(2);
        assert!(read(&no_data, None).is_err());
        assert!(read(&[], None).is_err());
    }

    #[test]
    fn data_that_looks_like_a_footer_is_still_data() {
        // An object whose bytes are a reel container (a tape image), aligned so that its
        // footer records land on record boundaries: the reader must treat them as data.
        let rs = MIN_RECORD_SIZE;
        let (inner, _) = build(rs, &objects(&[rs, 10]), 1 << 16);
        // Inner records are header, data (rs), short data (10), footer record: pad the short
        // ones to full size so the inner footer record starts on a record boundary.
        let mut image = Vec::new();
        for r in &inner[..inner.len() - 1] {
            let mut r = r.clone();
            r.resize(rs, 0);
            image.extend_from_slice(&r);
        }
        image.extend_from_slice(inner.last().unwrap());
        let inner_footer = inner.last().unwrap().clone();
        let (recs, footer) = build(rs, &[("image".into(), image)], 1 << 16);
        assert_eq!(
            recs[4], inner_footer,
            "test setup: inner footer is a whole record"
        );
        let (_, f) = read(&recs, Some(footer.entries.clone())).unwrap();
        assert_eq!(f, footer);
        assert_eq!(f.entries.len(), 1);
    }

    #[test]
    fn an_object_left_open_at_finish_is_dead_space_not_an_entry() {
        let mut b = ContainerBuilder::new(header(MIN_RECORD_SIZE));
        let mut recs = vec![b.header_record()];
        b.begin_object("kept", 1).unwrap();
        recs.extend(b.write(&[1u8; 100]));
        b.end_object().unwrap();
        b.begin_object("cut-short", 1).unwrap();
        recs.extend(b.write(&[2u8; 50]));
        let (tail, footer) = b.finish();
        recs.extend(tail);
        assert_eq!(footer.entries.len(), 1);
        assert_eq!(footer.entries[0].key, "kept");
        assert_eq!(footer.data_bytes, 150);
        let (_, f) = read(&recs, Some(footer.entries.clone())).unwrap();
        assert_eq!(f, footer);
    }

    #[test]
    fn expected_objects_must_be_in_the_footer() {
        let (recs, footer) = build(MIN_RECORD_SIZE, &objects(&[10, 20]), 7);
        let mut wrong = footer.entries.clone();
        wrong[1].generation = 99;
        let err = read(&recs, Some(wrong)).unwrap_err().to_string();
        assert!(err.contains("not in the container's footer"), "{err}");
        let mut beyond = footer.entries[..1].to_vec();
        beyond[0].offset = 1000;
        assert!(read(&recs, Some(beyond)).is_err());
    }

    fn arb_objects() -> impl Strategy<Value = (usize, Vec<(String, Vec<u8>)>, usize)> {
        (
            prop::sample::select(vec![MIN_RECORD_SIZE, MIN_RECORD_SIZE + 4096 * 3]),
            prop::collection::vec(("[a-z/]{1,12}", 0usize..400_000, any::<u8>()), 0..8),
            1usize..200_000,
        )
            .prop_map(|(rs, objs, slice)| {
                let objs = objs
                    .into_iter()
                    .enumerate()
                    .map(|(i, (k, n, seed))| {
                        let data = (0..n)
                            .map(|j| (j as u8).wrapping_mul(seed) ^ (j >> 8) as u8)
                            .collect();
                        (format!("{k}{i}"), data)
                    })
                    .collect();
                (rs, objs, slice)
            })
    }

    proptest! {
        #![proptest_config(ProptestConfig { cases: 24, ..ProptestConfig::default() })]

        #[test]
        fn random_object_sets_round_trip((rs, objs, slice) in arb_objects()) {
            let (recs, footer) = build(rs, &objs, slice);
            prop_assert!(recs.iter().all(|r| r.len() <= rs));
            let (h, f) = read(&recs, Some(footer.entries.clone())).unwrap();
            prop_assert_eq!(h.record_size as usize, rs);
            prop_assert_eq!(&f, &footer);
            // Every object's bytes are where its entry says: data record offset / rs.
            let stream: Vec<u8> = recs[1..=f.data_records as usize].concat();
            for (e, (k, data)) in f.entries.iter().zip(&objs) {
                prop_assert_eq!(&e.key, k);
                let at = e.offset as usize;
                prop_assert_eq!(&stream[at..at + data.len()], &data[..]);
                prop_assert_eq!(e.sha256, <[u8; 32]>::from(Sha256::digest(data)));
            }
            prop_assert_eq!(read(&recs, None).unwrap().1, footer);
        }

        #[test]
        fn damaged_containers_are_refused_never_panic(
            (rs, objs, slice) in arb_objects(),
            which in any::<prop::sample::Index>(),
            flip in any::<prop::sample::Index>(),
            cut in any::<prop::sample::Index>(),
            mode in 0u8..4,
        ) {
            let (mut recs, footer) = build(rs, &objs, slice);
            let i = which.index(recs.len());
            match mode {
                0 => {
                    let bit = flip.index(recs[i].len() * 8);
                    recs[i][bit / 8] ^= 1 << (bit % 8);
                }
                1 => {
                    let n = cut.index(recs[i].len());
                    recs[i].truncate(n);
                }
                2 => {
                    recs.remove(i);
                }
                _ => {
                    recs[i] = vec![0x5a; recs[i].len()];
                }
            }
            prop_assert!(read(&recs, None).is_err());
            prop_assert!(read(&recs, Some(footer.entries.clone())).is_err());
        }

        #[test]
        fn arbitrary_records_never_panic(recs in prop::collection::vec(prop::collection::vec(any::<u8>(), 0..600), 0..6)) {
            let _ = read(&recs, None);
        }
    }
}
