//! Room on a cartridge: what the drive says its medium holds, what a container costs around
//! its data, and whether the next object fits before the write session starts it.
//!
//! The capacity is the drive's report for the loaded medium: [`Drive::geometry`]'s
//! `capacity_bytes` (the simulator's cartridge capacity, the SCSI plugin's LOG SENSE tape
//! capacity page), else MAM attribute 0001h (maximum capacity, MiB). The room left at a
//! session's start is the smaller of the drive's MAM 0000h report (remaining capacity in the
//! partition, MiB) and the capacity less the catalogue's used bytes. When neither capacity nor
//! remaining is reported the room is unknown: the session starts every object, and early
//! warning with its bounded margin ([`SessionConfig::early_warning_margin_bytes`]) is what
//! ends it (docs/OPERATIONS.md, "Space on a cartridge").
//!
//! [`SessionConfig::early_warning_margin_bytes`]: super::SessionConfig::early_warning_margin_bytes

use tracing::{debug, info};

use crate::catalogue::{Catalogue, CatalogueError};
use crate::device::Drive;

/// MAM 0001h MAXIMUM CAPACITY IN PARTITION (MiB), device type, read-only.
pub const MAM_MAXIMUM_CAPACITY: u16 = 0x0001;

/// Default of [`SessionConfig::early_warning_margin_bytes`](super::SessionConfig): 2 MiB. A
/// target with a small early-warning zone (tgt: max(capacity/32, 4 MiB)) still has room for
/// the record that reported early warning plus this margin; an LTO drive's zone is far larger.
pub const DEFAULT_EARLY_WARNING_MARGIN: u64 = 2 << 20;

/// Bytes of a footer's fixed part and of its record framing, rounded up generously (the index
/// entry format may grow; this is an estimate that must not be short).
const FOOTER_FIXED: u64 = 4096;
/// Bytes of one index entry besides its key, rounded up generously.
const ENTRY_FIXED: u64 = 256;
/// Bytes a filemark is counted as (the simulator counts none; real drives a few KiB).
pub const FILEMARK: u64 = 64 << 10;

/// What an empty cartridge has less than its capacity: its label, and the MiB a drive's MAM
/// report of the remaining capacity rounds away. An object is said to fit an empty cartridge
/// only with this much to spare, so one that did not fit an empty cartridge is never sent
/// round the library as if another one would take it.
pub const EMPTY_SLACK: u64 = 2 << 20;

/// A MAM capacity attribute (a big-endian count of MiB) in bytes; None when empty or zero.
pub fn mam_mib(value: &[u8]) -> Option<u64> {
    if value.is_empty() || value.len() > 8 {
        return None;
    }
    let mib = value.iter().fold(0u64, |n, b| (n << 8) | u64::from(*b));
    (mib > 0).then(|| mib.saturating_mul(1 << 20))
}

/// The capacity the drive reports for the loaded medium, in bytes: the geometry's capacity,
/// else MAM 0001h. None when the drive reports neither (nothing is made up).
pub async fn reported_capacity(drive: &Drive) -> Option<u64> {
    match drive.geometry().await {
        Ok(g) if g.capacity_bytes > 0 => return Some(g.capacity_bytes),
        Ok(_) => {}
        Err(e) => debug!(drive = drive.index(), error = %e, "no medium capacity from the geometry"),
    }
    match drive.mam_read(MAM_MAXIMUM_CAPACITY).await {
        Ok(v) => mam_mib(&v),
        Err(e) => {
            debug!(drive = drive.index(), error = %e, "no medium capacity from MAM 0001h");
            None
        }
    }
}

/// Record in the catalogue the capacity the drive reports for the loaded cartridge `barcode`
/// (when it reports one and it differs from the catalogue's). Returns the capacity now
/// recorded (0: unknown). Called when a cartridge is labelled and before each write session.
pub async fn record_capacity(
    catalogue: &Catalogue,
    drive: &Drive,
    barcode: &str,
) -> Result<u64, CatalogueError> {
    let known = catalogue
        .cartridge(barcode)
        .await?
        .map(|c| c.capacity_bytes)
        .unwrap_or(0);
    match reported_capacity(drive).await {
        Some(c) if c != known => {
            catalogue.set_capacity(barcode, c).await?;
            info!(
                barcode,
                capacity_bytes = c,
                was = known,
                "cartridge capacity as the drive reports it"
            );
            Ok(c)
        }
        _ => Ok(known),
    }
}

