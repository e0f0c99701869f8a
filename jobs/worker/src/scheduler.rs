//! The mount decision: which drive mounts which cartridge (reads) or writes to which pool, as a
//! pure function over queue summaries and drive states. Follows CTA's model
//! (`Scheduler::sortAndGetTapesForMountInfo`, research anchors-tape.md §1.2) and adds what CTA
//! lacks: a mounted cartridge stays while it has work (no remount thrashing), a minimum mount
//! time before a busy drive is pre-empted, and a per-group cap for reads and writes separately.
//!
//! Recalls from many jobs are batched per cartridge: a summary is one cartridge's whole read
//! queue, whatever the jobs, and one mount serves every request queued for it.

use std::cmp::Ordering;
use std::collections::{BTreeMap, BTreeSet};
use std::time::Duration;

use serde::Serialize;

use reel_queue::config::SchedulerConfig;
pub use reel_queue::mount::{MountMode, MountTarget, QueueSummary};

/// What a drive holds.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Mounted {
    /// Cartridge in the drive.
    pub barcode: String,
    /// What the mount is for.
    pub target: MountTarget,
    /// The pool of the target (for reads: the cartridge's pool), for group caps; `None` when
    /// unknown (the queue's pool is used then).
    pub pool: Option<String>,
    /// How long it has been mounted.
    pub mounted_for: Duration,
    /// Whether its cartridge takes writes (it is `active`). `false` only where known: a full
    /// or `repacking` cartridge of a pool does not make its drive the pool's writer, here or
    /// as another loop's idle holder a write is left to (a write there would unload it first,
    /// and a repack's source is wanted again for its next slice of reads).
    pub takes_writes: bool,
    /// Its cartridge is a repack's source (`repacking`), held between two slices of reads
    /// while no read of it is queued. Another loop's drive holding one counts against
    /// [`Policy::background_cap`] as a drive serving background work: the repack wants it
    /// again for its next slice, and its writes must not take a third drive meanwhile.
    pub repack_source: bool,
}

/// One drive as the scheduler sees it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct DriveState {
    /// Drive name.
    pub name: String,
    /// What it holds, if anything.
    pub mounted: Option<Mounted>,
    /// Not this decision's to assign: another drive loop's drive (on this host or another,
    /// from the drive board), or out of service. Never assigned; what it holds still counts:
    /// its cartridge is in no other drive, its mount counts against its group's cap, and a
    /// queue it serves counts it as a mount already serving.
    pub unavailable: bool,
}

/// What one drive should do next.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[serde(tag = "action", rename_all = "lowercase")]
pub enum Decision {
    /// Keep the mounted cartridge and serve its queue.
    Stay {
        /// Drive.
        drive: String,
        /// The queue it keeps serving.
        target: MountTarget,
    },
    /// (Unmount what is there, then) mount for this target.
    Mount {
        /// Drive.
        drive: String,
        /// What to mount for.
        target: MountTarget,
        /// Why (`threshold`, `age`).
        reason: &'static str,
    },
    /// Unmount and stay empty.
    Unmount {
        /// Drive.
        drive: String,
    },
    /// Nothing to do.
    Idle {
        /// Drive.
        drive: String,
    },
}

impl Decision {
    /// The drive concerned.
    pub fn drive(&self) -> &str {
        match self {
            Decision::Stay { drive, .. }
            | Decision::Mount { drive, .. }
            | Decision::Unmount { drive }
            | Decision::Idle { drive } => drive,
        }
    }
}

/// The thresholds and caps, from `[scheduler]`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Policy {
    /// Bytes that justify a mount.
    pub min_bytes: u64,
    /// Files that justify a mount.
    pub min_files: u64,
    /// Age that justifies a mount whatever the size.
    pub max_age: Duration,
    /// A busy drive is not pre-empted, and an idle mounted drive not unloaded, before this.
    pub min_mount: Duration,
    /// pool → group name.
    pub group_of_pool: BTreeMap<String, String>,
    /// group → (max read drives, max write drives); 0 = no cap.
    pub caps: BTreeMap<String, (u32, u32)>,
    /// Drives background work may hold at once (`[repack] max_drives`); 0 = no cap. A queue is
    /// background when its highest priority is at most [`BACKGROUND_PRIORITY`].
    pub background_cap: u32,
}

/// Queues whose highest priority is at most this are background work (repack), held to
/// [`Policy::background_cap`] drives.
pub const BACKGROUND_PRIORITY: i32 = reel_queue::job::REPACK_PRIORITY;

/// Whether a queue is background work.
pub fn is_background(q: &QueueSummary) -> bool {
    q.priority <= BACKGROUND_PRIORITY
}

impl Policy {
    /// From the `[scheduler]` section.
    pub fn from_config(c: &SchedulerConfig) -> Policy {
        let mut group_of_pool = BTreeMap::new();
        let mut caps = BTreeMap::new();
        for (name, g) in &c.groups {
            for p in &g.pools {
                group_of_pool.insert(p.clone(), name.clone());
            }
            caps.insert(name.clone(), (g.max_read_drives, g.max_write_drives));
        }
        Policy {
            min_bytes: c.min_bytes,
            min_files: c.min_files,
            max_age: Duration::from_secs(c.max_age_seconds),
            min_mount: Duration::from_secs(c.min_mount_seconds),
            group_of_pool,
            caps,
            background_cap: 0,
        }
    }

    /// The same, with background work held to `max_drives` drives (0: no cap).
    pub fn with_background_cap(mut self, max_drives: u32) -> Policy {
        self.background_cap = max_drives;
        self
    }

    fn group(&self, pool: Option<&String>) -> Option<&String> {
        pool.and_then(|p| self.group_of_pool.get(p))
    }

    /// The group a pool belongs to, if any.
    pub fn group_of(&self, pool: Option<&str>) -> Option<&str> {
        pool.and_then(|p| self.group_of_pool.get(p))
            .map(String::as_str)
    }

