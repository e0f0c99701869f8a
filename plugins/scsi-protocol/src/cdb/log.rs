//! LOG SENSE (4Dh): pages 02h and 03h write and read error counters, page 12h TapeAlert
//! response (read without clearing, unlike page 2Eh), page 17h volume statistics and page 31h
//! tape capacity.

use super::{ParseError, be_n, be16};

/// Write error counter page.
pub const PAGE_WRITE_ERROR_COUNTERS: u8 = 0x02;
/// Read error counter page.
pub const PAGE_READ_ERROR_COUNTERS: u8 = 0x03;
/// TapeAlert response page (does not clear the flags when read).
pub const PAGE_TAPE_ALERT_RESPONSE: u8 = 0x12;
/// Volume statistics page.
pub const PAGE_VOLUME_STATISTICS: u8 = 0x17;
/// Tape capacity page.
pub const PAGE_TAPE_CAPACITY: u8 = 0x31;

/// LOG SENSE of cumulative values (PC = 01b) of a page.
pub fn log_sense(page: u8, subpage: u8, alloc: u16) -> [u8; 10] {
    let a = alloc.to_be_bytes();
    [
        0x4D,
        0,
        0x40 | (page & 0x3F),
        subpage,
        0,
        0,
        0,
        a[0],
        a[1],
        0,
    ]
}

/// One log parameter.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct LogParam {
    /// Parameter code.
    pub code: u16,
    /// Value bytes.
    pub value: Vec<u8>,
}

impl LogParam {
    /// The value as a big-endian unsigned number (up to 8 bytes).
    pub fn number(&self) -> u64 {
        be_n(&self.value)
    }
}

/// Parse a log page; `page` is the page code expected.
pub fn parse(b: &[u8], page: u8) -> Result<Vec<LogParam>, ParseError> {
    if b.len() < 4 {
        return Err(ParseError::new("log page", "shorter than its header"));
    }
    if b[0] & 0x3F != page {
        return Err(ParseError::new(
            "log page",
            format!("page {:02X}h returned for {page:02X}h", b[0] & 0x3F),
        ));
    }
    let end = (4 + usize::from(be16(b, 2))).min(b.len());
    let mut out = Vec::new();
    let mut at = 4;
    while at + 4 <= end {
        let len = usize::from(b[at + 3]);
        let v_end = (at + 4 + len).min(end);
        out.push(LogParam {
            code: be16(b, at),
            value: b[at + 4..v_end].to_vec(),
        });
        at += 4 + len;
    }
    Ok(out)
}

/// TapeAlert flags 1..64 as a bitmap (bit n-1 = flag n) from page 12h.
pub fn tape_alert_flags(params: &[LogParam]) -> u64 {
    // Page 12h: parameter 0000h holds the 64 flags, flag 1 in the top bit of the first byte.
    if let Some(p) = params.iter().find(|p| p.code == 0) {
        let mut map = 0u64;
        for (i, byte) in p.value.iter().take(8).enumerate() {
            for bit in 0..8 {
                if byte & (0x80 >> bit) != 0 {
                    map |= 1 << (i * 8 + bit);
                }
            }
        }
        return map;
    }
    // Some drives report one parameter per flag (codes 0001h..0040h, as in page 2Eh).
    params
        .iter()
        .filter(|p| (1..=64).contains(&p.code) && p.value.first().is_some_and(|v| v & 1 != 0))
        .fold(0u64, |m, p| m | 1 << (p.code - 1))
}

/// The volume statistics reel reports.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct VolumeStatistics {
    /// Thread count: how many times the volume was mounted (0001h).
    pub mounts: Option<u64>,
    /// Data sets written over the volume's life (0002h).
    pub datasets_written: Option<u64>,
    /// Data sets read (0007h).
    pub datasets_read: Option<u64>,
    /// Lifetime megabytes written (0010h).
    pub lifetime_mb_written: Option<u64>,
    /// Lifetime megabytes read (0011h).
    pub lifetime_mb_read: Option<u64>,
    /// Beginning-of-medium passes (0101h).
    pub bom_passes: Option<u64>,
    /// Middle-of-medium passes (0102h).
    pub mom_passes: Option<u64>,
}

impl VolumeStatistics {
    /// Pick the parameters out of page 17h.
    pub fn from_params(params: &[LogParam]) -> VolumeStatistics {
        let get = |c: u16| params.iter().find(|p| p.code == c).map(LogParam::number);
        VolumeStatistics {
            mounts: get(0x0001),
            datasets_written: get(0x0002),
            datasets_read: get(0x0007),
            lifetime_mb_written: get(0x0010),
            lifetime_mb_read: get(0x0011),
            bom_passes: get(0x0101),
            mom_passes: get(0x0102),
        }
    }
}

