//! Typed device errors: a failed plugin call ([`CallError`]: return code plus SCSI sense) is
//! mapped by one table ([`classify`]) to a [`DeviceError`] the engine can reason about, and
//! every variant's message says what happened and what to do.

use reel_plugin_abi::host::{CallError, LoadError};
use reel_plugin_abi::types::*;

/// SCSI sense as the plugin reported it: sense key, ASC, ASCQ.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Default)]
pub struct Sense {
    /// Sense key.
    pub key: u8,
    /// Additional sense code.
    pub asc: u8,
    /// Additional sense code qualifier.
    pub ascq: u8,
}

impl Sense {
    /// The sense key's name, in snake case (`medium_error`), for metrics and logs.
    pub fn key_name(&self) -> &'static str {
        match self.key {
            sense_key::NO_SENSE => "no_sense",
            sense_key::RECOVERED_ERROR => "recovered_error",
            sense_key::NOT_READY => "not_ready",
            sense_key::MEDIUM_ERROR => "medium_error",
            sense_key::HARDWARE_ERROR => "hardware_error",
            sense_key::ILLEGAL_REQUEST => "illegal_request",
            sense_key::UNIT_ATTENTION => "unit_attention",
            sense_key::DATA_PROTECT => "data_protect",
            sense_key::BLANK_CHECK => "blank_check",
            sense_key::ABORTED_COMMAND => "aborted_command",
            0xD => "volume_overflow",
            _ => "other",
        }
    }
}

impl std::fmt::Display for Sense {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{:X}/{:02X}/{:02X}", self.key, self.asc, self.ascq)
    }
}

