//! Tests of the submission checks: each refusal names the field and the value.

use std::os::unix::ffi::OsStrExt;
use std::os::unix::fs::MetadataExt;
use std::path::{Path, PathBuf};

use super::*;
use crate::config::LoadedConfig;
use reel_engine::format::ObjectKind;

fn files(paths: &[&Path], prefix: &str) -> ArchiveJob {
    ArchiveJob {
        source: ArchiveSource::Files(paths.iter().map(|p| p.to_path_buf()).collect()),
        key_prefix: prefix.into(),
        storage_class: "default".into(),
        confine: None,
    }
}

fn tree(root: &Path, prefix: &str) -> ArchiveJob {
    ArchiveJob {
        source: ArchiveSource::Tree(root.to_path_buf()),
        key_prefix: prefix.into(),
        storage_class: "default".into(),
        confine: None,
    }
}

fn refused(job: &ArchiveJob) -> String {
    match archive_entries(job) {
        Ok(e) => panic!("accepted: {e:?}"),
        Err(e) => e.to_string(),
    }
}

fn write(p: &Path, data: &[u8]) {
    if let Some(d) = p.parent() {
        std::fs::create_dir_all(d).unwrap();
    }
    std::fs::write(p, data).unwrap();
}

fn mkfifo(p: &Path) {
    let st = std::process::Command::new("mkfifo")
        .arg(p)
        .status()
        .unwrap();
    assert!(st.success(), "mkfifo {}", p.display());
}

#[test]
fn tree_keys_are_prefix_and_relative_path_with_lstat_times() {
    let d = tempfile::tempdir().unwrap();
    write(&d.path().join("b/c.txt"), b"abc");
    write(&d.path().join("a.txt"), b"a");
    let got = archive_entries(&tree(d.path(), "backups/")).unwrap();
    let keys: Vec<&str> = got.iter().map(|e| e.key.as_str()).collect();
    assert_eq!(keys, ["backups/a.txt", "backups/b/c.txt"]);
    assert_eq!(got[1].path, d.path().join("b/c.txt"));
    assert_eq!(got[1].size, 3);
    let m = std::fs::symlink_metadata(d.path().join("b/c.txt")).unwrap();
    assert_eq!(got[1].mtime_ns, m.mtime() * 1_000_000_000 + m.mtime_nsec());
    assert_eq!(got[1].ctime_ns, m.ctime() * 1_000_000_000 + m.ctime_nsec());
    assert!(got[1].mtime_ns > 0 && got[1].ctime_ns > 0);
    // No prefix: the bare relative path.
    let got = archive_entries(&tree(d.path(), "")).unwrap();
    assert_eq!(got[1].key, "b/c.txt");
    // Files: the prefix and the file name, in the order listed.
    let got = archive_entries(&files(
        &[&d.path().join("b/c.txt"), &d.path().join("a.txt")],
        "p-",
    ))
    .unwrap();
    let keys: Vec<&str> = got.iter().map(|e| e.key.as_str()).collect();
    assert_eq!(keys, ["p-c.txt", "p-a.txt"]);
}

#[test]
fn a_path_listed_twice_or_two_paths_on_one_key_are_refused() {
    let d = tempfile::tempdir().unwrap();
    let (ax, bx) = (d.path().join("a/x"), d.path().join("b/x"));
    write(&ax, b"1");
    write(&bx, b"2");
    let e = refused(&files(&[&ax, &ax], ""));
    assert!(
        e.contains("listed twice") && e.contains(&*ax.to_string_lossy()),
        "{e}"
    );
    let e = refused(&files(&[&ax, &bx], "k/"));
    assert!(
        e.contains(&*ax.to_string_lossy())
            && e.contains(&*bx.to_string_lossy())
            && e.contains("`k/x`"),
        "{e}"
    );
}

