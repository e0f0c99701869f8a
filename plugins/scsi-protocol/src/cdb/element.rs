//! Medium changer (SMC): READ ELEMENT STATUS (B8h), MOVE MEDIUM (A5h) and INITIALIZE ELEMENT
//! STATUS (07h).
//!
//! READ ELEMENT STATUS is always asked for one element type at a time (type 0, "all", returns
//! corrupt data on tgt and is paginated inconsistently on real libraries), with VolTag, and
//! with DVCID for drives so that a drive element maps to a drive serial number.

use reel_plugin_abi::sdk::Element;
use reel_plugin_abi::{REEL_ELEMENT_CLEANING, REEL_ELEMENT_EXCEPT, REEL_ELEMENT_FULL};

use super::{ParseError, ascii, be16, be24};

/// Element type code: medium transport (picker).
pub const TYPE_TRANSPORT: u8 = 1;
/// Element type code: storage slot.
pub const TYPE_STORAGE: u8 = 2;
/// Element type code: import/export.
pub const TYPE_IMPORT_EXPORT: u8 = 3;
/// Element type code: data transfer (drive).
pub const TYPE_DATA_TRANSFER: u8 = 4;

/// READ ELEMENT STATUS of one element type.
pub fn read_element_status(
    element_type: u8,
    start: u16,
    count: u16,
    voltag: bool,
    dvcid: bool,
    alloc: u32,
) -> [u8; 12] {
    let s = start.to_be_bytes();
    let n = count.to_be_bytes();
    let a = alloc.min(0xFF_FFFF).to_be_bytes();
    [
        0xB8,
        (if voltag { 0x10 } else { 0 }) | (element_type & 0x0F),
        s[0],
        s[1],
        n[0],
        n[1],
        if dvcid { 0x01 } else { 0 },
        a[1],
        a[2],
        a[3],
        0,
        0,
    ]
}

/// MOVE MEDIUM with the given transport element (0: the changer's default).
pub fn move_medium(transport: u16, source: u16, destination: u16) -> [u8; 12] {
    let t = transport.to_be_bytes();
    let s = source.to_be_bytes();
    let d = destination.to_be_bytes();
    [0xA5, 0, t[0], t[1], s[0], s[1], d[0], d[1], 0, 0, 0, 0]
}

/// INITIALIZE ELEMENT STATUS: the changer rescans every element (minutes on a real library).
pub fn initialize_element_status() -> [u8; 6] {
    [0x07, 0, 0, 0, 0, 0]
}

/// SMC medium type of a cleaning cartridge.
pub const MEDIUM_TYPE_CLEANING: u8 = 2;

/// The status of one element.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct ElementStatus {
    /// Element type code.
    pub element_type: u8,
    /// Element address.
    pub address: u16,
    /// Holds a medium.
    pub full: bool,
    /// Abnormal state.
    pub except: bool,
    /// The element is accessible to the picker (import/export: from the inside).
    pub access: bool,
    /// Import/export element: the medium was put in by an operator.
    pub imp_exp: bool,
    /// ASC/ASCQ of the exception, when `except`.
    pub asc: (u8, u8),
    /// Address the medium came from, when valid.
    pub source: Option<u16>,
    /// SMC medium type of a full element (0 unspecified, 1 data, 2 cleaning, 3 diagnostic, 4
    /// WORM).
    pub medium_type: u8,
    /// Primary volume tag (barcode), trimmed; empty when none.
    pub barcode: String,
    /// Device identifier of a drive (DVCID), as text; empty when none.
    pub device_id: String,
    /// Designator type of `device_id` (1: T10 vendor + product + serial; 0: serial only).
    pub device_id_type: u8,
}

impl ElementStatus {
    /// The ABI's element, numbered `index` within its kind. SMC's element type codes are the
    /// ABI's `REEL_ELEMENT_*` kinds. A volume tag counts only on a full element.
    pub fn to_element(&self, index: u32) -> Element {
        let mut flags = 0;
        if self.full {
            flags |= REEL_ELEMENT_FULL;
        }
        if self.except {
            flags |= REEL_ELEMENT_EXCEPT;
        }
        if self.full && self.medium_type == MEDIUM_TYPE_CLEANING {
            flags |= REEL_ELEMENT_CLEANING;
        }
        Element {
            kind: u32::from(self.element_type),
            address: u32::from(self.address),
            index,
            flags,
            source_address: self.source.map_or(0, u32::from),
            barcode: if self.full {
                self.barcode.clone()
            } else {
                String::new()
            },
        }
    }

