//! The upload spool of `PUT /v1/objects/{key}`: a body is streamed to a file of its own in a
//! private directory (SHA-256 taken on the way, never held whole in memory), made durable, and
//! archived from there by an ordinary archive job; the janitor removes it once the job ended.
//!
//! Layout under `[serve] spool_dir` (mode 0700): `UPLOAD/NAME`, the body under the last
//! segment of its key, in a directory named by a fresh UUID (so no name in it can be guessed
//! or planted: it is created with `O_EXCL` and opened with `O_NOFOLLOW`), and `UPLOAD.job`,
//! the archive job and the key (JSON), written once the job is queued.
//!
//! The server receiving an upload holds an exclusive `flock` on its directory until the job is
//! recorded, and a janitor (of this server or another on the same spool) leaves a locked
//! directory alone: an upload is never removed while it is received or queued. Space is taken
//! from the budget as bytes arrive, never for a length only announced, so a client that
//! announces much and sends little holds only what it sent.

use std::collections::HashMap;
use std::io;
use std::os::fd::OwnedFd;
use std::os::unix::fs::{DirBuilderExt, OpenOptionsExt};
use std::path::{Path, PathBuf};
use std::sync::Mutex;
use std::time::{Duration, SystemTime};

use axum::body::Body;
use axum::http::StatusCode;
use futures::StreamExt;
use sha2::{Digest, Sha256};
use tokio::io::AsyncWriteExt;

use super::ApiError;
use super::quota::Quota;
use reel_queue::store::JobStore;

/// An upload directory with no job after this long belongs to a request that never finished
/// (the server stopped in the middle): the janitor removes it.
pub const ORPHAN_AGE: Duration = Duration::from_secs(600);

/// What [`Spool::claim`] holds for a key whose upload is being received.
const RECEIVING: &str = "(receiving)";

/// The spool: its directory and its byte budget.
#[derive(Debug)]
pub struct Spool {
    dir: PathBuf,
    quota: Quota,
    /// Keys whose upload's archive job may still be unfinished, with the job.
    pending: Mutex<HashMap<String, String>>,
}

/// The record of a queued upload (`UPLOAD.job`).
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
struct Marker {
    job: String,
    key: String,
}

/// A body received whole and durable in the spool.
#[derive(Debug, Clone)]
pub struct Received {
    /// The file, to be archived.
    pub path: PathBuf,
    /// Its upload's name (the directory's).
    pub upload: String,
    /// Bytes.
    pub size: u64,
    /// SHA-256 of the bytes.
    pub sha256: [u8; 32],
}

/// A key taken for one upload ([`Spool::claim`]). Until [`Claim::mark`] records the upload's
/// job, it holds the upload directory's lock; dropped before that (the upload was refused,
/// its job could not be queued), the key is given back and what was received is removed.
#[derive(Debug)]
pub struct Claim<'a> {
    spool: &'a Spool,
    key: String,
    received: Option<(Received, OwnedFd)>,
    marked: bool,
}

impl Claim<'_> {
    /// Receive the upload's body: [`Spool::receive`].
    pub async fn receive(
        &mut self,
        name: &str,
        body: Body,
        declared: Option<u64>,
        expected: Option<[u8; 32]>,
        limits: UploadLimits,
    ) -> Result<Received, ApiError> {
        let (r, lock) = self
            .spool
            .receive(name, body, declared, expected, limits)
            .await?;
        self.received = Some((r.clone(), lock));
        Ok(r)
    }

    /// Record that the received upload is archived by job `job` (durably: the janitor keeps
    /// it until the job ends), and let its lock go.
    pub fn mark(mut self, job: &str) -> Result<(), ApiError> {
        let Some((r, _lock)) = &self.received else {
            return Err(spool_io(
                "recording the job of",
                &self.spool.dir,
                io::Error::other("nothing was received"),
            ));
        };
        let marker = self.spool.dir.join(format!("{}.job", r.upload));
        let tmp = self.spool.dir.join(format!(".{}.job.tmp", r.upload));
        let m = Marker {
            job: job.to_string(),
            key: self.key.clone(),
        };
        let text = serde_json::to_vec(&m)
            .map_err(|e| spool_io("recording the job of", &marker, io::Error::other(e)))?;
        write_durably(&tmp, &marker, &text, &self.spool.dir)
            .map_err(|e| spool_io("recording the job of", &marker, e))?;
        self.spool.pending().insert(m.key, m.job);
        self.marked = true;
        Ok(())
    }
}

