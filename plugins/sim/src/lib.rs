//! # reel-plugin-sim: a simulated LTO-9-class tape library (figures are SIMULATED)
