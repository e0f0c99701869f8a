//! The `reel` command line: argument parsing (clap) and the commands. Job specs are built with
//! the queue's own constructors ([`reel_queue::job`]) and checked by
//! [`reel_queue::submission::check`], as the HTTP API's are, so both submit the same jobs; only
//! the wording of a refusal is this command's (it names flags).

use reel_engine::session::destination::Overwrite;
use std::io::Write;
use std::path::{Path, PathBuf};

use crate::text::human_bytes;
use std::time::Duration;

use clap::{Args, Parser, Subcommand};
use indicatif::{MultiProgress, ProgressBar, ProgressStyle};
use serde_json::json;
use tokio_util::sync::CancellationToken;

use reel_queue::config::LoadedConfig;
use reel_queue::error::{JobsError, Result};
use reel_queue::job::{
    ArchiveJob, IntakeJob, IntakeSelection, JobSpec, JobState, RebuildJob, RecallJob,
    RecallSelection, SpecError, VerifyJob, VerifyTarget,
};
use reel_queue::{JobQueue, JobRecord};
use reel_worker::worker;

/// reel: a tape archive job engine.
#[derive(Debug, Parser)]
#[command(name = "reel", version, about, propagate_version = true)]
pub struct Cli {
    /// Config file (default: $REEL_CONFIG, else DATA_DIR/reel.toml if present).
    #[arg(long, global = true, value_name = "FILE")]
    pub config: Option<PathBuf>,
    /// Data directory; relative paths in the config resolve against it (default: $REEL_DATA_DIR, else ./reel-data).
    #[arg(long, global = true, value_name = "DIR")]
    pub data_dir: Option<PathBuf>,
    /// Machine-readable output (one JSON document on stdout).
    #[arg(long, global = true)]
    pub json: bool,
    /// Log more on stderr: -v info, -vv debug, -vvv trace (commands log warnings and errors
    /// only by default; `REEL_LOG` overrides both).
    #[arg(short, long, global = true, action = clap::ArgAction::Count)]
    pub verbose: u8,
    /// What to do.
    #[command(subcommand)]
    pub command: Command,
}

/// Top-level commands.
#[derive(Debug, Subcommand)]
pub enum Command {
    /// Archive files or a directory tree to tape.
    Archive(ArchiveArgs),
    /// Recall objects from tape into a directory.
    Recall(RecallArgs),
    /// Read back and check what is on tape.
    Verify(VerifyArgs),
    /// Take new cartridges into the library's catalogue.
    Intake(IntakeArgs),
    /// Delete objects: at once from look-ups and recalls, into the recycle log, where `reel
    /// undelete` brings them back for `[lifecycle] quarantine_days` (a job; keys under a
    /// legal hold are refused).
    Delete(crate::lifecycle_cmd::DeleteArgs),
    /// Bring deleted objects back from the recycle log, within the quarantine.
    Undelete(crate::lifecycle_cmd::UndeleteArgs),
    /// The recycle log: deleted objects, who deleted them, why, until when they come back.
    #[command(subcommand)]
    Recycle(crate::lifecycle_cmd::RecycleCommand),
    /// Legal holds: keys or prefixes nothing deletes until the hold is released.
    #[command(subcommand)]
    Hold(crate::lifecycle_cmd::HoldCommand),
    /// Move every live object off cartridges (by barcode, pool, state, media generation or
    /// live ratio) to cartridges of a pool, or only add missing copies (a job, below user
    /// work); `--policy` runs the pools' policies now; `--dry-run` says what it would do.
    Repack(crate::repack_cmd::RepackArgs),
    /// Relabel cartridges that hold nothing to keep (no live, held, retained or quarantined
    /// data) with a new label epoch and give them back to their pools (a job);
    /// `--dry-run` says what may be reclaimed and what keeps the others.
    Reclaim(crate::repack_cmd::ReclaimArgs),
    /// Inspect and manage jobs.
    #[command(subcommand)]
    Jobs(JobsCommand),
    /// Look things up in the catalogue, or rebuild it from tapes.
    #[command(subcommand)]
    Catalog(CatalogCommand),
    /// Show the library (needs the device plugin).
    #[command(subcommand)]
    Library(LibraryCommand),
    /// The drives of every host: list them, take one out of service and back.
    #[command(subcommand)]
    Drive(crate::drive_cmd::DriveCommand),
    /// The cartridges: list them with their space and state, set a state with a reason.
    #[command(subcommand)]
    Cartridge(crate::cartridge_cmd::CartridgeCommand),
    /// The tape queues: what waits for each cartridge and pool, and why.
    #[command(subcommand)]
    Queue(QueueCommand),
    /// Run a worker: job handlers and drive loops for this host.
    Worker,
    /// Run the whole thing on the simulator in the data dir: archive, recall, verify, summary.
    Demo,
    /// Serve the HTTP API (jobs, catalogue, /metrics, /openapi.json) until SIGTERM or SIGINT.
    Serve(ServeArgs),
    /// Create, list and revoke the API tokens of `reel serve`.
    #[command(subcommand)]
    Token(TokenCommand),
    /// Installed device plugins, and the ABI contract kit.
    #[command(subcommand)]
    Plugin(crate::plugin_cmd::PluginCommand),
    /// Data-encryption keys in the key file (`[keys] file`): create, list, show, print a
    /// paper copy, import one; keys themselves are never shown except by `export-paper
    /// --plain`.
    #[command(subcommand)]
    Key(crate::key_cmd::KeyCommand),
    /// Write the manual pages (reel.1 and one per subcommand) into a directory.
    #[command(hide = true)]
    Man {
        /// Where to write them.
        dir: PathBuf,
    },
}

/// `reel queue …`
#[derive(Debug, Subcommand)]
pub enum QueueCommand {
    /// Every queue (one cartridge's reads, one pool's writes, over all jobs): files, bytes,
    /// oldest age, priority, and the rule that holds it (mount threshold, drive cap, a drive
    /// down, a cartridge out of service…) or the drives serving it.
    Ls,
}

/// `reel jobs failed …`
#[derive(Debug, Subcommand)]
pub enum FailedCommand {
    /// Queue a failed job's failed requests again (as `reel jobs retry`).
    Retry {
        /// Job ids (or their first characters).
        #[arg(required = true)]
        ids: Vec<String>,
    },
    /// Drop a failed job's failures from this list: they stay with the job (`reel jobs show`).
    Drop {
        /// Job ids (or their first characters).
        #[arg(required = true)]
        ids: Vec<String>,
    },
}

/// `reel token …`
#[derive(Debug, Subcommand)]
pub enum TokenCommand {
    /// Create a token; its secret is printed once and never stored.
    Create {
        /// Who or what uses it (shown in lists and logs).
        #[arg(long)]
        name: String,
        /// Scopes, comma-separated: read, submit, operate, admin.
        #[arg(long, value_name = "SCOPES")]
        scope: String,
        /// A directory its archive sources and recall destinations must lie in (repeat for
        /// several). A token without roots names no paths.
        #[arg(long, value_name = "DIR")]
        root: Vec<PathBuf>,
        /// A prefix of the object keys its jobs may archive and recall (repeat for several;
        /// `''` for every key). A token without one archives and recalls nothing: the
        /// catalogue is shared, and this keeps clients from reading or replacing each other's
        /// objects.
        #[arg(long = "key-prefix", value_name = "PREFIX")]
        key_prefix: Vec<String>,
        /// Highest priority its jobs may ask for (tokens with operate or admin: any).
        #[arg(long, default_value_t = reel_queue::token::DEFAULT_MAX_PRIORITY)]
        max_priority: i32,
    },
    /// List tokens (never their secrets).
    List,
    /// Revoke a token by id: it authenticates nothing from the next request on.
    Revoke {
        /// Token id (the 12 hex digits after `reel_`), or the whole token.
        id: String,
    },
}

