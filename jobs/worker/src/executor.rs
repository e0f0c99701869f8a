//! The tape executor: the worker's [`TapeExecutor`] built on the engine's [`TapeService`] and
//! sessions. Archive jobs become one write request per object and copy; the drive loops hand
//! batches of them to [`write_batch`](TapeExecutor::write_batch), which runs one group-commit
//! write session. Recall jobs become one read request per object on the cartridge of its best
//! copy; [`read_batch`](TapeExecutor::read_batch) reads a whole batch in planned order, and a
//! bad copy is re-routed to another copy.

use std::collections::{HashMap, HashSet};
use std::path::PathBuf;
use std::sync::Arc;

use crate::reroute::Reroute;
use reel_engine::catalogue::{Cartridge, CartridgeState, Catalogue, ContainerState, CopyLocation};
use reel_engine::service::{
    HeldDrive, HeldWriteError, ServiceOptions, TapeService, recall_options,
};
use reel_engine::session::intake::ReclaimOutcome;
use reel_engine::session::label_check::LabelCheck;
use reel_engine::session::order::OrderPolicy;
use reel_engine::session::recall::{RecallFailure, RecallItem, recall_session};
use reel_engine::session::write::{ArchiveItem, Refill};
use reel_engine::session::{self, CancelToken, SessionConfig, SessionError, destination};
use serde_json::json;
use tokio_util::sync::CancellationToken;
use tracing::{info, warn};

use crate::more_writes::MoreWrites;
use crate::scheduler::MountTarget;
use crate::worker::{BatchOutcome, ProgressFn, TapeExecutor};
use reel_queue::cartridge_task::CartridgeTask;
use reel_queue::config::{Config, VerifyMode};
use reel_queue::error::{JobsError, Result};
use reel_queue::job::{
    ArchiveJob, ArchiveSource, DEFAULT_PRIORITY, IntakeJob, IntakeSelection, RebuildJob, RecallJob,
    RecallSelection, VerifyJob, VerifyTarget,
};
use reel_queue::request_detail::{self, ReadDetail, WriteDetail};
use reel_queue::submission::SourceEntry;
use reel_queue::{Fence, NewTapeRequest, TapeRequest};

fn config_error(key: &str, reason: impl Into<String>) -> JobsError {
    JobsError::Config {
        origin: "the configuration".to_string(),
        message: format!("{key}: {}", reason.into()),
    }
}

/// A job that asks for something that cannot be: refused for good (not retried).
fn invalid(field: &'static str, value: &str, reason: &str) -> JobsError {
    JobsError::Invalid(reel_queue::submission::SubmissionError::Invalid {
        field,
        value: value.to_string(),
        reason: reason.to_string(),
    })
}

/// Whether a cartridge in this state can be mounted (it is in the library).
fn mountable(state: CartridgeState) -> bool {
    state != CartridgeState::Exported
}

/// Whether a container in this state is read back by a verify.
fn readable_back(state: ContainerState) -> bool {
    matches!(state, ContainerState::Durable | ContainerState::Verified)
}

/// A read request on `barcode` that carries a cartridge task.
fn task_request(
    task: CartridgeTask,
    barcode: &str,
    pool: Option<String>,
    bytes: u64,
) -> NewTapeRequest {
    NewTapeRequest {
        target: MountTarget::Read {
            barcode: barcode.to_string(),
        },
        pool,
        object_key: task.label(barcode),
        bytes,
        files: 1,
        priority: DEFAULT_PRIORITY,
        detail: task.detail(),
    }
}

/// The session tunables a configuration asks for.
pub fn session_config(c: &Config) -> SessionConfig {
    SessionConfig {
        record_size: c.archive.record_size as usize,
        container_bytes: c.archive.container_bytes,
        early_warning_margin_bytes: c.archive.early_warning_margin_bytes,
        barrier_bytes: c.archive.barrier_bytes,
        barrier_seconds: c.archive.barrier_seconds as f64,
        verify: match c.archive.verify {
            VerifyMode::Full => session::VerifyMode::Full,
            VerifyMode::Sampled => session::VerifyMode::Sampled,
            VerifyMode::None => session::VerifyMode::None,
        },
        sample_every: c.archive.sample_every.max(1),
        writer_threads: c.recall.writer_threads.max(1),
        read_through_gap_bytes: c.recall.read_through_gap_bytes,
        ..SessionConfig::default()
    }
}

/// Open the engine for this host: catalogue, storage classes, plugin, library, drives.
pub async fn open_service(config: &Config) -> Result<TapeService> {
    let catalogue = Catalogue::open(&config.store.url).await?;
    for (name, pools) in &config.archive.storage_classes {
        catalogue.ensure_storage_class(name, pools).await?;
    }
    let Some(plugin) = config
        .library
        .plugin_file()
        .map_err(|e| config_error("library.plugin", e.to_string()))?
    else {
        return Err(config_error(
            "library.plugin",
            "no device plugin configured: set [library] plugin to a plugin's name (sim, scsi, mhvtl) or the path of its .so",
        ));
    };
    let drives = if config.library.drives.is_empty() {
        None
    } else {
        let mut v = Vec::new();
        for d in &config.library.drives {
            v.push(d.parse::<u32>().map_err(|_| {
                config_error(
                    "library.drives",
                    format!("drive `{d}` is not a drive index (0, 1, ...)"),
                )
            })?);
        }
        Some(v)
    };
    let options = ServiceOptions {
        drives,
        session: session_config(config),
        media_alert_limit: config.archive.media_alert_limit,
        cleaning_prefix: config.library.cleaning_prefix.clone(),
        ..ServiceOptions::default()
    };
    TapeService::open(catalogue, &plugin, &config.library.plugin_config, options)
        .await
        .map_err(JobsError::Session)
}

/// Bridges a jobs-layer lease to the engine's fence: checked (from the drive thread) before
/// every container and barrier a write session writes.
struct LeaseFence {
    fence: Fence,
    rt: tokio::runtime::Handle,
}

impl session::Fence for LeaseFence {
    fn check(&self) -> std::result::Result<(), String> {
        self.rt
            .block_on(self.fence.check())
            .map_err(|e| e.to_string())
    }

    fn within_term(&self) -> bool {
        self.fence.within_term()
    }

    fn writer_lease(&self) -> Option<reel_engine::catalogue::WriterLease> {
        Some(reel_engine::catalogue::WriterLease {
            resource: self.fence.resource.clone(),
            holder: self.fence.holder.clone(),
            epoch: self.fence.epoch,
        })
    }
}

