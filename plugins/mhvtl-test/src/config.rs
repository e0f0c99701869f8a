//! The plugin's configuration string, read as every reel plugin reads one
//! (`reel_plugin_abi::config`; docs/ABI.md, "Configuration strings"): `key=value` entries, one
//! per line or `;`-separated, `#` to the end of a line a comment, the last value of a key wins.
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

use reel_plugin_abi::config;

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
    /// The string is not a list of `key=value` entries.
    #[error(transparent)]
    Syntax(#[from] config::SyntaxError),
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
    if let Some(s) = config::serial(v) {
        let s = s.trim();
        if s.is_empty() || s.contains(char::is_whitespace) {
            return Err(bad(
                "a serial must be non-empty, without spaces (serial=DRV0000001)",
            ));
        }
        Ok(DeviceRef::Serial(s.to_string()))
    } else if v.starts_with("sn=") || v.starts_with("serial:") {
        Err(bad("a device is named by serial number as serial=SERIAL"))
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
        for config::Entry {
            line,
            key: k,
            value: v,
        } in config::entries(text)?
        {
            match k {
                "changer" => changer = Some(device_ref(v, line, k)?),
                "drives" => {
                    drives = Some(
                        config::list(v)
                            .map(|s| device_ref(s, line, k))
                            .collect::<Result<Vec<_>, _>>()?,
                    );
                }
                "timeout_s" => {
                    let s: u64 =
                        v.parse()
                            .ok()
                            .filter(|s| *s > 0)
                            .ok_or_else(|| ConfigError::BadValue {
                                line,
                                key: k.to_string(),
                                why: format!("`{v}` is not a positive number of seconds"),
                            })?;
                    timeout = Some(Duration::from_secs(s));
                }
                "sysfs" | "dev" => {
                    if !v.starts_with('/') {
                        return Err(ConfigError::BadValue {
                            line,
                            key: k.to_string(),
                            why: "must be an absolute path".to_string(),
                        });
                    }
                    let slot = if k == "sysfs" { &mut sysfs } else { &mut dev };
                    *slot = Some(PathBuf::from(v));
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
        let c = Config::parse("drives=serial=X1; drives=serial=X2 # the last wins").unwrap();
        assert_eq!(c.changer, None);
        assert_eq!(c.drives, vec![DeviceRef::Serial("X2".into())]);
    }

    #[test]
    fn errors_say_what_is_wrong() {
        let e = Config::parse("drives=/dev/nst0\nchanger").unwrap_err();
        assert_eq!(
            e,
            ConfigError::Syntax(config::SyntaxError::NotKeyValue {
                line: 2,
                text: "changer".into()
            })
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
        let e = Config::parse("drives=sn=X1").unwrap_err();
        assert!(e.to_string().contains("serial=SERIAL"), "{e}");
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
