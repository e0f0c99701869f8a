//! The few SCSI commands this plugin sends itself through `sg` (everything else goes through
//! `st`), with parsers for their answers: INQUIRY (standard and VPD 80h), READ BLOCK LIMITS,
//! READ POSITION (long and short form), LOG SENSE (TapeAlert), READ/WRITE ATTRIBUTE (MAM),
//! READ ELEMENT STATUS and MOVE MEDIUM.

use reel_plugin_abi::sdk::Element;
use reel_plugin_abi::{
    REEL_ELEMENT_EXCEPT, REEL_ELEMENT_FULL, REEL_ELEMENT_IMPORT_EXPORT, REEL_ELEMENT_PICKER,
    REEL_ELEMENT_SLOT, REEL_POS_BOP, REEL_POS_EOP, REEL_POS_UNKNOWN, ReelPosition,
};

/// A malformed answer from the device.
#[derive(Debug, thiserror::Error, PartialEq, Eq)]
#[error("malformed {what} answer: {detail}")]
pub struct ParseError {
    /// Which command.
    pub what: &'static str,
    /// What was wrong.
    pub detail: String,
}

fn bad(what: &'static str, detail: impl Into<String>) -> ParseError {
    ParseError {
        what,
        detail: detail.into(),
    }
}

fn be16(b: &[u8]) -> u16 {
    u16::from_be_bytes([b[0], b[1]])
}

fn be24(b: &[u8]) -> u32 {
    u32::from_be_bytes([0, b[0], b[1], b[2]])
}

fn be32(b: &[u8]) -> u32 {
    u32::from_be_bytes([b[0], b[1], b[2], b[3]])
}

fn be64(b: &[u8]) -> u64 {
    let mut v = [0u8; 8];
    v.copy_from_slice(&b[..8]);
    u64::from_be_bytes(v)
}

// ---- INQUIRY ------------------------------------------------------------------------------

/// TEST UNIT READY.
pub fn test_unit_ready() -> [u8; 6] {
    [0; 6]
}

/// INQUIRY, standard data (`page` None) or a VPD page.
pub fn inquiry(page: Option<u8>, alloc: u16) -> [u8; 6] {
    let a = alloc.to_be_bytes();
    match page {
        None => [0x12, 0, 0, a[0], a[1], 0],
        Some(p) => [0x12, 1, p, a[0], a[1], 0],
    }
}

/// Vendor, product and peripheral device type from standard INQUIRY data.
pub fn parse_inquiry(b: &[u8]) -> Result<(u8, String, String), ParseError> {
    if b.len() < 32 {
        return Err(bad("INQUIRY", format!("{} bytes, need 32", b.len())));
    }
    let text = |r: &[u8]| String::from_utf8_lossy(r).trim().to_string();
    Ok((b[0] & 0x1F, text(&b[8..16]), text(&b[16..32])))
}

/// The unit serial number from VPD page 80h (as SG_IO returns it or as sysfs `vpd_pg80`
/// holds it), with the padding trimmed (tgt right-aligns it in a space-padded field).
pub fn parse_vpd80(b: &[u8]) -> Result<String, ParseError> {
    if b.len() < 4 || b[1] != 0x80 {
        return Err(bad("VPD 80h", "not a unit serial number page"));
    }
    let n = (be16(&b[2..4]) as usize).min(b.len() - 4);
    let s = String::from_utf8_lossy(&b[4..4 + n]);
    Ok(s.trim_matches(|c: char| c == ' ' || c == '\0').to_string())
}

// ---- READ BLOCK LIMITS ---------------------------------------------------------------------

/// READ BLOCK LIMITS.
pub fn read_block_limits() -> [u8; 6] {
    [0x05, 0, 0, 0, 0, 0]
}

