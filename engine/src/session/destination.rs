//! Where a recalled object lands: a key becomes a relative path under the destination root,
//! and nothing may escape that root (no `..`, no absolute paths, no NUL bytes, no symlinked
//! parent leading outside).

use std::path::{Component, Path, PathBuf};

use super::SessionError;

/// Join `key` under `root`, refusing keys that would leave it.
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

/// Create the parent directories of `path` and check, after symlinks are resolved, that the
/// parent is still under `root`.
pub fn prepare_parent(root: &Path, path: &Path) -> Result<(), SessionError> {
    let parent = path.parent().ok_or_else(|| {
        SessionError::Other(format!("{} has no parent directory", path.display()))
    })?;
    std::fs::create_dir_all(parent).map_err(|e| SessionError::io(parent, e))?;
    let root_c = root.canonicalize().map_err(|e| SessionError::io(root, e))?;
    let parent_c = parent
        .canonicalize()
        .map_err(|e| SessionError::io(parent, e))?;
    if !parent_c.starts_with(&root_c) {
        return Err(SessionError::UnsafeKey {
            key: path.display().to_string(),
            reason: format!(
                "its directory resolves to {} outside the destination {}",
                parent_c.display(),
                root_c.display()
            ),
        });
    }
    Ok(())
}

#[cfg(test)]
mod tests {
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
        ] {
            assert!(safe_join(r, k).is_err(), "{k:?} accepted");
            // The same rule as the catalogue's: what it refuses, recall refuses.
            assert!(crate::catalogue::validate_key(k).is_err(), "{k:?}");
        }
    }

    #[test]
    fn symlinked_parent_outside_is_refused() {
        let root = tempfile::tempdir().unwrap();
        let outside = tempfile::tempdir().unwrap();
        std::os::unix::fs::symlink(outside.path(), root.path().join("link")).unwrap();
        let p = safe_join(root.path(), "link/file").unwrap();
        assert!(prepare_parent(root.path(), &p).is_err());
        let ok = safe_join(root.path(), "d/file").unwrap();
        prepare_parent(root.path(), &ok).unwrap();
    }
}
