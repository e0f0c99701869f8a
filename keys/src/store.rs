//! The key file (`[keys] file`, `keys.json` in the data directory by default): the keys this
//! host may encrypt and decrypt with, by id, in JSON.
//!
//! Workers read it unattended, so it holds the keys themselves (and, where a passphrase was
//! given, a protected copy for the paper key and the cartridges). What keeps them is the
//! file's ownership: it is opened without following a symbolic link and, on the opened
//! descriptor, must be a regular file owned by reel's user with no permission for anyone else
//! (mode 0600 or stricter). Anything else is refused with what to do; reel never loosens or
//! fixes a mode itself.
//!
//! A change is written to a new file (mode 0600), synced and renamed over the old one, under
//! a lock file beside it, so two `reel key` commands at once cannot lose a key. A key is never
//! replaced or removed by reel: an id, once given, names the same key forever.

use std::fs::File;
use std::io::{Read, Write};
use std::os::fd::OwnedFd;
use std::path::{Path, PathBuf};

use rustix::fs::{FileType, FlockOperation, Mode, OFlags};
use serde::{Deserialize, Serialize};
use zeroize::{Zeroize, Zeroizing};

use crate::error::KeyError;
use crate::id::KeyId;
use crate::key::DataKey;
use crate::protect::Protected;

/// The file format's version.
const FORMAT: u32 = 1;
/// The largest key file read (a million keys would be far smaller than this).
const MAX_FILE_BYTES: u64 = 64 << 20;

/// What the file holds.
#[derive(Default, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
struct FileForm {
    format: u32,
    keys: Vec<Entry>,
}

/// One key in the file.
#[derive(Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
struct Entry {
    id: String,
    created_unix: i64,
    fingerprint: String,
    /// 64 hex digits.
    key: String,
    /// The protected copy, hex, if a passphrase was given.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    protected: Option<String>,
}

impl Drop for Entry {
    fn drop(&mut self) {
        self.key.zeroize();
    }
}

/// What may be shown of a key: never its bytes.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct KeyInfo {
    /// Its id.
    pub id: String,
    /// Its fingerprint.
    pub fingerprint: String,
    /// When it was created or imported (unix seconds).
    pub created_unix: i64,
    /// Whether a passphrase-protected copy is kept with it.
    pub protected: bool,
}

/// The key file at a path.
#[derive(Debug, Clone)]
pub struct KeyFile {
    path: PathBuf,
}

fn io<'a>(doing: &'static str, file: &'a Path) -> impl FnOnce(std::io::Error) -> KeyError + 'a {
    move |error| KeyError::Io {
        doing,
        file: file.to_path_buf(),
        error,
    }
}

/// Check an opened file: a regular file of this user's, readable by no one else.
fn vet(fd: &OwnedFd, path: &Path) -> Result<u64, KeyError> {
    let st = rustix::fs::fstat(fd).map_err(|e| io("checking", path)(e.into()))?;
    let unsafe_file = |why: String| KeyError::Unsafe {
        file: path.to_path_buf(),
        why,
    };
    if FileType::from_raw_mode(st.st_mode) != FileType::RegularFile {
        return Err(unsafe_file(
            "it is not a regular file; give the path of the key file itself".into(),
        ));
    }
    let me = rustix::process::geteuid().as_raw();
    if st.st_uid != me {
        return Err(unsafe_file(format!(
            "it is owned by uid {}, not by reel's user (uid {me}); `chown` it to that user",
            st.st_uid
        )));
    }
    if st.st_mode & 0o077 != 0 {
        return Err(unsafe_file(format!(
            "its mode {:04o} lets other users at it; `chmod 600 {}`",
            st.st_mode & 0o7777,
            path.display()
        )));
    }
    Ok(st.st_size as u64)
}

impl KeyFile {
    /// The key file at `path` (it need not exist yet).
    pub fn new(path: impl Into<PathBuf>) -> KeyFile {
        KeyFile { path: path.into() }
    }

    /// Its path.
    pub fn path(&self) -> &Path {
        &self.path
    }