/// An engine cancel token that follows a jobs cancellation token.
fn engine_cancel(c: &CancellationToken) -> CancelToken {
    let t = CancelToken::new();
    let t2 = t.clone();
    let c = c.clone();
    tokio::spawn(async move {
        c.cancelled().await;
        t2.cancel();
    });
    t
}

/// The engine-backed executor.
pub struct EngineExecutor {
    service: Arc<TapeService>,
    config: Config,
    /// Bad copies seen per request (barcodes), so a re-route never goes back to one.
    bad: std::sync::Mutex<HashMap<i64, HashSet<String>>>,
    /// The library's name, asked of the plugin once ([`EngineExecutor::library_id`]).
    library_id: tokio::sync::OnceCell<String>,
}

impl EngineExecutor {
    /// An executor over an opened service.
    pub fn new(service: Arc<TapeService>, config: Config) -> EngineExecutor {
        EngineExecutor {
            service,
            config,
            bad: Default::default(),
            library_id: tokio::sync::OnceCell::new(),
        }
    }

    /// The engine service.
    pub fn service(&self) -> &Arc<TapeService> {
        &self.service
    }

    fn catalogue(&self) -> &Catalogue {
        self.service.catalogue()
    }

    /// The pool of cartridge `barcode`, looked up once per planning (`cache`): a read request
    /// carries its cartridge's pool, which the scheduler's group caps count by.
    async fn pool_of(
        &self,
        cache: &mut HashMap<String, Option<String>>,
        barcode: &str,
    ) -> Result<Option<String>> {
        if let Some(p) = cache.get(barcode) {
            return Ok(p.clone());
        }
        let p = self
            .catalogue()
            .cartridge(barcode)
            .await?
            .and_then(|k| k.pool);
        cache.insert(barcode.to_string(), p.clone());
        Ok(p)
    }

    /// The library's name in drive names, leases and the drive board: from the serial number
    /// the plugin reports (`simlib-3F9A0C21B7D4`, `3573_tl-LIB0000001`), so every host
    /// sharing the library agrees however it installed or configured the plugin; a hash of the
    /// plugin path and config only when the plugin reports none (docs/DECISIONS.md 26).
    pub async fn library_id(&self) -> Result<&str> {
        self.library_id
            .get_or_try_init(|| async {
                use sha2::Digest;
                let lib = &self.config.library;
                let hash = sha2::Sha256::digest(format!("{}\n{}", lib.plugin, lib.plugin_config));
                let id = self
                    .service
                    .library()
                    .identity(&hex::encode(&hash[..4]))
                    .await
                    .map_err(|e| JobsError::Session(e.into()))?;
                // Its drives' health readings are kept under the same name.
                self.service.name_library(&id);
                Ok::<_, JobsError>(id)
            })
            .await
            .map(String::as_str)
    }

    /// A drive's name in leases and logs: `<library id>-<index>`, so drive 0 of one library
    /// and drive 0 of another never share a lease, while hosts sharing one library do.
    async fn drive_name(&self, index: u32) -> Result<String> {
        Ok(format!("{}-{index}", self.library_id().await?))
    }

    fn drive_index(drive: &str) -> Result<u32> {
        drive
            .rsplit('-')
            .next()
            .and_then(|i| i.parse::<u32>().ok())
            .ok_or_else(|| {
                JobsError::Internal(format!("drive `{drive}` does not end in a drive index"))
            })
    }

    fn default_pool(&self) -> String {
        self.config
            .archive
            .storage_classes
            .get(&self.config.archive.default_class)
            .and_then(|p| p.first().cloned())
            .unwrap_or_else(|| "default".into())
    }

    /// The copy of (key, generation) to read, avoiding `bad` cartridges
    /// ([`crate::recall_copy`]).
    async fn best_copy(
        &self,
        key: &str,
        generation: u64,
        bad: &HashSet<String>,
    ) -> Result<Option<CopyLocation>> {
        let copies = self.catalogue().copies(key, generation).await?;
        Ok(crate::recall_copy::choose(copies, bad))
    }
}

