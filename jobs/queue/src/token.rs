//! API tokens of `reel serve`: who may call the service, with which scopes, and where on the
//! server's filesystem their jobs may read and write.
//!
//! A token is shown once, when it is created, as `reel_<id>.<secret>`: a 12-hex-digit id that
//! names it in lists, logs and job records, and a 256-bit random secret. Only the SHA-256 of
//! the secret is stored (the secret is random and long, so a slow password hash would add
//! nothing but latency to every request); a presented secret is hashed and compared with the
//! stored digest in constant time ([`subtle`]), after the id has been looked up, so neither a
//! wrong secret nor a wrong id answers faster than the other in a way that leaks the digest.
//!
//! Scopes ([`Scope`]) follow what a caller does, as Proxmox Backup Server's token privileges
//! and CTA's per-instance roles do: `read` sees every job, the catalogue and the library;
//! `submit` queues archive, recall and verify jobs within the token's roots and sees, cancels
//! and retries only its own jobs; `operate` acts on anyone's jobs and on the library (intake,
//! and the drive and cartridge actions); `admin` may do everything. `operate` includes `read`.
//!
//! Tokens live in the `[store]` database (`reel_tokens`), so every `reel serve` sharing a
//! PostgreSQL store honours the same tokens, and a revoke takes effect at the next request.

use std::collections::BTreeSet;
use std::fmt;
use std::path::{Path, PathBuf};
use std::str::FromStr;

use rand::RngCore;
use serde::Serialize;
use sha2::{Digest, Sha256};
use sqlx::Row;
use subtle::ConstantTimeEq;

use crate::db::{Db, now_ms};
use crate::error::{JobsError, Result};
use crate::on_db;

/// What a token may do.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum Scope {
    /// See every job, the catalogue and the library.
    Read,
    /// Queue archive, recall and verify jobs within the token's roots; see, cancel and retry
    /// its own jobs.
    Submit,
    /// Cancel and retry anyone's jobs, take cartridges in, act on drives and cartridges.
    Operate,
    /// Everything.
    Admin,
}

impl Scope {
    /// Every scope, weakest first.
    pub const ALL: [Scope; 4] = [Scope::Read, Scope::Submit, Scope::Operate, Scope::Admin];

    /// Lower-case name.
    pub fn as_str(self) -> &'static str {
        match self {
            Scope::Read => "read",
            Scope::Submit => "submit",
            Scope::Operate => "operate",
            Scope::Admin => "admin",
        }
    }
}

impl fmt::Display for Scope {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

impl FromStr for Scope {
    type Err = String;
    fn from_str(s: &str) -> std::result::Result<Scope, String> {
        Scope::ALL
            .into_iter()
            .find(|k| k.as_str() == s.trim())
            .ok_or_else(|| format!("unknown scope `{s}` (read, submit, operate, admin)"))
    }
}

/// Parse `read,submit`; an empty list or an unknown name is refused.
pub fn parse_scopes(s: &str) -> std::result::Result<BTreeSet<Scope>, String> {
    let set = s
        .split(',')
        .filter(|p| !p.trim().is_empty())
        .map(Scope::from_str)
        .collect::<std::result::Result<BTreeSet<_>, _>>()?;
    if set.is_empty() {
        return Err("no scope given (read, submit, operate, admin)".into());
    }
    Ok(set)
}

/// Highest priority a token's jobs may ask for unless it was created with another.
pub const DEFAULT_MAX_PRIORITY: i32 = crate::job::DEFAULT_PRIORITY;

/// A token as stored (never its secret).
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Token {
    /// The id: 12 hex digits, the part of the token before the dot.
    pub id: String,
    /// What the operator called it.
    pub name: String,
    /// What it may do.
    pub scopes: BTreeSet<Scope>,
    /// Directories its archive sources and recall destinations must lie in.
    pub roots: Vec<PathBuf>,
    /// Prefixes of the object keys its jobs may archive and recall (`""`: every key). The
    /// catalogue is one namespace; these keep one client from reading or replacing another's
    /// objects.
    pub key_prefixes: Vec<String>,
    /// Highest priority its jobs may ask for (`operate` and `admin` may ask for any).
    pub max_priority: i32,
    /// Created (unix ms).
    pub created_ms: i64,
    /// Revoked (unix ms); a revoked token authenticates nothing.
    pub revoked_ms: Option<i64>,
}

impl Token {
    /// Whether the token holds `scope` (`admin` holds every scope, `operate` holds `read`).
    pub fn has(&self, scope: Scope) -> bool {
        self.scopes.contains(&scope)
            || self.scopes.contains(&Scope::Admin)
            || (scope == Scope::Read && self.scopes.contains(&Scope::Operate))
    }

