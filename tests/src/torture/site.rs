//! The library under torture: one simulated library shared by every worker process
//! (`sim.shared=true`, worker `i` owns drive `i`), one store (a SQLite file every host opens, or
//! a PostgreSQL database of its own), a data directory per host, and the `reel` processes.

use std::path::{Path, PathBuf};
use std::process::Stdio;
use std::time::Duration;

use crate::{PgDatabase, binary_path, plugin_path};

/// Which database the run uses.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Db {
    /// One SQLite catalogue and one queue file, shared by every host.
    Sqlite,
    /// A PostgreSQL database of its own.
    Postgres,
}

/// One drive host: its data directory and, while it runs, its `reel worker`.
pub struct Host {
    /// The data directory (`reel.toml`, logs).
    pub dir: PathBuf,
    /// The worker, while one runs.
    pub worker: Option<tokio::process::Child>,
    /// How many times a worker was started here.
    pub starts: u32,
    /// Frozen by SIGSTOP.
    pub frozen: bool,
}

/// Every directory and process of a run.
pub struct Site {
    /// The run's directory.
    pub root: PathBuf,
    /// The shared simulated library.
    pub lib: PathBuf,
    /// The store URL every host uses.
    pub store_url: String,
    /// The PostgreSQL database, dropped at the end.
    pub pg: Option<PgDatabase>,
    /// The hosts, worker `i` on drive `i`.
    pub hosts: Vec<Host>,
    /// Cartridges in the library.
    pub cartridges: u32,
    /// Where recalls write (`<root>/dst`): a tmpfs of its own when the runner could mount one
    /// (as root), so the chaos can fill it; None otherwise.
    pub dst_mount: Option<PathBuf>,
    /// Every worker process killed: (pid, Unix ms).
    pub killed: Vec<(u64, u64)>,
    /// `reel serve`, in host 0's data directory, while it runs.
    pub serve: Option<tokio::process::Child>,
    /// Where it listens, and an admin token for it.
    pub serve_at: Option<(String, String)>,
    /// Its upload spool (`<host-0>/spool`), a tmpfs of its own when the runner is root (so the
    /// chaos can fill it); None otherwise.
    pub spool_mount: Option<PathBuf>,
}

/// The size of `reel serve`'s upload spool's file system.
const SPOOL_BYTES: u64 = 96 << 20;

/// The size of the recall destinations' file system.
const DST_BYTES: u64 = 512 << 20;

/// Mount a tmpfs of `bytes` on `dir` (root only); false if that cannot be done.
fn mount_tmpfs(dir: &Path, bytes: u64) -> bool {
    let root = std::process::Command::new("id")
        .arg("-u")
        .output()
        .is_ok_and(|o| String::from_utf8_lossy(&o.stdout).trim() == "0");
    root && std::process::Command::new("mount")
        .args([
            "-t",
            "tmpfs",
            "-o",
            &format!("size={bytes}"),
            "reel-torture",
        ])
        .arg(dir)
        .status()
        .is_ok_and(|s| s.success())
}

impl Drop for Site {
    fn drop(&mut self) {
        for d in [&self.dst_mount, &self.spool_mount].into_iter().flatten() {
            let _ = std::process::Command::new("umount")
                .arg("-l")
                .arg(d)
                .status();
        }
    }
}

/// The simulator's configuration string, identical for every process (TOML-escaped).
pub fn sim_config(lib: &Path, drives: u32, cartridges: u32) -> String {
    format!(
        "dir={}\\nsim.clock=instant\\nsim.calibrated=true\\nsim.drives={drives}\\n\
         sim.cartridges={cartridges}\\nsim.slots={}\\nsim.shared=true\\n\
         sim.capacity_bytes={}\\nsim.worm_cartridges={WORM_CARTRIDGES}",
        lib.display(),
        cartridges + 8,
        CARTRIDGE_BYTES,
    )
}

/// The last cartridges of the library are WORM: the two left new (taken in by the clients'
/// intakes, then written) and the two foreign ones.
pub const WORM_CARTRIDGES: u32 = 4;

/// Each cartridge's capacity: small, so cartridges fill, reach early warning and change.
pub const CARTRIDGE_BYTES: u64 = 256 << 20;

