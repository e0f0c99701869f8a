//! An SSC tape drive: every ABI drive call mapped to SCSI commands, sense kept.
//!
//! Outcomes that are normal on tape come back with their sense intact: a read that meets a
//! filemark or end of data, a record longer than the buffer (ILI with a negative residue), a
//! SPACE stopped early, VOLUME OVERFLOW. Early warning on WRITE and WRITE FILEMARKS is
//! CHECK CONDITION 0/00/02 with the EOM flag, the data written (docs/ABI.md).

use reel_plugin_abi::sdk::{Call, DriveInfo, Fault, Geometry, ReadRecord};
use reel_plugin_abi::{
    REEL_E_UNSUPPORTED, REEL_LBP_CRC32C, REEL_LBP_OFF, REEL_SPACE_EOD, REEL_SPACE_FILEMARKS,
    REEL_SPACE_RECORDS, ReelDriveStats, ReelExtent, ReelPosition, asc, sense_key,
};

use crate::config::LbpMode;
use crate::device::{Outcome, ScsiDevice};
use crate::error::ScsiError;
use crate::lbp;
use crate::timeouts::{Class, generation_from_product};
use reel_scsi_protocol::cdb::{
    self, attribute, density, inquiry, log, mode, motion, position, rao, rw, unit, wrap,
};
use reel_scsi_protocol::command::DataDir;
use reel_scsi_protocol::sense::Sense;

/// Counters the plugin keeps itself (exact for this handle, whatever the drive reports).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct HostCounters {
    /// Bytes of records written (protection information excluded).
    pub bytes_written: u64,
    /// Bytes of records read.
    pub bytes_read: u64,
    /// Records written.
    pub records_written: u64,
    /// Records read.
    pub records_read: u64,
    /// Filemarks written.
    pub filemarks_written: u64,
    /// LOCATE and SPACE commands.
    pub locates: u64,
    /// LOADs.
    pub mounts: u64,
    /// Measured time in commands.
    pub busy_ns: u64,
    /// Measured time in LOCATE and SPACE.
    pub locate_ns: u64,
    /// Measured time in LOAD and UNLOAD.
    pub mount_ns: u64,
}

/// One tape drive.
pub struct TapeDrive {
    dev: ScsiDevice,
    info: DriveInfo,
    generation: Option<u8>,
    generation_fixed: bool,
    lbp_wanted: LbpMode,
    lbp_on: bool,
    /// `Some(false)` once LOCATE(16) was refused: use LOCATE(10).
    locate16: Option<bool>,
    /// `Some(false)` once the long form of READ POSITION was refused.
    long_position: Option<bool>,
    scratch: Vec<u8>,
    counters: HostCounters,
    /// A LOAD succeeded and no command has run since: the next TEST UNIT READY reports
    /// UNIT ATTENTION 28/00 (the ABI contract: one medium-changed event per load, whatever
    /// the drive's own unit attentions, which the device layer retries).
    medium_changed: bool,
}

/// `Fault` for an unsupported feature, or the device's own error.
fn unsupported_or(e: ScsiError, what: &str) -> Fault {
    if e.is_unsupported_command() {
        let mut f = e.to_fault();
        f.code = REEL_E_UNSUPPORTED;
        f.message = format!("{what} is not supported by this drive ({})", f.message);
        f
    } else {
        e.to_fault()
    }
}

