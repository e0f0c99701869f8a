//! `reel key` through the real binary: keys are created, listed and shown by id and
//! fingerprint only; a paper copy (protected, or plain when asked for by name) imports on
//! another host with its passphrase and gives the same key; a wrong passphrase, a retyped
//! digit, a key file others can read and a bad id are refused with what to do. Nothing but
//! `export-paper --plain` prints key bytes, in hex or base64.

use std::os::unix::fs::PermissionsExt;
use std::path::Path;

use reel_tests::*;

/// The key file's entry for `id`: its key, hex.
fn stored_key(dir: &Path, id: &str) -> String {
    let v: serde_json::Value =
        serde_json::from_slice(&std::fs::read(dir.join("keys.json")).unwrap()).unwrap();
    v["keys"]
        .as_array()
        .unwrap()
        .iter()
        .find(|k| k["id"] == id)
        .and_then(|k| k["key"].as_str())
        .unwrap_or_else(|| panic!("no key {id} in {v}"))
        .to_string()
}

/// The encodings a key could leak in: hex (either case), base64 (standard and URL-safe, with
/// and without padding), and each half of the hex (a key split across lines).
fn encodings(hex_key: &str) -> Vec<String> {
    let bytes = hex::decode(hex_key).unwrap();
    let b64 = base64_encode(&bytes);
    vec![
        hex_key.to_lowercase(),
        hex_key.to_uppercase(),
        b64.clone(),
        b64.trim_end_matches('=').to_string(),
        b64.replace('+', "-").replace('/', "_"),
        hex_key[..32].to_string(),
        hex_key[32..].to_string(),
    ]
}

/// Standard base64, written here so the test needs no encoder of the code under test.
fn base64_encode(bytes: &[u8]) -> String {
    const A: &[u8] = b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
    let mut out = String::new();
    for c in bytes.chunks(3) {
        let n = (u32::from(c[0]) << 16)
            | (u32::from(*c.get(1).unwrap_or(&0)) << 8)
            | u32::from(*c.get(2).unwrap_or(&0));
        for i in 0..4 {
            if i <= c.len() {
                out.push(A[(n >> (18 - 6 * i) & 63) as usize] as char);
            } else {
                out.push('=');
            }
        }
    }
    out
}

/// Run `reel` with and without `--json`; both outputs and stderr, joined.
fn both(dir: &Path, args: &[&str]) -> (i32, String) {
    let (code, v, err) = reel(dir, args);
    let out = std::process::Command::new(binary_path("reel"))
        .arg("--data-dir")
        .arg(dir)
        .args(args)
        .output()
        .unwrap();
    (
        code,
        format!(
            "{v}\n{err}\n{}\n{}",
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        ),
    )
}

fn assert_no_key(text: &str, hex_key: &str, what: &str) {
    for e in encodings(hex_key) {
        assert!(!text.contains(&e), "{what} shows the key ({e}): {text}");
    }
}