impl Command {
    /// The log filter when `REEL_LOG` is not set: `worker` and `serve` log what they do (info);
    /// `demo` prints its own summary and the other commands print their result, so they log
    /// warnings and errors only.
    pub fn default_log_filter(&self) -> &'static str {
        match self {
            Command::Worker | Command::Serve(_) => "warn,reel_jobs=info,reel_engine=info",
            _ => "warn",
        }
    }

    /// The log filter for `-v` given `verbose` times: the command's default, then info, debug
    /// and trace for reel's own crates (`REEL_LOG` still overrides it).
    pub fn log_filter(&self, verbose: u8) -> &'static str {
        match verbose {
            0 => self.default_log_filter(),
            1 => "warn,reel_jobs=info,reel_engine=info,reel_worker=info,reel_queue=info",
            2 => "info,reel_jobs=debug,reel_engine=debug,reel_worker=debug,reel_queue=debug",
            _ => "debug,reel_jobs=trace,reel_engine=trace,reel_worker=trace,reel_queue=trace",
        }
    }
}

/// `reel serve`
#[derive(Debug, Args)]
pub struct ServeArgs {
    /// Address to listen on, IP:PORT (default: [serve] listen, 127.0.0.1:8420; port 0 picks a
    /// free port). The bound address is printed on stderr once listening.
    #[arg(long, value_name = "ADDR")]
    pub listen: Option<String>,
}

/// Options shared by the submitting commands.
#[derive(Debug, Args)]
pub struct SubmitOpts {
    /// Priority (higher first; default 50, verify 10).
    #[arg(long)]
    pub priority: Option<i32>,
    /// Wait for the job to finish, with a progress bar.
    #[arg(long)]
    pub wait: bool,
}

/// `reel archive`
#[derive(Debug, Args)]
pub struct ArchiveArgs {
    /// Files, or one directory (archived as a tree).
    #[arg(required = true)]
    pub paths: Vec<PathBuf>,
    /// Storage class (default: [archive] default_class).
    #[arg(long)]
    pub class: Option<String>,
    /// Prefix of the object keys.
    #[arg(long, default_value = "")]
    pub key_prefix: String,
    #[command(flatten)]
    #[allow(missing_docs)]
    pub submit: SubmitOpts,
}

/// `reel recall`
#[derive(Debug, Args)]
pub struct RecallArgs {
    /// Keys to recall.
    pub keys: Vec<String>,
    /// Recall every key with this prefix instead.
    #[arg(long, conflicts_with = "keys")]
    pub prefix: Option<String>,
    /// Destination directory.
    #[arg(long)]
    pub to: PathBuf,
    /// What to do with a file that exists at a recalled object's path: `never` replace it (it
    /// is reported; an identical file is fine), replace it `if-newer` (the archived copy's
    /// mtime is later), or `always` replace it.
    #[arg(long, default_value = "never", value_parser = parse_overwrite)]
    pub overwrite: Overwrite,
    #[command(flatten)]
    #[allow(missing_docs)]
    pub submit: SubmitOpts,
}

fn parse_overwrite(s: &str) -> std::result::Result<Overwrite, String> {
    s.parse()
}

/// `reel verify`
#[derive(Debug, Args)]
#[group(required = true, multiple = false, id = "what")]
pub struct VerifyArgs {
    /// Every container of this cartridge.
    #[arg(long, group = "what")]
    pub cartridge: Option<String>,
    /// One container (catalogue id).
    #[arg(long, group = "what")]
    pub container: Option<i64>,
    /// A sample: one container in N over the library.
    #[arg(long, group = "what", value_name = "N")]
    pub sample_every: Option<u64>,
    /// Only this cartridge's label: read it and compare it with the catalogue (barcode, pool,
    /// label uuid and epoch); a cartridge whose label differs is marked broken with what
    /// differs. `reel cartridge import` asks for it for each cartridge back from a vault.
    #[arg(long, group = "what", value_name = "BARCODE")]
    pub label: Option<String>,
    #[command(flatten)]
    #[allow(missing_docs)]
    pub submit: SubmitOpts,
}

/// `reel intake`
#[derive(Debug, Args)]
pub struct IntakeArgs {
    /// Barcodes to take in.
    #[arg(required_unless_present = "all_new")]
    pub barcodes: Vec<String>,
    /// Every cartridge the library has that the catalogue does not know.
    #[arg(long, conflicts_with = "barcodes")]
    pub all_new: bool,
    /// The pool the cartridges join (default: the default storage class's first pool).
    #[arg(long, value_name = "POOL")]
    pub pool: Option<String>,
    #[command(flatten)]
    #[allow(missing_docs)]
    pub submit: SubmitOpts,
}

/// `reel jobs …`
#[derive(Debug, Subcommand)]
pub enum JobsCommand {
    /// List jobs, newest first.
    List {
        /// Only jobs in this state (queued, running, done, failed, cancelled).
        #[arg(long)]
        state: Option<JobState>,
        /// At most this many.
        #[arg(long, default_value_t = 50)]
        limit: u32,
    },
    /// Show one job in full: progress, where its requests are and why they wait, its failed
    /// requests with their reasons.
    Show {
        /// Job id (or its first characters, as `jobs list` shows it).
        id: String,
    },
    /// The failed requests of every failed or running job, newest first, with their reasons;
    /// `retry` or `drop` them.
    Failed {
        /// What to do with them (default: list).
        #[command(subcommand)]
        action: Option<FailedCommand>,
        /// Only this job's.
        #[arg(long)]
        job: Option<String>,
        /// At most this many (1 to 1000).
        #[arg(long, default_value_t = 50, value_parser = clap::value_parser!(u32).range(1..=1000))]
        limit: u32,
    },
    /// Wait for jobs to finish (exit 1 if any failed or was cancelled).
    Wait {
        /// Job ids.
        #[arg(required = true)]
        ids: Vec<String>,
        /// Give up after this many seconds (exit 2).
        #[arg(long)]
        timeout: Option<u64>,
    },
    /// Cancel a job (a running one stops at its next record boundary).
    Cancel {
        /// Job id.
        id: String,
    },
    /// Run a failed or cancelled job again.
    Retry {
        /// Job id.
        id: String,
    },
}

/// `reel catalog …`
#[derive(Debug, Subcommand)]
pub enum CatalogCommand {
    /// List objects by key.
    Ls {
        /// Key prefix.
        #[arg(default_value = "")]
        prefix: String,
        /// At most this many.
        #[arg(long, default_value_t = 1000)]
        limit: u64,
    },
    /// Show where an object's copies are.
    Find {
        /// Object key.
        key: String,
    },
    /// Rebuild catalogue entries by reading cartridges (all when none given).
    Rebuild {
        /// Cartridges to read.
        cartridges: Vec<String>,
        #[command(flatten)]
        #[allow(missing_docs)]
        submit: SubmitOpts,
    },
}

/// `reel library …`
#[derive(Debug, Subcommand)]
pub enum LibraryCommand {
    /// Elements and barcodes as the library reports them.
    Inventory,
    /// Drives and what they hold.
    Drives,
    /// Cartridges the catalogue knows, with state and usage.
    Cartridges,
    /// What reel's checks caught, oldest first: records damaged on the way to or from a drive
    /// (LBP), content whose framing or SHA-256 was wrong, medium errors.
    Integrity {
        /// Only this cartridge's.
        #[arg(long)]
        cartridge: Option<String>,
        /// Only those numbered above this one (to page, or to follow).
        #[arg(long, default_value_t = 0)]
        after: u64,
        /// At most this many.
        #[arg(long, default_value_t = 1000)]
        limit: u64,
    },
}

/// What a command produced: a JSON document, and the text for humans.
#[derive(Debug)]
struct Output {
    json: serde_json::Value,
    text: String,
    /// Non-zero exit status wanted (e.g. a waited job failed).
    status: i32,
}

