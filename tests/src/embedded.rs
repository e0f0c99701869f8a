//! A worker in the test's own process ([`EmbeddedWorker`]: the start-up and runtime `reel
//! worker` runs), for tests that hold the library beside it: to arm a simulator fault while a
//! job runs, read the simulator's counters, or stop and start the worker between jobs.

use std::path::Path;
use std::time::Duration;

use reel_queue::JobRecord;
use reel_queue::config::{Config, LoadedConfig};
use reel_worker::embedded::EmbeddedWorker;

/// The configuration of a host whose data directory is `dir` (see
/// [`crate::write_plugin_config`]): the simulator with `plugin_config`, the store at
/// `store_url`, and `archive` (TOML lines, may be empty) added to its `[archive]` section.
pub fn worker_config(dir: &Path, store_url: &str, plugin_config: &str, archive: &str) -> Config {
    let cfg = crate::write_plugin_config(
        dir,
        store_url,
        &crate::plugin_path("reel_plugin_sim"),
        plugin_config,
        "",
    );
    let text = std::fs::read_to_string(&cfg)
        .unwrap()
        .replace("[archive]\n", &format!("[archive]\n{archive}"));
    std::fs::write(&cfg, text).unwrap();
    LoadedConfig::load(Some(&cfg), Some(dir)).unwrap().config
}

/// Start a worker for `config`; a library directory a stopped worker just closed may still
/// be releasing its lock for a moment.
pub async fn start_worker(config: &Config) -> EmbeddedWorker {
    let mut last = None;
    for _ in 0..50 {
        match EmbeddedWorker::start(config).await {
            Ok(w) => return w,
            Err(e) => {
                last = Some(e.to_string());
                tokio::time::sleep(Duration::from_millis(100)).await;
            }
        }
    }
    panic!("cannot start the worker: {last:?}");
}

/// Wait for job `id` to end; panics (with the job) if it does not within `bound`, a liveness
/// bound, not a timing claim.
pub async fn job_ended(w: &EmbeddedWorker, id: &str, bound: Duration) -> JobRecord {
    match w.wait(id, bound).await.unwrap() {
        Some(r) => r,
        None => panic!(
            "job {id} did not end within {bound:?}: {:?}",
            w.queue().store().require(id).await.unwrap()
        ),
    }
}

/// The simulator's counters, as the worker's library handle counted them.
pub async fn sim_counters(w: &EmbeddedWorker) -> serde_json::Value {
    let c = w
        .service()
        .library()
        .control(r#"{"op":"counters"}"#)
        .await
        .unwrap();
    serde_json::from_str(&c).unwrap()
}
