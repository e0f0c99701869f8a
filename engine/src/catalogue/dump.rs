//! The catalogue's facts in a stable order, to compare a catalogue rebuilt from the tapes with
//! the original.

use serde_json::{Value, json};
use uuid::Uuid;

use super::Catalogue;
use super::backend::{from_db, on_pool, sha_from_db};
use super::error::{DbContext, Result};

/// A cartridge's facts that its tape can prove.
#[derive(sqlx::FromRow)]
struct CartridgeFacts {
    barcode: String,
    pool: Option<String>,
    worm: bool,
    capacity_bytes: i64,
    used_bytes: i64,
    eod_block: i64,
    next_file: i64,
    label_epoch: i64,
    cartridge_uuid: Option<Uuid>,
}

/// A live container's facts.
#[derive(sqlx::FromRow)]
struct ContainerFacts {
    uuid: Uuid,
    barcode: String,
    file_number: i64,
    first_block: i64,
    last_block: Option<i64>,
    bytes: i64,
    record_size: i32,
    sha256: Option<Vec<u8>>,
}

/// A copy in a live container.
#[derive(sqlx::FromRow)]
struct CopyFacts {
    key: String,
    generation: i64,
    size: i64,
    sha256: Vec<u8>,
    container_uuid: Uuid,
    barcode: String,
    file_number: i64,
    byte_offset: i64,
    byte_length: i64,
}

impl Catalogue {
    /// What the tapes hold, for `catalog rebuild` comparison: `{"cartridges": […],
    /// "containers": […], "copies": […]}` in a stable order (cartridges by barcode, containers
    /// by cartridge and file, copies by cartridge, file and offset).
    ///
    /// Only facts a tape can prove are included, so a catalogue rebuilt from the tapes dumps
    /// equal to the original: cartridges' labels and end of data, durable and verified
    /// containers, and their copies. Left out: operational state (cartridge state, calibration,
    /// mount count), container states and catalogue ids, timestamps, and pending or dead
    /// containers (they hold nothing acknowledged).
    pub async fn dump(&self) -> Result<Value> {
        const OP: &str = "dump";
        let (carts, conts, copies): (Vec<CartridgeFacts>, Vec<ContainerFacts>, Vec<CopyFacts>) = on_pool!(
            &self.backend,
            |pool| {
                let carts = sqlx::query_as(
                    "SELECT barcode, pool, worm, capacity_bytes, used_bytes, eod_block, next_file, \
                     label_epoch, cartridge_uuid FROM cartridges ORDER BY barcode",
                )
                .fetch_all(pool)
                .await
                .ctx(OP)?;
                let conts = sqlx::query_as(
                    "SELECT uuid, barcode, file_number, first_block, last_block, bytes, record_size, \
                     sha256 FROM containers WHERE state IN ('durable', 'verified') \
                     ORDER BY barcode, file_number, uuid",
                )
                .fetch_all(pool)
                .await
                .ctx(OP)?;
                let copies = sqlx::query_as(
                    "SELECT o.key, o.generation, o.size, o.sha256, k.uuid AS container_uuid, \
                            k.barcode, k.file_number, c.byte_offset, c.byte_length \
                     FROM copies c \
                     JOIN containers k ON k.id = c.container_id \
                     JOIN objects o ON o.id = c.object_id \
                     WHERE k.state IN ('durable', 'verified') \
                     ORDER BY k.barcode, k.file_number, c.byte_offset, o.key, o.generation",
                )
                .fetch_all(pool)
                .await
                .ctx(OP)?;
                (carts, conts, copies)
            }
        );
        let cartridges = carts
            .into_iter()
            .map(|c| {
                Ok(json!({
                    "barcode": c.barcode,
                    "pool": c.pool,
                    "worm": c.worm,
                    "capacity_bytes": from_db("capacity_bytes", c.capacity_bytes)?,
                    "used_bytes": from_db("used_bytes", c.used_bytes)?,
                    "eod_block": from_db("eod_block", c.eod_block)?,
                    "next_file": from_db("next_file", c.next_file)?,
                    "label_epoch": from_db("label_epoch", c.label_epoch)?,
                    "cartridge_uuid": c.cartridge_uuid,
                }))
            })
            .collect::<Result<Vec<Value>>>()?;
        let containers = conts
            .into_iter()
            .map(|c| {
                Ok(json!({
                    "uuid": c.uuid,
                    "barcode": c.barcode,
                    "file_number": from_db("file_number", c.file_number)?,
                    "first_block": from_db("first_block", c.first_block)?,
                    "last_block": c.last_block.map(|b| from_db("last_block", b)).transpose()?,
                    "bytes": from_db("bytes", c.bytes)?,
                    "record_size": c.record_size,
                    "sha256": c.sha256.map(|h| sha_from_db("container sha256", h).map(hex::encode)).transpose()?,
                }))
            })
            .collect::<Result<Vec<Value>>>()?;
        let copies = copies
            .into_iter()
            .map(|c| {
                Ok(json!({
                    "key": c.key,
                    "generation": from_db("generation", c.generation)?,
                    "size": from_db("size", c.size)?,
                    "sha256": hex::encode(sha_from_db("object sha256", c.sha256)?),
                    "container_uuid": c.container_uuid,
                    "barcode": c.barcode,
                    "file_number": from_db("file_number", c.file_number)?,
                    "offset": from_db("offset", c.byte_offset)?,
                    "length": from_db("length", c.byte_length)?,
                }))
            })
            .collect::<Result<Vec<Value>>>()?;
        Ok(json!({
            "cartridges": cartridges,
            "containers": containers,
            "copies": copies,
        }))
    }
}