    /// Read the file; a file that does not exist holds no keys.
    fn read(&self) -> Result<FileForm, KeyError> {
        let fd = match rustix::fs::open(
            &self.path,
            // O_NONBLOCK: a FIFO put in its place is opened at once (and refused below), not
            // waited on for a writer.
            OFlags::RDONLY | OFlags::NOFOLLOW | OFlags::CLOEXEC | OFlags::NOCTTY | OFlags::NONBLOCK,
            Mode::empty(),
        ) {
            Ok(fd) => fd,
            Err(rustix::io::Errno::NOENT) => return Ok(FileForm::default()),
            Err(rustix::io::Errno::LOOP) => {
                return Err(KeyError::Unsafe {
                    file: self.path.clone(),
                    why: "it is a symbolic link; give the path of the key file itself".into(),
                });
            }
            Err(e) => return Err(io("opening", &self.path)(e.into())),
        };
        let size = vet(&fd, &self.path)?;
        if size > MAX_FILE_BYTES {
            return Err(KeyError::Damaged {
                file: self.path.clone(),
                why: format!("it is {size} bytes, more than a key file can be"),
            });
        }
        let mut text = Zeroizing::new(Vec::with_capacity(size as usize));
        File::from(fd)
            .take(MAX_FILE_BYTES)
            .read_to_end(&mut text)
            .map_err(io("reading", &self.path))?;
        let form: FileForm = serde_json::from_slice(&text).map_err(|e| KeyError::Damaged {
            file: self.path.clone(),
            // Where, never serde's own words: they quote the value they did not expect, which
            // may be a key.
            why: format!(
                "{} at line {} column {}",
                match e.classify() {
                    serde_json::error::Category::Io => "a read error",
                    serde_json::error::Category::Syntax => "not JSON",
                    serde_json::error::Category::Data => "not the key file's fields",
                    serde_json::error::Category::Eof => "it ends early",
                },
                e.line(),
                e.column()
            ),
        })?;
        if form.format != FORMAT {
            return Err(KeyError::Damaged {
                file: self.path.clone(),
                why: format!(
                    "format {} is not one this reel reads (it reads {FORMAT})",
                    form.format
                ),
            });
        }
        Ok(form)
    }

    /// Write the file anew: a temporary file (0600) beside it, synced, renamed over it.
    fn write(&self, form: &FileForm) -> Result<(), KeyError> {
        let dir = match self.path.parent() {
            Some(d) if !d.as_os_str().is_empty() => d.to_path_buf(),
            _ => PathBuf::from("."),
        };
        let name = self
            .path
            .file_name()
            .map(|n| n.to_string_lossy().into_owned())
            .unwrap_or_else(|| "keys.json".into());
        let tmp = dir.join(format!(
            ".{name}.{}.{:016x}.tmp",
            std::process::id(),
            rand::random::<u64>()
        ));
        let fd = rustix::fs::open(
            &tmp,
            OFlags::WRONLY | OFlags::CREATE | OFlags::EXCL | OFlags::NOFOLLOW | OFlags::CLOEXEC,
            Mode::from_raw_mode(0o600),
        )
        .map_err(|e| io("creating", &tmp)(e.into()))?;
        let text =
            Zeroizing::new(
                serde_json::to_vec_pretty(form).map_err(|e| KeyError::Damaged {
                    file: self.path.clone(),
                    why: format!("cannot encode it: {e}"),
                })?,
            );
        let written = (|| {
            rustix::fs::fchmod(&fd, Mode::from_raw_mode(0o600))?;
            let mut f = File::from(fd);
            f.write_all(&text)?;
            f.write_all(b"\n")?;
            f.sync_all()?;
            std::fs::rename(&tmp, &self.path)?;
            File::open(&dir)?.sync_all()
        })();
        if let Err(e) = written {
            let _ = std::fs::remove_file(&tmp);
            return Err(io("writing", &self.path)(e));
        }
        Ok(())
    }

