//! A scripted fake target for unit tests: CDB → response tables.
//!
//! A [`Script`] holds an ordered list of expected commands (matched by CDB prefix, consumed
//! in order) and a table of standing answers (matched by prefix whenever the next scripted
//! step does not match). Anything else gets ILLEGAL REQUEST 20/00, as a device answers an
//! opcode it does not implement. Every command and its data-out are logged for assertions.

use std::collections::VecDeque;
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::Duration;

use reel_scsi_protocol::command::{Completion, DataDir, STATUS_CHECK_CONDITION};
use reel_scsi_protocol::sense::Sense;

use super::{Transport, TransportError};

/// The answer to one command.
#[derive(Clone, Debug, Default)]
pub struct Reply {
    /// SCSI status.
    pub status: u8,
    /// Sense (with CHECK CONDITION).
    pub sense: Option<Sense>,
    /// Data-in bytes offered (copied up to the allocation length).
    pub data_in: Vec<u8>,
    /// Transferred count to report instead of `min(data_in, allocation)`.
    pub transferred: Option<usize>,
}

impl Reply {
    /// GOOD, no data.
    pub fn good() -> Reply {
        Reply::default()
    }

    /// GOOD with data-in.
    pub fn data(bytes: impl Into<Vec<u8>>) -> Reply {
        Reply {
            data_in: bytes.into(),
            ..Reply::default()
        }
    }

    /// CHECK CONDITION with this sense.
    pub fn check(sense: Sense) -> Reply {
        Reply {
            status: STATUS_CHECK_CONDITION,
            sense: Some(sense),
            ..Reply::default()
        }
    }

    /// CHECK CONDITION with key and ASC/ASCQ only.
    pub fn sense(key: u8, asc: (u8, u8)) -> Reply {
        Reply::check(Sense {
            key,
            asc: asc.0,
            ascq: asc.1,
            ..Sense::default()
        })
    }

    /// Add data-in to a reply (a CHECK CONDITION read that still transferred data).
    pub fn with_data(mut self, bytes: impl Into<Vec<u8>>) -> Reply {
        self.data_in = bytes.into();
        self
    }

    /// Override the reported transfer count.
    pub fn with_transferred(mut self, n: usize) -> Reply {
        self.transferred = Some(n);
        self
    }
}

/// One logged command.
#[derive(Clone, Debug)]
pub struct Logged {
    /// The CDB.
    pub cdb: Vec<u8>,
    /// Data-out sent with it.
    pub data_out: Vec<u8>,
    /// Allocation length of its data-in.
    pub alloc: usize,
}

#[derive(Default)]
struct Inner {
    steps: VecDeque<(Vec<u8>, Reply)>,
    table: Vec<(Vec<u8>, Reply)>,
    log: Vec<Logged>,
}

/// A script shared between a test and the fake transport(s) it hands out.
#[derive(Clone, Default)]
pub struct Script(Arc<Mutex<Inner>>);

impl Script {
    /// An empty script.
    pub fn new() -> Script {
        Script::default()
    }

    fn inner(&self) -> MutexGuard<'_, Inner> {
        self.0.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Expect a command whose CDB starts with `prefix` next, and answer it with `reply`.
    pub fn expect(&self, prefix: &[u8], reply: Reply) -> &Script {
        self.inner().steps.push_back((prefix.to_vec(), reply));
        self
    }

    /// Answer any command whose CDB starts with `prefix` with `reply` (a standing answer).
    pub fn always(&self, prefix: &[u8], reply: Reply) -> &Script {
        self.inner().table.push((prefix.to_vec(), reply));
        self
    }

    /// A transport talking to this script.
    pub fn transport(&self) -> FakeTarget {
        FakeTarget {
            script: self.clone(),
        }
    }

    /// Every command received so far.
    pub fn log(&self) -> Vec<Logged> {
        self.inner().log.clone()
    }

    /// Opcodes received so far.
    pub fn opcodes(&self) -> Vec<u8> {
        self.inner().log.iter().map(|l| l.cdb[0]).collect()
    }

    /// Scripted steps not consumed yet.
    pub fn pending(&self) -> usize {
        self.inner().steps.len()
    }
}

/// The transport side of a [`Script`].
pub struct FakeTarget {
    script: Script,
}

impl Transport for FakeTarget {
    fn execute(
        &mut self,
        cdb: &[u8],
        mut data: DataDir<'_>,
        _timeout: Duration,
    ) -> Result<Completion, TransportError> {
        let mut inner = self.script.inner();
        inner.log.push(Logged {
            cdb: cdb.to_vec(),
            data_out: match &data {
                DataDir::Out(b) => b.to_vec(),
                _ => Vec::new(),
            },
            alloc: match &data {
                DataDir::In(b) => b.len(),
                _ => 0,
            },
        });
        let reply = match inner.steps.front() {
            Some((p, _)) if cdb.starts_with(p) => inner.steps.pop_front().map(|s| s.1),
            _ => None,
        };
        let reply = reply
            .or_else(|| {
                inner
                    .table
                    .iter()
                    .find(|(p, _)| cdb.starts_with(p))
                    .map(|(_, r)| r.clone())
            })
            .unwrap_or_else(|| Reply::sense(5, (0x20, 0x00)));
        let mut transferred = 0;
        if let DataDir::In(buf) = &mut data {
            let n = reply.data_in.len().min(buf.len());
            buf[..n].copy_from_slice(&reply.data_in[..n]);
            transferred = n;
        }
        if let DataDir::Out(b) = &data {
            transferred = b.len();
        }
        Ok(Completion {
            status: reply.status,
            sense: reply.sense.map(|s| s.to_fixed()).unwrap_or_default(),
            transferred: reply.transferred.unwrap_or(transferred),
        })
    }

    fn describe(&self) -> String {
        "fake target".to_string()
    }
}
