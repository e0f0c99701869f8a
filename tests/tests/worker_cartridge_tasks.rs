//! Verify, intake and rebuild go through the drive loops and the drive board like a recall,
//! through the real `reel` binary and `reel worker`, with the simulator loaded through dlopen,
//! on SQLite and PostgreSQL: their mounts are the drive loop's (the cartridge shows in the
//! drive while the worker keeps it, and is unloaded at SIGTERM), their progress counts
//! containers and cartridges, a cartridge a verify left in the drive is the one the next
//! archive writes to, and a barcode the library does not hold is refused at once.

use std::path::Path;

use reel_tests::*;

fn job_of(v: &serde_json::Value) -> serde_json::Value {
    v.get("job").cloned().unwrap_or_else(|| v.clone())
}

/// Submit a job, wait for it (bounded) and return the job record as `reel jobs show` gives it.
fn run_job(dir: &Path, args: &[&str]) -> serde_json::Value {
    let (code, v, err) = reel(dir, args);
    assert_eq!(code, 0, "submit {args:?}: {v} {err}");
    let id = job_id(&v);
    let (code, v, err) = reel(dir, &["jobs", "wait", &id, "--timeout", "120"]);
    if code != 0 {
        let log = std::fs::read_to_string(dir.join("worker-1.log")).unwrap_or_default();
        let tail: Vec<&str> = log.lines().rev().take(60).collect();
        let tail: Vec<&str> = tail.into_iter().rev().collect();
        panic!(
            "job {args:?} did not end done: {v} {err}\nworker log (last lines):\n{}",
            tail.join("\n")
        );
    }
    job_of(&show_job(dir, &id))
}

fn progress(job: &serde_json::Value) -> (u64, u64) {
    let p = &job["progress"];
    (
        p["objects_done"].as_u64().unwrap_or(u64::MAX),
        p["objects_total"].as_u64().unwrap_or(u64::MAX),
    )
}

