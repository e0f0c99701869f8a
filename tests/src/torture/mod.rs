//! # The torture run (`reel-torture`)
//!
//! A seeded run of library life: client tasks submit archive, recall, verify, repack and intake jobs
//! through the `reel` binary (and upload objects to `reel serve` over HTTP, its spool on a
//! disk the chaos fills) against several `reel worker` processes sharing one simulated
//! library (loaded through dlopen) and one store, while a chaos driver injects the
//! simulator's faults through the drives' mailboxes, damages stored blocks of one pool,
//! `kill -9`s and `SIGSTOP`s workers past their lease, and (on PostgreSQL) terminates every
//! database connection. Invariants are checked as the run goes and at its end; each one that
//! breaks is named, with the seed and the history leading to it.
//!
//! **What the seed fixes.** The chaos schedule (which fault, on which drive or worker, at
//! which time after the start) and each client's sequence of operations are functions of the
//! seed. The interleaving is not: processes are scheduled by the kernel, so a failing seed
//! replays the same faults at the same times against the same client plan, which in practice
//! reproduces a failure often but not always; the history (`history.jsonl`) records what
//! really happened.
//!
//! Invariants:
//! - `acknowledged-object-recalls`: every object of an archive job that ended done recalls
//!   byte for byte (during the run when a client recalls it, and all of them at the end);
//! - `no-write-short-of-eod`, `no-relabel`: the library's event log (every process, killed
//!   ones included) records no write short of end of data and no write over a written
//!   cartridge's label (foreign cartridges among them);
//! - `failed-with-a-reason`: a job that fails says why;
//! - `no-job-stuck`: after the chaos stops, every job ends within a bound;
//! - `calm-retry-succeeds`: a recall that failed under chaos succeeds when retried after it;
//! - `catalogue-matches-tapes`: a catalogue rebuilt from the tapes into an empty store holds
//!   every acknowledged object with the same size and SHA-256;
//! - `corruption-caught`: every corruption that took effect is in reel's integrity log, and
//!   everything there has an injected cause (`corruption.rs`);
//! - `retries-back-off`: no tape request was tried more than `max_attempts` times or again
//!   before its backoff ran out (`retries.rs`);
//! - `upload-answered-clearly`: `reel serve` answers every upload 202 or 503 (the spool full
//!   or the store away), never otherwise or not at all;
//! - `workers-stay-up`: no worker exits by itself.

pub mod corruption;
pub mod history;
pub mod plan;
pub mod retries;
pub mod site;

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::Duration;

use serde_json::json;
use tokio::sync::Mutex;

use history::History;
use plan::{ClientOp, Fault};
pub use site::Db;
use site::Site;

/// How a run is shaped.
#[derive(Debug, Clone)]
pub struct Options {
    /// The seed of the schedule.
    pub seed: u64,
    /// Which database.
    pub db: Db,
    /// Worker processes (one drive each).
    pub workers: u32,
    /// Client tasks.
    pub clients: u32,
    /// The chaos phase lasts at most this long (wall clock).
    pub wall_seconds: u64,
    /// ... or until the library has modelled this many hours per drive (SIMULATED).
    pub modelled_hours: Option<f64>,
    /// Mean time between faults, milliseconds.
    pub fault_gap_ms: u64,
    /// Largest file a client archives.
    pub max_file_bytes: u64,
    /// Cartridges in the library (at least 8): half of all but four in each pool, two new,
    /// two foreign.
    pub cartridges: u32,
    /// The run's directory (kept).
    pub dir: PathBuf,
}

/// A broken invariant.
#[derive(Debug, Clone, serde::Serialize)]
pub struct Violation {
    /// The invariant's name.
    pub invariant: String,
    /// What was seen.
    pub detail: String,
    /// When, milliseconds after the start.
    pub t_ms: u64,
}

/// Everything a run counts.
#[derive(Debug, Default, Clone, serde::Serialize)]
pub struct Tally {
    /// Jobs submitted, by kind.
    pub submitted: BTreeMap<String, u64>,
    /// Jobs ended, by kind and state.
    pub ended: BTreeMap<String, u64>,
    /// Submissions the CLI refused (with the reason, counted by kind).
    pub refused: BTreeMap<String, u64>,
    /// Faults injected, by kind (mailbox requests the owner ran, kills, freezes...).
    pub faults: BTreeMap<String, u64>,
    /// Faults the library refused or that could not be placed, by kind.
    pub faults_not_placed: BTreeMap<String, u64>,
    /// Bytes of archive jobs that ended done.
    pub bytes_archived: u64,
    /// Bytes recalled and compared.
    pub bytes_recalled: u64,
    /// Objects recalled and compared.
    pub objects_recalled: u64,
}

/// What the run found.
#[derive(Debug, Clone, serde::Serialize)]
pub struct Report {
    /// The seed.
    pub seed: u64,
    /// The database.
    pub db: String,
    /// Workers.
    pub workers: u32,
    /// Wall-clock seconds of the whole run (MEASURED).
    pub wall_seconds: f64,
    /// Wall-clock seconds of the chaos phase (MEASURED).
    pub chaos_wall_seconds: f64,
    /// Modelled drive-busy hours, summed over drives (SIMULATED, from the library's log).
    pub modelled_drive_hours: f64,
    /// Modelled hours per drive over wall hours of the run.
    pub modelled_to_wall: f64,
    /// Counts.
    pub tally: Tally,
    /// Objects acknowledged (archive jobs done).
    pub acknowledged: u64,
    /// Corruption injected against corruption caught (`corruption-caught`).
    pub corruption: corruption::CorruptionTally,
    /// Tape requests and their retries (`retries-back-off`).
    pub retries: retries::RetryTally,
    /// Broken invariants (must be empty).
    pub violations: Vec<Violation>,
}

struct Acked {
    sha: [u8; 32],
    size: u64,
}

struct Ctx {
    opts: Options,
    /// Opens handles on the library without the site's lock.
    observer: site::Observer,
    site: Mutex<Site>,
    history: History,
    acked: std::sync::Mutex<BTreeMap<String, Acked>>,
    tally: std::sync::Mutex<Tally>,
    violations: std::sync::Mutex<Vec<Violation>>,
    /// Jobs a client saw, with their kind: checked for liveness at the end.
    jobs: std::sync::Mutex<Vec<(String, String)>>,
    /// Recalls that failed under chaos: retried in the calm.
    failed_recalls: std::sync::Mutex<Vec<(String, PathBuf, Vec<String>)>>,
    stop_clients: AtomicBool,
    mailbox_seq: AtomicU64,
    /// Drives that were told to die and are not serviced yet.
    dying: std::sync::Mutex<Vec<u32>>,
    /// PostgreSQL databases made during the run (the rebuild's), dropped at the end unless an
    /// invariant broke.
    keep_pg: std::sync::Mutex<Vec<crate::PgDatabase>>,
    /// Stored blocks the chaos damaged: (barcode, block).
    damaged: std::sync::Mutex<std::collections::BTreeSet<(String, u64)>>,
}

