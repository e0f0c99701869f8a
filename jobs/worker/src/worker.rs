//! `reel worker`: the process that runs jobs and drives on one host.
//!
//! A worker start gets a unique name (prefix, host, pid, random), so a restart never reuses a
//! name whose jobs apalis still thinks are running (apalis re-enqueues a dead worker's tasks only
//! for other names, or after the orphan window: research anchors-jobqueue.md §2.1). It runs one
//! apalis worker per job kind, a maintenance loop (heartbeat, reconcile, prune, orphaned claims)
//! and one drive loop per configured drive, and stops gracefully on SIGTERM/SIGINT: the current
//! step finishes (executors watch the cancel token at record boundaries), running jobs go back
//! to the queue from their checkpoint, leases are released.
//!
//! The tape part is the [`TapeExecutor`] trait, implemented by the engine's sessions.

use std::collections::{BTreeMap, HashSet};
use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll};
use std::time::Duration;

use apalis::prelude::{
    BackendExt, BoxDynError, Data, PollSnapshot, PollStrategy, TaskId, WorkerBuilder,
    WorkerBuilderExt,
};
use futures::Stream;
use tokio_util::sync::CancellationToken;
use tracing::Instrument;

use crate::drive_metrics;
use crate::reroute::Reroute;
use crate::scheduler::{self, Decision, DriveState, MountTarget, Mounted, Policy};
use reel_engine::catalogue::Cartridge;
use reel_queue::apalis_bridge::ApalisDb;
use reel_queue::config::Config;
use reel_queue::db::now_ms;
use reel_queue::drive_state::{AutoDown, DriveStates};
use reel_queue::drives::{BoardMount, DriveBoard};
use reel_queue::error::{JobsError, Result};
use reel_queue::inventory::{ElementView, Inventory};
use reel_queue::job::{ArchiveJob, IntakeJob, JobKind, JobSpec, RebuildJob, RecallJob, VerifyJob};
use reel_queue::lease::{Fence, LeaseManager, drive_resource, job_resource};
use reel_queue::requests::{ClaimLimit, NewTapeRequest, TapeRequest, TapeRequests};
use reel_queue::store::{FailOutcome, JobRecord, JobStore, Progress, RunningJob, StartOutcome};
use reel_queue::{JobQueue, Ticket};

/// Progress inside a batch: called with the ids of requests whose work is finished (a recalled
/// file in place, archived objects durable) as it happens, before the batch ends and settles
/// them, and the tape block near which the drive is when the executor knows it. The drive loop
/// turns it into each job's progress and the drive's ([`reel_queue::drive_progress`]) while
/// the batch runs.
pub type ProgressFn = Arc<dyn Fn(&[i64], Option<u64>) + Send + Sync>;

/// What an executor did with a batch of requests. Requests in no list (the batch stopped early
/// for a reason not theirs: a cancel, shutdown, early warning) go back to the queue as they
/// were.
#[derive(Debug, Clone, Default)]
pub struct BatchOutcome {
    /// Requests finished and durable (writes) or delivered and checked (reads).
    pub done: Vec<i64>,
    /// Requests that failed for good, with the reason.
    pub failed: Vec<(i64, String)>,
    /// Requests whose attempt failed in a way another may mend, with the reason: each counts
    /// an attempt and waits out the backoff (or fails once its attempts are spent).
    pub retry: Vec<(i64, String)>,
    /// Reads whose copy was bad, sent to another copy: (request, barcode, pool, new detail).
    /// They go back to the queue on the other cartridge.
    pub reroute: Vec<(i64, String, Option<String>, serde_json::Value)>,
    /// What done requests found, recorded on them for their job's result (cartridge tasks:
    /// see [`reel_queue::cartridge_task`]).
    pub results: Vec<(i64, serde_json::Value)>,
    /// The drive itself failed during the batch (the reason): once the batch is settled, the
    /// drive loop takes the drive out of service, so no further batch is charged for it.
    pub drive_failure: Option<String>,
    /// The drive's own time in the batch, as the plugin reported it (for the mount's
    /// end-of-session summary).
    pub drive_time: reel_engine::session::SessionSummary,
}

/// The tape side of reel, implemented by the engine's sessions (write, recall, verify, intake,
/// rebuild). Jobs are planned into tape requests; drive loops run them in batches, one
/// cartridge mounted at a time. Every method that touches a tape gets the drive's [`Fence`]
/// (call [`Fence::check`] before each write) and a cancel token (stop at the next record
/// boundary), and reports progress through the callback.
pub trait TapeExecutor: Send + Sync + 'static {
    /// Drives this executor can use on this host (names as the plugin reports them).
    fn drives(&self) -> impl Future<Output = Result<Vec<String>>> + Send;

    /// Expand an archive job into write requests (one per object, per copy/pool).
    fn plan_archive(
        &self,
        job_id: &str,
        job: &ArchiveJob,
    ) -> impl Future<Output = Result<Vec<NewTapeRequest>>> + Send;

    /// Expand a recall job into read requests (one per object copy chosen, by cartridge).
    fn plan_recall(
        &self,
        job_id: &str,
        job: &RecallJob,
    ) -> impl Future<Output = Result<Vec<NewTapeRequest>>> + Send;

    /// Load a cartridge for `target` into `drive` (for writes the executor picks a writable
    /// cartridge of the pool). Returns the barcode loaded.
    fn mount(
        &self,
        drive: &str,
        target: &MountTarget,
        fence: &Fence,
        cancel: &CancellationToken,
    ) -> impl Future<Output = Result<String>> + Send;

    /// Unload whatever is in `drive`.
    fn unmount(&self, drive: &str, fence: &Fence) -> impl Future<Output = Result<()>> + Send;

    /// Recover what `drive` holds through the changer, even from a drive that no longer
    /// answers (`reel drive reset`); says what was done. Default: nothing to recover.
    fn reset_drive(&self, drive: &str) -> impl Future<Output = Result<String>> + Send {
        let said = format!("drive {drive}: this executor has no changer; nothing was moved");
        async move { Ok(said) }
    }

    /// Whether `drive` asked for cleaning (TapeAlert 20 or 21 at an unmount) and has not been
    /// cleaned since. Default: never.
    fn wants_cleaning(&self, drive: &str) -> bool {
        let _ = drive;
        false
    }

    /// Clean `drive` with a cleaning cartridge of the library, after unloading what it holds;
    /// says what was done. Default: nothing to clean with.
    fn clean_drive(&self, drive: &str) -> impl Future<Output = Result<String>> + Send {
        let said = format!("drive {drive}: this executor has no changer; nothing was cleaned");
        async move { Ok(said) }
    }

    /// What this executor has mounted in `drive`: the barcode, and the cartridge's pool if it
    /// has one. A drive loop that (re)acquires its drive's lease starts from this, so the
    /// scheduler and the drive board see the cartridge. Default: nothing.
    fn holding(
        &self,
        _drive: &str,
    ) -> impl Future<Output = Result<Option<(String, Option<String>)>>> + Send {
        async { Ok(None) }
    }

    /// Cartridges loaded in drives of the library that this host does not use: another host
    /// sharing the library is using them, so this host does not mount them now (the scheduler
    /// treats them as mounted elsewhere). Asked only before mounting a cartridge for reading.
    /// Default: none (this host is the library's only user).
    fn held_elsewhere(&self) -> impl Future<Output = Result<Vec<String>>> + Send {
        async { Ok(Vec::new()) }
    }

    /// Of `barcodes` (cartridges with queued reads), those no drive may mount now
    /// ([`crate::reroute::unmountable`]). Default: none.
    fn unmountable_among(
        &self,
        barcodes: Vec<String>,
    ) -> impl Future<Output = Result<Vec<Cartridge>>> + Send {
        async move {
            let _ = barcodes;
            Ok(Vec::new())
        }
    }

    /// Where the queued read `r` of the unmountable `cart` goes instead, or `None` to leave
    /// it ([`crate::reroute::decide`]). Default: it fails with the cartridge's state.
    fn reroute(
        &self,
        r: &TapeRequest,
        cart: &Cartridge,
    ) -> impl Future<Output = Result<Option<Reroute>>> + Send {
        let fail = Reroute::Fail {
            id: r.id,
            reason: crate::reroute::why(cart),
        };
        async move { Ok(Some(fail)) }
    }

    /// The name of the library this executor drives (as in drive names), for requests made
    /// for one library. Default: none (an executor without a changer).
    fn library_name(&self) -> impl Future<Output = Result<Option<String>>> + Send {
        async { Ok(None) }
    }

    /// Cartridges that are exported: their queued reads wait for them to be imported, and no
    /// drive mounts them ([`crate::vault`]). Default: none.
    fn exported(&self) -> impl Future<Output = Result<HashSet<String>>> + Send {
        async { Ok(HashSet::new()) }
    }

    /// Move exported cartridges still inside the library to mail slots
    /// ([`crate::vault::send_out_exported`]). Default: nothing to move.
    fn send_out_exported(&self) -> impl Future<Output = Result<()>> + Send {
        async { Ok(()) }
    }

    /// Take cartridges in from the mail slots (`only`, or all when empty) for an import
    /// request by `by` ([`crate::vault::take_in`]).
    fn take_in(
        &self,
        only: &[String],
        by: &str,
    ) -> impl Future<Output = Result<crate::vault::TakenIn>> + Send {
        let _ = (only, by);
        async {
            Ok(crate::vault::TakenIn {
                lines: vec!["this executor has no changer; nothing was moved".to_string()],
                to_check: Vec::new(),
            })
        }
    }

    /// The library's elements as its changer reports them now, for the dashboard
    /// ([`reel_queue::Inventory`]). Default: none (an executor without a changer).
    fn inventory(&self) -> impl Future<Output = Result<Vec<ElementView>>> + Send {
        async { Ok(Vec::new()) }
    }

    /// Write a batch of requests at EOD of the mounted cartridge, then what `more` gives while
    /// the session lasts (every request it claims is in its [`crate::more_writes::MoreWrites::taken`], which the
    /// drive loop settles with the batch).
    fn write_batch(
        &self,
        drive: &str,
        requests: &[TapeRequest],
        more: Option<crate::more_writes::MoreWrites>,
        fence: &Fence,
        cancel: &CancellationToken,
        progress: &ProgressFn,
    ) -> impl Future<Output = Result<BatchOutcome>> + Send;

    /// Read a batch of requests from the mounted cartridge (in the order the executor chooses).
    fn read_batch(
        &self,
        drive: &str,
        barcode: &str,
        requests: &[TapeRequest],
        fence: &Fence,
        cancel: &CancellationToken,
        progress: &ProgressFn,
    ) -> impl Future<Output = Result<BatchOutcome>> + Send;

    /// Plan a verify job: one read request per container to read back
    /// ([`reel_queue::cartridge_task::CartridgeTask::Verify`]).
    fn plan_verify(
        &self,
        job_id: &str,
        job: &VerifyJob,
    ) -> impl Future<Output = Result<Vec<NewTapeRequest>>> + Send;

    /// Plan an intake job: one read request per cartridge to label
    /// ([`reel_queue::cartridge_task::CartridgeTask::Label`]).
    fn plan_intake(
        &self,
        job_id: &str,
        job: &IntakeJob,
    ) -> impl Future<Output = Result<Vec<NewTapeRequest>>> + Send;

    /// Plan a rebuild job: one read request per cartridge to read
    /// ([`reel_queue::cartridge_task::CartridgeTask::Rebuild`]).
    fn plan_rebuild(
        &self,
        job_id: &str,
        job: &RebuildJob,
    ) -> impl Future<Output = Result<Vec<NewTapeRequest>>> + Send;

    /// Plan a reclaim job: one read request per cartridge to relabel
    /// ([`reel_queue::cartridge_task::CartridgeTask::Reclaim`]); a cartridge that holds
    /// something to keep is refused for good. Default: refused (no catalogue to check).
    fn plan_reclaim(
        &self,
        _job_id: &str,
        _job: &reel_queue::job::ReclaimJob,
    ) -> impl Future<Output = Result<Vec<NewTapeRequest>>> + Send {
        async {
            Err(JobsError::Internal(
                "this worker's executor cannot reclaim cartridges".into(),
            ))
        }
    }

    /// The catalogue a delete job marks objects in (`crate::delete`); `None` (the default) for
    /// an executor without one, whose delete jobs fail saying so.
    fn object_catalogue(&self) -> Option<&reel_engine::catalogue::Catalogue> {
        None
    }

    /// Wait, at most `within`, until what the drives' checks caught is recorded (a stopping
    /// worker calls it last, so its last catches are kept). Nothing to wait for by default.
    fn settle_catches(&self, within: Duration) -> impl Future<Output = ()> + Send {
        let _ = within;
        async {}
    }
}

