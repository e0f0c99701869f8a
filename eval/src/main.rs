//! `reel-bench`: the benchmark harness.
fn main() {}
