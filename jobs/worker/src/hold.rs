//! Why queued work waits: the one rule that holds each queue, as an operator reads it.
//!
//! A queue (one cartridge's reads, one pool's writes; see [`QueueSummary`]) is waiting when no
//! drive serves it. [`explain`] names the reason, applying the same rules the drive loops
//! apply ([`crate::scheduler::worth_mounting`] for the mount threshold, the group caps of
//! [`Policy`]) to what every host has published: the drive board, the drives' service states,
//! and the cartridges out of service. It decides nothing: the drive loops do (see
//! [`crate::scheduler::decide`]); this says why they have not mounted for a queue yet.
//!
//! The checks run in the order an operator would act on them: first what no drive can fix (a
//! cartridge out of service, a pool with no room, no worker, every drive down), then the
//! scheduler's own rules (the threshold, the cap), then what only time fixes (a cartridge in
//! another drive, every drive busy).

use std::collections::{BTreeMap, BTreeSet};
use std::time::Duration;

use reel_queue::text::{human_bytes as bytes, span as duration};
use serde::Serialize;

use crate::scheduler::{MountMode, MountTarget, Policy, QueueSummary, worth_mounting};

/// A drive as the store sees it, on any host.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DriveSeen {
    /// `LIBRARY-INDEX`.
    pub name: String,
    /// In service.
    pub up: bool,
    /// Why it is down (empty when up).
    pub down_reason: String,
    /// The worker holding its lease; `None` when no live worker holds it.
    pub worker: Option<String>,
    /// What it is mounted for, as published on the board.
    pub target: Option<MountTarget>,
    /// The cartridge it holds (board or changer).
    pub barcode: Option<String>,
    /// The scheduler group its mount counts against.
    pub group: Option<String>,
}

/// A cartridge out of the library (exported): where it went.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct OutOfService {
    /// Where it is (`reel cartridge export --to`).
    pub location: String,
}

/// What [`explain`] looks at besides the queues and the policy.
#[derive(Debug, Clone, Default)]
pub struct Library {
    /// Every drive known to the store.
    pub drives: Vec<DriveSeen>,
    /// Cartridges no drive mounts, by barcode: exported ones (a disabled or broken
    /// cartridge's recalls leave it within a poll, and its verify work runs, so such a queue
    /// is held by the other rules).
    pub out_of_service: BTreeMap<String, OutOfService>,
    /// Pools with an active, labelled cartridge that has room (or a capacity not known yet):
    /// a write queue of any other pool waits for cartridges.
    pub pools_with_room: BTreeSet<String>,
}

/// Why a queue is not being served, or that it is.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[serde(tag = "rule", rename_all = "snake_case")]
pub enum Hold {
    /// A drive is mounted for it: its work is claimed batch by batch.
    Served {
        /// The drives serving it.
        drives: Vec<String>,
    },
    /// The cartridge is out of the library (exported) and no copy in the library serves
    /// these reads: they wait for it to be imported.
    CartridgeOut {
        /// Barcode.
        barcode: String,
        /// Where it is.
        location: String,
    },
    /// The pool has no active cartridge with room.
    NoWritableCartridge {
        /// Pool.
        pool: String,
    },
    /// No running worker holds a drive.
    NoWorker,
    /// Every drive that a worker holds is out of service.
    NoDriveUp {
        /// The drives down, with their reasons.
        down: Vec<(String, String)>,
    },
    /// Too little work for a mount yet: it mounts when the queue reaches a threshold or its
    /// oldest request reaches the maximum age.
    BelowThreshold {
        /// Bytes queued.
        bytes: u64,
        /// Bytes that justify a mount.
        min_bytes: u64,
        /// Files queued.
        files: u64,
        /// Files that justify a mount.
        min_files: u64,
        /// In how long the age rule mounts it whatever its size.
        mounts_in: Duration,
    },
    /// The scheduler group's drive cap for this mode is used up.
    DriveCap {
        /// Group.
        group: String,
        /// Read or write.
        mode: MountMode,
        /// The cap.
        cap: u32,
    },
    /// The cartridge is in a drive busy with other work.
    CartridgeInDrive {
        /// Barcode.
        barcode: String,
        /// The drive holding it.
        drive: String,
        /// The worker holding that drive.
        worker: Option<String>,
    },
    /// Every drive in service is busy with other work (higher priority or older queues).
    DrivesBusy {
        /// How many drives are in service.
        up: usize,
    },
    /// Worth a mount and a drive is free: a drive loop takes it at its next poll.
    Due,
}

