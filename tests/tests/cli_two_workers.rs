//! Two worker processes, one drive each, sharing one PostgreSQL database and ONE simulated
//! library (`sim.shared=true`: worker 1 uses drive 0, worker 2 drive 1, as two drive hosts share a
//! SCSI library). Jobs spread over both; `kill -9` of one in the middle of an archive: the job
//! completes on the other, which takes over cartridges the dead host left in its drive; every
//! acknowledged object recalls intact; no write except at EOD, by either process (the library's
//! event log counts a killed process's writes too).

use std::path::Path;
use std::time::{Duration, Instant};

use reel_tests::*;

/// The tests here run one at a time: each runs two or three worker processes on PostgreSQL
/// (a frozen one keeps its connections open), and together they would pass the server's
/// connection limit.
static ONE_AT_A_TIME: tokio::sync::Mutex<()> = tokio::sync::Mutex::const_new(());

fn worker_log(dir: &Path, n: u32) -> String {
    std::fs::read_to_string(dir.join(format!("worker-{n}.log"))).unwrap_or_default()
}

/// The simulator's configuration string every process sharing the library uses (identical, so
/// the drives' lease names `<library id>-<index>` are the same on both hosts).
fn shared_sim_config(lib: &Path) -> String {
    format!(
        "dir={}\nsim.clock=instant\nsim.calibrated=true\nsim.drives=2\nsim.cartridges=10\nsim.shared=true",
        lib.display()
    )
}

/// A `reel.toml` for one host: the shared library, only drive `drive`.
fn host_config(data_dir: &Path, store_url: &str, lib: &Path, drive: u32) {
    host_config_with(data_dir, store_url, lib, drive, "", 1 << 20);
}

/// [`host_config`] with more simulator settings (`sim_extra`, TOML-escaped, each line after
/// `\\n`) and a group commit every `barrier_bytes`.
fn host_config_with(
    data_dir: &Path,
    store_url: &str,
    lib: &Path,
    drive: u32,
    sim_extra: &str,
    barrier_bytes: u64,
) {
    let cfg = write_config(data_dir, store_url, lib, 2, "");
    let text = std::fs::read_to_string(&cfg).unwrap();
    let text = text.replace(
        "sim.cartridges=10",
        &format!("sim.cartridges=10\\nsim.shared=true{sim_extra}"),
    );
    let text = text.replacen(
        "\n[archive]\n",
        &format!("drives = [\"{drive}\"]\n\n[archive]\n"),
        1,
    );
    // Small group commits, so an archive is many batches and both hosts take part in one.
    let text = text.replacen(
        "barrier_seconds = 5\n",
        &format!("barrier_seconds = 5\nbarrier_bytes = {barrier_bytes}\n"),
        1,
    );
    assert!(
        text.contains("sim.shared=true")
            && text.contains("drives = [")
            && text.contains("barrier_bytes"),
        "{text}"
    );
    std::fs::write(&cfg, text).unwrap();
}

/// A handle on the shared library for this test process: it opens no drive, so it disturbs
/// neither worker.
fn observer(lib: &Path) -> reel_engine::device::Library {
    let plugin = reel_engine::device::load_plugin(&plugin_path("reel_plugin_sim")).unwrap();
    reel_engine::device::Library::open(plugin, &shared_sim_config(lib)).unwrap()
}

