//! READ POSITION (34h): long form (service action 06h, LTO-4 and later: logical object and file
//! number) with the short form (service action 00h: block only) as a fallback.

use reel_plugin_abi::{REEL_POS_BOP, REEL_POS_EOP, REEL_POS_UNKNOWN, ReelPosition};

use super::{ParseError, be32, be64};

/// READ POSITION long form.
pub fn read_position_long() -> [u8; 10] {
    [0x34, 0x06, 0, 0, 0, 0, 0, 0, 32, 0]
}

/// READ POSITION short form (block id).
pub fn read_position_short() -> [u8; 10] {
    [0x34, 0x00, 0, 0, 0, 0, 0, 0, 20, 0]
}

/// A position as a drive reports it.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Position {
    /// Logical object (block) number.
    pub block: u64,
    /// Logical file number (filemarks before this position), long form only.
    pub file: Option<u64>,
    /// Partition.
    pub partition: u32,
    /// At beginning of partition.
    pub bop: bool,
    /// Past early warning (end of partition zone).
    pub eop: bool,
    /// The drive does not know the position (block or file invalid).
    pub unknown: bool,
}

impl Position {
    /// The ABI's position. The short form carries no file number: it reads 0 there, and the
    /// caller that knows the file number another way sets it.
    pub fn to_reel(&self) -> ReelPosition {
        let mut flags = 0;
        if self.bop {
            flags |= REEL_POS_BOP;
        }
        if self.eop {
            flags |= REEL_POS_EOP;
        }
        if self.unknown {
            flags |= REEL_POS_UNKNOWN;
        }
        ReelPosition {
            block: self.block,
            file: self.file.unwrap_or(0),
            partition: self.partition,
            flags,
            wrap: 0,
            lpos: 0,
        }
    }
}

/// Parse long-form data (32 bytes).
pub fn parse_long(b: &[u8]) -> Result<Position, ParseError> {
    if b.len() < 24 {
        return Err(ParseError::new(
            "READ POSITION long form",
            format!("{} bytes, need 32", b.len()),
        ));
    }
    let flags = b[0];
    Ok(Position {
        block: be64(b, 8),
        file: Some(be64(b, 16)),
        partition: be32(b, 4),
        bop: flags & 0x80 != 0,
        eop: flags & 0x40 != 0 || flags & 0x01 != 0,
        // MPU (mark position unknown) or LONU (logical object number unknown)
        unknown: flags & 0x0C != 0,
    })
}

/// Parse short-form data (20 bytes).
pub fn parse_short(b: &[u8]) -> Result<Position, ParseError> {
    if b.len() < 8 {
        return Err(ParseError::new(
            "READ POSITION short form",
            format!("{} bytes, need 20", b.len()),
        ));
    }
    let flags = b[0];
    Ok(Position {
        block: u64::from(be32(b, 4)),
        file: None,
        partition: u32::from(b[1]),
        bop: flags & 0x80 != 0,
        eop: flags & 0x40 != 0 || flags & 0x01 != 0,
        // BPU: block position unknown
        unknown: flags & 0x04 != 0,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn long_form() {
        let mut b = [0u8; 32];
        b[0] = 0x80;
        b[8..16].copy_from_slice(&7u64.to_be_bytes());
        b[16..24].copy_from_slice(&2u64.to_be_bytes());
        let p = parse_long(&b).unwrap();
        assert_eq!(
            (p.block, p.file, p.bop, p.eop, p.unknown),
            (7, Some(2), true, false, false)
        );
        b[0] = 0x44; // EOP + LONU
        let p = parse_long(&b).unwrap();
        assert!(p.eop && p.unknown);
        assert!(parse_long(&b[..10]).is_err());
        assert_eq!(read_position_long()[1], 6);
    }

    #[test]
    fn short_form_and_stock_tgt_stub() {
        let mut b = [0u8; 20];
        b[4..8].copy_from_slice(&2u32.to_be_bytes());
        let p = parse_short(&b).unwrap();
        assert_eq!((p.block, p.file, p.unknown), (2, None, false));
        // stock tgt: all zero except byte 0 = 0x14 (BYCU + BPU): position unknown
        let mut stub = [0u8; 20];
        stub[0] = 0x14;
        assert!(parse_short(&stub).unwrap().unknown);
    }
}
