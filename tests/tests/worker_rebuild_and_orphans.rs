//! `catalog rebuild` restores a cartridge's state and end of data from the tape, and recovery
//! never appends after data another catalogue wrote (issue #15 item 10). Through the `reel`
//! binary and `reel worker`, the simulator loaded through dlopen, on SQLite and PostgreSQL; two
//! data directories (two catalogues) share one simulated library, one after the other.

use std::collections::BTreeMap;
use std::path::Path;

use reel_engine::catalogue::{Cartridge, CartridgeState, Catalogue};
use reel_tests::*;

const MIB: u64 = 1 << 20;
/// Each simulated cartridge's capacity.
const CAPACITY: u64 = 32 * MIB;

/// Small cartridges whose early warning comes at `ew_percent` of their capacity, 256 KiB
/// records and 2 MiB containers.
fn configure(dir: &Path, store_url: &str, lib: &Path, ew_percent: u32) {
    let plugin_config = format!(
        "dir={}\\nsim.clock=instant\\nsim.calibrated=true\\nsim.drives=1\\nsim.cartridges=6\\nsim.capacity_bytes={CAPACITY}\\nsim.early_warning_percent={ew_percent}",
        lib.display()
    );
    let cfg = write_plugin_config(
        dir,
        store_url,
        &plugin_path("reel_plugin_sim"),
        &plugin_config,
        "",
    );
    let text = std::fs::read_to_string(&cfg).unwrap().replace(
        "[archive]\n",
        "[archive]\nrecord_size = 262144\ncontainer_bytes = 2097152\n",
    );
    std::fs::write(&cfg, text).unwrap();
}

async fn open_catalogue(dir: &Path, store: &Store) -> Catalogue {
    let url = match store {
        Store::Sqlite => format!("sqlite:{}", dir.join("reel.db").display()),
        Store::Postgres(_) => store.url(),
    };
    Catalogue::open(&url).await.expect("open the catalogue")
}

/// Cartridges holding data, by barcode.
async fn written(cat: &Catalogue) -> BTreeMap<String, Cartridge> {
    cat.cartridges()
        .await
        .unwrap()
        .into_iter()
        .filter(|c| c.used_bytes > 0)
        .map(|c| (c.barcode.clone(), c))
        .collect()
}

/// Run `reel ARGS --wait` and insist it ends done.
fn ok(dir: &Path, what: &str, args: &[&str]) -> serde_json::Value {
    let mut a = args.to_vec();
    a.push("--wait");
    let (code, v, err) = reel(dir, &a);
    assert_eq!(code, 0, "{what}: {v} {err}");
    v
}

/// Write `n` random files of `size` bytes under `root`; returns their checksums by name.
fn files(root: &Path, n: u64, size: u64, seed: u64) -> BTreeMap<String, [u8; 32]> {
    (0..n)
        .map(|i| {
            let name = format!("f{i:02}");
            let sum = write_random_file(&root.join(&name), size + 4099 * i, seed + i);
            (name, sum)
        })
        .collect()
}

