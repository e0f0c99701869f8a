//! SCSI sense data (fixed 70h/71h and descriptor 72h/73h formats) and the mapping of what the
//! Linux `st` driver returns (an errno, never the sense) onto ABI sense.

use reel_plugin_abi::sdk::Fault;
use reel_plugin_abi::{
    REEL_E_INTERNAL, REEL_E_INVALID_ARG, REEL_E_TRANSPORT, REEL_FLAG_DEFERRED, REEL_FLAG_EOM,
    REEL_FLAG_FILEMARK, REEL_FLAG_ILI, REEL_FLAG_SENSE_VALID, asc, sense_key,
};

/// Parsed sense data: key, ASC/ASCQ, the stream bits and the INFORMATION field.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Sense {
    /// Sense key.
    pub key: u8,
    /// Additional sense code.
    pub asc: u8,
    /// Additional sense code qualifier.
    pub ascq: u8,
    /// FILEMARK bit.
    pub filemark: bool,
    /// EOM bit.
    pub eom: bool,
    /// ILI bit.
    pub ili: bool,
    /// Deferred error (response code 71h/73h).
    pub deferred: bool,
    /// INFORMATION, when valid.
    pub information: Option<i64>,
}

impl Sense {
    /// Parse sense bytes; `None` when they are too short or not a known format.
    pub fn parse(b: &[u8]) -> Option<Sense> {
        let code = *b.first()? & 0x7F;
        match code {
            0x70 | 0x71 => {
                if b.len() < 3 {
                    return None;
                }
                let info = (b[0] & 0x80 != 0 && b.len() >= 7)
                    .then(|| i32::from_be_bytes([b[3], b[4], b[5], b[6]]) as i64);
                Some(Sense {
                    key: b[2] & 0x0F,
                    asc: b.get(12).copied().unwrap_or(0),
                    ascq: b.get(13).copied().unwrap_or(0),
                    filemark: b[2] & 0x80 != 0,
                    eom: b[2] & 0x40 != 0,
                    ili: b[2] & 0x20 != 0,
                    deferred: code == 0x71,
                    information: info,
                })
            }
            0x72 | 0x73 => {
                if b.len() < 4 {
                    return None;
                }
                let mut s = Sense {
                    key: b[1] & 0x0F,
                    asc: b[2],
                    ascq: b[3],
                    deferred: code == 0x73,
                    ..Sense::default()
                };
                let total = (8 + b.get(7).copied().unwrap_or(0) as usize).min(b.len());
                let mut i = 8;
                while i + 2 <= total {
                    let kind = b[i];
                    let len = b[i + 1] as usize;
                    let d = &b[i..(i + 2 + len).min(total)];
                    match kind {
                        0x00 if d.len() >= 12 && d[2] & 0x80 != 0 => {
                            let mut v = [0u8; 8];
                            v.copy_from_slice(&d[4..12]);
                            s.information = Some(i64::from_be_bytes(v));
                        }
                        0x04 if d.len() >= 4 => {
                            s.filemark = d[3] & 0x80 != 0;
                            s.eom = d[3] & 0x40 != 0;
                            s.ili = d[3] & 0x20 != 0;
                        }
                        _ => {}
                    }
                    i += 2 + len;
                }
                Some(s)
            }
            _ => None,
        }
    }

