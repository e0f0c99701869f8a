//! Sense data as a drive or changer returns it: fixed format (70h/71h) and descriptor format
//! (72h/73h), with the stream bits (FILEMARK, EOM, ILI) and the INFORMATION field kept.
//!
//! Tape drives put the residue of a READ, WRITE, SPACE or WRITE FILEMARKS in INFORMATION
//! (a signed count: bytes, records or filemarks not processed). PBS throws it away; reel keeps
//! it and passes it to the engine through the ABI status.

use reel_plugin_abi::sdk::Fault;
use reel_plugin_abi::{
    REEL_FLAG_DEFERRED, REEL_FLAG_EOM, REEL_FLAG_FILEMARK, REEL_FLAG_ILI, REEL_FLAG_RESIDUE_VALID,
    REEL_FLAG_SENSE_VALID, asc, sense_key,
};

/// Decoded sense data.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Sense {
    /// Sense key (low nibble).
    pub key: u8,
    /// Additional sense code.
    pub asc: u8,
    /// Additional sense code qualifier.
    pub ascq: u8,
    /// The command ran into a filemark.
    pub filemark: bool,
    /// End of medium or early warning (or beginning of partition on a backward SPACE).
    pub eom: bool,
    /// Incorrect length: the record was not the length requested.
    pub ili: bool,
    /// INFORMATION field when its VALID bit is set (signed on tape).
    pub information: Option<i64>,
    /// The error belongs to an earlier buffered command (71h/73h).
    pub deferred: bool,
}

impl Sense {
    /// Parse fixed or descriptor format sense. `None` when the bytes hold no recognisable sense.
    pub fn parse(bytes: &[u8]) -> Option<Sense> {
        let code = *bytes.first()? & 0x7F;
        match code {
            0x70 | 0x71 => Self::parse_fixed(bytes, code == 0x71),
            0x72 | 0x73 => Self::parse_descriptor(bytes, code == 0x73),
            _ => None,
        }
    }

    fn parse_fixed(b: &[u8], deferred: bool) -> Option<Sense> {
        let flags = *b.get(2)?;
        let information = if b[0] & 0x80 != 0 && b.len() >= 7 {
            Some(i64::from(i32::from_be_bytes([b[3], b[4], b[5], b[6]])))
        } else {
            None
        };
        Some(Sense {
            key: flags & 0x0F,
            asc: b.get(12).copied().unwrap_or(0),
            ascq: b.get(13).copied().unwrap_or(0),
            filemark: flags & 0x80 != 0,
            eom: flags & 0x40 != 0,
            ili: flags & 0x20 != 0,
            information,
            deferred,
        })
    }

    fn parse_descriptor(b: &[u8], deferred: bool) -> Option<Sense> {
        let mut s = Sense {
            key: *b.get(1)? & 0x0F,
            asc: b.get(2).copied().unwrap_or(0),
            ascq: b.get(3).copied().unwrap_or(0),
            deferred,
            ..Sense::default()
        };
        let additional = b.get(7).copied().unwrap_or(0) as usize;
        let end = (8 + additional).min(b.len());
        let mut at = 8;
        while at + 2 <= end {
            let kind = b[at];
            let len = b[at + 1] as usize;
            let d = &b[at..(at + 2 + len).min(end)];
            match kind {
                // Information descriptor: VALID bit, 8-byte INFORMATION.
                0x00 if d.len() >= 12 && d[2] & 0x80 != 0 => {
                    let mut v = [0u8; 8];
                    v.copy_from_slice(&d[4..12]);
                    s.information = Some(i64::from_be_bytes(v));
                }
                // Stream commands descriptor: FILEMARK, EOM, ILI.
                0x04 if d.len() >= 4 => {
                    s.filemark = d[3] & 0x80 != 0;
                    s.eom = d[3] & 0x40 != 0;
                    s.ili = d[3] & 0x20 != 0;
                }
                _ => {}
            }
            at += 2 + len;
        }
        Some(s)
    }

    /// Whether the key and ASC/ASCQ are the given ones.
    pub fn is(&self, key: u8, asc: (u8, u8)) -> bool {
        self.key == key && (self.asc, self.ascq) == asc
    }

