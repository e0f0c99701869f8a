//! `reel repack` and `reel reclaim` against running `reel worker`s with the simulator, on
//! SQLite and PostgreSQL: a repack reads every live object of a cartridge in tape order and
//! writes it through the normal write path, a few objects at a time through its buffer; the
//! source ends `full` with no live data and every object recalls with the same bytes from its
//! new copy; a repack killed (SIGKILL) halfway resumes and loses nothing, while recalls of the
//! same objects are served; reclaim refuses a cartridge with live, held or quarantined data,
//! and relabels an emptied one with a new epoch, after which nothing of the old tape is found.

use std::collections::BTreeMap;
use std::path::Path;
use std::time::{Duration, Instant};

use reel_tests::*;

fn run_job(dir: &Path, args: &[&str]) -> serde_json::Value {
    let v = reel_ok(dir, args);
    wait_job(dir, &job_id(&v))
}

fn wait_job(dir: &Path, id: &str) -> serde_json::Value {
    let (code, v, err) = reel(dir, &["jobs", "wait", id, "--timeout", "300"]);
    assert_eq!(code, 0, "{id}: {v} {err}");
    v[0].clone()
}

fn cartridge(dir: &Path, barcode: &str) -> serde_json::Value {
    reel_ok(dir, &["cartridge", "show", barcode])
}

/// The cartridges holding copies of `key`.
fn copies_of(dir: &Path, key: &str) -> Vec<String> {
    let v = reel_ok(dir, &["catalog", "find", key]);
    v["copies"]
        .as_array()
        .unwrap()
        .iter()
        .map(|c| c["barcode"].as_str().unwrap().to_string())
        .collect()
}

/// Archive `n` files of `size` bytes under `prefix`; returns key → SHA-256.
fn archive(
    dir: &Path,
    src: &Path,
    prefix: &str,
    n: usize,
    size: u64,
) -> BTreeMap<String, [u8; 32]> {
    let mut sums = BTreeMap::new();
    let tree = src.join(prefix.trim_end_matches('/'));
    for i in 0..n {
        let p = tree.join(format!("{i:04}"));
        std::fs::create_dir_all(p.parent().unwrap()).unwrap();
        sums.insert(
            format!("{prefix}{i:04}"),
            write_random_file(&p, size, i as u64 + 7),
        );
    }
    let v = run_job(
        dir,
        &["archive", tree.to_str().unwrap(), "--key-prefix", prefix],
    );
    assert_eq!(v["state"], "done", "{v}");
    sums
}

