//! Submission checks: what a job spec must satisfy before it is queued. The `reel` command
//! and the HTTP API (both in the `reel` binary's crate) call [`check`] before
//! [`JobQueue::submit`](crate::JobQueue::submit), so bad input is refused at once,
//! naming the field and the value, instead of failing on a worker after its retries.
//!
//! The archive source walk, [`archive_entries`], is also what the worker's planner
//! (`EngineExecutor::plan_archive`, in the worker crate) uses: sources are
//! inspected and keys derived in one place. Keys follow the catalogue's one rule,
//! [`reel_engine::catalogue::validate_key`], which a recall's `safe_join` applies too.
//!
//! What is refused:
//! - archive: an unknown storage class; a bad `key_prefix`; missing, relative or NUL paths; a
//!   path listed twice; two paths that map to one key; FIFOs, devices and sockets (never
//!   opened); symbolic links with targets longer than 4096 bytes; unreadable directories and
//!   entries; names that are not UTF-8 (shown escaped); derived keys the key rule refuses; a
//!   tree without files; two names of one file (hard links) in one archive; a file larger than
//!   the cartridges of a pool of the class hold (the largest capacity a drive reported for the
//!   pool's cartridges, or for the library's new ones; with none reported yet there is no size
//!   check, and the first write session measures the cartridge and fails such an object at
//!   once). Symbolic links, given or inside a tree, are archived as links (never followed).
//! - recall: no keys; a bad, repeated or uncatalogued key; a bad prefix or one that matches
//!   nothing; a destination that is relative or holds NUL.
//! - verify: a container or cartridge the catalogue does not know.
//! - intake: empty or repeated barcodes, an empty pool name.
//! - delete: no reason; no keys, more than [`MAX_DELETE_KEYS`], a bad or repeated key, a key
//!   with nothing to delete or one its storage class still retains; an empty prefix or one
//!   with nothing under it; anything a legal hold covers.

use std::collections::{HashMap, HashSet};
use std::os::unix::ffi::OsStrExt;
use std::os::unix::fs::MetadataExt;
use std::path::{Path, PathBuf};

use reel_engine::catalogue::{Catalogue, CatalogueError, validate_key, validate_key_prefix};
use reel_engine::format::ObjectKind;
use reel_engine::session::source::{MAX_LINK_TARGET, SourceStamp, file_kind};
use reel_engine::session::space::largest_object;

use crate::config::Config;
use crate::error::{JobsError, Result};
use crate::job::{
    ArchiveJob, ArchiveSource, DeleteJob, DeleteSelection, IntakeJob, IntakeSelection, JobSpec,
    MAX_DELETE_KEYS, RecallJob, RecallSelection, VerifyJob, VerifyTarget,
};

/// How many values (keys) one error lists at most.
const LISTED: usize = 5;

