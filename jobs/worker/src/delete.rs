//! Running a delete job: no tape, only the catalogue.
//!
//! The job opens its deletion (who, why, what) and marks keys in batches of `[lifecycle]
//! delete_batch`, each one transaction, reporting progress after each and stopping between
//! two at a cancel or a shutdown. It is idempotent: a job run again after a crash finds its
//! deletion again and carries on with what is still there (what it deleted is no longer
//! there to find), so nothing is deleted twice and nothing is skipped. Keys under a legal
//! hold are skipped and named in the result; the submission refused the job if it met one
//! then, so they are holds placed while it waited.

use std::sync::Arc;

use reel_engine::catalogue::DeleteScope;
use reel_queue::error::{JobsError, Result};
use reel_queue::job::{DeleteJob, DeleteSelection};
use reel_queue::store::{JobRecord, Progress};
use tokio_util::sync::CancellationToken;

use crate::worker::{Runtime, TapeExecutor};

/// Keys (held, or named and not found) a result lists at most; it counts them all.
const LISTED: usize = 20;

/// Run delete job `rec` to its end; returns its result document.
pub async fn run<E: TapeExecutor>(
    rt: &Arc<Runtime<E>>,
    rec: &JobRecord,
    job: &DeleteJob,
    cancel: &CancellationToken,
) -> Result<serde_json::Value> {
    let Some(cat) = rt.executor.object_catalogue() else {
        return Err(JobsError::Internal(
            "this worker's executor has no catalogue to delete from".into(),
        ));
    };
    let mut sorted;
    let scope = match &job.selection {
        DeleteSelection::Keys(keys) => {
            sorted = keys.clone();
            sorted.sort();
            sorted.dedup();
            DeleteScope::Keys(&sorted)
        }
        DeleteSelection::Prefix(p) => DeleteScope::Prefix(p),
    };
    let total = match scope {
        DeleteScope::Keys(k) => k.len() as u64,
        DeleteScope::Prefix(_) => 0,
    };
    let deletion = cat
        .open_deletion(&rec.id, &job.by, &job.reason, &scope)
        .await?;
    let batch_keys = rt.config.lifecycle.delete_batch as usize;
    let (mut keys, mut objects) = (0u64, 0u64);
    let (mut held, mut held_count) = (Vec::new(), 0u64);
    let (mut missing, mut missing_count) = (Vec::new(), 0u64);
    let mut after = String::new();
    loop {
        if cancel.is_cancelled() {
            tracing::info!(deletion, keys, "delete stopped between two batches");
            return Err(JobsError::Cancelled(rec.id.clone()));
        }
        let b = cat
            .delete_batch(deletion, &scope, &after, batch_keys)
            .await?;
        keys += b.keys;
        objects += b.objects;
        held_count += b.held.len() as u64;
        missing_count += b.missing.len() as u64;
        for (key, hold) in b.held {
            if held.len() < LISTED {
                held.push(serde_json::json!({"key": key, "hold": hold}));
            }
        }
        for key in b.missing {
            if missing.len() < LISTED {
                missing.push(key);
            }
        }
        let looked = keys + held_count + missing_count;
        rt.queue
            .store()
            .set_progress(
                &rec.id,
                Progress {
                    objects_done: keys,
                    objects_total: total.max(looked),
                    bytes_done: 0,
                    bytes_total: 0,
                },
            )
            .await?;
        match (b.more, b.last) {
            (true, Some(last)) => after = last,
            _ => break,
        }
    }
    tracing::info!(deletion, keys, objects, held = held_count, "deleted");
    Ok(serde_json::json!({
        "deletion": deletion,
        "keys": keys,
        "objects": objects,
        "held_count": held_count,
        "held": held,
        "missing_count": missing_count,
        "missing": missing,
        "quarantine_days": rt.config.lifecycle.quarantine_days,
    }))
}
