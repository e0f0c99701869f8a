//! `sg_kit PLUGIN.so CONFIG [SRC>DST,...]`: optionally move cartridges first (the kit needs two
//! empty storage slots), then run the plugin contract kit against the SCSI plugin and exit 1
//! if a check failed other than the ones the device cannot do (`mam`, `records.lbp` when it
//! answers "not supported by this drive"). Used by `tests/qemu-sg.sh` to exercise the SG_IO
//! transport inside a qemu guest whose `/dev/sg*` nodes are the tgt library's LUNs.

use std::process::ExitCode;

use reel_plugin_abi::host::{LibraryHandle, Plugin};
use reel_plugin_abi::kit::{self, KitOptions, Outcome};

fn main() -> ExitCode {
    let args: Vec<String> = std::env::args().collect();
    let (Some(path), Some(config)) = (args.get(1), args.get(2)) else {
        eprintln!("usage: sg_kit PLUGIN.so CONFIG (DESTRUCTIVE: scratch media only)");
        return ExitCode::from(2);
    };
    let plugin = match Plugin::load(path) {
        Ok(p) => p,
        Err(e) => {
            eprintln!("sg_kit: {e}");
            return ExitCode::from(2);
        }
    };
    if let Some(moves) = args.get(3) {
        let mut lib = match LibraryHandle::open(&plugin, config) {
            Ok(l) => l,
            Err(e) => {
                eprintln!("sg_kit: library_open: {e}");
                return ExitCode::from(1);
            }
        };
        for m in moves.split(',') {
            let parsed = m
                .split_once('>')
                .and_then(|(a, b)| Some((a.parse::<u32>().ok()?, b.parse::<u32>().ok()?)));
            let Some((src, dst)) = parsed else {
                eprintln!("sg_kit: bad move `{m}`, expected SRC>DST");
                return ExitCode::from(2);
            };
            match lib.move_medium(src, dst) {
                Ok(()) => println!("sg_kit: moved {src} -> {dst}"),
                Err(e) => {
                    eprintln!("sg_kit: move {src} -> {dst}: {e}");
                    return ExitCode::from(1);
                }
            }
        }
    }
    let opts = KitOptions {
        drive: 0,
        scratch_barcode: Some("GFS001L9".into()),
        worm_barcode: None,
    };
    let report = kit::run(&plugin, config, &opts);
    println!("{report}");
    let unexpected = report.checks.iter().filter(|c| match (&c.outcome, c.name) {
        (Outcome::Failed(why), "mam" | "records.lbp") => {
            !why.contains("not supported by this drive")
        }
        (Outcome::Failed(_), _) => true,
        _ => false,
    });
    if unexpected.count() == 0 {
        println!("sg_kit: OK");
        ExitCode::SUCCESS
    } else {
        println!("sg_kit: FAILED");
        ExitCode::from(1)
    }
}
