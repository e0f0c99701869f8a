//! `reel cartridge export|import|wanted`: sending cartridges offsite and bringing them back,
//! from the store alone (the CLI and the HTTP API share these functions).
//!
//! - **export** checks every barcode first, then makes each cartridge `exported` at once with
//!   where it goes (no new work takes it; a batch on it stops at a record boundary; a drive
//!   holding it unloads it). A worker holding the library then moves each to a free mail slot
//!   (import/export element), as many as there are; the rest wait for an operator to empty one
//!   (`reel_worker::vault`).
//! - **import** asks a worker to take in what the mail slots hold (or the cartridges named):
//!   each exported one gets back the state it had, and the recalls waiting for it run.
//! - **wanted** lists the exported cartridges that waiting recalls need, with how much work
//!   waits for each: what to fetch from the vault.

use std::collections::BTreeSet;

use serde::Serialize;
use utoipa::ToSchema;

use reel_engine::catalogue::{CartridgeState, Catalogue, VaultEntry, check_location};
use reel_queue::cartridge_import::{CartridgeImport, CartridgeImports, check_barcodes};
use reel_queue::db::Db;
use reel_queue::error::{JobsError, Result};
use reel_queue::mount::MountTarget;
use reel_queue::requests::TapeRequests;

/// A cartridge out of the library, for `--json` and the API.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, ToSchema)]
pub struct VaultView {
    /// Barcode.
    pub barcode: String,
    /// Where it went.
    pub location: String,
    /// The state it gets back when it is imported.
    pub state_before: String,
    /// Who exported it.
    pub exported_by: String,
    /// When (unix seconds).
    pub exported_unix: i64,
    /// Whether it has left the storage slots (to a mail slot, or out of the library); false:
    /// it waits for a free mail slot or for the drive holding it.
    pub left: bool,
}

impl From<VaultEntry> for VaultView {
    fn from(e: VaultEntry) -> VaultView {
        VaultView {
            barcode: e.barcode,
            location: e.location,
            state_before: e.state_before.to_string(),
            exported_by: e.exported_by,
            exported_unix: e.exported_unix,
            left: e.left_unix > 0,
        }
    }
}

/// An exported cartridge that waiting work needs.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, ToSchema)]
pub struct Wanted {
    /// Barcode.
    pub barcode: String,
    /// Where it is.
    pub location: String,
    /// Requests waiting for it.
    pub files: u64,
    /// Bytes they read.
    pub bytes: u64,
    /// How long the oldest has waited (seconds).
    pub oldest_s: u64,
    /// The jobs waiting (ids, at most [`JOBS_LISTED`]).
    pub jobs: Vec<String>,
    /// How many jobs wait in all.
    pub job_count: u64,
}

/// Most job ids [`Wanted`] lists per cartridge.
pub const JOBS_LISTED: usize = 20;

fn refused(what: String, hint: &str) -> JobsError {
    JobsError::Refused {
        what,
        hint: hint.into(),
    }
}

/// Export `barcodes` to `to`, as `by`. Every barcode is checked before any is exported.
pub async fn export(
    cat: &Catalogue,
    barcodes: &[String],
    to: &str,
    by: &str,
) -> Result<Vec<VaultView>> {
    if barcodes.is_empty() {
        return Err(refused(
            "no cartridge given".into(),
            "name the cartridges to export: `reel cartridge export BARCODE… --to LOCATION`",
        ));
    }
    check_barcodes(barcodes)?;
    check_location(to).map_err(|e| refused(e, "say where they go in one line"))?;
    for b in barcodes {
        let c = cat
            .cartridge(b)
            .await?
            .ok_or_else(|| crate::cartridge_cmd::unknown(b))?;
        match c.state {
            CartridgeState::Exported => {
                let at = cat
                    .vault_entry(b)
                    .await?
                    .map(|e| e.location)
                    .unwrap_or_else(|| "an unrecorded location".into());
                return Err(refused(
                    format!("cartridge {b} is already exported (to {at})"),
                    "leave it out of the list; import it first to send it elsewhere",
                ));
            }
            CartridgeState::Repacking => {
                return Err(refused(
                    format!("cartridge {b} is being repacked"),
                    "export it once the repack is done",
                ));
            }
            _ => {}
        }
    }
    let mut out = Vec::with_capacity(barcodes.len());
    for b in barcodes {
        out.push(VaultView::from(cat.send_to_vault(b, to, by).await?));
    }
    tracing::info!(cartridges = %barcodes.join(" "), to, by, "cartridges exported");
    Ok(out)
}