/// A worker name unique to this start: `PREFIX-HOST-PID-RANDOM`.
pub fn unique_name(prefix: &str) -> String {
    let host = nix::unistd::gethostname()
        .ok()
        .and_then(|h| h.into_string().ok())
        .filter(|h| !h.is_empty())
        .unwrap_or_else(|| "host".into());
    let suffix: u32 = rand::random();
    format!("{prefix}-{host}-{}-{suffix:08x}", std::process::id())
}

/// A poll strategy that keeps one timer armed at all times (plus an optional notification
/// stream). apalis's `IntervalStrategy` replaces its fired `Delay` without polling the new
/// one, so no wake-up is registered until something else polls the worker (apalis-core 1.0.0
/// `src/backend/ext/poll_strategy/strategies/interval.rs`, `poll_drive`); that matches the
/// measured stalls of `poll_with_interval` in the research.
pub struct SteadyPoll<S> {
    interval: Duration,
    sleep: Pin<Box<tokio::time::Sleep>>,
    stream: Option<S>,
}

impl<S> SteadyPoll<S> {
    /// Wake every `interval`, and whenever `stream` yields (e.g. PostgreSQL LISTEN/NOTIFY).
    pub fn new(interval: Duration, stream: Option<S>) -> Self {
        SteadyPoll {
            interval,
            sleep: Box::pin(tokio::time::sleep(interval)),
            stream,
        }
    }
}

impl<S: Stream + Unpin> PollStrategy for SteadyPoll<S> {
    fn poll_drive(&mut self, cx: &mut Context<'_>, _: &PollSnapshot) -> Poll<Option<()>> {
        let mut fired = false;
        if let Some(s) = self.stream.as_mut() {
            loop {
                match Pin::new(&mut *s).poll_next(cx) {
                    Poll::Ready(Some(_)) => fired = true,
                    Poll::Ready(None) => {
                        self.stream = None;
                        break;
                    }
                    Poll::Pending => break,
                }
            }
        }
        // Re-arm until the timer is pending, so a waker is always registered.
        while self.sleep.as_mut().poll(cx).is_ready() {
            fired = true;
            let next = tokio::time::Instant::now() + self.interval;
            self.sleep.as_mut().reset(next);
        }
        if fired {
            Poll::Ready(Some(()))
        } else {
            Poll::Pending
        }
    }
}

/// Shared state of one worker process.
pub struct Runtime<E> {
    /// This start's name.
    pub name: String,
    /// Effective config.
    pub config: Config,
    /// Submit/retry.
    pub queue: JobQueue,
    /// Tape requests.
    pub requests: TapeRequests,
    /// Leases.
    pub leases: LeaseManager,
    /// What every leased drive holds, on every host.
    pub board: DriveBoard,
    /// Which drives are in service, for every host.
    pub drive_states: DriveStates,
    /// What each drive's running batch has done so far, for every host.
    pub drive_progress: reel_queue::drive_progress::DriveProgress,
    /// Operators' requests to recover a drive's cartridge (`reel drive reset`).
    pub resets: reel_queue::drive_request::DriveResets,
    /// Operators' requests to clean a drive (`reel drive clean`).
    pub cleans: reel_queue::drive_request::DriveResets,
    /// Operators' requests to take cartridges in (`reel cartridge import`).
    pub imports: reel_queue::cartridge_import::CartridgeImports,
    /// Exported cartridges whose reads the maintenance pass has already offered to other
    /// copies, with the state change it saw (what stayed waits for the cartridge; the pass
    /// looks again when the state changes, and every [`FULL_REROUTE_EVERY`] passes).
    exported_seen: std::sync::Mutex<std::collections::HashMap<String, i64>>,
    /// The library's elements as this worker last saw them, for the dashboard.
    pub inventory: Inventory,
    /// The tape side.
    pub executor: Arc<E>,
    /// Cancelled on SIGTERM/SIGINT.
    pub shutdown: CancellationToken,
}

impl<E> std::fmt::Debug for Runtime<E> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Runtime")
            .field("name", &self.name)
            .finish_non_exhaustive()
    }
}

/// How a job attempt ended.
enum Ending {
    Done(serde_json::Value),
    /// Tape requests are queued; the job finishes when they do (see `finalize_waiting`).
    Waiting,
    Cancelled,
    Interrupted,
    Failed(JobsError),
}

impl<E: TapeExecutor> Runtime<E> {
    /// Build a runtime with a fresh unique name.
    pub fn new(
        config: Config,
        queue: JobQueue,
        executor: Arc<E>,
        shutdown: CancellationToken,
    ) -> Arc<Runtime<E>> {
        let db = queue.store().db().clone();
        Arc::new(Runtime {
            name: unique_name(&config.worker.name_prefix),
            requests: TapeRequests::new(db.clone()),
            board: DriveBoard::new(db.clone()),
            drive_states: DriveStates::new(db.clone()),
            drive_progress: reel_queue::drive_progress::DriveProgress::new(db.clone()),
            resets: reel_queue::drive_request::DriveResets::new(db.clone()),
            cleans: reel_queue::drive_request::DriveResets::cleans(db.clone()),
            imports: reel_queue::cartridge_import::CartridgeImports::new(db.clone()),
            exported_seen: Default::default(),
            inventory: Inventory::new(db.clone()),
            leases: LeaseManager::new(db),
            config,
            queue,
            executor,
            shutdown,
        })
    }

    fn store(&self) -> &JobStore {
        self.queue.store()
    }

    fn poll(&self) -> Duration {
        Duration::from_millis(self.config.worker.poll_interval_ms)
    }

    /// How long a lease taken or renewed now lasts (`[worker] lease_ms`).
    pub(crate) fn lease_ttl(&self) -> Duration {
        Duration::from_millis(self.config.worker.lease_ms)
    }

    /// Run one delivered ticket to its end. Never returns an error to apalis: failures are
    /// recorded in reel's table and retried with a persisted backoff by a new ticket.
    pub async fn run_ticket(self: &Arc<Self>, ticket: Ticket, task_id: String) {
        let id = ticket.job_id.clone();
        if let Err(e) = self.run_ticket_inner(&ticket, &task_id).await {
            tracing::error!(job = %id, error = %e, "job bookkeeping failed; the job is re-delivered after the lease window");
        }
    }

    async fn run_ticket_inner(self: &Arc<Self>, ticket: &Ticket, task_id: &str) -> Result<()> {
        // One runner per job: the job lease. A duplicate delivery (apalis re-enqueued the task
        // while its runner is alive) waits for the runner to finish or its lease to lapse.
        let Some(job_fence) = self.acquire_job_lease(&ticket.job_id, task_id).await? else {
            return Ok(());
        };
        let out = self.run_leased(ticket, task_id, &job_fence).await;
        if let Err(e) = self.leases.release(&job_fence).await {
            tracing::warn!(job = %ticket.job_id, error = %e, "cannot release the job lease; it lapses by itself");
        }
        out
    }

    /// Take the job lease, waiting at most twice the lease time for a live holder; `None` when
    /// the job is final meanwhile or the other runner is still alive after that.
    ///
    /// The holder is this worker *and this delivery* (task id plus a random tag): a lease is
    /// re-entrant for its holder, so were the holder only the worker name, a duplicate ticket
    /// delivered to the same worker would re-take the running attempt's lease, bump its epoch
    /// and fence it out (seen under load: the attempt then failed with "lease lost").
    async fn acquire_job_lease(&self, id: &str, task_id: &str) -> Result<Option<Fence>> {
        let ttl = self.lease_ttl();
        let deadline = tokio::time::Instant::now() + 2 * ttl;
        let tag: u32 = rand::random();
        let holder = format!("{}/{task_id}/{tag:08x}", self.name);
        loop {
            // A ticket delivered while the worker shuts down is not started: the job stays
            // queued and its ticket is pushed again by the next worker's upkeep.
            if self.shutdown.is_cancelled() {
                tracing::debug!(job = %id, "shutting down; ticket left for the next worker");
                return Ok(None);
            }
            match self.leases.acquire(&job_resource(id), &holder, ttl).await {
                Ok(f) => return Ok(Some(f)),
                Err(JobsError::LeaseBusy { holder, .. }) => {
                    let final_now = self
                        .store()
                        .get(id)
                        .await?
                        .is_none_or(|r| r.state.is_final());
                    // (Shutdown is checked at the top of the loop.)
                    if final_now || tokio::time::Instant::now() >= deadline {
                        tracing::debug!(job = %id, %holder, "job is run by another worker; ticket dropped");
                        return Ok(None);
                    }
                    idle(self, Duration::from_millis(self.config.worker.heartbeat_ms)).await;
                }
                Err(e) => return Err(e),
            }
        }
    }

    async fn run_leased(
        self: &Arc<Self>,
        ticket: &Ticket,
        task_id: &str,
        job_fence: &Fence,
    ) -> Result<()> {
        // apalis keeps run_at in whole seconds, so a delayed ticket can arrive up to a second
        // before the job's `not_before` (ms): wait it out rather than drop the ticket.
        let mut tries = 0;
        let record = loop {
            match self
                .store()
                .start(&ticket.job_id, &self.name, task_id)
                .await?
            {
                StartOutcome::Run { record } => break *record,
                StartOutcome::NotYet { not_before_ms } if tries < 3 => {
                    tries += 1;
                    let wait =
                        Duration::from_millis((not_before_ms - now_ms()).clamp(1, 5_000) as u64);
                    idle(self, wait).await;
                }
                StartOutcome::NotYet { .. } => {
                    // Still early: unlink the ticket; maintenance re-pushes with the right delay.
                    self.store()
                        .unlink_apalis_task(&ticket.job_id, task_id)
                        .await?;
                    return Ok(());
                }
                other => {
                    tracing::debug!(job = %ticket.job_id, outcome = ?other, "ticket not run");
                    return Ok(());
                }
            }
        };
        let span = tracing::info_span!("job", id = %record.id, kind = %record.kind, attempt = record.attempts);
        // The attempt runs inside the job's span (`instrument`, never an `enter` guard held
        // across an await: that corrupts the subscriber's span registry when the task moves
        // between threads, seen as a panic in tracing-subscriber under load).
        async {
            tracing::info!(worker = %self.name, "job started");
            let cancel = self.shutdown.child_token();
            let user_cancel = CancellationToken::new();
            // Both end with this attempt, however it ends (a dropped attempt must not keep renewing
            // its job lease: the job would then never run again).
            let watcher =
                AbortOnDrop(self.spawn_cancel_watch(&record.id, cancel.clone(), user_cancel.clone()));
            let beat = AbortOnDrop(self.spawn_lease_heartbeat(job_fence.clone(), cancel.clone()));
            let ending = self.execute(&record, job_fence, &cancel, &user_cancel).await;
            drop(beat);
            drop(watcher);
            match ending {
                Ending::Done(v) => {
                    self.store().finish(&record.id, &v).await?;
                    tracing::info!("job done");
                }
                Ending::Waiting => tracing::info!("tape requests queued; the drives take it from here"),
                Ending::Cancelled => {
                    self.requests.cancel_job(&record.id).await?;
                    self.store().mark_cancelled(&record.id).await?;
                    tracing::info!("job cancelled");
                }
                Ending::Interrupted => {
                    // Shutdown: back to the queue at once, resuming from its checkpoint elsewhere.
                    self.store().requeue_interrupted(&record.id).await?;
                    let rec = self.store().require(&record.id).await?;
                    self.queue.push(&rec, Duration::ZERO).await?;
                    tracing::info!("job handed back to the queue (shutdown)");
                }
                Ending::Failed(e) => {
                    let retryable = !e.is_permanent();
                    // A lost database connection says nothing about the job: the pool
                    // reconnects, and the attempt does not count against its limit.
                    let counted = e.store_fault()
                        != Some(reel_engine::catalogue::StoreFault::Disconnected);
                    let delay = self.queue.backoff().delay(record.attempts);
                    match self
                        .store()
                        .fail_attempt(&record.id, &e.to_string(), retryable, counted, delay)
                        .await?
                    {
                        FailOutcome::Retry { delay, .. } => {
                            let rec = self.store().require(&record.id).await?;
                            self.queue.push(&rec, delay).await?;
                            tracing::warn!(error = %e, retry_in_ms = delay.as_millis() as u64, "job attempt failed; retry scheduled");
                        }
                        FailOutcome::Failed => tracing::error!(error = %e, "job failed"),
                        FailOutcome::Cancelled => tracing::info!("job cancelled after a failure"),
                    }
                }
            }
            Ok(())
        }
        .instrument(span)
        .await
    }

