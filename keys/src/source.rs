//! Where a worker gets a key by id: one trait, [`KeySource`], with the host's key file
//! ([`FileSource`]) and an external key-manager command ([`CommandSource`]) behind it. A
//! KMIP client would be a third implementation; nothing that asks for keys changes.
//!
//! The command follows CTA's external key script: reel runs the program (no shell) with its
//! configured arguments followed by `--key-id ID --pool POOL`, standard input closed, and reads
//! one JSON object from its standard output:
//!
//! ```json
//! {"key_id": "site-2026", "key": "<64 hex digits>"}
//! ```
//!
//! `key_id` must be the id asked for. An exit status of 75 (`EX_TEMPFAIL`) or no answer within
//! the timeout is worth asking again later ([`KeyError::is_retryable`]); any other failure is
//! not. What the command printed on standard output is never quoted in an error (it may hold
//! a key); the first line of its standard error is, with anything that looks like key
//! material (a run of 32 or more letters and digits) blanked.

use std::io::Read;
use std::path::PathBuf;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use serde::Deserialize;
use zeroize::{Zeroize, Zeroizing};

use crate::error::KeyError;
use crate::id::KeyId;
use crate::key::DataKey;
use crate::store::KeyFile;

/// Somewhere keys are found by id.
pub trait KeySource: Send + Sync {
    /// Key `id`, for pool `pool`. Blocking (a command may take seconds): call it from a
    /// blocking task.
    fn fetch(&self, id: &KeyId, pool: &str) -> Result<DataKey, KeyError>;

    /// What this source is, for messages (a path or a program, never a key).
    fn describe(&self) -> String;
}

/// The host's key file.
#[derive(Debug, Clone)]
pub struct FileSource(pub KeyFile);

impl KeySource for FileSource {
    fn fetch(&self, id: &KeyId, _pool: &str) -> Result<DataKey, KeyError> {
        self.0.get(id)
    }

    fn describe(&self) -> String {
        format!("key file {}", self.0.path().display())
    }
}

/// The most a key-manager command may print on standard output or standard error.
const MAX_OUTPUT: u64 = 64 << 10;
/// The exit status that says "try again later" (`EX_TEMPFAIL`, sysexits.h).
pub const EX_TEMPFAIL: i32 = 75;

/// An external key-manager command.
#[derive(Debug, Clone)]
pub struct CommandSource {
    program: PathBuf,
    args: Vec<String>,
    timeout: Duration,
}

/// The command's answer.
#[derive(Deserialize)]
struct Answer {
    key_id: String,
    key: String,
}

impl Drop for Answer {
    fn drop(&mut self) {
        self.key.zeroize();
    }
}

impl CommandSource {
    /// `command[0]` run with `command[1..]`, then `--key-id ID --pool POOL`; `None` when the
    /// command is empty.
    pub fn new(command: &[String], timeout: Duration) -> Option<CommandSource> {
        let (program, args) = command.split_first()?;
        Some(CommandSource {
            program: PathBuf::from(program),
            args: args.to_vec(),
            timeout,
        })
    }
}

/// Blank every run of 32 or more characters that could encode a key (hex, base64).
fn blank_secrets(text: &str) -> String {
    let keyish = |c: char| c.is_ascii_alphanumeric() || matches!(c, '+' | '/' | '=' | '_' | '-');
    let mut out = String::new();
    let mut run = String::new();
    let flush = |run: &mut String, out: &mut String| {
        if run.chars().count() >= 32 {
            out.push_str("<redacted>");
        } else {
            out.push_str(run);
        }
        run.zeroize();
        run.clear();
    };
    for c in text.chars() {
        if keyish(c) {
            run.push(c);
        } else {
            flush(&mut run, &mut out);
            out.push(c);
        }
    }
    flush(&mut run, &mut out);
    out
}

