//! Plugins by name or by path. `[library] plugin` is either a plugin's name (`sim`, `scsi`,
//! `mhvtl`: letters, digits, `-` and `_` only) or the path of a `.so` (anything else, so
//! `libvendor.so.1` or `plugins/x.so` stay paths). A name is the file
//! `libreel_plugin_<name>.so` (a `-` in the name is a `_` in the file), looked for in the
//! plugin directory (`[library] plugin_dir`, by default [`DEFAULT_PLUGIN_DIR`], where the
//! packages install them) and then beside the running executable (a build tree, where cargo
//! puts the plugins next to `reel`). Whichever file is found is loaded by
//! [`load_plugin`](super::load_plugin), which checks that reel may load it.

use std::path::{Path, PathBuf};

use reel_plugin_abi::host::LoadError;

use super::error::DeviceError;

/// Where the packages install plugins.
pub const DEFAULT_PLUGIN_DIR: &str = "/usr/lib/reel/plugins";

/// True when `spec` names a plugin rather than a file.
pub fn is_plugin_name(spec: &str) -> bool {
    !spec.is_empty()
        && spec
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || c == '-' || c == '_')
}

/// The file a plugin named `name` is installed as.
pub fn plugin_file_name(name: &str) -> String {
    format!("libreel_plugin_{}.so", name.replace('-', "_"))
}

/// The directories searched for a plugin by name, in order: `plugin_dir` (empty:
/// [`DEFAULT_PLUGIN_DIR`]), then the running executable's own directory.
pub fn plugin_dirs(plugin_dir: &str) -> Vec<PathBuf> {
    let mut dirs = vec![PathBuf::from(if plugin_dir.is_empty() {
        DEFAULT_PLUGIN_DIR
    } else {
        plugin_dir
    })];
    if let Some(exe_dir) = std::env::current_exe()
        .ok()
        .and_then(|e| e.parent().map(Path::to_path_buf))
        && !dirs.contains(&exe_dir)
    {
        dirs.push(exe_dir);
    }
    dirs
}

/// The file `spec` means: a path as it is, a name looked up in `dirs` (the first that has it).
pub fn find_plugin(spec: &str, dirs: &[PathBuf]) -> Result<PathBuf, DeviceError> {
    if !is_plugin_name(spec) {
        return Ok(PathBuf::from(spec));
    }
    let file = plugin_file_name(spec);
    if let Some(found) = dirs.iter().map(|d| d.join(&file)).find(|p| p.is_file()) {
        return Ok(found);
    }
    Err(DeviceError::Load(LoadError::NotInstalled {
        name: spec.to_string(),
        file,
        searched: dirs
            .iter()
            .map(|d| d.display().to_string())
            .collect::<Vec<_>>()
            .join(", "),
    }))
}

/// The plugin files in `dirs` (every `libreel_plugin_*.so`, the files names map to; other
/// libraries there are not loaded to list them), each file once (by its resolved path) and in
/// order: a directory's files sorted by name, the directories in the order given. A directory
/// that does not exist or cannot be read has none.
pub fn installed_plugins(dirs: &[PathBuf]) -> Vec<PathBuf> {
    let mut seen = std::collections::HashSet::new();
    let mut out = Vec::new();
    for dir in dirs {
        let Ok(entries) = std::fs::read_dir(dir) else {
            continue;
        };
        let mut files: Vec<PathBuf> = entries
            .filter_map(|e| e.ok().map(|e| e.path()))
            .filter(|p| {
                p.file_name()
                    .and_then(|n| n.to_str())
                    .is_some_and(|n| n.starts_with("libreel_plugin_") && n.ends_with(".so"))
                    && p.is_file()
            })
            .collect();
        files.sort();
        for f in files {
            let key = std::fs::canonicalize(&f).unwrap_or_else(|_| f.clone());
            if seen.insert(key) {
                out.push(f);
            }
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_and_paths_are_told_apart() {
        assert!(is_plugin_name("sim"));
        assert!(is_plugin_name("mhvtl-test"));
        assert!(!is_plugin_name("libreel_plugin_sim.so"));
        assert!(!is_plugin_name("libvendor.so.1"));
        assert!(!is_plugin_name("s im"));
        assert!(!is_plugin_name("./sim"));
        assert!(!is_plugin_name(
            "/usr/lib/reel/plugins/libreel_plugin_sim.so"
        ));
        assert!(!is_plugin_name(""));
        assert_eq!(
            plugin_file_name("mhvtl-test"),
            "libreel_plugin_mhvtl_test.so"
        );
    }

    #[test]
    fn a_name_is_found_in_the_first_directory_that_has_it() {
        let a = tempfile::tempdir().unwrap();
        let b = tempfile::tempdir().unwrap();
        let dirs = vec![a.path().to_path_buf(), b.path().to_path_buf()];
        std::fs::write(b.path().join("libreel_plugin_sim.so"), b"x").unwrap();
        assert_eq!(
            find_plugin("sim", &dirs).unwrap(),
            b.path().join("libreel_plugin_sim.so")
        );
        std::fs::write(a.path().join("libreel_plugin_sim.so"), b"x").unwrap();
        assert_eq!(
            find_plugin("sim", &dirs).unwrap(),
            a.path().join("libreel_plugin_sim.so")
        );
        // A path is taken as it is, found or not.
        assert_eq!(
            find_plugin("./nope.so", &dirs).unwrap(),
            PathBuf::from("./nope.so")
        );
        let e = find_plugin("scsi", &dirs).unwrap_err().to_string();
        assert!(e.contains("libreel_plugin_scsi.so"), "{e}");
        assert!(e.contains(&a.path().display().to_string()), "{e}");
        assert!(e.contains("plugin_dir"), "{e}");
        // Not a name: a path, as it is.
        assert_eq!(
            find_plugin("libvendor.so.1", &dirs).unwrap(),
            PathBuf::from("libvendor.so.1")
        );
        // Listing: every plugin file once, in order; other libraries are left alone.
        std::fs::write(a.path().join("libreel_plugin_other.so"), b"x").unwrap();
        std::fs::write(a.path().join("libc-helper.so"), b"x").unwrap();
        std::fs::write(a.path().join("README"), b"x").unwrap();
        std::os::unix::fs::symlink(
            a.path().join("libreel_plugin_other.so"),
            b.path().join("libreel_plugin_alias.so"),
        )
        .unwrap();
        let listed = installed_plugins(&dirs);
        assert_eq!(
            listed,
            vec![
                a.path().join("libreel_plugin_other.so"),
                a.path().join("libreel_plugin_sim.so"),
                b.path().join("libreel_plugin_sim.so"),
            ]
        );
    }
}
