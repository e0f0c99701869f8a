//! `reel cartridge ls|show|state` against a running `reel worker` with the simulator, on SQLite
//! and PostgreSQL, and what each state does to work: a write never picks a cartridge that is
//! not active; a recall whose copy is on a broken or disabled cartridge reads the other copy,
//! also when it was queued before the state changed; with no readable copy left it fails with
//! the cartridge's state and reason instead of waiting. Bad requests are refused with what to
//! do.

use std::path::Path;
use std::time::{Duration, Instant};

use reel_tests::*;

const BOUND: Duration = Duration::from_secs(60);

fn run_job(dir: &Path, args: &[&str]) -> (i32, serde_json::Value) {
    let v = reel_ok(dir, args);
    let id = job_id(&v);
    let (code, v, _) = reel(dir, &["jobs", "wait", &id, "--timeout", "120"]);
    (code, v)
}

fn cartridges(dir: &Path) -> Vec<serde_json::Value> {
    reel_ok(dir, &["cartridge", "ls"])["cartridges"]
        .as_array()
        .cloned()
        .unwrap_or_default()
}

/// The cartridge of `pool` holding data.
fn written_in(dir: &Path, pool: &str) -> Vec<String> {
    cartridges(dir)
        .iter()
        .filter(|c| c["pool"] == pool && c["used_bytes"].as_u64().unwrap_or(0) > 0)
        .map(|c| c["barcode"].as_str().unwrap().to_string())
        .collect()
}

