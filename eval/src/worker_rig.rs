//! reel as the benchmark drives it: the worker runtime `reel worker` runs (job queue,
//! scheduler, drive loops, executor), started in this process by
//! [`reel_worker::embedded::EmbeddedWorker`] over a fresh SQLite store and a fresh simulated
//! library loaded through dlopen. Every archive, recall and intake is a job submitted to the
//! queue and waited for, as a client service would; the rig keeps the worker's library handle
//! only to read the simulator's counters and the drives' positions, and its catalogue to find
//! where objects landed.
//!
//! Settings the benchmark changes from reel's defaults, and why (every row's note repeats what
//! concerns it):
//! - `[scheduler] max_age_seconds = 0`: a queue is worth a mount at once. The default (30 s)
//!   waits for company before mounting for a small request, a wall-clock wait the simulated
//!   drive time does not show and that only adds to the run's length.
//! - `[worker] poll_interval_ms = 20`: idle drive loops and the job poller look for work every
//!   20 ms instead of 250 ms, so a section on the SCALED clock (one wall second is many modelled
//!   ones) does not count the poll as drive time.

use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use anyhow::{Context, Result, anyhow, bail};
use reel_engine::catalogue::{Catalogue, CopyLocation};
use reel_engine::device::Drive;
use reel_engine::service::TapeService;
use reel_engine::session::destination::Overwrite;
use reel_queue::JobRecord;
use reel_queue::config::Config;
use reel_queue::job::{
    ArchiveJob, ArchiveSource, IntakeJob, IntakeSelection, JobSpec, JobState, RecallJob,
    RecallSelection,
};
use reel_worker::embedded::EmbeddedWorker;

use crate::rig::Counters;
use crate::sections::Ctx;

/// Longest a benchmark job may take before the section fails (the full run's largest job, the
/// million small objects, takes well under an hour).
const JOB_BOUND: Duration = Duration::from_secs(4 * 3600);

/// A worker over a fresh library and store.
pub struct Worker {
    /// The runtime the worker's tasks run on.
    pub rt: tokio::runtime::Runtime,
    worker: Option<EmbeddedWorker>,
    /// The worker's configuration (as `reel.toml` would give it).
    pub config: Config,
    /// The library directory.
    pub lib_dir: tempfile::TempDir,
    /// The store's directory (kept until the rig is dropped).
    _db_dir: tempfile::TempDir,
}

/// What an archive job reported.
#[derive(Debug, Clone, Copy)]
pub struct Archived {
    /// Objects archived.
    pub objects: u64,
    /// Payload bytes archived.
    pub bytes: u64,
}

/// What a recall job reported.
#[derive(Debug, Clone, Copy)]
pub struct Recalled {
    /// Objects recalled.
    pub objects: u64,
    /// Payload bytes recalled.
    pub bytes: u64,
    /// Drive seconds from the start of the read session that delivered first to its first
    /// byte (positioning and the first record; the mount not included).
    pub first_byte_s: Option<f64>,
    /// Drive seconds of the job's read sessions.
    pub read_s: f64,
}

impl Worker {
    /// A worker over `drives` drives and `cartridges` cartridges with the model's figures plus
    /// `extra` simulator items, storage classes `classes` (class, pool: one copy), and reel's
    /// defaults changed as the module says and then by `tune`; INSTANT clock.
    pub fn new(
        ctx: &Ctx,
        drives: u32,
        cartridges: u32,
        classes: &[(&str, &str)],
        tune: impl FnOnce(&mut Config),
    ) -> Result<Worker> {
        Worker::new_with_library_in(ctx, &ctx.scratch, drives, cartridges, classes, tune)
    }

    /// [`Worker::new`] with the simulated library (its cartridges' data files) in `lib_parent`
    /// instead of the scratch directory: a restore measures its destination, so the media it
    /// reads from must not share that disk.
    pub fn new_with_library_in(
        ctx: &Ctx,
        lib_parent: &Path,
        drives: u32,
        cartridges: u32,
        classes: &[(&str, &str)],
        tune: impl FnOnce(&mut Config),
    ) -> Result<Worker> {
        let lib_dir = tempfile::Builder::new()
            .prefix("reel-bench-lib-")
            .tempdir_in(lib_parent)?;
        let db_dir = tempfile::Builder::new()
            .prefix("reel-bench-db-")
            .tempdir_in(&ctx.scratch)?;
        let mut config = Config::default();
        config.store.url = format!("sqlite:{}", db_dir.path().join("reel.db").display());
        config.store.jobs_url = format!("sqlite:{}", db_dir.path().join("jobs.db").display());
        config.library.plugin = ctx.plugin_path.display().to_string();
        config.library.plugin_config = format!(
            "dir={};{};sim.drives={drives};sim.cartridges={cartridges}",
            lib_dir.path().display(),
            ctx.model.sim_config()
        );
        config.archive.storage_classes = classes
            .iter()
            .map(|(c, p)| (c.to_string(), vec![p.to_string()]))
            .collect();
        if let Some((c, _)) = classes.first() {
            config.archive.default_class = c.to_string();
        }
        config.scheduler.max_age_seconds = 0;
        config.worker.poll_interval_ms = 20;
        tune(&mut config);
        config
            .validate("the benchmark's worker configuration")
            .map_err(|e| anyhow!("{e}"))?;
        let rt = tokio::runtime::Builder::new_multi_thread()
            .worker_threads(4)
            .enable_all()
            .build()
            .context("starting the tokio runtime")?;
        let worker = Some(start(&rt, &config)?);
        Ok(Worker {
            rt,
            worker,
            config,
            lib_dir,
            _db_dir: db_dir,
        })
    }

