//! Legal holds (`legal_holds`): a hold on one key, or on every key under a prefix, refuses the
//! deletion (and any expiry) of what it covers until an operator releases it. Who placed and
//! released each hold, when and why, are kept for good: a released hold stays listed.
//!
//! The rule of what a hold covers lives here once: [`LegalHold::covers`] for a key,
//! [`LegalHold::meets_prefix`] for a prefix about to be deleted. A deletion reads the active
//! holds in the same transaction as it marks objects deleted (on PostgreSQL with the table
//! locked against new holds until it commits), so a hold placed while a delete runs either
//! lands before the batch and protects its keys, or after it.

use serde::Serialize;

use super::Catalogue;
use super::backend::{in_write_tx, now_unix, on_pool};
use super::error::{CatalogueError, DbContext, Result, shorten};
use super::object::{validate_key, validate_key_prefix};

/// Longest reason kept, in bytes.
pub const MAX_REASON: usize = 1000;

/// What a hold covers.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum HoldScope {
    /// One key (every generation of it).
    Key(String),
    /// Every key that starts with this prefix.
    Prefix(String),
}

/// One legal hold, active or released.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct LegalHold {
    /// Its number (`reel hold release ID`).
    pub id: i64,
    /// What it covers.
    pub scope: HoldScope,
    /// When it was placed (unix seconds).
    pub placed_unix: i64,
    /// Who placed it.
    pub placed_by: String,
    /// Why.
    pub reason: String,
    /// When it was released (unix seconds); `None` while it holds.
    pub released_unix: Option<i64>,
    /// Who released it.
    pub released_by: Option<String>,
    /// Why it was released.
    pub release_reason: Option<String>,
}

impl LegalHold {
    /// Whether it still holds.
    pub fn is_active(&self) -> bool {
        self.released_unix.is_none()
    }

    /// Whether it covers `key`.
    pub fn covers(&self, key: &str) -> bool {
        match &self.scope {
            HoldScope::Key(k) => k == key,
            HoldScope::Prefix(p) => key.starts_with(p.as_str()),
        }
    }

    /// Whether it covers some key under `prefix` (a deletion of the prefix would meet it).
    pub fn meets_prefix(&self, prefix: &str) -> bool {
        match &self.scope {
            HoldScope::Key(k) => k.starts_with(prefix),
            HoldScope::Prefix(p) => p.starts_with(prefix) || prefix.starts_with(p.as_str()),
        }
    }

    /// `key a/b` or `prefix a/`.
    pub fn scope_text(&self) -> String {
        match &self.scope {
            HoldScope::Key(k) => format!("key {k}"),
            HoldScope::Prefix(p) => format!("prefix {p}"),
        }
    }

    /// The refusal of deleting `what` (a key or a prefix) that this hold covers.
    pub fn refusal(&self, what: &str) -> CatalogueError {
        CatalogueError::Held {
            what: shorten(what),
            hold: self.id,
            by: self.placed_by.clone(),
            reason: shorten(&self.reason),
        }
    }
}

#[derive(sqlx::FromRow)]
pub(crate) struct HoldRow {
    id: i64,
    key: Option<String>,
    prefix: Option<String>,
    placed_unix: i64,
    placed_by: String,
    reason: String,
    released_unix: Option<i64>,
    released_by: Option<String>,
    release_reason: Option<String>,
}

impl TryFrom<HoldRow> for LegalHold {
    type Error = CatalogueError;

    fn try_from(r: HoldRow) -> Result<LegalHold> {
        let scope = match (r.key, r.prefix) {
            (Some(k), None) => HoldScope::Key(k),
            (None, Some(p)) => HoldScope::Prefix(p),
            _ => {
                return Err(CatalogueError::Corrupt {
                    what: format!(
                        "legal hold {} has neither or both of a key and a prefix",
                        r.id
                    ),
                });
            }
        };
        Ok(LegalHold {
            id: r.id,
            scope,
            placed_unix: r.placed_unix,
            placed_by: r.placed_by,
            reason: r.reason,
            released_unix: r.released_unix,
            released_by: r.released_by,
            release_reason: r.release_reason,
        })
    }
}

