//! `reel-bench`: reel's benchmark harness.
//!
//! Runs the sections of issue 6 (the seed's tape benchmark, seed 000 §3-4, and what reel must
//! beat), writes the rows as JSON into `eval/results/<date>-<quick|full>.json`, draws plots into
//! `eval/results/plots/`, regenerates `eval/REPORT.md` from the JSON, and gates: the process
//! exits non-zero on any wrong byte, any write not at EOD, or a target missed.
//!
//! ```text
//! cargo build -p reel-plugin-sim && cargo run -p reel-bench -- --quick
//! cargo build --release -p reel-plugin-sim -p reel-bench && target/release/reel-bench
//! ```

mod model;
mod plots;
mod report;
mod rig;
mod row;
mod sections;
mod spool;
mod worker_rig;

use std::path::PathBuf;
use std::time::Instant;

use anyhow::{Context, Result, bail};
use clap::Parser;
use serde::{Deserialize, Serialize};

use crate::row::{Basis, Row, Target};

/// reel's benchmark harness (issue 6): runs the sections, writes JSON, plots and REPORT.md,
/// and exits non-zero on a wrong byte, a write not at EOD or a missed target.
#[derive(Parser, Debug)]
#[command(name = "reel-bench", version)]
struct Args {
    /// Reduced sizes for CI (same logic, smaller data; within 10 minutes on 2 cores).
    #[arg(long)]
    quick: bool,
    /// Sections to run (default: all), e.g. `reel-bench --quick queue catalogue`. `--list`
    /// shows them.
    #[arg(value_name = "SECTION")]
    section_names: Vec<String>,
    /// Comma-separated section names to run, as an option (added to the positional ones).
    #[arg(long, value_delimiter = ',')]
    sections: Vec<String>,
    /// List the sections and exit.
    #[arg(long)]
    list: bool,
    /// PostgreSQL database for the `catalogue` and `queue` sections (a schema is created in it
    /// and dropped afterwards); default: the REEL_TEST_POSTGRES_URL environment variable.
    #[arg(long, value_name = "URL")]
    postgres: Option<String>,
    /// The simulator plugin (default: libreel_plugin_sim.so next to this executable).
    #[arg(long)]
    plugin: Option<PathBuf>,
    /// Directory for the results JSON and plots.
    #[arg(long, default_value = concat!(env!("CARGO_MANIFEST_DIR"), "/results"))]
    out: PathBuf,
    /// Extra word in the results file name (`<date>-<mode>-<label>.json`), so a run of some
    /// sections does not replace the day's full results.
    #[arg(long)]
    label: Option<String>,
    /// The report regenerated from the JSON.
    #[arg(long, default_value = concat!(env!("CARGO_MANIFEST_DIR"), "/REPORT.md"))]
    report: PathBuf,
    /// Scratch directory for libraries, spools and restore destinations (default: the
    /// system's temporary directory).
    #[arg(long)]
    scratch: Option<PathBuf>,
    /// Regenerate REPORT.md and plots from existing results JSON files (their rows merged in
    /// order; a later file's sections replace the same sections of earlier ones), run nothing.
    #[arg(long, num_args = 1..)]
    from_json: Vec<PathBuf>,
    /// Earlier results JSON files (merged as `--from-json` merges them) that the report
    /// compares this run against: it lists every row that moved by more than 5 %.
    #[arg(long, num_args = 1..)]
    previous: Vec<PathBuf>,
    /// A Markdown file, written by hand, that says why rows moved; the report includes it
    /// under the comparison.
    #[arg(long)]
    why: Option<PathBuf>,
    /// What fails the run: `all` (a wrong byte, a write not at EOD, or any missed target) or
    /// `integrity` (only a wrong byte, a write not at EOD, a failed recall or a section that
    /// did not run; missed performance targets are reported, not fatal).
    #[arg(long, value_enum, default_value_t = Gate::All)]
    gate: Gate,
}

/// Which rows fail the process.
#[derive(clap::ValueEnum, Clone, Copy, Debug, PartialEq, Eq)]
enum Gate {
    /// Every row with a target.
    All,
    /// Integrity rows only.
    Integrity,
}

/// Whether a row is an integrity check (bytes, EOD, failures, a section that did not run).
fn is_integrity(r: &Row) -> bool {
    r.measure.contains("wrong bytes")
        || r.measure.contains("not at EOD")
        || r.measure.contains("failed recalls")
        || r.measure.contains("keys not found")
        || r.measure.contains("missing from the queue summary")
        || r.measure.contains("section ran to completion")
}

fn gate_failures(r: &RunResult, gate: Gate) -> usize {
    r.failures()
        .into_iter()
        .filter(|row| gate == Gate::All || is_integrity(row))
        .count()
}

