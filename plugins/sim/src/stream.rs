//! Streaming, speed matching, the drive buffer and backhitches (shoe-shining).
//!
//! Records arrive into the drive buffer at the host's pace; the tape drains it at the host's
//! feed rate clamped to `[floor, native]` (speed matching). The host waits only while the
//! buffer is full. When the buffer runs dry the tape stops; the next record pays a backhitch
//! before streaming resumes (an underrun). A synchronous filemark drains the buffer and stops
//! the tape; the next record pays one backhitch too (a sync stop). After a positioning command
//! (load, locate, space, rewind, read) the tape starts with the next record without a
//! backhitch: it is already stopped where it must write.
//!
//! Times are modelled seconds on the drive's timeline (`f64`).

/// Why the tape is stopped.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Stop {
    /// Positioned by a command: the next record starts the tape without a backhitch.
    Positioned,
    /// The buffer ran dry: the next record pays a backhitch (shoe-shining).
    Underrun,
    /// A synchronous filemark stopped the tape: the next record pays a backhitch.
    SyncStop,
}

/// What writing one record cost.
#[derive(Clone, Copy, Debug, Default, PartialEq)]
pub struct WriteCost {
    /// Seconds the host waited (buffer full).
    pub host_wait_s: f64,
    /// Seconds of tape streaming this record takes.
    pub stream_s: f64,
    /// Backhitch seconds paid before this record (0 if none).
    pub backhitch_s: f64,
    /// The backhitch's cause, if any.
    pub backhitch: Option<Stop>,
}

/// The buffer and tape motion of one drive.
#[derive(Clone, Debug)]
pub struct Streamer {
    native: f64,
    floor: f64,
    buffer: f64,
    backhitch_s: f64,
    level: f64,
    t: f64,
    moving_from: f64,
    running: bool,
    stop: Stop,
    rate: f64,
    ewma_bytes: f64,
    ewma_gap: f64,
    last_arrival: Option<f64>,
}

const EWMA: f64 = 0.125;

impl Streamer {
    /// A stopped drive with the given native rate, floor, buffer size and backhitch.
    pub fn new(native_bps: f64, floor_bps: f64, buffer_bytes: f64, backhitch_s: f64) -> Self {
        Streamer {
            native: native_bps,
            floor: floor_bps,
            buffer: buffer_bytes,
            backhitch_s,
            level: 0.0,
            t: 0.0,
            moving_from: 0.0,
            running: false,
            stop: Stop::Positioned,
            rate: native_bps,
            ewma_bytes: 0.0,
            ewma_gap: 0.0,
            last_arrival: None,
        }
    }

    /// The current tape speed in bytes per second.
    pub fn rate(&self) -> f64 {
        self.rate
    }

    /// Bytes in the buffer as of the last event.
    pub fn level(&self) -> f64 {
        self.level
    }

    /// Drain the buffer up to time `to`; the tape stops (underrun) if it runs dry.
    fn advance(&mut self, to: f64) {
        if self.running {
            let start = self.t.max(self.moving_from);
            if to > start {
                let drained = (to - start) * self.rate;
                if drained >= self.level {
                    self.level = 0.0;
                    self.running = false;
                    self.stop = Stop::Underrun;
                } else {
                    self.level -= drained;
                }
            }
        }
        self.t = self.t.max(to);
    }

    fn observe_feed(&mut self, bytes: f64, at: f64) {
        if let Some(prev) = self.last_arrival {
            let gap = (at - prev).max(0.0);
            if self.ewma_gap == 0.0 && self.ewma_bytes == 0.0 {
                self.ewma_bytes = bytes;
                self.ewma_gap = gap;
            } else {
                self.ewma_bytes += EWMA * (bytes - self.ewma_bytes);
                self.ewma_gap += EWMA * (gap - self.ewma_gap);
            }
            let feed = if self.ewma_gap > 0.0 {
                self.ewma_bytes / self.ewma_gap
            } else {
                f64::INFINITY
            };
            self.rate = feed.clamp(self.floor, self.native);
        } else {
            // The feed is not known yet: start at the slowest speed-matching step.
            self.rate = self.floor;
            self.ewma_bytes = 0.0;
            self.ewma_gap = 0.0;
        }
        self.last_arrival = Some(at);
    }

