//! The contract kit, run inside a qemu TCG guest against the real Linux `st` and `sg`
//! drivers.
//!
//! The host brings up reel's tape library rig (`tests/rig`: tgt with reel's patch for READ
//! POSITION, LOCATE, SPACE and early warning) on a private loopback port; qemu's iSCSI client
//! attaches drive 1 and the changer to a virtio-scsi bus, where the guest kernel binds `st`
//! and `sg` to them. The guest runs `reel-plugin-check libreel_plugin_mhvtl.so` with the devices named by
//! serial, prints the kit's report on the serial console and powers off; this test parses it.
//!
//! Prerequisites: `tests/rig/setup.sh --guest` (root; packages, patched tgtd, kernel
//! package). Without them the test is skipped with a loud message, except under
//! `CI=true`, where it fails. The plugin, `reel-plugin-check` and `examples/eom_probe` come
//! from the workspace build (`cargo build --workspace --all-targets`).

use std::path::Path;
use std::process::{Command, Stdio};
use std::time::Instant;

#[path = "../../../tests/rig/rig.rs"]
mod rig;
use rig::skip_or_fail;

/// Private iSCSI portal port and tgtd control instance, away from the other rig tests'.
const PORT: u16 = 3275;
const CN: u16 = 9;

fn which(tool: &str) -> bool {
    std::env::var_os("PATH")
        .map(|p| std::env::split_paths(&p).any(|d| d.join(tool).is_file()))
        .unwrap_or(false)
}

