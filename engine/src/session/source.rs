//! An archive source file as the write session reads it.
//!
//! A source is opened without following a symbolic link and without blocking (a FIFO or a
//! device named as a source is never read: it is refused as not a regular file), read no
//! further than its declared size, and stamped (size, mtime, ctime) when opened and again once
//! read, as `tar` does to report "file changed as we read it". A source that is missing, not a
//! regular file, unreadable, or changed — since the archive was planned, or while it was read —
//! is a [`SourceFault`] of that one object: the session leaves its bytes in the container as
//! dead space (docs/FORMAT.md §4.2), never indexes or catalogues it, and goes on with the next
//! object.
//!
//! A symbolic link planned as one ([`ObjectKind::Symlink`]) is archived as a link, never
//! followed: its bytes are its target as `readlink` returns it, stamped with `lstat` before and
//! after. Every source's metadata (kind, permission bits, owner, mtime) comes from the same
//! `fstat` (a link's: `lstat`) as its first stamp, so what is recorded is what was read.

use std::fs::{File, Metadata, OpenOptions};
use std::io;
use std::os::unix::ffi::OsStringExt;
use std::os::unix::fs::{MetadataExt, OpenOptionsExt};
use std::path::Path;

use crate::format::{ObjectKind, ObjectMeta};

/// Longest symbolic link target archived, in bytes (Linux's `PATH_MAX`).
pub const MAX_LINK_TARGET: u64 = 4096;

/// A source opened for reading: its bytes, its stamp, and the metadata to record.
#[derive(Debug)]
pub struct Opened {
    /// Where its bytes come from.
    pub bytes: SourceBytes,
    /// Its stamp when opened.
    pub stamp: SourceStamp,
    /// Its metadata when opened.
    pub meta: ObjectMeta,
}

/// The bytes of an opened source.
#[derive(Debug)]
pub enum SourceBytes {
    /// A regular file's content, read from the open descriptor.
    File(File),
    /// A symbolic link's target.
    Link(io::Cursor<Vec<u8>>),
}

impl io::Read for SourceBytes {
    fn read(&mut self, buf: &mut [u8]) -> io::Result<usize> {
        match self {
            SourceBytes::File(f) => f.read(buf),
            SourceBytes::Link(c) => c.read(buf),
        }
    }
}

/// What a source file looked like: compared before and after it is read, and against what
/// the archive's planner saw.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct SourceStamp {
    /// Size in bytes.
    pub size: u64,
    /// Last modification, nanoseconds since the epoch.
    pub mtime_ns: i64,
    /// Last status change, nanoseconds since the epoch.
    pub ctime_ns: i64,
}

impl SourceStamp {
    /// The stamp of `meta`.
    pub fn of(meta: &Metadata) -> SourceStamp {
        SourceStamp {
            size: meta.len(),
            mtime_ns: meta
                .mtime()
                .saturating_mul(1_000_000_000)
                .saturating_add(meta.mtime_nsec()),
            ctime_ns: meta
                .ctime()
                .saturating_mul(1_000_000_000)
                .saturating_add(meta.ctime_nsec()),
        }
    }

    /// How `now` differs from `self`, in words; `None` when it does not.
    fn difference(&self, now: &SourceStamp) -> Option<String> {
        if self.size != now.size {
            Some(format!(
                "its size went from {} to {} bytes",
                self.size, now.size
            ))
        } else if self.mtime_ns != now.mtime_ns {
            Some("its modification time changed".into())
        } else if self.ctime_ns != now.ctime_ns {
            Some("its status-change time changed".into())
        } else {
            None
        }
    }
}

