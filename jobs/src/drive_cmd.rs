//! `reel drive ls|show|down|up`: the drives of every host, whether each is in service, and
//! taking one out of service and back ([`reel_queue::drive_state`]). Works from the store
//! alone (what workers publish), so it runs on any host, with no device plugin.

use clap::Subcommand;
use serde::Serialize;
use serde_json::{Value, json};
use utoipa::ToSchema;

use reel_queue::config::LoadedConfig;
use reel_queue::db::Db;
use reel_queue::drive_progress::{BatchProgress, DriveProgress};
use reel_queue::error::Result;
use reel_queue::mount::MountTarget;
use reel_queue::{BoardEntry, DriveBoard, DriveService, DriveStates, Inventory, Service};

/// `reel drive …`
#[derive(Debug, Subcommand)]
pub enum DriveCommand {
    /// Every drive a worker has seen: in service or not (with why, who and since when), the
    /// worker holding it, and what it is doing.
    Ls,
    /// One drive, in full.
    Show {
        /// The drive (`LIBRARY-INDEX`, as `reel drive ls` lists it).
        drive: String,
    },
    /// Take a drive out of service, on every host: it ends the step it is in at a record
    /// boundary, gives back its claimed work to the other drives, unloads and takes no mount
    /// until `reel drive up`.
    Down {
        /// The drive.
        drive: String,
        /// Why (shown to every operator, kept with the drive).
        #[arg(long)]
        reason: String,
    },
    /// Recover what a drive that is down holds through the changer: the worker holding the
    /// drive unloads the cartridge and puts it back in a slot, or, when the drive does not
    /// answer, has the robot pull it. Then the cartridge can be read in another drive.
    Reset {
        /// The drive (it must be down: `reel drive down DRIVE --reason …`).
        drive: String,
        /// Seconds to wait for the worker to do it (it stays asked for after that).
        #[arg(long, default_value_t = 120)]
        timeout: u64,
    },
    /// Clean a drive with one of the library's cleaning cartridges (barcode prefix
    /// `[library] cleaning_prefix`, or reported as cleaning media): the worker holding the
    /// drive does it between two batches, unloading what the drive holds first.
    Clean {
        /// The drive.
        drive: String,
        /// Seconds to wait for the worker to do it (it stays asked for after that).
        #[arg(long, default_value_t = 120)]
        timeout: u64,
    },
    /// Put a drive back in service.
    Up {
        /// The drive.
        drive: String,
        /// What was done to it (optional; kept with the drive).
        #[arg(long, default_value = "")]
        reason: String,
    },
}

/// What a drive command printed.
pub struct Printed {
    /// For `--json`.
    pub json: Value,
    /// For people.
    pub text: String,
}

/// Who runs this command, for the record: the user behind sudo, else the login user, else
/// the uid.
pub fn operator() -> String {
    ["SUDO_USER", "USER", "LOGNAME"]
        .iter()
        .find_map(|v| std::env::var(v).ok().filter(|s| !s.is_empty()))
        .unwrap_or_else(|| format!("uid {}", rustix::process::getuid().as_raw()))
}

/// One drive as the store sees it.
#[derive(Debug, Clone)]
pub struct DriveView {
    /// In service or not.
    pub service: DriveService,
    /// The worker holding its lease, and what it holds; `None` when no live worker has it.
    pub board: Option<BoardEntry>,
    /// The barcode the changer last reported in it.
    pub loaded: Option<String>,
    /// What its running batch has done so far; `None` when it runs none.
    pub batch: Option<BatchProgress>,
}

impl DriveView {
    /// What it is doing, in a word or two.
    pub fn activity(&self) -> String {
        match &self.board {
            None => "no worker".into(),
            Some(b) => match &b.mount {
                None if !self.service.is_up() => "down".into(),
                None => "empty".into(),
                Some(m) => match &m.target {
                    MountTarget::Read { barcode } => format!("reading {barcode}"),
                    MountTarget::Write { pool } => format!(
                        "writing {} for pool {pool}",
                        m.barcode.as_deref().unwrap_or("(mounting)")
                    ),
                },
            },
        }
    }

    /// For `--json` and the API.
    pub fn status(&self) -> DriveStatus {
        DriveStatus {
            drive: self.service.drive.clone(),
            state: self.service.state,
            reason: self.service.reason.clone(),
            by: self.service.by.clone(),
            automatic: self.service.automatic,
            since_ms: self.service.since_ms,
            worker: self.board.as_ref().map(|b| b.holder.clone()),
            activity: self.activity(),
            cartridge: self.loaded.clone(),
            rate_bytes_per_sec: self
                .batch
                .as_ref()
                .and_then(|b| b.rate_bytes_per_sec(reel_queue::db::now_ms())),
            batch: self.batch.clone(),
            health: None,
            cleanings: None,
        }
    }

