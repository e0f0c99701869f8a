//! The container header: the first record of every container (tape file). It names the
//! container, the cartridge and label it was written under, and the record size of the data
//! records that follow.

use serde::{Deserialize, Serialize};
use uuid::Uuid;

use super::error::FormatError;
use super::label::{MAX_BARCODE_LEN, MAX_POOL_LEN, validate_barcode};
use super::wire::{self, Cursor};
use super::{MAX_RECORD_SIZE, MIN_RECORD_SIZE};

/// Magic of the container header record.
pub const HEADER_MAGIC: &[u8; 8] = b"REELCHDR";

const STRUCTURE: &str = "container header";

/// First record of every container.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct ContainerHeader {
    /// Identity of this container.
    pub container_uuid: Uuid,
    /// The cartridge label's UUID (ties the container to one labelling of the cartridge).
    pub cartridge_uuid: Uuid,
    /// Barcode of the cartridge.
    pub barcode: String,
    /// Pool of the cartridge.
    pub pool: String,
    /// Size of every data record but the last, in bytes (256 KiB to 8 MiB).
    pub record_size: u32,
    /// Tape file number of this container (1 for the first container after the label).
    pub sequence: u64,
    /// When the container was started, seconds since the Unix epoch.
    pub created_unix: u64,
}

impl ContainerHeader {
    /// Check the fields against the format's limits (barcode, pool, record size).
    pub fn validate(&self) -> Result<(), FormatError> {
        validate_barcode(STRUCTURE, &self.barcode)?;
        wire::check_len(STRUCTURE, "pool", &self.pool, 1, MAX_POOL_LEN)?;
        check_record_size(self.record_size, 0)
    }

    /// The header record.
    pub fn encode(&self) -> Vec<u8> {
        let mut body = Vec::with_capacity(64 + self.barcode.len() + self.pool.len());
        body.extend_from_slice(self.container_uuid.as_bytes());
        body.extend_from_slice(self.cartridge_uuid.as_bytes());
        body.extend_from_slice(&self.record_size.to_le_bytes());
        body.extend_from_slice(&0u32.to_le_bytes());
        body.extend_from_slice(&self.sequence.to_le_bytes());
        body.extend_from_slice(&self.created_unix.to_le_bytes());
        wire::put_string(&mut body, &self.barcode, MAX_BARCODE_LEN);
        wire::put_string(&mut body, &self.pool, MAX_POOL_LEN);
        let mut out = Vec::with_capacity(body.len() + wire::ENVELOPE_OVERHEAD);
        wire::seal_as(super::HEADER_VERSION, HEADER_MAGIC, &body, &mut out);
        out
    }

    /// Decode a header record; refuses damaged, truncated or foreign records and record sizes
    /// outside 256 KiB..8 MiB.
    pub fn decode(rec: &[u8]) -> Result<Self, FormatError> {
        let body = wire::open_exact(rec, HEADER_MAGIC, STRUCTURE)?;
        let mut c = Cursor::body(body, STRUCTURE);
        let container_uuid = c.uuid("container_uuid")?;
        let cartridge_uuid = c.uuid("cartridge_uuid")?;
        let at = c.pos();
        let record_size = c.u32("record_size")?;
        check_record_size(record_size, at)?;
        let at = c.pos();
        let reserved = c.u32("reserved")?;
        if reserved != 0 {
            return Err(c.invalid("reserved", at, format!("is {reserved:#x}, must be 0")));
        }
        let sequence = c.u64("sequence")?;
        let created_unix = c.u64("created_unix")?;
        let barcode = c.string("barcode", MAX_BARCODE_LEN)?;
        let pool = c.string("pool", MAX_POOL_LEN)?;
        c.finish()?;
        Ok(ContainerHeader {
            container_uuid,
            cartridge_uuid,
            barcode,
            pool,
            record_size,
            sequence,
            created_unix,
        })
    }
}

