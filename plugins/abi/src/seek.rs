//! Tape seek cost model and recommended access order (RAO), pure Rust, no dependencies.
//!
//! One copy serves both sides of the ABI: the simulator times its serpentine locates and
//! answers native RAO with it, and the engine orders a recall batch in software from the
//! geometry a plugin reports (`drive_geometry`).
//!
//! The cost model is CERN CTA's (`taped/rao/CTACostHeuristic.cpp`, coefficients measured on
//! LTO-7M media): a locate from the end of one extent to the start of the next costs
//!
//! ```text
//! 4.29 s + 6.69 s·wrap change + 3.2 s·band change − 6.04 s·landing-zone change
//!        + 5.22 s·direction change + 11.32 s·step back + 0.0006192 s per LPOS unit
//! ```
//!
//! Blocks are mapped to physical positions from the end-of-wrap positions (EOWP) the drive
//! reports, as CTA's `InterpolationFilePositionEstimator` does: the wrap of a block is the first
//! wrap whose EOWP is greater than the block, and its LPOS is interpolated linearly within the
//! wrap, forward on even wraps and reversed on odd ones.

/// A physical position on a serpentine medium.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct PhysicalPos {
    /// Wrap number (0 = the first wrap, written forward from BOT).
    pub wrap: u32,
    /// Longitudinal position along the tape.
    pub lpos: u64,
}

/// The medium's serpentine layout.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct TapeGeometry {
    /// Number of wraps; 0 means the medium is modelled as one linear track.
    pub wraps: u32,
    /// Number of bands the wraps are grouped in (4 on LTO).
    pub bands: u32,
    /// Smallest LPOS of a wrap (the BOT end).
    pub min_lpos: u64,
    /// Largest LPOS of a wrap (the EOT end).
    pub max_lpos: u64,
}

impl TapeGeometry {
    /// Bands on every LTO generation.
    pub const LTO_BANDS: u32 = 4;

    /// A serpentine geometry with the LTO default of 4 bands.
    pub fn serpentine(wraps: u32, min_lpos: u64, max_lpos: u64) -> Self {
        TapeGeometry {
            wraps,
            bands: Self::LTO_BANDS,
            min_lpos,
            max_lpos,
        }
    }

    /// A linear (non-serpentine) geometry: access order is always ascending.
    pub fn linear() -> Self {
        TapeGeometry {
            wraps: 0,
            bands: Self::LTO_BANDS,
            min_lpos: 0,
            max_lpos: 0,
        }
    }

    /// Whether the medium is modelled as serpentine (at least one wrap and an LPOS range).
    pub fn is_serpentine(&self) -> bool {
        self.wraps > 0 && self.max_lpos > self.min_lpos
    }

    /// The band a wrap belongs to: `wrap / (wraps / bands)`, as CTA computes it.
    pub fn band_of(&self, wrap: u32) -> u32 {
        let per_band = (self.wraps / self.bands.max(1)).max(1);
        wrap / per_band
    }

    /// The landing zone of an LPOS: 0 in the half nearer BOT, 1 in the other half.
    ///
    /// CTA compares against `(max − min) / 2` without adding `min`; here the midpoint is the
    /// true middle of the LPOS range (the same when `min_lpos` is 0).
    pub fn landing_zone(&self, lpos: u64) -> u32 {
        let mid = self.min_lpos + (self.max_lpos - self.min_lpos) / 2;
        u32::from(lpos >= mid)
    }

    /// Whether a wrap runs forward (from BOT towards EOT): even wraps do.
    pub fn is_forward(wrap: u32) -> bool {
        wrap.is_multiple_of(2)
    }
}

/// CTA's locate cost model. Every coefficient is in seconds.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct CostModel {
    /// Fixed cost of any locate (4.29 s).
    pub base_s: f64,
    /// Added when the target is on another wrap (6.69 s).
    pub wrap_change_s: f64,
    /// Added when the target is in another band (3.2 s).
    pub band_change_s: f64,
    /// Added when the target is in the other landing zone (−6.04 s: a long move is cheaper per
    /// unit than the distance term alone says).
    pub landing_zone_change_s: f64,
    /// Added when the target wrap runs the other way (5.22 s).
    pub direction_change_s: f64,
    /// Added when the target is on the same wrap but behind the head (11.32 s).
    pub step_back_s: f64,
    /// Seconds per LPOS unit travelled (0.0006192 s).
    pub per_lpos_s: f64,
}