impl Hold {
    /// The rule's name (`served`, `below_threshold`…), as the API and the metrics give it.
    pub fn rule(&self) -> &'static str {
        match self {
            Hold::Served { .. } => "served",
            Hold::CartridgeOut { .. } => "cartridge_out",
            Hold::NoWritableCartridge { .. } => "no_writable_cartridge",
            Hold::NoWorker => "no_worker",
            Hold::NoDriveUp { .. } => "no_drive_up",
            Hold::BelowThreshold { .. } => "below_threshold",
            Hold::DriveCap { .. } => "drive_cap",
            Hold::CartridgeInDrive { .. } => "cartridge_in_drive",
            Hold::DrivesBusy { .. } => "drives_busy",
            Hold::Due => "due",
        }
    }

    /// In how long the age rule mounts it, for [`Hold::BelowThreshold`].
    pub fn mounts_in(&self) -> Option<Duration> {
        match self {
            Hold::BelowThreshold { mounts_in, .. } => Some(*mounts_in),
            _ => None,
        }
    }

    /// One line for an operator: what holds it and what ends the wait.
    pub fn message(&self) -> String {
        match self {
            Hold::Served { drives } => format!("being served by {}", drives.join(", ")),
            Hold::CartridgeOut { barcode, location } => format!(
                "cartridge {barcode} is at {location}: bring it back, put it in a mail slot and \
                 run `reel cartridge import` (`reel cartridge wanted` lists what waiting work \
                 needs)"
            ),
            Hold::NoWritableCartridge { pool } => format!(
                "pool {pool} has no active cartridge with room; add cartridges to the library \
                 and run `reel intake --pool {pool}`"
            ),
            Hold::NoWorker => {
                "no running `reel worker` holds a drive; start one on a drive host".to_string()
            }
            Hold::NoDriveUp { down } => format!(
                "no drive is in service ({}); `reel drive up DRIVE` returns one",
                down.iter()
                    .map(|(d, r)| format!("{d}: {r}"))
                    .collect::<Vec<_>>()
                    .join("; ")
            ),
            Hold::BelowThreshold {
                bytes: b,
                min_bytes,
                files,
                min_files,
                mounts_in,
            } => format!(
                "below the mount threshold ({} of {}, {files} of {min_files} files); mounts \
                 by age in {}",
                bytes(*b),
                bytes(*min_bytes),
                duration(*mounts_in)
            ),
            Hold::DriveCap { group, mode, cap } => format!(
                "group {group} has its {cap} {} drive{} ([scheduler.groups.{group}] max_{}_drives)",
                match mode {
                    MountMode::Read => "read",
                    MountMode::Write => "write",
                },
                if *cap == 1 { "" } else { "s" },
                match mode {
                    MountMode::Read => "read",
                    MountMode::Write => "write",
                }
            ),
            Hold::CartridgeInDrive {
                barcode,
                drive,
                worker,
            } => format!(
                "cartridge {barcode} is in drive {drive}{}, busy with other work",
                worker
                    .as_deref()
                    .map(|w| format!(" (worker {w})"))
                    .unwrap_or_default()
            ),
            Hold::DrivesBusy { up } => format!(
                "all {up} drive{} in service {} busy with higher-priority or older work",
                if *up == 1 { "" } else { "s" },
                if *up == 1 { "is" } else { "are" }
            ),
            Hold::Due => "worth a mount and a drive is free: mounting at the next poll".into(),
        }
    }
}

