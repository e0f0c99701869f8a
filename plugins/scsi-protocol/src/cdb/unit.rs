//! Unit-level commands: TEST UNIT READY (00h), REQUEST SENSE (03h) and PREVENT/ALLOW MEDIUM
//! REMOVAL (1Eh).

/// TEST UNIT READY.
pub fn test_unit_ready() -> [u8; 6] {
    [0x00, 0, 0, 0, 0, 0]
}

/// REQUEST SENSE, fixed format, `alloc` bytes (at most 252).
pub fn request_sense(alloc: u8) -> [u8; 6] {
    [0x03, 0, 0, 0, alloc, 0]
}

/// PREVENT (`true`) or ALLOW (`false`) MEDIUM REMOVAL.
pub fn prevent_allow(prevent: bool) -> [u8; 6] {
    [0x1E, 0, 0, 0, u8::from(prevent), 0]
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn cdbs() {
        assert_eq!(test_unit_ready(), [0; 6]);
        assert_eq!(request_sense(252), [3, 0, 0, 0, 252, 0]);
        assert_eq!(prevent_allow(true)[4], 1);
        assert_eq!(prevent_allow(false)[4], 0);
    }
}
