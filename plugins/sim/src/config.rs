//! The simulator's configuration: the plugin config string parsed into [`SimConfig`].
//!
//! The string is read as every reel plugin reads one (`reel_plugin_abi::config`; docs/ABI.md,
//! "Configuration strings"): `key=value` entries, one a line or separated by `;`, `#` to the
//! end of a line a comment, the last value of a key wins. `dir=` (the library
//! directory) is required; every figure of the model is a `sim.*` key with the seed's default
//! (docs/SIMULATOR.md lists them all). `sim.profile` is applied first, then the other keys
//! override its figures whatever their order. An unknown key is an error that names it.

use std::path::PathBuf;

use reel_plugin_abi::config;

/// A configuration the simulator cannot run with.
#[derive(Debug, thiserror::Error, PartialEq, Eq)]
pub enum ConfigError {
    /// A key the simulator does not know.
    #[error("unknown configuration key `{0}`; docs/SIMULATOR.md lists the keys (dir=, sim.*)")]
    UnknownKey(String),
    /// A value that does not parse or is out of range.
    #[error("configuration key `{key}` has invalid value `{value}`: {why}")]
    BadValue {
        /// The key.
        key: String,
        /// The value given.
        value: String,
        /// What is expected.
        why: String,
    },
    /// The string is not a list of `key=value` entries.
    #[error(transparent)]
    Syntax(#[from] config::SyntaxError),
    /// `dir=` was not given.
    #[error(
        "configuration key `dir` is required: the directory holding the simulated library's cartridges"
    )]
    MissingDir,
    /// A combination of keys that cannot work.
    #[error("inconsistent configuration: {0}")]
    Inconsistent(String),
}

/// How modelled time relates to wall time.
#[derive(Clone, Copy, Debug, PartialEq)]
pub enum ClockMode {
    /// No sleeping: modelled time is only accounted and reported.
    Instant,
    /// Sleep modelled time divided by `time_scale`, paced by debt.
    Scaled,
}

/// How a locate is timed.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum LocateModel {
    /// Settle plus the full pass times the fraction of the tape travelled.
    Linear,
    /// CTA's serpentine cost model over `wraps` wraps in 4 bands.
    Serpentine,
}

/// Every figure of the model. Times are in milliseconds, rates in bytes per second.
#[derive(Clone, Debug, PartialEq)]
pub struct SimConfig {
    /// Library directory: one directory per cartridge plus `library.json`.
    pub dir: PathBuf,
    /// Profile name the figures started from (`lto9` or `simplant`).
    pub profile: String,
    /// Clock mode.
    pub clock: ClockMode,
    /// Modelled seconds per wall second under the SCALED clock.
    pub time_scale: f64,
    /// Number of drives.
    pub drives: u32,
    /// Number of storage slots.
    pub slots: u32,
    /// Number of import/export elements.
    pub ie_slots: u32,
    /// Cartridges created in a new library.
    pub cartridges: u32,
    /// How many of them (the last ones) are WORM.
    pub worm_cartridges: u32,
    /// Cleaning cartridges created in a new library, after the data cartridges (`CLN001L1`,
    /// …); they count against `slots`.
    pub cleaning_cartridges: u32,
    /// Cleanings a cleaning cartridge gives; a drive loaded with one used up raises TapeAlert
    /// 22 (expired cleaning media) and is not cleaned.
    pub cleaning_uses: u64,
    /// Modelled time of one cleaning.
    pub cleaning_ms: u64,
    /// First two characters of every barcode (`RL` gives `RL0001L9`); libraries that share
    /// one catalogue need different prefixes.
    pub barcode_prefix: String,
    /// Native capacity of a new cartridge.
    pub capacity_bytes: u64,
    /// Early warning at this percentage of the capacity.
    pub early_warning_percent: f64,
    /// Whether new cartridges arrive calibrated (no first-load calibration).
    pub calibrated: bool,
    /// Locate model.
    pub locate: LocateModel,
    /// Wraps of the serpentine model.
    pub wraps: u32,
    /// Robot move, one way.
    pub robot_ms: u64,
    /// Load to ready.
    pub load_ms: u64,
    /// Unload (after the rewind).
    pub unload_ms: u64,
    /// Rewind from BOT (the fixed part).
    pub rewind_min_ms: u64,
    /// Rewind from the end of the tape.
    pub rewind_max_ms: u64,
    /// Locate settle time.
    pub locate_settle_ms: u64,
    /// Full pass of the tape (one whole wrap in the serpentine model).
    pub locate_full_pass_ms: u64,
    /// Fraction of the full pass a locate over the whole tape takes (1.0 on lto9, 0.6 on
    /// simplant).
    pub locate_speed_factor: f64,
    /// Read-retry reposition.
    pub reposition_ms: u64,
    /// Backhitch.
    pub backhitch_ms: u64,
    /// First-load calibration of a new cartridge.
    pub first_load_ms: u64,
    /// Native streaming rate.
    pub stream_bytes_per_sec: u64,
    /// Speed-matching floor.
    pub min_stream_bytes_per_sec: u64,
    /// Drive buffer.
    pub buffer_bytes: u64,
    /// Bytes a stopped tape waits for in its buffer before it moves (or a flush); a smaller
    /// buffer lowers it to the buffer's size. 0 (the lto9 profile): the first record starts
    /// the tape, as seed 000's rules have it; a larger value models a drive that gathers a
    /// data set first, opt-in.
    pub start_bytes: u64,
    /// Largest record accepted.
    pub max_record_bytes: u64,
    /// Whether the drives do logical block protection.
    pub lbp_capable: bool,
    /// Shared mode: several processes open this library directory at once, each owning the
    /// drives it opens (docs/SIMULATOR.md §7).
    pub shared: bool,
}

