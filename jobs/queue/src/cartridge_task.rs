//! Cartridge tasks: the tape work of verify, intake and rebuild jobs, queued as tape requests
//! on one cartridge like a recall's reads.
//!
//! A verify job becomes one request per container, an intake job one per cartridge to label, a
//! rebuild job one per cartridge to read. Each request's target is
//! [`MountTarget::Read`](crate::mount::MountTarget::Read) of its cartridge, so the
//! scheduler decides when and where it is mounted, the drive board shows the mount, the drive
//! loop unloads it as it does any other, and a batch on a cartridge serves a recall and a
//! verify of it in one mount. The task travels in the request's `detail` as `{"op": …}`; a
//! read request without `op` is a recall read.
//!
//! A task's outcome is recorded on its request ([`TaskResult`]) and the job's result is built
//! from them by [`job_result`] when the last request ends.

use serde::{Deserialize, Serialize};

use crate::error::{JobsError, Result};
use crate::job::JobKind;
use crate::requests::{JobRequestCounts, TapeRequest};

/// What a read request asks of its mounted cartridge besides a recall.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "op", rename_all = "snake_case")]
pub enum CartridgeTask {
    /// Read back one container and mark it verified or dead.
    Verify {
        /// Catalogue container id.
        container: i64,
    },
    /// Calibrate and label a new cartridge into `pool`.
    Label {
        /// The pool it joins.
        pool: String,
    },
    /// Rebuild the cartridge's catalogue entries from the tape.
    Rebuild {
        /// Whether the library reports the cartridge WORM.
        worm: bool,
    },
    /// Read the cartridge's label and compare it with the catalogue; a cartridge whose label
    /// differs is marked broken with what differs.
    CheckLabel,
    /// Relabel a cartridge with no data left to keep, with the next label epoch, and give it
    /// back to its pool (reclaim).
    Reclaim,
}

impl CartridgeTask {
    /// The task a request carries; `None` for a recall read (no `op` in its detail).
    pub fn of(r: &TapeRequest) -> Result<Option<CartridgeTask>> {
        if r.detail.get("op").is_none() {
            return Ok(None);
        }
        serde_json::from_value(r.detail.clone())
            .map(Some)
            .map_err(|e| JobsError::RequestDetail {
                request: r.id,
                reason: format!("bad cartridge task: {e}"),
            })
    }

    /// The request detail that carries this task.
    pub fn detail(&self) -> serde_json::Value {
        // A plain enum of strings, integers and booleans always serializes.
        serde_json::to_value(self).unwrap_or(serde_json::Value::Null)
    }

    /// The name a request of this task shows where an object key would stand (failures in a
    /// job's error, `reel jobs show`).
    pub fn label(&self, barcode: &str) -> String {
        match self {
            CartridgeTask::Verify { container } => format!("container {container} on {barcode}"),
            CartridgeTask::Label { .. }
            | CartridgeTask::Rebuild { .. }
            | CartridgeTask::CheckLabel
            | CartridgeTask::Reclaim => format!("cartridge {barcode}"),
        }
    }
}

/// What one finished request reports into its job's result, in request order.
pub type TaskResult = serde_json::Value;

/// What a job's requests count: objects (archive, recall), containers (verify) or cartridges
/// (intake, rebuild).
pub fn unit(kind: JobKind) -> &'static str {
    match kind {
        JobKind::Archive | JobKind::Recall | JobKind::Delete | JobKind::Repack => "objects",
        JobKind::Verify => "containers",
        JobKind::Intake | JobKind::Rebuild | JobKind::Reclaim => "cartridges",
    }
}

/// The result document of a job whose requests all ended done, from their counts and the
/// results recorded on them (in request order).
pub fn job_result(
    kind: JobKind,
    counts: &JobRequestCounts,
    results: Vec<TaskResult>,
) -> serde_json::Value {
    match kind {
        JobKind::Archive => {
            serde_json::json!({"objects": counts.total, "bytes": counts.bytes_total})
        }
        JobKind::Recall => recall_result(counts, &results),
        // A label check reports what it found; a container's read-back reports nothing.
        JobKind::Verify if !results.is_empty() => serde_json::json!({
            "verified": counts.done,
            "bytes": counts.bytes_total,
            "labels": results,
        }),
        JobKind::Verify => {
            serde_json::json!({"verified": counts.done, "bytes": counts.bytes_total})
        }
        JobKind::Intake | JobKind::Rebuild | JobKind::Reclaim => {
            serde_json::json!({"cartridges": results})
        }
        // A delete has no tape requests: its result is made where it runs (the worker).
        JobKind::Delete => serde_json::json!({"keys": counts.done}),
        // A repack's result is made where it runs too.
        JobKind::Repack => serde_json::json!({"objects": counts.done}),
    }
}