impl Ctx {
    fn violate(&self, invariant: &str, detail: String) {
        let t_ms = self.history.now_ms();
        self.history.log(
            "check",
            json!({"violation": invariant, "detail": detail.clone()}),
        );
        eprintln!("VIOLATION {invariant}: {detail}");
        if let Ok(mut v) = self.violations.lock() {
            v.push(Violation {
                invariant: invariant.into(),
                detail,
                t_ms,
            });
        }
    }
    fn count(&self, f: impl FnOnce(&mut Tally)) {
        if let Ok(mut t) = self.tally.lock() {
            f(&mut t);
        }
    }
}

fn bump(m: &mut BTreeMap<String, u64>, k: &str) {
    *m.entry(k.to_string()).or_default() += 1;
}

/// A liveness bound for one job once the chaos has stopped (not a timing claim).
const JOB_BOUND: Duration = Duration::from_secs(900);

/// Run the torture; the report lists every broken invariant.
pub async fn run(opts: Options) -> Report {
    let t0 = std::time::Instant::now();
    std::fs::create_dir_all(&opts.dir).expect("run dir");
    let mut site = Site::create(&opts.dir, opts.workers, opts.db, opts.cartridges).await;
    let history = History::create(&opts.dir.join("history.jsonl"));
    let postgres = opts.db == Db::Postgres;
    let schedule = plan::chaos(
        opts.seed,
        opts.wall_seconds * 1000,
        opts.fault_gap_ms,
        opts.workers,
        postgres,
    );
    history.log(
        "runner",
        json!({"seed": opts.seed, "db": format!("{:?}", opts.db), "workers": opts.workers,
               "clients": opts.clients, "faults_planned": schedule.len()}),
    );
    // Two cartridges carry another application's label from the start: never to be written.
    {
        let obs = site.observer().open().await;
        for bc in foreign_barcodes(site.cartridges) {
            obs.control(&format!(
                r#"{{"op":"fault","kind":"foreign_cartridge","barcode":"{bc}"}}"#
            ))
            .await
            .expect("make a foreign cartridge");
        }
    }
    for i in 0..opts.workers {
        site.start(i);
    }
    // The operator's set-up: the first cartridges into pool p1, the next as many into p2; two
    // stay new (for the clients' intakes) and two are foreign.
    let half = (site.cartridges - 4) / 2;
    for (pool, range) in [("p1", 0..half), ("p2", half..2 * half)] {
        let barcodes: Vec<String> = range.map(|i| barcode(i, site.cartridges)).collect();
        let mut args = vec!["intake", "--pool", pool, "--wait"];
        args.extend(barcodes.iter().map(String::as_str));
        let (code, v, err) = site.reel(0, &args).await;
        assert_eq!(code, 0, "set-up: intake into {pool}: {v} {err}");
    }
    if let Err(e) = site.start_serve().await {
        panic!("set-up: reel serve: {e}");
    }
    let ctx = Arc::new(Ctx {
        opts: opts.clone(),
        observer: site.observer(),
        site: Mutex::new(site),
        history,
        acked: Default::default(),
        tally: Default::default(),
        violations: Default::default(),
        jobs: Default::default(),
        failed_recalls: Default::default(),
        stop_clients: AtomicBool::new(false),
        mailbox_seq: AtomicU64::new(0),
        dying: Default::default(),
        damaged: Default::default(),
        keep_pg: Default::default(),
    });

    // The chaos phase.
    let mut clients: Vec<_> = (0..opts.clients)
        .map(|n| tokio::spawn(client(ctx.clone(), n)))
        .collect();
    clients.push(tokio::spawn(uploader(ctx.clone())));
    let chaos_task = tokio::spawn(chaos(ctx.clone(), schedule));
    let deadline = t0 + Duration::from_secs(opts.wall_seconds);
    loop {
        tokio::time::sleep(Duration::from_secs(2)).await;
        watch_workers(&ctx).await;
        if std::time::Instant::now() >= deadline {
            break;
        }
        if let Some(h) = opts.modelled_hours {
            let busy = modelled_drive_hours(&ctx).await;
            if busy / f64::from(opts.workers) >= h {
                break;
            }
        }
    }
    let chaos_wall = t0.elapsed().as_secs_f64();
    chaos_task.abort();
    let _ = chaos_task.await;
    ctx.stop_clients.store(true, Ordering::SeqCst);
    ctx.history.log("runner", json!({"phase": "calm"}));
    calm(&ctx).await;
    for c in clients {
        if tokio::time::timeout(JOB_BOUND, c).await.is_err() {
            ctx.violate(
                "no-job-stuck",
                format!("a client's job did not end within {JOB_BOUND:?} of the chaos ending"),
            );
        }
    }
    liveness(&ctx).await;
    retry_failed_recalls(&ctx).await;
    recall_everything(&ctx).await;
    let live = live_containers(&ctx).await;
    verify_everything(&ctx).await;
    library_history(&ctx).await;
    let corruption = corruption_caught(&ctx, &live).await;
    let retries = retries_back_off(&ctx).await;
    let modelled = modelled_drive_hours(&ctx).await;
    ctx.site.lock().await.stop_all().await;
    rebuild_matches(&ctx).await;
    let broken = ctx.violations.lock().map(|v| !v.is_empty()).unwrap_or(true);
    if broken && let Some(pg) = ctx.site.lock().await.pg.take() {
        // Kept for the post-mortem: the run's directory stays too.
        eprintln!(
            "the run's PostgreSQL database is kept for inspection: {} (drop it when done)",
            pg.url
        );
        std::mem::forget(pg);
        if let Ok(mut k) = ctx.keep_pg.lock() {
            for d in k.drain(..) {
                eprintln!("and the rebuilt catalogue's: {}", d.url);
                std::mem::forget(d);
            }
        }
    }
    let wall = t0.elapsed().as_secs_f64();
    let tally = ctx.tally.lock().map(|t| t.clone()).unwrap_or_default();
    let acknowledged = ctx.acked.lock().map(|a| a.len() as u64).unwrap_or(0);
    let violations = ctx.violations.lock().map(|v| v.clone()).unwrap_or_default();
    let report = Report {
        seed: opts.seed,
        db: format!("{:?}", opts.db).to_lowercase(),
        workers: opts.workers,
        wall_seconds: wall,
        chaos_wall_seconds: chaos_wall,
        modelled_drive_hours: modelled,
        modelled_to_wall: modelled / f64::from(opts.workers) / (wall / 3600.0),
        tally,
        acknowledged,
        corruption,
        retries,
        violations,
    };
    ctx.history.log("runner", json!({"report": report}));
    if !report.violations.is_empty() {
        eprintln!(
            "seed {}: {} invariant(s) broke; the history's last entries ({}):",
            opts.seed,
            report.violations.len(),
            opts.dir.join("history.jsonl").display()
        );
        for l in ctx.history.tail() {
            eprintln!("  {l}");
        }
    }
    report
}

/// The last [`site::WORM_CARTRIDGES`] of the library are WORM (barcodes ending `LZ`).
fn barcode(i: u32, cartridges: u32) -> String {
    let worm = i + site::WORM_CARTRIDGES >= cartridges;
    format!("RL{:04}{}", i + 1, if worm { "LZ" } else { "L9" })
}