    /// `KEY/ASC/ASCQ` with the stream bits, for messages.
    pub fn describe(&self) -> String {
        let mut s = format!("{:X}/{:02X}/{:02X}", self.key, self.asc, self.ascq);
        for (on, name) in [
            (self.filemark, " FILEMARK"),
            (self.eom, " EOM"),
            (self.ili, " ILI"),
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

    /// The ABI status flags this sense carries.
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
        if self.deferred {
            f |= REEL_FLAG_DEFERRED;
        }
        f
    }

    /// A CHECK CONDITION fault carrying this sense, with `what` as context.
    pub fn fault(&self, what: &str) -> Fault {
        let mut f = Fault::check(
            self.key,
            (self.asc, self.ascq),
            format!(
                "{what}: sense {}{}",
                self.describe(),
                advice(self.key, self.asc, self.ascq)
            ),
        )
        .with_flags(self.flags());
        if let Some(i) = self.information {
            f = f.with_residue(i);
        }
        f
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

/// Map an errno from `st`/`sg` for an operation that has no better source of sense.
///
/// `what` names the operation and the device node, for the message.
pub fn errno_fault(errno: nix::errno::Errno, what: &str) -> Fault {
    use nix::errno::Errno as E;
    match errno {
        E::ENOMEDIUM => Fault::check(
            sense_key::NOT_READY,
            asc::MEDIUM_NOT_PRESENT,
            format!("{what}: no medium (ENOMEDIUM); move a cartridge into the drive and load it"),
        ),
        E::EACCES | E::EROFS => Fault::check(
            sense_key::DATA_PROTECT,
            asc::WRITE_PROTECTED,
            format!("{what}: write protected ({errno}); use a writable cartridge"),
        ),
        E::ENOSPC => Fault::check(
            sense_key::VOLUME_OVERFLOW,
            asc::END_OF_MEDIUM,
            format!(
                "{what}: end of medium (ENOSPC); nothing was written, continue on another cartridge"
            ),
        )
        .with_flags(REEL_FLAG_EOM),
        E::EIO => Fault::check(
            sense_key::MEDIUM_ERROR,
            asc::NONE,
            format!("{what}: I/O error (EIO) from st; the kernel log (dmesg) has the sense"),
        ),
        E::ENOMEM => Fault::check(
            sense_key::NO_SENSE,
            asc::NONE,
            format!(
                "{what}: the record is longer than the buffer (ENOMEM from st, which skipped it); \
                 read with a buffer of the drive's maximum record size"
            ),
        )
        .with_flags(REEL_FLAG_ILI),
        E::EINVAL | E::EOVERFLOW => Fault::code(
            REEL_E_INVALID_ARG,
            format!(
                "{what}: st refused the request ({errno}); check the record size against the drive's block limits"
            ),
        ),
        E::EBUSY => Fault::code(
            REEL_E_TRANSPORT,
            format!("{what}: device busy (EBUSY); another process has it open exclusively"),
        ),
        E::ENXIO | E::ENODEV | E::ENOENT => Fault::code(
            REEL_E_TRANSPORT,
            format!(
                "{what}: device gone ({errno}); check that the drive is still attached and reopen the library"
            ),
        ),
        E::ETIMEDOUT => Fault::code(
            REEL_E_TRANSPORT,
            format!("{what}: command timed out; check the drive and the transport"),
        ),
        E::EPERM => Fault::code(
            REEL_E_INTERNAL,
            format!("{what}: permission denied (EPERM); run with access to the st/sg nodes"),
        ),
        other => Fault::code(REEL_E_INTERNAL, format!("{what}: unexpected error {other}")),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use nix::errno::Errno;
    use reel_plugin_abi::{REEL_E_CHECK_CONDITION, REEL_E_INVALID_ARG, REEL_FLAG_RESIDUE_VALID};

    fn has_residue(f: &Fault) -> bool {
        f.flags & REEL_FLAG_RESIDUE_VALID != 0
    }

    #[test]
    fn fixed_sense_with_ili_and_negative_information() {
        // READ 500 of a 2000-byte record: NO SENSE, ILI, INFO = -1500.
        let mut b = [0u8; 18];
        b[0] = 0xF0;
        b[2] = 0x20;
        b[3..7].copy_from_slice(&(-1500i32).to_be_bytes());
        b[7] = 10;
        let s = Sense::parse(&b).unwrap();
        assert_eq!(s.key, 0);
        assert!(s.ili && !s.filemark && !s.eom);
        assert_eq!(s.information, Some(-1500));
        let f = s.fault("read");
        assert_eq!(f.code, REEL_E_CHECK_CONDITION);
        assert_eq!(f.residue, -1500);
        assert!(f.flags & REEL_FLAG_ILI != 0 && has_residue(&f));
    }

    #[test]
    fn fixed_sense_blank_check_eod() {
        let mut b = [0u8; 18];
        b[0] = 0x70;
        b[2] = 0x08 | 0x40;
        b[12] = 0x00;
        b[13] = 0x05;
        let s = Sense::parse(&b).unwrap();
        assert_eq!((s.key, s.asc, s.ascq), (8, 0, 5));
        assert!(s.eom);
        assert_eq!(
            s.information, None,
            "INFO without the VALID bit is not reported"
        );
        assert!(s.fault("read").message.contains("end of data"));
    }

    #[test]
    fn descriptor_sense_with_information_and_stream_bits() {
        let mut b = vec![0x72, 0x00, 0x00, 0x01, 0, 0, 0, 18];
        b.extend_from_slice(&[0x00, 0x0A, 0x80, 0]);
        b.extend_from_slice(&7i64.to_be_bytes());
        b.extend_from_slice(&[0x04, 0x02, 0, 0x80]);
        let s = Sense::parse(&b).unwrap();
        assert_eq!((s.key, s.asc, s.ascq), (0, 0, 1));
        assert!(s.filemark);
        assert_eq!(s.information, Some(7));
        let d = Sense::parse(&[0x73, 0x03, 0x11, 0x00, 0, 0, 0, 0]).unwrap();
        assert!(d.deferred);
        assert!(d.flags() & REEL_FLAG_DEFERRED != 0);
    }

    #[test]
    fn garbage_sense_is_rejected() {
        assert_eq!(Sense::parse(&[]), None);
        assert_eq!(Sense::parse(&[0x00, 1, 2, 3]), None);
        assert_eq!(Sense::parse(&[0x70, 0]), None);
    }

    #[test]
    fn errno_table() {
        let cases: &[(Errno, i32, u8, (u8, u8))] = &[
            (Errno::ENOMEDIUM, REEL_E_CHECK_CONDITION, 2, (0x3A, 0)),
            (Errno::EACCES, REEL_E_CHECK_CONDITION, 7, (0x27, 0)),
            (Errno::EROFS, REEL_E_CHECK_CONDITION, 7, (0x27, 0)),
            (Errno::ENOSPC, REEL_E_CHECK_CONDITION, 0xD, (0, 2)),
            (Errno::EIO, REEL_E_CHECK_CONDITION, 3, (0, 0)),
            (Errno::ENOMEM, REEL_E_CHECK_CONDITION, 0, (0, 0)),
            (Errno::EINVAL, REEL_E_INVALID_ARG, 0, (0, 0)),
            (Errno::EBUSY, REEL_E_TRANSPORT, 0, (0, 0)),
            (Errno::ENODEV, REEL_E_TRANSPORT, 0, (0, 0)),
            (Errno::EPERM, REEL_E_INTERNAL, 0, (0, 0)),
        ];
        for (e, code, key, (a, q)) in cases {
            let f = errno_fault(*e, "op /dev/nst0");
            assert_eq!(f.code, *code, "{e}");
            assert_eq!((f.sense_key, f.asc, f.ascq), (*key, *a, *q), "{e}");
            assert!(f.message.starts_with("op /dev/nst0"), "{}", f.message);
        }
        assert!(errno_fault(Errno::ENOSPC, "w").flags & REEL_FLAG_EOM != 0);
        assert!(errno_fault(Errno::ENOMEM, "r").flags & REEL_FLAG_ILI != 0);
    }
}
