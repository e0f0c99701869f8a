//! `reel key create|list|show|export-paper|import`: the data-encryption keys of the key file
//! (`[keys] file`). No command prints a key's bytes except `export-paper --plain`, which is
//! asked for by name; the others show ids and fingerprints.

use std::io::Read;
use std::path::{Path, PathBuf};

use clap::Subcommand;
use serde_json::json;
use zeroize::Zeroizing;

use reel_keys::paper::{self, PaperBody};
use reel_keys::protect::{protect, unprotect};
use reel_keys::store::{KeyFile, KeyInfo};
use reel_keys::{DataKey, KeyError, KeyId};
use reel_queue::config::LoadedConfig;
use reel_queue::error::{JobsError, Result};

/// `reel key …`
#[derive(Debug, Subcommand)]
pub enum KeyCommand {
    /// Create a random 256-bit key under a new id in the key file, with a copy protected by a
    /// passphrase when one is given (for `export-paper`, and recovery from a cartridge).
    Create {
        /// The new key's id (1 to 64 letters, digits, '.', '_' or '-').
        id: String,
        /// A file whose first line is the passphrase (at least 10 characters).
        #[arg(long, value_name = "FILE")]
        passphrase_file: Option<PathBuf>,
    },
    /// The keys in the key file: id, fingerprint, date, whether a protected copy is kept.
    List,
    /// One key's id, fingerprint, date and whether a protected copy is kept.
    Show {
        /// The key's id.
        id: String,
    },
    /// Print a key's paper form, to keep in a safe and type back in with `reel key import`:
    /// its passphrase-protected copy, or with `--plain` the key itself.
    ExportPaper {
        /// The key's id.
        id: String,
        /// Print the key itself, not its protected copy (whoever holds the paper holds the
        /// key); needed for a key created without a passphrase.
        #[arg(long)]
        plain: bool,
    },
    /// Add a key from its paper form (a file, or `-` for standard input) under the id it
    /// names; a protected one needs its passphrase.
    Import {
        /// The paper key's text.
        file: PathBuf,
        /// A file whose first line is the passphrase.
        #[arg(long, value_name = "FILE")]
        passphrase_file: Option<PathBuf>,
    },
}

/// What a key command prints.
pub struct Printed {
    /// For `--json`.
    pub json: serde_json::Value,
    /// For people.
    pub text: String,
}

fn now_unix() -> i64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_secs() as i64)
        .unwrap_or(0)
}

/// The passphrase in the first line of `file` (wiped when dropped).
fn passphrase(file: &Path) -> Result<Zeroizing<String>> {
    let mut text = Zeroizing::new(String::new());
    std::fs::File::open(file)
        .and_then(|mut f| f.by_ref().take(64 << 10).read_to_string(&mut text))
        .map_err(|source| JobsError::Io {
            doing: "reading the passphrase from",
            path: file.to_path_buf(),
            source,
        })?;
    let first = text.lines().next().unwrap_or("");
    let refused = |what: &str| JobsError::Refused {
        what: format!("the passphrase in {} {what}", file.display()),
        hint: "put the passphrase alone on the file's first line: at least 10 printable \
               characters, no control characters, no spaces at either end (they are lost when \
               it is copied)"
            .into(),
    };
    if first.chars().any(char::is_control) {
        return Err(refused("holds control characters"));
    }
    if first.trim() != first {
        return Err(refused("starts or ends with spaces"));
    }
    Ok(Zeroizing::new(first.to_string()))
}

fn id(text: &str) -> Result<KeyId> {
    Ok(KeyId::new(text)?)
}

fn shown(k: &KeyInfo) -> String {
    format!(
        "{}  fingerprint {}  created {}  {}",
        k.id,
        k.fingerprint,
        k.created_unix,
        if k.protected {
            "passphrase copy kept"
        } else {
            "no passphrase copy"
        }
    )
}

/// Run a key command (blocking file work and the key derivation run off the runtime).
pub async fn run(loaded: &LoadedConfig, cmd: KeyCommand) -> Result<Printed> {
    let file = KeyFile::new(&loaded.config.keys.file);
    tokio::task::spawn_blocking(move || run_blocking(&file, cmd))
        .await
        .map_err(|e| JobsError::Internal(format!("the key command's task failed: {e}")))?
}

