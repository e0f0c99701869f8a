//! Intake: a new cartridge is calibrated (its first load), labelled at BOT (label record, a
//! synchronous filemark, MAM attributes) and assigned to a pool. A cartridge that holds someone
//! else's data is refused and never overwritten.

use reel_plugin_abi::{REEL_CAP_MAM, mam};
use serde::Serialize;
use tracing::{info, warn};
use uuid::Uuid;

use super::mount::{LabelState, read_label};
use super::{SessionError, unix_now};
use crate::catalogue::{CartridgeState, Catalogue};
use crate::device::Drive;
use crate::format::Label;

/// What intake did with a cartridge.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
#[serde(tag = "outcome", rename_all = "snake_case")]
pub enum IntakeOutcome {
    /// Labelled now, into `pool`.
    Labelled {
        /// Pool.
        pool: String,
        /// New cartridge UUID.
        uuid: Uuid,
    },
    /// Already carries reel's label (known to the catalogue).
    AlreadyLabelled {
        /// Its pool.
        pool: String,
    },
    /// Carries a reel label the catalogue does not know: run `reel catalog rebuild` on it.
    UnknownReelLabel {
        /// Its pool per label.
        pool: String,
    },
    /// Someone else's cartridge: refused, disabled, nothing written.
    RefusedForeign {
        /// What was found.
        reason: String,
    },
}

/// Label the cartridge mounted in `drive` into `pool`. The caller has mounted it (which
/// calibrated it on its first load) and recorded the mount.
pub async fn label_cartridge(
    catalogue: &Catalogue,
    drive: &Drive,
    barcode: &str,
    pool: &str,
) -> Result<IntakeOutcome, SessionError> {
    catalogue.set_calibrated(barcode).await?;
    let known = catalogue.cartridge(barcode).await?;
    match read_label(drive, barcode).await? {
        LabelState::Reel(l) => {
            let ours = known
                .as_ref()
                .and_then(|c| c.cartridge_uuid)
                .is_some_and(|u| u == l.cartridge_uuid);
            if ours {
                Ok(IntakeOutcome::AlreadyLabelled { pool: l.pool })
            } else {
                warn!(
                    barcode,
                    "carries a reel label the catalogue does not know; rebuild the catalogue from it"
                );
                Ok(IntakeOutcome::UnknownReelLabel { pool: l.pool })
            }
        }
        LabelState::Foreign(reason) => {
            warn!(barcode, %reason, "foreign cartridge refused");
            catalogue
                .set_cartridge_state(barcode, CartridgeState::Disabled)
                .await?;
            Ok(IntakeOutcome::RefusedForeign { reason })
        }
        LabelState::Blank => {
            let epoch = known.map(|c| c.label_epoch + 1).unwrap_or(1).max(1);
            let label = Label {
                barcode: barcode.to_string(),
                pool: pool.to_string(),
                cartridge_uuid: Uuid::new_v4(),
                epoch,
                created_unix: unix_now(),
            };
            write_label(drive, &label).await?;
            catalogue
                .set_labelled(barcode, pool, label.cartridge_uuid, epoch)
                .await?;
            super::space::record_capacity(catalogue, drive, barcode).await?;
            info!(barcode, pool, "labelled");
            Ok(IntakeOutcome::Labelled {
                pool: pool.to_string(),
                uuid: label.cartridge_uuid,
            })
        }
    }
}

/// What reclaim did with a cartridge.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
#[serde(tag = "outcome", rename_all = "snake_case")]
pub enum ReclaimOutcome {
    /// Relabelled with a new epoch: empty, active in its pool again.
    Reclaimed {
        /// Its pool.
        pool: String,
        /// The new label epoch.
        epoch: u64,
        /// Bytes of dead space given back.
        bytes: u64,
    },
    /// Refused: nothing was written.
    Refused {
        /// Why.
        reason: String,
    },
}