/// Ask for cartridges to be taken in (`barcodes`, or all the mail slots hold) by a worker of
/// `library` (empty: any).
pub async fn import(
    db: &Db,
    library: &str,
    barcodes: &[String],
    by: &str,
) -> Result<CartridgeImport> {
    if library.len() > 200 || library.chars().any(char::is_control) {
        return Err(refused(
            "that library name is not one reel gives".into(),
            "give the library's name as in drive names (`reel drive ls`), or none",
        ));
    }
    CartridgeImports::new(db.clone())
        .request(library, barcodes, by)
        .await
}

/// Exported cartridges, by barcode.
pub async fn vaulted(cat: &Catalogue) -> Result<Vec<VaultView>> {
    Ok(cat
        .vault_entries()
        .await?
        .into_iter()
        .map(VaultView::from)
        .collect())
}

/// The exported cartridges that queued reads wait for, most waited-for first.
pub async fn wanted(cat: &Catalogue, db: &Db) -> Result<Vec<Wanted>> {
    let requests = TapeRequests::new(db.clone());
    let out_there = cat.vault_entries().await?;
    if out_there.is_empty() {
        return Ok(Vec::new());
    }
    let queues = requests.summaries().await?;
    let mut wanted = Vec::new();
    for e in out_there {
        let Some(q) = queues
            .iter()
            .find(|q| matches!(&q.target, MountTarget::Read { barcode } if *barcode == e.barcode))
        else {
            continue;
        };
        let jobs: BTreeSet<String> = requests
            .queued_reads_of(&e.barcode)
            .await?
            .into_iter()
            .map(|r| r.job_id)
            .collect();
        wanted.push(Wanted {
            barcode: e.barcode,
            location: e.location,
            files: q.files,
            bytes: q.bytes,
            oldest_s: q.oldest_age.as_secs(),
            job_count: jobs.len() as u64,
            jobs: jobs.into_iter().take(JOBS_LISTED).collect(),
        });
    }
    wanted.sort_by(|a, b| b.oldest_s.cmp(&a.oldest_s).then(a.barcode.cmp(&b.barcode)));
    Ok(wanted)
}

/// [`wanted`] for people.
pub fn wanted_text(w: &[Wanted]) -> String {
    if w.is_empty() {
        return "no waiting work needs an exported cartridge".into();
    }
    let mut out = vec![format!(
        "{:<10} {:<24} {:>7} {:>10} {:>9}  JOBS",
        "BARCODE", "LOCATION", "FILES", "BYTES", "OLDEST"
    )];
    for x in w {
        out.push(format!(
            "{:<10} {:<24} {:>7} {:>10} {:>9}  {}{}",
            x.barcode,
            x.location,
            x.files,
            reel_queue::text::human_bytes(x.bytes),
            reel_queue::text::span(std::time::Duration::from_secs(x.oldest_s)),
            x.jobs
                .iter()
                .map(|j| j.get(..8).unwrap_or(j))
                .collect::<Vec<_>>()
                .join(" "),
            if x.job_count as usize > x.jobs.len() {
                format!(" (+{})", x.job_count as usize - x.jobs.len())
            } else {
                String::new()
            }
        ));
    }
    out.push("bring these back, put them in the mail slots and run `reel cartridge import`".into());
    out.join("\n")
}

/// One import request for people.
pub fn import_text(r: &CartridgeImport) -> String {
    if r.is_done() {
        let mut s = format!("import {} done by {}:", r.id, r.taken_by);
        for l in r.result.lines() {
            s.push_str("\n  ");
            s.push_str(l);
        }
        s
    } else {
        format!(
            "import {} asked for{}; a worker holding the library takes it at its next \
             maintenance pass (`reel cartridge imports` shows it)",
            r.id,
            if r.taken_by.is_empty() {
                String::new()
            } else {
                format!(", taken by {}", r.taken_by)
            }
        )
    }
}
