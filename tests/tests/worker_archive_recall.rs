//! End to end through the worker runtime `reel worker` runs (queue, scheduler, drive loops,
//! executor), with the simulator loaded through dlopen on the INSTANT clock, on SQLite and
//! PostgreSQL. An archive job then a recall job byte for byte — many small objects and
//! multi-GiB ones, two copies, several cartridges — then a catalogue rebuilt from the tapes
//! alone by a rebuild job equals the original; keys that try to escape the destination are
//! refused; and the first object after a mount is read through, not located.
//!
//! The worker runs in this process ([`EmbeddedWorker`]: the start-up and runtime of `reel
//! worker`) so that the test holds the library beside it and reads the simulator's counters.

use std::collections::{BTreeMap, BTreeSet};
use std::path::Path;
use std::time::Duration;

use rand::{Rng, SeedableRng};
use reel_queue::JobRecord;
use reel_queue::config::Config;
use reel_queue::job::{
    ArchiveJob, ArchiveSource, JobSpec, JobState, RebuildJob, RecallJob, RecallSelection,
};
use reel_tests::*;
use reel_worker::embedded::EmbeddedWorker;

/// A liveness bound for one job, not a timing claim (the clock is INSTANT; CI is shared).
const JOB_BOUND: Duration = Duration::from_secs(300);

/// The same for a job over thousands of objects and multi-GiB ones (every byte goes through
/// the simulator's files twice per copy under FULL verify).
const BIG_JOB_BOUND: Duration = Duration::from_secs(3600);

/// Bytes of each big object (multi-GiB by default; REEL_TEST_BIG_BYTES shrinks it locally).
fn big_bytes() -> u64 {
    std::env::var("REEL_TEST_BIG_BYTES")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or((2u64 << 30) + 12_345)
}

/// A tree of files to archive; a file's key is its path in the tree.
struct Spool {
    dir: tempfile::TempDir,
    sums: BTreeMap<String, [u8; 32]>,
    total: u64,
}

/// `small` files of up to 40 kB (every 500th empty) in 37 directories, and `big` files of
/// [`big_bytes`].
fn spool(small: usize, big: usize) -> Spool {
    let dir = tempfile::tempdir().unwrap();
    let mut rng = rand::rngs::StdRng::seed_from_u64(7);
    let mut sums = BTreeMap::new();
    let mut total = 0;
    for i in 0..small {
        let key = format!("small/{:02}/obj-{i:05}.bin", i % 37);
        let size = if i % 500 == 0 {
            0
        } else {
            rng.gen_range(1..40_000)
        };
        sums.insert(
            key.clone(),
            write_random_file(&dir.path().join(&key), size, i as u64),
        );
        total += size;
    }
    for i in 0..big {
        let key = format!("big/blob-{i}.dat");
        let size = big_bytes() + i as u64 * 4099;
        sums.insert(
            key.clone(),
            write_random_file(&dir.path().join(&key), size, 1000 + i as u64),
        );
        total += size;
    }
    Spool { dir, sums, total }
}

/// A host: its data directory (config, SQLite files) over the simulated library in a
/// directory of the caller's (two hosts may take turns on one library).
struct Site {
    _dir: tempfile::TempDir,
    config: Config,
}

/// A host over the library in `lib`: two drives, twelve cartridges of `capacity` bytes in 16
/// slots with early warning at 75 %, 512 MiB containers and a 2 GiB group-commit barrier, FULL
/// verify, storage classes `default` (p1) and `two` (p1, p2).
fn site(store: &Store, lib: &Path, capacity: u64) -> Site {
    let dir = tempfile::tempdir().unwrap();
    let plugin_config = format!(
        "dir={}\\nsim.clock=instant\\nsim.calibrated=true\\nsim.drives=2\\nsim.cartridges=12\\n\
         sim.slots=16\\nsim.capacity_bytes={capacity}\\nsim.early_warning_percent=75",
        lib.display()
    );
    let config = worker_config(
        dir.path(),
        &store.url(),
        &plugin_config,
        "container_bytes = 536870912\nbarrier_bytes = 2147483648\n",
    );
    Site { _dir: dir, config }
}

