//! Cleaning through the `reel` binary and a running `reel worker` with the simulator (shared
//! mode: faults and an operator's hands reach the library through its mailboxes), on SQLite
//! and PostgreSQL. A cleaning cartridge is never taken in as data; `reel drive clean` cleans a
//! drive with it; a drive that asks for cleaning (TapeAlert 20 at an unmount) is cleaned
//! before its next mount without anyone asking; uses are counted, and a used-up cartridge is
//! reported and not loaded again; one brought in through a mail slot is taken in as cleaning
//! media. The library stays usable throughout: what was archived is recalled intact.

use std::path::Path;
use std::time::{Duration, Instant};

use reel_tests::*;

const BOUND: Duration = Duration::from_secs(90);

fn job(dir: &Path, args: &[&str]) -> (i32, serde_json::Value) {
    let id = job_id(&reel_ok(dir, args));
    let (code, v, _) = reel(dir, &["jobs", "wait", &id, "--timeout", "120"]);
    (code, v)
}

fn cleaning(dir: &Path) -> Vec<serde_json::Value> {
    reel_ok(dir, &["cartridge", "cleaning"])["cleaning_cartridges"]
        .as_array()
        .cloned()
        .unwrap_or_default()
}

fn uses(dir: &Path, barcode: &str) -> u64 {
    cleaning(dir)
        .iter()
        .find(|c| c["barcode"] == barcode)
        .and_then(|c| c["uses"].as_u64())
        .unwrap_or(0)
}

fn cleanings_of(dir: &Path, drive: &str) -> Vec<serde_json::Value> {
    reel_ok(dir, &["drive", "show", drive])["cleanings"]
        .as_array()
        .cloned()
        .unwrap_or_default()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn drives_are_cleaned_on_request_and_when_they_ask_and_uses_are_counted() {
    for store in stores("cli_cleaning").await {
        let dir = tempfile::tempdir().unwrap();
        let lib = tempfile::tempdir().unwrap();
        write_shared_config(
            dir.path(),
            &store.url(),
            lib.path(),
            1,
            "sim.cartridges=4\\nsim.cleaning_cartridges=1\\nsim.cleaning_uses=2",
        );
        let d = dir.path();
        let _w = Worker::start(d, 1);
        let t0 = Instant::now();
        let drive = loop {
            let v = reel_ok(d, &["drive", "ls"]);
            if let Some(n) = v["drives"][0]["drive"].as_str() {
                break n.to_string();
            }
            assert!(t0.elapsed() < BOUND, "{v}");
            std::thread::sleep(Duration::from_millis(200));
        };
        // Seen as cleaning media at the worker's first inventory, never as data.
        let c = cleaning(d);
        assert_eq!(c.len(), 1, "{c:?}");
        assert_eq!(
            (c[0]["barcode"].as_str(), c[0]["uses"].as_u64()),
            (Some("CLN001L1"), Some(0))
        );
        let (code, v) = job(d, &["intake", "CLN001L1", "--pool", "p1"]);
        assert_ne!(code, 0, "{v}");
        assert!(v.to_string().contains("is a cleaning cartridge"), "{v}");
        let (code, v) = job(d, &["intake", "--all-new", "--pool", "p1"]);
        assert_eq!(code, 0, "{v}");
        let all = reel_ok(d, &["cartridge", "ls"]).to_string();
        assert!(!all.contains("CLN001L1"), "{all}");
        assert!(all.contains("RL0001L9"), "{all}");

        // On request.
        let v = reel_ok(d, &["drive", "clean", &drive, "--timeout", "60"]);
        assert_eq!(v["done"], true, "{v}");
        assert!(
            v["clean"]["result"]
                .as_str()
                .unwrap()
                .contains("cleaned with CLN001L1"),
            "{v}"
        );
        assert_eq!(uses(d, "CLN001L1"), 1);
        assert_eq!(cleanings_of(d, &drive).len(), 1);

        // The drive asks (TapeAlert 20 from the next command on): archive something, take the
        // drive down (it unloads, reports its flags) and it is cleaned without anyone asking.
        sim_mail(
            lib.path(),
            0,
            1,
            r#"{"op":"fault","kind":"cleaning_required","drive":0}"#,
        );
        let src = tempfile::tempdir().unwrap();
        let sum = write_random_file(&src.path().join("a.bin"), 300_000, 7);
        let (code, v) = job(
            d,
            &[
                "archive",
                src.path().to_str().unwrap(),
                "--key-prefix",
                "c/",
            ],
        );
        assert_eq!(code, 0, "{v}");
        reel_ok(d, &["drive", "down", &drive, "--reason", "unload it"]);
        let t0 = Instant::now();
        while cleanings_of(d, &drive).len() < 2 {
            assert!(t0.elapsed() < BOUND, "the drive was not cleaned by itself");
            std::thread::sleep(Duration::from_millis(200));
        }
        assert_eq!(uses(d, "CLN001L1"), 2);
        reel_ok(d, &["drive", "up", &drive]);

        // Used up (two uses): the drive reports it, reel records it and loads it no more.
        let v = reel_ok(d, &["drive", "clean", &drive, "--timeout", "60"]);
        let said = v["clean"]["result"].as_str().unwrap().to_string();
        assert!(
            said.contains("NOT cleaned") && said.contains("used up"),
            "{v}"
        );
        let c = cleaning(d);
        assert!(c[0]["expired_unix"].as_i64().unwrap() > 0, "{c:?}");
        let (_, text, _) = reel_text(d, &["cartridge", "cleaning"]);
        assert!(text.contains("USED UP"), "{text}");
        let v = reel_ok(d, &["drive", "clean", &drive, "--timeout", "60"]);
        assert!(
            v["clean"]["result"]
                .as_str()
                .unwrap()
                .contains("no usable cleaning cartridge"),
            "{v}"
        );

        // A new one through a mail slot is taken in as cleaning media, and used.
        sim_mail(
            lib.path(),
            0,
            2,
            r#"{"op":"ie_insert","ie":0,"barcode":"CLN002L1"}"#,
        );
        let v = reel_ok(d, &["cartridge", "import", "--timeout", "60"]);
        assert!(
            v["import"]["result"]
                .as_str()
                .unwrap()
                .contains("CLN002L1: taken in from mail slot 0 to slot")
                && v.to_string().contains("a cleaning cartridge"),
            "{v}"
        );
        let v = reel_ok(d, &["drive", "clean", &drive, "--timeout", "60"]);
        assert!(
            v["clean"]["result"]
                .as_str()
                .unwrap()
                .contains("cleaned with CLN002L1"),
            "{v}"
        );
        assert_eq!(uses(d, "CLN002L1"), 1);

        // The library is as usable as before: the archive comes back intact.
        let out = tempfile::tempdir().unwrap();
        let (code, v) = job(
            d,
            &["recall", "c/a.bin", "--to", out.path().to_str().unwrap()],
        );
        assert_eq!(code, 0, "{v}");
        assert_eq!(sha256_file(&out.path().join("c/a.bin")), sum);
        // Malformed and unknown drives are refused.
        let (code, _, err) = reel(d, &["drive", "clean", "nope", "--timeout", "1"]);
        assert_ne!(code, 0);
        assert!(!err.is_empty());
    }
}
