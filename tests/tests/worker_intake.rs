//! Intake through the worker runtime `reel worker` runs (queue, scheduler, drive loops,
//! executor), with the simulator loaded through dlopen on the INSTANT clock, on SQLite and
//! PostgreSQL: an intake job labels new cartridges (label record, filemark, MAM), calibrating
//! them on their first load; a cartridge labelled by another application is refused, reported
//! in the job's result and never overwritten; calibrated spares are kept ready only with two or
//! more drives.
//!
//! The worker runs in this process ([`EmbeddedWorker`]: the start-up and runtime of `reel
//! worker`) so that the test holds the library beside it, arms the fault through the
//! simulator's control channel and reads its counters.

use std::collections::BTreeMap;
use std::time::Duration;

use reel_engine::catalogue::{CartridgeState, Catalogue};
use reel_queue::JobRecord;
use reel_queue::config::Config;
use reel_queue::job::{IntakeJob, IntakeSelection, JobSpec, JobState};
use reel_tests::*;
use reel_worker::embedded::EmbeddedWorker;

/// A liveness bound for one job, not a timing claim (the clock is INSTANT; CI is shared).
const JOB_BOUND: Duration = Duration::from_secs(300);

/// A host: its data directory (config, SQLite files) and its simulated library.
struct Site {
    _dir: tempfile::TempDir,
    _lib: tempfile::TempDir,
    config: Config,
}

/// A host whose library has `drives` drives and six new cartridges, which arrive calibrated
/// or not; storage classes `default` (p1) and `two` (p1, p2).
fn site(store: &Store, drives: u32, calibrated: bool) -> Site {
    let dir = tempfile::tempdir().unwrap();
    let lib = tempfile::tempdir().unwrap();
    let plugin_config = format!(
        "dir={}\\nsim.clock=instant\\nsim.calibrated={calibrated}\\nsim.drives={drives}\\n\
         sim.cartridges=6",
        lib.path().display()
    );
    let config = worker_config(dir.path(), &store.url(), &plugin_config, "");
    Site {
        _dir: dir,
        _lib: lib,
        config,
    }
}

/// Start the worker for this host.
async fn start(site: &Site) -> EmbeddedWorker {
    start_worker(&site.config).await
}

/// Wait for a job to end; panics (with the job) if it does not within [`JOB_BOUND`].
async fn ended(w: &EmbeddedWorker, id: &str) -> JobRecord {
    job_ended(w, id, JOB_BOUND).await
}

/// Run an intake job and require it done; returns what its result reports of each cartridge
/// (`outcome`: `labelled`, `already_labelled`, `unknown_reel_label` or `refused_foreign`), by
/// barcode.
async fn intake(
    w: &EmbeddedWorker,
    selection: IntakeSelection,
    pool: Option<&str>,
    what: &str,
) -> BTreeMap<String, serde_json::Value> {
    let id = w
        .submit(JobSpec::Intake(IntakeJob {
            selection,
            pool: pool.map(str::to_owned),
        }))
        .await
        .unwrap()
        .id;
    let r = ended(w, &id).await;
    assert_eq!(r.state, JobState::Done, "{what}: intake: {:?}", r.error);
    let result = r.result.unwrap_or_default();
    result["cartridges"]
        .as_array()
        .unwrap_or_else(|| panic!("{what}: no cartridges in the intake's result: {result}"))
        .iter()
        .map(|c| {
            (
                c["barcode"].as_str().unwrap_or_default().to_string(),
                c.clone(),
            )
        })
        .collect()
}

/// The cartridges the catalogue knows calibrated, by barcode.
async fn calibrated(cat: &Catalogue) -> Vec<String> {
    cat.cartridges()
        .await
        .unwrap()
        .into_iter()
        .filter(|c| c.calibrated)
        .map(|c| c.barcode)
        .collect()
}

