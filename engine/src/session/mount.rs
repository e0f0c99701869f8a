//! Mount and unmount: the robot moves a cartridge between its slot and a drive, the drive loads
//! it, and reel reads the BOT label to know whose cartridge it is.

use reel_plugin_abi::sdk::Element;
use reel_plugin_abi::{
    REEL_ELEMENT_DRIVE, REEL_ELEMENT_FULL, REEL_ELEMENT_LOADED, REEL_ELEMENT_SLOT, asc, sense_key,
};
use tracing::{debug, info, warn};

use super::{SessionError, secs};
use crate::device::lbp::{Checked, ReadTime, read_checked};
use crate::device::{DeviceError, Drive, Library, Sense};
use crate::format::Label;

/// What was found at BOT.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum LabelState {
    /// A reel label.
    Reel(Label),
    /// Nothing written yet.
    Blank,
    /// Data that is not a reel label: another application's cartridge.
    Foreign(String),
}

/// A cartridge now in a drive.
#[derive(Clone, Debug)]
pub struct Mount {
    /// Its barcode.
    pub barcode: String,
    /// The slot it came from (where it goes back).
    pub source_slot: u32,
    /// Robot and load time, seconds (plugin's elapsed time).
    pub mount_s: f64,
    /// Whether it was already in the drive (no robot move, no load).
    pub already: bool,
}

fn drive_element(inv: &[Element], index: u32) -> Result<&Element, SessionError> {
    inv.iter()
        .find(|e| e.kind == REEL_ELEMENT_DRIVE && e.index == index)
        .ok_or_else(|| {
            SessionError::Other(format!(
                "the library reports no drive with index {index}; check [library] drives in the configuration"
            ))
        })
}

/// Where a cartridge is now, by barcode.
pub fn find_cartridge<'a>(inv: &'a [Element], barcode: &str) -> Option<&'a Element> {
    inv.iter()
        .find(|e| e.flags & REEL_ELEMENT_FULL != 0 && e.barcode == barcode)
}

/// Bring `barcode` into `drive` and load it. If it is already there, nothing moves.
pub async fn mount(library: &Library, drive: &Drive, barcode: &str) -> Result<Mount, SessionError> {
    let inv = library.inventory().await?;
    let de = drive_element(&inv, drive.index())?.clone();
    if de.flags & REEL_ELEMENT_FULL != 0 {
        if de.barcode == barcode {
            debug!(barcode, drive = drive.index(), "already mounted");
            return Ok(Mount {
                barcode: barcode.to_string(),
                source_slot: de.source_address,
                mount_s: 0.0,
                already: true,
            });
        }
        return Err(SessionError::Other(format!(
            "drive {} holds {} and {} was asked for; unmount it first",
            drive.index(),
            de.barcode,
            barcode
        )));
    }
    let from = find_cartridge(&inv, barcode).ok_or_else(|| SessionError::Cartridge {
        barcode: barcode.to_string(),
        reason: "not in the library; import it or check the barcode with `reel library inventory`"
            .into(),
    })?;
    if from.kind == REEL_ELEMENT_DRIVE {
        // In another drive (of another host sharing the library: the caller handles its own
        // drives). Loaded there: in use, wait. Not loaded (that host unloaded it, or is gone):
        // the robot may take it from there; the library refuses if it is loaded after all.
        if from.flags & REEL_ELEMENT_LOADED != 0 {
            return Err(SessionError::HeldElsewhere {
                barcode: barcode.to_string(),
                drive: from.index,
            });
        }
        info!(
            barcode,
            from_drive = from.index,
            drive = drive.index(),
            "cartridge sits unloaded in another drive; moving it from there"
        );
    }
    let source = from.address;
    let move_ns = library
        .move_medium(source, de.address)
        .await
        .map_err(|e| move_refused(e, barcode, from))?;
    let load_ns = match drive.load().await {
        Ok(ns) => ns,
        Err(e) => {
            // Put it back so the drive is free for the next try.
            let _ = library.move_medium(de.address, source).await;
            return Err(e.into());
        }
    };
    let mount_s = secs(move_ns) + secs(load_ns);
    drive.note_loaded().await;
    info!(barcode, drive = drive.index(), mount_s, "mounted");
    Ok(Mount {
        barcode: barcode.to_string(),
        source_slot: source,
        mount_s,
        already: false,
    })
}