/// Why one object's source could not be archived. The object fails; the session goes on.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum SourceFault {
    /// The file is gone.
    #[error("source {path} no longer exists; nothing was archived for it")]
    Missing {
        /// The source.
        path: String,
    },
    /// A FIFO, device, socket, directory or symbolic link: never read.
    #[error("source {path} is a {what}, not a regular file; only regular files are archived")]
    NotRegular {
        /// The source.
        path: String,
        /// What it is.
        what: &'static str,
    },
    /// Opening or reading failed.
    #[error("source {path} cannot be read: {reason}")]
    Unreadable {
        /// The source.
        path: String,
        /// The system's words.
        reason: String,
    },
    /// The job is confined to a root (it came with an API token's roots) and the path cannot
    /// be reached beneath it without a symbolic link or leaving it.
    #[error(
        "source {reason}; nothing was archived for it (a confined job reads no path through a link)"
    )]
    Confined {
        /// The source.
        path: String,
        /// Why, with the path.
        reason: String,
    },
    /// The file is not what the archive was planned with (modified after submission).
    #[error("source {path} changed after the archive was submitted ({how}); submit it again")]
    ChangedSincePlanned {
        /// The source.
        path: String,
        /// What changed.
        how: String,
    },
    /// The file changed while it was read: what was read is neither the old nor the new file.
    #[error("source {path} changed while it was read ({how}); its bytes on tape are dead space")]
    ChangedWhileRead {
        /// The source.
        path: String,
        /// What changed.
        how: String,
    },
}

impl SourceFault {
    /// Whether another attempt may succeed: a file being written may settle, and a read error
    /// may be passing. A missing file, a special file or a file changed since submission stays
    /// so.
    pub fn retryable(&self) -> bool {
        matches!(
            self,
            SourceFault::ChangedWhileRead { .. } | SourceFault::Unreadable { .. }
        )
    }

    /// A read error of `path`.
    pub fn unreadable(path: &Path, e: &io::Error) -> SourceFault {
        SourceFault::Unreadable {
            path: path.display().to_string(),
            reason: e.to_string(),
        }
    }
}

/// What a file that is not a regular file is, in the words every refusal of it uses (the
/// submission checks name special files with it too).
pub fn file_kind(t: &std::fs::FileType) -> &'static str {
    use std::os::unix::fs::FileTypeExt;
    if t.is_dir() {
        "directory"
    } else if t.is_symlink() {
        "symbolic link"
    } else if t.is_fifo() {
        "FIFO"
    } else if t.is_socket() {
        "socket"
    } else if t.is_char_device() {
        "character device"
    } else if t.is_block_device() {
        "block device"
    } else {
        "special file"
    }
}

/// Open a source planned as `kind`: [`open`] for a regular file, [`open_link`] for a link.
pub fn open_as(
    kind: ObjectKind,
    path: &Path,
    size: u64,
    planned: Option<&SourceStamp>,
    confine: Option<&Path>,
) -> Result<Opened, SourceFault> {
    if let Some(root) = confine {
        // A file is opened beneath the root in one call, which refuses a link at any step. A
        // link (archived as a link, read by name) needs its directory checked first.
        if kind == ObjectKind::Symlink {
            let parent = path.parent().unwrap_or(path);
            super::confine::open_beneath(
                root,
                parent,
                rustix::fs::OFlags::PATH | rustix::fs::OFlags::DIRECTORY,
            )
            .map_err(|e| SourceFault::Confined {
                path: path.display().to_string(),
                reason: super::confine::describe(parent, &e),
            })?;
        } else {
            let fd = super::confine::open_beneath(
                root,
                path,
                rustix::fs::OFlags::RDONLY
                    | rustix::fs::OFlags::NOFOLLOW
                    | rustix::fs::OFlags::NONBLOCK,
            )
            .map_err(|e| match e.raw_os_error() {
                Some(nix::libc::ENOENT) | Some(nix::libc::ENOTDIR) => SourceFault::Missing {
                    path: path.display().to_string(),
                },
                _ => SourceFault::Confined {
                    path: path.display().to_string(),
                    reason: super::confine::describe(path, &e),
                },
            })?;
            let (f, m, stamp) = check_regular(File::from(fd), path, size, planned)?;
            return Ok(Opened {
                bytes: SourceBytes::File(f),
                stamp,
                meta: ObjectMeta::of(ObjectKind::File, &m),
            });
        }
    }
    match kind {
        ObjectKind::File => {
            let (f, m, stamp) = open_regular(path, size, planned)?;
            Ok(Opened {
                bytes: SourceBytes::File(f),
                stamp,
                meta: ObjectMeta::of(ObjectKind::File, &m),
            })
        }
        ObjectKind::Symlink => open_link(path, size, planned),
    }
}