/// A failed device call, typed by what it means for the engine. Every variant names the call
/// and carries the plugin's full report in `detail`.
#[derive(Debug, thiserror::Error)]
pub enum DeviceError {
    /// A read or space stopped at a filemark (sense 0/00/01 or the FILEMARK flag).
    #[error("{call}: stopped at a filemark ({detail}); this is the end of a tape file, not damage")]
    Filemark {
        /// The call.
        call: &'static str,
        /// Sense reported.
        sense: Sense,
        /// Records or filemarks not processed (SSC INFORMATION), when reported.
        residue: i64,
        /// The plugin's report.
        detail: String,
    },
    /// Blank check: end of data reached (8/00/05).
    #[error(
        "{call}: end of data reached ({detail}); nothing is written past this point; if the catalogue expected data here, run `reel catalog rebuild` on this cartridge"
    )]
    EndOfData {
        /// The call.
        call: &'static str,
        /// Sense reported.
        sense: Sense,
        /// The plugin's report.
        detail: String,
    },
    /// Early warning (0/00/02 with EOM): the data was written, the cartridge is nearly full.
    #[error(
        "{call}: early warning, the cartridge is nearly full ({detail}); the data was written: close the container and continue on another cartridge"
    )]
    EarlyWarning {
        /// The call.
        call: &'static str,
        /// Sense reported.
        sense: Sense,
        /// The plugin's report.
        detail: String,
    },
    /// Volume overflow (D/xx): physical end of medium, the write did not complete.
    #[error(
        "{call}: end of medium, the write did not fit ({detail}); mark the cartridge full and write the open container again on another cartridge"
    )]
    EndOfMedium {
        /// The call.
        call: &'static str,
        /// Sense reported.
        sense: Sense,
        /// The plugin's report.
        detail: String,
    },
    /// Medium error (3/xx).
    #[error(
        "{call}: medium error ({detail}); the cartridge may be damaged: reel will use another copy; if it repeats, disable the cartridge and copy its data off"
    )]
    Medium {
        /// The call.
        call: &'static str,
        /// Sense reported.
        sense: Sense,
        /// The plugin's report.
        detail: String,
    },
    /// Hardware error (4/xx).
    #[error(
        "{call}: drive hardware error ({detail}); take the drive out of service and have it checked; the cartridge is probably fine"
    )]
    Hardware {
        /// The call.
        call: &'static str,
        /// Sense reported.
        sense: Sense,
        /// The plugin's report.
        detail: String,
    },
    /// Not ready (2/xx): no cartridge, or still loading.
    #[error(
        "{call}: drive not ready ({detail}); load a cartridge or wait for the load to finish, then retry"
    )]
    NotReady {
        /// The call.
        call: &'static str,
        /// Sense reported.
        sense: Sense,
        /// The plugin's report.
        detail: String,
    },
    /// Unit attention (6/xx): reset, power on, medium changed.
    #[error(
        "{call}: unit attention ({detail}); the drive was reset or the medium changed: re-read the position before continuing"
    )]
    UnitAttention {
        /// The call.
        call: &'static str,
        /// Sense reported.
        sense: Sense,
        /// The plugin's report.
        detail: String,
    },
    /// Illegal request (5/xx).
    #[error(
        "{call}: the drive refused the request as invalid ({detail}); check the record size against the drive's maximum; otherwise report this reel or plugin bug with the detail"
    )]
    IllegalRequest {
        /// The call.
        call: &'static str,
        /// Sense reported.
        sense: Sense,
        /// The plugin's report.
        detail: String,
    },
    /// Data protect (7/27/00 and other 7/xx but WORM): write protected.
    #[error(
        "{call}: the cartridge is write-protected ({detail}); release the write-protect tab or use another cartridge"
    )]
    DataProtect {
        /// The call.
        call: &'static str,
        /// Sense reported.
        sense: Sense,
        /// The plugin's report.
        detail: String,
    },
    /// WORM overwrite attempted (7/30/0C).
    #[error(
        "{call}: WORM cartridge refuses to overwrite written data ({detail}); WORM cartridges are only appended at end of data: this is a reel positioning bug, report it"
    )]
    Worm {
        /// The call.
        call: &'static str,
        /// Sense reported.
        sense: Sense,
        /// The plugin's report.
        detail: String,
    },
    /// Logical block protection CRC mismatch (B/10/01).
    #[error(
        "{call}: logical block protection CRC mismatch ({detail}); the record was corrupted between host and tape: retry; if it repeats, check the HBA, cabling or transport"
    )]
    LbpMismatch {
        /// The call.
        call: &'static str,
        /// Sense reported.
        sense: Sense,
        /// The plugin's report.
        detail: String,
    },
    /// Aborted command (B/xx other than an LBP mismatch).
    #[error(
        "{call}: the drive aborted the command ({detail}); retry; if it repeats, check the transport to the drive"
    )]
    Aborted {
        /// The call.
        call: &'static str,
        /// Sense reported.
        sense: Sense,
        /// The plugin's report.
        detail: String,
    },
    /// The plugin panicked inside the call; the handle is poisoned.
    #[error(
        "{call}: the plugin panicked ({detail}); this handle is poisoned: reopen the drive, and report the plugin bug"
    )]
    Panicked {
        /// The call.
        call: &'static str,
        /// The plugin's report.
        detail: String,
    },
    /// The handle was poisoned by an earlier panic.
    #[error(
        "{call}: the handle is poisoned by an earlier plugin panic ({detail}); reopen the drive"
    )]
    Poisoned {
        /// The call.
        call: &'static str,
        /// The plugin's report.
        detail: String,
    },
    /// The plugin does not implement the call.
    #[error(
        "{call}: not supported by this plugin ({detail}); use a plugin that supports it or turn off the feature that needs it"
    )]
    Unsupported {
        /// The call.
        call: &'static str,
        /// The plugin's report.
        detail: String,
    },
    /// The transport to the device failed.
    #[error(
        "{call}: transport to the device failed ({detail}); check cabling, the iSCSI session or the SCSI generic device, then retry"
    )]
    Transport {
        /// The call.
        call: &'static str,
        /// The plugin's report.
        detail: String,
    },
    /// Any other failure: an unmapped sense or return code.
    #[error("{call}: plugin error ({detail}); see the plugin's log for this code")]
    Plugin {
        /// The call.
        call: &'static str,
        /// `REEL_E_*` return code.
        code: i32,
        /// Sense reported (0/00/00 if none).
        sense: Sense,
        /// The plugin's report.
        detail: String,
    },
    /// The plugin could not be loaded (the error names the file).
    #[error(transparent)]
    Load(#[from] LoadError),
    /// The actor thread owning the handle is gone, or a closure run on it panicked.
    #[error("{call}: the device thread is not available ({detail}); reopen the library or drive")]
    ActorGone {
        /// The call.
        call: &'static str,
        /// What happened.
        detail: String,
    },
}