/// A MOVE MEDIUM refused because another host holds the cartridge (SMC MEDIUM REMOVAL
/// PREVENTED from a drive) or took it meanwhile (source empty) becomes
/// [`SessionError::HeldElsewhere`] or a cartridge error saying to retry; anything else stays a
/// device error.
fn move_refused(e: DeviceError, barcode: &str, from: &Element) -> SessionError {
    let sense = e.sense();
    let asc_ascq = sense.map(|(_, a, q)| (a, q));
    let illegal = sense.is_some_and(|(k, _, _)| k == sense_key::ILLEGAL_REQUEST);
    if illegal && from.kind == REEL_ELEMENT_DRIVE && asc_ascq == Some(asc::MEDIUM_REMOVAL_PREVENTED)
    {
        return SessionError::HeldElsewhere {
            barcode: barcode.to_string(),
            drive: from.index,
        };
    }
    if illegal && asc_ascq == Some(asc::SOURCE_EMPTY) {
        return SessionError::Cartridge {
            barcode: barcode.to_string(),
            reason: format!(
                "was no longer in element {} when the robot came for it (another host sharing the \
                 library moved it); retry, the next inventory shows where it is",
                from.address
            ),
        };
    }
    e.into()
}

/// Unload the drive and put its cartridge back in `return_to` (its source slot) or, if that
/// is taken, the first empty slot. Returns robot and unload time in seconds.
pub async fn unmount(
    library: &Library,
    drive: &Drive,
    return_to: Option<u32>,
) -> Result<f64, SessionError> {
    let inv = library.inventory().await?;
    let de = drive_element(&inv, drive.index())?.clone();
    if de.flags & REEL_ELEMENT_FULL == 0 {
        return Ok(0.0);
    }
    // What the drive says about itself and this cartridge, before it lets go of it; reported
    // once the cartridge is out (an unload that fails is retried or followed by a pull, which
    // reads again: one reading per load).
    let health = if de.barcode.is_empty() {
        None
    } else {
        drive.read_health(&de.barcode).await
    };
    let mut unload = drive.unload().await;
    if matches!(unload, Err(DeviceError::UnitAttention { .. })) {
        // A reset or power cycle is reported once; unloading is safe to repeat.
        unload = drive.unload().await;
    }
    let unload_ns = match unload {
        Ok(ns) => ns,
        // A cartridge that is not loaded (only present) needs no unload.
        Err(DeviceError::NotReady { .. }) => 0,
        Err(e) => return Err(e.into()),
    };
    if let Some(h) = health {
        drive.report_health(h);
    }
    let empty = |addr: u32| {
        inv.iter().any(|e| {
            e.address == addr && e.kind == REEL_ELEMENT_SLOT && e.flags & REEL_ELEMENT_FULL == 0
        })
    };
    let target = return_to
        .filter(|a| empty(*a))
        .or_else(|| {
            (de.source_address != 0 && empty(de.source_address)).then_some(de.source_address)
        })
        .or_else(|| {
            inv.iter()
                .find(|e| e.kind == REEL_ELEMENT_SLOT && e.flags & REEL_ELEMENT_FULL == 0)
                .map(|e| e.address)
        })
        .ok_or_else(|| {
            SessionError::Other("no empty slot to put the cartridge back; export one".into())
        })?;
    let move_ns = match library.move_medium(de.address, target).await {
        Ok(ns) => ns,
        Err(e) => {
            // Once unloaded, another host sharing the library may have taken the cartridge
            // from this drive for itself: then the drive is empty, which is all we wanted.
            if mounted_barcode(library, drive).await?.is_none() {
                info!(barcode = %de.barcode, drive = drive.index(), "unloaded; another host took the cartridge from the drive");
                return Ok(secs(unload_ns));
            }
            return Err(e.into());
        }
    };
    info!(barcode = %de.barcode, drive = drive.index(), slot = target, "unmounted");
    Ok(secs(unload_ns) + secs(move_ns))
}

/// Where [`pull`] put a drive's cartridge.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Pulled {
    /// The cartridge.
    pub barcode: String,
    /// The slot it is in now.
    pub slot: u32,
    /// Whether the drive unloaded it first; `false`: the drive did not answer and the robot
    /// pulled it as it was.
    pub unloaded: bool,
}

