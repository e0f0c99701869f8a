//! Intake through the engine on the simulator (dlopen, INSTANT clock), both databases: new
//! cartridges are calibrated on their first load and labelled (label record, filemark, MAM);
//! a cartridge labelled by another application is refused and never overwritten; calibrated
//! spares are kept ready only with two or more drives.

use reel_engine::catalogue::{CartridgeState, Catalogue};
use reel_engine::service::{ServiceOptions, TapeService};
use reel_engine::session::intake::IntakeOutcome;
use reel_tests::*;

async fn open(url: &str, lib: &std::path::Path, drives: u32, calibrated: bool) -> TapeService {
    let catalogue = Catalogue::open(url).await.unwrap();
    let d = drives.to_string();
    let cal = calibrated.to_string();
    let mut cfg = sim_config(lib, &[("sim.drives", d.as_str()), ("sim.cartridges", "6")]);
    cfg = cfg.replace("sim.calibrated=true", &format!("sim.calibrated={cal}"));
    TapeService::open(
        catalogue,
        &plugin_path("reel_plugin_sim"),
        &cfg,
        ServiceOptions::default(),
    )
    .await
    .unwrap()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn foreign_cartridges_are_refused_and_never_overwritten() {
    init_tracing();
    for backend in backends("foreign_cartridges_are_refused").await {
        let lib = tempfile::tempdir().unwrap();
        let svc = open(&backend.url(), lib.path(), 2, true).await;
        svc.library()
            .control(r#"{"op":"fault","kind":"foreign_cartridge","barcode":"RL0002L9"}"#)
            .await
            .unwrap();
        let out = svc.intake(&[], "main").await.unwrap();
        let by: std::collections::BTreeMap<_, _> = out.into_iter().collect();
        assert!(
            matches!(by["RL0001L9"], IntakeOutcome::Labelled { .. }),
            "{by:?}"
        );
        assert!(
            matches!(by["RL0002L9"], IntakeOutcome::RefusedForeign { .. }),
            "{by:?}"
        );
        let c2 = svc
            .catalogue()
            .cartridge("RL0002L9")
            .await
            .unwrap()
            .unwrap();
        assert_eq!(c2.state, CartridgeState::Disabled);
        assert!(
            c2.cartridge_uuid.is_none(),
            "a foreign cartridge got a reel label"
        );
        let c1 = svc
            .catalogue()
            .cartridge("RL0001L9")
            .await
            .unwrap()
            .unwrap();
        assert_eq!(c1.state, CartridgeState::Active);
        assert_eq!(c1.eod_block, 2, "label record + filemark");
        assert_eq!(c1.pool.as_deref(), Some("main"));
        // A second intake finds the label and leaves it alone.
        let again = svc.intake(&["RL0001L9".to_string()], "main").await.unwrap();
        assert!(
            matches!(again[0].1, IntakeOutcome::AlreadyLabelled { .. }),
            "{again:?}"
        );
        let c = svc.library().control(r#"{"op":"counters"}"#).await.unwrap();
        let v: serde_json::Value = serde_json::from_str(&c).unwrap();
        assert_eq!(v["violations"].as_u64(), Some(0), "{c}");
        assert_eq!(v["relabels"].as_u64(), Some(0), "{c}");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn spares_are_calibrated_only_with_two_drives() {
    init_tracing();
    for backend in backends("spares_are_calibrated").await {
        // One drive: no calibration in the background.
        let lib1 = tempfile::tempdir().unwrap();
        let one = open(&backend.url(), lib1.path(), 1, false).await;
        assert_eq!(one.calibrate_one_spare(2).await.unwrap(), None);
        drop(one);
        let fresh = backend.fresh_like().await;
        let lib2 = tempfile::tempdir().unwrap();
        let two = open(&fresh.url(), lib2.path(), 2, false).await;
        let a = two.calibrate_one_spare(2).await.unwrap();
        let b = two.calibrate_one_spare(2).await.unwrap();
        assert!(a.is_some() && b.is_some() && a != b, "{a:?} {b:?}");
        // Two are ready: nothing more to do.
        assert_eq!(two.calibrate_one_spare(2).await.unwrap(), None);
        let cal = two
            .catalogue()
            .cartridges()
            .await
            .unwrap()
            .into_iter()
            .filter(|c| c.calibrated)
            .count();
        assert_eq!(cal, 2);
        // The calibration is the cartridge's: the simulator charged the first load (2 h) once.
        let c = two.library().control(r#"{"op":"counters"}"#).await.unwrap();
        assert!(c.contains("SIMULATED"), "{c}");
    }
}