impl Drop for Claim<'_> {
    fn drop(&mut self) {
        if self.marked {
            return;
        }
        if let Some((r, _lock)) = self.received.take() {
            let _ = std::fs::remove_dir_all(self.spool.dir.join(&r.upload));
            self.spool.quota.give_back(r.size);
        }
        let mut pending = self.spool.pending();
        if pending.get(&self.key).map(String::as_str) == Some(RECEIVING) {
            pending.remove(&self.key);
        }
    }
}

/// Limits of one upload.
#[derive(Debug, Clone, Copy)]
pub struct UploadLimits {
    /// Bytes the body may have.
    pub max_bytes: u64,
    /// Longest wait for the next piece of the body.
    pub idle: Duration,
}

impl Spool {
    /// Open (and create, mode 0700) the spool at `dir` with a budget of `limit` bytes; what it
    /// holds already counts.
    pub fn open(dir: &Path, limit: u64) -> io::Result<Spool> {
        let dir = private_dir(dir)?;
        let used = bytes_under(&dir);
        let mut pending = HashMap::new();
        if let Ok(entries) = std::fs::read_dir(&dir) {
            for e in entries.flatten() {
                if e.file_name().to_string_lossy().ends_with(".job")
                    && let Some(m) = read_marker(&e.path())
                {
                    pending.insert(m.key, m.job);
                }
            }
        }
        Ok(Spool {
            quota: Quota::new("upload spool", "spool_bytes", limit, used),
            dir,
            pending: Mutex::new(pending),
        })
    }

    /// The budget.
    pub fn quota(&self) -> &Quota {
        &self.quota
    }

    /// Stream `body` into a new upload under the file name `name` (the key's last segment),
    /// refusing more than `limits.max_bytes` (413), a budget that is full (503/507), a body
    /// that stalls or breaks (408/400), and a body whose SHA-256 is not `expected` (400).
    /// Nothing of a refused upload stays. The upload directory stays locked while the
    /// returned lock is held.
    async fn receive(
        &self,
        name: &str,
        body: Body,
        declared: Option<u64>,
        expected: Option<[u8; 32]>,
        limits: UploadLimits,
    ) -> Result<(Received, OwnedFd), ApiError> {
        if let Some(n) = declared {
            if n > limits.max_bytes {
                return Err(too_large(n, limits.max_bytes));
            }
            // Refused early if it cannot fit, but nothing is taken for a length only announced.
            self.quota.fits(n).map_err(quota_error)?;
        }
        let upload = uuid::Uuid::new_v4().simple().to_string();
        let mut taken = 0u64;
        let r = self
            .receive_into(&upload, name, body, expected, limits, &mut taken)
            .await;
        if r.is_err() {
            let _ = std::fs::remove_dir_all(self.dir.join(&upload));
            self.quota.give_back(taken);
        }
        r
    }

