//! INQUIRY (12h): standard data, VPD 80h (unit serial number) and VPD 83h (device
//! identification).

use super::{ParseError, ascii, be16};

/// Peripheral device type of a sequential-access device (tape drive).
pub const TYPE_TAPE: u8 = 0x01;
/// Peripheral device type of a medium changer.
pub const TYPE_CHANGER: u8 = 0x08;

/// Standard INQUIRY with `alloc` bytes.
pub fn inquiry(alloc: u16) -> [u8; 6] {
    let a = alloc.to_be_bytes();
    [0x12, 0, 0, a[0], a[1], 0]
}

/// INQUIRY of a vital product data page.
pub fn inquiry_vpd(page: u8, alloc: u16) -> [u8; 6] {
    let a = alloc.to_be_bytes();
    [0x12, 0x01, page, a[0], a[1], 0]
}

/// Standard INQUIRY data.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Inquiry {
    /// Peripheral device type (1 tape, 8 changer).
    pub device_type: u8,
    /// Removable medium bit.
    pub removable: bool,
    /// T10 vendor identification.
    pub vendor: String,
    /// Product identification.
    pub product: String,
    /// Product revision level.
    pub revision: String,
}

impl Inquiry {
    /// Parse standard INQUIRY data (at least 36 bytes).
    pub fn parse(b: &[u8]) -> Result<Inquiry, ParseError> {
        if b.len() < 36 {
            return Err(ParseError::new(
                "INQUIRY data",
                format!("{} bytes, need 36", b.len()),
            ));
        }
        Ok(Inquiry {
            device_type: b[0] & 0x1F,
            removable: b[1] & 0x80 != 0,
            vendor: ascii(&b[8..16]),
            product: ascii(&b[16..32]),
            revision: ascii(&b[32..36]),
        })
    }
}

/// Parse VPD page 80h: the unit serial number (trimmed; tgt right-aligns it in spaces).
pub fn parse_serial(b: &[u8]) -> Result<String, ParseError> {
    if b.len() < 4 || b[1] != 0x80 {
        return Err(ParseError::new(
            "VPD page 80h",
            "not a unit serial number page",
        ));
    }
    let n = usize::from(be16(b, 2)).min(b.len() - 4);
    let s = ascii(&b[4..4 + n]);
    if s.is_empty() {
        return Err(ParseError::new("VPD page 80h", "empty serial number"));
    }
    Ok(s)
}

/// One designation descriptor of VPD page 83h.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Designator {
    /// Code set (1 binary, 2 ASCII, 3 UTF-8).
    pub code_set: u8,
    /// Association (0 logical unit, 1 target port, 2 target device).
    pub association: u8,
    /// Designator type (1 T10 vendor ID, 2 EUI-64, 3 NAA, 8 SCSI name string, ...).
    pub kind: u8,
    /// The identifier bytes.
    pub id: Vec<u8>,
}

impl Designator {
    /// Printable form: ASCII code sets as text, binary as hex.
    pub fn display(&self) -> String {
        if self.code_set == 2 || self.code_set == 3 {
            ascii(&self.id)
        } else {
            self.id.iter().map(|b| format!("{b:02x}")).collect()
        }
    }
}

/// Parse VPD page 83h into its designation descriptors.
pub fn parse_device_id(b: &[u8]) -> Result<Vec<Designator>, ParseError> {
    if b.len() < 4 || b[1] != 0x83 {
        return Err(ParseError::new(
            "VPD page 83h",
            "not a device identification page",
        ));
    }
    let end = (4 + usize::from(be16(b, 2))).min(b.len());
    let mut out = Vec::new();
    let mut at = 4;
    while at + 4 <= end {
        let len = usize::from(b[at + 3]);
        let id_end = (at + 4 + len).min(end);
        out.push(Designator {
            code_set: b[at] & 0x0F,
            association: (b[at + 1] >> 4) & 0x03,
            kind: b[at + 1] & 0x0F,
            id: b[at + 4..id_end].to_vec(),
        });
        at += 4 + len;
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    pub(crate) fn std_inquiry(t: u8, vendor: &str, product: &str) -> Vec<u8> {
        let mut b = vec![0u8; 36];
        b[0] = t;
        b[1] = 0x80;
        b[8..16].copy_from_slice(format!("{vendor:<8}").as_bytes());
        b[16..32].copy_from_slice(format!("{product:<16}").as_bytes());
        b[32..36].copy_from_slice(b"0001");
        b
    }

    #[test]
    fn standard_inquiry() {
        let i = Inquiry::parse(&std_inquiry(1, "IBM", "ULT3580-TD9")).unwrap();
        assert_eq!(i.device_type, TYPE_TAPE);
        assert!(i.removable);
        assert_eq!(
            (i.vendor.as_str(), i.product.as_str()),
            ("IBM", "ULT3580-TD9")
        );
        assert_eq!(i.revision, "0001");
        assert!(Inquiry::parse(&[0; 10]).is_err());
        assert_eq!(inquiry_vpd(0x80, 255), [0x12, 1, 0x80, 0, 255, 0]);
    }

    #[test]
    fn serial_is_trimmed_as_tgt_pads_it() {
        let mut b = vec![0x01, 0x80, 0x00, 36];
        b.extend_from_slice(format!("{:>36}", "DRV0000001").as_bytes());
        assert_eq!(parse_serial(&b).unwrap(), "DRV0000001");
        assert!(parse_serial(&[0x01, 0x83, 0, 0]).is_err());
        assert!(parse_serial(&[0x01, 0x80, 0, 4, b' ', b' ', b' ', b' ']).is_err());
    }

    #[test]
    fn device_identification() {
        let mut b = vec![0x01, 0x83, 0x00, 0x00];
        b.extend_from_slice(&[0x02, 0x01, 0x00, 8]);
        b.extend_from_slice(b"IBM     ");
        b.extend_from_slice(&[0x01, 0x03, 0x00, 8, 0x50, 1, 2, 3, 4, 5, 6, 7]);
        b[3] = (b.len() - 4) as u8;
        let d = parse_device_id(&b).unwrap();
        assert_eq!(d.len(), 2);
        assert_eq!(d[0].kind, 1);
        assert_eq!(d[0].display(), "IBM");
        assert_eq!(d[1].kind, 3);
        assert_eq!(d[1].display(), "5001020304050607");
    }
}
