//! Spool files with checkable content (each key's bytes follow from the key), and the host
//! figures the rows need (free space, CPU seconds).

use std::io::{Read, Write};
use std::path::Path;

use anyhow::{Context, Result};

use crate::rig::fill_pattern;

/// Seed of a key's content.
pub fn key_seed(key: &str) -> u64 {
    key.bytes().fold(0xcbf2_9ce4_8422_2325u64, |h, b| {
        (h ^ u64::from(b)).wrapping_mul(0x100_0000_01b3)
    })
}

const CHUNK: usize = 1 << 20;

/// Write a spool file of `size` bytes with the key's pattern.
pub fn make_spool_file(path: &Path, key: &str, size: u64) -> Result<()> {
    let mut f = std::io::BufWriter::with_capacity(
        CHUNK,
        std::fs::File::create(path).with_context(|| format!("creating {}", path.display()))?,
    );
    let seed = key_seed(key);
    let mut buf = vec![0u8; CHUNK];
    let mut left = size;
    let mut i = 0;
    while left > 0 {
        let n = (left as usize).min(CHUNK);
        fill_pattern(seed, i, &mut buf[..n]);
        f.write_all(&buf[..n])?;
        left -= n as u64;
        i += 1;
    }
    f.flush()?;
    Ok(())
}

/// Spool `n` objects of `size` bytes named `<prefix>-<i>` under `dir`.
pub fn make_spool(
    dir: &Path,
    prefix: &str,
    n: usize,
    size: u64,
) -> Result<Vec<(String, std::path::PathBuf)>> {
    std::fs::create_dir_all(dir)?;
    (0..n)
        .map(|i| {
            let key = format!("{prefix}-{i:07}");
            let path = dir.join(&key);
            make_spool_file(&path, &key, size)?;
            Ok((key, path))
        })
        .collect()
}

/// Compare a recalled file with the key's pattern: (wrong bytes, bytes checked). A missing
/// file counts all `size` bytes wrong.
pub fn check_file(path: &Path, key: &str, size: u64) -> (u64, u64) {
    let Ok(f) = std::fs::File::open(path) else {
        return (size.max(1), 0);
    };
    let mut r = std::io::BufReader::with_capacity(CHUNK, f);
    let seed = key_seed(key);
    let mut want = vec![0u8; CHUNK];
    let mut got = vec![0u8; CHUNK];
    let (mut wrong, mut checked) = (0u64, 0u64);
    let mut i = 0;
    loop {
        let n = match read_full(&mut r, &mut got) {
            Ok(n) => n,
            Err(_) => return (wrong + size.saturating_sub(checked), checked),
        };
        if n == 0 {
            break;
        }
        fill_pattern(seed, i, &mut want[..n]);
        wrong += got[..n]
            .iter()
            .zip(&want[..n])
            .filter(|(a, b)| a != b)
            .count() as u64;
        checked += n as u64;
        i += 1;
    }
    // Short or long files are wrong by the difference.
    wrong += checked.abs_diff(size);
    (wrong, checked)
}

fn read_full(r: &mut impl Read, buf: &mut [u8]) -> std::io::Result<usize> {
    let mut n = 0;
    while n < buf.len() {
        match r.read(&mut buf[n..])? {
            0 => break,
            k => n += k,
        }
    }
    Ok(n)
}

/// Bytes free to an unprivileged writer in the filesystem holding `dir` (0 when it cannot be
/// asked).
pub fn free_bytes(dir: &Path) -> u64 {
    nix::sys::statvfs::statvfs(dir)
        .map(|st| st.blocks_available().saturating_mul(st.fragment_size()))
        .unwrap_or(0)
}

/// CPU seconds (user + system) of this process so far (getrusage; 0 when it cannot be asked).
pub fn cpu_seconds() -> f64 {
    use nix::sys::resource::{UsageWho, getrusage};
    use nix::sys::time::TimeValLike;
    getrusage(UsageWho::RUSAGE_SELF).map_or(0.0, |ru| {
        (ru.user_time().num_microseconds() + ru.system_time().num_microseconds()) as f64 / 1e6
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_spool_file_checks_clean_and_a_flipped_byte_is_found() {
        let dir = tempfile::tempdir().unwrap();
        let p = dir.path().join("k");
        make_spool_file(&p, "k", 3 * CHUNK as u64 + 17).unwrap();
        assert_eq!(
            check_file(&p, "k", 3 * CHUNK as u64 + 17),
            (0, 3 * CHUNK as u64 + 17)
        );
        let mut b = std::fs::read(&p).unwrap();
        b[CHUNK + 5] ^= 1;
        std::fs::write(&p, &b).unwrap();
        assert_eq!(check_file(&p, "k", 3 * CHUNK as u64 + 17).0, 1);
        // Another key's content is wrong almost everywhere.
        assert!(check_file(&p, "other", 3 * CHUNK as u64 + 17).0 > CHUNK as u64);
        assert_eq!(check_file(&dir.path().join("missing"), "k", 10).0, 10);
    }

    #[test]
    fn cpu_time_grows() {
        let a = cpu_seconds();
        let mut x = 0u64;
        for i in 0..20_000_000u64 {
            x = x.wrapping_mul(31).wrapping_add(i);
        }
        std::hint::black_box(x);
        assert!(cpu_seconds() >= a);
    }
}
