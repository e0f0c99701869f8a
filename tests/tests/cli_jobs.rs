//! End to end through the `reel` binary with a separate `reel worker` process, on SQLite and on
//! PostgreSQL, with the simulator loaded through dlopen: intake, archive, recall (byte for
//! byte), verify, catalogue look-ups, cancel, retry, graceful shutdown.

use std::path::Path;

use reel_tests::*;

fn state_of(dir: &Path, id: &str) -> String {
    let (_, v, _) = reel(dir, &["jobs", "show", id]);
    v.get("state")
        .or_else(|| v.get("job").and_then(|j| j.get("state")))
        .and_then(|s| s.as_str())
        .unwrap_or_default()
        .to_string()
}

/// Submit a job (no --wait) and wait for it with a timeout, so a dead worker fails the test
/// instead of hanging it.
fn run_job(dir: &Path, args: &[&str]) -> (i32, serde_json::Value, String) {
    let (code, v, err) = reel(dir, args);
    assert_eq!(code, 0, "submit {args:?}: {v} {err}");
    let id = job_id(&v);
    let (code, v) = wait(dir, &id);
    (code, v, err)
}

fn wait(dir: &Path, id: &str) -> (i32, serde_json::Value) {
    let (code, v, err) = reel(dir, &["jobs", "wait", id, "--timeout", "120"]);
    assert_ne!(code, 2, "job {id} timed out: {v} {err}");
    (code, v)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn archive_recall_verify_intake_cancel_retry_through_the_binary() {
    for store in stores("cli_end_to_end").await {
        let dir = tempfile::tempdir().unwrap();
        let lib = tempfile::tempdir().unwrap();
        write_config(dir.path(), &store.url(), lib.path(), 2, "");
        let worker = Worker::start(dir.path(), 1);

        // Intake every new cartridge.
        let (code, v, err) = run_job(dir.path(), &["intake", "--all-new"]);
        assert_eq!(code, 0, "{}: intake: {v} {err}", store.name());

        // Archive a tree.
        let src = tempfile::tempdir().unwrap();
        let mut sums = std::collections::BTreeMap::new();
        for i in 0..40u64 {
            let rel = format!("d{}/f{i}.bin", i % 4);
            let size = if i == 7 { 3 << 20 } else { i * 997 };
            sums.insert(
                rel.clone(),
                write_random_file(&src.path().join(&rel), size, i),
            );
        }
        let srcs = src.path().to_str().unwrap();
        let (code, v, err) = run_job(dir.path(), &["archive", srcs, "--key-prefix", "t/"]);
        assert_eq!(code, 0, "{}: archive: {v} {err}", store.name());

        // The catalogue lists them.
        let (code, v, _) = reel(dir.path(), &["catalog", "ls", "t/"]);
        assert_eq!(code, 0);
        assert_eq!(v.as_array().map(|a| a.len()), Some(40), "{v}");
        let (code, v, _) = reel(dir.path(), &["catalog", "find", "t/d3/f7.bin"]);
        assert_eq!(code, 0, "{v}");

        // Recall them all, byte for byte.
        let dst = tempfile::tempdir().unwrap();
        let dsts = dst.path().to_str().unwrap();
        let (code, v, err) = run_job(dir.path(), &["recall", "--prefix", "t/", "--to", dsts]);
        assert_eq!(code, 0, "{}: recall: {v} {err}", store.name());
        for (rel, sum) in &sums {
            assert_eq!(sha256_file(&dst.path().join("t").join(rel)), *sum, "{rel}");
        }

        // Verify a sample of everything.
        let (code, v, err) = run_job(dir.path(), &["verify", "--sample-every", "1"]);
        assert_eq!(code, 0, "{}: verify: {v} {err}", store.name());

        // Retry: a recall of a key not archived yet is refused at submission (nothing is
        // queued); a recall into a destination the worker cannot create fails; once the
        // destination can be created, a retry succeeds.
        let late = src.path().join("late.txt");
        write_random_file(&late, 1234, 99);
        let (code, _, err) = reel(dir.path(), &["recall", "t/late.txt", "--to", dsts]);
        assert_ne!(
            code,
            0,
            "{}: a recall of a missing key was queued",
            store.name()
        );
        assert!(err.contains("t/late.txt"), "{err}");
        let lates = late.to_str().unwrap();
        let (code, v, err) = run_job(dir.path(), &["archive", lates, "--key-prefix", "t/"]);
        assert_eq!(code, 0, "{v} {err}");
        let blocker = dst.path().join("blocker");
        std::fs::write(&blocker, b"a file where the destination's parent should be").unwrap();
        let blocked = blocker.join("late");
        let (code, v, err) = reel(
            dir.path(),
            &["recall", "t/late.txt", "--to", blocked.to_str().unwrap()],
        );
        assert_eq!(code, 0, "{v} {err}");
        let failing = job_id(&v);
        let (code, _) = wait(dir.path(), &failing);
        assert_ne!(
            code,
            0,
            "{}: the recall into an uncreatable destination succeeded",
            store.name()
        );
        assert_eq!(state_of(dir.path(), &failing), "failed");
        std::fs::remove_file(&blocker).unwrap();
        let (code, v, err) = reel(dir.path(), &["jobs", "retry", &failing]);
        assert_eq!(code, 0, "retry: {v} {err}");
        let (code, v) = wait(dir.path(), &failing);
        assert_eq!(code, 0, "{}: retried recall: {v}", store.name());
        assert!(blocked.join("t/late.txt").exists());

        // The library through the plugin, and the jobs list.
        let (code, v, _) = reel(dir.path(), &["library", "cartridges"]);
        assert_eq!(code, 0, "{v}");
        let (code, v, _) = reel(dir.path(), &["jobs", "list"]);
        assert_eq!(code, 0, "{v}");

        // Graceful shutdown.
        let code = worker.stop();
        assert_eq!(code, 0, "{}: worker did not stop cleanly", store.name());

        // Cancel: a recall submitted while no worker runs is cancelled before any drive gets
        // to it; a worker started afterwards does not run it.
        let (_, v, _) = reel(dir.path(), &["recall", "--prefix", "t/", "--to", dsts]);
        let c = job_id(&v);
        let (code, v, err) = reel(dir.path(), &["jobs", "cancel", &c]);
        assert_eq!(code, 0, "cancel: {v} {err}");
        let worker = Worker::start(dir.path(), 2);
        let _ = wait(dir.path(), &c);
        assert_eq!(state_of(dir.path(), &c), "cancelled", "{}", store.name());
        assert_eq!(worker.stop(), 0);
    }
}

#[test]
fn errors_say_what_and_exit_non_zero() {
    let dir = tempfile::tempdir().unwrap();
    let lib = tempfile::tempdir().unwrap();
    write_config(dir.path(), "sqlite:reel.db", lib.path(), 1, "");
    let (code, _, err) = reel(dir.path(), &["archive", "/no/such/path/anywhere"]);
    assert_ne!(code, 0);
    assert!(err.contains("/no/such/path/anywhere"), "{err}");
    let (code, _, err) = reel(dir.path(), &["jobs", "show", "no-such-job"]);
    assert_ne!(code, 0);
    assert!(err.contains("no-such-job"), "{err}");
    std::fs::write(dir.path().join("reel.toml"), "[store]\nurll = 1\n").unwrap();
    let (code, _, err) = reel(dir.path(), &["jobs", "list"]);
    assert_ne!(code, 0);
    assert!(err.contains("urll"), "the bad key is named: {err}");
}

/// A host over a slow simulated drive (SCALED clock at 1×, 20 MB/s, verify NONE) with its
/// worker running, and twelve 8 MiB files to archive: a recall of them reads for about 5 s.
fn slow_library(
    store: &Store,
) -> (
    tempfile::TempDir,
    tempfile::TempDir,
    Worker,
    tempfile::TempDir,
) {
    let dir = tempfile::tempdir().unwrap();
    let lib = tempfile::tempdir().unwrap();
    let cfg = write_config(dir.path(), &store.url(), lib.path(), 1, "");
    let slow = "sim.clock=scaled\\nsim.time_scale=1\\nsim.robot_ms=50\\nsim.load_ms=50\\nsim.unload_ms=50\\nsim.stream_bytes_per_sec=20000000\\nsim.min_stream_bytes_per_sec=10000000";
    let t = std::fs::read_to_string(&cfg)
        .unwrap()
        .replace("sim.clock=instant", slow)
        .replace("verify = \"full\"", "verify = \"none\"");
    std::fs::write(&cfg, t).unwrap();
    let worker = Worker::start(dir.path(), 1);
    let src = tempfile::tempdir().unwrap();
    for i in 0..12u64 {
        write_random_file(&src.path().join(format!("f{i}")), 8 << 20, i);
    }
    (dir, lib, worker, src)
}

/// Archive every file of `src` under `prefix`, wait for it, then submit (not wait for) a recall
/// of that prefix into a new directory; returns the directory and the recall's job id.
fn archive_then_recall(
    dir: &Path,
    src: &Path,
    prefix: &str,
    store: &str,
) -> (tempfile::TempDir, String) {
    let (code, v, err) = run_job(
        dir,
        &["archive", src.to_str().unwrap(), "--key-prefix", prefix],
    );
    assert_eq!(code, 0, "{store}: archive {v} {err}");
    let dst = tempfile::tempdir().unwrap();
    let (_, v, _) = reel(
        dir,
        &[
            "recall",
            "--prefix",
            prefix,
            "--to",
            dst.path().to_str().unwrap(),
        ],
    );
    (dst, job_id(&v))
}

/// A running recall cancelled by the user stops at the next record boundary: the job ends
/// cancelled, not every object was written, no partial file is left behind, and the drive is
/// free for the next job. The simulator runs on its SCALED clock at 1× with a slow drive
/// (20 MB/s) so that the recall is still reading when the cancel arrives.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn cancel_of_a_running_recall_stops_it_and_frees_the_drive() {
    for store in stores("cancel_of_a_running_recall").await {
        let (dir, _lib, worker, src) = slow_library(&store);
        // ~100 MB at 20 MB/s: about 5 s of reading.
        let (dst, id) = archive_then_recall(dir.path(), src.path(), "c/", store.name());
        let t0 = std::time::Instant::now();
        while state_of(dir.path(), &id) != "running" && t0.elapsed().as_secs() < 30 {
            std::thread::sleep(std::time::Duration::from_millis(50));
        }
        std::thread::sleep(std::time::Duration::from_millis(800));
        let (code, v, err) = reel(dir.path(), &["jobs", "cancel", &id]);
        assert_eq!(code, 0, "cancel: {v} {err}");
        let _ = wait(dir.path(), &id);
        assert_eq!(state_of(dir.path(), &id), "cancelled", "{}", store.name());
        let mut written = 0;
        for e in walk_files(dst.path()) {
            // Partial files live in the destination's private `.reel-partial` directory.
            let name = e.to_string_lossy().into_owned();
            assert!(
                !name.contains("reel-partial"),
                "partial file left: {}",
                e.display()
            );
            written += 1;
        }
        assert!(
            written < 12,
            "{}: the cancelled recall wrote all {written} objects",
            store.name()
        );
        // The drive is free: a small recall completes.
        let (code, v, err) = run_job(
            dir.path(),
            &["recall", "c/f0", "--to", dst.path().to_str().unwrap()],
        );
        assert_eq!(code, 0, "{}: recall after cancel: {v} {err}", store.name());
        assert_eq!(worker.stop(), 0);
    }
}