impl TapeDrive {
    /// Identify the drive behind `dev` (INQUIRY, VPD 80h, READ BLOCK LIMITS).
    pub fn open(
        mut dev: ScsiDevice,
        lbp_wanted: LbpMode,
        generation: Option<u8>,
    ) -> Result<TapeDrive, ScsiError> {
        let (inq, serial) = identify(&mut dev)?;
        if inq.device_type != inquiry::TYPE_TAPE {
            return Err(dev.malformed(
                "INQUIRY",
                cdb::ParseError::new(
                    "INQUIRY data",
                    format!(
                        "peripheral type {} is not a tape drive (1); check the drive address",
                        inq.device_type
                    ),
                ),
            ));
        }
        let max = match dev.data_in(
            "READ BLOCK LIMITS",
            &motion::read_block_limits(),
            Class::Status,
            6,
        ) {
            Ok(b) => motion::BlockLimits::parse(&b)
                .map(|l| l.max)
                .unwrap_or(rw::MAX_TRANSFER as u32),
            Err(e) => {
                tracing::warn!(device = %dev.name(), "READ BLOCK LIMITS failed: {e}");
                rw::MAX_TRANSFER as u32
            }
        };
        let max = if max == 0 {
            rw::MAX_TRANSFER
        } else {
            (max as usize).min(rw::MAX_TRANSFER)
        };
        let fixed = generation.is_some();
        let generation = generation.or_else(|| generation_from_product(&inq.product));
        dev.timeouts.regenerate(generation);
        dev.take_busy();
        tracing::info!(device = %dev.name(), vendor = %inq.vendor, product = %inq.product, %serial, ?generation, "tape drive opened");
        Ok(TapeDrive {
            dev,
            info: DriveInfo {
                vendor: inq.vendor,
                product: inq.product,
                serial,
                max_record_bytes: max as u64,
                capabilities: None,
            },
            generation,
            generation_fixed: fixed,
            lbp_wanted,
            lbp_on: false,
            locate16: None,
            long_position: None,
            scratch: Vec::new(),
            counters: HostCounters::default(),
            medium_changed: false,
        })
    }

    /// The LTO generation in use for timeouts.
    pub fn generation(&self) -> Option<u8> {
        self.generation
    }

    /// Counters kept by the plugin.
    pub fn counters(&self) -> HostCounters {
        self.counters
    }

    fn finish<T>(&mut self, call: &mut Call, r: Result<T, Fault>) -> Result<T, Fault> {
        self.medium_changed = false;
        let ns = u64::try_from(self.dev.take_busy().as_nanos()).unwrap_or(u64::MAX);
        self.counters.busy_ns += ns;
        call.elapsed_ns += ns;
        r
    }

    fn simple(&mut self, name: &'static str, cdb: &[u8], class: Class) -> Result<(), Fault> {
        self.dev
            .run(name, cdb, class, DataDir::None)
            .map(|_| ())
            .map_err(Fault::from)
    }

    /// After a load: variable block mode, LBP as wanted, generation from the medium.
    fn configure_medium(&mut self) -> Result<(), Fault> {
        if !self.generation_fixed
            && let Ok(b) = self.dev.data_in(
                "REPORT DENSITY SUPPORT",
                &density::report_density_support(true, 1024),
                Class::Status,
                1024,
            )
            && let Ok(d) = density::parse(&b)
            && let Some(g) = d.iter().find_map(|d| density::lto_generation(d.primary))
        {
            self.generation = Some(g);
            self.dev.timeouts.regenerate(Some(g));
        }
        // The block descriptor comes with any page; ask for device configuration (10h), which
        // every SSC drive has (page 00h is vendor specific and often refused).
        match self.dev.data_in(
            "MODE SENSE(6)",
            &mode::mode_sense6(mode::PAGE_DEVICE_CONFIGURATION, 0, 255, false),
            Class::Status,
            255,
        ) {
            Ok(b) => {
                let mut m = mode::ModeData::parse6(&b)
                    .map_err(|e| Fault::from(self.dev.malformed("MODE SENSE(6)", e)))?;
                if let Some(bd) = m.blocks.first_mut()
                    && bd.block_length != 0
                {
                    tracing::info!(device = %self.dev.name(), from = bd.block_length, "switching drive to variable-length records");
                    bd.block_length = 0;
                    m.pages.clear();
                    let list = m.to_select6();
                    self.dev
                        .run(
                            "MODE SELECT(6)",
                            &mode::mode_select6(list.len() as u8),
                            Class::Status,
                            DataDir::Out(&list),
                        )
                        .map_err(Fault::from)?;
                }
            }
            Err(e) => {
                tracing::warn!(device = %self.dev.name(), "MODE SENSE(6) block descriptor: {e}")
            }
        }
        let want = self.lbp_wanted == LbpMode::Crc32c;
        if want || self.lbp_on {
            self.apply_lbp(want)?;
        }
        Ok(())
    }

