//! `reel cartridge ls|show|state`: the cartridges of the catalogue as an operator reads them
//! (pool, state and why, where the changer last saw it, used and free space, mounts, last
//! mounted and last written), and an operator's state change with a reason. Works from the
//! store alone, on any host, with no device plugin.
//!
//! An operator may set `active`, `disabled`, `broken` and `full`; `new`, `repacking` and
//! `exported` belong to intake, repack and vaulting. A cartridge's state decides what work it
//! gets (docs/OPERATIONS.md §2): writes pick only `active` ones; a recall that needs a
//! `disabled`, `broken` or `exported` one reads another copy or fails with the reason
//! (`reel_worker::reroute`, within a heartbeat of a running worker).

use std::collections::BTreeMap;

use clap::Subcommand;
use serde::Serialize;
use serde_json::{Value, json};
use utoipa::ToSchema;

use reel_engine::catalogue::{Cartridge, CartridgeState, Catalogue, HealthRecord};
use reel_queue::config::LoadedConfig;
use reel_queue::error::{JobsError, Result};
use reel_queue::{ElementView, Inventory};

/// `reel cartridge …`
#[derive(Debug, Subcommand)]
pub enum CartridgeCommand {
    /// Every cartridge the catalogue knows: pool, state, where it is, used and free, mounts.
    Ls {
        /// Only this pool's.
        #[arg(long)]
        pool: Option<String>,
        /// Only cartridges in this state.
        #[arg(long)]
        state: Option<String>,
    },
    /// One cartridge, in full.
    Show {
        /// Its barcode.
        barcode: String,
    },
    /// Set a cartridge's state: active, disabled, broken or full, with a reason.
    State {
        /// Its barcode.
        barcode: String,
        /// active, disabled, broken or full.
        state: String,
        /// Why (kept with the cartridge, shown to every operator and in the errors of the
        /// recalls it stops).
        #[arg(long)]
        reason: String,
    },
    /// Send cartridges offsite: each becomes `exported` at once (no new work takes it) and a
    /// worker moves it to a free mail slot; recalls only it can serve wait for it.
    Export {
        /// Their barcodes.
        #[arg(required = true)]
        barcodes: Vec<String>,
        /// Where they go (a vault, a shelf), shown to whoever waits for them.
        #[arg(long)]
        to: String,
    },
    /// Take cartridges in from the mail slots: exported ones get back the state they had.
    Import {
        /// Only these (default: everything in the mail slots).
        barcodes: Vec<String>,
        /// Only a worker of this library (its name, as in drive names) does it.
        #[arg(long, default_value = "")]
        library: String,
        /// Wait at most this many seconds for a worker to do it.
        #[arg(long, default_value_t = 60, value_parser = clap::value_parser!(u64).range(0..=3600))]
        timeout: u64,
    },
    /// The last import requests and what was done.
    Imports {
        /// How many (newest first).
        #[arg(long, default_value_t = 10, value_parser = clap::value_parser!(i64).range(1..=1000))]
        limit: i64,
    },
    /// Exported cartridges that waiting recalls need: what to bring back.
    Wanted,
    /// Exported cartridges: where each went and whether it has left the library.
    Vaulted,
    /// Cleaning cartridges: how often reel cleaned a drive with each, and which are used up.
    Cleaning,
}

/// What a cartridge command printed.
pub struct Printed {
    /// For `--json`.
    pub json: Value,
    /// For people.
    pub text: String,
}

/// The states an operator may set.
pub const OPERATOR_STATES: [CartridgeState; 4] = [
    CartridgeState::Active,
    CartridgeState::Disabled,
    CartridgeState::Broken,
    CartridgeState::Full,
];

fn refused(what: String, hint: &str) -> JobsError {
    JobsError::Refused {
        what,
        hint: hint.into(),
    }
}

/// The state an operator asked for, if one they may set.
pub fn operator_state(s: &str) -> Result<CartridgeState> {
    let state: CartridgeState = s.trim().parse().map_err(|_| {
        refused(
            format!("`{}` is not a cartridge state", s.escape_debug()),
            "give one of active, disabled, broken, full",
        )
    })?;
    if !OPERATOR_STATES.contains(&state) {
        return Err(refused(
            format!("a cartridge is not set to `{state}` by hand"),
            "new is intake's, repacking repack's and exported the vaulting's; set active, disabled, broken or full",
        ));
    }
    Ok(state)
}

