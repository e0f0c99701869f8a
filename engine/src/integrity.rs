//! # What reel's checks caught
//!
//! reel checks every byte it moves: a record under logical block protection (LBP) carries a
//! CRC32C that the drive checks on the way in and reel checks on the way out; a container's
//! records carry its framing and its footer the SHA-256 of its data; an object's SHA-256 is
//! checked when it is recalled. Each time one of those checks fails, or a drive reports a
//! medium error, reel records a [`Catch`]: which cartridge, which blocks, what was wrong. The
//! catalogue keeps them (`reel library integrity`), so an operator sees which cartridges and
//! drives keep failing, and a test can count what was caught against what it injected.
//!
//! A session reports a catch through the drive's [`IntegrityLog`]; whoever opened the library
//! (a worker) drains the log into the catalogue. Reporting never blocks a drive thread, and a
//! log nobody drains only traces what it is given.

use serde::{Deserialize, Serialize};
use tokio::sync::mpsc;

/// Which check failed.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum CatchKind {
    /// The drive refused a record written to it: its CRC32C did not match (damaged between
    /// host and drive; nothing was written, the record was sent again).
    LbpOnWrite,
    /// A record read arrived with a CRC32C that does not match its bytes (damaged between
    /// drive and host; read again).
    LbpOnRead,
    /// What was read is whole on the way but wrong on the tape: a container's framing or its
    /// SHA-256, or an object's SHA-256, differs from what was written.
    Content,
    /// The drive could not read a block (MEDIUM ERROR).
    MediumError,
}

impl CatchKind {
    /// The name stored and shown (`lbp_on_write`, ...).
    pub fn as_str(self) -> &'static str {
        match self {
            CatchKind::LbpOnWrite => "lbp_on_write",
            CatchKind::LbpOnRead => "lbp_on_read",
            CatchKind::Content => "content",
            CatchKind::MediumError => "medium_error",
        }
    }

    /// Parse a stored name.
    pub fn parse(s: &str) -> Option<CatchKind> {
        Some(match s {
            "lbp_on_write" => CatchKind::LbpOnWrite,
            "lbp_on_read" => CatchKind::LbpOnRead,
            "content" => CatchKind::Content,
            "medium_error" => CatchKind::MediumError,
            _ => return None,
        })
    }
}

/// One failed check.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Catch {
    /// The cartridge read or written.
    pub barcode: String,
    /// The drive (its index in the library).
    pub drive: u32,
    /// Which check.
    pub kind: CatchKind,
    /// The first block concerned.
    pub first_block: u64,
    /// The last block concerned (the same for one record; a container's last for its SHA-256).
    pub last_block: u64,
    /// The container, when the check was one of its own.
    pub container_id: Option<i64>,
    /// What was seen, for an operator.
    pub detail: String,
}

/// Where a drive's sessions report what their checks caught. Cheap to clone; reporting never
/// blocks.
#[derive(Clone, Debug, Default)]
pub struct IntegrityLog {
    tx: Option<mpsc::UnboundedSender<Catch>>,
    /// Catches sent and not yet taken off by the drain ([`IntegrityLog::settled`]).
    pending: std::sync::Arc<std::sync::atomic::AtomicU64>,
}

impl IntegrityLog {
    /// A log that only traces (nothing drains it).
    pub fn traced_only() -> IntegrityLog {
        IntegrityLog::default()
    }

    /// A log, the receiver its owner drains (into the catalogue), and the count the drain
    /// takes each catch off once it is done with it ([`Pending::taken`]).
    pub fn channel() -> (IntegrityLog, mpsc::UnboundedReceiver<Catch>, Pending) {
        let (tx, rx) = mpsc::unbounded_channel();
        let log = IntegrityLog {
            tx: Some(tx),
            pending: Default::default(),
        };
        let pending = Pending(log.pending.clone());
        (log, rx, pending)
    }

