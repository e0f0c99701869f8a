//! `reel-plugin-check PLUGIN.so [CONFIG | @CONFIG_FILE] [--drive N] [--scratch BARCODE]
//! [--worm BARCODE]`: run the contract kit against a plugin and print every check with
//! PASS/FAIL/SKIP and why. Exits 0 when nothing failed, 1 when a check failed, 2 on a usage or
//! load error.
//!
//! The kit is destructive: it overwrites the read-write scratch cartridge and appends to the
//! WORM one. Run it against scratch media only.

use std::process::ExitCode;

use reel_plugin_abi::host::Plugin;
use reel_plugin_abi::kit::{self, KitOptions};

const USAGE: &str = "usage: reel-plugin-check PLUGIN.so [CONFIG | @CONFIG_FILE] [--drive N] \
                     [--scratch BARCODE] [--worm BARCODE]\n\
                     Runs the reel plugin contract kit. DESTRUCTIVE: use scratch media only.";

struct Args {
    plugin: String,
    config: String,
    opts: KitOptions,
}

fn parse(mut args: impl Iterator<Item = String>) -> Result<Args, String> {
    let mut positional = Vec::new();
    let mut opts = KitOptions::default();
    while let Some(a) = args.next() {
        let mut value = |flag: &str| args.next().ok_or_else(|| format!("{flag} needs a value"));
        match a.as_str() {
            "-h" | "--help" => return Err(String::new()),
            "--drive" => {
                let v = value("--drive")?;
                opts.drive = v
                    .parse()
                    .map_err(|_| format!("--drive {v:?} is not a drive index (0, 1, ...)"))?;
            }
            "--scratch" => opts.scratch_barcode = Some(value("--scratch")?),
            "--worm" => opts.worm_barcode = Some(value("--worm")?),
            _ if a.starts_with("--") => return Err(format!("unknown option {a}")),
            _ => positional.push(a),
        }
    }
    let mut positional = positional.into_iter();
    let plugin = positional
        .next()
        .ok_or_else(|| "missing the plugin path".to_string())?;
    let config = match positional.next() {
        None => String::new(),
        Some(c) => kit::config_argument(&c)?,
    };
    if let Some(extra) = positional.next() {
        return Err(format!("unexpected argument {extra:?}"));
    }
    Ok(Args {
        plugin,
        config,
        opts,
    })
}

fn main() -> ExitCode {
    let args = match parse(std::env::args().skip(1)) {
        Ok(a) => a,
        Err(msg) => {
            if !msg.is_empty() {
                eprintln!("reel-plugin-check: {msg}");
            }
            eprintln!("{USAGE}");
            return ExitCode::from(2);
        }
    };
    let plugin = match Plugin::load(&args.plugin) {
        Ok(p) => p,
        Err(e) => {
            eprintln!("reel-plugin-check: {e}");
            return ExitCode::from(2);
        }
    };
    let report = kit::run_announcing(&plugin, &args.config, &args.opts, "reel-plugin-check");
    println!("{report}");
    if report.passed() {
        ExitCode::SUCCESS
    } else {
        ExitCode::from(1)
    }
}
