//! The `reel` command.
fn main() {}
