//! A data key protected by a passphrase: what a paper key holds when it has one, and what a
//! cartridge can carry so that a site that lost its key store but kept the passphrase can
//! recover (as Proxmox Backup Server does).
//!
//! The passphrase becomes a key-encryption key through Argon2id (RFC 9106; 64 MiB, 3 passes,
//! one lane by default: memory-hard, so guessing costs memory as well as time), which wraps
//! the data key with XChaCha20-Poly1305. The key id is authenticated with it, so a protected
//! copy cannot be passed off under another id, and a wrong passphrase or a changed byte is
//! found, never taken for a different key.
//!
//! The format, [`PROTECTED_BYTES`] bytes: version (1), Argon2 memory in KiB, passes and lanes
//! (big-endian `u32` each), a 16-byte salt, a 24-byte nonce, then the 32-byte key sealed with
//! its 16-byte tag.

use argon2::{Algorithm, Argon2, Params, Version};
use chacha20poly1305::aead::{Aead, KeyInit, Payload};
use chacha20poly1305::{XChaCha20Poly1305, XNonce};
use rand::RngCore;
use zeroize::Zeroizing;

use crate::error::KeyError;
use crate::id::KeyId;
use crate::key::{DataKey, KEY_BYTES};

/// Shortest passphrase accepted for a new protected copy.
pub const MIN_PASSPHRASE: usize = 10;

/// The format's version byte.
const VERSION: u8 = 1;
const SALT: usize = 16;
const NONCE: usize = 24;
const TAG: usize = 16;
/// Bytes of a protected copy.
pub const PROTECTED_BYTES: usize = 1 + 12 + SALT + NONCE + KEY_BYTES + TAG;

/// Argon2id memory for new copies, KiB (64 MiB).
const MEMORY_KIB: u32 = 64 * 1024;
/// Argon2id passes for new copies.
const PASSES: u32 = 3;
/// Argon2id lanes for new copies.
const LANES: u32 = 1;
/// The most memory a copy read back may ask for (256 MiB, four times what reel writes): a
/// hostile copy (a paper or, later, a cartridge) cannot make reel allocate more.
const MAX_MEMORY_KIB: u32 = 4 * MEMORY_KIB;
/// The most passes a copy read back may ask for.
const MAX_PASSES: u32 = 8;
/// The most lanes a copy read back may ask for.
const MAX_LANES: u32 = 4;
/// The most work (memory × passes, KiB) a copy read back may ask for: four times what reel
/// writes, so opening one costs at most a few seconds whatever its fields say.
const MAX_WORK: u64 = 4 * MEMORY_KIB as u64 * PASSES as u64;

/// A data key sealed under a passphrase.
#[derive(Clone, PartialEq, Eq)]
pub struct Protected([u8; PROTECTED_BYTES]);

impl std::fmt::Debug for Protected {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("Protected(..)")
    }
}

impl Protected {
    /// Its bytes (safe to store and print: sealed).
    pub fn as_bytes(&self) -> &[u8; PROTECTED_BYTES] {
        &self.0
    }

    /// A protected copy from its bytes, with its format and cost parameters checked.
    pub fn from_bytes(bytes: &[u8]) -> Result<Protected, String> {
        let b: [u8; PROTECTED_BYTES] = bytes.try_into().map_err(|_| {
            format!(
                "a protected key is {PROTECTED_BYTES} bytes, this one is {}",
                bytes.len()
            )
        })?;
        if b[0] != VERSION {
            return Err(format!(
                "protected-key format {} is not one this reel reads (it reads {VERSION})",
                b[0]
            ));
        }
        let p = Protected(b);
        let (m, t, l) = p.costs();
        if t == 0 || l == 0 {
            return Err(format!(
                "its key derivation asks for {t} passes and {l} lanes; both must be at least 1"
            ));
        }
        if m > MAX_MEMORY_KIB
            || t > MAX_PASSES
            || l > MAX_LANES
            || u64::from(m) * u64::from(t) > MAX_WORK
        {
            return Err(format!(
                "its key derivation asks for {m} KiB, {t} passes and {l} lanes, more than reel \
                 allows ({MAX_MEMORY_KIB} KiB, {MAX_PASSES} passes, {MAX_LANES} lanes, \
                 {MAX_WORK} KiB-passes in all)"
            ));
        }
        Ok(p)
    }

    fn costs(&self) -> (u32, u32, u32) {
        let u = |at: usize| {
            let mut w = [0u8; 4];
            w.copy_from_slice(&self.0[at..at + 4]);
            u32::from_be_bytes(w)
        };
        (u(1), u(5), u(9))
    }
}

/// The key-encryption key a passphrase gives with these costs and salt.
fn kek(
    passphrase: &str,
    salt: &[u8],
    (m, t, l): (u32, u32, u32),
) -> Result<Zeroizing<[u8; 32]>, String> {
    let params = Params::new(m, t, l, Some(32)).map_err(|e| format!("key derivation: {e}"))?;
    let mut out = Zeroizing::new([0u8; 32]);
    Argon2::new(Algorithm::Argon2id, Version::V0x13, params)
        .hash_password_into(passphrase.as_bytes(), salt, out.as_mut())
        .map_err(|e| format!("key derivation: {e}"))?;
    Ok(out)
}

/// The AEAD keyed with a key-encryption key.
fn cipher(kek: &[u8; 32]) -> XChaCha20Poly1305 {
    XChaCha20Poly1305::new(&(*kek).into())
}

/// A nonce from its 24 bytes.
fn nonce_of(bytes: &[u8]) -> XNonce {
    let mut n = [0u8; NONCE];
    n.copy_from_slice(bytes);
    XNonce::from(n)
}

