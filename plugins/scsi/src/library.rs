//! The plugin's [`Library`]: a changer and its drives, opened from the configuration string.
//!
//! Drives are tied to changer drive elements by serial number: the changer's DVCID device
//! identifier of each drive element against the VPD 80h serial of each configured drive. A
//! drive element whose drive cannot be told for certain is left without a device (opening it
//! fails with a message) rather than guessed: loading a cartridge into one drive and writing
//! through another would write to the wrong cartridge.

use std::ffi::CStr;

use reel_plugin_abi::sdk::{Call, Element, Fault, Library, LibraryInfo};
use reel_plugin_abi::{
    REEL_CAP_CHANGER, REEL_CAP_GEOMETRY, REEL_CAP_IMMEDIATE_FILEMARKS, REEL_CAP_IMPORT_EXPORT,
    REEL_CAP_LBP, REEL_CAP_MAM, REEL_CAP_RAO, REEL_CAP_SPACE_BACKWARD, REEL_CAP_STATISTICS,
    REEL_CAP_TAPE_ALERTS, REEL_ELEMENT_DRIVE,
};

use crate::changer::Changer;
use crate::config::{Config, LbpMode};
use crate::device::ScsiDevice;
use crate::drive::{TapeDrive, identify};
use crate::resolve;
use reel_scsi_protocol::cdb::element::{self, ElementStatus};

/// One drive of the library, in drive-index order.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct DriveEntry {
    /// Changer element address, when the library has a changer.
    pub element: Option<u16>,
    /// Device address (resolved), when known.
    pub address: Option<String>,
    /// Serial number (VPD 80h), when known.
    pub serial: Option<String>,
    /// Why no device is tied to the element, when none is.
    pub unmatched: Option<String>,
}

/// A library: optional changer plus drives.
pub struct ScsiLibrary {
    cfg: Config,
    changer: Option<Changer>,
    drives: Vec<DriveEntry>,
}

/// Tie drive elements to configured drives by serial. Returns, for each element, the index
/// of its drive in `serials`.
pub fn assign_drives(elements: &[ElementStatus], serials: &[String]) -> Vec<Option<usize>> {
    let mut out: Vec<Option<usize>> = vec![None; elements.len()];
    let ids: Vec<Option<String>> = elements.iter().map(ElementStatus::drive_serial).collect();
    if ids.iter().all(Option::is_none) {
        // No DVCID at all: the configuration lists drives in element address order.
        for (i, o) in out.iter_mut().enumerate() {
            *o = (i < serials.len()).then_some(i);
        }
        return out;
    }
    let mut used = vec![false; serials.len()];
    for (e, id) in ids.iter().enumerate() {
        if let Some(id) = id
            && let Some(d) = serials.iter().position(|s| s == id)
            && !used[d]
        {
            out[e] = Some(d);
            used[d] = true;
        }
    }
    // A serial cut short (tgt drops the last bytes of the last descriptor): a unique prefix.
    for (e, id) in ids.iter().enumerate() {
        if out[e].is_some() {
            continue;
        }
        if let Some(id) = id {
            let cands: Vec<usize> = (0..serials.len())
                .filter(|d| !used[*d] && serials[*d].starts_with(id.as_str()))
                .collect();
            if let [d] = cands[..] {
                out[e] = Some(d);
                used[d] = true;
            }
        }
    }
    // One element and one drive left: they belong together.
    let free_e: Vec<usize> = (0..elements.len()).filter(|e| out[*e].is_none()).collect();
    let free_d: Vec<usize> = (0..serials.len()).filter(|d| !used[*d]).collect();
    if let ([e], [d]) = (&free_e[..], &free_d[..]) {
        out[*e] = Some(*d);
    }
    out
}

/// Tie drive elements to configured drives as `drive_elements=` says: `wanted[i]` is the
/// element of drive `i`. Every named element must be one of the changer's drive elements.
pub fn tie_drives(elements: &[ElementStatus], wanted: &[u16]) -> Result<Vec<Option<usize>>, Fault> {
    for w in wanted {
        if !elements.iter().any(|e| e.address == *w) {
            return Err(Fault::invalid(format!(
                "drive_elements= names element {w}, which is not a drive element of the changer; its drive elements are {}",
                elements
                    .iter()
                    .map(|e| e.address.to_string())
                    .collect::<Vec<_>>()
                    .join(", ")
            )));
        }
    }
    Ok(elements
        .iter()
        .map(|e| wanted.iter().position(|w| *w == e.address))
        .collect())
}

