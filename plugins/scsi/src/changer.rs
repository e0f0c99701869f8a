//! An SMC medium changer: element address assignment, inventory (one element type per READ
//! ELEMENT STATUS, paginated, VolTag, DVCID for drives), MOVE MEDIUM and INITIALIZE ELEMENT
//! STATUS.

use crate::device::ScsiDevice;
use crate::drive::identify;
use crate::error::ScsiError;
use crate::timeouts::Class;
use reel_scsi_protocol::cdb::{self, element, inquiry, mode};
use reel_scsi_protocol::command::DataDir;

/// Elements asked for in one READ ELEMENT STATUS (keeps the reply under 64 KiB: some
/// changers honour only two bytes of the allocation length).
const PAGE_ELEMENTS: u16 = 500;
/// Allocation length of one READ ELEMENT STATUS.
const RES_ALLOC: u32 = 0xFFFF;

/// A medium changer.
pub struct Changer {
    dev: ScsiDevice,
    /// Element address assignment (MODE SENSE page 1Dh), when the changer reports it.
    pub map: Option<mode::ElementAddressAssignment>,
    /// Serial number (VPD 80h): the library's identity (ABI 1.1 `library_info`).
    pub serial: String,
    /// Vendor (INQUIRY).
    pub vendor: String,
    /// Product (INQUIRY).
    pub product: String,
}

impl Changer {
    /// Identify the changer and read its element address assignment.
    pub fn open(mut dev: ScsiDevice) -> Result<Changer, ScsiError> {
        let (inq, serial) = identify(&mut dev)?;
        if inq.device_type != inquiry::TYPE_CHANGER {
            return Err(dev.malformed(
                "INQUIRY",
                cdb::ParseError::new(
                    "INQUIRY data",
                    format!(
                        "peripheral type {} is not a medium changer (8); check the changer address",
                        inq.device_type
                    ),
                ),
            ));
        }
        let map = match dev.data_in(
            "MODE SENSE(6) 1Dh",
            &mode::mode_sense6(mode::PAGE_1D, 0, 255, true),
            Class::Status,
            255,
        ) {
            Ok(b) => mode::ModeData::parse6(&b)
                .ok()
                .and_then(|m| m.page(mode::PAGE_1D, 0).cloned())
                .and_then(|p| mode::ElementAddressAssignment::from_page(&p).ok()),
            Err(e) => {
                tracing::warn!(device = %dev.name(), "no element address assignment page: {e}");
                None
            }
        };
        tracing::info!(device = %dev.name(), vendor = %inq.vendor, product = %inq.product, %serial, ?map, "changer opened");
        Ok(Changer {
            dev,
            map,
            serial,
            vendor: inq.vendor,
            product: inq.product,
        })
    }

    /// Wall time of the commands since the last call.
    pub fn take_busy(&mut self) -> std::time::Duration {
        self.dev.take_busy()
    }

    /// The device address.
    pub fn name(&self) -> String {
        self.dev.name()
    }

    /// Status of every element of one type, paginated.
    pub fn status(&mut self, element_type: u8) -> Result<Vec<element::ElementStatus>, ScsiError> {
        let (first, count) = match (self.map, element_type) {
            (Some(m), element::TYPE_TRANSPORT) => m.transport,
            (Some(m), element::TYPE_STORAGE) => m.storage,
            (Some(m), element::TYPE_IMPORT_EXPORT) => m.import_export,
            (Some(m), element::TYPE_DATA_TRANSFER) => m.data_transfer,
            _ => (0, u16::MAX),
        };
        if count == 0 {
            return Ok(Vec::new());
        }
        let dvcid = element_type == element::TYPE_DATA_TRANSFER;
        let mut out: Vec<element::ElementStatus> = Vec::new();
        let mut start = first;
        loop {
            let want = (u32::from(count) - out.len() as u32).min(u32::from(PAGE_ELEMENTS)) as u16;
            let cdb =
                element::read_element_status(element_type, start, want, true, dvcid, RES_ALLOC);
            let b = match self.dev.data_in(
                "READ ELEMENT STATUS",
                &cdb,
                Class::Status,
                RES_ALLOC as usize,
            ) {
                Ok(b) => b,
                // a follow-up page past the last element: some changers answer 21/01
                Err(e) if !out.is_empty() && e.sense().is_some_and(|s| s.key == 0x05) => break,
                Err(e) => return Err(e),
            };
            let got =
                element::parse(&b).map_err(|e| self.dev.malformed("READ ELEMENT STATUS", e))?;
            // tgt ignores NUMBER OF ELEMENTS and returns every element from `start` on; keep
            // only new elements of the type asked for.
            let before = out.len();
            for e in got {
                if e.element_type == element_type
                    && e.address >= start
                    && !out.iter().any(|o| o.address == e.address)
                {
                    out.push(e);
                }
            }
            let Some(last) = out.last().map(|e| e.address) else {
                break;
            };
            if out.len() == before || out.len() >= usize::from(count) || last == u16::MAX {
                break;
            }
            start = last + 1;
        }
        out.sort_by_key(|e| e.address);
        Ok(out)
    }