    /// Poll `cancel_requested` and trip the tokens when a user cancels.
    fn spawn_cancel_watch(
        &self,
        id: &str,
        cancel: CancellationToken,
        user: CancellationToken,
    ) -> tokio::task::JoinHandle<()> {
        let store = self.store().clone();
        let id = id.to_string();
        let every = self.poll();
        tokio::spawn(async move {
            loop {
                tokio::select! {
                    _ = cancel.cancelled() => return,
                    _ = tokio::time::sleep(every) => {}
                }
                if let Ok(true) = store.cancel_requested(&id).await {
                    user.cancel();
                    cancel.cancel();
                    return;
                }
            }
        })
    }

    /// The job's tape requests, as its kind's planner makes them, each with the job's
    /// priority (a queue's priority is its highest request's: the scheduler serves it first).
    async fn plan(&self, rec: &JobRecord) -> Result<Vec<NewTapeRequest>> {
        let (ex, id) = (&self.executor, &rec.id);
        let mut reqs = match &rec.spec {
            JobSpec::Archive(a) => ex.plan_archive(id, a).await,
            JobSpec::Recall(r) => ex.plan_recall(id, r).await,
            JobSpec::Verify(v) => ex.plan_verify(id, v).await,
            JobSpec::Intake(i) => ex.plan_intake(id, i).await,
            JobSpec::Rebuild(r) => ex.plan_rebuild(id, r).await,
            // Not a tape job: `execute` runs it before planning.
            JobSpec::Delete(_) | JobSpec::Repack(_) => Ok(Vec::new()),
            JobSpec::Reclaim(r) => ex.plan_reclaim(id, r).await,
        }?;
        for r in &mut reqs {
            r.priority = rec.priority;
        }
        Ok(reqs)
    }

    async fn execute(
        self: &Arc<Self>,
        rec: &JobRecord,
        fence: &Fence,
        cancel: &CancellationToken,
        user: &CancellationToken,
    ) -> Ending {
        // A delete touches no tape: it runs here, in bounded batches, to its end.
        if let JobSpec::Delete(job) = &rec.spec {
            return match crate::delete::run(self, rec, job, cancel).await {
                Ok(v) => Ending::Done(v),
                Err(_) if user.is_cancelled() => Ending::Cancelled,
                Err(_) if cancel.is_cancelled() => Ending::Interrupted,
                Err(JobsError::Cancelled(_)) => Ending::Cancelled,
                Err(e) => Ending::Failed(e),
            };
        }
        // A repack runs here too: it keeps a bounded window of tape requests in flight and
        // moves each object on as its requests end (`repack.rs`).
        if let JobSpec::Repack(job) = &rec.spec {
            return match crate::repack::run(self, rec, job, fence, cancel).await {
                Ok(v) => Ending::Done(v),
                Err(_) if user.is_cancelled() => Ending::Cancelled,
                Err(_) if cancel.is_cancelled() => Ending::Interrupted,
                Err(JobsError::Cancelled(_)) => Ending::Cancelled,
                Err(e) => Ending::Failed(e),
            };
        }
        let planned = self.plan_once(rec, cancel, self.plan(rec)).await;
        // Nothing to do on tape (no new cartridge to label, say): done now, not at the next
        // heartbeat.
        let result = planned.map(|n| {
            (n == 0).then(|| {
                reel_queue::cartridge_task::job_result(rec.kind, &Default::default(), Vec::new())
            })
        });
        match result {
            Ok(Some(v)) => Ending::Done(v),
            Ok(None) => Ending::Waiting,
            Err(_) if user.is_cancelled() => Ending::Cancelled,
            Err(_) if cancel.is_cancelled() => Ending::Interrupted,
            Err(JobsError::Cancelled(_)) => Ending::Cancelled,
            Err(e) => Ending::Failed(e),
        }
    }

    /// Plan the job's tape requests once; returns how many there are. The checkpoint records
    /// it, so a re-delivered attempt does not plan twice. The apalis slot is then free: a job
    /// waiting for tape holds no worker concurrency; [`Runtime::finalize_waiting`] ends it.
    async fn plan_once(
        &self,
        rec: &JobRecord,
        cancel: &CancellationToken,
        plan: impl Future<Output = Result<Vec<NewTapeRequest>>>,
    ) -> Result<usize> {
        let planned = rec
            .checkpoint
            .as_ref()
            .and_then(|c| c.get("planned"))
            .and_then(|v| v.as_bool())
            .unwrap_or(false);
        if !planned {
            // A cancel or a shutdown stops the wait for a plan (a long walk of a source tree).
            let reqs = tokio::select! {
                r = plan => r?,
                _ = cancel.cancelled() => {
                    return Err(JobsError::Cancelled(rec.id.clone()));
                }
            };
            let bytes: u64 = reqs.iter().map(|r| r.bytes).sum();
            let checkpoint = serde_json::json!({"planned": true, "requests": reqs.len()});
            if !self.requests.add_plan(&rec.id, &reqs, &checkpoint).await? {
                // Another runner planned it while this one waited (frozen past its lease):
                // the drives have that plan; this runner's ends here.
                tracing::warn!(job = %rec.id, "planned meanwhile by another runner; this plan is dropped");
                return Ok(reqs.len());
            }
            self.store()
                .set_progress(
                    &rec.id,
                    Progress {
                        objects_done: 0,
                        objects_total: reqs.len() as u64,
                        bytes_done: 0,
                        bytes_total: bytes,
                    },
                )
                .await?;
            return Ok(reqs.len());
        }
        // Planned by an earlier attempt: the drives have its requests (a checkpoint without a
        // count, from an older reel, had some).
        Ok(rec
            .checkpoint
            .as_ref()
            .and_then(|c| c.get("requests"))
            .and_then(|v| v.as_u64())
            .map_or(1, |n| n as usize))
    }

    /// A running job with no plan yet is its runner's alone, while the runner holds the job
    /// lease. One whose lease has had no live holder for a lease term lost its runner without
    /// a record of how the attempt ended (its last bookkeeping failed: the database connection
    /// was lost); apalis took the ticket as handled, so nothing would run the job again.
    /// Queued again here, with a new ticket.
    async fn requeue_orphan(&self, rec: &RunningJob) -> Result<()> {
        let gone_before = now_ms() - self.config.worker.lease_ms as i64;
        if self
            .store()
            .requeue_orphan(&rec.id, &job_resource(&rec.id), gone_before)
            .await?
        {
            let r = self.store().require(&rec.id).await?;
            self.queue.push(&r, Duration::ZERO).await?;
            tracing::warn!(job = %rec.id, "job's runner is gone before it planned the job (its lease lapsed); queued again");
        }
        Ok(())
    }

    /// Bring every running job up to date with its tape requests: progress, cancel (drop its
    /// queued requests), done when all are done, failed when any failed. Runs on every worker
    /// (idempotent), after each drive batch and on each heartbeat.
    pub async fn finalize_waiting(&self) -> Result<()> {
        for rec in self.store().running(10_000).await? {
            self.finalize_record(&rec).await?;
        }
        Ok(())
    }

    async fn finalize_record(&self, rec: &RunningJob) -> Result<()> {
        if !rec.planned {
            return self.requeue_orphan(rec).await;
        }
        if rec.cancel_requested {
            self.requests.cancel_job(&rec.id).await?;
            self.store().mark_cancelled(&rec.id).await?;
            return Ok(());
        }
        let c = self.requests.counts(&rec.id).await?;
        let mut p = Progress {
            objects_done: c.done,
            objects_total: c.total,
            bytes_done: c.bytes_done,
            bytes_total: c.bytes_total,
        };
        // While a batch holds some of its requests, the drive loop counts what it finished
        // ahead of the table (see `batch_progress`): never step back from that.
        if c.claimed > 0 {
            p.objects_done = p.objects_done.max(rec.progress.objects_done);
            p.bytes_done = p.bytes_done.max(rec.progress.bytes_done);
        }
        if p != rec.progress {
            self.store().set_progress(&rec.id, p).await?;
        }
        if c.done + c.failed < c.total {
            return Ok(());
        }
        let unit = reel_queue::cartridge_task::unit(rec.kind);
        if c.failed > 0 {
            let first = self.requests.failures(&rec.id, 3).await?;
            let reasons: Vec<String> = first.iter().map(|(k, why)| format!("{k}: {why}")).collect();
            let msg = format!(
                "{} of {} {unit} failed ({}{}); `reel jobs retry {}` queues the failed ones again",
                c.failed,
                c.total,
                reasons.join("; "),
                if c.failed > first.len() as u64 {
                    "; …"
                } else {
                    ""
                },
                rec.id
            );
            self.store()
                .fail_attempt(&rec.id, &msg, false, true, Duration::ZERO)
                .await?;
        } else {
            // Archives record no request results; a verify's are its label checks' (its
            // container read-backs record none).
            let results = match rec.kind {
                JobKind::Intake
                | JobKind::Rebuild
                | JobKind::Recall
                | JobKind::Verify
                | JobKind::Reclaim => self.requests.results(&rec.id).await?,
                JobKind::Archive | JobKind::Delete | JobKind::Repack => Vec::new(),
            };
            self.store()
                .finish(
                    &rec.id,
                    &reel_queue::cartridge_task::job_result(rec.kind, &c, results),
                )
                .await?;
        }
        Ok(())
    }

    fn spawn_lease_heartbeat(
        &self,
        fence: Fence,
        cancel: CancellationToken,
    ) -> tokio::task::JoinHandle<()> {
        let leases = self.leases.clone();
        let ttl = self.lease_ttl();
        let every = Duration::from_millis(self.config.worker.heartbeat_ms);
        tokio::spawn(async move {
            loop {
                tokio::time::sleep(every).await;
                if let Err(e) = leases.heartbeat(&fence, ttl).await {
                    tracing::error!(resource = %fence.resource, error = %e, "lease lost; stopping work on it");
                    cancel.cancel();
                    return;
                }
            }
        })
    }
}

/// A spawned task aborted when this is dropped.
struct AbortOnDrop(tokio::task::JoinHandle<()>);

impl Drop for AbortOnDrop {
    fn drop(&mut self) {
        self.0.abort();
    }
}

/// The task that publishes a running batch's progress. Stopped, not aborted, once the batch
/// returns: a write it has begun finishes before the drive's row is cleared, so no late
/// report lands after the clear. Dropped without [`Publisher::stop`], it is aborted.
struct Publisher {
    stop: CancellationToken,
    task: AbortOnDrop,
}

impl Publisher {
    /// Ask the task to stop at its next pause and wait until it has.
    async fn stop(mut self) {
        self.stop.cancel();
        let _ = (&mut self.task.0).await;
    }
}

