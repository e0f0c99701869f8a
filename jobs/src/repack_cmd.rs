//! `reel repack` and `reel reclaim`: what they would do (`--dry-run`), and the jobs they
//! submit. The selection and the policies are decided in `reel_queue::repack_select`, which
//! the HTTP API and the worker's policy pass use too.

use reel_engine::catalogue::{Catalogue, ReclaimCheck};
use reel_queue::config::Config;
use reel_queue::error::Result;
use reel_queue::job::{JobSpec, ReclaimJob, RepackJob, RepackSelection};
use reel_queue::repack_select::{self, Candidate, PolicyPlan};

/// `reel repack`
#[derive(Debug, clap::Args)]
pub struct RepackArgs {
    /// A cartridge to repack (repeat for several).
    #[arg(long = "barcode", value_name = "BARCODE")]
    pub barcodes: Vec<String>,
    /// Cartridges of this pool.
    #[arg(long)]
    pub pool: Option<String>,
    /// Cartridges in this state: full, active, disabled or broken.
    #[arg(long)]
    pub state: Option<String>,
    /// Cartridges of this media generation (LTO-5 … LTO-10, from their native capacity).
    #[arg(long)]
    pub media: Option<String>,
    /// Cartridges whose live bytes are below this fraction of their written bytes (0.3: less
    /// than 30 % live).
    #[arg(long, value_name = "FRACTION")]
    pub live_below: Option<f64>,
    /// The pool the copies go to (default: each cartridge's own pool).
    #[arg(long)]
    pub to_pool: Option<String>,
    /// Only add a copy in `--to-pool` where an object has none; the sources keep theirs.
    #[arg(long, requires = "to_pool")]
    pub add_copies: bool,
    /// Run the pools' policies (`[repack.pools.POOL]`) now instead of a selection: repack
    /// what they choose and reclaim what they may.
    #[arg(long, conflicts_with_all = ["barcodes", "pool", "state", "media", "live_below", "to_pool", "add_copies"])]
    pub policy: bool,
    /// Say what would be repacked (or, with `--policy`, repacked and reclaimed); submit nothing.
    #[arg(long)]
    pub dry_run: bool,
    #[command(flatten)]
    #[allow(missing_docs)]
    pub submit: crate::cli::SubmitOpts,
}

/// `reel reclaim`
#[derive(Debug, clap::Args)]
pub struct ReclaimArgs {
    /// Cartridges to reclaim (default with `--dry-run`: every full or disabled cartridge).
    pub barcodes: Vec<String>,
    /// Say what may be reclaimed and what keeps the others; submit nothing.
    #[arg(long)]
    pub dry_run: bool,
    #[command(flatten)]
    #[allow(missing_docs)]
    pub submit: crate::cli::SubmitOpts,
}

impl RepackArgs {
    /// The selection the flags give.
    pub fn selection(&self) -> RepackSelection {
        RepackSelection {
            barcodes: self.barcodes.clone(),
            pool: self.pool.clone(),
            state: self.state.clone(),
            media: self.media.clone(),
            live_below: self.live_below,
        }
    }
}

fn refused(field: &'static str, value: &str, reason: String) -> reel_queue::error::JobsError {
    reel_queue::submission::SubmissionError::Invalid {
        field,
        value: value.to_string(),
        reason,
    }
    .into()
}

