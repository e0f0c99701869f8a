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
        .open_deletion(
            &rec.id,
            &job.by,
            &job.reason,
            &scope,
            rt.config.lifecycle.quarantine_secs(),
        )
        .await?;
    let batch_keys = rt.config.lifecycle.delete_batch as usize;
    let (mut keys, mut objects) = (0u64, 0u64);
    let (mut held, mut held_count) = (Vec::new(), 0u64);
    let (mut missing, mut missing_count) = (Vec::new(), 0u64);
    let (mut retained, mut retained_count) = (Vec::new(), 0u64);
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
        retained_count += b.retained.len() as u64;
        for key in b.retained {
            if retained.len() < LISTED {
                retained.push(key);
            }
        }
        let looked = keys + held_count + missing_count + retained_count;
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
    // What the deletion holds: this attempt's keys and those of any attempt before it (a
    // crash, a cancel and a retry).
    let (all_keys, all_objects) = cat.deletion_size(deletion).await?;
    Ok(serde_json::json!({
        "deletion": deletion,
        "keys": all_keys,
        "objects": all_objects,
        "keys_this_attempt": keys,
        "held_count": held_count,
        "held": held,
        "missing_count": missing_count,
        "missing": missing,
        "retained_count": retained_count,
        "retained": retained,
        "quarantine_days": rt.config.lifecycle.quarantine_days,
    }))
}

/// Most batches one expiry pass runs; what is left waits for the next pass, which then comes
/// at the next maintenance tick.
const EXPIRE_BATCHES: usize = 50;

/// One expiry pass: delete, as reel, the generations of the storage classes whose retention
/// says `expire` once it is over, in batches of `[lifecycle] delete_batch`, leaving what a
/// legal hold covers. They go to the recycle log like any delete (undelete brings them back
/// during the quarantine). Returns how many were deleted and whether more are due.
pub async fn expire<E: TapeExecutor>(rt: &Runtime<E>) -> Result<(u64, bool)> {
    let classes = rt.config.lifecycle.expiring_classes();
    let Some(cat) = rt.executor.object_catalogue() else {
        return Ok((0, false));
    };
    if classes.is_empty() {
        return Ok((0, false));
    }
    let run = format!("expiry-{}-{}", rt.name, reel_queue::db::now_ms());
    let deletion = cat
        .open_expiry(&run, &classes, rt.config.lifecycle.quarantine_secs())
        .await?;
    let batch = rt.config.lifecycle.delete_batch as usize;
    let (mut objects, mut held, mut after) = (0u64, 0u64, 0i64);
    let mut more = false;
    for _ in 0..EXPIRE_BATCHES {
        if rt.shutdown.is_cancelled() {
            more = true;
            break;
        }
        let b = cat.expire_batch(deletion, &classes, after, batch).await?;
        objects += b.objects;
        held += b.held;
        more = b.more;
        match (b.more, b.last_id) {
            (true, Some(id)) => after = id,
            _ => break,
        }
    }
    if objects == 0 {
        cat.drop_empty_deletion(deletion).await?;
    } else {
        tracing::info!(
            deletion,
            objects,
            held,
            "expired what its retention no longer keeps"
        );
    }
    Ok((objects, more))
}