/// Start the worker for this host.
async fn start(site: &Site) -> EmbeddedWorker {
    start_worker(&site.config).await
}

/// Wait for a job to end; panics (with the job) if it does not within [`JOB_BOUND`].
async fn ended(w: &EmbeddedWorker, id: &str) -> JobRecord {
    job_ended(w, id, JOB_BOUND).await
}

async fn submit(w: &EmbeddedWorker, spec: JobSpec) -> String {
    w.submit(spec).await.unwrap().id
}

fn recall_job(keys: Vec<String>, to: &Path) -> JobSpec {
    JobSpec::Recall(RecallJob {
        selection: RecallSelection::Keys(keys),
        destination: to.to_path_buf(),
        overwrite: Default::default(),
        confine: None,
    })
}

/// A per-drive counter summed over the drives.
fn per_drive(counters: &serde_json::Value, field: &str) -> u64 {
    counters["drives"]
        .as_array()
        .map_or(0, |d| d.iter().filter_map(|x| x[field].as_u64()).sum())
}

/// Each key's copies in a catalogue dump, as (pool, barcode), the pool being its cartridge's.
fn copies_by_key(dump: &serde_json::Value) -> BTreeMap<String, Vec<(String, String)>> {
    let pools: BTreeMap<&str, &str> = dump["cartridges"]
        .as_array()
        .unwrap_or_else(|| panic!("no cartridges in the dump: {dump}"))
        .iter()
        .filter_map(|c| Some((c["barcode"].as_str()?, c["pool"].as_str()?)))
        .collect();
    let mut out: BTreeMap<String, Vec<(String, String)>> = BTreeMap::new();
    for c in dump["copies"].as_array().into_iter().flatten() {
        let key = c["key"].as_str().unwrap_or_default().to_string();
        let barcode = c["barcode"].as_str().unwrap_or_default().to_string();
        let pool = pools.get(barcode.as_str()).copied().unwrap_or_default();
        out.entry(key)
            .or_default()
            .push((pool.to_string(), barcode));
    }
    out
}

