//! `catalog rebuild`: the catalogue reconstructed from a tape alone. The label gives the
//! cartridge's identity and pool; each file after it is a container whose header, records and
//! footer are checked as they are read. A container that does not check out (a dead tail) is
//! recorded dead; an empty file (a filemark closing a tail) is skipped.

use serde::Serialize;
use tracing::{info, warn};

use super::mount::{LabelState, read_label};
use super::{CancelToken, SessionError};
use crate::catalogue::{Catalogue, ContainerState, NewCopy};
use crate::device::{DeviceError, Drive};
use crate::format::{ContainerReader, MAX_RECORD_SIZE};

/// What a rebuild found on one cartridge.
#[derive(Clone, Debug, Default, Serialize)]
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
    /// End of data.
    pub eod_block: u64,
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
    cancel: &CancelToken,
) -> Result<RebuildReport, SessionError> {
    let label = match read_label(drive).await? {
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
    catalogue.ensure_pool(&label.pool).await?;
    catalogue
        .set_labelled(barcode, &label.pool, label.cartridge_uuid, label.epoch)
        .await?;
    catalogue.set_calibrated(barcode).await?;
    let cancel = cancel.clone();
    // Read every file after the label (block 2 onwards) on the drive thread.
    let (found, eod, eof_file) = drive
        .run(move |h| -> Result<(Vec<Found>, u64, u64), SessionError> {
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
                    match h.read_record(&mut buf) {
                        Ok(r) => {
                            records += 1;
                            block += 1;
                            if err.is_none()
                                && let Err(e) = reader.push_record(&buf[..r.len])
                            {
                                err = Some(format!("block {}: {e}", block - 1));
                            }
                        }
                        Err(e) => match DeviceError::from_call(e) {
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
                    return Ok((out, block, file));
                }
                file += 1;
            }
        })
        .await??;
    let mut rep = RebuildReport {
        barcode: barcode.to_string(),
        eod_block: eod,
        ..Default::default()
    };
    let existing = catalogue.containers_on(barcode).await?;
    let mut used = 0u64;
    for f in found {
        match f.parsed {
            Ok((header, footer)) => {
                if existing.iter().any(|c| c.uuid == header.container_uuid) {
                    rep.known += 1;
                    continue;
                }
                let id = catalogue
                    .create_container(
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
    info!(
        barcode,
        containers = rep.containers,
        objects = rep.objects,
        dead = rep.dead,
        "rebuilt"
    );
    Ok(rep)
}