    fn apply_lbp(&mut self, on: bool) -> Result<(), Fault> {
        let sensed = self.dev.data_in(
            "MODE SENSE(10) 0Ah/F0h",
            &mode::mode_sense10(mode::PAGE_CONTROL, mode::SUBPAGE_DATA_PROTECTION, 64, true),
            Class::Status,
            64,
        );
        let page = match sensed {
            Ok(b) => mode::ModeData::parse10(&b)
                .map_err(|e| Fault::from(self.dev.malformed("MODE SENSE(10)", e)))?
                .page(mode::PAGE_CONTROL, mode::SUBPAGE_DATA_PROTECTION)
                .cloned(),
            Err(e) if e.is_unsupported_command() => None,
            Err(e) => return Err(e.into()),
        };
        let Some(mut page) = page else {
            if !on {
                self.lbp_on = false;
                return Ok(());
            }
            return Err(Fault::code(
                REEL_E_UNSUPPORTED,
                format!(
                    "{}: logical block protection is not supported by this drive (no mode page 0Ah/F0h); set lbp=off",
                    self.dev.name()
                ),
            ));
        };
        let target = if on {
            mode::DataProtection::crc32c()
        } else {
            mode::DataProtection::default()
        };
        if mode::DataProtection::from_page(&page) != target {
            target.apply(&mut page);
            let data = mode::ModeData {
                pages: vec![page],
                ..mode::ModeData::default()
            };
            let list = data.to_select10();
            self.dev
                .run(
                    "MODE SELECT(10) 0Ah/F0h",
                    &mode::mode_select10(list.len() as u16),
                    Class::Status,
                    DataDir::Out(&list),
                )
                .map_err(Fault::from)?;
        }
        self.lbp_on = on;
        Ok(())
    }

    /// Early warning (NO SENSE + EOM) on a write: the data was written, and the ABI reports it
    /// as CHECK CONDITION 0/00/02 with the EOM flag (docs/ABI.md); anything else is the fault
    /// it says.
    fn write_outcome(&self, o: Outcome, name: &'static str, call: &mut Call) -> Result<(), Fault> {
        match o.sense {
            None => Ok(()),
            Some(s) if s.key == sense_key::NO_SENSE && s.eom && !s.ili && !s.filemark => {
                tracing::info!(device = %self.dev.name(), "{name}: early warning reached");
                let _ = call;
                Err(Fault::check(
                    sense_key::NO_SENSE,
                    reel_plugin_abi::asc::END_OF_MEDIUM,
                    format!(
                        "{}: {name}: early warning: the data was written",
                        self.dev.name()
                    ),
                )
                .with_flags(reel_plugin_abi::REEL_FLAG_EOM))
            }
            Some(s) if s.key == sense_key::RECOVERED_ERROR => Ok(()),
            Some(s) => Err(s.fault(format!("{}: {name}: {}", self.dev.name(), s.describe()))),
        }
    }

    fn read_attribute_list(&mut self, first: u16) -> Result<Vec<attribute::Attribute>, Fault> {
        let mut alloc = 4096usize;
        loop {
            let b = self
                .dev
                .data_in(
                    "READ ATTRIBUTE",
                    &attribute::read_attribute(first, alloc as u32),
                    Class::Status,
                    alloc,
                )
                .map_err(|e| unsupported_or(e, "MAM (READ ATTRIBUTE)"))?;
            let available = 4 + cdb::be32(&b, 0) as usize;
            if available > alloc && alloc < (1 << 20) {
                alloc = available.min(1 << 20);
                continue;
            }
            return attribute::parse(&b)
                .map_err(|e| Fault::from(self.dev.malformed("READ ATTRIBUTE", e)));
        }
    }

    fn log_page(&mut self, page: u8, what: &str) -> Result<Vec<log::LogParam>, Fault> {
        let b = self
            .dev
            .data_in(
                "LOG SENSE",
                &log::log_sense(page, 0, 4096),
                Class::Status,
                4096,
            )
            .map_err(|e| unsupported_or(e, what))?;
        log::parse(&b, page).map_err(|e| Fault::from(self.dev.malformed("LOG SENSE", e)))
    }
}

/// INQUIRY and VPD 80h of a device.
pub fn identify(dev: &mut ScsiDevice) -> Result<(inquiry::Inquiry, String), ScsiError> {
    let b = dev.data_in("INQUIRY", &inquiry::inquiry(96), Class::Status, 96)?;
    let inq = inquiry::Inquiry::parse(&b).map_err(|e| dev.malformed("INQUIRY", e))?;
    let v = dev.data_in(
        "INQUIRY VPD 80h",
        &inquiry::inquiry_vpd(0x80, 255),
        Class::Status,
        255,
    )?;
    let serial = inquiry::parse_serial(&v).map_err(|e| dev.malformed("INQUIRY VPD 80h", e))?;
    Ok((inq, serial))
}