    fn to_json(&self) -> Value {
        json!(self.status())
    }
}

/// A drive's service state and what it does, as `reel drive ls --json` and `GET /v1/drives`
/// give it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, ToSchema)]
pub struct DriveStatus {
    /// `LIBRARY-INDEX`.
    pub drive: String,
    /// `up` or `down`.
    pub state: Service,
    /// Why it was last set (empty: never set).
    pub reason: String,
    /// Who set it: an OS user, `token:ID` for the API, `worker:NAME` when a worker took the
    /// drive down after repeated failures.
    pub by: String,
    /// Whether a worker took it down by itself.
    pub automatic: bool,
    /// Since when (unix ms; 0: never set).
    pub since_ms: i64,
    /// The worker holding it; `None` when no live worker does.
    pub worker: Option<String>,
    /// What it does: `no worker`, `down`, `empty`, `reading BARCODE`, `writing BARCODE for
    /// pool POOL`.
    pub activity: String,
    /// The cartridge the changer last reported in it.
    pub cartridge: Option<String>,
    /// Its running batch: the jobs it serves, files and bytes done of the batch's, the tape
    /// block near which it is; `None` when it runs none.
    pub batch: Option<BatchProgress>,
    /// Bytes its running batch finished per second since it started (MEASURED); `None`
    /// before the first second or the first finished byte.
    pub rate_bytes_per_sec: Option<u64>,
    /// What it reported at its last unmounts (TapeAlert flags, bytes, repositions), newest
    /// first; only on one drive's view.
    #[serde(skip_serializing_if = "Option::is_none")]
    #[schema(value_type = Option<Vec<Object>>)]
    pub health: Option<Vec<reel_engine::catalogue::HealthRecord>>,
    /// Its last cleanings, newest first; only on one drive's view.
    #[serde(skip_serializing_if = "Option::is_none")]
    #[schema(value_type = Option<Vec<Object>>)]
    pub cleanings: Option<Vec<reel_engine::catalogue::CleaningRecord>>,
}

impl DriveStatus {
    /// The same with the drive's last health readings and cleanings from the catalogue.
    pub async fn with_history(mut self, cat: &reel_engine::catalogue::Catalogue) -> Result<Self> {
        if let Some((library, i)) = library_and_index(&self.drive) {
            self.health = Some(
                cat.health_of_library_drive(library, i, crate::cartridge_cmd::HEALTH_SHOWN)
                    .await?,
            );
            self.cleanings = Some(cat.cleanings_of_drive(library, i, CLEANINGS_SHOWN).await?);
        }
        Ok(self)
    }
}

/// Every known drive with its state, its worker and its cartridge.
pub async fn views(db: &Db) -> Result<Vec<DriveView>> {
    let states = DriveStates::new(db.clone()).list().await?;
    let board = DriveBoard::new(db.clone()).live().await?;
    let inventory = Inventory::new(db.clone()).read().await?;
    let batches = DriveProgress::new(db.clone()).live().await?;
    Ok(states
        .into_iter()
        .map(|service| {
            let loaded = inventory
                .elements
                .iter()
                .find(|e| {
                    e.kind == "drive" && format!("{}-{}", e.library, e.index) == service.drive
                })
                .and_then(|e| e.barcode.clone());
            let board = board.iter().find(|b| b.drive == service.drive).cloned();
            // A batch is shown only on a drive that holds a mount.
            let batch = batches
                .iter()
                .find(|(d, _)| *d == service.drive)
                .filter(|_| board.as_ref().is_some_and(|b| b.mount.is_some()))
                .map(|(_, p)| p.clone());
            DriveView {
                service,
                board,
                loaded,
                batch,
            }
        })
        .collect())
}

/// When a state was set; nothing for a drive never set.
fn since(ms: i64) -> String {
    if ms == 0 {
        String::new()
    } else {
        crate::text::ago_ms(ms)
    }
}

fn line(v: &DriveView) -> String {
    let s = &v.service;
    let mut out = format!(
        "{:<28} {:<5} {:<34} {}",
        s.drive,
        if s.is_up() { "up" } else { "DOWN" },
        v.activity(),
        v.board.as_ref().map(|b| b.holder.as_str()).unwrap_or("-"),
    );
    if !s.is_up() {
        out.push_str(&format!(
            "\n    {} by {}, {}: {}",
            if s.automatic {
                "taken down automatically"
            } else {
                "taken down"
            },
            s.by,
            since(s.since_ms),
            s.reason
        ));
    }
    out
}

