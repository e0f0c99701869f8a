//! End to end through the engine: the simulator loaded through dlopen (INSTANT clock), the
//! catalogue on SQLite and on PostgreSQL. Archive then recall byte for byte — many small objects
//! and multi-GiB ones, two copies, several cartridges — then a catalogue rebuilt from the tapes
//! alone equals the original, and keys that try to escape the destination are refused.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use rand::{Rng, SeedableRng};
use reel_engine::catalogue::Catalogue;
use reel_engine::service::{RecallRequest, ServiceOptions, TapeService, recall_options};
use reel_engine::session::order::OrderPolicy;
use reel_engine::session::{CancelToken, SessionConfig, VerifyMode, no_progress};
use reel_tests::*;

/// Bytes of each big object (multi-GiB by default; REEL_TEST_BIG_BYTES shrinks it locally).
fn big_bytes() -> u64 {
    std::env::var("REEL_TEST_BIG_BYTES")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or((2u64 << 30) + 12_345)
}

struct Spool {
    _dir: tempfile::TempDir,
    items: Vec<(String, PathBuf)>,
    sums: BTreeMap<String, [u8; 32]>,
}

fn spool(small: usize, big: usize) -> Spool {
    let dir = tempfile::tempdir().unwrap();
    let mut rng = rand::rngs::StdRng::seed_from_u64(7);
    let mut items = Vec::new();
    let mut sums = BTreeMap::new();
    for i in 0..small {
        let key = format!("small/{:02}/obj-{i:05}.bin", i % 37);
        let p = dir.path().join(&key);
        let size = if i % 500 == 0 {
            0
        } else {
            rng.gen_range(1..40_000)
        };
        let s = write_random_file(&p, size, i as u64);
        sums.insert(key.clone(), s);
        items.push((key, p));
    }
    for i in 0..big {
        let key = format!("big/blob-{i}.dat");
        let p = dir.path().join(&key);
        let s = write_random_file(&p, big_bytes() + i as u64 * 4099, 1000 + i as u64);
        sums.insert(key.clone(), s);
        items.push((key, p));
    }
    Spool {
        _dir: dir,
        items,
        sums,
    }
}

