//! Bad input is refused at submission, through the real `reel` binary, on SQLite and on
//! PostgreSQL: each refusal exits non-zero naming the value, nothing is queued, and a worker
//! started afterwards archives and recalls normally (the library stays usable).

use std::os::unix::ffi::OsStrExt;
use std::path::Path;

use reel_tests::*;

/// `reel ARGS…` must fail, and its error must contain every one of `needles`.
fn refused(dir: &Path, args: &[&str], needles: &[&str]) {
    let (code, v, err) = reel(dir, args);
    assert_ne!(code, 0, "{args:?} was accepted: {v}");
    for n in needles {
        assert!(
            err.contains(n),
            "{args:?}: the error does not name {n:?}: {err}"
        );
    }
}

fn mkfifo(p: &Path) {
    let st = std::process::Command::new("mkfifo")
        .arg(p)
        .status()
        .expect("mkfifo");
    assert!(st.success(), "mkfifo {}", p.display());
}

fn wait_ok(dir: &Path, v: &serde_json::Value, what: &str) {
    let id = job_id(v);
    let (code, v, err) = reel(dir, &["jobs", "wait", &id, "--timeout", "120"]);
    assert_eq!(code, 0, "{what}: {v} {err}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn bad_input_is_refused_at_submission_and_the_library_stays_usable() {
    for store in stores("cli_bad_input").await {
        let dir = tempfile::tempdir().unwrap();
        let d = dir.path();
        let lib = tempfile::tempdir().unwrap();
        write_config(d, &store.url(), lib.path(), 1, "");
        let src = tempfile::tempdir().unwrap();
        let s = |rel: &str| src.path().join(rel);
        let p = |rel: &str| s(rel).to_str().unwrap().to_string();

        // Archive.
        write_random_file(&s("a/x"), 10, 1);
        write_random_file(&s("b/x"), 20, 2);
        refused(
            d,
            &["archive", &p("a/x"), &p("a/x")],
            &[&p("a/x"), "listed twice"],
        );
        refused(
            d,
            &["archive", &p("a/x"), &p("b/x"), "--key-prefix", "k/"],
            &[&p("a/x"), &p("b/x"), "`k/x`"],
        );
        mkfifo(&s("fifo"));
        refused(d, &["archive", &p("fifo")], &[&p("fifo"), "FIFO"]);
        refused(
            d,
            &["archive", "/dev/zero"],
            &["/dev/zero", "character device"],
        );
        refused(
            d,
            &["archive", &p("missing.bin")],
            &[&p("missing.bin"), "does not exist"],
        );
        refused(
            d,
            &["archive", &p("a/x"), "--key-prefix", "../up/"],
            &["key_prefix", "../up/", "`..` segment"],
        );
        refused(
            d,
            &["archive", &p("a/x"), "--key-prefix", "/abs/"],
            &["/abs/"],
        );
        refused(d, &["archive", &p("a/x"), "--class", "gold"], &["gold"]);
        // Inside trees.
        let t2 = tempfile::tempdir().unwrap();
        write_random_file(&t2.path().join("ok.bin"), 5, 3);
        std::fs::create_dir(t2.path().join("dev")).unwrap();
        mkfifo(&t2.path().join("dev/pipe"));
        let t2s = t2.path().to_str().unwrap();
        refused(d, &["archive", t2s], &["dev/pipe", "FIFO"]);
        let t3 = tempfile::tempdir().unwrap();
        let odd = t3.path().join(std::ffi::OsStr::from_bytes(b"caf\xe9.bin"));
        std::fs::write(&odd, b"x").unwrap();
        refused(
            d,
            &["archive", t3.path().to_str().unwrap()],
            &["not valid UTF-8"],
        );
        let empty = tempfile::tempdir().unwrap();
        refused(
            d,
            &["archive", empty.path().to_str().unwrap()],
            &["holds no regular files"],
        );

        // Recall (the catalogue is empty).
        let out = tempfile::tempdir().unwrap();
        let to = out.path().to_str().unwrap();
        refused(d, &["recall", "--to", to], &["at least one key"]);
        refused(d, &["recall", "", "--to", to], &["`keys`", "empty"]);
        let long = "k".repeat(4097);
        refused(d, &["recall", &long, "--to", to], &["4097 bytes long"]);
        refused(
            d,
            &["recall", "a/../b", "--to", to],
            &["a/../b", "`..` segment"],
        );
        refused(d, &["recall", "./a", "--to", to], &["./a", "`.` segment"]);
        refused(
            d,
            &["recall", "a//b", "--to", to],
            &["a//b", "empty segment"],
        );
        refused(
            d,
            &["recall", "dup", "dup", "--to", to],
            &["`dup`", "listed twice"],
        );
        refused(
            d,
            &["recall", "no/such/key", "other/key", "--to", to],
            &["`no/such/key`", "`other/key`", "not in the catalogue"],
        );
        refused(
            d,
            &["recall", "--prefix", "nothing/", "--to", to],
            &["`nothing/`", "prefix"],
        );

        // Verify and intake.
        refused(d, &["verify", "--container=-1"], &["-1", "container"]);
        refused(d, &["verify", "--container", "424242"], &["424242"]);
        refused(d, &["verify", "--cartridge", "NOPE01"], &["NOPE01"]);
        refused(
            d,
            &["intake", "A00001", "A00001"],
            &["A00001", "listed twice"],
        );
        refused(d, &["intake", ""], &["barcodes"]);
        refused(d, &["intake", "--all-new", "--pool", " "], &["pool"]);

        let (code, v, err) = reel(d, &["jobs", "list"]);
        assert_eq!(code, 0, "{err}");
        assert_eq!(
            v,
            serde_json::json!([]),
            "{}: something was queued",
            store.name()
        );

        // The library stays usable: intake, archive a tree and recall it byte for byte.
        let worker = Worker::start(d, 1);
        let (code, v, err) = reel(d, &["intake", "--all-new"]);
        assert_eq!(code, 0, "{v} {err}");
        wait_ok(d, &v, "intake");
        let good = tempfile::tempdir().unwrap();
        let mut sums = Vec::new();
        for (i, rel) in ["one.bin", "d/two.bin", "d/e/three.bin"].iter().enumerate() {
            sums.push((
                *rel,
                write_random_file(&good.path().join(rel), 1000 + i as u64, i as u64),
            ));
        }
        let (code, v, err) = reel(
            d,
            &[
                "archive",
                good.path().to_str().unwrap(),
                "--key-prefix",
                "ok/",
            ],
        );
        assert_eq!(code, 0, "{}: archive: {v} {err}", store.name());
        wait_ok(d, &v, "archive");
        let (code, v, err) = reel(d, &["recall", "--prefix", "ok/", "--to", to]);
        assert_eq!(code, 0, "{}: recall: {v} {err}", store.name());
        wait_ok(d, &v, "recall");
        for (rel, sum) in &sums {
            assert_eq!(sha256_file(&out.path().join("ok").join(rel)), *sum, "{rel}");
        }
        // A recall of an archived key and a verify of its cartridge are accepted now.
        let (code, v, err) = reel(d, &["catalog", "find", "ok/one.bin"]);
        assert_eq!(code, 0, "{v} {err}");
        let barcode = v["copies"][0]["barcode"].as_str().unwrap().to_string();
        let (code, v, err) = reel(d, &["verify", "--cartridge", &barcode]);
        assert_eq!(code, 0, "{v} {err}");
        wait_ok(d, &v, "verify");
        assert_eq!(
            worker.stop(),
            0,
            "{}: worker did not stop cleanly",
            store.name()
        );
    }
}