/// One run's results, as written to JSON.
#[derive(Serialize, Deserialize, Debug)]
pub struct RunResult {
    /// `quick` or `full`.
    pub mode: String,
    /// UTC date of the run, `YYYY-MM-DD`.
    pub date: String,
    /// Seconds since the Unix epoch at the start.
    pub started_unix: u64,
    /// Wall seconds the run took (MEASURED).
    pub wall_s: f64,
    /// Build profile of this binary.
    pub profile: String,
    /// The host.
    pub host: String,
    /// The simulator plugin used.
    pub plugin: String,
    /// The model's figures passed to the simulator.
    pub sim_config: String,
    /// Every row.
    pub rows: Vec<Row>,
}

impl RunResult {
    /// Rows that fail the gate.
    pub fn failures(&self) -> Vec<&Row> {
        self.rows.iter().filter(|r| r.pass == Some(false)).collect()
    }
}

fn main() {
    tracing_subscriber::fmt()
        .with_env_filter(
            tracing_subscriber::EnvFilter::try_from_default_env().unwrap_or_else(|_| "warn".into()),
        )
        .with_writer(std::io::stderr)
        .init();
    match run() {
        Ok(0) => {}
        Ok(n) => {
            eprintln!("reel-bench: GATE FAILED: {n} row(s) missed their target (see the report)");
            std::process::exit(1);
        }
        Err(e) => {
            eprintln!("reel-bench: {e:#}");
            std::process::exit(2);
        }
    }
}

fn run() -> Result<usize> {
    let mut args = Args::parse();
    let positional = std::mem::take(&mut args.section_names);
    args.sections.extend(positional);
    let all = sections::all();
    if args.list {
        for s in &all {
            println!("{:<12} {}", s.name, s.title);
        }
        return Ok(0);
    }
    if !args.from_json.is_empty() {
        let r = merge(&args.from_json)?;
        write_outputs(&args, &r, &args.from_json)?;
        return Ok(gate_failures(&r, args.gate));
    }
    for name in &args.sections {
        if !all.iter().any(|s| s.name == name) {
            let names: Vec<&str> = all.iter().map(|s| s.name).collect();
            bail!(
                "unknown section `{name}`; the sections are: {}",
                names.join(", ")
            );
        }
    }
    let plugin_path = rig::find_plugin(args.plugin.as_deref())?;
    let plugin = rig::load(&plugin_path)?;
    let scratch = args.scratch.clone().unwrap_or_else(std::env::temp_dir);
    std::fs::create_dir_all(&scratch)
        .with_context(|| format!("creating scratch directory {}", scratch.display()))?;
    let ctx = sections::Ctx {
        plugin,
        plugin_path: plugin_path.clone(),
        model: model::Model::lto9(),
        quick: args.quick,
        scratch,
        postgres: args
            .postgres
            .clone()
            .or_else(|| std::env::var("REEL_TEST_POSTGRES_URL").ok())
            .filter(|u| !u.is_empty()),
    };
    let start = Instant::now();
    let started_unix = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_secs())
        .unwrap_or(0);
    let mut rows = Vec::new();
    for s in all
        .iter()
        .filter(|s| args.sections.is_empty() || args.sections.iter().any(|n| n == s.name))
    {
        eprintln!("reel-bench: section {} …", s.name);
        let t = Instant::now();
        match (s.run)(&ctx) {
            Ok(mut r) => {
                for row in &r {
                    eprintln!(
                        "  {:<60} {:>12.3} {:<8} {}",
                        row.measure,
                        row.value,
                        row.unit,
                        match row.pass {
                            Some(true) => "pass",
                            Some(false) => "MISS",
                            None => "",
                        }
                    );
                }
                rows.append(&mut r);
            }
            Err(e) => {
                eprintln!("  section {} failed: {e:#}", s.name);
                rows.push(
                    Row::info(
                        s.title,
                        "section ran to completion",
                        0.0,
                        "bool",
                        Basis::Measured,
                    )
                    .target(Target::Equals(1.0), "the section runs")
                    .note(format!("error: {e:#}")),
                );
            }
        }
        eprintln!("  ({:.1} s wall)", t.elapsed().as_secs_f64());
    }
    let result = RunResult {
        mode: if args.quick { "quick" } else { "full" }.to_string(),
        date: utc_date(started_unix),
        started_unix,
        wall_s: start.elapsed().as_secs_f64(),
        profile: if cfg!(debug_assertions) {
            "debug"
        } else {
            "release"
        }
        .to_string(),
        host: host_description(),
        plugin: plugin_path.display().to_string(),
        sim_config: ctx.model.sim_config(),
        rows,
    };
    std::fs::create_dir_all(&args.out)
        .with_context(|| format!("creating {}", args.out.display()))?;
    let stem = match &args.label {
        Some(l) => format!("{}-{}-{l}", result.date, result.mode),
        None => format!("{}-{}", result.date, result.mode),
    };
    let json_path = args.out.join(format!("{stem}.json"));
    std::fs::write(&json_path, serde_json::to_vec_pretty(&result)?)
        .with_context(|| format!("writing {}", json_path.display()))?;
    write_outputs(&args, &result, std::slice::from_ref(&json_path))?;
    eprintln!(
        "reel-bench: {} rows, {} failed, {:.1} s wall; results {}",
        result.rows.len(),
        result.failures().len(),
        result.wall_s,
        json_path.display()
    );
    Ok(gate_failures(&result, args.gate))
}

