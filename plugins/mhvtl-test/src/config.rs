//! The plugin's configuration string: `key=value` lines.
//!
//! ```text
//! # the changer, by unit serial (VPD 80h) or by node
//! changer=serial=LIB0000001        # or: changer=/dev/sg1
//! # the drives, in the order of the changer's drive element addresses
//! drives=serial=DRV0000001,serial=DRV0000002   # or: drives=/dev/nst0,/dev/nst1
//! timeout_s=3600                   # optional: SCSI command timeout for sg commands
//! sysfs=/sys                       # optional: where sysfs is mounted
//! dev=/dev                         # optional: where the device nodes are
//! ```

use std::path::PathBuf;
use std::time::Duration;

/// A device named in the configuration.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum DeviceRef {
    /// A device node (`/dev/sg1`, `/dev/nst0`).
    Path(PathBuf),
    /// A unit serial number, resolved in sysfs at open.
    Serial(String),
}

impl std::fmt::Display for DeviceRef {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            DeviceRef::Path(p) => write!(f, "{}", p.display()),
            DeviceRef::Serial(s) => write!(f, "serial={s}"),
        }
    }
}

/// The parsed configuration.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Config {
    /// The medium changer, if the rig has one.
    pub changer: Option<DeviceRef>,
    /// The drives, index 0 first.
    pub drives: Vec<DeviceRef>,
    /// Timeout for commands sent through sg.
    pub timeout: Duration,
    /// Root of sysfs.
    pub sysfs: PathBuf,
    /// Directory of device nodes.
    pub dev: PathBuf,
}

/// A configuration the plugin cannot use.
#[derive(Debug, thiserror::Error, PartialEq, Eq)]
pub enum ConfigError {
    /// A line is not `key=value`.
    #[error("config line {line}: `{text}` is not key=value")]
    NotKeyValue {
        /// 1-based line number.
        line: usize,
        /// The line.
        text: String,
    },
    /// A key this plugin does not know.
    #[error(
        "config line {line}: unknown key `{key}` (known: changer, drives, timeout_s, sysfs, dev)"
    )]
    UnknownKey {
        /// 1-based line number.
        line: usize,
        /// The key.
        key: String,
    },
    /// A key given twice.
    #[error("config line {line}: `{key}` given twice; keep one")]
    Duplicate {
        /// 1-based line number.
        line: usize,
        /// The key.
        key: String,
    },
    /// A value that does not parse.
    #[error("config line {line}: bad value for `{key}`: {why}")]
    BadValue {
        /// 1-based line number.
        line: usize,
        /// The key.
        key: String,
        /// What is wrong and what to write instead.
        why: String,
    },
    /// No drive at all.
    #[error(
        "config: no `drives=` line; name at least one drive (drives=serial=SERIAL or drives=/dev/nst0)"
    )]
    NoDrives,
}

fn device_ref(v: &str, line: usize, key: &str) -> Result<DeviceRef, ConfigError> {
    let v = v.trim();
    let bad = |why: &str| ConfigError::BadValue {
        line,
        key: key.to_string(),
        why: why.to_string(),
    };
    if let Some(s) = v.strip_prefix("serial=").or_else(|| v.strip_prefix("sn=")) {
        let s = s.trim();
        if s.is_empty() || s.contains(char::is_whitespace) {
            return Err(bad(
                "a serial must be non-empty, without spaces (serial=DRV0000001)",
            ));
        }
        Ok(DeviceRef::Serial(s.to_string()))
    } else if v.starts_with('/') {
        Ok(DeviceRef::Path(PathBuf::from(v)))
    } else {
        Err(bad(&format!(
            "`{v}` is neither serial=SERIAL nor an absolute device path such as /dev/nst0"
        )))
    }
}

