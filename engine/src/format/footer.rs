//! The container footer: the index of the objects in the container and the SHA-256 of its data
//! stream, spread over one or more footer records; the last footer record ends with a
//! fixed-size trailer so a reader positioned at the filemark can step back one record, learn
//! the footer's length and read just the footer.

use serde::{Deserialize, Serialize};
use uuid::Uuid;

use super::error::FormatError;
use super::meta::{META_LEN, ObjectMeta};
use super::wire::{self, Cursor, ENVELOPE_OVERHEAD};
use super::{MAX_RECORD_SIZE, MIN_RECORD_SIZE};

/// Magic of every footer record.
pub const FOOTER_MAGIC: &[u8; 8] = b"REELFOOT";
/// Magic of the trailer at the end of the last footer record.
pub const TRAILER_MAGIC: &[u8; 8] = b"REELTRLR";
/// Length of the trailer in bytes (an envelope around a 32-byte body).
pub const TRAILER_LEN: usize = ENVELOPE_OVERHEAD + 32;
/// Longest object key, in bytes.
pub const MAX_KEY_LEN: usize = 4096;

/// Footer record body before its chunk of the index: record index and record count.
const RECORD_PREFIX: usize = 8;
/// Fixed part of the index: container uuid, data_bytes, data_records, sha256, entry count.
const INDEX_FIXED: usize = 16 + 8 + 8 + 32 + 8;
/// Smallest encoded version 1 entry: empty-key length (2) + generation, offset, length (24) +
/// sha256.
const MIN_ENTRY_LEN_V1: usize = 2 + 24 + 32;
/// Smallest encoded version 2 entry: a version 1 entry and the metadata block.
const MIN_ENTRY_LEN: usize = MIN_ENTRY_LEN_V1 + META_LEN;

const RECORD: &str = "footer record";
const TRAILER: &str = "footer trailer";
const INDEX: &str = "footer index";

/// One object in a container's index. `offset` is the byte offset of the object in the
/// container's data stream (data records concatenated), so its first byte is in data record
/// `offset / record_size`, i.e. tape block `container_first_block + 1 + offset / record_size`.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct IndexEntry {
    /// The object's key (1 to 4096 bytes of UTF-8).
    pub key: String,
    /// The object's generation (a key archived again gets a new generation).
    pub generation: u64,
    /// Byte offset of the object's first byte in the container's data stream.
    pub offset: u64,
    /// The object's length in bytes.
    pub length: u64,
    /// SHA-256 of the object's bytes.
    pub sha256: [u8; 32],
    /// What the filesystem gave the object besides its bytes (kind, mode, owner, mtime);
    /// `None` when nothing was recorded (every entry of a version 1 container).
    #[serde(default)]
    pub meta: Option<ObjectMeta>,
}

/// The container's footer: its index and the SHA-256 of its whole data stream.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Footer {
    /// Must equal the header's `container_uuid`.
    pub container_uuid: Uuid,
    /// The objects, in ascending offset order, never overlapping.
    pub entries: Vec<IndexEntry>,
    /// Length of the data stream in bytes.
    pub data_bytes: u64,
    /// Number of data records (`ceil(data_bytes / record_size)`).
    pub data_records: u64,
    /// SHA-256 of the data stream (every data record, in order).
    pub sha256: [u8; 32],
}

/// What the trailer at the end of the last footer record says.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct FooterTrailer {
    /// How many footer records the footer has (this one included).
    pub footer_records: u32,
    /// Length of the container's data stream.
    pub data_bytes: u64,
    /// Number of data records.
    pub data_records: u64,
}

