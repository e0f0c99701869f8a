//! Worker tests on SQLite and PostgreSQL: the apalis pitfalls (backoff, unique names, restart,
//! pickup latency, pruning), cancel, graceful shutdown, and recalls batched per cartridge.

use std::collections::BTreeMap;
use std::sync::Mutex;

use super::*;
use reel_queue::config::Config;
use reel_queue::db::{Db, testdb};
use reel_queue::job::JobState;
use reel_queue::job::{IntakeSelection, RecallSelection};

/// How the fake executor's intake behaves.
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
enum IntakeMode {
    Succeed,
    Fail,
    /// Never returns (a hung or killed process, or a long walk of a source tree).
    Hang,
}

struct Fake {
    intake: IntakeMode,
    calls: Mutex<Vec<i64>>,
    mounts: Mutex<Vec<String>>,
    drives: Vec<String>,
    /// drive → cartridge loaded now, and the most drives loaded at once.
    loaded: Mutex<(BTreeMap<String, String>, usize)>,
    /// How long a read batch takes (lets drives overlap).
    read_time: Duration,
    /// Every read request a batch was given, with when: key `C/bad…` fails its attempt (a
    /// medium error), `C/block…` holds the batch until it is cancelled.
    reads: Mutex<Vec<(String, std::time::Instant)>>,
    /// Mounts tried of cartridges whose barcode starts with `GONE` (not in the library).
    failed_mounts: Mutex<u32>,
}

impl Fake {
    fn new(intake: IntakeMode) -> Arc<Fake> {
        Arc::new(Fake {
            intake,
            calls: Mutex::new(vec![]),
            mounts: Mutex::new(vec![]),
            drives: vec![],
            loaded: Mutex::new((BTreeMap::new(), 0)),
            read_time: Duration::ZERO,
            reads: Mutex::new(vec![]),
            failed_mounts: Mutex::new(0),
        })
    }
    fn calls(&self) -> Vec<i64> {
        self.calls.lock().unwrap().clone()
    }
}

