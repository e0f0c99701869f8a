//! More writes for a write batch that has written what it claimed.
//!
//! A repack turns reads into writes a slice at a time: its source drive reads the next slice
//! while the destination drive writes the last one. Were each slice a batch of its own, the
//! destination would end its session after every slice (a synchronous filemark, the tape
//! stopped, the batch settled) and start another (a new claim, a locate to end of data, a
//! backhitch to get going): seconds of drive time per slice that no write streams through.
//! Instead the write session asks for more before it closes ([`reel_engine::session::write::Refill`]),
//! and this module answers: the batch's jobs' writes queued for its pool since it began, or,
//! while one of those jobs still has reads in progress (being read, or read and not yet turned
//! into writes), a wait for them.
//!
//! Bounds, so a batch that takes more never holds a drive for good:
//! - it takes no more than the claim limit the batch began with (files and bytes, one
//!   barrier's worth), counted over the first claim and every later one;
//! - it takes only its own jobs' requests: another job's writes wait for the next batch, as
//!   they did, and a cancel of any job it holds is seen by the batch's watcher;
//! - it waits at most [`MORE_WRITES_WAIT`] for reads in progress (taken by a drive) to become
//!   writes, at most [`QUEUED_READS_WAIT`] for reads still queued (the source drive takes the
//!   next slice within its poll; on a library with one drive, none will while this batch holds
//!   it), and not at all when its jobs have no read (an archive's batch never waits).
//!
//! What it claims is kept in its [`Taken`] as it is claimed, by a task of its own that finishes
//! even if the session stops waiting for it (a claim committed in the database must reach the
//! batch); the drive loop closes the [`Taken`] once the batch is written, which waits for a
//! claim under way and refuses any later one, and settles what it holds with the batch,
//! written or not.

use std::sync::{Arc, Mutex};
use std::time::Duration;

use tokio::sync::Mutex as AsyncMutex;

use reel_queue::error::Result;
use reel_queue::{ClaimLimit, Fence, TapeRequest, TapeRequests};
use tokio_util::sync::CancellationToken;

use crate::scheduler::MountTarget;

/// Longest a batch waits for its jobs' reads in progress to become writes before its session
/// ends.
pub const MORE_WRITES_WAIT: Duration = Duration::from_secs(60);

/// Longest a batch waits while its jobs' reads are only queued.
pub const QUEUED_READS_WAIT: Duration = Duration::from_secs(2);

/// How often a waiting batch looks again.
const LOOK_EVERY: Duration = Duration::from_millis(50);

/// A write batch's source of more writes (see the module doc).
pub struct MoreWrites {
    requests: TapeRequests,
    pool: String,
    fence: Fence,
    jobs: Vec<String>,
    left: ClaimLimit,
    taken: Taken,
    cancel: CancellationToken,
}

impl MoreWrites {
    /// More for `batch`, a write batch to `pool` claimed within `limit` under `fence`; none is
    /// taken once `cancel` fires.
    pub fn new(
        requests: TapeRequests,
        pool: &str,
        fence: &Fence,
        batch: &[TapeRequest],
        limit: ClaimLimit,
        cancel: CancellationToken,
    ) -> MoreWrites {
        let mut jobs: Vec<String> = batch.iter().map(|r| r.job_id.clone()).collect();
        jobs.sort();
        jobs.dedup();
        let (files, bytes) = batch
            .iter()
            .fold((0u64, 0u64), |(f, b), r| (f + 1, b.saturating_add(r.bytes)));
        MoreWrites {
            requests,
            pool: pool.to_string(),
            fence: fence.clone(),
            jobs,
            left: ClaimLimit {
                max_files: limit.max_files.saturating_sub(files),
                max_bytes: limit.max_bytes.saturating_sub(bytes),
            },
            taken: Taken::default(),
            cancel,
        }
    }

    /// What it claims: the drive loop closes it and settles what it holds with the batch.
    pub fn taken(&self) -> Taken {
        self.taken.clone()
    }