/// Where the changer last saw `barcode`: `slot 3`, `drive 0`, `import_export 1`.
pub fn location(elements: &[ElementView], barcode: &str) -> Option<String> {
    elements
        .iter()
        .find(|e| e.barcode.as_deref() == Some(barcode))
        .map(|e| format!("{} {}", e.kind, e.index))
}

/// A cartridge for `--json` and the API: the catalogue's record, where it is, and free space.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, ToSchema)]
pub struct CartridgeDetail {
    /// Barcode.
    pub barcode: String,
    /// Pool (none until labelled into one).
    pub pool: Option<String>,
    /// new, active, disabled, full, broken, repacking or exported.
    pub state: String,
    /// Why it is in its state (empty when no one said).
    pub state_reason: String,
    /// Who set it: an OS user, `token:ID (NAME)`, or `reel`.
    pub state_by: String,
    /// When (unix seconds; 0: not recorded).
    pub state_unix: i64,
    /// Where the changer last saw it (`slot 3`, `drive 0`), or none.
    pub location: Option<String>,
    /// Bytes written.
    pub used_bytes: u64,
    /// Its label epoch: one more each time it is relabelled (reclaimed).
    pub label_epoch: u64,
    /// Capacity as the drive reported it (0: not known yet).
    pub capacity_bytes: u64,
    /// Capacity less used; none while the capacity is not known.
    pub free_bytes: Option<u64>,
    /// Write-once.
    pub worm: bool,
    /// Times reel mounted it.
    pub mount_count: u64,
    /// Last mounted (unix seconds; 0: never).
    pub last_mounted_unix: i64,
    /// Last written (unix seconds; 0: never).
    pub last_written_unix: i64,
    /// Last read by a recall or a verify (unix seconds; 0: never).
    pub last_read_unix: i64,
    /// Since when its label is unchecked: back from a vault, not read since; no write goes to
    /// it before it is (unix seconds; 0: nothing to check).
    pub label_unchecked_unix: i64,
    /// Errors reel's checks caught on it: medium errors, records damaged on the way to or
    /// from a drive, content that failed its checksum (`reel library integrity --cartridge`).
    pub errors: u64,
    /// What drives reported at its last unmounts, newest first (TapeAlert flags, bytes,
    /// repositions); only on one cartridge's view.
    #[serde(skip_serializing_if = "Option::is_none")]
    #[schema(value_type = Option<Vec<Object>>)]
    pub health: Option<Vec<HealthRecord>>,
}

impl CartridgeDetail {
    /// `c` as the catalogue has it, with where the changer last saw it and its errors (from
    /// [`Catalogue::catch_counts`]).
    pub fn of(
        c: Cartridge,
        elements: &[ElementView],
        errors: &BTreeMap<String, u64>,
    ) -> CartridgeDetail {
        CartridgeDetail {
            errors: errors.get(&c.barcode).copied().unwrap_or(0),
            location: location(elements, &c.barcode),
            free_bytes: (c.capacity_bytes > 0)
                .then(|| c.capacity_bytes.saturating_sub(c.used_bytes)),
            barcode: c.barcode,
            pool: c.pool,
            state: c.state.as_str().into(),
            state_reason: c.state_reason,
            state_by: c.state_by,
            state_unix: c.state_unix,
            used_bytes: c.used_bytes,
            label_epoch: c.label_epoch,
            capacity_bytes: c.capacity_bytes,
            worm: c.worm,
            mount_count: c.mount_count,
            last_mounted_unix: c.last_mounted_unix,
            last_written_unix: c.last_written_unix,
            last_read_unix: c.last_read_unix,
            label_unchecked_unix: c.label_unchecked_unix,
            health: None,
        }
    }

    /// The same with its last [`HEALTH_SHOWN`] health readings.
    pub async fn with_health(mut self, cat: &Catalogue) -> Result<CartridgeDetail> {
        self.health = Some(cat.health_of_cartridge(&self.barcode, HEALTH_SHOWN).await?);
        Ok(self)
    }
}

/// How many unmount readings one cartridge's or drive's view shows.
pub const HEALTH_SHOWN: u32 = 20;

