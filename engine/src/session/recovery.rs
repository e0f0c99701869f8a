//! The crash rules, applied when a cartridge with pending containers is mounted again.
//!
//! A container still `pending` was never covered by a synchronous barrier, so it was never
//! acknowledged: whatever of it reached the medium is dead space. Recovery marks those
//! containers dead, closes any tail past the last barrier with one synchronous filemark (at end
//! of data: nothing is ever written elsewhere), and records the real end of data. The objects
//! of dead containers are written again by the archive job's retry.
//!
//! A tail that is not this catalogue's is never appended to. Its first record is read before
//! anything is written: a container header whose UUID the catalogue records on this cartridge
//! (the pending container a crash interrupted) is a tail to close; an empty file is a tail an
//! earlier recovery closed; anything else (another catalogue's container, a foreign record, an
//! unreadable block) is orphan data. Recovery then writes nothing, marks the cartridge full (it
//! stays readable), reports what it found in [`RecoveryReport::orphan`] and warns the operator
//! to take the data in with `reel catalog rebuild`.

use reel_plugin_abi::REEL_SPACE_EOD;
use serde::Serialize;
use tracing::{info, warn};

use super::SessionError;
use crate::catalogue::{Cartridge, CartridgeState, Catalogue, Container, ContainerState};
use crate::device::lbp::{Checked, ReadTime, read_checked};
use crate::device::{DeviceError, Drive, Sense};
use crate::format::{ContainerHeader, MAX_RECORD_SIZE};

/// What recovery found and did.
#[derive(Clone, Debug, Default, Serialize, PartialEq, Eq)]
pub struct RecoveryReport {
    /// Pending containers marked dead.
    pub dead_containers: Vec<i64>,
    /// End of data the catalogue had.
    pub catalogue_eod: u64,
    /// End of data found on tape.
    pub tape_eod: u64,
    /// Whether a filemark was written to close a tail.
    pub closed_tail: bool,
    /// Durable containers that the tape no longer holds (must stay empty).
    pub lost_durable: Vec<i64>,
    /// Data past the catalogue's end of data that this catalogue did not write (what was
    /// found): nothing was appended and the cartridge is marked full.
    pub orphan: Option<String>,
}

/// Recover the cartridge mounted in `drive`.
pub async fn recover_cartridge(
    catalogue: &Catalogue,
    drive: &Drive,
    cartridge: &Cartridge,
) -> Result<RecoveryReport, SessionError> {
    let mut rep = RecoveryReport {
        catalogue_eod: cartridge.eod_block,
        ..Default::default()
    };
    let containers = catalogue.containers_on(&cartridge.barcode).await?;
    rep.dead_containers = containers
        .iter()
        .filter(|c| c.state == ContainerState::Pending)
        .map(|c| c.id)
        .collect();
    drive.space(REEL_SPACE_EOD, 0).await?;
    let pos = drive.read_position().await?;
    rep.tape_eod = pos.block;
    let (mut eod, mut file) = (pos.block, pos.file);
    if pos.block < cartridge.eod_block {
        // Durable data is missing: a barrier was acknowledged that the medium does not hold.
        rep.lost_durable = containers
            .iter()
            .filter(|c| {
                matches!(c.state, ContainerState::Durable | ContainerState::Verified)
                    && c.last_block.unwrap_or(c.first_block) >= pos.block
            })
            .map(|c| c.id)
            .collect();
        warn!(barcode = %cartridge.barcode, tape_eod = pos.block, catalogue_eod = cartridge.eod_block, lost = ?rep.lost_durable, "end of data is before the last barrier");
        if !rep.lost_durable.is_empty() {
            catalogue
                .set_container_state(&rep.lost_durable, ContainerState::Dead)
                .await?;
        }
    } else if pos.block > cartridge.eod_block
        && let Some(found) = foreign_tail(
            drive,
            &cartridge.barcode,
            cartridge.eod_block,
            pos.block,
            &containers,
        )
        .await?
    {
        warn!(barcode = %cartridge.barcode, catalogue_eod = cartridge.eod_block, tape_eod = pos.block, %found, "data past the catalogue's end of data that this catalogue did not write: nothing is appended, the cartridge is marked full; run `reel catalog rebuild {}` to take it in", cartridge.barcode);
        if !rep.dead_containers.is_empty() {
            catalogue
                .set_container_state(&rep.dead_containers, ContainerState::Dead)
                .await?;
        }
        catalogue
            .set_cartridge_state(&cartridge.barcode, CartridgeState::Full)
            .await?;
        rep.orphan = Some(found);
        return Ok(rep);
    } else if pos.block > cartridge.eod_block {
        // A tail past the last barrier: close it so the next container starts a new file
        // (the look at its first record moved the tape: back to end of data first).
        drive.space(REEL_SPACE_EOD, 0).await?;
        drive.write_filemarks(1, false).await?;
        let p = drive.read_position().await?;
        eod = p.block;
        file = p.file;
        rep.closed_tail = true;
    }
    if !rep.dead_containers.is_empty() {
        catalogue
            .set_container_state(&rep.dead_containers, ContainerState::Dead)
            .await?;
    }
    catalogue
        .set_eod(&cartridge.barcode, eod, file, cartridge.used_bytes)
        .await?;
    info!(barcode = %cartridge.barcode, dead = rep.dead_containers.len(), tape_eod = rep.tape_eod, closed_tail = rep.closed_tail, "recovered");
    Ok(rep)
}