impl EngineExecutor {
    /// Run a batch's cartridge tasks on the cartridge mounted in `held`: labels, then
    /// rebuilds, then one read-back pass over every container the batch verifies (in block
    /// order). Each task's outcome goes into `out`; a drive fault or a cancel stops the run and
    /// is returned, with what was settled before it kept in `out`. `true` when a label check
    /// found the cartridge is not the one the catalogue knows (it is now broken).
    async fn run_tasks(
        &self,
        held: &HeldDrive,
        tasks: Vec<(&TapeRequest, &CartridgeTask)>,
        fence: &Fence,
        cancel: &CancelToken,
        out: &mut BatchOutcome,
    ) -> std::result::Result<bool, SessionError> {
        let barcode = held.mount.barcode.clone();
        let mut not_ours = false;
        // Container to the requests that verify it (two jobs may ask for the same one).
        let mut verify: HashMap<i64, Vec<i64>> = HashMap::new();
        // Labels and rebuilds write the catalogue (a label the tape too): only under the lease.
        let fenced = || async {
            fence
                .check()
                .await
                .map_err(|e| SessionError::Fenced(e.to_string()))
        };
        for (r, t) in &tasks {
            if cancel.is_cancelled() {
                return Err(SessionError::Cancelled);
            }
            match t {
                CartridgeTask::Label { pool } => {
                    fenced().await?;
                    match self.service.label_held(held, pool).await {
                        Ok(outcome) => {
                            info!(%barcode, ?outcome, "intake");
                            out.done.push(r.id);
                            out.results
                                .push((r.id, task_result(&barcode, json!(outcome))));
                        }
                        Err(SessionError::Cartridge { reason, .. }) => {
                            out.failed.push((r.id, reason));
                        }
                        Err(e) => return Err(e),
                    }
                }
                CartridgeTask::Rebuild { worm } => {
                    fenced().await?;
                    match self.service.rebuild_held(held, *worm, cancel).await {
                        Ok(report) => {
                            info!(%barcode, containers = report.containers, objects = report.objects, "rebuilt");
                            out.done.push(r.id);
                            out.results.push((r.id, json!(report)));
                        }
                        // A blank or foreign cartridge: nothing of reel's to rebuild.
                        Err(SessionError::Cartridge { reason, .. }) => {
                            info!(%barcode, %reason, "skipped");
                            out.done.push(r.id);
                            out.results
                                .push((r.id, json!({"barcode": barcode, "skipped": reason})));
                        }
                        Err(e) => return Err(e),
                    }
                }
                CartridgeTask::CheckLabel => match self.service.check_label_held(held).await? {
                    LabelCheck::Matches { pool, epoch } => {
                        info!(%barcode, ?pool, epoch, "label checked: it is the cartridge the catalogue knows");
                        fenced().await?;
                        self.catalogue().set_label_checked(&barcode).await?;
                        out.done.push(r.id);
                        out.results.push((
                            r.id,
                            json!({"barcode": barcode, "label": "matches", "pool": pool, "epoch": epoch}),
                        ));
                    }
                    LabelCheck::Differs { reason } => {
                        // Marked broken: no work mounts it again until an operator looks.
                        fenced().await?;
                        warn!(%barcode, %reason, "label check failed: marking the cartridge broken");
                        let why = format!("label check: {reason}");
                        self.catalogue()
                            .set_cartridge_state_noted(
                                &barcode,
                                CartridgeState::Broken,
                                &why,
                                reel_engine::catalogue::REEL,
                            )
                            .await?;
                        out.failed
                            .push((r.id, format!("cartridge {barcode} marked broken: {why}")));
                        not_ours = true;
                    }
                    // Nothing to compare with: said, nothing changed.
                    LabelCheck::Unknown { reason } => {
                        out.failed
                            .push((r.id, format!("cartridge {barcode}: {reason}")));
                    }
                },
                CartridgeTask::Verify { container } => {
                    verify.entry(*container).or_default().push(r.id);
                }
                CartridgeTask::Reclaim => {
                    fenced().await?;
                    match self.service.reclaim_held(held).await? {
                        ReclaimOutcome::Reclaimed { pool, epoch, bytes } => {
                            info!(%barcode, %pool, epoch, bytes, "reclaimed");
                            out.done.push(r.id);
                            out.results.push((
                                r.id,
                                json!({"barcode": barcode, "reclaimed": true, "pool": pool, "epoch": epoch, "bytes": bytes}),
                            ));
                        }
                        // What the plan checked changed since (an undelete, a hold): refused
                        // for good, nothing written.
                        ReclaimOutcome::Refused { reason } => out.failed.push((r.id, reason)),
                    }
                }
            }
        }
        if verify.is_empty() || not_ours {
            // A cartridge that is not the one the catalogue knows has nothing of it to verify:
            // its verifies go back to the queue (and fail there, the cartridge being broken).
            out.retry.extend(
                verify
                    .values()
                    .flatten()
                    .map(|id| (*id, format!("cartridge {barcode} failed its label check"))),
            );
            return Ok(not_ours);
        }
        let ids: Vec<i64> = verify.keys().copied().collect();
        let rep = self.service.verify_held(held, Some(&ids), cancel).await?;
        for (container, result) in rep.results {
            for id in verify.get(&container).into_iter().flatten().copied() {
                match &result {
                    Ok(()) => out.done.push(id),
                    Err(m) => out.failed.push((id, m.clone())),
                }
            }
        }
        Ok(false)
    }
}

/// The session's progress (item indices) as the drive loop's (request ids); `id(i)` is the
/// request of the session's item `i`.
fn session_progress(
    progress: &ProgressFn,
    id: impl Fn(usize) -> Option<i64> + Send + Sync + 'static,
) -> session::ProgressFn {
    let progress = progress.clone();
    Arc::new(move |p: session::Progress, finished: &[usize]| {
        let done: Vec<i64> = finished.iter().filter_map(|i| id(*i)).collect();
        progress(&done, p.block);
    })
}

/// The requests a write session was given, by position, and those refused before it.
#[derive(Default)]
struct Admitted {
    /// The request of each item, by position (progress reports items by position).
    ids: Vec<i64>,
    /// Each object's request: one per object in a session.
    by_key: HashMap<String, i64>,
    /// Requests refused, and why.
    failed: Vec<(i64, String)>,
}

impl Admitted {
    /// `r` as an item of the session writing to `pool`, or refused (recorded in `failed`). A
    /// request `joining` a session that has its object already is left out, not refused: it
    /// goes back to the queue with whatever the session did not write, for a later batch.
    fn admit(&mut self, r: &TapeRequest, pool: &str, joining: bool) -> Option<ArchiveItem> {
        // One request per object in a session: a container cannot hold one object twice, and
        // the catalogue refuses a close that tries (the whole container would be lost, and
        // the batch with it, again and again).
        if joining && self.by_key.contains_key(&r.object_key) {
            return None;
        }
        if let Some(first) = self.by_key.get(&r.object_key) {
            self.failed.push((
                r.id,
                format!(
                    "object {} is requested twice for pool {pool} (requests {first} and {}); it is written once",
                    r.object_key, r.id
                ),
            ));
            return None;
        }
        // A request this reel cannot read fails alone, not its batch.
        let d: WriteDetail = match request_detail::parse(r) {
            Ok(d) => d,
            Err(e) => {
                self.failed.push((r.id, e.to_string()));
                return None;
            }
        };
        self.ids.push(r.id);
        self.by_key.insert(r.object_key.clone(), r.id);
        Some(ArchiveItem {
            key: r.object_key.clone(),
            generation: d.generation,
            planned: d.planned(),
            path: d.path,
            size: d.size,
            kind: d.kind,
            confine: d.confine,
        })
    }
}

/// A write session's refill: its batch's next writes ([`MoreWrites`]), admitted as its first
/// requests were.
struct BatchRefill {
    more: MoreWrites,
    admitted: Arc<std::sync::Mutex<Admitted>>,
    pool: String,
}

impl Refill for BatchRefill {
    fn more(&mut self) -> futures::future::BoxFuture<'_, Vec<ArchiveItem>> {
        Box::pin(async move {
            loop {
                let requests = match self.more.next().await {
                    Ok(r) => r,
                    Err(e) => {
                        warn!(pool = %self.pool, error = %e, "cannot take more writes into the session; it ends with what it has");
                        return Vec::new();
                    }
                };
                if requests.is_empty() {
                    return Vec::new();
                }
                let mut a = self.admitted.lock().unwrap_or_else(|e| e.into_inner());
                let items: Vec<ArchiveItem> = requests
                    .iter()
                    .filter_map(|r| a.admit(r, &self.pool, true))
                    .collect();
                if !items.is_empty() {
                    return items;
                }
            }
        })
    }
}

/// A cartridge task's result: the barcode, then what the task reports.
fn task_result(barcode: &str, found: serde_json::Value) -> serde_json::Value {
    let mut v = json!({"barcode": barcode});
    if let (Some(o), serde_json::Value::Object(f)) = (v.as_object_mut(), found) {
        o.extend(f);
    }
    v
}

