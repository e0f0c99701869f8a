//! The BOT label: the first record of every reel cartridge (block 0), followed by one filemark,
//! so the first container is tape file 1 and starts at block 2. The same facts go into MAM
//! attributes ([`Label::mam_attributes`]) so a library can read them without threading tape.

use reel_plugin_abi::types::mam;
use serde::{Deserialize, Serialize};
use uuid::Uuid;

use super::error::FormatError;
use super::wire::{self, Cursor};

/// Magic of the label record.
pub const LABEL_MAGIC: &[u8; 8] = b"REELLABL";
/// Longest barcode, in bytes (the SMC volume tag field).
pub const MAX_BARCODE_LEN: usize = 32;
/// Longest pool name, in bytes.
pub const MAX_POOL_LEN: usize = 255;

const STRUCTURE: &str = "label";

/// BOT label record. Written at block 0, followed by one filemark (so the first container is
/// file 1, block 2).
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Label {
    /// The cartridge's barcode (volume tag), 1 to 32 bytes of printable ASCII.
    pub barcode: String,
    /// The pool the cartridge belongs to, 1 to 255 bytes of UTF-8.
    pub pool: String,
    /// Identity of this labelling of the cartridge.
    pub cartridge_uuid: Uuid,
    /// Label epoch: bumped on every relabel, so containers of an earlier life are told apart.
    pub epoch: u64,
    /// When the label was written, seconds since the Unix epoch.
    pub created_unix: u64,
}

impl Label {
    /// Check the fields against the format's limits. Call before writing a label: `encode`
    /// cuts over-long strings instead of failing.
    pub fn validate(&self) -> Result<(), FormatError> {
        validate_barcode(STRUCTURE, &self.barcode)?;
        wire::check_len(STRUCTURE, "pool", &self.pool, 1, MAX_POOL_LEN)
    }

    /// The label record, ready to be written at block 0.
    pub fn encode(&self) -> Vec<u8> {
        let mut body = Vec::with_capacity(64 + self.barcode.len() + self.pool.len());
        body.extend_from_slice(self.cartridge_uuid.as_bytes());
        body.extend_from_slice(&self.epoch.to_le_bytes());
        body.extend_from_slice(&self.created_unix.to_le_bytes());
        wire::put_string(&mut body, &self.barcode, MAX_BARCODE_LEN);
        wire::put_string(&mut body, &self.pool, MAX_POOL_LEN);
        let mut out = Vec::with_capacity(body.len() + wire::ENVELOPE_OVERHEAD);
        wire::seal_as(super::LABEL_VERSION, LABEL_MAGIC, &body, &mut out);
        out
    }

    /// Decode the record read at block 0. Refuses anything that is not an intact reel label.
    pub fn decode(rec: &[u8]) -> Result<Label, FormatError> {
        let body = wire::open_exact(rec, LABEL_MAGIC, STRUCTURE)?;
        let mut c = Cursor::body(body, STRUCTURE);
        let cartridge_uuid = c.uuid("cartridge_uuid")?;
        let epoch = c.u64("epoch")?;
        let created_unix = c.u64("created_unix")?;
        let barcode = c.string("barcode", MAX_BARCODE_LEN)?;
        let pool = c.string("pool", MAX_POOL_LEN)?;
        c.finish()?;
        Ok(Label {
            barcode,
            pool,
            cartridge_uuid,
            epoch,
            created_unix,
        })
    }

    /// Whether the record starts with reel's label magic. Used to tell a damaged reel label
    /// (magic present, decode fails) from a foreign one (another application's tape, which
    /// reel refuses to overwrite).
    pub fn looks_like_reel(rec: &[u8]) -> bool {
        rec.starts_with(LABEL_MAGIC)
    }

    /// The MAM attributes reel writes at labelling time, as (attribute id, value) in the
    /// SPC-4 formats: ASCII fields left-aligned and padded with spaces, TEXT fields padded
    /// with NULs, binary fields big-endian. See docs/FORMAT.md.
    pub fn mam_attributes(&self) -> Vec<(u16, Vec<u8>)> {
        vec![
            (mam::APPLICATION_VENDOR, ascii_field("REEL", 8)),
            (mam::APPLICATION_NAME, ascii_field("reel", 32)),
            (
                mam::APPLICATION_VERSION,
                ascii_field(env!("CARGO_PKG_VERSION"), 8),
            ),
            (
                mam::APPLICATION_FORMAT_VERSION,
                ascii_field(&super::FORMAT_VERSION.to_string(), 16),
            ),
            (mam::BARCODE, ascii_field(&self.barcode, 32)),
            (mam::MEDIA_POOL, text_field(&self.pool, 160)),
            (mam::REEL_LABEL_EPOCH, self.epoch.to_be_bytes().to_vec()),
            (
                mam::REEL_CARTRIDGE_UUID,
                self.cartridge_uuid.as_bytes().to_vec(),
            ),
        ]
    }
}

/// A barcode is 1 to 32 bytes of printable ASCII without spaces.
pub(crate) fn validate_barcode(structure: &'static str, barcode: &str) -> Result<(), FormatError> {
    wire::check_len(structure, "barcode", barcode, 1, MAX_BARCODE_LEN)?;
    if let Some(pos) = barcode.bytes().position(|b| !b.is_ascii_graphic()) {
        return Err(FormatError::InvalidField {
            structure,
            field: "barcode",
            offset: pos,
            reason: format!("{barcode:?} holds a character that is not printable ASCII"),
        });
    }
    Ok(())
}

