//! Which plugin files the host loads. A plugin runs inside reel with all of reel's rights (its
//! database, its spool, `CAP_SYS_RAWIO` on a drive host), so whoever can write the `.so`, or
//! put another file under its name, can run code as reel. The host loads a file only if:
//!
//! - it is a regular file (never opened in a way that blocks or acts: a FIFO or a tape device
//!   named by mistake is refused, not waited on or rewound);
//! - it is owned by root or by the user the host runs as, and not writable by every user
//!   (group write is allowed: a umask of 002 is common, and the group is the operator's to keep);
//! - if the name is a symlink, the link too is owned by root or reel's user (in a sticky
//!   directory such as `/tmp` another user could plant a link to some root-owned library);
//! - the directory holding the name is not writable by every user unless it is sticky, so no
//!   one else can put another file under the name.
//!
//! The file is opened once, checked through that descriptor (`fstat`), and the dynamic loader
//! is given the descriptor's `/proc/self/fd/N` name: the file checked is the file loaded, with
//! no window in which a rename or a symlink swap could put another one in its place. The
//! descriptor of a loaded library is never closed: the loader recognises a library it has by
//! its name, so a number used again would hand the next plugin this one. The same file loaded
//! again reuses its first name (keyed by device and inode, which stay unique while the
//! descriptor holds the file open), so loading one plugin many times keeps one descriptor.
//! Where `/proc` is not mounted the loader is given the path instead (checked, then loaded).

use std::collections::HashMap;
use std::fs::File;
use std::os::fd::AsRawFd;
use std::os::unix::fs::MetadataExt;
use std::path::{Path, PathBuf};
use std::sync::{Mutex, OnceLock, PoisonError};

use rustix::fs::{Mode, OFlags};

use crate::host::LoadError;

/// Write bit for every other user.
const WRITABLE_BY_ALL: u32 = 0o002;
/// The sticky bit: in such a directory only an entry's owner may remove or rename it.
const STICKY: u32 = 0o1000;

/// A plugin file opened for loading.
pub(crate) struct Opened {
    /// The open file (kept open for the process's life once loaded).
    pub file: File,
    /// What to give the dynamic loader.
    pub loader_name: PathBuf,
    /// True when this file was loaded before under `loader_name`: drop `file`, the first
    /// descriptor keeps the name.
    pub seen: bool,
    key: (u64, u64),
}

/// Files loaded so far: (device, inode) → the name the loader knows them by.
fn loaded_names() -> &'static Mutex<HashMap<(u64, u64), PathBuf>> {
    static NAMES: OnceLock<Mutex<HashMap<(u64, u64), PathBuf>>> = OnceLock::new();
    NAMES.get_or_init(Default::default)
}

/// Open `path` and check that reel may load it; the open file keeps it from being swapped.
pub(crate) fn open_trusted(path: &Path) -> Result<Opened, LoadError> {
    let untrusted = |reason: String| LoadError::Untrusted {
        path: path.to_path_buf(),
        reason,
    };
    let unreadable = |e: std::io::Error| LoadError::Unreadable {
        path: path.to_path_buf(),
        reason: e.to_string(),
    };
    let euid = rustix::process::geteuid().as_raw();
    let link = std::fs::symlink_metadata(path).map_err(unreadable)?;
    if link.file_type().is_symlink() && link.uid() != 0 && link.uid() != euid {
        return Err(untrusted(format!(
            "it is a symlink owned by uid {}, neither root nor the user reel runs as (uid \
             {euid}); install the plugin file itself, or a link made by root",
            link.uid()
        )));
    }
    if let Some(dir) = path.parent().map(|d| {
        if d.as_os_str().is_empty() {
            Path::new(".")
        } else {
            d
        }
    }) && let Ok(meta) = std::fs::metadata(dir)
        && meta.mode() & WRITABLE_BY_ALL != 0
        && meta.mode() & STICKY == 0
    {
        return Err(untrusted(format!(
            "its directory {} is writable by every user (mode {:04o}), who could put another \
             file under this name; install plugins in a directory only root can write",
            dir.display(),
            meta.mode() & 0o7777
        )));
    }
    // Non-blocking and without a controlling terminal: a FIFO or a device named by mistake is
    // opened without waiting or acting, then refused below.
    let fd = rustix::fs::open(
        path,
        OFlags::RDONLY | OFlags::NONBLOCK | OFlags::NOCTTY | OFlags::CLOEXEC,
        Mode::empty(),
    )
    .map_err(|e| unreadable(e.into()))?;
    let file = File::from(fd);
    let meta = file.metadata().map_err(unreadable)?;
    if let Some(reason) = refusal(meta.is_file(), meta.mode(), meta.uid(), euid) {
        return Err(untrusted(reason));
    }
    let key = (meta.dev(), meta.ino());
    if let Some(name) = loaded_names()
        .lock()
        .unwrap_or_else(PoisonError::into_inner)
        .get(&key)
    {
        return Ok(Opened {
            file,
            loader_name: name.clone(),
            seen: true,
            key,
        });
    }
    let fd_name = Path::new("/proc/self/fd").join(file.as_raw_fd().to_string());
    let loader_name = if fd_name.exists() {
        fd_name
    } else {
        path.to_path_buf()
    };
    Ok(Opened {
        file,
        loader_name,
        seen: false,
        key,
    })
}

impl Opened {
    /// The loader has the library: keep the descriptor (and so its name) for the process's
    /// life, and remember the name for the next load of the same file.
    pub(crate) fn keep(self) {
        if self.seen {
            return;
        }
        loaded_names()
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .insert(self.key, self.loader_name);
        let _kept_open = std::os::fd::IntoRawFd::into_raw_fd(self.file);
    }
}

/// Why a file of this kind, mode and owner may not be loaded by a host running as `euid`
/// (None: it may).
fn refusal(regular: bool, mode: u32, owner: u32, euid: u32) -> Option<String> {
    if !regular {
        return Some(
            "it is not a regular file (a directory, device or FIFO); give the path of the \
             plugin's .so, or its name"
                .into(),
        );
    }
    if mode & WRITABLE_BY_ALL != 0 {
        return Some(format!(
            "it is writable by every user (mode {:04o}), and whoever can write it runs code \
             inside reel; remove the bit with chmod o-w",
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_files_other_users_cannot_write_are_loaded() {
        let me = 1000;
        assert_eq!(refusal(true, 0o755, 0, me), None);
        assert_eq!(refusal(true, 0o644, me, me), None);
        assert_eq!(refusal(true, 0o500, me, me), None);
        // Group write is the operator's to keep (umask 002 is common).
        assert_eq!(refusal(true, 0o775, 0, me), None);
        let world = refusal(true, 0o757, me, me).unwrap();
        assert!(
            world.contains("every user") && world.contains("0757") && world.contains("chmod o-w"),
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