    /// Every element: transport, storage, import/export and drives.
    pub fn inventory(&mut self) -> Result<Vec<element::ElementStatus>, ScsiError> {
        let mut all = Vec::new();
        for t in [
            element::TYPE_TRANSPORT,
            element::TYPE_STORAGE,
            element::TYPE_IMPORT_EXPORT,
            element::TYPE_DATA_TRANSFER,
        ] {
            all.extend(self.status(t)?);
        }
        Ok(all)
    }

    /// MOVE MEDIUM with the first transport element.
    pub fn move_medium(&mut self, source: u16, destination: u16) -> Result<(), ScsiError> {
        let transport = self.map.map_or(0, |m| m.transport.0);
        self.dev
            .run(
                "MOVE MEDIUM",
                &element::move_medium(transport, source, destination),
                Class::Move,
                DataDir::None,
            )
            .map(|_| ())
    }

    /// INITIALIZE ELEMENT STATUS (a full rescan; minutes on a real library).
    pub fn initialize(&mut self) -> Result<(), ScsiError> {
        self.dev
            .run(
                "INITIALIZE ELEMENT STATUS",
                &element::initialize_element_status(),
                Class::Inventory,
                DataDir::None,
            )
            .map(|_| ())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::policy::Policy;
    use crate::timeouts::Timeouts;
    use crate::transport::fake::{Reply, Script};
    use reel_scsi_protocol::cdb::element::status_page as page;

    fn inquiry_changer() -> Vec<u8> {
        let mut b = vec![0u8; 36];
        b[0] = 8;
        b[8..16].copy_from_slice(b"IBM     ");
        b[16..32].copy_from_slice(b"3573-TL         ");
        b
    }

    fn page_1d() -> Vec<u8> {
        let mut b = vec![0, 0, 0, 0, 0x9D, 0x12];
        for v in [1u16, 1, 1024, 8, 768, 4, 256, 2] {
            b.extend_from_slice(&v.to_be_bytes());
        }
        b.extend_from_slice(&[0, 0]);
        b[0] = (b.len() - 1) as u8;
        b
    }

    pub(crate) fn open_changer(s: &Script) -> Changer {
        s.expect(&[0x12, 0x00], Reply::data(inquiry_changer()))
            .expect(
                &[0x12, 0x01],
                Reply::data(b"\x08\x80\x00\x0aLIB0000001".to_vec()),
            )
            .expect(&[0x1A], Reply::data(page_1d()));
        let dev = ScsiDevice::new(
            Box::new(s.transport()),
            Timeouts::for_generation(None),
            Policy::default(),
        );
        Changer::open(dev).unwrap()
    }

    #[test]
    fn open_reads_the_element_map() {
        let s = Script::new();
        let c = open_changer(&s);
        assert_eq!(c.serial, "LIB0000001");
        // The library's identity (ABI 1.1 library_info) is the changer's.
        assert_eq!((c.vendor.as_str(), c.product.as_str()), ("IBM", "3573-TL"));
        assert_eq!(c.map.unwrap().data_transfer, (256, 2));
    }

    #[test]
    fn inventory_asks_one_type_at_a_time() {
        let s = Script::new();
        let mut c = open_changer(&s);
        s.expect(
            &[0xB8, 0x11],
            Reply::data(page(1, &[(1, false, "", None, "")], false)),
        )
        .expect(
            &[0xB8, 0x12],
            Reply::data(page(
                2,
                &[
                    (1024, true, "GFS001L9", None, ""),
                    (1025, false, "", None, ""),
                ],
                false,
            )),
        )
        .expect(
            &[0xB8, 0x13],
            Reply::data(page(3, &[(768, false, "", None, "")], false)),
        )
        .expect(
            &[0xB8, 0x14],
            Reply::data(page(
                4,
                &[(256, true, "GFS002L9", Some(1025), "DRV0000001")],
                true,
            )),
        );
        let inv = c.inventory().unwrap();
        assert_eq!(inv.len(), 5);
        let log = s.log();
        let res: Vec<_> = log.iter().filter(|l| l.cdb[0] == 0xB8).collect();
        assert!(
            res.iter().all(|l| l.cdb[1] & 0x0F != 0),
            "never element type 0"
        );
        assert!(res.iter().all(|l| l.cdb[1] & 0x10 != 0), "always VolTag");
        let first = |t: u8| res.iter().find(|l| l.cdb[1] & 0x0F == t).unwrap();
        assert_eq!(first(4).cdb[6], 0x01, "DVCID for drives");
        assert_eq!(first(2).cdb[6], 0x00);
        assert_eq!(&first(2).cdb[2..6], &[4, 0, 0, 8], "start 1024, 8 slots");
        // follow-up pages past the last element were refused and ended the pagination
        assert_eq!(s.pending(), 0);
        assert_eq!(inv[4].drive_serial().as_deref(), Some("DRV0000001"));
    }

    #[test]
    fn status_paginates_until_every_element_is_seen() {
        let s = Script::new();
        let mut c = open_changer(&s);
        s.expect(
            &[0xB8, 0x12, 0x04, 0x00],
            Reply::data(page(
                2,
                &[(1024, true, "A", None, ""), (1025, true, "B", None, "")],
                false,
            )),
        )
        .expect(
            &[0xB8, 0x12, 0x04, 0x02],
            Reply::data(page(2, &[(1026, false, "", None, "")], false)),
        )
        .expect(&[0xB8, 0x12, 0x04, 0x03], Reply::data(vec![0; 8]));
        let slots = c.status(element::TYPE_STORAGE).unwrap();
        assert_eq!(
            slots.iter().map(|e| e.address).collect::<Vec<_>>(),
            vec![1024, 1025, 1026]
        );
        assert_eq!(s.pending(), 0);
    }

    #[test]
    fn move_errors_keep_their_sense() {
        let s = Script::new();
        let mut c = open_changer(&s);
        s.expect(&[0xA5, 0, 0, 1, 4, 0, 1, 0], Reply::good())
            .expect(&[0xA5], Reply::sense(5, (0x3B, 0x0E)))
            .expect(&[0xA5], Reply::sense(5, (0x53, 0x02)));
        c.move_medium(1024, 256).unwrap();
        let e = c.move_medium(1024, 256).unwrap_err();
        assert_eq!(e.sense().map(|s| (s.asc, s.ascq)), Some((0x3B, 0x0E)));
        let e = c.move_medium(256, 1024).unwrap_err();
        assert!(e.to_string().contains("medium removal prevented"), "{e}");
        s.expect(&[0x07], Reply::good());
        c.initialize().unwrap();
    }

    #[test]
    fn a_drive_address_is_not_a_changer() {
        let s = Script::new();
        let mut inq = inquiry_changer();
        inq[0] = 1;
        s.expect(&[0x12, 0x00], Reply::data(inq))
            .expect(&[0x12, 0x01], Reply::data(b"\x01\x80\x00\x03ABC".to_vec()));
        let dev = ScsiDevice::new(
            Box::new(s.transport()),
            Timeouts::for_generation(None),
            Policy::default(),
        );
        let Err(e) = Changer::open(dev) else {
            panic!("drive opened as changer")
        };
        assert!(e.to_string().contains("not a medium changer"), "{e}");
    }
}
