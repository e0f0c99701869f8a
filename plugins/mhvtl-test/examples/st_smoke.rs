//! `st_smoke CONFIG_FILE`: open the library and drive 0 through this plugin's Rust API with
//! logs on stderr, load whatever cartridge is in the drive and write, read back and position
//! a few records. A diagnostic for a new rig; DESTRUCTIVE to the cartridge in drive 0.

use reel_plugin_abi::sdk::{Call, Drive, Library};
use reel_plugin_mhvtl::MhvtlLibrary;

fn main() -> Result<(), Box<dyn std::error::Error>> {
    tracing_subscriber::fmt()
        .with_writer(std::io::stderr)
        .with_env_filter("debug")
        .init();
    let path = std::env::args()
        .nth(1)
        .ok_or("usage: st_smoke CONFIG_FILE")?;
    let config = std::fs::read_to_string(path)?;
    let mut call = Call::default();
    let mut lib = MhvtlLibrary::open(&config, &mut call)?;
    for e in lib.inventory(&mut call)? {
        eprintln!("element {e:?}");
    }
    let mut d = lib.open_drive(0, &mut call)?;
    d.load(&mut call)?;
    d.rewind(&mut call)?;
    for len in [80usize, 1, 4096] {
        let r = d.write_record(&vec![7u8; len], None, &mut call);
        eprintln!("write {len}: {r:?} flags {:#x}", call.flags);
    }
    d.write_filemarks(1, false, &mut call)?;
    eprintln!("position {:?}", d.read_position(&mut call)?);
    d.rewind(&mut call)?;
    let mut buf = vec![0u8; 8192];
    for _ in 0..5 {
        let r = d.read_record(&mut buf, &mut call);
        eprintln!("read: {r:?} flags {:#x}", call.flags);
    }
    eprintln!("statistics {:?}", d.statistics(&mut call)?);
    Ok(())
}