    fn worker(&self) -> Result<&EmbeddedWorker> {
        self.worker
            .as_ref()
            .ok_or_else(|| anyhow!("the worker is not running"))
    }

    /// The engine service the worker drives (its library and catalogue).
    pub fn service(&self) -> Result<&Arc<TapeService>> {
        Ok(self.worker()?.service())
    }

    /// The catalogue.
    pub fn catalogue(&self) -> Result<&Catalogue> {
        Ok(self.service()?.catalogue())
    }

    /// Drive `index`'s handle.
    pub fn drive(&self, index: usize) -> Result<Drive> {
        self.service()?
            .drives()
            .into_iter()
            .nth(index)
            .ok_or_else(|| anyhow!("the library has no drive {index}"))
    }

    /// Stop the worker as SIGTERM stops `reel worker` (the drive loops unload what they
    /// mounted: a cold library), change its configuration with `tune`, start it again.
    pub fn restart(&mut self, tune: impl FnOnce(&mut Config)) -> Result<()> {
        if let Some(w) = self.worker.take() {
            self.rt
                .block_on(w.stop())
                .map_err(|e| anyhow!("stopping the worker: {e}"))?;
        }
        tune(&mut self.config);
        self.config
            .validate("the benchmark's worker configuration")
            .map_err(|e| anyhow!("{e}"))?;
        self.worker = Some(start(&self.rt, &self.config)?);
        Ok(())
    }

    /// Put every mounted cartridge home: restart the worker unchanged.
    pub fn unmount_all(&mut self) -> Result<()> {
        self.restart(|_| {})
    }

    /// Restart the worker with the simulator on the SCALED clock at `scale` modelled seconds
    /// per wall second.
    pub fn reclock(&mut self, scale: f64) -> Result<()> {
        self.restart(|c| {
            c.library.plugin_config = c.library.plugin_config.replace(
                "sim.clock=instant",
                &format!("sim.clock=scaled;sim.time_scale={scale}"),
            );
        })
    }

    /// Submit a job at the default priority; its id.
    pub async fn submit(&self, spec: JobSpec) -> Result<String> {
        Ok(self
            .worker()?
            .submit(spec)
            .await
            .map_err(|e| anyhow!("submitting a job: {e}"))?
            .id)
    }

    /// Wait for job `id` to end; its record if it ended done, else an error with its reason.
    pub async fn finished(&self, id: &str) -> Result<JobRecord> {
        let r = self
            .worker()?
            .wait(id, JOB_BOUND)
            .await
            .map_err(|e| anyhow!("waiting for job {id}: {e}"))?
            .ok_or_else(|| anyhow!("job {id} did not end within {JOB_BOUND:?}"))?;
        if r.state != JobState::Done {
            bail!(
                "{} job {id} ended {}: {}",
                r.kind,
                r.state,
                r.error.as_deref().unwrap_or("no reason given")
            );
        }
        Ok(r)
    }

    /// Whether job `id` has ended (done, failed or cancelled), without waiting.
    pub fn ended(&self, id: &str) -> Result<bool> {
        let w = self.worker()?;
        Ok(self
            .rt
            .block_on(w.wait(id, Duration::ZERO))
            .map_err(|e| anyhow!("job {id}: {e}"))?
            .is_some())
    }

    /// Submit a job and wait until it is done.
    pub fn run(&self, spec: JobSpec) -> Result<JobRecord> {
        self.rt.block_on(async {
            let id = self.submit(spec).await?;
            self.finished(&id).await
        })
    }

    /// Take the cartridges `barcodes` (all new ones when empty) into `pool`.
    pub fn intake(&self, barcodes: &[String], pool: &str) -> Result<()> {
        let selection = if barcodes.is_empty() {
            IntakeSelection::AllNew
        } else {
            IntakeSelection::Barcodes(barcodes.to_vec())
        };
        self.run(JobSpec::Intake(IntakeJob {
            selection,
            pool: Some(pool.to_string()),
        }))
        .map_err(|e| anyhow!("intake into {pool}: {e}"))?;
        Ok(())
    }

    /// Archive `items` (key, spool file; the key is the file's name) into `class`.
    pub fn archive(&self, items: &[(String, PathBuf)], class: &str) -> Result<Archived> {
        let r = self
            .run(archive_spec(items, class)?)
            .map_err(|e| anyhow!("archive into {class}: {e}"))?;
        Ok(archived(&r))
    }

