//! Opening a path beneath a confinement root without a race: the root is opened once (it is an
//! operator's choice and may itself be a link), and everything below it is resolved by the
//! kernel with `openat2(RESOLVE_BENEATH | RESOLVE_NO_SYMLINKS)`: no `..` out of it, no
//! symbolic link at any step, no magic link. A path swapped for a link between a check and the
//! open cannot lead the open out, because there is no separate check.
//!
//! Used when a job came through the HTTP API with a token's roots: archive sources are opened
//! with [`open_beneath`], and a recall's destination directory is walked with
//! [`crate::session::destination::Staging::open_within`].

use std::io;
use std::os::fd::OwnedFd;
use std::path::{Component, Path, PathBuf};

use rustix::fs::{CWD, Mode, OFlags, ResolveFlags};

/// `path` relative to `root`, refusing a `path` that is not under `root` or that holds `..`.
pub fn relative_to<'a>(root: &Path, path: &'a Path) -> io::Result<&'a Path> {
    if path.components().any(|c| c == Component::ParentDir) {
        return Err(io::Error::new(
            io::ErrorKind::PermissionDenied,
            format!("{} contains `..`", path.display()),
        ));
    }
    path.strip_prefix(root).map_err(|_| {
        io::Error::new(
            io::ErrorKind::PermissionDenied,
            format!("{} is not under {}", path.display(), root.display()),
        )
    })
}

/// Open the confinement root itself, with no symbolic link at any step of its path: roots are
/// stored as their links resolved when the token is created, so a link found on the way now
/// was put there since (a client that renamed its root and left a link to elsewhere in its
/// place) and is refused with `ELOOP`.
pub fn open_root(root: &Path) -> io::Result<OwnedFd> {
    if !root.is_absolute() {
        return Err(io::Error::new(
            io::ErrorKind::PermissionDenied,
            format!("root {} is not absolute", root.display()),
        ));
    }
    Ok(rustix::fs::openat2(
        CWD,
        root,
        OFlags::PATH | OFlags::DIRECTORY | OFlags::CLOEXEC,
        Mode::empty(),
        ResolveFlags::NO_SYMLINKS | ResolveFlags::NO_MAGICLINKS,
    )?)
}

/// Open `path` (absolute, under `root`) with `flags`, resolving everything below `root` in
/// the kernel with no symbolic link and no escape. `path == root` opens the root again.
/// A link on the way fails with `ELOOP`, an escape with `EXDEV`.
pub fn open_beneath(root: &Path, path: &Path, flags: OFlags) -> io::Result<OwnedFd> {
    let rel = relative_to(root, path)?;
    let base = open_root(root)?;
    let rel: PathBuf = if rel.as_os_str().is_empty() {
        PathBuf::from(".")
    } else {
        rel.to_path_buf()
    };
    Ok(rustix::fs::openat2(
        &base,
        &rel,
        flags | OFlags::CLOEXEC,
        Mode::empty(),
        ResolveFlags::BENEATH | ResolveFlags::NO_SYMLINKS | ResolveFlags::NO_MAGICLINKS,
    )?)
}

/// Words for an error of [`open_beneath`].
pub fn describe(path: &Path, e: &io::Error) -> String {
    match e.raw_os_error() {
        Some(nix::libc::ELOOP) => format!(
            "{}: a symbolic link is on the way, and paths of a confined job are not resolved through links",
            path.display()
        ),
        Some(nix::libc::EXDEV) => format!("{}: leaves its root", path.display()),
        Some(nix::libc::ENOENT) => format!("{}: does not exist", path.display()),
        Some(nix::libc::ENOTDIR) => format!("{}: a part of it is not a directory", path.display()),
        _ => format!("{}: {e}", path.display()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn opens_beneath_the_root_and_never_through_a_link() {
        let d = tempfile::tempdir().unwrap();
        let root = d.path().join("root");
        std::fs::create_dir_all(root.join("a")).unwrap();
        std::fs::write(root.join("a/f"), b"x").unwrap();
        std::fs::write(d.path().join("secret"), b"s").unwrap();
        std::os::unix::fs::symlink(d.path(), root.join("out")).unwrap();
        std::os::unix::fs::symlink(root.join("a"), root.join("in")).unwrap();
        assert!(open_beneath(&root, &root.join("a/f"), OFlags::RDONLY).is_ok());
        assert!(open_beneath(&root, &root, OFlags::PATH | OFlags::DIRECTORY).is_ok());
        // A link out, and even a link that stays inside, is refused at any step.
        for p in ["out/secret", "in/f"] {
            let e = open_beneath(&root, &root.join(p), OFlags::RDONLY).unwrap_err();
            assert_eq!(e.raw_os_error(), Some(nix::libc::ELOOP), "{p}: {e}");
            assert!(describe(&root.join(p), &e).contains("symbolic link"));
        }
        // `..` and paths outside the root never reach the kernel.
        assert!(open_beneath(&root, &root.join("a/../../secret"), OFlags::RDONLY).is_err());
        assert!(open_beneath(&root, &d.path().join("secret"), OFlags::RDONLY).is_err());
        let e = open_beneath(&root, &root.join("nope"), OFlags::RDONLY).unwrap_err();
        assert!(describe(&root.join("nope"), &e).contains("does not exist"));
        // The root itself swapped for a link (its owner renamed it): refused, not followed.
        std::fs::rename(&root, d.path().join("root.real")).unwrap();
        std::os::unix::fs::symlink(d.path(), &root).unwrap();
        let e = open_beneath(&root, &root.join("secret"), OFlags::RDONLY).unwrap_err();
        assert_eq!(e.raw_os_error(), Some(nix::libc::ELOOP), "{e}");
    }
}