fn run(cmd: &mut Command, what: &str) -> String {
    let out = cmd
        .output()
        .unwrap_or_else(|e| panic!("{what}: cannot start: {e}"));
    let text = format!(
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(
        out.status.success(),
        "{what} failed ({}):\n{text}",
        out.status
    );
    text
}

/// Result lines of the kit report: (verdict, check name, reason).
fn parse_report(section: &str) -> Vec<(String, String, String)> {
    section
        .lines()
        .filter_map(|l| {
            let l = l.trim_end_matches('\r');
            let (verdict, rest) = l.split_once(' ')?;
            if !matches!(verdict, "PASS" | "FAIL" | "SKIP") {
                return None;
            }
            let (name, why) = rest.split_once(": ").unwrap_or((rest, ""));
            Some((verdict.to_string(), name.to_string(), why.to_string()))
        })
        .collect()
}

#[test]
fn contract_kit_in_qemu_guest() {
    let missing: Vec<&str> = [
        "qemu-system-x86_64",
        "tgtadm",
        "tgtimg",
        "busybox",
        "cpio",
        "modinfo",
        "dpkg-deb",
        "timeout",
    ]
    .into_iter()
    .filter(|t| !which(t))
    .collect();
    if !missing.is_empty() {
        return skip_or_fail(&format!("missing tools: {}", missing.join(", ")));
    }
    let work = rig::rig_dir();
    let kernel = std::fs::read_dir(work.join("guest")).ok().and_then(|d| {
        d.filter_map(|e| e.ok()).map(|e| e.path()).find(|p| {
            p.file_name()
                .is_some_and(|n| n.to_string_lossy().starts_with("linux-image-"))
                && p.extension().is_some_and(|x| x == "deb")
        })
    });
    let Some(kernel) = kernel else {
        return skip_or_fail(&format!(
            "no Debian kernel package under {} (tests/rig/setup.sh --guest fetches it)",
            work.join("guest").display()
        ));
    };

    // The plugin, the kit runner and the probe, as the workspace build made them (the
    // README's test command builds first: `cargo build --workspace --all-targets`). A build
    // from here would select other features and recompile dependencies for a minute.
    let exe = std::env::current_exe().expect("test executable path");
    let target = exe
        .parent()
        .and_then(Path::parent)
        .expect("test executable under target/<profile>/deps")
        .to_path_buf();
    let eom_probe = target.join("examples/eom_probe");
    let plugin = rig::built_cdylib("reel_plugin_mhvtl");
    let checker = target.join("reel-plugin-check");
    for built in [&eom_probe, &checker] {
        assert!(
            built.is_file(),
            "{} is not built: run `cargo build --workspace --all-targets` first",
            built.display()
        );
    }

    // The library: 2 drives, changer, 8 slots; two slots emptied for the kit's move checks.
    let Some(library) = rig::Rig::up(PORT, CN, 64) else {
        return;
    };
    library.clear_slot(1030);
    library.clear_slot(1031);
    let tmp = tempfile::tempdir().expect("temp dir");

    // The guest: the kit against drive 1 and the changer, both named by serial.
    let script = tmp.path().join("guest-run.sh");
    std::fs::write(
        &script,
        "#!/bin/sh\n\
         printf 'changer=serial=LIB0000001\\ndrives=serial=DRV0000001\\n' > /tmp/reel.conf\n\
         echo '=== REEL KIT BEGIN ==='\n\
         timeout 240 /reel/reel-plugin-check /reel/libreel_plugin_mhvtl.so @/tmp/reel.conf\n\
         rc=$?\n\
         echo \"=== REEL KIT END rc=$rc ===\"\n\
         timeout 120 /reel/eom_probe /reel/libreel_plugin_mhvtl.so /tmp/reel.conf GFS003L9\n\
         dmesg | grep -E ' st |st[0-9]|sg' | sed 's/^/[guest-dmesg] /'\n",
    )
    .expect("write guest script");
    let guest = work.join("guest");
    run(
        Command::new("bash")
            .arg(
                rig::scripts_dir()
                    .expect("tests/rig in this checkout")
                    .join("guest/mkguest.sh"),
            )
            .arg(&guest)
            .arg(&kernel)
            .arg(&script)
            .arg(&checker)
            .arg(&plugin)
            .arg(&eom_probe),
        "tests/rig/guest/mkguest.sh",
    );

    let t0 = Instant::now();
    let lun = |n: u32| format!("file={},if=none,format=raw", library.url(n));
    let out = Command::new("timeout")
        .arg("300")
        .arg("qemu-system-x86_64")
        .args([
            "-accel",
            "tcg",
            "-m",
            "512",
            "-smp",
            "1",
            "-nographic",
            "-no-reboot",
        ])
        .arg("-kernel")
        .arg(guest.join("vmlinuz"))
        .arg("-initrd")
        .arg(guest.join("initrd.gz"))
        .args(["-append", "console=ttyS0 quiet panic=-1"])
        .args(["-device", "virtio-scsi-pci,id=vs"])
        .args(["-drive", &format!("{},id=tape0", lun(1))])
        .args(["-device", "scsi-generic,drive=tape0,bus=vs.0"])
        .args(["-drive", &format!("{},id=chg0", lun(3))])
        .args(["-device", "scsi-generic,drive=chg0,bus=vs.0"])
        .stdin(Stdio::null())
        .output()
        .expect("start qemu");
    let vm_seconds = t0.elapsed().as_secs_f64();
    let log = String::from_utf8_lossy(&out.stdout).replace('\r', "");
    let _ = std::fs::write(work.join("qemu_guest-last.log"), &log);

    let begin = log.find("=== REEL KIT BEGIN ===");
    let end = log.find("=== REEL KIT END rc=");
    let (Some(begin), Some(end)) = (begin, end) else {
        panic!(
            "the guest printed no kit report (qemu {}; full log in {}):\n{}\n{}",
            out.status,
            work.join("qemu_guest-last.log").display(),
            log,
            String::from_utf8_lossy(&out.stderr)
        );
    };
    let section = &log[begin..];
    let section = &section[..section.find('\n').map_or(0, |_| end - begin)];
    let end_line = log[end..].lines().next().unwrap_or("");
    println!(
        "{}",
        log.lines()
            .filter(|l| l.starts_with("[guest]"))
            .collect::<Vec<_>>()
            .join("\n")
    );
    println!("{section}\n{end_line}");
    println!(
        "MEASURED: whole VM run (boot, kit, EOM probe, power off) {vm_seconds:.1} s wall time under TCG"
    );

    let results = parse_report(section);
    let verdict = |name: &str| results.iter().find(|r| r.1 == name).map(|r| r.0.as_str());
    assert_eq!(
        verdict("library_open"),
        Some("PASS"),
        "library_open failed:\n{section}"
    );
    let failed: Vec<String> = results
        .iter()
        .filter(|(v, _, _)| v == "FAIL")
        .map(|(_, name, why)| format!("{name}: {why}"))
        .collect();
    assert!(
        failed.is_empty(),
        "kit checks failed in the guest:\n{}\n\nreport:\n{section}",
        failed.join("\n")
    );
    // End of medium, which the kit leaves to plugins with a test-control call: the probe
    // fills a 64 MiB cartridge through the plugin's C ABI.
    let eom: Vec<&str> = log.lines().filter(|l| l.starts_with("EOM ")).collect();
    println!("{}", eom.join("\n"));
    assert!(
        eom.contains(&"EOM RESULT PASS"),
        "the end-of-medium probe did not pass in the guest:\n{}",
        eom.join("\n")
    );
    let passed = results.iter().filter(|r| r.0 == "PASS").count();
    assert!(
        passed >= 15,
        "only {passed} kit checks passed; the report is incomplete:\n{section}"
    );
}
