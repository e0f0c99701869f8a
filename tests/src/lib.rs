//! # reel-tests: helpers for the end-to-end tests in `tests/tests/`
//!
//! The tests drive the real `reel` binary, load the real plugins through dlopen, and run on
//! both databases: SQLite in a temporary directory, and PostgreSQL at
//! `REEL_TEST_POSTGRES_URL` in a schema of its own per test (so tests run in parallel).
//! Without that variable the PostgreSQL half of a test is skipped with a loud message, except
//! under `CI=true`, where it fails.

use std::path::{Path, PathBuf};

pub mod embedded;
pub mod torture;
pub use embedded::{job_ended, sim_counters, start_worker, worker_config};

use rand::{RngCore, SeedableRng};
use sha2::{Digest, Sha256};

/// The target directory of the running test binary (`target/<profile>`).
pub fn target_dir() -> PathBuf {
    let exe = std::env::current_exe().expect("test binary path");
    // target/<profile>/deps/<test> → target/<profile>; a binary of this crate
    // (`reel-torture`) lives in target/<profile> itself.
    let dir = exe.parent().expect("test binary lives in a directory");
    if dir.file_name().is_some_and(|n| n == "deps") {
        dir.parent()
            .map(Path::to_path_buf)
            .expect("target/<profile>")
    } else {
        dir.to_path_buf()
    }
}

/// Path of a plugin's shared library, e.g. `plugin_path("reel_plugin_sim")`.
pub fn plugin_path(lib: &str) -> PathBuf {
    let name = format!("lib{lib}.so");
    let t = target_dir();
    for p in [t.join(&name), t.join("deps").join(&name)] {
        if p.exists() {
            return p;
        }
    }
    panic!(
        "{name} not found under {}; build it with `cargo build -p {}`",
        t.display(),
        lib.replace('_', "-")
    );
}

/// Path of a binary of the workspace (e.g. `reel`), built by `cargo test --workspace`.
pub fn binary_path(name: &str) -> PathBuf {
    let p = target_dir().join(name);
    assert!(
        p.exists(),
        "{} not found; build it with `cargo build -p reel-jobs`",
        p.display()
    );
    p
}

/// The PostgreSQL URL for tests, or None (after a loud message) when it is not configured.
/// Under `CI=true` a missing or unreachable server is a failure, never a skip.
pub fn postgres_url(test: &str) -> Option<String> {
    match std::env::var("REEL_TEST_POSTGRES_URL") {
        Ok(u) if !u.is_empty() => Some(u),
        _ => {
            if std::env::var("CI").map(|v| v == "true").unwrap_or(false) {
                panic!(
                    "{test}: CI=true but REEL_TEST_POSTGRES_URL is not set: the PostgreSQL tests must run in CI"
                );
            }
            eprintln!("SKIPPED (PostgreSQL half of {test}): REEL_TEST_POSTGRES_URL unset");
            None
        }
    }
}

/// A PostgreSQL schema of its own for one test (the catalogue's `?schema=` URL parameter);
/// dropped when this guard is dropped.
pub struct PgSchema {
    base: String,
    /// The schema's name.
    pub schema: String,
    /// A URL whose connections use only this schema.
    pub url: String,
}

impl PgSchema {
    /// Create a fresh schema on the server at `base`.
    pub async fn create(base: &str) -> PgSchema {
        let schema = format!("reel_t_{}", uuid::Uuid::new_v4().simple());
        // Reachability first, so a missing server fails here with a clear message.
        drop(connect(base).await);
        // The catalogue creates the schema named by `?schema=` and works only inside it.
        let sep = if base.contains('?') { '&' } else { '?' };
        let url = format!("{base}{sep}schema={schema}");
        PgSchema {
            base: base.to_string(),
            schema,
            url,
        }
    }
}

async fn connect(url: &str) -> sqlx::PgConnection {
    use sqlx::Connection;
    match sqlx::PgConnection::connect(url).await {
        Ok(c) => c,
        Err(e) => panic!(
            "cannot connect to PostgreSQL at {url}: {e}; start it or unset REEL_TEST_POSTGRES_URL"
        ),
    }
}

