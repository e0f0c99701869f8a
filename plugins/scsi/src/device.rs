//! One SCSI logical unit behind a transport, with the command policy every command shares:
//! per-class timeouts, UNIT ATTENTION retried, NOT READY / becoming ready waited out, BUSY
//! retried, sense fetched with REQUEST SENSE when the transport did not deliver it.

use std::time::{Duration, Instant};

use crate::config::Config;
use crate::error::ScsiError;
use crate::timeouts::{Class, Timeouts};
use crate::transport::{self, Transport};
use reel_scsi_protocol::cdb;
use reel_scsi_protocol::command::{
    DataDir, STATUS_BUSY, STATUS_CHECK_CONDITION, STATUS_GOOD, STATUS_RESERVATION_CONFLICT,
};
use reel_scsi_protocol::sense::Sense;

use crate::policy::Policy;

/// The outcome of a command that completed at the SCSI level.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Outcome {
    /// Sense of a CHECK CONDITION; `None` for GOOD.
    pub sense: Option<Sense>,
    /// Data-in bytes the transport reports as transferred.
    pub transferred: usize,
}

/// A logical unit and its policy.
pub struct ScsiDevice {
    transport: Box<dyn Transport>,
    /// Per-class timeouts.
    pub timeouts: Timeouts,
    /// Retry policy.
    pub policy: Policy,
    busy: Duration,
}

impl ScsiDevice {
    /// Open the logical unit at `address` (an sg node or an iSCSI URL) with the configured
    /// initiator name, per-class timeouts (the generation's, with `timeout.CLASS` overrides)
    /// and retry policy: the one way the library, the resolver and the drives open a device.
    pub fn open(cfg: &Config, address: &str) -> Result<ScsiDevice, ScsiError> {
        let t = transport::open(address, &cfg.initiator)?;
        let mut timeouts = Timeouts::for_generation(cfg.generation);
        for (class, secs) in &cfg.timeouts {
            timeouts.set(*class, *secs);
        }
        Ok(ScsiDevice::new(t, timeouts, cfg.policy.clone()))
    }

    /// Wrap a transport.
    pub fn new(transport: Box<dyn Transport>, timeouts: Timeouts, policy: Policy) -> ScsiDevice {
        ScsiDevice {
            transport,
            timeouts,
            policy,
            busy: Duration::ZERO,
        }
    }

    /// The device address.
    pub fn name(&self) -> String {
        self.transport.describe()
    }

    /// Wall time spent in commands since the last call (measured, for `elapsed_ns`).
    pub fn take_busy(&mut self) -> Duration {
        std::mem::take(&mut self.busy)
    }

    /// Run a command to SCSI completion. A CHECK CONDITION comes back as `Ok` with its sense
    /// (after unit attentions and becoming-ready conditions have been retried): for tape,
    /// filemarks, ILI and early warning are outcomes, not failures.
    pub fn exec(
        &mut self,
        command: &'static str,
        cdb: &[u8],
        class: Class,
        mut data: DataDir<'_>,
    ) -> Result<Outcome, ScsiError> {
        let timeout = self.timeouts.get(class);
        let mut unit_attentions = 0;
        let mut busy = 0;
        let mut waited = Duration::ZERO;
        loop {
            let t0 = Instant::now();
            let done = self.transport.execute(cdb, data.reborrow(), timeout);
            self.busy += t0.elapsed();
            let c = done?;
            match c.status {
                STATUS_GOOD => {
                    return Ok(Outcome {
                        sense: None,
                        transferred: c.transferred,
                    });
                }
                STATUS_CHECK_CONDITION => {
                    let sense = match Sense::parse(&c.sense) {
                        Some(s) => s,
                        None => self.request_sense(command)?,
                    };
                    if sense.key == 0x06 && unit_attentions < self.policy.unit_attention_retries {
                        unit_attentions += 1;
                        tracing::info!(
                            device = %self.name(),
                            command,
                            "unit attention {}, retrying",
                            sense.describe()
                        );
                        continue;
                    }
                    let becoming_ready =
                        sense.key == 0x02 && sense.asc == 0x04 && matches!(sense.ascq, 0x01 | 0x07);
                    if becoming_ready && waited < self.policy.not_ready_wait {
                        tracing::debug!(device = %self.name(), command, "becoming ready; waiting");
                        std::thread::sleep(self.policy.poll);
                        waited += self.policy.poll.max(Duration::from_millis(1));
                        continue;
                    }
                    return Ok(Outcome {
                        sense: Some(sense),
                        transferred: c.transferred,
                    });
                }
                STATUS_BUSY if busy < self.policy.busy_retries => {
                    busy += 1;
                    std::thread::sleep(self.policy.poll);
                }
                status => {
                    return Err(ScsiError::Status {
                        device: self.name(),
                        command,
                        status,
                        meaning: status_meaning(status),
                    });
                }
            }
        }
    }

