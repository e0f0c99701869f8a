//! `reel.toml`: one file, every key overridable by `REEL_<SECTION>_<KEY>`.
//!
//! Precedence, lowest first: built-in defaults, the file, environment variables. The data
//! directory comes from `--data-dir`, else `$REEL_DATA_DIR`, else `./reel-data`; the file from
//! `--config`, else `$REEL_CONFIG`, else `<data-dir>/reel.toml` when it exists. Relative paths
//! in the file (the store and jobs database files, the plugin) resolve against the data dir.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use serde::{Deserialize, Serialize};

use crate::error::{JobsError, Result};

/// Default data directory when neither `--data-dir` nor `$REEL_DATA_DIR` is given.
pub const DEFAULT_DATA_DIR: &str = "./reel-data";
/// Name of the config file looked up in the data directory.
pub const CONFIG_FILE_NAME: &str = "reel.toml";
const SECTIONS: &[&str] = &[
    "store",
    "library",
    "archive",
    "recall",
    "intake",
    "lifecycle",
    "repack",
    "worker",
    "scheduler",
    "serve",
    "keys",
];

/// The whole configuration.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, Default)]
#[serde(deny_unknown_fields, default)]
pub struct Config {
    /// Where the catalogue, reel's job tables and apalis's queue live.
    pub store: StoreConfig,
    /// The tape library this host drives.
    pub library: LibraryConfig,
    /// Writing.
    pub archive: ArchiveConfig,
    /// Reading.
    pub recall: RecallConfig,
    /// Taking new cartridges in.
    pub intake: IntakeConfig,
    /// Deleting and keeping data.
    pub lifecycle: LifecycleConfig,
    /// Moving data off cartridges and reclaiming them.
    pub repack: RepackConfig,
    /// The worker process.
    pub worker: WorkerConfig,
    /// Mount decisions.
    pub scheduler: SchedulerConfig,
    /// The HTTP API (`reel serve`).
    pub serve: ServeConfig,
    /// Where data-encryption keys come from.
    pub keys: KeysConfig,
}

/// `[keys]`: where data-encryption keys come from (docs/OPERATIONS.md, "Encryption keys").
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct KeysConfig {
    /// The key file `reel key` keeps keys in (relative to the data directory). It must be a
    /// regular file owned by reel's user with mode 0600 or stricter; anything else is refused.
    pub file: String,
    /// An external key-manager command, program first (no shell): reel adds `--key-id ID
    /// --pool POOL` and reads `{"key_id": …, "key": "<64 hex digits>"}` from its standard
    /// output. Empty: keys come from the key file only.
    pub command: Vec<String>,
    /// Seconds the key-manager command may take before it is stopped.
    pub command_timeout_seconds: u64,
}

impl Default for KeysConfig {
    fn default() -> Self {
        KeysConfig {
            file: "keys.json".into(),
            command: Vec::new(),
            command_timeout_seconds: 30,
        }
    }
}

/// Default address of `reel serve`: loopback only; expose it deliberately.
pub const DEFAULT_SERVE_LISTEN: &str = "127.0.0.1:8420";

/// `[serve]`
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct ServeConfig {
    /// Address the HTTP API listens on, `IP:PORT` (`reel serve --listen` overrides it). An
    /// address other than loopback is refused while no API token exists.
    pub listen: String,
    /// Host names clients call the service by, beside the loopback names and the listening
    /// address; a request naming another `Host` is refused (DNS rebinding).
    pub hosts: Vec<String>,
    /// Connections open at once; one more gets 503 and is closed.
    pub max_connections: u32,
    /// Connections open at once from one client address, so that one client cannot hold all
    /// of `max_connections`.
    pub max_connections_per_address: u32,
    /// A connection that sends no complete request head within this time (also between
    /// requests on a kept-alive connection) is closed.
    pub header_timeout_seconds: u64,
    /// A request not answered within this time gets 408.
    pub request_timeout_seconds: u64,
    /// Largest JSON request body; more gets 413.
    pub max_body_bytes: u64,
    /// Requests per second one token may make on average (0: no limit); past it, 429.
    pub rate_per_second: u32,
    /// Requests one token may make at once before the rate applies.
    pub rate_burst: u32,
    /// Where `PUT /v1/objects/{key}` keeps uploaded bodies until their archive job ends
    /// (relative to the data directory). The workers read the archive sources from here, so
    /// it must be on the host (or a filesystem shared with the hosts) where they run.
    pub spool_dir: String,
    /// Bytes the spool may hold; an upload past it gets 503 (or 507 if it alone is larger).
    pub spool_bytes: u64,
    /// Largest object one `PUT /v1/objects/{key}` may upload; more gets 413.
    pub max_object_bytes: u64,
    /// Where staged recalls put objects for `GET /v1/objects/{key}` (relative to the data
    /// directory); the workers write it.
    pub staging_dir: String,
    /// Bytes staged objects may hold; a stage request past it gets 503 (507 if the object
    /// alone is larger).
    pub staging_bytes: u64,
    /// Hours a staged object stays for `GET` after its recall finished.
    pub staging_hours: u64,
}

impl Default for ServeConfig {
    fn default() -> Self {
        ServeConfig {
            listen: DEFAULT_SERVE_LISTEN.into(),
            hosts: Vec::new(),
            max_connections: 256,
            max_connections_per_address: 32,
            header_timeout_seconds: 10,
            request_timeout_seconds: 60,
            max_body_bytes: 1 << 20,
            rate_per_second: 50,
            rate_burst: 100,
            spool_dir: "spool".into(),
            spool_bytes: 64 << 30,
            max_object_bytes: 64 << 30,
            staging_dir: "staging".into(),
            staging_bytes: 64 << 30,
            staging_hours: 24,
        }
    }
}

/// `[store]`
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct StoreConfig {
    /// `sqlite:PATH` (relative to the data dir) or `postgres://…`. Catalogue and reel's job tables.
    pub url: String,
    /// Where apalis keeps its queue when `url` is SQLite: a separate file, because apalis sets
    /// `synchronous=OFF` on it. Ignored on PostgreSQL (apalis uses schema `apalis` of `url`).
    pub jobs_url: String,
}

impl Default for StoreConfig {
    fn default() -> Self {
        StoreConfig {
            url: "sqlite:reel.db".into(),
            jobs_url: "sqlite:jobs.db".into(),
        }
    }
}