/// Barcodes of the cartridges made foreign at the start (the last two of the library, WORM).
fn foreign_barcodes(cartridges: u32) -> Vec<String> {
    (cartridges - 2..cartridges)
        .map(|i| barcode(i, cartridges))
        .collect()
}

async fn modelled_drive_hours(ctx: &Ctx) -> f64 {
    let c = ctx.observer.library_counters().await;
    c["busy_ns"].as_u64().unwrap_or(0) as f64 / 3.6e12
}

/// A worker that exited by itself breaks `workers-stay-up`; it is started again.
async fn watch_workers(ctx: &Ctx) {
    let mut site = ctx.site.lock().await;
    for i in 0..ctx.opts.workers {
        if let Some(st) = site.exited(i) {
            drop(site);
            ctx.violate(
                "workers-stay-up",
                format!("worker {i} exited by itself ({st}); see host-{i}/worker.log"),
            );
            site = ctx.site.lock().await;
            site.hosts[i as usize].worker = None;
            site.start(i);
        }
    }
}

// ---------------------------------------------------------------- clients

async fn client(ctx: Arc<Ctx>, n: u32) {
    let mut rng = plan::client_rng(ctx.opts.seed, n);
    let mut i = 0u32;
    while !ctx.stop_clients.load(Ordering::SeqCst) {
        let op = plan::client_op(&mut rng, ctx.opts.max_file_bytes);
        ctx.history
            .log(&format!("client-{n}"), json!({"op_index": i, "op": op}));
        match op {
            ClientOp::Archive { sizes } => archive(&ctx, n, i, &sizes).await,
            ClientOp::Recall { count, pick } => recall(&ctx, n, i, count, pick).await,
            ClientOp::VerifySample { every } => {
                let every = every.to_string();
                submit_and_wait(&ctx, n, "verify", &["verify", "--sample-every", &every]).await;
            }
            ClientOp::VerifyCartridge { pick } => {
                if let Some(bc) = written_cartridge(&ctx, n, None, pick).await {
                    submit_and_wait(&ctx, n, "verify", &["verify", "--cartridge", &bc]).await;
                }
            }
            ClientOp::Repack { pick } => {
                if let Some(bc) = written_cartridge(&ctx, n, None, pick).await {
                    submit_and_wait(&ctx, n, "repack", &["repack", "--barcode", &bc]).await;
                }
            }
            ClientOp::Intake { pool } => {
                submit_and_wait(&ctx, n, "intake", &["intake", "--all-new", "--pool", &pool]).await;
            }
        }
        i += 1;
    }
}

/// The client with no filesystem shared with reel: it uploads objects to `reel serve` (class
/// `two`), whose spool the chaos fills, and waits for each archive job. An upload is answered
/// 202 (received whole, job queued) or 503 (the spool full, or the store away: nothing
/// queued, retry later); any other answer, or none, breaks `upload-answered-clearly`.
async fn uploader(ctx: Arc<Ctx>) {
    let (at, dir) = {
        let site = ctx.site.lock().await;
        (site.serve_at.clone(), site.client_dir(0).to_path_buf())
    };
    let Some((addr, token)) = at else { return };
    let who = "uploader";
    let mut rng = plan::client_rng(ctx.opts.seed, UPLOADER);
    let mut i = 0u32;
    while !ctx.stop_clients.load(Ordering::SeqCst) {
        i += 1;
        let size = plan::upload_size(&mut rng, ctx.opts.max_file_bytes);
        let path = ctx.opts.dir.join("src").join(format!("up-{i}"));
        let sha = crate::write_random_file(&path, size, file_seed(ctx.opts.seed, UPLOADER, i, 0));
        let body = match std::fs::read(&path) {
            Ok(b) => b,
            Err(e) => panic!("read {}: {e}", path.display()),
        };
        let key = format!("up/u{i:05}");
        ctx.history.log(who, json!({"upload": key, "bytes": size}));
        let answer = http_put(
            &addr,
            &token,
            &format!("/v1/objects/{key}?class=two"),
            &body,
            &hex::encode(sha),
        )
        .await;
        let _ = std::fs::remove_file(&path);
        match answer {
            Ok((202, job)) => {
                let Some(id) = job["id"].as_str().map(String::from) else {
                    ctx.violate(
                        "upload-answered-clearly",
                        format!("202 without a job: {job}"),
                    );
                    continue;
                };
                ctx.count(|t| bump(&mut t.submitted, "upload"));
                if let Ok(mut j) = ctx.jobs.lock() {
                    j.push((id.clone(), "upload".into()));
                }
                let Some(job) = wait_job(&dir, &id, None).await else {
                    continue;
                };
                let state = job["state"].as_str().unwrap_or("?").to_string();
                ctx.count(|t| bump(&mut t.ended, &format!("upload {state}")));
                ctx.history.log(
                    who,
                    json!({"ended": "upload", "job": id, "state": state, "error": job["error"]}),
                );
                if state == "done" {
                    ctx.count(|t| t.bytes_archived += size);
                    if let Ok(mut a) = ctx.acked.lock() {
                        a.insert(key, Acked { sha, size });
                    }
                } else if state == "failed"
                    && job["error"].as_str().is_none_or(|e| e.trim().is_empty())
                {
                    ctx.violate(
                        "failed-with-a-reason",
                        format!("upload job {id} failed without a reason: {job}"),
                    );
                }
            }
            Ok((503, why)) => {
                ctx.count(|t| bump(&mut t.refused, "upload (503)"));
                ctx.history.log(who, json!({"refused": key, "answer": why}));
                tokio::time::sleep(Duration::from_secs(1)).await;
            }
            Ok((status, why)) => {
                ctx.violate(
                    "upload-answered-clearly",
                    format!("PUT {key} ({size} bytes) was answered {status}: {why}"),
                );
                tokio::time::sleep(Duration::from_secs(1)).await;
            }
            Err(e) => {
                ctx.violate(
                    "upload-answered-clearly",
                    format!("PUT {key} ({size} bytes) got no answer: {e}"),
                );
                tokio::time::sleep(Duration::from_secs(1)).await;
            }
        }
    }
}

/// The uploader's number among the clients' generators and file seeds.
const UPLOADER: u32 = 1000;

/// `PUT path` with `body` on `addr` (HTTP/1.1, one request per connection, a bearer token and
/// the body's SHA-256): the status and the answer's JSON.
async fn http_put(
    addr: &str,
    token: &str,
    path: &str,
    body: &[u8],
    sha: &str,
) -> Result<(u16, serde_json::Value), String> {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let exchange = async {
        let mut s = tokio::net::TcpStream::connect(addr)
            .await
            .map_err(|e| format!("connect {addr}: {e}"))?;
        let head = format!(
            "PUT {path} HTTP/1.1\r\nHost: {addr}\r\nConnection: close\r\n\
             Authorization: Bearer {token}\r\nContent-Type: application/octet-stream\r\n\
             Content-Length: {}\r\nx-reel-sha256: {sha}\r\n\r\n",
            body.len()
        );
        s.write_all(head.as_bytes())
            .await
            .map_err(|e| format!("send: {e}"))?;
        // The server may answer (and close) before taking the whole body (a full spool): what
        // it said counts, not the broken send.
        let _ = s.write_all(body).await;
        let mut raw = Vec::new();
        let _ = s.read_to_end(&mut raw).await;
        let split = raw
            .windows(4)
            .position(|w| w == b"\r\n\r\n")
            .ok_or_else(|| format!("no answer ({} bytes back)", raw.len()))?;
        let head = String::from_utf8_lossy(&raw[..split]).to_string();
        let status = head
            .split_whitespace()
            .nth(1)
            .and_then(|s| s.parse().ok())
            .ok_or_else(|| format!("bad status line: {head}"))?;
        let json = serde_json::from_slice(&raw[split + 4..]).unwrap_or_else(|_| {
            serde_json::Value::String(String::from_utf8_lossy(&raw[split + 4..]).into())
        });
        Ok((status, json))
    };
    tokio::time::timeout(Duration::from_secs(300), exchange)
        .await
        .map_err(|_| "no answer within 300 s".to_string())?
}

