//! `reel-plugin-check PLUGIN.so [CONFIG]`: run the contract kit against a plugin.
fn main() {}
