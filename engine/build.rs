//! Rebuild when a migration changes: `sqlx::migrate!` embeds the files at compile time, and
//! cargo does not see them otherwise (a new or edited migration would not reach the binary).
fn main() {
    println!("cargo:rerun-if-changed=migrations");
}
