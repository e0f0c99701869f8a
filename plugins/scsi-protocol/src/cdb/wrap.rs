//! READ END OF WRAP POSITION (MAINTENANCE IN A3h, service action 1Fh; IBM LTO and Oracle T10K
//! drives): the logical object at the end of each wrap written so far, the input of the seek
//! model's serpentine geometry.
//!
//! Layout used (from IBM's LTO SCSI reference; verified only against the fake target): 4-byte
//! header (2-byte data length, 2 reserved), then 12-byte entries: wrap number (2), partition
//! (2), reserved (2), logical object identifier (6).

use super::{ParseError, be_n, be16};

/// READ END OF WRAP POSITION of every wrap (RA = 1: report all).
pub fn read_end_of_wrap_position(alloc: u32) -> [u8; 12] {
    let a = alloc.to_be_bytes();
    [0xA3, 0x1F, 0x01, 0, 0, 0, a[0], a[1], a[2], a[3], 0, 0]
}

/// One wrap's end.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct WrapEnd {
    /// Wrap number.
    pub wrap: u16,
    /// Partition.
    pub partition: u16,
    /// Last logical object of the wrap.
    pub block: u64,
}

/// Parse the report.
pub fn parse(b: &[u8]) -> Result<Vec<WrapEnd>, ParseError> {
    if b.len() < 4 {
        return Err(ParseError::new(
            "end of wrap positions",
            "shorter than its header",
        ));
    }
    let end = (2 + usize::from(be16(b, 0))).min(b.len());
    let mut out = Vec::new();
    let mut at = 4;
    while at + 12 <= end {
        out.push(WrapEnd {
            wrap: be16(b, at),
            partition: be16(b, at + 2),
            block: be_n(&b[at + 6..at + 12]),
        });
        at += 12;
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_entries() {
        let mut b = vec![0, 0, 0, 0];
        for (w, blk) in [(0u16, 1000u64), (1, 2100)] {
            b.extend_from_slice(&w.to_be_bytes());
            b.extend_from_slice(&[0, 0, 0, 0]);
            b.extend_from_slice(&blk.to_be_bytes()[2..]);
        }
        let l = ((b.len() - 2) as u16).to_be_bytes();
        b[0] = l[0];
        b[1] = l[1];
        let w = parse(&b).unwrap();
        assert_eq!(w.len(), 2);
        assert_eq!(
            w[1],
            WrapEnd {
                wrap: 1,
                partition: 0,
                block: 2100
            }
        );
        assert!(parse(&[0]).is_err());
        assert_eq!(read_end_of_wrap_position(64)[0..3], [0xA3, 0x1F, 1]);
    }
}
