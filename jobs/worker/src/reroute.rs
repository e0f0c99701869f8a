//! Queued reads of a cartridge that cannot be mounted now (an operator disabled it or marked
//! it broken, reel found it broken or disabled, or it was exported) are sent to another copy.
//! With none, a read of a disabled or broken cartridge fails with the cartridge's state and
//! reason (a recall never waits on a cartridge no drive will mount for it), and a read of an
//! exported one waits for it to be imported (`reel cartridge wanted` lists it). The copy is chosen by the one policy of [`crate::recall_copy`]. A
//! cartridge task (verify, label, rebuild) is about that cartridge: on a disabled or broken one
//! it stays (a verify is how an operator checks one), on an exported one it fails.
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
/// in the catalogue's order (`copies`: `None` for a cartridge task, which has none); `None`
/// leaves it where it is.
pub fn decide(
    r: &TapeRequest,
    cart: &Cartridge,
    copies: Option<Vec<reel_engine::catalogue::CopyLocation>>,
) -> Option<Reroute> {
    let fail = |extra: &str| {
        Some(Reroute::Fail {
            id: r.id,
            reason: format!("{}{extra}", why(cart)),
        })
    };
    if matches!(CartridgeTask::of(r), Ok(Some(_))) {
        if cart.state == CartridgeState::Exported {
            return fail("; bring it back into the library to run this task on it");
        }
        return None;
    }
    let detail: ReadDetail = match request_detail::parse(r) {
        Ok(d) => d,
        Err(e) => {
            return Some(Reroute::Fail {
                id: r.id,
                reason: e.to_string(),
            });
        }
    };
    let mut bad: HashSet<String> = detail.bad_copies.iter().cloned().collect();
    bad.insert(cart.barcode.clone());
    match copies.and_then(|c| crate::recall_copy::choose(c, &bad)) {
        // Off one exported cartridge only to a copy that can be read now.
        Some(c) if cart.state == CartridgeState::Exported && !crate::recall_copy::readable(&c) => {
            None
        }
        Some(c) => {
            let d = detail.from_other_copy(&c, detail.bad_copies.clone());
            Some(Reroute::To {
                id: r.id,
                barcode: c.barcode.clone(),
                detail: request_detail::to_json(&d),
            })
        }
        // An exported cartridge comes back: its reads wait for it.
        None if cart.state == CartridgeState::Exported => None,
        None => fail(&format!(
            ", and {} has no other readable copy; bring the cartridge back into service \
             (`reel cartridge state {} active --reason …`) and retry the job, or restore the \
             object from elsewhere",
            r.object_key, cart.barcode
        )),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use reel_engine::catalogue::{ContainerState, CopyLocation};
    use reel_engine::session::destination::Overwrite;
    use reel_queue::mount::MountTarget;

    fn cart(barcode: &str, state: CartridgeState, reason: &str) -> Cartridge {
        Cartridge {
            barcode: barcode.into(),
            pool: Some("p1".into()),
            state,
            worm: false,
            capacity_bytes: 0,
            used_bytes: 0,
            eod_block: 0,
            next_file: 0,
            calibrated: true,
            mount_count: 0,
            label_epoch: 1,
            cartridge_uuid: None,
            state_reason: reason.into(),
            state_by: "ops".into(),
            state_unix: 1,
            last_mounted_unix: 0,
            last_written_unix: 0,
            last_read_unix: 0,
            label_unchecked_unix: 0,
        }
    }

    fn copy(barcode: &str, cart: CartridgeState) -> CopyLocation {
        crate::recall_copy::tests::copy(barcode, cart, ContainerState::Verified)
    }

    fn read_of(c: &CopyLocation) -> TapeRequest {
        let mut d = ReadDetail::of(c, "/r/k".into(), "/r".into(), Overwrite::Never);
        d.confine = Some("/r".into());
        TapeRequest {
            id: 5,
            job_id: "j".into(),
            target: MountTarget::Read {
                barcode: c.barcode.clone(),
            },
            pool: None,
            object_key: "k".into(),
            bytes: 10,
            files: 1,
            priority: 50,
            detail: request_detail::to_json(&d),
            state: "queued".into(),
            claimed_by: None,
            claim_epoch: None,
            error: None,
            attempts: 0,
        }
    }

    #[test]
    fn a_read_moves_to_the_other_copy_keeping_where_it_goes() {
        let a = copy("A", CartridgeState::Broken);
        let b = copy("B", CartridgeState::Full);
        let r = read_of(&a);
        let to = decide(
            &r,
            &cart("A", CartridgeState::Broken, "dropped"),
            Some(vec![a, b]),
        );
        let Some(Reroute::To {
            id,
            barcode,
            detail,
        }) = to
        else {
            panic!("{to:?}");
        };
        assert_eq!((id, barcode.as_str()), (5, "B"));
        let d: ReadDetail = serde_json::from_value(detail).unwrap();
        assert_eq!(d.dest, std::path::PathBuf::from("/r/k"));
        assert_eq!(d.confine, Some("/r".into()));
        assert_eq!(d.overwrite, Overwrite::Never);
    }

    #[test]
    fn reads_of_an_exported_cartridge_wait_unless_a_copy_can_be_read_now() {
        let a = copy("A", CartridgeState::Exported);
        let b = copy("B", CartridgeState::Exported);
        let c = copy("C", CartridgeState::Active);
        let r = read_of(&a);
        let out_a = cart("A", CartridgeState::Exported, "at vault B");
        // Only exported copies: it stays (no move between two vaulted copies).
        assert_eq!(decide(&r, &out_a, Some(vec![a.clone(), b.clone()])), None);
        assert_eq!(decide(&r, &out_a, Some(vec![a.clone()])), None);
        // A copy that can be read now: it moves there.
        let to = decide(&r, &out_a, Some(vec![a.clone(), b.clone(), c]));
        assert!(
            matches!(&to, Some(Reroute::To { barcode, .. }) if barcode == "C"),
            "{to:?}"
        );
        // Off a disabled cartridge whose only other copy is exported: it moves there, to wait.
        let d = copy("D", CartridgeState::Disabled);
        let to = decide(
            &read_of(&d),
            &cart("D", CartridgeState::Disabled, "dusty"),
            Some(vec![d.clone(), b]),
        );
        assert!(
            matches!(&to, Some(Reroute::To { barcode, .. }) if barcode == "B"),
            "{to:?}"
        );
    }

    #[test]
    fn with_no_readable_copy_it_fails_naming_the_state_and_reason() {
        let a = copy("A", CartridgeState::Disabled);
        let b = copy("B", CartridgeState::Broken);
        let r = read_of(&a);
        let out = decide(
            &r,
            &cart("A", CartridgeState::Disabled, "leader pin"),
            Some(vec![a, b]),
        );
        let Some(Reroute::Fail { reason, .. }) = out else {
            panic!("{out:?}");
        };
        assert!(
            reason.contains("cartridge A is disabled (leader pin)"),
            "{reason}"
        );
        assert!(reason.contains("no other readable copy"), "{reason}");
        for s in [
            CartridgeState::Disabled,
            CartridgeState::Broken,
            CartridgeState::Exported,
        ] {
            assert!(unmountable(s));
        }
        for s in [
            CartridgeState::Active,
            CartridgeState::Full,
            CartridgeState::Repacking,
        ] {
            assert!(!unmountable(s));
        }
    }
}