/// Read the symbolic link at `path` (never followed): its target is the object's bytes. It must
/// still be a link, of the declared target length, and match `planned`.
pub fn open_link(
    path: &Path,
    size: u64,
    planned: Option<&SourceStamp>,
) -> Result<Opened, SourceFault> {
    let shown = || path.display().to_string();
    let lstat = |p: &Path| {
        std::fs::symlink_metadata(p).map_err(|e| match e.kind() {
            io::ErrorKind::NotFound => SourceFault::Missing { path: shown() },
            _ => SourceFault::unreadable(p, &e),
        })
    };
    let before = lstat(path)?;
    if !before.file_type().is_symlink() {
        return Err(SourceFault::ChangedSincePlanned {
            path: shown(),
            how: format!(
                "it was a symbolic link and is now a {}",
                if before.is_file() {
                    "regular file"
                } else {
                    file_kind(&before.file_type())
                }
            ),
        });
    }
    let stamp = SourceStamp::of(&before);
    let declared = SourceStamp { size, ..stamp };
    if let Some(how) = planned.unwrap_or(&declared).difference(&stamp) {
        return Err(SourceFault::ChangedSincePlanned { path: shown(), how });
    }
    if size > MAX_LINK_TARGET {
        return Err(SourceFault::Unreadable {
            path: shown(),
            reason: format!(
                "its target is {size} bytes long; links of at most {MAX_LINK_TARGET} bytes are archived"
            ),
        });
    }
    let target = std::fs::read_link(path)
        .map_err(|e| SourceFault::unreadable(path, &e))?
        .into_os_string()
        .into_vec();
    Ok(Opened {
        bytes: SourceBytes::Link(io::Cursor::new(target)),
        stamp,
        meta: ObjectMeta::of(ObjectKind::Symlink, &before),
    })
}

/// After the read of an [`Opened`] source: `read` bytes came out of it. Anything other than the
/// same size, mtime and ctime (of the file, or of the link), and exactly that many bytes, is a
/// change.
pub fn check_opened_unchanged(path: &Path, o: &Opened, read: u64) -> Result<(), SourceFault> {
    match &o.bytes {
        SourceBytes::File(f) => check_unchanged(path, f, &o.stamp, read),
        SourceBytes::Link(c) => {
            let after = std::fs::symlink_metadata(path).map_err(|e| match e.kind() {
                io::ErrorKind::NotFound => SourceFault::ChangedWhileRead {
                    path: path.display().to_string(),
                    how: "it was removed".into(),
                },
                _ => SourceFault::unreadable(path, &e),
            })?;
            let len = c.get_ref().len() as u64;
            let how = if read != o.stamp.size || len != o.stamp.size {
                Some(format!(
                    "its target is {len} bytes, {} were expected",
                    o.stamp.size
                ))
            } else if !after.file_type().is_symlink() {
                Some("it is no longer a symbolic link".into())
            } else {
                o.stamp.difference(&SourceStamp::of(&after))
            };
            match how {
                Some(how) => Err(SourceFault::ChangedWhileRead {
                    path: path.display().to_string(),
                    how,
                }),
                None => Ok(()),
            }
        }
    }
}

/// Open `path` for reading: no symbolic link followed at its last component, no blocking open
/// (a FIFO would wait for a writer), and only a regular file accepted. `planned`, when the
/// planner recorded it, must still match; `size` is the size the archive declared.
pub fn open(
    path: &Path,
    size: u64,
    planned: Option<&SourceStamp>,
) -> Result<(File, SourceStamp), SourceFault> {
    open_regular(path, size, planned).map(|(f, _, stamp)| (f, stamp))
}

/// [`open`], also returning the descriptor's `fstat` (the one the stamp and the recorded
/// metadata both come from).
fn open_regular(
    path: &Path,
    size: u64,
    planned: Option<&SourceStamp>,
) -> Result<(File, Metadata, SourceStamp), SourceFault> {
    let shown = || path.display().to_string();
    let f = OpenOptions::new()
        .read(true)
        .custom_flags(libc_flags())
        .open(path)
        .map_err(|e| match e.raw_os_error() {
            Some(nix::libc::ENOENT) | Some(nix::libc::ENOTDIR) => {
                SourceFault::Missing { path: shown() }
            }
            Some(nix::libc::ELOOP) => SourceFault::NotRegular {
                path: shown(),
                what: "symbolic link",
            },
            _ => SourceFault::unreadable(path, &e),
        })?;
    check_regular(f, path, size, planned)
}

