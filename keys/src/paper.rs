//! The paper key: a key in a form a person prints, keeps in a safe, and types back in.
//!
//! ```text
//! -----BEGIN REEL KEY-----
//! Key-Id: site-2026
//! Fingerprint: 3f:2a:91:bc:0d:44:5e:6f
//! Form: protected
//! 01: 0100 0100 0000 0003 0000 0001 5d1c 2e0f  9a
//! ...
//! -----END REEL KEY-----
//! ```
//!
//! The body is the key's bytes (form `plain`) or its passphrase-protected copy (form
//! `protected`, [`crate::protect`]), 16 bytes per numbered line, each line closed by a check
//! (two hex digits) over its number, the key id and its bytes, so a mistyped line is named on
//! import. The fingerprint checks the whole key once it is read (for a protected copy, once
//! the passphrase opened it). Hex digits may be typed in either case, and spaces do not
//! matter.

use sha2::{Digest, Sha256};
use zeroize::Zeroizing;

use crate::error::KeyError;
use crate::id::KeyId;
use crate::key::{DataKey, Fingerprint, KEY_BYTES};
use crate::protect::{PROTECTED_BYTES, Protected};

const BEGIN: &str = "-----BEGIN REEL KEY-----";
const END: &str = "-----END REEL KEY-----";
/// Bytes per body line.
const PER_LINE: usize = 16;

/// What a paper key holds.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum PaperBody {
    /// The key itself: whoever holds the paper holds the key.
    Plain(DataKey),
    /// The key sealed under a passphrase.
    Protected(Protected),
}

/// A paper key read back.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PaperKey {
    /// The key's id.
    pub id: KeyId,
    /// The fingerprint the paper says the key has.
    pub fingerprint: Fingerprint,
    /// The key, or its protected copy.
    pub body: PaperBody,
}

/// At most 40 characters of `text`, for a message (quoted with `{:?}`, which escapes them).
fn cut(text: &str) -> String {
    let mut out: String = text.chars().take(40).collect();
    if text.chars().count() > 40 {
        out.push('…');
    }
    out
}

/// A line's check: the first byte of SHA-256 over its number, the key id and its bytes.
fn check(line: usize, id: &KeyId, bytes: &[u8]) -> u8 {
    let mut h = Sha256::new();
    h.update((line as u32).to_be_bytes());
    h.update(id.as_str().as_bytes());
    h.update([0]);
    h.update(bytes);
    h.finalize()[0]
}

/// The paper form of key `id` (text that holds the key when the body is plain: it is wiped
/// when dropped).
pub fn render(id: &KeyId, fingerprint: Fingerprint, body: &PaperBody) -> Zeroizing<String> {
    let (form, bytes): (&str, &[u8]) = match body {
        PaperBody::Plain(k) => ("plain", k.expose()),
        PaperBody::Protected(p) => ("protected", p.as_bytes()),
    };
    let mut out = Zeroizing::new(String::new());
    out.push_str(BEGIN);
    out.push('\n');
    out.push_str(&format!(
        "Key-Id: {id}\nFingerprint: {fingerprint}\nForm: {form}\n"
    ));
    for (n, chunk) in bytes.chunks(PER_LINE).enumerate() {
        let line = n + 1;
        out.push_str(&format!("{line:02}:"));
        for pair in chunk.chunks(2) {
            out.push(' ');
            out.push_str(&hex::encode(pair));
        }
        out.push_str(&format!("  {:02x}\n", check(line, id, chunk)));
    }
    out.push_str(END);
    out.push('\n');
    out
}

