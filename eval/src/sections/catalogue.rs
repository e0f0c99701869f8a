//! The catalogue at scale: bulk insert of objects (as closing containers does, one transaction
//! a container) and key look-up latency, on PostgreSQL (`REEL_TEST_POSTGRES_URL`, a fresh
//! schema dropped afterwards) and on SQLite. Wall clock: MEASURED.

use std::time::Instant;

use anyhow::{Result, anyhow};
use rand::{Rng, SeedableRng, rngs::StdRng};
use reel_engine::catalogue::{Catalogue, ContainerState, NewCopy};
use serde_json::json;

use crate::row::{Basis, Row, Target, percentile};
use crate::sections::Ctx;

const PER_CONTAINER: u64 = 10_000;
const OBJECT: u64 = 16 << 10;
const RECORD: u32 = 1 << 20;

fn key(i: u64) -> String {
    format!("bench/{:03}/{i:010}", i % 997)
}

/// Where a bulk load's wall clock went, in seconds: creating containers, closing them (objects
/// and copies inserted), marking them durable, and building the copies in the bench itself.
#[derive(Clone, Copy, Debug, Default)]
struct FillTime {
    total_s: f64,
    create_s: f64,
    close_s: f64,
    durable_s: f64,
}

impl FillTime {
    fn json(&self) -> serde_json::Value {
        json!({
            "create_container_s": self.create_s,
            "close_container_s": self.close_s,
            "set_durable_s": self.durable_s,
            "bench_s": self.total_s - self.create_s - self.close_s - self.durable_s,
        })
    }
}

async fn fill(cat: &Catalogue, n: u64) -> Result<FillTime> {
    cat.add_cartridge("RL0001L9", false, 64 << 30)
        .await
        .map_err(|e| anyhow!("{e}"))?;
    cat.ensure_pool("bench").await.map_err(|e| anyhow!("{e}"))?;
    cat.set_labelled("RL0001L9", "bench", uuid::Uuid::new_v4(), 1)
        .await
        .map_err(|e| anyhow!("label: {e}"))?;
    let mut time = FillTime::default();
    let t = Instant::now();
    let containers = n.div_ceil(PER_CONTAINER);
    let blocks = PER_CONTAINER * OBJECT / u64::from(RECORD) + 3;
    for c in 0..containers {
        let first = c * blocks + 2;
        let phase = Instant::now();
        let id = cat
            .create_container(uuid::Uuid::new_v4(), "RL0001L9", c + 1, first, RECORD)
            .await
            .map_err(|e| anyhow!("create container: {e}"))?;
        time.create_s += phase.elapsed().as_secs_f64();
        let lo = c * PER_CONTAINER;
        let hi = (lo + PER_CONTAINER).min(n);
        let copies: Vec<NewCopy> = (lo..hi)
            .map(|i| NewCopy {
                key: key(i),
                generation: 1,
                size: OBJECT,
                sha256: [(i % 251) as u8; 32],
                offset: (i - lo) * OBJECT,
                length: OBJECT,
                meta: None,
            })
            .collect();
        let bytes = (hi - lo) * OBJECT;
        let phase = Instant::now();
        cat.close_container(id, first + blocks - 2, bytes, [7; 32], &copies)
            .await
            .map_err(|e| anyhow!("close container: {e}"))?;
        time.close_s += phase.elapsed().as_secs_f64();
        let phase = Instant::now();
        cat.set_container_state(&[id], ContainerState::Durable)
            .await
            .map_err(|e| anyhow!("container durable: {e}"))?;
        time.durable_s += phase.elapsed().as_secs_f64();
    }
    time.total_s = t.elapsed().as_secs_f64();
    Ok(time)
}

/// `count` look-ups of random keys drawn with `seed` (a second pass uses another seed, so it
/// does not find the first pass's pages already cached).
async fn lookups(cat: &Catalogue, n: u64, count: usize, seed: u64) -> Result<(Vec<f64>, u64)> {
    let mut rng = StdRng::seed_from_u64(seed);
    let mut lat = Vec::with_capacity(count);
    let mut missing = 0;
    for _ in 0..count {
        let k = key(rng.gen_range(0..n));
        let t = Instant::now();
        let o = cat.object(&k).await.map_err(|e| anyhow!("look-up: {e}"))?;
        lat.push(t.elapsed().as_secs_f64() * 1e3);
        if o.is_none() {
            missing += 1;
        }
    }
    Ok((lat, missing))
}

