//! Deleting and keeping data, from the catalogue alone (the CLI and the HTTP API share these):
//! `reel undelete`, `reel recycle ls`, `reel hold place|release|ls`. `reel delete` is a job
//! (`reel_worker::delete` runs it); these act at once.
//!
//! - **undelete** brings back keys (all or none) or a prefix (what is still in quarantine)
//!   deleted less than `[lifecycle] quarantine_days` ago.
//! - **recycle ls** lists deleted objects with who deleted them, why, and when their
//!   quarantine ends.
//! - **hold** places a legal hold on a key or a prefix, with who and why; a delete meeting it
//!   is refused, and a running delete skips what it covers. Releasing it records who and why.

use serde::Serialize;
use utoipa::ToSchema;

use reel_engine::catalogue::{Catalogue, DeleteScope, HoldScope, LegalHold, Recycled, Undeleted};
use reel_queue::error::{JobsError, Result};

/// A deleted object generation in the recycle log, for `--json` and the API.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, ToSchema)]
pub struct RecycledView {
    /// The key.
    pub key: String,
    /// The generation.
    pub generation: u64,
    /// Size in bytes.
    pub size: u64,
    /// The delete job.
    pub job: String,
    /// When it was deleted (unix seconds).
    pub deleted_unix: i64,
    /// Who deleted it.
    pub deleted_by: String,
    /// Why.
    pub reason: String,
    /// When its quarantine ends (unix seconds): until then it can be undeleted.
    pub purge_after_unix: i64,
}

impl From<Recycled> for RecycledView {
    fn from(r: Recycled) -> RecycledView {
        RecycledView {
            key: r.key,
            generation: r.generation,
            size: r.size,
            job: r.job_id,
            deleted_unix: r.deleted_unix,
            deleted_by: r.deleted_by,
            reason: r.reason,
            purge_after_unix: r.purge_after_unix,
        }
    }
}

/// A legal hold, for `--json` and the API.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, ToSchema)]
pub struct HoldView {
    /// Its number.
    pub id: i64,
    /// The key it holds, if it holds one key.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub key: Option<String>,
    /// The prefix it holds, if it holds every key under one.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub prefix: Option<String>,
    /// When it was placed (unix seconds).
    pub placed_unix: i64,
    /// Who placed it.
    pub placed_by: String,
    /// Why.
    pub reason: String,
    /// Whether it still holds.
    pub active: bool,
    /// When it was released (unix seconds).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub released_unix: Option<i64>,
    /// Who released it.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub released_by: Option<String>,
    /// Why it was released.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub release_reason: Option<String>,
}

impl From<LegalHold> for HoldView {
    fn from(h: LegalHold) -> HoldView {
        let active = h.is_active();
        let (key, prefix) = match h.scope {
            HoldScope::Key(k) => (Some(k), None),
            HoldScope::Prefix(p) => (None, Some(p)),
        };
        HoldView {
            id: h.id,
            key,
            prefix,
            placed_unix: h.placed_unix,
            placed_by: h.placed_by,
            reason: h.reason,
            active,
            released_unix: h.released_unix,
            released_by: h.released_by,
            release_reason: h.release_reason,
        }
    }
}

/// What an undelete brought back, for `--json` and the API.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, ToSchema)]
pub struct UndeleteView {
    /// Keys brought back.
    pub keys: u64,
    /// Object generations brought back.
    pub objects: u64,
    /// Keys under the prefix deleted longer ago than the quarantine: not brought back.
    pub past_quarantine: u64,
}

impl From<Undeleted> for UndeleteView {
    fn from(u: Undeleted) -> UndeleteView {
        UndeleteView {
            keys: u.keys,
            objects: u.objects,
            past_quarantine: u.past_quarantine,
        }
    }
}

/// Most keys one undelete names (as a delete).
pub const MAX_UNDELETE_KEYS: usize = reel_queue::job::MAX_DELETE_KEYS;

/// Bring back `keys` (all or none) or what is under `prefix`, whose quarantine has not ended.
pub async fn undelete(
    cat: &Catalogue,
    keys: Vec<String>,
    prefix: Option<String>,
) -> Result<UndeleteView> {
    let out = match (prefix, keys.is_empty()) {
        (Some(_), false) => {
            return Err(refused(
                "an undelete takes keys or a prefix, not both",
                "give keys, or --prefix (`prefix`) alone",
            ));
        }
        (Some(p), true) => cat.undelete(&DeleteScope::Prefix(&p)).await?,
        (None, true) => {
            return Err(refused(
                "an undelete needs at least one key (or a prefix)",
                "list what can come back with `reel recycle ls` (GET /v1/catalog/recycle)",
            ));
        }
        (None, false) => {
            if keys.len() > MAX_UNDELETE_KEYS {
                return Err(refused(
                    &format!(
                        "an undelete names {} keys; at most {MAX_UNDELETE_KEYS}",
                        keys.len()
                    ),
                    "undelete a prefix, or split the list",
                ));
            }
            let mut sorted = keys;
            sorted.sort();
            sorted.dedup();
            cat.undelete(&DeleteScope::Keys(&sorted)).await?
        }
    };
    Ok(out.into())
}

