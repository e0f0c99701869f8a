//! Vaulting on a worker that holds the library: the robot's half of `reel cartridge export`
//! and `reel cartridge import`.
//!
//! An export is recorded in the catalogue first (the cartridge is `exported` at once, so no new
//! work takes it); [`send_out_exported`] then moves each exported cartridge still inside to a
//! free import/export element (mail slot) and records that it left. One loaded in a drive
//! waits for the drive to unload it (a drive unloads an exported cartridge at its next step);
//! one that finds every mail slot full waits for an operator to empty one. Both run again at
//! each maintenance pass.
//!
//! [`take_in`] carries out an import request: it moves what the mail slots hold (or the
//! cartridges named) into empty storage slots and gives each exported one back the state it
//! had. A cartridge is checked against the catalogue by its barcode and by its write-once
//! flag (a cartridge reporting WORM where the catalogue has a rewritable one, or the reverse,
//! is not the cartridge the catalogue knows: it is marked broken with that reason). Each
//! labelled cartridge back from a vault then gets a label check ([`TakenIn::to_check`]): the
//! worker submits a `reel verify --label` job for it, which mounts it, reads its label and
//! marks it broken if the label is not the one the catalogue recorded. Until that job runs,
//! reel's other checks stand: a write checks the label epoch in the cartridge memory, a read
//! each container's header.

use std::collections::BTreeSet;

use reel_engine::catalogue::CartridgeState;
use reel_engine::service::TapeService;
use reel_engine::session::mail_slot::{self, SendOut};
use reel_plugin_abi::{
    REEL_ELEMENT_DRIVE, REEL_ELEMENT_FULL, REEL_ELEMENT_IMPORT_EXPORT, REEL_ELEMENT_SLOT,
    REEL_ELEMENT_WORM,
};
use reel_queue::error::{JobsError, Result};

/// Move every exported cartridge still inside the library to a mail slot, where it can.
/// Returns what became of each one tried (nothing, without asking the library, when no
/// export is pending).
pub async fn send_out_exported(svc: &TapeService) -> Result<Vec<(String, SendOut)>> {
    let pending: Vec<String> = svc
        .catalogue()
        .vault_entries()
        .await?
        .into_iter()
        .filter(|e| e.left_unix == 0)
        .map(|e| e.barcode)
        .collect();
    let mut out = Vec::with_capacity(pending.len());
    for barcode in pending {
        let r = mail_slot::send_out(svc.library(), &barcode)
            .await
            .map_err(JobsError::Session)?;
        if r.has_left() && svc.catalogue().mark_left(&barcode).await? {
            tracing::info!(%barcode, outcome = %r, "exported cartridge left the storage slots");
        }
        out.push((barcode, r));
    }
    Ok(out)
}

/// What an import did.
#[derive(Debug, Default, Clone, PartialEq, Eq)]
pub struct TakenIn {
    /// One line per cartridge saying what was done.
    pub lines: Vec<String>,
    /// Labelled cartridges back from a vault, whose label is to be checked.
    pub to_check: Vec<String>,
}