impl reel_plugin_abi::sdk::Drive for TapeDrive {
    fn info(&mut self, _call: &mut Call) -> Result<DriveInfo, Fault> {
        Ok(self.info.clone())
    }

    fn test_ready(&mut self, call: &mut Call) -> Result<(), Fault> {
        if std::mem::take(&mut self.medium_changed) {
            return Err(Fault::check(
                sense_key::UNIT_ATTENTION,
                asc::MEDIUM_MAY_HAVE_CHANGED,
                format!(
                    "{}: medium loaded (not ready to ready change)",
                    self.dev.name()
                ),
            ));
        }
        let r = self.simple("TEST UNIT READY", &unit::test_unit_ready(), Class::Status);
        self.finish(call, r)
    }

    fn load(&mut self, call: &mut Call) -> Result<(), Fault> {
        let t0 = std::time::Instant::now();
        let mut r = self.simple("LOAD", &motion::load_unload(true, false), Class::LoadUnload);
        if r.is_ok() {
            // A real drive may answer LOAD before it is ready; TEST UNIT READY waits out
            // "becoming ready" (up to the LOAD timeout: 2 h on a first LTO-9 load).
            let wait = self.dev.timeouts.get(Class::LoadUnload);
            let saved = std::mem::replace(&mut self.dev.policy.not_ready_wait, wait);
            r = self.simple("TEST UNIT READY", &unit::test_unit_ready(), Class::Status);
            self.dev.policy.not_ready_wait = saved;
        }
        if r.is_ok() {
            self.counters.mounts += 1;
            r = self.configure_medium();
        }
        self.counters.mount_ns += u64::try_from(t0.elapsed().as_nanos()).unwrap_or(u64::MAX);
        let r = self.finish(call, r);
        self.medium_changed = r.is_ok();
        r
    }

    fn unload(&mut self, call: &mut Call) -> Result<(), Fault> {
        let t0 = std::time::Instant::now();
        if let Err(e) = self.dev.run(
            "ALLOW MEDIUM REMOVAL",
            &unit::prevent_allow(false),
            Class::Status,
            DataDir::None,
        ) {
            tracing::debug!(device = %self.dev.name(), "ALLOW MEDIUM REMOVAL: {e}");
        }
        let r = self.simple(
            "UNLOAD",
            &motion::load_unload(false, false),
            Class::LoadUnload,
        );
        self.counters.mount_ns += u64::try_from(t0.elapsed().as_nanos()).unwrap_or(u64::MAX);
        self.finish(call, r)
    }

    fn rewind(&mut self, call: &mut Call) -> Result<(), Fault> {
        let r = self.simple("REWIND", &motion::rewind(false), Class::Rewind);
        self.finish(call, r)
    }

    fn locate(&mut self, block: u64, call: &mut Call) -> Result<(), Fault> {
        let t0 = std::time::Instant::now();
        self.counters.locates += 1;
        let mut r = None;
        if self.locate16 != Some(false) {
            match self.dev.run(
                "LOCATE(16)",
                &motion::locate16(block, false),
                Class::Locate,
                DataDir::None,
            ) {
                Err(e) if e.is_unsupported_command() && self.locate16.is_none() => {
                    tracing::info!(device = %self.dev.name(), "LOCATE(16) refused; using LOCATE(10)");
                    self.locate16 = Some(false);
                }
                other => {
                    self.locate16 = Some(true);
                    r = Some(other.map(|_| ()).map_err(Fault::from));
                }
            }
        }
        let r = match r {
            Some(r) => r,
            None => match motion::locate10(block, false) {
                Some(c) => self
                    .dev
                    .run("LOCATE(10)", &c, Class::Locate, DataDir::None)
                    .map(|_| ())
                    .map_err(Fault::from),
                None => Err(Fault::invalid(format!(
                    "block {block} does not fit LOCATE(10), the only LOCATE this drive accepts"
                ))),
            },
        };
        self.counters.locate_ns += u64::try_from(t0.elapsed().as_nanos()).unwrap_or(u64::MAX);
        self.finish(call, r)
    }

