//! Faults injected while a job runs under the worker runtime `reel worker` runs (queue,
//! scheduler, drive loops, executor), with the simulator loaded through dlopen on the INSTANT
//! clock, on SQLite and PostgreSQL: a power cut and a drive death in the middle of an archive,
//! a medium error on one copy of a recalled object, end of medium and early warning in the
//! middle of an archive, and every fault the simulator can inject.
//!
//! The worker runs in this process ([`EmbeddedWorker`]: the start-up and runtime of `reel
//! worker`) so that the test holds the library beside it and arms the fault through the
//! simulator's control channel. Each case is checked after its job ends: the job ended done,
//! or failed with a reason and, once the drives are serviced, a retry of it ended done; every
//! acknowledged object recalls byte for byte through a recall job; whatever the catalogue lists
//! is intact; the simulator counted no write anywhere but at end of data; and no job or tape
//! request is left queued or running.

use std::collections::BTreeMap;
use std::path::PathBuf;
use std::time::Duration;

use reel_engine::catalogue::{CartridgeState, ContainerState};
use reel_engine::integrity::CatchKind;
use reel_queue::config::Config;
use reel_queue::job::{
    ArchiveJob, ArchiveSource, IntakeJob, IntakeSelection, JobSpec, JobState, RecallJob,
    RecallSelection, VerifyJob, VerifyTarget,
};
use reel_queue::{JobRecord, TapeRequests};
use reel_tests::*;
use reel_worker::embedded::EmbeddedWorker;

/// A liveness bound for one job, not a timing claim (the clock is INSTANT; CI is shared).
const JOB_BOUND: Duration = Duration::from_secs(300);

/// Files to archive, with their checksums by key.
struct Batch {
    _dir: tempfile::TempDir,
    prefix: String,
    paths: Vec<PathBuf>,
    sums: BTreeMap<String, [u8; 32]>,
}

/// `n` files of about `size` bytes; keys `PREFIX/0000`, `PREFIX/0001`, ...
fn batch(prefix: &str, n: usize, size: u64, seed: u64) -> Batch {
    let dir = tempfile::tempdir().unwrap();
    let mut paths = Vec::new();
    let mut sums = BTreeMap::new();
    for i in 0..n {
        let name = format!("{i:04}");
        let p = dir.path().join(&name);
        let s = write_random_file(&p, size + i as u64, seed * 100_000 + i as u64);
        sums.insert(format!("{prefix}/{name}"), s);
        paths.push(p);
    }
    Batch {
        _dir: dir,
        prefix: prefix.to_string(),
        paths,
        sums,
    }
}

/// A host: its data directory (config, SQLite files) and its simulated library (two drives,
/// ten 2 GiB cartridges with early warning at 90 %), 8 MiB containers and a 16 MiB group-commit
/// barrier, FULL verify, storage classes `default` (p1) and `two` (p1, p2).
struct Site {
    _dir: tempfile::TempDir,
    _lib: tempfile::TempDir,
    config: Config,
}

fn site(store: &Store) -> Site {
    site_with_drives(store, 2)
}

/// A site whose library has `drives` drives.
fn site_with_drives(store: &Store, drives: u32) -> Site {
    let dir = tempfile::tempdir().unwrap();
    let lib = tempfile::tempdir().unwrap();
    let plugin_config = format!(
        "dir={}\\nsim.clock=instant\\nsim.calibrated=true\\nsim.drives={drives}\\nsim.cartridges=10\\n\
         sim.capacity_bytes=2147483648\\nsim.early_warning_percent=90",
        lib.path().display()
    );
    let config = worker_config(
        dir.path(),
        &store.url(),
        &plugin_config,
        "barrier_bytes = 16777216\ncontainer_bytes = 8388608\n",
    );
    Site {
        _dir: dir,
        _lib: lib,
        config,
    }
}

/// Start the worker for this host.
async fn start(site: &Site) -> EmbeddedWorker {
    start_worker(&site.config).await
}

/// Wait for a job to end; panics (with the job) if it does not within [`JOB_BOUND`].
async fn ended(w: &EmbeddedWorker, id: &str) -> JobRecord {
    job_ended(w, id, JOB_BOUND).await
}

async fn submit_archive(w: &EmbeddedWorker, b: &Batch, class: &str) -> String {
    w.submit(JobSpec::Archive(ArchiveJob {
        source: ArchiveSource::Files(b.paths.clone()),
        key_prefix: format!("{}/", b.prefix),
        storage_class: class.to_string(),
        confine: None,
    }))
    .await
    .unwrap()
    .id
}