impl TapeExecutor for Fake {
    async fn drives(&self) -> Result<Vec<String>> {
        Ok(self.drives.clone())
    }
    async fn plan_archive(&self, _: &str, _: &ArchiveJob) -> Result<Vec<NewTapeRequest>> {
        Ok(vec![])
    }
    async fn plan_recall(&self, _: &str, job: &RecallJob) -> Result<Vec<NewTapeRequest>> {
        let RecallSelection::Keys(keys) = &job.selection else {
            return Ok(vec![]);
        };
        // Key "C3/x" lives on cartridge C3.
        Ok(keys
            .iter()
            .map(|k| NewTapeRequest {
                target: MountTarget::Read {
                    barcode: k.split('/').next().unwrap_or("").to_string(),
                },
                pool: Some("p".into()),
                object_key: k.clone(),
                bytes: 100,
                files: 1,
                priority: 50,
                detail: serde_json::Value::Null,
            })
            .collect())
    }
    async fn mount(
        &self,
        drive: &str,
        target: &MountTarget,
        fence: &Fence,
        _: &CancellationToken,
    ) -> Result<String> {
        fence.check().await?;
        let MountTarget::Read { barcode } = target else {
            return Err(JobsError::Internal("read only fake".into()));
        };
        if barcode.starts_with("GONE") {
            *self.failed_mounts.lock().unwrap() += 1;
            return Err(JobsError::Internal(format!(
                "cartridge {barcode} is not in the library"
            )));
        }
        self.mounts.lock().unwrap().push(barcode.clone());
        let mut l = self.loaded.lock().unwrap();
        assert!(
            !l.0.values().any(|b| b == barcode),
            "{barcode} mounted in two drives at once: {:?}",
            l.0
        );
        l.0.insert(drive.to_string(), barcode.clone());
        l.1 = l.1.max(l.0.len());
        Ok(barcode.clone())
    }
    async fn unmount(&self, drive: &str, _: &Fence) -> Result<()> {
        self.loaded.lock().unwrap().0.remove(drive);
        Ok(())
    }
    async fn holding(&self, drive: &str) -> Result<Option<(String, Option<String>)>> {
        Ok(self
            .loaded
            .lock()
            .unwrap()
            .0
            .get(drive)
            .map(|b| (b.clone(), Some("p".into()))))
    }
    async fn write_batch(
        &self,
        _: &str,
        _: &[TapeRequest],
        _: Option<crate::more_writes::MoreWrites>,
        _: &Fence,
        _: &CancellationToken,
        _: &ProgressFn,
    ) -> Result<BatchOutcome> {
        Err(JobsError::Internal("read only fake".into()))
    }
    async fn read_batch(
        &self,
        _: &str,
        barcode: &str,
        reqs: &[TapeRequest],
        fence: &Fence,
        cancel: &CancellationToken,
        _: &ProgressFn,
    ) -> Result<BatchOutcome> {
        fence.check().await?;
        tokio::time::sleep(self.read_time).await;
        let now = std::time::Instant::now();
        self.reads
            .lock()
            .unwrap()
            .extend(reqs.iter().map(|r| (r.object_key.clone(), now)));
        if reqs.iter().any(|r| r.object_key.contains("/block")) {
            // Stopped at a record boundary by the cancel: nothing finished.
            cancel.cancelled().await;
            return Ok(BatchOutcome::default());
        }
        let (bad, good): (Vec<&TapeRequest>, Vec<&TapeRequest>) =
            reqs.iter().partition(|r| r.object_key.contains("/bad"));
        assert!(
            reqs.iter().all(|r| r.target
                == MountTarget::Read {
                    barcode: barcode.into()
                }),
            "batch for another cartridge"
        );
        Ok(BatchOutcome {
            reroute: Vec::new(),
            done: good.iter().map(|r| r.id).collect(),
            failed: vec![],
            retry: bad
                .iter()
                .map(|r| (r.id, "medium error (simulated)".to_string()))
                .collect(),
            results: vec![],
            drive_failure: None,
            drive_time: Default::default(),
        })
    }
    async fn plan_verify(&self, _: &str, _: &VerifyJob) -> Result<Vec<NewTapeRequest>> {
        Ok(vec![])
    }
    /// Intake stands for any job's planning step: it succeeds with nothing to do on tape,
    /// fails, hangs, or waits for a cancel.
    async fn plan_intake(&self, _: &str, _: &IntakeJob) -> Result<Vec<NewTapeRequest>> {
        self.calls.lock().unwrap().push(now_ms());
        match self.intake {
            IntakeMode::Succeed => Ok(vec![]),
            IntakeMode::Fail => Err(JobsError::Internal("simulated drive fault".into())),
            // The worker stops waiting for a plan when the job is cancelled or shut down.
            IntakeMode::Hang => std::future::pending().await,
        }
    }
    async fn plan_rebuild(&self, _: &str, _: &RebuildJob) -> Result<Vec<NewTapeRequest>> {
        Ok(vec![])
    }
}

/// A store + queue for one test, on either backend.
struct Env {
    config: Config,
    _t: testdb::TestDb,
    apalis_url: String,
    _dir: tempfile::TempDir,
}

fn test_config() -> Config {
    let mut c = Config::default();
    c.worker.heartbeat_ms = 1000;
    c.worker.lease_ms = 2000;
    c.worker.poll_interval_ms = 50;
    c.worker.backoff_base_ms = 1000;
    c.worker.backoff_max_ms = 4000;
    c.worker.max_attempts = 3;
    c
}

async fn env(pg: Option<&str>) -> Option<Env> {
    let _ = tracing_subscriber::fmt()
        .with_env_filter(
            tracing_subscriber::EnvFilter::try_from_env("REEL_LOG")
                .unwrap_or_else(|_| "warn".into()),
        )
        .with_test_writer()
        .try_init();
    let dir = tempfile::tempdir().unwrap();
    let t = match pg {
        Some(name) => testdb::postgres(name).await?,
        None => testdb::sqlite().await,
    };
    let apalis_url = match t.db {
        Db::Postgres(_) => t.url.clone(),
        Db::Sqlite(_) => format!("sqlite:{}", dir.path().join("jobs.db").display()),
    };
    let mut config = test_config();
    config.store.url = t.url.clone();
    config.store.jobs_url = apalis_url.clone();
    Some(Env {
        config,
        _t: t,
        apalis_url,
        _dir: dir,
    })
}