fn drive_names(dir: &Path) -> Vec<String> {
    let t0 = Instant::now();
    loop {
        let v = reel_ok(dir, &["drive", "ls"]);
        let names: Vec<String> = v["drives"]
            .as_array()
            .cloned()
            .unwrap_or_default()
            .iter()
            .map(|d| d["drive"].as_str().unwrap().to_string())
            .collect();
        if names.len() == 2 {
            return names;
        }
        assert!(t0.elapsed() < BOUND, "drives: {v}");
        std::thread::sleep(Duration::from_millis(200));
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn cartridge_states_decide_what_work_a_cartridge_gets() {
    for store in stores("cli_cartridge_states").await {
        let dir = tempfile::tempdir().unwrap();
        let lib = tempfile::tempdir().unwrap();
        write_config(dir.path(), &store.url(), lib.path(), 2, "");
        let d = dir.path();
        let w = Worker::start(d, 1);
        let drives = drive_names(d);
        // Five cartridges per pool; class `two` keeps a copy in each.
        let (code, v) = run_job(
            d,
            &[
                "intake", "RL0001L9", "RL0002L9", "RL0003L9", "RL0004L9", "RL0005L9", "--pool",
                "p1",
            ],
        );
        assert_eq!(code, 0, "{v}");
        let (code, v) = run_job(
            d,
            &[
                "intake", "RL0006L9", "RL0007L9", "RL0008L9", "RL0009L9", "RL0010L9", "--pool",
                "p2",
            ],
        );
        assert_eq!(code, 0, "{v}");
        let all = cartridges(d);
        assert_eq!(all.len(), 10, "{all:?}");
        for c in &all {
            assert_eq!(c["state"], "active", "{c}");
            // Capacity from the drive at intake: free space is known.
            assert!(c["free_bytes"].as_u64().unwrap_or(0) > 0, "{c}");
            assert!(c["location"].is_string() || c["location"].is_null(), "{c}");
        }
        let src = tempfile::tempdir().unwrap();
        let mut sums = Vec::new();
        for i in 0..3u64 {
            sums.push(write_random_file(
                &src.path().join(format!("f{i}.bin")),
                150_000,
                i,
            ));
        }
        let (code, v) = run_job(
            d,
            &[
                "archive",
                src.path().to_str().unwrap(),
                "--class",
                "two",
                "--key-prefix",
                "c/",
            ],
        );
        assert_eq!(code, 0, "{v}");
        let (p1, p2) = (written_in(d, "p1"), written_in(d, "p2"));
        assert_eq!((p1.len(), p2.len()), (1, 1), "{p1:?} {p2:?}");
        let (p1, p2) = (p1[0].clone(), p2[0].clone());

        // Refusals.
        reel_refused(
            d,
            &["cartridge", "state", &p1, "new", "--reason", "x"],
            "not set to `new` by hand",
        );
        reel_refused(
            d,
            &["cartridge", "state", &p1, "exported", "--reason", "x"],
            "vaulting",
        );
        reel_refused(
            d,
            &["cartridge", "state", &p1, "gone", "--reason", "x"],
            "is not a cartridge state",
        );
        reel_refused(
            d,
            &["cartridge", "state", &p1, "broken", "--reason", " "],
            "no reason given",
        );
        reel_refused(
            d,
            &["cartridge", "state", "NOPE01L9", "broken", "--reason", "x"],
            "no cartridge `NOPE01L9`",
        );
        reel_refused(d, &["cartridge", "show", "NOPE01L9"], "reel cartridge ls");

        // Broken: the recall reads the p2 copy.
        let v = reel_ok(
            d,
            &[
                "cartridge",
                "state",
                &p1,
                "broken",
                "--reason",
                "dropped by the robot",
            ],
        );
        assert_eq!(v["state"], "broken", "{v}");
        let v = reel_ok(d, &["cartridge", "show", &p1]);
        assert_eq!(v["state_reason"], "dropped by the robot", "{v}");
        assert!(!v["state_by"].as_str().unwrap().is_empty(), "{v}");
        assert!(v["state_unix"].as_i64().unwrap() > 0, "{v}");
        let dst = tempfile::tempdir().unwrap();
        let (code, v) = run_job(
            d,
            &[
                "recall",
                "--prefix",
                "c/",
                "--to",
                dst.path().to_str().unwrap(),
            ],
        );
        assert_eq!(code, 0, "{v}");
        for (i, sum) in sums.iter().enumerate() {
            assert_eq!(&sha256_file(&dst.path().join(format!("c/f{i}.bin"))), sum);
        }
        // The copy read is the one whose cartridge shows a last read; no errors were caught.
        let (read, unread) = (
            reel_ok(d, &["cartridge", "show", &p2]),
            reel_ok(d, &["cartridge", "show", &p1]),
        );
        assert!(read["last_read_unix"].as_i64().unwrap() > 0, "{read}");
        assert_eq!(unread["last_read_unix"], 0, "{unread}");
        assert_eq!(
            (read["errors"].clone(), unread["errors"].clone()),
            (0.into(), 0.into())
        );
        let (_, text, _) = reel_text(d, &["cartridge", "show", &p2]);
        assert!(text.contains("errors     none caught"), "{text}");
        assert!(!text.contains("read       never"), "{text}");

        // Queued on p1 while it was active, then p1 disabled: the queued reads move to p2.
        reel_ok(
            d,
            &[
                "cartridge",
                "state",
                &p1,
                "active",
                "--reason",
                "inspected, fine",
            ],
        );
        for n in &drives {
            reel_ok(d, &["drive", "down", n, "--reason", "hold the queue"]);
        }
        let dst = tempfile::tempdir().unwrap();
        let job = job_id(&reel_ok(
            d,
            &[
                "recall",
                "--prefix",
                "c/",
                "--to",
                dst.path().to_str().unwrap(),
            ],
        ));
        // Wait until it is planned (its reads queued on p1).
        let t0 = Instant::now();
        while show_job(d, &job)["state"] != "running" {
            assert!(t0.elapsed() < BOUND, "{}", show_job(d, &job));
            std::thread::sleep(Duration::from_millis(100));
        }
        reel_ok(
            d,
            &[
                "cartridge",
                "state",
                &p1,
                "disabled",
                "--reason",
                "leader pin loose",
            ],
        );
        // The drives come back at once, before any maintenance pass: a drive checks the
        // cartridge itself before it mounts it or claims reads there.
        let log_path = d.join("worker-1.log");
        let mark = std::fs::read_to_string(&log_path).unwrap().len();
        for n in &drives {
            reel_ok(d, &["drive", "up", n]);
        }
        let (code, v, err) = reel(d, &["jobs", "wait", &job, "--timeout", "120"]);
        assert_eq!(code, 0, "{v} {err}");
        let log = std::fs::read_to_string(&log_path).unwrap();
        assert!(
            log[mark..].contains("read re-routed to another copy"),
            "{}",
            &log[mark..]
        );
        assert!(
            !log[mark..].contains(&format!("mounted barcode=\"{p1}\"")),
            "the disabled cartridge was mounted: {}",
            &log[mark..]
        );
        for (i, sum) in sums.iter().enumerate() {
            assert_eq!(&sha256_file(&dst.path().join(format!("c/f{i}.bin"))), sum);
        }

        // A write never goes to a cartridge that is not active: p1's written cartridge is
        // disabled, so the next archive to p1 takes another one.
        let used_before = reel_ok(d, &["cartridge", "show", &p1])["used_bytes"].clone();
        let more = tempfile::tempdir().unwrap();
        let sum = write_random_file(&more.path().join("g.bin"), 100_000, 9);
        let (code, v) = run_job(
            d,
            &[
                "archive",
                more.path().to_str().unwrap(),
                "--key-prefix",
                "g/",
            ],
        );
        assert_eq!(code, 0, "{v}");
        assert_eq!(
            reel_ok(d, &["cartridge", "show", &p1])["used_bytes"],
            used_before
        );
        assert_eq!(written_in(d, "p1").len(), 2, "{:?}", cartridges(d));

        // No readable copy left: the recall fails with the states and reasons, never waits.
        reel_ok(
            d,
            &[
                "cartridge",
                "state",
                &p2,
                "broken",
                "--reason",
                "tape snapped",
            ],
        );
        let dst = tempfile::tempdir().unwrap();
        let (code, v, err) = reel(
            d,
            &["recall", "c/f0.bin", "--to", dst.path().to_str().unwrap()],
        );
        // Submitted (planning is the worker's), then failed by the planner naming each copy's
        // cartridge, its state and its reason.
        assert_eq!(code, 0, "{v} {err}");
        let id = job_id(&v);
        let (code, v, err) = reel(d, &["jobs", "wait", &id, "--timeout", "120"]);
        assert_ne!(code, 0, "a recall with no readable copy succeeded: {v}");
        let text = format!("{v} {err} {}", show_job(d, &id));
        assert!(text.contains("no readable copy"), "{text}");
        assert!(
            text.contains(&format!("cartridge {p1} is disabled (leader pin loose)")),
            "{text}"
        );
        assert!(
            text.contains(&format!("cartridge {p2} is broken (tape snapped)")),
            "{text}"
        );
        // And the other object recalls from the new p1 cartridge.
        let (code, v) = run_job(
            d,
            &["recall", "g/g.bin", "--to", dst.path().to_str().unwrap()],
        );
        assert_eq!(code, 0, "{v}");
        assert_eq!(sha256_file(&dst.path().join("g/g.bin")), sum);

        // The listing says why, by state and pool.
        let broken = reel_ok(d, &["cartridge", "ls", "--state", "broken"]);
        assert_eq!(
            broken["cartridges"].as_array().unwrap().len(),
            1,
            "{broken}"
        );
        let out = std::process::Command::new(binary_path("reel"))
            .arg("--data-dir")
            .arg(d)
            .args(["cartridge", "ls", "--pool", "p2"])
            .output()
            .unwrap();
        let text = String::from_utf8_lossy(&out.stdout);
        assert!(
            text.contains("tape snapped") && !text.contains(&p1),
            "{text}"
        );
        assert_eq!(w.stop(), 0);
    }
}