impl TapeExecutor for EngineExecutor {
    fn object_catalogue(&self) -> Option<&Catalogue> {
        Some(self.catalogue())
    }

    async fn settle_catches(&self, within: std::time::Duration) {
        if !self.service.settle_catches(within).await {
            tracing::warn!(
                ?within,
                "integrity catches still unrecorded at shutdown; they are in the log only"
            );
        }
    }

    async fn drives(&self) -> Result<Vec<String>> {
        let mut names = Vec::new();
        for d in self.service.drives() {
            names.push(self.drive_name(d.index()).await?);
        }
        Ok(names)
    }

    async fn plan_archive(&self, _job_id: &str, job: &ArchiveJob) -> Result<Vec<NewTapeRequest>> {
        let class = self
            .catalogue()
            .storage_class(&job.storage_class)
            .await?
            .ok_or_else(|| {
                config_error(
                    "archive.storage_classes",
                    format!(
                        "storage class `{}` does not exist; define it under [archive.storage_classes]",
                        job.storage_class
                    ),
                )
            })?;
        // The walk and key derivation of submission; what it refuses is refused for good
        // (JobsError::Invalid is not retried).
        // A confined job's paths are checked again beneath its root: no link on the way to
        // them (each source is then opened beneath the root as it is read).
        if let Some(c) = &job.confine {
            let paths: &[PathBuf] = match &job.source {
                ArchiveSource::Files(f) => f,
                ArchiveSource::Tree(t) => std::slice::from_ref(t),
            };
            for p in paths {
                reel_queue::confine::check_source("paths", c, p).map_err(|e| {
                    reel_queue::submission::SubmissionError::Invalid {
                        field: "paths",
                        value: p.display().to_string(),
                        reason: e.to_string(),
                    }
                })?;
            }
        }
        let files = reel_queue::submission::archive_entries(job)?;
        // One statement per few hundred keys, not a round trip each (a million objects).
        let keys: Vec<String> = files.iter().map(|f| f.key.clone()).collect();
        let generations = self.catalogue().next_generations(&keys).await?;
        // A class with a retention: each generation is recorded with its days before anything
        // is written (planning again records the same).
        if let Some(rule) = self.config.lifecycle.retention.get(&job.storage_class) {
            let planned: Vec<(String, u64)> = keys
                .iter()
                .cloned()
                .zip(generations.iter().copied())
                .collect();
            self.catalogue()
                .record_retention(&job.storage_class, rule.days, &planned)
                .await?;
        }
        let mut reqs = Vec::with_capacity(files.len() * class.pools.len());
        for (
            SourceEntry {
                kind,
                key,
                path,
                size,
                mtime_ns,
                ctime_ns,
                ..
            },
            generation,
        ) in files.into_iter().zip(generations)
        {
            for pool in &class.pools {
                reqs.push(NewTapeRequest {
                    target: MountTarget::Write { pool: pool.clone() },
                    pool: Some(pool.clone()),
                    object_key: key.clone(),
                    bytes: size,
                    files: 1,
                    priority: DEFAULT_PRIORITY,
                    detail: request_detail::to_json(&WriteDetail {
                        path: path.clone(),
                        generation,
                        size,
                        kind,
                        mtime_ns: Some(mtime_ns),
                        ctime_ns: Some(ctime_ns),
                        confine: job.confine.clone(),
                    }),
                });
            }
        }
        Ok(reqs)
    }

    async fn plan_recall(&self, _job_id: &str, job: &RecallJob) -> Result<Vec<NewTapeRequest>> {
        // The submission's checks again (the catalogue may have changed since): a selection
        // that matches nothing is refused for good, never retried.
        reel_queue::submission::check_recall_input(job)?;
        let keys: Vec<String> = match &job.selection {
            RecallSelection::Keys(k) => k.clone(),
            RecallSelection::Prefix(p) => self
                .catalogue()
                .list_objects(p, u32::MAX as u64)
                .await?
                .into_iter()
                .map(|o| o.key)
                .collect(),
        };
        if let (true, RecallSelection::Prefix(p)) = (keys.is_empty(), &job.selection) {
            return Err(
                reel_queue::submission::SubmissionError::PrefixMatchesNothing { prefix: p.clone() }
                    .into(),
            );
        }
        let root = &job.destination;
        match &job.confine {
            // Checked again beneath the token's root: the destination (what of it exists) is
            // directories reached with no link on the way; the rest is created beneath the
            // root when the recall runs (Staging::open_within).
            Some(c) => reel_queue::confine::check_destination("to", c, root).map_err(|e| {
                reel_queue::submission::SubmissionError::Invalid {
                    field: "to",
                    value: root.display().to_string(),
                    reason: e.to_string(),
                }
            })?,
            None => std::fs::create_dir_all(root).map_err(|source| JobsError::Io {
                doing: "creating",
                path: root.clone(),
                source,
            })?,
        }
        let mut reqs = Vec::new();
        let mut missing = Vec::new();
        // Each read carries its cartridge's pool: the scheduler's group caps count by it.
        let mut pools: HashMap<String, Option<String>> = HashMap::new();
        for key in keys {
            let dest = destination::safe_join(root, &key).map_err(|e| {
                reel_queue::submission::SubmissionError::Invalid {
                    field: "keys",
                    value: key.clone(),
                    reason: e.to_string(),
                }
            })?;
            let Some(obj) = self.catalogue().object(&key).await? else {
                missing.push(key);
                continue;
            };
            let Some(c) = self
                .best_copy(&key, obj.generation, &HashSet::new())
                .await?
            else {
                // Name each copy's cartridge, its state and why.
                let mut why = Vec::new();
                for c in self.catalogue().copies(&key, obj.generation).await? {
                    match self.catalogue().cartridge(&c.barcode).await? {
                        Some(k) if crate::reroute::unmountable(k.state) => {
                            why.push(crate::reroute::why(&k))
                        }
                        _ => why.push(format!(
                            "the copy on {} is {}",
                            c.barcode,
                            c.container_state.as_str()
                        )),
                    }
                }
                return Err(invalid(
                    "keys",
                    &key,
                    &format!(
                        "has no readable copy ({}); bring a cartridge back into service \
                         (`reel cartridge state BARCODE active --reason …`), then `reel jobs \
                         retry` this job",
                        why.join("; ")
                    ),
                ));
            };
            let pool = self.pool_of(&mut pools, &c.barcode).await?;
            reqs.push(NewTapeRequest {
                target: MountTarget::Read {
                    barcode: c.barcode.clone(),
                },
                pool,
                object_key: key.clone(),
                bytes: c.length,
                files: 1,
                priority: DEFAULT_PRIORITY,
                detail: request_detail::to_json(&ReadDetail {
                    confine: job.confine.clone(),
                    ..ReadDetail::of(&c, dest, root.to_path_buf(), job.overwrite)
                }),
            });
        }
        if !missing.is_empty() {
            return Err(reel_queue::submission::unknown_keys(&missing).into());
        }
        Ok(reqs)
    }

