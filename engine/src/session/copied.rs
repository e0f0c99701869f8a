//! Objects already copied in a pool by an earlier attempt (its worker frozen, killed or fenced
//! after the copy became live, before it could acknowledge it): done, not written twice.
//!
//! A write session filters the items it is given ([`split_copied`]) and, through
//! [`SkipCopied`], the items its refill adds while it runs. Its progress names items by their
//! position in what it was given after that filter; [`Positions`] turns them back into the
//! caller's.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};

use futures::future::BoxFuture;
use tracing::{info, warn};

use super::write::{ArchiveItem, Refill};
use super::{Progress, ProgressFn, SessionError};
use crate::catalogue::{Catalogue, CopiedObject};

/// The copies in `pool` that already count (verified, or durable when `verified_only` is
/// false) of `items`' objects, by key and generation.
async fn present_in_pool(
    catalogue: &Catalogue,
    pool: &str,
    verified_only: bool,
    items: &[ArchiveItem],
) -> Result<HashMap<(String, u64), CopiedObject>, SessionError> {
    let wanted: Vec<(String, u64)> = items
        .iter()
        .map(|it| (it.key.clone(), it.generation))
        .collect();
    Ok(catalogue
        .copies_in_pool(pool, &wanted, verified_only)
        .await?)
}

/// Split `items` into those with a copy in `pool` that already counts (verified, or durable
/// when `verified_only` is false) and those still to write.
pub async fn split_copied(
    catalogue: &Catalogue,
    pool: &str,
    verified_only: bool,
    items: Vec<ArchiveItem>,
) -> Result<(Vec<ArchiveItem>, Vec<ArchiveItem>), SessionError> {
    let present = present_in_pool(catalogue, pool, verified_only, &items).await?;
    Ok(partition_copied(pool, items, &present))
}

/// Split `items` by the copies `present` in `pool`: those already copied, those to write.
fn partition_copied(
    pool: &str,
    items: Vec<ArchiveItem>,
    present: &HashMap<(String, u64), CopiedObject>,
) -> (Vec<ArchiveItem>, Vec<ArchiveItem>) {
    if present.is_empty() {
        return (Vec::new(), items);
    }
    // The same generation number with other content (two planners raced for it, or the file
    // changed between them) is not the same object: it is written, and the catalogue's close
    // refuses the conflict.
    let (already, rest): (Vec<_>, Vec<_>) = items.into_iter().partition(|it| {
        present
            .get(&(it.key.clone(), it.generation))
            .is_some_and(|found| same_object(found, it))
    });
    info!(
        pool,
        objects = already.len(),
        "objects already copied in this pool by an earlier attempt: done without writing them again"
    );
    (already, rest)
}

/// Where each item a write session got stands in what its caller gave: the session's progress
/// names items by their position in the list it got (the first items, then the refill's),
/// after the items already copied were set aside, and the caller counts by its own list.
#[derive(Clone, Debug, Default)]
pub struct Positions {
    inner: Arc<Mutex<PositionsInner>>,
}

#[derive(Debug, Default)]
struct PositionsInner {
    /// The caller's position of each session position.
    caller_of: Vec<usize>,
    /// Items the caller has given so far.
    given: usize,
}

impl Positions {
    /// The caller gave the items keyed `given`, in its order; the session got `kept` of them
    /// (in the same order; keys are unique in a session).
    pub fn record(&self, given: &[String], kept: &[ArchiveItem]) {
        let at: HashMap<&str, usize> = given
            .iter()
            .enumerate()
            .map(|(i, k)| (k.as_str(), i))
            .collect();
        let mut p = self.inner.lock().unwrap_or_else(|e| e.into_inner());
        let base = p.given;
        for it in kept {
            // Every kept item was given; a key that was not (never so) names no one.
            let caller = at.get(it.key.as_str()).map_or(usize::MAX, |i| base + i);
            p.caller_of.push(caller);
        }
        p.given += given.len();
    }

    /// `progress` as the session reports it: session positions turned into the caller's.
    pub fn translate(&self, progress: ProgressFn) -> ProgressFn {
        let positions = self.clone();
        Arc::new(move |p: Progress, finished: &[usize]| {
            let mapped: Vec<usize> = {
                let inner = positions.inner.lock().unwrap_or_else(|e| e.into_inner());
                finished
                    .iter()
                    .filter_map(|i| inner.caller_of.get(*i).copied())
                    .filter(|c| *c != usize::MAX)
                    .collect()
            };
            progress(p, &mapped);
        })
    }
}

/// Whether a catalogued object found in the pool is the item to write: the same size and, when
/// both are known, the same modification time as planned.
pub fn same_object(found: &CopiedObject, it: &ArchiveItem) -> bool {
    found.size == it.size
        && match (found.mtime_ns, it.planned) {
            (Some(m), Some(p)) => m == p.mtime_ns,
            _ => true,
        }
}