/// Recall everything under `prefix` and compare with `sums`.
fn recall_all(dir: &Path, prefix: &str, sums: &BTreeMap<String, [u8; 32]>) {
    let out = tempfile::tempdir().unwrap();
    let v = run_job(
        dir,
        &[
            "recall",
            "--prefix",
            prefix,
            "--to",
            out.path().to_str().unwrap(),
        ],
    );
    assert_eq!(v["state"], "done", "{v}");
    for (k, sum) in sums {
        assert_eq!(&sha256_file(&out.path().join(k)), sum, "{k}");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn repack_moves_every_live_object_and_reclaim_relabels_the_emptied_cartridge() {
    for store in stores("cli_repack").await {
        let name = store.name();
        let dir = tempfile::tempdir().unwrap();
        let lib = tempfile::tempdir().unwrap();
        // A window of 3 objects and a buffer of 120 kB: the repack goes in many rounds, its
        // reads waiting for its writes. Quarantine 0: a deleted object is dead space at once.
        write_config(
            dir.path(),
            &store.url(),
            lib.path(),
            2,
            "[repack]\nwindow = 3\nbuffer_bytes = 120000\n\n[lifecycle]\nquarantine_days = 0\n",
        );
        let d = dir.path();
        let _w = Worker::start(d, 1);
        let src = tempfile::tempdir().unwrap();
        let mut sums = archive(d, src.path(), "r/", 12, 50_000);
        let source = copies_of(d, "r/0000")[0].clone();
        // Two of them deleted: the repack leaves them (dead space), reclaim erases them.
        let v = run_job(d, &["delete", "r/0010", "r/0011", "--reason", "obsolete"]);
        assert_eq!(v["state"], "done", "{name}: {v}");
        sums.remove("r/0010");
        sums.remove("r/0011");

        // Bad requests, each refused with what to do.
        reel_refused(d, &["repack"], "name the cartridges");
        reel_refused(
            d,
            &["repack", "--barcode", "NOPE01"],
            "not in the catalogue",
        );
        reel_refused(
            d,
            &["repack", "--barcode", &source, "--live-below", "2"],
            "fraction",
        );
        reel_refused(
            d,
            &["repack", "--state", "sideways"],
            "not a cartridge state",
        );
        reel_refused(d, &["repack", "--media", "LTO-99"], "media generation");
        reel_refused(
            d,
            &["repack", "--barcode", &source, "--to-pool", "nowhere"],
            "no such pool",
        );
        reel_refused(
            d,
            &["repack", "--barcode", &source, "--barcode", &source],
            "twice",
        );
        reel_refused(d, &["reclaim", &source], "repack it first");
        reel_refused(d, &["reclaim"], "name the cartridges");

        // The dry run names it with what it holds, and queues nothing.
        let plan = reel_ok(d, &["repack", "--barcode", &source, "--dry-run"]);
        assert_eq!(plan["cartridges"][0]["barcode"], source.as_str(), "{name}");
        assert_eq!(plan["cartridges"][0]["live_objects"], 10, "{name}: {plan}");
        // The pool's live ratio rule finds it too (10 of 12 objects live: 83 %).
        let plan = reel_ok(
            d,
            &["repack", "--pool", "p1", "--live-below", "0.9", "--dry-run"],
        );
        assert_eq!(
            plan["cartridges"].as_array().unwrap().len(),
            1,
            "{name}: {plan}"
        );
        reel_refused(
            d,
            &["repack", "--pool", "p1", "--live-below", "0.5", "--dry-run"],
            "matches no cartridge",
        );

        // The repack: every live object moved, the source full with nothing live. A second
        // repack of the same cartridge is refused while the first is unfinished.
        let first = job_id(&reel_ok(d, &["repack", "--barcode", &source]));
        reel_refused(d, &["repack", "--barcode", &source], "already");
        let v = wait_job(d, &first);
        assert_eq!(v["state"], "done", "{name}: {v}");
        assert_eq!(v["result"]["objects"], 10, "{name}: {v}");
        assert_eq!(v["result"]["failed"], 0, "{name}: {v}");
        assert_eq!(v["result"]["cartridges"][0]["live_left"], 0, "{name}: {v}");
        let c = cartridge(d, &source);
        assert_eq!(c["state"], "full", "{name}: {c}");
        for k in sums.keys() {
            let at = copies_of(d, k);
            assert_eq!(at.len(), 1, "{name}: {k} has copies {at:?}");
            assert_ne!(at[0], source, "{name}: {k} is still on the source");
        }
        recall_all(d, "r/", &sums);
        // The source keeps the bytes on tape: a verify of it finds every container whole (the
        // copies the repack retired are in the footers and no longer in the catalogue; the
        // torture run's verify once called that corruption).
        let v = run_job(d, &["verify", "--cartridge", &source]);
        assert_eq!(v["state"], "done", "{name}: {v}");
        assert!(
            !dir.path().join("repack").exists()
                || std::fs::read_dir(dir.path().join("repack"))
                    .unwrap()
                    .next()
                    .is_none(),
            "{name}: the repack buffer is left behind"
        );
        // Nothing left to move: a second repack of it is refused.
        reel_refused(d, &["repack", "--barcode", &source], "matches no cartridge");

        // Reclaim: refused while a hold covers a deleted object on it.
        let hold = reel_ok(
            d,
            &["hold", "place", "--key", "r/0010", "--reason", "audit"],
        );
        let checks = reel_ok(d, &["reclaim", &source, "--dry-run"]);
        assert_eq!(checks[0]["held"], 1, "{name}: {checks}");
        reel_refused(d, &["reclaim", &source], "legal hold");
        let id = hold["id"].as_i64().unwrap().to_string();
        reel_ok(d, &["hold", "release", &id, "--reason", "audit over"]);
        let epoch = cartridge(d, &source)["label_epoch"].as_u64().unwrap();
        let v = run_job(d, &["reclaim", &source]);
        assert_eq!(v["state"], "done", "{name}: {v}");
        let c = cartridge(d, &source);
        assert_eq!(c["state"], "active", "{name}: {c}");
        assert_eq!(c["used_bytes"], 0, "{name}: {c}");
        assert_eq!(c["label_epoch"].as_u64().unwrap(), epoch + 1, "{name}: {c}");
        // The deleted objects it held are gone for good; the live ones still recall.
        reel_refused(d, &["undelete", "r/0010"], "quarantine");
        recall_all(d, "r/", &sums);
        // The reclaimed cartridge takes new writes and reads them back.
        let more = archive(d, src.path(), "s/", 3, 20_000);
        recall_all(d, "s/", &more);

        // Objects with a copy in p1 and one in p2: moving the p1 copies "to p2" would leave
        // them a copy fewer. Nothing of them moves; the job fails naming them.
        let tree = src.path().join("t");
        std::fs::create_dir_all(&tree).unwrap();
        let t0 = write_random_file(&tree.join("0000"), 30_000, 99);
        let v = run_job(
            d,
            &[
                "archive",
                tree.to_str().unwrap(),
                "--key-prefix",
                "t/",
                "--class",
                "two",
            ],
        );
        assert_eq!(v["state"], "done", "{name}: {v}");
        let both = copies_of(d, "t/0000");
        assert_eq!(both.len(), 2, "{name}: {both:?}");
        let in_p1 = both
            .iter()
            .find(|b| cartridge(d, b)["pool"] == "p1")
            .unwrap()
            .clone();
        reel_refused(
            d,
            &[
                "repack",
                "--barcode",
                &in_p1,
                "--to-pool",
                "p1",
                "--add-copies",
            ],
            "copy there already",
        );
        let id = job_id(&reel_ok(
            d,
            &["repack", "--barcode", &in_p1, "--to-pool", "p2"],
        ));
        let (_, v, _) = reel(d, &["jobs", "wait", &id, "--timeout", "300"]);
        let v = v[0].clone();
        assert_eq!(v["state"], "failed", "{name}: {v}");
        assert!(
            v["error"].as_str().unwrap_or("").contains("a copy fewer"),
            "{name}: {v}"
        );
        let after = copies_of(d, "t/0000");
        assert_eq!(after.len(), 2, "{name}: t/0000 lost a copy: {after:?}");
        assert!(after.contains(&in_p1), "{name}: {after:?}");
        assert_ne!(cartridge(d, &in_p1)["state"], "repacking", "{name}");
        let out = tempfile::tempdir().unwrap();
        let v = run_job(
            d,
            &["recall", "t/0000", "--to", out.path().to_str().unwrap()],
        );
        assert_eq!(v["state"], "done", "{name}: {v}");
        assert_eq!(sha256_file(&out.path().join("t/0000")), t0, "{name}");
    }
}

/// `(written, given)` of a worker log's "write batch" line: the objects a write batch wrote
/// and the requests it began with.
fn batch_sizes(line: &str) -> Option<(u64, u64)> {
    if !line.contains("write batch") {
        return None;
    }
    let field = |name: &str| -> Option<u64> {
        let at = line.find(&format!(" {name}="))? + name.len() + 2;
        let digits: String = line[at..]
            .chars()
            .take_while(|c| c.is_ascii_digit())
            .collect();
        digits.parse().ok()
    };
    Some((field("written")?, field("of")?))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_repack_killed_halfway_resumes_and_loses_nothing_while_recalls_are_served() {
    for store in stores("cli_repack_crash").await {
        let name = store.name();
        let dir = tempfile::tempdir().unwrap();
        let lib = tempfile::tempdir().unwrap();
        write_config(
            dir.path(),
            &store.url(),
            lib.path(),
            2,
            "[repack]\nwindow = 8\nbuffer_bytes = 1000000\n",
        );
        let d = dir.path();
        let w = Worker::start(d, 1);
        let src = tempfile::tempdir().unwrap();
        let sums = archive(d, src.path(), "k/", 160, 4_000);
        let source = copies_of(d, "k/0000")[0].clone();
        let id = job_id(&reel_ok(d, &["repack", "--barcode", &source]));
        // Killed once some objects moved and before all did.
        let t0 = Instant::now();
        loop {
            let v = show_job(d, &id);
            let done = v["progress"]["objects_done"].as_u64().unwrap_or(0);
            if done >= 16 {
                assert!(done < 160, "{name}: the repack ended before the kill: {v}");
                break;
            }
            assert!(t0.elapsed() < Duration::from_secs(120), "{name}: {v}");
            std::thread::sleep(Duration::from_millis(20));
        }
        w.kill();
        // Recalls of every object while the repack resumes: each from whichever copy counts.
        let w2 = Worker::start(d, 2);
        let out = tempfile::tempdir().unwrap();
        let recall = job_id(&reel_ok(
            d,
            &[
                "recall",
                "--prefix",
                "k/",
                "--to",
                out.path().to_str().unwrap(),
            ],
        ));
        let v = wait_job(d, &id);
        assert_eq!(v["state"], "done", "{name}: {v}");
        assert_eq!(v["result"]["failed"], 0, "{name}: {v}");
        assert_eq!(v["result"]["cartridges"][0]["live_left"], 0, "{name}: {v}");
        let r = wait_job(d, &recall);
        assert_eq!(r["state"], "done", "{name}: {r}");
        for (k, sum) in &sums {
            assert_eq!(&sha256_file(&out.path().join(k)), sum, "{name}: {k}");
            let at = copies_of(d, k);
            assert!(
                !at.contains(&source),
                "{name}: {k} is still on {source}: {at:?}"
            );
        }
        assert_eq!(cartridge(d, &source)["state"], "full", "{name}");
        recall_all(d, "k/", &sums);
        // Slices of 8 objects: the destination's write sessions took later slices as the
        // source drive read them, instead of one session per slice.
        let joined = [1, 2]
            .iter()
            .flat_map(|n| {
                std::fs::read_to_string(d.join(format!("worker-{n}.log")))
                    .unwrap_or_default()
                    .lines()
                    .filter_map(batch_sizes)
                    .collect::<Vec<_>>()
            })
            .filter(|(written, given)| written > given)
            .count();
        assert!(
            joined > 0,
            "{name}: no write batch took more than it was given"
        );

        // A repack cancelled while no worker runs it: the cartridge gets its state back and
        // the job's buffer goes, once a worker is back.
        let dest = copies_of(d, "k/0000")[0].clone();
        let id = job_id(&reel_ok(d, &["repack", "--barcode", &dest]));
        let t0 = Instant::now();
        while show_job(d, &id)["progress"]["objects_done"]
            .as_u64()
            .unwrap_or(0)
            == 0
        {
            assert!(t0.elapsed() < Duration::from_secs(120), "{name}");
            std::thread::sleep(Duration::from_millis(20));
        }
        w2.kill();
        reel_ok(d, &["jobs", "cancel", &id]);
        let _w3 = Worker::start(d, 3);
        let t0 = Instant::now();
        loop {
            let c = cartridge(d, &dest);
            if c["state"] != "repacking" && show_job(d, &id)["state"] == "cancelled" {
                assert_eq!(c["state"], "active", "{name}: {c}");
                break;
            }
            assert!(t0.elapsed() < Duration::from_secs(120), "{name}: {c}");
            std::thread::sleep(Duration::from_millis(200));
        }
        let buffer = dir.path().join("repack").join(&id);
        let t0 = Instant::now();
        while buffer.exists() {
            assert!(
                t0.elapsed() < Duration::from_secs(60),
                "{name}: {buffer:?} is left"
            );
            std::thread::sleep(Duration::from_millis(200));
        }
        recall_all(d, "k/", &sums);
    }
}
