//! Vaulting through the `reel` binary and a running `reel worker` with the simulator (shared
//! mode, so the operator's hands reach the library through its mailboxes), on SQLite and
//! PostgreSQL: `reel cartridge export` moves cartridges to the mail slots (as many as there
//! are; the rest wait for one to be emptied), a recall only an exported cartridge serves waits
//! saying where the cartridge is (`jobs show`, `queue ls`, `cartridge wanted`), and `reel
//! cartridge import` takes it back with its state, after which the recall completes with the
//! right bytes. Bad requests are refused with what to do.

use std::path::Path;
use std::time::{Duration, Instant};

use reel_tests::*;

const BOUND: Duration = Duration::from_secs(90);

fn run_job(dir: &Path, args: &[&str]) -> serde_json::Value {
    let id = job_id(&reel_ok(dir, args));
    let (code, v, err) = reel(dir, &["jobs", "wait", &id, "--timeout", "120"]);
    assert_eq!(code, 0, "{args:?}: {v} {err}");
    v
}

fn vaulted(dir: &Path) -> Vec<serde_json::Value> {
    reel_ok(dir, &["cartridge", "vaulted"])["vaulted"]
        .as_array()
        .cloned()
        .unwrap_or_default()
}

/// Wait until `n` exported cartridges have left the storage slots.
fn left(dir: &Path, n: usize) -> Vec<serde_json::Value> {
    let t0 = Instant::now();
    loop {
        let v = vaulted(dir);
        if v.iter().filter(|e| e["left"] == true).count() == n {
            return v;
        }
        assert!(t0.elapsed() < BOUND, "{n} cartridges did not leave: {v:?}");
        std::thread::sleep(Duration::from_millis(200));
    }
}

/// The label-check job an import result names for `barcode`.
fn label_check_job(result: &str, barcode: &str) -> String {
    let line = result
        .lines()
        .find(|l| l.starts_with(&format!("{barcode}: its label is checked")))
        .unwrap_or_else(|| panic!("no label check for {barcode}: {result}"));
    line.split("by job ")
        .nth(1)
        .and_then(|r| r.split_whitespace().next())
        .unwrap()
        .to_string()
}