    /// Take `key` for an upload, or refuse (409) while an earlier upload of it is being
    /// received or its archive job is unfinished: a second upload of a key waits until the
    /// first is on tape. A marked upload keeps the key until its job ends.
    pub async fn claim(&self, key: &str, jobs: &JobStore) -> Result<Claim<'_>, ApiError> {
        let busy = |why: String| {
            ApiError::new(
                StatusCode::CONFLICT,
                why,
                "upload the new version once that upload is on tape (GET /v1/jobs/{id} follows its job); each upload of a key becomes its next generation",
            )
        };
        for _ in 0..3 {
            let current = {
                let mut pending = self.pending();
                match pending.get(key) {
                    None => {
                        pending.insert(key.to_string(), RECEIVING.to_string());
                        return Ok(Claim {
                            spool: self,
                            key: key.to_string(),
                            received: None,
                            marked: false,
                        });
                    }
                    Some(v) => v.clone(),
                }
            };
            if current == RECEIVING {
                return Err(busy(format!("another upload of `{key}` is being received")));
            }
            match jobs.get(&current).await {
                Ok(Some(rec)) if !rec.state.is_final() => {
                    return Err(busy(format!(
                        "an earlier upload of `{key}` is still being archived (job {current})"
                    )));
                }
                Err(e) => return Err(e.into()),
                _ => {
                    let mut pending = self.pending();
                    if pending.get(key) == Some(&current) {
                        pending.remove(key);
                    }
                }
            }
        }
        Err(busy(format!("uploads of `{key}` are arriving at once")))
    }

    async fn receive_into(
        &self,
        upload: &str,
        name: &str,
        body: Body,
        expected: Option<[u8; 32]>,
        limits: UploadLimits,
        taken: &mut u64,
    ) -> Result<(Received, OwnedFd), ApiError> {
        let dir = self.dir.join(upload);
        std::fs::DirBuilder::new()
            .mode(0o700)
            .create(&dir)
            .map_err(|e| spool_io("creating an upload directory in", &self.dir, e))?;
        // A janitor may hold it for a moment: wait for it.
        let lock = lock_dir_waiting(&dir)
            .map_err(|e| spool_io("locking an upload directory in", &self.dir, e))?;
        let path = dir.join(name);
        let file = std::fs::OpenOptions::new()
            .write(true)
            .create_new(true)
            .mode(0o600)
            .custom_flags(nix::libc::O_NOFOLLOW)
            .open(&path)
            .map_err(|e| spool_io("creating the upload file in", &dir, e))?;
        let mut file = tokio::fs::File::from_std(file);
        let mut hasher = Sha256::new();
        let mut size = 0u64;
        let mut stream = body.into_data_stream();
        loop {
            let next = tokio::time::timeout(limits.idle, stream.next())
                .await
                .map_err(|_| {
                    ApiError::new(
                        StatusCode::REQUEST_TIMEOUT,
                        format!(
                            "the body stalled: nothing came for {} s after {size} bytes",
                            limits.idle.as_secs()
                        ),
                        "send the body without pauses longer than [serve] request_timeout_seconds",
                    )
                })?;
            let Some(chunk) = next else { break };
            let chunk = chunk.map_err(|e| {
                ApiError::bad_request(
                    format!("the body broke off after {size} bytes: {e}"),
                    "send the whole body (its Content-Length, or a complete chunked body)",
                )
            })?;
            let n = chunk.len() as u64;
            size += n;
            if size > limits.max_bytes {
                return Err(too_large(size, limits.max_bytes));
            }
            if size > *taken {
                self.quota.take(size - *taken).map_err(quota_error)?;
                *taken = size;
            }
            hasher.update(&chunk);
            file.write_all(&chunk)
                .await
                .map_err(|e| spool_io("writing the upload file in", &dir, e))?;
        }
        let sha256: [u8; 32] = hasher.finalize().into();
        if let Some(want) = expected
            && want != sha256
        {
            return Err(ApiError::bad_request(
                format!(
                    "the body's SHA-256 is {}, not the {} the request gave in x-reel-sha256; nothing was archived",
                    hex::encode(sha256),
                    hex::encode(want)
                ),
                "the body was damaged on the way or the checksum is of other data: send it again",
            ));
        }
        // Durable before the job that names it is queued and the client told 202.
        file.sync_all()
            .await
            .map_err(|e| spool_io("syncing the upload file in", &dir, e))?;
        drop(file);
        for d in [&dir, &self.dir] {
            sync_dir(d).map_err(|e| spool_io("syncing", d, e))?;
        }
        let r = Received {
            path,
            upload: upload.to_string(),
            size,
            sha256,
        };
        Ok((r, lock))
    }

    /// Remove the uploads whose archive job ended (done, failed, cancelled or pruned) and the
    /// ones a stopped server left without a job. Returns how many were removed.
    pub async fn sweep(&self, jobs: &JobStore) -> usize {
        let Ok(entries) = std::fs::read_dir(&self.dir) else {
            return 0;
        };
        let mut removed = 0;
        for e in entries.flatten() {
            let name = e.file_name().to_string_lossy().into_owned();
            let Ok(kind) = e.file_type() else { continue };
            if !kind.is_dir() {
                // A marker whose upload is gone, or a marker half written by a stopped server.
                let upload = name.strip_suffix(".job").or_else(|| {
                    name.strip_prefix('.')
                        .and_then(|n| n.strip_suffix(".job.tmp"))
                });
                if upload.is_some_and(|u| !self.dir.join(u).exists())
                    && older_than(&e.path(), ORPHAN_AGE)
                {
                    let _ = std::fs::remove_file(e.path());
                }
                continue;
            }
            // Held by the server receiving it (this one or another on the same spool).
            let Ok(Some(_held)) = lock_dir(&e.path()) else {
                continue;
            };
            let marker = read_marker(&self.dir.join(format!("{name}.job")));
            let ended = match &marker {
                Some(m) => match jobs.get(&m.job).await {
                    Ok(Some(rec)) => rec.state.is_final(),
                    Ok(None) => true,
                    // The store is down: look again next time.
                    Err(_) => false,
                },
                None => older_than(&e.path(), ORPHAN_AGE),
            };
            if ended {
                let path = e.path();
                let size = bytes_under(&path);
                let gone = tokio::task::spawn_blocking(move || std::fs::remove_dir_all(path))
                    .await
                    .is_ok_and(|r| r.is_ok());
                if gone {
                    let _ = std::fs::remove_file(self.dir.join(format!("{name}.job")));
                    if let Some(m) = &marker {
                        let mut pending = self.pending();
                        if pending.get(&m.key) == Some(&m.job) {
                            pending.remove(&m.key);
                        }
                    }
                    self.quota.give_back(size);
                    removed += 1;
                }
            }
        }
        removed
    }

    fn pending(&self) -> std::sync::MutexGuard<'_, HashMap<String, String>> {
        self.pending.lock().unwrap_or_else(|e| e.into_inner())
    }
}

