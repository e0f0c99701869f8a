//! # reel-plugin-mhvtl: the Linux st/sg driver path
//!
//! A device plugin that drives tapes through the kernel's `st` driver (no-rewind node
//! `/dev/nstN`, variable block mode, MTIO ioctls, `read`/`write` of whole records) and the
//! medium changer through its `sg` node (READ ELEMENT STATUS, MOVE MEDIUM). It is the device
//! path of an mhVTL rig, and of any Linux host whose drives are only reachable through st.
//! Devices are named by unit serial and resolved in sysfs at each open: /dev numbers change
//! when mhVTL restarts.
//!
//! Not here: logical block protection (st cannot pass protection information; mhVTL does none
//! either), medium geometry and native RAO. MAM and TapeAlert are answered where the device
//! implements READ ATTRIBUTE and LOG SENSE (mhVTL does, tgt does not), so their capability
//! bits are not claimed. docs/MHVTL.md describes what st imposes and how this plugin absorbs
//! it.

pub mod changer;
pub mod config;
pub mod drive;
pub mod errno;
pub mod mtio;
pub mod sg;
pub mod sysfs;

use std::ffi::CStr;
use std::os::fd::AsFd;
use std::path::Path;
use std::time::{Duration, Instant};

use reel_plugin_abi::sdk::{Call, Element, Fault, Library, LibraryInfo};
use reel_plugin_abi::{
    REEL_CAP_CHANGER, REEL_CAP_IMMEDIATE_FILEMARKS, REEL_CAP_IMPORT_EXPORT,
    REEL_CAP_SPACE_BACKWARD, REEL_CAP_STATISTICS, REEL_E_TRANSPORT, REEL_ELEMENT_DRIVE,
};

use reel_scsi_protocol::cdb::inquiry;
use reel_scsi_protocol::command::DataDir;

use crate::changer::Changer;
use crate::config::{Config, DeviceRef};
use crate::drive::StDrive;
use crate::sysfs::Resolved;

/// Ask a `sg` node for its unit serial (INQUIRY VPD 80h), for devices whose sysfs has no
/// `vpd_pg80`.
fn probe_serial(dev: &Path, sg: &str) -> Option<String> {
    let f = changer::open_node(&dev.join(sg)).ok()?;
    let mut b = [0u8; 252];
    let (sense, n) = sg::run(
        f.as_fd(),
        &inquiry::inquiry_vpd(0x80, 252),
        DataDir::In(&mut b),
        Duration::from_secs(30),
    )
    .ok()?;
    if sense.is_some() {
        return None;
    }
    inquiry::parse_serial(&b[..n.min(b.len())]).ok()
}

/// The library: an optional changer and the drives of the configuration.
pub struct MhvtlLibrary {
    config: Config,
    changer: Option<Changer>,
    drives: Vec<(DeviceRef, Resolved)>,
}

impl Library for MhvtlLibrary {
    type Drive = StDrive;
    const NAME: &'static CStr = c"reel-plugin-mhvtl";
    const VERSION: &'static CStr = reel_plugin_abi::crate_version!();
    const CAPS: u64 = REEL_CAP_CHANGER
        | REEL_CAP_STATISTICS
        | REEL_CAP_IMMEDIATE_FILEMARKS
        | REEL_CAP_SPACE_BACKWARD
        | REEL_CAP_IMPORT_EXPORT;

    fn open(config: &str, call: &mut Call) -> Result<Self, Fault> {
        let t0 = Instant::now();
        let config = Config::parse(config).map_err(|e| Fault::invalid(e.to_string()))?;
        let probe = |sg: &str| probe_serial(&config.dev, sg);
        let not_found = |e: sysfs::ResolveError| Fault::code(REEL_E_TRANSPORT, e.to_string());
        let changer = match &config.changer {
            Some(r) => {
                let path = sysfs::resolve_changer(r, &config.sysfs, &config.dev, &probe)
                    .map_err(not_found)?;
                Some(Changer::open(&path, config.timeout)?)
            }
            None => None,
        };
        let mut drives = Vec::new();
        for r in &config.drives {
            let res =
                sysfs::resolve_drive(r, &config.sysfs, &config.dev, &probe).map_err(not_found)?;
            tracing::info!(drive = %r, nst = ?res.nst, sg = ?res.sg, "drive resolved");
            drives.push((r.clone(), res));
        }
        call.elapsed_ns = t0.elapsed().as_nanos() as u64;
        Ok(MhvtlLibrary {
            config,
            changer,
            drives,
        })
    }

    fn inventory(&mut self, call: &mut Call) -> Result<Vec<Element>, Fault> {
        let t0 = Instant::now();
        let r = match &mut self.changer {
            Some(c) => c.inventory(),
            // No changer: the configured drives, with nothing known about their media.
            None => Ok((0..self.drives.len() as u32)
                .map(|i| Element {
                    kind: REEL_ELEMENT_DRIVE,
                    address: i,
                    index: i,
                    flags: 0,
                    source_address: 0,
                    barcode: String::new(),
                })
                .collect()),
        };
        call.elapsed_ns = t0.elapsed().as_nanos() as u64;
        r
    }

    fn move_medium(&mut self, source: u32, destination: u32, call: &mut Call) -> Result<(), Fault> {
        let t0 = Instant::now();
        let r = match &mut self.changer {
            Some(c) => c.move_medium(source, destination),
            None => Err(Fault::unsupported(
                "MOVE MEDIUM without a changer (add changer=serial=... to the config)",
            )),
        };
        call.elapsed_ns = t0.elapsed().as_nanos() as u64;
        r
    }

    fn info(&mut self, _call: &mut Call) -> Result<LibraryInfo, Fault> {
        match &self.changer {
            Some(c) if !c.info.serial.is_empty() => Ok(c.info.clone()),
            Some(_) => Err(Fault::unsupported("a changer serial number (VPD 80h)")),
            None => Err(Fault::unsupported(
                "a library identity without a changer (add changer=serial=... to the config)",
            )),
        }
    }

    fn open_drive(&mut self, index: u32, call: &mut Call) -> Result<StDrive, Fault> {
        let t0 = Instant::now();
        let Some((r, res)) = self.drives.get(index as usize) else {
            return Err(Fault::invalid(format!(
                "drive index {index}: the config names {} drive(s) (drives= lists them in the order \
                 of the changer's drive element addresses)",
                self.drives.len()
            )));
        };
        let Some(nst) = res.nst.clone() else {
            return Err(Fault::code(
                REEL_E_TRANSPORT,
                format!("drive {r} has no st node; load the st module"),
            ));
        };
        let d = StDrive::open(nst, res.sg.clone(), self.config.timeout, &r.to_string());
        call.elapsed_ns = t0.elapsed().as_nanos() as u64;
        d
    }
}

reel_plugin_abi::export_plugin!(MhvtlLibrary);