    fn space(&mut self, kind: u32, count: i64, call: &mut Call) -> Result<(), Fault> {
        let code = match kind {
            REEL_SPACE_RECORDS => motion::SPACE_BLOCKS,
            REEL_SPACE_FILEMARKS => motion::SPACE_FILEMARKS,
            REEL_SPACE_EOD => motion::SPACE_EOD,
            k => {
                return Err(Fault::invalid(format!(
                    "unknown SPACE kind {k}; use 0, 1 or 3"
                )));
            }
        };
        let count = if code == motion::SPACE_EOD { 0 } else { count };
        if count == 0 && code != motion::SPACE_EOD {
            return Ok(());
        }
        let t0 = std::time::Instant::now();
        self.counters.locates += 1;
        let r = match motion::space6(code, count) {
            Some(c) => self.dev.exec("SPACE(6)", &c, Class::Locate, DataDir::None),
            None => self.dev.exec(
                "SPACE(16)",
                &motion::space16(code, count),
                Class::Locate,
                DataDir::None,
            ),
        };
        let r = match r {
            Ok(Outcome { sense: None, .. }) => Ok(()),
            Ok(Outcome { sense: Some(s), .. }) if s.key == sense_key::RECOVERED_ERROR => Ok(()),
            Ok(Outcome { sense: Some(s), .. }) => Err(s.fault(format!(
                "{}: SPACE stopped early: {}",
                self.dev.name(),
                s.describe()
            ))),
            Err(e) => Err(e.into()),
        };
        self.counters.locate_ns += u64::try_from(t0.elapsed().as_nanos()).unwrap_or(u64::MAX);
        self.finish(call, r)
    }

    fn read_position(&mut self, call: &mut Call) -> Result<ReelPosition, Fault> {
        let mut pos = None;
        if self.long_position != Some(false) {
            match self.dev.data_in(
                "READ POSITION long",
                &position::read_position_long(),
                Class::Status,
                32,
            ) {
                Ok(b) => {
                    self.long_position = Some(true);
                    pos = Some(
                        position::parse_long(&b)
                            .map_err(|e| Fault::from(self.dev.malformed("READ POSITION", e))),
                    );
                }
                Err(e) if e.is_unsupported_command() && self.long_position.is_none() => {
                    tracing::info!(device = %self.dev.name(), "READ POSITION long form refused; using the short form");
                    self.long_position = Some(false);
                }
                Err(e) => pos = Some(Err(e.into())),
            }
        }
        let pos = match pos {
            Some(p) => p,
            None => self
                .dev
                .data_in(
                    "READ POSITION short",
                    &position::read_position_short(),
                    Class::Status,
                    20,
                )
                .map_err(Fault::from)
                .and_then(|b| {
                    position::parse_short(&b)
                        .map_err(|e| Fault::from(self.dev.malformed("READ POSITION", e)))
                }),
        };
        let r = pos.map(|p| p.to_reel());
        self.finish(call, r)
    }

    fn write_record(
        &mut self,
        data: &[u8],
        crc: Option<u32>,
        call: &mut Call,
    ) -> Result<(), Fault> {
        if data.is_empty() {
            return Err(Fault::invalid("a record cannot be empty"));
        }
        let extra = if self.lbp_on { lbp::CRC_LEN } else { 0 };
        let max = self.info.max_record_bytes as usize;
        if data.len() + extra > max {
            return Err(Fault::invalid(format!(
                "record of {} bytes exceeds the drive's maximum of {} (protection information included)",
                data.len(),
                max
            )));
        }
        let computed = if crc.is_some() || self.lbp_on {
            Some(lbp::crc32c(data))
        } else {
            None
        };
        if let (Some(given), Some(c)) = (crc, computed)
            && given != c
        {
            return Err(Fault::check(
                sense_key::ABORTED_COMMAND,
                asc::LBP_GUARD_CHECK_FAILED,
                format!(
                    "record CRC32C {given:08x} given by the host does not match the data ({c:08x}); nothing was written"
                ),
            ));
        }
        let mut scratch = std::mem::take(&mut self.scratch);
        let payload: &[u8] = match computed {
            Some(c) if self.lbp_on => {
                lbp::protect(data, c, &mut scratch);
                &scratch
            }
            _ => data,
        };
        let r = match rw::write6(payload.len()) {
            Some(cdb) => self
                .dev
                .exec("WRITE(6)", &cdb, Class::Write, DataDir::Out(payload))
                .map_err(Fault::from)
                .and_then(|o| self.write_outcome(o, "WRITE(6)", call)),
            None => Err(Fault::invalid("record too large for WRITE(6)")),
        };
        self.scratch = scratch;
        if r.is_ok() || r.as_ref().is_err_and(is_early_warning) {
            self.counters.records_written += 1;
            self.counters.bytes_written += data.len() as u64;
        }
        self.finish(call, r)
    }