impl Footer {
    /// Encode into footer records of at most `record_size` bytes (clamped to 256 KiB..8 MiB);
    /// the last one ends with the trailer.
    pub fn encode(&self, record_size: usize) -> Vec<Vec<u8>> {
        let index = self.encode_index();
        let rs = record_size.clamp(MIN_RECORD_SIZE, MAX_RECORD_SIZE);
        let chunk_cap = rs - ENVELOPE_OVERHEAD - RECORD_PREFIX - TRAILER_LEN;
        let chunks: Vec<&[u8]> = index.chunks(chunk_cap).collect();
        let count = chunks.len() as u32;
        let index_crc = crc32c::crc32c(&index);
        let mut body = Vec::with_capacity(chunk_cap.min(index.len()) + RECORD_PREFIX);
        let mut out = Vec::with_capacity(chunks.len());
        for (i, chunk) in chunks.iter().enumerate() {
            body.clear();
            body.extend_from_slice(&(i as u32).to_le_bytes());
            body.extend_from_slice(&count.to_le_bytes());
            body.extend_from_slice(chunk);
            let mut rec = Vec::with_capacity(body.len() + ENVELOPE_OVERHEAD + TRAILER_LEN);
            wire::seal_as(super::FOOTER_VERSION, FOOTER_MAGIC, &body, &mut rec);
            if i + 1 == chunks.len() {
                let mut t = Vec::with_capacity(32);
                t.extend_from_slice(&count.to_le_bytes());
                t.extend_from_slice(&0u32.to_le_bytes());
                t.extend_from_slice(&self.data_bytes.to_le_bytes());
                t.extend_from_slice(&self.data_records.to_le_bytes());
                t.extend_from_slice(&index_crc.to_le_bytes());
                t.extend_from_slice(&0u32.to_le_bytes());
                wire::seal_as(super::TRAILER_VERSION, TRAILER_MAGIC, &t, &mut rec);
            }
            out.push(rec);
        }
        out
    }

    fn encode_index(&self) -> Vec<u8> {
        let size: usize = self
            .entries
            .iter()
            .map(|e| MIN_ENTRY_LEN + e.key.len().min(MAX_KEY_LEN))
            .sum();
        let mut v = Vec::with_capacity(INDEX_FIXED + size);
        v.extend_from_slice(self.container_uuid.as_bytes());
        v.extend_from_slice(&self.data_bytes.to_le_bytes());
        v.extend_from_slice(&self.data_records.to_le_bytes());
        v.extend_from_slice(&self.sha256);
        v.extend_from_slice(&(self.entries.len() as u64).to_le_bytes());
        for e in &self.entries {
            wire::put_string(&mut v, &e.key, MAX_KEY_LEN);
            v.extend_from_slice(&e.generation.to_le_bytes());
            v.extend_from_slice(&e.offset.to_le_bytes());
            v.extend_from_slice(&e.length.to_le_bytes());
            v.extend_from_slice(&e.sha256);
            ObjectMeta::encode(e.meta.as_ref(), &mut v);
        }
        v
    }

    /// Decode the footer from its records, in tape order. Checks every record's framing and
    /// CRC, the trailer, the CRC over the whole index, and the index itself (offsets ascending,
    /// no overlap, inside the data stream).
    pub fn decode(records: &[Vec<u8>]) -> Result<Footer, FormatError> {
        let count = u32::try_from(records.len()).map_err(|_| FormatError::Layout {
            reason: format!(
                "{} footer records is more than the format allows",
                records.len()
            ),
        })?;
        if count == 0 {
            return Err(FormatError::Layout {
                reason: "no footer records: the container ends without its footer (the write was cut short)".into(),
            });
        }
        let mut index = Vec::new();
        let mut trailer = None;
        let mut version = None;
        for (i, rec) in records.iter().enumerate() {
            let (chunk, t, v) =
                decode_record(rec, i as u32, count).map_err(|e| in_footer_record(e, i))?;
            same_version(&mut version, v).map_err(|e| in_footer_record(e, i))?;
            index.extend_from_slice(chunk);
            trailer = t;
        }
        let (trailer, index_crc) = trailer.ok_or_else(|| FormatError::Layout {
            reason: "the last footer record has no trailer".into(),
        })?;
        finish_decode(
            &index,
            trailer,
            index_crc,
            version.unwrap_or(super::FORMAT_VERSION),
        )
    }

