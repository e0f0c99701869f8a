//! `eval/REPORT.md`, regenerated from a run's JSON: per section the rows with the seed's figure
//! side by side, the target, the model's bound and the efficiency against it; then every row
//! that missed its target with the workload and the profile of where the time went.

use std::fmt::Write as _;
use std::path::Path;

use crate::RunResult;
use crate::row::Row;

fn num(v: f64) -> String {
    if v == 0.0 || (v.abs() >= 0.01 && v.abs() < 1e6) {
        let s = format!("{v:.2}");
        s.trim_end_matches('0').trim_end_matches('.').to_string()
    } else {
        format!("{v:.3e}")
    }
}

fn opt(v: Option<f64>) -> String {
    v.map_or_else(|| "—".to_string(), num)
}

fn verdict(r: &Row) -> &'static str {
    match r.pass {
        Some(true) => "pass",
        Some(false) => "**MISS**",
        None => "info",
    }
}

fn relative(from: &Path, to: &Path) -> String {
    let base = from.parent().unwrap_or(Path::new("."));
    to.strip_prefix(base)
        .map(|p| p.display().to_string())
        .unwrap_or_else(|_| to.display().to_string())
}

/// The issue's rows (by the section title the harness gives them) and, for a row a run may not
/// produce, why.
const ISSUE_ROWS: &[(&str, &str)] = &[
    (
        "Archive, 1 drive, 10 ×",
        "run without the `archive` section",
    ),
    (
        "Archive, a session per drive",
        "run without the `drives2` section",
    ),
    (
        "Archive of 1 000 000 objects",
        "run without the `small` section",
    ),
    (
        "Recall from a cold library",
        "run without the `firstbyte` section",
    ),
    (
        "Recall with the cartridge mounted",
        "run without the `firstbyte` section",
    ),
    ("Batching, 24 extents", "run without the `batching` section"),
    (
        "Recall order on a serpentine",
        "run without the `serpentine` section",
    ),
    (
        "One cartridge, 1000 objects",
        "run without the `random8` section",
    ),
    (
        "Mixed: 4 closed-loop readers",
        "run without the `mixed` section",
    ),
    (
        "Shoe-shining, spool-fed archive",
        "NOT IMPLEMENTED in reel-bench yet: the spool-fed 2 GiB row needs the archive path's own underrun count over a 2 GiB session; the archive rows' profiles carry `backhitch_underrun` for 2.5-10 GiB sessions meanwhile",
    ),
    ("Synthetic writer", "run without the `synthetic` section"),
    ("Host data path", "run without the `archive` section"),
    (
        "Restore from 3 drives",
        "run without the `restore3` section",
    ),
    ("Queue: ", "run without the `queue` section"),
    (
        "Catalogue with",
        "run without the `catalogue` section (PostgreSQL rows need REEL_TEST_POSTGRES_URL)",
    ),
];

/// An earlier run the report compares against, and why rows moved (written by hand).
pub struct Compared<'a> {
    /// The earlier results, merged.
    pub previous: &'a RunResult,
    /// Their files.
    pub sources: &'a [std::path::PathBuf],
    /// Markdown saying why rows moved.
    pub why: Option<&'a str>,
}

/// How far a row must move (relative) to be listed as moved.
const MOVED: f64 = 0.05;

/// Rows of `now` whose value moved by more than [`MOVED`] from the same section and measure in
/// `before`: (section, measure, unit, before, after).
fn moved<'a>(before: &RunResult, now: &'a RunResult) -> Vec<(&'a Row, f64)> {
    now.rows
        .iter()
        .filter_map(|row| {
            let old = before
                .rows
                .iter()
                .find(|o| o.section == row.section && o.measure == row.measure)?
                .value;
            let (a, b) = (old, row.value);
            if !a.is_finite() || !b.is_finite() {
                return None;
            }
            let scale = a.abs().max(b.abs());
            ((b - a).abs() > MOVED * scale && scale > 0.0).then_some((row, a))
        })
        .collect()
}

