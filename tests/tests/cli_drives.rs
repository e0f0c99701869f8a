//! `reel drive ls|show|down|up` against a running `reel worker` with the simulator, on SQLite
//! and PostgreSQL: a drive taken down takes no mount and its work goes to the other drive; a
//! drive holding a cartridge unloads it when taken down; a drive that keeps failing is taken
//! down by its worker with the reason, and comes back with `reel drive up` after service. Bad
//! requests (no reason, an unknown or malformed drive name) are refused with what to do.

use std::path::Path;
use std::time::{Duration, Instant};

use reel_tests::*;

/// A liveness bound for what the worker does by itself, not a timing claim.
const BOUND: Duration = Duration::from_secs(60);

fn drives(dir: &Path) -> Vec<serde_json::Value> {
    let (code, v, err) = reel(dir, &["drive", "ls"]);
    assert_eq!(code, 0, "drive ls: {v} {err}");
    v["drives"].as_array().cloned().unwrap_or_default()
}

fn drive<'a>(all: &'a [serde_json::Value], name: &str) -> &'a serde_json::Value {
    all.iter()
        .find(|d| d["drive"] == name)
        .unwrap_or_else(|| panic!("{name} not in {all:?}"))
}

/// Wait until `what` holds of the drive list.
fn wait_for(
    dir: &Path,
    what: &str,
    ok: impl Fn(&[serde_json::Value]) -> bool,
) -> Vec<serde_json::Value> {
    let t0 = Instant::now();
    loop {
        let all = drives(dir);
        if ok(&all) {
            return all;
        }
        assert!(t0.elapsed() < BOUND, "{what}: {all:?}");
        std::thread::sleep(Duration::from_millis(200));
    }
}

fn submit(dir: &Path, args: &[&str]) -> String {
    let (code, v, err) = reel(dir, args);
    assert_eq!(code, 0, "submit {args:?}: {v} {err}");
    job_id(&v)
}

fn wait_job(dir: &Path, id: &str) {
    let (code, v, err) = reel(dir, &["jobs", "wait", id, "--timeout", "120"]);
    assert_eq!(code, 0, "job {id}: {v} {err}");
}

fn mail(lib: &Path, drive: u32, n: u32, request: &str) {
    let mb = lib.join("mailbox").join(format!("drive-{drive}"));
    std::fs::create_dir_all(&mb).unwrap();
    let tmp = lib.join("mailbox").join(format!(".{n}.tmp"));
    std::fs::write(&tmp, request).unwrap();
    std::fs::rename(&tmp, mb.join(format!("{n:04}.json"))).unwrap();
}

/// Wait until the drive's owner ran a mailed request naming `op` (at its next command or
/// inventory).
fn delivered(lib: &Path, op: &str) {
    let t0 = Instant::now();
    let path = lib.join("mailbox").join("delivered.jsonl");
    while !std::fs::read_to_string(&path).is_ok_and(|s| s.contains(op)) {
        assert!(t0.elapsed() < BOUND, "{op} was not delivered");
        std::thread::sleep(Duration::from_millis(100));
    }
    let s = std::fs::read_to_string(&path).unwrap();
    assert!(
        s.lines()
            .filter(|l| l.contains(op))
            .all(|l| l.contains("\"ok\":true")),
        "{s}"
    );
}