impl StoreConfig {
    /// True when the store is PostgreSQL.
    pub fn is_postgres(&self) -> bool {
        self.url.starts_with("postgres://") || self.url.starts_with("postgresql://")
    }
}

/// `[library]`
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct LibraryConfig {
    /// The device plugin: the path of its `.so` (it has a `/` or ends in `.so`; relative to the
    /// data dir) or its name (`sim`, `scsi`, `mhvtl`: `libreel_plugin_<name>.so`, looked up in
    /// `plugin_dir`, then beside the `reel` executable). Empty means "none configured".
    pub plugin: String,
    /// Where plugins named by name are installed; empty: `/usr/lib/reel/plugins`.
    pub plugin_dir: String,
    /// The plugin's own configuration string (passed verbatim).
    pub plugin_config: String,
    /// Drives this host uses (names as the plugin reports them); empty means all.
    pub drives: Vec<String>,
    /// Barcodes starting with this are cleaning cartridges (never taken in as data), besides
    /// those the changer reports as cleaning media; empty: the changer's word only.
    pub cleaning_prefix: String,
}

impl Default for LibraryConfig {
    fn default() -> Self {
        LibraryConfig {
            plugin: String::new(),
            plugin_dir: String::new(),
            plugin_config: String::new(),
            drives: Vec::new(),
            cleaning_prefix: "CLN".into(),
        }
    }
}

impl LibraryConfig {
    /// The plugin file `plugin` means: its path, or the file its name is installed as
    /// (`reel_engine::device::find_plugin`); `None` when no plugin is configured. Errors when
    /// the name is not installed, saying where it was looked for and what to set.
    pub fn plugin_file(
        &self,
    ) -> std::result::Result<Option<PathBuf>, reel_engine::device::DeviceError> {
        if self.plugin.is_empty() {
            return Ok(None);
        }
        reel_engine::device::find_plugin(
            &self.plugin,
            &reel_engine::device::plugin_dirs(&self.plugin_dir),
        )
        .map(Some)
    }
}

/// How much of what was written is read back.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, Default)]
#[serde(rename_all = "lowercase")]
pub enum VerifyMode {
    /// Read every session back before acknowledging.
    #[default]
    Full,
    /// Read one container in `sample_every` back.
    Sampled,
    /// No read-back.
    None,
}

/// Largest `[archive] early_warning_margin_bytes` accepted.
pub const MAX_EARLY_WARNING_MARGIN: u64 = 1 << 30;

/// `[archive]`
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct ArchiveConfig {
    /// Tape record size in bytes.
    pub record_size: u32,
    /// A container is closed (footer, filemark) once its data reaches this many bytes. Smaller
    /// containers lose less when a session ends at early warning or end of medium; larger
    /// ones cost fewer filemarks.
    pub container_bytes: u64,
    /// After early warning, a write session writes at most this many bytes more (what is
    /// queued and the closing tail of its container); a container whose tail would exceed it
    /// is given up (filemark, dead) instead of running into end of medium. The default, 2 MiB,
    /// fits a target with a small early-warning zone (tgt: max(capacity/32, 4 MiB)) after the
    /// record that reported it; LTO drives leave far more. At least one record.
    pub early_warning_margin_bytes: u64,
    /// Group commit: a synchronous filemark after this many bytes…
    pub barrier_bytes: u64,
    /// …or after this many seconds, whichever comes first.
    pub barrier_seconds: u64,
    /// Read-back policy.
    pub verify: VerifyMode,
    /// With `verify = "sampled"`: one container in this many is read back.
    pub sample_every: u64,
    /// Storage class used when a submission names none.
    pub default_class: String,
    /// Storage classes: name → pools (copy i goes to pools[i]).
    pub storage_classes: BTreeMap<String, Vec<String>>,
    /// Unmounts at which a drive reported a medium TapeAlert flag (media, read or write
    /// failure, media life, a cartridge memory or mechanical failure…) after which a cartridge
    /// takes no more writes: reel makes it full with the flags as the reason. 0: never.
    pub media_alert_limit: u32,
}

impl Default for ArchiveConfig {
    fn default() -> Self {
        ArchiveConfig {
            record_size: 1 << 20,
            container_bytes: 4 << 30,
            early_warning_margin_bytes: reel_engine::session::space::DEFAULT_EARLY_WARNING_MARGIN,
            barrier_bytes: 32 << 30,
            barrier_seconds: 300,
            verify: VerifyMode::Full,
            sample_every: 10,
            default_class: "default".into(),
            storage_classes: BTreeMap::from([("default".to_string(), vec!["default".to_string()])]),
            media_alert_limit: 1,
        }
    }
}

/// `[recall]`
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct RecallConfig {
    /// Parallel destination writers per drive.
    pub writer_threads: usize,
    /// Read through (instead of locating over) gaps shorter than this.
    pub read_through_gap_bytes: u64,
}

impl Default for RecallConfig {
    fn default() -> Self {
        RecallConfig {
            writer_threads: 16,
            read_through_gap_bytes: 1 << 30,
        }
    }
}

/// `[intake]`
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct IntakeConfig {
    /// Calibrated, unlabelled cartridges kept in reserve.
    pub spares: u32,
}

impl Default for IntakeConfig {
    fn default() -> Self {
        IntakeConfig { spares: 2 }
    }
}

/// Longest quarantine `[lifecycle] quarantine_days` accepts.
pub const MAX_QUARANTINE_DAYS: u64 = 36_500;

/// `[lifecycle]`
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct LifecycleConfig {
    /// Days a deleted object stays in the recycle log, where `reel undelete` brings it back;
    /// after that its copies are dead space.
    pub quarantine_days: u64,
    /// Keys a delete job marks per transaction.
    pub delete_batch: u32,
    /// Minutes between two expiry passes of a worker (deleting what a retention with `expire`
    /// no longer covers); 0: none.
    pub expire_every_minutes: u64,
    /// Storage class → its retention (`[lifecycle.retention.CLASS]`).
    pub retention: BTreeMap<String, RetentionRule>,
}

/// `[lifecycle.retention.CLASS]`: how long objects of a storage class are kept.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RetentionRule {
    /// Days from an object's archiving before it may be deleted.
    pub days: u64,
    /// Whether a worker deletes it once they are over (into the recycle log, as a delete).
    #[serde(default)]
    pub expire: bool,
}

