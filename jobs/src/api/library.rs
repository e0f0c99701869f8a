//! `GET /v1/library`: the library as an operator watches it, in one answer (the dashboard polls
//! it): each drive with what it holds, what it is doing and for which jobs; the slots and
//! import/export slots with their barcodes (as the workers last read the changer); the
//! cartridges by pool with their fill and where they are; the tape queues per cartridge and
//! pool (what `cta-admin showqueues` shows).

use std::collections::BTreeMap;

use axum::Json;
use axum::extract::{Extension, State};
use serde::Serialize;
use utoipa::ToSchema;

use super::auth::Caller;
use super::{ApiError, AppState, ErrorBody};
use reel_queue::db::now_ms;
use reel_queue::error::JobsError;
use reel_queue::requests::{DriveWork, TapeRequests};
use reel_queue::token::Scope;
use reel_queue::{DriveBoard, DriveStates, ElementView, Inventory};
use reel_worker::scheduler::MountTarget;

/// A drive.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, ToSchema)]
pub struct DriveView {
    /// Its name, `LIBRARY-INDEX`, as the workers call it.
    pub drive: String,
    /// Its index in the library, when known.
    pub index: Option<u32>,
    /// The worker holding it; `None` when no worker does (the drive is not in service).
    pub worker: Option<String>,
    /// `offline` (no worker), `down` (out of service, see `down`), `empty`, `mounting`,
    /// `reading`, `writing` or `idle` (a cartridge mounted, no batch running).
    pub state: String,
    /// The cartridge in it, if any.
    pub barcode: Option<String>,
    /// The pool it serves.
    pub pool: Option<String>,
    /// Since when it holds what it holds (unix ms).
    pub since_ms: Option<i64>,
    /// The jobs whose requests it runs now.
    pub work: Vec<DriveWork>,
    /// Why it is out of service (`reel drive down`, or its worker after repeated failures);
    /// `None` while it is in service.
    pub down: Option<String>,
}

/// A cartridge.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, ToSchema)]
pub struct CartridgeView {
    /// Barcode.
    pub barcode: String,
    /// Pool (none until labelled into one).
    pub pool: Option<String>,
    /// Catalogue state.
    pub state: String,
    /// Bytes written.
    pub used_bytes: u64,
    /// Capacity (0: not known yet).
    pub capacity_bytes: u64,
    /// Write-once.
    pub worm: bool,
    /// Times mounted.
    pub mount_count: u64,
    /// Where it is, as the workers last saw (`slot 3`, `drive 0`, `import_export 1`), or
    /// `None` when it is not in the library.
    pub location: Option<String>,
}

/// The library in one answer.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, ToSchema)]
pub struct LibraryView {
    /// Drives, by name.
    pub drives: Vec<DriveView>,
    /// Every element the changer reported (drives, slots, import/export slots, picker).
    pub elements: Vec<ElementView>,
    /// When a worker last read the changer (unix ms; 0: never).
    pub seen_ms: i64,
    /// Cartridges by pool, then barcode.
    pub cartridges: Vec<CartridgeView>,
    /// Queued tape work and why each queue waits, highest priority then oldest first (as
    /// `GET /v1/queues`).
    pub queues: Vec<crate::queue_cmd::QueueView>,
    /// Now, by the server's clock (unix ms), to age the times above.
    pub now_ms: i64,
}

/// The library: drives, slots, cartridges and queues.
#[utoipa::path(
    get,
    path = "/v1/library",
    tag = "library",
    responses(
        (status = 200, description = "the library", body = LibraryView),
        (status = 403, description = "the token lacks `read`", body = ErrorBody),
        (status = 503, description = "store unreachable", body = ErrorBody),
    )
)]
pub(super) async fn show(
    State(state): State<AppState>,
    Extension(caller): Extension<Caller>,
) -> Result<Json<LibraryView>, ApiError> {
    caller.require(Scope::Read, "see the library")?;
    let db = state.queue().store().db().clone();
    let requests = TapeRequests::new(db.clone());
    let board = DriveBoard::new(db.clone()).live().await?;
    let work = requests.by_drive().await?;
    let inventory = Inventory::new(db.clone()).read().await?;
    let queues = crate::queue_cmd::queues(&db, state.catalogue(), state.config()).await?;
    let cartridges = state
        .catalogue()
        .cartridges()
        .await
        .map_err(JobsError::Catalogue)?;

    let index_of = |name: &str| name.rsplit('-').next().and_then(|i| i.parse::<u32>().ok());
    let mut drives: BTreeMap<String, DriveView> = BTreeMap::new();
    for e in board {
        let mut work: Vec<DriveWork> = work
            .iter()
            .filter(|w| w.drive == e.drive)
            .cloned()
            .collect();
        work.sort_by(|a, b| a.job.cmp(&b.job));
        let (state, barcode, pool, since) = match &e.mount {
            None => ("empty", None, None, None),
            Some(m) => {
                let state = match (&m.barcode, &m.target, work.is_empty()) {
                    (None, _, _) => "mounting",
                    (Some(_), _, true) => "idle",
                    (Some(_), MountTarget::Read { .. }, false) => "reading",
                    (Some(_), MountTarget::Write { .. }, false) => "writing",
                };
                (state, m.barcode.clone(), m.pool.clone(), Some(m.since_ms))
            }
        };
        drives.insert(
            e.drive.clone(),
            DriveView {
                index: index_of(&e.drive),
                drive: e.drive,
                worker: Some(e.holder),
                state: state.into(),
                barcode,
                pool,
                since_ms: since,
                work,
                down: None,
            },
        );
    }
    // Drives the changer reports that no worker holds now (named as the workers name them).
    for e in inventory.elements.iter().filter(|e| e.kind == "drive") {
        let name = format!("{}-{}", e.library, e.index);
        if drives.contains_key(&name) {
            continue;
        }
        drives.insert(
            name.clone(),
            DriveView {
                drive: name,
                index: Some(e.index),
                worker: None,
                state: "offline".into(),
                barcode: e.barcode.clone(),
                pool: None,
                since_ms: None,
                work: Vec::new(),
                down: None,
            },
        );
    }
    // Drives out of service say so, and why.
    for s in DriveStates::new(db.clone()).list().await? {
        if let (false, Some(d)) = (s.is_up(), drives.get_mut(&s.drive)) {
            if matches!(d.state.as_str(), "empty" | "offline") {
                d.state = "down".into();
            }
            d.down = Some(format!("{} (by {})", s.reason, s.by));
        }
    }
    let location = |barcode: &str| crate::cartridge_cmd::location(&inventory.elements, barcode);
    let mut cartridges: Vec<CartridgeView> = cartridges
        .into_iter()
        .map(|c| CartridgeView {
            location: location(&c.barcode),
            barcode: c.barcode,
            pool: c.pool,
            state: c.state.as_str().into(),
            used_bytes: c.used_bytes,
            capacity_bytes: c.capacity_bytes,
            worm: c.worm,
            mount_count: c.mount_count,
        })
        .collect();
    cartridges.sort_by(|a, b| (&a.pool, &a.barcode).cmp(&(&b.pool, &b.barcode)));
    Ok(Json(LibraryView {
        drives: drives.into_values().collect(),
        elements: inventory.elements,
        seen_ms: inventory.seen_ms,
        cartridges,
        queues,
        now_ms: now_ms(),
    }))
}