/// The content of file `j` of client `n`'s operation `i`: a function of the seed.
fn file_seed(seed: u64, n: u32, i: u32, j: usize) -> u64 {
    seed.wrapping_mul(0x100_0000_01B3) ^ (u64::from(n) << 48) ^ (u64::from(i) << 16) ^ j as u64
}

async fn archive(ctx: &Ctx, n: u32, i: u32, sizes: &[u64]) {
    let dir = ctx.opts.dir.join("src").join(format!("c{n}-{i}"));
    let mut files = Vec::new();
    for (j, size) in sizes.iter().enumerate() {
        let key = format!("c{n}/{i}/f{j}");
        let sha = crate::write_random_file(
            &dir.join(format!("f{j}")),
            *size,
            file_seed(ctx.opts.seed, n, i, j),
        );
        files.push((key, sha, *size));
    }
    let prefix = format!("c{n}/{i}/");
    let d = dir.to_string_lossy().into_owned();
    let Some((state, _)) = submit_and_wait(
        ctx,
        n,
        "archive",
        &["archive", &d, "--class", "two", "--key-prefix", &prefix],
    )
    .await
    else {
        return;
    };
    if state == "done" {
        let bytes: u64 = sizes.iter().sum();
        ctx.count(|t| t.bytes_archived += bytes);
        if let Ok(mut a) = ctx.acked.lock() {
            for (k, sha, size) in files {
                a.insert(k, Acked { sha, size });
            }
        }
        // The source is no longer needed: what is acknowledged must come back from tape.
        let _ = std::fs::remove_dir_all(&dir);
    }
}

async fn recall(ctx: &Ctx, n: u32, i: u32, count: u32, pick: u64) {
    let keys: Vec<String> = {
        let Ok(a) = ctx.acked.lock() else { return };
        if a.is_empty() {
            return;
        }
        let all: Vec<&String> = a.keys().collect();
        let mut ks: Vec<String> = (0..u64::from(count))
            .map(|k| {
                all[((pick.wrapping_add(k.wrapping_mul(7919))) % all.len() as u64) as usize].clone()
            })
            .collect();
        ks.sort();
        ks.dedup();
        ks
    };
    let dst = ctx.opts.dir.join("dst").join(format!("c{n}-{i}"));
    let d = dst.to_string_lossy().into_owned();
    let mut args = vec!["recall", "--to", &d];
    args.extend(keys.iter().map(String::as_str));
    let Some((state, _)) = submit_and_wait(ctx, n, "recall", &args).await else {
        return;
    };
    if state == "done" {
        compare_recalled(ctx, &dst, &keys, "recall under chaos");
        let _ = std::fs::remove_dir_all(&dst);
    } else if state == "failed" {
        // Kept (by submit_and_wait) for a retry once the chaos stops; what it did deliver
        // must already be right.
        compare_partial(ctx, &dst, &keys);
    }
}

/// Compare recalled files with what was acknowledged: every key must be there, byte for byte.
fn compare_recalled(ctx: &Ctx, dst: &Path, keys: &[String], what: &str) {
    let Ok(a) = ctx.acked.lock() else { return };
    for k in keys {
        let Some(want) = a.get(k) else { continue };
        let p = dst.join(k);
        match std::fs::metadata(&p) {
            Ok(m) if m.len() == want.size && crate::sha256_file(&p) == want.sha => {
                ctx.count(|t| {
                    t.objects_recalled += 1;
                    t.bytes_recalled += want.size;
                });
            }
            Ok(m) => ctx.violate(
                "acknowledged-object-recalls",
                format!(
                    "{what}: {k} came back with {} bytes and SHA-256 {} (archived: {} bytes, {})",
                    m.len(),
                    crate::hex32(&crate::sha256_file(&p)),
                    want.size,
                    crate::hex32(&want.sha)
                ),
            ),
            Err(e) => ctx.violate(
                "acknowledged-object-recalls",
                format!(
                    "{what}: the job ended done but {} is missing: {e}",
                    p.display()
                ),
            ),
        }
    }
}

/// A failed recall may have delivered some objects: those must be right.
fn compare_partial(ctx: &Ctx, dst: &Path, keys: &[String]) {
    let present: Vec<String> = keys
        .iter()
        .filter(|k| dst.join(k).exists())
        .cloned()
        .collect();
    compare_recalled(ctx, dst, &present, "objects a failed recall delivered");
}

/// A cartridge holding data (of `pool`, if given), chosen by `pick`, from the catalogue.
async fn written_cartridge(ctx: &Ctx, n: u32, pool: Option<&str>, pick: u64) -> Option<String> {
    let dir = ctx.site.lock().await.client_dir(n).to_path_buf();
    let (code, v, _) = site::reel_at(&dir, &["library", "cartridges"]).await;
    if code != 0 {
        return None;
    }
    let list: Vec<String> = v
        .as_array()
        .or_else(|| v["cartridges"].as_array())
        .into_iter()
        .flatten()
        .filter(|c| c["used_bytes"].as_u64().unwrap_or(0) > 0)
        .filter(|c| pool.is_none_or(|p| c["pool"].as_str() == Some(p)))
        .filter_map(|c| c["barcode"].as_str().map(String::from))
        .collect();
    if list.is_empty() {
        return None;
    }
    Some(list[(pick % list.len() as u64) as usize].clone())
}

