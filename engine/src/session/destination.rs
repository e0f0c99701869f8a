//! Where a recalled object lands: a key becomes a relative path under the destination root,
//! and nothing may escape that root (no `..`, no absolute paths, no NUL bytes, no symbolic link
//! followed under the root).
//!
//! An object is written to a partial file in the root's private directory [`PARTIAL_DIR`]
//! (mode 0700, ours, never a symbolic link), created there with `O_CREAT|O_EXCL|O_NOFOLLOW` under
//! a name with 128 random bits, and renamed into its parent directory once its length and SHA-256
//! check out. The parent directories are opened (and created) one component at a time from the
//! root's descriptor with `O_NOFOLLOW`: a symbolic link or a non-directory on the way refuses the
//! object instead of writing anywhere else. The root itself is the operator's choice and may be
//! reached through links.
//!
//! A partial file is in use while its writer holds an exclusive `flock` on it, from its creation
//! to its rename (or removal). Several recall sessions share a root at once (the drives recalling
//! one job into one directory, the batches of one `recall` call, other workers on the same
//! filesystem), so "stale" cannot mean "not this session's": [`Staging::open`] removes exactly
//! the partial files nobody holds a lock on — those of a process that died (its locks went with
//! it) — and leaves the others. A session removes its own partial files when their objects fail
//! or the session stops, and the private directory when it is left empty.

use std::ffi::{OsStr, OsString};
use std::fs::File;
use std::os::fd::{AsFd, BorrowedFd, OwnedFd};
use std::os::unix::ffi::OsStrExt;
use std::path::{Component, Path, PathBuf};
use std::sync::{Arc, Mutex};

use rustix::fs::{AtFlags, CWD, FileType, FlockOperation, Mode, OFlags};
use rustix::io::Errno;
use tracing::{info, warn};

use super::SessionError;

/// The private directory, directly under a destination root, that holds recall's partial files.
/// No key may begin with it ([`crate::catalogue::validate_key`] refuses it).
pub const PARTIAL_DIR: &str = crate::catalogue::RESERVED_FIRST_SEGMENT;

/// Join `key` under `root`, refusing keys that would leave it (or land in [`PARTIAL_DIR`]).
pub fn safe_join(root: &Path, key: &str) -> Result<PathBuf, SessionError> {
    let refuse = |reason: &str| SessionError::UnsafeKey {
        key: key.to_string(),
        reason: reason.to_string(),
    };
    // The catalogue's one key rule first: a key it accepts is a key recall can place.
    if let Err(e) = crate::catalogue::validate_key(key) {
        return Err(match e {
            crate::catalogue::CatalogueError::InvalidKey { reason, .. } => refuse(&reason),
            other => refuse(&other.to_string()),
        });
    }
    let rel = Path::new(key);
    if rel.is_absolute() {
        return Err(refuse("the key is an absolute path"));
    }
    let mut out = root.to_path_buf();
    let mut depth = 0usize;
    for c in rel.components() {
        match c {
            Component::Normal(s) => {
                out.push(s);
                depth += 1;
            }
            Component::CurDir => {}
            Component::ParentDir => return Err(refuse("the key contains `..`")),
            Component::RootDir | Component::Prefix(_) => {
                return Err(refuse("the key is an absolute path"));
            }
        }
    }
    if depth == 0 {
        return Err(refuse("the key names no file"));
    }
    Ok(out)
}

/// One destination root opened for a recall session: the root's descriptor and its private
/// directory of partial files. Dropped when the session's last partial file is gone: it removes
/// the private directory if that is empty.
pub struct Staging {
    root: PathBuf,
    root_fd: OwnedFd,
    /// The private directory; replaced when another session removed it while it was empty.
    dir: Mutex<Arc<OwnedFd>>,
}

impl std::fmt::Debug for Staging {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Staging").field("root", &self.root).finish()
    }
}

