//! READ ATTRIBUTE (8Ch) and WRITE ATTRIBUTE (8Dh): medium auxiliary memory (MAM).
//!
//! Host-type attributes (0800h..) have a fixed format and length in SPC-4; a value written
//! with another length is refused by real drives, so [`encode`] pads ASCII and text values
//! to their standard length with spaces and refuses values that are too long.

use super::{ParseError, be16, be32};

/// Attribute format: binary.
pub const FORMAT_BINARY: u8 = 0;
/// Attribute format: ASCII (printable, space padded).
pub const FORMAT_ASCII: u8 = 1;
/// Attribute format: text (UTF-8 or localised, NUL/space padded).
pub const FORMAT_TEXT: u8 = 2;

/// READ ATTRIBUTE, service action ATTRIBUTE VALUES, starting at `first`.
pub fn read_attribute(first: u16, alloc: u32) -> [u8; 16] {
    let mut c = [0u8; 16];
    c[0] = 0x8C;
    c[8..10].copy_from_slice(&first.to_be_bytes());
    c[10..14].copy_from_slice(&alloc.to_be_bytes());
    c
}

/// WRITE ATTRIBUTE with a parameter list of `len` bytes (write-through cache set).
pub fn write_attribute(len: u32) -> [u8; 16] {
    let mut c = [0u8; 16];
    c[0] = 0x8D;
    c[1] = 0x01;
    c[10..14].copy_from_slice(&len.to_be_bytes());
    c
}

/// One attribute as read.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Attribute {
    /// Identifier.
    pub id: u16,
    /// Read-only bit.
    pub read_only: bool,
    /// Format (`FORMAT_*`).
    pub format: u8,
    /// Value bytes.
    pub value: Vec<u8>,
}

/// Parse an ATTRIBUTE VALUES response.
pub fn parse(b: &[u8]) -> Result<Vec<Attribute>, ParseError> {
    if b.len() < 4 {
        return Err(ParseError::new(
            "READ ATTRIBUTE data",
            "shorter than its header",
        ));
    }
    let end = (4usize.saturating_add(be32(b, 0) as usize)).min(b.len());
    let mut out = Vec::new();
    let mut at = 4;
    while at + 5 <= end {
        let len = usize::from(be16(b, at + 3));
        let v_end = at + 5 + len;
        if v_end > end {
            // the last attribute is cut by the allocation length: drop it
            break;
        }
        out.push(Attribute {
            id: be16(b, at),
            read_only: b[at + 2] & 0x80 != 0,
            format: b[at + 2] & 0x03,
            value: b[at + 5..v_end].to_vec(),
        });
        at = v_end;
    }
    Ok(out)
}

/// Standard format and length of host attributes reel may write.
pub fn standard_format(id: u16) -> Option<(u8, usize)> {
    Some(match id {
        0x0800 => (FORMAT_ASCII, 8),
        0x0801 => (FORMAT_ASCII, 32),
        0x0802 => (FORMAT_ASCII, 8),
        0x0803 => (FORMAT_TEXT, 160),
        0x0804 => (FORMAT_ASCII, 12),
        0x0806 => (FORMAT_ASCII, 32),
        0x0807 => (FORMAT_TEXT, 80),
        0x0808 => (FORMAT_TEXT, 160),
        0x080B => (FORMAT_ASCII, 16),
        _ => return None,
    })
}

/// A value refused by [`encode`].
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum AttributeValueError {
    /// Longer than the attribute's standard length.
    #[error("attribute {id:04X}h holds at most {max} bytes, got {len}; shorten the value")]
    TooLong {
        /// Attribute.
        id: u16,
        /// Standard length.
        max: usize,
        /// Given length.
        len: usize,
    },
    /// An ASCII attribute with a non-printable byte.
    #[error("attribute {id:04X}h is ASCII; the value has a byte outside 20h..7Eh")]
    NotAscii {
        /// Attribute.
        id: u16,
    },
    /// Larger than a parameter list can carry.
    #[error("attribute {id:04X}h value of {len} bytes is larger than 65535")]
    Oversize {
        /// Attribute.
        id: u16,
        /// Given length.
        len: usize,
    },
}