impl SimConfig {
    /// The `lto9` profile's figures (the default), for a library in `dir`.
    pub fn lto9(dir: PathBuf) -> Self {
        SimConfig {
            dir,
            profile: "lto9".into(),
            clock: ClockMode::Instant,
            time_scale: 20.0,
            drives: 2,
            slots: 16,
            ie_slots: 4,
            cartridges: 8,
            worm_cartridges: 0,
            cleaning_cartridges: 0,
            cleaning_uses: 50,
            cleaning_ms: 60_000,
            barcode_prefix: "RL".to_string(),
            capacity_bytes: 64 << 30,
            early_warning_percent: 98.0,
            calibrated: false,
            locate: LocateModel::Linear,
            wraps: 280,
            robot_ms: 8_000,
            load_ms: 15_000,
            unload_ms: 15_000,
            rewind_min_ms: 3_000,
            rewind_max_ms: 97_000,
            locate_settle_ms: 2_000,
            locate_full_pass_ms: 100_000,
            locate_speed_factor: 1.0,
            reposition_ms: 5_000,
            backhitch_ms: 3_000,
            first_load_ms: 2 * 3600 * 1000,
            stream_bytes_per_sec: 400_000_000,
            min_stream_bytes_per_sec: 177_000_000,
            buffer_bytes: 1 << 30,
            start_bytes: 0,
            max_record_bytes: 8 << 20,
            lbp_capable: true,
            shared: false,
        }
    }

    /// Apply the `simplant` profile (the tape spec's M1 figures) over the current figures.
    fn apply_simplant(&mut self) {
        self.profile = "simplant".into();
        self.robot_ms = 15_000;
        self.load_ms = 90_000;
        self.unload_ms = 25_000;
        self.rewind_min_ms = 50_000;
        self.rewind_max_ms = 90_000;
        self.locate_settle_ms = 0;
        self.locate_full_pass_ms = 172_000;
        self.locate_speed_factor = 0.6;
        self.reposition_ms = 40_000;
    }

