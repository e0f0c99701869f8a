//! Fault paths through the engine, on the simulator loaded through dlopen (INSTANT clock) and
//! on both databases: a power cut and a drive death in the middle of a session, a medium error
//! on one copy, end of medium and early warning in the middle of an archive. In every case
//! every acknowledged object recalls intact, nothing unacknowledged is reported as archived, and
//! the simulator counts no write anywhere but at end of data.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use reel_engine::catalogue::{CartridgeState, Catalogue};
use reel_engine::service::{RecallRequest, ServiceOptions, TapeService, recall_options};
use reel_engine::session::order::OrderPolicy;
use reel_engine::session::{CancelToken, SessionConfig, VerifyMode, no_progress};
use reel_tests::*;

struct Batch {
    _dir: tempfile::TempDir,
    items: Vec<(String, PathBuf)>,
    sums: BTreeMap<String, [u8; 32]>,
}

fn batch(prefix: &str, n: usize, size: u64, seed: u64) -> Batch {
    let dir = tempfile::tempdir().unwrap();
    let mut items = Vec::new();
    let mut sums = BTreeMap::new();
    for i in 0..n {
        let key = format!("{prefix}/{i:04}");
        let p = dir.path().join(format!("f{i}"));
        let s = write_random_file(&p, size + i as u64, seed * 100_000 + i as u64);
        sums.insert(key.clone(), s);
        items.push((key, p));
    }
    Batch {
        _dir: dir,
        items,
        sums,
    }
}

fn options(verify: VerifyMode) -> ServiceOptions {
    ServiceOptions {
        session: SessionConfig {
            container_bytes: 8 << 20,
            barrier_bytes: 16 << 20,
            verify,
            ..SessionConfig::default()
        },
        default_capacity_bytes: 2 << 30,
        ..ServiceOptions::default()
    }
}

async fn open(url: &str, lib: &Path, verify: VerifyMode) -> TapeService {
    let catalogue = Catalogue::open(url).await.unwrap();
    catalogue
        .ensure_storage_class("one", &["p1".to_string()])
        .await
        .unwrap();
    catalogue
        .ensure_storage_class("two", &["p1".to_string(), "p2".to_string()])
        .await
        .unwrap();
    let cfg = sim_config(
        lib,
        &[
            ("sim.capacity_bytes", "2147483648"),
            ("sim.early_warning_percent", "90"),
        ],
    );
    // A library directory is opened by one library at a time; a just-closed one may still be
    // releasing its lock on its threads.
    let mut last = None;
    for _ in 0..50 {
        match TapeService::open(
            catalogue.clone(),
            &plugin_path("reel_plugin_sim"),
            &cfg,
            options(verify),
        )
        .await
        {
            Ok(s) => return s,
            Err(e) => {
                last = Some(e.to_string());
                tokio::time::sleep(std::time::Duration::from_millis(100)).await;
            }
        }
    }
    panic!("cannot open the simulated library: {last:?}");
}

/// Recall `keys` into a fresh directory and compare with `sums`; returns the report.
async fn recall_all(
    svc: &TapeService,
    sums: &BTreeMap<String, [u8; 32]>,
    keys: &[String],
) -> reel_engine::service::RecallBatchReport {
    let dst = tempfile::tempdir().unwrap();
    let reqs = keys
        .iter()
        .map(|k| RecallRequest {
            key: k.clone(),
            root: dst.path().to_path_buf(),
        })
        .collect();
    let rep = svc
        .recall(
            reqs,
            &recall_options(svc.session_config(), OrderPolicy::Auto),
            &CancelToken::new(),
            no_progress(),
        )
        .await
        .unwrap();
    assert!(rep.failed.is_empty(), "recall failed: {:?}", rep.failed);
    for k in keys {
        assert_eq!(sha256_file(&dst.path().join(k)), sums[k], "{k} differs");
    }
    rep
}