/// Why a job spec is refused. Each message names the request field, the value, and what to do.
#[derive(Debug, thiserror::Error)]
pub enum SubmissionError {
    /// A required list is empty, or an exclusive choice was not made.
    #[error("`{field}`: {message}")]
    Missing {
        /// The request field (`paths`, `keys`, `barcodes`, ...).
        field: &'static str,
        /// What is missing and what to give.
        message: String,
    },
    /// A value is refused for a reason of its own.
    #[error("`{field}` {value:?} is refused: {reason}")]
    Invalid {
        /// The request field.
        field: &'static str,
        /// The value as given.
        value: String,
        /// Why, and what to do.
        reason: String,
    },
    /// A path must be absolute.
    #[error("`{field}`: {path} is not absolute; give absolute paths")]
    NotAbsolute {
        /// The request field.
        field: &'static str,
        /// The path.
        path: PathBuf,
    },
    /// A path holds a NUL byte.
    #[error("`{field}`: {path:?} holds a NUL byte; paths cannot contain NUL")]
    NulInPath {
        /// The request field.
        field: &'static str,
        /// The path.
        path: PathBuf,
    },
    /// The storage class is not configured.
    #[error(
        "`class`: storage class `{class}` is not in [archive.storage_classes] (configured: {known}); give one of those, or add it to the configuration"
    )]
    UnknownClass {
        /// The class asked for.
        class: String,
        /// The configured ones.
        known: String,
    },
    /// An archive source does not exist.
    #[error("`paths`: {path} does not exist; check the path")]
    NotFound {
        /// The path.
        path: PathBuf,
    },
    /// An archive source (or an entry of a tree) is a symbolic link whose target is too long.
    #[error(
        "`paths`: {path} is a symbolic link with a {len}-byte target; links are archived as links with targets of at most 4096 bytes: leave it out of the archive"
    )]
    LongLink {
        /// The link.
        path: PathBuf,
        /// Its target's length.
        len: u64,
    },
    /// An archive source (or an entry of a tree) is neither a regular file nor a directory.
    #[error(
        "`paths`: {path} is a {kind}; reel archives regular files only (it never opens devices, FIFOs or sockets): leave it out, or move it out of the tree"
    )]
    SpecialFile {
        /// The path.
        path: PathBuf,
        /// `FIFO`, `character device`, `block device`, `socket`.
        kind: &'static str,
    },
    /// A directory was listed among files.
    #[error("`paths`: {path} is a directory; archive one directory alone, or list files")]
    Directory {
        /// The directory.
        path: PathBuf,
    },
    /// A tree source is not a directory.
    #[error("`paths`: {path} is not a directory; list it as a file")]
    NotADirectory {
        /// The path.
        path: PathBuf,
    },
    /// A source or an entry of a tree cannot be listed or inspected.
    #[error(
        "`paths`: cannot {doing} {path}: {source}; make it readable by the user running reel and the workers, or leave it out"
    )]
    Unreadable {
        /// `list`, `inspect`.
        doing: &'static str,
        /// The path.
        path: PathBuf,
        /// The I/O error.
        source: std::io::Error,
    },
    /// A file name is not UTF-8, so it has no key.
    #[error(
        "`paths`: the name of {path:?} is not valid UTF-8, and object keys are UTF-8; rename it"
    )]
    NotUtf8 {
        /// The path.
        path: PathBuf,
    },
    /// The same path was listed twice.
    #[error("`paths`: {path} is listed twice; list each file once")]
    ListedTwice {
        /// The path.
        path: PathBuf,
    },
    /// Two sources would be stored under one key.
    #[error(
        "`paths`: {first} and {second} would both be stored as key `{key}`; archive them in separate jobs with different `key_prefix` values, or archive their common directory as a tree"
    )]
    SameKey {
        /// The first path.
        first: PathBuf,
        /// The second path.
        second: PathBuf,
        /// The key both map to.
        key: String,
    },
    /// Two sources are hard links to one file.
    #[error(
        "`paths`: {first} and {second} are hard links to one file; reel archives each name as a file of its own and cannot recall them as one file again, so it refuses rather than split them: archive one of the names (or a copy of the file)"
    )]
    HardLinked {
        /// The first name.
        first: PathBuf,
        /// The second name.
        second: PathBuf,
    },
    /// A derived key is refused by the key rule.
    #[error(
        "`paths`: {path} would be stored as key {key:?}, which is refused: {reason}; rename it or change `key_prefix`"
    )]
    BadDerivedKey {
        /// The source.
        path: PathBuf,
        /// The key.
        key: String,
        /// Why.
        reason: String,
    },
    /// A tree without a regular file.
    #[error("`paths`: {path} holds no regular files; there is nothing to archive")]
    NothingToArchive {
        /// The tree.
        path: PathBuf,
    },
    /// A file larger than any cartridge of a pool of the class holds.
    #[error(
        "`paths`: {path} is {size} bytes, larger than a cartridge of pool {pool} holds ({capacity} bytes of capacity, of which {usable} bytes take an object after the container's overhead and the early-warning margin); split it, or archive it to a class whose pools have larger cartridges"
    )]
    TooLarge {
        /// The file.
        path: PathBuf,
        /// Its size.
        size: u64,
        /// The pool.
        pool: String,
        /// The largest capacity known for the pool's cartridges.
        capacity: u64,
        /// The largest object such a cartridge takes.
        usable: u64,
    },
    /// A key was listed twice in one recall.
    #[error("`keys`: key `{key}` is listed twice; list each key once")]
    KeyListedTwice {
        /// The key.
        key: String,
    },
    /// Keys the catalogue does not hold.
    #[error(
        "`keys`: {count} key(s) are not in the catalogue: {keys}; check them with `reel catalog find KEY` (GET /v1/catalog/objects/KEY), or archive them first"
    )]
    UnknownKeys {
        /// How many.
        count: usize,
        /// The first few, quoted.
        keys: String,
    },
    /// Keys a delete names that have nothing to delete.
    #[error(
        "`keys`: {count} key(s) have nothing to delete (never archived, or deleted already: see `reel recycle ls`): {keys}"
    )]
    NothingToDelete {
        /// How many.
        count: usize,
        /// The first few, quoted.
        keys: String,
    },
    /// A recall prefix that matches no archived object.
    #[error(
        "`prefix`: no archived object has a key starting with `{prefix}`; list keys with `reel catalog ls PREFIX` (GET /v1/catalog/objects?prefix=)"
    )]
    PrefixMatchesNothing {
        /// The prefix.
        prefix: String,
    },
    /// A container id the catalogue does not know.
    #[error(
        "`container`: the catalogue has no container with id {id}; container ids are in `reel catalog find KEY` (GET /v1/catalog/objects/KEY)"
    )]
    UnknownContainer {
        /// The id.
        id: i64,
    },
    /// A cartridge the catalogue does not know.
    #[error(
        "`cartridge`: the catalogue has no cartridge `{barcode}`; list them with `reel library cartridges`"
    )]
    UnknownCartridge {
        /// The barcode.
        barcode: String,
    },
}