impl Default for LifecycleConfig {
    fn default() -> Self {
        LifecycleConfig {
            quarantine_days: 31,
            delete_batch: 2000,
            expire_every_minutes: 60,
            retention: BTreeMap::new(),
        }
    }
}

impl LifecycleConfig {
    /// The quarantine in seconds.
    pub fn quarantine_secs(&self) -> u64 {
        reel_engine::catalogue::quarantine_secs(self.quarantine_days)
    }

    /// The storage classes whose objects expire once their retention is over.
    pub fn expiring_classes(&self) -> Vec<String> {
        self.retention
            .iter()
            .filter(|(_, r)| r.expire)
            .map(|(c, _)| c.clone())
            .collect()
    }
}

/// Largest `[repack] window`.
pub const MAX_REPACK_WINDOW: u32 = 100_000;

/// `[repack]`: how a repack job moves data, and the policies that start repacks and reclaims
/// on their own.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct RepackConfig {
    /// Where a repack keeps the objects it has read and not yet written (relative to the data
    /// directory): one directory per job, removed when the job ends.
    pub buffer_dir: String,
    /// Bytes a repack job's objects may hold in the buffer at once: its reads wait while the
    /// buffer holds this much (one object larger than it goes alone).
    pub buffer_bytes: u64,
    /// Reads a repack job queues at once: it expands its source's objects into read requests
    /// in slices of at most this many objects (and a quarter of `buffer_bytes`), in tape
    /// order, and has four times as many objects in flight (read or being written) at most.
    pub window: u32,
    /// Drives background work (repack) may hold at once; 0: no cap. User work is never capped
    /// by it, and pre-empts background work once a mount is `min_mount_seconds` old.
    pub max_drives: u32,
    /// Automatic repack and reclaim (the policy pass of a worker holding the library), for
    /// every pool; each pool can switch them off in `[repack.pools.POOL]`.
    pub auto: bool,
    /// Minutes between two policy passes of a worker (0: none).
    pub every_minutes: u64,
    /// Per pool: `[repack.pools.POOL]`.
    pub pools: BTreeMap<String, RepackPoolPolicy>,
}

/// `[repack.pools.POOL]`: the automatic policies of one pool.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct RepackPoolPolicy {
    /// Repack a full cartridge whose live bytes fall below this fraction of its used bytes
    /// (0: never by this rule).
    pub live_below: f64,
    /// Repack a cartridge whose media health says to replace it (media errors past
    /// `[archive] media_alert_limit`, TapeAlert media flags).
    pub on_bad_health: bool,
    /// Reclaim full cartridges with nothing left to keep.
    pub reclaim: bool,
    /// Switch this pool's automatic repack and reclaim off.
    pub off: bool,
}

impl Default for RepackPoolPolicy {
    fn default() -> Self {
        RepackPoolPolicy {
            live_below: 0.0,
            on_bad_health: false,
            reclaim: false,
            off: false,
        }
    }
}

impl Default for RepackConfig {
    fn default() -> Self {
        RepackConfig {
            buffer_dir: "repack".into(),
            buffer_bytes: 64 << 30,
            window: 10_000,
            max_drives: 1,
            auto: false,
            every_minutes: 60,
            pools: BTreeMap::new(),
        }
    }
}

/// `[worker]`
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct WorkerConfig {
    /// Prefix of worker names; the full name adds host, pid and a random suffix.
    pub name_prefix: String,
    /// How often an idle worker looks for new jobs (SQLite; fallback on PostgreSQL).
    pub poll_interval_ms: u64,
    /// Heartbeat period of workers and leases. At least 1000 (apalis keeps whole seconds).
    pub heartbeat_ms: u64,
    /// A worker or lease silent this long is presumed dead; its jobs go back to the queue.
    pub lease_ms: u64,
    /// Finished jobs are deleted after this many hours.
    pub retention_hours: u64,
    /// Attempts per job before it fails for good.
    pub max_attempts: u32,
    /// First retry delay; doubles per attempt.
    pub backoff_base_ms: u64,
    /// Longest retry delay.
    pub backoff_max_ms: u64,
    /// Jobs of one kind one worker runs at once.
    pub concurrency: usize,
    /// Where `reel worker` serves its Prometheus metrics (drive state, mounts, bytes, mount
    /// session summaries, device sense keys), `IP:PORT` on loopback; empty (the default): not
    /// served. Scrape it on the drive host, or through a proxy.
    pub metrics_listen: String,
    /// A drive that fails this many times (hardware errors: a drive that stops answering, a
    /// hardware sense key) within `drive_down_window_seconds` is taken down by its worker with
    /// the last error as the reason, and waits for `reel drive up`. 0: never.
    pub drive_down_failures: u32,
    /// The window of `drive_down_failures`, in seconds.
    pub drive_down_window_seconds: u64,
}

impl Default for WorkerConfig {
    fn default() -> Self {
        WorkerConfig {
            name_prefix: "reel".into(),
            poll_interval_ms: 250,
            heartbeat_ms: 5_000,
            lease_ms: 30_000,
            retention_hours: 24 * 7,
            max_attempts: 3,
            backoff_base_ms: 10_000,
            backoff_max_ms: 15 * 60_000,
            concurrency: 4,
            metrics_listen: String::new(),
            drive_down_failures: 3,
            drive_down_window_seconds: 3600,
        }
    }
}

/// Drive caps of one group of pools (`[scheduler.groups.NAME]`).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, Default)]
#[serde(deny_unknown_fields, default)]
pub struct GroupConfig {
    /// Pools in the group (their write queues and their cartridges' read queues).
    pub pools: Vec<String>,
    /// Most drives reading for this group at once (0 = no cap).
    pub max_read_drives: u32,
    /// Most drives writing for this group at once (0 = no cap).
    pub max_write_drives: u32,
}

/// `[scheduler]`
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct SchedulerConfig {
    /// A queue is worth a mount once it holds this many bytes…
    pub min_bytes: u64,
    /// …or this many files…
    pub min_files: u64,
    /// …or its oldest request is this old (seconds).
    pub max_age_seconds: u64,
    /// A busy drive is not pre-empted by a higher-priority queue, and an idle one is not
    /// unloaded for nothing, before it has held its cartridge this long (seconds). An idle
    /// drive still gives way at once to any waiting queue.
    pub min_mount_seconds: u64,
    /// Drive caps per group of pools.
    pub groups: BTreeMap<String, GroupConfig>,
}

