//! Any bytes as a container header record: `ContainerHeader::decode` must return, never panic,
//! and a header it accepts must encode back to the same bytes.
#![no_main]

use libfuzzer_sys::fuzz_target;
use reel_engine::format::ContainerHeader;

fuzz_target!(|data: &[u8]| {
    if let Ok(header) = ContainerHeader::decode(data) {
        assert_eq!(
            header.encode(),
            data,
            "an accepted header re-encodes to the same record"
        );
    }
});
