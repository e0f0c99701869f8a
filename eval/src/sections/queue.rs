//! The recall queue at scale: a catalogue of objects spread over many cartridges, recall
//! requests for every one of them submitted through the jobs layer's own path (a job recorded,
//! then its requests added with `TapeRequests::add`, its checkpoint and progress set, as
//! `reel recall` jobs do once planned), then the next-mount decision a drive's worker takes
//! with all of them queued (`TapeRequests::summaries` + `scheduler::decide`, the two calls of
//! the worker's drive step). On SQLite and on PostgreSQL (a fresh schema, dropped afterwards).
//! Wall clock: MEASURED.

use std::time::Instant;

use anyhow::{Result, anyhow};
use rand::{Rng, SeedableRng, rngs::StdRng};
use reel_engine::catalogue::{Catalogue, ContainerState, NewCopy};
use reel_queue::config::SchedulerConfig;
use reel_queue::db::Db;
use reel_queue::job::{JobSpec, RecallJob, RecallSelection};
use reel_queue::{JobStore, NewTapeRequest, TapeRequests};
use reel_worker::scheduler::{self, Decision, DriveState, MountTarget, Policy};
use serde_json::json;

use crate::row::{Basis, Row, Target, percentile};
use crate::sections::Ctx;

/// Cartridges the objects are spread over.
const CARTRIDGES: u64 = 100;
/// Objects a container holds (one `close_container` transaction each).
const PER_CONTAINER: u64 = 10_000;
/// Recall jobs the requests are split into (each spans every cartridge).
const JOBS: u64 = 100;
const OBJECT: u64 = 16 << 10;
const RECORD: u32 = 1 << 20;
/// Blocks a container takes on tape (its data plus header and footer records).
const BLOCKS: u64 = PER_CONTAINER * OBJECT / RECORD as u64 + 3;

fn key(i: u64) -> String {
    format!("queue/{:03}/{i:010}", i % 997)
}

fn barcode(c: u64) -> String {
    format!("QB{c:04}L9")
}

/// Where object `i` is: (cartridge, container index on it, offset in the container).
fn place(i: u64, per_cartridge: u64) -> (u64, u64, u64) {
    let c = i / per_cartridge;
    let within = i % per_cartridge;
    (c, within / PER_CONTAINER, (within % PER_CONTAINER) * OBJECT)
}

/// Load `n` objects, `n / CARTRIDGES` a cartridge, in containers of `PER_CONTAINER`.
async fn load(cat: &Catalogue, n: u64) -> Result<f64> {
    let per_cartridge = n / CARTRIDGES;
    cat.ensure_pool("bench").await.map_err(|e| anyhow!("{e}"))?;
    let t = Instant::now();
    for c in 0..CARTRIDGES {
        let bc = barcode(c);
        cat.add_cartridge(&bc, false, 64 << 30)
            .await
            .map_err(|e| anyhow!("add cartridge {bc}: {e}"))?;
        cat.set_labelled(&bc, "bench", uuid::Uuid::new_v4(), 1)
            .await
            .map_err(|e| anyhow!("label {bc}: {e}"))?;
        let mut ids = Vec::new();
        for k in 0..per_cartridge.div_ceil(PER_CONTAINER) {
            let first = k * BLOCKS + 2;
            let id = cat
                .create_container(uuid::Uuid::new_v4(), &bc, k + 1, first, RECORD)
                .await
                .map_err(|e| anyhow!("create container on {bc}: {e}"))?;
            let lo = c * per_cartridge + k * PER_CONTAINER;
            let hi = (lo + PER_CONTAINER).min((c + 1) * per_cartridge);
            let copies: Vec<NewCopy> = (lo..hi)
                .map(|i| NewCopy {
                    key: key(i),
                    generation: 1,
                    size: OBJECT,
                    sha256: [(i % 251) as u8; 32],
                    offset: (i - lo) * OBJECT,
                    length: OBJECT,
                    meta: None,
                })
                .collect();
            cat.close_container(id, first + BLOCKS - 2, (hi - lo) * OBJECT, [7; 32], &copies)
                .await
                .map_err(|e| anyhow!("close container on {bc}: {e}"))?;
            ids.push(id);
        }
        cat.set_container_state(&ids, ContainerState::Durable)
            .await
            .map_err(|e| anyhow!("containers durable: {e}"))?;
    }
    Ok(t.elapsed().as_secs_f64())
}