impl Site {
    /// Lay out a run in `root` for `workers` hosts on `db`.
    pub async fn create(root: &Path, workers: u32, db: Db, cartridges: u32) -> Site {
        let lib = root.join("library");
        std::fs::create_dir_all(&lib).expect("library dir");
        let (store_url, jobs_url, pg) = match db {
            Db::Sqlite => {
                let s = root.join("store");
                std::fs::create_dir_all(&s).expect("store dir");
                (
                    format!("sqlite:{}", s.join("reel.db").display()),
                    format!("sqlite:{}", s.join("jobs.db").display()),
                    None,
                )
            }
            Db::Postgres => {
                let base = crate::postgres_url("reel-torture").unwrap_or_else(|| {
                    panic!("--db postgres needs REEL_TEST_POSTGRES_URL (e.g. postgres://postgres@127.0.0.1:5432/test)")
                });
                let d = PgDatabase::create(&base).await;
                (d.url.clone(), "sqlite:jobs.db".into(), Some(d))
            }
        };
        let cartridges = cartridges.max(8);
        let hosts = (0..workers)
            .map(|i| {
                let dir = root.join(format!("host-{i}"));
                write_host_config(&dir, &store_url, &jobs_url, &lib, workers, cartridges, i);
                Host {
                    dir,
                    worker: None,
                    starts: 0,
                    frozen: false,
                }
            })
            .collect();
        let dst = root.join("dst");
        std::fs::create_dir_all(&dst).expect("destination dir");
        let dst_mount = mount_tmpfs(&dst, DST_BYTES).then_some(dst);
        Site {
            root: root.to_path_buf(),
            lib,
            store_url,
            pg,
            hosts,
            cartridges,
            dst_mount,
            killed: Vec::new(),
            serve: None,
            serve_at: None,
            spool_mount: None,
        }
    }

