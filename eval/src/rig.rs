//! The simulated library as the benchmark drives it through the ABI host: finding the plugin,
//! opening a library in a scratch directory, mounting, and reading the simulator's counters.

use std::path::{Path, PathBuf};
use std::sync::Arc;

use anyhow::{Context, Result, anyhow, bail};
use reel_plugin_abi::host::{DriveHandle, LibraryHandle, Plugin};

use crate::model::Model;

/// File name of the simulator plugin in the target directory.
pub const SIM_PLUGIN: &str = "libreel_plugin_sim.so";

/// Find the simulator plugin: `--plugin PATH`, else next to this executable (and one level up,
/// for a binary run from `target/<profile>/deps`).
pub fn find_plugin(explicit: Option<&Path>) -> Result<PathBuf> {
    if let Some(p) = explicit {
        if p.is_file() {
            return Ok(p.to_path_buf());
        }
        bail!(
            "--plugin {}: no such file; build the simulator with `cargo build -p reel-plugin-sim` \
             (it lands in target/<profile>/{SIM_PLUGIN})",
            p.display()
        );
    }
    let exe = std::env::current_exe().context("cannot find this executable's path")?;
    let dir = exe
        .parent()
        .ok_or_else(|| anyhow!("executable {} has no directory", exe.display()))?;
    for cand in [dir.join(SIM_PLUGIN), dir.join("..").join(SIM_PLUGIN)] {
        if cand.is_file() {
            return Ok(cand);
        }
    }
    bail!(
        "the simulator plugin {SIM_PLUGIN} is not next to {} : build it with \
         `cargo build -p reel-plugin-sim` (same profile as reel-bench), or pass --plugin PATH",
        exe.display()
    )
}

/// Load the plugin once.
pub fn load(path: &Path) -> Result<Arc<Plugin>> {
    Plugin::load(path).with_context(|| format!("loading {}", path.display()))
}

/// Drive element address of drive `i`.
pub fn drive_addr(i: u32) -> u32 {
    256 + i
}

/// Slot element address of slot `i`.
pub fn slot_addr(i: u32) -> u32 {
    1024 + i
}

/// The simulator's counters for the whole library (`{"op":"counters"}`).
#[derive(Clone, Debug, Default)]
pub struct Counters {
    /// Writes anywhere but at EOD.
    pub violations: u64,
    /// Per-drive statistics as JSON.
    pub drives: Vec<serde_json::Value>,
}

impl Counters {
    /// A per-drive counter, 0 when absent.
    pub fn drive(&self, d: usize, key: &str) -> u64 {
        self.drives
            .get(d)
            .and_then(|v| v.get(key))
            .and_then(serde_json::Value::as_u64)
            .unwrap_or(0)
    }

    /// Parse the simulator's reply.
    pub fn parse(reply: &str) -> Result<Counters> {
        let v: serde_json::Value =
            serde_json::from_str(reply).context("the simulator's counters are not JSON")?;
        let n = |k: &str| v.get(k).and_then(serde_json::Value::as_u64).unwrap_or(0);
        Ok(Counters {
            violations: n("violations"),
            drives: v
                .get("drives")
                .and_then(serde_json::Value::as_array)
                .cloned()
                .unwrap_or_default(),
        })
    }
}

/// A simulated library in a scratch directory, opened through the ABI host.
pub struct SimRig {
    /// The library directory (kept until the rig is dropped).
    pub dir: tempfile::TempDir,
    /// The open library.
    pub lib: LibraryHandle,
    /// The plugin.
    pub plugin: Arc<Plugin>,
    /// The config string the library was opened with (minus `dir=`).
    pub config: String,
}

impl SimRig {
    /// A new library under `scratch` with the model's figures plus `extra` config items.
    pub fn new(plugin: &Arc<Plugin>, scratch: &Path, model: &Model, extra: &str) -> Result<SimRig> {
        let dir = tempfile::Builder::new()
            .prefix("reel-bench-lib-")
            .tempdir_in(scratch)
            .with_context(|| format!("creating a library directory under {}", scratch.display()))?;
        let config = format!("{};{extra}", model.sim_config());
        let lib = open_library(plugin, dir.path(), &config)?;
        Ok(SimRig {
            dir,
            lib,
            plugin: plugin.clone(),
            config,
        })
    }

    /// A library whose directory is edited between its creation and its opening: the library
    /// is opened once (creating its cartridges), closed, `edit` runs on the directory, and the
    /// library is opened again on it.
    pub fn prepared(
        plugin: &Arc<Plugin>,
        scratch: &Path,
        model: &Model,
        extra: &str,
        edit: impl FnOnce(&Path) -> Result<()>,
    ) -> Result<SimRig> {
        let rig = SimRig::new(plugin, scratch, model, extra)?;
        let SimRig {
            dir,
            lib,
            plugin,
            config,
        } = rig;
        drop(lib);
        edit(dir.path())?;
        let lib = open_library(&plugin, dir.path(), &config)?;
        Ok(SimRig {
            dir,
            lib,
            plugin,
            config,
        })
    }

