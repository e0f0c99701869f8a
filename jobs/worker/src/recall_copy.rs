//! Which copy a recall reads: the one policy, used when a recall is planned and again when a
//! copy turns out bad mid-read.
//!
//! A copy is readable when its cartridge can be mounted (not disabled, broken or exported) and
//! its container is durable or verified (a container still being written, or dead, holds
//! nothing to read). Of the readable copies the first in the catalogue's order (copy index:
//! the storage class's first pool first) is read, skipping cartridges this request already
//! found bad. With none, a good copy on an exported cartridge is chosen: the read waits for
//! that cartridge to be imported. Nothing left means the object cannot be read.

use std::collections::HashSet;

use reel_engine::catalogue::{CartridgeState, ContainerState, CopyLocation};

/// Whether `c` can be read at all.
pub fn readable(c: &CopyLocation) -> bool {
    !matches!(
        c.cartridge_state,
        CartridgeState::Disabled | CartridgeState::Broken | CartridgeState::Exported
    ) && matches!(
        c.container_state,
        ContainerState::Durable | ContainerState::Verified
    )
}

/// Whether `c` is a good copy on a cartridge out of the library: readable once it is back.
pub fn vaulted(c: &CopyLocation) -> bool {
    c.cartridge_state == CartridgeState::Exported
        && matches!(
            c.container_state,
            ContainerState::Durable | ContainerState::Verified
        )
}

/// The copy to read among `copies` (the catalogue's order), avoiding the cartridges in `bad`:
/// the first [`readable`] one, else the first [`vaulted`] one.
pub fn choose(copies: Vec<CopyLocation>, bad: &HashSet<String>) -> Option<CopyLocation> {
    let mut out = None;
    for c in copies.into_iter().filter(|c| !bad.contains(&c.barcode)) {
        if readable(&c) {
            return Some(c);
        }
        if out.is_none() && vaulted(&c) {
            out = Some(c);
        }
    }
    out
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;

    /// A copy of `k` on `barcode` (also for the re-route tests).
    pub(crate) fn copy(barcode: &str, cart: CartridgeState, cont: ContainerState) -> CopyLocation {
        CopyLocation {
            key: "k".into(),
            generation: 1,
            barcode: barcode.into(),
            cartridge_state: cart,
            container_id: 1,
            file_number: 1,
            container_first_block: 2,
            container_last_block: 3,
            record_size: 1 << 20,
            offset: 0,
            length: 10,
            sha256: [0; 32],
            container_state: cont,
            meta: None,
        }
    }

    #[test]
    fn the_first_readable_copy_not_found_bad_is_read() {
        let a = copy("A", CartridgeState::Active, ContainerState::Verified);
        let b = copy("B", CartridgeState::Full, ContainerState::Durable);
        let none = HashSet::new();
        assert_eq!(
            choose(vec![a.clone(), b.clone()], &none).map(|c| c.barcode),
            Some("A".to_string())
        );
        let bad_a = HashSet::from(["A".to_string()]);
        assert_eq!(
            choose(vec![a.clone(), b.clone()], &bad_a).map(|c| c.barcode),
            Some("B".to_string())
        );
        let both = HashSet::from(["A".to_string(), "B".to_string()]);
        assert_eq!(choose(vec![a, b], &both), None);
    }

    #[test]
    fn a_copy_on_an_exported_cartridge_is_chosen_only_when_none_is_readable() {
        let none = HashSet::new();
        let out = copy("V", CartridgeState::Exported, ContainerState::Verified);
        let broken = copy("B", CartridgeState::Broken, ContainerState::Verified);
        let good = copy("G", CartridgeState::Full, ContainerState::Durable);
        assert_eq!(
            choose(vec![out.clone(), good], &none).map(|c| c.barcode),
            Some("G".to_string())
        );
        assert_eq!(
            choose(vec![broken.clone(), out.clone()], &none).map(|c| c.barcode),
            Some("V".to_string())
        );
        let dead = copy("D", CartridgeState::Exported, ContainerState::Dead);
        assert_eq!(choose(vec![broken, dead], &none), None);
        assert_eq!(choose(vec![out], &HashSet::from(["V".to_string()])), None);
    }

    #[test]
    fn copies_on_unmountable_cartridges_or_in_unfinished_containers_are_not_read() {
        let none = HashSet::new();
        for state in [
            CartridgeState::Disabled,
            CartridgeState::Broken,
            CartridgeState::Exported,
        ] {
            assert!(!readable(&copy("A", state, ContainerState::Verified)));
        }
        for state in [ContainerState::Pending, ContainerState::Dead] {
            assert!(!readable(&copy("A", CartridgeState::Active, state)));
        }
        let open = copy("A", CartridgeState::Active, ContainerState::Pending);
        let good = copy("B", CartridgeState::Active, ContainerState::Durable);
        assert_eq!(
            choose(vec![open, good], &none).map(|c| c.barcode),
            Some("B".to_string())
        );
    }
}