    /// Whether its jobs may archive or recall `key` (or every key under a prefix `key`).
    pub fn may_use_key(&self, key: &str) -> bool {
        self.key_prefixes
            .iter()
            .any(|p| key.starts_with(p.as_str()))
    }

    /// Whether it sees and acts on every job, not only its own.
    pub fn sees_all_jobs(&self) -> bool {
        // `operate` and `admin` hold `read`.
        self.has(Scope::Read)
    }

    /// The scopes as `read,submit`.
    pub fn scope_list(&self) -> String {
        self.scopes
            .iter()
            .map(|s| s.as_str())
            .collect::<Vec<_>>()
            .join(",")
    }
}

/// A token just created: the record and, once only, the whole bearer string.
#[derive(Debug, Clone)]
pub struct NewToken {
    /// The stored record.
    pub token: Token,
    /// `reel_<id>.<secret>`: what a client sends as `Authorization: Bearer …`. Not stored.
    pub bearer: String,
}

/// Prefix of every bearer string, so a leaked one is recognisable (secret scanners).
pub const BEARER_PREFIX: &str = "reel_";
const ID_HEX: usize = 12;
const SECRET_HEX: usize = 64;

/// Split `reel_<id>.<secret>` into the id and the secret; `None` when it is not one.
pub fn split_bearer(bearer: &str) -> Option<(&str, &str)> {
    let rest = bearer.strip_prefix(BEARER_PREFIX)?;
    let (id, secret) = rest.split_once('.')?;
    let hex = |s: &str, n: usize| s.len() == n && s.bytes().all(|b| b.is_ascii_hexdigit());
    (hex(id, ID_HEX) && hex(secret, SECRET_HEX)).then_some((id, secret))
}

fn digest(secret: &str) -> [u8; 32] {
    Sha256::digest(secret.as_bytes()).into()
}

/// The token table.
#[derive(Debug, Clone)]
pub struct TokenStore {
    db: Db,
}

const COLUMNS: &str =
    "id, name, secret_sha256, scopes, roots, key_prefixes, max_priority, created_ms, revoked_ms";

fn decode<R: Row>(row: &R) -> Result<(Token, String)>
where
    for<'a> &'a str: sqlx::ColumnIndex<R>,
    for<'a> String: sqlx::Decode<'a, R::Database> + sqlx::Type<R::Database>,
    for<'a> i64: sqlx::Decode<'a, R::Database> + sqlx::Type<R::Database>,
    for<'a> Option<i64>: sqlx::Decode<'a, R::Database> + sqlx::Type<R::Database>,
{
    let get_err = |e: sqlx::Error| JobsError::Database {
        backend: "sql",
        location: "the token table".into(),
        doing: "decoding a token row".into(),
        source: e,
    };
    let id: String = row.try_get("id").map_err(get_err)?;
    let bad = |what: String| JobsError::Internal(format!("token {id}: {what}"));
    let scopes: String = row.try_get("scopes").map_err(get_err)?;
    let roots: String = row.try_get("roots").map_err(get_err)?;
    let roots: Vec<PathBuf> = serde_json::from_str(&roots).map_err(|e| bad(e.to_string()))?;
    let prefixes: String = row.try_get("key_prefixes").map_err(get_err)?;
    let key_prefixes: Vec<String> =
        serde_json::from_str(&prefixes).map_err(|e| bad(e.to_string()))?;
    let token = Token {
        key_prefixes,
        name: row.try_get("name").map_err(get_err)?,
        scopes: parse_scopes(&scopes).map_err(bad)?,
        roots,
        max_priority: row.try_get::<i64, _>("max_priority").map_err(get_err)? as i32,
        created_ms: row.try_get("created_ms").map_err(get_err)?,
        revoked_ms: row.try_get("revoked_ms").map_err(get_err)?,
        id,
    };
    let hash: String = row.try_get("secret_sha256").map_err(get_err)?;
    Ok((token, hash))
}

/// Trees no root may lie in: devices and kernel state.
pub const SYSTEM_TREES: [&str; 4] = ["/proc", "/sys", "/dev", "/run"];

/// Check a token's roots: absolute, no `..`, not in a system tree, and apart from reel's own
/// paths.
pub fn check_roots(roots: &[PathBuf], protected: &[PathBuf]) -> std::result::Result<(), String> {
    for r in roots {
        if !r.is_absolute() {
            return Err(format!(
                "root {} is not absolute; give absolute directories",
                r.display()
            ));
        }
        if r.components().any(|c| c == std::path::Component::ParentDir) {
            return Err(format!(
                "root {} contains `..`; give the directory itself",
                r.display()
            ));
        }
        if let Some(sys) = SYSTEM_TREES.iter().find(|s| r.starts_with(s)) {
            return Err(format!(
                "root {} lies in {sys}, whose files are devices and kernel state, not data; give a data directory",
                r.display()
            ));
        }
        for p in protected {
            if p.starts_with(r) || r.starts_with(p) {
                return Err(format!(
                    "root {} overlaps reel's own {}: a client could read its database or replace its configuration; give a root apart from it",
                    r.display(),
                    p.display()
                ));
            }
        }
    }
    Ok(())
}

impl TokenStore {
    /// Tokens on this database.
    pub fn new(db: Db) -> TokenStore {
        TokenStore { db }
    }