async fn service(url: &str, lib_dir: &Path, capacity: u64) -> TapeService {
    let catalogue = Catalogue::open(url).await.unwrap();
    catalogue
        .ensure_storage_class("two", &["copy1".to_string(), "copy2".to_string()])
        .await
        .unwrap();
    let cap = capacity.to_string();
    let cfg = sim_config(
        lib_dir,
        &[
            ("sim.capacity_bytes", cap.as_str()),
            ("sim.early_warning_percent", "75"),
            ("sim.cartridges", "12"),
            ("sim.slots", "16"),
        ],
    );
    let opts = ServiceOptions {
        session: SessionConfig {
            container_bytes: 512 << 20,
            barrier_bytes: 2 << 30,
            verify: VerifyMode::Full,
            ..SessionConfig::default()
        },
        default_capacity_bytes: capacity,
        ..ServiceOptions::default()
    };
    TapeService::open(catalogue, &plugin_path("reel_plugin_sim"), &cfg, opts)
        .await
        .unwrap()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn archive_then_recall_byte_for_byte_on_both_backends() {
    init_tracing();
    let sp = spool(10_000, 2);
    for backend in backends("archive_then_recall_byte_for_byte").await {
        let lib = tempfile::tempdir().unwrap();
        // Cartridges small enough that the data spans several of them per copy, big enough
        // for the largest object.
        let total: u64 = sp
            .items
            .iter()
            .map(|(_, p)| std::fs::metadata(p).unwrap().len())
            .sum();
        // Early warning at 75 % (see service()): the largest object must fit before it.
        let capacity = ((big_bytes() + (64 << 20)) * 4 / 3).max(total * 2 / 5);
        let svc = service(&backend.url(), lib.path(), capacity).await;
        let rep = svc
            .archive(sp.items.clone(), "two", &CancelToken::new(), no_progress())
            .await
            .unwrap_or_else(|e| panic!("{}: archive failed: {e}", backend.name()));
        assert_eq!(rep.objects, sp.items.len() as u64);
        assert_eq!(rep.cartridges.len(), 2, "two copies");
        let c1: std::collections::HashSet<_> = rep.cartridges[0].iter().collect();
        assert!(
            rep.cartridges[1].iter().all(|b| !c1.contains(b)),
            "copies share a cartridge"
        );
        assert!(
            rep.cartridges[0].len() >= 2,
            "copy 1 spans several cartridges: {:?}",
            rep.cartridges
        );
        assert_eq!(
            svc.catalogue().count_objects().await.unwrap(),
            sp.items.len() as u64
        );

        let dst = tempfile::tempdir().unwrap();
        let reqs: Vec<RecallRequest> = sp
            .items
            .iter()
            .map(|(k, _)| RecallRequest {
                key: k.clone(),
                root: dst.path().to_path_buf(),
            })
            .collect();
        let opts = recall_options(svc.session_config(), OrderPolicy::Auto);
        let rr = svc
            .recall(reqs, &opts, &CancelToken::new(), no_progress())
            .await
            .unwrap();
        assert!(
            rr.failed.is_empty(),
            "{}: failed {:?}",
            backend.name(),
            &rr.failed[..rr.failed.len().min(5)]
        );
        assert!(rr.bad_copies.is_empty(), "bad copies {:?}", rr.bad_copies);
        assert_eq!(rr.objects, sp.items.len() as u64);
        for (k, sum) in &sp.sums {
            let got = sha256_file(&dst.path().join(k));
            assert_eq!(hex32(&got), hex32(sum), "{}: {k} differs", backend.name());
        }

        // No write anywhere but at end of data.
        let counters = svc.library().control(r#"{"op":"counters"}"#).await.unwrap();
        let v: serde_json::Value = serde_json::from_str(&counters).unwrap();
        assert_eq!(v["violations"].as_u64(), Some(0), "{counters}");

        // A catalogue rebuilt from the tapes alone equals the original.
        let original = svc.catalogue().dump().await.unwrap();
        svc.unmount_all().await.unwrap();
        drop(svc);
        let fresh = match &backend {
            Backend::Sqlite(_) => {
                let d = tempfile::tempdir().unwrap();
                let url = format!("sqlite:{}", d.path().join("rebuilt.db").display());
                (url, Some(d), None)
            }
            Backend::Postgres(_) => {
                let base = postgres_url("rebuild").unwrap();
                let s = PgSchema::create(&base).await;
                (s.url.clone(), None, Some(s))
            }
        };
        let svc2 = service(&fresh.0, lib.path(), capacity).await;
        let reps = svc2.rebuild(&[], &CancelToken::new()).await.unwrap();
        assert!(reps.iter().map(|r| r.objects).sum::<u64>() >= 2 * sp.items.len() as u64);
        let rebuilt = svc2.catalogue().dump().await.unwrap();
        assert_eq!(
            without_volatile(&original),
            without_volatile(&rebuilt),
            "{}: rebuilt catalogue differs",
            backend.name()
        );
    }
}

/// Drop what a rebuild cannot know (mount counts, ids, creation times, dead containers).
fn without_volatile(v: &serde_json::Value) -> serde_json::Value {
    let mut v = v.clone();
    strip(&mut v);
    v
}

fn strip(v: &mut serde_json::Value) {
    match v {
        serde_json::Value::Object(m) => {
            for k in [
                "id",
                "container_id",
                "mount_count",
                "created_unix",
                "created",
                "calibrated",
                "state_changed",
            ] {
                m.remove(k);
            }
            for (_, x) in m.iter_mut() {
                strip(x);
            }
        }
        serde_json::Value::Array(a) => {
            a.retain(|x| x.get("state").and_then(|s| s.as_str()) != Some("dead"));
            for x in a.iter_mut() {
                strip(x);
            }
        }
        _ => {}
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn keys_escaping_the_destination_are_refused() {
    let dir = tempfile::tempdir().unwrap();
    let evil = ["../escape.txt", "/etc/reel-evil", "a/../../x"];
    for backend in backends("keys_escaping_the_destination").await {
        let lib = tempfile::tempdir().unwrap();
        let svc = service(&backend.url(), lib.path(), 1 << 30).await;
        svc.catalogue()
            .ensure_storage_class("one", &["copy1".to_string()])
            .await
            .unwrap();
        // The catalogue refuses such keys (the one key rule, `validate_key`): an archive of
        // them stores nothing under them; a recall of them is refused as well.
        for (i, k) in evil.iter().enumerate() {
            let p = dir.path().join(format!("f{i}"));
            write_random_file(&p, 1000, i as u64);
            let r = svc
                .archive(
                    vec![(k.to_string(), p)],
                    "one",
                    &CancelToken::new(),
                    no_progress(),
                )
                .await;
            assert!(r.is_err(), "{}: {k} was archived", backend.name());
            assert!(
                !matches!(svc.catalogue().object(k).await, Ok(Some(_))),
                "{k}"
            );
        }
        let root = tempfile::tempdir().unwrap();
        let inner = root.path().join("dst");
        std::fs::create_dir_all(&inner).unwrap();
        for k in evil {
            let r = svc
                .recall(
                    vec![RecallRequest {
                        key: k.to_string(),
                        root: inner.clone(),
                    }],
                    &recall_options(svc.session_config(), OrderPolicy::Auto),
                    &CancelToken::new(),
                    no_progress(),
                )
                .await;
            assert!(r.is_err(), "{}: {k} was recalled", backend.name());
        }
        // Nothing was written outside the destination (nor inside).
        let outside: Vec<_> = std::fs::read_dir(root.path())
            .unwrap()
            .map(|e| e.unwrap().file_name())
            .collect();
        assert_eq!(outside, vec![std::ffi::OsString::from("dst")]);
        assert_eq!(std::fs::read_dir(&inner).unwrap().count(), 0);
    }
}

/// The first object on a cartridge is reached from BOT by reading through the label's filemark
/// and the container header, not by a LOCATE (which costs a settle); a filemark in a short gap is
/// a block to step over, not a reason to locate.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn first_object_after_a_mount_is_read_through_not_located() {
    init_tracing();
    let dir = tempfile::tempdir().unwrap();
    let lib = tempfile::tempdir().unwrap();
    let db = tempfile::tempdir().unwrap();
    let url = format!("sqlite:{}", db.path().join("reel.db").display());
    let svc = service(&url, lib.path(), 1 << 30).await;
    svc.catalogue()
        .ensure_storage_class("one", &["copy1".to_string()])
        .await
        .unwrap();
    let p = dir.path().join("first");
    let sum = write_random_file(&p, 3 << 20, 7);
    svc.archive(
        vec![("first".into(), p)],
        "one",
        &CancelToken::new(),
        no_progress(),
    )
    .await
    .unwrap();
    svc.unmount_all().await.unwrap();
    let dst = tempfile::tempdir().unwrap();
    let r = svc
        .recall(
            vec![RecallRequest {
                key: "first".into(),
                root: dst.path().to_path_buf(),
            }],
            &recall_options(svc.session_config(), OrderPolicy::Auto),
            &CancelToken::new(),
            no_progress(),
        )
        .await
        .unwrap();
    assert_eq!(r.objects, 1, "{:?}", r.failed);
    assert_eq!(r.mounts, 1);
    assert_eq!(r.summary.locates, 0, "{:?}", r.summary);
    assert_eq!(hex32(&sha256_file(&dst.path().join("first"))), hex32(&sum));
}