/// Submit a job through the CLI and wait for it to end: (state, the job's JSON), or None when
/// the submission was refused.
async fn submit_and_wait(
    ctx: &Ctx,
    n: u32,
    kind: &str,
    args: &[&str],
) -> Option<(String, serde_json::Value)> {
    let who = format!("client-{n}");
    let dir = ctx.site.lock().await.client_dir(n).to_path_buf();
    let (code, v, err) = site::reel_at(&dir, args).await;
    if code != 0 {
        ctx.count(|t| bump(&mut t.refused, kind));
        ctx.history.log(
            &who,
            json!({"refused": kind, "code": code, "stderr": err.trim(), "out": v}),
        );
        return None;
    }
    let Some(id) = v
        .get("id")
        .or_else(|| v.get(0).and_then(|j| j.get("id")))
        .and_then(|x| x.as_str())
        .map(String::from)
    else {
        ctx.violate("submission-answers", format!("{kind}: no job id in {v}"));
        return None;
    };
    ctx.count(|t| bump(&mut t.submitted, kind));
    if let Ok(mut j) = ctx.jobs.lock() {
        j.push((id.clone(), kind.to_string()));
    }
    ctx.history.log(&who, json!({"submitted": kind, "job": id}));
    let job = wait_job(&dir, &id, None).await?;
    let state = job["state"].as_str().unwrap_or("?").to_string();
    ctx.count(|t| bump(&mut t.ended, &format!("{kind} {state}")));
    ctx.history.log(
        &who,
        json!({"ended": kind, "job": id, "state": state, "error": job["error"]}),
    );
    if state == "failed" && job["error"].as_str().is_none_or(|e| e.trim().is_empty()) {
        ctx.violate(
            "failed-with-a-reason",
            format!("{kind} job {id} failed without a reason: {job}"),
        );
    }
    if kind == "recall" && state == "failed" {
        let to = args
            .iter()
            .position(|a| *a == "--to")
            .map(|p| PathBuf::from(args[p + 1]));
        let keys = args.iter().skip(3).map(|s| s.to_string()).collect();
        if let (Ok(mut f), Some(to)) = (ctx.failed_recalls.lock(), to) {
            f.push((id.clone(), to, keys));
        }
    }
    Some((state, job))
}

/// Wait for job `id` to end (through `reel jobs wait`, again after a database error);
/// None after `bound`.
async fn wait_job(dir: &Path, id: &str, bound: Option<Duration>) -> Option<serde_json::Value> {
    let t0 = std::time::Instant::now();
    loop {
        let (code, _, _) = site::reel_at(dir, &["jobs", "wait", id, "--timeout", "20"]).await;
        if code == 0 || code == 1 {
            // Exit 1 is also any error of the command (a dropped database connection): only a
            // final state ends the wait.
            let (_, v, _) = site::reel_at(dir, &["jobs", "show", id]).await;
            if matches!(v["state"].as_str(), Some("done" | "failed" | "cancelled")) {
                return Some(v);
            }
        }
        if code != 2 {
            tokio::time::sleep(Duration::from_secs(1)).await;
        }
        if bound.is_some_and(|b| t0.elapsed() > b) {
            return None;
        }
    }
}

// ---------------------------------------------------------------- chaos

async fn chaos(ctx: Arc<Ctx>, schedule: Vec<(u64, Fault)>) {
    for (at, fault) in schedule {
        let now = ctx.history.now_ms();
        if at > now {
            tokio::time::sleep(Duration::from_millis(at - now)).await;
        }
        inject(&ctx, fault).await;
    }
}

fn fault_kind(f: &Fault) -> String {
    match f {
        Fault::Kill { .. } => "kill -9".into(),
        Fault::Freeze { .. } => "SIGSTOP".into(),
        Fault::Drive { request, .. } => {
            let v: serde_json::Value = serde_json::from_str(request).unwrap_or_default();
            v["kind"]
                .as_str()
                .or(v["op"].as_str())
                .unwrap_or("?")
                .to_string()
        }
        Fault::Medium { kind, .. } => kind.clone(),
        Fault::DropConnections => "drop database connections".into(),
        Fault::FillDisk { spool: false, .. } => "fill the recall destination's disk".into(),
        Fault::FillDisk { spool: true, .. } => "fill reel serve's upload spool".into(),
    }
}

async fn inject(ctx: &Arc<Ctx>, fault: Fault) {
    let kind = fault_kind(&fault);
    ctx.history.log("chaos", json!({"fault": fault}));
    let placed = match fault {
        Fault::Kill { worker, down_ms } => {
            let mut site = ctx.site.lock().await;
            let h = &site.hosts[worker as usize];
            if h.worker.is_none() {
                false
            } else {
                site.kill(worker).await;
                drop(site);
                let c = ctx.clone();
                tokio::spawn(async move {
                    tokio::time::sleep(Duration::from_millis(down_ms)).await;
                    let mut site = c.site.lock().await;
                    if site.hosts[worker as usize].worker.is_none() {
                        site.start(worker);
                        c.history.log("chaos", json!({"restarted": worker}));
                    }
                });
                true
            }
        }
        Fault::Freeze { worker, frozen_ms } => {
            let mut site = ctx.site.lock().await;
            let h = &site.hosts[worker as usize];
            if h.worker.is_none() || h.frozen {
                false
            } else {
                site.freeze(worker, true);
                drop(site);
                let c = ctx.clone();
                tokio::spawn(async move {
                    tokio::time::sleep(Duration::from_millis(frozen_ms)).await;
                    c.site.lock().await.freeze(worker, false);
                    c.history.log("chaos", json!({"thawed": worker}));
                });
                true
            }
        }
        Fault::Drive {
            drive,
            request,
            service_after_ms,
        } => {
            let seq = ctx.mailbox_seq.fetch_add(1, Ordering::SeqCst);
            ctx.site.lock().await.post(drive, seq, &request);
            if let Some(ms) = service_after_ms {
                if let Ok(mut d) = ctx.dying.lock() {
                    d.push(drive);
                }
                let c = ctx.clone();
                tokio::spawn(async move {
                    tokio::time::sleep(Duration::from_millis(ms)).await;
                    service_drive(&c, drive).await;
                });
            }
            true
        }
        Fault::Medium {
            kind: k,
            pick,
            block_pick,
            drive,
        } => medium(ctx, &k, pick, block_pick, drive).await,
        Fault::DropConnections => drop_connections(ctx).await,
        Fault::FillDisk { hold_ms, spool } => fill_disk(ctx, hold_ms, spool).await,
    };
    ctx.count(|t| {
        bump(
            if placed {
                &mut t.faults
            } else {
                &mut t.faults_not_placed
            },
            &kind,
        )
    });
}