    /// Fetch sense explicitly (for transports that did not deliver autosense).
    fn request_sense(&mut self, command: &'static str) -> Result<Sense, ScsiError> {
        let mut buf = [0u8; 252];
        let timeout = self.timeouts.get(Class::Status);
        let c = self.transport.execute(
            &cdb::unit::request_sense(252),
            DataDir::In(&mut buf),
            timeout,
        )?;
        let n = c.transferred.min(buf.len());
        Sense::parse(&buf[..n]).ok_or_else(|| ScsiError::NoSense {
            device: self.name(),
            command,
        })
    }

    /// Run a command that must succeed: any CHECK CONDITION other than RECOVERED ERROR is an
    /// error. Returns the bytes transferred.
    pub fn run(
        &mut self,
        command: &'static str,
        cdb: &[u8],
        class: Class,
        data: DataDir<'_>,
    ) -> Result<usize, ScsiError> {
        let o = self.exec(command, cdb, class, data)?;
        match o.sense {
            None => Ok(o.transferred),
            Some(s) if s.key == 0x01 => {
                tracing::warn!(device = %self.name(), command, "recovered error: {}", s.describe());
                Ok(o.transferred)
            }
            Some(sense) => Err(ScsiError::Check {
                device: self.name(),
                command,
                sense,
            }),
        }
    }

    /// Run a data-in command that must succeed and return the bytes received.
    pub fn data_in(
        &mut self,
        command: &'static str,
        cdb: &[u8],
        class: Class,
        alloc: usize,
    ) -> Result<Vec<u8>, ScsiError> {
        let mut buf = vec![0u8; alloc];
        let n = self.run(command, cdb, class, DataDir::In(&mut buf))?;
        buf.truncate(n.min(alloc));
        Ok(buf)
    }

    /// A malformed-response error for this device.
    pub fn malformed(&self, command: &'static str, source: cdb::ParseError) -> ScsiError {
        ScsiError::Malformed {
            device: self.name(),
            command,
            source,
        }
    }

    /// A CHECK CONDITION error for this device.
    pub fn check(&self, command: &'static str, sense: Sense) -> ScsiError {
        ScsiError::Check {
            device: self.name(),
            command,
            sense,
        }
    }
}