    fn write_filemarks(
        &mut self,
        count: u32,
        immediate: bool,
        call: &mut Call,
    ) -> Result<(), Fault> {
        let r = match rw::write_filemarks6(count, immediate) {
            Some(cdb) => self
                .dev
                .exec(
                    "WRITE FILEMARKS(6)",
                    &cdb,
                    Class::WriteFilemarks,
                    DataDir::None,
                )
                .map_err(Fault::from)
                .and_then(|o| self.write_outcome(o, "WRITE FILEMARKS(6)", call)),
            None => Err(Fault::invalid(format!(
                "{count} filemarks is more than one command writes"
            ))),
        };
        if r.is_ok() || r.as_ref().is_err_and(is_early_warning) {
            self.counters.filemarks_written += u64::from(count);
        }
        self.finish(call, r)
    }

    fn read_record(&mut self, buffer: &mut [u8], call: &mut Call) -> Result<ReadRecord, Fault> {
        let r = self.read_inner(buffer, call);
        if let Ok(rec) = &r {
            self.counters.records_read += 1;
            self.counters.bytes_read += rec.len as u64;
        }
        self.finish(call, r)
    }

    fn set_lbp(&mut self, mode: u32, call: &mut Call) -> Result<(), Fault> {
        let want = match mode {
            REEL_LBP_OFF => LbpMode::Off,
            REEL_LBP_CRC32C => LbpMode::Crc32c,
            m => {
                return Err(Fault::invalid(format!(
                    "unknown LBP mode {m}; use 0 (off) or 1 (CRC32C)"
                )));
            }
        };
        let r = self.apply_lbp(want == LbpMode::Crc32c);
        if r.is_ok() {
            self.lbp_wanted = want;
        }
        self.finish(call, r)
    }

    fn mam_read(&mut self, attribute_id: u16, call: &mut Call) -> Result<Vec<u8>, Fault> {
        let r = self.read_attribute_list(attribute_id).and_then(|list| {
            list.iter()
                .find(|a| a.id == attribute_id)
                .map(attribute::value_of)
                .ok_or_else(|| {
                    Fault::check(
                        sense_key::ILLEGAL_REQUEST,
                        asc::INVALID_FIELD_IN_CDB,
                        format!("MAM attribute {attribute_id:04X}h is not set on this cartridge"),
                    )
                })
        });
        self.finish(call, r)
    }

    fn mam_write(&mut self, attribute_id: u16, data: &[u8], call: &mut Call) -> Result<(), Fault> {
        let list = match attribute::encode(attribute_id, data) {
            Ok(l) => l,
            Err(e) => return Err(Fault::invalid(e.to_string())),
        };
        let r = self
            .dev
            .run(
                "WRITE ATTRIBUTE",
                &attribute::write_attribute(list.len() as u32),
                Class::Status,
                DataDir::Out(&list),
            )
            .map(|_| ())
            .map_err(|e| unsupported_or(e, "MAM (WRITE ATTRIBUTE)"));
        self.finish(call, r)
    }

