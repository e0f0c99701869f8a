//! reel's engine as the benchmark drives it: a `TapeService` over a fresh simulated library
//! and a fresh SQLite catalogue, spool files with checkable content, and the simulator's own
//! view of the medium (its documented cartridge index) for the model's bounds.

use std::io::{Read, Write};
use std::path::{Path, PathBuf};

use anyhow::{Context, Result, anyhow};
use reel_engine::catalogue::Catalogue;
use reel_engine::service::{
    ArchiveReport, RecallBatchReport, RecallRequest, ServiceOptions, TapeService, recall_options,
};
use reel_engine::session::order::OrderPolicy;
use reel_engine::session::{CancelToken, SessionConfig, no_progress};

use crate::rig::{Counters, fill_pattern};
use crate::sections::Ctx;

/// A service over a fresh library and catalogue.
pub struct Engine {
    /// The runtime the service's futures run on.
    pub rt: tokio::runtime::Runtime,
    /// The service.
    pub svc: TapeService,
    /// The library directory.
    pub lib_dir: tempfile::TempDir,
    /// The catalogue's directory (kept until the engine is dropped).
    _db_dir: tempfile::TempDir,
    setup: Setup,
}

/// How the service was opened.
struct Setup {
    drives: u32,
    cartridges: u32,
    extra: String,
    session: SessionConfig,
    scale: Option<f64>,
}

impl Engine {
    /// A service with `drives` drives and `cartridges` cartridges, the model's figures plus
    /// `extra` simulator items, and `session` tunables, on the INSTANT clock.
    pub fn new(
        ctx: &Ctx,
        drives: u32,
        cartridges: u32,
        extra: &str,
        session: SessionConfig,
    ) -> Result<Engine> {
        Engine::new_with_library_in(ctx, &ctx.scratch, drives, cartridges, extra, session)
    }

    /// [`Engine::new`] with the simulated library (its cartridges' data files) in `lib_parent`
    /// instead of the scratch directory: a restore measures its destination, so the media it
    /// reads from must not share that disk.
    pub fn new_with_library_in(
        ctx: &Ctx,
        lib_parent: &Path,
        drives: u32,
        cartridges: u32,
        extra: &str,
        session: SessionConfig,
    ) -> Result<Engine> {
        let lib_dir = tempfile::Builder::new()
            .prefix("reel-bench-lib-")
            .tempdir_in(lib_parent)?;
        let db_dir = tempfile::Builder::new()
            .prefix("reel-bench-db-")
            .tempdir_in(&ctx.scratch)?;
        let cfg = Setup {
            drives,
            cartridges,
            extra: extra.to_string(),
            session,
            scale: None,
        };
        Engine::open(ctx, lib_dir, db_dir, cfg)
    }

    /// Close the service and open it again on the same library and catalogue, on the SCALED
    /// clock at `scale` modelled seconds per wall second (`None`: INSTANT).
    pub fn reclock(self, ctx: &Ctx, scale: Option<f64>) -> Result<Engine> {
        let Engine {
            rt,
            svc,
            lib_dir,
            _db_dir,
            setup,
        } = self;
        let catalogue = svc.catalogue().clone();
        rt.block_on(catalogue.close());
        drop(svc);
        drop(rt);
        Engine::open(ctx, lib_dir, _db_dir, Setup { scale, ..setup })
    }

    fn open(
        ctx: &Ctx,
        lib_dir: tempfile::TempDir,
        db_dir: tempfile::TempDir,
        setup: Setup,
    ) -> Result<Engine> {
        let rt = tokio::runtime::Builder::new_multi_thread()
            .worker_threads(4)
            .enable_all()
            .build()
            .context("starting the tokio runtime")?;
        let mut model = ctx.model.sim_config();
        if let Some(scale) = setup.scale {
            model = model.replace(
                "sim.clock=instant",
                &format!("sim.clock=scaled;sim.time_scale={scale}"),
            );
        }
        let config = format!(
            "dir={};{model};sim.drives={};sim.cartridges={};{}",
            lib_dir.path().display(),
            setup.drives,
            setup.cartridges,
            setup.extra
        );
        let url = format!("sqlite:{}", db_dir.path().join("catalogue.db").display());
        let session = setup.session.clone();
        let svc = rt.block_on(async {
            let cat = Catalogue::open(&url)
                .await
                .map_err(|e| anyhow!("opening the catalogue {url}: {e}"))?;
            let opts = ServiceOptions {
                session,
                default_capacity_bytes: ctx.model.capacity_bytes,
                ..Default::default()
            };
            TapeService::open(cat, &ctx.plugin_path, &config, opts)
                .await
                .map_err(|e| anyhow!("opening the tape service: {e}"))
        })?;
        Ok(Engine {
            rt,
            svc,
            lib_dir,
            _db_dir: db_dir,
            setup,
        })
    }