    /// The drive serial number inside the device identifier, when the changer reported one.
    /// A T10 vendor designator holds vendor (8) + product (16) + serial.
    pub fn drive_serial(&self) -> Option<String> {
        if self.device_id.is_empty() {
            return None;
        }
        let raw = self.device_id.as_bytes();
        let serial = if self.device_id_type == 1 && raw.len() > 24 {
            ascii(&raw[24..])
        } else {
            self.device_id.trim().to_string()
        };
        (!serial.is_empty()).then_some(serial)
    }
}

/// Parse READ ELEMENT STATUS data (every element status page in it).
pub fn parse(b: &[u8]) -> Result<Vec<ElementStatus>, ParseError> {
    if b.len() < 8 {
        return Err(ParseError::new(
            "element status data",
            "shorter than its header",
        ));
    }
    let end = (8 + be24(b, 5) as usize).min(b.len());
    let mut out = Vec::new();
    let mut at = 8;
    while at + 8 <= end {
        let element_type = b[at] & 0x0F;
        let pvoltag = b[at + 1] & 0x80 != 0;
        let avoltag = b[at + 1] & 0x40 != 0;
        let desc_len = usize::from(be16(b, at + 2));
        let page_end = (at + 8 + be24(b, at + 5) as usize).min(end);
        if desc_len == 0 {
            return Err(ParseError::new(
                "element status page",
                format!("element type {element_type}: descriptor length 0"),
            ));
        }
        let mut d_at = at + 8;
        while d_at + 12 <= page_end {
            // The last descriptor may be cut short (tgt reports 8 bytes too few): parse what
            // is there.
            let d = &b[d_at..(d_at + desc_len).min(page_end)];
            out.push(parse_descriptor(element_type, d, pvoltag, avoltag));
            d_at += desc_len;
        }
        at = page_end.max(at + 8);
    }
    Ok(out)
}

fn parse_descriptor(element_type: u8, d: &[u8], pvoltag: bool, avoltag: bool) -> ElementStatus {
    let flags = d[2];
    let mut e = ElementStatus {
        element_type,
        address: be16(d, 0),
        full: flags & 0x01 != 0,
        imp_exp: flags & 0x02 != 0,
        except: flags & 0x04 != 0,
        access: flags & 0x08 != 0,
        asc: (d[4], d[5]),
        source: (d[9] & 0x80 != 0).then(|| be16(d, 10)),
        medium_type: d[9] & 0x07,
        ..ElementStatus::default()
    };
    let mut at = 12;
    if pvoltag {
        if let Some(tag) = d.get(at..at + 32) {
            e.barcode = ascii(tag);
        }
        at += 36;
    }
    if avoltag {
        at += 36;
    }
    // Device identifier (DVCID): code set, identifier type, reserved, length, identifier.
    if let Some(hdr) = d.get(at..at + 4) {
        let len = usize::from(hdr[3]);
        let id_end = (at + 4 + len).min(d.len());
        if len > 0 && at + 4 < id_end {
            e.device_id_type = hdr[1] & 0x0F;
            e.device_id = String::from_utf8_lossy(&d[at + 4..id_end])
                .trim_end_matches(['\0', ' '])
                .to_string();
        }
    }
    e
}