/// An archive job of a tree, two copies, spanning several cartridges per copy; a recall job
/// of every key returns each byte for byte, reading no bad copy, with no write anywhere but at
/// end of data; then a worker over a fresh catalogue and the same library runs a rebuild job of
/// every cartridge, and the catalogue it rebuilt from the tapes alone equals the original.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn archive_then_recall_byte_for_byte_on_both_backends() {
    init_tracing();
    let sp = spool(10_000, 2);
    let n = sp.sums.len() as u64;
    let firsts = stores("worker_archive_then_recall").await;
    let seconds = stores("worker_archive_then_recall_rebuilt").await;
    for (store, fresh) in firsts.into_iter().zip(seconds) {
        let name = store.name();
        let lib = tempfile::tempdir().unwrap();
        // Cartridges small enough that the data spans several of them per copy, big enough
        // for the largest object before early warning (75 %).
        let capacity = ((big_bytes() + (64 << 20)) * 4 / 3).max(sp.total * 2 / 5);
        // The host that archives, and the one that rebuilds its catalogue afterwards.
        let (archiving, rebuilding) = (
            site(&store, lib.path(), capacity),
            site(&fresh, lib.path(), capacity),
        );
        let w = start(&archiving).await;
        let id = submit(
            &w,
            JobSpec::Archive(ArchiveJob {
                source: ArchiveSource::Tree(sp.dir.path().to_path_buf()),
                key_prefix: String::new(),
                storage_class: "two".into(),
                confine: None,
            }),
        )
        .await;
        let r = job_ended(&w, &id, BIG_JOB_BOUND).await;
        assert_eq!(r.state, JobState::Done, "{name}: archive: {:?}", r.error);
        let cat = w.service().catalogue();
        assert_eq!(cat.count_objects().await.unwrap(), n, "{name}");

        // Two copies of every object, one per pool of the class, never on one cartridge; the
        // first copy spans several cartridges.
        let by_key = copies_by_key(&cat.dump().await.unwrap());
        assert_eq!(by_key.len() as u64, n, "{name}: objects with copies");
        let mut on_p1 = BTreeSet::new();
        for (k, copies) in &by_key {
            let pools: BTreeSet<&str> = copies.iter().map(|(p, _)| p.as_str()).collect();
            assert_eq!(copies.len(), 2, "{name}: {k}: {copies:?}");
            assert_eq!(
                pools,
                BTreeSet::from(["p1", "p2"]),
                "{name}: {k}: copies share a pool: {copies:?}"
            );
            assert_ne!(
                copies[0].1, copies[1].1,
                "{name}: {k}: copies share a cartridge"
            );
            on_p1.extend(
                copies
                    .iter()
                    .filter(|(p, _)| p == "p1")
                    .map(|(_, b)| b.clone()),
            );
        }
        assert!(
            on_p1.len() >= 2,
            "{name}: copy 1 spans several cartridges: {on_p1:?}"
        );

        let dst = tempfile::tempdir().unwrap();
        let keys: Vec<String> = sp.sums.keys().cloned().collect();
        let id = submit(&w, recall_job(keys, dst.path())).await;
        let r = job_ended(&w, &id, BIG_JOB_BOUND).await;
        assert_eq!(r.state, JobState::Done, "{name}: recall: {:?}", r.error);
        let result = r.result.unwrap_or_default();
        assert_eq!(result["objects"], n, "{name}: {result}");
        assert!(
            result.get("bad_copies").is_none(),
            "{name}: bad copies: {result}"
        );
        for (k, sum) in &sp.sums {
            let got = sha256_file(&dst.path().join(k));
            assert_eq!(hex32(&got), hex32(sum), "{name}: {k} differs");
        }

        // No write anywhere but at end of data.
        let v = sim_counters(&w).await;
        assert_eq!(v["violations"].as_u64(), Some(0), "{name}: {v}");

        // A catalogue rebuilt from the tapes alone equals the original.
        let original = cat.dump().await.unwrap();
        w.stop().await.unwrap();
        let w2 = start(&rebuilding).await;
        let id = submit(
            &w2,
            JobSpec::Rebuild(RebuildJob {
                cartridges: Vec::new(),
            }),
        )
        .await;
        let r = job_ended(&w2, &id, BIG_JOB_BOUND).await;
        assert_eq!(r.state, JobState::Done, "{name}: rebuild: {:?}", r.error);
        let result = r.result.unwrap_or_default();
        let objects: u64 = result["cartridges"]
            .as_array()
            .unwrap_or_else(|| panic!("{name}: no cartridges in the rebuild's result: {result}"))
            .iter()
            .filter_map(|c| c["objects"].as_u64())
            .sum();
        assert!(
            objects >= 2 * n,
            "{name}: {objects} objects rebuilt: {result}"
        );
        let rebuilt = w2.service().catalogue().dump().await.unwrap();
        assert_eq!(
            without_volatile(&original),
            without_volatile(&rebuilt),
            "{name}: rebuilt catalogue differs"
        );
        w2.stop().await.unwrap();
    }
}

/// Drop what a rebuild cannot know (mount counts, ids, creation times, dead containers).
fn without_volatile(v: &serde_json::Value) -> serde_json::Value {
    let mut v = v.clone();
    strip(&mut v);
    v
}

fn strip(v: &mut serde_json::Value) {
    match v {
        serde_json::Value::Object(m) => {
            for k in [
                "id",
                "container_id",
                "mount_count",
                "created_unix",
                "created",
                "calibrated",
                "state_changed",
            ] {
                m.remove(k);
            }
            for (_, x) in m.iter_mut() {
                strip(x);
            }
        }
        serde_json::Value::Array(a) => {
            a.retain(|x| x.get("state").and_then(|s| s.as_str()) != Some("dead"));
            for x in a.iter_mut() {
                strip(x);
            }
        }
        _ => {}
    }
}

