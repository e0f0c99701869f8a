//! Which cartridges a repack or a reclaim takes: the selection an operator or a client gives
//! (`reel repack`, `POST /v1/jobs/repack`), and the per-pool policies of `[repack]` that a
//! worker runs on its own (`reel repack policy` shows what they would do). One place decides
//! both, so a dry run says exactly what a job would do.

use std::collections::HashSet;

use reel_engine::catalogue::{Cartridge, CartridgeState, Catalogue, ReclaimCheck};
use serde::Serialize;

use crate::config::Config;
use crate::error::Result;
use crate::job::{MAX_JOB_CARTRIDGES, RepackSelection};
use crate::submission::SubmissionError;

/// A cartridge a repack would empty, with what it holds.
#[derive(Debug, Clone, PartialEq, Serialize, utoipa::ToSchema)]
pub struct Candidate {
    /// The cartridge.
    pub barcode: String,
    /// Its pool.
    pub pool: Option<String>,
    /// Its state.
    pub state: String,
    /// Its media generation, from its native capacity (`LTO-8`), when known.
    pub media: Option<String>,
    /// Bytes written to it.
    pub used_bytes: u64,
    /// Live objects on it.
    pub live_objects: u64,
    /// Their bytes.
    pub live_bytes: u64,
}

impl Candidate {
    /// Live bytes as a fraction of used bytes (1 when nothing is used: nothing to gain).
    pub fn live_ratio(&self) -> f64 {
        if self.used_bytes == 0 {
            1.0
        } else {
            self.live_bytes as f64 / self.used_bytes as f64
        }
    }
}

/// LTO generations by native capacity (bytes).
const LTO: [(&str, u64); 6] = [
    ("LTO-5", 1_500_000_000_000),
    ("LTO-6", 2_500_000_000_000),
    ("LTO-7", 6_000_000_000_000),
    ("LTO-8", 12_000_000_000_000),
    ("LTO-9", 18_000_000_000_000),
    ("LTO-10", 30_000_000_000_000),
];

/// The LTO generation whose native capacity is within 10 % of `capacity_bytes`, if any.
pub fn media_generation(capacity_bytes: u64) -> Option<&'static str> {
    LTO.iter()
        .find(|(_, c)| capacity_bytes.abs_diff(*c) <= c / 10)
        .map(|(g, _)| *g)
}

fn invalid(field: &'static str, value: &str, reason: impl Into<String>) -> SubmissionError {
    SubmissionError::Invalid {
        field,
        value: value.to_string(),
        reason: reason.into(),
    }
}

/// States a repack may be asked to read from (it makes them `repacking` while it runs): not
/// new (nothing on it), exported (not in the library) or repacking (another job's).
pub fn repackable(state: CartridgeState) -> bool {
    matches!(
        state,
        CartridgeState::Active
            | CartridgeState::Full
            | CartridgeState::Disabled
            | CartridgeState::Broken
    )
}

/// What `cart` holds, as a candidate.
async fn candidate(cat: &Catalogue, cart: &Cartridge) -> Result<Candidate> {
    let live = cat.live_on(&cart.barcode).await?;
    Ok(Candidate {
        barcode: cart.barcode.clone(),
        pool: cart.pool.clone(),
        state: cart.state.as_str().to_string(),
        media: media_generation(cart.capacity_bytes).map(str::to_string),
        used_bytes: cart.used_bytes,
        live_objects: live.objects,
        live_bytes: live.bytes,
    })
}