/// One file (regular, or a symbolic link archived as a link) an archive job writes: its key
/// and what lstat said about it at the walk.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SourceEntry {
    /// A regular file, or a symbolic link (archived as a link: its target is the object).
    pub kind: ObjectKind,
    /// The object key: `key_prefix` + the name (files) or the path relative to the tree,
    /// joined with `/`.
    pub key: String,
    /// The file.
    pub path: PathBuf,
    /// Its size in bytes (of a link: of its target).
    pub size: u64,
    /// Its modification time, ns since the epoch.
    pub mtime_ns: i64,
    /// Its status-change time, ns since the epoch.
    pub ctime_ns: i64,
    /// Device and inode of a regular file with more than one name (hard links), else `None`.
    pub hard_link: Option<(u64, u64)>,
}

fn entry(key: String, path: PathBuf, meta: &std::fs::Metadata) -> SourceEntry {
    // The stamp the write session compares the source with (session::source).
    let stamp = SourceStamp::of(meta);
    SourceEntry {
        kind: if meta.file_type().is_symlink() {
            ObjectKind::Symlink
        } else {
            ObjectKind::File
        },
        key,
        path,
        size: stamp.size,
        mtime_ns: stamp.mtime_ns,
        ctime_ns: stamp.ctime_ns,
        hard_link: (meta.is_file() && meta.nlink() > 1).then(|| (meta.dev(), meta.ino())),
    }
}

fn check_path(field: &'static str, p: &Path) -> std::result::Result<(), SubmissionError> {
    if p.as_os_str().as_bytes().contains(&0) {
        return Err(SubmissionError::NulInPath {
            field,
            path: p.to_path_buf(),
        });
    }
    if p.as_os_str().is_empty() || p.is_relative() {
        return Err(SubmissionError::NotAbsolute {
            field,
            path: p.to_path_buf(),
        });
    }
    Ok(())
}

/// lstat, never following a symlink; a missing path is [`SubmissionError::NotFound`].
fn lstat(p: &Path) -> std::result::Result<std::fs::Metadata, SubmissionError> {
    std::fs::symlink_metadata(p).map_err(|source| match source.kind() {
        std::io::ErrorKind::NotFound => SubmissionError::NotFound {
            path: p.to_path_buf(),
        },
        _ => SubmissionError::Unreadable {
            doing: "inspect",
            path: p.to_path_buf(),
            source,
        },
    })
}