impl CostModel {
    /// The coefficients CTA uses (measured by CERN on LTO-7M media).
    pub const fn cta() -> Self {
        CostModel {
            base_s: 4.29,
            wrap_change_s: 6.69,
            band_change_s: 3.2,
            landing_zone_change_s: -6.04,
            direction_change_s: 5.22,
            step_back_s: 11.32,
            per_lpos_s: 0.0006192,
        }
    }

    /// Modelled seconds to locate from `from` (the head) to `to`, never negative.
    ///
    /// The terms are CTA's. A short hop across the landing-zone midpoint would come out
    /// negative under the raw formula; it is clamped to zero.
    pub fn locate_seconds(&self, g: &TapeGeometry, from: PhysicalPos, to: PhysicalPos) -> f64 {
        let wrap_change = from.wrap != to.wrap;
        let band_change = g.band_of(from.wrap) != g.band_of(to.wrap);
        let lz_change = g.landing_zone(from.lpos) != g.landing_zone(to.lpos);
        let direction_change = from.wrap % 2 != to.wrap % 2;
        let step_back = !wrap_change
            && if TapeGeometry::is_forward(from.wrap) {
                from.lpos > to.lpos
            } else {
                from.lpos < to.lpos
            };
        let distance = from.lpos.abs_diff(to.lpos) as f64;
        let flag = |b: bool| if b { 1.0 } else { 0.0 };
        let cost = self.base_s
            + flag(wrap_change) * self.wrap_change_s
            + flag(band_change) * self.band_change_s
            + flag(lz_change) * self.landing_zone_change_s
            + flag(direction_change) * self.direction_change_s
            + flag(step_back) * self.step_back_s
            + distance * self.per_lpos_s;
        cost.max(0.0)
    }
}

impl Default for CostModel {
    fn default() -> Self {
        Self::cta()
    }
}

/// Physical position of a logical block, from the end-of-wrap positions.
///
/// `eowp[w]` is the first block past the end of wrap `w`, for the wraps completed so far. The
/// wrap of a block is the first wrap whose EOWP is greater than it; its LPOS is interpolated
/// within the wrap (reversed on odd wraps). A block past the last reported EOWP lies on the
/// wraps being written: their length in blocks is taken as the mean of the completed wraps'.
/// With no EOWP at all every block is on wrap 0 and its LPOS is the block number (clamped to
/// the range), which keeps the order of blocks and nothing more.
pub fn block_position(g: &TapeGeometry, eowp: &[u64], block: u64) -> PhysicalPos {
    let range = g.max_lpos.saturating_sub(g.min_lpos);
    let last_wrap = g.wraps.saturating_sub(1);
    let Some(&last_eowp) = eowp.last() else {
        return PhysicalPos {
            wrap: 0,
            lpos: g.min_lpos + block.min(range),
        };
    };
    let idx = eowp.partition_point(|&e| e <= block);
    let (wrap, start, end) = if idx < eowp.len() {
        let start = if idx == 0 { 0 } else { eowp[idx - 1] };
        (idx as u64, start, eowp[idx])
    } else {
        let mean = (last_eowp / eowp.len() as u64).max(1);
        let beyond = (block - last_eowp) / mean;
        let start = last_eowp + beyond * mean;
        (eowp.len() as u64 + beyond, start, start + mean)
    };
    let wrap = wrap.min(u64::from(last_wrap)) as u32;
    let span = end.saturating_sub(start).max(1);
    let into = block.saturating_sub(start).min(span);
    let offset = ((into as u128 * range as u128) / span as u128) as u64;
    let lpos = if TapeGeometry::is_forward(wrap) {
        g.min_lpos + offset
    } else {
        g.max_lpos - offset
    };
    PhysicalPos { wrap, lpos }
}

/// An ordering of extents and what the cost model says about it.
#[derive(Clone, Debug, PartialEq)]
pub struct Plan {
    /// Indices into the extents, in the order to read them.
    pub order: Vec<usize>,
    /// Modelled locate seconds of `order` (0 on a linear geometry: not modelled).
    pub modelled_seconds: f64,
    /// Modelled locate seconds of ascending order (0 on a linear geometry).
    pub ascending_seconds: f64,
}

