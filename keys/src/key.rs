//! A data key: 32 bytes a drive encrypts with, and the fingerprint that names them without
//! revealing them.

use rand::RngCore;
use sha2::{Digest, Sha256};
use zeroize::Zeroizing;

/// Bytes of a data key (AES-256).
pub const KEY_BYTES: usize = 32;

/// A 256-bit data key. Its bytes are wiped when it is dropped; it has no `Display`, no
/// `Serialize`, and its `Debug` prints only its fingerprint.
#[derive(Clone, PartialEq, Eq)]
pub struct DataKey(Zeroizing<[u8; KEY_BYTES]>);

impl DataKey {
    /// A new random key from the operating system's CSPRNG.
    pub fn generate() -> DataKey {
        let mut k = Zeroizing::new([0u8; KEY_BYTES]);
        rand::rngs::OsRng.fill_bytes(k.as_mut());
        DataKey(k)
    }

    /// A key from its bytes (the caller wipes its own copy).
    pub fn from_bytes(bytes: &[u8; KEY_BYTES]) -> DataKey {
        DataKey(Zeroizing::new(*bytes))
    }

    /// A key from 64 hex digits; `None` if it is not that. The text is the caller's to wipe.
    pub fn from_hex(text: &str) -> Option<DataKey> {
        let mut k = Zeroizing::new([0u8; KEY_BYTES]);
        hex::decode_to_slice(text.trim(), k.as_mut()).ok()?;
        Some(DataKey(k))
    }

    /// The key's bytes, for the drive (and the key file).
    pub fn expose(&self) -> &[u8; KEY_BYTES] {
        &self.0
    }

    /// The key as 64 hex digits, wiped when dropped (for the key file only).
    pub fn to_hex(&self) -> Zeroizing<String> {
        Zeroizing::new(hex::encode(self.0.as_ref()))
    }

    /// Its fingerprint.
    pub fn fingerprint(&self) -> Fingerprint {
        let mut h = Sha256::new();
        h.update(b"reel data key fingerprint v1\0");
        h.update(self.0.as_ref());
        let d = h.finalize();
        let mut f = [0u8; 8];
        f.copy_from_slice(&d[..8]);
        Fingerprint(f)
    }
}

impl std::fmt::Debug for DataKey {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "DataKey(<redacted>, fingerprint {})", self.fingerprint())
    }
}

/// The first 64 bits of a domain-separated SHA-256 of a key: tells keys apart (a key recovered
/// from paper or a cartridge is the one expected) and reveals nothing usable of the key.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct Fingerprint([u8; 8]);

impl Fingerprint {
    /// Parse 16 hex digits, with or without `:` or spaces between them.
    pub fn parse(text: &str) -> Option<Fingerprint> {
        let plain: String = text
            .chars()
            .filter(|c| *c != ':' && !c.is_whitespace())
            .collect();
        let mut f = [0u8; 8];
        hex::decode_to_slice(plain, &mut f).ok()?;
        Some(Fingerprint(f))
    }
}

impl std::fmt::Display for Fingerprint {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        for (i, b) in self.0.iter().enumerate() {
            if i > 0 {
                f.write_str(":")?;
            }
            write!(f, "{b:02x}")?;
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn keys_are_random_and_never_printed() {
        let a = DataKey::generate();
        let b = DataKey::generate();
        assert_ne!(a, b);
        assert_ne!(a.fingerprint(), b.fingerprint());
        let shown = format!("{a:?}");
        assert!(!shown.contains(&*a.to_hex()), "{shown}");
        assert!(shown.contains(&a.fingerprint().to_string()), "{shown}");
    }

    #[test]
    fn hex_round_trips_and_fingerprints_parse() {
        let a = DataKey::generate();
        let back = DataKey::from_hex(&a.to_hex()).unwrap();
        assert_eq!(a, back);
        assert!(DataKey::from_hex("00").is_none());
        assert!(DataKey::from_hex(&"zz".repeat(32)).is_none());
        let f = a.fingerprint();
        assert_eq!(Fingerprint::parse(&f.to_string()), Some(f));
        assert_eq!(Fingerprint::parse(&f.to_string().replace(':', "")), Some(f));
        assert_eq!(Fingerprint::parse("00:11"), None);
    }
}
