//! Two worker processes, one drive each, sharing one PostgreSQL database and one simulated
//! library. Jobs spread over both; `kill -9` of one in the middle of an archive: the job
//! completes on the other, every acknowledged object recalls intact, no write except at EOD.

use std::path::Path;
use std::time::{Duration, Instant};

use reel_tests::*;

fn job_id(v: &serde_json::Value) -> String {
    v.get("id")
        .and_then(|x| x.as_str())
        .unwrap_or_else(|| panic!("no job id in {v}"))
        .to_string()
}

fn worker_log(dir: &Path, n: u32) -> String {
    std::fs::read_to_string(dir.join(format!("worker-{n}.log"))).unwrap_or_default()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn two_workers_share_postgres_and_survive_a_kill() {
    let Some(base) = postgres_url("two_workers_share_postgres") else {
        return;
    };
    let db = PgDatabase::create(&base).await;
    // One simulated library directory is opened by one process at a time, so each host gets
    // its own library (its own drive and cartridges): the shared part is the database.
    let (d1, d2) = (tempfile::tempdir().unwrap(), tempfile::tempdir().unwrap());
    let (l1, l2) = (tempfile::tempdir().unwrap(), tempfile::tempdir().unwrap());
    write_config(d1.path(), &db.url, l1.path(), 1, "");
    write_config(d2.path(), &db.url, l2.path(), 1, "");
    // Different barcodes per host, so the one catalogue tells the libraries apart.
    for (d, prefix) in [(d1.path(), "RA"), (d2.path(), "RB")] {
        let cfg = d.join("reel.toml");
        let t = std::fs::read_to_string(&cfg).unwrap().replace(
            "sim.cartridges=10",
            &format!("sim.cartridges=10\\nsim.barcode_prefix={prefix}"),
        );
        std::fs::write(&cfg, t).unwrap();
    }
    let w1 = Worker::start(d1.path(), 1);
    let w2 = Worker::start(d2.path(), 2);

    // Several archives: both workers take part.
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

    // A big archive; kill -9 worker 1 while it runs.
    let big = src.path().join("big");
    for i in 0..40u64 {
        let rel = format!("big/f{i}");
        sums.insert(
            format!("s/{rel}"),
            write_random_file(&src.path().join(&rel), 1 << 20, 9000 + i),
        );
    }
    let (code, v, err) = reel(
        d1.path(),
        &["archive", big.to_str().unwrap(), "--key-prefix", "s/big/"],
    );
    assert_eq!(code, 0, "{v} {err}");
    let big_id = job_id(&v);
    let t0 = Instant::now();
    while !worker_log(d1.path(), 1).contains("s/big/")
        && !worker_log(d1.path(), 1)
            .matches("write batch")
            .count()
            .gt(&6)
        && t0.elapsed() < Duration::from_secs(20)
    {
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    w1.kill();
    let (code, v, err) = reel(d2.path(), &["jobs", "wait", &big_id, "--timeout", "180"]);
    assert_eq!(
        code,
        0,
        "the archive did not complete on the surviving worker: {v} {err}\n{}",
        worker_log(d2.path(), 2)
    );

    // Every acknowledged object recalls intact (on the surviving host: objects whose copies
    // are on the killed host's library stay unreachable until it comes back, so restart it).
    let w1 = Worker::start(d1.path(), 3);
    let dst = tempfile::tempdir().unwrap();
    let (code, v, err) = reel(
        d2.path(),
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
    for (k, sum) in &sums {
        assert_eq!(sha256_file(&dst.path().join(k)), *sum, "{k}");
    }
    assert_eq!(w1.stop(), 0);
    assert_eq!(w2.stop(), 0);
}