impl Staging {
    /// Open `root` (creating it if missing) and its private directory, and remove the partial
    /// files there that no live writer holds.
    pub fn open(root: &Path) -> Result<Arc<Staging>, String> {
        std::fs::create_dir_all(root).map_err(|e| format!("{}: {e}", root.display()))?;
        let root_fd = rustix::fs::openat(
            CWD,
            root,
            OFlags::RDONLY | OFlags::DIRECTORY | OFlags::CLOEXEC,
            Mode::empty(),
        )
        .map_err(|e| format!("{}: {e}", root.display()))?;
        let dir = open_private(root, &root_fd)?;
        let s = Staging {
            root: root.to_path_buf(),
            root_fd,
            dir: Mutex::new(Arc::new(dir)),
        };
        let removed = s.recover();
        if removed > 0 {
            info!(
                root = %root.display(),
                removed,
                "removed partial files an interrupted recall left"
            );
        }
        Ok(Arc::new(s))
    }

    /// The destination root.
    pub fn root(&self) -> &Path {
        &self.root
    }

    fn private_dir(&self) -> Arc<OwnedFd> {
        self.dir.lock().unwrap_or_else(|e| e.into_inner()).clone()
    }

    /// The private directory `stale` was removed (by another session, while it was empty):
    /// create and open it again, once for every session thread that noticed.
    fn reopen(&self, stale: &Arc<OwnedFd>) -> Result<Arc<OwnedFd>, String> {
        let mut g = self.dir.lock().unwrap_or_else(|e| e.into_inner());
        if Arc::ptr_eq(&g, stale) {
            *g = Arc::new(open_private(&self.root, &self.root_fd)?);
        }
        Ok(g.clone())
    }

    /// Remove the partial files in the private directory that no writer holds; how many.
    pub fn recover(&self) -> usize {
        let dir = self.private_dir();
        let entries = match rustix::fs::Dir::read_from(&*dir) {
            Ok(d) => d,
            Err(e) => {
                warn!(root = %self.root.display(), error = %e, "cannot list the partial files");
                return 0;
            }
        };
        let mut names = Vec::new();
        for e in entries {
            let e = match e {
                Ok(e) => e,
                Err(e) => {
                    warn!(root = %self.root.display(), error = %e, "cannot list the partial files");
                    break;
                }
            };
            let n = e.file_name().to_bytes();
            if is_partial_name(n) {
                names.push(OsStr::from_bytes(n).to_os_string());
            } else if n != b"." && n != b".." {
                warn!(
                    root = %self.root.display(),
                    name = %String::from_utf8_lossy(n),
                    "not a partial file of reel's in {PARTIAL_DIR}; left alone"
                );
            }
        }
        let mut removed = 0;
        for n in names {
            match remove_if_stale(&dir, &n) {
                Ok(true) => removed += 1,
                Ok(false) => {}
                Err(e) => warn!(
                    path = %self.root.join(PARTIAL_DIR).join(&n).display(),
                    error = %e,
                    "cannot remove a stale partial file"
                ),
            }
        }
        removed
    }