    /// The drive cap of a group for a mode (0 = no cap).
    pub fn cap(&self, group: &str, mode: MountMode) -> u32 {
        self.caps
            .get(group)
            .map(|&(r, w)| if mode == MountMode::Read { r } else { w })
            .unwrap_or(0)
    }
}

/// Why a queue deserves a mount now, given `existing` mounts already serving it (CTA's rule).
pub fn worth_mounting(p: &Policy, q: &QueueSummary, existing: u64) -> Option<&'static str> {
    if q.files == 0 {
        return None;
    }
    if q.bytes / (1 + existing) >= p.min_bytes || q.files / (1 + existing) >= p.min_files {
        Some("threshold")
    } else if existing == 0 && q.oldest_age >= p.max_age {
        Some("age")
    } else {
        None
    }
}

fn order(a: &QueueSummary, b: &QueueSummary) -> Ordering {
    b.priority
        .cmp(&a.priority)
        .then(b.oldest_age.cmp(&a.oldest_age))
        .then(b.bytes.cmp(&a.bytes))
        .then(a.target.cmp(&b.target))
}

/// How long work left to another drive loop's drive waits for that loop before a drive of this
/// decision takes it (see [`decide`]): a few of that loop's polls. Bounds the wait when the
/// other loop is busy, stuck or its drive out of service.
pub const HANDOFF_GRACE: Duration = Duration::from_secs(10);

