//! The tgt virtual tape library of the shared rig (`../shared/rig`), brought up for one test
//! and down again: a real third-party SCSI target (SSC drives, SMC changer) over iSCSI on
//! loopback.
//!
//! Shared by the plugin's own integration test (`plugins/scsi/tests/tgt.rs`) and the
//! end-to-end test through `reel` (`tests/tests/cli_scsi_tgt.rs`, which includes this file
//! with `#[path]`), so both bring the library up the same way.
//!
//! Needs `tgt`, `libiscsi7` and the patched tgtd (READ POSITION, LOCATE, SPACE/EOD): run
//! `plugins/scsi/tests/rig.sh` once (root; idempotent). Without them a test is skipped with a
//! loud message, except when `CI=true`, where it fails.
//!
//! Env: `TGTD` (tgtd binary; default: the patched build under /tmp/tgt-build), `RIG` (rig
//! scripts directory).

#![allow(dead_code)] // each including test uses its own part

use std::path::{Path, PathBuf};
use std::process::Command;

/// The iSCSI target name of the rig's library.
pub const IQN: &str = "iqn.2026-11.test:reel-scsi";

/// A running tgt library; brought down on drop.
pub struct Rig {
    scripts: PathBuf,
    vtl: tempfile::TempDir,
    cn: String,
    port: String,
}

fn on_path(bin: &str) -> bool {
    Command::new("sh")
        .args(["-c", &format!("command -v {bin}")])
        .output()
        .is_ok_and(|o| o.status.success())
}

fn skip_or_fail(why: &str) -> Option<Rig> {
    if std::env::var("CI").as_deref() == Ok("true") {
        panic!("tgt rig unavailable on CI: {why}; CI must run plugins/scsi/tests/rig.sh first");
    }
    // Written to the stderr handle, not with eprintln!: the test harness captures the macros
    // and would hide the message of a passing (skipped) test.
    use std::io::Write as _;
    let _ = writeln!(
        std::io::stderr(),
        "\n================================================================\n\
         SKIPPING tgt integration test: {why}.\n\
         Install the rig with plugins/scsi/tests/rig.sh (root) and run again.\n\
         ================================================================"
    );
    None
}

/// The shared rig's scripts: `RIG`, or `shared/rig` beside one of the checkout's ancestors.
fn scripts_dir() -> Option<PathBuf> {
    if let Some(dir) = std::env::var_os("RIG") {
        return Some(PathBuf::from(dir));
    }
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .ancestors()
        .map(|a| a.join("shared/rig"))
        .find(|d| d.join("vtl-up.sh").exists())
}

impl Rig {
    /// Bring a library up on iSCSI `port` with tgtd control instance `cn` (distinct per test
    /// binary so two never collide), cartridges of `size_mb` MB. `None`: skipped (not on CI).
    pub fn up(port: u16, cn: u16, size_mb: u32) -> Option<Rig> {
        let Some(scripts) = scripts_dir() else {
            return skip_or_fail("no rig scripts (shared/rig/vtl-up.sh) found; set RIG");
        };
        for bin in ["tgtadm", "tgtimg", "tgt-admin"] {
            if !on_path(bin) {
                return skip_or_fail(&format!("`{bin}` is not installed (Debian package tgt)"));
            }
        }
        let tgtd =
            std::env::var("TGTD").unwrap_or_else(|_| "/tmp/tgt-build/src/tgt/usr/tgtd".to_string());
        if !Path::new(&tgtd).exists() {
            return skip_or_fail(&format!(
                "patched tgtd not found at {tgtd} (stock tgtd has no READ POSITION or LOCATE)"
            ));
        }
        if !Path::new("/usr/lib/x86_64-linux-gnu/libiscsi.so.7").exists()
            && !Command::new("sh")
                .args(["-c", "ldconfig -p | grep -q libiscsi.so.7"])
                .status()
                .is_ok_and(|s| s.success())
        {
            return skip_or_fail("libiscsi.so.7 is not installed (Debian package libiscsi7)");
        }
        let vtl = tempfile::Builder::new()
            .prefix("reel-scsi-vtl")
            .tempdir()
            .expect("temp dir for the rig");
        let rig = Rig {
            scripts,
            vtl,
            cn: cn.to_string(),
            port: port.to_string(),
        };
        // a stale tgtd from an aborted run on the same control port would collide
        rig.run("vtl-down.sh");
        let out = Command::new("bash")
            .arg(rig.scripts.join("vtl-up.sh"))
            .envs(rig.env())
            .env("TGTD", &tgtd)
            .env("SIZE_MB", size_mb.to_string())
            .output()
            .expect("run vtl-up.sh");
        assert!(
            out.status.success(),
            "vtl-up.sh failed: {}{}",
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        );
        Some(rig)
    }

    fn env(&self) -> Vec<(&'static str, String)> {
        vec![
            ("CN", self.cn.clone()),
            ("PORT", self.port.clone()),
            ("IQN", IQN.to_string()),
            ("VTL", self.vtl.path().display().to_string()),
        ]
    }

    fn run(&self, script: &str) {
        let _ = Command::new("bash")
            .arg(self.scripts.join(script))
            .envs(self.env())
            .output();
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

    /// The directory holding tgtd's log and the cartridge images.
    pub fn dir(&self) -> &Path {
        self.vtl.path()
    }
}

impl Drop for Rig {
    fn drop(&mut self) {
        self.run("vtl-down.sh");
    }
}