/// Why `q` waits, given `library` and the scheduler `policy`. See the module documentation
/// for the order of the checks.
pub fn explain(policy: &Policy, q: &QueueSummary, library: &Library) -> Hold {
    let serving: Vec<String> = library
        .drives
        .iter()
        .filter(|d| d.worker.is_some() && d.target.as_ref() == Some(&q.target))
        .map(|d| d.name.clone())
        .collect();
    if !serving.is_empty() {
        return Hold::Served { drives: serving };
    }
    match &q.target {
        MountTarget::Read { barcode } => {
            if let Some(o) = library.out_of_service.get(barcode) {
                return Hold::CartridgeOut {
                    barcode: barcode.clone(),
                    location: o.location.clone(),
                };
            }
        }
        MountTarget::Write { pool } => {
            if !library.pools_with_room.contains(pool) {
                return Hold::NoWritableCartridge { pool: pool.clone() };
            }
        }
    }
    let held: Vec<&DriveSeen> = library
        .drives
        .iter()
        .filter(|d| d.worker.is_some())
        .collect();
    if held.is_empty() {
        return Hold::NoWorker;
    }
    let up: Vec<&DriveSeen> = held.iter().copied().filter(|d| d.up).collect();
    if up.is_empty() {
        return Hold::NoDriveUp {
            down: held
                .iter()
                .map(|d| (d.name.clone(), d.down_reason.clone()))
                .collect(),
        };
    }
    if worth_mounting(policy, q, 0).is_none() {
        return Hold::BelowThreshold {
            bytes: q.bytes,
            min_bytes: policy.min_bytes,
            files: q.files,
            min_files: policy.min_files,
            mounts_in: policy.max_age.saturating_sub(q.oldest_age),
        };
    }
    let mode = q.target.mode();
    if let Some(group) = policy.group_of(q.pool.as_deref()) {
        let cap = policy.cap(group, mode);
        let used = library
            .drives
            .iter()
            .filter(|d| {
                d.worker.is_some()
                    && d.group.as_deref() == Some(group)
                    && d.target.as_ref().map(MountTarget::mode) == Some(mode)
            })
            .count();
        if cap > 0 && used >= cap as usize {
            return Hold::DriveCap {
                group: group.to_string(),
                mode,
                cap,
            };
        }
    }
    if let MountTarget::Read { barcode } = &q.target
        && let Some(d) = library
            .drives
            .iter()
            .find(|d| d.barcode.as_deref() == Some(barcode.as_str()) && d.target.is_some())
    {
        return Hold::CartridgeInDrive {
            barcode: barcode.clone(),
            drive: d.name.clone(),
            worker: d.worker.clone(),
        };
    }
    if up.iter().any(|d| d.target.is_none()) {
        Hold::Due
    } else {
        Hold::DrivesBusy { up: up.len() }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn policy() -> Policy {
        Policy {
            min_bytes: 1000,
            min_files: 10,
            max_age: Duration::from_secs(600),
            min_mount: Duration::from_secs(60),
            group_of_pool: [("p1".to_string(), "g".to_string())].into(),
            caps: [("g".to_string(), (1, 1))].into(),
            background_cap: 0,
        }
    }

    fn read(barcode: &str, files: u64, age: u64) -> QueueSummary {
        QueueSummary {
            target: MountTarget::Read {
                barcode: barcode.into(),
            },
            pool: Some("p1".into()),
            bytes: files * 10,
            files,
            oldest_age: Duration::from_secs(age),
            priority: 0,
        }
    }

    fn drive(name: &str, up: bool, target: Option<MountTarget>) -> DriveSeen {
        let barcode = match &target {
            Some(MountTarget::Read { barcode }) => Some(barcode.clone()),
            _ => None,
        };
        DriveSeen {
            name: name.into(),
            up,
            down_reason: if up { String::new() } else { "dirty".into() },
            worker: Some("w1".into()),
            group: target.as_ref().map(|_| "g".to_string()),
            target,
            barcode,
        }
    }

    fn lib(drives: Vec<DriveSeen>) -> Library {
        Library {
            drives,
            ..Library::default()
        }
    }

    #[test]
    fn each_rule_in_its_order() {
        let p = policy();
        let q = read("A00001", 20, 0);
        let a = MountTarget::Read {
            barcode: "A00001".into(),
        };
        let b = MountTarget::Read {
            barcode: "B00001".into(),
        };
        // Served wins over everything.
        let h = explain(&p, &q, &lib(vec![drive("d0", false, Some(a.clone()))]));
        assert_eq!(
            h,
            Hold::Served {
                drives: vec!["d0".into()]
            }
        );
        // Out of service comes before any drive question.
        let mut l = lib(vec![]);
        l.out_of_service.insert(
            "A00001".into(),
            OutOfService {
                location: "vault B".into(),
            },
        );
        assert_eq!(explain(&p, &q, &l).rule(), "cartridge_out");
        assert!(
            explain(&p, &q, &l)
                .message()
                .contains("cartridge A00001 is at vault B"),
            "{}",
            explain(&p, &q, &l).message()
        );
        assert_eq!(explain(&p, &q, &lib(vec![])), Hold::NoWorker);
        let mut nobody = drive("d0", true, None);
        nobody.worker = None;
        assert_eq!(explain(&p, &q, &lib(vec![nobody])), Hold::NoWorker);
        let h = explain(&p, &q, &lib(vec![drive("d0", false, None)]));
        assert_eq!(
            h,
            Hold::NoDriveUp {
                down: vec![("d0".into(), "dirty".into())]
            }
        );
        assert!(h.message().contains("d0: dirty"), "{}", h.message());
        // Below threshold: 5 files of 10, 50 B of 1000, 100 s old of 600.
        let small = read("A00001", 5, 100);
        let h = explain(&p, &small, &lib(vec![drive("d0", true, None)]));
        assert_eq!(h.mounts_in(), Some(Duration::from_secs(500)));
        assert!(h.message().contains("5 of 10 files"), "{}", h.message());
        // Old enough: due.
        let old = read("A00001", 5, 601);
        assert_eq!(
            explain(&p, &old, &lib(vec![drive("d0", true, None)])),
            Hold::Due
        );
        // The group's one read drive is reading another cartridge; a free drive cannot help.
        let h = explain(
            &p,
            &q,
            &lib(vec![
                drive("d0", true, Some(b.clone())),
                drive("d1", true, None),
            ]),
        );
        assert_eq!(h.rule(), "drive_cap");
        // Without the cap: the free drive takes it.
        let mut uncapped = p.clone();
        uncapped.caps.clear();
        assert_eq!(
            explain(
                &uncapped,
                &q,
                &lib(vec![
                    drive("d0", true, Some(b.clone())),
                    drive("d1", true, None)
                ])
            ),
            Hold::Due
        );
        assert_eq!(
            explain(&uncapped, &q, &lib(vec![drive("d0", true, Some(b))])),
            Hold::DrivesBusy { up: 1 }
        );
        // The cartridge sits in a drive writing to its pool.
        let mut writing = drive("d0", true, Some(MountTarget::Write { pool: "p1".into() }));
        writing.barcode = Some("A00001".into());
        writing.group = None;
        assert_eq!(
            explain(&uncapped, &q, &lib(vec![writing, drive("d1", true, None)])).rule(),
            "cartridge_in_drive"
        );
    }

    #[test]
    fn a_pool_with_no_room_says_how_to_add_cartridges() {
        let p = policy();
        let q = QueueSummary {
            target: MountTarget::Write { pool: "p1".into() },
            pool: Some("p1".into()),
            bytes: 1,
            files: 1,
            oldest_age: Duration::from_secs(601),
            priority: 0,
        };
        let mut l = lib(vec![drive("d0", true, None)]);
        let h = explain(&p, &q, &l);
        assert_eq!(h.rule(), "no_writable_cartridge");
        assert!(
            h.message().contains("reel intake --pool p1"),
            "{}",
            h.message()
        );
        l.pools_with_room.insert("p1".into());
        assert_eq!(explain(&p, &q, &l), Hold::Due);
    }
}