fn walk_files(d: &Path) -> Vec<std::path::PathBuf> {
    let mut out = Vec::new();
    for e in std::fs::read_dir(d).unwrap() {
        let p = e.unwrap().path();
        if p.is_dir() {
            out.extend(walk_files(&p));
        } else {
            out.push(p);
        }
    }
    out
}

/// A long recall shows its progress while it runs (issue #15 item 6): `reel jobs show`, read
/// while the one batch that holds all twelve objects is still reading, says some of them are
/// done, and the count never goes back. The simulator runs on its SCALED clock at 1× with a
/// slow drive (20 MB/s, about 5 s for the batch); the drive loop publishes a batch's progress
/// every second ([`reel_worker::worker::PROGRESS_EVERY`]).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_long_recall_shows_its_progress_while_it_runs() {
    for store in stores("recall_progress").await {
        let (dir, _lib, worker, src) = slow_library(&store);
        let (dst, id) = archive_then_recall(dir.path(), src.path(), "p/", store.name());
        let mut seen: Vec<(String, u64)> = Vec::new();
        let t0 = std::time::Instant::now();
        loop {
            let (_, v, _) = reel(dir.path(), &["jobs", "show", &id]);
            let job = v.get("job").unwrap_or(&v);
            let state = job["state"].as_str().unwrap_or_default().to_string();
            let done = job["progress"]["objects_done"].as_u64().unwrap_or(0);
            seen.push((state.clone(), done));
            if ["done", "failed", "cancelled"].contains(&state.as_str())
                || t0.elapsed().as_secs() > 120
            {
                break;
            }
            std::thread::sleep(std::time::Duration::from_millis(150));
        }
        let name = store.name();
        assert_eq!(
            seen.last().map(|s| s.0.as_str()),
            Some("done"),
            "{name}: {seen:?}"
        );
        assert_eq!(seen.last().map(|s| s.1), Some(12), "{name}: {seen:?}");
        let recalled = walkdir_files(dst.path());
        assert_eq!(recalled, 12, "{name}: files recalled into the destination");
        assert!(
            seen.iter()
                .any(|(s, d)| s == "running" && *d > 0 && *d < 12),
            "{name}: no progress seen while the batch ran: {seen:?}"
        );
        assert!(
            seen.windows(2).all(|w| w[0].1 <= w[1].1),
            "{name}: progress went back: {seen:?}"
        );
        assert_eq!(worker.stop(), 0);
    }
}