    /// A new partial file for the object at `rel` (a path relative to the root, checked by
    /// [`safe_join`]), its parent directories created and opened without following links.
    pub fn create(self: &Arc<Self>, rel: &Path) -> Result<Partial, String> {
        let dest = self.root.join(rel);
        let (parent, final_name) = self.open_parent(rel)?;
        let parent_dev = rustix::fs::fstat(&parent)
            .map_err(|e| format!("{}: {e}", dest.display()))?
            .st_dev;
        let mut dir = self.private_dir();
        for _ in 0..8 {
            let st = rustix::fs::fstat(&*dir).map_err(|e| format!("{}: {e}", self.shown()))?;
            if st.st_dev != parent_dev {
                return Err(format!(
                    "{}: its directory is on another filesystem than {}, and a partial file cannot be renamed across filesystems; recall into that filesystem's directory instead",
                    dest.display(),
                    self.shown()
                ));
            }
            let name = partial_name(&final_name);
            let fd = match rustix::fs::openat(
                &*dir,
                name.as_os_str(),
                OFlags::WRONLY
                    | OFlags::CREATE
                    | OFlags::EXCL
                    | OFlags::NOFOLLOW
                    | OFlags::NOCTTY
                    | OFlags::CLOEXEC,
                Mode::from_raw_mode(0o666),
            ) {
                Ok(fd) => fd,
                Err(Errno::NOENT) => {
                    dir = self.reopen(&dir)?;
                    continue;
                }
                Err(Errno::EXIST) => continue,
                Err(e) => return Err(format!("{}: {e}", self.shown_name(&name))),
            };
            // The file is ours once it is locked and still has its name: between the create and
            // the lock, another session's recovery may have taken it for stale and removed it.
            match rustix::fs::flock(&fd, FlockOperation::NonBlockingLockExclusive) {
                Ok(()) => {}
                Err(Errno::WOULDBLOCK) => continue,
                Err(e) => {
                    let _ = rustix::fs::unlinkat(&*dir, name.as_os_str(), AtFlags::empty());
                    return Err(format!("{}: lock: {e}", self.shown_name(&name)));
                }
            }
            if !same_file(&dir, &name, &fd)
                .map_err(|e| format!("{}: {e}", self.shown_name(&name)))?
            {
                continue;
            }
            return Ok(Partial {
                staging: self.clone(),
                dir,
                name,
                file: File::from(fd),
                parent,
                final_name,
                dest,
                committed: false,
            });
        }
        Err(format!(
            "{}: cannot create a partial file in {} (it keeps being removed)",
            dest.display(),
            self.shown()
        ))
    }

    /// Open the parent directory of `rel` component by component from the root, creating the
    /// missing ones, refusing symbolic links and non-directories; the parent and the file name.
    fn open_parent(&self, rel: &Path) -> Result<(OwnedFd, OsString), String> {
        let dest = self.root.join(rel);
        let mut comps: Vec<&OsStr> = Vec::new();
        for c in rel.components() {
            match c {
                Component::Normal(s) => comps.push(s),
                Component::CurDir => {}
                _ => {
                    return Err(format!(
                        "{}: not a path under the destination {}",
                        dest.display(),
                        self.root.display()
                    ));
                }
            }
        }
        let Some(final_name) = comps.pop() else {
            return Err(format!("{}: names no file", dest.display()));
        };
        if comps.first().copied().unwrap_or(final_name) == PARTIAL_DIR {
            return Err(format!(
                "{}: inside the destination's private directory {PARTIAL_DIR}",
                dest.display()
            ));
        }
        let mut cur: Option<OwnedFd> = None;
        let mut at = self.root.clone();
        for c in comps {
            at.push(c);
            let base = cur.as_ref().map_or(self.root_fd.as_fd(), |f| f.as_fd());
            let next = self.open_dir(base, c, &at)?;
            cur = Some(next);
        }
        let parent = match cur {
            Some(f) => f,
            None => self
                .root_fd
                .try_clone()
                .map_err(|e| format!("{}: {e}", self.root.display()))?,
        };
        Ok((parent, final_name.to_os_string()))
    }

    /// Open (creating if missing) the directory `name` in `base`, never through a link.
    fn open_dir(&self, base: BorrowedFd<'_>, name: &OsStr, at: &Path) -> Result<OwnedFd, String> {
        for _ in 0..4 {
            match rustix::fs::openat(
                base,
                name,
                OFlags::RDONLY | OFlags::DIRECTORY | OFlags::NOFOLLOW | OFlags::CLOEXEC,
                Mode::empty(),
            ) {
                Ok(fd) => return Ok(fd),
                Err(Errno::NOENT) => {
                    match rustix::fs::mkdirat(base, name, Mode::from_raw_mode(0o777)) {
                        Ok(()) | Err(Errno::EXIST) => continue,
                        Err(e) => {
                            return Err(format!(
                                "{}: cannot create the directory: {e}",
                                at.display()
                            ));
                        }
                    }
                }
                Err(Errno::LOOP | Errno::NOTDIR) => {
                    let link = rustix::fs::statat(base, name, AtFlags::SYMLINK_NOFOLLOW)
                        .map(|s| FileType::from_raw_mode(s.st_mode) == FileType::Symlink)
                        .unwrap_or(false);
                    return Err(if link {
                        format!(
                            "{} is a symbolic link; recall does not follow links under the destination {}",
                            at.display(),
                            self.root.display()
                        )
                    } else {
                        format!("{} exists and is not a directory", at.display())
                    });
                }
                Err(e) => return Err(format!("{}: {e}", at.display())),
            }
        }
        Err(format!(
            "{}: the directory keeps disappearing",
            at.display()
        ))
    }

