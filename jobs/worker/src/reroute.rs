//! Queued reads of a cartridge that cannot be mounted now (an operator disabled it or marked
//! it broken, reel found it broken or disabled, or it was exported) are sent to another copy,
//! or fail with the cartridge's state and reason: a recall never waits on a cartridge no drive
//! will mount. The copy is chosen by the one policy of [`crate::recall_copy`]; a cartridge task
//! (verify, label, rebuild) has no other copy and fails.
//!
//! Each worker runs this pass with its maintenance (every heartbeat), so a state set by any
//! host, the CLI or the API takes effect within a heartbeat of the next worker's.

use std::collections::HashSet;

use reel_engine::catalogue::{Cartridge, CartridgeState};
use reel_queue::cartridge_task::CartridgeTask;
use reel_queue::request_detail::{self, ReadDetail};
use reel_queue::requests::TapeRequest;

/// What becomes of one queued read.
#[derive(Debug, Clone, PartialEq)]
pub enum Reroute {
    /// Read this cartridge instead, with this detail.
    To {
        /// The request.
        id: i64,
        /// The other copy's cartridge.
        barcode: String,
        /// Its new detail.
        detail: serde_json::Value,
    },
    /// No other copy can be read: fail it with this reason.
    Fail {
        /// The request.
        id: i64,
        /// Why, naming the cartridge's state and its reason.
        reason: String,
    },
}

/// Whether no drive may mount a cartridge in `state` for reading.
pub fn unmountable(state: CartridgeState) -> bool {
    matches!(
        state,
        CartridgeState::Disabled | CartridgeState::Broken | CartridgeState::Exported
    )
}

/// Why a read of `cart` cannot be served there, for a job's error.
pub fn why(cart: &Cartridge) -> String {
    let mut s = format!("cartridge {} is {}", cart.barcode, cart.state);
    if !cart.state_reason.is_empty() {
        s.push_str(&format!(" ({})", cart.state_reason));
    }
    s
}

/// Decide for one queued read `r` of the unmountable `cart`, given the copies of its object
/// in the catalogue's order (`copies`: `None` for a cartridge task, which has none).
pub fn decide(
    r: &TapeRequest,
    cart: &Cartridge,
    copies: Option<Vec<reel_engine::catalogue::CopyLocation>>,
) -> Reroute {
    let fail = |extra: &str| Reroute::Fail {
        id: r.id,
        reason: format!("{}{extra}", why(cart)),
    };
    if matches!(CartridgeTask::of(r), Ok(Some(_))) {
        return fail("; a cartridge task runs on that cartridge only");
    }
    let detail: ReadDetail = match request_detail::parse(r) {
        Ok(d) => d,
        Err(e) => {
            return Reroute::Fail {
                id: r.id,
                reason: e.to_string(),
            };
        }
    };
    let mut bad: HashSet<String> = detail.bad_copies.iter().cloned().collect();
    bad.insert(cart.barcode.clone());
    match copies.and_then(|c| crate::recall_copy::choose(c, &bad)) {
        Some(c) => {
            let mut d = ReadDetail::of(
                &c,
                detail.dest.clone(),
                detail.root.clone(),
                detail.overwrite,
            );
            d.confine = detail.confine.clone();
            d.bad_copies = detail.bad_copies.clone();
            Reroute::To {
                id: r.id,
                barcode: c.barcode.clone(),
                detail: request_detail::to_json(&d),
            }
        }
        None => fail(&format!(
            "and {} has no other readable copy; bring the cartridge back into service \
             (`reel cartridge state {} active`) or restore the object from elsewhere",
            r.object_key, cart.barcode
        )),
    }
}