/// Lines of the worker's log after `from` bytes that mount into `drive` (its index).
fn mounts_into(log: &str, from: usize, drive: u32) -> usize {
    log[from..]
        .lines()
        .filter(|l| l.contains("mounted barcode") && l.contains(&format!(" drive={drive}")))
        .count()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_drive_taken_down_takes_no_mount_until_it_is_up() {
    for store in stores("cli_drive_down_up").await {
        let dir = tempfile::tempdir().unwrap();
        let lib = tempfile::tempdir().unwrap();
        let cfg = write_config(dir.path(), &store.url(), lib.path(), 2, "");
        // A drive with nothing to do keeps its cartridge (so taking it down has one to unload);
        // shared mode: a fault reaches the worker's drives through their mailboxes.
        let text = std::fs::read_to_string(&cfg).unwrap();
        std::fs::write(
            &cfg,
            text.replace("min_mount_seconds = 0", "min_mount_seconds = 600")
                .replace("sim.cartridges=10", "sim.cartridges=10\\nsim.shared=true"),
        )
        .unwrap();
        let d = dir.path();
        // Before any worker ran there is no drive to act on.
        let (code, _, err) = reel(d, &["drive", "down", "simlib-X-0", "--reason", "x"]);
        assert_ne!(code, 0);
        assert!(err.contains("no worker has seen a drive"), "{err}");

        let w = Worker::start(d, 1);
        let all = wait_for(d, "the two drives appear", |a| a.len() == 2);
        let names: Vec<String> = all
            .iter()
            .map(|x| x["drive"].as_str().unwrap().to_string())
            .collect();
        assert!(all.iter().all(|x| x["state"] == "up"), "{all:?}");
        let intake = submit(d, &["intake", "--all-new"]);
        wait_job(d, &intake);

        // Refusals, each with what to do.
        let (code, _, err) = reel(d, &["drive", "down", &names[0], "--reason", "  "]);
        assert_ne!(code, 0);
        assert!(
            err.contains("no reason given") && err.contains("--reason"),
            "{err}"
        );
        let (code, _, err) = reel(d, &["drive", "down", &names[0], "--reason", "a\nb"]);
        assert_ne!(code, 0);
        assert!(err.contains("control or invisible"), "{err}");
        let (code, _, err) = reel(d, &["drive", "down", "../etc", "--reason", "x"]);
        assert_ne!(code, 0);
        assert!(err.contains("is not a drive name"), "{err}");
        let (code, _, err) = reel(d, &["drive", "up", "nosuch-7"]);
        assert_ne!(code, 0);
        assert!(
            err.contains("no worker has seen a drive `nosuch-7`") && err.contains("reel drive ls"),
            "{err}"
        );
        let (code, _, err) = reel(d, &["drive", "show", "nosuch-7"]);
        assert_ne!(code, 0);
        assert!(err.contains("reel drive ls"), "{err}");

        // Both drives down: the archive waits, nothing is mounted.
        for n in &names {
            let (code, v, err) = reel(
                d,
                &[
                    "drive",
                    "down",
                    n,
                    "--reason",
                    "heads worn: vendor call 4711",
                ],
            );
            assert_eq!(code, 0, "{v} {err}");
            assert_eq!(v["state"], "down", "{v}");
            assert_eq!(v["reason"], "heads worn: vendor call 4711", "{v}");
            assert!(!v["by"].as_str().unwrap().is_empty(), "{v}");
            assert_eq!(v["automatic"], false, "{v}");
        }
        wait_for(d, "both drives leave the board", |a| {
            a.iter().all(|x| x["activity"] == "down")
        });
        let log_path = d.join("worker-1.log");
        let mark = std::fs::read_to_string(&log_path).unwrap().len();
        let src = tempfile::tempdir().unwrap();
        let mut sums = Vec::new();
        for i in 0..4u64 {
            sums.push(write_random_file(
                &src.path().join(format!("f{i}.bin")),
                200_000,
                i,
            ));
        }
        let job = submit(
            d,
            &[
                "archive",
                src.path().to_str().unwrap(),
                "--key-prefix",
                "down/",
            ],
        );
        std::thread::sleep(Duration::from_secs(3));
        let v = show_job(d, &job);
        assert!(
            v["state"] == "running" || v["state"] == "queued",
            "the job ran with every drive down: {v}"
        );
        let log = std::fs::read_to_string(&log_path).unwrap();
        assert_eq!(
            mounts_into(&log, mark, 0) + mounts_into(&log, mark, 1),
            0,
            "{}",
            &log[mark..]
        );
        // Human output says who and why.
        let out = std::process::Command::new(binary_path("reel"))
            .arg("--data-dir")
            .arg(d)
            .args(["drive", "ls"])
            .output()
            .unwrap();
        let text = String::from_utf8_lossy(&out.stdout);
        assert!(
            text.contains("DOWN") && text.contains("heads worn"),
            "{text}"
        );

        // Drive 1 back: the work is done there, and only there.
        let (code, v, err) = reel(d, &["drive", "up", &names[1], "--reason", "heads replaced"]);
        assert_eq!(code, 0, "{v} {err}");
        assert_eq!(v["state"], "up", "{v}");
        wait_job(d, &job);
        let log = std::fs::read_to_string(&log_path).unwrap();
        assert!(mounts_into(&log, mark, 1) > 0, "{}", &log[mark..]);
        assert_eq!(
            mounts_into(&log, mark, 0),
            0,
            "the drive that is down mounted: {}",
            &log[mark..]
        );

        // Taken down while it holds the cartridge: it unloads it. Its medium reported failing
        // (TapeAlert 4) at that unmount: reel records it and writes no more to it.
        // The changer's view of drive 1 (the worker records it between its steps).
        let all = wait_for(d, "drive 1 shows the cartridge it wrote", |a| {
            drive(a, &names[1])["cartridge"].is_string()
        });
        let held = drive(&all, &names[1])["cartridge"]
            .as_str()
            .unwrap_or_default()
            .to_string();
        let index: u32 = names[1].rsplit('-').next().unwrap().parse().unwrap();
        mail(
            lib.path(),
            index,
            1,
            &format!(r#"{{"op":"fault","kind":"media_alert","drive":{index}}}"#),
        );
        delivered(lib.path(), "media_alert");
        let mark = log.len();
        let (code, v, err) = reel(
            d,
            &["drive", "down", &names[1], "--reason", "cleaning overdue"],
        );
        assert_eq!(code, 0, "{v} {err}");
        let t0 = Instant::now();
        loop {
            let log = std::fs::read_to_string(&log_path).unwrap();
            if log[mark..].contains("unmounted") {
                break;
            }
            assert!(
                t0.elapsed() < BOUND,
                "the drive taken down kept its cartridge: {}",
                &log[mark..]
            );
            std::thread::sleep(Duration::from_millis(200));
        }
        let t0 = Instant::now();
        let c = loop {
            let (_, c, _) = reel(d, &["cartridge", "show", &held]);
            if c["state"] == "full" {
                break c;
            }
            assert!(
                t0.elapsed() < BOUND,
                "no write stop after a media alert: {c}"
            );
            std::thread::sleep(Duration::from_millis(200));
        };
        let reason = c["state_reason"].as_str().unwrap();
        assert!(
            reason.contains("TapeAlert 4 media") && reason.contains("repack"),
            "{reason}"
        );
        assert_eq!(c["state_by"], "reel", "{c}");
        assert_eq!(c["health"][0]["alerts"], "4 media", "{c}");
        assert!(c["health"][0]["bytes_written"].as_u64().unwrap() > 0, "{c}");
        // The drive's error counters came through the plugin (ABI 1.3): none at this load.
        assert_eq!(
            c["health"][0]["errors"],
            serde_json::json!({"write_corrected": 0, "write_uncorrected": 0,
                               "read_corrected": 0, "read_uncorrected": 0}),
            "{c}"
        );
        let (_, v, _) = reel(d, &["drive", "show", &names[1]]);
        assert_eq!(v["health"][0]["barcode"], held.as_str(), "{v}");
        let out = std::process::Command::new(binary_path("reel"))
            .arg("--data-dir")
            .arg(d)
            .args(["drive", "show", &names[1]])
            .output()
            .unwrap();
        let text = String::from_utf8_lossy(&out.stdout);
        assert!(
            text.contains("TapeAlert  last at an unmount") && text.contains("4 media"),
            "{text}"
        );

        // Both up; what was archived recalls whole.
        for n in &names {
            let (code, v, err) = reel(d, &["drive", "up", n]);
            assert_eq!(code, 0, "{v} {err}");
        }
        let dst = tempfile::tempdir().unwrap();
        let job = submit(
            d,
            &[
                "recall",
                "--prefix",
                "down/",
                "--to",
                dst.path().to_str().unwrap(),
            ],
        );
        wait_job(d, &job);
        for (i, sum) in sums.iter().enumerate() {
            assert_eq!(
                &sha256_file(&dst.path().join(format!("down/f{i}.bin"))),
                sum
            );
        }
        assert_eq!(w.stop(), 0);
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_drive_that_keeps_failing_is_taken_down_by_its_worker() {
    for store in stores("cli_drive_auto_down").await {
        let dir = tempfile::tempdir().unwrap();
        let lib = tempfile::tempdir().unwrap();
        // Shared mode: faults reach the worker's drives through their mailboxes.
        write_shared_config(dir.path(), &store.url(), lib.path(), 2, "sim.cartridges=10");
        let d = dir.path();
        let w = Worker::start(d, 1);
        let all = wait_for(d, "the two drives appear", |a| a.len() == 2);
        let names: Vec<String> = all
            .iter()
            .map(|x| x["drive"].as_str().unwrap().to_string())
            .collect();
        let intake = submit(d, &["intake", "--all-new"]);
        wait_job(d, &intake);
        // Drive 0 dies; drive 1 is kept out of the way so drive 0 meets the work.
        let (code, v, err) = reel(
            d,
            &[
                "drive",
                "down",
                &names[1],
                "--reason",
                "kept out of the test",
            ],
        );
        assert_eq!(code, 0, "{v} {err}");
        mail(
            lib.path(),
            0,
            1,
            r#"{"op":"fault","kind":"drive_dies","drive":0,"after_records":2}"#,
        );
        delivered(lib.path(), "drive_dies");
        let src = tempfile::tempdir().unwrap();
        let sum = write_random_file(&src.path().join("a.bin"), 300_000, 7);
        let job = submit(
            d,
            &[
                "archive",
                src.path().to_str().unwrap(),
                "--key-prefix",
                "auto/",
            ],
        );
        // [worker] drive_down_failures = 3 (the default) within the hour: its worker takes it
        // down, with the last error as the reason.
        let t0 = Instant::now();
        let all = loop {
            let all = drives(d);
            if drive(&all, &names[0])["state"] == "down" {
                break all;
            }
            assert!(
                t0.elapsed() < BOUND,
                "the dying drive was not taken down: {all:?}\n{}",
                std::fs::read_to_string(d.join("worker-1.log")).unwrap_or_default()
            );
            std::thread::sleep(Duration::from_millis(200));
        };
        let d0 = drive(&all, &names[0]);
        assert_eq!(d0["automatic"], true, "{d0}");
        assert!(d0["by"].as_str().unwrap().starts_with("worker:"), "{d0}");
        let reason = d0["reason"].as_str().unwrap_or_default();
        assert!(
            reason.contains("3 drive failures") && reason.contains("the last:"),
            "{reason}"
        );
        // The operator brings the other drive back: the work is done there.
        let (code, v, err) = reel(d, &["drive", "up", &names[1]]);
        assert_eq!(code, 0, "{v} {err}");
        wait_job(d, &job);
        // The dead drive still holds the cartridge it was writing; a reset has the robot pull it
        // (the drive does not unload), so it is in a slot again. A drive in service is refused.
        let (code, _, err) = reel(d, &["drive", "reset", &names[1]]);
        assert_ne!(code, 0);
        assert!(err.contains("take it down first"), "{err}");
        let (code, v, err) = reel(d, &["drive", "reset", &names[0], "--timeout", "60"]);
        assert_eq!(code, 0, "{v} {err}");
        assert_eq!(v["done"], true, "{v}");
        let result = v["reset"]["result"].as_str().unwrap();
        assert!(
            result.contains("pulled from drive") && result.contains("slot element"),
            "{result}"
        );
        let stuck = result.split_whitespace().next().unwrap().to_string();
        let t0 = Instant::now();
        loop {
            let (_, c, _) = reel(d, &["cartridge", "show", &stuck]);
            if c["location"]
                .as_str()
                .is_some_and(|l| l.starts_with("slot"))
            {
                break;
            }
            assert!(t0.elapsed() < BOUND, "{stuck} is not back in a slot: {c}");
            std::thread::sleep(Duration::from_millis(200));
        }
        // One reading for that load (its failed unloads are not unmounts), with the drive's
        // hardware alert; the drive's own history is under its library's name.
        let (_, c, _) = reel(d, &["cartridge", "show", &stuck]);
        let dead: Vec<_> = c["health"]
            .as_array()
            .unwrap()
            .iter()
            .filter(|h| {
                h["alerts"]
                    .as_str()
                    .unwrap_or_default()
                    .contains("30 hardware A")
            })
            .collect();
        assert_eq!(dead.len(), 1, "{c}");
        let (_, v, _) = reel(d, &["drive", "show", &names[0]]);
        assert_eq!(v["health"][0]["barcode"], stuck.as_str(), "{v}");
        // The dead drive is replaced and brought up; with the other one down it takes the next
        // work.
        mail(lib.path(), 0, 2, r#"{"op":"robot_recover","drive":0}"#);
        let (code, v, err) = reel(
            d,
            &["drive", "down", &names[1], "--reason", "kept out again"],
        );
        assert_eq!(code, 0, "{v} {err}");
        let (code, v, err) = reel(d, &["drive", "up", &names[0], "--reason", "drive replaced"]);
        assert_eq!(code, 0, "{v} {err}");
        assert_eq!(v["automatic"], false, "{v}");
        let dst = tempfile::tempdir().unwrap();
        let job = submit(
            d,
            &["recall", "auto/a.bin", "--to", dst.path().to_str().unwrap()],
        );
        wait_job(d, &job);
        assert_eq!(sha256_file(&dst.path().join("auto/a.bin")), sum);
        assert_eq!(w.stop(), 0);
    }
}

/// A drive taken down in the middle of a long batch stops it at a record boundary, gives the
/// rest back, and the other drive finishes the job; nothing is lost. The simulator runs in
/// real time here (20 MB/s), so the batch is long enough to be cut.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_drive_taken_down_mid_batch_gives_the_rest_back() {
    let dir = tempfile::tempdir().unwrap();
    let lib = tempfile::tempdir().unwrap();
    let cfg = write_config(dir.path(), "sqlite:reel.db", lib.path(), 2, "");
    let text = std::fs::read_to_string(&cfg).unwrap().replace(
        "sim.clock=instant",
        "sim.clock=scaled\\nsim.time_scale=1\\nsim.stream_bytes_per_sec=20000000\\nsim.min_stream_bytes_per_sec=10000000\\nsim.robot_ms=200\\nsim.load_ms=300\\nsim.unload_ms=300\\nsim.rewind_min_ms=100\\nsim.rewind_max_ms=500\\nsim.locate_full_pass_ms=2000\\nsim.locate_settle_ms=50\\nsim.backhitch_ms=100\\nsim.reposition_ms=200",
    );
    std::fs::write(&cfg, text).unwrap();
    let d = dir.path();
    let w = Worker::start(d, 1);
    wait_for(d, "the two drives appear", |a| a.len() == 2);
    let intake = submit(d, &["intake", "--all-new"]);
    wait_job(d, &intake);
    let src = tempfile::tempdir().unwrap();
    let mut sums = Vec::new();
    for i in 0..100u64 {
        sums.push(write_random_file(
            &src.path().join(format!("m{i:03}.bin")),
            1 << 20,
            i,
        ));
    }
    let job = submit(
        d,
        &[
            "archive",
            src.path().to_str().unwrap(),
            "--key-prefix",
            "mid/",
        ],
    );
    // The drive running the batch: its write session's first line names it.
    let names: Vec<String> = drives(d)
        .iter()
        .map(|x| x["drive"].as_str().unwrap().to_string())
        .collect();
    let t0 = Instant::now();
    let index = loop {
        let log = std::fs::read_to_string(d.join("worker-1.log")).unwrap();
        if let Some(l) = log
            .lines()
            .find(|l| l.contains("write_session{") && l.contains("room on the cartridge"))
        {
            let i = l
                .split("drive=")
                .nth(1)
                .and_then(|r| r.split(|c: char| !c.is_ascii_digit()).next())
                .unwrap();
            break i.to_string();
        }
        assert!(t0.elapsed() < BOUND, "no write session: {log}");
        std::thread::sleep(Duration::from_millis(50));
    };
    let writer = names
        .iter()
        .find(|n| n.ends_with(&format!("-{index}")))
        .unwrap()
        .clone();
    let (code, v, err) = reel(
        d,
        &["drive", "down", &writer, "--reason", "pulled mid-batch"],
    );
    assert_eq!(code, 0, "{v} {err}");
    wait_job(d, &job);
    let log = std::fs::read_to_string(d.join("worker-1.log")).unwrap();
    assert!(
        log.contains("stopping the batch at a record boundary"),
        "{log}"
    );
    // The taken-down drive's session ended early: it did not write all 100.
    let ended: Vec<&str> = log
        .lines()
        .filter(|l| l.contains("ended=\"drive taken down\""))
        .collect();
    assert_eq!(ended.len(), 1, "{log}");
    let files: u64 = ended[0]
        .split_whitespace()
        .find_map(|f| f.strip_prefix("files="))
        .and_then(|n| n.parse().ok())
        .unwrap();
    assert!(files < 100, "the batch was not cut: {}", ended[0]);
    let dst = tempfile::tempdir().unwrap();
    let rec = submit(
        d,
        &[
            "recall",
            "--prefix",
            "mid/",
            "--to",
            dst.path().to_str().unwrap(),
        ],
    );
    wait_job(d, &rec);
    for (i, sum) in sums.iter().enumerate() {
        assert_eq!(
            &sha256_file(&dst.path().join(format!("mid/m{i:03}.bin"))),
            sum,
            "m{i:03}"
        );
    }
    assert_eq!(w.stop(), 0);
}

/// `reel drive show` while a recall runs on a slow drive (2 MB/s): the job it serves, files
/// and bytes done of the batch's, a throughput and the tape block near which it is; once the
/// batch settles, none of it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_running_batch_shows_its_job_progress_throughput_and_position() {
    let dir = tempfile::tempdir().unwrap();
    let lib = tempfile::tempdir().unwrap();
    let cfg = write_config(dir.path(), "sqlite:reel.db", lib.path(), 1, "");
    let text = std::fs::read_to_string(&cfg)
        .unwrap()
        .replace("sim.clock=instant", SLOW_SIM);
    std::fs::write(&cfg, text).unwrap();
    let d = dir.path();
    let w = Worker::start(d, 1);
    let all = wait_for(d, "the drive appears", |a| a.len() == 1);
    let name = all[0]["drive"].as_str().unwrap().to_string();
    let intake = submit(d, &["intake", "--all-new"]);
    wait_job(d, &intake);
    let src = tempfile::tempdir().unwrap();
    for i in 0..12u64 {
        write_random_file(&src.path().join(format!("p{i:02}.bin")), 1 << 20, i);
    }
    let archive = submit(
        d,
        &[
            "archive",
            src.path().to_str().unwrap(),
            "--key-prefix",
            "p/",
        ],
    );
    wait_job(d, &archive);
    let dst = tempfile::tempdir().unwrap();
    let recall = submit(
        d,
        &[
            "recall",
            "--prefix",
            "p/",
            "--to",
            dst.path().to_str().unwrap(),
        ],
    );
    // Seen part way: some files read, a position, a rate, the job named.
    let t0 = Instant::now();
    let seen = loop {
        let (code, v, err) = reel(d, &["drive", "show", &name]);
        assert_eq!(code, 0, "{v} {err}");
        let b = &v["batch"];
        if b["files_done"]
            .as_u64()
            .is_some_and(|n| (2..12).contains(&n))
            && !b["block"].is_null()
            && !v["rate_bytes_per_sec"].is_null()
        {
            break v;
        }
        assert!(
            t0.elapsed() < BOUND && !job_done(d, &recall),
            "the recall's batch was never seen part way: {v}"
        );
        std::thread::sleep(Duration::from_millis(100));
    };
    let b = &seen["batch"];
    assert_eq!(b["jobs"], serde_json::json!([recall]), "{seen}");
    assert_eq!(
        (b["job_count"].as_u64(), b["files"].as_u64()),
        (Some(1), Some(12)),
        "{seen}"
    );
    assert!(b["bytes_done"].as_u64().unwrap() >= 2 << 20, "{seen}");
    assert_eq!(b["bytes"].as_u64(), Some(12 << 20), "{seen}");
    assert!(b["block"].as_u64().unwrap() > 0, "{seen}");
    wait_job(d, &recall);
    // Settled: the drive runs no batch.
    let t0 = Instant::now();
    loop {
        let (_, v, _) = reel(d, &["drive", "show", &name]);
        if v["batch"].is_null() {
            break;
        }
        assert!(t0.elapsed() < BOUND, "the batch stayed after the job: {v}");
        std::thread::sleep(Duration::from_millis(100));
    }
    assert_eq!(w.stop(), 0);
}

fn job_done(dir: &Path, id: &str) -> bool {
    let v = show_job(dir, id);
    matches!(v["state"].as_str(), Some("done" | "failed" | "cancelled"))
}