    /// Wait until every catch sent so far is drained, at most `within`; whether it was.
    pub async fn settled(&self, within: std::time::Duration) -> bool {
        let until = tokio::time::Instant::now() + within;
        while self.pending.load(std::sync::atomic::Ordering::SeqCst) > 0 {
            if tokio::time::Instant::now() >= until {
                return false;
            }
            tokio::time::sleep(std::time::Duration::from_millis(50)).await;
        }
        true
    }

    /// Report a failed check (also traced at WARN).
    pub fn report(&self, catch: Catch) {
        tracing::warn!(
            barcode = %catch.barcode,
            drive = catch.drive,
            kind = catch.kind.as_str(),
            first_block = catch.first_block,
            last_block = catch.last_block,
            detail = %catch.detail,
            "integrity check failed"
        );
        if let Some(tx) = &self.tx {
            self.pending
                .fetch_add(1, std::sync::atomic::Ordering::SeqCst);
            // A closed receiver means the host is stopping: the trace above is what remains.
            if tx.send(catch).is_err() {
                Pending(self.pending.clone()).taken();
            }
        }
    }
}

/// The catches sent and not yet drained (held by the drain; it holds no sender, so the
/// channel closes with the last drive).
#[derive(Debug)]
pub struct Pending(std::sync::Arc<std::sync::atomic::AtomicU64>);

impl Pending {
    /// The drain is done with one catch (recorded, or given up).
    pub fn taken(&self) {
        let _ = self.0.fetch_update(
            std::sync::atomic::Ordering::SeqCst,
            std::sync::atomic::Ordering::SeqCst,
            |n| n.checked_sub(1),
        );
    }
}

/// The cartridge and drive a session's checks run against: what every [`Catch`] it reports
/// names.
#[derive(Clone, Debug)]
pub struct Reporter {
    log: IntegrityLog,
    barcode: String,
    drive: u32,
}

impl Reporter {
    /// Checks against `barcode` in drive `drive`, reported to `log`.
    pub fn new(log: IntegrityLog, barcode: impl Into<String>, drive: u32) -> Reporter {
        Reporter {
            log,
            barcode: barcode.into(),
            drive,
        }
    }

    /// The cartridge.
    pub fn barcode(&self) -> &str {
        &self.barcode
    }

    /// Report a failed check on blocks `first..=last`.
    pub fn report(
        &self,
        kind: CatchKind,
        first: u64,
        last: u64,
        container_id: Option<i64>,
        detail: impl Into<String>,
    ) {
        self.log.report(Catch {
            barcode: self.barcode.clone(),
            drive: self.drive,
            kind,
            first_block: first,
            last_block: last.max(first),
            container_id,
            detail: detail.into(),
        });
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn a_report_reaches_the_receiver_with_its_cartridge_and_drive() {
        let (log, mut rx, pending) = IntegrityLog::channel();
        let r = Reporter::new(log.clone(), "RL0001L9", 2);
        r.report(CatchKind::Content, 10, 4, Some(7), "footer SHA-256 differs");
        let c = rx.recv().await.expect("one catch");
        assert_eq!(c.barcode, "RL0001L9");
        assert_eq!(c.drive, 2);
        assert_eq!((c.first_block, c.last_block), (10, 10));
        assert_eq!(c.container_id, Some(7));
        let short = std::time::Duration::from_millis(100);
        assert!(!log.settled(short).await, "one catch is not drained yet");
        pending.taken();
        assert!(log.settled(short).await);
        IntegrityLog::traced_only().report(c);
    }

    #[test]
    fn kinds_round_trip_through_their_names() {
        for k in [
            CatchKind::LbpOnWrite,
            CatchKind::LbpOnRead,
            CatchKind::Content,
            CatchKind::MediumError,
        ] {
            assert_eq!(CatchKind::parse(k.as_str()), Some(k));
        }
        assert_eq!(CatchKind::parse("nope"), None);
    }
}