/// Why the drive element `e` got no configured drive, and what to do.
fn unmatched_reason(e: &ElementStatus, serials: &[String]) -> String {
    match e.drive_serial() {
        None => "the changer reports no identifier for it; add its address to drives= and tie it with drive_elements= (one element address per drives= entry, same order)".to_string(),
        Some(id) => {
            let matching: Vec<&str> = serials
                .iter()
                .filter(|s| s.starts_with(id.as_str()))
                .map(String::as_str)
                .collect();
            match matching.len() {
                0 => format!(
                    "the changer reports serial `{id}` for it and no configured drive has it (configured: {}); add its address to drives=, or tie drives to elements with drive_elements=",
                    if serials.is_empty() { "none".to_string() } else { serials.join(", ") }
                ),
                _ => format!(
                    "the changer reports `{id}` for it, which does not tell apart the configured drives {}; tie each drive to its element with drive_elements= (one element address per drives= entry, same order)",
                    matching.join(", ")
                ),
            }
        }
    }
}

impl ScsiLibrary {
    /// The drives in index order.
    pub fn drives(&self) -> &[DriveEntry] {
        &self.drives
    }

    fn open_inner(config: &str) -> Result<ScsiLibrary, Fault> {
        let cfg = Config::parse(config).map_err(|e| Fault::invalid(e.to_string()))?;
        let resolve = |a: &str| -> Result<String, Fault> {
            match reel_plugin_abi::config::serial(a) {
                Some(serial) => resolve::sg_by_serial(&cfg, serial).map_err(|e| e.to_fault()),
                None => Ok(a.to_string()),
            }
        };
        let changer = match &cfg.changer {
            Some(a) => {
                let addr = resolve(a)?;
                let mut c = Changer::open(ScsiDevice::open(&cfg, &addr)?)?;
                if cfg.initialize_element_status {
                    c.initialize()?;
                }
                Some(c)
            }
            None => None,
        };
        let mut probed: Vec<(String, String)> = Vec::new();
        for a in &cfg.drives {
            let addr = resolve(a)?;
            let mut dev = ScsiDevice::open(&cfg, &addr)?;
            let (_, serial) = identify(&mut dev)?;
            probed.push((addr, serial));
        }
        let mut lib = ScsiLibrary {
            cfg,
            changer,
            drives: Vec::new(),
        };
        let serials: Vec<String> = probed.iter().map(|p| p.1.clone()).collect();
        match lib.changer.as_mut() {
            Some(c) => {
                let elements = c.status(element::TYPE_DATA_TRANSFER)?;
                let map = if lib.cfg.drive_elements.is_empty() {
                    assign_drives(&elements, &serials)
                } else {
                    tie_drives(&elements, &lib.cfg.drive_elements)?
                };
                for (e, d) in elements.iter().zip(&map) {
                    let unmatched = d.is_none().then(|| unmatched_reason(e, &serials));
                    lib.drives.push(DriveEntry {
                        element: Some(e.address),
                        address: d.map(|d| probed[d].0.clone()),
                        serial: d.map(|d| probed[d].1.clone()),
                        unmatched,
                    });
                    if d.is_none() {
                        tracing::warn!(element = e.address, id = %e.device_id, "drive element has no configured drive (or its serial cannot be matched)");
                    }
                }
                for (d, (addr, serial)) in probed.iter().enumerate() {
                    if !map.contains(&Some(d)) {
                        tracing::warn!(%addr, %serial, "configured drive matches no drive element of the changer; it gets an index past the changer's drives");
                        lib.drives.push(DriveEntry {
                            element: None,
                            address: Some(addr.clone()),
                            serial: Some(serial.clone()),
                            unmatched: None,
                        });
                    }
                }
            }
            None => {
                lib.drives = probed
                    .into_iter()
                    .map(|(a, s)| DriveEntry {
                        element: None,
                        address: Some(a),
                        serial: Some(s),
                        unmatched: None,
                    })
                    .collect();
            }
        }
        Ok(lib)
    }

    fn to_elements(&self, status: &[ElementStatus]) -> Vec<Element> {
        let mut ordinal = [0u32; 5];
        status
            .iter()
            .map(|e| {
                let index = if u32::from(e.element_type) == REEL_ELEMENT_DRIVE {
                    self.drives
                        .iter()
                        .position(|d| d.element == Some(e.address))
                        .map_or(u32::MAX, |i| i as u32)
                } else {
                    let slot = ordinal.get_mut(e.element_type as usize);
                    match slot {
                        Some(n) => {
                            *n += 1;
                            *n - 1
                        }
                        None => 0,
                    }
                };
                e.to_element(index)
            })
            .collect()
    }

    fn changer(&mut self) -> Result<&mut Changer, Fault> {
        self.changer.as_mut().ok_or_else(|| {
            Fault::unsupported("a medium changer (no changer= address in the plugin config)")
        })
    }
}