/// What a call's code and sense mean; one row of the mapping table.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Kind {
    /// [`DeviceError::Filemark`].
    Filemark,
    /// [`DeviceError::EndOfData`].
    EndOfData,
    /// [`DeviceError::EarlyWarning`].
    EarlyWarning,
    /// [`DeviceError::EndOfMedium`].
    EndOfMedium,
    /// [`DeviceError::Medium`].
    Medium,
    /// [`DeviceError::Hardware`].
    Hardware,
    /// [`DeviceError::NotReady`].
    NotReady,
    /// [`DeviceError::UnitAttention`].
    UnitAttention,
    /// [`DeviceError::IllegalRequest`].
    IllegalRequest,
    /// [`DeviceError::DataProtect`].
    DataProtect,
    /// [`DeviceError::Worm`].
    Worm,
    /// [`DeviceError::LbpMismatch`].
    LbpMismatch,
    /// [`DeviceError::Aborted`].
    Aborted,
    /// [`DeviceError::Panicked`].
    Panicked,
    /// [`DeviceError::Poisoned`].
    Poisoned,
    /// [`DeviceError::Unsupported`].
    Unsupported,
    /// [`DeviceError::Transport`].
    Transport,
    /// [`DeviceError::Plugin`].
    Other,
}

/// The mapping table: return code, sense and flags to a [`Kind`].
///
/// | code / sense                          | kind          |
/// |---------------------------------------|---------------|
/// | `REEL_E_PANICKED`                     | Panicked      |
/// | `REEL_E_POISONED`                     | Poisoned      |
/// | `REEL_E_UNSUPPORTED`                  | Unsupported   |
/// | `REEL_E_TRANSPORT`                    | Transport     |
/// | 0/00/01 or FILEMARK flag (key 0)      | Filemark      |
/// | 0/00/05, 8/xx                         | EndOfData     |
/// | 0/00/02 or EOM flag (key 0)           | EarlyWarning  |
/// | D/xx                                  | EndOfMedium   |
/// | 3/xx                                  | Medium        |
/// | 4/xx                                  | Hardware      |
/// | 2/xx                                  | NotReady      |
/// | 6/xx                                  | UnitAttention |
/// | 5/xx                                  | IllegalRequest|
/// | 7/30/0C                               | Worm          |
/// | 7/other                               | DataProtect   |
/// | B/10/01                               | LbpMismatch   |
/// | B/other                               | Aborted       |
/// | anything else                         | Other         |
pub fn classify(code: i32, key: u8, asc: u8, ascq: u8, flags: u32) -> Kind {
    match code {
        REEL_E_PANICKED => return Kind::Panicked,
        REEL_E_POISONED => return Kind::Poisoned,
        REEL_E_UNSUPPORTED => return Kind::Unsupported,
        REEL_E_TRANSPORT => return Kind::Transport,
        REEL_E_CHECK_CONDITION => {}
        _ => return Kind::Other,
    }
    match (key, (asc, ascq)) {
        (sense_key::NO_SENSE, a) if a == asc::FILEMARK || flags & REEL_FLAG_FILEMARK != 0 => {
            Kind::Filemark
        }
        (sense_key::NO_SENSE, a) if a == asc::END_OF_DATA => Kind::EndOfData,
        (sense_key::NO_SENSE, a) if a == asc::END_OF_MEDIUM || flags & REEL_FLAG_EOM != 0 => {
            Kind::EarlyWarning
        }
        (sense_key::BLANK_CHECK, _) => Kind::EndOfData,
        (sense_key::VOLUME_OVERFLOW, _) => Kind::EndOfMedium,
        (sense_key::MEDIUM_ERROR, _) => Kind::Medium,
        (sense_key::HARDWARE_ERROR, _) => Kind::Hardware,
        (sense_key::NOT_READY, _) => Kind::NotReady,
        (sense_key::UNIT_ATTENTION, _) => Kind::UnitAttention,
        (sense_key::ILLEGAL_REQUEST, _) => Kind::IllegalRequest,
        (sense_key::DATA_PROTECT, a) if a == asc::WORM_OVERWRITE_ATTEMPTED => Kind::Worm,
        (sense_key::DATA_PROTECT, _) => Kind::DataProtect,
        (sense_key::ABORTED_COMMAND, a) if a == asc::LBP_GUARD_CHECK_FAILED => Kind::LbpMismatch,
        (sense_key::ABORTED_COMMAND, _) => Kind::Aborted,
        _ => Kind::Other,
    }
}

