//! Byte-level helpers shared by every structure: the envelope (magic, version, body length,
//! body, CRC32C), little-endian fields and length-prefixed strings. Every read is bounds
//! checked and returns a [`FormatError`] naming the structure, field and byte offset.

use uuid::Uuid;

use super::error::FormatError;
use super::{FORMAT_VERSION, OLDEST_READABLE_VERSION};

/// Length of the magic at the start of every structure.
pub(crate) const MAGIC_LEN: usize = 8;
/// Magic (8) + format version (4) + body length (4).
pub(crate) const ENVELOPE_HEAD: usize = 16;
/// Envelope overhead: head plus the trailing CRC32C.
pub(crate) const ENVELOPE_OVERHEAD: usize = ENVELOPE_HEAD + 4;

/// Append `magic`, the format version, the body length, the body and a CRC32C over all of it.
#[cfg(test)]
pub(crate) fn seal(magic: &[u8; MAGIC_LEN], body: &[u8], out: &mut Vec<u8>) {
    seal_as(FORMAT_VERSION, magic, body, out)
}

/// Seal a structure as format `version` (each structure is written with the version of its
/// layout: [`super::LABEL_VERSION`] and the others).
pub(crate) fn seal_as(version: u32, magic: &[u8; MAGIC_LEN], body: &[u8], out: &mut Vec<u8>) {
    let start = out.len();
    out.extend_from_slice(magic);
    out.extend_from_slice(&version.to_le_bytes());
    // Bodies are bounded by the record size (at most 8 MiB), far below u32::MAX.
    out.extend_from_slice(&(body.len() as u32).to_le_bytes());
    out.extend_from_slice(body);
    let crc = crc32c::crc32c(&out[start..]);
    out.extend_from_slice(&crc.to_le_bytes());
}

/// Open an envelope at the start of `rec`. Returns the body and the number of bytes the
/// envelope occupies (so a caller can look at what follows). Checks, in this order: magic,
/// length, CRC32C, then version (the envelope is the same in every version, so a damaged
/// record is reported as damaged, not as "newer").
pub(crate) fn open<'a>(
    rec: &'a [u8],
    magic: &'static [u8; MAGIC_LEN],
    structure: &'static str,
) -> Result<(&'a [u8], usize), FormatError> {
    open_versioned(rec, magic, structure).map(|(body, used, _)| (body, used))
}

/// [`open`], also returning the structure's format version (one this reel reads:
/// [`OLDEST_READABLE_VERSION`] to [`FORMAT_VERSION`]), for structures whose body differs
/// between versions.
pub(crate) fn open_versioned<'a>(
    rec: &'a [u8],
    magic: &'static [u8; MAGIC_LEN],
    structure: &'static str,
) -> Result<(&'a [u8], usize, u32), FormatError> {
    let head = rec.get(..MAGIC_LEN).ok_or(FormatError::Truncated {
        structure,
        field: "magic",
        offset: 0,
        needed: MAGIC_LEN,
        available: rec.len(),
    })?;
    if head != magic {
        return Err(FormatError::BadMagic {
            structure,
            found: head.to_vec(),
            expected: std::str::from_utf8(magic).unwrap_or("?"),
        });
    }
    let mut c = Cursor::new(rec, structure);
    c.skip(MAGIC_LEN, "magic")?;
    let version = c.u32("format_version")?;
    let body_len = c.u32("body_length")? as usize;
    let body = c.take(body_len, "body")?;
    let crc_offset = c.pos();
    let stored = c.u32("crc32c")?;
    let covered = rec.get(..crc_offset).unwrap_or_default();
    let computed = crc32c::crc32c(covered);
    if stored != computed {
        return Err(FormatError::Crc {
            structure,
            offset: crc_offset,
            stored,
            computed,
        });
    }
    if !(OLDEST_READABLE_VERSION..=FORMAT_VERSION).contains(&version) {
        return Err(FormatError::UnsupportedVersion {
            structure,
            found: version,
            supported: FORMAT_VERSION,
        });
    }
    Ok((body, c.pos(), version))
}