/// How many regular files lie under `dir`, at any depth.
fn walkdir_files(dir: &Path) -> usize {
    std::fs::read_dir(dir)
        .map(|rd| {
            rd.flatten()
                .map(|e| match e.file_type() {
                    Ok(t) if t.is_dir() => walkdir_files(&e.path()),
                    Ok(t) if t.is_file() => 1,
                    _ => 0,
                })
                .sum()
        })
        .unwrap_or(0)
}

/// `reel library integrity` lists what the checks caught, oldest first, by cartridge and from
/// a number on, in text and JSON (the catches here are appended through the catalogue's API;
/// `worker_faults` shows the worker making real ones, and the torture run counts them).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_integrity_log_lists_what_the_checks_caught() {
    use reel_engine::integrity::{Catch, CatchKind};
    for store in stores("cli_integrity").await {
        let name = store.name();
        let dir = tempfile::tempdir().unwrap();
        let lib = tempfile::tempdir().unwrap();
        write_config(dir.path(), &store.url(), lib.path(), 1, "");
        let (code, v, err) = reel(dir.path(), &["library", "integrity"]);
        assert_eq!(code, 0, "{name}: {v} {err}");
        assert_eq!(v, serde_json::json!([]), "{name}: nothing caught yet");
        let url = match &store {
            Store::Sqlite => format!("sqlite:{}", dir.path().join("reel.db").display()),
            Store::Postgres(d) => d.url.clone(),
        };
        let cat = reel_engine::catalogue::Catalogue::open(&url).await.unwrap();
        for (bc, kind, block) in [
            ("RL0001L9", CatchKind::LbpOnRead, 40),
            ("RL0002L9", CatchKind::Content, 7),
            ("RL0001L9", CatchKind::MediumError, 90),
        ] {
            cat.record_catch(&Catch {
                barcode: bc.into(),
                drive: 0,
                kind,
                first_block: block,
                last_block: block + u64::from(kind == CatchKind::Content) * 5,
                container_id: (kind == CatchKind::Content).then_some(3),
                detail: format!("seen at {block}"),
            })
            .await
            .unwrap();
        }
        cat.close().await;
        let (code, v, err) = reel(
            dir.path(),
            &["library", "integrity", "--cartridge", "RL0001L9"],
        );
        assert_eq!(code, 0, "{name}: {v} {err}");
        let kinds: Vec<_> = v
            .as_array()
            .unwrap()
            .iter()
            .map(|c| c["kind"].clone())
            .collect();
        assert_eq!(kinds, ["lbp_on_read", "medium_error"], "{name}: {v}");
        let first = v[0]["id"].as_i64().unwrap();
        let (_, v, _) = reel(
            dir.path(),
            &[
                "library",
                "integrity",
                "--after",
                &first.to_string(),
                "--limit",
                "1",
            ],
        );
        assert_eq!(v.as_array().map(Vec::len), Some(1), "{name}: {v}");
        assert_eq!(v[0]["barcode"], "RL0002L9", "{name}: {v}");
        assert_eq!(
            (v[0]["first_block"].as_u64(), v[0]["last_block"].as_u64()),
            (Some(7), Some(12))
        );
        // The text names the cartridge, the kind and the blocks.
        let out = std::process::Command::new(binary_path("reel"))
            .arg("--data-dir")
            .arg(dir.path())
            .args(["library", "integrity"])
            .output()
            .unwrap();
        let text = String::from_utf8_lossy(&out.stdout);
        assert!(
            text.contains("RL0002L9") && text.contains("content") && text.contains("blocks 7-12"),
            "{name}: {text}"
        );
    }
}