/// The remaining capacity the drive reports for the loaded medium (MAM 0000h), in bytes;
/// None when it reports none.
pub async fn reported_remaining(drive: &Drive) -> Option<u64> {
    match drive
        .mam_read(reel_plugin_abi::types::mam::REMAINING_CAPACITY)
        .await
    {
        Ok(v) if v.iter().all(|b| *b == 0) && !v.is_empty() => Some(0),
        Ok(v) => mam_mib(&v),
        Err(e) => {
            debug!(drive = drive.index(), error = %e, "no remaining capacity from MAM 0000h");
            None
        }
    }
}

/// Bytes one object adds to its container's closing tail (its index entry).
pub fn entry_overhead(key: &str) -> u64 {
    ENTRY_FIXED + key.len() as u64
}

/// Bytes a container costs besides its objects' data: its header record, its last (partial)
/// data record, the footer's fixed part and its filemark. Add [`entry_overhead`] per object.
pub fn container_overhead(record_size: usize) -> u64 {
    2 * record_size as u64 + FOOTER_FIXED + FILEMARK
}

/// Bytes an object of `size` bytes under `key` needs on a cartridge, `reserve` (the
/// early-warning margin) kept free: its data, its index entry and a whole container's overhead
/// (so the figure holds whether it opens a container or joins one). The one figure both the
/// write session's room check before each object and the choice of a cartridge for a write
/// ([`crate::catalogue::Catalogue::writable_cartridge`]) use, so they agree.
pub fn room_needed(size: u64, key: &str, record_size: usize, reserve: u64) -> u64 {
    size.saturating_add(entry_overhead(key))
        .saturating_add(container_overhead(record_size))
        .saturating_add(reserve)
}

/// The least any object needs ([`room_needed`] of an empty object under an empty key): a
/// cartridge with less room left takes nothing more.
pub fn least_needed(record_size: usize, reserve: u64) -> u64 {
    room_needed(0, "", record_size, reserve)
}

/// The largest object an empty cartridge of `capacity` bytes takes, with `reserve` bytes kept
/// free, in a container of `record_size` records (a 4 KiB key assumed).
pub fn largest_object(capacity: u64, record_size: usize, reserve: u64) -> u64 {
    capacity.saturating_sub(
        container_overhead(record_size) + ENTRY_FIXED + 4096 + reserve + EMPTY_SLACK,
    )
}

/// The room a write session plans with, from its start.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Room {
    /// The cartridge's capacity, bytes.
    pub capacity: u64,
    /// Bytes left when the session started.
    pub left: u64,
    /// Bytes kept free at the end (the early-warning margin).
    pub reserve: u64,
    /// Bytes of durable data on it at the start (the catalogue's).
    pub used: u64,
}

impl Room {
    /// The room of a cartridge of `capacity` bytes (0: unknown) with `used` bytes in durable
    /// containers and, if the drive reports it, `remaining` bytes left. None when unknown.
    pub fn plan(capacity: u64, used: u64, remaining: Option<u64>, reserve: u64) -> Option<Room> {
        let by_catalogue = (capacity > 0).then(|| capacity.saturating_sub(used));
        let left = match (by_catalogue, remaining) {
            (Some(a), Some(b)) => a.min(b),
            (a, b) => a.or(b)?,
        };
        Some(Room {
            capacity: if capacity > 0 {
                capacity
            } else {
                remaining.unwrap_or(0).saturating_add(used)
            },
            left,
            reserve,
            used,
        })
    }