/// The checks of an opened source: a regular file, as planned.
fn check_regular(
    f: File,
    path: &Path,
    size: u64,
    planned: Option<&SourceStamp>,
) -> Result<(File, Metadata, SourceStamp), SourceFault> {
    let shown = || path.display().to_string();
    let meta = f
        .metadata()
        .map_err(|e| SourceFault::unreadable(path, &e))?;
    if !meta.is_file() {
        return Err(SourceFault::NotRegular {
            path: shown(),
            what: file_kind(&meta.file_type()),
        });
    }
    let now = SourceStamp::of(&meta);
    let declared = SourceStamp { size, ..now };
    let expected = planned.unwrap_or(&declared);
    if let Some(how) = expected.difference(&now) {
        return Err(SourceFault::ChangedSincePlanned { path: shown(), how });
    }
    Ok((f, meta, now))
}

/// After the read: `read` bytes came out of `f`, opened with stamp `before`. Anything other
/// than the same size, mtime and ctime, and exactly that many bytes, is a change.
pub fn check_unchanged(
    path: &Path,
    f: &File,
    before: &SourceStamp,
    read: u64,
) -> Result<(), SourceFault> {
    let after = SourceStamp::of(
        &f.metadata()
            .map_err(|e| SourceFault::unreadable(path, &e))?,
    );
    let how = if read != before.size {
        Some(format!(
            "{} bytes were expected, {read} could be read",
            before.size
        ))
    } else {
        before.difference(&after)
    };
    match how {
        Some(how) => Err(SourceFault::ChangedWhileRead {
            path: path.display().to_string(),
            how,
        }),
        None => Ok(()),
    }
}

