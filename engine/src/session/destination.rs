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

use rustix::fs::{
    AtFlags, CWD, FileType, FlockOperation, Gid, Mode, OFlags, RenameFlags, Timespec, Timestamps,
    Uid,
};
use rustix::io::Errno;
use serde::{Deserialize, Serialize};
use sha2::{Digest, Sha256};
use tracing::{info, warn};

use super::SessionError;
use crate::format::{ObjectKind, ObjectMeta};

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
        Staging::open_within(root, None)
    }

    /// [`Staging::open`], with `root` reached beneath `confine` when given: every directory
    /// below `confine` is opened (or created) with no symbolic link followed
    /// ([`crate::session::confine`]), so a recall confined to an API token's root cannot be
    /// led out of it.
    pub fn open_within(root: &Path, confine: Option<&Path>) -> Result<Arc<Staging>, String> {
        let root_fd = match confine {
            None => {
                std::fs::create_dir_all(root).map_err(|e| format!("{}: {e}", root.display()))?;
                rustix::fs::openat(
                    CWD,
                    root,
                    OFlags::RDONLY | OFlags::DIRECTORY | OFlags::CLOEXEC,
                    Mode::empty(),
                )
                .map_err(|e| format!("{}: {e}", root.display()))?
            }
            Some(c) => {
                let rel = super::confine::relative_to(c, root).map_err(|e| e.to_string())?;
                let root_path =
                    super::confine::open_root(c).map_err(|e| super::confine::describe(c, &e))?;
                // A descriptor that can be read (listed) and written through, of the same
                // directory (O_PATH cannot serve mkdirat's recovery listing).
                let mut fd = rustix::fs::openat(
                    &root_path,
                    ".",
                    OFlags::RDONLY | OFlags::DIRECTORY | OFlags::CLOEXEC,
                    Mode::empty(),
                )
                .map_err(|e| format!("{}: {e}", c.display()))?;
                let mut at = c.to_path_buf();
                for comp in rel.components() {
                    at.push(comp);
                    fd = open_dir_at(fd.as_fd(), comp.as_os_str(), &at, c)?;
                }
                fd
            }
        };
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
                // Read too: a symbolic link's target is read back from it (commit_as).
                OFlags::RDWR
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
        open_dir_at(base, name, at, &self.root)
    }

    fn shown(&self) -> String {
        self.root.join(PARTIAL_DIR).display().to_string()
    }

    fn shown_name(&self, name: &OsStr) -> String {
        self.root.join(PARTIAL_DIR).join(name).display().to_string()
    }
}