/// The operator services a drive that was told to die: the robot pulls its cartridge and the
/// drive is replaced (`robot_recover`, run by the drive's owner).
async fn service_drive(ctx: &Ctx, drive: u32) {
    let seq = ctx.mailbox_seq.fetch_add(1, Ordering::SeqCst);
    ctx.site.lock().await.post(
        drive,
        seq,
        &format!(r#"{{"op":"robot_recover","drive":{drive}}}"#),
    );
    if let Ok(mut d) = ctx.dying.lock()
        && let Some(p) = d.iter().position(|x| *x == drive)
    {
        d.remove(p);
    }
    ctx.history.log("operator", json!({"serviced": drive}));
    bring_drives_up(ctx, Some(drive)).await;
}

/// The operator brings up a drive its worker took down after repeated failures (`reel drive
/// up`), once it was serviced (`only`), or every drive (in the calm).
async fn bring_drives_up(ctx: &Ctx, only: Option<u32>) {
    let dir = ctx.site.lock().await.client_dir(0).to_path_buf();
    let (_, v, _) = site::reel_at(&dir, &["drive", "ls"]).await;
    for d in v["drives"].as_array().cloned().unwrap_or_default() {
        let name = d["drive"].as_str().unwrap_or_default().to_string();
        let index_matches = only.is_none_or(|i| name.ends_with(&format!("-{i}")));
        if d["state"] == "down" && index_matches {
            let (code, _, err) =
                site::reel_at(&dir, &["drive", "up", &name, "--reason", "serviced"]).await;
            ctx.history.log(
                "operator",
                json!({"drive_up": name, "was": d["reason"], "ok": code == 0, "error": err}),
            );
        }
    }
}

/// Damage one data block of a written cartridge of pool p2.
async fn medium(ctx: &Ctx, kind: &str, pick: u64, block_pick: u64, drive: u32) -> bool {
    let Some(bc) = written_cartridge(ctx, 0, Some("p2"), pick).await else {
        return false;
    };
    let eod = {
        let dir = ctx.site.lock().await.client_dir(0).to_path_buf();
        let (_, v, _) = site::reel_at(&dir, &["library", "cartridges"]).await;
        v.as_array()
            .into_iter()
            .flatten()
            .find(|c| c["barcode"] == bc.as_str())
            .and_then(|c| c["eod_block"].as_u64())
            .unwrap_or(0)
    };
    if eod < 4 {
        return false;
    }
    // Past the label and its filemark.
    let block = 2 + block_pick % (eod - 2);
    let req = format!(r#"{{"op":"fault","kind":"{kind}","barcode":"{bc}","block":{block}}}"#);
    if let Ok(mut d) = ctx.damaged.lock() {
        d.insert((bc.clone(), block));
    }
    if kind == "medium_error" {
        let seq = ctx.mailbox_seq.fetch_add(1, Ordering::SeqCst);
        ctx.site.lock().await.post(drive, seq, &req);
        return true;
    }
    let r = ctx.observer.open().await.control(&req).await;
    ctx.history.log(
        "chaos",
        json!({"request": req, "outcome": format!("{r:?}")}),
    );
    r.is_ok()
}

/// Fill the recall destinations' file system, or `reel serve`'s upload spool (each a tmpfs
/// of its own, mounted when the runner is root), for `hold_ms`, then free it.
async fn fill_disk(ctx: &Arc<Ctx>, hold_ms: u64, spool: bool) -> bool {
    let mount = {
        let site = ctx.site.lock().await;
        if spool {
            site.spool_mount.clone()
        } else {
            site.dst_mount.clone()
        }
    };
    let Some(dst) = mount else {
        return false;
    };
    let filler = dst.join(format!(".filler-{}", ctx.history.now_ms()));
    let written = tokio::task::spawn_blocking({
        let filler = filler.clone();
        move || {
            use std::io::Write;
            let mut f = std::fs::File::create(&filler)?;
            let chunk = vec![0u8; 1 << 20];
            let mut n = 0u64;
            loop {
                match f.write(&chunk) {
                    Ok(0) => return Ok(n),
                    Ok(k) => n += k as u64,
                    Err(e) if e.raw_os_error() == Some(28) => return Ok(n),
                    Err(e) => return Err(e),
                }
            }
        }
    })
    .await;
    ctx.history.log(
        "chaos",
        json!({"filled": format!("{written:?}"), "hold_ms": hold_ms}),
    );
    let c = ctx.clone();
    tokio::spawn(async move {
        tokio::time::sleep(Duration::from_millis(hold_ms)).await;
        let _ = std::fs::remove_file(&filler);
        c.history.log("chaos", json!({"freed": filler}));
    });
    matches!(written, Ok(Ok(_)))
}

/// Terminate every other connection to the run's PostgreSQL database.
async fn drop_connections(ctx: &Ctx) -> bool {
    let url = {
        let site = ctx.site.lock().await;
        match &site.pg {
            Some(d) => d.url.clone(),
            None => return false,
        }
    };
    use sqlx::Connection;
    let Ok(mut c) = sqlx::PgConnection::connect(&url).await else {
        return false;
    };
    let r: Result<Vec<(bool,)>, _> = sqlx::query_as(
        "SELECT pg_terminate_backend(pid) FROM pg_stat_activity \
         WHERE datname = current_database() AND pid <> pg_backend_pid()",
    )
    .fetch_all(&mut c)
    .await;
    ctx.history.log(
        "chaos",
        json!({"terminated": r.as_ref().map(|v| v.len()).unwrap_or(0)}),
    );
    r.is_ok()
}

// ---------------------------------------------------------------- the calm and the checks

/// The chaos has stopped: wake frozen workers, start stopped ones, service dying drives.
async fn calm(ctx: &Ctx) {
    // Let the thaw and restart tasks already scheduled run out (at most ~10 s).
    tokio::time::sleep(Duration::from_secs(10)).await;
    let mut site = ctx.site.lock().await;
    for i in 0..ctx.opts.workers {
        site.freeze(i, false);
        if site.hosts[i as usize].worker.is_none() {
            site.start(i);
        }
    }
    drop(site);
    let dying: Vec<u32> = ctx.dying.lock().map(|d| d.clone()).unwrap_or_default();
    for d in dying {
        service_drive(ctx, d).await;
    }
    // Faults armed and not met yet would fire in the calm: each drive's owner disarms them
    // (after everything posted before, in mailbox order).
    for d in 0..ctx.opts.workers {
        let seq = ctx.mailbox_seq.fetch_add(1, Ordering::SeqCst);
        ctx.site
            .lock()
            .await
            .post(d, seq, &format!(r#"{{"op":"disarm","drive":{d}}}"#));
    }
    let lib = ctx.site.lock().await.lib.clone();
    let t0 = std::time::Instant::now();
    while t0.elapsed() < Duration::from_secs(120) {
        let waiting = (0..ctx.opts.workers).any(|d| {
            std::fs::read_dir(lib.join("mailbox").join(format!("drive-{d}")))
                .map(|mut r| r.next().is_some())
                .unwrap_or(false)
        });
        if !waiting {
            break;
        }
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    ctx.history
        .log("runner", json!({"calm": "faults disarmed"}));
    // Drives taken down by their workers under the chaos are serviced now.
    bring_drives_up(ctx, None).await;
}

/// Every job any client saw ends within the bound.
async fn liveness(ctx: &Ctx) {
    let jobs: Vec<(String, String)> = ctx.jobs.lock().map(|j| j.clone()).unwrap_or_default();
    let dir = ctx.site.lock().await.client_dir(0).to_path_buf();
    for (id, kind) in jobs {
        if wait_job(&dir, &id, Some(JOB_BOUND)).await.is_none() {
            let (_, v, _) = site::reel_at(&dir, &["jobs", "show", &id]).await;
            ctx.violate(
                "no-job-stuck",
                format!("{kind} job {id} did not end within {JOB_BOUND:?} after the chaos: {v}"),
            );
        }
    }
}

/// Recalls that failed under chaos are retried in the calm and must succeed.
async fn retry_failed_recalls(ctx: &Ctx) {
    let failed = ctx
        .failed_recalls
        .lock()
        .map(|f| f.clone())
        .unwrap_or_default();
    let dir = ctx.site.lock().await.client_dir(0).to_path_buf();
    for (id, dst, keys) in failed {
        let (code, v, err) = site::reel_at(&dir, &["jobs", "retry", &id]).await;
        ctx.history.log(
            "calm",
            json!({"retry": id, "code": code, "out": v, "stderr": err.trim()}),
        );
        let job = wait_job(&dir, &id, Some(JOB_BOUND)).await;
        match job {
            Some(j) if j["state"] == "done" => {
                compare_recalled(ctx, &dst, &keys, "recall retried in the calm")
            }
            other => ctx.violate(
                "calm-retry-succeeds",
                format!(
                    "recall {id} of {keys:?} failed under chaos and again in the calm: {other:?}"
                ),
            ),
        }
        let _ = std::fs::remove_dir_all(&dst);
    }
}

/// Every acknowledged object recalls byte for byte, in one recall per client prefix.
async fn recall_everything(ctx: &Ctx) {
    let keys: Vec<String> = ctx
        .acked
        .lock()
        .map(|a| a.keys().cloned().collect())
        .unwrap_or_default();
    if keys.is_empty() {
        ctx.violate(
            "progress",
            "no archive job ended done: the run proved nothing".into(),
        );
        return;
    }
    let dir = ctx.site.lock().await.client_dir(0).to_path_buf();
    // Outside the (small) destination file system the chaos fills.
    let dst = ctx.opts.dir.join("final");
    let d = dst.to_string_lossy().into_owned();
    let prefixes = (0..ctx.opts.clients)
        .map(|n| format!("c{n}/"))
        .chain(["up/".to_string()]);
    for prefix in prefixes {
        let mine: Vec<String> = keys
            .iter()
            .filter(|k| k.starts_with(&prefix))
            .cloned()
            .collect();
        if mine.is_empty() {
            continue;
        }
        let (code, v, err) = site::reel_at(
            &dir,
            &[
                "recall",
                "--prefix",
                &prefix,
                "--to",
                &d,
                "--overwrite",
                "always",
            ],
        )
        .await;
        if code != 0 {
            ctx.violate(
                "acknowledged-object-recalls",
                format!("the final recall of {prefix} was refused: {v} {err}"),
            );
            continue;
        }
        let id = v["id"].as_str().unwrap_or_default().to_string();
        match wait_job(&dir, &id, Some(JOB_BOUND)).await {
            Some(j) if j["state"] == "done" => compare_recalled(ctx, &dst, &mine, "final recall"),
            other => ctx.violate(
                "acknowledged-object-recalls",
                format!("the final recall of {prefix} did not end done: {other:?}"),
            ),
        }
    }
    let _ = std::fs::remove_dir_all(&dst);
}

/// Every written cartridge is verified in the calm. A cartridge of pool p1 (no stored damage is
/// aimed there) must verify clean: a failure means corruption the drive did not report got past
/// the read-back verify of the write. A p2 cartridge may fail only at blocks the chaos damaged.
async fn verify_everything(ctx: &Ctx) {
    let dir = ctx.site.lock().await.client_dir(0).to_path_buf();
    let (_, v, _) = site::reel_at(&dir, &["library", "cartridges"]).await;
    let carts: Vec<(String, String)> = v
        .as_array()
        .into_iter()
        .flatten()
        .filter(|c| c["used_bytes"].as_u64().unwrap_or(0) > 0)
        .filter_map(|c| {
            Some((
                c["barcode"].as_str()?.to_string(),
                c["pool"].as_str()?.to_string(),
            ))
        })
        .collect();
    let damaged = ctx.damaged.lock().map(|d| d.clone()).unwrap_or_default();
    for (bc, pool) in carts {
        let (code, v, err) = site::reel_at(&dir, &["verify", "--cartridge", &bc]).await;
        if code != 0 {
            ctx.history.log(
                "check",
                json!({"verify": bc, "refused": v, "stderr": err.trim()}),
            );
            continue;
        }
        let id = v["id"].as_str().unwrap_or_default().to_string();
        let Some(job) = wait_job(&dir, &id, Some(JOB_BOUND)).await else {
            ctx.violate(
                "no-job-stuck",
                format!("the final verify of {bc} ({id}) did not end"),
            );
            continue;
        };
        ctx.history.log(
            "check",
            json!({"verify": bc, "pool": pool, "state": job["state"], "error": job["error"]}),
        );
        if job["state"] == "done" {
            continue;
        }
        let error = job["error"].as_str().unwrap_or_default().to_string();
        let failed_at = failed_blocks(&error);
        let damaged_here: Vec<&(String, u64)> = damaged.iter().filter(|d| d.0 == bc).collect();
        // A p2 cartridge the chaos damaged may fail where the damage is; a verify that finds
        // a container's SHA-256 wrong without naming a block is put down to that damage too.
        // Anything on p1, or a named block the chaos did not touch, is unexplained.
        let unexplained: Vec<&(String, u64)> = failed_at
            .iter()
            .filter(|b| pool != "p2" || !damaged.contains(b))
            .collect();
        let explained = pool == "p2" && !damaged_here.is_empty() && unexplained.is_empty();
        if !explained {
            ctx.violate(
                "verified-means-intact",
                format!(
                    "cartridge {bc} (pool {pool}) fails its verify where the chaos damaged \
                     nothing stored (unexplained blocks {unexplained:?}; damaged here: \
                     {damaged_here:?}): {error}"
                ),
            );
        }
    }
}

/// The (barcode, block) pairs a verify's error names: "container N on BARCODE: … block B …",
/// the first block named after each container.
pub(crate) fn failed_blocks(error: &str) -> Vec<(String, u64)> {
    let mut out = Vec::new();
    for part in error.split("container ").skip(1) {
        let mut words = part.split_whitespace();
        let (_, on, bc) = (words.next(), words.next(), words.next());
        if on != Some("on") {
            continue;
        }
        let Some(bc) = bc else { continue };
        let mut prev = "";
        for w in words {
            if prev == "block"
                && let Ok(n) = w.trim_end_matches([':', ',', ';', ')']).parse::<u64>()
            {
                out.push((bc.trim_end_matches(':').to_string(), n));
                break;
            }
            prev = w;
        }
    }
    out
}

/// The library's log, every process included: no write short of EOD, no relabel.
async fn library_history(ctx: &Ctx) {
    let c = ctx.observer.library_counters().await;
    ctx.history.log("check", json!({"library": c}));
    if c["violations"].as_u64() != Some(0) {
        ctx.violate(
            "no-write-short-of-eod",
            format!("the library's event log records writes short of EOD: {c}"),
        );
    }
    if c["worm_refusals"].as_u64() != Some(0) {
        ctx.violate(
            "no-write-short-of-eod",
            format!(
                "the library's event log records writes short of EOD on WORM cartridges (refused \
                 by the drive): {}",
                c["worm_refusals"]
            ),
        );
    }
    if c["relabels"].as_u64() != Some(0) {
        ctx.violate(
            "no-relabel",
            format!("the library's event log records writes over a written label: {c}"),
        );
    }
}

/// The block ranges of the containers holding acknowledged objects' copies: (barcode, first
/// block, last block), from `reel catalog find` of every acknowledged key.
async fn live_containers(ctx: &Ctx) -> std::collections::BTreeSet<(String, u64, u64)> {
    let dir = ctx.site.lock().await.client_dir(0).to_path_buf();
    let keys: Vec<String> = ctx
        .acked
        .lock()
        .map(|a| a.keys().cloned().collect())
        .unwrap_or_default();
    let mut out = std::collections::BTreeSet::new();
    for chunk in keys.chunks(8) {
        let mut finds = tokio::task::JoinSet::new();
        for k in chunk {
            let (dir, k) = (dir.clone(), k.clone());
            finds.spawn(async move { site::reel_at(&dir, &["catalog", "find", &k]).await });
        }
        for (_, v, _) in finds.join_all().await {
            for c in v["copies"].as_array().into_iter().flatten() {
                if let (Some(bc), Some(first), Some(last)) = (
                    c["barcode"].as_str(),
                    c["container_first_block"].as_u64(),
                    c["container_last_block"].as_u64(),
                ) {
                    out.insert((bc.to_string(), first, last));
                }
            }
        }
    }
    ctx.history
        .log("check", json!({"live_containers": out.len()}));
    out
}

/// `retries-back-off`: every tape request in the store was tried at most `max_attempts` times,
/// with its backoff between tries (`retries.rs`).
async fn retries_back_off(ctx: &Ctx) -> retries::RetryTally {
    let (url, dir) = {
        let site = ctx.site.lock().await;
        (site.store_url.clone(), site.client_dir(0).to_path_buf())
    };
    let loaded = match reel_queue::config::LoadedConfig::load(None, Some(&dir)) {
        Ok(l) => l,
        Err(e) => {
            ctx.violate(
                "retries-back-off",
                format!("cannot read the hosts' configuration: {e}"),
            );
            return Default::default();
        }
    };
    let w = &loaded.config.worker;
    let backoff = reel_queue::Backoff {
        base: Duration::from_millis(w.backoff_base_ms),
        max: Duration::from_millis(w.backoff_max_ms),
    };
    let rows = match retries::load(&url).await {
        Ok(r) => r,
        Err(e) => {
            ctx.violate(
                "retries-back-off",
                format!("cannot read the tape requests: {e}"),
            );
            return Default::default();
        }
    };
    let (tally, problems) = retries::check(&rows, w.max_attempts, backoff);
    ctx.history.log("check", json!({"retries": tally}));
    for p in problems {
        ctx.violate("retries-back-off", p);
    }
    tally
}

/// `corruption-caught`: what the library's log says took effect against reel's integrity log
/// (`corruption.rs`).
async fn corruption_caught(
    ctx: &Ctx,
    live: &std::collections::BTreeSet<(String, u64, u64)>,
) -> corruption::CorruptionTally {
    let c = ctx.observer.library_counters().await;
    let fired = corruption::parse_fired(&c["fired"]);
    let dir = ctx.site.lock().await.client_dir(0).to_path_buf();
    // The workers record what they caught a moment after; read until two reads 3 s apart
    // agree (a minute at most).
    let mut last: Option<serde_json::Value> = None;
    let mut v = serde_json::Value::Null;
    for _ in 0..20 {
        let (code, now, err) =
            site::reel_at(&dir, &["library", "integrity", "--limit", "100000000"]).await;
        if code != 0 {
            ctx.violate(
                "corruption-caught",
                format!("`reel library integrity` failed: {now} {err}"),
            );
            return Default::default();
        }
        if last.as_ref() == Some(&now) {
            v = now;
            break;
        }
        v = now.clone();
        last = Some(now);
        tokio::time::sleep(Duration::from_secs(3)).await;
    }
    let caught = corruption::Caught::parse_all(&v);
    let killed = ctx.site.lock().await.killed.clone();
    let (tally, problems) = corruption::check(&fired, &caught, live, &killed);
    ctx.history.log("check", json!({"corruption": tally}));
    for p in problems {
        ctx.violate("corruption-caught", p);
    }
    tally
}

/// A catalogue rebuilt from the tapes into an empty store holds every acknowledged object.
async fn rebuild_matches(ctx: &Ctx) {
    let site = ctx.site.lock().await;
    let root = ctx.opts.dir.join("rebuild");
    let (url, _pg) = match &site.pg {
        None => {
            std::fs::create_dir_all(&root).expect("rebuild dir");
            (format!("sqlite:{}", root.join("reel.db").display()), None)
        }
        Some(d) => {
            let base = crate::postgres_url("reel-torture").unwrap_or_default();
            let fresh = crate::PgDatabase::create(&base).await;
            let _ = d;
            let url = fresh.url.clone();
            // Dropped with the run's own database, or kept with it.
            ctx.keep_pg.lock().map(|mut k| k.push(fresh)).ok();
            (url, None::<()>)
        }
    };
    // One host on every drive, with the fresh store.
    let cfg = std::fs::read_to_string(site.hosts[0].dir.join("reel.toml")).expect("host config");
    let drives: Vec<String> = (0..ctx.opts.workers).map(|i| format!("\"{i}\"")).collect();
    let cfg = cfg
        .replace(
            &format!("url = \"{}\"", site.store_url),
            &format!("url = \"{url}\""),
        )
        .replace(
            "drives = [\"0\"]",
            &format!("drives = [{}]", drives.join(", ")),
        )
        .replace(
            &format!(
                "jobs_url = \"sqlite:{}\"",
                site.root.join("store").join("jobs.db").display()
            ),
            "jobs_url = \"sqlite:jobs.db\"",
        );
    drop(site);
    std::fs::create_dir_all(&root).expect("rebuild dir");
    std::fs::write(root.join("reel.toml"), cfg).expect("rebuild config");
    let log = std::fs::File::create(root.join("worker.log")).expect("log");
    let mut worker = tokio::process::Command::new(crate::binary_path("reel"))
        .arg("--data-dir")
        .arg(&root)
        .arg("worker")
        .stdout(log.try_clone().expect("log"))
        .stderr(log)
        .kill_on_drop(true)
        .spawn()
        .expect("spawn the rebuild worker");
    let (code, v, err) = site::reel_at(&root, &["catalog", "rebuild"]).await;
    let rebuilt = if code == 0 {
        let id = v["id"].as_str().unwrap_or_default().to_string();
        let j = wait_job(&root, &id, Some(JOB_BOUND)).await;
        ctx.history.log("check", json!({"rebuild": j}));
        let (_, ls, _) = site::reel_at(&root, &["catalog", "ls", "--limit", "10000000"]).await;
        Some(ls)
    } else {
        ctx.violate(
            "catalogue-matches-tapes",
            format!("catalog rebuild refused: {v} {err}"),
        );
        None
    };
    let _ = worker.start_kill();
    let _ = worker.wait().await;
    let Some(ls) = rebuilt else { return };
    let found: BTreeMap<String, (u64, String)> = ls
        .as_array()
        .into_iter()
        .flatten()
        .filter_map(|o| {
            Some((
                o["key"].as_str()?.to_string(),
                (o["size"].as_u64()?, o["sha256"].as_str()?.to_string()),
            ))
        })
        .collect();
    let Ok(a) = ctx.acked.lock() else { return };
    let mut missing = Vec::new();
    for (k, want) in a.iter() {
        match found.get(k) {
            Some((size, sha)) if *size == want.size && *sha == crate::hex32(&want.sha) => {}
            other => missing.push(format!("{k}: rebuilt {other:?}")),
        }
    }
    if !missing.is_empty() {
        ctx.violate(
            "catalogue-matches-tapes",
            format!(
                "{} acknowledged object(s) differ or are missing in the catalogue rebuilt from the tapes: {:?}",
                missing.len(),
                &missing[..missing.len().min(10)]
            ),
        );
    }
}