fn libc_flags() -> i32 {
    nix::libc::O_NOFOLLOW | nix::libc::O_NONBLOCK | nix::libc::O_CLOEXEC
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::io::{Read, Write};

    #[test]
    fn a_regular_file_opens_and_reads_unchanged() {
        let d = tempfile::tempdir().unwrap();
        let p = d.path().join("f");
        std::fs::write(&p, b"hello").unwrap();
        let (mut f, st) = open(&p, 5, None).unwrap();
        let mut buf = Vec::new();
        f.read_to_end(&mut buf).unwrap();
        check_unchanged(&p, &f, &st, buf.len() as u64).unwrap();
        // The planner's stamp is honoured.
        let planned = SourceStamp::of(&std::fs::metadata(&p).unwrap());
        open(&p, 5, Some(&planned)).unwrap();
    }

    #[test]
    fn missing_special_and_linked_sources_are_faults_of_their_own() {
        let d = tempfile::tempdir().unwrap();
        let gone = d.path().join("gone");
        assert!(matches!(
            open(&gone, 1, None),
            Err(SourceFault::Missing { .. })
        ));
        let fifo = d.path().join("fifo");
        nix::unistd::mkfifo(&fifo, nix::sys::stat::Mode::from_bits_truncate(0o600)).unwrap();
        // Opened without blocking (no writer) and refused without a read.
        let e = open(&fifo, 0, None).unwrap_err();
        assert!(e.to_string().contains("a FIFO"), "{e}");
        assert!(!e.retryable());
        let e = open(Path::new("/dev/zero"), 0, None).unwrap_err();
        assert!(e.to_string().contains("character device"), "{e}");
        let target = d.path().join("t");
        std::fs::write(&target, b"x").unwrap();
        let link = d.path().join("l");
        std::os::unix::fs::symlink(&target, &link).unwrap();
        let e = open(&link, 1, None).unwrap_err();
        assert!(e.to_string().contains("symbolic link"), "{e}");
        assert!(
            open(d.path(), 0, None)
                .unwrap_err()
                .to_string()
                .contains("directory")
        );
    }

    #[test]
    fn a_link_is_read_as_its_target_never_followed() {
        let d = tempfile::tempdir().unwrap();
        let link = d.path().join("l");
        std::os::unix::fs::symlink("../somewhere/else", &link).unwrap();
        let planned = SourceStamp::of(&std::fs::symlink_metadata(&link).unwrap());
        let mut o = open_as(ObjectKind::Symlink, &link, 17, Some(&planned), None).unwrap();
        // Confined to the directory: the same link is read; through a linked directory it is
        // refused, and so is a file.
        assert!(
            open_as(
                ObjectKind::Symlink,
                &link,
                17,
                Some(&planned),
                Some(d.path())
            )
            .is_ok()
        );
        let via = d.path().join("via");
        std::os::unix::fs::symlink(d.path(), &via).unwrap();
        for kind in [ObjectKind::Symlink, ObjectKind::File] {
            let e = open_as(kind, &via.join("l"), 17, None, Some(d.path())).unwrap_err();
            assert!(matches!(e, SourceFault::Confined { .. }), "{e}");
            assert!(!e.retryable());
        }
        assert_eq!(o.meta.kind, ObjectKind::Symlink);
        let mut buf = Vec::new();
        o.bytes.read_to_end(&mut buf).unwrap();
        assert_eq!(buf, b"../somewhere/else");
        check_opened_unchanged(&link, &o, buf.len() as u64).unwrap();
        // Replaced by another link (a new target, a new ctime) after planning.
        std::fs::remove_file(&link).unwrap();
        std::os::unix::fs::symlink("/etc/passwd", &link).unwrap();
        assert!(matches!(
            open_as(ObjectKind::Symlink, &link, 17, Some(&planned), None),
            Err(SourceFault::ChangedSincePlanned { .. })
        ));
        // Replaced by a regular file: refused, not read.
        std::fs::remove_file(&link).unwrap();
        std::fs::write(&link, b"0123456789abcdefg").unwrap();
        let e = open_as(ObjectKind::Symlink, &link, 17, None, None).unwrap_err();
        assert!(e.to_string().contains("is now a regular file"), "{e}");
        // A file's metadata comes with it.
        let f = d.path().join("f");
        std::fs::write(&f, b"abc").unwrap();
        std::fs::set_permissions(&f, std::os::unix::fs::PermissionsExt::from_mode(0o640)).unwrap();
        let o = open_as(ObjectKind::File, &f, 3, None, None).unwrap();
        let confined = open_as(ObjectKind::File, &f, 3, None, Some(d.path())).unwrap();
        assert_eq!(confined.meta.mode, 0o640);
        let e = open_as(
            ObjectKind::File,
            &d.path().join("gone"),
            3,
            None,
            Some(d.path()),
        );
        assert!(matches!(e, Err(SourceFault::Missing { .. })));
        assert_eq!(o.meta.kind, ObjectKind::File);
        assert_eq!(o.meta.mode, 0o640);
        assert_eq!(o.meta.mtime_ns, o.stamp.mtime_ns);
    }

    #[test]
    fn a_change_since_planning_or_during_the_read_is_caught() {
        let d = tempfile::tempdir().unwrap();
        let p = d.path().join("f");
        std::fs::write(&p, b"0123456789").unwrap();
        // Declared size differs: changed since planned.
        let e = open(&p, 4, None).unwrap_err();
        assert!(matches!(e, SourceFault::ChangedSincePlanned { .. }), "{e}");
        assert!(!e.retryable());
        // Planned mtime differs.
        let mut planned = SourceStamp::of(&std::fs::metadata(&p).unwrap());
        planned.mtime_ns -= 1;
        assert!(matches!(
            open(&p, 10, Some(&planned)),
            Err(SourceFault::ChangedSincePlanned { .. })
        ));
        // Rewritten in place, same size, while read.
        let (f, st) = open(&p, 10, None).unwrap();
        std::thread::sleep(std::time::Duration::from_millis(20));
        let mut w = OpenOptions::new().write(true).open(&p).unwrap();
        w.write_all(b"ABCDEFGHIJ").unwrap();
        w.sync_all().unwrap();
        let e = check_unchanged(&p, &f, &st, 10).unwrap_err();
        assert!(matches!(e, SourceFault::ChangedWhileRead { .. }), "{e}");
        assert!(e.retryable());
        // Fewer bytes than declared.
        let (f, st) = open(&p, 10, None).unwrap();
        let e = check_unchanged(&p, &f, &st, 7).unwrap_err();
        assert!(e.to_string().contains("10 bytes were expected, 7"), "{e}");
    }
}