impl DeviceError {
    /// Map a failed call through [`classify`].
    pub fn from_call(e: CallError) -> Self {
        let call = e.call;
        let st = &e.status;
        let sense = Sense {
            key: st.sense_key,
            asc: st.asc,
            ascq: st.ascq,
        };
        let kind = classify(e.code, sense.key, sense.asc, sense.ascq, st.flags);
        // Every check condition a drive or changer reported, by sense key (filemarks and end
        // of data included: they are how tape reads end), for `reel_device_sense_total`; other
        // failures (transport, unsupported, a plugin panic) by their code.
        if e.code == REEL_E_CHECK_CONDITION {
            metrics::counter!("reel_device_sense_total", "sense_key" => sense.key_name(), "call" => call)
                .increment(1);
        } else {
            metrics::counter!("reel_device_errors_total", "code" => e.code.to_string(), "call" => call)
                .increment(1);
        }
        let residue = st.residue;
        let detail = e.to_string();
        match kind {
            Kind::Filemark => DeviceError::Filemark {
                call,
                sense,
                residue,
                detail,
            },
            Kind::EndOfData => DeviceError::EndOfData {
                call,
                sense,
                detail,
            },
            Kind::EarlyWarning => DeviceError::EarlyWarning {
                call,
                sense,
                detail,
            },
            Kind::EndOfMedium => DeviceError::EndOfMedium {
                call,
                sense,
                detail,
            },
            Kind::Medium => DeviceError::Medium {
                call,
                sense,
                detail,
            },
            Kind::Hardware => DeviceError::Hardware {
                call,
                sense,
                detail,
            },
            Kind::NotReady => DeviceError::NotReady {
                call,
                sense,
                detail,
            },
            Kind::UnitAttention => DeviceError::UnitAttention {
                call,
                sense,
                detail,
            },
            Kind::IllegalRequest => DeviceError::IllegalRequest {
                call,
                sense,
                detail,
            },
            Kind::DataProtect => DeviceError::DataProtect {
                call,
                sense,
                detail,
            },
            Kind::Worm => DeviceError::Worm {
                call,
                sense,
                detail,
            },
            Kind::LbpMismatch => DeviceError::LbpMismatch {
                call,
                sense,
                detail,
            },
            Kind::Aborted => DeviceError::Aborted {
                call,
                sense,
                detail,
            },
            Kind::Panicked => DeviceError::Panicked { call, detail },
            Kind::Poisoned => DeviceError::Poisoned { call, detail },
            Kind::Unsupported => DeviceError::Unsupported { call, detail },
            Kind::Transport => DeviceError::Transport { call, detail },
            Kind::Other => DeviceError::Plugin {
                call,
                code: e.code,
                sense,
                detail,
            },
        }
    }

    /// Whether the fault is the drive's (or its path's), not the medium's: the same cartridge
    /// may read in another drive or after a reset, so what was being read is not judged by it.
    pub fn is_drive_fault(&self) -> bool {
        matches!(
            self,
            DeviceError::Hardware { .. }
                | DeviceError::NotReady { .. }
                | DeviceError::UnitAttention { .. }
                | DeviceError::Aborted { .. }
                | DeviceError::Panicked { .. }
                | DeviceError::Poisoned { .. }
                | DeviceError::Transport { .. }
                | DeviceError::ActorGone { .. }
        )
    }

    /// Whether the drive itself has failed (a hardware error, a dead path or plugin): no other
    /// cartridge would fare better in it, so a search for one stops here, and the drive needs
    /// service. Narrower than [`DeviceError::is_drive_fault`]: not ready, a unit attention and
    /// an abort pass.
    pub fn is_drive_failure(&self) -> bool {
        match self {
            // ASC 53h (media load or eject failed) is as likely the cartridge's as the drive's:
            // it excludes that cartridge, not the drive. A changer's errors are the robot's.
            DeviceError::Hardware { call, sense, .. } => {
                call.starts_with("drive_") && sense.asc != 0x53
            }
            DeviceError::Panicked { .. }
            | DeviceError::Poisoned { .. }
            | DeviceError::Transport { .. }
            | DeviceError::ActorGone { .. } => true,
            _ => false,
        }
    }