/// A symbolic link is archived as a link: its target must fit the format's bound.
fn check_link(p: &Path, meta: &std::fs::Metadata) -> std::result::Result<(), SubmissionError> {
    if meta.file_type().is_symlink() && meta.len() > MAX_LINK_TARGET {
        return Err(SubmissionError::LongLink {
            path: p.to_path_buf(),
            len: meta.len(),
        });
    }
    Ok(())
}

fn utf8_name(p: &Path, name: &std::ffi::OsStr) -> std::result::Result<String, SubmissionError> {
    name.to_str()
        .map(str::to_owned)
        .ok_or_else(|| SubmissionError::NotUtf8 {
            path: p.to_path_buf(),
        })
}

/// Every regular file and symbolic link under `dir` (sorted by name at each level; links are
/// entries of their own, never followed), `rel` being the key segments of `dir` below the
/// tree's root. Special files and unreadable entries are refused, never skipped.
fn walk(
    dir: &Path,
    rel: &mut Vec<String>,
    prefix: &str,
    out: &mut Vec<SourceEntry>,
) -> std::result::Result<(), SubmissionError> {
    let unreadable = |path: &Path, source| SubmissionError::Unreadable {
        doing: "list",
        path: path.to_path_buf(),
        source,
    };
    let mut entries = Vec::new();
    for e in std::fs::read_dir(dir).map_err(|e| unreadable(dir, e))? {
        entries.push(e.map_err(|e| unreadable(dir, e))?);
    }
    entries.sort_by_key(|e| e.file_name());
    for e in entries {
        let path = e.path();
        let ft = e
            .file_type()
            .map_err(|source| SubmissionError::Unreadable {
                doing: "inspect",
                path: path.clone(),
                source,
            })?;
        let name = utf8_name(&path, &e.file_name())?;
        if ft.is_dir() {
            rel.push(name);
            walk(&path, rel, prefix, out)?;
            rel.pop();
        } else if ft.is_file() || ft.is_symlink() {
            let meta = lstat(&path)?;
            check_link(&path, &meta)?;
            let mut key = String::from(prefix);
            for seg in rel.iter() {
                key.push_str(seg);
                key.push('/');
            }
            key.push_str(&name);
            out.push(entry(key, path, &meta));
        } else {
            return Err(SubmissionError::SpecialFile {
                path,
                kind: file_kind(&ft),
            });
        }
    }
    Ok(())
}

/// The source of an archive of `paths` (absolute): one directory (not a symbolic link to one)
/// is a tree; anything else is a list of files, which [`archive_entries`] checks (missing
/// paths, symbolic links, special files). A directory among several paths is refused.
pub fn archive_source(paths: &[PathBuf]) -> std::result::Result<ArchiveSource, SubmissionError> {
    let is_dir = |p: &Path| std::fs::symlink_metadata(p).is_ok_and(|m| m.is_dir());
    match paths {
        [one] if is_dir(one) => Ok(ArchiveSource::Tree(one.clone())),
        _ => match paths.iter().find(|p| is_dir(p)) {
            Some(d) => Err(SubmissionError::Directory { path: d.clone() }),
            None => Ok(ArchiveSource::Files(paths.to_vec())),
        },
    }
}