    /// Hold the lock file beside the key file while `f` reads and writes it.
    fn locked<T>(&self, f: impl FnOnce() -> Result<T, KeyError>) -> Result<T, KeyError> {
        let mut lock = self.path.clone().into_os_string();
        lock.push(".lock");
        let lock = PathBuf::from(lock);
        let fd = rustix::fs::open(
            &lock,
            OFlags::RDWR | OFlags::CREATE | OFlags::NOFOLLOW | OFlags::CLOEXEC | OFlags::NONBLOCK,
            Mode::from_raw_mode(0o600),
        )
        .map_err(|e| io("opening the lock file", &lock)(e.into()))?;
        rustix::fs::flock(&fd, FlockOperation::LockExclusive)
            .map_err(|e| io("locking", &lock)(e.into()))?;
        f()
    }

    /// Every key's id, fingerprint and date, in id order.
    pub fn list(&self) -> Result<Vec<KeyInfo>, KeyError> {
        let form = self.read()?;
        let mut out: Vec<KeyInfo> = form.keys.iter().map(info).collect();
        out.sort_by(|a, b| a.id.cmp(&b.id));
        Ok(out)
    }

    /// What may be shown of key `id`.
    pub fn info(&self, id: &KeyId) -> Result<KeyInfo, KeyError> {
        let form = self.read()?;
        let e = self.entry(&form, id)?;
        Ok(info(e))
    }

    fn entry<'a>(&self, form: &'a FileForm, id: &KeyId) -> Result<&'a Entry, KeyError> {
        form.keys
            .iter()
            .find(|e| e.id == id.as_str())
            .ok_or_else(|| KeyError::NotFound {
                id: id.to_string(),
                place: format!("key file {}", self.path.display()),
            })
    }

    /// Key `id`, checked against its fingerprint.
    pub fn get(&self, id: &KeyId) -> Result<DataKey, KeyError> {
        let form = self.read()?;
        let e = self.entry(&form, id)?;
        let key = DataKey::from_hex(&e.key).ok_or_else(|| KeyError::Damaged {
            file: self.path.clone(),
            why: format!("key {id} is not 64 hex digits"),
        })?;
        let got = key.fingerprint().to_string();
        if got != e.fingerprint {
            return Err(KeyError::Mismatch {
                id: id.to_string(),
                expected: e.fingerprint.clone(),
                got,
            });
        }
        Ok(key)
    }

    /// The passphrase-protected copy of key `id`, if one is kept.
    pub fn protected_copy(&self, id: &KeyId) -> Result<Option<Protected>, KeyError> {
        let form = self.read()?;
        let e = self.entry(&form, id)?;
        let Some(p) = &e.protected else {
            return Ok(None);
        };
        let damaged = |why: String| KeyError::Damaged {
            file: self.path.clone(),
            why: format!("the protected copy of key {id}: {why}"),
        };
        let bytes = hex::decode(p).map_err(|e| damaged(e.to_string()))?;
        Protected::from_bytes(&bytes).map(Some).map_err(damaged)
    }

    /// Add key `id` (with its protected copy, if any); refused if the id is taken or the key
    /// is already in the file under another id.
    pub fn add(
        &self,
        id: &KeyId,
        key: &DataKey,
        protected: Option<&Protected>,
        created_unix: i64,
    ) -> Result<KeyInfo, KeyError> {
        self.locked(|| {
            let mut form = self.read()?;
            form.format = FORMAT;
            if form.keys.iter().any(|e| e.id == id.as_str()) {
                return Err(KeyError::Exists {
                    id: id.to_string(),
                    file: self.path.clone(),
                });
            }
            let fingerprint = key.fingerprint().to_string();
            if let Some(other) = form.keys.iter().find(|e| e.fingerprint == fingerprint) {
                return Err(KeyError::Exists {
                    id: format!("{id} (this key is already there as {})", other.id),
                    file: self.path.clone(),
                });
            }
            let entry = Entry {
                id: id.to_string(),
                created_unix,
                fingerprint,
                key: key.to_hex().to_string(),
                protected: protected.map(|p| hex::encode(p.as_bytes())),
            };
            let shown = info(&entry);
            form.keys.push(entry);
            self.write(&form)?;
            Ok(shown)
        })
    }
}

