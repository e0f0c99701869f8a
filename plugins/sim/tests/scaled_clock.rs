//! The SCALED clock really sleeps: a 72-modelled-second sequence at scale 20 takes at least
//! 60 / 20 = 3 s of wall time. (A lower bound only: sleeping is guaranteed, speed is not.)

mod common;

use common::*;
use reel_plugin_abi::sdk::{Call, Drive};

#[test]
fn scale_20_sleeps_at_least_three_seconds_for_sixty_modelled() {
    let mut rig = Rig::new("sim.clock=scaled;sim.time_scale=20;sim.calibrated=true");
    let t0 = std::time::Instant::now();
    let mut modelled = rig.mv(slot_addr(0), drive_addr(0)); // 8 s
    let mut d = rig.drive(0);
    let (r, t) = timed(&mut d, |d, c| d.load(c)); // 15 s
    ok(r);
    modelled += t;
    let _ = d.test_ready(&mut Call::default());
    let (r, t) = timed(&mut d, |d, c| d.unload(c)); // 3 + 15 s
    ok(r);
    modelled += t;
    modelled += rig.mv(drive_addr(0), slot_addr(0)); // 8 s
    modelled += rig.mv(slot_addr(0), drive_addr(0)); // 8 s
    let (r, t) = timed(&mut d, |d, c| d.load(c)); // 15 s
    ok(r);
    modelled += t;
    let wall = t0.elapsed();
    assert!(modelled >= 60.0, "{modelled}");
    assert!(
        wall.as_secs_f64() >= 3.0,
        "slept only {wall:?} for {modelled} modelled s"
    );
}
