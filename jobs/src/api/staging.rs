//! The staging area of `GET /v1/objects/{key}`: an object is fetched from tape by an ordinary
//! recall job into a directory of its own here (`POST /v1/stage/{key}`), served from there with
//! ranges while it stays, and removed by the janitor `[serve] staging_hours` after its recall
//! finished (at once if the recall failed or was cancelled).
//!
//! Layout under `[serve] staging_dir` (mode 0700): `NAME/KEY`, where the recall put the object,
//! and `NAME.json`, the [`Stage`] record; `NAME` is the SHA-256 of the key (hex, 40 digits)
//! and the generation, so a key archived again is staged afresh and never served stale.

use std::io;
use std::path::{Path, PathBuf};
use std::time::Duration;

use serde::{Deserialize, Serialize};
use sha2::{Digest, Sha256};

use super::quota::Quota;
use super::spool::{bytes_under, older_than, private_dir};
use reel_queue::job::JobState;
use reel_queue::store::JobStore;

/// The record of one staged object.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Stage {
    /// The key.
    pub key: String,
    /// The generation staged.
    pub generation: u64,
    /// The object's size (taken from the budget until the stage is removed).
    pub size: u64,
    /// The recall job.
    pub job: String,
}

/// Where a stage stands, as a client sees it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum StageState {
    /// No recall has staged this generation.
    None,
    /// The recall is queued or running.
    Pending {
        /// The recall job.
        job: String,
        /// Its state.
        state: JobState,
    },
    /// The recall ended without the object (failed or cancelled).
    Ended {
        /// The recall job.
        job: String,
        /// Its state.
        state: JobState,
        /// Why, if it failed.
        error: Option<String>,
    },
    /// Staged: the object is here.
    Ready {
        /// The directory the object lies under (its key below it).
        dir: PathBuf,
    },
}

/// The staging area: its directory, its budget and how long a stage stays.
#[derive(Debug)]
pub struct Staging {
    dir: PathBuf,
    quota: Quota,
    keep: Duration,
    /// Held while a stage is decided (asked for, or removed by the janitor).
    lock: tokio::sync::Mutex<()>,
}

impl Staging {
    /// Open (and create, mode 0700) the staging area at `dir` with a budget of `limit` bytes;
    /// stages are kept `keep` after their recall ended.
    pub fn open(dir: &Path, limit: u64, keep: Duration) -> io::Result<Staging> {
        let dir = private_dir(dir)?;
        // What every stage may grow to (its record's size, taken when it was asked for),
        // and what lies in directories without a record.
        let mut used = 0u64;
        if let Ok(entries) = std::fs::read_dir(&dir) {
            for e in entries.flatten() {
                if !e.file_type().is_ok_and(|t| t.is_dir()) {
                    continue;
                }
                let name = e.file_name().to_string_lossy().into_owned();
                used += match read_record(&dir, &name) {
                    Some(s) => s.size,
                    None => bytes_under(&e.path()),
                };
            }
        }
        Ok(Staging {
            quota: Quota::new("staging area", "staging_bytes", limit, used),
            dir,
            keep,
            lock: tokio::sync::Mutex::new(()),
        })
    }

    /// The budget.
    pub fn quota(&self) -> &Quota {
        &self.quota
    }

    /// Held while a stage is decided: one recall per stage, and none removed while asked for.
    pub fn lock(&self) -> &tokio::sync::Mutex<()> {
        &self.lock
    }

    /// The name of the stage of generation `generation` of `key`.
    pub fn name(key: &str, generation: u64) -> String {
        let digest = Sha256::digest(key.as_bytes());
        format!("{}-g{generation}", &hex::encode(digest)[..40])
    }

    /// The directory a stage's recall writes to.
    pub fn dir_of(&self, name: &str) -> PathBuf {
        self.dir.join(name)
    }

    /// The stage record, if any.
    pub fn record(&self, name: &str) -> Option<Stage> {
        read_record(&self.dir, name)
    }

    /// Create the directory of a new stage (mode 0700). An old one of the same name (a
    /// recall that ended without the object, a copy gone or damaged) is removed first and its
    /// space given back.
    pub fn prepare(&self, name: &str) -> io::Result<PathBuf> {
        let dir = self.dir_of(name);
        if let Some(old) = self.record(name) {
            let _ = std::fs::remove_file(self.dir.join(format!("{name}.json")));
            self.quota.give_back(old.size);
        } else if dir.exists() {
            self.quota.give_back(bytes_under(&dir));
        }
        match std::fs::remove_dir_all(&dir) {
            Ok(()) => {}
            Err(e) if e.kind() == io::ErrorKind::NotFound => {}
            Err(e) => return Err(e),
        }
        use std::os::unix::fs::DirBuilderExt;
        std::fs::DirBuilder::new().mode(0o700).create(&dir)?;
        Ok(dir)
    }