#[test]
fn keys_are_created_listed_and_recovered_from_paper_without_leaking() {
    let a = tempfile::tempdir().unwrap();
    let d = a.path();
    let pass = d.join("pass");
    std::fs::write(&pass, "a long passphrase for the vault\n").unwrap();
    let v = reel_ok(
        d,
        &[
            "key",
            "create",
            "site-1",
            "--passphrase-file",
            pass.to_str().unwrap(),
        ],
    );
    assert_eq!(v["id"], "site-1");
    assert_eq!(v["protected"], true);
    let site = stored_key(d, "site-1");
    let mode = std::fs::metadata(d.join("keys.json"))
        .unwrap()
        .permissions()
        .mode();
    assert_eq!(mode & 0o777, 0o600, "{mode:o}");
    reel_ok(d, &["key", "create", "bare"]);
    let bare = stored_key(d, "bare");
    assert_ne!(site, bare);

    // Ids, fingerprints, dates; never a key.
    for args in [
        &["key", "list"][..],
        &["key", "show", "site-1"],
        &["key", "show", "bare"],
        &["key", "export-paper", "site-1"],
    ] {
        let (code, text) = both(d, args);
        assert_eq!(code, 0, "{args:?}: {text}");
        assert_no_key(&text, &site, &format!("{args:?}"));
        assert_no_key(&text, &bare, &format!("{args:?}"));
    }
    let list = reel_ok(d, &["key", "list"]);
    let ids: Vec<&str> = list
        .as_array()
        .unwrap()
        .iter()
        .map(|k| k["id"].as_str().unwrap())
        .collect();
    assert_eq!(ids, ["bare", "site-1"]);

    // A key without a passphrase copy prints only when asked for by name.
    reel_refused(d, &["key", "export-paper", "bare"], "--plain");
    let plain = reel_ok(d, &["key", "export-paper", "bare", "--plain"]);
    assert_eq!(plain["form"], "plain");

    // Another host imports both papers and gets the same keys.
    let b = tempfile::tempdir().unwrap();
    let e = b.path();
    let protected = reel_ok(d, &["key", "export-paper", "site-1"]);
    let paper = e.join("site-1.txt");
    std::fs::write(&paper, protected["paper"].as_str().unwrap()).unwrap();
    reel_refused(
        e,
        &["key", "import", paper.to_str().unwrap()],
        "--passphrase-file",
    );
    let wrong = e.join("wrong");
    std::fs::write(&wrong, "not the passphrase at all").unwrap();
    reel_refused(
        e,
        &[
            "key",
            "import",
            paper.to_str().unwrap(),
            "--passphrase-file",
            wrong.to_str().unwrap(),
        ],
        "passphrase does not open",
    );
    let v = reel_ok(
        e,
        &[
            "key",
            "import",
            paper.to_str().unwrap(),
            "--passphrase-file",
            pass.to_str().unwrap(),
        ],
    );
    assert_eq!(v["fingerprint"], list[1]["fingerprint"]);
    assert_eq!(stored_key(e, "site-1"), site);
    // Imported twice: refused, the key stays.
    reel_refused(
        e,
        &[
            "key",
            "import",
            paper.to_str().unwrap(),
            "--passphrase-file",
            pass.to_str().unwrap(),
        ],
        "already exists",
    );
    let bare_paper = e.join("bare.txt");
    std::fs::write(&bare_paper, plain["paper"].as_str().unwrap()).unwrap();
    // One digit retyped wrong: the line is named.
    let text = plain["paper"].as_str().unwrap();
    let line = text.lines().find(|l| l.starts_with("02:")).unwrap();
    let digit = line.as_bytes()[4];
    let typo = format!(
        "{}{}{}",
        &line[..4],
        if digit == b'0' { '1' } else { '0' },
        &line[5..]
    );
    let bent = e.join("bent.txt");
    std::fs::write(&bent, text.replace(line, &typo)).unwrap();
    reel_refused(e, &["key", "import", bent.to_str().unwrap()], "line 2");
    reel_ok(e, &["key", "import", bare_paper.to_str().unwrap()]);
    assert_eq!(stored_key(e, "bare"), bare);

    // A key file others can read is refused, by every command, with what to do.
    std::fs::set_permissions(d.join("keys.json"), std::fs::Permissions::from_mode(0o644)).unwrap();
    for args in [
        &["key", "list"][..],
        &["key", "show", "site-1"],
        &["key", "create", "another"],
        &["key", "export-paper", "site-1"],
    ] {
        reel_refused(d, args, "chmod 600");
    }
    std::fs::set_permissions(d.join("keys.json"), std::fs::Permissions::from_mode(0o600)).unwrap();
    // A key file that is a link to another is refused.
    let c = tempfile::tempdir().unwrap();
    std::os::unix::fs::symlink(d.join("keys.json"), c.path().join("keys.json")).unwrap();
    reel_refused(c.path(), &["key", "list"], "symbolic link");

    // Passphrases that are too short, padded, or binary are refused before any key is made.
    let padded = d.join("padded");
    std::fs::write(&padded, "  a long passphrase, padded  \n").unwrap();
    let short = d.join("short");
    std::fs::write(&short, "short\n").unwrap();
    for (file, needle) in [
        (padded.to_str().unwrap(), "spaces"),
        (short.to_str().unwrap(), "too short"),
        ("/dev/zero", "control characters"),
    ] {
        reel_refused(
            d,
            &["key", "create", "never", "--passphrase-file", file],
            needle,
        );
    }
    reel_refused(d, &["key", "show", "never"], "no key never");
    // A paper of more than a MiB is not read through.
    let big = d.join("big.txt");
    std::fs::write(&big, vec![b'0'; (1 << 20) + 10]).unwrap();
    reel_refused(
        d,
        &["key", "import", big.to_str().unwrap()],
        "more than 1 MiB",
    );

    // Ids that could be paths or options are refused; a missing key names the commands.
    for bad in ["../x", ".k", "k/1", "k 1"] {
        reel_refused(d, &["key", "create", bad], "is not valid");
    }
    reel_refused(d, &["key", "show", "nope"], "reel key create nope");
}