/// The files an archive job writes, with their keys: the one walk of the sources, used at
/// submission and by the worker's planner. Listed files keep their order; a tree is walked in
/// name order. Every key is checked by the catalogue's key rule and is unique in the job.
pub fn archive_entries(job: &ArchiveJob) -> std::result::Result<Vec<SourceEntry>, SubmissionError> {
    let prefix = job.key_prefix.as_str();
    validate_key_prefix(prefix).map_err(|e| invalid("key_prefix", prefix, e))?;
    let mut out = Vec::new();
    match &job.source {
        ArchiveSource::Files(paths) => {
            if paths.is_empty() {
                return Err(SubmissionError::Missing {
                    field: "paths",
                    message: "archive needs at least one file".into(),
                });
            }
            let mut seen = HashSet::new();
            for p in paths {
                check_path("paths", p)?;
                if !seen.insert(p.as_path()) {
                    return Err(SubmissionError::ListedTwice { path: p.clone() });
                }
                let meta = lstat(p)?;
                let ft = meta.file_type();
                if ft.is_dir() {
                    return Err(SubmissionError::Directory { path: p.clone() });
                } else if ft.is_symlink() {
                    check_link(p, &meta)?;
                } else if !ft.is_file() {
                    return Err(SubmissionError::SpecialFile {
                        path: p.clone(),
                        kind: file_kind(&ft),
                    });
                }
                let name = p
                    .file_name()
                    .ok_or_else(|| SubmissionError::Directory { path: p.clone() })?;
                let key = format!("{prefix}{}", utf8_name(p, name)?);
                out.push(entry(key, p.clone(), &meta));
            }
        }
        ArchiveSource::Tree(root) => {
            check_path("paths", root)?;
            let ft = lstat(root)?.file_type();
            if !ft.is_dir() {
                return Err(SubmissionError::NotADirectory { path: root.clone() });
            }
            walk(root, &mut Vec::new(), prefix, &mut out)?;
            if out.is_empty() {
                return Err(SubmissionError::NothingToArchive { path: root.clone() });
            }
        }
    }
    let mut keys: HashMap<&str, &Path> = HashMap::with_capacity(out.len());
    let mut inodes: HashMap<(u64, u64), &Path> = HashMap::new();
    for e in &out {
        if let Some(ino) = e.hard_link
            && let Some(first) = inodes.insert(ino, &e.path)
        {
            return Err(SubmissionError::HardLinked {
                first: first.to_path_buf(),
                second: e.path.clone(),
            });
        }
        if let Err(CatalogueError::InvalidKey { reason, .. }) = validate_key(&e.key) {
            return Err(SubmissionError::BadDerivedKey {
                path: e.path.clone(),
                key: e.key.clone(),
                reason,
            });
        }
        if let Some(first) = keys.insert(&e.key, &e.path) {
            return Err(SubmissionError::SameKey {
                first: first.to_path_buf(),
                second: e.path.clone(),
                key: e.key.clone(),
            });
        }
    }
    Ok(out)
}

/// A key-rule refusal as a field error.
fn invalid(field: &'static str, value: &str, e: CatalogueError) -> SubmissionError {
    match e {
        CatalogueError::InvalidKey { key, reason } => SubmissionError::Invalid {
            field,
            value: key,
            reason,
        },
        other => SubmissionError::Invalid {
            field,
            value: value.into(),
            reason: other.to_string(),
        },
    }
}

/// Every file must fit on a cartridge of every pool of the class: its size against the largest
/// capacity a drive reported for the pool's cartridges (or the library's new ones), less a
/// container's overhead and the early-warning margin. No capacity known yet: no check.
pub async fn check_sizes(
    catalogue: &Catalogue,
    config: &Config,
    class: &str,
    entries: &[SourceEntry],
) -> Result<()> {
    let Some(biggest) = entries.iter().max_by_key(|e| e.size) else {
        return Ok(());
    };
    for pool in config.pools_of(class).unwrap_or_default() {
        let Some(capacity) = catalogue.largest_capacity(pool).await? else {
            continue;
        };
        let usable = largest_object(
            capacity,
            config.archive.record_size as usize,
            config.archive.early_warning_margin_bytes,
        );
        if biggest.size > usable {
            return Err(SubmissionError::TooLarge {
                path: biggest.path.clone(),
                size: biggest.size,
                pool: pool.clone(),
                capacity,
                usable,
            }
            .into());
        }
    }
    Ok(())
}

/// The storage class must be configured.
pub fn check_class(config: &Config, class: &str) -> std::result::Result<(), SubmissionError> {
    if config.pools_of(class).is_some() {
        return Ok(());
    }
    let known: Vec<&str> = config
        .archive
        .storage_classes
        .keys()
        .map(String::as_str)
        .collect();
    Err(SubmissionError::UnknownClass {
        class: class.into(),
        known: if known.is_empty() {
            "none".into()
        } else {
            known.join(", ")
        },
    })
}