fn detail(v: &DriveView, health: &[reel_engine::catalogue::HealthRecord]) -> String {
    let s = &v.service;
    let mut out = vec![
        format!("drive      {}", s.drive),
        format!("state      {}", if s.is_up() { "up" } else { "down" }),
    ];
    if !s.by.is_empty() {
        out.push(format!(
            "set        by {}{}, {}",
            s.by,
            if s.automatic { " (automatic)" } else { "" },
            since(s.since_ms)
        ));
    }
    if !s.reason.is_empty() {
        out.push(format!("reason     {}", s.reason));
    }
    out.push(format!(
        "worker     {}",
        v.board
            .as_ref()
            .map(|b| b.holder.as_str())
            .unwrap_or("none")
    ));
    out.push(format!("activity   {}", v.activity()));
    if let Some(b) = &v.batch {
        out.extend(batch_lines(b));
    }
    out.push(format!(
        "cartridge  {}",
        v.loaded.as_deref().unwrap_or("none")
    ));
    match health.iter().find(|h| h.tape_alerts != 0) {
        Some(h) => out.push(format!(
            "TapeAlert  last at an unmount {}: {}",
            crate::text::ago_ms(h.at_unix.saturating_mul(1000)),
            h.alerts
        )),
        None if !health.is_empty() => out.push(format!(
            "TapeAlert  none at its last {} unmounts",
            health.len()
        )),
        None => {}
    }
    if health.is_empty() {
        out.push("unmounts   none recorded yet".into());
    } else {
        out.push("unmounts   newest first:".into());
        out.extend(
            health
                .iter()
                .map(|h| format!("  {}", crate::cartridge_cmd::health_line(h))),
        );
    }
    out.join("\n")
}

/// The running batch for people: its jobs, how far it is, how fast, where on the tape.
fn batch_lines(b: &BatchProgress) -> Vec<String> {
    let bytes = crate::text::human_bytes;
    let more = b.job_count.saturating_sub(b.jobs.len() as u64);
    let mut out = vec![format!(
        "job        {}{}",
        b.jobs.join(" "),
        if more > 0 {
            format!(" and {more} more")
        } else {
            String::new()
        }
    )];
    out.push(format!(
        "batch      {} of {} files, {} of {}, started {}",
        b.files_done,
        b.files,
        bytes(b.bytes_done),
        bytes(b.bytes),
        crate::text::ago_ms(b.started_ms)
    ));
    if let Some(rate) = b.rate_bytes_per_sec(reel_queue::db::now_ms()) {
        out.push(format!(
            "throughput {}/s since the batch started (last progress {})",
            bytes(rate),
            crate::text::ago_ms(b.updated_ms)
        ));
    }
    if let Some(block) = b.block {
        out.push(format!("position   near block {block}"));
    }
    out
}

/// How many of a drive's last cleanings `drive show` lists.
pub const CLEANINGS_SHOWN: u32 = 10;

/// The drive's library and index, from its name (`LIBRARY-INDEX`).
fn library_and_index(drive: &str) -> Option<(&str, u32)> {
    let (library, index) = drive.rsplit_once('-')?;
    Some((library, index.parse().ok()?))
}

/// Ask for a reset or a cleaning of `drive` (`what`: the JSON key and the word for people)
/// and wait up to `timeout` seconds for its worker to do it.
async fn ask_and_wait(
    db: &reel_queue::db::Db,
    requests: &reel_queue::drive_request::DriveResets,
    drive: &str,
    timeout: u64,
    (key, word): (&str, &str),
) -> Result<Printed> {
    let asked = requests.request(drive, &operator()).await?;
    let t0 = std::time::Instant::now();
    loop {
        let now = requests.get(drive).await?;
        if let Some(r) = now.filter(|r| r.requested_ms == asked.requested_ms && r.is_done()) {
            return Ok(Printed {
                text: format!("drive {drive} {word}: {}", r.result),
                json: json!({key: r, "done": true}),
            });
        }
        if t0.elapsed() >= std::time::Duration::from_secs(timeout) {
            let held = views(db)
                .await?
                .into_iter()
                .find(|v| v.service.drive == drive)
                .and_then(|v| v.board.map(|b| b.holder));
            return Ok(Printed {
                text: format!(
                    "drive {drive}: the {word} is asked for; {} does it at its next poll",
                    held.map(|w| format!("worker {w}")).unwrap_or_else(|| {
                        "no worker holds the drive now; the next worker to hold it".into()
                    })
                ),
                json: json!({key: asked, "done": false}),
            });
        }
        tokio::time::sleep(std::time::Duration::from_millis(200)).await;
    }
}