/// Largest record the drive accepts, from READ BLOCK LIMITS data.
pub fn parse_block_limits(b: &[u8]) -> Result<u64, ParseError> {
    if b.len() < 6 {
        return Err(bad(
            "READ BLOCK LIMITS",
            format!("{} bytes, need 6", b.len()),
        ));
    }
    Ok(be24(&b[1..4]) as u64)
}

// ---- READ POSITION -------------------------------------------------------------------------

/// READ POSITION, long form (service action 06h): 32 bytes.
pub fn read_position_long() -> [u8; 10] {
    [0x34, 0x06, 0, 0, 0, 0, 0, 0, 0, 0]
}

/// READ POSITION, short form (service action 00h): 20 bytes.
pub fn read_position_short() -> [u8; 10] {
    [0x34, 0x00, 0, 0, 0, 0, 0, 0, 0, 0]
}

/// Parse the long form: logical object number, file number, partition, BOP/EOP.
pub fn parse_position_long(b: &[u8]) -> Result<ReelPosition, ParseError> {
    if b.len() < 24 {
        return Err(bad(
            "READ POSITION (long)",
            format!("{} bytes, need 32", b.len()),
        ));
    }
    let mut p = ReelPosition {
        partition: be32(&b[4..8]),
        block: be64(&b[8..16]),
        file: be64(&b[16..24]),
        ..ReelPosition::default()
    };
    if b[0] & 0x80 != 0 {
        p.flags |= REEL_POS_BOP;
    }
    if b[0] & 0x40 != 0 {
        p.flags |= REEL_POS_EOP;
    }
    // LONU (bit 2): logical object number unknown; MPU (bit 3) concerns the physical position.
    if b[0] & 0x04 != 0 {
        p.flags |= REEL_POS_UNKNOWN;
    }
    Ok(p)
}

/// Parse the short form: block (first block location) and BOP/EOP; the file number is not in
/// it (`file` stays 0: the caller fills it from st).
pub fn parse_position_short(b: &[u8]) -> Result<ReelPosition, ParseError> {
    if b.len() < 20 {
        return Err(bad(
            "READ POSITION (short)",
            format!("{} bytes, need 20", b.len()),
        ));
    }
    let mut p = ReelPosition {
        partition: b[1] as u32,
        block: be32(&b[4..8]) as u64,
        ..ReelPosition::default()
    };
    if b[0] & 0x80 != 0 {
        p.flags |= REEL_POS_BOP;
    }
    if b[0] & 0x40 != 0 {
        p.flags |= REEL_POS_EOP;
    }
    if b[0] & 0x04 != 0 {
        p.flags |= REEL_POS_UNKNOWN;
    }
    Ok(p)
}

// ---- LOG SENSE -----------------------------------------------------------------------------

/// LOG SENSE of a page, cumulative values.
pub fn log_sense(page: u8, alloc: u16) -> [u8; 10] {
    let a = alloc.to_be_bytes();
    [0x4D, 0, 0x40 | (page & 0x3F), 0, 0, 0, 0, a[0], a[1], 0]
}

/// TapeAlert page 2Eh: bit n-1 set when flag n is active.
pub fn parse_tape_alerts(b: &[u8]) -> Result<u64, ParseError> {
    if b.len() < 4 || b[0] & 0x3F != 0x2E {
        return Err(bad("LOG SENSE 2Eh", "not the TapeAlert page"));
    }
    let end = (4 + be16(&b[2..4]) as usize).min(b.len());
    let mut flags = 0u64;
    let mut i = 4;
    while i + 4 <= end {
        let code = be16(&b[i..i + 2]);
        let len = b[i + 3] as usize;
        if len >= 1 && i + 4 < end && (1..=64).contains(&code) && b[i + 4] & 1 != 0 {
            flags |= 1 << (code - 1);
        }
        i += 4 + len;
    }
    Ok(flags)
}

// ---- READ / WRITE ATTRIBUTE ----------------------------------------------------------------

