//! Key ids: the name a key goes by in pools, the catalogue, labels and MAM.

use crate::error::KeyError;

/// Longest key id (it is written into a cartridge's MAM and label).
pub const MAX_ID_LEN: usize = 64;

/// A key's name: 1 to [`MAX_ID_LEN`] ASCII letters, digits, `.`, `_` or `-`, starting with a
/// letter or digit (so it is safe in a file, a command line and a MAM attribute).
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct KeyId(String);

impl KeyId {
    /// Check `id`.
    pub fn new(id: &str) -> Result<KeyId, KeyError> {
        let bad = |why| KeyError::BadId {
            id: id.chars().take(MAX_ID_LEN + 8).collect(),
            why,
        };
        if id.is_empty() {
            return Err(bad("it is empty"));
        }
        if id.len() > MAX_ID_LEN {
            return Err(bad("it is too long"));
        }
        if !id.as_bytes()[0].is_ascii_alphanumeric() {
            return Err(bad("it does not start with a letter or digit"));
        }
        if !id
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || matches!(b, b'.' | b'_' | b'-'))
        {
            return Err(bad(
                "it holds a character other than letters, digits, '.', '_' and '-'",
            ));
        }
        Ok(KeyId(id.to_owned()))
    }

    /// The id as text.
    pub fn as_str(&self) -> &str {
        &self.0
    }
}

impl std::fmt::Display for KeyId {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.0)
    }
}

impl std::str::FromStr for KeyId {
    type Err = KeyError;
    fn from_str(s: &str) -> Result<KeyId, KeyError> {
        KeyId::new(s)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ids_are_short_plain_names() {
        for good in ["k1", "site-a.2026_01", "0", &"a".repeat(MAX_ID_LEN)] {
            assert_eq!(KeyId::new(good).unwrap().as_str(), good);
        }
        for bad in [
            "",
            "-k",
            ".hidden",
            "a/b",
            "../k",
            "k 1",
            "ké",
            "k\n",
            &"a".repeat(MAX_ID_LEN + 1),
        ] {
            let e = KeyId::new(bad).unwrap_err();
            assert!(matches!(e, KeyError::BadId { .. }), "{bad:?}: {e}");
        }
    }
}