/// What a [`SkipCopied`] set aside while the session ran.
#[derive(Debug, Default)]
pub struct SetAside {
    /// Items found already copied: the session counts them written.
    pub already: Vec<ArchiveItem>,
    /// Items it could not check (the catalogue failed): not written here, they go back.
    pub unchecked: Vec<ArchiveItem>,
}

/// A refill whose items already copied in the pool are set aside as written, as the session's
/// first items are.
pub struct SkipCopied {
    inner: Box<dyn Refill>,
    catalogue: Catalogue,
    pool: String,
    verified_only: bool,
    aside: Arc<Mutex<SetAside>>,
    positions: Positions,
}

impl SkipCopied {
    /// Wrap `inner`; what it sets aside is kept in `aside`, and where what it passes on
    /// stands in what `inner` gave, in `positions`.
    pub fn new(
        inner: Box<dyn Refill>,
        catalogue: Catalogue,
        pool: String,
        verified_only: bool,
        aside: Arc<Mutex<SetAside>>,
        positions: Positions,
    ) -> SkipCopied {
        SkipCopied {
            inner,
            catalogue,
            pool,
            verified_only,
            aside,
            positions,
        }
    }
}

impl Refill for SkipCopied {
    fn more(&mut self) -> BoxFuture<'_, Vec<ArchiveItem>> {
        Box::pin(async move {
            loop {
                let items = self.inner.more().await;
                if items.is_empty() {
                    return items;
                }
                let checked =
                    present_in_pool(&self.catalogue, &self.pool, self.verified_only, &items).await;
                let mut aside = self.aside.lock().unwrap_or_else(|e| e.into_inner());
                match checked {
                    Ok(present) => {
                        let given: Vec<String> = items.iter().map(|it| it.key.clone()).collect();
                        let (already, rest) = partition_copied(&self.pool, items, &present);
                        aside.already.extend(already);
                        self.positions.record(&given, &rest);
                        if !rest.is_empty() {
                            return rest;
                        }
                    }
                    Err(e) => {
                        warn!(pool = %self.pool, error = %e, "cannot tell whether the objects that joined the write session are already copied; they are not written in it");
                        aside.unchecked.extend(items);
                        return Vec::new();
                    }
                }
            }
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::session::source::SourceStamp;

    /// A copy found under the same key and generation counts as the item only with the same
    /// size and (when both are known) the same planned mtime: another content that two
    /// planners gave the same generation is written, not skipped.
    #[test]
    fn a_found_copy_is_the_item_only_with_its_size_and_mtime() {
        let item = |size, mtime: Option<i64>| ArchiveItem {
            key: "k".into(),
            generation: 1,
            path: "/src/k".into(),
            size,
            kind: crate::format::ObjectKind::File,
            confine: None,
            planned: mtime.map(|mtime_ns| SourceStamp {
                size,
                mtime_ns,
                ctime_ns: 0,
            }),
        };
        let found = CopiedObject {
            size: 10,
            mtime_ns: Some(5),
        };
        assert!(same_object(&found, &item(10, Some(5))));
        assert!(!same_object(&found, &item(10, Some(6))), "another mtime");
        assert!(!same_object(&found, &item(11, Some(5))), "another size");
        // Nothing planned (old requests) or nothing recorded (version 1 tapes): size decides.
        assert!(same_object(&found, &item(10, None)));
        let unrecorded = CopiedObject {
            size: 10,
            mtime_ns: None,
        };
        assert!(same_object(&unrecorded, &item(10, Some(6))));
    }

    /// Items set aside as already copied shift the session's positions: its progress is
    /// turned back into the caller's, first items and refills alike.
    #[test]
    fn progress_names_the_callers_items_when_some_were_set_aside() {
        let item = |k: &str| ArchiveItem {
            key: k.into(),
            generation: 1,
            path: format!("/src/{k}").into(),
            size: 1,
            kind: crate::format::ObjectKind::File,
            confine: None,
            planned: None,
        };
        let keys = |ks: &[&str]| ks.iter().map(|k| k.to_string()).collect::<Vec<_>>();
        let positions = Positions::default();
        // The caller gave a, b, c (b already copied), then its refill d, e (d already copied).
        positions.record(&keys(&["a", "b", "c"]), &[item("a"), item("c")]);
        positions.record(&keys(&["d", "e"]), &[item("e")]);
        let seen: Arc<Mutex<Vec<usize>>> = Arc::default();
        let progress = {
            let seen = seen.clone();
            positions.translate(Arc::new(move |_p: Progress, f: &[usize]| {
                seen.lock().unwrap().extend_from_slice(f)
            }))
        };
        // The session finished its items 0 (a), 1 (c) and 2 (e); 3 was never given.
        progress(Progress::default(), &[0, 1, 2, 3]);
        assert_eq!(*seen.lock().unwrap(), vec![0, 2, 4]);
    }
}
