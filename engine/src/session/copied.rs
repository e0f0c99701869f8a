//! Objects already copied in a pool by an earlier attempt (its worker frozen, killed or fenced
//! after the copy became live, before it could acknowledge it): done, not written twice.
//!
//! A write session filters the items it is given ([`split_copied`]) and, through
//! [`SkipCopied`], the items its refill adds while it runs.

use std::sync::{Arc, Mutex};

use futures::future::BoxFuture;
use tracing::{info, warn};

use super::SessionError;
use super::write::{ArchiveItem, Refill};
use crate::catalogue::{Catalogue, CopiedObject};

/// Split `items` into those with a copy in `pool` that already counts (verified, or durable
/// when `verified_only` is false) and those still to write.
pub async fn split_copied(
    catalogue: &Catalogue,
    pool: &str,
    verified_only: bool,
    items: Vec<ArchiveItem>,
) -> Result<(Vec<ArchiveItem>, Vec<ArchiveItem>), SessionError> {
    let wanted: Vec<(String, u64)> = items
        .iter()
        .map(|it| (it.key.clone(), it.generation))
        .collect();
    let present = catalogue
        .copies_in_pool(pool, &wanted, verified_only)
        .await?;
    if present.is_empty() {
        return Ok((Vec::new(), items));
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
    Ok((already, rest))
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
}

impl SkipCopied {
    /// Wrap `inner`; what it sets aside is kept in `aside`.
    pub fn new(
        inner: Box<dyn Refill>,
        catalogue: Catalogue,
        pool: String,
        verified_only: bool,
        aside: Arc<Mutex<SetAside>>,
    ) -> SkipCopied {
        SkipCopied {
            inner,
            catalogue,
            pool,
            verified_only,
            aside,
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
                let checked = split_copied(
                    &self.catalogue,
                    &self.pool,
                    self.verified_only,
                    items.clone(),
                )
                .await;
                let mut aside = self.aside.lock().unwrap_or_else(|e| e.into_inner());
                match checked {
                    Ok((already, rest)) => {
                        aside.already.extend(already);
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
}