/// The recycle log under `prefix`, at most `limit` entries.
pub async fn recycle(cat: &Catalogue, prefix: &str, limit: u64) -> Result<Vec<RecycledView>> {
    Ok(cat
        .recycle_log(prefix, limit)
        .await?
        .into_iter()
        .map(RecycledView::from)
        .collect())
}

fn refused(what: &str, hint: &str) -> JobsError {
    JobsError::Refused {
        what: what.into(),
        hint: hint.into(),
    }
}

/// A hold's scope from a key or a prefix: exactly one.
pub fn hold_scope(key: Option<String>, prefix: Option<String>) -> Result<HoldScope> {
    match (key, prefix) {
        (Some(k), None) => Ok(HoldScope::Key(k)),
        (None, Some(p)) => Ok(HoldScope::Prefix(p)),
        _ => Err(refused(
            "a hold takes exactly one of a key or a prefix",
            "give --key (`key`) or --prefix (`prefix`), not both",
        )),
    }
}

/// A key or name as text for people: as it is, or quoted with escapes when it holds
/// characters a terminal would act on or not show (a newline, an escape sequence).
fn shown(s: &str) -> String {
    if s.chars()
        .any(|c| c.is_control() || reel_engine::catalogue::is_invisible(c))
    {
        format!("{s:?}")
    } else {
        s.to_string()
    }
}

fn when(unix: i64) -> String {
    crate::text::when_ms(unix.saturating_mul(1000))
}

/// Text of a recycle log listing.
pub fn recycle_text(rows: &[RecycledView], limit: u64) -> String {
    if rows.is_empty() {
        return "the recycle log is empty here: nothing deleted is in it\n".into();
    }
    let mut out = String::new();
    for r in rows {
        out.push_str(&format!(
            "{}  gen {}  {}  deleted {} by {} ({})  undeletable until {}\n",
            shown(&r.key),
            r.generation,
            crate::text::human_bytes(r.size),
            when(r.deleted_unix),
            r.deleted_by,
            r.reason,
            when(r.purge_after_unix),
        ));
    }
    if rows.len() as u64 >= limit {
        out.push_str(&format!(
            "(the first {limit}; give a prefix or --limit for more)\n"
        ));
    }
    out
}

/// Text of one hold.
pub fn hold_text(h: &HoldView) -> String {
    let what = match (&h.key, &h.prefix) {
        (Some(k), _) => format!("key {}", shown(k)),
        (_, Some(p)) => format!("prefix {}", shown(p)),
        _ => String::new(),
    };
    let mut line = format!(
        "hold {}  {}  placed {} by {}: {}",
        h.id,
        what,
        when(h.placed_unix),
        h.placed_by,
        h.reason
    );
    if let (Some(at), Some(by)) = (h.released_unix, &h.released_by) {
        line.push_str(&format!(
            "  (released {} by {}: {})",
            when(at),
            by,
            h.release_reason.as_deref().unwrap_or("")
        ));
    }
    line.push('\n');
    line
}

/// `reel delete`
#[derive(Debug, clap::Args)]
pub struct DeleteArgs {
    /// Keys to delete (every generation of each).
    pub keys: Vec<String>,
    /// Delete every key with this prefix instead.
    #[arg(long, conflicts_with_all = ["keys", "from"])]
    pub prefix: Option<String>,
    /// Read the keys from this file, one per line (`-`: standard input).
    #[arg(long, value_name = "FILE", conflicts_with = "keys")]
    pub from: Option<std::path::PathBuf>,
    /// Why: kept in the recycle log with who deleted it.
    #[arg(long)]
    pub reason: String,
    #[command(flatten)]
    #[allow(missing_docs)]
    pub submit: crate::cli::SubmitOpts,
}

/// `reel undelete`
#[derive(Debug, clap::Args)]
pub struct UndeleteArgs {
    /// Keys to bring back (all of them or none).
    pub keys: Vec<String>,
    /// Bring back what was deleted under this prefix instead.
    #[arg(long, conflicts_with = "keys")]
    pub prefix: Option<String>,
}

/// `reel recycle …`
#[derive(Debug, clap::Subcommand)]
pub enum RecycleCommand {
    /// Deleted objects: who deleted them, why, and until when `reel undelete` brings them back.
    Ls {
        /// Only keys with this prefix.
        #[arg(default_value = "")]
        prefix: String,
        /// At most this many.
        #[arg(long, default_value_t = 1000, value_parser = clap::value_parser!(u64).range(1..=100_000))]
        limit: u64,
    },
}