impl Default for SchedulerConfig {
    fn default() -> Self {
        SchedulerConfig {
            // A mount is worth ~2 minutes of an LTO-9 drive: ask for a batch that pays for it,
            // but never keep a request waiting more than half a minute for company.
            min_bytes: 16_000_000_000,
            min_files: 1_000,
            max_age_seconds: 30,
            min_mount_seconds: 300,
            groups: BTreeMap::new(),
        }
    }
}

/// Where the config came from and the directory its relative paths resolve against.
#[derive(Debug, Clone, PartialEq)]
pub struct LoadedConfig {
    /// The effective configuration, paths resolved.
    pub config: Config,
    /// The data directory.
    pub data_dir: PathBuf,
    /// The file read, if any.
    pub file: Option<PathBuf>,
}

impl LoadedConfig {
    /// reel's own paths, which no API client may read or write through a job: the data
    /// directory, the config file, the device plugin, the directories plugins are found in by
    /// name (the plugin directory and the `reel` executable's) and the SQLite database files, each as
    /// configured and as its links resolve (a root is compared with both).
    pub fn own_paths(&self) -> Vec<PathBuf> {
        let abs = |p: &Path| {
            if p.is_absolute() {
                p.to_path_buf()
            } else {
                std::env::current_dir()
                    .map(|d| d.join(p))
                    .unwrap_or_else(|_| p.to_path_buf())
            }
        };
        let mut own = vec![abs(&self.data_dir)];
        own.extend(self.file.as_deref().map(abs));
        // The upload spool and the staging area hold other clients' objects.
        for dir in [
            &self.config.serve.spool_dir,
            &self.config.serve.staging_dir,
            &self.config.repack.buffer_dir,
            // The key file: no job may read it or write over it.
            &self.config.keys.file,
        ] {
            own.push(abs(Path::new(dir)));
        }
        if let Ok(Some(plugin)) = self.config.library.plugin_file() {
            own.push(abs(&plugin));
        }
        // Where plugins are found by name: a recall into them would plant code reel loads.
        for dir in reel_engine::device::plugin_dirs(&self.config.library.plugin_dir) {
            own.push(abs(&dir));
        }
        for url in [&self.config.store.url, &self.config.store.jobs_url] {
            if let Some(path) = url.strip_prefix("sqlite:") {
                let file = path.split('?').next().unwrap_or(path);
                own.push(abs(Path::new(file)));
            }
        }
        let resolved: Vec<PathBuf> = own
            .iter()
            .filter_map(|p| std::fs::canonicalize(p).ok())
            .collect();
        own.extend(resolved);
        own.sort();
        own.dedup();
        own
    }
}

/// Resolve the data dir: the flag, else `$REEL_DATA_DIR`, else [`DEFAULT_DATA_DIR`].
pub fn data_dir_from(flag: Option<&Path>, env: &dyn Fn(&str) -> Option<String>) -> PathBuf {
    flag.map(Path::to_path_buf)
        .or_else(|| {
            env("REEL_DATA_DIR")
                .filter(|s| !s.is_empty())
                .map(PathBuf::from)
        })
        .unwrap_or_else(|| PathBuf::from(DEFAULT_DATA_DIR))
}

impl LoadedConfig {
    /// Load with the process environment.
    pub fn load(config_flag: Option<&Path>, data_dir_flag: Option<&Path>) -> Result<LoadedConfig> {
        let vars: BTreeMap<String, String> = std::env::vars().collect();
        Self::load_with(config_flag, data_dir_flag, &vars)
    }

    /// Load with an explicit environment (for tests).
    pub fn load_with(
        config_flag: Option<&Path>,
        data_dir_flag: Option<&Path>,
        vars: &BTreeMap<String, String>,
    ) -> Result<LoadedConfig> {
        let env = |k: &str| vars.get(k).cloned();
        let data_dir = data_dir_from(data_dir_flag, &env);
        let file = match config_flag {
            Some(p) => Some(p.to_path_buf()),
            None => match env("REEL_CONFIG").filter(|s| !s.is_empty()) {
                Some(p) => Some(PathBuf::from(p)),
                None => {
                    let p = data_dir.join(CONFIG_FILE_NAME);
                    p.is_file().then_some(p)
                }
            },
        };
        let (mut table, origin) = match &file {
            Some(path) => {
                let text =
                    std::fs::read_to_string(path).map_err(|source| JobsError::ConfigRead {
                        path: path.clone(),
                        source,
                    })?;
                let table: toml::Table = toml::from_str(&text).map_err(|e| JobsError::Config {
                    origin: path.display().to_string(),
                    message: e.to_string(),
                })?;
                (table, path.display().to_string())
            }
            None => (toml::Table::new(), "built-in defaults".to_string()),
        };
        // Validate the file alone first, so its errors name the file.
        parse(&table, &origin)?;
        let overridden = apply_env(&mut table, vars)?;
        let mut config = parse(&table, &format!("{origin} with REEL_* overrides"))?;
        config.validate_from(&Origins {
            file: origin,
            overridden,
        })?;
        config.resolve_paths(&data_dir);
        Ok(LoadedConfig {
            config,
            data_dir,
            file,
        })
    }
}

fn parse(table: &toml::Table, origin: &str) -> Result<Config> {
    Config::deserialize(toml::Value::Table(table.clone())).map_err(|e| JobsError::Config {
        origin: origin.to_string(),
        message: e.to_string(),
    })
}

