//! The `corruption-caught` invariant: every corruption the chaos made take effect is caught by
//! one of reel's checks and counted in its integrity log (`reel library integrity`), and
//! every catch there has a cause the chaos made.
//!
//! The library's event log says what took effect (`fired_*`, with the cartridge, the block,
//! the process and the wall time); reel's log says what it caught. They are matched:
//! - **on the way** (`fired_corrupt_write`, `fired_corrupt_read`) and **medium errors**
//!   (`fired_medium_error`, one read each): one catch of the same kind at the same cartridge
//!   and block. The process that met it records it a moment later (or, while the store is
//!   away, within about a minute); if that process was killed within 90 s, the catch may
//!   have gone with it (counted as `excused_by_kill`).
//! - **on the medium** (`fired_silent_write`, `fired_short_write`, `fired_corrupt_stored`):
//!   when the block lies in a container that holds an acknowledged object's copy as the final
//!   verify starts (the final verify reads every one of them), a `content` or `medium_error`
//!   catch whose blocks include it. Damage outside those (in a container reel already caught
//!   and gave up, in the torn tail of a killed writer, in dead space) is counted, caught or
//!   not, as `outside_live_data`. A record whose buffer was then lost to a power cut or a dying
//!   drive (`lost_buffer` at or below its block, later) never reached the tape (`voided`).
//! - In reverse, a catch no injected fault explains is `unexplained`: reel reported damage
//!   that was not there.

use std::collections::{BTreeMap, BTreeSet};

use serde::Serialize;
use serde_json::Value;

/// How long after meeting a fault a killed process is excused for not having recorded it: a
/// catch waits in its process until the store takes it, retried for about a minute (longer
/// with a freeze between), so a kill within that long may take it along.
const KILL_EXCUSE_MS: u64 = 90_000;

/// What the matching found.
#[derive(Debug, Default, Clone, Serialize)]
pub struct CorruptionTally {
    /// Faults that took effect, by the library's event name.
    pub injected: BTreeMap<String, u64>,
    /// Catches in reel's integrity log, by kind.
    pub caught: BTreeMap<String, u64>,
    /// Injected faults matched by a catch.
    pub matched: u64,
    /// Not caught, and the process that met it was killed within 90 s.
    pub excused_by_kill: u64,
    /// Damage on the medium outside any container an acknowledged object relies on.
    pub outside_live_data: u64,
    /// Damage to records later lost with the drive's buffer (never on tape).
    pub voided: u64,
    /// Not caught, with no excuse (each is a violation).
    pub missed: u64,
    /// Catches no injected fault explains (each is a violation).
    pub unexplained: u64,
}

/// One fired fault from the library's log.
#[derive(Debug, Clone)]
pub struct Fired {
    /// `fired_corrupt_read`, ...
    pub event: String,
    /// Cartridge.
    pub barcode: String,
    /// Block.
    pub block: u64,
    /// The process it took effect in.
    pub pid: u64,
    /// Wall time, Unix ms.
    pub t_ms: u64,
}

/// One catch from reel's integrity log.
#[derive(Debug, Clone)]
pub struct Caught {
    /// `lbp_on_read`, ...
    pub kind: String,
    /// Cartridge.
    pub barcode: String,
    /// First block.
    pub first: u64,
    /// Last block.
    pub last: u64,
}

impl Caught {
    /// Parse `reel --json library integrity` output.
    pub fn parse_all(v: &Value) -> Vec<Caught> {
        v.as_array()
            .into_iter()
            .flatten()
            .filter_map(|c| {
                Some(Caught {
                    kind: c["kind"].as_str()?.to_string(),
                    barcode: c["barcode"].as_str()?.to_string(),
                    first: c["first_block"].as_u64()?,
                    last: c["last_block"].as_u64()?,
                })
            })
            .collect()
    }
}

/// The library's fired faults and lost buffers, in log order.
pub fn parse_fired(events: &Value) -> Vec<Fired> {
    events
        .as_array()
        .into_iter()
        .flatten()
        .filter_map(|e| {
            Some(Fired {
                event: e["event"].as_str()?.to_string(),
                barcode: e["barcode"].as_str()?.to_string(),
                block: e["block"].as_u64()?,
                pid: e["pid"].as_u64().unwrap_or(0),
                t_ms: e["t_ms"].as_u64().unwrap_or(0),
            })
        })
        .collect()
}

fn on_the_medium(event: &str) -> bool {
    matches!(
        event,
        "fired_silent_write" | "fired_short_write" | "fired_corrupt_stored"
    )
}

fn catch_kind_for(event: &str) -> Option<&'static str> {
    Some(match event {
        "fired_corrupt_write" => "lbp_on_write",
        "fired_corrupt_read" => "lbp_on_read",
        "fired_medium_error" => "medium_error",
        _ => return None,
    })
}

