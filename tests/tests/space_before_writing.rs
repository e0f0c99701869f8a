//! Space before writing (issue #16 item 5), through the `reel` binary and a `reel worker` with
//! the simulator, on SQLite and PostgreSQL: small cartridges (32 MiB) with a small
//! early-warning zone (4 MiB, as tgt's minimum). An archive larger than a cartridge spreads over
//! several, including objects larger than the room left on a partly used cartridge: every
//! cartridge marked full holds objects, no container runs into end of medium, at most one
//! container per cartridge is given up, and everything recalls byte for byte. A file larger
//! than a cartridge is refused at submission, naming the path, its size and the capacity.

use std::path::Path;

use reel_engine::catalogue::{CartridgeState, Catalogue, ContainerState};
use reel_tests::*;

const MIB: u64 = 1 << 20;
/// Each simulated cartridge's capacity.
const CAPACITY: u64 = 32 * MIB;

/// The test config with small cartridges, 256 KiB records and 8 MiB containers.
fn configure(dir: &Path, store_url: &str, lib: &Path) {
    let plugin_config = format!(
        "dir={}\\nsim.clock=instant\\nsim.calibrated=true\\nsim.drives=1\\nsim.cartridges=8\\nsim.capacity_bytes={CAPACITY}\\nsim.early_warning_percent=87.5",
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
        "[archive]\nrecord_size = 262144\ncontainer_bytes = 8388608\n",
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

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn cartridges_fill_with_objects_and_oversized_files_are_refused() {
    for store in stores("space_before_writing").await {
        let name = store.name();
        let dir = tempfile::tempdir().unwrap();
        let lib = tempfile::tempdir().unwrap();
        configure(dir.path(), &store.url(), lib.path());
        let w = Worker::start(dir.path(), 1);
        let (code, v, err) = reel(dir.path(), &["intake", "--all-new", "--wait"]);
        assert_eq!(code, 0, "{name}: intake: {v} {err}");

        // Labelling recorded each cartridge's capacity as the drive reports it.
        let cat = open_catalogue(dir.path(), &store).await;
        for c in cat.cartridges().await.unwrap() {
            assert_eq!(c.capacity_bytes, CAPACITY, "{name}: {}", c.barcode);
        }

        // A file larger than a cartridge is refused at submission, with the reason.
        let src = tempfile::tempdir().unwrap();
        let huge = src.path().join("huge");
        write_random_file(&huge, 40 * MIB, 99);
        let (code, v, err) = reel(dir.path(), &["archive", huge.to_str().unwrap()]);
        let said = format!("{v} {err}");
        assert_ne!(
            code, 0,
            "{name}: the oversized archive was accepted: {said}"
        );
        assert!(
            said.contains(huge.to_str().unwrap())
                && said.contains(&(40 * MIB).to_string())
                && said.contains(&CAPACITY.to_string())
                && said.contains("larger than a cartridge"),
            "{name}: {said}"
        );
        std::fs::remove_file(&huge).unwrap();

        // About three cartridges' worth, in objects of 1.5 to 14 MiB.
        let sizes_mib = [
            6.0, 9.0, 3.0, 13.0, 7.0, 11.0, 2.0, 5.0, 14.0, 4.0, 8.0, 1.5, 10.0,
        ];
        let mut sums = std::collections::BTreeMap::new();
        let mut paths = Vec::new();
        for (i, mib) in sizes_mib.iter().enumerate() {
            let n = format!("f{i:02}");
            let size = (mib * MIB as f64) as u64 + 4099 * i as u64;
            let p = src.path().join(&n);
            sums.insert(n, write_random_file(&p, size, i as u64));
            paths.push(p.display().to_string());
        }
        let mut args = vec!["archive"];
        args.extend(paths.iter().map(String::as_str));
        args.extend(["--key-prefix", "sp/", "--wait"]);
        let (code, v, err) = reel(dir.path(), &args);
        assert_eq!(code, 0, "{name}: archive: {v} {err}");

        // Every cartridge that went full holds objects; nothing ran into end of medium.
        let mut full = 0;
        let mut dead = 0;
        let mut live_on: std::collections::BTreeMap<String, usize> = Default::default();
        for c in cat.cartridges().await.unwrap() {
            let containers = cat.containers_on(&c.barcode).await.unwrap();
            dead += containers
                .iter()
                .filter(|k| k.state == ContainerState::Dead)
                .count();
            let live = containers
                .iter()
                .filter(|k| matches!(k.state, ContainerState::Durable | ContainerState::Verified))
                .filter(|k| k.bytes > 0)
                .count();
            live_on.insert(c.barcode.clone(), live);
            if c.state == CartridgeState::Full {
                full += 1;
                assert!(
                    c.used_bytes > 0 && live > 0,
                    "{name}: cartridge {} is full with {} bytes used in {live} live containers",
                    c.barcode,
                    c.used_bytes
                );
            }
            assert!(
                c.used_bytes <= CAPACITY,
                "{name}: {} uses {}",
                c.barcode,
                c.used_bytes
            );
        }
        assert!(
            full >= 2,
            "{name}: the archive did not fill cartridges: {live_on:?}"
        );
        assert!(
            dead <= full,
            "{name}: {dead} dead containers on {full} full cartridges (a burn loop?)"
        );
        for key in sums.keys() {
            let o = cat
                .object(&format!("sp/{key}"))
                .await
                .unwrap()
                .unwrap_or_else(|| panic!("{name}: sp/{key} is not catalogued"));
            let copies = cat.copies(&o.key, o.generation).await.unwrap();
            assert_eq!(copies.len(), 1, "{name}: sp/{key}: {copies:?}");
        }
        let log = std::fs::read_to_string(dir.path().join("worker-1.log")).unwrap();
        assert!(
            !log.contains("end of medium before the container closed"),
            "{name}: a session ran into end of medium:\n{log}"
        );
        assert!(
            log.contains("no room for the next object on this cartridge"),
            "{name}: no object met a partly used cartridge without room:\n{log}"
        );

        // Everything recalls byte for byte.
        let dst = tempfile::tempdir().unwrap();
        let dsts = dst.path().to_str().unwrap();
        let (code, v, err) = reel(
            dir.path(),
            &["recall", "--prefix", "sp/", "--to", dsts, "--wait"],
        );
        assert_eq!(code, 0, "{name}: recall: {v} {err}");
        for (n, sum) in &sums {
            assert_eq!(
                sha256_file(&dst.path().join("sp").join(n)),
                *sum,
                "{name}: {n}"
            );
        }
        assert_eq!(w.stop(), 0, "{name}");
    }
}