impl Drop for PgSchema {
    fn drop(&mut self) {
        let base = self.base.clone();
        let schema = self.schema.clone();
        // Best effort, on a thread of its own: Drop may run inside a runtime.
        let _ = std::thread::spawn(move || {
            if let Ok(rt) = tokio::runtime::Builder::new_current_thread()
                .enable_all()
                .build()
            {
                rt.block_on(async {
                    let mut c = connect(&base).await;
                    let _ = sqlx::query(sqlx::AssertSqlSafe(format!(
                        "DROP SCHEMA IF EXISTS {schema} CASCADE"
                    )))
                    .execute(&mut c)
                    .await;
                });
            }
        })
        .join();
    }
}

/// One database a test runs on.
pub enum Backend {
    /// SQLite file in a temporary directory.
    Sqlite(tempfile::TempDir),
    /// PostgreSQL schema.
    Postgres(PgSchema),
}

impl Backend {
    /// The catalogue URL.
    pub fn url(&self) -> String {
        match self {
            Backend::Sqlite(d) => format!("sqlite:{}", d.path().join("reel.db").display()),
            Backend::Postgres(s) => s.url.clone(),
        }
    }
    /// "sqlite" or "postgres".
    pub fn name(&self) -> &'static str {
        match self {
            Backend::Sqlite(_) => "sqlite",
            Backend::Postgres(_) => "postgres",
        }
    }
}

/// SQLite always, PostgreSQL when configured (required under CI).
pub async fn backends(test: &str) -> Vec<Backend> {
    let mut v = vec![Backend::Sqlite(tempfile::tempdir().expect("tempdir"))];
    if let Some(u) = postgres_url(test) {
        v.push(Backend::Postgres(PgSchema::create(&u).await));
    }
    v
}

/// A simulator configuration string for a library in `dir` on the INSTANT clock.
pub fn sim_config(dir: &Path, extra: &[(&str, &str)]) -> String {
    let mut s = format!(
        "dir={}\nsim.clock=instant\nsim.calibrated=true\n",
        dir.display()
    );
    for (k, v) in extra {
        s.push_str(&format!("{k}={v}\n"));
    }
    s
}

/// Write a file of `size` pseudo-random bytes (seeded) and return its SHA-256.
pub fn write_random_file(path: &Path, size: u64, seed: u64) -> [u8; 32] {
    use std::io::Write;
    if let Some(p) = path.parent() {
        std::fs::create_dir_all(p).expect("mkdir");
    }
    let mut f =
        std::io::BufWriter::with_capacity(1 << 20, std::fs::File::create(path).expect("create"));
    let mut rng = rand::rngs::StdRng::seed_from_u64(seed);
    let mut h = Sha256::new();
    let mut buf = vec![0u8; 1 << 20];
    let mut left = size;
    while left > 0 {
        let n = left.min(buf.len() as u64) as usize;
        rng.fill_bytes(&mut buf[..n]);
        h.update(&buf[..n]);
        f.write_all(&buf[..n]).expect("write");
        left -= n as u64;
    }
    f.flush().expect("flush");
    h.finalize().into()
}

/// SHA-256 of a file.
pub fn sha256_file(path: &Path) -> [u8; 32] {
    use std::io::Read;
    let mut f = std::fs::File::open(path).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
    let mut h = Sha256::new();
    let mut buf = vec![0u8; 1 << 20];
    loop {
        let n = f.read(&mut buf).expect("read");
        if n == 0 {
            break;
        }
        h.update(&buf[..n]);
    }
    h.finalize().into()
}

/// Hex of a digest.
pub fn hex32(d: &[u8; 32]) -> String {
    hex::encode(d)
}

/// Send the engine's tracing to the test's output when `RUST_LOG` is set.
pub fn init_tracing() {
    if std::env::var_os("RUST_LOG").is_some() {
        let _ = tracing_subscriber::fmt()
            .with_env_filter(tracing_subscriber::EnvFilter::from_default_env())
            .with_test_writer()
            .try_init();
    }
}

impl Backend {
    /// A new, empty database of the same kind.
    pub async fn fresh_like(&self) -> Backend {
        match self {
            Backend::Sqlite(_) => Backend::Sqlite(tempfile::tempdir().expect("tempdir")),
            Backend::Postgres(s) => Backend::Postgres(PgSchema::create(&s.base).await),
        }
    }
}

/// A PostgreSQL database of its own (for tests whose job queue must not be shared: apalis keeps
/// its tables in a fixed schema); dropped, with its sessions, on drop.
pub struct PgDatabase {
    admin: String,
    /// Database name.
    pub name: String,
    /// URL of the database.
    pub url: String,
}

