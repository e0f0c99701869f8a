//! `catalog rebuild`: the catalogue reconstructed from a tape alone. The label gives the
//! cartridge's identity and pool; each file after it is a container whose header, records and
//! footer are checked as they are read. A container that does not check out (a dead tail) is
//! recorded dead; an empty file (a filemark closing a tail) is skipped.
//!
//! The cartridge's state and end of data come from the tape too: the end of data is where
//! the drive reports it after the last file, and a cartridge whose end of data lies past early
//! warning (the drive's `REEL_POS_EOP`), or with less room left than the least object needs,
//! comes back full, so it is never chosen for a write that cannot fit. A cartridge the
//! catalogue already knows is corrected the same way: a rebuild never makes it writable again
//! if the catalogue had taken it out of writing (full, broken, disabled).

use reel_plugin_abi::REEL_POS_EOP;
use serde::Serialize;
use tracing::{info, warn};

use super::mount::{LabelState, read_label};
use super::space::{least_needed, record_capacity, reported_remaining};
use super::{CancelToken, SessionConfig, SessionError};
use crate::catalogue::{CartridgeState, Catalogue, ContainerState, NewCopy};
use crate::device::lbp::{Checked, ReadTime, read_checked};
use crate::device::{DeviceError, Drive};
use crate::format::{ContainerReader, MAX_RECORD_SIZE};

/// What a rebuild found on one cartridge.
#[derive(Clone, Debug, Serialize)]
pub struct RebuildReport {
    /// Barcode.
    pub barcode: String,
    /// Containers recovered intact.
    pub containers: u64,
    /// Objects recovered.
    pub objects: u64,
    /// Containers that did not check out (dead space).
    pub dead: u64,
    /// Containers already in the catalogue (skipped).
    pub known: u64,
    /// End of data (block), as the drive reports it after the last file.
    pub eod_block: u64,
    /// The file number the next container takes.
    pub next_file: u64,
    /// Whether the drive reported the end of data past early warning.
    pub past_early_warning: bool,
    /// Bytes left on the cartridge after its containers' data (None: capacity unknown).
    pub room_left: Option<u64>,
    /// The cartridge's state in the catalogue after the rebuild.
    pub state: CartridgeState,
}

struct Found {
    file: u64,
    first_block: u64,
    last_block: u64,
    parsed: Result<(crate::format::ContainerHeader, crate::format::Footer), String>,
}