/// Read a paper key back from text (what `render` printed, retyped or scanned; text around
/// the BEGIN and END lines is ignored).
pub fn parse(text: &str) -> Result<PaperKey, KeyError> {
    let bad = |why: String| KeyError::Paper { why };
    let mut lines = text.lines().map(str::trim).skip_while(|l| *l != BEGIN);
    if lines.next().is_none() {
        return Err(bad(format!("no `{BEGIN}` line")));
    }
    let (mut id, mut fingerprint, mut form) = (None, None, None);
    let mut body: Zeroizing<Vec<u8>> = Zeroizing::new(Vec::new());
    let mut ended = false;
    let mut expect = 1usize;
    // Text from the paper is never quoted whole: a body line of a plain key is half the key.
    // What is quoted (a header's value) is escaped and cut short.
    for (after, l) in lines.enumerate() {
        let at = after + 1;
        if l == END {
            ended = true;
            break;
        }
        if l.is_empty() {
            continue;
        }
        let Some((head, rest)) = l.split_once(':') else {
            return Err(bad(format!(
                "text line {at} after BEGIN is neither a header (`Name: value`) nor a numbered \
                 line (`NN: digits  check`): retype it"
            )));
        };
        let head = head.trim().to_ascii_lowercase();
        let header = matches!(head.as_str(), "key-id" | "fingerprint" | "form");
        if header && expect > 1 {
            return Err(bad(format!(
                "a header comes after the numbered lines (text line {at} after BEGIN): the \
                 headers come first, once each"
            )));
        }
        let once = |seen: bool| {
            if seen {
                Err(bad(format!(
                    "a header is repeated (text line {at} after BEGIN): each comes once"
                )))
            } else {
                Ok(())
            }
        };
        match head.as_str() {
            "key-id" => {
                once(id.is_some())?;
                id = Some(KeyId::new(rest.trim())?)
            }
            "fingerprint" => {
                once(fingerprint.is_some())?;
                fingerprint = Some(Fingerprint::parse(rest).ok_or_else(|| {
                    bad(format!(
                        "the fingerprint {:?} is not 8 hex bytes",
                        cut(rest.trim())
                    ))
                })?)
            }
            "form" => {
                once(form.is_some())?;
                form = Some(rest.trim().to_ascii_lowercase())
            }
            n => {
                let line: usize = n.parse().map_err(|_| {
                    bad(format!(
                        "text line {at} after BEGIN starts with neither a header name nor a \
                         line number: retype it"
                    ))
                })?;
                if line != expect {
                    return Err(bad(format!(
                        "line {expect} is missing (line {line} came instead)"
                    )));
                }
                let id = id
                    .as_ref()
                    .ok_or_else(|| bad("the Key-Id header must come before line 1".into()))?;
                let mut groups: Vec<&str> = rest.split_whitespace().collect();
                let sum = groups
                    .pop()
                    .ok_or_else(|| bad(format!("line {line} is empty")))?;
                let digits: Zeroizing<String> = Zeroizing::new(groups.concat());
                let mut bytes = Zeroizing::new(vec![0u8; digits.len() / 2]);
                if !digits.len().is_multiple_of(2)
                    || bytes.len() > PER_LINE
                    || hex::decode_to_slice(digits.as_bytes(), &mut bytes).is_err()
                {
                    return Err(bad(format!(
                        "line {line} does not hold up to {PER_LINE} bytes of hex digits: retype it"
                    )));
                }
                let sum = u8::from_str_radix(sum, 16)
                    .ok()
                    .filter(|_| sum.len() == 2)
                    .ok_or_else(|| bad(format!("line {line} ends without its two-digit check")))?;
                if check(line, id, &bytes) != sum {
                    return Err(bad(format!(
                        "line {line} does not match its check: a digit on it is wrong"
                    )));
                }
                body.extend_from_slice(&bytes);
                expect += 1;
            }
        }
    }
    if !ended {
        return Err(bad(format!("no `{END}` line")));
    }
    let id = id.ok_or_else(|| bad("no Key-Id header".into()))?;
    let fingerprint = fingerprint.ok_or_else(|| bad("no Fingerprint header".into()))?;
    let body = match form.as_deref() {
        Some("plain") => {
            let bytes: &[u8; KEY_BYTES] = body.as_slice().try_into().map_err(|_| {
                bad(format!(
                    "a plain key is {KEY_BYTES} bytes, the lines hold {}: a line is missing \
                     or one too many was typed",
                    body.len()
                ))
            })?;
            let key = DataKey::from_bytes(bytes);
            if key.fingerprint() != fingerprint {
                return Err(KeyError::Mismatch {
                    id: id.to_string(),
                    expected: fingerprint.to_string(),
                    got: key.fingerprint().to_string(),
                });
            }
            PaperBody::Plain(key)
        }
        Some("protected") => {
            if body.len() != PROTECTED_BYTES {
                return Err(bad(format!(
                    "a protected key is {PROTECTED_BYTES} bytes, the lines hold {}: a line is \
                     missing or one too many was typed",
                    body.len()
                )));
            }
            PaperBody::Protected(Protected::from_bytes(&body).map_err(bad)?)
        }
        Some(other) => {
            return Err(bad(format!(
                "form {:?} is not `plain` or `protected`",
                cut(other)
            )));
        }
        None => return Err(bad("no Form header".into())),
    };
    Ok(PaperKey {
        id,
        fingerprint,
        body,
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::protect::{protect, unprotect};

    #[test]
    fn plain_and_protected_papers_read_back() {
        let id = KeyId::new("site-2026").unwrap();
        let key = DataKey::generate();
        let text = render(&id, key.fingerprint(), &PaperBody::Plain(key.clone()));
        let back = parse(&format!("printed on a Tuesday\n{}\nsigned: ops", *text)).unwrap();
        assert_eq!(back.id, id);
        assert_eq!(back.body, PaperBody::Plain(key.clone()));
        // Retyped in capitals.
        let retyped = text
            .to_uppercase()
            .replace("KEY-ID", "Key-Id")
            .replace("FINGERPRINT", "Fingerprint");
        let retyped = retyped.replace("FORM: PLAIN", "Form: plain");
        let retyped = retyped.replace("SITE-2026", "site-2026");
        assert_eq!(parse(&retyped).unwrap().body, PaperBody::Plain(key.clone()));

        let p = protect(&key, &id, "a long passphrase").unwrap();
        let text = render(&id, key.fingerprint(), &PaperBody::Protected(p));
        assert!(!text.contains(&*key.to_hex()));
        let back = parse(&text).unwrap();
        let PaperBody::Protected(p) = back.body else {
            panic!("not protected")
        };
        let opened = unprotect(&p, &id, "a long passphrase").unwrap();
        assert_eq!(opened.fingerprint(), back.fingerprint);
        assert_eq!(opened, key);
    }

    #[test]
    fn a_mistyped_line_is_named() {
        let id = KeyId::new("k").unwrap();
        let key = DataKey::generate();
        let text = render(&id, key.fingerprint(), &PaperBody::Plain(key));
        let lines: Vec<&str> = text.lines().collect();
        // Line 2 of the body: change one hex digit.
        let l = lines[5].to_string();
        let pos = 5;
        let c = l.as_bytes()[pos];
        let swapped = if c == b'0' { '1' } else { '0' };
        let mut bent = l.clone();
        bent.replace_range(pos..pos + 1, &swapped.to_string());
        let typo = text.replace(&l, &bent);
        let e = parse(&typo).unwrap_err().to_string();
        assert!(e.contains("line 2"), "{e}");
        // The last line left out.
        let short = text.replace(&format!("{l}\n"), "");
        let e = parse(&short).unwrap_err().to_string();
        assert!(e.contains("a line is missing"), "{e}");
        // A line left out in the middle of a protected copy.
        let key = DataKey::generate();
        let p = crate::protect::protect(&key, &id, "a long passphrase").unwrap();
        let text = render(&id, key.fingerprint(), &PaperBody::Protected(p));
        let l = text.lines().nth(6).unwrap().to_string();
        assert!(l.starts_with("03:"), "{text:?}");
        let e = parse(&text.replace(&format!("{l}\n"), ""))
            .unwrap_err()
            .to_string();
        assert!(e.contains("line 3 is missing"), "{e}");
        // Cut off.
        let head: Vec<&str> = text.lines().take(6).collect();
        let e = parse(&head.join("\n")).unwrap_err().to_string();
        assert!(e.contains("END"), "{e}");
        assert!(parse("nothing here").is_err());
    }

    #[test]
    fn hostile_or_muddled_papers_are_refused_without_quoting_the_body() {
        let id = KeyId::new("k1").unwrap();
        let key = DataKey::generate();
        let text = render(&id, key.fingerprint(), &PaperBody::Plain(key.clone()));
        let first = text.lines().nth(4).unwrap().to_string();
        let digits = first[4..].split_whitespace().next().unwrap().to_string();
        // A line whose colon was lost: named by position, its digits not shown.
        let e = parse(&text.replace(&first, &first.replacen(':', "", 1)))
            .unwrap_err()
            .to_string();
        assert!(e.contains("text line 4 after BEGIN"), "{e}");
        assert!(!e.contains(&digits), "{e}");
        // A colon in the wrong place.
        let e = parse(&text.replace(&first, &first.replacen(' ', ":", 2)))
            .unwrap_err()
            .to_string();
        assert!(!e.contains(&digits), "{e}");
        // A second Key-Id after the body would rename the key: refused.
        let renamed = text.replace(END, &format!("Key-Id: renamed\n{END}"));
        let e = parse(&renamed).unwrap_err().to_string();
        assert!(e.contains("after the numbered lines"), "{e}");
        // A repeated header before it.
        let twice = text.replace("Form: plain\n", "Form: plain\nForm: protected\n");
        let e = parse(&twice).unwrap_err().to_string();
        assert!(e.contains("repeated"), "{e}");
        // A hostile form is escaped and cut short.
        let evil = text.replace(
            "Form: plain",
            &format!("Form: \u{1b}[2J{}", "x".repeat(10_000)),
        );
        let e = parse(&evil).unwrap_err().to_string();
        assert!(!e.contains('\u{1b}') && e.len() < 300, "{e}");
        // Headers in any case, a fingerprint typed with spaces.
        let fp = key.fingerprint().to_string();
        let loose = text
            .replace("Key-Id:", "KEY-ID:")
            .replace("Form:", "form:")
            .replace(&fp, &fp.replace(':', " "));
        assert_eq!(parse(&loose).unwrap().body, PaperBody::Plain(key));
    }
}
