//! The memtape plugin, written in C against the checked-in header, compiled here with `cc`,
//! loaded through `Plugin::load` (dlopen) and run through the whole contract kit.

mod common;

use reel_plugin_abi::host::{LibraryHandle, Plugin};
use reel_plugin_abi::kit::{self, KitOptions, Outcome};
use reel_plugin_abi::types::*;

fn build(dir: &std::path::Path, name: &str, defines: &[&str]) -> std::sync::Arc<Plugin> {
    let so = common::compile_c(dir, name, &common::memtape_source(), defines);
    Plugin::load(&so).unwrap_or_else(|e| panic!("load {}: {e}", so.display()))
}

#[test]
fn c_plugin_passes_the_whole_kit() {
    let dir = tempfile::tempdir().expect("temp dir");
    let plugin = build(dir.path(), "memtape", &[]);
    assert_eq!(plugin.name(), "memtape");
    assert_eq!(plugin.version(), "1.0.0");
    assert_eq!(
        plugin.struct_size() as usize,
        std::mem::size_of::<ReelPluginV1>()
    );
    assert_eq!(plugin.abi_minor(), REEL_ABI_MINOR);
    let report = kit::run(&plugin, "", &KitOptions::default());
    println!("{report}");
    assert!(report.passed(), "the C plugin failed the kit:\n{report}");
    // memtape claims every capability the kit checks, so nothing may be skipped.
    for c in &report.checks {
        assert_eq!(
            c.outcome,
            Outcome::Passed,
            "check {} did not pass:\n{report}",
            c.name
        );
    }
    assert!(report.checks.len() >= 20, "too few checks ran:\n{report}");
}

/// A plugin built against the frozen v1.0 header (`tests/c/v1_0/reel_plugin.h`, the header as
/// it was before `library_info`) loads into this host and passes the whole kit: the minor
/// version only ever appends.
#[test]
fn a_plugin_built_against_the_frozen_v1_0_header_passes() {
    let dir = tempfile::tempdir().expect("temp dir");
    // `#include "reel_plugin.h"` looks beside the source first, so this copy wins over `-I`.
    std::fs::copy(
        common::crate_dir().join("tests/c/v1_0/reel_plugin.h"),
        dir.path().join("reel_plugin.h"),
    )
    .expect("copy the frozen header");
    let plugin = build(dir.path(), "memtape10", &["MEMTAPE_ABI_V1_0"]);
    assert_eq!(plugin.abi_minor(), 0);
    assert_eq!(plugin.struct_size(), 256, "the v1.0 table");
    assert!(plugin.table().library_info.is_none());
    let report = kit::run(&plugin, "", &KitOptions::default());
    println!("{report}");
    assert!(report.passed(), "the v1.0 plugin failed the kit:\n{report}");
}

/// ABI 1.3 appended error counters to `ReelDriveStats` (valid bits 16-19): a plugin of an
/// earlier minor that sets those bits anyway (its struct has no such fields) is not believed.
#[test]
fn an_older_plugins_stray_statistics_bits_are_not_believed() {
    let dir = tempfile::tempdir().expect("temp dir");
    std::fs::copy(
        common::crate_dir().join("tests/c/v1_0/reel_plugin.h"),
        dir.path().join("reel_plugin.h"),
    )
    .expect("copy the frozen header");
    let plugin = build(
        dir.path(),
        "memtape10_stray",
        &["MEMTAPE_ABI_V1_0", "MEMTAPE_STRAY_STATS_BITS"],
    );
    assert_eq!(plugin.abi_minor(), 0);
    let mut lib = LibraryHandle::open(&plugin, "").expect("library_open");
    let mut drive = lib.open_drive(0).expect("drive 0");
    let st = drive.statistics().expect("statistics");
    assert_ne!(st.valid & (1 << 4), 0, "its own counters stand");
    assert_eq!(st.valid >> 16, 0, "bits past its struct are cleared");
    assert_eq!(
        (st.read_errors_uncorrected, st.write_errors_uncorrected),
        (0, 0)
    );
}

/// ABI 1.2: what a plugin logs through the host's `set_log` sink lands in the host's `tracing`
/// (target `reel_plugin`) with the plugin's name; a more verbose level than the host records
/// is not sent.
#[test]
fn a_c_plugins_log_reaches_the_host_with_its_name() {
    let buf = common::LogBuffer::default();
    let subscriber = tracing_subscriber::fmt()
        .with_writer(buf.clone())
        .with_ansi(false)
        .with_max_level(tracing::Level::INFO)
        .finish();
    let _scope = tracing::subscriber::set_default(subscriber);
    let dir = tempfile::tempdir().expect("temp dir");
    let plugin = build(dir.path(), "memtape_log", &[]);
    assert!(plugin.table().set_log.is_some());
    let lib = LibraryHandle::open(&plugin, "").expect("library_open");
    drop(lib);
    let text = buf.text();
    assert!(
        text.contains("reel_plugin") && text.contains("plugin=memtape"),
        "{text}"
    );
    assert!(
        text.contains("memtape library open: 1 drive, 6 slots, 3 cartridges"),
        "{text}"
    );
}

#[test]
fn kit_passes_on_a_reused_worm_cartridge() {
    // `worm_prewritten=1` starts the WORM cartridge with two records, as on a second kit run
    // against real media: the WORM check must append at EOD and refuse the rest.
    let dir = tempfile::tempdir().expect("temp dir");
    let plugin = build(dir.path(), "memtape", &[]);
    let report = kit::run(&plugin, "worm_prewritten=1", &KitOptions::default());
    assert_eq!(report.outcome("worm"), Some(&Outcome::Passed), "{report}");
    assert!(report.passed(), "{report}");
}