impl KeySource for CommandSource {
    fn fetch(&self, id: &KeyId, pool: &str) -> Result<DataKey, KeyError> {
        let fail = |why: String, retryable: bool| KeyError::Manager {
            command: self.program.display().to_string(),
            id: id.to_string(),
            pool: pool.to_string(),
            why,
            retryable,
        };
        let mut child = Command::new(&self.program)
            .args(&self.args)
            .arg("--key-id")
            .arg(id.as_str())
            .arg("--pool")
            .arg(pool)
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .map_err(|e| {
                let again = matches!(
                    e.kind(),
                    std::io::ErrorKind::WouldBlock | std::io::ErrorKind::Interrupted
                ) || e.raw_os_error() == Some(11);
                fail(format!("cannot run it: {e}"), again)
            })?;
        // Both pipes are read on threads of their own, bounded, so a chatty command cannot
        // block on a full pipe or make reel hold more than MAX_OUTPUT of it.
        let reader = |pipe: Option<Box<dyn Read + Send>>| {
            std::thread::spawn(move || {
                let mut buf = Zeroizing::new(Vec::new());
                if let Some(p) = pipe {
                    let _ = p.take(MAX_OUTPUT).read_to_end(&mut buf);
                }
                buf
            })
        };
        let out = reader(
            child
                .stdout
                .take()
                .map(|p| Box::new(p) as Box<dyn Read + Send>),
        );
        let err = reader(
            child
                .stderr
                .take()
                .map(|p| Box::new(p) as Box<dyn Read + Send>),
        );
        let deadline = Instant::now() + self.timeout;
        let status = loop {
            match child.try_wait() {
                Ok(Some(s)) => break s,
                Ok(None) if Instant::now() >= deadline => {
                    let _ = child.kill();
                    let _ = child.wait();
                    return Err(fail(
                        format!(
                            "no answer within {} s; it was stopped",
                            self.timeout.as_secs_f64()
                        ),
                        true,
                    ));
                }
                Ok(None) => std::thread::sleep(Duration::from_millis(10)),
                Err(e) => return Err(fail(format!("waiting for it: {e}"), true)),
            }
        };
        let stdout = out.join().unwrap_or_default();
        let stderr = err.join().unwrap_or_default();
        if !status.success() {
            let said = String::from_utf8_lossy(&stderr);
            let first = said.lines().next().unwrap_or("").trim();
            let said = if first.is_empty() {
                String::new()
            } else {
                format!(
                    ": {}",
                    blank_secrets(&first.chars().take(300).collect::<String>())
                )
            };
            return Err(fail(
                format!("it ended with {status}{said}"),
                status.code() == Some(EX_TEMPFAIL),
            ));
        }
        let answer: Answer = serde_json::from_slice(&stdout).map_err(|_| {
            fail(
                "its answer is not one JSON object with `key_id` and `key` (64 hex digits) \
                 (what it printed is not shown: it may hold a key)"
                    .into(),
                false,
            )
        })?;
        if answer.key_id != id.as_str() {
            return Err(fail(
                format!(
                    "it answered with key {:?}, not the key asked for",
                    blank_secrets(&answer.key_id.chars().take(80).collect::<String>())
                ),
                false,
            ));
        }
        DataKey::from_hex(&answer.key)
            .ok_or_else(|| fail("its `key` is not 64 hex digits".into(), false))
    }