/// The apalis handler: hand the ticket to the runtime. Always `Ok`, so apalis never retries on
/// its own (its storage retry has no delay); reel's bookkeeping decides about retries.
///
/// The attempt runs in a task of its own: an apalis worker that dies (a failed heartbeat
/// query ends its fetch loop) drops the handler futures it holds, and an attempt dropped in
/// the middle would leave its job `running` for good. Spawned, the attempt finishes and
/// records its outcome in reel's tables; only apalis's acknowledgement is lost, and a
/// re-delivered ticket finds the job final or its lease taken.
async fn handle_ticket<E: TapeExecutor>(
    ticket: Ticket,
    task_id: TaskId,
    rt: Data<Arc<Runtime<E>>>,
) -> std::result::Result<(), BoxDynError> {
    let rt = rt.0.clone();
    let task_id = task_id.to_string();
    let attempt = tokio::spawn(async move { rt.run_ticket(ticket, task_id).await });
    if let Err(e) = attempt.await {
        tracing::error!(error = %e, "job attempt task failed; the job is re-delivered after the lease window");
    }
    Ok(())
}

/// Start the apalis worker of one job kind, supervised: if apalis ends it (a failed heartbeat
/// query marks its backend dead and ends the fetch loop), it is started again under a new
/// generation name; the dead generation's tasks are re-delivered after the lease window.
/// Stops when the runtime's shutdown token fires.
pub fn spawn_kind_worker<E: TapeExecutor>(
    rt: Arc<Runtime<E>>,
    kind: JobKind,
) -> tokio::task::JoinHandle<()> {
    tokio::spawn(async move {
        let mut generation = 0u32;
        while !rt.shutdown.is_cancelled() {
            let name = if generation == 0 {
                format!("{}.{}", rt.name, kind)
            } else {
                format!("{}.{}.{}", rt.name, kind, generation)
            };
            match run_kind_worker(&rt, kind, &name).await {
                Ok(()) if rt.shutdown.is_cancelled() => break,
                Ok(()) => tracing::warn!(worker = %name, "apalis worker ended; restarting"),
                Err(e) => {
                    tracing::error!(worker = %name, error = %e, "apalis worker failed; restarting")
                }
            }
            generation += 1;
            idle(&rt, Duration::from_millis(rt.config.worker.heartbeat_ms)).await;
        }
    })
}

async fn run_kind_worker<E: TapeExecutor>(
    rt: &Arc<Runtime<E>>,
    kind: JobKind,
    name: &str,
) -> std::result::Result<(), apalis::prelude::WorkerError> {
    let w = rt.config.worker.clone();
    let poll = Duration::from_millis(w.poll_interval_ms);
    let stop = rt.shutdown.clone();
    let signal = async move {
        stop.cancelled().await;
        Ok::<(), std::io::Error>(())
    };
    match rt.queue.apalis().clone() {
        ApalisDb::Sqlite(pool) => {
            // SQLite's update hook only sees writes from this process; submissions come from
            // `reel` CLI processes, so an idle worker polls (every poll_interval_ms <= 1 s).
            let backend = ApalisDb::sqlite_storage(&pool, kind, &w)
                .poll_with_strategy(SteadyPoll::<futures::stream::Pending<()>>::new(poll, None));
            WorkerBuilder::new(name.to_string())
                .backend(backend)
                .concurrency(w.concurrency)
                .data(rt.clone())
                .build(handle_ticket::<E>)
                .run_until(signal)
                .await
        }
        ApalisDb::Postgres(pool) => {
            // LISTEN/NOTIFY wakes at once for jobs due now; the timer catches delayed retries
            // (the insert trigger only notifies when run_at <= now()).
            let notify = apalis_postgres::Pubsub::new(pool.clone(), kind.queue());
            let backend = ApalisDb::postgres_storage(&pool, kind, &w)
                .poll_with_strategy(SteadyPoll::new(poll, Some(notify)));
            WorkerBuilder::new(name.to_string())
                .backend(backend)
                .concurrency(w.concurrency)
                .data(rt.clone())
                .build(handle_ticket::<E>)
                .run_until(signal)
                .await
        }
    }
}

/// Run a whole worker process until `rt.shutdown` fires: apalis workers for every job kind,
/// maintenance, and a drive loop per drive. On shutdown, waits for running steps to end
/// (bounded by the lease time), then releases every lease this start holds.
pub async fn run<E: TapeExecutor>(rt: Arc<Runtime<E>>) -> Result<()> {
    tracing::info!(worker = %rt.name, backend = rt.queue.apalis().backend(), "worker starting");
    rt.queue.reconcile().await?;
    rt.requests.requeue_orphaned_claims().await?;
    rt.requests.release_due().await?;
    let mut tasks: Vec<tokio::task::JoinHandle<()>> = JobKind::ALL
        .into_iter()
        .map(|k| spawn_kind_worker(rt.clone(), k))
        .collect();
    tasks.push(tokio::spawn(maintenance(rt.clone())));
    tasks.push(tokio::spawn(inventory_loop(rt.clone())));
    // The executor knows this host's drives ([library] drives restricts them) and names them
    // for leases.
    let mut drives = rt.executor.drives().await?;
    if drives.is_empty() {
        drives = rt.config.library.drives.clone();
    }
    let drive_loops: Vec<tokio::task::JoinHandle<()>> = drives
        .into_iter()
        .map(|d| tokio::spawn(drive_loop(rt.clone(), d)))
        .collect();
    rt.shutdown.cancelled().await;
    tracing::info!(worker = %rt.name, "shutting down: finishing current steps");
    // One deadline for the job and maintenance tasks. A task still running at the deadline is
    // aborted, as a crash would stop it, before the leases go: left running, it could take a
    // job lease again after `release_all` (a ticket apalis re-delivered meanwhile) and keep it
    // past the exit (seen once in CI: `cancel_and_shutdown_sqlite` found the lease still held).
    let lease = Duration::from_millis(rt.config.worker.lease_ms);
    let deadline = tokio::time::Instant::now() + lease;
    for t in tasks {
        stop_by(t, deadline, "a task").await;
    }
    // The drive loops end their step at a record boundary and unload what they hold; a real
    // drive's rewind and unload take minutes, and a loop aborted in the middle leaves its
    // cartridge half unloaded while the plugin call runs on (seen in CI: the next worker in
    // the same process found the library changing under it). Their drive leases are kept
    // alive by their heartbeats meanwhile, so they get the longer bound.
    let deadline = tokio::time::Instant::now() + lease.max(DRIVE_STOP);
    for t in drive_loops {
        stop_by(t, deadline, "a drive loop").await;
    }
    rt.executor.settle_catches(CATCHES_SETTLE).await;
    let released = rt.leases.release_all(&rt.name).await?;
    tracing::info!(worker = %rt.name, released, "worker stopped");
    Ok(())
}

/// How long a graceful shutdown waits for the integrity catches its drives made to reach the
/// catalogue.
const CATCHES_SETTLE: Duration = Duration::from_secs(10);

/// How long a graceful shutdown waits for the drive loops to finish their step and unload
/// (at least the lease time): an LTO rewind from end of tape and its unload take about three
/// minutes. A second signal stops the process at once.
pub const DRIVE_STOP: Duration = Duration::from_secs(300);

/// Wait for `t` until `deadline`; abort it there, as a crash would stop it.
async fn stop_by(mut t: tokio::task::JoinHandle<()>, deadline: tokio::time::Instant, what: &str) {
    if tokio::time::timeout_at(deadline, &mut t).await.is_err() {
        tracing::warn!(
            "{what} did not stop in time; stopped as a crash would stop it, its work is \
             re-delivered after the lease window"
        );
        t.abort();
        let _ = t.await;
    }
}

/// Exit status of a process that a second SIGINT stopped during its graceful shutdown: 128 + 2,
/// as a shell reports a process killed by SIGINT.
pub const EXIT_FORCED_SIGINT: i32 = 130;
/// Exit status of a process that a second SIGTERM stopped during its graceful shutdown: 128 +
/// 15, as a shell reports a process killed by SIGTERM.
pub const EXIT_FORCED_SIGTERM: i32 = 143;

/// Install the SIGTERM and SIGINT handlers now, and return the future that serves them (spawn
/// it; abort it once the graceful shutdown is over):
///
/// - the first SIGTERM or SIGINT cancels `token`, the graceful shutdown;
/// - another one once `token` is cancelled (by a signal or otherwise) exits the process at once
///   with [`EXIT_FORCED_SIGINT`] (130) or [`EXIT_FORCED_SIGTERM`] (143), as a crash would stop
///   it: no destructors, the leases it holds lapse after their TTL and its jobs are re-delivered.
///
/// Installed before the caller says it is running, so a signal sent as soon as it says so is
/// never met by the default action. From then on SIGINT and SIGTERM never kill the process by
/// their default action, so the token must be cancelled whatever else goes wrong: it is
/// cancelled before anything is logged.
pub fn cancel_on_signals(
    token: CancellationToken,
) -> Result<impl std::future::Future<Output = ()> + Send + 'static> {
    use tokio::signal::unix::{SignalKind, signal};
    let io = |name: &str| {
        let path = name.into();
        move |source| JobsError::Io {
            doing: "installing the signal handler for",
            path,
            source,
        }
    };
    let mut term = signal(SignalKind::terminate()).map_err(io("SIGTERM"))?;
    let mut int = signal(SignalKind::interrupt()).map_err(io("SIGINT"))?;
    Ok(async move {
        let first = tokio::select! {
            _ = term.recv() => Some("SIGTERM"),
            _ = int.recv() => Some("SIGINT"),
            _ = token.cancelled() => None,
        };
        token.cancel();
        if let Some(sig) = first {
            tracing::info!(
                signal = sig,
                "shutting down gracefully; send SIGINT or SIGTERM again to stop at once"
            );
        }
        let (sig, status) = tokio::select! {
            _ = term.recv() => ("SIGTERM", EXIT_FORCED_SIGTERM),
            _ = int.recv() => ("SIGINT", EXIT_FORCED_SIGINT),
        };
        tracing::warn!(
            signal = sig,
            status,
            "signal during the graceful shutdown: exiting at once; leases lapse after their TTL"
        );
        std::process::exit(status);
    })
}

/// Do an operator's pending `reel drive reset` of `drive` (which is down, so no batch runs on
/// it), and record what was done; the changer's view is recorded again at once.
async fn reset_if_asked<E: TapeExecutor>(rt: &Runtime<E>, drive: &str) {
    let req = match rt.resets.pending(drive).await {
        Ok(Some(r)) => r,
        Ok(None) => return,
        Err(e) => {
            tracing::warn!(drive = %drive, error = %e, "cannot read whether a reset was asked for");
            return;
        }
    };
    let result = match rt.executor.reset_drive(drive).await {
        Ok(done) => done,
        Err(e) => format!("not done: {e}"),
    };
    tracing::warn!(drive = %drive, by = %req.requested_by, %result, "drive reset");
    if let Err(e) = rt.resets.finish(drive, req.requested_ms, &result).await {
        tracing::warn!(drive = %drive, error = %e, "cannot record the drive reset; it is done again at the next poll");
    }
    if let Ok(elements) = rt.executor.inventory().await
        && let Some(first) = elements.first()
    {
        let library = first.library.clone();
        let _ = rt.inventory.publish(&rt.name, &library, &elements).await;
    }
}

/// Clean `drive` if it asked for it (at an unmount) or an operator did (`reel drive clean`):
/// what it holds leaves it first (and the board), then a cleaning cartridge goes in and back.
/// The operator's request is read from the store only when `ask_store`.
async fn clean_if_wanted<E: TapeExecutor>(
    rt: &Runtime<E>,
    drive: &str,
    fence: &Fence,
    mounted: &mut Option<Held>,
    ask_store: bool,
) {
    let asked = if ask_store {
        match rt.cleans.pending(drive).await {
            Ok(r) => r,
            Err(e) => {
                tracing::warn!(drive = %drive, error = %e, "cannot read whether a cleaning was asked for");
                None
            }
        }
    } else {
        None
    };
    if asked.is_none() && !rt.executor.wants_cleaning(drive) {
        return;
    }
    if let Some(h) = mounted.take() {
        h.ended(drive, Duration::ZERO, "cleaning");
        let _ = rt.board.publish(fence, None).await;
    }
    drive_metrics::state(drive, "cleaning");
    let result = match rt.executor.clean_drive(drive).await {
        Ok(done) => done,
        Err(e) => format!("not done: {e}"),
    };
    tracing::info!(drive = %drive, by = asked.as_ref().map_or("the drive", |r| r.requested_by.as_str()),
        %result, "drive cleaning");
    if let Some(req) = asked
        && let Err(e) = rt.cleans.finish(drive, req.requested_ms, &result).await
    {
        tracing::warn!(drive = %drive, error = %e, "cannot record the cleaning; it is done again at the next poll");
    }
    drive_metrics::state(drive, "empty");
}