/// Match what took effect against what was caught. `live`: the (barcode, first, last) block
/// ranges of containers holding acknowledged copies when the final verify began; `killed`:
/// (pid, Unix ms) of every `kill -9`. Returns the tally and one line per violation.
pub fn check(
    fired: &[Fired],
    caught: &[Caught],
    live: &BTreeSet<(String, u64, u64)>,
    killed: &[(u64, u64)],
) -> (CorruptionTally, Vec<String>) {
    let mut t = CorruptionTally::default();
    let mut problems = Vec::new();
    for c in caught {
        *t.caught.entry(c.kind.clone()).or_default() += 1;
    }
    let mut used = vec![false; caught.len()];
    for (i, f) in fired.iter().enumerate() {
        if f.event == "lost_buffer" {
            continue;
        }
        *t.injected.entry(f.event.clone()).or_default() += 1;
        if let Some(kind) = catch_kind_for(&f.event) {
            let hit = caught.iter().enumerate().position(|(j, c)| {
                !used[j] && c.kind == kind && c.barcode == f.barcode && c.first == f.block
            });
            match hit {
                Some(j) => {
                    used[j] = true;
                    t.matched += 1;
                }
                None if killed.iter().any(|&(pid, at)| {
                    pid == f.pid && at >= f.t_ms && at <= f.t_ms + KILL_EXCUSE_MS
                }) =>
                {
                    t.excused_by_kill += 1;
                }
                None => {
                    t.missed += 1;
                    problems.push(format!(
                        "{} on {} block {} (process {}) was not caught as {kind}",
                        f.event, f.barcode, f.block, f.pid
                    ));
                }
            }
            continue;
        }
        if !on_the_medium(&f.event) {
            continue;
        }
        let lost_later = fired[i + 1..]
            .iter()
            .any(|l| l.event == "lost_buffer" && l.barcode == f.barcode && l.block <= f.block);
        if lost_later && f.event != "fired_corrupt_stored" {
            t.voided += 1;
            continue;
        }
        let covering = |c: &Caught| {
            c.barcode == f.barcode
                && (c.kind == "content" || c.kind == "medium_error")
                && c.first <= f.block
                && f.block <= c.last
        };
        let any_catch = caught.iter().any(covering);
        for (j, c) in caught.iter().enumerate() {
            if covering(c) {
                used[j] = true;
            }
        }
        let in_live = live
            .iter()
            .any(|(bc, first, last)| *bc == f.barcode && *first <= f.block && f.block <= *last);
        if any_catch {
            t.matched += 1;
        } else if !in_live {
            t.outside_live_data += 1;
        } else {
            t.missed += 1;
            problems.push(format!(
                "{} on {} block {} lies in a container an acknowledged object relies on, and \
                 no check caught it",
                f.event, f.barcode, f.block
            ));
        }
    }
    // A container judged whole-content-wrong is reported once per read; several reads of one
    // damaged container (a write's read-back, a verify, a recall) each add a catch covering
    // the same damage: all of them are explained by it (marked above).
    for (j, c) in caught.iter().enumerate() {
        if used[j] {
            continue;
        }
        t.unexplained += 1;
        problems.push(format!(
            "{} on {} blocks {}-{} has no injected cause",
            c.kind, c.barcode, c.first, c.last
        ));
    }
    (t, problems)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn fired(event: &str, bc: &str, block: u64, pid: u64, t_ms: u64) -> Fired {
        Fired {
            event: event.into(),
            barcode: bc.into(),
            block,
            pid,
            t_ms,
        }
    }
    fn caught(kind: &str, bc: &str, first: u64, last: u64) -> Caught {
        Caught {
            kind: kind.into(),
            barcode: bc.into(),
            first,
            last,
        }
    }

    #[test]
    fn each_fault_on_the_way_needs_its_own_catch() {
        let f = vec![
            fired("fired_corrupt_read", "A", 10, 1, 1000),
            fired("fired_corrupt_read", "A", 10, 1, 2000),
        ];
        let one = vec![caught("lbp_on_read", "A", 10, 10)];
        let (t, p) = check(&f, &one, &BTreeSet::new(), &[]);
        assert_eq!((t.matched, t.missed), (1, 1), "{p:?}");
        // The process that met the second one was killed right after: excused.
        let (t, p) = check(&f, &one, &BTreeSet::new(), &[(1, 2500)]);
        assert_eq!((t.matched, t.excused_by_kill, t.missed), (1, 1, 0), "{p:?}");
        // Killed long after: not an excuse.
        let (t, _) = check(&f, &one, &BTreeSet::new(), &[(1, 200_000)]);
        assert_eq!(t.missed, 1);
    }

    #[test]
    fn damage_on_the_medium_must_be_caught_where_objects_rely_on_it() {
        let live: BTreeSet<_> = [("A".to_string(), 2, 20)].into_iter().collect();
        let f = vec![
            fired("fired_corrupt_stored", "A", 5, 9, 0),
            fired("fired_silent_write", "A", 30, 1, 0),
        ];
        let (t, p) = check(&f, &[], &live, &[]);
        assert_eq!((t.missed, t.outside_live_data), (1, 1), "{p:?}");
        let c = vec![
            caught("content", "A", 2, 20),
            caught("content", "A", 2, 20),
            caught("content", "A", 30, 30),
        ];
        let (t, p) = check(&f, &c, &live, &[]);
        assert_eq!((t.matched, t.missed, t.unexplained), (2, 0, 0), "{p:?}");
    }

    #[test]
    fn a_catch_with_no_cause_and_damage_lost_with_the_buffer_are_told_apart() {
        let f = vec![
            fired("fired_silent_write", "A", 30, 1, 0),
            fired("lost_buffer", "A", 25, 1, 10),
        ];
        let live: BTreeSet<_> = [("A".to_string(), 25, 40)].into_iter().collect();
        let c = vec![caught("lbp_on_read", "B", 3, 3)];
        let (t, p) = check(&f, &c, &live, &[]);
        assert_eq!((t.voided, t.unexplained, t.missed), (1, 1, 0), "{p:?}");
        assert!(p[0].contains("no injected cause"));
    }
}
