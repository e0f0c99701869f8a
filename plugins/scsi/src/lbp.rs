//! Logical block protection with CRC32C: 4 bytes of protection information after each record,
//! appended by the host on WRITE (the drive checks it, LBP_W) and returned by the drive on READ
//! (LBP_R, the plugin checks it again).
//!
//! The CRC is stored least-significant byte first, as LTFS stores it for LTO drives; this is
//! one of the points a first run on real hardware must confirm (docs/SCSI.md).

/// Length of the protection information.
pub const CRC_LEN: usize = 4;

/// CRC32C (Castagnoli) of a record.
pub fn crc32c(data: &[u8]) -> u32 {
    crc32c::crc32c(data)
}

/// The record followed by its CRC32C, ready for WRITE(6).
pub fn protect(data: &[u8], crc: u32, out: &mut Vec<u8>) {
    out.clear();
    out.reserve(data.len() + CRC_LEN);
    out.extend_from_slice(data);
    out.extend_from_slice(&crc.to_le_bytes());
}

/// Split a protected record into its length and stored CRC; `None` if it is too short to
/// carry one.
pub fn split(record: &[u8]) -> Option<(usize, u32)> {
    let n = record.len().checked_sub(CRC_LEN)?;
    let mut c = [0u8; CRC_LEN];
    c.copy_from_slice(&record[n..]);
    Some((n, u32::from_le_bytes(c)))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn protect_and_split_round_trip() {
        let data = b"123456789";
        // the CRC32C check value
        assert_eq!(crc32c(data), 0xE306_9283);
        let mut out = Vec::new();
        protect(data, crc32c(data), &mut out);
        assert_eq!(out.len(), 13);
        assert_eq!(&out[9..], &[0x83, 0x92, 0x06, 0xE3]);
        assert_eq!(split(&out), Some((9, 0xE306_9283)));
        assert_eq!(split(&out[..3]), None);
    }
}
