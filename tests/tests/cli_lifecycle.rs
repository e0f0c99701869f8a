//! `reel delete|undelete|recycle|hold` against a running `reel worker` with the simulator, on
//! SQLite and PostgreSQL: a delete (by key, by prefix, from a list) is a job that takes the
//! objects out of look-ups and recalls at once, in bounded batches; the recycle log names who
//! deleted what and why; an undelete within the quarantine makes recalls return the same bytes
//! again; a legal hold refuses a delete that meets it until an operator releases it; bad
//! requests are refused with what to do.

use std::path::Path;

use reel_tests::*;

fn run_job(dir: &Path, args: &[&str]) -> serde_json::Value {
    let v = reel_ok(dir, args);
    let id = job_id(&v);
    let (code, v, err) = reel(dir, &["jobs", "wait", &id, "--timeout", "120"]);
    assert_eq!(code, 0, "{args:?}: {v} {err}");
    v[0].clone()
}

fn recall_ok(dir: &Path, key: &str, to: &Path) {
    let v = run_job(dir, &["recall", key, "--to", to.to_str().unwrap()]);
    assert_eq!(v["state"], "done", "{v}");
}

fn listed(dir: &Path, prefix: &str) -> usize {
    reel_ok(dir, &["catalog", "ls", prefix])
        .as_array()
        .map_or(0, Vec::len)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn delete_undelete_and_legal_holds_through_the_worker() {
    for store in stores("cli_lifecycle").await {
        let name = store.name();
        let dir = tempfile::tempdir().unwrap();
        let lib = tempfile::tempdir().unwrap();
        // Two keys per transaction, so the prefix of five goes in several batches (the
        // engine's deletion tests count them; here the outcome is what is checked).
        write_config(
            dir.path(),
            &store.url(),
            lib.path(),
            2,
            "[lifecycle]\ndelete_batch = 2\n",
        );
        let d = dir.path();
        let _w = Worker::start(d, 1);
        let src = tempfile::tempdir().unwrap();
        let mut sums = std::collections::BTreeMap::new();
        for (i, k) in ["a/1", "a/2", "a/3", "a/4", "a/5", "b/1", "c/keep"]
            .iter()
            .enumerate()
        {
            let p = src.path().join(k);
            std::fs::create_dir_all(p.parent().unwrap()).unwrap();
            sums.insert(format!("d/{k}"), write_random_file(&p, 50_000, i as u64));
        }
        let v = run_job(
            d,
            &[
                "archive",
                src.path().to_str().unwrap(),
                "--key-prefix",
                "d/",
            ],
        );
        assert_eq!(v["state"], "done", "{name}: {v}");
        assert_eq!(listed(d, "d/"), 7, "{name}");

        // A hold on one key refuses a delete of it, and of any prefix that meets it.
        let hold = reel_ok(
            d,
            &["hold", "place", "--key", "d/b/1", "--reason", "case 12"],
        );
        let hold_id = hold["id"].as_i64().unwrap().to_string();
        reel_refused(d, &["delete", "d/b/1", "--reason", "tidy"], "legal hold");
        reel_refused(
            d,
            &["delete", "--prefix", "d/", "--reason", "tidy"],
            "legal hold",
        );
        // Bad requests.
        reel_refused(
            d,
            &["delete", "--prefix", "", "--reason", "x"],
            "empty prefix",
        );
        reel_refused(
            d,
            &["delete", "d/none", "--reason", "x"],
            "nothing to delete",
        );
        reel_refused(d, &["delete", "d/a/1", "d/a/1", "--reason", "x"], "twice");
        reel_refused(d, &["delete", "d/a/1", "--reason", " "], "reason");
        reel_refused(
            d,
            &["delete", "--prefix", "zz/", "--reason", "x"],
            "no archived object",
        );
        reel_refused(d, &["delete", "d/a/1"], "--reason");
        reel_refused(d, &["undelete", "d/a/1"], "nothing of it is deleted");

        // A prefix: a job, three batches, nothing of it left to look up or recall.
        let v = run_job(d, &["delete", "--prefix", "d/a/", "--reason", "tidy"]);
        assert_eq!(v["state"], "done", "{name}: {v}");
        assert_eq!(v["result"]["keys"], 5, "{name}: {v}");
        assert_eq!(v["result"]["held_count"], 0, "{name}: {v}");
        assert_eq!(listed(d, "d/a/"), 0, "{name}");
        let (code, _, _) = reel(d, &["catalog", "find", "d/a/1"]);
        assert_ne!(code, 0, "{name}: a deleted key is still found");
        let out = tempfile::tempdir().unwrap();
        reel_refused(
            d,
            &["recall", "d/a/1", "--to", out.path().to_str().unwrap()],
            "not in the catalogue",
        );
        // The recycle log says who, why, and until when.
        let log = reel_ok(d, &["recycle", "ls", "d/"]);
        let log = log.as_array().unwrap();
        assert_eq!(log.len(), 5, "{name}: {log:?}");
        assert_eq!(log[0]["reason"], "tidy", "{name}");
        assert!(
            log[0]["purge_after_unix"].as_i64().unwrap()
                >= log[0]["deleted_unix"].as_i64().unwrap() + 31 * 86_400,
            "{name}: {log:?}"
        );
        // Undelete one key: the recall returns its bytes.
        let u = reel_ok(d, &["undelete", "d/a/1"]);
        assert_eq!(u["keys"], 1, "{name}: {u}");
        recall_ok(d, "d/a/1", out.path());
        assert_eq!(
            sha256_file(&out.path().join("d/a/1")),
            sums["d/a/1"],
            "{name}"
        );
        // The rest by prefix.
        let u = reel_ok(d, &["undelete", "--prefix", "d/a/"]);
        assert_eq!(u["keys"], 4, "{name}: {u}");
        assert_eq!(listed(d, "d/a/"), 5, "{name}");

        // A list from a file.
        let list = dir.path().join("keys.txt");
        std::fs::write(&list, "d/a/2\n\nd/a/3\n").unwrap();
        let v = run_job(
            d,
            &[
                "delete",
                "--from",
                list.to_str().unwrap(),
                "--reason",
                "list",
            ],
        );
        assert_eq!(v["result"]["keys"], 2, "{name}: {v}");
        assert_eq!(listed(d, "d/a/"), 3, "{name}");

        // Released, the hold no longer refuses; the record of it stays.
        reel_refused(d, &["hold", "release", &hold_id], "--reason");
        reel_ok(d, &["hold", "release", &hold_id, "--reason", "case closed"]);
        reel_refused(
            d,
            &["hold", "release", &hold_id, "--reason", "again"],
            "released already",
        );
        let v = run_job(d, &["delete", "d/b/1", "--reason", "after the case"]);
        assert_eq!(v["result"]["keys"], 1, "{name}: {v}");
        assert_eq!(
            reel_ok(d, &["hold", "ls"]).as_array().map(Vec::len),
            Some(0)
        );
        let all = reel_ok(d, &["hold", "ls", "--all"]);
        assert_eq!(all[0]["release_reason"], "case closed", "{name}: {all}");

        // What was never deleted is untouched; the library still writes and reads.
        recall_ok(d, "d/c/keep", out.path());
        assert_eq!(
            sha256_file(&out.path().join("d/c/keep")),
            sums["d/c/keep"],
            "{name}"
        );
        let (code, text, _) = reel_text(d, &["recycle", "ls"]);
        assert_eq!(code, 0);
        assert!(
            text.contains("d/b/1") && text.contains("after the case"),
            "{text}"
        );
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn retention_refuses_early_deletes_and_expires_what_it_no_longer_keeps() {
    for store in stores("cli_retention").await {
        let name = store.name();
        let dir = tempfile::tempdir().unwrap();
        let lib = tempfile::tempdir().unwrap();
        // Class `default` keeps objects a day, then lets them expire; class `two` has no
        // retention.
        write_config(
            dir.path(),
            &store.url(),
            lib.path(),
            2,
            "[lifecycle]\ndelete_batch = 2\n\n[lifecycle.retention.default]\ndays = 1\nexpire = true\n",
        );
        let d = dir.path();
        let w = Worker::start(d, 1);
        let src = tempfile::tempdir().unwrap();
        for (i, k) in ["r1", "r2", "r3"].iter().enumerate() {
            write_random_file(&src.path().join(k), 20_000, i as u64);
        }
        let v = run_job(
            d,
            &[
                "archive",
                src.path().to_str().unwrap(),
                "--key-prefix",
                "r/",
            ],
        );
        assert_eq!(v["state"], "done", "{name}: {v}");
        let other = tempfile::tempdir().unwrap();
        write_random_file(&other.path().join("free"), 20_000, 9);
        let v = run_job(
            d,
            &[
                "archive",
                other.path().to_str().unwrap(),
                "--key-prefix",
                "f/",
                "--class",
                "two",
            ],
        );
        assert_eq!(v["state"], "done", "{name}: {v}");
        // Named keys are refused; a prefix skips them and says so.
        reel_refused(
            d,
            &["delete", "r/r1", "--reason", "early"],
            "retained by storage class default",
        );
        let v = run_job(d, &["delete", "--prefix", "r/", "--reason", "early"]);
        assert_eq!(v["result"]["keys"], 0, "{name}: {v}");
        assert_eq!(v["result"]["retained_count"], 3, "{name}: {v}");
        assert_eq!(listed(d, "r/"), 3, "{name}");
        // A hold on one of them, and two days pass (while no worker runs).
        reel_ok(d, &["hold", "place", "--key", "r/r2", "--reason", "audit"]);
        assert_eq!(w.stop(), 0);
        let aged = catalogue_exec(
            d,
            &store.url(),
            "UPDATE objects SET created_unix = created_unix - 172800",
        )
        .await;
        assert_eq!(aged, 4, "{name}");
        // The worker's first expiry pass deletes what the retention no longer keeps, except
        // the held key; the class without retention is untouched.
        let _w = Worker::start(d, 2);
        let t0 = std::time::Instant::now();
        while listed(d, "r/") != 1 {
            assert!(
                t0.elapsed() < std::time::Duration::from_secs(60),
                "{name}: nothing expired: {:?}",
                reel_ok(d, &["catalog", "ls", "r/"])
            );
            std::thread::sleep(std::time::Duration::from_millis(200));
        }
        assert_eq!(reel_ok(d, &["catalog", "ls", "r/"])[0]["key"], "r/r2");
        assert_eq!(listed(d, "f/"), 1, "{name}");
        let log = reel_ok(d, &["recycle", "ls", "r/"]);
        assert_eq!(log.as_array().map(Vec::len), Some(2), "{name}: {log}");
        assert_eq!(log[0]["deleted_by"], "reel (retention)", "{name}: {log}");
        // A key of a class without retention is deleted when asked.
        let v = run_job(d, &["delete", "f/free", "--reason", "done"]);
        assert_eq!(v["result"]["keys"], 1, "{name}: {v}");
    }
}
