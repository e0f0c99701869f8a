//! REPORT DENSITY SUPPORT (44h): which densities the drive (or the mounted medium) supports,
//! used to tell the LTO generation.

use super::{ParseError, ascii, be16, be32};

/// REPORT DENSITY SUPPORT; `media` restricts the report to the mounted medium.
pub fn report_density_support(media: bool, alloc: u16) -> [u8; 10] {
    let a = alloc.to_be_bytes();
    [0x44, u8::from(media), 0, 0, 0, 0, 0, a[0], a[1], 0]
}

/// One density support descriptor.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Density {
    /// Primary density code.
    pub primary: u8,
    /// Writable in this density.
    pub writable: bool,
    /// The default density.
    pub default: bool,
    /// Capacity in MB (10^6 bytes).
    pub capacity_mb: u32,
    /// Density name (e.g. `U-832` for LTO-8).
    pub name: String,
}

/// Parse the report.
pub fn parse(b: &[u8]) -> Result<Vec<Density>, ParseError> {
    if b.len() < 4 {
        return Err(ParseError::new(
            "REPORT DENSITY SUPPORT data",
            "shorter than its header",
        ));
    }
    let end = (2 + usize::from(be16(b, 0))).min(b.len());
    let mut out = Vec::new();
    let mut at = 4;
    while at + 52 <= end {
        let d = &b[at..at + 52];
        out.push(Density {
            primary: d[0],
            writable: d[2] & 0x80 != 0,
            default: d[2] & 0x20 != 0,
            capacity_mb: be32(d, 12),
            name: ascii(&d[24..32]),
        });
        at += 52;
    }
    Ok(out)
}

/// LTO generation of a density code (LTO-5 58h .. LTO-9 60h; LTO-7 type M 5Dh as LTO-8).
pub fn lto_generation(code: u8) -> Option<u8> {
    Some(match code {
        0x40 => 1,
        0x42 => 2,
        0x44 => 3,
        0x46 => 4,
        0x58 => 5,
        0x5A => 6,
        0x5C => 7,
        0x5D | 0x5E => 8,
        0x60 => 9,
        0x62 => 10,
        _ => return None,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_descriptors() {
        let mut b = vec![0, 0, 0, 0];
        for (code, name, cap) in [
            (0x5E_u8, "U-832", 12_000_000u32),
            (0x60, "U-932", 18_000_000),
        ] {
            let mut d = vec![0u8; 52];
            d[0] = code;
            d[2] = 0xA0;
            d[12..16].copy_from_slice(&cap.to_be_bytes());
            d[24..32].copy_from_slice(format!("{name:<8}").as_bytes());
            b.extend_from_slice(&d);
        }
        let l = ((b.len() - 2) as u16).to_be_bytes();
        b[0] = l[0];
        b[1] = l[1];
        let d = parse(&b).unwrap();
        assert_eq!(d.len(), 2);
        assert_eq!(d[1].name, "U-932");
        assert!(d[1].writable && d[1].default);
        assert_eq!(d[1].capacity_mb, 18_000_000);
        assert_eq!(lto_generation(d[1].primary), Some(9));
        assert_eq!(lto_generation(0x00), None);
        assert!(parse(&[0, 0]).is_err());
    }
}