/// Recover what `drive` holds through the changer (`reel drive reset`): unload it and put it
/// back as [`unmount`] does; when the drive cannot unload (it died), have the robot pull the
/// cartridge from it anyway, to its source slot or the first empty one. `None`: the drive was
/// empty.
pub async fn pull(library: &Library, drive: &Drive) -> Result<Option<Pulled>, SessionError> {
    let inv = library.inventory().await?;
    let de = drive_element(&inv, drive.index())?.clone();
    if de.flags & REEL_ELEMENT_FULL == 0 {
        return Ok(None);
    }
    let slot_of = |inv: &[Element], barcode: &str| {
        find_cartridge(inv, barcode)
            .filter(|e| e.kind == REEL_ELEMENT_SLOT)
            .map(|e| e.address)
    };
    let unload_error = match unmount(library, drive, None).await {
        Ok(_) => {
            let inv = library.inventory().await?;
            return Ok(slot_of(&inv, &de.barcode).map(|slot| Pulled {
                barcode: de.barcode.clone(),
                slot,
                unloaded: true,
            }));
        }
        Err(e) => e,
    };
    warn!(drive = drive.index(), barcode = %de.barcode, error = %unload_error,
        "the drive does not unload; the robot pulls the cartridge as it is");
    // A drive that failed to unload never reported this load (an unload that worked and a
    // robot move that did not has reported it already).
    let health = if unload_error.is_drive_failure() {
        drive.read_health(&de.barcode).await
    } else {
        None
    };
    let empty = |addr: u32| {
        inv.iter().any(|e| {
            e.address == addr && e.kind == REEL_ELEMENT_SLOT && e.flags & REEL_ELEMENT_FULL == 0
        })
    };
    let target = (de.source_address != 0 && empty(de.source_address))
        .then_some(de.source_address)
        .or_else(|| {
            inv.iter()
                .find(|e| e.kind == REEL_ELEMENT_SLOT && e.flags & REEL_ELEMENT_FULL == 0)
                .map(|e| e.address)
        })
        .ok_or_else(|| {
            SessionError::Other(format!(
                "no empty slot to pull {} into from drive {}; export a cartridge first",
                de.barcode,
                drive.index()
            ))
        })?;
    library.move_medium(de.address, target).await.map_err(|e| {
        SessionError::Other(format!(
            "drive {} did not unload {} ({unload_error}) and the robot could not pull it \
                 ({e}): it needs hands",
            drive.index(),
            de.barcode
        ))
    })?;
    info!(barcode = %de.barcode, drive = drive.index(), slot = target, "pulled from the drive by the robot");
    if let Some(h) = health {
        drive.report_health(h);
    }
    Ok(Some(Pulled {
        barcode: de.barcode,
        slot: target,
        unloaded: false,
    }))
}

/// Which cartridge the drive holds, if any.
pub async fn mounted_barcode(
    library: &Library,
    drive: &Drive,
) -> Result<Option<String>, SessionError> {
    let inv = library.inventory().await?;
    let de = drive_element(&inv, drive.index())?;
    Ok((de.flags & REEL_ELEMENT_FULL != 0).then(|| de.barcode.clone()))
}

/// Rewind and read block 0 of `barcode`: reel's label, blank, or someone else's data. A
/// label damaged on the way from the drive is read once more (`device::lbp`), and if it
/// arrives damaged again the read fails (retryable): a byte flipped in transit must never make
/// a reel cartridge look foreign.
pub async fn read_label(drive: &Drive, barcode: &str) -> Result<LabelState, SessionError> {
    drive.rewind().await?;
    let lbp = drive.lbp_enabled();
    let reporter = drive.reporter(barcode);
    let r = drive
        .run(move |h| {
            // Large enough for any record reel writes, so a foreign record is read whole.
            let mut buf = vec![0u8; crate::format::MAX_RECORD_SIZE + 4096];
            let mut time = ReadTime::default();
            match read_checked(h, 0, &mut buf, lbp, &reporter, &mut time) {
                Ok(Checked::Whole(r)) => {
                    buf.truncate(r.len);
                    Ok(Some(buf))
                }
                Ok(Checked::Damaged(why)) => Err(DeviceError::LbpMismatch {
                    call: "drive_read_record",
                    sense: Sense {
                        key: 0x0B,
                        asc: 0x10,
                        ascq: 0x01,
                    },
                    detail: format!("the label: {why}"),
                }),
                Err(e) => Err(e),
            }
        })
        .await?;
    match r {
        Ok(Some(rec)) => match Label::decode(&rec) {
            Ok(l) => Ok(LabelState::Reel(l)),
            Err(e) if Label::looks_like_reel(&rec) => Err(SessionError::Format(e)),
            Err(_) => Ok(LabelState::Foreign(format!(
                "block 0 holds a {}-byte record that is not a reel label",
                rec.len()
            ))),
        },
        Ok(None) => Ok(LabelState::Blank),
        Err(DeviceError::EndOfData { .. }) => Ok(LabelState::Blank),
        Err(DeviceError::Filemark { .. }) => Ok(LabelState::Foreign(
            "block 0 is a filemark, not a reel label".into(),
        )),
        Err(e) => Err(e.into()),
    }
}