    /// The sense key, ASC and ASCQ, for errors that came from a check condition.
    pub fn sense(&self) -> Option<(u8, u8, u8)> {
        use DeviceError::*;
        let s = match self {
            Filemark { sense, .. }
            | EndOfData { sense, .. }
            | EarlyWarning { sense, .. }
            | EndOfMedium { sense, .. }
            | Medium { sense, .. }
            | Hardware { sense, .. }
            | NotReady { sense, .. }
            | UnitAttention { sense, .. }
            | IllegalRequest { sense, .. }
            | DataProtect { sense, .. }
            | Worm { sense, .. }
            | LbpMismatch { sense, .. }
            | Aborted { sense, .. } => *sense,
            Plugin { code, sense, .. } if *code == REEL_E_CHECK_CONDITION => *sense,
            _ => return None,
        };
        Some((s.key, s.asc, s.ascq))
    }

    /// The call that failed.
    pub fn call(&self) -> &'static str {
        use DeviceError::*;
        match self {
            Filemark { call, .. }
            | EndOfData { call, .. }
            | EarlyWarning { call, .. }
            | EndOfMedium { call, .. }
            | Medium { call, .. }
            | Hardware { call, .. }
            | NotReady { call, .. }
            | UnitAttention { call, .. }
            | IllegalRequest { call, .. }
            | DataProtect { call, .. }
            | Worm { call, .. }
            | LbpMismatch { call, .. }
            | Aborted { call, .. }
            | Panicked { call, .. }
            | Poisoned { call, .. }
            | Unsupported { call, .. }
            | Transport { call, .. }
            | Plugin { call, .. }
            | ActorGone { call, .. } => call,
            Load(_) => "load_plugin",
        }
    }
}