fn status_meaning(status: u8) -> &'static str {
    match status {
        STATUS_BUSY => "BUSY: the device stayed busy through every retry",
        STATUS_RESERVATION_CONFLICT => {
            "RESERVATION CONFLICT: another host holds a reservation on this device"
        }
        0x28 => "TASK SET FULL",
        0x40 => "TASK ABORTED",
        _ => "unexpected status",
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::transport::fake::{Reply, Script};

    pub(crate) fn test_policy() -> Policy {
        Policy {
            unit_attention_retries: 3,
            not_ready_wait: Duration::from_millis(5),
            poll: Duration::from_millis(1),
            busy_retries: 2,
        }
    }

    fn device(s: &Script) -> ScsiDevice {
        ScsiDevice::new(
            Box::new(s.transport()),
            Timeouts::for_generation(Some(9)),
            test_policy(),
        )
    }

    #[test]
    fn unit_attention_is_retried() {
        let s = Script::new();
        s.expect(&[0x00], Reply::sense(6, (0x29, 0x00)))
            .expect(&[0x00], Reply::sense(6, (0x28, 0x00)))
            .expect(&[0x00], Reply::good());
        let mut d = device(&s);
        d.run("TEST UNIT READY", &[0; 6], Class::Status, DataDir::None)
            .unwrap();
        assert_eq!(s.opcodes(), vec![0, 0, 0]);
    }

    #[test]
    fn persistent_unit_attention_is_reported() {
        let s = Script::new();
        s.always(&[0x00], Reply::sense(6, (0x29, 0x00)));
        let mut d = device(&s);
        let e = d
            .run("TEST UNIT READY", &[0; 6], Class::Status, DataDir::None)
            .unwrap_err();
        assert_eq!(e.sense().map(|s| s.key), Some(6));
        assert_eq!(s.opcodes().len(), 4, "first try plus 3 retries");
    }

    #[test]
    fn becoming_ready_is_waited_out() {
        let s = Script::new();
        s.expect(&[0x00], Reply::sense(2, (0x04, 0x01)))
            .expect(&[0x00], Reply::sense(2, (0x04, 0x01)))
            .expect(&[0x00], Reply::good());
        let mut d = device(&s);
        d.run("TEST UNIT READY", &[0; 6], Class::Status, DataDir::None)
            .unwrap();
        assert_eq!(s.pending(), 0);
    }

    #[test]
    fn not_ready_gives_up_after_the_wait_and_no_medium_is_immediate() {
        let s = Script::new();
        s.always(&[0x00], Reply::sense(2, (0x04, 0x01)));
        let mut d = device(&s);
        let e = d
            .run("TEST UNIT READY", &[0; 6], Class::Status, DataDir::None)
            .unwrap_err();
        assert_eq!(e.sense().map(|s| (s.key, s.asc, s.ascq)), Some((2, 4, 1)));
        // 5 ms of waiting in 1 ms polls: the first try and 5 retries
        assert_eq!(s.opcodes().len(), 6);

        let s = Script::new();
        s.always(&[0x00], Reply::sense(2, (0x3A, 0x00)));
        let mut d = device(&s);
        let e = d
            .run("TEST UNIT READY", &[0; 6], Class::Status, DataDir::None)
            .unwrap_err();
        assert_eq!(e.sense().map(|s| s.asc), Some(0x3A));
        assert_eq!(s.opcodes().len(), 1, "medium not present is not waited for");
    }

    #[test]
    fn missing_autosense_is_fetched_with_request_sense() {
        let s = Script::new();
        let mut no_sense = Reply::sense(3, (0x11, 0));
        no_sense.sense = None;
        s.expect(&[0x08], no_sense);
        s.expect(
            &[0x03],
            Reply::data(
                Sense {
                    key: 3,
                    asc: 0x11,
                    ..Sense::default()
                }
                .to_fixed(),
            ),
        );
        let mut d = device(&s);
        let mut buf = [0u8; 16];
        let o = d
            .exec(
                "READ(6)",
                &[8, 0, 0, 0, 16, 0],
                Class::Read,
                DataDir::In(&mut buf),
            )
            .unwrap();
        assert_eq!(o.sense.map(|s| (s.key, s.asc)), Some((3, 0x11)));
    }

    #[test]
    fn busy_is_retried_then_reported_and_recovered_error_passes() {
        let s = Script::new();
        let busy = Reply {
            status: STATUS_BUSY,
            ..Reply::default()
        };
        s.always(&[0x00], busy);
        let mut d = device(&s);
        let e = d
            .run("TEST UNIT READY", &[0; 6], Class::Status, DataDir::None)
            .unwrap_err();
        assert!(e.to_string().contains("BUSY"), "{e}");
        assert_eq!(s.opcodes().len(), 3);

        let s = Script::new();
        s.expect(&[0x01], Reply::sense(1, (0x00, 0x00)));
        let mut d = device(&s);
        d.run("REWIND", &[1, 0, 0, 0, 0, 0], Class::Rewind, DataDir::None)
            .unwrap();
    }

    #[test]
    fn data_in_truncates_to_transferred() {
        let s = Script::new();
        s.expect(&[0x12], Reply::data(vec![1u8; 10]));
        let mut d = device(&s);
        let v = d
            .data_in("INQUIRY", &cdb::inquiry::inquiry(96), Class::Status, 96)
            .unwrap();
        assert_eq!(v.len(), 10);
        assert_eq!(s.log()[0].alloc, 96);
    }
}