fn elapsed(call: &mut Call, c: Option<&mut Changer>) {
    if let Some(c) = c {
        call.elapsed_ns += u64::try_from(c.take_busy().as_nanos()).unwrap_or(u64::MAX);
    }
}

fn address16(a: u32) -> Result<u16, Fault> {
    u16::try_from(a)
        .map_err(|_| Fault::invalid(format!("element address {a} is larger than 65535")))
}

impl Library for ScsiLibrary {
    type Drive = TapeDrive;
    const NAME: &'static CStr = c"reel-plugin-scsi";
    const VERSION: &'static CStr = reel_plugin_abi::crate_version!();
    const CAPS: u64 = REEL_CAP_CHANGER
        | REEL_CAP_LBP
        | REEL_CAP_MAM
        | REEL_CAP_GEOMETRY
        | REEL_CAP_RAO
        | REEL_CAP_STATISTICS
        | REEL_CAP_TAPE_ALERTS
        | REEL_CAP_IMPORT_EXPORT
        | REEL_CAP_IMMEDIATE_FILEMARKS
        | REEL_CAP_SPACE_BACKWARD;

    fn open(config: &str, call: &mut Call) -> Result<Self, Fault> {
        let t0 = std::time::Instant::now();
        let r = ScsiLibrary::open_inner(config);
        call.elapsed_ns = u64::try_from(t0.elapsed().as_nanos()).unwrap_or(u64::MAX);
        r
    }

    fn inventory(&mut self, call: &mut Call) -> Result<Vec<Element>, Fault> {
        let Some(c) = self.changer.as_mut() else {
            return Ok(self
                .drives
                .iter()
                .enumerate()
                .map(|(i, _)| Element {
                    kind: REEL_ELEMENT_DRIVE,
                    address: i as u32,
                    index: i as u32,
                    flags: 0,
                    source_address: 0,
                    barcode: String::new(),
                })
                .collect());
        };
        let r = c.inventory();
        elapsed(call, Some(c));
        let status = r?;
        Ok(self.to_elements(&status))
    }

    fn move_medium(&mut self, source: u32, destination: u32, call: &mut Call) -> Result<(), Fault> {
        let (s, d) = (address16(source)?, address16(destination)?);
        let c = self.changer()?;
        let r = c.move_medium(s, d);
        elapsed(call, Some(c));
        r.map_err(Fault::from)
    }