/// Overlay `REEL_<SECTION>_<KEY>` variables. Variables of other shapes (`REEL_DATA_DIR`,
/// `REEL_CONFIG`, `REEL_TEST_*`, `REEL_LOG`) are not config keys and are left alone; a known
/// section with an unknown key is an error naming the variable.
/// Returns the keys it set, as `[section] key`, with the variable that set each.
fn apply_env(
    table: &mut toml::Table,
    vars: &BTreeMap<String, String>,
) -> Result<Vec<(String, String)>> {
    let mut overridden = Vec::new();
    let defaults = match toml::Value::try_from(Config::default()) {
        Ok(toml::Value::Table(t)) => t,
        _ => toml::Table::new(),
    };
    for (name, raw) in vars {
        let Some(rest) = name.strip_prefix("REEL_") else {
            continue;
        };
        let lower = rest.to_ascii_lowercase();
        let Some(section) = SECTIONS
            .iter()
            .find(|s| lower.starts_with(&format!("{s}_")))
        else {
            continue;
        };
        let key = &lower[section.len() + 1..];
        let known = defaults
            .get(*section)
            .and_then(|s| s.as_table())
            .is_some_and(|s| s.contains_key(key));
        if !known {
            return Err(JobsError::Config {
                origin: format!("environment variable {name}"),
                message: format!(
                    "[{section}] has no key `{key}`; see `reel.toml` keys in the docs"
                ),
            });
        }
        let value = parse_env_value(raw);
        let section_table = table
            .entry(section.to_string())
            .or_insert_with(|| toml::Value::Table(toml::Table::new()));
        match section_table {
            toml::Value::Table(t) => {
                t.insert(key.to_string(), value);
                overridden.push((format!("[{section}] {key}"), name.clone()));
            }
            _ => {
                return Err(JobsError::Config {
                    origin: format!("environment variable {name}"),
                    message: format!("`{section}` in the file is not a table"),
                });
            }
        }
    }
    Ok(overridden)
}

/// Where the configuration's values came from: the file (or the built-in defaults), and the
/// keys `REEL_*` variables set.
pub struct Origins {
    /// The file, or `built-in defaults`.
    pub file: String,
    /// `[section] key` and the variable that set it.
    pub overridden: Vec<(String, String)>,
}

impl Origins {
    /// Where the value(s) an error about `keys` (e.g. `[archive] record_size`) blames came from:
    /// the variable that set one of them, else the file.
    fn of(&self, keys: &str) -> String {
        match self
            .overridden
            .iter()
            .find(|(k, _)| keys.contains(k.as_str()))
        {
            Some((_, var)) => format!("environment variable {var}"),
            None => self.file.clone(),
        }
    }
}

/// A variable's value as TOML (`42`, `true`, `["a","b"]`, `{x=1}`), else as a plain string.
fn parse_env_value(raw: &str) -> toml::Value {
    match toml::from_str::<toml::Table>(&format!("v = {raw}")) {
        Ok(mut t) => t
            .remove("v")
            .unwrap_or_else(|| toml::Value::String(raw.to_string())),
        Err(_) => toml::Value::String(raw.to_string()),
    }
}

impl Config {
    /// Check cross-key rules. `origin` names where the values came from.
    pub fn validate(&self, origin: &str) -> Result<()> {
        self.validate_from(&Origins {
            file: origin.to_string(),
            overridden: Vec::new(),
        })
    }