/// Run a parsed command; returns the process exit status.
pub async fn run(cli: Cli) -> Result<i32> {
    let loaded = LoadedConfig::load(cli.config.as_deref(), cli.data_dir.as_deref())?;
    let json_mode = cli.json;
    // A stopped worker or server prints only that it stopped: when stdout is gone (`reel worker
    // 2>&1 | tee log` after Ctrl-C ended `tee`) the shutdown was still a clean one.
    let output_optional = matches!(cli.command, Command::Worker | Command::Serve(_));
    let out = dispatch(cli, &loaded).await?;
    let mut stdout = std::io::stdout().lock();
    let written = if json_mode {
        writeln!(
            stdout,
            "{}",
            serde_json::to_string_pretty(&out.json).unwrap_or_default()
        )
    } else if out.text.is_empty() {
        Ok(())
    } else {
        writeln!(stdout, "{}", out.text.trim_end())
    };
    if !output_optional {
        written.map_err(|source| JobsError::Io {
            doing: "writing to",
            path: "stdout".into(),
            source,
        })?;
    }
    Ok(out.status)
}

async fn ensure_data_dir(loaded: &LoadedConfig) -> Result<()> {
    // The directories the SQLite files go in (relative ones resolved into the data directory
    // at load): a config whose databases are elsewhere (the packaged one, or PostgreSQL) needs
    // no data directory, and a command run from a directory it cannot write to still works.
    let store = &loaded.config.store;
    for url in [&store.url, &store.jobs_url] {
        let Some(path) = url.strip_prefix("sqlite:") else {
            continue;
        };
        let path = Path::new(path.split('?').next().unwrap_or(path));
        let Some(dir) = path.parent().filter(|d| !d.as_os_str().is_empty()) else {
            continue;
        };
        tokio::fs::create_dir_all(dir)
            .await
            .map_err(|source| JobsError::Io {
                doing: "creating the directory of the SQLite database",
                path: dir.to_path_buf(),
                source,
            })?;
    }
    Ok(())
}

async fn open_queue(loaded: &LoadedConfig) -> Result<JobQueue> {
    ensure_data_dir(loaded).await?;
    JobQueue::open(&loaded.config).await
}

async fn dispatch(cli: Cli, loaded: &LoadedConfig) -> Result<Output> {
    let json = cli.json;
    let demo_dir = cli.data_dir.clone();
    match cli.command {
        Command::Archive(a) => {
            let spec = archive_spec(&loaded.config, &a.paths, a.class, a.key_prefix)?;
            submit(loaded, spec, a.submit, json).await
        }
        Command::Recall(r) => {
            let spec = JobSpec::Recall(RecallJob {
                selection: RecallSelection::new(r.keys, r.prefix).map_err(spec_error)?,
                destination: absolute(&r.to)?,
                overwrite: r.overwrite,
                confine: None,
            });
            submit(loaded, spec, r.submit, json).await
        }
        Command::Verify(v) => {
            let target = VerifyTarget::new(v.cartridge, v.container, v.sample_every, v.label)
                .map_err(spec_error)?;
            let spec = JobSpec::Verify(VerifyJob { target });
            submit(loaded, spec, v.submit, json).await
        }
        Command::Intake(i) => {
            let selection = IntakeSelection::new(i.barcodes, i.all_new).map_err(spec_error)?;
            let spec = JobSpec::Intake(IntakeJob {
                selection,
                pool: i.pool,
            });
            submit(loaded, spec, i.submit, json).await
        }
        Command::Delete(d) => {
            let spec = crate::lifecycle_cmd::delete_spec(&d)?;
            submit(loaded, spec, d.submit, json).await
        }
        Command::Undelete(u) => {
            lifecycle(loaded, crate::lifecycle_cmd::Lifecycle::Undelete(u)).await
        }
        Command::Recycle(r) => lifecycle(loaded, crate::lifecycle_cmd::Lifecycle::Recycle(r)).await,
        Command::Hold(h) => lifecycle(loaded, crate::lifecycle_cmd::Lifecycle::Hold(h)).await,
        Command::Repack(r) => repack(loaded, r, json).await,
        Command::Reclaim(r) => reclaim(loaded, r, json).await,
        Command::Jobs(j) => jobs(loaded, j, json).await,
        Command::Catalog(CatalogCommand::Rebuild {
            cartridges,
            submit: s,
        }) => submit(loaded, JobSpec::Rebuild(RebuildJob { cartridges }), s, json).await,
        Command::Catalog(c) => catalog(loaded, c).await,
        Command::Library(l) => library(loaded, l).await,
        Command::Cartridge(c) => {
            ensure_data_dir(loaded).await?;
            let p = crate::cartridge_cmd::run(loaded, c, &crate::drive_cmd::operator()).await?;
            Ok(Output {
                json: p.json,
                text: p.text,
                status: 0,
            })
        }
        Command::Queue(QueueCommand::Ls) => {
            ensure_data_dir(loaded).await?;
            let db = reel_queue::db::Db::connect(&loaded.config.store.url).await?;
            let cat = reel_engine::catalogue::Catalogue::open(&loaded.config.store.url).await?;
            let queues = crate::queue_cmd::queues(&db, &cat, &loaded.config).await?;
            Ok(Output {
                json: crate::queue_cmd::json(&queues),
                text: crate::queue_cmd::text(&queues),
                status: 0,
            })
        }
        Command::Drive(d) => {
            ensure_data_dir(loaded).await?;
            let p = crate::drive_cmd::run(loaded, d).await?;
            Ok(Output {
                json: p.json,
                text: p.text,
                status: 0,
            })
        }
        Command::Worker => run_worker(loaded).await,
        Command::Demo => {
            let (j, text) = crate::demo::run(demo_dir.as_deref()).await?;
            Ok(Output {
                json: j,
                text,
                status: 0,
            })
        }
        Command::Serve(s) => run_serve(loaded, s).await,
        Command::Token(t) => token(loaded, t).await,
        Command::Man { dir } => {
            let pages = crate::manpage::write_pages(&dir).map_err(|e| JobsError::Io {
                doing: "writing the manual pages into",
                path: dir.clone(),
                source: e,
            })?;
            Ok(Output {
                json: json!(pages),
                text: format!("{} manual pages in {}", pages.len(), dir.display()),
                status: 0,
            })
        }
        Command::Key(k) => {
            ensure_data_dir(loaded).await?;
            let p = crate::key_cmd::run(loaded, k).await?;
            Ok(Output {
                json: p.json,
                text: p.text,
                status: 0,
            })
        }
        Command::Plugin(p) => {
            let p = crate::plugin_cmd::run(loaded, p).await?;
            Ok(Output {
                json: p.json,
                text: p.text,
                status: p.status,
            })
        }
    }
}

