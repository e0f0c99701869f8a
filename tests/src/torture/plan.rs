//! The run's schedule, a function of its seed alone: what each client submits, in order, and
//! the chaos driver's faults with their times. The history records when each step really ran
//! (process scheduling decides that, so a replay repeats the schedule, not the interleaving).

use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};

/// One thing a client asks of reel.
#[derive(Debug, Clone, serde::Serialize)]
#[serde(tag = "op", rename_all = "snake_case")]
pub enum ClientOp {
    /// Archive a new directory of files of these sizes (storage class `two`: a copy in each
    /// pool).
    Archive {
        /// Sizes of the files, bytes.
        sizes: Vec<u64>,
    },
    /// Recall `count` acknowledged objects, chosen by `pick` among those acknowledged so far.
    Recall {
        /// How many.
        count: u32,
        /// Chooses them (deterministic given the acknowledged set).
        pick: u64,
    },
    /// Verify a sample of the library: one container in `every`.
    VerifySample {
        /// The sampling interval.
        every: u64,
    },
    /// Verify every container of one cartridge holding data, chosen by `pick`.
    VerifyCartridge {
        /// Chooses the cartridge.
        pick: u64,
    },
    /// Repack one cartridge holding data, chosen by `pick`, within its pool: every live
    /// object moves to another cartridge while faults, kills and freezes go on.
    Repack {
        /// Chooses the cartridge.
        pick: u64,
    },
    /// Take every cartridge the catalogue does not know into a pool.
    Intake {
        /// `p1` or `p2`.
        pool: String,
    },
}

/// One fault the chaos driver injects.
#[derive(Debug, Clone, serde::Serialize)]
#[serde(tag = "fault", rename_all = "snake_case")]
pub enum Fault {
    /// `kill -9` a worker process; it is started again after `down_ms`.
    Kill {
        /// Which worker.
        worker: u32,
        /// How long it stays down.
        down_ms: u64,
    },
    /// `SIGSTOP` a worker for `frozen_ms` (often past its lease), then `SIGCONT`.
    Freeze {
        /// Which worker.
        worker: u32,
        /// How long it stays frozen.
        frozen_ms: u64,
    },
    /// A simulator fault on a drive, through its owner's mailbox: the `control` request.
    Drive {
        /// Which drive.
        drive: u32,
        /// The JSON `control` request.
        request: String,
        /// A drive that dies is serviced (robot recovery, the drive replaced) this much later,
        /// as an operator would.
        service_after_ms: Option<u64>,
    },
    /// A stored block of a cartridge of pool `p2` damaged on the medium (`corrupt_stored`), or
    /// made unreadable (`medium_error`, in the process owning `drive`). Only pool `p2`: every
    /// object keeps its `p1` copy whole, so none may be reported lost.
    Medium {
        /// `corrupt_stored` or `medium_error`.
        kind: String,
        /// Chooses the cartridge among p2's written ones.
        pick: u64,
        /// Chooses the block among its data blocks.
        block_pick: u64,
        /// The drive whose process arms a `medium_error`.
        drive: u32,
    },
    /// Every connection to the database is terminated (PostgreSQL only).
    DropConnections,
    /// A file system is filled (a file takes every free byte) for `hold_ms`, then freed: the
    /// one recalls write into, or `reel serve`'s upload spool.
    FillDisk {
        /// How long it stays full.
        hold_ms: u64,
        /// The spool (else the recall destinations').
        spool: bool,
    },
}