/// READ ATTRIBUTE (ATTRIBUTE VALUES) starting at `id`.
pub fn read_attribute(id: u16, alloc: u32) -> [u8; 16] {
    let i = id.to_be_bytes();
    let a = alloc.to_be_bytes();
    [
        0x8C, 0x00, 0, 0, 0, 0, 0, 0, i[0], i[1], a[0], a[1], a[2], a[3], 0, 0,
    ]
}

/// The value of attribute `id` in a READ ATTRIBUTE answer, if present.
pub fn parse_attribute(b: &[u8], id: u16) -> Result<Option<Vec<u8>>, ParseError> {
    if b.len() < 4 {
        return Err(bad("READ ATTRIBUTE", "shorter than its header"));
    }
    let end = (4 + be32(&b[0..4]) as usize).min(b.len());
    let mut i = 4;
    while i + 5 <= end {
        let aid = be16(&b[i..i + 2]);
        let len = be16(&b[i + 3..i + 5]) as usize;
        if i + 5 + len > end {
            return Err(bad(
                "READ ATTRIBUTE",
                format!("attribute {aid:04X}h runs past the data"),
            ));
        }
        if aid == id {
            return Ok(Some(b[i + 5..i + 5 + len].to_vec()));
        }
        i += 5 + len;
    }
    Ok(None)
}

/// SPC attribute format of the attributes reel writes: 0 binary, 1 ASCII, 2 text.
pub fn attribute_format(id: u16) -> u8 {
    match id {
        0x0803 => 2,
        0x0800..=0x0BFF => 1,
        _ => 0,
    }
}

/// WRITE ATTRIBUTE parameter list for one attribute, and its CDB.
pub fn write_attribute(id: u16, value: &[u8]) -> Result<([u8; 16], Vec<u8>), ParseError> {
    if value.len() > u16::MAX as usize {
        return Err(bad("WRITE ATTRIBUTE", "value longer than 65535 bytes"));
    }
    let mut list = Vec::with_capacity(9 + value.len());
    list.extend_from_slice(&((5 + value.len()) as u32).to_be_bytes());
    list.extend_from_slice(&id.to_be_bytes());
    list.push(attribute_format(id));
    list.extend_from_slice(&(value.len() as u16).to_be_bytes());
    list.extend_from_slice(value);
    let n = (list.len() as u32).to_be_bytes();
    let cdb = [
        0x8D, 0x01, 0, 0, 0, 0, 0, 0, 0, 0, n[0], n[1], n[2], n[3], 0, 0,
    ];
    Ok((cdb, list))
}

// ---- changer -------------------------------------------------------------------------------

/// SMC element type code for an ABI element kind.
pub fn element_type_code(kind: u32) -> u8 {
    match kind {
        REEL_ELEMENT_PICKER => 1,
        REEL_ELEMENT_SLOT => 2,
        REEL_ELEMENT_IMPORT_EXPORT => 3,
        _ => 4,
    }
}

/// READ ELEMENT STATUS for one element type, with volume tags.
pub fn read_element_status(kind: u32, alloc: u32) -> [u8; 12] {
    let a = alloc.to_be_bytes();
    [
        0xB8,
        0x10 | element_type_code(kind),
        0,
        0,
        0xFF,
        0xFF,
        0,
        a[1],
        a[2],
        a[3],
        0,
        0,
    ]
}

/// MOVE MEDIUM with the given transport (picker) element.
pub fn move_medium(transport: u16, source: u16, destination: u16) -> [u8; 12] {
    let t = transport.to_be_bytes();
    let s = source.to_be_bytes();
    let d = destination.to_be_bytes();
    [0xA5, 0, t[0], t[1], s[0], s[1], d[0], d[1], 0, 0, 0, 0]
}