/// Archive and require it done.
async fn archive(w: &EmbeddedWorker, b: &Batch, class: &str) {
    let id = submit_archive(w, b, class).await;
    let r = ended(w, &id).await;
    assert_eq!(
        r.state,
        JobState::Done,
        "archive {}: {:?}",
        b.prefix,
        r.error
    );
}

/// How many drives have died and wait for service, and how many drives there are.
async fn failed_drives(w: &EmbeddedWorker) -> (usize, usize) {
    let v = sim_counters(w).await;
    let drives = v["drives"].as_array().cloned().unwrap_or_default();
    let failed = drives.iter().filter(|d| d["failed"] == true).count();
    (failed, drives.len())
}

/// Service the drives that died, as an operator replaces a dead drive; a fault armed on a
/// working drive and not met yet stays armed (the recalls after the job meet it).
async fn service_dead_drives(w: &EmbeddedWorker) {
    if failed_drives(w).await.0 > 0 {
        service_drives(w).await;
    }
}

/// Wait for a job to end as an operator would: a drive that died is serviced (the robot pulls
/// its cartridge, the drive is replaced) once no drive is left, since the work then waits for
/// one. Panics if the job does not end within [`JOB_BOUND`].
async fn ended_with_service(w: &EmbeddedWorker, id: &str, what: &str) -> JobRecord {
    let deadline = tokio::time::Instant::now() + JOB_BOUND;
    loop {
        let r = w.queue().store().require(id).await.unwrap();
        if r.state.is_final() {
            return r;
        }
        let (failed, all) = failed_drives(w).await;
        if all > 0 && failed == all {
            eprintln!("{what}: every drive has failed; servicing them");
            service_drives(w).await;
        }
        assert!(
            tokio::time::Instant::now() < deadline,
            "{what}: job {id} did not end within {JOB_BOUND:?}: {r:?}"
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

/// A job that met a fault ended done, or failed with a reason; then, after the robot has
/// freed and the service replaced any dead drive, a retry of it ends done. Returns how it
/// first ended.
async fn done_or_failed_then_retried(w: &EmbeddedWorker, id: &str, what: &str) -> JobState {
    let first = ended_with_service(w, id, what).await;
    let mut r = first.clone();
    for _ in 0..3 {
        match r.state {
            JobState::Done => break,
            JobState::Failed => {
                let why = r.error.clone().unwrap_or_default();
                assert!(!why.trim().is_empty(), "{what}: failed without a reason");
                eprintln!("{what}: job failed: {why}");
                service_drives(w).await;
                w.queue().retry(id).await.unwrap();
                r = ended_with_service(w, id, what).await;
            }
            s => panic!("{what}: job ended {s}: {:?}", r.error),
        }
    }
    assert_eq!(r.state, JobState::Done, "{what}: never done: {:?}", r.error);
    first.state
}

/// The robot pulls whatever a dead drive holds and the drive is replaced (both drives); a
/// drive its worker took down after repeated failures is brought up, as the operator does
/// after the service (`reel drive up`).
async fn service_drives(w: &EmbeddedWorker) {
    for d in 0..2 {
        w.service()
            .library()
            .control(&format!(r#"{{"op":"robot_recover","drive":{d}}}"#))
            .await
            .unwrap();
    }
    let states = reel_queue::DriveStates::new(w.queue().store().db().clone());
    for s in states.list().await.unwrap() {
        if !s.is_up() {
            states.up(&s.drive, "replaced", "test").await.unwrap();
        }
    }
}

/// Recall `keys` through a recall job into a fresh directory and compare with `sums`;
/// returns the job's result.
async fn recall_all(
    w: &EmbeddedWorker,
    sums: &BTreeMap<String, [u8; 32]>,
    keys: &[String],
) -> serde_json::Value {
    let dst = tempfile::tempdir().unwrap();
    let id = w
        .submit(JobSpec::Recall(RecallJob {
            selection: RecallSelection::Keys(keys.to_vec()),
            destination: dst.path().to_path_buf(),
            overwrite: Default::default(),
            confine: None,
        }))
        .await
        .unwrap()
        .id;
    let r = ended(w, &id).await;
    assert_eq!(r.state, JobState::Done, "recall: {:?}", r.error);
    for k in keys {
        assert_eq!(sha256_file(&dst.path().join(k)), sums[k], "{k} differs");
    }
    r.result.unwrap_or_default()
}

/// Writes anywhere but at end of data, as the simulator counted them.
async fn violations(w: &EmbeddedWorker) -> u64 {
    sim_counters(w).await["violations"]
        .as_u64()
        .expect("violations counter")
}

/// Every object the catalogue lists is one we wrote, and recalls intact; returns how many.
async fn listed_objects_are_intact(w: &EmbeddedWorker, sums: &BTreeMap<String, [u8; 32]>) -> usize {
    let listed: Vec<String> = w
        .service()
        .catalogue()
        .list_objects("", 1_000_000)
        .await
        .unwrap()
        .into_iter()
        .map(|o| o.key)
        .collect();
    for k in &listed {
        assert!(
            sums.contains_key(k),
            "the catalogue lists {k}, which was never archived"
        );
    }
    if !listed.is_empty() {
        recall_all(w, sums, &listed).await;
    }
    listed.len()
}

/// No job and no tape request is left queued or running.
async fn nothing_left(w: &EmbeddedWorker, what: &str) {
    let store = w.queue().store();
    for s in [JobState::Queued, JobState::Running] {
        let left = store.list(Some(s), 100).await.unwrap();
        assert!(
            left.is_empty(),
            "{what}: jobs left {s}: {:?}",
            left.iter().map(|j| &j.id).collect::<Vec<_>>()
        );
    }
    let queues = TapeRequests::new(store.db().clone())
        .summaries()
        .await
        .unwrap();
    assert!(queues.is_empty(), "{what}: tape requests left: {queues:?}");
}

/// Arm a fault (`fields`: its kind and arguments) on both drives: whichever writes next meets
/// it.
async fn arm_on_both_drives(w: &EmbeddedWorker, fields: &str) {
    for d in 0..2 {
        let req = format!(r#"{{"op":"fault","drive":{d},{fields}}}"#);
        w.service()
            .library()
            .control(&req)
            .await
            .unwrap_or_else(|e| panic!("{req}: {e}"));
    }
}

/// Drop every fault still armed on either drive.
async fn disarm_both_drives(w: &EmbeddedWorker) {
    for d in 0..2 {
        let req = format!(r#"{{"op":"disarm","drive":{d}}}"#);
        w.service()
            .library()
            .control(&req)
            .await
            .unwrap_or_else(|e| panic!("{req}: {e}"));
    }
}

fn keys(sums: &BTreeMap<String, [u8; 32]>) -> Vec<String> {
    sums.keys().cloned().collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn power_cut_mid_archive_loses_nothing_acknowledged() {
    init_tracing();
    for store in stores("worker_power_cut_mid_archive").await {
        let site = site(&store);
        let a = batch("a", 20, 1 << 20, 1);
        let b = batch("b", 120, 512 << 10, 2);
        let mut sums = a.sums.clone();
        sums.extend(b.sums.clone());
        let w = start(&site).await;
        archive(&w, &a, "default").await;
        // The power goes once 24 more records are written (past the first 16 MiB barrier),
        // whichever drive writes them: a point in the session no scheduler can move.
        arm_on_both_drives(&w, r#""kind":"power_cut","after_records":24"#).await;
        let id = submit_archive(&w, &b, "default").await;
        let first = ended(&w, &id).await;
        assert!(
            first.state == JobState::Done
                || (first.state == JobState::Failed && first.error.is_some()),
            "{}: {first:?}",
            store.name()
        );
        // The host comes back: a new worker recovers the cartridges left with pending
        // containers at start-up, and what the catalogue lists then is intact.
        w.stop().await.unwrap();
        let w = start(&site).await;
        recall_all(&w, &sums, &keys(&a.sums)).await;
        listed_objects_are_intact(&w, &sums).await;
        // The archive completes (retried if the cut failed it); everything recalls.
        if first.state == JobState::Failed {
            w.queue().retry(&id).await.unwrap();
        }
        assert_eq!(
            ended(&w, &id).await.state,
            JobState::Done,
            "{}",
            store.name()
        );
        recall_all(&w, &sums, &keys(&sums)).await;
        assert_eq!(violations(&w).await, 0, "{}", store.name());
        nothing_left(&w, store.name()).await;
        w.stop().await.unwrap();
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn drive_death_mid_archive_loses_nothing_acknowledged() {
    init_tracing();
    for store in stores("worker_drive_death_mid_archive").await {
        let site = site(&store);
        let a = batch("a", 10, 1 << 20, 3);
        let b = batch("b", 60, 1 << 20, 4);
        let mut sums = a.sums.clone();
        sums.extend(b.sums.clone());
        let w = start(&site).await;
        archive(&w, &a, "default").await;
        // Both drives die after 25 more records: whichever one writes dies mid-session.
        arm_on_both_drives(&w, r#""kind":"drive_dies","after_records":25"#).await;
        let id = submit_archive(&w, &b, "default").await;
        // With both drives dead the work waits for service instead of spending its attempts:
        // the job's first ending, after the drives are serviced, is done.
        let first = done_or_failed_then_retried(&w, &id, store.name()).await;
        assert_eq!(
            first,
            JobState::Done,
            "{}: the dead drives failed the job",
            store.name()
        );
        service_dead_drives(&w).await;
        recall_all(&w, &sums, &keys(&sums)).await;
        listed_objects_are_intact(&w, &sums).await;
        assert_eq!(violations(&w).await, 0, "{}", store.name());
        nothing_left(&w, store.name()).await;
        w.stop().await.unwrap();
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn medium_error_on_one_copy_recalls_from_the_other() {
    init_tracing();
    for store in stores("worker_medium_error_on_one_copy").await {
        let site = site(&store);
        let w = start(&site).await;
        let b = batch("m", 12, 300_000, 5);
        archive(&w, &b, "two").await;
        let key = "m/0007".to_string();
        let cat = w.service().catalogue();
        let obj = cat.object(&key).await.unwrap().unwrap();
        let copies = cat.copies(&key, obj.generation).await.unwrap();
        assert_eq!(copies.len(), 2);
        // Damage the copy a recall reads first (the catalogue's order: both verified on
        // active cartridges, so the first by barcode).
        let bad = copies[0].clone();
        let block = bad.container_first_block + 1 + bad.offset / bad.record_size as u64;
        w.service()
            .library()
            .control(&format!(
                r#"{{"op":"fault","kind":"medium_error","barcode":"{}","block":{block}}}"#,
                bad.barcode
            ))
            .await
            .unwrap();
        let result = recall_all(&w, &b.sums, std::slice::from_ref(&key)).await;
        assert_eq!(result["objects"], 1, "{result}");
        assert_eq!(
            result["bad_copies"],
            serde_json::json!([{"key": key, "bad_copies": [bad.barcode]}]),
            "{}: the recall names the bad copy: {result}",
            store.name()
        );
        assert_eq!(violations(&w).await, 0);
        nothing_left(&w, store.name()).await;
        w.stop().await.unwrap();
    }
}

async fn eom_case(kind: &str) {
    for store in stores(&format!("worker_{kind}_mid_archive")).await {
        let site = site(&store);
        let w = start(&site).await;
        // Armed on both drives for the next cartridge each loads: 12 MB into it.
        arm_on_both_drives(&w, &format!(r#""kind":"{kind}","bytes":12000000"#)).await;
        let b = batch("e", 40, 1 << 20, 6);
        archive(&w, &b, "default").await;
        // The cartridge that met the fault is marked full, and the archive went on on
        // another cartridge: some object has its copy elsewhere.
        let cat = w.service().catalogue();
        let full: Vec<String> = cat
            .cartridges()
            .await
            .unwrap()
            .into_iter()
            .filter(|c| c.state == CartridgeState::Full)
            .map(|c| c.barcode)
            .collect();
        assert!(
            !full.is_empty(),
            "{}: {kind}: no cartridge marked full",
            store.name()
        );
        let mut elsewhere = 0;
        for k in b.sums.keys() {
            let o = cat.object(k).await.unwrap().unwrap();
            let c = cat.copies(k, o.generation).await.unwrap();
            assert_eq!(c.len(), 1, "{k}: {c:?}");
            if !full.contains(&c[0].barcode) {
                elsewhere += 1;
            }
        }
        assert!(
            elsewhere > 0,
            "{}: {kind}: the archive did not continue on another cartridge",
            store.name()
        );
        recall_all(&w, &b.sums, &keys(&b.sums)).await;
        assert_eq!(violations(&w).await, 0);
        nothing_left(&w, store.name()).await;
        w.stop().await.unwrap();
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn end_of_medium_mid_archive_completes_on_the_next_cartridge() {
    init_tracing();
    eom_case("end_of_medium").await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn early_warning_mid_archive_closes_the_cartridge_cleanly() {
    init_tracing();
    eom_case("early_warning").await;
}

/// Where a fault is aimed.
enum Aim {
    /// At both drives (whichever one works next meets it).
    Drives(&'static str),
    /// At a data block of an archived object's first copy.
    Block(&'static str),
    /// At that copy's cartridge.
    Cartridge(&'static str),
    /// At the library.
    Library(&'static str),
}

/// Every fault the simulator can inject, armed while the worker runs and met by an archive
/// job or by the recalls after it: the job ends done, or failed with a reason and done on a
/// retry; every acknowledged object recalls intact (from the other copy where one is
/// damaged), what the catalogue lists is intact, no write went anywhere but end of data, and
/// nothing is left queued.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_simulator_fault_loses_nothing_acknowledged() {
    init_tracing();
    let faults: Vec<(&str, Aim)> = vec![
        (
            "corrupt_write",
            Aim::Drives(r#""kind":"corrupt_write","offset":100"#),
        ),
        (
            "corrupt_read",
            Aim::Drives(r#""kind":"corrupt_read","offset":100"#),
        ),
        ("medium_error", Aim::Block(r#""kind":"medium_error""#)),
        (
            "deferred_write_error",
            Aim::Drives(r#""kind":"deferred_write_error""#),
        ),
        (
            "short_write",
            Aim::Drives(r#""kind":"short_write","bytes":1000"#),
        ),
        (
            "silent_corrupt_write",
            Aim::Drives(r#""kind":"silent_corrupt_write","offset":7"#),
        ),
        (
            "corrupt_stored",
            Aim::Block(r#""kind":"corrupt_stored","offset":9"#),
        ),
        ("unit_attention", Aim::Drives(r#""kind":"unit_attention""#)),
        ("position_lost", Aim::Drives(r#""kind":"position_lost""#)),
        ("drive_fault", Aim::Drives(r#""kind":"drive_fault""#)),
        (
            "cleaning_required",
            Aim::Drives(r#""kind":"cleaning_required""#),
        ),
        (
            "drive_dies",
            Aim::Drives(r#""kind":"drive_dies","after_records":5"#),
        ),
        (
            "early_warning",
            Aim::Drives(r#""kind":"early_warning","bytes":3000000"#),
        ),
        (
            "end_of_medium",
            Aim::Drives(r#""kind":"end_of_medium","bytes":3000000"#),
        ),
        ("worm_overwrite", Aim::Drives(r#""kind":"worm_overwrite""#)),
        (
            "foreign_cartridge",
            Aim::Cartridge(r#""kind":"foreign_cartridge""#),
        ),
        (
            "mam_epoch_bump",
            Aim::Cartridge(r#""kind":"mam_epoch_bump""#),
        ),
        ("power_cut", Aim::Library(r#""kind":"power_cut""#)),
    ];
    for (name, aim) in &faults {
        for store in stores(&format!("worker_fault_{name}")).await {
            let what = format!("{} {name}", store.name());
            eprintln!("=== {what}");
            let site = site(&store);
            let a = batch("a", 8, 400_000, 10);
            let b = batch("b", 16, 600_000, 11);
            let mut sums = a.sums.clone();
            sums.extend(b.sums.clone());
            let w = start(&site).await;
            archive(&w, &a, "two").await;
            let cat = w.service().catalogue();
            let obj = cat.object("a/0003").await.unwrap().unwrap();
            let first = cat.copies("a/0003", obj.generation).await.unwrap()[0].clone();
            let block = first.container_first_block + 1 + first.offset / first.record_size as u64;
            let reqs: Vec<String> = match aim {
                Aim::Drives(f) => (0..2)
                    .map(|d| format!(r#"{{"op":"fault","drive":{d},{f}}}"#))
                    .collect(),
                Aim::Block(f) => vec![format!(
                    r#"{{"op":"fault","barcode":"{}","block":{block},{f}}}"#,
                    first.barcode
                )],
                Aim::Cartridge(f) => vec![format!(
                    r#"{{"op":"fault","barcode":"{}",{f}}}"#,
                    first.barcode
                )],
                Aim::Library(f) => vec![format!(r#"{{"op":"fault",{f}}}"#)],
            };
            for r in &reqs {
                w.service()
                    .library()
                    .control(r)
                    .await
                    .unwrap_or_else(|e| panic!("{what}: {r}: {e}"));
            }
            let id = submit_archive(&w, &b, "two").await;
            done_or_failed_then_retried(&w, &id, &what).await;
            service_dead_drives(&w).await;
            recall_all(&w, &sums, &keys(&sums)).await;
            listed_objects_are_intact(&w, &sums).await;
            assert_eq!(violations(&w).await, 0, "{what}");
            nothing_left(&w, &what).await;
            w.stop().await.unwrap();
        }
    }
}

/// The counterpart of the faults above: what no retry can mend fails at once, with the
/// reason. A recall submitted straight to the queue (no submission check) of a key the
/// catalogue does not hold, and of a prefix that matches nothing, ends failed after one
/// attempt, naming the keys or the prefix; a drive is never mounted for it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_recall_of_what_the_catalogue_lacks_fails_at_once_with_the_reason() {
    init_tracing();
    for store in stores("worker_recall_refused").await {
        let site = site(&store);
        let w = start(&site).await;
        let dst = tempfile::tempdir().unwrap();
        for (selection, says) in [
            (
                RecallSelection::Keys(vec!["no/such/key".into()]),
                "`no/such/key`",
            ),
            (RecallSelection::Prefix("nothing/".into()), "nothing/"),
        ] {
            let id = w
                .submit(JobSpec::Recall(RecallJob {
                    selection,
                    destination: dst.path().to_path_buf(),
                    overwrite: Default::default(),
                    confine: None,
                }))
                .await
                .unwrap()
                .id;
            let r = ended(&w, &id).await;
            assert_eq!(r.state, JobState::Failed, "{}: {r:?}", store.name());
            assert_eq!(r.attempts, 1, "{}: retried: {r:?}", store.name());
            let why = r.error.unwrap_or_default();
            assert!(why.contains(says), "{}: {why}", store.name());
        }
        let v = sim_counters(&w).await;
        assert_eq!(
            v["robot_moves"],
            0,
            "{}: a drive was mounted: {v}",
            store.name()
        );
        nothing_left(&w, store.name()).await;
        w.stop().await.unwrap();
    }
}

/// Damage on the way from the drive (LBP) is not damage on the medium: a verify job that meets
/// it reads the record again and keeps the container. Before, it marked the container dead, and
/// once the torture run (seed 5, PostgreSQL) saw the other copy damaged for real, objects were
/// reported lost while a good copy was on tape.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_read_damaged_on_the_way_does_not_kill_a_verified_container() {
    init_tracing();
    for store in stores("worker_verify_rereads_lbp_damage").await {
        let name = store.name();
        let site = site(&store);
        let w = start(&site).await;
        let b = batch("rr", 6, 300_000, 11);
        archive(&w, &b, "default").await;
        let cat = w.service().catalogue();
        let barcode = {
            let copies = cat.copies("rr/0000", 1).await.unwrap();
            let id = copies[0].container_id;
            cat.container(id).await.unwrap().unwrap().barcode
        };
        // Every drive corrupts its next record on the way to the host, once.
        arm_on_both_drives(&w, r#""kind":"corrupt_read","offset":100"#).await;
        let id = w
            .submit(JobSpec::Verify(VerifyJob {
                target: VerifyTarget::Cartridge(barcode.clone()),
            }))
            .await
            .unwrap()
            .id;
        let r = ended(&w, &id).await;
        assert_eq!(r.state, JobState::Done, "{name}: verify: {:?}", r.error);
        let dead: Vec<_> = cat
            .containers_on(&barcode)
            .await
            .unwrap()
            .into_iter()
            .filter(|c| c.state == ContainerState::Dead)
            .map(|c| c.id)
            .collect();
        assert!(dead.is_empty(), "{name}: containers killed: {dead:?}");
        recall_all(&w, &b.sums, &keys(&b.sums)).await;
        w.stop().await.unwrap();
    }
}

/// The catches recorded on `barcode`, waited for (a worker records them a moment after).
async fn catches_on(
    w: &EmbeddedWorker,
    barcode: &str,
    at_least: usize,
) -> Vec<reel_engine::catalogue::CatchRecord> {
    let cat = w.service().catalogue();
    for _ in 0..300 {
        let c = cat.catches(Some(barcode), 0, 1000).await.unwrap();
        if c.len() >= at_least {
            return c;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    cat.catches(Some(barcode), 0, 1000).await.unwrap()
}

/// Found by the torture run (a cartridge of pool p1 went `disabled` in a seed-1 PostgreSQL
/// run): a label whose first byte was flipped on the way from the drive no longer looked like
/// reel's, so the intake took the cartridge for another application's and disabled it. The
/// label is now read under the rule every read follows: checked against its CRC32C, read once
/// more, and the damaged arrival recorded.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_label_damaged_on_the_way_is_read_again_not_taken_for_foreign() {
    init_tracing();
    for store in stores("worker_label_rereads_lbp_damage").await {
        let name = store.name();
        let site = site(&store);
        let w = start(&site).await;
        let b = batch("lb", 3, 100_000, 12);
        archive(&w, &b, "default").await;
        let cat = w.service().catalogue();
        let (barcode, pool) = {
            let copies = cat.copies("lb/0000", 1).await.unwrap();
            let c = cat.cartridge(&copies[0].barcode).await.unwrap().unwrap();
            (c.barcode, c.pool.unwrap())
        };
        // The label's magic is flipped on its way to the host, once, on either drive.
        arm_on_both_drives(&w, r#""kind":"corrupt_read","offset":0"#).await;
        let id = w
            .submit(JobSpec::Intake(IntakeJob {
                selection: IntakeSelection::Barcodes(vec![barcode.clone()]),
                pool: Some(pool),
            }))
            .await
            .unwrap()
            .id;
        let r = ended(&w, &id).await;
        assert_eq!(r.state, JobState::Done, "{name}: intake: {:?}", r.error);
        disarm_both_drives(&w).await;
        let state = cat.cartridge(&barcode).await.unwrap().unwrap().state;
        assert_ne!(
            state,
            CartridgeState::Disabled,
            "{name}: a reel cartridge was disabled as foreign"
        );
        let caught = catches_on(&w, &barcode, 1).await;
        assert!(
            caught
                .iter()
                .any(|c| c.catch.kind == CatchKind::LbpOnRead && c.catch.first_block == 0),
            "{name}: the damaged label is recorded: {caught:?}"
        );
        recall_all(&w, &b.sums, &keys(&b.sums)).await;
        w.stop().await.unwrap();
    }
}

/// Every fault of the simulator that damages data is caught and recorded where it was met:
/// on the way to the drive (its LBP check refuses the record), on the way back (reel's),
/// on the medium (the read-back's SHA-256), and a medium error; each names the cartridge and
/// the block.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_damage_is_caught_and_recorded_where_it_was_met() {
    init_tracing();
    for store in stores("worker_integrity_log").await {
        let name = store.name();
        let site = site(&store);
        let w = start(&site).await;
        // On the way to the drive, and silently on the medium: both while archiving.
        arm_on_both_drives(&w, r#""kind":"corrupt_write","offset":7"#).await;
        let a = batch("ig", 4, 300_000, 13);
        archive(&w, &a, "default").await;
        arm_on_both_drives(&w, r#""kind":"silent_corrupt_write","offset":9"#).await;
        let b = batch("ih", 4, 300_000, 14);
        archive(&w, &b, "default").await;
        disarm_both_drives(&w).await;
        let cat = w.service().catalogue();
        let all = |kind: CatchKind| {
            let cat = cat.clone();
            async move {
                for _ in 0..300 {
                    let c = cat.catches(None, 0, 1000).await.unwrap();
                    if c.iter().any(|r| r.catch.kind == kind) {
                        return c;
                    }
                    tokio::time::sleep(Duration::from_millis(100)).await;
                }
                cat.catches(None, 0, 1000).await.unwrap()
            }
        };
        let c = all(CatchKind::LbpOnWrite).await;
        assert!(
            c.iter().any(|r| r.catch.kind == CatchKind::LbpOnWrite),
            "{name}: a record refused on write is recorded: {c:?}"
        );
        let c = all(CatchKind::Content).await;
        let content: Vec<_> = c
            .iter()
            .filter(|r| r.catch.kind == CatchKind::Content)
            .collect();
        assert!(
            !content.is_empty(),
            "{name}: damage on the medium is caught by the read-back: {c:?}"
        );
        assert!(
            content
                .iter()
                .all(|r| r.catch.container_id.is_some() && r.catch.first_block >= 2),
            "{name}: a content catch names its container and blocks: {content:?}"
        );
        // Every acknowledged object still recalls whole.
        let mut sums = a.sums.clone();
        sums.extend(b.sums.clone());
        recall_all(&w, &sums, &keys(&sums)).await;
        // A medium error on a block a recall then reads.
        let copy = cat.copies("ig/0000", 1).await.unwrap().remove(0);
        let block = copy.container_first_block + 1;
        w.service()
            .library()
            .control(&format!(
                r#"{{"op":"fault","kind":"medium_error","barcode":"{}","block":{block}}}"#,
                copy.barcode
            ))
            .await
            .unwrap();
        recall_all(&w, &a.sums, &["ig/0000".to_string()]).await;
        let c = catches_on(&w, &copy.barcode, 1).await;
        let c = if c.iter().any(|r| r.catch.kind == CatchKind::MediumError) {
            c
        } else {
            tokio::time::sleep(Duration::from_secs(2)).await;
            cat.catches(Some(&copy.barcode), 0, 1000).await.unwrap()
        };
        assert!(
            c.iter()
                .any(|r| r.catch.kind == CatchKind::MediumError && r.catch.first_block == block),
            "{name}: the medium error at block {block} is recorded: {c:?}"
        );
        // `reel cartridge ls|show` counts them as the cartridge's errors.
        let recorded = cat
            .catches(Some(&copy.barcode), 0, 1000)
            .await
            .unwrap()
            .len();
        let counted = cat.catch_counts(None).await.unwrap();
        assert_eq!(
            counted.get(&copy.barcode).copied(),
            Some(recorded as u64),
            "{name}"
        );
        w.stop().await.unwrap();
    }
}

/// Found by the torture run (seed 11, PostgreSQL: a `p1` and a `p2` cartridge ended
/// `disabled`, and objects with a copy on each had no readable copy left): a unit attention
/// (a drive reset) met while reading the cartridge's MAM label epoch before a write was taken
/// for an epoch that did not match, and the cartridge was disabled. A drive error there is the
/// drive's moment: the cartridge is ejected and the write tried again.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_drive_reset_while_checking_the_label_epoch_does_not_disable_the_cartridge() {
    init_tracing();
    for store in stores("worker_epoch_check_unit_attention").await {
        let name = store.name();
        let site = site(&store);
        let w = start(&site).await;
        let a = batch("ea", 3, 100_000, 15);
        archive(&w, &a, "default").await;
        let cat = w.service().catalogue();
        let barcode = cat.copies("ea/0000", 1).await.unwrap()[0].barcode.clone();
        // The next read of the label epoch (MAM) on either drive meets a reset: the next
        // write's epoch check.
        arm_on_both_drives(
            &w,
            &format!(
                r#""kind":"unit_attention","on":"mam_read","attribute":{}"#,
                reel_plugin_abi::types::mam::REEL_LABEL_EPOCH
            ),
        )
        .await;
        let b = batch("eb", 3, 100_000, 16);
        archive(&w, &b, "default").await;
        disarm_both_drives(&w).await;
        let disabled: Vec<String> = cat
            .cartridges()
            .await
            .unwrap()
            .into_iter()
            .filter(|c| c.state == CartridgeState::Disabled)
            .map(|c| c.barcode)
            .collect();
        assert!(
            disabled.is_empty(),
            "{name}: a reset met while reading the label epoch disabled {disabled:?} (the first \
             batch went to {barcode})"
        );
        let mut sums = a.sums.clone();
        sums.extend(b.sums.clone());
        recall_all(&w, &sums, &keys(&sums)).await;
        w.stop().await.unwrap();
    }
}

/// A cartridge back from a vault has its label unchecked until read: the next write to it
/// reads the label first (the import's label-check job may not have run), and the right label
/// clears the mark and lets the write go on. Every acknowledged object still recalls.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_write_reads_the_label_of_a_cartridge_back_from_a_vault_first() {
    init_tracing();
    for store in stores("worker_unchecked_label").await {
        let name = store.name();
        let site = site_with_drives(&store, 1);
        let w = start(&site).await;
        let a = batch("ua", 3, 100_000, 21);
        archive(&w, &a, "default").await;
        let cat = w.service().catalogue();
        let barcode = cat.copies("ua/0000", 1).await.unwrap()[0].barcode.clone();
        // One drive: the next write takes the pool's labelled cartridge with room before it
        // labels a new one. (With two, a write that met the exported cartridge being unloaded
        // from one drive, or a new cartridge another drive was labelling, went elsewhere: seen
        // in CI on both databases.)
        // Out and back in the catalogue at once (the robot never moves it).
        cat.send_to_vault(&barcode, "shelf 1", "test")
            .await
            .unwrap();
        cat.back_from_vault(&barcode, "test").await.unwrap();
        let c = cat.cartridge(&barcode).await.unwrap().unwrap();
        assert!(c.label_unchecked_unix > 0, "{name}: {c:?}");
        let b = batch("ub", 3, 100_000, 22);
        archive(&w, &b, "default").await;
        let got = cat.copies("ub/0000", 1).await.unwrap()[0].barcode.clone();
        assert_eq!(got, barcode, "{name}");
        let c = cat.cartridge(&barcode).await.unwrap().unwrap();
        assert_eq!(
            c.label_unchecked_unix, 0,
            "{name}: the write read the label: {c:?}"
        );
        assert_eq!(c.state, CartridgeState::Active, "{name}");
        let mut sums = a.sums.clone();
        sums.extend(b.sums.clone());
        recall_all(&w, &sums, &keys(&sums)).await;
        w.stop().await.unwrap();
    }
}