    /// The next writes for the batch, or none: nothing is queued, no read of its jobs is in
    /// progress (or they stayed in progress for the whole wait), its limit is spent, or it
    /// was cancelled.
    pub async fn next(&mut self) -> Result<Vec<TapeRequest>> {
        let started = tokio::time::Instant::now();
        let target = MountTarget::Write {
            pool: self.pool.clone(),
        };
        loop {
            if self.left.max_files == 0
                || self.left.max_bytes == 0
                || self.cancel.is_cancelled()
                || self.taken.is_closed()
            {
                return Ok(Vec::new());
            }
            let (mut reads, mut queued) = (false, false);
            for job in &self.jobs {
                let coming = self.requests.writes_coming(job, &self.pool).await?;
                if coming.queued_writes > 0 {
                    let got = self
                        .taken
                        .claim(&self.requests, &target, &self.fence, self.left, job)
                        .await?;
                    if !got.is_empty() {
                        for r in &got {
                            self.left.max_files = self.left.max_files.saturating_sub(1);
                            self.left.max_bytes = self.left.max_bytes.saturating_sub(r.bytes);
                        }
                        return Ok(got);
                    }
                }
                // Reads a drive has taken, or read and not yet turned into writes while none
                // is left to take: they become writes soon. Reads left to take (queued, or
                // waiting out a backoff) may wait for a drive that is this one.
                reads |=
                    coming.reads_claimed > 0 || (coming.reads_done > 0 && coming.reads_queued == 0);
                queued |= coming.reads_queued > 0;
            }
            let waited = started.elapsed();
            let wait_on =
                (reads && waited < MORE_WRITES_WAIT) || (queued && waited < QUEUED_READS_WAIT);
            if !wait_on {
                return Ok(Vec::new());
            }
            tokio::select! {
                () = self.cancel.cancelled() => return Ok(Vec::new()),
                () = tokio::time::sleep(LOOK_EVERY) => {}
            }
        }
    }
}

/// The requests a batch's [`MoreWrites`] claimed (see the module doc).
#[derive(Clone, Default)]
pub struct Taken {
    list: Arc<Mutex<Vec<TapeRequest>>>,
    /// Held by a claim under way; `true` once the drive loop has closed it.
    gate: Arc<AsyncMutex<bool>>,
}

impl Taken {
    /// Claim `job`'s writes for `target` on a task of its own, recording them here before it
    /// ends: a caller that stops waiting never loses a committed claim.
    async fn claim(
        &self,
        requests: &TapeRequests,
        target: &MountTarget,
        fence: &Fence,
        limit: ClaimLimit,
        job: &str,
    ) -> Result<Vec<TapeRequest>> {
        let (requests, target, fence, job) = (
            requests.clone(),
            target.clone(),
            fence.clone(),
            job.to_string(),
        );
        let (list, gate) = (self.list.clone(), self.gate.clone());
        let task = tokio::spawn(async move {
            let closed = gate.lock_owned().await;
            if *closed {
                return Ok(Vec::new());
            }
            let got = requests.claim_of_job(&target, &fence, limit, &job).await?;
            list.lock()
                .unwrap_or_else(|e| e.into_inner())
                .extend(got.iter().cloned());
            drop(closed);
            Ok(got)
        });
        task.await.map_err(|e| {
            reel_queue::error::JobsError::Internal(format!("claiming more writes: {e}"))
        })?
    }

    /// The drive loop has closed it (a claim under way holds the gate: not closed yet).
    fn is_closed(&self) -> bool {
        self.gate.try_lock().map(|closed| *closed).unwrap_or(false)
    }

    /// Everything claimed, once a claim under way has finished; no claim is made after.
    pub async fn close(&self) -> Vec<TapeRequest> {
        let mut closed = self.gate.lock().await;
        *closed = true;
        std::mem::take(&mut *self.list.lock().unwrap_or_else(|e| e.into_inner()))
    }
}
