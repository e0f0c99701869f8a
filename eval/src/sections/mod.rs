//! The benchmark's sections, one module each. A section returns its rows; a section that fails
//! to run returns an error, which the harness turns into a failing row.

use std::path::PathBuf;
use std::sync::Arc;

use anyhow::Result;
use reel_plugin_abi::host::Plugin;

use crate::model::Model;
use crate::row::Row;

pub mod archive;
pub mod catalogue;
pub mod mixed;
pub mod parallel;
pub mod queue;
pub mod recall;
pub mod repack;
pub mod serpentine;
pub mod synthetic;

/// What every section gets.
pub struct Ctx {
    /// The simulator plugin, loaded once.
    pub plugin: Arc<Plugin>,
    /// Its path (for the engine, which loads plugins by path).
    pub plugin_path: PathBuf,
    /// The model the simulator runs with.
    pub model: Model,
    /// Reduced sizes for CI.
    pub quick: bool,
    /// Where libraries, spools and destinations are created.
    pub scratch: PathBuf,
    /// PostgreSQL URL for the database sections (`--postgres`, else REEL_TEST_POSTGRES_URL).
    pub postgres: Option<String>,
}

/// A section of the benchmark.
pub struct Section {
    /// Short name used by `--sections`.
    pub name: &'static str,
    /// What it measures.
    pub title: &'static str,
    /// Runs it.
    pub run: fn(&Ctx) -> Result<Vec<Row>>,
}

/// Every section, in the order the issue lists them where possible.
pub fn all() -> Vec<Section> {
    vec![
        Section {
            name: "synthetic",
            title: "Synthetic writer 600 / 250 / 150 / 50 / 20 MB/s",
            run: synthetic::run,
        },
        Section {
            name: "archive",
            title: "Archive, 1 drive, NONE/FULL/SAMPLED, steady state; host data path",
            run: archive::run,
        },
        Section {
            name: "shoeshine",
            title: "Shoe-shining, spool-fed archive, 2 GiB",
            run: archive::shoe_shining,
        },
        Section {
            name: "drives2",
            title: "Archive, a session per drive, 2 drives, aggregate",
            run: parallel::two_drives,
        },
        Section {
            name: "small",
            title: "Archive of 1 000 000 objects of 16 KiB",
            run: parallel::small_objects,
        },
        Section {
            name: "firstbyte",
            title: "Recall first byte, cold and mounted",
            run: recall::first_byte,
        },
        Section {
            name: "batching",
            title: "Batching, 24 extents on 2 cartridges",
            run: recall::batching,
        },
        Section {
            name: "serpentine",
            title: "Recall order on a serpentine cartridge (280 wraps, full size), 100 random extents",
            run: serpentine::run,
        },
        Section {
            name: "random8",
            title: "One cartridge, 1000 objects of 8 MiB in random order",
            run: recall::random_order,
        },
        Section {
            name: "mixed",
            title: "Mixed: 4 closed-loop readers + 1 archiving writer, 2 drives, one modelled hour",
            run: mixed::run,
        },
        Section {
            name: "catalogue",
            title: "Catalogue at scale: bulk insert and key look-up (PostgreSQL, SQLite)",
            run: catalogue::run,
        },
        Section {
            name: "queue",
            title: "Queue: 1 000 000 recall requests submitted (PostgreSQL and SQLite)",
            run: queue::run,
        },
        Section {
            name: "repack",
            title: "Repack: a source and a destination drive, and user recalls meanwhile",
            run: repack::run,
        },
        Section {
            name: "restore3",
            title: "Restore from 3 drives into one destination directory",
            run: parallel::restore,
        },
    ]
}

/// The gate's row for writes made anywhere but at EOD (the simulator's counter).
pub fn eod_row(section: &str, violations: u64) -> Row {
    Row::info(
        section,
        "writes not at EOD (simulator counter)",
        violations as f64,
        "writes",
        crate::row::Basis::Simulated,
    )
    .target(crate::row::Target::Equals(0.0), "0 (gate)")
}

/// The gate's row for bytes read back that differ from what was written.
pub fn wrong_bytes_row(section: &str, wrong: u64, checked: u64) -> Row {
    Row::info(
        section,
        "wrong bytes read back",
        wrong as f64,
        "bytes",
        crate::row::Basis::Measured,
    )
    .target(crate::row::Target::Equals(0.0), "0 (gate)")
    .note(format!(
        "{checked} bytes recalled, each compared byte for byte"
    ))
}

/// The row a PostgreSQL part of `section` gives when no server is configured: a failing row,
/// not a silent skip.
pub fn no_postgres_row(section: &str) -> Row {
    Row::info(section, "ran", 0.0, "bool", crate::row::Basis::Measured)
        .target(crate::row::Target::Equals(1.0), "runs on PostgreSQL")
        .note("no PostgreSQL: give --postgres URL or set REEL_TEST_POSTGRES_URL to a database reel may create a schema in")
}

/// Run `f` on a catalogue opened in a private schema `reel_bench_<tag>_<pid>` of the PostgreSQL
/// database `base` (`f` gets the schema name too); the schema is dropped afterwards, whatever
/// `f` returned.
pub async fn with_private_schema<T>(
    base: &str,
    tag: &str,
    f: impl AsyncFnOnce(&reel_engine::catalogue::Catalogue, &str) -> Result<T>,
) -> Result<T> {
    let schema = format!("reel_bench_{tag}_{}", std::process::id());
    let sep = if base.contains('?') { '&' } else { '?' };
    let url = format!("{base}{sep}schema={schema}");
    let cat = reel_engine::catalogue::Catalogue::open(&url)
        .await
        .map_err(|e| anyhow::anyhow!("PostgreSQL: {e}"))?;
    let r = f(&cat, &schema).await;
    if let Some(pool) = cat.pool_postgres() {
        // The schema name is built from a fixed tag and this process id.
        let _ = sqlx::query(sqlx::AssertSqlSafe(format!(
            "DROP SCHEMA IF EXISTS {schema} CASCADE"
        )))
        .execute(pool)
        .await;
    }
    cat.close().await;
    r
}
