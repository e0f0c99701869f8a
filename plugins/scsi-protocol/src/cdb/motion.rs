//! Tape motion: REWIND (01h), LOAD/UNLOAD (1Bh), SPACE(6) (11h) and SPACE(16) (91h), LOCATE(10)
//! (2Bh) and LOCATE(16) (92h), and READ BLOCK LIMITS (05h).

use super::{ParseError, be16, be24};

/// SPACE code: logical blocks (records).
pub const SPACE_BLOCKS: u8 = 0;
/// SPACE code: filemarks.
pub const SPACE_FILEMARKS: u8 = 1;
/// SPACE code: end of data.
pub const SPACE_EOD: u8 = 3;

/// Largest count SPACE(6) carries (24-bit two's complement).
pub const SPACE6_MAX: i64 = (1 << 23) - 1;
/// Smallest count SPACE(6) carries.
pub const SPACE6_MIN: i64 = -(1 << 23);

/// REWIND; `immed` returns before the tape has moved.
pub fn rewind(immed: bool) -> [u8; 6] {
    [0x01, u8::from(immed), 0, 0, 0, 0]
}

/// LOAD (`true`) or UNLOAD (`false`).
pub fn load_unload(load: bool, immed: bool) -> [u8; 6] {
    [0x1B, u8::from(immed), 0, 0, u8::from(load), 0]
}

/// SPACE(6), or `None` when the count does not fit 24 bits (use [`space16`]).
pub fn space6(code: u8, count: i64) -> Option<[u8; 6]> {
    if !(SPACE6_MIN..=SPACE6_MAX).contains(&count) {
        return None;
    }
    let c = (count as i32).to_be_bytes();
    Some([0x11, code & 0x0F, c[1], c[2], c[3], 0])
}

/// SPACE(16) with a 64-bit signed count.
pub fn space16(code: u8, count: i64) -> [u8; 16] {
    let mut c = [0u8; 16];
    c[0] = 0x91;
    c[1] = code & 0x0F;
    c[4..12].copy_from_slice(&count.to_be_bytes());
    c
}

/// LOCATE(16) to a logical object (block) in the current partition.
pub fn locate16(block: u64, immed: bool) -> [u8; 16] {
    let mut c = [0u8; 16];
    c[0] = 0x92;
    c[1] = u8::from(immed); // DEST_TYPE 0 = logical object, CP 0
    c[4..12].copy_from_slice(&block.to_be_bytes());
    c
}

/// LOCATE(10) to a logical object, or `None` when the block does not fit 32 bits.
pub fn locate10(block: u64, immed: bool) -> Option<[u8; 10]> {
    let b = u32::try_from(block).ok()?.to_be_bytes();
    Some([0x2B, u8::from(immed), 0, b[0], b[1], b[2], b[3], 0, 0, 0])
}

/// READ BLOCK LIMITS.
pub fn read_block_limits() -> [u8; 6] {
    [0x05, 0, 0, 0, 0, 0]
}

/// READ BLOCK LIMITS data.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct BlockLimits {
    /// Granularity: block lengths are multiples of 2^granularity.
    pub granularity: u8,
    /// Largest block length (0: no limit given).
    pub max: u32,
    /// Smallest block length.
    pub min: u16,
}

impl BlockLimits {
    /// Parse the 6-byte response.
    pub fn parse(b: &[u8]) -> Result<BlockLimits, ParseError> {
        if b.len() < 6 {
            return Err(ParseError::new(
                "READ BLOCK LIMITS data",
                format!("{} bytes, need 6", b.len()),
            ));
        }
        Ok(BlockLimits {
            granularity: b[0] & 0x1F,
            max: be24(b, 1),
            min: be16(b, 4),
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn space6_encodes_signed_24_bit_counts() {
        assert_eq!(space6(SPACE_BLOCKS, 5).unwrap(), [0x11, 0, 0, 0, 5, 0]);
        assert_eq!(
            space6(SPACE_FILEMARKS, -1).unwrap(),
            [0x11, 1, 0xFF, 0xFF, 0xFF, 0]
        );
        assert_eq!(space6(SPACE_EOD, 0).unwrap(), [0x11, 3, 0, 0, 0, 0]);
        assert!(space6(SPACE_BLOCKS, SPACE6_MAX).is_some());
        assert!(space6(SPACE_BLOCKS, SPACE6_MAX + 1).is_none());
        assert!(space6(SPACE_BLOCKS, SPACE6_MIN - 1).is_none());
    }

    #[test]
    fn space16_and_locates() {
        let s = space16(SPACE_BLOCKS, -2);
        assert_eq!(s[0], 0x91);
        assert_eq!(&s[4..12], &(-2i64).to_be_bytes());
        let l = locate16(0x1_0000_0002, false);
        assert_eq!(l[0], 0x92);
        assert_eq!(&l[4..12], &[0, 0, 0, 1, 0, 0, 0, 2]);
        assert_eq!(
            locate10(0x01020304, true).unwrap(),
            [0x2B, 1, 0, 1, 2, 3, 4, 0, 0, 0]
        );
        assert!(locate10(1 << 32, false).is_none());
        assert_eq!(load_unload(true, false), [0x1B, 0, 0, 0, 1, 0]);
        assert_eq!(load_unload(false, true), [0x1B, 1, 0, 0, 0, 0]);
        assert_eq!(rewind(false), [1, 0, 0, 0, 0, 0]);
    }

    #[test]
    fn block_limits() {
        let b = BlockLimits::parse(&[9, 0x10, 0, 0, 0, 4]).unwrap();
        assert_eq!(b.max, 1 << 20);
        assert_eq!(b.min, 4);
        assert_eq!(b.granularity, 9);
        assert!(BlockLimits::parse(&[0; 5]).is_err());
    }
}