/// Recall `prefix` into a new directory and compare every file with `sums`.
fn recalls(dir: &Path, what: &str, prefix: &str, sums: &BTreeMap<String, [u8; 32]>) {
    let dst = tempfile::tempdir().unwrap();
    ok(
        dir,
        what,
        &[
            "recall",
            "--prefix",
            prefix,
            "--to",
            dst.path().to_str().unwrap(),
        ],
    );
    for (rel, sum) in sums {
        let p = dst.path().join(prefix.trim_end_matches('/')).join(rel);
        assert_eq!(sha256_file(&p), *sum, "{what}: {rel}");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_rebuilt_cartridge_that_ended_in_early_warning_comes_back_full_at_its_real_end_of_data() {
    let firsts = stores("rebuild_state_a").await;
    let seconds = stores("rebuild_state_b").await;
    for (a_store, b_store) in firsts.into_iter().zip(seconds) {
        let name = a_store.name();
        let lib = tempfile::tempdir().unwrap();
        let a = tempfile::tempdir().unwrap();
        // Early warning at 20 % (6.4 MiB of 32): an archive of 12 MiB runs into it on the
        // first cartridge it writes.
        configure(a.path(), &a_store.url(), lib.path(), 20);
        let w = Worker::start(a.path(), 1);
        ok(
            a.path(),
            &format!("{name}: intake"),
            &["intake", "--all-new"],
        );
        let src = tempfile::tempdir().unwrap();
        let sums = files(src.path(), 8, (3 * MIB) / 2, 1);
        ok(
            a.path(),
            &format!("{name}: archive"),
            &[
                "archive",
                src.path().to_str().unwrap(),
                "--key-prefix",
                "e/",
            ],
        );
        assert_eq!(w.stop(), 0, "{name}: worker A exit");
        let cat_a = open_catalogue(a.path(), &a_store).await;
        let before = written(&cat_a).await;
        let full: Vec<&Cartridge> = before
            .values()
            .filter(|c| c.state == CartridgeState::Full)
            .collect();
        assert!(
            !full.is_empty(),
            "{name}: no cartridge ran into early warning: {before:?}"
        );

        // A second catalogue takes the library in from the tapes alone.
        let b = tempfile::tempdir().unwrap();
        configure(b.path(), &b_store.url(), lib.path(), 20);
        let w = Worker::start(b.path(), 1);
        let v = ok(
            b.path(),
            &format!("{name}: rebuild"),
            &["catalog", "rebuild"],
        );
        let id = job_id(&v);
        let job = show_job(b.path(), &id);
        let job = job.get("job").cloned().unwrap_or(job);
        let reports = job["result"]["cartridges"]
            .as_array()
            .cloned()
            .unwrap_or_default();
        let cat_b = open_catalogue(b.path(), &b_store).await;
        let after = written(&cat_b).await;
        assert_eq!(
            after.keys().collect::<Vec<_>>(),
            before.keys().collect::<Vec<_>>(),
            "{name}: cartridges with data"
        );
        for (barcode, was) in &before {
            let now = &after[barcode];
            assert_eq!(
                (now.eod_block, now.next_file),
                (was.eod_block, was.next_file),
                "{name}: {barcode}: end of data and next file after the rebuild"
            );
            let rep = reports
                .iter()
                .find(|r| r["barcode"] == barcode.as_str())
                .unwrap_or_else(|| panic!("{name}: no rebuild report for {barcode}: {job}"));
            assert_eq!(rep["eod_block"], was.eod_block, "{name}: {rep}");
            assert_eq!(rep["state"], now.state.as_str(), "{name}: {rep}");
            if rep["past_early_warning"] == true {
                assert_eq!(now.state, CartridgeState::Full, "{name}: {rep}");
            }
        }
        // The cartridge that ran into early warning comes back full, and says why.
        for c in &full {
            let rep = reports
                .iter()
                .find(|r| r["barcode"] == c.barcode.as_str())
                .unwrap();
            assert_eq!(
                after[&c.barcode].state,
                CartridgeState::Full,
                "{name}: {rep}"
            );
            assert_eq!(rep["past_early_warning"], true, "{name}: {rep}");
        }

        // The second catalogue recalls everything, and its next archive leaves the full
        // cartridges as they were.
        recalls(b.path(), &format!("{name}: recall from B"), "e/", &sums);
        let more = tempfile::tempdir().unwrap();
        files(more.path(), 2, MIB, 50);
        ok(
            b.path(),
            &format!("{name}: archive in B"),
            &[
                "archive",
                more.path().to_str().unwrap(),
                "--key-prefix",
                "m/",
            ],
        );
        let later = written(&cat_b).await;
        for c in &full {
            assert_eq!(
                later[&c.barcode].eod_block, c.eod_block,
                "{name}: {} was written after the rebuild found it full",
                c.barcode
            );
        }
        assert_eq!(w.stop(), 0, "{name}: worker B exit");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn recovery_never_appends_after_data_another_catalogue_wrote() {
    let firsts = stores("orphan_tail_a").await;
    let seconds = stores("orphan_tail_b").await;
    for (a_store, b_store) in firsts.into_iter().zip(seconds) {
        let name = a_store.name();
        let lib = tempfile::tempdir().unwrap();
        let a = tempfile::tempdir().unwrap();
        let b = tempfile::tempdir().unwrap();
        configure(a.path(), &a_store.url(), lib.path(), 90);
        configure(b.path(), &b_store.url(), lib.path(), 90);

        // Catalogue A writes a first set to one cartridge.
        let w = Worker::start(a.path(), 1);
        ok(
            a.path(),
            &format!("{name}: intake A"),
            &["intake", "RL0001L9"],
        );
        let src1 = tempfile::tempdir().unwrap();
        let sums1 = files(src1.path(), 3, 300_000, 10);
        ok(
            a.path(),
            &format!("{name}: archive 1"),
            &[
                "archive",
                src1.path().to_str().unwrap(),
                "--key-prefix",
                "one/",
            ],
        );
        assert_eq!(w.stop(), 0);

        // Catalogue B takes that cartridge in from the tape, and labels one of its own.
        let w = Worker::start(b.path(), 1);
        ok(
            b.path(),
            &format!("{name}: rebuild in B"),
            &["catalog", "rebuild", "RL0001L9"],
        );
        ok(
            b.path(),
            &format!("{name}: intake B"),
            &["intake", "RL0002L9"],
        );
        assert_eq!(w.stop(), 0);
        let cat_b = open_catalogue(b.path(), &b_store).await;
        let b_knew = cat_b.cartridge("RL0001L9").await.unwrap().unwrap();

        // A appends a second set: past the end of data B knows.
        let w = Worker::start(a.path(), 1);
        let src2 = tempfile::tempdir().unwrap();
        let sums2 = files(src2.path(), 3, 300_000, 20);
        ok(
            a.path(),
            &format!("{name}: archive 2"),
            &[
                "archive",
                src2.path().to_str().unwrap(),
                "--key-prefix",
                "two/",
            ],
        );
        assert_eq!(w.stop(), 0);
        let cat_a = open_catalogue(a.path(), &a_store).await;
        let a_eod = cat_a
            .cartridge("RL0001L9")
            .await
            .unwrap()
            .unwrap()
            .eod_block;
        assert!(a_eod > b_knew.eod_block, "{name}: A did not append");

        // B archives: its fullest cartridge is RL0001L9, whose tape holds A's second set past
        // B's end of data. Recovery finds it is not B's, appends nothing, marks the cartridge
        // full, and the archive goes to B's other cartridge.
        let w = Worker::start(b.path(), 1);
        let src3 = tempfile::tempdir().unwrap();
        let sums3 = files(src3.path(), 3, 200_000, 30);
        ok(
            b.path(),
            &format!("{name}: archive 3"),
            &[
                "archive",
                src3.path().to_str().unwrap(),
                "--key-prefix",
                "three/",
            ],
        );
        let now = cat_b.cartridge("RL0001L9").await.unwrap().unwrap();
        assert_eq!(now.state, CartridgeState::Full, "{name}: {now:?}");
        assert_eq!(now.eod_block, b_knew.eod_block, "{name}: {now:?}");
        let log = std::fs::read_to_string(b.path().join("worker-1.log")).unwrap();
        assert!(
            log.contains("this catalogue did not write") && log.contains("reel catalog rebuild"),
            "{name}: worker B's log does not say what it found"
        );
        recalls(
            b.path(),
            &format!("{name}: recall 3 from B"),
            "three/",
            &sums3,
        );

        // Rebuilding the cartridge takes A's second set into B.
        ok(
            b.path(),
            &format!("{name}: rebuild again"),
            &["catalog", "rebuild", "RL0001L9"],
        );
        assert_eq!(
            cat_b
                .cartridge("RL0001L9")
                .await
                .unwrap()
                .unwrap()
                .eod_block,
            a_eod,
            "{name}: end of data after the second rebuild"
        );
        recalls(
            b.path(),
            &format!("{name}: recall 2 from B"),
            "two/",
            &sums2,
        );
        assert_eq!(w.stop(), 0);

        // A's tape is as A left it: A appends again without any recovery, and recalls all.
        let w = Worker::start(a.path(), 2);
        let src4 = tempfile::tempdir().unwrap();
        files(src4.path(), 2, 100_000, 40);
        ok(
            a.path(),
            &format!("{name}: archive 4"),
            &[
                "archive",
                src4.path().to_str().unwrap(),
                "--key-prefix",
                "four/",
            ],
        );
        let log = std::fs::read_to_string(a.path().join("worker-2.log")).unwrap();
        assert!(
            !log.contains("recovered") && !log.contains("this catalogue did not write"),
            "{name}: A found its tape changed"
        );
        recalls(
            a.path(),
            &format!("{name}: recall 1 from A"),
            "one/",
            &sums1,
        );
        recalls(
            a.path(),
            &format!("{name}: recall 2 from A"),
            "two/",
            &sums2,
        );
        assert_eq!(w.stop(), 0);
    }
}