/// `reel token`: the API tokens, in the `[store]` database.
async fn token(loaded: &LoadedConfig, cmd: TokenCommand) -> Result<Output> {
    use reel_queue::token::{TokenStore, check_roots, parse_scopes};
    ensure_data_dir(loaded).await?;
    let store = TokenStore::new(reel_queue::db::Db::connect(&loaded.config.store.url).await?);
    let view = |t: &reel_queue::token::Token| {
        json!({
            "id": t.id, "name": t.name, "scopes": t.scopes, "roots": t.roots,
            "key_prefixes": t.key_prefixes,
            "max_priority": t.max_priority, "created_ms": t.created_ms, "revoked_ms": t.revoked_ms,
        })
    };
    match cmd {
        TokenCommand::Create {
            name,
            scope,
            root,
            key_prefix,
            max_priority,
        } => {
            let bad = |message: String| JobsError::Config {
                origin: "reel token create".into(),
                message,
            };
            let scopes = parse_scopes(&scope).map_err(bad)?;
            // Roots as their links resolve, so a root and reel's own paths compare for real.
            let roots = root
                .iter()
                .map(|r| {
                    std::fs::canonicalize(r).map_err(|e| {
                        bad(format!(
                            "root {}: {e}; give an existing directory",
                            r.display()
                        ))
                    })
                })
                .collect::<Result<Vec<_>>>()?;
            if let Some(r) = roots.iter().find(|r| !r.is_dir()) {
                return Err(bad(format!("root {} is not a directory", r.display())));
            }
            check_roots(&roots, &loaded.own_paths()).map_err(bad)?;
            let new = store
                .create(&name, scopes, roots, key_prefix, max_priority)
                .await?;
            let mut j = view(&new.token);
            j["token"] = json!(new.bearer);
            Ok(Output {
                text: format!(
                    "token {} ({}) created with scopes {}; it is shown this once, keep it secret:\n{}",
                    new.token.id,
                    new.token.name,
                    new.token.scope_list(),
                    new.bearer
                ),
                json: j,
                status: 0,
            })
        }
        TokenCommand::List => {
            let tokens = store.list().await?;
            let text = tokens
                .iter()
                .map(|t| {
                    format!(
                        "{}  {:<20} {:<22} {}{}",
                        t.id,
                        t.name,
                        t.scope_list(),
                        t.roots
                            .iter()
                            .map(|r| r.display().to_string())
                            .collect::<Vec<_>>()
                            .join(","),
                        if t.revoked_ms.is_some() {
                            "  (revoked)"
                        } else {
                            ""
                        }
                    )
                })
                .collect::<Vec<_>>()
                .join("\n");
            Ok(Output {
                json: json!({"tokens": tokens.iter().map(view).collect::<Vec<_>>()}),
                text: if text.is_empty() {
                    "no tokens; create one with `reel token create`".into()
                } else {
                    text
                },
                status: 0,
            })
        }
        TokenCommand::Revoke { id } => {
            let t = store.revoke(&id).await?;
            // What it queued and what runs for it stop too: a revoked client's work is not
            // carried out after it lost the right to ask for it.
            let queue = open_queue(loaded).await?;
            let jobs = queue.store().unfinished_of_token(&t.id).await?;
            for j in &jobs {
                queue.cancel(j).await?;
            }
            let mut j = view(&t);
            j["cancelled_jobs"] = json!(jobs);
            Ok(Output {
                text: format!(
                    "token {} ({}) revoked; {} unfinished job(s) of it cancelled",
                    t.id,
                    t.name,
                    jobs.len()
                ),
                json: j,
                status: 0,
            })
        }
    }
}

/// The archive job for `paths` (one directory, or files; made absolute) into storage class
/// `class` (default `[archive] default_class`). [`reel_queue::submission::check`] checks it.
fn archive_spec(
    config: &reel_queue::config::Config,
    paths: &[PathBuf],
    class: Option<String>,
    key_prefix: String,
) -> Result<JobSpec> {
    let class = class.unwrap_or_else(|| config.archive.default_class.clone());
    let abs: Vec<PathBuf> = paths.iter().map(|p| absolute(p)).collect::<Result<_>>()?;
    let source = reel_queue::submission::archive_source(&abs)?;
    Ok(JobSpec::Archive(ArchiveJob {
        source,
        key_prefix,
        storage_class: class,
        confine: None,
    }))
}

/// A spec's excluded choices, worded with this command's flags.
fn spec_error(e: SpecError) -> JobsError {
    let (origin, message) = match e {
        SpecError::KeysAndPrefix => ("reel recall", "give keys or --prefix, not both"),
        SpecError::VerifyTarget => (
            "reel verify",
            "give exactly one of --cartridge, --container, --sample-every or --label",
        ),
        SpecError::BarcodesAndAllNew => ("reel intake", "give barcodes or --all-new, not both"),
    };
    JobsError::Config {
        origin: origin.into(),
        message: message.into(),
    }
}

/// `reel serve`: the HTTP API until SIGTERM or SIGINT, then a graceful shutdown.
async fn run_serve(loaded: &LoadedConfig, args: ServeArgs) -> Result<Output> {
    let listen = args
        .listen
        .unwrap_or_else(|| loaded.config.serve.listen.clone());
    let queue = open_queue(loaded).await?;
    let catalogue = reel_engine::catalogue::Catalogue::open(&loaded.config.store.url).await?;
    if let Ok(addr) = listen.parse::<std::net::SocketAddr>() {
        let tokens = reel_queue::token::TokenStore::new(queue.store().db().clone());
        crate::api::check_exposure(addr, &tokens).await?;
    }
    let listener = crate::api::bind(&listen).await?;
    let addr = listener.local_addr().map_err(|source| JobsError::Io {
        doing: "reading the bound address of",
        path: listen.clone().into(),
        source,
    })?;
    let state = crate::api::AppState::new(
        loaded.config.clone(),
        queue,
        catalogue,
        Some(addr),
        loaded.own_paths(),
    )?;
    let shutdown = CancellationToken::new();
    let signals = tokio::spawn(worker::cancel_on_signals(shutdown.clone())?);
    // Printed once the socket is bound, so scripts (and tests) can read the port from it.
    crate::logging::stderr_line(format_args!(
        "reel serve: listening on http://{addr} (store {}); stop with Ctrl-C or SIGTERM",
        reel_queue::db::redact(&loaded.config.store.url)
    ));
    let result = crate::api::run(listener, state, shutdown.clone()).await;
    shutdown.cancel();
    // Stopped: no second signal can cut the shutdown short any more.
    signals.abort();
    result?;
    Ok(Output {
        json: json!({"serve": addr.to_string(), "stopped": true}),
        text: format!("reel serve on {addr} stopped"),
        status: 0,
    })
}