/// Keys that try to escape the destination (`../escape.txt`, `/etc/reel-evil`, `a/../../x`)
/// are refused by the worker itself, for jobs that reach the queue without the submission
/// checks: an archive job whose key prefix makes such a key fails at once naming the prefix and
/// catalogues nothing; a recall job of such a key fails at once naming it; no drive is mounted
/// for any of them, and nothing is written outside the destination (nor inside).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn keys_escaping_the_destination_are_refused() {
    init_tracing();
    let dir = tempfile::tempdir().unwrap();
    // Each hostile key as an archive job makes it: the key prefix, then the file's name.
    let evil = [
        ("../", "escape.txt"),
        ("/etc/", "reel-evil"),
        ("a/../../", "x"),
    ];
    for store in stores("worker_keys_escaping_the_destination").await {
        let name = store.name();
        let lib = tempfile::tempdir().unwrap();
        let site = site(&store, lib.path(), 1 << 30);
        let w = start(&site).await;
        for (i, (prefix, file)) in evil.iter().enumerate() {
            let key = format!("{prefix}{file}");
            let p = dir.path().join(format!("f{i}")).join(file);
            write_random_file(&p, 1000, i as u64);
            let id = submit(
                &w,
                JobSpec::Archive(ArchiveJob {
                    source: ArchiveSource::Files(vec![p]),
                    key_prefix: prefix.to_string(),
                    storage_class: "default".into(),
                    confine: None,
                }),
            )
            .await;
            let r = ended(&w, &id).await;
            assert_eq!(
                r.state,
                JobState::Failed,
                "{name}: {key} was archived: {r:?}"
            );
            assert_eq!(r.attempts, 1, "{name}: {key}: retried: {r:?}");
            let why = r.error.unwrap_or_default();
            assert!(
                why.contains("key_prefix") && why.contains(prefix),
                "{name}: {key}: {why}"
            );
            assert!(
                !matches!(w.service().catalogue().object(&key).await, Ok(Some(_))),
                "{name}: {key} is catalogued"
            );
        }
        let root = tempfile::tempdir().unwrap();
        let inner = root.path().join("dst");
        std::fs::create_dir_all(&inner).unwrap();
        for (prefix, file) in evil {
            let key = format!("{prefix}{file}");
            let id = submit(&w, recall_job(vec![key.clone()], &inner)).await;
            let r = ended(&w, &id).await;
            assert_eq!(
                r.state,
                JobState::Failed,
                "{name}: {key} was recalled: {r:?}"
            );
            assert_eq!(r.attempts, 1, "{name}: {key}: retried: {r:?}");
            let why = r.error.unwrap_or_default();
            assert!(
                why.contains("keys") && why.contains(&key),
                "{name}: {key}: {why}"
            );
        }
        // Nothing was written outside the destination (nor inside).
        let outside: Vec<_> = std::fs::read_dir(root.path())
            .unwrap()
            .map(|e| e.unwrap().file_name())
            .collect();
        assert_eq!(outside, vec![std::ffi::OsString::from("dst")], "{name}");
        assert_eq!(std::fs::read_dir(&inner).unwrap().count(), 0, "{name}");
        let v = sim_counters(&w).await;
        assert_eq!(v["robot_moves"], 0, "{name}: a drive was mounted: {v}");
        w.stop().await.unwrap();
    }
}

