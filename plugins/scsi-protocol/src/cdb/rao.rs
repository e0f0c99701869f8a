//! Recommended access order: GENERATE RECOMMENDED ACCESS ORDER (MAINTENANCE OUT A4h, service
//! action 1Dh) and RECEIVE RECOMMENDED ACCESS ORDER (MAINTENANCE IN A3h, service action 1Dh).
//!
//! Each extent is sent as a user data segment (UDS) descriptor whose 10-byte name is the
//! extent's index in decimal, so the order received back maps to the caller's indices.
//! Verified only against the fake target (tgt has no RAO); see docs/SCSI.md.

use super::{ParseError, be16, be32, be64};

/// Size of one UDS descriptor.
pub const UDS_LEN: usize = 32;

/// GENERATE RAO with a parameter list of `len` bytes (process 0, UDS type 0: no geometry).
pub fn generate(len: u32) -> [u8; 12] {
    let l = len.to_be_bytes();
    [0xA4, 0x1D, 0, 0, 0, 0, l[0], l[1], l[2], l[3], 0, 0]
}

/// RECEIVE RAO with `alloc` bytes.
pub fn receive(alloc: u32) -> [u8; 12] {
    let a = alloc.to_be_bytes();
    [0xA3, 0x1D, 0, 0, 0, 0, a[0], a[1], a[2], a[3], 0, 0]
}

/// GENERATE RAO parameter list for extents `[first, last]` (inclusive) in partition 0.
pub fn encode(extents: &[(u64, u64)]) -> Vec<u8> {
    let mut out = vec![0u8; 8];
    let add = (extents.len() * UDS_LEN) as u32;
    out[4..8].copy_from_slice(&add.to_be_bytes());
    for (i, (first, last)) in extents.iter().enumerate() {
        let mut d = [0u8; UDS_LEN];
        d[0..2].copy_from_slice(&((UDS_LEN - 2) as u16).to_be_bytes());
        let name = i.to_string();
        d[5..5 + name.len().min(10)].copy_from_slice(&name.as_bytes()[..name.len().min(10)]);
        d[15] = 0;
        d[16..24].copy_from_slice(&first.to_be_bytes());
        d[24..32].copy_from_slice(&last.to_be_bytes());
        out.extend_from_slice(&d);
    }
    out
}

/// Parse RECEIVE RAO data into the order of extent indices (`count` extents were sent).
pub fn parse(b: &[u8], count: usize) -> Result<Vec<u32>, ParseError> {
    if b.len() < 8 {
        return Err(ParseError::new("RAO list", "shorter than its header"));
    }
    let end = (8 + be32(b, 4) as usize).min(b.len());
    let mut order = Vec::new();
    let mut seen = vec![false; count];
    let mut at = 8;
    while at + UDS_LEN <= end {
        let len = usize::from(be16(b, at)) + 2;
        let name = String::from_utf8_lossy(&b[at + 5..at + 15]);
        let name = name.trim_end_matches(['\0', ' ']);
        let idx: usize = name
            .parse()
            .map_err(|_| ParseError::new("RAO list", format!("unknown segment name `{name}`")))?;
        if idx >= count || seen[idx] {
            return Err(ParseError::new(
                "RAO list",
                format!("segment {idx} out of range or repeated"),
            ));
        }
        let _first = be64(b, at + 16);
        seen[idx] = true;
        order.push(idx as u32);
        at += len.max(UDS_LEN);
    }
    if order.len() != count {
        return Err(ParseError::new(
            "RAO list",
            format!("{} segments returned for {count} sent", order.len()),
        ));
    }
    Ok(order)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn round_trip_reordered() {
        let list = encode(&[(10, 19), (0, 4), (100, 100)]);
        assert_eq!(list.len(), 8 + 3 * UDS_LEN);
        // a drive answers with the same descriptors in its own order: 1, 0, 2
        let mut resp = list[..8].to_vec();
        for i in [1usize, 0, 2] {
            resp.extend_from_slice(&list[8 + i * UDS_LEN..8 + (i + 1) * UDS_LEN]);
        }
        assert_eq!(parse(&resp, 3).unwrap(), vec![1, 0, 2]);
        assert!(parse(&resp, 2).is_err(), "index out of range");
        assert!(parse(&resp[..8 + UDS_LEN], 3).is_err(), "missing segments");
        assert_eq!(generate(40)[0..2], [0xA4, 0x1D]);
        assert_eq!(receive(40)[9], 40);
    }
}
