//! What `reel worker` tells Prometheus about its drives (`[worker] metrics_listen`), all named
//! here: drive state, mounts and their duration, bytes moved, and the end-of-session summary
//! of each mount (CTA's per-mount report: how long the cartridge was held, how much of that was
//! mounting, working, idle and unloading, the drive's own positioning, transfer and flush time,
//! and what was moved). Wall-clock times are MEASURED; the drive's own times are what the
//! plugin reports (modelled, so SIMULATED, on the simulator). Device check conditions by sense
//! key are counted by the engine (`reel_device_sense_total`).

use std::time::Duration;

/// The states a drive loop reports in `reel_drive_state` (one of them is 1).
pub const STATES: [&str; 7] = [
    "empty", "mounting", "reading", "writing", "idle", "failed", "down",
];

/// Describe the metrics (once, when the exporter is installed).
pub fn describe() {
    metrics::describe_gauge!(
        "reel_drive_state",
        "1 for the state the drive is in (empty, mounting, reading, writing, idle, failed)"
    );
    metrics::describe_counter!("reel_drive_mounts_total", "Cartridges mounted, per drive");
    metrics::describe_histogram!(
        "reel_drive_mount_duration_seconds",
        metrics::Unit::Seconds,
        "Time to bring a cartridge into a drive and load it, per drive (MEASURED)"
    );
    metrics::describe_histogram!(
        "reel_drive_unmount_duration_seconds",
        metrics::Unit::Seconds,
        "Time to unload a cartridge and put it back, per drive (MEASURED)"
    );
    metrics::describe_counter!(
        "reel_drive_bytes_total",
        metrics::Unit::Bytes,
        "Bytes of requests finished, per drive and mode (read, write)"
    );
    metrics::describe_counter!(
        "reel_drive_files_total",
        "Requests (objects, containers, labels) finished, per drive and mode"
    );
    metrics::describe_histogram!(
        "reel_mount_session_seconds",
        metrics::Unit::Seconds,
        "Time a cartridge stayed mounted, per drive and part (mount, work, idle, unload)"
    );
    metrics::describe_histogram!(
        "reel_mount_session_drive_seconds",
        metrics::Unit::Seconds,
        "The drive's own time per mount, as the plugin reports it (SIMULATED on the simulator), by part (position, transfer, flush)"
    );
    metrics::describe_counter!(
        "reel_device_sense_total",
        "Check conditions reported by drives and changers, by sense key and call"
    );
}

/// The drive is now in `state` (one of [`STATES`]).
pub fn state(drive: &str, state: &str) {
    for s in STATES {
        metrics::gauge!("reel_drive_state", "drive" => drive.to_string(), "state" => s)
            .set(if s == state { 1.0 } else { 0.0 });
    }
}

/// A cartridge was mounted in `took`.
pub fn mounted(drive: &str, took: Duration) {
    metrics::counter!("reel_drive_mounts_total", "drive" => drive.to_string()).increment(1);
    metrics::histogram!("reel_drive_mount_duration_seconds", "drive" => drive.to_string())
        .record(took.as_secs_f64());
}

/// A batch finished `files` requests of `bytes` in `mode` (`read`, `write`).
pub fn moved(drive: &str, mode: &'static str, files: u64, bytes: u64) {
    metrics::counter!("reel_drive_bytes_total", "drive" => drive.to_string(), "mode" => mode)
        .increment(bytes);
    metrics::counter!("reel_drive_files_total", "drive" => drive.to_string(), "mode" => mode)
        .increment(files);
}

/// What one mount did, from load to unload.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct MountSession {
    /// Time to mount.
    pub mount: Duration,
    /// Time in batches (positioning, transfer and flushes together).
    pub work: Duration,
    /// Batches run.
    pub batches: u64,
    /// Requests finished.
    pub files: u64,
    /// Their bytes.
    pub bytes: u64,
    /// The drive's own time in the batches (positioning, transfer, flushes), as the plugin
    /// reports each command's elapsed time: modelled (SIMULATED) on the simulator.
    pub drive: reel_engine::session::SessionSummary,
}

/// A mount ended: the summary goes to the log (one line, info) and to the metrics. `held` is
/// how long the cartridge stayed, `unload` the unload's time (zero when the drive failed with
/// the cartridge in it), `how` why it ended.
pub fn session_ended(
    drive: &str,
    barcode: &str,
    mode: &str,
    s: &MountSession,
    held: Duration,
    unload: Duration,
    how: &str,
) {
    let idle = held.saturating_sub(s.mount + s.work);
    let secs = |d: Duration| (d.as_secs_f64() * 1000.0).round() / 1000.0;
    tracing::info!(
        drive,
        barcode,
        mode,
        ended = how,
        held_s = secs(held),
        mount_s = secs(s.mount),
        work_s = secs(s.work),
        idle_s = secs(idle),
        unload_s = secs(unload),
        drive_position_s = s.drive.position_s,
        drive_transfer_s = s.drive.transfer_s,
        drive_flush_s = s.drive.flush_s,
        locates = s.drive.locates,
        batches = s.batches,
        files = s.files,
        bytes = s.bytes,
        mb_per_s = if s.work.is_zero() {
            0.0
        } else {
            (s.bytes as f64 / 1e6 / s.work.as_secs_f64() * 10.0).round() / 10.0
        },
        "mount session summary"
    );
    for (part, d) in [
        ("mount", s.mount),
        ("work", s.work),
        ("idle", idle),
        ("unload", unload),
    ] {
        metrics::histogram!("reel_mount_session_seconds", "drive" => drive.to_string(), "part" => part)
            .record(d.as_secs_f64());
    }
    for (part, secs) in [
        ("position", s.drive.position_s),
        ("transfer", s.drive.transfer_s),
        ("flush", s.drive.flush_s),
    ] {
        metrics::histogram!("reel_mount_session_drive_seconds", "drive" => drive.to_string(), "part" => part)
            .record(secs);
    }
    if !unload.is_zero() {
        metrics::histogram!("reel_drive_unmount_duration_seconds", "drive" => drive.to_string())
            .record(unload.as_secs_f64());
    }
}

/// Serve this process's metrics at `GET /metrics` on `listen` until `stop`: installs the
/// process-wide recorder the engine and the drive loops report to.
pub async fn serve(
    listen: &str,
    stop: tokio_util::sync::CancellationToken,
) -> reel_queue::error::Result<()> {
    let handle = metrics_exporter_prometheus::PrometheusBuilder::new()
        .install_recorder()
        .map_err(|e| reel_queue::error::JobsError::Config {
            origin: "[worker] metrics_listen".into(),
            message: format!("cannot install the metrics recorder: {e}"),
        })?;
    describe();
    let listener = tokio::net::TcpListener::bind(listen).await.map_err(|e| {
        reel_queue::error::JobsError::Config {
            origin: "[worker] metrics_listen".into(),
            message: format!("cannot listen on {listen}: {e}; pick a free port"),
        }
    })?;
    let app = axum::Router::new().route(
        "/metrics",
        axum::routing::get(move || {
            let h = handle.clone();
            async move { h.render() }
        }),
    );
    tracing::info!(%listen, "worker metrics listening");
    tokio::spawn(async move {
        let _ = axum::serve(listener, app)
            .with_graceful_shutdown(stop.cancelled_owned())
            .await;
    });
    Ok(())
}