    /// Parse a plugin config string.
    pub fn parse(text: &str) -> Result<SimConfig, ConfigError> {
        let entries = config::entries(text)?;
        let dir = config::last(&entries, "dir")
            .map(|e| PathBuf::from(e.value))
            .ok_or(ConfigError::MissingDir)?;
        let mut cfg = SimConfig::lto9(dir);
        if let Some(p) = config::last(&entries, "sim.profile").map(|e| e.value) {
            match p {
                "lto9" => {}
                "simplant" => cfg.apply_simplant(),
                _ => return Err(bad("sim.profile", p, "expected lto9 or simplant")),
            }
        }
        for config::Entry {
            key: k, value: v, ..
        } in &entries
        {
            let (k, v) = (*k, *v);
            match k {
                "dir" | "sim.profile" => {}
                "sim.clock" => {
                    cfg.clock = match v {
                        "instant" => ClockMode::Instant,
                        "scaled" => ClockMode::Scaled,
                        _ => return Err(bad(k, v, "expected instant or scaled")),
                    }
                }
                "sim.time_scale" => {
                    cfg.time_scale = float(k, v)?;
                    if !(cfg.time_scale > 0.0 && cfg.time_scale.is_finite()) {
                        return Err(bad(k, v, "must be a positive number"));
                    }
                }
                "sim.drives" => cfg.drives = int(k, v)? as u32,
                "sim.slots" => cfg.slots = int(k, v)? as u32,
                "sim.ie_slots" => cfg.ie_slots = int(k, v)? as u32,
                "sim.cartridges" => cfg.cartridges = int(k, v)? as u32,
                "sim.worm_cartridges" => cfg.worm_cartridges = int(k, v)? as u32,
                "sim.cleaning_cartridges" => cfg.cleaning_cartridges = int(k, v)? as u32,
                "sim.cleaning_uses" => cfg.cleaning_uses = int(k, v)?,
                "sim.cleaning_ms" => cfg.cleaning_ms = int(k, v)?,
                "sim.barcode_prefix" => {
                    if v.len() != 2 || !v.bytes().all(|b| b.is_ascii_uppercase()) {
                        return Err(bad(k, v, "two upper-case letters (barcodes are PP0001L9)"));
                    }
                    cfg.barcode_prefix = v.to_string();
                }
                "sim.capacity_bytes" => cfg.capacity_bytes = int(k, v)?,
                "sim.early_warning_percent" => cfg.early_warning_percent = float(k, v)?,
                "sim.calibrated" => cfg.calibrated = boolean(k, v)?,
                "sim.locate" => {
                    cfg.locate = match v {
                        "linear" => LocateModel::Linear,
                        "serpentine" => LocateModel::Serpentine,
                        _ => return Err(bad(k, v, "expected linear or serpentine")),
                    }
                }
                "sim.wraps" => cfg.wraps = int(k, v)? as u32,
                "sim.robot_ms" => cfg.robot_ms = int(k, v)?,
                "sim.load_ms" => cfg.load_ms = int(k, v)?,
                "sim.unload_ms" => cfg.unload_ms = int(k, v)?,
                "sim.rewind_min_ms" => cfg.rewind_min_ms = int(k, v)?,
                "sim.rewind_max_ms" => cfg.rewind_max_ms = int(k, v)?,
                "sim.locate_settle_ms" => cfg.locate_settle_ms = int(k, v)?,
                "sim.locate_full_pass_ms" => cfg.locate_full_pass_ms = int(k, v)?,
                "sim.locate_speed_factor" => cfg.locate_speed_factor = float(k, v)?,
                "sim.reposition_ms" => cfg.reposition_ms = int(k, v)?,
                "sim.backhitch_ms" => cfg.backhitch_ms = int(k, v)?,
                "sim.first_load_ms" => cfg.first_load_ms = int(k, v)?,
                "sim.stream_bytes_per_sec" => cfg.stream_bytes_per_sec = int(k, v)?,
                "sim.min_stream_bytes_per_sec" => cfg.min_stream_bytes_per_sec = int(k, v)?,
                "sim.buffer_bytes" => cfg.buffer_bytes = int(k, v)?,
                "sim.start_bytes" => cfg.start_bytes = int(k, v)?,
                "sim.max_record_bytes" => cfg.max_record_bytes = int(k, v)?,
                "sim.lbp" => cfg.lbp_capable = boolean(k, v)?,
                "sim.shared" => cfg.shared = boolean(k, v)?,
                _ => return Err(ConfigError::UnknownKey(k.to_string())),
            }
        }
        cfg.validate()?;
        Ok(cfg)
    }

    fn validate(&self) -> Result<(), ConfigError> {
        let inc = |m: &str| Err(ConfigError::Inconsistent(m.to_string()));
        if self.drives == 0 || self.drives > 256 {
            return inc("sim.drives must be 1..=256");
        }
        if self.slots == 0 || self.slots > 16384 {
            return inc("sim.slots must be 1..=16384");
        }
        if self.ie_slots > 256 {
            return inc("sim.ie_slots must be at most 256");
        }
        if self.cartridges > self.slots {
            return inc(
                "sim.cartridges is larger than sim.slots: every cartridge starts in a slot",
            );
        }
        if self.cartridges + self.cleaning_cartridges > self.slots {
            return inc(
                "sim.cartridges and sim.cleaning_cartridges together are more than sim.slots: \
                 every cartridge starts in a slot",
            );
        }
        if self.cleaning_cartridges > 999 {
            return inc(
                "sim.cleaning_cartridges must be at most 999 (barcodes CLN001L1..CLN999L1)",
            );
        }
        if self.cartridges > 9999 {
            return inc("sim.cartridges must be at most 9999 (barcodes RL0001L9..RL9999L9)");
        }
        if self.worm_cartridges > self.cartridges {
            return inc("sim.worm_cartridges is larger than sim.cartridges");
        }
        if self.capacity_bytes == 0 {
            return inc("sim.capacity_bytes must be positive");
        }
        if !(self.early_warning_percent > 0.0 && self.early_warning_percent <= 100.0) {
            return inc("sim.early_warning_percent must be in (0, 100]");
        }
        if self.locate == LocateModel::Serpentine && self.wraps == 0 {
            return inc("sim.locate=serpentine needs sim.wraps of at least 1");
        }
        if self.rewind_max_ms < self.rewind_min_ms {
            return inc("sim.rewind_max_ms is smaller than sim.rewind_min_ms");
        }
        if self.stream_bytes_per_sec == 0 || self.min_stream_bytes_per_sec == 0 {
            return inc("streaming rates must be positive");
        }
        if self.min_stream_bytes_per_sec > self.stream_bytes_per_sec {
            return inc("sim.min_stream_bytes_per_sec is above sim.stream_bytes_per_sec");
        }
        if self.buffer_bytes == 0 {
            return inc("sim.buffer_bytes must be positive");
        }
        if self.max_record_bytes == 0 || self.max_record_bytes > u32::MAX as u64 {
            return inc("sim.max_record_bytes must be 1..=4294967295");
        }
        if !(self.locate_speed_factor > 0.0 && self.locate_speed_factor.is_finite()) {
            return inc("sim.locate_speed_factor must be positive");
        }
        Ok(())
    }