    fn describe(&self) -> String {
        format!("key manager {}", self.program.display())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::os::unix::fs::PermissionsExt;

    /// A key-manager script in `dir` with this body (after `#!/bin/sh`).
    fn script(dir: &std::path::Path, name: &str, body: &str) -> Vec<String> {
        let p = dir.join(name);
        std::fs::write(&p, format!("#!/bin/sh\n{body}\n")).unwrap();
        std::fs::set_permissions(&p, std::fs::Permissions::from_mode(0o700)).unwrap();
        vec![p.display().to_string(), "--site".into(), "lab".into()]
    }

    #[test]
    fn a_key_manager_answers_with_the_key_asked_for() {
        let dir = tempfile::tempdir().unwrap();
        let key = DataKey::generate();
        let hex = key.to_hex();
        // It checks its arguments: configured ones first, then the id and the pool.
        let cmd = script(
            dir.path(),
            "km",
            &format!(
                "[ \"$1 $2 $3 $4 $5 $6\" = \"--site lab --key-id k1 --pool p1\" ] || exit 3\n\
                 echo '{{\"key_id\": \"k1\", \"key\": \"{}\", \"message\": \"ok\"}}'",
                *hex
            ),
        );
        let s = CommandSource::new(&cmd, Duration::from_secs(20)).unwrap();
        let k1 = KeyId::new("k1").unwrap();
        assert_eq!(s.fetch(&k1, "p1").unwrap(), key);
        // Another pool: the script refuses (status 3), permanent.
        let e = s.fetch(&k1, "p2").unwrap_err();
        assert!(!e.is_retryable(), "{e}");
        assert!(e.to_string().contains("exit status: 3"), "{e}");
    }

    #[test]
    fn a_failing_slow_or_wrong_key_manager_is_refused_without_leaking() {
        let dir = tempfile::tempdir().unwrap();
        let k1 = KeyId::new("k1").unwrap();
        let secret = "cd".repeat(32);
        let run = |name: &str, body: &str, timeout: u64| {
            let s = CommandSource::new(
                &script(dir.path(), name, body),
                Duration::from_secs(timeout),
            )
            .unwrap();
            s.fetch(&k1, "p1").unwrap_err()
        };
        // Temporarily failing: worth another try; its stderr is shown, key-like runs blanked.
        let e = run(
            "tempfail",
            &format!("echo \"vault sealed, last key {secret}\" >&2; exit 75"),
            20,
        );
        assert!(e.is_retryable(), "{e}");
        let shown = e.to_string();
        assert!(
            shown.contains("vault sealed") && shown.contains("<redacted>"),
            "{shown}"
        );
        assert!(!shown.contains(&secret), "{shown}");
        // Garbage with a key in it on stdout: refused, not quoted.
        let e = run("garbage", &format!("echo 'key={secret}'"), 20).to_string();
        assert!(
            e.contains("not one JSON object") && !e.contains(&secret),
            "{e}"
        );
        // Another key's id.
        let e = run(
            "other",
            &format!("echo '{{\"key_id\": \"k2\", \"key\": \"{secret}\"}}'"),
            20,
        );
        assert!(e.to_string().contains("\"k2\""), "{e}");
        assert!(!e.to_string().contains(&secret));
        // A short key.
        let e = run(
            "short",
            "echo '{\"key_id\": \"k1\", \"key\": \"abcd\"}'",
            20,
        );
        assert!(e.to_string().contains("64 hex digits"), "{e}");
        // Hangs: stopped at the timeout, retryable.
        let e = run("hang", "sleep 30", 1);
        assert!(
            e.is_retryable() && e.to_string().contains("no answer within"),
            "{e}"
        );
        // Missing program.
        let s = CommandSource::new(
            &[dir.path().join("absent").display().to_string()],
            Duration::from_secs(5),
        )
        .unwrap();
        let e = s.fetch(&k1, "p1").unwrap_err();
        assert!(e.to_string().contains("cannot run it"), "{e}");
        assert!(CommandSource::new(&[], Duration::from_secs(1)).is_none());
    }

    #[test]
    fn the_key_file_is_a_source_too() {
        let dir = tempfile::tempdir().unwrap();
        let f = KeyFile::new(dir.path().join("keys.json"));
        let k = DataKey::generate();
        let id = KeyId::new("k").unwrap();
        f.add(&id, &k, None, 0).unwrap();
        let s = FileSource(f);
        assert_eq!(s.fetch(&id, "any").unwrap(), k);
        assert!(s.describe().contains("keys.json"));
        let e = s.fetch(&KeyId::new("other").unwrap(), "p").unwrap_err();
        assert!(matches!(e, KeyError::NotFound { .. }), "{e}");
    }
}