    fn statistics(&mut self, call: &mut Call) -> Result<ReelDriveStats, Fault> {
        let c = self.counters;
        let mut s = ReelDriveStats {
            struct_size: std::mem::size_of::<ReelDriveStats>() as u32,
            busy_ns: c.busy_ns,
            locate_ns: c.locate_ns,
            mount_ns: c.mount_ns,
            bytes_written: c.bytes_written,
            bytes_read: c.bytes_read,
            records_written: c.records_written,
            records_read: c.records_read,
            filemarks_written: c.filemarks_written,
            locates: c.locates,
            mounts: c.mounts,
            ..ReelDriveStats::default()
        };
        // valid bits in field order after `valid`: busy 0, locate 2, mount 3, bytes 4-5,
        // records 6-7, filemarks 8, locates 9, mounts 13.
        s.valid = (1 << 0)
            | (1 << 2)
            | (1 << 3)
            | (1 << 4)
            | (1 << 5)
            | (1 << 6)
            | (1 << 7)
            | (1 << 8)
            | (1 << 9)
            | (1 << 13);
        // The medium's own mount count replaces the handle's when the drive reports it.
        match self.log_page(log::PAGE_VOLUME_STATISTICS, "volume statistics") {
            Ok(p) => {
                let v = log::VolumeStatistics::from_params(&p);
                if let Some(m) = v.mounts {
                    s.mounts = m;
                }
                tracing::debug!(device = %self.dev.name(), ?v, "volume statistics");
            }
            Err(f) => {
                tracing::debug!(device = %self.dev.name(), "no volume statistics: {}", f.message)
            }
        }
        // Error counters (pages 02h, 03h), where the drive keeps them: bits 16-19.
        for (page, what, corrected, uncorrected, bit) in [
            (
                log::PAGE_WRITE_ERROR_COUNTERS,
                "write error counters",
                &mut s.write_errors_corrected,
                &mut s.write_errors_uncorrected,
                16,
            ),
            (
                log::PAGE_READ_ERROR_COUNTERS,
                "read error counters",
                &mut s.read_errors_corrected,
                &mut s.read_errors_uncorrected,
                18,
            ),
        ] {
            match self.log_page(page, what) {
                Ok(p) => {
                    let e = log::ErrorCounters::from_params(&p);
                    if let Some(n) = e.corrected {
                        *corrected = n;
                        s.valid |= 1 << bit;
                    }
                    if let Some(n) = e.uncorrected {
                        *uncorrected = n;
                        s.valid |= 1 << (bit + 1);
                    }
                }
                Err(f) => tracing::debug!(device = %self.dev.name(), "no {what}: {}", f.message),
            }
        }
        self.finish(call, Ok(s))
    }

    fn tape_alerts(&mut self, call: &mut Call) -> Result<u64, Fault> {
        let r = self
            .log_page(
                log::PAGE_TAPE_ALERT_RESPONSE,
                "TapeAlert (LOG SENSE page 12h)",
            )
            .map(|p| log::tape_alert_flags(&p));
        self.finish(call, r)
    }

    fn geometry(&mut self, call: &mut Call) -> Result<Geometry, Fault> {
        let r = self
            .dev
            .data_in(
                "READ END OF WRAP POSITION",
                &wrap::read_end_of_wrap_position(16384),
                Class::Status,
                16384,
            )
            .map_err(|e| unsupported_or(e, "READ END OF WRAP POSITION (geometry)"))
            .and_then(|b| {
                wrap::parse(&b)
                    .map_err(|e| Fault::from(self.dev.malformed("READ END OF WRAP POSITION", e)))
            });
        let r = match r {
            Ok(ends) => {
                let capacity = self
                    .log_page(log::PAGE_TAPE_CAPACITY, "tape capacity")
                    .ok()
                    .and_then(|p| log::tape_capacity(&p))
                    .map_or(0, |(_, max)| max * 1024 * 1024);
                Ok(Geometry {
                    wraps: ends.len() as u32,
                    bands: 4,
                    min_lpos: 0,
                    max_lpos: 0,
                    capacity_bytes: capacity,
                    eowp: ends.iter().map(|w| w.block + 1).collect(),
                })
            }
            Err(f) => Err(f),
        };
        self.finish(call, r)
    }

    fn rao(&mut self, extents: &[ReelExtent], call: &mut Call) -> Result<Vec<u32>, Fault> {
        if extents.is_empty() {
            return Ok(Vec::new());
        }
        let list = rao::encode(
            &extents
                .iter()
                .map(|e| (e.first_block, e.last_block))
                .collect::<Vec<_>>(),
        );
        let r = self
            .dev
            .run(
                "GENERATE RAO",
                &rao::generate(list.len() as u32),
                Class::Locate,
                DataDir::Out(&list),
            )
            .map_err(|e| unsupported_or(e, "native RAO"))
            .and_then(|_| {
                self.dev
                    .data_in(
                        "RECEIVE RAO",
                        &rao::receive(list.len() as u32),
                        Class::Status,
                        list.len(),
                    )
                    .map_err(|e| unsupported_or(e, "native RAO"))
            })
            .and_then(|b| {
                rao::parse(&b, extents.len())
                    .map_err(|e| Fault::from(self.dev.malformed("RECEIVE RAO", e)))
            });
        self.finish(call, r)
    }
}