/// Parse a READ ELEMENT STATUS answer into elements of type `kind` (other types are
/// skipped: a device may add pages), numbering them `index` in address order.
pub fn parse_element_status(b: &[u8], kind: u32) -> Result<Vec<Element>, ParseError> {
    const W: &str = "READ ELEMENT STATUS";
    if b.len() < 8 {
        return Err(bad(W, "shorter than its header"));
    }
    let end = (8 + be24(&b[5..8]) as usize).min(b.len());
    let want = element_type_code(kind);
    let mut out = Vec::new();
    let mut i = 8;
    while i + 8 <= end {
        let code = b[i] & 0x0F;
        let pvoltag = b[i + 1] & 0x80 != 0;
        let dlen = be16(&b[i + 2..i + 4]) as usize;
        let bytes = be24(&b[i + 5..i + 8]) as usize;
        let page_end = (i + 8 + bytes).min(end);
        if dlen < 12 {
            return Err(bad(W, format!("descriptor length {dlen} is under 12")));
        }
        let mut j = i + 8;
        while j + dlen <= page_end {
            let d = &b[j..j + dlen];
            if code == want {
                out.push(element(d, kind, pvoltag));
            }
            j += dlen;
        }
        i = page_end;
    }
    out.sort_by_key(|e| e.address);
    for (n, e) in out.iter_mut().enumerate() {
        e.index = n as u32;
    }
    Ok(out)
}