/// A recall job's result. Its requests' results (see the executor) carry the objects read
/// after a bad copy (`key`, `bad_copies`) and, on the first object each read session
/// delivered, that session's drive time: `first_byte_s` (from the session's start to its
/// first byte: positioning and the first record, not the mount) and `read_s`. The job reports
/// the bad copies, the earliest first byte of its sessions and their summed drive time.
fn recall_result(counts: &JobRequestCounts, results: &[TaskResult]) -> serde_json::Value {
    let mut v = serde_json::json!({"objects": counts.total, "bytes": counts.bytes_total});
    let bad: Vec<serde_json::Value> = results
        .iter()
        .filter(|r| r.get("bad_copies").is_some())
        .map(|r| serde_json::json!({"key": r["key"], "bad_copies": r["bad_copies"]}))
        .collect();
    if !bad.is_empty() {
        v["bad_copies"] = serde_json::json!(bad);
    }
    let first_byte = results
        .iter()
        .filter_map(|r| r.get("first_byte_s").and_then(serde_json::Value::as_f64))
        .reduce(f64::min);
    if let Some(f) = first_byte {
        v["first_byte_s"] = serde_json::json!(f);
    }
    let read_s: Vec<f64> = results
        .iter()
        .filter_map(|r| r.get("read_s").and_then(serde_json::Value::as_f64))
        .collect();
    if !read_s.is_empty() {
        v["read_s"] = serde_json::json!(read_s.iter().sum::<f64>());
    }
    v
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;
    use crate::mount::MountTarget;

    /// A claimed read request (id 7) carrying `detail`, for the detail parsers' tests.
    pub(crate) fn request(detail: serde_json::Value) -> TapeRequest {
        TapeRequest {
            id: 7,
            job_id: "j".into(),
            target: MountTarget::Read {
                barcode: "RL0001L9".into(),
            },
            pool: None,
            object_key: "k".into(),
            bytes: 0,
            files: 1,
            priority: 0,
            detail,
            state: "claimed".into(),
            claimed_by: None,
            claim_epoch: None,
            error: None,
            attempts: 0,
        }
    }

    #[test]
    fn a_task_round_trips_through_a_request_detail_and_a_recall_read_has_none() {
        for t in [
            CartridgeTask::Verify { container: 12 },
            CartridgeTask::Label {
                pool: "main".into(),
            },
            CartridgeTask::Rebuild { worm: true },
            CartridgeTask::CheckLabel,
        ] {
            assert_eq!(CartridgeTask::of(&request(t.detail())).unwrap(), Some(t));
        }
        let recall = request(serde_json::json!({"sha256": "00", "offset": 0}));
        assert_eq!(CartridgeTask::of(&recall).unwrap(), None);
    }

    #[test]
    fn an_unknown_op_is_an_error_naming_the_request() {
        let e = CartridgeTask::of(&request(serde_json::json!({"op": "erase"}))).unwrap_err();
        assert!(e.to_string().contains("request 7"), "{e}");
    }

    #[test]
    fn job_results_by_kind() {
        let c = JobRequestCounts {
            total: 3,
            done: 3,
            failed: 0,
            claimed: 0,
            bytes_total: 30,
            bytes_done: 30,
        };
        assert_eq!(
            job_result(JobKind::Verify, &c, vec![]),
            serde_json::json!({"verified": 3, "bytes": 30})
        );
        let r = serde_json::json!({"barcode": "A"});
        assert_eq!(
            job_result(JobKind::Intake, &c, vec![r.clone()]),
            serde_json::json!({"cartridges": [r]})
        );
        assert_eq!(unit(JobKind::Rebuild), "cartridges");
        assert_eq!(
            job_result(JobKind::Recall, &c, vec![]),
            serde_json::json!({"objects": 3, "bytes": 30})
        );
        let bad = serde_json::json!({"key": "k", "bad_copies": ["B"]});
        assert_eq!(
            job_result(JobKind::Recall, &c, vec![bad.clone()]),
            serde_json::json!({"objects": 3, "bytes": 30, "bad_copies": [bad]})
        );
        // Two sessions: the earliest first byte, the drive time summed; a session's timing and
        // a bad copy may share one request's result.
        let a = serde_json::json!({"first_byte_s": 4.0, "read_s": 10.0, "key": "k", "bad_copies": ["B"]});
        let b = serde_json::json!({"first_byte_s": 2.5, "read_s": 1.5});
        assert_eq!(
            job_result(JobKind::Recall, &c, vec![a, b]),
            serde_json::json!({"objects": 3, "bytes": 30, "bad_copies": [bad],
                               "first_byte_s": 2.5, "read_s": 11.5})
        );
    }
}
