//! Sources that go bad after an archive was accepted, through the `reel` binary and `reel
//! worker` processes with the simulator, on SQLite and PostgreSQL: a file deleted, a file
//! replaced by a FIFO and a file rewritten in place, all after the archive was planned. Each
//! fails alone with its reason (the others are archived and recall byte for byte), nothing is
//! retried in a loop, a torn or changed object is never catalogued, and the library takes the
//! next archive and recall as usual.

use std::path::Path;
use std::time::{Duration, Instant};

use reel_tests::*;

use reel_tests::show_job as show;

fn wait(dir: &Path, id: &str) -> (i32, serde_json::Value) {
    let (code, v, err) = reel(dir, &["jobs", "wait", id, "--timeout", "120"]);
    assert_ne!(code, 2, "job {id} timed out: {v} {err}");
    (code, show(dir, id))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sources_that_go_bad_after_submission_fail_alone() {
    for store in stores("worker_bad_sources").await {
        let name = store.name();
        let dir = tempfile::tempdir().unwrap();
        let lib = tempfile::tempdir().unwrap();
        let cfg = write_config(dir.path(), &store.url(), lib.path(), 2, "");
        let w = Worker::start(dir.path(), 1);
        let (code, v, err) = reel(dir.path(), &["intake", "--all-new", "--wait"]);
        assert_eq!(code, 0, "{name}: intake: {v} {err}");
        assert_eq!(w.stop(), 0);

        // Planned with every source in order; no drive may mount yet.
        hold_mounts(&cfg, true);
        let w = Worker::start(dir.path(), 2);
        let src = tempfile::tempdir().unwrap();
        let names = ["keep1", "gone", "fifo", "changed", "keep2"];
        let mut sums = std::collections::BTreeMap::new();
        for (i, n) in names.iter().enumerate() {
            let size = if *n == "keep2" { 100_000 } else { 2 << 20 };
            sums.insert(*n, write_random_file(&src.path().join(n), size, i as u64));
        }
        let paths: Vec<String> = names
            .iter()
            .map(|n| src.path().join(n).display().to_string())
            .collect();
        let mut args = vec!["archive"];
        args.extend(paths.iter().map(String::as_str));
        args.extend(["--key-prefix", "s/"]);
        let (code, v, err) = reel(dir.path(), &args);
        assert_eq!(code, 0, "{name}: submit: {v} {err}");
        let id = job_id(&v);
        let t0 = Instant::now();
        while show(dir.path(), &id)["progress"]["objects_total"] != 5 {
            assert!(
                t0.elapsed() < Duration::from_secs(60),
                "{name}: never planned: {}",
                show(dir.path(), &id)
            );
            std::thread::sleep(Duration::from_millis(50));
        }
        assert_eq!(w.stop(), 0);

        // Now the sources go bad.
        std::fs::remove_file(src.path().join("gone")).unwrap();
        let fifo = src.path().join("fifo");
        std::fs::remove_file(&fifo).unwrap();
        let made = std::process::Command::new("mkfifo")
            .arg(&fifo)
            .status()
            .unwrap();
        assert!(made.success());
        std::thread::sleep(Duration::from_millis(20));
        write_random_file(&src.path().join("changed"), 2 << 20, 77);

        hold_mounts(&cfg, false);
        let w = Worker::start(dir.path(), 3);
        let (code, v) = wait(dir.path(), &id);
        assert_ne!(code, 0, "{name}: the archive of bad sources succeeded: {v}");
        assert_eq!(v["state"], "failed", "{name}: {v}");
        let error = v["error"].as_str().unwrap_or_default().to_string();
        assert!(error.contains("3 of 5 objects failed"), "{name}: {error}");
        assert!(
            error.contains("s/gone: source") && error.contains("no longer exists"),
            "{name}: {error}"
        );
        assert!(
            error.contains("s/fifo: source") && error.contains("is a FIFO"),
            "{name}: {error}"
        );
        assert!(
            error.contains("s/changed: source")
                && error.contains("changed after the archive was submitted"),
            "{name}: {error}"
        );

        // What was good is archived and recalls byte for byte; the bad ones are not catalogued.
        let dst = tempfile::tempdir().unwrap();
        let dsts = dst.path().to_str().unwrap();
        let (code, v, err) = reel(
            dir.path(),
            &["recall", "s/keep1", "s/keep2", "--to", dsts, "--wait"],
        );
        assert_eq!(code, 0, "{name}: recall: {v} {err}");
        for n in ["keep1", "keep2"] {
            assert_eq!(
                sha256_file(&dst.path().join("s").join(n)),
                sums[n],
                "{name}: {n}"
            );
        }
        for n in ["gone", "fifo", "changed"] {
            let (code, v, _) = reel(dir.path(), &["catalog", "find", &format!("s/{n}")]);
            assert_ne!(code, 0, "{name}: s/{n} was catalogued: {v}");
        }

        // The library goes on: the next archive and recall complete.
        let next = src.path().join("next");
        let sum = write_random_file(&next, 3 << 20, 9);
        let (code, v, err) = reel(
            dir.path(),
            &[
                "archive",
                next.to_str().unwrap(),
                "--key-prefix",
                "n/",
                "--wait",
            ],
        );
        assert_eq!(code, 0, "{name}: next archive: {v} {err}");
        let (code, v, err) = reel(dir.path(), &["recall", "n/next", "--to", dsts, "--wait"]);
        assert_eq!(code, 0, "{name}: next recall: {v} {err}");
        assert_eq!(sha256_file(&dst.path().join("n/next")), sum, "{name}");
        assert_eq!(w.stop(), 0);

        // No retry storm: each bad source was met once (a permanent fault is not retried).
        let log = std::fs::read_to_string(dir.path().join("worker-3.log")).unwrap();
        let met = log.matches("object not archived").count();
        assert_eq!(met, 3, "{name}: bad sources met {met} times:\n{log}");
    }
}

/// Processes started together on a fresh data directory all come up: the opening of each
/// SQLite file is serialised (the open lock), so none dies "database is locked" and no
/// migration runs twice. Five fresh directories, a worker and two commands started at once.
#[test]
fn processes_started_together_on_a_fresh_data_dir_all_come_up() {
    for trial in 0..5 {
        let dir = tempfile::tempdir().unwrap();
        let lib = tempfile::tempdir().unwrap();
        let url = format!("sqlite:{}", dir.path().join("reel.db").display());
        write_config(dir.path(), &url, lib.path(), 1, "");
        let spawn = |args: &[&str]| {
            std::process::Command::new(binary_path("reel"))
                .arg("--data-dir")
                .arg(dir.path())
                .arg("--json")
                .args(args)
                .stdout(std::process::Stdio::piped())
                .stderr(std::process::Stdio::piped())
                .spawn()
                .unwrap()
        };
        let a = spawn(&["jobs", "list"]);
        let b = spawn(&["catalog", "ls", ""]);
        let w = Worker::start(dir.path(), 1);
        for (what, c) in [("jobs list", a), ("catalog ls", b)] {
            let out = c.wait_with_output().unwrap();
            assert!(
                out.status.success(),
                "trial {trial}: {what} failed: {}",
                String::from_utf8_lossy(&out.stderr)
            );
        }
        let log = std::fs::read_to_string(dir.path().join("worker-1.log")).unwrap();
        assert!(
            log.contains(": running"),
            "trial {trial}: worker did not come up:\n{log}"
        );
        assert_eq!(w.stop(), 0, "trial {trial}");
    }
}