    /// Create a token; the bearer string is returned once and never stored.
    pub async fn create(
        &self,
        name: &str,
        scopes: BTreeSet<Scope>,
        roots: Vec<PathBuf>,
        key_prefixes: Vec<String>,
        max_priority: i32,
    ) -> Result<NewToken> {
        if name.trim().is_empty() || name.len() > 128 {
            return Err(JobsError::Config {
                origin: "reel token create --name".into(),
                message: "give the token a name of 1 to 128 characters (who or what uses it)"
                    .into(),
            });
        }
        let mut id = [0u8; ID_HEX / 2];
        let mut secret = [0u8; SECRET_HEX / 2];
        rand::rngs::OsRng.fill_bytes(&mut id);
        rand::rngs::OsRng.fill_bytes(&mut secret);
        let (id, secret) = (hex::encode(id), hex::encode(secret));
        let token = Token {
            id: id.clone(),
            name: name.to_string(),
            scopes,
            roots,
            key_prefixes,
            max_priority,
            created_ms: now_ms(),
            revoked_ms: None,
        };
        let internal = |e: serde_json::Error| JobsError::Internal(e.to_string());
        let roots_json = serde_json::to_string(&token.roots).map_err(internal)?;
        let prefixes_json = serde_json::to_string(&token.key_prefixes).map_err(internal)?;
        let sql = "INSERT INTO reel_tokens (id, name, secret_sha256, scopes, roots, key_prefixes, max_priority, created_ms) \
                   VALUES ($1, $2, $3, $4, $5, $6, $7, $8)";
        on_db!(&self.db, |p| sqlx::query(sql)
            .bind(&token.id)
            .bind(&token.name)
            .bind(hex::encode(digest(&secret)))
            .bind(token.scope_list())
            .bind(&roots_json)
            .bind(&prefixes_json)
            .bind(token.max_priority as i64)
            .bind(token.created_ms)
            .execute(p)
            .await
            .map(|_| ()))
        .map_err(self.db.err("recording a new token"))?;
        Ok(NewToken {
            bearer: format!("{BEARER_PREFIX}{id}.{secret}"),
            token,
        })
    }

