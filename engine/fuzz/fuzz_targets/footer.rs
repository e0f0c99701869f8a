//! Any bytes, split into records, as a footer: `Footer::decode` must return, never panic, and a
//! footer it accepts must encode back to the same records. The input is split at each
//! occurrence of the footer magic so the fuzzer can build multi-record footers.
#![no_main]

use libfuzzer_sys::fuzz_target;
use reel_engine::format::{FOOTER_MAGIC, Footer, MIN_RECORD_SIZE};

fn split(data: &[u8]) -> Vec<Vec<u8>> {
    let mut records = Vec::new();
    let mut start = 0;
    let mut i = 1;
    while i + FOOTER_MAGIC.len() <= data.len() {
        if &data[i..i + FOOTER_MAGIC.len()] == FOOTER_MAGIC {
            records.push(data[start..i].to_vec());
            start = i;
        }
        i += 1;
    }
    records.push(data[start..].to_vec());
    records
}

fuzz_target!(|data: &[u8]| {
    let records = split(data);
    if let Ok(footer) = Footer::decode(&records) {
        // Chunking depends on the record size; a single-record footer re-encodes exactly
        // with a record size that holds it.
        if records.len() == 1 {
            let record_size = records[0].len().max(MIN_RECORD_SIZE);
            assert_eq!(footer.encode(record_size), records);
        }
    }
});