impl PgDatabase {
    /// Create a fresh database on the server of `base` (a URL naming any database).
    pub async fn create(base: &str) -> PgDatabase {
        let name = format!("reel_t_{}", uuid::Uuid::new_v4().simple());
        let mut c = connect(base).await;
        sqlx::query(sqlx::AssertSqlSafe(format!("CREATE DATABASE {name}")))
            .execute(&mut c)
            .await
            .expect("create database");
        let (head, tail) = match base.find('?') {
            Some(i) => (&base[..i], &base[i..]),
            None => (base, ""),
        };
        let cut = head.rfind('/').expect("database URL has a path");
        let url = format!("{}/{name}{tail}", &head[..cut]);
        PgDatabase {
            admin: base.to_string(),
            name,
            url,
        }
    }
}

impl Drop for PgDatabase {
    fn drop(&mut self) {
        let admin = self.admin.clone();
        let name = self.name.clone();
        let _ = std::thread::spawn(move || {
            if let Ok(rt) = tokio::runtime::Builder::new_current_thread()
                .enable_all()
                .build()
            {
                rt.block_on(async {
                    let mut c = connect(&admin).await;
                    let _ = sqlx::query(sqlx::AssertSqlSafe(format!(
                        "DROP DATABASE IF EXISTS {name} WITH (FORCE)"
                    )))
                    .execute(&mut c)
                    .await;
                });
            }
        })
        .join();
    }
}

/// A store for the `reel` binary: a SQLite file in the data dir, or a PostgreSQL database.
pub enum Store {
    /// `sqlite:reel.db` in the data directory.
    Sqlite,
    /// A database of its own.
    Postgres(PgDatabase),
}

impl Store {
    /// The `[store] url`.
    pub fn url(&self) -> String {
        match self {
            Store::Sqlite => "sqlite:reel.db".into(),
            Store::Postgres(d) => d.url.clone(),
        }
    }
    /// "sqlite" or "postgres".
    pub fn name(&self) -> &'static str {
        match self {
            Store::Sqlite => "sqlite",
            Store::Postgres(_) => "postgres",
        }
    }
}

/// SQLite always, PostgreSQL when configured (required under CI).
pub async fn stores(test: &str) -> Vec<Store> {
    let mut v = vec![Store::Sqlite];
    if let Some(u) = postgres_url(test) {
        v.push(Store::Postgres(PgDatabase::create(&u).await));
    }
    v
}

/// Write a `reel.toml` for tests into `data_dir`: the store, the simulator in `lib_dir` (INSTANT
/// clock, `drives` drives), storage class `default` = one copy, fast polling, mount at once.
pub fn write_config(
    data_dir: &Path,
    store_url: &str,
    lib_dir: &Path,
    drives: u32,
    extra: &str,
) -> PathBuf {
    let plugin_config = format!(
        "dir={}\\nsim.clock=instant\\nsim.calibrated=true\\nsim.drives={drives}\\nsim.cartridges=10",
        lib_dir.display()
    );
    write_plugin_config(
        data_dir,
        store_url,
        &plugin_path("reel_plugin_sim"),
        &plugin_config,
        extra,
    )
}

/// [`write_config`] with the simulator in shared mode (so a test reaches the worker's drives
/// and the library through the mailboxes, docs/SIMULATOR.md §7), `sim` replacing its
/// `sim.cartridges=10` (more `sim.*` keys, `\\n`-separated as in a TOML basic string).
pub fn write_shared_config(
    data_dir: &Path,
    store_url: &str,
    lib_dir: &Path,
    drives: u32,
    sim: &str,
) -> PathBuf {
    let cfg = write_config(data_dir, store_url, lib_dir, drives, "");
    let text = std::fs::read_to_string(&cfg).expect("read config");
    std::fs::write(
        &cfg,
        text.replace("sim.cartridges=10", &format!("{sim}\\nsim.shared=true")),
    )
    .expect("write config");
    cfg
}

/// Hold (or release) the scheduler of a [`write_config`] config: held, no queue is worth a
/// mount for a million seconds, so planned work stays queued where a test can look at it.
pub fn hold_mounts(cfg: &Path, held: bool) {
    let text = std::fs::read_to_string(cfg).expect("read config");
    let (a, b) = (
        "min_bytes = 1\nmin_files = 1\nmax_age_seconds = 0\n",
        "min_bytes = 1000000000000000\nmin_files = 1000000\nmax_age_seconds = 1000000\n",
    );
    let text = if held {
        text.replace(a, b)
    } else {
        text.replace(b, a)
    };
    std::fs::write(cfg, text).expect("write config");
}

