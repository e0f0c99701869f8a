//! The `reel` command.

use clap::Parser;
use tracing_subscriber::EnvFilter;

fn main() -> std::process::ExitCode {
    let cli = reel_jobs::cli::Cli::parse();
    // The demo prints its own summary; a worker logs what it does.
    let default = if matches!(cli.command, reel_jobs::cli::Command::Demo) {
        "warn"
    } else {
        "warn,reel_jobs=info,reel_engine=info"
    };
    tracing_subscriber::fmt()
        .with_env_filter(
            EnvFilter::try_from_env("REEL_LOG").unwrap_or_else(|_| EnvFilter::new(default)),
        )
        .with_writer(std::io::stderr)
        .init();
    let runtime = match tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
    {
        Ok(r) => r,
        Err(e) => {
            eprintln!("reel: cannot start the async runtime: {e}");
            return std::process::ExitCode::from(1);
        }
    };
    let json = cli.json;
    let result: anyhow::Result<i32> =
        runtime.block_on(async { Ok(reel_jobs::cli::run(cli).await?) });
    match result {
        Ok(status) => std::process::ExitCode::from(status.clamp(0, 255) as u8),
        Err(e) => {
            if json {
                println!("{}", serde_json::json!({"error": format!("{e:#}")}));
            }
            eprintln!("reel: error: {e:#}");
            std::process::ExitCode::from(1)
        }
    }
}