/// The checks of a recall that need no catalogue.
pub fn check_recall_input(job: &RecallJob) -> std::result::Result<(), SubmissionError> {
    check_path("to", &job.destination)?;
    match &job.selection {
        RecallSelection::Keys(keys) => {
            if keys.is_empty() {
                return Err(SubmissionError::Missing {
                    field: "keys",
                    message: "recall needs at least one key (or a prefix)".into(),
                });
            }
            let mut seen = HashSet::with_capacity(keys.len());
            for k in keys {
                validate_key(k).map_err(|e| invalid("keys", k, e))?;
                if !seen.insert(k.as_str()) {
                    return Err(SubmissionError::KeyListedTwice { key: k.clone() });
                }
            }
        }
        RecallSelection::Prefix(p) => {
            validate_key_prefix(p).map_err(|e| invalid("prefix", p, e))?;
        }
    }
    Ok(())
}

/// The refusal of a recall naming keys the catalogue does not hold (the first few of them).
pub fn unknown_keys<K: AsRef<str>>(missing: &[K]) -> SubmissionError {
    let mut listed: Vec<String> = missing
        .iter()
        .take(LISTED)
        .map(|k| format!("`{}`", k.as_ref()))
        .collect();
    if missing.len() > LISTED {
        listed.push(format!("and {} more", missing.len() - LISTED));
    }
    SubmissionError::UnknownKeys {
        count: missing.len(),
        keys: listed.join(", "),
    }
}

/// A recall: its input, and that the catalogue holds what it selects.
pub async fn check_recall(catalogue: &Catalogue, job: &RecallJob) -> Result<()> {
    check_recall_input(job)?;
    match &job.selection {
        RecallSelection::Keys(keys) => {
            let mut missing = Vec::new();
            for k in keys {
                if catalogue.object(k).await?.is_none() {
                    missing.push(k);
                }
            }
            if !missing.is_empty() {
                return Err(unknown_keys(&missing).into());
            }
        }
        RecallSelection::Prefix(p) => {
            if catalogue.list_objects(p, 1).await?.is_empty() {
                return Err(SubmissionError::PrefixMatchesNothing { prefix: p.clone() }.into());
            }
        }
    }
    Ok(())
}

/// A repack's checks: who asked, a destination pool that exists, and cartridges a repack can
/// read now (the selection again, by the barcodes it resolved to).
pub async fn check_repack(catalogue: &Catalogue, job: &crate::job::RepackJob) -> Result<()> {
    reel_engine::catalogue::check_reason("name of who repacks", &job.by)?;
    if let Some(p) = &job.to_pool
        && !catalogue.pool_exists(p).await?
    {
        return Err(SubmissionError::Invalid {
            field: "to_pool",
            value: p.clone(),
            reason: "no such pool; a pool exists once a cartridge is taken into it (`reel intake --pool`)".into(),
        }
        .into());
    }
    if job.cartridges.is_empty() {
        return Err(SubmissionError::Missing {
            field: "cartridges",
            message: "a repack names at least one cartridge".into(),
        }
        .into());
    }
    let again = crate::job::RepackSelection {
        barcodes: job.cartridges.clone(),
        ..crate::job::RepackSelection::default()
    };
    crate::repack_select::select(catalogue, &again).await?;
    Ok(())
}

/// A reclaim's checks: each cartridge exists and holds nothing to keep.
pub async fn check_reclaim(catalogue: &Catalogue, job: &crate::job::ReclaimJob) -> Result<()> {
    reel_engine::catalogue::check_reason("name of who reclaims", &job.by)?;
    // A repeat first, before any cartridge is looked at (a refusal of the first would hide it).
    let mut seen = HashSet::new();
    if let Some(b) = job.cartridges.iter().find(|b| !seen.insert(b.as_str())) {
        return Err(SubmissionError::Invalid {
            field: "cartridges",
            value: b.clone(),
            reason: "listed twice".into(),
        }
        .into());
    }
    for b in &job.cartridges {
        let check = catalogue.reclaim_check(b).await?;
        if let Some(reason) = check.refusal() {
            return Err(SubmissionError::Invalid {
                field: "cartridges",
                value: b.clone(),
                reason,
            }
            .into());
        }
    }
    Ok(())
}