    /// Early-warning point of a cartridge of `capacity` bytes.
    pub fn early_warning_bytes(&self, capacity: u64) -> u64 {
        ((capacity as f64) * self.early_warning_percent / 100.0) as u64
    }
}

fn bad(key: &str, value: &str, why: &str) -> ConfigError {
    ConfigError::BadValue {
        key: key.to_string(),
        value: value.to_string(),
        why: why.to_string(),
    }
}

fn int(key: &str, v: &str) -> Result<u64, ConfigError> {
    let clean: String = v.chars().filter(|c| *c != '_').collect();
    clean
        .parse::<u64>()
        .map_err(|_| bad(key, v, "expected a non-negative integer"))
}

fn float(key: &str, v: &str) -> Result<f64, ConfigError> {
    v.parse::<f64>()
        .map_err(|_| bad(key, v, "expected a number"))
}

fn boolean(key: &str, v: &str) -> Result<bool, ConfigError> {
    match v {
        "true" | "1" | "yes" => Ok(true),
        "false" | "0" | "no" => Ok(false),
        _ => Err(bad(key, v, "expected true or false")),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn defaults_are_the_seeds() {
        let c = SimConfig::parse("dir=/tmp/x").unwrap();
        assert_eq!(c.robot_ms, 8_000);
        assert_eq!(c.load_ms, 15_000);
        assert_eq!(c.rewind_max_ms, 97_000);
        assert_eq!(c.stream_bytes_per_sec, 400_000_000);
        assert_eq!(c.min_stream_bytes_per_sec, 177_000_000);
        assert_eq!(c.buffer_bytes, 1 << 30);
        assert_eq!(c.first_load_ms, 7_200_000);
        assert_eq!(c.capacity_bytes, 64 << 30);
        assert_eq!((c.drives, c.slots, c.cartridges), (2, 16, 8));
        assert_eq!(c.wraps, 280);
        assert_eq!(c.clock, ClockMode::Instant);
    }

    #[test]
    fn semicolons_lines_and_profile_then_overrides() {
        let c =
            SimConfig::parse("sim.robot_ms=1000;dir=/d\nsim.profile=simplant\n sim.drives = 3 ")
                .unwrap();
        assert_eq!(c.profile, "simplant");
        assert_eq!(c.robot_ms, 1000, "an explicit key wins over the profile");
        assert_eq!(c.load_ms, 90_000);
        assert_eq!(c.drives, 3);
    }

    #[test]
    fn unknown_key_is_named() {
        let e = SimConfig::parse("dir=/d;sim.robot=3").unwrap_err();
        assert_eq!(e, ConfigError::UnknownKey("sim.robot".into()));
        assert!(e.to_string().contains("sim.robot"));
    }

    #[test]
    fn missing_dir_and_bad_values() {
        assert_eq!(
            SimConfig::parse("sim.drives=2"),
            Err(ConfigError::MissingDir)
        );
        assert!(matches!(
            SimConfig::parse("dir=/d;sim.drives=two"),
            Err(ConfigError::BadValue { .. })
        ));
        assert!(matches!(
            SimConfig::parse("dir=/d;sim.cartridges=20"),
            Err(ConfigError::Inconsistent(_))
        ));
        assert!(matches!(
            SimConfig::parse("dir=/d;junk"),
            Err(ConfigError::Syntax(_))
        ));
    }
}
