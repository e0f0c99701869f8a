//! The library's identity comes from the library (issue #15 item 5): two hosts that reach one
//! simulated library through the plugin installed at different paths, with their configuration
//! written differently, name its drives alike (`simlib-<serial>-<index>`), so they share drive
//! leases and drive-board rows. Through the `reel` binary and `reel worker`, the simulator loaded
//! through dlopen, the hosts sharing one job database.

use std::path::Path;

use reel_tests::*;

/// The drive names on the drive board, as `reel library drives` shows them.
fn board_drives(dir: &Path) -> Vec<String> {
    let (code, v, err) = reel(dir, &["library", "drives"]);
    assert_eq!(code, 0, "library drives: {v} {err}");
    let mut names: Vec<String> = v["in_use"]
        .as_array()
        .unwrap_or_else(|| panic!("library drives: {v}"))
        .iter()
        .filter_map(|d| d["drive"].as_str().map(String::from))
        .collect();
    names.sort();
    names
}

/// Wait (bounded) until the board shows both drives.
fn wait_for_board(dir: &Path) -> Vec<String> {
    let t0 = std::time::Instant::now();
    loop {
        let names = board_drives(dir);
        if names.len() >= 2 || t0.elapsed() > std::time::Duration::from_secs(60) {
            return names;
        }
        std::thread::sleep(std::time::Duration::from_millis(200));
    }
}

#[test]
fn two_hosts_with_different_plugin_paths_and_configs_name_the_library_alike() {
    let lib = tempfile::tempdir().unwrap();
    let a = tempfile::tempdir().unwrap();
    let b = tempfile::tempdir().unwrap();
    let jobs_db = a.path().join("jobs.db");

    // Host A: the plugin where the build put it.
    write_plugin_config(
        a.path(),
        "sqlite:reel.db",
        &plugin_path("reel_plugin_sim"),
        &format!(
            "dir={}\\nsim.clock=instant\\nsim.calibrated=true\\nsim.drives=2\\nsim.cartridges=4\\nsim.shared=true",
            lib.path().display()
        ),
        "",
    );
    // Host B: the same plugin installed elsewhere (a copy), its settings in another order and
    // the directory named through a symbolic link; the same job database as A.
    let install = tempfile::tempdir().unwrap();
    let copy = install.path().join("libreel_plugin_sim.so");
    std::fs::copy(plugin_path("reel_plugin_sim"), &copy).unwrap();
    let link = install.path().join("tapes");
    std::os::unix::fs::symlink(lib.path(), &link).unwrap();
    let cfg = write_plugin_config(
        b.path(),
        "sqlite:reel.db",
        &copy,
        &format!(
            "sim.shared=true\\nsim.cartridges=4\\nsim.drives=2\\nsim.calibrated=true\\nsim.clock=instant\\ndir={}",
            link.display()
        ),
        "",
    );
    let text = std::fs::read_to_string(&cfg).unwrap().replace(
        "jobs_url = \"sqlite:jobs.db\"",
        &format!("jobs_url = \"sqlite:{}\"", jobs_db.display()),
    );
    assert!(text.contains(&jobs_db.display().to_string()), "{text}");
    std::fs::write(&cfg, text).unwrap();

    let w = Worker::start(a.path(), 1);
    let seen_by_a = wait_for_board(a.path());
    assert_eq!(w.stop(), 0, "worker A exit");
    let w = Worker::start(b.path(), 1);
    let seen_by_b = wait_for_board(b.path());
    assert_eq!(w.stop(), 0, "worker B exit");

    // The library's serial number, as the simulator keeps it.
    let serial = std::fs::read_to_string(lib.path().join("serial")).unwrap();
    let serial = serial.trim();
    assert_eq!(serial.len(), 12, "{serial}");
    let want: Vec<String> = (0..2).map(|i| format!("simlib-{serial}-{i}")).collect();
    assert_eq!(seen_by_a, want, "host A's drive names");
    assert_eq!(seen_by_b, want, "host B's drive names");
}
