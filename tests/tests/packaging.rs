//! The packages and the systemd units, as an operator installs them: the units pass
//! `systemd-analyze verify` with no warning; `cargo deb` makes the five packages (reel, one
//! per plugin, reel-plugin-dev) from the workspace's own build, each holding what
//! packaging/README.md says; and the `reel` unpacked from its package finds the simulator
//! unpacked from its own by name, lists it and opens its library. Needs `cargo-deb`,
//! `dpkg-deb` and `systemd-analyze` (`.ci/run` installs them); without them the test fails
//! under `CI=true` and says what is missing elsewhere.

use std::path::Path;
use std::process::Command;

use reel_tests::*;

/// Whether `tool` runs; under CI a missing tool is a failure.
fn have(tool: &str, args: &[&str]) -> bool {
    let ok = Command::new(tool)
        .args(args)
        .output()
        .is_ok_and(|o| o.status.success());
    if !ok {
        assert!(
            std::env::var("CI").is_err(),
            "{tool} is needed by the packaging test (.ci/run installs it)"
        );
        eprintln!("SKIPPING packaging test: {tool} is not installed");
    }
    ok
}

#[test]
fn systemd_units_verify_without_a_warning() {
    if !have("systemd-analyze", &["--version"]) {
        return;
    }
    let units = workspace_dir().join("packaging/systemd");
    let dir = tempfile::tempdir().unwrap();
    let reel = binary_path("reel");
    for entry in std::fs::read_dir(&units).unwrap() {
        let path = entry.unwrap().path();
        let text = std::fs::read_to_string(&path).unwrap();
        // The binary as installed is /usr/bin/reel; verify needs one that exists.
        let text = text.replace("/usr/bin/reel", &reel.display().to_string());
        let name = path.file_name().unwrap().to_string_lossy().into_owned();
        // A template is verified as an instance of it.
        let name = name.replace("@.service", "@lib1.service");
        std::fs::write(dir.path().join(&name), text).unwrap();
        let out = Command::new("systemd-analyze")
            .args(["verify", "--man=no"])
            .arg(dir.path().join(&name))
            .output()
            .unwrap();
        let said = String::from_utf8_lossy(&out.stderr).into_owned()
            + &String::from_utf8_lossy(&out.stdout);
        assert!(
            out.status.success() && said.trim().is_empty(),
            "{name}: {said}"
        );
    }
}

fn dpkg_field(deb: &Path, field: &str) -> String {
    let out = run_ok(
        Command::new("dpkg-deb").arg("-f").arg(deb).arg(field),
        "dpkg-deb -f",
    );
    String::from_utf8_lossy(&out).trim().to_string()
}

