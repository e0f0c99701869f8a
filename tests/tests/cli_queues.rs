//! Why work waits, through the `reel` binary and `reel worker` with the simulator, on SQLite and
//! PostgreSQL: `reel queue ls` and `reel jobs show` name the rule holding each queue (no
//! worker, the mount threshold with when the age rule mounts it, every drive down), a job's
//! failed requests are listed with their reasons by `jobs show` and `jobs failed`, and an
//! operator drops them from the list (they stay with the job) or is refused with what to do.
//! Short ids, as the text output shows them, are accepted.

use std::path::Path;
use std::time::{Duration, Instant};

use reel_tests::*;

/// A liveness bound for what the worker does by itself, not a timing claim.
const BOUND: Duration = Duration::from_secs(60);

fn queues(dir: &Path) -> Vec<serde_json::Value> {
    let (code, v, err) = reel(dir, &["queue", "ls"]);
    assert_eq!(code, 0, "queue ls: {v} {err}");
    v["queues"].as_array().cloned().unwrap_or_default()
}

/// Wait until the write queue of pool p1 is held by `rule`; returns it.
fn held_by(dir: &Path, rule: &str) -> serde_json::Value {
    let t0 = Instant::now();
    loop {
        let all = queues(dir);
        if let Some(q) = all
            .iter()
            .find(|q| q["mode"] == "write" && q["rule"] == rule)
        {
            return q.clone();
        }
        assert!(
            t0.elapsed() < BOUND,
            "no write queue held by {rule}: {all:?}"
        );
        std::thread::sleep(Duration::from_millis(200));
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_wait_says_why_and_failures_are_listed() {
    for store in stores("cli_queues").await {
        let name = store.name();
        let dir = tempfile::tempdir().unwrap();
        let lib = tempfile::tempdir().unwrap();
        let d = dir.path();
        let cfg = write_config(d, &store.url(), lib.path(), 2, "");
        let w = Worker::start(d, 1);
        let (code, v, err) = reel(d, &["intake", "--all-new", "--wait"]);
        assert_eq!(code, 0, "{name}: intake: {v} {err}");
        assert_eq!(w.stop(), 0);
        assert!(queues(d).is_empty(), "{name}: {:?}", queues(d));

        // A job no worker has taken up says so.
        let src = tempfile::tempdir().unwrap();
        let names = ["a", "gone", "b"];
        for (i, n) in names.iter().enumerate() {
            write_random_file(&src.path().join(n), 1 << 20, i as u64);
        }
        let paths: Vec<String> = names
            .iter()
            .map(|n| src.path().join(n).display().to_string())
            .collect();
        let mut args = vec!["archive"];
        args.extend(paths.iter().map(String::as_str));
        args.extend(["--key-prefix", "q/"]);
        let (code, v, err) = reel(d, &args);
        assert_eq!(code, 0, "{name}: submit: {v} {err}");
        let id = job_id(&v);
        let short = &id[..8];
        let v = show_job(d, short);
        assert_eq!(v["id"], id.as_str(), "{name}: the short id names the job");
        assert_eq!(v["waits"][0]["rule"], "not_started", "{name}: {v}");

        // Planned with the mount threshold held: the queue waits below it, and says when the
        // age rule mounts it.
        hold_mounts(&cfg, true);
        let w = Worker::start(d, 2);
        let q = held_by(d, "below_threshold");
        assert_eq!(q["pool"], "p1", "{name}: {q}");
        assert_eq!(q["files"], 3, "{name}: {q}");
        let msg = q["message"].as_str().unwrap();
        assert!(
            msg.contains("3 of 1000000 files") && msg.contains("mounts by age in"),
            "{name}: {msg}"
        );
        assert!(
            q["mounts_in_ms"].as_u64().unwrap() > 9_000_000,
            "{name}: {q}"
        );
        let v = show_job(d, &id);
        let wait = &v["waits"][0];
        assert_eq!(wait["state"], "queued", "{name}: {v}");
        assert_eq!(wait["rule"], "below_threshold", "{name}: {v}");
        assert!(wait["until_ms"].as_i64().unwrap() > 0, "{name}: {v}");
        // The same for people, by the short id.
        let (code, out, err) = reel_text(d, &["jobs", "show", short]);
        assert_eq!(code, 0, "{name}: {err}");
        assert!(
            out.contains("waiting   3 for pool p1 (queued): below the mount threshold"),
            "{name}: {out}"
        );
        assert!(
            out.contains("created   ") && out.contains(" ago)"),
            "{name}: {out}"
        );
        let (_, out, _) = reel_text(d, &["queue", "ls"]);
        assert!(
            out.contains("CARTRIDGE") && out.contains("below the mount threshold"),
            "{name}: {out}"
        );
        let (_, out, _) = reel_text(d, &["jobs", "list"]);
        assert!(out.starts_with("ID "), "{name}: a header first: {out}");
        assert!(
            out.lines().nth(1).unwrap_or_default().starts_with(short) && out.contains(" ago"),
            "{name}: {out}"
        );
        assert!(
            !out.contains(&id),
            "{name}: the list shows short ids: {out}"
        );

        // Every drive down: the queue says so before any threshold, with the reasons.
        let (code, v, _) = reel(d, &["drive", "ls"]);
        assert_eq!(code, 0);
        let drives: Vec<String> = v["drives"]
            .as_array()
            .unwrap()
            .iter()
            .map(|x| x["drive"].as_str().unwrap().to_string())
            .collect();
        for drv in &drives {
            let (code, _, err) = reel(d, &["drive", "down", drv, "--reason", "cleaning due"]);
            assert_eq!(code, 0, "{name}: {err}");
        }
        let q = held_by(d, "no_drive_up");
        assert!(
            q["message"].as_str().unwrap().contains("cleaning due")
                && q["message"].as_str().unwrap().contains("reel drive up"),
            "{name}: {q}"
        );
        assert_eq!(w.stop(), 0);
        for drv in &drives {
            let (code, _, err) = reel(d, &["drive", "up", drv]);
            assert_eq!(code, 0, "{name}: {err}");
        }
        // No worker: said before the drives' states.
        let q = held_by(d, "no_worker");
        assert!(
            q["message"].as_str().unwrap().contains("reel worker"),
            "{name}: {q}"
        );

        // A source gone after planning: that request fails alone, with its reason.
        std::fs::remove_file(src.path().join("gone")).unwrap();
        hold_mounts(&cfg, false);
        let w = Worker::start(d, 3);
        let (code, _, _) = reel(d, &["jobs", "wait", short, "--timeout", "120"]);
        assert_eq!(code, 1, "{name}: the job should fail: {}", show_job(d, &id));
        assert!(queues(d).is_empty(), "{name}: {:?}", queues(d));
        let v = show_job(d, &id);
        assert_eq!(v["requests"]["failed"], 1, "{name}: {v}");
        assert_eq!(v["failures"][0]["key"], "q/gone", "{name}: {v}");
        assert!(
            v["failures"][0]["reason"]
                .as_str()
                .unwrap()
                .contains("no longer exists"),
            "{name}: {v}"
        );
        let (_, out, _) = reel_text(d, &["jobs", "show", short]);
        assert!(
            out.contains("failed    1 request:") && out.contains("q/gone: source"),
            "{name}: {out}"
        );
        let (code, v, err) = reel(d, &["jobs", "failed"]);
        assert_eq!(code, 0, "{name}: {err}");
        let failed = v["failed"].as_array().unwrap();
        assert_eq!(failed.len(), 1, "{name}: {v}");
        assert_eq!(failed[0]["job"], id.as_str());
        assert_eq!(failed[0]["job_state"], "failed");

        // Refusals: a job that did not fail, an unknown id, a wildcard for an id.
        let next = src.path().join("next");
        write_random_file(&next, 1 << 20, 9);
        let (code, v, err) = reel(
            d,
            &[
                "archive",
                next.to_str().unwrap(),
                "--key-prefix",
                "q/",
                "--wait",
            ],
        );
        assert_eq!(code, 0, "{name}: the library goes on: {v} {err}");
        let done = job_id(&v);
        let (code, _, err) = reel(d, &["jobs", "failed", "drop", &done]);
        assert_ne!(code, 0);
        assert!(
            err.contains("is done") && err.contains("only a failed job"),
            "{name}: {err}"
        );
        let (code, _, err) = reel(d, &["jobs", "failed", "drop", "ffffffff"]);
        assert_ne!(code, 0);
        assert!(err.contains("ffffffff"), "{name}: {err}");
        let (code, _, err) = reel(d, &["jobs", "show", "%"]);
        assert_ne!(code, 0, "{name}: a wildcard is not an id: {err}");

        // Dropped: out of the list, still with the job.
        let (code, v, err) = reel(d, &["jobs", "failed", "drop", short]);
        assert_eq!(code, 0, "{name}: {err}");
        assert_eq!(v["dropped"][0]["failed"], 1, "{name}: {v}");
        let (_, v, _) = reel(d, &["jobs", "failed"]);
        assert_eq!(v["failed"].as_array().unwrap().len(), 0, "{name}: {v}");
        assert_eq!(show_job(d, &id)["failures"][0]["key"], "q/gone");
        assert_eq!(w.stop(), 0);
    }
}
