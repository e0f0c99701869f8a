//! Any bytes as the record at block 0: `Label::decode` must return, never panic, and a label
//! it accepts must encode back to the same bytes.
#![no_main]

use libfuzzer_sys::fuzz_target;
use reel_engine::format::Label;

fuzz_target!(|data: &[u8]| {
    let _ = Label::looks_like_reel(data);
    if let Ok(label) = Label::decode(data) {
        assert_eq!(
            label.encode(),
            data,
            "an accepted label re-encodes to the same record"
        );
    }
});