/// `reel library`: what the library reports (through the plugin) and what the catalogue knows.
async fn library(loaded: &LoadedConfig, cmd: LibraryCommand) -> Result<Output> {
    use reel_plugin_abi::{
        REEL_ELEMENT_DRIVE, REEL_ELEMENT_FULL, REEL_ELEMENT_IMPORT_EXPORT, REEL_ELEMENT_PICKER,
        REEL_ELEMENT_SLOT, REEL_ELEMENT_WORM,
    };
    let tape = |e: reel_engine::device::DeviceError| JobsError::Session(e.into());
    match cmd {
        LibraryCommand::Cartridges => {
            ensure_data_dir(loaded).await?;
            let cat = reel_engine::catalogue::Catalogue::open(&loaded.config.store.url).await?;
            let carts = cat.cartridges().await?;
            let text = carts
                .iter()
                .map(|c| {
                    format!(
                        "{:<10} {:<9} pool {:<10} {}{} used {} eod block {} mounts {}",
                        c.barcode,
                        c.state.as_str(),
                        c.pool.clone().unwrap_or_else(|| "-".into()),
                        if c.worm { "WORM " } else { "" },
                        if c.calibrated {
                            "calibrated"
                        } else {
                            "uncalibrated"
                        },
                        human_bytes(c.used_bytes),
                        c.eod_block,
                        c.mount_count
                    )
                })
                .collect::<Vec<_>>()
                .join("\n");
            Ok(Output {
                json: json!(carts),
                text,
                status: 0,
            })
        }
        LibraryCommand::Integrity {
            cartridge,
            after,
            limit,
        } => {
            ensure_data_dir(loaded).await?;
            let cat = reel_engine::catalogue::Catalogue::open(&loaded.config.store.url).await?;
            let after = i64::try_from(after).unwrap_or(i64::MAX);
            let catches = cat.catches(cartridge.as_deref(), after, limit).await?;
            let text = if catches.is_empty() {
                "no check has failed".to_string()
            } else {
                catches
                    .iter()
                    .map(|r| {
                        let c = &r.catch;
                        let blocks = if c.first_block == c.last_block {
                            format!("block {}", c.first_block)
                        } else {
                            format!("blocks {}-{}", c.first_block, c.last_block)
                        };
                        format!(
                            "{:>6} {} {:<10} drive {} {:<12} {}: {}",
                            r.id,
                            unix_ms_text(r.at_ms),
                            c.barcode,
                            c.drive,
                            c.kind.as_str(),
                            blocks,
                            c.detail
                        )
                    })
                    .collect::<Vec<_>>()
                    .join("\n")
            };
            Ok(Output {
                json: json!(catches),
                text,
                status: 0,
            })
        }
        LibraryCommand::Inventory | LibraryCommand::Drives => {
            let lib = &loaded.config.library;
            let Some(file) = lib.plugin_file().map_err(tape)? else {
                return Err(JobsError::Config {
                    origin: "the configuration".into(),
                    message: "[library] plugin is not set; give a plugin's name (sim, scsi, mhvtl) or the path of its .so".into(),
                });
            };
            let plugin = reel_engine::device::load_plugin(&file).map_err(tape)?;
            let library =
                reel_engine::device::Library::open(plugin, &lib.plugin_config).map_err(tape)?;
            let inv = library.inventory().await.map_err(tape)?;
            let kind = |k: u32| match k {
                REEL_ELEMENT_PICKER => "picker",
                REEL_ELEMENT_SLOT => "slot",
                REEL_ELEMENT_IMPORT_EXPORT => "mail slot",
                REEL_ELEMENT_DRIVE => "drive",
                _ => "?",
            };
            let shown: Vec<_> = inv
                .iter()
                .filter(|e| {
                    matches!(cmd, LibraryCommand::Inventory) || e.kind == REEL_ELEMENT_DRIVE
                })
                .collect();
            let text = shown
                .iter()
                .map(|e| {
                    format!(
                        "{:<9} {:>5} #{:<3} {}{}",
                        kind(e.kind),
                        e.address,
                        e.index,
                        if e.flags & REEL_ELEMENT_FULL != 0 {
                            e.barcode.as_str()
                        } else {
                            "(empty)"
                        },
                        if e.flags & REEL_ELEMENT_WORM != 0 {
                            " WORM"
                        } else {
                            ""
                        }
                    )
                })
                .collect::<Vec<_>>()
                .join("\n");
            let j: Vec<_> = shown
                .iter()
                .map(|e| {
                    json!({"kind": kind(e.kind), "address": e.address, "index": e.index,
                           "full": e.flags & REEL_ELEMENT_FULL != 0, "barcode": e.barcode,
                           "worm": e.flags & REEL_ELEMENT_WORM != 0})
                })
                .collect();
            if matches!(cmd, LibraryCommand::Inventory) {
                return Ok(Output {
                    json: json!(j),
                    text,
                    status: 0,
                });
            }
            // What the workers' drive loops hold or are mounting, from the drive board.
            let queue = open_queue(loaded).await?;
            let board = reel_queue::DriveBoard::new(queue.store().db().clone())
                .live()
                .await?;
            let now = reel_queue::db::now_ms();
            let mut text = text;
            text.push_str("\n\nin use by workers (every host):");
            if board.is_empty() {
                text.push_str(" none");
            }
            let mut in_use = Vec::new();
            for e in &board {
                let what = match &e.mount {
                    None => "empty".to_string(),
                    Some(m) => {
                        let (mode, target) = match &m.target {
                            reel_worker::scheduler::MountTarget::Read { barcode } => {
                                ("reading", barcode)
                            }
                            reel_worker::scheduler::MountTarget::Write { pool } => {
                                ("writing pool", pool)
                            }
                        };
                        format!(
                            "{mode} {target}, {} for {} s{}",
                            m.barcode
                                .as_deref()
                                .map(|b| format!("cartridge {b}"))
                                .unwrap_or_else(|| "mounting".into()),
                            (now - m.since_ms).max(0) / 1000,
                            m.group
                                .as_deref()
                                .map(|g| format!(", group {g}"))
                                .unwrap_or_default()
                        )
                    }
                };
                text.push_str(&format!("\n  {:<8} {:<40} {what}", e.drive, e.holder));
                in_use.push(json!({
                    "drive": e.drive, "worker": e.holder,
                    "target": e.mount.as_ref().map(|m| &m.target),
                    "barcode": e.mount.as_ref().and_then(|m| m.barcode.clone()),
                    "pool": e.mount.as_ref().and_then(|m| m.pool.clone()),
                    "group": e.mount.as_ref().and_then(|m| m.group.clone()),
                    "since_ms": e.mount.as_ref().map(|m| m.since_ms),
                }));
            }
            Ok(Output {
                json: json!({"elements": j, "in_use": in_use}),
                text,
                status: 0,
            })
        }
    }
}

/// `reel worker`: opens the library through the configured plugin, recovers cartridges left
/// with pending containers by a crash, then runs the job handlers and one drive loop per drive.
async fn run_worker(loaded: &LoadedConfig) -> Result<Output> {
    ensure_data_dir(loaded).await?;
    let shutdown = CancellationToken::new();
    if !loaded.config.worker.metrics_listen.is_empty() {
        reel_worker::drive_metrics::serve(&loaded.config.worker.metrics_listen, shutdown.clone())
            .await?;
    }
    let (rt, _service) =
        reel_worker::embedded::start_runtime(&loaded.config, shutdown.clone()).await?;
    let name = rt.name.clone();
    // The handlers first: a signal sent once it says it is running finds them installed.
    let signals = tokio::spawn(worker::cancel_on_signals(shutdown.clone())?);
    crate::logging::stderr_line(format_args!(
        "reel worker {name}: running (store {}); stop with Ctrl-C or SIGTERM",
        reel_queue::db::redact(&loaded.config.store.url)
    ));
    let result = worker::run(rt).await;
    shutdown.cancel();
    // Stopped: no second signal can cut the shutdown short any more.
    signals.abort();
    result?;
    Ok(Output {
        json: json!({"worker": name, "stopped": true}),
        text: format!("worker {name} stopped"),
        status: 0,
    })
}

fn absolute(p: &Path) -> Result<PathBuf> {
    std::path::absolute(p).map_err(|source| JobsError::Io {
        doing: "resolving",
        path: p.to_path_buf(),
        source,
    })
}

async fn submit(
    loaded: &LoadedConfig,
    spec: JobSpec,
    opts: SubmitOpts,
    json: bool,
) -> Result<Output> {
    let queue = open_queue(loaded).await?;
    let catalogue = reel_engine::catalogue::Catalogue::open(&loaded.config.store.url).await?;
    reel_queue::submission::check(&spec, &loaded.config, &catalogue).await?;
    let rec = queue.submit(spec, opts.priority).await?;
    if opts.wait {
        let mut out = wait(&queue, std::slice::from_ref(&rec.id), None, json).await?;
        out.text = format!("submitted {} job {}\n{}", rec.kind, rec.id, out.text);
        return Ok(out);
    }
    Ok(Output {
        json: json!({"id": rec.id, "kind": rec.kind, "state": rec.state, "priority": rec.priority}),
        text: format!(
            "{}\n(submitted {} job; follow it with `reel jobs wait {}`)",
            rec.id, rec.kind, rec.id
        ),
        status: 0,
    })
}

/// A job id as the CLI shows it: its first [`reel_queue::store::SHORT_ID`] characters, which
/// every command taking an id accepts back.
fn short_id(id: &str) -> &str {
    id.get(..reel_queue::store::SHORT_ID).unwrap_or(id)
}

/// How long a job has run (to its end, or to now while it runs); empty while queued.
fn took(r: &JobRecord) -> String {
    match (r.state, r.finished_ms) {
        (JobState::Queued, _) => String::new(),
        (_, Some(end)) => {
            crate::text::span(Duration::from_millis((end - r.created_ms).max(0) as u64))
        }
        (_, None) => format!(
            "{} so far",
            crate::text::span(Duration::from_millis(
                (reel_queue::db::now_ms() - r.created_ms).max(0) as u64
            ))
        ),
    }
}

fn job_line(r: &JobRecord) -> String {
    let p = &r.progress;
    format!(
        "{}  {:<8} {:<9} prio {:>3}  {:>13}  {:>13}  {}/{} objects  {}/{}{}",
        short_id(&r.id),
        r.kind.as_str(),
        r.state.as_str(),
        r.priority,
        crate::text::ago_ms(r.created_ms),
        took(r),
        p.objects_done,
        p.objects_total,
        human_bytes(p.bytes_done),
        human_bytes(p.bytes_total),
        r.error
            .as_deref()
            .map(|e| format!("  error: {e}"))
            .unwrap_or_default()
    )
}