/// The first object on a cartridge is reached from BOT by reading through the label's filemark
/// and the container header, not by a LOCATE (which costs a settle); a filemark in a short gap
/// is a block to step over, not a reason to locate. The object is archived by a job, the
/// worker is stopped (its drive loops unload: a cold library) and started again, and a recall
/// job of the object mounts its cartridge once and the simulator counts no locate.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn first_object_after_a_mount_is_read_through_not_located() {
    init_tracing();
    let dir = tempfile::tempdir().unwrap();
    let p = dir.path().join("first");
    let sum = write_random_file(&p, 3 << 20, 7);
    for store in stores("worker_first_object_read_through").await {
        let name = store.name();
        let lib = tempfile::tempdir().unwrap();
        let site = site(&store, lib.path(), 1 << 30);
        let w = start(&site).await;
        let id = submit(
            &w,
            JobSpec::Archive(ArchiveJob {
                source: ArchiveSource::Files(vec![p.clone()]),
                key_prefix: String::new(),
                storage_class: "default".into(),
                confine: None,
            }),
        )
        .await;
        let r = ended(&w, &id).await;
        assert_eq!(r.state, JobState::Done, "{name}: archive: {:?}", r.error);
        // A cold library: the stopped worker unloaded its drives.
        w.stop().await.unwrap();
        let w = start(&site).await;
        let before = sim_counters(&w).await;
        let dst = tempfile::tempdir().unwrap();
        let id = submit(&w, recall_job(vec!["first".into()], dst.path())).await;
        let r = ended(&w, &id).await;
        assert_eq!(r.state, JobState::Done, "{name}: recall: {:?}", r.error);
        let result = r.result.unwrap_or_default();
        assert_eq!(result["objects"], 1, "{name}: {result}");
        let after = sim_counters(&w).await;
        assert_eq!(
            per_drive(&after, "mounts") - per_drive(&before, "mounts"),
            1,
            "{name}: {before} {after}"
        );
        assert_eq!(
            per_drive(&after, "locates") - per_drive(&before, "locates"),
            0,
            "{name}: the first object was located: {before} {after}"
        );
        assert_eq!(
            hex32(&sha256_file(&dst.path().join("first"))),
            hex32(&sum),
            "{name}"
        );
        w.stop().await.unwrap();
    }
}

/// A write session's first records reach the stopped tape as one arrival (ABI 1.4
/// `drive_write_records`, decision 56), so a container's small header does not start the tape
/// on its own. Three archive jobs of small files, three write sessions each starting at a
/// stopped tape: the simulator counts the calls that wrote more than one record. The session
/// gathers what arrives within 50 ms, so one session on a stalled host may send its header
/// alone; three all doing so would be a regression, not a slow host. Then every object recalls
/// byte for byte. The behaviour is the engine's, not the store's: SQLite only.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_stopped_tape_takes_a_sessions_first_records_in_one_call() {
    init_tracing();
    let store = Store::Sqlite;
    let lib = tempfile::tempdir().unwrap();
    let site = site(&store, lib.path(), 1 << 30);
    let w = start(&site).await;
    let src = tempfile::tempdir().unwrap();
    let mut sums = BTreeMap::new();
    let before = sim_counters(&w).await;
    for job in 0..3u64 {
        let tree = src.path().join(format!("j{job}"));
        for i in 0..24u64 {
            let key = format!("j{job}/f{i:02}");
            let sum = write_random_file(&src.path().join(&key), 3_000 + i * 517, job * 100 + i);
            sums.insert(key, sum);
        }
        let id = submit(
            &w,
            JobSpec::Archive(ArchiveJob {
                source: ArchiveSource::Tree(tree),
                key_prefix: format!("j{job}/"),
                storage_class: "default".into(),
                confine: None,
            }),
        )
        .await;
        let r = ended(&w, &id).await;
        assert_eq!(r.state, JobState::Done, "archive {job}: {:?}", r.error);
    }
    let after = sim_counters(&w).await;
    let together = per_drive(&after, "writes_together") - per_drive(&before, "writes_together");
    assert!(
        together >= 1,
        "no write session gave the drive its first records together: {before} {after}"
    );
    assert_eq!(per_drive(&after, "writes_not_at_eod"), 0, "{after}");
    let dst = tempfile::tempdir().unwrap();
    let id = submit(&w, recall_job(sums.keys().cloned().collect(), dst.path())).await;
    let r = ended(&w, &id).await;
    assert_eq!(r.state, JobState::Done, "recall: {:?}", r.error);
    for (k, sum) in &sums {
        assert_eq!(hex32(&sha256_file(&dst.path().join(k))), hex32(sum), "{k}");
    }
    w.stop().await.unwrap();
}