    fn shown(&self) -> String {
        self.root.join(PARTIAL_DIR).display().to_string()
    }

    fn shown_name(&self, name: &OsStr) -> String {
        self.root.join(PARTIAL_DIR).join(name).display().to_string()
    }
}

impl Drop for Staging {
    /// The session is over: remove the private directory if no partial file is left in it.
    fn drop(&mut self) {
        match rustix::fs::unlinkat(&self.root_fd, PARTIAL_DIR, AtFlags::REMOVEDIR) {
            Ok(()) | Err(Errno::NOTEMPTY | Errno::EXIST | Errno::NOENT | Errno::BUSY) => {}
            Err(e) => {
                warn!(path = %self.shown(), error = %e, "cannot remove the private directory")
            }
        }
    }
}

/// A partial file being written: removed when dropped, unless [`Partial::commit`] renamed it
/// into place.
pub struct Partial {
    /// Keeps the root and the private directory open while the file exists.
    staging: Arc<Staging>,
    dir: Arc<OwnedFd>,
    name: OsString,
    /// Open for writing and locked (the lock is released when it is closed).
    file: File,
    parent: OwnedFd,
    final_name: OsString,
    dest: PathBuf,
    committed: bool,
}

impl std::fmt::Debug for Partial {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Partial")
            .field("path", &self.path())
            .field("dest", &self.dest)
            .finish()
    }
}

impl Partial {
    /// The file, to write.
    pub fn file(&mut self) -> &mut File {
        &mut self.file
    }

    /// Where the partial file is (for messages).
    pub fn path(&self) -> PathBuf {
        self.staging.root.join(PARTIAL_DIR).join(&self.name)
    }

    /// Where it goes.
    pub fn dest(&self) -> &Path {
        &self.dest
    }

    /// fsync the file.
    pub fn sync(&self) -> std::io::Result<()> {
        self.file.sync_all()
    }

    /// Rename the file into place. The rename never follows a link at the final name: it
    /// replaces the link itself.
    pub fn commit(mut self) -> Result<(), String> {
        rustix::fs::renameat(
            &*self.dir,
            self.name.as_os_str(),
            &self.parent,
            self.final_name.as_os_str(),
        )
        .map_err(|e| format!("{}: {e}", self.dest.display()))?;
        self.committed = true;
        Ok(())
    }
}

impl Drop for Partial {
    fn drop(&mut self) {
        if self.committed {
            return;
        }
        match rustix::fs::unlinkat(&*self.dir, self.name.as_os_str(), AtFlags::empty()) {
            Ok(()) | Err(Errno::NOENT) => {}
            Err(e) => {
                warn!(path = %self.path().display(), error = %e, "cannot remove a partial file")
            }
        }
    }
}

