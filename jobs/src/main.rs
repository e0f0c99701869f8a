//! The `reel` command.
//!
//! Nothing here or in [`reel_jobs::logging`] panics when stdout or stderr is a closed pipe or a
//! full disk. Rust ignores SIGPIPE (SIG_IGN before `main`), so such a write returns EPIPE
//! instead of killing the process; keep it that way, a worker must get to its graceful
//! shutdown when the reader of its log is gone.

use clap::Parser;
use reel_jobs::logging;

fn main() -> std::process::ExitCode {
    let cli = reel_jobs::cli::Cli::parse();
    logging::init(cli.command.log_filter(cli.verbose));
    let runtime = match tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
    {
        Ok(r) => r,
        Err(e) => {
            logging::stderr_line(format_args!("reel: cannot start the async runtime: {e}"));
            return std::process::ExitCode::from(1);
        }
    };
    let json = cli.json;
    let result: anyhow::Result<i32> =
        runtime.block_on(async { Ok(reel_jobs::cli::run(cli).await?) });
    // Bounded: dropping the runtime waits for every task and blocking thread, and a database
    // pool's background task was once seen spinning there for minutes after the command had
    // printed its answer (a `reel jobs wait` in the torture run). The answer is out; leave.
    runtime.shutdown_timeout(std::time::Duration::from_secs(2));
    match result {
        Ok(status) => std::process::ExitCode::from(status.clamp(0, 255) as u8),
        Err(e) => {
            if json {
                logging::stdout_line(format_args!(
                    "{}",
                    serde_json::json!({"error": format!("{e:#}")})
                ));
            }
            logging::stderr_line(format_args!("reel: error: {e:#}"));
            std::process::ExitCode::from(1)
        }
    }
}