/// The columns of [`HoldRow`], in order.
macro_rules! hold_columns {
    () => {
        "id, key, prefix, placed_unix, placed_by, reason, released_unix, released_by, release_reason"
    };
}
pub(crate) use hold_columns;

/// The active holds, read in the write transaction `$tx` that is about to delete what they
/// do not cover; on PostgreSQL (`$postgres`) with the table locked against new holds until it
/// commits, so no hold lands between this read and the deletion.
macro_rules! active_holds_locked {
    ($tx:ident, $postgres:expr, $op:expr) => {{
        if $postgres {
            $crate::catalogue::error::DbContext::ctx(
                sqlx::query("LOCK TABLE legal_holds IN SHARE MODE")
                    .execute(&mut *$tx)
                    .await,
                $op,
            )?;
        }
        let rows: Vec<$crate::catalogue::hold::HoldRow> = $crate::catalogue::error::DbContext::ctx(
            sqlx::query_as(concat!(
                "SELECT ",
                $crate::catalogue::hold::hold_columns!(),
                " FROM legal_holds WHERE released_unix IS NULL"
            ))
            .fetch_all(&mut *$tx)
            .await,
            $op,
        )?;
        rows.into_iter()
            .map($crate::catalogue::hold::LegalHold::try_from)
            .collect::<$crate::catalogue::error::Result<Vec<_>>>()?
    }};
}
pub(crate) use active_holds_locked;

/// Whether `c` is a Unicode format character that a terminal shows as nothing or that
/// reorders the text around it (zero-width spaces and joiners, direction marks and overrides,
/// the byte-order mark, the soft hyphen).
pub fn is_invisible(c: char) -> bool {
    matches!(c,
        '\u{00AD}' | '\u{061C}' | '\u{180E}' | '\u{200B}'..='\u{200F}' | '\u{202A}'..='\u{202E}'
        | '\u{2060}'..='\u{206F}' | '\u{FEFF}' | '\u{FFF9}'..='\u{FFFB}')
}

/// Check a reason or a name: 1 to [`MAX_REASON`] bytes, no control characters.
pub fn check_reason(what: &'static str, text: &str) -> Result<()> {
    let t = text.trim();
    let bad = |reason: String| CatalogueError::InvalidInput {
        what,
        value: shorten(text),
        reason,
    };
    if t.is_empty() {
        return Err(bad(format!(
            "the {what} is empty: say it, it is kept for good"
        )));
    }
    if t.len() > MAX_REASON {
        return Err(bad(format!(
            "it is {} bytes; at most {MAX_REASON}",
            t.len()
        )));
    }
    if t.chars().any(|c| c.is_control() || is_invisible(c)) {
        return Err(bad(
            "it holds control or invisible characters (a line break, a direction mark, a zero-width space)"
                .into(),
        ));
    }
    Ok(())
}

impl Catalogue {
    /// Place a hold on `scope`, by `by`, for `reason`. A prefix must not be empty (a hold on
    /// everything is a hold on each prefix the operator means).
    pub async fn place_hold(&self, scope: &HoldScope, by: &str, reason: &str) -> Result<LegalHold> {
        const OP: &str = "place_hold";
        let (key, prefix) = match scope {
            HoldScope::Key(k) => {
                validate_key(k)?;
                (Some(k.as_str()), None)
            }
            HoldScope::Prefix(p) => {
                validate_key_prefix(p)?;
                if p.is_empty() {
                    return Err(CatalogueError::InvalidInput {
                        what: "hold prefix",
                        value: String::new(),
                        reason: "it is empty; give the prefix of the keys to hold".into(),
                    });
                }
                (None, Some(p.as_str()))
            }
        };
        check_reason("reason", reason)?;
        check_reason("name of who places it", by)?;
        let now = now_unix();
        let id: i64 = on_pool!(&self.backend, |pool| {
            sqlx::query_scalar(
                "INSERT INTO legal_holds (key, prefix, placed_unix, placed_by, reason) \
                 VALUES ($1, $2, $3, $4, $5) RETURNING id",
            )
            .bind(key)
            .bind(prefix)
            .bind(now)
            .bind(by.trim())
            .bind(reason.trim())
            .fetch_one(pool)
            .await
            .ctx(OP)?
        });
        self.hold(id).await?.ok_or_else(|| CatalogueError::Corrupt {
            what: format!("legal hold {id} was placed but cannot be read back"),
        })
    }

