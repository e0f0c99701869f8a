//! The crash rules, applied when a cartridge with pending containers is mounted again.
//!
//! A container still `pending` was never covered by a synchronous barrier, so it was never
//! acknowledged: whatever of it reached the medium is dead space. Recovery marks those
//! containers dead, closes any tail past the last barrier with one synchronous filemark (at end
//! of data: nothing is ever written elsewhere), and records the real end of data. The objects
//! of dead containers are written again by the archive job's retry.

use reel_plugin_abi::REEL_SPACE_EOD;
use serde::Serialize;
use tracing::{info, warn};

use super::SessionError;
use crate::catalogue::{Cartridge, Catalogue, ContainerState};
use crate::device::Drive;

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
    } else if pos.block > cartridge.eod_block {
        // A tail past the last barrier: close it so the next container starts a new file.
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
