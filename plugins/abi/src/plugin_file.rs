//! Which plugin files the host loads. A plugin runs inside reel with all of reel's rights (its
//! database, its spool, `CAP_SYS_RAWIO` on a drive host), so whoever can write the `.so` can
//! run code as reel. The host loads a file only if it is a regular file owned by root or by
//! the user the host runs as, and writable by nobody else (no group or other write bit).
//!
//! The file is opened once, checked through that descriptor (`fstat`), and the dynamic loader
//! is given the descriptor's `/proc/self/fd/N` name: the file checked is the file loaded, with
//! no window in which a rename or a symlink swap could put another one in its place. The
//! descriptor of a loaded library is never closed: the loader recognises a library it has by
//! its name, so a number used again would hand the next plugin this one. Where
//! `/proc` is not mounted the loader is given the path instead (checked, then loaded).

use std::fs::File;
use std::os::fd::AsRawFd;
use std::os::unix::fs::MetadataExt;
use std::path::{Path, PathBuf};

use crate::host::LoadError;

/// Write bits for the group and for others.
const WRITABLE_BY_OTHERS: u32 = 0o022;

/// Open `path` and check that reel may load it; the open file keeps it from being swapped.
pub(crate) fn open_trusted(path: &Path) -> Result<File, LoadError> {
    let file = File::open(path).map_err(|e| LoadError::NotALibrary {
        path: path.to_path_buf(),
        reason: e.to_string(),
    })?;
    let meta = file.metadata().map_err(|e| LoadError::NotALibrary {
        path: path.to_path_buf(),
        reason: e.to_string(),
    })?;
    let euid = rustix::process::geteuid().as_raw();
    refusal(meta.is_file(), meta.mode(), meta.uid(), euid)
        .map(|reason| {
            Err(LoadError::Untrusted {
                path: path.to_path_buf(),
                reason,
            })
        })
        .unwrap_or(Ok(file))
}

/// Why a file of this kind, mode and owner may not be loaded by a host running as `euid`
/// (None: it may).
fn refusal(regular: bool, mode: u32, owner: u32, euid: u32) -> Option<String> {
    if !regular {
        return Some("it is not a regular file".into());
    }
    if mode & WRITABLE_BY_OTHERS != 0 {
        return Some(format!(
            "it is writable by {} (mode {:04o}), and whoever can write it runs code inside reel; \
             remove the bits with chmod go-w",
            if mode & 0o002 != 0 {
                "every user"
            } else {
                "its group"
            },
            mode & 0o7777
        ));
    }
    if owner != 0 && owner != euid {
        return Some(format!(
            "it is owned by uid {owner}, neither root nor the user reel runs as (uid {euid}), \
             and its owner can replace it; chown it to root"
        ));
    }
    None
}

/// The name to give the dynamic loader for `file`, opened from `path`.
pub(crate) fn loader_path(file: &File, path: &Path) -> PathBuf {
    let fd = Path::new("/proc/self/fd").join(file.as_raw_fd().to_string());
    if fd.exists() { fd } else { path.to_path_buf() }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_files_no_one_else_can_write_are_loaded() {
        let me = 1000;
        assert_eq!(refusal(true, 0o755, 0, me), None);
        assert_eq!(refusal(true, 0o644, me, me), None);
        assert_eq!(refusal(true, 0o500, me, me), None);
        let group = refusal(true, 0o775, 0, me).unwrap();
        assert!(
            group.contains("its group") && group.contains("0775"),
            "{group}"
        );
        let world = refusal(true, 0o757, me, me).unwrap();
        assert!(
            world.contains("every user") && world.contains("chmod go-w"),
            "{world}"
        );
        let stranger = refusal(true, 0o755, 1001, me).unwrap();
        assert!(
            stranger.contains("uid 1001") && stranger.contains("uid 1000"),
            "{stranger}"
        );
        assert!(refusal(false, 0o755, 0, me).unwrap().contains("regular"));
    }
}