/// `reel jobs show` for people.
fn job_text(
    r: &JobRecord,
    counts: &reel_queue::requests::JobRequestCounts,
    waits: &[crate::queue_cmd::WaitView],
    failures: &[reel_queue::failed::FailedRequest],
) -> String {
    use crate::text::when_ms;
    let p = &r.progress;
    let mut out = vec![
        format!("job       {} ({})", r.id, short_id(&r.id)),
        format!(
            "          {} {}, priority {}{}",
            r.state.as_str(),
            r.kind.as_str(),
            r.priority,
            if r.cancel_requested && !r.state.is_final() {
                ", cancel requested"
            } else {
                ""
            }
        ),
        format!("created   {}", when_ms(r.created_ms)),
    ];
    if let Some(f) = r.finished_ms {
        out.push(format!("finished  {}, after {}", when_ms(f), took(r)));
    } else if r.state == JobState::Running {
        out.push(format!(
            "running   for {}",
            crate::text::span(Duration::from_millis(
                (reel_queue::db::now_ms() - r.created_ms).max(0) as u64
            ))
        ));
    }
    out.push(format!(
        "attempts  {} of {}{}",
        r.attempts,
        r.max_attempts,
        r.worker
            .as_deref()
            .map(|w| format!(", worker {w}"))
            .unwrap_or_default()
    ));
    out.push(format!(
        "progress  {}/{} objects, {} of {}",
        p.objects_done,
        p.objects_total,
        human_bytes(p.bytes_done),
        human_bytes(p.bytes_total)
    ));
    if counts.total > 0 {
        out.push(format!(
            "requests  {}: {} done, {} on drives, {} failed, {} to do",
            counts.total,
            counts.done,
            counts.claimed,
            counts.failed,
            counts
                .total
                .saturating_sub(counts.done + counts.claimed + counts.failed)
        ));
    }
    for (i, w) in waits.iter().enumerate() {
        let what = match (w.state.as_str(), &w.cartridge, &w.pool) {
            ("job", _, _) => String::new(),
            (_, Some(c), _) => format!("{} for cartridge {c} ({}): ", w.files, w.state),
            (_, None, Some(pool)) => format!("{} for pool {pool} ({}): ", w.files, w.state),
            _ => format!("{} ({}): ", w.files, w.state),
        };
        out.push(format!(
            "{}{what}{}",
            if i == 0 { "waiting   " } else { "          " },
            w.message
        ));
    }
    if !failures.is_empty() {
        out.push(format!(
            "failed    {} request{}{}:",
            counts.failed,
            if counts.failed == 1 { "" } else { "s" },
            if (failures.len() as u64) < counts.failed {
                format!(", the last {}", failures.len())
            } else {
                String::new()
            }
        ));
        for f in failures {
            out.push(format!("            {}: {}", f.key, f.reason));
        }
    }
    if let Some(e) = &r.error {
        out.push(format!("error     {e}"));
    }
    out.join("\n")
}

/// `reel jobs failed` for people.
fn failed_text(list: &[reel_queue::failed::FailedRequest]) -> String {
    if list.is_empty() {
        return "no failed requests to review".into();
    }
    list.iter()
        .map(|f| {
            format!(
                "{}  {:<8} {:<8} {:>11}  {}: {}",
                short_id(&f.job),
                f.kind,
                f.job_state,
                crate::text::ago_ms(f.failed_ms),
                f.key,
                f.reason
            )
        })
        .collect::<Vec<_>>()
        .join("\n")
}

async fn jobs(loaded: &LoadedConfig, cmd: JobsCommand, json: bool) -> Result<Output> {
    let queue = open_queue(loaded).await?;
    match cmd {
        JobsCommand::List { state, limit } => {
            let list = queue.store().list(state, limit).await?;
            let text = if list.is_empty() {
                "no jobs".to_string()
            } else {
                std::iter::once(format!(
                    "{:<8}  {:<8} {:<9} {:>8}  {:>13}  {:>13}  PROGRESS",
                    "ID", "KIND", "STATE", "PRIORITY", "CREATED", "TOOK"
                ))
                .chain(list.iter().map(job_line))
                .collect::<Vec<_>>()
                .join("\n")
            };
            Ok(Output {
                json: json!(list),
                text,
                status: 0,
            })
        }
        JobsCommand::Show { id } => {
            let id = queue.store().resolve(&id).await?;
            let r = queue.store().require(&id).await?;
            let db = queue.store().db().clone();
            let cat = reel_engine::catalogue::Catalogue::open(&loaded.config.store.url).await?;
            let counts = reel_queue::TapeRequests::new(db.clone())
                .counts(&id)
                .await?;
            let waits = crate::queue_cmd::job_waits(&db, &cat, &loaded.config, &r).await?;
            let failures = reel_queue::failed::of_job(&db, &id, 20).await?;
            let text = job_text(&r, &counts, &waits, &failures);
            let mut v = json!(r);
            v["requests"] = json!(counts);
            v["waits"] = json!(waits);
            v["failures"] = json!(failures);
            Ok(Output {
                json: v,
                text,
                status: 0,
            })
        }
        JobsCommand::Failed { action, job, limit } => {
            let db = queue.store().db().clone();
            match action {
                None => {
                    let job = match job {
                        Some(j) => Some(queue.store().resolve(&j).await?),
                        None => None,
                    };
                    let list = reel_queue::failed::list(&db, job.as_deref(), limit).await?;
                    Ok(Output {
                        text: failed_text(&list),
                        json: json!({ "failed": list }),
                        status: 0,
                    })
                }
                Some(FailedCommand::Retry { ids }) => {
                    let whole = all_in(
                        &queue,
                        &ids,
                        &[JobState::Failed, JobState::Cancelled],
                        "only failed or cancelled jobs can be retried; nothing was retried",
                    )
                    .await?;
                    let mut lines = Vec::new();
                    let mut done = Vec::new();
                    for id in whole {
                        let r = retry(loaded, &queue, &id).await?;
                        lines.push(format!("{} queued again", short_id(&r.id)));
                        done.push(r);
                    }
                    Ok(Output {
                        json: json!(done),
                        text: lines.join("\n"),
                        status: 0,
                    })
                }
                Some(FailedCommand::Drop { ids }) => {
                    let whole = all_in(
                        &queue,
                        &ids,
                        &[JobState::Failed],
                        "only a failed job's failures can be dropped; nothing was dropped",
                    )
                    .await?;
                    let mut lines = Vec::new();
                    let mut dropped = Vec::new();
                    for id in whole {
                        let n = reel_queue::failed::drop_failures(&db, &id).await?;
                        lines.push(format!(
                            "{}: {n} failed request{} dropped from the list (`reel jobs show {}` still has them)",
                            short_id(&id),
                            if n == 1 { "" } else { "s" },
                            short_id(&id)
                        ));
                        dropped.push(json!({"job": id, "failed": n}));
                    }
                    Ok(Output {
                        json: json!({ "dropped": dropped }),
                        text: lines.join("\n"),
                        status: 0,
                    })
                }
            }
        }
        JobsCommand::Wait { ids, timeout } => {
            let mut whole = Vec::with_capacity(ids.len());
            for id in &ids {
                whole.push(queue.store().resolve(id).await?);
            }
            wait(&queue, &whole, timeout.map(Duration::from_secs), json).await
        }
        JobsCommand::Cancel { id } => {
            let id = queue.store().resolve(&id).await?;
            let r = queue.cancel(&id).await?;
            let id = short_id(&id);
            let text = match r.state {
                JobState::Cancelled => format!("{id} cancelled"),
                _ => format!("{id} will stop at its next record boundary (cancel requested)"),
            };
            Ok(Output {
                json: json!(r),
                text,
                status: 0,
            })
        }
        JobsCommand::Retry { id } => {
            let r = retry(loaded, &queue, &id).await?;
            Ok(Output {
                text: format!("{} queued again", short_id(&r.id)),
                json: json!(r),
                status: 0,
            })
        }
    }
}

