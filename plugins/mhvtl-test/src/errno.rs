//! What the Linux `st` driver returns instead of sense: an errno. Mapped onto ABI sense for the
//! operations that have no better source (the sense itself, when needed, comes from `sg`).

use reel_plugin_abi::sdk::Fault;
use reel_plugin_abi::{
    REEL_E_INTERNAL, REEL_E_INVALID_ARG, REEL_E_TRANSPORT, REEL_FLAG_EOM, REEL_FLAG_ILI, asc,
    sense_key,
};

/// Map an errno from `st`/`sg` for an operation that has no better source of sense.
///
/// `what` names the operation and the device node, for the message.
pub fn errno_fault(errno: nix::errno::Errno, what: &str) -> Fault {
    use nix::errno::Errno as E;
    match errno {
        E::ENOMEDIUM => Fault::check(
            sense_key::NOT_READY,
            asc::MEDIUM_NOT_PRESENT,
            format!("{what}: no medium (ENOMEDIUM); move a cartridge into the drive and load it"),
        ),
        E::EACCES | E::EROFS => Fault::check(
            sense_key::DATA_PROTECT,
            asc::WRITE_PROTECTED,
            format!("{what}: write protected ({errno}); use a writable cartridge"),
        ),
        E::ENOSPC => Fault::check(
            sense_key::VOLUME_OVERFLOW,
            asc::END_OF_MEDIUM,
            format!(
                "{what}: end of medium (ENOSPC); nothing was written, continue on another cartridge"
            ),
        )
        .with_flags(REEL_FLAG_EOM),
        E::EIO => Fault::check(
            sense_key::MEDIUM_ERROR,
            asc::NONE,
            format!("{what}: I/O error (EIO) from st; the kernel log (dmesg) has the sense"),
        ),
        E::ENOMEM => Fault::check(
            sense_key::NO_SENSE,
            asc::NONE,
            format!(
                "{what}: the record is longer than the buffer (ENOMEM from st, which skipped it); \
                 read with a buffer of the drive's maximum record size"
            ),
        )
        .with_flags(REEL_FLAG_ILI),
        E::EINVAL | E::EOVERFLOW => Fault::code(
            REEL_E_INVALID_ARG,
            format!(
                "{what}: st refused the request ({errno}); check the record size against the drive's block limits"
            ),
        ),
        E::EBUSY => Fault::code(
            REEL_E_TRANSPORT,
            format!("{what}: device busy (EBUSY); another process has it open exclusively"),
        ),
        E::ENXIO | E::ENODEV | E::ENOENT => Fault::code(
            REEL_E_TRANSPORT,
            format!(
                "{what}: device gone ({errno}); check that the drive is still attached and reopen the library"
            ),
        ),
        E::ETIMEDOUT => Fault::code(
            REEL_E_TRANSPORT,
            format!("{what}: command timed out; check the drive and the transport"),
        ),
        E::EPERM => Fault::code(
            REEL_E_INTERNAL,
            format!("{what}: permission denied (EPERM); run with access to the st/sg nodes"),
        ),
        other => Fault::code(REEL_E_INTERNAL, format!("{what}: unexpected error {other}")),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use nix::errno::Errno;
    use reel_plugin_abi::REEL_E_CHECK_CONDITION;

    #[test]
    fn errno_table() {
        let cases: &[(Errno, i32, u8, (u8, u8))] = &[
            (Errno::ENOMEDIUM, REEL_E_CHECK_CONDITION, 2, (0x3A, 0)),
            (Errno::EACCES, REEL_E_CHECK_CONDITION, 7, (0x27, 0)),
            (Errno::EROFS, REEL_E_CHECK_CONDITION, 7, (0x27, 0)),
            (Errno::ENOSPC, REEL_E_CHECK_CONDITION, 0xD, (0, 2)),
            (Errno::EIO, REEL_E_CHECK_CONDITION, 3, (0, 0)),
            (Errno::ENOMEM, REEL_E_CHECK_CONDITION, 0, (0, 0)),
            (Errno::EINVAL, REEL_E_INVALID_ARG, 0, (0, 0)),
            (Errno::EBUSY, REEL_E_TRANSPORT, 0, (0, 0)),
            (Errno::ENODEV, REEL_E_TRANSPORT, 0, (0, 0)),
            (Errno::EPERM, REEL_E_INTERNAL, 0, (0, 0)),
        ];
        for (e, code, key, (a, q)) in cases {
            let f = errno_fault(*e, "op /dev/nst0");
            assert_eq!(f.code, *code, "{e}");
            assert_eq!((f.sense_key, f.asc, f.ascq), (*key, *a, *q), "{e}");
            assert!(f.message.starts_with("op /dev/nst0"), "{}", f.message);
        }
        assert!(errno_fault(Errno::ENOSPC, "w").flags & REEL_FLAG_EOM != 0);
        assert!(errno_fault(Errno::ENOMEM, "r").flags & REEL_FLAG_ILI != 0);
    }
}
