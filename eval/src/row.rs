//! One measured figure of a run, its target, the model's bound and the verdict.

use serde::{Deserialize, Serialize};

/// Where a figure comes from.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "SCREAMING_SNAKE_CASE")]
pub enum Basis {
    /// Modelled time from the simulator (drive busy time, `elapsed_ns`): says what the model says.
    Simulated,
    /// Wall clock or CPU time on this machine: says what this machine did.
    Measured,
}

/// What a figure must reach.
#[derive(Clone, Copy, Debug, PartialEq, Serialize, Deserialize)]
#[serde(tag = "kind", content = "value", rename_all = "snake_case")]
pub enum Target {
    /// Informational: no verdict.
    None,
    /// At least this value.
    AtLeast(f64),
    /// At most this value.
    AtMost(f64),
    /// Exactly this value (counts).
    Equals(f64),
    /// Within a tolerance of a value: `(value, tolerance)`.
    Within(f64, f64),
}

impl Target {
    /// The verdict for `value`, `None` when there is no target.
    pub fn check(&self, value: f64) -> Option<bool> {
        match *self {
            Target::None => None,
            Target::AtLeast(t) => Some(value >= t),
            Target::AtMost(t) => Some(value <= t),
            Target::Equals(t) => Some((value - t).abs() < 1e-9),
            Target::Within(t, tol) => Some((value - t).abs() <= tol),
        }
    }

    /// Whether a larger value is better (for the efficiency against a bound).
    pub fn higher_is_better(&self) -> bool {
        !matches!(self, Target::AtMost(_))
    }
}

/// One row of the results.
#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct Row {
    /// The section this row belongs to.
    pub section: String,
    /// What is measured.
    pub measure: String,
    /// The figure.
    pub value: f64,
    /// Its unit.
    pub unit: String,
    /// SIMULATED or MEASURED.
    pub basis: Basis,
    /// The seed's figure for the same measure, where the seed has one.
    pub seed_value: Option<f64>,
    /// The target, machine-checked.
    pub target: Target,
    /// The target as the issue words it.
    pub target_text: String,
    /// The model's lower bound (best possible) for this workload, where defined.
    pub bound: Option<f64>,
    /// Value against the bound (1.0 = the model's best), where a bound is defined.
    pub efficiency: Option<f64>,
    /// The verdict: `None` for an informational row.
    pub pass: Option<bool>,
    /// The workload, and for a miss where the time goes.
    pub note: String,
    /// Counters that show where the time went (drive busy/stream/locate/mount, backhitches, …).
    pub profile: serde_json::Value,
}

impl Row {
    /// An informational row (no target).
    pub fn info(section: &str, measure: &str, value: f64, unit: &str, basis: Basis) -> Row {
        Row {
            section: section.to_string(),
            measure: measure.to_string(),
            value,
            unit: unit.to_string(),
            basis,
            seed_value: None,
            target: Target::None,
            target_text: String::new(),
            bound: None,
            efficiency: None,
            pass: None,
            note: String::new(),
            profile: serde_json::Value::Null,
        }
    }

    /// Set the target and compute the verdict.
    pub fn target(mut self, target: Target, text: &str) -> Row {
        self.target = target;
        self.target_text = text.to_string();
        self.pass = target.check(self.value);
        self.refresh_efficiency();
        self
    }

    /// Whether a larger value is better: the target's direction, or for a row without a
    /// target, lower is better for times (unit `s`).
    pub fn higher_is_better(&self) -> bool {
        match self.target {
            Target::None => self.unit != "s",
            t => t.higher_is_better(),
        }
    }

    /// Recompute the verdict and the efficiency from the value, target and bound (for rows
    /// read back from a results file written by an older harness).
    pub fn refreshed(mut self) -> Row {
        self.pass = self.target.check(self.value);
        self.refresh_efficiency();
        self
    }

    fn refresh_efficiency(&mut self) {
        if let Some(b) = self.bound {
            self.efficiency = efficiency(self.value, b, self.higher_is_better());
        }
    }

    /// The seed's figure.
    pub fn seed(mut self, v: f64) -> Row {
        self.seed_value = Some(v);
        self
    }

    /// The model's bound; the efficiency follows from the target's direction.
    pub fn bound(mut self, bound: f64) -> Row {
        self.bound = Some(bound);
        self.refresh_efficiency();
        self
    }

    /// A note on the workload or the result.
    pub fn note(mut self, note: impl Into<String>) -> Row {
        self.note = note.into();
        self
    }

    /// Where the time went.
    pub fn profile(mut self, p: serde_json::Value) -> Row {
        self.profile = p;
        self
    }
}

/// `value / bound` when higher is better, `bound / value` when lower is better.
pub fn efficiency(value: f64, bound: f64, higher_is_better: bool) -> Option<f64> {
    let e = if higher_is_better {
        value / bound
    } else {
        bound / value
    };
    e.is_finite().then_some(e)
}

/// Percentile (nearest rank) of a sample; `None` when empty.
pub fn percentile(values: &[f64], p: f64) -> Option<f64> {
    if values.is_empty() {
        return None;
    }
    let mut v = values.to_vec();
    v.sort_by(f64::total_cmp);
    let rank = ((p / 100.0) * v.len() as f64).ceil().max(1.0) as usize;
    v.get(rank.min(v.len()) - 1).copied()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn targets_decide_by_direction() {
        assert_eq!(Target::AtLeast(370.0).check(369.9), Some(false));
        assert_eq!(Target::AtLeast(370.0).check(370.0), Some(true));
        assert_eq!(Target::AtMost(1.02).check(1.03), Some(false));
        assert_eq!(Target::Equals(3.0).check(3.0), Some(true));
        assert_eq!(Target::Equals(3.0).check(4.0), Some(false));
        assert_eq!(Target::Within(250.0, 5.0).check(244.0), Some(false));
        assert_eq!(Target::None.check(1.0), None);
    }

    #[test]
    fn efficiency_follows_the_target_direction() {
        let r = Row::info("s", "m", 150.0, "MB/s", Basis::Simulated)
            .target(Target::AtLeast(100.0), "")
            .bound(200.0);
        assert_eq!(r.efficiency, Some(0.75));
        let r = Row::info("s", "m", 40.0, "s", Basis::Simulated)
            .target(Target::AtMost(41.0), "")
            .bound(30.0);
        assert_eq!(r.efficiency, Some(0.75));
    }

    #[test]
    fn efficiency_does_not_depend_on_the_order_of_the_calls() {
        let a = Row::info("s", "m", 40.0, "s", Basis::Simulated)
            .bound(30.0)
            .target(Target::AtMost(41.0), "");
        let b = Row::info("s", "m", 40.0, "s", Basis::Simulated)
            .target(Target::AtMost(41.0), "")
            .bound(30.0);
        assert_eq!(a.efficiency, Some(0.75));
        assert_eq!(b.efficiency, Some(0.75));
        // A time without a target: lower is better.
        let c = Row::info("s", "m", 40.0, "s", Basis::Simulated).bound(30.0);
        assert_eq!(c.efficiency, Some(0.75));
    }

    #[test]
    fn percentile_is_nearest_rank() {
        let v: Vec<f64> = (1..=10).map(f64::from).collect();
        assert_eq!(percentile(&v, 50.0), Some(5.0));
        assert_eq!(percentile(&v, 90.0), Some(9.0));
        assert_eq!(percentile(&v, 100.0), Some(10.0));
        assert_eq!(percentile(&[], 50.0), None);
    }
}
