//! End to end on a real SCSI target: the `reel` binary and a separate `reel worker` drive the
//! tgt virtual tape library of reel's rig (`tests/rig`: an SMC changer and two SSC drives over
//! iSCSI) through the SCSI plugin loaded with dlopen: intake, archive with full read-back,
//! recall byte for byte, verify, and a second archive appended at end of data.
//!
//! tgt emulates neither logical block protection nor MAM: the engine runs the drives without
//! them (with a warning), which is what this test also shows. Needs the rig
//! (`tests/rig/setup.sh`, root) and `cargo build -p reel-plugin-scsi`; skipped loudly
//! without them, except under `CI=true`, where it fails.

use std::path::Path;

use reel_tests::*;

#[path = "../rig/rig.rs"]
mod rig;

/// iSCSI port and tgtd control instance of this test (the plugin's own test uses 3270 / 7).
const PORT: u16 = 3271;
const CN: u16 = 8;

/// Submit a job, wait for it, return its final JSON; panics with the worker's log on failure.
fn run_job(dir: &Path, args: &[&str]) -> serde_json::Value {
    let (code, v, err) = reel(dir, args);
    assert_eq!(code, 0, "submit {args:?}: {v} {err}");
    let id = job_id(&v);
    let (code, v, err) = reel(dir, &["jobs", "wait", &id, "--timeout", "300"]);
    assert_eq!(
        code,
        0,
        "{args:?} did not finish: {v} {err}\nworker log:\n{}",
        std::fs::read_to_string(dir.join("worker-1.log")).unwrap_or_default()
    );
    v
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn archive_and_recall_through_reel_on_tgt() {
    let Some(rig) = rig::Rig::up(PORT, CN, 256) else {
        return;
    };
    let dir = tempfile::tempdir().unwrap();
    let store = format!("sqlite:{}", dir.path().join("catalogue.db").display());
    let plugin_config = rig.config().replace('\n', "\\n");
    write_plugin_config(
        dir.path(),
        &store,
        &plugin_path("reel_plugin_scsi"),
        &plugin_config,
        "",
    );
    // The library as reel sees it, 8 cartridges (the CLI opens the plugin itself, before the
    // worker holds the drives).
    let (code, v, err) = reel(dir.path(), &["library", "inventory"]);
    assert_eq!(code, 0, "inventory: {v} {err}");
    let text = v.to_string();
    for i in 1..=8 {
        assert!(text.contains(&format!("GFS{i:03}L9")), "{v}");
    }

    let worker = Worker::start(dir.path(), 1);

    // Intake two cartridges: label record at BOT (no MAM on tgt).
    run_job(dir.path(), &["intake", "GFS001L9", "GFS002L9"]);

    // Archive a tree with full read-back.
    let src = tempfile::tempdir().unwrap();
    let mut sums = std::collections::BTreeMap::new();
    for i in 0..24u64 {
        let rel = format!("d{}/f{i}.bin", i % 3);
        let size = match i {
            0 => 0,
            5 => 5 << 20,
            9 => (1 << 20) + 1,
            _ => i * 7919,
        };
        sums.insert(
            format!("t/{rel}"),
            write_random_file(&src.path().join(&rel), size, i),
        );
    }
    let srcs = src.path().to_str().unwrap();
    run_job(dir.path(), &["archive", srcs, "--key-prefix", "t/"]);

    // A second archive is appended at end of data, after the first session's filemarks.
    let more = tempfile::tempdir().unwrap();
    for i in 0..6u64 {
        let rel = format!("m{i}.bin");
        sums.insert(
            format!("u/{rel}"),
            write_random_file(&more.path().join(&rel), 300_000 + i, 100 + i),
        );
    }
    run_job(
        dir.path(),
        &[
            "archive",
            more.path().to_str().unwrap(),
            "--key-prefix",
            "u/",
        ],
    );

    // Recall everything, byte for byte.
    let dst = tempfile::tempdir().unwrap();
    let dsts = dst.path().to_str().unwrap();
    for prefix in ["t/", "u/"] {
        run_job(dir.path(), &["recall", "--prefix", prefix, "--to", dsts]);
    }
    for (key, sum) in &sums {
        assert_eq!(sha256_file(&dst.path().join(key)), *sum, "{key}");
    }

    // Verify what was written, every container.
    run_job(dir.path(), &["verify", "--sample-every", "1"]);

    // The catalogue knows where it all went; the cartridges are still usable.
    let (code, v, _) = reel(dir.path(), &["library", "cartridges"]);
    assert_eq!(code, 0, "{v}");
    let text = v.to_string();
    assert!(text.contains("GFS001L9"), "{v}");
    assert!(
        !text.contains("broken") && !text.contains("disabled"),
        "a cartridge was taken out of service: {v}"
    );
    let log = std::fs::read_to_string(dir.path().join("worker-1.log")).unwrap_or_default();
    assert!(
        log.contains("refuses logical block protection"),
        "tgt has no LBP: the engine should have said it runs without it\n{log}"
    );
    assert_eq!(worker.stop(), 0, "the worker stops cleanly on SIGTERM");
}
