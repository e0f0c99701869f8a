//! `reel demo`: reel's main job on the embedded default. A data directory with SQLite and the
//! simulated library (INSTANT clock: the drives' time is modelled, not slept), a worker, an
//! archive of a sample tree to two copies, a recall of all of it, a byte-for-byte comparison, a
//! verify of every container, and a summary with the figures: wall clock (MEASURED) and the
//! drives' modelled time (SIMULATED).

use std::io::Read;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use rand::{RngCore, SeedableRng};
use serde_json::{Value, json};
use sha2::{Digest, Sha256};

use reel_engine::device::{DEFAULT_PLUGIN_DIR, find_plugin, plugin_dirs, plugin_file_name};
use reel_queue::config::LoadedConfig;
use reel_queue::error::{JobsError, Result};
use reel_queue::job::{
    ArchiveJob, ArchiveSource, JobSpec, JobState, RecallJob, RecallSelection, VerifyJob,
    VerifyTarget,
};
use reel_queue::{JobQueue, JobRecord};
use reel_worker::embedded::EmbeddedWorker;

fn io<'a>(doing: &'static str, path: &'a Path) -> impl FnOnce(std::io::Error) -> JobsError + 'a {
    move |source| JobsError::Io {
        doing,
        path: path.to_path_buf(),
        source,
    }
}

/// Where the simulator plugin is: next to the `reel` binary first (a cargo build puts it
/// there, the same build as the binary), then where the packages install plugins
/// ([`DEFAULT_PLUGIN_DIR`], package reel-plugin-sim).
pub fn sim_plugin_path() -> Result<PathBuf> {
    let exe = std::env::current_exe().map_err(io("locating", Path::new("the reel binary")))?;
    let dir = exe.parent().map(Path::to_path_buf).unwrap_or_default();
    let mut dirs = vec![dir.clone(), dir.join("deps")];
    dirs.extend(plugin_dirs(DEFAULT_PLUGIN_DIR));
    find_plugin("sim", &dirs).map_err(|_| JobsError::NotFound {
        what: format!(
            "the simulator plugin {} is neither next to {} nor in {DEFAULT_PLUGIN_DIR}",
            plugin_file_name("sim"),
            exe.display()
        ),
        hint:
            "install the package reel-plugin-sim, or build the workspace (`cargo build --release`)"
                .into(),
    })
}

/// Write `DIR/reel.toml` for the demo unless one is there.
fn demo_config(dir: &Path) -> Result<PathBuf> {
    let cfg = dir.join("reel.toml");
    if cfg.exists() {
        return Ok(cfg);
    }
    let plugin = sim_plugin_path()?;
    let lib = dir.join("library");
    let text = format!(
        r#"# Written by `reel demo`: SQLite and the simulated library in this directory.
[store]
url = "sqlite:reel.db"
jobs_url = "sqlite:jobs.db"

[library]
plugin = "{plugin}"
# INSTANT clock: drive time is modelled (SIMULATED), not slept.
plugin_config = "dir={lib}\nsim.clock=instant\nsim.calibrated=true\nsim.cartridges=8"

[archive]
verify = "full"
default_class = "demo"
barrier_seconds = 60

[archive.storage_classes]
demo = ["demo-a", "demo-b"]

[worker]
poll_interval_ms = 100
heartbeat_ms = 1000

# A demo has no queue to build up: mount for any request at once.
[scheduler]
min_bytes = 1
min_files = 1
max_age_seconds = 0
min_mount_seconds = 0
"#,
        plugin = plugin.display(),
        lib = lib.display()
    );
    std::fs::write(&cfg, text).map_err(io("writing", &cfg))?;
    Ok(cfg)
}

/// A deterministic sample tree: many small files and a few large ones.
fn sample_tree(dir: &Path) -> Result<(u64, u64)> {
    let root = dir.join("sample");
    let mut rng = rand::rngs::StdRng::seed_from_u64(2026);
    let mut files = 0u64;
    let mut bytes = 0u64;
    let mut buf = vec![0u8; 1 << 20];
    for i in 0..240u64 {
        let size: u64 = match i % 40 {
            0 => 24 << 20,
            1 => 6 << 20,
            _ => rng.next_u64() % (192 << 10),
        };
        let p = root.join(format!("set-{:02}/file-{i:04}.bin", i % 12));
        files += 1;
        bytes += size;
        if p.exists() {
            continue;
        }
        if let Some(parent) = p.parent() {
            std::fs::create_dir_all(parent).map_err(io("creating", parent))?;
        }
        let mut f = std::fs::File::create(&p).map_err(io("creating", &p))?;
        let mut left = size;
        while left > 0 {
            let n = left.min(buf.len() as u64) as usize;
            rng.fill_bytes(&mut buf[..n]);
            std::io::Write::write_all(&mut f, &buf[..n]).map_err(io("writing", &p))?;
            left -= n as u64;
        }
    }
    Ok((files, bytes))
}