/// WRITE ATTRIBUTE parameter list for one attribute.
pub fn encode(id: u16, value: &[u8]) -> Result<Vec<u8>, AttributeValueError> {
    let (format, data) = match standard_format(id) {
        Some((format, max)) => {
            if value.len() > max {
                return Err(AttributeValueError::TooLong {
                    id,
                    max,
                    len: value.len(),
                });
            }
            if format == FORMAT_ASCII && value.iter().any(|b| !(0x20..=0x7E).contains(b)) {
                return Err(AttributeValueError::NotAscii { id });
            }
            let mut v = value.to_vec();
            v.resize(max, if format == FORMAT_ASCII { b' ' } else { 0 });
            (format, v)
        }
        None => (FORMAT_BINARY, value.to_vec()),
    };
    let len = u16::try_from(data.len()).map_err(|_| AttributeValueError::Oversize {
        id,
        len: data.len(),
    })?;
    let mut out = Vec::with_capacity(9 + data.len());
    out.extend_from_slice(&((5 + data.len()) as u32).to_be_bytes());
    out.extend_from_slice(&id.to_be_bytes());
    out.push(format);
    out.extend_from_slice(&len.to_be_bytes());
    out.extend_from_slice(&data);
    Ok(out)
}

/// The value as an application reads it back: ASCII/text trimmed of padding.
pub fn value_of(a: &Attribute) -> Vec<u8> {
    if a.format == FORMAT_ASCII || a.format == FORMAT_TEXT {
        let end = a
            .value
            .iter()
            .rposition(|b| *b != b' ' && *b != 0)
            .map_or(0, |i| i + 1);
        a.value[..end].to_vec()
    } else {
        a.value.clone()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn encode_pads_ascii_and_parse_round_trips() {
        let p = encode(0x0806, b"GFS001L9").unwrap();
        assert_eq!(be32(&p, 0) as usize, p.len() - 4);
        assert_eq!(p.len(), 4 + 5 + 32);
        let a = parse(&p).unwrap();
        assert_eq!(a.len(), 1);
        assert_eq!(a[0].id, 0x0806);
        assert_eq!(a[0].format, FORMAT_ASCII);
        assert_eq!(value_of(&a[0]), b"GFS001L9");
        assert_eq!(write_attribute(p.len() as u32)[13], p.len() as u8);
    }

    #[test]
    fn binary_attributes_keep_their_length() {
        let uuid = [7u8; 16];
        let p = encode(0x1001, &uuid).unwrap();
        let a = parse(&p).unwrap();
        assert_eq!(a[0].format, FORMAT_BINARY);
        assert_eq!(value_of(&a[0]), uuid.to_vec());
    }

    #[test]
    fn refuses_bad_values() {
        assert!(matches!(
            encode(0x0800, b"TOO LONG VENDOR"),
            Err(AttributeValueError::TooLong { max: 8, .. })
        ));
        assert!(matches!(
            encode(0x0801, b"bad\x01"),
            Err(AttributeValueError::NotAscii { .. })
        ));
        assert!(encode(0x1000, &vec![0; 70000]).is_err());
    }

    #[test]
    fn truncated_list_drops_the_cut_attribute() {
        let mut b = vec![0, 0, 0, 0];
        b.extend_from_slice(&[0x00, 0x03, 0x80, 0x00, 0x02, 0x00, 0x05]); // load count 5
        b.extend_from_slice(&[0x04, 0x01, 0x01, 0x00, 0x20, b'A']); // cut
        let l = ((b.len() - 4 + 31) as u32).to_be_bytes();
        b[..4].copy_from_slice(&l);
        let a = parse(&b).unwrap();
        assert_eq!(a.len(), 1);
        assert!(a[0].read_only);
        assert_eq!(read_attribute(0x0003, 512)[8..10], [0, 3]);
    }
}