    async fn plan_verify(&self, _job_id: &str, job: &VerifyJob) -> Result<Vec<NewTapeRequest>> {
        let mut containers = Vec::new();
        match &job.target {
            VerifyTarget::Label(b) => {
                let c = self.catalogue().cartridge(b).await?.ok_or_else(|| {
                    invalid(
                        "cartridge",
                        b,
                        "is not in the catalogue; list cartridges with `reel cartridge ls`",
                    )
                })?;
                if !mountable(c.state) {
                    return Err(invalid(
                        "cartridge",
                        b,
                        "is exported (out of the library); bring it back with `reel cartridge import` first",
                    ));
                }
                if c.cartridge_uuid.is_none() {
                    return Err(invalid(
                        "cartridge",
                        b,
                        "has no label in the catalogue (never labelled): nothing to compare; `reel intake` labels it",
                    ));
                }
                let mut pools = HashMap::new();
                let pool = self.pool_of(&mut pools, b).await?;
                return Ok(vec![task_request(CartridgeTask::CheckLabel, b, pool, 0)]);
            }
            VerifyTarget::Cartridge(b) => {
                match self.catalogue().cartridge(b).await? {
                    None => {
                        return Err(invalid(
                            "cartridge",
                            b,
                            "is not in the catalogue; list cartridges with `reel library cartridges`",
                        ));
                    }
                    Some(c) if !mountable(c.state) => {
                        return Err(invalid(
                            "cartridge",
                            b,
                            "is exported (out of the library); bring it back before verifying it",
                        ));
                    }
                    Some(_) => {}
                }
                containers.extend(
                    self.catalogue()
                        .containers_on(b)
                        .await?
                        .into_iter()
                        .filter(|c| readable_back(c.state)),
                );
            }
            VerifyTarget::Container(id) => {
                let c = self.catalogue().container(*id).await?.ok_or_else(|| {
                    invalid(
                        "container",
                        &id.to_string(),
                        "does not exist in the catalogue",
                    )
                })?;
                let on = self.catalogue().cartridge(&c.barcode).await?;
                if on.is_some_and(|k| !mountable(k.state)) {
                    return Err(invalid(
                        "container",
                        &id.to_string(),
                        &format!(
                            "is on cartridge {}, which is exported (out of the library); bring it back before verifying it",
                            c.barcode
                        ),
                    ));
                }
                if !readable_back(c.state) {
                    return Err(invalid(
                        "container",
                        &id.to_string(),
                        &format!(
                            "is {}: only durable or verified containers are read back",
                            c.state.as_str()
                        ),
                    ));
                }
                containers.push(c);
            }
            VerifyTarget::Sample { every } => {
                let every = (*every).max(1);
                let mut n = 0u64;
                // Cartridges out of the library are not sampled.
                for cart in self.catalogue().cartridges().await? {
                    if !mountable(cart.state) {
                        continue;
                    }
                    for c in self.catalogue().containers_on(&cart.barcode).await? {
                        if readable_back(c.state) {
                            if n.is_multiple_of(every) {
                                containers.push(c);
                            }
                            n += 1;
                        }
                    }
                }
            }
        }
        let mut pools: HashMap<String, Option<String>> = HashMap::new();
        let mut reqs = Vec::with_capacity(containers.len());
        for c in containers {
            let pool = self.pool_of(&mut pools, &c.barcode).await?;
            let task = CartridgeTask::Verify { container: c.id };
            reqs.push(task_request(task, &c.barcode, pool, c.bytes));
        }
        Ok(reqs)
    }

    async fn plan_intake(&self, _job_id: &str, job: &IntakeJob) -> Result<Vec<NewTapeRequest>> {
        let barcodes = match &job.selection {
            IntakeSelection::Barcodes(b) => {
                // A barcode the library does not hold is refused now, not mounted in vain
                // until the attempts run out.
                let held: HashSet<String> = self
                    .service
                    .sync_inventory()
                    .await?
                    .into_iter()
                    .map(|c| c.barcode)
                    .collect();
                let cleaning: HashSet<String> = self
                    .catalogue()
                    .cleaning_cartridges()
                    .await?
                    .into_iter()
                    .map(|c| c.barcode)
                    .collect();
                if let Some(c) = b
                    .iter()
                    .find(|b| cleaning.contains(*b) || self.service.is_cleaning_barcode(b))
                {
                    return Err(invalid(
                        "barcodes",
                        c,
                        "is a cleaning cartridge: reel cleans drives with it and never writes data on it",
                    ));
                }
                if let Some(missing) = b.iter().find(|b| !held.contains(*b)) {
                    return Err(invalid(
                        "barcodes",
                        missing,
                        "is not in the library; `reel library inventory` lists the cartridges it holds",
                    ));
                }
                // Listed once each: submission refuses a barcode named twice.
                b.clone()
            }
            IntakeSelection::AllNew => self.service.new_cartridges().await?,
        };
        let pool = job.pool.clone().unwrap_or_else(|| self.default_pool());
        Ok(barcodes
            .iter()
            // The pool it joins: a write to that pool right after finds it in the drive.
            .map(|b| {
                task_request(
                    CartridgeTask::Label { pool: pool.clone() },
                    b,
                    Some(pool.clone()),
                    0,
                )
            })
            .collect())
    }

    async fn plan_reclaim(
        &self,
        _job_id: &str,
        job: &reel_queue::job::ReclaimJob,
    ) -> Result<Vec<NewTapeRequest>> {
        let mut reqs = Vec::with_capacity(job.cartridges.len());
        for b in &job.cartridges {
            let check = self.catalogue().reclaim_check(b).await?;
            if let Some(reason) = check.refusal() {
                return Err(invalid("cartridges", b, &reason));
            }
            let pool = self.catalogue().cartridge(b).await?.and_then(|c| c.pool);
            reqs.push(task_request(CartridgeTask::Reclaim, b, pool, 0));
        }
        Ok(reqs)
    }