/// A delete: a reason and a name of who asks; keys valid and distinct, each with something to
/// delete, or a non-empty prefix with something under it; nothing a legal hold covers (the
/// job skips keys under a hold placed after this check, and names them).
pub async fn check_delete(catalogue: &Catalogue, job: &DeleteJob) -> Result<()> {
    reel_engine::catalogue::check_reason("reason", &job.reason)?;
    reel_engine::catalogue::check_reason("name of who deletes", &job.by)?;
    match &job.selection {
        DeleteSelection::Keys(keys) => {
            if keys.is_empty() {
                return Err(SubmissionError::Missing {
                    field: "keys",
                    message: "delete needs at least one key (or a prefix)".into(),
                }
                .into());
            }
            if keys.len() > MAX_DELETE_KEYS {
                return Err(SubmissionError::Invalid {
                    field: "keys",
                    value: format!("{} keys", keys.len()),
                    reason: format!(
                        "at most {MAX_DELETE_KEYS} per job; delete a prefix, or split the list"
                    ),
                }
                .into());
            }
            let mut seen = HashSet::with_capacity(keys.len());
            for k in keys {
                validate_key(k).map_err(|e| invalid("keys", k, e))?;
                if !seen.insert(k.as_str()) {
                    return Err(SubmissionError::KeyListedTwice { key: k.clone() }.into());
                }
            }
            let live: HashSet<String> = catalogue.live_among(keys).await?.into_iter().collect();
            let missing: Vec<&String> = keys.iter().filter(|k| !live.contains(*k)).collect();
            if !missing.is_empty() {
                let mut listed: Vec<String> = missing
                    .iter()
                    .take(LISTED)
                    .map(|k| format!("`{k}`"))
                    .collect();
                if missing.len() > LISTED {
                    listed.push(format!("and {} more", missing.len() - LISTED));
                }
                return Err(SubmissionError::NothingToDelete {
                    count: missing.len(),
                    keys: listed.join(", "),
                }
                .into());
            }
            if let Some((what, hold)) = catalogue.hold_against(keys, None).await? {
                return Err(hold.refusal(&what).into());
            }
            if let Some(r) = catalogue.retained_among(keys).await?.first() {
                return Err(reel_engine::catalogue::retained_refusal(r).into());
            }
        }
        DeleteSelection::Prefix(p) => {
            validate_key_prefix(p).map_err(|e| invalid("prefix", p, e))?;
            if p.is_empty() {
                return Err(SubmissionError::Invalid {
                    field: "prefix",
                    value: String::new(),
                    reason: "an empty prefix names every object; give the prefix to delete".into(),
                }
                .into());
            }
            if !catalogue.live_under(p).await? {
                return Err(SubmissionError::PrefixMatchesNothing { prefix: p.clone() }.into());
            }
            if let Some((what, hold)) = catalogue.hold_against(&[], Some(p)).await? {
                return Err(hold.refusal(&what).into());
            }
        }
    }
    Ok(())
}

/// A verify: its target must exist in the catalogue.
pub async fn check_verify(catalogue: &Catalogue, job: &VerifyJob) -> Result<()> {
    match &job.target {
        VerifyTarget::Container(id) => {
            if catalogue.container(*id).await?.is_none() {
                return Err(SubmissionError::UnknownContainer { id: *id }.into());
            }
        }
        VerifyTarget::Cartridge(b) | VerifyTarget::Label(b) => {
            if b.trim().is_empty() {
                return Err(SubmissionError::Invalid {
                    field: "cartridge",
                    value: b.clone(),
                    reason: "the barcode is empty; give a cartridge's barcode".into(),
                }
                .into());
            }
            if catalogue.cartridge(b).await?.is_none() {
                return Err(SubmissionError::UnknownCartridge { barcode: b.clone() }.into());
            }
        }
        VerifyTarget::Sample { every: 0 } => {
            return Err(SubmissionError::Invalid {
                field: "sample_every",
                value: "0".into(),
                reason: "the sample period must be at least 1".into(),
            }
            .into());
        }
        VerifyTarget::Sample { .. } => {}
    }
    Ok(())
}