    /// Every token, revoked ones included, oldest first.
    pub async fn list(&self) -> Result<Vec<Token>> {
        let sql = format!("SELECT {COLUMNS} FROM reel_tokens ORDER BY created_ms, id");
        on_db!(&self.db, |p| {
            let rows = sqlx::query(sqlx::AssertSqlSafe(sql.clone()))
                .fetch_all(p)
                .await
                .map_err(self.db.err("listing tokens"))?;
            rows.iter().map(|r| decode(r).map(|(t, _)| t)).collect()
        })
    }

    async fn get(&self, id: &str) -> Result<Option<(Token, String)>> {
        let sql = format!("SELECT {COLUMNS} FROM reel_tokens WHERE id = $1");
        on_db!(&self.db, |p| {
            let row = sqlx::query(sqlx::AssertSqlSafe(sql.clone()))
                .bind(id)
                .fetch_optional(p)
                .await
                .map_err(self.db.err("reading a token"))?;
            row.as_ref().map(decode).transpose()
        })
    }

    /// Revoke a token by id (or by its whole bearer string); it authenticates nothing from
    /// the next request on. Revoking a revoked token is not an error.
    pub async fn revoke(&self, id: &str) -> Result<Token> {
        let id = split_bearer(id).map(|(i, _)| i).unwrap_or(id);
        let sql = "UPDATE reel_tokens SET revoked_ms = $2 WHERE id = $1 AND revoked_ms IS NULL";
        on_db!(&self.db, |p| sqlx::query(sql)
            .bind(id)
            .bind(now_ms())
            .execute(p)
            .await
            .map(|_| ()))
        .map_err(self.db.err("revoking a token"))?;
        self.get(id)
            .await?
            .map(|(t, _)| t)
            .ok_or_else(|| JobsError::NotFound {
                what: format!("no token with id {id}"),
                hint: "list tokens with `reel token list`".into(),
            })
    }

    /// Whether any token may still be used (`reel serve` refuses a non-loopback address
    /// without one).
    pub async fn any_active(&self) -> Result<bool> {
        Ok(self.list().await?.iter().any(|t| t.revoked_ms.is_none()))
    }

    /// Whether token `id` exists and is not revoked (asked again at the end of a long
    /// request, such as an upload, before its work is queued).
    pub async fn still_active(&self, id: &str) -> Result<bool> {
        Ok(self
            .get(id)
            .await?
            .is_some_and(|(t, _)| t.revoked_ms.is_none()))
    }

    /// The live token a bearer string names, if its secret is right; `None` for anything
    /// else (malformed, unknown id, wrong secret, revoked), which the caller answers with
    /// one and the same 401.
    pub async fn authenticate(&self, bearer: &str) -> Result<Option<Token>> {
        let Some((id, secret)) = split_bearer(bearer) else {
            return Ok(None);
        };
        let Some((token, stored)) = self.get(id).await? else {
            // Hash anyway, so an unknown id costs what a known one does.
            let _ = digest(secret).ct_eq(&[0u8; 32]);
            return Ok(None);
        };
        let Ok(stored) = hex::decode(stored) else {
            return Ok(None);
        };
        let good: bool = digest(secret).as_slice().ct_eq(stored.as_slice()).into();
        Ok((good && token.revoked_ms.is_none()).then_some(token))
    }
}

/// Whether `path` lies in one of `roots` (lexically: both absolute and free of `..`).
pub fn within_roots(path: &Path, roots: &[PathBuf]) -> Option<PathBuf> {
    if !path.is_absolute()
        || path
            .components()
            .any(|c| c == std::path::Component::ParentDir)
    {
        return None;
    }
    roots.iter().find(|r| path.starts_with(r)).cloned()
}

#[cfg(test)]
mod tests {
    use super::*;

    async fn store() -> (TokenStore, tempfile::TempDir) {
        let dir = tempfile::tempdir().unwrap();
        let url = format!("sqlite:{}", dir.path().join("t.db").display());
        let db = Db::connect(&url).await.unwrap();
        (TokenStore::new(db), dir)
    }

