//! The ABI contract kit (`reel_plugin_abi::kit`) against the simulator loaded through dlopen.

use reel_plugin_abi::host::Plugin;
use reel_plugin_abi::kit::{self, KitOptions};

#[test]
fn contract_kit_passes_on_the_simulator() {
    let exe = std::env::current_exe().unwrap();
    let path = exe
        .parent()
        .unwrap()
        .parent()
        .unwrap()
        .join("libreel_plugin_sim.so");
    let plugin = Plugin::load(&path).unwrap();
    let dir = tempfile::tempdir().unwrap();
    let config = format!(
        "dir={};sim.calibrated=true;sim.worm_cartridges=2;sim.capacity_bytes=268435456",
        dir.path().display()
    );
    let report = kit::run(&plugin, &config, &KitOptions::default());
    eprintln!("{report}");
    assert!(report.passed(), "{report}");
}