/// How often a worker records the library's elements for the dashboard.
pub const INVENTORY_EVERY: Duration = Duration::from_secs(5);

/// Record what the changer reports now; a failure is logged and tried again next time.
/// Record what the changer reports, every [`INVENTORY_EVERY`], when it changed (and at least
/// every minute, so the page can tell a live view from a stale one), in a task of its own: a
/// changer busy with a robot move delays only this.
async fn inventory_loop<E: TapeExecutor>(rt: Arc<Runtime<E>>) {
    let mut last: Option<(Vec<ElementView>, tokio::time::Instant)> = None;
    loop {
        let read = tokio::time::timeout(Duration::from_secs(60), rt.executor.inventory()).await;
        match read {
            Ok(Ok(elements)) if !elements.is_empty() => {
                let fresh = last.as_ref().is_some_and(|(e, at)| {
                    *e == elements && at.elapsed() < Duration::from_secs(60)
                });
                if !fresh {
                    let library = elements[0].library.clone();
                    match rt.inventory.publish(&rt.name, &library, &elements).await {
                        Ok(()) => last = Some((elements, tokio::time::Instant::now())),
                        Err(e) => {
                            tracing::debug!(error = %e, "cannot record the library's elements")
                        }
                    }
                }
            }
            Ok(Ok(_)) => {}
            Ok(Err(e)) => {
                tracing::debug!(error = %e, "cannot read the library's elements for the dashboard")
            }
            Err(_) => tracing::debug!("the changer did not report its elements within 60 s"),
        }
        tokio::select! {
            _ = rt.shutdown.cancelled() => return,
            _ = tokio::time::sleep(INVENTORY_EVERY) => {}
        }
    }
}

/// Periodic upkeep: re-push lost tickets, free claims of dead leases, prune old jobs.
/// Queued reads of cartridges no drive may mount now (disabled, broken, exported) go to another
/// copy or fail with the cartridge's state and reason ([`crate::reroute`]).
///
/// The reads of an exported cartridge that no other copy serves wait for it to come back; they
/// are looked at again when its state changes and every [`FULL_REROUTE_EVERY`] passes (`full`),
/// not at every heartbeat (a large recall waiting for a vaulted cartridge would cost a copy
/// lookup per object per heartbeat).
async fn reroute_unmountable<E: TapeExecutor>(rt: &Runtime<E>, full: bool) -> Result<()> {
    let barcodes = rt.requests.queued_read_barcodes().await?;
    if barcodes.is_empty() {
        return Ok(());
    }
    let out = rt.executor.unmountable_among(barcodes).await?;
    // Only cartridges with waiting reads are remembered.
    if let Ok(mut m) = rt.exported_seen.lock() {
        m.retain(|b, _| out.iter().any(|c| &c.barcode == b));
    }
    for cart in out {
        if cart.state == reel_engine::catalogue::CartridgeState::Exported {
            let seen = rt
                .exported_seen
                .lock()
                .map(|mut m| m.insert(cart.barcode.clone(), cart.state_unix))
                .unwrap_or(None);
            if !full && seen == Some(cart.state_unix) {
                continue;
            }
        }
        reroute_reads_off(rt, &cart).await?;
    }
    Ok(())
}

/// Every how many maintenance passes exported cartridges still inside are sent out.
pub const SEND_OUT_EVERY: u64 = 5;

/// Every how many maintenance passes the waiting reads of exported cartridges are offered to
/// other copies again (a copy may have been written since).
pub const FULL_REROUTE_EVERY: u64 = 60;

/// If `barcode` cannot be mounted for recalls now, move its queued recall reads off it
/// ([`reroute_unmountable`] for one cartridge, run by a drive before it mounts or claims
/// there). Returns whether it was unmountable.
async fn off_unmountable<E: TapeExecutor>(rt: &Runtime<E>, barcode: &str) -> Result<bool> {
    let out = rt
        .executor
        .unmountable_among(vec![barcode.to_string()])
        .await?;
    for cart in &out {
        reroute_reads_off(rt, cart).await?;
    }
    Ok(!out.is_empty())
}

async fn reroute_reads_off<E: TapeExecutor>(rt: &Runtime<E>, cart: &Cartridge) -> Result<()> {
    for r in rt.requests.queued_reads_of(&cart.barcode).await? {
        match rt.executor.reroute(&r, cart).await? {
            None => {}
            Some(Reroute::To {
                id,
                barcode,
                detail,
            }) if rt.requests.reroute(id, &barcode, None, &detail).await? => {
                tracing::info!(request = id, key = %r.object_key, from = %cart.barcode,
                    to = %barcode, state = %cart.state, "read re-routed to another copy");
            }
            Some(Reroute::Fail { id, reason }) if rt.requests.fail_queued(id, &reason).await? => {
                tracing::warn!(request = id, key = %r.object_key, %reason,
                    "read failed: its cartridge cannot be mounted");
            }
            // Claimed or changed meanwhile: left as it is.
            Some(_) => {}
        }
    }
    Ok(())
}

/// Vaulting ([`crate::vault`]): exported cartridges still inside go out to the mail slots,
/// and import requests for this library are carried out, one after the other.
///
/// The sending out asks the changer for its inventory, so it runs every
/// [`SEND_OUT_EVERY`] passes, not at each one: an exported cartridge that waits for a free
/// mail slot, or that an operator took out by hand, would otherwise cost an inventory per
/// heartbeat for as long as it is out.
async fn vault_pass<E: TapeExecutor>(rt: &Runtime<E>, send_out: bool) -> Result<()> {
    if send_out {
        rt.executor.send_out_exported().await?;
    }
    let Some(library) = rt.executor.library_name().await? else {
        return Ok(());
    };
    while let Some(req) = rt.imports.take(&library, &rt.name).await? {
        let lines = match rt.executor.take_in(&req.barcodes, &req.requested_by).await {
            Ok(t) => {
                let mut lines = t.lines;
                for b in t.to_check {
                    lines.push(check_label_later(rt, &b).await);
                }
                lines
            }
            Err(e) => vec![format!("the import stopped: {e}; ask again")],
        };
        tracing::info!(request = req.id, by = %req.requested_by, result = %lines.join("; "),
            "cartridge import done");
        rt.imports.finish(req.id, &lines.join("\n")).await?;
    }
    Ok(())
}

/// Submit the label check of a cartridge back from a vault (a `reel verify --label` job, at
/// the priority of user work, not of background verifies); the line the import reports for
/// it. Losing it loses no safety: the cartridge's label stays unchecked in the catalogue until
/// read, and the first write to it reads it first.
async fn check_label_later<E: TapeExecutor>(rt: &Runtime<E>, barcode: &str) -> String {
    let spec = JobSpec::Verify(VerifyJob {
        target: reel_queue::job::VerifyTarget::Label(barcode.to_string()),
    });
    match rt
        .queue
        .submit(spec, Some(reel_queue::job::DEFAULT_PRIORITY))
        .await
    {
        Ok(job) => format!(
            "{barcode}: its label is checked against the catalogue by job {} (`reel jobs show {}`)",
            job.id, job.id
        ),
        Err(e) => format!(
            "{barcode}: its label check could not be queued ({e}); run `reel verify --label {barcode}`"
        ),
    }
}

async fn maintenance<E: TapeExecutor>(rt: Arc<Runtime<E>>) {
    let every = Duration::from_millis(rt.config.worker.heartbeat_ms);
    let retention = Duration::from_secs(rt.config.worker.retention_hours * 3600);
    let mut ticks: u64 = 0;
    let expire_every = Duration::from_secs(rt.config.lifecycle.expire_every_minutes * 60);
    let mut expired_at: Option<tokio::time::Instant> = None;
    let policy_every = Duration::from_secs(rt.config.repack.every_minutes * 60);
    let mut policy_at: Option<tokio::time::Instant> = None;
    loop {
        tokio::select! {
            _ = rt.shutdown.cancelled() => return,
            _ = tokio::time::sleep(every) => {}
        }
        ticks += 1;
        // What a retention with `expire` no longer keeps goes to the recycle log.
        if !expire_every.is_zero() && expired_at.is_none_or(|t| t.elapsed() >= expire_every) {
            match crate::delete::expire(&rt).await {
                // More due: the next tick goes on.
                Ok((_, true)) => {}
                Ok((_, false)) => expired_at = Some(tokio::time::Instant::now()),
                Err(e) => {
                    tracing::warn!(error = %e, "expiring objects past their retention failed");
                    expired_at = Some(tokio::time::Instant::now());
                }
            }
        }
        // Cartridges a repack left `repacking` when it ended without its runner.
        if ticks % 10 == 1
            && let Err(e) = crate::repack::sweep(&rt).await
        {
            tracing::warn!(error = %e, "giving back cartridges of ended repacks failed");
        }
        // The pools' repack and reclaim policies, when they are on.
        if rt.config.repack.auto
            && !policy_every.is_zero()
            && policy_at.is_none_or(|t| t.elapsed() >= policy_every)
        {
            policy_at = Some(tokio::time::Instant::now());
            if let Err(e) = crate::repack::policy_pass(&rt).await {
                tracing::warn!(error = %e, "the repack policy pass failed");
            }
        }
        if let Err(e) = rt.finalize_waiting().await {
            tracing::warn!(error = %e, "updating waiting jobs failed");
        }
        if let Err(e) = rt.queue.reconcile().await {
            tracing::warn!(error = %e, "reconcile failed");
        }
        if let Err(e) = rt.requests.requeue_orphaned_claims().await {
            tracing::warn!(error = %e, "re-queueing orphaned claims failed");
        }
        if let Err(e) = rt.requests.release_due().await {
            tracing::warn!(error = %e, "queueing requests whose backoff passed failed");
        }
        if let Err(e) = reroute_unmountable(&rt, ticks % FULL_REROUTE_EVERY == 1).await {
            tracing::warn!(error = %e, "re-routing reads of unmountable cartridges failed");
        }
        if let Err(e) = vault_pass(&rt, ticks % SEND_OUT_EVERY == 1).await {
            tracing::warn!(error = %e, "moving cartridges through the mail slots failed");
        }
        // Pruning is cheap but need not run every heartbeat.
        if ticks % 60 == 1 {
            match rt.queue.prune(retention).await {
                Ok((jobs, tasks)) if jobs + tasks > 0 => {
                    tracing::info!(jobs, tasks, "pruned finished jobs")
                }
                Ok(_) => {}
                Err(e) => tracing::warn!(error = %e, "pruning failed"),
            }
        }
    }
}

/// Most requests one drive batch claims.
pub const MAX_BATCH_FILES: u64 = 100_000;

/// How long a drive loop takes no write for a pool after it found no writable cartridge for it
/// (the pool's only cartridge in another drive, or none left): it takes other work meanwhile.
pub const SHORT_POOL_PAUSE: Duration = Duration::from_secs(15);

