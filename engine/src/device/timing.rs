//! What a drive's own timings say about crossing a gap on tape: LOCATE or read through.
//!
//! A LOCATE costs a fixed settle plus travel; reading through costs the streaming time of every
//! block in the gap. Which is cheaper depends on the drive generation, the medium and the
//! firmware, so reel learns it from the drive itself: every sequential record read adds to the
//! streaming figure, every forward LOCATE of a known distance to a least-squares line
//! `seconds = settle + per_block × distance`. The break-even gap is `settle / (read_per_block −
//! locate_per_block)`. Until the drive has shown enough (three forward locates over different
//! distances and some streaming), the configured `read_through_gap_bytes` decides.

/// Forward locates needed before the fitted line is trusted.
const MIN_LOCATES: u32 = 3;
/// Sequential reads needed before the streaming figure is trusted.
const MIN_READS: u64 = 16;
/// How far the learned break-even may stray from the configured gap, either way.
const MAX_FACTOR: u64 = 8;

/// Timing figures of one drive, accumulated over its sessions.
#[derive(Debug, Default, Clone, PartialEq)]
pub struct DriveTimings {
    read_s: f64,
    reads: u64,
    locates: u32,
    sx: f64,
    sy: f64,
    sxx: f64,
    sxy: f64,
}

impl DriveTimings {
    /// A record read right after the previous one (no locate between) took `ns`.
    pub fn sequential_read(&mut self, ns: u64) {
        self.read_s += ns as f64 / 1e9;
        self.reads += 1;
    }

    /// A LOCATE from block `from` forward to block `to` took `ns`. Backward locates (a wrap
    /// turn, a step back) say nothing about forward gaps and are ignored.
    pub fn forward_locate(&mut self, from: u64, to: u64, ns: u64) {
        if to <= from {
            return;
        }
        let x = (to - from) as f64;
        let y = ns as f64 / 1e9;
        self.locates += 1;
        self.sx += x;
        self.sy += y;
        self.sxx += x * x;
        self.sxy += x * y;
    }

    /// Learned `(settle seconds, locate seconds per block, read seconds per block)`, once
    /// there is enough to go on and the figures make sense.
    pub fn learned(&self) -> Option<(f64, f64, f64)> {
        if self.locates < MIN_LOCATES || self.reads < MIN_READS {
            return None;
        }
        let n = f64::from(self.locates);
        let var = n * self.sxx - self.sx * self.sx;
        // Distances too alike to separate the settle from the travel.
        if var <= f64::EPSILON * n * self.sxx.max(1.0) {
            return None;
        }
        let per_block = (n * self.sxy - self.sx * self.sy) / var;
        let settle = (self.sy - per_block * self.sx) / n;
        let read = self.read_s / self.reads as f64;
        (settle.is_finite() && settle > 0.0 && per_block >= 0.0 && read > per_block)
            .then_some((settle, per_block, read))
    }

    /// The longest forward gap, in blocks, worth reading through rather than locating over:
    /// the learned break-even within `[configured / 8, configured × 8]`, else `configured`.
    pub fn read_through_blocks(&self, configured: u64) -> u64 {
        match self.learned() {
            Some((settle, locate, read)) => {
                let even = settle / (read - locate);
                let lo = (configured / MAX_FACTOR) as f64;
                let hi = configured.saturating_mul(MAX_FACTOR) as f64;
                even.clamp(lo, hi.max(lo)) as u64
            }
            None => configured,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The simulator's LTO-9 model: 2 s settle, travel at 1.4556 ns per byte, streaming at
    /// 400 MB/s, 1 MiB blocks; its break-even is 2 / (2.5 − 1.4556) ns ≈ 1826 MiB.
    fn lto9() -> DriveTimings {
        let block = (1u64 << 20) as f64;
        let per_block_locate = 1.4556e-9 * block;
        let per_block_read = block / 400e6;
        let mut t = DriveTimings::default();
        for _ in 0..100 {
            t.sequential_read((per_block_read * 1e9) as u64);
        }
        for (from, to) in [(0u64, 5_000u64), (10, 80_000), (100, 1_000_000)] {
            let s = 2.0 + per_block_locate * (to - from) as f64;
            t.forward_locate(from, to, (s * 1e9) as u64);
        }
        t
    }

    #[test]
    fn learns_the_break_even_of_the_model() {
        let t = lto9();
        let (settle, _, _) = t.learned().unwrap();
        assert!((settle - 2.0).abs() < 1e-3, "{settle}");
        let even = t.read_through_blocks(1024);
        assert!((1815..=1835).contains(&even), "{even}");
    }

    #[test]
    fn configured_gap_until_the_drive_has_shown_enough() {
        let mut t = DriveTimings::default();
        assert_eq!(t.read_through_blocks(1024), 1024);
        for _ in 0..100 {
            t.sequential_read(2_600_000);
        }
        // Two locates, or three over one distance, cannot separate settle from travel.
        t.forward_locate(0, 1000, 2_000_000_000);
        t.forward_locate(0, 1000, 2_000_000_000);
        assert_eq!(t.read_through_blocks(1024), 1024);
        t.forward_locate(5, 1005, 2_000_000_000);
        assert_eq!(t.read_through_blocks(1024), 1024);
        // Backward locates are ignored.
        t.forward_locate(9000, 10, 30_000_000_000);
        assert_eq!(t.read_through_blocks(1024), 1024);
    }

    #[test]
    fn nonsense_is_ignored_and_extremes_are_clamped() {
        let mut t = DriveTimings::default();
        for _ in 0..100 {
            t.sequential_read(1_000);
        }
        // Locating costs more per block than reading: never locate... within the clamp.
        for (d, s) in [(1000u64, 3.0), (2000, 5.0), (4000, 9.0)] {
            t.forward_locate(0, d, (s * 1e9) as u64);
        }
        assert_eq!(t.read_through_blocks(1024), 1024);
        let mut t = DriveTimings::default();
        for _ in 0..100 {
            t.sequential_read(1_000_000_000);
        }
        for (d, s) in [(1000u64, 10.0), (2000, 10.0), (4000, 10.0)] {
            t.forward_locate(0, d, (s * 1e9) as u64);
        }
        assert_eq!(
            t.read_through_blocks(1024),
            128,
            "clamped to configured / 8"
        );
    }
}