fn render_compared(s: &mut String, now: &RunResult, c: &Compared, report: &Path) {
    let names: Vec<String> = c
        .sources
        .iter()
        .map(|j| format!("`{}`", relative(report, j)))
        .collect();
    let _ = writeln!(s, "## Rows that moved since the previous report\n");
    let _ = writeln!(
        s,
        "Compared with {} (same section and measure, moved by more than {:.0} %; a measure \
         renamed or new is not listed).\n",
        names.join(", "),
        MOVED * 100.0
    );
    let rows = moved(c.previous, now);
    if rows.is_empty() {
        let _ = writeln!(s, "None.\n");
    } else {
        let _ = writeln!(
            s,
            "| Section | Measure | before | now | Unit | Basis |\n|---|---|---:|---:|---|---|"
        );
        for (row, before) in rows {
            let _ = writeln!(
                s,
                "| {} | {} | {} | {} | {} | {:?} |",
                row.section,
                row.measure,
                num(before),
                num(row.value),
                row.unit,
                row.basis
            );
        }
        let _ = writeln!(s);
    }
    if let Some(why) = c.why {
        let _ = writeln!(s, "### Why\n\n{}\n", why.trim());
    }
}

/// One torture run's report, if it reads as JSON.
fn read_run(p: &Path) -> Option<serde_json::Value> {
    std::fs::read_to_string(p)
        .ok()
        .and_then(|t| serde_json::from_str(&t).ok())
}