#[cfg(test)]
mod tests {
    use crate::catalogue::test_support::{
        TestResult, cat, container_with, copy, on_both_backends, sha,
    };
    use crate::catalogue::testing::TestCatalogue;
    use crate::catalogue::{CartridgeState, Catalogue, ContainerState};
    use uuid::Uuid;

    on_both_backends!(dump_holds_what_tapes_prove_in_a_stable_order);

    /// Build the same archive; `noise` adds what a tape cannot tell (mounts, states, dead tails).
    async fn build(c: &Catalogue, u: [Uuid; 2], noise: bool) -> TestResult {
        c.ensure_pool("p").await?;
        for (b, uuid) in ["D2", "D1"].into_iter().zip(u) {
            c.add_cartridge(b, false, 1_000_000).await?;
            c.set_labelled(b, "p", uuid, 3).await?;
        }
        container_with(
            c,
            "D1",
            &[copy("b", 1, 0, 10, 1), copy("a", 1, 10, 10, 2)],
            ContainerState::Durable,
        )
        .await?;
        if noise {
            c.add_mount("D1").await?;
            c.set_calibrated("D2").await?;
            let dead =
                container_with(c, "D1", &[copy("z", 1, 0, 10, 9)], ContainerState::Pending).await?;
            c.set_container_state(&[dead], ContainerState::Dead).await?;
        }
        let v = container_with(c, "D2", &[copy("c", 1, 0, 10, 3)], ContainerState::Durable).await?;
        if noise {
            c.set_container_state(&[v], ContainerState::Verified)
                .await?;
            c.set_cartridge_state("D2", CartridgeState::Full).await?;
            container_with(c, "D1", &[copy("y", 1, 0, 10, 8)], ContainerState::Pending).await?;
        }
        Ok(())
    }

    async fn dump_holds_what_tapes_prove_in_a_stable_order(db: &TestCatalogue) -> TestResult {
        let c = cat(db);
        let u = [Uuid::new_v4(), Uuid::new_v4()];
        build(c, u, true).await?;
        let d = c.dump().await?;
        let barcodes: Vec<&str> = d["cartridges"]
            .as_array()
            .ok_or("no cartridges")?
            .iter()
            .filter_map(|x| x["barcode"].as_str())
            .collect();
        assert_eq!(barcodes, ["D1", "D2"]);
        assert_eq!(
            d["cartridges"][0]["cartridge_uuid"],
            serde_json::json!(u[1])
        );
        assert_eq!(d["cartridges"][0]["label_epoch"], 3);
        assert!(d["cartridges"][0].get("mount_count").is_none());
        let containers = d["containers"].as_array().ok_or("no containers")?;
        assert_eq!(
            containers.len(),
            2,
            "pending and dead containers are left out: {d}"
        );
        let keys: Vec<&str> = d["copies"]
            .as_array()
            .ok_or("no copies")?
            .iter()
            .filter_map(|x| x["key"].as_str())
            .collect();
        assert_eq!(keys, ["b", "a", "c"], "by cartridge, file and offset");
        assert_eq!(d["copies"][1]["sha256"], hex::encode(sha(2)));
        assert_eq!(d["copies"][1]["offset"], 10);
        // Same archive without the operational noise: equal dumps (container UUIDs aside,
        // which a rebuild reads from the tapes; here they are new, so compare without them).
        let other = crate::catalogue::testing::sqlite().await?;
        build(other.catalogue(), u, false).await?;
        let strip = |mut v: serde_json::Value| {
            for list in ["containers", "copies"] {
                if let Some(items) = v[list].as_array_mut() {
                    for item in items {
                        if let Some(o) = item.as_object_mut() {
                            o.remove("uuid");
                            o.remove("container_uuid");
                        }
                    }
                }
            }
            v
        };
        assert_eq!(strip(d), strip(other.catalogue().dump().await?));
        Ok(())
    }
}