fn rows_for(
    backend: &str,
    n: u64,
    fill: FillTime,
    lat: &[f64],
    missing: u64,
    pg: bool,
) -> Vec<Row> {
    let sec = format!("Catalogue with {n} objects ({backend})");
    let insert_s = fill.total_s;
    let rate = n as f64 / insert_s;
    let p = |q| percentile(lat, q).unwrap_or(f64::NAN);
    let note = format!(
        "{n} objects of 16 KiB in containers of {PER_CONTAINER} (one close_container \
         transaction each, then marked durable), then {} look-ups of random keys \
         (Catalogue::object), one at a time; {missing} key(s) not found",
        lat.len()
    );
    let mut insert = Row::info(&sec, "bulk insert", rate, "objects/s", Basis::Measured)
        .note(note)
        .profile(json!({
            "insert_s": insert_s,
            "insert_phases": fill.json(),
            "lookup_p50_ms": p(50.0),
            "lookup_p99_ms": p(99.0),
        }));
    let mut lookup = Row::info(&sec, "key look-up p99", p(99.0), "ms", Basis::Measured);
    if pg {
        insert = insert.target(Target::AtLeast(50_000.0), "≥ 50 000 objects/s");
        lookup = lookup.target(Target::AtMost(1.0), "≤ 1 ms");
    }
    vec![
        insert,
        Row::info(&sec, "key look-up p50", p(50.0), "ms", Basis::Measured),
        lookup,
        Row::info(
            &sec,
            "keys not found",
            missing as f64,
            "keys",
            Basis::Measured,
        )
        .target(Target::Equals(0.0), "0"),
    ]
}

/// Buffers written out by backends themselves (not the checkpointer or the background
/// writer) since the server started; None where the server does not report it (PostgreSQL
/// 17 moved it to pg_stat_io).
async fn backend_writes(pool: &sqlx::PgPool) -> Option<i64> {
    sqlx::query_scalar("SELECT buffers_backend FROM pg_stat_bgwriter")
        .fetch_one(pool)
        .await
        .ok()
}

/// What the server alone takes to insert objects and copies.
struct Floor {
    objects_s: f64,
    copies_s: f64,
    copies_unchecked_s: f64,
    objects_per_s: f64,
}

/// Insert `m` objects and their copies server-side (`INSERT … SELECT` from `generate_series`,
/// no client, no round trip) in a transaction rolled back, then the copies again with
/// reference checks off (`session_replication_role = replica`, local to the transaction, turns
/// off the per-statement trigger that checks them): the floor under any client path, and the
/// checks' share of it.
async fn server_floor(pool: &sqlx::PgPool, m: i64) -> Result<Floor> {
    let mut tx = pool.begin().await?;
    let t = Instant::now();
    sqlx::query(
        "INSERT INTO objects (key, generation, size, sha256, created_unix) \
         SELECT 'floor/' || lpad(g::text, 10, '0'), 1, 16384, sha256(g::text::bytea), 0 \
         FROM generate_series(1, $1) g",
    )
    .bind(m)
    .execute(&mut *tx)
    .await?;
    let objects_s = t.elapsed().as_secs_f64();
    let container: i64 = sqlx::query_scalar("SELECT MIN(id) FROM containers")
        .fetch_one(&mut *tx)
        .await?;
    let copies = "INSERT INTO copies (object_id, container_id, byte_offset, byte_length) \
                  SELECT id, $1, 0, 16384 FROM objects WHERE key >= 'floor/' AND key < 'floor0'";
    let t = Instant::now();
    sqlx::query(copies)
        .bind(container)
        .execute(&mut *tx)
        .await?;
    let copies_s = t.elapsed().as_secs_f64();
    sqlx::query("DELETE FROM copies WHERE object_id IN (SELECT id FROM objects WHERE key >= 'floor/' AND key < 'floor0')")
        .execute(&mut *tx)
        .await?;
    sqlx::query("SET LOCAL session_replication_role = replica")
        .execute(&mut *tx)
        .await?;
    let t = Instant::now();
    sqlx::query(copies)
        .bind(container)
        .execute(&mut *tx)
        .await?;
    let copies_unchecked_s = t.elapsed().as_secs_f64();
    tx.rollback().await?;
    Ok(Floor {
        objects_s,
        copies_s,
        copies_unchecked_s,
        objects_per_s: m as f64 / (objects_s + copies_s),
    })
}