/// Write `text` to `tmp`, sync it, rename it to `path` and sync `dir`: after a crash `path` is
/// whole or absent.
pub fn write_durably(tmp: &Path, path: &Path, text: &[u8], dir: &Path) -> io::Result<()> {
    use std::io::Write;
    let mut f = std::fs::File::create(tmp)?;
    f.write_all(text)?;
    f.sync_all()?;
    drop(f);
    std::fs::rename(tmp, path)?;
    sync_dir(dir)
}

fn read_marker(path: &Path) -> Option<Marker> {
    serde_json::from_slice(&std::fs::read(path).ok()?).ok()
}

fn open_dir(dir: &Path) -> io::Result<OwnedFd> {
    use rustix::fs::{Mode, OFlags};
    Ok(rustix::fs::open(
        dir,
        OFlags::RDONLY | OFlags::DIRECTORY | OFlags::NOFOLLOW | OFlags::CLOEXEC,
        Mode::empty(),
    )?)
}

/// An exclusive `flock` on directory `dir`, or `None` if another holder has it (never waited
/// for).
fn lock_dir(dir: &Path) -> io::Result<Option<OwnedFd>> {
    let fd = open_dir(dir)?;
    match rustix::fs::flock(&fd, rustix::fs::FlockOperation::NonBlockingLockExclusive) {
        Ok(()) => Ok(Some(fd)),
        Err(rustix::io::Errno::WOULDBLOCK) => Ok(None),
        Err(e) => Err(e.into()),
    }
}

/// An exclusive `flock` on directory `dir`, waiting for a holder (a janitor looks for a
/// moment only).
fn lock_dir_waiting(dir: &Path) -> io::Result<OwnedFd> {
    let fd = open_dir(dir)?;
    rustix::fs::flock(&fd, rustix::fs::FlockOperation::LockExclusive)?;
    Ok(fd)
}

/// Create `dir` (mode 0700 for what is created) and return it with its links resolved, so
/// that paths under it can be opened with no link on the way.
pub fn private_dir(dir: &Path) -> io::Result<PathBuf> {
    std::fs::DirBuilder::new()
        .recursive(true)
        .mode(0o700)
        .create(dir)?;
    dir.canonicalize()
}

/// Bytes of the regular files under `dir` (not following links).
pub fn bytes_under(dir: &Path) -> u64 {
    let mut total = 0;
    let mut stack = vec![dir.to_path_buf()];
    while let Some(d) = stack.pop() {
        let Ok(entries) = std::fs::read_dir(&d) else {
            continue;
        };
        for e in entries.flatten() {
            match e.metadata() {
                Ok(m) if m.is_dir() => stack.push(e.path()),
                Ok(m) if m.is_file() => total += m.len(),
                _ => {}
            }
        }
    }
    total
}

/// Whether `path` was last modified more than `age` ago.
pub fn older_than(path: &Path, age: Duration) -> bool {
    std::fs::symlink_metadata(path)
        .and_then(|m| m.modified())
        .ok()
        .and_then(|t| SystemTime::now().duration_since(t).ok())
        .is_some_and(|d| d > age)
}

fn sync_dir(dir: &Path) -> io::Result<()> {
    std::fs::File::open(dir)?.sync_all()
}

fn too_large(size: u64, max: u64) -> ApiError {
    ApiError::new(
        StatusCode::PAYLOAD_TOO_LARGE,
        format!(
            "the object has at least {size} bytes; this service takes objects of at most {max} bytes"
        ),
        "split the object, or ask the operator to raise [serve] max_object_bytes",
    )
}

fn quota_error(full: super::quota::QuotaFull) -> ApiError {
    full.into_error()
}

fn spool_io(doing: &str, path: &Path, e: io::Error) -> ApiError {
    tracing::error!(path = %path.display(), error = %e, "{doing} the upload spool");
    if e.raw_os_error() == Some(nix::libc::ENOSPC) {
        return ApiError::new(
            StatusCode::SERVICE_UNAVAILABLE,
            "the upload spool's filesystem is full",
            format!(
                "nothing was archived; space comes back as jobs finish: retry after {} s",
                super::quota::RETRY_AFTER_SECONDS
            ),
        )
        .retry_after(super::quota::RETRY_AFTER_SECONDS);
    }
    ApiError::new(
        StatusCode::INTERNAL_SERVER_ERROR,
        format!("the upload spool failed while {doing} it: {}", e.kind()),
        "nothing was archived; the operator finds the cause in reel serve's log ([serve] spool_dir)",
    )
}