    /// Release hold `id`, by `by`, for `reason`. Refused for an unknown hold and one already
    /// released (naming who released it).
    pub async fn release_hold(&self, id: i64, by: &str, reason: &str) -> Result<LegalHold> {
        const OP: &str = "release_hold";
        check_reason("reason", reason)?;
        check_reason("name of who releases it", by)?;
        let now = now_unix();
        in_write_tx!(&self.backend, OP, |tx| {
            let row: Option<HoldRow> = sqlx::query_as(concat!(
                "SELECT ",
                hold_columns!(),
                " FROM legal_holds WHERE id = $1"
            ))
            .bind(id)
            .fetch_optional(&mut *tx)
            .await
            .ctx(OP)?;
            let Some(hold) = row.map(LegalHold::try_from).transpose()? else {
                return Err(CatalogueError::UnknownHold { id });
            };
            if let (Some(_), Some(who)) = (hold.released_unix, &hold.released_by) {
                return Err(CatalogueError::InvalidInput {
                    what: "legal hold",
                    value: id.to_string(),
                    reason: format!("it was released already, by {who}"),
                });
            }
            sqlx::query(
                "UPDATE legal_holds SET released_unix = $2, released_by = $3, release_reason = $4 \
                 WHERE id = $1",
            )
            .bind(id)
            .bind(now)
            .bind(by.trim())
            .bind(reason.trim())
            .execute(&mut *tx)
            .await
            .ctx(OP)?;
        });
        self.hold(id).await?.ok_or_else(|| CatalogueError::Corrupt {
            what: format!("legal hold {id} was released but cannot be read back"),
        })
    }

    /// Hold `id`, if there is one.
    pub async fn hold(&self, id: i64) -> Result<Option<LegalHold>> {
        const OP: &str = "hold";
        let row: Option<HoldRow> = on_pool!(&self.backend, |pool| {
            sqlx::query_as(concat!(
                "SELECT ",
                hold_columns!(),
                " FROM legal_holds WHERE id = $1"
            ))
            .bind(id)
            .fetch_optional(pool)
            .await
            .ctx(OP)?
        });
        row.map(LegalHold::try_from).transpose()
    }

    /// The holds, oldest first: the active ones, or every one ever placed.
    pub async fn holds(&self, with_released: bool) -> Result<Vec<LegalHold>> {
        const OP: &str = "holds";
        let rows: Vec<HoldRow> = on_pool!(&self.backend, |pool| {
            if with_released {
                sqlx::query_as(concat!(
                    "SELECT ",
                    hold_columns!(),
                    " FROM legal_holds ORDER BY id"
                ))
                .fetch_all(pool)
                .await
                .ctx(OP)?
            } else {
                sqlx::query_as(concat!(
                    "SELECT ",
                    hold_columns!(),
                    " FROM legal_holds WHERE released_unix IS NULL ORDER BY id"
                ))
                .fetch_all(pool)
                .await
                .ctx(OP)?
            }
        });
        rows.into_iter().map(LegalHold::try_from).collect()
    }

