//! Configuration strings, read one way by every plugin.
//!
//! The host hands a plugin its configuration as one string (`library.plugin_config` in reel's
//! config file). Every plugin of reel reads that string with [`entries`], so an operator writes
//! the same syntax for all of them (docs/ABI.md, "Configuration strings"):
//!
//! ```text
//! # a comment runs from # to the end of its line
//! changer=serial=LIB0000001
//! drives=serial=DRV0000001, serial=DRV0000002   # drive 0, drive 1
//! timeout.load=7200; lbp=crc32c                 # ; separates entries on one line too
//! ```
//!
//! - Entries are separated by newlines or `;`; blank entries are ignored.
//! - `#` at the start of a line or after white space starts a comment that runs to the end of
//!   its line; a `#` inside a word belongs to the value (`dir=/srv/tape#2`).
//! - Each entry is `key=value`, split at the first `=` (a value may hold `=`, as
//!   `serial=SERIAL` does); key and value are trimmed of white space.
//! - A key given twice takes its last value: a configuration is extended by appending.
//! - Lists ([`list`]) are comma-separated in one entry, in order: `drives=` names drive 0
//!   first, and drive indices follow that order.
//! - A device named by unit serial number is `serial=SERIAL` (VPD page 80h); [`serial`]
//!   reads it.
//!
//! What the keys are, and whether an unknown key is an error (it is, in every plugin of reel),
//! is the plugin's business.

/// One `key=value` entry and the line it is on (1-based, for messages).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Entry<'a> {
    /// 1-based line of the configuration string.
    pub line: usize,
    /// The key, trimmed.
    pub key: &'a str,
    /// The value, trimmed (may be empty).
    pub value: &'a str,
}

/// A configuration string that is not a list of `key=value` entries.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum SyntaxError {
    /// An entry without `=`.
    #[error("config line {line}: `{text}` is not key=value")]
    NotKeyValue {
        /// 1-based line.
        line: usize,
        /// The entry as written.
        text: String,
    },
    /// An entry with nothing before its `=`.
    #[error("config line {line}: `{text}` has no key before its `=`")]
    EmptyKey {
        /// 1-based line.
        line: usize,
        /// The entry as written.
        text: String,
    },
}

/// The entries of a configuration string, in the order written (a later entry of a key
/// overrides an earlier one when they are applied in order).
pub fn entries(text: &str) -> Result<Vec<Entry<'_>>, SyntaxError> {
    let mut out = Vec::new();
    for (n, raw) in text.lines().enumerate() {
        let line = n + 1;
        let code = without_comment(raw);
        for item in code.split(';').map(str::trim).filter(|i| !i.is_empty()) {
            let Some((key, value)) = item.split_once('=') else {
                return Err(SyntaxError::NotKeyValue {
                    line,
                    text: item.to_string(),
                });
            };
            let key = key.trim();
            if key.is_empty() {
                return Err(SyntaxError::EmptyKey {
                    line,
                    text: item.to_string(),
                });
            }
            out.push(Entry {
                line,
                key,
                value: value.trim(),
            });
        }
    }
    Ok(out)
}

/// `line` up to its comment: a `#` at the start of the line or after white space. A `#` inside
/// a word (`dir=/srv/tape#2`) belongs to the value.
fn without_comment(line: &str) -> &str {
    let mut prev_space = true;
    for (i, c) in line.char_indices() {
        if c == '#' && prev_space {
            return &line[..i];
        }
        prev_space = c.is_whitespace() || c == ';';
    }
    line
}

/// The last value of `key`, if it is given.
pub fn last<'a>(entries: &[Entry<'a>], key: &str) -> Option<Entry<'a>> {
    entries.iter().rev().find(|e| e.key == key).copied()
}

/// The items of a comma-separated list value, trimmed, empty items dropped, in order.
pub fn list(value: &str) -> impl Iterator<Item = &str> {
    value.split(',').map(str::trim).filter(|s| !s.is_empty())
}

/// The serial number of a device named `serial=SERIAL`; `None` for any other name.
pub fn serial(device: &str) -> Option<&str> {
    device.trim().strip_prefix("serial=").map(str::trim)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn lines_semicolons_comments_and_the_first_equals() {
        let e =
            entries("# rig\nchanger=serial=LIB1 # the library\n\n drives = a, b ;lbp=crc32c;\nx=")
                .unwrap();
        let kv: Vec<(usize, &str, &str)> = e.iter().map(|e| (e.line, e.key, e.value)).collect();
        assert_eq!(
            kv,
            [
                (2, "changer", "serial=LIB1"),
                (4, "drives", "a, b"),
                (4, "lbp", "crc32c"),
                (5, "x", ""),
            ]
        );
        assert_eq!(list("a, b,,c ").collect::<Vec<_>>(), ["a", "b", "c"]);
        assert_eq!(serial("serial=DRV1"), Some("DRV1"));
        assert_eq!(serial("/dev/nst0"), None);
    }

    #[test]
    fn the_last_value_of_a_key_wins() {
        let e = entries("sim.clock=instant\nsim.clock=scaled").unwrap();
        assert_eq!(last(&e, "sim.clock").map(|e| e.value), Some("scaled"));
        assert_eq!(last(&e, "dir"), None);
    }

    #[test]
    fn what_is_not_an_entry_is_named_with_its_line() {
        assert_eq!(
            entries("a=1\nchanger").unwrap_err(),
            SyntaxError::NotKeyValue {
                line: 2,
                text: "changer".into()
            }
        );
        let e = entries("a=1;=2").unwrap_err();
        assert_eq!(
            e.to_string(),
            "config line 1: `=2` has no key before its `=`"
        );
        assert!(entries("").unwrap().is_empty());
        // a `#` inside a word is the value's, not a comment: a path is not cut short
        let e = entries("dir=/srv/tape#2 # the second library\nx=1;#y=2").unwrap();
        assert_eq!((e[0].key, e[0].value), ("dir", "/srv/tape#2"));
        assert_eq!((e[1].key, e[1].value), ("x", "1"));
        assert_eq!(e.len(), 2);
        assert!(entries("# only a comment\n;;").unwrap().is_empty());
    }
}
