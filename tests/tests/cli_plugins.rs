//! Device plugins by name and by path through the `reel` binary: `[library] plugin = "sim"`
//! found in `[library] plugin_dir` by a worker that archives and recalls with it, `reel plugin
//! ls` listing what is installed (and why a file is refused), and `reel plugin check` running
//! the contract kit, only when told the media are scratch.

use std::os::unix::fs::PermissionsExt;
use std::path::Path;

use reel_tests::*;

/// A data dir whose config names the simulator by name, installed in `plugins`.
fn named_config(dir: &Path, plugins: &Path, lib: &Path, name: &str) {
    write_config(dir, "sqlite:reel.db", lib, 1, "");
    name_the_plugin(dir, name, plugins);
}

#[test]
fn plugins_by_name_listed_checked_and_used_by_a_worker() {
    let plugins = tempfile::tempdir().unwrap();
    let installed = plugins.path().join("libreel_plugin_sim.so");
    std::fs::copy(plugin_path("reel_plugin_sim"), &installed).unwrap();
    std::fs::set_permissions(&installed, std::fs::Permissions::from_mode(0o755)).unwrap();
    let loose = plugins.path().join("libreel_plugin_loose.so");
    std::fs::copy(plugin_path("reel_plugin_sim"), &loose).unwrap();
    std::fs::set_permissions(&loose, std::fs::Permissions::from_mode(0o757)).unwrap();

    let dir = tempfile::tempdir().unwrap();
    let lib = tempfile::tempdir().unwrap();
    named_config(dir.path(), plugins.path(), lib.path(), "sim");

    // ls: the installed copy, marked as the configured one; the loose copy refused, with why.
    let (code, v, err) = reel(dir.path(), &["plugin", "ls"]);
    assert_eq!(code, 0, "{v} {err}");
    let rows = v["plugins"].as_array().unwrap();
    let row = |p: &Path| {
        rows.iter()
            .find(|r| r["path"] == p.display().to_string())
            .unwrap_or_else(|| panic!("{} not listed: {v}", p.display()))
    };
    let sim = row(&installed);
    assert_eq!(sim["name"], "reel-sim", "{sim}");
    assert_eq!(sim["configured"], true, "{sim}");
    assert!(sim["abi"].as_str().unwrap().starts_with("1."), "{sim}");
    let caps: Vec<&str> = sim["capabilities"]
        .as_array()
        .unwrap()
        .iter()
        .filter_map(|c| c.as_str())
        .collect();
    assert!(caps.contains(&"CHANGER") && caps.contains(&"LBP"), "{sim}");
    let refused = row(&loose);
    let why = refused["error"].as_str().unwrap();
    assert!(
        why.contains("refused to load") && why.contains("every user"),
        "{refused}"
    );
    assert_eq!(v["searched"][0], plugins.path().display().to_string());

    // check: refused without --yes (the kit overwrites a cartridge), then run on the
    // configured library with the configured plugin_config.
    let (code, v, err) = reel(dir.path(), &["plugin", "check", "sim"]);
    assert_ne!(code, 0, "{v}");
    assert!(
        err.contains("destructive") && err.contains("--yes"),
        "{err}"
    );
    let (code, v, err) = reel(dir.path(), &["plugin", "check", "sim", "--yes"]);
    // The configured library has no WORM cartridge: that check fails, and the exit says so.
    assert_eq!(code, 1, "{v} {err}");
    assert_eq!(v["passed"], false, "{v}");
    let failed: Vec<&str> = v["checks"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|c| c["outcome"] == "fail")
        .filter_map(|c| c["check"].as_str())
        .collect();
    assert_eq!(failed, ["worm"], "{v}");
    assert!(err.contains("running library_open"), "{err}");
    // With a configuration of its own that has one, from a file: every check passes.
    let kit_lib = tempfile::tempdir().unwrap();
    let kit_cfg = dir.path().join("kit.conf");
    std::fs::write(
        &kit_cfg,
        format!(
            "dir={}\nsim.calibrated=true\nsim.worm_cartridges=1\n",
            kit_lib.path().display()
        ),
    )
    .unwrap();
    let at_cfg = format!("@{}", kit_cfg.display());
    let (code, v, err) = reel(dir.path(), &["plugin", "check", "sim", &at_cfg, "--yes"]);
    assert_eq!(code, 0, "{v} {err}");
    assert_eq!(v["passed"], true, "{v}");
    assert!(v["checks"].as_array().unwrap().len() > 20, "{v}");
    // A name not installed, and a refused file, say so.
    let (code, _, err) = reel(dir.path(), &["plugin", "check", "nope", "--yes"]);
    assert_ne!(code, 0);
    assert!(
        err.contains("no plugin named `nope`")
            && err.contains("libreel_plugin_nope.so")
            && err.contains(&plugins.path().display().to_string()),
        "{err}"
    );
    let (code, _, err) = reel(dir.path(), &["plugin", "check", "loose", "--yes"]);
    assert_ne!(code, 0);
    assert!(err.contains("chmod o-w"), "{err}");

    // A worker with the plugin by name archives and recalls through it.
    let worker = Worker::start(dir.path(), 1);
    let (code, v, err) = reel(dir.path(), &["intake", "--all-new", "--wait"]);
    assert_eq!(code, 0, "intake: {v} {err}");
    let src = tempfile::tempdir().unwrap();
    let sum = write_random_file(&src.path().join("a.bin"), 3 << 20, 7);
    let (code, v, err) = reel(
        dir.path(),
        &[
            "archive",
            src.path().to_str().unwrap(),
            "--key-prefix",
            "n/",
            "--wait",
        ],
    );
    assert_eq!(code, 0, "archive: {v} {err}");
    let dst = tempfile::tempdir().unwrap();
    let (code, v, err) = reel(
        dir.path(),
        &[
            "recall",
            "n/a.bin",
            "--to",
            dst.path().to_str().unwrap(),
            "--wait",
        ],
    );
    assert_eq!(code, 0, "recall: {v} {err}");
    assert_eq!(sha256_file(&dst.path().join("n/a.bin")), sum);
    drop(worker);

    // The library view finds the plugin by name too; a name not installed is a clear refusal.
    let (code, v, err) = reel(dir.path(), &["library", "inventory"]);
    assert_eq!(code, 0, "{v} {err}");
    let other = tempfile::tempdir().unwrap();
    named_config(other.path(), plugins.path(), lib.path(), "tapeworm");
    let (code, _, err) = reel(other.path(), &["library", "inventory"]);
    assert_ne!(code, 0);
    assert!(
        err.contains("no plugin named `tapeworm`") && err.contains("plugin_dir"),
        "{err}"
    );
}