    /// Read the trailer at the end of the last record before the filemark: the footer's record
    /// count, data_bytes and data_records.
    pub fn trailer(last_record: &[u8]) -> Result<FooterTrailer, FormatError> {
        decode_trailer(last_record).map(|(t, _)| t)
    }
}

fn in_footer_record(e: FormatError, i: usize) -> FormatError {
    FormatError::Layout {
        reason: format!("footer record {i}: {e}"),
    }
}

/// Whether `rec` is an intact footer record; returns its (index, count). Used by the reader to
/// tell footer records from data records (a data record that happens to look like one is
/// resolved by the trailer at the end).
pub(crate) fn peek_record(rec: &[u8]) -> Option<(u32, u32)> {
    if !rec.starts_with(FOOTER_MAGIC) {
        return None;
    }
    let (body, _) = wire::open(rec, FOOTER_MAGIC, RECORD).ok()?;
    let mut c = Cursor::body(body, RECORD);
    let index = c.u32("record_index").ok()?;
    let count = c.u32("record_count").ok()?;
    (index < count).then_some((index, count))
}

/// A footer record's chunk of the index, for the last record its trailer and index CRC, and
/// the record's format version.
pub(crate) type RecordParts<'a> = (&'a [u8], Option<(FooterTrailer, u32)>, u32);

/// Every record of one footer carries one format version (the index's layout depends on it).
pub(crate) fn same_version(seen: &mut Option<u32>, v: u32) -> Result<(), FormatError> {
    match *seen {
        Some(first) if first != v => Err(FormatError::Layout {
            reason: format!(
                "footer records of format versions {first} and {v} in one footer; records of two containers are mixed"
            ),
        }),
        _ => {
            *seen = Some(v);
            Ok(())
        }
    }
}

/// Decode one footer record expected to be number `i` of `count`: its chunk of the index and,
/// for the last one, the trailer (with the index CRC it carries).
pub(crate) fn decode_record(
    rec: &[u8],
    i: u32,
    count: u32,
) -> Result<RecordParts<'_>, FormatError> {
    let (body, used, version) = wire::open_versioned(rec, FOOTER_MAGIC, RECORD)?;
    let mut c = Cursor::body(body, RECORD);
    let at = c.pos();
    let index = c.u32("record_index")?;
    if index != i {
        return Err(c.invalid(
            "record_index",
            at,
            format!("is {index}, expected {i}: footer records are missing or out of order"),
        ));
    }
    let at = c.pos();
    let n = c.u32("record_count")?;
    if n != count {
        return Err(c.invalid(
            "record_count",
            at,
            format!("is {n}, but the footer has {count} records"),
        ));
    }
    let chunk = c.take(c.remaining(), "index_chunk")?;
    let rest = rec.get(used..).unwrap_or_default();
    if i + 1 == count {
        if rest.len() != TRAILER_LEN {
            return Err(FormatError::Layout {
                reason: format!(
                    "the last footer record has {} bytes after its body at byte {used}, the trailer is {TRAILER_LEN}",
                    rest.len()
                ),
            });
        }
        let (t, crc) = decode_trailer(rest)?;
        if t.footer_records != count {
            return Err(FormatError::InvalidField {
                structure: TRAILER,
                field: "footer_records",
                offset: used + 16,
                reason: format!(
                    "says {} footer records, {count} were read",
                    t.footer_records
                ),
            });
        }
        Ok((chunk, Some((t, crc)), version))
    } else if !rest.is_empty() {
        Err(FormatError::TrailingBytes {
            structure: RECORD,
            offset: used,
            extra: rest.len(),
        })
    } else {
        Ok((chunk, None, version))
    }
}

