//! Streaming, speed matching, the drive buffer and backhitches (shoe-shining).
//!
//! Records arrive into the drive buffer at the host's pace; the tape drains it at the host's
//! feed rate clamped to `[floor, native]` (speed matching). The host waits only while the
//! buffer is full. A stopped tape starts once the buffer holds `start_bytes` (a drive writes
//! whole data sets, so it does not set the tape moving for a few bytes) or a command flushes
//! it. When the buffer runs dry the tape stops; the restart pays a backhitch before streaming
//! resumes (an underrun). A synchronous filemark drains the buffer and stops
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

/// What a drain (synchronous filemark or positioning command) cost.
#[derive(Clone, Copy, Debug, Default, PartialEq)]
pub struct DrainCost {
    /// Seconds the host waits for the buffer to reach the medium.
    pub wait_s: f64,
    /// Backhitch seconds paid to start a tape that was waiting for a data set (0 if none).
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
    start_bytes: f64,
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
    /// A stopped drive with the given native rate, floor, buffer size and backhitch, whose
    /// stopped tape starts once the buffer holds `start_bytes` (at most the buffer).
    pub fn new(
        native_bps: f64,
        floor_bps: f64,
        buffer_bytes: f64,
        start_bytes: f64,
        backhitch_s: f64,
    ) -> Self {
        Streamer {
            native: native_bps,
            floor: floor_bps,
            buffer: buffer_bytes,
            start_bytes: start_bytes.min(buffer_bytes),
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
        if !self.running
            && self.level + l >= self.start_bytes
            && let Some(cause) = self.start(at)
        {
            cost.backhitch_s = self.backhitch_s;
            cost.backhitch = Some(cause);
        }
        let mut enter = at;
        if self.level + l > self.buffer {
            let need = (self.level + l - self.buffer).min(self.level);
            let start = self.t.max(self.moving_from);
            enter = start + need / self.rate;
            self.advance(enter);
        }
        self.level += l;
        // The host's pace is measured from when the drive took the previous record: time it
        // spent waiting for room in a full buffer is the drive's, not the host's, and counting
        // it would make a drive that fell behind (after a backhitch, say) read its own slow
        // drain as a slow host and stay at the floor for good.
        self.last_arrival = Some(enter);
        cost.host_wait_s = enter - at;
        cost.stream_s = l / self.rate;
        cost
    }

    /// Set the stopped tape moving at `at` with what the buffer holds; returns the cause of the
    /// backhitch this restart pays, if any (none after a positioning command).
    fn start(&mut self, at: f64) -> Option<Stop> {
        self.moving_from = at;
        self.running = true;
        if self.stop == Stop::Positioned {
            return None;
        }
        self.moving_from += self.backhitch_s;
        Some(self.stop)
    }

    /// Drain everything and stop (a synchronous filemark or a positioning command) at `at`.
    pub fn drain(&mut self, at: f64, cause: Stop) -> DrainCost {
        self.advance(at);
        let mut cost = DrainCost::default();
        // A tape still waiting for a data set starts now: the flush forces it.
        if !self.running
            && self.level > 0.0
            && let Some(why) = self.start(at)
        {
            cost.backhitch_s = self.backhitch_s;
            cost.backhitch = Some(why);
        }
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
        } else if self.last_arrival.is_some() {
            // The host waited for the flush: its next record is timed from when it returned.
            self.last_arrival = Some(done);
        }
        cost.wait_s = done - at;
        cost
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
    /// The default `sim.start_bytes`.
    const START: f64 = (4 * MIB) as f64;

    /// The seed's synthetic writer: 512 MiB in 1 MiB records at `feed` bytes/s, then a
    /// synchronous filemark. Returns (underruns, drive-time streaming rate in MB/s).
    fn synthetic(feed: f64) -> (u32, f64) {
        let mut s = Streamer::new(400e6, 177e6, (1u64 << 30) as f64, START, 3.0);
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
        let mut s = Streamer::new(400e6, 177e6, 1e9, 0.0, 3.0);
        let c = s.write(MIB, 0.0);
        assert_eq!(c.backhitch, None, "after positioning: no backhitch");
        assert_eq!(s.rate(), 177e6, "feed unknown yet: the slowest step");
        let wait = s.drain(0.0, Stop::SyncStop).wait_s;
        assert!((wait - MIB as f64 / 177e6).abs() < 1e-9);
        let c = s.write(MIB, 1.0);
        assert_eq!(c.backhitch, Some(Stop::SyncStop));
        assert_eq!(c.backhitch_s, 3.0);
    }

    #[test]
    fn a_fast_host_keeps_the_tape_at_native_speed_after_a_backhitch() {
        // A host producing 1 MiB every millisecond (about 1 GB/s) into a 64 MiB buffer. The
        // first record is followed by a 50 ms pause (the tape runs dry: an underrun and a 3 s
        // backhitch). The buffer then fills while the tape is stopped and the host waits for
        // room: that waiting is not the host's pace, so the tape must come back to 400 MB/s.
        let mut s = Streamer::new(400e6, 177e6, (64 * MIB) as f64, 0.0, 3.0);
        let mut host = 0.0;
        let c = s.write(MIB, host);
        host += c.host_wait_s + 0.050;
        let mut underruns = 0;
        for _ in 0..2000 {
            let c = s.write(MIB, host);
            if c.backhitch == Some(Stop::Underrun) {
                underruns += 1;
            }
            host += c.host_wait_s + 0.001;
        }
        assert_eq!(underruns, 1);
        assert_eq!(s.rate(), 400e6, "the drive speed-matched to its own drain");
    }

    #[test]
    fn a_stopped_tape_waits_for_a_data_set_before_it_moves() {
        // A container header (100 bytes), a pause while the host reads its first data, then
        // data records: the tape does not start for the header alone, so nothing underruns.
        let mut s = Streamer::new(400e6, 177e6, 1e9, START, 3.0);
        assert_eq!(s.write(100, 0.0).backhitch, None);
        for i in 0..64 {
            let c = s.write(MIB, 0.010 + i as f64 * 0.001);
            assert_eq!(c.backhitch, None, "record {i}");
        }
        // A sync stop, then less than a data set and a flush: the flush starts the tape and
        // pays the restart's backhitch.
        s.drain(1.0, Stop::SyncStop);
        assert_eq!(s.write(100, 2.0).backhitch, None);
        let d = s.drain(2.5, Stop::SyncStop);
        assert_eq!(d.backhitch, Some(Stop::SyncStop));
        assert!((d.wait_s - (3.0 + 100.0 / s.rate())).abs() < 1e-9, "{d:?}");
    }

    #[test]
    fn host_waits_only_while_the_buffer_is_full() {
        // Buffer of 4 records, tape at 400 MB/s, host infinitely fast.
        let mut s = Streamer::new(400e6, 177e6, (4 * MIB) as f64, 0.0, 3.0);
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