/// What the seal authenticates beside the key: the format and the key id.
fn aad(id: &KeyId) -> Vec<u8> {
    let mut a = b"reel protected key v1\0".to_vec();
    a.extend_from_slice(id.as_str().as_bytes());
    a
}

/// Seal `key` (named `id`) under `passphrase`.
pub fn protect(key: &DataKey, id: &KeyId, passphrase: &str) -> Result<Protected, KeyError> {
    if passphrase.chars().count() < MIN_PASSPHRASE {
        return Err(KeyError::WeakPassphrase {
            min: MIN_PASSPHRASE,
        });
    }
    let mut b = [0u8; PROTECTED_BYTES];
    b[0] = VERSION;
    b[1..5].copy_from_slice(&MEMORY_KIB.to_be_bytes());
    b[5..9].copy_from_slice(&PASSES.to_be_bytes());
    b[9..13].copy_from_slice(&LANES.to_be_bytes());
    rand::rngs::OsRng.fill_bytes(&mut b[13..13 + SALT + NONCE]);
    let salt = &b[13..13 + SALT];
    let nonce = &b[13 + SALT..13 + SALT + NONCE];
    let kek =
        kek(passphrase, salt, (MEMORY_KIB, PASSES, LANES)).map_err(|why| KeyError::Paper {
            why: format!("cannot protect key {id}: {why}"),
        })?;
    let sealed = cipher(&kek)
        .encrypt(
            &nonce_of(nonce),
            Payload {
                msg: key.expose(),
                aad: &aad(id),
            },
        )
        .map_err(|_| KeyError::Paper {
            why: format!("cannot protect key {id}: sealing failed"),
        })?;
    b[13 + SALT + NONCE..].copy_from_slice(&sealed);
    Ok(Protected(b))
}

/// Open a protected copy of key `id` with `passphrase`.
pub fn unprotect(p: &Protected, id: &KeyId, passphrase: &str) -> Result<DataKey, KeyError> {
    let b = &p.0;
    let salt = &b[13..13 + SALT];
    let nonce = &b[13 + SALT..13 + SALT + NONCE];
    let kek = kek(passphrase, salt, p.costs()).map_err(|why| KeyError::Paper {
        why: format!("the protected copy of key {id}: {why}"),
    })?;
    let opened = cipher(&kek)
        .decrypt(
            &nonce_of(nonce),
            Payload {
                msg: &b[13 + SALT + NONCE..],
                aad: &aad(id),
            },
        )
        .map(Zeroizing::new)
        .map_err(|_| KeyError::WrongPassphrase { id: id.to_string() })?;
    let bytes: &[u8; KEY_BYTES] = opened
        .as_slice()
        .try_into()
        .map_err(|_| KeyError::WrongPassphrase { id: id.to_string() })?;
    Ok(DataKey::from_bytes(bytes))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_protected_key_opens_with_its_passphrase_and_id_only() {
        let id = KeyId::new("k1").unwrap();
        let key = DataKey::generate();
        let p = protect(&key, &id, "correct horse battery").unwrap();
        assert!(
            !p.as_bytes()
                .windows(KEY_BYTES)
                .any(|w| w == key.expose().as_slice()),
            "the key is in the clear"
        );
        let back = Protected::from_bytes(p.as_bytes()).unwrap();
        assert_eq!(unprotect(&back, &id, "correct horse battery").unwrap(), key);
        assert!(matches!(
            unprotect(&back, &id, "correct horse battery!"),
            Err(KeyError::WrongPassphrase { .. })
        ));
        // Another id: the same bytes do not open.
        let other = KeyId::new("k2").unwrap();
        assert!(matches!(
            unprotect(&back, &other, "correct horse battery"),
            Err(KeyError::WrongPassphrase { .. })
        ));
        // A changed byte of the sealed key is found.
        let mut bent = *p.as_bytes();
        bent[PROTECTED_BYTES - 1] ^= 1;
        let bent = Protected::from_bytes(&bent).unwrap();
        assert!(matches!(
            unprotect(&bent, &id, "correct horse battery"),
            Err(KeyError::WrongPassphrase { .. })
        ));
        // Two copies of one key differ (fresh salt and nonce).
        let q = protect(&key, &id, "correct horse battery").unwrap();
        assert_ne!(p, q);
    }

    #[test]
    fn weak_passphrases_and_hostile_copies_are_refused() {
        let id = KeyId::new("k1").unwrap();
        let key = DataKey::generate();
        assert!(matches!(
            protect(&key, &id, "short"),
            Err(KeyError::WeakPassphrase { .. })
        ));
        let p = protect(&key, &id, "long enough phrase").unwrap();
        let mut b = *p.as_bytes();
        b[1..5].copy_from_slice(&u32::MAX.to_be_bytes());
        assert!(Protected::from_bytes(&b).unwrap_err().contains("KiB"));
        // Each cost within its cap, but memory × passes four times over: refused, not run.
        let mut b = *p.as_bytes();
        b[1..5].copy_from_slice(&MAX_MEMORY_KIB.to_be_bytes());
        b[5..9].copy_from_slice(&MAX_PASSES.to_be_bytes());
        assert!(Protected::from_bytes(&b).unwrap_err().contains("in all"));
        let mut b = *p.as_bytes();
        b[5..9].copy_from_slice(&0u32.to_be_bytes());
        assert!(
            Protected::from_bytes(&b)
                .unwrap_err()
                .contains("at least 1")
        );
        let mut b = *p.as_bytes();
        b[0] = 9;
        assert!(Protected::from_bytes(&b).unwrap_err().contains("format 9"));
        assert!(Protected::from_bytes(&b[..10]).is_err());
    }
}