/// An intake: barcodes non-empty and distinct, the pool name non-empty.
pub fn check_intake(job: &IntakeJob) -> std::result::Result<(), SubmissionError> {
    if let Some(p) = &job.pool
        && p.trim().is_empty()
    {
        return Err(SubmissionError::Invalid {
            field: "pool",
            value: p.clone(),
            reason: "the pool name is empty; give a pool name, or leave it out for the default storage class's first pool".into(),
        });
    }
    if let IntakeSelection::Barcodes(barcodes) = &job.selection {
        if barcodes.is_empty() {
            return Err(SubmissionError::Missing {
                field: "barcodes",
                message: "intake needs at least one barcode (or all new cartridges)".into(),
            });
        }
        let mut seen = HashSet::with_capacity(barcodes.len());
        for b in barcodes {
            if b.trim().is_empty() || b.contains('\0') {
                return Err(SubmissionError::Invalid {
                    field: "barcodes",
                    value: b.clone(),
                    reason: "a barcode is empty (or holds NUL); give the cartridges' barcodes"
                        .into(),
                });
            }
            if !seen.insert(b.as_str()) {
                return Err(SubmissionError::Invalid {
                    field: "barcodes",
                    value: b.clone(),
                    reason: "it is listed twice; list each barcode once".into(),
                });
            }
        }
    }
    Ok(())
}

/// Check a spec before it is queued; nothing is queued when this fails. An archive's sources
/// are walked (on a blocking thread) as the worker will walk them.
pub async fn check(spec: &JobSpec, config: &Config, catalogue: &Catalogue) -> Result<()> {
    match spec {
        JobSpec::Archive(a) => {
            // The class first: a bad class is refused before any walk.
            check_class(config, &a.storage_class)?;
            let job = a.clone();
            let entries = tokio::task::spawn_blocking(move || archive_entries(&job))
                .await
                .map_err(|e| JobsError::Internal(format!("the source walk stopped: {e}")))??;
            check_sizes(catalogue, config, &a.storage_class, &entries).await?;
        }
        JobSpec::Recall(r) => check_recall(catalogue, r).await?,
        JobSpec::Verify(v) => check_verify(catalogue, v).await?,
        JobSpec::Intake(i) => check_intake(i)?,
        JobSpec::Rebuild(_) => {}
        JobSpec::Delete(d) => check_delete(catalogue, d).await?,
        JobSpec::Repack(r) => check_repack(catalogue, r).await?,
        JobSpec::Reclaim(r) => check_reclaim(catalogue, r).await?,
    }
    // The queue's own checks, so the refusal comes from here with the rest.
    spec.validate().map_err(|message| JobsError::Config {
        origin: "the job".into(),
        message,
    })
}

/// A retry of job `id` is checked as its submission was, when it is failed or cancelled (a
/// queued or running one is refused by the retry itself): sources gone since (an upload's
/// spool file is removed once its job ended), keys no longer in the catalogue, a class no
/// longer configured are refused now, instead of failing the job again on a worker. Such a
/// refusal is [`JobsError::BadJobState`]: the request names a job that exists, and what
/// cannot be is the job's own spec, which sending the retry again does not mend (a store
/// fault stays what it is).
pub async fn check_retry(
    jobs: &crate::JobStore,
    id: &str,
    config: &Config,
    catalogue: &Catalogue,
) -> Result<()> {
    let rec = jobs.require(id).await?;
    if matches!(
        rec.state,
        crate::job::JobState::Failed | crate::job::JobState::Cancelled
    ) {
        check(&rec.spec, config, catalogue).await.map_err(|e| {
            let store = e.store_fault().is_some()
                || matches!(
                    e,
                    JobsError::Database { .. } | JobsError::Queue { .. } | JobsError::Migrate(_)
                );
            if store {
                return e;
            }
            JobsError::BadJobState {
                id: id.to_string(),
                state: rec.state.to_string(),
                hint: format!(
                    "it can no longer run as it was submitted ({e}); submit a new job (upload \
                     the data again if it came through PUT /v1/objects)"
                ),
            }
        })?;
    }
    Ok(())
}

#[cfg(test)]
#[path = "submission_tests.rs"]
mod tests;