/// Open (creating if missing) the directory `name` in `base` (`at` is its whole path, for
/// messages), never through a link: the walk of a destination below `root`.
fn open_dir_at(
    base: BorrowedFd<'_>,
    name: &OsStr,
    at: &Path,
    root: &Path,
) -> Result<OwnedFd, String> {
    {
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
                            root.display()
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

    /// Append `data` at the file's end (`at` bytes written so far). With `holes`, every
    /// 4 KiB block of the file that `data` fills with zeros only is skipped, left as a hole,
    /// instead of written; [`Partial::set_len`] then gives the file its whole length.
    pub fn append(&mut self, data: &[u8], at: u64, holes: bool) -> std::io::Result<()> {
        use std::io::{Seek, SeekFrom, Write};
        if !holes {
            return self.file.write_all(data);
        }
        const BLOCK: u64 = 4096;
        let mut off = 0usize;
        let mut pos = at;
        while off < data.len() {
            let to_boundary = (BLOCK - pos % BLOCK) as usize;
            let n = to_boundary.min(data.len() - off);
            let piece = &data[off..off + n];
            if n as u64 == BLOCK && piece.iter().all(|b| *b == 0) {
                self.file.seek(SeekFrom::Current(n as i64))?;
            } else {
                self.file.write_all(piece)?;
            }
            off += n;
            pos += n as u64;
        }
        Ok(())
    }

    /// Give the file its length (a hole at its end has no bytes written to make it).
    pub fn set_len(&self, len: u64) -> std::io::Result<()> {
        self.file.set_len(len)
    }

    /// fsync the file.
    pub fn sync(&self) -> std::io::Result<()> {
        self.file.sync_all()
    }

    /// Rename the file into place, replacing whatever is at the final name. The rename never
    /// follows a link at the final name: it replaces the link itself.
    pub fn commit(self) -> Result<(), String> {
        self.commit_as(&Placement {
            overwrite: Overwrite::Always,
            meta: None,
            sha256: [0; 32],
            length: 0,
        })
        .map(|_| ())
    }

    /// Give the file the owner (only when running as root) and modification time of `meta`,
    /// before it is synced and renamed into place; its permission bits are applied through its
    /// descriptor once it is in place ([`Partial::commit_as`]), so a partial file stays one
    /// reel can open (and recovery can remove) whatever mode the object had. A symbolic link's
    /// metadata is applied to the link at [`Partial::commit_as`] instead.
    pub fn set_meta(&self, meta: &ObjectMeta) -> Result<(), String> {
        if meta.kind != ObjectKind::File {
            return Ok(());
        }
        let fail = |what: &str, e: Errno| format!("{}: {what}: {e}", self.dest.display());
        let root = rustix::process::geteuid().is_root();
        if root {
            // Before the mode: a change of owner clears the set-user-ID and set-group-ID bits.
            rustix::fs::fchown(
                &self.file,
                Some(Uid::from_raw(meta.uid)),
                Some(Gid::from_raw(meta.gid)),
            )
            .map_err(|e| fail("chown", e))?;
        }
        rustix::fs::futimens(&self.file, &times(meta.mtime_ns))
            .map_err(|e| fail("set the modification time", e))?;
        Ok(())
    }

    /// Put the object in place as `p` says: a regular file renamed into place, or, for a
    /// symbolic link (`p.meta` of kind symlink), a link whose target is the file's bytes. What
    /// is at the final name already is handled by `p.overwrite`: an identical file (same
    /// length and SHA-256, or a link with the same target) is left as it is and reported
    /// [`Placed::Identical`]; anything else is replaced only as the policy allows, and a refusal
    /// says what is there and how to replace it.
    pub fn commit_as(mut self, p: &Placement) -> Result<Placed, String> {
        let link = p.meta.filter(|m| m.kind == ObjectKind::Symlink);
        // The name renamed into place: the partial file, or a link made beside it.
        let (from, made_link) = match &link {
            Some(m) => (self.make_link(m)?, true),
            None => (self.name.clone(), false),
        };
        let result = self.place(&from, link.is_some(), p);
        if made_link && !matches!(result, Ok(Placed::Written)) {
            let _ = rustix::fs::unlinkat(&*self.dir, from.as_os_str(), AtFlags::empty());
        }
        if matches!(result, Ok(Placed::Written)) && !made_link {
            self.committed = true;
            // The mode last, through the descriptor (the name may be another file's by now).
            if let Some(m) = p.meta.filter(|m| m.kind == ObjectKind::File) {
                let root = rustix::process::geteuid().is_root();
                rustix::fs::fchmod(&self.file, Mode::from_raw_mode(restored_mode(m.mode, root)))
                    .map_err(|e| format!("{}: chmod: {e}", self.dest.display()))?;
            }
        }
        result
    }

    /// Rename `from` (in the private directory) to the final name as the policy allows.
    fn place(&self, from: &OsStr, link: bool, p: &Placement) -> Result<Placed, String> {
        let shown = self.dest.display();
        let existing = match rustix::fs::statat(
            &self.parent,
            self.final_name.as_os_str(),
            AtFlags::SYMLINK_NOFOLLOW,
        ) {
            Ok(st) => Some(st),
            Err(Errno::NOENT) => None,
            Err(e) => return Err(format!("{shown}: {e}")),
        };
        if let Some(st) = &existing
            && p.overwrite != Overwrite::Always
        {
            if self.is_identical(st, link, p) {
                return Ok(Placed::Identical);
            }
            let what = describe(st);
            match p.overwrite {
                Overwrite::Never => {
                    return Err(format!(
                        "{shown} exists ({what}) and is not replaced (overwrite policy `never`); recall with overwrite `if-newer` or `always` to replace it, or into another directory"
                    ));
                }
                Overwrite::IfNewer => {
                    let theirs =
                        i128::from(st.st_mtime) * 1_000_000_000 + i128::from(st.st_mtime_nsec);
                    match p.meta {
                        Some(m) if i128::from(m.mtime_ns) > theirs => {}
                        Some(_) => {
                            return Err(format!(
                                "{shown} exists ({what}) and is as new as the archived copy or newer; kept (overwrite policy `if-newer`); recall with overwrite `always` to replace it"
                            ));
                        }
                        None => {
                            return Err(format!(
                                "{shown} exists ({what}) and the archive recorded no modification time to compare; kept (overwrite policy `if-newer`); recall with overwrite `always` to replace it"
                            ));
                        }
                    }
                }
                Overwrite::Always => {}
            }
        }
        let flags = if existing.is_none() && p.overwrite != Overwrite::Always {
            // Nothing there: and nothing may appear there meanwhile and be replaced.
            RenameFlags::NOREPLACE
        } else {
            RenameFlags::empty()
        };
        match rustix::fs::renameat_with(
            &*self.dir,
            from,
            &self.parent,
            self.final_name.as_os_str(),
            flags,
        ) {
            Ok(()) => Ok(Placed::Written),
            Err(Errno::EXIST) => Err(format!(
                "{shown} appeared while the object was recalled and is not replaced (overwrite policy `{}`)",
                p.overwrite.as_str()
            )),
            // A filesystem without RENAME_NOREPLACE (NFS, CIFS, some FUSE): a hard link is made
            // just as atomically (it fails if the name exists; a symbolic link is linked itself,
            // not its target), then the private name goes.
            Err(Errno::INVAL) if !flags.is_empty() => match rustix::fs::linkat(
                &*self.dir,
                from,
                &self.parent,
                self.final_name.as_os_str(),
                AtFlags::empty(),
            ) {
                Ok(()) => {
                    let _ = rustix::fs::unlinkat(&*self.dir, from, AtFlags::empty());
                    Ok(Placed::Written)
                }
                Err(Errno::EXIST) => Err(format!(
                    "{shown} appeared while the object was recalled and is not replaced (overwrite policy `{}`)",
                    p.overwrite.as_str()
                )),
                Err(e) => Err(format!(
                    "{shown}: this filesystem can neither rename without replacing nor link ({e}), so overwrite policy `{}` cannot be kept; recall with overwrite `always`, or into another filesystem",
                    p.overwrite.as_str()
                )),
            },
            Err(Errno::ISDIR | Errno::NOTEMPTY) => Err(format!(
                "{shown} is a directory; a file cannot replace it (remove it, or recall into another directory)"
            )),
            Err(e) => Err(format!("{shown}: {e}")),
        }
    }

    /// Whether what is at the final name (`st`) already holds the object: for a link, a link
    /// with the same target (and, as root, owner); for a file, a regular file with one name,
    /// the object's length and SHA-256, and the mode (and, as root, owner) recall would give
    /// it. Anything else is another file, which the policy decides about.
    fn is_identical(&self, st: &rustix::fs::Stat, link: bool, p: &Placement) -> bool {
        let ft = FileType::from_raw_mode(st.st_mode);
        let root = rustix::process::geteuid().is_root();
        let owner_ok = |st: &rustix::fs::Stat| {
            !root
                || p.meta
                    .is_none_or(|m| st.st_uid == m.uid && st.st_gid == m.gid)
        };
        if link {
            if ft != FileType::Symlink || !owner_ok(st) {
                return false;
            }
            let Ok(theirs) =
                rustix::fs::readlinkat(&self.parent, self.final_name.as_os_str(), Vec::new())
            else {
                return false;
            };
            let digest: [u8; 32] = Sha256::digest(theirs.as_bytes()).into();
            return digest == p.sha256;
        }
        if ft != FileType::RegularFile
            || st.st_nlink != 1
            || u64::try_from(st.st_size).ok() != Some(p.length)
            || !owner_ok(st)
            || p.meta
                .is_some_and(|m| st.st_mode & 0o7777 != restored_mode(m.mode, root))
        {
            return false;
        }
        let Ok(fd) = rustix::fs::openat(
            &self.parent,
            self.final_name.as_os_str(),
            OFlags::RDONLY | OFlags::NOFOLLOW | OFlags::NONBLOCK | OFlags::NOCTTY | OFlags::CLOEXEC,
            Mode::empty(),
        ) else {
            return false;
        };
        // What was opened is what was looked at (not a FIFO or device swapped in meanwhile).
        match rustix::fs::fstat(&fd) {
            Ok(o) if o.st_dev == st.st_dev && o.st_ino == st.st_ino => {}
            _ => return false,
        }
        let mut f = std::io::Read::take(File::from(fd), p.length.saturating_add(1));
        let mut h = Sha256::new();
        let mut buf = vec![0u8; 1 << 20];
        let mut n_total = 0u64;
        loop {
            match std::io::Read::read(&mut f, &mut buf) {
                Ok(0) => break,
                Ok(n) => {
                    h.update(&buf[..n]);
                    n_total += n as u64;
                }
                Err(_) => return false,
            }
        }
        let digest: [u8; 32] = h.finalize().into();
        n_total == p.length && digest == p.sha256
    }

    /// Make a symbolic link, beside the partial file, whose target is the partial file's bytes,
    /// with `meta`'s owner (as root) and modification time; its name.
    fn make_link(&mut self, meta: &ObjectMeta) -> Result<OsString, String> {
        let shown = self.dest.display().to_string();
        let mut target = Vec::new();
        std::io::Seek::seek(&mut self.file, std::io::SeekFrom::Start(0))
            .and_then(|_| {
                std::io::Read::read_to_end(
                    &mut std::io::Read::take(&self.file, super::source::MAX_LINK_TARGET + 1),
                    &mut target,
                )
            })
            .map_err(|e| format!("{shown}: reading the link's target back: {e}"))?;
        if target.is_empty()
            || target.len() as u64 > super::source::MAX_LINK_TARGET
            || target.contains(&0)
        {
            return Err(format!(
                "{shown}: the archived link target ({} bytes) is not a valid link target",
                target.len()
            ));
        }
        let mut link_name = self.name.clone();
        link_name.push(".l");
        let fail = |what: &str, e: Errno| format!("{shown}: {what}: {e}");
        match rustix::fs::symlinkat(target.as_slice(), &*self.dir, link_name.as_os_str()) {
            Ok(()) => {}
            Err(Errno::EXIST) => {
                rustix::fs::unlinkat(&*self.dir, link_name.as_os_str(), AtFlags::empty())
                    .map_err(|e| fail("remove a stale link", e))?;
                rustix::fs::symlinkat(target.as_slice(), &*self.dir, link_name.as_os_str())
                    .map_err(|e| fail("create the link", e))?;
            }
            Err(e) => return Err(fail("create the link", e)),
        }
        let done = (|| {
            if rustix::process::geteuid().is_root() {
                rustix::fs::chownat(
                    &*self.dir,
                    link_name.as_os_str(),
                    Some(Uid::from_raw(meta.uid)),
                    Some(Gid::from_raw(meta.gid)),
                    AtFlags::SYMLINK_NOFOLLOW,
                )
                .map_err(|e| fail("chown the link", e))?;
            }
            rustix::fs::utimensat(
                &*self.dir,
                link_name.as_os_str(),
                &times(meta.mtime_ns),
                AtFlags::SYMLINK_NOFOLLOW,
            )
            .map_err(|e| fail("set the link's modification time", e))
        })();
        if let Err(e) = done {
            let _ = rustix::fs::unlinkat(&*self.dir, link_name.as_os_str(), AtFlags::empty());
            return Err(e);
        }
        Ok(link_name)
    }
}

/// What a recall does when the file it places exists already.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum Overwrite {
    /// Keep the existing file and report it (the default). A file identical to the object is
    /// not an error: the object is there.
    #[default]
    Never,
    /// Replace the existing file only if the archived copy's modification time is later.
    IfNewer,
    /// Replace whatever file or link is there.
    Always,
}