/// An intake job of every new cartridge, one of which holds another application's label: the
/// job ends done, its result reports that cartridge `refused_foreign` with the reason and the
/// others `labelled`; the foreign cartridge is disabled and carries no reel label, a labelled
/// one is active in its pool with end of data after the label record and its filemark. A
/// second intake job finds reel's label and leaves it alone, and finds the foreign label still
/// there; the simulator counted no write anywhere but at end of data and no relabel.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn foreign_cartridges_are_refused_and_never_overwritten() {
    init_tracing();
    for store in stores("worker_foreign_cartridges_are_refused").await {
        let name = store.name();
        let site = site(&store, 2, true);
        let w = start(&site).await;
        w.service()
            .library()
            .control(r#"{"op":"fault","kind":"foreign_cartridge","barcode":"RL0002L9"}"#)
            .await
            .unwrap();
        let by = intake(&w, IntakeSelection::AllNew, Some("main"), name).await;
        assert_eq!(by.len(), 6, "{name}: {by:?}");
        assert_eq!(by["RL0001L9"]["outcome"], "labelled", "{name}: {by:?}");
        assert_eq!(
            by["RL0002L9"]["outcome"], "refused_foreign",
            "{name}: {by:?}"
        );
        assert!(
            by["RL0002L9"]["reason"]
                .as_str()
                .is_some_and(|r| !r.trim().is_empty()),
            "{name}: refused without a reason: {by:?}"
        );
        let cat = w.service().catalogue();
        let c2 = cat.cartridge("RL0002L9").await.unwrap().unwrap();
        assert_eq!(c2.state, CartridgeState::Disabled, "{name}");
        assert!(
            c2.cartridge_uuid.is_none(),
            "{name}: a foreign cartridge got a reel label"
        );
        let c1 = cat.cartridge("RL0001L9").await.unwrap().unwrap();
        assert_eq!(c1.state, CartridgeState::Active, "{name}");
        assert_eq!(c1.eod_block, 2, "{name}: label record + filemark");
        assert_eq!(c1.pool.as_deref(), Some("main"), "{name}");
        // A second intake finds reel's label and leaves it alone, and the foreign one as it
        // was.
        let again = intake(
            &w,
            IntakeSelection::Barcodes(vec!["RL0001L9".into(), "RL0002L9".into()]),
            Some("main"),
            name,
        )
        .await;
        assert_eq!(
            again["RL0001L9"]["outcome"], "already_labelled",
            "{name}: {again:?}"
        );
        assert_eq!(
            again["RL0002L9"]["outcome"], "refused_foreign",
            "{name}: {again:?}"
        );
        let v = sim_counters(&w).await;
        assert_eq!(v["violations"].as_u64(), Some(0), "{name}: {v}");
        assert_eq!(v["relabels"].as_u64(), Some(0), "{name}: {v}");
        w.stop().await.unwrap();
    }
}

/// Spares are calibrated only with two or more drives: with one drive none is calibrated in
/// advance, and an intake job calibrates only the cartridge it labels (its first load); with
/// two drives two spares are calibrated, then no more (two are ready), and the simulator
/// charged the calibrations.
///
/// The spares are asked of the engine service the worker drives, while the worker idles
/// (`TapeService::calibrate_one_spare`): the worker runtime itself never calls it yet, and
/// nothing reads `intake.spares`.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn spares_are_calibrated_only_with_two_drives() {
    init_tracing();
    let ones = stores("worker_spares_one_drive").await;
    let twos = stores("worker_spares_two_drives").await;
    for (one_store, two_store) in ones.into_iter().zip(twos) {
        let name = one_store.name();
        // One drive: no calibration in advance.
        let one = site(&one_store, 1, false);
        let w = start(&one).await;
        assert_eq!(
            w.service().calibrate_one_spare(2).await.unwrap(),
            None,
            "{name}: one drive"
        );
        let by = intake(
            &w,
            IntakeSelection::Barcodes(vec!["RL0001L9".into()]),
            None,
            name,
        )
        .await;
        assert_eq!(by["RL0001L9"]["outcome"], "labelled", "{name}: {by:?}");
        assert_eq!(
            calibrated(w.service().catalogue()).await,
            vec!["RL0001L9".to_string()],
            "{name}: one drive"
        );
        w.stop().await.unwrap();

        // Two drives: two spares, then none.
        let two = site(&two_store, 2, false);
        let w = start(&two).await;
        // A spare is calibrated only while two drives are idle: a drive loop that holds one
        // for a moment (its start, a look at what it holds) defers it; ask again a while.
        let spare = || async {
            for _ in 0..100 {
                if let Some(b) = w.service().calibrate_one_spare(2).await.unwrap() {
                    return Some(b);
                }
                tokio::time::sleep(std::time::Duration::from_millis(100)).await;
            }
            None
        };
        let a = spare().await;
        let b = spare().await;
        assert!(a.is_some() && b.is_some() && a != b, "{name}: {a:?} {b:?}");
        assert_eq!(
            w.service().calibrate_one_spare(2).await.unwrap(),
            None,
            "{name}: two are ready"
        );
        assert_eq!(
            calibrated(w.service().catalogue()).await.len(),
            2,
            "{name}: two drives"
        );
        // The calibration is the cartridge's: the simulator charged the first load (2 h) once.
        let c = sim_counters(&w).await.to_string();
        assert!(c.contains("SIMULATED"), "{name}: {c}");
        w.stop().await.unwrap();
    }
}
