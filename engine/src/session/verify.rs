//! Read-back of containers: every record is pushed through the format's reader, which checks
//! the header, every object's SHA-256, the container's SHA-256 and the footer. Consecutive
//! containers are read in one sequential pass: a LOCATE is issued only where there is a gap.

use tracing::{debug, warn};

use super::{CancelToken, SessionError, SessionSummary, secs};
use crate::device::lbp::{Checked, ReadTime, read_checked};
use crate::device::{DeviceError, Drive};
use crate::format::{ContainerReader, MAX_RECORD_SIZE};
use crate::integrity::CatchKind;

/// One container to read back.
#[derive(Clone, Debug)]
pub struct VerifyTarget {
    /// Catalogue id.
    pub id: i64,
    /// Block of its header record.
    pub first_block: u64,
    /// Block of its last footer record (the filemark follows).
    pub last_block: u64,
    /// The container SHA-256 the catalogue holds.
    pub sha256: [u8; 32],
    /// Number of objects the catalogue holds for it.
    pub objects: usize,
}

/// Result of a read-back.
#[derive(Debug, Default)]
pub struct VerifyReport {
    /// Per container: Ok, or what was wrong.
    pub results: Vec<(i64, Result<(), String>)>,
    /// Drive time spent.
    pub summary: SessionSummary,
}

/// What a read-back does when the drive (not the medium) fails under it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum DriveFault {
    /// Record it as the failure of the container being read and go on (the write session's
    /// read-back, whose caller settles what it could not verify).
    Record,
    /// Stop the pass with [`SessionError::Device`]: nothing is judged by a failing drive
    /// (a verify job's pass; its requests are retried on a drive that works).
    Stop,
}

/// Read back `targets` (sorted by block) on the mounted cartridge.
pub async fn read_back(
    drive: &Drive,
    barcode: &str,
    targets: &[VerifyTarget],
    on_drive_fault: DriveFault,
    cancel: &CancelToken,
) -> Result<VerifyReport, SessionError> {
    let stop = move |e: &DeviceError| on_drive_fault == DriveFault::Stop && e.is_drive_fault();
    let mut targets = targets.to_vec();
    targets.sort_by_key(|t| t.first_block);
    let cancel = cancel.clone();
    let barcode = barcode.to_string();
    let lbp = drive.lbp_enabled();
    let reporter = drive.reporter(&barcode);
    let report = drive
        .run(move |h| {
            let mut rep = VerifyReport::default();
            let mut buf = vec![0u8; MAX_RECORD_SIZE + 4096];
            let mut at: Option<u64> = None;
            for t in &targets {
                if cancel.is_cancelled() {
                    return Err(SessionError::Cancelled);
                }
                if at != Some(t.first_block) {
                    match h.locate(t.first_block) {
                        Ok(()) => {
                            rep.summary.position_s += secs(h.last_status().elapsed_ns);
                            rep.summary.locates += 1;
                        }
                        Err(e) => {
                            let e = DeviceError::from_call(e);
                            if stop(&e) {
                                return Err(SessionError::Device(e));
                            }
                            rep.results.push((
                                t.id,
                                Err(format!("cannot locate to block {}: {e}", t.first_block)),
                            ));
                            at = None;
                            continue;
                        }
                    }
                }
                let mut reader = ContainerReader::new();
                let mut failure: Option<String> = None;
                let mut block = t.first_block;
                loop {
                    // Damage on the way from the drive (LBP) says nothing about the medium:
                    // the record is read once more before the container is judged (a verdict
                    // of damage kills it), by the rule every read follows (`device::lbp`).
                    let mut time = ReadTime::default();
                    let read = read_checked(h, block, &mut buf, lbp, &reporter, &mut time);
                    rep.summary.transfer_s += secs(time.transfer_ns);
                    rep.summary.position_s += secs(time.position_ns);
                    rep.summary.locates += time.locates;
                    match read {
                        Ok(Checked::Whole(r)) => {
                            rep.summary.bytes += r.len as u64;
                            if failure.is_none()
                                && let Err(e) = reader.push_record(&buf[..r.len])
                            {
                                failure = Some(format!("block {block}: {e}"));
                                reporter.report(
                                    CatchKind::Content,
                                    block,
                                    block,
                                    Some(t.id),
                                    format!("container {}: block {block}: {e}", t.id),
                                );
                            }
                            block += 1;
                        }
                        Ok(Checked::Damaged(why)) => {
                            failure.get_or_insert(why);
                            block += 1;
                            // The rest of the container is read on, from the next record; if
                            // the drive cannot get there its position is unknown, and the next
                            // target is located afresh.
                            let located = h.locate(block);
                            rep.summary.position_s += secs(h.last_status().elapsed_ns);
                            rep.summary.locates += 1;
                            if located.is_err() {
                                block = u64::MAX;
                                break;
                            }
                        }
                        Err(e) => match e {
                            DeviceError::Filemark { .. } => {
                                block += 1;
                                break;
                            }
                            other if stop(&other) => {
                                return Err(SessionError::Device(other));
                            }
                            other => {
                                failure.get_or_insert(format!("block {block}: {other}"));
                                block = skip_to_filemark(h, &mut rep, t);
                                break;
                            }
                        },
                    }
                }
                at = (block != u64::MAX).then_some(block);
                // A failure met while reading was reported where it was met; a verdict on
                // what was read whole (framing, SHA-256, extent) is reported below.
                let judged_whole = failure.is_none();
                let result = match failure {
                    Some(f) => Err(f),
                    None => match reader.finish() {
                        Err(e) => Err(e.to_string()),
                        Ok((_h, footer)) => {
                            if footer.sha256 != t.sha256 {
                                Err("container SHA-256 differs from the catalogue's".into())
                            } else if footer.entries.len() < t.objects {
                                // Fewer only: a copy a repack moved off this cartridge has
                                // left the catalogue while its bytes stay in the container,
                                // so the catalogue may count fewer than the footer lists.
                                Err(format!(
                                    "footer lists {} objects, the catalogue {}",
                                    footer.entries.len(),
                                    t.objects
                                ))
                            } else if block != t.last_block + 2 {
                                Err(format!(
                                    "container ends at block {}, the catalogue says {}",
                                    block.saturating_sub(2),
                                    t.last_block
                                ))
                            } else {
                                Ok(())
                            }
                        }
                    },
                };
                if let Err(r) = &result {
                    if judged_whole {
                        reporter.report(
                            CatchKind::Content,
                            t.first_block,
                            t.last_block,
                            Some(t.id),
                            format!("container {}: {r}", t.id),
                        );
                    }
                    warn!(barcode = %barcode, container = t.id, reason = %r, "verify failed");
                } else {
                    debug!(barcode = %barcode, container = t.id, "verified");
                }
                rep.results.push((t.id, result));
            }
            Ok(rep)
        })
        .await??;
    Ok(report)
}

/// After a record of container `t` could not be read: space to its filemark so the pass goes
/// on with the next container; returns the block reached (`u64::MAX`: position unknown).
fn skip_to_filemark(
    h: &mut reel_plugin_abi::host::DriveHandle,
    rep: &mut VerifyReport,
    t: &VerifyTarget,
) -> u64 {
    match h.space(reel_plugin_abi::REEL_SPACE_FILEMARKS, 1) {
        Ok(()) => {
            rep.summary.position_s += secs(h.last_status().elapsed_ns);
            t.last_block + 2
        }
        Err(_) => u64::MAX,
    }
}