/// One unmount's reading for people: when, which drive, its TapeAlert flags, what moved.
pub fn health_line(h: &HealthRecord) -> String {
    let n = |v: Option<u64>| v.map_or("-".to_string(), |n| n.to_string());
    let b = |v: Option<u64>| v.map_or("-".to_string(), crate::text::human_bytes);
    format!(
        "{:>12}  {} drive {} ({})  written {} read {} repositions {} backhitches {}{}{}",
        when(h.at_unix),
        h.barcode,
        h.drive,
        if h.drive_serial.is_empty() {
            "?"
        } else {
            &h.drive_serial
        },
        b(h.bytes_written),
        b(h.bytes_read),
        n(h.repositions),
        n(h.backhitches),
        match h.errors.describe() {
            e if e.is_empty() => String::new(),
            e => format!("  {e}"),
        },
        if h.alerts.is_empty() {
            String::new()
        } else {
            format!("  TapeAlert: {}", h.alerts)
        }
    )
}

/// How long ago a unix time in seconds was (`never` for 0).
fn when(unix: i64) -> String {
    crate::text::ago_ms(unix.saturating_mul(1000))
}

fn line(c: &CartridgeDetail) -> String {
    let free = if c.capacity_bytes == 0 {
        "?".to_string()
    } else {
        crate::text::human_bytes(c.capacity_bytes.saturating_sub(c.used_bytes))
    };
    let mut s = format!(
        "{:<10} {:<10} {:<9} {:<16} used {:>10} free {:>10} mounts {:>4} errors {:>3} written {} read {}",
        c.barcode,
        c.pool.as_deref().unwrap_or("-"),
        c.state,
        c.location.as_deref().unwrap_or("not seen"),
        crate::text::human_bytes(c.used_bytes),
        free,
        c.mount_count,
        c.errors,
        when(c.last_written_unix),
        when(c.last_read_unix),
    );
    if !c.state_reason.is_empty() {
        s.push_str(&format!("\n    {}: {}", c.state, c.state_reason));
    }
    s
}

fn detail(c: &CartridgeDetail, label: &Cartridge) -> String {
    let health = c.health.as_deref().unwrap_or_default();
    let mut out = vec![
        format!("barcode    {}", c.barcode),
        format!("pool       {}", c.pool.as_deref().unwrap_or("none")),
        format!("state      {}", c.state),
    ];
    if !c.state_by.is_empty() || !c.state_reason.is_empty() {
        out.push(format!(
            "           set by {}, {}{}",
            if c.state_by.is_empty() {
                "reel"
            } else {
                &c.state_by
            },
            when(c.state_unix),
            if c.state_reason.is_empty() {
                String::new()
            } else {
                format!(": {}", c.state_reason)
            }
        ));
    }
    out.push(format!(
        "location   {}",
        c.location.as_deref().unwrap_or("not seen by the changer")
    ));
    out.push(format!(
        "space      {} used of {}{}",
        crate::text::human_bytes(c.used_bytes),
        if c.capacity_bytes == 0 {
            "an unknown capacity (read at its first mount)".to_string()
        } else {
            crate::text::human_bytes(c.capacity_bytes)
        },
        if c.worm { ", WORM" } else { "" }
    ));
    out.push(format!(
        "mounts     {}, last {}",
        c.mount_count,
        when(c.last_mounted_unix)
    ));
    out.push(format!("written    {}", when(c.last_written_unix)));
    out.push(format!("read       {}", when(c.last_read_unix)));
    out.push(if c.errors == 0 {
        "errors     none caught".to_string()
    } else {
        format!(
            "errors     {} caught by reel's checks (`reel library integrity --cartridge {}`)",
            c.errors, c.barcode
        )
    });
    out.push(format!(
        "label      epoch {}{}",
        label.label_epoch,
        label
            .cartridge_uuid
            .map(|u| format!(", uuid {u}"))
            .unwrap_or_default()
    ));
    if c.label_unchecked_unix != 0 {
        out.push(format!(
            "           unchecked since it came back from a vault {}: no write before it is read",
            when(c.label_unchecked_unix)
        ));
    }
    if health.is_empty() {
        out.push("health     no unmount recorded yet".into());
    } else {
        let alerted = health.iter().filter(|h| h.tape_alerts != 0).count();
        out.push(format!(
            "health     last {} unmount{}, {alerted} with TapeAlert flags:",
            health.len(),
            if health.len() == 1 { "" } else { "s" }
        ));
        out.extend(health.iter().map(|h| format!("  {}", health_line(h))));
    }
    out.join("\n")
}