/// SPC-4 ASCII attribute: left-aligned, space padded, cut to `len` (non-ASCII bytes become `?`).
fn ascii_field(s: &str, len: usize) -> Vec<u8> {
    let mut v: Vec<u8> = s
        .bytes()
        .map(|b| {
            if b.is_ascii_graphic() || b == b' ' {
                b
            } else {
                b'?'
            }
        })
        .take(len)
        .collect();
    v.resize(len, b' ');
    v
}

/// SPC-4 TEXT attribute: UTF-8 cut on a char boundary, NUL padded.
fn text_field(s: &str, len: usize) -> Vec<u8> {
    let mut end = s.len().min(len);
    while !s.is_char_boundary(end) {
        end -= 1;
    }
    let mut v = s.as_bytes()[..end].to_vec();
    v.resize(len, 0);
    v
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    fn sample() -> Label {
        Label {
            barcode: "RL0001L9".into(),
            pool: "archive-a".into(),
            cartridge_uuid: Uuid::from_u128(0x1234_5678_9abc_def0_1234_5678_9abc_def0),
            epoch: 3,
            created_unix: 1_790_000_000,
        }
    }

    #[test]
    fn label_layout_is_as_documented() {
        let rec = sample().encode();
        assert_eq!(&rec[..8], b"REELLABL");
        assert_eq!(u32::from_le_bytes(rec[8..12].try_into().unwrap()), 1);
        let body_len = u32::from_le_bytes(rec[12..16].try_into().unwrap()) as usize;
        // uuid 16 + epoch 8 + created 8 + (2 + 8) barcode + (2 + 9) pool
        assert_eq!(body_len, 16 + 8 + 8 + 10 + 11);
        assert_eq!(rec.len(), 16 + body_len + 4);
        assert_eq!(&rec[16..32], sample().cartridge_uuid.as_bytes());
        assert_eq!(u64::from_le_bytes(rec[32..40].try_into().unwrap()), 3);
        let crc = u32::from_le_bytes(rec[rec.len() - 4..].try_into().unwrap());
        assert_eq!(crc, crc32c::crc32c(&rec[..rec.len() - 4]));
    }

    #[test]
    fn foreign_and_damaged_labels_are_told_apart() {
        let rec = sample().encode();
        assert!(Label::looks_like_reel(&rec));
        let mut damaged = rec.clone();
        damaged[40] ^= 0x01;
        assert!(Label::looks_like_reel(&damaged));
        assert!(matches!(
            Label::decode(&damaged),
            Err(FormatError::Crc { .. })
        ));
        let ltfs = b"VOL1L00001              LTFS".to_vec();
        assert!(!Label::looks_like_reel(&ltfs));
        let err = Label::decode(&ltfs).unwrap_err();
        assert!(matches!(err, FormatError::BadMagic { .. }), "{err}");
        assert!(err.to_string().contains("not written by reel"));
    }

    #[test]
    fn validate_refuses_bad_barcodes_and_pools() {
        let mut l = sample();
        assert!(l.validate().is_ok());
        l.barcode = "HAS SPACE".into();
        assert!(l.validate().is_err());
        l.barcode = "X".repeat(33);
        assert!(l.validate().is_err());
        l.barcode = "OK0001".into();
        l.pool = String::new();
        assert!(l.validate().is_err());
    }

    #[test]
    fn mam_attributes_have_spc4_lengths() {
        let attrs = sample().mam_attributes();
        let get = |id| {
            attrs
                .iter()
                .find(|(a, _)| *a == id)
                .map(|(_, v)| v.clone())
                .unwrap()
        };
        assert_eq!(get(mam::APPLICATION_VENDOR), b"REEL    ");
        assert_eq!(get(mam::BARCODE).len(), 32);
        assert!(get(mam::BARCODE).starts_with(b"RL0001L9 "));
        assert_eq!(get(mam::MEDIA_POOL).len(), 160);
        assert_eq!(get(mam::REEL_LABEL_EPOCH), 3u64.to_be_bytes());
        assert_eq!(
            get(mam::REEL_CARTRIDGE_UUID),
            sample().cartridge_uuid.as_bytes()
        );
    }

    fn arb_label() -> impl Strategy<Value = Label> {
        (
            "[A-Z0-9]{1,32}",
            "\\PC{1,60}",
            any::<u128>(),
            any::<u64>(),
            any::<u64>(),
        )
            .prop_filter("pool fits", |(_, p, ..)| p.len() <= MAX_POOL_LEN)
            .prop_map(|(barcode, pool, u, epoch, created_unix)| Label {
                barcode,
                pool,
                cartridge_uuid: Uuid::from_u128(u),
                epoch,
                created_unix,
            })
    }

    proptest! {
        #[test]
        fn label_round_trips(l in arb_label()) {
            prop_assert!(l.validate().is_ok());
            prop_assert_eq!(Label::decode(&l.encode()).unwrap(), l);
        }

        #[test]
        fn damaged_labels_are_refused(l in arb_label(), cut in any::<prop::sample::Index>(), flip in any::<prop::sample::Index>()) {
            let rec = l.encode();
            let n = cut.index(rec.len());
            prop_assert!(Label::decode(&rec[..n]).is_err());
            let mut bad = rec.clone();
            let bit = flip.index(rec.len() * 8);
            bad[bit / 8] ^= 1 << (bit % 8);
            prop_assert!(Label::decode(&bad).is_err());
        }

        #[test]
        fn arbitrary_bytes_never_panic(bytes in prop::collection::vec(any::<u8>(), 0..300)) {
            let _ = Label::decode(&bytes);
            let mut with_magic = LABEL_MAGIC.to_vec();
            with_magic.extend_from_slice(&bytes);
            let _ = Label::decode(&with_magic);
        }
    }
}