    fn control(&mut self, request: &str, call: &mut Call) -> Result<String, Fault> {
        let op = serde_json::from_str::<serde_json::Value>(request)
            .ok()
            .and_then(|v| v.get("op").and_then(|o| o.as_str()).map(str::to_string))
            .unwrap_or_else(|| request.trim().to_string());
        match op.as_str() {
            "initialize_element_status" => {
                let c = self.changer()?;
                let r = c.initialize();
                elapsed(call, Some(c));
                r?;
                Ok(r#"{"ok":true}"#.to_string())
            }
            "drives" => {
                let list: Vec<serde_json::Value> = self
                    .drives
                    .iter()
                    .enumerate()
                    .map(|(i, d)| {
                        serde_json::json!({
                            "index": i,
                            "element": d.element,
                            "address": d.address,
                            "serial": d.serial,
                        })
                    })
                    .collect();
                Ok(serde_json::Value::Array(list).to_string())
            }
            other => Err(Fault::invalid(format!(
                "unknown control request `{other}`; known: {{\"op\":\"initialize_element_status\"}}, {{\"op\":\"drives\"}}"
            ))),
        }
    }

    fn info(&mut self, _call: &mut Call) -> Result<LibraryInfo, Fault> {
        // The changer's own identity; a drive-only configuration, or a changer that reports no
        // serial number, has none to give (the host then names the library from its config).
        let c = self.changer()?;
        if c.serial.is_empty() {
            return Err(Fault::unsupported("a changer serial number (VPD 80h)"));
        }
        Ok(LibraryInfo {
            vendor: c.vendor.clone(),
            product: c.product.clone(),
            serial: c.serial.clone(),
        })
    }

    fn open_drive(&mut self, index: u32, call: &mut Call) -> Result<TapeDrive, Fault> {
        let t0 = std::time::Instant::now();
        let entry = self.drives.get(index as usize).cloned().ok_or_else(|| {
            Fault::invalid(format!(
                "no drive {index}: the library has {} drives",
                self.drives.len()
            ))
        })?;
        let Some(address) = entry.address else {
            return Err(Fault::invalid(format!(
                "drive {index} (element {}) has no device: {}",
                entry.element.map_or("?".to_string(), |e| e.to_string()),
                entry.unmatched.as_deref().unwrap_or(
                    "add its address to drives= in the plugin config, and tie it with drive_elements="
                )
            )));
        };
        let dev = ScsiDevice::open(&self.cfg, &address)?;
        let mut d = TapeDrive::open(dev, self.cfg.lbp, self.cfg.generation)?;
        call.elapsed_ns = u64::try_from(t0.elapsed().as_nanos()).unwrap_or(u64::MAX);
        let serial = reel_plugin_abi::sdk::Drive::info(&mut d, &mut Call::default())?.serial;
        if entry.serial.as_deref().is_some_and(|s| s != serial) {
            return Err(Fault::invalid(format!(
                "{address} now reports serial {serial}, not {} as when the library was opened; device nodes were renumbered: reopen the library",
                entry.serial.unwrap_or_default()
            )));
        }
        if self.cfg.lbp == LbpMode::Crc32c {
            reel_plugin_abi::sdk::Drive::set_lbp(
                &mut d,
                reel_plugin_abi::REEL_LBP_CRC32C,
                &mut Call::default(),
            )?;
        }
        Ok(d)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn drive_el(addr: u16, id: &str) -> ElementStatus {
        ElementStatus {
            element_type: 4,
            address: addr,
            device_id_type: 1,
            device_id: if id.is_empty() {
                String::new()
            } else {
                format!("{:<8}{:<16}{}", "IBM", "ULT3580-TD9", id)
            },
            ..ElementStatus::default()
        }
    }

    fn s(v: &[&str]) -> Vec<String> {
        v.iter().map(|x| x.to_string()).collect()
    }

    #[test]
    fn exact_serials_in_any_config_order() {
        let e = [drive_el(256, "DRV0000001"), drive_el(257, "DRV0000002")];
        assert_eq!(
            assign_drives(&e, &s(&["DRV0000002", "DRV0000001"])),
            vec![Some(1), Some(0)]
        );
    }

    #[test]
    fn tgt_cut_serial_is_matched_by_elimination() {
        // tgt: the last descriptor loses 8 bytes: "IBM     ULT3580-TD9     DR"
        let e = [drive_el(256, "DRV0000001"), drive_el(257, "DR")];
        assert_eq!(
            assign_drives(&e, &s(&["DRV0000001", "DRV0000002"])),
            vec![Some(0), Some(1)]
        );
        // unique prefix, with a third drive configured
        let e = [drive_el(256, "DRV0000001"), drive_el(257, "DRV00000")];
        assert_eq!(
            assign_drives(&e, &s(&["DRV0000001", "DRV0000002", "XYZ"])),
            vec![Some(0), Some(1)]
        );
    }

    #[test]
    fn drive_elements_tie_what_serials_cannot() {
        // tgt: serials sharing their first 10 bytes leave the changer's ids identical.
        let e = [drive_el(256, "SIMDRV0000"), drive_el(257, "SIMDRV0000")];
        let serials = s(&["SIMDRV0000A", "SIMDRV0000B"]);
        assert_eq!(assign_drives(&e, &serials), vec![None, None]);
        let why = unmatched_reason(&e[0], &serials);
        assert!(
            why.contains("does not tell apart") && why.contains("drive_elements="),
            "{why}"
        );
        // Configured in the other order: drive 0 is element 257.
        assert_eq!(tie_drives(&e, &[257, 256]).unwrap(), vec![Some(1), Some(0)]);
        let bad = tie_drives(&e, &[256, 300]).unwrap_err().to_string();
        assert!(
            bad.contains("element 300") && bad.contains("256, 257"),
            "{bad}"
        );
        let none = unmatched_reason(&drive_el(258, "OTHER00001"), &serials);
        assert!(none.contains("no configured drive has it"), "{none}");
    }

    #[test]
    fn ambiguity_is_not_guessed() {
        let e = [
            drive_el(256, "DRV0000001"),
            drive_el(257, "DR"),
            drive_el(258, "DR"),
        ];
        assert_eq!(
            assign_drives(&e, &s(&["DRV0000001", "DRV0000002", "DRV0000003"])),
            vec![Some(0), None, None]
        );
        // a configured drive that is not in this library
        let e = [drive_el(256, "AAA")];
        assert_eq!(assign_drives(&e, &s(&["BBB", "CCC"])), vec![None]);
    }

    #[test]
    fn without_dvcid_the_config_order_is_the_element_order() {
        let e = [drive_el(256, ""), drive_el(257, ""), drive_el(258, "")];
        assert_eq!(
            assign_drives(&e, &s(&["A", "B"])),
            vec![Some(0), Some(1), None]
        );
    }

    #[test]
    fn bad_config_is_invalid_argument() {
        let Err(f) = ScsiLibrary::open_inner("lbp=maybe") else {
            panic!("opened");
        };
        assert_eq!(f.code, reel_plugin_abi::REEL_E_INVALID_ARG);
        assert!(f.message.contains("lbp=crc32c"), "{}", f.message);
    }
}