/// Run a cartridge command; `by` is who runs it (for the record).
pub async fn run(loaded: &LoadedConfig, cmd: CartridgeCommand, by: &str) -> Result<Printed> {
    let cat = Catalogue::open(&loaded.config.store.url).await?;
    let db = reel_queue::db::Db::connect(&loaded.config.store.url).await?;
    let elements = Inventory::new(db.clone()).read().await?.elements;
    match cmd {
        CartridgeCommand::Export { barcodes, to } => {
            let out = crate::vault_cmd::export(&cat, &barcodes, &to, by).await?;
            Ok(Printed {
                text: format!(
                    "exported to {}: {}; a worker moves each to a free mail slot \
                     (`reel cartridge vaulted` shows which have left), and recalls only they \
                     can serve wait for them",
                    to.trim(),
                    barcodes.join(" ")
                ),
                json: json!({"exported": out}),
            })
        }
        CartridgeCommand::Import {
            barcodes,
            library,
            timeout,
        } => {
            let asked = crate::vault_cmd::import(&db, &library, &barcodes, by).await?;
            let imports = reel_queue::cartridge_import::CartridgeImports::new(db.clone());
            let t0 = std::time::Instant::now();
            let mut now = asked.clone();
            while !now.is_done() && t0.elapsed() < std::time::Duration::from_secs(timeout) {
                tokio::time::sleep(std::time::Duration::from_millis(200)).await;
                now = imports.get(asked.id).await?.unwrap_or(now);
            }
            Ok(Printed {
                text: crate::vault_cmd::import_text(&now),
                json: json!({"import": now, "done": now.is_done()}),
            })
        }
        CartridgeCommand::Imports { limit } => {
            let all = reel_queue::cartridge_import::CartridgeImports::new(db.clone())
                .recent(limit)
                .await?;
            let text = if all.is_empty() {
                "no import was asked for".into()
            } else {
                all.iter()
                    .map(crate::vault_cmd::import_text)
                    .collect::<Vec<_>>()
                    .join("\n")
            };
            Ok(Printed {
                json: json!({"imports": all}),
                text,
            })
        }
        CartridgeCommand::Cleaning => {
            let all = cat.cleaning_cartridges().await?;
            let text = if all.is_empty() {
                format!(
                    "no cleaning cartridge seen; put one (barcode starting with `{}`) in a mail \
                     slot and `reel cartridge import`",
                    loaded.config.library.cleaning_prefix
                )
            } else {
                all.iter()
                    .map(|c| {
                        format!(
                            "{:<10} {:>4} use{}  {}{}",
                            c.barcode,
                            c.uses,
                            if c.uses == 1 { " " } else { "s" },
                            location(&elements, &c.barcode).unwrap_or_else(|| "not seen".into()),
                            if c.expired_unix > 0 {
                                format!(
                                    "  USED UP since {}: replace it",
                                    crate::text::when_ms(c.expired_unix * 1000)
                                )
                            } else {
                                String::new()
                            }
                        )
                    })
                    .collect::<Vec<_>>()
                    .join("\n")
            };
            Ok(Printed {
                json: json!({"cleaning_cartridges": all}),
                text,
            })
        }
        CartridgeCommand::Wanted => {
            let w = crate::vault_cmd::wanted(&cat, &db).await?;
            Ok(Printed {
                text: crate::vault_cmd::wanted_text(&w),
                json: json!({"wanted": w}),
            })
        }
        CartridgeCommand::Vaulted => {
            let v = crate::vault_cmd::vaulted(&cat).await?;
            let text = if v.is_empty() {
                "no cartridge is exported".to_string()
            } else {
                v.iter()
                    .map(|e| {
                        format!(
                            "{:<10} at {} since {} by {}; {}",
                            e.barcode,
                            e.location,
                            crate::text::when_ms(e.exported_unix * 1000),
                            e.exported_by,
                            match (e.left, location(&elements, &e.barcode)) {
                                (true, _) => "out of the storage slots".to_string(),
                                (false, None) => {
                                    "not seen in any library (taken out by hand)".to_string()
                                }
                                (false, Some(at)) => format!(
                                    "still inside ({at}): waiting for a free mail slot or for a \
                                     drive to unload it"
                                ),
                            }
                        )
                    })
                    .collect::<Vec<_>>()
                    .join("\n")
            };
            Ok(Printed {
                json: json!({"vaulted": v}),
                text,
            })
        }
        CartridgeCommand::Ls { pool, state } => {
            let state = state
                .map(|s| {
                    s.trim().parse::<CartridgeState>().map_err(|_| {
                        refused(
                            format!("`{}` is not a cartridge state", s.escape_debug()),
                            "new, active, disabled, full, broken, repacking, exported",
                        )
                    })
                })
                .transpose()?;
            let all: Vec<Cartridge> = cat
                .cartridges()
                .await?
                .into_iter()
                .filter(|c| pool.is_none() || c.pool == pool)
                .filter(|c| state.is_none_or(|s| c.state == s))
                .collect();
            let errors = cat.catch_counts(None).await?;
            let all: Vec<CartridgeDetail> = all
                .into_iter()
                .map(|c| CartridgeDetail::of(c, &elements, &errors))
                .collect();
            let filtered = pool.is_some() || state.is_some();
            let text = if all.is_empty() && filtered {
                "no cartridge matches (pools and states are matched exactly; `reel cartridge ls` lists all)".into()
            } else if all.is_empty() {
                "no cartridges; take some in with `reel intake`".into()
            } else {
                all.iter().map(line).collect::<Vec<_>>().join("\n")
            };
            Ok(Printed {
                json: json!({ "cartridges": all }),
                text,
            })
        }
        CartridgeCommand::Show { barcode } => {
            let c = cat
                .cartridge(&barcode)
                .await?
                .ok_or_else(|| unknown(&barcode))?;
            let errors = cat.catch_counts(Some(&barcode)).await?;
            let view = CartridgeDetail::of(c.clone(), &elements, &errors)
                .with_health(&cat)
                .await?;
            let text = detail(&view, &c);
            Ok(Printed {
                json: json!(view),
                text,
            })
        }
        CartridgeCommand::State {
            barcode,
            state,
            reason: r,
        } => {
            let (before, c) = set_state(&cat, &barcode, &state, &r, by).await?;
            let (state, r) = (c.state, c.state_reason.clone());
            let effect = match state {
                CartridgeState::Active => "it takes writes and reads again",
                CartridgeState::Full => "it is read, never written again",
                _ => {
                    "a drive using it stops at the next record boundary and none mounts it for \
                     recalls: its queued recalls read other copies or fail with this reason (a \
                     verify of it still runs)"
                }
            };
            Ok(Printed {
                json: json!(CartridgeDetail::of(
                    c.clone(),
                    &elements,
                    &cat.catch_counts(Some(&barcode)).await?
                )),
                text: format!("cartridge {barcode}: {before} -> {state} ({r}); {effect}"),
            })
        }
    }
}

