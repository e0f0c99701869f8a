//! The plugin contract kit: drives a plugin through the whole ABI v1 contract and reports one
//! [`CheckResult`] per check. The `reel-plugin-check` binary runs it from the command line; the
//! C test plugin and the simulator run it in their tests.
//!
//! The kit is **destructive**: it moves cartridges, overwrites the read-write scratch cartridge
//! from BOT and appends to a WORM cartridge. Point it only at scratch media.
//!
//! A check is skipped only when the plugin's `REEL_CAP_*` bits say it lacks the feature; every
//! other problem (including missing media the check needs) is a failure that says what to fix.

mod changer;
mod context;
mod end_of_medium;
mod media;
mod positioning;
mod records;

use std::sync::Arc;

use crate::host::{LibraryHandle, Plugin};
use crate::types::*;

use context::Ctx;
pub use context::KitOptions;

/// How one check ended.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Outcome {
    /// The plugin honoured the contract.
    Passed,
    /// The plugin broke the contract; the text says how.
    Failed(String),
    /// The plugin's capability bits say it lacks this feature; the text names the bit.
    Skipped(String),
}

/// The result of one check.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct CheckResult {
    /// Stable check name (`inventory`, `move.errors`, `records.lbp`, ...).
    pub name: &'static str,
    /// What happened.
    pub outcome: Outcome,
}

/// Everything the kit found, in the order the checks ran.
#[derive(Clone, Debug, Default)]
pub struct KitReport {
    /// Plugin name and version as the table reports them.
    pub plugin: String,
    /// One entry per check.
    pub checks: Vec<CheckResult>,
}

impl KitReport {
    /// Checks that failed.
    pub fn failures(&self) -> impl Iterator<Item = &CheckResult> {
        self.checks
            .iter()
            .filter(|c| matches!(c.outcome, Outcome::Failed(_)))
    }
    /// Whether no check failed.
    pub fn passed(&self) -> bool {
        self.failures().next().is_none()
    }
    /// The outcome of the named check, if it ran.
    pub fn outcome(&self, name: &str) -> Option<&Outcome> {
        self.checks
            .iter()
            .find(|c| c.name == name)
            .map(|c| &c.outcome)
    }
}

impl std::fmt::Display for KitReport {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        writeln!(f, "contract kit for {}", self.plugin)?;
        for c in &self.checks {
            match &c.outcome {
                Outcome::Passed => writeln!(f, "PASS {}", c.name)?,
                Outcome::Failed(why) => writeln!(f, "FAIL {}: {why}", c.name)?,
                Outcome::Skipped(why) => writeln!(f, "SKIP {}: {why}", c.name)?,
            }
        }
        let failed = self.failures().count();
        write!(
            f,
            "{} checks, {} failed, {} skipped",
            self.checks.len(),
            failed,
            self.checks
                .iter()
                .filter(|c| matches!(c.outcome, Outcome::Skipped(_)))
                .count()
        )
    }
}

/// A check: its name, the capability bits it needs, and its body.
struct Check {
    name: &'static str,
    needs: u64,
    run: fn(&mut Ctx) -> Result<(), String>,
}

const fn check(name: &'static str, needs: u64, run: fn(&mut Ctx) -> Result<(), String>) -> Check {
    Check { name, needs, run }
}

/// Every check, in the order they run. Later checks rely on the state earlier ones leave
/// (a loaded scratch cartridge, the reference layout written by `records`).
const CHECKS: &[Check] = &[
    check("inventory", REEL_CAP_CHANGER, changer::inventory),
    check("library_info", 0, changer::library_info),
    check("move.errors", REEL_CAP_CHANGER, changer::move_errors),
    check("move", REEL_CAP_CHANGER, changer::move_round_trip),
    check("load_unload", 0, media::load_unload),
    check("unit_attention", 0, media::unit_attention),
    check("label_at_bot", 0, records::label_at_bot),
    check("records", 0, records::records),
    check("records.lbp", REEL_CAP_LBP, records::records_lbp),
    check("records.together", 0, records::records_together),
    check("filemarks.sync", 0, records::filemarks_sync),
    check(
        "filemarks.immediate",
        REEL_CAP_IMMEDIATE_FILEMARKS,
        records::filemarks_immediate,
    ),
    check("read_position", 0, positioning::read_position),
    check("locate", 0, positioning::locate),
    check("space.forward", 0, positioning::space_forward),
    check(
        "space.backward",
        REEL_CAP_SPACE_BACKWARD,
        positioning::space_backward,
    ),
    check("read.filemark", 0, positioning::read_filemark),
    check("read.eod", 0, positioning::read_eod),
    check("read.ili", 0, records::read_ili),
    check("statistics", REEL_CAP_STATISTICS, records::statistics),
    check("mam", REEL_CAP_MAM, media::mam),
    check(
        "early_warning",
        REEL_CAP_EARLY_WARNING | REEL_CAP_TEST_CONTROL,
        end_of_medium::early_warning,
    ),
    check(
        "end_of_medium",
        REEL_CAP_EARLY_WARNING | REEL_CAP_TEST_CONTROL,
        end_of_medium::end_of_medium,
    ),
    check("worm", REEL_CAP_WORM | REEL_CAP_CHANGER, media::worm),
];

