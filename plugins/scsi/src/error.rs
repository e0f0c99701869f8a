//! The plugin's error type and its mapping to the ABI's [`Fault`].

use reel_plugin_abi::sdk::Fault;
use reel_plugin_abi::{REEL_E_INTERNAL, REEL_E_TRANSPORT};

use crate::transport::TransportError;
use reel_scsi_protocol::cdb::ParseError;
use reel_scsi_protocol::sense::Sense;

/// Anything a SCSI command can end in besides success.
#[derive(Debug, thiserror::Error)]
pub enum ScsiError {
    /// The transport failed; the command's outcome is unknown.
    #[error(transparent)]
    Transport(#[from] TransportError),
    /// The device answered CHECK CONDITION with this sense.
    #[error("{device}: {command}: {}{}", sense.describe(), sense.advice())]
    Check {
        /// The device.
        device: String,
        /// The command name.
        command: &'static str,
        /// The sense.
        sense: Sense,
    },
    /// CHECK CONDITION without usable sense data.
    #[error("{device}: {command}: CHECK CONDITION without sense data; the transport lost it")]
    NoSense {
        /// The device.
        device: String,
        /// The command name.
        command: &'static str,
    },
    /// A status other than GOOD or CHECK CONDITION after retries.
    #[error("{device}: {command}: SCSI status {status:#04x} ({meaning})")]
    Status {
        /// The device.
        device: String,
        /// The command name.
        command: &'static str,
        /// The status byte.
        status: u8,
        /// What it means and what to do.
        meaning: &'static str,
    },
    /// The device's response does not parse.
    #[error("{device}: {command}: {source}")]
    Malformed {
        /// The device.
        device: String,
        /// The command name.
        command: &'static str,
        /// The parse error.
        #[source]
        source: ParseError,
    },
}

impl ScsiError {
    /// The sense of a CHECK CONDITION.
    pub fn sense(&self) -> Option<&Sense> {
        match self {
            ScsiError::Check { sense, .. } => Some(sense),
            _ => None,
        }
    }

    /// ILLEGAL REQUEST with invalid opcode (20/00) or invalid field in CDB (24/00): the device
    /// does not implement the command or this form of it.
    pub fn is_unsupported_command(&self) -> bool {
        self.sense().is_some_and(|s| {
            s.key == 0x05 && matches!((s.asc, s.ascq), (0x20, 0x00) | (0x24, 0x00))
        })
    }

    /// Map to the ABI fault: sense (with its flags and residue) for check conditions.
    pub fn to_fault(&self) -> Fault {
        let msg = self.to_string();
        match self {
            ScsiError::Check { sense, .. } => sense.fault(msg),
            ScsiError::Transport(_) | ScsiError::NoSense { .. } | ScsiError::Status { .. } => {
                Fault::code(REEL_E_TRANSPORT, msg)
            }
            ScsiError::Malformed { .. } => Fault::code(REEL_E_INTERNAL, msg),
        }
    }
}

impl From<ScsiError> for Fault {
    fn from(e: ScsiError) -> Fault {
        e.to_fault()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use reel_plugin_abi::{
        REEL_E_CHECK_CONDITION, REEL_FLAG_EOM, REEL_FLAG_RESIDUE_VALID, REEL_FLAG_SENSE_VALID,
    };

    #[test]
    fn check_condition_keeps_flags_and_residue() {
        let e = ScsiError::Check {
            device: "d".into(),
            command: "WRITE(6)",
            sense: Sense {
                key: 0x0D,
                asc: 0,
                ascq: 2,
                eom: true,
                information: Some(262144),
                ..Sense::default()
            },
        };
        let f = e.to_fault();
        assert_eq!(f.code, REEL_E_CHECK_CONDITION);
        assert_eq!((f.sense_key, f.asc, f.ascq), (0x0D, 0, 2));
        assert_eq!(
            f.flags,
            REEL_FLAG_SENSE_VALID | REEL_FLAG_EOM | REEL_FLAG_RESIDUE_VALID
        );
        assert_eq!(f.residue, 262144);
        assert!(f.message.contains("WRITE(6)"));
    }

    #[test]
    fn unsupported_commands_are_recognised() {
        let e = |asc| ScsiError::Check {
            device: "d".into(),
            command: "LOCATE(16)",
            sense: Sense {
                key: 5,
                asc,
                ..Sense::default()
            },
        };
        assert!(e(0x20).is_unsupported_command());
        assert!(e(0x24).is_unsupported_command());
        assert!(!e(0x3B).is_unsupported_command());
        let t = ScsiError::Transport(TransportError::Timeout {
            device: "d".into(),
            opcode: 1,
            secs: 60,
        });
        assert_eq!(t.to_fault().code, REEL_E_TRANSPORT);
    }
}