/// The cartridges `sel` names that a repack can empty now, in barcode order: every condition
/// given holds, and each has live data. Refused, saying why: no condition, a barcode unknown
/// or in a state nothing is read from (new, exported, or repacking already), a bad state or
/// ratio, more than [`MAX_JOB_CARTRIDGES`], a selection that matches nothing.
pub async fn select(cat: &Catalogue, sel: &RepackSelection) -> Result<Vec<Candidate>> {
    if sel.barcodes.is_empty()
        && sel.pool.is_none()
        && sel.state.is_none()
        && sel.media.is_none()
        && sel.live_below.is_none()
    {
        return Err(SubmissionError::Missing {
            field: "selection",
            message: "name the cartridges to repack: barcodes, a pool, a state, a media generation or a live ratio".into(),
        }
        .into());
    }
    let state: Option<CartridgeState> = match &sel.state {
        Some(s) => Some(s.parse().map_err(|_| {
            invalid(
                "state",
                s,
                "not a cartridge state (full, active, disabled, broken)",
            )
        })?),
        None => None,
    };
    if let Some(r) = sel.live_below
        && !(r > 0.0 && r <= 1.0)
    {
        return Err(invalid(
            "live_below",
            &r.to_string(),
            "a fraction above 0 and at most 1 (0.3: less than 30 % of the written bytes live)",
        )
        .into());
    }
    if let Some(m) = &sel.media
        && !LTO.iter().any(|(g, _)| g.eq_ignore_ascii_case(m))
    {
        return Err(invalid("media", m, "not a media generation (LTO-5 … LTO-10)").into());
    }
    let all = cat.cartridges().await?;
    let named: HashSet<&str> = sel.barcodes.iter().map(String::as_str).collect();
    if named.len() != sel.barcodes.len() {
        return Err(invalid(
            "barcodes",
            &sel.barcodes.join(","),
            "a barcode is listed twice",
        )
        .into());
    }
    for b in &named {
        let Some(c) = all.iter().find(|c| c.barcode == *b) else {
            return Err(invalid("barcodes", b, "not in the catalogue").into());
        };
        if c.state == CartridgeState::Repacking {
            return Err(invalid(
                "barcodes",
                b,
                "is being repacked already (`reel jobs list` shows the repack job)",
            )
            .into());
        }
        if !repackable(c.state) {
            return Err(invalid(
                "barcodes",
                b,
                format!("is {}: nothing is read from it", c.state),
            )
            .into());
        }
    }
    let mut out = Vec::new();
    for c in &all {
        if !named.is_empty() && !named.contains(c.barcode.as_str()) {
            continue;
        }
        if !repackable(c.state) || state.is_some_and(|s| s != c.state) {
            continue;
        }
        if sel
            .pool
            .as_ref()
            .is_some_and(|p| c.pool.as_ref() != Some(p))
        {
            continue;
        }
        if sel.media.as_ref().is_some_and(|m| {
            !media_generation(c.capacity_bytes).is_some_and(|g| g.eq_ignore_ascii_case(m))
        }) {
            continue;
        }
        let cand = candidate(cat, c).await?;
        if cand.live_objects == 0 {
            continue;
        }
        if sel.live_below.is_some_and(|r| cand.live_ratio() >= r) {
            continue;
        }
        out.push(cand);
    }
    if out.is_empty() {
        return Err(invalid(
            "selection",
            &describe(sel),
            "matches no cartridge with live data to move",
        )
        .into());
    }
    if out.len() > MAX_JOB_CARTRIDGES {
        return Err(invalid(
            "selection",
            &describe(sel),
            format!(
                "matches {} cartridges; at most {MAX_JOB_CARTRIDGES} per job: narrow it",
                out.len()
            ),
        )
        .into());
    }
    Ok(out)
}

/// The selection in words, for refusals.
pub fn describe(sel: &RepackSelection) -> String {
    let mut parts = Vec::new();
    if !sel.barcodes.is_empty() {
        parts.push(format!("barcodes {}", sel.barcodes.join(",")));
    }
    if let Some(p) = &sel.pool {
        parts.push(format!("pool {p}"));
    }
    if let Some(s) = &sel.state {
        parts.push(format!("state {s}"));
    }
    if let Some(m) = &sel.media {
        parts.push(format!("media {m}"));
    }
    if let Some(r) = sel.live_below {
        parts.push(format!("live below {r}"));
    }
    parts.join(", ")
}

