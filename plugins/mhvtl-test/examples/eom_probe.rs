//! `eom_probe PLUGIN.so CONFIG_FILE BARCODE`: fill a (small) scratch cartridge through the
//! plugin's C ABI, as the engine would, and check the end-of-medium contract: writes in the
//! early-warning zone are written and answer CHECK CONDITION 0/00/02 with EOM, the write past the end fails with VOLUME
//! OVERFLOW (0Dh), EOM set and the whole record as residue, READ POSITION reports EOP, and the
//! last record written reads back intact. Prints `EOM RESULT PASS` or `EOM RESULT FAIL: why`.
//! DESTRUCTIVE to the cartridge.

use reel_plugin_abi::host::{LibraryHandle, Plugin};
use reel_plugin_abi::{
    REEL_ELEMENT_DRIVE, REEL_ELEMENT_SLOT, REEL_FLAG_EOM, REEL_POS_EOP, sense_key,
};

const RECORD: usize = 256 * 1024;
/// Stop after this many records whatever happens (1 GiB): a target without a hard end
/// (stock tgt) would otherwise be written until the host disk fills.
const LIMIT: u64 = 4096;

fn record(n: u64) -> Vec<u8> {
    let mut v = vec![0u8; RECORD];
    for (i, b) in v.iter_mut().enumerate() {
        *b = (n as usize * 31 + i * 7) as u8;
    }
    v
}

fn run() -> Result<(), String> {
    let mut args = std::env::args().skip(1);
    let (Some(so), Some(cfg), Some(barcode)) = (args.next(), args.next(), args.next()) else {
        return Err("usage: eom_probe PLUGIN.so CONFIG_FILE BARCODE".into());
    };
    let config = std::fs::read_to_string(&cfg).map_err(|e| format!("{cfg}: {e}"))?;
    let plugin = Plugin::load(&so).map_err(|e| e.to_string())?;
    let mut lib = LibraryHandle::open(&plugin, &config).map_err(|e| e.to_string())?;
    let inv = lib.inventory().map_err(|e| e.to_string())?;
    let slot = inv
        .iter()
        .find(|e| e.kind == REEL_ELEMENT_SLOT && e.barcode == barcode)
        .ok_or(format!("no slot holds {barcode}"))?
        .address;
    let drive_el = inv
        .iter()
        .find(|e| e.kind == REEL_ELEMENT_DRIVE && e.index == 0)
        .ok_or("no drive element 0")?
        .address;
    lib.move_medium(slot, drive_el).map_err(|e| e.to_string())?;
    let mut d = lib.open_drive(0).map_err(|e| e.to_string())?;
    d.load().map_err(|e| e.to_string())?;
    // As the engine does: one TEST UNIT READY takes the unit attention that follows a load.
    if let Err(e) = d.test_ready() {
        if e.sense().0 != sense_key::UNIT_ATTENTION {
            return Err(format!("test_ready after load: {e}"));
        }
        d.test_ready().map_err(|e| e.to_string())?;
    }
    d.rewind().map_err(|e| e.to_string())?;

    let mut written = 0u64;
    let mut first_warning = None;
    let overflow = loop {
        if written == LIMIT {
            return Err(format!("{LIMIT} records written and no end of medium"));
        }
        match d.write_record(&record(written), None) {
            Ok(()) => written += 1,
            // Early warning: CHECK CONDITION 0/00/02 with EOM, and the record is written.
            Err(e)
                if e.sense() == (sense_key::NO_SENSE, 0x00, 0x02) && e.has_flag(REEL_FLAG_EOM) =>
            {
                first_warning.get_or_insert(written);
                written += 1;
            }
            Err(e) => break e,
        }
    };
    println!(
        "EOM records written {written} of {RECORD} bytes, first early warning at record {first_warning:?}, \
         then: {overflow}"
    );
    let pos = d.read_position().map_err(|e| e.to_string())?;
    println!(
        "EOM position at the end: block {} flags {:#x}",
        pos.block, pos.flags
    );
    let fm = d.write_filemarks(0, false);
    println!(
        "EOM WRITE FILEMARKS 0 (flush) at the end: {}",
        fm.as_ref().map_or_else(|e| e.to_string(), |_| "ok".into())
    );

    let mut why = Vec::new();
    match first_warning {
        None => why.push("no write reported early warning (EOM flag)".to_string()),
        Some(0) => why.push("early warning from the first record".into()),
        Some(_) => {}
    }
    let (key, _, _) = overflow.sense();
    if key != sense_key::VOLUME_OVERFLOW || !overflow.has_flag(REEL_FLAG_EOM) {
        why.push(format!(
            "the failing write is not VOLUME OVERFLOW with EOM: {overflow}"
        ));
    }
    if overflow.status.residue != RECORD as i64 {
        why.push(format!(
            "overflow residue {} (expected the whole record, {RECORD})",
            overflow.status.residue
        ));
    }
    if pos.block != written {
        why.push(format!("position {} after {written} records", pos.block));
    }
    if pos.flags & REEL_POS_EOP == 0 {
        why.push("READ POSITION does not report EOP in the early-warning zone".into());
    }
    if written > 0 {
        d.locate(written - 1).map_err(|e| e.to_string())?;
        let mut buf = vec![0u8; RECORD];
        match d.read_record(&mut buf) {
            Ok(r) if r.len == RECORD && buf == record(written - 1) => {
                println!("EOM last record (block {}) reads back intact", written - 1)
            }
            Ok(r) => why.push(format!("last record reads back wrong ({} bytes)", r.len)),
            Err(e) => why.push(format!("last record does not read back: {e}")),
        }
    }
    d.unload().map_err(|e| e.to_string())?;
    drop(d);
    lib.move_medium(drive_el, slot).map_err(|e| e.to_string())?;
    if why.is_empty() {
        Ok(())
    } else {
        Err(why.join("; "))
    }
}

fn main() -> std::process::ExitCode {
    match run() {
        Ok(()) => {
            println!("EOM RESULT PASS");
            std::process::ExitCode::SUCCESS
        }
        Err(why) => {
            println!("EOM RESULT FAIL: {why}");
            std::process::ExitCode::from(1)
        }
    }
}