/// Decide, for every drive, what it does next. Deterministic for equal inputs.
///
/// 1. A mounted drive whose queue still has work stays (a read cartridge keeps all its
///    requests, from every job) unless a queue of strictly higher priority has no other
///    drive and this mount is older than `min_mount`.
/// 2. Remaining worthy queues, by priority, then age, then size, go to free drives: the one
///    already holding the queue's cartridge (a read of the cartridge it holds, a write to the
///    pool of the cartridge it holds: the mode changes without an unload), else empty ones
///    first, then mounted ones with no work of their own, at once (a waiting request never
///    waits on an idle drive); respecting per-group caps; a cartridge is in one drive at most;
///    a pool may get several drives (thresholds divide by its mounts). One exception: a write
///    whose pool has a cartridge idle in a drive this decision does not assign is left to
///    that drive for [`HANDOFF_GRACE`] (its own loop takes it without a second cartridge);
///    after that any free drive writes it, so a busy or stuck holder never holds it up.
///    Likewise, work that only a drive of this decision holding another cartridge (idle, to be
///    unloaded, or busy, to be pre-empted) could take is left for [`HANDOFF_GRACE`] to an
///    empty drive this decision does not assign (another loop's, which takes it at its next
///    poll without an unload); each empty drive absorbs one queue.
/// 3. A drive with nothing to do unloads once it has been mounted `min_mount`, else waits.
pub fn decide(p: &Policy, queues: &[QueueSummary], drives: &[DriveState]) -> Vec<Decision> {
    let by_target: BTreeMap<&MountTarget, &QueueSummary> =
        queues.iter().map(|q| (&q.target, q)).collect();
    let mut decided: BTreeMap<String, Decision> = BTreeMap::new();
    let mut mounts_of: BTreeMap<MountTarget, u64> = BTreeMap::new();
    let mut group_use: BTreeMap<(String, MountMode), u32> = BTreeMap::new();
    let mut in_drives: BTreeSet<String> = BTreeSet::new();
    // Drives serving background queues (see `Policy::background_cap`).
    let mut background_use: u32 = 0;
    let count = |group_use: &mut BTreeMap<(String, MountMode), u32>,
                 pool: Option<&String>,
                 mode: MountMode| {
        if let Some(g) = p.group(pool) {
            *group_use.entry((g.clone(), mode)).or_default() += 1;
        }
    };

    // Cartridges already in a drive cannot be mounted elsewhere.
    for d in drives {
        if let Some(m) = &d.mounted {
            in_drives.insert(m.barcode.clone());
        }
    }

    // 0. Other drives' mounts count: against their group's cap whatever they do (the drive is
    //    taken until it unloads), and as a mount serving their queue while it has work.
    for d in drives.iter().filter(|d| d.unavailable) {
        if let Some(m) = &d.mounted {
            let q = by_target.get(&m.target);
            let pool = m.pool.as_ref().or(q.and_then(|q| q.pool.as_ref()));
            count(&mut group_use, pool, m.target.mode());
            if q.is_some_and(|q| q.files > 0) {
                *mounts_of.entry(m.target.clone()).or_default() += 1;
            }
            if q.is_some_and(|q| q.files > 0 && is_background(q))
                || (m.repack_source && q.is_none_or(|q| q.files == 0))
            {
                background_use += 1;
            }
        }
    }

    // 1. Stay where there is work.
    for d in drives.iter().filter(|d| !d.unavailable) {
        if let Some(m) = &d.mounted
            && let Some(q) = by_target.get(&m.target)
            && q.files > 0
        {
            decided.insert(
                d.name.clone(),
                Decision::Stay {
                    drive: d.name.clone(),
                    target: m.target.clone(),
                },
            );
            *mounts_of.entry(m.target.clone()).or_default() += 1;
            count(&mut group_use, q.pool.as_ref(), m.target.mode());
            if is_background(q) {
                background_use += 1;
            }
        }
    }

    // Cartridges in this decision's drives that have no work of their own: queued work for the
    // same cartridge (or, for a write, the same pool) takes that drive at once, switching
    // between reading and writing without an unload.
    let idle_holding: BTreeSet<&str> = drives
        .iter()
        .filter(|d| !d.unavailable && !decided.contains_key(&d.name))
        .filter_map(|d| d.mounted.as_ref().map(|m| m.barcode.as_str()))
        .collect();

    // 2. Candidates not yet served (or writes that may take one more drive).
    let mut candidates: Vec<&QueueSummary> = queues
        .iter()
        .filter(|q| match &q.target {
            MountTarget::Read { barcode } => {
                (!in_drives.contains(barcode) || idle_holding.contains(barcode.as_str()))
                    && !mounts_of.contains_key(&q.target)
            }
            MountTarget::Write { .. } => true,
        })
        .collect();
    candidates.sort_by(|a, b| order(a, b));

    let mut free: Vec<&DriveState> = drives
        .iter()
        .filter(|d| !d.unavailable && !decided.contains_key(&d.name))
        .collect();
    // Empty drives first, then mounted ones (longest mounted first), then by name.
    free.sort_by(|a, b| {
        let age = |d: &DriveState| d.mounted.as_ref().map(|m| m.mounted_for);
        a.mounted
            .is_some()
            .cmp(&b.mounted.is_some())
            .then(age(b).cmp(&age(a)))
            .then(a.name.cmp(&b.name))
    });

    // Empty drives of other loops: each takes one queue at its next poll, without an unload.
    // Idle drives of other loops this decision leaves work to (below).
    let mut promised: BTreeSet<&str> = BTreeSet::new();
    let mut empty_elsewhere = drives
        .iter()
        .filter(|d| d.unavailable && d.mounted.is_none())
        .count();

    for q in candidates {
        let existing = mounts_of.get(&q.target).copied().unwrap_or(0);
        let Some(reason) = worth_mounting(p, q, existing) else {
            continue;
        };
        let mode = q.target.mode();
        if is_background(q) && p.background_cap > 0 && background_use >= p.background_cap {
            continue;
        }
        if let Some(g) = p.group(q.pool.as_ref()) {
            let cap = p.cap(g, mode);
            if cap > 0 && group_use.get(&(g.clone(), mode)).copied().unwrap_or(0) >= cap {
                continue;
            }
        }
        // The free drive that already holds this queue's cartridge (a read of it, or a write
        // to its pool); else any free drive: an empty one, or one whose mount has no work of
        // its own (a waiting request never waits on an idle drive; `min_mount` only guards
        // busy drives against pre-emption and idle ones against unloading for nothing).
        // Failing that, pre-empt a busy one of lower priority mounted long enough.
        let holds_it = |d: &DriveState| {
            d.mounted.as_ref().is_some_and(|m| match &q.target {
                MountTarget::Read { barcode } => &m.barcode == barcode,
                MountTarget::Write { pool } => {
                    (m.pool.as_ref() == Some(pool) && m.takes_writes) || m.target == q.target
                }
            })
        };
        // A write whose pool has a cartridge idle in a drive this decision does not assign
        // (another loop's, another host's) goes to that drive: its own loop takes it at its
        // next step. Taking it here would load (or label) a second cartridge of the pool while
        // the first sits idle, and it cannot be loaded here while it is there. "Idle" is read
        // from the queues (nothing queued for that mount), which a batch in progress also
        // shows, and the holder's loop may be stuck: past the grace, any free drive writes.
        if let MountTarget::Write { pool } = &q.target
            && q.oldest_age < HANDOFF_GRACE
            && !free.iter().any(|d| holds_it(d))
            && drives.iter().any(|d| {
                d.unavailable
                    && d.mounted.as_ref().is_some_and(|m| {
                        m.pool.as_ref() == Some(pool)
                            && m.takes_writes
                            && by_target.get(&m.target).is_none_or(|t| t.files == 0)
                    })
            })
        {
            continue;
        }
        // Only an unload (of an idle drive) or a pre-emption would serve it here, while another
        // loop's drive stands empty: leave it to that drive for a moment.
        if empty_elsewhere > 0
            && q.oldest_age < HANDOFF_GRACE
            && !free.iter().any(|d| d.mounted.is_none() || holds_it(d))
        {
            empty_elsewhere -= 1;
            continue;
        }
        // Likewise an idle drive of another loop whose cartridge has been mounted longer than
        // any here: the cartridge mounted longest gives way first (a repack's source, idle
        // for a moment between two slices of reads, is not unloaded for a write while an
        // older idle mount could take it). The oldest idle mount never defers, so one drive
        // takes the work; past the grace, any free drive does.
        let youngest_here = free
            .iter()
            .filter_map(|d| d.mounted.as_ref().map(|m| m.mounted_for))
            .min();
        if q.oldest_age < HANDOFF_GRACE
            && !free.iter().any(|d| d.mounted.is_none() || holds_it(d))
            && let Some(here) = youngest_here
            && let Some(older) = drives.iter().find(|d| {
                d.unavailable
                    && !promised.contains(d.name.as_str())
                    && d.mounted.as_ref().is_some_and(|m| {
                        m.mounted_for > here
                            && by_target.get(&m.target).is_none_or(|t| t.files == 0)
                    })
            })
        {
            promised.insert(older.name.as_str());
            continue;
        }
        let pick = free
            .iter()
            .position(|d| holds_it(d))
            .or_else(|| match &q.target {
                // A cartridge in a drive is read there or nowhere.
                MountTarget::Read { barcode } if in_drives.contains(barcode) => None,
                _ => (!free.is_empty()).then_some(0),
            });
        let drive = match pick {
            Some(i) => free.remove(i).name.clone(),
            None => {
                let victim = decided.iter().find_map(|(name, dec)| {
                    let Decision::Stay { target, .. } = dec else {
                        return None;
                    };
                    let cur = by_target.get(target)?;
                    let d = drives.iter().find(|d| &d.name == name)?;
                    let m = d.mounted.as_ref()?;
                    (cur.priority < q.priority && m.mounted_for >= p.min_mount)
                        .then(|| name.clone())
                });
                match victim {
                    Some(v) => v,
                    None => continue,
                }
            }
        };
        // Mounting the very target already in this drive would be a remount: keep it instead.
        let already = drives
            .iter()
            .find(|d| d.name == drive)
            .and_then(|d| d.mounted.as_ref())
            .is_some_and(|m| m.target == q.target);
        let dec = if already {
            Decision::Stay {
                drive: drive.clone(),
                target: q.target.clone(),
            }
        } else {
            Decision::Mount {
                drive: drive.clone(),
                target: q.target.clone(),
                reason,
            }
        };
        decided.insert(drive, dec);
        *mounts_of.entry(q.target.clone()).or_default() += 1;
        count(&mut group_use, q.pool.as_ref(), mode);
        if is_background(q) {
            background_use += 1;
        }
    }

    // 3. Everyone else.
    drives
        .iter()
        .map(|d| {
            decided.remove(&d.name).unwrap_or_else(|| match &d.mounted {
                Some(m) if !d.unavailable && m.mounted_for >= p.min_mount => Decision::Unmount {
                    drive: d.name.clone(),
                },
                _ => Decision::Idle {
                    drive: d.name.clone(),
                },
            })
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn policy() -> Policy {
        Policy {
            min_bytes: 1_000_000,
            min_files: 100,
            max_age: Duration::from_secs(600),
            min_mount: Duration::from_secs(300),
            group_of_pool: BTreeMap::new(),
            caps: BTreeMap::new(),
            background_cap: 0,
        }
    }

    fn read(barcode: &str, bytes: u64, files: u64, age_s: u64, prio: i32) -> QueueSummary {
        QueueSummary {
            target: MountTarget::Read {
                barcode: barcode.into(),
            },
            pool: Some("p".into()),
            bytes,
            files,
            oldest_age: Duration::from_secs(age_s),
            priority: prio,
        }
    }

    fn write(pool: &str, bytes: u64, files: u64, age_s: u64, prio: i32) -> QueueSummary {
        QueueSummary {
            target: MountTarget::Write { pool: pool.into() },
            pool: Some(pool.into()),
            bytes,
            files,
            oldest_age: Duration::from_secs(age_s),
            priority: prio,
        }
    }

    fn empty(name: &str) -> DriveState {
        DriveState {
            name: name.into(),
            mounted: None,
            unavailable: false,
        }
    }

    fn holding(name: &str, target: MountTarget, secs: u64) -> DriveState {
        let barcode = match &target {
            MountTarget::Read { barcode } => barcode.clone(),
            MountTarget::Write { pool } => format!("W-{pool}"),
        };
        DriveState {
            name: name.into(),
            mounted: Some(Mounted {
                barcode,
                target,
                pool: None,
                mounted_for: Duration::from_secs(secs),
                takes_writes: true,
                repack_source: false,
            }),
            unavailable: false,
        }
    }

    /// Another drive loop's drive (this host or another), as read from the drive board.
    fn elsewhere(name: &str, target: MountTarget, pool: &str) -> DriveState {
        let mut d = holding(name, target, 0);
        d.unavailable = true;
        if let Some(m) = d.mounted.as_mut() {
            m.pool = Some(pool.into());
        }
        d
    }

    /// Background work (repack) takes at most `background_cap` drives, however much of it
    /// waits; user work takes the rest, and is never held by the cap.
    #[test]
    fn background_work_is_held_to_its_drive_cap() {
        let p = policy().with_background_cap(1);
        let bg = BACKGROUND_PRIORITY;
        let queues = vec![
            read("S1", 10_000_000, 1000, 5, bg),
            write("dest", 10_000_000, 1000, 5, bg),
        ];
        let drives = vec![empty("d0"), empty("d1"), empty("d2")];
        let mounts = |d: &[Decision]| {
            d.iter()
                .filter(|d| matches!(d, Decision::Mount { .. }))
                .count()
        };
        assert_eq!(mounts(&decide(&p, &queues, &drives)), 1);
        // Uncapped, both get a drive.
        assert_eq!(mounts(&decide(&policy(), &queues, &drives)), 2);
        // A drive already serving background work counts: nothing more is mounted for it,
        // and a user recall still gets a drive.
        let mut more = queues.clone();
        more.push(read("U1", 10_000_000, 1000, 5, DEFAULT_PRIORITY_FOR_TEST));
        let busy = vec![
            holding(
                "d0",
                MountTarget::Read {
                    barcode: "S1".into(),
                },
                10,
            ),
            empty("d1"),
            empty("d2"),
        ];
        let d = decide(&p, &more, &busy);
        let mounted: Vec<&MountTarget> = d
            .iter()
            .filter_map(|d| match d {
                Decision::Mount { target, .. } => Some(target),
                _ => None,
            })
            .collect();
        assert_eq!(
            mounted,
            [&MountTarget::Read {
                barcode: "U1".into()
            }]
        );
    }

    /// Another loop's drive holding a repack's source between two slices (no read of it
    /// queued) still serves the repack: its writes do not take a third drive meanwhile, and
    /// the drive holding the source may itself switch to them (one drive, cap 1).
    #[test]
    fn a_repack_source_held_between_slices_counts_against_the_cap() {
        let bg = BACKGROUND_PRIORITY;
        let queues = vec![write("dest", 10_000_000, 1000, 5, bg)];
        // Another loop's drive (or this loop's own) holding `target`.
        let held = |name: &str, target: MountTarget, unavailable: bool| {
            let mut d = holding(name, target, 10);
            d.unavailable = unavailable;
            d
        };
        let source = |unavailable: bool| {
            let mut d = held(
                "d0",
                MountTarget::Read {
                    barcode: "S1".into(),
                },
                unavailable,
            );
            if let Some(m) = d.mounted.as_mut() {
                m.repack_source = true;
                m.takes_writes = false;
            }
            d
        };
        let writer = held(
            "d1",
            MountTarget::Write {
                pool: "dest".into(),
            },
            true,
        );
        let mounts = |d: &[Decision]| {
            d.iter()
                .filter(|d| matches!(d, Decision::Mount { .. }))
                .count()
        };
        // Cap 2: the source (held) and the writer (busy) are the repack's two drives.
        let p = policy().with_background_cap(2);
        let drives = vec![source(true), writer.clone(), empty("d2")];
        assert_eq!(mounts(&decide(&p, &queues, &drives)), 0);
        // Not a repack's source: the writes may take the empty drive.
        let mut plain = source(true);
        if let Some(m) = plain.mounted.as_mut() {
            m.repack_source = false;
        }
        let drives = vec![plain, writer, empty("d2")];
        assert_eq!(mounts(&decide(&p, &queues, &drives)), 1);
        // Cap 1, one drive: the drive holding the source is this loop's own, and switches.
        let p = policy().with_background_cap(1);
        assert_eq!(mounts(&decide(&p, &queues, &[source(false)])), 1);
    }

    const DEFAULT_PRIORITY_FOR_TEST: i32 = reel_queue::job::DEFAULT_PRIORITY;

    /// 50 jobs, each recalling 4 objects spread over 5 cartridges, 2 drives: the queue is
    /// summarised per cartridge, each mount drains that cartridge's whole queue, so at most
    /// 5 mounts happen in total (SIMULATED rounds, no tape).
    #[test]
    fn fifty_jobs_five_cartridges_at_most_five_mounts() {
        let p = policy();
        // Per-request rows as the requests table would hold them: (job, cartridge, bytes).
        let mut rows: Vec<(u32, String, u64)> = Vec::new();
        for job in 0..50u32 {
            for k in 0..4u32 {
                rows.push((job, format!("C{:05}", (job * 7 + k * 3) % 5), 10_000_000));
            }
        }
        let mut drives = vec![empty("d0"), empty("d1")];
        let mut mounts = 0;
        let mut rounds = 0;
        while !rows.is_empty() {
            rounds += 1;
            assert!(rounds < 50, "no progress");
            let mut sums: BTreeMap<String, (u64, u64)> = BTreeMap::new();
            for (_, c, b) in &rows {
                let e = sums.entry(c.clone()).or_default();
                e.0 += b;
                e.1 += 1;
            }
            let queues: Vec<_> = sums
                .iter()
                .map(|(c, (b, f))| read(c, *b, *f, 1, 50))
                .collect();
            assert!(
                queues.len() <= 5,
                "one summary per cartridge, whatever the number of jobs"
            );
            let decisions = decide(&p, &queues, &drives);
            for d in decisions {
                match d {
                    Decision::Mount {
                        drive,
                        target: MountTarget::Read { barcode },
                        ..
                    } => {
                        mounts += 1;
                        // One mount serves every request for that cartridge, from all jobs.
                        rows.retain(|(_, c, _)| c != &barcode);
                        let i = drives.iter().position(|x| x.name == drive).unwrap();
                        drives[i] = holding(&drive, MountTarget::Read { barcode }, 0);
                    }
                    Decision::Stay {
                        target: MountTarget::Read { barcode },
                        ..
                    } => {
                        rows.retain(|(_, c, _)| c != &barcode);
                    }
                    Decision::Unmount { drive } | Decision::Idle { drive } => {
                        // Model time passing: drives that finished become old enough to unload.
                        let i = drives.iter().position(|x| x.name == drive).unwrap();
                        if let Some(m) = drives[i].mounted.as_mut() {
                            m.mounted_for += Duration::from_secs(600);
                        }
                    }
                    other => panic!("unexpected {other:?}"),
                }
            }
        }
        assert_eq!(mounts, 5, "each cartridge mounted exactly once");
    }

    #[test]
    fn higher_priority_wins_the_only_drive() {
        let p = policy();
        let q = vec![
            read("LOW", 10_000_000, 500, 900, 10),
            read("HIGH", 2_000_000, 200, 5, 90),
        ];
        let d = decide(&p, &q, &[empty("d0")]);
        assert!(
            matches!(&d[0], Decision::Mount { target: MountTarget::Read { barcode }, .. } if barcode == "HIGH"),
            "{d:?}"
        );
    }

    #[test]
    fn old_small_request_beats_threshold_by_age() {
        let p = policy();
        // Below both thresholds, but older than max_age: mounted for age.
        let q = vec![read("SMALL", 10, 1, 601, 50)];
        let d = decide(&p, &q, &[empty("d0")]);
        assert_eq!(
            d[0],
            Decision::Mount {
                drive: "d0".into(),
                target: MountTarget::Read {
                    barcode: "SMALL".into()
                },
                reason: "age"
            }
        );
        // Young and small: waits.
        let q = vec![read("SMALL", 10, 1, 5, 50)];
        assert_eq!(
            decide(&p, &q, &[empty("d0")])[0],
            Decision::Idle { drive: "d0".into() }
        );
    }

    #[test]
    fn mounted_cartridge_with_work_stays_no_thrash() {
        let p = policy();
        let q = vec![
            read("A", 10_000_000, 200, 5, 50),
            read("B", 50_000_000, 900, 900, 50),
        ];
        // d0 holds A (10 s, below min mount): A still has work, so d0 stays even though B is bigger.
        let d = decide(
            &p,
            &q,
            &[holding(
                "d0",
                MountTarget::Read {
                    barcode: "A".into(),
                },
                10,
            )],
        );
        assert_eq!(
            d[0],
            Decision::Stay {
                drive: "d0".into(),
                target: MountTarget::Read {
                    barcode: "A".into()
                }
            }
        );
    }

    #[test]
    fn preemption_only_for_higher_priority_after_min_mount() {
        let p = policy();
        let q = vec![
            read("A", 10_000_000, 200, 5, 10),
            read("URGENT", 10_000_000, 200, 5, 90),
        ];
        let young = decide(
            &p,
            &q,
            &[holding(
                "d0",
                MountTarget::Read {
                    barcode: "A".into(),
                },
                10,
            )],
        );
        assert!(matches!(young[0], Decision::Stay { .. }), "{young:?}");
        let old = decide(
            &p,
            &q,
            &[holding(
                "d0",
                MountTarget::Read {
                    barcode: "A".into(),
                },
                301,
            )],
        );
        assert!(
            matches!(&old[0], Decision::Mount { target: MountTarget::Read { barcode }, .. } if barcode == "URGENT"),
            "{old:?}"
        );
    }

    #[test]
    fn idle_mounted_drive_waits_for_min_mount_then_unloads() {
        let p = policy();
        let t = MountTarget::Read {
            barcode: "A".into(),
        };
        assert_eq!(
            decide(&p, &[], &[holding("d0", t.clone(), 10)])[0],
            Decision::Idle { drive: "d0".into() }
        );
        assert_eq!(
            decide(&p, &[], &[holding("d0", t, 400)])[0],
            Decision::Unmount { drive: "d0".into() }
        );
    }

    fn holding_cartridge(name: &str, target: MountTarget, barcode: &str, pool: &str) -> DriveState {
        DriveState {
            name: name.into(),
            mounted: Some(Mounted {
                barcode: barcode.into(),
                target,
                pool: Some(pool.into()),
                mounted_for: Duration::from_secs(10),
                takes_writes: true,
                repack_source: false,
            }),
            unavailable: false,
        }
    }

    /// Issue #15 item 3: a 3-byte recall of an object on the cartridge just written waited out
    /// `min_mount` (300 s) and then unloaded and reloaded that cartridge.
    #[test]
    fn an_idle_mount_serves_its_own_cartridge_in_the_other_mode_at_once() {
        let p = policy();
        let w = MountTarget::Write { pool: "P".into() };
        let r = MountTarget::Read {
            barcode: "C1".into(),
        };
        // Written, nothing more to write: a read of that cartridge takes the drive now.
        let d = decide(
            &p,
            &[read("C1", 3, 1, 700, 50)],
            &[holding_cartridge("d0", w.clone(), "C1", "P"), empty("d1")],
        );
        assert_eq!(
            d[0],
            Decision::Mount {
                drive: "d0".into(),
                target: r.clone(),
                reason: "age"
            },
            "{d:?}"
        );
        assert_eq!(d[1], Decision::Idle { drive: "d1".into() }, "{d:?}");
        // Read, nothing more to read: a write to its pool takes the drive now.
        let d = decide(
            &p,
            &[write("P", 3, 1, 700, 50)],
            &[empty("d1"), holding_cartridge("d0", r.clone(), "C1", "P")],
        );
        assert!(
            matches!(&d[1], Decision::Mount { drive, target, .. } if drive == "d0" && *target == w),
            "{d:?}"
        );
        // While the write mount still has work, the read waits for it (one mount, one mode),
        // and no other drive loads that cartridge.
        let d = decide(
            &p,
            &[write("P", 1_500_000, 150, 5, 50), read("C1", 3, 1, 700, 50)],
            &[holding_cartridge("d0", w.clone(), "C1", "P"), empty("d1")],
        );
        assert_eq!(
            d,
            vec![
                Decision::Stay {
                    drive: "d0".into(),
                    target: w
                },
                Decision::Idle { drive: "d1".into() }
            ]
        );
    }

    #[test]
    fn a_waiting_request_never_waits_on_an_idle_drive() {
        let p = policy();
        let a = MountTarget::Read {
            barcode: "A".into(),
        };
        // Mounted 10 s, nothing to do: another cartridge's read takes it without waiting out
        // min_mount (300 s).
        let d = decide(&p, &[read("B", 3, 1, 700, 50)], &[holding("d0", a, 10)]);
        assert!(
            matches!(&d[0], Decision::Mount { target: MountTarget::Read { barcode }, .. } if barcode == "B"),
            "{d:?}"
        );
    }

    #[test]
    fn reads_and_writes_never_share_a_mount() {
        let p = policy();
        // d0 writes pool P; a read queue for a cartridge of P appears: it needs another drive.
        let q = vec![
            write("P", 5_000_000, 200, 5, 50),
            read("R1", 5_000_000, 200, 5, 50),
        ];
        let d = decide(
            &p,
            &q,
            &[
                holding("d0", MountTarget::Write { pool: "P".into() }, 10),
                empty("d1"),
            ],
        );
        assert_eq!(
            d[0],
            Decision::Stay {
                drive: "d0".into(),
                target: MountTarget::Write { pool: "P".into() }
            }
        );
        assert!(
            matches!(
                &d[1],
                Decision::Mount {
                    target: MountTarget::Read { .. },
                    ..
                }
            ),
            "{d:?}"
        );
    }

    #[test]
    fn group_caps_limit_drives_per_mode() {
        let mut p = policy();
        p.group_of_pool.insert("p".into(), "vo".into());
        p.caps.insert("vo".into(), (1, 0));
        let q = vec![
            read("A", 5_000_000, 200, 5, 50),
            read("B", 5_000_000, 200, 5, 50),
        ];
        let d = decide(&p, &q, &[empty("d0"), empty("d1")]);
        let mounts = d
            .iter()
            .filter(|d| matches!(d, Decision::Mount { .. }))
            .count();
        assert_eq!(mounts, 1, "read cap 1 for the group: {d:?}");
    }

    #[test]
    fn write_pool_takes_a_second_drive_only_when_twice_the_threshold() {
        let p = policy();
        let one = vec![write("P", 1_500_000, 150, 5, 50)];
        let d = decide(&p, &one, &[empty("d0"), empty("d1")]);
        assert_eq!(
            d.iter()
                .filter(|d| matches!(d, Decision::Mount { .. }))
                .count(),
            1,
            "{d:?}"
        );
        let big = vec![write("P", 2_500_000, 250, 5, 50)];
        let d = decide(&p, &big, &[empty("d0"), empty("d1")]);
        // Candidates are considered once per round; the second drive follows next round.
        let d2 = decide(
            &p,
            &big,
            &[
                holding("d0", MountTarget::Write { pool: "P".into() }, 0),
                empty("d1"),
            ],
        );
        assert_eq!(
            d.iter()
                .filter(|d| matches!(d, Decision::Mount { .. }))
                .count(),
            1
        );
        assert!(
            matches!(
                &d2[1],
                Decision::Mount {
                    target: MountTarget::Write { .. },
                    ..
                }
            ),
            "{d2:?}"
        );
    }

    #[test]
    fn unavailable_drives_are_never_used() {
        let p = policy();
        let q = vec![read("A", 5_000_000, 200, 5, 50)];
        let mut d0 = empty("d0");
        d0.unavailable = true;
        assert_eq!(
            decide(&p, &q, &[d0])[0],
            Decision::Idle { drive: "d0".into() }
        );
    }

    #[test]
    fn group_caps_count_other_drives_even_idle_ones() {
        // Each drive loop decides for its own drive only; the cap must see the others'.
        let mut p = policy();
        p.group_of_pool.insert("p".into(), "vo".into());
        p.caps.insert("vo".into(), (1, 0));
        let q = vec![read("B", 5_000_000, 200, 5, 50)];
        let other = elsewhere(
            "d0",
            MountTarget::Read {
                barcode: "A".into(),
            },
            "p",
        );
        // d0 on another host holds A of group vo (its queue is empty: it still holds the drive).
        let d = decide(&p, &q, &[empty("d1"), other.clone()]);
        assert_eq!(d[0], Decision::Idle { drive: "d1".into() }, "{d:?}");
        // Without the cap, d1 mounts B.
        p.caps.clear();
        let d = decide(&p, &q, &[empty("d1"), other]);
        assert!(
            matches!(&d[0], Decision::Mount { drive, .. } if drive == "d1"),
            "{d:?}"
        );
    }

    /// Seen in the benchmark: an intake left cartridge A of pool P in d0; an archive to P was
    /// mounted on the empty d1, which could not load A (it is in d0) and labelled a new
    /// cartridge into P. The write goes to the drive that holds the pool's idle cartridge.
    #[test]
    fn a_write_goes_to_the_drive_holding_the_pools_idle_cartridge() {
        let p = policy();
        let labelled = MountTarget::Read {
            barcode: "A".into(),
        };
        let q = vec![write("P", 5_000_000, 200, 5, 50)];
        // d1's loop: A is idle in d0 (its label request is done): d1 leaves the write to d0.
        let mut d0 = holding_cartridge("d0", labelled.clone(), "A", "P");
        d0.unavailable = true;
        let d = decide(&p, &q, &[empty("d1"), d0]);
        assert_eq!(d[0], Decision::Idle { drive: "d1".into() }, "{d:?}");
        // d0's loop: it holds A, so it takes the write (no unload: A is the pool's).
        let d0 = holding_cartridge("d0", labelled.clone(), "A", "P");
        let mut d1 = empty("d1");
        d1.unavailable = true;
        let d = decide(&p, &q, &[d0, d1]);
        assert!(
            matches!(&d[0], Decision::Mount { drive, target, .. }
                if drive == "d0" && *target == MountTarget::Write { pool: "P".into() }),
            "{d:?}"
        );
        // Busy elsewhere (A still has reads queued): d1 writes P on another cartridge.
        let mut busy = holding_cartridge("d0", labelled.clone(), "A", "P");
        busy.unavailable = true;
        let q2 = vec![q[0].clone(), read("A", 5_000_000, 200, 5, 50)];
        let d = decide(&p, &q2, &[empty("d1"), busy]);
        assert!(
            matches!(&d[0], Decision::Mount { drive, .. } if drive == "d1"),
            "{d:?}"
        );
        // A holder that looks idle but does not take the write (in a batch whose requests
        // are all claimed, or stuck): past the grace, d1 writes it.
        let mut d0 = holding_cartridge("d0", labelled, "A", "P");
        d0.unavailable = true;
        let late = vec![write("P", 5_000_000, 200, HANDOFF_GRACE.as_secs(), 50)];
        let d = decide(&p, &late, &[empty("d1"), d0]);
        assert!(
            matches!(&d[0], Decision::Mount { drive, .. } if drive == "d1"),
            "{d:?}"
        );
    }

    /// Seen in the repack benchmark: the source of a repack, idle in d0 between two slices of
    /// reads, made d0 its pool's writer: d0 unloaded it to load a destination cartridge, and
    /// the next slice mounted the source again in another drive. A cartridge that takes no
    /// writes does not make its drive the pool's: the write goes to an empty drive.
    #[test]
    fn a_cartridge_that_takes_no_writes_does_not_draw_its_pools_writes() {
        let p = policy();
        let source = MountTarget::Read {
            barcode: "S".into(),
        };
        let q = vec![write("P", 5_000_000, 200, 1, 5)];
        let mut d1 = empty("d1");
        d1.unavailable = true;
        let mut repacking = holding_cartridge("d0", source.clone(), "S", "P");
        if let Some(m) = repacking.mounted.as_mut() {
            m.takes_writes = false;
        }
        let d = decide(&p, &q, &[repacking, d1.clone()]);
        assert_eq!(d[0], Decision::Idle { drive: "d0".into() }, "{d:?}");
        // Seen from d1's loop: d0's idle cartridge of P takes no writes, so the write is not
        // left to d0 (its loop would not take it as the pool's holder); d1 writes at once.
        let mut elsewhere = holding_cartridge("d0", source.clone(), "S", "P");
        if let Some(m) = elsewhere.mounted.as_mut() {
            m.takes_writes = false;
        }
        elsewhere.unavailable = true;
        let d = decide(&p, &q, &[empty("d1"), elsewhere]);
        assert!(
            matches!(&d[0], Decision::Mount { drive, .. } if drive == "d1"),
            "{d:?}"
        );
        // An active cartridge of the pool in d0: d0 writes, without an unload.
        let d = decide(&p, &q, &[holding_cartridge("d0", source, "S", "P"), d1]);
        assert!(
            matches!(&d[0], Decision::Mount { drive, target, .. }
                if drive == "d0" && *target == MountTarget::Write { pool: "P".into() }),
            "{d:?}"
        );
    }

    /// Every drive idle with a cartridge, one loop each: the cartridge mounted longest gives
    /// way to new work, the one mounted a moment ago stays (it may be wanted again soon).
    #[test]
    fn the_longest_idle_mount_gives_way_first() {
        let p = policy();
        let q = vec![read("C", 5_000_000, 200, 1, 50)];
        let recent = |name: &str, secs: u64| {
            holding(
                name,
                MountTarget::Read {
                    barcode: name.to_uppercase(),
                },
                secs,
            )
        };
        let mut old = recent("d1", 600);
        old.unavailable = true;
        let d = decide(&p, &q, &[recent("d0", 5), old]);
        assert_eq!(d[0], Decision::Idle { drive: "d0".into() }, "{d:?}");
        let mut young = recent("d0", 5);
        young.unavailable = true;
        let d = decide(&p, &q, &[recent("d1", 600), young]);
        assert!(
            matches!(&d[0], Decision::Mount { drive, .. } if drive == "d1"),
            "{d:?}"
        );
        // Past the grace, the young one takes it too.
        let late = vec![read("C", 5_000_000, 200, HANDOFF_GRACE.as_secs(), 50)];
        let mut old = recent("d1", 600);
        old.unavailable = true;
        let d = decide(&p, &late, &[recent("d0", 5), old]);
        assert!(
            matches!(&d[0], Decision::Mount { drive, .. } if drive == "d0"),
            "{d:?}"
        );
    }

    /// Seen in the mixed benchmark: each drive loop decides for its own drive only; d0 held
    /// the writer's cartridge, idle between two archive jobs, and unloaded it for a read while
    /// d1 stood empty, so the writer's next job waited for a remount. An empty drive of another
    /// loop takes the read instead (each empty drive one queue), for a grace at most.
    #[test]
    fn an_idle_mount_is_not_unloaded_while_another_loop_has_an_empty_drive() {
        let p = policy();
        let w = MountTarget::Write { pool: "W".into() };
        let mut d1 = empty("d1");
        d1.unavailable = true;
        // d0 holds W's cartridge, idle for 10 s (under min_mount): it waits, d1 takes C2.
        let q = vec![read("C2", 5_000_000, 1, 1, 50)];
        let d = decide(&p, &q, &[holding("d0", w.clone(), 10), d1.clone()]);
        assert_eq!(d[0], Decision::Idle { drive: "d0".into() }, "{d:?}");
        let d = decide(&p, &q, &[empty("d1")]);
        assert!(
            matches!(&d[0], Decision::Mount { drive, .. } if drive == "d1"),
            "{d:?}"
        );
        // Two reads waiting, one empty drive elsewhere: d0 takes the second.
        let q2 = vec![
            read("C2", 5_000_000, 1, 3, 50),
            read("C3", 5_000_000, 1, 1, 50),
        ];
        let d = decide(&p, &q2, &[holding("d0", w.clone(), 10), d1.clone()]);
        assert!(
            matches!(&d[0], Decision::Mount { drive, target, .. }
                if drive == "d0" && *target == MountTarget::Read { barcode: "C3".into() }),
            "{d:?}"
        );
        // Nor is a busy drive pre-empted for a higher priority while d1 stands empty.
        let busy = vec![
            read("C2", 5_000_000, 1, 1, 90),
            write("W", 5_000_000, 200, 1, 10),
        ];
        let d = decide(&p, &busy, &[holding("d0", w.clone(), 400), d1.clone()]);
        assert!(
            matches!(&d[0], Decision::Stay { drive, .. } if drive == "d0"),
            "{d:?}"
        );
        // The empty drive's loop does not take it within the grace (stuck, out of service):
        // d0 serves it.
        let late = vec![read("C2", 5_000_000, 1, HANDOFF_GRACE.as_secs(), 50)];
        let d = decide(&p, &late, &[holding("d0", w, 10), d1]);
        assert!(
            matches!(&d[0], Decision::Mount { drive, .. } if drive == "d0"),
            "{d:?}"
        );
    }

    #[test]
    fn a_cartridge_or_pool_served_elsewhere_is_not_mounted_twice() {
        let p = policy();
        // B is loaded in another host's drive with work queued: d1 leaves it there.
        let q = vec![read("B", 5_000_000, 200, 5, 50)];
        let other = elsewhere(
            "d0",
            MountTarget::Read {
                barcode: "B".into(),
            },
            "p",
        );
        let d = decide(&p, &q, &[empty("d1"), other]);
        assert_eq!(d[0], Decision::Idle { drive: "d1".into() }, "{d:?}");
        // A pool written by another drive needs twice the threshold for a second drive.
        let writer = elsewhere("d0", MountTarget::Write { pool: "P".into() }, "P");
        let one = vec![write("P", 1_500_000, 150, 5, 50)];
        let d = decide(&p, &one, &[empty("d1"), writer.clone()]);
        assert_eq!(d[0], Decision::Idle { drive: "d1".into() }, "{d:?}");
        let big = vec![write("P", 2_500_000, 250, 5, 50)];
        let d = decide(&p, &big, &[empty("d1"), writer]);
        assert!(
            matches!(&d[0], Decision::Mount { drive, .. } if drive == "d1"),
            "{d:?}"
        );
    }
}