async fn violations(svc: &TapeService) -> u64 {
    let c = svc.library().control(r#"{"op":"counters"}"#).await.unwrap();
    let v: serde_json::Value = serde_json::from_str(&c).unwrap();
    v["violations"].as_u64().expect("violations counter")
}

/// Every object the catalogue lists recalls intact and is one we wrote.
async fn listed_objects_are_intact(svc: &TapeService, sums: &BTreeMap<String, [u8; 32]>) -> usize {
    let listed: Vec<String> = svc
        .catalogue()
        .list_objects("", 1_000_000)
        .await
        .unwrap()
        .into_iter()
        .map(|o| o.key)
        .collect();
    for k in &listed {
        assert!(
            sums.contains_key(k),
            "catalogue lists {k}, which was never archived"
        );
    }
    recall_all(svc, sums, &listed).await;
    listed.len()
}

/// Arm a fault (`fields`: its kind and arguments) on both drives: whichever writes next meets it.
async fn arm_on_both_drives(svc: &TapeService, fields: &str) {
    for d in 0..2 {
        let req = format!(r#"{{"op":"fault","drive":{d},{fields}}}"#);
        svc.library()
            .control(&req)
            .await
            .unwrap_or_else(|e| panic!("{req}: {e}"));
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn power_cut_mid_session_loses_nothing_acknowledged() {
    init_tracing();
    for backend in backends("power_cut_mid_session").await {
        let lib = tempfile::tempdir().unwrap();
        let a = batch("a", 20, 1 << 20, 1);
        let b = batch("b", 120, 512 << 10, 2);
        let mut sums = a.sums.clone();
        sums.extend(b.sums.clone());
        {
            let svc = open(&backend.url(), lib.path(), VerifyMode::None).await;
            svc.archive(a.items.clone(), "one", &CancelToken::new(), no_progress())
                .await
                .unwrap();
            // The power goes once 24 more records are written (past the first 16 MiB barrier),
            // whichever drive writes them: a point in the session no scheduler can move.
            arm_on_both_drives(&svc, r#""kind":"power_cut","after_records":24"#).await;
            let r = svc
                .archive(b.items.clone(), "one", &CancelToken::new(), no_progress())
                .await;
            assert!(
                r.is_err(),
                "{}: the archive survived a power cut mid-session",
                backend.name()
            );
        }
        // The host comes back: a new service recovers the cartridges with pending containers.
        let svc = open(&backend.url(), lib.path(), VerifyMode::None).await;
        // The failed session already marked its unacknowledged containers dead; a crash that
        // left some pending is recovered here (the tail past the last barrier is closed when
        // the cartridge is next written).
        let rec = svc.recover_pending().await.unwrap();
        assert!(
            rec.iter().all(|(_, r)| r.lost_durable.is_empty()),
            "{rec:?}"
        );
        let a_keys: Vec<String> = a.sums.keys().cloned().collect();
        recall_all(&svc, &sums, &a_keys).await;
        let listed = listed_objects_are_intact(&svc, &sums).await;
        assert!(
            listed < sums.len(),
            "{}: every object of the cut archive is listed",
            backend.name()
        );
        // The retried archive completes; everything recalls.
        svc.archive(b.items.clone(), "one", &CancelToken::new(), no_progress())
            .await
            .unwrap();
        let all: Vec<String> = sums.keys().cloned().collect();
        recall_all(&svc, &sums, &all).await;
        assert_eq!(violations(&svc).await, 0);
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn drive_death_mid_session_loses_nothing_acknowledged() {
    init_tracing();
    for backend in backends("drive_death_mid_session").await {
        let lib = tempfile::tempdir().unwrap();
        let a = batch("a", 10, 1 << 20, 3);
        let b = batch("b", 60, 1 << 20, 4);
        let mut sums = a.sums.clone();
        sums.extend(b.sums.clone());
        {
            let svc = open(&backend.url(), lib.path(), VerifyMode::Full).await;
            svc.archive(a.items.clone(), "one", &CancelToken::new(), no_progress())
                .await
                .unwrap();
            // Both drives die after 25 more records: whichever one writes dies mid-session.
            arm_on_both_drives(&svc, r#""kind":"drive_dies","after_records":25"#).await;
            let r = svc
                .archive(b.items.clone(), "one", &CancelToken::new(), no_progress())
                .await;
            assert!(
                r.is_err(),
                "{}: the archive survived a dead drive",
                backend.name()
            );
            // The robot pulls the cartridges and the drives are replaced.
            for d in 0..2 {
                svc.library()
                    .control(&format!(r#"{{"op":"robot_recover","drive":{d}}}"#))
                    .await
                    .unwrap();
            }
        }
        let svc = open(&backend.url(), lib.path(), VerifyMode::Full).await;
        svc.recover_pending().await.unwrap();
        let a_keys: Vec<String> = a.sums.keys().cloned().collect();
        recall_all(&svc, &sums, &a_keys).await;
        listed_objects_are_intact(&svc, &sums).await;
        svc.archive(b.items.clone(), "one", &CancelToken::new(), no_progress())
            .await
            .unwrap();
        let all: Vec<String> = sums.keys().cloned().collect();
        recall_all(&svc, &sums, &all).await;
        assert_eq!(violations(&svc).await, 0);
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn medium_error_on_one_copy_recalls_from_the_other() {
    init_tracing();
    for backend in backends("medium_error_on_one_copy").await {
        let lib = tempfile::tempdir().unwrap();
        let svc = open(&backend.url(), lib.path(), VerifyMode::Full).await;
        let b = batch("m", 12, 300_000, 5);
        svc.archive(b.items.clone(), "two", &CancelToken::new(), no_progress())
            .await
            .unwrap();
        let key = "m/0007".to_string();
        let obj = svc.catalogue().object(&key).await.unwrap().unwrap();
        let copies = svc.catalogue().copies(&key, obj.generation).await.unwrap();
        assert_eq!(copies.len(), 2);
        // Damage every copy's cartridge that the recall could pick first: the one it prefers
        // is the first by barcode; damage that one only.
        let bad = copies.iter().min_by_key(|c| c.barcode.clone()).unwrap();
        let block = bad.container_first_block + 1 + bad.offset / bad.record_size as u64;
        svc.library()
            .control(&format!(
                r#"{{"op":"fault","kind":"medium_error","barcode":"{}","block":{block}}}"#,
                bad.barcode
            ))
            .await
            .unwrap();
        let rep = recall_all(&svc, &b.sums, std::slice::from_ref(&key)).await;
        assert_eq!(rep.objects, 1);
        assert_eq!(
            rep.bad_copies.len(),
            1,
            "the bad copy is reported: {:?}",
            rep.bad_copies
        );
        assert_eq!(rep.bad_copies[0].barcode, bad.barcode);
        assert_eq!(violations(&svc).await, 0);
    }
}

async fn eom_case(kind: &str) {
    for backend in backends(&format!("{kind}_mid_archive")).await {
        let lib = tempfile::tempdir().unwrap();
        let svc = open(&backend.url(), lib.path(), VerifyMode::Full).await;
        // Label two cartridges first, so the fault is armed on a loaded tape's next load.
        for d in 0..2 {
            svc.library()
                .control(&format!(
                    r#"{{"op":"fault","kind":"{kind}","drive":{d},"bytes":12000000}}"#
                ))
                .await
                .unwrap();
        }
        let b = batch("e", 40, 1 << 20, 6);
        let rep = svc
            .archive(b.items.clone(), "one", &CancelToken::new(), no_progress())
            .await
            .unwrap();
        assert_eq!(rep.objects, 40);
        // The cartridge that met the fault is marked full, and the archive went on elsewhere.
        let full: Vec<String> = svc
            .catalogue()
            .cartridges()
            .await
            .unwrap()
            .into_iter()
            .filter(|c| c.state == CartridgeState::Full)
            .map(|c| c.barcode)
            .collect();
        assert!(
            !full.is_empty(),
            "{}: {kind}: no cartridge marked full",
            backend.name()
        );
        assert!(
            rep.cartridges[0].iter().any(|b| !full.contains(b)),
            "{}: {kind}: the archive did not continue on another cartridge: {:?}",
            backend.name(),
            rep.cartridges
        );
        let keys: Vec<String> = b.sums.keys().cloned().collect();
        recall_all(&svc, &b.sums, &keys).await;
        assert_eq!(violations(&svc).await, 0);
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn end_of_medium_mid_archive_completes_on_the_next_cartridge() {
    init_tracing();
    eom_case("end_of_medium").await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn early_warning_mid_archive_closes_the_cartridge_cleanly() {
    init_tracing();
    eom_case("early_warning").await;
}

/// Where a fault is aimed.
enum Aim {
    /// At both drives (whichever one writes next meets it).
    Drives(&'static str),
    /// At a data block of the given copy's cartridge of an archived object.
    Block(&'static str),
    /// At the first copy's cartridge.
    Cartridge(&'static str),
    /// At the library.
    Library(&'static str),
}

/// Every fault the simulator can inject, aimed at an archive in progress or at what is on
/// tape: afterwards every acknowledged object recalls intact (from another copy where one is
/// damaged), what the catalogue lists is intact, and no write went anywhere but EOD.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_simulator_fault_loses_nothing_acknowledged() {
    init_tracing();
    let faults: Vec<(&str, Aim)> = vec![
        (
            "corrupt_write",
            Aim::Drives(r#""kind":"corrupt_write","offset":100"#),
        ),
        (
            "corrupt_read",
            Aim::Drives(r#""kind":"corrupt_read","offset":100"#),
        ),
        ("medium_error", Aim::Block(r#""kind":"medium_error""#)),
        (
            "deferred_write_error",
            Aim::Drives(r#""kind":"deferred_write_error""#),
        ),
        (
            "short_write",
            Aim::Drives(r#""kind":"short_write","bytes":1000"#),
        ),
        (
            "silent_corrupt_write",
            Aim::Drives(r#""kind":"silent_corrupt_write","offset":7"#),
        ),
        (
            "corrupt_stored",
            Aim::Block(r#""kind":"corrupt_stored","offset":9"#),
        ),
        ("unit_attention", Aim::Drives(r#""kind":"unit_attention""#)),
        ("position_lost", Aim::Drives(r#""kind":"position_lost""#)),
        ("drive_fault", Aim::Drives(r#""kind":"drive_fault""#)),
        (
            "cleaning_required",
            Aim::Drives(r#""kind":"cleaning_required""#),
        ),
        (
            "drive_dies",
            Aim::Drives(r#""kind":"drive_dies","after_records":5"#),
        ),
        (
            "early_warning",
            Aim::Drives(r#""kind":"early_warning","bytes":3000000"#),
        ),
        (
            "end_of_medium",
            Aim::Drives(r#""kind":"end_of_medium","bytes":3000000"#),
        ),
        ("worm_overwrite", Aim::Drives(r#""kind":"worm_overwrite""#)),
        (
            "foreign_cartridge",
            Aim::Cartridge(r#""kind":"foreign_cartridge""#),
        ),
        (
            "mam_epoch_bump",
            Aim::Cartridge(r#""kind":"mam_epoch_bump""#),
        ),
        ("power_cut", Aim::Library(r#""kind":"power_cut""#)),
    ];
    for kind in backends("every_simulator_fault").await {
        for (name, aim) in &faults {
            let backend = kind.fresh_like().await;
            let lib = tempfile::tempdir().unwrap();
            let a = batch("a", 8, 400_000, 10);
            let b = batch("b", 16, 600_000, 11);
            let mut sums = a.sums.clone();
            sums.extend(b.sums.clone());
            let svc = open(&backend.url(), lib.path(), VerifyMode::Full).await;
            svc.archive(a.items.clone(), "two", &CancelToken::new(), no_progress())
                .await
                .unwrap();
            let obj = svc.catalogue().object("a/0003").await.unwrap().unwrap();
            let copies = svc
                .catalogue()
                .copies("a/0003", obj.generation)
                .await
                .unwrap();
            let first = copies
                .iter()
                .min_by_key(|c| c.barcode.clone())
                .unwrap()
                .clone();
            let block = first.container_first_block + 1 + first.offset / first.record_size as u64;
            let reqs: Vec<String> = match aim {
                Aim::Drives(f) => (0..2)
                    .map(|d| format!(r#"{{"op":"fault","drive":{d},{f}}}"#))
                    .collect(),
                Aim::Block(f) => vec![format!(
                    r#"{{"op":"fault","barcode":"{}","block":{block},{f}}}"#,
                    first.barcode
                )],
                Aim::Cartridge(f) => vec![format!(
                    r#"{{"op":"fault","barcode":"{}",{f}}}"#,
                    first.barcode
                )],
                Aim::Library(f) => vec![format!(r#"{{"op":"fault",{f}}}"#)],
            };
            for r in &reqs {
                svc.library()
                    .control(r)
                    .await
                    .unwrap_or_else(|e| panic!("{name}: {r}: {e}"));
            }
            // The archive meets the fault; a failed attempt is retried as the job layer would,
            // after the robot has freed any dead drive.
            let mut ok = false;
            for _ in 0..4 {
                match svc
                    .archive(b.items.clone(), "two", &CancelToken::new(), no_progress())
                    .await
                {
                    Ok(_) => {
                        ok = true;
                        break;
                    }
                    Err(e) => {
                        eprintln!("{} {name}: archive attempt failed: {e}", backend.name());
                        for d in 0..2 {
                            let _ = svc
                                .library()
                                .control(&format!(r#"{{"op":"robot_recover","drive":{d}}}"#))
                                .await;
                        }
                        svc.reset_mounts().await;
                    }
                }
            }
            assert!(ok, "{} {name}: the archive never completed", backend.name());
            let all: Vec<String> = sums.keys().cloned().collect();
            recall_all(&svc, &sums, &all).await;
            listed_objects_are_intact(&svc, &sums).await;
            assert_eq!(violations(&svc).await, 0, "{} {name}", backend.name());
            drop(svc);
        }
    }
}