    async fn plan_rebuild(&self, _job_id: &str, job: &RebuildJob) -> Result<Vec<NewTapeRequest>> {
        let targets = match self.service.rebuild_targets(&job.cartridges).await {
            Ok(t) => t,
            Err(SessionError::Cartridge { barcode, reason }) => {
                return Err(invalid("cartridges", &barcode, &reason));
            }
            Err(e) => return Err(e.into()),
        };
        let mut reqs = Vec::with_capacity(targets.len());
        for (b, worm) in targets {
            let pool = self.catalogue().cartridge(&b).await?.and_then(|c| c.pool);
            reqs.push(task_request(CartridgeTask::Rebuild { worm }, &b, pool, 0));
        }
        Ok(reqs)
    }

    async fn mount(
        &self,
        drive: &str,
        target: &MountTarget,
        _fence: &Fence,
        _cancel: &CancellationToken,
    ) -> Result<String> {
        let index = Self::drive_index(drive)?;
        let held = match target {
            MountTarget::Read { barcode } => self.service.acquire_on(index, barcode).await,
            // The queued requests are not known here: any writable cartridge of the pool; the
            // batch's write picks one with room for its first object.
            MountTarget::Write { pool } => self.service.writable_on(index, pool, &[], 0).await,
        };
        let held = match held {
            Ok(h) => h,
            Err(e) => {
                if e.is_drive_failure() {
                    // What the failed drive holds is for the operator to pull: forget it, so
                    // the drive is loaded afresh once it is serviced.
                    self.service.reset_mounts_of(index).await;
                }
                return Err(e.into());
            }
        };
        let barcode = held.mount.barcode.clone();
        // The cartridge stays in the drive; the drive is free for this host's other work
        // between batches.
        drop(held);
        Ok(barcode)
    }

    async fn inventory(&self) -> Result<Vec<reel_queue::ElementView>> {
        let library = self.library_id().await?;
        let inv = self
            .service
            .library()
            .inventory()
            .await
            .map_err(|e| JobsError::Session(e.into()))?;
        Ok(inv
            .into_iter()
            .map(|e| reel_queue::ElementView {
                library: library.to_string(),
                kind: reel_queue::inventory::kind_name(e.kind).to_string(),
                index: e.index,
                address: e.address,
                barcode: (!e.barcode.is_empty()).then_some(e.barcode),
                full: e.flags & reel_plugin_abi::REEL_ELEMENT_FULL != 0,
                flags: e.flags,
            })
            .collect())
    }

    async fn library_name(&self) -> Result<Option<String>> {
        Ok(Some(self.library_id().await?.to_string()))
    }

    async fn exported(&self) -> Result<HashSet<String>> {
        Ok(self
            .catalogue()
            .vault_entries()
            .await?
            .into_iter()
            .map(|e| e.barcode)
            .collect())
    }

    async fn send_out_exported(&self) -> Result<()> {
        crate::vault::send_out_exported(&self.service)
            .await
            .map(|_| ())
    }

    async fn take_in(&self, only: &[String], by: &str) -> Result<crate::vault::TakenIn> {
        crate::vault::take_in(&self.service, only, by).await
    }

    async fn unmountable_among(&self, barcodes: Vec<String>) -> Result<Vec<Cartridge>> {
        let mut out = Vec::new();
        for b in barcodes {
            if let Some(c) = self.catalogue().cartridge(&b).await?
                && crate::reroute::unmountable(c.state)
            {
                out.push(c);
            }
        }
        Ok(out)
    }

    async fn reroute(&self, r: &TapeRequest, cart: &Cartridge) -> Result<Option<Reroute>> {
        let copies = match (CartridgeTask::of(r), request_detail::parse::<ReadDetail>(r)) {
            (Ok(None), Ok(d)) => Some(self.catalogue().copies(&r.object_key, d.generation).await?),
            _ => None,
        };
        Ok(crate::reroute::decide(r, cart, copies))
    }

    async fn held_elsewhere(&self) -> Result<Vec<String>> {
        Ok(self
            .service
            .held_elsewhere()
            .await?
            .into_iter()
            .map(|(barcode, _)| barcode)
            .collect())
    }

    async fn holding(&self, drive: &str) -> Result<Option<(String, Option<String>)>> {
        let index = Self::drive_index(drive)?;
        let Some(barcode) = self.service.mounted_on(index) else {
            return Ok(None);
        };
        let pool = self
            .catalogue()
            .cartridge(&barcode)
            .await?
            .and_then(|c| c.pool);
        Ok(Some((barcode, pool)))
    }

    async fn unmount(&self, drive: &str, _fence: &Fence) -> Result<()> {
        let index = Self::drive_index(drive)?;
        let Some(d) = self
            .service
            .drives()
            .into_iter()
            .find(|d| d.index() == index)
        else {
            return Ok(());
        };
        let lib = self.service.library().clone();
        let r = reel_engine::session::mount::unmount(&lib, &d, None)
            .await
            .map(|_| ());
        // Unloaded, or the drive failed with the cartridge in it (the operator pulls it): either
        // way this drive holds nothing reel will use.
        if r.as_ref().is_ok() || r.as_ref().is_err_and(|e| e.is_drive_failure()) {
            self.service.reset_mounts_of(index).await;
        }
        Ok(r?)
    }

    fn wants_cleaning(&self, drive: &str) -> bool {
        Self::drive_index(drive).is_ok_and(|i| self.service.wants_cleaning(i))
    }

    async fn clean_drive(&self, drive: &str) -> Result<String> {
        use reel_engine::session::clean::Cleaned;
        let index = Self::drive_index(drive)?;
        // Health readings and cleanings are kept under the library's name.
        self.library_id().await?;
        Ok(match self.service.clean_drive(index).await? {
            Cleaned::Done { barcode, seconds } => {
                format!("drive {drive} cleaned with {barcode} ({seconds:.0} s)")
            }
            Cleaned::Expired { barcode, flags } => format!(
                "drive {drive} NOT cleaned: cleaning cartridge {barcode} is used up (TapeAlert \
                 {}); take it out and put a new one in",
                flags
                    .iter()
                    .map(|f| f.to_string())
                    .collect::<Vec<_>>()
                    .join(", ")
            ),
            Cleaned::NoCartridge => format!(
                "drive {drive} NOT cleaned: the library holds no usable cleaning cartridge \
                 (barcode starting with `{}` or reported as cleaning media, not used up); put \
                 one in a mail slot and `reel cartridge import`",
                self.config.library.cleaning_prefix
            ),
        })
    }

