//! What a tape request carries for the executor, typed: a write's source file and the stamp it
//! had when the job was planned, a read's copy on tape and where it goes. Stored as JSON in
//! `reel_tape_requests.detail` (cartridge tasks carry [`crate::cartridge_task::CartridgeTask`]
//! there instead). A request is parsed once, whole: a detail this reel cannot read fails that
//! request alone, with its id and what is wrong, and is never retried. Fields added after the
//! first release are optional, so requests planned by an earlier reel still run.

use std::path::PathBuf;

use reel_engine::catalogue::CopyLocation;
use reel_engine::format::{ObjectKind, ObjectMeta};
use reel_engine::session::destination::Overwrite;
use reel_engine::session::source::SourceStamp;
use serde::de::DeserializeOwned;
use serde::{Deserialize, Deserializer, Serialize, Serializer};

use crate::TapeRequest;
use crate::error::{JobsError, Result};

/// What an archive's write request carries.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct WriteDetail {
    /// The source file, as the submission resolved it.
    pub path: PathBuf,
    /// The object's generation this write creates.
    pub generation: u64,
    /// Its size when planned.
    pub size: u64,
    /// File or link (requests planned before links were archived: a regular file).
    #[serde(default = "file_kind")]
    pub kind: ObjectKind,
    /// Modification time when planned (ns), to refuse a file changed since.
    #[serde(default)]
    pub mtime_ns: Option<i64>,
    /// Status change time when planned (ns).
    #[serde(default)]
    pub ctime_ns: Option<i64>,
    /// The root the source must be reached beneath (the job came with an API token's roots).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub confine: Option<PathBuf>,
}

fn file_kind() -> ObjectKind {
    ObjectKind::File
}

impl WriteDetail {
    /// The stamp the file must still have when it is read (size and both times), if the
    /// planner recorded one.
    pub fn planned(&self) -> Option<SourceStamp> {
        Some(SourceStamp {
            size: self.size,
            mtime_ns: self.mtime_ns?,
            ctime_ns: self.ctime_ns?,
        })
    }
}

/// What a recall's read request carries: one copy of one object, and where it goes.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ReadDetail {
    /// The object's generation.
    pub generation: u64,
    /// Block of the container's header record.
    pub container_first_block: u64,
    /// The container's data record size.
    pub record_size: u32,
    /// Byte offset of the object in the container's data stream.
    pub offset: u64,
    /// Its length there.
    pub length: u64,
    /// SHA-256 of its content, as hex.
    #[serde(serialize_with = "sha_hex", deserialize_with = "sha_from_hex")]
    pub sha256: [u8; 32],
    /// The file to create.
    pub dest: PathBuf,
    /// The job's destination directory, which `dest` may not leave.
    pub root: PathBuf,
    /// The object's filesystem metadata, when recorded.
    #[serde(default)]
    pub meta: Option<ObjectMeta>,
    /// What to do with a file already there (requests planned before the policy existed
    /// replaced it).
    #[serde(default = "always")]
    pub overwrite: Overwrite,
    /// Cartridges whose copy was found bad, for the job's result.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub bad_copies: Vec<String>,
    /// The root `root` must be reached beneath (the job came with an API token's roots).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub confine: Option<PathBuf>,
}

fn always() -> Overwrite {
    Overwrite::Always
}

fn sha_hex<S: Serializer>(sha: &[u8; 32], s: S) -> std::result::Result<S::Ok, S::Error> {
    s.serialize_str(&hex::encode(sha))
}

fn sha_from_hex<'de, D: Deserializer<'de>>(d: D) -> std::result::Result<[u8; 32], D::Error> {
    let text = String::deserialize(d)?;
    hex::decode(&text)
        .ok()
        .and_then(|v| <[u8; 32]>::try_from(v).ok())
        .ok_or_else(|| serde::de::Error::custom("not 64 hex digits"))
}