fn run_blocking(file: &KeyFile, cmd: KeyCommand) -> Result<Printed> {
    match cmd {
        KeyCommand::Create {
            id: name,
            passphrase_file,
        } => {
            let id = id(&name)?;
            let key = DataKey::generate();
            let protected = match &passphrase_file {
                Some(f) => Some(protect(&key, &id, &passphrase(f)?)?),
                None => None,
            };
            let info = file.add(&id, &key, protected.as_ref(), now_unix())?;
            Ok(Printed {
                text: format!("created key {}", shown(&info)),
                json: json!(info),
            })
        }
        KeyCommand::List => {
            let keys = file.list()?;
            let text = if keys.is_empty() {
                format!("no keys in {}", file.path().display())
            } else {
                keys.iter().map(shown).collect::<Vec<_>>().join("\n")
            };
            Ok(Printed {
                json: json!(keys),
                text,
            })
        }
        KeyCommand::Show { id: name } => {
            let info = file.info(&id(&name)?)?;
            Ok(Printed {
                text: shown(&info),
                json: json!(info),
            })
        }
        KeyCommand::ExportPaper { id: name, plain } => {
            let id = id(&name)?;
            let key = file.get(&id)?;
            let body = match (plain, file.protected_copy(&id)?) {
                (true, _) => PaperBody::Plain(key.clone()),
                (false, Some(p)) => PaperBody::Protected(p),
                (false, None) => {
                    return Err(JobsError::Refused {
                        what: format!("key {id} has no passphrase-protected copy"),
                        hint: "give --plain to print the key itself (whoever holds the paper \
                               then holds the key), or create keys with --passphrase-file"
                            .into(),
                    });
                }
            };
            let form = if plain { "plain" } else { "protected" };
            let text = paper::render(&id, key.fingerprint(), &body);
            Ok(Printed {
                json: json!({
                    "id": id.as_str(),
                    "fingerprint": key.fingerprint().to_string(),
                    "form": form,
                    "paper": text.as_str(),
                }),
                text: text.trim_end().to_string(),
            })
        }
        KeyCommand::Import {
            file: from,
            passphrase_file,
        } => {
            // A paper key is under a kilobyte; more than a MiB is not one.
            const MAX_PAPER: u64 = 1 << 20;
            let mut raw = Zeroizing::new(Vec::new());
            let read = if from.as_os_str() == "-" {
                std::io::stdin()
                    .take(MAX_PAPER + 1)
                    .read_to_end(&mut raw)
                    .map(|_| ())
            } else {
                std::fs::File::open(&from)
                    .and_then(|f| f.take(MAX_PAPER + 1).read_to_end(&mut raw).map(|_| ()))
            };
            read.map_err(|source| JobsError::Io {
                doing: "reading the paper key from",
                path: from.clone(),
                source,
            })?;
            let bad = |what: &str| JobsError::Refused {
                what: format!("{} is not a paper key: {what}", from.display()),
                hint: "give the text `reel key export-paper` printed".into(),
            };
            if raw.len() as u64 > MAX_PAPER {
                return Err(bad("it is more than 1 MiB"));
            }
            let text = std::str::from_utf8(&raw).map_err(|_| bad("it is not UTF-8 text"))?;
            let paper = paper::parse(text)?;
            let pass = match &passphrase_file {
                Some(f) => Some(passphrase(f)?),
                None => None,
            };
            let (key, protected) = match paper.body {
                PaperBody::Plain(k) => {
                    let p = match &pass {
                        Some(pass) => Some(protect(&k, &paper.id, pass)?),
                        None => None,
                    };
                    (k, p)
                }
                PaperBody::Protected(p) => {
                    let Some(pass) = &pass else {
                        return Err(JobsError::Refused {
                            what: format!(
                                "the paper key {} is protected by a passphrase",
                                paper.id
                            ),
                            hint: "give the passphrase with --passphrase-file".into(),
                        });
                    };
                    let k = unprotect(&p, &paper.id, pass)?;
                    (k, Some(p))
                }
            };
            if key.fingerprint() != paper.fingerprint {
                return Err(KeyError::Mismatch {
                    id: paper.id.to_string(),
                    expected: paper.fingerprint.to_string(),
                    got: key.fingerprint().to_string(),
                }
                .into());
            }
            let info = file.add(&paper.id, &key, protected.as_ref(), now_unix())?;
            Ok(Printed {
                text: format!("imported key {}", shown(&info)),
                json: json!(info),
            })
        }
    }
}