#[test]
fn the_packages_hold_what_an_operator_installs_and_run_from_where_they_install() {
    if !have("cargo-deb", &["--version"]) || !have("dpkg-deb", &["--version"]) {
        return;
    }
    let ws = workspace_dir();
    let profile = target_dir();
    let profile_name = profile.file_name().unwrap().to_string_lossy().into_owned();
    let profile_name = if profile_name == "debug" {
        "dev".to_string()
    } else {
        profile_name
    };
    // The manual pages the reel package installs (a stale page from an older build goes).
    let man = ws.join("target/man");
    let _ = std::fs::remove_dir_all(&man);
    run_ok(
        Command::new(binary_path("reel")).arg("man").arg(&man),
        "reel man",
    );

    let debs = tempfile::tempdir().unwrap();
    let root = tempfile::tempdir().unwrap();
    let packages = [
        ("reel-jobs", "reel"),
        ("reel-plugin-sim", "reel-plugin-sim"),
        ("reel-plugin-scsi", "reel-plugin-scsi"),
        ("reel-plugin-mhvtl", "reel-plugin-mhvtl"),
        ("reel-plugin-abi", "reel-plugin-dev"),
    ];
    for (crate_name, package) in packages {
        let deb = debs.path().join(format!("{package}.deb"));
        run_ok(
            Command::new("cargo")
                .current_dir(&ws)
                .args([
                    "deb",
                    "--no-build",
                    "--no-strip",
                    "--fast",
                    "--profile",
                    &profile_name,
                ])
                .arg("-p")
                .arg(crate_name)
                .arg("--output")
                .arg(&deb),
            &format!("cargo deb -p {crate_name}"),
        );
        assert_eq!(dpkg_field(&deb, "Package"), package);
        run_ok(
            Command::new("dpkg-deb")
                .arg("-x")
                .arg(&deb)
                .arg(root.path()),
            &format!("dpkg-deb -x {package}"),
        );
    }
    // What each package holds.
    let r = root.path();
    for file in [
        "usr/bin/reel",
        "etc/reel/reel.toml",
        "usr/lib/systemd/system/reel-worker.service",
        "usr/lib/systemd/system/reel-worker@.service",
        "usr/lib/systemd/system/reel-serve.service",
        "usr/share/man/man1/reel.1.gz",
        "usr/share/man/man1/reel-plugin-ls.1.gz",
        "usr/share/doc/reel/OPERATIONS.md",
        "usr/lib/reel/plugins/libreel_plugin_sim.so",
        "usr/lib/reel/plugins/libreel_plugin_scsi.so",
        "usr/lib/reel/plugins/libreel_plugin_mhvtl.so",
        "usr/include/reel/reel_plugin.h",
        "usr/share/doc/reel-plugin-dev/examples/memtape.c",
        "usr/bin/reel-plugin-check",
    ] {
        assert!(r.join(file).is_file(), "{file} not in the packages");
    }
    let reel_deb = debs.path().join("reel.deb");
    assert!(dpkg_field(&reel_deb, "Depends").contains("adduser"));
    // Its control files: the config is a conffile (an upgrade keeps the operator's edits) and
    // the postinst creates the reel user.
    let control = debs.path().join("reel-control");
    run_ok(
        Command::new("dpkg-deb")
            .arg("-e")
            .arg(&reel_deb)
            .arg(&control),
        "dpkg-deb -e reel",
    );
    let conffiles = std::fs::read_to_string(control.join("conffiles")).unwrap();
    assert!(conffiles.contains("/etc/reel/reel.toml"), "{conffiles}");
    let postinst = std::fs::read_to_string(control.join("postinst")).unwrap();
    assert!(postinst.contains("adduser --system"), "{postinst}");
    assert!(control.join("prerm").is_file() && control.join("postrm").is_file());
    // The SCSI plugin needs libiscsi only for iSCSI, loaded at run time: not a dependency.
    let scsi = debs.path().join("reel-plugin-scsi.deb");
    assert!(!dpkg_field(&scsi, "Depends").contains("iscsi"));
    assert!(dpkg_field(&scsi, "Suggests").contains("libiscsi"));

    // The unpacked reel finds the unpacked simulator by name in the unpacked plugin directory.
    let data = tempfile::tempdir().unwrap();
    let lib = tempfile::tempdir().unwrap();
    let plugins = r.join("usr/lib/reel/plugins");
    let shipped = std::fs::read_to_string(r.join("etc/reel/reel.toml")).unwrap();
    assert!(shipped.contains("plugin = \"sim\""), "{shipped}");
    let config = shipped
        .replace("/usr/lib/reel/plugins", &plugins.display().to_string())
        .replace(
            "/var/lib/reel/sim-library",
            &lib.path().display().to_string(),
        )
        .replace("/var/lib/reel", &data.path().display().to_string());
    std::fs::write(data.path().join("reel.toml"), config).unwrap();
    let run = |args: &[&str]| {
        let out = run_ok(
            Command::new(r.join("usr/bin/reel"))
                .arg("--data-dir")
                .arg(data.path())
                .arg("--json")
                .args(args),
            &format!("the unpacked reel {args:?}"),
        );
        serde_json::from_slice::<serde_json::Value>(&out).unwrap()
    };
    let listed = run(&["plugin", "ls"]);
    let sim = plugins.join("libreel_plugin_sim.so");
    let row = listed["plugins"]
        .as_array()
        .unwrap()
        .iter()
        .find(|p| p["path"] == sim.display().to_string())
        .unwrap_or_else(|| panic!("{listed}"));
    assert_eq!(row["name"], "reel-sim");
    assert_eq!(row["configured"], true);
    let inventory = run(&["library", "inventory"]);
    assert!(
        inventory
            .as_array()
            .unwrap()
            .iter()
            .any(|e| e["kind"] == "drive"),
        "{inventory}"
    );
}