    /// Whether an object that needs `needed` bytes (reserve included) and did not fit after
    /// `framed` bytes would fit an empty cartridge of this capacity. Never when this one was
    /// empty.
    pub fn fits_empty(&self, framed: u64, needed: u64) -> bool {
        // Empty by the catalogue (no durable container) and by the drive (its remaining
        // capacity is the whole cartridge): containers written but not yet durable (a FULL
        // verify still to come, a session just before this one) count no bytes in the
        // catalogue, but the drive reports the room they took.
        // The drive's figure may come from another source than the capacity (MAM against
        // LOG SENSE) and be approximate: within 2 % of the capacity counts as empty, so an
        // empty cartridge is never taken for a used one (which would mark it full).
        let tolerance = EMPTY_SLACK.max(self.capacity / 50);
        let was_empty =
            framed == 0 && self.used == 0 && self.left.saturating_add(tolerance) >= self.capacity;
        !was_empty && needed.saturating_add(EMPTY_SLACK) <= self.capacity
    }

    /// Whether `need` more bytes fit after the `framed` bytes this session has already sent.
    pub fn fits(&self, framed: u64, need: u64) -> bool {
        framed.saturating_add(need).saturating_add(self.reserve) <= self.left
    }

    /// Bytes left after the `framed` bytes this session has sent (never negative).
    pub fn after(&self, framed: u64) -> u64 {
        self.left.saturating_sub(framed)
    }

    /// Whether the session is near enough to the end that early warning may come: within
    /// `max(capacity/16, 8 MiB)` plus `pipeline` bytes of the end. The write pipeline then holds
    /// no more than the early-warning margin (the zone of a small target is capacity/32, at
    /// least 4 MiB; an LTO drive reports early warning close to its native capacity).
    pub fn near_end(&self, framed: u64, pipeline: u64) -> bool {
        let window = (self.capacity / 16).max(8 << 20).saturating_add(pipeline);
        self.after(framed) <= window
    }
}

/// Why a write session ended on a cartridge before an object: the object does not fit in the
/// room left.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct NoRoom {
    /// The object's key.
    pub key: String,
    /// Bytes it needs with its container's overhead and the reserve.
    pub needed: u64,
    /// Bytes left on the cartridge (as planned).
    pub left: u64,
    /// The cartridge's capacity.
    pub capacity: u64,
    /// Whether it would fit an empty cartridge of this capacity (so it is not at fault).
    pub fits_empty: bool,
    /// Whether it was the session's first object (nothing framed before it).
    pub first: bool,
}

impl NoRoom {
    /// Whether the cartridge is to be marked full because of this: when the room left is too
    /// small for even an empty object (`least`, [`least_needed`]), or when the session's first
    /// object did not fit although the cartridge was chosen with room for it (the catalogue's
    /// estimate was optimistic against the drive's remaining-capacity report), so the same
    /// cartridge is not chosen for it again and again. An object that does not fit an empty
    /// cartridge is at fault, not the cartridge. Otherwise the session just ends here; the
    /// cartridge keeps its room for smaller objects.
    pub fn marks_full(&self, least: u64) -> bool {
        self.left < least || (self.first && self.fits_empty)
    }
}