/// Run the section.
pub fn run(ctx: &Ctx) -> Result<Vec<Row>> {
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()?;
    let (n_pg, n_lite) = if ctx.quick {
        (100_000, 100_000)
    } else {
        (10_000_000, 1_000_000)
    };
    let count = if ctx.quick { 2_000 } else { 10_000 };
    let mut rows = Vec::new();
    // SQLite, in the scratch directory.
    let dir = tempfile::Builder::new()
        .prefix("reel-bench-cat-")
        .tempdir_in(&ctx.scratch)?;
    let url = format!("sqlite:{}", dir.path().join("catalogue.db").display());
    rows.extend(rt.block_on(async {
        let cat = Catalogue::open(&url)
            .await
            .map_err(|e| anyhow!("{url}: {e}"))?;
        let s = fill(&cat, n_lite).await?;
        let (lat, missing) = lookups(&cat, n_lite, count, 7).await?;
        cat.close().await;
        Ok::<_, anyhow::Error>(rows_for("SQLite", n_lite, s, &lat, missing, false))
    })?);
    // PostgreSQL, when configured.
    let Some(base) = ctx.postgres.clone() else {
        rows.push(super::no_postgres_row(&format!(
            "Catalogue with {n_pg} objects (PostgreSQL)"
        )));
        return Ok(rows);
    };
    rows.extend(rt.block_on(super::with_private_schema(
        &base,
        "cat",
        async |cat, _schema| {
            let s = fill(cat, n_pg).await?;
            // First pass straight after the load: the server is still writing the load back
            // (its checkpoint, dirty pages evicted by every look-up that reads a cold page).
            let Some(pool) = cat.pool_postgres() else {
                return Err(anyhow!("a PostgreSQL catalogue without a PostgreSQL pool"));
            };
            let written = backend_writes(pool).await;
            let (lat_fresh, _) = lookups(cat, n_pg, count, 7).await?;
            let written_fresh = backend_writes(pool).await.zip(written).map(|(b, a)| b - a);
            // The catalogue in service: the load written back (CHECKPOINT), other keys.
            sqlx::query("CHECKPOINT")
                .execute(pool)
                .await
                .map_err(|e| anyhow!("CHECKPOINT (the bench's role needs pg_checkpoint): {e}"))?;
            let written = backend_writes(pool).await;
            let (lat, missing) = lookups(cat, n_pg, count, 8).await?;
            let written_settled = backend_writes(pool).await.zip(written).map(|(b, a)| b - a);
            let writes = |w: Option<i64>| w.map_or("not known".to_string(), |w| w.to_string());
            let mut rows = rows_for("PostgreSQL", n_pg, s, &lat, missing, true);
            let p99_fresh = percentile(&lat_fresh, 99.0).unwrap_or(f64::NAN);
            let p50_fresh = percentile(&lat_fresh, 50.0).unwrap_or(f64::NAN);
            if let Some(r) = rows.iter_mut().find(|r| r.measure == "key look-up p99") {
                r.note = format!(
                    "after a CHECKPOINT that wrote the load back, {count} keys other than the \
                     first pass's; straight after the load (diagnosis row) p50 \
                     {p50_fresh:.3} ms, p99 {p99_fresh:.3} ms. Buffers the look-ups' own \
                     backends had to write out to make room (pg_stat_bgwriter.buffers_backend): \
                     {} straight after the load, {} after the CHECKPOINT. A look-up does not \
                     depend on planner statistics: reel's connections run with jit = off \
                     (on tables not yet analysed the planner's cost estimate passed \
                     jit_above_cost and every look-up was compiled before it ran), and the \
                     visibility test is a scalar subquery the planner cannot turn into a \
                     join over whole tables (as an EXISTS it was a semi-join that scanned all \
                     copies: 21 s a look-up at 10 000 000 objects before their first \
                     ANALYZE); see docs/JOBS.md §2",
                    writes(written_fresh),
                    writes(written_settled)
                );
            }
            let floor = server_floor(pool, 20_000).await?;
            let sec = format!("Catalogue with {n_pg} objects (PostgreSQL)");
            if let Some(r) = rows.iter_mut().find(|r| r.measure == "bulk insert") {
                r.note = format!(
                    "{} Where the time goes: the server alone, with no client and no \
                     round trip, inserts {:.0} objects/s into these tables (objects, then \
                     their copies: {:.2} s + {:.2} s for 20 000, rolled back); {:.0} % of \
                     the copies insert is checking that its objects and containers exist \
                     (one trigger per statement, not a foreign key per row: DECISIONS 19; \
                     the same insert with the check off: {:.2} s). close_container binds each \
                     column as one array (UNNEST, 10 000 rows a statement) and the objects insert \
                     returns the new rows' ids, so only keys already catalogued are looked \
                     up; what it adds on top of that floor is the client, on the same \
                     cores as the server. The load's wall clock: create_container {:.1} s, \
                     close_container {:.1} s, marking durable {:.1} s (profile: \
                     insert_phases). reel sets TCP_NODELAY on its connections, which sqlx \
                     0.9.0 no longer does: with Nagle's algorithm on, each close's bind of \
                     about 600 KB waited up to 40 ms for the server's delayed ACK (DECISIONS 21)",
                    r.note,
                    floor.objects_per_s,
                    floor.objects_s,
                    floor.copies_s,
                    100.0 * (1.0 - floor.copies_unchecked_s / floor.copies_s),
                    floor.copies_unchecked_s,
                    s.create_s,
                    s.close_s,
                    s.durable_s
                );
            }
            rows.push(
                Row::info(
                    &sec,
                    "server-side floor: objects + copies inserted by one INSERT … SELECT each (diagnosis)",
                    floor.objects_per_s,
                    "objects/s",
                    Basis::Measured,
                )
                .profile(json!({
                    "objects_s": floor.objects_s,
                    "copies_s": floor.copies_s,
                    "copies_without_reference_check_s": floor.copies_unchecked_s,
                })),
            );
            rows.push(Row::info(
                &sec,
                "key look-up p99 straight after the bulk load (diagnosis)",
                p99_fresh,
                "ms",
                Basis::Measured,
            ));
            Ok(rows)
        },
    ))?);
    Ok(rows)
}
