//! Sense conditions the simulator answers with, built on the ABI's `Fault`.

use reel_plugin_abi::sdk::Fault;
use reel_plugin_abi::{REEL_FLAG_EOM, REEL_FLAG_FILEMARK, asc, sense_key as sk};

/// 04/02 logical unit not ready, initializing command required (a cartridge is present but
/// not loaded).
pub const NOT_READY_LOAD_REQUIRED: (u8, u8) = (0x04, 0x02);
/// 2C/00 command sequence error (the logical position is unknown).
pub const COMMAND_SEQUENCE_ERROR: (u8, u8) = (0x2C, 0x00);

/// NOT READY, medium not present.
pub fn no_medium() -> Fault {
    Fault::check(
        sk::NOT_READY,
        asc::MEDIUM_NOT_PRESENT,
        "no cartridge in the drive; move one in with the changer first",
    )
}

/// NOT READY, LOAD required.
pub fn not_loaded() -> Fault {
    Fault::check(
        sk::NOT_READY,
        NOT_READY_LOAD_REQUIRED,
        "a cartridge is in the drive but not loaded; LOAD it first",
    )
}

/// ILLEGAL REQUEST, command sequence error: position unknown.
pub fn position_unknown() -> Fault {
    Fault::check(
        sk::ILLEGAL_REQUEST,
        COMMAND_SEQUENCE_ERROR,
        "the logical position is unknown (reset or power loss); REWIND or LOCATE first",
    )
}

/// HARDWARE ERROR, internal target failure.
pub fn hardware(msg: &str) -> Fault {
    Fault::check(sk::HARDWARE_ERROR, asc::INTERNAL_TARGET_FAILURE, msg)
}

/// BLANK CHECK, end of data.
pub fn blank_check() -> Fault {
    Fault::check(
        sk::BLANK_CHECK,
        asc::END_OF_DATA,
        "end of data: nothing is written past this position",
    )
}

/// A filemark was read or spaced over.
pub fn filemark() -> Fault {
    Fault::check(sk::NO_SENSE, asc::FILEMARK, "filemark detected").with_flags(REEL_FLAG_FILEMARK)
}

/// Beginning of medium reached while spacing backward.
pub fn bom() -> Fault {
    Fault::check(
        sk::NO_SENSE,
        asc::BEGINNING_OF_MEDIUM,
        "beginning of medium reached",
    )
    .with_flags(REEL_FLAG_EOM)
}

/// DATA PROTECT, WORM overwrite attempted.
pub fn worm_overwrite(barcode: &str) -> Fault {
    Fault::check(
        sk::DATA_PROTECT,
        asc::WORM_OVERWRITE_ATTEMPTED,
        format!("{barcode} is WORM: it can only be appended to at end of data"),
    )
}

/// ILLEGAL REQUEST, invalid field in CDB.
pub fn invalid_field(msg: impl Into<String>) -> Fault {
    Fault::check(sk::ILLEGAL_REQUEST, asc::INVALID_FIELD_IN_CDB, msg)
}

/// An I/O error on the simulator's own files.
pub fn io(what: &str, e: std::io::Error) -> Fault {
    Fault::internal(format!("simulator storage: {what}: {e}"))
}