    /// Define storage class `class` with one copy in pool `pool`.
    pub fn storage_class(&self, class: &str, pool: &str) -> Result<()> {
        self.rt
            .block_on(
                self.svc
                    .catalogue()
                    .ensure_storage_class(class, &[pool.to_string()]),
            )
            .map_err(|e| anyhow!("storage class {class}: {e}"))
    }

    /// Label `n` new cartridges into `pool` (so the archive measured does not label).
    pub fn intake(&self, barcodes: &[String], pool: &str) -> Result<()> {
        self.rt
            .block_on(self.svc.intake(barcodes, pool))
            .map_err(|e| anyhow!("intake into {pool}: {e}"))?;
        Ok(())
    }

    /// The simulator's counters.
    pub fn counters(&self) -> Result<Counters> {
        let r = self
            .rt
            .block_on(self.svc.library().control(r#"{"op":"counters"}"#))
            .map_err(|e| anyhow!("simulator counters: {e}"))?;
        Counters::parse(&r)
    }

    /// Archive `items` into `class`.
    pub fn archive(&self, items: &[(String, PathBuf)], class: &str) -> Result<ArchiveReport> {
        self.rt
            .block_on(
                self.svc
                    .archive(items.to_vec(), class, &CancelToken::new(), no_progress()),
            )
            .map_err(|e| anyhow!("archive into {class}: {e}"))
    }

    /// Recall `keys` into `root` under `policy`.
    pub fn recall(
        &self,
        keys: &[String],
        root: &Path,
        policy: OrderPolicy,
    ) -> Result<RecallBatchReport> {
        let opts = recall_options(self.svc.session_config(), policy);
        self.recall_with(keys, root, &opts)
    }

    /// Recall `keys` into `root` with explicit options (writer threads, read-ahead, …).
    pub fn recall_with(
        &self,
        keys: &[String],
        root: &Path,
        opts: &reel_engine::session::recall::RecallOptions,
    ) -> Result<RecallBatchReport> {
        let reqs = keys
            .iter()
            .map(|k| RecallRequest {
                key: k.clone(),
                root: root.to_path_buf(),
            })
            .collect();
        self.rt
            .block_on(
                self.svc
                    .recall(reqs, opts, &CancelToken::new(), no_progress()),
            )
            .map_err(|e| anyhow!("recall: {e}"))
    }

    /// Put every mounted cartridge back (a cold library).
    pub fn unmount_all(&self) -> Result<()> {
        self.rt
            .block_on(self.svc.unmount_all())
            .map_err(|e| anyhow!("unmount: {e}"))
    }

    /// Byte offset on the medium of every block of `barcode` (from the simulator's index,
    /// docs/SIMULATOR.md §5), plus its EOD offset at the end.
    pub fn block_offsets(&self, barcode: &str) -> Result<Vec<u64>> {
        let path = self.lib_dir.path().join(barcode).join("index");
        let raw = std::fs::read(&path).with_context(|| format!("reading {}", path.display()))?;
        let mut out = Vec::with_capacity(raw.len() / 24 + 1);
        let mut end = 0;
        for e in raw.chunks_exact(24) {
            let off = u64::from_le_bytes(e[0..8].try_into()?);
            let len = u64::from(u32::from_le_bytes(e[8..12].try_into()?));
            out.push(off);
            end = off + len;
        }
        out.push(end);
        Ok(out)
    }
}

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
pub fn make_spool(dir: &Path, prefix: &str, n: usize, size: u64) -> Result<Vec<(String, PathBuf)>> {
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