fn element(d: &[u8], kind: u32, pvoltag: bool) -> Element {
    let mut flags = 0;
    if d[2] & 0x01 != 0 {
        flags |= REEL_ELEMENT_FULL;
    }
    if d[2] & 0x04 != 0 {
        flags |= REEL_ELEMENT_EXCEPT;
    }
    let source = if d[9] & 0x80 != 0 {
        be16(&d[10..12]) as u32
    } else {
        0
    };
    let barcode = if pvoltag && d.len() >= 12 + 32 && flags & REEL_ELEMENT_FULL != 0 {
        String::from_utf8_lossy(&d[12..44])
            .trim_matches(|c: char| c == ' ' || c == '\0')
            .to_string()
    } else {
        String::new()
    };
    Element {
        kind,
        address: be16(&d[0..2]) as u32,
        index: 0,
        flags,
        source_address: source,
        barcode,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use reel_plugin_abi::REEL_ELEMENT_DRIVE;

    /// Build an element status page like a changer would.
    fn page(code: u8, voltag: bool, descs: &[(u16, bool, Option<u16>, &str)]) -> Vec<u8> {
        let dlen = if voltag { 52 } else { 12 };
        let mut body = Vec::new();
        for (addr, full, src, bc) in descs {
            let mut d = vec![0u8; dlen];
            d[0..2].copy_from_slice(&addr.to_be_bytes());
            d[2] = if *full { 0x01 | 0x08 } else { 0x08 };
            if let Some(s) = src {
                d[9] = 0x80;
                d[10..12].copy_from_slice(&s.to_be_bytes());
            }
            if voltag {
                let mut tag = [b' '; 36];
                tag[..bc.len()].copy_from_slice(bc.as_bytes());
                d[12..48].copy_from_slice(&tag);
            }
            body.extend_from_slice(&d);
        }
        let mut p = vec![code, if voltag { 0x80 } else { 0 }];
        p.extend_from_slice(&(dlen as u16).to_be_bytes());
        p.push(0);
        p.extend_from_slice(&(body.len() as u32).to_be_bytes()[1..]);
        p.extend_from_slice(&body);
        p
    }

    fn report(pages: &[Vec<u8>], n: u16) -> Vec<u8> {
        let body: Vec<u8> = pages.concat();
        let mut r = vec![0, 0];
        r.extend_from_slice(&n.to_be_bytes());
        r.push(0);
        r.extend_from_slice(&(body.len() as u32).to_be_bytes()[1..]);
        r.extend_from_slice(&body);
        r
    }

    #[test]
    fn slots_with_barcodes_and_empty_slot() {
        let r = report(
            &[page(
                2,
                true,
                &[
                    (1025, true, None, "GFS002L9"),
                    (1024, true, Some(1024), "GFS001L9"),
                    (1026, false, None, ""),
                ],
            )],
            3,
        );
        let e = parse_element_status(&r, REEL_ELEMENT_SLOT).unwrap();
        assert_eq!(e.len(), 3);
        assert_eq!(
            (e[0].address, e[0].index, e[0].barcode.as_str()),
            (1024, 0, "GFS001L9")
        );
        assert_eq!(e[0].source_address, 1024);
        assert_eq!(
            (e[1].address, e[1].index, e[1].barcode.as_str()),
            (1025, 1, "GFS002L9")
        );
        assert_eq!(e[1].source_address, 0, "SValid clear: no source");
        assert_eq!(e[2].flags & REEL_ELEMENT_FULL, 0);
        assert_eq!(e[2].barcode, "");
    }

    #[test]
    fn drive_page_with_exception_and_foreign_pages_skipped() {
        let mut drives = page(
            4,
            true,
            &[(256, true, Some(1027), "GFS004L9"), (257, false, None, "")],
        );
        // exception bit on the second drive
        let second = 8 + 52;
        drives[second + 2] |= 0x04;
        let r = report(&[page(1, false, &[(1, false, None, "")]), drives], 3);
        let e = parse_element_status(&r, REEL_ELEMENT_DRIVE).unwrap();
        assert_eq!(e.len(), 2);
        assert_eq!(e[0].kind, REEL_ELEMENT_DRIVE);
        assert_eq!((e[0].address, e[0].source_address), (256, 1027));
        assert_eq!(e[0].barcode, "GFS004L9");
        assert!(e[1].flags & REEL_ELEMENT_EXCEPT != 0);
        let p = parse_element_status(&r, REEL_ELEMENT_PICKER).unwrap();
        assert_eq!(p.len(), 1);
        assert_eq!(p[0].address, 1);
    }

    #[test]
    fn element_status_rejects_short_and_bad_descriptors() {
        assert!(parse_element_status(&[0; 4], REEL_ELEMENT_SLOT).is_err());
        let mut r = report(&[page(2, false, &[(1024, true, None, "")])], 1);
        r[8 + 3] = 4; // descriptor length 4
        assert!(parse_element_status(&r, REEL_ELEMENT_SLOT).is_err());
        // a truncated answer yields the whole descriptors only
        let r = report(
            &[page(
                2,
                true,
                &[(1024, true, None, "A"), (1025, true, None, "B")],
            )],
            2,
        );
        let e = parse_element_status(&r[..r.len() - 10], REEL_ELEMENT_SLOT).unwrap();
        assert_eq!(e.len(), 1);
    }

    #[test]
    fn cdbs() {
        assert_eq!(
            read_element_status(REEL_ELEMENT_SLOT, 0x10000)[..2],
            [0xB8, 0x12]
        );
        assert_eq!(
            read_element_status(REEL_ELEMENT_SLOT, 0x10000)[7..10],
            [1, 0, 0]
        );
        assert_eq!(
            move_medium(1, 1024, 256),
            [0xA5, 0, 0, 1, 0x04, 0x00, 0x01, 0x00, 0, 0, 0, 0]
        );
        assert_eq!(read_position_long()[..2], [0x34, 0x06]);
        assert_eq!(log_sense(0x2E, 512)[2], 0x6E);
        assert_eq!(inquiry(Some(0x80), 252), [0x12, 1, 0x80, 0, 252, 0]);
    }

    #[test]
    fn position_long_and_short() {
        let mut b = [0u8; 32];
        b[0] = 0x80;
        b[8..16].copy_from_slice(&5u64.to_be_bytes());
        b[16..24].copy_from_slice(&2u64.to_be_bytes());
        let p = parse_position_long(&b).unwrap();
        assert_eq!((p.block, p.file, p.flags), (5, 2, REEL_POS_BOP));
        b[0] = 0x44;
        let p = parse_position_long(&b).unwrap();
        assert_eq!(p.flags, REEL_POS_EOP | REEL_POS_UNKNOWN);
        let mut s = [0u8; 20];
        s[0] = 0x40;
        s[4..8].copy_from_slice(&77u32.to_be_bytes());
        let p = parse_position_short(&s).unwrap();
        assert_eq!((p.block, p.flags), (77, REEL_POS_EOP));
        assert!(parse_position_long(&b[..10]).is_err());
        assert!(parse_position_short(&s[..10]).is_err());
    }

    #[test]
    fn vpd_serial_trimmed() {
        let mut b = vec![0x01, 0x80, 0, 36];
        let mut f = [b' '; 36];
        f[26..].copy_from_slice(b"DRV0000001");
        b.extend_from_slice(&f);
        assert_eq!(parse_vpd80(&b).unwrap(), "DRV0000001");
        assert!(parse_vpd80(&[0, 0x83, 0, 0]).is_err());
        // declared length longer than the data: clipped
        assert_eq!(parse_vpd80(&[0x08, 0x80, 0, 50, b'L', b'1']).unwrap(), "L1");
    }

    #[test]
    fn inquiry_and_block_limits() {
        let mut b = [b' '; 36];
        b[0] = 0x01;
        b[8..11].copy_from_slice(b"IBM");
        b[16..27].copy_from_slice(b"ULT3580-TD9");
        assert_eq!(
            parse_inquiry(&b).unwrap(),
            (1, "IBM".to_string(), "ULT3580-TD9".to_string())
        );
        assert_eq!(parse_block_limits(&[9, 0x10, 0, 0, 0, 4]).unwrap(), 1 << 20);
        assert!(parse_inquiry(&b[..10]).is_err());
    }

    #[test]
    fn tape_alerts_page() {
        // flags 3 and 20 set, 4 clear
        let mut b = vec![0x2E, 0, 0, 15];
        for (code, v) in [(3u16, 1u8), (4, 0), (20, 1)] {
            b.extend_from_slice(&code.to_be_bytes());
            b.extend_from_slice(&[0x01, 1, v]);
        }
        assert_eq!(parse_tape_alerts(&b).unwrap(), (1 << 2) | (1 << 19));
        assert!(parse_tape_alerts(&[0x0C, 0, 0, 0]).is_err());
    }

    #[test]
    fn attributes_round_trip() {
        let (cdb, list) = write_attribute(0x0806, b"GFS001L9").unwrap();
        assert_eq!(cdb[0], 0x8D);
        assert_eq!(
            u32::from_be_bytes([cdb[10], cdb[11], cdb[12], cdb[13]]) as usize,
            list.len()
        );
        assert_eq!(list[6], 1, "barcode is ASCII");
        // a READ ATTRIBUTE answer holding two attributes, the second the one written
        let mut ans = vec![0, 0, 0, 0];
        ans.extend_from_slice(&[0x00, 0x03, 0x80, 0x00, 0x08, 0, 0, 0, 0, 0, 0, 0, 9]);
        ans.extend_from_slice(&list[4..]);
        let n = (ans.len() - 4) as u32;
        ans[..4].copy_from_slice(&n.to_be_bytes());
        assert_eq!(parse_attribute(&ans, 0x0806).unwrap().unwrap(), b"GFS001L9");
        assert_eq!(
            parse_attribute(&ans, 0x0003).unwrap().unwrap(),
            [0, 0, 0, 0, 0, 0, 0, 9]
        );
        assert_eq!(parse_attribute(&ans, 0x0401).unwrap(), None);
        ans.truncate(ans.len() - 3);
        assert!(
            parse_attribute(&ans, 0x0806).is_err(),
            "value running past the data"
        );
        assert_eq!(attribute_format(0x1001), 0);
        assert_eq!(attribute_format(0x0803), 2);
    }
}