fn info(e: &Entry) -> KeyInfo {
    KeyInfo {
        id: e.id.clone(),
        fingerprint: e.fingerprint.clone(),
        created_unix: e.created_unix,
        protected: e.protected.is_some(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::os::unix::fs::PermissionsExt;

    fn id(s: &str) -> KeyId {
        KeyId::new(s).unwrap()
    }

    #[test]
    fn keys_are_added_listed_and_read_back_never_replaced() {
        let dir = tempfile::tempdir().unwrap();
        let f = KeyFile::new(dir.path().join("keys.json"));
        assert!(f.list().unwrap().is_empty());
        assert!(matches!(f.get(&id("a")), Err(KeyError::NotFound { .. })));
        let a = DataKey::generate();
        let info = f.add(&id("a"), &a, None, 7).unwrap();
        assert_eq!(info.fingerprint, a.fingerprint().to_string());
        let mode = std::fs::metadata(f.path()).unwrap().permissions().mode();
        assert_eq!(mode & 0o777, 0o600);
        assert_eq!(f.get(&id("a")).unwrap(), a);
        assert!(matches!(
            f.add(&id("a"), &DataKey::generate(), None, 8),
            Err(KeyError::Exists { .. })
        ));
        let e = f.add(&id("b"), &a, None, 8).unwrap_err().to_string();
        assert!(e.contains("already there as a"), "{e}");
        let b = DataKey::generate();
        f.add(&id("b"), &b, None, 9).unwrap();
        let ids: Vec<String> = f.list().unwrap().into_iter().map(|k| k.id).collect();
        assert_eq!(ids, ["a", "b"]);
        assert_eq!(f.get(&id("a")).unwrap(), a);
        assert_eq!(f.get(&id("b")).unwrap(), b);
        assert_eq!(f.protected_copy(&id("a")).unwrap(), None);
    }

    #[test]
    fn a_file_others_can_read_or_a_link_is_refused() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("keys.json");
        let f = KeyFile::new(&path);
        f.add(&id("a"), &DataKey::generate(), None, 1).unwrap();
        for mode in [0o640, 0o604, 0o660] {
            std::fs::set_permissions(&path, std::fs::Permissions::from_mode(mode)).unwrap();
            let e = f.get(&id("a")).unwrap_err();
            assert!(matches!(e, KeyError::Unsafe { .. }), "{mode:o}: {e}");
            assert!(e.to_string().contains("chmod 600"), "{e}");
            // Adding is refused too: the file is read first.
            assert!(f.add(&id("b"), &DataKey::generate(), None, 1).is_err());
        }
        std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o600)).unwrap();
        let link = dir.path().join("link.json");
        std::os::unix::fs::symlink(&path, &link).unwrap();
        let e = KeyFile::new(&link).list().unwrap_err();
        assert!(e.to_string().contains("symbolic link"), "{e}");
        let e = KeyFile::new(dir.path()).list().unwrap_err();
        assert!(e.to_string().contains("not a regular file"), "{e}");
        // A FIFO in its place is refused at once, not waited on.
        let fifo = dir.path().join("fifo.json");
        assert!(
            std::process::Command::new("mkfifo")
                .arg("-m")
                .arg("600")
                .arg(&fifo)
                .status()
                .unwrap()
                .success()
        );
        let e = KeyFile::new(&fifo).list().unwrap_err();
        assert!(e.to_string().contains("not a regular file"), "{e}");
    }

    #[test]
    fn a_damaged_file_says_so_without_quoting_it() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("keys.json");
        let secret = "ab".repeat(32);
        for text in [
            format!("{{\"format\":1,\"keys\":[{{\"key\":\"{secret}\""),
            format!("{{\"format\":1,\"keys\":[\"{secret}\"]}}"),
            format!("{{\"format\":\"{secret}\",\"keys\":[]}}"),
            format!("{{\"format\":1,\"{secret}\":1}}"),
        ] {
            std::fs::write(&path, text).unwrap();
            std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o600)).unwrap();
            let e = KeyFile::new(&path).list().unwrap_err().to_string();
            assert!(e.contains("damaged"), "{e}");
            assert!(!e.contains(&secret), "{e}");
        }
    }
}