fn missing_caps(plugin: &Plugin, needs: u64) -> Vec<&'static str> {
    crate::host::CAP_NAMES
        .iter()
        .filter(|(bit, _)| needs & bit != 0 && !plugin.has_cap(*bit))
        .map(|(_, n)| *n)
        .collect()
}

/// A plugin configuration as a command line gives it: the string itself, or `@FILE` for the
/// contents of FILE. The error names the file and why it could not be read.
pub fn config_argument(arg: &str) -> Result<String, String> {
    match arg.strip_prefix('@') {
        Some(path) => std::fs::read_to_string(path)
            .map_err(|e| format!("cannot read the plugin configuration {path}: {e}")),
        None => Ok(arg.to_string()),
    }
}

/// As [`run`], naming each check on stderr (`PREFIX: running NAME`) before it runs, so a plugin
/// that takes the whole process down shows in which check it did: what a command-line runner
/// prints.
pub fn run_announcing(
    plugin: &Arc<Plugin>,
    config: &str,
    opts: &KitOptions,
    prefix: &str,
) -> KitReport {
    run_with(plugin, config, opts, |name| {
        use std::io::Write;
        let mut err = std::io::stderr().lock();
        let _ = writeln!(err, "{prefix}: running {name}");
        let _ = err.flush();
    })
}

/// Run every check against `plugin`, opening its library with `config`.
pub fn run(plugin: &Arc<Plugin>, config: &str, opts: &KitOptions) -> KitReport {
    run_with(plugin, config, opts, |_| {})
}

/// As [`run`], calling `starting` with each check's name before it runs: a runner prints it,
/// so a plugin that crashes the whole process shows in which check it did.
pub fn run_with(
    plugin: &Arc<Plugin>,
    config: &str,
    opts: &KitOptions,
    mut starting: impl FnMut(&str),
) -> KitReport {
    let mut report = KitReport {
        plugin: format!(
            "{} {} ({})",
            plugin.name(),
            plugin.version(),
            plugin.path().display()
        ),
        checks: Vec::new(),
    };
    starting("library_open");
    let library = match LibraryHandle::open(plugin, config) {
        Ok(l) => l,
        Err(e) => {
            report.checks.push(CheckResult {
                name: "library_open",
                outcome: Outcome::Failed(format!("{e}; check the plugin configuration")),
            });
            return report;
        }
    };
    report.checks.push(CheckResult {
        name: "library_open",
        outcome: Outcome::Passed,
    });
    let mut ctx = Ctx::new(library, opts.clone());
    for c in CHECKS {
        let missing = missing_caps(plugin, c.needs);
        let outcome = if !missing.is_empty() {
            Outcome::Skipped(format!("plugin lacks {}", missing.join(" and ")))
        } else {
            starting(c.name);
            match (c.run)(&mut ctx) {
                Ok(()) => Outcome::Passed,
                Err(why) => Outcome::Failed(why),
            }
        };
        report.checks.push(CheckResult {
            name: c.name,
            outcome,
        });
    }
    ctx.finish();
    report
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn check_names_are_unique() {
        let mut names: Vec<&str> = CHECKS.iter().map(|c| c.name).collect();
        names.sort_unstable();
        let n = names.len();
        names.dedup();
        assert_eq!(names.len(), n, "duplicate check name");
    }

    #[test]
    fn every_capability_a_check_needs_has_a_name() {
        for c in CHECKS {
            let named: u64 = crate::host::CAP_NAMES
                .iter()
                .map(|(b, _)| b)
                .fold(0, |a, b| a | b);
            assert_eq!(
                c.needs & !named,
                0,
                "check {} needs an unnamed capability",
                c.name
            );
        }
    }

    #[test]
    fn report_renders_each_outcome() {
        let report = KitReport {
            plugin: "p 1".into(),
            checks: vec![
                CheckResult {
                    name: "a",
                    outcome: Outcome::Passed,
                },
                CheckResult {
                    name: "b",
                    outcome: Outcome::Failed("why".into()),
                },
                CheckResult {
                    name: "c",
                    outcome: Outcome::Skipped("lacks X".into()),
                },
            ],
        };
        let text = report.to_string();
        assert!(text.contains("PASS a"));
        assert!(text.contains("FAIL b: why"));
        assert!(text.contains("SKIP c: lacks X"));
        assert!(text.ends_with("3 checks, 1 failed, 1 skipped"));
        assert!(!report.passed());
        assert_eq!(
            report.outcome("c"),
            Some(&Outcome::Skipped("lacks X".into()))
        );
    }
}