/// Rebuild the catalogue entries of the cartridge mounted in `drive`.
pub async fn rebuild_cartridge(
    catalogue: &Catalogue,
    drive: &Drive,
    barcode: &str,
    capacity_bytes: u64,
    worm: bool,
    config: &SessionConfig,
    cancel: &CancelToken,
) -> Result<RebuildReport, SessionError> {
    let label = match read_label(drive, barcode).await? {
        LabelState::Reel(l) => l,
        LabelState::Blank => {
            return Err(SessionError::Cartridge {
                barcode: barcode.into(),
                reason: "is blank: nothing to rebuild".into(),
            });
        }
        LabelState::Foreign(r) => {
            return Err(SessionError::Cartridge {
                barcode: barcode.into(),
                reason: format!("is not a reel cartridge ({r})"),
            });
        }
    };
    if label.barcode != barcode {
        warn!(barcode, label = %label.barcode, "label barcode differs from the library's");
    }
    catalogue
        .add_cartridge(barcode, worm, capacity_bytes)
        .await?;
    // A cartridge taken out of writing stays out: relabelling in the catalogue (a label it
    // had not seen) makes it active, so its state is put back after.
    let was = catalogue.cartridge(barcode).await?.map(|c| c.state);
    catalogue.ensure_pool(&label.pool).await?;
    catalogue
        .set_labelled(barcode, &label.pool, label.cartridge_uuid, label.epoch)
        .await?;
    catalogue.set_calibrated(barcode).await?;
    if let Some(
        state @ (CartridgeState::Disabled
        | CartridgeState::Full
        | CartridgeState::Broken
        | CartridgeState::Repacking),
    ) = was
    {
        catalogue.set_cartridge_state(barcode, state).await?;
    }
    // The capacity the drive reports for this medium, else the configured default.
    let capacity = record_capacity(catalogue, drive, barcode).await?;
    let cancel = cancel.clone();
    let lbp = drive.lbp_enabled();
    let reporter = drive.reporter(barcode);
    // Read every file after the label (block 2 onwards) on the drive thread.
    let (found, eod, eof_file, eop) = drive
        .run(move |h| -> Result<(Vec<Found>, u64, u64, bool), SessionError> {
            h.locate(2).map_err(DeviceError::from_call)?;
            let mut buf = vec![0u8; MAX_RECORD_SIZE + 4096];
            let mut out = Vec::new();
            let mut block = 2u64;
            let mut file = 1u64;
            loop {
                if cancel.is_cancelled() {
                    return Err(SessionError::Cancelled);
                }
                let first_block = block;
                let mut reader = ContainerReader::new();
                let mut err: Option<String> = None;
                let mut records = 0u64;
                let end_of_data;
                loop {
                    let mut time = ReadTime::default();
                    match read_checked(h, block, &mut buf, lbp, &reporter, &mut time) {
                        Ok(Checked::Whole(r)) => {
                            records += 1;
                            block += 1;
                            if err.is_none()
                                && let Err(e) = reader.push_record(&buf[..r.len])
                            {
                                err = Some(format!("block {}: {e}", block - 1));
                            }
                        }
                        Ok(Checked::Damaged(why)) => {
                            records += 1;
                            err.get_or_insert(why);
                            block += 1;
                            if let Err(e) = h.locate(block) {
                                return Err(SessionError::Device(DeviceError::from_call(e)));
                            }
                        }
                        Err(e) => match e {
                            DeviceError::Filemark { .. } => {
                                block += 1;
                                end_of_data = false;
                                break;
                            }
                            DeviceError::EndOfData { .. } => {
                                end_of_data = true;
                                break;
                            }
                            other => {
                                err.get_or_insert(format!("block {block}: {other}"));
                                // Step over the bad block and keep going.
                                block += 1;
                                if h.locate(block).is_err() {
                                    return Err(SessionError::Device(other));
                                }
                            }
                        },
                    }
                }
                if records > 0 {
                    let parsed = match err {
                        Some(e) => Err(e),
                        None => reader.finish().map_err(|e| e.to_string()),
                    };
                    out.push(Found {
                        file,
                        first_block,
                        last_block: first_block + records - 1,
                        parsed,
                    });
                }
                if end_of_data {
                    // The drive's own position at end of data: its block, and whether it lies
                    // past early warning. A drive that cannot say keeps the count read.
                    let (eod, eop) = match h.read_position() {
                        Ok(p) => (p.block, p.flags & REEL_POS_EOP != 0),
                        Err(e) => {
                            warn!(error = %DeviceError::from_call(e), "no position at end of data; using the blocks counted");
                            (block, false)
                        }
                    };
                    return Ok((out, eod, file, eop));
                }
                file += 1;
            }
        })
        .await??;
    let mut rep = RebuildReport {
        barcode: barcode.to_string(),
        containers: 0,
        objects: 0,
        dead: 0,
        known: 0,
        eod_block: eod,
        next_file: eof_file,
        past_early_warning: eop,
        room_left: None,
        state: CartridgeState::Active,
    };
    let existing = catalogue.containers_on(barcode).await?;
    let mut used = 0u64;
    for f in found {
        match f.parsed {
            Ok((header, footer)) => {
                if existing.iter().any(|c| c.uuid == header.container_uuid) {
                    rep.known += 1;
                    used += footer.data_bytes;
                    continue;
                }
                // Recorded as found, whatever the cartridge's state (a rebuild writes nothing).
                let id = catalogue
                    .record_found_container(
                        header.container_uuid,
                        barcode,
                        f.file,
                        f.first_block,
                        header.record_size,
                    )
                    .await?;
                let copies: Vec<NewCopy> = footer
                    .entries
                    .iter()
                    .map(|e| NewCopy {
                        key: e.key.clone(),
                        generation: e.generation,
                        size: e.length,
                        sha256: e.sha256,
                        offset: e.offset,
                        length: e.length,
                        meta: e.meta,
                    })
                    .collect();
                catalogue
                    .close_container(id, f.last_block, footer.data_bytes, footer.sha256, &copies)
                    .await?;
                // Every byte was just read back and checked.
                catalogue
                    .set_container_state(&[id], ContainerState::Verified)
                    .await?;
                used += footer.data_bytes;
                rep.containers += 1;
                rep.objects += copies.len() as u64;
            }
            Err(reason) => {
                warn!(barcode, file = f.file, %reason, "dead container");
                rep.dead += 1;
            }
        }
    }
    catalogue.set_eod(barcode, eod, eof_file, used).await?;
    let capacity = if capacity > 0 {
        capacity
    } else {
        capacity_bytes
    };
    // As a write session counts it: the smaller of the capacity less the data and what the
    // drive reports left (which also counts dead tails).
    let by_data = (capacity > 0).then(|| capacity.saturating_sub(used));
    rep.room_left = match (by_data, reported_remaining(drive).await) {
        (Some(a), Some(b)) => Some(a.min(b)),
        (a, b) => a.or(b),
    };
    let no_room = rep
        .room_left
        .is_some_and(|r| r < least_needed(config.record_size, config.early_warning_margin_bytes));
    if eop || no_room {
        catalogue
            .set_cartridge_state(barcode, CartridgeState::Full)
            .await?;
    }
    rep.state = catalogue
        .cartridge(barcode)
        .await?
        .map(|c| c.state)
        .unwrap_or(CartridgeState::Full);
    info!(
        barcode,
        containers = rep.containers,
        objects = rep.objects,
        dead = rep.dead,
        eod_block = rep.eod_block,
        past_early_warning = rep.past_early_warning,
        state = rep.state.as_str(),
        "rebuilt"
    );
    Ok(rep)
}