#[test]
fn special_files_are_refused_by_type_and_never_opened() {
    let d = tempfile::tempdir().unwrap();
    let fifo = d.path().join("pipe");
    mkfifo(&fifo);
    // Opening a FIFO without a writer would block: the check must not open it.
    let e = refused(&files(&[&fifo], ""));
    assert!(
        e.contains("FIFO") && e.contains(&*fifo.to_string_lossy()),
        "{e}"
    );
    let e = refused(&files(&[Path::new("/dev/zero")], ""));
    assert!(
        e.contains("character device") && e.contains("/dev/zero"),
        "{e}"
    );
    let sock = d.path().join("sock");
    let _l = std::os::unix::net::UnixListener::bind(&sock).unwrap();
    let e = refused(&files(&[&sock], ""));
    assert!(e.contains("socket"), "{e}");
    // Inside a tree too.
    let t = tempfile::tempdir().unwrap();
    write(&t.path().join("ok.txt"), b"x");
    let inner = t.path().join("sub/pipe");
    std::fs::create_dir_all(inner.parent().unwrap()).unwrap();
    mkfifo(&inner);
    let e = refused(&tree(t.path(), ""));
    assert!(
        e.contains("FIFO") && e.contains(&*inner.to_string_lossy()),
        "{e}"
    );
}

#[test]
fn symlinks_are_archived_as_links_given_or_inside_a_tree() {
    let d = tempfile::tempdir().unwrap();
    let target = d.path().join("target.txt");
    write(&target, b"t");
    let link = d.path().join("link");
    std::os::unix::fs::symlink(&target, &link).unwrap();
    let target_len = target.as_os_str().len() as u64;
    let got = archive_entries(&files(&[&link], "")).unwrap();
    assert_eq!(got.len(), 1);
    assert_eq!(got[0].kind, ObjectKind::Symlink);
    assert_eq!(got[0].key, "link");
    assert_eq!(
        got[0].size, target_len,
        "a link's size is its target's length"
    );
    // Inside a tree: an entry of its own, never followed (the target is listed once, as the
    // file it is).
    let got = archive_entries(&tree(d.path(), "")).unwrap();
    let kinds: Vec<(&str, ObjectKind)> = got.iter().map(|e| (e.key.as_str(), e.kind)).collect();
    assert_eq!(
        kinds,
        [
            ("link", ObjectKind::Symlink),
            ("target.txt", ObjectKind::File)
        ]
    );
    // A link to a directory inside a tree is a link, not a directory to walk.
    let sub = tempfile::tempdir().unwrap();
    write(&sub.path().join("deep/f"), b"f");
    std::os::unix::fs::symlink(sub.path().join("deep"), sub.path().join("dl")).unwrap();
    let got = archive_entries(&tree(sub.path(), "")).unwrap();
    let keys: Vec<&str> = got.iter().map(|e| e.key.as_str()).collect();
    assert_eq!(keys, ["deep/f", "dl"]);
    // A symlink to a directory given as the tree is not walked.
    let dl = tempfile::tempdir().unwrap();
    let tl = dl.path().join("tree-link");
    std::os::unix::fs::symlink(d.path(), &tl).unwrap();
    let e = refused(&tree(&tl, ""));
    assert!(
        e.contains("is not a directory") && e.contains("tree-link"),
        "{e}"
    );
}

#[test]
fn hard_links_within_one_archive_are_refused_naming_both() {
    let d = tempfile::tempdir().unwrap();
    write(&d.path().join("a"), b"one file");
    std::fs::hard_link(d.path().join("a"), d.path().join("sub/b")).unwrap_or_else(|_| {
        std::fs::create_dir_all(d.path().join("sub")).unwrap();
        std::fs::hard_link(d.path().join("a"), d.path().join("sub/b")).unwrap();
    });
    let e = refused(&tree(d.path(), ""));
    assert!(e.contains("hard links") && e.contains("sub/b"), "{e}");
    let e = refused(&files(
        &[&d.path().join("a"), &d.path().join("sub/b")],
        "x/",
    ));
    assert!(e.contains("hard links"), "{e}");
    // One name of it alone is a file like any other (its other name is not archived).
    let got = archive_entries(&files(&[&d.path().join("a")], "")).unwrap();
    assert_eq!(got.len(), 1);
}

