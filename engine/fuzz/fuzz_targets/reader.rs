//! Any bytes as the records of a container, pushed through `ContainerReader`: it must return
//! errors, never panic. Half the inputs start with a valid header record so the fuzzer reaches
//! the data and footer logic; records are split at a two-byte length prefix each.
#![no_main]

use libfuzzer_sys::fuzz_target;
use reel_engine::format::{ContainerHeader, ContainerReader, MIN_RECORD_SIZE};

fuzz_target!(|data: &[u8]| {
    let Some((&mode, mut rest)) = data.split_first() else {
        return;
    };
    let mut reader = ContainerReader::new();
    if mode & 1 == 1 {
        let header = ContainerHeader {
            container_uuid: Default::default(),
            cartridge_uuid: Default::default(),
            barcode: "FUZZ00L9".into(),
            pool: "fuzz".into(),
            record_size: MIN_RECORD_SIZE as u32,
            sequence: 1,
            created_unix: 0,
        };
        if reader.push_record(&header.encode()).is_err() {
            panic!("a valid header was refused");
        }
    }
    while rest.len() >= 2 {
        let len = usize::from(u16::from_le_bytes([rest[0], rest[1]]));
        let take = len.min(rest.len() - 2);
        let rec = &rest[2..2 + take];
        rest = &rest[2 + take..];
        if reader.push_record(rec).is_err() {
            return;
        }
    }
    let _ = reader.finish();
});