/// Take cartridges in from the mail slots (those in `only`, or all when it is empty), as
/// `by`.
pub async fn take_in(svc: &TapeService, only: &[String], by: &str) -> Result<TakenIn> {
    let lib = svc.library();
    let cat = svc.catalogue();
    let session = JobsError::Session;
    let only_set: BTreeSet<String> = only.iter().cloned().collect();
    let before = lib.inventory().await.map_err(|e| session(e.into()))?;
    let worm_of = |barcode: &str| {
        before
            .iter()
            .find(|e| e.flags & REEL_ELEMENT_FULL != 0 && e.barcode == barcode)
            .map(|e| e.flags & REEL_ELEMENT_WORM != 0)
    };
    let moved = mail_slot::take_in(lib, (!only_set.is_empty()).then_some(&only_set))
        .await
        .map_err(session)?;
    let mut lines = Vec::new();
    let mut to_check = Vec::new();
    let mut seen = BTreeSet::new();
    let mut unknown = false;
    for t in &moved {
        seen.insert(t.barcode.clone());
        let slot = match &t.outcome {
            Ok(slot) => *slot,
            Err(why) => {
                let name = if t.barcode.is_empty() {
                    "(no barcode)"
                } else {
                    &t.barcode
                };
                lines.push(format!("{name}: stays in mail slot {}: {why}", t.ie));
                continue;
            }
        };
        let what = format!("taken in from mail slot {} to slot {slot}", t.ie);
        let cleaning = before
            .iter()
            .any(|e| e.barcode == t.barcode && svc.is_cleaning(e));
        match cat.cartridge(&t.barcode).await? {
            _ if cleaning => {
                unknown = true;
                lines.push(format!(
                    "{}: {what}; a cleaning cartridge: drives are cleaned with it, never written",
                    t.barcode
                ));
            }
            None => {
                unknown = true;
                lines.push(format!(
                    "{}: {what}; new to reel: label it into a pool with `reel intake`",
                    t.barcode
                ));
            }
            Some(c) => {
                let worm = worm_of(&t.barcode).unwrap_or(c.worm);
                let (line, check) = restore(svc, &t.barcode, c.worm, worm, by).await?;
                if check {
                    to_check.push(t.barcode.clone());
                }
                lines.push(format!("{}: {what}; {line}", t.barcode));
            }
        }
    }
    // Named cartridges not in a mail slot: put in a storage slot by hand, or moved by an
    // earlier try of this request that stopped before recording it.
    for b in only.iter().filter(|b| !seen.contains(*b)) {
        let at = before
            .iter()
            .find(|e| e.flags & REEL_ELEMENT_FULL != 0 && &e.barcode == b);
        let line = match (at, cat.cartridge(b).await?) {
            (None, _) => format!("{b}: not in the library; put it in a mail slot and ask again"),
            (Some(e), Some(c)) if matches!(e.kind, REEL_ELEMENT_SLOT | REEL_ELEMENT_DRIVE) => {
                let kind = if e.kind == REEL_ELEMENT_SLOT {
                    "slot"
                } else {
                    "drive"
                };
                let worm = e.flags & REEL_ELEMENT_WORM != 0;
                let (line, check) = restore(svc, b, c.worm, worm, by).await?;
                if check {
                    to_check.push(b.clone());
                }
                format!("{b}: already in {kind} {}; {line}", e.index)
            }
            (Some(e), None) if e.kind != REEL_ELEMENT_IMPORT_EXPORT => {
                unknown = true;
                format!("{b}: in the library but new to reel: label it with `reel intake`")
            }
            (Some(e), _) => format!("{b}: stays in mail slot {}", e.index),
        };
        lines.push(line);
    }
    if unknown {
        // Record the new ones (as intake would find them).
        svc.sync_inventory().await.map_err(session)?;
    }
    if lines.is_empty() {
        lines.push("the mail slots hold no cartridge".into());
    }
    Ok(TakenIn { lines, to_check })
}

/// A known cartridge is inside: give an exported one back its state, after checking it is
/// the cartridge the catalogue knows (its write-once flag). What was done, and whether its
/// label is to be checked (the catalogue marked it unchecked on the way back: a labelled
/// cartridge back from a vault).
async fn restore(
    svc: &TapeService,
    barcode: &str,
    catalogue_worm: bool,
    library_worm: bool,
    by: &str,
) -> Result<(String, bool)> {
    let cat = svc.catalogue();
    let entry = cat.vault_entry(barcode).await?;
    if catalogue_worm != library_worm {
        let reason = format!(
            "not the cartridge the catalogue knows: the library reports it {}, the catalogue knows a {} cartridge \
             by this barcode",
            if library_worm {
                "write-once"
            } else {
                "rewritable"
            },
            if catalogue_worm {
                "write-once"
            } else {
                "rewritable"
            },
        );
        if entry.is_some() {
            cat.back_from_vault(barcode, by).await?;
        }
        cat.set_cartridge_state_noted(barcode, CartridgeState::Broken, &reason, by)
            .await?;
        return Ok((format!("marked broken: {reason}"), false));
    }
    Ok(match entry {
        None => {
            let c = cat.cartridge(barcode).await?;
            (
                format!(
                    "known to reel and not exported; its state stays {}",
                    c.map(|c| c.state.to_string()).unwrap_or_default()
                ),
                false,
            )
        }
        Some(e) => match cat.back_from_vault(barcode, by).await? {
            Some(s) => (
                format!("back from {}; {s} again", e.location),
                cat.cartridge(barcode)
                    .await?
                    .is_some_and(|c| c.label_unchecked_unix != 0),
            ),
            None => ("already back".to_string(), false),
        },
    })
}