/// The whole ids of `ids` (whole or short), each checked to be in one of `states` before any
/// is acted on, so one bad id changes nothing; `hint` says what the refusal means.
async fn all_in(
    queue: &JobQueue,
    ids: &[String],
    states: &[JobState],
    hint: &str,
) -> Result<Vec<String>> {
    let mut whole = Vec::with_capacity(ids.len());
    for id in ids {
        let id = queue.store().resolve(id).await?;
        let rec = queue.store().require(&id).await?;
        if !states.contains(&rec.state) {
            return Err(JobsError::BadJobState {
                id,
                state: rec.state.to_string(),
                hint: hint.into(),
            });
        }
        whole.push(id);
    }
    Ok(whole)
}

/// Run the failed or cancelled job `id` (whole or short) again, once its sources or
/// destination pass the submission checks again.
async fn retry(loaded: &LoadedConfig, queue: &JobQueue, id: &str) -> Result<JobRecord> {
    let id = queue.store().resolve(id).await?;
    let catalogue = reel_engine::catalogue::Catalogue::open(&loaded.config.store.url).await?;
    reel_queue::submission::check_retry(queue.store(), &id, &loaded.config, &catalogue).await?;
    queue.retry(&id).await
}

/// Wait for jobs, with one progress bar each (hidden under --json or without a terminal).
async fn wait(
    queue: &JobQueue,
    ids: &[String],
    timeout: Option<Duration>,
    json: bool,
) -> Result<Output> {
    for id in ids {
        queue.store().require(id).await?;
    }
    let multi = MultiProgress::new();
    if json {
        multi.set_draw_target(indicatif::ProgressDrawTarget::hidden());
    }
    let style = ProgressStyle::with_template("{prefix:.bold} {bar:30} {pos}/{len} objects {msg}")
        .unwrap_or_else(|_| ProgressStyle::default_bar());
    let bars: Vec<ProgressBar> = ids
        .iter()
        .map(|id| {
            let b = multi.add(ProgressBar::new(0));
            b.set_style(style.clone());
            b.set_prefix(id.chars().take(8).collect::<String>());
            b
        })
        .collect();
    let start = tokio::time::Instant::now();
    // Poll the state and progress alone (a job's spec may name a million objects); the
    // whole records are read once, at the end.
    let records = |ids: &[String]| {
        let ids = ids.to_vec();
        async move {
            let mut records = Vec::with_capacity(ids.len());
            for id in &ids {
                records.push(queue.store().require(id).await?);
            }
            Ok::<_, JobsError>(records)
        }
    };
    loop {
        let mut all_final = true;
        for (id, bar) in ids.iter().zip(&bars) {
            let Some((state, p)) = queue.store().status(id).await? else {
                return Err(JobsError::NoSuchJob(id.clone()));
            };
            bar.set_length(p.objects_total);
            bar.set_position(p.objects_done);
            bar.set_message(format!("{} {}", state, human_bytes(p.bytes_done)));
            all_final &= state.is_final();
        }
        if all_final {
            for b in &bars {
                b.finish();
            }
            let records = records(ids).await?;
            let bad = records.iter().filter(|r| r.state != JobState::Done).count();
            let text = records.iter().map(job_line).collect::<Vec<_>>().join("\n");
            return Ok(Output {
                json: json!(records),
                text,
                status: if bad > 0 { 1 } else { 0 },
            });
        }
        if let Some(t) = timeout
            && start.elapsed() >= t
        {
            for b in &bars {
                b.abandon();
            }
            let records = records(ids).await?;
            let text = format!(
                "{}\ntimed out after {} s; the jobs keep running (is a `reel worker` up?)",
                records.iter().map(job_line).collect::<Vec<_>>().join("\n"),
                t.as_secs()
            );
            return Ok(Output {
                json: json!({"timed_out": true, "jobs": records}),
                text,
                status: 2,
            });
        }
        tokio::time::sleep(Duration::from_millis(500)).await;
    }
}

/// `reel repack`: a dry run, the policies' jobs, or one repack job.
async fn repack(
    loaded: &LoadedConfig,
    r: crate::repack_cmd::RepackArgs,
    json: bool,
) -> Result<Output> {
    ensure_data_dir(loaded).await?;
    let cat = reel_engine::catalogue::Catalogue::open(&loaded.config.store.url).await?;
    let by = crate::drive_cmd::operator();
    if r.policy {
        let queue = open_queue(loaded).await?;
        let plan = crate::repack_cmd::plan(&cat, &loaded.config, queue.store()).await?;
        let mut text = crate::repack_cmd::plan_text(&plan);
        let mut ids = Vec::new();
        if !r.dry_run {
            for spec in reel_queue::repack_select::policy_jobs(&plan, &by) {
                reel_queue::submission::check(&spec, &loaded.config, &cat).await?;
                let rec = queue.submit(spec, r.submit.priority).await?;
                text.push_str(&format!("submitted {} job {}\n", rec.kind, rec.id));
                ids.push(rec.id);
            }
        }
        return Ok(Output {
            json: json!({"plan": plan, "submitted": ids}),
            text,
            status: 0,
        });
    }
    let queue = open_queue(loaded).await?;
    let (spec, chosen) = crate::repack_cmd::repack_job(
        &cat,
        queue.store(),
        r.selection(),
        r.to_pool.clone(),
        r.add_copies,
        by,
    )
    .await?;
    if r.dry_run {
        return Ok(Output {
            json: json!({"cartridges": chosen}),
            text: crate::repack_cmd::candidates_text(&chosen),
            status: 0,
        });
    }
    cat.close().await;
    submit(loaded, spec, r.submit, json).await
}

/// `reel reclaim`: a dry run, or one reclaim job.
async fn reclaim(
    loaded: &LoadedConfig,
    r: crate::repack_cmd::ReclaimArgs,
    json: bool,
) -> Result<Output> {
    ensure_data_dir(loaded).await?;
    let cat = reel_engine::catalogue::Catalogue::open(&loaded.config.store.url).await?;
    if r.dry_run {
        let checks = reel_queue::repack_select::reclaim_checks(&cat, &r.barcodes).await?;
        return Ok(Output {
            json: json!(checks),
            text: crate::repack_cmd::checks_text(&checks),
            status: 0,
        });
    }
    if r.barcodes.is_empty() {
        return Err(reel_queue::submission::SubmissionError::Missing {
            field: "barcodes",
            message: "name the cartridges to reclaim (`reel reclaim --dry-run` lists what may be)"
                .into(),
        }
        .into());
    }
    let queue = open_queue(loaded).await?;
    let spec = crate::repack_cmd::reclaim_job(
        &cat,
        queue.store(),
        r.barcodes,
        crate::drive_cmd::operator(),
    )
    .await?;
    cat.close().await;
    submit(loaded, spec, r.submit, json).await
}

async fn lifecycle(loaded: &LoadedConfig, cmd: crate::lifecycle_cmd::Lifecycle) -> Result<Output> {
    ensure_data_dir(loaded).await?;
    let cat = reel_engine::catalogue::Catalogue::open(&loaded.config.store.url).await?;
    let p = crate::lifecycle_cmd::run(&cat, cmd).await;
    cat.close().await;
    let p = p?;
    Ok(Output {
        json: p.json,
        text: p.text,
        status: 0,
    })
}