fn check_record_size(record_size: u32, offset: usize) -> Result<(), FormatError> {
    let rs = record_size as usize;
    if !(MIN_RECORD_SIZE..=MAX_RECORD_SIZE).contains(&rs) {
        return Err(FormatError::InvalidField {
            structure: STRUCTURE,
            field: "record_size",
            offset,
            reason: format!(
                "{rs} bytes is outside {MIN_RECORD_SIZE}..={MAX_RECORD_SIZE}; set the record size between 256 KiB and 8 MiB"
            ),
        });
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    pub(crate) fn sample() -> ContainerHeader {
        ContainerHeader {
            container_uuid: Uuid::from_u128(7),
            cartridge_uuid: Uuid::from_u128(9),
            barcode: "RL0001L9".into(),
            pool: "p1".into(),
            record_size: 1 << 20,
            sequence: 1,
            created_unix: 1_790_000_000,
        }
    }

    #[test]
    fn header_layout_is_as_documented() {
        let rec = sample().encode();
        assert_eq!(&rec[..8], b"REELCHDR");
        assert_eq!(&rec[16..32], Uuid::from_u128(7).as_bytes());
        assert_eq!(&rec[32..48], Uuid::from_u128(9).as_bytes());
        assert_eq!(u32::from_le_bytes(rec[48..52].try_into().unwrap()), 1 << 20);
        assert_eq!(u64::from_le_bytes(rec[56..64].try_into().unwrap()), 1);
        assert_eq!(ContainerHeader::decode(&rec).unwrap(), sample());
    }

    #[test]
    fn record_size_out_of_range_is_refused() {
        let mut h = sample();
        h.record_size = 4096;
        assert!(h.validate().is_err());
        let err = ContainerHeader::decode(&h.encode()).unwrap_err();
        match err {
            FormatError::InvalidField { field, offset, .. } => {
                assert_eq!(field, "record_size");
                assert_eq!(offset, 48);
            }
            other => panic!("unexpected {other}"),
        }
    }

    #[test]
    fn a_label_is_not_a_header() {
        let label = crate::format::Label {
            barcode: "A".into(),
            pool: "p".into(),
            cartridge_uuid: Uuid::nil(),
            epoch: 0,
            created_unix: 0,
        };
        assert!(matches!(
            ContainerHeader::decode(&label.encode()),
            Err(FormatError::BadMagic { .. })
        ));
    }

    fn arb_header() -> impl Strategy<Value = ContainerHeader> {
        (
            any::<u128>(),
            any::<u128>(),
            "[A-Z0-9]{1,32}",
            "[a-z0-9-]{1,40}",
            MIN_RECORD_SIZE as u32..=MAX_RECORD_SIZE as u32,
            any::<u64>(),
            any::<u64>(),
        )
            .prop_map(
                |(c, k, barcode, pool, record_size, sequence, created_unix)| ContainerHeader {
                    container_uuid: Uuid::from_u128(c),
                    cartridge_uuid: Uuid::from_u128(k),
                    barcode,
                    pool,
                    record_size,
                    sequence,
                    created_unix,
                },
            )
    }

    proptest! {
        #[test]
        fn header_round_trips(h in arb_header()) {
            prop_assert!(h.validate().is_ok());
            prop_assert_eq!(ContainerHeader::decode(&h.encode()).unwrap(), h);
        }

        #[test]
        fn damaged_headers_are_refused(h in arb_header(), cut in any::<prop::sample::Index>(), flip in any::<prop::sample::Index>()) {
            let rec = h.encode();
            prop_assert!(ContainerHeader::decode(&rec[..cut.index(rec.len())]).is_err());
            let mut bad = rec.clone();
            let bit = flip.index(rec.len() * 8);
            bad[bit / 8] ^= 1 << (bit % 8);
            prop_assert!(ContainerHeader::decode(&bad).is_err());
        }

        #[test]
        fn arbitrary_bytes_never_panic(bytes in prop::collection::vec(any::<u8>(), 0..300)) {
            let _ = ContainerHeader::decode(&bytes);
            let mut with_magic = HEADER_MAGIC.to_vec();
            with_magic.extend_from_slice(&bytes);
            let _ = ContainerHeader::decode(&with_magic);
        }
    }
}