/// `{"op":"counters"}` of the shared library.
async fn library_counters(lib: &Path) -> serde_json::Value {
    let reply = observer(lib).control(r#"{"op":"counters"}"#).await.unwrap();
    serde_json::from_str(&reply).unwrap()
}

/// What drive `i` holds, as the library's inventory says: (barcode, loaded).
async fn drive_holds(lib: &Path, i: u32) -> Option<(String, bool)> {
    use reel_plugin_abi::{REEL_ELEMENT_DRIVE, REEL_ELEMENT_FULL, REEL_ELEMENT_LOADED};
    observer(lib)
        .inventory()
        .await
        .unwrap()
        .into_iter()
        .find(|e| e.kind == REEL_ELEMENT_DRIVE && e.index == i && e.flags & REEL_ELEMENT_FULL != 0)
        .map(|e| (e.barcode, e.flags & REEL_ELEMENT_LOADED != 0))
}

async fn recall_all(host: &Path, sums: &std::collections::BTreeMap<String, [u8; 32]>) {
    let dst = tempfile::tempdir().unwrap();
    let (code, v, err) = reel(
        host,
        &[
            "recall",
            "--prefix",
            "s/",
            "--to",
            dst.path().to_str().unwrap(),
            "--wait",
        ],
    );
    assert_eq!(code, 0, "recall: {v} {err}");
    for (k, sum) in sums {
        assert_eq!(sha256_file(&dst.path().join(k)), *sum, "{k}");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn two_workers_share_postgres_and_survive_a_kill() {
    let Some(base) = postgres_url("two_workers_share_postgres") else {
        return;
    };
    let _one = ONE_AT_A_TIME.lock().await;
    let db = PgDatabase::create(&base).await;
    let (d1, d2) = (tempfile::tempdir().unwrap(), tempfile::tempdir().unwrap());
    let lib = tempfile::tempdir().unwrap();
    host_config(d1.path(), &db.url, lib.path(), 0);
    host_config(d2.path(), &db.url, lib.path(), 1);
    let w1 = Worker::start(d1.path(), 1);
    let w2 = Worker::start(d2.path(), 2);
    let (l1s, l2s) = (worker_log(d1.path(), 1), worker_log(d2.path(), 2));
    assert!(
        l1s.contains(": running") && l2s.contains(": running"),
        "both workers run on the one library:\n{l1s}\n---\n{l2s}"
    );

    // Several archives: both workers take part, each on its own drive of the one library.
    let src = tempfile::tempdir().unwrap();
    let mut sums = std::collections::BTreeMap::new();
    let mut ids = Vec::new();
    for j in 0..6u64 {
        let dir = src.path().join(format!("job{j}"));
        for i in 0..10u64 {
            let rel = format!("job{j}/f{i}");
            sums.insert(
                format!("s/{rel}"),
                write_random_file(&src.path().join(&rel), 200_000 + i, j * 100 + i),
            );
        }
        let (code, v, err) = reel(
            d1.path(),
            &[
                "archive",
                dir.to_str().unwrap(),
                "--key-prefix",
                &format!("s/job{j}/"),
            ],
        );
        assert_eq!(code, 0, "{v} {err}");
        ids.push(job_id(&v));
    }
    for id in &ids {
        let (code, v, err) = reel(d1.path(), &["jobs", "wait", id, "--timeout", "120"]);
        assert_eq!(code, 0, "archive {id}: {v} {err}");
    }
    let (l1s, l2s) = (worker_log(d1.path(), 1), worker_log(d2.path(), 2));
    assert!(
        l1s.contains("write batch") && l2s.contains("write batch"),
        "both workers wrote:\n{l1s}\n---\n{l2s}"
    );
    // The drive board, as any host sees it: each worker's drive, held by that worker.
    let (code, v, err) = reel(d2.path(), &["library", "drives", "--json"]);
    assert_eq!(code, 0, "{v} {err}");
    let in_use = v["in_use"].as_array().cloned().unwrap_or_default();
    let workers: std::collections::BTreeSet<_> =
        in_use.iter().map(|e| e["worker"].to_string()).collect();
    assert_eq!(
        (in_use.len(), workers.len()),
        (2, 2),
        "two drives on the board, one per worker: {v}"
    );

    // A big archive; kill -9 worker 1 while it runs.
    let big = src.path().join("big");
    for i in 0..80u64 {
        let rel = format!("big/f{i}");
        sums.insert(
            format!("s/{rel}"),
            write_random_file(&src.path().join(&rel), 1 << 20, 9000 + i),
        );
    }
    let batches_before = worker_log(d1.path(), 1).matches("write batch").count();
    let (code, v, err) = reel(
        d1.path(),
        &["archive", big.to_str().unwrap(), "--key-prefix", "s/big/"],
    );
    assert_eq!(code, 0, "{v} {err}");
    let big_id = job_id(&v);
    let t0 = Instant::now();
    while worker_log(d1.path(), 1).matches("write batch").count() <= batches_before
        && t0.elapsed() < Duration::from_secs(20)
    {
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    w1.kill();
    let w2_batches_at_kill = worker_log(d2.path(), 2).matches("write batch").count();
    // What the dead host left in its drive counts as unloaded: the robot may take it away.
    let left = drive_holds(lib.path(), 0).await;
    if let Some((barcode, loaded)) = &left {
        assert!(
            !loaded,
            "{barcode} in the dead host's drive still counts as loaded"
        );
    }
    let (code, v, err) = reel(d2.path(), &["jobs", "wait", &big_id, "--timeout", "180"]);
    assert_eq!(
        code,
        0,
        "the archive did not complete on the surviving worker: {v} {err}\n{}",
        worker_log(d2.path(), 2)
    );

    assert!(
        worker_log(d2.path(), 2).matches("write batch").count() > w2_batches_at_kill,
        "worker 1 was killed in the middle of the archive and worker 2 finished it:\n{}",
        worker_log(d2.path(), 2)
    );

    // Every acknowledged object recalls intact through the surviving host alone: a cartridge
    // the dead host left in its drive counts as unloaded, and the robot brings it to drive 1.
    recall_all(d2.path(), &sums).await;
    if let Some((barcode, _)) = left {
        // It held acknowledged objects (worker 1 had just finished a write batch on it).
        assert!(
            drive_holds(lib.path(), 0).await.is_none(),
            "drive 0 still holds {barcode}"
        );
        assert!(
            worker_log(d2.path(), 2).contains("moving it from there"),
            "worker 2 took {barcode} from the dead host's drive:\n{}",
            worker_log(d2.path(), 2)
        );
    }

    // The dead host comes back (on drive 0 again) and both recall: reads spread over the two
    // drives, a cartridge loaded on one host is left to it by the other.
    let w1 = Worker::start(d1.path(), 3);
    recall_all(d1.path(), &sums).await;

    // No write anywhere but at EOD, by either process, the killed one included.
    let c = library_counters(lib.path()).await;
    assert_eq!(c["shared"], true, "{c}");
    assert_eq!(c["library"]["violations"], 0, "writes short of EOD: {c}");
    assert!(
        c["library"]["robot_moves"].as_u64().unwrap_or(0) > 0,
        "the robot moved for both hosts: {c}"
    );
    assert_eq!(w1.stop(), 0);
    assert_eq!(w2.stop(), 0);
    if std::env::var_os("REEL_TEST_SHOW_LOGS").is_some() {
        for (d, n) in [(d1.path(), 1), (d1.path(), 3), (d2.path(), 2)] {
            eprintln!("===== worker {n}\n{}", worker_log(d, n));
        }
        eprintln!("===== counters {c}");
    }
}

/// Fencing that holds (issue #15 item 4): a worker frozen with SIGSTOP past its lease, once in
/// the middle of writing a container and once in the middle of reading one back, while a second
/// worker takes its requests over; then continued. Whatever it finishes after waking, no object
/// ends up with a copy more than its storage class asks for, nothing is left durable and never
/// verified, every object recalls intact, and no write lands short of end of data.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_worker_frozen_past_its_lease_makes_no_extra_copy() {
    let Some(base) = postgres_url("frozen_worker") else {
        return;
    };
    let _one = ONE_AT_A_TIME.lock().await;
    let db = PgDatabase::create(&base).await;
    let (d1, d2) = (tempfile::tempdir().unwrap(), tempfile::tempdir().unwrap());
    let lib = tempfile::tempdir().unwrap();
    // Slow drives (2 MB/s) and 4 MiB group commits: a batch writes for about two seconds and
    // reads back for as long, so the freezes land inside those windows.
    let slow = format!("\\n{SLOW_SIM}");
    host_config_with(d1.path(), &db.url, lib.path(), 0, &slow, 4 << 20);
    host_config_with(d2.path(), &db.url, lib.path(), 1, &slow, 4 << 20);
    let src = tempfile::tempdir().unwrap();
    let mut sums = std::collections::BTreeMap::new();
    // The test config's lease is 4 s; claims move 2 s after it lapses. Frozen three times that.
    let frozen_for = Duration::from_secs(18);
    for (round, window) in [(0u32, "pending"), (1, "durable")] {
        // Worker 1 of this round (its own log), alone until it is frozen.
        let n1 = 10 + round;
        let w1 = Worker::start(d1.path(), n1);
        let dir = src.path().join(format!("r{round}"));
        for i in 0..24u64 {
            let rel = format!("r{round}/f{i}");
            sums.insert(
                format!("s/{rel}"),
                write_random_file(&src.path().join(&rel), 512 << 10, 100 * round as u64 + i),
            );
        }
        let (code, v, err) = reel(
            d1.path(),
            &[
                "archive",
                dir.to_str().unwrap(),
                "--key-prefix",
                &format!("s/r{round}/"),
            ],
        );
        assert_eq!(code, 0, "{v} {err}");
        let id = job_id(&v);
        // Only worker 1 runs: the first container in `window` is its own.
        let t0 = Instant::now();
        while containers_in(d1.path(), &db.url, window).await == 0 {
            assert!(
                t0.elapsed() < Duration::from_secs(120),
                "round {round}: no container became {window}:\n{}",
                worker_log(d1.path(), n1)
            );
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
        w1.signal("STOP");
        // A second host comes up while it is frozen and takes the orphaned requests over.
        let w2 = Worker::start(d2.path(), 2 + round);
        tokio::time::sleep(frozen_for).await;
        w1.signal("CONT");
        let (code, v, err) = reel(d1.path(), &["jobs", "wait", &id, "--timeout", "180"]);
        assert_eq!(
            code,
            0,
            "round {round}: the archive did not complete: {v} {err}\n--- worker 1\n{}\n--- worker {}\n{}",
            worker_log(d1.path(), n1),
            2 + round,
            worker_log(d2.path(), 2 + round)
        );
        // Worker 1 finishes whatever it still does after waking (a stop waits for its
        // running steps) before the copies are counted.
        assert_eq!(w1.stop(), 0, "round {round}: worker 1 did not stop cleanly");
        let l1 = worker_log(d1.path(), n1);
        assert!(
            l1.contains("lease lost") || l1.contains("lost the lease"),
            "round {round}: worker 1 noticed it had lost its lease on waking:\n{l1}"
        );
        let (extra, durable) = extra_copies(d1.path(), &db.url).await;
        assert!(
            extra.is_empty() && durable == 0,
            "round {round} (frozen while a container was {window}): objects with extra copies {extra:?}, \
             {durable} container(s) durable and never verified\n--- worker 1\n{}\n--- worker {}\n{}",
            worker_log(d1.path(), n1),
            2 + round,
            worker_log(d2.path(), 2 + round)
        );
        assert!(
            worker_log(d2.path(), 2 + round).contains("write batch"),
            "round {round}: worker {} took the frozen one's requests over",
            2 + round
        );
        assert_eq!(w2.stop(), 0);
    }
    // Every object recalls intact, and no process wrote short of end of data.
    let w1 = Worker::start(d1.path(), 20);
    recall_all(d1.path(), &sums).await;
    let c = library_counters(lib.path()).await;
    assert_eq!(c["library"]["violations"], 0, "writes short of EOD: {c}");
    assert_eq!(w1.stop(), 0);
}
