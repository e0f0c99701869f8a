//! reel's tape library rig for tests: a tgtd (tgt's userspace SCSI target, patched by
//! `tests/rig/tgt/reel-ssc.patch`) serving two SSC drives and an SMC changer over iSCSI on
//! loopback, brought up for one test and down again when the [`Rig`] drops.
//!
//! Included with `#[path]` by every test that drives it, so they bring the library up the same
//! way: `plugins/scsi/tests/tgt.rs`, `tests/tests/cli_scsi_tgt.rs` and
//! `plugins/mhvtl-test/tests/qemu_guest.rs`.
//!
//! Needs what `tests/rig/setup.sh` installs (root, idempotent): tgt's tools, libiscsi and the
//! patched tgtd. Without them a test is skipped with a loud message, except under `CI=true`,
//! where it fails.
//!
//! Env: `TGTD` (the tgtd binary; default `$REEL_RIG_DIR/tgtd`), `REEL_RIG_DIR` (default
//! `/tmp/reel-rig`).

#![allow(dead_code)] // each including test uses its own part

use std::path::{Path, PathBuf};
use std::process::Command;

/// The iSCSI target name of the rig's library.
pub const IQN: &str = "iqn.2026-11.test:reel";

/// A running tgt library; brought down on drop.
pub struct Rig {
    scripts: PathBuf,
    dir: tempfile::TempDir,
    cn: String,
    port: u16,
}

fn on_path(bin: &str) -> bool {
    Command::new("sh")
        .args(["-c", &format!("command -v {bin}")])
        .output()
        .is_ok_and(|o| o.status.success())
}

/// Under `CI=true`: panic. Otherwise: say loudly that the test did not run.
pub fn skip_or_fail(why: &str) {
    if std::env::var("CI").as_deref() == Ok("true") {
        panic!(
            "the tape library rig is unavailable on CI: {why}; CI must run tests/rig/setup.sh first"
        );
    }
    // Written to the stderr handle, not with eprintln!: the test harness captures the macros
    // and would hide the message of a passing (skipped) test.
    use std::io::Write as _;
    let _ = writeln!(
        std::io::stderr(),
        "\n================================================================\n\
         SKIPPING a tape library rig test: {why}.\n\
         Prepare the rig with tests/rig/setup.sh (root) and run again.\n\
         ================================================================"
    );
}

/// Where `tests/rig/setup.sh` puts what it makes.
pub fn rig_dir() -> PathBuf {
    std::env::var_os("REEL_RIG_DIR")
        .map(PathBuf::from)
        .unwrap_or_else(|| PathBuf::from("/tmp/reel-rig"))
}

/// The rig's scripts: `tests/rig` of the checkout this test was built from.
pub fn scripts_dir() -> Option<PathBuf> {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .ancestors()
        .map(|a| a.join("tests/rig"))
        .find(|d| d.join("library-up.sh").exists())
}

/// The patched tgtd: `TGTD`, or the one `tests/rig/setup.sh` built.
pub fn tgtd() -> PathBuf {
    std::env::var_os("TGTD")
        .map(PathBuf::from)
        .unwrap_or_else(|| rig_dir().join("tgtd"))
}

/// The shared library of `crate_name` (`reel_plugin_scsi`) that the workspace build put beside
/// this test's target directory, for tests that dlopen it or copy it into a guest. `cargo test`
/// rebuilds the crate's rlib, not its cdylib: a missing `.so`, or one older than the crate's
/// last rlib, fails the test instead of testing old code.
pub fn built_cdylib(crate_name: &str) -> PathBuf {
    let exe = std::env::current_exe().expect("test binary path");
    let deps = exe.parent().expect("deps directory");
    let dir = deps.parent().expect("target directory");
    let path = dir.join(format!("lib{crate_name}.so"));
    let modified = |p: &Path| std::fs::metadata(p).and_then(|m| m.modified()).ok();
    let prefix = format!("lib{crate_name}-");
    let newest_rlib = std::fs::read_dir(deps)
        .into_iter()
        .flatten()
        .filter_map(Result::ok)
        .map(|e| e.path())
        .filter(|p| {
            p.file_name()
                .and_then(|n| n.to_str())
                .is_some_and(|n| n.starts_with(&prefix) && n.ends_with(".rlib"))
        })
        .filter_map(|p| modified(&p))
        .max();
    let package = crate_name.replace('_', "-");
    match (modified(&path), newest_rlib) {
        (None, _) => panic!(
            "{} is missing: run `cargo build -p {package}` (or the workspace build) before this test",
            path.display()
        ),
        (Some(so), Some(rlib)) if so < rlib => panic!(
            "{} is older than the crate's last build: run `cargo build -p {package}` before this test",
            path.display()
        ),
        _ => path,
    }
}