    #[tokio::test]
    async fn a_token_authenticates_with_its_secret_only_until_revoked() {
        let (s, _d) = store().await;
        let t = s
            .create(
                "backup-service",
                parse_scopes("submit").unwrap(),
                vec!["/data".into()],
                vec!["svc/".into()],
                50,
            )
            .await
            .unwrap();
        assert!(t.bearer.starts_with("reel_"));
        let got = s.authenticate(&t.bearer).await.unwrap().unwrap();
        assert_eq!(got.id, t.token.id);
        assert!(got.has(Scope::Submit) && !got.has(Scope::Read) && !got.has(Scope::Operate));
        // One hex digit of the secret changed: refused.
        let mut wrong = t.bearer.clone();
        let last = wrong.pop().unwrap();
        wrong.push(if last == '0' { '1' } else { '0' });
        assert!(s.authenticate(&wrong).await.unwrap().is_none());
        // Another id with the right secret, garbage, and an empty string: refused.
        let (_, secret) = split_bearer(&t.bearer).unwrap();
        let other = format!("reel_000000000000.{secret}");
        assert!(s.authenticate(&other).await.unwrap().is_none());
        assert!(s.authenticate("reel_x.y").await.unwrap().is_none());
        assert!(s.authenticate("").await.unwrap().is_none());
        // The stored row holds no secret.
        let rows = s.list().await.unwrap();
        assert_eq!(rows.len(), 1);
        assert!(s.any_active().await.unwrap());
        let revoked = s.revoke(&t.token.id).await.unwrap();
        assert!(revoked.revoked_ms.is_some());
        assert!(s.authenticate(&t.bearer).await.unwrap().is_none());
        assert!(!s.any_active().await.unwrap());
        assert!(s.revoke("000000000000").await.is_err());
    }

    #[test]
    fn scopes_parse_and_imply() {
        assert!(parse_scopes("").is_err());
        assert!(parse_scopes("read,writer").unwrap_err().contains("writer"));
        let t = |s: &str| Token {
            id: "x".into(),
            name: "x".into(),
            scopes: parse_scopes(s).unwrap(),
            roots: vec![],
            key_prefixes: vec!["a/".into()],
            max_priority: 50,
            created_ms: 0,
            revoked_ms: None,
        };
        assert!(t("admin").has(Scope::Submit) && t("admin").has(Scope::Operate));
        assert!(t("operate").has(Scope::Read) && !t("operate").has(Scope::Admin));
        assert!(!t("submit").sees_all_jobs() && t("read").sees_all_jobs());
        assert_eq!(t("submit, read").scope_list(), "read,submit");
        assert!(t("submit").may_use_key("a/b") && !t("submit").may_use_key("b/a"));
        assert!(!t("submit").may_use_key("") && !t("submit").may_use_key("a"));
    }

    #[test]
    fn roots_are_absolute_apart_from_reels_own_and_contain_lexically() {
        let prot = vec![PathBuf::from("/var/lib/reel")];
        assert!(check_roots(&["/srv/data".into()], &prot).is_ok());
        assert!(check_roots(&["srv".into()], &prot).is_err());
        assert!(check_roots(&["/srv/../etc".into()], &prot).is_err());
        assert!(
            check_roots(&["/".into()], &prot)
                .unwrap_err()
                .contains("overlaps")
        );
        assert!(check_roots(&["/var/lib/reel/x".into()], &prot).is_err());
        assert!(
            check_roots(&["/dev".into()], &prot)
                .unwrap_err()
                .contains("devices")
        );
        assert!(check_roots(&["/proc/self/root".into()], &prot).is_err());
        let roots = vec![PathBuf::from("/srv/data")];
        assert!(within_roots(Path::new("/srv/data/a/b"), &roots).is_some());
        assert!(within_roots(Path::new("/srv/data"), &roots).is_some());
        assert!(within_roots(Path::new("/srv/database"), &roots).is_none());
        assert!(within_roots(Path::new("/srv/data/../../etc"), &roots).is_none());
        assert!(within_roots(Path::new("srv/data/x"), &roots).is_none());
    }
}
