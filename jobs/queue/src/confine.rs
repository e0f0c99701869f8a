//! Where a job submitted with an API token may read and write on the server: beneath one of
//! the token's roots, reached with no symbolic link on the way, and never in reel's own
//! directories (its data directory, configuration, plugin and database files).
//!
//! The API checks a job's paths before it is queued ([`confine_paths`]), and the job carries the
//! root it was checked against (`confine` in its spec), so the worker resolves the same paths
//! beneath the same root again when it opens them, in the kernel
//! ([`reel_engine::session::confine`]): a directory swapped for a link after the check leads
//! nowhere. A path outside every root is refused with the same words whether it exists or not,
//! before anything is looked at, so a token learns nothing about the rest of the filesystem.

use std::path::{Path, PathBuf};

use reel_engine::session::confine::{describe, open_beneath};
use rustix::fs::OFlags;

use crate::token::within_roots;

/// Why a path was refused.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ConfineError {
    /// Not under any of the token's roots (whether or not it exists).
    #[error("`{field}` path {path} is outside this token's roots")]
    Outside {
        /// The request field.
        field: &'static str,
        /// The path as given.
        path: String,
    },
    /// Under, beside or above reel's own files.
    #[error("`{field}` path {path} reaches reel's own {own}")]
    Own {
        /// The request field.
        field: &'static str,
        /// The path as given.
        path: String,
        /// Which of reel's paths.
        own: String,
    },
    /// Under a root, but not reachable beneath it without a link (or not there at all).
    #[error("`{field}`: {reason}")]
    Unreachable {
        /// The request field.
        field: &'static str,
        /// What is wrong, with the path.
        reason: String,
    },
    /// The token has no roots: it cannot name paths at all.
    #[error("this token has no roots, so it cannot name `{field}` paths on the server")]
    NoRoots {
        /// The request field.
        field: &'static str,
    },
}

/// The root `path` lies in, after the lexical checks (absolute, no `..`, under a root, apart
/// from reel's own paths). Nothing on disk is looked at.
pub fn root_of(
    field: &'static str,
    path: &Path,
    roots: &[PathBuf],
    protected: &[PathBuf],
) -> Result<PathBuf, ConfineError> {
    if roots.is_empty() {
        return Err(ConfineError::NoRoots { field });
    }
    let root = within_roots(path, roots).ok_or_else(|| ConfineError::Outside {
        field,
        path: path.display().to_string(),
    })?;
    if let Some(own) = protected
        .iter()
        .find(|p| p.starts_with(path) || path.starts_with(p))
    {
        return Err(ConfineError::Own {
            field,
            path: path.display().to_string(),
            own: own.display().to_string(),
        });
    }
    Ok(root)
}

/// Check an archive source: it exists beneath `root` with no link on the way (the source
/// itself may be a link: it is archived as a link, never followed).
pub fn check_source(field: &'static str, root: &Path, path: &Path) -> Result<(), ConfineError> {
    let parent = path
        .parent()
        .filter(|p| p.starts_with(root))
        .unwrap_or(root);
    open_beneath(root, parent, OFlags::PATH | OFlags::DIRECTORY)
        .and_then(|_| open_beneath(root, path, OFlags::PATH | OFlags::NOFOLLOW))
        .map(drop)
        .map_err(|e| ConfineError::Unreachable {
            field,
            reason: describe(path, &e),
        })
}

/// Check a recall destination: the part of it that exists is directories beneath `root` with
/// no link on the way (the rest is created beneath `root` when the recall runs).
pub fn check_destination(
    field: &'static str,
    root: &Path,
    path: &Path,
) -> Result<(), ConfineError> {
    let mut at = path.to_path_buf();
    loop {
        match open_beneath(
            root,
            &at,
            OFlags::PATH | OFlags::DIRECTORY | OFlags::NOFOLLOW,
        ) {
            Ok(_) => return Ok(()),
            Err(e) if e.raw_os_error() == Some(nix::libc::ENOENT) && at != root => {
                if !at.pop() {
                    return Ok(());
                }
            }
            Err(e) => {
                return Err(ConfineError::Unreachable {
                    field,
                    reason: describe(&at, &e),
                });
            }
        }
    }
}

/// Every path of a job, checked: the root they all lie in (one job, one root).
pub fn confine_paths(
    field: &'static str,
    paths: &[PathBuf],
    roots: &[PathBuf],
    protected: &[PathBuf],
    destination: bool,
) -> Result<PathBuf, ConfineError> {
    let mut root: Option<PathBuf> = None;
    for p in paths {
        let r = root_of(field, p, roots, protected)?;
        if destination {
            check_destination(field, &r, p)?;
        } else {
            check_source(field, &r, p)?;
        }
        match &root {
            Some(first) if *first != r => {
                return Err(ConfineError::Unreachable {
                    field,
                    reason: format!(
                        "{} and the first path lie in different roots ({} and {}); submit one job per root",
                        p.display(),
                        r.display(),
                        first.display()
                    ),
                });
            }
            _ => root = Some(r),
        }
    }
    root.ok_or(ConfineError::Unreachable {
        field,
        reason: "no path given".into(),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn paths_are_confined_to_roots_apart_from_reels_own_and_never_through_links() {
        let d = tempfile::tempdir().unwrap();
        let root = d.path().join("data");
        let own = d.path().join("data/reel-data");
        std::fs::create_dir_all(root.join("in")).unwrap();
        std::fs::create_dir_all(&own).unwrap();
        std::fs::write(root.join("in/f"), b"x").unwrap();
        std::fs::write(d.path().join("secret"), b"s").unwrap();
        std::os::unix::fs::symlink(d.path(), root.join("up")).unwrap();
        std::os::unix::fs::symlink("/etc/passwd", root.join("in/link")).unwrap();
        let roots = vec![root.clone()];
        let prot = vec![own.clone()];
        let src = |p: &Path| confine_paths("paths", &[p.to_path_buf()], &roots, &prot, false);
        let dst = |p: &Path| confine_paths("to", &[p.to_path_buf()], &roots, &prot, true);
        assert_eq!(src(&root.join("in/f")).unwrap(), root);
        // A link as the source itself is archived as a link: allowed.
        assert!(src(&root.join("in/link")).is_ok());
        // Outside, whether it exists or not: the same refusal.
        let a = src(&d.path().join("secret")).unwrap_err().to_string();
        let b = src(&d.path().join("nothing")).unwrap_err().to_string();
        assert!(
            a.contains("outside this token's roots") && b.contains("outside"),
            "{a} {b}"
        );
        assert!(src(Path::new("/etc/shadow")).is_err());
        assert!(src(&root.join("in/../../secret")).is_err());
        // Through a link that leaves the root.
        let e = src(&root.join("up/secret")).unwrap_err().to_string();
        assert!(e.contains("symbolic link"), "{e}");
        // Reel's own directory, and a parent of it.
        assert!(matches!(src(&own), Err(ConfineError::Own { .. })));
        assert!(matches!(dst(&root), Err(ConfineError::Own { .. })));
        // A destination that does not exist yet is fine beneath a real directory.
        assert!(dst(&root.join("in/new/deeper")).is_ok());
        assert!(
            dst(&root.join("up/new"))
                .unwrap_err()
                .to_string()
                .contains("symbolic link")
        );
        assert!(dst(&root.join("in/f/x")).is_err());
        // No roots: nothing.
        assert!(matches!(
            confine_paths("to", &[root.join("in")], &[], &prot, true),
            Err(ConfineError::NoRoots { .. })
        ));
    }
}