/// Plots and REPORT.md for `result`, read from (or just written to) the `sources` JSON files.
/// Results files merged in order: a later file's sections replace the same sections of
/// earlier files.
fn merge(paths: &[PathBuf]) -> Result<RunResult> {
    let mut merged: Option<RunResult> = None;
    for path in paths {
        let r: RunResult = serde_json::from_slice(
            &std::fs::read(path).with_context(|| format!("reading {}", path.display()))?,
        )
        .with_context(|| format!("{} is not a reel-bench results file", path.display()))?;
        match merged.as_mut() {
            None => merged = Some(r),
            Some(m) => {
                m.wall_s += r.wall_s;
                m.rows
                    .retain(|x| !r.rows.iter().any(|y| y.section == x.section));
                m.rows.extend(r.rows);
            }
        }
    }
    let mut r = merged.ok_or_else(|| anyhow::anyhow!("no results file given"))?;
    r.rows = r.rows.into_iter().map(Row::refreshed).collect();
    Ok(r)
}

fn write_outputs(args: &Args, result: &RunResult, sources: &[PathBuf]) -> Result<()> {
    let plot_dir = args.out.join("plots");
    let plots = match plots::draw(result, &plot_dir) {
        Ok(p) => p,
        Err(e) => {
            eprintln!("reel-bench: plots not drawn: {e:#}");
            Vec::new()
        }
    };
    let previous = if args.previous.is_empty() {
        None
    } else {
        Some(merge(&args.previous)?)
    };
    let why = match &args.why {
        Some(p) => {
            Some(std::fs::read_to_string(p).with_context(|| format!("reading {}", p.display()))?)
        }
        None => None,
    };
    let compared = previous.as_ref().map(|p| report::Compared {
        previous: p,
        sources: &args.previous,
        why: why.as_deref(),
    });
    let md = report::render(result, sources, &plots, &args.report, compared);
    std::fs::write(&args.report, md)
        .with_context(|| format!("writing {}", args.report.display()))?;
    Ok(())
}

/// `YYYY-MM-DD` (UTC) of a Unix time (civil-from-days, proleptic Gregorian).
fn utc_date(unix: u64) -> String {
    let days = (unix / 86_400) as i64;
    let z = days + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z - era * 146_097;
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
    let y = yoe + era * 400;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let d = doy - (153 * mp + 2) / 5 + 1;
    let m = if mp < 10 { mp + 3 } else { mp - 9 };
    format!("{:04}-{:02}-{:02}", if m <= 2 { y + 1 } else { y }, m, d)
}

fn host_description() -> String {
    let cpus = std::thread::available_parallelism()
        .map(|n| n.get())
        .unwrap_or(0);
    let model = std::fs::read_to_string("/proc/cpuinfo")
        .ok()
        .and_then(|s| {
            s.lines()
                .find(|l| l.starts_with("model name"))
                .and_then(|l| l.split(':').nth(1))
                .map(|s| s.trim().to_string())
        })
        .unwrap_or_else(|| "unknown CPU".into());
    format!("{cpus} CPUs ({model}), {}", std::env::consts::ARCH)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_integrity_gate_ignores_missed_performance_targets() {
        let rows = vec![
            Row::info("s", "rate", 1.0, "MB/s", Basis::Simulated).target(Target::AtLeast(2.0), ""),
            Row::info("s", "wrong bytes read back", 0.0, "bytes", Basis::Measured)
                .target(Target::Equals(0.0), ""),
        ];
        let mut r = RunResult {
            mode: "quick".into(),
            date: String::new(),
            started_unix: 0,
            wall_s: 0.0,
            profile: String::new(),
            host: String::new(),
            plugin: String::new(),
            sim_config: String::new(),
            rows,
        };
        assert_eq!(gate_failures(&r, Gate::All), 1);
        assert_eq!(gate_failures(&r, Gate::Integrity), 0);
        r.rows.push(
            Row::info(
                "s",
                "writes not at EOD (simulator counter)",
                1.0,
                "writes",
                Basis::Simulated,
            )
            .target(Target::Equals(0.0), ""),
        );
        assert_eq!(gate_failures(&r, Gate::Integrity), 1);
    }

    #[test]
    fn dates_are_civil_utc() {
        assert_eq!(utc_date(0), "1970-01-01");
        assert_eq!(utc_date(951_782_400), "2000-02-29");
        assert_eq!(utc_date(1_796_083_200), "2026-12-01");
    }
}
