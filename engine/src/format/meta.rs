//! What a filesystem gave an object besides its bytes: whether it was a regular file or a
//! symbolic link, its permission bits, owner, group and modification time, and whether it
//! had holes. Recorded in every
//! index entry from format version 2 on (docs/FORMAT.md §4.5) and in the catalogue, and
//! restored by recall.
//!
//! A symbolic link is archived as a link, never followed: its object's bytes are the link's
//! target, exactly as `readlink` returned them.

use serde::{Deserialize, Serialize};

use super::error::FormatError;
use super::wire::Cursor;

/// Bytes of the metadata block at the end of a version 2 index entry.
pub const META_LEN: usize = 1 + 1 + 4 + 4 + 4 + 8;

/// What kind of filesystem entry an object was.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum ObjectKind {
    /// A regular file: the object's bytes are its content.
    File,
    /// A symbolic link: the object's bytes are its target.
    Symlink,
}

impl ObjectKind {
    /// The code on tape and in the catalogue (`0` means "nothing recorded").
    pub fn code(self) -> u8 {
        match self {
            ObjectKind::File => 1,
            ObjectKind::Symlink => 2,
        }
    }

    /// The kind for a code; `None` for 0 (nothing recorded) and unknown codes.
    pub fn from_code(code: u8) -> Option<ObjectKind> {
        match code {
            1 => Some(ObjectKind::File),
            2 => Some(ObjectKind::Symlink),
            _ => None,
        }
    }

    /// `file` or `symlink`.
    pub fn as_str(self) -> &'static str {
        match self {
            ObjectKind::File => "file",
            ObjectKind::Symlink => "symlink",
        }
    }
}

/// An object's filesystem metadata, as archived.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub struct ObjectMeta {
    /// Regular file or symbolic link.
    pub kind: ObjectKind,
    /// Permission bits (`st_mode & 0o7777`).
    pub mode: u32,
    /// Owner (numeric uid).
    pub uid: u32,
    /// Group (numeric gid).
    pub gid: u32,
    /// Modification time, nanoseconds since the Unix epoch (negative before it).
    pub mtime_ns: i64,
    /// A regular file with holes (fewer blocks allocated than its size needs): recall writes
    /// runs of zero bytes as holes again.
    #[serde(default)]
    pub sparse: bool,
}

/// Flag bit of the metadata block: the file was sparse.
const FLAG_SPARSE: u8 = 1;

impl ObjectMeta {
    /// The metadata of an `lstat`/`fstat` result, for an entry of `kind`.
    pub fn of(kind: ObjectKind, meta: &std::fs::Metadata) -> ObjectMeta {
        use std::os::unix::fs::MetadataExt;
        ObjectMeta {
            // st_blocks counts 512-byte units whatever the filesystem's block size.
            sparse: kind == ObjectKind::File && meta.blocks().saturating_mul(512) < meta.len(),
            kind,
            mode: meta.mode() & 0o7777,
            uid: meta.uid(),
            gid: meta.gid(),
            mtime_ns: meta
                .mtime()
                .saturating_mul(1_000_000_000)
                .saturating_add(meta.mtime_nsec()),
        }
    }

    /// Append the [`META_LEN`]-byte block for `meta` (all zero for `None`: nothing recorded).
    pub(crate) fn encode(meta: Option<&ObjectMeta>, out: &mut Vec<u8>) {
        match meta {
            Some(m) => {
                out.push(m.kind.code());
                out.push(if m.sparse { FLAG_SPARSE } else { 0 });
                out.extend_from_slice(&(m.mode & 0o7777).to_le_bytes());
                out.extend_from_slice(&m.uid.to_le_bytes());
                out.extend_from_slice(&m.gid.to_le_bytes());
                out.extend_from_slice(&m.mtime_ns.to_le_bytes());
            }
            None => out.extend_from_slice(&[0u8; META_LEN]),
        }
    }

    /// Read a metadata block: `None` when it records nothing (kind 0, every field zero).
    pub(crate) fn decode(c: &mut Cursor<'_>) -> Result<Option<ObjectMeta>, FormatError> {
        let at = c.pos();
        let block = c.take(META_LEN, "metadata")?;
        let kind = block[0];
        let flags = block[1];
        if flags & !FLAG_SPARSE != 0 {
            return Err(c.invalid(
                "metadata flags",
                at + 1,
                format!("are {flags:#x}; only bit 0 (sparse) is defined"),
            ));
        }
        let u32_at =
            |i: usize| u32::from_le_bytes([block[i], block[i + 1], block[i + 2], block[i + 3]]);
        let mode = u32_at(2);
        let uid = u32_at(6);
        let gid = u32_at(10);
        let mut t = [0u8; 8];
        t.copy_from_slice(&block[14..22]);
        let mtime_ns = i64::from_le_bytes(t);
        if kind == 0 {
            if block.iter().any(|b| *b != 0) {
                return Err(c.invalid(
                    "metadata",
                    at,
                    "records no kind (0) but has non-zero fields".into(),
                ));
            }
            return Ok(None);
        }
        let kind = ObjectKind::from_code(kind).ok_or_else(|| {
            c.invalid(
                "metadata kind",
                at,
                format!("is {kind}; 1 (file) and 2 (symlink) are defined"),
            )
        })?;
        if mode & !0o7777 != 0 {
            return Err(c.invalid(
                "metadata mode",
                at + 2,
                format!("is {mode:#o}, only permission bits (0o7777) are recorded"),
            ));
        }
        Ok(Some(ObjectMeta {
            kind,
            mode,
            uid,
            gid,
            mtime_ns,
            sparse: flags & FLAG_SPARSE != 0,
        }))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn round_trip(m: Option<ObjectMeta>) -> Option<ObjectMeta> {
        let mut v = Vec::new();
        ObjectMeta::encode(m.as_ref(), &mut v);
        assert_eq!(v.len(), META_LEN);
        let mut c = Cursor::new(&v, "index entry");
        let back = ObjectMeta::decode(&mut c).unwrap();
        c.finish().unwrap();
        back
    }

    #[test]
    fn metadata_round_trips() {
        let m = ObjectMeta {
            kind: ObjectKind::Symlink,
            mode: 0o4755,
            uid: 1000,
            gid: u32::MAX,
            mtime_ns: -1_500_000_000,
            sparse: true,
        };
        assert_eq!(round_trip(Some(m)), Some(m));
        assert_eq!(round_trip(None), None);
    }

    #[test]
    fn bad_blocks_are_refused() {
        for (i, v) in [(0usize, 7u8), (1, 2), (5, 1)] {
            let mut b = Vec::new();
            ObjectMeta::encode(
                Some(&ObjectMeta {
                    kind: ObjectKind::File,
                    mode: 0o644,
                    uid: 0,
                    gid: 0,
                    mtime_ns: 0,
                    sparse: false,
                }),
                &mut b,
            );
            b[i] = v;
            let mut c = Cursor::new(&b, "index entry");
            assert!(ObjectMeta::decode(&mut c).is_err(), "byte {i} = {v}");
        }
        // kind 0 with a field set
        let mut b = vec![0u8; META_LEN];
        b[10] = 1;
        assert!(ObjectMeta::decode(&mut Cursor::new(&b, "index entry")).is_err());
    }
}
