//! The plugin's configuration string, read as every reel plugin reads one
//! (`reel_plugin_abi::config`; docs/ABI.md, "Configuration strings"): `key=value` entries, one
//! per line or `;`-separated, `#` to the end of a line a comment, the last value of a key wins.
//!
//! ```text
//! changer=iscsi://127.0.0.1:3270/iqn.2026-11.test:reel/3
//! drives=iscsi://127.0.0.1:3270/iqn.2026-11.test:reel/1,iscsi://127.0.0.1:3270/iqn.2026-11.test:reel/2
//! lbp=crc32c
//! timeout.load=7200
//! ```
//!
//! Device addresses: `iscsi://HOST:PORT/TARGET-IQN/LUN`, `sg:/dev/sgN` (or `/dev/sgN`), or
//! `serial=SERIAL`: the `/dev/sg*` node whose VPD page 80h carries that serial number, found
//! when the library is opened. `drives=` lists the drives, drive 0 first.
//!
//! Each configured drive is tied to the changer's drive element that reports its serial
//! number. Where the changer's identifiers cannot tell the drives apart (tgt copies only the
//! first 10 bytes of a serial into the element's device identifier), `drive_elements=E,E` ties
//! them explicitly: the changer element address of each `drives=` entry, in the same order.

use std::time::Duration;

use reel_plugin_abi::config;

use crate::policy::Policy;
use crate::timeouts::Class;

/// Logical block protection wanted on every drive.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum LbpMode {
    /// No protection information.
    Off,
    /// CRC32C appended on write, checked on read (mode page 0Ah/F0h, method 02h).
    Crc32c,
}

/// The parsed configuration.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Config {
    /// Changer address, if the library has one.
    pub changer: Option<String>,
    /// Drive addresses.
    pub drives: Vec<String>,
    /// The changer's drive element address of each entry of `drives`, in the same order,
    /// when given (`drive_elements=`): ties them without matching serials.
    pub drive_elements: Vec<u16>,
    /// Timeout overrides, seconds.
    pub timeouts: Vec<(Class, u64)>,
    /// LBP mode set on every drive at open and after each load.
    pub lbp: LbpMode,
    /// iSCSI initiator name.
    pub initiator: String,
    /// Retry policy.
    pub policy: Policy,
    /// Run INITIALIZE ELEMENT STATUS when the library is opened.
    pub initialize_element_status: bool,
    /// LTO generation override (otherwise read from INQUIRY / REPORT DENSITY SUPPORT).
    pub generation: Option<u8>,
}

impl Default for Config {
    fn default() -> Config {
        Config {
            changer: None,
            drives: Vec::new(),
            drive_elements: Vec::new(),
            timeouts: Vec::new(),
            lbp: LbpMode::Off,
            initiator: "iqn.2026-11.org.reel:initiator".to_string(),
            policy: Policy::default(),
            initialize_element_status: false,
            generation: None,
        }
    }
}

/// A configuration entry that cannot be used.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[error("scsi plugin config, `{entry}`: {problem}")]
pub struct ConfigError {
    /// The offending entry.
    pub entry: String,
    /// What is wrong and what is expected.
    pub problem: String,
}

fn err(entry: &str, problem: impl Into<String>) -> ConfigError {
    ConfigError {
        entry: entry.to_string(),
        problem: problem.into(),
    }
}

fn check_address(entry: &str, a: &str) -> Result<String, ConfigError> {
    let a = a.trim();
    if a.starts_with("serial:") {
        return Err(err(
            entry,
            format!("`{a}`: a device is named by serial number as serial=SERIAL"),
        ));
    }
    let ok = a.starts_with("iscsi://")
        || a.starts_with("sg:/dev/")
        || a.starts_with("/dev/")
        || config::serial(a).is_some_and(|s| !s.is_empty());
    if ok {
        Ok(a.to_string())
    } else {
        Err(err(
            entry,
            format!(
                "`{a}` is not a device address; use iscsi://HOST:PORT/TARGET-IQN/LUN, sg:/dev/sgN or serial=SERIAL"
            ),
        ))
    }
}