fn decode_trailer(last_record: &[u8]) -> Result<(FooterTrailer, u32), FormatError> {
    let start = last_record
        .len()
        .checked_sub(TRAILER_LEN)
        .ok_or(FormatError::Truncated {
            structure: TRAILER,
            field: "trailer",
            offset: 0,
            needed: TRAILER_LEN,
            available: last_record.len(),
        })?;
    let tail = last_record.get(start..).unwrap_or_default();
    let body = wire::open_exact(tail, TRAILER_MAGIC, TRAILER)?;
    let mut c = Cursor::body(body, TRAILER);
    let at = c.pos();
    let footer_records = c.u32("footer_records")?;
    if footer_records == 0 {
        return Err(c.invalid("footer_records", at, "is 0".into()));
    }
    reserved_zero(&mut c)?;
    let data_bytes = c.u64("data_bytes")?;
    let data_records = c.u64("data_records")?;
    let index_crc = c.u32("index_crc32c")?;
    reserved_zero(&mut c)?;
    c.finish()?;
    Ok((
        FooterTrailer {
            footer_records,
            data_bytes,
            data_records,
        },
        index_crc,
    ))
}

fn reserved_zero(c: &mut Cursor<'_>) -> Result<(), FormatError> {
    let at = c.pos();
    match c.u32("reserved")? {
        0 => Ok(()),
        v => Err(c.invalid("reserved", at, format!("is {v:#x}, must be 0"))),
    }
}