/// Open an envelope that must fill `rec` exactly.
pub(crate) fn open_exact<'a>(
    rec: &'a [u8],
    magic: &'static [u8; MAGIC_LEN],
    structure: &'static str,
) -> Result<&'a [u8], FormatError> {
    let (body, used) = open(rec, magic, structure)?;
    if used != rec.len() {
        return Err(FormatError::TrailingBytes {
            structure,
            offset: used,
            extra: rec.len() - used,
        });
    }
    Ok(body)
}

/// A bounds-checked little-endian reader over a byte slice. `base` is added to reported
/// offsets so errors point into the record, not into the body.
pub(crate) struct Cursor<'a> {
    buf: &'a [u8],
    pos: usize,
    base: usize,
    structure: &'static str,
}

impl<'a> Cursor<'a> {
    pub(crate) fn new(buf: &'a [u8], structure: &'static str) -> Self {
        Cursor {
            buf,
            pos: 0,
            base: 0,
            structure,
        }
    }

    /// A cursor over an envelope body: offsets are reported relative to the record.
    pub(crate) fn body(buf: &'a [u8], structure: &'static str) -> Self {
        Cursor {
            buf,
            pos: 0,
            base: ENVELOPE_HEAD,
            structure,
        }
    }

    /// Offset of the next byte, relative to the record.
    pub(crate) fn pos(&self) -> usize {
        self.base + self.pos
    }

    pub(crate) fn remaining(&self) -> usize {
        self.buf.len().saturating_sub(self.pos)
    }