    /// A control request.
    pub fn control(&mut self, req: &str) -> Result<String> {
        self.lib
            .control(req)
            .map_err(|e| anyhow!("simulator control {req}: {e}"))
    }

    /// The library's counters.
    pub fn counters(&mut self) -> Result<Counters> {
        let r = self.control(r#"{"op":"counters"}"#)?;
        Counters::parse(&r)
    }

    /// Move the cartridge in slot `slot` into drive `drive`, open and load it (clearing the
    /// unit attention a load reports). Returns the drive and the modelled seconds (robot + load).
    pub fn mount(&mut self, slot: u32, drive: u32) -> Result<(DriveHandle, f64)> {
        self.lib
            .move_medium(slot_addr(slot), drive_addr(drive))
            .map_err(|e| anyhow!("move slot {slot} → drive {drive}: {e}"))?;
        let robot = secs(self.lib.last_status().elapsed_ns);
        let mut d = self
            .lib
            .open_drive(drive)
            .map_err(|e| anyhow!("open drive {drive}: {e}"))?;
        d.load().map_err(|e| anyhow!("load drive {drive}: {e}"))?;
        let load = secs(d.last_status().elapsed_ns);
        clear_unit_attention(&mut d)?;
        Ok((d, robot + load))
    }

    /// Unload drive `d` and put its cartridge back in `slot`; returns modelled seconds.
    pub fn dismount(&mut self, mut d: DriveHandle, slot: u32) -> Result<f64> {
        d.unload().map_err(|e| anyhow!("unload: {e}"))?;
        let t = secs(d.last_status().elapsed_ns);
        let idx = d.index();
        drop(d);
        self.lib
            .move_medium(drive_addr(idx), slot_addr(slot))
            .map_err(|e| anyhow!("move drive {idx} → slot {slot}: {e}"))?;
        Ok(t + secs(self.lib.last_status().elapsed_ns))
    }
}

fn open_library(plugin: &Arc<Plugin>, dir: &Path, config: &str) -> Result<LibraryHandle> {
    LibraryHandle::open(plugin, &format!("dir={};{config}", dir.display()))
        .map_err(|e| anyhow!("opening the simulated library in {}: {e}", dir.display()))
}

/// TEST UNIT READY until the unit attention after a load has been reported.
pub fn clear_unit_attention(d: &mut DriveHandle) -> Result<()> {
    for _ in 0..3 {
        if d.test_ready().is_ok() {
            return Ok(());
        }
    }
    d.test_ready()
        .map_err(|e| anyhow!("drive not ready after load: {e}"))
}

/// Nanoseconds to seconds.
pub fn secs(ns: u64) -> f64 {
    ns as f64 / 1e9
}

/// Drive busy seconds from the drive's statistics.
pub fn busy_s(d: &mut DriveHandle) -> Result<f64> {
    Ok(secs(
        d.statistics()
            .map_err(|e| anyhow!("drive statistics: {e}"))?
            .busy_ns,
    ))
}

/// Deterministic content of record `block` of a data set `seed`: a fast keyed pattern, so any
/// byte read back can be checked without keeping the data.
pub fn fill_pattern(seed: u64, block: u64, buf: &mut [u8]) {
    let mut x = seed ^ block.wrapping_mul(0x9E37_79B9_7F4A_7C15) ^ 0xD1B5_4A32_D192_ED03;
    for chunk in buf.chunks_mut(8) {
        // splitmix64
        x = x.wrapping_add(0x9E37_79B9_7F4A_7C15);
        let mut z = x;
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        z ^= z >> 31;
        let b = z.to_le_bytes();
        chunk.copy_from_slice(&b[..chunk.len()]);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn pattern_is_deterministic_and_keyed() {
        let mut a = vec![0u8; 1000];
        let mut b = vec![0u8; 1000];
        fill_pattern(1, 7, &mut a);
        fill_pattern(1, 7, &mut b);
        assert_eq!(a, b);
        fill_pattern(1, 8, &mut b);
        assert_ne!(a, b);
        fill_pattern(2, 7, &mut b);
        assert_ne!(a, b);
    }

    #[test]
    fn counters_parse_the_simulator_reply() {
        let c = Counters::parse(
            r#"{"ok":true,"violations":2,"relabels":1,"robot_moves":4,
                "drives":[{"busy_ns":5,"locates":1},{"busy_ns":7}]}"#,
        )
        .unwrap();
        assert_eq!(c.violations, 2);
        assert_eq!(c.drive(1, "busy_ns"), 7);
        assert_eq!(c.drive(0, "locates"), 1);
        assert_eq!(c.drive(1, "locates"), 0);
    }
}
