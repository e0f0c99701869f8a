//! `reel queue ls` and the waits of one job: the queued work per cartridge (reads) and pool
//! (writes), with files, bytes, oldest age, priority, the drives serving it and the rule that
//! holds it ([`reel_worker::hold`]), as CTA's `cta-admin showqueues` shows it. Works from the
//! store and the catalogue alone, on any host; the API and the dashboard read the same views.

use std::collections::{BTreeMap, BTreeSet};
use std::time::Duration;

use serde::Serialize;
use serde_json::json;
use utoipa::ToSchema;

use reel_engine::catalogue::Catalogue;
use reel_queue::JobRecord;
use reel_queue::TapeRequests;
use reel_queue::config::Config;
use reel_queue::db::{Db, now_ms};
use reel_queue::error::Result;
use reel_queue::job::JobState;
use reel_queue::mount::{MountTarget, QueueSummary};
use reel_queue::outstanding::{self, RequestGroup};
use reel_worker::hold::{self, DriveSeen, Hold, Library, OutOfService};
use reel_worker::scheduler::Policy;

use crate::text::{human_bytes, span};

/// One queue: what waits for a cartridge's reads or a pool's writes, and why.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, ToSchema)]
pub struct QueueView {
    /// `read` or `write`.
    pub mode: String,
    /// The cartridge, for reads.
    pub cartridge: Option<String>,
    /// The pool (for reads, the cartridge's).
    pub pool: Option<String>,
    /// Requests queued.
    pub files: u64,
    /// Their bytes.
    pub bytes: u64,
    /// Age of the oldest (ms).
    pub oldest_age_ms: u64,
    /// Highest priority queued.
    pub priority: i32,
    /// Drives mounted for it.
    pub drives: Vec<String>,
    /// The rule holding it: `served`, `due`, `below_threshold`, `drive_cap`, `drives_busy`,
    /// `cartridge_in_drive`, `cartridge_out`, `no_writable_cartridge`, `no_drive_up`,
    /// `no_worker`.
    pub rule: String,
    /// The rule in words, with what ends the wait.
    pub message: String,
    /// For `below_threshold`: in how long the age rule mounts it (ms).
    pub mounts_in_ms: Option<u64>,
}

/// Where one group of a job's outstanding requests is, and why it waits.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, ToSchema)]
pub struct WaitView {
    /// `queued`, `claimed` (on a drive), `waiting` (a retry backoff), or `job` (the job itself
    /// is not planned yet).
    pub state: String,
    /// `read` or `write` (empty for `job`).
    pub mode: String,
    /// The cartridge, for reads.
    pub cartridge: Option<String>,
    /// The pool.
    pub pool: Option<String>,
    /// The drive, for `claimed`.
    pub drive: Option<String>,
    /// Requests in the group.
    pub files: u64,
    /// Their bytes.
    pub bytes: u64,
    /// The rule: a queue's ([`QueueView::rule`]), `on_drive`, `retry_backoff`,
    /// `job_backoff` or `not_started`.
    pub rule: String,
    /// In words.
    pub message: String,
    /// When the wait ends by itself, if it does (unix ms).
    pub until_ms: Option<i64>,
}

fn split(t: &MountTarget) -> (String, Option<String>) {
    match t {
        MountTarget::Read { barcode } => ("read".into(), Some(barcode.clone())),
        MountTarget::Write { .. } => ("write".into(), None),
    }
}

/// Everything [`hold::explain`] looks at, read from the store and the catalogue once.
pub async fn library(db: &Db, cat: &Catalogue) -> Result<Library> {
    let drives = crate::drive_cmd::views(db)
        .await?
        .into_iter()
        .map(|v| {
            let mount = v.board.as_ref().and_then(|b| b.mount.clone());
            DriveSeen {
                up: v.service.is_up(),
                down_reason: v.service.reason.clone(),
                worker: v.board.as_ref().map(|b| b.holder.clone()),
                target: mount.as_ref().map(|m| m.target.clone()),
                barcode: mount
                    .as_ref()
                    .and_then(|m| m.barcode.clone())
                    .or(v.loaded.clone()),
                group: mount.and_then(|m| m.group),
                name: v.service.drive,
            }
        })
        .collect();
    let cartridges = cat.cartridges().await?;
    let out_of_service = cat
        .vault_entries()
        .await?
        .into_iter()
        .map(|e| {
            (
                e.barcode,
                OutOfService {
                    location: e.location,
                },
            )
        })
        .collect();
    // The pools whose writes could start now: as the engine's writable_cartridge picks them
    // (active, labelled, with room or a capacity not known yet).
    let pools_with_room: BTreeSet<String> = cartridges
        .iter()
        .filter(|c| {
            c.state == reel_engine::catalogue::CartridgeState::Active
                && c.cartridge_uuid.is_some()
                && (c.capacity_bytes == 0 || c.capacity_bytes > c.used_bytes)
        })
        .filter_map(|c| c.pool.clone())
        .collect();
    Ok(Library {
        drives,
        out_of_service,
        pools_with_room,
    })
}