    pub(crate) fn take(&mut self, n: usize, field: &'static str) -> Result<&'a [u8], FormatError> {
        let end = self.pos.checked_add(n);
        match end.and_then(|e| self.buf.get(self.pos..e)) {
            Some(s) => {
                self.pos += n;
                Ok(s)
            }
            None => Err(FormatError::Truncated {
                structure: self.structure,
                field,
                offset: self.pos(),
                needed: n,
                available: self.remaining(),
            }),
        }
    }

    pub(crate) fn skip(&mut self, n: usize, field: &'static str) -> Result<(), FormatError> {
        self.take(n, field).map(|_| ())
    }

    fn array<const N: usize>(&mut self, field: &'static str) -> Result<[u8; N], FormatError> {
        let s = self.take(N, field)?;
        let mut a = [0u8; N];
        a.copy_from_slice(s);
        Ok(a)
    }

    pub(crate) fn u16(&mut self, field: &'static str) -> Result<u16, FormatError> {
        Ok(u16::from_le_bytes(self.array(field)?))
    }

    pub(crate) fn u32(&mut self, field: &'static str) -> Result<u32, FormatError> {
        Ok(u32::from_le_bytes(self.array(field)?))
    }

    pub(crate) fn u64(&mut self, field: &'static str) -> Result<u64, FormatError> {
        Ok(u64::from_le_bytes(self.array(field)?))
    }

    pub(crate) fn uuid(&mut self, field: &'static str) -> Result<Uuid, FormatError> {
        Ok(Uuid::from_bytes(self.array(field)?))
    }

    pub(crate) fn digest(&mut self, field: &'static str) -> Result<[u8; 32], FormatError> {
        self.array(field)
    }

    /// A string: u16 length then UTF-8 bytes, at most `max` bytes.
    pub(crate) fn string(
        &mut self,
        field: &'static str,
        max: usize,
    ) -> Result<String, FormatError> {
        let at = self.pos();
        let len = self.u16(field)? as usize;
        if len > max {
            return Err(self.invalid(
                field,
                at,
                format!("length {len} exceeds the limit of {max} bytes"),
            ));
        }
        let bytes = self.take(len, field)?;
        match std::str::from_utf8(bytes) {
            Ok(s) => Ok(s.to_owned()),
            Err(e) => Err(self.invalid(
                field,
                at + 2 + e.valid_up_to(),
                "not valid UTF-8".to_owned(),
            )),
        }
    }

    pub(crate) fn invalid(
        &self,
        field: &'static str,
        offset: usize,
        reason: String,
    ) -> FormatError {
        FormatError::InvalidField {
            structure: self.structure,
            field,
            offset,
            reason,
        }
    }

    /// Fail if bytes are left over.
    pub(crate) fn finish(&self) -> Result<(), FormatError> {
        if self.remaining() > 0 {
            return Err(FormatError::TrailingBytes {
                structure: self.structure,
                offset: self.pos(),
                extra: self.remaining(),
            });
        }
        Ok(())
    }
}

/// Append a u16-length-prefixed string, cut at a char boundary to at most `max` bytes
/// (callers validate first; the cut only keeps `encode` total and never emits a string the
/// decoder would refuse).
pub(crate) fn put_string(out: &mut Vec<u8>, s: &str, max: usize) {
    let mut end = s.len().min(max).min(u16::MAX as usize);
    while !s.is_char_boundary(end) {
        end -= 1;
    }
    out.extend_from_slice(&(end as u16).to_le_bytes());
    out.extend_from_slice(&s.as_bytes()[..end]);
}

/// Check a string against a byte limit (for `validate` methods).
pub(crate) fn check_len(
    structure: &'static str,
    field: &'static str,
    s: &str,
    min: usize,
    max: usize,
) -> Result<(), FormatError> {
    if s.len() < min || s.len() > max {
        return Err(FormatError::InvalidField {
            structure,
            field,
            offset: 0,
            reason: format!("is {} bytes, must be {min} to {max} bytes", s.len()),
        });
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn envelope_round_trips_and_rejects_every_single_bit_flip() {
        let mut rec = Vec::new();
        seal(b"TESTMAGC", b"hello body", &mut rec);
        assert_eq!(rec.len(), ENVELOPE_OVERHEAD + 10);
        assert_eq!(
            open_exact(&rec, b"TESTMAGC", "test").unwrap(),
            b"hello body"
        );
        for bit in 0..rec.len() * 8 {
            let mut bad = rec.clone();
            bad[bit / 8] ^= 1 << (bit % 8);
            assert!(
                open_exact(&bad, b"TESTMAGC", "test").is_err(),
                "bit {bit} not detected"
            );
        }
    }

    #[test]
    fn truncated_envelope_names_the_field_and_offset() {
        let mut rec = Vec::new();
        seal(b"TESTMAGC", b"0123456789", &mut rec);
        let err = open_exact(&rec[..20], b"TESTMAGC", "test").unwrap_err();
        match err {
            FormatError::Truncated { field, offset, .. } => {
                assert_eq!(field, "body");
                assert_eq!(offset, ENVELOPE_HEAD);
            }
            other => panic!("unexpected {other}"),
        }
    }

    #[test]
    fn string_limits_and_utf8_are_enforced() {
        let mut buf = Vec::new();
        put_string(&mut buf, "héllo", 100);
        let mut c = Cursor::new(&buf, "t");
        assert_eq!(c.string("s", 100).unwrap(), "héllo");
        let mut c = Cursor::new(&buf, "t");
        assert!(matches!(
            c.string("s", 3),
            Err(FormatError::InvalidField { .. })
        ));
        let bad = [2u8, 0, 0xff, 0xfe];
        let mut c = Cursor::new(&bad, "t");
        assert!(matches!(
            c.string("s", 10),
            Err(FormatError::InvalidField { offset: 2, .. })
        ));
        // put_string cuts on a char boundary.
        let mut cut = Vec::new();
        put_string(&mut cut, "héllo", 2);
        assert_eq!(Cursor::new(&cut, "t").string("s", 2).unwrap(), "h");
    }
}