    async fn reset_drive(&self, drive: &str) -> Result<String> {
        let index = Self::drive_index(drive)?;
        Ok(match self.service.reset_drive(index).await? {
            None => format!("drive {drive} was empty; nothing was moved"),
            Some(p) if p.unloaded => format!(
                "{} unloaded from drive {drive} and put back in slot element {}",
                p.barcode, p.slot
            ),
            Some(p) => format!(
                "{} pulled from drive {drive} by the robot (the drive did not unload) into slot \
                 element {}",
                p.barcode, p.slot
            ),
        })
    }

    async fn write_batch(
        &self,
        drive: &str,
        requests: &[TapeRequest],
        more: Option<MoreWrites>,
        fence: &Fence,
        cancel: &CancellationToken,
        progress: &ProgressFn,
    ) -> Result<BatchOutcome> {
        let index = Self::drive_index(drive)?;
        let Some(pool) = requests.first().and_then(|r| r.pool.clone()) else {
            return Ok(BatchOutcome::default());
        };
        let mut out = BatchOutcome::default();
        let admitted = Arc::new(std::sync::Mutex::new(Admitted::default()));
        let items: Vec<ArchiveItem> = {
            let mut a = admitted.lock().unwrap_or_else(|e| e.into_inner());
            requests
                .iter()
                .filter_map(|r| a.admit(r, &pool, false))
                .collect()
        };
        if items.is_empty() {
            let mut a = admitted.lock().unwrap_or_else(|e| e.into_inner());
            out.failed.append(&mut a.failed);
            return Ok(out);
        }
        let refill = more.map(|more| {
            Box::new(BatchRefill {
                more,
                admitted: admitted.clone(),
                pool: pool.clone(),
            }) as Box<dyn Refill>
        });
        // The cartridge mounted for this pool, or the next writable one, with room for the
        // batch's first object.
        let needed = self.service.room_needed(&items[0]);
        let mut held = self.service.writable_on(index, &pool, &[], needed).await?;
        held.fence = Arc::new(LeaseFence {
            fence: fence.clone(),
            rt: tokio::runtime::Handle::current(),
        });
        let p = {
            let admitted = admitted.clone();
            session_progress(progress, move |i| {
                admitted
                    .lock()
                    .unwrap_or_else(|e| e.into_inner())
                    .ids
                    .get(i)
                    .copied()
            })
        };
        let barcode = held.mount.barcode.clone();
        let (_back, result) = self
            .service
            .write_held(held, items, refill, &engine_cancel(cancel), p)
            .await;
        // Everything the session was given, the first items and what joined it.
        let (by_key, failed) = {
            let mut a = admitted.lock().unwrap_or_else(|e| e.into_inner());
            (std::mem::take(&mut a.by_key), std::mem::take(&mut a.failed))
        };
        out.failed.extend(failed);
        let o = match result {
            Ok(o) => o,
            Err(HeldWriteError::Refused { reason, .. }) => {
                warn!(drive, %barcode, %reason, "cartridge refused; the batch goes to another one");
                return Ok(out);
            }
            Err(HeldWriteError::Failed(e)) => return Err(e.into()),
        };
        let id_of = |it: &ArchiveItem| by_key.get(&it.key).copied();
        out.drive_time = o.summary.clone();
        out.done.extend(o.written.iter().filter_map(id_of));
        for (it, fault) in &o.failed {
            if let Some(id) = id_of(it) {
                if fault.retryable() {
                    out.retry.push((id, fault.to_string()));
                } else {
                    out.failed.push((id, fault.to_string()));
                }
            }
        }
        let mut rest: Vec<i64> = o.remaining.iter().filter_map(id_of).collect();
        // The object at the front does not fit in the room left: it goes to the next cartridge
        // without counting an attempt when an empty cartridge takes it, and fails at once when
        // none does (its size against the capacity the drive reports).
        if let Some(nr) = &o.no_room {
            if nr.fits_empty {
                info!(drive, %barcode, reason = %nr, "no room for the next object on this cartridge; it and the rest go back to the queue for a cartridge with room");
            } else if let Some(id) = o
                .remaining
                .first()
                .filter(|it| it.key == nr.key)
                .and_then(id_of)
            {
                out.failed.push((
                    id,
                    format!(
                        "{nr}: it is larger than an empty cartridge of pool {pool} holds; split it or use larger cartridges"
                    ),
                ));
                rest.retain(|r| *r != id);
            }
        }
        match &o.stopped_by {
            // Stopped from outside (cancel, shutdown, a lost lease): the rest is not at fault.
            Some(SessionError::Cancelled | SessionError::Fenced(_)) => {}
            // A drive, medium or catalogue fault: every object left counts an attempt.
            Some(e) => {
                warn!(drive, %barcode, error = %e, written = out.done.len(), "write batch stopped early; the rest waits out a backoff");
                let why = e.to_string();
                out.retry.extend(rest.iter().map(|id| (*id, why.clone())));
                if e.is_drive_failure() {
                    out.drive_failure = Some(why);
                }
            }
            // Early warning before anything became durable: the object at the front did not
            // fit on this cartridge. It counts an attempt, so an object too large for any
            // cartridge fails after a bounded number of them instead of marking every
            // cartridge full in turn.
            None if o.cartridge_full && o.written.is_empty() && o.no_room.is_none() => {
                if let Some(first) = rest.first() {
                    out.retry.push((
                        *first,
                        format!(
                            "cartridge {barcode} reached early warning before the object was durable on it"
                        ),
                    ));
                }
            }
            // Early warning after some objects: the rest goes to the next cartridge.
            None => {}
        }
        info!(drive, %barcode, written = out.done.len(), failed = out.failed.len(), of = requests.len(), "write batch");
        Ok(out)
    }