fn wait_for(what: &str, mut f: impl FnMut() -> Option<String>) -> String {
    let t0 = Instant::now();
    loop {
        if let Some(s) = f() {
            return s;
        }
        assert!(t0.elapsed() < BOUND, "timed out waiting for {what}");
        std::thread::sleep(Duration::from_millis(200));
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn cartridges_go_offsite_and_come_back_and_recalls_wait_for_them() {
    for store in stores("cli_vault").await {
        let dir = tempfile::tempdir().unwrap();
        let lib = tempfile::tempdir().unwrap();
        write_shared_config(dir.path(), &store.url(), lib.path(), 2, "sim.cartridges=10");
        let d = dir.path();
        let _w = Worker::start(d, 1);
        run_job(d, &["intake", "RL0001L9", "RL0002L9", "--pool", "p1"]);
        let src = tempfile::tempdir().unwrap();
        let mut sums = Vec::new();
        for i in 0..3u64 {
            sums.push(write_random_file(
                &src.path().join(format!("f{i}.bin")),
                200_000,
                i,
            ));
        }
        run_job(
            d,
            &[
                "archive",
                src.path().to_str().unwrap(),
                "--key-prefix",
                "v/",
            ],
        );
        let written: Vec<String> = reel_ok(d, &["cartridge", "ls", "--pool", "p1"])["cartridges"]
            .as_array()
            .unwrap()
            .iter()
            .filter(|c| c["used_bytes"].as_u64().unwrap_or(0) > 0)
            .map(|c| c["barcode"].as_str().unwrap().to_string())
            .collect();
        assert_eq!(written.len(), 1, "{written:?}");
        let b = written[0].as_str();

        // Careless and hostile requests: refused, nothing exported.
        reel_refused(
            d,
            &["cartridge", "export", "NOPE0001", "--to", "v"],
            "no cartridge",
        );
        reel_refused(
            d,
            &["cartridge", "export", b, b, "--to", "v"],
            "given twice",
        );
        reel_refused(
            d,
            &["cartridge", "export", b, "--to", "  "],
            "location is empty",
        );
        reel_refused(d, &["cartridge", "export", b, "--to", "a\u{7}b"], "control");
        reel_refused(
            d,
            &["cartridge", "export", "a b", "--to", "v"],
            "not a barcode",
        );
        reel_refused(
            d,
            &["cartridge", "state", b, "exported", "--reason", "x"],
            "vaulting",
        );
        reel_refused(d, &["cartridge", "import", "A1", "A1"], "given twice");
        assert!(vaulted(d).is_empty());

        // Out it goes: exported at once, then in a mail slot.
        reel_ok(d, &["cartridge", "export", b, "--to", "vault B"]);
        reel_refused(
            d,
            &["cartridge", "export", b, "--to", "elsewhere"],
            "already exported",
        );
        reel_refused(
            d,
            &["cartridge", "state", b, "active", "--reason", "x"],
            "exported",
        );
        let v = left(d, 1);
        assert_eq!(v[0]["location"], "vault B", "{v:?}");
        assert_eq!(v[0]["state_before"], "active", "{v:?}");
        let shown = wait_for("the cartridge in a mail slot", || {
            let c = reel_ok(d, &["cartridge", "show", b]);
            (c["location"] == "import_export 0").then(|| c.to_string())
        });
        assert!(shown.contains("\"state\":\"exported\""), "{shown}");

        // A recall only it serves waits, saying where it is.
        let out = tempfile::tempdir().unwrap();
        let recall = job_id(&reel_ok(
            d,
            &[
                "recall",
                "--prefix",
                "v/",
                "--to",
                out.path().to_str().unwrap(),
            ],
        ));
        let waits = wait_for("the recall to say why it waits", || {
            let j = show_job(d, &recall);
            let s = j["waits"].to_string();
            s.contains(&format!("cartridge {b} is at vault B"))
                .then_some(s)
        });
        assert!(waits.contains("cartridge_out"), "{waits}");
        let (_, text, _) = reel_text(d, &["jobs", "show", &recall]);
        assert!(
            text.contains(&format!("cartridge {b} is at vault B")),
            "{text}"
        );
        let q = reel_ok(d, &["queue", "ls"]).to_string();
        assert!(q.contains("cartridge_out"), "{q}");
        let w = reel_ok(d, &["cartridge", "wanted"]);
        let wanted = w["wanted"].as_array().unwrap();
        assert_eq!(wanted.len(), 1, "{w}");
        assert_eq!(wanted[0]["barcode"], b, "{w}");
        assert_eq!(wanted[0]["files"], 3, "{w}");
        assert_eq!(wanted[0]["jobs"][0], recall.as_str(), "{w}");
        let (_, text, _) = reel_text(d, &["cartridge", "wanted"]);
        assert!(text.contains("vault B"), "{text}");

        // The operator takes it out of the mail slot; an import then finds nothing, and the
        // recall goes on waiting (no attempt is spent on it).
        sim_mail(lib.path(), 0, 1, r#"{"op":"ie_remove","ie":0}"#);
        let r = reel_ok(d, &["cartridge", "import", "--timeout", "60"]);
        assert_eq!(r["done"], true, "{r}");
        assert!(
            r["import"]["result"]
                .as_str()
                .unwrap()
                .contains("the mail slots hold no cartridge"),
            "{r}"
        );
        std::thread::sleep(Duration::from_secs(2));
        let j = show_job(d, &recall);
        assert_eq!(j["state"], "running", "{j}");
        assert_eq!(j["failures"].as_array().map_or(0, Vec::len), 0, "{j}");

        // Back from the vault, with a stranger: both are taken in, the stranger as new.
        sim_mail(
            lib.path(),
            0,
            2,
            &format!(r#"{{"op":"ie_insert","ie":2,"barcode":"{b}"}}"#),
        );
        sim_mail(
            lib.path(),
            0,
            3,
            r#"{"op":"ie_insert","ie":3,"barcode":"ZZ0001L9"}"#,
        );
        let r = reel_ok(d, &["cartridge", "import", "--timeout", "60"]);
        let result = r["import"]["result"].as_str().unwrap().to_string();
        assert!(
            result.contains(&format!("{b}: taken in from mail slot 2")),
            "{result}"
        );
        assert!(
            result.contains("back from vault B; active again"),
            "{result}"
        );
        assert!(
            result.contains("ZZ0001L9: taken in from mail slot 3"),
            "{result}"
        );
        assert!(result.contains("new to reel"), "{result}");
        assert!(vaulted(d).is_empty());
        // The cartridge back from the vault has its label checked: it is the one reel knows.
        let check = label_check_job(&result, b);
        let (code, v, err) = reel(d, &["jobs", "wait", &check, "--timeout", "120"]);
        assert_eq!(code, 0, "{v} {err}");
        assert_eq!(v[0]["result"]["labels"][0]["label"], "matches", "{v}");
        assert_eq!(v[0]["result"]["labels"][0]["barcode"], b, "{v}");
        let c = reel_ok(d, &["cartridge", "show", b]);
        assert_eq!(c["label_unchecked_unix"], 0, "the check cleared it: {c}");
        assert!(
            !result.contains("ZZ0001L9: its label"),
            "a cartridge new to reel has no label to check: {result}"
        );
        let (code, v, err) = reel(d, &["jobs", "wait", &recall, "--timeout", "120"]);
        assert_eq!(code, 0, "{v} {err}");
        for (i, sum) in sums.iter().enumerate() {
            assert_eq!(
                &sha256_file(&out.path().join(format!("v/f{i}.bin"))),
                sum,
                "f{i}"
            );
        }
        let c = reel_ok(d, &["cartridge", "show", "ZZ0001L9"]);
        assert_eq!(c["state"], "new", "{c}");
        // A label check of a cartridge reel does not know is refused; one of a cartridge it
        // never labelled fails at planning with nothing compared and nothing marked.
        reel_refused(
            d,
            &["verify", "--label", "NOPE01L9"],
            "no cartridge `NOPE01L9`",
        );
        let j = job_id(&reel_ok(d, &["verify", "--label", "ZZ0001L9"]));
        let (code, _, _) = reel(d, &["jobs", "wait", &j, "--timeout", "60"]);
        assert_ne!(code, 0);
        let j = show_job(d, &j);
        assert!(
            j.to_string().contains("has no label in the catalogue"),
            "{j}"
        );
        let c = reel_ok(d, &["cartridge", "show", "ZZ0001L9"]);
        assert_eq!(c["state"], "new", "{c}");
        let imports = reel_ok(d, &["cartridge", "imports"]);
        assert_eq!(imports["imports"].as_array().unwrap().len(), 2, "{imports}");

        // More than there are mail slots (4): four go out, the fifth waits for a free one.
        let five = ["RL0003L9", "RL0004L9", "RL0005L9", "RL0006L9", "RL0007L9"];
        let mut args = vec!["cartridge", "export"];
        args.extend(five);
        args.extend(["--to", "shelf 9"]);
        reel_ok(d, &args);
        let v = left(d, 4);
        let waiting: Vec<&serde_json::Value> = v.iter().filter(|e| e["left"] == false).collect();
        assert_eq!(waiting.len(), 1, "{v:?}");
        let (_, text, _) = reel_text(d, &["cartridge", "vaulted"]);
        assert!(text.contains("waiting for a free mail slot"), "{text}");
        sim_mail(lib.path(), 0, 4, r#"{"op":"ie_remove","ie":1}"#);
        left(d, 5);
        // Named imports: one in a mail slot comes back; one not in the library is reported.
        let back = v
            .iter()
            .find(|e| e["left"] == true)
            .unwrap()
            .get("barcode")
            .unwrap()
            .as_str()
            .unwrap()
            .to_string();
        let r = reel_ok(
            d,
            &["cartridge", "import", &back, "RL0010L9", "--timeout", "60"],
        );
        let result = r["import"]["result"].as_str().unwrap().to_string();
        assert!(result.contains(&format!("{back}: taken in")), "{result}");
        assert!(result.contains("new again"), "{result}");
        assert!(result.contains("RL0010L9: already in slot"), "{result}");
        assert_eq!(vaulted(d).len(), 4);
        assert!(
            !result.contains("its label is checked"),
            "a cartridge never labelled has no label to check: {result}"
        );

        // Another cartridge wearing its barcode comes back (the simulator's medium of `b` is
        // replaced by a blank one): the label check marks it broken and says why.
        reel_ok(d, &["cartridge", "export", b, "--to", "vault C"]);
        left(d, 5);
        let ie = reel_ok(d, &["library", "inventory"])
            .as_array()
            .unwrap()
            .iter()
            .find(|e| e["barcode"] == b)
            .map(|e| e["index"].as_u64().unwrap())
            .unwrap();
        sim_mail(
            lib.path(),
            0,
            5,
            &format!(r#"{{"op":"ie_remove","ie":{ie}}}"#),
        );
        std::fs::remove_dir_all(lib.path().join(b)).unwrap();
        sim_mail(
            lib.path(),
            0,
            6,
            &format!(r#"{{"op":"ie_insert","ie":{ie},"barcode":"{b}"}}"#),
        );
        let r = reel_ok(d, &["cartridge", "import", b, "--timeout", "60"]);
        let result = r["import"]["result"].as_str().unwrap().to_string();
        assert!(result.contains("back from vault C"), "{result}");
        let check = label_check_job(&result, b);
        let (code, v, _) = reel(d, &["jobs", "wait", &check, "--timeout", "120"]);
        assert_ne!(code, 0, "the check of a blank impostor passed: {v}");
        let c = reel_ok(d, &["cartridge", "show", b]);
        assert_eq!(c["state"], "broken", "{c}");
        assert!(
            c["state_reason"].as_str().unwrap().contains("it is blank"),
            "{c}"
        );
        let j = show_job(d, &check);
        assert!(j.to_string().contains("marked broken"), "{j}");
    }
}