/// Indices of `extents` sorted by first block (stable: equal starts keep their input order).
pub fn ascending_order(extents: &[(u64, u64)]) -> Vec<usize> {
    let mut order: Vec<usize> = (0..extents.len()).collect();
    order.sort_by_key(|&i| extents[i].0);
    order
}

/// Locate cost from the head (at block `head`, just read, or the start block) to `target`.
/// No locate is needed when the target is where the head already is or the next block.
fn hop_seconds(
    g: &TapeGeometry,
    eowp: &[u64],
    model: &CostModel,
    head: u64,
    at_start: bool,
    target: u64,
) -> f64 {
    let contiguous = if at_start {
        target == head
    } else {
        target == head.saturating_add(1)
    };
    if contiguous {
        return 0.0;
    }
    model.locate_seconds(
        g,
        block_position(g, eowp, head),
        block_position(g, eowp, target),
    )
}

/// Modelled locate seconds of reading `extents` in `order`, from `start_block`.
pub fn order_seconds(
    g: &TapeGeometry,
    eowp: &[u64],
    start_block: u64,
    extents: &[(u64, u64)],
    order: &[usize],
    model: &CostModel,
) -> f64 {
    let mut head = start_block;
    let mut at_start = true;
    let mut total = 0.0;
    for &i in order {
        let (first, last) = extents[i];
        total += hop_seconds(g, eowp, model, head, at_start, first);
        head = last.max(first);
        at_start = false;
    }
    total
}