    /// A record of `bytes` arrives at `at`.
    pub fn write(&mut self, bytes: u64, at: f64) -> WriteCost {
        let l = bytes as f64;
        self.advance(at);
        let mut cost = WriteCost::default();
        self.observe_feed(l, at);
        if !self.running {
            self.moving_from = at;
            if self.stop != Stop::Positioned {
                self.moving_from += self.backhitch_s;
                cost.backhitch_s = self.backhitch_s;
                cost.backhitch = Some(self.stop);
            }
            self.running = true;
            self.level = 0.0;
        }
        let mut enter = at;
        if self.level + l > self.buffer {
            let need = (self.level + l - self.buffer).min(self.level);
            let start = self.t.max(self.moving_from);
            enter = start + need / self.rate;
            self.advance(enter);
        }
        self.level += l;
        cost.host_wait_s = enter - at;
        cost.stream_s = l / self.rate;
        cost
    }

    /// Drain everything and stop (a synchronous filemark or a positioning command) at `at`.
    /// Returns the seconds the host waits for the buffer to reach the medium.
    pub fn drain(&mut self, at: f64, cause: Stop) -> f64 {
        self.advance(at);
        let mut done = at;
        if self.running {
            let start = self.t.max(self.moving_from);
            done = start + self.level / self.rate;
            self.level = 0.0;
            self.running = false;
        }
        self.t = self.t.max(done);
        // An underrun already recorded stays an underrun only for streaming; any command
        // that positions the tape or a sync stop replaces the cause.
        self.stop = cause;
        if cause == Stop::Positioned {
            self.last_arrival = None;
        }
        done - at
    }

    /// The buffer is lost (power cut, dead drive): the tape stops where it is.
    pub fn lose_buffer(&mut self) {
        self.level = 0.0;
        self.running = false;
        self.stop = Stop::Positioned;
        self.last_arrival = None;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const MIB: u64 = 1 << 20;

    /// The seed's synthetic writer: 512 MiB in 1 MiB records at `feed` bytes/s, then a
    /// synchronous filemark. Returns (underruns, drive-time streaming rate in MB/s).
    fn synthetic(feed: f64) -> (u32, f64) {
        let mut s = Streamer::new(400e6, 177e6, (1u64 << 30) as f64, 3.0);
        let mut busy = 0.0;
        let mut underruns = 0;
        let mut host = 0.0f64;
        let mut produced = 0.0f64;
        for _ in 0..512 {
            produced += MIB as f64 / feed;
            let at = host.max(produced);
            let c = s.write(MIB, at);
            busy += c.stream_s + c.backhitch_s;
            if c.backhitch == Some(Stop::Underrun) {
                underruns += 1;
            }
            host = at + c.host_wait_s;
        }
        s.drain(host, Stop::SyncStop);
        (underruns, (512 * MIB) as f64 / busy / 1e6)
    }

    #[test]
    fn seed_synthetic_writer_table() {
        // Seed §4.1: 600/250/150/50/20 MB/s → underruns 0/0/1/3/8, streaming 399/250/89/45/20.
        let rows = [
            (600e6, 0, 399.0),
            (250e6, 0, 250.0),
            (150e6, 1, 89.0),
            (50e6, 3, 45.0),
            (20e6, 8, 20.0),
        ];
        for (feed, underruns, mbps) in rows {
            let (u, r) = synthetic(feed);
            assert_eq!(u, underruns, "feed {feed}: underruns");
            eprintln!("feed {feed}: {u} underruns, {r:.1} MB/s");
            assert!(
                (r - mbps).abs() <= mbps * 0.02 + 0.6,
                "feed {feed}: {r} MB/s vs {mbps}"
            );
        }
    }

    #[test]
    fn sync_filemark_makes_the_next_record_pay_one_backhitch() {
        let mut s = Streamer::new(400e6, 177e6, 1e9, 3.0);
        let c = s.write(MIB, 0.0);
        assert_eq!(c.backhitch, None, "after positioning: no backhitch");
        assert_eq!(s.rate(), 177e6, "feed unknown yet: the slowest step");
        let wait = s.drain(0.0, Stop::SyncStop);
        assert!((wait - MIB as f64 / 177e6).abs() < 1e-9);
        let c = s.write(MIB, 1.0);
        assert_eq!(c.backhitch, Some(Stop::SyncStop));
        assert_eq!(c.backhitch_s, 3.0);
    }

    #[test]
    fn host_waits_only_while_the_buffer_is_full() {
        // Buffer of 4 records, tape at 400 MB/s, host infinitely fast.
        let mut s = Streamer::new(400e6, 177e6, (4 * MIB) as f64, 3.0);
        let mut host = 0.0;
        let mut waits = Vec::new();
        for _ in 0..8 {
            let c = s.write(MIB, host);
            waits.push(c.host_wait_s);
            host += c.host_wait_s;
        }
        assert!(waits[..4].iter().all(|w| *w == 0.0), "{waits:?}");
        let per = MIB as f64 / 400e6;
        for w in &waits[5..] {
            assert!((w - per).abs() < 1e-9, "{waits:?}");
        }
    }
}