/// Run a drive command.
pub async fn run(loaded: &LoadedConfig, cmd: DriveCommand) -> Result<Printed> {
    let db = Db::connect(&loaded.config.store.url).await?;
    let states = DriveStates::new(db.clone());
    let one = |drive: &str, all: Vec<DriveView>| all.into_iter().find(|v| v.service.drive == drive);
    match cmd {
        DriveCommand::Ls => {
            let all = views(&db).await?;
            let text = if all.is_empty() {
                "no drives yet: a drive is listed once a worker has run on its library (`reel worker`)".into()
            } else {
                all.iter().map(line).collect::<Vec<_>>().join("\n")
            };
            Ok(Printed {
                json: json!({"drives": all.iter().map(DriveView::to_json).collect::<Vec<_>>()}),
                text,
            })
        }
        DriveCommand::Show { drive } => {
            // The same refusal as down and up for a name nobody knows.
            let view = match one(&drive, views(&db).await?) {
                Some(v) => v,
                None => {
                    return Err(reel_queue::JobsError::NotFound {
                        what: format!("no worker has seen a drive `{}`", drive.escape_debug()),
                        hint: "`reel drive ls` lists the drives".into(),
                    });
                }
            };
            let cat = reel_engine::catalogue::Catalogue::open(&loaded.config.store.url).await?;
            let status = view.status().with_history(&cat).await?;
            let health = status.health.clone().unwrap_or_default();
            let cleanings = status.cleanings.clone().unwrap_or_default();
            let json = json!(status);
            let mut text = detail(&view, &health);
            match cleanings.first() {
                Some(c) => text.push_str(&format!(
                    "\ncleaned    {} with {} ({}; {} cleaning{} on record)",
                    crate::text::when_ms(c.at_unix * 1000),
                    c.barcode,
                    c.outcome,
                    cleanings.len(),
                    if cleanings.len() == 1 { "" } else { "s" }
                )),
                None => text.push_str("\ncleaned    never by reel"),
            }
            Ok(Printed { json, text })
        }
        DriveCommand::Down { drive, reason } => {
            let s = states.down(&drive, &reason, &operator()).await?;
            let view = one(&s.drive, views(&db).await?);
            Ok(Printed {
                json: view.as_ref().map(DriveView::to_json).unwrap_or_default(),
                text: format!(
                    "drive {} is down: it ends its current step, unloads and takes no new mount until `reel drive up {}`",
                    s.drive, s.drive
                ),
            })
        }
        DriveCommand::Reset { drive, timeout } => {
            let resets = reel_queue::drive_request::DriveResets::new(db.clone());
            ask_and_wait(&db, &resets, &drive, timeout, ("reset", "reset")).await
        }
        DriveCommand::Clean { drive, timeout } => {
            let cleans = reel_queue::drive_request::DriveResets::cleans(db.clone());
            ask_and_wait(&db, &cleans, &drive, timeout, ("clean", "cleaning")).await
        }
        DriveCommand::Up { drive, reason } => {
            let s = states.up(&drive, &reason, &operator()).await?;
            let view = one(&s.drive, views(&db).await?);
            Ok(Printed {
                json: view.as_ref().map(DriveView::to_json).unwrap_or_default(),
                text: format!("drive {} is up: it takes mounts again", s.drive),
            })
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_running_batch_reads_as_job_progress_throughput_and_position() {
        let now = reel_queue::db::now_ms();
        let mut b = BatchProgress {
            jobs: vec!["j1".into(), "j2".into()],
            job_count: 5,
            files: 12,
            files_done: 3,
            bytes: 12 << 20,
            bytes_done: 3 << 20,
            block: Some(4242),
            started_ms: now - 2000,
            updated_ms: now,
        };
        let text = batch_lines(&b).join("\n");
        assert!(text.contains("job        j1 j2 and 3 more"), "{text}");
        assert!(
            text.contains("batch      3 of 12 files, 3.0 MiB of 12.0 MiB"),
            "{text}"
        );
        assert!(
            text.contains("throughput 1.5 MiB/s since the batch started"),
            "{text}"
        );
        assert!(text.contains("position   near block 4242"), "{text}");
        // Just started: no rate, no position, no "more".
        b.job_count = 2;
        (b.bytes_done, b.files_done, b.block, b.started_ms) = (0, 0, None, now);
        let text = batch_lines(&b).join("\n");
        assert!(text.contains("job        j1 j2\n"), "{text}");
        assert!(
            !text.contains("throughput") && !text.contains("position"),
            "{text}"
        );
    }
}
