//! Finding SCSI devices in sysfs: which `sg` node is which unit serial, which `nst` node
//! belongs to which `sg` node. /dev numbers change when the target restarts, so reel names
//! devices by serial and resolves them at each open.

use std::path::{Path, PathBuf};

use reel_scsi_protocol::cdb::inquiry::{self, TYPE_CHANGER, TYPE_TAPE};

use crate::config::DeviceRef;

/// One SCSI device as sysfs shows it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ScsiDevice {
    /// `sgN`.
    pub sg: String,
    /// `nstN` for a tape drive.
    pub nst: Option<String>,
    /// Peripheral device type.
    pub kind: u8,
    /// Unit serial number (VPD 80h), if known.
    pub serial: Option<String>,
}

/// A device resolved to its nodes.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Resolved {
    /// The `st` no-rewind node (drives only).
    pub nst: Option<PathBuf>,
    /// The `sg` node, if sysfs names one.
    pub sg: Option<PathBuf>,
}

/// Resolution failures.
#[derive(Debug, thiserror::Error, PartialEq, Eq)]
pub enum ResolveError {
    /// No device with that serial.
    #[error(
        "no {kind} with unit serial {serial} under {sysfs}/class/scsi_generic (found: {found}); \
         check that the target is up, the serial is right, and the sg and st modules are loaded"
    )]
    NotFound {
        /// "tape drive" or "medium changer".
        kind: &'static str,
        /// The serial asked for.
        serial: String,
        /// sysfs root.
        sysfs: String,
        /// What was found instead.
        found: String,
    },
    /// A drive given by path that is not a no-rewind st node.
    #[error("{0} is not a no-rewind st node (/dev/nstN); reel needs the no-rewind node")]
    NotNoRewind(String),
}

fn read_trim(p: &Path) -> Option<String> {
    std::fs::read_to_string(p)
        .ok()
        .map(|s| s.trim().to_string())
}

fn is_nst(name: &str) -> bool {
    name.strip_prefix("nst")
        .is_some_and(|n| !n.is_empty() && n.bytes().all(|b| b.is_ascii_digit()))
}

/// Every `sg` device under `sysfs`, with its type, serial and st node. `probe_serial` is asked
/// for the serial of an `sgN` whose sysfs has no `vpd_pg80` (it sends INQUIRY VPD 80h).
pub fn scan(sysfs: &Path, probe_serial: &dyn Fn(&str) -> Option<String>) -> Vec<ScsiDevice> {
    let dir = sysfs.join("class/scsi_generic");
    let Ok(entries) = std::fs::read_dir(&dir) else {
        return Vec::new();
    };
    let mut out: Vec<ScsiDevice> = entries
        .filter_map(|e| e.ok())
        .filter_map(|e| {
            let sg = e.file_name().to_string_lossy().into_owned();
            let dev = e.path().join("device");
            let kind = read_trim(&dev.join("type"))?.parse::<u8>().ok()?;
            let serial = std::fs::read(dev.join("vpd_pg80"))
                .ok()
                .and_then(|b| inquiry::parse_serial(&b).ok())
                .filter(|s| !s.is_empty())
                .or_else(|| probe_serial(&sg));
            let nst = std::fs::read_dir(dev.join("scsi_tape")).ok().and_then(|d| {
                d.filter_map(|e| e.ok())
                    .map(|e| e.file_name().to_string_lossy().into_owned())
                    .find(|n| is_nst(n))
            });
            Some(ScsiDevice {
                sg,
                nst,
                kind,
                serial,
            })
        })
        .collect();
    out.sort_by(|a, b| a.sg.cmp(&b.sg));
    out
}

/// Resolve a drive: its `nst` node and its `sg` node.
pub fn resolve_drive(
    r: &DeviceRef,
    sysfs: &Path,
    dev: &Path,
    probe_serial: &dyn Fn(&str) -> Option<String>,
) -> Result<Resolved, ResolveError> {
    match r {
        DeviceRef::Path(p) => {
            let name = p
                .file_name()
                .map(|n| n.to_string_lossy().into_owned())
                .unwrap_or_default();
            if !is_nst(&name) {
                return Err(ResolveError::NotNoRewind(p.display().to_string()));
            }
            let sg = std::fs::read_dir(
                sysfs
                    .join("class/scsi_tape")
                    .join(&name)
                    .join("device/scsi_generic"),
            )
            .ok()
            .and_then(|mut d| d.find_map(|e| e.ok()))
            .map(|e| dev.join(e.file_name()));
            Ok(Resolved {
                nst: Some(p.clone()),
                sg,
            })
        }
        DeviceRef::Serial(s) => {
            let all = scan(sysfs, probe_serial);
            find(&all, s, TYPE_TAPE, sysfs).map(|d| Resolved {
                nst: d.nst.as_ref().map(|n| dev.join(n)),
                sg: Some(dev.join(&d.sg)),
            })
        }
    }
}

/// Resolve a changer to its `sg` node.
pub fn resolve_changer(
    r: &DeviceRef,
    sysfs: &Path,
    dev: &Path,
    probe_serial: &dyn Fn(&str) -> Option<String>,
) -> Result<PathBuf, ResolveError> {
    match r {
        DeviceRef::Path(p) => Ok(p.clone()),
        DeviceRef::Serial(s) => {
            let all = scan(sysfs, probe_serial);
            find(&all, s, TYPE_CHANGER, sysfs).map(|d| dev.join(&d.sg))
        }
    }
}