/// Create (mode 0700) and open the private directory under `root_fd`, refusing a link, a
/// non-directory, one owned by another user or one others can enter.
fn open_private(root: &Path, root_fd: &OwnedFd) -> Result<OwnedFd, String> {
    let shown = root.join(PARTIAL_DIR);
    for _ in 0..4 {
        match rustix::fs::mkdirat(root_fd, PARTIAL_DIR, Mode::from_raw_mode(0o700)) {
            Ok(()) | Err(Errno::EXIST) => {}
            Err(e) => return Err(format!("{}: cannot create: {e}", shown.display())),
        }
        let fd = match rustix::fs::openat(
            root_fd,
            PARTIAL_DIR,
            OFlags::RDONLY | OFlags::DIRECTORY | OFlags::NOFOLLOW | OFlags::CLOEXEC,
            Mode::empty(),
        ) {
            Ok(fd) => fd,
            // Removed by another session between the two calls, while it was empty.
            Err(Errno::NOENT) => continue,
            Err(Errno::LOOP | Errno::NOTDIR) => {
                return Err(format!(
                    "{} is not a directory (or is a symbolic link); recall keeps its partial files there and refuses to write into this destination until it is removed",
                    shown.display()
                ));
            }
            Err(e) => return Err(format!("{}: {e}", shown.display())),
        };
        let st = rustix::fs::fstat(&fd).map_err(|e| format!("{}: {e}", shown.display()))?;
        let me = rustix::process::geteuid().as_raw();
        if st.st_uid != me {
            return Err(format!(
                "{} belongs to uid {}, not to this process's uid {me}; recall refuses to keep partial files there",
                shown.display(),
                st.st_uid
            ));
        }
        if st.st_mode & 0o077 != 0 {
            return Err(format!(
                "{} has mode {:o}, open to other users; recall refuses to keep partial files there (chmod 700 it)",
                shown.display(),
                st.st_mode & 0o7777
            ));
        }
        return Ok(fd);
    }
    Err(format!("{}: keeps disappearing", shown.display()))
}

/// `name` in `dir` is still the file open as `fd`.
fn same_file(dir: &OwnedFd, name: &OsStr, fd: &OwnedFd) -> Result<bool, Errno> {
    let open = rustix::fs::fstat(fd)?;
    match rustix::fs::statat(dir, name, AtFlags::SYMLINK_NOFOLLOW) {
        Ok(s) => Ok(s.st_dev == open.st_dev && s.st_ino == open.st_ino),
        Err(Errno::NOENT) => Ok(false),
        Err(e) => Err(e),
    }
}

/// Remove the partial file `name` if no writer holds it; whether it was removed.
fn remove_if_stale(dir: &OwnedFd, name: &OsStr) -> Result<bool, Errno> {
    let fd = match rustix::fs::openat(
        dir,
        name,
        OFlags::RDWR | OFlags::NOFOLLOW | OFlags::NONBLOCK | OFlags::NOCTTY | OFlags::CLOEXEC,
        Mode::empty(),
    ) {
        Ok(fd) => fd,
        // Renamed into place or removed meanwhile.
        Err(Errno::NOENT) => return Ok(false),
        // A link: not written by reel, never followed; removing it removes the link only.
        Err(Errno::LOOP) => {
            rustix::fs::unlinkat(dir, name, AtFlags::empty())?;
            return Ok(true);
        }
        Err(e) => return Err(e),
    };
    if FileType::from_raw_mode(rustix::fs::fstat(&fd)?.st_mode) != FileType::RegularFile {
        return Ok(false);
    }
    match rustix::fs::flock(&fd, FlockOperation::NonBlockingLockExclusive) {
        Ok(()) => {}
        // A live writer's.
        Err(Errno::WOULDBLOCK) => return Ok(false),
        Err(e) => return Err(e),
    }
    // Its writer may have renamed it into place and closed it since we listed it.
    if !same_file(dir, name, &fd)? {
        return Ok(false);
    }
    rustix::fs::unlinkat(dir, name, AtFlags::empty())?;
    Ok(true)
}

/// 128 random bits in hex, then (for a listing) the start of the final file's name.
fn partial_name(final_name: &OsStr) -> OsString {
    let mut short = String::new();
    for c in final_name
        .to_string_lossy()
        .chars()
        .filter(|c| !c.is_control())
    {
        if short.len() + c.len_utf8() > 64 {
            break;
        }
        short.push(c);
    }
    OsString::from(format!("{:032x}-{short}", rand::random::<u128>()))
}