    /// The `REEL_FLAG_*` bits this sense carries (SENSE_VALID always).
    pub fn flags(&self) -> u32 {
        let mut f = REEL_FLAG_SENSE_VALID;
        if self.filemark {
            f |= REEL_FLAG_FILEMARK;
        }
        if self.eom {
            f |= REEL_FLAG_EOM;
        }
        if self.ili {
            f |= REEL_FLAG_ILI;
        }
        if self.information.is_some() {
            f |= REEL_FLAG_RESIDUE_VALID;
        }
        if self.deferred {
            f |= REEL_FLAG_DEFERRED;
        }
        f
    }

    /// A short human description of the condition, for messages and logs.
    pub fn describe(&self) -> String {
        let text = describe_asc(self.key, self.asc, self.ascq);
        let mut s = format!(
            "sense {:X}/{:02X}/{:02X} ({text})",
            self.key, self.asc, self.ascq
        );
        for (on, name) in [
            (self.filemark, " FILEMARK"),
            (self.eom, " EOM"),
            (self.ili, " ILI"),
            (self.deferred, " DEFERRED"),
        ] {
            if on {
                s.push_str(name);
            }
        }
        if let Some(i) = self.information {
            s.push_str(&format!(" info={i}"));
        }
        s
    }

    /// What an operator should do about this condition, as a message suffix starting with
    /// "; " (empty when there is nothing useful to say).
    pub fn advice(&self) -> &'static str {
        advice(self.key, self.asc, self.ascq)
    }

    /// The ABI fault for a CHECK CONDITION with this sense: key, ASC/ASCQ, the stream flags
    /// and the INFORMATION residue, with `message` as its text.
    pub fn fault(&self, message: impl Into<String>) -> Fault {
        let mut f =
            Fault::check(self.key, (self.asc, self.ascq), message.into()).with_flags(self.flags());
        if let Some(i) = self.information {
            f = f.with_residue(i);
        }
        f
    }

    /// [`Sense::fault`] with the message "`what`: the condition; what to do", for a command
    /// named by `what` (and its device).
    pub fn fault_for(&self, what: &str) -> Fault {
        self.fault(format!("{what}: {}{}", self.describe(), self.advice()))
    }

    /// Build fixed-format sense bytes (used by the fake target and in tests).
    pub fn to_fixed(&self) -> Vec<u8> {
        let mut b = vec![0u8; 18];
        b[0] = if self.deferred { 0x71 } else { 0x70 };
        if let Some(i) = self.information {
            b[0] |= 0x80;
            b[3..7].copy_from_slice(&(i as i32).to_be_bytes());
        }
        b[2] = self.key & 0x0F
            | if self.filemark { 0x80 } else { 0 }
            | if self.eom { 0x40 } else { 0 }
            | if self.ili { 0x20 } else { 0 };
        b[7] = 10;
        b[12] = self.asc;
        b[13] = self.ascq;
        b
    }
}

/// What an operator should do about a sense, as a message suffix ("" when nothing useful).
pub fn advice(key: u8, a: u8, q: u8) -> &'static str {
    match (key, (a, q)) {
        (sense_key::NOT_READY, asc::MEDIUM_NOT_PRESENT) => {
            "; no cartridge in the drive: move one in (library_move) and load it"
        }
        (sense_key::NOT_READY, _) => "; the drive is not ready: retry after it finishes loading",
        (sense_key::DATA_PROTECT, _) => {
            "; the cartridge is write protected or WORM: use another cartridge"
        }
        (sense_key::ILLEGAL_REQUEST, asc::INVALID_OPCODE) => {
            "; the device does not implement this command"
        }
        (sense_key::ILLEGAL_REQUEST, asc::DESTINATION_FULL) => {
            "; the destination element already holds a cartridge: take the inventory again"
        }
        (sense_key::ILLEGAL_REQUEST, asc::SOURCE_EMPTY) => {
            "; the source element is empty: take the inventory again"
        }
        (sense_key::ILLEGAL_REQUEST, asc::MEDIUM_REMOVAL_PREVENTED) => {
            "; the drive holds the cartridge (PREVENT MEDIUM REMOVAL): unload it first"
        }
        (sense_key::BLANK_CHECK, _) => "; end of data",
        (sense_key::VOLUME_OVERFLOW, _) => {
            "; physical end of medium: nothing was written, continue on another cartridge"
        }
        (sense_key::MEDIUM_ERROR, _) => {
            "; medium error: retire the cartridge after copying what is readable"
        }
        (sense_key::HARDWARE_ERROR, _) => "; hardware error: check the drive, then retry",
        _ => "",
    }
}

