//! Measures the write hot path of the on-tape format: `ContainerBuilder` framing and hashing
//! (object SHA-256 + container SHA-256, one copy into record buffers, buffers recycled).
//! Prints a MEASURED wall-clock figure for this machine; it asserts nothing.
//!
//! `cargo run -p reel-engine --release --example frame_bench -- [MiB] [record KiB] [object MiB] [write KiB]`
//!
//! Writes of 1 MiB or more hash the object on a second thread; smaller ones hash inline.

use std::time::Instant;

use reel_engine::format::{ContainerBuilder, ContainerHeader, DEFAULT_RECORD_SIZE};

fn main() {
    let mut args = std::env::args().skip(1).map(|a| a.parse::<usize>().ok());
    let total_mib = args.next().flatten().unwrap_or(2048);
    let record_kib = args.next().flatten().unwrap_or(DEFAULT_RECORD_SIZE >> 10);
    let object_mib = args.next().flatten().unwrap_or(64).max(1);
    let write_kib = args.next().flatten().unwrap_or(4096).max(1);
    let header = ContainerHeader {
        container_uuid: uuid::Uuid::new_v4(),
        cartridge_uuid: uuid::Uuid::new_v4(),
        barcode: "BENCH0L9".into(),
        pool: "bench".into(),
        record_size: (record_kib << 10) as u32,
        sequence: 1,
        created_unix: 0,
    };
    let chunk: Vec<u8> = (0..write_kib << 10)
        .map(|i| (i * 7 + i / 4099) as u8)
        .collect();
    let mut b = ContainerBuilder::new(header);
    let start = Instant::now();
    let mut written = 0usize;
    let mut records = 0usize;
    let mut n = 0;
    while written < total_mib << 20 {
        b.begin_object(&format!("bench/{n}"), 1)
            .expect("no object open");
        let mut in_object = 0;
        while in_object < object_mib << 20 && written < total_mib << 20 {
            for r in b.write(&chunk) {
                records += 1;
                b.recycle(r);
            }
            in_object += chunk.len();
            written += chunk.len();
        }
        b.end_object().expect("object open");
        n += 1;
    }
    let (tail, footer) = b.finish();
    let secs = start.elapsed().as_secs_f64();
    println!(
        "MEASURED (wall clock, this machine): {} MiB in {} objects written {} KiB at a time, {} data records of {} KiB (+{} tail records): {:.0} MB/s (SHA-256 of object and container, one copy)",
        written >> 20,
        n,
        write_kib,
        records,
        record_kib,
        tail.len(),
        written as f64 / secs / 1e6,
    );
    println!("container sha256 {}", hex::encode(footer.sha256));
}
