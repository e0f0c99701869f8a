//! Helpers for the catalogue's own tests: run one test body on both backends, and build
//! labelled cartridges and durable containers quickly.

use uuid::Uuid;

use super::testing::TestCatalogue;
use super::{Catalogue, ContainerState, NewCopy};

/// What a test body returns.
pub(crate) type TestResult = std::result::Result<(), Box<dyn std::error::Error + Send + Sync>>;

/// For each `name`, a module `name` with two tests, `sqlite` and `postgres`, each running
/// `async fn name(db: &TestCatalogue) -> TestResult` on a fresh catalogue of that backend.
macro_rules! on_both_backends {
    ($($name:ident),* $(,)?) => {
        $(
            mod $name {
                #[tokio::test]
                async fn sqlite() -> $crate::catalogue::test_support::TestResult {
                    let db = $crate::catalogue::testing::sqlite()
                        .await
                        .map_err(|e| e.to_string())?;
                    // Display, not Debug, when a test fails.
                    super::$name(&db).await.map_err(|e| e.to_string().into())
                }

                #[tokio::test]
                async fn postgres() -> $crate::catalogue::test_support::TestResult {
                    let Some(db) = $crate::catalogue::testing::postgres()
                        .await
                        .map_err(|e| e.to_string())?
                    else {
                        return Ok(());
                    };
                    super::$name(&db).await.map_err(|e| e.to_string().into())
                }
            }
        )*
    };
}
pub(crate) use on_both_backends;

/// A recognisable hash.
pub(crate) fn sha(n: u32) -> [u8; 32] {
    let mut h = [0u8; 32];
    h[..4].copy_from_slice(&n.to_be_bytes());
    h[31] = 0xA5;
    h
}

/// A copy of `size` bytes at `offset`, hash from `n`.
pub(crate) fn copy(key: &str, generation: u64, offset: u64, size: u64, n: u32) -> NewCopy {
    NewCopy {
        key: key.to_string(),
        generation,
        size,
        sha256: sha(n),
        offset,
        length: size,
        meta: None,
    }
}

/// Add and label a cartridge in `pool` (created if needed).
pub(crate) async fn labelled(cat: &Catalogue, barcode: &str, pool: &str) -> TestResult {
    cat.ensure_pool(pool).await?;
    cat.add_cartridge(barcode, false, 18_000_000_000_000)
        .await?;
    cat.set_labelled(barcode, pool, Uuid::new_v4(), 1).await?;
    Ok(())
}

/// Create, close and move a container with `copies` to `state` at the cartridge's end of data;
/// advance end of data past it. Returns its id.
pub(crate) async fn container_with(
    cat: &Catalogue,
    barcode: &str,
    copies: &[NewCopy],
    state: ContainerState,
) -> std::result::Result<i64, Box<dyn std::error::Error + Send + Sync>> {
    let cart = cat
        .cartridge(barcode)
        .await?
        .ok_or("test cartridge missing")?;
    let live = cat
        .containers_on(barcode)
        .await?
        .into_iter()
        .filter(|c| c.state != ContainerState::Dead)
        .map(|c| (c.file_number, c.last_block.unwrap_or(c.first_block)))
        .max();
    let (file, first) = match live {
        Some((f, b)) => ((f + 1).max(cart.next_file), (b + 2).max(cart.eod_block)),
        None => (cart.next_file, cart.eod_block),
    };
    let bytes: u64 = copies
        .iter()
        .map(|c| c.offset + c.length)
        .max()
        .unwrap_or(0);
    let id = cat
        .create_container(Uuid::new_v4(), barcode, file, first, 1 << 20)
        .await?;
    let last = first + 1 + bytes.div_ceil(1 << 20);
    // The container hash depends on where it is, not on its id, so equal archives dump equal.
    let hash = sha(((file as u32) << 16) ^ first as u32);
    cat.close_container(id, last, bytes, hash, copies).await?;
    if state != ContainerState::Pending {
        cat.set_container_state(&[id], state).await?;
    }
    if state.is_visible() {
        cat.set_eod(barcode, last + 2, file + 1, cart.used_bytes + bytes)
            .await?;
    }
    Ok(id)
}

/// The harness's catalogue, for brevity.
pub(crate) fn cat(db: &TestCatalogue) -> &Catalogue {
    db.catalogue()
}