/// Text for the sense codes a tape plugin meets most; a generic text otherwise.
fn describe_asc(key: u8, asc: u8, ascq: u8) -> &'static str {
    match (asc, ascq) {
        (0x00, 0x00) => match key {
            0x0 => "no additional sense",
            0x8 => "blank check",
            _ => "no additional sense code",
        },
        (0x00, 0x01) => "filemark detected",
        (0x00, 0x02) => "end of partition/medium detected (early warning)",
        (0x00, 0x04) => "beginning of partition/medium detected",
        (0x00, 0x05) => "end of data detected",
        (0x04, 0x00) => "logical unit not ready, cause not reportable",
        (0x04, 0x01) => "logical unit is becoming ready",
        (0x04, 0x02) => "logical unit not ready, initializing command required",
        (0x04, 0x03) => "logical unit not ready, manual intervention required",
        (0x0C, 0x00) => "write error",
        (0x10, 0x01) => "logical block guard check failed (LBP CRC)",
        (0x11, 0x00) => "unrecovered read error",
        (0x14, 0x03) => "end of data not found",
        (0x15, 0x01) => "mechanical positioning error",
        (0x1A, 0x00) => "parameter list length error",
        (0x20, 0x00) => "invalid command operation code",
        (0x21, 0x01) => "invalid element address",
        (0x24, 0x00) => "invalid field in CDB",
        (0x26, 0x00) => "invalid field in parameter list",
        (0x27, 0x00) => "write protected",
        (0x28, 0x00) => "not ready to ready change, medium may have changed",
        (0x29, _) => "power on, reset or bus device reset occurred",
        (0x2A, _) => "parameters changed",
        (0x30, 0x00) => "incompatible medium installed",
        (0x30, 0x01) => "cannot read medium, unknown format",
        (0x30, 0x0C) => "WORM medium, overwrite attempted",
        (0x31, 0x00) => "medium format corrupted",
        (0x3A, _) => "medium not present",
        (0x3B, 0x0D) => "medium destination element full",
        (0x3B, 0x0E) => "medium source element empty",
        (0x3B, 0x0F) => "end of medium reached",
        (0x44, 0x00) => "internal target failure",
        (0x50, 0x00) => "write append error",
        (0x52, 0x00) => "cartridge fault",
        (0x53, 0x00) => "media load or eject failed",
        (0x53, 0x02) => "medium removal prevented",
        _ => "see SPC-4 annex for this code",
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn fixed_format_keeps_bits_and_signed_information() {
        // READ of a 2000-byte record with 500 requested: ILI, INFORMATION = -1500.
        let s = Sense {
            key: 0,
            ili: true,
            information: Some(-1500),
            ..Sense::default()
        };
        let parsed = Sense::parse(&s.to_fixed()).unwrap();
        assert_eq!(parsed, s);
        assert_eq!(
            parsed.flags(),
            REEL_FLAG_SENSE_VALID | REEL_FLAG_ILI | REEL_FLAG_RESIDUE_VALID
        );
    }

    #[test]
    fn fixed_without_valid_bit_has_no_information() {
        let mut b = Sense {
            key: 8,
            eom: true,
            information: Some(7),
            ..Sense::default()
        }
        .to_fixed();
        b[0] &= 0x7F;
        let s = Sense::parse(&b).unwrap();
        assert_eq!(s.information, None);
        assert!(s.eom);
        assert_eq!(s.key, 8);
    }

    #[test]
    fn deferred_fixed_sense() {
        let b = Sense {
            key: 3,
            asc: 0x0C,
            deferred: true,
            ..Sense::default()
        }
        .to_fixed();
        let s = Sense::parse(&b).unwrap();
        assert!(s.deferred);
        assert_ne!(s.flags() & REEL_FLAG_DEFERRED, 0);
    }

    #[test]
    fn descriptor_format_with_information_and_stream_descriptors() {
        let mut b = vec![0x72, 0x00, 0x00, 0x01, 0, 0, 0, 0];
        // information descriptor: type 0, len 0x0A, VALID, info = 3
        b.extend_from_slice(&[0x00, 0x0A, 0x80, 0x00, 0, 0, 0, 0, 0, 0, 0, 3]);
        // stream commands descriptor: type 4, len 2, reserved, FILEMARK
        b.extend_from_slice(&[0x04, 0x02, 0x00, 0x80]);
        b[7] = (b.len() - 8) as u8;
        let s = Sense::parse(&b).unwrap();
        assert_eq!((s.key, s.asc, s.ascq), (0, 0, 1));
        assert!(s.filemark && !s.eom && !s.ili);
        assert_eq!(s.information, Some(3));
        assert!(!s.deferred);
        // truncated descriptor list does not panic and keeps what is complete
        let s2 = Sense::parse(&b[..14]).unwrap();
        assert_eq!(s2.information, None);
    }

    #[test]
    fn descriptor_deferred_and_negative_information() {
        let mut b = vec![0x73, 0x0D, 0x00, 0x02, 0, 0, 0, 12];
        b.extend_from_slice(&[0x00, 0x0A, 0x80, 0x00]);
        b.extend_from_slice(&(-4096i64).to_be_bytes());
        let s = Sense::parse(&b).unwrap();
        assert!(s.deferred);
        assert_eq!(s.key, 0x0D);
        assert_eq!(s.information, Some(-4096));
    }

    #[test]
    fn garbage_is_not_sense() {
        assert_eq!(Sense::parse(&[]), None);
        assert_eq!(Sense::parse(&[0x00, 0x01]), None);
        assert_eq!(Sense::parse(&[0x70]), None);
    }

    #[test]
    fn describe_names_the_condition() {
        let s = Sense {
            key: 8,
            asc: 0,
            ascq: 5,
            eom: true,
            ..Sense::default()
        };
        let d = s.describe();
        assert!(d.contains("8/00/05"), "{d}");
        assert!(d.contains("end of data"), "{d}");
        assert!(d.contains("EOM"), "{d}");
    }

    #[test]
    fn the_fault_carries_the_sense_its_residue_and_what_to_do() {
        use reel_plugin_abi::REEL_E_CHECK_CONDITION;
        // READ at end of data: BLANK CHECK 8/00/05, the whole request as the residue
        let s = Sense {
            key: 8,
            ascq: 5,
            information: Some(65536),
            ..Sense::default()
        };
        let f = s.fault_for("READ on /dev/nst0");
        assert_eq!(f.code, REEL_E_CHECK_CONDITION);
        assert_eq!((f.sense_key, f.asc, f.ascq), (8, 0, 5));
        assert_eq!(f.residue, 65536);
        assert_ne!(f.flags & REEL_FLAG_RESIDUE_VALID, 0);
        assert!(
            f.message.starts_with("READ on /dev/nst0: sense 8/00/05"),
            "{}",
            f.message
        );
        assert!(f.message.ends_with("; end of data"), "{}", f.message);
        // no residue, no RESIDUE_VALID; a condition without advice adds nothing
        let s = Sense {
            key: 0,
            eom: true,
            ascq: 2,
            ..Sense::default()
        };
        let f = s.fault("early warning");
        assert_eq!(f.flags & REEL_FLAG_RESIDUE_VALID, 0);
        assert_ne!(f.flags & REEL_FLAG_EOM, 0);
        assert_eq!(s.advice(), "");
        assert!(
            Sense {
                key: 5,
                asc: 0x3B,
                ascq: 0x0D,
                ..Sense::default()
            }
            .advice()
            .contains("take the inventory again")
        );
    }
}