/// An operator sets `barcode`'s state (checked by [`operator_state`] and
/// [`reel_queue::reason::check`]); returns its state before and the cartridge after.
pub async fn set_state(
    cat: &Catalogue,
    barcode: &str,
    state: &str,
    reason: &str,
    by: &str,
) -> Result<(CartridgeState, Cartridge)> {
    let state = operator_state(state)?;
    let reason = reel_queue::reason::check(reason)?;
    let before = cat
        .cartridge(barcode)
        .await?
        .ok_or_else(|| unknown(barcode))?;
    if before.state == CartridgeState::Exported {
        return Err(refused(
            format!("cartridge {barcode} is exported"),
            "it comes back through the import/export slots, not by a state change",
        ));
    }
    cat.set_cartridge_state_noted(barcode, state, &reason, by)
        .await?;
    let c = cat
        .cartridge(barcode)
        .await?
        .ok_or_else(|| unknown(barcode))?;
    Ok((before.state, c))
}

/// No cartridge `barcode` in the catalogue.
pub fn unknown(barcode: &str) -> JobsError {
    JobsError::NotFound {
        what: format!(
            "the catalogue has no cartridge `{}`",
            barcode.escape_debug()
        ),
        hint: "`reel cartridge ls` lists them; `reel intake` takes new ones in".into(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn operators_set_four_states() {
        for s in ["active", "disabled", "broken", "full", " broken "] {
            assert!(operator_state(s).is_ok(), "{s}");
        }
        for s in ["new", "repacking", "exported", "gone", ""] {
            assert!(operator_state(s).is_err(), "{s}");
        }
    }
}