impl From<CallError> for DeviceError {
    fn from(e: CallError) -> Self {
        DeviceError::from_call(e)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const CC: i32 = REEL_E_CHECK_CONDITION;

    /// (code, key, asc, ascq, flags, expected kind)
    const TABLE: &[(i32, u8, u8, u8, u32, Kind)] = &[
        (CC, 0x0, 0x00, 0x01, 0, Kind::Filemark),
        (CC, 0x0, 0x00, 0x00, REEL_FLAG_FILEMARK, Kind::Filemark),
        (CC, 0x8, 0x00, 0x05, 0, Kind::EndOfData),
        (CC, 0x0, 0x00, 0x05, 0, Kind::EndOfData),
        (CC, 0x8, 0x14, 0x03, 0, Kind::EndOfData),
        (CC, 0x0, 0x00, 0x02, REEL_FLAG_EOM, Kind::EarlyWarning),
        (CC, 0x0, 0x00, 0x00, REEL_FLAG_EOM, Kind::EarlyWarning),
        (CC, 0xD, 0x00, 0x02, REEL_FLAG_EOM, Kind::EndOfMedium),
        (CC, 0xD, 0x3B, 0x0F, 0, Kind::EndOfMedium),
        (CC, 0x3, 0x11, 0x00, 0, Kind::Medium),
        (CC, 0x3, 0x0C, 0x00, REEL_FLAG_FILEMARK, Kind::Medium),
        (CC, 0x4, 0x44, 0x00, 0, Kind::Hardware),
        (CC, 0x2, 0x3A, 0x00, 0, Kind::NotReady),
        (CC, 0x2, 0x04, 0x01, 0, Kind::NotReady),
        (CC, 0x6, 0x28, 0x00, 0, Kind::UnitAttention),
        (CC, 0x6, 0x29, 0x00, 0, Kind::UnitAttention),
        (CC, 0x5, 0x24, 0x00, 0, Kind::IllegalRequest),
        (CC, 0x7, 0x27, 0x00, 0, Kind::DataProtect),
        (CC, 0x7, 0x30, 0x0C, 0, Kind::Worm),
        (CC, 0xB, 0x10, 0x01, 0, Kind::LbpMismatch),
        (CC, 0xB, 0x47, 0x00, 0, Kind::Aborted),
        (CC, 0x1, 0x17, 0x00, 0, Kind::Other),
        (CC, 0x0, 0x00, 0x00, 0, Kind::Other),
        (REEL_E_PANICKED, 0, 0, 0, 0, Kind::Panicked),
        (REEL_E_POISONED, 0, 0, 0, 0, Kind::Poisoned),
        (REEL_E_UNSUPPORTED, 0, 0, 0, 0, Kind::Unsupported),
        (REEL_E_TRANSPORT, 0, 0, 0, 0, Kind::Transport),
        (REEL_E_INTERNAL, 0, 0, 0, 0, Kind::Other),
        (REEL_E_INVALID_ARG, 0x5, 0x24, 0x00, 0, Kind::Other),
        (-99, 0, 0, 0, 0, Kind::Other),
    ];

    fn call_error(code: i32, key: u8, asc: u8, ascq: u8, flags: u32) -> CallError {
        let mut status = ReelStatus::new();
        status.sense_key = key;
        status.asc = asc;
        status.ascq = ascq;
        status.flags = flags | REEL_FLAG_SENSE_VALID;
        status.residue = 3;
        status.set_message("from the test");
        CallError {
            code,
            status,
            call: "drive_test",
        }
    }

    #[test]
    fn the_sense_table_maps_every_row() {
        for &(code, key, asc, ascq, flags, kind) in TABLE {
            assert_eq!(
                classify(code, key, asc, ascq, flags),
                kind,
                "code {code} sense {key:X}/{asc:02X}/{ascq:02X} flags {flags:#x}"
            );
        }
    }

    #[test]
    fn from_call_builds_the_matching_variant_with_its_sense_and_advice() {
        for &(code, key, asc, ascq, flags, kind) in TABLE {
            let e = DeviceError::from_call(call_error(code, key, asc, ascq, flags));
            let ok = matches!(
                (&e, kind),
                (DeviceError::Filemark { residue: 3, .. }, Kind::Filemark)
                    | (DeviceError::EndOfData { .. }, Kind::EndOfData)
                    | (DeviceError::EarlyWarning { .. }, Kind::EarlyWarning)
                    | (DeviceError::EndOfMedium { .. }, Kind::EndOfMedium)
                    | (DeviceError::Medium { .. }, Kind::Medium)
                    | (DeviceError::Hardware { .. }, Kind::Hardware)
                    | (DeviceError::NotReady { .. }, Kind::NotReady)
                    | (DeviceError::UnitAttention { .. }, Kind::UnitAttention)
                    | (DeviceError::IllegalRequest { .. }, Kind::IllegalRequest)
                    | (DeviceError::DataProtect { .. }, Kind::DataProtect)
                    | (DeviceError::Worm { .. }, Kind::Worm)
                    | (DeviceError::LbpMismatch { .. }, Kind::LbpMismatch)
                    | (DeviceError::Aborted { .. }, Kind::Aborted)
                    | (DeviceError::Panicked { .. }, Kind::Panicked)
                    | (DeviceError::Poisoned { .. }, Kind::Poisoned)
                    | (DeviceError::Unsupported { .. }, Kind::Unsupported)
                    | (DeviceError::Transport { .. }, Kind::Transport)
                    | (DeviceError::Plugin { .. }, Kind::Other)
            );
            assert!(ok, "{kind:?} became {e:?}");
            assert_eq!(e.call(), "drive_test");
            let text = e.to_string();
            assert!(text.contains("from the test"), "{text}");
            assert!(text.starts_with("drive_test"), "{text}");
            if code == CC {
                assert_eq!(e.sense(), Some((key, asc, ascq)));
            } else {
                assert_eq!(e.sense(), None);
            }
        }
    }

    #[test]
    fn medium_error_tells_the_operator_what_reel_does() {
        let e = DeviceError::from_call(call_error(CC, 3, 0x11, 0, 0));
        assert!(
            e.to_string()
                .contains("the cartridge may be damaged: reel will use another copy")
        );
    }
}
