//! Recall ordering: a tape is never read out of order when the order can be known.
//!
//! With the medium's geometry (wraps, LPOS, end-of-wrap positions) the engine plans a
//! greedy shortest-locate-first order under CTA's cost model (`reel_plugin_abi::seek`, the same
//! module the simulator times its locates with). A drive's native RAO is asked too when the
//! plugin offers it. Either plan is kept only when the model says it beats ascending block
//! order; without geometry, ascending order is used. Consecutive extents closer than the
//! read-through gap are then merged into runs read without a LOCATE.

use reel_plugin_abi::seek::{self, CostModel, TapeGeometry};
use reel_plugin_abi::{REEL_CAP_GEOMETRY, REEL_CAP_RAO, ReelExtent};
use serde::{Deserialize, Serialize};
use tracing::debug;

use crate::device::Drive;

/// How a recall batch is ordered.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize, Default)]
#[serde(rename_all = "lowercase")]
pub enum OrderPolicy {
    /// Model-checked RAO where geometry is known, else ascending (the default).
    #[default]
    Auto,
    /// Ascending block order.
    Ascending,
    /// The order the requests came in (for comparisons only: it makes a tape seek).
    Request,
}

/// Where the chosen order came from.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum OrderSource {
    /// Ascending block order.
    Ascending,
    /// Request order.
    Request,
    /// Software RAO under the cost model.
    SoftwareRao,
    /// The drive's native RAO.
    NativeRao,
}

/// A planned order.
#[derive(Clone, Debug, Serialize)]
pub struct Plan {
    /// Indices into the extents, in reading order.
    pub order: Vec<usize>,
    /// What produced it.
    pub source: OrderSource,
    /// Modelled locate seconds of this order, when geometry is known.
    pub modelled_s: Option<f64>,
    /// Modelled locate seconds of ascending order, when geometry is known.
    pub ascending_s: Option<f64>,
}

/// Ascending by first block (stable).
pub fn ascending(extents: &[(u64, u64)]) -> Vec<usize> {
    let mut idx: Vec<usize> = (0..extents.len()).collect();
    idx.sort_by_key(|&i| (extents[i].0, i));
    idx
}

/// Plan the order of `extents` (first, last block) starting from `start_block`.
pub async fn plan(
    drive: &Drive,
    start_block: u64,
    extents: &[(u64, u64)],
    policy: OrderPolicy,
) -> Plan {
    match policy {
        OrderPolicy::Request => {
            return Plan {
                order: (0..extents.len()).collect(),
                source: OrderSource::Request,
                modelled_s: None,
                ascending_s: None,
            };
        }
        OrderPolicy::Ascending => {
            return Plan {
                order: ascending(extents),
                source: OrderSource::Ascending,
                modelled_s: None,
                ascending_s: None,
            };
        }
        OrderPolicy::Auto => {}
    }
    let asc = Plan {
        order: ascending(extents),
        source: OrderSource::Ascending,
        modelled_s: None,
        ascending_s: None,
    };
    if extents.len() < 2 || !drive.has_cap(REEL_CAP_GEOMETRY) {
        return asc;
    }
    let geo = match drive.geometry().await {
        Ok(g) if g.wraps > 0 && !g.eowp.is_empty() => g,
        _ => return asc,
    };
    let tg = TapeGeometry {
        wraps: geo.wraps,
        bands: geo.bands.max(1),
        min_lpos: geo.min_lpos,
        max_lpos: geo.max_lpos,
    };
    let model = CostModel::cta();
    let soft = seek::plan_order(&tg, &geo.eowp, start_block, extents, &model);
    let mut best = Plan {
        source: if soft.order == asc.order {
            OrderSource::Ascending
        } else {
            OrderSource::SoftwareRao
        },
        order: soft.order,
        modelled_s: Some(soft.modelled_seconds),
        ascending_s: Some(soft.ascending_seconds),
    };
    if drive.has_cap(REEL_CAP_RAO) {
        let ext: Vec<ReelExtent> = extents
            .iter()
            .map(|&(first_block, last_block)| ReelExtent {
                first_block,
                last_block,
            })
            .collect();
        if let Ok(native) = drive.rao(ext).await {
            let native: Vec<usize> = native.into_iter().map(|i| i as usize).collect();
            let cost = seek::order_seconds(&tg, &geo.eowp, start_block, extents, &native, &model);
            if cost < best.modelled_s.unwrap_or(f64::INFINITY) {
                best = Plan {
                    order: native,
                    source: OrderSource::NativeRao,
                    modelled_s: Some(cost),
                    ascending_s: best.ascending_s,
                };
            }
        }
    }
    debug!(source = ?best.source, modelled_s = ?best.modelled_s, ascending_s = ?best.ascending_s, "recall order planned");
    best
}

/// Group an ordered list of extents into runs: consecutive extents going forward on tape
/// with a gap of at most `gap_blocks` blocks are read through without a LOCATE.
pub fn runs(extents: &[(u64, u64)], order: &[usize], gap_blocks: u64) -> Vec<Vec<usize>> {
    let mut out: Vec<Vec<usize>> = Vec::new();
    let mut end: Option<u64> = None;
    for &i in order {
        let (first, last) = extents[i];
        match (out.last_mut(), end) {
            // Forward from the run's last block (the same block counts: a shared record is
            // still in the reader's hands), within the read-through gap.
            (Some(run), Some(e)) if first >= e && first <= e + 1 + gap_blocks => {
                run.push(i);
                end = Some(e.max(last));
            }
            _ => {
                out.push(vec![i]);
                end = Some(last);
            }
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ascending_is_stable() {
        let e = [(5, 6), (1, 1), (5, 5)];
        assert_eq!(ascending(&e), vec![1, 0, 2]);
    }

    #[test]
    fn runs_read_through_short_gaps_only_forward() {
        let e = [(10, 12), (14, 15), (100, 101), (50, 50)];
        // gap between 12 and 14 is one block: read through with gap 1.
        assert_eq!(
            runs(&e, &[0, 1, 2, 3], 1),
            vec![vec![0, 1], vec![2], vec![3]]
        );
        // no read-through with gap 0.
        assert_eq!(runs(&e, &[0, 1], 0), vec![vec![0], vec![1]]);
    }

    #[test]
    fn extents_sharing_a_record_stay_in_one_run() {
        // Two small objects in the same record: the second starts on the block the first ends.
        let e = [(10, 10), (10, 11), (11, 11)];
        assert_eq!(runs(&e, &[0, 1, 2], 0), vec![vec![0, 1, 2]]);
    }
}