/// A client's next operation, drawn from its own generator.
pub fn client_op(rng: &mut StdRng, max_file: u64) -> ClientOp {
    match rng.gen_range(0..100u32) {
        0..45 => {
            let n = rng.gen_range(1..=8usize);
            let sizes = (0..n)
                .map(|_| match rng.gen_range(0..10u32) {
                    0 => 0,
                    1..=6 => rng.gen_range(1..=64 * 1024),
                    _ => rng.gen_range(64 * 1024..=max_file),
                })
                .collect();
            ClientOp::Archive { sizes }
        }
        45..80 => ClientOp::Recall {
            count: rng.gen_range(1..=6),
            pick: rng.r#gen(),
        },
        80..88 => ClientOp::VerifySample {
            every: rng.gen_range(2..=8),
        },
        88..93 => ClientOp::VerifyCartridge { pick: rng.r#gen() },
        93..97 => ClientOp::Repack { pick: rng.r#gen() },
        _ => ClientOp::Intake {
            pool: if rng.gen_bool(0.5) { "p1" } else { "p2" }.into(),
        },
    }
}

/// The size of the uploader's next object: empty now and then, mostly small, some up to
/// `max_file`.
pub fn upload_size(rng: &mut StdRng, max_file: u64) -> u64 {
    match rng.gen_range(0..10u32) {
        0 => 0,
        1..=5 => rng.gen_range(1..=64 * 1024),
        _ => rng.gen_range(64 * 1024..=max_file.max(64 * 1024)),
    }
}

/// The generator of client `n` of a run with `seed`.
pub fn client_rng(seed: u64, n: u32) -> StdRng {
    StdRng::seed_from_u64(seed ^ (0x9E37_79B9_7F4A_7C15u64.wrapping_mul(u64::from(n) + 1)))
}

/// The chaos schedule: (milliseconds after the start, fault), over `window_ms`, with a fault
/// every `mean_gap_ms` on average, for `workers` workers (worker `i` owns drive `i`).
pub fn chaos(
    seed: u64,
    window_ms: u64,
    mean_gap_ms: u64,
    workers: u32,
    postgres: bool,
) -> Vec<(u64, Fault)> {
    let mut rng = StdRng::seed_from_u64(seed.rotate_left(17) ^ 0xC4A0_5EED);
    let mut out = Vec::new();
    let mut t = 3_000;
    loop {
        t += rng.gen_range(mean_gap_ms / 2..=mean_gap_ms * 3 / 2);
        if t >= window_ms {
            break;
        }
        let worker = rng.gen_range(0..workers);
        let drive = worker;
        let d = |req: String| Fault::Drive {
            drive,
            request: req,
            service_after_ms: None,
        };
        let f = match rng.gen_range(0..100u32) {
            0..12 => Fault::Kill {
                worker,
                down_ms: rng.gen_range(200..3_000),
            },
            12..22 => Fault::Freeze {
                worker,
                // Often past the 4 s lease: the worker must find itself fenced when it wakes.
                frozen_ms: rng.gen_range(1_000..9_000),
            },
            22..30 => d(format!(
                r#"{{"op":"fault","kind":"corrupt_write","drive":{drive},"offset":{}}}"#,
                rng.gen_range(0..4096u32)
            )),
            30..38 => d(format!(
                r#"{{"op":"fault","kind":"corrupt_read","drive":{drive},"offset":{}}}"#,
                rng.gen_range(0..4096u32)
            )),
            38..43 => d(format!(
                r#"{{"op":"fault","kind":"deferred_write_error","drive":{drive}}}"#
            )),
            43..48 => d(format!(
                r#"{{"op":"fault","kind":"drive_fault","drive":{drive}}}"#
            )),
            48..53 => d(format!(
                r#"{{"op":"fault","kind":"unit_attention","drive":{drive}}}"#
            )),
            53..57 => d(format!(
                r#"{{"op":"fault","kind":"position_lost","drive":{drive}}}"#
            )),
            57..61 => d(format!(
                r#"{{"op":"fault","kind":"cleaning_required","drive":{drive}}}"#
            )),
            61..66 => Fault::Drive {
                drive,
                request: format!(
                    r#"{{"op":"fault","kind":"drive_dies","drive":{drive},"after_records":{}}}"#,
                    rng.gen_range(0..40u32)
                ),
                service_after_ms: Some(rng.gen_range(2_000..10_000)),
            },
            66..71 => d(format!(
                r#"{{"op":"fault","kind":"power_cut","drive":{drive},"after_records":{}}}"#,
                rng.gen_range(1..40u32)
            )),
            71..74 => d(r#"{"op":"power_cut"}"#.to_string()),
            74..79 => d(format!(
                r#"{{"op":"fault","kind":"early_warning","drive":{drive},"bytes":{}}}"#,
                rng.gen_range(0..8u64 << 20)
            )),
            79..83 => d(format!(
                r#"{{"op":"fault","kind":"end_of_medium","drive":{drive},"bytes":{}}}"#,
                rng.gen_range(0..8u64 << 20)
            )),
            83..85 => d(format!(
                r#"{{"op":"fault","kind":"short_write","drive":{drive},"bytes":{}}}"#,
                rng.gen_range(1..4096u64)
            )),
            // Corruption on the medium as it is written, which the drive does not notice:
            // the read-back verify must.
            85..87 => d(format!(
                r#"{{"op":"fault","kind":"silent_corrupt_write","drive":{drive},"offset":{}}}"#,
                rng.gen_range(0..4096u32)
            )),
            87..92 => Fault::Medium {
                kind: "corrupt_stored".into(),
                pick: rng.r#gen(),
                block_pick: rng.r#gen(),
                drive,
            },
            92..95 => Fault::Medium {
                kind: "medium_error".into(),
                pick: rng.r#gen(),
                block_pick: rng.r#gen(),
                drive,
            },
            95..98 => Fault::FillDisk {
                hold_ms: rng.gen_range(1_000..6_000),
                spool: rng.gen_bool(0.5),
            },
            _ if postgres => Fault::DropConnections,
            _ => Fault::Freeze {
                worker,
                frozen_ms: rng.gen_range(5_000..9_000),
            },
        };
        out.push((t, f));
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_verify_error_names_its_blocks() {
        let e = "2 of 13 containers failed (container 6 on RL0005L9: block 37: container layout: \
                 record 10 follows …; container 9 on RL0006L9: record at block 76 fails its \
                 CRC32C on the way); `reel jobs retry x`";
        assert_eq!(
            crate::torture::failed_blocks(e),
            vec![("RL0005L9".to_string(), 37), ("RL0006L9".to_string(), 76)]
        );
    }

    #[test]
    fn the_schedule_is_a_function_of_the_seed() {
        let a = serde_json::to_string(&chaos(7, 600_000, 2_000, 2, true)).unwrap();
        let b = serde_json::to_string(&chaos(7, 600_000, 2_000, 2, true)).unwrap();
        let c = serde_json::to_string(&chaos(8, 600_000, 2_000, 2, true)).unwrap();
        assert_eq!(a, b);
        assert_ne!(a, c);
        let ops = |s| {
            let mut r = client_rng(s, 1);
            (0..50)
                .map(|_| serde_json::to_string(&client_op(&mut r, 1 << 20)).unwrap())
                .collect::<Vec<_>>()
        };
        assert_eq!(ops(7), ops(7));
        assert_ne!(ops(7), ops(8));
    }
}
