//! Files keep what a filesystem gives them, through the `reel` binary and a `reel worker` with
//! the simulator, on SQLite and PostgreSQL: an archived tree's permission bits, modification
//! times (to the nanosecond) and, as root, owners come back on recall; symbolic links (relative,
//! absolute, dangling, to a directory) are archived as links, never followed, and recalled as
//! the same links; a sparse file comes back sparse; two names of one file are refused. A recall into a directory that holds the files already follows the overwrite
//! policy: `never` (the default) reports a different file and leaves it, and finds an identical
//! one fine; `if-newer` keeps a newer file; `always` replaces it.

use std::os::unix::fs::{MetadataExt, PermissionsExt};
use std::path::Path;
use std::time::{Duration, SystemTime};

use reel_tests::*;

use reel_tests::show_job as show;

fn mtime_ns(m: &std::fs::Metadata) -> i64 {
    m.mtime() * 1_000_000_000 + m.mtime_nsec()
}

/// Recall every `m/` key into `to` with `extra` arguments; the exit code and the job.
fn recall(dir: &Path, to: &Path, extra: &[&str]) -> (i32, serde_json::Value) {
    let mut args = vec!["recall", "--prefix", "m/", "--to", to.to_str().unwrap()];
    args.extend_from_slice(extra);
    let (code, v, err) = reel(dir, &args);
    assert_eq!(code, 0, "submit: {v} {err}");
    let id = job_id(&v);
    let (code, v, err) = reel(dir, &["jobs", "wait", &id, "--timeout", "120"]);
    assert_ne!(code, 2, "recall timed out: {v} {err}");
    (code, show(dir, &id))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn files_keep_modes_times_owners_and_links_and_recall_follows_the_overwrite_policy() {
    let as_root = std::fs::metadata("/proc/self")
        .map(|m| m.uid() == 0)
        .unwrap_or(false);
    for store in stores("cli_file_metadata").await {
        let name = store.name();
        let dir = tempfile::tempdir().unwrap();
        let lib = tempfile::tempdir().unwrap();
        write_config(dir.path(), &store.url(), lib.path(), 2, "");
        let w = Worker::start(dir.path(), 1);
        let (code, v, err) = reel(dir.path(), &["intake", "--all-new", "--wait"]);
        assert_eq!(code, 0, "{name}: intake: {v} {err}");

        // The tree: two files with their own modes and times, links of every sort.
        let src = tempfile::tempdir().unwrap();
        let s = |p: &str| src.path().join(p);
        let a_sum = write_random_file(&s("a.bin"), 300_000, 1);
        write_random_file(&s("sub/b.sh"), 4_000, 2);
        std::fs::set_permissions(s("a.bin"), std::fs::Permissions::from_mode(0o640)).unwrap();
        std::fs::set_permissions(s("sub/b.sh"), std::fs::Permissions::from_mode(0o755)).unwrap();
        let old = SystemTime::UNIX_EPOCH + Duration::new(1_000_000_000, 123_456_789);
        std::fs::File::options()
            .write(true)
            .open(s("a.bin"))
            .unwrap()
            .set_modified(old)
            .unwrap();
        if as_root {
            std::os::unix::fs::chown(s("sub/b.sh"), Some(1234), Some(5678)).unwrap();
        }
        // A sparse file: 8 MiB, holes but for 4 KiB of data in the middle.
        let sparse_data = {
            let mut v = vec![0u8; 8 << 20];
            v[(4 << 20)..(4 << 20) + 4096].fill(0xA5);
            v
        };
        {
            use std::io::{Seek, SeekFrom, Write};
            let mut f = std::fs::File::create(s("sparse.img")).unwrap();
            f.seek(SeekFrom::Start(4 << 20)).unwrap();
            f.write_all(&sparse_data[(4 << 20)..(4 << 20) + 4096])
                .unwrap();
            f.set_len(8 << 20).unwrap();
        }
        std::os::unix::fs::symlink("../a.bin", s("sub/rel-link")).unwrap();
        std::os::unix::fs::symlink("/nonexistent/target", s("dangling")).unwrap();
        std::os::unix::fs::symlink("sub", s("dirlink")).unwrap();
        let (code, v, err) = reel(
            dir.path(),
            &[
                "archive",
                src.path().to_str().unwrap(),
                "--key-prefix",
                "m/",
                "--wait",
            ],
        );
        assert_eq!(code, 0, "{name}: archive: {v} {err}");

        // Two names of one file in one archive are refused, naming both; nothing is queued.
        let hl = tempfile::tempdir().unwrap();
        write_random_file(&hl.path().join("one"), 1000, 9);
        std::fs::hard_link(hl.path().join("one"), hl.path().join("two")).unwrap();
        let (code, _, err) = reel(dir.path(), &["archive", hl.path().to_str().unwrap()]);
        assert_ne!(code, 0, "{name}: hard links archived");
        assert!(
            err.contains("hard links") && err.contains("two"),
            "{name}: {err}"
        );

        // The catalogue records the kind, mode and mtime.
        let (code, v, err) = reel(dir.path(), &["catalog", "ls", "m/"]);
        assert_eq!(code, 0, "{name}: find: {v} {err}");
        let listed = v.to_string();
        assert!(listed.contains("\"symlink\""), "{name}: {listed}");

        // Recall into a fresh directory: everything as it was.
        let dst = tempfile::tempdir().unwrap();
        // Keys are `m/…`: they land under `m/` in the destination.
        let d = |p: &str| dst.path().join("m").join(p);
        let (code, v) = recall(dir.path(), dst.path(), &[]);
        assert_eq!(code, 0, "{name}: recall: {v}");
        assert_eq!(sha256_file(&d("a.bin")), a_sum, "{name}");
        let am = std::fs::metadata(d("a.bin")).unwrap();
        assert_eq!(am.mode() & 0o7777, 0o640, "{name}");
        assert_eq!(
            mtime_ns(&am),
            1_000_000_000_123_456_789,
            "{name}: mtime to the ns"
        );
        assert_eq!(
            std::fs::read(d("sparse.img")).unwrap(),
            sparse_data,
            "{name}"
        );
        let sm = std::fs::metadata(d("sparse.img")).unwrap();
        assert!(
            sm.blocks() * 512 < 1 << 20,
            "{name}: the sparse file came back with {} blocks for 8 MiB",
            sm.blocks()
        );
        let bm = std::fs::metadata(d("sub/b.sh")).unwrap();
        assert_eq!(bm.mode() & 0o7777, 0o755, "{name}");
        assert_eq!(
            mtime_ns(&bm),
            mtime_ns(&std::fs::metadata(s("sub/b.sh")).unwrap()),
            "{name}"
        );
        if as_root {
            assert_eq!((bm.uid(), bm.gid()), (1234, 5678), "{name}: owner as root");
        }
        for (link, target) in [
            ("sub/rel-link", "../a.bin"),
            ("dangling", "/nonexistent/target"),
            ("dirlink", "sub"),
        ] {
            let m = std::fs::symlink_metadata(d(link)).unwrap();
            assert!(m.file_type().is_symlink(), "{name}: {link} is not a link");
            assert_eq!(
                std::fs::read_link(d(link)).unwrap(),
                Path::new(target),
                "{name}: {link}"
            );
            assert_eq!(
                mtime_ns(&m),
                mtime_ns(&std::fs::symlink_metadata(s(link)).unwrap()),
                "{name}: {link}'s mtime"
            );
        }

        // Again into the same directory: identical files are there, nothing to report.
        let (code, v) = recall(dir.path(), dst.path(), &[]);
        assert_eq!(code, 0, "{name}: identical files must be fine: {v}");

        // A file changed there since: `never` reports it and leaves it.
        std::fs::write(d("a.bin"), b"edited locally").unwrap();
        let (code, v) = recall(dir.path(), dst.path(), &[]);
        assert_ne!(code, 0, "{name}: replaced under `never`: {v}");
        let error = v["error"].as_str().unwrap_or_default();
        assert!(
            error.contains("a.bin") && error.contains("not replaced"),
            "{name}: {error}"
        );
        assert_eq!(std::fs::read(d("a.bin")).unwrap(), b"edited locally");
        // `if-newer`: the local edit is newer than the archived copy of 2001: kept.
        let (code, v) = recall(dir.path(), dst.path(), &["--overwrite", "if-newer"]);
        assert_ne!(
            code, 0,
            "{name}: replaced a newer file under `if-newer`: {v}"
        );
        assert_eq!(std::fs::read(d("a.bin")).unwrap(), b"edited locally");
        // An older local file is replaced under `if-newer`.
        std::fs::File::options()
            .write(true)
            .open(d("a.bin"))
            .unwrap()
            .set_modified(SystemTime::UNIX_EPOCH + Duration::from_secs(10))
            .unwrap();
        let (code, v) = recall(dir.path(), dst.path(), &["--overwrite", "if-newer"]);
        assert_eq!(code, 0, "{name}: if-newer over an older file: {v}");
        assert_eq!(sha256_file(&d("a.bin")), a_sum, "{name}");
        // `always` replaces whatever is there, a link's target included.
        std::fs::write(d("a.bin"), b"edited again").unwrap();
        std::fs::remove_file(d("dirlink")).unwrap();
        std::os::unix::fs::symlink("/etc", d("dirlink")).unwrap();
        let (code, v) = recall(dir.path(), dst.path(), &["--overwrite", "always"]);
        assert_eq!(code, 0, "{name}: always: {v}");
        assert_eq!(sha256_file(&d("a.bin")), a_sum, "{name}");
        assert_eq!(std::fs::read_link(d("dirlink")).unwrap(), Path::new("sub"));
        // A policy that does not exist is refused at submission, naming the choices.
        let (code, _, err) = reel(
            dir.path(),
            &[
                "recall",
                "--prefix",
                "m/",
                "--to",
                dst.path().to_str().unwrap(),
                "--overwrite",
                "sometimes",
            ],
        );
        assert_ne!(code, 0, "{name}");
        assert!(err.contains("if-newer"), "{name}: {err}");
        // Nothing of the recalls is left in the destination's private directory.
        assert!(!dst.path().join(".reel-partial").exists(), "{name}");
        assert_eq!(w.stop(), 0, "{name}");
    }
}