impl Overwrite {
    /// `never`, `if-newer`, `always`.
    pub fn as_str(self) -> &'static str {
        match self {
            Overwrite::Never => "never",
            Overwrite::IfNewer => "if-newer",
            Overwrite::Always => "always",
        }
    }
}

impl std::str::FromStr for Overwrite {
    type Err = String;
    fn from_str(s: &str) -> Result<Overwrite, String> {
        match s {
            "never" => Ok(Overwrite::Never),
            "if-newer" => Ok(Overwrite::IfNewer),
            "always" => Ok(Overwrite::Always),
            other => Err(format!(
                "overwrite policy {other:?} is not one of `never`, `if-newer`, `always`"
            )),
        }
    }
}

/// How a recalled object is put in place.
#[derive(Clone, Copy, Debug)]
pub struct Placement<'a> {
    /// What to do with an existing file at the final name.
    pub overwrite: Overwrite,
    /// The object's metadata: a symlink is placed as a link; a file's mtime decides
    /// `if-newer`.
    pub meta: Option<&'a ObjectMeta>,
    /// The object's SHA-256 (to recognise an identical existing file).
    pub sha256: [u8; 32],
    /// Its length.
    pub length: u64,
}

/// What [`Partial::commit_as`] did.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Placed {
    /// The object is in place, written by this recall.
    Written,
    /// An identical file (or link) was there already; it was left as it is.
    Identical,
}