fn sha256_file(p: &Path) -> Result<[u8; 32]> {
    let mut f = std::fs::File::open(p).map_err(io("reading", p))?;
    let mut h = Sha256::new();
    let mut buf = vec![0u8; 1 << 20];
    loop {
        let n = f.read(&mut buf).map_err(io("reading", p))?;
        if n == 0 {
            break;
        }
        h.update(&buf[..n]);
    }
    Ok(h.finalize().into())
}

fn walk(dir: &Path, out: &mut Vec<PathBuf>) -> Result<()> {
    for e in std::fs::read_dir(dir).map_err(io("listing", dir))? {
        let e = e.map_err(io("listing", dir))?;
        let p = e.path();
        if p.is_dir() {
            walk(&p, out)?;
        } else {
            out.push(p);
        }
    }
    Ok(())
}

async fn wait_done(queue: &JobQueue, id: &str, what: &str) -> Result<JobRecord> {
    let bar = indicatif::ProgressBar::new(0);
    bar.set_style(
        indicatif::ProgressStyle::with_template("{prefix:>8} {bar:30} {pos}/{len} objects {msg}")
            .unwrap_or_else(|_| indicatif::ProgressStyle::default_bar()),
    );
    bar.set_prefix(what.to_string());
    loop {
        let Some((state, p)) = queue.store().status(id).await? else {
            return Err(JobsError::NoSuchJob(id.to_string()));
        };
        bar.set_length(p.objects_total.max(1));
        bar.set_position(p.objects_done);
        bar.set_message(state.to_string());
        if state.is_final() {
            bar.finish();
            let r = queue.store().require(id).await?;
            if r.state != JobState::Done {
                return Err(JobsError::JobEnded {
                    kind: what.to_string(),
                    id: id.to_string(),
                    state: r.state.to_string(),
                    reason: r.error.clone().unwrap_or_default(),
                });
            }
            return Ok(r);
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

/// Run the demo; returns the summary (JSON and text).
pub async fn run(data_dir: Option<&Path>) -> Result<(Value, String)> {
    let dir = data_dir
        .map(Path::to_path_buf)
        .or_else(|| std::env::var_os("REEL_DATA_DIR").map(PathBuf::from))
        .unwrap_or_else(|| PathBuf::from("./reel-demo"));
    std::fs::create_dir_all(&dir).map_err(io("creating", &dir))?;
    let dir = std::path::absolute(&dir).map_err(io("resolving", &dir))?;
    let cfg = demo_config(&dir)?;
    crate::logging::stderr_line(format_args!(
        "reel demo in {} (config {})",
        dir.display(),
        cfg.display()
    ));
    let (files, bytes) = sample_tree(&dir)?;
    let loaded = LoadedConfig::load(Some(&cfg), Some(&dir))?;
    let config = loaded.config.clone();

    // A worker in this process: job handlers and one drive loop per simulated drive.
    let worker = EmbeddedWorker::start(&config).await?;
    let worker_name = worker.name().to_string();
    let queue = worker.queue().clone();

    let t0 = Instant::now();
    let archive = queue
        .submit(
            JobSpec::Archive(ArchiveJob {
                source: ArchiveSource::Tree(dir.join("sample")),
                key_prefix: "sample/".into(),
                storage_class: config.archive.default_class.clone(),
                confine: None,
            }),
            None,
        )
        .await?;
    wait_done(&queue, &archive.id, "archive").await?;
    let archive_s = t0.elapsed().as_secs_f64();

    let restore = dir.join(format!(
        "restore-{}",
        &archive.id[..8.min(archive.id.len())]
    ));
    let t1 = Instant::now();
    let recall = queue
        .submit(
            JobSpec::Recall(RecallJob {
                selection: RecallSelection::Prefix("sample/".into()),
                destination: restore.clone(),
                // A second demo in the same data dir recalls over the first one's files.
                overwrite: reel_engine::session::destination::Overwrite::Always,
                confine: None,
            }),
            None,
        )
        .await?;
    wait_done(&queue, &recall.id, "recall").await?;
    let recall_s = t1.elapsed().as_secs_f64();

    // Every file back, byte for byte.
    let mut originals = Vec::new();
    walk(&dir.join("sample"), &mut originals)?;
    let mut wrong = Vec::new();
    for p in &originals {
        let rel = p.strip_prefix(&dir).unwrap_or(p);
        let back = restore.join(rel);
        if !back.exists() || sha256_file(p)? != sha256_file(&back)? {
            wrong.push(rel.display().to_string());
        }
    }

    let t2 = Instant::now();
    let verify = queue
        .submit(
            JobSpec::Verify(VerifyJob {
                target: VerifyTarget::Sample { every: 1 },
            }),
            None,
        )
        .await?;
    let verified = wait_done(&queue, &verify.id, "verify").await?;
    let verify_s = t2.elapsed().as_secs_f64();

    let counters: Value = worker
        .service()
        .library()
        .control(r#"{"op":"counters"}"#)
        .await
        .ok()
        .and_then(|c| serde_json::from_str(&c).ok())
        .unwrap_or(Value::Null);
    let service = worker.service().clone();
    worker.stop().await?;
    let _ = service.unmount_all().await;

    let mut lines = vec![
        format!(
            "reel demo: {files} files, {:.1} MiB, two copies (pools demo-a, demo-b), verify FULL",
            bytes as f64 / 1048576.0
        ),
        format!(
            "  worker {worker_name}, SQLite catalogue and queue in {}",
            dir.display()
        ),
        format!(
            "  archive  {archive_s:>7.2} s wall (MEASURED), job {}",
            archive.id
        ),
        format!(
            "  recall   {recall_s:>7.2} s wall (MEASURED), job {} -> {}",
            recall.id,
            restore.display()
        ),
        format!(
            "  verify   {verify_s:>7.2} s wall (MEASURED), job {}: {}",
            verify.id,
            verified.result.clone().unwrap_or(Value::Null)
        ),
        format!(
            "  byte-for-byte: {} of {} files identical",
            originals.len() - wrong.len(),
            originals.len()
        ),
    ];
    if let Some(drives) = counters.get("drives").and_then(Value::as_array) {
        lines.push("  drives (SIMULATED, LTO-9-class model):".into());
        for d in drives {
            let g = |k: &str| d.get(k).and_then(Value::as_u64).unwrap_or(0);
            let busy = g("busy_ns") as f64 / 1e9;
            let streaming = g("streaming_ns") as f64 / 1e9;
            let moved = (g("bytes_written") + g("bytes_read")) as f64;
            lines.push(format!(
                "    drive {}: busy {busy:.1} s (mount {:.1}, locate {:.1}, streaming {streaming:.1}); wrote {:.1} MB, read {:.1} MB; {:.0} MB/s while streaming; {} mounts, {} locates, {} backhitches",
                g("drive"),
                g("mount_ns") as f64 / 1e9,
                g("locate_ns") as f64 / 1e9,
                g("bytes_written") as f64 / 1e6,
                g("bytes_read") as f64 / 1e6,
                if streaming > 0.0 { moved / 1e6 / streaming } else { 0.0 },
                g("mounts"),
                g("locates"),
                g("backhitch_underrun") + g("backhitch_sync"),
            ));
        }
        lines.push(format!(
            "  writes anywhere but at end of data: {} (SIMULATED counter)",
            counters
                .get("violations")
                .and_then(Value::as_u64)
                .unwrap_or(0)
        ));
    }
    let summary = json!({
        "data_dir": dir,
        "files": files,
        "bytes": bytes,
        "archive": {"job": archive.id, "wall_s": archive_s, "basis": "MEASURED"},
        "recall": {"job": recall.id, "wall_s": recall_s, "destination": restore, "basis": "MEASURED"},
        "verify": {"job": verify.id, "wall_s": verify_s, "result": verified.result},
        "identical": originals.len() - wrong.len(),
        "wrong": wrong,
        "drives": counters,
    });
    if !summary["wrong"].as_array().is_none_or(|w| w.is_empty()) {
        return Err(JobsError::Differs(summary["wrong"].to_string()));
    }
    Ok((summary, lines.join("\n")))
}