fn find<'a>(
    all: &'a [ScsiDevice],
    serial: &str,
    kind: u8,
    sysfs: &Path,
) -> Result<&'a ScsiDevice, ResolveError> {
    all.iter()
        .find(|d| {
            d.kind == kind
                && d.serial.as_deref() == Some(serial)
                && (kind != TYPE_TAPE || d.nst.is_some())
        })
        .ok_or_else(|| {
            let found: Vec<String> = all
                .iter()
                .map(|d| {
                    format!(
                        "{} type {} serial {}",
                        d.sg,
                        d.kind,
                        d.serial.as_deref().unwrap_or("?")
                    )
                })
                .collect();
            ResolveError::NotFound {
                kind: if kind == TYPE_TAPE {
                    "tape drive"
                } else {
                    "medium changer"
                },
                serial: serial.to_string(),
                sysfs: sysfs.display().to_string(),
                found: if found.is_empty() {
                    "nothing".into()
                } else {
                    found.join(", ")
                },
            }
        })
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::os::unix::fs::symlink;

    /// A sysfs tree shaped like the kernel's: SCSI devices under devices/, class links to them.
    fn fake_sysfs() -> tempfile::TempDir {
        let t = tempfile::tempdir().unwrap();
        let root = t.path();
        let add = |hctl: &str, kind: u8, sg: &str, nst: Option<&str>, serial: Option<&str>| {
            let d = root.join("devices/platform/host0/target0:0:0").join(hctl);
            std::fs::create_dir_all(d.join("scsi_generic").join(sg)).unwrap();
            std::fs::write(d.join("type"), format!("{kind}\n")).unwrap();
            if let Some(s) = serial {
                // tgt right-aligns the serial in a 36-byte field
                let mut page = vec![kind, 0x80, 0, 36];
                page.extend_from_slice(format!("{s:>36}").as_bytes());
                std::fs::write(d.join("vpd_pg80"), page).unwrap();
            }
            std::fs::create_dir_all(root.join("class/scsi_generic").join(sg)).unwrap();
            symlink(&d, root.join("class/scsi_generic").join(sg).join("device")).unwrap();
            if let Some(n) = nst {
                for node in [
                    n.trim_start_matches('n').to_string(),
                    n.to_string(),
                    format!("{n}a"),
                ] {
                    std::fs::create_dir_all(d.join("scsi_tape").join(&node)).unwrap();
                    std::fs::create_dir_all(root.join("class/scsi_tape").join(&node)).unwrap();
                    symlink(&d, root.join("class/scsi_tape").join(&node).join("device")).unwrap();
                }
            }
        };
        add("0:0:0:1", 1, "sg0", Some("nst0"), Some("DRV0000001"));
        add("0:0:0:2", 1, "sg2", Some("nst1"), None);
        add("0:0:0:3", 8, "sg1", None, Some("LIB0000001"));
        t
    }

    fn no_probe(_: &str) -> Option<String> {
        None
    }

    #[test]
    fn scan_reads_type_serial_and_st_node() {
        let t = fake_sysfs();
        let all = scan(t.path(), &no_probe);
        assert_eq!(all.len(), 3);
        assert_eq!(
            all[0],
            ScsiDevice {
                sg: "sg0".into(),
                nst: Some("nst0".into()),
                kind: 1,
                serial: Some("DRV0000001".into())
            }
        );
        assert_eq!(all[1].kind, 8);
        assert_eq!(all[2].serial, None, "no vpd_pg80 and no probe");
        let probed = scan(t.path(), &|sg| {
            (sg == "sg2").then(|| "DRV0000002".to_string())
        });
        assert_eq!(probed[2].serial.as_deref(), Some("DRV0000002"));
    }

    #[test]
    fn resolve_by_serial_and_by_path() {
        let t = fake_sysfs();
        let dev = Path::new("/dev");
        let r = resolve_drive(
            &DeviceRef::Serial("DRV0000001".into()),
            t.path(),
            dev,
            &no_probe,
        )
        .unwrap();
        assert_eq!(r.nst, Some(PathBuf::from("/dev/nst0")));
        assert_eq!(r.sg, Some(PathBuf::from("/dev/sg0")));
        let r = resolve_drive(
            &DeviceRef::Path("/dev/nst1".into()),
            t.path(),
            dev,
            &no_probe,
        )
        .unwrap();
        assert_eq!(r.sg, Some(PathBuf::from("/dev/sg2")));
        let r = resolve_drive(
            &DeviceRef::Serial("DRV0000002".into()),
            t.path(),
            dev,
            &|sg| (sg == "sg2").then(|| "DRV0000002".to_string()),
        )
        .unwrap();
        assert_eq!(r.nst, Some(PathBuf::from("/dev/nst1")));
        let c = resolve_changer(
            &DeviceRef::Serial("LIB0000001".into()),
            t.path(),
            dev,
            &no_probe,
        )
        .unwrap();
        assert_eq!(c, PathBuf::from("/dev/sg1"));
    }

    #[test]
    fn resolution_failures_explain() {
        let t = fake_sysfs();
        let dev = Path::new("/dev");
        // the changer's serial is not a drive
        let e = resolve_drive(
            &DeviceRef::Serial("LIB0000001".into()),
            t.path(),
            dev,
            &no_probe,
        )
        .unwrap_err();
        let msg = e.to_string();
        assert!(
            msg.contains("no tape drive with unit serial LIB0000001"),
            "{msg}"
        );
        assert!(msg.contains("sg1 type 8 serial LIB0000001"), "{msg}");
        let e = resolve_drive(
            &DeviceRef::Path("/dev/st0".into()),
            t.path(),
            dev,
            &no_probe,
        )
        .unwrap_err();
        assert_eq!(e, ResolveError::NotNoRewind("/dev/st0".into()));
        let empty = tempfile::tempdir().unwrap();
        let e = resolve_changer(&DeviceRef::Serial("X".into()), empty.path(), dev, &no_probe)
            .unwrap_err();
        assert!(e.to_string().contains("found: nothing"));
    }
}