/// The requests of job `j`: every `JOBS`-th object from `j`, so each job spans every
/// cartridge, with the detail a recall plan records.
fn job_requests(j: u64, n: u64, root: &str) -> Vec<NewTapeRequest> {
    let per_cartridge = n / CARTRIDGES;
    (j..n)
        .step_by(JOBS as usize)
        .map(|i| {
            let (c, k, offset) = place(i, per_cartridge);
            let key = key(i);
            NewTapeRequest {
                target: MountTarget::Read {
                    barcode: barcode(c),
                },
                pool: None,
                detail: json!({
                    "generation": 1,
                    "container_first_block": k * BLOCKS + 2,
                    "record_size": RECORD,
                    "offset": offset,
                    "length": OBJECT,
                    "sha256": format!("{:02x}", (i % 251) as u8).repeat(32),
                    "dest": format!("{root}/{key}"),
                    "root": root,
                }),
                object_key: key,
                bytes: OBJECT,
                files: 1,
                priority: 50,
            }
        })
        .collect()
}

/// What one backend measured.
struct Measured {
    load_s: f64,
    submit_s: f64,
    decide_ms: Vec<f64>,
    queued_files: u64,
    queues: usize,
    decision: String,
    aggregate_ms: Vec<f64>,
    plan_us: Vec<f64>,
}

/// The summary as it was computed before the `reel_tape_queues` table (jobs migration 0002):
/// an aggregate over every queued request. Run for comparison only.
const AGGREGATE_BEFORE: &str = "SELECT mode, COALESCE(barcode, '') AS barcode, COALESCE(MAX(pool), '') AS pool, \
     CAST(SUM(bytes) AS BIGINT) AS bytes, CAST(SUM(files) AS BIGINT) AS files, \
     MIN(created_ms) AS oldest, MAX(priority) AS priority \
     FROM reel_tape_requests WHERE state = 'queued' \
     GROUP BY mode, COALESCE(barcode, ''), CASE WHEN mode = 'write' THEN pool ELSE '' END \
     ORDER BY 1, 2, 3";