/// The barcodes in the library's drives, as `reel library drives` reports them (the library's
/// own element status), and those the drive board says the workers' loops hold.
fn in_drives(dir: &Path) -> (Vec<String>, Vec<String>) {
    let (code, v, err) = reel(dir, &["library", "drives"]);
    assert_eq!(code, 0, "library drives: {v} {err}");
    let loaded = v["elements"]
        .as_array()
        .unwrap_or_else(|| panic!("library drives: {v}"))
        .iter()
        .filter(|d| d["full"].as_bool() == Some(true))
        .filter_map(|d| d["barcode"].as_str().map(String::from))
        .collect();
    let on_board = v["in_use"]
        .as_array()
        .unwrap_or_else(|| panic!("library drives: {v}"))
        .iter()
        .filter_map(|d| d["barcode"].as_str().map(String::from))
        .collect();
    (loaded, on_board)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn verify_intake_and_rebuild_run_on_the_drive_loops() {
    for store in stores("worker_cartridge_tasks").await {
        let name = store.name();
        let dir = tempfile::tempdir().unwrap();
        let lib = tempfile::tempdir().unwrap();
        let cfg = write_config(dir.path(), &store.url(), lib.path(), 1, "");
        // Cartridges stay in their drives between jobs (as reel's default does), so what a
        // job left mounted can be seen.
        // `sim.shared`: `reel library drives` opens the library while the worker holds it.
        let text = std::fs::read_to_string(&cfg).unwrap();
        std::fs::write(
            &cfg,
            text.replace("min_mount_seconds = 0", "min_mount_seconds = 600")
                .replace("sim.cartridges=10", "sim.cartridges=10\\nsim.shared=true"),
        )
        .unwrap();
        let worker = Worker::start(dir.path(), 1);

        // A barcode the library does not hold is refused for good, with the reason, and
        // nothing is mounted for it: for an intake and for a rebuild.
        let refused: [(&str, &[&str], &str); 2] = [
            ("intake", &["intake", "XX0001L9"], "XX0001L9"),
            ("rebuild", &["catalog", "rebuild", "XX0002L9"], "XX0002L9"),
        ];
        for (what, args, barcode) in refused {
            let (code, v, err) = reel(dir.path(), args);
            assert_eq!(code, 0, "{name}: {what}: submit: {v} {err}");
            let bogus = job_id(&v);
            let (code, _, _) = reel(dir.path(), &["jobs", "wait", &bogus, "--timeout", "60"]);
            assert_ne!(code, 0, "{name}: an {what} of a missing barcode succeeded");
            let job = job_of(&show_job(dir.path(), &bogus));
            assert_eq!(job["state"], "failed", "{name}: {what}: {job}");
            assert_eq!(
                job["attempts"], 1,
                "{name}: {what}: refused at once, not retried: {job}"
            );
            assert!(
                job["error"].as_str().unwrap_or_default().contains(barcode),
                "{name}: {what}: {job}"
            );
        }

        // Intake of two cartridges: one request per cartridge, counted as they end.
        let job = run_job(dir.path(), &["intake", "RL0001L9", "RL0002L9"]);
        assert_eq!(progress(&job), (2, 2), "{name}: intake progress: {job}");
        let carts = job["result"]["cartridges"]
            .as_array()
            .cloned()
            .unwrap_or_default();
        assert_eq!(carts.len(), 2, "{name}: {job}");
        assert!(
            carts.iter().all(|c| c["outcome"] == "labelled"),
            "{name}: {job}"
        );

        // Archive a tree; its containers go to one cartridge of pool p1.
        let src = tempfile::tempdir().unwrap();
        let mut sums = std::collections::BTreeMap::new();
        for i in 0..12u64 {
            let rel = format!("f{i}.bin");
            sums.insert(
                rel.clone(),
                write_random_file(&src.path().join(&rel), 5000 + i, i),
            );
        }
        let srcs = src.path().to_str().unwrap();
        run_job(dir.path(), &["archive", srcs, "--key-prefix", "a/"]);
        let on: Vec<(String, i64)> = catalogue_rows(
            dir.path(),
            &store.url(),
            "SELECT barcode, COUNT(*) FROM containers GROUP BY barcode",
        )
        .await;
        assert_eq!(on.len(), 1, "{name}: containers on {on:?}");
        let (written, containers) = on[0].clone();

        // Verify that cartridge: one request per container, all read back.
        let job = run_job(dir.path(), &["verify", "--cartridge", &written]);
        assert_eq!(
            progress(&job),
            (containers as u64, containers as u64),
            "{name}: verify progress: {job}"
        );
        assert_eq!(job["result"]["verified"], containers, "{name}: {job}");
        // The verify's mount is the drive loop's: the cartridge is in a drive, and the board
        // knows it.
        let (loaded, on_board) = in_drives(dir.path());
        assert!(
            loaded.contains(&written) && on_board.contains(&written),
            "{name}: {written} is not in a drive, or not on the drive board, after its verify: {loaded:?} {on_board:?}"
        );

        // The next archive writes to the cartridge the verify left mounted, without loading
        // it again.
        let mounts = |rows: Vec<(String, i64)>| rows.first().map_or(-1, |r| r.1);
        let count_sql =
            format!("SELECT barcode, mount_count FROM cartridges WHERE barcode = '{written}'");
        let mounted_before = mounts(catalogue_rows(dir.path(), &store.url(), &count_sql).await);
        let more = tempfile::tempdir().unwrap();
        for i in 0..5u64 {
            write_random_file(&more.path().join(format!("g{i}.bin")), 3000, 100 + i);
        }
        run_job(
            dir.path(),
            &[
                "archive",
                more.path().to_str().unwrap(),
                "--key-prefix",
                "b/",
            ],
        );
        let on: Vec<(String, i64)> = catalogue_rows(
            dir.path(),
            &store.url(),
            "SELECT barcode, COUNT(*) FROM containers GROUP BY barcode",
        )
        .await;
        assert_eq!(
            on.iter().map(|r| r.0.clone()).collect::<Vec<_>>(),
            vec![written.clone()],
            "{name}: the second archive went elsewhere: {on:?}"
        );
        assert_eq!(
            mounts(catalogue_rows(dir.path(), &store.url(), &count_sql).await),
            mounted_before,
            "{name}: {written} was loaded again for the archive after its verify"
        );

        // Rebuild the written cartridge from the tape: every container is known.
        // (Named twice: read once.)
        let job = run_job(dir.path(), &["catalog", "rebuild", &written, &written]);
        assert_eq!(progress(&job), (1, 1), "{name}: rebuild progress: {job}");
        let rep = &job["result"]["cartridges"][0];
        assert_eq!(rep["barcode"], written.as_str(), "{name}: {job}");
        assert_eq!(
            rep["known"].as_u64().unwrap_or(0) + rep["containers"].as_u64().unwrap_or(0),
            on[0].1 as u64,
            "{name}: {job}"
        );

        // Everything recalls byte for byte after all that.
        let dst = tempfile::tempdir().unwrap();
        run_job(
            dir.path(),
            &[
                "recall",
                "--prefix",
                "a/",
                "--to",
                dst.path().to_str().unwrap(),
            ],
        );
        for (rel, sum) in &sums {
            assert_eq!(
                sha256_file(&dst.path().join("a").join(rel)),
                *sum,
                "{name}: {rel}"
            );
        }

        // SIGTERM: the drive loops unload what they hold.
        assert_eq!(worker.stop(), 0, "{name}: worker exit status");
        assert_eq!(
            in_drives(dir.path()).0,
            Vec::<String>::new(),
            "{name}: cartridges left in the drives after SIGTERM"
        );
    }
}
