//! CDB builders and response parsers, one module per SCSI feature. Builders return the CDB
//! bytes; parsers take the data-in bytes and never panic on short or malformed input (they
//! return a [`ParseError`] naming what was wrong).

pub mod attribute;
pub mod density;
pub mod element;
pub mod inquiry;
pub mod log;
pub mod mode;
pub mod motion;
pub mod position;
pub mod rao;
pub mod rw;
pub mod unit;
pub mod wrap;

/// A response that does not have the shape the standard gives it.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[error("malformed {what}: {detail}")]
pub struct ParseError {
    /// Which response.
    pub what: &'static str,
    /// What is wrong with it.
    pub detail: String,
}

impl ParseError {
    /// A new parse error.
    pub fn new(what: &'static str, detail: impl Into<String>) -> ParseError {
        ParseError {
            what,
            detail: detail.into(),
        }
    }
}

/// Big-endian 16-bit value at `at` (0 past the end).
pub fn be16(b: &[u8], at: usize) -> u16 {
    match b.get(at..at + 2) {
        Some(s) => u16::from_be_bytes([s[0], s[1]]),
        None => 0,
    }
}

/// Big-endian 24-bit value at `at` (0 past the end).
pub fn be24(b: &[u8], at: usize) -> u32 {
    match b.get(at..at + 3) {
        Some(s) => u32::from_be_bytes([0, s[0], s[1], s[2]]),
        None => 0,
    }
}

/// Big-endian 32-bit value at `at` (0 past the end).
pub fn be32(b: &[u8], at: usize) -> u32 {
    match b.get(at..at + 4) {
        Some(s) => u32::from_be_bytes([s[0], s[1], s[2], s[3]]),
        None => 0,
    }
}

/// Big-endian 64-bit value at `at` (0 past the end).
pub fn be64(b: &[u8], at: usize) -> u64 {
    match b.get(at..at + 8) {
        Some(s) => {
            let mut v = [0u8; 8];
            v.copy_from_slice(s);
            u64::from_be_bytes(v)
        }
        None => 0,
    }
}

/// Big-endian unsigned value of any width up to 8 bytes.
pub fn be_n(b: &[u8]) -> u64 {
    b.iter()
        .take(8)
        .fold(0u64, |acc, x| (acc << 8) | u64::from(*x))
}

/// ASCII field trimmed of padding (spaces and NULs).
pub fn ascii(b: &[u8]) -> String {
    String::from_utf8_lossy(b)
        .trim_matches(|c: char| c == ' ' || c == '\0')
        .to_string()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn readers_are_total() {
        let b = [1u8, 2, 3];
        assert_eq!(be16(&b, 0), 0x0102);
        assert_eq!(be16(&b, 2), 0);
        assert_eq!(be24(&b, 0), 0x010203);
        assert_eq!(be32(&b, 0), 0);
        assert_eq!(be64(&b, 0), 0);
        assert_eq!(be_n(&b), 0x010203);
        assert_eq!(ascii(b"  IBM \0\0"), "IBM");
    }
}