    async fn read_batch(
        &self,
        drive: &str,
        barcode: &str,
        requests: &[TapeRequest],
        fence: &Fence,
        cancel: &CancellationToken,
        progress: &ProgressFn,
    ) -> Result<BatchOutcome> {
        let index = Self::drive_index(drive)?;
        // Cartridge tasks (verify, label, rebuild) and recall reads share the mount; `reads`
        // keeps the position in `requests` of each recall item, and its parsed detail.
        let mut tasks: Vec<(usize, CartridgeTask)> = Vec::new();
        let mut items = Vec::with_capacity(requests.len());
        let mut reads: Vec<(usize, ReadDetail)> = Vec::with_capacity(requests.len());
        let mut out = BatchOutcome::default();
        for (i, r) in requests.iter().enumerate() {
            match CartridgeTask::of(r) {
                Ok(Some(t)) => {
                    tasks.push((i, t));
                    continue;
                }
                Ok(None) => {}
                // A request this worker cannot read fails alone, not its batch.
                Err(e) => {
                    out.failed.push((r.id, e.to_string()));
                    continue;
                }
            }
            let d: ReadDetail = match request_detail::parse(r) {
                Ok(d) => d,
                Err(e) => {
                    out.failed.push((r.id, e.to_string()));
                    continue;
                }
            };
            items.push(RecallItem {
                key: r.object_key.clone(),
                container_first_block: d.container_first_block,
                record_size: d.record_size,
                offset: d.offset,
                length: d.length,
                sha256: d.sha256,
                dest: d.dest.clone(),
                root: d.root.clone(),
                meta: d.meta,
                overwrite: d.overwrite,
                confine: d.confine.clone(),
            });
            reads.push((i, d));
        }
        let held = self.service.acquire_on(index, barcode).await?;
        let cancel = engine_cancel(cancel);
        if !tasks.is_empty() {
            let tasks = tasks.iter().map(|(i, t)| (&requests[*i], t)).collect();
            let ran = self.run_tasks(&held, tasks, fence, &cancel, &mut out).await;
            if let Ok(true) = ran {
                // Not the cartridge the catalogue knows: nothing is read from it. Its recall
                // reads go back to the queue, where the re-route pass sends them to other
                // copies (it is broken now).
                out.retry.extend(reads.iter().map(|(i, _)| {
                    (
                        requests[*i].id,
                        format!("cartridge {barcode} failed its label check"),
                    )
                }));
                return Ok(out);
            }
            if let Err(e) = ran {
                if matches!(e, session::SessionError::Device(_)) {
                    self.service.eject(held).await;
                }
                // What the tasks settled stands; the rest of the batch counts an attempt.
                let why = e.to_string();
                let settled: HashSet<i64> = out
                    .done
                    .iter()
                    .chain(out.failed.iter().map(|f| &f.0))
                    .chain(out.retry.iter().map(|f| &f.0))
                    .copied()
                    .collect();
                // A cancel or a lost lease is no fault of the requests: they go back as they
                // were.
                if !matches!(e, SessionError::Cancelled | SessionError::Fenced(_)) {
                    out.retry.extend(
                        requests
                            .iter()
                            .filter(|r| !settled.contains(&r.id))
                            .map(|r| (r.id, why.clone())),
                    );
                }
                if e.is_drive_failure() {
                    out.drive_failure = Some(why);
                }
                return Ok(out);
            }
        }
        if items.is_empty() {
            return Ok(out);
        }
        let ids: Vec<i64> = reads.iter().map(|(i, _)| requests[*i].id).collect();
        let p = session_progress(progress, move |i| ids.get(i).copied());
        let opts = recall_options(self.service.session_config(), OrderPolicy::Auto);
        let rep = match recall_session(&held.drive, &held.mount.barcode, items, &opts, &cancel, p)
            .await
        {
            Ok(r) => r,
            Err(e) => {
                if matches!(e, session::SessionError::Device(_)) {
                    self.service.eject(held).await;
                }
                if out.done.is_empty() && out.failed.is_empty() && out.retry.is_empty() {
                    return Err(e.into());
                }
                // The tasks' outcomes stand; the recall reads count an attempt, unless a
                // cancel stopped them (they go back to the queue as they were).
                if !matches!(e, SessionError::Cancelled) {
                    let why = e.to_string();
                    out.retry
                        .extend(reads.iter().map(|(i, _)| (requests[*i].id, why.clone())));
                    if e.is_drive_failure() {
                        out.drive_failure = Some(why);
                    }
                }
                return Ok(out);
            }
        };
        drop(held);
        out.drive_time.add(&rep.summary);
        if rep.results.iter().any(|r| r.outcome.is_ok()) {
            // When it was last read, for `reel cartridge ls|show`; the reads stand without it.
            if let Err(e) = self.service.catalogue().note_read(barcode).await {
                warn!(%barcode, error = %e, "cannot record when the cartridge was last read");
            }
        }
        // The session's drive time goes into its job's result once, on the first request it
        // read (see `cartridge_task::job_result`).
        let mut timing = Some(json!({
            "first_byte_s": rep.first_byte_s,
            "read_s": rep.summary.drive_s(),
        }));
        for res in rep.results {
            let Some((i, detail)) = reads.get(res.index) else {
                continue;
            };
            let r = &requests[*i];
            match res.outcome {
                Ok(_) => {
                    // Read from another copy after a bad one: the job's result names the bad
                    // copies, for the operator to verify or repack their cartridges. Most
                    // objects carry neither that nor the timing: nothing is built for them.
                    let bad = &detail.bad_copies;
                    if timing.is_some() || !bad.is_empty() {
                        let mut result = timing.take().unwrap_or_else(|| json!({}));
                        if !bad.is_empty() {
                            result["key"] = json!(r.object_key);
                            result["bad_copies"] = json!(bad);
                        }
                        out.results.push((r.id, result));
                    }
                    out.done.push(r.id)
                }
                Err(RecallFailure::Destination(m)) => out.failed.push((r.id, m)),
                Err(RecallFailure::NotAttempted(_)) => {}
                Err(RecallFailure::BadCopy(m)) => {
                    warn!(key = %r.object_key, %barcode, reason = %m, "bad copy; trying another");
                    let bad = {
                        let mut b = self.bad.lock().unwrap_or_else(|e| e.into_inner());
                        let set = b.entry(r.id).or_default();
                        set.insert(barcode.to_string());
                        set.clone()
                    };
                    match self
                        .best_copy(&r.object_key, detail.generation, &bad)
                        .await?
                    {
                        Some(c) => {
                            let mut bad: Vec<String> = bad.iter().cloned().collect();
                            bad.sort();
                            let d = request_detail::to_json(&detail.from_other_copy(&c, bad));
                            out.reroute.push((r.id, c.barcode.clone(), None, d));
                        }
                        // No other copy: read this one again after the backoff (a new
                        // LOCATE, often a fresh mount), a bounded number of times, before the
                        // object is called lost. A medium error is often passing.
                        None => out.retry.push((
                            r.id,
                            format!(
                                "no other readable copy (bad: {}): {m}",
                                bad.iter().cloned().collect::<Vec<_>>().join(", ")
                            ),
                        )),
                    }
                }
            }
        }
        Ok(out)
    }
}