    /// Start `reel serve` on loopback in host 0's data directory (the same host as worker 0,
    /// as a deployment would run them), its spool on a tmpfs of its own when the runner is
    /// root, with an admin token; waits until it says where it listens.
    pub async fn start_serve(&mut self) -> Result<(), String> {
        let dir = self.hosts[0].dir.clone();
        let spool = dir.join("spool");
        std::fs::create_dir_all(&spool).map_err(|e| format!("spool: {e}"))?;
        if mount_tmpfs(&spool, SPOOL_BYTES) {
            self.spool_mount = Some(spool);
        }
        // Its root for sources and destinations (uploads need none): the run's sources.
        let root = self.root.join("src");
        std::fs::create_dir_all(&root).map_err(|e| format!("{}: {e}", root.display()))?;
        let root = root.to_string_lossy().into_owned();
        let (code, v, err) = reel_at(
            &dir,
            &[
                "token",
                "create",
                "--name",
                "torture",
                "--scope",
                "admin",
                "--root",
                &root,
                "--key-prefix",
                "up/",
            ],
        )
        .await;
        let token = v["token"]
            .as_str()
            .filter(|_| code == 0)
            .ok_or_else(|| format!("token create: {v} {err}"))?
            .to_string();
        let log_path = dir.join("serve.log");
        let log = std::fs::File::create(&log_path).map_err(|e| format!("serve log: {e}"))?;
        let log2 = log.try_clone().map_err(|e| format!("serve log: {e}"))?;
        let mut child = tokio::process::Command::new(binary_path("reel"))
            .arg("--data-dir")
            .arg(&dir)
            .args(["serve", "--listen", "127.0.0.1:0"])
            .env("REEL_LOG", "info")
            .stdin(Stdio::null())
            .stdout(log2)
            .stderr(log)
            .kill_on_drop(true)
            .spawn()
            .map_err(|e| format!("spawn reel serve: {e}"))?;
        let t0 = std::time::Instant::now();
        while t0.elapsed() < Duration::from_secs(60) {
            let text = std::fs::read_to_string(&log_path).unwrap_or_default();
            // Only a whole line (the log may be read while the line is half written).
            if let Some(rest) = text.split("listening on http://").nth(1)
                && rest.contains('\n')
            {
                let addr = rest
                    .split_whitespace()
                    .next()
                    .unwrap_or_default()
                    .to_string();
                self.serve = Some(child);
                self.serve_at = Some((addr, token));
                return Ok(());
            }
            if let Ok(Some(status)) = child.try_wait() {
                return Err(format!("reel serve exited with {status}: {text}"));
            }
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
        Err("reel serve did not say where it listens within 60 s".into())
    }

    /// The data directory clients submit through (any host's would do: they share the store).
    pub fn client_dir(&self, n: u32) -> &Path {
        &self.hosts[n as usize % self.hosts.len()].dir
    }

    /// Start host `i`'s worker (logging to `worker.log` in its data directory, appended).
    pub fn start(&mut self, i: u32) {
        let h = &mut self.hosts[i as usize];
        let log = std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(h.dir.join("worker.log"))
            .expect("worker log");
        let child = tokio::process::Command::new(binary_path("reel"))
            .arg("--data-dir")
            .arg(&h.dir)
            .arg("worker")
            .env("REEL_LOG", "info")
            .stdin(Stdio::null())
            .stdout(log.try_clone().expect("log"))
            .stderr(log)
            .kill_on_drop(true)
            .spawn()
            .expect("spawn reel worker");
        h.worker = Some(child);
        h.starts += 1;
        h.frozen = false;
    }

    /// `kill -9` host `i`'s worker and reap it.
    pub async fn kill(&mut self, i: u32) {
        let h = &mut self.hosts[i as usize];
        let mut killed = None;
        if let Some(mut c) = h.worker.take() {
            if h.frozen {
                signal(&c, "CONT");
            }
            let now = std::time::SystemTime::now()
                .duration_since(std::time::UNIX_EPOCH)
                .map(|d| d.as_millis() as u64)
                .unwrap_or(0);
            killed = c.id().map(|pid| (u64::from(pid), now));
            let _ = c.start_kill();
            let _ = c.wait().await;
        }
        h.frozen = false;
        self.killed.extend(killed);
    }

    /// SIGSTOP or SIGCONT host `i`'s worker.
    pub fn freeze(&mut self, i: u32, frozen: bool) {
        let h = &mut self.hosts[i as usize];
        if let Some(c) = &h.worker {
            signal(c, if frozen { "STOP" } else { "CONT" });
            h.frozen = frozen;
        }
    }

    /// Whether host `i`'s worker exited by itself (it should not); its exit status if so.
    pub fn exited(&mut self, i: u32) -> Option<std::process::ExitStatus> {
        self.hosts[i as usize]
            .worker
            .as_mut()
            .and_then(|c| c.try_wait().ok().flatten())
    }

    /// SIGTERM every worker and wait (a frozen one is woken first).
    pub async fn stop_all(&mut self) {
        if let Some(mut c) = self.serve.take() {
            signal(&c, "TERM");
            if tokio::time::timeout(Duration::from_secs(60), c.wait())
                .await
                .is_err()
            {
                let _ = c.start_kill();
                let _ = c.wait().await;
            }
        }
        for i in 0..self.hosts.len() as u32 {
            self.freeze(i, false);
            if let Some(mut c) = self.hosts[i as usize].worker.take() {
                signal(&c, "TERM");
                if tokio::time::timeout(Duration::from_secs(400), c.wait())
                    .await
                    .is_err()
                {
                    let _ = c.start_kill();
                    let _ = c.wait().await;
                }
            }
        }
    }

    /// Post a `control` request into drive `d`'s mailbox (its owner runs it at the drive's
    /// next command or inventory).
    pub fn post(&self, d: u32, seq: u64, request: &str) {
        let mb = self.lib.join("mailbox");
        let dir = mb.join(format!("drive-{d}"));
        std::fs::create_dir_all(&dir).expect("mailbox");
        let tmp = mb.join(format!(".{seq:08}.tmp"));
        std::fs::write(&tmp, request).expect("mailbox request");
        std::fs::rename(&tmp, dir.join(format!("{seq:08}.json"))).expect("mailbox rename");
    }

    /// The requests the drives' owners ran or refused, in order.
    pub fn delivered(&self) -> Vec<serde_json::Value> {
        std::fs::read_to_string(self.lib.join("mailbox").join("delivered.jsonl"))
            .unwrap_or_default()
            .lines()
            .filter_map(|l| serde_json::from_str(l).ok())
            .collect()
    }

    /// How to open a handle on the shared library that owns no drive.
    pub fn observer(&self) -> Observer {
        Observer {
            config: sim_config(&self.lib, self.hosts.len() as u32, self.cartridges)
                .replace("\\n", "\n"),
        }
    }

    /// Run `reel --data-dir DIR --json ARGS` for client `n`: (exit code, JSON, stderr).
    pub async fn reel(&self, n: u32, args: &[&str]) -> (i32, serde_json::Value, String) {
        reel_at(self.client_dir(n), args).await
    }
}

/// Opens handles on the shared library that own no drive (so they disturb no worker). Opening
/// one takes the changer's file lock, which a frozen worker may hold for seconds: it runs on a
/// blocking thread, and no caller holds the site's lock meanwhile (the thaw needs it).
#[derive(Clone)]
pub struct Observer {
    config: String,
}

impl Observer {
    /// A handle.
    pub async fn open(&self) -> reel_engine::device::Library {
        let config = self.config.clone();
        tokio::task::spawn_blocking(move || {
            let plugin = reel_engine::device::load_plugin(&plugin_path("reel_plugin_sim"))
                .expect("load the simulator");
            reel_engine::device::Library::open(plugin, &config).expect("open the shared library")
        })
        .await
        .expect("open the observer")
    }