#[test]
fn missing_relative_nul_and_directory_sources_are_refused() {
    let d = tempfile::tempdir().unwrap();
    let e = refused(&files(&[&d.path().join("missing")], ""));
    assert!(e.contains("does not exist") && e.contains("missing"), "{e}");
    let e = refused(&files(&[Path::new("rel/x")], ""));
    assert!(e.contains("not absolute") && e.contains("rel/x"), "{e}");
    let nul = PathBuf::from(std::ffi::OsStr::from_bytes(b"/a\0b"));
    let e = refused(&files(&[&nul], ""));
    assert!(e.contains("NUL"), "{e}");
    let e = refused(&files(&[d.path()], ""));
    assert!(e.contains("is a directory"), "{e}");
    let e = refused(&files(&[], ""));
    assert!(e.contains("at least one file"), "{e}");
    let e = refused(&tree(d.path(), ""));
    assert!(e.contains("holds no regular files"), "{e}");
    let f = d.path().join("f");
    write(&f, b"");
    let e = refused(&tree(&f, ""));
    assert!(e.contains("not a directory"), "{e}");
}

#[test]
fn names_that_are_not_utf8_are_refused() {
    let d = tempfile::tempdir().unwrap();
    let bad = d.path().join(std::ffi::OsStr::from_bytes(b"caf\xe9.txt"));
    write(&bad, b"x");
    let e = refused(&files(&[&bad], ""));
    assert!(e.contains("not valid UTF-8") && e.contains("caf"), "{e}");
    let e = refused(&tree(d.path(), ""));
    assert!(e.contains("not valid UTF-8"), "{e}");
}

#[test]
fn unreadable_directories_are_refused_not_dropped() {
    use std::os::unix::fs::PermissionsExt;
    let d = tempfile::tempdir().unwrap();
    write(&d.path().join("ok.txt"), b"x");
    let locked = d.path().join("locked");
    write(&locked.join("secret.txt"), b"s");
    std::fs::set_permissions(&locked, std::fs::Permissions::from_mode(0o000)).unwrap();
    let readable = std::fs::read_dir(&locked).is_ok();
    let r = archive_entries(&tree(d.path(), ""));
    std::fs::set_permissions(&locked, std::fs::Permissions::from_mode(0o755)).unwrap();
    if readable {
        eprintln!("running as root: permission bits do not stop reading; check skipped");
        assert_eq!(r.unwrap().len(), 2);
        return;
    }
    let e = r.unwrap_err().to_string();
    assert!(e.contains("cannot list") && e.contains("locked"), "{e}");
}

#[test]
fn derived_keys_and_the_prefix_follow_the_key_rule() {
    let d = tempfile::tempdir().unwrap();
    let f = d.path().join("f.txt");
    write(&f, b"x");
    for (prefix, why) in [
        ("/abs/", "starts with `/`"),
        ("a//", "empty segment"),
        ("../", "`..` segment"),
        ("./", "`.` segment"),
        ("a\0", "NUL"),
    ] {
        let e = refused(&files(&[&f], prefix));
        assert!(
            e.contains("`key_prefix`") && e.contains(why),
            "{prefix:?}: {e}"
        );
    }
    // A prefix that is fine alone but makes a long key.
    let long = "x/".repeat(2100);
    let e = refused(&files(&[&f], &long));
    assert!(
        e.contains("`key_prefix`") || e.contains("bytes long"),
        "{e}"
    );
    let e = refused(&files(&[&f], &"y".repeat(4093)));
    assert!(
        e.contains("would be stored as key") && e.contains("bytes long"),
        "{e}"
    );
    // A prefix without a slash is used as given.
    assert_eq!(
        archive_entries(&files(&[&f], "v1-")).unwrap()[0].key,
        "v1-f.txt"
    );
}

#[test]
fn recall_input_rules() {
    let job = |sel: RecallSelection, to: &str| RecallJob {
        selection: sel,
        destination: to.into(),
        overwrite: Default::default(),
        confine: None,
    };
    let keys = |k: &[&str]| RecallSelection::Keys(k.iter().map(|s| s.to_string()).collect());
    let bad = |j: RecallJob| check_recall_input(&j).unwrap_err().to_string();
    assert!(bad(job(keys(&[]), "/o")).contains("at least one key"));
    let e = bad(job(keys(&[""]), "/o"));
    assert!(e.contains("`keys`") && e.contains("empty"), "{e}");
    let e = bad(job(keys(&["a/../b"]), "/o"));
    assert!(e.contains("`keys`") && e.contains("a/../b"), "{e}");
    let e = bad(job(keys(&["./a"]), "/o"));
    assert!(e.contains("`.` segment"), "{e}");
    let e = bad(job(keys(&["a\0b"]), "/o"));
    assert!(e.contains("NUL"), "{e}");
    let e = bad(job(keys(&[&"k".repeat(4097)]), "/o"));
    assert!(e.contains("4097 bytes long"), "{e}");
    let e = bad(job(keys(&["a", "b", "a"]), "/o"));
    assert!(e.contains("`a`") && e.contains("listed twice"), "{e}");
    let e = bad(job(keys(&["a"]), "rel"));
    assert!(e.contains("`to`") && e.contains("not absolute"), "{e}");
    let e = bad(job(keys(&["a"]), "/o\0x"));
    assert!(e.contains("`to`") && e.contains("NUL"), "{e}");
    let e = bad(job(RecallSelection::Prefix("/x".into()), "/o"));
    assert!(e.contains("`prefix`"), "{e}");
    assert!(check_recall_input(&job(keys(&["a/b", "c"]), "/o")).is_ok());
    assert!(check_recall_input(&job(RecallSelection::Prefix("a/".into()), "/o")).is_ok());
}