impl std::fmt::Display for NoRoom {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "object {} needs {} bytes with its container's overhead and the early-warning reserve; {} bytes are left of {}",
            self.key, self.needed, self.left, self.capacity
        )
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn mam_capacities_are_mib() {
        assert_eq!(mam_mib(&[0, 0, 0, 0, 0, 0, 0, 3]), Some(3 << 20));
        assert_eq!(mam_mib(&[0x01, 0x00]), Some(256 << 20));
        assert_eq!(mam_mib(&[0; 8]), None);
        assert_eq!(mam_mib(&[]), None);
        assert_eq!(mam_mib(&[1; 9]), None);
    }

    #[test]
    fn room_is_the_smaller_of_catalogue_and_drive() {
        let r = Room::plan(100, 30, Some(60), 5).unwrap();
        assert_eq!((r.capacity, r.left), (100, 60));
        let r = Room::plan(100, 30, None, 5).unwrap();
        assert_eq!(r.left, 70);
        let r = Room::plan(100, 30, Some(90), 5).unwrap();
        assert_eq!(r.left, 70);
        // Capacity unknown, remaining reported.
        let r = Room::plan(0, 30, Some(50), 5).unwrap();
        assert_eq!((r.capacity, r.left), (80, 50));
        // Nothing known: no plan, early warning decides.
        assert_eq!(Room::plan(0, 30, None, 5), None);
    }

    #[test]
    fn fits_keeps_the_reserve() {
        let r = Room::plan(100, 0, None, 10).unwrap();
        assert!(r.fits(0, 90));
        assert!(!r.fits(0, 91));
        assert!(r.fits(40, 50));
        assert!(!r.fits(40, 51));
        assert!(!r.fits(200, 0));
        assert_eq!(r.after(200), 0);
    }

    #[test]
    fn an_object_fits_empty_only_with_slack_and_never_from_an_empty_cartridge() {
        let r = Room::plan(100 << 20, 10 << 20, None, 0).unwrap();
        assert!(r.fits_empty(0, 90 << 20));
        assert!(!r.fits_empty(0, 99 << 20));
        let empty = Room::plan(100 << 20, 0, None, 0).unwrap();
        assert!(!empty.fits_empty(0, 90 << 20));
        assert!(empty.fits_empty(1, 90 << 20));
        // Nothing durable yet, but the drive reports 40 MiB taken (containers not yet
        // verified): not empty, an object that an empty cartridge takes goes elsewhere.
        let written = Room::plan(100 << 20, 0, Some(60 << 20), 0).unwrap();
        assert!(written.fits_empty(0, 90 << 20));
        assert!(!written.fits_empty(0, 99 << 20));
        // A fresh cartridge whose drive reports 1 % less than its capacity is still empty.
        let fresh = Room::plan(1000 << 20, 0, Some(990 << 20), 0).unwrap();
        assert!(!fresh.fits_empty(0, 995 << 20));
    }

    #[test]
    fn near_end_has_a_floor_and_follows_the_pipeline() {
        let r = Room::plan(1 << 40, 0, None, 0).unwrap();
        assert!(!r.near_end(0, 64 << 20));
        assert!(r.near_end((1 << 40) - (1 << 36), 0));
        assert!(!r.near_end((1 << 40) - (1 << 36) - (65 << 20), 64 << 20));
        let small = Room::plan(32 << 20, 0, None, 0).unwrap();
        assert!(!small.near_end(0, 0));
        assert!(small.near_end(24 << 20, 0));
    }

    fn nr(left: u64, fits_empty: bool, first: bool) -> NoRoom {
        NoRoom {
            key: "k".into(),
            needed: left + 1,
            left,
            capacity: 100 << 20,
            fits_empty,
            first,
        }
    }

    #[test]
    fn the_room_needed_is_the_session_check() {
        let (rs, reserve) = (1 << 20, 2 << 20);
        let need = room_needed(1000, "abc", rs, reserve);
        assert_eq!(
            need,
            1000 + entry_overhead("abc") + container_overhead(rs) + reserve
        );
        assert_eq!(least_needed(rs, reserve), room_needed(0, "", rs, reserve));
        // The session's check (`Room::fits` with the reserve) agrees with the figure.
        let r = Room::plan(need, 0, None, reserve).unwrap();
        assert!(r.fits(0, need - reserve));
        let r = Room::plan(need - 1, 0, None, reserve).unwrap();
        assert!(!r.fits(0, need - reserve));
        assert_eq!(room_needed(u64::MAX, "k", rs, reserve), u64::MAX);
    }

    #[test]
    fn no_room_marks_full_only_when_nothing_fits_or_the_first_object_did_not() {
        let least = least_needed(1 << 20, 2 << 20);
        // Plenty left, objects written before: the session just ends here.
        assert!(!nr(50 << 20, true, false).marks_full(least));
        // Less left than even an empty object needs.
        assert!(nr(least - 1, true, false).marks_full(least));
        assert!(nr(least - 1, false, true).marks_full(least));
        assert!(!nr(least, true, false).marks_full(least));
        // The first object did not fit although the cartridge was chosen with room for it.
        assert!(nr(50 << 20, true, true).marks_full(least));
        // An object larger than an empty cartridge: the object is at fault, not the cartridge.
        assert!(!nr(50 << 20, false, true).marks_full(least));
    }

    #[test]
    fn the_largest_object_leaves_the_overhead_and_reserve() {
        let cap = 64 << 20;
        let big = largest_object(cap, 1 << 20, 2 << 20);
        assert!(big < cap - (6 << 20));
        assert!(big > cap - (7 << 20));
        assert_eq!(largest_object(1 << 20, 1 << 20, 0), 0);
    }
}