    /// The library's whole history (`counters`' `library` part): violations, relabels,
    /// robot moves, modelled busy time.
    pub async fn library_counters(&self) -> serde_json::Value {
        let reply = self
            .open()
            .await
            .control(r#"{"op":"counters"}"#)
            .await
            .expect("library counters");
        let v: serde_json::Value = serde_json::from_str(&reply).expect("counters JSON");
        v["library"].clone()
    }
}

/// Run `reel --data-dir DIR --json ARGS`: (exit code, JSON stdout, stderr).
pub async fn reel_at(dir: &Path, args: &[&str]) -> (i32, serde_json::Value, String) {
    let out = tokio::process::Command::new(binary_path("reel"))
        .arg("--data-dir")
        .arg(dir)
        .arg("--json")
        .args(args)
        .stdin(Stdio::null())
        .output()
        .await
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

fn signal(c: &tokio::process::Child, name: &str) {
    if let Some(pid) = c.id() {
        let _ = std::process::Command::new("kill")
            .arg(format!("-{name}"))
            .arg(pid.to_string())
            .status();
    }
}

/// A host's `reel.toml`: the tests' usual configuration ([`crate::write_plugin_config`]: storage
/// classes `default` (p1) and `two` (p1, p2), fast polling, 4 s leases) on the shared store and
/// library, drive `drive` only, with small containers and group commits.
fn write_host_config(
    dir: &Path,
    store_url: &str,
    jobs_url: &str,
    lib: &Path,
    drives: u32,
    cartridges: u32,
    drive: u32,
) {
    let cfg = crate::write_plugin_config(
        dir,
        store_url,
        &plugin_path("reel_plugin_sim"),
        &sim_config(lib, drives, cartridges),
        "",
    );
    let mut text = std::fs::read_to_string(&cfg).expect("read reel.toml");
    for (from, to) in [
        (
            "jobs_url = \"sqlite:jobs.db\"\n".to_string(),
            format!("jobs_url = \"{jobs_url}\"\n"),
        ),
        (
            "\n[archive]\n".to_string(),
            format!(
                "drives = [\"{drive}\"]\n\n[archive]\nbarrier_bytes = 8388608\n\
                 record_size = 262144\ncontainer_bytes = 4194304\n"
            ),
        ),
        (
            "barrier_seconds = 5\n".to_string(),
            "barrier_seconds = 2\n".to_string(),
        ),
    ] {
        assert!(text.contains(&from), "reel.toml lacks {from:?}");
        text = text.replacen(&from, &to, 1);
    }
    std::fs::write(&cfg, text).expect("write reel.toml");
}