/// Plan the order to read `extents` (`(first_block, last_block)`, inclusive) from the head at
/// `start_block`: greedy shortest-locate-time-first under `model`, kept only when the model
/// says it beats ascending order (otherwise ascending). A linear geometry orders ascending.
pub fn plan_order(
    g: &TapeGeometry,
    eowp: &[u64],
    start_block: u64,
    extents: &[(u64, u64)],
    model: &CostModel,
) -> Plan {
    let ascending = ascending_order(extents);
    if !g.is_serpentine() || extents.len() < 2 {
        let secs = if g.is_serpentine() {
            order_seconds(g, eowp, start_block, extents, &ascending, model)
        } else {
            0.0
        };
        return Plan {
            order: ascending,
            modelled_seconds: secs,
            ascending_seconds: secs,
        };
    }
    let ascending_seconds = order_seconds(g, eowp, start_block, extents, &ascending, model);
    let mut remaining: Vec<usize> = ascending.clone();
    let mut order = Vec::with_capacity(extents.len());
    let mut head = start_block;
    let mut at_start = true;
    let mut greedy_seconds = 0.0;
    while !remaining.is_empty() {
        let mut best = 0usize;
        let mut best_cost = f64::INFINITY;
        for (k, &i) in remaining.iter().enumerate() {
            let c = hop_seconds(g, eowp, model, head, at_start, extents[i].0);
            // Strictly less: ties go to the lower first block (remaining is ascending).
            if c < best_cost {
                best_cost = c;
                best = k;
            }
        }
        let i = remaining.remove(best);
        greedy_seconds += best_cost;
        head = extents[i].1.max(extents[i].0);
        at_start = false;
        order.push(i);
    }
    if greedy_seconds < ascending_seconds {
        Plan {
            order,
            modelled_seconds: greedy_seconds,
            ascending_seconds,
        }
    } else {
        Plan {
            order: ascending,
            modelled_seconds: ascending_seconds,
            ascending_seconds,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn g8() -> TapeGeometry {
        TapeGeometry::serpentine(8, 0, 10_000)
    }

    fn close(a: f64, b: f64) -> bool {
        (a - b).abs() < 1e-9
    }

    #[test]
    fn same_wrap_forward_costs_base_plus_distance() {
        let m = CostModel::cta();
        let c = m.locate_seconds(
            &g8(),
            PhysicalPos {
                wrap: 0,
                lpos: 1000,
            },
            PhysicalPos {
                wrap: 0,
                lpos: 3000,
            },
        );
        assert!(close(c, 4.29 + 2000.0 * 0.0006192), "{c}");
    }

    #[test]
    fn step_back_on_forward_and_reverse_wraps() {
        let m = CostModel::cta();
        // forward wrap 0, target behind: base + step back + distance
        let c = m.locate_seconds(
            &g8(),
            PhysicalPos {
                wrap: 0,
                lpos: 3000,
            },
            PhysicalPos {
                wrap: 0,
                lpos: 1000,
            },
        );
        assert!(close(c, 4.29 + 11.32 + 2000.0 * 0.0006192), "{c}");
        // reverse wrap 1: moving to a larger LPOS is behind the head
        let c = m.locate_seconds(
            &g8(),
            PhysicalPos {
                wrap: 1,
                lpos: 1000,
            },
            PhysicalPos {
                wrap: 1,
                lpos: 3000,
            },
        );
        assert!(close(c, 4.29 + 11.32 + 2000.0 * 0.0006192), "{c}");
        let c = m.locate_seconds(
            &g8(),
            PhysicalPos {
                wrap: 1,
                lpos: 3000,
            },
            PhysicalPos {
                wrap: 1,
                lpos: 1000,
            },
        );
        assert!(close(c, 4.29 + 2000.0 * 0.0006192), "{c}");
    }

    #[test]
    fn wrap_band_direction_and_landing_zone_terms() {
        let m = CostModel::cta();
        // 8 wraps in 4 bands: 2 wraps a band. Wrap 1 -> 2: wrap, band and direction change,
        // same landing zone (both below the midpoint 5000), 100 LPOS apart.
        let c = m.locate_seconds(
            &g8(),
            PhysicalPos { wrap: 1, lpos: 100 },
            PhysicalPos { wrap: 2, lpos: 200 },
        );
        assert!(
            close(c, 4.29 + 6.69 + 3.2 + 5.22 + 100.0 * 0.0006192),
            "{c}"
        );
        // Wrap 0 -> 1: same band; landing zone change 4000 -> 9000.
        let c = m.locate_seconds(
            &g8(),
            PhysicalPos {
                wrap: 0,
                lpos: 4000,
            },
            PhysicalPos {
                wrap: 1,
                lpos: 9000,
            },
        );
        assert!(
            close(c, 4.29 + 6.69 - 6.04 + 5.22 + 5000.0 * 0.0006192),
            "{c}"
        );
        // Wrap 0 -> 2: same direction, band change, no step back across wraps.
        let c = m.locate_seconds(
            &g8(),
            PhysicalPos {
                wrap: 0,
                lpos: 9000,
            },
            PhysicalPos {
                wrap: 2,
                lpos: 8000,
            },
        );
        assert!(close(c, 4.29 + 6.69 + 3.2 + 1000.0 * 0.0006192), "{c}");
    }

    #[test]
    fn short_hop_across_the_midpoint_is_clamped_to_zero() {
        let m = CostModel::cta();
        let c = m.locate_seconds(
            &g8(),
            PhysicalPos {
                wrap: 0,
                lpos: 4999,
            },
            PhysicalPos {
                wrap: 0,
                lpos: 5001,
            },
        );
        assert_eq!(c, 0.0);
    }

    #[test]
    fn blocks_interpolate_within_wraps_and_reverse_on_odd_ones() {
        let g = g8();
        let eowp = [100, 200, 300];
        assert_eq!(
            block_position(&g, &eowp, 0),
            PhysicalPos { wrap: 0, lpos: 0 }
        );
        assert_eq!(
            block_position(&g, &eowp, 50),
            PhysicalPos {
                wrap: 0,
                lpos: 5000
            }
        );
        assert_eq!(
            block_position(&g, &eowp, 99),
            PhysicalPos {
                wrap: 0,
                lpos: 9900
            }
        );
        assert_eq!(
            block_position(&g, &eowp, 100),
            PhysicalPos {
                wrap: 1,
                lpos: 10_000
            }
        );
        assert_eq!(
            block_position(&g, &eowp, 125),
            PhysicalPos {
                wrap: 1,
                lpos: 7500
            }
        );
        assert_eq!(
            block_position(&g, &eowp, 210),
            PhysicalPos {
                wrap: 2,
                lpos: 1000
            }
        );
        // Past the last EOWP: wraps of the mean length (100 blocks) continue.
        assert_eq!(
            block_position(&g, &eowp, 320),
            PhysicalPos {
                wrap: 3,
                lpos: 8000
            }
        );
        assert_eq!(
            block_position(&g, &eowp, 450),
            PhysicalPos {
                wrap: 4,
                lpos: 5000
            }
        );
        // Never past the last wrap.
        assert_eq!(block_position(&g, &eowp, 10_000).wrap, 7);
        // No EOWP: wrap 0, order kept.
        assert_eq!(
            block_position(&g, &[], 42),
            PhysicalPos { wrap: 0, lpos: 42 }
        );
    }

    #[test]
    fn ascending_order_is_stable_by_first_block() {
        assert_eq!(
            ascending_order(&[(5, 6), (1, 2), (5, 5), (0, 0)]),
            vec![3, 1, 0, 2]
        );
    }

    #[test]
    fn linear_geometry_orders_ascending() {
        let p = plan_order(
            &TapeGeometry::linear(),
            &[],
            0,
            &[(30, 31), (10, 11), (20, 20)],
            &CostModel::cta(),
        );
        assert_eq!(p.order, vec![1, 2, 0]);
        assert_eq!(p.modelled_seconds, 0.0);
    }

    #[test]
    fn greedy_beats_ascending_on_serpentine_ends() {
        // 4 wraps of 100 blocks, an LTO-like LPOS range (a whole wrap about 100 s); extents
        // near the BOT end of every wrap and near the EOT end.
        let g = TapeGeometry::serpentine(4, 0, 160_000);
        let eowp = [100, 200, 300, 400];
        // wrap 0 near BOT: block 5; wrap 0 near EOT: 95; wrap 1 near EOT: 105, near BOT: 195;
        // wrap 2 near BOT: 205, EOT: 295; wrap 3 EOT: 305, BOT: 395.
        let extents = [
            (5, 5),
            (95, 95),
            (105, 105),
            (195, 195),
            (205, 205),
            (295, 295),
            (305, 305),
            (395, 395),
        ];
        let m = CostModel::cta();
        let p = plan_order(&g, &eowp, 0, &extents, &m);
        let asc = order_seconds(&g, &eowp, 0, &extents, &ascending_order(&extents), &m);
        assert!(close(p.ascending_seconds, asc));
        assert!(p.modelled_seconds < 0.75 * p.ascending_seconds, "{p:?}");
        // The greedy plan visits every BOT-end extent before crossing to the EOT end.
        let bot_end: Vec<usize> = vec![0, 3, 4, 7];
        let first_four: Vec<usize> = p.order[..4].to_vec();
        let mut sorted = first_four.clone();
        sorted.sort();
        assert_eq!(sorted, bot_end, "{:?}", p.order);
        // A permutation.
        let mut all = p.order.clone();
        all.sort();
        assert_eq!(all, (0..8).collect::<Vec<_>>());
    }

    #[test]
    fn hand_computed_plan_costs() {
        // 2 wraps of 100 blocks, LPOS 0..10000, 2 wraps in 4 bands: one wrap a band... with
        // wraps/bands = 0 the band size is clamped to 1 wrap, so each wrap is its own band.
        let g = TapeGeometry::serpentine(2, 0, 10_000);
        let eowp = [100, 200];
        let m = CostModel::cta();
        // From block 0: extent A at block 90 (wrap 0, lpos 9000), B at 110 (wrap 1, lpos 9000).
        let ex = [(110, 110), (90, 90)];
        // Ascending: 0 -> 90: base + lz change + 9000 units; 90 -> 110: wrap + band + direction.
        let a1 = 4.29 - 6.04 + 9000.0 * 0.0006192;
        let a2 = 4.29 + 6.69 + 3.2 + 5.22;
        let p = plan_order(&g, &eowp, 0, &ex, &m);
        assert!(close(p.ascending_seconds, a1 + a2), "{p:?}");
        // Greedy from 0: to 110 costs wrap+band+dir+lz+9000 units, more than to 90: same order.
        assert_eq!(p.order, vec![1, 0]);
        assert!(close(p.modelled_seconds, a1 + a2));
    }

    #[test]
    fn contiguous_extents_cost_nothing() {
        let g = TapeGeometry::serpentine(2, 0, 10_000);
        let m = CostModel::cta();
        let secs = order_seconds(&g, &[100, 200], 0, &[(0, 9), (10, 19)], &[0, 1], &m);
        assert_eq!(secs, 0.0);
    }
}