async fn catalog(loaded: &LoadedConfig, cmd: CatalogCommand) -> Result<Output> {
    ensure_data_dir(loaded).await?;
    let cat = reel_engine::catalogue::Catalogue::open(&loaded.config.store.url).await?;
    match cmd {
        CatalogCommand::Ls { prefix, limit } => {
            let objs = cat.list_objects(&prefix, limit).await?;
            let text = if objs.is_empty() {
                format!("no objects under `{prefix}`")
            } else {
                objs.iter()
                    .map(|o| {
                        format!(
                            "{}  gen {}  {}{}  sha256 {}",
                            o.key,
                            o.generation,
                            human_bytes(o.size),
                            meta_text(o.meta.as_ref()),
                            hex::encode(o.sha256)
                        )
                    })
                    .collect::<Vec<_>>()
                    .join("\n")
            };
            let json = json!(objs.iter().map(|o| json!({"key": o.key, "generation": o.generation, "size": o.size, "sha256": hex::encode(o.sha256), "created_unix": o.created_unix, "meta": o.meta})).collect::<Vec<_>>());
            Ok(Output {
                json,
                text,
                status: 0,
            })
        }
        CatalogCommand::Find { key } => {
            let Some(obj) = cat.object(&key).await? else {
                return Err(JobsError::NotFound {
                    what: format!("no durable object with key `{key}`"),
                    hint: "list keys with `reel catalog ls PREFIX`".into(),
                });
            };
            let copies = cat.copies(&key, obj.generation).await?;
            let mut text = format!(
                "{}  gen {}  {}{}\n",
                obj.key,
                obj.generation,
                human_bytes(obj.size),
                meta_text(obj.meta.as_ref())
            );
            for c in &copies {
                text.push_str(&format!(
                    "  copy on {} ({:?}) container {} file {} block {} offset {} length {}\n",
                    c.barcode,
                    c.cartridge_state,
                    c.container_id,
                    c.file_number,
                    c.container_first_block,
                    c.offset,
                    c.length
                ));
            }
            let json = json!({"key": obj.key, "generation": obj.generation, "size": obj.size, "sha256": hex::encode(obj.sha256), "meta": obj.meta, "copies": copies});
            Ok(Output {
                json,
                text,
                status: 0,
            })
        }
        CatalogCommand::Rebuild { .. } => {
            Err(JobsError::Internal("rebuild is submitted as a job".into()))
        }
    }
}

/// Milliseconds since the Unix epoch as a UTC time, `2026-12-05T03:10:22Z` (the proleptic
/// Gregorian calendar, days to civil date as in Howard Hinnant's `civil_from_days`).
fn unix_ms_text(ms: i64) -> String {
    let secs = ms.div_euclid(1000);
    let (days, rem) = (secs.div_euclid(86_400), secs.rem_euclid(86_400));
    let z = days + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z.rem_euclid(146_097);
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let d = doy - (153 * mp + 2) / 5 + 1;
    let m = if mp < 10 { mp + 3 } else { mp - 9 };
    let y = yoe + era * 400 + i64::from(m <= 2);
    format!(
        "{y:04}-{m:02}-{d:02}T{:02}:{:02}:{:02}Z",
        rem / 3600,
        rem % 3600 / 60,
        rem % 60
    )
}

/// `  file 0640 1000:100` (with `sparse` when it had holes), or nothing when none was recorded.
fn meta_text(meta: Option<&reel_engine::format::ObjectMeta>) -> String {
    meta.map_or_else(String::new, |m| {
        format!(
            "  {} {:04o} {}:{}{}",
            m.kind.as_str(),
            m.mode,
            m.uid,
            m.gid,
            if m.sparse { " sparse" } else { "" }
        )
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use clap::CommandFactory;

    #[test]
    fn cli_definition_is_consistent() {
        Cli::command().debug_assert();
    }

    #[test]
    fn times_are_shown_in_utc() {
        assert_eq!(unix_ms_text(0), "1970-01-01T00:00:00Z");
        assert_eq!(unix_ms_text(951_782_400_000), "2000-02-29T00:00:00Z");
        assert_eq!(unix_ms_text(1_796_440_222_999), "2026-12-05T03:10:22Z");
        assert_eq!(unix_ms_text(-1), "1969-12-31T23:59:59Z");
    }

    #[test]
    fn parses_the_documented_forms() {
        let c = Cli::try_parse_from([
            "reel",
            "--json",
            "--data-dir",
            "/d",
            "recall",
            "a",
            "b",
            "--to",
            "/out",
        ])
        .unwrap();
        assert!(c.json);
        assert!(matches!(c.command, Command::Recall(ref r) if r.keys == ["a", "b"]));
        let c = Cli::try_parse_from(["reel", "jobs", "list", "--state", "failed"]).unwrap();
        assert!(matches!(
            c.command,
            Command::Jobs(JobsCommand::List {
                state: Some(JobState::Failed),
                ..
            })
        ));
        assert!(
            Cli::try_parse_from(["reel", "verify"]).is_err(),
            "verify needs a target"
        );
        assert!(
            Cli::try_parse_from(["reel", "intake"]).is_err(),
            "intake needs barcodes or --all-new"
        );
        assert!(
            Cli::try_parse_from(["reel", "recall", "k", "--prefix", "p", "--to", "/o"]).is_err()
        );
    }

    #[test]
    fn archive_source_rules() {
        use reel_queue::job::ArchiveSource;
        use reel_queue::submission::archive_source;
        let dir = tempfile::tempdir().unwrap();
        let f = dir.path().join("a.txt");
        std::fs::write(&f, b"x").unwrap();
        assert_eq!(
            archive_source(&[dir.path().to_path_buf()]).unwrap(),
            ArchiveSource::Tree(dir.path().to_path_buf())
        );
        assert_eq!(
            archive_source(std::slice::from_ref(&f)).unwrap(),
            ArchiveSource::Files(vec![f.clone()])
        );
        assert!(archive_source(&[f.clone(), dir.path().to_path_buf()]).is_err());
        // A missing path is a file to archive_source; the submission check refuses it.
        let missing = dir.path().join("missing");
        assert_eq!(
            archive_source(std::slice::from_ref(&missing)).unwrap(),
            ArchiveSource::Files(vec![missing])
        );
        // A symlink to a directory is not a tree (the check refuses the link).
        let link = dir.path().join("link");
        std::os::unix::fs::symlink(dir.path(), &link).unwrap();
        assert_eq!(
            archive_source(std::slice::from_ref(&link)).unwrap(),
            ArchiveSource::Files(vec![link])
        );
    }

    #[test]
    fn bytes_are_human() {
        assert_eq!(human_bytes(512), "512 B");
        assert_eq!(human_bytes(1536), "1.5 KiB");
        assert_eq!(human_bytes(3 << 30), "3.0 GiB");
    }

    /// Submit → list → cancel → retry → show through the command layer, on SQLite.
    #[tokio::test]
    async fn job_commands_round_trip() {
        let dir = tempfile::tempdir().unwrap();
        let parse = |args: &[&str]| {
            let mut v = vec!["reel", "--data-dir", dir.path().to_str().unwrap()];
            v.extend_from_slice(args);
            Cli::try_parse_from(v).unwrap()
        };
        let loaded = LoadedConfig::load_with(None, Some(dir.path()), &Default::default()).unwrap();
        let out = dispatch(parse(&["intake", "A00001", "A00002"]), &loaded)
            .await
            .unwrap();
        let id = out.json["id"].as_str().unwrap().to_string();
        let out = dispatch(parse(&["jobs", "list"]), &loaded).await.unwrap();
        assert_eq!(out.json.as_array().unwrap().len(), 1);
        let out = dispatch(parse(&["jobs", "cancel", &id]), &loaded)
            .await
            .unwrap();
        assert_eq!(out.json["state"], "cancelled");
        let out = dispatch(parse(&["jobs", "wait", &id]), &loaded)
            .await
            .unwrap();
        assert_eq!(out.status, 1, "a cancelled job makes wait fail");
        let out = dispatch(parse(&["jobs", "retry", &id]), &loaded)
            .await
            .unwrap();
        assert_eq!(out.json["state"], "queued");
        let out = dispatch(parse(&["jobs", "wait", &id, "--timeout", "0"]), &loaded)
            .await
            .unwrap();
        assert_eq!(out.status, 2, "no worker: wait times out");
        let err = dispatch(parse(&["jobs", "show", "nope"]), &loaded)
            .await
            .unwrap_err();
        assert!(err.to_string().contains("reel jobs list"), "{err}");
        let err = dispatch(parse(&["library", "drives"]), &loaded)
            .await
            .unwrap_err();
        assert!(
            err.to_string().contains("[library] plugin is not set"),
            "{err}"
        );
        assert!(dir.path().join("reel.db").exists() && dir.path().join("jobs.db").exists());
    }
}
