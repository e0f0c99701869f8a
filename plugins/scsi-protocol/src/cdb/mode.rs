//! MODE SENSE (1Ah/5Ah) and MODE SELECT (15h/55h), 6- and 10-byte forms: the header, the block
//! descriptor and the pages reel reads or sets — 0Fh data compression, 10h device
//! configuration, 0Ah/F0h control data protection (logical block protection), 1Dh medium
//! configuration (drive: WORM) or element address assignment (changer).

use super::{ParseError, be16, be24};

/// Page 0Ah, the control mode page (subpage F0h: control data protection, LBP).
pub const PAGE_CONTROL: u8 = 0x0A;
/// Subpage of [`PAGE_CONTROL`] for control data protection.
pub const SUBPAGE_DATA_PROTECTION: u8 = 0xF0;
/// Page 0Fh, data compression.
pub const PAGE_COMPRESSION: u8 = 0x0F;
/// Page 10h, device configuration.
pub const PAGE_DEVICE_CONFIGURATION: u8 = 0x10;
/// Page 1Dh: medium configuration on a drive, element address assignment on a changer.
pub const PAGE_1D: u8 = 0x1D;

/// MODE SENSE(6) of current values. `dbd` disables block descriptors.
pub fn mode_sense6(page: u8, subpage: u8, alloc: u8, dbd: bool) -> [u8; 6] {
    [
        0x1A,
        if dbd { 0x08 } else { 0 },
        page & 0x3F,
        subpage,
        alloc,
        0,
    ]
}

/// MODE SENSE(10) of current values.
pub fn mode_sense10(page: u8, subpage: u8, alloc: u16, dbd: bool) -> [u8; 10] {
    let a = alloc.to_be_bytes();
    [
        0x5A,
        if dbd { 0x08 } else { 0 },
        page & 0x3F,
        subpage,
        0,
        0,
        0,
        a[0],
        a[1],
        0,
    ]
}

/// MODE SELECT(6) with PF=1 and a parameter list of `len` bytes.
pub fn mode_select6(len: u8) -> [u8; 6] {
    [0x15, 0x10, 0, 0, len, 0]
}

/// MODE SELECT(10) with PF=1 and a parameter list of `len` bytes.
pub fn mode_select10(len: u16) -> [u8; 10] {
    let l = len.to_be_bytes();
    [0x55, 0x10, 0, 0, 0, 0, 0, l[0], l[1], 0]
}

/// A short (8-byte) block descriptor.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct BlockDescriptor {
    /// Density code (0 = default).
    pub density: u8,
    /// Number of blocks (0 on tape).
    pub blocks: u32,
    /// Block length; 0 means variable-length records.
    pub block_length: u32,
}

/// One mode page with its header bytes included.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ModePage {
    /// Page code.
    pub code: u8,
    /// Subpage code (0 for page_0 format).
    pub subpage: u8,
    /// The whole page, header included, as returned (PS bit as returned).
    pub bytes: Vec<u8>,
}

impl ModePage {
    /// Byte `i` of the page (header included), 0 past the end.
    pub fn byte(&self, i: usize) -> u8 {
        self.bytes.get(i).copied().unwrap_or(0)
    }
}

/// Mode parameter data: header, block descriptors and pages.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct ModeData {
    /// Medium type.
    pub medium_type: u8,
    /// Device-specific parameter (tape: WP bit 7, buffered mode bits 6..4, speed 3..0).
    pub device_specific: u8,
    /// Block descriptors.
    pub blocks: Vec<BlockDescriptor>,
    /// Pages.
    pub pages: Vec<ModePage>,
}

impl ModeData {
    /// Parse MODE SENSE(6) data.
    pub fn parse6(b: &[u8]) -> Result<ModeData, ParseError> {
        if b.len() < 4 {
            return Err(ParseError::new(
                "MODE SENSE(6) data",
                "shorter than its header",
            ));
        }
        let total = (usize::from(b[0]) + 1).min(b.len());
        Self::parse_body(&b[..total], 4, usize::from(b[3]), b[1], b[2])
    }

