//! reel's data-encryption keys, kept apart from everything else so that one small crate is
//! all a reviewer reads to know where key bytes go.
//!
//! LTO drives encrypt in hardware (AES-256-GCM) with a 256-bit key the host sets. reel names
//! each key by a [`KeyId`]; the id, never the key, is what the catalogue, a cartridge's label
//! and its MAM record, so a cartridge read on another site says which key it needs.
//!
//! - [`DataKey`]: 32 key bytes, wiped when dropped, never printed (its `Debug` says
//!   `<redacted>`), told apart from other keys by a one-way [`Fingerprint`].
//! - [`store::KeyFile`]: the host's key file (`[keys] file`), readable by reel's user alone:
//!   opened without following links, refused when another user owns it or when its mode lets
//!   anyone else read it.
//! - [`protect`]: a copy of a key wrapped under a passphrase (Argon2id, then
//!   XChaCha20-Poly1305), for the paper key and, later, the copy written to a cartridge.
//! - [`paper`]: a printable form of a key (plain, or passphrase-protected) that a person can
//!   type back in, with a check per line that points at a mistyped line.
//! - [`source`]: where a worker gets a key by id: the key file or an external key-manager
//!   command (CTA's style), behind one trait, so a KMIP client can be added later.
//!
//! Nothing here logs. Errors name key ids and files, never key bytes, and never what an
//! external command printed on its standard output (it answers with a key).

pub mod error;
pub mod id;
pub mod key;
pub mod paper;
pub mod protect;
pub mod source;
pub mod store;

pub use error::KeyError;
pub use id::KeyId;
pub use key::{DataKey, Fingerprint};
