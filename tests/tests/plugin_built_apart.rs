//! Plugins built apart from reel and swapped under it, as an operator or a vendor would:
//!
//! - the simulator's sources built as a cargo project of their own outside the workspace
//!   (its own `[workspace]`, depending on the ABI crate by path and on nothing of reel's engine),
//!   installed by name into a plugin directory, used by a `reel worker` built elsewhere (the
//!   workspace's) to archive; then a newer build of it replaces the file while the worker is
//!   stopped, and the restarted worker loads the new build (its version in the log and in
//!   `reel plugin ls`) and recalls what the old one wrote, byte for byte;
//! - the C reference plugin compiled with nothing but the header (as `reel-plugin-dev`
//!   installs it) and checked by `reel plugin check`.
//!
//! Builds offline from the workspace's lock file and the local registry cache.

use std::path::{Path, PathBuf};
use std::process::Command;

use reel_tests::*;

/// The workspace's declaration of dependency `name` (`"1"`, `{ version = … }`).
fn workspace_dep(name: &str) -> String {
    let manifest = std::fs::read_to_string(workspace_dir().join("Cargo.toml")).unwrap();
    manifest
        .lines()
        .find_map(|l| l.strip_prefix(&format!("{name} = ")))
        .unwrap_or_else(|| panic!("{name} is not a workspace dependency"))
        .to_string()
}

/// Build the simulator's sources as a project of their own, reporting `version`; returns the
/// `.so`. Both builds share `target`, so the second compiles only the plugin.
fn build_sim_apart(dir: &Path, version: &str, target: &Path) -> PathBuf {
    let ws = workspace_dir();
    let project = dir.join(format!("sim-{version}"));
    let src = project.join("src");
    std::fs::create_dir_all(&src).unwrap();
    for entry in std::fs::read_dir(ws.join("plugins/sim/src")).unwrap() {
        let path = entry.unwrap().path();
        std::fs::copy(&path, src.join(path.file_name().unwrap())).unwrap();
    }
    let mut manifest = format!(
        "[package]\nname = \"reel-plugin-sim\"\nversion = \"{version}\"\nedition = \"2024\"\n\n\
         [lib]\ncrate-type = [\"cdylib\"]\n\n[dependencies]\n\
         reel-plugin-abi = {{ path = \"{}\" }}\n",
        ws.join("plugins/abi").display()
    );
    for dep in [
        "crc32c",
        "nix",
        "serde",
        "serde_json",
        "thiserror",
        "tracing",
    ] {
        manifest.push_str(&format!("{dep} = {}\n", workspace_dep(dep)));
    }
    // A workspace of its own: nothing of reel's is built with it.
    manifest.push_str("\n[workspace]\n");
    std::fs::write(project.join("Cargo.toml"), manifest).unwrap();
    std::fs::copy(ws.join("Cargo.lock"), project.join("Cargo.lock")).unwrap();
    run_ok(
        Command::new("cargo")
            .args(["build", "--offline", "--manifest-path"])
            .arg(project.join("Cargo.toml"))
            .env("CARGO_TARGET_DIR", target)
            .env_remove("RUSTFLAGS"),
        "building the simulator apart",
    );
    let so = target.join("debug/libreel_plugin_sim.so");
    assert!(so.is_file(), "{} not built", so.display());
    so
}

/// Install `so` as `plugins/libreel_plugin_sim.so`, replacing a previous build by rename.
fn install(so: &Path, plugins: &Path) {
    let tmp = plugins.join(".libreel_plugin_sim.so.new");
    std::fs::copy(so, &tmp).unwrap();
    std::fs::rename(&tmp, plugins.join("libreel_plugin_sim.so")).unwrap();
}

fn listed_version(dir: &Path, plugins: &Path) -> String {
    let (code, v, err) = reel(dir, &["plugin", "ls"]);
    assert_eq!(code, 0, "{v} {err}");
    let want = plugins.join("libreel_plugin_sim.so").display().to_string();
    v["plugins"]
        .as_array()
        .unwrap()
        .iter()
        .find(|p| p["path"] == want)
        .and_then(|p| p["version"].as_str())
        .unwrap_or_else(|| panic!("{want} not listed: {v}"))
        .to_string()
}

#[test]
fn a_plugin_built_apart_is_swapped_under_a_stopped_worker() {
    let work = tempfile::tempdir().unwrap();
    let target = work.path().join("target");
    let plugins = tempfile::tempdir().unwrap();
    install(
        &build_sim_apart(work.path(), "0.1.0-apart.1", &target),
        plugins.path(),
    );

    let dir = tempfile::tempdir().unwrap();
    let lib = tempfile::tempdir().unwrap();
    write_config(dir.path(), "sqlite:reel.db", lib.path(), 1, "");
    name_the_plugin(dir.path(), "sim", plugins.path());
    assert_eq!(listed_version(dir.path(), plugins.path()), "0.1.0-apart.1");

    let mut worker = Worker::start(dir.path(), 1);
    let (code, v, err) = reel(dir.path(), &["intake", "--all-new", "--wait"]);
    assert_eq!(code, 0, "intake: {v} {err}");
    let src = tempfile::tempdir().unwrap();
    let sum = write_random_file(&src.path().join("a.bin"), 5 << 20, 11);
    let srcs = src.path().to_str().unwrap();
    let (code, v, err) = reel(
        dir.path(),
        &["archive", srcs, "--key-prefix", "apart/", "--wait"],
    );
    assert_eq!(code, 0, "archive: {v} {err}");
    assert_eq!(
        terminate(&mut worker.child),
        0,
        "the worker stops gracefully"
    );

    // A newer build replaces the file while no worker runs; reel itself is not rebuilt.
    install(
        &build_sim_apart(work.path(), "0.1.0-apart.2", &target),
        plugins.path(),
    );
    assert_eq!(listed_version(dir.path(), plugins.path()), "0.1.0-apart.2");
    let worker = Worker::start(dir.path(), 2);
    let dst = tempfile::tempdir().unwrap();
    let dsts = dst.path().to_str().unwrap();
    let (code, v, err) = reel(
        dir.path(),
        &["recall", "apart/a.bin", "--to", dsts, "--wait"],
    );
    assert_eq!(code, 0, "recall: {v} {err}");
    assert_eq!(sha256_file(&dst.path().join("apart/a.bin")), sum);
    drop(worker);
    let log = std::fs::read_to_string(dir.path().join("worker-2.log")).unwrap();
    assert!(
        log.contains("device plugin loaded") && log.contains("0.1.0-apart.2"),
        "{log}"
    );

    // The C reference plugin, compiled against the header alone.
    let include = work.path().join("include/reel");
    std::fs::create_dir_all(&include).unwrap();
    std::fs::copy(
        workspace_dir().join("plugins/abi/include/reel_plugin.h"),
        include.join("reel_plugin.h"),
    )
    .unwrap();
    let so = work.path().join("libmemtape.so");
    run_ok(
        Command::new(std::env::var("CC").unwrap_or_else(|_| "cc".into()))
            .args([
                "-std=c11", "-Wall", "-Wextra", "-Werror", "-shared", "-fPIC",
            ])
            .arg("-pthread")
            .arg("-I")
            .arg(&include)
            .arg(workspace_dir().join("plugins/abi/tests/c/memtape.c"))
            .arg("-o")
            .arg(&so),
        "compiling the C reference plugin against the header alone",
    );
    let (code, v, err) = reel(
        dir.path(),
        &["plugin", "check", so.to_str().unwrap(), "--yes"],
    );
    assert_eq!(code, 0, "{v} {err}");
    assert_eq!(v["passed"], true, "{v}");
}