    /// Parse MODE SENSE(10) data.
    pub fn parse10(b: &[u8]) -> Result<ModeData, ParseError> {
        if b.len() < 8 {
            return Err(ParseError::new(
                "MODE SENSE(10) data",
                "shorter than its header",
            ));
        }
        let total = (usize::from(be16(b, 0)) + 2).min(b.len());
        Self::parse_body(&b[..total], 8, usize::from(be16(b, 6)), b[2], b[3])
    }

    fn parse_body(
        b: &[u8],
        header: usize,
        bd_len: usize,
        medium_type: u8,
        device_specific: u8,
    ) -> Result<ModeData, ParseError> {
        let bd_end = header + bd_len;
        if bd_end > b.len() {
            return Err(ParseError::new(
                "mode data",
                format!("block descriptor length {bd_len} runs past the data"),
            ));
        }
        let mut blocks = Vec::new();
        let mut at = header;
        while at + 8 <= bd_end {
            blocks.push(BlockDescriptor {
                density: b[at],
                blocks: be24(b, at + 1),
                block_length: be24(b, at + 5),
            });
            at += 8;
        }
        let mut pages = Vec::new();
        let mut at = bd_end;
        while at + 2 <= b.len() {
            let spf = b[at] & 0x40 != 0;
            let (sub, len, hdr) = if spf {
                if at + 4 > b.len() {
                    break;
                }
                (b[at + 1], usize::from(be16(b, at + 2)), 4)
            } else {
                (0, usize::from(b[at + 1]), 2)
            };
            let end = (at + hdr + len).min(b.len());
            pages.push(ModePage {
                code: b[at] & 0x3F,
                subpage: sub,
                bytes: b[at..end].to_vec(),
            });
            at = end;
        }
        Ok(ModeData {
            medium_type,
            device_specific,
            blocks,
            pages,
        })
    }

    /// The page with this code and subpage, if returned.
    pub fn page(&self, code: u8, subpage: u8) -> Option<&ModePage> {
        self.pages
            .iter()
            .find(|p| p.code == code && p.subpage == subpage)
    }

    /// Write protected (tape device-specific parameter bit 7).
    pub fn write_protected(&self) -> bool {
        self.device_specific & 0x80 != 0
    }

    fn body(&self, out: &mut Vec<u8>) {
        for d in &self.blocks {
            out.push(d.density);
            out.extend_from_slice(&d.blocks.to_be_bytes()[1..]);
            out.push(0);
            out.extend_from_slice(&d.block_length.to_be_bytes()[1..]);
        }
        for p in &self.pages {
            let mut bytes = p.bytes.clone();
            if let Some(b0) = bytes.first_mut() {
                *b0 &= 0x7F; // PS is reserved in MODE SELECT
            }
            out.extend_from_slice(&bytes);
        }
    }

    /// Parameter list for MODE SELECT(6): data length 0, medium type 0, WP cleared (the
    /// buffered mode and speed bits are kept).
    pub fn to_select6(&self) -> Vec<u8> {
        let mut out = vec![
            0,
            0,
            self.device_specific & 0x7F,
            (self.blocks.len() * 8) as u8,
        ];
        self.body(&mut out);
        out
    }

    /// Parameter list for MODE SELECT(10).
    pub fn to_select10(&self) -> Vec<u8> {
        let bd = ((self.blocks.len() * 8) as u16).to_be_bytes();
        let mut out = vec![0, 0, 0, self.device_specific & 0x7F, 0, 0, bd[0], bd[1]];
        self.body(&mut out);
        out
    }
}

/// Logical block protection settings (page 0Ah subpage F0h).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct DataProtection {
    /// LBP method: 0 none, 1 Reed-Solomon CRC, 2 CRC32C.
    pub method: u8,
    /// Protection information length in bytes (4 for CRC32C).
    pub length: u8,
    /// Protect on write: the drive checks the CRC the host appends.
    pub lbp_w: bool,
    /// Protect on read: the drive appends the CRC to each record it returns.
    pub lbp_r: bool,
}

/// LBP method CRC32C.
pub const LBP_METHOD_CRC32C: u8 = 0x02;

