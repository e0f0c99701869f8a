//! Variable-length READ(6) (08h), WRITE(6) (0Ah) and WRITE FILEMARKS(6) (10h).

/// Largest transfer length READ(6)/WRITE(6) carry (24 bits).
pub const MAX_TRANSFER: usize = 0xFF_FFFF;

/// READ(6), variable length. `sili` suppresses the ILI report for records shorter than
/// `len` (a longer record is still reported).
pub fn read6(len: usize, sili: bool) -> Option<[u8; 6]> {
    if len > MAX_TRANSFER {
        return None;
    }
    let l = (len as u32).to_be_bytes();
    Some([0x08, if sili { 0x02 } else { 0 }, l[1], l[2], l[3], 0])
}

/// WRITE(6), variable length.
pub fn write6(len: usize) -> Option<[u8; 6]> {
    if len > MAX_TRANSFER {
        return None;
    }
    let l = (len as u32).to_be_bytes();
    Some([0x0A, 0, l[1], l[2], l[3], 0])
}

/// WRITE FILEMARKS(6). Count 0 flushes the buffer; `immed` returns before the marks are on
/// the medium.
pub fn write_filemarks6(count: u32, immed: bool) -> Option<[u8; 6]> {
    if count > 0xFF_FFFF {
        return None;
    }
    let c = count.to_be_bytes();
    Some([0x10, u8::from(immed), c[1], c[2], c[3], 0])
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn cdbs() {
        assert_eq!(read6(1 << 20, true).unwrap(), [8, 2, 0x10, 0, 0, 0]);
        assert_eq!(read6(4096, false).unwrap(), [8, 0, 0, 0x10, 0, 0]);
        assert_eq!(write6(1000).unwrap(), [0x0A, 0, 0, 3, 0xE8, 0]);
        assert!(write6(MAX_TRANSFER + 1).is_none());
        assert!(read6(MAX_TRANSFER + 1, true).is_none());
        assert_eq!(write_filemarks6(1, true).unwrap(), [0x10, 1, 0, 0, 1, 0]);
        assert_eq!(write_filemarks6(0, false).unwrap(), [0x10, 0, 0, 0, 0, 0]);
        assert!(write_filemarks6(1 << 24, false).is_none());
    }
}