#[test]
fn intake_rules() {
    let job = |b: &[&str], pool: Option<&str>| IntakeJob {
        selection: IntakeSelection::Barcodes(b.iter().map(|s| s.to_string()).collect()),
        pool: pool.map(str::to_owned),
    };
    let bad = |j: IntakeJob| check_intake(&j).unwrap_err().to_string();
    assert!(bad(job(&[], None)).contains("at least one barcode"));
    let e = bad(job(&["A00001", ""], None));
    assert!(e.contains("`barcodes`") && e.contains("empty"), "{e}");
    let e = bad(job(&["A00001", "A00001"], None));
    assert!(
        e.contains("\"A00001\"") && e.contains("listed twice"),
        "{e}"
    );
    let e = bad(job(&["A00001"], Some(" ")));
    assert!(e.contains("`pool`"), "{e}");
    assert!(check_intake(&job(&["A00001", "A00002"], Some("p1"))).is_ok());
}

/// The checks that look in the catalogue, on an empty SQLite one: unknown keys, prefixes,
/// containers, cartridges; an unknown class is refused before any walk.
#[tokio::test]
async fn catalogue_checks_refuse_what_it_does_not_know() {
    let dir = tempfile::tempdir().unwrap();
    let loaded = LoadedConfig::load_with(None, Some(dir.path()), &Default::default()).unwrap();
    let cat = Catalogue::open(&loaded.config.store.url).await.unwrap();
    let c = &loaded.config;
    let recall = |sel| {
        JobSpec::Recall(RecallJob {
            selection: sel,
            destination: "/o".into(),
            overwrite: Default::default(),
            confine: None,
        })
    };
    let e = check(
        &recall(RecallSelection::Keys(vec!["x/1".into(), "x/2".into()])),
        c,
        &cat,
    )
    .await
    .unwrap_err();
    assert!(matches!(e, JobsError::Invalid(_)), "{e}");
    let e = e.to_string();
    assert!(
        e.contains("2 key(s)") && e.contains("`x/1`") && e.contains("`x/2`"),
        "{e}"
    );
    let e = check(&recall(RecallSelection::Prefix("x/".into())), c, &cat)
        .await
        .unwrap_err()
        .to_string();
    assert!(e.contains("`prefix`") && e.contains("`x/`"), "{e}");
    let verify = |t| JobSpec::Verify(VerifyJob { target: t });
    let e = check(&verify(VerifyTarget::Container(-1)), c, &cat)
        .await
        .unwrap_err()
        .to_string();
    assert!(e.contains("`container`") && e.contains("-1"), "{e}");
    let e = check(&verify(VerifyTarget::Cartridge("ZZ9999".into())), c, &cat)
        .await
        .unwrap_err()
        .to_string();
    assert!(e.contains("`cartridge`") && e.contains("ZZ9999"), "{e}");
    assert!(
        check(&verify(VerifyTarget::Sample { every: 3 }), c, &cat)
            .await
            .is_ok()
    );
    // The class is checked before the (here enormous) tree is walked.
    let gold = JobSpec::Archive(ArchiveJob {
        source: ArchiveSource::Tree("/".into()),
        key_prefix: String::new(),
        storage_class: "gold".into(),
        confine: None,
    });
    let e = check(&gold, c, &cat).await.unwrap_err().to_string();
    assert!(e.contains("`class`") && e.contains("gold"), "{e}");
}