/// Every queue with the rule holding it, highest priority and oldest first.
pub async fn queues(db: &Db, cat: &Catalogue, config: &Config) -> Result<Vec<QueueView>> {
    let policy =
        Policy::from_config(&config.scheduler).with_background_cap(config.repack.max_drives);
    let mut summaries = TapeRequests::new(db.clone()).summaries().await?;
    summaries.sort_by(|a, b| {
        b.priority
            .cmp(&a.priority)
            .then(b.oldest_age.cmp(&a.oldest_age))
    });
    let lib = library(db, cat).await?;
    Ok(summaries
        .iter()
        .map(|q| {
            let h = hold::explain(&policy, q, &lib);
            let (mode, cartridge) = split(&q.target);
            QueueView {
                mode,
                cartridge,
                pool: q.pool.clone(),
                files: q.files,
                bytes: q.bytes,
                oldest_age_ms: q.oldest_age.as_millis() as u64,
                priority: q.priority,
                drives: match &h {
                    Hold::Served { drives } => drives.clone(),
                    _ => Vec::new(),
                },
                rule: h.rule().into(),
                message: h.message(),
                mounts_in_ms: h.mounts_in().map(|d| d.as_millis() as u64),
            }
        })
        .collect())
}

/// Why the job `job`'s outstanding work waits: one line per group of its requests.
pub async fn job_waits(
    db: &Db,
    cat: &Catalogue,
    config: &Config,
    job: &JobRecord,
) -> Result<Vec<WaitView>> {
    let now = now_ms();
    let groups = outstanding::of_job(db, &job.id).await?;
    if groups.is_empty() {
        return Ok(job_level(job, now).into_iter().collect());
    }
    let queued = groups.iter().any(|g| g.state == "queued");
    let (summaries, lib) = if queued {
        let s = TapeRequests::new(db.clone()).summaries().await?;
        (s, library(db, cat).await?)
    } else {
        (Vec::new(), Library::default())
    };
    let by_target: BTreeMap<&MountTarget, &QueueSummary> =
        summaries.iter().map(|q| (&q.target, q)).collect();
    let policy =
        Policy::from_config(&config.scheduler).with_background_cap(config.repack.max_drives);
    Ok(groups
        .iter()
        .map(|g| wait_of(g, &policy, &by_target, &lib, now))
        .collect())
}

fn wait_of(
    g: &RequestGroup,
    policy: &Policy,
    queues: &BTreeMap<&MountTarget, &QueueSummary>,
    lib: &Library,
    now: i64,
) -> WaitView {
    let (mode, cartridge) = split(&g.target);
    let (rule, message, until_ms) = match g.state.as_str() {
        "claimed" => (
            "on_drive".to_string(),
            format!(
                "in a batch on drive {}",
                g.drive.as_deref().unwrap_or("(unknown)")
            ),
            None,
        ),
        "waiting" => {
            let next = g.next_ms.unwrap_or(now);
            (
                "retry_backoff".to_string(),
                format!(
                    "failed {} time{} ({}); queued again in {}",
                    g.attempts,
                    if g.attempts == 1 { "" } else { "s" },
                    g.error.as_deref().unwrap_or("no reason recorded"),
                    span(Duration::from_millis((next - now).max(0) as u64))
                ),
                Some(next),
            )
        }
        _ => {
            // The whole queue (every job's work for the target) is what a drive mounts for.
            let fallback = QueueSummary {
                target: g.target.clone(),
                pool: g.pool.clone(),
                bytes: g.bytes,
                files: g.files,
                oldest_age: Duration::ZERO,
                priority: 0,
            };
            let q = queues.get(&g.target).copied().unwrap_or(&fallback);
            let h = hold::explain(policy, q, lib);
            let until = h.mounts_in().map(|d| now + d.as_millis() as i64);
            (h.rule().to_string(), h.message(), until)
        }
    };
    WaitView {
        state: g.state.clone(),
        mode,
        cartridge,
        pool: g.pool.clone(),
        drive: g.drive.clone(),
        files: g.files,
        bytes: g.bytes,
        rule,
        message,
        until_ms,
    }
}

/// A job with no outstanding request: not planned yet, or between attempts.
fn job_level(job: &JobRecord, now: i64) -> Option<WaitView> {
    if job.state != JobState::Queued {
        return None;
    }
    let (rule, message, until_ms) = if job.not_before_ms > now {
        (
            "job_backoff",
            format!(
                "attempt {} failed ({}); starts again in {}",
                job.attempts,
                job.error.as_deref().unwrap_or("no reason recorded"),
                span(Duration::from_millis((job.not_before_ms - now) as u64))
            ),
            Some(job.not_before_ms),
        )
    } else {
        (
            "not_started",
            "no worker has taken it up yet: a running `reel worker` plans it within a poll; is \
             one running?"
                .to_string(),
            None,
        )
    };
    Some(WaitView {
        state: "job".into(),
        mode: String::new(),
        cartridge: None,
        pool: None,
        drive: None,
        files: 0,
        bytes: 0,
        rule: rule.into(),
        message,
        until_ms,
    })
}

/// `reel queue ls` for people.
pub fn text(queues: &[QueueView]) -> String {
    if queues.is_empty() {
        return "no queued tape work".into();
    }
    let mut out = vec![format!(
        "{:<5} {:<12} {:<12} {:>7} {:>10} {:>8} {:>5}  {}",
        "MODE", "CARTRIDGE", "POOL", "FILES", "BYTES", "OLDEST", "PRIO", "WHY"
    )];
    for q in queues {
        out.push(format!(
            "{:<5} {:<12} {:<12} {:>7} {:>10} {:>8} {:>5}  {}",
            q.mode,
            q.cartridge.as_deref().unwrap_or("-"),
            q.pool.as_deref().unwrap_or("-"),
            q.files,
            human_bytes(q.bytes),
            span(Duration::from_millis(q.oldest_age_ms)),
            q.priority,
            q.message
        ));
    }
    out.join("\n")
}

/// The JSON `reel queue ls --json` prints.
pub fn json(queues: &[QueueView]) -> serde_json::Value {
    json!({ "queues": queues })
}