impl Rig {
    /// Bring a library up on iSCSI `port` with tgtd control instance `cn` (distinct per test
    /// so two never collide), cartridges of `size_mb` MB. `None`: skipped (not on CI).
    pub fn up(port: u16, cn: u16, size_mb: u32) -> Option<Rig> {
        let Some(scripts) = scripts_dir() else {
            skip_or_fail("tests/rig/library-up.sh is not in this checkout");
            return None;
        };
        for bin in ["tgtadm", "tgtimg", "tgt-admin"] {
            if !on_path(bin) {
                skip_or_fail(&format!("`{bin}` is not installed (Debian package tgt)"));
                return None;
            }
        }
        let tgtd = tgtd();
        if !tgtd.is_file() {
            skip_or_fail(&format!(
                "no patched tgtd at {} (stock tgtd has no READ POSITION or LOCATE)",
                tgtd.display()
            ));
            return None;
        }
        if !Command::new("sh")
            .args(["-c", "ldconfig -p | grep -q libiscsi.so.7"])
            .status()
            .is_ok_and(|s| s.success())
        {
            skip_or_fail("libiscsi.so.7 is not installed (Debian package libiscsi7)");
            return None;
        }
        let dir = tempfile::Builder::new()
            .prefix("reel-rig-library")
            .tempdir()
            .expect("temp dir for the rig");
        let rig = Rig {
            scripts,
            dir,
            cn: cn.to_string(),
            port,
        };
        // a tgtd that an aborted run left on this control instance would hold the port
        rig.down();
        // an old tgtd asked to stop may take a moment to let the port go
        let free = (0..50).any(|_| {
            let ok = std::net::TcpListener::bind(("127.0.0.1", port)).is_ok();
            if !ok {
                std::thread::sleep(std::time::Duration::from_millis(100));
            }
            ok
        });
        if !free {
            panic!("port 127.0.0.1:{port} is in use; another rig is running there");
        }
        let out = Command::new("bash")
            .arg(rig.scripts.join("library-up.sh"))
            .envs(rig.env())
            .env("TGTD", &tgtd)
            .env("SIZE_MB", size_mb.to_string())
            .output()
            .expect("run library-up.sh");
        assert!(
            out.status.success(),
            "library-up.sh failed: {}{}",
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        );
        Some(rig)
    }

    fn env(&self) -> Vec<(&'static str, String)> {
        vec![
            ("CN", self.cn.clone()),
            ("PORT", self.port.to_string()),
            ("IQN", IQN.to_string()),
            ("DIR", self.dir.path().display().to_string()),
        ]
    }

    /// The iSCSI URL of LUN `lun` (1 and 2: drives, 3: changer).
    pub fn url(&self, lun: u32) -> String {
        format!("iscsi://127.0.0.1:{}/{IQN}/{lun}", self.port)
    }

    /// The scsi plugin's configuration for this library, one `key=value` a line.
    pub fn config(&self) -> String {
        format!(
            "changer={}\ndrives={},{}\ntimeout.status=30\ntimeout.move=60",
            self.url(3),
            self.url(1),
            self.url(2)
        )
    }

    /// Empty storage slot `address` (the cartridge image stays on disk, out of the library).
    pub fn clear_slot(&self, address: u32) {
        let out = Command::new("tgtadm")
            .args(["-C", &self.cn, "--lld", "iscsi", "--mode", "logicalunit"])
            .args(["--op", "update", "--tid", "1", "--lun", "3", "--params"])
            .arg(format!("element_type=2,address={address},clear_slot=1"))
            .output()
            .expect("run tgtadm");
        assert!(
            out.status.success(),
            "tgtadm clear_slot {address}: {}",
            String::from_utf8_lossy(&out.stderr)
        );
    }

    /// Give drive LUN `lun` (1 or 2) the serial number `serial` (VPD 80h, and the changer's
    /// identifier of its element), as a library whose serials are ambiguous would have.
    pub fn set_drive_serial(&self, lun: u32, serial: &str) {
        let out = Command::new("tgtadm")
            .args(["-C", &self.cn, "--lld", "iscsi", "--mode", "logicalunit"])
            .args([
                "--op",
                "update",
                "--tid",
                "1",
                "--lun",
                &lun.to_string(),
                "--params",
            ])
            .arg(format!("scsi_sn={serial}"))
            .output()
            .expect("run tgtadm");
        assert!(
            out.status.success(),
            "tgtadm scsi_sn {lun}: {}",
            String::from_utf8_lossy(&out.stderr)
        );
    }

    /// The directory holding tgtd's log and the cartridge images.
    pub fn dir(&self) -> &Path {
        self.dir.path()
    }
}

impl Rig {
    fn down(&self) {
        let _ = Command::new("bash")
            .arg(self.scripts.join("library-down.sh"))
            .envs(self.env())
            .output();
    }
}

impl Drop for Rig {
    fn drop(&mut self) {
        self.down();
    }
}
