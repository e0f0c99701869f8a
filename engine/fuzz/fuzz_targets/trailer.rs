//! Any bytes as the last record before a filemark: `Footer::trailer` must return, never panic.
#![no_main]

use libfuzzer_sys::fuzz_target;
use reel_engine::format::Footer;

fuzz_target!(|data: &[u8]| {
    let _ = Footer::trailer(data);
});