/// One drive: lease it, ask the scheduler what to do, mount, claim a batch, run it, repeat.
pub async fn drive_loop<E: TapeExecutor>(rt: Arc<Runtime<E>>, drive: String) {
    let policy =
        Policy::from_config(&rt.config.scheduler).with_background_cap(rt.config.repack.max_drives);
    let poll = rt.poll();
    // One batch is what one session does between two mounts decisions: up to a group-commit
    // barrier's worth of bytes (a write session then pays one synchronous filemark and, under
    // FULL verify, one sequential read-back).
    let limit = ClaimLimit {
        max_files: MAX_BATCH_FILES,
        max_bytes: rt.config.archive.barrier_bytes.max(1),
    };
    let mut mounted: Option<Held> = None;
    // Pools this drive found short of a writable cartridge, and until when it leaves them be.
    let mut short_pools: BTreeMap<String, tokio::time::Instant> = BTreeMap::new();
    // The lease, its token and its heartbeat (stopped before the lease is released, so it
    // never renews, or cries "lost" over, a lease let go on purpose).
    let mut lease: Option<(Fence, CancellationToken, AbortOnDrop)> = None;
    // Drive failures in a row (see below).
    let mut failures: u32 = 0;
    // The last step failed: it may have left claims.
    let mut stranded = false;
    // Failures within the window that takes the drive down by itself.
    let mut auto_down = AutoDown::new(
        rt.config.worker.drive_down_failures,
        Duration::from_secs(rt.config.worker.drive_down_window_seconds),
    );
    // The drive was down at the last look (said once, not at every poll).
    let mut was_down = false;
    // While down the loop polls every poll_interval_ms (for a reset); it leaves the board once
    // and says so again only every heartbeat, not at each poll.
    let mut down_published: Option<tokio::time::Instant> = None;
    // When the store was last asked whether an operator wants the drive cleaned.
    let mut clean_checked: Option<tokio::time::Instant> = None;
    while !rt.shutdown.is_cancelled() {
        let (fence, cancel) = match &lease {
            Some((f, c, _)) if !c.is_cancelled() => (f.clone(), c.clone()),
            _ => match rt
                .leases
                .acquire(&drive_resource(&drive), &rt.name, rt.lease_ttl())
                .await
            {
                Ok(f) => {
                    let c = rt.shutdown.child_token();
                    let beat = AbortOnDrop(rt.spawn_lease_heartbeat(f.clone(), c.clone()));
                    // A new lease starts from what the drive holds (a lease lost and taken
                    // again with a cartridge still loaded): the scheduler keeps it or unloads
                    // it, and no other drive tries to mount it meanwhile.
                    mounted = match rt.executor.holding(&drive).await {
                        Ok(h) => h.map(|(barcode, pool)| Held {
                            target: MountTarget::Read {
                                barcode: barcode.clone(),
                            },
                            barcode,
                            pool,
                            since: tokio::time::Instant::now(),
                            since_ms: now_ms(),
                            session: Default::default(),
                        }),
                        Err(e) => {
                            tracing::warn!(drive = %drive, error = %e, "cannot tell what the drive holds");
                            None
                        }
                    };
                    drive_metrics::state(&drive, if mounted.is_some() { "idle" } else { "empty" });
                    let on_board = mounted.as_ref().map(|h| h.on_board(&policy));
                    if let Err(e) = rt.board.publish(&f, on_board.as_ref()).await {
                        tracing::warn!(drive = %drive, error = %e, "cannot publish the drive on the board");
                    }
                    lease = Some((f.clone(), c.clone(), beat));
                    (f, c)
                }
                Err(e) => {
                    tracing::debug!(drive = %drive, error = %e, "drive not available");
                    idle(&rt, poll).await;
                    continue;
                }
            },
        };
        // Whatever a failed step still held goes back to the queue before the next one.
        if stranded {
            match rt.requests.release_claims(&fence).await {
                Ok(0) => {}
                Ok(n) => {
                    tracing::warn!(drive = %drive, requests = n, "a failed step's claims are back in the queue");
                }
                Err(e) => {
                    tracing::warn!(drive = %drive, error = %e, "cannot return a failed step's claims yet");
                    idle(&rt, Duration::from_millis(rt.config.worker.heartbeat_ms)).await;
                    continue;
                }
            }
        }
        // A drive taken down (by an operator, or by this loop after repeated failures) ends
        // here, after the step it was in: what it holds is unloaded, it leaves the board, and
        // it takes no mount until it is brought up. Its queued work is the other drives'.
        match rt.drive_states.get(&drive).await {
            Ok(s) if !s.is_up() => {
                if !was_down {
                    tracing::warn!(drive = %drive, reason = %s.reason, by = %s.by,
                        "the drive is down: no new mounts until `reel drive up`");
                    was_down = true;
                }
                if let Some(h) = mounted.take() {
                    let t = tokio::time::Instant::now();
                    match rt.executor.unmount(&drive, &fence).await {
                        Ok(()) => h.ended(&drive, t.elapsed(), "drive taken down"),
                        Err(e) => {
                            h.ended(&drive, Duration::ZERO, "drive taken down, unload failed");
                            tracing::warn!(drive = %drive, error = %e,
                                "cannot unload the drive taken down; its cartridge stays in it");
                        }
                    }
                }
                reset_if_asked(&rt, &drive).await;
                clean_if_wanted(&rt, &drive, &fence, &mut mounted, true).await;
                drive_metrics::state(&drive, "down");
                let heartbeat = Duration::from_millis(rt.config.worker.heartbeat_ms);
                if down_published.is_none_or(|at| at.elapsed() >= heartbeat)
                    && rt.board.publish(&fence, None).await.is_ok()
                {
                    down_published = Some(tokio::time::Instant::now());
                }
                idle(
                    &rt,
                    Duration::from_millis(rt.config.worker.poll_interval_ms.max(100)),
                )
                .await;
                continue;
            }
            Ok(_) if was_down => {
                tracing::info!(drive = %drive, "the drive is up again");
                was_down = false;
                down_published = None;
                auto_down.reset();
                failures = 0;
                drive_metrics::state(&drive, "empty");
            }
            Ok(_) => {}
            Err(e) => {
                tracing::warn!(drive = %drive, error = %e, "cannot read whether the drive is in service");
                idle(&rt, Duration::from_millis(rt.config.worker.heartbeat_ms)).await;
                continue;
            }
        }
        // Cleaning between batches: asked for by the drive (in memory, every turn) or by an
        // operator (in the store, at most once a heartbeat).
        let ask_store = clean_checked.is_none_or(|at: tokio::time::Instant| {
            at.elapsed() >= Duration::from_millis(rt.config.worker.heartbeat_ms)
        });
        if ask_store {
            clean_checked = Some(tokio::time::Instant::now());
        }
        clean_if_wanted(&rt, &drive, &fence, &mut mounted, ask_store).await;
        let step = drive_step(
            &rt,
            &drive,
            &policy,
            limit,
            (&fence, &cancel),
            &mut mounted,
            &mut short_pools,
        )
        .await;
        stranded = step.is_err();
        match step {
            // A drive that holds a cartridge answers again: its next failure starts the pause
            // afresh. An idle step proves nothing of a drive out of service.
            Ok(()) if mounted.is_some() => failures = 0,
            Ok(()) => {}
            // The drive itself failed: out of service, so it neither loops the robot nor takes
            // work another drive can do. It is tried again after the job backoff, growing
            // with each failure in a row ([worker] backoff_base_ms .. backoff_max_ms).
            Err(e) if e.is_drive_failure() => {
                failures += 1;
                if let Some(h) = mounted.take() {
                    h.ended(&drive, Duration::ZERO, "drive failed");
                }
                drive_metrics::state(&drive, "failed");
                let _ = rt.board.publish(&fence, None).await;
                if auto_down.failed(std::time::Instant::now()) {
                    let reason = format!(
                        "taken down by its worker after {} drive failures within {} s; the last: {e}",
                        auto_down.threshold(),
                        auto_down.window().as_secs()
                    );
                    match rt
                        .drive_states
                        .down_automatically(&drive, &reason, &rt.name)
                        .await
                    {
                        // The next turn of the loop finds it down.
                        Ok(_) => {
                            tracing::error!(drive = %drive, %reason,
                                "the drive is taken down; service it, then `reel drive up`");
                            continue;
                        }
                        Err(e) => {
                            tracing::warn!(drive = %drive, error = %e, "cannot record the drive as down");
                        }
                    }
                }
                let pause = rt.queue.backoff().delay(failures);
                tracing::error!(drive = %drive, error = %e, retry_in_ms = pause.as_millis() as u64,
                    "the drive has failed; out of service until it answers again (service it, \
                     then it is tried again by itself)");
                idle(&rt, pause).await;
                // Tried again from here; a drive still failing says so at its next step.
                drive_metrics::state(&drive, "empty");
            }
            Err(e) => {
                tracing::warn!(drive = %drive, error = %e, "drive step failed");
                idle(&rt, Duration::from_millis(rt.config.worker.heartbeat_ms)).await;
            }
        }
    }
    if let Some((fence, cancel, beat)) = lease {
        if let Some(h) = mounted.take() {
            let t = tokio::time::Instant::now();
            match rt.executor.unmount(&drive, &fence).await {
                Ok(()) => {
                    h.ended(&drive, t.elapsed(), "shutdown");
                    drive_metrics::state(&drive, "empty");
                }
                Err(e) => {
                    h.ended(&drive, Duration::ZERO, "shutdown, unload failed");
                    tracing::warn!(drive = %drive, error = %e, "unmount at shutdown failed");
                }
            }
        }
        let _ = rt.board.publish(&fence, None).await;
        drop(beat);
        cancel.cancel();
        let _ = rt.leases.release(&fence).await;
    }
}

async fn idle<E>(rt: &Runtime<E>, d: Duration) {
    tokio::select! {
        _ = rt.shutdown.cancelled() => {}
        _ = tokio::time::sleep(d) => {}
    }
}

/// What one drive loop holds.
#[derive(Debug, Clone)]
struct Held {
    barcode: String,
    target: MountTarget,
    pool: Option<String>,
    since: tokio::time::Instant,
    since_ms: i64,
    /// What this mount did so far, for its end-of-session summary.
    session: drive_metrics::MountSession,
}

impl Held {
    /// The mount is over: its summary to the log and the metrics.
    fn ended(&self, drive: &str, unload: Duration, how: &str) {
        let mode = match self.target {
            MountTarget::Read { .. } => "read",
            MountTarget::Write { .. } => "write",
        };
        drive_metrics::session_ended(
            drive,
            &self.barcode,
            mode,
            &self.session,
            // Held since the mount began: its time plus the time since it ended.
            self.since.elapsed() + self.session.mount,
            unload,
            how,
        );
    }

    fn on_board(&self, policy: &Policy) -> BoardMount {
        BoardMount {
            target: self.target.clone(),
            barcode: Some(self.barcode.clone()),
            pool: self.pool.clone(),
            group: policy.group_of(self.pool.as_deref()).map(String::from),
            since_ms: self.since_ms,
        }
    }
}

/// The other drives of the board (every host) as the scheduler sees them: not this loop's
/// to assign, but what they hold counts.
async fn other_drives<E: TapeExecutor>(rt: &Runtime<E>, drive: &str) -> Result<Vec<DriveState>> {
    let now = now_ms();
    Ok(rt
        .board
        .live()
        .await?
        .into_iter()
        .filter(|e| e.drive != drive)
        .map(|e| DriveState {
            mounted: e.mount.map(|m| Mounted {
                barcode: match (&m.barcode, &m.target) {
                    (Some(b), _) => b.clone(),
                    // Being mounted for reading: the cartridge is spoken for already.
                    (None, MountTarget::Read { barcode }) => barcode.clone(),
                    (None, MountTarget::Write { pool }) => format!("(mounting for {pool})"),
                },
                target: m.target,
                pool: m.pool,
                mounted_for: Duration::from_millis((now - m.since_ms).max(0) as u64),
                // Asked of the catalogue where it matters (`mark_takes_writes`).
                takes_writes: true,
                repack_source: false,
            }),
            name: e.drive,
            unavailable: true,
        })
        .collect())
}