impl TapeDrive {
    fn read_inner(&mut self, buffer: &mut [u8], call: &mut Call) -> Result<ReadRecord, Fault> {
        let extra = if self.lbp_on { lbp::CRC_LEN } else { 0 };
        let want = (buffer.len() + extra).min(rw::MAX_TRANSFER);
        if want <= extra {
            return Err(Fault::invalid("read buffer is empty"));
        }
        let Some(cdb) = rw::read6(want, true) else {
            return Err(Fault::invalid("read length too large for READ(6)"));
        };
        let mut scratch = std::mem::take(&mut self.scratch);
        let use_scratch = self.lbp_on;
        if use_scratch {
            scratch.clear();
            scratch.resize(want, 0);
        }
        let target: &mut [u8] = if use_scratch {
            &mut scratch[..]
        } else {
            &mut buffer[..want]
        };
        let outcome = self
            .dev
            .exec("READ(6)", &cdb, Class::Read, DataDir::In(target));
        let r = outcome
            .map_err(Fault::from)
            .and_then(|o| self.record_length(o, want, call));
        let r = match r {
            Ok(n) if use_scratch => {
                let Some((len, stored)) = lbp::split(&scratch[..n]) else {
                    self.scratch = scratch;
                    return Err(Fault::check(
                        sense_key::ABORTED_COMMAND,
                        asc::LBP_GUARD_CHECK_FAILED,
                        format!(
                            "record of {n} bytes is too short to carry its CRC32C; is LBP on at the drive?"
                        ),
                    ));
                };
                let len = len.min(buffer.len());
                buffer[..len].copy_from_slice(&scratch[..len]);
                let computed = lbp::crc32c(&buffer[..len]);
                if computed != stored {
                    Err(Fault::check(
                        sense_key::ABORTED_COMMAND,
                        asc::LBP_GUARD_CHECK_FAILED,
                        format!("CRC32C mismatch on read: stored {stored:08x}, data gives {computed:08x}"),
                    )
                    .with_transferred(len))
                } else {
                    Ok(ReadRecord {
                        len,
                        crc: Some(stored),
                    })
                }
            }
            Ok(n) => Ok(ReadRecord { len: n, crc: None }),
            Err(mut f) => {
                if use_scratch && f.transferred > 0 {
                    let n = f.transferred.min(buffer.len()).min(scratch.len());
                    buffer[..n].copy_from_slice(&scratch[..n]);
                    f.transferred = n;
                }
                Err(f)
            }
        };
        self.scratch = scratch;
        r
    }

    /// The length of the record just read, or the fault its sense says.
    fn record_length(&self, o: Outcome, want: usize, call: &mut Call) -> Result<usize, Fault> {
        let name = self.dev.name();
        let Some(s) = o.sense else {
            return Ok(o.transferred.min(want));
        };
        let fault = |s: &Sense| s.fault(format!("{name}: READ(6): {}", s.describe()));
        if s.filemark || s.key == sense_key::BLANK_CHECK {
            return Err(fault(&s).with_transferred(0));
        }
        if s.ili && matches!(s.key, sense_key::NO_SENSE | sense_key::RECOVERED_ERROR) {
            return match s.information {
                // shorter record: its length from INFORMATION, not the transport residual
                Some(i) if i >= 0 => Ok(want.saturating_sub(i as usize)),
                // longer record: the buffer holds its first `want` bytes; the rest is lost
                Some(_) => Err(fault(&s).with_transferred(o.transferred.min(want))),
                None => Err(fault(&s)),
            };
        }
        if matches!(s.key, sense_key::NO_SENSE | sense_key::RECOVERED_ERROR) {
            if s.eom {
                call.flags |= reel_plugin_abi::REEL_FLAG_EOM;
            }
            return Ok(o.transferred.min(want));
        }
        Err(fault(&s))
    }
}

#[cfg(test)]
mod tests;

/// Whether a write's fault is early warning (the data was written).
fn is_early_warning(f: &Fault) -> bool {
    f.sense_key == sense_key::NO_SENSE
        && (f.asc, f.ascq) == reel_plugin_abi::asc::END_OF_MEDIUM
        && f.flags & reel_plugin_abi::REEL_FLAG_EOM != 0
}