/// The reclaim check of each cartridge named (`barcodes`), or of every full or disabled
/// cartridge when none is named.
pub async fn reclaim_checks(cat: &Catalogue, barcodes: &[String]) -> Result<Vec<ReclaimCheck>> {
    let names: Vec<String> = if barcodes.is_empty() {
        cat.cartridges()
            .await?
            .into_iter()
            .filter(|c| matches!(c.state, CartridgeState::Full | CartridgeState::Disabled))
            .map(|c| c.barcode)
            .collect()
    } else {
        barcodes.to_vec()
    };
    let mut out = Vec::with_capacity(names.len());
    for b in names {
        out.push(cat.reclaim_check(&b).await?);
    }
    Ok(out)
}

/// What the policies of `[repack]` would start now.
#[derive(Debug, Clone, Default, PartialEq, Serialize, utoipa::ToSchema)]
pub struct PolicyPlan {
    /// Whether the policies are on (`[repack] auto`); a plan is shown either way.
    pub auto: bool,
    /// Repacks, one per pool, with the cartridges and why.
    pub repack: Vec<PolicyRepack>,
    /// Cartridges to reclaim.
    pub reclaim: Vec<String>,
}

/// A repack a pool's policy asks for.
#[derive(Debug, Clone, PartialEq, Serialize, utoipa::ToSchema)]
pub struct PolicyRepack {
    /// The pool.
    pub pool: String,
    /// Its cartridges to repack, each with the rule that chose it.
    pub cartridges: Vec<PolicyPick>,
}

/// A cartridge a policy chose, and why.
#[derive(Debug, Clone, PartialEq, Serialize, utoipa::ToSchema)]
pub struct PolicyPick {
    /// The cartridge.
    #[serde(flatten)]
    pub cartridge: Candidate,
    /// The rule that chose it.
    pub why: String,
}

/// What the policies would start now, leaving out cartridges `busy` (named by an unfinished
/// repack or reclaim job) and pools whose policy is off.
pub async fn policy_plan(
    cat: &Catalogue,
    config: &Config,
    busy: &HashSet<String>,
) -> Result<PolicyPlan> {
    let mut plan = PolicyPlan {
        auto: config.repack.auto,
        ..PolicyPlan::default()
    };
    let limit = config.archive.media_alert_limit;
    let all = cat.cartridges().await?;
    for (pool, policy) in &config.repack.pools {
        if policy.off {
            continue;
        }
        let mut chosen = Vec::new();
        for c in all.iter().filter(|c| c.pool.as_ref() == Some(pool)) {
            if busy.contains(&c.barcode) {
                continue;
            }
            if policy.reclaim
                && matches!(c.state, CartridgeState::Full)
                && cat.reclaim_check(&c.barcode).await?.refusal().is_none()
            {
                plan.reclaim.push(c.barcode.clone());
                continue;
            }
            if !repackable(c.state) {
                continue;
            }
            let bad_health = policy.on_bad_health
                && limit > 0
                && cat.medium_alerts(&c.barcode).await? >= u64::from(limit);
            let sparse = policy.live_below > 0.0 && c.state == CartridgeState::Full;
            if !bad_health && !sparse {
                continue;
            }
            let cand = candidate(cat, c).await?;
            if cand.live_objects == 0 {
                continue;
            }
            if bad_health {
                chosen.push(PolicyPick {
                    cartridge: cand,
                    why: format!("{limit}+ unmounts reported medium TapeAlerts"),
                });
            } else if cand.live_ratio() < policy.live_below {
                let why = format!(
                    "live {:.0} % of written, below {:.0} %",
                    cand.live_ratio() * 100.0,
                    policy.live_below * 100.0
                );
                chosen.push(PolicyPick {
                    cartridge: cand,
                    why,
                });
            }
        }
        chosen.truncate(MAX_JOB_CARTRIDGES);
        if !chosen.is_empty() {
            plan.repack.push(PolicyRepack {
                pool: pool.clone(),
                cartridges: chosen,
            });
        }
    }
    plan.reclaim.truncate(MAX_JOB_CARTRIDGES);
    Ok(plan)
}

