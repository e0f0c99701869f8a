//! Recalls from 50 jobs touching 5 cartridges cause at most 5 mounts while no other work
//! competes: the worker batches the queued requests per cartridge (per-cartridge queue
//! summaries, the minimum-age override) instead of mounting per job. Through the `reel` binary
//! and a separate worker on the simulator, on SQLite and on PostgreSQL.

use std::collections::BTreeMap;
use std::path::Path;

use reel_tests::*;

const CARTRIDGES: usize = 5;
const JOBS: usize = 50;

fn wait_ok(dir: &Path, id: &str, what: &str) {
    let (code, v, err) = reel(dir, &["jobs", "wait", id, "--timeout", "240"]);
    assert_eq!(
        code,
        0,
        "{what} {id}: {v} {err}\nworker logs:\n{}",
        ["worker-1.log", "worker-2.log"]
            .iter()
            .map(|f| format!(
                "--- {f}:\n{}",
                std::fs::read_to_string(dir.join(f)).unwrap_or_default()
            ))
            .collect::<Vec<_>>()
            .join("\n")
    );
}

/// Total mounts the catalogue counted, per cartridge.
fn mounts(dir: &Path) -> BTreeMap<String, u64> {
    let (code, v, err) = reel(dir, &["library", "cartridges"]);
    assert_eq!(code, 0, "library cartridges: {v} {err}");
    v.as_array()
        .unwrap_or_else(|| panic!("cartridges are not a list: {v}"))
        .iter()
        .map(|c| {
            (
                c["barcode"].as_str().unwrap_or_default().to_string(),
                c["mount_count"].as_u64().unwrap_or(0),
            )
        })
        .collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn recalls_of_fifty_jobs_on_five_cartridges_take_at_most_five_mounts() {
    for store in stores("recall_batching").await {
        let dir = tempfile::tempdir().unwrap();
        let lib = tempfile::tempdir().unwrap();
        let cfg = write_config(dir.path(), &store.url(), lib.path(), 1, "");
        // One storage class per pool, so five archives land on five cartridges.
        let classes: String = (1..=CARTRIDGES)
            .map(|i| format!("c{i} = [\"q{i}\"]\n"))
            .collect();
        let text = std::fs::read_to_string(&cfg).unwrap().replace(
            "two = [\"p1\", \"p2\"]\n",
            &format!("two = [\"p1\", \"p2\"]\n{classes}"),
        );
        std::fs::write(&cfg, &text).unwrap();

        let worker = Worker::start(dir.path(), 1);
        // One cartridge per pool (the simulator's barcodes are RL0001L9, RL0002L9, ...).
        for i in 1..=CARTRIDGES {
            let (code, v, err) = reel(
                dir.path(),
                &[
                    "intake",
                    &format!("RL{i:04}L9"),
                    "--pool",
                    &format!("q{i}"),
                    "--wait",
                ],
            );
            assert_eq!(code, 0, "{}: intake: {v} {err}", store.name());
        }
        let src = tempfile::tempdir().unwrap();
        let mut sums = BTreeMap::new();
        for c in 0..CARTRIDGES {
            let tree = src.path().join(format!("c{c}"));
            for f in 0..20u64 {
                let key = format!("b/c{c}/f{f}");
                let seed = (c as u64) * 100 + f;
                sums.insert(
                    key,
                    write_random_file(&tree.join(format!("f{f}")), 50_000 + seed, seed),
                );
            }
            let (code, v, err) = reel(
                dir.path(),
                &[
                    "archive",
                    tree.to_str().unwrap(),
                    "--key-prefix",
                    &format!("b/c{c}/"),
                    "--class",
                    &format!("c{}", c + 1),
                ],
            );
            assert_eq!(code, 0, "{}: archive: {v} {err}", store.name());
            wait_ok(dir.path(), &job_id(&v), "archive");
        }
        assert_eq!(worker.stop(), 0);

        // The five pools are on five different cartridges, each written.
        let (code, v, err) = reel(dir.path(), &["library", "cartridges"]);
        assert_eq!(code, 0, "library cartridges: {v} {err}");
        for i in 1..=CARTRIDGES {
            let barcode = format!("RL{i:04}L9");
            let c = v
                .as_array()
                .and_then(|a| a.iter().find(|c| c["barcode"] == barcode.as_str()))
                .unwrap_or_else(|| panic!("{barcode} is not in the catalogue: {v}"));
            assert_eq!(c["pool"], format!("q{i}").as_str(), "{c}");
            assert!(
                c["used_bytes"].as_u64().unwrap_or(0) > 0,
                "{barcode} unused: {c}"
            );
        }

        // 50 recall jobs, queued while no worker runs; each asks for two objects on two
        // different cartridges.
        let dst = tempfile::tempdir().unwrap();
        let dsts = dst.path().to_str().unwrap();
        let mut ids = Vec::new();
        let mut wanted = Vec::new();
        for j in 0..JOBS {
            let a = format!("b/c{}/f{}", j % CARTRIDGES, j / CARTRIDGES);
            let b = format!("b/c{}/f{}", (j + 2) % CARTRIDGES, 10 + j / CARTRIDGES);
            let (code, v, err) = reel(dir.path(), &["recall", &a, &b, "--to", dsts]);
            assert_eq!(code, 0, "{}: recall: {v} {err}", store.name());
            ids.push(job_id(&v));
            wanted.extend([a, b]);
        }
        // Mount thresholds out of reach: a queue is served once its oldest request is 8 s old
        // (the minimum-age override), time enough for the worker to plan all 50 jobs.
        let text = std::fs::read_to_string(&cfg)
            .unwrap()
            .replace("min_bytes = 1\n", "min_bytes = 1000000000000\n")
            .replace("min_files = 1\n", "min_files = 1000000\n")
            .replace("max_age_seconds = 0\n", "max_age_seconds = 8\n");
        assert!(text.contains("max_age_seconds = 8"), "{text}");
        std::fs::write(&cfg, &text).unwrap();
        let before: u64 = mounts(dir.path()).values().sum();
        let worker = Worker::start(dir.path(), 2);
        for id in &ids {
            wait_ok(dir.path(), id, "recall");
        }
        let after: u64 = mounts(dir.path()).values().sum();
        assert_eq!(worker.stop(), 0);
        for key in &wanted {
            assert_eq!(sha256_file(&dst.path().join(key)), sums[key], "{key}");
        }
        assert!(
            after - before <= CARTRIDGES as u64,
            "{}: {JOBS} recall jobs over {CARTRIDGES} cartridges took {} mounts",
            store.name(),
            after - before
        );
    }
}

/// No needless remount (issue #15 item 3): with `min_mount_seconds = 300`, a recall of an object
/// on the cartridge just written is served by the drive that holds it, switching from writing
/// to reading without an unload (it took 304 s and a reload before: the idle write mount
/// waited out min_mount, then unloaded and loaded the same cartridge). Then an archive to the
/// same pool writes on, again without an unload.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_recall_of_what_was_just_written_takes_no_remount() {
    for store in stores("recall_after_write_no_remount").await {
        let name = store.name();
        let dir = tempfile::tempdir().unwrap();
        let lib = tempfile::tempdir().unwrap();
        let cfg = write_config(dir.path(), &store.url(), lib.path(), 1, "");
        let text = std::fs::read_to_string(&cfg).unwrap();
        assert!(text.contains("min_mount_seconds = 0"), "{text}");
        std::fs::write(
            &cfg,
            text.replace("min_mount_seconds = 0", "min_mount_seconds = 300"),
        )
        .unwrap();
        let w = Worker::start(dir.path(), 1);
        let src = tempfile::tempdir().unwrap();
        let mut sums = BTreeMap::new();
        for i in 0..2 {
            let f = src.path().join(format!("tiny{i}"));
            std::fs::write(&f, format!("{i}ab")).unwrap();
            let (code, v, err) = reel(
                dir.path(),
                &[
                    "archive",
                    f.to_str().unwrap(),
                    "--key-prefix",
                    "t/",
                    "--wait",
                ],
            );
            assert_eq!(code, 0, "{name}: archive {i}: {v} {err}");
            sums.insert(format!("t/tiny{i}"), sha256_file(&f));
            let before = mounts(dir.path());
            // Well inside min_mount: the drive still holds the cartridge it wrote, idle.
            let dst = tempfile::tempdir().unwrap();
            let key = format!("t/tiny{i}");
            let (code, v, err) = reel(
                dir.path(),
                &["recall", &key, "--to", dst.path().to_str().unwrap()],
            );
            assert_eq!(code, 0, "{name}: recall {i}: {v} {err}");
            // 60 s is a liveness bound far below the 300 s the idle mount used to hold out.
            let id = job_id(&v);
            let (code, v, err) = reel(dir.path(), &["jobs", "wait", &id, "--timeout", "60"]);
            assert_eq!(
                code,
                0,
                "{name}: the recall of {key} waited on the idle write mount: {v} {err}\n{}",
                std::fs::read_to_string(dir.path().join("worker-1.log")).unwrap_or_default()
            );
            assert_eq!(sha256_file(&dst.path().join(&key)), sums[&key], "{name}");
            assert_eq!(
                mounts(dir.path()),
                before,
                "{name}: the cartridge was loaded again to read what it had just written"
            );
        }
        let log = std::fs::read_to_string(dir.path().join("worker-1.log")).unwrap_or_default();
        assert!(
            log.contains("switching the mounted cartridge to the new mode without an unload"),
            "{name}:\n{log}"
        );
        assert_eq!(w.stop(), 0);
    }
}
