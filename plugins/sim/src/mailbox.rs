//! Shared mode: requests for a drive another process owns, delivered through the library
//! directory.
//!
//! A drive's faults, `robot_recover` and a process's power cut live in the process that owns
//! the drive (docs/SIMULATOR.md §7), so a test harness, a chaos driver, or an operator's script
//! outside that process cannot send them through its own handle. Instead it writes the
//! `control` request as a JSON file into `<dir>/mailbox/drive-N/` (write elsewhere, then
//! rename in, so the owner never reads half a request). The owner takes the requests in name
//! order at the drive's next command and at every inventory, runs each as its own `control`
//! call, and appends what happened to `<dir>/mailbox/delivered.jsonl` (`drive`, `pid`,
//! `request`, `ok`, and `reply` or `error`), so the sender can tell a request that ran from one
//! that was refused. A process that owns no drive never reads a mailbox.

use std::io::Write;
use std::path::PathBuf;

use crate::shared::Shared;

/// The directory of drive `index`'s mailbox under the library directory.
pub fn drive_dir(shared: &Shared, index: u32) -> PathBuf {
    shared
        .cfg
        .dir
        .join("mailbox")
        .join(format!("drive-{index}"))
}

/// Take and run the requests waiting for drive `index`, if this handle owns it (shared mode).
/// Must be called with no drive or changer lock held: a request takes the locks it needs.
pub fn deliver(shared: &Shared, index: u32) {
    if !shared.cfg.shared || !shared.owns(index) {
        return;
    }
    let dir = drive_dir(shared, index);
    let mut names: Vec<PathBuf> = match std::fs::read_dir(&dir) {
        Ok(rd) => rd
            .filter_map(Result::ok)
            .map(|e| e.path())
            .filter(|p| p.extension().is_some_and(|x| x == "json"))
            .collect(),
        Err(_) => return,
    };
    names.sort();
    for path in names {
        let request = match std::fs::read_to_string(&path) {
            Ok(t) => t,
            Err(e) => {
                tracing::warn!(path = %path.display(), error = %e, "mailbox request unreadable");
                continue;
            }
        };
        // Removed before it runs: a request that kills the process is not run twice.
        if let Err(e) = std::fs::remove_file(&path) {
            tracing::warn!(path = %path.display(), error = %e, "cannot take a mailbox request");
            continue;
        }
        let outcome = crate::control::handle(shared, &request);
        let request_json: serde_json::Value =
            serde_json::from_str(&request).unwrap_or(serde_json::Value::String(request.clone()));
        let line = match &outcome {
            Ok((reply, _)) => serde_json::json!({
                "drive": index, "pid": std::process::id(), "request": request_json, "ok": true,
                "reply": serde_json::from_str::<serde_json::Value>(reply).unwrap_or_default(),
            }),
            Err(f) => serde_json::json!({
                "drive": index, "pid": std::process::id(), "request": request_json, "ok": false,
                "error": f.to_string(),
            }),
        };
        tracing::info!(drive = index, %line, "mailbox request delivered");
        let log = shared.cfg.dir.join("mailbox").join("delivered.jsonl");
        let r = std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(&log)
            .and_then(|mut f| f.write_all(format!("{line}\n").as_bytes()));
        if let Err(e) = r {
            tracing::error!(path = %log.display(), error = %e, "cannot log a delivered mailbox request");
        }
    }
}

/// Deliver the requests of every drive this handle owns.
pub fn deliver_all(shared: &Shared) {
    for i in 0..shared.drive_count() {
        deliver(shared, i);
    }
}