async fn measure(cat: &Catalogue, db: Db, n: u64, decisions: usize) -> Result<Measured> {
    let load_s = load(cat, n).await?;
    // A sample of the catalogue look-ups a recall plan makes per key (executor's plan_recall:
    // the object's latest generation, then its copies), for the planning row.
    let mut rng = StdRng::seed_from_u64(11);
    let mut plan_us = Vec::new();
    for _ in 0..500 {
        let k = key(rng.gen_range(0..n));
        let t = Instant::now();
        let o = cat
            .object(&k)
            .await
            .map_err(|e| anyhow!("object {k}: {e}"))?
            .ok_or_else(|| anyhow!("object {k} was loaded but is not found"))?;
        let c = cat
            .copies(&k, o.generation)
            .await
            .map_err(|e| anyhow!("copies of {k}: {e}"))?;
        plan_us.push(t.elapsed().as_secs_f64() * 1e6);
        if c.is_empty() {
            return Err(anyhow!("object {k} has no copy"));
        }
    }

    let store = JobStore::new(db.clone());
    let requests = TapeRequests::new(db.clone());
    let root = "/restore/bench";
    let mut submit_s = 0.0;
    for j in 0..JOBS {
        let reqs = job_requests(j, n, root);
        let bytes: u64 = reqs.iter().map(|r| r.bytes).sum();
        let spec = JobSpec::Recall(RecallJob {
            selection: RecallSelection::Prefix(format!("queue/job{j}")),
            destination: root.into(),
            overwrite: Default::default(),
            confine: None,
        });
        let t = Instant::now();
        let rec = store
            .insert(&spec, 50, 3)
            .await
            .map_err(|e| anyhow!("recording job {j}: {e}"))?;
        requests
            .add(&rec.id, &reqs)
            .await
            .map_err(|e| anyhow!("adding the requests of job {j}: {e}"))?;
        store
            .set_checkpoint(&rec.id, &json!({"planned": true, "requests": reqs.len()}))
            .await
            .map_err(|e| anyhow!("checkpoint of job {j}: {e}"))?;
        store
            .set_progress(
                &rec.id,
                reel_queue::Progress {
                    objects_done: 0,
                    objects_total: reqs.len() as u64,
                    bytes_done: 0,
                    bytes_total: bytes,
                },
            )
            .await
            .map_err(|e| anyhow!("progress of job {j}: {e}"))?;
        submit_s += t.elapsed().as_secs_f64();
    }

    // The decision one drive's worker takes with everything queued.
    let policy = Policy::from_config(&SchedulerConfig::default());
    let drive = DriveState {
        name: "d0".into(),
        mounted: None,
        unavailable: false,
    };
    let mut decide_ms = Vec::with_capacity(decisions);
    let mut last = (0u64, 0usize, String::new());
    for _ in 0..decisions {
        let t = Instant::now();
        let queues = requests
            .summaries()
            .await
            .map_err(|e| anyhow!("queue summaries: {e}"))?;
        let d = scheduler::decide(&policy, &queues, std::slice::from_ref(&drive));
        decide_ms.push(t.elapsed().as_secs_f64() * 1e3);
        last = (
            queues.iter().map(|q| q.files).sum(),
            queues.len(),
            match d.first() {
                Some(Decision::Mount { target, reason, .. }) => {
                    format!("mount {target:?} ({reason})")
                }
                other => format!("{other:?}"),
            },
        );
    }
    let mut aggregate_ms = Vec::new();
    for _ in 0..3 {
        let t = Instant::now();
        let rows = match &db {
            Db::Sqlite(p) => sqlx::query(AGGREGATE_BEFORE).fetch_all(p).await?.len(),
            Db::Postgres(p) => sqlx::query(AGGREGATE_BEFORE).fetch_all(p).await?.len(),
        };
        aggregate_ms.push(t.elapsed().as_secs_f64() * 1e3);
        if rows != last.1 {
            return Err(anyhow!(
                "the aggregate over queued requests found {rows} queues, the summary {}",
                last.1
            ));
        }
    }
    Ok(Measured {
        load_s,
        submit_s,
        decide_ms,
        queued_files: last.0,
        queues: last.1,
        decision: last.2,
        aggregate_ms,
        plan_us,
    })
}