/// The torture runs recorded beside the results (`reel-torture --report`, `*.torture.json`):
/// one row per run with its jobs, faults, bytes and invariant violations (docs/TORTURE.md).
fn torture_section(s: &mut String, dir: &Path, report: &Path) {
    let mut runs: Vec<std::path::PathBuf> = std::fs::read_dir(dir)
        .map(|rd| {
            rd.filter_map(|e| e.ok().map(|e| e.path()))
                .filter(|p| p.to_string_lossy().ends_with(".torture.json"))
                .collect()
        })
        .unwrap_or_default();
    runs.sort();
    if runs.is_empty() {
        return;
    }
    let _ = writeln!(
        s,
        "## Torture runs (`reel-torture`, docs/TORTURE.md)\n\n\
         Two `reel worker` processes sharing one simulated library (INSTANT clock) and one store, \
         four clients, a fault every 1.5 s on average. Modelled drive hours are SIMULATED (the \
         library's busy time, summed over drives); wall seconds are MEASURED; *modelled/wall* is \
         modelled hours per drive over wall hours.\n\n\
         | run | seed | db | wall s | modelled drive h | modelled/wall | jobs (done / failed / other) | by kind | faults placed | kill -9 | SIGSTOP | MB archived | MB recalled | objects acknowledged | violations |\n\
         | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- |"
    );
    for p in &runs {
        let Some(v) = read_run(p) else {
            let _ = writeln!(
                s,
                "| `{}` | unreadable | | | | | | | | | | | | | |",
                relative(report, p)
            );
            continue;
        };
        let t = &v["tally"];
        let count = |m: &serde_json::Value, pred: &dyn Fn(&str) -> bool| -> u64 {
            m.as_object()
                .map(|o| {
                    o.iter()
                        .filter(|(k, _)| pred(k))
                        .map(|(_, n)| n.as_u64().unwrap_or(0))
                        .sum()
                })
                .unwrap_or(0)
        };
        let ended = &t["ended"];
        let done = count(ended, &|k| k.ends_with(" done"));
        let failed = count(ended, &|k| k.ends_with(" failed"));
        let other = count(ended, &|k| !k.ends_with(" done") && !k.ends_with(" failed"));
        let kinds: Vec<String> = t["submitted"]
            .as_object()
            .map(|o| o.iter().map(|(k, n)| format!("{k} {n}")).collect())
            .unwrap_or_default();
        let faults = count(&t["faults"], &|_| true);
        let violations = v["violations"].as_array().map_or(0, Vec::len);
        let _ = writeln!(
            s,
            "| `{}` | {} | {} | {} | {} | {} | {done} / {failed} / {other} | {} | {faults} | {} | {} | {} | {} | {} | {} |",
            relative(report, p),
            v["seed"],
            v["db"].as_str().unwrap_or("?"),
            num(v["wall_seconds"].as_f64().unwrap_or(0.0)),
            num(v["modelled_drive_hours"].as_f64().unwrap_or(0.0)),
            num(v["modelled_to_wall"].as_f64().unwrap_or(0.0)),
            kinds.join(", "),
            t["faults"]["kill -9"].as_u64().unwrap_or(0),
            t["faults"]["SIGSTOP"].as_u64().unwrap_or(0),
            num(t["bytes_archived"].as_f64().unwrap_or(0.0) / 1e6),
            num(t["bytes_recalled"].as_f64().unwrap_or(0.0) / 1e6),
            v["acknowledged"],
            if violations == 0 {
                "0".to_string()
            } else {
                format!("**{violations}**")
            },
        );
    }
    let _ = writeln!(s, "\nFaults placed, by kind:\n");
    for p in &runs {
        let Some(v) = read_run(p) else {
            continue;
        };
        let kinds: Vec<String> = v["tally"]["faults"]
            .as_object()
            .map(|o| o.iter().map(|(k, n)| format!("{k} {n}")).collect())
            .unwrap_or_default();
        let _ = writeln!(s, "- `{}`: {}", relative(report, p), kinds.join(", "));
    }
    let _ = writeln!(
        s,
        "\nCorruption that took effect (the library's log) against what reel's checks caught \
         (`reel library integrity`), invariant `corruption-caught`:\n"
    );
    for p in &runs {
        let Some(v) = read_run(p) else {
            continue;
        };
        let c = &v["corruption"];
        if c.is_null() {
            let _ = writeln!(
                s,
                "- `{}`: not counted (run before reel kept its catches)",
                relative(report, p)
            );
            continue;
        }
        let list = |m: &serde_json::Value| -> String {
            m.as_object()
                .map(|o| {
                    o.iter()
                        .map(|(k, n)| format!("{} {n}", k.trim_start_matches("fired_")))
                        .collect::<Vec<_>>()
                        .join(", ")
                })
                .unwrap_or_default()
        };
        let r = &v["retries"];
        let _ = writeln!(
            s,
            "- `{}`: took effect: {}; caught: {}; matched {}, lost with a killed process {}, \
             outside live data {}, lost with the drive buffer {}, **missed {}**, **unexplained {}**; \
             tape requests {}, retried {}, most failed attempts of one {}",
            relative(report, p),
            list(&c["injected"]),
            list(&c["caught"]),
            c["matched"],
            c["excused_by_kill"],
            c["outside_live_data"],
            c["voided"],
            c["missed"],
            c["unexplained"],
            r["requests"],
            r["retried"],
            r["most_attempts"],
        );
    }
    let _ = writeln!(s);
}

