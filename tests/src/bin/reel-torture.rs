//! `reel-torture`: a seeded torture run of the library (see `reel_tests::torture`).
//!
//! ```text
//! reel-torture [--seed N] [--db sqlite|postgres] [--workers W] [--clients C]
//!              [--wall-seconds S] [--modelled-hours H] [--fault-gap-ms MS]
//!              [--max-file-bytes B] [--cartridges N] [--dir DIR] [--report FILE]
//! ```
//!
//! Prints the report as JSON on stdout; exits 1 if an invariant broke (the seed, the
//! invariant and the history's tail go to stderr), 2 on a usage error.

use std::path::PathBuf;

use reel_tests::torture::{Db, Options, run};

fn usage(msg: &str) -> ! {
    eprintln!(
        "reel-torture: {msg}\nusage: reel-torture [--seed N] [--db sqlite|postgres] [--workers W] \
         [--clients C] [--wall-seconds S] [--modelled-hours H] [--fault-gap-ms MS] \
         [--max-file-bytes B] [--cartridges N] [--dir DIR] [--report FILE]"
    );
    std::process::exit(2)
}

fn num<T: std::str::FromStr>(flag: &str, v: Option<String>) -> T {
    let v = v.unwrap_or_else(|| usage(&format!("{flag} needs a value")));
    v.parse()
        .unwrap_or_else(|_| usage(&format!("{flag}: `{v}` is not a number")))
}

fn main() {
    let mut o = Options {
        seed: 1,
        db: Db::Sqlite,
        workers: 2,
        clients: 4,
        wall_seconds: 120,
        modelled_hours: None,
        fault_gap_ms: 1_500,
        max_file_bytes: 2 << 20,
        cartridges: 12,
        dir: PathBuf::new(),
    };
    let mut dir = None;
    let mut report_file = None;
    let mut args = std::env::args().skip(1);
    while let Some(a) = args.next() {
        match a.as_str() {
            "--seed" => o.seed = num(&a, args.next()),
            "--db" => {
                o.db = match args.next().as_deref() {
                    Some("sqlite") => Db::Sqlite,
                    Some("postgres") => Db::Postgres,
                    other => usage(&format!("--db: {other:?} is neither sqlite nor postgres")),
                }
            }
            "--workers" => o.workers = num(&a, args.next()),
            "--clients" => o.clients = num(&a, args.next()),
            "--wall-seconds" => o.wall_seconds = num(&a, args.next()),
            "--modelled-hours" => o.modelled_hours = Some(num(&a, args.next())),
            "--fault-gap-ms" => o.fault_gap_ms = num(&a, args.next()),
            "--max-file-bytes" => o.max_file_bytes = num(&a, args.next()),
            "--cartridges" => o.cartridges = num(&a, args.next()),
            "--dir" => dir = args.next().map(PathBuf::from),
            "--report" => report_file = args.next().map(PathBuf::from),
            "-h" | "--help" => usage("a seeded torture run of reel"),
            other => usage(&format!("unknown argument `{other}`")),
        }
    }
    if !(1..=8).contains(&o.workers) || o.clients == 0 || o.fault_gap_ms < 100 {
        usage("--workers must be 1..8, --clients at least 1, --fault-gap-ms at least 100");
    }
    let _tmp;
    o.dir = match dir {
        Some(d) => d,
        None => {
            let t = tempfile::Builder::new()
                .prefix(&format!("reel-torture-{}-", o.seed))
                .tempdir()
                .unwrap_or_else(|e| usage(&format!("no temporary directory: {e}")));
            let p = t.path().to_path_buf();
            _tmp = t;
            p
        }
    };
    eprintln!(
        "reel-torture: seed {} on {:?}, {} workers, {} clients, in {}",
        o.seed,
        o.db,
        o.workers,
        o.clients,
        o.dir.display()
    );
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .unwrap_or_else(|e| usage(&format!("no runtime: {e}")));
    let report = rt.block_on(run(o));
    let text = serde_json::to_string_pretty(&report).unwrap_or_default();
    println!("{text}");
    if let Some(f) = report_file {
        let _ = std::fs::write(f, &text);
    }
    if !report.violations.is_empty() {
        for v in &report.violations {
            eprintln!(
                "seed {}: invariant {} broke: {}",
                report.seed, v.invariant, v.detail
            );
        }
        std::process::exit(1);
    }
}