/// Check the index CRC, parse the index (laid out as format `version` lays it out) and
/// cross-check it with the trailer.
pub(crate) fn finish_decode(
    index: &[u8],
    trailer: FooterTrailer,
    index_crc: u32,
    version: u32,
) -> Result<Footer, FormatError> {
    let min_entry = if version >= 2 {
        MIN_ENTRY_LEN
    } else {
        MIN_ENTRY_LEN_V1
    };
    let computed = crc32c::crc32c(index);
    if computed != index_crc {
        return Err(FormatError::Crc {
            structure: INDEX,
            offset: 0,
            stored: index_crc,
            computed,
        });
    }
    let mut c = Cursor::new(index, INDEX);
    let container_uuid = c.uuid("container_uuid")?;
    let at = c.pos();
    let data_bytes = c.u64("data_bytes")?;
    if data_bytes != trailer.data_bytes {
        return Err(c.invalid(
            "data_bytes",
            at,
            format!("is {data_bytes}, the trailer says {}", trailer.data_bytes),
        ));
    }
    let at = c.pos();
    let data_records = c.u64("data_records")?;
    if data_records != trailer.data_records {
        return Err(c.invalid(
            "data_records",
            at,
            format!(
                "is {data_records}, the trailer says {}",
                trailer.data_records
            ),
        ));
    }
    let sha256 = c.digest("sha256")?;
    let at = c.pos();
    let n = c.u64("entry_count")?;
    if n > (c.remaining() / min_entry) as u64 {
        return Err(c.invalid(
            "entry_count",
            at,
            format!("{n} entries cannot fit in the {} bytes left", c.remaining()),
        ));
    }
    let mut entries = Vec::with_capacity(n as usize);
    let mut end_prev = 0u64;
    for _ in 0..n {
        let at = c.pos();
        let key = c.string("key", MAX_KEY_LEN)?;
        if key.is_empty() {
            return Err(c.invalid("key", at, "is empty".into()));
        }
        let generation = c.u64("generation")?;
        let at = c.pos();
        let offset = c.u64("offset")?;
        let length = c.u64("length")?;
        let sha = c.digest("sha256")?;
        let meta = if version >= 2 {
            ObjectMeta::decode(&mut c)?
        } else {
            None
        };
        let end = offset.checked_add(length).filter(|e| *e <= data_bytes);
        match end {
            Some(end) if offset >= end_prev => end_prev = end,
            _ => {
                return Err(c.invalid(
                    "offset",
                    at,
                    format!(
                        "object {key:?} at {offset} + {length} bytes overlaps the previous object (ending at {end_prev}) or runs past the data stream ({data_bytes} bytes)"
                    ),
                ));
            }
        }
        entries.push(IndexEntry {
            key,
            generation,
            offset,
            length,
            sha256: sha,
            meta,
        });
    }
    c.finish()?;
    Ok(Footer {
        container_uuid,
        entries,
        data_bytes,
        data_records,
        sha256,
    })
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;
    use crate::format::ObjectKind;
    use proptest::prelude::*;

    pub(crate) fn arb_footer() -> impl Strategy<Value = Footer> {
        (
            any::<u128>(),
            prop::collection::vec(
                (
                    "\\PC{1,40}",
                    any::<u64>(),
                    0u64..5000,
                    0u64..5000,
                    any::<[u8; 32]>(),
                ),
                0..40,
            ),
            0u64..10_000,
            any::<[u8; 32]>(),
        )
            .prop_map(|(u, raw, tail, sha256)| {
                let mut offset = 0;
                let entries: Vec<IndexEntry> = raw
                    .into_iter()
                    .map(|(key, generation, gap, length, sha)| {
                        let e = IndexEntry {
                            key,
                            generation,
                            offset: offset + gap,
                            length,
                            sha256: sha,
                            meta: (generation % 3 != 0).then_some(ObjectMeta {
                                kind: if generation % 2 == 0 {
                                    ObjectKind::File
                                } else {
                                    ObjectKind::Symlink
                                },
                                mode: (generation as u32) & 0o7777,
                                uid: (generation >> 8) as u32,
                                gid: (generation >> 40) as u32,
                                mtime_ns: generation as i64,
                                sparse: generation % 5 == 0,
                            }),
                        };
                        offset += gap + length;
                        e
                    })
                    .collect();
                let data_bytes = offset + tail;
                Footer {
                    container_uuid: Uuid::from_u128(u),
                    entries,
                    data_bytes,
                    data_records: data_bytes.div_ceil(1 << 18),
                    sha256,
                }
            })
    }

    fn big_footer(n: usize) -> Footer {
        Footer {
            container_uuid: Uuid::from_u128(1),
            entries: (0..n)
                .map(|i| IndexEntry {
                    key: format!("{i:0>4000}"),
                    generation: i as u64,
                    offset: i as u64 * 10,
                    length: 10,
                    sha256: [i as u8; 32],
                    meta: None,
                })
                .collect(),
            data_bytes: n as u64 * 10,
            data_records: 1,
            sha256: [3; 32],
        }
    }

    #[test]
    fn a_large_index_spans_several_records_each_within_the_record_size() {
        let f = big_footer(200); // ~ 800 KB of keys
        let recs = f.encode(MIN_RECORD_SIZE);
        assert!(recs.len() >= 4, "{} records", recs.len());
        assert!(recs.iter().all(|r| r.len() <= MIN_RECORD_SIZE));
        let last = recs.last().unwrap();
        let t = Footer::trailer(last).unwrap();
        assert_eq!(t.footer_records as usize, recs.len());
        assert_eq!(t.data_bytes, 2000);
        assert_eq!(Footer::decode(&recs).unwrap(), f);
    }

    #[test]
    fn footer_layout_is_as_documented() {
        let f = Footer {
            container_uuid: Uuid::from_u128(5),
            entries: vec![IndexEntry {
                key: "abc".into(),
                generation: 7,
                offset: 0,
                length: 9,
                sha256: [0xAA; 32],
                meta: Some(ObjectMeta {
                    kind: ObjectKind::Symlink,
                    mode: 0o755,
                    uid: 1000,
                    gid: 100,
                    mtime_ns: 1_700_000_000_123_456_789,
                    sparse: false,
                }),
            }],
            data_bytes: 10,
            data_records: 1,
            sha256: [0xBB; 32],
        };
        let recs = f.encode(1 << 20);
        assert_eq!(recs.len(), 1);
        let r = &recs[0];
        let n = INDEX_FIXED + MIN_ENTRY_LEN + 3; // one entry with a 3-byte key
        assert_eq!(&r[..8], b"REELFOOT");
        assert_eq!(
            u32::from_le_bytes(r[12..16].try_into().unwrap()) as usize,
            8 + n
        );
        assert_eq!(u32::from_le_bytes(r[16..20].try_into().unwrap()), 0); // record_index
        assert_eq!(u32::from_le_bytes(r[20..24].try_into().unwrap()), 1); // record_count
        let index = &r[24..24 + n];
        assert_eq!(&index[..16], Uuid::from_u128(5).as_bytes());
        assert_eq!(u64::from_le_bytes(index[16..24].try_into().unwrap()), 10);
        assert_eq!(&index[32..64], &[0xBB; 32]);
        assert_eq!(u64::from_le_bytes(index[64..72].try_into().unwrap()), 1);
        assert_eq!(u16::from_le_bytes(index[72..74].try_into().unwrap()), 3);
        assert_eq!(&index[74..77], b"abc");
        assert_eq!(u64::from_le_bytes(index[77..85].try_into().unwrap()), 7); // generation
        assert_eq!(&index[101..133], &[0xAA; 32]); // sha256
        assert_eq!(index[133], 2); // kind: symlink
        assert_eq!(index[134], 0); // reserved
        assert_eq!(
            u32::from_le_bytes(index[135..139].try_into().unwrap()),
            0o755
        );
        assert_eq!(
            u32::from_le_bytes(index[139..143].try_into().unwrap()),
            1000
        );
        assert_eq!(u32::from_le_bytes(index[143..147].try_into().unwrap()), 100);
        assert_eq!(
            i64::from_le_bytes(index[147..155].try_into().unwrap()),
            1_700_000_000_123_456_789
        );
        assert_eq!(index.len(), 155);
        assert_eq!(u32::from_le_bytes(r[8..12].try_into().unwrap()), 2); // format_version
        let crc = u32::from_le_bytes(r[24 + n..28 + n].try_into().unwrap());
        assert_eq!(crc, crc32c::crc32c(&r[..24 + n]));
        let t = &r[28 + n..];
        assert_eq!(t.len(), TRAILER_LEN);
        assert_eq!(&t[..8], b"REELTRLR");
        assert_eq!(u32::from_le_bytes(t[16..20].try_into().unwrap()), 1);
        assert_eq!(u64::from_le_bytes(t[24..32].try_into().unwrap()), 10);
        assert_eq!(u64::from_le_bytes(t[32..40].try_into().unwrap()), 1);
        assert_eq!(
            u32::from_le_bytes(t[40..44].try_into().unwrap()),
            crc32c::crc32c(index)
        );
        // Chunk size is R - 80: a footer record never exceeds the record size.
        assert_eq!(
            MIN_RECORD_SIZE - ENVELOPE_OVERHEAD - RECORD_PREFIX - TRAILER_LEN,
            MIN_RECORD_SIZE - 80
        );
    }

    /// A version 1 footer, as reels before format version 2 wrote it: entries without the
    /// metadata block, every record sealed as version 1.
    fn encode_v1(f: &Footer) -> Vec<u8> {
        let mut index = Vec::new();
        index.extend_from_slice(f.container_uuid.as_bytes());
        index.extend_from_slice(&f.data_bytes.to_le_bytes());
        index.extend_from_slice(&f.data_records.to_le_bytes());
        index.extend_from_slice(&f.sha256);
        index.extend_from_slice(&(f.entries.len() as u64).to_le_bytes());
        for e in &f.entries {
            wire::put_string(&mut index, &e.key, MAX_KEY_LEN);
            index.extend_from_slice(&e.generation.to_le_bytes());
            index.extend_from_slice(&e.offset.to_le_bytes());
            index.extend_from_slice(&e.length.to_le_bytes());
            index.extend_from_slice(&e.sha256);
        }
        let mut body = Vec::new();
        body.extend_from_slice(&0u32.to_le_bytes());
        body.extend_from_slice(&1u32.to_le_bytes());
        body.extend_from_slice(&index);
        let mut rec = Vec::new();
        wire::seal_as(1, FOOTER_MAGIC, &body, &mut rec);
        let mut t = Vec::new();
        t.extend_from_slice(&1u32.to_le_bytes());
        t.extend_from_slice(&0u32.to_le_bytes());
        t.extend_from_slice(&f.data_bytes.to_le_bytes());
        t.extend_from_slice(&f.data_records.to_le_bytes());
        t.extend_from_slice(&crc32c::crc32c(&index).to_le_bytes());
        t.extend_from_slice(&0u32.to_le_bytes());
        wire::seal_as(1, TRAILER_MAGIC, &t, &mut rec);
        rec
    }

    #[test]
    fn version_1_footers_still_read_without_metadata() {
        let f = big_footer(3);
        let rec = encode_v1(&f);
        let back = Footer::decode(std::slice::from_ref(&rec)).unwrap();
        assert_eq!(back, f);
        assert!(back.entries.iter().all(|e| e.meta.is_none()));
        // A version 2 record among version 1 records is refused.
        let mut two = f.encode(MIN_RECORD_SIZE);
        two.insert(0, rec.clone());
        assert!(Footer::decode(&two).is_err());
        // A version from the future is refused as written by a newer reel.
        let mut future = Vec::new();
        wire::seal_as(
            super::super::FORMAT_VERSION + 1,
            FOOTER_MAGIC,
            &[0u8; 8],
            &mut future,
        );
        let err = Footer::decode(&[future]).unwrap_err().to_string();
        assert!(err.contains("newer reel"), "{err}");
    }

    #[test]
    fn missing_or_reordered_footer_records_are_refused() {
        let recs = big_footer(200).encode(MIN_RECORD_SIZE);
        let mut missing = recs.clone();
        missing.remove(1);
        assert!(Footer::decode(&missing).is_err());
        let mut swapped = recs.clone();
        swapped.swap(0, 1);
        let err = Footer::decode(&swapped).unwrap_err().to_string();
        assert!(err.contains("footer record 0"), "{err}");
        assert!(Footer::decode(&[]).is_err());
    }

    #[test]
    fn overlapping_entries_are_refused() {
        let mut f = big_footer(3);
        f.entries[1].offset = 5;
        let err = Footer::decode(&f.encode(MIN_RECORD_SIZE)).unwrap_err();
        assert!(err.to_string().contains("overlaps"), "{err}");
    }

    #[test]
    fn peek_recognises_footer_records_only() {
        let recs = big_footer(1).encode(MIN_RECORD_SIZE);
        assert_eq!(peek_record(&recs[0]), Some((0, 1)));
        assert_eq!(peek_record(&[0u8; 100]), None);
        let mut bad = recs[0].clone();
        bad[30] ^= 4;
        assert_eq!(peek_record(&bad), None);
    }

    proptest! {
        #[test]
        fn footer_round_trips(f in arb_footer(), rs in MIN_RECORD_SIZE..=MAX_RECORD_SIZE) {
            let recs = f.encode(rs);
            prop_assert!(recs.iter().all(|r| r.len() <= rs));
            prop_assert_eq!(Footer::decode(&recs).unwrap(), f.clone());
            let t = Footer::trailer(recs.last().unwrap()).unwrap();
            prop_assert_eq!(t, FooterTrailer { footer_records: recs.len() as u32, data_bytes: f.data_bytes, data_records: f.data_records });
        }

        #[test]
        fn damaged_footers_are_refused(f in arb_footer(), cut in any::<prop::sample::Index>(), flip in any::<prop::sample::Index>()) {
            let recs = f.encode(MIN_RECORD_SIZE);
            let last = recs.len() - 1;
            let mut cut_recs = recs.clone();
            let n = cut.index(cut_recs[last].len());
            cut_recs[last].truncate(n);
            prop_assert!(Footer::decode(&cut_recs).is_err());
            prop_assert!(Footer::trailer(&cut_recs[last]).is_err());
            let mut bad = recs.clone();
            let bit = flip.index(bad[last].len() * 8);
            bad[last][bit / 8] ^= 1 << (bit % 8);
            prop_assert!(Footer::decode(&bad).is_err());
        }

        #[test]
        fn arbitrary_bytes_never_panic(bytes in prop::collection::vec(any::<u8>(), 0..400)) {
            let _ = Footer::trailer(&bytes);
            let _ = Footer::decode(std::slice::from_ref(&bytes));
            let mut fake = FOOTER_MAGIC.to_vec();
            fake.extend_from_slice(&bytes);
            let _ = Footer::decode(&[fake]);
            let _ = peek_record(&bytes);
        }
    }
}