impl Config {
    /// Parse a configuration string.
    pub fn parse(text: &str) -> Result<Config, ConfigError> {
        let mut c = Config::default();
        let entries = config::entries(text).map_err(|e| ConfigError {
            entry: text.trim().to_string(),
            problem: format!("{e}; expected key=value"),
        })?;
        for config::Entry { key, value, .. } in entries {
            let entry = &format!("{key}={value}");
            let secs = |v: &str| -> Result<u64, ConfigError> {
                v.parse::<u64>()
                    .ok()
                    .filter(|s| *s > 0)
                    .ok_or_else(|| err(entry, "expected a whole number of seconds > 0"))
            };
            match key {
                "changer" => c.changer = Some(check_address(entry, value)?),
                "drives" => {
                    c.drives = config::list(value)
                        .map(|d| check_address(entry, d))
                        .collect::<Result<_, _>>()?;
                }
                "drive_elements" => {
                    c.drive_elements = config::list(value)
                        .map(|e| {
                            e.trim().parse::<u16>().map_err(|_| {
                                err(
                                    entry,
                                    format!(
                                        "`{}` is not an element address; give the changer's drive element address (0..65535) of each drives= entry, in the same order",
                                        e.trim()
                                    ),
                                )
                            })
                        })
                        .collect::<Result<_, _>>()?;
                }
                "drive" => {
                    return Err(err(
                        entry,
                        "not a key: list every drive in one drives=ADDRESS,ADDRESS entry, drive 0 first",
                    ));
                }
                "lbp" => {
                    c.lbp = match value {
                        "crc32c" => LbpMode::Crc32c,
                        "off" => LbpMode::Off,
                        _ => return Err(err(entry, "expected lbp=crc32c or lbp=off")),
                    }
                }
                "initiator" => {
                    if !value.starts_with("iqn.") && !value.starts_with("eui.") {
                        return Err(err(
                            entry,
                            "an iSCSI initiator name starts with iqn. or eui.",
                        ));
                    }
                    c.initiator = value.to_string();
                }
                "unit_attention_retries" => {
                    c.policy.unit_attention_retries = value
                        .parse()
                        .map_err(|_| err(entry, "expected a whole number"))?;
                }
                "not_ready_wait" => c.policy.not_ready_wait = Duration::from_secs(secs(value)?),
                "poll_ms" => {
                    let ms: u64 = value
                        .parse()
                        .map_err(|_| err(entry, "expected milliseconds"))?;
                    c.policy.poll = Duration::from_millis(ms.max(1));
                }
                "initialize_element_status" => {
                    c.initialize_element_status = match value {
                        "true" | "yes" | "1" => true,
                        "false" | "no" | "0" => false,
                        _ => return Err(err(entry, "expected true or false")),
                    }
                }
                "lto" => {
                    let g: u8 = value
                        .parse()
                        .ok()
                        .filter(|g| (1..=12).contains(g))
                        .ok_or_else(|| err(entry, "expected an LTO generation 1..12"))?;
                    c.generation = Some(g);
                }
                k => match k.strip_prefix("timeout.").map(Class::from_key) {
                    Some(Some(class)) => c.timeouts.push((class, secs(value)?)),
                    _ => {
                        let keys: Vec<&str> = Class::ALL.iter().map(|c| c.key()).collect();
                        return Err(err(
                            entry,
                            format!(
                                "unknown key; known: changer, drives, drive_elements, lbp, initiator, unit_attention_retries, not_ready_wait, poll_ms, initialize_element_status, lto, timeout.{{{}}}",
                                keys.join(",")
                            ),
                        ));
                    }
                },
            }
        }
        if !c.drive_elements.is_empty() {
            let entry = format!(
                "drive_elements={}",
                c.drive_elements
                    .iter()
                    .map(u16::to_string)
                    .collect::<Vec<_>>()
                    .join(",")
            );
            if c.changer.is_none() {
                return Err(err(
                    &entry,
                    "drive elements are a changer's: give changer=ADDRESS too, or drop drive_elements=",
                ));
            }
            if c.drive_elements.len() != c.drives.len() {
                return Err(err(
                    &entry,
                    format!(
                        "{} element(s) for {} drive(s): give one element address per drives= entry, in the same order",
                        c.drive_elements.len(),
                        c.drives.len()
                    ),
                ));
            }
            let mut seen = c.drive_elements.clone();
            seen.sort_unstable();
            if seen.windows(2).any(|w| w[0] == w[1]) {
                return Err(err(
                    &entry,
                    "an element is named twice: each drive has its own element",
                ));
            }
        }
        if c.changer.is_none() && c.drives.is_empty() {
            return Err(err(
                text.trim(),
                "no device: give changer=ADDRESS and/or drives=ADDRESS,ADDRESS",
            ));
        }
        Ok(c)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_lines_and_semicolons() {
        let c = Config::parse(
            "changer=iscsi://127.0.0.1:3270/iqn.2026-11.test:reel/3\n\
             # comment\n\
             drives=iscsi://127.0.0.1:3270/iqn.2026-11.test:reel/1, sg:/dev/sg3 ,serial=DRV0000001 # three\n\
             lbp=off; lbp=crc32c; timeout.load=10; timeout.read=20; lto=8; poll_ms=5",
        )
        .unwrap();
        assert_eq!(
            c.changer.as_deref(),
            Some("iscsi://127.0.0.1:3270/iqn.2026-11.test:reel/3")
        );
        assert_eq!(
            c.drives,
            vec![
                "iscsi://127.0.0.1:3270/iqn.2026-11.test:reel/1".to_string(),
                "sg:/dev/sg3".to_string(),
                "serial=DRV0000001".to_string()
            ]
        );
        assert_eq!(c.lbp, LbpMode::Crc32c);
        assert_eq!(c.timeouts, vec![(Class::LoadUnload, 10), (Class::Read, 20)]);
        assert_eq!(c.generation, Some(8));
        assert_eq!(c.policy.poll, Duration::from_millis(5));
    }

    #[test]
    fn errors_say_what_to_do() {
        for (bad, hint) in [
            ("drives=/tmp/x,ftp://y", "not a device address"),
            ("changer=sg:/dev/sg1\nlbp=yes", "lbp=crc32c"),
            ("changer=sg:/dev/sg1\ntimeout.load=0", "seconds > 0"),
            ("changer=sg:/dev/sg1\ntimeout.nope=3", "timeout.{status"),
            ("changer=sg:/dev/sg1\nnonsense", "key=value"),
            ("lbp=off", "no device"),
            ("changer=sg:/dev/sg1\ninitiator=bob", "iqn."),
            ("drives=serial=", "not a device address"),
            ("drives=serial:DRV1", "serial=SERIAL"),
            ("drive=/dev/sg1", "drives=ADDRESS,ADDRESS"),
            (
                "drives=sg:/dev/sg1\ndrive_elements=256",
                "give changer=ADDRESS too",
            ),
            (
                "changer=sg:/dev/sg0\ndrives=sg:/dev/sg1,sg:/dev/sg2\ndrive_elements=256",
                "one element address per drives= entry",
            ),
            (
                "changer=sg:/dev/sg0\ndrives=sg:/dev/sg1,sg:/dev/sg2\ndrive_elements=256,256",
                "named twice",
            ),
            (
                "changer=sg:/dev/sg0\ndrives=sg:/dev/sg1\ndrive_elements=0x100",
                "not an element address",
            ),
        ] {
            let e = Config::parse(bad).unwrap_err().to_string();
            assert!(e.contains(hint), "{bad}: {e}");
        }
    }
}