    /// Check cross-key rules; an error names the key and where its value came from (the file,
    /// or the `REEL_*` variable that set it).
    pub fn validate_from(&self, origins: &Origins) -> Result<()> {
        let bad = |key: &str, why: String| {
            Err(JobsError::Config {
                origin: origins.of(key),
                message: format!("{key}: {why}"),
            })
        };
        let w = &self.worker;
        // apalis stores worker heartbeats in whole seconds and computes the orphan window with
        // `Duration::as_secs()`: below 1 s the window is 0 and every live worker's jobs are stolen.
        if w.heartbeat_ms < 1000 {
            return bad(
                "[worker] heartbeat_ms",
                format!(
                    "{} is below 1000 (apalis keeps whole seconds)",
                    w.heartbeat_ms
                ),
            );
        }
        if w.lease_ms < 2 * w.heartbeat_ms {
            return bad(
                "[worker] lease_ms",
                format!(
                    "{} must be at least twice heartbeat_ms ({})",
                    w.lease_ms, w.heartbeat_ms
                ),
            );
        }
        if w.poll_interval_ms == 0 || w.poll_interval_ms > 1000 {
            return bad(
                "[worker] poll_interval_ms",
                format!(
                    "{} must be 1..=1000 so an idle worker starts a job within a second",
                    w.poll_interval_ms
                ),
            );
        }
        if w.max_attempts == 0 {
            return bad("[worker] max_attempts", "must be at least 1".into());
        }
        if w.drive_down_failures > 0 && w.drive_down_window_seconds == 0 {
            return bad(
                "[worker] drive_down_window_seconds",
                "must be at least 1 when drive_down_failures is set (0 failures turns it off)"
                    .into(),
            );
        }
        if w.backoff_base_ms == 0 || w.backoff_max_ms < w.backoff_base_ms {
            return bad(
                "[worker] backoff_base_ms",
                "must be > 0 and <= backoff_max_ms".into(),
            );
        }
        if w.concurrency == 0 {
            return bad("[worker] concurrency", "must be at least 1".into());
        }
        let r = &self.repack;
        if r.buffer_dir.is_empty() || r.buffer_bytes == 0 || r.window == 0 {
            return bad(
                "[repack]",
                "buffer_dir must be given, buffer_bytes and window must be at least 1".into(),
            );
        }
        // Four windows of requests in flight, each step of the job lists them all.
        if r.window > MAX_REPACK_WINDOW {
            return bad(
                "[repack] window",
                format!(
                    "{} is more than {MAX_REPACK_WINDOW} objects (a repack keeps four windows of requests in flight and lists them at every step)",
                    r.window
                ),
            );
        }
        for (pool, p) in &r.pools {
            if !(0.0..=1.0).contains(&p.live_below) {
                return bad(
                    "[repack.pools]",
                    format!(
                        "{pool}: live_below {} is not a fraction between 0 and 1",
                        p.live_below
                    ),
                );
            }
        }
        let l = &self.lifecycle;
        if l.quarantine_days > MAX_QUARANTINE_DAYS {
            return bad(
                "[lifecycle] quarantine_days",
                format!(
                    "{} is more than {MAX_QUARANTINE_DAYS} (100 years)",
                    l.quarantine_days
                ),
            );
        }
        for (class, rule) in &l.retention {
            if self.pools_of(class).is_none() {
                return bad(
                    "[lifecycle.retention]",
                    format!("`{class}` is not a storage class of [archive.storage_classes]"),
                );
            }
            if rule.days == 0 || rule.days > MAX_QUARANTINE_DAYS {
                return bad(
                    "[lifecycle.retention]",
                    format!(
                        "`{class}`: days = {} must be 1..={MAX_QUARANTINE_DAYS}",
                        rule.days
                    ),
                );
            }
        }
        if l.delete_batch == 0 || l.delete_batch > 100_000 {
            return bad(
                "[lifecycle] delete_batch",
                format!("{} must be 1..=100000 keys per transaction", l.delete_batch),
            );
        }
        let a = &self.archive;
        // The ranges the sessions accept: refused by every command that loads the config, not
        // first by the worker.
        use reel_engine::format::{MAX_RECORD_SIZE, MIN_RECORD_SIZE};
        let rs = a.record_size as usize;
        if !(MIN_RECORD_SIZE..=MAX_RECORD_SIZE).contains(&rs) || !rs.is_multiple_of(4096) {
            return bad(
                "[archive] record_size",
                format!(
                    "{} must be a multiple of 4096 from {MIN_RECORD_SIZE} to {MAX_RECORD_SIZE}",
                    a.record_size
                ),
            );
        }
        if a.barrier_bytes == 0 {
            return bad(
                "[archive] barrier_bytes",
                format!(
                    "{} must be at least 1 (a synchronous filemark per this many bytes)",
                    a.barrier_bytes
                ),
            );
        }
        if a.barrier_seconds == 0 {
            return bad(
                "[archive] barrier_seconds",
                format!(
                    "{} must be at least 1 (a synchronous filemark at least this often)",
                    a.barrier_seconds
                ),
            );
        }
        if a.container_bytes < u64::from(a.record_size) {
            return bad(
                "[archive] container_bytes",
                format!(
                    "{} is less than one record ({} bytes)",
                    a.container_bytes, a.record_size
                ),
            );
        }
        if a.early_warning_margin_bytes < u64::from(a.record_size)
            || a.early_warning_margin_bytes > MAX_EARLY_WARNING_MARGIN
        {
            return bad(
                "[archive] early_warning_margin_bytes",
                format!(
                    "{} must be from one record ({} bytes) to {MAX_EARLY_WARNING_MARGIN} (1 GiB); past early warning only a small zone is left",
                    a.early_warning_margin_bytes, a.record_size
                ),
            );
        }
        if a.verify == VerifyMode::Sampled && a.sample_every == 0 {
            return bad(
                "[archive] sample_every",
                "must be at least 1 with verify = \"sampled\"".into(),
            );
        }
        if !a.storage_classes.contains_key(&a.default_class) {
            return bad(
                "[archive] default_class",
                format!("`{}` is not in [archive.storage_classes]", a.default_class),
            );
        }
        if let Some((name, _)) = a.storage_classes.iter().find(|(_, pools)| pools.is_empty()) {
            return bad(
                "[archive] storage_classes",
                format!("class `{name}` has no pools"),
            );
        }
        if self.serve.listen.parse::<std::net::SocketAddr>().is_err() {
            return bad(
                "[serve] listen",
                format!(
                    "`{}` is not IP:PORT (e.g. {DEFAULT_SERVE_LISTEN}, or 0.0.0.0:8420 for every interface)",
                    self.serve.listen
                ),
            );
        }
        if self.serve.max_connections == 0
            || self.serve.max_connections_per_address == 0
            || self.serve.header_timeout_seconds == 0
            || self.serve.request_timeout_seconds == 0
            || self.serve.max_body_bytes < 1024
        {
            return bad(
                "[serve]",
                "max_connections, max_connections_per_address, header_timeout_seconds and request_timeout_seconds must be at least 1, max_body_bytes at least 1024".into(),
            );
        }
        if self.serve.spool_dir.is_empty()
            || self.serve.staging_dir.is_empty()
            || self.serve.spool_bytes == 0
            || self.serve.staging_bytes == 0
            || self.serve.max_object_bytes == 0
            || self.serve.staging_hours == 0
        {
            return bad(
                "[serve]",
                "spool_dir and staging_dir must be given, spool_bytes, staging_bytes, max_object_bytes and staging_hours must be at least 1".into(),
            );
        }
        if self.keys.file.is_empty() || self.keys.command_timeout_seconds == 0 {
            return bad(
                "[keys]",
                "file must be given and command_timeout_seconds must be at least 1".into(),
            );
        }
        if self.keys.command.first().is_some_and(|p| p.is_empty()) {
            return bad(
                "[keys] command",
                "its first element is the program to run and may not be empty; give an absolute path, or leave `command` out".into(),
            );
        }
        if !self.worker.metrics_listen.is_empty() {
            match self.worker.metrics_listen.parse::<std::net::SocketAddr>() {
                Ok(a) if a.ip().is_loopback() => {}
                _ => {
                    return bad(
                        "[worker] metrics_listen",
                        format!(
                            "`{}` is not a loopback IP:PORT (e.g. 127.0.0.1:9464): the worker's metrics have no authentication, so they are served on loopback only; put a proxy in front to scrape from elsewhere",
                            self.worker.metrics_listen
                        ),
                    );
                }
            }
        }
        if !(1..=256).contains(&self.recall.writer_threads) {
            return bad(
                "[recall] writer_threads",
                format!("{} must be 1 to 256", self.recall.writer_threads),
            );
        }
        for url in [&self.store.url, &self.store.jobs_url] {
            if !(url.starts_with("sqlite:")
                || url.starts_with("postgres://")
                || url.starts_with("postgresql://"))
            {
                return bad(
                    "[store] url",
                    format!(
                        "`{}` is neither sqlite:PATH nor postgres://…",
                        crate::db::redact(url)
                    ),
                );
            }
        }
        Ok(())
    }

    fn resolve_paths(&mut self, data_dir: &Path) {
        let resolve_sqlite = |url: &mut String| {
            if let Some(path) = url.strip_prefix("sqlite:") {
                let p = Path::new(path);
                if p.is_relative() && path != ":memory:" {
                    *url = format!("sqlite:{}", data_dir.join(p).display());
                }
            }
        };
        resolve_sqlite(&mut self.store.url);
        resolve_sqlite(&mut self.store.jobs_url);
        for dir in [
            &mut self.serve.spool_dir,
            &mut self.serve.staging_dir,
            &mut self.repack.buffer_dir,
            &mut self.keys.file,
        ] {
            if Path::new(dir.as_str()).is_relative() {
                *dir = data_dir.join(dir.as_str()).display().to_string();
            }
        }
        if !self.library.plugin.is_empty()
            && !reel_engine::device::is_plugin_name(&self.library.plugin)
            && Path::new(&self.library.plugin).is_relative()
        {
            self.library.plugin = data_dir.join(&self.library.plugin).display().to_string();
        }
        if !self.library.plugin_dir.is_empty() && Path::new(&self.library.plugin_dir).is_relative()
        {
            self.library.plugin_dir = data_dir
                .join(&self.library.plugin_dir)
                .display()
                .to_string();
        }
    }