impl Config {
    /// Parse the configuration string.
    pub fn parse(text: &str) -> Result<Config, ConfigError> {
        let mut changer = None;
        let mut drives: Option<Vec<DeviceRef>> = None;
        let mut timeout = None;
        let mut sysfs = None;
        let mut dev = None;
        for (n, raw) in text.lines().enumerate() {
            let line = n + 1;
            let l = raw.split('#').next().unwrap_or("").trim();
            if l.is_empty() {
                continue;
            }
            let Some((k, v)) = l.split_once('=') else {
                return Err(ConfigError::NotKeyValue {
                    line,
                    text: l.to_string(),
                });
            };
            let k = k.trim();
            let dup = || ConfigError::Duplicate {
                line,
                key: k.to_string(),
            };
            match k {
                "changer" => {
                    if changer.is_some() {
                        return Err(dup());
                    }
                    changer = Some(device_ref(v, line, k)?);
                }
                "drives" => {
                    if drives.is_some() {
                        return Err(dup());
                    }
                    let list = v
                        .split(',')
                        .filter(|s| !s.trim().is_empty())
                        .map(|s| device_ref(s, line, k))
                        .collect::<Result<Vec<_>, _>>()?;
                    drives = Some(list);
                }
                "timeout_s" => {
                    if timeout.is_some() {
                        return Err(dup());
                    }
                    let s: u64 = v.trim().parse().ok().filter(|s| *s > 0).ok_or_else(|| {
                        ConfigError::BadValue {
                            line,
                            key: k.to_string(),
                            why: format!("`{}` is not a positive number of seconds", v.trim()),
                        }
                    })?;
                    timeout = Some(Duration::from_secs(s));
                }
                "sysfs" | "dev" => {
                    let p = v.trim();
                    if !p.starts_with('/') {
                        return Err(ConfigError::BadValue {
                            line,
                            key: k.to_string(),
                            why: "must be an absolute path".to_string(),
                        });
                    }
                    let slot = if k == "sysfs" { &mut sysfs } else { &mut dev };
                    if slot.is_some() {
                        return Err(dup());
                    }
                    *slot = Some(PathBuf::from(p));
                }
                other => {
                    return Err(ConfigError::UnknownKey {
                        line,
                        key: other.to_string(),
                    });
                }
            }
        }
        let drives = drives
            .filter(|d| !d.is_empty())
            .ok_or(ConfigError::NoDrives)?;
        Ok(Config {
            changer,
            drives,
            // A locate over a whole LTO tape takes minutes; the st driver uses hours too.
            timeout: timeout.unwrap_or(Duration::from_secs(3 * 3600)),
            sysfs: sysfs.unwrap_or_else(|| PathBuf::from("/sys")),
            dev: dev.unwrap_or_else(|| PathBuf::from("/dev")),
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn serials_and_paths() {
        let c = Config::parse(
            "# rig\nchanger=serial=LIB0000001\ndrives=serial=DRV0000001, /dev/nst1 # second\n",
        )
        .unwrap();
        assert_eq!(c.changer, Some(DeviceRef::Serial("LIB0000001".into())));
        assert_eq!(
            c.drives,
            vec![
                DeviceRef::Serial("DRV0000001".into()),
                DeviceRef::Path("/dev/nst1".into())
            ]
        );
        assert_eq!(c.sysfs, PathBuf::from("/sys"));
        let c = Config::parse("changer=/dev/sg1\ndrives=/dev/nst0\ntimeout_s=60\nsysfs=/tmp/s")
            .unwrap();
        assert_eq!(c.changer, Some(DeviceRef::Path("/dev/sg1".into())));
        assert_eq!(c.timeout, Duration::from_secs(60));
        assert_eq!(c.sysfs, PathBuf::from("/tmp/s"));
        let c = Config::parse("drives=sn=X1").unwrap();
        assert_eq!(c.changer, None);
        assert_eq!(c.drives, vec![DeviceRef::Serial("X1".into())]);
    }

    #[test]
    fn errors_say_what_is_wrong() {
        let e = Config::parse("drives=/dev/nst0\nchanger").unwrap_err();
        assert_eq!(
            e,
            ConfigError::NotKeyValue {
                line: 2,
                text: "changer".into()
            }
        );
        let e = Config::parse("drive=/dev/nst0").unwrap_err();
        assert!(matches!(e, ConfigError::UnknownKey { line: 1, .. }));
        assert!(e.to_string().contains("known: changer, drives"));
        let e = Config::parse("drives=nst0").unwrap_err();
        assert!(
            e.to_string()
                .contains("neither serial=SERIAL nor an absolute"),
            "{e}"
        );
        let e = Config::parse("drives=serial=").unwrap_err();
        assert!(matches!(e, ConfigError::BadValue { .. }));
        let e = Config::parse("drives=/dev/nst0\ndrives=/dev/nst1").unwrap_err();
        assert!(matches!(e, ConfigError::Duplicate { line: 2, .. }));
        assert_eq!(
            Config::parse("changer=/dev/sg1").unwrap_err(),
            ConfigError::NoDrives
        );
        assert_eq!(
            Config::parse("drives= , ").unwrap_err(),
            ConfigError::NoDrives
        );
        let e = Config::parse("drives=/dev/nst0\ntimeout_s=0").unwrap_err();
        assert!(e.to_string().contains("positive number of seconds"));
        let e = Config::parse("drives=/dev/nst0\nsysfs=sys").unwrap_err();
        assert!(e.to_string().contains("absolute"));
    }
}