/// Render the report.
pub fn render(
    r: &RunResult,
    sources: &[std::path::PathBuf],
    plots: &[std::path::PathBuf],
    report: &Path,
    compared: Option<Compared>,
) -> String {
    let mut s = String::new();
    let _ = writeln!(s, "# reel benchmark report\n");
    let names: Vec<String> = sources
        .iter()
        .map(|j| format!("`{}`", relative(report, j)))
        .collect();
    let _ = writeln!(
        s,
        "Generated by `reel-bench` from {}{} — do not edit by hand; rerun the bench.\n",
        names.join(", "),
        if names.len() > 1 {
            " (a later file's sections replace the same sections of earlier ones)"
        } else {
            ""
        }
    );
    let fails = r.failures();
    let _ = writeln!(
        s,
        "- Run: **{}** ({} build), {}, {:.0} s wall, host {}\n- Gate: **{}** ({} rows, {} missed)\n\
         - Simulator: `{}`, config `{}`\n",
        r.mode,
        r.profile,
        r.date,
        r.wall_s,
        r.host,
        if fails.is_empty() { "PASS" } else { "FAIL" },
        r.rows.len(),
        fails.len(),
        r.plugin,
        r.sim_config
    );
    let _ = writeln!(
        s,
        "SIMULATED figures are the simulator's modelled time (drive busy time, LTO-9-class model, \
         INSTANT clock): they say what the model says, never what hardware does. MEASURED \
         figures are wall clock or CPU time on the host above, compared with a baseline \
         measured in the same run. *Bound* is the model's lower bound for the workload (best \
         possible); *efficiency* is reel against it (1 = the model's best). Seed figures are \
         seed 000 §4 (the JVM binding this project reproduces and beats).\n"
    );
    let _ = writeln!(
        s,
        "Commands: `cargo build -p reel-plugin-sim && cargo run -p reel-bench -- --quick` (CI); \
         full run: `cargo build --release -p reel-plugin-sim -p reel-bench && \
         target/release/reel-bench`; `reel-bench --from-json FILE` regenerates this page.\n"
    );
    if let Some(c) = &compared {
        render_compared(&mut s, r, c, report);
    }
    let mut sections: Vec<&str> = Vec::new();
    for row in &r.rows {
        if !sections.contains(&row.section.as_str()) {
            sections.push(&row.section);
        }
    }
    for sec in &sections {
        let _ = writeln!(s, "## {sec}\n");
        let _ = writeln!(
            s,
            "| Measure | reel | Unit | Basis | Seed | Target | Bound | Efficiency | Verdict |\n\
             |---|---:|---|---|---:|---|---:|---:|---|"
        );
        let rows: Vec<&Row> = r.rows.iter().filter(|x| x.section == *sec).collect();
        for row in &rows {
            let _ = writeln!(
                s,
                "| {} | {} | {} | {:?} | {} | {} | {} | {} | {} |",
                row.measure,
                num(row.value),
                row.unit,
                row.basis,
                opt(row.seed_value),
                if row.target_text.is_empty() {
                    "—"
                } else {
                    &row.target_text
                },
                opt(row.bound),
                row.efficiency
                    .map_or_else(|| "—".to_string(), |e| format!("{:.1} %", e * 100.0)),
                verdict(row)
            )
            .map(|_| ());
        }
        let mut notes: Vec<&str> = rows
            .iter()
            .map(|x| x.note.as_str())
            .filter(|n| !n.is_empty())
            .collect();
        notes.dedup();
        if !notes.is_empty() {
            let _ = writeln!(s, "\nWorkload and notes:\n");
            for n in notes {
                let _ = writeln!(s, "- {n}");
            }
        }
        let _ = writeln!(s);
    }
    let missing: Vec<&(&str, &str)> = ISSUE_ROWS
        .iter()
        .filter(|(prefix, _)| !r.rows.iter().any(|x| x.section.starts_with(prefix)))
        .collect();
    if !missing.is_empty() {
        let _ = writeln!(s, "## Issue rows not measured by this run\n");
        for (prefix, why) in missing {
            let _ = writeln!(s, "- **{prefix}**: {why}");
        }
        let _ = writeln!(s);
    }
    let _ = writeln!(s, "## Rows that missed their target\n");
    if fails.is_empty() {
        let _ = writeln!(s, "None.\n");
    }
    for row in fails {
        let _ = writeln!(
            s,
            "### {} — {}\n\nreel {} {} against {}{}.\n\n{}\n\nWhere the time goes (profile):\n\n```json\n{}\n```\n",
            row.section,
            row.measure,
            num(row.value),
            row.unit,
            row.target_text,
            row.bound
                .map(|b| format!("; model bound {}", num(b)))
                .unwrap_or_default(),
            row.note,
            serde_json::to_string_pretty(&row.profile).unwrap_or_default()
        );
    }
    // CPU profiles recorded beside the results (`perf report --stdio` output, *.perf.txt).
    let dir = sources
        .first()
        .and_then(|j| j.parent())
        .unwrap_or(Path::new("."));
    let mut perf: Vec<std::path::PathBuf> = std::fs::read_dir(dir)
        .map(|rd| {
            rd.filter_map(|e| e.ok().map(|e| e.path()))
                .filter(|p| p.to_string_lossy().ends_with(".perf.txt"))
                .collect()
        })
        .unwrap_or_default();
    perf.sort();
    if !perf.is_empty() {
        let _ = writeln!(s, "## CPU profiles (perf, MEASURED)\n");
        for p in perf {
            let text = std::fs::read_to_string(&p).unwrap_or_default();
            let head: Vec<&str> = text
                .lines()
                .filter(|l| !l.starts_with('#') && !l.trim().is_empty())
                .take(30)
                .collect();
            let _ = writeln!(
                s,
                "`{}` (top of the flat profile):\n\n```text\n{}\n```\n",
                relative(report, &p),
                head.join("\n")
            );
        }
    }
    torture_section(&mut s, dir, report);
    if !plots.is_empty() {
        let _ = writeln!(s, "## Plots\n");
        for p in plots {
            let rel = relative(report, p);
            if rel.ends_with(".svg") {
                let _ = writeln!(s, "![{rel}]({rel})\n");
            }
        }
    }
    s
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::row::{Basis, Target};

    #[test]
    fn a_missed_row_is_explained_with_its_profile() {
        let r = RunResult {
            mode: "quick".into(),
            date: "2026-11-30".into(),
            started_unix: 0,
            wall_s: 1.0,
            profile: "debug".into(),
            host: "h".into(),
            plugin: "p".into(),
            sim_config: "c".into(),
            rows: vec![
                Row::info("S", "rate", 100.0, "MB/s", Basis::Simulated)
                    .target(Target::AtLeast(370.0), "≥ 370 MB/s")
                    .seed(66.2)
                    .bound(400.0)
                    .note("backhitches after every filemark")
                    .profile(serde_json::json!({"backhitch_sync": 9})),
            ],
        };
        let md = render(
            &r,
            &[
                "/x/eval/results/a.json".into(),
                "/x/eval/results/b.json".into(),
            ],
            &[],
            Path::new("/x/eval/REPORT.md"),
            None,
        );
        assert!(md.contains("from `results/a.json`, `results/b.json` (a later file's"));
        assert!(md.contains("Gate: **FAIL**"));
        assert!(md.contains(
            "| rate | 100 | MB/s | Simulated | 66.2 | ≥ 370 MB/s | 400 | 25.0 % | **MISS** |"
        ));
        assert!(md.contains("backhitch_sync"));
        assert!(md.contains("results/a.json"));
    }

    fn run(rows: Vec<Row>) -> RunResult {
        RunResult {
            mode: "full".into(),
            date: "2026-12-03".into(),
            started_unix: 0,
            wall_s: 1.0,
            profile: "release".into(),
            host: "h".into(),
            plugin: "p".into(),
            sim_config: "c".into(),
            rows,
        }
    }

    #[test]
    fn rows_that_moved_are_listed_with_why() {
        let before = run(vec![
            Row::info("S", "a", 100.0, "x", Basis::Simulated),
            Row::info("S", "b", 100.0, "x", Basis::Simulated),
            Row::info("S", "gone", 1.0, "x", Basis::Simulated),
        ]);
        let now = run(vec![
            Row::info("S", "a", 104.0, "x", Basis::Simulated),
            Row::info("S", "b", 60.0, "x", Basis::Simulated),
            Row::info("S", "new", 1.0, "x", Basis::Simulated),
        ]);
        let moved = moved(&before, &now);
        assert_eq!(moved.len(), 1, "only b moved by more than 5 %");
        assert_eq!((moved[0].0.measure.as_str(), moved[0].1), ("b", 100.0));
        let md = render(
            &now,
            &["/x/eval/results/now.json".into()],
            &[],
            Path::new("/x/eval/REPORT.md"),
            Some(Compared {
                previous: &before,
                sources: &["/x/eval/results/old.json".into()],
                why: Some("b fell because of the scheduler."),
            }),
        );
        assert!(md.contains("Compared with `results/old.json`"), "{md}");
        assert!(md.contains("| S | b | 100 | 60 | x | Simulated |"), "{md}");
        assert!(
            md.contains("### Why\n\nb fell because of the scheduler."),
            "{md}"
        );
    }
}