/// The totals of a write (02h) or read (03h) error counter page (SPC): errors the drive
/// corrected and errors it could not. Cumulative over the drive's life or since the counters
/// were last reset; a host compares two readings.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct ErrorCounters {
    /// Total errors corrected (0003h).
    pub corrected: Option<u64>,
    /// Total uncorrected errors (0006h).
    pub uncorrected: Option<u64>,
}

impl ErrorCounters {
    /// Pick the totals out of page 02h or 03h.
    pub fn from_params(params: &[LogParam]) -> ErrorCounters {
        let get = |c: u16| params.iter().find(|p| p.code == c).map(LogParam::number);
        ErrorCounters {
            corrected: get(0x0003),
            uncorrected: get(0x0006),
        }
    }
}

/// Tape capacity page 31h: (remaining, maximum) of the main partition, in MiB.
pub fn tape_capacity(params: &[LogParam]) -> Option<(u64, u64)> {
    let get = |c: u16| params.iter().find(|p| p.code == c).map(LogParam::number);
    Some((get(0x0001)?, get(0x0003)?))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn page(code: u8, params: &[(u16, &[u8])]) -> Vec<u8> {
        let mut b = vec![code, 0, 0, 0];
        for (c, v) in params {
            b.extend_from_slice(&c.to_be_bytes());
            b.push(0x03);
            b.push(v.len() as u8);
            b.extend_from_slice(v);
        }
        let l = ((b.len() - 4) as u16).to_be_bytes();
        b[2] = l[0];
        b[3] = l[1];
        b
    }

    #[test]
    fn cdb_asks_for_cumulative_values() {
        assert_eq!(
            log_sense(0x17, 0, 1024),
            [0x4D, 0, 0x57, 0, 0, 0, 0, 4, 0, 0]
        );
    }

    #[test]
    fn tape_alert_bitmap_flag_numbering() {
        // flags 3 (hard error) and 20 (clean now), and flag 64
        let mut v = [0u8; 8];
        v[0] = 0x20; // flag 3
        v[2] = 0x10; // flag 20
        v[7] = 0x01; // flag 64
        let p = parse(&page(0x12, &[(0, &v)]), 0x12).unwrap();
        let m = tape_alert_flags(&p);
        assert_eq!(m, (1 << 2) | (1 << 19) | (1 << 63));
    }

    #[test]
    fn tape_alert_per_flag_parameters() {
        let p = parse(&page(0x12, &[(3, &[1]), (4, &[0]), (20, &[1])]), 0x12).unwrap();
        assert_eq!(tape_alert_flags(&p), (1 << 2) | (1 << 19));
    }

    #[test]
    fn volume_statistics_and_capacity() {
        let p = parse(
            &page(
                0x17,
                &[(1, &[0, 0, 0, 42]), (0x10, &[0, 0, 0x10, 0]), (0x101, &[7])],
            ),
            0x17,
        )
        .unwrap();
        let v = VolumeStatistics::from_params(&p);
        assert_eq!(v.mounts, Some(42));
        assert_eq!(v.lifetime_mb_written, Some(4096));
        assert_eq!(v.bom_passes, Some(7));
        assert_eq!(v.datasets_read, None);
        let c = parse(
            &page(0x31, &[(1, &[0, 0, 1, 0]), (3, &[0, 0x01, 0, 0])]),
            0x31,
        )
        .unwrap();
        assert_eq!(tape_capacity(&c), Some((256, 65536)));
        assert_eq!(tape_capacity(&[]), None);
    }

    #[test]
    fn error_counter_totals() {
        // 0000h (corrected without delay) is not a total and is ignored.
        let p = parse(
            &page(
                0x03,
                &[
                    (0, &[9]),
                    (3, &[0, 0, 0, 5]),
                    (6, &[0, 0, 0, 0, 0, 0, 0, 2]),
                ],
            ),
            0x03,
        )
        .unwrap();
        assert_eq!(
            ErrorCounters::from_params(&p),
            ErrorCounters {
                corrected: Some(5),
                uncorrected: Some(2)
            }
        );
        let p = parse(&page(0x02, &[(3, &[1])]), 0x02).unwrap();
        assert_eq!(
            ErrorCounters::from_params(&p),
            ErrorCounters {
                corrected: Some(1),
                uncorrected: None
            }
        );
    }

    #[test]
    fn wrong_page_and_truncation() {
        assert!(parse(&page(0x17, &[]), 0x12).is_err());
        assert!(parse(&[0x12, 0], 0x12).is_err());
        let mut b = page(0x17, &[(1, &[0, 0, 0, 42])]);
        b.truncate(b.len() - 2);
        let p = parse(&b, 0x17).unwrap();
        assert_eq!(p[0].value, vec![0, 0]);
    }
}