    /// The pools of a storage class.
    pub fn pools_of(&self, class: &str) -> Option<&[String]> {
        self.archive.storage_classes.get(class).map(Vec::as_slice)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// docs/OPERATIONS.md §10 has a row `| `[section]` | `key` | `default` |` for every key of
    /// every section (a table-valued key: its row, whatever the default cell says).
    #[test]
    fn operations_lists_every_key() {
        let doc = include_str!("../../../docs/OPERATIONS.md");
        let mut missing = Vec::new();
        let mut check = |section: &str, table: &toml::Table| {
            for (key, value) in table {
                let row = format!("| `[{section}]` | `{key}` | `");
                let found = match value {
                    toml::Value::Table(_) => doc.contains(&row),
                    v => doc.contains(&format!("{row}{v}` |")),
                };
                if !found {
                    missing.push(format!("[{section}] {key} = {value}"));
                }
            }
        };
        let Ok(toml::Value::Table(all)) = toml::Value::try_from(Config::default()) else {
            panic!("the default config is not a table");
        };
        for (section, keys) in &all {
            if let toml::Value::Table(keys) = keys {
                check(section, keys);
            }
        }
        let Ok(toml::Value::Table(group)) = toml::Value::try_from(GroupConfig::default()) else {
            panic!("a group is not a table");
        };
        check("scheduler.groups.NAME", &group);
        assert!(
            missing.is_empty(),
            "docs/OPERATIONS.md §10 lacks these keys or has another default: {missing:#?}"
        );
    }

    fn vars(pairs: &[(&str, &str)]) -> BTreeMap<String, String> {
        pairs
            .iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect()
    }

    #[test]
    fn defaults_resolve_against_data_dir() {
        let dir = tempfile::tempdir().unwrap();
        let c = LoadedConfig::load_with(None, Some(dir.path()), &vars(&[])).unwrap();
        assert_eq!(c.file, None);
        assert_eq!(
            c.config.store.url,
            format!("sqlite:{}", dir.path().join("reel.db").display())
        );
        assert_eq!(
            c.config.store.jobs_url,
            format!("sqlite:{}", dir.path().join("jobs.db").display())
        );
    }

    #[test]
    fn data_dir_precedence_flag_env_default() {
        let env = |k: &str| (k == "REEL_DATA_DIR").then(|| "/from/env".to_string());
        assert_eq!(
            data_dir_from(Some(Path::new("/flag")), &env),
            PathBuf::from("/flag")
        );
        assert_eq!(data_dir_from(None, &env), PathBuf::from("/from/env"));
        assert_eq!(
            data_dir_from(None, &|_| None),
            PathBuf::from(DEFAULT_DATA_DIR)
        );
    }

    #[test]
    fn file_in_data_dir_is_found_and_paths_resolve() {
        let dir = tempfile::tempdir().unwrap();
        std::fs::write(
            dir.path().join("reel.toml"),
            "[library]\nplugin = \"plugins/libsim.so\"\nplugin_dir = \"plugins\"\ndrives = [\"d0\"]\n[archive]\nverify = \"sampled\"\n",
        )
        .unwrap();
        let c = LoadedConfig::load_with(None, Some(dir.path()), &vars(&[])).unwrap();
        assert_eq!(
            c.config.library.plugin_dir,
            dir.path().join("plugins").display().to_string()
        );
        assert_eq!(
            c.file.as_deref(),
            Some(dir.path().join("reel.toml").as_path())
        );
        assert_eq!(
            c.config.library.plugin,
            dir.path().join("plugins/libsim.so").display().to_string()
        );
        assert_eq!(c.config.library.drives, vec!["d0".to_string()]);
        assert_eq!(c.config.archive.verify, VerifyMode::Sampled);
    }

    #[test]
    fn env_overrides_file_and_parses_types() {
        let dir = tempfile::tempdir().unwrap();
        let f = dir.path().join("x.toml");
        std::fs::write(&f, "[worker]\nheartbeat_ms = 2000\nlease_ms = 10000\n").unwrap();
        let c = LoadedConfig::load_with(
            Some(&f),
            Some(dir.path()),
            &vars(&[
                ("REEL_WORKER_HEARTBEAT_MS", "3000"),
                ("REEL_SCHEDULER_MIN_FILES", "7"),
                ("REEL_LIBRARY_DRIVES", "[\"a\",\"b\"]"),
                ("REEL_STORE_URL", "postgres://u@h/db"),
                ("REEL_TEST_POSTGRES_URL", "ignored"),
                ("REEL_DATA_DIR", "ignored-because-flag"),
            ]),
        )
        .unwrap();
        assert_eq!(c.config.worker.heartbeat_ms, 3000);
        assert_eq!(c.config.worker.lease_ms, 10000);
        // The upload spool and the staging area are reel's own, wherever they are put.
        let mut moved = c.clone();
        moved.config.serve.spool_dir = "/srv/reel-spool".into();
        moved.config.serve.staging_dir = "/srv/reel-staging".into();
        let own = moved.own_paths();
        for p in [
            "/srv/reel-spool",
            "/srv/reel-staging",
            "/usr/lib/reel/plugins",
        ] {
            assert!(own.contains(&PathBuf::from(p)), "{p} not in {own:?}");
        }
        assert_eq!(c.config.scheduler.min_files, 7);
        assert_eq!(
            c.config.library.drives,
            vec!["a".to_string(), "b".to_string()]
        );
        assert_eq!(c.config.store.url, "postgres://u@h/db");
        assert!(c.config.store.is_postgres());
    }

    /// The ranges the sessions need are refused when the config is loaded, by any command,
    /// naming the key and where the value came from.
    #[test]
    fn session_ranges_are_refused_at_load() {
        let dir = tempfile::tempdir().unwrap();
        for (var, value, key) in [
            ("REEL_ARCHIVE_RECORD_SIZE", "4096", "[archive] record_size"),
            (
                "REEL_ARCHIVE_RECORD_SIZE",
                "16777216",
                "[archive] record_size",
            ),
            ("REEL_ARCHIVE_BARRIER_BYTES", "0", "[archive] barrier_bytes"),
            (
                "REEL_ARCHIVE_BARRIER_SECONDS",
                "0",
                "[archive] barrier_seconds",
            ),
            (
                "REEL_ARCHIVE_CONTAINER_BYTES",
                "1000",
                "[archive] container_bytes",
            ),
            (
                "REEL_ARCHIVE_EARLY_WARNING_MARGIN_BYTES",
                "1000",
                "[archive] early_warning_margin_bytes",
            ),
            (
                "REEL_ARCHIVE_EARLY_WARNING_MARGIN_BYTES",
                "2147483648",
                "[archive] early_warning_margin_bytes",
            ),
            ("REEL_RECALL_WRITER_THREADS", "0", "[recall] writer_threads"),
            ("REEL_REPACK_WINDOW", "1000000", "[repack] window"),
            (
                "REEL_RECALL_WRITER_THREADS",
                "1000",
                "[recall] writer_threads",
            ),
        ] {
            let e = LoadedConfig::load_with(None, Some(dir.path()), &vars(&[(var, value)]))
                .unwrap_err()
                .to_string();
            assert!(e.contains(key) && e.contains(value), "{var}={value}: {e}");
            assert!(
                e.contains(&format!("environment variable {var}")),
                "the variable is named as where the value came from: {e}"
            );
        }
        // A value from the file is blamed on the file.
        let f = dir.path().join("reel.toml");
        std::fs::write(&f, "[archive]\nrecord_size = 100\n").unwrap();
        let e = LoadedConfig::load_with(Some(&f), Some(dir.path()), &vars(&[]))
            .unwrap_err()
            .to_string();
        assert!(
            e.contains("reel.toml") && e.contains("[archive] record_size"),
            "{e}"
        );
    }

    #[test]
    fn serve_listen_defaults_and_is_overridable() {
        let dir = tempfile::tempdir().unwrap();
        let l = LoadedConfig::load_with(None, Some(dir.path()), &vars(&[])).unwrap();
        assert_eq!(l.config.serve.listen, DEFAULT_SERVE_LISTEN);
        let l = LoadedConfig::load_with(
            None,
            Some(dir.path()),
            &vars(&[("REEL_SERVE_LISTEN", "0.0.0.0:9000")]),
        )
        .unwrap();
        assert_eq!(l.config.serve.listen, "0.0.0.0:9000");
        let err = LoadedConfig::load_with(
            None,
            Some(dir.path()),
            &vars(&[("REEL_SERVE_LISTEN", "localhost")]),
        )
        .unwrap_err()
        .to_string();
        assert!(
            err.contains("[serve] listen") && err.contains("IP:PORT"),
            "{err}"
        );
    }

    #[test]
    fn unknown_key_in_file_names_key_and_file() {
        let dir = tempfile::tempdir().unwrap();
        let f = dir.path().join("bad.toml");
        std::fs::write(&f, "[worker]\npoll_intervall_ms = 5\n").unwrap();
        let err = LoadedConfig::load_with(Some(&f), Some(dir.path()), &vars(&[]))
            .unwrap_err()
            .to_string();
        assert!(err.contains("poll_intervall_ms"), "{err}");
        assert!(err.contains("bad.toml"), "{err}");
    }

    #[test]
    fn unknown_env_key_names_variable() {
        let dir = tempfile::tempdir().unwrap();
        let err = LoadedConfig::load_with(
            None,
            Some(dir.path()),
            &vars(&[("REEL_WORKER_HEARTBEAT", "1")]),
        )
        .unwrap_err()
        .to_string();
        assert!(err.contains("REEL_WORKER_HEARTBEAT"), "{err}");
    }

    #[test]
    fn bad_env_value_type_is_reported() {
        let dir = tempfile::tempdir().unwrap();
        let err = LoadedConfig::load_with(
            None,
            Some(dir.path()),
            &vars(&[("REEL_WORKER_LEASE_MS", "soon")]),
        )
        .unwrap_err()
        .to_string();
        assert!(err.contains("REEL_*") && err.contains("lease_ms"), "{err}");
    }

    #[test]
    fn sub_second_heartbeat_is_refused() {
        let dir = tempfile::tempdir().unwrap();
        let err = LoadedConfig::load_with(
            None,
            Some(dir.path()),
            &vars(&[("REEL_WORKER_HEARTBEAT_MS", "200")]),
        )
        .unwrap_err()
        .to_string();
        assert!(err.contains("heartbeat_ms"), "{err}");
    }

    #[test]
    fn missing_config_file_is_an_error() {
        let dir = tempfile::tempdir().unwrap();
        let err = LoadedConfig::load_with(
            Some(&dir.path().join("nope.toml")),
            Some(dir.path()),
            &vars(&[]),
        )
        .unwrap_err()
        .to_string();
        assert!(err.contains("nope.toml"), "{err}");
    }

    #[test]
    fn storage_classes_and_groups_parse() {
        let dir = tempfile::tempdir().unwrap();
        let f = dir.path().join("c.toml");
        std::fs::write(
            &f,
            "[archive]\ndefault_class = \"two\"\n[archive.storage_classes]\ntwo = [\"p1\", \"p2\"]\n\
             [scheduler.groups.vo1]\npools = [\"p1\"]\nmax_read_drives = 1\n",
        )
        .unwrap();
        let c = LoadedConfig::load_with(Some(&f), Some(dir.path()), &vars(&[]))
            .unwrap()
            .config;
        assert_eq!(
            c.pools_of("two").unwrap(),
            ["p1".to_string(), "p2".to_string()]
        );
        assert_eq!(c.scheduler.groups["vo1"].max_read_drives, 1);
        // default_class must name a class.
        std::fs::write(&f, "[archive]\ndefault_class = \"nope\"\n").unwrap();
        assert!(LoadedConfig::load_with(Some(&f), Some(dir.path()), &vars(&[])).is_err());
    }
}