/// The jobs a plan starts: one repack per pool (each cartridge stays in its pool), one
/// reclaim for every cartridge to reclaim. `by` is who runs the policy.
pub fn policy_jobs(plan: &PolicyPlan, by: &str) -> Vec<crate::job::JobSpec> {
    use crate::job::{JobSpec, ReclaimJob, RepackJob};
    let mut jobs: Vec<JobSpec> = plan
        .repack
        .iter()
        .map(|r| {
            let cartridges: Vec<String> = r
                .cartridges
                .iter()
                .map(|p| p.cartridge.barcode.clone())
                .collect();
            JobSpec::Repack(RepackJob {
                selection: RepackSelection {
                    barcodes: cartridges.clone(),
                    ..RepackSelection::default()
                },
                cartridges,
                to_pool: None,
                add_copies: false,
                by: by.to_string(),
            })
        })
        .collect();
    if !plan.reclaim.is_empty() {
        jobs.push(JobSpec::Reclaim(ReclaimJob {
            cartridges: plan.reclaim.clone(),
            by: by.to_string(),
        }));
    }
    jobs
}

/// Cartridges an unfinished repack or reclaim job names: a policy leaves them be.
pub async fn busy(store: &crate::store::JobStore) -> Result<HashSet<String>> {
    use crate::job::{JobSpec, JobState};
    let mut out = HashSet::new();
    for state in [JobState::Queued, JobState::Running] {
        for rec in store.list(Some(state), 10_000).await? {
            match &rec.spec {
                JobSpec::Repack(r) => out.extend(r.cartridges.iter().cloned()),
                JobSpec::Reclaim(r) => out.extend(r.cartridges.iter().cloned()),
                _ => {}
            }
        }
    }
    Ok(out)
}

/// What the queue says against a repack or reclaim job, checked wherever one is made (the
/// CLI, the API, a policy): a cartridge an unfinished repack or reclaim job names already, and,
/// for a reclaim, a cartridge with reads queued (a relabel under them would fail them). Other
/// jobs pass. `busy` is [`busy`]'s answer, read once by a caller that checks several jobs.
pub async fn queue_refusal(
    store: &crate::store::JobStore,
    busy: &HashSet<String>,
    spec: &crate::job::JobSpec,
) -> Result<()> {
    use crate::job::JobSpec;
    let (cartridges, reclaim) = match spec {
        JobSpec::Repack(r) => (&r.cartridges, false),
        JobSpec::Reclaim(r) => (&r.cartridges, true),
        _ => return Ok(()),
    };
    if let Some(b) = cartridges.iter().find(|b| busy.contains(*b)) {
        return Err(invalid(
            "barcodes",
            b,
            "an unfinished repack or reclaim job names it already (`reel jobs list`)",
        )
        .into());
    }
    if reclaim {
        let requests = crate::TapeRequests::new(store.db().clone());
        for b in cartridges {
            let queued = requests.queued_reads_of(b).await?;
            if let Some(first) = queued.first() {
                return Err(invalid(
                    "barcodes",
                    b,
                    format!(
                        "{} reads are queued for it (job {}); reclaim it once they are done",
                        queued.len(),
                        first.job_id
                    ),
                )
                .into());
            }
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn media_generations_come_from_native_capacity() {
        assert_eq!(media_generation(18_000_000_000_000), Some("LTO-9"));
        assert_eq!(media_generation(12_000_000_000_000), Some("LTO-8"));
        // A cartridge reports a little less than its nominal capacity.
        assert_eq!(media_generation(17_500_000_000_000), Some("LTO-9"));
        assert_eq!(media_generation(4_000_000_000_000), None);
        assert_eq!(media_generation(0), None);
    }

    #[test]
    fn the_live_ratio_of_an_unused_cartridge_gains_nothing() {
        let c = Candidate {
            barcode: "A".into(),
            pool: None,
            state: "full".into(),
            media: None,
            used_bytes: 0,
            live_objects: 0,
            live_bytes: 0,
        };
        assert_eq!(c.live_ratio(), 1.0);
        let half = Candidate {
            used_bytes: 100,
            live_bytes: 50,
            ..c
        };
        assert_eq!(half.live_ratio(), 0.5);
    }
}