fn rows_for(backend: &str, n: u64, m: &Measured, pg: bool) -> Vec<Row> {
    let sec = format!("Queue: {n} recall requests submitted ({backend})");
    let rate = n as f64 / m.submit_s;
    let p = |v: &[f64], q| percentile(v, q).unwrap_or(f64::NAN);
    let mut submit = Row::info(
        &sec,
        "requests submitted",
        rate,
        "requests/s",
        Basis::Measured,
    )
    .note(format!(
        "{n} objects of 16 KiB on {CARTRIDGES} cartridges loaded first ({:.1} s, not \
             counted); then {JOBS} recall jobs of {} requests, each spanning every cartridge: \
             job recorded (JobStore::insert), requests added (TapeRequests::add, one \
             transaction, multi-row statements), checkpoint and progress set; {:.2} s in all",
        m.load_s,
        n / JOBS,
        m.submit_s
    ))
    .profile(json!({
        "load_s": m.load_s,
        "submit_s": m.submit_s,
        "decide_p50_ms": p(&m.decide_ms, 50.0),
        "decide_p99_ms": p(&m.decide_ms, 99.0),
        "aggregate_before_ms": m.aggregate_ms,
        "plan_lookup_p50_us": p(&m.plan_us, 50.0),
    }));
    let mut decide = Row::info(
        &sec,
        "next-mount decision p99, all queued",
        p(&m.decide_ms, 99.0),
        "ms",
        Basis::Measured,
    )
    .note(format!(
        "{} decisions of one empty drive's worker step: TapeRequests::summaries then \
         scheduler::decide over {} queues; it chose: {}. The summary reads reel_tape_queues \
         (kept by triggers, jobs migration 0002) and probes one index per queue for the \
         oldest request and the top priority; the aggregate over every queued request it \
         replaces takes {:.1} ms here (median of 3)",
        m.decide_ms.len(),
        m.queues,
        m.decision,
        p(&m.aggregate_ms, 50.0)
    ));
    if pg {
        submit = submit.target(Target::AtLeast(3_000.0), "≥ 3 000 requests/s");
    }
    decide = decide.target(Target::AtMost(50.0), "≤ 50 ms");
    let plan_p50 = p(&m.plan_us, 50.0);
    vec![
        submit,
        Row::info(
            &sec,
            "next-mount decision p50, all queued",
            p(&m.decide_ms, 50.0),
            "ms",
            Basis::Measured,
        ),
        decide,
        Row::info(
            &sec,
            "queue summary by aggregate over every request (before migration 0002), median",
            p(&m.aggregate_ms, 50.0),
            "ms",
            Basis::Measured,
        ),
        Row::info(
            &sec,
            "queued requests missing from the queue summary",
            n.saturating_sub(m.queued_files) as f64 + m.queued_files.saturating_sub(n) as f64,
            "requests",
            Basis::Measured,
        )
        .target(Target::Equals(0.0), "0")
        .note(format!(
            "the summary counts {} queued requests in {} queues",
            m.queued_files, m.queues
        )),
        Row::info(
            &sec,
            "recall planning look-ups per key p50 (Catalogue::object + copies)",
            plan_p50,
            "µs",
            Basis::Measured,
        )
        .note(format!(
            "500 random keys; a recall job plans each key with these two look-ups before it \
             submits (executor plan_recall, outside the submission measured above): about \
             {:.0} keys/s on one connection",
            1e6 / plan_p50
        )),
    ]
}

/// Run the section.
pub fn run(ctx: &Ctx) -> Result<Vec<Row>> {
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()?;
    let n: u64 = if ctx.quick { 100_000 } else { 1_000_000 };
    let decisions = if ctx.quick { 50 } else { 200 };
    let mut rows = Vec::new();
    let dir = tempfile::Builder::new()
        .prefix("reel-bench-queue-")
        .tempdir_in(&ctx.scratch)?;
    let url = format!("sqlite:{}", dir.path().join("reel.db").display());
    rows.extend(rt.block_on(async {
        let cat = Catalogue::open(&url)
            .await
            .map_err(|e| anyhow!("{url}: {e}"))?;
        let pool = cat
            .pool_sqlite()
            .cloned()
            .ok_or_else(|| anyhow!("{url} did not open an SQLite catalogue"))?;
        let db = Db::from_sqlite(pool)
            .await
            .map_err(|e| anyhow!("jobs tables: {e}"))?;
        let m = measure(&cat, db, n, decisions).await;
        cat.close().await;
        Ok::<_, anyhow::Error>(rows_for("SQLite", n, &m?, false))
    })?);
    let Some(base) = ctx.postgres.clone() else {
        rows.push(super::no_postgres_row(&format!(
            "Queue: {n} recall requests submitted (PostgreSQL)"
        )));
        return Ok(rows);
    };
    rows.extend(rt.block_on(super::with_private_schema(
        &base,
        "queue",
        async |cat, _schema| {
            let pool = cat
                .pool_postgres()
                .cloned()
                .ok_or_else(|| anyhow!("the URL did not open a PostgreSQL catalogue"))?;
            let db = Db::from_postgres(pool)
                .await
                .map_err(|e| anyhow!("jobs tables: {e}"))?;
            let m = measure(cat, db, n, decisions).await?;
            Ok(rows_for("PostgreSQL", n, &m, true))
        },
    ))?);
    Ok(rows)
}
