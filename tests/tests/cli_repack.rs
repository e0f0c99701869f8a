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
use sha2::Digest;

fn run_job(dir: &Path, args: &[&str]) -> serde_json::Value {
    let v = reel_ok(dir, args);
    wait_job(dir, &job_id(&v))
}

fn wait_job(dir: &Path, id: &str) -> serde_json::Value {
    wait_job_within(dir, id, 300)
}

/// [`wait_job`] with a limit of `secs` (a job of 100 000 objects on a shared, loaded host).
fn wait_job_within(dir: &Path, id: &str, secs: u64) -> serde_json::Value {
    let secs = secs.to_string();
    let (code, v, err) = reel(dir, &["jobs", "wait", id, "--timeout", &secs]);
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

/// The users' recall of `keys` into a new directory under `out`: the job's state, the
/// seconds it took from submission, and whether every file came back with its bytes.
fn user_recall(
    dir: &Path,
    out: &Path,
    keys: &[String],
    sums: &BTreeMap<String, [u8; 32]>,
) -> (serde_json::Value, f64) {
    let to = tempfile::tempdir_in(out).unwrap().keep();
    let t = Instant::now();
    let mut args = vec!["recall".to_string()];
    args.extend(keys.iter().cloned());
    args.extend(["--to".into(), to.display().to_string()]);
    let args: Vec<&str> = args.iter().map(String::as_str).collect();
    let v = run_job(dir, &args);
    let took = t.elapsed().as_secs_f64();
    if v["state"] == "done" {
        for k in keys {
            assert_eq!(&sha256_file(&to.join(k)), &sums[k], "{k}");
        }
    }
    (v, took)
}

/// Issue 19's scale test, on one store: a repack of a cartridge holding 100 000 objects while
/// users recall objects of another cartridge, each recall ending while the repack still runs.
async fn repack_100_000_objects(store: Store) {
    const N: usize = 100_000;
    {
        let name = store.name();
        let started = Instant::now();
        let dir = tempfile::tempdir().unwrap();
        let lib = tempfile::tempdir().unwrap();
        // Three drives: the repack may hold two (a source and a destination), the users the
        // third. The users' objects are in a pool of their own, on a cartridge not repacked.
        // One drive at a time writes for p1, so the archive lands on one cartridge.
        let cfg = write_config(
            dir.path(),
            &store.url(),
            lib.path(),
            3,
            "[repack]\nmax_drives = 2\n\n[scheduler.groups.g1]\npools = [\"p1\"]\nmax_write_drives = 1\n",
        );
        let text = std::fs::read_to_string(&cfg).unwrap();
        let text = text.replace(
            "two = [\"p1\", \"p2\"]\n",
            "two = [\"p1\", \"p2\"]\nusers = [\"p3\"]\n",
        );
        std::fs::write(&cfg, text).unwrap();
        let d = dir.path();
        let _w = Worker::start(d, 1);
        for (barcodes, pool) in [
            (&["RL0001L9", "RL0002L9"][..], "p1"),
            (&["RL0003L9"][..], "p3"),
        ] {
            let mut args = vec!["intake"];
            args.extend_from_slice(barcodes);
            args.extend_from_slice(&["--pool", pool]);
            let v = run_job(d, &args);
            assert_eq!(v["state"], "done", "{name}: {v}");
        }
        let src = tempfile::tempdir().unwrap();

        // The users' objects.
        let tree = src.path().join("u");
        let mut user_sums = BTreeMap::new();
        for i in 0..8u64 {
            let p = tree.join(format!("{i}"));
            std::fs::create_dir_all(&tree).unwrap();
            user_sums.insert(format!("u/{i}"), write_random_file(&p, 300_000, 100 + i));
        }
        let v = run_job(
            d,
            &[
                "archive",
                tree.to_str().unwrap(),
                "--key-prefix",
                "u/",
                "--class",
                "users",
            ],
        );
        assert_eq!(v["state"], "done", "{name}: {v}");

        // 100 000 small objects on one cartridge of p1: the test is about their number.
        let tree = src.path().join("m");
        std::fs::create_dir_all(&tree).unwrap();
        let mut sums = BTreeMap::new();
        for i in 0..N {
            let bytes =
                format!("object {i} of the repack of a hundred thousand\n").repeat(1 + i % 7);
            std::fs::write(tree.join(format!("{i:06}")), &bytes).unwrap();
            if i % 1_000 == 0 {
                sums.insert(
                    format!("m/{i:06}"),
                    <[u8; 32]>::from(sha2::Sha256::digest(bytes.as_bytes())),
                );
            }
        }
        // One write session for all of them: its progress shows only once they are durable,
        // at its end, so the wait allows for a loaded host (CI runs other tests beside it).
        let v = reel_ok(
            d,
            &["archive", tree.to_str().unwrap(), "--key-prefix", "m/"],
        );
        let v = wait_job_within(d, &job_id(&v), 900);
        assert_eq!(v["state"], "done", "{name}: {v}");
        eprintln!("{name}: {N} objects archived at {:.0?}", started.elapsed());
        let source = copies_of(d, "m/000000")[0].clone();
        let user_cartridge = copies_of(d, "u/0")[0].clone();
        assert_ne!(source, user_cartridge, "{name}");

        // The users' recalls before the repack: what they take on their own.
        let out = tempfile::tempdir().unwrap();
        let keys: Vec<String> = user_sums.keys().cloned().collect();
        let mut before = Vec::new();
        for i in 0..4 {
            let pick = [keys[i % 8].clone(), keys[(i + 3) % 8].clone()];
            let (v, took) = user_recall(d, out.path(), &pick, &user_sums);
            assert_eq!(v["state"], "done", "{name}: {v}");
            before.push(took);
        }

        // The repack, with the users recalling meanwhile: each recall that ends while the
        // repack still runs was served beside it, not after it.
        let id = job_id(&reel_ok(d, &["repack", "--barcode", &source]));
        let (mut during, mut i) = (Vec::new(), 0);
        let t0 = Instant::now();
        let repack = loop {
            let v = show_job(d, &id);
            if !matches!(v["state"].as_str(), Some("queued" | "running")) {
                break v;
            }
            assert!(t0.elapsed() < Duration::from_secs(1_200), "{name}: {v}");
            let pick = [keys[i % 8].clone(), keys[(i + 5) % 8].clone()];
            i += 1;
            let (r, took) = user_recall(d, out.path(), &pick, &user_sums);
            assert_eq!(r["state"], "done", "{name}: {r}");
            if show_job(d, &id)["state"] == "running" {
                during.push(took);
            }
            // A user every two seconds: the repack, not the test, has the cores.
            std::thread::sleep(Duration::from_secs(2));
        };
        eprintln!("{name}: repacked at {:.0?}", started.elapsed());
        let repack = if repack["state"] == "done" {
            repack
        } else {
            wait_job(d, &id)
        };
        eprintln!(
            "{name}: user recalls took {before:.2?} s before the repack and {during:.2?} s during it"
        );
        assert_eq!(repack["state"], "done", "{name}: {repack}");
        assert_eq!(repack["result"]["failed"], 0, "{name}: {repack}");
        assert_eq!(repack["result"]["objects"], N as u64, "{name}: {repack}");
        assert_eq!(
            repack["result"]["cartridges"][0]["live_left"], 0,
            "{name}: {repack}"
        );
        assert!(
            !during.is_empty(),
            "{name}: no user recall ended while the repack ran: {repack}"
        );
        assert_eq!(cartridge(d, &source)["state"], "full", "{name}");

        // Every object has a copy that counts, none of them on the source.
        let moved = catalogue_rows(
            d,
            &store.url(),
            "SELECT k.barcode, COUNT(DISTINCT c.object_id) FROM copies c \
             JOIN containers k ON k.id = c.container_id JOIN objects o ON o.id = c.object_id \
             WHERE o.key LIKE 'm/%' AND k.state IN ('durable', 'verified') \
             GROUP BY k.barcode ORDER BY k.barcode",
        )
        .await;
        assert!(
            moved.iter().all(|(b, _)| *b != source),
            "{name}: copies left on {source}: {moved:?}"
        );
        assert_eq!(
            moved.iter().map(|(_, n)| n).sum::<i64>(),
            N as i64,
            "{name}: {moved:?}"
        );
        // A sample recalls with its bytes, from the new copies.
        let picked: Vec<String> = sums.keys().cloned().collect();
        let (v, _) = user_recall(d, out.path(), &picked, &sums);
        assert_eq!(v["state"], "done", "{name}: {v}");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_repack_of_100_000_objects_runs_while_user_recalls_of_other_objects_are_served_sqlite() {
    repack_100_000_objects(Store::Sqlite).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_repack_of_100_000_objects_runs_while_user_recalls_of_other_objects_are_served_postgres()
{
    let Some(url) = postgres_url("cli_repack_100k") else {
        return;
    };
    repack_100_000_objects(Store::Postgres(PgDatabase::create(&url).await)).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_repack_whose_destination_fills_mid_session_goes_on_to_another_cartridge() {
    const MIB: u64 = 1 << 20;
    for store in stores("cli_repack_no_room").await {
        let name = store.name();
        let dir = tempfile::tempdir().unwrap();
        let lib = tempfile::tempdir().unwrap();
        // Cartridges of 32 MiB (early warning at 28 MiB), 256 KiB records, 8 MiB containers;
        // slices of 8 objects, so the destination's session takes later slices as they are
        // read, until it has no room.
        let plugin_config = format!(
            "dir={}\\nsim.clock=instant\\nsim.calibrated=true\\nsim.drives=2\\nsim.cartridges=6\\nsim.capacity_bytes={}\\nsim.early_warning_percent=87.5",
            lib.path().display(),
            32 * MIB
        );
        let cfg = write_plugin_config(
            dir.path(),
            &store.url(),
            &plugin_path("reel_plugin_sim"),
            &plugin_config,
            "[repack]\nwindow = 8\nbuffer_bytes = 8000000\nmax_drives = 2\n",
        );
        let text = std::fs::read_to_string(&cfg).unwrap().replace(
            "[archive]\n",
            "[archive]\nrecord_size = 262144\ncontainer_bytes = 8388608\n",
        );
        std::fs::write(&cfg, text).unwrap();
        let d = dir.path();
        let _w = Worker::start(d, 1);
        let v = run_job(d, &["intake", "--all-new"]);
        assert_eq!(v["state"], "done", "{name}: {v}");
        let src = tempfile::tempdir().unwrap();
        // 16 MB of objects to repack, then 20 MB more: the first cartridge fills with some
        // of it and the rest opens a second, which the repack then writes to.
        let mut sums = archive(d, src.path(), "r/", 40, 400_000);
        sums.extend(archive(d, src.path(), "f/", 20, 1_000_000));
        let source = copies_of(d, "r/0000")[0].clone();
        let partly = copies_of(d, "f/0019")[0].clone();
        assert_ne!(source, partly, "{name}: everything fitted on {source}");
        assert_eq!(cartridge(d, &source)["state"], "full", "{name}");
        let moving: Vec<String> = sums
            .keys()
            .filter(|k| copies_of(d, k).contains(&source))
            .cloned()
            .collect();
        let on_source = moving.len();

        let v = run_job(d, &["repack", "--barcode", &source]);
        assert_eq!(v["state"], "done", "{name}: {v}");
        assert_eq!(v["result"]["failed"], 0, "{name}: {v}");
        assert_eq!(v["result"]["objects"], on_source as u64, "{name}: {v}");
        assert_eq!(v["result"]["cartridges"][0]["live_left"], 0, "{name}: {v}");
        // The moved objects are on the partly used cartridge, which filled, and on another.
        let mut landed = std::collections::BTreeSet::new();
        for k in sums.keys() {
            let at = copies_of(d, k);
            assert_eq!(at.len(), 1, "{name}: {k}: {at:?}");
            assert_ne!(at[0], source, "{name}: {k}");
            if moving.contains(k) {
                landed.insert(at[0].clone());
            }
        }
        assert!(
            landed.contains(&partly) && landed.len() >= 2,
            "{name}: the moved objects are all on {landed:?}"
        );
        // Full, or kept `active` for objects smaller than the one that did not fit.
        let state = cartridge(d, &partly)["state"].clone();
        assert!(state == "full" || state == "active", "{name}: {state}");
        let log = std::fs::read_to_string(d.join("worker-1.log")).unwrap();
        assert!(
            log.contains("more objects join the write session"),
            "{name}: no session took more objects"
        );
        assert!(
            log.contains("does not fit") || log.contains("early warning"),
            "{name}: no session ran out of room"
        );
        for prefix in ["r/", "f/"] {
            let part: BTreeMap<String, [u8; 32]> = sums
                .iter()
                .filter(|(k, _)| k.starts_with(prefix))
                .map(|(k, v)| (k.clone(), *v))
                .collect();
            recall_all(d, prefix, &part);
        }
    }
}