/// Reclaim the cartridge mounted in `drive`: check that it carries the label the catalogue
/// knows, retire its containers in the catalogue if nothing on it must survive
/// ([`Catalogue::retire_for_reclaim`]), then write a new label at BOT with the next epoch and
/// a new UUID. Writing at BOT ends the data there: the old containers are beyond end of data
/// and no catalogue entry of the old epoch can match the new label. Run again after a crash,
/// it finds the containers already dead and finishes the relabel.
pub async fn relabel_for_reclaim(
    catalogue: &Catalogue,
    drive: &Drive,
    barcode: &str,
) -> Result<ReclaimOutcome, SessionError> {
    let Some(known) = catalogue.cartridge(barcode).await? else {
        return Ok(ReclaimOutcome::Refused {
            reason: format!("cartridge {barcode} is not in the catalogue"),
        });
    };
    let Some(pool) = known.pool.clone() else {
        return Ok(ReclaimOutcome::Refused {
            reason: format!("cartridge {barcode} is in no pool; it was never labelled"),
        });
    };
    match read_label(drive, barcode).await? {
        LabelState::Reel(l) if Some(l.cartridge_uuid) == known.cartridge_uuid => {}
        LabelState::Reel(l) => {
            return Ok(ReclaimOutcome::Refused {
                reason: format!(
                    "cartridge {barcode} carries label {} (epoch {}), not the catalogue's; check it (`reel verify --label {barcode}`)",
                    l.cartridge_uuid, l.epoch
                ),
            });
        }
        LabelState::Foreign(reason) => {
            return Ok(ReclaimOutcome::Refused {
                reason: format!("cartridge {barcode} is not reel's: {reason}"),
            });
        }
        LabelState::Blank => {
            return Ok(ReclaimOutcome::Refused {
                reason: format!(
                    "cartridge {barcode} reads blank, not the label the catalogue knows; check it (`reel verify --label {barcode}`)"
                ),
            });
        }
    }
    let check = catalogue.retire_for_reclaim(barcode).await?;
    if let Some(reason) = check.refusal() {
        return Ok(ReclaimOutcome::Refused { reason });
    }
    let epoch = known.label_epoch + 1;
    let label = Label {
        barcode: barcode.to_string(),
        pool: pool.clone(),
        cartridge_uuid: Uuid::new_v4(),
        epoch,
        created_unix: unix_now(),
    };
    write_label(drive, &label).await?;
    catalogue
        .set_labelled(barcode, &pool, label.cartridge_uuid, epoch)
        .await?;
    super::space::record_capacity(catalogue, drive, barcode).await?;
    info!(barcode, pool, epoch, bytes = check.used_bytes, "reclaimed");
    Ok(ReclaimOutcome::Reclaimed {
        pool,
        epoch,
        bytes: check.used_bytes,
    })
}

/// Write the label record and a synchronous filemark at BOT, then the MAM attributes.
/// Called on a blank cartridge (end of data at BOT), or by reclaim on one whose containers
/// the catalogue has retired.
async fn write_label(drive: &Drive, label: &Label) -> Result<(), SessionError> {
    drive.rewind().await?;
    let rec = label.encode();
    let lbp = drive.lbp_enabled();
    let reporter = drive.reporter(&label.barcode);
    drive
        .run(move |h| -> Result<(), SessionError> {
            let crc = lbp.then(|| crc32c::crc32c(&rec));
            let mut refused_ns = 0;
            crate::device::lbp::write_checked(h, &rec, crc, 0, &reporter, &mut refused_ns)
                .map_err(crate::device::DeviceError::from_call)?;
            h.write_filemarks(1, false)
                .map_err(crate::device::DeviceError::from_call)?;
            Ok(())
        })
        .await??;
    if drive.has_cap(REEL_CAP_MAM) {
        let attrs: Vec<(u16, Vec<u8>)> = vec![
            (mam::APPLICATION_VENDOR, b"REEL".to_vec()),
            (mam::APPLICATION_NAME, b"reel".to_vec()),
            (
                mam::APPLICATION_VERSION,
                env!("CARGO_PKG_VERSION").as_bytes().to_vec(),
            ),
            (mam::BARCODE, label.barcode.as_bytes().to_vec()),
            (mam::MEDIA_POOL, label.pool.as_bytes().to_vec()),
            (mam::REEL_LABEL_EPOCH, label.epoch.to_be_bytes().to_vec()),
            (
                mam::REEL_CARTRIDGE_UUID,
                label.cartridge_uuid.as_bytes().to_vec(),
            ),
        ];
        for (id, v) in attrs {
            match drive.mam_write(id, v).await {
                Ok(()) => {}
                // A drive or medium without MAM (tgt, some older media): the label record
                // just written at BOT is what identifies the cartridge; MAM only saves reading it.
                Err(crate::device::DeviceError::Unsupported { detail, .. }) => {
                    tracing::warn!(
                        barcode = %label.barcode,
                        %detail,
                        "the drive keeps no MAM attributes; the cartridge is labelled on tape only"
                    );
                    break;
                }
                Err(e) => return Err(e.into()),
            }
        }
    }
    Ok(())
}

/// Before writing: the MAM label epoch must be the catalogue's. A different epoch means
/// another reel instance relabelled the cartridge; writing would destroy its data.
pub async fn check_epoch(drive: &Drive, barcode: &str, expected: u64) -> Result<(), SessionError> {
    if !drive.has_cap(REEL_CAP_MAM) {
        return Ok(());
    }
    let v = match drive.mam_read(mam::REEL_LABEL_EPOCH).await {
        Ok(v) => v,
        Err(crate::device::DeviceError::Unsupported { .. }) => return Ok(()),
        Err(e) => return Err(e.into()),
    };
    let found = v
        .get(..8)
        .and_then(|b| <[u8; 8]>::try_from(b).ok())
        .map(u64::from_be_bytes);
    match found {
        Some(e) if e == expected => Ok(()),
        other => Err(SessionError::Cartridge {
            barcode: barcode.to_string(),
            reason: format!(
                "its MAM label epoch is {:?}, the catalogue's is {expected}: another host may have relabelled it; disable it and investigate before writing",
                other
            ),
        }),
    }
}