/// READ ELEMENT STATUS data for one element type, built the way a changer sends it, for the
/// plugins' scripted targets: `(address, full, barcode, source, drive serial)` per element,
/// with drive identifiers (DVCID) when `dvcid`.
#[cfg(any(test, feature = "testing"))]
pub fn status_page(
    element_type: u8,
    elements: &[(u16, bool, &str, Option<u16>, &str)],
    dvcid: bool,
) -> Vec<u8> {
    let desc_len = 12 + 36 + if dvcid { 4 + 34 } else { 0 };
    let mut body = Vec::new();
    for (addr, full, barcode, source, id) in elements {
        let mut d = vec![0u8; desc_len];
        d[0..2].copy_from_slice(&addr.to_be_bytes());
        d[2] = u8::from(*full) | if element_type == 4 { 0x08 } else { 0 };
        if let Some(s) = source {
            d[9] = 0x80;
            d[10..12].copy_from_slice(&s.to_be_bytes());
        }
        let tag = format!("{barcode:<32}");
        d[12..44].copy_from_slice(tag.as_bytes());
        if dvcid {
            d[48] = 0x02;
            d[49] = 0x01;
            d[51] = 34;
            let ident = format!("{:<8}{:<16}{:<10}", "IBM", "ULT3580-TD9", id);
            d[52..86].copy_from_slice(ident.as_bytes());
        }
        body.extend_from_slice(&d);
    }
    let mut p = vec![element_type, 0x80, 0, 0, 0, 0, 0, 0];
    p[2..4].copy_from_slice(&(desc_len as u16).to_be_bytes());
    p[5..8].copy_from_slice(&(body.len() as u32).to_be_bytes()[1..]);
    p.extend_from_slice(&body);
    let mut h = vec![0u8; 8];
    h[0..2].copy_from_slice(&elements.first().map_or(0, |e| e.0).to_be_bytes());
    h[2..4].copy_from_slice(&(elements.len() as u16).to_be_bytes());
    h[5..8].copy_from_slice(&(p.len() as u32).to_be_bytes()[1..]);
    h.extend_from_slice(&p);
    h
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn cdbs() {
        let c = read_element_status(TYPE_DATA_TRANSFER, 256, 2, true, true, 0xFFFF);
        assert_eq!(c, [0xB8, 0x14, 1, 0, 0, 2, 1, 0, 0xFF, 0xFF, 0, 0]);
        assert_eq!(
            move_medium(1, 1024, 256),
            [0xA5, 0, 0, 1, 4, 0, 1, 0, 0, 0, 0, 0]
        );
        assert_eq!(initialize_element_status()[0], 7);
    }

    #[test]
    fn a_cleaning_medium_type_flags_the_element() {
        let mut d = [0u8; 12];
        d[0..2].copy_from_slice(&1030u16.to_be_bytes());
        d[2] = 0x01;
        d[9] = MEDIUM_TYPE_CLEANING;
        let e = parse_descriptor(TYPE_STORAGE, &d, false, false);
        assert_eq!((e.medium_type, e.source), (MEDIUM_TYPE_CLEANING, None));
        assert_ne!(e.to_element(0).flags & REEL_ELEMENT_CLEANING, 0);
        // A source address with a data medium: no flag.
        d[9] = 0x80 | 0x01;
        let e = parse_descriptor(TYPE_STORAGE, &d, false, false);
        assert_eq!(e.to_element(0).flags & REEL_ELEMENT_CLEANING, 0);
        // An empty element reports no medium, whatever the byte says.
        d[2] = 0;
        d[9] = MEDIUM_TYPE_CLEANING;
        let e = parse_descriptor(TYPE_STORAGE, &d, false, false);
        assert_eq!(e.to_element(0).flags & REEL_ELEMENT_CLEANING, 0);
    }

    #[test]
    fn slots_with_barcodes_and_sources() {
        let b = status_page(
            TYPE_STORAGE,
            &[
                (1024, true, "GFS001L9", None, ""),
                (1025, false, "", Some(256), ""),
            ],
            false,
        );
        let e = parse(&b).unwrap();
        assert_eq!(e.len(), 2);
        assert_eq!(e[0].address, 1024);
        assert!(e[0].full);
        assert_eq!(e[0].barcode, "GFS001L9");
        assert!(!e[1].full);
        assert_eq!(e[1].source, Some(256));
        assert_eq!(e[0].drive_serial(), None);
    }

    #[test]
    fn drives_with_dvcid_serials() {
        let b = status_page(
            TYPE_DATA_TRANSFER,
            &[
                (256, true, "GFS003L9", Some(1026), "DRV0000001"),
                (257, false, "", None, "DRV0000002"),
            ],
            true,
        );
        let e = parse(&b).unwrap();
        assert_eq!(e[0].drive_serial().as_deref(), Some("DRV0000001"));
        assert_eq!(e[1].drive_serial().as_deref(), Some("DRV0000002"));
        assert_eq!(e[0].source, Some(1026));
        assert!(e[0].access);
    }

    #[test]
    fn tgt_short_byte_count_cuts_the_last_serial() {
        // tgt reports 8 bytes too few: the last descriptor loses the end of its identifier.
        let mut b = status_page(
            TYPE_DATA_TRANSFER,
            &[
                (256, false, "", None, "DRV0000001"),
                (257, false, "", None, "DRV0000002"),
            ],
            true,
        );
        let total = be24(&b, 5) - 8;
        b[5..8].copy_from_slice(&total.to_be_bytes()[1..]);
        let page_len = be24(&b, 13) - 8;
        b[13..16].copy_from_slice(&page_len.to_be_bytes()[1..]);
        b.truncate(b.len() - 8);
        let e = parse(&b).unwrap();
        assert_eq!(e.len(), 2);
        assert_eq!(e[0].drive_serial().as_deref(), Some("DRV0000001"));
        assert_ne!(e[1].drive_serial().as_deref(), Some("DRV0000002"));
    }

    #[test]
    fn malformed_pages() {
        assert!(parse(&[0; 4]).is_err());
        let mut b = status_page(TYPE_STORAGE, &[(1, true, "A", None, "")], false);
        b[10] = 0;
        b[11] = 0; // descriptor length 0
        assert!(parse(&b).is_err());
        // header only: no elements
        assert!(parse(&[0, 0, 0, 0, 0, 0, 0, 0]).unwrap().is_empty());
    }
}
