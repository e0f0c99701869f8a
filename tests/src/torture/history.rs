//! The run's history: every client operation, job outcome and injected fault with its time,
//! appended to `history.jsonl` in the run's directory as it happens, and the last entries kept
//! in memory to print beside a broken invariant.

use std::collections::VecDeque;
use std::io::Write;
use std::path::Path;
use std::sync::Mutex;
use std::time::Instant;

/// The history of one run.
pub struct History {
    start: Instant,
    file: Mutex<std::fs::File>,
    tail: Mutex<VecDeque<String>>,
}

/// How many entries are printed beside a broken invariant.
const TAIL: usize = 60;

impl History {
    /// A history written to `path`.
    pub fn create(path: &Path) -> History {
        History {
            start: Instant::now(),
            file: Mutex::new(std::fs::File::create(path).expect("history file")),
            tail: Mutex::new(VecDeque::new()),
        }
    }

    /// Milliseconds since the run started.
    pub fn now_ms(&self) -> u64 {
        self.start.elapsed().as_millis() as u64
    }

    /// Record `entry` (a JSON object; `t_ms` and `who` are added).
    pub fn log(&self, who: &str, mut entry: serde_json::Value) {
        entry["t_ms"] = self.now_ms().into();
        entry["who"] = who.into();
        let line = entry.to_string();
        if let Ok(mut f) = self.file.lock() {
            let _ = writeln!(f, "{line}");
        }
        if let Ok(mut t) = self.tail.lock() {
            if t.len() == TAIL {
                t.pop_front();
            }
            t.push_back(line);
        }
    }

    /// The last entries, oldest first.
    pub fn tail(&self) -> Vec<String> {
        self.tail
            .lock()
            .map(|t| t.iter().cloned().collect())
            .unwrap_or_default()
    }
}
