//! A worker inside this process: the runtime `reel worker` runs, started the way it starts it.
//!
//! [`start_runtime`] is the one start-up sequence: open the engine for this host (catalogue,
//! storage classes, plugin, library, drives), recover cartridges a crash left with pending
//! containers, and build the [`Runtime`] over the job queue with the [`EngineExecutor`]. `reel
//! worker` runs it under its signal handlers; [`EmbeddedWorker`] runs it on a task of the
//! caller's tokio runtime, for `reel demo`, the benchmark and the tests that want the library
//! handle beside the worker (to inject a simulator fault while a job runs, or to read the
//! drives' counters). Either way jobs go through the same queue, scheduler, drive loops and
//! executor: there is no second path to the tape.

use std::sync::Arc;
use std::time::Duration;

use reel_engine::service::TapeService;
use tokio::task::JoinHandle;
use tokio_util::sync::CancellationToken;

use crate::executor::{EngineExecutor, open_service};
use crate::worker::{self, Runtime};
use reel_queue::config::Config;
use reel_queue::error::{JobsError, Result};
use reel_queue::job::JobSpec;
use reel_queue::{JobQueue, JobRecord};

/// Open the engine, recover what a crash left pending, and build the worker runtime.
///
/// Returns the runtime (not yet running: pass it to [`worker::run`]) and the engine service it
/// drives.
pub async fn start_runtime(
    config: &Config,
    shutdown: CancellationToken,
) -> Result<(Arc<Runtime<EngineExecutor>>, Arc<TapeService>)> {
    let queue = JobQueue::open(config).await?;
    let service = Arc::new(open_service(config).await?);
    let recovered = service
        .recover_pending()
        .await
        .map_err(JobsError::Recovery)?;
    for (barcode, r) in &recovered {
        tracing::info!(%barcode, dead = r.dead_containers.len(), closed_tail = r.closed_tail, "recovered at start-up");
    }
    let executor = Arc::new(EngineExecutor::new(service.clone(), config.clone()));
    Ok((
        Runtime::new(config.clone(), queue, executor, shutdown),
        service,
    ))
}

/// A worker running on a task of this process.
pub struct EmbeddedWorker {
    service: Arc<TapeService>,
    queue: JobQueue,
    name: String,
    shutdown: CancellationToken,
    task: Option<JoinHandle<Result<()>>>,
}

impl EmbeddedWorker {
    /// Start a worker for `config` (as `reel worker` with that config would) and a queue
    /// handle to submit to it.
    pub async fn start(config: &Config) -> Result<EmbeddedWorker> {
        let shutdown = CancellationToken::new();
        let (rt, service) = start_runtime(config, shutdown.clone()).await?;
        let name = rt.name.clone();
        let queue = rt.queue.clone();
        let task = tokio::spawn(worker::run(rt));
        Ok(EmbeddedWorker {
            service,
            queue,
            name,
            shutdown,
            task: Some(task),
        })
    }

    /// The engine service the worker drives: its library (faults, counters) and catalogue.
    pub fn service(&self) -> &Arc<TapeService> {
        &self.service
    }

    /// The job queue the worker takes its jobs from.
    pub fn queue(&self) -> &JobQueue {
        &self.queue
    }

    /// The worker's name (its leases and board rows carry it).
    pub fn name(&self) -> &str {
        &self.name
    }

    /// Submit a job at the default priority.
    pub async fn submit(&self, spec: JobSpec) -> Result<JobRecord> {
        self.queue.submit(spec, None).await
    }

    /// Wait until job `id` is done, failed or cancelled, polling its record; `None` if it is
    /// not within `timeout`.
    pub async fn wait(&self, id: &str, timeout: Duration) -> Result<Option<JobRecord>> {
        let deadline = tokio::time::Instant::now() + timeout;
        loop {
            // The state alone while it runs (a spec may name a million objects).
            let state = self.queue.store().status(id).await?.map(|(s, _)| s);
            let Some(state) = state else {
                return Err(JobsError::NoSuchJob(id.to_string()));
            };
            if state.is_final() {
                return self.queue.store().require(id).await.map(Some);
            }
            if tokio::time::Instant::now() >= deadline {
                return Ok(None);
            }
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    }

    /// Stop as SIGTERM stops `reel worker`: the drive loops finish their step and unload
    /// what they mounted, the leases are released. Returns the worker's own error, if any.
    pub async fn stop(mut self) -> Result<()> {
        self.shutdown.cancel();
        match self.task.take() {
            Some(t) => t.await.map_err(|e| {
                JobsError::Internal(format!("the worker task ended abnormally: {e}"))
            })?,
            None => Ok(()),
        }
    }
}

impl Drop for EmbeddedWorker {
    fn drop(&mut self) {
        // Dropped without `stop`: the drive loops end at their next step; nothing waits.
        self.shutdown.cancel();
    }
}