/// `reel hold …`
#[derive(Debug, clap::Subcommand)]
pub enum HoldCommand {
    /// Place a legal hold on a key or a prefix: nothing it covers is deleted until it is
    /// released.
    Place {
        /// The key to hold.
        #[arg(long, conflicts_with = "prefix", required_unless_present = "prefix")]
        key: Option<String>,
        /// Hold every key with this prefix.
        #[arg(long)]
        prefix: Option<String>,
        /// Why (kept with who placed it).
        #[arg(long)]
        reason: String,
    },
    /// Release a hold.
    Release {
        /// The hold's number (`reel hold ls`).
        id: i64,
        /// Why (kept with who released it).
        #[arg(long)]
        reason: String,
    },
    /// The holds in force (with `--all`, released ones too).
    Ls {
        /// Released holds too.
        #[arg(long)]
        all: bool,
    },
}

/// Read the keys of `reel delete --from FILE`: one per line, blank lines skipped.
pub fn keys_from(path: &std::path::Path) -> Result<Vec<String>> {
    use std::io::Read;
    let mut text = String::new();
    let read = if path == std::path::Path::new("-") {
        std::io::stdin().read_to_string(&mut text)
    } else {
        std::fs::File::open(path).and_then(|mut f| f.read_to_string(&mut text))
    };
    read.map_err(|source| JobsError::Io {
        doing: "reading the keys to delete",
        path: path.to_path_buf(),
        source,
    })?;
    Ok(text
        .lines()
        .filter(|l| !l.trim().is_empty())
        .map(str::to_string)
        .collect())
}

/// The delete job `reel delete` submits.
pub fn delete_spec(args: &DeleteArgs) -> Result<reel_queue::job::JobSpec> {
    use reel_queue::job::{DeleteJob, DeleteSelection, JobSpec};
    let keys = match &args.from {
        Some(f) => keys_from(f)?,
        None => args.keys.clone(),
    };
    let selection = match &args.prefix {
        Some(p) => DeleteSelection::Prefix(p.clone()),
        None => DeleteSelection::Keys(keys),
    };
    Ok(JobSpec::Delete(DeleteJob {
        selection,
        reason: args.reason.clone(),
        by: crate::drive_cmd::operator(),
    }))
}

/// Run `reel undelete`, `reel recycle` or `reel hold` on the catalogue.
pub async fn run(cat: &Catalogue, cmd: Lifecycle) -> Result<crate::cartridge_cmd::Printed> {
    use crate::cartridge_cmd::Printed;
    Ok(match cmd {
        Lifecycle::Undelete(u) => {
            let out = undelete(cat, u.keys, u.prefix).await?;
            let mut text = format!(
                "brought back {} key(s), {} object generation(s)\n",
                out.keys, out.objects
            );
            if out.past_quarantine > 0 {
                text.push_str(&format!(
                    "{} key(s) under the prefix are past their quarantine: not brought back\n",
                    out.past_quarantine
                ));
            }
            Printed {
                json: serde_json::to_value(&out).unwrap_or_default(),
                text,
            }
        }
        Lifecycle::Recycle(RecycleCommand::Ls { prefix, limit }) => {
            let rows = recycle(cat, &prefix, limit).await?;
            Printed {
                text: recycle_text(&rows, limit),
                json: serde_json::to_value(&rows).unwrap_or_default(),
            }
        }
        Lifecycle::Hold(HoldCommand::Place {
            key,
            prefix,
            reason,
        }) => {
            let scope = hold_scope(key, prefix)?;
            let h: HoldView = cat
                .place_hold(&scope, &crate::drive_cmd::operator(), &reason)
                .await?
                .into();
            Printed {
                text: hold_text(&h),
                json: serde_json::to_value(&h).unwrap_or_default(),
            }
        }
        Lifecycle::Hold(HoldCommand::Release { id, reason }) => {
            let h: HoldView = cat
                .release_hold(id, &crate::drive_cmd::operator(), &reason)
                .await?
                .into();
            Printed {
                text: hold_text(&h),
                json: serde_json::to_value(&h).unwrap_or_default(),
            }
        }
        Lifecycle::Hold(HoldCommand::Ls { all }) => {
            let holds: Vec<HoldView> = cat
                .holds(all)
                .await?
                .into_iter()
                .map(HoldView::from)
                .collect();
            let text = if holds.is_empty() {
                if all {
                    "no legal hold was ever placed\n".to_string()
                } else {
                    "no legal hold is in force\n".to_string()
                }
            } else {
                holds.iter().map(hold_text).collect()
            };
            Printed {
                text,
                json: serde_json::to_value(&holds).unwrap_or_default(),
            }
        }
    })
}

/// The lifecycle commands that act on the catalogue at once.
#[derive(Debug)]
pub enum Lifecycle {
    /// `reel undelete`
    Undelete(UndeleteArgs),
    /// `reel recycle …`
    Recycle(RecycleCommand),
    /// `reel hold …`
    Hold(HoldCommand),
}