impl DataProtection {
    /// Decode from the page (header included).
    pub fn from_page(p: &ModePage) -> DataProtection {
        DataProtection {
            method: p.byte(4),
            length: p.byte(5) & 0x3F,
            lbp_w: p.byte(6) & 0x80 != 0,
            lbp_r: p.byte(6) & 0x40 != 0,
        }
    }

    /// Write the settings into the page bytes (keeping the other bits).
    pub fn apply(&self, p: &mut ModePage) {
        if p.bytes.len() < 8 {
            p.bytes.resize(8, 0);
        }
        p.bytes[4] = self.method;
        p.bytes[5] = (p.bytes[5] & 0xC0) | (self.length & 0x3F);
        p.bytes[6] = (p.bytes[6] & 0x3F)
            | if self.lbp_w { 0x80 } else { 0 }
            | if self.lbp_r { 0x40 } else { 0 };
    }

    /// CRC32C on write and read.
    pub fn crc32c() -> DataProtection {
        DataProtection {
            method: LBP_METHOD_CRC32C,
            length: 4,
            lbp_w: true,
            lbp_r: true,
        }
    }

    /// Whether CRC32C protection is on in both directions.
    pub fn is_crc32c(&self) -> bool {
        self.method == LBP_METHOD_CRC32C && self.length == 4 && self.lbp_w && self.lbp_r
    }
}

/// Data compression page 0Fh: DCE (compress on write), DDE (decompress on read).
pub fn compression(p: &ModePage) -> (bool, bool) {
    (p.byte(2) & 0x80 != 0, p.byte(3) & 0x80 != 0)
}

/// Set DCE in page 0Fh.
pub fn set_compression(p: &mut ModePage, on: bool) {
    if p.bytes.len() < 4 {
        p.bytes.resize(4, 0);
    }
    p.bytes[2] = (p.bytes[2] & 0x7F) | if on { 0x80 } else { 0 };
}

/// Device configuration page 10h: the "select data compression algorithm" byte (14).
pub fn device_configuration_compression(p: &ModePage) -> u8 {
    p.byte(14)
}

/// Medium configuration page 1Dh on a drive: WORM mode bit.
pub fn medium_is_worm(p: &ModePage) -> bool {
    p.byte(2) & 0x01 != 0
}

/// Element address assignment page 1Dh on a changer.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct ElementAddressAssignment {
    /// First medium transport element and count.
    pub transport: (u16, u16),
    /// First storage element and count.
    pub storage: (u16, u16),
    /// First import/export element and count.
    pub import_export: (u16, u16),
    /// First data transfer element and count.
    pub data_transfer: (u16, u16),
}