    /// The first active hold that a deletion of these keys, or of this prefix, would meet: a
    /// submission is refused with [`LegalHold::refusal`] of it.
    pub async fn hold_against(
        &self,
        keys: &[String],
        prefix: Option<&str>,
    ) -> Result<Option<(String, LegalHold)>> {
        let holds = self.holds(false).await?;
        if let Some(p) = prefix
            && let Some(h) = holds.iter().find(|h| h.meets_prefix(p))
        {
            return Ok(Some((format!("prefix {p}"), h.clone())));
        }
        for k in keys {
            if let Some(h) = holds.iter().find(|h| h.covers(k)) {
                return Ok(Some((format!("key {k}"), h.clone())));
            }
        }
        Ok(None)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::catalogue::test_support::{TestResult, on_both_backends};
    use crate::catalogue::testing::TestCatalogue;

    on_both_backends!(holds_are_placed_listed_and_released_with_who_and_why);

    fn hold(scope: HoldScope) -> LegalHold {
        LegalHold {
            id: 1,
            scope,
            placed_unix: 0,
            placed_by: "x".into(),
            reason: "y".into(),
            released_unix: None,
            released_by: None,
            release_reason: None,
        }
    }

    #[test]
    fn what_a_hold_covers() {
        let k = hold(HoldScope::Key("a/b".into()));
        assert!(k.covers("a/b") && !k.covers("a/bc") && !k.covers("a"));
        assert!(k.meets_prefix("a/") && k.meets_prefix("a/b") && !k.meets_prefix("b/"));
        let p = hold(HoldScope::Prefix("a/".into()));
        assert!(p.covers("a/x") && !p.covers("b/a/x") && !p.covers("a"));
        // A deletion of a wider prefix meets it; so does one of a narrower prefix inside it.
        assert!(p.meets_prefix("a") && p.meets_prefix("a/x/") && !p.meets_prefix("ab"));
    }

    async fn holds_are_placed_listed_and_released_with_who_and_why(
        db: &TestCatalogue,
    ) -> TestResult {
        let c = db.catalogue();
        let h = c
            .place_hold(&HoldScope::Prefix("case/".into()), "alice", "case 42")
            .await?;
        assert!(h.is_active());
        assert_eq!(
            (h.placed_by.as_str(), h.reason.as_str()),
            ("alice", "case 42")
        );
        let k = c
            .place_hold(&HoldScope::Key("x/y".into()), "bob", "audit")
            .await?;
        // Refusals: an empty prefix, an empty reason, a bad key.
        assert!(
            c.place_hold(&HoldScope::Prefix(String::new()), "a", "r")
                .await
                .is_err()
        );
        assert!(
            c.place_hold(&HoldScope::Key("k".into()), "a", " ")
                .await
                .is_err()
        );
        assert!(
            c.place_hold(&HoldScope::Key("/abs".into()), "a", "r")
                .await
                .is_err()
        );
        assert!(
            c.place_hold(&HoldScope::Key("k".into()), "a", "x\u{202E}y")
                .await
                .is_err()
        );
        let found = c.hold_against(&["case/1".into()], None).await?;
        assert_eq!(found.map(|(_, h)| h.id), Some(h.id));
        let found = c.hold_against(&[], Some("x/")).await?;
        assert_eq!(found.map(|(_, h)| h.id), Some(k.id));
        assert!(
            c.hold_against(&["other".into()], Some("z/"))
                .await?
                .is_none()
        );
        let r = c.release_hold(h.id, "carol", "case closed").await?;
        assert_eq!(r.released_by.as_deref(), Some("carol"));
        assert!(!r.is_active());
        let again = c.release_hold(h.id, "carol", "twice").await.unwrap_err();
        assert!(
            again.to_string().contains("released already, by carol"),
            "{again}"
        );
        assert!(c.release_hold(999, "carol", "none").await.is_err());
        assert_eq!(c.holds(false).await?.len(), 1);
        assert_eq!(c.holds(true).await?.len(), 2);
        assert!(c.hold_against(&["case/1".into()], None).await?.is_none());
        Ok(())
    }
}