/// Whether `n` is a name [`partial_name`] makes.
fn is_partial_name(n: &[u8]) -> bool {
    n.len() >= 33
        && n[..32]
            .iter()
            .all(|b| b.is_ascii_digit() || (b'a'..=b'f').contains(b))
        && n[32] == b'-'
}

#[cfg(test)]
mod tests {
    use std::io::Write;
    use std::os::unix::fs::PermissionsExt;

    use super::*;

    #[test]
    fn ordinary_keys_join() {
        let r = Path::new("/dst");
        assert_eq!(
            safe_join(r, "a/b/c.txt").unwrap(),
            PathBuf::from("/dst/a/b/c.txt")
        );
        assert_eq!(
            safe_join(r, ".a/b..").unwrap(),
            PathBuf::from("/dst/.a/b..")
        );
        assert_eq!(
            safe_join(r, "a/.reel-partial").unwrap(),
            PathBuf::from("/dst/a/.reel-partial")
        );
    }

    #[test]
    fn escaping_keys_are_refused() {
        let r = Path::new("/dst");
        for k in [
            "../x",
            "a/../../x",
            "/etc/passwd",
            "a\0b",
            "",
            ".",
            "a/..",
            "./a",
            "a//b",
            "a/",
            ".reel-partial/x",
            ".reel-partial",
        ] {
            assert!(safe_join(r, k).is_err(), "{k:?} accepted");
            // The same rule as the catalogue's: what it refuses, recall refuses.
            assert!(crate::catalogue::validate_key(k).is_err(), "{k:?}");
        }
    }

    fn entries(d: &Path) -> Vec<String> {
        let mut v: Vec<String> = std::fs::read_dir(d)
            .map(|r| {
                r.map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
                    .collect()
            })
            .unwrap_or_default();
        v.sort();
        v
    }

    fn write(st: &Arc<Staging>, rel: &str, data: &[u8]) -> Result<(), String> {
        let mut p = st.create(Path::new(rel))?;
        p.file().write_all(data).map_err(|e| e.to_string())?;
        p.commit()
    }

    #[test]
    fn a_partial_file_is_renamed_into_place_and_the_private_dir_goes() {
        let root = tempfile::tempdir().unwrap();
        let st = Staging::open(root.path()).unwrap();
        let mode = std::fs::metadata(root.path().join(PARTIAL_DIR))
            .unwrap()
            .permissions()
            .mode();
        assert_eq!(mode & 0o777, 0o700);
        let p = st.create(Path::new("d/e/f.bin")).unwrap();
        let listed = entries(&root.path().join(PARTIAL_DIR));
        assert_eq!(listed.len(), 1);
        assert!(is_partial_name(listed[0].as_bytes()), "{listed:?}");
        assert!(listed[0].ends_with("-f.bin"), "{listed:?}");
        assert!(p.path().exists());
        drop(p);
        assert!(entries(&root.path().join(PARTIAL_DIR)).is_empty());
        write(&st, "d/e/f.bin", b"hello").unwrap();
        assert_eq!(
            std::fs::read(root.path().join("d/e/f.bin")).unwrap(),
            b"hello"
        );
        drop(st);
        assert_eq!(entries(root.path()), vec!["d".to_string()]);
    }

    #[test]
    fn a_planted_link_at_the_private_dir_is_refused() {
        let root = tempfile::tempdir().unwrap();
        let outside = tempfile::tempdir().unwrap();
        std::os::unix::fs::symlink(outside.path(), root.path().join(PARTIAL_DIR)).unwrap();
        let e = Staging::open(root.path()).unwrap_err();
        assert!(e.contains("symbolic link"), "{e}");
        assert!(entries(outside.path()).is_empty());
        // A file, or a directory others can write, is refused too.
        std::fs::remove_file(root.path().join(PARTIAL_DIR)).unwrap();
        std::fs::write(root.path().join(PARTIAL_DIR), b"").unwrap();
        assert!(Staging::open(root.path()).is_err());
        std::fs::remove_file(root.path().join(PARTIAL_DIR)).unwrap();
        std::fs::create_dir(root.path().join(PARTIAL_DIR)).unwrap();
        std::fs::set_permissions(
            root.path().join(PARTIAL_DIR),
            std::fs::Permissions::from_mode(0o777),
        )
        .unwrap();
        let e = Staging::open(root.path()).unwrap_err();
        assert!(e.contains("mode"), "{e}");
    }