impl ElementAddressAssignment {
    /// Decode page 1Dh (header included).
    pub fn from_page(p: &ModePage) -> Result<ElementAddressAssignment, ParseError> {
        if p.bytes.len() < 18 {
            return Err(ParseError::new(
                "element address assignment page",
                format!("{} bytes, need 18", p.bytes.len()),
            ));
        }
        let b = &p.bytes;
        Ok(ElementAddressAssignment {
            transport: (be16(b, 2), be16(b, 4)),
            storage: (be16(b, 6), be16(b, 8)),
            import_export: (be16(b, 10), be16(b, 12)),
            data_transfer: (be16(b, 14), be16(b, 16)),
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// MODE SENSE(6) data as tgt returns it: header, one block descriptor, page 0Fh.
    fn sense6() -> Vec<u8> {
        let mut b = vec![0, 0, 0x10, 8];
        b.extend_from_slice(&[0x00, 0, 0, 0, 0, 0, 0x02, 0x00]); // density 0, 512-byte blocks
        b.extend_from_slice(&[0x8F, 0x0E, 0x40, 0x80, 0, 0, 0, 1, 0, 0, 0, 1, 0, 0, 0, 0]);
        b[0] = (b.len() - 1) as u8;
        b
    }

    #[test]
    fn parse6_header_block_descriptor_and_page() {
        let m = ModeData::parse6(&sense6()).unwrap();
        assert_eq!(m.device_specific, 0x10);
        assert!(!m.write_protected());
        assert_eq!(
            m.blocks,
            vec![BlockDescriptor {
                density: 0,
                blocks: 0,
                block_length: 512
            }]
        );
        let p = m.page(PAGE_COMPRESSION, 0).unwrap();
        assert_eq!(p.bytes.len(), 16);
        assert_eq!(compression(p), (false, true));
    }

    #[test]
    fn select6_clears_ps_and_lengths_and_round_trips() {
        let mut m = ModeData::parse6(&sense6()).unwrap();
        m.blocks[0].block_length = 0; // variable
        let mut p = m.pages[0].clone();
        set_compression(&mut p, true);
        m.pages[0] = p;
        let s = m.to_select6();
        assert_eq!(s[0], 0, "mode data length is reserved in MODE SELECT");
        assert_eq!(s[3], 8);
        assert_eq!(s[12] & 0x80, 0, "PS bit must be cleared");
        let mut again = s.clone();
        again[0] = (again.len() - 1) as u8;
        let back = ModeData::parse6(&again).unwrap();
        assert_eq!(back.blocks[0].block_length, 0);
        assert!(compression(&back.pages[0]).0);
        assert_eq!(mode_select6(s.len() as u8), [0x15, 0x10, 0, 0, 28, 0]);
    }

    #[test]
    fn parse10_with_subpage_lbp() {
        let mut b = vec![0, 0, 0, 0x10, 0, 0, 0, 0];
        let mut page = vec![0x4A, 0xF0, 0x00, 0x1C];
        page.resize(0x1C + 4, 0);
        b.extend_from_slice(&page);
        let l = ((b.len() - 2) as u16).to_be_bytes();
        b[0] = l[0];
        b[1] = l[1];
        let mut m = ModeData::parse10(&b).unwrap();
        assert!(m.blocks.is_empty());
        let p = m
            .page(PAGE_CONTROL, SUBPAGE_DATA_PROTECTION)
            .unwrap()
            .clone();
        assert_eq!(DataProtection::from_page(&p), DataProtection::default());
        let mut p2 = p.clone();
        DataProtection::crc32c().apply(&mut p2);
        assert!(DataProtection::from_page(&p2).is_crc32c());
        assert_eq!((p2.byte(4), p2.byte(5), p2.byte(6)), (2, 4, 0xC0));
        m.pages = vec![p2];
        let s = m.to_select10();
        assert_eq!(&s[..8], &[0, 0, 0, 0x10, 0, 0, 0, 0]);
        assert_eq!(s[8], 0x4A);
        assert_eq!(s.len(), 8 + 32);
    }

    #[test]
    fn malformed_mode_data_is_an_error_not_a_panic() {
        assert!(ModeData::parse6(&[3, 0, 0]).is_err());
        assert!(ModeData::parse6(&[3, 0, 0, 200]).is_err());
        assert!(ModeData::parse10(&[0, 6, 0, 0, 0, 0, 0]).is_err());
        // truncated page: kept as far as it goes
        let m = ModeData::parse6(&[5, 0, 0, 0, 0x0F, 0x0E]).unwrap();
        assert_eq!(m.pages[0].bytes.len(), 2);
        assert_eq!(compression(&m.pages[0]), (false, false));
    }

    #[test]
    fn element_address_assignment_of_the_rig() {
        // tgt rig: picker 1, slots 1024x8, I/E 768x4, drives 256x2
        let mut p = vec![0x1D, 0x12];
        for v in [1u16, 1, 1024, 8, 768, 4, 256, 2] {
            p.extend_from_slice(&v.to_be_bytes());
        }
        p.extend_from_slice(&[0, 0]);
        let page = ModePage {
            code: 0x1D,
            subpage: 0,
            bytes: p,
        };
        let e = ElementAddressAssignment::from_page(&page).unwrap();
        assert_eq!(e.transport, (1, 1));
        assert_eq!(e.storage, (1024, 8));
        assert_eq!(e.import_export, (768, 4));
        assert_eq!(e.data_transfer, (256, 2));
        let short = ModePage {
            code: 0x1D,
            subpage: 0,
            bytes: vec![0x1D, 2, 0, 0],
        };
        assert!(ElementAddressAssignment::from_page(&short).is_err());
    }
}
