//! Helpers shared by the integration tests: compiling small C plugins against the checked-in
//! header.
#![allow(dead_code)]

use std::path::{Path, PathBuf};
use std::process::Command;

/// The crate directory.
pub fn crate_dir() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
}

/// The C compiler: `$CC`, else `cc`.
pub fn cc() -> String {
    std::env::var("CC")
        .ok()
        .filter(|s| !s.is_empty())
        .unwrap_or_else(|| "cc".to_string())
}

/// Compile `source` (C text) into `dir/name.so` with `-shared -fPIC`, including only
/// `include/reel_plugin.h`. `defines` are passed as `-D` flags.
pub fn compile_c(dir: &Path, name: &str, source: &str, defines: &[&str]) -> PathBuf {
    let src = dir.join(format!("{name}.c"));
    std::fs::write(&src, source).unwrap_or_else(|e| panic!("write {}: {e}", src.display()));
    let out = dir.join(format!("lib{name}.so"));
    let mut cmd = Command::new(cc());
    cmd.args([
        "-std=c11", "-Wall", "-Wextra", "-Werror", "-shared", "-fPIC", "-pthread",
    ])
    .arg("-fvisibility=hidden")
    .arg("-I")
    .arg(crate_dir().join("include"));
    for d in defines {
        cmd.arg(format!("-D{d}"));
    }
    cmd.arg(&src).arg("-o").arg(&out);
    let output = cmd
        .output()
        .unwrap_or_else(|e| panic!("cannot run the C compiler `{}` (set $CC): {e}", cc()));
    assert!(
        output.status.success(),
        "compiling {} failed:\n{}",
        src.display(),
        String::from_utf8_lossy(&output.stderr)
    );
    out
}

/// The memtape C plugin source.
pub fn memtape_source() -> String {
    let path = crate_dir().join("tests/c/memtape.c");
    std::fs::read_to_string(&path).unwrap_or_else(|e| panic!("read {}: {e}", path.display()))
}

/// What a `tracing_subscriber::fmt` subscriber wrote, for tests that read the log.
#[derive(Clone, Default)]
pub struct LogBuffer(std::sync::Arc<std::sync::Mutex<Vec<u8>>>);

impl LogBuffer {
    /// Everything written so far.
    pub fn text(&self) -> String {
        String::from_utf8_lossy(&self.0.lock().unwrap()).into_owned()
    }
}

impl std::io::Write for LogBuffer {
    fn write(&mut self, b: &[u8]) -> std::io::Result<usize> {
        self.0.lock().unwrap().extend_from_slice(b);
        Ok(b.len())
    }
    fn flush(&mut self) -> std::io::Result<()> {
        Ok(())
    }
}

impl<'a> tracing_subscriber::fmt::MakeWriter<'a> for LogBuffer {
    type Writer = LogBuffer;
    fn make_writer(&'a self) -> LogBuffer {
        self.clone()
    }
}