impl ReadDetail {
    /// Read `copy` into `dest` under `root`.
    pub fn of(
        copy: &CopyLocation,
        dest: PathBuf,
        root: PathBuf,
        overwrite: Overwrite,
    ) -> ReadDetail {
        ReadDetail {
            generation: copy.generation,
            container_first_block: copy.container_first_block,
            record_size: copy.record_size,
            offset: copy.offset,
            length: copy.length,
            sha256: copy.sha256,
            dest,
            root,
            meta: copy.meta,
            overwrite,
            bad_copies: Vec::new(),
            confine: None,
        }
    }
}

impl ReadDetail {
    /// The same read from another copy (`copy`): where it goes, how it may overwrite and the
    /// root it is confined to stay; `bad_copies` names the cartridges found bad so far.
    pub fn from_other_copy(&self, copy: &CopyLocation, bad_copies: Vec<String>) -> ReadDetail {
        let mut d = ReadDetail::of(copy, self.dest.clone(), self.root.clone(), self.overwrite);
        d.confine = self.confine.clone();
        d.bad_copies = bad_copies;
        d
    }
}

/// The detail of `r`, parsed whole; a detail this reel cannot read is a permanent failure of
/// that request ([`JobsError::RequestDetail`]).
pub fn parse<T: DeserializeOwned>(r: &TapeRequest) -> Result<T> {
    T::deserialize(&r.detail).map_err(|e| JobsError::RequestDetail {
        request: r.id,
        reason: e.to_string(),
    })
}

/// A detail as stored.
pub fn to_json<T: Serialize>(detail: &T) -> serde_json::Value {
    // Plain structs of strings, paths, integers and enums always serialize; a path that is not
    // UTF-8 was refused at submission.
    serde_json::to_value(detail).unwrap_or(serde_json::Value::Null)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::cartridge_task::tests::request;

    fn read() -> ReadDetail {
        ReadDetail {
            generation: 2,
            container_first_block: 10,
            record_size: 262_144,
            offset: 5,
            length: 3,
            sha256: [0xab; 32],
            dest: "/d/k".into(),
            root: "/d".into(),
            meta: None,
            overwrite: Overwrite::Never,
            bad_copies: vec![],
            confine: Some("/d".into()),
        }
    }

    #[test]
    fn a_read_detail_goes_through_the_table_unchanged() {
        let d = read();
        let back: ReadDetail = parse(&request(to_json(&d))).unwrap();
        assert_eq!(back, d);
        assert_eq!(to_json(&d)["sha256"], "ab".repeat(32));
        assert!(to_json(&d).get("bad_copies").is_none());
    }

    #[test]
    fn a_read_planned_before_the_overwrite_policy_replaces_what_it_finds() {
        let mut v = to_json(&read());
        v.as_object_mut().unwrap().remove("overwrite");
        v.as_object_mut().unwrap().remove("meta");
        let back: ReadDetail = parse(&request(v)).unwrap();
        assert_eq!(back.overwrite, Overwrite::Always);
    }

    #[test]
    fn a_write_planned_before_links_and_stamps_is_a_file_without_a_stamp() {
        let v = serde_json::json!({"path": "/s/a", "generation": 1, "size": 4});
        let w: WriteDetail = parse(&request(v)).unwrap();
        assert_eq!(w.kind, ObjectKind::File);
        assert_eq!(w.planned(), None);
        let v = serde_json::json!({"path": "/s/a", "generation": 1, "size": 4, "kind": "file",
            "mtime_ns": 5, "ctime_ns": 6});
        let w: WriteDetail = parse(&request(v)).unwrap();
        assert_eq!(
            w.planned(),
            Some(SourceStamp {
                size: 4,
                mtime_ns: 5,
                ctime_ns: 6
            })
        );
    }

    #[test]
    fn an_unreadable_detail_names_the_request_and_the_field() {
        let mut v = to_json(&read());
        v["sha256"] = serde_json::json!("xyz");
        let e = parse::<ReadDetail>(&request(v)).unwrap_err();
        assert!(
            matches!(e, JobsError::RequestDetail { request: 7, .. }),
            "{e}"
        );
        assert!(e.to_string().contains("hex"), "{e}");
        assert!(e.is_permanent());
        let e = parse::<WriteDetail>(&request(serde_json::json!({"path": "/a"}))).unwrap_err();
        assert!(e.to_string().contains("generation"), "{e}");
    }
}