/// The permission bits restored: all of them as root; without set-user-ID, set-group-ID and
/// sticky bits otherwise (an unprivileged recall does not hand out privileges).
fn restored_mode(mode: u32, root: bool) -> u32 {
    if root { mode & 0o7777 } else { mode & 0o777 }
}

/// Access time left as it is, modification time `mtime_ns`.
fn times(mtime_ns: i64) -> Timestamps {
    Timestamps {
        last_access: Timespec {
            tv_sec: 0,
            tv_nsec: rustix::fs::UTIME_OMIT,
        },
        last_modification: Timespec {
            tv_sec: mtime_ns.div_euclid(1_000_000_000),
            tv_nsec: mtime_ns.rem_euclid(1_000_000_000) as _,
        },
    }
}

/// What an existing entry is, for a refusal.
fn describe(st: &rustix::fs::Stat) -> String {
    match FileType::from_raw_mode(st.st_mode) {
        FileType::RegularFile => format!("a file of {} bytes", st.st_size),
        FileType::Symlink => "a symbolic link".into(),
        FileType::Directory => "a directory".into(),
        _ => "a special file".into(),
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
        // A link, never followed; removing it removes the link only. A recalled symbolic link
        // is made as `PARTIAL.l` beside its partial file just before its rename: it is live
        // while that partial file is.
        Err(Errno::LOOP) => {
            let n = name.as_bytes();
            if let Some(base) = n.strip_suffix(b".l")
                && partial_is_live(dir, OsStr::from_bytes(base))?
            {
                return Ok(false);
            }
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

/// Whether the partial file `name` exists and a writer holds its lock.
fn partial_is_live(dir: &OwnedFd, name: &OsStr) -> Result<bool, Errno> {
    let fd = match rustix::fs::openat(
        dir,
        name,
        OFlags::RDONLY | OFlags::NOFOLLOW | OFlags::NONBLOCK | OFlags::NOCTTY | OFlags::CLOEXEC,
        Mode::empty(),
    ) {
        Ok(fd) => fd,
        Err(Errno::NOENT | Errno::LOOP) => return Ok(false),
        Err(e) => return Err(e),
    };
    match rustix::fs::flock(&fd, FlockOperation::NonBlockingLockShared) {
        Ok(()) => Ok(false),
        Err(Errno::WOULDBLOCK) => Ok(true),
        Err(e) => Err(e),
    }
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

    fn place(
        st: &Arc<Staging>,
        rel: &str,
        data: &[u8],
        overwrite: Overwrite,
        meta: Option<ObjectMeta>,
    ) -> Result<Placed, String> {
        let mut p = st.create(Path::new(rel))?;
        p.file().write_all(data).map_err(|e| e.to_string())?;
        if let Some(m) = &meta {
            p.set_meta(m)?;
        }
        p.commit_as(&Placement {
            overwrite,
            meta: meta.as_ref(),
            sha256: Sha256::digest(data).into(),
            length: data.len() as u64,
        })
    }

    fn file_meta(mtime_ns: i64) -> ObjectMeta {
        ObjectMeta {
            kind: ObjectKind::File,
            mode: 0o640,
            uid: 0,
            gid: 0,
            mtime_ns,
            sparse: false,
        }
    }

    #[test]
    fn an_existing_file_is_kept_replaced_or_found_identical_as_the_policy_says() {
        use std::os::unix::fs::MetadataExt;
        let root = tempfile::tempdir().unwrap();
        let f = root.path().join("f");
        std::fs::write(&f, b"theirs").unwrap();
        let st = Staging::open(root.path()).unwrap();
        // never: kept and reported, naming the file and the way out.
        let e = place(&st, "f", b"ours", Overwrite::Never, None).unwrap_err();
        assert!(
            e.contains("not replaced") && e.contains("`never`") && e.contains("always"),
            "{e}"
        );
        assert_eq!(std::fs::read(&f).unwrap(), b"theirs");
        // An identical file is the object: fine under every policy, left as it is.
        assert_eq!(
            place(&st, "f", b"theirs", Overwrite::Never, None).unwrap(),
            Placed::Identical
        );
        // if-newer: an archived copy older than the file keeps the file...
        let theirs = std::fs::metadata(&f).unwrap();
        let theirs_ns = theirs.mtime() * 1_000_000_000 + theirs.mtime_nsec();
        let e = place(
            &st,
            "f",
            b"ours",
            Overwrite::IfNewer,
            Some(file_meta(theirs_ns - 1)),
        )
        .unwrap_err();
        assert!(e.contains("`if-newer`"), "{e}");
        // ... nothing recorded to compare keeps it too ...
        assert!(place(&st, "f", b"ours", Overwrite::IfNewer, None).is_err());
        // ... a later one replaces it, with the archived mode and mtime.
        assert_eq!(
            place(
                &st,
                "f",
                b"ours",
                Overwrite::IfNewer,
                Some(file_meta(theirs_ns + 5))
            )
            .unwrap(),
            Placed::Written
        );
        assert_eq!(std::fs::read(&f).unwrap(), b"ours");
        let m = std::fs::metadata(&f).unwrap();
        assert_eq!(m.mode() & 0o7777, 0o640);
        assert_eq!(m.mtime() * 1_000_000_000 + m.mtime_nsec(), theirs_ns + 5);
        // always: replaced whatever it is.
        assert_eq!(
            place(&st, "f", b"third", Overwrite::Always, None).unwrap(),
            Placed::Written
        );
        assert_eq!(std::fs::read(&f).unwrap(), b"third");
        // A directory in the way is refused with its name.
        std::fs::create_dir(root.path().join("d")).unwrap();
        std::fs::write(root.path().join("d/x"), b"x").unwrap();
        let e = place(&st, "d", b"z", Overwrite::Always, None).unwrap_err();
        assert!(e.contains("is a directory"), "{e}");
        // Nothing left behind in the private directory.
        drop(st);
        assert!(!root.path().join(PARTIAL_DIR).exists());
    }

    #[test]
    fn identical_means_bytes_and_metadata_and_modes_apply_once_in_place() {
        use std::os::unix::fs::MetadataExt;
        let root = tempfile::tempdir().unwrap();
        let st = Staging::open(root.path()).unwrap();
        let ro = ObjectMeta {
            mode: 0o444,
            ..file_meta(1_000_000_000)
        };
        // The partial file keeps a mode reel can open; the object's mode comes once in place.
        let mut p = st.create(Path::new("ro")).unwrap();
        p.file().write_all(b"read only").unwrap();
        p.set_meta(&ro).unwrap();
        let partial_mode = rustix::fs::fstat(&*p.file()).unwrap().st_mode & 0o777;
        assert_ne!(
            partial_mode, 0o444,
            "the partial file took the object's mode early"
        );
        assert_eq!(
            p.commit_as(&Placement {
                overwrite: Overwrite::Never,
                meta: Some(&ro),
                sha256: Sha256::digest(b"read only").into(),
                length: 9,
            })
            .unwrap(),
            Placed::Written
        );
        let f = root.path().join("ro");
        assert_eq!(std::fs::metadata(&f).unwrap().mode() & 0o7777, 0o444);
        // The same bytes under another mode are another file: `never` keeps it and says so.
        std::fs::set_permissions(&f, std::fs::Permissions::from_mode(0o666)).unwrap();
        let e = place(&st, "ro", b"read only", Overwrite::Never, Some(ro)).unwrap_err();
        assert!(e.contains("not replaced"), "{e}");
        // With the object's mode back, it is the object.
        std::fs::set_permissions(&f, std::fs::Permissions::from_mode(0o444)).unwrap();
        assert_eq!(
            place(&st, "ro", b"read only", Overwrite::Never, Some(ro)).unwrap(),
            Placed::Identical
        );
        // A second name of the file makes it another file too.
        std::fs::hard_link(&f, root.path().join("ro2")).unwrap();
        assert!(place(&st, "ro", b"read only", Overwrite::Never, Some(ro)).is_err());
    }

    #[test]
    fn a_link_is_recalled_as_a_link_with_its_time() {
        use std::os::unix::fs::MetadataExt;
        let root = tempfile::tempdir().unwrap();
        let st = Staging::open(root.path()).unwrap();
        let meta = ObjectMeta {
            kind: ObjectKind::Symlink,
            mode: 0o777,
            uid: 0,
            gid: 0,
            mtime_ns: 1_600_000_000_250_000_000,
            sparse: false,
        };
        assert_eq!(
            place(
                &st,
                "dir/l",
                b"../elsewhere/t",
                Overwrite::Never,
                Some(meta)
            )
            .unwrap(),
            Placed::Written
        );
        let l = root.path().join("dir/l");
        assert_eq!(std::fs::read_link(&l).unwrap(), Path::new("../elsewhere/t"));
        let m = std::fs::symlink_metadata(&l).unwrap();
        assert!(m.file_type().is_symlink());
        assert_eq!(m.mtime(), 1_600_000_000);
        assert_eq!(m.mtime_nsec(), 250_000_000);
        // The same link again is identical; another target is kept under `never`.
        assert_eq!(
            place(
                &st,
                "dir/l",
                b"../elsewhere/t",
                Overwrite::Never,
                Some(meta)
            )
            .unwrap(),
            Placed::Identical
        );
        assert!(place(&st, "dir/l", b"/other", Overwrite::Never, Some(meta)).is_err());
        assert_eq!(
            place(&st, "dir/l", b"/other", Overwrite::Always, Some(meta)).unwrap(),
            Placed::Written
        );
        assert_eq!(std::fs::read_link(&l).unwrap(), Path::new("/other"));
        // A target with a NUL cannot be a link: refused, nothing placed.
        assert!(place(&st, "bad", b"a\0b", Overwrite::Never, Some(meta)).is_err());
        assert!(std::fs::symlink_metadata(root.path().join("bad")).is_err());
        drop(st);
        assert!(!root.path().join(PARTIAL_DIR).exists());
    }

    #[test]
    fn zero_blocks_of_a_sparse_file_become_holes_again() {
        use std::os::unix::fs::MetadataExt;
        let root = tempfile::tempdir().unwrap();
        let st = Staging::open(root.path()).unwrap();
        let mut p = st.create(Path::new("s")).unwrap();
        // 1 MiB of zeros, a few bytes, 1 MiB of zeros, written in uneven pieces.
        let mut data = vec![0u8; 2 << 20];
        data[(1 << 20) + 7] = 9;
        let mut at = 0u64;
        for piece in data.chunks(100_003) {
            p.append(piece, at, true).unwrap();
            at += piece.len() as u64;
        }
        p.set_len(at).unwrap();
        p.commit().unwrap();
        let f = root.path().join("s");
        assert_eq!(std::fs::read(&f).unwrap(), data);
        let m = std::fs::metadata(&f).unwrap();
        assert!(
            m.blocks() * 512 < 1 << 20,
            "{} blocks allocated for a file of 2 MiB, almost all zeros",
            m.blocks()
        );
    }

    #[test]
    fn set_id_bits_are_restored_only_as_root() {
        assert_eq!(restored_mode(0o4755, false), 0o755);
        assert_eq!(restored_mode(0o4755, true), 0o4755);
        assert_eq!(restored_mode(0o1777, false), 0o777);
    }

    #[test]
    fn overwrite_policies_parse_from_their_names() {
        for o in [Overwrite::Never, Overwrite::IfNewer, Overwrite::Always] {
            assert_eq!(o.as_str().parse::<Overwrite>().unwrap(), o);
            assert_eq!(
                serde_json::to_value(o).unwrap(),
                serde_json::json!(o.as_str())
            );
        }
        assert!(
            "sometimes"
                .parse::<Overwrite>()
                .unwrap_err()
                .contains("if-newer")
        );
        assert_eq!(Overwrite::default(), Overwrite::Never);
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