/// Write a `reel.toml` for tests into `data_dir` with any device plugin: `plugin_config` goes
/// into a TOML basic string as it is (write a line break as `\n`); otherwise as
/// [`write_config`].
pub fn write_plugin_config(
    data_dir: &Path,
    store_url: &str,
    plugin: &Path,
    plugin_config: &str,
    extra: &str,
) -> PathBuf {
    let cfg = data_dir.join("reel.toml");
    let text = format!(
        r#"[store]
url = "{store_url}"
jobs_url = "sqlite:jobs.db"

[library]
plugin = "{plugin}"
plugin_config = "{plugin_config}"

[archive]
verify = "full"
barrier_seconds = 5
default_class = "default"

[archive.storage_classes]
default = ["p1"]
two = ["p1", "p2"]

[worker]
poll_interval_ms = 100
heartbeat_ms = 1000
lease_ms = 4000
backoff_base_ms = 500
backoff_max_ms = 2000

[scheduler]
min_bytes = 1
min_files = 1
max_age_seconds = 0
min_mount_seconds = 0
{extra}
"#,
        plugin = plugin.display(),
    );
    std::fs::create_dir_all(data_dir).expect("data dir");
    std::fs::write(&cfg, text).expect("write config");
    cfg
}

/// Run `reel --data-dir DIR --json ARGS…`; returns (exit status, parsed JSON stdout, stderr).
pub fn reel(data_dir: &Path, args: &[&str]) -> (i32, serde_json::Value, String) {
    let out = std::process::Command::new(binary_path("reel"))
        .arg("--data-dir")
        .arg(data_dir)
        .arg("--json")
        .args(args)
        .output()
        .expect("run reel");
    let stdout = String::from_utf8_lossy(&out.stdout);
    let json =
        serde_json::from_str(&stdout).unwrap_or(serde_json::Value::String(stdout.into_owned()));
    (
        out.status.code().unwrap_or(-1),
        json,
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

/// Run `reel --data-dir DIR ARGS…` for people (no `--json`); returns (exit status, stdout,
/// stderr).
pub fn reel_text(data_dir: &Path, args: &[&str]) -> (i32, String, String) {
    let out = std::process::Command::new(binary_path("reel"))
        .arg("--data-dir")
        .arg(data_dir)
        .args(args)
        .output()
        .expect("run reel");
    (
        out.status.code().unwrap_or(-1),
        String::from_utf8_lossy(&out.stdout).into_owned(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

/// [`reel`] that must succeed: its JSON output.
pub fn reel_ok(data_dir: &Path, args: &[&str]) -> serde_json::Value {
    let (code, v, err) = reel(data_dir, args);
    assert_eq!(code, 0, "{args:?}: {v} {err}");
    v
}

/// [`reel`] that must be refused, saying `needle` on stderr.
pub fn reel_refused(data_dir: &Path, args: &[&str], needle: &str) {
    let (code, v, err) = reel(data_dir, args);
    assert_ne!(code, 0, "{args:?} was accepted: {v}");
    assert!(err.contains(needle), "{args:?}: {err}");
}

/// Put a `control` request for a shared simulator library in `lib` into drive `drive`'s
/// mailbox (file `n`) and wait, at most a minute and a half, until its owner ran it and said it
/// went well (docs/SIMULATOR.md §7): faults for that drive, and library requests (an operator's
/// `ie_insert`, `ie_remove`) any owner runs.
pub fn sim_mail(lib: &Path, drive: u32, n: u32, request: &str) {
    let path = lib.join("mailbox").join("delivered.jsonl");
    let lines = || {
        std::fs::read_to_string(&path)
            .unwrap_or_default()
            .lines()
            .map(String::from)
            .collect::<Vec<_>>()
    };
    let before = lines().len();
    let mb = lib.join("mailbox").join(format!("drive-{drive}"));
    std::fs::create_dir_all(&mb).expect("mailbox");
    let tmp = lib.join("mailbox").join(format!(".{n}.tmp"));
    std::fs::write(&tmp, request).expect("write mail");
    std::fs::rename(&tmp, mb.join(format!("{n:04}.json"))).expect("post mail");
    let t0 = std::time::Instant::now();
    loop {
        let now = lines();
        if now.len() > before {
            assert!(
                now[before].contains("\"ok\":true"),
                "{request}: {}",
                now[before]
            );
            return;
        }
        assert!(
            t0.elapsed() < std::time::Duration::from_secs(90),
            "{request} was not delivered"
        );
        std::thread::sleep(std::time::Duration::from_millis(100));
    }
}

/// `reel jobs show ID`: the job as JSON (whatever the exit status).
pub fn show_job(data_dir: &Path, id: &str) -> serde_json::Value {
    reel(data_dir, &["jobs", "show", id]).1
}

/// The job id in `reel --json` output: a job, or the first of a list of jobs.
pub fn job_id(v: &serde_json::Value) -> String {
    v.get("id")
        .or_else(|| v.get(0).and_then(|j| j.get("id")))
        .and_then(|x| x.as_str())
        .unwrap_or_else(|| panic!("no job id in {v}"))
        .to_string()
}

/// Send SIGTERM to `child` and wait for it; returns its exit code (-1 if killed by a signal).
pub fn terminate(child: &mut std::process::Child) -> i32 {
    // The kill command sends the signal: no unsafe libc call in test helpers.
    let _ = std::process::Command::new("kill")
        .arg("-TERM")
        .arg(child.id().to_string())
        .status();
    child.wait().map(|s| s.code().unwrap_or(-1)).unwrap_or(-1)
}

/// Simulator settings (for a plugin config string, TOML-escaped line breaks) of a slow drive
/// on a real-time clock: 2 MB/s through a 1 MiB buffer, with short mechanical delays, so a
/// session's write and read-back windows last seconds.
pub const SLOW_SIM: &str = "sim.clock=scaled\\nsim.time_scale=1\\nsim.stream_bytes_per_sec=2000000\\n\
     sim.min_stream_bytes_per_sec=1000000\\nsim.buffer_bytes=1048576\\n\
     sim.start_bytes=262144\\nsim.robot_ms=20\\nsim.load_ms=20\\nsim.unload_ms=20\\n\
     sim.rewind_min_ms=20\\nsim.rewind_max_ms=50\\nsim.locate_settle_ms=5\\n\
     sim.locate_full_pass_ms=100\\nsim.reposition_ms=5\\nsim.backhitch_ms=5\\n\
     sim.first_load_ms=20";

/// Rows of (text, integer) from a query on the catalogue of a data directory, read-only:
/// `store_url` as its config has it (`sqlite:reel.db` is relative to `data_dir`).
pub async fn catalogue_rows(data_dir: &Path, store_url: &str, sql: &str) -> Vec<(String, i64)> {
    if let Some(file) = store_url.strip_prefix("sqlite:") {
        let url = format!("sqlite:{}?mode=ro", data_dir.join(file).display());
        let pool = sqlx::SqlitePool::connect(&url)
            .await
            .expect("open the catalogue");
        let rows = sqlx::query_as(sqlx::AssertSqlSafe(sql))
            .fetch_all(&pool)
            .await
            .expect("catalogue query");
        pool.close().await;
        rows
    } else {
        let pool = sqlx::PgPool::connect(store_url)
            .await
            .expect("open the catalogue");
        let rows = sqlx::query_as(sqlx::AssertSqlSafe(sql))
            .fetch_all(&pool)
            .await
            .expect("catalogue query");
        pool.close().await;
        rows
    }
}

/// Run one statement that changes the catalogue of a data directory (a test moving time, say,
/// while no worker runs); returns the rows it changed.
pub async fn catalogue_exec(data_dir: &Path, store_url: &str, sql: &str) -> u64 {
    if let Some(file) = store_url.strip_prefix("sqlite:") {
        let url = format!("sqlite:{}", data_dir.join(file).display());
        let pool = sqlx::SqlitePool::connect(&url)
            .await
            .expect("open the catalogue");
        let done = sqlx::query(sqlx::AssertSqlSafe(sql))
            .execute(&pool)
            .await
            .expect("catalogue statement");
        pool.close().await;
        done.rows_affected()
    } else {
        let pool = sqlx::PgPool::connect(store_url)
            .await
            .expect("open the catalogue");
        let done = sqlx::query(sqlx::AssertSqlSafe(sql))
            .execute(&pool)
            .await
            .expect("catalogue statement");
        pool.close().await;
        done.rows_affected()
    }
}

/// Objects with more than one copy that counts (in a durable or verified container), with
/// their count, and the number of containers left durable (never verified).
pub async fn extra_copies(data_dir: &Path, store_url: &str) -> (Vec<(String, i64)>, i64) {
    let extra = catalogue_rows(
        data_dir,
        store_url,
        "SELECT o.key, COUNT(*) FROM objects o JOIN copies c ON c.object_id = o.id \
         JOIN containers k ON k.id = c.container_id \
         WHERE k.state IN ('durable', 'verified') GROUP BY o.key HAVING COUNT(*) > 1 ORDER BY o.key",
    )
    .await;
    let durable = containers_in(data_dir, store_url, "durable").await;
    (extra, durable)
}

/// How many containers are in `state` (`pending`: being written; `durable`: written and,
/// under FULL verify, being read back).
pub async fn containers_in(data_dir: &Path, store_url: &str, state: &str) -> i64 {
    assert!(state.chars().all(|c| c.is_ascii_lowercase()), "{state}");
    let sql =
        format!("SELECT state, COUNT(*) FROM containers WHERE state = '{state}' GROUP BY state");
    catalogue_rows(data_dir, store_url, &sql)
        .await
        .first()
        .map_or(0, |r| r.1)
}

/// A `reel worker` child process, killed (SIGKILL) on drop unless stopped.
pub struct Worker {
    /// The child.
    pub child: std::process::Child,
}

impl Worker {
    /// Start `reel --data-dir DIR worker`, logging to `DIR/worker-N.log`.
    pub fn start(data_dir: &Path, n: u32) -> Worker {
        let log = std::fs::File::create(data_dir.join(format!("worker-{n}.log"))).expect("log");
        let child = std::process::Command::new(binary_path("reel"))
            .arg("--data-dir")
            .arg(data_dir)
            .arg("worker")
            .env("REEL_LOG", "info")
            .stdout(log.try_clone().expect("log"))
            .stderr(log)
            .spawn()
            .expect("spawn reel worker");
        // Ready once it says so (its signal handlers are installed by then).
        let path = data_dir.join(format!("worker-{n}.log"));
        let t0 = std::time::Instant::now();
        while t0.elapsed() < std::time::Duration::from_secs(60) {
            if std::fs::read_to_string(&path).is_ok_and(|l| l.contains(": running")) {
                break;
            }
            std::thread::sleep(std::time::Duration::from_millis(20));
        }
        Worker { child }
    }

    /// SIGTERM, then wait; returns the exit code.
    pub fn stop(mut self) -> i32 {
        let code = terminate(&mut self.child);
        std::mem::forget(self);
        code
    }

    /// Send a signal by name (`STOP`, `CONT`, `TERM`) and return at once.
    pub fn signal(&self, name: &str) {
        let ok = std::process::Command::new("kill")
            .arg(format!("-{name}"))
            .arg(self.child.id().to_string())
            .status()
            .is_ok_and(|s| s.success());
        assert!(ok, "kill -{name} {} failed", self.child.id());
    }

    /// SIGKILL at once (a crash).
    pub fn kill(mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
        std::mem::forget(self);
    }
}

impl Drop for Worker {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// Rewrite the `reel.toml` of `data_dir` (as [`write_config`] wrote it) to name its plugin
/// `name`, looked up in `plugin_dir`, instead of giving the simulator's path.
pub fn name_the_plugin(data_dir: &Path, name: &str, plugin_dir: &Path) {
    let cfg = data_dir.join("reel.toml");
    let text = std::fs::read_to_string(&cfg).expect("read reel.toml");
    let path_line = format!("plugin = \"{}\"", plugin_path("reel_plugin_sim").display());
    assert!(text.contains(&path_line), "{text}");
    let text = text.replace(
        &path_line,
        &format!(
            "plugin = \"{name}\"\nplugin_dir = \"{}\"",
            plugin_dir.display()
        ),
    );
    std::fs::write(&cfg, text).expect("write reel.toml");
}

/// The workspace's root directory (the parent of `tests/`).
pub fn workspace_dir() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .parent()
        .expect("tests/ is inside the workspace")
        .to_path_buf()
}

/// Run `cmd` to completion and fail the test, with `what` and its stderr, unless it succeeds;
/// returns its stdout.
pub fn run_ok(cmd: &mut std::process::Command, what: &str) -> Vec<u8> {
    let out = cmd
        .output()
        .unwrap_or_else(|e| panic!("{what}: cannot run it: {e}"));
    assert!(
        out.status.success(),
        "{what} failed ({}):\n{}",
        out.status,
        String::from_utf8_lossy(&out.stderr)
    );
    out.stdout
}