/// The repack job a selection makes, with the cartridges it chose. Besides the selection's
/// own checks, refused: a cartridge an unfinished repack or reclaim job names already; copies
/// added into a source's own pool (it holds them already); a destination pool with no
/// cartridge to write to (none active in it but the sources, and no new one to label).
pub async fn repack_job(
    cat: &Catalogue,
    store: &reel_queue::store::JobStore,
    selection: RepackSelection,
    to_pool: Option<String>,
    add_copies: bool,
    by: String,
) -> Result<(JobSpec, Vec<Candidate>)> {
    let chosen = repack_select::select(cat, &selection).await?;
    let cartridges: Vec<String> = chosen.iter().map(|c| c.barcode.clone()).collect();
    if add_copies && let Some(c) = chosen.iter().find(|c| c.pool == to_pool) {
        return Err(refused(
            "to_pool",
            to_pool.as_deref().unwrap_or(""),
            format!(
                "cartridge {} is in that pool: its objects have their copy there already; add copies to another pool",
                c.barcode
            ),
        ));
    }
    if let Some(p) = &to_pool
        && !cat.pool_exists(p).await?
    {
        return Err(refused(
            "to_pool",
            p,
            "no such pool; a pool exists once a cartridge is taken into it (`reel intake --pool`)"
                .into(),
        ));
    }
    let all = cat.cartridges().await?;
    let sources: std::collections::HashSet<&str> =
        chosen.iter().map(|c| c.barcode.as_str()).collect();
    let spare = all
        .iter()
        .any(|c| c.state == reel_engine::catalogue::CartridgeState::New && !c.worm);
    let mut pools: Vec<&str> = match &to_pool {
        Some(p) => vec![p.as_str()],
        None => chosen.iter().filter_map(|c| c.pool.as_deref()).collect(),
    };
    pools.sort();
    pools.dedup();
    for p in pools {
        let writable = all.iter().any(|c| {
            c.pool.as_deref() == Some(p)
                && c.state == reel_engine::catalogue::CartridgeState::Active
                && !sources.contains(c.barcode.as_str())
        });
        if !writable && !spare {
            return Err(refused(
                "to_pool",
                p,
                format!(
                    "pool {p} has no cartridge to write the copies to besides the ones repacked, \
                     and the library has no new cartridge to label; take one in (`reel intake \
                     --pool {p}`) or name another pool (--to-pool)"
                ),
            ));
        }
    }
    let spec = JobSpec::Repack(RepackJob {
        selection,
        cartridges,
        to_pool,
        add_copies,
        by,
    });
    let busy = repack_select::busy(store).await?;
    repack_select::queue_refusal(store, &busy, &spec).await?;
    Ok((spec, chosen))
}

/// The reclaim job for `barcodes`, refused when one of them holds something to keep, an
/// unfinished repack or reclaim names it, or reads are queued for it.
pub async fn reclaim_job(
    cat: &Catalogue,
    store: &reel_queue::store::JobStore,
    barcodes: Vec<String>,
    by: String,
) -> Result<JobSpec> {
    let job = ReclaimJob {
        cartridges: barcodes,
        by,
    };
    reel_queue::submission::check_reclaim(cat, &job).await?;
    let spec = JobSpec::Reclaim(job);
    let busy = repack_select::busy(store).await?;
    repack_select::queue_refusal(store, &busy, &spec).await?;
    Ok(spec)
}

/// One line per candidate, with a heading.
pub fn candidates_text(cs: &[Candidate]) -> String {
    let mut t = format!(
        "{:<10} {:<12} {:<10} {:<7} {:>10} {:>10} {:>12} {:>6}\n",
        "BARCODE", "POOL", "STATE", "MEDIA", "USED", "OBJECTS", "LIVE", "LIVE%"
    );
    for c in cs {
        t.push_str(&format!(
            "{:<10} {:<12} {:<10} {:<7} {:>10} {:>10} {:>12} {:>5.0}%\n",
            c.barcode,
            c.pool.as_deref().unwrap_or("-"),
            c.state,
            c.media.as_deref().unwrap_or("-"),
            reel_queue::text::human_bytes(c.used_bytes),
            c.live_objects,
            reel_queue::text::human_bytes(c.live_bytes),
            c.live_ratio() * 100.0
        ));
    }
    t
}

/// What each reclaim check says.
pub fn checks_text(checks: &[ReclaimCheck]) -> String {
    if checks.is_empty() {
        return "no full or disabled cartridge\n".into();
    }
    let mut t = String::new();
    for c in checks {
        match c.refusal() {
            None => t.push_str(&format!(
                "{}: may be reclaimed ({} of dead space back)\n",
                c.barcode,
                reel_queue::text::human_bytes(c.used_bytes)
            )),
            Some(why) => t.push_str(&format!("{}: kept: {why}\n", c.barcode)),
        }
    }
    t
}

/// What a policy plan would do.
pub fn plan_text(plan: &PolicyPlan) -> String {
    let mut t = String::new();
    if !plan.auto {
        t.push_str("([repack] auto is off: workers run no policy on their own)\n");
    }
    if plan.repack.is_empty() && plan.reclaim.is_empty() {
        t.push_str("the policies ask for nothing now\n");
    }
    for r in &plan.repack {
        t.push_str(&format!("repack in pool {}:\n", r.pool));
        for p in &r.cartridges {
            t.push_str(&format!("  {}: {}\n", p.cartridge.barcode, p.why));
        }
    }
    if !plan.reclaim.is_empty() {
        t.push_str(&format!("reclaim: {}\n", plan.reclaim.join(" ")));
    }
    t
}

/// The policy plan now, leaving out cartridges an unfinished job names.
pub async fn plan(
    cat: &Catalogue,
    config: &Config,
    store: &reel_queue::store::JobStore,
) -> Result<PolicyPlan> {
    let busy = repack_select::busy(store).await?;
    repack_select::policy_plan(cat, config, &busy).await
}