/// What lies between the catalogue's end of data `from` and the tape's `to`, when it is not
/// this catalogue's: None for a tail it wrote (its first record is the header of a container
/// the catalogue records on this cartridge) or an empty file an earlier recovery closed.
async fn foreign_tail(
    drive: &Drive,
    barcode: &str,
    from: u64,
    to: u64,
    ours: &[Container],
) -> Result<Option<String>, SessionError> {
    drive.locate(from).await?;
    let lbp = drive.lbp_enabled();
    let reporter = drive.reporter(barcode);
    let first = drive
        .run(move |h| {
            let mut buf = vec![0u8; MAX_RECORD_SIZE + 4096];
            let mut block = from;
            // Filemarks closing empty files are skipped; the first record decides. One that
            // arrives damaged twice decides nothing: the recovery fails, to be tried again.
            while block < to {
                let mut time = ReadTime::default();
                match read_checked(h, block, &mut buf, lbp, &reporter, &mut time) {
                    Ok(Checked::Whole(r)) => {
                        buf.truncate(r.len);
                        return Ok(Some((block, buf)));
                    }
                    Ok(Checked::Damaged(why)) => {
                        return Err(DeviceError::LbpMismatch {
                            call: "drive_read_record",
                            sense: Sense {
                                key: 0x0B,
                                asc: 0x10,
                                ascq: 0x01,
                            },
                            detail: format!("the tail past the catalogue's end of data: {why}"),
                        });
                    }
                    Err(e) => match e {
                        DeviceError::Filemark { .. } => block += 1,
                        DeviceError::EndOfData { .. } => return Ok(None),
                        other => return Err(other),
                    },
                }
            }
            Ok(None)
        })
        .await?;
    let (block, rec) = match first {
        Ok(Some(found)) => found,
        Ok(None) => return Ok(None),
        // A failing drive says nothing about the tape: the caller ejects and tries again.
        // Nor does a record damaged on the way from it, twice.
        Err(e) if e.is_drive_fault() || matches!(e, DeviceError::LbpMismatch { .. }) => {
            return Err(SessionError::Device(e));
        }
        Err(e) => return Ok(Some(format!("an unreadable block past block {from}: {e}"))),
    };
    Ok(match ContainerHeader::decode(&rec) {
        Ok(h) if ours.iter().any(|c| c.uuid == h.container_uuid) => None,
        Ok(h) => Some(format!(
            "container {} at block {block}, which this catalogue does not know",
            h.container_uuid
        )),
        Err(_) => Some(format!(
            "a {}-byte record at block {block} that is not a reel container header",
            rec.len()
        )),
    })
}