    /// Recall `keys` into `root`.
    pub fn recall(&self, keys: &[String], root: &Path) -> Result<Recalled> {
        let r = self
            .run(recall_spec(keys, root))
            .map_err(|e| anyhow!("recall: {e}"))?;
        Ok(recalled(&r))
    }

    /// The simulator's counters.
    pub fn counters(&self) -> Result<Counters> {
        let r = self
            .rt
            .block_on(self.service()?.library().control(r#"{"op":"counters"}"#))
            .map_err(|e| anyhow!("simulator counters: {e}"))?;
        Counters::parse(&r)
    }

    /// `key`'s first copy (the benchmark's storage classes keep one).
    pub fn copy_of(&self, key: &str) -> Result<CopyLocation> {
        let cat = self.catalogue()?;
        let obj = self
            .rt
            .block_on(cat.object(key))
            .map_err(|e| anyhow!("{e}"))?
            .ok_or_else(|| anyhow!("{key} is not in the catalogue"))?;
        let copies = self
            .rt
            .block_on(cat.copies(key, obj.generation))
            .map_err(|e| anyhow!("{e}"))?;
        copies
            .into_iter()
            .next()
            .ok_or_else(|| anyhow!("{key} has no copy"))
    }

    /// The cartridge holding `key`'s first copy, and the block its data starts at.
    pub fn first_block(&self, key: &str) -> Result<(String, u64)> {
        let c = self.copy_of(key)?;
        Ok((
            c.barcode.clone(),
            c.container_first_block + 1 + c.offset / u64::from(c.record_size.max(1)),
        ))
    }

    /// Byte offset on the medium of every block of `barcode` (from the simulator's index,
    /// docs/SIMULATOR.md §5), plus its EOD offset at the end.
    pub fn block_offsets(&self, barcode: &str) -> Result<Vec<u64>> {
        let path = self.lib_dir.path().join(barcode).join("index");
        let raw = std::fs::read(&path).with_context(|| format!("reading {}", path.display()))?;
        let mut out = Vec::with_capacity(raw.len() / 24 + 1);
        let mut end = 0;
        for e in raw.chunks_exact(24) {
            let off = u64::from_le_bytes(e[0..8].try_into()?);
            let len = u64::from(u32::from_le_bytes(e[8..12].try_into()?));
            out.push(off);
            end = off + len;
        }
        out.push(end);
        Ok(out)
    }
}

impl Drop for Worker {
    fn drop(&mut self) {
        if let Some(w) = self.worker.take() {
            let _ = self.rt.block_on(w.stop());
        }
    }
}

/// Start the worker; a library directory a stopped worker just closed may still be releasing
/// its lock for a moment.
fn start(rt: &tokio::runtime::Runtime, config: &Config) -> Result<EmbeddedWorker> {
    let mut last = String::new();
    for _ in 0..50 {
        match rt.block_on(EmbeddedWorker::start(config)) {
            Ok(w) => return Ok(w),
            Err(e) => {
                last = e.to_string();
                std::thread::sleep(Duration::from_millis(100));
            }
        }
    }
    bail!("cannot start the worker: {last}")
}

/// The archive job for `items` (key, spool file): the keys are the files' names.
pub fn archive_spec(items: &[(String, PathBuf)], class: &str) -> Result<JobSpec> {
    for (k, p) in items {
        if p.file_name().and_then(|n| n.to_str()) != Some(k.as_str()) {
            bail!("spool file {} is not named after its key {k}", p.display());
        }
    }
    Ok(JobSpec::Archive(ArchiveJob {
        source: ArchiveSource::Files(items.iter().map(|(_, p)| p.clone()).collect()),
        key_prefix: String::new(),
        storage_class: class.to_string(),
        confine: None,
    }))
}

/// The recall job for `keys` into `root`.
pub fn recall_spec(keys: &[String], root: &Path) -> JobSpec {
    JobSpec::Recall(RecallJob {
        selection: RecallSelection::Keys(keys.to_vec()),
        destination: root.to_path_buf(),
        overwrite: Overwrite::default(),
        confine: None,
    })
}

fn number<'a>(r: &'a JobRecord, k: &str) -> Option<&'a serde_json::Value> {
    r.result.as_ref().and_then(|v| v.get(k))
}

/// What a done archive job reported.
pub fn archived(r: &JobRecord) -> Archived {
    let n = |k| {
        number(r, k)
            .and_then(serde_json::Value::as_u64)
            .unwrap_or(0)
    };
    Archived {
        objects: n("objects"),
        bytes: n("bytes"),
    }
}

/// What a done recall job reported.
pub fn recalled(r: &JobRecord) -> Recalled {
    let n = |k| {
        number(r, k)
            .and_then(serde_json::Value::as_u64)
            .unwrap_or(0)
    };
    Recalled {
        objects: n("objects"),
        bytes: n("bytes"),
        first_byte_s: number(r, "first_byte_s").and_then(serde_json::Value::as_f64),
        read_s: number(r, "read_s")
            .and_then(serde_json::Value::as_f64)
            .unwrap_or(0.0),
    }
}