/// Whether each mounted cartridge takes writes (is `active`), asked only where the scheduler
/// reads it: this loop's own drive, and other loops' idle ones (a write may be left to them),
/// when their pool has a write waiting. A full or `repacking` cartridge does not make its
/// drive the pool's writer ([`Mounted::takes_writes`]). One look-up per such drive a step,
/// and none while no write waits.
async fn mark_takes_writes<E: TapeExecutor>(
    rt: &Runtime<E>,
    queues: &[crate::scheduler::QueueSummary],
    drives: &mut [DriveState],
) -> Result<()> {
    let Some(cat) = rt.executor.object_catalogue() else {
        return Ok(());
    };
    // Background work queued: another loop's idle drive reading may hold a repack's source.
    let background = queues.iter().any(crate::scheduler::is_background);
    for d in drives.iter_mut() {
        let mine = !d.unavailable;
        let Some(m) = d.mounted.as_mut() else {
            continue;
        };
        let idle = queues.iter().all(|q| q.target != m.target || q.files == 0);
        let written = queues.iter().any(
            |q| matches!(&q.target, MountTarget::Write { pool } if m.pool.as_ref() == Some(pool)),
        );
        // A source is mounted for reading; only those are asked about (one catalogue look-up
        // per idle reader while a repack runs, not one per drive).
        let holder = !mine && idle && background && matches!(m.target, MountTarget::Read { .. });
        if (((mine || idle) && written) || holder)
            && let Some(c) = cat.cartridge(&m.barcode).await?
        {
            use reel_engine::catalogue::CartridgeState;
            m.takes_writes = c.state == CartridgeState::Active;
            m.repack_source = holder && c.state == CartridgeState::Repacking;
        }
    }
    Ok(())
}

async fn drive_step<E: TapeExecutor>(
    rt: &Arc<Runtime<E>>,
    drive: &str,
    policy: &Policy,
    limit: ClaimLimit,
    (fence, cancel): (&Fence, &CancellationToken),
    mounted: &mut Option<Held>,
    short_pools: &mut BTreeMap<String, tokio::time::Instant>,
) -> Result<()> {
    // The other drives before the queues: a drive settles its requests before it unloads, so
    // a cartridge the board shows free has no done work left in the queues read after it.
    // (Read the other way round, a drive that finished a cartridge's last read and unloaded it
    // between the two reads looked free with work queued, and this drive mounted it again
    // for nothing.)
    let others = other_drives(rt, drive).await?;
    let mut queues = rt.requests.summaries().await?;
    let now = tokio::time::Instant::now();
    short_pools.retain(|_, until| *until > now);
    // Exported cartridges' reads wait for them to come back: no drive mounts one.
    let exported = if mounted.is_some()
        || queues
            .iter()
            .any(|q| matches!(q.target, MountTarget::Read { .. }))
    {
        rt.executor.exported().await?
    } else {
        HashSet::new()
    };
    queues.retain(|q| match &q.target {
        MountTarget::Write { pool } => !short_pools.contains_key(pool),
        MountTarget::Read { barcode } => !exported.contains(barcode),
    });
    // An exported cartridge in this drive leaves it at once, to go out through a mail slot.
    if let Some(h) = mounted.as_ref()
        && exported.contains(&h.barcode)
    {
        tracing::info!(drive, barcode = %h.barcode, "unloading an exported cartridge");
        let t = tokio::time::Instant::now();
        rt.executor.unmount(drive, fence).await?;
        if let Some(h) = mounted.take() {
            h.ended(drive, t.elapsed(), "exported");
        }
        drive_metrics::state(drive, "empty");
        rt.board.publish(fence, None).await?;
        return Ok(());
    }
    let state = DriveState {
        name: drive.to_string(),
        mounted: mounted.as_ref().map(|h| Mounted {
            barcode: h.barcode.clone(),
            target: h.target.clone(),
            pool: h.pool.clone(),
            mounted_for: h.since.elapsed(),
            takes_writes: true,
            repack_source: false,
        }),
        unavailable: false,
    };
    // Decide for this drive with every other drive's mount counted (group caps, a cartridge
    // in one drive, extra drives for a pool); see `queue::drives`.
    let mut drives = vec![state];
    drives.extend(others);
    mark_takes_writes(rt, &queues, &mut drives).await?;
    let mut decision = scheduler::decide(policy, &queues, &drives)
        .into_iter()
        .next();
    // Hosts sharing one library: a cartridge another host has loaded is mounted there, not
    // here, even when that host is not on this board (another queue database, or its drive
    // lease lapsed). Decide again with it counted as mounted in an (unavailable) drive of its
    // own, so this drive takes other work or waits, and that host keeps the cartridge.
    if let Some(Decision::Mount {
        target: MountTarget::Read { barcode },
        ..
    }) = &decision
    {
        let elsewhere = rt.executor.held_elsewhere().await?;
        if elsewhere.contains(barcode) {
            tracing::debug!(drive, %barcode, "cartridge is loaded in another host's drive; not mounting it here now");
            drives.extend(elsewhere.into_iter().map(|b| DriveState {
                name: format!("elsewhere:{b}"),
                mounted: Some(Mounted {
                    target: MountTarget::Read { barcode: b.clone() },
                    barcode: b,
                    pool: None,
                    mounted_for: Duration::ZERO,
                    takes_writes: true,
                    repack_source: false,
                }),
                unavailable: true,
            }));
            decision = scheduler::decide(policy, &queues, &drives)
                .into_iter()
                .next();
        }
    }
    let target = match decision {
        Some(Decision::Stay { target, .. }) => target,
        Some(Decision::Mount { target, reason, .. }) => {
            let pool = match &target {
                MountTarget::Write { pool } => Some(pool.clone()),
                MountTarget::Read { .. } => queues
                    .iter()
                    .find(|q| q.target == target)
                    .and_then(|q| q.pool.clone()),
            };
            let group = policy.group_of(pool.as_deref()).map(String::from);
            let cap = group
                .as_deref()
                .map(|g| policy.cap(g, target.mode()))
                .unwrap_or(0);
            let since_ms = now_ms();
            let intent = BoardMount {
                target: target.clone(),
                barcode: None,
                pool: pool.clone(),
                group,
                since_ms,
            };
            // Another drive may have decided the same slot a moment ago: take it atomically.
            // For a write, the other drives this decision saw writing the pool: a loop that
            // decided the same write meanwhile makes the board refuse (each loop decides for
            // its own drive, and three loops that saw one small archive at once had each
            // loaded a cartridge for it).
            let writers_seen = drives
                .iter()
                .filter(|d| d.unavailable)
                .filter(|d| d.mounted.as_ref().is_some_and(|m| m.target == target))
                .count();
            let writers_seen = u32::try_from(writers_seen).unwrap_or(u32::MAX);
            if !rt.board.reserve(fence, &intent, cap, writers_seen).await? {
                tracing::debug!(
                    drive,
                    ?target,
                    "another drive took this mount's place first; deciding again"
                );
                idle(rt, rt.poll()).await;
                return Ok(());
            }
            // The same cartridge for the other mode (a read of it, a write to its pool): no
            // unload; the executor finds it in the drive (a write session still starts at end
            // of data). Anything else is unloaded first.
            let keeps = mounted.as_ref().is_some_and(|h| match &target {
                MountTarget::Read { barcode } => &h.barcode == barcode,
                MountTarget::Write { pool } => h.pool.as_ref() == Some(pool),
            });
            let previous = mounted.take();
            if let Some(prev) = previous.as_ref().filter(|_| !keeps) {
                let t = tokio::time::Instant::now();
                if let Err(e) = rt.executor.unmount(drive, fence).await {
                    prev.ended(drive, Duration::ZERO, "unload failed");
                    let _ = rt.board.publish(fence, None).await;
                    return Err(e);
                }
                prev.ended(drive, t.elapsed(), "another cartridge wanted");
            } else if let Some(prev) = previous.as_ref() {
                prev.ended(drive, Duration::ZERO, "mode switch");
                tracing::info!(
                    drive,
                    ?target,
                    "switching the mounted cartridge to the new mode without an unload"
                );
            }
            // A cartridge taken out of service since the queue was read: its recalls go to
            // other copies first; a mount is left to what still wants it (a verify).
            // An exported one is not mounted at all: its reads wait for it to come back.
            if let MountTarget::Read { barcode } = &target
                && off_unmountable(rt, barcode).await?
                && (rt.executor.exported().await?.contains(barcode)
                    || rt.requests.queued_reads_of(barcode).await?.is_empty())
            {
                return Ok(());
            }
            tracing::info!(drive, ?target, reason, "mounting");
            drive_metrics::state(drive, "mounting");
            let mount_started = tokio::time::Instant::now();
            let barcode = match rt.executor.mount(drive, &target, fence, cancel).await {
                Ok(b) => b,
                Err(e) => {
                    drive_metrics::state(drive, "empty");
                    let _ = rt.board.publish(fence, None).await;
                    // A cartridge that will not mount for reading costs its requests an
                    // attempt. A drive that failed does not: it goes out of service (see
                    // `drive_loop`) and the work waits for another drive. Nor does a pool
                    // short of cartridges (another drive may be writing its last one).
                    let counts = match target {
                        MountTarget::Read { .. } => !e.is_drive_failure(),
                        MountTarget::Write { .. } => false,
                    };
                    if counts && !cancel.is_cancelled() {
                        mount_failed(rt, &target, limit, fence, &e).await?;
                    }
                    // A pool short of cartridges is no fault of the drive: set the pool aside
                    // and take other work at once.
                    if let MountTarget::Write { pool } = &target
                        && !e.is_drive_failure()
                        && !cancel.is_cancelled()
                    {
                        tracing::warn!(drive, %pool, error = %e, retry_in_s = SHORT_POOL_PAUSE.as_secs(),
                            "no cartridge to write this pool on this drive now; taking other work meanwhile");
                        short_pools
                            .insert(pool.clone(), tokio::time::Instant::now() + SHORT_POOL_PAUSE);
                        return Ok(());
                    }
                    return Err(e);
                }
            };
            let took = mount_started.elapsed();
            if !keeps {
                drive_metrics::mounted(drive, took);
            }
            drive_metrics::state(drive, "idle");
            let held = Held {
                barcode,
                target: target.clone(),
                pool,
                since: tokio::time::Instant::now(),
                since_ms,
                session: drive_metrics::MountSession {
                    mount: took,
                    ..Default::default()
                },
            };
            rt.board
                .publish(fence, Some(&held.on_board(policy)))
                .await?;
            *mounted = Some(held);
            target
        }
        Some(Decision::Unmount { .. }) => {
            let t = tokio::time::Instant::now();
            rt.executor.unmount(drive, fence).await?;
            if let Some(h) = mounted.take() {
                h.ended(drive, t.elapsed(), "idle");
            }
            drive_metrics::state(drive, "empty");
            rt.board.publish(fence, None).await?;
            return Ok(());
        }
        Some(Decision::Idle { .. }) | None => {
            idle(rt, rt.poll()).await;
            return Ok(());
        }
    };
    let Some(Held { barcode, .. }) = mounted.as_ref() else {
        return Ok(());
    };
    // The cartridge's recalls leave it if it was taken out of service (also since the mount
    // above); a batch on one already out of service (a verify) is not stopped for it.
    let out_at_start = off_unmountable(rt, barcode).await?;
    let mut batch = rt.requests.claim(&target, fence, limit).await?;
    if batch.is_empty() {
        // Another drive took the work first: wait a poll, never spin on the database.
        idle(rt, rt.poll()).await;
        return Ok(());
    }
    // What the batch finishes reaches its jobs' records while it runs.
    let (progress, publisher) = batch_progress(rt, &batch, fence);
    // A user's cancel of any job in the batch stops the batch at its next record boundary and
    // frees the drive; the cancelled job's unfinished requests are dropped, the other jobs'
    // go back to the queue. So does the drive being taken down (`reel drive down`): every
    // unfinished request goes back to the queue, for the other drives.
    let batch_cancel = cancel.child_token();
    let jobs: std::collections::BTreeSet<String> = batch.iter().map(|r| r.job_id.clone()).collect();
    let watcher = {
        let store = rt.store().clone();
        let jobs = jobs.clone();
        let bc = batch_cancel.clone();
        let every = rt.poll();
        let states = rt.drive_states.clone();
        let drive = drive.to_string();
        let rt2 = Arc::clone(rt);
        let cartridge = barcode.clone();
        // A cartridge taken out of service during the batch stops it; what is left goes
        // elsewhere.
        tokio::spawn(async move {
            loop {
                tokio::select! {
                    _ = bc.cancelled() => return,
                    _ = tokio::time::sleep(every) => {}
                }
                if let Ok(s) = states.get(&drive).await
                    && !s.is_up()
                {
                    tracing::info!(drive = %drive, reason = %s.reason,
                        "the drive was taken down: stopping the batch at a record boundary");
                    bc.cancel();
                    return;
                }
                if !out_at_start
                    && let Ok(out) = rt2
                        .executor
                        .unmountable_among(vec![cartridge.clone()])
                        .await
                    && let Some(c) = out.first()
                {
                    tracing::info!(drive = %drive, barcode = %c.barcode, state = %c.state,
                        reason = %c.state_reason,
                        "the cartridge was taken out of service: stopping the batch at a record boundary");
                    bc.cancel();
                    return;
                }
                for j in &jobs {
                    if let Ok(true) = store.cancel_requested(j).await {
                        tracing::info!(job = %j, "cancel requested: stopping the batch");
                        bc.cancel();
                        return;
                    }
                }
            }
        })
    };
    let mode = match target {
        MountTarget::Read { .. } => "read",
        MountTarget::Write { .. } => "write",
    };
    drive_metrics::state(drive, if mode == "read" { "reading" } else { "writing" });
    let work_started = tokio::time::Instant::now();
    let outcome = match target {
        MountTarget::Read { .. } => {
            rt.executor
                .read_batch(drive, barcode, &batch, fence, &batch_cancel, &progress)
                .await
        }
        MountTarget::Write { ref pool } => {
            let more = crate::more_writes::MoreWrites::new(
                rt.requests.clone(),
                pool,
                fence,
                &batch,
                limit,
                batch_cancel.clone(),
            );
            let taken = more.taken();
            let o = rt
                .executor
                .write_batch(drive, &batch, Some(more), fence, &batch_cancel, &progress)
                .await;
            // What joined the session is settled with the batch, written or not.
            batch.extend(taken.close().await);
            o
        }
    };
    watcher.abort();
    publisher.stop().await;
    if let Err(e) = rt.drive_progress.clear(fence).await {
        tracing::debug!(%drive, error = %e, "cannot clear the drive's batch progress");
    }
    let mut cancelled = std::collections::BTreeSet::new();
    for j in &jobs {
        if rt.store().cancel_requested(j).await? {
            cancelled.insert(j.clone());
        }
    }
    let (o, error) = match outcome {
        Ok(mut o) => {
            let failed = o.drive_failure.take().map(|reason| JobsError::DriveFailed {
                drive: drive.to_string(),
                reason,
            });
            (o, failed)
        }
        // The batch as a whole failed (a drive fault before anything was read or written):
        // every request counts an attempt, unless the drive's own lease or shutdown stopped
        // it, which is no fault of the requests.
        Err(e) if cancel.is_cancelled() => (BatchOutcome::default(), Some(e)),
        Err(e) => {
            let why = e.to_string();
            let o = BatchOutcome {
                retry: batch.iter().map(|r| (r.id, why.clone())).collect(),
                ..BatchOutcome::default()
            };
            (o, Some(e))
        }
    };
    let done: std::collections::HashSet<i64> = o.done.iter().copied().collect();
    let (files, bytes) = batch
        .iter()
        .filter(|r| done.contains(&r.id))
        .fold((0u64, 0u64), |(f, b), r| (f + r.files, b + r.bytes));
    drive_metrics::moved(drive, mode, files, bytes);
    if let Some(h) = mounted.as_mut() {
        h.session.drive.add(&o.drive_time);
        h.session.work += work_started.elapsed();
        h.session.batches += 1;
        h.session.files += files;
        h.session.bytes += bytes;
    }
    drive_metrics::state(drive, "idle");
    settle(rt, &batch, o, &cancelled, fence).await?;
    match error {
        Some(e) => {
            rt.finalize_waiting().await?;
            Err(e)
        }
        None => rt.finalize_waiting().await,
    }
}

