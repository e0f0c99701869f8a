//! The simulated library's identity: a serial number made once, when the library directory is
//! first opened, and kept in `<dir>/serial`, so every process and every host that opens this
//! library reports the same one (ABI 1.1 `library_info`), however its plugin is installed or
//! configured.

use std::io::Write;
use std::path::Path;

/// Vendor the simulator reports.
pub const VENDOR: &str = "REEL";
/// Product the simulator reports.
pub const PRODUCT: &str = "SIMLIB";

const FILE: &str = "serial";

/// The library's serial number: `<dir>/serial`, made now if the library has none. Two
/// processes opening a new library at once agree: the file appears whole (hard link of a
/// finished temporary file) or not at all, and the loser reads the winner's.
pub fn serial(dir: &Path) -> std::io::Result<String> {
    let path = dir.join(FILE);
    match std::fs::read_to_string(&path) {
        Ok(s) if !s.trim().is_empty() => return Ok(s.trim().to_string()),
        Ok(_) => {}
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
        Err(e) => return Err(e),
    }
    let made = new_serial(dir);
    let tmp = dir.join(format!(
        ".serial.{made}.{}.{:?}",
        std::process::id(),
        std::thread::current().id()
    ));
    {
        let mut f = std::fs::File::create(&tmp)?;
        f.write_all(made.as_bytes())?;
        f.sync_all()?;
    }
    let linked = std::fs::hard_link(&tmp, &path);
    let _ = std::fs::remove_file(&tmp);
    match linked {
        Ok(()) => Ok(made),
        Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists => {
            Ok(std::fs::read_to_string(&path)?.trim().to_string())
        }
        Err(e) => Err(e),
    }
}

/// Twelve hex digits from the time, the process and the directory: unique enough among the
/// libraries one site simulates, and never derived from the directory alone (two hosts that
/// mount one library at different paths must not disagree; they read the file instead).
fn new_serial(dir: &Path) -> String {
    use std::hash::{Hash, Hasher};
    let mut h = std::collections::hash_map::DefaultHasher::new();
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_nanos())
        .unwrap_or_default()
        .hash(&mut h);
    std::process::id().hash(&mut h);
    dir.hash(&mut h);
    format!("{:012X}", h.finish() & 0xFFFF_FFFF_FFFF)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_serial_is_made_once_and_kept() {
        let d = tempfile::tempdir().unwrap();
        let a = serial(d.path()).unwrap();
        assert_eq!(a.len(), 12, "{a}");
        assert_eq!(serial(d.path()).unwrap(), a);
        let other = tempfile::tempdir().unwrap();
        assert_ne!(serial(other.path()).unwrap(), a);
    }

    #[test]
    fn concurrent_first_opens_agree() {
        let d = tempfile::tempdir().unwrap();
        let dir = d.path().to_path_buf();
        let seen: Vec<String> = (0..8)
            .map(|_| {
                let dir = dir.clone();
                std::thread::spawn(move || serial(&dir).unwrap())
            })
            .collect::<Vec<_>>()
            .into_iter()
            .map(|t| t.join().unwrap())
            .collect();
        assert!(seen.iter().all(|s| *s == seen[0]), "{seen:?}");
    }
}
