//! An operator's reason for a state change (a drive taken down, a cartridge marked broken):
//! kept with the drive or cartridge, shown to every operator and in the errors of the work it
//! stops, so it must read as what it is. One line of at most [`MAX_REASON`] bytes, without
//! control characters or the invisible characters that move or reorder text on a terminal
//! (line and paragraph separators, bidirectional overrides, a byte-order mark).

use crate::error::{JobsError, Result};

/// Longest reason kept, in bytes.
pub const MAX_REASON: usize = 1000;

/// Whether `c` may not appear in a reason.
fn unprintable(c: char) -> bool {
    c.is_control()
        // Unicode's format characters (category Cf: invisible, or reordering text) and the
        // line and paragraph separators.
        || matches!(
            c,
            '\u{00ad}'
                | '\u{0600}'..='\u{0605}'
                | '\u{061c}'
                | '\u{06dd}'
                | '\u{070f}'
                | '\u{0890}'..='\u{0891}'
                | '\u{08e2}'
                | '\u{180e}'
                | '\u{200b}'..='\u{200f}'
                | '\u{2028}'..='\u{202e}'
                | '\u{2060}'..='\u{2064}'
                | '\u{2066}'..='\u{206f}'
                | '\u{feff}'
                | '\u{fff9}'..='\u{fffb}'
                | '\u{110bd}'
                | '\u{110cd}'
                | '\u{13430}'..='\u{1343f}'
                | '\u{1bca0}'..='\u{1bca3}'
                | '\u{1d173}'..='\u{1d17a}'
                | '\u{e0001}'
                | '\u{e0020}'..='\u{e007f}'
        )
}

/// The reason trimmed, or a refusal saying what is wrong with it.
pub fn check(reason: &str) -> Result<String> {
    let reason = reason.trim();
    if reason.is_empty() {
        return Err(JobsError::Refused {
            what: "no reason given".into(),
            hint: "say why (the reason is kept and shown to every operator): --reason on the command line, \"reason\" in the API".into(),
        });
    }
    if reason.len() > MAX_REASON || reason.chars().any(unprintable) {
        return Err(JobsError::Refused {
            what: format!(
                "the reason is {} bytes or holds control or invisible formatting characters",
                reason.len()
            ),
            hint: format!("give one line of plain text, at most {MAX_REASON} bytes"),
        });
    }
    Ok(reason.to_string())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn one_line_of_plain_text() {
        assert_eq!(check(" worn heads ").unwrap(), "worn heads");
        assert_eq!(check("é ü 漢字").unwrap(), "é ü 漢字");
        for bad in [
            "",
            "  ",
            "a\nb",
            "a\tb",
            "a\u{2028}b",
            "a\u{202e}b",
            "a\u{85}b",
            "a\u{1b}[31m",
            "a\u{61c}b",
            "a\u{200b}b",
            "a\u{2060}b",
            "a\u{ad}b",
            "a\u{fff9}b",
            "a\u{e0001}b",
        ] {
            assert!(check(bad).is_err(), "{bad:?}");
        }
        assert!(check(&"r".repeat(MAX_REASON)).is_ok());
        assert!(check(&"r".repeat(MAX_REASON + 1)).is_err());
        assert!(check(&"é".repeat(501)).is_err());
    }
}