/// How often a running batch's progress reaches its jobs' records.
pub const PROGRESS_EVERY: Duration = Duration::from_secs(1);

/// The progress callback of a batch, and the task that publishes what it reports: every
/// [`PROGRESS_EVERY`], each job with newly finished requests gets its record's progress set
/// to what the table counts done plus what this batch finished of it (still `claimed` there
/// until the batch settles), and the drive's batch progress is written for `reel drive show`.
/// The task is stopped ([`Publisher::stop`]) before the batch settles; `finalize_record`
/// never steps back from it while requests are claimed.
fn batch_progress<E: TapeExecutor>(
    rt: &Arc<Runtime<E>>,
    batch: &[TapeRequest],
    fence: &Fence,
) -> (ProgressFn, Publisher) {
    // Requests finished since the last publication, and the last block reported.
    type Reported = (Vec<i64>, Option<u64>);
    let reported: Arc<std::sync::Mutex<Reported>> = Arc::default();
    let progress: ProgressFn = {
        let reported = reported.clone();
        Arc::new(move |ids: &[i64], block: Option<u64>| {
            let mut r = reported.lock().unwrap_or_else(|e| e.into_inner());
            r.0.extend_from_slice(ids);
            if block.is_some() {
                r.1 = block;
            }
        })
    };
    let of: std::collections::HashMap<i64, (String, u64)> = batch
        .iter()
        .map(|r| (r.id, (r.job_id.clone(), r.bytes)))
        .collect();
    let jobs: std::collections::BTreeSet<String> = batch.iter().map(|r| r.job_id.clone()).collect();
    let mut drive = reel_queue::drive_progress::BatchProgress {
        job_count: jobs.len() as u64,
        jobs: jobs
            .into_iter()
            .take(reel_queue::drive_progress::JOBS_KEPT)
            .collect(),
        files: batch.iter().map(|r| r.files).sum(),
        bytes: batch.iter().map(|r| r.bytes).sum(),
        started_ms: reel_queue::db::now_ms(),
        ..Default::default()
    };
    let files_of: std::collections::HashMap<i64, u64> =
        batch.iter().map(|r| (r.id, r.files)).collect();
    let (requests, store) = (rt.requests.clone(), rt.store().clone());
    let (drives, fence) = (rt.drive_progress.clone(), fence.clone());
    let stop = CancellationToken::new();
    let stopped = stop.clone();
    let task = tokio::spawn(async move {
        let mut seen = std::collections::HashSet::new();
        let mut per_job: BTreeMap<String, (u64, u64)> = BTreeMap::new();
        // The drive's row is written at the start (the batch is under way) and then whenever
        // something moved.
        let mut moved = true;
        loop {
            if moved {
                if let Err(e) = drives.report(&fence, &drive).await {
                    tracing::debug!(error = %e, "cannot record the drive's batch progress");
                }
                moved = false;
            }
            tokio::select! {
                _ = stopped.cancelled() => return,
                _ = tokio::time::sleep(PROGRESS_EVERY) => {}
            }
            let (ids, block) = {
                let mut r = reported.lock().unwrap_or_else(|e| e.into_inner());
                (std::mem::take(&mut r.0), r.1)
            };
            if block != drive.block {
                drive.block = block;
                moved = true;
            }
            let mut touched = std::collections::BTreeSet::new();
            for id in ids {
                if let Some((job, bytes)) = of.get(&id)
                    && seen.insert(id)
                {
                    let e = per_job.entry(job.clone()).or_default();
                    e.0 += 1;
                    e.1 += bytes;
                    touched.insert(job.clone());
                    drive.files_done += files_of.get(&id).copied().unwrap_or(0);
                    drive.bytes_done += bytes;
                    moved = true;
                }
            }
            for job in touched {
                let (n, b) = per_job.get(&job).copied().unwrap_or_default();
                let c = match requests.counts(&job).await {
                    Ok(c) => c,
                    Err(e) => {
                        tracing::debug!(%job, error = %e, "cannot count the job's requests for its progress");
                        continue;
                    }
                };
                let p = Progress {
                    objects_done: (c.done + n).min(c.total),
                    objects_total: c.total,
                    bytes_done: (c.bytes_done + b).min(c.bytes_total),
                    bytes_total: c.bytes_total,
                };
                if let Err(e) = store.set_progress(&job, p).await {
                    tracing::debug!(%job, error = %e, "cannot record the job's progress");
                }
            }
        }
    });
    (
        progress,
        Publisher {
            stop,
            task: AbortOnDrop(task),
        },
    )
}

/// A cartridge that could not be mounted for reading (gone from the library, exported, a
/// load that fails): its queued requests count an attempt and wait out their backoff, so a
/// job on it ends with the reason after its attempts instead of winning the drive at every
/// decision.
async fn mount_failed<E: TapeExecutor>(
    rt: &Arc<Runtime<E>>,
    target: &MountTarget,
    limit: ClaimLimit,
    fence: &Fence,
    e: &JobsError,
) -> Result<()> {
    let batch = rt.requests.claim(target, fence, limit).await?;
    if batch.is_empty() {
        return Ok(());
    }
    let why = format!("cannot mount the cartridge: {e}");
    tracing::warn!(?target, requests = batch.len(), error = %e, "mount failed; its requests count an attempt");
    let o = BatchOutcome {
        retry: batch.iter().map(|r| (r.id, why.clone())).collect(),
        ..BatchOutcome::default()
    };
    settle(rt, &batch, o, &std::collections::BTreeSet::new(), fence).await?;
    rt.finalize_waiting().await
}

/// Record what a batch did with each of its requests: done, failed, waiting out a retry,
/// re-routed to another copy, dropped (its job was cancelled), or back in the queue.
async fn settle<E: TapeExecutor>(
    rt: &Arc<Runtime<E>>,
    batch: &[TapeRequest],
    o: BatchOutcome,
    cancelled: &std::collections::BTreeSet<String>,
    fence: &Fence,
) -> Result<()> {
    // A batch holds up to MAX_BATCH_FILES requests: look each id up in a set, not the batch.
    let of_cancelled_jobs: std::collections::HashSet<i64> = batch
        .iter()
        .filter(|r| cancelled.contains(&r.job_id))
        .map(|r| r.id)
        .collect();
    let of_cancelled = |id: &i64| of_cancelled_jobs.contains(id);
    rt.requests.record_results(&o.results, fence).await?;
    rt.requests.complete(&o.done, fence).await?;
    for (id, why) in &o.failed {
        rt.requests.fail(&[*id], fence, why).await?;
    }
    let settled: std::collections::BTreeSet<i64> = o
        .done
        .iter()
        .copied()
        .chain(o.failed.iter().map(|f| f.0))
        .chain(o.retry.iter().map(|f| f.0))
        .collect();
    let (dropped, rest): (Vec<i64>, Vec<i64>) = batch
        .iter()
        .map(|r| r.id)
        .filter(|i| !settled.contains(i))
        .partition(of_cancelled);
    let mut dropped = dropped;
    let mut retry = Vec::with_capacity(o.retry.len());
    for (id, why) in o.retry {
        if of_cancelled(&id) {
            dropped.push(id);
        } else {
            retry.push((id, why));
        }
    }
    rt.requests.drop_cancelled(&dropped, fence).await?;
    let r = rt
        .requests
        .retry(
            &retry,
            fence,
            rt.queue.backoff(),
            rt.config.worker.max_attempts,
        )
        .await?;
    if r.waiting + r.failed > 0 {
        tracing::warn!(
            waiting = r.waiting,
            failed = r.failed,
            "requests failed an attempt; they wait out a backoff or, out of attempts, fail"
        );
    }
    rt.requests.unclaim(&rest, fence).await?;
    for (id, barcode, pool, detail) in &o.reroute {
        if !rt
            .requests
            .reroute(*id, barcode, pool.as_deref(), detail)
            .await?
        {
            tracing::warn!(request = id, "could not re-route a read to another copy");
        }
    }
    Ok(())
}

/// Mark the moment a worker start registered, for `reel jobs`-side diagnostics.
pub fn started_ms() -> i64 {
    now_ms()
}

#[cfg(test)]
#[path = "worker_tests.rs"]
mod tests;