    /// Write the record of a stage whose recall is queued.
    pub fn write_record(&self, name: &str, stage: &Stage) -> io::Result<()> {
        let path = self.dir.join(format!("{name}.json"));
        let tmp = self.dir.join(format!(".{name}.json.tmp"));
        let text = serde_json::to_vec(stage).map_err(io::Error::other)?;
        super::spool::write_durably(&tmp, &path, &text, &self.dir)
    }

    /// Where the stage of generation `generation` of `key` stands.
    pub async fn state(
        &self,
        key: &str,
        generation: u64,
        jobs: &JobStore,
    ) -> reel_queue::error::Result<StageState> {
        let name = Self::name(key, generation);
        let Some(stage) = self.record(&name) else {
            return Ok(StageState::None);
        };
        let Some(rec) = jobs.get(&stage.job).await? else {
            return Ok(StageState::None);
        };
        Ok(match rec.state {
            // Staged, if the copy is still there whole (a regular file of the object's size).
            JobState::Done => {
                let dir = self.dir_of(&name);
                match std::fs::symlink_metadata(dir.join(key)) {
                    Ok(m) if m.is_file() && m.len() == stage.size => StageState::Ready { dir },
                    _ => StageState::None,
                }
            }
            JobState::Queued | JobState::Running => StageState::Pending {
                job: stage.job,
                state: rec.state,
            },
            JobState::Failed | JobState::Cancelled => StageState::Ended {
                job: stage.job,
                state: rec.state,
                error: rec.error,
            },
        })
    }

    /// Remove the stages whose recall ended without the object, or finished longer than the
    /// keeping time ago, and
    /// directories with no record (a server stopped while staging). Returns how many.
    pub async fn sweep(&self, jobs: &JobStore) -> usize {
        let Ok(entries) = std::fs::read_dir(&self.dir) else {
            return 0;
        };
        let mut removed = 0;
        for e in entries.flatten() {
            let name = e.file_name().to_string_lossy().into_owned();
            if !e.file_type().is_ok_and(|t| t.is_dir()) {
                continue;
            }
            let record = self.dir.join(format!("{name}.json"));
            // Decided and done under the stage lock, so a stage asked for again meanwhile
            // (a new record, a new directory) is never removed on the old one's account.
            let _one = self.lock.lock().await;
            let seen = self.record(&name);
            let gone = match &seen {
                Some(stage) => match jobs.get(&stage.job).await {
                    Ok(Some(rec)) => match rec.state {
                        JobState::Failed | JobState::Cancelled => true,
                        JobState::Done => rec.finished_ms.is_some_and(|t| {
                            reel_queue::db::now_ms().saturating_sub(t)
                                > i64::try_from(self.keep.as_millis()).unwrap_or(i64::MAX)
                        }),
                        JobState::Queued | JobState::Running => false,
                    },
                    Ok(None) => true,
                    Err(_) => false,
                },
                None => older_than(&e.path(), super::spool::ORPHAN_AGE),
            };
            if gone && self.record(&name) == seen {
                let path = e.path();
                let size = seen
                    .as_ref()
                    .map(|s| s.size)
                    .unwrap_or_else(|| bytes_under(&path));
                let removed_dir =
                    tokio::task::spawn_blocking(move || std::fs::remove_dir_all(path))
                        .await
                        .is_ok_and(|r| r.is_ok());
                if removed_dir {
                    let _ = std::fs::remove_file(&record);
                    self.quota.give_back(size);
                    removed += 1;
                }
            }
        }
        removed
    }
}

fn read_record(dir: &Path, name: &str) -> Option<Stage> {
    let text = std::fs::read(dir.join(format!("{name}.json"))).ok()?;
    serde_json::from_slice(&text).ok()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_stage_is_named_by_key_and_generation() {
        let a = Staging::name("photos/2026/a.jpg", 1);
        assert_eq!(a.len(), 43);
        assert!(a.ends_with("-g1"));
        assert_ne!(a, Staging::name("photos/2026/a.jpg", 2));
        assert_ne!(a, Staging::name("photos/2026/b.jpg", 1));
        assert!(!a.contains('/'));
    }
}
