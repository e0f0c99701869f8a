//! `reel plugin ls` and `reel plugin check`: which device plugins are installed and whether
//! one honours the ABI contract. Plugins are found by name or path as the worker finds them
//! (`reel_engine::device::find_plugin`) and loaded through the same checks (owner and mode).

use std::path::{Path, PathBuf};

use clap::Subcommand;
use serde_json::json;

use reel_engine::device::{find_plugin, installed_plugins, load_plugin, plugin_dirs};
use reel_plugin_abi::host::{Plugin, cap_name};
use reel_plugin_abi::kit::{self, KitOptions};
use reel_queue::config::LoadedConfig;
use reel_queue::error::{JobsError, Result};

/// `reel plugin …`
#[derive(Debug, Subcommand)]
pub enum PluginCommand {
    /// Plugins installed in the plugin directory (`[library] plugin_dir`) and beside `reel`,
    /// with the name, version, ABI version and capabilities each reports.
    Ls,
    /// Run the ABI contract kit against a plugin. DESTRUCTIVE: the kit overwrites a read-write
    /// cartridge and appends to a WORM one; run it on scratch media only.
    Check {
        /// The plugin's name (`sim`, `scsi`, `mhvtl`) or the path of its `.so`.
        plugin: String,
        /// The plugin's configuration string, or `@FILE` to read it from a file (default: the
        /// configured `[library] plugin_config` when this is the configured plugin, else none).
        #[arg(value_name = "CONFIG")]
        plugin_config: Option<String>,
        /// Index of the drive to use.
        #[arg(long, default_value_t = 0)]
        drive: u32,
        /// Barcode of the read-write scratch cartridge (default: the first in a slot).
        #[arg(long)]
        scratch: Option<String>,
        /// Barcode of the WORM scratch cartridge (default: the first WORM one in a slot).
        #[arg(long)]
        worm: Option<String>,
        /// Confirm that the cartridges the kit writes hold nothing to keep.
        #[arg(long)]
        yes: bool,
    },
}

/// What a plugin command printed: the JSON document, the text, and the exit status.
pub struct Printed {
    /// For `--json`.
    pub json: serde_json::Value,
    /// For people.
    pub text: String,
    /// The exit status (1: a check failed).
    pub status: i32,
}

/// Run a plugin command.
pub async fn run(loaded: &LoadedConfig, cmd: PluginCommand) -> Result<Printed> {
    let library = loaded.config.library.clone();
    let configured = library.plugin_file().ok().flatten().map(|p| same_file(&p));
    // Loading runs a library's initialisers and the kit drives hardware: off the runtime.
    tokio::task::spawn_blocking(move || match cmd {
        PluginCommand::Ls => Ok(list(&plugin_dirs(&library.plugin_dir), configured)),
        PluginCommand::Check {
            plugin,
            plugin_config,
            drive,
            scratch,
            worm,
            yes,
        } => {
            let dirs = plugin_dirs(&library.plugin_dir);
            let file = find_plugin(&plugin, &dirs).map_err(refused)?;
            if !yes {
                return Err(refused_text(format!(
                    "the contract kit is destructive: it overwrites a read-write cartridge ({}) and appends to a WORM one ({}) in the library the plugin opens; run it on scratch media only, and say so with --yes",
                    scratch.as_deref().unwrap_or("the first in a slot"),
                    worm.as_deref().unwrap_or("the first WORM one in a slot"),
                )));
            }
            let config = match plugin_config {
                Some(c) => kit::config_argument(&c).map_err(refused_text)?,
                None if configured == Some(same_file(&file)) => library.plugin_config.clone(),
                None => String::new(),
            };
            let plugin = load_plugin(&file).map_err(refused)?;
            let opts = KitOptions {
                drive,
                scratch_barcode: scratch,
                worm_barcode: worm,
            };
            Ok(check(&plugin, &config, &opts))
        }
    })
    .await
    .map_err(|e| JobsError::Internal(format!("the plugin command's thread failed: {e}")))?
}

/// A file by its resolved path, so two spellings of one file compare equal.
fn same_file(p: &Path) -> PathBuf {
    std::fs::canonicalize(p).unwrap_or_else(|_| p.to_path_buf())
}

fn refused(e: reel_engine::device::DeviceError) -> JobsError {
    refused_text(e.to_string())
}

fn refused_text(message: String) -> JobsError {
    JobsError::Config {
        origin: "reel plugin".into(),
        message,
    }
}

/// The names of the capability bits set in `caps`.
fn cap_names(caps: u64) -> Vec<&'static str> {
    (0..64)
        .map(|n| 1u64 << n)
        .filter(|bit| caps & bit != 0)
        .map(|bit| cap_name(bit).trim_start_matches("REEL_CAP_"))
        .collect()
}

fn list(dirs: &[PathBuf], configured: Option<PathBuf>) -> Printed {
    let mut rows = Vec::new();
    let mut lines = Vec::new();
    for file in installed_plugins(dirs) {
        let is_configured = configured.as_ref() == Some(&same_file(&file));
        let mark = if is_configured { "*" } else { " " };
        match load_plugin(&file) {
            Ok(p) => {
                let caps = cap_names(p.caps());
                lines.push(format!(
                    "{mark} {:<18} {:<8} ABI 1.{:<2} {}\n    {}",
                    p.name(),
                    p.version(),
                    p.abi_minor(),
                    file.display(),
                    if caps.is_empty() {
                        "(no optional capabilities)".to_string()
                    } else {
                        caps.join(" ")
                    }
                ));
                rows.push(json!({
                    "path": file, "name": p.name(), "version": p.version(),
                    "abi": format!("1.{}", p.abi_minor()), "capabilities": caps,
                    "configured": is_configured,
                }));
            }
            Err(e) => {
                lines.push(format!("{mark} (not loadable) {}\n    {e}", file.display()));
                rows.push(json!({
                    "path": file, "error": e.to_string(), "configured": is_configured,
                }));
            }
        }
    }
    let searched = dirs
        .iter()
        .map(|d| d.display().to_string())
        .collect::<Vec<_>>()
        .join(", ");
    let text = if lines.is_empty() {
        format!("no plugins in {searched}")
    } else {
        format!(
            "{}\n(* the configured plugin; searched {searched})",
            lines.join("\n")
        )
    };
    Printed {
        json: json!({ "searched": dirs, "plugins": rows }),
        text,
        status: 0,
    }
}

fn check(plugin: &std::sync::Arc<Plugin>, config: &str, opts: &KitOptions) -> Printed {
    let report = kit::run_announcing(plugin, config, opts, "reel plugin check");
    let checks: Vec<_> = report
        .checks
        .iter()
        .map(|c| {
            let (outcome, detail) = match &c.outcome {
                kit::Outcome::Passed => ("pass", String::new()),
                kit::Outcome::Failed(why) => ("fail", why.clone()),
                kit::Outcome::Skipped(why) => ("skip", why.clone()),
            };
            json!({"check": c.name, "outcome": outcome, "detail": detail})
        })
        .collect();
    Printed {
        json: json!({ "plugin": report.plugin, "passed": report.passed(), "checks": checks }),
        text: report.to_string(),
        status: if report.passed() { 0 } else { 1 },
    }
}