#[test]
fn kit_honours_barcode_options() {
    let dir = tempfile::tempdir().expect("temp dir");
    let plugin = build(dir.path(), "memtape", &[]);
    let opts = KitOptions {
        scratch_barcode: Some("MEM002L9".into()),
        ..KitOptions::default()
    };
    assert!(kit::run(&plugin, "", &opts).passed());
    let opts = KitOptions {
        scratch_barcode: Some("NOSUCH".into()),
        ..KitOptions::default()
    };
    let report = kit::run(&plugin, "", &opts);
    match report.outcome("load_unload") {
        Some(Outcome::Failed(why)) => assert!(why.contains("NOSUCH"), "{why}"),
        other => panic!("load_unload should fail for a missing barcode, got {other:?}"),
    }
}

#[test]
fn kit_catches_a_missing_unit_attention() {
    let dir = tempfile::tempdir().expect("temp dir");
    let plugin = build(
        dir.path(),
        "memtape_no_ua",
        &["MEMTAPE_BREAK_UNIT_ATTENTION"],
    );
    let report = kit::run(&plugin, "", &KitOptions::default());
    match report.outcome("unit_attention") {
        Some(Outcome::Failed(why)) => assert!(why.contains("6/28/00"), "{why}"),
        other => panic!("unit_attention should fail, got {other:?}:\n{report}"),
    }
    assert_eq!(
        report.failures().count(),
        1,
        "only unit_attention should fail:\n{report}"
    );
}

#[test]
fn kit_catches_lbp_accepting_a_bad_crc() {
    let dir = tempfile::tempdir().expect("temp dir");
    let plugin = build(dir.path(), "memtape_bad_lbp", &["MEMTAPE_BREAK_LBP"]);
    let report = kit::run(&plugin, "", &KitOptions::default());
    match report.outcome("records.lbp") {
        Some(Outcome::Failed(why)) => assert!(why.contains("B/10/01"), "{why}"),
        other => panic!("records.lbp should fail, got {other:?}:\n{report}"),
    }
}

#[test]
fn kit_catches_early_warning_writes_that_are_dropped_and_recovers() {
    let dir = tempfile::tempdir().expect("temp dir");
    let plugin = build(
        dir.path(),
        "memtape_bad_ew",
        &["MEMTAPE_BREAK_EARLY_WARNING"],
    );
    let report = kit::run(&plugin, "", &KitOptions::default());
    match report.outcome("early_warning") {
        Some(Outcome::Failed(why)) => assert!(why.contains("must be written"), "{why}"),
        other => panic!("early_warning should fail, got {other:?}:\n{report}"),
    }
    // The kit reloads after a failed early-warning check, so later checks start clean.
    assert_eq!(report.outcome("worm"), Some(&Outcome::Passed), "{report}");
}

#[test]
fn null_slots_are_unsupported() {
    let dir = tempfile::tempdir().expect("temp dir");
    let plugin = build(dir.path(), "memtape", &[]);
    assert!(plugin.table().drive_tape_alerts.is_none());
    let mut lib = LibraryHandle::open(&plugin, "").expect("open");
    let e = lib
        .import(768, 1024)
        .expect_err("import is NULL in memtape");
    assert_eq!(e.code, REEL_E_UNSUPPORTED);
    let mut drive = lib.open_drive(0).expect("drive 0");
    assert_eq!(
        drive.tape_alerts().expect_err("NULL slot").code,
        REEL_E_UNSUPPORTED
    );
    assert_eq!(
        drive.geometry().expect_err("NULL slot").code,
        REEL_E_UNSUPPORTED
    );
    let info = drive.info().expect("info");
    assert_eq!(
        (info.vendor.as_str(), info.product.as_str()),
        ("REEL", "MEMTAPE")
    );
    // No cartridge in the drive: NOT READY 2/3A/00.
    let e = drive.test_ready().expect_err("empty drive");
    assert_eq!(e.sense(), (sense_key::NOT_READY, 0x3A, 0x00));
    assert!(lib.open_drive(1).is_err(), "memtape has one drive");
}

#[test]
fn runner_prints_every_check_and_exits_by_outcome() {
    let dir = tempfile::tempdir().expect("temp dir");
    let exe = env!("CARGO_BIN_EXE_reel-plugin-check");
    let good = common::compile_c(dir.path(), "memtape", &common::memtape_source(), &[]);
    let out = std::process::Command::new(exe)
        .arg(&good)
        .output()
        .expect("run the runner");
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(out.status.success(), "runner failed on memtape:\n{text}");
    for name in [
        "PASS inventory",
        "PASS unit_attention",
        "PASS records.lbp",
        "PASS worm",
    ] {
        assert!(text.contains(name), "runner output lacks {name}:\n{text}");
    }
    // Each check is named on stderr before it runs (a plugin that crashes shows where).
    let progress = String::from_utf8_lossy(&out.stderr);
    for name in ["library_open", "inventory", "records.lbp", "worm"] {
        assert!(
            progress.contains(&format!("running {name}\n")),
            "no progress line for {name}:\n{progress}"
        );
    }

    let broken = common::compile_c(
        dir.path(),
        "memtape_no_ua",
        &common::memtape_source(),
        &["MEMTAPE_BREAK_UNIT_ATTENTION"],
    );
    let out = std::process::Command::new(exe)
        .arg(&broken)
        .output()
        .expect("run the runner");
    let text = String::from_utf8_lossy(&out.stdout);
    assert_eq!(out.status.code(), Some(1), "{text}");
    assert!(text.contains("FAIL unit_attention"), "{text}");

    let missing = dir.path().join("missing.so");
    let out = std::process::Command::new(exe)
        .arg(&missing)
        .output()
        .expect("run the runner");
    assert_eq!(out.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&out.stderr).contains("missing.so"));
}