    #[test]
    fn a_symlinked_parent_component_is_refused() {
        let root = tempfile::tempdir().unwrap();
        let outside = tempfile::tempdir().unwrap();
        std::os::unix::fs::symlink(outside.path(), root.path().join("link")).unwrap();
        std::fs::create_dir(root.path().join("d")).unwrap();
        std::os::unix::fs::symlink(outside.path(), root.path().join("d/inner")).unwrap();
        std::fs::write(root.path().join("plain"), b"x").unwrap();
        let st = Staging::open(root.path()).unwrap();
        for rel in ["link/file", "d/inner/file", "d/inner/x/y"] {
            let e = st.create(Path::new(rel)).unwrap_err();
            assert!(e.contains("symbolic link"), "{rel}: {e}");
        }
        let e = st.create(Path::new("plain/file")).unwrap_err();
        assert!(e.contains("not a directory"), "{e}");
        assert!(entries(outside.path()).is_empty());
        write(&st, "d/ok", b"1").unwrap();
        drop(st);
        assert!(!root.path().join(PARTIAL_DIR).exists());
    }

    #[test]
    fn a_link_at_the_final_name_is_replaced_not_followed() {
        let root = tempfile::tempdir().unwrap();
        let outside = tempfile::tempdir().unwrap();
        let victim = outside.path().join("victim");
        std::fs::write(&victim, b"keep").unwrap();
        std::os::unix::fs::symlink(&victim, root.path().join("f")).unwrap();
        let st = Staging::open(root.path()).unwrap();
        write(&st, "f", b"new").unwrap();
        assert_eq!(std::fs::read(&victim).unwrap(), b"keep");
        let m = std::fs::symlink_metadata(root.path().join("f")).unwrap();
        assert!(m.is_file());
        assert_eq!(std::fs::read(root.path().join("f")).unwrap(), b"new");
    }

    #[test]
    fn two_partials_for_one_path_both_land() {
        let root = tempfile::tempdir().unwrap();
        let st = Staging::open(root.path()).unwrap();
        let mut a = st.create(Path::new("k/x")).unwrap();
        let mut b = st.create(Path::new("k/x")).unwrap();
        assert_ne!(a.path(), b.path());
        a.file().write_all(b"first").unwrap();
        b.file().write_all(b"second").unwrap();
        a.commit().unwrap();
        b.commit().unwrap();
        assert_eq!(std::fs::read(root.path().join("k/x")).unwrap(), b"second");
        drop(st);
        assert!(!root.path().join(PARTIAL_DIR).exists());
    }

    #[test]
    fn stale_partials_go_live_ones_stay() {
        let root = tempfile::tempdir().unwrap();
        let st = Staging::open(root.path()).unwrap();
        let live = st.create(Path::new("live")).unwrap();
        // A dead process's partial: a file nobody holds a lock on.
        let dir = root.path().join(PARTIAL_DIR);
        let stale = dir.join(format!("{:032x}-dead", 7u128));
        std::fs::write(&stale, b"half").unwrap();
        let other = dir.join("not-ours");
        std::fs::write(&other, b"x").unwrap();
        // Another session on the same root starts.
        let st2 = Staging::open(root.path()).unwrap();
        assert!(!stale.exists());
        assert!(live.path().exists(), "a live partial was removed");
        assert!(other.exists());
        drop(live);
        std::fs::remove_file(&other).unwrap();
        drop(st);
        // The other session still holds the root: its private dir comes back when it needs it.
        write(&st2, "later", b"z").unwrap();
        drop(st2);
        assert!(!dir.exists());
        assert_eq!(entries(root.path()), vec!["later".to_string()]);
    }
}