impl Env {
    async fn queue(&self) -> JobQueue {
        let db = Db::connect(&self.config.store.url).await.unwrap();
        let apalis = ApalisDb::connect(&self.apalis_url).await.unwrap();
        JobQueue::from_parts(db, apalis, self.config.worker.clone())
    }
    async fn start<E: TapeExecutor>(
        &self,
        exec: Arc<E>,
    ) -> (Arc<Runtime<E>>, tokio::task::JoinHandle<Result<()>>) {
        let rt = Runtime::new(
            self.config.clone(),
            self.queue().await,
            exec,
            CancellationToken::new(),
        );
        let h = tokio::spawn(run(rt.clone()));
        (rt, h)
    }
}

fn intake_spec() -> JobSpec {
    JobSpec::Intake(IntakeJob {
        selection: IntakeSelection::AllNew,
        pool: None,
    })
}

/// Wait (bounded, generously) until `pred` holds on the job record.
async fn wait_for(
    q: &JobQueue,
    id: &str,
    what: &str,
    pred: impl Fn(&JobRecord) -> bool,
) -> JobRecord {
    for _ in 0..600 {
        let r = q.store().require(id).await.unwrap();
        if pred(&r) {
            return r;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    panic!(
        "job {id} never reached: {what}; last: {:?}",
        q.store().require(id).await.unwrap()
    );
}

#[test]
fn worker_names_are_unique_per_start() {
    let a = unique_name("reel");
    let b = unique_name("reel");
    assert_ne!(a, b);
    assert!(
        a.starts_with("reel-") && a.contains(&format!("-{}-", std::process::id())),
        "{a}"
    );
}

async fn retries_back_off(e: Env) {
    let q = e.queue().await;
    let fake = Fake::new(IntakeMode::Fail);
    let (rt, h) = e.start(fake.clone()).await;
    let job = q.submit(intake_spec(), None).await.unwrap();
    // After the first failure the retry is persisted: queued, not_before in the future, and
    // a new apalis task linked.
    let r = wait_for(&q, &job.id, "first retry scheduled", |r| {
        r.attempts == 1 && r.state == JobState::Queued
    })
    .await;
    // The failure came after the submission, so the retry is due a whole backoff (1 s) after
    // it at least. (`updated_ms` is no anchor: linking the retry's apalis task moves it.)
    assert!(
        r.not_before_ms >= job.created_ms + 1000,
        "retry must wait the backoff: {r:?}"
    );
    assert!(
        r.error
            .as_deref()
            .unwrap_or("")
            .contains("simulated drive fault")
    );
    let r = wait_for(&q, &job.id, "failed for good", |r| {
        r.state == JobState::Failed
    })
    .await;
    assert_eq!(r.attempts, 3);
    let calls = fake.calls();
    assert_eq!(
        calls.len(),
        3,
        "exactly max_attempts runs, no storm of immediate retries"
    );
    let b = q.backoff();
    for (i, w) in calls.windows(2).enumerate() {
        let want = b.delay(i as u32 + 1).as_millis() as i64;
        assert!(
            w[1] - w[0] >= want,
            "attempt {} came {} ms after the previous, backoff is {want} ms",
            i + 2,
            w[1] - w[0]
        );
    }
    rt.shutdown.cancel();
    h.await.unwrap().unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn retries_back_off_sqlite() {
    retries_back_off(env(None).await.unwrap()).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn retries_back_off_postgres() {
    let Some(e) = env(Some("retries_back_off_postgres")).await else {
        return;
    };
    retries_back_off(e).await;
}

/// Worker A hangs mid-job and its whole runtime is dropped (like kill -9: no shutdown, no
/// lease release). Worker B, a new start with a new name, completes the job.
async fn restart_strands_nothing(e: Env) {
    let q = e.queue().await;
    let job = q.submit(intake_spec(), None).await.unwrap();
    let (config, apalis_url) = (e.config.clone(), e.apalis_url.clone());
    let (tx, rx) = std::sync::mpsc::channel::<String>();
    let (kill_tx, kill_rx) = std::sync::mpsc::channel::<()>();
    let a = std::thread::spawn(move || {
        let rtm = tokio::runtime::Builder::new_multi_thread()
            .worker_threads(1)
            .enable_all()
            .build()
            .unwrap();
        rtm.block_on(async {
            let db = Db::connect(&config.store.url).await.unwrap();
            let apalis = ApalisDb::connect(&apalis_url).await.unwrap();
            let queue = JobQueue::from_parts(db, apalis, config.worker.clone());
            let rt = Runtime::new(
                config,
                queue,
                Fake::new(IntakeMode::Hang),
                CancellationToken::new(),
            );
            tx.send(rt.name.clone()).unwrap();
            tokio::spawn(run(rt));
        });
        // Block until told to die, then drop the runtime with everything on it.
        let _ = kill_rx.recv();
        rtm.shutdown_background();
    });
    let a_name = rx.recv().unwrap();
    let r = wait_for(&q, &job.id, "running on A", |r| {
        r.state == JobState::Running
    })
    .await;
    assert_eq!(r.worker.as_deref(), Some(a_name.as_str()));
    kill_tx.send(()).unwrap();
    a.join().unwrap();
    let fake = Fake::new(IntakeMode::Succeed);
    let (rt, h) = e.start(fake.clone()).await;
    assert_ne!(rt.name, a_name);
    let r = wait_for(&q, &job.id, "done on B", |r| r.state == JobState::Done).await;
    assert_eq!(r.worker.as_deref(), Some(rt.name.as_str()));
    assert_eq!(r.attempts, 2, "A's attempt and B's");
    assert_eq!(fake.calls().len(), 1);
    rt.shutdown.cancel();
    h.await.unwrap().unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn restart_strands_nothing_sqlite() {
    restart_strands_nothing(env(None).await.unwrap()).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn restart_strands_nothing_postgres() {
    let Some(e) = env(Some("restart_strands_nothing_postgres")).await else {
        return;
    };
    restart_strands_nothing(e).await;
}

/// An idle worker starts a new job within 1 s: 20 poll intervals of 50 ms (and on PostgreSQL
/// the NOTIFY wakes it sooner). Checked three times after idle periods, since apalis's own
/// interval strategy stalls after the first job.
async fn idle_pickup(e: Env) {
    let q = e.queue().await;
    let fake = Fake::new(IntakeMode::Succeed);
    let (rt, h) = e.start(fake.clone()).await;
    let bound_ms = 20 * e.config.worker.poll_interval_ms as i64;
    for round in 0..3 {
        tokio::time::sleep(Duration::from_millis(1500)).await;
        let job = q.submit(intake_spec(), None).await.unwrap();
        wait_for(&q, &job.id, "done", |r| r.state == JobState::Done).await;
        let started = fake.calls()[round];
        let latency = started - job.created_ms;
        assert!(
            latency < bound_ms,
            "round {round}: idle pickup took {latency} ms (bound {bound_ms} ms)"
        );
    }
    rt.shutdown.cancel();
    h.await.unwrap().unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn idle_pickup_sqlite() {
    idle_pickup(env(None).await.unwrap()).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn idle_pickup_postgres() {
    let Some(e) = env(Some("idle_pickup_postgres")).await else {
        return;
    };
    idle_pickup(e).await;
}

async fn apalis_rows(q: &JobQueue) -> i64 {
    match q.apalis() {
        ApalisDb::Sqlite(p) => sqlx::query_scalar("SELECT COUNT(*) FROM Jobs")
            .fetch_one(p)
            .await
            .unwrap(),
        ApalisDb::Postgres(p) => sqlx::query_scalar("SELECT COUNT(*) FROM apalis.jobs")
            .fetch_one(p)
            .await
            .unwrap(),
    }
}

async fn pruning(e: Env) {
    let q = e.queue().await;
    let (rt, h) = e.start(Fake::new(IntakeMode::Succeed)).await;
    let job = q.submit(intake_spec(), None).await.unwrap();
    wait_for(&q, &job.id, "done", |r| r.state == JobState::Done).await;
    rt.shutdown.cancel();
    h.await.unwrap().unwrap();
    // Submitted with no worker running: stays queued.
    let pending = q
        .submit(
            JobSpec::Verify(VerifyJob {
                target: reel_queue::job::VerifyTarget::Sample { every: 5 },
            }),
            None,
        )
        .await
        .unwrap();
    // Within the retention nothing goes.
    assert_eq!(q.prune(Duration::from_secs(3600)).await.unwrap(), (0, 0));
    assert!(q.store().get(&job.id).await.unwrap().is_some());
    // apalis keeps done_at in whole seconds: let one pass.
    tokio::time::sleep(Duration::from_millis(1100)).await;
    let before = apalis_rows(&q).await;
    let (jobs, tasks) = q.prune(Duration::ZERO).await.unwrap();
    assert_eq!(jobs, 1);
    assert!(tasks >= 1, "the finished apalis row goes too");
    assert_eq!(apalis_rows(&q).await, before - tasks as i64);
    assert!(q.store().get(&job.id).await.unwrap().is_none());
    // Unfinished work is never pruned.
    assert!(q.store().get(&pending.id).await.unwrap().is_some());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn pruning_sqlite() {
    pruning(env(None).await.unwrap()).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn pruning_postgres() {
    let Some(e) = env(Some("pruning_postgres")).await else {
        return;
    };
    pruning(e).await;
}

async fn cancel_and_shutdown(e: Env) {
    let q = e.queue().await;
    let (rt, h) = e.start(Fake::new(IntakeMode::Hang)).await;
    // Cancel a running job: it stops at its next boundary and its lease is released.
    let job = q.submit(intake_spec(), None).await.unwrap();
    wait_for(&q, &job.id, "running", |r| r.state == JobState::Running).await;
    q.cancel(&job.id).await.unwrap();
    wait_for(&q, &job.id, "cancelled", |r| r.state == JobState::Cancelled).await;
    // Retry puts it back; a graceful shutdown hands it back to the queue, not failed.
    q.retry(&job.id).await.unwrap();
    wait_for(&q, &job.id, "running again", |r| {
        r.state == JobState::Running
    })
    .await;
    rt.shutdown.cancel();
    h.await.unwrap().unwrap();
    let r = q.store().require(&job.id).await.unwrap();
    assert_eq!(r.state, JobState::Queued, "{r:?}");
    assert_eq!(r.attempts, 0, "an interrupted attempt does not count");
    // A queued job is cancelled at once; a finished one cannot be.
    let r = q.cancel(&job.id).await.unwrap();
    assert_eq!(r.state, JobState::Cancelled);
    assert!(matches!(
        q.cancel(&job.id).await,
        Err(JobsError::BadJobState { .. })
    ));
    let leases = LeaseManager::new(q.store().db().clone());
    let l = leases
        .get(&format!("job:{}", job.id))
        .await
        .unwrap()
        .unwrap();
    assert_eq!(l.holder, None, "lease released");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn cancel_and_shutdown_sqlite() {
    cancel_and_shutdown(env(None).await.unwrap()).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn cancel_and_shutdown_postgres() {
    let Some(e) = env(Some("cancel_and_shutdown_postgres")).await else {
        return;
    };
    cancel_and_shutdown(e).await;
}

/// Recalls from 50 jobs touching 5 cartridges, one drive, nothing else competing: the drive
/// mounts each cartridge once (SIMULATED drive; the scheduler waits until each cartridge's
/// queue is complete via min_files = 40, the number of requests per cartridge).
async fn fifty_recalls_five_mounts(mut e: Env) {
    e.config.scheduler.min_files = 40;
    e.config.scheduler.min_bytes = u64::MAX;
    e.config.scheduler.max_age_seconds = 3600;
    e.config.scheduler.min_mount_seconds = 0;
    e.config.library.drives = vec!["d0".into()];
    let q = e.queue().await;
    let mut ids = Vec::new();
    for j in 0..50u32 {
        let keys = (0..4u32)
            .map(|k| format!("C{}/obj-{j}-{k}", (j + k) % 5))
            .collect();
        let spec = JobSpec::Recall(RecallJob {
            selection: RecallSelection::Keys(keys),
            destination: "/tmp/reel-test-out".into(),
            overwrite: Default::default(),
            confine: None,
        });
        ids.push(q.submit(spec, None).await.unwrap().id);
    }
    let fake = Fake::new(IntakeMode::Succeed);
    let (rt, h) = e.start(fake.clone()).await;
    for id in &ids {
        let r = wait_for(&q, id, "done", |r| r.state == JobState::Done).await;
        assert_eq!(r.progress.objects_done, 4);
    }
    rt.shutdown.cancel();
    h.await.unwrap().unwrap();
    let mounts = fake.mounts.lock().unwrap().clone();
    let mut per: BTreeMap<String, u32> = BTreeMap::new();
    for m in &mounts {
        *per.entry(m.clone()).or_default() += 1;
    }
    assert!(mounts.len() <= 5, "{} mounts: {per:?}", mounts.len());
    assert_eq!(per.len(), 5);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn fifty_recalls_five_mounts_sqlite() {
    fifty_recalls_five_mounts(env(None).await.unwrap()).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn fifty_recalls_five_mounts_postgres() {
    let Some(e) = env(Some("fifty_recalls_five_mounts_postgres")).await else {
        return;
    };
    fifty_recalls_five_mounts(e).await;
}

/// A drive loop that takes its drive's lease while the drive still holds a cartridge (a lease
/// lost and taken again, the executor's mount intact) starts from that cartridge: a recall
/// from it is read where it is, with no mount (the fake refuses a cartridge mounted twice),
/// and the drive board shows the cartridge from the start.
async fn a_new_lease_starts_from_what_the_drive_holds(mut e: Env) {
    e.config.library.drives = vec!["d0".into()];
    e.config.scheduler.max_age_seconds = 0;
    let q = e.queue().await;
    let fake = Arc::new(Fake {
        drives: vec!["d0".into()],
        loaded: Mutex::new((BTreeMap::from([("d0".to_string(), "C1".to_string())]), 1)),
        ..Arc::into_inner(Fake::new(IntakeMode::Succeed)).unwrap()
    });
    let (rt, h) = e.start(fake.clone()).await;
    let mut on_board = None;
    for _ in 0..200 {
        on_board = rt
            .board
            .live()
            .await
            .unwrap()
            .into_iter()
            .find(|b| b.drive == "d0")
            .and_then(|b| b.mount)
            .and_then(|m| m.barcode);
        if on_board.is_some() {
            break;
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    assert_eq!(
        on_board.as_deref(),
        Some("C1"),
        "the board shows the held cartridge"
    );
    let spec = JobSpec::Recall(RecallJob {
        selection: RecallSelection::Keys(vec!["C1/a".into(), "C1/b".into()]),
        destination: "/tmp/reel-test-out".into(),
        overwrite: Default::default(),
        confine: None,
    });
    let id = q.submit(spec, None).await.unwrap().id;
    let r = wait_for(&q, &id, "done", |r| r.state.is_final()).await;
    assert_eq!(r.state, JobState::Done, "{r:?}");
    rt.shutdown.cancel();
    h.await.unwrap().unwrap();
    assert!(
        fake.mounts.lock().unwrap().is_empty(),
        "mounted again: {:?}",
        fake.mounts.lock().unwrap()
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_new_lease_starts_from_what_the_drive_holds_sqlite() {
    a_new_lease_starts_from_what_the_drive_holds(env(None).await.unwrap()).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_new_lease_starts_from_what_the_drive_holds_postgres() {
    let Some(e) = env(Some(
        "a_new_lease_starts_from_what_the_drive_holds_postgres",
    ))
    .await
    else {
        return;
    };
    a_new_lease_starts_from_what_the_drive_holds(e).await;
}

/// Two drives, recalls on four cartridges of one pool whose group may use one read drive:
/// each drive loop decides alone, yet never more than one drive is loaded at once (the drive
/// board), and every recall completes. Without the cap both drives are used, so the test can
/// fail.
async fn group_cap_across_drives(mut e: Env, cap: u32) -> usize {
    e.config.scheduler.min_files = 1;
    e.config.scheduler.max_age_seconds = 0;
    e.config.scheduler.min_mount_seconds = 0;
    e.config.scheduler.groups.insert(
        "vo".into(),
        reel_queue::config::GroupConfig {
            pools: vec!["p".into()],
            max_read_drives: cap,
            max_write_drives: 0,
        },
    );
    e.config.library.drives = vec!["d0".into(), "d1".into()];
    let q = e.queue().await;
    let mut ids = Vec::new();
    for j in 0..8u32 {
        let keys = (0..2u32)
            .map(|k| format!("C{}/obj-{j}-{k}", (j + k) % 4))
            .collect();
        let spec = JobSpec::Recall(RecallJob {
            selection: RecallSelection::Keys(keys),
            destination: "/tmp/reel-test-out".into(),
            overwrite: Default::default(),
            confine: None,
        });
        ids.push(q.submit(spec, None).await.unwrap().id);
    }
    let mut fake = Fake::new(IntakeMode::Succeed);
    Arc::get_mut(&mut fake).unwrap().read_time = Duration::from_millis(300);
    let (rt, h) = e.start(fake.clone()).await;
    for id in &ids {
        wait_for(&q, id, "done", |r| r.state == JobState::Done).await;
    }
    rt.shutdown.cancel();
    h.await.unwrap().unwrap();
    fake.loaded.lock().unwrap().1
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn group_cap_across_drives_sqlite() {
    assert_eq!(
        group_cap_across_drives(env(None).await.unwrap(), 1).await,
        1
    );
    assert_eq!(
        group_cap_across_drives(env(None).await.unwrap(), 0).await,
        2
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn group_cap_across_drives_postgres() {
    let Some(e) = env(Some("group_cap_across_drives_postgres")).await else {
        return;
    };
    assert_eq!(group_cap_across_drives(e, 1).await, 1);
    let Some(e) = env(Some("group_cap_across_drives_postgres_uncapped")).await else {
        return;
    };
    assert_eq!(group_cap_across_drives(e, 0).await, 2);
}

/// A read that keeps failing is attempted `max_attempts` times, each after the backoff for the
/// attempts before it, then fails with its reason; the job's other object is recalled and the
/// job ends failed, naming the object. No attempt is made at once or forever.
async fn failing_requests_back_off_then_fail(mut e: Env) {
    e.config.library.drives = vec!["d0".into()];
    e.config.scheduler.min_files = 1;
    e.config.scheduler.max_age_seconds = 0;
    e.config.scheduler.min_mount_seconds = 0;
    let q = e.queue().await;
    let fake = Fake::new(IntakeMode::Succeed);
    let (rt, h) = e.start(fake.clone()).await;
    let spec = JobSpec::Recall(RecallJob {
        selection: RecallSelection::Keys(vec!["C1/bad".into(), "C1/good".into()]),
        destination: "/tmp/reel-test-out".into(),
        overwrite: Default::default(),
        confine: None,
    });
    let job = q.submit(spec, None).await.unwrap();
    let r = wait_for(&q, &job.id, "failed", |r| r.state == JobState::Failed).await;
    let err = r.error.clone().unwrap_or_default();
    assert!(
        err.contains("1 of 2 objects failed")
            && err.contains("C1/bad: gave up after 3 attempt(s): medium error"),
        "{err}"
    );
    assert_eq!(r.progress.objects_done, 1, "{r:?}");
    rt.shutdown.cancel();
    h.await.unwrap().unwrap();
    let reads = fake.reads.lock().unwrap().clone();
    let bad: Vec<std::time::Instant> = reads
        .iter()
        .filter(|(k, _)| k == "C1/bad")
        .map(|(_, t)| *t)
        .collect();
    assert_eq!(bad.len(), 3, "attempts of the failing read: {reads:?}");
    // Backoff base 1 s, doubling: the second attempt at least 1 s after the first, the third
    // at least 2 s after the second (waiting requests are released on the heartbeat).
    let gaps: Vec<Duration> = bad.windows(2).map(|w| w[1] - w[0]).collect();
    assert!(
        gaps[0] >= Duration::from_millis(1000) && gaps[1] >= Duration::from_millis(2000),
        "{gaps:?}"
    );
    assert_eq!(reads.iter().filter(|(k, _)| k == "C1/good").count(), 1);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn failing_requests_back_off_then_fail_sqlite() {
    failing_requests_back_off_then_fail(env(None).await.unwrap()).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn failing_requests_back_off_then_fail_postgres() {
    let Some(e) = env(Some("failing_requests_back_off_then_fail_postgres")).await else {
        return;
    };
    failing_requests_back_off_then_fail(e).await;
}

/// Requests on a cartridge that cannot be mounted (gone from the library) count an attempt
/// per failed mount, wait out the backoff, and fail with the reason after `max_attempts`: the
/// job ends, its other object is recalled, and the drive is not asked to mount it again.
async fn an_unmountable_cartridge_fails_its_requests(mut e: Env) {
    e.config.library.drives = vec!["d0".into()];
    e.config.scheduler.min_files = 1;
    e.config.scheduler.max_age_seconds = 0;
    e.config.scheduler.min_mount_seconds = 0;
    let q = e.queue().await;
    let fake = Fake::new(IntakeMode::Succeed);
    let (rt, h) = e.start(fake.clone()).await;
    let spec = JobSpec::Recall(RecallJob {
        selection: RecallSelection::Keys(vec!["GONE1/x".into(), "C1/good".into()]),
        destination: "/tmp/reel-test-out".into(),
        overwrite: Default::default(),
        confine: None,
    });
    let job = q.submit(spec, None).await.unwrap();
    let r = wait_for(&q, &job.id, "failed", |r| r.state == JobState::Failed).await;
    let err = r.error.clone().unwrap_or_default();
    assert!(
        err.contains("GONE1/x: gave up after 3 attempt(s): cannot mount the cartridge")
            && err.contains("not in the library"),
        "{err}"
    );
    assert_eq!(r.progress.objects_done, 1, "{r:?}");
    tokio::time::sleep(Duration::from_millis(1500)).await;
    rt.shutdown.cancel();
    h.await.unwrap().unwrap();
    assert_eq!(*fake.failed_mounts.lock().unwrap(), 3, "mounts tried");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_unmountable_cartridge_fails_its_requests_sqlite() {
    an_unmountable_cartridge_fails_its_requests(env(None).await.unwrap()).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_unmountable_cartridge_fails_its_requests_postgres() {
    let Some(e) = env(Some("an_unmountable_cartridge_fails_its_requests_postgres")).await else {
        return;
    };
    an_unmountable_cartridge_fails_its_requests(e).await;
}

/// A job cancelled while a drive holds a batch of its requests: the batch stops, the job's
/// requests are dropped (never claimed again), the job ends cancelled, and the next job for
/// the same cartridge runs at once.
async fn cancel_mid_batch_frees_the_queue(mut e: Env) {
    e.config.library.drives = vec!["d0".into()];
    e.config.scheduler.min_files = 1;
    e.config.scheduler.max_age_seconds = 0;
    e.config.scheduler.min_mount_seconds = 0;
    let q = e.queue().await;
    let fake = Fake::new(IntakeMode::Succeed);
    let (rt, h) = e.start(fake.clone()).await;
    let held = |keys: &[&str]| {
        JobSpec::Recall(RecallJob {
            selection: RecallSelection::Keys(keys.iter().map(|k| k.to_string()).collect()),
            destination: "/tmp/reel-test-out".into(),
            overwrite: Default::default(),
            confine: None,
        })
    };
    let a = q
        .submit(held(&["C2/block-1", "C2/block-2"]), None)
        .await
        .unwrap();
    for _ in 0..600 {
        if !fake.reads.lock().unwrap().is_empty() {
            break;
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    assert!(
        !fake.reads.lock().unwrap().is_empty(),
        "the batch never started"
    );
    q.cancel(&a.id).await.unwrap();
    wait_for(&q, &a.id, "cancelled", |r| r.state == JobState::Cancelled).await;
    let b = q.submit(held(&["C2/after"]), None).await.unwrap();
    wait_for(&q, &b.id, "done", |r| r.state == JobState::Done).await;
    rt.shutdown.cancel();
    h.await.unwrap().unwrap();
    let reads = fake.reads.lock().unwrap().clone();
    assert_eq!(
        reads.iter().filter(|(k, _)| k.contains("/block")).count(),
        2,
        "the cancelled job's requests were claimed again: {reads:?}"
    );
    let c = RequestsView::counts(&q, &a.id).await;
    assert_eq!((c.total, c.failed, c.done), (2, 2, 0));
}

/// Counts of a job's requests through the queue's database.
struct RequestsView;
impl RequestsView {
    async fn counts(q: &JobQueue, id: &str) -> reel_queue::requests::JobRequestCounts {
        TapeRequests::new(q.store().db().clone())
            .counts(id)
            .await
            .unwrap()
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn cancel_mid_batch_frees_the_queue_sqlite() {
    cancel_mid_batch_frees_the_queue(env(None).await.unwrap()).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn cancel_mid_batch_frees_the_queue_postgres() {
    let Some(e) = env(Some("cancel_mid_batch_frees_the_queue_postgres")).await else {
        return;
    };
    cancel_mid_batch_frees_the_queue(e).await;
}
